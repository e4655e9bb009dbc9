//! The managed layer through the spawned binary (`--managed FILE`,
//! `TOOLGATE_MANAGED`): a managed deny beats `--permission`,
//! `TOOLGATE_PERMISSION`, a grant kept in the state directory and the
//! answers to questions (an `always` given before, a `once` given after the
//! policy was reloaded); a managed ask cannot be granted away; the managed
//! mode is a floor for `--mode` and `set_mode`, and a reload that moves it
//! tells each session it moves (on stdio and on a socket, where only the
//! session's own connections and observers hear it); a managed policy that cannot
//! be used stops every command that builds a policy (exit 2, or a hook's
//! denial); `ready.policySources`, `check`, the audit log, `policy
//! validate`, `hook`, `mcp` and `replay` name it. The machine's
//! `/etc/toolgate/managed.json` is never touched: its lookup and its
//! owner and mode checks are unit-tested with an injected path
//! (`setup::tests`), and through the binary in a mount namespace where
//! `/etc` is an overlay holding a file of the test's own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::support::{self, Broker};

/// Write `policy` as `NAME` in `dir`; its absolute path.
fn write(dir: &Path, name: &str, policy: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, policy.to_string()).unwrap();
    path
}

/// `serve --project-root ROOT ARGS`, with `env`.
fn serve(root: &Path, args: &[&str], env: &[(&str, &str)]) -> Broker {
    let mut all: Vec<String> = vec!["serve".into(), "--project-root".into()];
    all.push(root.to_string_lossy().into_owned());
    all.extend(args.iter().map(|arg| arg.to_string()));
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    Broker::start(root, &all, &env)
}

/// The first frame that `pick` accepts, once there is one.
fn frame(broker: &Broker, what: &str, pick: impl Fn(&Value) -> bool) -> Value {
    let found = |lines: &[String]| {
        lines
            .iter()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|frame| pick(frame))
    };
    broker.wait_for(what, |lines| found(lines).is_some());
    found(&broker.lines()).unwrap()
}

fn decision(broker: &Broker, call: &str) -> Value {
    frame(broker, &format!("the decision of {call}"), |frame| {
        frame["type"] == "decision" && frame["callID"] == call
    })
}

fn request(broker: &Broker, call: &str) -> Value {
    frame(broker, &format!("the question of {call}"), |frame| {
        frame["type"] == "permission_request" && frame["callID"] == call
    })
}

fn call(call: &str, tool: &str, input: Value) -> String {
    json!({"type": "tool_call", "sessionID": "s", "callID": call, "tool": tool, "input": input})
        .to_string()
}

fn answer(id: &Value, response: &str, more: Value) -> String {
    let mut frame =
        json!({"type": "permission_response", "permissionID": id, "response": response});
    if let (Some(frame), Some(more)) = (frame.as_object_mut(), more.as_object()) {
        frame.extend(more.clone());
    }
    frame.to_string()
}

/// `decision SOURCE ORIGIN`: what decided, and where the rule came from.
fn said(frame: &Value) -> String {
    format!(
        "{} {} {}",
        frame["decision"].as_str().unwrap_or("?"),
        frame["source"].as_str().unwrap_or("?"),
        frame["rule"]["origin"].as_str().unwrap_or("-")
    )
}

