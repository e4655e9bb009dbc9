//! Link answers remembered while inotify reports no change.
//!
//! A path judged to cross no symbolic link stays so until a directory the
//! answer looked in changes: a name in it is created, deleted, moved in or
//! out, or the directory itself is deleted or moved. A change of mode or
//! owner is not watched: it makes no link appear or go, and asking for it
//! (`IN_ATTRIB`) makes the kernel mark every entry of the directory when the
//! watch is added (7 ms for a `/tmp` of 3,500 names). Each of those directories carries
//! an inotify watch, added *before* the disk is asked (so a change made
//! while it is asked is reported too). Any reported change forgets every
//! remembered answer of that memory, and the watches at and below the name
//! that changed (the directory now there may be another one); a full queue
//! forgets everything.
//!
//! The kernel queues an event before the call that made the change returns,
//! so reading the queue (one `ioctl(FIONREAD)` that finds it empty) when a
//! judgement begins ([`begin_call`]) sees every change made before: an
//! answer used is the disk's at the call's first link question, as without
//! memory. `serve` reads it once for a batch of calls instead: it prepares
//! them [`deferred`], reads the queue ([`confirm`]) before any of their
//! decisions is made, and judges again every call whose preparation began
//! before a read that found changes ([`epoch`]); an answer it uses is then
//! the disk's at the confirmation, later than the judgement. What
//! inotify does not report is not seen: a mount (or unmount) on a watched
//! path, and changes made on another machine to a network file system; a
//! mount is not a link for the kernel's `RESOLVE_NO_SYMLINKS` walk either.
//!
//! Each thread keeps two memories: one below the project's real root (names relative
//! to it, watched through `/proc/self/fd`, so a root moved away is still
//! the one the descriptor holds), one for absolute paths. [`confirm`] looks
//! at every thread's queues without their owners' locks, and takes an
//! owner's lock only to read changes it found, and only when it is free.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, TryLockError, Weak};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::Unknown;

/// Looked up for every path of every call: a fast hasher.
type Hasher = foldhash::fast::RandomState;

/// The most directories one memory watches; beyond, answers are not kept.
const MAX_DIRS: usize = 1024;
/// The most answers one memory keeps; beyond, it starts again.
const MAX_ANSWERS: usize = 8192;

/// What a watched directory reports: every change to a name in it that can
/// change how a path through it resolves.
fn watch_flags() -> WatchFlags {
    WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
        | WatchFlags::DONT_FOLLOW
}

/// Is a directory watched now?
enum Watch {
    Yes,
    /// It does not exist (or is not a directory): its parent's watch
    /// reports its creation.
    Missing,
    /// It could not be watched: the answer is not kept.
    Failed,
}

/// A memory's inotify queue, which [`confirm`] reads from any thread
/// without taking the owner's lock.
struct Queue {
    fd: OwnedFd,
    /// A confirmation found changes on the queue that its owner has not
    /// read yet: the owner reads them at its next question.
    dirty: AtomicBool,
}

/// Drops a memory's queue on a thread of its own. Closing an inotify
/// descriptor that holds watches waits for the kernel to retire them
/// (milliseconds: an RCU grace period), which would stall the judgement, or
/// the end of the thread or of the process, that dropped it; a descriptor
/// still open when the process ends is released without that wait. (A
/// confirmation holding the queue for a moment closes it itself.)
fn close_later(queue: Arc<Queue>) {
    static CLOSER: Mutex<Option<std::sync::mpsc::Sender<Arc<Queue>>>> = Mutex::new(None);
    let mut closer = CLOSER.lock().unwrap_or_else(PoisonError::into_inner);
    if closer.is_none() {
        let (send, receive) = std::sync::mpsc::channel::<Arc<Queue>>();
        let spawned = std::thread::Builder::new()
            .name("toolgate-closer".to_string())
            .spawn(move || receive.into_iter().for_each(drop));
        if spawned.is_ok() {
            *closer = Some(send);
        }
    }
    // Without the thread (it could not be started), the queue goes here.
    if let Some(send) = closer.as_ref() {
        let _ = send.send(queue);
    }
}

