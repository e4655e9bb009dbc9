//! `toolgate state repair`: a state file whose journal has a line that
//! cannot be read (not the torn last line of a crash) is not used, since
//! starting without it would forget what the journal recorded: a session
//! that ended could run again, a revoked grant allow again. The repair
//! writes the state file anew from its snapshot and every record of the
//! journal that can be read, the closed sessions above all (a fingerprint
//! is read even out of a garbled line: closing is always safe), keeps both
//! original files beside it (`<file>.before-repair-<wall ms>`), and names
//! each line it could not keep whole.
//!
//! Crash safety: the original snapshot is linked aside first; the new one
//! names no journal generation, so from its rename on the old journal no
//! longer applies; the journal is renamed aside last.

use std::path::{Path, PathBuf};

use super::error::{IoOp, StateError, Task};
use super::files::{journal_file, lock, project_paths, state_file, sync_dir, write_snapshot};
use super::format::{
    check_change, fingerprint_value, parse_state, record, root_string, session_fingerprint, Change,
    JournalHeader, Snapshot, StoredClosed, StoredSession, VERSION,
};
use super::load::{load, split_torn, Loaded};
use super::materialised::Materialised;

/// What repairing one project's state did.
#[derive(Debug, Clone, PartialEq)]
pub struct Repaired {
    /// The state file, written anew.
    pub file: PathBuf,
    /// The project it belongs to.
    pub project_root: String,
    /// Where the original snapshot and journal went.
    pub backups: Vec<PathBuf>,
    /// How many changes of the journal were kept.
    pub kept: usize,
    /// Each line that could not be kept whole, in order.
    pub lines: Vec<LineLoss>,
}

/// A journal line that could not be kept whole.
#[derive(Debug, Clone, PartialEq)]
pub struct LineLoss {
    /// Its number (the journal's first line, its header, is 1).
    pub number: usize,
    /// Why it could not be used.
    pub why: String,
    /// The changes read out of it all the same: the readable ones of an
    /// array, or the closed sessions whose fingerprint could be read.
    pub kept: Vec<Change>,
    /// Its first characters, for the report.
    pub start: String,
}

impl std::fmt::Display for Repaired {
    /// The report `toolgate state repair` prints: a line per line lost or
    /// kept in part, then what was kept and where the originals are.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "repaired {} (project {}):",
            self.file.display(),
            self.project_root
        )?;
        for line in &self.lines {
            if line.number == 0 {
                writeln!(
                    f,
                    "  the state file could not be used ({}): kept the sessions it holds whole and the closed ones it names; a session it names but cannot hold whole is closed: {}",
                    line.why, line.start
                )?;
                continue;
            }
            let closed = line
                .kept
                .iter()
                .filter(|change| matches!(change, Change::Closed(_)))
                .count();
            match (line.kept.len(), closed) {
                (0, _) => writeln!(f, "  line {}: lost ({}): {}", line.number, line.why, line.start)?,
                (kept, closed) if kept == closed => writeln!(
                    f,
                    "  line {}: cannot be used ({}); kept the {closed} closed session{} it names: {}",
                    line.number,
                    line.why,
                    if closed == 1 { "" } else { "s" },
                    line.start
                )?,
                (kept, _) => writeln!(
                    f,
                    "  line {}: cannot be used whole ({}); kept {kept} of its changes: {}",
                    line.number, line.why, line.start
                )?,
            }
        }
        let backups: Vec<String> = self
            .backups
            .iter()
            .map(|path| path.display().to_string())
            .collect();
        writeln!(
            f,
            "  kept {} change{} of the journal; the original files are {}",
            self.kept,
            if self.kept == 1 { "" } else { "s" },
            backups.join(" and ")
        )
    }
}

