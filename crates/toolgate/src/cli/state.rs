//! `toolgate grants list|revoke` and `toolgate state repair`: the files of a
//! state directory, for the person who runs them (stdout is theirs).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use toolgate::clock::{Clock, SystemClock};
use toolgate::display::shown;
use toolgate::say;
use toolgate::store;

use super::broker::state_dir_env;

#[derive(Debug, Subcommand)]
pub enum GrantsCommand {
    /// List every grant of every project in the state directory: grantID,
    /// scope (project or session), sessionID, permission, pattern, the time
    /// a grant made with a lifetime has left, project root. A grant whose
    /// lifetime is over is not listed.
    List {
        /// The state directory [env: TOOLGATE_STATE_DIR]
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove grants from whichever project file holds them (saved
    /// atomically). Prints what was removed; an id no file holds is reported
    /// on stderr and the exit code is 1.
    Revoke {
        /// The state directory [env: TOOLGATE_STATE_DIR]
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// The grants to remove (grant_...).
        #[arg(value_name = "GRANT_ID", required = true)]
        ids: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Repair the state files a broker refuses to start on (exit code 2):
    /// a journal with a line that cannot be read is written anew from its
    /// snapshot and every journal record that can be read (the sessions it
    /// closes above all); a state file that cannot be read at all, or a
    /// journal without one, keeps the sessions it holds whole and the
    /// closed ones it names, and closes the sessions it cannot read whole.
    /// The original files are kept beside it
    /// (`<file>.before-repair-<ms>`), and everything not kept whole is
    /// named. Exit code 1 when a file could not be repaired.
    Repair {
        /// The state directory [env: TOOLGATE_STATE_DIR]
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// The project a state file that cannot be read at all belongs to,
        /// when its text no longer names it (default: the current
        /// directory); the file's name must be that project's
        #[arg(long, value_name = "DIR")]
        project_root: Option<PathBuf>,
    },
}

/// `toolgate state …`.
/// `outer` is a `--state-dir` given before `state`.
pub fn state(command: StateCommand, outer: Option<PathBuf>) -> ExitCode {
    match command {
        StateCommand::Repair {
            state_dir,
            project_root,
        } => repair(state_dir.or(outer), project_root),
    }
}

/// `toolgate grants list|revoke`. `outer` is a `--state-dir` given before `grants`.
pub fn grants(command: GrantsCommand, outer: Option<PathBuf>) -> ExitCode {
    let (flag, json, ids) = match command {
        GrantsCommand::List { state_dir, json } => (state_dir, json, None),
        GrantsCommand::Revoke { state_dir, ids } => (state_dir, false, Some(ids)),
    };
    let Some(dir) = flag.or(outer).or_else(state_dir_env) else {
        say!("toolgate: grants needs --state-dir DIR (or TOOLGATE_STATE_DIR)");
        return ExitCode::from(2);
    };
    // This subcommand is not the broker: its stdout is for the person who ran it.
    let mut out = std::io::stdout().lock();
    let (written, code) = match ids {
        None => {
            let now = SystemClock::new().wall_ms();
            let (rows, warnings) = match store::list_grants(&dir, now) {
                Ok(listed) => listed,
                Err(err) => {
                    say!("toolgate: {err}");
                    return ExitCode::from(1);
                }
            };
            for warning in &warnings {
                say!("toolgate: warning: {warning}");
            }
            let written = if rows.is_empty() {
                say!("toolgate: no grants in {}", dir.display());
                Ok(())
            } else if json {
                rows.iter().try_for_each(|row| {
                    let line = serde_json::to_string(row).map_err(std::io::Error::other)?;
                    writeln!(out, "{line}")
                })
            } else {
                out.write_all(store::grants_table(&rows).as_bytes())
            };
            (written, ExitCode::SUCCESS)
        }
        Some(ids) => {
            let revoked = match store::revoke_grants(&dir, &ids) {
                Ok(revoked) => revoked,
                Err(err) => {
                    say!("toolgate: {err}");
                    return ExitCode::from(1);
                }
            };
            for warning in &revoked.warnings {
                say!("toolgate: warning: {warning}");
            }
            let written = revoked.removed.iter().try_for_each(|row| {
                writeln!(
                    out,
                    "revoked {} ({} grant of session {}: {} `{}`) for {}",
                    shown(&row.grant_id),
                    row.scope.as_str(),
                    shown(&row.session_id),
                    shown(&row.permission),
                    shown(&row.pattern),
                    shown(&row.project_root)
                )
            });
            for id in &revoked.unknown {
                say!("toolgate: no grant has the id `{id}` in {}", dir.display());
            }
            let code = if revoked.unknown.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            };
            (written, code)
        }
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => code,
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => code,
        Err(err) => {
            say!("toolgate: cannot write the output: {err}");
            ExitCode::from(1)
        }
    }
}

/// `toolgate state repair`: see [`state::repair`]. What was repaired goes
/// to stdout, for the person who ran it.
fn repair(flag: Option<PathBuf>, project_root: Option<PathBuf>) -> ExitCode {
    let Some(dir) = flag.or_else(state_dir_env) else {
        say!("toolgate: state repair needs --state-dir DIR (or TOOLGATE_STATE_DIR)");
        return ExitCode::from(2);
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let root = toolgate_policy::normalize(
        &project_root
            .unwrap_or_else(|| cwd.clone())
            .to_string_lossy(),
        &cwd,
        std::env::var_os("HOME").map(PathBuf::from).as_deref(),
    );
    let (repaired, warnings) = match store::repair(&dir, SystemClock::new().wall_ms(), Some(&root))
    {
        Ok(done) => done,
        Err(err) => {
            say!("toolgate: {err}");
            return ExitCode::from(1);
        }
    };
    for warning in &warnings {
        say!("toolgate: warning: {warning}");
    }
    let mut out = std::io::stdout().lock();
    let written = if repaired.is_empty() {
        writeln!(out, "nothing to repair in {}", dir.display())
    } else {
        repaired.iter().try_for_each(|done| write!(out, "{done}"))
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) if warnings.is_empty() => ExitCode::SUCCESS,
        Ok(()) => ExitCode::from(1),
        Err(err) => {
            say!("toolgate: cannot write the output: {err}");
            ExitCode::from(1)
        }
    }
}
