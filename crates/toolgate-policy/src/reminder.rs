//! The model-facing text for a mode, generated from the same mode table that
//! gates, so what the model is told and what the broker enforces cannot drift.

use crate::mode::{mode_answer, Action, Kind, Mode};
use crate::Policy;

/// The reminder for `mode`, wrapped in `<system-reminder>` tags.
pub fn reminder(policy: &Policy, mode: Mode) -> String {
    let mut available: Vec<String> = Vec::new();
    let mut asks: Vec<String> = Vec::new();
    let mut unavailable: Vec<String> = Vec::new();
    for kind in Kind::ALL {
        let rows: &[(bool, &str)] = match kind {
            Kind::Shell => &[
                (true, "read-only shell commands (ls, cat, grep, rg, find without actions, git status/log/diff/show, ...)"),
                (false, "shell commands that are not read-only"),
            ],
            Kind::Other => &[(false, "other and MCP tools")],
            _ => &[(false, "")],
        };
        for (read_only, label) in rows {
            let noun = if label.is_empty() { kind.noun() } else { label };
            if kind == Kind::ExitPlan && mode != Mode::Plan {
                continue;
            }
            match mode_answer(mode, kind, *read_only, false) {
                Action::Allow => available.push(noun.to_string()),
                Action::Ask => asks.push(noun.to_string()),
                Action::Deny => {
                    if kind == Kind::Other && mode == Mode::Plan && !policy.plan_allowed.is_empty()
                    {
                        let listed: Vec<&str> = policy
                            .plan_allowed
                            .iter()
                            .map(|tool| tool.as_str())
                            .collect();
                        available.push(format!("these tools: {}", listed.join(", ")));
                        unavailable.push("other and MCP tools not listed there".to_string());
                    } else {
                        unavailable.push(noun.to_string());
                    }
                }
            }
        }
    }
    let opening = match mode {
        Mode::Plan => "Plan mode is active. Research and plan; do not change anything until the user approves your plan.",
        Mode::ReadOnly => "Read-only mode is active. You may research but nothing that changes files, runs programs or starts agents will run, and nothing will be asked.",
        Mode::Ask => "Ask mode is active: anything beyond reading is put to the user first.",
        Mode::AutoEdit => "Auto-edit mode is active: file edits run without asking; other changes are put to the user first.",
        Mode::Auto => "Auto mode is active: tool calls run without asking, except what rules deny.",
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
    if mode == Mode::Plan {
        text.push_str("When your plan is ready, call exit_plan_mode with the plan to ask the user for approval.\n");
    }
    text.push_str("</system-reminder>");
    text
}
