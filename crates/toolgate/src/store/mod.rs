//! The state that survives a restart (`--state-dir DIR`): per project root,
//! a snapshot file and a journal of the changes made since.
//!
//! - The snapshot for a project is `DIR/project-<16 hex digits>.json`, the
//!   digits being the 64-bit FNV-1a hash of the project root's path
//!   ([`state_file`]). It records `projectRoot`; a file whose `projectRoot`
//!   differs (a hash collision, or a copied file) is never used for another
//!   project: the store warns and moves on to `project-<hash>-2.json`, `-3`, ...
//! - Beside it, `project-<hash>.journal` ([`journal_file`]): one JSON line per
//!   [`Change`]. Its first line, `{"journalGeneration":N}`, names the snapshot
//!   it follows: the snapshot's `journalGeneration` field. A journal of
//!   another generation (or beside a snapshot that names none) is stale and
//!   ignored.
//! - A change is one `write` of its line to the journal: its cost is the
//!   size of the change, not of the state. Session starts are staged
//!   ([`Store::stage`]) and synced together (`fdatasync`) by
//!   [`Store::commit`], which the transport calls before it writes a batch
//!   of frames: one sync per batch of input lines. Grants and what shuts or
//!   narrows (a session ended or refused, a grant revoked, a mode set) are
//!   synced at once ([`Store::record`]), since their frame says whether
//!   saving failed. Either way nothing is reported before it is on disk.
//! - A failed write leaves the change in [`Store::unsaved`]: the store keeps
//!   it, and the next change or [`Store::retry`] writes the whole state.
//! - Compaction: when the journal outgrows twice the snapshot and
//!   [`COMPACT_FLOOR`] (1 MiB; [`COMPACT_FLOOR_ENV`] changes it, for tests),
//!   the whole state is written as a new snapshot under generation N+1, then
//!   a new journal holding only its header. Each file is replaced atomically
//!   (written to a temporary file in the same directory, synced, renamed
//!   over, directory synced). A crash between the two leaves the new
//!   snapshot and a stale journal: nothing is lost or applied twice. The
//!   first change after a start that found no usable journal compacts too.
//! - Loading reads the snapshot and replays the journal. A last line without
//!   its newline is a write that was never confirmed (so never reported): it
//!   is ignored with a warning, and the next change starts a new journal
//!   rather than append after it. Any other line that is not a change (the
//!   header included) keeps the broker from starting (fail closed: nothing
//!   after a bad record can be trusted to be complete, and a lost revocation
//!   or session end must not come back as a grant or an open session) until
//!   [`repair`]. A snapshot that names no journal generation ignores
//!   whatever journal is beside it.
//! - Opening fails for such a journal, and likewise for a snapshot that
//!   cannot be read, is not JSON, has another `version` or does not fit
//!   together, and for a journal with no snapshot beside it: starting clean
//!   would forget which sessions ended and which grants were revoked.
//!   Nothing is moved; [`repair`] keeps what can be read.
//! - One broker per project root and state directory at a time: the broker
//!   holds `<file>.lock` (an advisory lock); a second one reads the state but
//!   keeps its changes in memory.
//! - Sessions are kept when they were started, given a mode, hold grants or
//!   are the parent of a kept session (an implicit parent is marked
//!   `implicit`), with whether they were `started`. Every session that ended or
//!   whose start was refused is kept, without a count bound, as the
//!   fingerprint of its id ([`session_fingerprint`]) in `closed`.
//!
//! [`repair`] serves `toolgate state repair`: a journal with a bad line
//! before its last keeps the broker from starting, and the repair keeps
//! every record that can be read.
//!
//! [`list_grants`] and [`revoke_grants`] serve `toolgate grants list|revoke`,
//! which read the snapshot and the journal, and work while no broker holds
//! the files (a revocation writes a snapshot that names no journal).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolgate_policy::GrantPattern;
use toolgate_protocol::ScopeSpec;

mod error;
mod repair;
pub use error::{Invalid, IoOp, JournalDamage, StateError, Task, Unreadable};
pub use repair::{repair, LineLoss, Repaired};

/// The state file format this build reads and writes.
pub const VERSION: u32 = 1;

/// How many file names [`FileStore::open`] tries when state files of other
/// projects hash to the same name.
const COLLISION_LIMIT: u32 = 16;

/// Everything that survives a restart for one project root.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The file format, [`VERSION`]; files of other versions are treated as unreadable.
    pub version: u32,
    /// The project root the state belongs to, as an absolute path.
    #[serde(rename = "projectRoot")]
    pub project_root: String,
    /// Grants kept for every session of the project.
    #[serde(rename = "projectGrants")]
    pub project_grants: Vec<StoredGrant>,
    /// The sessions, sorted by `sessionID` when saved.
    pub sessions: Vec<StoredSession>,
    /// Every session that ended or whose `session_start` was refused, by
    /// fingerprint (see [`session_fingerprint`]), sorted: their calls stay
    /// denied after a restart until they are started again. Files written
    /// before this field held `endedSessions` (a list of ids);
    /// [`parse_snapshot`] converts it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closed: Vec<StoredClosed>,
}

/// A session that may not run calls, as stored: the fingerprint of its id
/// and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredClosed {
    /// [`session_fingerprint`] of the session id: 16 lowercase hex digits.
    pub fingerprint: String,
    /// `ended` or `refused`.
    pub why: String,
}

/// The fingerprint that stands for a closed session id: the 64-bit FNV-1a
/// hash of its UTF-8 bytes. Two ids with the same fingerprint are one for
/// the closed list, so a collision can only make a session that never ended
/// look ended (its calls denied), never the reverse.
pub fn session_fingerprint(session_id: &str) -> u64 {
    fnv1a(session_id.as_bytes())
}

/// One grant as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredGrant {
    /// The grant's id (`grant_...`), as `list_grants` and `revoke_grant` name it.
    #[serde(rename = "grantID")]
    pub grant_id: String,
    /// The permission it answers (`bash`, `edit`, ...).
    pub permission: String,
    /// The pattern as shown (`git commit *`).
    pub pattern: String,
    /// How many bytes at the start of `pattern` are literal text; the rest is
    /// a wildcard tail. See `toolgate_policy::GrantPattern::{from_parts, literal_len}`.
    pub literal: usize,
    /// The session whose `always` answer made the grant.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// `plan` for a kind grant made in plan mode, which covers only in plan
    /// mode; absent for every other grant (and in files of earlier builds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// One session as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredSession {
    /// The session's id.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// The parent session, for sub-sessions.
    #[serde(rename = "parentID", default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// The session's own mode name.
    pub mode: String,
    /// The narrowing this session itself added to its ancestors' scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<ScopeSpec>,
    /// The session's own grants.
    pub grants: Vec<StoredGrant>,
    /// Started by `session_start`: a second start is refused. Files written
    /// before this field guess it (a session with a parent or a scope was started).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub started: bool,
    /// Stored only because it carries grants or is the parent of a stored
    /// session: it never chose a mode (it was neither started nor given one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub implicit: bool,
}

