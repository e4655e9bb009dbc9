//! `toolgate claude-bridge` through the real process, with a scripted
//! stand-in for Claude Code (`claude_bridge/fake_claude.py`) that prints
//! `control_request` lines in the shape Claude Code 2.1.328 prints them
//! (`--input-format stream-json --output-format stream-json
//! --permission-prompt-tool stdio`) and records every line it is sent.
//! The real Claude Code runs through the bridge in `scripts/e2e-hooks`
//! (section 11).
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::support::{project_dir, Listening, PATIENCE};

/// The stand-in for Claude Code.
fn fake() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/claude_bridge/fake_claude.py")
}

/// A `can_use_tool` request as Claude Code 2.1.328 writes it.
fn ask(request_id: &str, tool: &str, input: Value) -> String {
    json!({
        "type": "control_request",
        "request_id": request_id,
        "request": {
            "subtype": "can_use_tool",
            "tool_name": tool,
            "display_name": tool,
            "input": input,
            "permission_suggestions": [{"type": "addDirectories", "directories": ["/x"], "destination": "session"}],
            "tool_use_id": format!("toolu_{request_id}"),
        },
    })
    .to_string()
}

const INIT: &str = r#"{"type":"system","subtype":"init","cwd":"/p","session_id":"sess-fake","tools":["Bash"],"permissionMode":"default"}"#;

/// What one run of the bridge did.
struct Run {
    /// Exit code of the bridge.
    code: i32,
    /// The lines the orchestrator read.
    out: Vec<String>,
    /// The lines the stand-in was sent.
    sent: Vec<String>,
    stderr: String,
}

/// Run `toolgate claude-bridge ARGS -- fake_claude.py` in a fresh project:
/// the stand-in prints `script` and exits with `code`; the orchestrator
/// writes `input`, and closes its output once the stand-in's script is done.
fn bridge(dir: &Path, args: &[&str], script: &[String], input: &[&str], code: i32) -> Run {
    let script: Vec<Value> = script.iter().map(|line| json!(line)).collect();
    bridge_with(dir, args, &script, input, code)
}

/// [`bridge`] with the stand-in's script as JSON values: a string is
/// printed as it is, `{"nowait": LINE}` printed without waiting for an
/// answer.
fn bridge_with(dir: &Path, args: &[&str], script: &[Value], input: &[&str], code: i32) -> Run {
    let script_path = dir.join("script.json");
    std::fs::write(&script_path, serde_json::to_string(script).unwrap()).unwrap();
    let log = dir.join("sent.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("claude-bridge")
        .args(args)
        .arg("--")
        .arg("python3")
        .arg(fake())
        .arg(&script_path)
        .arg(&log)
        .arg(code.to_string())
        .current_dir(dir)
        .env_remove("TOOLGATE_MODE")
        .env_remove("TOOLGATE_PERMISSION")
        .env_remove("TOOLGATE_STATE_DIR")
        .env_remove("TOOLGATE_SOCKET")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in input {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).unwrap();
        text
    });
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (lines, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines() {
            let _ = lines.send(line.unwrap());
        }
    });
    let mut out = Vec::new();
    let mut stdin = Some(stdin);
    loop {
        match done.recv_timeout(PATIENCE) {
            Ok(line) => {
                if line == r#"{"type":"fake_done"}"# {
                    // The orchestrator is done: end of its output.
                    stdin = None;
                }
                out.push(line);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                panic!("the bridge hangs; so far: {out:#?}");
            }
        }
    }
    drop(stdin);
    let status = child.wait().unwrap();
    let sent = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    Run {
        code: status.code().unwrap_or(-1),
        out,
        sent,
        stderr: stderr.join().unwrap(),
    }
}

/// The `control_response` the stand-in got for `request_id`.
fn answer_to(sent: &[String], request_id: &str) -> Value {
    let answers: Vec<Value> = sent
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| {
            line["type"] == "control_response" && line["response"]["request_id"] == request_id
        })
        .collect();
    assert_eq!(answers.len(), 1, "one answer to {request_id}: {sent:#?}");
    answers[0].clone()
}

