//! `toolgate serve --listen unix:PATH`: one broker, many connections. Each
//! connection speaks protocol v1 exactly as stdio does (it is greeted with
//! `ready`, may say `hello`), and all of them share the sessions, scopes,
//! grants, questions and state directory of one [`Broker`], driven through
//! [`Broker::step`] like every other transport.
//!
//! Threads, no async runtime: one acceptor, per connection a reader and a
//! writer, one deadline thread and the signal thread. The broker sits behind
//! one mutex, held only while it takes a step (microseconds), never while a
//! socket is read or written; what a step says to a connection goes through
//! that connection's bounded queue, so a client that stops reading can never
//! hold up the broker or the others: when its queue is full it is
//! disconnected (and its open calls are denied).
//!
//! Security: the socket file is created with mode 0600 in a directory only
//! the user can enter (created 0700 when missing; an existing one that
//! others can enter is refused), and every peer's uid is checked with
//! `SO_PEERCRED` (`getpeereid` off Linux): another user's connection gets
//! one `error` line and is closed.

use std::collections::HashMap;
use std::io::{self, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use toolgate_protocol::{ErrorCode, ServerFrame};

use crate::broker::{Broker, ConnId, Input, Output};
use crate::serve::{self, Control};

/// How many frames may wait for a connection that does not read; past it
/// the connection is closed.
const QUEUE: usize = 4096;

/// A connection whose unwritten frames reach this many is not read from
/// until its client reads some (backpressure, as a pipe gives on stdio).
const HIGH_WATER: usize = QUEUE / 2;

/// A connection held at [`HIGH_WATER`] that reads nothing for this long has
/// stopped reading: it is closed (its open calls denied).
const STALL: Duration = Duration::from_secs(5);

/// The most complete lines a connection's reader hands the broker under one
/// lock: enough to amortise the lock and the write over a flood, few enough
/// (a fraction of a millisecond of work) that other connections' calls are
/// not held up behind it.
const BATCH: usize = 32;

/// What the broker has for one connection and not yet written: chunks of
/// whole frames, and how many frames they hold (the writer counts them
/// down as it writes, the broker refuses to let them pass [`QUEUE`]).
struct Queue {
    chunks: Sender<Vec<u8>>,
    frames: Arc<AtomicUsize>,
}

/// Where a broker listens when `--listen unix` names no path:
/// `$XDG_RUNTIME_DIR/toolgate/broker.sock`, else
/// `/tmp/toolgate-UID/broker.sock`. Clients (`hook`, `mcp`, `approve`) use
/// the same default.
pub fn default_path() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|dir| !dir.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("toolgate").join("broker.sock"),
        None => PathBuf::from(format!("/tmp/toolgate-{}", my_uid())).join("broker.sock"),
    }
}

/// Why a socket could not be opened.
#[derive(Debug)]
pub enum ListenError {
    /// The directory is not the user's own, or others can enter it.
    UnsafeDirectory(String),
    /// A broker already answers on the path.
    InUse(PathBuf),
    /// The path exists and is not a socket.
    NotASocket(PathBuf),
    /// The file system said no.
    Io(PathBuf, io::Error),
}

impl std::fmt::Display for ListenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenError::UnsafeDirectory(why) => f.write_str(why),
            ListenError::InUse(path) => write!(
                f,
                "a broker already listens on {}; stop it first or choose another path",
                path.display()
            ),
            ListenError::NotASocket(path) => write!(
                f,
                "{} exists and is not a socket; remove it or choose another path",
                path.display()
            ),
            ListenError::Io(path, err) => write!(f, "cannot listen on {}: {err}", path.display()),
        }
    }
}