/// Every memory's queue, with the memories of the thread that owns it.
type Queues = Vec<(Weak<Queue>, Weak<Mutex<State>>)>;
static QUEUES: Mutex<Queues> = Mutex::new(Vec::new());

/// Answers kept while their directories report no change.
pub(super) struct Memory {
    queue: Arc<Queue>,
    /// Prepended to a directory's key to name it for `inotify_add_watch`.
    prefix: Vec<u8>,
    dirs: HashMap<Box<[u8]>, i32, Hasher>,
    by_wd: HashMap<i32, Box<[u8]>, Hasher>,
    answers: HashMap<Box<[u8]>, PathBuf, Hasher>,
    /// Where the links below a directory lead ([`links_below`]).
    trees: HashMap<Box<[u8]>, Vec<PathBuf>, Hasher>,
    /// The queue was read since the current judgement began.
    drained: bool,
}

impl Drop for Memory {
    fn drop(&mut self) {
        close_later(self.queue.clone());
    }
}

impl Memory {
    fn new(prefix: Vec<u8>) -> Option<Memory> {
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC).ok()?;
        let queue = Arc::new(Queue {
            fd,
            dirty: AtomicBool::new(false),
        });
        let owner = MINE.with(Arc::downgrade);
        let mut queues = QUEUES.lock().unwrap_or_else(PoisonError::into_inner);
        queues.retain(|(queue, _)| queue.strong_count() > 0);
        queues.push((Arc::downgrade(&queue), owner));
        drop(queues);
        Some(Memory {
            queue,
            prefix,
            dirs: HashMap::default(),
            by_wd: HashMap::default(),
            answers: HashMap::default(),
            trees: HashMap::default(),
            drained: true,
        })
    }

    /// Read the changes reported since the last time (once a judgement,
    /// or once a batch when confirmed, see [`confirm`]).
    fn drain(&mut self) {
        if self.drained && !self.queue.dirty.load(Ordering::SeqCst) {
            return;
        }
        self.drained = true;
        // Cleared before the queue is read: a change a confirmation finds
        // after this is read at the next question.
        self.queue.dirty.store(false, Ordering::SeqCst);
        // Usually nothing happened: one `ioctl(FIONREAD)`, cheaper than a
        // `read` that finds the queue empty.
        if rustix::io::ioctl_fionread(&self.queue.fd).is_ok_and(|pending| pending == 0) {
            return;
        }
        // Answers given before now may have been wrong: judgements that
        // used them are judged again (see [`epoch`]).
        EPOCH.fetch_add(1, Ordering::SeqCst);
        self.read_events();
    }

    /// Read and act on the reported changes (a buffer of its own, off the
    /// usual path).
    #[cold]
    #[inline(never)]
    fn read_events(&mut self) {
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut events: Vec<(i32, ReadFlags, Option<Vec<u8>>)> = Vec::new();
        let mut failed = false;
        {
            let mut reader = inotify::Reader::new(&self.queue.fd, &mut buf);
            loop {
                match reader.next() {
                    Ok(event) => events.push((
                        event.wd(),
                        event.events(),
                        event.file_name().map(|n| n.to_bytes().to_vec()),
                    )),
                    Err(Errno::AGAIN) => break,
                    Err(Errno::INTR) => continue,
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
        }
        if failed {
            self.forget_all();
        }
        for (wd, flags, name) in events {
            self.forget_answers();
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                self.forget_all();
                continue;
            }
            let Some(dir) = self.by_wd.get(&wd).cloned() else {
                continue;
            };
            let gone = ReadFlags::IGNORED
                | ReadFlags::DELETE_SELF
                | ReadFlags::MOVE_SELF
                | ReadFlags::UNMOUNT;
            match name {
                _ if flags.intersects(gone) => self.forget_under(&dir),
                Some(name) => self.forget_under(&join(&dir, &name)),
                None => {}
            }
        }
    }

    fn forget_answers(&mut self) {
        self.answers.clear();
        self.trees.clear();
    }

    fn forget_all(&mut self) {
        self.forget_answers();
        for (_, wd) in self.dirs.drain() {
            let _ = inotify::remove_watch(&self.queue.fd, wd);
        }
        self.by_wd.clear();
    }

    /// Forget the watches of `dir` and of every directory below it.
    fn forget_under(&mut self, dir: &[u8]) {
        let gone: Vec<Box<[u8]>> = self
            .dirs
            .keys()
            .filter(|key| under(key, dir))
            .cloned()
            .collect();
        for key in gone {
            if let Some(wd) = self.dirs.remove(&key) {
                self.by_wd.remove(&wd);
                let _ = inotify::remove_watch(&self.queue.fd, wd);
            }
        }
    }

    fn knows(&self, key: &[u8]) -> Option<&PathBuf> {
        self.answers.get(key)
    }

    fn remember(&mut self, key: &[u8], answer: PathBuf) {
        if self.answers.len() + self.trees.len() >= MAX_ANSWERS {
            self.forget_answers();
        }
        self.answers.insert(key.into(), answer);
    }

    /// Watch the directory `key` (named by the prefix and the key).
    fn watch(&mut self, key: &[u8]) -> Watch {
        if self.dirs.contains_key(key) {
            return Watch::Yes;
        }
        if self.dirs.len() >= MAX_DIRS {
            return Watch::Failed;
        }
        let mut name = self.prefix.clone();
        name.extend_from_slice(if key.is_empty() { b"." } else { key });
        let path = Path::new(OsStr::from_bytes(&name));
        match inotify::add_watch(&self.queue.fd, path, watch_flags()) {
            Ok(wd) => {
                if self.by_wd.get(&wd).is_some_and(|seen| **seen != *key) {
                    // One directory under two names (a bind mount): its
                    // changes would forget only one of them.
                    return Watch::Failed;
                }
                self.dirs.insert(key.into(), wd);
                self.by_wd.insert(wd, key.into());
                Watch::Yes
            }
            Err(Errno::NOENT | Errno::NOTDIR) => Watch::Missing,
            Err(_) => Watch::Failed,
        }
    }

    /// Watch the root and every directory on the way to `relative`'s last
    /// component, top down, up to the first that does not exist. False when
    /// an answer about `relative` could not be kept.
    fn watch_below(&mut self, relative: &Path) -> bool {
        if !matches!(self.watch(b""), Watch::Yes) {
            return false;
        }
        let mut parts = Vec::new();
        for component in relative.components() {
            match component {
                Component::Normal(name) => parts.push(name),
                _ => return false,
            }
        }
        let mut key: Vec<u8> = Vec::new();
        for name in parts.iter().take(parts.len().saturating_sub(1)) {
            if !key.is_empty() {
                key.push(b'/');
            }
            key.extend_from_slice(name.as_encoded_bytes());
            match self.watch(&key) {
                Watch::Yes => {}
                Watch::Missing => return true,
                Watch::Failed => return false,
            }
        }
        true
    }
}

