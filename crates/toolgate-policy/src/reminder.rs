//! The model-facing text for a mode, generated from the same tables that
//! gate: each kind of the mode table is placed by [`mode_answer`] under
//! "Available", "Asks the user first" or "Not available", and named with a few
//! of its tools from the policy's registry. What the model is told and what the
//! broker enforces cannot drift. [`reminder_granted`] also places what the
//! session's whole-permission grants allow (after `always` on a web fetch,
//! say) under "Available".

use crate::mode::{mode_answer, Action, Kind, Mode};
use crate::scope::Scope;
use crate::Policy;

/// How many tool names a line of the reminder shows; "..." says there are more.
const EXAMPLES: usize = 4;

/// The reminder for `mode`, wrapped in `<system-reminder>` tags.
///
/// Each item is a kind's description followed by some of its tool names,
/// `file edits, writes, patches, deletes and moves (Edit, patch, apply_patch, write_file, ...)`;
/// items are separated by `; `. `exit_plan_mode` is mentioned outside plan mode
/// only when the mode does not simply allow it.
pub fn reminder(policy: &Policy, mode: Mode) -> String {
    reminder_in(policy, mode, &Scope::NONE, false)
}

/// The reminder for a session: `mode` as [`reminder`] says, narrowed by the
/// session's `scope` (a line per limit), and with `never_ask` (the broker
/// runs with `--on-ask deny`) everything that would ask listed as not
/// available, since nobody can answer.
pub fn reminder_in(policy: &Policy, mode: Mode, scope: &Scope, never_ask: bool) -> String {
    reminder_granted(policy, mode, scope, never_ask, &[])
}

