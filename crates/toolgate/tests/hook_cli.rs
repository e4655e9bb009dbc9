//! `toolgate hook claude|qwen` through the spawned binary: one hook input on
//! stdin, the agent's answer on stdout. A data table of inputs and the
//! decision and reason each must get; every failure of input, mode or policy
//! is a denial (never an allow, never a crash). The same hook driven by the
//! real agents is `scripts/e2e-hooks`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

mod support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

/// Run `toolgate hook AGENT ARGS` in `dir` with `input` on stdin: exit code and answer.
fn hook(dir: &Path, agent: &str, args: &[&str], env: &[(&str, &str)], input: &str) -> (i32, Value) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    command
        .arg("hook")
        .arg(agent)
        .args(args)
        .current_dir(dir)
        .env_remove("TOOLGATE_MODE")
        .env_remove("TOOLGATE_PERMISSION")
        .env_remove("TOOLGATE_STATE_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let answer = serde_json::from_str(stdout.trim()).unwrap_or_else(|_| {
        panic!(
            "not one JSON answer: {stdout:?}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), answer)
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
        ("gemini", vec![], call(None, "read_file", json!({"file_path": "a"})), "allow: toolgate: ask mode allows file reads"),
        ("gemini", vec![], call(None, "write_file", json!({"file_path": "a", "content": "x"})), "deny: toolgate: ask mode asks before file edits, writes, patches, deletes and moves; nobody can be asked here"),
        ("gemini", vec!["--mode", "auto_edit"], call(None, "write_file", json!({"file_path": "a", "content": "x"})), "allow: toolgate: auto_edit mode allows file edits"),
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

/// In plan mode the reminder travels back with the denial, so the model
/// learns what it may do instead.
#[test]
fn a_plan_mode_denial_carries_the_reminder() {
    let dir = support::project_dir("hook-reminder");
    let (_, answer) = hook(
        &dir,
        "claude",
        &[],
        &[],
        &call(
            Some("plan"),
            "Edit",
            json!({"file_path": "a", "old_string": "a", "new_string": "b"}),
        ),
    );
    let reason = render(&answer);
    assert!(
        reason.contains("<system-reminder>\nPlan mode is active"),
        "{reason}"
    );
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