/// One change to the stored state: a line of the journal. Each names the
/// whole value it sets or the key it removes, so applying a change twice
/// leaves the state as applying it once (replaying a journal onto the
/// snapshot it was compacted into changes nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Change {
    /// Insert or replace a whole session (its grants included). Also forgets
    /// that a session of this id was shut.
    Session(StoredSession),
    /// Forget a session and its grants.
    RemoveSession(String),
    /// Insert or replace one grant of the stored session `grant.session_id`
    /// (ignored when no such session is stored).
    SessionGrant(StoredGrant),
    /// Insert or replace a project grant.
    ProjectGrant(StoredGrant),
    /// Forget a project grant.
    RemoveProjectGrant(String),
    /// Remember that a session is shut (insert or replace by fingerprint).
    Closed(StoredClosed),
}

/// A snapshot held so that one change costs one lookup: what a store has
/// on disk, materialised (the snapshot plus every journal record).
#[derive(Debug, Clone, Default)]
struct Materialised {
    version: u32,
    project_root: String,
    project_grants: Vec<StoredGrant>,
    sessions: BTreeMap<String, StoredSession>,
    /// Shut sessions: fingerprint → why (a few bytes each: a broker may
    /// have shut millions).
    closed: BTreeMap<u64, Why>,
}

/// Why a session is shut, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Why {
    Ended,
    Refused,
    /// Any other text a file held: kept as written (the broker decides what
    /// it means when it restores).
    Other(Box<str>),
}

impl Why {
    fn of(text: String) -> Why {
        match text.as_str() {
            "ended" => Why::Ended,
            "refused" => Why::Refused,
            _ => Why::Other(text.into_boxed_str()),
        }
    }

    fn text(&self) -> String {
        match self {
            Why::Ended => "ended".to_string(),
            Why::Refused => "refused".to_string(),
            Why::Other(text) => text.to_string(),
        }
    }
}

/// The number a stored fingerprint (16 lowercase hex digits) stands for.
fn fingerprint_value(text: &str) -> Option<u64> {
    let hex = text.len() == 16
        && text
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte));
    hex.then(|| u64::from_str_radix(text, 16).ok()).flatten()
}

impl Materialised {
    fn from_snapshot(snapshot: Snapshot) -> Materialised {
        let mut state = Materialised {
            version: snapshot.version,
            project_root: snapshot.project_root,
            ..Materialised::default()
        };
        for grant in snapshot.project_grants {
            upsert_grant(&mut state.project_grants, grant);
        }
        for session in snapshot.sessions {
            state.sessions.insert(session.session_id.clone(), session);
        }
        for closed in snapshot.closed {
            state.apply(Change::Closed(closed));
        }
        state
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            version: self.version,
            project_root: self.project_root.clone(),
            project_grants: self.project_grants.clone(),
            sessions: self.sessions.values().cloned().collect(),
            closed: self
                .closed
                .iter()
                .map(|(print, why)| StoredClosed {
                    fingerprint: format!("{print:016x}"),
                    why: why.text(),
                })
                .collect(),
        }
    }

    fn apply(&mut self, change: Change) {
        match change {
            Change::Session(session) => {
                self.closed
                    .remove(&session_fingerprint(&session.session_id));
                self.sessions.insert(session.session_id.clone(), session);
            }
            Change::RemoveSession(id) => {
                self.sessions.remove(&id);
            }
            Change::SessionGrant(grant) => {
                if let Some(session) = self.sessions.get_mut(&grant.session_id) {
                    upsert_grant(&mut session.grants, grant);
                }
            }
            Change::ProjectGrant(grant) => upsert_grant(&mut self.project_grants, grant),
            Change::RemoveProjectGrant(id) => {
                self.project_grants.retain(|grant| grant.grant_id != id);
            }
            Change::Closed(closed) => {
                // Checked when read (check_change, parse_state): an unusable
                // fingerprint never reaches a store.
                if let Some(print) = fingerprint_value(&closed.fingerprint) {
                    self.closed.insert(print, Why::of(closed.why));
                }
            }
        }
    }
}

fn upsert_grant(grants: &mut Vec<StoredGrant>, grant: StoredGrant) {
    match grants.iter_mut().find(|old| old.grant_id == grant.grant_id) {
        Some(old) => *old = grant,
        None => grants.push(grant),
    }
}

impl Snapshot {
    /// An empty snapshot of the current version for `project_root`.
    pub fn new(project_root: &Path) -> Snapshot {
        Snapshot {
            version: VERSION,
            project_root: root_string(project_root),
            project_grants: Vec::new(),
            sessions: Vec::new(),
            closed: Vec::new(),
        }
    }
}

/// Where the broker saves its state.
pub trait Store: Send {
    /// Make `changes` durable, in order, before returning (the broker reports
    /// a change only after this returned). The error says what failed.
    fn record(&mut self, changes: &[Change]) -> Result<(), StateError>;
    /// Record `changes` without waiting for the disk: they are durable once
    /// [`Store::commit`] (or a later [`Store::record`]) returned. For changes
    /// whose frames the transport writes only after committing (group
    /// commit: one sync for a batch of frames). By default, [`Store::record`].
    fn stage(&mut self, changes: &[Change]) -> Result<(), StateError> {
        self.record(changes)
    }
    /// Make every staged change durable. The error says what failed.
    fn commit(&mut self) -> Result<(), StateError> {
        Ok(())
    }
    /// Replace the whole stored state with `snapshot`. The error says what failed.
    fn save(&mut self, snapshot: &Snapshot) -> Result<(), StateError>;
    /// Why changes this store accepted are not all on disk, when a write
    /// failed: they are kept, and written by the next successful
    /// [`Store::retry`] or change. `None` when everything accepted is on
    /// disk, and for a store that writes nothing by design (another broker
    /// holds the file): it lost nothing it tried to write.
    fn unsaved(&self) -> Option<StateError> {
        None
    }
    /// Try again to write everything accepted, when a write failed. Ok when
    /// nothing is unsaved (any more); the error says what failed.
    fn retry(&mut self) -> Result<(), StateError> {
        Ok(())
    }
}

/// The compaction floor: the journal is folded into the snapshot when it
/// outgrows twice the snapshot and this many bytes.
pub const COMPACT_FLOOR: u64 = 1 << 20;

/// Overrides [`COMPACT_FLOOR`] (bytes), for tests that want compactions
/// often; not meant for production use.
pub const COMPACT_FLOOR_ENV: &str = "TOOLGATE_JOURNAL_COMPACT_BYTES";

