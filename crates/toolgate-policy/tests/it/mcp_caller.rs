//! Roo Code's `use_mcp_tool` (Kilo Code's, Cline's): judged as the call
//! `mcp__SERVER__TOOL` it makes, whose input is its `arguments`, with the
//! rules keyed on `use_mcp_tool` matched against that name to tighten, and
//! the calling tool held to a session's scope too. One table of calls
//! against the equivalent MCP call, one of what only `use_mcp_tool` says;
//! then unusable inputs, grants, scopes and the trace.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::PathBuf;

use serde_json::{json, Value};
use toolgate_policy::{
    Action, Call, Context, GrantPattern, GrantSpec, Grants, Mode, Policy, PolicyFile, Scope,
    ScopeRules, Sources,
};

fn policy() -> Policy {
    let file = json!({
        "tools": {
            "mcp__fs__read_file": {"kind": "read"},
            "mcp__db__call": {"kind": "other", "subject": "query.name"}
        },
        "permission": {
            "mcp__gw__invoke": {"*": "allow", "gmail_delete*": "deny", "gmail_send*": "ask"},
            "mcp__db__call": {"*": "allow", "drop_*": "deny"},
            "mcp__docs__*": "allow",
            "use_mcp_tool": {"*": "allow", "mcp__github__*": "deny", "mcp__slack__*": "ask"}
        }
    });
    let file = PolicyFile::parse(&file.to_string(), "policy.json").unwrap();
    Policy::build(Sources {
        project_root: PathBuf::from("/work/project"),
        home: Some(PathBuf::from("/home/me")),
        file: Some(("policy.json".to_string(), file)),
        ..Sources::default()
    })
    .unwrap()
    .0
}

/// `allow rule mcp__gw__invoke:*`, `ask mcp__gw__invoke ["gmail_send_x"] ...`,
/// with the evaluation's permission and reason.
fn render(
    policy: &Policy,
    context: &Context<'_>,
    tool: &str,
    input: &Value,
) -> (String, String, String) {
    let input = input.as_object().unwrap().clone();
    let call = Call {
        tool,
        input: &input,
        cwd: None,
    };
    let evaluation = policy.evaluate(&call, context);
    let source = format!("{:?}", evaluation.source).to_lowercase();
    let said = match evaluation.action {
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
    };
    (said, evaluation.permission, evaluation.reason)
}

/// A `use_mcp_tool` input calling `server`'s `tool` with `arguments`, given
/// as Roo Code gives them (a JSON string).
fn roo(server: &str, tool: &str, arguments: &Value) -> Value {
    json!({"server_name": server, "tool_name": tool, "arguments": arguments.to_string()})
}

/// Every mode, many inputs: a `use_mcp_tool` call gets the answer, the
/// permission and the reason of the MCP call it makes, wherever the
/// `use_mcp_tool` rules (whose `*` allows) do not tighten it.
#[test]
fn a_call_is_judged_as_the_mcp_call_it_makes() {
    let policy = policy();
    let grants = Grants::default();
    let calls: &[(&str, &str, Value)] = &[
        ("gw", "invoke", json!({"name": "gmail_list"})),
        ("gw", "invoke", json!({"name": "gmail_delete_all"})),
        ("gw", "invoke", json!({"name": "gmail_send_x"})),
        ("gw", "invoke", json!({})),
        ("gw", "invoke", json!({"name": {"id": 3}})),
        ("db", "call", json!({"query": {"name": "drop_users"}})),
        ("db", "call", json!({"query": {"name": "select"}})),
        ("fs", "read_file", json!({"path": "src/main.rs"})),
        ("fs", "read_file", json!({"path": "/etc/passwd"})),
        ("fs", "read_file", json!({"path": ".env"})),
        ("docs", "search", json!({"url": "https://docs.rs"})),
        ("other", "run", json!({"command": "rm -rf /"})),
    ];
    for mode in Mode::ALL {
        let context = Context::new(mode, &grants);
        for (server, tool, arguments) in calls {
            let name = format!("mcp__{server}__{tool}");
            let alone = render(&policy, &context, &name, arguments);
            let through = render(
                &policy,
                &context,
                "use_mcp_tool",
                &roo(server, tool, arguments),
            );
            assert_eq!(through, alone, "{mode} {name} {arguments}");
            // `arguments` given as an object: the same.
            let object = json!({"server_name": server, "tool_name": tool, "arguments": arguments});
            assert_eq!(
                render(&policy, &context, "use_mcp_tool", &object),
                alone,
                "{mode} {name} {arguments}"
            );
        }
    }
}

