//! The reading side of a replay, on a thread of its own: the files read
//! line by line, each format's reader, the [`Window`], and each call
//! decoded and judged as far as the policy alone goes
//! ([`Decoded::prepare`], the part of a decision that needs no session),
//! while the replaying thread feeds the broker what came before. What it
//! finds goes to the replaying thread as [`Step`]s, in batches, in the
//! order a single thread would have taken them: the replay is the same,
//! byte for byte, only sooner.
//!
//! The batches travel on a bounded channel ([`BATCHES`] in flight) and
//! come back empty to be filled again, so the reading side is never more
//! than a few thousand lines ahead and memory stays flat.
//!
//! The work is shared out as the two threads keep up: while the replaying
//! thread has batches waiting, the reading thread decodes and prepares
//! each call; when it has none (it has taken every batch sent), calls go
//! as they were recorded and the broker decodes and judges them whole, as
//! it would without this thread. Two other shares were measured and were
//! slower (docs/replay.md): counting a batch until it is replayed (the
//! reading thread then prepared nearly everything and became the slower
//! one), and decoding every call here whoever prepares it. Either way a call is judged the same (a
//! prepared call is judged by the same policy code, see
//! [`Decoded::prepare`]); only which thread does the work changes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;

use toolgate_policy::Policy;

use super::event::{Event, Frame, Reader};
use super::record::{CallKey, Outcome, ReadFrom};
use super::source::Source;
use super::window::{Wait, Window};
use super::Format;
use crate::broker::Decoded;

/// How many steps a batch holds at most.
pub const BATCH: usize = 1024;

/// How many batches may be in flight between the threads.
pub const BATCHES: usize = 4;

/// One thing the replaying thread does, in the recording's order.
pub enum Step {
    /// A line was read (the reports count lines).
    Line,
    /// A frame leaves the window: feed it to every replay. `done` is its
    /// call when no other frame of that call is left in the window. For a
    /// `tool_call`, `decoded` holds it decoded and prepared under each
    /// replay's policy (`None` where it is fed as it was recorded: a line
    /// that does not decode is refused by the broker as it would be live).
    Feed {
        /// The frame.
        frame: Frame,
        /// Its call, when it is the call's last frame here.
        done: Option<CallKey>,
        /// Per replay: the frame decoded and prepared, for a `tool_call`.
        decoded: Vec<Option<Decoded>>,
    },
    /// What became of a call still in the window (fed later).
    Ahead(CallKey, Outcome),
    /// What became of a call already fed.
    Late(CallKey, Outcome),
    /// When a call still in the window was made.
    Time(CallKey, u64),
    /// The decision the recording holds for a call; whether the call is
    /// still in the window.
    Recorded(CallKey, String, String, bool),
    /// A recorded permission id and its call.
    Question(String, CallKey),
    /// What could not be read, one sentence.
    Warning(String),
}

/// Why a recording could not be read to the end: the file and what failed.
pub struct Unread {
    /// The file's name.
    pub name: String,
    /// What failed.
    pub error: String,
}

/// The batches sent and not yet taken by the replaying thread, which
/// counts them down as it takes them.
#[derive(Debug, Default)]
pub struct InFlight(AtomicUsize);