/// `key` is `dir` or below it (`dir` empty: the root of a relative memory).
fn under(key: &[u8], dir: &[u8]) -> bool {
    dir.is_empty()
        || key == dir
        || (key.starts_with(dir) && (dir.ends_with(b"/") || key.get(dir.len()) == Some(&b'/')))
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut out = dir.to_vec();
    if !out.is_empty() && !out.ends_with(b"/") {
        out.push(b'/');
    }
    out.extend_from_slice(name);
    out
}

/// The project's real root, open, and its memory.
struct Base {
    path: PathBuf,
    fd: OwnedFd,
    memory: Option<Memory>,
    /// Making the memory was tried (inotify may be unavailable).
    tried: bool,
}

/// One thread's memories. A judgement prepared on one thread may be
/// confirmed on another ([`confirm`] reads every thread's queue): the
/// memories are behind a lock that a confirmation only tries, from another
/// thread, when it found changes.
#[derive(Default)]
struct State {
    base: Option<Base>,
    absolute: Option<Memory>,
    absolute_tried: bool,
}

impl Drop for State {
    fn drop(&mut self) {
        // Its queues go with it: judgements it answered are redone.
        EPOCH.fetch_add(1, Ordering::SeqCst);
    }
}

/// Counts the reads of the queue that found changes.
static EPOCH: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Within [`deferred`]: questions do not read the queue.
    static DEFERRED: Cell<bool> = const { Cell::new(false) };
    /// This thread's memories.
    static MINE: Arc<Mutex<State>> = Arc::new(Mutex::new(State::default()));
}

