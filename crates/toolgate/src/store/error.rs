//! What can go wrong with the state directory, as values with kinds: a
//! caller matches on the kind, and what a person reads is the `Display`
//! text, the same words the store has always printed. Errors are `Clone`
//! (their I/O and JSON causes are shared) because a store keeps the last
//! failed write as [`super::Store::unsaved`] while it retries.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use super::VERSION;

/// Why the state directory could not be read or written, or why the state
/// in it is not used.
#[derive(Debug, Clone)]
pub enum StateError {
    /// A file operation failed: which one, on what path, and the cause.
    Io {
        /// What the store was doing.
        op: IoOp,
        /// The file or directory it was doing it to.
        path: PathBuf,
        /// The cause.
        source: Arc<io::Error>,
    },
    /// A temporary file could not be renamed over the file it replaces.
    Rename {
        /// The temporary file.
        from: PathBuf,
        /// The file it was to replace.
        to: PathBuf,
        /// The cause.
        source: Arc<io::Error>,
    },
    /// A path to write that names no file.
    NotAFileName {
        /// The path.
        path: PathBuf,
    },
    /// A change (`path` is `None`) or the whole state for a file could not
    /// be encoded as JSON.
    Encode {
        /// The state file the state was for.
        path: Option<PathBuf>,
        /// The cause.
        source: Arc<serde_json::Error>,
    },
    /// Another broker holds this store's state file: saves are refused,
    /// and this broker keeps its changes in memory.
    HeldElsewhere {
        /// The state file.
        path: PathBuf,
    },
    /// No state file name was free for this project (every one belongs to
    /// another project).
    NoFile,
    /// A running broker holds a state file that a command would change.
    Locked {
        /// The state file.
        path: PathBuf,
        /// What the command was doing.
        task: Task,
    },
    /// Opening refused: a journal has no state file beside it.
    JournalWithoutState {
        /// The journal.
        journal: PathBuf,
        /// The state directory.
        dir: PathBuf,
        /// The project root the broker was opened for.
        project_root: PathBuf,
    },
    /// Opening refused: lines of the state file's journal cannot be read.
    Damaged {
        /// The state file.
        path: PathBuf,
        /// The state directory.
        dir: PathBuf,
        /// The journal and its lines that cannot be read.
        damage: JournalDamage,
    },
    /// Opening refused: the state file cannot be used.
    Unusable {
        /// The state file.
        path: PathBuf,
        /// The state directory.
        dir: PathBuf,
        /// The project root the broker was opened for.
        project_root: PathBuf,
        /// Why it cannot be used (boxed: it is the largest part).
        reason: Box<Unreadable>,
    },
    /// A failure a store for tests was told to report
    /// ([`super::MemoryStore::fail_with`]), with its text.
    Injected(String),
}

/// The file operation that failed, for [`StateError::Io`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    /// Appending a record to a journal.
    Append,
    /// Syncing a journal to the disk.
    Sync,
    /// Writing a temporary file.
    Write,
    /// Syncing the directory of a file just replaced (the path is the file).
    SyncDir,
    /// Taking the lock of a state file (the path is the state file).
    Lock,
    /// Listing the state directory.
    ReadDir,
}

/// What a command that found a state file locked was doing, for
/// [`StateError::Locked`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// `toolgate grants revoke`.
    Revoke,
    /// `toolgate state repair`.
    Repair,
}

/// A journal with lines that cannot be read (not the torn last line of a
/// crash): each line's number (the header is line 1) and why.
#[derive(Debug, Clone)]
pub struct JournalDamage {
    /// The journal.
    pub journal: PathBuf,
    /// Each line that cannot be read, in order.
    pub lines: Vec<(usize, Invalid)>,
}

/// Why a state file cannot be used.
#[derive(Debug, Clone)]
pub enum Unreadable {
    /// The file cannot be read.
    Read(Arc<io::Error>),
    /// Its bytes are not UTF-8.
    NotUtf8,
    /// Its text is not a state file of this version.
    Invalid(Invalid),
    /// Its journal exists but cannot be read.
    Journal {
        /// The journal.
        journal: PathBuf,
        /// The cause.
        source: Arc<io::Error>,
    },
}

