//! Lints of a policy that loads (`toolgate policy validate`): rules that can
//! never decide, `ask` rules the mode never lets ask, and overrides that
//! change nothing. Errors (a misspelled permission name, a bad action) stop
//! the policy from loading and are not lints.
//!
//! - **Shadowed**: a rule is shadowed when a later rule of the same layer (which wins, the
//!   last match deciding) matches every subject it matches: the later rule's
//!   permission is the same or `*`, and its pattern is `*`, the same
//!   pattern, or a prefix wildcard `P*` (no other wildcard) covering a
//!   pattern that starts with `P`. The earlier rule never decides.
//! - **Ignored by the mode**: an `ask` rule for a kind the policy's mode
//!   denies before any rule is read (plan mode and edits, shell commands
//!   that are not read-only, sub-agents, other tools; readonly mode and
//!   everything that is not a read) never asks; in readonly mode every
//!   question is a denial, so every `ask` rule denies.
//! - **No effect**: an override (`--permission`, `TOOLGATE_PERMISSION`)
//!   whose rule a rule of an earlier layer already decides the same way for
//!   every subject it matches.
//! - **Overridden by a managed rule**: a rule of another layer that a
//!   stricter managed deny or ask overrides, for every subject it matches
//!   (the managed rule covers it as a shadowing rule would) or where the
//!   managed rule matches (the rule covers the managed one).
//! - **Managed allow with nothing to except**: a managed `allow` only makes
//!   an exception to its own layer's earlier deny and ask rules; with none
//!   that overlaps it, it changes nothing.
//! - **`use_mcp_tool` allow**: a `use_mcp_tool` call is judged as the MCP
//!   call it makes, and the rules of `use_mcp_tool` only tighten it
//!   ([`crate::mcp_caller`]): an allow there lifts only an earlier deny or
//!   ask of `use_mcp_tool` itself; with none that overlaps it, it changes
//!   nothing (the MCP tool's own rules allow).

use crate::mode::{mode_answer, Action, Kind, Mode};
use crate::rules::Rule;
use crate::Policy;

/// One finding: where (origin and key) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lint {
    /// The rule's origin: a file path, `--permission`, `TOOLGATE_PERMISSION`.
    pub origin: String,
    /// The rule's key, as the file spells it (`permission.bash."git *"`).
    pub key: String,
    /// What is wrong, and what to do.
    pub message: String,
}

fn quote(key: &str) -> String {
    if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        key.to_string()
    } else {
        format!("{key:?}")
    }
}

fn key(rule: &Rule) -> String {
    format!(
        "permission.{}.{}",
        quote(rule.permission.as_str()),
        quote(rule.pattern.as_str())
    )
}

fn text(rule: &Rule) -> String {
    format!(
        "`{}: {}` {}",
        rule.permission.as_str(),
        rule.pattern.as_str(),
        rule.action.as_str()
    )
}

/// Whether `later`'s pattern matches every subject `earlier`'s does.
fn covers(later: &str, earlier: &str) -> bool {
    if later == "*" || later == earlier {
        return true;
    }
    match later.strip_suffix('*') {
        Some(prefix) if !prefix.contains(['*', '?']) => {
            earlier.starts_with(prefix) && !earlier[..prefix.len()].contains(['*', '?'])
        }
        _ => false,
    }
}

/// Whether `later` decides wherever `earlier` matches.
fn shadows(later: &Rule, earlier: &Rule) -> bool {
    (later.permission.as_str() == "*" || later.permission.as_str() == earlier.permission.as_str())
        && covers(later.pattern.as_str(), earlier.pattern.as_str())
}

