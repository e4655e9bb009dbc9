//! The Codex app-server bridge (`examples/codex_appserver_bridge.rs`) against
//! a stand-in app-server that replays approval requests in the format of
//! Codex 0.169.0's app-server protocol (`item/commandExecution/requestApproval`
//! with `command` and `cwd`, `item/fileChange/requestApproval`; answered with
//! `{"decision":"accept"|"decline"}`; see ../shared/agents/codex_appserver_client.py),
//! recording what the bridge answered. `cargo test` builds the examples;
//! `cargo test -p toolgate --test it bridges::` alone does not rebuild them (run `cargo build
//! --examples` first after changing one).
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The example binary, built by `cargo test` next to the test binaries.
fn bridge() -> PathBuf {
    let toolgate = Path::new(env!("CARGO_BIN_EXE_toolgate"));
    let path = toolgate
        .parent()
        .unwrap()
        .join("examples")
        .join("codex_appserver_bridge");
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds the examples",
        path.display()
    );
    path
}

const REQUESTS: &[&str] = &[
    r#"{"method":"thread/started","params":{"thread":{"id":"t1"}}}"#,
    r#"{"id":1,"method":"item/commandExecution/requestApproval","params":{"threadId":"t1","turnId":"u1","itemId":"i1","command":"ls -la","cwd":"PROJECT"}}"#,
    r#"{"id":2,"method":"item/commandExecution/requestApproval","params":{"threadId":"t1","turnId":"u1","itemId":"i2","command":["rm","-rf","build"],"cwd":"PROJECT"}}"#,
    r#"{"id":3,"method":"item/fileChange/requestApproval","params":{"threadId":"t1","turnId":"u1","itemId":"i3","changes":[{"path":"PROJECT/src/a.rs","kind":"update"}]}}"#,
    r#"{"id":4,"method":"item/fileChange/requestApproval","params":{"threadId":"t1","turnId":"u1","itemId":"i4"}}"#,
];

