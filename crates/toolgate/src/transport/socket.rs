//! `toolgate serve --listen unix:PATH`: one broker, many connections. Each
//! connection speaks protocol v1 exactly as stdio does (it is greeted with
//! `ready`, may say `hello`), and all of them share the sessions, scopes,
//! grants, questions and state directory of one [`Broker`], driven through
//! [`Broker::step`] like every other transport.
//!
//! On a tokio runtime of `WORKERS` threads, whatever the number of
//! connections: an acceptor task, per connection a reader task and a writer
//! task, the signals, and the owner ([`crate::owner`]), which alone holds
//! the broker. A reader frames, decodes and prepares its lines and hands
//! them to the owner; what a step says to a connection goes to that
//! connection's outbox, so a client that stops reading can never hold up
//! the broker or the others: past `HIGH_WATER` unwritten frames its lines
//! are not read, and when its queue passes `QUEUE` or it reads nothing
//! for `STALL` it is disconnected (and its open calls are denied).
//!
//! Security: the socket file is created with mode 0600 in a directory only
//! the user can enter (created 0700 when missing; an existing one that
//! others can enter is refused), and every peer's uid is checked with
//! `SO_PEERCRED` (`getpeereid` off Linux): another user's connection gets
//! one `error` line and is closed.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};
use tokio_util::codec::Decoder;
use tokio_util::sync::CancellationToken;
use toolgate_protocol::{ErrorCode, ServerFrame};

use crate::broker::{Broker, ConnId, Decoded};
use crate::owner::{Backlog, Chunk, Event, Lines, Outbox, Owner, Shared, Sink};
use crate::transport::lines::{decode, Line, LineCodec};
use crate::transport::signals::{self, Reloader};

/// How many frames may wait for a connection that does not read; past it
/// the connection is closed.
const QUEUE: usize = 4096;

/// A connection whose unwritten frames reach this many is not read from
/// until its client reads some (backpressure, as a pipe gives on stdio).
const HIGH_WATER: usize = QUEUE / 2;

/// A connection held at [`HIGH_WATER`] that reads nothing for this long has
/// stopped reading: it is closed (its open calls denied).
const STALL: Duration = Duration::from_secs(5);

/// The most complete lines a connection's reader hands the owner at once:
/// enough to amortise the hand-over and the write over a flood, few enough
/// (a fraction of a millisecond of work) that other connections' calls are
/// not held up behind it.
const BATCH: usize = 32;

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
        Ok(meta) if meta.file_type().is_socket() => {
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => return Err(ListenError::InUse(path.to_path_buf())),
                Err(_) => std::fs::remove_file(path).map_err(io)?,
            }
        }
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
pub(crate) fn peer_uid(stream: &std::os::unix::net::UnixStream) -> io::Result<Option<u32>> {
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

/// Serve every connection to `listener` until a signal or a `shutdown`
/// frame stops the broker; then deny what is open, let every connection
/// have its frames, and remove the socket. `reloader` says how SIGHUP loads
/// the policy; without it signals are not watched.
///
/// `listener` may be absent when `more` listens instead (the remote
/// listeners of `serve --listen tls:…`, which take connections of their own
/// kind and hand them to the same owner).
pub fn run(
    listener: Option<Listener>,
    more: Vec<Box<dyn Accept>>,
    broker: Broker,
    max_frame_bytes: usize,
    reloader: Option<Reloader>,
) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .thread_name("toolgate-socket")
        .enable_all()
        .build()?;
    let result = runtime.block_on(serve(
        listener.as_ref(),
        more,
        broker,
        max_frame_bytes,
        reloader,
    ));
    // A client that never reads its last frames does not hold the exit.
    runtime.shutdown_timeout(Duration::from_millis(100));
    drop(listener);
    result
}

/// The runtime's worker threads: the owner and the connections' readers
/// share them, so a flood over several connections is framed, decoded and
/// prepared on one CPU while the owner decides on the other.
const WORKERS: usize = 2;

