//! The JSON-lines transport. The thread that reads the input also decodes
//! it; what it decoded is decided and answered by a worker thread, while the
//! reader reads and decodes the next batch, so a flood keeps two CPUs busy.
//! A few lines with nothing handed to the worker still unanswered (an
//! agent's lone call) are decided on the reading thread itself: a lone call
//! crosses no thread boundary inside the broker. Answers go out in the order
//! of the lines, since the reader decides a batch itself only when every
//! batch it handed over has been answered. A further thread wakes up only to
//! end questions whose deadline passed. The broker and the one output writer
//! sit together behind a mutex, so frames from every thread go out whole and
//! in order. With [`run_controlled`], one more thread acts on signals
//! ([`Control`]) even while the reader is blocked on its input.
//!
//! Every complete line is decided and its frames flushed without waiting for
//! more input: a partial next line never holds back the decisions of the
//! lines before it. After a batch holding a `shutdown` frame, the reader
//! reads nothing more until that batch is answered, so a `shutdown` ends the
//! run even while the input stays open. The frame limit counts a line
//! without its `\n` or `\r\n`; a UTF-8 byte order mark is skipped at the
//! very start of the input.
//!
//! Generic over `std::io::Read`/`Write`, so tests can run it over in-memory
//! buffers and the binary over stdin/stdout. Nothing here needs an async
//! runtime: one peer, blocking reads, a few threads that mostly sleep.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SendError, Sender, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Duration;

use toolgate_policy::Policy;
use toolgate_protocol::ErrorCode;

use crate::approver::InProcess;
use crate::broker::{Broker, ConnId, Decoded, Input, Output};

/// One line from the reader, or what happened instead.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<B = Vec<u8>> {
    /// A complete line without its `\n`.
    Data(B),
    /// A line longer than the limit; it was skipped without being buffered
    /// whole. Holds what could be read in its first `max` bytes.
    TooLarge(Start),
}

/// The ids read in the first `max` bytes of a line too long to keep: a
/// `tool_call` whose `callID` was read is denied rather than left waiting;
/// any other line gets an `error` frame carrying the ids that were read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Start {
    /// The line began a `tool_call`.
    pub tool_call: bool,
    /// Its `callID`.
    pub call_id: Option<String>,
    /// Its `sessionID`.
    pub session_id: Option<String>,
    /// Its `permissionID` (or `permission_id`).
    pub permission_id: Option<String>,
}

impl Start {
    /// The `(sessionID, callID)` of the `tool_call` the line began with, when
    /// its `callID` was read (the session is `main` when none was read).
    pub fn call(&self) -> Option<(String, String)> {
        if !self.tool_call {
            return None;
        }
        let session = self
            .session_id
            .as_deref()
            .unwrap_or(toolgate_protocol::DEFAULT_SESSION);
        Some((session.to_string(), self.call_id.clone()?))
    }
}

/// The most lines the reader hands over at once: a flood comes in batches
/// this large, and each batch costs the worker a wake-up, a lock and a write.
const BATCH: usize = 1024;

/// The input buffer: large enough for a batch of [`BATCH`] typical lines.
const READ_BUFFER: usize = 1 << 18;

/// A line read into a shared buffer: where its bytes are, or what happened
/// instead.
enum Piece {
    Data(std::ops::Range<usize>),
    TooLarge(Start),
}

/// The lines a transport read in one go, their bytes end to end in one
/// buffer that is kept from batch to batch: a line costs no allocation.
#[derive(Default)]
pub struct Batch {
    bytes: Vec<u8>,
    pieces: Vec<Piece>,
}

