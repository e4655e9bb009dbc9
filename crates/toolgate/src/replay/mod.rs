//! `toolgate replay`: recorded sessions fed through a fresh broker,
//! deterministically. Each format's reader turns a file into a
//! [`record::Recording`]; [`run`] feeds its frames to the broker core (the
//! same [`Broker::step`] every transport drives) and answers the questions
//! the broker asks from what the recording says became of each call.
//!
//! Nothing comes from the wall clock or a random source: permission ids
//! count up (`per_1`, `per_2`, ... in each replayed file), grant ids too,
//! and the clock reads the recorded time of the call being judged (0 where
//! the recording has none). The same files and flags give the same bytes.

pub mod audit;
pub mod claude;
pub mod cli;
pub mod codex;
pub mod frames;
pub mod record;
pub mod report;

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};
use toolgate_policy::Policy;
use toolgate_protocol::ServerFrame;

use crate::broker::{Broker, BrokerConfig, Input, OnAsk, Origin, Output};
use crate::clock::{ManualClock, SequentialIds};
use record::{CallKey, Outcome, Recording};

/// The formats `toolgate replay` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// toolgate's own frames.
    Toolgate,
    /// toolgate's audit log (`serve --audit`).
    Audit,
    /// A Claude Code session transcript.
    Claude,
    /// A Codex rollout.
    Codex,
}

impl Format {
    /// The format of a file, from its first line that says: `None` when no
    /// line does.
    pub fn detect(text: &str) -> Option<Format> {
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Ok(value) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if frames::is_frame(&value) {
                return Some(Format::Toolgate);
            }
            if audit::is_record(&value) {
                return Some(Format::Audit);
            }
            if claude::is_record(&value) {
                return Some(Format::Claude);
            }
            if codex::is_record(&value) {
                return Some(Format::Codex);
            }
        }
        None
    }

    /// Read `text` (the file `name`) as this format.
    pub fn read(self, text: &str, name: &str) -> Recording {
        match self {
            Format::Toolgate => frames::read(text, name),
            Format::Audit => audit::read(text, name),
            Format::Claude => claude::read(text, name),
            Format::Codex => codex::read(text, name),
        }
    }
}

/// The connection a replay's frames come from.
const REPLAY: crate::broker::ConnId = 0;

/// How the questions of a replay were answered, and what of the recording
/// it set aside: what `--summary` says about the replay itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Notes {
    /// Answered with a person's recorded answer (or toolgate's own).
    pub recorded: usize,
    /// Answered `reject` because the recording says the call was refused.
    pub refusals: usize,
    /// Answered `once` only because the recording says the call ran, not
    /// why: an inference.
    pub inferred: usize,
    /// Left unanswered: the agent's own configuration allowed the call, so
    /// nobody was asked and the recording holds no answer (or it holds no
    /// outcome at all).
    pub unanswered: usize,
    /// Recorded mode changes (and session modes) set aside because a mode
    /// was given for the whole replay.
    pub modes_ignored: usize,
}

impl Notes {
    /// Add another replay's notes.
    pub fn add(&mut self, other: &Notes) {
        self.recorded += other.recorded;
        self.refusals += other.refusals;
        self.inferred += other.inferred;
        self.unanswered += other.unanswered;
        self.modes_ignored += other.modes_ignored;
    }
}

