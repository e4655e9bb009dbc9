//! The rule layers: built-in defaults, the policy file, `TOOLGATE_PERMISSION`
//! and `--permission`, one ordered list in which the last match decides; a
//! deny that decides is final; `auto` lifts only its own questions and the
//! built-in defaults' (not the doom-loop guard's).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::PathBuf;

use serde_json::{json, Value};
use toolgate_policy::{
    Action, Call, Context, GrantPattern, GrantSpec, Grants, Mode, Policy, PolicyFile, Sources,
};

/// One row: the layers (`None` when absent), the session, the call, and the
/// answer rendered as `ACTION SOURCE [PERMISSION:PATTERN@ORIGIN]`.
struct Row {
    file: Option<Value>,
    env: Option<Value>,
    flag: Option<Value>,
    mode: Mode,
    /// A session grant `(permission, pattern)`.
    grant: Option<(&'static str, &'static str)>,
    repeats: u32,
    tool: &'static str,
    input: Value,
    expected: &'static str,
}

fn row(
    file: Option<Value>,
    env: Option<Value>,
    flag: Option<Value>,
    mode: Mode,
    tool: &'static str,
    input: Value,
    expected: &'static str,
) -> Row {
    Row {
        file,
        env,
        flag,
        mode,
        grant: None,
        repeats: 1,
        tool,
        input,
        expected,
    }
}

fn run(row: &Row) -> String {
    let file = row.file.as_ref().map(|value| {
        (
            "policy.json".to_string(),
            PolicyFile::parse(&value.to_string(), "policy.json").unwrap(),
        )
    });
    let mut overrides = Vec::new();
    if let Some(env) = &row.env {
        overrides.push(("TOOLGATE_PERMISSION".to_string(), env.clone()));
    }
    if let Some(flag) = &row.flag {
        overrides.push(("--permission".to_string(), flag.clone()));
    }
    let (policy, _) = Policy::build(Sources {
        project_root: PathBuf::from("/work/project"),
        home: Some(PathBuf::from("/home/me")),
        file,
        overrides,
        ..Sources::default()
    })
    .unwrap();
    let mut grants = Grants::default();
    if let Some((permission, pattern)) = row.grant {
        let pattern = match pattern.strip_suffix('*') {
            Some(prefix) => GrantPattern::prefixed(prefix, "*"),
            None => GrantPattern::exact(pattern),
        };
        grants.add("grant_1".to_string(), &GrantSpec::new(permission, pattern));
    }
    let input = row.input.as_object().unwrap().clone();
    let evaluation = policy.evaluate(
        &Call {
            tool: row.tool,
            input: &input,
            cwd: None,
        },
        &Context {
            repeats: row.repeats,
            ..Context::new(row.mode, &grants)
        },
    );
    assert_eq!(
        evaluation.action == Action::Ask,
        evaluation.question.is_some()
    );
    let source = format!("{:?}", evaluation.source).to_lowercase();
    let rule = evaluation
        .rule
        .map(|rule| format!(" {}:{}@{}", rule.permission, rule.pattern, rule.origin))
        .unwrap_or_default();
    format!("{} {source}{rule}", evaluation.action.as_str())
}

