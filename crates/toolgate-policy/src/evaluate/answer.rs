//! The call's answer from its checks and their answers: the strictest
//! check's, with one question for the asking checks of the first asking
//! permission and the `always` options it offers, narrow to wide; and the
//! trace of every check for `explain`.

use std::borrow::Cow;

use super::{Check, Outcome, TargetKind};
use crate::grants::{GrantPattern, GrantSpec};
use crate::mode::{Action, Kind, Mode};
use crate::rules::Rule;
use crate::{AlwaysOption, CheckTrace, Evaluation, Policy, Question, RuleRef, Source};

impl Policy {
    /// The steps of an evaluation, from the checks and their outcomes as
    /// judged (nothing is judged again), with every rule that matched.
    pub(super) fn trace(&self, checks: &[Check], outcomes: &[Outcome]) -> Vec<CheckTrace> {
        let rule_ref = |rule: &Rule| RuleRef {
            permission: rule.permission.as_str().to_string(),
            pattern: rule.pattern.as_str().to_string(),
            action: rule.action,
            origin: rule.origin.to_string(),
            managed: rule.managed,
            expires_at: None,
        };
        checks
            .iter()
            .zip(outcomes)
            .map(|(check, outcome)| {
                let mut matched = Vec::new();
                for rule in self.rules.rules() {
                    if !rule.permission.matches(&check.permission) {
                        continue;
                    }
                    let texts = std::iter::once(&check.subject).chain(&check.inner);
                    for text in texts {
                        if rule.pattern.matches(text) {
                            matched.push((rule_ref(rule), text.clone()));
                        }
                    }
                }
                if let Some(via) = check.via.as_deref() {
                    for rule in self.rules.rules() {
                        if rule.permission.matches(&via.permission)
                            && rule.pattern.matches(&via.name)
                        {
                            matched.push((rule_ref(rule), via.name.clone()));
                        }
                    }
                }
                CheckTrace {
                    permission: check.permission.to_string(),
                    subject: check.subject.clone(),
                    inner: check.inner.clone(),
                    not_read_only: check.refusal.clone(),
                    command: matches!(check.scope, Some(TargetKind::Command)),
                    mode_action: check.mode_action,
                    mode_reason: check.mode_reason.to_string(),
                    matched,
                    always: check.always.as_str().to_string(),
                    action: outcome.action,
                    source: outcome.source,
                    reason: outcome.reason.to_string(),
                    rule: outcome.rule.clone(),
                    origin: check.origin.as_deref().cloned(),
                    via: check
                        .via
                        .as_deref()
                        .map(|via| (via.permission.clone(), via.name.clone())),
                }
            })
            .collect()
    }
}

/// The call's answer: the strictest check's; a question gathers every asking
/// check of the first asking permission.
#[allow(clippy::too_many_arguments)] // the parts of one evaluation
pub(super) fn combine(
    mut checks: Vec<Check>,
    mut outcomes: Vec<Outcome>,
    permission: String,
    kind: Kind,
    mode: Mode,
    title: String,
    plan: Option<String>,
) -> Evaluation {
    let strictest = outcomes
        .iter()
        .map(|o| o.action)
        .max()
        .unwrap_or(Action::Deny);
    let evaluation =
        |outcome: Outcome, question: Option<Box<Question>>, permission: String| Evaluation {
            action: outcome.action,
            source: outcome.source,
            reason: outcome.reason.into_owned(),
            rule: outcome.rule,
            question,
            permission,
            kind,
            trace: Vec::new(),
        };
    // `checks[i]` was judged `outcomes[i]`.
    let pairs = || checks.iter().zip(&outcomes);
    match strictest {
        Action::Deny | Action::Allow => {
            // For a denial, the first one; for an allow, the most specific reason.
            let rank = |source: Source| match source {
                Source::User => 0,
                Source::Grant => 1,
                Source::Rule => 2,
                _ => 3,
            };
            let index = if strictest == Action::Deny {
                // A scope denial first: it is the one no answer could lift.
                outcomes
                    .iter()
                    .position(|o| o.source == Source::Scope)
                    .or_else(|| outcomes.iter().position(|o| o.action == Action::Deny))
            } else {
                (0..outcomes.len()).min_by_key(|&i| rank(outcomes[i].source))
            };
            let all_read_only = kind == Kind::Shell
                && outcomes.len() > 1
                && pairs()
                    .all(|(check, outcome)| check.read_only && outcome.source == Source::Mode);
            match index {
                Some(_) if all_read_only => evaluation(
                    Outcome {
                        action: Action::Allow,
                        source: Source::Mode,
                        reason: format!(
                            "every simple command of `{title}` only reads, which every mode allows"
                        )
                        .into(),
                        rule: None,
                    },
                    None,
                    permission,
                ),
                Some(index) => evaluation(outcomes.swap_remove(index), None, permission),
                None => evaluation(
                    Outcome {
                        action: Action::Deny,
                        source: Source::Invalid,
                        reason: Cow::Borrowed("the call touches nothing that can be judged"),
                        rule: None,
                    },
                    None,
                    permission,
                ),
            }
        }
        Action::Ask => {
            let first = outcomes
                .iter()
                .position(|o| o.action == Action::Ask)
                .unwrap_or(0);
            let asked_permission = checks[first].permission.to_string();
            let mut patterns: Vec<String> = Vec::new();
            let asking: Vec<&Check> = pairs()
                .filter(|(check, outcome)| {
                    outcome.action == Action::Ask && check.permission == asked_permission
                })
                .map(|(check, _)| check)
                .collect();
            for check in &asking {
                push_unique(&mut patterns, &check.subject);
            }
            let mut always_options = always_options(&asking, mode);
            let widest = always_options.last().cloned().unwrap_or_default();
            let mut always = widest.patterns;
            let mut grants = widest.grants;
            // A managed rule that asks any of these: the question is put
            // every time (see `Question::managed`).
            let managed = pairs()
                .filter(|(check, outcome)| {
                    outcome.action == Action::Ask && check.permission == asked_permission
                })
                .find_map(|(_, outcome)| outcome.rule.as_ref().filter(|rule| rule.managed))
                .map(|rule| {
                    format!(
                        "the managed rule `{}: {}` ({})",
                        rule.permission, rule.pattern, rule.origin
                    )
                });
            let (check, outcome) = (checks.swap_remove(first), outcomes.swap_remove(first));
            let title = match check.permission.as_ref() {
                "external_directory" | "doom_loop" => check.subject.clone(),
                _ => title,
            };
            let is_plan =
                kind == Kind::ExitPlan && mode == Mode::Plan && asked_permission == permission;
            if is_plan {
                // A plan approval grants nothing: `always` switches the mode instead.
                patterns.clear();
                always.clear();
                grants.clear();
                always_options.clear();
            }
            let approve = patterns
                .iter()
                .map(|pattern| (asked_permission.clone(), pattern.clone()))
                .collect();
            let question = Question {
                permission: asked_permission,
                patterns,
                always,
                grants,
                always_options,
                approve,
                calls: Vec::new(),
                title,
                plan: if is_plan {
                    plan.or(Some(String::new()))
                } else {
                    None
                },
                reason: outcome.reason.to_string(),
                managed,
            };
            evaluation(outcome, Some(Box::new(question)), permission)
        }
    }
}

