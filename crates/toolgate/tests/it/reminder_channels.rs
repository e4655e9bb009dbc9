//! In plan mode the reminder (what the model may still do, and how to leave
//! plan mode) must reach the model with every denial, through the one
//! channel each agent passes on to it:
//!
//! | agent                          | channel                                        |
//! |--------------------------------|------------------------------------------------|
//! | Claude Code, Codex (hooks)     | `hookSpecificOutput.additionalContext`         |
//! | qwen-code (hook)               | after `permissionDecisionReason` (it drops `additionalContext`) |
//! | Gemini CLI (`BeforeTool` hook) | after `reason` (it has no other channel)       |
//! | Claude Code `--permission-prompt-tool` (`toolgate mcp`) | after the deny `message` |
//!
//! Each agent's own hook input (its tool names, its modes), in process and
//! as a client of a running broker: the reminder is exactly the one the
//! broker's `decision` frame carries, the reason stays one line where the
//! reminder has a channel of its own, nothing else is added to the answer
//! (Claude Code runs the tool when it cannot validate a hook's answer), and
//! an allowed read carries no reminder. Everything through spawned processes.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::Path;

use serde_json::{json, Value};

use crate::support;

/// Where an agent's answer carries the reminder.
#[derive(Clone, Copy, Debug)]
enum Channel {
    /// `hookSpecificOutput.additionalContext`, the reason left alone.
    AdditionalContext,
    /// After the Claude-format `permissionDecisionReason`.
    AfterDecisionReason,
    /// After Gemini CLI's `reason`.
    AfterReason,
}

struct Agent {
    name: &'static str,
    channel: Channel,
    /// Flags for the hook: `--mode plan` where the agent sends no plan mode.
    args: &'static [&'static str],
    /// The agent's hook input for a write and for a read, with `cwd`.
    write: fn(&str) -> Value,
    read: fn(&str) -> Value,
}

fn agents() -> Vec<Agent> {
    vec![
        Agent {
            name: "claude",
            channel: Channel::AdditionalContext,
            args: &[],
            write: |cwd| {
                json!({"session_id": "claude-s", "transcript_path": "/dev/null", "cwd": cwd,
                       "permission_mode": "plan", "hook_event_name": "PreToolUse",
                       "tool_name": "Write", "tool_input": {"file_path": "src/a.rs", "content": "x"},
                       "tool_use_id": "toolu_w"})
            },
            read: |cwd| {
                json!({"session_id": "claude-s", "transcript_path": "/dev/null", "cwd": cwd,
                       "permission_mode": "plan", "hook_event_name": "PreToolUse",
                       "tool_name": "Read", "tool_input": {"file_path": "src/a.rs"},
                       "tool_use_id": "toolu_r"})
            },
        },
        Agent {
            name: "codex",
            channel: Channel::AdditionalContext,
            // Codex has no plan mode of its own to send.
            args: &["--mode", "plan"],
            write: |cwd| {
                json!({"session_id": "codex-s", "turn_id": "t1", "transcript_path": null, "cwd": cwd,
                       "model": "stub", "permission_mode": "bypassPermissions",
                       "hook_event_name": "PreToolUse", "tool_name": "apply_patch",
                       "tool_input": {"command": "*** Begin Patch\n*** Add File: src/x.rs\n+x\n*** End Patch\n"},
                       "tool_use_id": "call_w"})
            },
            read: |cwd| {
                json!({"session_id": "codex-s", "turn_id": "t1", "transcript_path": null, "cwd": cwd,
                       "model": "stub", "permission_mode": "bypassPermissions",
                       "hook_event_name": "PreToolUse", "tool_name": "Bash",
                       "tool_input": {"command": "cat src/a.rs"}, "tool_use_id": "call_r"})
            },
        },
        Agent {
            name: "qwen",
            channel: Channel::AfterDecisionReason,
            args: &[],
            write: |cwd| {
                json!({"session_id": "qwen-s", "transcript_path": "/dev/null", "cwd": cwd,
                       "permission_mode": "plan", "hook_event_name": "PreToolUse",
                       "tool_name": "run_shell_command", "tool_input": {"command": "echo x > src/a.rs"},
                       "tool_use_id": "call_w"})
            },
            read: |cwd| {
                json!({"session_id": "qwen-s", "transcript_path": "/dev/null", "cwd": cwd,
                       "permission_mode": "plan", "hook_event_name": "PreToolUse",
                       "tool_name": "read_file", "tool_input": {"file_path": "src/a.rs"},
                       "tool_use_id": "call_r"})
            },
        },
        Agent {
            name: "gemini",
            channel: Channel::AfterReason,
            // Gemini CLI sends no permission mode.
            args: &["--mode", "plan"],
            write: |cwd| {
                json!({"session_id": "gemini-s", "transcript_path": "/dev/null", "cwd": cwd,
                       "hook_event_name": "BeforeTool", "timestamp": "2026-11-24T00:00:00Z",
                       "tool_name": "replace",
                       "tool_input": {"file_path": "src/a.rs", "old_string": "a", "new_string": "b"}})
            },
            read: |cwd| {
                json!({"session_id": "gemini-s", "transcript_path": "/dev/null", "cwd": cwd,
                       "hook_event_name": "BeforeTool", "timestamp": "2026-11-24T00:00:00Z",
                       "tool_name": "read_file", "tool_input": {"file_path": "src/a.rs"}})
            },
        },
    ]
}