/// Calls `f` with this thread's memories.
fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    MINE.with(|mine| f(&mut mine.lock().unwrap_or_else(PoisonError::into_inner)))
}

/// A judgement begins: the next question reads the changes reported
/// (unless the judgement is [`deferred`]).
pub(super) fn begin_call() {
    if DEFERRED.get() {
        return;
    }
    with_state(|state| {
        if let Some(memory) = state.base.as_mut().and_then(|b| b.memory.as_mut()) {
            memory.drained = false;
        }
        if let Some(memory) = state.absolute.as_mut() {
            memory.drained = false;
        }
    });
}

/// How many times the queue was found to hold changes. A judgement made
/// with [`deferred`] reads this before it starts; once it is over,
/// [`confirm`] reads the queue: the same number then means no answer it
/// used had been made wrong by a change before the confirmation.
pub fn epoch() -> u64 {
    EPOCH.load(Ordering::SeqCst)
}

/// Runs `f` (judgements) without reading the queue at each call's first
/// question: the caller [`confirm`]s them all at once before their
/// decisions are used, and judges again those whose [`epoch`] changed.
pub fn deferred<R>(f: impl FnOnce() -> R) -> R {
    let before = DEFERRED.replace(true);
    let out = f();
    DEFERRED.set(before);
    out
}

/// Read every thread's queue of changes now; the [`epoch`] after.
///
/// Each queue is looked at without its owner's lock (one
/// `ioctl(FIONREAD)`): a flood's reader keeps preparing calls while the
/// worker confirms them. A queue that holds changes is marked for its owner
/// to read at its next question, the epoch moves on (every judgement
/// prepared before is judged again), and the owner's memories are read
/// here when its lock is free (an idle thread's would otherwise hold the
/// changes, and move the epoch at every confirmation).
pub fn confirm() -> u64 {
    let queues = QUEUES.lock().unwrap_or_else(PoisonError::into_inner);
    for (queue, owner) in queues.iter() {
        let Some(queue) = queue.upgrade() else {
            continue;
        };
        if rustix::io::ioctl_fionread(&queue.fd).is_ok_and(|pending| pending == 0) {
            continue;
        }
        // Marked before the epoch moves: a judgement that reads the epoch
        // after it moved finds the mark and reads the queue first.
        queue.dirty.store(true, Ordering::SeqCst);
        EPOCH.fetch_add(1, Ordering::SeqCst);
        let Some(owner) = owner.upgrade() else {
            continue;
        };
        let mut state = match owner.try_lock() {
            Ok(state) => state,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => continue,
        };
        if let Some(memory) = state.base.as_mut().and_then(|b| b.memory.as_mut()) {
            memory.drain();
        }
        if let Some(memory) = state.absolute.as_mut() {
            memory.drain();
        }
    }
    epoch()
}

/// Calls `f` with a descriptor of `base` (kept; `None` when it cannot be
/// opened) and, with `remember`, its memory.
pub(super) fn with_base<R>(
    base: &Path,
    remember: bool,
    f: impl FnOnce(Option<BorrowedFd<'_>>, Option<&mut BaseMemory<'_>>) -> R,
) -> R {
    with_state(|state| with_base_in(state, base, remember, f))
}

