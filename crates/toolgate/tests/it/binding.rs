//! An orchestrator puts the agents it starts under a parent session, within
//! a scope, through the hook's flags or its environment (`--parent`,
//! `--scope`, `--scope-file`; `TOOLGATE_PARENT`, `TOOLGATE_SCOPE`,
//! `TOOLGATE_SCOPE_FILE`): Codex, Gemini CLI and qwen-code choose their own
//! session ids, and are bound from their first call. Through spawned
//! processes: `serve --listen`, the hooks, `toolgate mcp`, and the
//! orchestrator's own connection in the test.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::support;

/// Environment variables for a hook.
type Env = Vec<(&'static str, String)>;

/// A scratch directory with a project in it.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("toolgate-bind-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("project/src")).unwrap();
    dir
}

/// The orchestrator's connection to the broker (role agent).
fn orchestrator(socket: &Path) -> support::Peer {
    support::Peer::connect(
        socket,
        json!({"type":"hello","role":"agent","client":"orchestrator"}),
    )
}

/// Run `toolgate hook AGENT ARGS` in `cwd` with `env` and `input`: the
/// hook's answer as `(decision, reason)`, in the agent's format.
fn hook(
    agent: &str,
    args: &[&str],
    env: &[(&str, &str)],
    input: &Value,
    cwd: &Path,
) -> (String, String) {
    // Gemini CLI names its pre-tool event BeforeTool.
    let mut input = input.clone();
    if agent == "gemini" {
        input["hook_event_name"] = json!("BeforeTool");
    }
    let out = support::hook_process(cwd, agent, args, env, input.to_string().as_bytes());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer = support::hook_answer(&out);
    if agent == "gemini" {
        return (
            answer["decision"].as_str().unwrap().to_string(),
            answer["reason"].as_str().unwrap().to_string(),
        );
    }
    let inner = &answer["hookSpecificOutput"];
    (
        inner["permissionDecision"].as_str().unwrap().to_string(),
        inner["permissionDecisionReason"]
            .as_str()
            .unwrap()
            .to_string(),
    )
}

/// A hook input of `agent` for `tool` with `input` in `session`, as each
/// agent names its shell and its edits.
fn input(session: &str, call: &str, tool: &str, tool_input: Value, cwd: &Path) -> Value {
    json!({"session_id": session, "hook_event_name": "PreToolUse", "tool_name": tool,
           "tool_input": tool_input, "tool_use_id": call, "cwd": cwd.to_string_lossy()})
}

/// Each agent's shell tool and a command that writes.
fn shell(agent: &str) -> &'static str {
    match agent {
        "gemini" => "run_shell_command",
        "qwen" => "run_shell_command",
        _ => "Bash",
    }
}

