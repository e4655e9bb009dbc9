//! How `toolgate serve` reads stdin: who reads, and when the reading
//! changes hands.
//!
//! A call that comes alone is read by the owner's own thread
//! ([`Polled`], an [`owner::Local`]): the loop waits for stdin beside its
//! channel, reads the line, decides it and writes the answer, and no other
//! thread wakes up. A flood is read by a thread of its own
//! (`read_input`), which frames, decodes and prepares the next batch while
//! the owner decides the last one, so two CPUs work. The reading (the line
//! reader with its buffer and the count of lines) is in one place at a
//! time: the owner hands it to the thread when a read brought many lines,
//! and the thread gives it back, on the owner's channel behind the lines it
//! sent, as soon as nothing is left to read.
//!
//! This needs a stdin that can be waited for (a pipe or a socket). stdin is
//! never made non-blocking (its file description is shared with whoever
//! started toolgate): a read is made only once `poll` says it will not
//! block. Any other stdin (a file, a terminal, `/dev/null`) and the
//! in-memory input of [`super::stdio::run`] are read by the thread alone,
//! with blocking reads.
//!
//! [`owner::Local`]: crate::owner::Local

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::oneshot;

use crate::broker::ConnId;
use crate::owner::{Backlog, Event, Lines, Local, Shared};
use crate::transport::lines::{decode, Reader, READ_CHUNK};

/// The most lines handed over at once: a flood comes in batches this large,
/// and each batch costs the owner a wake-up and the writer a `write`.
pub const BATCH: usize = 1024;

/// While this many frames wait for stdout, stdin is not read (backpressure,
/// as a pipe gives).
pub const HIGH_WATER: usize = BATCH;

/// A read that brought this many complete lines (or filled the read
/// buffer) makes the owner hand the reading to the thread: the input comes
/// faster than one at a time.
const FLOOD: usize = 16;

/// The reading of one input: its line reader (with what it buffered) and
/// how many lines it read.
pub struct Reading<R> {
    reader: Reader<R>,
    number: u64,
}

impl<R: Read> Reading<R> {
    /// The reading of `input`, lines of at most `max` bytes.
    pub fn new(input: R, max: usize) -> Reading<R> {
        Reading {
            reader: Reader::new(input, max),
            number: 0,
        }
    }
}

/// stdin read only when a read cannot block: `read` fails with
/// `WouldBlock` when `poll` says nothing (not even the end) is there.
#[cfg(unix)]
pub struct Avail(std::fs::File);

#[cfg(unix)]
impl Read for Avail {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&self.0, PollFlags::IN)];
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        if poll(&mut fds, Some(&now))? == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        // Readable, closed or failed: the read returns at once (with the
        // bytes, 0 at the end, or the error).
        Ok(rustix::io::read(&self.0, buf)?)
    }
}

/// Whether this process's stdin can be waited for (a pipe or a socket).
#[cfg(unix)]
pub fn pollable() -> bool {
    use rustix::fs::FileType;
    rustix::fs::fstat(io::stdin()).is_ok_and(|stat| {
        matches!(
            FileType::from_raw_mode(stat.st_mode),
            FileType::Fifo | FileType::Socket
        )
    })
}

/// stdin read by the owner's thread while calls come one at a time.
#[cfg(unix)]
pub struct Polled {
    ready: tokio::io::unix::AsyncFd<std::fs::File>,
    /// The reading, unless it is with the thread.
    reading: Option<Reading<Avail>>,
    /// Where the reading goes when a flood comes.
    to_thread: std::sync::mpsc::Sender<Reading<Avail>>,
    backlog: Arc<Backlog>,
    conn: ConnId,
    max_frame_bytes: usize,
    ended: bool,
}