/// Repair every state file in `dir` whose journal has lines that cannot be
/// read (see the module). Returns what was repaired (nothing when no file
/// needed it) and warnings about files left alone. Err when `dir` cannot be
/// read, a running broker holds a file that needs repair, or a file cannot
/// be written (what was repaired before stays repaired).
///
/// A state file that cannot be used at all (not readable, not JSON,
/// another version), or a journal without its state file, is repaired too
/// (`repair_unreadable`), for the project whose root its text names or,
/// failing that, `project_root` (the file's name must be that root's).
pub fn repair(
    dir: &Path,
    wall_ms: u64,
    project_root: Option<&Path>,
) -> Result<(Vec<Repaired>, Vec<String>), StateError> {
    let mut repaired = Vec::new();
    let mut warnings = Vec::new();
    let mut paths = project_paths(dir)?;
    // A journal whose state file is gone stands for that state file.
    for journal in journals(dir)? {
        let snapshot = journal.with_extension("json");
        if !paths.contains(&snapshot) {
            paths.push(snapshot);
        }
    }
    paths.sort();
    for path in paths {
        let unreadable = match load(&path) {
            Loaded::Damaged(_) => None,
            Loaded::Unusable(reason) => Some(reason.to_string()),
            Loaded::Missing => Some("there is no state file beside its journal".to_string()),
            Loaded::State(_) => continue,
        };
        let _lock = match lock(&path) {
            Ok(lock) => lock,
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StateError::Locked {
                    path,
                    task: Task::Repair,
                })
            }
            Err(std::fs::TryLockError::Error(err)) => {
                return Err(StateError::io(IoOp::Lock, &path, err))
            }
        };
        let done = match &unreadable {
            None => repair_file(&path, wall_ms),
            Some(reason) => repair_unreadable(&path, reason, wall_ms, project_root),
        };
        match done {
            Ok(Some(done)) => repaired.push(done),
            Ok(None) => {}
            Err(Skip(why)) => warnings.push(format!("skipping {}: {why}", path.display())),
        }
    }
    Ok((repaired, warnings))
}

/// Why a file was not repaired.
struct Skip(String);

/// Repair one state file, under its lock. `None` when it needs no repair
/// (any more).
fn repair_file(path: &Path, wall_ms: u64) -> Result<Option<Repaired>, Skip> {
    let text =
        std::fs::read_to_string(path).map_err(|err| Skip(format!("cannot read it: {err}")))?;
    let (snapshot, generation) = parse_state(&text).map_err(|err| Skip(err.to_string()))?;
    let journal = journal_file(path);
    let bytes = std::fs::read(&journal).map_err(|err| {
        Skip(format!(
            "cannot read its journal {}: {err}",
            journal.display()
        ))
    })?;
    let (complete, torn) = split_torn(&bytes);
    let mut lines = complete.split(|&byte| byte == b'\n');
    let header = lines.next().unwrap_or_default();
    // Whether the records follow this snapshot; with a header that cannot
    // be read nobody knows, so only what closes a session is kept.
    let mut losses = Vec::new();
    let follows = match serde_json::from_slice::<JournalHeader>(header) {
        Ok(header) if generation == Some(header.generation) => true,
        // Another generation: the journal is stale and nothing is damaged.
        Ok(_) => return Ok(None),
        Err(err) => {
            losses.push(LineLoss {
                number: 1,
                why: format!("not a journalGeneration line: {err}; so the journal's records cannot be known to follow the snapshot, and only the sessions they close are kept"),
                kept: Vec::new(),
                start: start_of(header),
            });
            false
        }
    };
    let project_root = snapshot.project_root.clone();
    let mut state = Materialised::from_snapshot(snapshot);
    let mut kept = 0;
    for (index, line) in lines.enumerate() {
        let number = index + 2;
        let (changes, why) = match record(line) {
            Ok(changes) => (changes, None),
            Err(why) => (salvage(line), Some(why.to_string())),
        };
        let (changes, why) = if follows {
            (changes, why)
        } else {
            let all = changes.len();
            let closing: Vec<Change> = changes
                .into_iter()
                .filter(|change| matches!(change, Change::Closed(_)))
                .collect();
            let why = why.or_else(|| {
                (closing.len() < all).then(|| "not known to follow the snapshot".to_string())
            });
            (closing, why)
        };
        kept += changes.len();
        if let Some(why) = why {
            losses.push(LineLoss {
                number,
                why,
                kept: changes.clone(),
                start: start_of(line),
            });
        }
        for change in changes {
            state.apply(change);
        }
    }
    if !torn.is_empty() {
        losses.push(LineLoss {
            number: complete.split(|&byte| byte == b'\n').count(),
            why: "an incomplete last record: a write that was never confirmed, which every start ignores".to_string(),
            kept: Vec::new(),
            start: start_of(torn),
        });
    }
    let mut repaired = state.snapshot();
    repaired.version = VERSION;
    // The original snapshot first: a link (or a copy) beside it.
    let snapshot_backup = aside(path, wall_ms);
    if std::fs::hard_link(path, &snapshot_backup).is_err() {
        std::fs::copy(path, &snapshot_backup).map_err(|err| {
            Skip(format!(
                "cannot keep the original as {}: {err}",
                snapshot_backup.display()
            ))
        })?;
    }
    // Names no journal generation: from here on the old journal is stale.
    write_snapshot(path, &repaired).map_err(|err| Skip(err.to_string()))?;
    let journal_backup = retire_journal(path, &journal, wall_ms)?;
    Ok(Some(Repaired {
        file: path.to_path_buf(),
        project_root,
        backups: vec![snapshot_backup, journal_backup],
        kept,
        lines: losses,
    }))
}

