//! The answer for one check, in the order the module documentation of
//! [`super`] gives: scope, mode, the deciding rule, the tightening passes,
//! `readonly`, a `once`, grants and `auto`; with the rule lookups it rests
//! on and the reasons the mode and the rules give.

use std::borrow::Cow;

use super::{Check, Outcome, TargetKind, Text};
use crate::mode::{Action, Kind, Mode};
use crate::rules::Rule;
use crate::scope::ScopeTarget;
use crate::{Context, Policy, RuleRef, Source};

impl Policy {
    /// The answer for one check; see the module documentation for the order.
    pub(super) fn judge(&self, check: &Check, context: &Context<'_>) -> Outcome {
        let mode = context.mode;
        if let Some(kind) = check.scope {
            let target = match kind {
                TargetKind::File => ScopeTarget::File(&check.subject),
                TargetKind::Directory => ScopeTarget::Directory(&check.subject),
                TargetKind::Command => ScopeTarget::Command(&check.subject),
            };
            if let Some(refusal) = context.scope.target_refusal(target) {
                return Outcome {
                    action: Action::Deny,
                    source: Source::Scope,
                    reason: refusal.reason.into(),
                    rule: None,
                };
            }
        }
        if check.mode_action == Action::Deny {
            return Outcome {
                action: Action::Deny,
                source: Source::Mode,
                reason: check.mode_reason.clone(),
                rule: None,
            };
        }
        // Whether the deciding rule is one the user wrote (or the doom-loop
        // guard): an ask from it is not lifted by `auto`.
        let mut binds = false;
        let mut outcome = match self.rule_for(&check.permission, &check.subject) {
            Some(rule) => {
                binds = binds_in_auto(rule, &check.permission);
                rule_outcome(rule, &check.subject)
            }
            None => Outcome {
                action: check.mode_action,
                source: Source::Mode,
                reason: check.mode_reason.clone(),
                rule: None,
            },
        };
        // A tightening pass takes a rule that is stricter, or one that asks as
        // the answer does but binds where the answer's rule does not.
        let tightens = |rule: &Rule, outcome: &Outcome, binds: bool| {
            rule.action > outcome.action
                || (rule.action == Action::Ask
                    && outcome.action == Action::Ask
                    && !binds
                    && binds_in_auto(rule, &check.permission))
        };
        if let Some((rule, reach)) = check.reached.as_deref() {
            if tightens(rule, &outcome, binds) {
                binds = binds_in_auto(rule, &check.permission);
                outcome = rule_outcome(rule, &check.subject);
                outcome.reason = format!("{} ({})", outcome.reason, reach.phrase()).into();
            }
        }
        // A deny or ask on the command after wrapper removal (or inside `bash -c`)
        // tightens the answer; an allow there never loosens it.
        for inner in &check.inner {
            if let Some(rule) = self.rule_for(&check.permission, inner) {
                if tightens(rule, &outcome, binds) {
                    binds = binds_in_auto(rule, &check.permission);
                    outcome = rule_outcome(rule, inner);
                }
            }
        }
        // A command whose program the analysis cannot name (`"$RM" -rf x`,
        // `coproc rm x`, `echo 'rm x' | sh`) could run any program: every deny or
        // ask rule of the permission may match it.
        if check.runs_unknown {
            if let Some(rule) = self.strictest_rule_of(&check.permission) {
                if tightens(rule, &outcome, binds) {
                    binds = binds_in_auto(rule, &check.permission);
                    outcome = rule_outcome(rule, &check.subject);
                    outcome.reason = format!(
                        "{} (what it runs cannot be known, so the rule may match it)",
                        outcome.reason
                    )
                    .into();
                }
            }
        }
        if outcome.action != Action::Ask {
            return outcome;
        }
        if mode == Mode::ReadOnly {
            // The mode denies; the rule that asked stays in the provenance.
            return Outcome {
                action: Action::Deny,
                source: Source::Mode,
                reason: format!(
                    "readonly mode never asks, so what would ask is denied: {}",
                    outcome.reason
                )
                .into(),
                rule: outcome.rule,
            };
        }
        if context.approvals.iter().any(|(permission, subject)| {
            *permission == check.permission && *subject == check.subject
        }) {
            return Outcome {
                action: Action::Allow,
                source: Source::User,
                reason: Cow::Borrowed("the user allowed this call once"),
                rule: None,
            };
        }
        let granted = [
            (context.grants, "in this session", "grant"),
            (context.project_grants, "for this project", "project grant"),
        ];
        for (grants, place, origin) in granted {
            if let Some(grant) = grants.covering(
                &check.permission,
                &check.subject,
                mode == Mode::Plan,
                context.now,
            ) {
                return Outcome {
                    action: Action::Allow,
                    source: Source::Grant,
                    reason: format!(
                        "an earlier `always` granted `{}` for {} {place}",
                        grant.pattern.as_str(),
                        grant.permission
                    )
                    .into(),
                    rule: Some(RuleRef {
                        permission: grant.permission.clone(),
                        pattern: grant.pattern.as_str().to_string(),
                        action: Action::Allow,
                        origin: origin.to_string(),
                        expires_at: grant.expires_at,
                    }),
                };
            }
        }
        // `auto` lifts its own questions and the built-in defaults' (`.env`,
        // `external_directory`), never a rule the user wrote nor the doom loop.
        if mode == Mode::Auto && !binds {
            return Outcome {
                action: Action::Allow,
                source: Source::Mode,
                reason: format!("auto mode allows what would ask ({})", outcome.reason).into(),
                rule: outcome.rule,
            };
        }
        outcome
    }