/// The state file of one project in a state directory, and its journal.
#[derive(Debug)]
pub struct FileStore {
    path: PathBuf,
    journal_path: PathBuf,
    project_root: String,
    /// The lock held on `<file>.lock` while this store lives.
    _lock: Option<std::sync::Arc<std::fs::File>>,
    /// Saves are refused: another broker holds the file.
    held_elsewhere: bool,
    /// What the files hold, with every change recorded since.
    state: Materialised,
    /// The journal generation of the snapshot on disk (`None`: no journal applies).
    generation: Option<u64>,
    /// The highest generation seen in either file.
    highest: u64,
    /// The journal, open at its end, when records may be appended to it.
    journal: Option<File>,
    /// Records were written to the journal but not synced yet.
    unsynced: bool,
    journal_len: u64,
    snapshot_len: u64,
    /// The files may lack a change (a failed write, a stale or torn journal):
    /// the next change rewrites the snapshot and starts a new journal.
    dirty: bool,
    /// The last write that failed, while what it carried is not on disk
    /// yet: the files lack a change this store accepted (see
    /// [`Store::unsaved`]). Cleared when the whole state is written.
    unsaved: Option<StateError>,
    compact_floor: u64,
}

impl FileStore {
    /// Opens `dir` (creating it), loads the project's state file and replays
    /// its journal. Problems become warnings (to be printed on stderr by the
    /// caller); if `dir` cannot be created or written, the store is still
    /// returned and later saves return `Err`. What would forget a session
    /// end or a revocation is refused (Err, saying why and what to run),
    /// and nothing is moved then: a journal with a line that cannot be read
    /// before its last, a state file that cannot be used (not readable, not
    /// JSON, another `version`), or a journal without its state file.
    /// `toolgate state repair` ([`repair`]) keeps what can be read.
    /// `wall_ms` is the time of day (kept for the callers; nothing is
    /// renamed by opening any more).
    pub fn open(
        dir: &Path,
        project_root: &Path,
        _wall_ms: u64,
    ) -> Result<(FileStore, Snapshot, Vec<String>), StateError> {
        let (mut store, snapshot, mut warnings) = FileStore::open_unlocked(dir, project_root)?;
        if store.path.as_os_str().is_empty() || !dir.is_dir() {
            return Ok((store, snapshot, warnings));
        }
        // One broker per state file: a second one reads the state but keeps
        // its changes in memory, rather than overwriting the first one's.
        match lock(&store.path) {
            Ok(file) => {
                store._lock = Some(std::sync::Arc::new(file));
                // Only the holder of the lock writes this file, so temporary
                // files left next to it are a crashed broker's: remove them.
                remove_stale_temporaries(&store.path, &mut warnings);
                remove_stale_temporaries(&store.journal_path, &mut warnings);
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                warnings.push(format!(
                    "another toolgate holds the state file {} (locked through {}); this broker starts from it but keeps its changes in memory only",
                    store.path.display(),
                    lock_path(&store.path).display()
                ));
                store.held_elsewhere = true;
            }
            Err(std::fs::TryLockError::Error(err)) => warnings.push(format!(
                "cannot lock {} ({err}); saving anyway, so run one broker per project and state directory",
                lock_path(&store.path).display()
            )),
        }
        Ok((store, snapshot, warnings))
    }

    fn open_unlocked(
        dir: &Path,
        project_root: &Path,
    ) -> Result<(FileStore, Snapshot, Vec<String>), StateError> {
        let mut warnings = Vec::new();
        let root = root_string(project_root);
        let empty = Snapshot::new(project_root);
        let primary = state_file(dir, project_root);
        let compact_floor = std::env::var(COMPACT_FLOOR_ENV)
            .ok()
            .and_then(|text| text.parse::<u64>().ok())
            .unwrap_or(COMPACT_FLOOR);
        let store = |path: PathBuf, loaded: Option<&LoadedState>| FileStore {
            journal_path: journal_file(&path),
            path,
            project_root: root.clone(),
            _lock: None,
            held_elsewhere: false,
            state: Materialised::from_snapshot(
                loaded.map_or_else(|| empty.clone(), |loaded| loaded.snapshot.clone()),
            ),
            generation: loaded.and_then(|loaded| loaded.generation),
            highest: loaded.map_or(0, |loaded| loaded.highest),
            journal: None,
            unsynced: false,
            journal_len: loaded.map_or(0, |loaded| loaded.journal_len),
            snapshot_len: loaded.map_or(0, |loaded| loaded.snapshot_len),
            // A missing snapshot, or a journal that cannot take appends:
            // the first change writes both files afresh.
            dirty: loaded.is_none_or(|loaded| !loaded.appendable),
            unsaved: None,
            compact_floor,
        };
        if let Err(err) = create_dir(dir) {
            warnings.push(format!(
                "cannot create the state directory {}: {err}; nothing will be saved",
                dir.display()
            ));
            return Ok((store(primary, None), empty, warnings));
        }
        for attempt in 1..=COLLISION_LIMIT {
            let path = if attempt == 1 {
                primary.clone()
            } else {
                collision_file(&primary, attempt)
            };
            match load(&path) {
                Loaded::Missing => {
                    let journal = journal_file(&path);
                    if std::fs::symlink_metadata(&journal).is_ok() {
                        // A journal without its snapshot: what it recorded
                        // (a session end, a revocation) would be forgotten.
                        return Err(StateError::JournalWithoutState {
                            journal,
                            dir: dir.to_path_buf(),
                            project_root: project_root.to_path_buf(),
                        });
                    }
                    return Ok((store(path, None), empty, warnings));
                }
                Loaded::State(loaded) if loaded.snapshot.project_root == root => {
                    warnings.extend(loaded.warnings.iter().cloned());
                    let snapshot = loaded.snapshot.clone();
                    return Ok((store(path, Some(&loaded)), snapshot, warnings));
                }
                Loaded::Damaged(damaged) if damaged.project_root == root => {
                    return Err(StateError::Damaged {
                        path,
                        dir: dir.to_path_buf(),
                        damage: damaged.damage,
                    });
                }
                Loaded::Damaged(damaged) => warnings.push(format!(
                    "the state file {} belongs to the project {}, not {root}; it is left alone",
                    path.display(),
                    damaged.project_root
                )),
                Loaded::State(loaded) => warnings.push(format!(
                    "the state file {} belongs to the project {}, not {root}; it is left alone",
                    path.display(),
                    loaded.snapshot.project_root
                )),
                Loaded::Unusable(reason) => {
                    return Err(StateError::Unusable {
                        path,
                        dir: dir.to_path_buf(),
                        project_root: project_root.to_path_buf(),
                        reason: Box::new(reason),
                    });
                }
            }
        }
        warnings.push(format!(
            "{COLLISION_LIMIT} state files in {} belong to other projects; nothing will be saved",
            dir.display()
        ));
        let mut store = store(PathBuf::new(), None);
        store.journal_path = PathBuf::new();
        Ok((store, empty, warnings))
    }

    /// The state file this store writes (empty when no file name was free).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The journal beside the state file.
    pub fn journal_path(&self) -> &Path {
        &self.journal_path
    }

