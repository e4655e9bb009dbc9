//! Tools that call tools (`batch`, `multi_tool_use.parallel`, `BatchTool`,
//! `batch-tool`): a table of cases, and the property that a batch gets exactly
//! the strictest answer its calls get alone, in every mode, whatever the shape,
//! the nesting, the grants and the approvals.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::PathBuf;

use proptest::prelude::*;
use serde_json::{json, Value};
use toolgate_policy::{
    Action, Call, Context, GrantPattern, GrantSpec, Grants, Mode, Policy, PolicyFile, Source,
    Sources, MAX_CALLS,
};

fn policy() -> Policy {
    let file = json!({"permission": {
        "bash": {"rm *": "deny", "git push *": "ask", "npm test *": "allow"},
        "edit": {"secrets/**": "deny"},
        "webfetch": {"https://evil.example/*": "deny"},
        "mcp__docs__search": "allow",
        "batch-tool": "deny"
    }});
    let parsed = PolicyFile::parse(&file.to_string(), "policy.json").unwrap();
    let mut policy = Policy::build(Sources {
        project_root: PathBuf::from("/work/project"),
        home: Some(PathBuf::from("/home/me")),
        file: Some(("policy.json".to_string(), parsed)),
        ..Sources::default()
    })
    .unwrap()
    .0;
    // git commands here run in the project's own repository.
    policy.shell.repo_oracle = Some(std::sync::Arc::new(toolgate_shell::AssumeOwnRepository));
    policy
}

fn evaluate(
    policy: &Policy,
    mode: Mode,
    grants: &Grants,
    approvals: &[(String, String)],
    tool: &str,
    input: &Value,
) -> toolgate_policy::Evaluation {
    let input = input.as_object().unwrap();
    policy.evaluate(
        &Call {
            tool,
            input,
            cwd: None,
        },
        &Context {
            approvals,
            ..Context::new(mode, grants)
        },
    )
}

/// `action source | reason`, and for an ask the question's permission and patterns.
fn render(evaluation: &toolgate_policy::Evaluation) -> String {
    let source = format!("{:?}", evaluation.source).to_lowercase();
    let action = evaluation.action.as_str();
    match &evaluation.question {
        Some(question) => format!(
            "{action} {source} {} {:?} | {}",
            question.permission, question.patterns, evaluation.reason
        ),
        None => format!("{action} {source} | {}", evaluation.reason),
    }
}

fn opencode(calls: &[(&str, Value)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(tool, parameters)| json!({"tool": tool, "parameters": parameters}))
        .collect();
    json!({ "tool_calls": calls })
}

