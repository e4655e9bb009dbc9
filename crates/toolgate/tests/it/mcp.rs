//! `toolgate mcp` through the spawned binary: JSON-RPC lines on stdin, the
//! replies on stdout, the process gone at end of input. The handshake of
//! each protocol version, `tools/list`, the `approve` tool deciding allow,
//! deny (rule, plan mode with its reminder) and `ask` (a denial in-process:
//! no human here), and what malformed JSON-RPC gets. The same server driven
//! by the real Claude Code and by the official MCP SDK client is
//! `scripts/e2e-mcp`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::support;

/// Run `toolgate mcp ARGS` in `dir` with `lines` on stdin, then end of input:
/// the exit code and the replies, one JSON value per line.
fn mcp(dir: &Path, args: &[&str], lines: &[String]) -> (i32, Vec<Value>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("mcp")
        .args(args)
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
    for line in lines {
        // A server that stopped at startup reads nothing: a broken pipe here
        // is its exit code's business.
        if writeln!(stdin, "{line}").is_err() {
            break;
        }
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let replies = stdout
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|_| {
                panic!(
                    "not JSON: {line:?}; stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
        })
        .collect();
    (out.status.code().unwrap_or(-1), replies)
}

fn initialize(version: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}})
    .to_string()
}

const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// A `tools/call` of `approve`; the tool_use_id is `toolu_ID`, or the
/// input's `"use"` when it has one (taken out).
fn approve(id: u64, tool: &str, mut input: Value) -> String {
    let use_id = match input.as_object_mut().and_then(|input| input.remove("use")) {
        Some(Value::String(use_id)) => use_id,
        _ => format!("toolu_{id}"),
    };
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "approve",
        "arguments": {"tool_name": tool, "input": input, "tool_use_id": use_id}}})
    .to_string()
}

/// The decision in a `tools/call` reply: the JSON in its one text block.
fn behavior(reply: &Value) -> Value {
    let content = reply["result"]["content"].as_array().unwrap_or_else(|| {
        panic!("not a tool result: {reply}");
    });
    assert_eq!(content.len(), 1, "{reply}");
    assert_eq!(content[0]["type"], "text", "{reply}");
    serde_json::from_str(content[0]["text"].as_str().unwrap()).unwrap()
}

/// Decide `calls` after a 2025-11-25 handshake: the behaviours, in order.
fn decide(dir: &Path, args: &[&str], calls: &[(&str, Value)]) -> Vec<Value> {
    let mut lines = vec![initialize("2025-11-25"), INITIALIZED.to_string()];
    for (n, (tool, input)) in calls.iter().enumerate() {
        lines.push(approve(n as u64 + 1, tool, input.clone()));
    }
    let (code, replies) = mcp(dir, args, &lines);
    assert_eq!(code, 0);
    assert_eq!(replies.len(), calls.len() + 1, "{replies:?}");
    for (n, reply) in replies[1..].iter().enumerate() {
        assert_eq!(reply["id"], n as u64 + 1, "{reply}");
    }
    replies[1..].iter().map(behavior).collect()
}

#[test]
fn each_handshake_version_is_echoed_and_others_get_the_latest() {
    let dir = support::project_dir("mcp-versions");
    for (asked, answered) in [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),
        ("2099-01-01", "2025-11-25"),
    ] {
        let (code, replies) = mcp(
            &dir,
            &[],
            &[
                initialize(asked),
                INITIALIZED.to_string(),
                r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.into(),
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#.into(),
            ],
        );
        assert_eq!(code, 0);
        assert_eq!(replies.len(), 3, "{asked}: {replies:?}");
        let init = &replies[0]["result"];
        assert_eq!(init["protocolVersion"], answered, "{asked}");
        assert_eq!(init["serverInfo"]["name"], "toolgate");
        assert!(init["capabilities"]["tools"].is_object(), "{init}");
        assert_eq!(replies[1], json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
        assert_eq!(replies[2]["result"]["tools"][0]["name"], "approve");
        // The handshake era's results carry no `resultType`.
        assert!(replies[2]["result"].get("resultType").is_none());
    }
}