/// The lists an `always` answer may grant for the asking checks, narrow to
/// wide: level `n` takes each check's `n`-th narrower pattern (its widest
/// narrower one once it has no more, its `always` when it has none), a level
/// that shows the same patterns as the one before it replaces it, and the
/// last level is every check's `always`. A bare `*` granted
/// in plan mode is a plan-only kind grant.
fn always_options(asking: &[&Check], mode: Mode) -> Vec<AlwaysOption> {
    let levels = asking
        .iter()
        .map(|check| check.narrower.len())
        .max()
        .unwrap_or(0);
    let mut options: Vec<AlwaysOption> = Vec::new();
    for level in 0..=levels {
        let mut option = AlwaysOption::default();
        for check in asking {
            // A check with fewer levels keeps its widest narrower pattern
            // until the last level, which is every check's `always`.
            let pattern = if level == levels {
                &check.always
            } else {
                check
                    .narrower
                    .get(level)
                    .or(check.narrower.last())
                    .unwrap_or(&check.always)
            };
            push_unique(&mut option.patterns, pattern.as_str());
            let spec = GrantSpec {
                permission: check.permission.to_string(),
                pattern: pattern.clone(),
                plan_only: mode == Mode::Plan
                    && pattern.literal_len() == 0
                    && pattern.as_str() == "*",
                expires_at: None,
            };
            if !option.grants.contains(&spec) {
                option.grants.push(spec);
            }
        }
        push_level(&mut options, option);
    }
    options
}

/// Add the next (wider) level: one that shows the same patterns as the level
/// before it replaces it, so the last level stays what a bare `always` grants.
fn push_level(options: &mut Vec<AlwaysOption>, option: AlwaysOption) {
    if options
        .last()
        .is_some_and(|previous| same_patterns(previous, &option))
    {
        options.pop();
    }
    options.push(option);
}

/// The options of two questions asked as one (a call whose input was split
/// by [`variants`](crate::tools::variants)): level by level, each side's
/// list at that level (its widest once it has no more), so the last level
/// is the union of both `always`. Empty when either side offers none.
pub(super) fn merge_options(first: &[AlwaysOption], second: &[AlwaysOption]) -> Vec<AlwaysOption> {
    let (Some(last_first), Some(last_second)) = (first.last(), second.last()) else {
        return Vec::new();
    };
    let levels = first.len().max(second.len());
    let mut options: Vec<AlwaysOption> = Vec::new();
    for level in 0..levels {
        let mut option = first.get(level).unwrap_or(last_first).clone();
        let more = second.get(level).unwrap_or(last_second);
        for pattern in &more.patterns {
            push_unique(&mut option.patterns, pattern);
        }
        for grant in &more.grants {
            if !option.grants.contains(grant) {
                option.grants.push(grant.clone());
            }
        }
        push_level(&mut options, option);
    }
    options
}

