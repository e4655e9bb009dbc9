//! Loading a project's state: the snapshot read, then its journal replayed
//! (the header checked, a torn last line ignored, any other bad line
//! reported as damage).

use std::path::Path;
use std::sync::Arc;

use super::error::{Invalid, JournalDamage, Unreadable};
use super::files::journal_file;
use super::format::{parse_state, record, JournalHeader, Snapshot};
use super::materialised::Materialised;

/// What a state file and its journal hold, read.
pub(super) struct LoadedState {
    /// The snapshot with the journal's records applied.
    pub(super) snapshot: Snapshot,
    /// The journal generation the snapshot names (`None`: no journal applies).
    pub(super) generation: Option<u64>,
    /// The highest generation in either file.
    pub(super) highest: u64,
    pub(super) snapshot_len: u64,
    /// Bytes of the journal's complete lines.
    pub(super) journal_len: u64,
    /// The journal belongs to this snapshot and ends with a complete record.
    pub(super) appendable: bool,
    pub(super) warnings: Vec<String>,
}

pub(super) enum Loaded {
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
pub(super) struct Damaged {
    /// The project the snapshot names.
    pub(super) project_root: String,
    /// The journal and its unreadable lines; its `Display` says why the
    /// state cannot be used.
    pub(super) damage: JournalDamage,
}

/// Read a state file and replay its journal.
pub(super) fn load(path: &Path) -> Loaded {
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
pub(super) fn split_torn(bytes: &[u8]) -> (&[u8], &[u8]) {
    let complete_len = bytes
        .iter()
        .rposition(|&byte| byte == b'\n')
        .map_or(0, |index| index + 1);
    bytes.split_at(complete_len)
}
