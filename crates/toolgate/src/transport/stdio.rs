//! `toolgate serve` on stdin and stdout: one client, connection 0. The
//! owner ([`crate::owner`]) runs on a single-threaded tokio runtime with the
//! signals, the deadline timer and an in-process approver. stdin is read as
//! [`super::stdin`] says: a call that comes alone by the owner's own thread,
//! a flood by a thread of its own that frames, decodes and prepares the next
//! batch (at most [`stdin::BATCH`] lines) while the owner decides the last.
//! stdout is written by the owner itself when the write cannot block, else
//! by a thread of its own, one `write` per batch, so a client that stops
//! reading never holds up the owner: stdin is not read while
//! [`stdin::HIGH_WATER`] frames wait.
//!
//! Every complete line is decided and its frames written without waiting for
//! more input. After a batch holding a `shutdown` frame nothing more is read
//! until that batch is answered, so `shutdown` ends the run even while the
//! input stays open. At end of input what is open is denied.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::broker::{Broker, ConnId, Input};
use crate::owner::{Backlog, Chunk, Direct, Event, Local, NoLocal, Outbox, Owner, Sink};
use crate::transport::signals::{self, Reloader};
use crate::transport::stdin::{self, Reading, Thread};

/// The one connection of the stdio transport.
const STDIO: ConnId = 0;

/// The connection of the in-process approver (`serve --approver`).
pub const APPROVER: ConnId = 1;

/// How many batches may wait for the owner; then the reader prepares, then
/// waits, so a flood holds a bounded amount of memory.
const QUEUED: usize = 2;

/// How long, after SIGTERM or SIGINT, the denials may take to be written
/// (and the reader to hand over what it read) before the process ends
/// without them.
const STOP_PATIENCE: Duration = Duration::from_secs(5);

/// The transport stopped after a signal without writing its last frames:
/// the reason was said on stderr; the exit status is 1.
#[derive(Debug)]
pub struct Abandoned;

impl std::fmt::Display for Abandoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped without writing the last frames")
    }
}

impl std::error::Error for Abandoned {}

/// Serve one client: write `ready`, then answer frames until end of input or
/// `shutdown`; deny what is still pending, write, return.
pub fn run<R, W>(input: R, output: W, broker: Broker, max_frame_bytes: usize) -> io::Result<()>
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    serve(
        Source::Blocking(input),
        output,
        Room::Always,
        broker,
        max_frame_bytes,
        None,
        None,
    )
}

/// Where the frames come from.
pub enum Source<R> {
    /// Read by a thread of its own with blocking reads (a file, a
    /// terminal, memory).
    Blocking(R),
    /// This process's stdin, a pipe or a socket: read by the owner while
    /// calls come one at a time (see [`super::stdin`]).
    #[cfg(unix)]
    Stdin,
}

impl Source<io::Stdin> {
    /// This process's stdin, read the best way it allows.
    pub fn stdin() -> Source<io::Stdin> {
        #[cfg(unix)]
        if stdin::pollable() {
            return Source::Stdin;
        }
        Source::Blocking(io::stdin())
    }
}

