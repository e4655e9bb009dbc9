//! [`FileStore`]: the state of one project in a state directory, a snapshot
//! and its journal, and how it records, stages, commits, compacts and saves.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::{IoOp, StateError};
use super::files::{
    collision_file, create_dir, journal_file, lock, lock_path, remove_stale_temporaries,
    state_file, write_snapshot, write_state, Written,
};
use super::format::{root_string, sorted, Change, Snapshot, VERSION};
use super::load::{load, Loaded, LoadedState};
use super::materialised::Materialised;
use super::Store;

/// How many file names [`FileStore::open`] tries when state files of other
/// projects hash to the same name.
const COLLISION_LIMIT: u32 = 16;

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
    /// `toolgate state repair` ([`repair`](super::repair())) keeps what can be read.
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