impl InFlight {
    /// The replaying thread took a batch.
    pub fn taken(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The reading thread's work: read `group` (files of `format`) and send
/// its steps on `to`, in batches taken back from `back` when the replaying
/// thread is done with them. A `tool_call` is prepared under each of
/// `policies` (one per replay) while `in_flight` says the replaying
/// thread has work waiting. Returns where the outcomes were read from, or
/// what could not be read. Stops early, without error, when the
/// replaying thread is gone.
pub fn read(
    group: &mut [Source],
    format: Format,
    policies: &[Arc<Policy>],
    to: SyncSender<Vec<Step>>,
    back: Receiver<Vec<Step>>,
    in_flight: &InFlight,
) -> Result<ReadFrom, Unread> {
    let mut reading = Reading {
        window: Window::new(Wait::of(format)),
        policies,
        in_flight,
        batch: Vec::with_capacity(BATCH),
        to: &to,
        back: &back,
        gone: false,
    };
    let mut reader = Reader::new(format);
    let mut events = Vec::new();
    for source in group.iter_mut() {
        let name = source.name.clone();
        let read = source.lines(|number, line| {
            if reading.gone {
                return;
            }
            reader.line(&name, number, line, &mut events);
            reading.push(Step::Line);
            reading.take(&mut events);
            reading.release(false);
        });
        if let Err(error) = read {
            reading.send();
            return Err(Unread { name, error });
        }
    }
    reader.finish(&mut events);
    reading.take(&mut events);
    reading.release(true);
    reading.send();
    Ok(reader.read_from())
}

/// The reading thread's state.
struct Reading<'a> {
    window: Window,
    policies: &'a [Arc<Policy>],
    in_flight: &'a InFlight,
    batch: Vec<Step>,
    to: &'a SyncSender<Vec<Step>>,
    back: &'a Receiver<Vec<Step>>,
    /// The replaying thread is gone: read no further.
    gone: bool,
}

impl Reading<'_> {
    /// Add a step to the batch, sending it when full.
    fn push(&mut self, step: Step) {
        self.batch.push(step);
        if self.batch.len() >= BATCH {
            self.send();
        }
    }

    /// Send the batch (if it holds anything), and take an empty one back.
    fn send(&mut self) {
        if self.batch.is_empty() || self.gone {
            return;
        }
        let next = self
            .back
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH));
        let full = std::mem::replace(&mut self.batch, next);
        self.in_flight.0.fetch_add(1, Ordering::Relaxed);
        if self.to.send(full).is_err() {
            self.gone = true;
        }
    }

    /// Take in what the lines read said: frames wait in the window, what
    /// the recording says of a call goes to the replays (ahead of the call
    /// when it is still in the window) and the reports.
    fn take(&mut self, events: &mut Vec<Event>) {
        for event in events.drain(..) {
            let step = match event {
                Event::Frame(frame) => {
                    self.window.push(frame);
                    continue;
                }
                Event::Outcome(key, outcome) => {
                    if self.window.holds(&key) {
                        self.window.known(&key, Wait::Outcome);
                        Step::Ahead(key, outcome)
                    } else {
                        Step::Late(key, outcome)
                    }
                }
                Event::Time(key, time) => {
                    if !self.window.holds(&key) {
                        continue;
                    }
                    self.window.known(&key, Wait::Time);
                    Step::Time(key, time)
                }
                Event::Recorded(key, verdict, reason) => {
                    let ahead = self.window.holds(&key);
                    Step::Recorded(key, verdict, reason, ahead)
                }
                Event::Question(id, key) => Step::Question(id, key),
                Event::Warning(warning) => Step::Warning(warning),
            };
            self.push(step);
        }
    }

    /// Every frame of the window that need not wait (all of them at the
    /// `end`), with its calls prepared.
    fn release(&mut self, end: bool) {
        while let Some((frame, done)) = self.window.next(end) {
            // The replaying thread waits for this batch: it judges the
            // call whole itself rather than wait longer.
            let waiting = self.in_flight.0.load(Ordering::Relaxed) == 0;
            let decoded = match frame.kind() {
                Some("tool_call") if !waiting => self.prepared(&frame),
                _ => Vec::new(),
            };
            self.push(Step::Feed {
                frame,
                done,
                decoded,
            });
        }
    }

    /// A `tool_call` decoded and prepared under each replay's policy; none
    /// when it does not decode (the broker refuses its text as it would
    /// live).
    fn prepared(&self, frame: &Frame) -> Vec<Option<Decoded>> {
        self.policies
            .iter()
            .map(|policy| {
                let decoded = match frame {
                    Frame::Line { line, .. } => {
                        toolgate_protocol::decode_line(line.as_bytes(), 0).ok()
                    }
                    Frame::Built(value) => toolgate_protocol::decode_value(value).ok(),
                };
                decoded.map(|frame| {
                    let mut decoded = Decoded::frame(frame);
                    decoded.prepare(policy);
                    decoded
                })
            })
            .collect()
    }
}
