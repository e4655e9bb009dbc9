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
use serde_json::value::RawValue;
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
/// The `callID` is taken as the raw JSON the line holds, so that where it
/// stands in the line is known ([`Frame::Line`]'s `call_at`); a `callID`
/// that is not a string is read again as [`Strict`] reads it, for the same
/// error.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(rename = "sessionID", borrow)]
    session: Option<Cow<'a, str>>,
    #[serde(rename = "callID", borrow)]
    call: Option<&'a RawValue>,
    #[serde(rename = "permissionID", alias = "permission_id", borrow)]
    permission: Option<Cow<'a, str>>,
    timestamp: Option<u64>,
    #[serde(borrow)]
    decision: Option<Cow<'a, str>>,
    #[serde(borrow)]
    reason: Option<Cow<'a, str>>,
}

/// [`Head`] with a `callID` that must be a string: how a line whose
/// `callID` is anything else fails.
#[derive(Deserialize)]
struct Strict<'a> {
    #[serde(rename = "type", borrow)]
    _kind: Option<Cow<'a, str>>,
    #[serde(rename = "sessionID", borrow)]
    _session: Option<Cow<'a, str>>,
    #[serde(rename = "callID", borrow)]
    _call: Option<Cow<'a, str>>,
    #[serde(rename = "permissionID", alias = "permission_id", borrow)]
    _permission: Option<Cow<'a, str>>,
    _timestamp: Option<u64>,
    #[serde(borrow)]
    _decision: Option<Cow<'a, str>>,
    #[serde(borrow)]
    _reason: Option<Cow<'a, str>>,
}

/// A `callID`'s text, and the byte range of its raw JSON in the line.
type CallAt<'a> = (Cow<'a, str>, (usize, usize));

/// The `callID` of a line read by [`Head`]: its text, and the byte range of
/// its raw JSON (quotes included) in `line`; `Err` with the error a line
/// whose `callID` is not a string fails with.
fn call_of<'a>(
    line: &'a str,
    raw: Option<&'a RawValue>,
) -> Result<Option<CallAt<'a>>, serde_json::Error> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    match serde_json::from_str::<Cow<'a, str>>(raw.get()) {
        Ok(text) => {
            // The raw value is borrowed from `line`: where it starts there.
            let start = (raw.get().as_ptr() as usize).wrapping_sub(line.as_ptr() as usize);
            let end = start + raw.get().len();
            if line.get(start..end) == Some(raw.get()) {
                Ok(Some((text, (start, end))))
            } else {
                Ok(Some((text, (0, 0))))
            }
        }
        Err(_) => match serde_json::from_str::<Strict<'_>>(line) {
            Err(err) => Err(err),
            // Not reached: a `callID` that is not a string fails `Strict`.
            Ok(_) => Ok(None),
        },
    }
}

/// Read line `number` of a file of toolgate frames (`name` names it in
/// warnings).
///
/// The agent's frames are kept as the recorded line with their type and
/// ids ([`Frame::Line`]); what else they hold is read again from the line
/// where a report needs it. toolgate's `decision` frames are recorded
/// decisions, its `permission_request` frames name the call each recorded
/// permission id was about, and when it was asked.
pub fn line(shapes: &mut Shapes, name: &str, number: usize, line: &str, out: &mut Vec<Event>) {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return;
    }
    if let Some(frame) = shapes.known(line) {
        out.push(Event::Frame(frame));
        return;
    }
    let parsed = serde_json::from_str::<Head<'_>>(line)
        .and_then(|head| Ok((call_of(line, head.call)?, head)));
    let (call, head) = match parsed {
        Ok(read) => read,
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
                shape: None,
                permission: None,
            }));
            return;
        }
    };
    let kind = head.kind.as_deref().unwrap_or("");
    let (call, call_at) = match call {
        Some((text, at)) => (Some(text), Some(at).filter(|at| at.1 > 0)),
        None => (None, None),
    };
    let key = || {
        Some((
            head.session.as_deref()?.to_string(),
            call.as_deref()?.to_string(),
        ))
    };
    if let Some(client) = CLIENT.iter().find(|client| **client == kind) {
        let shape = match (call_at, *client) {
            (Some(at), "tool_call") => Some(shapes.learn(
                line,
                at,
                head.session.as_deref(),
                head.permission.as_deref(),
            )),
            _ => None,
        };
        out.push(Event::Frame(Frame::Line {
            line: line.to_string(),
            kind: Some(client),
            session: head.session.map(Cow::into_owned),
            call: call.clone().map(Cow::into_owned),
            shape,
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
            shape: None,
            permission: None,
        }));
    }
}

