//! The one task that owns the broker. Every transport (stdin, the socket's
//! connections, an in-process approver, signals) is a task or a thread that
//! sends [`Event`]s on one bounded channel and drains an [`Outbox`] of its
//! own; the owner takes the events one at a time, steps the broker, keeps
//! what must be kept (`Broker::commit`) and only then hands each connection
//! its frames. Question deadlines are the loop's timer. Nothing else touches
//! the broker, so there is no lock around it.
//!
//! The readers do the work that needs no state ahead of the owner: they
//! frame lines ([`crate::transport::lines`]), decode them and prepare their
//! calls (`Decoded::prepare`) under the policy the owner last published, so
//! a flood keeps a reader's CPU and the owner's busy at once.
//!
//! A broker that shares a store (`serve --store`, see docs/fleet.md) has a
//! link: the owner starts it ([`Broker::take_link`]), hands it the writes
//! each step made ([`Broker::take_shared_writes`]) and steps the broker
//! with what it says. The frames of a step that made a write its frames
//! report (a session started or ended, a mode set, a revocation) are held
//! (`Holding`) until the link says that write is committed, or could not
//! be (they then say `notSaved`); a connection's later frames queue behind
//! its held ones, so each connection still gets its frames in order, and
//! the others are not held up. The owner never waits for the store.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio_util::sync::CancellationToken;
use toolgate_policy::Policy;
use toolgate_protocol::{ClientFrame, PermissionResponse};

use crate::broker::{Broker, ConnId, Decoded, Input, LinkHandle, News, Output, Write};
use toolgate_protocol::ServerFrame;

/// Lines a reader decoded, each with its number on its connection.
pub type Lines = Vec<(u64, Decoded)>;

/// What a transport tells the owner.
pub enum Event {
    /// A connection opened; what the broker says to it goes to `sink`.
    Opened {
        /// The connection.
        conn: ConnId,
        /// Where its frames go.
        sink: Sink,
        /// The token it holds (a remote connection): `token NAME (ROLE)`.
        token: Option<String>,
    },
    /// Lines a connection's reader framed and decoded.
    Lines {
        /// Where they came from.
        conn: ConnId,
        /// The lines, in order.
        lines: Lines,
        /// Told whether the broker stopped once these lines are answered
        /// (a reader that sent a `shutdown` waits for it before reading on).
        answered: Option<oneshot::Sender<bool>>,
    },
    /// An in-process approver's answer: a frame of its connection.
    Answer {
        /// The approver's connection.
        conn: ConnId,
        /// The answer.
        response: PermissionResponse,
    },
    /// A remote admin's token frame, done with the store by its listener:
    /// the reply for its connection (see [`Input::Administered`]).
    Administered {
        /// The admin's connection.
        conn: ConnId,
        /// The reply.
        reply: toolgate_protocol::ServerFrame,
        /// Who the admin is (`token NAME (admin)`), should the connection
        /// have closed before the reply.
        by: String,
    },
    /// A connection closed: its open calls are denied.
    Closed {
        /// The connection.
        conn: ConnId,
    },
    /// The input of the one client ended (stdio): the broker stops.
    End,
    /// A signal, turned into an order.
    Signal(Signal),
    /// A reader thread gives the reading of its input back to the loop's
    /// own [`Local`] input (it found nothing more to read).
    Resume(Box<dyn std::any::Any + Send>),
}

