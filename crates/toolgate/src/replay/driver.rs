//! One replay: a fresh broker fed a recording's frames one at a time, its
//! questions answered from what the recording says became of each call.
//!
//! What a [`Replay`] keeps is about the calls in flight only: the open
//! questions, the outcomes and times read ahead for calls not yet fed
//! (dropped once the call is decided), and the latest recorded permission
//! ids (at most [`QUESTIONS`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{json, Value};
use toolgate_policy::{Mode, Policy};
use toolgate_protocol::ServerFrame;

use super::event::Frame;
use super::record::{CallKey, Outcome};
use super::Notes;
use crate::broker::{Broker, BrokerConfig, Decoded, Input, OnAsk, Origin, Output};
use crate::clock::{ManualClock, SequentialIds};

/// Where the frames a broker writes go, in order.
pub type Sink<'a> = dyn FnMut(&ServerFrame) + 'a;

/// How many recorded permission ids are remembered (the latest): a
/// recorded answer names a question asked shortly before it.
pub const QUESTIONS: usize = 65_536;

/// The hasher of the maps looked up for every call: foldhash, seeded at
/// random (a recording cannot pick colliding ids); none is iterated, so
/// the replay stays deterministic.
type Fast = foldhash::fast::RandomState;

/// The connection a replay's frames come from.
const REPLAY: crate::broker::ConnId = 0;

/// A replay in progress: see the module documentation.
pub struct Replay {
    clock: ManualClock,
    broker: Broker,
    /// The mode given for the whole replay, if one was.
    mode: Option<Mode>,
    /// The replay's open questions: call → its permission id here.
    asked: HashMap<CallKey, String, Fast>,
    /// Outcomes read ahead, for calls not decided yet.
    outcomes: HashMap<CallKey, Outcome, Fast>,
    /// Times read ahead, for calls not fed yet.
    times: HashMap<CallKey, u64, Fast>,
    /// The recorded permission ids, by call, and their order.
    questions: HashMap<String, CallKey, Fast>,
    question_order: VecDeque<String>,
    /// A `session_end` was fed: every answer the recording holds was given.
    ending: bool,
    /// Lines fed so far.
    number: u64,
    out: Vec<Output>,
    line: Vec<u8>,
    notes: Notes,
}

impl Replay {
    /// A fresh broker judging by `policy` (whose layers `sources` names,
    /// for `ready`), greeting the replay's connection. With `mode` (given
    /// on the command line), every session runs in it: the recorded modes
    /// and mode changes are set aside (and counted).
    pub fn new(
        policy: Arc<Policy>,
        sources: &[String],
        mode: Option<Mode>,
        sink: &mut Sink<'_>,
    ) -> Replay {
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
        let mut replay = Replay {
            clock,
            broker,
            mode,
            asked: HashMap::default(),
            outcomes: HashMap::default(),
            times: HashMap::default(),
            questions: HashMap::default(),
            question_order: VecDeque::new(),
            ending: false,
            number: 0,
            out: Vec::new(),
            line: Vec::new(),
            notes: Notes::default(),
        };
        replay.step(Input::Opened { conn: REPLAY }, sink);
        replay
    }

    /// What became of a call not fed yet: kept until it is decided.
    pub fn ahead(&mut self, key: CallKey, outcome: Outcome) {
        self.outcomes.insert(key, outcome);
    }

    /// What became of a call already fed: answers its open question, if
    /// it has one (else it was decided without one and this is dropped).
    pub fn late(&mut self, key: &CallKey, outcome: &Outcome, sink: &mut Sink<'_>) {
        let Some(id) = self.asked.get(key).cloned() else {
            return;
        };
        let mut answers = Vec::new();
        let mut unanswerable = Vec::new();
        self.respond(&id, outcome, &mut answers, &mut unanswerable);
        self.answer(answers, unanswerable, sink);
    }

    /// When a call not fed yet was made.
    pub fn time(&mut self, key: CallKey, time: u64) {
        self.times.insert(key, time);
    }

    /// The call has been fed (every time it was): its time is dropped.
    pub fn fed(&mut self, key: &CallKey) {
        if !self.times.is_empty() {
            self.times.remove(key);
        }
    }