/// What the rules keyed on `use_mcp_tool` say of the name
/// `mcp__SERVER__TOOL`: a deny or ask tightens (in `auto` too, since the
/// user wrote it), an allow never loosens what the MCP call's own rules or
/// mode ask or deny.
#[test]
fn its_own_rules_can_only_tighten() {
    let policy = policy();
    let grants = Grants::default();
    let cases: &[(Mode, Value, &str)] = &[
        (
            Mode::Auto,
            roo("github", "create_issue", &json!({"title": "x"})),
            "deny rule use_mcp_tool:mcp__github__*",
        ),
        (
            Mode::Ask,
            roo("github", "get_issue", &json!({})),
            "deny rule use_mcp_tool:mcp__github__*",
        ),
        (
            Mode::Auto,
            roo("slack", "post", &json!({"name": "general"})),
            r#"ask mcp__slack__post ["general"] options [["general"], ["*"]]"#,
        ),
        // Its `*` allow does not lift the mode's question, nor a rule's.
        (
            Mode::Ask,
            roo("other", "run", &json!({"name": "x"})),
            r#"ask mcp__other__run ["x"] options [["x"], ["*"]]"#,
        ),
        (
            Mode::Auto,
            roo("gw", "invoke", &json!({"name": "gmail_delete_all"})),
            "deny rule mcp__gw__invoke:gmail_delete*",
        ),
        // The MCP call's own allow stands when nothing tightens.
        (
            Mode::Ask,
            roo("docs", "search", &json!({"url": "https://docs.rs"})),
            "allow rule mcp__docs__*:*",
        ),
    ];
    for (mode, input, expected) in cases {
        let context = Context::new(*mode, &grants);
        let (said, _, reason) = render(&policy, &context, "use_mcp_tool", input);
        assert_eq!(said, *expected, "{mode} {input}: {reason}");
    }
    let (_, permission, reason) = render(
        &policy,
        &Context::new(Mode::Auto, &grants),
        "use_mcp_tool",
        &roo("github", "create_issue", &json!({})),
    );
    assert_eq!(permission, "mcp__github__create_issue");
    assert_eq!(
        reason,
        "the `policy.json` rule `use_mcp_tool: mcp__github__*` denies `mcp__github__create_issue`"
    );
}

/// What cannot be read is denied (source `invalid`), in every mode, `auto`
/// included, whatever the rules allow.
#[test]
fn unusable_inputs_are_denied() {
    let policy = policy();
    let grants = Grants::default();
    let cases = [
        (json!({}), "the input has no `server_name`"),
        (
            json!({"server_name": 1, "tool_name": "t"}),
            "`server_name` is a number, not text",
        ),
        (
            json!({"server_name": "docs", "tool_name": ""}),
            "`tool_name` is empty",
        ),
        (
            json!({"server_name": "docs__x", "tool_name": "t"}),
            "`server_name` `docs__x` holds `__` or ends with `_`, so `mcp__docs__x__…` would not say which server it is",
        ),
        (
            json!({"server_name": "docs", "tool_name": "t", "arguments": "{not json"}),
            "`arguments` is not JSON: key must be a string at line 1 column 2",
        ),
        (
            json!({"server_name": "docs", "tool_name": "t", "arguments": "[]"}),
            "`arguments` is an array, not a JSON object",
        ),
    ];
    for mode in Mode::ALL {
        for (input, why) in &cases {
            let (said, permission, reason) =
                render(&policy, &Context::new(mode, &grants), "use_mcp_tool", input);
            assert_eq!(said, "deny invalid", "{mode} {input}");
            assert_eq!(permission, "use_mcp_tool");
            assert_eq!(
                reason,
                format!("the `use_mcp_tool` call is unusable: {why}")
            );
        }
    }
}

