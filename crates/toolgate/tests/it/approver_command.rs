//! `toolgate serve --approver command:PROG` through the spawned binary: small
//! shell scripts answer (or fail to), and every call still gets its one
//! decision on stdout; the questions never reach stdout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use serde_json::{json, Value};

use crate::support::{self, project_dir, Broker};

/// A script in `dir`, executable.
fn script(dir: &Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn call(id: &str, command: &str) -> String {
    json!({"type":"tool_call","callID":id,"tool":"bash","input":{"command":command}}).to_string()
}

/// Start serve with the approver, send the calls, wait for each decision.
fn decide(
    name: &str,
    body: &str,
    extra: &[&str],
    calls: &[(&str, &str)],
    one_by_one: bool,
) -> (Vec<Value>, std::path::PathBuf) {
    let root = project_dir(name);
    let program = script(&root, "approve.sh", body);
    let mut args = vec!["serve".to_string(), format!("--approver=command:{program}")];
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut broker = Broker::start(&root, &args, &[]);
    for (index, (id, command)) in calls.iter().enumerate() {
        broker.send(&call(id, command));
        if one_by_one {
            broker.wait_for("the decision", |lines| {
                lines
                    .iter()
                    .filter(|l| l.contains("\"type\":\"decision\""))
                    .count()
                    == index + 1
            });
        }
    }
    let want = calls.len();
    broker.wait_for("every decision", |lines| {
        lines
            .iter()
            .filter(|l| l.contains("\"type\":\"decision\""))
            .count()
            == want
    });
    let (status, lines, stderr) = broker.finish();
    assert!(status.success(), "{stderr}");
    let frames: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for frame in &frames {
        assert!(
            frame["type"] == "ready" || frame["type"] == "decision",
            "only ready and decisions reach the agent: {frame}"
        );
    }
    let decisions = frames
        .into_iter()
        .filter(|f| f["type"] == "decision")
        .collect();
    (decisions, root)
}

fn strip(mut decision: Value) -> Value {
    let object = decision.as_object_mut().unwrap();
    object.remove("sessionID");
    object.remove("type");
    decision
}

#[test]
fn answers_from_programs() {
    let failed = |why: &str| format!("the approver program `PROG` failed: {why}");
    // (script body, the decision of `rm -rf build`)
    let table: Vec<(&str, Value)> = vec![
        (
            "echo once",
            json!({"callID":"c1","decision":"allow","source":"user","reason":"the user allowed this call once"}),
        ),
        (
            r#"echo '{"response":"reject","message":"use cargo clean"}'"#,
            json!({"callID":"c1","decision":"deny","source":"user","reason":"the user rejected this call","message":"use cargo clean"}),
        ),
        (
            "echo once; exit 3",
            json!({"callID":"c1","decision":"deny","source":"user","reason":"the user rejected this call","message":failed("it exited with status 3")}),
        ),
        (
            "kill -9 $$",
            json!({"callID":"c1","decision":"deny","source":"user","reason":"the user rejected this call","message":failed("it exited with status 137")}),
        ),
        (
            "echo sure thing",
            json!({"callID":"c1","decision":"deny","source":"user","reason":"the user rejected this call","message":failed("its answer is not once, always, reject or a JSON answer: sure thing")}),
        ),
        (
            "cat >/dev/null",
            json!({"callID":"c1","decision":"deny","source":"user","reason":"the user rejected this call","message":failed("it exited without answering")}),
        ),
        (
            r#"echo '{"response":"always","patterns":["*"]}'"#,
            json!({"callID":"c1","decision":"deny","source":"user","reason":"the user rejected this call","message":failed("its answer's `patterns` [\"*\"] is not one of the request's alwaysOptions")}),
        ),
        (
            r#"echo '{"response":"always","expiresIn":0}'"#,
            json!({"callID":"c1","decision":"deny","source":"user","reason":"the user rejected this call","message":failed("its answer's `expiresIn` 0 is not a whole number of seconds from 1 to 315360000")}),
        ),
    ];
    for (index, (body, mut want)) in table.into_iter().enumerate() {
        let (decisions, root) = decide(
            &format!("cmd{index}"),
            body,
            &[],
            &[("c1", "rm -rf build")],
            false,
        );
        if let Some(message) = want.get("message").and_then(Value::as_str) {
            let program = root.join("approve.sh").display().to_string();
            want["message"] = json!(message.replace("PROG", &program));
        }
        assert_eq!(strip(decisions[0].clone()), want, "{body}");
    }
}

/// The program reads the request, one JSON line, on its stdin.
#[test]
fn the_program_gets_the_request() {
    let (decisions, root) = decide(
        "cmdseen",
        r#"read -r line; printf '%s\n' "$line" > "$(dirname "$0")/seen.json"; echo once"#,
        &[],
        &[("c1", "rm -rf build")],
        false,
    );
    assert_eq!(decisions[0]["decision"], "allow");
    let seen: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("seen.json")).unwrap()).unwrap();
    assert_eq!(seen["type"], "permission_request");
    assert_eq!(seen["callID"], "c1");
    assert_eq!(seen["title"], "rm -rf build");
    assert_eq!(seen["metadata"]["command"], "rm -rf build");
}