    fn writable(&self) -> Result<(), StateError> {
        if self.held_elsewhere {
            return Err(StateError::HeldElsewhere {
                path: self.path.clone(),
            });
        }
        if self.path.as_os_str().is_empty() {
            return Err(StateError::NoFile);
        }
        Ok(())
    }

    /// Write the whole state as a new snapshot and start a new journal.
    fn compact(&mut self) -> Result<(), StateError> {
        let mut snapshot = self.state.snapshot();
        snapshot.version = VERSION;
        snapshot.project_root.clone_from(&self.project_root);
        // What was staged so far is synced where it is first: should the
        // new snapshot fail, it is still on disk.
        if let Err(err) = self.commit() {
            tracing::warn!("the state could not be saved: {err}");
        }
        self.journal = None;
        let generation = self.highest + 1;
        let written = write_state(&self.path, &self.journal_path, &snapshot, generation);
        match written {
            Written::Snapshot(snapshot_len) => {
                // The snapshot holds everything; the old journal is stale
                // (another generation), so nothing is lost. Try again next time.
                self.highest = generation;
                self.generation = Some(generation);
                self.snapshot_len = snapshot_len;
                self.dirty = true;
                self.unsaved = None;
                Ok(())
            }
            Written::Both(snapshot_len, journal, journal_len) => {
                self.highest = generation;
                self.generation = Some(generation);
                self.snapshot_len = snapshot_len;
                self.journal = Some(journal);
                self.journal_len = journal_len;
                self.dirty = false;
                self.unsaved = None;
                Ok(())
            }
            Written::Nothing(err) => {
                self.dirty = true;
                self.unsaved = Some(err.clone());
                Err(err)
            }
        }
    }

    /// Append records (not synced yet).
    fn append(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        if self.journal.is_none() {
            // The journal loaded at start ends with a complete record of this
            // snapshot's generation (else the store would be dirty): go on
            // appending to it.
            match OpenOptions::new().append(true).open(&self.journal_path) {
                Ok(file) => self.journal = Some(file),
                Err(_) => return self.compact(),
            }
        }
        let Some(journal) = self.journal.as_mut() else {
            return self.compact();
        };
        match journal.write_all(bytes) {
            Ok(()) => {
                self.journal_len += bytes.len() as u64;
                self.unsynced = true;
                Ok(())
            }
            Err(err) => {
                // Part of a record may be on disk: never append after it.
                self.journal = None;
                self.dirty = true;
                let err = StateError::io(IoOp::Append, &self.journal_path, err);
                self.unsaved = Some(err.clone());
                Err(err)
            }
        }
    }
}

impl Store for FileStore {
    /// [`FileStore::stage`], then [`FileStore::commit`].
    fn record(&mut self, changes: &[Change]) -> Result<(), StateError> {
        self.stage(changes)?;
        self.commit()
    }

    /// Syncs the journal (fdatasync) when records were appended since the
    /// last sync. On failure the next change compacts (the records may or
    /// may not be on disk).
    fn commit(&mut self) -> Result<(), StateError> {
        if !self.unsynced {
            return Ok(());
        }
        self.unsynced = false;
        let Some(journal) = self.journal.as_mut() else {
            return Ok(());
        };
        journal.sync_data().map_err(|err| {
            self.journal = None;
            self.dirty = true;
            let err = StateError::io(IoOp::Sync, &self.journal_path, err);
            self.unsaved = Some(err.clone());
            err
        })
    }

    /// Appends one line (the changes) to the journal in one write, not
    /// synced until [`FileStore::commit`]. When the journal has outgrown
    /// twice the snapshot and the compaction floor, or when the files may
    /// lack a change, the whole state is written as a new snapshot instead
    /// and a new journal started (synced at once).
    fn stage(&mut self, changes: &[Change]) -> Result<(), StateError> {
        self.writable()?;
        if changes.is_empty() {
            return Ok(());
        }
        // One line per call, so that its changes are applied together or,
        // when the line is torn, not at all: one change as an object,
        // several as an array.
        let encoded = match changes {
            [change] => serde_json::to_vec(change),
            _ => serde_json::to_vec(changes),
        };
        let mut bytes = match encoded {
            Ok(bytes) => bytes,
            Err(err) => {
                return Err(StateError::Encode {
                    path: None,
                    source: Arc::new(err),
                })
            }
        };
        bytes.push(b'\n');
        for change in changes {
            self.state.apply(change.clone());
        }
        let limit = self.snapshot_len.saturating_mul(2).max(self.compact_floor);
        if self.dirty || self.journal_len + bytes.len() as u64 > limit {
            return self.compact();
        }
        self.append(&bytes)
    }

    /// Saves `snapshot` atomically with [`write_snapshot`], as the current
    /// [`VERSION`] and for this store's project root whatever the snapshot
    /// says. The snapshot names no journal, so the old journal no longer
    /// applies; it is removed, and the next change starts a new one.
    fn save(&mut self, snapshot: &Snapshot) -> Result<(), StateError> {
        self.writable()?;
        // What was staged is synced where it is first (should the snapshot fail).
        if let Err(err) = self.commit() {
            tracing::warn!("the state could not be saved: {err}");
        }
        let mut snapshot = sorted(snapshot.clone());
        snapshot.version = VERSION;
        snapshot.project_root.clone_from(&self.project_root);
        self.state = Materialised::from_snapshot(snapshot.clone());
        self.journal = None;
        self.dirty = true;
        if let Err(err) = write_snapshot(&self.path, &snapshot) {
            self.unsaved = Some(err.clone());
            return Err(err);
        }
        self.unsaved = None;
        self.generation = None;
        if let Err(err) = std::fs::remove_file(&self.journal_path) {
            if err.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(
                    "cannot remove the stale journal {}: {err}",
                    self.journal_path.display()
                );
            }
        }
        Ok(())
    }

    fn unsaved(&self) -> Option<StateError> {
        self.unsaved.clone()
    }

    /// Writes the whole state as a new snapshot and starts a new journal,
    /// when a write failed since the last time the whole state was written.
    fn retry(&mut self) -> Result<(), StateError> {
        if self.unsaved.is_none() {
            return Ok(());
        }
        self.writable()?;
        self.compact()
    }
}

/// A store in memory, for tests: clones share what was recorded, so a test
/// can keep one and hand the other to a broker.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    shared: Arc<Mutex<MemoryState>>,
}

#[derive(Debug, Default)]
struct MemoryState {
    state: Materialised,
    saved: Vec<Snapshot>,
    changes: Vec<Vec<Change>>,
    failure: Option<String>,
    /// A whole state that failed to be saved, then the changes that failed
    /// to be recorded after it, in order: kept for the next success.
    pending_save: Option<Snapshot>,
    pending: Vec<Vec<Change>>,
    /// The failure that left something pending.
    unsaved: Option<StateError>,
}