/// An `always` on the MCP tool covers it whichever way it is called; an
/// `always` never lifts a `use_mcp_tool` deny.
#[test]
fn grants_are_the_mcp_tools() {
    let policy = policy();
    let mut grants = Grants::default();
    for (id, permission) in [("g1", "mcp__other__run"), ("g2", "mcp__github__get_issue")] {
        grants.add(
            id.into(),
            &GrantSpec {
                permission: permission.into(),
                pattern: GrantPattern::exact("x"),
                plan_only: false,
                expires_at: None,
            },
        );
    }
    let context = Context::new(Mode::Ask, &grants);
    let cases = [
        (
            roo("other", "run", &json!({"name": "x"})),
            "allow grant mcp__other__run:x",
        ),
        (
            roo("other", "run", &json!({"name": "y"})),
            r#"ask mcp__other__run ["y"] options [["y"], ["*"]]"#,
        ),
        (
            roo("github", "get_issue", &json!({"name": "x"})),
            "deny rule use_mcp_tool:mcp__github__*",
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(
            render(&policy, &context, "use_mcp_tool", &input).0,
            expected,
            "{input}"
        );
    }
}

/// A session's scope holds the calling tool and the MCP tool: both must
/// pass `allowedTools` and `deniedTools`.
#[test]
fn the_scope_holds_both_tools() {
    let policy = policy();
    let grants = Grants::default();
    let scope = |allowed: &[&str], denied: &[&str]| {
        let rules = ScopeRules {
            allowed_tools: Some(allowed.iter().map(|name| name.to_string()).collect()),
            denied_tools: Some(denied.iter().map(|name| name.to_string()).collect()),
            ..ScopeRules::default()
        };
        Scope::from_layers([policy.scope_layer("s", rules).unwrap()])
    };
    let docs = roo("docs", "search", &json!({"url": "https://docs.rs"}));
    let cases = [
        (scope(&["use_mcp_tool", "mcp__docs__*"], &[]), Action::Allow),
        // Only the calling tool, or only the MCP tool: refused.
        (scope(&["use_mcp_tool"], &[]), Action::Deny),
        (scope(&["mcp__docs__*"], &[]), Action::Deny),
        // Either one denied: refused.
        (
            scope(&["use_mcp_tool", "mcp__docs__*"], &["mcp__docs__search"]),
            Action::Deny,
        ),
        (
            scope(&["use_mcp_tool", "mcp__docs__*"], &["use_mcp_tool"]),
            Action::Deny,
        ),
    ];
    for (scope, expected) in cases {
        let context = Context {
            scope: &scope,
            ..Context::new(Mode::Auto, &grants)
        };
        let input = docs.as_object().unwrap().clone();
        let call = Call {
            tool: "use_mcp_tool",
            input: &input,
            cwd: None,
        };
        let evaluation = policy.evaluate(&call, &context);
        assert_eq!(evaluation.action, expected, "{}", evaluation.reason);
    }
}

/// The trace shows the MCP call's steps, each with the calling tool's rules
/// that matched the MCP tool's name.
#[test]
fn the_trace_names_the_calling_tool() {
    let policy = policy();
    let grants = Grants::default();
    let context = Context {
        explain: true,
        ..Context::new(Mode::Ask, &grants)
    };
    let input = roo(
        "slack",
        "post",
        &json!({"name": "general", "url": "https://x"}),
    );
    let input = input.as_object().unwrap().clone();
    let call = Call {
        tool: "use_mcp_tool",
        input: &input,
        cwd: None,
    };
    let evaluation = policy.evaluate(&call, &context);
    let steps: Vec<String> = evaluation
        .trace
        .iter()
        .map(|step| {
            let matched: Vec<String> = step
                .matched
                .iter()
                .map(|(rule, text)| format!("{}:{} on {text}", rule.permission, rule.pattern))
                .collect();
            format!(
                "{} {} via {:?} matched {matched:?}",
                step.permission, step.subject, step.via
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            r#"mcp__slack__post general via Some(("use_mcp_tool", "mcp__slack__post")) matched ["use_mcp_tool:* on mcp__slack__post", "use_mcp_tool:mcp__slack__* on mcp__slack__post"]"#,
            r#"mcp__slack__post https://x via Some(("use_mcp_tool", "mcp__slack__post")) matched ["use_mcp_tool:* on mcp__slack__post", "use_mcp_tool:mcp__slack__* on mcp__slack__post"]"#,
        ]
    );
}