/// The journals in `dir` (`project-*.journal`).
fn journals(dir: &Path) -> Result<Vec<PathBuf>, StateError> {
    let entries = std::fs::read_dir(dir).map_err(|err| StateError::io(IoOp::ReadDir, dir, err))?;
    Ok(entries
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("project-") && name.ends_with(".journal"))
        })
        .collect())
}

/// The JSON value that follows the first `"KEY":` in `text` (blanks
/// allowed after the colon), as `T`.
fn value_after<T: serde::de::DeserializeOwned>(text: &str, key: &str) -> Option<T> {
    let at = text.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = text.get(at..)?;
    serde_json::Deserializer::from_str(rest)
        .into_iter::<T>()
        .next()?
        .ok()
}

/// Every JSON object in `text` that has `"KEY":` as its first key (with
/// any blanks around): as `T` when it reads whole, and the string value of
/// `KEY` when that reads. What a damaged, pretty-printed file still holds.
fn objects<T: serde::de::DeserializeOwned>(
    text: &str,
    key: &str,
) -> Vec<(Option<T>, Option<String>)> {
    let quoted = format!("\"{key}\"");
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text.get(from..).and_then(|rest| rest.find(&quoted)) {
        let at = from + at;
        from = at + quoted.len();
        let before = text.get(..at).unwrap_or_default().trim_end();
        if !before.ends_with('{') {
            continue;
        }
        let open = before.len() - 1;
        let whole = text.get(open..).and_then(|object| {
            serde_json::Deserializer::from_str(object)
                .into_iter::<T>()
                .next()
                .and_then(Result::ok)
        });
        let after = text.get(from..).unwrap_or_default().trim_start();
        let id = after.strip_prefix(':').and_then(|value| {
            serde_json::Deserializer::from_str(value)
                .into_iter::<String>()
                .next()
                .and_then(Result::ok)
        });
        found.push((whole, id));
    }
    found
}

/// Is `path` the state file of `root` (its name, or a collision name, is
/// the root's hash)?
fn names_root(path: &Path, root: &str) -> bool {
    let expected = state_file(Path::new(""), Path::new(root));
    let (Some(expected), Some(name)) = (
        expected.file_stem().and_then(|s| s.to_str()),
        path.file_stem().and_then(|s| s.to_str()),
    ) else {
        return false;
    };
    name == expected
        || name
            .strip_prefix(expected)
            .is_some_and(|rest| rest.starts_with('-'))
}

