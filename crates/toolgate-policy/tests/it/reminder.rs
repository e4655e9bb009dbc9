//! The reminder and the gate agree: for every built-in tool (plus declared and
//! MCP tools) in every mode, `Policy::evaluate` on a representative input
//! decides allow, ask or deny, and the reminder for that mode places the tool's
//! kind under "Available:", "Asks the user first:" or "Not available:"
//! accordingly. Every tool name the reminder shows belongs to the line it is on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::PathBuf;

use serde_json::{json, Value};
use toolgate_policy::{
    reminder, Action, Call, Context, Grants, Kind, Mode, Policy, PolicyFile, Registry, Source,
    Sources, SubjectField,
};

const SECTIONS: [(&str, Action); 3] = [
    ("Available: ", Action::Allow),
    ("Asks the user first: ", Action::Ask),
    ("Not available: ", Action::Deny),
];

/// How the reminder describes each kind, written out here rather than taken
/// from the code. Shell has two lines: read-only commands and the rest.
fn label(kind: Kind, read_only: bool) -> &'static str {
    match kind {
        Kind::Read => "file reads",
        Kind::Search => "searches",
        Kind::List => "directory listings",
        Kind::Think => "todo lists, questions and notes",
        Kind::Fetch => "web fetches and web searches",
        Kind::Edit => "file edits, writes, patches, deletes and moves",
        Kind::Shell if read_only => "read-only shell commands",
        Kind::Shell => "shell commands that are not read-only",
        Kind::Execute => "tools that run programs",
        Kind::ExitPlan => "leaving plan mode",
        Kind::Task => "sub-agents",
        Kind::Other => "other and MCP tools",
    }
}

/// The label of the sub-agent types plan mode launches.
const READ_ONLY_AGENTS: &str = "read-only sub-agents";

/// The label of the `planModeAllowedTools` item in plan mode.
const PLAN_LISTED: &str = "the tools in planModeAllowedTools";

const POLICY: &str = r#"{
    "planModeAllowedTools": ["mcp__docs__search"],
    "tools": {
        "my_search": {"kind": "search"},
        "deploy": {"kind": "execute"},
        "mcp__db__query": {"kind": "read"}
    }
}"#;

fn policy() -> Policy {
    let file = PolicyFile::parse(POLICY, "toolgate.json").unwrap();
    let (policy, warnings) = Policy::build(Sources {
        project_root: PathBuf::from("/work/project"),
        home: Some(PathBuf::from("/home/me")),
        file: Some(("toolgate.json".to_string(), file)),
        ..Sources::default()
    })
    .unwrap();
    assert_eq!(warnings, Vec::<String>::new());
    let mut policy = policy;
    policy.shell.repo_oracle = Some(std::sync::Arc::new(toolgate_shell::AssumeOwnRepository));
    policy
}

/// Valid inputs for a tool, each with whether it is a read-only shell command.
fn inputs(subject: SubjectField) -> Vec<(Value, bool)> {
    match subject {
        SubjectField::Shell => vec![
            (json!({"command": "git status"}), true),
            (json!({"command": "rm -rf build"}), false),
        ],
        SubjectField::Path => vec![(json!({"file_path": "src/main.rs"}), false)],
        SubjectField::OptionalPath => vec![
            (json!({"sql": "select 1"}), false),
            (json!({"path": "src/main.rs"}), false),
        ],
        SubjectField::Paths => vec![(json!({"paths": ["src/a.rs", "src/b.rs"]}), false)],
        SubjectField::Patch => vec![(
            json!({"input": "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-a\n+b\n*** End Patch"}),
            false,
        )],
        SubjectField::Url => vec![(json!({"url": "https://docs.rs/"}), false)],
        SubjectField::Search => vec![(json!({"pattern": "fn main", "path": "src"}), false)],
        // `explore` is a read-only type through OpenCode's `task` only.
        SubjectField::Agent => vec![
            (json!({"subagent_type": "explore", "prompt": "x"}), false),
            (
                json!({"subagent_type": "general-purpose", "prompt": "x"}),
                false,
            ),
        ],
        SubjectField::Plan => vec![(json!({"plan": "1. fix the parser"}), false)],
        SubjectField::Declared | SubjectField::McpDefault => vec![
            (json!({"name": "gmail_list"}), false),
            (json!({"note": "x"}), false),
        ],
        SubjectField::None => vec![(json!({"note": "x"}), false)],
    }
}

