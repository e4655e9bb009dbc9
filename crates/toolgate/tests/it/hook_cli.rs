//! `toolgate hook claude|qwen` through the spawned binary: one hook input on
//! stdin, the agent's answer on stdout. A data table of inputs and the
//! decision and reason each must get; every failure of input, mode or policy
//! is a denial (never an allow, never a crash). The same hook driven by the
//! real agents is `scripts/e2e-hooks`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::support;

/// Run `toolgate hook AGENT ARGS` in `dir` with `input` on stdin: exit code and answer.
fn hook(dir: &Path, agent: &str, args: &[&str], env: &[(&str, &str)], input: &str) -> (i32, Value) {
    let out = support::hook_process(dir, agent, args, env, input.as_bytes());
    (out.status.code().unwrap_or(-1), support::hook_answer(&out))
}

/// `decision: reason` of an answer, checked to be in the agent's format
/// (Gemini CLI's `decision`/`reason`, else Claude Code's).
fn render(answer: &Value) -> String {
    if let Some(decision) = answer.get("decision") {
        assert_eq!(answer.as_object().unwrap().len(), 2, "{answer}");
        return format!(
            "{}: {}",
            decision.as_str().unwrap(),
            answer["reason"].as_str().unwrap()
        );
    }
    let inner = &answer["hookSpecificOutput"];
    assert_eq!(inner["hookEventName"], "PreToolUse", "{answer}");
    format!(
        "{}: {}",
        inner["permissionDecision"].as_str().unwrap(),
        inner["permissionDecisionReason"].as_str().unwrap()
    )
}

fn call(mode: Option<&str>, tool: &str, input: Value) -> String {
    let mut frame = json!({
        "session_id": "sess-1",
        "transcript_path": "/tmp/t.jsonl",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": input,
        "tool_use_id": "toolu_01",
    });
    if let Some(mode) = mode {
        frame["permission_mode"] = json!(mode);
    }
    frame.to_string()
}

/// A hook input as Gemini CLI sends it: its event is `BeforeTool`.
fn gemini(input: String) -> String {
    input.replace("\"PreToolUse\"", "\"BeforeTool\"")
}

