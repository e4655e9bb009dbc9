//! OpenCode's `permission` config as an ordered list of rules: the last
//! matching rule wins. A policy's rules are its layers one after the other
//! (the built-in defaults, the policy file's `permission`,
//! `TOOLGATE_PERMISSION`, `--permission`), each rule keeping its origin, so a
//! later layer overrides an earlier one where both match, as OpenCode's
//! `PermissionNext.merge(defaults, config, agent)` does.
//!
//! Managed layers ([`Ruleset::extend_managed`]) come after all of those and
//! are judged apart: each managed layer's own last match, when it asks or
//! denies, decides unless the other layers' answer is stricter still. A
//! managed `allow` only makes an exception to its own layer's deny and ask
//! rules; it never loosens what another layer decides.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use crate::error::PolicyError;
use crate::mode::Action;
use crate::wildcard::Wildcard;

/// One rule: for permissions matching `permission`, subjects matching `pattern` get `action`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The permission-name wildcard, as written.
    pub permission: Wildcard,
    /// The subject wildcard, after `~` / `$HOME` expansion.
    pub pattern: Wildcard,
    /// What the rule answers.
    pub action: Action,
    /// Where it was written: a file path, `--permission`, `TOOLGATE_PERMISSION` or `built-in`.
    pub origin: Arc<str>,
    /// One of [`Ruleset::builtin_defaults`] (not written by the user, whatever
    /// `origin` reads: a policy file may be named `built-in`).
    pub builtin: bool,
    /// Written in a managed layer ([`Ruleset::extend_managed`]): its deny
    /// and ask are final.
    pub managed: bool,
}

/// Rules in written order: the layers the last match decides among, then
/// the managed layers, each judged on its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ruleset {
    rules: Vec<Rule>,
    /// Where the managed layers start in `rules`.
    managed_from: Option<usize>,
    /// Each managed layer's rules, as a range of `rules`.
    managed: Vec<std::ops::Range<usize>>,
}

impl Ruleset {
    /// OpenCode's protective defaults, lowest precedence: reading `.env` files asks
    /// (`.env.example` does not), leaving the project root asks, a doom loop asks.
    pub fn builtin_defaults() -> Ruleset {
        let origin: Arc<str> = Arc::from("built-in");
        let rule = |permission: &str, pattern: &str, action: Action| Rule {
            permission: Wildcard::new(permission),
            pattern: Wildcard::new(pattern),
            action,
            origin: origin.clone(),
            builtin: true,
            managed: false,
        };
        Ruleset {
            managed_from: None,
            managed: Vec::new(),
            rules: vec![
                rule("read", "*.env", Action::Ask),
                rule("read", "*.env.*", Action::Ask),
                rule("read", "*.env.example", Action::Allow),
                rule("external_directory", "*", Action::Ask),
                rule("doom_loop", "*", Action::Ask),
            ],
        }
    }

    /// Parse an OpenCode `permission` value: an action for everything, or an object
    /// whose keys are permission names (wildcards allowed) and whose values are an
    /// action or a `{pattern: action}` object. `key` names the value for errors
    /// (`permission`), `origin` is recorded in every rule.
    pub fn parse(
        value: &Value,
        file: &str,
        key: &str,
        origin: &str,
        home: Option<&Path>,
    ) -> Result<Ruleset, PolicyError> {
        let origin: Arc<str> = Arc::from(origin);
        let mut rules = Vec::new();
        match value {
            Value::String(action) => {
                rules.push(Rule {
                    permission: Wildcard::new("*"),
                    pattern: Wildcard::new("*"),
                    action: parse_action(action, file, key)?,
                    origin,
                    builtin: false,
                    managed: false,
                });
            }
            Value::Object(object) => {
                for (permission, value) in object {
                    let here = format!("{key}.{}", quote_key(permission));
                    if permission.is_empty() {
                        return Err(PolicyError::new(
                            file,
                            &here,
                            "a permission name must not be empty",
                        ));
                    }
                    match value {
                        Value::String(action) => rules.push(Rule {
                            permission: Wildcard::new(permission),
                            pattern: Wildcard::new("*"),
                            action: parse_action(action, file, &here)?,
                            origin: origin.clone(),
                            builtin: false,
                            managed: false,
                        }),
                        Value::Object(patterns) => {
                            for (pattern, action) in patterns {
                                let here = format!("{here}.{}", quote_key(pattern));
                                if pattern.is_empty() {
                                    return Err(PolicyError::new(file, &here, "a pattern must not be empty"));
                                }
                                let Value::String(action) = action else {
                                    return Err(PolicyError::new(
                                        file,
                                        &here,
                                        "an action must be the string allow, ask or deny",
                                    ));
                                };
                                rules.push(Rule {
                                    permission: Wildcard::new(permission),
                                    pattern: Wildcard::new(&expand_home(pattern, home)),
                                    action: parse_action(action, file, &here)?,
                                    origin: origin.clone(),
                                    builtin: false,
                                    managed: false,
                                });
                            }
                        }
                        _ => {
                            return Err(PolicyError::new(
                                file,
                                &here,
                                "expected an action (allow, ask, deny) or an object of {pattern: action}",
                            ))
                        }
                    }
                }
            }
            _ => {
                return Err(PolicyError::new(
                    file,
                    key,
                    "expected an action (allow, ask, deny) or an object keyed by permission name",
                ))
            }
        }
        Ok(Ruleset {
            rules,
            managed_from: None,
            managed: Vec::new(),
        })
    }