/// The lints of `policy` (rules as loaded, built-in defaults not linted).
pub fn lint(policy: &Policy) -> Vec<Lint> {
    let rules = policy.rules.rules();
    let mut out = Vec::new();
    for (index, rule) in rules.iter().enumerate() {
        if rule.builtin {
            continue;
        }
        let origin = rule.origin.to_string();
        if rule.managed && rule.action == Action::Allow {
            let excepts = rules[..index].iter().any(|earlier| {
                earlier.origin == rule.origin
                    && earlier.action != Action::Allow
                    && (shadows(earlier, rule) || shadows(rule, earlier))
            });
            if !excepts {
                out.push(Lint {
                    origin: origin.clone(),
                    key: key(rule),
                    message: format!(
                        "{} changes nothing: a managed allow only makes an exception to the earlier deny and ask rules of its own managed policy, and none of them overlaps it; it never allows what another layer asks or denies",
                        text(rule)
                    ),
                });
            }
        }
        if rule.action == Action::Allow
            && crate::mcp_caller::is_mcp_caller(rule.permission.as_str())
        {
            let excepts = rules[..index].iter().any(|earlier| {
                earlier.action != Action::Allow
                    && earlier.permission.matches(rule.permission.as_str())
                    && (shadows(earlier, rule) || shadows(rule, earlier))
            });
            if !excepts {
                out.push(Lint {
                    origin: origin.clone(),
                    key: key(rule),
                    message: format!(
                        "{} allows nothing: a `{}` call is judged as the MCP tool it calls (`mcp__SERVER__TOOL`), and its own rules can only tighten that; allow the MCP tools (`\"mcp__SERVER__*\": \"allow\"`)",
                        text(rule),
                        rule.permission.as_str()
                    ),
                });
            }
        }
        if !rule.managed {
            let stricter = |managed: &&Rule| managed.managed && managed.action > rule.action;
            let whole = rules
                .iter()
                .filter(stricter)
                .find(|managed| shadows(managed, rule));
            let part = rules
                .iter()
                .filter(stricter)
                .find(|managed| shadows(rule, managed));
            let never = match rule.action {
                Action::Allow => "it never allows",
                Action::Ask => "it never asks",
                Action::Deny => "",
            };
            if let Some(managed) = whole {
                out.push(Lint {
                    origin: origin.clone(),
                    key: key(rule),
                    message: format!(
                        "{} is overridden by the managed {} ({}) for every subject it matches: a managed deny or ask is final, so {never}",
                        text(rule),
                        text(managed),
                        managed.origin
                    ),
                });
            } else if let Some(managed) = part {
                out.push(Lint {
                    origin: origin.clone(),
                    key: key(rule),
                    message: format!(
                        "{} is overridden by the managed {} ({}) wherever that matches: a managed deny or ask is final",
                        text(rule),
                        text(managed),
                        managed.origin
                    ),
                });
            }
        }
        let override_layer = matches!(origin.as_str(), "--permission" | "TOOLGATE_PERMISSION");
        if let Some(later) = rules[index + 1..]
            .iter()
            .find(|later| later.origin == rule.origin && shadows(later, rule))
        {
            let message = if later.action == rule.action {
                format!(
                    "{} is repeated by the later {} (from {}): it never decides and can be removed",
                    text(rule),
                    text(later),
                    later.origin
                )
            } else {
                format!(
                    "{} is shadowed by the later {} (from {}), which matches every subject it matches: it never decides",
                    text(rule),
                    text(later),
                    later.origin
                )
            };
            out.push(Lint {
                origin: origin.clone(),
                key: key(rule),
                message,
            });
        } else if override_layer {
            let earlier = rules[..index]
                .iter()
                .rev()
                .find(|earlier| earlier.origin != rule.origin && shadows(earlier, rule));
            if let Some(earlier) = earlier.filter(|earlier| earlier.action == rule.action) {
                out.push(Lint {
                    origin: origin.clone(),
                    key: key(rule),
                    message: format!(
                        "{} has no effect: {} (from {}) already decides the same for every subject it matches",
                        text(rule),
                        text(earlier),
                        earlier.origin
                    ),
                });
            }
        }
        if rule.action == Action::Ask && rule.permission.as_str() != "*" {
            let mode = policy.default_mode;
            let spec = policy.registry.lookup(rule.permission.as_str());
            let ignored = mode == Mode::ReadOnly
                || (spec.known
                    && !matches!(spec.kind, Kind::Fetch)
                    && mode_answer(mode, spec.kind, true, false) == Action::Deny);
            if ignored {
                let why = if mode == Mode::ReadOnly {
                    "readonly mode never asks: what would ask is denied".to_string()
                } else {
                    format!(
                        "{mode} mode denies {} before any rule is read",
                        spec.kind.noun()
                    )
                };
                out.push(Lint {
                    origin: origin.clone(),
                    key: key(rule),
                    message: format!("{} never asks: {why}", text(rule)),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic

    use super::*;
    use crate::{parse_override, Sources};
    use std::path::PathBuf;

    fn lints(file: &str, mode: Option<Mode>, over: Option<&str>) -> Vec<String> {
        let file = crate::PolicyFile::parse(file, "p.json").unwrap();
        let overrides = over
            .map(|text| {
                vec![(
                    "--permission".to_string(),
                    parse_override(text, "--permission").unwrap(),
                )]
            })
            .unwrap_or_default();
        let (policy, _) = Policy::build(Sources {
            project_root: PathBuf::from("/p"),
            mode,
            file: Some(("p.json".to_string(), file)),
            overrides,
            ..Sources::default()
        })
        .unwrap();
        lint(&policy)
            .into_iter()
            .map(|lint| format!("{} {}: {}", lint.origin, lint.key, lint.message))
            .collect()
    }

    #[test]
    fn each_lint_and_its_absence() {
        // (policy file, mode flag, --permission, the lints)
        type Case<'a> = (&'a str, Option<Mode>, Option<&'a str>, Vec<&'a str>);
        let cases: Vec<Case> = vec![
            // Nothing to say.
            (r#"{"permission":{"bash":{"*":"ask","git *":"allow","git push *":"deny"}}}"#, None, None, vec![]),
            // A later `*` shadows everything before it.
            (r#"{"permission":{"bash":{"git push *":"deny","*":"allow"}}}"#, None, None, vec![
                "p.json permission.bash.\"git push *\": `bash: git push *` deny is shadowed by the later `bash: *` allow (from p.json), which matches every subject it matches: it never decides",
            ]),
            // A later prefix wildcard covers a longer pattern; the same action is a repeat.
            (r#"{"permission":{"bash":{"npm run test *":"allow","npm *":"allow"}}}"#, None, None, vec![
                "p.json permission.bash.\"npm run test *\": `bash: npm run test *` allow is repeated by the later `bash: npm *` allow (from p.json): it never decides and can be removed",
            ]),
            // `*` for every permission, later.
            (r#"{"permission":{"edit":"ask","*":"deny"}}"#, None, None, vec![
                "p.json permission.edit.\"*\": `edit: *` ask is shadowed by the later `*: *` deny (from p.json), which matches every subject it matches: it never decides",
            ]),
            // Plan mode denies edits before rules: the ask never asks; a bash ask still can.
            (r#"{"mode":"plan","permission":{"edit":{"src/*":"ask"},"bash":{"npm *":"ask"},"webfetch":"ask"}}"#, None, None, vec![
                "p.json permission.edit.\"src/*\": `edit: src/*` ask never asks: plan mode denies file edits, writes, patches, deletes and moves before any rule is read",
            ]),
            (r#"{"permission":{"webfetch":"ask"}}"#, Some(Mode::ReadOnly), None, vec![
                "p.json permission.webfetch.\"*\": `webfetch: *` ask never asks: readonly mode never asks: what would ask is denied",
            ]),
            // A `use_mcp_tool` allow loosens nothing, unless it excepts one of
            // its own earlier denials.
            (r#"{"permission":{"use_mcp_tool":{"*":"allow","mcp__github__*":"deny"}}}"#, None, None, vec![
                "p.json permission.use_mcp_tool.\"*\": `use_mcp_tool: *` allow allows nothing: a `use_mcp_tool` call is judged as the MCP tool it calls (`mcp__SERVER__TOOL`), and its own rules can only tighten that; allow the MCP tools (`\"mcp__SERVER__*\": \"allow\"`)",
            ]),
            (r#"{"permission":{"use_mcp_tool":{"*":"deny","mcp__docs__*":"allow"}}}"#, None, None, vec![]),
            // An override that repeats the file changes nothing; one that differs does.
            (r#"{"permission":{"bash":{"rm *":"deny"}}}"#, None, Some(r#"{"bash":{"rm -rf *":"deny","git *":"allow"}}"#), vec![
                "--permission permission.bash.\"rm -rf *\": `bash: rm -rf *` deny has no effect: `bash: rm *` deny (from p.json) already decides the same for every subject it matches",
            ]),
        ];
        for (file, mode, over, expected) in cases {
            assert_eq!(lints(file, mode, over), expected, "{file}");
        }
    }

    #[test]
    fn covering_patterns() {
        for (later, earlier, expected) in [
            ("*", "git push *", true),
            ("git *", "git push *", true),
            ("git *", "gitk", false),
            ("git push", "git push", true),
            ("g?t *", "git *", false),
            ("git *", "g*t push", false),
            ("src/*", "src/a.rs", true),
        ] {
            assert_eq!(covers(later, earlier), expected, "{later} over {earlier}");
        }
    }
}
