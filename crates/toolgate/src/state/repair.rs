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

use super::{
    check_change, fingerprint_value, journal_file, load, lock, parse_state, project_paths, record,
    split_torn, sync_dir, write_snapshot, Change, JournalHeader, Loaded, Materialised,
    StoredClosed, VERSION,
};

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
pub fn repair(dir: &Path, wall_ms: u64) -> Result<(Vec<Repaired>, Vec<String>), String> {
    let mut repaired = Vec::new();
    let mut warnings = Vec::new();
    for path in project_paths(dir)? {
        if !matches!(load(&path), Loaded::Damaged(_)) {
            continue;
        }
        let _lock = match lock(&path) {
            Ok(lock) => lock,
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(format!(
                    "a running toolgate holds {}; stop it before repairing",
                    path.display()
                ))
            }
            Err(std::fs::TryLockError::Error(err)) => {
                return Err(format!("cannot lock {}: {err}", path.display()))
            }
        };
        match repair_file(&path, wall_ms) {
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
    let (snapshot, generation) = parse_state(&text).map_err(Skip)?;
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
            Err(why) => (salvage(line), Some(why)),
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
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
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
    write_snapshot(path, &repaired).map_err(Skip)?;
    let journal_backup = aside(&journal, wall_ms);
    std::fs::rename(&journal, &journal_backup).map_err(|err| {
        Skip(format!(
            "repaired, but the old journal {} (no longer used) could not be moved to {}: {err}",
            journal.display(),
            journal_backup.display()
        ))
    })?;
    sync_dir(&dir).map_err(|err| {
        Skip(format!(
            "repaired, but {} could not be synced: {err}",
            dir.display()
        ))
    })?;
    Ok(Some(Repaired {
        file: path.to_path_buf(),
        project_root,
        backups: vec![snapshot_backup, journal_backup],
        kept,
        lines: losses,
    }))
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