    /// A read rule that guards this file by name: one that asks or denies
    /// with a pattern other than a bare `*` (which would take every word of
    /// every command for a file).
    pub(super) fn read_guard(&self, subject: &str) -> Option<&Rule> {
        self.rule_for("read", subject)
            .filter(|rule| rule.action != Action::Allow && rule.pattern.as_str() != "*")
    }

    /// The strictest deny or ask rule that can still decide for `permission`
    /// (the last one written among the strictest), whatever its pattern: the
    /// rules from the last `*` rule of the permission on (a rule before it is
    /// never the last match for any subject).
    fn strictest_rule_of(&self, permission: &str) -> Option<&Rule> {
        let rules = self.rules.rules();
        let live = rules
            .iter()
            .rposition(|rule| rule.permission.matches(permission) && rule.pattern.as_str() == "*")
            .unwrap_or(0);
        rules[live..]
            .iter()
            .filter(|rule| rule.action > Action::Allow && rule.permission.matches(permission))
            .fold(None, |best: Option<&Rule>, rule| match best {
                Some(best) if best.action > rule.action => Some(best),
                _ => Some(rule),
            })
    }

    /// The deciding rule for a permission and subject: the last match over
    /// every layer (built-in defaults, policy file, `TOOLGATE_PERMISSION`,
    /// `--permission`).
    fn rule_for(&self, permission: &str, subject: &str) -> Option<&Rule> {
        self.rules.last_match(permission, subject)
    }
}

/// Does an ask from this rule hold in `auto`? So it does for every rule the
/// user wrote (policy file, `TOOLGATE_PERMISSION`, `--permission`) and for
/// the built-in doom-loop guard; the other built-in defaults are questions
/// `auto` was chosen to skip.
fn binds_in_auto(rule: &Rule, permission: &str) -> bool {
    !rule.builtin || permission == "doom_loop"
}