/// The `tool_call` lines read so far, by shape: the bytes before their
/// `callID`'s value and the bytes after it. A line of a known shape whose
/// `callID` is a plain string (no escape, no quote, no control character)
/// is that line with another id: the same frame but for its `callID`, read
/// without being parsed again. The text before the id is the same, so the
/// id stands where the known line's top-level `callID` stood, and a plain
/// string there changes nothing else a parser sees. Agents repeat
/// themselves, and a recording of a million calls is mostly a few hundred
/// shapes.
///
/// Bounded: [`Shapes::MOST`] shapes, forgotten all at once when full, and
/// the [`Shapes::PREFIXES`] texts before the id most recently met.
#[derive(Debug, Default)]
pub struct Shapes {
    /// The texts before the id, most recent first.
    prefixes: Vec<String>,
    /// By key ([`key`]): the frame's `sessionID` and `permissionID`.
    known: std::collections::HashMap<Vec<u8>, Known, foldhash::fast::RandomState>,
    /// The key of the line being looked at.
    key: Vec<u8>,
    /// The number the next new shape gets: never given twice, also after
    /// the shapes are forgotten.
    next: u64,
}

/// What a known shape's lines say besides their `callID`.
#[derive(Debug)]
struct Known {
    number: u64,
    session: Option<String>,
    permission: Option<String>,
}

impl Shapes {
    /// The most shapes kept.
    pub const MOST: usize = 4096;
    /// The most texts before an id kept.
    pub const PREFIXES: usize = 4;

    /// `line` as a `tool_call` frame, when it is a known shape with a plain
    /// `callID`.
    fn known(&mut self, line: &str) -> Option<Frame> {
        let bytes = line.as_bytes();
        let (start, end) = self.prefixes.iter().find_map(|prefix| {
            let rest = bytes.strip_prefix(prefix.as_bytes())?.strip_prefix(b"\"")?;
            let length = rest
                .iter()
                .position(|byte| *byte == b'"' || *byte == b'\\' || *byte < 0x20)?;
            (rest[length] == b'"').then_some((prefix.len(), prefix.len() + length + 2))
        })?;
        key(&mut self.key, line, (start, end));
        let known = self.known.get(&self.key)?;
        Some(Frame::Line {
            line: line.to_string(),
            kind: Some("tool_call"),
            session: known.session.clone(),
            call: Some(line.get(start + 1..end - 1)?.to_string()),
            shape: Some(known.number),
            permission: known.permission.clone(),
        })
    }

    /// Keep the shape of `line`, a `tool_call` read whole whose `callID`
    /// stood at `at`: its number.
    fn learn(
        &mut self,
        line: &str,
        at: (usize, usize),
        session: Option<&str>,
        permission: Option<&str>,
    ) -> u64 {
        key(&mut self.key, line, at);
        if let Some(known) = self.known.get(&self.key) {
            return known.number;
        }
        if self.known.len() >= Self::MOST {
            self.known.clear();
        }
        let number = self.next;
        self.next += 1;
        self.known.insert(
            self.key.clone(),
            Known {
                number,
                session: session.map(str::to_string),
                permission: permission.map(str::to_string),
            },
        );
        let prefix = line.get(..at.0).unwrap_or_default();
        match self.prefixes.iter().position(|known| known == prefix) {
            Some(0) => {}
            Some(index) => {
                let known = self.prefixes.remove(index);
                self.prefixes.insert(0, known);
            }
            None => {
                self.prefixes.truncate(Self::PREFIXES - 1);
                self.prefixes.insert(0, prefix.to_string());
            }
        }
        number
    }
}

