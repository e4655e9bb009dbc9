//! `Policy::evaluate` over tables of cases: one `check` helper, one line per case.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::PathBuf;

use serde_json::{json, Value};
use toolgate_policy::{
    Action, Call, Context, GrantPattern, GrantSpec, Grants, Mode, Policy, PolicyFile, Sources,
};

fn policy(file: Option<Value>, overrides: &[Value]) -> Policy {
    let file = file.map(|value| {
        (
            "policy.json".to_string(),
            PolicyFile::parse(&value.to_string(), "policy.json").unwrap(),
        )
    });
    let mut policy = Policy::build(Sources {
        project_root: PathBuf::from("/work/project"),
        home: Some(PathBuf::from("/home/me")),
        file,
        overrides: overrides
            .iter()
            .map(|value| ("--permission".to_string(), value.clone()))
            .collect(),
        ..Sources::default()
    })
    .unwrap()
    .0;
    // The corpus's disk: every directory uses the project's own repository.
    policy.shell.repo_oracle = Some(std::sync::Arc::new(toolgate_shell::AssumeOwnRepository));
    policy
}

/// Render an evaluation compactly: `allow mode`, `ask edit [a.rs] always [*]`, `deny rule bash:git push *`.
fn render(
    policy: &Policy,
    mode: Mode,
    tool: &str,
    input: Value,
    grants: &Grants,
    repeats: u32,
) -> String {
    let input = input.as_object().unwrap().clone();
    let evaluation = policy.evaluate(
        &Call {
            tool,
            input: &input,
            cwd: None,
        },
        &Context {
            repeats,
            ..Context::new(mode, grants)
        },
    );
    let source = format!("{:?}", evaluation.source).to_lowercase();
    match evaluation.action {
        Action::Ask => {
            let question = evaluation.question.unwrap();
            format!(
                "ask {} {:?} always {:?}{}",
                question.permission,
                question.patterns,
                question.always,
                if question.plan.is_some() { " plan" } else { "" }
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

fn check(policy: &Policy, mode: Mode, tool: &str, input: Value, expected: &str) {
    let actual = render(policy, mode, tool, input.clone(), &Grants::default(), 1);
    assert_eq!(actual, expected, "{mode} {tool} {input}");
}

#[test]
fn every_agent_in_every_mode() {
    let policy = policy(None, &[]);
    use Mode::*;
    let edit = json!({"file_path": "src/a.rs"});
    let cases: &[(Mode, &str, Value, &str)] = &[
        // reads, searches, listings, think: allowed everywhere
        (Plan, "Read", json!({"file_path": "src/a.rs"}), "allow mode"),
        (
            ReadOnly,
            "read_file",
            json!({"absolute_path": "/work/project/a"}),
            "allow mode",
        ),
        (
            ReadOnly,
            "read_many_files",
            json!({"paths": ["a", "b"]}),
            "allow mode",
        ),
        (
            Plan,
            "search_file_content",
            json!({"pattern": "x"}),
            "allow mode",
        ),
        (
            ReadOnly,
            "list_directory",
            json!({"path": "."}),
            "allow mode",
        ),
        (ReadOnly, "todowrite", json!({"todos": []}), "allow mode"),
        (Plan, "question", json!({"questions": []}), "allow mode"),
        // edits
        (Auto, "Edit", edit.clone(), "allow mode"),
        (
            AutoEdit,
            "write_file",
            json!({"file_path": "a"}),
            "allow mode",
        ),
        (
            Ask,
            "replace",
            edit.clone(),
            r#"ask edit ["src/a.rs"] always ["*"]"#,
        ),
        (
            Plan,
            "NotebookEdit",
            json!({"notebook_path": "n.ipynb"}),
            "deny mode",
        ),
        (
            ReadOnly,
            "apply_patch",
            json!({"input": "*** Update File: a.rs\n"}),
            "deny mode",
        ),
        (Plan, "save_memory", json!({"fact": "x"}), "deny mode"),
        // fetch
        (Auto, "WebFetch", json!({"url": "https://x"}), "allow mode"),
        (
            Ask,
            "web_fetch",
            json!({"url": "https://x"}),
            r#"ask webfetch ["https://x"] always ["*"]"#,
        ),
        (
            Plan,
            "websearch",
            json!({"query": "q"}),
            r#"ask websearch ["q"] always ["*"]"#,
        ),
        (
            ReadOnly,
            "google_web_search",
            json!({"query": "q"}),
            "deny mode",
        ),
        // shell that cannot be proven read-only
        (Auto, "Bash", json!({"command": "make"}), "allow mode"),
        (
            AutoEdit,
            "run_shell_command",
            json!({"command": "make"}),
            r#"ask bash ["make"] always ["make"]"#,
        ),
        (Plan, "shell", json!({"command": ["make"]}), "deny mode"),
        (
            ReadOnly,
            "exec_command",
            json!({"cmd": "make"}),
            "deny mode",
        ),
        // exit plan mode
        (Ask, "ExitPlanMode", json!({"plan": "p"}), "allow mode"),
        (
            Plan,
            "exit_plan_mode",
            json!({"plan": "p"}),
            "ask exit_plan_mode [] always [] plan",
        ),
        (ReadOnly, "ExitPlanMode", json!({"plan": "p"}), "deny mode"),
        // sub-agents
        (Auto, "Task", json!({"subagent_type": "x"}), "allow mode"),
        (
            AutoEdit,
            "task",
            json!({"subagent_type": "x"}),
            r#"ask task ["x"] always ["*"]"#,
        ),
        (Plan, "Task", json!({}), "deny mode"),
        // MCP and unknown tools
        (Auto, "mcp__a__b", json!({}), "allow mode"),
        (
            Ask,
            "mcp__a__b",
            json!({}),
            r#"ask mcp__a__b ["*"] always ["*"]"#,
        ),
        (Plan, "mcp__a__b", json!({}), "deny mode"),
        (ReadOnly, "whatever", json!({}), "deny mode"),
        // unusable input
        (Auto, "Bash", json!({}), "deny invalid"),
        (Auto, "Edit", json!({"content": "x"}), "deny invalid"),
    ];
    for (mode, tool, input, expected) in cases {
        check(&policy, *mode, tool, input.clone(), expected);
    }
}

#[test]
fn rules_and_sources() {
    let policy = policy(
        Some(json!({
            "permission": {
                "bash": {"*": "ask", "git *": "allow", "git push *": "deny"},
                "edit": {"*": "ask", "docs/**": "allow", "secrets/*": "deny"},
                "read": {"~/notes/*": "allow"},
                "external_directory": {"/tmp/*": "allow", "~/notes/*": "allow"},
                "mcp__docs__*": "allow"
            },
            "planModeAllowedTools": ["mcp__search__query", "mcp__search__*"]
        })),
        &[json!({"webfetch": "deny", "edit": {"docs/**": "ask"}})],
    );
    use Mode::*;
    let cases: &[(Mode, &str, Value, &str)] = &[
        (
            Ask,
            "bash",
            json!({"command": "git log"}),
            "allow rule bash:git *",
        ),
        (
            Auto,
            "bash",
            json!({"command": "git push origin main"}),
            "deny rule bash:git push *",
        ),
        // a rule cannot loosen a plan-mode denial
        (
            Plan,
            "bash",
            json!({"command": "git commit -m x"}),
            "deny mode",
        ),
        (Plan, "Edit", json!({"file_path": "docs/a.md"}), "deny mode"),
        // file allows docs/**, the override (a later layer) asks: the override wins
        (
            AutoEdit,
            "Edit",
            json!({"file_path": "docs/a.md"}),
            r#"ask edit ["docs/a.md"] always ["*"]"#,
        ),
        (
            Auto,
            "Edit",
            json!({"file_path": "secrets/k"}),
            "deny rule edit:secrets/*",
        ),
        (
            Auto,
            "webfetch",
            json!({"url": "https://x"}),
            "deny rule webfetch:*",
        ),
        // explicit deny rules hold in auto, and so do explicit ask rules
        (
            Auto,
            "Edit",
            json!({"file_path": "src/a.rs"}),
            r#"ask edit ["src/a.rs"] always ["*"]"#,
        ),
        // ~ expanded at load; external paths match as absolute
        (
            Ask,
            "Read",
            json!({"file_path": "~/notes/todo.md"}),
            "allow rule external_directory:/home/me/notes/*",
        ),
        (
            Ask,
            "Read",
            json!({"file_path": "~/other.md"}),
            r#"ask external_directory ["/home/me/other.md"] always ["/home/me/*"]"#,
        ),
        (
            Ask,
            "Read",
            json!({"file_path": "/tmp/x.log"}),
            "allow rule external_directory:/tmp/*",
        ),
        (
            Ask,
            "Read",
            json!({"file_path": "/var/x.log"}),
            r#"ask external_directory ["/var/x.log"] always ["/var/*"]"#,
        ),
        (
            ReadOnly,
            "Read",
            json!({"file_path": "/var/x.log"}),
            "deny mode external_directory:*",
        ),
        // MCP globs; planModeAllowedTools admits non-writers in plan mode only
        (
            Ask,
            "mcp__docs__search",
            json!({}),
            "allow rule mcp__docs__*:*",
        ),
        (Plan, "mcp__search__query", json!({}), "allow mode"),
        // A wildcard entry is ignored (with a warning): only named tools pass.
        (Plan, "mcp__search__write", json!({}), "deny mode"),
        (ReadOnly, "mcp__search__query", json!({}), "deny mode"),
        // .env defaults
        (
            Ask,
            "Read",
            json!({"file_path": "app/.env"}),
            r#"ask read ["app/.env"] always ["app/.env"]"#,
        ),
        (
            Ask,
            "Read",
            json!({"file_path": ".env.production"}),
            r#"ask read [".env.production"] always [".env.production"]"#,
        ),
        (
            Ask,
            "Read",
            json!({"file_path": ".env.example"}),
            "allow rule read:*.env.example",
        ),
    ];
    for (mode, tool, input, expected) in cases {
        check(&policy, *mode, tool, input.clone(), expected);
    }
}

#[test]
fn grants_answer_questions_only() {
    let policy = policy(
        Some(json!({"permission": {"edit": {"secrets/*": "deny"}}})),
        &[],
    );
    let mut grants = Grants::default();
    grants.add(
        "g1".into(),
        &GrantSpec {
            permission: "edit".into(),
            pattern: GrantPattern::prefixed("", "*"),
            plan_only: false,
            expires_at: None,
        },
    );
    let cases: &[(Mode, Value, &str)] = &[
        (
            Mode::Ask,
            json!({"file_path": "src/a.rs"}),
            "allow grant edit:*",
        ),
        (
            Mode::Ask,
            json!({"file_path": "secrets/key"}),
            "deny rule edit:secrets/*",
        ),
        (Mode::Plan, json!({"file_path": "src/a.rs"}), "deny mode"),
        (
            Mode::ReadOnly,
            json!({"file_path": "src/a.rs"}),
            "deny mode",
        ),
    ];
    for (mode, input, expected) in cases {
        let actual = render(&policy, *mode, "Edit", input.clone(), &grants, 1);
        assert_eq!(actual, *expected, "{mode} {input}");
    }
}

/// A grant with a lifetime covers before its end and not from its end on;
/// without a time to judge it by, it covers nothing.
#[test]
fn a_grant_covers_only_before_it_ends() {
    let policy = policy(None, &[]);
    let mut grants = Grants::default();
    grants.add(
        "g1".into(),
        &GrantSpec {
            expires_at: Some(10_000),
            ..GrantSpec::new("edit", GrantPattern::prefixed("", "*"))
        },
    );
    let input = json!({"file_path": "src/a.rs"})
        .as_object()
        .unwrap()
        .clone();
    let cases = [
        (Some(0), "allow grant"),
        (Some(9_999), "allow grant"),
        (Some(10_000), "ask"),
        (Some(50_000), "ask"),
        (None, "ask"),
    ];
    for (now, expected) in cases {
        let evaluation = policy.evaluate(
            &Call {
                tool: "Edit",
                input: &input,
                cwd: None,
            },
            &Context {
                now,
                ..Context::new(Mode::Ask, &grants)
            },
        );
        let actual = match evaluation.action {
            Action::Allow => format!("allow {:?}", evaluation.source).to_lowercase(),
            action => action.as_str().to_string(),
        };
        assert_eq!(actual, expected, "now {now:?}");
        if evaluation.action == Action::Allow {
            assert_eq!(evaluation.rule.unwrap().expires_at, Some(10_000));
        }
    }
}

#[test]
fn doom_loop_asks_on_the_third_identical_call() {
    let policy = policy(None, &[]);
    let grants = Grants::default();
    let input = json!({"file_path": "a.rs"});
    let cases = [
        (1, "allow mode"),
        (2, "allow mode"),
        (3, r#"ask doom_loop ["Read"] always ["Read"]"#),
        (7, r#"ask doom_loop ["Read"] always ["Read"]"#),
    ];
    for (repeats, expected) in cases {
        assert_eq!(
            render(&policy, Mode::Ask, "Read", input.clone(), &grants, repeats),
            expected,
            "{repeats}"
        );
    }
    // A doom_loop rule overrides the default.
    let relaxed = self::policy(Some(json!({"permission": {"doom_loop": "allow"}})), &[]);
    assert_eq!(
        render(&relaxed, Mode::Ask, "Read", input, &grants, 5),
        "allow rule doom_loop:*"
    );
}

#[test]
fn plan_mode_allowed_tools_never_unlock_writers() {
    let policy = policy(
        Some(json!({
            "planModeAllowedTools": ["bash", "Edit", "task", "deploy", "mcp__docs__search"],
            "tools": {"deploy": {"kind": "execute"}}
        })),
        &[],
    );
    let cases: &[(&str, Value, &str)] = &[
        ("bash", json!({"command": "rm -rf /"}), "deny mode"),
        ("Edit", json!({"file_path": "a"}), "deny mode"),
        ("task", json!({}), "deny mode"),
        ("deploy", json!({}), "deny mode"),
        ("mcp__docs__search", json!({}), "allow mode"),
    ];
    for (tool, input, expected) in cases {
        check(&policy, Mode::Plan, tool, input.clone(), expected);
    }
}

/// Read rules that name files also guard those files in shell commands; a
/// bare `read: *` does not make every word of every command a file read.
#[test]
fn shell_words_meet_file_specific_read_rules() {
    use Mode::*;
    let guarded = policy(
        Some(json!({"permission": {"read": {"secrets/**": "deny"}}})),
        &[],
    );
    let everything_asks = policy(Some(json!({"permission": {"read": {"*": "ask"}}})), &[]);
    let bash = |command: &str| json!({ "command": command });
    let cases: &[(&Policy, Mode, &str, &str)] = &[
        (
            &guarded,
            Plan,
            "cat .env",
            r#"ask read [".env"] always [".env"]"#,
        ),
        (&guarded, Plan, "cat .env.example", "allow mode"),
        (
            &guarded,
            Plan,
            "wc -l < config/.env",
            r#"ask read ["config/.env"] always ["config/.env"]"#,
        ),
        (
            &guarded,
            Auto,
            "cp secrets/a.key /tmp/x",
            "deny rule read:secrets/**",
        ),
        (
            &guarded,
            Plan,
            "grep --file=secrets/p x",
            "deny rule read:secrets/**",
        ),
        (&guarded, Plan, "ls -la src", "allow mode"),
        // The program itself is not a file argument.
        (&guarded, Plan, "secrets/run.sh", "deny mode"),
        (&everything_asks, Plan, "git log -5", "allow mode"),
        (&everything_asks, Plan, "cat src/a.rs", "allow mode"),
    ];
    for (policy, mode, command, expected) in cases {
        check(policy, *mode, "Bash", bash(command), expected);
    }
}

/// A disk whose answer the test changes between calls.
#[derive(Debug, Default)]
struct SwitchableDisk {
    foreign: std::sync::atomic::AtomicBool,
}

impl toolgate_shell::RepoOracle for SwitchableDisk {
    fn repository(&self, _query: &toolgate_shell::RepoQuery) -> toolgate_shell::RepoFact {
        if self.foreign.load(std::sync::atomic::Ordering::SeqCst) {
            toolgate_shell::RepoFact::Other("`evil.git` is a bare repository".to_string())
        } else {
            toolgate_shell::RepoFact::Own
        }
    }
}

#[test]
fn git_verdicts_follow_the_disk_through_the_memo() {
    let grants = Grants::default();
    let mut no_oracle = policy(None, &[]);
    no_oracle.shell.repo_oracle = None;
    assert!(
        render(
            &no_oracle,
            Mode::Plan,
            "Bash",
            json!({"command": "git status"}),
            &grants,
            1
        )
        .starts_with("deny mode"),
        "without an oracle git is not read-only"
    );

    let disk = std::sync::Arc::new(SwitchableDisk::default());
    let mut p = policy(None, &[]);
    p.shell.repo_oracle = Some(disk.clone());
    let plan = |p: &Policy| {
        render(
            p,
            Mode::Plan,
            "Bash",
            json!({"command": "git status"}),
            &grants,
            1,
        )
    };
    // The same text each time: the second and later answers come from the memo.
    assert_eq!(plan(&p), "allow mode");
    assert_eq!(plan(&p), "allow mode");
    disk.foreign
        .store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(plan(&p), "deny mode");
    disk.foreign
        .store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(plan(&p), "allow mode");
}

/// A call prepared under one policy and evaluated by another (the policy a
/// reload put in its place) is prepared again: which shell words a read
/// rule guards is the policy's, so the old preparation would miss the rule.
#[test]
fn a_call_prepared_by_another_policy_is_prepared_again() {
    let before = policy(None, &[]);
    let after = policy(
        Some(json!({"permission": {"read": {"notes/secret.txt": "deny"}}})),
        &[],
    );
    let input = json!({"command": "cat notes/secret.txt"});
    let call = Call {
        tool: "Bash",
        input: input.as_object().unwrap(),
        cwd: None,
    };
    let grants = Grants::default();
    let context = Context::new(Mode::ReadOnly, &grants);
    let judged = |policy: &Policy, by: &Policy| {
        let evaluation = policy.evaluate_prepared(&call, by.prepare(&call), &context);
        format!("{} {:?}", evaluation.action.as_str(), evaluation.source)
    };
    assert_eq!(judged(&before, &before), "allow Mode");
    assert_eq!(judged(&after, &after), "deny Rule");
    assert_eq!(judged(&after, &before), "deny Rule");
    assert_eq!(judged(&before, &after), "allow Mode");
    // A clone is another policy too (it may be changed before it is shared).
    assert_eq!(judged(&after.clone(), &before), "deny Rule");
}