impl Batch {
    /// Read one more line of at most `max` bytes; `false` at end of input.
    /// A longer line is consumed and discarded chunk by chunk, never held
    /// whole: what its first `max` bytes said is kept ([`Line::TooLarge`]).
    pub fn read<R: BufRead>(&mut self, reader: &mut R, max: usize) -> io::Result<bool> {
        match read_into(reader, max, &mut self.bytes)? {
            Some(piece) => {
                self.pieces.push(piece);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// How many lines are held.
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    /// Whether no line is held.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Hand every line held to `each`, in order, and forget them.
    pub fn drain(&mut self, mut each: impl FnMut(Line<&[u8]>)) {
        for piece in self.pieces.drain(..) {
            each(match piece {
                Piece::Data(range) => Line::Data(&self.bytes[range]),
                Piece::TooLarge(start) => Line::TooLarge(start),
            });
        }
        self.bytes.clear();
    }
}

/// Read one line onto the end of `bytes` (see [`Batch::read`]).
fn read_into<R: BufRead>(
    reader: &mut R,
    max: usize,
    bytes: &mut Vec<u8>,
) -> io::Result<Option<Piece>> {
    let begin = bytes.len();
    let mut too_large = false;
    let mut call = Start::default();
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        if available.is_empty() {
            // End of input: a last line without `\n` still counts.
            return Ok(match (too_large, bytes.len() == begin) {
                (false, true) => None,
                _ => Some(finish_line(bytes, begin, too_large, call, max)),
            });
        }
        let (chunk, done) = match available.iter().position(|&byte| byte == b'\n') {
            Some(end) => (&available[..end], Some(end + 1)),
            None => (available, None),
        };
        if !too_large {
            let held = bytes.len() - begin;
            // One byte more than the limit may be held: the `\r` of a `\r\n`.
            if held + chunk.len() > max.saturating_add(1) {
                too_large = true;
                let room = max.saturating_sub(held).min(chunk.len());
                bytes.extend_from_slice(&chunk[..room]);
                call = call_of(&bytes[begin..]);
                bytes.truncate(begin);
            } else {
                bytes.extend_from_slice(chunk);
            }
        }
        let consumed = done.unwrap_or(available.len());
        reader.consume(consumed);
        if done.is_some() {
            return Ok(Some(finish_line(bytes, begin, too_large, call, max)));
        }
    }
}

fn finish_line(
    bytes: &mut Vec<u8>,
    begin: usize,
    too_large: bool,
    call: Start,
    max: usize,
) -> Piece {
    let line = &bytes[begin..];
    let frame = line.strip_suffix(b"\r").map_or(line.len(), <[u8]>::len);
    if too_large {
        Piece::TooLarge(call)
    } else if frame > max {
        let start = call_of(&line[..max.min(line.len())]);
        bytes.truncate(begin);
        Piece::TooLarge(start)
    } else {
        Piece::Data(begin..bytes.len())
    }
}

/// The ids the first frame of a line (or of its beginning) gives.
fn call_of(start: &[u8]) -> Start {
    let found = toolgate_protocol::scan::scan(start);
    let Some(head) = found.heads.first() else {
        return Start::default();
    };
    Start {
        tool_call: head.is_tool_call(),
        call_id: head.call_id().map(str::to_string),
        session_id: head
            .session_id
            .as_ref()
            .and_then(toolgate_protocol::scan::Field::text)
            .map(str::to_string),
        permission_id: head.permission_id().map(str::to_string),
    }
}

/// The UTF-8 byte order mark, skipped at the very start of the input only.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Decode one line (1-based `number`) as the broker reads it. A UTF-8 byte
/// order mark at the start of the first line is skipped; one anywhere else
/// makes its line malformed. Pure: any thread may decode.
pub fn decode(line: Line<&[u8]>, number: u64, max_frame_bytes: usize) -> Decoded {
    match line {
        Line::Data(bytes) => {
            let bytes = match number {
                1 => bytes.strip_prefix(BOM).unwrap_or(bytes),
                _ => bytes,
            };
            Decoded::line(bytes, number)
        }
        Line::TooLarge(start) => Decoded::unreadable(too_large(start, max_frame_bytes)),
    }
}

/// Hand one line (1-based `number`) from connection `conn` to the broker, as
/// the transport does ([`decode`], then the broker).
pub fn handle_line(
    broker: &mut Broker,
    conn: ConnId,
    line: Line<&[u8]>,
    number: u64,
    max_frame_bytes: usize,
    out: &mut Vec<Output>,
) {
    broker.step(
        Input::Decoded {
            conn,
            decoded: decode(line, number, max_frame_bytes),
            number,
        },
        out,
    );
}

/// What a line longer than the limit gets: a call is denied by its id; any
/// other line gets an error frame with the ids its beginning gave.
pub fn too_large(start: Start, max_frame_bytes: usize) -> toolgate_protocol::DecodeError {
    let tool_call = start.call().is_some();
    let message = if tool_call {
        format!("the frame is longer than the limit of {max_frame_bytes} bytes and was discarded")
    } else {
        format!(
            "the line is longer than the frame limit of {max_frame_bytes} bytes and was discarded"
        )
    };
    toolgate_protocol::DecodeError {
        code: ErrorCode::FrameTooLarge,
        message,
        call_id: start.call_id,
        permission_id: start.permission_id,
        session_id: start.session_id,
        tool_call,
        others: Box::default(),
    }
}

/// The broker, the output and what is waiting to be written.
struct Shared<W: Write> {
    broker: Broker,
    /// Written one whole batch at a time (one `write` per batch), so it is
    /// not wrapped in a `BufWriter`: that would copy every byte once more.
    writer: W,
    /// The batch's frames as JSON lines; kept to reuse its allocation.
    encoded: Vec<u8>,
    frames: Vec<Output>,
    /// Set when the input ended or `shutdown` was handled: the deadline thread stops.
    done: bool,
    /// The first write error; the run reports it.
    failed: Option<io::Error>,
    /// `serve --approver`: the in-process approver, connection [`APPROVER`].
    approver: Option<InProcess>,
}

impl<W: Write> Shared<W> {
    /// Encode the frames said so far, when they are all for stdout (no
    /// in-process approver), and drop them: a step's frames are encoded
    /// while they are fresh in the cache, not at the end of a batch of a
    /// thousand. Nothing is written until [`Shared::flush_frames`].
    fn encode_frames(&mut self) {
        if self.approver.is_none() {
            encode_frames(&mut self.frames, &mut self.encoded);
        }
    }

    fn flush_frames(&mut self) {
        // Saved before reported: what these frames report is synced first.
        self.broker.commit();
        if let Some(approver) = &self.approver {
            // What is addressed to the in-process approver is its own.
            self.frames.retain(|output| {
                if output.to.conn() == APPROVER {
                    approver.deliver(&output.frame);
                    false
                } else {
                    true
                }
            });
        }
        encode_frames(&mut self.frames, &mut self.encoded);
        if let Err(err) = write_encoded(&mut self.writer, &mut self.encoded) {
            if self.failed.is_none() {
                self.failed = Some(err);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the broker half-updated in a
    // way that matters more than stopping would; keep serving.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the signal thread asks of a running transport.
pub enum Control {
    /// SIGTERM or SIGINT (named here): deny every pending call (source
    /// `shutdown`, after `permission_resolved` for its question), flush,
    /// write one line on stderr and exit the process with status 0. Ignored
    /// once the broker stopped, so a second signal writes nothing more.
    Stop(&'static str),
    /// SIGHUP with a policy loaded anew: judge from now on under it, and
    /// decide every pending call whose answer is no longer "ask".
    Reload {
        /// The new policy.
        policy: Arc<Policy>,
        /// Its ask timeout, in milliseconds (0 waits forever).
        ask_timeout_ms: u64,
        /// Where it came from, for the line on stderr.
        source: String,
    },
    /// Sent by the transport itself when it has finished, so that the
    /// control thread ends at once rather than at its next look.
    Done,
}

/// Serve one client: write `ready`, then answer frames until end of input or
/// `shutdown`; deny what is still pending, flush, return.
pub fn run<R, W>(input: R, output: W, broker: Broker, max_frame_bytes: usize) -> io::Result<()>
where
    R: Read,
    W: Write + Send,
{
    run_controlled(input, output, broker, max_frame_bytes, None)
}

/// [`run`], also acting on what arrives on `control` (signals) while the
/// reader may be blocked on its input. `control` is the channel's receiving
/// end with a sender of the same channel, on which the transport says
/// [`Control::Done`] when it has finished.
pub fn run_controlled<R, W>(
    input: R,
    output: W,
    broker: Broker,
    max_frame_bytes: usize,
    control: Option<(Sender<Control>, Receiver<Control>)>,
) -> io::Result<()>
where
    R: Read,
    W: Write + Send,
{
    run_with_approver(input, output, broker, max_frame_bytes, control, None)
}

/// The connection of the in-process approver (`serve --approver`).
pub const APPROVER: ConnId = 1;

/// [`run_controlled`] with an in-process approver (`serve --approver`): a
/// second connection, [`APPROVER`], that says `hello` with role approver
/// before stdin is read, so every question (and its end) is addressed to it
/// and never to stdout. Each answer it sends on the channel is a line of
/// that connection: the decision it makes goes to the caller on stdout,
/// anything else the broker says to the approver (an error) is logged.
pub fn run_with_approver<R, W>(
    input: R,
    output: W,
    broker: Broker,
    max_frame_bytes: usize,
    control: Option<(Sender<Control>, Receiver<Control>)>,
    approver: Option<(
        InProcess,
        &'static str,
        Receiver<toolgate_protocol::PermissionResponse>,
    )>,
) -> io::Result<()>
where
    R: Read,
    W: Write + Send,
{
    let mut frames = Vec::new();
    let mut broker = broker;
    broker.step(Input::Opened { conn: STDIO }, &mut frames);
    let (approver, answers) = match approver {
        Some((approver, name, answers)) => {
            // The agent's pipe never answers: only this approver does.
            broker.reserve_approver(APPROVER);
            broker.step(Input::Opened { conn: APPROVER }, &mut frames);
            let hello = serde_json::json!({"type":"hello","role":"approver","client":name});
            let hello = hello.to_string();
            broker.step(
                Input::Line {
                    conn: APPROVER,
                    line: hello.as_bytes(),
                    number: 1,
                },
                &mut frames,
            );
            (Some(approver), Some(answers))
        }
        None => (None, None),
    };
    let mut shared = Shared {
        frames,
        broker,
        writer: output,
        encoded: Vec::new(),
        done: false,
        failed: None,
        approver,
    };
    shared.flush_frames();
    let flow = Flow::new(shared.broker.policy().clone());
    let state = Mutex::new(shared);
    let wake = Condvar::new();

    std::thread::scope(|scope| {
        scope.spawn(|| expire_deadlines(&state, &wake));
        if let Some(answers) = answers {
            let (state, wake) = (&state, &wake);
            scope.spawn(move || take_answers(state, wake, &answers));
        }
        let finished = match control {
            Some((finished, control)) => {
                let (state, wake, flow) = (&state, &wake, &flow);
                scope.spawn(move || obey(state, wake, flow, &control));
                Some(finished)
            }
            None => None,
        };
        let (to_worker, batches) = std::sync::mpsc::sync_channel::<Decodeds>(QUEUED);
        let (spare, spares) = std::sync::mpsc::channel::<Decodeds>();
        {
            let (state, wake, flow) = (&state, &wake, &flow);
            let spawned = std::thread::Builder::new()
                .name("toolgate-worker".into())
                .spawn_scoped(scope, move || work(state, wake, flow, &batches, &spare));
            if let Err(err) = spawned {
                // The reader then answers every batch itself (`send` fails).
                flow.gone.store(true, Ordering::SeqCst);
                tracing::warn!(%err, "no worker thread; deciding on the reading thread");
            }
        }
        let mut reader = BufReader::with_capacity(READ_BUFFER, input);
        let mut number: u64 = 0;
        let mut batch = Batch::default();
        loop {
            // Read outside the lock: a blocked read must not delay deadlines.
            let mut ended = false;
            loop {
                // Stopped by a signal: what was read is answered (denied),
                // nothing more is read; the process is about to end.
                if flow.stopped.load(Ordering::SeqCst) {
                    ended = true;
                    break;
                }
                match batch.read(&mut reader, max_frame_bytes) {
                    Ok(true) => flow.holding.store(true, Ordering::SeqCst),
                    Ok(false) => ended = true,
                    Err(err) => {
                        tracing::warn!(%err, "reading input failed; treating it as end of input");
                        ended = true;
                    }
                }
                // Take the complete lines already buffered in one go; never
                // wait for more while a decided frame is unwritten (a partial
                // line in the buffer would make `Batch::read` block).
                if ended || batch.len() >= BATCH || !reader.buffer().contains(&b'\n') {
                    break;
                }
            }
            // Decoded here, while the worker decides the batch before.
            let mut lines = spares
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(BATCH));
            batch.drain(|line| {
                number += 1;
                lines.push((number, decode(line, number, max_frame_bytes)));
            });
            // After a `shutdown` the broker may be done: find out before
            // reading on, since more input may never come.
            let last = ended || lines.iter().any(|(_, decoded)| decoded.is_shutdown());
            // A few lines with nothing handed over ahead of them (an agent's
            // lone call) are answered on this thread: no hand-over to wait
            // for. So is the last batch, once all before it are answered.
            let ship = !last
                && !flow.gone.load(Ordering::SeqCst)
                && (lines.len() > INLINE || !flow.idle());
            let kept = if ship {
                flow.in_flight.fetch_add(1, Ordering::SeqCst);
                flow.holding.store(false, Ordering::SeqCst);
                match hand_over(&to_worker, lines, &flow) {
                    Ok(()) => None,
                    Err(returned) => {
                        // The worker is gone (it never is, short of a bug):
                        // answered here, as if it had never been.
                        flow.holding.store(true, Ordering::SeqCst);
                        // The worker may have zeroed the count as it ended.
                        let _ =
                            flow.in_flight
                                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                                    n.checked_sub(1)
                                });
                        Some(returned.0)
                    }
                }
            } else {
                Some(lines)
            };
            let done = match kept {
                None => false,
                Some(mut lines) => {
                    flow.wait_drained(&state);
                    answer(&state, &wake, &flow, &mut lines, ended, false)
                }
            };
            if done {
                break;
            }
        }
        drop(to_worker);
        if let Some(finished) = finished {
            // The control thread may be gone already (it ends on its own
            // once it sees the transport done); nothing is lost then.
            let _ = finished.send(Control::Done);
        }
    });
    let mut shared = state.into_inner().unwrap_or_else(PoisonError::into_inner);
    if let Some(approver) = &shared.approver {
        approver.stop();
    }
    // Nothing in force may be lost quietly: a change a failed write left
    // unsaved is written now, or the run ends with what was lost.
    match (shared.broker.finish_saving(), shared.failed) {
        (Ok(()), None) => Ok(()),
        (Ok(()), Some(err)) => Err(err),
        (Err(lost), failed) => {
            if let Some(err) = failed {
                tracing::warn!("the output failed: {err}");
            }
            Err(io::Error::other(lost))
        }
    }
}

/// A batch of decoded lines, each with its number.
type Decodeds = Vec<(u64, Decoded)>;

/// How many calls the worker prepares and confirms together before it
/// decides them (see [`answer`]).
const CONFIRMED: usize = 32;

/// Hand a batch to the worker. While the worker is too busy to take it,
/// the reader prepares the batch's calls (the part of their judgement the
/// policy decides alone, [`Decoded::prepare`]) instead of waiting: in a
/// flood the two threads share the deciding by how busy each is, whatever
/// the mix of calls.
fn hand_over(
    to_worker: &SyncSender<Decodeds>,
    mut lines: Decodeds,
    flow: &Flow,
) -> Result<(), SendError<Decodeds>> {
    let mut policy: Option<Arc<Policy>> = None;
    let mut next = 0;
    loop {
        match to_worker.try_send(lines) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Disconnected(returned)) => return Err(SendError(returned)),
            Err(TrySendError::Full(returned)) => lines = returned,
        }
        // The next call not prepared yet, if any.
        let policy = policy.get_or_insert_with(|| {
            // What the disk says about repositories is asked afresh for
            // these lines (see `repo::next_batch`).
            crate::repo::next_batch();
            lock(&flow.policy).clone()
        });
        let mut prepared = false;
        while next < lines.len() && !prepared {
            prepared = lines[next].1.prepare(policy);
            next += 1;
        }
        if !prepared || flow.stopped.load(Ordering::SeqCst) {
            return to_worker.send(lines);
        }
    }
}

/// At most this many lines read together, with nothing handed to the worker
/// still unanswered, are answered on the reader's thread: a lone call never
/// waits for another thread to wake up.
const INLINE: usize = 8;

/// How many decoded batches may wait for the worker; then the reader waits,
/// so a flood holds a bounded amount of memory.
const QUEUED: usize = 2;

/// The lines between the reader and the worker. The reader reads and decodes
/// a batch while the worker decides the one before, so a flood uses two
/// CPUs; the order of the answers is the order of the lines, because the
/// reader answers a batch itself only when nothing it handed over is still
/// unanswered.
struct Flow {
    /// Batches handed to the worker and not yet answered (lowered under the
    /// broker's lock, after their frames were written).
    in_flight: AtomicUsize,
    /// Signalled (under the broker's lock) when `in_flight` reaches zero.
    drained: Condvar,
    /// The worker has ended: the reader answers everything itself.
    gone: AtomicBool,
    /// The reader holds lines it has read but not handed over yet.
    holding: AtomicBool,
    /// The control thread wants the broker's lock: batches wait.
    paused: AtomicBool,
    /// A signal stopped the broker: the reader reads no more.
    stopped: AtomicBool,
    /// The policy the broker judges under, for the reader to prepare calls
    /// with (replaced when SIGHUP reloads it).
    policy: Mutex<Arc<Policy>>,
}

impl Flow {
    fn new(policy: Arc<Policy>) -> Flow {
        Flow {
            in_flight: AtomicUsize::new(0),
            drained: Condvar::new(),
            gone: AtomicBool::new(false),
            holding: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            policy: Mutex::new(policy),
        }
    }

    /// Nothing handed over is unanswered.
    fn idle(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) == 0
    }

    /// Wait until every batch handed over has been answered (or the worker
    /// is gone).
    fn wait_drained<W: Write>(&self, state: &Mutex<Shared<W>>) {
        if self.idle() {
            return;
        }
        let mut shared = lock(state);
        while !self.idle() && !self.gone.load(Ordering::SeqCst) {
            shared = self
                .drained
                .wait(shared)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The broker's lock for the control thread, when it can be had within
    /// `patience`. A flood keeps the worker taking the lock batch after
    /// batch, so the worker is held back before its next batch until the
    /// control thread has had its turn: a signal waits for one batch at
    /// most, not for the end of the flood.
    fn cut_in<'a, W: Write>(
        &self,
        state: &'a Mutex<Shared<W>>,
        patience: Duration,
    ) -> Option<MutexGuard<'a, Shared<W>>> {
        self.paused.store(true, Ordering::SeqCst);
        let guard = lock_within(state, patience);
        self.paused.store(false, Ordering::SeqCst);
        guard
    }

    /// Wait while the control thread is cutting in (see [`Flow::cut_in`]).
    fn give_way(&self) {
        while self.paused.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// No line read is still unanswered, with the broker's lock held.
    fn answered(&self) -> bool {
        !self.holding.load(Ordering::SeqCst) && self.idle()
    }
}

/// Marks the worker gone when it ends, however it ends.
struct Gone<'a>(&'a Flow);

impl Drop for Gone<'_> {
    fn drop(&mut self) {
        self.0.gone.store(true, Ordering::SeqCst);
        self.0.in_flight.store(0, Ordering::SeqCst);
        self.0.drained.notify_all();
    }
}

