//! The files of a state directory: their paths, atomic replacement
//! (temporary file, sync, rename, directory sync), the locks, and the
//! temporary files a crashed broker left.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::error::{IoOp, StateError};
use super::format::{encode, fnv1a, root_string, JournalHeader, Snapshot};

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
pub(super) fn collision_file(primary: &Path, n: u32) -> PathBuf {
    let stem = primary
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    primary.with_file_name(format!("{stem}-{n}.json"))
}

pub(super) fn create_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Distinguishes temporary files of one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

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
pub(super) enum Written {
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
pub(super) fn write_state(
    path: &Path,
    journal: &Path,
    snapshot: &Snapshot,
    generation: u64,
) -> Written {
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

pub(super) fn sync_dir(dir: &Path) -> std::io::Result<()> {
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

/// Remove `.<file>.tmp-*` left by a broker that died while saving.
pub(super) fn remove_stale_temporaries(path: &Path, warnings: &mut Vec<String>) {
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
pub(super) fn lock(path: &Path) -> Result<std::fs::File, std::fs::TryLockError> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path(path))
        .map_err(std::fs::TryLockError::Error)?;
    file.try_lock()?;
    Ok(file)
}

pub(super) fn lock_path(path: &Path) -> PathBuf {
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lock");
    PathBuf::from(lock)
}

/// The `project-*.json` files in `dir`, in name order.
pub(super) fn project_paths(dir: &Path) -> Result<Vec<PathBuf>, StateError> {
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