/// Do two options show the same patterns (in any order)?
fn same_patterns(a: &AlwaysOption, b: &AlwaysOption) -> bool {
    a.patterns.len() == b.patterns.len() && a.patterns.iter().all(|p| b.patterns.contains(p))
}

/// Patterns narrower than `always` that an `always` on a simple check may
/// grant instead, narrow to wide: an edited file itself, then its directory
/// (`src/*`, which also covers the directories under it); a fetched URL
/// itself, then its host (`https://host/*`); any other subject itself.
pub(super) fn narrower_options(
    kind: Kind,
    subject: &str,
    always: &GrantPattern,
) -> Vec<GrantPattern> {
    // Only a grant of everything (`*`) has anything narrower.
    if always.literal_len() != 0 || always.as_str() != "*" || subject == "*" {
        return Vec::new();
    }
    let mut options = vec![GrantPattern::exact(subject)];
    match kind {
        Kind::Edit => {
            if let Some((dir, _)) = subject.rsplit_once('/') {
                if !dir.is_empty() {
                    options.push(GrantPattern::prefixed(&format!("{dir}/"), "*"));
                }
            }
        }
        Kind::Fetch => {
            if let Some(host) = url_host_prefix(subject) {
                if host.len() < subject.len() {
                    options.push(GrantPattern::prefixed(host, "*"));
                }
            }
        }
        _ => {}
    }
    options
}

/// `https://host/` of an `http(s)` URL: the scheme and authority (with any
/// port) and the `/` after them; `None` when there is no `/` after the host,
/// or the authority has a user part (`https://docs.rs@evil.com/` would read
/// as docs.rs), or a `\` ends it (which browsers read as `/`).
fn url_host_prefix(url: &str) -> Option<&str> {
    let starts = |scheme: &str| {
        url.get(..scheme.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(scheme))
    };
    let scheme_len = if starts("https://") {
        8
    } else if starts("http://") {
        7
    } else {
        return None;
    };
    let rest = &url[scheme_len..];
    let end = rest.find(['/', '?', '#', '\\'])?;
    if end == 0 || rest.as_bytes()[end] != b'/' || rest[..end].contains('@') {
        return None;
    }
    url.get(..scheme_len + end + 1)
}

pub(super) fn push_unique(list: &mut Vec<String>, item: &str) {
    if !list.iter().any(|existing| existing == item) {
        list.push(item.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::{narrower_options, url_host_prefix, GrantPattern, Kind};

    #[test]
    fn host_prefixes_of_urls() {
        let cases: &[(&str, Option<&str>)] = &[
            ("https://docs.rs/tokio", Some("https://docs.rs/")),
            (
                "HTTP://Example.com:8080/a?b",
                Some("HTTP://Example.com:8080/"),
            ),
            ("https://docs.rs", None),
            ("https://docs.rs?x=/y", None),
            ("https://docs.rs#/y", None),
            ("https://docs.rs\\@evil.com/x", None),
            ("https://docs.rs@evil.com/x", None),
            ("https:///x", None),
            ("ftp://host/x", None),
            ("tokio select", None),
            ("héllo wörld", None),
            ("httpsé://x/", None),
            ("http://é/x", Some("http://é/")),
        ];
        for (url, expected) in cases {
            assert_eq!(url_host_prefix(url), *expected, "{url}");
        }
    }

    #[test]
    fn narrower_patterns_of_a_subject() {
        let everything = GrantPattern::prefixed("", "*");
        let cases: &[(Kind, &str, &GrantPattern, &[&str])] = &[
            (Kind::Edit, "src/a.py", &everything, &["src/a.py", "src/*"]),
            (Kind::Edit, "a.py", &everything, &["a.py"]),
            (
                Kind::Edit,
                "/abs/dir/a.py",
                &everything,
                &["/abs/dir/a.py", "/abs/dir/*"],
            ),
            (Kind::Edit, "/a.py", &everything, &["/a.py"]),
            (
                Kind::Fetch,
                "https://docs.rs/x",
                &everything,
                &["https://docs.rs/x", "https://docs.rs/*"],
            ),
            (
                Kind::Fetch,
                "https://docs.rs/",
                &everything,
                &["https://docs.rs/"],
            ),
            (Kind::Fetch, "tokio select", &everything, &["tokio select"]),
            (Kind::Task, "general", &everything, &["general"]),
            (Kind::Other, "*", &everything, &[]),
            // Only a grant of everything has narrower options.
            (Kind::Read, ".env", &GrantPattern::exact(".env"), &[]),
        ];
        for (kind, subject, always, expected) in cases {
            let got: Vec<String> = narrower_options(*kind, subject, always)
                .iter()
                .map(|p| p.as_str().to_string())
                .collect();
            assert_eq!(got, *expected, "{kind:?} {subject}");
        }
        // The directory is a literal prefix: `[` in it is no glob.
        let dir = &narrower_options(Kind::Edit, "s[r]c/a.py", &everything)[1];
        assert!(dir.matches("s[r]c/deep/b.py"));
        assert!(!dir.matches("src/b.py"));
    }
}
