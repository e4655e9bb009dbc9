//! What a format's reader makes of a recording, line by line: the events a
//! replay is driven by, in the recording's order. Each reader keeps only
//! what it needs to read the next line (the sessions it started, the calls
//! whose result has not come yet), never the recording.

use serde_json::Value;

use super::record::{CallKey, Outcome, ReadFrom};
use super::{audit, claude, codex, frames, Format};

/// One thing a recording says, in its order.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A frame the agent sent (or would have sent) toolgate: fed to the
    /// broker.
    Frame(Frame),
    /// What became of a call: answers the replay's question about it.
    Outcome(CallKey, Outcome),
    /// The decision the recording holds for a call (`allow` or `deny`, and
    /// its reason), for `--check`.
    Recorded(CallKey, String, String),
    /// When a call was made, in milliseconds since the Unix epoch: the
    /// replay's clock reads it while the call is judged.
    Time(CallKey, u64),
    /// A permission id toolgate's own recording gave its question about a
    /// call: a recorded `permission_response` naming it answers the
    /// replay's question about that call.
    Question(String, CallKey),
    /// What could not be read, one sentence (the file and line named).
    Warning(String),
}

/// A frame to feed the broker.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A line of toolgate's own frames, fed byte for byte as recorded (so
    /// that what the broker refused live is refused again), with its type
    /// (`None` when it is not JSON or not a frame toolgate knows) and ids.
    Line {
        /// The line as recorded (trimmed).
        line: String,
        /// Its type, when it is a frame an agent sends.
        kind: Option<&'static str>,
        /// Its `sessionID`.
        session: Option<String>,
        /// Its `callID`.
        call: Option<String>,
        /// For a `tool_call`: the number of its shape
        /// ([`super::frames::Shapes`]). Two lines of the same shape differ
        /// only in their `callID`: they are the same call under two ids.
        shape: Option<u64>,
        /// Its `permissionID` (or `permission_id`).
        permission: Option<String>,
    },
    /// A frame built from another agent's record.
    Built(Value),
}

impl Frame {
    /// The frame's type.
    pub fn kind(&self) -> Option<&str> {
        match self {
            Frame::Line { kind, .. } => *kind,
            Frame::Built(value) => value.get("type").and_then(Value::as_str),
        }
    }

    /// The session and call it names (the session `main` when it names
    /// none); `None` without a `callID`.
    pub fn key(&self) -> Option<CallKey> {
        let (session, call) = match self {
            Frame::Line { session, call, .. } => (session.as_deref(), call.as_deref()?),
            Frame::Built(value) => {
                let text = |field: &str| value.get(field).and_then(Value::as_str);
                (text("sessionID"), text("callID")?)
            }
        };
        Some((
            session
                .unwrap_or(toolgate_protocol::DEFAULT_SESSION)
                .to_string(),
            call.to_string(),
        ))
    }
}

/// A format's reader: the lines of one recording (or of a Claude Code
/// session's transcripts, one after the other) in, events out.
#[derive(Debug)]
pub enum Reader {
    /// toolgate's own frames.
    Toolgate(frames::Shapes),
    /// toolgate's audit log.
    Audit(audit::Reader),
    /// Claude Code transcripts.
    Claude(claude::Reader),
    /// A Codex rollout.
    Codex(codex::Reader),
}

impl Reader {
    /// A reader of `format`.
    pub fn new(format: Format) -> Reader {
        match format {
            Format::Toolgate => Reader::Toolgate(frames::Shapes::default()),
            Format::Audit => Reader::Audit(audit::Reader::default()),
            Format::Claude => Reader::Claude(claude::Reader::default()),
            Format::Codex => Reader::Codex(codex::Reader::default()),
        }
    }

    /// Read line `number` (1-based) of the file `name`, without its `\n`.
    pub fn line(&mut self, name: &str, number: usize, line: &str, out: &mut Vec<Event>) {
        match self {
            Reader::Toolgate(shapes) => frames::line(shapes, name, number, line, out),
            Reader::Audit(reader) => reader.line(name, number, line, out),
            Reader::Claude(reader) => reader.line(name, number, line, out),
            Reader::Codex(reader) => reader.line(name, number, line, out),
        }
    }

    /// The end of the recording (for Claude Code, of the session's last
    /// transcript): the sessions it started end.
    pub fn finish(&mut self, out: &mut Vec<Event>) {
        match self {
            Reader::Claude(reader) => reader.finish(out),
            Reader::Codex(reader) => reader.finish(out),
            Reader::Toolgate(_) | Reader::Audit(_) => {}
        }
    }

    /// Where the outcomes were read from, so far.
    pub fn read_from(&self) -> ReadFrom {
        match self {
            Reader::Claude(reader) => reader.read_from,
            _ => ReadFrom::default(),
        }
    }
}

/// What a whole recording said, gathered from its events, for tests.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct Gathered {
    /// The frames (a recorded line as its JSON value).
    pub frames: Vec<Value>,
    /// The outcomes by call.
    pub outcomes: std::collections::HashMap<CallKey, Outcome>,
    /// The recorded decisions by call.
    pub decisions: std::collections::HashMap<CallKey, (String, String)>,
    /// The times by call.
    pub times: std::collections::HashMap<CallKey, u64>,
    /// The warnings.
    pub warnings: Vec<String>,
}

/// Every event of `text` read as `format` (one file), gathered, for tests.
#[cfg(test)]
pub fn read_all(format: Format, text: &str, name: &str) -> Gathered {
    let mut reader = Reader::new(format);
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        reader.line(name, index + 1, line, &mut out);
    }
    reader.finish(&mut out);
    let mut gathered = Gathered::default();
    for event in out {
        match event {
            Event::Frame(Frame::Built(value)) => gathered.frames.push(value),
            Event::Frame(Frame::Line { line, .. }) => gathered
                .frames
                .push(serde_json::from_str(&line).unwrap_or(Value::Null)),
            Event::Outcome(key, outcome) => {
                gathered.outcomes.insert(key, outcome);
            }
            Event::Recorded(key, verdict, reason) => {
                gathered.decisions.insert(key, (verdict, reason));
            }
            Event::Time(key, time) => {
                gathered.times.insert(key, time);
            }
            Event::Question(..) => {}
            Event::Warning(warning) => gathered.warnings.push(warning),
        }
    }
    gathered
}