#[test]
fn the_modern_era_discovers_and_names_its_version_per_request() {
    // What Claude Code 2.1.328 sends first.
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "claude-code", "version": "2.1.328"},
        "io.modelcontextprotocol/clientCapabilities": {}});
    let dir = support::project_dir("mcp-modern");
    let (code, replies) = mcp(
        &dir,
        &["--mode", "plan"],
        &[
            json!({"jsonrpc": "2.0", "id": "server-discover-probe-1", "method": "server/discover", "params": {"_meta": meta}}).to_string(),
            json!({"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": {"_meta": meta}}).to_string(),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "approve",
                "arguments": {"tool_name": "Write", "input": {"file_path": "a.txt", "content": "x"}, "tool_use_id": "toolu_1"},
                "_meta": meta}}).to_string(),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2030-01-01"}}}).to_string(),
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(replies.len(), 4, "{replies:?}");
    let discover = &replies[0];
    assert_eq!(discover["id"], "server-discover-probe-1");
    assert_eq!(discover["result"]["resultType"], "complete");
    assert_eq!(
        discover["result"]["supportedVersions"],
        json!([
            "2024-11-05",
            "2025-03-26",
            "2025-06-18",
            "2025-11-25",
            "2026-07-28"
        ])
    );
    assert!(discover["result"]["capabilities"]["tools"].is_object());
    assert_eq!(replies[1]["result"]["resultType"], "complete");
    assert_eq!(replies[1]["result"]["tools"][0]["name"], "approve");
    assert_eq!(replies[2]["result"]["resultType"], "complete");
    assert_eq!(behavior(&replies[2])["behavior"], "deny");
    let unsupported = &replies[3]["error"];
    assert_eq!(unsupported["code"], -32022, "{}", replies[3]);
    assert_eq!(
        unsupported["data"],
        json!({"supported": ["2026-07-28"], "requested": "2030-01-01"})
    );
}

#[test]
fn tools_list_describes_approve() {
    let dir = support::project_dir("mcp-list");
    let (_, replies) = mcp(
        &dir,
        &[],
        &[
            initialize("2025-06-18"),
            r#"{"jsonrpc":"2.0","id":"l","method":"tools/list","params":{}}"#.into(),
        ],
    );
    let tools = replies[1]["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    let schema = &tools[0]["inputSchema"];
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["tool_name"]["type"], "string");
    assert_eq!(schema["properties"]["input"]["type"], "object");
    assert_eq!(schema["properties"]["tool_use_id"]["type"], "string");
    assert_eq!(schema["required"], json!(["tool_name", "input"]));
}

#[test]
fn approve_allows_with_the_input_unchanged() {
    let dir = support::project_dir("mcp-allow");
    std::fs::write(dir.join("notes.txt"), "x").unwrap();
    // Keys out of order, nested values: the input comes back as it went.
    let input = json!({"file_path": "notes.txt", "b": {"z": 1, "a": [1, "2", null]}, "a": true});
    let answers = decide(
        &dir,
        &["--project-root", dir.to_str().unwrap()],
        &[
            ("Read", input.clone()),
            ("Bash", json!({"command": "ls -la"})),
        ],
    );
    assert_eq!(
        answers[0],
        json!({"behavior": "allow", "updatedInput": input})
    );
    assert_eq!(
        serde_json::to_string(&answers[0]["updatedInput"]).unwrap(),
        serde_json::to_string(&input).unwrap(),
        "key order kept"
    );
    assert_eq!(answers[1]["behavior"], "allow", "{}", answers[1]);
}

#[test]
fn approve_denies_by_rule_plan_mode_and_ask() {
    let dir = support::project_dir("mcp-deny");
    let root = dir.to_str().unwrap();
    let answers = decide(
        &dir,
        &[
            "--project-root",
            root,
            "--permission",
            r#"{"bash":{"rm *":"deny"}}"#,
        ],
        &[
            ("Bash", json!({"command": "rm -rf src"})),
            // Asks in the default mode: no human can be asked here.
            (
                "Bash",
                json!({"command": "touch made", "use": "toolu_same"}),
            ),
            // The same call again: the question was withdrawn, so it is
            // asked (and denied) again, not reported as a duplicate.
            (
                "Bash",
                json!({"command": "touch made", "use": "toolu_same"}),
            ),
        ],
    );
    let message = |answer: &Value| {
        assert_eq!(answer["behavior"], "deny", "{answer}");
        assert_eq!(answer.as_object().unwrap().len(), 2, "{answer}");
        answer["message"].as_str().unwrap().to_string()
    };
    let rule = message(&answers[0]);
    assert!(rule.starts_with("toolgate: "), "{rule}");
    assert!(rule.contains("rule `bash: rm *` denies"), "{rule}");
    for ask in &answers[1..] {
        let ask = message(ask);
        assert!(ask.starts_with("toolgate: "), "{ask}");
        assert!(ask.contains("no human can be asked here"), "{ask}");
        assert!(ask.contains("--socket PATH"), "{ask}");
    }

    let answers = decide(
        &dir,
        &["--project-root", root, "--mode", "plan"],
        &[
            ("Write", json!({"file_path": "out.txt", "content": "x"})),
            ("Read", json!({"file_path": "out.txt"})),
        ],
    );
    let plan = message(&answers[0]);
    assert!(
        plan.contains("plan mode does not allow file edits"),
        "{plan}"
    );
    assert!(plan.contains("<system-reminder>"), "{plan}");
    assert!(plan.contains("Plan mode is active"), "{plan}");
    assert_eq!(answers[1]["behavior"], "allow", "{}", answers[1]);
}