/// Repair a state file that cannot be used at all, or a journal without
/// its state file: a new state file for its project holding every session
/// whose record can still be read whole, every closed session whose
/// fingerprint can be read (in the file and in every journal line), and,
/// closed, every session whose id can be read but not its whole record (a
/// scope or mode that cannot be read must not come back as a session with
/// none). Grants are not kept: losing one only ever asks more. The
/// originals are kept beside it.
fn repair_unreadable(
    path: &Path,
    reason: &str,
    wall_ms: u64,
    project_root: Option<&Path>,
) -> Result<Option<Repaired>, Skip> {
    let bytes = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let journal = journal_file(path);
    let journal_bytes = std::fs::read(&journal).ok();
    let named: Option<String> = value_after(&text, "projectRoot");
    let given = project_root.map(root_string);
    let Some(root) = [named, given]
        .into_iter()
        .flatten()
        .find(|root| names_root(path, root))
    else {
        return Err(Skip(format!(
            "it cannot be used ({reason}) and its project cannot be told from it: run the repair with --project-root ROOT, the project it belongs to"
        )));
    };
    let mut losses = vec![LineLoss {
        number: 0,
        why: format!("{reason}; grants are not kept"),
        kept: Vec::new(),
        start: start_of(&bytes),
    }];
    let mut snapshot = Snapshot::new(Path::new(&root));
    let closed_change = |id: &str| {
        Change::Closed(StoredClosed {
            fingerprint: format!("{:016x}", session_fingerprint(id)),
            why: "ended".to_string(),
        })
    };
    // The closed sessions it names, and each session record: whole, or
    // closed by its id.
    let mut closing: Vec<Change> = objects::<StoredClosed>(&text, "fingerprint")
        .into_iter()
        .filter_map(|(closed, _)| closed)
        .filter(|closed| fingerprint_value(&closed.fingerprint).is_some())
        .map(Change::Closed)
        .collect();
    for (session, id) in objects::<StoredSession>(&text, "sessionID") {
        match (session, id) {
            (Some(session), _) => snapshot.sessions.push(session),
            (None, Some(id)) => closing.push(closed_change(&id)),
            (None, None) => {}
        }
    }
    snapshot
        .sessions
        .sort_by(|a, b| a.session_id.cmp(&b.session_id));
    snapshot
        .sessions
        .dedup_by(|a, b| a.session_id == b.session_id);
    let mut state = Materialised::from_snapshot(snapshot);
    let mut kept = closing.len();
    if let Some(journal_bytes) = &journal_bytes {
        // Which snapshot its records follow cannot be told: what closes a
        // session is kept, and every other session a record names is
        // closed (its latest scope or mode cannot be trusted).
        for (index, line) in journal_bytes
            .split(|&byte| byte == b'\n')
            .enumerate()
            .skip(1)
        {
            if line.is_empty() {
                continue;
            }
            let mut changes: Vec<Change> = record(line)
                .unwrap_or_else(|_| salvage(line))
                .into_iter()
                .filter(|change| matches!(change, Change::Closed(_)))
                .collect();
            let text = String::from_utf8_lossy(line);
            for (_, id) in objects::<serde_json::Value>(&text, "sessionID") {
                if let Some(id) = id {
                    changes.push(closed_change(&id));
                }
            }
            losses.push(LineLoss {
                number: index + 1,
                why: "a journal record of a state file that cannot be read: only the sessions it closes are kept, and the sessions it names are closed".to_string(),
                kept: changes.clone(),
                start: start_of(line),
            });
            kept += changes.len();
            closing.extend(changes);
        }
    }
    for change in closing {
        state.apply(change);
    }
    let mut repaired = state.snapshot();
    repaired.version = VERSION;
    let mut backups = Vec::new();
    if std::fs::symlink_metadata(path).is_ok() {
        let backup = aside(path, wall_ms);
        std::fs::rename(path, &backup).map_err(|err| {
            Skip(format!(
                "cannot keep the original as {}: {err}",
                backup.display()
            ))
        })?;
        backups.push(backup);
    }
    // Names no journal generation: the old journal no longer applies.
    write_snapshot(path, &repaired).map_err(|err| Skip(err.to_string()))?;
    if journal_bytes.is_some() || std::fs::symlink_metadata(&journal).is_ok() {
        backups.push(retire_journal(path, &journal, wall_ms)?);
    } else {
        sync_beside(path)?;
    }
    Ok(Some(Repaired {
        file: path.to_path_buf(),
        project_root: root,
        backups,
        kept,
        lines: losses,
    }))
}

