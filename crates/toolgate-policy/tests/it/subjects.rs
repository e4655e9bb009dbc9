//! Rules that see a tool's arguments: an MCP tool's subject read from its
//! `name`, `command`, `path` or `url`, a declared tool's from the fields its
//! `subject` names. One table of calls, one line each; then grants, the
//! trace and scopes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::PathBuf;

use serde_json::{json, Value};
use toolgate_policy::{
    Action, Call, Context, GrantPattern, GrantSpec, Grants, Mode, Policy, PolicyFile, Scope,
    ScopeRules, Sources, SubjectRead,
};

fn policy() -> Policy {
    let file = json!({
        "tools": {
            "deploy": {"kind": "execute", "subject": "target"},
            "mcp__gw__call": {"kind": "other", "subject": ["args.name"]},
            "notes": {"kind": "think", "subject": "file"},
            "mcp__gh__get_issue": {"kind": "other", "subject": []}
        },
        "permission": {
            "mcp__gw__invoke": {"*": "allow", "gmail_delete*": "deny", "gmail_send*": "ask"},
            "mcp__fs__read": {"*": "allow", "secrets/*": "deny"},
            "mcp__shell__exec": {"*": "ask", "git *": "allow"},
            "mcp__plain__tool": {"*": "allow"},
            "deploy": {"*": "allow", "prod*": "deny"},
            "mcp__gw__call": {"*": "allow", "drop_*": "deny"},
            "mcp__gh__*": {"*": "allow", "*delete*": "deny"}
        }
    });
    let file = PolicyFile::parse(&file.to_string(), "policy.json").unwrap();
    let mut policy = Policy::build(Sources {
        project_root: PathBuf::from("/work/project"),
        home: Some(PathBuf::from("/home/me")),
        file: Some(("policy.json".to_string(), file)),
        ..Sources::default()
    })
    .unwrap()
    .0;
    policy.shell.repo_oracle = Some(std::sync::Arc::new(toolgate_shell::AssumeOwnRepository));
    policy
}

/// `allow rule mcp__gw__invoke:*`, `ask mcp__gw__invoke ["gmail_send_x"] always ["*"]`.
fn render(policy: &Policy, mode: Mode, tool: &str, input: &Value, grants: &Grants) -> String {
    let input = input.as_object().unwrap().clone();
    let call = Call {
        tool,
        input: &input,
        cwd: None,
    };
    let evaluation = policy.evaluate(&call, &Context::new(mode, grants));
    let source = format!("{:?}", evaluation.source).to_lowercase();
    match evaluation.action {
        Action::Ask => {
            let question = evaluation.question.unwrap();
            let options: Vec<Vec<String>> = question
                .options()
                .into_iter()
                .map(|option| option.patterns)
                .collect();
            format!(
                "ask {} {:?} options {options:?}",
                question.permission, question.patterns
            )
        }
        action => {
            let rule = evaluation
                .rule
                .map(|rule| format!(" {}:{}", rule.permission, rule.pattern))
                .unwrap_or_default();
            format!("{} {source}{rule}", action.as_str())
        }
    }
}