/// The worker: answer the batches the reader decoded, in order, until the
/// reader is done.
fn work<W: Write>(
    state: &Mutex<Shared<W>>,
    wake: &Condvar,
    flow: &Flow,
    batches: &Receiver<Decodeds>,
    spare: &Sender<Decodeds>,
) {
    let _gone = Gone(flow);
    for mut lines in batches {
        answer(state, wake, flow, &mut lines, false, true);
        // The reader fills it again; if the reader is gone it is dropped.
        let _ = spare.send(lines);
    }
}

/// Answer a batch of decoded lines under the broker's lock, stop the broker
/// at the end of input, and write what it said; `shipped` when the batch came
/// through the worker. Whether the transport is done.
fn answer<W: Write>(
    state: &Mutex<Shared<W>>,
    wake: &Condvar,
    flow: &Flow,
    lines: &mut Decodeds,
    ended: bool,
    shipped: bool,
) -> bool {
    flow.give_way();
    let mut shared = lock(state);
    // What the disk said about repositories holds for this batch only.
    crate::repo::next_batch();
    let deadline_before = shared.broker.next_deadline();
    // Every line read is handled, even after a `shutdown` frame or a
    // signal stopped the broker: a stopped broker denies the calls. The
    // batch is decided a group of [`CONFIRMED`] calls at a time: each call
    // of the group is prepared (most already are, by the reader) before any
    // is decided, and the disk's link answers they used are confirmed at
    // once (one look at each inotify queue, see `globs::confirm`); a call
    // prepared before a change was seen is judged again. A group is small
    // so that what its preparation made is still in this CPU's cache when
    // it is decided. The lines stay where they are until the broker takes
    // them.
    let policy = shared.broker.policy().clone();
    let mut start = 0;
    while start < lines.len() {
        let end = lines.len().min(start + CONFIRMED);
        for (_, decoded) in &mut lines[start..end] {
            decoded.prepare(&policy);
        }
        let epoch = crate::globs::confirm();
        for (number, slot) in &mut lines[start..end] {
            // Taken out where it lies: one move, not one into a group and
            // one out of it.
            let mut decoded = std::mem::replace(slot, Decoded::blank());
            decoded.confirm_prepared(epoch);
            let Shared { broker, frames, .. } = &mut *shared;
            broker.step(
                Input::Decoded {
                    conn: STDIO,
                    decoded,
                    number: *number,
                },
                frames,
            );
            shared.encode_frames();
        }
        start = end;
    }
    lines.clear();
    if ended && !shared.broker.stopped() {
        let Shared { broker, frames, .. } = &mut *shared;
        broker.step(Input::Stop, frames);
    }
    shared.flush_frames();
    // Only the last batch answered can free a reader waiting for all of
    // them: a condvar's notify is a system call even with nobody waiting.
    let drained = shipped && flow.in_flight.fetch_sub(1, Ordering::SeqCst) == 1;
    if !shipped {
        flow.holding.store(false, Ordering::SeqCst);
    }
    if shared.broker.stopped() {
        shared.done = true;
    }
    let done = shared.done;
    // Wake the deadline thread only when its sleep is no longer right.
    let rearm = done || shared.broker.next_deadline() != deadline_before;
    drop(shared);
    if drained {
        flow.drained.notify_all();
    }
    if rearm {
        wake.notify_one();
    }
    done
}