/// Run the bridge in `mode` over the stand-in; (what the app-server was
/// answered, by request id; what reached the client).
fn run(name: &str, mode: &str) -> (Vec<(u64, String)>, String) {
    let dir = std::env::temp_dir().join(format!("toolgate-bridge-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let project = dir.to_string_lossy().into_owned();
    let answers = dir.join("answers.jsonl");
    let mut script = String::new();
    for request in REQUESTS {
        script.push_str(&format!(
            "echo '{}'\n",
            request.replace("PROJECT", &project)
        ));
        if request.starts_with("{\"id\"") {
            script.push_str(&format!(
                "read -r answer; echo \"$answer\" >> '{}'\n",
                answers.display()
            ));
        }
    }
    std::fs::write(dir.join("app-server.sh"), script).unwrap();
    let out = Command::new(bridge())
        .args([
            "--toolgate",
            env!("CARGO_BIN_EXE_toolgate"),
            "--mode",
            mode,
            "--",
            "sh",
        ])
        .arg(dir.join("app-server.sh"))
        .current_dir(&dir)
        .env_remove("TOOLGATE_SOCKET")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answered = std::fs::read_to_string(&answers)
        .unwrap()
        .lines()
        .map(|line| {
            let answer: Value = serde_json::from_str(line).unwrap();
            (
                answer["id"].as_u64().unwrap(),
                answer["result"]["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    (answered, String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn plan_mode_accepts_a_read_and_declines_the_rest() {
    let (answered, passed) = run("plan", "plan");
    assert_eq!(
        answered,
        vec![
            (1, "accept".to_string()),
            (2, "decline".to_string()),
            (3, "decline".to_string()),
            (4, "decline".to_string()),
        ]
    );
    // Everything else passes through to the client; the approvals do not.
    assert!(passed.contains("thread/started"), "{passed}");
    assert!(!passed.contains("requestApproval"), "{passed}");
}

#[test]
fn auto_edit_accepts_a_file_change_but_not_an_unseen_one_or_a_removal() {
    let (answered, _) = run("auto-edit", "auto_edit");
    assert_eq!(
        answered,
        vec![
            (1, "accept".to_string()),
            // Asked in auto_edit, and nobody can be asked here: declined.
            (2, "decline".to_string()),
            (3, "accept".to_string()),
            // A change that names no file cannot be judged: declined.
            (4, "decline".to_string()),
        ]
    );
}

/// The OpenCode server bridge (`examples/opencode_server_bridge.rs`)
/// against a stand-in OpenCode server speaking its documented HTTP API:
/// server-sent events on `GET /event` (`permission.asked` of OpenCode 1.x,
/// `permission.updated` of 0.x, `permission.replied`, others), the
/// message a question points at on `GET /session/:id/message/:id`, answers
/// on `POST /permission/:id/reply` (404 here for the 0.x question, which is
/// then answered on `POST /session/:id/permissions/:id`). Basic auth is
/// required. What the bridge posted is recorded.
mod opencode {
    use std::collections::HashMap;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::{Arc, Condvar, Mutex};

    use serde_json::{json, Value};

    /// (session, message, callID, tool, input) of each question's call.
    fn parts() -> Vec<(
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        Value,
    )> {
        vec![
            (
                "ses_1",
                "msg_1",
                "call_1",
                "bash",
                json!({"command": "ls -la", "description": "list"}),
            ),
            (
                "ses_1",
                "msg_2",
                "call_2",
                "bash",
                json!({"command": "echo hi > out.txt", "description": "write"}),
            ),
            (
                "ses_1",
                "msg_3",
                "call_3",
                "edit",
                json!({"filePath": "src/a.rs", "oldString": "a", "newString": "b"}),
            ),
            (
                "ses_1",
                "msg_5",
                "call_5",
                "bash",
                json!({"command": "git status"}),
            ),
            (
                "ses_1",
                "msg_6",
                "call_6",
                "read",
                json!({"filePath": "src/a.rs"}),
            ),
            (
                "ses_1",
                "msg_7",
                "call_7",
                "read",
                json!({"filePath": "src/b.rs"}),
            ),
        ]
    }

    fn events() -> Vec<Value> {
        let asked = |id: &str, permission: &str, patterns: Value, message: &str, call: &str| {
            json!({"type": "permission.asked", "properties": {"id": id, "sessionID": "ses_1",
                "permission": permission, "patterns": patterns, "metadata": {}, "always": patterns,
                "tool": {"messageID": message, "callID": call}}})
        };
        vec![
            json!({"type": "server.connected", "properties": {}}),
            asked("per_1", "bash", json!(["ls -la"]), "msg_1", "call_1"),
            // OpenCode's patterns leave the redirection out: the real input decides.
            asked("per_2", "bash", json!(["echo hi"]), "msg_2", "call_2"),
            // From /global/event's wrapping.
            json!({"directory": "/work/p", "payload": asked("per_3", "edit", json!(["src/a.rs"]), "msg_3", "call_3")}),
            json!({"type": "permission.asked", "properties": {"id": "per_4", "sessionID": "ses_1",
                "permission": "bash", "patterns": ["rm -rf /"], "metadata": {}, "always": []}}),
            json!({"type": "permission.updated", "properties": {"id": "per_5", "type": "bash",
                "pattern": "git status", "sessionID": "ses_1", "messageID": "msg_5", "callID": "call_5",
                "title": "git status", "metadata": {}, "time": {"created": 0}}}),
            json!({"type": "session.idle", "properties": {"sessionID": "ses_1"}}),
            asked("per_6", "read", json!(["src/a.rs"]), "msg_6", "call_6"),
            json!({"type": "permission.replied", "properties": {"sessionID": "ses_1", "requestID": "per_6", "reply": "once"}}),
            // The bridge reads its events in order: once it asks for this
            // question's message, it has seen the answer to per_6.
            asked("per_7", "read", json!(["src/b.rs"]), "msg_7", "call_7"),
        ]
    }

    #[derive(Default)]
    struct Shared {
        posts: Mutex<Vec<(String, Value)>>,
        /// Set once the bridge asked for msg_7, the message of the question
        /// after the `permission.replied` event: it has read that event.
        replied: (Mutex<bool>, Condvar),
    }

    fn respond(stream: &mut TcpStream, status: &str, body: &str) {
        let _ = write!(
            stream,
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }

    fn serve(mut stream: TcpStream, shared: Arc<Shared>) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut request = String::new();
        reader.read_line(&mut request).unwrap();
        let (mut length, mut auth) = (0, String::new());
        loop {
            let mut header = String::new();
            reader.read_line(&mut header).unwrap();
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap();
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap(),
                "authorization" => auth = value.trim().to_string(),
                _ => {}
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        if auth != "Basic b3BlbmNvZGU6c2VjcmV0" {
            return respond(&mut stream, "401 Unauthorized", "{}");
        }
        let mut words = request.split_whitespace();
        let (method, path) = (words.next().unwrap(), words.next().unwrap().to_string());
        match method {
            "GET" if path == "/event" => {
                let _ = write!(stream, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
                for event in events() {
                    let data = format!("data: {event}\n\n");
                    // Each event split over two chunks, as a stream may.
                    let (a, b) = data.split_at(data.len() / 2);
                    for piece in [a, b] {
                        let _ = write!(stream, "{:x}\r\n{piece}\r\n", piece.len());
                    }
                    let _ = stream.flush();
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                let _ = write!(stream, "0\r\n\r\n");
            }
            "GET" => {
                let found = parts().into_iter().find(|(session, message, ..)| {
                    path == format!("/session/{session}/message/{message}")
                });
                let Some((_, message, call, tool, input)) = found else {
                    return respond(&mut stream, "404 Not Found", "{}");
                };
                let (done, ready) = &shared.replied;
                if message == "msg_7" {
                    *done.lock().unwrap() = true;
                    ready.notify_all();
                }
                if message == "msg_6" {
                    // Held until the bridge has read OpenCode's own answer
                    // to it (bounded, so that a bridge that never asks for
                    // msg_7 fails the assertions instead of hanging).
                    let mut done = done.lock().unwrap();
                    let start = std::time::Instant::now();
                    while !*done && start.elapsed() < std::time::Duration::from_secs(30) {
                        done = ready
                            .wait_timeout(done, std::time::Duration::from_secs(1))
                            .unwrap()
                            .0;
                    }
                }
                let body = json!({"info": {"id": message}, "parts": [
                    {"type": "text", "text": "sure"},
                    {"type": "tool", "callID": call, "tool": tool, "state": {"status": "pending", "input": input}}]});
                respond(&mut stream, "200 OK", &body.to_string());
            }
            "POST" => {
                let body: Value = serde_json::from_slice(&body).unwrap();
                if path == "/permission/per_5/reply" {
                    return respond(&mut stream, "404 Not Found", "{}");
                }
                shared.posts.lock().unwrap().push((path, body));
                respond(&mut stream, "200 OK", "true");
            }
            _ => respond(&mut stream, "405 Method Not Allowed", "{}"),
        }
    }

    /// Run the bridge in `mode` against the stand-in: what it posted, by path.
    fn run(mode: &str) -> (HashMap<String, Value>, String) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        {
            let shared = shared.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let shared = shared.clone();
                    std::thread::spawn(move || serve(stream.unwrap(), shared));
                }
            });
        }
        let dir =
            std::env::temp_dir().join(format!("toolgate-opencode-{}-{mode}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("src")).unwrap();
        let out = std::process::Command::new(super::example("opencode_server_bridge"))
            .args([
                "--url",
                &format!("http://{address}"),
                "--toolgate",
                env!("CARGO_BIN_EXE_toolgate"),
                "--mode",
                mode,
            ])
            .current_dir(&dir)
            .env("OPENCODE_SERVER_PASSWORD", "secret")
            .env_remove("TOOLGATE_SOCKET")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        let _ = std::fs::remove_dir_all(&dir);
        let posts = shared.posts.lock().unwrap().iter().cloned().collect();
        (posts, stderr)
    }

    fn reply(posts: &HashMap<String, Value>, id: &str) -> (String, String) {
        let body = &posts[&format!("/permission/{id}/reply")];
        (
            body["reply"].as_str().unwrap().to_string(),
            body["message"].as_str().unwrap_or("").to_string(),
        )
    }

    #[test]
    fn plan_mode_answers_once_for_a_read_and_rejects_the_rest_by_the_real_input() {
        let (posts, stderr) = run("plan");
        assert_eq!(
            reply(&posts, "per_1"),
            ("once".to_string(), String::new()),
            "{stderr}"
        );
        let (word, message) = reply(&posts, "per_2");
        assert_eq!(word, "reject");
        assert!(
            message.starts_with("toolgate: plan mode allows only read-only shell commands"),
            "{message}"
        );
        assert!(message.contains("<system-reminder>"), "{message}");
        assert_eq!(reply(&posts, "per_3").0, "reject");
        let (word, message) = reply(&posts, "per_4");
        assert_eq!(word, "reject");
        assert!(message.contains("names no tool call"), "{message}");
        // The 0.x question, on its own route.
        assert_eq!(
            posts["/session/ses_1/permissions/per_5"],
            json!({"response": "once"})
        );
        // Answered in OpenCode first: not answered again.
        assert!(
            !posts.keys().any(|path| path.contains("per_6")),
            "{posts:?}"
        );
        assert!(
            stderr.contains("per_6 was answered in OpenCode; withdrawn"),
            "{stderr}"
        );
        assert_eq!(reply(&posts, "per_7").0, "once", "{stderr}");
        assert_eq!(posts.len(), 6, "{posts:?}");
        assert!(
            stderr.contains("opencode_server_bridge: once per_1 bash"),
            "{stderr}"
        );
    }

    #[test]
    fn auto_edit_answers_once_for_the_edit_and_still_rejects_the_shell_write() {
        let (posts, stderr) = run("auto_edit");
        assert_eq!(reply(&posts, "per_1").0, "once", "{stderr}");
        assert_eq!(reply(&posts, "per_3").0, "once", "{stderr}");
        let (word, message) = reply(&posts, "per_2");
        assert_eq!(word, "reject");
        assert!(
            message.contains("nobody can be asked") || message.contains("asks before"),
            "{message}"
        );
    }
}

/// An example binary built by `cargo test` next to the test binaries.
fn example(name: &str) -> PathBuf {
    let toolgate = Path::new(env!("CARGO_BIN_EXE_toolgate"));
    let path = toolgate.parent().unwrap().join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds the examples",
        path.display()
    );
    path
}