impl MemoryState {
    /// Write what failures left, then `changes` (`None`: a retry).
    fn apply(&mut self, changes: Option<&[Change]>) {
        if let Some(snapshot) = self.pending_save.take() {
            self.state = Materialised::from_snapshot(snapshot);
        }
        let pending = std::mem::take(&mut self.pending);
        for change in pending.iter().flatten().chain(changes.unwrap_or_default()) {
            self.state.apply(change.clone());
        }
        self.unsaved = None;
        if let Some(changes) = changes {
            self.changes.push(changes.to_vec());
        }
        let snapshot = self.state.snapshot();
        self.saved.push(snapshot);
    }
}

impl MemoryStore {
    /// A store that has saved nothing.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// The state after each successful save or record, oldest first.
    pub fn saved(&self) -> Vec<Snapshot> {
        self.lock().saved.clone()
    }

    /// The state after the last successful save or record.
    pub fn last(&self) -> Option<Snapshot> {
        self.lock().saved.last().cloned()
    }

    /// The changes of each successful record, oldest first.
    pub fn changes(&self) -> Vec<Vec<Change>> {
        self.lock().changes.clone()
    }

    /// Make later saves fail with `reason` (`None`: succeed again).
    pub fn fail_with(&self, reason: Option<&str>) {
        self.lock().failure = reason.map(str::to_string);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryState> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Store for MemoryStore {
    fn record(&mut self, changes: &[Change]) -> Result<(), StateError> {
        let mut state = self.lock();
        if let Some(reason) = state.failure.clone() {
            let err = StateError::Injected(reason);
            state.pending.push(changes.to_vec());
            state.unsaved = Some(err.clone());
            return Err(err);
        }
        state.apply(Some(changes));
        Ok(())
    }

    fn save(&mut self, snapshot: &Snapshot) -> Result<(), StateError> {
        let mut state = self.lock();
        if let Some(reason) = state.failure.clone() {
            let err = StateError::Injected(reason);
            state.pending_save = Some(sorted(snapshot.clone()));
            state.pending.clear();
            state.unsaved = Some(err.clone());
            return Err(err);
        }
        state.state = Materialised::from_snapshot(sorted(snapshot.clone()));
        state.pending_save = None;
        state.pending.clear();
        state.unsaved = None;
        let snapshot = state.state.snapshot();
        state.saved.push(snapshot);
        Ok(())
    }

    fn unsaved(&self) -> Option<StateError> {
        self.lock().unsaved.clone()
    }

    fn retry(&mut self) -> Result<(), StateError> {
        let mut state = self.lock();
        if state.unsaved.is_none() {
            return Ok(());
        }
        if let Some(reason) = state.failure.clone() {
            let err = StateError::Injected(reason);
            state.unsaved = Some(err.clone());
            return Err(err);
        }
        state.apply(None);
        Ok(())
    }
}

/// `DIR/project-<16 hex digits of the FNV-1a hash of the root path>.json`.
pub fn state_file(dir: &Path, project_root: &Path) -> PathBuf {
    let hash = fnv1a(root_string(project_root).as_bytes());
    dir.join(format!("project-{hash:016x}.json"))
}

/// The journal beside a state file: `project-<hash>.journal` next to
/// `project-<hash>.json`.
pub fn journal_file(state_file: &Path) -> PathBuf {
    state_file.with_extension("journal")
}

/// `project-<hash>-<n>.json` next to `primary`, for hash collisions.
fn collision_file(primary: &Path, n: u32) -> PathBuf {
    let stem = primary
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    primary.with_file_name(format!("{stem}-{n}.json"))
}

fn root_string(project_root: &Path) -> String {
    project_root.to_string_lossy().into_owned()
}

/// 64-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Parse and check a state file's text.
pub fn parse_snapshot(text: &str) -> Result<Snapshot, Invalid> {
    parse_state(text).map(|(snapshot, _)| snapshot)
}

/// A state file's snapshot and the journal generation it names.
fn parse_state(text: &str) -> Result<(Snapshot, Option<u64>), Invalid> {
    // A well-formed file is read straight into its types; the generic reading
    // below (a whole `Value` tree first, several times the file's size) only
    // runs to name what is wrong with one that is not.
    let (mut snapshot, generation, legacy_ended) = match serde_json::from_str::<SnapshotFile>(text)
    {
        Ok(file) if file.version == VERSION => (
            Snapshot {
                version: file.version,
                project_root: file.project_root,
                project_grants: file.project_grants,
                sessions: file.sessions,
                closed: file.closed,
            },
            file.journal_generation,
            file.ended_sessions,
        ),
        _ => parse_state_generic(text)?,
    };
    for id in legacy_ended {
        snapshot.closed.push(StoredClosed {
            fingerprint: format!("{:016x}", session_fingerprint(&id)),
            why: "ended".to_string(),
        });
    }
    if let Some(closed) = snapshot
        .closed
        .iter()
        .find(|closed| fingerprint_value(&closed.fingerprint).is_none())
    {
        return Err(Invalid::ClosedFingerprint(closed.fingerprint.clone()));
    }
    let grants = snapshot
        .project_grants
        .iter()
        .chain(snapshot.sessions.iter().flat_map(|session| &session.grants));
    for grant in grants {
        check_grant(grant)?;
    }
    let mut ids: Vec<&str> = snapshot
        .sessions
        .iter()
        .map(|session| session.session_id.as_str())
        .collect();
    ids.sort_unstable();
    if let Some(pair) = ids.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(Invalid::DuplicateSession(pair[0].to_string()));
    }
    Ok((snapshot, generation))
}

/// A state file as written: a [`Snapshot`], the journal generation, and the
/// `endedSessions` of earlier builds.
#[derive(Deserialize)]
struct SnapshotFile {
    version: u32,
    #[serde(rename = "projectRoot")]
    project_root: String,
    #[serde(rename = "projectGrants")]
    project_grants: Vec<StoredGrant>,
    sessions: Vec<StoredSession>,
    #[serde(default)]
    closed: Vec<StoredClosed>,
    #[serde(rename = "journalGeneration", default)]
    journal_generation: Option<u64>,
    #[serde(rename = "endedSessions", default)]
    ended_sessions: Vec<String>,
}

/// [`parse_state`] through a `Value` tree, naming what is wrong.
type Parsed = (Snapshot, Option<u64>, Vec<String>);

fn parse_state_generic(text: &str) -> Result<Parsed, Invalid> {
    let value: Value = serde_json::from_str(text).map_err(|err| Invalid::NotJson(Arc::new(err)))?;
    match value.get("version") {
        Some(Value::Number(number)) if number.as_u64() == Some(u64::from(VERSION)) => {}
        other => return Err(Invalid::Version(other.cloned())),
    }
    let generation = match value.get("journalGeneration") {
        None => None,
        Some(Value::Number(number)) if number.as_u64().is_some() => number.as_u64(),
        Some(other) => return Err(Invalid::Generation(other.clone())),
    };
    let shape = |field: Option<&'static str>| {
        move |err| Invalid::Shape {
            field,
            source: Arc::new(err),
        }
    };
    // Files of earlier builds list ended sessions by id.
    let legacy_ended: Vec<String> = match value.get("endedSessions") {
        None => Vec::new(),
        Some(ended) => {
            serde_json::from_value(ended.clone()).map_err(shape(Some("endedSessions")))?
        }
    };
    let snapshot: Snapshot = serde_json::from_value(value).map_err(shape(None))?;
    Ok((snapshot, generation, legacy_ended))
}

