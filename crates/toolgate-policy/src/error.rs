//! The one error a policy can have: a value that cannot be used, named by file and key.

use std::fmt;

/// An invalid policy: the file (or flag) it came from, the key, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// The file path, `--permission` or `TOOLGATE_PERMISSION`.
    pub file: String,
    /// The key, as a dotted path (`permission.bash."git *"`), or empty for the whole file.
    pub key: String,
    /// Why it cannot be used, lowercase, naming the offending value.
    pub reason: String,
}

impl PolicyError {
    /// A new error.
    pub fn new(file: &str, key: &str, reason: &str) -> PolicyError {
        PolicyError {
            file: file.to_string(),
            key: key.to_string(),
            reason: reason.to_string(),
        }
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.file, self.reason)
        } else {
            write!(f, "{}: {}: {}", self.file, self.key, self.reason)
        }
    }
}

impl std::error::Error for PolicyError {}