/// The reminder the broker itself puts on a plan-mode denial, read from a
/// `decision` frame of `toolgate serve` over the same project.
fn brokers_reminder(root: &Path) -> String {
    let input = [
        json!({"type": "session_start", "sessionID": "s", "mode": "plan"}),
        json!({"type": "tool_call", "sessionID": "s", "callID": "c", "tool": "write",
               "input": {"filePath": "src/a.rs", "content": "x"}}),
    ]
    .map(|frame| frame.to_string())
    .join("\n");
    let root_arg = root.to_str().unwrap();
    let (code, out, err) = support::run(root, &["serve", "--project-root", root_arg], &input);
    assert_eq!(code, 0, "{err}");
    let decision: Value = out
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|frame| frame["type"] == "decision")
        .unwrap_or_else(|| panic!("no decision: {out}"));
    assert_eq!(decision["decision"], "deny", "{decision}");
    let reminder = decision["reminder"].as_str().unwrap().to_string();
    assert!(
        reminder.starts_with("<system-reminder>\nPlan mode is active")
            && reminder.ends_with("</system-reminder>"),
        "{reminder}"
    );
    reminder
}

/// `toolgate hook AGENT ARGS` with `input`: its one JSON answer (exit 0).
fn hook(root: &Path, agent: &str, args: &[&str], input: &Value) -> Value {
    let mut argv = vec!["hook", agent];
    argv.extend_from_slice(args);
    let (code, out, err) = support::run(root, &argv, &input.to_string());
    assert_eq!(code, 0, "{agent} {args:?}: {err}");
    serde_json::from_str(out.trim())
        .unwrap_or_else(|_| panic!("{agent} {args:?}: not one JSON answer: {out:?}; {err}"))
}