#[test]
fn a_managed_deny_beats_an_override_a_kept_grant_and_the_answers() {
    let root = support::project_dir("deny-root");
    let state = support::state_dir("deny-state");
    let dir = support::project_dir("deny-files");
    let state_arg = state.to_string_lossy().into_owned();

    // Without the managed policy: `always` answers grant every edit and
    // `git push *` to the project, kept in the state directory.
    let mut before = serve(&root, &["--state-dir", &state_arg], &[]);
    before.send(&call(
        "c1",
        "Edit",
        json!({"file_path": "src/a.rs", "old_string": "a", "new_string": "b"}),
    ));
    let asked = request(&before, "c1");
    before.send(&answer(
        &asked["permissionID"],
        "always",
        json!({"scope": "project"}),
    ));
    assert_eq!(said(&decision(&before, "c1")), "allow user -");
    before.send(&call(
        "c2",
        "Bash",
        json!({"command": "git push origin main"}),
    ));
    let asked = request(&before, "c2");
    before.send(&answer(
        &asked["permissionID"],
        "always",
        json!({"scope": "project"}),
    ));
    assert_eq!(said(&decision(&before, "c2")), "allow user -");
    let (status, _, stderr) = before.finish();
    assert!(status.success(), "{stderr}");

    // With it: the override and TOOLGATE_PERMISSION allow, the grants cover,
    // and the managed rules deny all the same.
    let managed = write(
        &dir,
        "managed.json",
        &json!({"permission": {"bash": {"git push *": "deny"}, "edit": {"secrets/*": "deny"}}}),
    );
    let origin = format!("managed:{}", managed.display());
    let managed_arg = managed.to_string_lossy().into_owned();
    let mut after = serve(
        &root,
        &[
            "--state-dir",
            &state_arg,
            "--managed",
            &managed_arg,
            "--permission",
            r#"{"bash":{"git push *":"allow"},"edit":{"secrets/*":"allow"}}"#,
        ],
        &[("TOOLGATE_PERMISSION", r#"{"bash":"allow"}"#)],
    );
    let ready = frame(&after, "ready", |frame| frame["type"] == "ready");
    assert_eq!(
        ready["policySources"],
        json!(["built-in", "TOOLGATE_PERMISSION", "--permission", origin])
    );
    after.send(&call(
        "d1",
        "Bash",
        json!({"command": "git push origin main"}),
    ));
    after.send(&call(
        "d2",
        "Edit",
        json!({"file_path": "secrets/key", "old_string": "a", "new_string": "b"}),
    ));
    after.send(&call(
        "d3",
        "Edit",
        json!({"file_path": "src/b.rs", "old_string": "a", "new_string": "b"}),
    ));
    after.send(&call(
        "d4",
        "Bash",
        json!({"command": "env X=1 git push --force"}),
    ));
    let d1 = decision(&after, "d1");
    assert_eq!(said(&d1), format!("deny rule {origin}"));
    assert_eq!(
        d1["reason"],
        format!("the managed rule `bash: git push *` ({origin}) denies `git push origin main`: no other layer, grant or answer lifts a managed denial")
    );
    assert_eq!(said(&decision(&after, "d2")), format!("deny rule {origin}"));
    // The kept project grant is in force where nothing managed stands in its way.
    assert_eq!(said(&decision(&after, "d3")), "allow grant project grant");
    assert_eq!(said(&decision(&after, "d4")), format!("deny rule {origin}"));
    let (status, lines, stderr) = after.finish();
    assert!(status.success(), "{stderr}");
    assert_eq!(support::count_type(&lines, "permission_request"), 0);
}

#[test]
fn a_once_answer_after_a_reload_cannot_allow_what_the_managed_policy_now_denies() {
    let root = support::project_dir("reload-root");
    let dir = support::project_dir("reload-files");
    let managed = write(&dir, "managed.json", &json!({}));
    let managed_arg = managed.to_string_lossy().into_owned();
    let mut broker = serve(&root, &["--managed", &managed_arg], &[]);
    broker.send(&call(
        "c1",
        "Bash",
        json!({"command": "git push origin main"}),
    ));
    let asked = request(&broker, "c1");
    // The administrator adds the rule; the broker reloads its policy.
    write(
        &dir,
        "managed.json",
        &json!({"permission": {"bash": {"git push *": "deny"}}}),
    );
    broker.signal("HUP");
    let decided = decision(&broker, "c1");
    assert_eq!(
        said(&decided),
        format!("deny rule managed:{}", managed.display())
    );
    broker.send(&answer(&asked["permissionID"], "once", json!({})));
    let error = frame(&broker, "the refused answer", |frame| {
        frame["type"] == "error"
    });
    assert_eq!(error["code"], "already_resolved");
    let (status, lines, _) = broker.finish();
    assert!(status.success());
    assert_eq!(support::count_type(&lines, "decision"), 1);
}

#[test]
fn a_managed_ask_cannot_be_granted_away() {
    let root = support::project_dir("ask-root");
    let state = support::state_dir("ask-state");
    let dir = support::project_dir("ask-files");
    let state_arg = state.to_string_lossy().into_owned();
    // A project grant of `npm publish *`, made before the managed policy.
    let mut before = serve(&root, &["--state-dir", &state_arg], &[]);
    before.send(&call(
        "c1",
        "Bash",
        json!({"command": "npm publish --tag next"}),
    ));
    let asked = request(&before, "c1");
    assert_eq!(asked["always"], json!(["npm publish *"]));
    before.send(&answer(
        &asked["permissionID"],
        "always",
        json!({"scope": "project"}),
    ));
    assert_eq!(said(&decision(&before, "c1")), "allow user -");
    before.finish();

    let managed = write(
        &dir,
        "m.json",
        &json!({"permission": {"bash": {"npm publish *": "ask"}}}),
    );
    let origin = format!("managed:{}", managed.display());
    let managed_arg = managed.to_string_lossy().into_owned();
    let mut broker = serve(
        &root,
        &[
            "--state-dir",
            &state_arg,
            "--mode",
            "auto",
            "--permission",
            r#"{"bash":{"npm *":"allow"}}"#,
        ],
        &[("TOOLGATE_MANAGED", &managed_arg)],
    );
    // Asked in `auto`, over the override and the kept grant, offering no `always`.
    broker.send(&call(
        "d1",
        "Bash",
        json!({"command": "npm publish --tag next"}),
    ));
    let asked = request(&broker, "d1");
    assert_eq!(asked["always"], json!([]));
    assert_eq!(asked["alwaysOptions"], json!([]));
    assert_eq!(
        asked["metadata"]["reason"],
        format!("the managed rule `bash: npm publish *` ({origin}) asks before `npm publish --tag next`, every time: no grant answers a managed question")
    );
    // A narrower `always` is refused; a bare one counts as `once`.
    broker.send(&answer(
        &asked["permissionID"],
        "always",
        json!({"patterns": ["npm publish *"]}),
    ));
    let error = frame(&broker, "the refused patterns", |frame| {
        frame["type"] == "error"
    });
    assert_eq!(
        error["message"],
        format!("the request `{}` is asked by the managed rule `bash: npm publish *` ({origin}), which asks every time and offers no `alwaysOptions`; answer it without `patterns`", asked["permissionID"].as_str().unwrap())
    );
    broker.send(&answer(&asked["permissionID"], "always", json!({})));
    let d1 = decision(&broker, "d1");
    assert_eq!(said(&d1), "allow user -");
    assert_eq!(
        d1["reason"],
        format!("the user allowed this call once: the managed rule `bash: npm publish *` ({origin}) asks every time, so `always` granted nothing")
    );
    // So the same call asks again, and `once` allows it once.
    broker.send(&call(
        "d2",
        "Bash",
        json!({"command": "npm publish --tag next"}),
    ));
    let again = request(&broker, "d2");
    broker.send(&answer(&again["permissionID"], "once", json!({})));
    assert_eq!(said(&decision(&broker, "d2")), "allow user -");
    broker.send(r#"{"type":"list_grants","sessionID":"s"}"#);
    let grants = frame(&broker, "the grants", |frame| frame["type"] == "grants");
    let patterns: Vec<&Value> = grants["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|grant| &grant["pattern"])
        .collect();
    assert_eq!(patterns, vec![&json!("npm publish *")], "{grants}");
    broker.finish();
}

#[test]
fn the_managed_mode_is_a_floor_for_the_flag_and_set_mode() {
    let root = support::project_dir("floor-root");
    let dir = support::project_dir("floor-files");
    let managed = write(&dir, "m.json", &json!({"mode": "ask"}));
    let origin = format!("managed:{}", managed.display());
    let managed_arg = managed.to_string_lossy().into_owned();
    let mut broker = serve(
        &root,
        &["--mode", "auto"],
        &[("TOOLGATE_MANAGED", &managed_arg)],
    );
    let ready = frame(&broker, "ready", |frame| frame["type"] == "ready");
    assert_eq!(ready["mode"], "ask");
    let edit = json!({"file_path": "a.rs", "old_string": "a", "new_string": "b"});
    broker.send(&call("c1", "Edit", edit.clone()));
    let asked = request(&broker, "c1");
    broker.send(&answer(&asked["permissionID"], "reject", json!({})));
    assert_eq!(said(&decision(&broker, "c1")), "deny user -");
    broker.send(r#"{"type":"set_mode","sessionID":"s","mode":"bypassPermissions"}"#);
    let changed = frame(&broker, "mode_changed", |frame| {
        frame["type"] == "mode_changed"
    });
    assert_eq!(changed["mode"], "ask");
    assert_eq!(changed["previous"], "ask");
    assert_eq!(
        changed["reason"],
        format!("the managed policy ({origin}) keeps every session at ask mode or stricter, so auto acts as ask")
    );
    broker.send(&call("c2", "Edit", edit));
    request(&broker, "c2");
    broker.send(r#"{"type":"session_start","sessionID":"t","mode":"auto"}"#);
    let started = frame(&broker, "session_started", |frame| {
        frame["type"] == "session_started"
    });
    assert_eq!(started["mode"], "ask");
    broker.send(r#"{"type":"set_mode","sessionID":"t","mode":"plan"}"#);
    let stricter = frame(&broker, "the second mode_changed", |frame| {
        frame["type"] == "mode_changed" && frame["sessionID"] == "t"
    });
    assert_eq!(stricter["mode"], "plan");
    assert!(stricter.get("reason").is_none(), "{stricter}");
    broker.finish();
}

/// A reload that moves the managed floor is news for each session it moves,
/// up (`auto` held to `ask`: a call `auto` allowed now asks) and back down
/// (the pending call `auto` allows is then decided), with a `reason` naming
/// the managed policy; a session stricter than the floor hears nothing. A
/// managed policy that cannot be read on reload changes nothing: the floor
/// in force stays.
#[test]
fn a_reload_that_moves_the_floor_tells_each_session_it_moves() {
    let root = support::project_dir("moved-root");
    let dir = support::project_dir("moved-files");
    let managed = write(&dir, "m.json", &json!({}));
    let origin = format!("managed:{}", managed.display());
    let managed_arg = managed.to_string_lossy().into_owned();
    let mut broker = serve(&root, &["--managed", &managed_arg], &[]);
    let changes = |lines: &[String]| -> Vec<Value> {
        lines
            .iter()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|frame| frame["type"] == "mode_changed")
            .collect()
    };
    let started = |broker: &Broker, id: &str| {
        frame(broker, "session_started", |frame| {
            frame["type"] == "session_started" && frame["sessionID"] == id
        })
    };
    broker.send(r#"{"type":"session_start","sessionID":"s","mode":"auto"}"#);
    assert_eq!(started(&broker, "s")["mode"], "auto");
    broker.send(r#"{"type":"session_start","sessionID":"p","mode":"plan"}"#);
    assert_eq!(started(&broker, "p")["mode"], "plan");
    let edit = json!({"file_path": "a.rs", "old_string": "a", "new_string": "b"});
    broker.send(&call("c1", "Edit", edit.clone()));
    assert_eq!(said(&decision(&broker, "c1")), "allow mode -");

    // Up: `s` is held to `ask`; `p`, in plan, stays.
    write(&dir, "m.json", &json!({"mode": "ask"}));
    broker.signal("HUP");
    broker.wait_for("the first mode_changed", |lines| changes(lines).len() == 1);
    let up = &changes(&broker.lines())[0];
    assert_eq!(up["sessionID"], "s");
    assert_eq!(up["mode"], "ask");
    assert_eq!(up["previous"], "auto");
    assert_eq!(
        up["reason"],
        format!("the managed policy ({origin}) keeps every session at ask mode or stricter, so auto acts as ask")
    );
    assert!(
        up["reminder"]
            .as_str()
            .unwrap()
            .contains("Ask mode is active"),
        "{up}"
    );
    broker.send(&call("c2", "Edit", edit.clone()));
    let asked = request(&broker, "c2");

    // Down: back in `auto`, which allows the pending call.
    write(&dir, "m.json", &json!({}));
    broker.signal("HUP");
    let c2 = decision(&broker, "c2");
    assert_eq!(said(&c2), "allow mode -");
    let down = &changes(&broker.lines())[1];
    assert_eq!(down["sessionID"], "s");
    assert_eq!(down["mode"], "auto");
    assert_eq!(down["previous"], "ask");
    assert_eq!(
        down["reason"],
        format!("the managed policy ({origin}) no longer keeps sessions at ask mode or stricter, so the session is back in auto mode")
    );
    // The news before what follows from it.
    let lines = broker.lines();
    let at = |pick: &dyn Fn(&Value) -> bool| {
        lines
            .iter()
            .position(|line| pick(&serde_json::from_str::<Value>(line).unwrap()))
            .unwrap()
    };
    let news = at(&|frame| frame["type"] == "mode_changed" && frame["mode"] == "auto");
    let resolved = at(&|frame| {
        frame["type"] == "permission_resolved" && frame["permissionID"] == asked["permissionID"]
    });
    let decided = at(&|frame| frame["type"] == "decision" && frame["callID"] == "c2");
    assert!(news < resolved && resolved < decided, "{lines:#?}");

    // A managed policy that cannot be read on reload leaves the floor in force.
    write(&dir, "m.json", &json!({"mode": "ask"}));
    broker.signal("HUP");
    broker.wait_for("the third mode_changed", |lines| changes(lines).len() == 3);
    std::fs::remove_file(&managed).unwrap();
    broker.signal("HUP");
    broker.wait_for_stderr(&format!(
        "toolgate: SIGHUP received: the policy was not reloaded: {origin}: cannot read the managed policy: No such file or directory (os error 2); toolgate does not run without the rules it sets; keeping the policy in force"
    ));
    broker.send(&call("c3", "Edit", edit));
    request(&broker, "c3");
    let (status, lines, stderr) = broker.finish();
    assert!(status.success(), "{stderr}");
    // Three moves of `s`, nothing for `p`, nothing for the failed reload.
    let told: Vec<String> = changes(&lines)
        .iter()
        .map(|frame| format!("{} {}", frame["sessionID"], frame["mode"]))
        .collect();
    assert_eq!(told, [r#""s" "ask""#, r#""s" "auto""#, r#""s" "ask""#]);
}

/// On a socket, a session's move is news for the connections that started
/// it, set its mode or sent calls in it (and for observers), not for the
/// others; a session the broker forgot (only seen in a call) is news for
/// the connection using it, one that ended for nobody.
#[cfg(unix)]
#[test]
fn a_moved_floor_is_news_for_the_connections_of_each_session_and_observers() {
    use std::time::Duration;
    let dir = support::project_dir("moved-socket");
    let root = dir.join("project");
    std::fs::create_dir_all(&root).unwrap();
    let files = support::project_dir("moved-socket-files");
    let managed = write(&files, "m.json", &json!({}));
    let managed_arg = managed.to_string_lossy().into_owned();
    let broker =
        support::Listening::start(&dir, &root, &["--mode", "auto", "--managed", &managed_arg]);
    let socket = broker.socket.clone();
    let hello = |client: &str| json!({"type": "hello", "client": client});
    let mut watcher = support::Peer::connect(
        &socket,
        json!({"type": "hello", "role": "observer", "client": "dashboard"}),
    );
    let mut starter = support::Peer::connect(&socket, hello("orchestrator"));
    let mut agent = support::Peer::connect(&socket, hello("agent"));
    let mut other = support::Peer::connect(&socket, hello("other"));
    let mut idle = support::Peer::connect(&socket, hello("idle"));
    let mut implicit = support::Peer::connect(&socket, hello("implicit"));
    let mut ended = support::Peer::connect(&socket, hello("ended"));
    starter.send(json!({"type": "session_start", "sessionID": "s", "mode": "auto"}));
    starter.until("session_started");
    agent.send(
        json!({"type": "tool_call", "sessionID": "s", "callID": "c1", "tool": "Edit",
        "input": {"file_path": "a.rs", "old_string": "a", "new_string": "b"}}),
    );
    assert_eq!(agent.until("decision").pop().unwrap()["decision"], "allow");
    other.send(json!({"type": "set_mode", "sessionID": "t", "mode": "auto"}));
    other.until("mode_changed");
    // A session only seen in a call, forgotten once it was decided, and
    // one that ended.
    implicit.send(
        json!({"type": "tool_call", "sessionID": "u", "callID": "c2", "tool": "Read",
        "input": {"file_path": "a.rs"}}),
    );
    implicit.until("decision");
    ended.send(json!({"type": "session_start", "sessionID": "v", "mode": "auto"}));
    ended.until("session_started");
    ended.send(json!({"type": "session_end", "sessionID": "v"}));
    ended.until("session_ended");
    watcher.quiet(Duration::from_millis(300));

    write(&files, "m.json", &json!({"mode": "ask"}));
    let status = std::process::Command::new("kill")
        .args(["-HUP", &broker.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let news = |peer: &mut support::Peer| {
        let changed = peer.until("mode_changed").pop().unwrap();
        assert_eq!(changed["mode"], "ask", "{changed}");
        changed["sessionID"].as_str().unwrap().to_string()
    };
    assert_eq!(news(&mut starter), "s");
    assert_eq!(news(&mut agent), "s");
    assert_eq!(news(&mut other), "t");
    assert_eq!(news(&mut implicit), "u");
    assert_eq!(news(&mut watcher), "s");
    assert_eq!(news(&mut watcher), "t");
    assert_eq!(news(&mut watcher), "u");
    for peer in [
        &mut starter,
        &mut agent,
        &mut other,
        &mut watcher,
        &mut idle,
        &mut implicit,
        &mut ended,
    ] {
        assert_eq!(peer.quiet(Duration::from_millis(300)), Vec::<Value>::new());
    }
}

/// Run `toolgate ARGS` in `dir` with `env` (none of toolgate's own
/// variables inherited): the exit code, stdout and stderr.
fn run(dir: &Path, args: &[&str], env: &[(&str, &str)], input: &str) -> (i32, String, String) {
    let out = support::toolgate_process(dir, args, env, input.as_bytes());
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_managed_policy_that_cannot_be_used_stops_toolgate() {
    let dir = support::project_dir("unusable");
    let missing = dir.join("missing.json");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"permission":{"bash":"alow"}}"#).unwrap();
    std::fs::write(
        dir.join("rec.jsonl"),
        call("r1", "Bash", json!({"command": "ls"})) + "\n",
    )
    .unwrap();
    let half = dir.join("half.json");
    std::fs::write(&half, r#"{"permission":{},"askTimeoutSeconds":5}"#).unwrap();
    let show = |path: &Path| path.to_string_lossy().into_owned();
    // The command line, the environment, what is said on stderr.
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, String)>, String);
    let cases: Vec<Case> = vec![
        (
            vec!["serve", "--managed", "missing.json"],
            vec![],
            format!("toolgate: invalid policy: managed:{}: cannot read the managed policy: No such file or directory (os error 2); toolgate does not run without the rules it sets\n", missing.display()),
        ),
        (
            vec!["serve"],
            vec![("TOOLGATE_MANAGED", show(&dir))],
            format!("toolgate: invalid policy: managed:{}: cannot read the managed policy: Is a directory (os error 21); toolgate does not run without the rules it sets\n", dir.display()),
        ),
        (
            vec!["check", "--managed", "bad.json", "--", "bash", "ls"],
            vec![],
            format!("toolgate: invalid policy: managed:{}: permission.bash: unknown action `alow` (expected allow, ask or deny)\n", bad.display()),
        ),
        (
            vec!["replay", "--managed", "half.json", "rec.jsonl"],
            vec![],
            format!("toolgate: invalid policy: managed:{}: askTimeoutSeconds: not taken in a managed policy; a managed policy takes only `mode` (a floor) and `permission`\n", half.display()),
        ),
    ];
    for (args, env, expected) in cases {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (code, stdout, stderr) = run(&dir, &args, &env, "");
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}");
        assert_eq!(stderr, expected, "{args:?}");
    }
    // A hook denies the call rather than letting it through.
    let input = json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Read",
        "tool_input": {"file_path": "a.rs"}, "cwd": dir});
    let out = support::hook_process(
        &dir,
        "claude",
        &["--managed", "missing.json"],
        &[],
        input.to_string().as_bytes(),
    );
    let answer = support::hook_answer(&out);
    assert_eq!(
        answer["hookSpecificOutput"]["permissionDecision"], "deny",
        "{answer}"
    );
}

/// The system's `/etc/toolgate/managed.json`, seen by the real binary in a
/// mount namespace of its own where `/etc` is an overlay holding it (the
/// machine's `/etc` is not touched): used when only root can change it;
/// writable by others, owned by another user, or in a directory others can
/// write, it stops `check` and `serve` (exit 2, naming what is wrong) and a
/// hook denies. Skipped where a mount namespace or an overlay cannot be had.
#[cfg(unix)]
#[test]
fn the_system_managed_policy_is_refused_when_others_could_change_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = support::project_dir("system");
    let upper = dir.join("upper");
    let work = dir.join("work");
    let etc = upper.join("toolgate");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let file = write(
        &etc,
        "managed.json",
        &json!({"permission": {"bash": {"git push *": "deny"}}}),
    );
    let mode = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    mode(&upper, 0o755);
    mode(&etc, 0o755);
    mode(&file, 0o644);
    let script = format!(
        "mount --make-rprivate / && mount -t overlay overlay -o lowerdir=/etc,upperdir='{}',workdir='{}' /etc && exec \"$@\"",
        upper.display(),
        work.display()
    );
    let wrapper = ["unshare", "-m", "sh", "-c", script.as_str(), "sh"];
    let probe = std::process::Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            &script,
            "sh",
            "test",
            "-f",
            "/etc/toolgate/managed.json",
        ])
        .output();
    match probe {
        Ok(out) if out.status.success() => {}
        other => {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "skipped: no overlay over /etc in a mount namespace here ({other:?})"
            );
            return;
        }
    }
    let run = |args: &[&str]| {
        let out = support::toolgate_process_via(&wrapper, &dir, args, &[], b"");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let push = ["check", "--", "bash", "git push origin main"];
    // Root's, writable by no one else: in force.
    let (code, stdout, stderr) = run(&push);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains("decided by `bash: git push *` deny (managed:/etc/toolgate/managed.json)"),
        "{stdout}"
    );
    let refused = |why: &str| {
        format!(
            "toolgate: invalid policy: managed:/etc/toolgate/managed.json: cannot trust the managed policy: {why}; the system's managed policy, and every directory above it, must be owned by root and writable by no one else; toolgate does not run without the rules it sets\n"
        )
    };
    let hook_input =
        json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Read",
        "tool_input": {"file_path": "a.rs"}, "cwd": dir})
        .to_string();
    // What to spoil (a mode, or an owner), how it is mended, and what is said.
    enum Change {
        Mode(u32),
        Owner(u32),
    }
    let apply = |path: &Path, change: &Change| match change {
        Change::Mode(bits) => mode(path, *bits),
        Change::Owner(uid) => std::os::unix::fs::chown(path, Some(*uid), None).unwrap(),
    };
    let mut cases = vec![
        (
            file.clone(),
            Change::Mode(0o666),
            Change::Mode(0o644),
            refused("it is writable by its group or others (mode 0o666)"),
        ),
        (
            etc.clone(),
            Change::Mode(0o777),
            Change::Mode(0o755),
            refused("its directory /etc/toolgate is writable by its group or others (mode 0o777)"),
        ),
    ];
    // Only root can give a file away.
    if rustix::process::geteuid().is_root() {
        cases.push((
            file.clone(),
            Change::Owner(65534),
            Change::Owner(0),
            refused("it is owned by uid 65534, not root"),
        ));
        cases.push((
            etc.clone(),
            Change::Owner(65534),
            Change::Owner(0),
            refused("its directory /etc/toolgate is owned by uid 65534, not root"),
        ));
    }
    for (path, spoil, mend, expected) in &cases {
        apply(path, spoil);
        for args in [&push[..], &["serve"][..]] {
            let (code, stdout, stderr) = run(args);
            assert_eq!((code, stdout.as_str()), (2, ""), "{args:?}: {stderr}");
            assert_eq!(stderr, *expected, "{args:?}");
        }
        // A hook denies rather than letting the call through.
        let out = support::toolgate_process_via(
            &wrapper,
            &dir,
            &["hook", "claude"],
            &[],
            hook_input.as_bytes(),
        );
        let answer = support::hook_answer(&out);
        assert_eq!(
            answer["hookSpecificOutput"]["permissionDecision"], "deny",
            "{answer}"
        );
        apply(path, mend);
        assert_eq!(run(&push).0, 1, "mended: {expected}");
    }
}

#[test]
fn check_the_audit_log_hook_mcp_and_replay_name_the_managed_policy() {
    let root = support::project_dir("names");
    let managed = write(
        &root,
        "managed.json",
        &json!({"mode": "ask", "permission": {"bash": {"git push *": "deny", "npm publish *": "ask"}}}),
    );
    let origin = format!("managed:{}", managed.display());
    let allow = r#"{"bash":{"git push *":"allow","npm *":"allow"}}"#;

    // check: the deciding rule, its origin, the floor, and no `always`.
    let (code, text, stderr) = run(
        &root,
        &[
            "check",
            "--managed",
            "managed.json",
            "--permission",
            allow,
            "--",
            "bash",
            "git push origin",
        ],
        &[],
        "",
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        text.contains(&format!("decided by `bash: git push *` deny ({origin})\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("  rule     `bash: git push *` allow (--permission) matches `git push origin`\n  rule     `bash: git push *` deny ({origin}) decides `git push origin`\n")),
        "{text}"
    );
    let (code, text, _) = run(
        &root,
        &[
            "check",
            "--mode",
            "auto",
            "--permission",
            allow,
            "--",
            "bash",
            "npm publish",
        ],
        &[("TOOLGATE_MANAGED", "managed.json")],
        "",
    );
    assert_eq!(code, 3, "{text}");
    assert!(
        text.contains(&format!(
            "mode       ask (auto asked for, held to the floor of the managed policy {origin})\n"
        )),
        "{text}"
    );
    assert!(
        text.contains("  always   grants nothing: a managed rule asks every time\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!("always     grants nothing: the managed rule `bash: npm publish *` ({origin}) asks every time\n")),
        "{text}"
    );
    let (_, json_text, _) = run(
        &root,
        &[
            "check",
            "--json",
            "--mode",
            "auto",
            "--managed",
            "managed.json",
            "--",
            "bash",
            "npm publish",
        ],
        &[],
        "",
    );
    let checked: Value = serde_json::from_str(&json_text).unwrap();
    assert_eq!(
        checked["modeFloor"],
        json!({"asked": "auto", "origin": origin})
    );
    assert_eq!(checked["question"]["always"], json!([]));
    assert_eq!(
        checked["question"]["managed"],
        format!("the managed rule `bash: npm publish *` ({origin})")
    );

    // The audit log: the rule and its origin.
    let audit = root.join("audit.jsonl");
    let audit_arg = audit.to_string_lossy().into_owned();
    let managed_arg = managed.to_string_lossy().into_owned();
    let mut broker = serve(
        &root,
        &[
            "--managed",
            &managed_arg,
            "--audit",
            &audit_arg,
            "--permission",
            allow,
        ],
        &[],
    );
    broker.send(&call("c1", "Bash", json!({"command": "git push origin"})));
    decision(&broker, "c1");
    broker.finish();
    let records: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0]["rule"],
        json!({"permission": "bash", "pattern": "git push *", "action": "deny", "origin": origin, "key": "permission.bash.\"git push *\""})
    );
    assert_eq!(records[0]["mode"], "ask");

    // A hook in-process, its agent in bypassPermissions and the variable allowing.
    let input = json!({"session_id": "h", "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_input": {"command": "git push origin"}, "permission_mode": "bypassPermissions", "cwd": root});
    let out = support::hook_process(
        &root,
        "claude",
        &["--managed", "managed.json"],
        &[("TOOLGATE_PERMISSION", allow)],
        input.to_string().as_bytes(),
    );
    let answer = support::hook_answer(&out);
    assert_eq!(
        answer["hookSpecificOutput"]["permissionDecision"], "deny",
        "{answer}"
    );
    let reason = answer["hookSpecificOutput"]["permissionDecisionReason"]
        .as_str()
        .unwrap();
    assert!(
        reason.contains(&format!("the managed rule `bash: git push *` ({origin})")),
        "{reason}"
    );

    // MCP's permission-prompt tool.
    let lines = [
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "approve",
            "arguments": {"tool_name": "Bash", "input": {"command": "git push origin"}, "tool_use_id": "toolu_1"}}}),
    ]
    .map(|line| line.to_string() + "\n")
    .concat();
    let (code, replies, stderr) = run(
        &root,
        &["mcp", "--managed", "managed.json", "--permission", allow],
        &[],
        &lines,
    );
    assert_eq!(code, 0, "{stderr}");
    let reply: Value = serde_json::from_str(replies.lines().last().unwrap()).unwrap();
    let behavior: Value =
        serde_json::from_str(reply["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(behavior["behavior"], "deny", "{behavior}");
    assert!(
        behavior["message"].as_str().unwrap().contains(&origin),
        "{behavior}"
    );

    // replay: a recorded allowed call, denied under the managed policy.
    let recording = root.join("rec.jsonl");
    std::fs::write(
        &recording,
        format!(
            "{}\n{}\n",
            call("r1", "Bash", json!({"command": "git push origin"})),
            json!({"type": "decision", "sessionID": "s", "callID": "r1", "decision": "allow", "source": "rule", "reason": "x"})
        ),
    )
    .unwrap();
    let (code, out, stderr) = run(
        &root,
        &[
            "replay",
            "--check",
            "--managed",
            "managed.json",
            "--permission",
            allow,
            "rec.jsonl",
        ],
        &[],
        "",
    );
    assert_eq!(code, 1, "{out}{stderr}");
    assert!(out.contains(&origin), "{out}");
}

#[test]
fn policy_validate_shows_what_the_managed_policy_overrides() {
    let root = support::project_dir("validate");
    write(
        &root,
        "managed.json",
        &json!({"mode": "ask", "permission": {"bash": {"git *": "deny"}, "webfetch": {"https://docs.rs/*": "allow"}}}),
    );
    let origin = format!("managed:{}", root.join("managed.json").display());
    write(
        &root,
        "p.json",
        &json!({"mode": "auto", "permission": {"bash": {"*": "ask", "git push *": "allow"}}}),
    );
    let (code, out, stderr) = run(
        &root,
        &["policy", "validate", "--managed", "managed.json", "p.json"],
        &[],
        "",
    );
    assert_eq!(code, 0, "{stderr}");
    let file = root.join("p.json");
    let file = file.display();
    assert_eq!(
        out,
        format!(
            "warning: {file}: permission.bash.\"*\": `bash: *` ask is overridden by the managed `bash: git *` deny ({origin}) wherever that matches: a managed deny or ask is final\n\
             warning: {file}: permission.bash.\"git push *\": `bash: git push *` allow is overridden by the managed `bash: git *` deny ({origin}) for every subject it matches: a managed deny or ask is final, so it never allows\n\
             warning: {origin}: permission.webfetch.\"https://docs.rs/*\": `webfetch: https://docs.rs/*` allow changes nothing: a managed allow only makes an exception to the earlier deny and ask rules of its own managed policy, and none of them overlaps it; it never allows what another layer asks or denies\n\
             warning: p.json: mode: `auto` is held to `ask`, the floor of the managed policy ({origin})\n"
        )
    );
}
