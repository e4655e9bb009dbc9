//! Grants that end (`"expiresIn"` on an `always`), through the spawned
//! binary: a timed grant covers until its end on the broker's clock and not
//! after, is listed with its end (`list_grants`, `grants list`) until then
//! and never after, survives a restart with the same end, is named in the
//! decision that uses it, the audit log and observers' `permission_answered`;
//! a bad lifetime is refused with the question left open; an audit log
//! with a timed grant replays the same way at its recorded times; an
//! in-process hook honours the timed grants of the state directory.
//!
//! Waiting for an end never asserts a speed: a test sleeps until a moment
//! it knows is past the end (the broker set the end before writing the
//! decision the test read, so "read time + lifetime + a margin" is later),
//! and a bound on an end is checked between clock readings taken before
//! the answer was sent and after its decision was read.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::support::{self, Broker};

/// Wall-clock milliseconds since the Unix epoch, as the broker reads them.
fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Sleep until the wall clock reads at least `ms`.
fn sleep_until(ms: u64) {
    while wall_ms() < ms {
        std::thread::sleep(Duration::from_millis(ms.saturating_sub(wall_ms()).max(1)));
    }
}

fn start(root: &Path, args: &[&str]) -> Broker {
    let mut all = vec![
        "serve".to_string(),
        "--project-root".to_string(),
        root.to_string_lossy().into_owned(),
        "--mode".to_string(),
        "ask".to_string(),
    ];
    all.extend(args.iter().map(|arg| arg.to_string()));
    let broker = Broker::start(root, &all, &[]);
    broker.wait_for("ready", |lines| !lines.is_empty());
    broker
}

/// Send `frame` and wait for the first frame after those already written
/// that `wanted` accepts; return it.
fn exchange(broker: &mut Broker, frame: Value, wanted: impl Fn(&Value) -> bool) -> Value {
    let before = broker.lines().len();
    broker.send(&frame.to_string());
    let found = |lines: &[String]| {
        lines[before.min(lines.len())..]
            .iter()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .find(|frame| wanted(frame))
    };
    broker.wait_for(&format!("the answer to {frame}"), |lines| {
        found(lines).is_some()
    });
    found(&broker.lines()).unwrap()
}

fn call(id: &str, command: &str) -> Value {
    json!({"type":"tool_call","callID":id,"tool":"Bash","input":{"command":command}})
}

/// A call, and its decision or its question.
fn ask(broker: &mut Broker, id: &str, command: &str) -> Value {
    exchange(broker, call(id, command), |frame| {
        frame["callID"] == id
            && (frame["type"] == "decision" || frame["type"] == "permission_request")
    })
}

/// An answer, and the decision of `call` or an error.
fn answer(broker: &mut Broker, response: Value, call: &str) -> Value {
    let mut frame = json!({"type":"permission_response"});
    for (key, value) in response.as_object().unwrap() {
        frame[key] = value.clone();
    }
    exchange(broker, frame, |frame| {
        frame["type"] == "error" || (frame["type"] == "decision" && frame["callID"] == call)
    })
}

fn grants(broker: &mut Broker) -> Vec<Value> {
    let frame = exchange(broker, json!({"type":"list_grants"}), |frame| {
        frame["type"] == "grants"
    });
    frame["grants"].as_array().unwrap().clone()
}

