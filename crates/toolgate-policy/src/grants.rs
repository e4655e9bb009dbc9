//! Grants: what `always` answers allowed, per session. A grant only answers a
//! question: it turns an `ask` into `allow` and never lifts a denial.
//!
//! An `always` grants the question's `always` patterns, or one of the
//! narrower lists of [`crate::Question::options`] the approver picked. A grant
//! of a whole permission (`*`) made in plan mode is plan-only
//! ([`GrantSpec::plan_only`]): it covers only in plan mode.
//!
//! A grant may have a lifetime ([`GrantSpec::expires_at`], a time on the
//! broker's wall clock): it covers only before that time
//! ([`Grant::covers_at`]), and [`Grants::expire`] drops it once it is over.
//! The policy reads no clock: the time is always handed in.

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
    /// When the grant ends, in milliseconds since the Unix epoch (the
    /// broker's wall clock): from then on it covers nothing. `None` for a
    /// grant that lasts as long as its session or project keeps it.
    pub expires_at: Option<u64>,
}

impl GrantSpec {
    /// A grant of `pattern` for `permission` that holds in every mode.
    pub fn new(permission: &str, pattern: GrantPattern) -> GrantSpec {
        GrantSpec {
            permission: permission.to_string(),
            pattern,
            plan_only: false,
            expires_at: None,
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
    /// When it ends ([`GrantSpec::expires_at`]).
    pub expires_at: Option<u64>,
}

impl Grant {
    /// True when the grant still holds at `now` (ms since the Unix epoch):
    /// it has no end, or ends after `now`. With no time (`None`), a grant
    /// that ends covers nothing: failing closed.
    pub fn covers_at(&self, now: Option<u64>) -> bool {
        match (self.expires_at, now) {
            (None, _) => true,
            (Some(end), Some(now)) => now < end,
            (Some(_), None) => false,
        }
    }
}

/// What [`Grants::add`] did with a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantAdded {
    /// A new grant was recorded.
    New,
    /// The same permission and pattern was granted already, for a shorter
    /// time: that grant now lasts as long as the new one (it keeps its id).
    Lengthened,
    /// The same permission and pattern was granted already, for at least
    /// as long: nothing changed.
    Unchanged,
}

/// A session's grants, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    list: Vec<Grant>,
}

impl Grants {
    /// No grants.
    pub const EMPTY: Grants = Grants { list: Vec::new() };

    /// Record a grant unless the same permission and pattern is already
    /// granted; one granted already lasts as long as the longer of the two
    /// (a grant is never shortened here: revoking it is how it ends early).
    /// Returns what happened, and the grant as it is now recorded (for a
    /// lengthened one, under its own id).
    pub fn add(&mut self, id: String, spec: &GrantSpec) -> (GrantAdded, &Grant) {
        let same = self.list.iter().position(|grant| {
            grant.permission == spec.permission
                && grant.pattern == spec.pattern
                && grant.plan_only == spec.plan_only
        });
        let Some(index) = same else {
            self.list.push(Grant {
                id,
                permission: spec.permission.clone(),
                pattern: spec.pattern.clone(),
                plan_only: spec.plan_only,
                expires_at: spec.expires_at,
            });
            let last = self.list.len() - 1;
            return (GrantAdded::New, &self.list[last]);
        };
        let grant = &mut self.list[index];
        let longer = match (grant.expires_at, spec.expires_at) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(old), Some(new)) => new > old,
        };
        if !longer {
            return (GrantAdded::Unchanged, &self.list[index]);
        }
        grant.expires_at = spec.expires_at;
        (GrantAdded::Lengthened, &self.list[index])
    }

    /// The first grant covering `subject` for `permission` at `now` (see
    /// [`Grant::covers_at`]); a plan-only grant covers only when `in_plan`.
    pub fn covering(
        &self,
        permission: &str,
        subject: &str,
        in_plan: bool,
        now: Option<u64>,
    ) -> Option<&Grant> {
        self.list.iter().find(|grant| {
            grant.permission == permission
                && (in_plan || !grant.plan_only)
                && grant.covers_at(now)
                && grant.pattern.matches(subject)
        })
    }

    /// Remove every grant whose lifetime is over at `now` (ms since the
    /// Unix epoch); returns them, oldest first.
    pub fn expire(&mut self, now: u64) -> Vec<Grant> {
        if self.list.iter().all(|grant| grant.covers_at(Some(now))) {
            return Vec::new();
        }
        let (expired, kept) = std::mem::take(&mut self.list)
            .into_iter()
            .partition(|grant| !grant.covers_at(Some(now)));
        self.list = kept;
        expired
    }

    /// When the first of these grants ends, if any has a lifetime.
    pub fn next_expiry(&self) -> Option<u64> {
        self.list.iter().filter_map(|grant| grant.expires_at).min()
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

    fn spec(pattern: &str, expires_at: Option<u64>) -> GrantSpec {
        GrantSpec {
            expires_at,
            ..GrantSpec::new("bash", GrantPattern::prefixed(pattern, " *"))
        }
    }

    #[test]
    fn lifetimes_lengthen_and_end() {
        let mut grants = Grants::default();
        // (id, spec, what add does, the recorded grant's id and end)
        let steps = [
            (
                "g1",
                spec("git log", Some(100)),
                GrantAdded::New,
                "g1",
                Some(100),
            ),
            (
                "g2",
                spec("git log", Some(50)),
                GrantAdded::Unchanged,
                "g1",
                Some(100),
            ),
            (
                "g3",
                spec("git log", Some(300)),
                GrantAdded::Lengthened,
                "g1",
                Some(300),
            ),
            (
                "g4",
                spec("git diff", Some(200)),
                GrantAdded::New,
                "g4",
                Some(200),
            ),
            ("g5", spec("npm test", None), GrantAdded::New, "g5", None),
            (
                "g6",
                spec("npm test", Some(900)),
                GrantAdded::Unchanged,
                "g5",
                None,
            ),
        ];
        for (id, spec, added, kept, end) in steps {
            let (what, grant) = grants.add(id.to_string(), &spec);
            assert_eq!(
                (what, grant.id.as_str(), grant.expires_at),
                (added, kept, end),
                "{id}"
            );
        }
        assert_eq!(grants.next_expiry(), Some(200));
        assert!(grants
            .covering("bash", "git diff x", false, Some(199))
            .is_some());
        assert!(grants
            .covering("bash", "git diff x", false, Some(200))
            .is_none());
        assert!(grants.covering("bash", "git diff x", false, None).is_none());
        assert!(grants.covering("bash", "npm test", false, None).is_some());
        assert!(grants.expire(199).is_empty());
        let gone: Vec<String> = grants.expire(250).into_iter().map(|g| g.id).collect();
        assert_eq!(gone, ["g4"]);
        assert_eq!(grants.next_expiry(), Some(300));
        let gone: Vec<String> = grants.expire(u64::MAX).into_iter().map(|g| g.id).collect();
        assert_eq!(gone, ["g1"]);
        assert_eq!(grants.next_expiry(), None);
        assert_eq!(grants.iter().count(), 1);
    }
}
