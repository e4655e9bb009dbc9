//! The state that survives a restart (`--state-dir DIR`): one JSON file per
//! project root, holding the grants and the sessions that carry them.
//!
//! - The file for a project is `DIR/project-<16 hex digits>.json`, the digits
//!   being the 64-bit FNV-1a hash of the project root's path ([`state_file`]).
//!   The file also records `projectRoot`; a file whose `projectRoot` differs
//!   (a hash collision, or a copied file) is never used for another project:
//!   the store warns and moves on to `project-<hash>-2.json`, `-3`, ...
//! - Saving is atomic: the JSON is written to a temporary file in the same
//!   directory, synced, renamed over the state file, and the directory is
//!   synced. A crash leaves either the old file or the new one, never half.
//! - Opening never fails. A file that cannot be read, is not JSON, has another
//!   `version` or does not fit together is renamed aside to
//!   `<file>.corrupt-<wall ms>` (nothing is deleted) and the broker starts
//!   clean; every problem becomes a warning for the caller to print.
//! - One broker per project root and state directory at a time: nothing locks
//!   the file, and the last save wins.
//! - Sessions are kept when they were started, given a mode, hold grants or
//!   are the parent of a kept session (an implicit parent is marked
//!   `implicit`), with whether they were `started`. Every session that ended or
//!   whose start was refused is kept, without a count bound, as the
//!   fingerprint of its id ([`session_fingerprint`]) in `closed`.
//!
//! [`list_grants`] and [`revoke_grants`] serve `toolgate grants list|revoke`,
//! which work on the files while no broker holds them.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolgate_policy::GrantPattern;
use toolgate_protocol::ScopeSpec;

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
    /// Replace the stored state with `snapshot`. The error names what failed.
    fn save(&mut self, snapshot: &Snapshot) -> Result<(), String>;
}

/// The state file of one project in a state directory.
#[derive(Debug, Clone)]
pub struct FileStore {
    path: PathBuf,
    project_root: String,
    /// The lock held on `<file>.lock` while this store lives.
    _lock: Option<std::sync::Arc<std::fs::File>>,
    /// Why saves are refused, when another broker holds the file.
    held_elsewhere: Option<String>,
}

impl FileStore {
    /// Opens `dir` (creating it), loads the project's state file. Never fails:
    /// problems become warnings (to be printed on stderr by the caller) and an
    /// empty snapshot. A corrupt, unparsable or wrong-version file is renamed
    /// aside to `<file>.corrupt-<wall_ms>` and the broker starts clean. If
    /// `dir` cannot be created or written, the store is still returned and
    /// later saves return `Err`.
    pub fn open(
        dir: &Path,
        project_root: &Path,
        wall_ms: u64,
    ) -> (FileStore, Snapshot, Vec<String>) {
        let (mut store, snapshot, mut warnings) =
            FileStore::open_unlocked(dir, project_root, wall_ms);
        if store.path.as_os_str().is_empty() || !dir.is_dir() {
            return (store, snapshot, warnings);
        }
        // One broker per state file: a second one reads the state but keeps
        // its changes in memory, rather than overwriting the first one's.
        match lock(&store.path) {
            Ok(file) => {
                store._lock = Some(std::sync::Arc::new(file));
                // Only the holder of the lock writes this file, so temporary
                // files left next to it are a crashed broker's: remove them.
                remove_stale_temporaries(&store.path, &mut warnings);
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                warnings.push(format!(
                    "another toolgate holds the state file {} (locked through {}); this broker starts from it but keeps its changes in memory only",
                    store.path.display(),
                    lock_path(&store.path).display()
                ));
                store.held_elsewhere = Some(format!(
                    "another toolgate holds the state file {}",
                    store.path.display()
                ));
            }
            Err(std::fs::TryLockError::Error(err)) => warnings.push(format!(
                "cannot lock {} ({err}); saving anyway, so run one broker per project and state directory",
                lock_path(&store.path).display()
            )),
        }
        (store, snapshot, warnings)
    }