    /// A recorded permission id, and the call it was about.
    pub fn question(&mut self, id: String, key: CallKey) {
        if self.questions.insert(id.clone(), key).is_none() {
            self.question_order.push_back(id);
        }
        while self.question_order.len() > QUESTIONS {
            if let Some(old) = self.question_order.pop_front() {
                self.questions.remove(&old);
            }
        }
    }

    /// Feed one frame of the recording, and answer what it asked. A
    /// `tool_call` may come `decoded` (and prepared) already, on the
    /// reading thread: it is judged exactly as its line would be.
    pub fn frame(&mut self, frame: &Frame, decoded: Option<Decoded>, sink: &mut Sink<'_>) {
        let kind = frame.kind();
        if kind == Some("session_end") && !self.ending {
            // Every answer the recording holds has been given: what is
            // still open has none (not "the session ended").
            self.ending = true;
            self.notes.unanswered += self.asked.len();
            self.step(Input::Unanswered, sink);
        }
        if let Some(mode) = self.mode {
            // The mode given holds: recorded modes are set aside.
            match (kind, frame) {
                (Some("set_mode"), _) => {
                    self.notes.modes_ignored += 1;
                    return;
                }
                (Some("session_start"), Frame::Line { line, .. }) => {
                    // A recorded line: its mode is read from the whole line.
                    if let Ok(value) = serde_json::from_str::<Value>(line) {
                        if value.get("mode").is_some() {
                            let mut start = value.clone();
                            if let Some(fields) = start.as_object_mut() {
                                fields.remove("mode");
                            }
                            if value["mode"].as_str() != Some(mode.as_str()) {
                                self.notes.modes_ignored += 1;
                            }
                            self.feed(&start, sink);
                            return;
                        }
                    }
                }
                (Some("session_start"), Frame::Built(value)) if value.get("mode").is_some() => {
                    let mut start = value.clone();
                    if let Some(fields) = start.as_object_mut() {
                        fields.remove("mode");
                    }
                    if value["mode"].as_str() != Some(mode.as_str()) {
                        self.notes.modes_ignored += 1;
                    }
                    self.feed(&start, sink);
                    return;
                }
                _ => {}
            }
        }
        match kind {
            Some("tool_call") if !self.times.is_empty() => {
                if let Some(time) = frame.key().and_then(|key| self.times.get(&key)) {
                    self.clock.set(*time);
                }
            }
            Some("permission_response") => {
                if let Some((recorded, replayed)) = self.translation(frame) {
                    self.translated(frame, recorded, &replayed, sink);
                    return;
                }
            }
            _ => {}
        }
        match (frame, decoded) {
            (_, Some(decoded)) => {
                self.number += 1;
                let number = self.number;
                self.step(
                    Input::Decoded {
                        conn: REPLAY,
                        decoded,
                        number,
                    },
                    sink,
                );
            }
            (Frame::Line { line, .. }, None) => self.feed_line(line, sink),
            (Frame::Built(value), None) => self.feed(value, sink),
        }
    }

    /// The end: what is still open has no answer; the broker stops.
    pub fn finish(mut self, sink: &mut Sink<'_>) -> Notes {
        self.notes.unanswered += self.asked.len();
        self.step(Input::Unanswered, sink);
        self.step(Input::Stop, sink);
        self.notes
    }

    /// A recorded `permission_response` names the recorded question (or
    /// its call, with `sessionID` and `callID`, and no question): the
    /// recorded id (`None` when it names none) and the replay's id for the
    /// question about the same call, when they differ.
    fn translation(&self, frame: &Frame) -> Option<(Option<String>, String)> {
        let recorded = match frame {
            Frame::Line { permission, .. } => permission.as_deref(),
            Frame::Built(value) => value
                .get("permissionID")
                .or_else(|| value.get("permission_id"))
                .and_then(Value::as_str),
        };
        let key = match recorded {
            Some(id) => self.questions.get(id).cloned().or_else(|| frame.key())?,
            None => frame.key()?,
        };
        let replayed = self.asked.get(&key)?;
        match recorded {
            Some(id) if id == replayed => None,
            _ => Some((recorded.map(str::to_string), replayed.clone())),
        }
    }