/// How many events may wait for the owner; then readers wait.
const EVENTS: usize = 64;

/// How long, once the broker stopped, the connections may take to be
/// written what is queued for them.
const FLUSH_PATIENCE: Duration = Duration::from_secs(5);

/// A listener of another kind than the Unix socket (the TLS listeners of
/// `serve --listen tls:…`): it accepts its own connections on the socket's
/// runtime and hands each to the same owner, through [`connection`].
pub trait Accept: Send {
    /// Accept connections until `shared.stopped`; then wait for each to
    /// end. Connection ids come from `ids`, shared with every listener.
    fn spawn(
        self: Box<Self>,
        events: mpsc::Sender<Event>,
        shared: Shared,
        ids: Arc<ConnIds>,
        max_frame_bytes: usize,
    ) -> tokio::task::JoinHandle<()>;
}

/// The ids of connections, unique across every listener of one broker.
#[derive(Debug)]
pub struct ConnIds(AtomicU64);

impl Default for ConnIds {
    fn default() -> ConnIds {
        ConnIds(AtomicU64::new(1))
    }
}

impl ConnIds {
    /// The next connection's id.
    pub fn next(&self) -> ConnId {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

async fn serve(
    listener: Option<&Listener>,
    more: Vec<Box<dyn Accept>>,
    broker: Broker,
    max_frame_bytes: usize,
    reloader: Option<Reloader>,
) -> io::Result<()> {
    let (events, mut received) = mpsc::channel::<Event>(EVENTS);
    if let Some(reloader) = reloader {
        signals::watch(reloader, events.clone());
    }
    let (mut owner, shared) = Owner::new(broker, Some(QUEUE));
    let ids = Arc::new(ConnIds::default());
    let mut acceptors = Vec::new();
    if let Some(listener) = listener {
        let accepting = listener.listener.try_clone()?;
        accepting.set_nonblocking(true)?;
        let accepting = tokio::net::UnixListener::from_std(accepting)?;
        acceptors.push(tokio::spawn(accept(
            accepting,
            events.clone(),
            shared.clone(),
            ids.clone(),
            max_frame_bytes,
        )));
    }
    for more in more {
        acceptors.push(more.spawn(events.clone(), shared.clone(), ids.clone(), max_frame_bytes));
    }
    drop(events);
    let acceptor = async {
        for acceptor in acceptors {
            let _ = acceptor.await;
        }
    };
    let signal = owner.run(&mut received, &mut crate::owner::NoLocal).await;
    drop(received);
    // Every connection's outbox is dropped: its writer ends once it wrote
    // what is queued, and the acceptor once every connection has.
    owner.close_all();
    if let Some((name, pending)) = signal {
        let calls = if pending == 1 { "call" } else { "calls" };
        crate::say!("toolgate: {name} received: denied {pending} pending {calls} and stopped");
    }
    let _ = tokio::time::timeout(FLUSH_PATIENCE, acceptor).await;
    // A change a failed write left unsaved is written now, or the run ends
    // with what was lost.
    owner
        .into_broker()
        .finish_saving()
        .map_err(io::Error::other)
}

/// Accept connections until the broker stops; then wait for each to end.
async fn accept(
    listener: tokio::net::UnixListener,
    events: mpsc::Sender<Event>,
    shared: Shared,
    ids: Arc<ConnIds>,
    max_frame_bytes: usize,
) {
    let mut connections = tokio::task::JoinSet::new();
    let mut backoff = AcceptBackoff::default();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shared.stopped.cancelled() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                backoff.accepted();
                stream
            }
            Err(err) => {
                tokio::time::sleep(backoff.failed(&err)).await;
                continue;
            }
        };
        if !allowed(&stream).await {
            continue;
        }
        while connections.try_join_next().is_some() {}
        let (reading, writing) = stream.into_split();
        connections.spawn(connection(
            ids.next(),
            reading,
            writing,
            events.clone(),
            shared.clone(),
            Peer::plain(max_frame_bytes),
        ));
    }
    drop(events);
    while connections.join_next().await.is_some() {}
}

