//! Through the broker: for random chains of sub-sessions (random modes and
//! narrowings, started with `session_start`) and random calls, a child never
//! allows what any of its ancestors denies, and never answers in a looser
//! mode than any ancestor.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use proptest::prelude::*;
use serde_json::{json, Value};
use toolgate::clock::ManualClock;
use toolgate_policy::Mode;
use toolgate_protocol::ServerFrame;

use crate::support;

fn scope() -> impl Strategy<Value = Option<Value>> {
    let list = |pool: &'static [&'static str]| {
        proptest::option::weighted(0.5, proptest::sample::subsequence(pool, 0..=3))
    };
    proptest::option::weighted(
        0.8,
        (
            list(&["Read", "bash", "Edit", "Grep", "mcp__*", "write"]),
            list(&["webfetch", "Edit", "Bash"]),
            list(&["src/**", "docs/**", "*.md"]),
            list(&["git *", "cargo *", "ls *", "rm *"]),
        )
            .prop_map(|(allowed, denied, files, commands)| {
                let mut scope = serde_json::Map::new();
                for (key, list) in [
                    ("allowedTools", allowed),
                    ("deniedTools", denied),
                    ("filePatterns", files),
                    ("commandPatterns", commands),
                ] {
                    if let Some(list) = list {
                        scope.insert(key.to_string(), json!(list));
                    }
                }
                Value::Object(scope)
            }),
    )
}

fn mode() -> impl Strategy<Value = Option<&'static str>> {
    proptest::option::of(proptest::sample::select(
        &["auto", "auto_edit", "ask", "plan", "readonly"][..],
    ))
}

fn call() -> impl Strategy<Value = (&'static str, Value)> {
    prop_oneof![
        proptest::sample::select(&["src/a.rs", "docs/x.md", "README.md", "/etc/hosts"][..])
            .prop_map(|path| ("Read", json!({"file_path": path}))),
        proptest::sample::select(&["src/a.rs", "docs/x.md", "README.md"][..])
            .prop_map(|path| ("Edit", json!({"file_path": path}))),
        proptest::sample::select(
            &[
                "git status",
                "git push",
                "cargo test",
                "ls -la",
                "rm -rf build",
                "git log && rm x"
            ][..]
        )
        .prop_map(|command| ("Bash", json!({"command": command}))),
        Just(("WebFetch", json!({"url": "https://docs.rs"}))),
        Just(("mcp__docs__search", json!({"query": "x"}))),
        Just(("TodoWrite", json!({"todos": []}))),
    ]
}

/// The decision a session gets for the call in a broker that ran `setup`:
/// `allow`, `deny` or `ask` (a permission request).
fn answer(setup: &[String], session: &str, tool: &str, input: &Value) -> String {
    let mut broker = support::in_process(ManualClock::new(), 0);
    let mut out: Vec<ServerFrame> = Vec::new();
    for (number, line) in setup.iter().enumerate() {
        support::feed_line(&mut broker, line.as_bytes(), number as u64 + 1, &mut out);
    }
    out.clear();
    let frame = json!({"type": "tool_call", "sessionID": session, "callID": "probe", "tool": tool, "input": input});
    support::feed_line(&mut broker, frame.to_string().as_bytes(), 1000, &mut out);
    let frames: Vec<Value> = out
        .iter()
        .map(|frame| serde_json::to_value(frame).unwrap())
        .collect();
    match frames.iter().find(|f| f["callID"] == "probe") {
        Some(f) if f["type"] == "decision" => f["decision"].as_str().unwrap().to_string(),
        Some(f) if f["type"] == "permission_request" => "ask".to_string(),
        other => panic!("no answer for the probe: {other:?} in {frames:?}"),
    }
}

/// The effective mode the broker reports for a session.
fn reported_mode(setup: &[String], session: &str) -> Mode {
    let mut broker = support::in_process(ManualClock::new(), 0);
    let mut out: Vec<ServerFrame> = Vec::new();
    for (number, line) in setup.iter().enumerate() {
        support::feed_line(&mut broker, line.as_bytes(), number as u64 + 1, &mut out);
    }
    out.clear();
    let frame = json!({"type": "get_reminder", "sessionID": session});
    support::feed_line(&mut broker, frame.to_string().as_bytes(), 1000, &mut out);
    let frame = serde_json::to_value(&out[0]).unwrap();
    frame["mode"].as_str().unwrap().parse().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_child_never_allows_what_an_ancestor_denies(
        chain in proptest::collection::vec((mode(), scope()), 1..=4),
        later in proptest::collection::vec((0usize..4, mode()), 0..3),
        (tool, input) in call(),
    ) {
        // s0 is the root; each s{i} is started under s{i-1}.
        let mut setup: Vec<String> = Vec::new();
        for (i, (mode, scope)) in chain.iter().enumerate() {
            let mut start = json!({"type": "session_start", "sessionID": format!("s{i}")});
            if i > 0 {
                start["parentID"] = json!(format!("s{}", i - 1));
            }
            if let Some(mode) = mode {
                start["mode"] = json!(mode);
            }
            if let Some(scope) = scope {
                start["permissions"] = scope.clone();
            }
            setup.push(start.to_string());
        }
        // Modes changed afterwards, on any session of the chain.
        for (index, mode) in &later {
            if let Some(mode) = mode {
                let id = format!("s{}", index % chain.len());
                setup.push(json!({"type": "set_mode", "sessionID": id, "mode": mode}).to_string());
            }
        }
        let child = format!("s{}", chain.len() - 1);
        let child_answer = answer(&setup, &child, tool, &input);
        let child_mode = reported_mode(&setup, &child);
        for i in 0..chain.len() - 1 {
            let ancestor = format!("s{i}");
            let ancestor_answer = answer(&setup, &ancestor, tool, &input);
            if ancestor_answer == "deny" {
                prop_assert_eq!(&child_answer, "deny", "{} denies; {}", ancestor, child);
            }
            if ancestor_answer == "ask" {
                prop_assert_ne!(&child_answer, "allow", "{} asks; {}", ancestor, child);
            }
            let ancestor_mode = reported_mode(&setup, &ancestor);
            prop_assert!(
                child_mode.strictness() >= ancestor_mode.strictness(),
                "{} is in {} mode, its descendant {} in {}", ancestor, ancestor_mode, child, child_mode
            );
        }
    }
}
