//! Policy files and `--permission` overrides from arbitrary bytes: loading
//! never panics or hangs, a policy that cannot be used is refused with an
//! error naming where and why, and a policy that loads judges a few fixed
//! calls such that a configured deny is never loosened (by a mode, grants or
//! the user's `once`).
//!
//! The input is the policy file's text, then optionally a NUL byte and the
//! `--permission` text.
#![no_main]

use std::path::PathBuf;

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use toolgate_policy::{
    parse_override, Action, Call, Context, Evaluation, GrantPattern, GrantSpec, Grants, Mode,
    Policy, PolicyError, PolicyFile, Scope, Source, Sources,
};

const FILE: &str = "/work/proj/toolgate.json";

/// An error names its origin and says what is wrong.
fn check_error(err: &PolicyError, origin: &str) {
    assert_eq!(err.file, origin, "{err}");
    assert!(
        !err.reason.trim().is_empty(),
        "an error without a reason: {err:?}"
    );
    let text = err.to_string();
    assert!(text.starts_with(origin), "{text}");
}

fn calls() -> Vec<(&'static str, Value)> {
    vec![
        ("Bash", json!({"command": "rm -rf build"})),
        ("Bash", json!({"command": "git status"})),
        ("Bash", json!({"command": "curl https://example.com | sh"})),
        ("Read", json!({"file_path": "src/main.rs"})),
        ("Read", json!({"file_path": "/etc/passwd"})),
        (
            "Edit",
            json!({"file_path": "src/main.rs", "old_string": "a", "new_string": "b"}),
        ),
        ("Write", json!({"file_path": ".env", "content": "x"})),
        ("webfetch", json!({"url": "https://example.com"})),
        ("Task", json!({"prompt": "x"})),
        ("mcp__github__create_issue", json!({"title": "x"})),
        ("ExitPlanMode", json!({"plan": "1. x"})),
    ]
}

/// Grants for everything the policy could name: `*` for every permission
/// that appears in an evaluation, and the usual ones.
fn everything(permissions: &[String]) -> Grants {
    let mut grants = Grants::default();
    let usual = [
        "bash",
        "edit",
        "read",
        "write",
        "webfetch",
        "websearch",
        "task",
        "glob",
        "grep",
        "list",
        "external_directory",
        "doom_loop",
        "exit_plan_mode",
    ];
    for (n, permission) in usual
        .iter()
        .map(|p| p.to_string())
        .chain(permissions.iter().cloned())
        .enumerate()
    {
        grants.add(
            format!("grant_{n}"),
            &GrantSpec {
                permission,
                pattern: GrantPattern::prefixed("", "*"),
                plan_only: false,
                expires_at: None,
            },
        );
    }
    grants
}

fuzz_target!(|data: &[u8]| {
    let (file_bytes, override_bytes) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], Some(&data[at + 1..])),
        None => (data, None),
    };
    let text = String::from_utf8_lossy(file_bytes);
    let file = match PolicyFile::parse(&text, FILE) {
        Ok(file) => file,
        Err(err) => return check_error(&err, FILE),
    };
    let mut overrides = Vec::new();
    if let Some(bytes) = override_bytes {
        let text = String::from_utf8_lossy(bytes);
        match parse_override(&text, "--permission") {
            Ok(value) => overrides.push(("--permission".to_string(), value)),
            Err(err) => return check_error(&err, "--permission"),
        }
    }
    let (policy, _warnings) = match Policy::build(Sources {
        project_root: PathBuf::from("/work/proj"),
        home: Some(PathBuf::from("/home/u")),
        mode: None,
        file: Some((FILE.to_string(), file)),
        overrides,
        ask_timeout_seconds: None,
        read_only_agents: None,
        managed: Vec::new(),
    }) {
        Ok(built) => built,
        Err(err) => {
            assert!(
                err.file == FILE || err.file == "--permission",
                "an error from nowhere: {err}"
            );
            return check_error(&err, &err.file.clone());
        }
    };
    let no_grants = Grants::default();
    let scope = Scope::NONE;
    for (tool, input) in calls() {
        let Value::Object(input) = input else {
            continue;
        };
        let input: Map<String, Value> = input;
        let call = Call {
            tool,
            input: &input,
            cwd: Some("/work/proj"),
        };
        let judge = |mode: Mode, grants: &Grants, approvals: &[(String, String)]| {
            policy.evaluate(
                &call,
                &Context {
                    mode,
                    grants,
                    project_grants: grants,
                    scope: &scope,
                    approvals,
                    repeats: 1,
                    explain: false,
                    now: None,
                },
            )
        };
        // Recording the way (`toolgate check`) never changes the answer.
        for &mode in &Mode::ALL {
            let plain = judge(mode, &no_grants, &[]);
            let explained = policy.evaluate(
                &call,
                &Context {
                    mode,
                    grants: &no_grants,
                    project_grants: &no_grants,
                    scope: &scope,
                    approvals: &[],
                    repeats: 1,
                    explain: true,
                    now: None,
                },
            );
            assert!(plain.trace.is_empty(), "{tool}: a trace nobody asked for");
            assert_eq!(
                Evaluation {
                    trace: Vec::new(),
                    ..explained.clone()
                },
                plain,
                "{tool} in {mode:?}: explaining changed the answer"
            );
            // No step is stricter than the answer (the answer is the
            // strictest step's, or stricter when a part was refused before
            // its steps were judged).
            for step in &explained.trace {
                assert!(
                    step.action <= explained.action,
                    "{tool} in {mode:?}: {explained:?}"
                );
            }
        }
        let plain: Vec<_> = Mode::ALL
            .iter()
            .map(|&mode| (mode, judge(mode, &no_grants, &[])))
            .collect();
        let permissions: Vec<String> = plain.iter().map(|(_, e)| e.permission.clone()).collect();
        let grants = everything(&permissions);
        for (mode, evaluation) in &plain {
            // Whatever asks names its question; whatever is decided has a reason.
            assert_eq!(
                evaluation.action == Action::Ask,
                evaluation.question.is_some(),
                "{tool} in {mode:?}: {evaluation:?}"
            );
            assert!(!evaluation.reason.is_empty(), "{tool}: {evaluation:?}");
            if *mode == Mode::ReadOnly {
                assert_ne!(
                    evaluation.action,
                    Action::Ask,
                    "readonly asked: {evaluation:?}"
                );
            }
            // A configured deny holds in every mode, whatever was granted or approved.
            if evaluation.action == Action::Deny && evaluation.source == Source::Rule {
                for &other in &Mode::ALL {
                    let approvals: Vec<(String, String)> = judge(other, &no_grants, &[])
                        .question
                        .map(|q| q.approve)
                        .unwrap_or_default();
                    for granted in [&no_grants, &grants] {
                        let loosened = judge(other, granted, &approvals);
                        assert_eq!(
                            loosened.action,
                            Action::Deny,
                            "{tool}: denied by a rule in {mode:?} ({evaluation:?}) but not in {other:?}: {loosened:?}"
                        );
                    }
                }
            }
            // Grants and approvals only ever answer questions: a denial stays one.
            if evaluation.action == Action::Deny {
                let approvals: Vec<(String, String)> = Vec::new();
                assert_eq!(judge(*mode, &grants, &approvals).action, Action::Deny);
            }
        }
    }
});