/// Replay `recording` through a fresh broker judging by `policy` (whose
/// layers `sources` names, for `ready`), handing every frame the broker
/// writes to `sink`, in order. With `mode` (given on the command line),
/// every session runs in it: the recorded modes and mode changes are set
/// aside (and counted).
pub fn run(
    policy: Arc<Policy>,
    sources: &[String],
    recording: &Recording,
    mode: Option<toolgate_policy::Mode>,
    sink: &mut dyn FnMut(&ServerFrame),
) -> Notes {
    let clock = ManualClock::new();
    let mut broker = Broker::new(
        policy,
        BrokerConfig {
            on_ask: OnAsk::Wait,
            ask_timeout_ms: 0,
        },
        Box::new(clock.clone()),
        Box::new(SequentialIds::default()),
    );
    broker.set_origin(Origin {
        policy_sources: sources.to_vec(),
        state_dir: None,
    });
    let mut driver = Driver {
        broker: &mut broker,
        recording,
        asked: HashMap::new(),
        number: 0,
        out: Vec::new(),
        line: Vec::new(),
        notes: Notes::default(),
    };
    driver.step(Input::Opened { conn: REPLAY }, sink);
    let mut ending = false;
    for (index, frame) in recording.frames.iter().enumerate() {
        let raw = recording.raw_line(index);
        let kind = frame.get("type").and_then(Value::as_str);
        if kind == Some("session_end") && !ending {
            // Every answer the recording holds has been given: what is
            // still open has none (not "the session ended").
            ending = true;
            driver.notes.unanswered += driver.asked.len();
            driver.step(Input::Unanswered, sink);
        }
        if let Some(mode) = mode {
            // The mode given holds: recorded modes are set aside.
            match kind {
                Some("set_mode") => {
                    driver.notes.modes_ignored += 1;
                    continue;
                }
                Some("session_start") if frame.get("mode").is_some() => {
                    let mut start = frame.clone();
                    if let Some(fields) = start.as_object_mut() {
                        fields.remove("mode");
                    }
                    if frame["mode"].as_str() != Some(mode.as_str()) {
                        driver.notes.modes_ignored += 1;
                    }
                    driver.feed(&start, sink);
                    continue;
                }
                _ => {}
            }
        }
        match kind {
            Some("tool_call") if !recording.times.is_empty() => {
                if let Some(time) = key_of(frame).and_then(|key| recording.times.get(&key)) {
                    clock.set(*time);
                }
            }
            Some("permission_response") => {
                match driver.translation(frame) {
                    Some((Some(recorded), replayed)) => {
                        match raw {
                            // The recorded line, with the replay's id for the
                            // recorded one (quoted, so no other text matches).
                            Some(line) => driver.feed_line(
                                &line.replace(
                                    &format!("\"{recorded}\""),
                                    &format!("\"{replayed}\""),
                                ),
                                sink,
                            ),
                            None => {
                                let mut frame = frame.clone();
                                frame["permissionID"] = json!(replayed);
                                driver.feed(&frame, sink);
                            }
                        }
                        continue;
                    }
                    Some((None, replayed)) => {
                        // An answer naming its call, not a question: given
                        // the replay's id for the question about that call.
                        let mut whole = match raw.map(serde_json::from_str::<Value>) {
                            Some(Ok(whole)) => whole,
                            _ => frame.clone(),
                        };
                        whole["permissionID"] = json!(replayed);
                        driver.feed(&whole, sink);
                        continue;
                    }
                    None => {}
                }
            }
            _ => {}
        }
        match raw {
            Some(line) => driver.feed_line(line, sink),
            None => driver.feed(frame, sink),
        }
    }
    driver.notes.unanswered += driver.asked.len();
    driver.step(Input::Unanswered, sink);
    driver.step(Input::Stop, sink);
    driver.notes
}

/// The session and call a frame names.
fn key_of(frame: &Value) -> Option<CallKey> {
    let text = |field: &str| frame.get(field).and_then(Value::as_str);
    Some((
        text("sessionID")
            .unwrap_or(toolgate_protocol::DEFAULT_SESSION)
            .to_string(),
        text("callID")?.to_string(),
    ))
}

struct Driver<'a> {
    broker: &'a mut Broker,
    recording: &'a Recording,
    /// The replay's open questions: call → its permission id here.
    asked: HashMap<CallKey, String>,
    /// Lines fed so far.
    number: u64,
    out: Vec<Output>,
    line: Vec<u8>,
    notes: Notes,
}