/// A listening socket, removed when dropped (if it is still ours).
pub struct Listener {
    listener: UnixListener,
    path: PathBuf,
    inode: (u64, u64),
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Ok(meta) = std::fs::symlink_metadata(&self.path) {
            if (meta.dev(), meta.ino()) == self.inode {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

impl Listener {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Open the socket at `path`: the directory made or checked, a stale socket
/// replaced, a live one refused, the new one created 0600.
pub fn listen(path: &Path) -> Result<Listener, ListenError> {
    let io = |err| ListenError::Io(path.to_path_buf(), err);
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let uid = my_uid();
    match std::fs::metadata(&dir) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io)?,
        Err(err) => return Err(io(err)),
        Ok(meta) => {
            if let Some(why) = unsafe_directory(&dir, &meta, uid) {
                return Err(ListenError::UnsafeDirectory(why));
            }
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => match UnixStream::connect(path) {
            Ok(_) => return Err(ListenError::InUse(path.to_path_buf())),
            Err(_) => std::fs::remove_file(path).map_err(io)?,
        },
        Ok(_) => return Err(ListenError::NotASocket(path.to_path_buf())),
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(io(err)),
    }
    let before = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
    let bound = UnixListener::bind(path);
    rustix::process::umask(before);
    let listener = bound.map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    let meta = std::fs::symlink_metadata(path).map_err(io)?;
    Ok(Listener {
        listener,
        path: path.to_path_buf(),
        inode: (meta.dev(), meta.ino()),
    })
}

/// Why the directory `dir` (whose metadata is `meta`) may not hold a
/// socket of user `uid`: another user owns it, or others can enter it (and
/// so put their own socket in its place). The broker asks before it listens,
/// a client (see `client::open`) before it connects.
pub(crate) fn unsafe_directory(dir: &Path, meta: &std::fs::Metadata, uid: u32) -> Option<String> {
    if meta.uid() != uid {
        return Some(format!(
            "the socket's directory {} belongs to uid {}, not to you (uid {uid}): use a directory of your own",
            dir.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Some(format!(
            "the socket's directory {} can be entered by other users (mode {:o}): make it yours alone (chmod 700 {}) or use another directory",
            dir.display(),
            meta.mode() & 0o777,
            dir.display()
        ));
    }
    None
}

/// The user this process runs as.
pub(crate) fn my_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The uid of the process at the other end of `stream` (`SO_PEERCRED`).
/// Elsewhere than Linux, the socket's mode and its directory's are the
/// check: `None`.
pub(crate) fn peer_uid(stream: &UnixStream) -> io::Result<Option<u32>> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let cred = rustix::net::sockopt::socket_peercred(stream)?;
        Ok(Some(cred.uid.as_raw()))
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = stream;
        Ok(None)
    }
}

/// The broker and the connections' queues.
struct Hub {
    broker: Broker,
    queues: HashMap<ConnId, Queue>,
    /// Connections to close because they stopped reading.
    stalled: Vec<ConnId>,
    done: bool,
}

impl Hub {
    /// Take one step and hand its outputs to the connections' queues. The
    /// state is saved before anything is reported.
    fn step(&mut self, input: Input<'_>) {
        let mut out = Vec::new();
        self.broker.step(input, &mut out);
        self.broker.commit();
        self.deliver(out);
    }

    /// Hand each connection its frames as one chunk per step (or batch),
    /// in order. A connection whose unwritten frames would pass [`QUEUE`]
    /// has stopped reading: it is closed.
    fn deliver(&mut self, out: Vec<Output>) {
        // Outputs are few and mostly for one connection: a short list, not a map.
        let mut chunks: Vec<(ConnId, Vec<u8>, usize)> = Vec::new();
        for Output { to, frame } in out {
            let conn = to.conn();
            if !self.queues.contains_key(&conn) {
                // Closed already: a decision for a call whose connection went.
                continue;
            }
            let index = match chunks.iter().position(|(c, ..)| *c == conn) {
                Some(index) => index,
                None => {
                    chunks.push((conn, Vec::with_capacity(256), 0));
                    chunks.len() - 1
                }
            };
            let (_, chunk, count) = &mut chunks[index];
            if let Err(err) = toolgate_protocol::write_line(chunk, &frame) {
                tracing::warn!(%err, "a frame could not be written");
                continue;
            }
            *count += 1;
        }
        for (conn, chunk, count) in chunks {
            let Some(queue) = self.queues.get(&conn) else {
                continue;
            };
            if queue.frames.load(Ordering::SeqCst) + count > QUEUE {
                self.queues.remove(&conn);
                self.stalled.push(conn);
                continue;
            }
            queue.frames.fetch_add(count, Ordering::SeqCst);
            if queue.chunks.send(chunk).is_err() {
                self.queues.remove(&conn);
            }
        }
    }
}

fn lock(hub: &Mutex<Hub>) -> MutexGuard<'_, Hub> {
    hub.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What every thread shares.
struct Shared {
    hub: Mutex<Hub>,
    /// Wakes the deadline thread when the earliest deadline may have changed.
    wake: Condvar,
    /// The streams, to shut them down when their connection must go.
    streams: Mutex<HashMap<ConnId, UnixStream>>,
    stopping: AtomicBool,
    next_conn: AtomicU64,
    max_frame_bytes: usize,
    /// The socket, to wake the acceptor when stopping.
    path: PathBuf,
}

impl Shared {
    /// Take a step and act on what it leaves to do: connections that stopped
    /// reading are closed, the deadline thread is rearmed.
    fn step(&self, input: Input<'_>) {
        let mut hub = lock(&self.hub);
        let before = hub.broker.next_deadline();
        hub.step(input);
        let stalled = std::mem::take(&mut hub.stalled);
        let rearm = hub.broker.next_deadline() != before;
        if hub.broker.stopped() {
            hub.done = true;
            self.stopping.store(true, Ordering::SeqCst);
        }
        drop(hub);
        for conn in stalled {
            tracing::warn!(
                conn,
                "a client stopped reading its frames; disconnecting it"
            );
            self.disconnect(conn);
        }
        if rearm {
            self.wake.notify_one();
        }
    }

    fn disconnect(&self, conn: ConnId) {
        let streams = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(stream) = streams.get(&conn) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Serve every connection to `listener` until a signal or a `shutdown`
/// frame stops the broker; then deny what is open, let every connection
/// have its frames, and remove the socket.
pub fn run(
    listener: Listener,
    broker: Broker,
    max_frame_bytes: usize,
    control: Option<(Sender<Control>, Receiver<Control>)>,
) -> io::Result<()> {
    let shared = Arc::new(Shared {
        hub: Mutex::new(Hub {
            broker,
            queues: HashMap::new(),
            stalled: Vec::new(),
            done: false,
        }),
        wake: Condvar::new(),
        streams: Mutex::new(HashMap::new()),
        stopping: AtomicBool::new(false),
        next_conn: AtomicU64::new(1),
        max_frame_bytes,
        path: listener.path().to_path_buf(),
    });
    let path = listener.path().to_path_buf();
    {
        let shared = shared.clone();
        std::thread::spawn(move || expire_deadlines(&shared));
    }
    if let Some((finished, control)) = control {
        let shared = shared.clone();
        let path = path.clone();
        std::thread::spawn(move || obey(&shared, &control, &path));
        drop(finished);
    }
    let mut workers = Vec::new();
    let mut backoff = AcceptBackoff::default();
    for stream in listener.listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let stream = match stream {
            Ok(stream) => {
                backoff.accepted();
                stream
            }
            Err(err) => {
                backoff.failed(&err);
                continue;
            }
        };
        let uid = my_uid();
        match peer_uid(&stream) {
            Ok(None) => {}
            Ok(Some(peer)) if peer == uid => {}
            other => {
                let who = match other {
                    Ok(peer) => format!("uid {}", peer.unwrap_or(u32::MAX)),
                    Err(err) => format!("an unknown user ({err})"),
                };
                crate::say!(
                    "toolgate: refused a connection from {who}: only uid {uid} may connect"
                );
                let frame = ServerFrame::Error(toolgate_protocol::ErrorFrame {
                    code: ErrorCode::Forbidden,
                    message: format!("only uid {uid} may connect to this broker"),
                    call_id: None,
                    session_id: None,
                    permission_id: None,
                    line: None,
                    not_saved: None,
                });
                let mut stream = stream;
                if let Ok(mut line) = serde_json::to_vec(&frame) {
                    line.push(b'\n');
                    let _ = stream.write_all(&line);
                }
                continue;
            }
        }
        workers.retain(|worker: &std::thread::JoinHandle<()>| !worker.is_finished());
        let conn = shared.next_conn.fetch_add(1, Ordering::SeqCst);
        match spawn_connection(&shared, conn, stream) {
            Ok(handle) => workers.push(handle),
            Err(err) => tracing::warn!(%err, "a connection could not be served"),
        }
    }
    // Stopping: every connection gets what is queued, then its socket closes.
    for worker in workers {
        let _ = worker.join();
    }
    drop(listener);
    // A change a failed write left unsaved is written now, or the run ends
    // with what was lost.
    let saved = lock(&shared.hub).broker.finish_saving();
    saved.map_err(io::Error::other)
}

/// The longest pause between two failing `accept`s.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// How often a run of failing `accept`s is reported.
const ACCEPT_REPORT: Duration = Duration::from_secs(10);

/// An `accept` that fails for want of descriptors (EMFILE, ENFILE) or
/// memory fails again at once, the waiting connection still queued, until
/// something is closed: retried in a loop it would take a whole core and
/// write a warning per try. So the acceptor pauses between failures (1 ms,
/// doubling up to [`ACCEPT_PAUSE`]), reports a run of them when it starts
/// and then at most once per [`ACCEPT_REPORT`] (with how many failed
/// meanwhile), and says when accepting works again.
#[derive(Default)]
struct AcceptBackoff {
    /// The pause after the next failure; zero while `accept` works.
    pause: Duration,
    /// Failures not yet reported.
    unreported: u64,
    /// When a failure was last reported.
    reported_at: Option<std::time::Instant>,
    /// Whether the current run of failures was reported.
    reported: bool,
}

impl AcceptBackoff {
    fn failed(&mut self, err: &io::Error) {
        self.unreported += 1;
        let now = std::time::Instant::now();
        if self
            .reported_at
            .is_none_or(|at| now.duration_since(at) >= ACCEPT_REPORT)
        {
            tracing::warn!(
                %err,
                failures = self.unreported,
                "accepting connections fails; retrying at most every {} ms until it works",
                ACCEPT_PAUSE.as_millis()
            );
            self.unreported = 0;
            self.reported_at = Some(now);
            self.reported = true;
        }
        self.pause = (self.pause * 2).clamp(Duration::from_millis(1), ACCEPT_PAUSE);
        std::thread::sleep(self.pause);
    }

    fn accepted(&mut self) {
        if self.reported {
            tracing::warn!(
                failures = self.unreported,
                "accepting connections works again"
            );
            self.unreported = 0;
            self.reported = false;
        }
        self.pause = Duration::ZERO;
    }
}

/// Start the reader and writer of one connection; the returned thread ends
/// when both have.
fn spawn_connection(
    shared: &Arc<Shared>,
    conn: ConnId,
    stream: UnixStream,
) -> io::Result<std::thread::JoinHandle<()>> {
    let reader_stream = stream.try_clone()?;
    let writer_stream = stream.try_clone()?;
    shared
        .streams
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(conn, stream);
    let (chunks, received) = std::sync::mpsc::channel::<Vec<u8>>();
    let frames = Arc::new(AtomicUsize::new(0));
    let queue = Queue {
        chunks,
        frames: frames.clone(),
    };
    lock(&shared.hub).queues.insert(conn, queue);
    shared.step(Input::Opened { conn });
    let unwritten = frames.clone();
    let writer = std::thread::spawn(move || write_connection(&received, &frames, writer_stream));
    let shared = shared.clone();
    Ok(std::thread::spawn(move || {
        read_connection(&shared, conn, reader_stream, &unwritten);
        // The connection is gone: its calls are denied, its queue closes and
        // the writer ends once what is queued is written.
        if !shared.stopping.load(Ordering::SeqCst) {
            shared.step(Input::Closed { conn });
        }
        lock(&shared.hub).queues.remove(&conn);
        let _ = writer.join();
        shared
            .streams
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&conn);
    }))
}

/// Write what the broker queued for a connection: every chunk waiting is
/// written at once (one system call for a flood, one per frame when calls
/// come one at a time). After a failed write the rest is dropped.
fn write_connection(received: &Receiver<Vec<u8>>, frames: &AtomicUsize, mut stream: UnixStream) {
    let mut broken = false;
    while let Ok(mut buffer) = received.recv() {
        while buffer.len() < 1 << 16 {
            match received.try_recv() {
                Ok(chunk) => buffer.extend_from_slice(&chunk),
                Err(_) => break,
            }
        }
        let count = buffer.iter().filter(|&&byte| byte == b'\n').count();
        if !broken && stream.write_all(&buffer).is_err() {
            broken = true;
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        frames.fetch_sub(count.min(frames.load(Ordering::SeqCst)), Ordering::SeqCst);
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// Read lines until the peer closes (or the broker stops); the complete
/// lines already buffered (at most [`BATCH`]) are one step of the broker
/// under one lock, and their frames one write.
fn read_connection(shared: &Shared, conn: ConnId, stream: UnixStream, unwritten: &AtomicUsize) {
    let mut reader = BufReader::with_capacity(1 << 16, stream);
    let mut number = 0u64;
    let mut batch = serve::Batch::default();
    let mut decoded = Vec::new();
    // The policy the broker judged under at this connection's last batch:
    // its calls are prepared with it outside the lock (the broker prepares
    // again any call a reload has made stale).
    let mut policy = lock(&shared.hub).broker.policy().clone();
    loop {
        if !wait_for_reader(unwritten) {
            tracing::warn!(
                conn,
                "a client stopped reading its frames (none read for {} s); disconnecting it",
                STALL.as_secs()
            );
            shared.disconnect(conn);
            return;
        }
        match batch.read(&mut reader, shared.max_frame_bytes) {
            Ok(true) => {
                // Never wait for more while a complete line is unanswered.
                while batch.len() < BATCH && reader.buffer().contains(&b'\n') {
                    match batch.read(&mut reader, shared.max_frame_bytes) {
                        Ok(true) => {}
                        _ => break,
                    }
                }
                // Decoded and prepared before the lock is taken: the other
                // connections' lines are decided meanwhile. What the disk
                // says about repositories is asked afresh for these lines.
                crate::repo::next_batch();
                batch.drain(|line| {
                    number += 1;
                    let mut line = serve::decode(line, number, shared.max_frame_bytes);
                    line.prepare(&policy);
                    decoded.push((number, line));
                });
                // The link answers they used, confirmed at once (see
                // `globs::confirm`): a call prepared before a change was seen
                // is judged again.
                let epoch = crate::globs::confirm();
                for (_, line) in &mut decoded {
                    line.confirm_prepared(epoch);
                }
                let mut hub = lock(&shared.hub);
                let before = hub.broker.next_deadline();
                let mut out = Vec::new();
                for (number, decoded) in decoded.drain(..) {
                    hub.broker.step(
                        Input::Decoded {
                            conn,
                            decoded,
                            number,
                        },
                        &mut out,
                    );
                }
                hub.broker.commit();
                hub.deliver(out);
                if !Arc::ptr_eq(&policy, hub.broker.policy()) {
                    policy = hub.broker.policy().clone();
                }
                let stalled = std::mem::take(&mut hub.stalled);
                let rearm = hub.broker.next_deadline() != before;
                let stopped = hub.broker.stopped();
                if stopped {
                    hub.done = true;
                }
                drop(hub);
                for stalled in stalled {
                    tracing::warn!(
                        conn = stalled,
                        "a client stopped reading its frames ({QUEUE} unwritten); disconnecting it"
                    );
                    shared.disconnect(stalled);
                }
                if rearm {
                    shared.wake.notify_one();
                }
                if stopped {
                    stop_everything(shared);
                    return;
                }
            }
            Ok(false) => return,
            Err(err) => {
                tracing::debug!(%err, conn, "reading a connection failed; closing it");
                return;
            }
        }
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
    }
}

/// Backpressure: while a connection has [`HIGH_WATER`] frames unwritten,
/// wait for its client to read. False when it read nothing for [`STALL`].
fn wait_for_reader(unwritten: &AtomicUsize) -> bool {
    let mut last = unwritten.load(Ordering::SeqCst);
    let mut since = std::time::Instant::now();
    while last >= HIGH_WATER {
        if since.elapsed() >= STALL {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
        let now = unwritten.load(Ordering::SeqCst);
        if now < last {
            since = std::time::Instant::now();
        }
        last = now;
    }
    true
}

/// The broker stopped (a `shutdown` frame or a signal): every connection's
/// reading end is shut so that its threads finish, and the acceptor is woken.
fn stop_everything(shared: &Shared) {
    shared.stopping.store(true, Ordering::SeqCst);
    shared.wake.notify_one();
    {
        let streams = shared
            .streams
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for stream in streams.values() {
            let _ = stream.shutdown(std::net::Shutdown::Read);
        }
    }
    wake_acceptor(&shared.path);
}

/// Wake the acceptor blocked in `accept` so that it sees the stop.
fn wake_acceptor(path: &Path) {
    let _ = UnixStream::connect(path);
}

/// The deadline thread: sleep until the earliest deadline (or a change),
/// then end the questions whose time is up.
fn expire_deadlines(shared: &Shared) {
    let mut hub = lock(&shared.hub);
    loop {
        if hub.done {
            return;
        }
        match hub.broker.next_deadline() {
            None => {
                hub = shared
                    .wake
                    .wait(hub)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            Some(deadline) => {
                let now = hub.broker.now_ms();
                if deadline <= now {
                    hub.step(Input::Tick);
                    let stalled = std::mem::take(&mut hub.stalled);
                    drop(hub);
                    for conn in stalled {
                        shared.disconnect(conn);
                    }
                    hub = lock(&shared.hub);
                } else {
                    hub = shared
                        .wake
                        .wait_timeout(hub, Duration::from_millis(deadline - now))
                        .map(|(guard, _)| guard)
                        .unwrap_or_else(|poisoned| poisoned.into_inner().0);
                }
            }
        }
    }
}

/// The signal thread: SIGTERM/SIGINT deny every open call on every
/// connection and stop; SIGHUP reloads the policy.
fn obey(shared: &Shared, control: &Receiver<Control>, path: &Path) {
    loop {
        let order = match control.recv_timeout(Duration::from_millis(200)) {
            Ok(order) => order,
            Err(RecvTimeoutError::Timeout) => {
                if shared.stopping.load(Ordering::SeqCst) {
                    wake_acceptor(path);
                    return;
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        match order {
            Control::Done => return,
            Control::Stop(signal) => {
                let pending = lock(&shared.hub).broker.pending_count();
                shared.step(Input::Stop);
                lock(&shared.hub).done = true;
                let calls = if pending == 1 { "call" } else { "calls" };
                crate::say!(
                    "toolgate: {signal} received: denied {pending} pending {calls} and stopped"
                );
                stop_everything(shared);
                return;
            }
            Control::Reload {
                policy,
                ask_timeout_ms,
                source,
            } => {
                let before = lock(&shared.hub).broker.pending_count();
                shared.step(Input::Reload {
                    policy,
                    ask_timeout_ms,
                });
                let after = lock(&shared.hub).broker.pending_count();
                crate::say!(
                    "toolgate: SIGHUP received: reloaded the policy ({source}); {} of {before} pending calls decided",
                    before.saturating_sub(after)
                );
            }
        }
    }
}