#[test]
fn arguments_the_tool_cannot_read_are_denied() {
    let dir = support::project_dir("mcp-arguments");
    let call = |id: u64, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "approve", "arguments": arguments}})
        .to_string()
    };
    let (code, replies) = mcp(
        &dir,
        &["--mode", "auto"],
        &[
            initialize("2025-11-25"),
            call(1, json!({"input": {"command": "ls"}})),
            call(2, json!({"tool_name": "Bash", "input": "ls"})),
            call(3, json!({"tool_name": "", "input": {}})),
            call(4, json!({"tool_name": "Bash", "input": {}, "tool_use_id": 7})),
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "approve"}})
                .to_string(),
            call(6, json!("Bash")),
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(replies.len(), 7, "{replies:?}");
    for reply in &replies[1..] {
        let answer = behavior(reply);
        assert_eq!(answer["behavior"], "deny", "{reply}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap()
                .starts_with("toolgate: "),
            "{reply}"
        );
    }
}

#[test]
fn malformed_json_rpc_gets_errors_and_nothing_else() {
    let dir = support::project_dir("mcp-malformed");
    let (code, replies) = mcp(
        &dir,
        &["--mode", "auto", "--max-frame-bytes", "4096"],
        &[
            // Before `initialize`: only ping.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.into(),
            r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#.into(),
            initialize("2025-11-25"),
            initialize("2025-11-25"),
            "not json".into(),
            "[]".into(),
            r#"{"id":3,"method":"ping"}"#.into(),
            r#"{"jsonrpc":"2.0","id":4,"method":7}"#.into(),
            r#"{"jsonrpc":"2.0","id":5,"method":"resources/list"}"#.into(),
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"rm","arguments":{}}}"#.into(),
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":[1]}"#.into(),
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#.into(),
            r#"{"jsonrpc":"2.0","id":8,"method":"initialize","params":{}}"#.into(),
            format!(
                r#"{{"jsonrpc":"2.0","id":9,"method":"ping","params":{{"pad":"{}"}}}}"#,
                "x".repeat(5000)
            ),
            // Notifications and responses get no reply.
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#.into(),
            r#"{"jsonrpc":"2.0","id":99,"result":{}}"#.into(),
            "".into(),
            r#"{"jsonrpc":"2.0","id":10,"method":"ping"}"#.into(),
            // A notification is never a decision, and gets no reply.
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"approve","arguments":{"tool_name":"Bash","input":{"command":"ls"}}}}"#.into(),
            // After the handshake, `server/discover` is not for this connection.
            r#"{"jsonrpc":"2.0","id":11,"method":"server/discover"}"#.into(),
        ],
    );
    assert_eq!(code, 0);
    let got: Vec<(Value, Value)> = replies
        .iter()
        .map(|reply| (reply["id"].clone(), reply["error"]["code"].clone()))
        .collect();
    let expected: Vec<(Value, Value)> = [
        (json!(1), json!(-32600)),
        (json!(2), Value::Null),
        (json!(0), Value::Null),
        (json!(0), json!(-32600)),
        (Value::Null, json!(-32700)),
        (Value::Null, json!(-32600)),
        (json!(3), json!(-32600)),
        (json!(4), json!(-32600)),
        (json!(5), json!(-32601)),
        (json!(6), json!(-32602)),
        (json!(7), json!(-32602)),
        (Value::Null, json!(-32600)),
        (json!(8), json!(-32600)),
        (Value::Null, json!(-32700)),
        (json!(10), Value::Null),
        (json!(11), json!(-32600)),
    ]
    .into();
    assert_eq!(got, expected, "{replies:#?}");
    for reply in &replies {
        assert_eq!(reply["jsonrpc"], "2.0");
        if let Some(message) = reply["error"]["message"].as_str() {
            assert!(!message.is_empty());
        }
    }
}