    fn open_unlocked(
        dir: &Path,
        project_root: &Path,
        wall_ms: u64,
    ) -> (FileStore, Snapshot, Vec<String>) {
        let mut warnings = Vec::new();
        let root = root_string(project_root);
        let empty = Snapshot::new(project_root);
        let primary = state_file(dir, project_root);
        let store = |path: PathBuf| FileStore {
            path,
            project_root: root.clone(),
            _lock: None,
            held_elsewhere: None,
        };
        if let Err(err) = create_dir(dir) {
            warnings.push(format!(
                "cannot create the state directory {}: {err}; nothing will be saved",
                dir.display()
            ));
            return (store(primary), empty, warnings);
        }
        for attempt in 1..=COLLISION_LIMIT {
            let path = if attempt == 1 {
                primary.clone()
            } else {
                collision_file(&primary, attempt)
            };
            match load(&path) {
                Loaded::Missing => return (store(path), empty, warnings),
                Loaded::Snapshot(snapshot) if snapshot.project_root == root => {
                    return (store(path), snapshot, warnings)
                }
                Loaded::Snapshot(snapshot) => warnings.push(format!(
                    "the state file {} belongs to the project {}, not {root}; it is left alone",
                    path.display(),
                    snapshot.project_root
                )),
                Loaded::Unusable(reason) => {
                    match move_aside(&path, wall_ms) {
                        Ok(aside) => warnings.push(format!(
                            "the state file {} is unusable ({reason}); moved it to {} and starting with no saved state",
                            path.display(),
                            aside.display()
                        )),
                        Err(err) => warnings.push(format!(
                            "the state file {} is unusable ({reason}) and could not be moved aside ({err}); starting with no saved state",
                            path.display()
                        )),
                    }
                    return (store(path), empty, warnings);
                }
            }
        }
        warnings.push(format!(
            "{COLLISION_LIMIT} state files in {} belong to other projects; nothing will be saved",
            dir.display()
        ));
        let store = FileStore {
            path: PathBuf::new(),
            project_root: root.clone(),
            _lock: None,
            held_elsewhere: None,
        };
        (store, empty, warnings)
    }

    /// The state file this store writes (empty when no file name was free).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Store for FileStore {
    /// Saves `snapshot` atomically, as the current [`VERSION`] and for this
    /// store's project root whatever the snapshot says.
    fn save(&mut self, snapshot: &Snapshot) -> Result<(), String> {
        if let Some(why) = &self.held_elsewhere {
            return Err(why.clone());
        }
        if self.path.as_os_str().is_empty() {
            return Err("no state file is available for this project".to_string());
        }
        let mut snapshot = snapshot.clone();
        snapshot.version = VERSION;
        snapshot.project_root.clone_from(&self.project_root);
        write_snapshot(&self.path, &snapshot)
    }
}

/// A store in memory, for tests: clones share the saved snapshots, so a test
/// can keep one and hand the other to a broker.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    shared: Arc<Mutex<MemoryState>>,
}

#[derive(Debug, Default)]
struct MemoryState {
    saved: Vec<Snapshot>,
    failure: Option<String>,
}

impl MemoryStore {
    /// A store that has saved nothing.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// Every snapshot saved so far, oldest first.
    pub fn saved(&self) -> Vec<Snapshot> {
        self.lock().saved.clone()
    }

    /// The last snapshot saved.
    pub fn last(&self) -> Option<Snapshot> {
        self.lock().saved.last().cloned()
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
    fn save(&mut self, snapshot: &Snapshot) -> Result<(), String> {
        let mut state = self.lock();
        if let Some(reason) = &state.failure {
            return Err(reason.clone());
        }
        state.saved.push(sorted(snapshot.clone()));
        Ok(())
    }
}

/// `DIR/project-<16 hex digits of the FNV-1a hash of the root path>.json`.
pub fn state_file(dir: &Path, project_root: &Path) -> PathBuf {
    let hash = fnv1a(root_string(project_root).as_bytes());
    dir.join(format!("project-{hash:016x}.json"))
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
pub fn parse_snapshot(text: &str) -> Result<Snapshot, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|err| format!("not valid JSON: {err}"))?;
    match value.get("version") {
        Some(Value::Number(number)) if number.as_u64() == Some(u64::from(VERSION)) => {}
        Some(other) => return Err(format!("version {other}, expected {VERSION}")),
        None => return Err(format!("no version, expected {VERSION}")),
    }
    // Files of earlier builds list ended sessions by id.
    let legacy_ended: Vec<String> = match value.get("endedSessions") {
        None => Vec::new(),
        Some(ended) => serde_json::from_value(ended.clone())
            .map_err(|err| format!("not a state file: endedSessions: {err}"))?,
    };
    let mut snapshot: Snapshot =
        serde_json::from_value(value).map_err(|err| format!("not a state file: {err}"))?;
    for id in legacy_ended {
        snapshot.closed.push(StoredClosed {
            fingerprint: format!("{:016x}", session_fingerprint(&id)),
            why: "ended".to_string(),
        });
    }
    let grants = snapshot
        .project_grants
        .iter()
        .chain(snapshot.sessions.iter().flat_map(|session| &session.grants));
    for grant in grants {
        if GrantPattern::from_parts(&grant.pattern, grant.literal).is_none() {
            return Err(format!(
                "grant {}: literal length {} does not fit the pattern `{}`",
                grant.grant_id, grant.literal, grant.pattern
            ));
        }
    }
    let mut ids: Vec<&str> = snapshot
        .sessions
        .iter()
        .map(|session| session.session_id.as_str())
        .collect();
    ids.sort_unstable();
    if let Some(pair) = ids.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(format!("the session {} is stored twice", pair[0]));
    }
    Ok(snapshot)
}