/// [`run`] (`room` says whether a write to `output` can block), with
/// signals acted on (`reloader` says how SIGHUP loads the
/// policy) and an in-process approver: a second connection, [`APPROVER`],
/// that says `hello` with role approver before stdin is read, so every
/// question (and its end) is addressed to it and never to stdout.
pub fn serve<R, W>(
    input: Source<R>,
    output: W,
    room: Room,
    broker: Broker,
    max_frame_bytes: usize,
    reloader: Option<Reloader>,
    approver: Option<Box<dyn crate::owner::Approver>>,
) -> io::Result<()>
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (events, mut received) = mpsc::channel::<Event>(QUEUED);
    // Signals are watched before `ready` is written: a client that signals
    // as soon as it is greeted is heard.
    let entered = runtime.enter();
    if let Some(reloader) = reloader {
        signals::watch(reloader, events.clone());
    }
    let (mut owner, shared) = Owner::new(broker, None);
    let (mut outbox, chunks) = Outbox::new();
    let backlog = outbox.backlog.clone();
    let out = Arc::new(Out {
        writer: std::sync::Mutex::new((output, None)),
        room,
    });
    if !matches!(out.room, Room::Unknown) {
        outbox.direct = Some(out.clone());
    }
    let (written, finished) = std::sync::mpsc::channel();
    let write_backlog = backlog.clone();
    let writing = out.clone();
    std::thread::Builder::new()
        .name("toolgate-stdout".into())
        .spawn(move || {
            write_out(&writing, chunks, &write_backlog);
            let _ = written.send(());
        })?;
    owner.handle(Event::Opened {
        conn: STDIO,
        sink: Sink::Lines(outbox),
        token: None,
    });
    if let Some(approver) = approver {
        // The agent's pipe never answers: only this approver does. Its
        // tasks put its answers straight on the owner's channel.
        let name = approver.name();
        let approver = approver.start(crate::owner::Answers::new(APPROVER, events.clone()))?;
        owner.broker().reserve_approver(APPROVER);
        owner.handle(Event::Opened {
            conn: APPROVER,
            sink: Sink::Approver(approver),
            token: None,
        });
        let hello = toolgate_protocol::Hello {
            role: toolgate_protocol::Role::Approver,
            client: Some(name.to_string()),
            session_id: None,
            token: None,
            projects: None,
        };
        owner.step(Input::Frame {
            conn: APPROVER,
            frame: toolgate_protocol::ClientFrame::Hello(hello),
            number: Some(1),
        });
        owner.flush();
    }
    let holding = Arc::new(AtomicBool::new(false));
    let handle = runtime.handle().clone();
    // The owner reads stdin itself when it can wait for it; the thread
    // reads when handed the reading (a flood), or from the start.
    let (to_thread, local): (_, Box<dyn Local>) = match input {
        Source::Blocking(input) => {
            let first = Reading::new(input, max_frame_bytes);
            let (_, handed) = std::sync::mpsc::channel();
            let thread = (
                events.clone(),
                shared.clone(),
                holding.clone(),
                backlog.clone(),
            );
            spawn_reader(Some(first), handed, thread, handle, max_frame_bytes, false)?;
            (None, Box::new(NoLocal))
        }
        #[cfg(unix)]
        Source::Stdin => {
            let (to_thread, handed) = std::sync::mpsc::channel();
            let thread = (
                events.clone(),
                shared.clone(),
                holding.clone(),
                backlog.clone(),
            );
            let polled = stdin::Polled::stdin(STDIO, max_frame_bytes, backlog, to_thread.clone())?;
            spawn_reader(None, handed, thread, handle, max_frame_bytes, true)?;
            (Some(to_thread), Box::new(polled))
        }
    };
    drop(to_thread);
    drop(entered);
    let signal = runtime.block_on(async {
        drop(events);
        let mut local = local;
        let signal = owner.run(&mut received, &mut *local).await;
        // The reader thread, waiting to be handed the reading, ends.
        drop(local);
        if signal.is_some() {
            // What the reader read before the stop is denied by the stopped
            // broker; it reads nothing more, but may be blocked on its input
            // for good, so it is not waited for.
            let until = tokio::time::Instant::now() + STOP_PATIENCE;
            while holding.load(Ordering::SeqCst) && tokio::time::Instant::now() < until {
                match tokio::time::timeout(Duration::from_millis(20), received.recv()).await {
                    Ok(Some(event @ Event::Lines { .. })) => {
                        owner.handle(event);
                    }
                    Ok(Some(_)) | Err(_) => {}
                    Ok(None) => break,
                }
            }
            while let Ok(event) = received.try_recv() {
                if let Event::Lines { .. } = event {
                    owner.handle(event);
                }
            }
        }
        signal
    });
    drop(received);
    owner.close_all();
    let mut broker = owner.into_broker();
    let output = match signal {
        None => {
            let _ = finished.recv();
            out.failed().map_or(Ok(()), Err)
        }
        Some((name, pending)) => {
            let output = match finished.recv_timeout(STOP_PATIENCE) {
                Ok(()) => out.failed().map_or(Ok(()), Err),
                Err(_) => {
                    // Nobody reads stdout: nothing more can be said.
                    crate::say!(
                        "toolgate: {name} received: the output has been blocked for {} s; stopped without answering the pending calls",
                        STOP_PATIENCE.as_secs()
                    );
                    return Err(io::Error::other(Abandoned));
                }
            };
            let calls = if pending == 1 { "call" } else { "calls" };
            match &output {
                Ok(()) => crate::say!(
                    "toolgate: {name} received: denied {pending} pending {calls} and stopped"
                ),
                Err(err) => crate::say!(
                    "toolgate: {name} received: denied {pending} pending {calls}, but the output failed: {err}"
                ),
            }
            // The client went away: a normal end after a signal.
            Ok(())
        }
    };
    drop(runtime);
    // Nothing in force may be lost quietly: a change a failed write left
    // unsaved is written now, or the run ends with what was lost.
    match (broker.finish_saving(), output) {
        (Ok(()), output) => output,
        (Err(lost), output) => {
            if let Err(err) = output {
                tracing::warn!("the output failed: {err}");
            }
            Err(io::Error::other(lost))
        }
    }
}

