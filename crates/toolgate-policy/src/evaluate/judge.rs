//! The answer for one check, in the order the module documentation of
//! [`super`] gives: scope, mode, the deciding rule, the tightening passes,
//! `readonly`, a `once`, grants and `auto`; with the rule lookups it rests
//! on and the reasons the mode and the rules give.

use std::borrow::Cow;

use super::{Check, Outcome, TargetKind, Text};
use crate::mode::{Action, Kind, Mode};
use crate::rules::Rule;
use crate::scope::ScopeTarget;
use crate::{Context, Policy, RuleRef, Source, SubjectRead};

impl Policy {
    /// The answer for one check; see the module documentation for the order.
    pub(super) fn judge(&self, check: &Check, context: &Context<'_>) -> Outcome {
        let mode = context.mode;
        if let Some(kind) = check.scope {
            let target = match kind {
                TargetKind::File => ScopeTarget::File(&check.subject),
                TargetKind::Directory => ScopeTarget::Directory(&check.subject),
                TargetKind::Path => ScopeTarget::Path(&check.subject),
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
        // How firmly the deciding rule holds an ask (see [`hold`]): `auto`
        // lifts only level 0, grants lift all but level 2 (managed).
        let mut level = 0;
        let mut outcome = match self.rule_for(&check.permission, &check.subject) {
            Some(rule) => {
                level = hold(rule, &check.permission);
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
        // the answer does but holds the ask more firmly than the answer's rule.
        let tightens = |rule: &Rule, outcome: &Outcome, level: u8| {
            rule.action > outcome.action
                || (rule.action == Action::Ask
                    && outcome.action == Action::Ask
                    && hold(rule, &check.permission) > level)
        };
        if let Some((rule, reach)) = check.reached.as_deref() {
            if tightens(rule, &outcome, level) {
                level = hold(rule, &check.permission);
                outcome = rule_outcome(rule, &check.subject);
                outcome.reason = format!("{} ({})", outcome.reason, reach.phrase()).into();
            }
        }
        // A deny or ask on the command after wrapper removal (or inside `bash -c`)
        // tightens the answer; an allow there never loosens it.
        for inner in &check.inner {
            if let Some(rule) = self.rule_for(&check.permission, inner) {
                if tightens(rule, &outcome, level) {
                    level = hold(rule, &check.permission);
                    outcome = rule_outcome(rule, inner);
                }
            }
        }
        // An MCP call made through `use_mcp_tool`: a deny or ask of that
        // tool's rules on the MCP tool's name tightens the answer; an allow
        // there never loosens it.
        if let Some(via) = check.via.as_deref() {
            if let Some(rule) = self.rule_for(&via.permission, &via.name) {
                if tightens(rule, &outcome, level) {
                    level = hold(rule, &via.permission);
                    outcome = rule_outcome(rule, &via.name);
                }
            }
        }
        // A command whose program the analysis cannot name (`"$RM" -rf x`,
        // `coproc rm x`, `echo 'rm x' | sh`) could run any program, and a
        // subject field the call does not give (or gives as no text) could
        // be anything: every deny or ask rule of the permission may match it.
        let unknown = match check.origin.as_deref().map(|origin| &origin.read) {
            Some(SubjectRead::Unknown(why)) => Some(why.as_str()),
            _ if check.runs_unknown => Some("what it runs cannot be known"),
            _ => None,
        };
        if let Some(why) = unknown {
            if let Some(rule) = self.strictest_rule_of(&check.permission) {
                if tightens(rule, &outcome, level) {
                    level = hold(rule, &check.permission);
                    outcome = rule_outcome(rule, &check.subject);
                    outcome.reason =
                        format!("{} ({why}, so the rule may match it)", outcome.reason).into();
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
        // A managed rule's question is put every time: no grant answers it.
        let granted = [
            (context.grants, "in this session", "grant"),
            (context.project_grants, "for this project", "project grant"),
        ];
        for (grants, place, origin) in granted.into_iter().filter(|_| level < 2) {
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
                        managed: false,
                        expires_at: grant.expires_at,
                    }),
                };
            }
        }
        // `auto` lifts its own questions and the built-in defaults' (`.env`,
        // `external_directory`), never a rule the user wrote nor the doom loop.
        if mode == Mode::Auto && level == 0 {
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
    /// (the last one written among the strictest), whatever its pattern: in
    /// the layers the last match decides among, and in each managed layer,
    /// the rules from its last `*` rule of the permission on (a rule before
    /// it is never the last match for any subject).
    fn strictest_rule_of(&self, permission: &str) -> Option<&Rule> {
        let mut best: Option<&Rule> = None;
        for rules in self.rules.domains() {
            let live = rules
                .iter()
                .rposition(|rule| {
                    rule.permission.matches(permission) && rule.pattern.as_str() == "*"
                })
                .unwrap_or(0);
            for rule in rules[live..]
                .iter()
                .filter(|rule| rule.action > Action::Allow && rule.permission.matches(permission))
            {
                best = match best {
                    Some(best) if best.action > rule.action => Some(best),
                    _ => Some(rule),
                };
            }
        }
        best
    }

    /// The deciding rule for a permission and subject: the last match over
    /// every layer (built-in defaults, policy file, `TOOLGATE_PERMISSION`,
    /// `--permission`), unless a managed layer asks or denies
    /// ([`crate::Ruleset::last_match`]).
    fn rule_for(&self, permission: &str, subject: &str) -> Option<&Rule> {
        self.rules.last_match(permission, subject)
    }
}

/// How firmly an ask from this rule holds: 2 for a managed rule (no grant
/// answers it, `auto` does not lift it), 1 for a rule the user wrote (policy
/// file, `TOOLGATE_PERMISSION`, `--permission`) and the built-in doom-loop
/// guard (`auto` does not lift it), 0 for the other built-in defaults,
/// questions `auto` was chosen to skip.
fn hold(rule: &Rule, permission: &str) -> u8 {
    if rule.managed {
        2
    } else if !rule.builtin || permission == "doom_loop" {
        1
    } else {
        0
    }
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
    if rule.managed {
        reason.extend([
            "managed rule `",
            permission,
            ": ",
            pattern,
            "` (",
            origin,
            ") ",
        ]);
    } else {
        if origin == "built-in" {
            reason.push_str("built-in");
        } else {
            reason.extend(["`", origin, "`"]);
        }
        reason.extend([" rule `", permission, ": ", pattern, "` "]);
    }
    reason.extend([verb, " "]);
    match permission {
        "external_directory" => {
            reason.extend(["leaving the project root for `", subject, "`"]);
        }
        "doom_loop" => reason.extend(["a third identical `", subject, "` call in a row"]),
        _ if subject == "*" => reason.push_str("this call"),
        _ => reason.extend(["`", subject, "`"]),
    }
    if rule.managed {
        reason.push_str(match rule.action {
            Action::Deny => ": no other layer, grant or answer lifts a managed denial",
            Action::Ask => ", every time: no grant answers a managed question",
            Action::Allow => "",
        });
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
            managed: rule.managed,
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
