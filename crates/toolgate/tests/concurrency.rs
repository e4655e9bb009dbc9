//! Many pending questions through the real binary: none delays other calls,
//! all can be answered in any order, and each call gets exactly one decision.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

mod support;

use std::collections::HashMap;

use serde_json::Value;

/// A small deterministic shuffle (xorshift), so failures reproduce.
fn shuffle<T>(items: &mut [T], mut seed: u64) {
    for i in (1..items.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        items.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}

#[test]
fn thousands_of_pending_asks_answered_in_any_order() {
    const ASKS: usize = 3000;
    let root = support::project_dir("concurrency");
    let mut broker = support::Broker::start(&root, &[], &[]);
    for i in 0..ASKS {
        let session = if i % 2 == 0 { "a" } else { "b" };
        broker.send(&format!(
            r#"{{"type":"tool_call","sessionID":"{session}","callID":"e{i}","tool":"Edit","input":{{"file_path":"src/f{i}.rs"}}}}"#
        ));
    }
    broker.wait_for("every permission request", |lines| {
        support::count_type(lines, "permission_request") == ASKS
    });

    // With every question open, reads in both sessions and a third one are decided at once.
    for (i, session) in ["a", "b", "c"].iter().enumerate() {
        broker.send(&format!(
            r#"{{"type":"tool_call","sessionID":"{session}","callID":"r{i}","tool":"Read","input":{{"file_path":"src/lib.rs"}}}}"#
        ));
    }
    broker.wait_for("the reads", |lines| {
        support::count_type(lines, "decision") == 3
    });
    assert_eq!(
        support::count_type(&broker.lines(), "decision"),
        3,
        "a read waited for a pending ask"
    );

    // Answer every question `once`, in a shuffled order.
    let mut ids: Vec<(String, String)> = broker
        .frames()
        .into_iter()
        .filter(|frame| frame["type"] == "permission_request")
        .map(|frame| {
            (
                frame["permissionID"].as_str().unwrap().to_string(),
                frame["callID"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    shuffle(&mut ids, 0x9e37_79b9_7f4a_7c15);
    for (id, _) in &ids {
        broker.send(&format!(
            r#"{{"type":"permission_response","permissionID":"{id}","response":"once"}}"#
        ));
    }
    broker.wait_for("every decision", |lines| {
        support::count_type(lines, "decision") == ASKS + 3
    });

    // Decisions for the answered calls come in the order the answers were sent.
    let (status, lines, stderr) = broker.finish();
    assert!(status.success(), "exit {status}: {stderr}");
    let frames: Vec<Value> = lines
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let mut decisions: HashMap<String, usize> = HashMap::new();
    let mut answered_order = Vec::new();
    for frame in &frames {
        if frame["type"] == "decision" {
            let call = frame["callID"].as_str().unwrap().to_string();
            assert_eq!(frame["decision"], "allow", "{frame}");
            if call.starts_with('e') {
                assert_eq!(frame["source"], "user");
                answered_order.push(call.clone());
            }
            *decisions.entry(call).or_default() += 1;
        }
    }
    assert_eq!(decisions.len(), ASKS + 3);
    assert!(
        decisions.values().all(|&n| n == 1),
        "a call got two decisions"
    );
    let expected_order: Vec<String> = ids.iter().map(|(_, call)| call.clone()).collect();
    assert_eq!(answered_order, expected_order);
    assert_eq!(support::count_type(&lines, "error"), 0);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn end_of_input_denies_every_pending_call_exactly_once() {
    const ASKS: usize = 1000;
    let root = support::project_dir("eof-many");
    let mut broker = support::Broker::start(&root, &[], &[]);
    for i in 0..ASKS {
        broker.send(&format!(
            r#"{{"type":"tool_call","sessionID":"s{}","callID":"c{i}","tool":"webfetch","input":{{"url":"https://example.com/{i}"}}}}"#,
            i % 7
        ));
    }
    let (status, lines, stderr) = broker.finish();
    assert!(status.success(), "exit {status}: {stderr}");
    let frames: Vec<Value> = lines
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let denied: Vec<&Value> = frames
        .iter()
        .filter(|frame| frame["type"] == "decision")
        .collect();
    assert_eq!(denied.len(), ASKS);
    assert!(denied
        .iter()
        .all(|frame| frame["decision"] == "deny" && frame["source"] == "shutdown"));
    // Denied in arrival order.
    let order: Vec<&str> = denied
        .iter()
        .map(|frame| frame["callID"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..ASKS).map(|i| format!("c{i}")).collect();
    assert_eq!(order, expected);
    assert_eq!(support::count_type(&lines, "permission_resolved"), ASKS);
    let _ = std::fs::remove_dir_all(&root);
}