/// The shape of `line` whose `callID` value stands at `at`: where it
/// starts, the text before it and the text after it.
fn key(into: &mut Vec<u8>, line: &str, at: (usize, usize)) {
    into.clear();
    into.extend_from_slice(&at.0.to_le_bytes());
    into.extend_from_slice(line.as_bytes().get(..at.0).unwrap_or_default());
    into.extend_from_slice(line.as_bytes().get(at.1..).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// Every line read once with every shape learnt so far, and alone with
    /// none: the same events, whatever the id, its escapes, its place and
    /// what surrounds it.
    #[test]
    fn a_known_shape_reads_as_a_parse_would() {
        let ids = [
            "c-1",
            "c-2",
            "",
            "é",
            "a\\\"b",
            "c\\u002d3",
            "tab\\t",
            "x y",
            "9",
        ];
        let shapes = [
            r#"{"type":"tool_call","callID":@@,"sessionID":"main","tool":"bash","input":{"command":"ls"}}"#,
            r#"{"type":"tool_call","callID":@@,"sessionID":"main","tool":"bash","input":{"command":"rm -rf /"}}"#,
            r#"{"type":"tool_call","callID":@@,"tool":"read","input":{"callID":"nested"}}"#,
            r#"{"type":"tool_call","callID":@@,"permissionID":"p","tool":"read","input":{}}"#,
            r#"{"tool":"read","input":{},"callID":@@,"type":"tool_call"}"#,
            r#"{"type":"tool_call","callID" : @@,"tool":"read","input":{}}"#,
            r#"{"type":"tool_call","callID":@@,"callID":"twice","tool":"read","input":{}}"#,
            r#"{"type":"tool_call","callID":@@,"tool":"read","input":{}"#,
            r#"{"type":"tool_call","callID":@@,"tool":"read","input":{}} trailing"#,
            r#"{"type":"permission_response","callID":@@,"permissionID":"p","response":"once"}"#,
            r#"{"type":"decision","callID":@@,"sessionID":"main","decision":"allow"}"#,
        ];
        let mut lines = Vec::new();
        for round in 0..3 {
            for shape in shapes {
                for id in ids {
                    lines.push(shape.replace("@@", &format!("\"{id}\"")));
                }
                // Not a string, and a string the shape's prefix begins.
                lines.push(shape.replace("@@", &round.to_string()));
                lines.push(shape.replace("@@", "\"open"));
            }
        }
        let mut warm = Shapes::default();
        // By shape number: the line's JSON without its `callID`.
        let mut shapes_seen: std::collections::HashMap<u64, Value> = Default::default();
        let unnumbered = |events: &mut Vec<Event>| {
            let mut numbers = Vec::new();
            for event in events.iter_mut() {
                if let Event::Frame(Frame::Line { shape, .. }) = event {
                    numbers.extend(shape.take());
                }
            }
            numbers
        };
        for (number, line) in lines.iter().enumerate() {
            let mut known = Vec::new();
            super::line(&mut warm, "f", number, line, &mut known);
            let mut parsed = Vec::new();
            super::line(&mut Shapes::default(), "f", number, line, &mut parsed);
            let numbered = unnumbered(&mut known);
            assert_eq!(numbered.len(), unnumbered(&mut parsed).len(), "{line}");
            assert_eq!(known, parsed, "{line}");
            // One number, one call but for its id; another, another call.
            for shape in numbered {
                let mut value: Value = serde_json::from_str(line).unwrap();
                value.as_object_mut().unwrap().remove("callID");
                let before = shapes_seen.entry(shape).or_insert_with(|| value.clone());
                assert_eq!(*before, value, "{line}");
            }
        }
        // The six shapes that parse (not the twice-named id, the cut line,
        // the trailing text), and a fresh id of one is read without a parse.
        assert_eq!(warm.known.len(), 6);
        assert!(warm.known(&shapes[0].replace("@@", "\"fresh\"")).is_some());
        assert!(warm
            .known(&shapes[0].replace("@@", "\"fr\\u0065sh\""))
            .is_none());
    }
}