#[test]
fn end_of_input_ends_the_server() {
    let dir = support::project_dir("mcp-eof");
    let (code, replies) = mcp(&dir, &[], &[]);
    assert_eq!((code, replies.len()), (0, 0));
    // A call in the last line without a newline is still answered.
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["mcp", "--mode", "plan"])
        .current_dir(&dir)
        .env_remove("TOOLGATE_SOCKET")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{}", initialize("2025-11-25")).unwrap();
    write!(stdin, "{}", approve(1, "Write", json!({"file_path": "a"}))).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(behavior(&last)["behavior"], "deny");
}

#[test]
fn a_policy_that_does_not_load_stops_it_before_any_answer() {
    let dir = support::project_dir("mcp-bad-policy");
    let (code, replies) = mcp(
        &dir,
        &["--permission", "{not json"],
        &[initialize("2025-11-25")],
    );
    assert_eq!((code, replies.len()), (2, 0));
}

/// `toolgate mcp ARGS` in `dir`, driven a line at a time.
struct Live {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    replies: std::sync::mpsc::Receiver<Value>,
}

impl Live {
    fn start(dir: &Path, args: &[&str]) -> Live {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .arg("mcp")
            .args(args)
            .current_dir(dir)
            .env_remove("TOOLGATE_SOCKET")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, replies) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let line = line.unwrap();
                if send.send(serde_json::from_str(&line).unwrap()).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Live {
            child,
            stdin,
            replies,
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    fn recv(&self) -> Value {
        self.replies.recv_timeout(support::PATIENCE).unwrap()
    }

    /// End of input: the replies still to come and the exit code.
    fn close(mut self) -> (Vec<Value>, i32) {
        drop(self.stdin.take());
        let code = self.child.wait().unwrap().code().unwrap_or(-1);
        (self.replies.iter().collect(), code)
    }
}

/// A stand-in for a broker on a Unix socket: for each connection, `ready`,
/// then `ready` again after `hello`, then, once the `tool_call` arrives,
/// what `answer` says for it (`None`: close the connection; `{"hold":true}`:
/// say nothing until the client closes its side, then deny it as cancelled). Every line a client sent is kept,
/// by connection.
#[cfg(unix)]
fn fake_broker(
    path: &Path,
    answers: Vec<Option<Value>>,
) -> std::thread::JoinHandle<Vec<Vec<Value>>> {
    use std::io::{BufRead, BufReader};
    let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        for answer in answers {
            let (stream, _) = listener.accept().unwrap();
            let mut writer = stream.try_clone().unwrap();
            let mut reader = BufReader::new(stream);
            let ready = json!({"type": "ready", "protocol": 1, "version": "0", "mode": "ask",
                "projectRoot": "/", "policySources": ["built-in"], "stateDir": null});
            // A client may withdraw at any point: its errors end the connection.
            let _ = writeln!(writer, "{ready}");
            let mut lines = Vec::new();
            let mut held: Option<Value> = None;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    // The client is gone (or half-closed): as the real
                    // broker does, a call still held is denied as cancelled.
                    if let Some(call) = held.take() {
                        let denial = json!({"type": "decision", "sessionID": call["sessionID"],
                            "callID": call["callID"], "decision": "deny", "source": "cancel",
                            "reason": "the connection that made the call closed before the question was answered"});
                        let _ = writeln!(writer, "{denial}");
                    }
                    break;
                }
                let Ok(frame) = serde_json::from_str::<Value>(&line) else {
                    break;
                };
                lines.push(frame.clone());
                match frame["type"].as_str().unwrap() {
                    "hello" => {
                        let _ = writeln!(writer, "{ready}");
                    }
                    "tool_call" => match &answer {
                        None => break,
                        Some(answer) if answer["hold"] == true => held = Some(frame.clone()),
                        Some(answer) => {
                            let mut answer = answer.clone();
                            answer["callID"] = frame["callID"].clone();
                            answer["sessionID"] = frame["sessionID"].clone();
                            let _ = writeln!(writer, "{answer}");
                        }
                    },
                    _ => {}
                }
            }
            seen.push(lines);
        }
        seen
    })
}