#[test]
fn table() {
    let policy = policy();
    let grants = Grants::default();
    let many: Vec<(&str, Value)> = (0..=MAX_CALLS)
        .map(|_| ("read", json!({"filePath": "src/a.rs"})))
        .collect();
    // (mode, tool, input, expected rendering prefix)
    let cases: Vec<(Mode, &str, Value, &str)> = vec![
        // A deny rule holds inside a batch, in auto too.
        (
            Mode::Auto,
            "batch",
            opencode(&[("read", json!({"filePath": "a"})), ("bash", json!({"command": "rm -rf /"}))]),
            "deny rule | batch call `tool_calls[1]` (`bash`): the `policy.json` rule `bash: rm *` denies `rm -rf /`",
        ),
        (
            Mode::Auto,
            "multi_tool_use.parallel",
            json!({"tool_uses": [{"recipient_name": "functions.shell", "parameters": {"command": ["bash", "-lc", "rm -rf src"]}}]}),
            "deny rule | batch call `tool_uses[0]` (`shell`): the `policy.json` rule `bash: rm *` denies `rm -rf src`",
        ),
        (
            Mode::Auto,
            "BatchTool",
            json!({"description": "x", "invocations": [{"tool_name": "Edit", "input": {"file_path": "secrets/k"}}]}),
            "deny rule | batch call `invocations[0]` (`Edit`): the `policy.json` rule `edit: secrets/**` denies `secrets/k`",
        ),
        // The batch's own deny rule.
        (
            Mode::Auto,
            "batch-tool",
            json!({"invocations": [{"name": "read", "input": {"filePath": "a"}}]}),
            "deny rule | the `policy.json` rule `batch-tool: *` denies every `batch-tool` call",
        ),
        // Reads pass in readonly and plan as they do alone.
        (
            Mode::ReadOnly,
            "batch",
            opencode(&[("read", json!({"filePath": "a"})), ("grep", json!({"pattern": "x"})), ("bash", json!({"command": "git log -3"}))]),
            "allow mode | all 3 calls of the batch are allowed; batch call `tool_calls[0]` (`read`): readonly mode allows file reads",
        ),
        (
            Mode::Plan,
            "batch",
            opencode(&[("read", json!({"filePath": "a"})), ("edit", json!({"filePath": "a"}))]),
            "deny mode | batch call `tool_calls[1]` (`edit`): plan mode does not allow file edits",
        ),
        (
            Mode::ReadOnly,
            "batch",
            opencode(&[("read", json!({"filePath": ".env"}))]),
            "deny mode | batch call `tool_calls[0]` (`read`): readonly mode never asks",
        ),
        // The ask of each call, in one question.
        (
            Mode::Ask,
            "batch",
            opencode(&[("bash", json!({"command": "git push"})), ("read", json!({"filePath": "a"})), ("edit", json!({"filePath": "b"}))]),
            "ask rule batch [\"git push\", \"b\"] | batch call `tool_calls[0]` (`bash`): the `policy.json` rule `bash: git push *` asks before `git push`; batch call `tool_calls[2]` (`edit`): ask mode asks before file edits",
        ),
        // A deny beats an ask, whatever the order.
        (
            Mode::Ask,
            "batch",
            opencode(&[("edit", json!({"filePath": "b"})), ("webfetch", json!({"url": "https://evil.example/x"}))]),
            "deny rule | batch call `tool_calls[1]` (`webfetch`)",
        ),
        // A rule's allow inside is the call's own answer.
        (
            Mode::Ask,
            "batch",
            opencode(&[("bash", json!({"command": "npm test"})), ("mcp__docs__search", json!({"q": "x"}))]),
            "allow rule | all 2 calls of the batch are allowed; batch call `tool_calls[0]` (`bash`): the `policy.json` rule `bash: npm test *` allows `npm test`",
        ),
        // An unknown tool is an other tool, as alone.
        (
            Mode::Plan,
            "batch",
            opencode(&[("frobnicate", json!({}))]),
            "deny mode | batch call `tool_calls[0]` (`frobnicate`): plan mode does not allow other and MCP tools",
        ),
        (
            Mode::Ask,
            "batch",
            opencode(&[("frobnicate", json!({}))]),
            "ask mode batch [\"*\"] | batch call `tool_calls[0]` (`frobnicate`)",
        ),
        // Malformed batches are denied whole, naming the entry.
        (Mode::Auto, "batch", json!({"tool_calls": []}), "deny invalid | the `batch` call is unusable: it has no calls"),
        (Mode::Auto, "batch", json!({}), "deny invalid | the `batch` call is unusable: the input has no list of calls"),
        (Mode::Auto, "batch", json!({"tool_calls": [1]}), "deny invalid | the `batch` call is unusable: `tool_calls[0]` is not an object"),
        (Mode::Auto, "batch", json!({"tool_calls": [{"tool": ""}]}), "deny invalid | the `batch` call is unusable: `tool_calls[0]` names no tool"),
        (Mode::Auto, "batch", json!({"tool_calls": [{"tool": "read", "name": "bash"}]}), "deny invalid | the `batch` call is unusable: `tool_calls[0]` names two tools, `read` and `bash`"),
        (Mode::Auto, "batch", json!({"tool_calls": [{"tool": "bash", "parameters": 1}]}), "deny invalid | the `batch` call is unusable: `tool_calls[0].parameters` is not an object"),
        (Mode::Auto, "batch", json!({"tool_calls": [{"tool": "bash", "parameters": {"command": "ls"}, "args": {"command": "rm x"}}]}), "deny invalid | the `batch` call is unusable: `tool_calls[0]` gives two different inputs"),
        (Mode::Auto, "batch", json!({"tool_calls": [{"tool": "bash"}]}), "deny invalid | batch call `tool_calls[0]` (`bash`): the `bash` call is unusable"),
        (Mode::Auto, "batch", opencode(&many), "deny invalid | the `batch` call is unusable: the batch holds more than 64 calls"),
        // Two equal names or inputs are one.
        (Mode::Auto, "batch", json!({"tool_calls": [{"tool": "read", "tool_name": "functions.read", "parameters": {"filePath": "a"}, "input": {"filePath": "a"}}]}), "allow mode | batch call `tool_calls[0]` (`read`)"),
        // Every list any agent reads is judged.
        (Mode::Auto, "batch", json!({"tool_calls": [{"tool": "read", "parameters": {"filePath": "a"}}], "tool_uses": [{"recipient_name": "functions.bash", "parameters": {"command": "rm -rf /"}}]}), "deny rule | batch call `tool_uses[0]` (`bash`)"),
        // Nesting: judged to three levels, denied beyond.
        (Mode::Auto, "batch", json!({"tool_calls": [{"tool": "batch", "parameters": opencode(&[("bash", json!({"command": "rm x"}))])}]}), "deny rule | batch call `tool_calls[0].tool_calls[0]` (`bash`)"),
        (Mode::Auto, "batch", json!({"tool_calls": [{"tool": "batch", "parameters": {"tool_calls": [{"tool": "batch", "parameters": {"tool_calls": [{"tool": "batch", "parameters": opencode(&[("read", json!({"filePath": "a"}))])}]}}]}}]}), "deny invalid | the `batch` call is unusable: `tool_calls[0].tool_calls[0].tool_calls[0]` is a `batch` nested more than 3 batches deep"),
        (Mode::Auto, "batch", json!({"tool_calls": [{"tool": "batch", "parameters": {"tool_calls": []}}]}), "deny invalid | the `batch` call is unusable: `tool_calls[0]` (`batch`) has no calls"),
        // A plan approval is asked alone.
        (Mode::Plan, "batch", opencode(&[("exit_plan_mode", json!({"plan": "x"}))]), "deny invalid | the `batch` call is unusable: `tool_calls[0]` (`exit_plan_mode`) asks to approve a plan"),
    ];
    let mut failures = Vec::new();
    for (mode, tool, input, expected) in &cases {
        let got = render(&evaluate(&policy, *mode, &grants, &[], tool, input));
        if !got.starts_with(expected) {
            failures.push(format!(
                "{mode} {tool} {input}\n  expected: {expected}\n  got:      {got}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn once_and_always_cover_every_asking_call() {
    let policy = policy();
    let grants = Grants::default();
    let input = opencode(&[
        ("bash", json!({"command": "touch /tmp/x"})),
        ("edit", json!({"filePath": "src/a.rs"})),
        ("webfetch", json!({"url": "https://docs.rs"})),
    ]);
    let first = evaluate(&policy, Mode::Ask, &grants, &[], "batch", &input);
    let question = first.question.unwrap();
    assert_eq!(question.calls.len(), 3);
    assert_eq!(
        question.approve,
        vec![
            ("external_directory".to_string(), "/tmp/x".to_string()),
            ("edit".to_string(), "src/a.rs".to_string()),
            ("webfetch".to_string(), "https://docs.rs".to_string()),
        ]
    );
    // once: the shell command's own permission asks next, alone in the question.
    let approvals = question.approve.clone();
    let second = evaluate(&policy, Mode::Ask, &grants, &approvals, "batch", &input);
    let next = second.question.unwrap();
    assert_eq!(next.patterns, vec!["touch /tmp/x".to_string()]);
    let mut approvals = approvals;
    approvals.extend(next.approve.clone());
    let third = evaluate(&policy, Mode::Ask, &grants, &approvals, "batch", &input);
    assert_eq!((third.action, third.source), (Action::Allow, Source::User));
    // always: the grants of every asking call cover the batch without approvals.
    let mut granted = Grants::default();
    for (n, spec) in question.grants.iter().chain(&next.grants).enumerate() {
        granted.add(format!("g{n}"), spec);
    }
    let later = evaluate(&policy, Mode::Ask, &granted, &[], "batch", &input);
    assert_eq!((later.action, later.source), (Action::Allow, Source::Grant));
}

/// Calls an agent may put in a batch: every kind, every answer.
fn calls() -> Vec<(&'static str, Value)> {
    vec![
        ("read", json!({"filePath": "src/a.rs"})),
        ("read", json!({"filePath": ".env"})),
        ("Read", json!({"file_path": "/etc/passwd"})),
        ("edit", json!({"filePath": "src/a.rs"})),
        ("edit", json!({"filePath": "secrets/key"})),
        ("bash", json!({"command": "ls -la"})),
        ("bash", json!({"command": "rm -rf build"})),
        ("bash", json!({"command": "git push origin main"})),
        ("bash", json!({"command": "npm test"})),
        ("bash", json!({"command": "cat /etc/hosts"})),
        ("bash", json!({})),
        (
            "shell",
            json!({"command": ["bash", "-lc", "sudo rm -rf /"]}),
        ),
        ("exec_command", json!({"cmd": "git status"})),
        ("grep", json!({"pattern": "x", "path": "src"})),
        ("webfetch", json!({"url": "https://docs.rs"})),
        ("webfetch", json!({"url": "https://evil.example/a"})),
        ("mcp__docs__search", json!({"q": "x"})),
        ("mcp__git__push", json!({})),
        ("todowrite", json!({"todos": []})),
        ("Task", json!({"subagent_type": "general", "prompt": "x"})),
    ]
}

/// A batch of `picked` calls in one of the agents' shapes, some of them nested.
fn batch_of(
    shape: usize,
    picked: &[(&'static str, Value)],
    nest_from: usize,
) -> (&'static str, Value) {
    let entry = |shape: usize, tool: &str, input: &Value| -> Value {
        match shape {
            0 => json!({"tool": tool, "parameters": input}),
            1 => json!({"recipient_name": format!("functions.{tool}"), "parameters": input}),
            2 => json!({"tool_name": tool, "input": input}),
            _ => json!({"name": tool, "input": input}),
        }
    };
    let list = |shape: usize, entries: Vec<Value>| -> (&'static str, Value) {
        match shape {
            0 => ("batch", json!({"tool_calls": entries})),
            1 => ("multi_tool_use.parallel", json!({"tool_uses": entries})),
            _ => ("BatchTool", json!({"invocations": entries})),
        }
    };
    let shape = shape % 3;
    let mut entries: Vec<Value> = picked[..nest_from.min(picked.len())]
        .iter()
        .map(|(tool, input)| entry(shape, tool, input))
        .collect();
    let rest = &picked[nest_from.min(picked.len())..];
    if !rest.is_empty() {
        let inner = (shape + 1) % 3;
        let (tool, input) = list(
            inner,
            rest.iter()
                .map(|(tool, input)| entry(inner, tool, input))
                .collect(),
        );
        entries.push(entry(shape, tool, &input));
    }
    list(shape, entries)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// A batch gets exactly the strictest answer its calls get alone: never
    /// looser (no denied or asking call slips through), and no stricter (a
    /// batch of allowed calls is allowed), with the source and rule of a call
    /// that got that answer alone.
    #[test]
    fn batch_is_its_strictest_call(
        mode in prop::sample::select(Mode::ALL.to_vec()),
        picks in prop::collection::vec(0usize..20, 1..6),
        shape in 0usize..3,
        nest_from in 0usize..7,
        granted in prop::collection::vec(0usize..3, 0..3),
        approved in prop::collection::vec(0usize..3, 0..3),
    ) {
        let policy = policy();
        let pool = calls();
        let picked: Vec<(&'static str, Value)> = picks.iter().map(|&i| pool[i].clone()).collect();
        let grant_pool = [
            ("bash", GrantPattern::prefixed("git push ", "*")),
            ("edit", GrantPattern::prefixed("", "*")),
            ("external_directory", GrantPattern::prefixed("/etc/", "*")),
        ];
        let mut grants = Grants::default();
        for (n, &g) in granted.iter().enumerate() {
            let (permission, pattern) = &grant_pool[g];
            grants.add(format!("g{n}"), &GrantSpec { permission: permission.to_string(), pattern: pattern.clone(), plan_only: false, expires_at: None });
        }
        let approval_pool = [("bash", "npm test"), ("read", ".env"), ("webfetch", "https://docs.rs")];
        let approvals: Vec<(String, String)> = approved
            .iter()
            .map(|&a| (approval_pool[a].0.to_string(), approval_pool[a].1.to_string()))
            .collect();
        let alone: Vec<_> = picked
            .iter()
            .map(|(tool, input)| evaluate(&policy, mode, &grants, &approvals, tool, input))
            .collect();
        let strictest = alone.iter().map(|e| e.action).max().unwrap();
        let (tool, input) = batch_of(shape, &picked, nest_from);
        let batch = evaluate(&policy, mode, &grants, &approvals, tool, &input);
        prop_assert_eq!(batch.action, strictest, "{} {}: {}", mode, input, render(&batch));
        // The batch's source and rule are those of a call that decided it alone.
        prop_assert!(
            alone.iter().any(|e| e.action == batch.action && e.source == batch.source && e.rule == batch.rule),
            "{}", render(&batch)
        );
        if batch.action == Action::Ask {
            // The one question covers every asking call's patterns and grants.
            let question = batch.question.unwrap();
            for e in alone.iter().filter(|e| e.action == Action::Ask) {
                let asked = e.question.as_ref().unwrap();
                for pattern in &asked.patterns {
                    prop_assert!(question.patterns.contains(pattern));
                }
                for grant in &asked.grants {
                    prop_assert!(question.grants.contains(grant));
                }
                for approval in &asked.approve {
                    prop_assert!(question.approve.contains(approval));
                }
            }
        }
    }
}

#[test]
fn an_entry_without_input_has_an_empty_one() {
    let policy = policy();
    let grants = Grants::default();
    let input = json!({"tool_calls": [{"tool": "todowrite"}]});
    let evaluation = evaluate(&policy, Mode::ReadOnly, &grants, &[], "batch", &input);
    assert_eq!(evaluation.action, Action::Allow, "{}", render(&evaluation));
    let input = json!({"tool_calls": [{"tool": "read"}]});
    let evaluation = evaluate(&policy, Mode::Auto, &grants, &[], "batch", &input);
    assert_eq!(
        evaluation.source,
        Source::Invalid,
        "{}",
        render(&evaluation)
    );
}
