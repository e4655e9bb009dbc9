//! A recording, whatever agent made it: the frames an agent would have sent
//! toolgate, and what the recording says became of each call.

use std::collections::HashMap;

use serde_json::Value;

/// A session and one of its calls.
pub type CallKey = (String, String);

/// What a recording says became of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It ran, and the recording does not say why (an older transcript, a
    /// format without the agent's permission decision): a question toolgate
    /// asks about it is answered `once`, an answer the report counts as
    /// inferred.
    Ran,
    /// It ran because the agent's own configuration (its mode, a rule, a
    /// hook) allowed it, the recording says, so no person was asked: a
    /// question toolgate asks about it has no recorded answer and is left
    /// unanswered (denied at the end, source `replay`). The text says what
    /// allowed it.
    Allowed(String),
    /// It was refused (a person rejected it, a rule or hook denied it): a
    /// question toolgate asks about it is answered `reject`, with what the
    /// recording says, if anything.
    Refused(Option<String>),
    /// A person's recorded answer, replayed as it was: the fields of a
    /// `permission_response` (`response`, and `message`, `scope`,
    /// `patterns`, `expiresIn` when given), without its id.
    Answered(Value),
}

/// Where a recording's outcomes were read from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadFrom {
    /// From the agent's structured permission record.
    pub fields: usize,
    /// From the text of the result (refusal phrases).
    pub text: usize,
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
    /// How many outcomes were read from the agent's structured permission
    /// record (Claude Code's `permissionDecision`), and how many from the
    /// text the model was told (older transcripts): the report says which.
    pub read_from: ReadFrom,
    /// The working directory the agent recorded (its first), for the
    /// project root of an agent's recording.
    pub cwd: Option<String>,
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
    /// The session a recording is about: its first frame's, without a
    /// sub-agent's `/agent/ID` (so a sub-agent's transcript names the
    /// session it belongs to).
    pub fn root_session(&self) -> Option<&str> {
        let first = self.frames.first()?.get("sessionID")?.as_str()?;
        Some(first.split("/agent/").next().unwrap_or(first))
    }

    /// Add `other`'s frames after this one's, as one recording: sessions
    /// this one started are not started again, and every `session_end`
    /// comes last (sub-agents' before their parent's).
    pub fn merge(&mut self, other: Recording) {
        let started: std::collections::HashSet<String> = self
            .frames
            .iter()
            .filter(|frame| frame.get("type").and_then(Value::as_str) == Some("session_start"))
            .filter_map(|frame| {
                frame
                    .get("sessionID")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .collect();
        let kind = |frame: &Value| {
            frame
                .get("type")
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let mut ends: Vec<Value> = Vec::new();
        let mut frames: Vec<(Value, Option<String>)> = Vec::new();
        let own_raw = std::mem::take(&mut self.raw);
        for (index, frame) in std::mem::take(&mut self.frames).into_iter().enumerate() {
            let raw = own_raw.get(index).cloned().flatten();
            frames.push((frame, raw));
        }
        for (index, frame) in other.frames.into_iter().enumerate() {
            let raw = other.raw.get(index).cloned().flatten();
            let is_start = kind(&frame).as_deref() == Some("session_start");
            let session = frame.get("sessionID").and_then(Value::as_str).unwrap_or("");
            if is_start && started.contains(session) {
                continue;
            }
            frames.push((frame, raw));
        }
        for (frame, raw) in frames {
            if kind(&frame).as_deref() == Some("session_end") {
                if !ends.contains(&frame) {
                    ends.push(frame);
                }
                continue;
            }
            match raw {
                Some(line) => self.push_raw(frame, &line),
                None => self.frames.push(frame),
            }
        }
        ends.sort_by_key(|frame| {
            std::cmp::Reverse(
                frame
                    .get("sessionID")
                    .and_then(Value::as_str)
                    .map_or(0, str::len),
            )
        });
        self.frames.extend(ends);
        self.outcomes.extend(other.outcomes);
        self.decisions.extend(other.decisions);
        self.warnings.extend(other.warnings);
        self.questions.extend(other.questions);
        self.times.extend(other.times);
        self.read_from.fields += other.read_from.fields;
        self.read_from.text += other.read_from.text;
        if self.cwd.is_none() {
            self.cwd = other.cwd;
        }
    }

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

/// Milliseconds since the Unix epoch of an RFC 3339 UTC time
/// (`2026-11-24T03:21:39.409Z`, fractions optional); `None` for anything
/// else.
pub fn epoch_ms(text: &str) -> Option<u64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut date = date.split('-').map(|part| part.parse::<i64>().ok());
    let (year, month, day) = (date.next()??, date.next()??, date.next()??);
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut clock = clock.split(':').map(|part| part.parse::<i64>().ok());
    let (hour, minute, second) = (clock.next()??, clock.next()??, clock.next()??);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let millis: i64 = match fraction.len() {
        0 => 0,
        _ => format!("{:0<3}", &fraction[..fraction.len().min(3)])
            .parse()
            .ok()?,
    };
    // Days from the civil date (proleptic Gregorian).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms = ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis;
    u64::try_from(ms).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_times_in_milliseconds() {
        for (text, expected) in [
            ("1970-01-01T00:00:00Z", Some(0)),
            ("2026-11-24T03:21:39.409Z", Some(1_795_490_499_409)),
            ("2000-02-29T12:00:00.5Z", Some(951_825_600_500)),
            ("2026-11-24T03:21:39", None),
            ("2026-13-01T00:00:00Z", None),
            ("yesterday", None),
        ] {
            assert_eq!(super::epoch_ms(text), expected, "{text}");
        }
    }
}