/// Whether the peer is this user; another user's connection gets one
/// `error` line and is closed.
async fn allowed(stream: &UnixStream) -> bool {
    let uid = my_uid();
    let peer = match stream.peer_cred() {
        Ok(cred) if cred.uid() == uid => return true,
        Ok(cred) => format!("uid {}", cred.uid()),
        Err(err) => format!("an unknown user ({err})"),
    };
    crate::say!("toolgate: refused a connection from {peer}: only uid {uid} may connect");
    let frame = ServerFrame::Error(toolgate_protocol::ErrorFrame::new(
        ErrorCode::Forbidden,
        format!("only uid {uid} may connect to this broker"),
    ));
    if let Ok(mut line) = serde_json::to_vec(&frame) {
        line.push(b'\n');
        let _ = stream.try_write(&line);
    }
    false
}

/// The longest pause between two failing `accept`s.
pub const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// How often a run of failing `accept`s is reported.
pub const ACCEPT_REPORT: Duration = Duration::from_secs(10);

/// An `accept` that fails for want of descriptors (EMFILE, ENFILE) or
/// memory fails again at once, the waiting connection still queued, until
/// something is closed: retried in a loop it would take a whole core and
/// write a warning per try. So the acceptor pauses between failures (1 ms,
/// doubling up to [`ACCEPT_PAUSE`]), reports a run of them when it starts
/// and then at most once per [`ACCEPT_REPORT`] (with how many failed
/// meanwhile), and says when accepting works again.
#[derive(Default)]
pub struct AcceptBackoff {
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
    /// A failure: how long to pause before the next `accept`.
    pub fn failed(&mut self, err: &io::Error) -> Duration {
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
        self.pause
    }

    /// An `accept` worked (said once after a run of failures).
    pub fn accepted(&mut self) {
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

/// What a connection brings beyond its stream: where its reading stands
/// (a TLS connection read its `hello` before it was opened), lines to hand
/// the owner first, what checks each line before the owner sees it, and
/// what ends it from outside. A Unix socket's connection has none of these
/// ([`Peer::plain`]).
pub struct Peer {
    /// The codec and what it buffered, and the last line's number.
    pub reading: Reading,
    /// Handed to the owner right after the connection is opened.
    pub first: Lines,
    /// Decodes each line in the owner's stead, refusing what this
    /// connection may not send (`None`: [`decode`]).
    pub guard: Option<Box<dyn Guard>>,
    /// Set to a last line (an `error` frame) when the connection must end
    /// (its token was revoked): the line is written, the connection closed
    /// and its open calls denied.
    pub ended: Option<watch::Receiver<Option<Bytes>>>,
    /// The token it connected with (a remote connection), as answers it
    /// gives are signed: `token NAME (ROLE)`.
    pub token: Option<String>,
}

impl Peer {
    /// A connection with nothing more than its stream.
    pub fn plain(max_frame_bytes: usize) -> Peer {
        Peer {
            reading: Reading::new(max_frame_bytes),
            first: Vec::new(),
            guard: None,
            ended: None,
            token: None,
        }
    }
}

/// Where a connection's reading stands: its codec, the bytes read and not
/// yet framed, and the number of the last line framed.
pub struct Reading {
    codec: LineCodec,
    buf: BytesMut,
    number: u64,
    max_frame_bytes: usize,
}

impl Reading {
    /// Nothing read yet.
    pub fn new(max_frame_bytes: usize) -> Reading {
        Reading {
            codec: LineCodec::new(max_frame_bytes),
            buf: BytesMut::new(),
            number: 0,
            max_frame_bytes,
        }
    }

    /// The longest line.
    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes
    }

    /// The next line from `reading` and its number; `None` at the end of
    /// the input (or when it fails). For a connection's first lines, before
    /// it is handed to the owner.
    pub async fn next_line<R: AsyncRead + Unpin>(
        &mut self,
        reading: &mut R,
    ) -> Option<(Line<Bytes>, u64)> {
        loop {
            if let Ok(Some(line)) = self.codec.decode(&mut self.buf) {
                self.number += 1;
                return Some((line, self.number));
            }
            self.buf.reserve(READ_CHUNK);
            match reading.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => {
                    let line = self.codec.decode_eof(&mut self.buf).ok().flatten()?;
                    self.number += 1;
                    return Some((line, self.number));
                }
                Ok(_) => {}
            }
        }
    }
}

