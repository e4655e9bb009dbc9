//! What is on disk: the snapshot ([`Snapshot`], [`StoredGrant`],
//! [`StoredSession`], [`StoredClosed`]), a journal line ([`Change`]) and the
//! journal's header; reading a state file or a journal line and checking
//! what it holds, and encoding a snapshot.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolgate_policy::GrantPattern;
use toolgate_protocol::ScopeSpec;

use super::error::{Invalid, StateError};

/// The state file format this build reads and writes.
pub const VERSION: u32 = 1;

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

/// The number a stored fingerprint (16 lowercase hex digits) stands for.
pub(super) fn fingerprint_value(text: &str) -> Option<u64> {
    let hex = text.len() == 16
        && text
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte));
    hex.then(|| u64::from_str_radix(text, 16).ok()).flatten()
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
    /// For a grant made with `expiresIn`: when it ends, in milliseconds
    /// since the Unix epoch. Absent for a grant without a lifetime (and in
    /// files of earlier builds). A grant whose end has passed covers
    /// nothing: the broker that reads it drops it, and it is never listed.
    #[serde(rename = "expiresAt", default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
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
    /// For a session joined under its parent without a scope of its own
    /// (`"join": true`, no `permissions`): the narrowings of the parent's
    /// sub-tasks it met when it joined, each a layer of its scope. Files
    /// written before this field load as not joined.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub joined: Vec<StoredJoined>,
}

/// A sub-task's narrowing that a joined session met ([`StoredSession::joined`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredJoined {
    /// The sub-task that had it.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// Its narrowing, as its `session_start` gave it.
    pub permissions: ScopeSpec,
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

pub(super) fn root_string(project_root: &Path) -> String {
    project_root.to_string_lossy().into_owned()
}

/// 64-bit FNV-1a.
pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Parse and check a state file's text.
pub fn parse_snapshot(text: &str) -> Result<Snapshot, Invalid> {
    parse_state(text).map(|(snapshot, _)| snapshot)
}

/// A state file's snapshot and the journal generation it names.
pub(super) fn parse_state(text: &str) -> Result<(Snapshot, Option<u64>), Invalid> {
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

/// The first line of a journal: which snapshot its records follow.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct JournalHeader {
    #[serde(rename = "journalGeneration")]
    pub(super) generation: u64,
}

/// The changes one journal line records (none for a blank line): one change
/// as an object, several as an array.
pub(super) fn record(line: &[u8]) -> Result<Vec<Change>, Invalid> {
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

pub(super) fn check_change(change: &Change) -> Result<(), Invalid> {
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

/// The snapshot with its sessions in `sessionID` order.
pub(super) fn sorted(mut snapshot: Snapshot) -> Snapshot {
    snapshot
        .sessions
        .sort_by(|a, b| a.session_id.cmp(&b.session_id));
    snapshot
}

/// A snapshot as written: its fields, then the journal generation.
#[derive(Serialize)]
struct OnDisk<'a> {
    #[serde(flatten)]
    snapshot: &'a Snapshot,
    #[serde(rename = "journalGeneration", skip_serializing_if = "Option::is_none")]
    generation: Option<u64>,
}

/// Pretty JSON, sessions sorted by `sessionID`, ending in a newline.
pub(super) fn encode(
    path: &Path,
    snapshot: &Snapshot,
    generation: Option<u64>,
) -> Result<String, StateError> {
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