#[test]
fn rules_match_the_subject_an_input_field_gives() {
    let policy = policy();
    let grants = Grants::default();
    let cases: &[(Mode, &str, Value, &str)] = &[
        // The MCP default: `name`.
        (
            Mode::Ask,
            "mcp__gw__invoke",
            json!({"name": "gmail_delete_all"}),
            "deny rule mcp__gw__invoke:gmail_delete*",
        ),
        (
            Mode::Ask,
            "mcp__gw__invoke",
            json!({"name": "gmail_list"}),
            "allow rule mcp__gw__invoke:*",
        ),
        (
            Mode::Ask,
            "mcp__gw__invoke",
            json!({"name": "gmail_send_x"}),
            r#"ask mcp__gw__invoke ["gmail_send_x"] options [["gmail_send_x"], ["*"]]"#,
        ),
        (
            Mode::Auto,
            "mcp__gw__invoke",
            json!({"name": "gmail_delete_all"}),
            "deny rule mcp__gw__invoke:gmail_delete*",
        ),
        (
            Mode::Auto,
            "mcp__gw__invoke",
            json!({"name": "gmail_list"}),
            "allow rule mcp__gw__invoke:*",
        ),
        // A rule never lifts a mode denial.
        (
            Mode::Plan,
            "mcp__gw__invoke",
            json!({"name": "gmail_list"}),
            "deny mode",
        ),
        // No subject, or one that is not text: every deny or ask rule may match.
        (
            Mode::Ask,
            "mcp__gw__invoke",
            json!({}),
            "deny rule mcp__gw__invoke:gmail_delete*",
        ),
        (
            Mode::Auto,
            "mcp__gw__invoke",
            json!({"id": 3}),
            "deny rule mcp__gw__invoke:gmail_delete*",
        ),
        (
            Mode::Ask,
            "mcp__gw__invoke",
            json!({"name": {"text": "gmail_list"}}),
            "deny rule mcp__gw__invoke:gmail_delete*",
        ),
        // Every value is judged: an array, and every default field given.
        (
            Mode::Ask,
            "mcp__gw__invoke",
            json!({"name": ["gmail_list", "gmail_delete_all"]}),
            "deny rule mcp__gw__invoke:gmail_delete*",
        ),
        (
            Mode::Ask,
            "mcp__gw__invoke",
            json!({"name": "gmail_list", "url": "gmail_delete_all"}),
            "deny rule mcp__gw__invoke:gmail_delete*",
        ),
        (
            Mode::Ask,
            "mcp__gw__invoke",
            json!({"name": 7}),
            "allow rule mcp__gw__invoke:*",
        ),
        // A tool with `*` rules only: nothing to tighten when there is no subject.
        (
            Mode::Ask,
            "mcp__plain__tool",
            json!({"number": 1}),
            "allow rule mcp__plain__tool:*",
        ),
        // No rules: the mode asks, about the subject.
        (
            Mode::Ask,
            "mcp__other__x",
            json!({"name": "a"}),
            r#"ask mcp__other__x ["a"] options [["a"], ["*"]]"#,
        ),
        (
            Mode::Ask,
            "mcp__other__x",
            json!({"number": 1}),
            r#"ask mcp__other__x ["*"] options [["*"]]"#,
        ),
        // `path` is matched as a path, relative to the project root.
        (
            Mode::Ask,
            "mcp__fs__read",
            json!({"path": "./secrets/key"}),
            "deny rule mcp__fs__read:secrets/*",
        ),
        (
            Mode::Ask,
            "mcp__fs__read",
            json!({"path": "/work/project/secrets/key"}),
            "deny rule mcp__fs__read:secrets/*",
        ),
        (
            Mode::Ask,
            "mcp__fs__read",
            json!({"path": "src/../secrets/key"}),
            "deny rule mcp__fs__read:secrets/*",
        ),
        (
            Mode::Ask,
            "mcp__fs__read",
            json!({"path": "src/a.rs"}),
            "allow rule mcp__fs__read:*",
        ),
        // `command` is judged simple command by simple command.
        (
            Mode::Ask,
            "mcp__shell__exec",
            json!({"command": "git status"}),
            "allow rule mcp__shell__exec:git *",
        ),
        (
            Mode::Ask,
            "mcp__shell__exec",
            json!({"command": "git status; rm -rf /"}),
            r#"ask mcp__shell__exec ["rm -rf /"] options [["rm -rf /"], ["*"]]"#,
        ),
        (
            Mode::Ask,
            "mcp__shell__exec",
            json!({"command": ["git", "log"]}),
            "allow rule mcp__shell__exec:git *",
        ),
        // A declared field.
        (
            Mode::Ask,
            "deploy",
            json!({"target": "prod-eu"}),
            "deny rule deploy:prod*",
        ),
        (
            Mode::Ask,
            "deploy",
            json!({"target": "staging"}),
            "allow rule deploy:*",
        ),
        (
            Mode::Ask,
            "deploy",
            json!({"name": "staging"}),
            "deny rule deploy:prod*",
        ),
        // A declared nested field; the MCP default no longer applies.
        (
            Mode::Ask,
            "mcp__gw__call",
            json!({"args": {"name": "drop_table"}}),
            "deny rule mcp__gw__call:drop_*",
        ),
        (
            Mode::Ask,
            "mcp__gw__call",
            json!({"args": {"name": "select"}}),
            "allow rule mcp__gw__call:*",
        ),
        (
            Mode::Ask,
            "mcp__gw__call",
            json!({"name": "select"}),
            "deny rule mcp__gw__call:drop_*",
        ),
        (
            Mode::Ask,
            "mcp__gw__call",
            json!({"args": "select"}),
            "deny rule mcp__gw__call:drop_*",
        ),
    ];
    for (mode, tool, input, expected) in cases {
        let actual = render(&policy, *mode, tool, input, &grants);
        assert_eq!(actual, *expected, "{mode} {tool} {input}");
    }
}

/// A call without the subject says why the rule may match it.
#[test]
fn a_missing_subject_is_said() {
    let policy = policy();
    let grants = Grants::default();
    let cases = [
        (
            "mcp__gw__invoke",
            json!({}),
            "the `policy.json` rule `mcp__gw__invoke: gmail_delete*` denies this call (the call gives none of `name`, `command`, `path`, `url`, so the rule may match it)",
        ),
        (
            "deploy",
            json!({"target": {"env": "prod"}}),
            "the `policy.json` rule `deploy: prod*` denies this call (`target` is an object, not text, so the rule may match it)",
        ),
        (
            "mcp__gw__call",
            json!({}),
            "the `policy.json` rule `mcp__gw__call: drop_*` denies this call (the call gives no `args.name`, so the rule may match it)",
        ),
    ];
    for (tool, input, expected) in cases {
        let input = input.as_object().unwrap().clone();
        let call = Call {
            tool,
            input: &input,
            cwd: None,
        };
        let evaluation = policy.evaluate(&call, &Context::new(Mode::Ask, &grants));
        assert_eq!(evaluation.reason, expected, "{tool}");
    }
}

