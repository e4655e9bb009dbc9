//! Grants: what `always` answers allowed, per session. A grant only answers a
//! question: it turns an `ask` into `allow` and never lifts a denial.
//!
//! An `always` grants the question's `always` patterns, or one of the
//! narrower lists of [`crate::Question::options`] the approver picked. A grant
//! of a whole permission (`*`) made in plan mode is plan-only
//! ([`GrantSpec::plan_only`]): it covers only in plan mode.

use crate::wildcard::Wildcard;

/// A pattern an `always` answer grants. Its first `literal_len` bytes are
/// literal text, the rest a wildcard, so a command such as `rm -rf *` is granted
/// as exactly that command and never as a glob over every `rm -rf` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantPattern {
    text: String,
    literal_len: usize,
}

impl GrantPattern {
    /// Exactly `text`, no wildcards.
    pub fn exact(text: &str) -> GrantPattern {
        GrantPattern {
            text: text.to_string(),
            literal_len: text.len(),
        }
    }

    /// `prefix` taken literally, followed by the wildcard `rest` (`" *"`, `"/*"`, `"*"`).
    pub fn prefixed(prefix: &str, rest: &str) -> GrantPattern {
        // Built for every check a call makes: concatenated, not formatted.
        let mut text = String::with_capacity(prefix.len() + rest.len());
        text.push_str(prefix);
        text.push_str(rest);
        GrantPattern {
            text,
            literal_len: prefix.len(),
        }
    }

    /// Rebuild from its parts (for state files); `None` when they do not fit.
    pub fn from_parts(text: &str, literal_len: usize) -> Option<GrantPattern> {
        (literal_len <= text.len() && text.is_char_boundary(literal_len)).then(|| GrantPattern {
            text: text.to_string(),
            literal_len,
        })
    }

    /// The pattern as shown (`git commit *`).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// How many leading bytes are literal.
    pub fn literal_len(&self) -> usize {
        self.literal_len
    }

    /// True when `subject` is covered.
    pub fn matches(&self, subject: &str) -> bool {
        let (literal, rest) = self.text.split_at(self.literal_len);
        let Some(tail) = subject.strip_prefix(literal) else {
            return false;
        };
        match rest {
            "" => tail.is_empty(),
            "*" => true,
            // OpenCode's trailing ` *` also matches the bare command.
            " *" => tail.is_empty() || tail.starts_with(' '),
            rest => Wildcard::new(rest).matches(tail),
        }
    }
}

/// What an `always` answer records: a permission and a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantSpec {
    /// The permission name it covers (exact).
    pub permission: String,
    /// The subjects it covers.
    pub pattern: GrantPattern,
    /// A kind grant made in plan mode (the bare `*` of a permission, answered
    /// while the session was in plan mode): it covers only in plan mode, and
    /// the broker drops a session's such grants when the session leaves plan
    /// mode (qwen-code's "don't ask again" in plan mode).
    pub plan_only: bool,
}

impl GrantSpec {
    /// A grant of `pattern` for `permission` that holds in every mode.
    pub fn new(permission: &str, pattern: GrantPattern) -> GrantSpec {
        GrantSpec {
            permission: permission.to_string(),
            pattern,
            plan_only: false,
        }
    }
}

/// One grant: for `permission`, subjects matching `pattern` no longer ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Its id, for listing and revoking.
    pub id: String,
    /// The permission name it covers (exact).
    pub permission: String,
    /// The subjects it covers.
    pub pattern: GrantPattern,
    /// Covers only in plan mode ([`GrantSpec::plan_only`]).
    pub plan_only: bool,
}

/// A session's grants, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    list: Vec<Grant>,
}

impl Grants {
    /// No grants.
    pub const EMPTY: Grants = Grants { list: Vec::new() };

    /// Record a grant unless the same permission and pattern is already granted.
    /// Returns true when it was added.
    pub fn add(&mut self, id: String, spec: &GrantSpec) -> bool {
        if self.list.iter().any(|grant| {
            grant.permission == spec.permission
                && grant.pattern == spec.pattern
                && grant.plan_only == spec.plan_only
        }) {
            return false;
        }
        self.list.push(Grant {
            id,
            permission: spec.permission.clone(),
            pattern: spec.pattern.clone(),
            plan_only: spec.plan_only,
        });
        true
    }

    /// The first grant covering `subject` for `permission`; a plan-only
    /// grant covers only when `in_plan`.
    pub fn covering(&self, permission: &str, subject: &str, in_plan: bool) -> Option<&Grant> {
        self.list.iter().find(|grant| {
            grant.permission == permission
                && (in_plan || !grant.plan_only)
                && grant.pattern.matches(subject)
        })
    }

    /// Remove every plan-only grant (the session left plan mode); returns them.
    pub fn drop_plan_only(&mut self) -> Vec<Grant> {
        let (dropped, kept) = std::mem::take(&mut self.list)
            .into_iter()
            .partition(|grant| grant.plan_only);
        self.list = kept;
        dropped
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

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pattern: &GrantPattern, subject: &str, expected: bool) {
        assert_eq!(
            pattern.matches(subject),
            expected,
            "{:?} vs {subject:?}",
            pattern.as_str()
        );
    }

    #[test]
    fn literal_parts_stay_literal() {
        let cases = [
            (GrantPattern::exact("rm -rf *"), "rm -rf *", true),
            (GrantPattern::exact("rm -rf *"), "rm -rf /", false),
            (
                GrantPattern::prefixed("git commit", " *"),
                "git commit -m x",
                true,
            ),
            (
                GrantPattern::prefixed("git commit", " *"),
                "git commit",
                true,
            ),
            (
                GrantPattern::prefixed("git commit", " *"),
                "git commits",
                false,
            ),
            (
                GrantPattern::prefixed("npm run *x", " *"),
                "npm run build",
                false,
            ),
            (
                GrantPattern::prefixed("npm run *x", " *"),
                "npm run *x --y",
                true,
            ),
            (GrantPattern::prefixed("/tmp/a?b/", "*"), "/tmp/a?b/c", true),
            (
                GrantPattern::prefixed("/tmp/a?b/", "*"),
                "/tmp/axb/c",
                false,
            ),
            (GrantPattern::prefixed("", "*"), "anything", true),
        ];
        for (pattern, subject, expected) in &cases {
            check(pattern, subject, *expected);
        }
    }
}