#[cfg(unix)]
impl Polled {
    /// stdin, watched by the current runtime; its reading goes to the
    /// thread through `to_thread`. `None` when it cannot be watched.
    pub fn stdin(
        conn: ConnId,
        max_frame_bytes: usize,
        backlog: Arc<Backlog>,
        to_thread: std::sync::mpsc::Sender<Reading<Avail>>,
    ) -> io::Result<Polled> {
        use std::os::fd::AsFd;
        // Copies of descriptor 0 (the same open pipe or socket), owned
        // here: one watched, one read.
        let copy = || {
            io::stdin()
                .as_fd()
                .try_clone_to_owned()
                .map(std::fs::File::from)
        };
        // `with_interest` is deprecated for a `T` whose descriptor might
        // change or close while registered; a `File` owns its one
        // descriptor, and it is never lent mutably here (its replacement is
        // `unsafe`, which this crate forbids).
        #[allow(deprecated)]
        let ready =
            tokio::io::unix::AsyncFd::with_interest(copy()?, tokio::io::Interest::READABLE)?;
        Ok(Polled {
            ready,
            reading: Some(Reading::new(Avail(copy()?), max_frame_bytes)),
            to_thread,
            backlog,
            conn,
            max_frame_bytes,
            ended: false,
        })
    }

    /// Give the reading to the thread.
    fn hand_off(&mut self) {
        if let Some(reading) = self.reading.take() {
            if let Err(returned) = self.to_thread.send(reading) {
                // The thread is gone: read on here.
                self.reading = Some(returned.0);
            }
        }
    }
}

#[cfg(unix)]
impl Local for Polled {
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Event> {
        if self.ended || self.reading.is_none() {
            return Poll::Pending;
        }
        if self.backlog.frames() >= HIGH_WATER {
            // stdout is behind: the thread waits for it before reading on.
            self.hand_off();
            return Poll::Pending;
        }
        loop {
            let mut guard = match self.ready.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(guard)) => guard,
                Poll::Ready(Err(err)) => {
                    tracing::warn!(%err, "waiting for input failed; treating it as end of input");
                    self.ended = true;
                    return Poll::Ready(Event::End);
                }
            };
            let Some(reading) = self.reading.as_mut() else {
                return Poll::Pending;
            };
            let mut lines: Lines = Vec::new();
            let mut ended = false;
            loop {
                match reading.reader.next_line() {
                    Ok(Some(line)) => {
                        reading.number += 1;
                        let number = reading.number;
                        lines.push((
                            number,
                            decode(line.as_slice(), number, self.max_frame_bytes),
                        ));
                    }
                    Ok(None) => ended = true,
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                        guard.clear_ready();
                        break;
                    }
                    Err(err) => {
                        tracing::warn!(%err, "reading input failed; treating it as end of input");
                        ended = true;
                    }
                }
                // The complete lines read in one go; never wait for more
                // while a line read is unanswered.
                if ended || lines.len() >= BATCH || !reading.reader.has_line() {
                    break;
                }
            }
            if lines.is_empty() {
                if ended {
                    self.ended = true;
                    return Poll::Ready(Event::End);
                }
                continue;
            }
            // A flood: the thread reads on while these are decided. (At
            // the end of input the end is said on the next poll.)
            if !ended && (lines.len() >= FLOOD || reading.reader.last_read() >= READ_CHUNK) {
                self.hand_off();
            }
            return Poll::Ready(Event::Lines {
                conn: self.conn,
                lines,
                answered: None,
            });
        }
    }

    fn resume(&mut self, reading: Box<dyn std::any::Any + Send>) {
        if let Ok(reading) = reading.downcast::<Reading<Avail>>() {
            self.reading = Some(*reading);
        }
    }
}

/// What the thread shares with the rest of the transport.
pub struct Thread<'a> {
    /// Its connection.
    pub conn: ConnId,
    /// The longest line.
    pub max_frame_bytes: usize,
    /// The owner's channel.
    pub events: &'a mpsc::Sender<Event>,
    /// The policy, and whether the broker stopped.
    pub shared: &'a Shared,
    /// True while the thread holds lines not yet handed over.
    pub holding: &'a AtomicBool,
    /// The frames stdout has not written yet.
    pub backlog: &'a Backlog,
    /// The owner's runtime, to wait for stdout on.
    pub handle: &'a tokio::runtime::Handle,
    /// The owner reads too ([`Polled`]): an input with nothing more for
    /// now is given back. Otherwise a read that would block is an error.
    pub gives_back: bool,
}