/// The reminder's items: (section, item text).
fn items(text: &str) -> Vec<(Action, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        for (prefix, action) in SECTIONS {
            if let Some(rest) = line.strip_prefix(prefix) {
                let rest = rest
                    .strip_suffix('.')
                    .expect("a section line ends with '.'");
                out.extend(rest.split("; ").map(|item| (action, item.to_string())));
            }
        }
    }
    out
}

fn item_has_label(item: &str, label: &str) -> bool {
    item == label
        || item.starts_with(&format!("{label} "))
        || item.starts_with(&format!("{label},"))
}

/// The tool names in an item's trailing parentheses, without `...`.
fn names(item: &str) -> Vec<&str> {
    let Some(inner) = item.strip_suffix(')').and_then(|s| s.rsplit_once(" (")) else {
        return Vec::new();
    };
    inner.1.split(", ").filter(|name| *name != "...").collect()
}

/// Where the reminder for `mode` puts the item with `label`, or why it cannot say.
fn section_of(text: &str, label: &str) -> Result<Action, String> {
    let found: Vec<Action> = items(text)
        .into_iter()
        .filter(|(_, item)| item_has_label(item, label))
        .map(|(action, _)| action)
        .collect();
    match found.as_slice() {
        [action] => Ok(*action),
        [] => Err(format!("the reminder never mentions {label:?}")),
        _ => Err(format!(
            "the reminder mentions {label:?} {} times",
            found.len()
        )),
    }
}

#[test]
fn the_reminder_places_every_tool_where_the_gate_puts_it() {
    let policy = policy();
    let grants = Grants::default();
    let mut tools: Vec<&str> = Registry::builtin_names().collect();
    tools.extend([
        "my_search",
        "deploy",
        "mcp__db__query",
        "mcp__docs__search",
        "mcp__github__create_issue",
    ]);
    let mut checked = 0;
    for mode in Mode::ALL {
        let text = reminder(&policy, mode);
        for tool in &tools {
            let spec = policy.registry.lookup(tool);
            for (input, read_only) in inputs(spec.subject) {
                let input = input.as_object().unwrap().clone();
                let call = Call {
                    tool,
                    input: &input,
                    cwd: None,
                };
                let evaluation = policy.evaluate(&call, &Context::new(mode, &grants));
                let what = format!("{tool} {} in {mode}", Value::Object(input.clone()));
                // The mode table decided: no rule, no invalid input.
                assert_eq!(
                    evaluation.source,
                    Source::Mode,
                    "{what}: {}",
                    evaluation.reason
                );
                assert_eq!(evaluation.kind, spec.kind, "{what}");
                let listed = policy.plan_allowed.iter().any(|w| w.matches(tool));
                let label = if spec.kind == Kind::Other && listed && mode == Mode::Plan {
                    PLAN_LISTED
                } else if spec.kind == Kind::Task
                    && mode == Mode::Plan
                    && evaluation.action == Action::Allow
                {
                    READ_ONLY_AGENTS
                } else {
                    label(spec.kind, read_only)
                };
                let placed = section_of(&text, label);
                if spec.kind == Kind::ExitPlan
                    && mode != Mode::Plan
                    && evaluation.action == Action::Allow
                {
                    // Outside plan mode exit_plan_mode is a no-op the reminder leaves out.
                    assert!(
                        placed.is_err(),
                        "{what}: mentioned outside plan mode:\n{text}"
                    );
                } else {
                    assert_eq!(
                        placed,
                        Ok(evaluation.action),
                        "{what}: the gate says {:?} ({}), the reminder disagrees:\n{text}",
                        evaluation.action,
                        evaluation.reason
                    );
                }
                if label == PLAN_LISTED {
                    let item = items(&text)
                        .into_iter()
                        .find(|(_, i)| item_has_label(i, label));
                    assert!(names(&item.unwrap().1).contains(tool), "{what}:\n{text}");
                }
                checked += 1;
            }
        }
    }
    // Every built-in name, the nine shell tools twice, the sub-agent tools
    // twice, five extras (one of them with and without a path, the two MCP
    // tools with and without a `name`); in five modes.
    let agent_tools = Registry::builtin_names()
        .filter(|name| policy.registry.lookup(name).subject == SubjectField::Agent)
        .count();
    assert_eq!(
        checked,
        (Registry::builtin_names().count() + 9 + agent_tools + 5 + 1 + 2) * 5
    );
}