/// Input the loop reads on its own thread, beside its channel: stdin while
/// calls come one at a time, so a lone call is read, decided and answered
/// without waking another thread. It yields [`Event::Lines`] and
/// [`Event::End`] only, and may hand its reading to a thread of its own
/// (for a flood), which gives it back with an [`Event::Resume`] on the
/// channel, behind the lines it sent.
pub trait Local {
    /// The next event this input has, or `Pending` (with a wake-up
    /// arranged) when it has none or its reading is with its thread.
    fn poll_event(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Event>;
    /// The reading came back (what [`Event::Resume`] carried).
    fn resume(&mut self, reading: Box<dyn std::any::Any + Send>);
}

/// No input of the loop's own (the socket: every connection has its task).
pub struct NoLocal;

impl Local for NoLocal {
    fn poll_event(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Event> {
        std::task::Poll::Pending
    }

    fn resume(&mut self, _: Box<dyn std::any::Any + Send>) {}
}

/// What a signal asks of the broker.
pub enum Signal {
    /// SIGTERM or SIGINT (named here): deny every open call and stop.
    Stop(&'static str),
    /// SIGHUP with a policy loaded anew: judge from now on under it, and
    /// decide every open call whose answer is no longer "ask".
    Reload {
        /// The new policy.
        policy: Arc<Policy>,
        /// Its ask timeout, in milliseconds (0 waits forever).
        ask_timeout_ms: u64,
        /// Where it came from, for the line on stderr.
        source: String,
    },
}

/// Where the frames for one connection go.
pub enum Sink {
    /// JSON lines, drained by the connection's writer.
    Lines(Outbox),
    /// An approver inside this process, handed each frame.
    Approver(Box<dyn Deliver>),
}

/// An approver inside this process (`serve --approver`): it is handed the
/// frames the broker addresses to its connection, and its answers come
/// back as [`Event::Answer`]s.
pub trait Deliver: Send {
    /// A frame for the approver: a question, one that ended, an error.
    fn deliver(&self, frame: &toolgate_protocol::ServerFrame);
    /// The broker stopped: end what still runs.
    fn stop(&self);
}

/// A connection's queue of encoded frames: chunks of whole lines with how
/// many frames each holds, the count of frames not yet written (the writer
/// lowers it), and the token that makes its reader and writer give up.
/// Dropping it ends the writer once it wrote what is queued.
pub struct Outbox {
    chunks: mpsc::UnboundedSender<Chunk>,
    /// Where the owner may write itself, when nothing waits ahead and the
    /// write cannot block (see [`Direct`]).
    pub direct: Option<Arc<dyn Direct>>,
    /// Frames queued and not yet written.
    pub backlog: Arc<Backlog>,
    /// Cancelled when the connection must go at once (it stopped reading).
    pub close: CancellationToken,
}

/// Whole encoded frames, and how many.
pub type Chunk = (Vec<u8>, usize);

/// A writer's next write: `first` and whatever else is queued behind it,
/// up to about 64 KB (one system call for a flood, one per chunk when calls
/// come one at a time).
pub fn gather(first: Chunk, chunks: &mut mpsc::UnboundedReceiver<Chunk>) -> Chunk {
    let (mut buffer, mut count) = first;
    while buffer.len() < 1 << 16 {
        match chunks.try_recv() {
            Ok((more, frames)) => {
                buffer.extend_from_slice(&more);
                count += frames;
            }
            Err(_) => break,
        }
    }
    (buffer, count)
}

/// An output the owner may write to itself, saving the hand-over to the
/// writer (a wake-up of another thread per frame, when calls come one at a
/// time): only when the write cannot block, so the owner never waits on a
/// client that does not read.
pub trait Direct: Send + Sync {
    /// Write `bytes` now and return `true`, or return `false` having
    /// written nothing when the write might block.
    fn write_now(&self, bytes: &[u8]) -> bool;
}

impl Outbox {
    /// An outbox and the receiving end its writer drains.
    pub fn new() -> (Outbox, mpsc::UnboundedReceiver<Chunk>) {
        let (chunks, receiver) = mpsc::unbounded_channel();
        let outbox = Outbox {
            chunks,
            direct: None,
            backlog: Arc::new(Backlog::default()),
            close: CancellationToken::new(),
        };
        (outbox, receiver)
    }
}

/// How many frames wait to be written for one connection.
#[derive(Default)]
pub struct Backlog {
    frames: AtomicUsize,
    moved: Notify,
}

impl Backlog {
    /// Frames queued and not yet written.
    pub fn frames(&self) -> usize {
        self.frames.load(Ordering::Acquire)
    }

    /// The writer wrote `count` frames.
    pub fn written(&self, count: usize) {
        let _ = self
            .frames
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(count))
            });
        self.moved.notify_waiters();
    }

    /// Wait until fewer than `mark` frames are unwritten. `false` when the
    /// writer wrote nothing for `stall` meanwhile (its client stopped
    /// reading); with no `stall`, wait as long as it takes.
    pub async fn below(&self, mark: usize, stall: Option<Duration>) -> bool {
        loop {
            let moved = self.moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if self.frames() < mark {
                return true;
            }
            match stall {
                None => moved.await,
                Some(stall) => {
                    if tokio::time::timeout(stall, moved).await.is_err() {
                        return false;
                    }
                }
            }
        }
    }
}

