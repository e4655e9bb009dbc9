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
    bridge_answering(dir, args, script, input, code, &|_| Reply::Nothing)
}

/// What the orchestrator does on a line it reads.
enum Reply {
    /// Writes this line.
    Line(String),
    /// Ends its output.
    Close,
    /// Nothing.
    Nothing,
}

/// [`bridge_with`] with an orchestrator that replies to each line it reads
/// as `reply` says.
fn bridge_answering(
    dir: &Path,
    args: &[&str],
    script: &[Value],
    input: &[&str],
    code: i32,
    reply: &dyn Fn(&Value) -> Reply,
) -> Run {
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
                match reply(&serde_json::from_str(&line).unwrap_or(Value::Null)) {
                    Reply::Line(answer) => {
                        if let Some(input) = stdin.as_mut() {
                            writeln!(input, "{answer}").unwrap();
                            input.flush().unwrap();
                        }
                    }
                    Reply::Close => stdin = None,
                    Reply::Nothing => {}
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
    // The orchestrator's lines reached Claude Code in order: its
    // `initialize` with toolgate's hook, the rest unchanged.
    let sent: Value = serde_json::from_str(&run.sent[0]).unwrap();
    assert_eq!(
        sent,
        json!({"type": "control_request", "request_id": "req_1", "request": {"subtype": "initialize",
            "hooks": {"PreToolUse": [{"matcher": null, "hookCallbackIds": ["toolgate_pre_tool_use"]}]}}})
    );
    assert_eq!(run.sent[1], user);
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

/// A hook call as Claude Code 2.1.328 makes one before a tool runs.
fn hook(id: &str, tool: &str, input: Value, extra: Value) -> Value {
    let mut call = json!({
        "session_id": "sess-fake",
        "cwd": "/p",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": input,
        "tool_use_id": format!("toolu_{id}"),
    });
    for (key, value) in extra.as_object().unwrap() {
        call[key] = value.clone();
    }
    json!({"hook": call, "id": id})
}

/// The hook output the stand-in got for its hook call `request_id`.
fn hook_output(sent: &[String], request_id: &str) -> Value {
    answer_to(sent, request_id)["response"]["response"]["hookSpecificOutput"].clone()
}

/// toolgate's hook, registered in the orchestrator's `initialize` beside
/// its own, sees every call Claude Code makes, also those Claude Code would
/// not ask about: decided with Claude Code's own permission mode (the
/// stricter applies) and in a sub-agent's session.
#[test]
fn the_hook_decides_every_call() {
    let initialize = r#"{"type":"control_request","request_id":"req_1","request":{"subtype":"initialize","hooks":{"PreToolUse":[{"matcher":"Bash","hookCallbackIds":["hook_0"]}]}}}"#;
    let script = vec![
        json!(INIT),
        hook("k1", "Bash", json!({"command": "ls"}), json!({})),
        hook(
            "k2",
            "Bash",
            json!({"command": "echo hi > out.txt"}),
            json!({}),
        ),
        hook(
            "k3",
            "Write",
            json!({"file_path": "a.txt", "content": "x"}),
            json!({"permission_mode": "plan"}),
        ),
        hook(
            "k4",
            "Write",
            json!({"file_path": "b.txt", "content": "x"}),
            json!({"permission_mode": "bypassPermissions"}),
        ),
        hook(
            "k5",
            "Bash",
            json!({"command": "touch c.txt"}),
            json!({"agent_id": "a1", "agent_type": "general-purpose"}),
        ),
        hook(
            "k6",
            "Bash",
            json!({"command": "ls"}),
            json!({"hook_event_name": "PostToolUse"}),
        ),
    ];
    // The orchestrator answers its own hook's calls: `allow` every time.
    let run = bridge_answering(
        &project_dir("hook_every_call"),
        &[
            "--mode",
            "auto_edit",
            "--scope",
            r#"{"commandPatterns":["ls*","echo *"]}"#,
        ],
        &script,
        &[initialize],
        0,
        &|line| {
            match (line["request"]["subtype"].as_str(), line["request"]["callback_id"].as_str()) {
            (_, Some("hook_0")) => Reply::Line(json!({"type": "control_response", "response": {"subtype": "success", "request_id": line["request_id"], "response": {}}}).to_string()),
            (Some("can_use_tool"), _) => Reply::Line(json!({"type": "control_response", "response": {"subtype": "success", "request_id": line["request_id"], "response": {"behavior": "deny", "message": "the orchestrator says no"}}}).to_string()),
            _ => Reply::Nothing,
        }
        },
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Both hooks registered, toolgate's first.
    let sent: Value = serde_json::from_str(&run.sent[0]).unwrap();
    assert_eq!(
        sent["request"]["hooks"]["PreToolUse"],
        json!([{"matcher": null, "hookCallbackIds": ["toolgate_pre_tool_use"]}, {"matcher": "Bash", "hookCallbackIds": ["hook_0"]}])
    );
    let decision = |id: &str| hook_output(&run.sent, id)["permissionDecision"].clone();
    // `ls` in auto_edit: allowed, though Claude Code would not have asked.
    assert_eq!(decision("k1-h0"), "allow");
    // A shell write in auto_edit asks; nobody here but the orchestrator
    // could answer, and the orchestrator is asked through Claude Code's
    // own question, which the stand-in makes next.
    assert_eq!(decision("k2-h0"), "ask");
    assert_eq!(
        answer_to(&run.sent, "k2")["response"]["response"],
        json!({"behavior": "deny", "message": "the orchestrator says no"})
    );
    // Claude Code in plan mode: stricter than auto_edit, so the write is
    // denied with plan mode's reason; in bypassPermissions, auto_edit holds.
    assert_eq!(decision("k3-h0"), "deny");
    let reason = hook_output(&run.sent, "k3-h0")["permissionDecisionReason"].clone();
    assert!(reason.as_str().unwrap().contains("plan mode"), "{reason}");
    assert_eq!(decision("k4-h0"), "allow");
    // A sub-agent's call: the scope holds there too.
    assert_eq!(decision("k5-h0"), "deny");
    let reason = hook_output(&run.sent, "k5-h0")["permissionDecisionReason"].clone();
    assert!(
        reason
            .as_str()
            .unwrap()
            .contains("the scope of session `sess-fake` does not allow the command `touch c.txt`"),
        "{reason}"
    );
    // Not a PreToolUse call: denied, saying so.
    assert_eq!(decision("k6-h0"), "deny");
    // The orchestrator saw the calls of its own hook, never toolgate's.
    assert!(run.out.iter().any(|line| line.contains("hook_0")));
    assert!(
        run.out
            .iter()
            .all(|line| !line.contains("toolgate_pre_tool_use")),
        "{:#?}",
        run.out
    );
}

/// An orchestrator whose first line is not an `initialize` (a user
/// message) gets the bridge's own `initialize` sent before it, and never
/// sees Claude Code's answer to it.
#[test]
fn the_bridge_initializes_when_the_orchestrator_does_not() {
    let user = r#"{"type":"user","message":{"role":"user","content":"go"},"parent_tool_use_id":null,"session_id":""}"#;
    let script = vec![
        json!(INIT),
        json!(
            r#"{"type":"control_response","response":{"subtype":"success","request_id":"OWN","response":{}}}"#
        ),
        hook("n1", "Bash", json!({"command": "echo hi > x"}), json!({})),
    ];
    // The stand-in answers the bridge's initialize by its id, which the
    // script cannot know: the bridge's id is read from what was sent.
    let dir = project_dir("own_initialize");
    let run = bridge_with(&dir, &["--mode", "plan"], &script, &[user], 0);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let first: Value = serde_json::from_str(&run.sent[0]).unwrap();
    assert_eq!(first["request"]["subtype"], "initialize", "{first}");
    assert!(first["request_id"]
        .as_str()
        .unwrap()
        .starts_with("toolgate_initialize_"));
    assert_eq!(
        first["request"]["hooks"],
        json!({"PreToolUse": [{"matcher": null, "hookCallbackIds": ["toolgate_pre_tool_use"]}]})
    );
    assert_eq!(run.sent[1], user);
    assert_eq!(
        hook_output(&run.sent, "n1-h0")["permissionDecision"],
        "deny"
    );
}

/// What nobody toolgate reaches can answer goes to the orchestrator, as
/// Claude Code asked it; its answer reaches Claude Code, unless it allows
/// an input of its own that toolgate denies. Answers to questions it was
/// not shown do not pass as answers to them.
#[test]
fn an_ask_goes_to_the_orchestrator() {
    let initialize = r#"{"type":"control_request","request_id":"req_1","request":{"subtype":"initialize","hooks":null}}"#;
    let script = vec![
        json!(INIT),
        // Through the hook: it answers `ask`, then Claude Code asks.
        hook(
            "q1",
            "Bash",
            json!({"command": "touch made.txt"}),
            json!({}),
        ),
        hook(
            "q2",
            "Bash",
            json!({"command": "touch other.txt"}),
            json!({}),
        ),
        hook(
            "q3",
            "Bash",
            json!({"command": "touch third.txt"}),
            json!({}),
        ),
        // Claude Code asking without a hook call first.
        json!(ask("q4", "Bash", json!({"command": "touch fourth.txt"}))),
        hook(
            "q5",
            "Bash",
            json!({"command": "touch fifth.txt"}),
            json!({}),
        ),
    ];
    let run = bridge_answering(
        &project_dir("ask_orchestrator"),
        &[
            "--mode",
            "ask",
            "--permission",
            r#"{"bash":{"rm *":"deny"}}"#,
        ],
        &script,
        &[initialize],
        0,
        &|line| {
            if line["request"]["subtype"] != "can_use_tool" {
                return Reply::Nothing;
            }
            let id = line["request_id"].as_str().unwrap();
            let response = match id {
                "q1" | "q4" => {
                    json!({"behavior": "allow", "updatedInput": line["request"]["input"]})
                }
                "q2" => json!({"behavior": "deny", "message": "not now"}),
                "q3" => json!({"behavior": "allow", "updatedInput": {"command": "rm -rf src"}}),
                _ => json!({"behavior": "maybe"}),
            };
            Reply::Line(json!({"type": "control_response", "response": {"subtype": "success", "request_id": id, "response": response}}).to_string())
        },
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    for id in ["q1-h0", "q2-h0", "q3-h0", "q5-h0"] {
        let output = hook_output(&run.sent, id);
        assert_eq!(output["permissionDecision"], "ask", "{id}: {output}");
        assert!(
            output["permissionDecisionReason"]
                .as_str()
                .unwrap()
                .contains("no human can be asked here"),
            "{output}"
        );
    }
    // The orchestrator was shown Claude Code's questions as it wrote them.
    let shown: Vec<&String> = run
        .out
        .iter()
        .filter(|line| line.contains("can_use_tool"))
        .collect();
    assert_eq!(shown.len(), 5, "{:#?}", run.out);
    assert!(
        shown[3].contains(r#""permission_suggestions""#),
        "{}",
        shown[3]
    );
    let response = |id: &str| answer_to(&run.sent, id)["response"]["response"].clone();
    assert_eq!(
        response("q1"),
        json!({"behavior": "allow", "updatedInput": {"command": "touch made.txt"}})
    );
    assert_eq!(
        response("q2"),
        json!({"behavior": "deny", "message": "not now"})
    );
    let changed = response("q3");
    assert_eq!(changed["behavior"], "deny", "{changed}");
    assert!(
        changed["message"].as_str().unwrap().starts_with("the orchestrator allowed the call with an input of its own, which toolgate denies: toolgate: "),
        "{changed}"
    );
    assert_eq!(
        response("q4"),
        json!({"behavior": "allow", "updatedInput": {"command": "touch fourth.txt"}})
    );
    let unreadable = response("q5");
    assert_eq!(unreadable["behavior"], "deny", "{unreadable}");
    assert!(
        unreadable["message"]
            .as_str()
            .unwrap()
            .contains("cannot be read"),
        "{unreadable}"
    );
}

/// With `--on-ask deny` nobody is asked: the hook denies, and the
/// orchestrator sees no question. An orchestrator whose input ends while
/// it holds a question has it denied.
#[test]
fn on_ask_deny_and_an_orchestrator_that_leaves() {
    let initialize = r#"{"type":"control_request","request_id":"req_1","request":{"subtype":"initialize","hooks":null}}"#;
    let script = vec![
        json!(INIT),
        hook(
            "d1",
            "Bash",
            json!({"command": "touch made.txt"}),
            json!({}),
        ),
    ];
    let run = bridge_with(
        &project_dir("on_ask_deny"),
        &["--mode", "ask", "--on-ask", "deny"],
        &script,
        &[initialize],
        0,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        hook_output(&run.sent, "d1-h0")["permissionDecision"],
        "deny"
    );
    assert!(
        run.out.iter().all(|line| !line.contains("can_use_tool")),
        "{:#?}",
        run.out
    );

    let run = bridge_answering(
        &project_dir("orchestrator_leaves"),
        &["--mode", "ask"],
        &script,
        &[initialize],
        0,
        &|line| match line["request"]["subtype"].as_str() {
            Some("can_use_tool") => Reply::Close,
            _ => Reply::Nothing,
        },
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let response = &answer_to(&run.sent, "d1")["response"]["response"];
    assert_eq!(response["behavior"], "deny", "{response}");
    assert!(
        response["message"]
            .as_str()
            .unwrap()
            .contains("the orchestrator's input ended before it answered"),
        "{response}"
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

/// `--parent` through a broker: Claude Code's session, named by its
/// `system/init`, is started under the orchestrator's session from its
/// first call and bound by it (plan mode there beats the broker's auto),
/// and a sub-agent's call runs in its own session under Claude Code's.
#[test]
fn under_a_parent_through_a_broker() {
    let dir = project_dir("bridge_parent");
    let broker = Listening::start(&dir.join("sock"), &dir, &["--mode", "auto"]);
    let socket = broker.socket.to_string_lossy().into_owned();
    let mut orchestrator = crate::support::Peer::connect(
        &broker.socket,
        json!({"type": "hello", "role": "agent", "client": "orchestrator"}),
    );
    orchestrator.ask(
        json!({"type": "session_start", "sessionID": "orch", "mode": "plan"}),
        "session_started",
    );
    let initialize = r#"{"type":"control_request","request_id":"req_1","request":{"subtype":"initialize","hooks":null}}"#;
    let script = vec![
        json!(INIT),
        hook(
            "p1",
            "Write",
            json!({"file_path": "a.txt", "content": "x"}),
            json!({}),
        ),
        hook("p2", "Read", json!({"file_path": "a.txt"}), json!({})),
        hook(
            "p3",
            "Bash",
            json!({"command": "touch b.txt"}),
            json!({"agent_id": "sub1", "agent_type": "general-purpose"}),
        ),
    ];
    let run = bridge_with(
        &dir,
        &["--socket", &socket, "--parent", "orch"],
        &script,
        &[initialize],
        0,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let decision = |id: &str| hook_output(&run.sent, id)["permissionDecision"].clone();
    assert_eq!(decision("p1-h0"), "deny");
    assert_eq!(decision("p2-h0"), "allow");
    assert_eq!(decision("p3-h0"), "deny");
    let sessions = orchestrator.ask(
        json!({"type": "list_sessions", "sessionID": "orch"}),
        "sessions",
    );
    let tree: Vec<(Value, Value, Value)> = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|session| {
            (
                session["sessionID"].clone(),
                session["parentID"].clone(),
                session["mode"].clone(),
            )
        })
        .collect();
    assert_eq!(
        tree,
        [
            (json!("orch"), Value::Null, json!("plan")),
            (json!("sess-fake"), json!("orch"), json!("plan")),
            (
                json!("sess-fake/agent/sub1"),
                json!("sess-fake"),
                json!("plan")
            ),
        ],
        "{sessions}"
    );
}

/// A managed policy holds in the bridge as everywhere: its deny beats
/// `--permission` and `auto`, and its ask is put to the orchestrator (the
/// one who can answer here) even in `auto`.
#[test]
fn a_managed_policy_holds_in_the_bridge() {
    let dir = project_dir("bridge_managed");
    let managed = dir.join("managed.json");
    std::fs::write(
        &managed,
        r#"{"permission":{"bash":{"git push *":"deny","npm publish*":"ask"}}}"#,
    )
    .unwrap();
    let initialize = r#"{"type":"control_request","request_id":"req_1","request":{"subtype":"initialize","hooks":null}}"#;
    let script = vec![
        json!(INIT),
        hook(
            "g1",
            "Bash",
            json!({"command": "git push origin main"}),
            json!({"permission_mode": "bypassPermissions"}),
        ),
        hook(
            "g2",
            "Bash",
            json!({"command": "npm publish"}),
            json!({"permission_mode": "bypassPermissions"}),
        ),
        hook(
            "g3",
            "Bash",
            json!({"command": "touch x"}),
            json!({"permission_mode": "bypassPermissions"}),
        ),
    ];
    let run = bridge_answering(
        &dir,
        &[
            "--mode",
            "auto",
            "--permission",
            r#"{"bash":"allow"}"#,
            "--managed",
            managed.to_str().unwrap(),
        ],
        &script,
        &[initialize],
        0,
        &|line| {
            match line["request"]["subtype"].as_str() {
            Some("can_use_tool") => Reply::Line(json!({"type": "control_response", "response": {"subtype": "success", "request_id": line["request_id"], "response": {"behavior": "deny", "message": "not published"}}}).to_string()),
            _ => Reply::Nothing,
        }
        },
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let output = |id: &str| hook_output(&run.sent, id);
    assert_eq!(output("g1-h0")["permissionDecision"], "deny");
    assert!(
        output("g1-h0")["permissionDecisionReason"]
            .as_str()
            .unwrap()
            .contains("managed rule `bash: git push *`"),
        "{}",
        output("g1-h0")
    );
    assert_eq!(output("g2-h0")["permissionDecision"], "ask");
    assert_eq!(
        answer_to(&run.sent, "g2")["response"]["response"],
        json!({"behavior": "deny", "message": "not published"})
    );
    assert_eq!(output("g3-h0")["permissionDecision"], "allow");
}