/// What is wrong with the text of a state file or of a journal line.
#[derive(Debug, Clone)]
pub enum Invalid {
    /// Not JSON at all.
    NotJson(Arc<serde_json::Error>),
    /// Another `version` (`None`: none given).
    Version(Option<Value>),
    /// A `journalGeneration` that is not a count.
    Generation(Value),
    /// JSON that is not a state file: the field named (if one is) and the cause.
    Shape {
        /// The field, when the cause is in one the file reads apart.
        field: Option<&'static str>,
        /// The cause.
        source: Arc<serde_json::Error>,
    },
    /// A fingerprint in the state file's `closed` list that is not 16
    /// lowercase hex digits.
    ClosedFingerprint(String),
    /// A grant whose literal length does not fit its pattern.
    GrantLiteral {
        /// The grant's id.
        grant_id: String,
        /// The literal length.
        literal: usize,
        /// The pattern.
        pattern: String,
    },
    /// A grant whose `mode` is not `plan`.
    GrantMode {
        /// The grant's id.
        grant_id: String,
        /// The mode it names.
        mode: String,
    },
    /// A session stored twice.
    DuplicateSession(String),
    /// A journal line that is not a change (or a list of changes).
    Record(Arc<serde_json::Error>),
    /// A journal line closing a session whose fingerprint is not 16
    /// lowercase hex digits.
    Fingerprint(String),
    /// A journal's first line that is not its `journalGeneration` header.
    Header(Arc<serde_json::Error>),
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::Io { op, path, source } => {
                let path = path.display();
                match op {
                    IoOp::Append => write!(f, "cannot append to {path}: {source}"),
                    IoOp::Sync => write!(f, "cannot sync {path}: {source}"),
                    IoOp::Write => write!(f, "cannot write {path}: {source}"),
                    IoOp::SyncDir => write!(
                        f,
                        "{path} was replaced but its directory could not be synced: {source}"
                    ),
                    IoOp::Lock => write!(f, "cannot lock {path}: {source}"),
                    IoOp::ReadDir => {
                        write!(f, "cannot read the state directory {path}: {source}")
                    }
                }
            }
            StateError::Rename { from, to, source } => write!(
                f,
                "cannot rename {} to {}: {source}",
                from.display(),
                to.display()
            ),
            StateError::NotAFileName { path } => {
                write!(f, "{} is not a file name", path.display())
            }
            StateError::Encode { path: None, source } => {
                write!(f, "cannot encode a change: {source}")
            }
            StateError::Encode {
                path: Some(path),
                source,
            } => write!(
                f,
                "cannot encode the state for {}: {source}",
                path.display()
            ),
            StateError::HeldElsewhere { path } => write!(
                f,
                "another toolgate holds the state file {}",
                path.display()
            ),
            StateError::NoFile => f.write_str("no state file is available for this project"),
            StateError::Locked {
                path,
                task: Task::Revoke,
            } => write!(
                f,
                "a running toolgate holds {}; revoke there with a revoke_grant frame",
                path.display()
            ),
            StateError::Locked {
                path,
                task: Task::Repair,
            } => write!(
                f,
                "a running toolgate holds {}; stop it before repairing",
                path.display()
            ),
            StateError::JournalWithoutState {
                journal,
                dir,
                project_root,
            } => write!(
                f,
                "the journal {} has no state file beside it. Starting without it would forget what it recorded (a session that ended could run again, a revoked grant allow again). `toolgate state repair --state-dir {} --project-root {}` keeps the sessions it closes and sets it aside",
                journal.display(),
                dir.display(),
                project_root.display()
            ),
            StateError::Damaged { path, dir, damage } => write!(
                f,
                "the state file {} is not used: {damage}. Starting without it would forget what those lines recorded (a session that ended could run again, a revoked grant allow again). `toolgate state repair --state-dir {}` keeps every record that can be read, keeps the original files, and names the lines that are lost",
                path.display(),
                dir.display()
            ),
            StateError::Unusable {
                path,
                dir,
                project_root,
                reason,
            } => write!(
                f,
                "the state file {} cannot be used ({reason}). Starting without it would forget which sessions ended and which grants were revoked (a session that ended could run again). `toolgate state repair --state-dir {} --project-root {}` keeps what can still be read of it (the closed sessions above all; a session it cannot read whole is closed) and sets the original aside",
                path.display(),
                dir.display(),
                project_root.display()
            ),
            StateError::Injected(text) => f.write_str(text),
        }
    }
}