/// What the readers share with the owner: the policy to prepare calls
/// with, and the token cancelled when the broker stops (they read no more).
#[derive(Clone)]
pub struct Shared {
    /// The policy the broker judges under (replaced by a reload).
    pub policy: watch::Receiver<Arc<Policy>>,
    /// Cancelled once the broker stopped.
    pub stopped: CancellationToken,
}

/// How many calls of a batch are prepared and confirmed together before
/// they are decided: few enough that what their preparation made is still
/// in this CPU's cache when they are decided.
const CONFIRMED: usize = 32;

/// The largest chunk kept for reuse.
const SPARE_MAX: usize = 1 << 22;

/// A connection's frames are handed over once they fill this many bytes.
const CHUNK: usize = 32 * 1024;

/// The broker and where its frames go.
pub struct Owner {
    broker: Broker,
    sinks: HashMap<ConnId, Sink, foldhash::fast::RandomState>,
    /// The step's outputs (kept to reuse the allocation).
    out: Vec<Output>,
    /// Encoded frames per connection, not yet handed over: (connection,
    /// lines, how many).
    chunks: Vec<(ConnId, Vec<u8>, usize)>,
    /// Frames for in-process approvers, handed over after the commit.
    held: Vec<(ConnId, toolgate_protocol::ServerFrame)>,
    /// A chunk the owner wrote itself, kept to encode the next into: a
    /// batch of plan-mode denials is over a megabyte, not worth growing
    /// anew each time.
    spare: Vec<u8>,
    /// How many frames may wait for a connection; past it the connection
    /// is closed (`None`: never; its reader holds back instead).
    limit: Option<usize>,
    /// The lines each in-process approver sent, for their numbers.
    answers: HashMap<ConnId, u64>,
    policy: watch::Sender<Arc<Policy>>,
    stopped: CancellationToken,
    /// The link to a fleet's store, while the owner runs.
    link: Option<Box<dyn LinkHandle>>,
    /// Frames waiting for the writes they report.
    holding: Holding,
}

/// How long, once the broker stopped, the link may take to commit what is
/// queued and retire the broker from the store.
const LINK_PATIENCE: Duration = Duration::from_secs(5);

/// Frames held until the store commits the writes they report, per
/// connection, in order.
#[derive(Default)]
struct Holding {
    /// Every write up to this one is committed or failed.
    settled: u64,
    /// Writes that could not be committed, and why.
    failed: BTreeMap<u64, String>,
    /// Writes the store refused to make (a mode change to a session closed
    /// there), and why, as their frames say it.
    refused: BTreeMap<u64, String>,
    /// Each connection's held frames, in order; each with the range of
    /// writes it reports (`None`: it only waits behind the others).
    queues: HashMap<ConnId, VecDeque<Held>>,
}

/// A held frame, with the first and last write it reports (`None`: it only
/// waits behind a connection's other held frames).
type Held = (Option<(u64, u64)>, ServerFrame);

impl Holding {
    /// Whether frames for `conn` must queue behind held ones.
    fn holds(&self, conn: ConnId) -> bool {
        !self.queues.is_empty() && self.queues.contains_key(&conn)
    }

    fn push(&mut self, conn: ConnId, writes: Option<(u64, u64)>, frame: ServerFrame) {
        self.queues
            .entry(conn)
            .or_default()
            .push_back((writes, frame));
    }

    /// The write `seq` is settled (`failed`: not committed, and why).
    fn settle(&mut self, seq: u64, failed: Option<String>) {
        if let Some(why) = failed {
            self.failed.insert(seq, why);
        }
        self.settled = self.settled.max(seq);
    }

    /// The store did not make the write `seq` (it is settled all the
    /// same): its frames say `why`.
    fn refuse(&mut self, seq: u64, why: String) {
        self.refused.insert(seq, why);
    }