fn patterns(grants: &[Value]) -> Vec<String> {
    grants
        .iter()
        .map(|grant| grant["pattern"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_timed_grant_covers_until_its_end_and_not_after() {
    let root = support::project_dir("covers").canonicalize().unwrap();
    let log = root.join("audit.jsonl");
    let mut broker = start(&root, &["--audit", log.to_str().unwrap()]);

    // An hour: it covers the next call, which names its end.
    let request = ask(&mut broker, "c1", "git commit -m one");
    assert_eq!(request["type"], "permission_request", "{request}");
    let sent = wall_ms();
    let decision = answer(
        &mut broker,
        json!({"permissionID": request["permissionID"], "response":"always","expiresIn":3600}),
        "c1",
    );
    let read = wall_ms();
    assert_eq!(
        decision["reason"],
        "the user allowed this call and granted its `always` patterns for the session for 1 hour"
    );
    let covered = ask(&mut broker, "c2", "git commit -m two");
    assert_eq!(covered["source"], "grant", "{covered}");
    let end = covered["rule"]["expiresAt"].as_u64().unwrap();
    assert!(
        (sent + 3_600_000..=read + 3_600_000).contains(&end),
        "an end of {end} for an answer between {sent} and {read}"
    );
    let listed = grants(&mut broker);
    assert_eq!(patterns(&listed), ["git commit *"]);
    assert_eq!(listed[0]["expiresAt"], end);

    // A second: once it is over, the same kind of call asks again, and the
    // grant is no longer listed. The other grant still covers.
    let request = ask(&mut broker, "c3", "cargo build");
    let decision = answer(
        &mut broker,
        json!({"permissionID": request["permissionID"], "response":"always","expiresIn":1}),
        "c3",
    );
    let read = wall_ms();
    assert_eq!(
        decision["reason"],
        "the user allowed this call and granted its `always` patterns for the session for 1 second"
    );
    sleep_until(read + 1_100);
    let asked = ask(&mut broker, "c4", "cargo build --release");
    assert_eq!(asked["type"], "permission_request", "{asked}");
    assert_eq!(patterns(&grants(&mut broker)), ["git commit *"]);
    assert_eq!(
        ask(&mut broker, "c5", "git commit -m three")["source"],
        "grant"
    );
    answer(
        &mut broker,
        json!({"permissionID": asked["permissionID"], "response":"reject"}),
        "c4",
    );
    let (status, _, stderr) = broker.finish();
    assert!(status.success(), "{stderr}");

    // The audit log says how long each answer granted, and which end the
    // grant that decided had.
    let records: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let lifetimes: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"] == "answer" && r["response"] == "always")
        .map(|r| &r["expiresIn"])
        .collect();
    assert_eq!(lifetimes, [&json!(3600), &json!(1)]);
    let c2 = records
        .iter()
        .find(|r| r["event"] == "decision" && r["callID"] == "c2")
        .unwrap();
    assert_eq!(c2["grant"]["expiresAt"], end, "{c2}");
}

#[test]
fn a_bad_lifetime_is_refused_and_the_question_stays_open() {
    let root = support::project_dir("refused").canonicalize().unwrap();
    let mut broker = start(&root, &[]);
    let request = ask(&mut broker, "c1", "cargo build");
    let id = request["permissionID"].as_str().unwrap().to_string();
    let range = "a whole number of seconds from 1 to 315360000 (ten years)";
    let cases = [
        (
            json!({"permissionID": id, "response":"always","expiresIn":0}),
            format!("`expiresIn` of permission_response must be {range}, not 0"),
        ),
        (
            json!({"permissionID": id, "response":"always","expiresIn":-30}),
            format!("`expiresIn` of permission_response must be {range}, not -30"),
        ),
        (
            json!({"permissionID": id, "response":"always","expiresIn":"30m"}),
            format!("`expiresIn` of permission_response must be {range}, not a string"),
        ),
        (
            json!({"permissionID": id, "response":"always","expiresIn":90.5}),
            format!("`expiresIn` of permission_response must be {range}, not 90.5"),
        ),
        (
            json!({"permissionID": id, "response":"always","expiresIn":315_360_001u64}),
            format!("`expiresIn` of permission_response must be {range}, not 315360001"),
        ),
        (
            json!({"permissionID": id, "response":"once","expiresIn":60}),
            "`expiresIn` goes only with `\"response\":\"always\"`, not with `once`".to_string(),
        ),
    ];
    for (response, message) in cases {
        let error = answer(&mut broker, response.clone(), "c1");
        assert_eq!(error["type"], "error", "{response}: {error}");
        assert_eq!(error["code"], "invalid_frame", "{error}");
        assert_eq!(error["permissionID"], id.as_str(), "{error}");
        assert_eq!(error["message"], message.as_str(), "{error}");
    }
    // Still open: a good answer decides it.
    let decision = answer(
        &mut broker,
        json!({"permissionID": id, "response":"always","expiresIn":60}),
        "c1",
    );
    assert_eq!(decision["decision"], "allow", "{decision}");
    assert_eq!(
        decision["reason"],
        "the user allowed this call and granted its `always` patterns for the session for 1 minute"
    );

    // A plan approval grants nothing that could end.
    exchange(
        &mut broker,
        json!({"type":"set_mode","mode":"plan"}),
        |frame| frame["type"] == "mode_changed",
    );
    let request = exchange(
        &mut broker,
        json!({"type":"tool_call","callID":"p1","tool":"ExitPlanMode","input":{"plan":"1. Build."}}),
        |frame| frame["type"] == "permission_request",
    );
    let id = request["permissionID"].as_str().unwrap().to_string();
    let error = answer(
        &mut broker,
        json!({"permissionID": id, "response":"always","expiresIn":60}),
        "p1",
    );
    assert_eq!(error["code"], "invalid_frame", "{error}");
    assert_eq!(error["callID"], "p1", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("is a plan approval, whose `always` changes the mode and grants nothing that could expire; answer it without `expiresIn`"),
        "{error}"
    );
    let decision = answer(
        &mut broker,
        json!({"permissionID": id, "response":"always"}),
        "p1",
    );
    assert_eq!(decision["decision"], "allow", "{decision}");
    let (status, _, stderr) = broker.finish();
    assert!(status.success(), "{stderr}");
}

/// `toolgate grants ARGS --state-dir DIR`: exit code, stdout, stderr.
fn grants_cli(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["grants"];
    all.extend(args);
    all.extend(["--state-dir", dir.to_str().unwrap()]);
    support::run(dir, &all, "")
}

fn json_rows(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn timed_grants_are_kept_listed_and_ended_across_restarts() {
    let root = support::project_dir("restart").canonicalize().unwrap();
    let state = support::state_dir("restart").canonicalize().unwrap();
    let state_arg = state.to_str().unwrap();
    let mut broker = start(&root, &["--state-dir", state_arg]);
    // An hour for the project, one that does not end, a second for the session.
    let request = ask(&mut broker, "c1", "git commit -m one");
    answer(
        &mut broker,
        json!({"permissionID": request["permissionID"], "response":"always","scope":"project","expiresIn":3600}),
        "c1",
    );
    let request = ask(&mut broker, "c2", "npm test");
    answer(
        &mut broker,
        json!({"permissionID": request["permissionID"], "response":"always"}),
        "c2",
    );
    let request = ask(&mut broker, "c3", "cargo build");
    answer(
        &mut broker,
        json!({"permissionID": request["permissionID"], "response":"always","expiresIn":1}),
        "c3",
    );
    let second_read = wall_ms();
    let listed = grants(&mut broker);
    let hour = listed
        .iter()
        .find(|grant| grant["pattern"] == "git commit *")
        .unwrap()
        .clone();
    let end = hour["expiresAt"].as_u64().unwrap();
    assert_eq!(hour["scope"], "project");
    let (status, _, stderr) = broker.finish();
    assert!(status.success(), "{stderr}");
    // On disk with its end.
    let on_disk: String = std::fs::read_dir(&state)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| !path.to_string_lossy().ends_with(".lock"))
        .map(|path| std::fs::read_to_string(path).unwrap_or_default())
        .collect();
    assert!(
        on_disk.contains(&format!("\"expiresAt\": {end}"))
            || on_disk.contains(&format!("\"expiresAt\":{end}")),
        "{on_disk}"
    );

    // Once the second is over, `grants list` leaves that grant out and
    // shows how long the hour has left.
    sleep_until(second_read + 1_100);
    let (code, stdout, stderr) = grants_cli(&state, &["list", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let rows = json_rows(&stdout);
    assert_eq!(
        rows.iter()
            .map(|row| row["pattern"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["git commit *", "npm test *"],
        "{stdout}"
    );
    assert_eq!(rows[0]["expiresAt"], end);
    let left = rows[0]["expiresIn"].as_u64().unwrap();
    assert!((1..3600).contains(&left), "{left} seconds left");
    assert!(rows[1].get("expiresAt").is_none() && rows[1].get("expiresIn").is_none());
    let (code, stdout, stderr) = grants_cli(&state, &["list"]);
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(lines[0].contains("  EXPIRES  "), "{stdout}");
    assert!(
        lines[1].contains("git commit *") && lines[1].contains("  in 5"),
        "{stdout}"
    );
    assert!(
        lines[2].contains("npm test *") && lines[2].contains("  never  "),
        "{stdout}"
    );

    // A restart: the hour still covers, with the same end; the second does not.
    let mut broker = start(&root, &["--state-dir", state_arg]);
    assert_eq!(
        patterns(&grants(&mut broker)),
        ["git commit *", "npm test *"]
    );
    let covered = ask(&mut broker, "c4", "git commit -m two");
    assert_eq!(covered["source"], "grant", "{covered}");
    assert_eq!(covered["rule"]["expiresAt"], end);
    let asked = ask(&mut broker, "c5", "cargo build --release");
    assert_eq!(asked["type"], "permission_request", "{asked}");
    answer(
        &mut broker,
        json!({"permissionID": asked["permissionID"], "response":"reject"}),
        "c5",
    );
    let (status, _, stderr) = broker.finish();
    assert!(status.success(), "{stderr}");
    // The broker dropped the ended grant from the state directory too.
    let (_, stored, _) = toolgate::store::FileStore::open(&state, &root, 0).unwrap();
    let kept: Vec<&str> = stored
        .project_grants
        .iter()
        .chain(stored.sessions.iter().flat_map(|session| &session.grants))
        .map(|grant| grant.pattern.as_str())
        .collect();
    assert_eq!(kept, ["git commit *", "npm test *"]);

    // A timed grant is revoked like any other.
    let id = hour["grantID"].as_str().unwrap();
    let (code, stdout, stderr) = grants_cli(&state, &["revoke", id]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with(&format!("revoked {id} (project grant")),
        "{stdout}"
    );
    let (_, stdout, _) = grants_cli(&state, &["list", "--json"]);
    assert_eq!(
        json_rows(&stdout)
            .iter()
            .map(|row| row["pattern"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["npm test *"]
    );
}

/// An observer is told the lifetime an answer gave.
#[test]
fn observers_see_the_lifetime_answered() {
    let dir = support::project_dir("observed");
    let root = dir.canonicalize().unwrap();
    let listening = support::Listening::start(&root.join("sock"), &root, &[]);
    let mut observer = support::Peer::connect(
        &listening.socket,
        json!({"type":"hello","role":"observer","client":"ui"}),
    );
    let mut approver = support::Peer::connect(
        &listening.socket,
        json!({"type":"hello","role":"approver","client":"person"}),
    );
    let mut agent = support::Peer::connect(
        &listening.socket,
        json!({"type":"hello","role":"agent","client":"agent"}),
    );
    agent.send(call("c1", "cargo build"));
    let request = approver.until("permission_request");
    let request = request.last().unwrap();
    approver.send(
        json!({"type":"permission_response","permissionID":request["permissionID"],
                         "response":"always","expiresIn":600}),
    );
    let decision = agent.until("decision");
    assert_eq!(
        decision.last().unwrap()["reason"],
        "the user allowed this call and granted its `always` patterns for the session for 10 minutes"
    );
    let seen = observer.until("permission_answered");
    let answered = seen.last().unwrap();
    assert_eq!(answered["expiresIn"], 600, "{answered}");
    assert_eq!(answered["by"], "person", "{answered}");
}

/// `toolgate replay --from audit`: the recorded lifetime is given again and
/// ends at the recorded times, on the replay's own clock.
#[test]
fn an_audit_log_with_a_timed_grant_replays_alike() {
    let root = support::project_dir("replay").canonicalize().unwrap();
    let log = root.join("audit.jsonl");
    let records = [
        json!({"time":1_000,"event":"answer","permissionID":"per_x","response":"always","expiresIn":60,"by":"person","sessionID":"main","callID":"c1"}),
        json!({"time":1_000,"event":"decision","sessionID":"main","callID":"c1","decision":"allow","source":"user","reason":"the user allowed this call and granted its `always` patterns for the session for 1 minute","tool":"Bash","input":{"command":"cargo build"},"mode":"ask"}),
        json!({"time":60_999,"event":"decision","sessionID":"main","callID":"c2","decision":"allow","source":"grant","reason":"an earlier `always` granted `cargo build *` for bash in this session","tool":"Bash","input":{"command":"cargo build --release"},"mode":"ask"}),
        json!({"time":61_000,"event":"decision","sessionID":"main","callID":"c3","decision":"deny","source":"user","reason":"the user rejected this call","tool":"Bash","input":{"command":"cargo build -v"},"mode":"ask"}),
    ];
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&log, text).unwrap();
    let root_arg = root.to_str().unwrap();
    let log_arg = log.to_str().unwrap();
    let (code, out, err) = support::run(
        &root,
        &[
            "replay",
            "--from",
            "audit",
            "--project-root",
            root_arg,
            log_arg,
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    let frames: Vec<Value> = out
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let decision = |call: &str| {
        frames
            .iter()
            .find(|f| f["type"] == "decision" && f["callID"] == call)
            .unwrap_or_else(|| panic!("no decision of {call}: {out}"))
            .clone()
    };
    assert_eq!(decision("c2")["source"], "grant", "{out}");
    assert_eq!(decision("c2")["rule"]["expiresAt"], 61_000, "{out}");
    let c3 = decision("c3");
    assert_eq!(
        (c3["decision"].as_str(), c3["source"].as_str()),
        (Some("deny"), Some("user")),
        "{out}"
    );
    let (code, _, err) = support::run(
        &root,
        &[
            "replay",
            "--check",
            "--from",
            "audit",
            "--project-root",
            root_arg,
            log_arg,
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("every recorded decision was replayed alike"),
        "{err}"
    );
}

/// An in-process hook reads the grants of the state directory: a timed one
/// covers until its end, and one that has ended asks again.
#[test]
fn a_hook_honours_timed_grants_from_the_state_directory() {
    let root = support::project_dir("hook").canonicalize().unwrap();
    let state = support::state_dir("hook").canonicalize().unwrap();
    let state_arg = state.to_str().unwrap();
    let mut broker = start(&root, &["--state-dir", state_arg]);
    for (id, command, lifetime) in [("c1", "cargo build", 3600), ("c2", "make all", 1)] {
        let request = ask(&mut broker, id, command);
        answer(
            &mut broker,
            json!({"permissionID": request["permissionID"], "response":"always","scope":"project","expiresIn":lifetime}),
            id,
        );
    }
    let read = wall_ms();
    let (status, _, stderr) = broker.finish();
    assert!(status.success(), "{stderr}");
    sleep_until(read + 1_100);
    let hook = |command: &str| {
        let input = json!({
            "session_id": "sess-1", "transcript_path": "/tmp/t.jsonl",
            "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": command}, "tool_use_id": "toolu_01",
            "permission_mode": "default", "cwd": root,
        });
        let out = support::hook_process(
            &root,
            "claude",
            &["--state-dir", state_arg],
            &[],
            input.to_string().as_bytes(),
        );
        let answer = support::hook_answer(&out);
        let inner = &answer["hookSpecificOutput"];
        format!(
            "{}: {}",
            inner["permissionDecision"].as_str().unwrap(),
            inner["permissionDecisionReason"].as_str().unwrap()
        )
    };
    let covered = hook("cargo build --release");
    assert!(
        covered.starts_with("allow: ")
            && covered.contains("an earlier `always` granted `cargo build *`"),
        "{covered}"
    );
    let ended = hook("make install");
    assert!(
        ended.starts_with("ask: toolgate: ask mode asks before shell commands"),
        "{ended}"
    );
}