/// `always` with a narrower entry: the grant covers exactly that.
#[test]
fn always_with_patterns_grants_them() {
    let body = r#"read -r line
case "$line" in
  *'"title":"git commit -m one"'*) echo '{"response":"always","patterns":["git commit -m one"]}' ;;
  *) echo reject ;;
esac"#;
    let (decisions, _) = decide(
        "cmdalways",
        body,
        &[],
        &[
            ("c1", "git commit -m one"),
            ("c2", "git commit -m one"),
            ("c3", "git commit -m two"),
        ],
        true,
    );
    let by_id = |id: &str| {
        decisions
            .iter()
            .find(|d| d["callID"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(by_id("c1")["decision"], "allow");
    assert_eq!(by_id("c1")["source"], "user");
    assert_eq!(by_id("c2")["decision"], "allow");
    assert_eq!(by_id("c2")["source"], "grant");
    assert_eq!(by_id("c3")["decision"], "deny", "{decisions:?}");
}

/// `always` with `expiresIn`: passed on as the answer's own, so the grant
/// lasts that long and the decision says so.
#[test]
fn always_with_a_lifetime_passes_it_on() {
    let body = r#"read -r line
echo '{"response":"always","expiresIn":1800}'"#;
    let (decisions, _) = decide(
        "cmdtimed",
        body,
        &[],
        &[("c1", "cargo build"), ("c2", "cargo build --release")],
        true,
    );
    assert_eq!(
        decisions[0]["reason"],
        "the user allowed this call and granted its `always` patterns for the session for 30 minutes"
    );
    assert_eq!(decisions[1]["source"], "grant", "{decisions:?}");
    assert!(
        decisions[1]["rule"]["expiresAt"].as_u64().is_some(),
        "{decisions:?}"
    );
}

/// Several questions at once: a program that waits for the second call's
/// program does not hold the second call back.
#[test]
fn questions_run_side_by_side() {
    let body = r#"read -r line
dir="$(dirname "$0")"
case "$line" in
  *'"callID":"first"'*) while [ ! -f "$dir/gate" ]; do sleep 0.05; done; echo once ;;
  *) touch "$dir/gate"; echo once ;;
esac"#;
    let (decisions, _) = decide(
        "cmdparallel",
        body,
        &["--ask-timeout", "60"],
        &[("first", "rm -rf a"), ("second", "rm -rf b")],
        false,
    );
    // The first program can only answer after the second one ran: were the
    // programs run one after the other, the first would wait out the
    // 60-second timeout and be denied. (Which decision is written first is
    // a race between two processes, so the order is not asserted.)
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    for id in ["first", "second"] {
        let decision = decisions
            .iter()
            .find(|d| d["callID"] == id)
            .unwrap_or_else(|| panic!("no decision for {id}: {decisions:?}"));
        assert_eq!(decision["decision"], "allow", "{decisions:?}");
        assert_eq!(decision["source"], "user", "{decisions:?}");
    }
}