/// An `always` that grants one subject covers that subject, not another; a
/// grant never lifts a deny.
#[test]
fn grants_cover_the_subject_they_name() {
    let policy = policy();
    let mut grants = Grants::default();
    grants.add(
        "g1".into(),
        &GrantSpec {
            permission: "mcp__gw__invoke".into(),
            pattern: GrantPattern::exact("gmail_send_draft"),
            plan_only: false,
            expires_at: None,
        },
    );
    let cases = [
        (
            json!({"name": "gmail_send_draft"}),
            "allow grant mcp__gw__invoke:gmail_send_draft",
        ),
        (
            json!({"name": "gmail_send_all"}),
            r#"ask mcp__gw__invoke ["gmail_send_all"] options [["gmail_send_all"], ["*"]]"#,
        ),
        (json!({}), "deny rule mcp__gw__invoke:gmail_delete*"),
    ];
    for (input, expected) in cases {
        let actual = render(&policy, Mode::Ask, "mcp__gw__invoke", &input, &grants);
        assert_eq!(actual, expected, "{input}");
    }
}

/// The trace says where each step's subject came from.
#[test]
fn the_trace_names_the_field() {
    let policy = policy();
    let grants = Grants::default();
    let cases = [
        (
            "mcp__gw__invoke",
            json!({"name": "gmail_list"}),
            "gmail_list name Text",
        ),
        (
            "mcp__fs__read",
            json!({"path": "./src/a.rs"}),
            "src/a.rs path Path",
        ),
        (
            "mcp__shell__exec",
            json!({"command": "ls && pwd"}),
            "ls command Command; pwd command Command; ls - -; pwd - -",
        ),
        (
            "deploy",
            json!({}),
            "* - Unknown(\"the call gives no `target`\")",
        ),
        ("Bash", json!({"command": "ls"}), "ls - -"),
    ];
    for (tool, input, expected) in cases {
        let input = input.as_object().unwrap().clone();
        let call = Call {
            tool,
            input: &input,
            cwd: None,
        };
        let context = Context {
            explain: true,
            ..Context::new(Mode::Ask, &grants)
        };
        let evaluation = policy.evaluate(&call, &context);
        let steps: Vec<String> = evaluation
            .trace
            .iter()
            .map(|step| match &step.origin {
                None => format!("{} - -", step.subject),
                Some(origin) => {
                    let read = match &origin.read {
                        SubjectRead::Text => "Text".to_string(),
                        SubjectRead::Path => "Path".to_string(),
                        SubjectRead::Command => "Command".to_string(),
                        SubjectRead::Unknown(why) => format!("Unknown({why:?})"),
                    };
                    let field = origin.field.as_deref().unwrap_or("-");
                    format!("{} {field} {read}", step.subject)
                }
            })
            .collect();
        assert_eq!(steps.join("; "), expected, "{tool}");
    }
}

/// A subject read as a path meets a scope's `filePatterns`, one read as a
/// command its `commandPatterns`; text meets no pattern list.
#[test]
fn scopes_hold_paths_and_commands_read_from_fields() {
    let policy = policy();
    let grants = Grants::default();
    let rules = ScopeRules {
        allowed_tools: Some(vec![
            "notes".to_string(),
            "mcp__gw__invoke".to_string(),
            "deploy".to_string(),
            "mcp__shell__exec".to_string(),
        ]),
        file_patterns: Some(vec!["src/**".to_string()]),
        command_patterns: Some(vec!["git *".to_string()]),
        ..ScopeRules::default()
    };
    let scope = Scope::from_layers([policy.scope_layer("s", rules).unwrap()]);
    let cases = [
        ("notes", json!({"file": "src/a.md"}), Action::Allow),
        ("notes", json!({"file": "secrets/a.md"}), Action::Deny),
        (
            "mcp__gw__invoke",
            json!({"name": "gmail_list"}),
            Action::Allow,
        ),
        // `target` reads as a path, as a scope reads an unknown tool's fields.
        ("deploy", json!({"target": "src/web"}), Action::Allow),
        ("deploy", json!({"target": "staging"}), Action::Deny),
        (
            "mcp__shell__exec",
            json!({"command": "git status"}),
            Action::Allow,
        ),
        (
            "mcp__shell__exec",
            json!({"command": "git status && make"}),
            Action::Deny,
        ),
    ];
    for (tool, input, expected) in cases {
        let input = input.as_object().unwrap().clone();
        let call = Call {
            tool,
            input: &input,
            cwd: None,
        };
        let context = Context {
            scope: &scope,
            ..Context::new(Mode::Auto, &grants)
        };
        let evaluation = policy.evaluate(&call, &context);
        assert_eq!(
            evaluation.action, expected,
            "{tool} {input:?}: {}",
            evaluation.reason
        );
    }
}
