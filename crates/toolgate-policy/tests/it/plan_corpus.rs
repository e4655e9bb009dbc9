//! The shell corpus through the whole policy, in `plan` and `readonly` mode:
//! every command is sent as a `Bash` call and the decision counted. A command
//! labelled "not read-only" that is allowed is a false allow, and fails the
//! test; read-only commands that are not allowed are listed with the reason,
//! so the closing figures (`cargo test -p toolgate-policy --test it
//! plan_corpus:: -- --nocapture`) say what everyday research still costs a question.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests may panic and report

#[path = "../../../toolgate-shell/tests/it/common.rs"]
mod shell_corpus;

use std::path::PathBuf;

use serde_json::json;
use toolgate_policy::{Action, Call, Context, Grants, Mode, Policy, Sources};

/// The policy the corpus is labelled for: root `/work/proj`, built-in defaults only.
fn policy() -> Policy {
    let mut policy = Policy::build(Sources {
        project_root: PathBuf::from("/work/proj"),
        home: Some(PathBuf::from("/home/me")),
        ..Sources::default()
    })
    .unwrap()
    .0;
    policy.shell = toolgate_shell::Options {
        project_root: PathBuf::from("/work/proj"),
        ..shell_corpus::options()
    };
    policy
}

#[derive(Default)]
struct Counts {
    allow: usize,
    ask: usize,
    deny: usize,
}

fn run(mode: Mode) -> (Counts, Counts, Vec<String>, Vec<String>) {
    let policy = policy();
    let grants = Grants::default();
    let (mut read_only, mut writers) = (Counts::default(), Counts::default());
    let (mut false_allows, mut refused) = (Vec::new(), Vec::new());
    for case in shell_corpus::corpus() {
        let input = json!({ "command": case.command });
        let evaluation = policy.evaluate(
            &Call {
                tool: "Bash",
                input: input.as_object().unwrap(),
                cwd: None,
            },
            &Context::new(mode, &grants),
        );
        let counts = if case.label == "no" {
            &mut writers
        } else {
            &mut read_only
        };
        match evaluation.action {
            Action::Allow => counts.allow += 1,
            Action::Ask => counts.ask += 1,
            Action::Deny => counts.deny += 1,
        }
        let at = format!("{}:{} {:?}", case.file, case.line, case.command);
        if case.label == "no" && evaluation.action == Action::Allow {
            false_allows.push(at);
        } else if case.label == "ro" && evaluation.action != Action::Allow {
            refused.push(format!("{at}: {}", evaluation.reason));
        }
    }
    (read_only, writers, false_allows, refused)
}

fn report(mode: Mode) {
    let (read_only, writers, false_allows, refused) = run(mode);
    println!(
        "{mode}: read-only commands: {} allowed, {} asked, {} denied; \
         not read-only: {} allowed (false allows), {} asked, {} denied",
        read_only.allow, read_only.ask, read_only.deny, writers.allow, writers.ask, writers.deny
    );
    for line in &refused {
        println!("  not allowed in {mode}: {line}");
    }
    assert!(
        false_allows.is_empty(),
        "{mode} mode allows commands labelled not read-only:\n{}",
        false_allows.join("\n")
    );
}

#[test]
fn plan_mode_never_allows_a_writer() {
    report(Mode::Plan);
}

#[test]
fn readonly_mode_never_allows_a_writer() {
    report(Mode::ReadOnly);
}