/// As [`reminder_in`], for a session whose `always` answers granted whole
/// permissions: `granted` lists each permission granted `*` that covers in
/// `mode`, with `true` when that grant lasts only while in plan mode. What
/// such a grant covers is listed as available, not as asking: a fetch kind
/// is split into web fetches and web searches, another kind gets a line for
/// the granted permission's tools.
pub fn reminder_granted(
    policy: &Policy,
    mode: Mode,
    scope: &Scope,
    never_ask: bool,
    granted: &[(String, bool)],
) -> String {
    let mut available: Vec<String> = Vec::new();
    let mut asks: Vec<String> = Vec::new();
    let mut unavailable: Vec<String> = Vec::new();
    for kind in Kind::ALL {
        let (names, more) = policy.registry.examples(kind, EXAMPLES);
        let named = |label: &str| {
            if names.is_empty() {
                label.to_string()
            } else {
                let more = if more { ", ..." } else { "" };
                format!("{label} ({}{more})", names.join(", "))
            }
        };
        let rows: Vec<(bool, String)> = match kind {
            Kind::Shell => vec![
                (true, named("read-only shell commands such as ls, cat, grep, rg, find without actions, git status/log/diff/show")),
                (false, "shell commands that are not read-only".to_string()),
            ],
            _ => vec![(false, named(kind.noun()))],
        };
        let asks_here = mode_answer(mode, kind, false, false) == Action::Ask && !never_ask;
        let of_kind: Vec<&(String, bool)> = granted
            .iter()
            .filter(|(permission, _)| policy.registry.lookup(permission).kind == kind)
            .collect();
        let granted_row = |permission: &str, noun: &str, plan_only: bool| {
            let (names, more) = policy
                .registry
                .examples_of(kind, Some(permission), EXAMPLES);
            let names = if names.is_empty() {
                String::new()
            } else {
                format!(" ({}{})", names.join(", "), if more { ", ..." } else { "" })
            };
            let until = if plan_only { " while in plan mode" } else { "" };
            format!("{noun}{names}, which an earlier `always` allowed{until}")
        };
        if asks_here && !of_kind.is_empty() && kind != Kind::Shell {
            if kind == Kind::Fetch {
                // Web fetches and web searches are granted apart: a line each.
                for permission in policy.registry.permissions_of_kind(kind) {
                    let noun = match permission.as_str() {
                        "webfetch" => "web fetches".to_string(),
                        "websearch" => "web searches".to_string(),
                        other => format!("`{other}` calls"),
                    };
                    match of_kind.iter().find(|(p, _)| *p == permission) {
                        Some((_, plan_only)) => {
                            available.push(granted_row(&permission, &noun, *plan_only))
                        }
                        None => {
                            let (names, more) =
                                policy
                                    .registry
                                    .examples_of(kind, Some(&permission), EXAMPLES);
                            asks.push(if names.is_empty() {
                                noun
                            } else {
                                format!(
                                    "{noun} ({}{})",
                                    names.join(", "),
                                    if more { ", ..." } else { "" }
                                )
                            });
                        }
                    }
                }
                continue;
            }
            for (permission, plan_only) in &of_kind {
                available.push(granted_row(
                    permission,
                    &format!("`{permission}` calls"),
                    *plan_only,
                ));
            }
        }
        for (read_only, item) in rows {
            let action = mode_answer(mode, kind, read_only, false);
            if kind == Kind::ExitPlan && mode != Mode::Plan && action == Action::Allow {
                // Outside plan mode exit_plan_mode changes nothing.
                continue;
            }
            match action {
                Action::Allow => available.push(item),
                Action::Ask if never_ask => unavailable.push(item),
                Action::Ask => asks.push(item),
                Action::Deny
                    if kind == Kind::Task
                        && !policy.read_only_agents.is_empty()
                        && mode_answer(mode, kind, read_only, true) == Action::Allow =>
                {
                    // The table lets these types run: the line says which,
                    // so the model is not told sub-agents are unavailable
                    // while the gate launches them.
                    available.push(format!(
                        "read-only sub-agents, whose own calls are judged in this mode too, of these types: {}",
                        policy
                            .read_only_agents
                            .iter()
                            .map(|entry| crate::config::read_only_agent_shown(entry))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    unavailable.push(named(&format!("{} of any other type", kind.noun())));
                }
                Action::Deny => {
                    let listed: Vec<&str> =
                        policy.plan_allowed.iter().map(|t| t.as_str()).collect();
                    if kind == Kind::Other
                        && !listed.is_empty()
                        && mode_answer(mode, kind, read_only, true) == Action::Allow
                    {
                        available.push(format!(
                            "the tools in planModeAllowedTools ({})",
                            listed.join(", ")
                        ));
                        unavailable.push(format!("{item}, unless listed there"));
                    } else {
                        unavailable.push(item);
                    }
                }
            }
        }
    }
    let opening = match mode {
        Mode::Plan => "Plan mode is active. Research and plan; do not change anything until the user approves your plan. This supersedes any other instructions you have received, including requests to change configuration or to commit.",
        Mode::ReadOnly => "Read-only mode is active. You may research but nothing that changes files, runs programs or starts agents will run, and nothing will be asked. This supersedes any other instructions you have received, including requests to change configuration or to commit.",
        Mode::Ask => "Ask mode is active: anything beyond reading is put to the user first.",
        Mode::AutoEdit => "Auto-edit mode is active: file edits run without asking; other changes are put to the user first.",
        // An ask rule the user wrote, and the doom-loop guard, still ask in auto.
        Mode::Auto if never_ask => "Auto mode is active: tool calls run without asking, except that what the rules deny or ask about (and a third identical call in a row) is denied.",
        Mode::Auto => "Auto mode is active: tool calls run without asking, except that what the rules deny is denied and what they ask about (and a third identical call in a row) is put to the user first.",
    };
    let mut text = String::from("<system-reminder>\n");
    text.push_str(opening);
    text.push('\n');
    let mut line = |label: &str, items: &[String]| {
        if !items.is_empty() {
            text.push_str(label);
            text.push_str(&items.join("; "));
            text.push_str(".\n");
        }
    };
    line("Available: ", &available);
    line("Asks the user first: ", &asks);
    line("Not available: ", &unavailable);
    if !scope.is_none() {
        let effective = scope.effective(|tool| policy.registry.lookup(tool).permission.clone());
        let listed = |items: &[String]| {
            if items.is_empty() {
                "nothing".to_string()
            } else {
                items.join(", ")
            }
        };
        let mut limit = |line: String| {
            text.push_str(&line);
            text.push_str(".\n");
        };
        if let Some(allowed) = &effective.allowed_tools {
            let exempt = match policy.always_available.as_slice() {
                [] => String::new(),
                names => format!(" (and always {})", names.join(", ")),
            };
            limit(format!(
                "This session may use only these tools: {}{exempt}",
                listed(allowed)
            ));
        }
        if !effective.denied_tools.is_empty() {
            limit(format!(
                "This session may never use: {}",
                listed(&effective.denied_tools)
            ));
        }
        for layer in &effective.file_patterns {
            limit(format!(
                "Every file this session touches must match one of: {}",
                listed(layer)
            ));
        }
        for layer in &effective.command_patterns {
            limit(format!(
                "Every shell command this session runs must match one of: {}",
                listed(layer)
            ));
        }
    }
    if mode == Mode::Plan && never_ask {
        text.push_str("Nobody can approve a plan in this run: present your plan as your answer.\n");
    } else if mode == Mode::Plan {
        text.push_str("When your plan is ready, call exit_plan_mode with the plan to ask the user for approval.\n");
    }
    text.push_str("</system-reminder>");
    text
}

/// How a tool fares in a mode and scope, for a host that hides from the
/// model what it cannot use (see [`tool_access`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Every call is allowed by the mode and the scope (the user's rules,
    /// the doom-loop guard and disk checks may still refuse one).
    Available,
    /// Some calls are allowed, depending on their input: read-only shell
    /// commands, read-only sub-agent types, paths and commands a scope's
    /// patterns admit.
    Limited,
    /// Calls are put to a person first.
    Asks,
    /// No call can run: the mode or the scope refuses the tool.
    Unavailable,
}

/// Where `tool` stands in `mode` under `scope`, from the same tables that
/// gate (`never_ask`: questions are denied, so what asks is unavailable).
pub fn tool_access(
    policy: &Policy,
    tool: &str,
    mode: Mode,
    scope: &Scope,
    never_ask: bool,
) -> Access {
    let spec = policy.registry.lookup(tool);
    if scope
        .tool_refusal(tool, &spec.permission, &policy.always_available)
        .is_some()
    {
        return Access::Unavailable;
    }
    if spec.kind == Kind::Other
        && scope
            .unknown_tool_refusal(tool, &policy.always_available)
            .is_some()
    {
        return Access::Unavailable;
    }
    let listed =
        spec.kind == Kind::Other && policy.plan_allowed.iter().any(|entry| entry.matches(tool));
    let action = mode_answer(mode, spec.kind, false, listed);
    let some_allowed = match spec.kind {
        Kind::Shell => mode_answer(mode, Kind::Shell, true, false) == Action::Allow,
        Kind::Task => {
            !policy.read_only_agents.is_empty()
                && mode_answer(mode, Kind::Task, false, true) == Action::Allow
        }
        _ => false,
    };
    // A scope's patterns hold each call to the paths or commands it names.
    let patterned = scope.layers().any(|layer| {
        let rules = layer.rules();
        match spec.kind {
            Kind::Shell => rules.command_patterns.is_some() || rules.file_patterns.is_some(),
            Kind::Read | Kind::Search | Kind::List | Kind::Edit => rules.file_patterns.is_some(),
            _ => false,
        }
    });
    match action {
        Action::Allow if patterned => Access::Limited,
        Action::Allow => Access::Available,
        _ if some_allowed => Access::Limited,
        Action::Ask if never_ask => Access::Unavailable,
        Action::Ask => Access::Asks,
        Action::Deny => Access::Unavailable,
    }
}