#[test]
fn every_name_the_reminder_shows_is_on_its_kinds_line() {
    let policy = policy();
    for mode in Mode::ALL {
        let text = reminder(&policy, mode);
        let mut shown = 0;
        for (_, item) in items(&text) {
            for name in names(&item) {
                shown += 1;
                if item_has_label(&item, PLAN_LISTED) {
                    assert!(
                        policy.plan_allowed.iter().any(|w| w.as_str() == name),
                        "{name}"
                    );
                    continue;
                }
                let spec = policy.registry.lookup(name);
                assert!(spec.known, "{mode}: `{name}` is not a tool:\n{text}");
                let labels = [label(spec.kind, true), label(spec.kind, false)];
                assert!(
                    labels.iter().any(|label| item_has_label(&item, label)),
                    "{mode}: `{name}` ({}) is shown in {item:?}",
                    spec.kind.as_str()
                );
            }
        }
        assert!(
            shown >= 20,
            "{mode}: the reminder names only {shown} tools:\n{text}"
        );
        // Compact: it is sent to a model on every plan-mode denial.
        assert!(text.len() < 1500, "{mode}: {} bytes:\n{text}", text.len());
    }
}

/// `list_tools` comes from the same tables: a tool listed as available is
/// allowed for every input tried, one that asks asks, one unavailable is
/// denied, and a limited one is allowed for some input (or, for a sub-agent
/// tool, for some agent type), in every mode, with and without a scope.
#[test]
fn the_tool_list_agrees_with_the_gate() {
    use toolgate_policy::{tool_access, Access, Scope, ScopeLayer, ScopeRules};
    let policy = policy();
    let grants = Grants::default();
    let rules = ScopeRules {
        denied_tools: Some(vec!["webfetch".to_string()]),
        command_patterns: Some(vec!["git *".to_string()]),
        ..ScopeRules::default()
    };
    let scoped = Scope::from_layers([ScopeLayer::new("s", rules).unwrap()]);
    let mut tools: Vec<String> = policy.registry.names();
    tools.extend(["mcp__docs__search", "mcp__github__create_issue"].map(String::from));
    let mut checked = 0;
    for scope in [Scope::default(), scoped] {
        for mode in Mode::ALL {
            for tool in &tools {
                let access = tool_access(&policy, tool, mode, &scope, false);
                let spec = policy.registry.lookup(tool);
                let mut actions = Vec::new();
                for (input, _) in inputs(spec.subject) {
                    let input = input.as_object().unwrap().clone();
                    let call = Call {
                        tool,
                        input: &input,
                        cwd: None,
                    };
                    let mut context = Context::new(mode, &grants);
                    context.scope = &scope;
                    actions.push(policy.evaluate(&call, &context).action);
                }
                let all = |action: Action| actions.iter().all(|a| *a == action);
                let ok = match access {
                    Access::Available => all(Action::Allow),
                    Access::Asks => all(Action::Ask),
                    Access::Unavailable => all(Action::Deny),
                    Access::Limited => actions.contains(&Action::Allow) || spec.kind == Kind::Task,
                };
                assert!(
                    ok,
                    "{tool} in {mode}: listed {access:?}, the gate says {actions:?}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 1000, "{checked}");
}