    /// The frames whose writes are settled, in each connection's order;
    /// those whose write failed say so (`notSaved`). With `all`, every
    /// frame, the unsettled saying `unsettled`.
    fn release(&mut self, all: Option<&str>) -> Vec<(ConnId, ServerFrame)> {
        let mut ready = Vec::new();
        for (conn, queue) in &mut self.queues {
            while let Some((writes, _)) = queue.front() {
                let settled = writes.is_none_or(|(_, last)| last <= self.settled);
                if !settled && all.is_none() {
                    break;
                }
                let Some((writes, mut frame)) = queue.pop_front() else {
                    break;
                };
                if let Some((first, last)) = writes {
                    if let Some((_, why)) = self.refused.range(first..=last).next() {
                        refused(&mut frame, why);
                    }
                    let why = self
                        .failed
                        .range(first..=last)
                        .next()
                        .map(|(_, why)| why.as_str())
                        .or(if settled { None } else { all });
                    if let Some(why) = why {
                        not_saved(&mut frame, why);
                    }
                }
                ready.push((*conn, frame));
            }
        }
        self.queues.retain(|_, queue| !queue.is_empty());
        if self.queues.is_empty() {
            self.failed.clear();
            self.refused.clear();
        }
        ready
    }
}

/// The `notSaved` of a frame that reports a change.
fn not_saved_field(frame: &mut ServerFrame) -> Option<&mut Option<String>> {
    match frame {
        ServerFrame::SessionEnded(frame) => Some(&mut frame.not_saved),
        ServerFrame::SessionStarted(frame) => Some(&mut frame.not_saved),
        ServerFrame::ModeChanged(frame) => Some(&mut frame.not_saved),
        ServerFrame::Grants(frame) => Some(&mut frame.not_saved),
        ServerFrame::Error(frame) => Some(&mut frame.not_saved),
        _ => None,
    }
}

/// Say in a frame that reports a change that it is not saved, and why.
fn not_saved(frame: &mut ServerFrame, why: &str) {
    if let Some(field) = not_saved_field(frame) {
        field.get_or_insert_with(|| format!("not in the shared store yet ({why}): in force on this broker, and written to the store once it can be"));
    }
}

/// Say in a frame that reports a change that the store refused it, and why.
fn refused(frame: &mut ServerFrame, why: &str) {
    if let Some(field) = not_saved_field(frame) {
        field.get_or_insert_with(|| why.to_string());
    }
}

/// What woke the loop.
enum Next {
    Event(Option<Event>),
    Link(Option<News>),
    Tick,
}

/// The link's next news, or never without a link.
async fn link_news(link: &mut Option<Box<dyn LinkHandle>>) -> Option<News> {
    match link {
        Some(link) => std::future::poll_fn(|cx| link.poll_news(cx)).await,
        None => std::future::pending().await,
    }
}

impl Owner {
    /// The owner of `broker`; `limit` is how many frames may wait for a
    /// connection before it is closed (`None`: never; its reader holds back
    /// instead).
    pub fn new(broker: Broker, limit: Option<usize>) -> (Owner, Shared) {
        let (policy, watching) = watch::channel(broker.policy().clone());
        let stopped = CancellationToken::new();
        let owner = Owner {
            broker,
            sinks: HashMap::default(),
            out: Vec::new(),
            chunks: Vec::new(),
            held: Vec::new(),
            spare: Vec::new(),
            limit,
            answers: HashMap::new(),
            policy,
            stopped: stopped.clone(),
            link: None,
            holding: Holding::default(),
        };
        let shared = Shared {
            policy: watching,
            stopped,
        };
        (owner, shared)
    }

    /// The broker, for a transport's set-up before the run.
    pub fn broker(&mut self) -> &mut Broker {
        &mut self.broker
    }