#[test]
fn the_last_matching_layer_decides() {
    use Mode::*;
    let edit = |path: &str| json!({"file_path": path, "old_string": "a", "new_string": "b"});
    let bash = |command: &str| json!({ "command": command });
    let read = |path: &str| json!({ "file_path": path });
    let rows = vec![
        // The override loosens the built-in defaults.
        row(
            None,
            None,
            Some(json!({"external_directory": {"*": "ask", "/tmp/shared/*": "allow"}})),
            Ask,
            "Read",
            read("/tmp/shared/x"),
            "allow rule external_directory:/tmp/shared/*@--permission",
        ),
        row(
            None,
            None,
            Some(json!({"external_directory": {"*": "ask", "/tmp/shared/*": "allow"}})),
            Ask,
            "Read",
            read("/tmp/other/x"),
            "ask rule external_directory:*@--permission",
        ),
        row(
            None,
            None,
            Some(json!({"read": {"*.env": "allow"}})),
            Ask,
            "Read",
            read(".env"),
            "allow rule read:*.env@--permission",
        ),
        // ... and its shell words: `cat .env` is a read of `.env`.
        row(
            None,
            None,
            Some(json!({"read": {"*.env": "allow"}})),
            Ask,
            "Bash",
            bash("cat .env"),
            "allow mode",
        ),
        row(
            None,
            None,
            None,
            Ask,
            "Bash",
            bash("cat .env"),
            "ask rule read:*.env@built-in",
        ),
        // `.env.local` is still guarded by the built-in `*.env.*`.
        row(
            None,
            None,
            Some(json!({"read": {"*.env": "allow"}})),
            Ask,
            "Read",
            read(".env.local"),
            "ask rule read:*.env.*@built-in",
        ),
        // The override loosens the policy file, both ways round.
        row(
            Some(json!({"permission": {"bash": {"*": "ask", "git push *": "deny"}}})),
            None,
            Some(json!({"bash": {"git push *": "allow"}})),
            Ask,
            "Bash",
            bash("git push origin main"),
            "allow rule bash:git push *@--permission",
        ),
        row(
            Some(json!({"permission": {"bash": {"*": "allow"}}})),
            None,
            Some(json!({"bash": {"git push *": "deny"}})),
            Auto,
            "Bash",
            bash("git push origin main"),
            "deny rule bash:git push *@--permission",
        ),
        // A wider override pattern after the file's narrower one wins too.
        row(
            Some(json!({"permission": {"bash": {"git push *": "deny"}}})),
            None,
            Some(json!({"bash": "allow"})),
            Ask,
            "Bash",
            bash("git push origin main"),
            "allow rule bash:*@--permission",
        ),
        // ... and a command whose program cannot be known meets only the
        // rules that can still decide (the file's deny is behind the `*`).
        row(
            Some(json!({"permission": {"bash": {"rm *": "deny"}}})),
            None,
            Some(json!({"bash": "allow"})),
            Ask,
            "Bash",
            bash("echo rm -rf build | sh"),
            "allow rule bash:*@--permission",
        ),
        row(
            Some(json!({"permission": {"bash": {"rm *": "deny"}}})),
            None,
            None,
            Auto,
            "Bash",
            bash("echo rm -rf build | sh"),
            "deny rule bash:rm *@policy.json",
        ),
        // An inner command still only tightens: the override's allow of
        // `sudo *` does not lift the deny of what sudo runs.
        row(
            Some(json!({"permission": {"bash": {"rm *": "deny"}}})),
            None,
            Some(json!({"bash": {"sudo *": "allow"}})),
            Auto,
            "Bash",
            bash("sudo rm -rf /"),
            "deny rule bash:rm *@policy.json",
        ),
        // TOOLGATE_PERMISSION, then --permission: each its own layer, each
        // rule reported with its own origin.
        row(
            Some(json!({"permission": {"edit": {"*": "allow", "secrets/*": "deny"}}})),
            Some(json!({"edit": {"*": "ask"}, "webfetch": "deny"})),
            Some(json!({"edit": {"src/*": "allow"}})),
            Ask,
            "Edit",
            edit("docs/a.md"),
            "ask rule edit:*@TOOLGATE_PERMISSION",
        ),
        row(
            Some(json!({"permission": {"edit": {"*": "allow", "secrets/*": "deny"}}})),
            Some(json!({"edit": {"*": "ask"}, "webfetch": "deny"})),
            Some(json!({"edit": {"src/*": "allow"}})),
            Ask,
            "Edit",
            edit("src/a.rs"),
            "allow rule edit:src/*@--permission",
        ),
        row(
            Some(json!({"permission": {"edit": {"*": "allow", "secrets/*": "deny"}}})),
            Some(json!({"edit": {"*": "ask"}, "webfetch": "deny"})),
            Some(json!({"edit": {"src/*": "allow"}})),
            Ask,
            "webfetch",
            json!({"url": "https://x.y"}),
            "deny rule webfetch:*@TOOLGATE_PERMISSION",
        ),
        row(
            None,
            Some(json!({"webfetch": "deny"})),
            Some(json!({"webfetch": "allow"})),
            Ask,
            "webfetch",
            json!({"url": "https://x.y"}),
            "allow rule webfetch:*@--permission",
        ),
        // Wildcard permission keys work across layers.
        row(
            Some(json!({"permission": {"mcp__github__*": "deny"}})),
            None,
            Some(json!({"mcp__github__get_*": "allow"})),
            Ask,
            "mcp__github__get_issue",
            json!({}),
            "allow rule mcp__github__get_*:*@--permission",
        ),
        row(
            Some(json!({"permission": {"mcp__github__*": "deny"}})),
            None,
            Some(json!({"mcp__github__get_*": "allow"})),
            Auto,
            "mcp__github__create_issue",
            json!({}),
            "deny rule mcp__github__*:*@policy.json",
        ),
        row(
            Some(json!({"permission": {"*": "deny"}})),
            None,
            Some(json!({"*": "ask", "read": "allow"})),
            Ask,
            "Read",
            read("src/a.rs"),
            "allow rule read:*@--permission",
        ),
        // A deny that decides is final: no grant lifts it.
        Row {
            grant: Some(("edit", "*")),
            ..row(
                Some(json!({"permission": {"edit": {"*": "ask", "secrets/*": "deny"}}})),
                None,
                None,
                Auto,
                "Edit",
                edit("secrets/key"),
                "deny rule edit:secrets/*@policy.json",
            )
        },
        // Auto lifts the mode's questions and the built-in defaults' (the
        // rule that asked stays in the provenance) ...
        row(
            None,
            None,
            None,
            Auto,
            "Read",
            read(".env"),
            "allow mode read:*.env@built-in",
        ),
        row(
            None,
            None,
            None,
            Auto,
            "Read",
            read("/etc/hosts"),
            "allow mode external_directory:*@built-in",
        ),
        // ... not the user's ...
        row(
            None,
            None,
            Some(json!({"bash": {"*": "ask"}})),
            Auto,
            "Bash",
            bash("npm publish"),
            "ask rule bash:*@--permission",
        ),
        row(
            Some(json!({"permission": {"read": {"*.env": "ask"}}})),
            None,
            None,
            Auto,
            "Read",
            read(".env"),
            "ask rule read:*.env@policy.json",
        ),
        // (a user's ask reached through a shell word binds as well)
        row(
            Some(json!({"permission": {"read": {"secrets/**": "ask"}}})),
            None,
            None,
            Auto,
            "Bash",
            bash("cat secrets/*"),
            "ask rule read:secrets/**@policy.json",
        ),
        // ... nor the doom-loop guard.
        Row {
            repeats: 3,
            ..row(
                None,
                None,
                None,
                Auto,
                "Read",
                read("src/a.rs"),
                "ask rule doom_loop:*@built-in",
            )
        },
        Row {
            repeats: 2,
            ..row(
                None,
                None,
                None,
                Auto,
                "Read",
                read("src/a.rs"),
                "allow mode",
            )
        },
        // A grant still answers such a question in auto ...
        Row {
            grant: Some(("bash", "npm *")),
            ..row(
                None,
                None,
                Some(json!({"bash": {"*": "ask"}})),
                Auto,
                "Bash",
                bash("npm publish"),
                "allow grant bash:npm *@grant",
            )
        },
        // ... and readonly still denies it.
        row(
            None,
            None,
            Some(json!({"read": {"*": "ask"}})),
            ReadOnly,
            "Read",
            read("src/a.rs"),
            "deny mode read:*@--permission",
        ),
        // auto_edit lifts only its own edit questions: an edit ask rule asks.
        row(
            None,
            None,
            Some(json!({"edit": {"*.lock": "ask"}})),
            AutoEdit,
            "Edit",
            edit("Cargo.lock"),
            "ask rule edit:*.lock@--permission",
        ),
        row(
            None,
            None,
            Some(json!({"edit": {"*.lock": "ask"}})),
            AutoEdit,
            "Edit",
            edit("src/a.rs"),
            "allow mode",
        ),
    ];
    let mut failures = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let actual = run(row);
        if actual != row.expected {
            failures.push(format!(
                "row {i} ({} {}): expected `{}`, got `{actual}`",
                row.tool, row.input, row.expected
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A policy file named like the built-in layer is still the user's: its ask
/// holds in auto.
#[test]
fn a_file_named_built_in_is_not_built_in() {
    let file = PolicyFile::parse(r#"{"permission":{"bash":"ask"}}"#, "built-in").unwrap();
    let (policy, _) = Policy::build(Sources {
        project_root: PathBuf::from("/work/project"),
        file: Some(("built-in".to_string(), file)),
        ..Sources::default()
    })
    .unwrap();
    let input = json!({"command": "npm publish"});
    let grants = Grants::default();
    let evaluation = policy.evaluate(
        &Call {
            tool: "Bash",
            input: input.as_object().unwrap(),
            cwd: None,
        },
        &Context::new(Mode::Auto, &grants),
    );
    assert_eq!(evaluation.action, Action::Ask);
}