    /// Add `other`'s rules as the next layer, after this set's (but before
    /// any managed layer): they win where both match.
    pub fn extend(&mut self, other: Ruleset) {
        let at = self.managed_from.unwrap_or(self.rules.len());
        let added = other.rules.len();
        self.rules.splice(at..at, other.rules);
        if let Some(from) = &mut self.managed_from {
            *from += added;
            for layer in &mut self.managed {
                *layer = layer.start + added..layer.end + added;
            }
        }
    }

    /// Add `other`'s rules as a managed layer, after every other layer. It
    /// is judged on its own ([`Ruleset::last_match`]): where its own last
    /// match asks or denies, no other layer can loosen that; its `allow`
    /// rules only make exceptions to its own deny and ask rules.
    pub fn extend_managed(&mut self, other: Ruleset) {
        let start = self.rules.len();
        self.managed_from.get_or_insert(start);
        self.rules.extend(other.rules.into_iter().map(|rule| Rule {
            managed: true,
            builtin: false,
            ..rule
        }));
        self.managed.push(start..self.rules.len());
    }

    /// The rules the last match decides among (built-in defaults, policy
    /// file, overrides), then each managed layer's.
    pub fn domains(&self) -> impl Iterator<Item = &[Rule]> {
        let end = self.managed_from.unwrap_or(self.rules.len());
        std::iter::once(&self.rules[..end])
            .chain(self.managed.iter().map(|layer| &self.rules[layer.clone()]))
    }

    /// The deciding rule for the permission and the subject: the last
    /// matching rule of the layers before the managed ones, unless a managed
    /// layer's own last match asks or denies and is at least as strict (the
    /// strictest managed one: a managed rule then decides).
    ///
    /// For the permissions whose subjects are paths (`read`, `edit`, `list`,
    /// `external_directory`), a rule that asks or denies also matches in any
    /// letter case: on a file system that ignores case `.ENV` is `.env`, and
    /// guarding both is the safe reading everywhere. A rule that allows
    /// matches the case it was written in.
    pub fn last_match(&self, permission: &str, subject: &str) -> Option<&Rule> {
        let paths = is_path_permission(permission);
        let matches = |rule: &&Rule| {
            rule.permission.matches(permission)
                && if paths && rule.action != Action::Allow {
                    // One pass: a match in any case includes the exact one.
                    rule.pattern.matches_any_case(subject)
                } else {
                    rule.pattern.matches(subject)
                }
        };
        let mut domains = self.domains();
        let mut best = domains
            .next()
            .and_then(|rules| rules.iter().rev().find(matches));
        for layer in domains {
            if let Some(rule) = layer.iter().rev().find(matches) {
                if rule.action != Action::Allow
                    && best.is_none_or(|best| rule.action >= best.action)
                {
                    best = Some(rule);
                }
            }
        }
        best
    }

    /// Whether any managed layer is present.
    pub fn has_managed(&self) -> bool {
        self.managed_from.is_some()
    }