#[cfg(unix)]
#[test]
fn with_a_socket_the_broker_decides() {
    use std::os::unix::fs::PermissionsExt;
    let dir = support::project_dir("mcp-socket");
    // Clients trust a socket only in a directory nobody else can enter.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let socket = dir.join("broker.sock");
    let decision = |verdict: &str, reason: &str| json!({"type": "decision", "decision": verdict, "source": "user", "reason": reason});
    let broker = fake_broker(
        &socket,
        vec![
            Some(decision("allow", "the user allowed it once")),
            Some({
                let mut deny = decision("deny", "the user rejected it");
                deny["message"] = json!("not in this repository");
                deny
            }),
            // No approver: the question comes back to the caller.
            Some(
                json!({"type": "permission_request", "timestamp": 0, "permissionID": "per_1",
                "tool": "bash", "permission": "bash", "toolName": "Bash", "pattern": ["touch *"],
                "patterns": ["touch made"], "always": ["touch *"],
                "alwaysOptions": [["touch made"], ["touch *"]], "title": "touch made",
                "metadata": {"reason": "ask mode asks before shell commands"}}),
            ),
            Some(json!({"type": "error", "code": "invalid_frame", "message": "no such thing"})),
            None,
            Some(json!({"hold": true})),
            Some(json!({"hold": true})),
        ],
    );
    let calls: Vec<(&str, Value)> = vec![
        ("Write", json!({"file_path": "a.txt", "content": "x"})),
        ("Bash", json!({"command": "rm -rf /"})),
        ("Bash", json!({"command": "touch made"})),
        ("Bash", json!({"command": "ls"})),
        ("Bash", json!({"command": "ls"})),
    ];
    let mut live = Live::start(
        &dir,
        &["--socket", socket.to_str().unwrap(), "--session", "s1"],
    );
    live.send(&initialize("2025-11-25"));
    assert_eq!(live.recv()["id"], 0);
    let mut answers = Vec::new();
    for (n, (tool, input)) in calls.iter().enumerate() {
        live.send(&approve(n as u64 + 1, tool, input.clone()));
        let reply = live.recv();
        assert_eq!(reply["id"], n as u64 + 1, "{reply}");
        answers.push(behavior(&reply));
    }
    // A call the broker holds does not hold the server: a ping is answered
    // meanwhile, and a cancelled call gets no reply (its connection closes,
    // which withdraws it at the broker).
    live.send(&approve(6, "Bash", json!({"command": "make"})));
    live.send(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#);
    assert_eq!(
        live.recv(),
        json!({"jsonrpc": "2.0", "id": 7, "result": {}})
    );
    live.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":6}}"#);
    live.send(r#"{"jsonrpc":"2.0","id":8,"method":"ping"}"#);
    assert_eq!(live.recv()["id"], 8);
    // At end of input a call still held is withdrawn, and denied.
    live.send(&approve(9, "Bash", json!({"command": "make"})));
    live.send(r#"{"jsonrpc":"2.0","id":10,"method":"ping"}"#);
    assert_eq!(live.recv()["id"], 10);
    let (rest, code) = live.close();
    assert_eq!(code, 0);
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0]["id"], 9);
    let withdrawn = behavior(&rest[0]);
    assert_eq!(
        withdrawn["message"],
        "toolgate: the call was withdrawn before the broker decided (the client cancelled it or closed its input)"
    );
    let seen = broker.join().unwrap();
    assert_eq!(seen.len(), 7);
    // What the client sent: hello as an agent named mcp, then the call.
    let first = &seen[0];
    assert_eq!(first.len(), 2, "{first:?}");
    assert_eq!(
        first[0],
        json!({"type": "hello", "role": "agent", "client": "mcp"})
    );
    assert_eq!(first[1]["type"], "tool_call");
    assert_eq!(first[1]["sessionID"], "s1");
    assert_eq!(first[1]["callID"], "toolu_1");
    assert_eq!(first[1]["tool"], "Write");
    assert_eq!(first[1]["input"], calls[0].1);
    // The question nobody could see was withdrawn.
    assert_eq!(
        seen[2].last().unwrap(),
        &json!({"type": "cancel", "sessionID": "s1", "callID": "toolu_3"})
    );

    // No broker listening there: every call is denied, naming the path.
    std::fs::remove_file(&socket).unwrap();
    let answers = decide(
        &dir,
        &["--socket", socket.to_str().unwrap()],
        &[("Read", json!({"file_path": "a.txt"}))],
    );
    assert_eq!(answers[0]["behavior"], "deny");
    let message = answers[0]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "toolgate: no toolgate broker listens on {}",
            socket.display()
        )),
        "{message}"
    );

    // The broker's policy decides: flags that would make another one (and
    // could loosen a session the broker holds in a stricter mode) stop it.
    for flag in [
        ["--mode", "auto"],
        ["--permission-mode", "plan"],
        ["--policy", "x.json"],
        ["--permission", "{}"],
        ["--read-only-agents", "Explore"],
        ["--on-ask", "deny"],
        ["--ask-timeout", "5"],
        ["--state-dir", "state"],
        ["--audit", "audit.jsonl"],
    ] {
        let mut args = vec!["--socket", socket.to_str().unwrap()];
        args.extend(flag);
        let (code, replies) = mcp(&dir, &args, &[initialize("2025-11-25")]);
        assert_eq!((code, replies.len()), (2, 0), "{flag:?}");
    }
    // The longest line is the MCP server's own: it stays.
    let (code, replies) = mcp(
        &dir,
        &[
            "--socket",
            socket.to_str().unwrap(),
            "--max-frame-bytes",
            "65536",
        ],
        &[initialize("2025-11-25")],
    );
    assert_eq!((code, replies.len()), (0, 1));
}

