//! The Codex app-server bridge (`examples/codex_appserver_bridge.rs`) against
//! a stand-in app-server that replays approval requests in the format of
//! Codex 0.169.0's app-server protocol (`item/commandExecution/requestApproval`
//! with `command` and `cwd`, `item/fileChange/requestApproval`; answered with
//! `{"decision":"accept"|"decline"}`; see ../shared/agents/codex_appserver_client.py),
//! recording what the bridge answered.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The example binary, built by `cargo test` next to the test binaries.
fn bridge() -> PathBuf {
    let toolgate = Path::new(env!("CARGO_BIN_EXE_toolgate"));
    let path = toolgate
        .parent()
        .unwrap()
        .join("examples")
        .join("codex_appserver_bridge");
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds the examples",
        path.display()
    );
    path
}

const REQUESTS: &[&str] = &[
    r#"{"method":"thread/started","params":{"thread":{"id":"t1"}}}"#,
    r#"{"id":1,"method":"item/commandExecution/requestApproval","params":{"threadId":"t1","turnId":"u1","itemId":"i1","command":"ls -la","cwd":"PROJECT"}}"#,
    r#"{"id":2,"method":"item/commandExecution/requestApproval","params":{"threadId":"t1","turnId":"u1","itemId":"i2","command":["rm","-rf","build"],"cwd":"PROJECT"}}"#,
    r#"{"id":3,"method":"item/fileChange/requestApproval","params":{"threadId":"t1","turnId":"u1","itemId":"i3","changes":[{"path":"PROJECT/src/a.rs","kind":"update"}]}}"#,
    r#"{"id":4,"method":"item/fileChange/requestApproval","params":{"threadId":"t1","turnId":"u1","itemId":"i4"}}"#,
];

/// Run the bridge in `mode` over the stand-in; (what the app-server was
/// answered, by request id; what reached the client).
fn run(name: &str, mode: &str) -> (Vec<(u64, String)>, String) {
    let dir = std::env::temp_dir().join(format!("toolgate-bridge-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let project = dir.to_string_lossy().into_owned();
    let answers = dir.join("answers.jsonl");
    let mut script = String::new();
    for request in REQUESTS {
        script.push_str(&format!(
            "echo '{}'\n",
            request.replace("PROJECT", &project)
        ));
        if request.starts_with("{\"id\"") {
            script.push_str(&format!(
                "read -r answer; echo \"$answer\" >> '{}'\n",
                answers.display()
            ));
        }
    }
    std::fs::write(dir.join("app-server.sh"), script).unwrap();
    let out = Command::new(bridge())
        .args([
            "--toolgate",
            env!("CARGO_BIN_EXE_toolgate"),
            "--mode",
            mode,
            "--",
            "sh",
        ])
        .arg(dir.join("app-server.sh"))
        .current_dir(&dir)
        .env_remove("TOOLGATE_SOCKET")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answered = std::fs::read_to_string(&answers)
        .unwrap()
        .lines()
        .map(|line| {
            let answer: Value = serde_json::from_str(line).unwrap();
            (
                answer["id"].as_u64().unwrap(),
                answer["result"]["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    (answered, String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn plan_mode_accepts_a_read_and_declines_the_rest() {
    let (answered, passed) = run("plan", "plan");
    assert_eq!(
        answered,
        vec![
            (1, "accept".to_string()),
            (2, "decline".to_string()),
            (3, "decline".to_string()),
            (4, "decline".to_string()),
        ]
    );
    // Everything else passes through to the client; the approvals do not.
    assert!(passed.contains("thread/started"), "{passed}");
    assert!(!passed.contains("requestApproval"), "{passed}");
}

#[test]
fn auto_edit_accepts_a_file_change_but_not_an_unseen_one_or_a_removal() {
    let (answered, _) = run("auto-edit", "auto_edit");
    assert_eq!(
        answered,
        vec![
            (1, "accept".to_string()),
            // Asked in auto_edit, and nobody can be asked here: declined.
            (2, "decline".to_string()),
            (3, "accept".to_string()),
            // A change that names no file cannot be judged: declined.
            (4, "decline".to_string()),
        ]
    );
}
