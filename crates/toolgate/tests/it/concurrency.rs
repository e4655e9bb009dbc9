//! Many pending questions through the real binary: none delays other calls,
//! all can be answered in any order, and each call gets exactly one decision.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::collections::HashMap;

use serde_json::Value;

use crate::support;

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

/// One call of [`always_answers_decide_exactly_the_covered_calls`]: what it
/// asks about (every pair must be granted for it to run), what an `always`
/// answer to its question grants, and whether the test answers it.
struct Modelled {
    session: &'static str,
    call_id: String,
    asks: Vec<(&'static str, String)>,
    grants: Vec<(&'static str, String)>,
    answerable: bool,
}

/// Enough of grant patterns for the commands and paths of that test.
fn covers(pattern: &str, subject: &str) -> bool {
    if let Some(prefix) = pattern.strip_suffix(" *") {
        subject == prefix || subject.starts_with(&format!("{prefix} "))
    } else if let Some(prefix) = pattern.strip_suffix('*') {
        subject.starts_with(prefix)
    } else {
        subject == pattern
    }
}

/// Thousands of questions pending in two sessions, answered `once`,
/// `always` and `always` for the project in a shuffled order: every `always`
/// decides exactly the pending calls whose every asked subject is now
/// granted, oldest first (sessions in name order for a project grant), each
/// with `permission_resolved` naming the answer, and nothing else. Some calls
/// ask about two permissions in turn (a command outside the project), so a
/// call that still asks after one grant must be found again by the next.
#[test]
fn always_answers_decide_exactly_the_covered_calls() {
    const PER_SESSION: usize = 1200;
    let root = support::project_dir("always-many");
    let mut broker = support::Broker::start(&root, &[], &[]);
    let mut calls: Vec<Modelled> = Vec::new();
    for i in 0..PER_SESSION {
        for session in ["a", "b"] {
            let call_id = format!("{session}{i}");
            let group = (i / 6) % 7;
            let bash = |command: String| {
                format!(
                    r#"{{"type":"tool_call","sessionID":"{session}","callID":"{call_id}","tool":"Bash","input":{{"command":"{command}"}}}}"#
                )
            };
            let (frame, asks, grants, answerable) = match i % 6 {
                0 => (
                    bash(format!("./build{i}.sh")),
                    vec![("bash", format!("./build{i}.sh"))],
                    vec![("bash", format!("./build{i}.sh *"))],
                    true,
                ),
                1 => (
                    bash(format!("touch t{i}")),
                    vec![("bash", format!("touch t{i}"))],
                    vec![("bash", "touch *".to_string())],
                    true,
                ),
                2 => (
                    bash(format!("touch c{i} && ./build{}.sh", i - 2)),
                    vec![
                        ("bash", format!("touch c{i}")),
                        ("bash", format!("./build{}.sh", i - 2)),
                    ],
                    vec![
                        ("bash", "touch *".to_string()),
                        ("bash", format!("./build{}.sh *", i - 2)),
                    ],
                    true,
                ),
                3 => (
                    format!(
                        r#"{{"type":"tool_call","sessionID":"{session}","callID":"{call_id}","tool":"Edit","input":{{"file_path":"src/e{i}.rs"}}}}"#
                    ),
                    vec![("edit", format!("src/e{i}.rs"))],
                    vec![("edit", "*".to_string())],
                    true,
                ),
                4 => (
                    format!(
                        r#"{{"type":"tool_call","sessionID":"{session}","callID":"{call_id}","tool":"Read","input":{{"file_path":"/opt/pq{group}/z{i}"}}}}"#
                    ),
                    vec![("external_directory", format!("/opt/pq{group}/z{i}"))],
                    vec![("external_directory", format!("/opt/pq{group}/*"))],
                    true,
                ),
                // Asks about the directory first, then about the command
                // (no Read grants `/opt/pq7`: those are never decided).
                _ => (
                    bash(format!("touch /opt/pq{}/y{i}", (i / 6) % 8)),
                    vec![
                        ("external_directory", format!("/opt/pq{}/y{i}", (i / 6) % 8)),
                        ("bash", format!("touch /opt/pq{}/y{i}", (i / 6) % 8)),
                    ],
                    Vec::new(),
                    false,
                ),
            };
            broker.send(&frame);
            calls.push(Modelled {
                session,
                call_id,
                asks,
                grants,
                answerable,
            });
        }
    }
    let total = calls.len();
    broker.wait_for("every permission request", |lines| {
        support::count_type(lines, "permission_request") == total
    });
    let mut permission_of: HashMap<String, String> = HashMap::new();
    for frame in broker.frames() {
        if frame["type"] == "permission_request" {
            permission_of.insert(
                frame["callID"].as_str().unwrap().to_string(),
                frame["permissionID"].as_str().unwrap().to_string(),
            );
        }
    }

    // The model: grants per session and for the project; the calls still
    // pending, in arrival order; the frames expected.
    let mut order: Vec<usize> = (0..total).filter(|&c| calls[c].answerable).collect();
    shuffle(&mut order, 0x2545_f491_4f6c_dd1d);
    let mut session_grants: HashMap<&str, Vec<(&str, String)>> = HashMap::new();
    let mut project_grants: Vec<(&str, String)> = Vec::new();
    let mut pending: Vec<bool> = vec![true; total];
    let mut expected: Vec<String> = Vec::new();
    let mut answers: Vec<String> = Vec::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for c in order {
        if !pending[c] {
            continue;
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let id = &permission_of[&calls[c].call_id];
        let (reply, scope) = match seed % 10 {
            0..=4 => ("once", None),
            5..=8 => ("always", Some("session")),
            _ => ("always", Some("project")),
        };
        answers.push(match scope {
            None => format!(
                r#"{{"type":"permission_response","permissionID":"{id}","response":"{reply}"}}"#
            ),
            Some(scope) => format!(
                r#"{{"type":"permission_response","permissionID":"{id}","response":"{reply}","scope":"{scope}"}}"#
            ),
        });
        pending[c] = false;
        expected.push(format!("decision {} allow user", calls[c].call_id));
        let Some(scope) = scope else { continue };
        let granted = calls[c].grants.clone();
        if scope == "project" {
            project_grants.extend(granted);
        } else {
            session_grants
                .entry(calls[c].session)
                .or_default()
                .extend(granted);
        }
        let sessions: Vec<&str> = if scope == "project" {
            vec!["a", "b"]
        } else {
            vec![calls[c].session]
        };
        for session in sessions {
            for other in 0..total {
                if !pending[other] || calls[other].session != session {
                    continue;
                }
                let own = session_grants.get(session).cloned().unwrap_or_default();
                let covered = calls[other].asks.iter().all(|(permission, subject)| {
                    own.iter()
                        .chain(&project_grants)
                        .any(|(p, pattern)| p == permission && covers(pattern, subject))
                });
                if covered {
                    pending[other] = false;
                    expected.push(format!(
                        "resolved {} an `always` answer to {id} covers it",
                        calls[other].call_id
                    ));
                    expected.push(format!("decision {} allow grant", calls[other].call_id));
                }
            }
        }
    }
    // The end of input denies what is left, in arrival order.
    for (index, call) in calls.iter().enumerate() {
        if pending[index] {
            expected.push(format!(
                "resolved {} the broker shut down before the question was answered",
                call.call_id
            ));
            expected.push(format!("decision {} deny shutdown", call.call_id));
        }
    }
    for answer in &answers {
        broker.send(answer);
    }
    let (status, lines, stderr) = broker.finish();
    assert!(status.success(), "exit {status}: {stderr}");
    let mut actual: Vec<String> = Vec::new();
    for line in &lines {
        let frame: Value = serde_json::from_str(line).unwrap();
        let call = frame["callID"].as_str().unwrap_or_default();
        match frame["type"].as_str().unwrap() {
            "decision" => actual.push(format!(
                "decision {call} {} {}",
                frame["decision"].as_str().unwrap(),
                frame["source"].as_str().unwrap()
            )),
            "permission_resolved" => actual.push(format!(
                "resolved {call} {}",
                frame["reason"].as_str().unwrap()
            )),
            "permission_request" | "ready" => {}
            other => panic!("unexpected frame {other}: {line}"),
        }
    }
    // Both sides have thousands of lines: compare them a line at a time.
    for (n, (want, got)) in expected.iter().zip(&actual).enumerate() {
        assert_eq!(want, got, "frame {n} of the decisions and resolutions");
    }
    assert_eq!(expected.len(), actual.len());
    // Every call got exactly one decision.
    assert_eq!(
        actual.iter().filter(|l| l.starts_with("decision")).count(),
        total
    );
    // The test covers what it means to: calls decided by a grant, calls left
    // asking after a first grant and decided by a second, calls never covered.
    assert!(expected.iter().any(|l| l.ends_with("allow grant")));
    assert!(expected.iter().any(|l| l.ends_with("deny shutdown")));
    let _ = std::fs::remove_dir_all(&root);
}