enum Loaded {
    Missing,
    Snapshot(Snapshot),
    Unusable(String),
}

fn load(path: &Path) -> Loaded {
    match std::fs::read(path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Loaded::Missing,
        Err(err) => Loaded::Unusable(format!("cannot read it: {err}")),
        Ok(bytes) => match String::from_utf8(bytes) {
            Err(_) => Loaded::Unusable("not UTF-8".to_string()),
            Ok(text) => match parse_snapshot(&text) {
                Ok(snapshot) => Loaded::Snapshot(snapshot),
                Err(reason) => Loaded::Unusable(reason),
            },
        },
    }
}

/// Rename `path` to `<path>.corrupt-<wall_ms>` (or `-<wall_ms>-<n>` when taken).
fn move_aside(path: &Path, wall_ms: u64) -> std::io::Result<PathBuf> {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut n = 1u32;
    loop {
        let aside = if n == 1 {
            path.with_file_name(format!("{name}.corrupt-{wall_ms}"))
        } else {
            path.with_file_name(format!("{name}.corrupt-{wall_ms}-{n}"))
        };
        if std::fs::symlink_metadata(&aside).is_err() {
            std::fs::rename(path, &aside)?;
            return Ok(aside);
        }
        n += 1;
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

/// Write `snapshot` to `path` atomically: pretty JSON (sessions sorted by
/// `sessionID`) into `.<file>.tmp-<pid>-<n>` in the same directory, synced,
/// renamed over `path`; then the directory is synced. On failure the
/// temporary file is removed and the error names the path and the reason.
pub fn write_snapshot(path: &Path, snapshot: &Snapshot) -> Result<(), String> {
    let mut text = serde_json::to_string_pretty(&sorted(snapshot.clone()))
        .map_err(|err| format!("cannot encode the state for {}: {err}", path.display()))?;
    text.push('\n');
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .ok_or_else(|| format!("{} is not a file name", path.display()))?;
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let temp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = write_synced(&temp, text.as_bytes())
        .map_err(|err| format!("cannot write {}: {err}", temp.display()))
        .and_then(|()| {
            std::fs::rename(&temp, path).map_err(|err| {
                format!(
                    "cannot rename {} to {}: {err}",
                    temp.display(),
                    path.display()
                )
            })
        });
    if let Err(err) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(err);
    }
    sync_dir(&dir).map_err(|err| {
        format!(
            "{} was replaced but its directory could not be synced: {err}",
            path.display()
        )
    })
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
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
pub fn list_grants(dir: &Path) -> Result<(Vec<GrantRow>, Vec<String>), String> {
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
/// them, saving each changed file with [`write_snapshot`]. Ids that no file
/// holds are reported in [`Revoked::unknown`]; the others are still removed.
/// A broker running for one of these projects keeps its own copy and writes
/// it back at its next save: revoke there with the `revoke_grant` frame.
pub fn revoke_grants(dir: &Path, ids: &[String]) -> Result<Revoked, String> {
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
                return Err(format!(
                    "a running toolgate holds {}; revoke there with a revoke_grant frame",
                    path.display()
                ))
            }
            Err(std::fs::TryLockError::Error(err)) => {
                return Err(format!("cannot lock {}: {err}", path.display()))
            }
        };
        // Read again under the lock: the file may have changed since listing.
        let mut snapshot = match load(&path) {
            Loaded::Snapshot(snapshot) => snapshot,
            Loaded::Missing => continue,
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
        write_snapshot(&path, &snapshot)?;
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
) -> Result<Vec<(PathBuf, Snapshot)>, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|err| format!("cannot read the state directory {}: {err}", dir.display()))?;
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
    let mut files = Vec::new();
    for path in paths {
        match load(&path) {
            Loaded::Snapshot(snapshot) => files.push((path, snapshot)),
            Loaded::Unusable(reason) => {
                warnings.push(format!("skipping {}: {reason}", path.display()))
            }
            Loaded::Missing => {}
        }
    }
    Ok(files)
}

/// `rows` as an aligned table with a header (`toolgate grants list`), one
/// line each; control characters in cells are escaped so a row stays one line.
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
            cell(&row.pattern),
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
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}
