//! Codex rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`) as
//! recordings.
//!
//! What is read (Codex 0.169.0; `tests/replay/codex/` holds a real rollout,
//! `scripts/record-fixtures` makes it): lines `{"timestamp", "type",
//! "payload"}`.
//!
//! - The session is `session_meta`'s `id`; calls run in its `cwd`, or the
//!   latest `turn_context`'s.
//! - The mode follows each `turn_context`: a `read-only` sandbox is
//!   `readonly`; an `approval_policy` of `never` (Codex runs everything the
//!   sandbox allows without asking) is `auto`; `untrusted`, `on-request`
//!   and `on-failure` (Codex asks) are `ask`. A change is a `set_mode`.
//! - `response_item` calls: `function_call` (its `name`, its `arguments`
//!   parsed as the input), `custom_tool_call` (`apply_patch` and the like:
//!   the patch text as `{"input": PATCH}`), `local_shell_call` (tool
//!   `shell`, `{"command": ARGV, "workdir": DIR}`), each with its `call_id`.
//! - Their outputs (`function_call_output`, `custom_tool_call_output`,
//!   `local_shell_call_output`) say what became of them: refused when Codex
//!   says a person or a hook rejected it (`rejected by user`, a
//!   `Rejected(...)` error), else ran.

use serde_json::{json, Value};

use super::record::{epoch_ms, Outcome, Recording};

/// Whether `value` is a Codex rollout line.
pub fn is_record(value: &Value) -> bool {
    value.get("payload").is_some()
        && matches!(
            value.get("type").and_then(Value::as_str),
            Some("session_meta" | "response_item" | "turn_context" | "event_msg")
        )
}

/// The mode a `turn_context` means.
fn mode(context: &Value) -> &'static str {
    let sandbox = context
        .pointer("/sandbox_policy/type")
        .or_else(|| context.get("sandbox_policy"))
        .and_then(Value::as_str)
        .unwrap_or("");
    match (
        context.get("approval_policy").and_then(Value::as_str),
        sandbox,
    ) {
        (_, "read-only") => "readonly",
        (Some("never"), _) => "auto",
        _ => "ask",
    }
}

