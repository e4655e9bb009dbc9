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
//! come back to be emptied here and filled again, so the reading side is
//! never more than a few thousand lines ahead, memory stays flat, and
//! what this thread allocated for a step is freed on this thread.
//!
//! The work is shared out as the two threads keep up: while the replaying
//! thread has batches waiting, the reading thread decodes and prepares
//! each call; when it has none (it has taken every batch sent), a call of
//! a shape not met yet in the batch goes as recorded and the broker
//! decodes and judges it whole, as it would without this thread. A call
//! of a shape met before in the batch (`Seen`) is never prepared again.
//! Either way a call is judged the same (a prepared call is judged by the
//! same policy code, see [`Decoded::prepare`]); only which thread does the
//! work changes.

use std::collections::HashMap;
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
        /// Per replay: the frame decoded and prepared, for a `tool_call`:
        /// the call itself, or a call of the same shape to be copied under
        /// this frame's `callID` ([`Prepared`]).
        decoded: Vec<Option<Prepared>>,
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

/// A `tool_call` the reading thread decoded and prepared.
///
/// Every call of a shape (`Seen`) is handed over as the one decoded
/// call of that shape, shared, and the replaying thread makes its own copy
/// under the frame's `callID` ([`Prepared::take`]): what the replaying
/// thread frees it allocated itself. Memory one thread allocates and the
/// other frees costs both of them far more than the copy (measured: the
/// allocator's cross-thread frees were a third of the replaying thread's
/// time, see docs/replay.md).
pub enum Prepared {
    /// A call of the shape, to copy.
    Like(Arc<Decoded>),
}

impl Prepared {
    /// The call for the frame whose `callID` is `call`.
    pub fn take(&self, call: &str) -> Option<Decoded> {
        match self {
            Prepared::Like(shape) => shape.same_call(call),
        }
    }
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
        seen: Seen::default(),
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
    /// The calls of this batch already prepared.
    seen: Seen,
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
        // A batch comes back with what was replayed still in it, to be
        // freed here, where it was allocated.
        let next = match self.back.try_recv() {
            Ok(mut spent) => {
                spent.clear();
                spent
            }
            Err(_) => Vec::with_capacity(BATCH),
        };
        let full = std::mem::replace(&mut self.batch, next);
        self.seen.calls.clear();
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
            let decoded = match frame.kind() {
                Some("tool_call") => self.prepared(&frame),
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
    /// live), or when the replaying thread waits for this batch and the
    /// call is not one of [`Seen`]'s (it judges the call whole itself
    /// rather than wait longer).
    fn prepared(&mut self, frame: &Frame) -> Vec<Option<Prepared>> {
        let shape = match frame {
            Frame::Line { shape, .. } => *shape,
            Frame::Built(_) => None,
        };
        if let Some(known) = shape.and_then(|shape| self.seen.calls.get(&shape)) {
            return known
                .iter()
                .map(|decoded| decoded.clone().map(Prepared::Like))
                .collect();
        }
        if self.in_flight.0.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let decoded: Vec<Option<Arc<Decoded>>> = self
            .policies
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
                    Arc::new(decoded)
                })
            })
            .collect();
        let prepared = decoded
            .iter()
            .map(|decoded| decoded.clone().map(Prepared::Like))
            .collect();
        if let Some(shape) = shape {
            self.seen.calls.insert(shape, decoded);
        }
        prepared
    }
}

/// The calls of the batch being filled that were decoded and prepared,
/// by their shape (the frames reader's number for a `tool_call` line
/// without its `callID`): a recorded line that differs from one of them
/// only in its `callID` is that call again (decoding is pure,
/// and a call is prepared from its tool, input and working directory
/// alone), so it is given the same judgement under its own id rather than
/// decoded and prepared again. Agents repeat themselves (the same file
/// read, `git status` again), and a recording repeats them.
///
/// Kept for one batch ([`BATCH`] steps): what a call's preparation read
/// of the disk is then no older than the batches the reading thread is
/// ahead anyway, and a link that changed since is seen all the same (the
/// preparation carries the disk epoch it saw, see
/// [`Decoded::confirm_prepared`]).
#[derive(Default)]
struct Seen {
    /// By the number of their shape ([`Frame::Line`]'s `shape`).
    calls: HashMap<u64, Vec<Option<Arc<Decoded>>>, foldhash::fast::RandomState>,
}