/// What a state file and its journal hold, read.
struct LoadedState {
    /// The snapshot with the journal's records applied.
    snapshot: Snapshot,
    /// The journal generation the snapshot names (`None`: no journal applies).
    generation: Option<u64>,
    /// The highest generation in either file.
    highest: u64,
    snapshot_len: u64,
    /// Bytes of the journal's complete lines.
    journal_len: u64,
    /// The journal belongs to this snapshot and ends with a complete record.
    appendable: bool,
    warnings: Vec<String>,
}

enum Loaded {
    Missing,
    State(Box<LoadedState>),
    Unusable(Unreadable),
    /// The snapshot is whole but lines of its journal cannot be read.
    Damaged(Box<Damaged>),
}

/// A state file whose journal has lines that cannot be read (not the torn
/// last line of a crash): nothing after such a line can be trusted to be
/// complete, and what it held (a session end, a revocation) must not be
/// forgotten, so the state is not used until `toolgate state repair`.
#[derive(Debug, Clone)]
struct Damaged {
    /// The project the snapshot names.
    project_root: String,
    /// The journal and its unreadable lines; its `Display` says why the
    /// state cannot be used.
    damage: JournalDamage,
}

/// The first line of a journal: which snapshot its records follow.
#[derive(Debug, Serialize, Deserialize)]
struct JournalHeader {
    #[serde(rename = "journalGeneration")]
    generation: u64,
}

/// Read a state file and replay its journal.
fn load(path: &Path) -> Loaded {
    let bytes = match std::fs::read(path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Loaded::Missing,
        Err(err) => return Loaded::Unusable(Unreadable::Read(Arc::new(err))),
        Ok(bytes) => bytes,
    };
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Loaded::Unusable(Unreadable::NotUtf8);
    };
    let (snapshot, generation) = match parse_state(text) {
        Ok(parsed) => parsed,
        Err(reason) => return Loaded::Unusable(Unreadable::Invalid(reason)),
    };
    let mut loaded = LoadedState {
        snapshot,
        generation,
        highest: generation.unwrap_or(0),
        snapshot_len: bytes.len() as u64,
        journal_len: 0,
        appendable: false,
        warnings: Vec::new(),
    };
    let journal = journal_file(path);
    match std::fs::read(&journal) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => {
            return Loaded::Unusable(Unreadable::Journal {
                journal,
                source: Arc::new(err),
            })
        }
        Ok(bytes) => {
            let project_root = loaded.snapshot.project_root.clone();
            if let Err(lines) = replay(&journal, &bytes, &mut loaded) {
                return Loaded::Damaged(Box::new(Damaged {
                    project_root,
                    damage: JournalDamage { journal, lines },
                }));
            }
        }
    }
    Loaded::State(Box::new(loaded))
}

/// Apply a journal's records to `loaded`, when the journal follows its
/// snapshot. A last line without its newline is a write that was never
/// confirmed: it is ignored with a warning. Any other line that is not a
/// change (the header included) makes the state unusable: Err lists every
/// such line, with its number and why.
fn replay(
    journal: &Path,
    bytes: &[u8],
    loaded: &mut LoadedState,
) -> Result<(), Vec<(usize, Invalid)>> {
    if loaded.generation.is_none() {
        // A snapshot that names no journal (written whole by a save, a
        // revocation or a repair): whatever journal is beside it is older.
        tracing::info!(journal = %journal.display(), "the journal is stale and was ignored");
        return Ok(());
    }
    let (complete, torn) = split_torn(bytes);
    let mut lines = complete.split(|&byte| byte == b'\n');
    let header = match lines.next() {
        Some(line) if !complete.is_empty() => line,
        // No complete line: an empty journal (or a header never finished).
        _ => return Ok(()),
    };
    let header: JournalHeader =
        serde_json::from_slice(header).map_err(|err| vec![(1, Invalid::Header(Arc::new(err)))])?;
    loaded.highest = loaded.highest.max(header.generation);
    if loaded.generation != Some(header.generation) {
        // Records of a snapshot that was replaced (a compaction or a save
        // that stopped before the new journal was in place): the snapshot
        // already holds them, or replaced them on purpose.
        tracing::info!(journal = %journal.display(), "the journal is stale and was ignored");
        return Ok(());
    }
    let mut state = Materialised::from_snapshot(std::mem::take(&mut loaded.snapshot));
    let mut bad = Vec::new();
    for (index, line) in lines.enumerate() {
        match record(line) {
            Ok(changes) if bad.is_empty() => {
                for change in changes {
                    state.apply(change);
                }
            }
            // Nothing after a bad line is applied; the others are only named.
            Ok(_) => {}
            Err(why) => bad.push((index + 2, why)),
        }
    }
    if !bad.is_empty() {
        return Err(bad);
    }
    loaded.snapshot = state.snapshot();
    loaded.journal_len = complete.len() as u64;
    loaded.appendable = torn.is_empty();
    if !torn.is_empty() {
        loaded.warnings.push(format!(
            "the journal {} ends in an incomplete record ({} bytes, a write that was never confirmed); it was ignored",
            journal.display(),
            torn.len()
        ));
    }
    Ok(())
}

/// A journal's complete lines (each with its newline) and what follows the
/// last newline: a write that was never confirmed.
fn split_torn(bytes: &[u8]) -> (&[u8], &[u8]) {
    let complete_len = bytes
        .iter()
        .rposition(|&byte| byte == b'\n')
        .map_or(0, |index| index + 1);
    bytes.split_at(complete_len)
}

/// The changes one journal line records (none for a blank line): one change
/// as an object, several as an array.
fn record(line: &[u8]) -> Result<Vec<Change>, Invalid> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let not_a_change = |err| Invalid::Record(Arc::new(err));
    let changes: Vec<Change> = if line.first() == Some(&b'[') {
        serde_json::from_slice(line).map_err(not_a_change)?
    } else {
        vec![serde_json::from_slice(line).map_err(not_a_change)?]
    };
    for change in &changes {
        check_change(change)?;
    }
    Ok(changes)
}

fn check_grant(grant: &StoredGrant) -> Result<(), Invalid> {
    if GrantPattern::from_parts(&grant.pattern, grant.literal).is_none() {
        return Err(Invalid::GrantLiteral {
            grant_id: grant.grant_id.clone(),
            literal: grant.literal,
            pattern: grant.pattern.clone(),
        });
    }
    if let Some(mode) = grant.mode.as_deref().filter(|mode| *mode != "plan") {
        return Err(Invalid::GrantMode {
            grant_id: grant.grant_id.clone(),
            mode: mode.to_string(),
        });
    }
    Ok(())
}