/// Read a rollout. `name` names it in warnings.
pub fn read(text: &str, name: &str) -> Recording {
    let mut recording = Recording::default();
    let mut session: Option<String> = None;
    let mut cwd: Option<String> = None;
    let mut current_mode: Option<&'static str> = None;
    let mut started = false;
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let item: Value = match serde_json::from_str(line) {
            Ok(item) => item,
            Err(err) => {
                recording
                    .warnings
                    .push(format!("{name}:{}: not JSON ({err}); skipped", number + 1));
                continue;
            }
        };
        let payload = &item["payload"];
        let text_of = |value: &Value, field: &str| {
            value.get(field).and_then(Value::as_str).map(str::to_string)
        };
        match item.get("type").and_then(Value::as_str) {
            Some("session_meta") => {
                session = session.or_else(|| text_of(payload, "id"));
                cwd = text_of(payload, "cwd").or(cwd);
                continue;
            }
            Some("turn_context") => {
                cwd = text_of(payload, "cwd").or(cwd);
                let mode = mode(payload);
                let Some(id) = &session else { continue };
                if !started {
                    recording
                        .frames
                        .push(json!({"type": "session_start", "sessionID": id, "mode": mode}));
                    started = true;
                } else if current_mode != Some(mode) {
                    recording
                        .frames
                        .push(json!({"type": "set_mode", "sessionID": id, "mode": mode}));
                }
                current_mode = Some(mode);
                continue;
            }
            Some("response_item") => {}
            _ => continue,
        }
        let Some(id) = session.clone() else {
            recording.warnings.push(format!(
                "{name}:{}: a call before the session_meta line; skipped",
                number + 1
            ));
            continue;
        };
        let kind = payload.get("type").and_then(Value::as_str).unwrap_or("");
        let call_id = text_of(payload, "call_id");
        let call = match kind {
            "function_call" => {
                let arguments = payload
                    .get("arguments")
                    .and_then(Value::as_str)
                    .unwrap_or("{}");
                match serde_json::from_str::<Value>(arguments) {
                    Ok(input @ Value::Object(_)) => {
                        text_of(payload, "name").map(|tool| (tool, input))
                    }
                    _ => {
                        recording.warnings.push(format!(
                            "{name}:{}: the arguments of {} are not a JSON object; skipped",
                            number + 1,
                            call_id.as_deref().unwrap_or("a call")
                        ));
                        None
                    }
                }
            }
            "custom_tool_call" => text_of(payload, "name").map(|tool| {
                (
                    tool,
                    json!({"input": payload.get("input").cloned().unwrap_or(Value::Null)}),
                )
            }),
            "local_shell_call" => {
                let action = &payload["action"];
                let mut input =
                    json!({"command": action.get("command").cloned().unwrap_or(json!([]))});
                if let Some(dir) = action.get("working_directory").and_then(Value::as_str) {
                    input["workdir"] = json!(dir);
                }
                Some(("shell".to_string(), input))
            }
            "function_call_output" | "custom_tool_call_output" | "local_shell_call_output" => {
                let Some(call) = call_id else { continue };
                let output = match payload.get("output") {
                    Some(Value::String(text)) => text.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                let key = (id.clone(), call);
                let refused = output.contains("rejected by user") || output.contains("Rejected(");
                if refused {
                    recording
                        .outcomes
                        .insert(key.clone(), Outcome::Refused(Some(output.clone())));
                    recording
                        .decisions
                        .insert(key, ("deny".to_string(), output));
                } else {
                    recording.outcomes.insert(key.clone(), Outcome::Ran);
                    recording
                        .decisions
                        .insert(key, ("allow".to_string(), "Codex ran it".to_string()));
                }
                continue;
            }
            _ => continue,
        };
        let (Some((tool, input)), Some(call)) = (call, call_id) else {
            continue;
        };
        if !started {
            recording
                .frames
                .push(json!({"type": "session_start", "sessionID": id}));
            started = true;
        }
        let mut frame = json!({"type": "tool_call", "sessionID": id, "callID": call, "tool": tool, "input": input});
        if let Some(cwd) = &cwd {
            frame["cwd"] = json!(cwd);
        }
        recording.frames.push(frame);
        if let Some(time) = item
            .get("timestamp")
            .and_then(Value::as_str)
            .and_then(epoch_ms)
        {
            recording.times.insert((id, call), time);
        }
    }
    if let (Some(id), true) = (session, started) {
        recording
            .frames
            .push(json!({"type": "session_end", "sessionID": id}));
    }
    recording
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_modes_and_outcomes() {
        let lines = [
            json!({"timestamp": "2026-11-24T03:21:41.634Z", "type": "session_meta", "payload": {"id": "r1", "cwd": "/p"}}),
            json!({"timestamp": "2026-11-24T03:21:41.704Z", "type": "turn_context", "payload": {"cwd": "/p", "approval_policy": "on-request", "sandbox_policy": {"type": "workspace-write"}}}),
            json!({"timestamp": "2026-11-24T03:21:41.769Z", "type": "response_item", "payload": {"type": "function_call", "name": "exec_command", "arguments": "{\"cmd\": \"ls\"}", "call_id": "c1"}}),
            json!({"timestamp": "2026-11-24T03:21:41.863Z", "type": "response_item", "payload": {"type": "function_call_output", "call_id": "c1", "output": "a\nb"}}),
            json!({"timestamp": "2026-11-24T03:21:42.000Z", "type": "turn_context", "payload": {"cwd": "/p", "approval_policy": "never", "sandbox_policy": {"type": "danger-full-access"}}}),
            json!({"timestamp": "2026-11-24T03:21:42.100Z", "type": "response_item", "payload": {"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch\n", "call_id": "c2"}}),
            json!({"timestamp": "2026-11-24T03:21:42.200Z", "type": "response_item", "payload": {"type": "custom_tool_call_output", "call_id": "c2", "output": "exec_command failed: CreateProcess { message: \"Rejected(\\\"rejected by user\\\")\" }"}}),
            json!({"timestamp": "2026-11-24T03:21:42.300Z", "type": "response_item", "payload": {"type": "local_shell_call", "call_id": "c3", "action": {"type": "exec", "command": ["rm", "-rf", "x"], "working_directory": "/p/sub"}}}),
            json!({"timestamp": "2026-11-24T03:21:42.400Z", "type": "response_item", "payload": {"type": "function_call", "name": "exec_command", "arguments": "not json", "call_id": "c4"}}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let recording = read(&text, "r.jsonl");
        let frames: Vec<String> = recording
            .frames
            .iter()
            .map(|f| {
                format!(
                    "{} {}",
                    f["type"].as_str().unwrap_or(""),
                    f["callID"].as_str().or(f["mode"].as_str()).unwrap_or("")
                )
            })
            .collect();
        assert_eq!(
            frames,
            vec![
                "session_start ask",
                "tool_call c1",
                "set_mode auto",
                "tool_call c2",
                "tool_call c3",
                "session_end "
            ]
        );
        assert_eq!(recording.frames[1]["input"], json!({"cmd": "ls"}));
        assert_eq!(recording.frames[3]["tool"], "apply_patch");
        assert_eq!(
            recording.frames[4]["input"],
            json!({"command": ["rm", "-rf", "x"], "workdir": "/p/sub"})
        );
        let key = |c: &str| ("r1".to_string(), c.to_string());
        assert_eq!(recording.outcomes[&key("c1")], Outcome::Ran);
        assert!(matches!(
            recording.outcomes[&key("c2")],
            Outcome::Refused(_)
        ));
        assert!(!recording.outcomes.contains_key(&key("c3")));
        assert_eq!(recording.times[&key("c1")], 1_795_490_501_769);
        assert_eq!(recording.warnings.len(), 1, "{:?}", recording.warnings);
    }
}