    /// True when no rule is present.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
}

/// Permissions whose subjects are paths on the disk.
pub(crate) fn is_path_permission(permission: &str) -> bool {
    matches!(permission, "read" | "edit" | "list" | "external_directory")
}

fn parse_action(action: &str, file: &str, key: &str) -> Result<Action, PolicyError> {
    Action::parse(action).ok_or_else(|| {
        PolicyError::new(
            file,
            key,
            &format!("unknown action `{action}` (expected allow, ask or deny)"),
        )
    })
}

/// `~/x`, `~` and `$HOME/x` expand to the home directory, as OpenCode does at load.
pub fn expand_home(pattern: &str, home: Option<&Path>) -> String {
    let Some(home) = home else {
        return pattern.to_string();
    };
    let home = home.to_string_lossy();
    if pattern == "~" || pattern == "$HOME" {
        return home.into_owned();
    }
    for prefix in ["~/", "$HOME/"] {
        if let Some(rest) = pattern.strip_prefix(prefix) {
            return format!("{}/{rest}", home.trim_end_matches('/'));
        }
    }
    pattern.to_string()
}

fn quote_key(key: &str) -> String {
    if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        key.to_string()
    } else {
        format!("{key:?}")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic

    use super::*;
    use serde_json::json;

    fn check(config: Value, permission: &str, subject: &str, expected: Option<&str>) {
        let rules = Ruleset::parse(
            &config,
            "policy.json",
            "permission",
            "policy.json",
            Some(Path::new("/home/me")),
        )
        .unwrap();
        let actual = rules.last_match(permission, subject).map(|rule| {
            format!(
                "{} {} {}",
                rule.permission.as_str(),
                rule.pattern.as_str(),
                rule.action.as_str()
            )
        });
        assert_eq!(actual.as_deref(), expected, "{permission} {subject}");
    }

    #[test]
    fn last_match_wins() {
        let config = json!({
            "*": "ask",
            "read": {"*": "allow", "*.env": "deny"},
            "bash": {"*": "ask", "git *": "allow", "git push *": "deny"},
            "mcp__github__*": "allow",
            "external_directory": {"*": "ask", "~/scratch/*": "allow"}
        });
        let cases = [
            ("bash", "git status", Some("bash git * allow")),
            ("bash", "git push origin main", Some("bash git push * deny")),
            ("bash", "git", Some("bash git * allow")),
            ("bash", "rm -rf /", Some("bash * ask")),
            ("read", "src/.env", Some("read *.env deny")),
            ("read", "src/main.rs", Some("read * allow")),
            ("webfetch", "https://x", Some("* * ask")),
            (
                "mcp__github__get_issue",
                "*",
                Some("mcp__github__* * allow"),
            ),
            (
                "external_directory",
                "/home/me/scratch/a",
                Some("external_directory /home/me/scratch/* allow"),
            ),
            (
                "external_directory",
                "/etc/passwd",
                Some("external_directory * ask"),
            ),
        ];
        for (permission, subject, expected) in cases {
            check(config.clone(), permission, subject, expected);
        }
        check(json!("deny"), "anything", "x", Some("* * deny"));
        check(json!({}), "bash", "ls", None);
    }

    #[test]
    fn invalid_configs_name_the_key() {
        let cases = [
            (json!({"bash": {"git *": "alow"}}), "policy.json: permission.bash.\"git *\": unknown action `alow` (expected allow, ask or deny)"),
            (json!({"bash": 3}), "policy.json: permission.bash: expected an action (allow, ask, deny) or an object of {pattern: action}"),
            (json!({"bash": {"ls": true}}), "policy.json: permission.bash.ls: an action must be the string allow, ask or deny"),
            (json!(["allow"]), "policy.json: permission: expected an action (allow, ask, deny) or an object keyed by permission name"),
            (json!({"": "allow"}), "policy.json: permission.\"\": a permission name must not be empty"),
            (json!("maybe"), "policy.json: permission: unknown action `maybe` (expected allow, ask or deny)"),
        ];
        for (config, expected) in cases {
            let err = Ruleset::parse(&config, "policy.json", "permission", "policy.json", None)
                .unwrap_err();
            assert_eq!(err.to_string(), expected);
        }
    }
}