    /// Feed a recorded answer given the replay's id for its question.
    fn translated(
        &mut self,
        frame: &Frame,
        recorded: Option<String>,
        replayed: &str,
        sink: &mut Sink<'_>,
    ) {
        match (frame, recorded) {
            // The recorded line, with the replay's id for the recorded one
            // (quoted, so no other text matches).
            (Frame::Line { line, .. }, Some(recorded)) => {
                let line = line.replace(&format!("\"{recorded}\""), &format!("\"{replayed}\""));
                self.feed_line(&line, sink);
            }
            // An answer naming its call, not a question: given the
            // replay's id for the question about that call.
            (Frame::Line { line, .. }, None) => {
                let mut whole = serde_json::from_str::<Value>(line).unwrap_or(Value::Null);
                whole["permissionID"] = json!(replayed);
                self.feed(&whole, sink);
            }
            (Frame::Built(value), _) => {
                let mut value = value.clone();
                value["permissionID"] = json!(replayed);
                self.feed(&value, sink);
            }
        }
    }

    /// Feed one frame as the next input line, then answer what it asked.
    /// A frame is handed over as it is; one that is not a frame as it is
    /// goes as its text, so that the broker refuses it as it would the line.
    fn feed(&mut self, frame: &Value, sink: &mut Sink<'_>) {
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
    fn feed_line(&mut self, line: &str, sink: &mut Sink<'_>) {
        self.line.clear();
        self.line.extend_from_slice(line.as_bytes());
        self.feed_buffer(sink);
    }

    /// Feed the line held in `self.line`, then answer what it asked.
    fn feed_buffer(&mut self, sink: &mut Sink<'_>) {
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
    fn step(&mut self, input: Input<'_>, sink: &mut Sink<'_>) {
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
                    if let Some(outcome) = self.outcomes.get(&key).cloned() {
                        self.respond(
                            &request.permission_id,
                            &outcome,
                            &mut answers,
                            &mut unanswerable,
                        );
                    }
                    self.asked.insert(key, request.permission_id.clone());
                }
                ServerFrame::Decision(decision)
                    if !self.asked.is_empty() || !self.outcomes.is_empty() =>
                {
                    let key = (decision.session_id.clone(), decision.call_id.clone());
                    self.asked.remove(&key);
                    self.outcomes.remove(&key);
                }
                _ => {}
            }
        }
        self.out = out;
        self.answer(answers, unanswerable, sink);
    }

    /// Give the answers, then end the questions that have none.
    fn answer(
        &mut self,
        answers: Vec<Value>,
        unanswerable: Vec<Input<'static>>,
        sink: &mut Sink<'_>,
    ) {
        for answer in answers {
            self.feed(&answer, sink);
        }
        for input in unanswerable {
            self.step(input, sink);
        }
    }

    /// What the recorded `outcome` makes of the question `permission_id`:
    /// an answer to feed, or an input ending it without one (counted).
    fn respond(
        &mut self,
        permission_id: &str,
        outcome: &Outcome,
        answers: &mut Vec<Value>,
        unanswerable: &mut Vec<Input<'static>>,
    ) {
        match outcome {
            Outcome::Answered(_) => self.notes.recorded += 1,
            Outcome::Refused(said) => {
                self.notes.refusals += 1;
                unanswerable.push(Input::NoAnswer {
                    permission_id: permission_id.to_string(),
                    reason: match said {
                        Some(said) => format!("the recording says the call was refused: {said}"),
                        None => "the recording says the call was refused".to_string(),
                    },
                });
            }
            Outcome::Ran => self.notes.inferred += 1,
            Outcome::Allowed(by) => {
                self.notes.unanswered += 1;
                unanswerable.push(Input::NoAnswer {
                    permission_id: permission_id.to_string(),
                    reason: format!("the recording holds no answer to this question: {by}"),
                });
            }
        }
        answers.extend(answer(permission_id, outcome));
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
