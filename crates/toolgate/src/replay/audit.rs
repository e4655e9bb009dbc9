//! Audit logs (`serve --audit FILE`) read back as recordings: each decision
//! record becomes the call it was about, in the order decided, in its
//! session (started with its parent and mode, the mode changed where the
//! records say it changed), at the time it was made; a question a person
//! answered is answered as the answer record says (`once`, `always` with
//! its scope, patterns and lifetime, `reject` with its message), and the recorded
//! decision is what `--check` compares with. Decisions of lines that were
//! not calls (no tool) are skipped.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Value};

use super::event::{Event, Frame};
use super::record::Outcome;

/// Whether `value` is an audit record.
pub fn is_record(value: &Value) -> bool {
    value.get("time").is_some()
        && matches!(
            value.get("event").and_then(Value::as_str),
            Some("decision" | "answer")
        )
}

/// An audit log's reader: the sessions started and their modes, and the
/// answers read whose decision record has not come yet.
#[derive(Debug, Default)]
pub struct Reader {
    started: HashSet<String>,
    modes: HashMap<String, String>,
    answers: HashMap<(String, String), Value>,
}

impl Reader {
    /// Read line `number` of an audit log (`name` names it in warnings).
    pub fn line(&mut self, name: &str, number: usize, line: &str, out: &mut Vec<Event>) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        let record: Value = match serde_json::from_str(line) {
            Ok(record) => record,
            Err(err) => {
                out.push(Event::Warning(format!(
                    "{name}:{number}: not JSON ({err}); skipped"
                )));
                return;
            }
        };
        let text = |field: &str| record.get(field).and_then(Value::as_str);
        if text("event") == Some("answer") {
            // The answer a person gave, replayed as given.
            if let (Some(session), Some(call)) = (text("sessionID"), text("callID")) {
                let mut fields = serde_json::Map::new();
                for field in ["response", "message", "scope", "patterns", "expiresIn"] {
                    if let Some(value) = record.get(field) {
                        fields.insert(field.to_string(), value.clone());
                    }
                }
                self.answers.insert(
                    (session.to_string(), call.to_string()),
                    Value::Object(fields),
                );
            }
            return;
        }
        if text("event") != Some("decision") {
            return;
        }
        let (Some(session), Some(call), Some(tool)) =
            (text("sessionID"), text("callID"), text("tool"))
        else {
            out.push(Event::Warning(format!(
                "{name}:{number}: a decision about no call toolgate could read; skipped"
            )));
            return;
        };
        let mode = text("mode");
        // The parent first (as the records name it), then the session.
        if let Some(parent) = text("parentID") {
            if self.started.insert(parent.to_string()) {
                out.push(Event::Frame(Frame::Built(
                    json!({"type": "session_start", "sessionID": parent}),
                )));
            }
        }
        if self.started.insert(session.to_string()) {
            let mut start = json!({"type": "session_start", "sessionID": session});
            if let Some(parent) = text("parentID") {
                start["parentID"] = json!(parent);
            }
            if let Some(mode) = mode {
                start["mode"] = json!(mode);
                self.modes.insert(session.to_string(), mode.to_string());
            }
            out.push(Event::Frame(Frame::Built(start)));
        } else if let Some(mode) = mode {
            if self.modes.get(session).map(String::as_str) != Some(mode) {
                out.push(Event::Frame(Frame::Built(
                    json!({"type": "set_mode", "sessionID": session, "mode": mode}),
                )));
                self.modes.insert(session.to_string(), mode.to_string());
            }
        }
        let mut frame = json!({"type": "tool_call", "sessionID": session, "callID": call,
                               "tool": tool, "input": record.get("input").cloned().unwrap_or(json!({}))});
        if let Some(cwd) = text("cwd") {
            frame["cwd"] = json!(cwd);
        }
        out.push(Event::Frame(Frame::Built(frame)));
        let key = (session.to_string(), call.to_string());
        if let Some(time) = record.get("time").and_then(Value::as_u64) {
            let waited = record.get("waitedMs").and_then(Value::as_u64).unwrap_or(0);
            out.push(Event::Time(key.clone(), time.saturating_sub(waited)));
        }
        let decision = text("decision").unwrap_or("");
        if text("source") == Some("user") {
            // A person's answer decided it: replayed as that answer (the
            // answer record, else what the decision says it was).
            let outcome = match (self.answers.remove(&key), decision) {
                (Some(answer), _) => Outcome::Answered(answer),
                (None, "allow") => Outcome::Answered(json!({"response": "once"})),
                (None, _) => {
                    let mut answer = json!({"response": "reject"});
                    if let Some(message) = text("message") {
                        answer["message"] = json!(message);
                    }
                    Outcome::Answered(answer)
                }
            };
            out.push(Event::Outcome(key.clone(), outcome));
        }
        out.push(Event::Recorded(
            key,
            decision.to_string(),
            text("reason").unwrap_or("").to_string(),
        ));
    }
}