/// `toolgate serve --listen` and `toolgate mcp --socket` together, with a
/// person's approver on the socket: the question names client `mcp`, the
/// approver's answer is the answer (a reject's message reaches the model);
/// with no approver left, the question comes back and is denied.
#[cfg(unix)]
#[test]
fn a_real_broker_and_an_approver_answer_over_the_socket() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::fs::PermissionsExt;
    let dir = support::project_dir("mcp-real-broker");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let socket = dir.join("broker.sock");
    let mut broker = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--listen"])
        .arg(format!("unix:{}", socket.display()))
        .arg("--project-root")
        .arg(&dir)
        .current_dir(&dir)
        .env_remove("TOOLGATE_MODE")
        .env_remove("TOOLGATE_PERMISSION")
        .env_remove("TOOLGATE_STATE_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let approver = loop {
        match std::os::unix::net::UnixStream::connect(&socket) {
            Ok(stream) => break stream,
            Err(_) if started.elapsed() < support::PATIENCE => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            Err(err) => panic!("no broker on {}: {err}", socket.display()),
        }
    };
    let mut to_broker = approver.try_clone().unwrap();
    let mut from_broker = BufReader::new(approver);
    let mut read = || {
        let mut line = String::new();
        from_broker.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line).unwrap()
    };
    assert_eq!(read()["type"], "ready");
    writeln!(
        to_broker,
        r#"{{"type":"hello","role":"approver","client":"test"}}"#
    )
    .unwrap();
    assert_eq!(read()["type"], "ready");

    let mut live = Live::start(&dir, &["--socket", socket.to_str().unwrap()]);
    live.send(&initialize("2025-11-25"));
    assert_eq!(live.recv()["id"], 0);
    live.send(&approve(1, "Bash", json!({"command": "touch made"})));
    let request = read();
    assert_eq!(request["type"], "permission_request", "{request}");
    assert_eq!(request["metadata"]["client"], "mcp", "{request}");
    assert_eq!(request["callID"], "toolu_1");
    let answer = json!({"type": "permission_response", "permissionID": request["permissionID"],
        "response": "reject", "message": "not here"});
    writeln!(to_broker, "{answer}").unwrap();
    let reply = live.recv();
    assert_eq!(reply["id"], 1);
    let denied = behavior(&reply);
    assert_eq!(denied["behavior"], "deny");
    assert!(
        denied["message"].as_str().unwrap().ends_with(": not here"),
        "{denied}"
    );

    // The approver leaves: a question now comes back to `toolgate mcp`.
    drop(to_broker);
    drop(from_broker);
    live.send(&approve(2, "Bash", json!({"command": "touch made"})));
    let reply = live.recv();
    let denied = behavior(&reply);
    assert!(
        denied["message"]
            .as_str()
            .unwrap()
            .contains("no approver is connected to the broker at"),
        "{denied}"
    );
    // Read-only commands need nobody.
    live.send(&approve(3, "Bash", json!({"command": "ls"})));
    assert_eq!(behavior(&live.recv())["behavior"], "allow");
    let (rest, code) = live.close();
    assert_eq!((rest.len(), code), (0, 0));
    let _ = broker.kill();
    let _ = broker.wait();
}