fn rule_outcome(rule: &Rule, subject: &str) -> Outcome {
    let verb = match rule.action {
        Action::Allow => "allows",
        Action::Ask => "asks before",
        Action::Deny => "denies",
    };
    let permission = rule.permission.as_str();
    let pattern = rule.pattern.as_str();
    let origin: &str = &rule.origin;
    // Written piece by piece into one string: this runs for most calls.
    let mut reason =
        String::with_capacity(80 + origin.len() + permission.len() + pattern.len() + subject.len());
    reason.push_str("the ");
    if origin == "built-in" {
        reason.push_str("built-in");
    } else {
        reason.extend(["`", origin, "`"]);
    }
    reason.extend([" rule `", permission, ": ", pattern, "` ", verb, " "]);
    match permission {
        "external_directory" => {
            reason.extend(["leaving the project root for `", subject, "`"]);
        }
        "doom_loop" => reason.extend(["a third identical `", subject, "` call in a row"]),
        _ if subject == "*" => reason.push_str("this call"),
        _ => reason.extend(["`", subject, "`"]),
    }
    Outcome {
        action: rule.action,
        source: Source::Rule,
        reason: reason.into(),
        rule: Some(RuleRef {
            permission: permission.to_string(),
            pattern: pattern.to_string(),
            action: rule.action,
            origin: origin.to_string(),
            expires_at: None,
        }),
    }
}

pub(super) fn kind_reason(
    mode: Mode,
    kind: Kind,
    action: Action,
    tool: &str,
    plan_allowed: bool,
) -> Text {
    match action {
        Action::Allow if kind == Kind::Other && mode == Mode::Plan && plan_allowed => {
            format!("plan mode allows `{tool}`: it is in planModeAllowedTools").into()
        }
        Action::Allow if kind == Kind::Task && mode == Mode::Plan && plan_allowed => format!(
            "plan mode allows sub-agents of a read-only type (readOnlyAgents) through `{tool}`; their calls stay bound by plan mode"
        ).into(),
        Action::Ask if kind == Kind::ExitPlan => "leaving plan mode needs the user's approval of the plan".into(),
        Action::Deny if kind == Kind::Other && mode == Mode::Plan => format!(
            "plan mode does not allow other and MCP tools unless planModeAllowedTools lists them, and `{tool}` is not listed"
        ).into(),
        _ => match mode_kind_text(mode, kind, action) {
            Some(text) => Cow::Borrowed(text),
            None => format!("{mode} mode {} {}", action_verb(action), kind.noun()).into(),
        },
    }
}

fn action_verb(action: Action) -> &'static str {
    match action {
        Action::Allow => "allows",
        Action::Ask => "asks before",
        Action::Deny => "does not allow",
    }
}

/// `{mode} mode allows {noun}` (asks before, does not allow) for every mode,
/// kind and action, written once per process: the reason most calls get
/// costs no allocation.
fn mode_kind_text(mode: Mode, kind: Kind, action: Action) -> Option<&'static str> {
    static TEXTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    const ACTIONS: [Action; 3] = [Action::Allow, Action::Ask, Action::Deny];
    let texts = TEXTS.get_or_init(|| {
        let mut texts = Vec::new();
        for mode in Mode::ALL {
            for kind in Kind::ALL {
                for action in ACTIONS {
                    texts.push(format!(
                        "{mode} mode {} {}",
                        action_verb(action),
                        kind.noun()
                    ));
                }
            }
        }
        texts
    });
    let mode = Mode::ALL.iter().position(|m| *m == mode)?;
    let kind = Kind::ALL.iter().position(|k| *k == kind)?;
    let action = ACTIONS.iter().position(|a| *a == action)?;
    let at = (mode * Kind::ALL.len() + kind) * ACTIONS.len() + action;
    texts.get(at).map(String::as_str)
}

pub(super) fn shell_reason(mode: Mode, action: Action, refusal: &str) -> String {
    match action {
        Action::Allow => {
            format!("{mode} mode allows shell commands that are not read-only ({refusal})")
        }
        Action::Ask => {
            format!("{mode} mode asks before shell commands that are not read-only: {refusal}")
        }
        Action::Deny => format!("{mode} mode allows only read-only shell commands: {refusal}"),
    }
}
