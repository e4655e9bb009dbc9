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

use super::record::{Outcome, Recording};

/// Whether `value` is an audit record.
pub fn is_record(value: &Value) -> bool {
    value.get("time").is_some()
        && matches!(
            value.get("event").and_then(Value::as_str),
            Some("decision" | "answer")
        )
}

/// Read an audit log. `name` names it in warnings.
pub fn read(text: &str, name: &str) -> Recording {
    let mut recording = Recording::default();
    let mut started: HashSet<String> = HashSet::new();
    let mut modes: HashMap<String, String> = HashMap::new();
    let mut answers: HashMap<(String, String), Value> = HashMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let record: Value = match serde_json::from_str(line) {
            Ok(record) => record,
            Err(err) => {
                recording
                    .warnings
                    .push(format!("{name}:{}: not JSON ({err}); skipped", number + 1));
                continue;
            }
        };
        if record.get("event").and_then(Value::as_str) == Some("answer") {
            // The answer a person gave, replayed as given.
            let text = |field: &str| record.get(field).and_then(Value::as_str);
            if let (Some(session), Some(call)) = (text("sessionID"), text("callID")) {
                let mut fields = serde_json::Map::new();
                for field in ["response", "message", "scope", "patterns", "expiresIn"] {
                    if let Some(value) = record.get(field) {
                        fields.insert(field.to_string(), value.clone());
                    }
                }
                answers.insert(
                    (session.to_string(), call.to_string()),
                    Value::Object(fields),
                );
            }
            continue;
        }
        if record.get("event").and_then(Value::as_str) != Some("decision") {
            continue;
        }
        let text = |field: &str| record.get(field).and_then(Value::as_str);
        let (Some(session), Some(call), Some(tool)) =
            (text("sessionID"), text("callID"), text("tool"))
        else {
            recording.warnings.push(format!(
                "{name}:{}: a decision about no call toolgate could read; skipped",
                number + 1
            ));
            continue;
        };
        let mode = text("mode");
        // The parent first (as the records name it), then the session.
        if let Some(parent) = text("parentID") {
            if started.insert(parent.to_string()) {
                recording
                    .frames
                    .push(json!({"type": "session_start", "sessionID": parent}));
            }
        }
        if started.insert(session.to_string()) {
            let mut start = json!({"type": "session_start", "sessionID": session});
            if let Some(parent) = text("parentID") {
                start["parentID"] = json!(parent);
            }
            if let Some(mode) = mode {
                start["mode"] = json!(mode);
                modes.insert(session.to_string(), mode.to_string());
            }
            recording.frames.push(start);
        } else if let Some(mode) = mode {
            if modes.get(session).map(String::as_str) != Some(mode) {
                recording
                    .frames
                    .push(json!({"type": "set_mode", "sessionID": session, "mode": mode}));
                modes.insert(session.to_string(), mode.to_string());
            }
        }
        let mut frame = json!({"type": "tool_call", "sessionID": session, "callID": call,
                               "tool": tool, "input": record.get("input").cloned().unwrap_or(json!({}))});
        if let Some(cwd) = text("cwd") {
            frame["cwd"] = json!(cwd);
        }
        recording.frames.push(frame);
        let key = (session.to_string(), call.to_string());
        if let Some(time) = record.get("time").and_then(Value::as_u64) {
            let waited = record.get("waitedMs").and_then(Value::as_u64).unwrap_or(0);
            recording
                .times
                .insert(key.clone(), time.saturating_sub(waited));
        }
        let decision = text("decision").unwrap_or("");
        if text("source") == Some("user") {
            // A person's answer decided it: replayed as that answer (the
            // answer record, else what the decision says it was).
            let outcome = match (answers.remove(&key), decision) {
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
            recording.outcomes.insert(key.clone(), outcome);
        }
        recording.decisions.insert(
            key,
            (
                decision.to_string(),
                text("reason").unwrap_or("").to_string(),
            ),
        );
    }
    recording
}
