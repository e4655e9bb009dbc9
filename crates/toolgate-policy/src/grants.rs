//! Grants: what `always` answers allowed, per session. A grant only answers a
//! question: it turns an `ask` into `allow` and never lifts a denial.

use crate::wildcard::Wildcard;

/// One grant: for `permission`, subjects matching `pattern` no longer ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Its id, for listing and revoking.
    pub id: String,
    /// The permission name it covers (exact).
    pub permission: String,
    /// The subjects it covers.
    pub pattern: Wildcard,
}

/// A session's grants, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    list: Vec<Grant>,
}

impl Grants {
    /// Record a grant unless the same permission and pattern is already granted.
    /// Returns true when it was added.
    pub fn add(&mut self, id: String, permission: &str, pattern: &str) -> bool {
        if self
            .list
            .iter()
            .any(|grant| grant.permission == permission && grant.pattern.as_str() == pattern)
        {
            return false;
        }
        self.list.push(Grant {
            id,
            permission: permission.to_string(),
            pattern: Wildcard::new(pattern),
        });
        true
    }

    /// The first grant covering `subject` for `permission`.
    pub fn covering(&self, permission: &str, subject: &str) -> Option<&Grant> {
        self.list
            .iter()
            .find(|grant| grant.permission == permission && grant.pattern.matches(subject))
    }

    /// Remove a grant by id.
    pub fn remove(&mut self, id: &str) -> Option<Grant> {
        let index = self.list.iter().position(|grant| grant.id == id)?;
        Some(self.list.remove(index))
    }

    /// The grants, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Grant> {
        self.list.iter()
    }

    /// True when nothing is granted.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}
