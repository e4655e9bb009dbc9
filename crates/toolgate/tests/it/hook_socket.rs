//! `toolgate hook AGENT --socket PATH`: each hook process is a client of one
//! running broker, so sessions, grants, doom-loop counts and human approvers
//! are shared across hook calls; with no broker there, every call is denied.
//! Everything through spawned processes: `serve --listen`, the hooks, and an
//! approver connection in the test.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support;

struct Broker {
    listening: support::Listening,
    dir: PathBuf,
}

impl Broker {
    fn start(name: &str, args: &[&str]) -> Broker {
        let dir =
            std::env::temp_dir().join(format!("toolgate-hooksock-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("project/src")).unwrap();
        let listening = support::Listening::start(&dir, &dir.join("project"), args);
        Broker { listening, dir }
    }

    fn project(&self) -> PathBuf {
        self.dir.join("project")
    }

    /// An approver connection.
    fn approver(&self) -> Approver {
        Approver(support::Peer::connect(
            &self.listening.socket,
            json!({"type":"hello","role":"approver","client":"test"}),
        ))
    }
}

struct Approver(support::Peer);

impl Approver {
    fn send(&mut self, frame: Value) {
        self.0.send(frame)
    }

    fn recv(&mut self) -> Value {
        self.0.recv()
    }

    /// The next question, answered with `response` (and `message`).
    fn answer(&mut self, response: &str, message: Option<&str>) -> Value {
        let question = self.recv();
        assert_eq!(question["type"], "permission_request", "{question}");
        let mut answer = json!({"type":"permission_response","permissionID":question["permissionID"],"response":response});
        if let Some(message) = message {
            answer["message"] = json!(message);
        }
        self.send(answer);
        question
    }
}

/// Run `toolgate hook AGENT ARGS` with `input` on stdin (its `cwd` the
/// project unless it names one); the answer's JSON.
fn hook(agent: &str, args: &[&str], input: &Value, cwd: &Path) -> Value {
    let mut input = input.clone();
    if input.get("cwd").is_none() {
        input["cwd"] = json!(cwd.to_string_lossy());
    }
    let out = support::hook_process(cwd, agent, args, &[], input.to_string().as_bytes());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Claude Code's hook input; `cwd` is the project (TOOLGATE_TEST_CWD).
fn claude(session: &str, call: &str, mode: &str, tool: &str, input: Value) -> Value {
    json!({"session_id":session,"transcript_path":"/dev/null","permission_mode":mode,
           "hook_event_name":"PreToolUse","tool_name":tool,"tool_input":input,"tool_use_id":call})
}

fn decision(answer: &Value) -> (&str, &str) {
    let inner = &answer["hookSpecificOutput"];
    (
        inner["permissionDecision"].as_str().unwrap(),
        inner["permissionDecisionReason"].as_str().unwrap(),
    )
}

#[test]
fn hooks_share_the_brokers_approvers_and_grants() {
    let broker = Broker::start("share", &[]);
    let sock = broker.listening.socket.to_str().unwrap().to_string();
    let project = broker.project();
    let file = |name: &str| project.join(name).to_string_lossy().into_owned();
    let mut approver = broker.approver();
    let answering = std::thread::spawn(move || {
        let q1 = approver.answer("always", None);
        let q2 = approver.answer("reject", Some("not today"));
        (q1, q2, approver)
    });
    // A first hook process: the approver grants edits for the session.
    let a = hook(
        "claude",
        &["--socket", &sock],
        &claude(
            "s1",
            "t1",
            "default",
            "Edit",
            json!({"file_path":file("src/a.rs"),"old_string":"x","new_string":"y"}),
        ),
        &project,
    );
    assert_eq!(decision(&a).0, "allow", "{a}");
    // A second hook process in the same session: the grant holds, no question.
    let b = hook(
        "claude",
        &["--socket", &sock],
        &claude(
            "s1",
            "t2",
            "default",
            "Edit",
            json!({"file_path":file("src/b.rs"),"old_string":"x","new_string":"y"}),
        ),
        &project,
    );
    assert_eq!(decision(&b), ("allow", decision(&b).1));
    assert!(decision(&b).1.contains("grant"), "{b}");
    // Another session is asked; the approver rejects with a message the model reads.
    let c = hook(
        "claude",
        &["--socket", &sock],
        &claude(
            "s2",
            "t3",
            "default",
            "Edit",
            json!({"file_path":file("src/a.rs"),"old_string":"x","new_string":"y"}),
        ),
        &project,
    );
    let (q1, q2, _approver) = answering.join().unwrap();
    assert_eq!(decision(&c).0, "deny");
    assert!(decision(&c).1.contains("not today"), "{c}");
    assert_eq!(q1["metadata"]["client"], "claude-hook");
    assert_eq!(q1["sessionID"], "s1");
    assert_eq!(q2["sessionID"], "s2");
}

#[test]
fn without_an_approver_the_agent_prompts_and_the_question_is_withdrawn() {
    let broker = Broker::start("ask", &[]);
    let sock = broker.listening.socket.to_str().unwrap().to_string();
    let project = broker.project();
    let input = claude(
        "s",
        "t1",
        "default",
        "Bash",
        json!({"command":"npm publish"}),
    );
    let answer = hook("claude", &["--socket", &sock], &input, &project);
    assert_eq!(decision(&answer).0, "ask", "{answer}");
    // Withdrawn: once the broker has read the withdrawal (each connection
    // is read on its own, so a connection opened now may be read first),
    // an approver connecting hears nothing, and the same call id can be
    // asked again.
    let mut watcher = broker.approver();
    watcher.send(json!({"type":"hello","role":"observer"}));
    // As an approver it may have been given the question not yet
    // withdrawn: frames before its new `ready` are skipped.
    loop {
        let frame = watcher.recv();
        if frame["type"] == "ready" {
            assert_eq!(frame["role"], "observer", "{frame}");
            break;
        }
    }
    loop {
        watcher.send(json!({"type":"list_pending"}));
        let pending = loop {
            let frame = watcher.recv();
            if frame["type"] == "pending" {
                break frame;
            }
        };
        if pending["questions"].as_array().unwrap().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut approver = broker.approver();
    let again = std::thread::spawn(move || approver.answer("once", None));
    let answer = hook("claude", &["--socket", &sock], &input, &project);
    assert_eq!(decision(&answer).0, "allow", "{answer}");
    let question = again.join().unwrap();
    assert_eq!(question["callID"], "t1");
    // Gemini CLI cannot prompt: there an unanswered question is a denial.
    let gemini = json!({"session_id":"g","cwd":"/tmp","hook_event_name":"BeforeTool","tool_name":"run_shell_command","tool_input":{"command":"npm publish"}});
    let answer = hook(
        "gemini",
        &["--socket", &sock, "--wait", "1"],
        &gemini,
        &project,
    );
    assert_eq!(answer["decision"], "deny", "{answer}");
}

#[test]
fn the_doom_loop_count_is_shared_by_hook_processes() {
    let broker = Broker::start("doom", &["--mode", "auto"]);
    let sock = broker.listening.socket.to_str().unwrap().to_string();
    let project = broker.project();
    let input = |call: &str| {
        claude(
            "loop",
            call,
            "bypassPermissions",
            "Bash",
            json!({"command":"make test"}),
        )
    };
    for call in ["t1", "t2"] {
        let answer = hook("claude", &["--socket", &sock], &input(call), &project);
        assert_eq!(decision(&answer).0, "allow", "{answer}");
    }
    // The third identical call, from a third process, asks.
    let answer = hook("claude", &["--socket", &sock], &input("t3"), &project);
    assert_eq!(decision(&answer).0, "ask", "{answer}");
    assert!(
        decision(&answer).1.contains("doom") || decision(&answer).1.contains("same"),
        "{answer}"
    );
}

#[test]
fn a_hook_never_waits_past_its_time_and_never_fails_open() {
    // No broker at the socket: denied, naming it.
    let dir = std::env::temp_dir().join(format!("toolgate-hooksock-{}-none", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("nobody.sock");
    let input = claude("s", "t1", "default", "Read", json!({"file_path":"/tmp/x"}));
    let answer = hook(
        "claude",
        &["--socket", missing.to_str().unwrap()],
        &input,
        &dir,
    );
    assert_eq!(decision(&answer).0, "deny");
    assert!(
        decision(&answer)
            .1
            .contains("no toolgate broker listens on"),
        "{answer}"
    );
    // TOOLGATE_SOCKET works like --socket.
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["hook", "claude"])
        .env("TOOLGATE_SOCKET", &missing)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.to_string().as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(decision(&answer).0, "deny");
    let _ = std::fs::remove_dir_all(&dir);

    let broker = Broker::start("wait", &[]);
    let sock = broker.listening.socket.to_str().unwrap().to_string();
    let project = broker.project();
    // Every flag that builds a broker belongs to the one listening: each
    // is refused, as a denial naming it (the mode is passed on instead).
    for flag in [
        ["--policy", "x.json"],
        ["--permission", "{}"],
        ["--project-root", "."],
        ["--agent", "build"],
        ["--read-only-agents", "Explore"],
        ["--state-dir", "state"],
        ["--audit", "audit.jsonl"],
    ] {
        let mut args = vec!["--socket", sock.as_str()];
        args.extend(flag);
        let answer = hook("claude", &args, &input, &project);
        assert_eq!(decision(&answer).0, "deny", "{flag:?}");
        let reason = decision(&answer).1;
        assert!(
            reason.contains(&format!("{} belong to the broker", flag[0])),
            "{flag:?}: {answer}"
        );
    }
    // An approver that does not answer: denied when --wait runs out, and
    // the approver sees the question withdrawn.
    let mut approver = broker.approver();
    let slow = claude(
        "s",
        "t2",
        "default",
        "Bash",
        json!({"command":"npm publish"}),
    );
    let answer = hook(
        "claude",
        &["--socket", &sock, "--wait", "1"],
        &slow,
        &project,
    );
    assert_eq!(decision(&answer).0, "deny");
    assert!(
        decision(&answer).1.contains("no decision within 1 s"),
        "{answer}"
    );
    assert_eq!(approver.recv()["type"], "permission_request");
    let resolved = approver.recv();
    assert_eq!(resolved["type"], "permission_resolved", "{resolved}");
}

#[test]
fn a_sub_agents_calls_join_one_child_session_bound_by_plan_mode() {
    let broker = Broker::start("subagent", &[]);
    let sock = broker.listening.socket.to_str().unwrap().to_string();
    let project = broker.project();
    let sub = |call: &str, tool: &str, input: Value| {
        let mut frame = claude("orch", call, "plan", tool, input);
        frame["agent_id"] = json!("a1");
        frame["agent_type"] = json!("Explore");
        frame
    };
    // Two calls from the same sub-agent, each from its own hook process:
    // the second joins the child the first started.
    let read = hook(
        "claude",
        &["--socket", &sock],
        &sub("t1", "Read", json!({"file_path":"src/a.rs"})),
        &project,
    );
    assert_eq!(decision(&read).0, "allow", "{read}");
    let write = hook(
        "claude",
        &["--socket", &sock],
        &sub(
            "t2",
            "Write",
            json!({"file_path":"src/new.rs","content":"x"}),
        ),
        &project,
    );
    assert_eq!(decision(&write).0, "deny", "{write}");
    assert!(decision(&write).1.contains("plan mode"), "{write}");
    let again = hook(
        "claude",
        &["--socket", &sock],
        &sub("t3", "Read", json!({"file_path":"src/b.rs"})),
        &project,
    );
    assert_eq!(decision(&again).0, "allow", "{again}");
}
