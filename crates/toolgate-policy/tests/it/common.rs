//! What the tests of shell words share: a policy at `/work/project` and one
//! line rendering a `Bash` call's evaluation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test support

use std::path::PathBuf;

use serde_json::{json, Value};
use toolgate_policy::{Action, Call, Context, Grants, Mode, Policy, PolicyFile, Sources};

/// The project root of these tests.
pub const ROOT: &str = "/work/project";

/// A policy at [`ROOT`] (home `/home/me`) with an optional policy file.
pub fn policy(file: Option<Value>) -> Policy {
    let file = file.map(|value| {
        (
            "policy.json".to_string(),
            PolicyFile::parse(&value.to_string(), "policy.json").unwrap(),
        )
    });
    Policy::build(Sources {
        project_root: PathBuf::from(ROOT),
        home: Some(PathBuf::from("/home/me")),
        file,
        ..Sources::default()
    })
    .unwrap()
    .0
}

/// `allow`, `deny read:secrets/**` (the deciding rule), `ask read [".en?"]`.
pub fn render(policy: &Policy, mode: Mode, command: &str) -> String {
    let input = json!({ "command": command });
    let input = input.as_object().unwrap();
    let grants = Grants::default();
    let evaluation = policy.evaluate(
        &Call {
            tool: "Bash",
            input,
            cwd: None,
        },
        &Context::new(mode, &grants),
    );
    match evaluation.action {
        Action::Ask => {
            let question = evaluation.question.unwrap();
            format!("ask {} {:?}", question.permission, question.patterns)
        }
        action => {
            let rule = evaluation
                .rule
                .map(|rule| format!(" {}:{}", rule.permission, rule.pattern))
                .unwrap_or_default();
            format!("{}{rule}", action.as_str())
        }
    }
}