    /// Take events (from the channel and from `local`) until the broker
    /// stops or every sender is gone; the signal that stopped it, with how
    /// many calls it denied.
    pub async fn run(
        &mut self,
        events: &mut mpsc::Receiver<Event>,
        local: &mut dyn Local,
    ) -> Option<(&'static str, usize)> {
        let mut signal = None;
        if let Some(link) = self.broker.take_link() {
            self.link = Some(link.start());
        }
        loop {
            let deadline = self.broker.next_deadline().map(|at| {
                let wait = at.saturating_sub(self.broker.now_ms());
                tokio::time::Instant::now() + Duration::from_millis(wait)
            });
            // The store's news first (a few a second; a flood on the
            // channel must not hold it back), then the channel: what a
            // reader thread sent before it gave its reading back is
            // handled before `local` reads on.
            let next = tokio::select! {
                biased;
                news = link_news(&mut self.link) => Next::Link(news),
                event = events.recv() => Next::Event(event),
                event = std::future::poll_fn(|cx| local.poll_event(cx)) => Next::Event(Some(event)),
                () = tokio::time::sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)),
                    if deadline.is_some() => Next::Tick,
            };
            let event = match next {
                Next::Tick => {
                    self.step(Input::Tick);
                    self.flush();
                    continue;
                }
                Next::Link(news) => {
                    self.link_said(news);
                    continue;
                }
                Next::Event(event) => event,
            };
            let event = match event {
                None => break,
                Some(Event::Resume(reading)) => {
                    local.resume(reading);
                    continue;
                }
                Some(event) => event,
            };
            if let Some(stop) = self.handle(event) {
                signal = Some(stop);
            }
            if self.broker.stopped() {
                break;
            }
            if !events.is_empty() {
                // A flood: the channel never runs dry, so the loop would
                // never wait. Deadlines are checked here, and the task
                // yields between events so that the runtime looks at its
                // signals and sockets.
                if deadline.is_some_and(|at| at <= tokio::time::Instant::now()) {
                    self.step(Input::Tick);
                    self.flush();
                }
                tokio::task::yield_now().await;
            }
        }
        self.stopped.cancel();
        self.finish_link().await;
        signal
    }

    /// What the link said: a write settled (its frames go out), or news
    /// for the broker.
    fn link_said(&mut self, news: Option<News>) {
        let Some(news) = news else {
            // The link's task ended: nothing more is shared.
            tracing::warn!("the link to the shared store ended; this broker goes on alone");
            self.link = None;
            self.step(Input::Shared(News::Offline {
                why: "the link to the store ended".to_string(),
            }));
            // Nothing will commit what waits: it goes now, saying so.
            self.release(Some("the link to the store ended"));
            self.flush();
            return;
        };
        match &news {
            News::Settled { seq, failed } => self.holding.settle(*seq, failed.clone()),
            News::SessionWritten {
                seq,
                refused: Some(why),
                ..
            } => self.holding.refuse(*seq, why.clone()),
            _ => {}
        }
        self.step(Input::Shared(news));
        self.release(None);
        self.flush();
    }

    /// Hand over the held frames whose writes are settled (`all`: every
    /// one, those not settled saying so).
    fn release(&mut self, all: Option<&str>) {
        for (conn, frame) in self.holding.release(all) {
            if self.deliver(conn, frame) {
                self.flush();
            }
        }
    }

    /// The broker stopped: the writes its last steps made are committed
    /// (or said not to be) before their frames go, and the broker leaves
    /// the store, within [`LINK_PATIENCE`].
    async fn finish_link(&mut self) {
        let Some(mut link) = self.link.take() else {
            return;
        };
        let until = tokio::time::Instant::now() + LINK_PATIENCE;
        while !self.holding.queues.is_empty() {
            let news =
                tokio::time::timeout_at(until, std::future::poll_fn(|cx| link.poll_news(cx))).await;
            match news {
                Ok(Some(News::Settled { seq, failed })) => {
                    self.holding.settle(seq, failed);
                    self.release(None);
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        self.release(Some("the broker stopped before the store confirmed it"));
        self.flush();
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        link.finish(left.max(Duration::from_secs(1))).await;
    }

    /// Hand the writes the last step made to the link: the range of those
    /// whose frames wait for them.
    fn send_writes(&mut self) -> Option<(u64, u64)> {
        let writes: Vec<(u64, Write)> = self.broker.take_shared_writes();
        let mut reported: Option<(u64, u64)> = None;
        for (seq, write) in writes {
            if write.reported() {
                reported = Some(reported.map_or((seq, seq), |(first, _)| (first, seq)));
            }
            match &mut self.link {
                Some(link) => link.send(seq, write),
                // No link (it ended): nothing will commit it.
                None => {
                    self.holding
                        .settle(seq, Some("the link to the store ended".to_string()));
                }
            }
        }
        reported
    }

    /// Act on one event; the signal that stopped the broker, if it did.
    pub fn handle(&mut self, event: Event) -> Option<(&'static str, usize)> {
        let mut stop = None;
        match event {
            Event::Opened { conn, sink, token } => {
                self.sinks.insert(conn, sink);
                if let Some(token) = token {
                    self.broker.vouch(conn, token);
                }
                self.step(Input::Opened { conn });
            }
            Event::Lines {
                conn,
                mut lines,
                answered,
            } => {
                self.decide(conn, &mut lines);
                self.flush();
                if let Some(answered) = answered {
                    let _ = answered.send(self.broker.stopped());
                }
                return None;
            }
            Event::Answer { conn, response } => {
                let number = self.answers.entry(conn).or_insert(1);
                *number += 1;
                let number = Some(*number);
                self.step(Input::Frame {
                    conn,
                    frame: ClientFrame::PermissionResponse(response),
                    number,
                });
            }
            // Stepped even when the connection has closed meanwhile: the
            // change is in the store, and the audit log records it.
            Event::Administered { conn, reply, by } => {
                self.step(Input::Administered { conn, reply, by });
            }
            Event::Closed { conn } => {
                if !self.broker.stopped() {
                    self.step(Input::Closed { conn });
                }
                self.flush();
                self.sinks.remove(&conn);
                self.holding.queues.remove(&conn);
                return None;
            }
            Event::End => self.step(Input::Stop),
            // Only the loop takes these (see [`Owner::run`]).
            Event::Resume(_) => {}
            Event::Signal(Signal::Stop(name)) => {
                if !self.broker.stopped() {
                    let pending = self.broker.pending_count();
                    self.step(Input::Stop);
                    stop = Some((name, pending));
                }
            }
            Event::Signal(Signal::Reload {
                policy,
                ask_timeout_ms,
                source,
            }) => {
                let before = self.broker.pending_count();
                self.step(Input::Reload {
                    policy,
                    ask_timeout_ms,
                });
                self.policy.send_replace(self.broker.policy().clone());
                let decided = before.saturating_sub(self.broker.pending_count());
                crate::say!(
                    "toolgate: SIGHUP received: reloaded the policy ({source}); {decided} of {before} pending calls decided"
                );
            }
        }
        self.flush();
        stop
    }

    /// Decide a reader's lines, a group of [`CONFIRMED`] calls at a time:
    /// each call of the group is prepared (most already are, by the reader)
    /// before any is decided, and the disk's link answers they used are
    /// confirmed at once (one look at each inotify queue, see
    /// `globs::confirm`); a call prepared before a change was seen is judged
    /// again. Every line is handled, even after a `shutdown` or a signal
    /// stopped the broker: a stopped broker denies the calls.
    fn decide(&mut self, conn: ConnId, lines: &mut Lines) {
        // What the disk said about repositories holds for this batch only.
        crate::disk::repo::next_batch();
        let policy = self.broker.policy().clone();
        let mut start = 0;
        while start < lines.len() {
            let end = lines.len().min(start + CONFIRMED);
            for (_, decoded) in &mut lines[start..end] {
                decoded.prepare(&policy);
            }
            let epoch = crate::disk::globs::confirm();
            for (number, slot) in &mut lines[start..end] {
                let mut decoded = std::mem::replace(slot, Decoded::blank());
                decoded.confirm_prepared(epoch);
                self.step(Input::Decoded {
                    conn,
                    decoded,
                    number: *number,
                });
            }
            start = end;
        }
        lines.clear();
    }

    /// Take one step; its frames are encoded at once, while they are fresh
    /// in the cache, and handed over by [`Owner::flush`].
    pub fn step(&mut self, input: Input<'_>) {
        self.broker.step(input, &mut self.out);
        let writes = self.send_writes();
        let mut full = false;
        let mut out = std::mem::take(&mut self.out);
        for Output { to, frame } in out.drain(..) {
            let conn = to.conn();
            // Frames that report a write wait for its commit; a
            // connection's later frames wait behind them.
            if writes.is_some() || self.holding.holds(conn) {
                self.holding.push(conn, writes, frame);
                continue;
            }
            full |= self.deliver(conn, frame);
        }
        self.out = out;
        if self.link.is_none() && !self.holding.queues.is_empty() {
            // Nothing will commit them: they go now, saying so.
            self.release(None);
        }
        // A flood's frames go out in chunks of about [`CHUNK`] bytes, not a
        // whole batch at once: the writer starts sooner and no buffer of a
        // megabyte (a batch of plan-mode denials) is grown and freed per
        // batch.
        if full {
            self.flush();
        }
    }

    /// Encode `frame` for `conn` (or keep it for its in-process approver):
    /// whether its chunk is full.
    fn deliver(&mut self, conn: ConnId, frame: ServerFrame) -> bool {
        match self.sinks.get(&conn) {
            // Closed already: a decision for a call whose connection went.
            None => false,
            Some(Sink::Approver(_)) => {
                self.held.push((conn, frame));
                false
            }
            Some(Sink::Lines(_)) => {
                let index = match self.chunks.iter().position(|(c, ..)| *c == conn) {
                    Some(index) => index,
                    None => {
                        let chunk = match self.spare.capacity() {
                            0 => Vec::with_capacity(512),
                            _ => std::mem::take(&mut self.spare),
                        };
                        self.chunks.push((conn, chunk, 0));
                        self.chunks.len() - 1
                    }
                };
                let (_, chunk, count) = &mut self.chunks[index];
                // A frame that cannot be written is left out, never the
                // frames around it.
                match toolgate_protocol::write_line(chunk, &frame) {
                    Ok(()) => *count += 1,
                    Err(err) => tracing::warn!(%err, "a frame could not be written"),
                }
                chunk.len() >= CHUNK
            }
        }
    }

    /// Keep what the steps changed, then hand every connection its frames:
    /// what is reported is already saved.
    pub fn flush(&mut self) {
        // Also when nothing is said: a tick may be the retry of a save.
        self.broker.commit();
        for (conn, frame) in self.held.drain(..) {
            if let Some(Sink::Approver(approver)) = self.sinks.get(&conn) {
                approver.deliver(&frame);
            }
        }
        for (conn, chunk, count) in self.chunks.drain(..) {
            let Some(Sink::Lines(outbox)) = self.sinks.get(&conn) else {
                continue;
            };
            let waiting = outbox.backlog.frames();
            if self.limit.is_some_and(|limit| waiting + count > limit) {
                tracing::warn!(
                    conn,
                    "a client stopped reading its frames ({waiting} unwritten); disconnecting it"
                );
                outbox.close.cancel();
                self.sinks.remove(&conn);
                continue;
            }
            // Nothing waits ahead of these frames: the owner may write them
            // itself when that cannot block.
            if waiting == 0 && outbox.direct.as_ref().is_some_and(|d| d.write_now(&chunk)) {
                if chunk.capacity() <= SPARE_MAX {
                    let mut chunk = chunk;
                    chunk.clear();
                    self.spare = chunk;
                }
                continue;
            }
            outbox.backlog.frames.fetch_add(count, Ordering::AcqRel);
            if outbox.chunks.send((chunk, count)).is_err() {
                self.sinks.remove(&conn);
            }
        }
    }

    /// Every connection's outbox is dropped: its writer ends once it wrote
    /// what is queued. In-process approvers are stopped.
    pub fn close_all(&mut self) {
        for (_, sink) in self.sinks.drain() {
            if let Sink::Approver(approver) = sink {
                approver.stop();
            }
        }
    }

    /// The broker, once the run is over.
    pub fn into_broker(self) -> Broker {
        self.broker
    }
}

/// An approver that runs in the broker's process (`serve --approver`),
/// ready before the broker starts and started on the transport's runtime:
/// the transport knows it by this alone.
pub trait Approver: Send {
    /// Its client name in its `hello`.
    fn name(&self) -> &'static str;
    /// Start it as tasks of the current runtime; its answers go to
    /// `answers`, and the frames addressed to it to what is returned.
    fn start(self: Box<Self>, answers: Answers) -> std::io::Result<Box<dyn Deliver>>;
}

/// Where an in-process approver's answers go: straight onto the owner's
/// channel, as [`Event::Answer`]s of the approver's connection.
#[derive(Clone)]
pub struct Answers {
    conn: ConnId,
    events: mpsc::Sender<Event>,
}

impl Answers {
    /// The answers of connection `conn`, sent on the owner's `events`.
    pub fn new(conn: ConnId, events: mpsc::Sender<Event>) -> Answers {
        Answers { conn, events }
    }

    /// Hand `response` to the owner. While its channel is full this waits
    /// (the owner never waits for an approver, so room comes); once the
    /// owner is gone the answer is dropped.
    pub async fn send(&self, response: toolgate_protocol::PermissionResponse) {
        let conn = self.conn;
        let _ = self.events.send(Event::Answer { conn, response }).await;
    }
}
