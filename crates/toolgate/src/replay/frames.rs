//! Recordings in toolgate's own frames: what an agent sent (`session_start`,
//! `tool_call`, `permission_response`, ...) and, in the same file or not,
//! what toolgate answered (`decision`, `permission_request`): a golden
//! transcript, a captured stdio session, the output of an earlier replay.
//!
//! The frames an agent sends are replayed as they are. toolgate's answers
//! are not fed back: its `decision` frames are the recorded decisions
//! (`--check`), and its `permission_request` frames say which call each
//! recorded permission id belongs to, so that a recorded answer reaches the
//! replay's question about the same call. Every other line is fed to the
//! broker as it was recorded, byte for byte (a malformed or ambiguous line
//! is refused again, never repaired), with a warning when it is not a
//! frame toolgate knows. Lines starting with `#` (a transcript's comments)
//! and blank lines are skipped.

use serde_json::Value;

use super::record::Recording;

/// The frame types an agent (or an approver) sends.
const CLIENT: &[&str] = &[
    "tool_call",
    "permission_response",
    "set_mode",
    "session_start",
    "session_end",
    "cancel",
    "get_reminder",
    "list_grants",
    "revoke_grant",
    "shutdown",
    "hello",
];

/// The frame types toolgate sends.
const SERVER: &[&str] = &[
    "ready",
    "decision",
    "permission_request",
    "permission_resolved",
    "mode_changed",
    "session_started",
    "session_ended",
    "reminder",
    "grants",
    "error",
];

/// Whether `value` is one of toolgate's frames (either direction).
pub fn is_frame(value: &Value) -> bool {
    value
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(|kind| CLIENT.contains(&kind) || SERVER.contains(&kind))
}

/// Read a file of toolgate frames. `name` names it in warnings.
pub fn read(text: &str, name: &str) -> Recording {
    let mut recording = Recording::default();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let frame: Value = match serde_json::from_str(line) {
            Ok(frame) => frame,
            Err(err) => {
                // Fed as it is: the broker answers it as it did live (an
                // error, a denial when its `callID` can be read).
                recording.warnings.push(format!(
                    "{name}:{}: not JSON ({err}); replayed as it is",
                    number + 1
                ));
                recording
                    .raw
                    .insert(recording.frames.len(), line.to_string());
                recording.frames.push(Value::Null);
                continue;
            }
        };
        let kind = frame.get("type").and_then(Value::as_str).unwrap_or("");
        let key = || {
            let text = |field: &str| frame.get(field).and_then(Value::as_str);
            Some((text("sessionID")?.to_string(), text("callID")?.to_string()))
        };
        if CLIENT.contains(&kind) {
            recording
                .raw
                .insert(recording.frames.len(), line.to_string());
            recording.frames.push(frame);
        } else if kind == "decision" {
            if let Some(key) = key() {
                let verdict = frame.get("decision").and_then(Value::as_str).unwrap_or("");
                let reason = frame.get("reason").and_then(Value::as_str).unwrap_or("");
                recording
                    .decisions
                    .insert(key, (verdict.to_string(), reason.to_string()));
            }
        } else if kind == "permission_request" {
            if let (Some(key), Some(id)) =
                (key(), frame.get("permissionID").and_then(Value::as_str))
            {
                if let Some(time) = frame.get("timestamp").and_then(Value::as_u64) {
                    recording.times.insert(key.clone(), time);
                }
                recording.questions.insert(id.to_string(), key);
            }
        } else if !SERVER.contains(&kind) {
            // An agent's frame toolgate does not know: answered as live.
            recording.warnings.push(format!(
                "{name}:{}: not a toolgate frame (type {kind:?}); replayed as it is",
                number + 1
            ));
            recording
                .raw
                .insert(recording.frames.len(), line.to_string());
            recording.frames.push(frame);
        }
    }
    recording
}