fn check_change(change: &Change) -> Result<(), Invalid> {
    match change {
        Change::Session(session) => session.grants.iter().try_for_each(check_grant),
        Change::SessionGrant(grant) | Change::ProjectGrant(grant) => check_grant(grant),
        Change::Closed(closed) => {
            if fingerprint_value(&closed.fingerprint).is_some() {
                Ok(())
            } else {
                Err(Invalid::Fingerprint(closed.fingerprint.clone()))
            }
        }
        Change::RemoveSession(_) | Change::RemoveProjectGrant(_) => Ok(()),
    }
}

fn create_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// The snapshot with its sessions in `sessionID` order.
fn sorted(mut snapshot: Snapshot) -> Snapshot {
    snapshot
        .sessions
        .sort_by(|a, b| a.session_id.cmp(&b.session_id));
    snapshot
}

/// Distinguishes temporary files of one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A snapshot as written: its fields, then the journal generation.
#[derive(Serialize)]
struct OnDisk<'a> {
    #[serde(flatten)]
    snapshot: &'a Snapshot,
    #[serde(rename = "journalGeneration", skip_serializing_if = "Option::is_none")]
    generation: Option<u64>,
}

/// Pretty JSON, sessions sorted by `sessionID`, ending in a newline.
fn encode(path: &Path, snapshot: &Snapshot, generation: Option<u64>) -> Result<String, StateError> {
    let snapshot = sorted(snapshot.clone());
    let mut text = serde_json::to_string_pretty(&OnDisk {
        snapshot: &snapshot,
        generation,
    })
    .map_err(|err| StateError::Encode {
        path: Some(path.to_path_buf()),
        source: Arc::new(err),
    })?;
    text.push('\n');
    Ok(text)
}

/// Write `snapshot` to `path` atomically: pretty JSON (sessions sorted by
/// `sessionID`) into `.<file>.tmp-<pid>-<n>` in the same directory, synced,
/// renamed over `path`; then the directory is synced. On failure the
/// temporary file is removed and the error names the path and the reason.
/// The snapshot names no journal generation, so a journal beside it no
/// longer applies.
pub fn write_snapshot(path: &Path, snapshot: &Snapshot) -> Result<(), StateError> {
    let text = encode(path, snapshot, None)?;
    replace_file(path, text.as_bytes()).map(drop)
}

/// What [`write_state`] managed.
enum Written {
    /// Nothing changed on disk (the error says why).
    Nothing(StateError),
    /// The snapshot (its length) but not the new journal: the old journal
    /// is stale, so the state is still whole.
    Snapshot(u64),
    /// Both: the snapshot's length, the new journal open at its end and its length.
    Both(u64, File, u64),
}

/// A compaction: `snapshot` under `generation`, then a journal holding only
/// the header of that generation. Each file is replaced atomically; a crash
/// between the two leaves the new snapshot with a journal of an older
/// generation, which loading ignores.
fn write_state(path: &Path, journal: &Path, snapshot: &Snapshot, generation: u64) -> Written {
    let text = match encode(path, snapshot, Some(generation)) {
        Ok(text) => text,
        Err(err) => return Written::Nothing(err),
    };
    if let Err(err) = replace_file(path, text.as_bytes()) {
        return Written::Nothing(err);
    }
    let mut header = serde_json::to_vec(&JournalHeader { generation }).unwrap_or_default();
    header.push(b'\n');
    match replace_file(journal, &header) {
        Ok(file) => Written::Both(text.len() as u64, file, header.len() as u64),
        Err(err) => {
            tracing::warn!("a new journal could not be started: {err}");
            Written::Snapshot(text.len() as u64)
        }
    }
}

/// Replace `path` with `bytes` atomically (temporary file, sync, rename,
/// directory sync); returns the new file, open at its end.
fn replace_file(path: &Path, bytes: &[u8]) -> Result<File, StateError> {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .ok_or_else(|| StateError::NotAFileName {
            path: path.to_path_buf(),
        })?;
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let temp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = write_synced(&temp, bytes)
        .map_err(|err| StateError::io(IoOp::Write, &temp, err))
        .and_then(|file| {
            std::fs::rename(&temp, path)
                .map(|()| file)
                .map_err(|err| StateError::Rename {
                    from: temp.clone(),
                    to: path.to_path_buf(),
                    source: Arc::new(err),
                })
        });
    let file = match written {
        Ok(file) => file,
        Err(err) => {
            let _ = std::fs::remove_file(&temp);
            return Err(err);
        }
    };
    sync_dir(&dir).map_err(|err| StateError::io(IoOp::SyncDir, path, err))?;
    Ok(file)
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(file)
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// Whether a grant holds for the whole project or for one session: the
/// wire type, so the CLI's `--json` rows spell it as `list_grants` does.
pub use toolgate_protocol::GrantScope;

/// One stored grant, as `toolgate grants list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GrantRow {
    /// The grant's id.
    #[serde(rename = "grantID")]
    pub grant_id: String,
    /// Project or session grant.
    pub scope: GrantScope,
    /// The session that made it (a session grant: the session that holds it).
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// The permission it answers.
    pub permission: String,
    /// The pattern.
    pub pattern: String,
    /// `plan` for a plan-mode kind grant (covers only in plan mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The project the state file belongs to.
    #[serde(rename = "projectRoot")]
    pub project_root: String,
    /// The state file that holds it.
    #[serde(skip)]
    pub file: PathBuf,
}

/// Every grant of every project state file in `dir`: files in name order,
/// project grants first, then each session's. Files that cannot be used
/// become warnings (they are left as they are).
pub fn list_grants(dir: &Path) -> Result<(Vec<GrantRow>, Vec<String>), StateError> {
    let mut rows = Vec::new();
    let mut warnings = Vec::new();
    for (path, snapshot) in project_files(dir, &mut warnings)? {
        rows.extend(rows_of(&path, &snapshot));
    }
    Ok((rows, warnings))
}

fn rows_of(path: &Path, snapshot: &Snapshot) -> Vec<GrantRow> {
    let row = |grant: &StoredGrant, scope: GrantScope| GrantRow {
        grant_id: grant.grant_id.clone(),
        scope,
        session_id: grant.session_id.clone(),
        permission: grant.permission.clone(),
        pattern: grant.pattern.clone(),
        mode: grant.mode.clone(),
        project_root: snapshot.project_root.clone(),
        file: path.to_path_buf(),
    };
    let mut rows: Vec<GrantRow> = snapshot
        .project_grants
        .iter()
        .map(|grant| row(grant, GrantScope::Project))
        .collect();
    for session in &snapshot.sessions {
        rows.extend(session.grants.iter().map(|grant| GrantRow {
            session_id: session.session_id.clone(),
            ..row(grant, GrantScope::Session)
        }));
    }
    rows
}