/// What reads a connection's lines in the owner's stead: a TLS
/// connection's token decides what it may send.
pub trait Guard: Send {
    /// Line `number`, decoded as [`decode`] would, or refused.
    fn decode(&mut self, line: Line<&[u8]>, number: u64, max_frame_bytes: usize) -> Decoded;
}

/// Wait for the last line `ended` is set to; never, when there is none.
async fn farewell(ended: &mut Option<watch::Receiver<Option<Bytes>>>) -> Bytes {
    loop {
        let Some(watching) = ended.as_mut() else {
            return std::future::pending().await;
        };
        if let Some(line) = watching.borrow_and_update().clone() {
            return line;
        }
        if watching.changed().await.is_err() {
            // Whoever could end it has gone: it never will.
            *ended = None;
        }
    }
}

/// How long a connection's last line may take to be written.
const FAREWELL_WRITE: Duration = Duration::from_secs(1);

/// One connection: opened with the owner, read until its peer closes (or
/// the broker stops, or it stopped reading, or it was ended), closed with
/// the owner (its open calls denied), and written until its outbox is
/// dropped.
pub async fn connection<R, W>(
    conn: ConnId,
    reading: R,
    writing: W,
    events: mpsc::Sender<Event>,
    shared: Shared,
    peer: Peer,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let Peer {
        reading: state,
        first,
        guard,
        ended,
        token,
    } = peer;
    let (outbox, chunks) = Outbox::new();
    let backlog = outbox.backlog.clone();
    let close = outbox.close.clone();
    let opened = Event::Opened {
        conn,
        sink: Sink::Lines(outbox),
        token,
    };
    if events.send(opened).await.is_err() {
        return;
    }
    let writer = tokio::spawn(write_connection(
        writing,
        chunks,
        backlog.clone(),
        close.clone(),
        ended.clone(),
    ));
    if first.is_empty() || send_lines(&events, conn, first).await {
        read_connection(
            conn, reading, &events, &shared, &backlog, &close, state, guard, ended,
        )
        .await;
    }
    if !shared.stopped.is_cancelled() {
        let _ = events.send(Event::Closed { conn }).await;
    }
    drop(events);
    let _ = writer.await;
}

/// Write what the owner queued for a connection: every chunk waiting at
/// once (one system call for a flood, one per frame when calls come one at
/// a time). After a failed write the rest is dropped; a connection told to
/// close stops at once; one that was ended writes its last line and stops.
///
/// The end is looked at before the outbox, every time: the reader sees the
/// same end and closes the connection with the owner, which drops the
/// outbox, so by the time this task runs the outbox may be closed too.
/// Taking the closed outbox first would end the connection without its
/// last line (the `error` frame saying why: its token revoked).
async fn write_connection<W: AsyncWrite + Unpin>(
    mut writing: W,
    mut chunks: mpsc::UnboundedReceiver<Chunk>,
    backlog: Arc<Backlog>,
    close: CancellationToken,
    mut ended: Option<watch::Receiver<Option<Bytes>>>,
) {
    let mut broken = false;
    loop {
        let next = tokio::select! {
            biased;
            () = close.cancelled() => break,
            last = farewell(&mut ended) => {
                if !broken {
                    let _ = tokio::time::timeout(FAREWELL_WRITE, async {
                        writing.write_all(&last).await?;
                        writing.flush().await
                    })
                    .await;
                }
                break;
            }
            next = chunks.recv() => next,
        };
        let Some(first) = next else {
            break;
        };
        let (buffer, count) = crate::owner::gather(first, &mut chunks);
        if !broken {
            // Flushed: a TLS stream may keep a record back when the socket
            // is full, and nothing else would send it.
            let written = tokio::select! {
                written = async {
                    writing.write_all(&buffer).await?;
                    writing.flush().await
                } => written,
                () = close.cancelled() => break,
            };
            broken = written.is_err();
        }
        backlog.written(count);
    }
    let _ = tokio::time::timeout(FAREWELL_WRITE, writing.shutdown()).await;
}