/// Check `answer` is a plan-mode denial carrying `reminder` in `channel`
/// and nothing more than the agent's format allows.
fn check_denial(agent: &str, channel: Channel, answer: &Value, reminder: &str) {
    let fields = |value: &Value| -> Vec<String> {
        let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    let (reason, carried) = match channel {
        Channel::AdditionalContext | Channel::AfterDecisionReason => {
            assert_eq!(fields(answer), ["hookSpecificOutput"], "{agent}: {answer}");
            let inner = &answer["hookSpecificOutput"];
            assert_eq!(inner["hookEventName"], "PreToolUse", "{agent}: {answer}");
            assert_eq!(inner["permissionDecision"], "deny", "{agent}: {answer}");
            let reason = inner["permissionDecisionReason"].as_str().unwrap();
            if let Channel::AdditionalContext = channel {
                assert_eq!(
                    fields(inner),
                    [
                        "additionalContext",
                        "hookEventName",
                        "permissionDecision",
                        "permissionDecisionReason"
                    ],
                    "{agent}: {answer}"
                );
                let context = inner["additionalContext"].as_str().unwrap();
                (reason.to_string(), context.to_string())
            } else {
                assert_eq!(
                    fields(inner),
                    [
                        "hookEventName",
                        "permissionDecision",
                        "permissionDecisionReason"
                    ],
                    "{agent}: {answer}"
                );
                split(agent, reason)
            }
        }
        Channel::AfterReason => {
            assert_eq!(fields(answer), ["decision", "reason"], "{agent}: {answer}");
            assert_eq!(answer["decision"], "deny", "{agent}: {answer}");
            split(agent, answer["reason"].as_str().unwrap())
        }
    };
    assert!(
        reason.starts_with("toolgate: plan mode ") && !reason.contains('\n'),
        "{agent}: the reason is one line saying why: {reason:?}"
    );
    assert_eq!(carried, reminder, "{agent}: the broker's reminder, whole");
}

/// A reason with the reminder after it: the one-line reason and the rest.
fn split(agent: &str, text: &str) -> (String, String) {
    let (reason, rest) = text
        .split_once("\n\n")
        .unwrap_or_else(|| panic!("{agent}: no reminder after the reason: {text:?}"));
    (reason.to_string(), rest.to_string())
}

fn check_allowed_read(agent: &str, answer: &Value) {
    let decision = answer["hookSpecificOutput"]["permissionDecision"]
        .as_str()
        .or(answer["decision"].as_str());
    assert_eq!(decision, Some("allow"), "{agent}: {answer}");
    assert!(
        !answer.to_string().contains("system-reminder"),
        "{agent}: an allow carries no reminder: {answer}"
    );
}

#[test]
fn each_agents_hook_carries_the_reminder_in_its_own_channel() {
    let dir = support::project_dir("reminder-hooks");
    let root = dir.join("project");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/a.rs"), "a").unwrap();
    let root = root.canonicalize().unwrap();
    let cwd = root.to_str().unwrap();
    let reminder = brokers_reminder(&root);
    let broker = support::Listening::start(&dir.join("broker"), &root, &["--mode", "plan"]);
    let socket = broker.socket.to_str().unwrap();
    for agent in agents() {
        let in_process = hook(&root, agent.name, agent.args, &(agent.write)(cwd));
        check_denial(agent.name, agent.channel, &in_process, &reminder);
        let mut remote_args = agent.args.to_vec();
        remote_args.extend(["--socket", socket]);
        let remote = hook(&root, agent.name, &remote_args, &(agent.write)(cwd));
        check_denial(agent.name, agent.channel, &remote, &reminder);
        assert_eq!(
            in_process, remote,
            "{}: the same answer in process and through the broker",
            agent.name
        );
        for args in [agent.args.to_vec(), remote_args] {
            let read = hook(&root, agent.name, &args, &(agent.read)(cwd));
            check_allowed_read(agent.name, &read);
        }
    }
    assert_eq!(
        std::fs::read_to_string(root.join("src/a.rs")).unwrap(),
        "a",
        "nothing was written"
    );
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Claude Code's `--permission-prompt-tool mcp__toolgate__approve`: the
/// reminder follows the deny `message`, the only text the model gets.
#[test]
fn the_permission_prompt_tool_carries_the_reminder_after_its_message() {
    let dir = support::project_dir("reminder-mcp");
    let root = dir.join("project");
    std::fs::create_dir_all(&root).unwrap();
    let root = root.canonicalize().unwrap();
    let reminder = brokers_reminder(&root);
    let broker = support::Listening::start(&dir.join("broker"), &root, &["--mode", "plan"]);
    let socket = broker.socket.to_str().unwrap();
    let lines = [
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "claude-code", "version": "2.1.328"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "approve",
            "arguments": {"tool_name": "Edit", "tool_use_id": "toolu_w",
                "input": {"file_path": "src/a.rs", "old_string": "a", "new_string": "b"}}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "approve",
            "arguments": {"tool_name": "Grep", "tool_use_id": "toolu_r",
                "input": {"pattern": "a"}}}}),
    ]
    .map(|line| line.to_string())
    .join("\n");
    let mut messages = Vec::new();
    for args in [
        vec!["mcp", "--mode", "plan"],
        vec!["mcp", "--socket", socket],
    ] {
        let (code, out, err) = support::run(&root, &args, &lines);
        assert_eq!(code, 0, "{args:?}: {err}");
        let mut replies: Vec<Value> = out
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(replies.len(), 3, "{args:?}: {out}");
        // Through a broker each call is answered when decided: by id, not
        // in the order sent.
        replies.sort_by_key(|reply| reply["id"].as_u64());
        let behavior = |reply: &Value| -> Value {
            let content = reply["result"]["content"].as_array().unwrap();
            assert_eq!(content.len(), 1, "{reply}");
            serde_json::from_str(content[0]["text"].as_str().unwrap()).unwrap()
        };
        let denial = behavior(&replies[1]);
        assert_eq!(denial["behavior"], "deny", "{args:?}: {denial}");
        assert_eq!(denial.as_object().unwrap().len(), 2, "{args:?}: {denial}");
        let message = denial["message"].as_str().unwrap();
        let (reason, carried) = split("mcp", message);
        assert!(
            reason.starts_with("toolgate: plan mode ") && !reason.contains('\n'),
            "{args:?}: {reason:?}"
        );
        assert_eq!(carried, reminder, "{args:?}");
        let read = behavior(&replies[2]);
        assert_eq!(read["behavior"], "allow", "{args:?}: {read}");
        assert!(!read.to_string().contains("system-reminder"), "{read}");
        messages.push(message.to_string());
    }
    assert_eq!(
        messages[0], messages[1],
        "the same message in process and through the broker"
    );
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