/// The in-process approver's answers, each a line of connection
/// [`APPROVER`] (numbered after its `hello`). Ends with the transport.
fn take_answers<W: Write>(
    state: &Mutex<Shared<W>>,
    wake: &Condvar,
    answers: &Receiver<toolgate_protocol::PermissionResponse>,
) {
    let mut number: u64 = 1;
    loop {
        let response = match answers.recv_timeout(Duration::from_millis(100)) {
            Ok(response) => response,
            Err(RecvTimeoutError::Timeout) => {
                if lock(state).done {
                    return;
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let frame = toolgate_protocol::ClientFrame::PermissionResponse(response);
        let Ok(line) = serde_json::to_vec(&frame) else {
            continue;
        };
        number += 1;
        let mut shared = lock(state);
        if shared.done {
            return;
        }
        let Shared { broker, frames, .. } = &mut *shared;
        broker.step(
            Input::Line {
                conn: APPROVER,
                line: &line,
                number,
            },
            frames,
        );
        shared.flush_frames();
        drop(shared);
        wake.notify_one();
    }
}

/// The deadline thread: sleep until the earliest deadline (or a change), then
/// end the questions whose time is up.
fn expire_deadlines<W: Write>(state: &Mutex<Shared<W>>, wake: &Condvar) {
    let mut shared = lock(state);
    loop {
        if shared.done {
            return;
        }
        match shared.broker.next_deadline() {
            None => {
                shared = wake.wait(shared).unwrap_or_else(PoisonError::into_inner);
            }
            Some(deadline) => {
                let now = shared.broker.now_ms();
                if deadline <= now {
                    let Shared { broker, frames, .. } = &mut *shared;
                    broker.step(Input::Tick, frames);
                    shared.flush_frames();
                } else {
                    let wait = Duration::from_millis(deadline - now);
                    shared = wake
                        .wait_timeout(shared, wait)
                        .map(|(guard, _)| guard)
                        .unwrap_or_else(|poisoned| poisoned.into_inner().0);
                }
            }
        }
    }
}

/// The control thread: act on signals until the transport is done.
fn obey<W: Write>(
    state: &Mutex<Shared<W>>,
    wake: &Condvar,
    flow: &Flow,
    control: &Receiver<Control>,
) {
    loop {
        let order = match control.recv_timeout(Duration::from_millis(200)) {
            Ok(order) => order,
            Err(RecvTimeoutError::Timeout) => {
                // Never wait for the lock here: a signal must find this thread free.
                if lock_within(state, Duration::ZERO).is_some_and(|shared| shared.done) {
                    return;
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut shared = match &order {
            Control::Stop(signal) => match flow.cut_in(state, STOP_PATIENCE) {
                Some(shared) => shared,
                None => {
                    // The other thread holds the broker while its output is
                    // blocked (nobody reads stdout): nothing more can be said.
                    crate::say!(
                        "toolgate: {signal} received: the output has been blocked for {} s; stopped without answering the pending calls",
                        STOP_PATIENCE.as_secs()
                    );
                    std::process::exit(1);
                }
            },
            Control::Done => return,
            Control::Reload { .. } => match flow.cut_in(state, STOP_PATIENCE) {
                Some(shared) => shared,
                None => {
                    // Do not stay stuck behind a blocked output: a later
                    // SIGTERM must still be heard.
                    crate::say!(
                        "toolgate: SIGHUP received: the output has been blocked for {} s; the policy was not reloaded",
                        STOP_PATIENCE.as_secs()
                    );
                    continue;
                }
            },
        };
        if shared.done || shared.broker.stopped() {
            // The input ended or `shutdown` came first: it answered everything.
            return;
        }
        match order {
            Control::Done => return,
            Control::Stop(signal) => {
                let pending = shared.broker.pending_count();
                let Shared { broker, frames, .. } = &mut *shared;
                broker.step(Input::Stop, frames);
                shared.flush_frames();
                shared.done = true;
                flow.stopped.store(true, Ordering::SeqCst);
                // A change a failed write left unsaved is written now, or
                // the exit says what was lost.
                let saved = shared.broker.finish_saving();
                let calls = if pending == 1 { "call" } else { "calls" };
                match &shared.failed {
                    None => crate::say!(
                        "toolgate: {signal} received: denied {pending} pending {calls} and stopped"
                    ),
                    Some(err) => crate::say!(
                        "toolgate: {signal} received: denied {pending} pending {calls}, but the output failed: {err}"
                    ),
                }
                // Lines the reader has read but not handed over yet get their
                // denials from the stopped broker; then end here, with the
                // lock held so that no other frame follows. The reader may be
                // blocked on its input for good, so it is not waited for.
                drop(shared);
                let status = match saved {
                    Ok(()) => 0,
                    Err(lost) => {
                        crate::say!("toolgate: error: {lost}");
                        1
                    }
                };
                let start = std::time::Instant::now();
                loop {
                    std::thread::sleep(Duration::from_millis(20));
                    let guard = flow.cut_in(state, STOP_PATIENCE);
                    if flow.answered() || start.elapsed() > STOP_PATIENCE {
                        std::process::exit(status);
                    }
                    drop(guard);
                }
            }
            Control::Reload {
                policy,
                ask_timeout_ms,
                source,
            } => {
                let before = shared.broker.pending_count();
                let deadline_before = shared.broker.next_deadline();
                let Shared { broker, frames, .. } = &mut *shared;
                broker.step(
                    Input::Reload {
                        policy,
                        ask_timeout_ms,
                    },
                    frames,
                );
                shared.flush_frames();
                *lock(&flow.policy) = shared.broker.policy().clone();
                let decided = before.saturating_sub(shared.broker.pending_count());
                crate::say!(
                    "toolgate: SIGHUP received: reloaded the policy ({source}); {decided} of {before} pending calls decided"
                );
                let rearm = shared.broker.next_deadline() != deadline_before;
                drop(shared);
                if rearm {
                    wake.notify_one();
                }
            }
        }
    }
}

/// How long a signal waits for the broker when another thread holds it
/// (writing to an output nobody reads): then SIGTERM/SIGINT end the process
/// anyway (status 1) and SIGHUP gives up its reload.
const STOP_PATIENCE: Duration = Duration::from_secs(5);

/// The lock, when it can be had within `patience`.
fn lock_within<T>(mutex: &Mutex<T>, patience: Duration) -> Option<MutexGuard<'_, T>> {
    let start = std::time::Instant::now();
    loop {
        match mutex.try_lock() {
            Ok(guard) => return Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => return Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) if start.elapsed() < patience => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(TryLockError::WouldBlock) => return None,
        }
    }
}

/// The one connection of the stdio transport.
const STDIO: ConnId = 0;

/// Append `frames` to `lines`, one JSON line each (stdio has one
/// connection: every output is for it), and forget them.
fn encode_frames(frames: &mut Vec<Output>, lines: &mut Vec<u8>) {
    for output in frames.drain(..) {
        // As on a socket: a frame that cannot be written is left out, never
        // the frames around it.
        if let Err(err) = toolgate_protocol::write_line(lines, &output.frame) {
            tracing::warn!(%err, "a frame could not be written");
        }
    }
}

/// Write and flush the encoded lines (one `write` for a batch), and empty
/// the buffer, written or not.
fn write_encoded<W: Write>(writer: &mut W, lines: &mut Vec<u8>) -> io::Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let written = writer.write_all(lines).and_then(|()| writer.flush());
    lines.clear();
    // A batch of unusually large frames is not kept (a full batch of
    // plan-mode denials, the largest usual frame, is about 1.2 MB).
    if lines.capacity() > 1 << 22 {
        *lines = Vec::new();
    }
    written
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic

    use super::*;

    /// The lines of `input`, read through a 4-byte buffer in one batch.
    fn lines(input: &[u8], max: usize) -> Vec<Line> {
        read_all(input, 4, max, usize::MAX)
    }

    /// The lines of `input`, handed over every `per_batch` lines.
    fn read_all(input: &[u8], capacity: usize, max: usize, per_batch: usize) -> Vec<Line> {
        let mut reader = BufReader::with_capacity(capacity, input);
        let mut batch = Batch::default();
        let mut out = Vec::new();
        while batch.read(&mut reader, max).unwrap() {
            if batch.len() == per_batch {
                batch.drain(|line| out.push(owned(line)));
            }
        }
        batch.drain(|line| out.push(owned(line)));
        assert!(batch.is_empty());
        out
    }

    #[test]
    fn splits_lines_and_skips_oversized_ones() {
        let got = lines(b"ab\n0123456789\n\ncd\r\nlast", 5);
        assert_eq!(
            got,
            vec![
                Line::Data(b"ab".to_vec()),
                Line::TooLarge(Start::default()),
                Line::Data(Vec::new()),
                Line::Data(b"cd\r".to_vec()),
                Line::Data(b"last".to_vec()),
            ]
        );
        assert_eq!(
            lines(b"0123456789", 5),
            vec![Line::TooLarge(Start::default())]
        );
        assert_eq!(lines(b"", 5), Vec::<Line>::new());
    }

    /// However many lines a batch holds and however the reader's buffer
    /// cuts the input, the same lines come out: bytes left from one batch
    /// never leak into the next.
    #[test]
    fn batches_of_any_size_read_the_same_lines() {
        let inputs: [&[u8]; 5] = [
            b"ab\n0123456789\n\ncd\r\nlast",
            b"1234\n12345\n123456\n1234\r\n12345\r\n123456\r\n12345\r",
            b"{\"type\":\"tool_call\",\"callID\":\"c1\",\"tool\":\"read\"}\nok\n",
            b"0123456789",
            b"",
        ];
        for input in inputs {
            for (capacity, max) in [(1, 5), (4, 5), (64, 5), (3, 40), (64, 40)] {
                let whole = read_all(input, capacity, max, usize::MAX);
                for per_batch in [1, 2, 3] {
                    assert_eq!(
                        read_all(input, capacity, max, per_batch),
                        whole,
                        "{:?} capacity {capacity} max {max} per batch {per_batch}",
                        String::from_utf8_lossy(input)
                    );
                }
            }
        }
    }

    fn owned(line: Line<&[u8]>) -> Line {
        match line {
            Line::Data(bytes) => Line::Data(bytes.to_vec()),
            Line::TooLarge(start) => Line::TooLarge(start),
        }
    }

    #[test]
    fn the_limit_counts_the_frame_without_its_terminator() {
        let data = |text: &[u8]| Line::Data(text.to_vec());
        assert_eq!(
            lines(
                b"1234\n12345\n123456\n1234\r\n12345\r\n123456\r\n12345\r",
                5
            ),
            vec![
                data(b"1234"),
                data(b"12345"),
                Line::TooLarge(Start::default()),
                data(b"1234\r"),
                data(b"12345\r"),
                Line::TooLarge(Start::default()),
                data(b"12345\r"),
            ]
        );
        assert_eq!(
            lines(b"12345\r\r\n", 5),
            vec![Line::TooLarge(Start::default())]
        );
    }

    #[test]
    fn a_call_too_large_keeps_its_call_id() {
        let frame = br#"{"type":"tool_call","sessionID":"k","callID":"c1","input":{"command":"aaaaaaaaaaaaaaaaaa"}}"#;
        let mut input = frame.to_vec();
        input.push(b'\n');
        assert_eq!(
            lines(&input, 60),
            vec![Line::TooLarge(Start {
                tool_call: true,
                call_id: Some("c1".into()),
                session_id: Some("k".into()),
                permission_id: None,
            })]
        );
        // Cut inside the callID: no call to deny.
        let cut = Start {
            tool_call: true,
            call_id: None,
            session_id: Some("k".into()),
            permission_id: None,
        };
        assert_eq!(cut.call(), None);
        assert_eq!(lines(&input, 44), vec![Line::TooLarge(cut)]);
        // Another frame's ids are kept for its error.
        let answer = br#"{"type":"permission_response","permission_id":"per_1","response":"once","message":"aaaaaaaaaaaaaaaaaaaaaaaa"}"#;
        let mut input = answer.to_vec();
        input.push(b'\n');
        assert_eq!(
            lines(&input, 80),
            vec![Line::TooLarge(Start {
                tool_call: false,
                call_id: None,
                session_id: None,
                permission_id: Some("per_1".into()),
            })]
        );
    }
}