impl Driver<'_> {
    /// A recorded `permission_response` names the recorded question (or
    /// its call, with `sessionID` and `callID`, and no question): the
    /// recorded id (`None` when it names none) and the replay's id for the
    /// question about the same call, when they differ.
    fn translation(&self, frame: &Value) -> Option<(Option<String>, String)> {
        let recorded = frame
            .get("permissionID")
            .or_else(|| frame.get("permission_id"))
            .and_then(Value::as_str);
        let key = match recorded {
            Some(id) => self
                .recording
                .questions
                .get(id)
                .cloned()
                .or_else(|| key_of(frame))?,
            None => key_of(frame)?,
        };
        let replayed = self.asked.get(&key)?;
        match recorded {
            Some(id) if id == replayed => None,
            _ => Some((recorded.map(str::to_string), replayed.clone())),
        }
    }

    /// Feed one frame as the next input line, then answer what it asked.
    /// A frame is handed over as it is; one that is not a frame as it is
    /// goes as its text, so that the broker refuses it as it would the line.
    fn feed(&mut self, frame: &Value, sink: &mut dyn FnMut(&ServerFrame)) {
        let Ok(frame) = toolgate_protocol::decode_value(frame) else {
            self.line.clear();
            // Writing a Value to a Vec cannot fail.
            let _ = serde_json::to_writer(&mut self.line, frame);
            self.feed_buffer(sink);
            return;
        };
        self.number += 1;
        let number = Some(self.number);
        self.step(
            Input::Frame {
                conn: REPLAY,
                frame,
                number,
            },
            sink,
        );
    }

    /// Feed one recorded line as it is, then answer what it asked.
    fn feed_line(&mut self, line: &str, sink: &mut dyn FnMut(&ServerFrame)) {
        self.line.clear();
        self.line.extend_from_slice(line.as_bytes());
        self.feed_buffer(sink);
    }

    /// Feed the line held in `self.line`, then answer what it asked.
    fn feed_buffer(&mut self, sink: &mut dyn FnMut(&ServerFrame)) {
        self.number += 1;
        let line = std::mem::take(&mut self.line);
        self.step(
            Input::Line {
                conn: REPLAY,
                line: &line,
                number: self.number,
            },
            sink,
        );
        self.line = line;
    }

    /// One step; the questions it raised that the recording answers are
    /// answered at once, in the order asked.
    fn step(&mut self, input: Input<'_>, sink: &mut dyn FnMut(&ServerFrame)) {
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        self.broker.step(input, &mut out);
        let mut answers = Vec::new();
        let mut unanswerable = Vec::new();
        for Output { frame, .. } in &out {
            sink(frame);
            match frame {
                ServerFrame::PermissionRequest(request) => {
                    let key = (request.session_id.clone(), request.call_id.clone());
                    if let Some(outcome) = self.recording.outcomes.get(&key) {
                        match outcome {
                            Outcome::Answered(_) => self.notes.recorded += 1,
                            Outcome::Refused(said) => {
                                self.notes.refusals += 1;
                                unanswerable.push(Input::NoAnswer {
                                    permission_id: request.permission_id.clone(),
                                    reason: match said {
                                        Some(said) => format!(
                                            "the recording says the call was refused: {said}"
                                        ),
                                        None => {
                                            "the recording says the call was refused".to_string()
                                        }
                                    },
                                });
                            }
                            Outcome::Ran => self.notes.inferred += 1,
                            Outcome::Allowed(by) => {
                                self.notes.unanswered += 1;
                                unanswerable.push(Input::NoAnswer {
                                    permission_id: request.permission_id.clone(),
                                    reason: format!(
                                        "the recording holds no answer to this question: {by}"
                                    ),
                                });
                            }
                        }
                        answers.extend(answer(&request.permission_id, outcome));
                    }
                    self.asked.insert(key, request.permission_id.clone());
                }
                ServerFrame::Decision(decision) if !self.asked.is_empty() => {
                    self.asked
                        .remove(&(decision.session_id.clone(), decision.call_id.clone()));
                }
                _ => {}
            }
        }
        self.out = out;
        for answer in answers {
            self.feed(&answer, sink);
        }
        for input in unanswerable {
            self.step(input, sink);
        }
    }
}

/// The answer a recorded outcome gives a question: none when the agent's
/// own configuration allowed the call (nobody was asked, so the recording
/// holds no answer to give).
fn answer(permission_id: &str, outcome: &Outcome) -> Option<Value> {
    Some(match outcome {
        Outcome::Allowed(_) | Outcome::Refused(_) => return None,
        Outcome::Ran => {
            json!({"type": "permission_response", "permissionID": permission_id, "response": "once"})
        }
        Outcome::Answered(fields) => {
            let mut frame = json!({"type": "permission_response", "permissionID": permission_id});
            if let Value::Object(fields) = fields {
                for (key, value) in fields {
                    if key != "type" && key != "permissionID" {
                        frame[key.as_str()] = value.clone();
                    }
                }
            }
            frame
        }
    })
}
