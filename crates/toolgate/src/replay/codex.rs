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

use super::event::{Event, Frame};
use super::record::{epoch_ms, Outcome};

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

/// A rollout's reader: its session, working directory and mode.
#[derive(Debug, Default)]
pub struct Reader {
    session: Option<String>,
    cwd: Option<String>,
    current_mode: Option<&'static str>,
    started: bool,
}

impl Reader {
    /// Read line `number` of a rollout (`name` names it in warnings).
    pub fn line(&mut self, name: &str, number: usize, line: &str, out: &mut Vec<Event>) {
        if line.trim().is_empty() {
            return;
        }
        let item: Value = match serde_json::from_str(line) {
            Ok(item) => item,
            Err(err) => {
                out.push(Event::Warning(format!(
                    "{name}:{number}: not JSON ({err}); skipped"
                )));
                return;
            }
        };
        let payload = &item["payload"];
        let text_of = |value: &Value, field: &str| {
            value.get(field).and_then(Value::as_str).map(str::to_string)
        };
        match item.get("type").and_then(Value::as_str) {
            Some("session_meta") => {
                self.session = self.session.take().or_else(|| text_of(payload, "id"));
                self.cwd = text_of(payload, "cwd").or(self.cwd.take());
                return;
            }
            Some("turn_context") => {
                self.cwd = text_of(payload, "cwd").or(self.cwd.take());
                let mode = mode(payload);
                let Some(id) = &self.session else { return };
                if !self.started {
                    out.push(Event::Frame(Frame::Built(
                        json!({"type": "session_start", "sessionID": id, "mode": mode}),
                    )));
                    self.started = true;
                } else if self.current_mode != Some(mode) {
                    out.push(Event::Frame(Frame::Built(
                        json!({"type": "set_mode", "sessionID": id, "mode": mode}),
                    )));
                }
                self.current_mode = Some(mode);
                return;
            }
            Some("response_item") => {}
            _ => return,
        }
        let Some(id) = self.session.clone() else {
            out.push(Event::Warning(format!(
                "{name}:{number}: a call before the session_meta line; skipped"
            )));
            return;
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
                        out.push(Event::Warning(format!(
                            "{name}:{number}: the arguments of {} are not a JSON object; skipped",
                            call_id.as_deref().unwrap_or("a call")
                        )));
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
                let Some(call) = call_id else { return };
                let output = match payload.get("output") {
                    Some(Value::String(text)) => text.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                let key = (id, call);
                let refused = output.contains("rejected by user") || output.contains("Rejected(");
                if refused {
                    out.push(Event::Outcome(
                        key.clone(),
                        Outcome::Refused(Some(output.clone())),
                    ));
                    out.push(Event::Recorded(key, "deny".to_string(), output));
                } else {
                    out.push(Event::Outcome(key.clone(), Outcome::Ran));
                    out.push(Event::Recorded(
                        key,
                        "allow".to_string(),
                        "Codex ran it".to_string(),
                    ));
                }
                return;
            }
            _ => return,
        };
        let (Some((tool, input)), Some(call)) = (call, call_id) else {
            return;
        };
        if !self.started {
            out.push(Event::Frame(Frame::Built(
                json!({"type": "session_start", "sessionID": id}),
            )));
            self.started = true;
        }
        let mut frame = json!({"type": "tool_call", "sessionID": id, "callID": call, "tool": tool, "input": input});
        if let Some(cwd) = &self.cwd {
            frame["cwd"] = json!(cwd);
        }
        out.push(Event::Frame(Frame::Built(frame)));
        if let Some(time) = item
            .get("timestamp")
            .and_then(Value::as_str)
            .and_then(epoch_ms)
        {
            out.push(Event::Time((id, call), time));
        }
    }

    /// The end of the rollout: its session ends.
    pub fn finish(&mut self, out: &mut Vec<Event>) {
        if let (Some(id), true) = (&self.session, self.started) {
            out.push(Event::Frame(Frame::Built(
                json!({"type": "session_end", "sessionID": id}),
            )));
        }
        self.started = false;
    }
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
        let recording =
            super::super::event::read_all(super::super::Format::Codex, &text, "r.jsonl");
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