#[test]
fn hook_answers_in_the_agents_format_and_fails_closed() {
    let dir = support::project_dir("hook-table");
    std::fs::write(
        dir.join("toolgate.json"),
        r#"{"permission":{"bash":{"rm *":"deny"}}}"#,
    )
    .unwrap();
    let write = json!({"file_path": "src/a.rs", "content": "x"});
    let cases: Vec<(&str, Vec<&str>, String, &str)> = vec![
        // The agent's own mode decides when none is configured.
        ("claude", vec![], call(Some("plan"), "Write", write.clone()), "deny: toolgate: plan mode does not allow file edits"),
        ("claude", vec![], call(Some("acceptEdits"), "Write", write.clone()), "allow: toolgate: auto_edit mode allows file edits"),
        ("claude", vec![], call(Some("default"), "Write", write.clone()), "ask: toolgate: ask mode asks before file edits"),
        ("claude", vec![], call(Some("bypassPermissions"), "Write", write.clone()), "allow: toolgate: auto mode allows file edits"),
        // dontAsk: what would ask is denied.
        ("claude", vec![], call(Some("dontAsk"), "Write", write.clone()), "deny: toolgate: ask mode asks before file edits, writes, patches, deletes and moves; nobody can be asked here"),
        // --mode with the agent's mode: the stricter applies.
        ("claude", vec!["--mode", "plan"], call(Some("bypassPermissions"), "Write", write.clone()), "deny: toolgate: plan mode does not allow file edits"),
        ("claude", vec!["--mode", "auto"], call(Some("plan"), "Write", write.clone()), "deny: toolgate: plan mode does not allow file edits"),
        // The policy's rules hold in every mode.
        ("claude", vec![], call(Some("bypassPermissions"), "Bash", json!({"command": "rm -rf src"})), "deny: toolgate: the `$ROOT/toolgate.json` rule `bash: rm *` denies `rm -rf src`"),
        ("claude", vec![], call(Some("plan"), "Bash", json!({"command": "git status"})), "allow: toolgate: `git status` only reads"),
        // qwen-code's own names and modes.
        ("qwen", vec![], call(Some("yolo"), "write_file", json!({"file_path": "a.txt", "content": "x"})), "allow: toolgate: auto mode allows file edits"),
        ("qwen", vec![], call(Some("plan"), "run_shell_command", json!({"command": "touch x"})), "deny: toolgate: plan mode allows only read-only shell commands"),
        // Gemini CLI: no permission mode, no way to ask.
        ("gemini", vec![], gemini(call(None, "read_file", json!({"file_path": "a"}))), "allow: toolgate: ask mode allows file reads"),
        ("gemini", vec![], gemini(call(None, "write_file", json!({"file_path": "a", "content": "x"}))), "deny: toolgate: ask mode asks before file edits, writes, patches, deletes and moves; nobody can be asked here"),
        ("gemini", vec!["--mode", "auto_edit"], gemini(call(None, "write_file", json!({"file_path": "a", "content": "x"}))), "allow: toolgate: auto_edit mode allows file edits"),
        ("gemini", vec![], "{".to_string(), "deny: toolgate hook: the hook input is not JSON"),
        // Codex: its shell as `Bash`, its patch text in `command`.
        ("codex", vec!["--mode", "plan"], call(Some("bypassPermissions"), "Bash", json!({"command": "echo hi > made.txt"})), "deny: toolgate: plan mode allows only read-only shell commands"),
        ("codex", vec![], call(Some("bypassPermissions"), "apply_patch", json!({"command": "*** Begin Patch\n*** Add File: /etc/cron.d/x\n+x\n*** End Patch\n"})), "allow: toolgate: auto mode allows what would ask (the built-in rule `external_directory: *`"),
        ("codex", vec!["--mode", "ask"], call(Some("bypassPermissions"), "apply_patch", json!({"command": "*** Begin Patch\n*** Add File: src/x.rs\n+x\n*** End Patch\n"})), "ask: toolgate: ask mode asks before file edits"),
        // Whatever cannot be read or decided is denied.
        ("claude", vec![], "not json".to_string(), "deny: toolgate hook: the hook input is not JSON"),
        ("claude", vec![], "[1]".to_string(), "deny: toolgate hook: the hook input is not a JSON object"),
        ("claude", vec![], json!({"session_id": "s"}).to_string(), "deny: toolgate hook: the hook input has no `tool_name`"),
        ("claude", vec![], json!({"tool_name": "Write", "tool_input": "x"}).to_string(), "deny: toolgate hook: `tool_input` is not a JSON object"),
        ("claude", vec![], call(Some("careful"), "Read", json!({"file_path": "a"})), "deny: toolgate hook: `permission_mode` \"careful\" is not a mode toolgate knows"),
        ("claude", vec!["--permission", "{\"edti\":\"allow\"}"], call(Some("default"), "Read", json!({"file_path": "a"})), "deny: toolgate hook: the broker could not start"),
    ];
    let root = dir.canonicalize().unwrap();
    let mut failures = Vec::new();
    for (agent, args, input, expected) in &cases {
        let (code, answer) = hook(&dir, agent, args, &[], input);
        let actual = render(&answer).replace(root.to_str().unwrap(), "$ROOT");
        if code != 0 || !actual.starts_with(expected) {
            failures.push(format!(
                "{agent} {args:?} {input}\n  expected {expected}…\n  actual   {actual} (exit {code})"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// With a state directory, an earlier hook call's session is remembered:
/// the mode set by `TOOLGATE_MODE` applies, and the session file is kept.
#[test]
fn the_state_directory_keeps_the_hooks_sessions() {
    let dir = support::project_dir("hook-state");
    let state = support::state_dir("hook-state");
    let state_arg = state.to_str().unwrap();
    for _ in 0..2 {
        let (code, answer) = hook(
            &dir,
            "claude",
            &["--state-dir", state_arg],
            &[("TOOLGATE_MODE", "readonly")],
            &call(Some("default"), "Bash", json!({"command": "npm publish"})),
        );
        assert_eq!(code, 0);
        assert!(
            render(&answer).starts_with("deny: toolgate: readonly mode"),
            "{answer}"
        );
    }
    let files: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("project-"))
        .collect();
    assert!(!files.is_empty(), "no state file was written");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&state);
}

/// A call as Claude Code sends it from inside a sub-agent: `agent_id` and
/// `agent_type` beside the agent's session.
fn sub_call(mode: &str, agent_id: Value, tool: &str, input: Value) -> String {
    let mut frame: Value = serde_json::from_str(&call(Some(mode), tool, input)).unwrap();
    frame["agent_id"] = agent_id;
    frame["agent_type"] = json!("Explore");
    frame.to_string()
}

/// Plan mode lets the model launch read-only sub-agent types (Explore and
/// Plan by default; `--read-only-agents` or the policy file's
/// `readOnlyAgents` replace the list), and no other.
#[test]
fn plan_mode_launches_only_read_only_sub_agents() {
    let dir = support::project_dir("hook-read-only-agents");
    let scout = support::project_dir("hook-read-only-agents-file");
    std::fs::write(
        scout.join("toolgate.json"),
        r#"{"readOnlyAgents":["Scout"]}"#,
    )
    .unwrap();
    let launch = |tool: &str, kind: &str| {
        call(
            Some("plan"),
            tool,
            json!({"subagent_type": kind, "description": "look", "prompt": "find the bug"}),
        )
    };
    let allowed =
        "allow: toolgate: plan mode allows sub-agents of a read-only type (readOnlyAgents)";
    let denied = "deny: toolgate: plan mode does not allow sub-agents";
    let cases: Vec<(&Path, &str, Vec<&str>, String, &str)> = vec![
        (&dir, "claude", vec![], launch("Agent", "Explore"), allowed),
        (&dir, "claude", vec![], launch("Task", "Plan"), allowed),
        (
            &dir,
            "claude",
            vec![],
            launch("Agent", "general-purpose"),
            denied,
        ),
        // Names are compared exactly: a custom `explore` agent may write.
        (&dir, "claude", vec![], launch("Agent", "explore"), denied),
        (
            &dir,
            "claude",
            vec![],
            call(Some("plan"), "Agent", json!({"prompt": "x"})),
            denied,
        ),
        (
            &dir,
            "claude",
            vec!["--read-only-agents", "Reviewer, Explore"],
            launch("Agent", "Reviewer"),
            allowed,
        ),
        (
            &dir,
            "claude",
            vec!["--read-only-agents", "Reviewer"],
            launch("Agent", "Plan"),
            denied,
        ),
        (
            &dir,
            "claude",
            vec!["--read-only-agents", ""],
            launch("Agent", "Explore"),
            denied,
        ),
        (&scout, "claude", vec![], launch("Agent", "Scout"), allowed),
        (&scout, "claude", vec![], launch("Agent", "Explore"), denied),
        // The flag beats the file.
        (
            &scout,
            "claude",
            vec!["--read-only-agents", "Explore"],
            launch("Agent", "Scout"),
            denied,
        ),
        // Outside plan mode nothing changes; read-only mode starts no agents.
        (
            &dir,
            "claude",
            vec![],
            call(
                Some("default"),
                "Agent",
                json!({"subagent_type": "general-purpose", "prompt": "x"}),
            ),
            "ask: toolgate: ask mode asks before sub-agents",
        ),
        (
            &dir,
            "claude",
            vec!["--mode", "readonly"],
            launch("Agent", "Explore"),
            "deny: toolgate: readonly mode does not allow sub-agents",
        ),
        // qwen-code's `agent` tool takes the same `subagent_type`.
        (&dir, "qwen", vec![], launch("agent", "Explore"), allowed),
        (
            &dir,
            "qwen",
            vec![],
            launch("agent", "general-purpose"),
            denied,
        ),
    ];
    let mut failures = Vec::new();
    for (dir, agent, args, input, expected) in &cases {
        let (code, answer) = hook(dir, agent, args, &[], input);
        let actual = render(&answer);
        if code != 0 || !actual.starts_with(expected) {
            failures.push(format!(
                "{agent} {args:?} {input}\n  expected {expected}…\n  actual   {actual} (exit {code})"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // A wildcard is refused: it would admit agent types added later.
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["hook", "claude", "--read-only-agents", "Ex*"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("`Ex*` is a wildcard"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(scout.join("toolgate.json"), r#"{"readOnlyAgents":["*"]}"#).unwrap();
    let (_, answer) = hook(&scout, "claude", &[], &[], &launch("Agent", "Explore"));
    assert!(
        render(&answer).contains("readOnlyAgents[0]: `*` is a wildcard")
            || render(&answer).starts_with("deny: toolgate hook: the broker could not start"),
        "{answer}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&scout);
}

/// A sub-agent's calls run in the child session `SESSION/agent/AGENT_ID`
/// of the agent's session: they are bound by the parent's mode even when the
/// sub-agent reports a looser one, and the child is kept in the state
/// directory with its parent.
#[test]
fn a_sub_agents_calls_run_in_a_child_session_bound_by_the_parents_mode() {
    let dir = support::project_dir("hook-sub-agent");
    let state = support::state_dir("hook-sub-agent");
    let args = ["--state-dir", state.to_str().unwrap()];
    let write = json!({"file_path": "src/a.rs", "content": "x"});
    let run = |input: String| render(&hook(&dir, "claude", &args, &[], &input).1);
    // The agent is in plan mode and launches an Explore sub-agent.
    let launch = call(
        Some("plan"),
        "Agent",
        json!({"subagent_type": "Explore", "prompt": "look"}),
    );
    assert!(run(launch).starts_with("allow: "));
    let steps = [
        // Reads go through in the sub-agent; writes do not.
        (
            sub_call(
                "plan",
                json!("a1b2"),
                "Read",
                json!({"file_path": "src/a.rs"}),
            ),
            "allow: toolgate: plan mode allows file reads",
        ),
        (
            sub_call("plan", json!("a1b2"), "Write", write.clone()),
            "deny: toolgate: plan mode does not allow file edits",
        ),
        // A sub-agent that reports a looser mode stays bound by the parent's.
        (
            sub_call("bypassPermissions", json!("a1b2"), "Write", write.clone()),
            "deny: toolgate: plan mode does not allow file edits",
        ),
        (
            sub_call(
                "bypassPermissions",
                json!("c3d4"),
                "Bash",
                json!({"command": "touch x"}),
            ),
            "deny: toolgate: plan mode allows only read-only shell commands",
        ),
        // An unusable agent id is a denial.
        (
            sub_call("plan", json!(7), "Read", json!({"file_path": "a"})),
            "deny: toolgate hook: `agent_id` is not a string",
        ),
        (
            sub_call("plan", json!("a/b"), "Read", json!({"file_path": "a"})),
            "deny: toolgate hook: `agent_id` \"a/b\" is not a sub-agent id",
        ),
    ];
    for (input, expected) in steps {
        let actual = run(input.clone());
        assert!(
            actual.starts_with(expected),
            "{input}\n  expected {expected}…\n  actual   {actual}"
        );
    }
    // The children are kept with their parent.
    let text: String = std::fs::read_dir(&state)
        .unwrap()
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("project-"))
        .map(|entry| std::fs::read_to_string(entry.path()).unwrap())
        .collect();
    for child in ["sess-1/agent/a1b2", "sess-1/agent/c3d4"] {
        assert!(
            text.contains(child),
            "{child} is not in the state file: {text}"
        );
    }
    // Once the agent leaves plan mode, its sub-agents' writes follow its mode.
    assert!(
        run(call(Some("acceptEdits"), "Read", json!({"file_path": "a"}))).starts_with("allow: ")
    );
    let actual = run(sub_call("acceptEdits", json!("a1b2"), "Write", write));
    assert!(
        actual.starts_with("allow: toolgate: auto_edit mode allows file edits"),
        "{actual}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&state);
}

/// Without a state directory each hook call starts afresh: a sub-agent's
/// call takes the mode it reports (its parent is not known).
#[test]
fn a_sub_agent_without_a_state_directory_takes_the_mode_it_reports() {
    let dir = support::project_dir("hook-sub-agent-fresh");
    let write = json!({"file_path": "src/a.rs", "content": "x"});
    for (mode, expected) in [
        (
            "plan",
            "deny: toolgate: plan mode does not allow file edits",
        ),
        (
            "acceptEdits",
            "allow: toolgate: auto_edit mode allows file edits",
        ),
    ] {
        let (_, answer) = hook(
            &dir,
            "claude",
            &[],
            &[],
            &sub_call(mode, json!("a1"), "Write", write.clone()),
        );
        assert!(render(&answer).starts_with(expected), "{answer}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn each_hook_event_is_answered_in_its_own_format_and_others_are_refused() {
    let dir = support::project_dir("hook-events");
    let request = |mode: &str, tool: &str, input: Value| {
        json!({"session_id": "s", "hook_event_name": "PermissionRequest", "permission_mode": mode,
               "tool_name": tool, "tool_input": input, "permission_suggestions": []})
        .to_string()
    };
    let write = json!({"file_path": "src/a.rs", "content": "x"});
    // Claude Code's (and qwen-code's, Codex's) PermissionRequest: decision.behavior.
    for agent in ["claude", "qwen", "codex"] {
        let (code, answer) = hook(
            &dir,
            agent,
            &[],
            &[],
            &request("acceptEdits", "Write", write.clone()),
        );
        assert_eq!(code, 0);
        assert_eq!(
            answer,
            json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}}),
            "{agent}"
        );
    }
    let (_, answer) = hook(
        &dir,
        "claude",
        &[],
        &[],
        &request("plan", "Write", write.clone()),
    );
    let decision = &answer["hookSpecificOutput"]["decision"];
    assert_eq!(
        answer["hookSpecificOutput"]["hookEventName"],
        "PermissionRequest"
    );
    assert_eq!(decision["behavior"], "deny", "{answer}");
    let message = decision["message"].as_str().unwrap();
    assert!(
        message.starts_with("toolgate: plan mode does not allow file edits"),
        "{message}"
    );
    assert!(
        message.contains("Plan mode is active"),
        "the reminder follows: {message}"
    );
    assert_eq!(answer.as_object().unwrap().len(), 1, "{answer}");
    // An ask decides nothing: the agent shows its own dialog.
    let (code, answer) = hook(
        &dir,
        "claude",
        &[],
        &[],
        &request("default", "Write", write.clone()),
    );
    assert_eq!((code, answer), (0, json!({})));
    // Events toolgate does not answer: an error, and nothing on stdout.
    // One about a tool call may be gating it under a name toolgate does not
    // know: exit code 2 blocks it; any other gets a non-blocking error.
    for (agent, event, about_a_call, code) in [
        ("claude", "PostToolUse", true, 2),
        ("claude", "UserPromptSubmit", false, 1),
        ("gemini", "PreToolUse", true, 2),
        ("codex", "Stop", false, 1),
        ("claude", "pretooluse", true, 2),
    ] {
        let mut input = json!({"session_id": "s", "hook_event_name": event});
        if about_a_call {
            input["tool_name"] = json!("Write");
            input["tool_input"] = write.clone();
        }
        let out = support::hook_process(&dir, agent, &[], &[], input.to_string().as_bytes());
        assert_eq!(out.status.code(), Some(code), "{agent} {event}");
        assert!(out.stdout.is_empty(), "{agent} {event}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "the hook event `{event}` is not one toolgate answers"
            )),
            "{stderr}"
        );
    }
}
