//! `serve --audit FILE` through the spawned binary: what each record says,
//! that it is on disk before its decision is sent, that a log that cannot
//! be written denies rather than lets calls run unrecorded, that the log is
//! only ever appended to, that a shared broker names the client, and that
//! `toolgate replay --from audit` gives the same decisions back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{json, Value};

use crate::support;

struct Live {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Live {
    fn start(root: &Path, args: &[&str]) -> Live {
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .arg("serve")
            .arg("--project-root")
            .arg(root)
            .args(args)
            .current_dir(root)
            .env_remove("TOOLGATE_MODE")
            .env_remove("TOOLGATE_PERMISSION")
            .env_remove("TOOLGATE_STATE_DIR")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut live = Live {
            child,
            stdin,
            stdout,
        };
        assert_eq!(live.recv()["type"], "ready");
        live
    }

    fn send(&mut self, frame: Value) {
        writeln!(self.stdin, "{frame}").unwrap();
    }

    fn recv(&mut self) -> Value {
        let mut line = String::new();
        assert!(
            self.stdout.read_line(&mut line).unwrap() > 0,
            "toolgate ended"
        );
        serde_json::from_str(&line).unwrap()
    }

    fn close(self) {
        drop(self.stdin);
        let mut child = self.child;
        child.wait().unwrap();
    }
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The record of `call`, with `time` checked and taken out.
fn decision_of(records: &[Value], call: &str) -> Value {
    let mut record = records
        .iter()
        .find(|r| r["event"] == "decision" && r["callID"] == call)
        .unwrap_or_else(|| panic!("no record of {call}: {records:?}"))
        .clone();
    assert!(
        record["time"].as_u64().unwrap() > 1_700_000_000_000,
        "{record}"
    );
    record.as_object_mut().unwrap().remove("time");
    record
}

#[test]
fn each_decision_and_answer_is_recorded_before_it_is_sent() {
    let dir = support::project_dir("audit-fields");
    let root = dir.canonicalize().unwrap();
    let log = root.join("audit.jsonl");
    let log_arg = log.to_str().unwrap();
    let mut live = Live::start(
        &root,
        &[
            "--audit",
            log_arg,
            "--permission",
            r#"{"bash":{"rm *":"deny"}}"#,
        ],
    );
    live.send(json!({"type":"session_start","sessionID":"main","mode":"ask"}));
    live.recv();
    live.send(json!({"type":"session_start","sessionID":"sub","parentID":"main","mode":"plan"}));
    live.recv();
    // Decided at once: the record is on disk by the time the decision is read.
    live.send(json!({"type":"tool_call","sessionID":"sub","callID":"c1","tool":"Bash","input":{"command":"git status"}}));
    assert_eq!(live.recv()["decision"], "allow");
    let on_disk = records(&log);
    assert_eq!(on_disk.len(), 1, "{on_disk:?}");
    assert_eq!(
        decision_of(&on_disk, "c1"),
        json!({"event":"decision","sessionID":"sub","parentID":"main","callID":"c1","tool":"Bash",
               "subject":"git status","input":{"command":"git status"},"mode":"plan","client":"connection 0",
               "decision":"allow","source":"mode","reason":"`git status` only reads, which every mode allows"})
    );
    live.send(json!({"type":"tool_call","sessionID":"main","callID":"c2","tool":"bash","input":{"command":"rm -rf build"}}));
    assert_eq!(live.recv()["decision"], "deny");
    // Asked, answered `always`: the answer, then the decision, then a grant.
    live.send(json!({"type":"tool_call","sessionID":"main","callID":"c3","tool":"bash","input":{"command":"npm test"}}));
    let question = live.recv();
    live.send(json!({"type":"permission_response","permissionID":question["permissionID"],"response":"always"}));
    assert_eq!(live.recv()["decision"], "allow");
    live.send(json!({"type":"tool_call","sessionID":"main","callID":"c4","tool":"bash","input":{"command":"npm test --watch"}}));
    assert_eq!(live.recv()["source"], "grant");
    live.send(json!({"type":"tool_call","sessionID":"main","callID":"c5","tool":"webfetch","input":{"url":"https://x.example"}}));
    let question = live.recv();
    live.send(json!({"type":"permission_response","permissionID":question["permissionID"],"response":"reject","message":"not that site"}));
    assert_eq!(live.recv()["decision"], "deny");
    live.send(json!({"type":"tool_call","sessionID":"main","callID":"c6","tool":"edit","input":{"filePath":"a.rs"}}));
    live.recv();
    live.close();

    let all = records(&log);
    let rule = decision_of(&all, "c2");
    assert_eq!(rule["source"], "rule");
    assert_eq!(
        rule["rule"],
        json!({"permission":"bash","pattern":"rm *","action":"deny","origin":"--permission","key":"permission.bash.\"rm *\""})
    );
    let asked = decision_of(&all, "c3");
    assert_eq!(asked["source"], "user");
    assert_eq!(asked["answeredBy"], "connection 0");
    assert!(asked["waitedMs"].is_u64(), "{asked}");
    let granted = decision_of(&all, "c4");
    assert_eq!(
        granted["grant"],
        json!({"permission":"bash","pattern":"npm test *","action":"allow","origin":"grant"})
    );
    assert!(granted.get("rule").is_none(), "{granted}");
    let rejected = decision_of(&all, "c5");
    assert_eq!(rejected["message"], "not that site");
    assert_eq!(decision_of(&all, "c6")["source"], "shutdown");
    let answers: Vec<(String, String)> = all
        .iter()
        .filter(|r| r["event"] == "answer")
        .map(|r| {
            (
                r["callID"].as_str().unwrap().to_string(),
                r["response"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        answers,
        vec![
            ("c3".to_string(), "always".to_string()),
            ("c5".to_string(), "reject".to_string())
        ]
    );
    // Each answer is recorded before the decision it led to.
    let position = |event: &str, call: &str| {
        all.iter()
            .position(|r| r["event"] == event && r["callID"] == call)
            .unwrap()
    };
    assert!(position("answer", "c3") < position("decision", "c3"));

    // The log is replayed with the same decisions.
    let (code, _, err) = support::run(
        &root,
        &[
            "replay",
            "--check",
            "--project-root",
            root.to_str().unwrap(),
            "--permission",
            r#"{"bash":{"rm *":"deny"}}"#,
            log_arg,
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("every recorded decision was replayed alike"),
        "{err}"
    );
    // Under a looser policy (`rm` allowed; the sessions keep their recorded
    // modes), the changed decision is named.
    let (code, out, _) = support::run(
        &root,
        &[
            "replay",
            "--check",
            "--from",
            "audit",
            "--permission",
            r#"{"bash":{"rm *":"allow"}}"#,
            "--project-root",
            root.to_str().unwrap(),
            log_arg,
        ],
        "",
    );
    assert_eq!(code, 1);
    assert!(
        out.contains("main c2 bash `rm -rf build`: recorded deny"),
        "{out}"
    );

    // Never rewritten: a second broker appends.
    let before = all.len();
    let mut live = Live::start(&root, &["--audit", log_arg]);
    live.send(json!({"type":"tool_call","sessionID":"x","callID":"y","tool":"read","input":{"filePath":"a"}}));
    live.recv();
    live.close();
    let after = records(&log);
    assert_eq!(after.len(), before + 1);
    assert_eq!(after[..before], all[..]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A log that cannot be written: every call that would be allowed is
/// denied saying why; one that cannot be opened stops toolgate at start.
#[cfg(target_os = "linux")]
#[test]
fn a_log_that_cannot_be_written_denies() {
    let dir = support::project_dir("audit-full");
    let root = dir.canonicalize().unwrap();
    let mut live = Live::start(&root, &["--audit", "/dev/full"]);
    live.send(json!({"type":"tool_call","callID":"c","tool":"read","input":{"filePath":"a"}}));
    let decision = live.recv();
    assert_eq!(decision["decision"], "deny", "{decision}");
    assert!(
        decision["reason"]
            .as_str()
            .unwrap()
            .starts_with("the audit log cannot be written ("),
        "{decision}"
    );
    live.close();
    let missing = root.join("no/such/dir/audit.jsonl");
    let (code, out, err) =
        support::run(&root, &["serve", "--audit", missing.to_str().unwrap()], "");
    assert_eq!(code, 2, "{out}");
    assert!(err.contains("cannot open the audit log"), "{err}");
    assert!(out.is_empty(), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A shared broker's log names the client of each call: a hook process
/// that asked over the socket.
#[cfg(unix)]
#[test]
fn a_shared_broker_records_the_client() {
    let dir = support::project_dir("audit-socket");
    let root = dir.join("project");
    std::fs::create_dir_all(&root).unwrap();
    let root = root.canonicalize().unwrap();
    let log = dir.join("audit.jsonl");
    let broker = support::Listening::start(
        &dir.join("broker"),
        &root,
        &["--audit", log.to_str().unwrap()],
    );
    let input = json!({"session_id":"cc","transcript_path":"/dev/null","cwd":root,"permission_mode":"default",
        "hook_event_name":"PreToolUse","tool_name":"Read","tool_input":{"file_path":"a"},"tool_use_id":"toolu_1"});
    let (code, out, err) = support::run(
        &root,
        &[
            "hook",
            "claude",
            "--socket",
            broker.socket.to_str().unwrap(),
        ],
        &input.to_string(),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("allow"), "{out}");
    let record = decision_of(&records(&log), "toolu_1");
    assert_eq!(record["client"], "claude-hook", "{record}");
    assert_eq!(record["tool"], "Read", "{record}");
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