/// The answer counts when the program exits, not when its stdout closes:
/// a background child that inherited the pipe (and outlives the program)
/// does not hold the decision back until the ask times out.
#[test]
fn a_background_child_holding_stdout_does_not_delay_the_answer() {
    let root = project_dir("cmdbackground");
    let program = script(
        &root,
        "approve.sh",
        r#"echo once
sleep 30 2>/dev/null &
echo $! > "$(dirname "$0")/background"
exit 0"#,
    );
    let args = [
        "serve".to_string(),
        format!("--approver=command:{program}"),
        "--ask-timeout".to_string(),
        "60".to_string(),
    ];
    let mut broker = Broker::start(&root, &args, &[]);
    let asked = std::time::Instant::now();
    broker.send(&call("c1", "rm -rf build"));
    broker.wait_for("the decision", |lines| {
        lines.iter().any(|l| l.contains("\"type\":\"decision\""))
    });
    let waited = asked.elapsed();
    let background = std::fs::read_to_string(root.join("background")).unwrap_or_default();
    let _ = std::process::Command::new("kill")
        .arg(background.trim())
        .status();
    let (status, lines, stderr) = broker.finish();
    assert!(status.success(), "{stderr}");
    assert!(
        waited < std::time::Duration::from_secs(5),
        "the decision took {waited:?}"
    );
    let decision: Value = serde_json::from_str(
        lines
            .iter()
            .find(|l| l.contains("\"type\":\"decision\""))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(decision["decision"], "allow", "{decision}");
    assert_eq!(decision["source"], "user", "{decision}");
}

/// A program that hangs past the ask timeout: the call is denied (timeout)
/// and the program is killed.
#[test]
fn a_hanging_program_times_out_and_is_killed() {
    let (decisions, root) = decide(
        "cmdhang",
        r#"echo $$ > "$(dirname "$0")/pid"; sleep 600; echo once"#,
        &["--ask-timeout", "1"],
        &[("c1", "rm -rf build")],
        false,
    );
    assert_eq!(decisions[0]["decision"], "deny");
    assert_eq!(decisions[0]["source"], "timeout");
    let pid = std::fs::read_to_string(root.join("pid")).unwrap();
    let proc = format!("/proc/{}", pid.trim());
    let start = std::time::Instant::now();
    while Path::new(&proc).exists() {
        // A zombie is dead too.
        let status = std::fs::read_to_string(format!("{proc}/status")).unwrap_or_default();
        if status.contains("State:\tZ") {
            break;
        }
        assert!(
            start.elapsed() < support::PATIENCE,
            "the program still runs"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `--approver tty` without a controlling terminal: exit 2, saying why;
/// a bad `--approver` value is refused by the flag parser.
#[test]
fn approver_flag_errors() {
    let root = project_dir("ttynone");
    let output = std::process::Command::new("setsid")
        .arg(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--approver", "tty"])
        .current_dir(&root)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("toolgate: --approver tty: cannot open /dev/tty:"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
    for (value, message) in [
        (
            "gui",
            "unknown approver `gui` (expected tty or command:PROG)",
        ),
        (
            "command:",
            "command: needs a program, e.g. command:./approve.sh",
        ),
        (
            "command:true --listen unix:/nonexistent/x.sock",
            "--approver works with stdin/stdout only; with --listen, run `toolgate approve` beside the broker",
        ),
    ] {
        let mut words = value.split(' ');
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["serve", "--approver", words.next().unwrap()])
            .args(words)
            .current_dir(&root)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(message), "{stderr}");
    }
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["hook", "claude", "--approver", "tty"])
        .current_dir(&root)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unexpected argument '--approver'"),
        "{stderr}"
    );
}

/// With an approver, the agent on stdin is not asked and cannot answer: a
/// `permission_response` from it is refused as for an unknown id, and the
/// approver's answer decides.
#[test]
fn the_agent_cannot_answer_for_the_approver() {
    let root = project_dir("cmdagent");
    let program = script(
        &root,
        "approve.sh",
        r#"read -r line
dir="$(dirname "$0")"
printf '%s' "$line" | sed 's/.*"permissionID":"\([^"]*\)".*/\1/' > "$dir/id.tmp"
mv "$dir/id.tmp" "$dir/id"
while [ ! -f "$dir/go" ]; do sleep 0.05; done
echo '{"response":"reject","message":"from the program"}'"#,
    );
    let args = vec!["serve".to_string(), format!("--approver=command:{program}")];
    let mut broker = Broker::start(&root, &args, &[]);
    broker.send(&call("c1", "rm -rf build"));
    let start = std::time::Instant::now();
    while !root.join("id").exists() {
        assert!(start.elapsed() < support::PATIENCE, "the program never ran");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let id = std::fs::read_to_string(root.join("id")).unwrap();
    broker.send(
        &json!({"type":"permission_response","permissionID":id,"response":"once"}).to_string(),
    );
    broker.wait_for("the error", |lines| {
        lines.iter().any(|l| l.contains("unknown_permission"))
    });
    std::fs::write(root.join("go"), "").unwrap();
    broker.wait_for("the decision", |lines| {
        lines.iter().any(|l| l.contains("\"type\":\"decision\""))
    });
    let (_, lines, _) = broker.finish();
    let frames: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(frames[1]["code"], "unknown_permission");
    assert_eq!(frames[2]["decision"], "deny");
    assert_eq!(frames[2]["message"], "from the program");
    assert_eq!(frames.len(), 3, "{frames:?}");
}

/// The agent's own pipe is not an answerer when an approver is configured
/// (issue 25 item 2): a `hello` as approver on stdin is refused, the
/// question never reaches stdout, and an answer sent there anyway is
/// refused; the call is decided by the approver (here: by its silence and
/// the ask timeout), never by the agent with source `user`.
#[test]
fn the_agent_cannot_approve_itself() {
    let root = project_dir("approver-self");
    // An approver that never answers: reads its question and sleeps.
    let program = script(&root, "approve.sh", "cat >/dev/null; sleep 30");
    let args = vec![
        "serve".to_string(),
        format!("--approver=command:{program}"),
        "--mode".to_string(),
        "ask".to_string(),
        "--ask-timeout".to_string(),
        "2".to_string(),
    ];
    let mut broker = Broker::start(&root, &args, &[]);
    broker.send(r#"{"type":"hello","role":"approver","client":"agent"}"#);
    broker.send(&call("c1", "rm -rf build"));
    // The agent answers the question if it sees one, and guesses otherwise.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let seen: Vec<String> = broker
        .lines()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|f| f["type"] == "permission_request")
        .filter_map(|f| f["permissionID"].as_str().map(str::to_string))
        .collect();
    for id in seen.iter().map(String::as_str).chain(["per_1", "1"]) {
        broker.send(&format!(
            r#"{{"type":"permission_response","permissionID":"{id}","response":"once"}}"#
        ));
    }
    broker.wait_for("the decision", |lines| {
        lines.iter().any(|l| l.contains("\"type\":\"decision\""))
    });
    let (_, lines, stderr) = broker.finish();
    let frames: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        frames.iter().all(|f| f["type"] != "permission_request"),
        "a question reached the agent: {lines:?}"
    );
    let hello_refused = frames.iter().any(|f| {
        f["type"] == "error"
            && f["code"] == "forbidden"
            && f["message"].as_str().unwrap_or("").contains("approver")
    });
    assert!(
        hello_refused,
        "the hello was not refused: {lines:?}\n{stderr}"
    );
    let decision = frames.iter().find(|f| f["type"] == "decision").unwrap();
    assert_eq!(decision["decision"], "deny", "{decision}");
    assert_ne!(decision["source"], "user", "{decision}");
}
