//! Shell globs judged by what they match on the real disk, through the real
//! binary in readonly mode: a project with `src/a.rs`, `src/b.rs` and `.env`.
//! `wc -l src/*.rs` reads only sources (allowed); `cat .en?` and `cat *`
//! reach `.env` (`*` as under `shopt -s dotglob`, which the user's shell may
//! set); `cat src/x.env.*` is refused whether a `src/x.env.rs` exists (a real
//! match of `read: *.env.*`) or not (the literal word matches that rule).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use serde_json::{json, Value};

use crate::support;

fn decisions(root: &std::path::Path, mode: &str, calls: &[(&str, &str)]) -> Vec<(String, Value)> {
    let args: Vec<String> = vec![
        "--mode".into(),
        mode.into(),
        "--project-root".into(),
        root.to_string_lossy().into_owned(),
    ];
    let mut broker = support::Broker::start(root, &args, &[]);
    for (id, command) in calls {
        broker.send(
            &json!({"type": "tool_call", "callID": id, "tool": "Bash",
                    "input": {"command": command}})
            .to_string(),
        );
    }
    let (_, lines, stderr) = broker.finish();
    let frames: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|f| f["type"] == "decision")
        .collect();
    calls
        .iter()
        .map(|(id, _)| {
            let frame = frames
                .iter()
                .find(|d| d["callID"] == *id)
                .unwrap_or_else(|| panic!("no decision for {id}; stderr: {stderr}"));
            (id.to_string(), frame.clone())
        })
        .collect()
}

#[test]
fn globs_are_judged_by_their_matches_on_the_disk() {
    let root = support::project_dir("glob-disk");
    for file in [
        "src/a.rs",
        "src/b.rs",
        ".env",
        "crates/one/Cargo.toml",
        "sub/.env",
    ] {
        let path = root.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "x\n").unwrap();
    }
    let calls: &[(&str, &str, &str, &str)] = &[
        ("rs", "wc -l src/*.rs", "allow", ""),
        ("toml", "cat crates/*/Cargo.toml", "allow", ""),
        ("some", "head -n 3 src/[ab].rs src/?.rs", "allow", ""),
        ("py", "cat src/*.py", "allow", ""),
        (
            "env1",
            "cat .en?",
            "deny",
            "`read: *.env` asks before `.env`",
        ),
        ("env2", "cat *", "deny", "`read: *.env` asks before `.env`"),
        (
            "env3",
            "grep -n x .e*",
            "deny",
            "`read: *.env` asks before `.env`",
        ),
        (
            "none",
            "cat src/x.env.*",
            "deny",
            "`read: *.env.*` asks before `src/x.env.*`",
        ),
    ];
    let check = |calls: &[(&str, &str, &str, &str)]| {
        let plain: Vec<(&str, &str)> = calls.iter().map(|(id, c, _, _)| (*id, *c)).collect();
        let got = decisions(&root, "readonly", &plain);
        let mut bad = Vec::new();
        for ((id, command, want, reason), (_, frame)) in calls.iter().zip(got) {
            let said = frame["reason"].as_str().unwrap_or("");
            if frame["decision"] != *want || !said.contains(reason) {
                bad.push(format!("{id} {command:?}: {frame}"));
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    };
    check(calls);
    // With a real `src/x.env.rs`, the sources glob reaches it too.
    std::fs::write(root.join("src/x.env.rs"), "x\n").unwrap();
    check(&[
        (
            "real",
            "cat src/x.env.*",
            "deny",
            "`read: *.env.*` asks before `src/x.env.rs`",
        ),
        (
            "rs",
            "wc -l src/*.rs",
            "deny",
            "`read: *.env.*` asks before `src/x.env.rs`",
        ),
        ("toml", "cat crates/*/Cargo.toml", "allow", ""),
    ]);
    let _ = std::fs::remove_dir_all(&root);
}
