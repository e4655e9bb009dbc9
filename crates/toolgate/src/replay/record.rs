//! A recording, whatever agent made it: the frames an agent would have sent
//! toolgate, and what the recording says became of each call.

use std::collections::HashMap;

use serde_json::Value;

/// A session and one of its calls.
pub type CallKey = (String, String);

/// What a recording says became of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It ran (the agent's own permission check let it through, or a person
    /// allowed it): a question toolgate asks about it is answered `once`.
    Ran,
    /// It was refused (a person rejected it, a rule or hook denied it): a
    /// question toolgate asks about it is answered `reject`, with what the
    /// recording says, if anything.
    Refused(Option<String>),
    /// A person's recorded answer, replayed as it was: the fields of a
    /// `permission_response` (`response`, and `message`, `scope`,
    /// `patterns` when given), without its id.
    Answered(Value),
}

/// One recording read: frames in order, and outcomes by call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recording {
    /// What the agent would have sent toolgate, in order: `session_start`
    /// (a sub-agent's session with `parentID`, the recorded mode),
    /// `set_mode` when the recorded mode changes, `tool_call` (its `callID`
    /// the agent's own id: a `tool_use` id, a `call_id`),
    /// `permission_response` where the recording holds toolgate's own
    /// answers, `session_end`.
    pub frames: Vec<Value>,
    /// What became of each call, where the recording says: answers the
    /// questions the replay asks. A call with none is left unanswered (and
    /// denied at the end, source `replay`).
    pub outcomes: HashMap<CallKey, Outcome>,
    /// The decisions the recording itself holds (`allow` or `deny`, with
    /// their reason), for `--check`.
    pub decisions: HashMap<CallKey, (String, String)>,
    /// What could not be read, one sentence each (the file and line named).
    pub warnings: Vec<String>,
    /// The permission ids a recording of toolgate's own frames gave its
    /// questions, by call: a recorded `permission_response` naming one
    /// answers the replay's question about that call.
    pub questions: HashMap<String, CallKey>,
    /// The line as recorded, for frames read from toolgate's own format
    /// (by index into `frames`; `None` or missing for a frame built from
    /// another format): fed to the broker as it was, so that what
    /// the broker refused live (a duplicate key, a torn line) is refused
    /// again rather than repaired by a re-serialisation.
    pub raw: Vec<Option<String>>,
    /// When each call was made, in milliseconds since the Unix epoch, where
    /// the recording says: the replay's clock reads it while the call is
    /// judged (a question's `timestamp`).
    pub times: HashMap<CallKey, u64>,
}

impl Recording {
    /// Add a frame kept as its recorded `line`.
    pub fn push_raw(&mut self, frame: Value, line: &str) {
        self.raw.resize(self.frames.len(), None);
        self.raw.push(Some(line.to_string()));
        self.frames.push(frame);
    }

    /// The recorded line of frame `index`, if it was kept.
    pub fn raw_line(&self, index: usize) -> Option<&str> {
        self.raw.get(index).and_then(Option::as_deref)
    }
}