/// Read lines until the peer closes, the broker stops or the connection
/// must close. The complete lines already read (at most [`BATCH`]) are
/// framed, decoded and prepared here, then handed to the owner as one event.
#[allow(clippy::too_many_arguments)] // one connection's parts, each its own
async fn read_connection<R: AsyncRead + Unpin>(
    conn: ConnId,
    mut reading: R,
    events: &mpsc::Sender<Event>,
    shared: &Shared,
    backlog: &Backlog,
    close: &CancellationToken,
    state: Reading,
    mut guard: Option<Box<dyn Guard>>,
    mut ended: Option<watch::Receiver<Option<Bytes>>>,
) {
    let Reading {
        mut codec,
        mut buf,
        mut number,
        max_frame_bytes,
    } = state;
    loop {
        if backlog.frames() >= HIGH_WATER {
            let read_on = tokio::select! {
                read_on = backlog.below(HIGH_WATER, Some(STALL)) => read_on,
                () = close.cancelled() => return,
                () = shared.stopped.cancelled() => return,
                _ = farewell(&mut ended) => return,
            };
            if !read_on {
                tracing::warn!(
                    conn,
                    "a client stopped reading its frames (none read for {} s); disconnecting it",
                    STALL.as_secs()
                );
                close.cancel();
                return;
            }
        }
        buf.reserve(READ_CHUNK);
        let read = tokio::select! {
            read = reading.read_buf(&mut buf) => read,
            () = close.cancelled() => return,
            () = shared.stopped.cancelled() => return,
            _ = farewell(&mut ended) => return,
        };
        let ended_input = match read {
            Ok(count) => count == 0,
            Err(err) => {
                tracing::debug!(%err, conn, "reading a connection failed; closing it");
                true
            }
        };
        // Decoded and prepared here: the owner decides the other
        // connections' lines meanwhile. What the disk says about
        // repositories is asked afresh for these lines.
        crate::disk::repo::next_batch();
        let policy = shared.policy.borrow().clone();
        let mut lines: Lines = Vec::new();
        loop {
            let line = match ended_input {
                true => codec.decode_eof(&mut buf),
                false => codec.decode(&mut buf),
            };
            let Ok(Some(line)) = line else {
                break;
            };
            number += 1;
            let mut decoded = match guard.as_mut() {
                Some(guard) => guard.decode(line.as_slice(), number, max_frame_bytes),
                None => decode(line.as_slice(), number, max_frame_bytes),
            };
            decoded.prepare(&policy);
            lines.push((number, decoded));
            if lines.len() == BATCH {
                let full = std::mem::take(&mut lines);
                if !send_lines(events, conn, full).await {
                    return;
                }
            }
        }
        if !lines.is_empty() && !send_lines(events, conn, lines).await {
            return;
        }
        if ended_input {
            return;
        }
    }
}

async fn send_lines(events: &mpsc::Sender<Event>, conn: ConnId, lines: Lines) -> bool {
    let event = Event::Lines {
        conn,
        lines,
        answered: None,
    };
    events.send(event).await.is_ok()
}

/// How much a connection's reader asks of its socket at once.
const READ_CHUNK: usize = 4096;
