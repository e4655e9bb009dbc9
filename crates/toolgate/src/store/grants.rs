//! `toolgate grants list|revoke`: the grants of every project state file in
//! a state directory that have not ended ([`list_grants`], [`grants_table`])
//! and their removal while no broker holds the files ([`revoke_grants`]).

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::error::{IoOp, StateError, Task};
use super::files::{journal_file, lock, project_paths, write_snapshot};
use super::format::{Snapshot, StoredGrant};
use super::load::{load, Loaded};

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
    /// When a grant with a lifetime ends (ms since the Unix epoch).
    #[serde(rename = "expiresAt", skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// How many seconds a grant with a lifetime has left when listed
    /// (rounded up, so at least 1).
    #[serde(rename = "expiresIn", skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<u64>,
    /// The project the state file belongs to.
    #[serde(rename = "projectRoot")]
    pub project_root: String,
    /// The state file that holds it.
    #[serde(skip)]
    pub file: PathBuf,
}

/// Every grant of every project state file in `dir` still in force at
/// `now` (ms since the Unix epoch): files in name order, project grants
/// first, then each session's. A grant whose lifetime is over at `now` is
/// left out (it covers nothing; the next broker drops it); the others with
/// a lifetime say how long they have left. Files that cannot be used
/// become warnings (they are left as they are).
pub fn list_grants(dir: &Path, now: u64) -> Result<(Vec<GrantRow>, Vec<String>), StateError> {
    let mut rows = Vec::new();
    let mut warnings = Vec::new();
    for (path, snapshot) in project_files(dir, &mut warnings)? {
        rows.extend(
            rows_of(&path, &snapshot)
                .into_iter()
                .filter_map(|row| match row.expires_at {
                    None => Some(row),
                    Some(end) if end > now => Some(GrantRow {
                        expires_in: Some((end - now).div_ceil(1000)),
                        ..row
                    }),
                    Some(_) => None,
                }),
        );
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
        expires_at: grant.expires_at,
        expires_in: None,
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

/// `rows` as an aligned table with a header (`toolgate grants list`), one
/// line each; every cell is shown as [`crate::display::shown`] escapes it,
/// so a row stays one line and nothing in it acts on the terminal.
/// `EXPIRES` is the time a grant with a lifetime has left (`in 29m 59s`),
/// `never` for the others.
pub fn grants_table(rows: &[GrantRow]) -> String {
    const COLUMNS: usize = 7;
    let header = [
        "GRANT",
        "SCOPE",
        "SESSION",
        "PERMISSION",
        "PATTERN",
        "EXPIRES",
        "PROJECT",
    ];
    let mut table: Vec<[String; COLUMNS]> = vec![header.map(str::to_string)];
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
            match row.expires_in {
                Some(seconds) => format!("in {}", remaining_text(seconds)),
                None => "never".to_string(),
            },
            cell(&row.project_root),
        ]);
    }
    let mut widths = [0usize; COLUMNS];
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

/// Seconds left as a person reads them: `45s`, `29m 59s`, `1h 05m`,
/// `2d 03h` (the two largest units).
pub fn remaining_text(seconds: u64) -> String {
    let (days, hours) = (seconds / 86_400, seconds / 3_600 % 24);
    let (minutes, secs) = (seconds / 60 % 60, seconds % 60);
    if days > 0 {
        format!("{days}d {hours:02}h")
    } else if hours > 0 {
        format!("{hours}h {minutes:02}m")
    } else if minutes > 0 {
        format!("{minutes}m {secs:02}s")
    } else {
        format!("{secs}s")
    }
}

fn cell(text: &str) -> String {
    if text.is_empty() {
        return "\"\"".to_string();
    }
    crate::display::shown(text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::remaining_text;

    #[test]
    fn remaining_times() {
        let cases = [
            (1, "1s"),
            (59, "59s"),
            (60, "1m 00s"),
            (1_799, "29m 59s"),
            (3_600, "1h 00m"),
            (3_900, "1h 05m"),
            (86_399, "23h 59m"),
            (86_400, "1d 00h"),
            (183_600, "2d 03h"),
        ];
        for (seconds, text) in cases {
            assert_eq!(remaining_text(seconds), text, "{seconds}");
        }
    }
}