impl std::error::Error for StateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StateError::Io { source, .. } | StateError::Rename { source, .. } => Some(&**source),
            StateError::Encode { source, .. } => Some(&**source),
            StateError::Unusable { reason, .. } => Some(&**reason),
            _ => None,
        }
    }
}

impl fmt::Display for JournalDamage {
    /// `its journal J cannot be read at line N (why), line M (why)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "its journal {} cannot be read at ",
            self.journal.display()
        )?;
        for (index, (number, why)) in self.lines.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            write!(f, "line {number} ({why})")?;
        }
        Ok(())
    }
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unreadable::Read(source) => write!(f, "cannot read it: {source}"),
            Unreadable::NotUtf8 => f.write_str("not UTF-8"),
            Unreadable::Invalid(invalid) => fmt::Display::fmt(invalid, f),
            Unreadable::Journal { journal, source } => {
                write!(f, "cannot read its journal {}: {source}", journal.display())
            }
        }
    }
}

impl std::error::Error for Unreadable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Unreadable::Read(source) | Unreadable::Journal { source, .. } => Some(&**source),
            Unreadable::Invalid(invalid) => Some(invalid),
            Unreadable::NotUtf8 => None,
        }
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invalid::NotJson(source) => write!(f, "not valid JSON: {source}"),
            Invalid::Version(Some(other)) => write!(f, "version {other}, expected {VERSION}"),
            Invalid::Version(None) => write!(f, "no version, expected {VERSION}"),
            Invalid::Generation(other) => {
                write!(f, "journalGeneration {other} is not a count")
            }
            Invalid::Shape {
                field: Some(field),
                source,
            } => write!(f, "not a state file: {field}: {source}"),
            Invalid::Shape {
                field: None,
                source,
            } => write!(f, "not a state file: {source}"),
            Invalid::ClosedFingerprint(fingerprint) => write!(
                f,
                "the closed fingerprint `{fingerprint}` is not 16 lowercase hex digits"
            ),
            Invalid::GrantLiteral {
                grant_id,
                literal,
                pattern,
            } => write!(
                f,
                "grant {grant_id}: literal length {literal} does not fit the pattern `{pattern}`"
            ),
            Invalid::GrantMode { grant_id, mode } => write!(
                f,
                "grant {grant_id}: `mode` must be `plan` when given, not `{mode}`"
            ),
            Invalid::DuplicateSession(id) => write!(f, "the session {id} is stored twice"),
            Invalid::Record(source) => fmt::Display::fmt(&**source, f),
            Invalid::Fingerprint(fingerprint) => write!(
                f,
                "the fingerprint `{fingerprint}` is not 16 lowercase hex digits"
            ),
            Invalid::Header(source) => write!(f, "not a journalGeneration line: {source}"),
        }
    }
}

impl std::error::Error for Invalid {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Invalid::NotJson(source)
            | Invalid::Shape { source, .. }
            | Invalid::Record(source)
            | Invalid::Header(source) => Some(&**source),
            _ => None,
        }
    }
}

impl StateError {
    /// An I/O failure of `op` on `path`.
    pub(super) fn io(op: IoOp, path: &std::path::Path, source: io::Error) -> StateError {
        StateError::Io {
            op,
            path: path.to_path_buf(),
            source: Arc::new(source),
        }
    }
}