#[test]
fn allow_deny_and_pass_through() {
    let initialize = r#"{"type":"control_request","request_id":"req_1","request":{"subtype":"initialize","hooks":null}}"#;
    let user = r#"{"type":"user","message":{"role":"user","content":"go"},"parent_tool_use_id":null,"session_id":""}"#;
    let hook_callback = r#"{"type":"control_request","request_id":"h1","request":{"subtype":"hook_callback","callback_id":"hook_0","input":{}}}"#;
    let script = vec![
        INIT.to_string(),
        r#"{"type":"control_response","response":{"subtype":"success","request_id":"req_1","response":{"commands":[]}}}"#.to_string(),
        ask("r1", "Bash", json!({"command": "ls -la"})),
        ask("r2", "Bash", json!({"command": "echo hi > out.txt"})),
        ask("r3", "Read", json!({"file_path": "notes.txt"})),
        ask("r4", "Write", json!({"file_path": "notes.txt", "content": "x"})),
        hook_callback.to_string(),
        "not json at all".to_string(),
    ];
    let run = bridge(
        &project_dir("allow_deny"),
        &["--mode", "plan"],
        &script,
        &[initialize, user],
        0,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Allowed: the input unchanged, as Claude Code expects it.
    assert_eq!(
        answer_to(&run.sent, "r1").to_string(),
        r#"{"type":"control_response","response":{"subtype":"success","request_id":"r1","response":{"behavior":"allow","updatedInput":{"command":"ls -la"}}}}"#
    );
    assert_eq!(
        answer_to(&run.sent, "r3")["response"]["response"],
        json!({"behavior": "allow", "updatedInput": {"file_path": "notes.txt"}})
    );
    // Denied with toolgate's reason and the plan-mode reminder.
    for (id, reason) in [
        ("r2", "toolgate: plan mode allows only read-only shell commands: output redirection `> out.txt` writes a file"),
        ("r4", "toolgate: plan mode"),
    ] {
        let response = &answer_to(&run.sent, id)["response"]["response"];
        assert_eq!(response["behavior"], "deny", "{response}");
        let message = response["message"].as_str().unwrap();
        assert!(message.starts_with(reason), "{message}");
        assert!(message.contains("Plan mode is active"), "{message}");
        assert_eq!(response.as_object().unwrap().len(), 2, "{response}");
    }
    // The orchestrator's lines reached Claude Code unchanged, in order.
    assert_eq!(&run.sent[..2], &[initialize.to_string(), user.to_string()]);
    // Claude Code's other lines reached the orchestrator unchanged; its
    // permission questions did not.
    let mut expected = vec![
        script[0].clone(),
        script[1].clone(),
        hook_callback.to_string(),
    ];
    expected.push("not json at all".to_string());
    expected.push(r#"{"type":"fake_done"}"#.to_string());
    expected.push(r#"{"type":"result","subtype":"success","session_id":"sess-fake"}"#.to_string());
    assert_eq!(run.out, expected);
}

#[test]
fn malformed_requests_are_denied_or_held_back() {
    let no_tool = json!({"type": "control_request", "request_id": "m1", "request": {"subtype": "can_use_tool", "input": {"command": "ls"}}}).to_string();
    let no_id = json!({"type": "control_request", "request": {"subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "ls"}}}).to_string();
    let script = vec![
        INIT.to_string(),
        ask("m0", "Bash", json!("ls")),
        no_tool,
        no_id,
        r#"{"type":"control_request","request_id":"m3" cut"#.to_string(),
    ];
    let run = bridge(
        &project_dir("malformed"),
        &["--mode", "auto"],
        &script,
        &[],
        0,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        answer_to(&run.sent, "m0")["response"]["response"],
        json!({"behavior": "deny", "message": "toolgate: the `input` of the can_use_tool request is not a JSON object"})
    );
    assert_eq!(
        answer_to(&run.sent, "m1")["response"]["response"],
        json!({"behavior": "deny", "message": "toolgate: the can_use_tool request has no `tool_name` (a non-empty string)"})
    );
    // Neither the question with no id nor the cut line reach the
    // orchestrator, which might allow them.
    assert!(
        run.out.iter().all(|line| !line.contains("control_request")),
        "{:#?}",
        run.out
    );
    assert!(
        run.stderr
            .contains("a can_use_tool request without a request_id cannot be answered"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("a line that is not JSON mentions control_request"),
        "{}",
        run.stderr
    );
}

#[test]
fn an_ask_in_process_is_denied() {
    let script = vec![
        INIT.to_string(),
        ask("a1", "Bash", json!({"command": "touch made.txt"})),
    ];
    let run = bridge(&project_dir("ask"), &["--mode", "ask"], &script, &[], 0);
    let response = &answer_to(&run.sent, "a1")["response"]["response"];
    assert_eq!(response["behavior"], "deny");
    let message = response["message"].as_str().unwrap();
    assert!(
        message.contains("no human can be asked here: `toolgate claude-bridge` decides in-process"),
        "{message}"
    );
}

#[test]
fn exit_status_is_claudes() {
    let run = bridge(
        &project_dir("exit"),
        &["--mode", "plan"],
        &[INIT.to_string()],
        &[],
        3,
    );
    assert_eq!(run.code, 3, "{}", run.stderr);
    let dir = project_dir("missing");
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args([
            "claude-bridge",
            "--mode",
            "plan",
            "--",
            "/nonexistent/claude",
        ])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot start /nonexistent/claude"));
    // Flags that belong to the broker are refused with --socket, before
    // anything starts.
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args([
            "claude-bridge",
            "--socket",
            "/nonexistent.sock",
            "--mode",
            "plan",
            "--",
            "/nonexistent/claude",
        ])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--mode cannot be used with --socket"));
}

/// With a broker: its approver answers the question, in Claude Code's
/// session (named by `system/init`); a broker that is not there is a denial.
#[test]
fn a_broker_and_its_approver() {
    let dir = project_dir("broker");
    let broker = Listening::start(&dir.join("sock"), &dir, &["--mode", "ask"]);
    let socket = broker.socket.to_string_lossy().into_owned();
    let mut approver = crate::support::Peer::connect(
        &broker.socket,
        json!({"type": "hello", "role": "approver", "client": "test"}),
    );
    let answering = std::thread::spawn(move || {
        let mut asked = Vec::new();
        for _ in 0..2 {
            let question = approver.until("permission_request").pop().unwrap();
            let reply = if question["metadata"]["command"] == "touch made.txt" {
                json!({"type": "permission_response", "permissionID": question["permissionID"], "response": "once"})
            } else {
                json!({"type": "permission_response", "permissionID": question["permissionID"], "response": "reject", "message": "not that"})
            };
            asked.push(question);
            approver.send(reply);
        }
        asked
    });
    let script = vec![
        INIT.to_string(),
        ask("b1", "Bash", json!({"command": "touch made.txt"})),
        ask("b2", "Bash", json!({"command": "rm -rf src"})),
    ];
    let run = bridge(&dir, &["--socket", &socket], &script, &[], 0);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let asked = answering.join().unwrap();
    assert!(
        asked
            .iter()
            .all(|question| question["sessionID"] == "sess-fake"),
        "{asked:#?}"
    );
    assert_eq!(
        answer_to(&run.sent, "b1")["response"]["response"],
        json!({"behavior": "allow", "updatedInput": {"command": "touch made.txt"}})
    );
    let denied = &answer_to(&run.sent, "b2")["response"]["response"];
    assert_eq!(denied["behavior"], "deny");
    assert!(
        denied["message"].as_str().unwrap().contains("not that"),
        "{denied}"
    );
    drop(broker);

    let script = vec![
        INIT.to_string(),
        ask("c1", "Bash", json!({"command": "ls"})),
    ];
    let gone = dir.join("gone.sock").to_string_lossy().into_owned();
    let run = bridge(&dir, &["--socket", &gone], &script, &[], 0);
    let denied = &answer_to(&run.sent, "c1")["response"]["response"];
    assert_eq!(denied["behavior"], "deny");
    assert!(
        denied["message"]
            .as_str()
            .unwrap()
            .starts_with("toolgate: "),
        "{denied}"
    );
}

/// A question Claude Code withdraws (`control_cancel_request`) while the
/// broker's approver has it is withdrawn from the broker and gets no
/// answer; the cancel does not reach the orchestrator; the next question is
/// answered.
#[test]
fn a_withdrawn_question_gets_no_answer() {
    let dir = project_dir("cancel");
    let broker = Listening::start(&dir.join("sock"), &dir, &["--mode", "ask"]);
    let socket = broker.socket.to_string_lossy().into_owned();
    let mut approver = crate::support::Peer::connect(
        &broker.socket,
        json!({"type": "hello", "role": "approver", "client": "test"}),
    );
    let answering = std::thread::spawn(move || {
        // The first question is never answered: it is withdrawn. The two
        // questions may come in either order.
        let (mut first, mut resolved, mut second) = (Value::Null, Value::Null, Value::Null);
        while first.is_null() || resolved.is_null() || second.is_null() {
            let frame = approver.recv();
            match (frame["type"].as_str(), frame["callID"].as_str()) {
                (Some("permission_request"), Some("toolu_w1")) => first = frame,
                (Some("permission_request"), _) => {
                    approver.send(json!({"type": "permission_response", "permissionID": frame["permissionID"], "response": "once"}));
                    second = frame;
                }
                (Some("permission_resolved"), Some("toolu_w1")) => resolved = frame,
                _ => {}
            }
        }
        (first, resolved, second)
    });
    let cancel = r#"{"type":"control_cancel_request","request_id":"w1"}"#;
    let script: Vec<Value> = vec![
        json!(INIT),
        json!({"nowait": ask("w1", "Bash", json!({"command": "touch first.txt"}))}),
        json!({"nowait": cancel}),
        json!(ask("w2", "Bash", json!({"command": "touch second.txt"}))),
    ];
    let run = bridge_with(&dir, &["--socket", &socket], &script, &[], 0);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (first, resolved, second) = answering.join().unwrap();
    assert_eq!(first["callID"], "toolu_w1", "{first}");
    assert_eq!(
        resolved["permissionID"], first["permissionID"],
        "{resolved}"
    );
    assert_eq!(second["callID"], "toolu_w2", "{second}");
    assert!(
        run.sent.iter().all(|line| !line.contains("\"w1\"")),
        "{:#?}",
        run.sent
    );
    assert_eq!(
        answer_to(&run.sent, "w2")["response"]["response"]["behavior"],
        "allow"
    );
    assert!(
        run.out
            .iter()
            .all(|line| !line.contains("control_cancel_request")),
        "{:#?}",
        run.out
    );
}

/// `--scope` binds Claude Code's session as `toolgate mcp --scope` does:
/// what the scope refuses is denied with its reason, even in auto.
#[test]
fn a_scope_holds() {
    let script = vec![
        INIT.to_string(),
        ask("s1", "Bash", json!({"command": "touch x"})),
        ask("s2", "Read", json!({"file_path": "notes.txt"})),
    ];
    let run = bridge(
        &project_dir("scope"),
        &["--mode", "auto", "--scope", r#"{"allowedTools":["Read"]}"#],
        &script,
        &[],
        0,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let denied = &answer_to(&run.sent, "s1")["response"]["response"];
    assert_eq!(denied["behavior"], "deny", "{denied}");
    assert!(
        denied["message"].as_str().unwrap().contains("allowedTools"),
        "{denied}"
    );
    assert_eq!(
        answer_to(&run.sent, "s2")["response"]["response"]["behavior"],
        "allow"
    );
}