/// What [`revoke_grants`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Revoked {
    /// The grants removed, in the order they were stored.
    pub removed: Vec<GrantRow>,
    /// Ids asked for that no state file holds.
    pub unknown: Vec<String>,
    /// Files that could not be used (left as they are).
    pub warnings: Vec<String>,
}

/// Remove the grants with these ids from whichever state files in `dir` hold
/// them (in the snapshot or in its journal). Each changed project is written
/// whole with [`write_snapshot`], which names no journal generation, so the
/// old journal no longer applies from the rename on; it is then removed. Ids
/// that no file holds are reported in [`Revoked::unknown`]; the others are
/// still removed. A file held by a running broker is refused: revoke there
/// with the `revoke_grant` frame.
pub fn revoke_grants(dir: &Path, ids: &[String]) -> Result<Revoked, StateError> {
    let mut revoked = Revoked::default();
    let files = project_files(dir, &mut revoked.warnings)?;
    let wanted = |grant: &StoredGrant| ids.contains(&grant.grant_id);
    for (path, snapshot) in files {
        if !rows_of(&path, &snapshot)
            .iter()
            .any(|row| ids.contains(&row.grant_id))
        {
            continue;
        }
        // A running broker holds the file and would overwrite the change.
        let _lock = match lock(&path) {
            Ok(lock) => lock,
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StateError::Locked {
                    path,
                    task: Task::Revoke,
                })
            }
            Err(std::fs::TryLockError::Error(err)) => {
                return Err(StateError::io(IoOp::Lock, &path, err))
            }
        };
        // Read again under the lock: the file may have changed since listing.
        let mut snapshot = match load(&path) {
            Loaded::State(loaded) => loaded.snapshot,
            Loaded::Missing => continue,
            Loaded::Damaged(damaged) => {
                revoked.warnings.push(format!(
                    "skipping {}: {}; run `toolgate state repair`",
                    path.display(),
                    damaged.damage
                ));
                continue;
            }
            Loaded::Unusable(reason) => {
                revoked
                    .warnings
                    .push(format!("skipping {}: {reason}", path.display()));
                continue;
            }
        };
        let removed: Vec<GrantRow> = rows_of(&path, &snapshot)
            .into_iter()
            .filter(|row| ids.contains(&row.grant_id))
            .collect();
        snapshot.project_grants.retain(|grant| !wanted(grant));
        for session in &mut snapshot.sessions {
            session.grants.retain(|grant| !wanted(grant));
        }
        // The journal's records are in the snapshot, which names no journal
        // generation: from the rename on, the old journal no longer applies
        // (it is never replayed over the revocation), so removing it is tidying.
        write_snapshot(&path, &snapshot)?;
        let journal = journal_file(&path);
        if let Err(err) = std::fs::remove_file(&journal) {
            if err.kind() != std::io::ErrorKind::NotFound {
                revoked.warnings.push(format!(
                    "cannot remove the stale journal {}: {err}",
                    journal.display()
                ));
            }
        }
        revoked.removed.extend(removed);
    }
    revoked.unknown = ids
        .iter()
        .filter(|id| !revoked.removed.iter().any(|row| &row.grant_id == *id))
        .cloned()
        .collect();
    let mut seen = Vec::new();
    revoked.unknown.retain(|id| {
        let first = !seen.contains(id);
        seen.push(id.clone());
        first
    });
    Ok(revoked)
}

/// Remove `.<file>.tmp-*` left by a broker that died while saving.
fn remove_stale_temporaries(path: &Path, warnings: &mut Vec<String>) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return;
    };
    let prefix = format!(".{name}.tmp-");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let stale = entry
            .file_name()
            .to_str()
            .is_some_and(|entry_name| entry_name.starts_with(&prefix));
        if stale {
            if let Err(err) = std::fs::remove_file(entry.path()) {
                warnings.push(format!(
                    "cannot remove the stale temporary file {}: {err}",
                    entry.path().display()
                ));
            }
        }
    }
}

/// Take the lock of a state file (`<file>.lock`), held while the returned
/// file is open.
fn lock(path: &Path) -> Result<std::fs::File, std::fs::TryLockError> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path(path))
        .map_err(std::fs::TryLockError::Error)?;
    file.try_lock()?;
    Ok(file)
}

fn lock_path(path: &Path) -> PathBuf {
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lock");
    PathBuf::from(lock)
}

/// The usable `project-*.json` files in `dir`, in name order.
fn project_files(
    dir: &Path,
    warnings: &mut Vec<String>,
) -> Result<Vec<(PathBuf, Snapshot)>, StateError> {
    let mut files = Vec::new();
    for path in project_paths(dir)? {
        match load(&path) {
            Loaded::State(loaded) => {
                warnings.extend(loaded.warnings);
                files.push((path, loaded.snapshot));
            }
            Loaded::Unusable(reason) => {
                warnings.push(format!("skipping {}: {reason}", path.display()))
            }
            Loaded::Damaged(damaged) => warnings.push(format!(
                "skipping {}: {}; run `toolgate state repair`",
                path.display(),
                damaged.damage
            )),
            Loaded::Missing => {}
        }
    }
    Ok(files)
}

/// The `project-*.json` files in `dir`, in name order.
fn project_paths(dir: &Path) -> Result<Vec<PathBuf>, StateError> {
    let entries = std::fs::read_dir(dir).map_err(|err| StateError::io(IoOp::ReadDir, dir, err))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("project-") && name.ends_with(".json"))
        })
        .collect();
    paths.sort();
    Ok(paths)
}

/// `rows` as an aligned table with a header (`toolgate grants list`), one
/// line each; every cell is shown as [`crate::display::shown`] escapes it,
/// so a row stays one line and nothing in it acts on the terminal.
pub fn grants_table(rows: &[GrantRow]) -> String {
    let header = [
        "GRANT",
        "SCOPE",
        "SESSION",
        "PERMISSION",
        "PATTERN",
        "PROJECT",
    ];
    let mut table: Vec<[String; 6]> = vec![header.map(str::to_string)];
    for row in rows {
        table.push([
            cell(&row.grant_id),
            row.scope.as_str().to_string(),
            cell(&row.session_id),
            cell(&row.permission),
            match row.mode.as_deref() {
                Some(mode) => format!("{} (only in {} mode)", cell(&row.pattern), cell(mode)),
                None => cell(&row.pattern),
            },
            cell(&row.project_root),
        ]);
    }
    let mut widths = [0usize; 6];
    for line in &table {
        for (width, text) in widths.iter_mut().zip(line) {
            *width = (*width).max(text.chars().count());
        }
    }
    let mut out = String::new();
    for line in &table {
        let mut text = String::new();
        for (column, value) in line.iter().enumerate() {
            if column + 1 == line.len() {
                text.push_str(value);
            } else {
                let pad = widths[column] - value.chars().count();
                text.push_str(value);
                text.extend(std::iter::repeat_n(' ', pad + 2));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

fn cell(text: &str) -> String {
    if text.is_empty() {
        return "\"\"".to_string();
    }
    crate::display::shown(text).into_owned()
}