/// The reader thread: read while it holds the reading (from the start, or
/// each time the owner hands it over), until end of input, a `shutdown`
/// that stopped the broker, or a signal. A reading whose input has nothing
/// more for now goes back to the owner.
pub fn run_thread<R: Read + Send + 'static>(
    mut next: Option<Reading<R>>,
    handed: std::sync::mpsc::Receiver<Reading<R>>,
    thread: &Thread<'_>,
) {
    loop {
        let mut reading = match next.take() {
            Some(reading) => reading,
            None => match handed.recv() {
                Ok(reading) => reading,
                Err(_) => return,
            },
        };
        if !read_input(&mut reading, thread) {
            return;
        }
        // Nothing more to read for now: the owner waits for it.
        if thread
            .events
            .blocking_send(Event::Resume(Box::new(reading)))
            .is_err()
        {
            return;
        }
    }
}

/// Frame, decode and hand over batches of lines. False when reading is
/// over (end of input, a `shutdown` that stopped the broker, a signal);
/// true when the input has nothing more for now (only an input that says
/// so, [`Avail`]).
fn read_input<R: Read>(reading: &mut Reading<R>, thread: &Thread<'_>) -> bool {
    let max = thread.max_frame_bytes;
    loop {
        if thread.backlog.frames() >= HIGH_WATER {
            thread
                .handle
                .block_on(thread.backlog.below(HIGH_WATER, None));
        }
        let mut lines: Lines = Vec::new();
        let mut ended = false;
        let mut idle = false;
        loop {
            // Stopped by a signal or `shutdown`: nothing more is read.
            if thread.shared.stopped.is_cancelled() {
                ended = true;
                break;
            }
            match reading.reader.next_line() {
                Ok(Some(line)) => {
                    thread.holding.store(true, Ordering::SeqCst);
                    reading.number += 1;
                    let number = reading.number;
                    lines.push((number, decode(line.as_slice(), number, max)));
                }
                Ok(None) => ended = true,
                Err(err) if thread.gives_back && err.kind() == io::ErrorKind::WouldBlock => {
                    idle = true;
                }
                Err(err) => {
                    tracing::warn!(%err, "reading input failed; treating it as end of input");
                    ended = true;
                }
            }
            // Take the complete lines already read in one go; never wait
            // for more while a line read is unanswered.
            if ended || idle || lines.len() >= BATCH || !reading.reader.has_line() {
                break;
            }
        }
        let mut answered = None;
        if !lines.is_empty() {
            let shutdown = lines.iter().any(|(_, decoded)| decoded.is_shutdown());
            let (told, told_on) = match shutdown {
                true => {
                    let (told, told_on) = oneshot::channel();
                    (Some(told), Some(told_on))
                }
                false => (None, None),
            };
            answered = told_on;
            let event = Event::Lines {
                conn: thread.conn,
                lines,
                answered: told,
            };
            let handed = hand_over(thread.events, event, thread.shared);
            thread.holding.store(false, Ordering::SeqCst);
            if !handed {
                return false;
            }
        }
        if let Some(answered) = answered {
            // After a `shutdown` the broker may be done: find out before
            // reading on, since more input may never come.
            if answered.blocking_recv().unwrap_or(true) {
                return false;
            }
        }
        if ended {
            if !thread.shared.stopped.is_cancelled() {
                let _ = thread.events.blocking_send(Event::End);
            }
            return false;
        }
        if idle {
            return true;
        }
    }
}

/// Hand a batch to the owner. While the owner is too busy to take it, the
/// reader prepares the batch's calls (the part of their judgement the policy
/// decides alone, `Decoded::prepare`) instead of waiting. False when the
/// owner is gone.
fn hand_over(events: &mpsc::Sender<Event>, mut event: Event, shared: &Shared) -> bool {
    let mut policy = None;
    let mut next = 0;
    loop {
        match events.try_send(event) {
            Ok(()) => return true,
            Err(TrySendError::Closed(_)) => return false,
            Err(TrySendError::Full(returned)) => event = returned,
        }
        let Event::Lines { lines, .. } = &mut event else {
            return events.blocking_send(event).is_ok();
        };
        let policy = policy.get_or_insert_with(|| {
            // What the disk says about repositories is asked afresh for
            // these lines (see `repo::next_batch`).
            crate::disk::repo::next_batch();
            shared.policy.borrow().clone()
        });
        let mut prepared = false;
        while next < lines.len() && !prepared {
            prepared = lines[next].1.prepare(policy);
            next += 1;
        }
        if !prepared || shared.stopped.is_cancelled() {
            return events.blocking_send(event).is_ok();
        }
    }
}
