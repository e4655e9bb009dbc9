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

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use super::event::{Event, Frame};

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

/// What the replay needs of a line: its type and ids (and, for toolgate's
/// own frames, the recorded answer). Only these fields are read: the rest
/// of a line is skipped, not built, and the line itself is kept whole.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(rename = "sessionID", borrow)]
    session: Option<Cow<'a, str>>,
    #[serde(rename = "callID", borrow)]
    call: Option<Cow<'a, str>>,
    #[serde(rename = "permissionID", alias = "permission_id", borrow)]
    permission: Option<Cow<'a, str>>,
    timestamp: Option<u64>,
    #[serde(borrow)]
    decision: Option<Cow<'a, str>>,
    #[serde(borrow)]
    reason: Option<Cow<'a, str>>,
}

/// Read line `number` of a file of toolgate frames (`name` names it in
/// warnings).
///
/// The agent's frames are kept as the recorded line with their type and
/// ids ([`Frame::Line`]); what else they hold is read again from the line
/// where a report needs it. toolgate's `decision` frames are recorded
/// decisions, its `permission_request` frames name the call each recorded
/// permission id was about, and when it was asked.
pub fn line(name: &str, number: usize, line: &str, out: &mut Vec<Event>) {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return;
    }
    let head: Head<'_> = match serde_json::from_str(line) {
        Ok(head) => head,
        Err(err) => {
            // Fed as it is: the broker answers it as it did live (an
            // error, a denial when its `callID` can be read).
            out.push(Event::Warning(format!(
                "{name}:{number}: not a JSON frame ({err}); replayed as it is"
            )));
            out.push(Event::Frame(Frame::Line {
                line: line.to_string(),
                kind: None,
                session: None,
                call: None,
                permission: None,
            }));
            return;
        }
    };
    let kind = head.kind.as_deref().unwrap_or("");
    let key = || {
        Some((
            head.session.as_deref()?.to_string(),
            head.call.as_deref()?.to_string(),
        ))
    };
    if let Some(client) = CLIENT.iter().find(|client| **client == kind) {
        out.push(Event::Frame(Frame::Line {
            line: line.to_string(),
            kind: Some(client),
            session: head.session.map(Cow::into_owned),
            call: head.call.map(Cow::into_owned),
            permission: head.permission.map(Cow::into_owned),
        }));
    } else if kind == "decision" {
        if let Some(key) = key() {
            let verdict = head.decision.as_deref().unwrap_or("");
            let reason = head.reason.as_deref().unwrap_or("");
            out.push(Event::Recorded(
                key,
                verdict.to_string(),
                reason.to_string(),
            ));
        }
    } else if kind == "permission_request" {
        if let (Some(key), Some(id)) = (key(), head.permission.as_deref()) {
            out.push(Event::Question(id.to_string(), key.clone()));
            if let Some(time) = head.timestamp {
                out.push(Event::Time(key, time));
            }
        }
    } else if !SERVER.contains(&kind) {
        // An agent's frame toolgate does not know: answered as live.
        out.push(Event::Warning(format!(
            "{name}:{number}: not a toolgate frame (type {kind:?}); replayed as it is"
        )));
        out.push(Event::Frame(Frame::Line {
            line: line.to_string(),
            kind: None,
            session: None,
            call: None,
            permission: None,
        }));
    }
}