fn with_base_in<R>(
    state: &mut State,
    base: &Path,
    remember: bool,
    f: impl FnOnce(Option<BorrowedFd<'_>>, Option<&mut BaseMemory<'_>>) -> R,
) -> R {
    // The same bytes (not `Path`'s component-wise equality, a walk at
    // every question): another spelling of the root only opens it again.
    if state
        .base
        .as_ref()
        .is_none_or(|b| b.path.as_os_str() != base.as_os_str())
    {
        if state.base.as_ref().is_some_and(|b| b.memory.is_some()) {
            // Its queue goes with it: judgements it answered are redone.
            EPOCH.fetch_add(1, Ordering::SeqCst);
        }
        let fd = rustix::fs::open(
            base,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        );
        state.base = fd.ok().map(|fd| Base {
            path: base.to_path_buf(),
            fd,
            memory: None,
            tried: false,
        });
    }
    let Some(b) = state.base.as_mut() else {
        return f(None, None);
    };
    if remember && !b.tried {
        b.tried = true;
        let prefix = format!("/proc/self/fd/{}/", b.fd.as_raw_fd()).into_bytes();
        b.memory = Memory::new(prefix);
    }
    let fd = b.fd.as_fd();
    match b.memory.as_mut().filter(|_| remember) {
        Some(memory) => {
            memory.drain();
            f(Some(fd), Some(&mut BaseMemory(memory)))
        }
        None => f(Some(fd), None),
    }
}

/// The memory of paths below the project's real root.
pub(super) struct BaseMemory<'a>(&'a mut Memory);

impl BaseMemory<'_> {
    /// Is `relative` known to cross no link?
    pub(super) fn knows(&self, relative: &[u8]) -> bool {
        self.0.knows(relative).is_some()
    }

    /// Watch what an answer about `relative` depends on; false when it
    /// could not be kept.
    pub(super) fn watch_below(&mut self, relative: &Path) -> bool {
        self.0.watch_below(relative)
    }

    /// `relative` crosses no link.
    pub(super) fn remember(&mut self, relative: &[u8]) {
        self.0.remember(relative, PathBuf::new());
    }
}

/// The memory of absolute paths, made on first use (`None` without inotify).
fn absolute(state: &mut State) -> Option<&mut Memory> {
    if !state.absolute_tried {
        state.absolute_tried = true;
        state.absolute = Memory::new(Vec::new());
    }
    let memory = state.absolute.as_mut()?;
    memory.drain();
    Some(memory)
}

/// [`super::resolve`] of an absolute path, remembered.
pub(super) fn resolve(path: &Path) -> Result<PathBuf, Unknown> {
    with_state(|state| resolve_in(state, path))
}

fn resolve_in(state: &mut State, path: &Path) -> Result<PathBuf, Unknown> {
    let Some(memory) = absolute(state) else {
        return super::resolve(Path::new("/"), path, &mut |_| {});
    };
    let key = path.as_os_str().as_encoded_bytes();
    if let Some(real) = memory.knows(key) {
        return Ok(real.clone());
    }
    let mut keep = true;
    let real = super::resolve(Path::new("/"), path, &mut |dir| {
        keep = keep && matches!(memory.watch(dir.as_os_str().as_encoded_bytes()), Watch::Yes);
    });
    if let (true, Ok(real)) = (keep, &real) {
        memory.remember(key, real.clone());
    }
    real
}

/// [`super::links_below`] of an absolute directory, remembered: every
/// directory read (and every one a link's resolution looked in) is watched
/// before it is read; one that does not exist is reported by its parent's
/// watch, placed before the name was looked up there.
pub(super) fn links_below(dir: &Path) -> Result<Vec<PathBuf>, Unknown> {
    with_state(|state| links_below_in(state, dir))
}

fn links_below_in(state: &mut State, dir: &Path) -> Result<Vec<PathBuf>, Unknown> {
    let Some(memory) = absolute(state) else {
        return super::links_below(dir, &mut |_| {});
    };
    let key = dir.as_os_str().as_encoded_bytes();
    if let Some(found) = memory.trees.get(key) {
        return Ok(found.clone());
    }
    let mut keep = true;
    let found = super::links_below(dir, &mut |looked| {
        keep = keep
            && matches!(
                memory.watch(looked.as_os_str().as_encoded_bytes()),
                Watch::Yes | Watch::Missing
            );
    });
    if let (true, Ok(found)) = (keep, &found) {
        if memory.answers.len() + memory.trees.len() >= MAX_ANSWERS {
            memory.forget_answers();
        }
        memory.trees.insert(key.into(), found.clone());
    }
    found
}