/// Start the stdin thread: it reads from the start with `first`, or each
/// time it is handed the reading through `handed`.
fn spawn_reader<R: Read + Send + 'static>(
    first: Option<Reading<R>>,
    handed: std::sync::mpsc::Receiver<Reading<R>>,
    (events, shared, holding, backlog): (
        mpsc::Sender<Event>,
        crate::owner::Shared,
        Arc<AtomicBool>,
        Arc<Backlog>,
    ),
    handle: tokio::runtime::Handle,
    max_frame_bytes: usize,
    gives_back: bool,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("toolgate-stdin".into())
        .spawn(move || {
            let thread = Thread {
                conn: STDIO,
                max_frame_bytes,
                events: &events,
                shared: &shared,
                holding: &holding,
                backlog: &backlog,
                handle: &handle,
                gives_back,
            };
            stdin::run_thread(first, handed, &thread);
        })?;
    Ok(())
}

/// stdout, shared by its writer thread and the owner's own writes: the
/// writer, the first write error (the rest is dropped after it), and
/// whether a write can block.
struct Out<W> {
    writer: std::sync::Mutex<(W, Option<io::Error>)>,
    room: Room,
}

impl<W: Write> Out<W> {
    /// Write and flush `bytes`, unless an earlier write failed.
    fn write(&self, bytes: &[u8]) {
        let mut guard = self
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (writer, failed) = &mut *guard;
        if failed.is_none() {
            if let Err(err) = writer.write_all(bytes).and_then(|()| writer.flush()) {
                *failed = Some(err);
            }
        }
    }

    /// The first write error, taken.
    fn failed(&self) -> Option<io::Error> {
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .1
            .take()
    }
}

impl<W: Write + Send> Direct for Out<W> {
    fn write_now(&self, bytes: &[u8]) -> bool {
        if !self.room.fits(bytes.len()) {
            return false;
        }
        self.write(bytes);
        true
    }
}

/// Whether a write to the output can block, which decides whether the owner
/// may write a frame itself (saving a wake-up of the writer thread per
/// call) or must leave it to the writer thread.
pub enum Room {
    /// Never: memory, a regular file, `/dev/null`.
    Always,
    /// For all we know it may (a terminal, a socket): every frame goes
    /// through the writer thread.
    Unknown,
    /// A pipe of this capacity: a write fits while the bytes unread in it
    /// leave room (with two pages to spare, for the partly read page at its
    /// head and the partly written one at its tail).
    #[cfg(target_os = "linux")]
    Pipe(std::io::Stdout, usize),
}

impl Room {
    /// What this process's stdout is.
    pub fn of_stdout() -> Room {
        #[cfg(unix)]
        {
            use rustix::fs::FileType;
            let out = std::io::stdout();
            let Ok(stat) = rustix::fs::fstat(&out) else {
                return Room::Unknown;
            };
            match FileType::from_raw_mode(stat.st_mode) {
                FileType::RegularFile => Room::Always,
                FileType::CharacterDevice if !std::io::IsTerminal::is_terminal(&out) => {
                    Room::Always
                }
                #[cfg(target_os = "linux")]
                FileType::Fifo => match rustix::pipe::fcntl_getpipe_size(&out) {
                    Ok(capacity) => Room::Pipe(out, capacity),
                    Err(_) => Room::Unknown,
                },
                _ => Room::Unknown,
            }
        }
        #[cfg(not(unix))]
        {
            Room::Unknown
        }
    }

    fn fits(&self, len: usize) -> bool {
        match self {
            Room::Always => true,
            Room::Unknown => false,
            #[cfg(target_os = "linux")]
            Room::Pipe(out, capacity) => rustix::io::ioctl_fionread(out)
                .is_ok_and(|unread| (unread as usize).saturating_add(len) + 8192 <= *capacity),
        }
    }
}

/// The stdout thread: write what the owner queued, every chunk waiting at
/// once (one `write` and flush for a flood).
fn write_out<W: Write>(
    out: &Out<W>,
    mut chunks: mpsc::UnboundedReceiver<Chunk>,
    backlog: &Backlog,
) {
    while let Some(first) = chunks.blocking_recv() {
        let (buffer, count) = crate::owner::gather(first, &mut chunks);
        out.write(&buffer);
        backlog.written(count);
    }
}