/// Once the repaired snapshot is written: move the old journal aside (it no
/// longer applies) and sync the directory, so the repair is on disk. The
/// journal's new name.
fn retire_journal(path: &Path, journal: &Path, wall_ms: u64) -> Result<PathBuf, Skip> {
    let backup = aside(journal, wall_ms);
    std::fs::rename(journal, &backup).map_err(|err| {
        Skip(format!(
            "repaired, but the old journal {} (no longer used) could not be moved to {}: {err}",
            journal.display(),
            backup.display()
        ))
    })?;
    sync_beside(path)?;
    Ok(backup)
}

/// Sync the directory holding `path`.
fn sync_beside(path: &Path) -> Result<(), Skip> {
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    sync_dir(dir).map_err(|err| {
        Skip(format!(
            "repaired, but {} could not be synced: {err}",
            dir.display()
        ))
    })
}

/// `<path>.before-repair-<wall_ms>` (or `-<wall_ms>-<n>` when taken).
fn aside(path: &Path, wall_ms: u64) -> PathBuf {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut n = 1u32;
    loop {
        let aside = if n == 1 {
            path.with_file_name(format!("{name}.before-repair-{wall_ms}"))
        } else {
            path.with_file_name(format!("{name}.before-repair-{wall_ms}-{n}"))
        };
        if std::fs::symlink_metadata(&aside).is_err() {
            return aside;
        }
        n += 1;
    }
}

/// What can be read of a line that is not a record: the readable changes
/// of an array, else every closed session whose fingerprint can be read
/// (only a `closed` change holds one), which is always safe to keep.
fn salvage(line: &[u8]) -> Vec<Change> {
    if let Ok(values) = serde_json::from_slice::<Vec<serde_json::Value>>(line) {
        let readable: Vec<Change> = values
            .into_iter()
            .filter_map(|value| serde_json::from_value::<Change>(value).ok())
            .filter(|change| check_change(change).is_ok())
            .collect();
        if !readable.is_empty() {
            return readable;
        }
    }
    let text = String::from_utf8_lossy(line);
    let key = "\"fingerprint\":\"";
    let mut closed = Vec::new();
    let mut rest: &str = &text;
    while let Some(at) = rest.find(key) {
        rest = rest.get(at + key.len()..).unwrap_or_default();
        let print = rest
            .get(..16)
            .filter(|print| fingerprint_value(print).is_some() && rest.get(16..17) == Some("\""));
        if let Some(print) = print {
            // The reason follows the fingerprint in what the broker writes.
            let after: String = rest.chars().skip(16).take(24).collect();
            let why = if after.contains("\"refused\"") {
                "refused"
            } else {
                "ended"
            };
            closed.push(Change::Closed(StoredClosed {
                fingerprint: print.to_string(),
                why: why.to_string(),
            }));
        }
    }
    closed
}

/// The first characters of a line, control characters escaped.
fn start_of(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    let mut start: String = text
        .chars()
        .take(60)
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect();
    if text.chars().count() > 60 {
        start.push('…');
    }
    format!("`{start}`")
}