#[test]
fn codex_gemini_and_qwen_hooks_are_bound_under_the_parent_from_their_first_call() {
    let dir = scratch("socket");
    let project = dir.join("project");
    let broker = support::Listening::start(&dir, &project, &["--mode", "auto"]);
    let socket = broker.socket.to_string_lossy().to_string();
    let mut orchestrator = orchestrator(&broker.socket);
    let started = orchestrator.ask(
        json!({"type":"session_start","sessionID":"orch","mode":"auto"}),
        "session_started",
    );
    assert_eq!(started["sessionID"], "orch");
    let scope_file = dir.join("scope.json");
    std::fs::write(&scope_file, r#"{"deniedTools":["Edit"]}"#).unwrap();
    let scope_file = scope_file.to_string_lossy().to_string();
    // Codex by environment, Gemini by flags, qwen by environment with a
    // scope file: each chooses its own session id.
    let agents: Vec<(&str, Vec<String>, Env)> = vec![
        (
            "codex",
            vec![],
            vec![
                ("TOOLGATE_PARENT", "orch".to_string()),
                ("TOOLGATE_SCOPE", r#"{"deniedTools":["Edit"]}"#.to_string()),
            ],
        ),
        (
            "gemini",
            vec![
                "--parent".into(),
                "orch".into(),
                "--scope".into(),
                r#"{"deniedTools":["Edit"]}"#.into(),
            ],
            vec![],
        ),
        (
            "qwen",
            vec![],
            vec![
                ("TOOLGATE_PARENT", "orch".to_string()),
                ("TOOLGATE_SCOPE_FILE", scope_file.clone()),
            ],
        ),
    ];
    for (agent, flags, env) in &agents {
        let session = format!("{agent}-chosen-by-itself");
        let mut args: Vec<&str> = vec!["--socket", &socket];
        args.extend(flags.iter().map(String::as_str));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let edit = match *agent {
            "gemini" => (
                "write_file",
                json!({"file_path": "src/a.rs", "content": "x"}),
            ),
            "qwen" => (
                "write_file",
                json!({"file_path": "src/a.rs", "content": "x"}),
            ),
            _ => (
                "apply_patch",
                json!({"command": "*** Begin Patch\n*** Add File: src/a.rs\n+x\n*** End Patch\n"}),
            ),
        };
        // The first call is already bound by the scope: the parent (auto)
        // would allow the edit.
        let (decision, reason) = hook(
            agent,
            &args,
            &env,
            &input(&session, "c1", edit.0, edit.1.clone(), &project),
            &project,
        );
        assert_eq!(decision, "deny", "{agent}: {reason}");
        assert!(reason.contains("scope"), "{agent}: {reason}");
        let touch = json!({"command": "touch made"});
        let (decision, reason) = hook(
            agent,
            &args,
            &env,
            &input(&session, "c2", shell(agent), touch.clone(), &project),
            &project,
        );
        assert_eq!(decision, "allow", "{agent}: {reason}");
        // It runs under the parent: the parent in plan mode holds it too.
        orchestrator.ask(
            json!({"type":"set_mode","sessionID":"orch","mode":"plan"}),
            "mode_changed",
        );
        let (decision, reason) = hook(
            agent,
            &args,
            &env,
            &input(&session, "c3", shell(agent), touch, &project),
            &project,
        );
        assert_eq!(decision, "deny", "{agent}: {reason}");
        assert!(reason.contains("plan mode"), "{agent}: {reason}");
        orchestrator.ask(
            json!({"type":"set_mode","sessionID":"orch","mode":"auto"}),
            "mode_changed",
        );
    }
    // The orchestrator ends its session: every agent's session ends with
    // it, deepest first.
    orchestrator.send(json!({"type":"session_end","sessionID":"orch"}));
    let mut ended = Vec::new();
    while ended.last().map(String::as_str) != Some("orch") {
        let frame = orchestrator.recv();
        if frame["type"] == "session_ended" {
            ended.push(frame["sessionID"].as_str().unwrap().to_string());
        }
    }
    ended.sort();
    assert_eq!(
        ended,
        [
            "codex-chosen-by-itself",
            "gemini-chosen-by-itself",
            "orch",
            "qwen-chosen-by-itself"
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_session_started_under_another_parent_is_not_moved_and_runs_nothing() {
    let dir = scratch("other-parent");
    let project = dir.join("project");
    let broker = support::Listening::start(&dir, &project, &["--mode", "auto"]);
    let socket = broker.socket.to_string_lossy().to_string();
    let mut orchestrator = orchestrator(&broker.socket);
    orchestrator.ask(
        json!({"type":"session_start","sessionID":"a"}),
        "session_started",
    );
    orchestrator.ask(
        json!({"type":"session_start","sessionID":"b"}),
        "session_started",
    );
    orchestrator.ask(
        json!({"type":"session_start","sessionID":"agent-1","parentID":"a"}),
        "session_started",
    );
    let call = input("agent-1", "c1", "Bash", json!({"command": "ls"}), &project);
    let (decision, reason) = hook(
        "codex",
        &["--socket", &socket, "--parent", "b"],
        &[],
        &call,
        &project,
    );
    assert_eq!(decision, "deny", "{reason}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_scope_that_cannot_be_used_is_a_denial_naming_it() {
    let dir = scratch("bad-scope");
    let project = dir.join("project");
    let call = input("s", "c1", "Bash", json!({"command": "ls"}), &project);
    for (args, env, expected) in [
        (vec!["--scope", "nope"], vec![], "--scope is not JSON"),
        (
            vec!["--scope", r#"{"allowedTool":["Read"]}"#],
            vec![],
            "allowedTool",
        ),
        (vec![], vec![("TOOLGATE_SCOPE", "[1]")], "TOOLGATE_SCOPE"),
        (
            vec!["--scope-file", "/nonexistent/scope.json"],
            vec![],
            "cannot read the scope file /nonexistent/scope.json",
        ),
        (
            vec![],
            vec![("TOOLGATE_SCOPE", "{}"), ("TOOLGATE_SCOPE_FILE", "/x")],
            "TOOLGATE_SCOPE and TOOLGATE_SCOPE_FILE name two scopes",
        ),
        (vec!["--parent", " "], vec![], "--parent names no session"),
    ] {
        let (decision, reason) = hook("codex", &args, &env, &call, &project);
        assert_eq!(decision, "deny", "{args:?} {env:?}: {reason}");
        assert!(reason.contains(expected), "{args:?} {env:?}: {reason}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn in_process_with_a_state_directory_the_scope_binds_later_calls_too() {
    let dir = scratch("state");
    let project = dir.join("project");
    let state = dir.join("state");
    let state = state.to_string_lossy().to_string();
    let scope = r#"{"allowedTools":["Read","Bash"],"commandPatterns":["ls *","git status*"]}"#;
    let call = |id: &str, tool: &str, tool_input: Value, args: &[&str]| {
        let mut all = vec!["--mode", "auto", "--state-dir", state.as_str()];
        all.extend_from_slice(args);
        hook(
            "codex",
            &all,
            &[],
            &input("codex-9", id, tool, tool_input, &project),
            &project,
        )
    };
    let (decision, reason) = call(
        "c1",
        "Bash",
        json!({"command": "ls -la"}),
        &["--parent", "orch", "--scope", scope],
    );
    assert_eq!(decision, "allow", "{reason}");
    let (decision, reason) = call(
        "c2",
        "Bash",
        json!({"command": "rm -rf src"}),
        &["--parent", "orch", "--scope", scope],
    );
    assert_eq!(decision, "deny", "{reason}");
    // A later call of the same session, without the flags: still bound.
    let (decision, reason) = call("c3", "Bash", json!({"command": "touch x"}), &[]);
    assert_eq!(decision, "deny", "{reason}");
    assert!(reason.contains("scope"), "{reason}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mcp_binds_its_session_in_process_and_through_a_broker() {
    let dir = scratch("mcp");
    let project = dir.join("project");
    let broker = support::Listening::start(&dir, &project, &["--mode", "auto"]);
    let socket = broker.socket.to_string_lossy().to_string();
    let mut orchestrator = orchestrator(&broker.socket);
    orchestrator.ask(
        json!({"type":"session_start","sessionID":"orch","mode":"plan"}),
        "session_started",
    );
    let lines = [
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}),
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"approve","arguments":{"tool_name":"Write","input":{"file_path":"src/a.rs","content":"x"},"tool_use_id":"w1"}}}),
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"approve","arguments":{"tool_name":"Read","input":{"file_path":"src/a.rs"},"tool_use_id":"r1"}}}),
    ];
    let run = |args: &[&str]| -> Vec<Value> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .arg("mcp")
            .args(args)
            .current_dir(&project)
            .env_remove("TOOLGATE_SOCKET")
            .env_remove("TOOLGATE_MODE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        for line in &lines {
            writeln!(stdin, "{line}").unwrap();
        }
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        let mut replies: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        replies.sort_by_key(|reply| reply["id"].as_i64());
        replies
            .iter()
            .skip(1)
            .map(|reply| {
                serde_json::from_str(reply["result"]["content"][0]["text"].as_str().unwrap())
                    .unwrap()
            })
            .collect()
    };
    // Under a parent in plan mode, through the broker: the write is denied.
    let behaviours = run(&[
        "--socket",
        &socket,
        "--session",
        "claude-1",
        "--parent",
        "orch",
    ]);
    assert_eq!(behaviours[0]["behavior"], "deny", "{behaviours:?}");
    assert_eq!(behaviours[1]["behavior"], "allow", "{behaviours:?}");
    // In-process, in auto mode, a scope that allows reads only.
    let behaviours = run(&["--mode", "auto", "--scope", r#"{"allowedTools":["Read"]}"#]);
    assert_eq!(behaviours[0]["behavior"], "deny", "{behaviours:?}");
    assert!(
        behaviours[0]["message"].as_str().unwrap().contains("scope"),
        "{behaviours:?}"
    );
    assert_eq!(behaviours[1]["behavior"], "allow", "{behaviours:?}");
    // A scope it cannot use stops it before it answers anything.
    let status = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["mcp", "--scope", "{"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(unix)]
#[test]
fn a_hook_sub_agent_meets_the_scope_of_the_delegations_its_session_made() {
    // Claude Code's hook cannot say which Task call started a sub-agent:
    // its calls run in SESSION/agent/ID, which meets the scope of every
    // sub-task SESSION started with permissions.
    let dir = scratch("binding-delegated-scope");
    let root = dir.join("project");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "a\n").unwrap();
    let broker = support::Listening::start(&dir.join("broker"), &root, &["--mode", "auto"]);
    let socket = broker.socket.display().to_string();
    let args = ["--socket", socket.as_str()];
    let call = |session: &str, agent: Option<&str>, id: &str, tool: &str, input: Value| {
        let mut frame = json!({"session_id": session, "hook_event_name": "PreToolUse",
            "tool_name": tool, "tool_input": input, "tool_use_id": id, "cwd": root});
        if let Some(agent) = agent {
            frame["agent_id"] = json!(agent);
            frame["agent_type"] = json!("general-purpose");
        }
        hook("claude", &args, &[], &frame, &root)
    };
    let task = json!({"description": "look", "prompt": "look around", "subagent_type": "general-purpose",
        "permissions": {"allowedTools": ["Read"]}});
    assert_eq!(call("p", None, "toolu_task", "Task", task).0, "allow");
    let (decision, reason) = call("p", Some("a1"), "toolu_1", "Bash", json!({"command": "ls"}));
    assert_eq!(decision, "deny", "{reason}");
    let read = json!({"file_path": root.join("a.txt")});
    assert_eq!(
        call("p", Some("a1"), "toolu_2", "Read", read.clone()).0,
        "allow"
    );
    // A session that delegated nothing: its sub-agent runs in auto mode.
    assert_eq!(
        call("q", Some("a1"), "toolu_3", "Bash", json!({"command": "ls"})).0,
        "allow"
    );
}
