//! Arbitrary input never panics the broker and never costs a call its one decision.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::collections::HashMap;

use proptest::prelude::*;
use toolgate::broker::Broker;
use toolgate::clock::ManualClock;
use toolgate_protocol::ServerFrame;

use crate::support;

fn broker(clock: ManualClock) -> Broker {
    support::in_process(clock, 1000)
}

/// Lines that look like frames: real frame types and field names with random values.
fn frame_line() -> impl Strategy<Value = Vec<u8>> {
    let kind = prop_oneof![
        Just("tool_call"),
        Just("permission_response"),
        Just("set_mode"),
        Just("cancel"),
        Just("session_end"),
        Just("get_reminder"),
        Just("list_grants"),
        Just("revoke_grant"),
        Just("session_start"),
        Just("bogus"),
    ];
    let tool = prop_oneof![
        Just("Read"),
        Just("Edit"),
        Just("Bash"),
        Just("shell"),
        Just("webfetch"),
        Just("apply_patch"),
        Just("ExitPlanMode"),
        Just("Task"),
        Just("mcp__x__y"),
        Just("read_many_files"),
        Just("LS"),
    ];
    let text = prop_oneof![
        Just("src/a.rs".to_string()),
        Just("../../etc/passwd".to_string()),
        Just(".env".to_string()),
        Just("git commit -m x && rm -rf /".to_string()),
        Just("*** Update File: a\n".to_string()),
        ".{0,12}",
    ];
    let value = prop_oneof![
        text.clone().prop_map(serde_json::Value::String),
        Just(serde_json::json!(7)),
        Just(serde_json::json!(null)),
        Just(serde_json::json!(["bash", "-lc", "ls"])),
        Just(serde_json::json!({"nested": true})),
    ];
    (
        kind,
        prop::option::of(prop_oneof![Just("s1"), Just("s2")]),
        prop::option::of(prop_oneof![Just("c1"), Just("c2"), Just("c3")]),
        prop::option::of(tool),
        prop::collection::btree_map(
            prop_oneof![
                Just("file_path"),
                Just("command"),
                Just("url"),
                Just("input"),
                Just("paths"),
                Just("plan")
            ],
            value.clone(),
            0..3,
        ),
        prop::option::of(prop_oneof![
            Just("per_1"),
            Just("per_2"),
            Just("per_3"),
            Just("nope")
        ]),
        prop::option::of(prop_oneof![
            Just("once"),
            Just("always"),
            Just("reject"),
            Just("maybe")
        ]),
        prop::option::of(prop_oneof![
            Just("plan"),
            Just("auto"),
            Just("readonly"),
            Just("ask"),
            Just("x")
        ]),
        // Sub-session fields: a parent and a narrowing (some unusable).
        (
            prop::option::of(prop_oneof![Just("s1"), Just("s2"), Just("main")]),
            prop::option::of(prop_oneof![
                Just(serde_json::json!({"allowedTools": ["Read", "bash"]})),
                Just(serde_json::json!({"deniedTools": ["edit"], "filePatterns": ["src/**"]})),
                Just(serde_json::json!({"commandPatterns": ["git *"]})),
                Just(serde_json::json!({"filePatterns": ["[x"]})),
                Just(serde_json::json!({"allowedTools": "Read"})),
            ]),
            prop::option::of(prop_oneof![
                Just("session"),
                Just("project"),
                Just("everywhere")
            ]),
        ),
    )
        .prop_map(
            |(
                kind,
                session,
                call,
                tool,
                input,
                permission,
                response,
                mode,
                (parent, scope, grant_scope),
            )| {
                let mut frame = serde_json::Map::new();
                frame.insert("type".into(), kind.into());
                if let Some(session) = session {
                    frame.insert("sessionID".into(), session.into());
                }
                if let Some(call) = call {
                    frame.insert("callID".into(), call.into());
                }
                if let Some(tool) = tool {
                    frame.insert("tool".into(), tool.into());
                }
                frame.insert(
                    "input".into(),
                    serde_json::Value::Object(
                        input.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                    ),
                );
                if let Some(permission) = permission {
                    frame.insert("permissionID".into(), permission.into());
                }
                if let Some(response) = response {
                    frame.insert("response".into(), response.into());
                }
                if let Some(mode) = mode {
                    frame.insert("mode".into(), mode.into());
                }
                if let Some(parent) = parent {
                    frame.insert("parentID".into(), parent.into());
                }
                if let Some(scope) = scope {
                    frame.insert("permissions".into(), scope);
                }
                if let Some(grant_scope) = grant_scope {
                    frame.insert("scope".into(), grant_scope.into());
                }
                serde_json::to_vec(&frame).unwrap()
            },
        )
}

fn any_line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => frame_line(),
        1 => prop::collection::vec(any::<u8>(), 0..64),
        1 => ".{0,40}".prop_map(String::into_bytes),
    ]
}

/// Count the decisions in `frames` against the calls that are owed one.
fn pay(
    owed: &mut HashMap<(String, String), usize>,
    frames: &[ServerFrame],
) -> Result<(), TestCaseError> {
    for frame in frames {
        if let ServerFrame::Decision(decision) = frame {
            let key = (decision.session_id.clone(), decision.call_id.clone());
            let count = owed.get_mut(&key);
            prop_assert!(
                count.as_ref().is_some_and(|c| **c > 0),
                "a decision nobody was owed: {decision:?}"
            );
            if let Some(count) = count {
                *count -= 1;
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn any_sequence_of_lines_keeps_the_one_decision_promise(
        lines in prop::collection::vec(any_line(), 1..40),
        ticks in prop::collection::vec(0u64..800, 1..40),
    ) {
        let clock = ManualClock::new();
        let mut broker = broker(clock.clone());
        let mut out: Vec<ServerFrame> = Vec::new();
        // Calls that are owed a decision: live (sent and not yet decided) by (session, call).
        let mut owed: HashMap<(String, String), usize> = HashMap::new();
        for (number, line) in lines.iter().enumerate() {
            let before = out.len();
            support::feed_line(&mut broker, line, number as u64 + 1, &mut out);
            clock.advance(ticks[number % ticks.len()]);
            support::step(&mut broker, toolgate::broker::Input::Tick, &mut out);
            let parsed: Option<serde_json::Value> = serde_json::from_slice(line).ok();
            let readable_call = parsed.as_ref().and_then(|frame| {
                (frame.get("type")? == "tool_call")
                    .then(|| frame.get("callID")?.as_str().map(str::to_string))
                    .flatten()
                    .map(|call| (frame.get("sessionID").and_then(|s| s.as_str()).unwrap_or("main").to_string(), call))
            });
            let duplicate = out[before..].iter().any(|frame| matches!(frame, ServerFrame::Error(e) if e.code == toolgate_protocol::ErrorCode::DuplicateCall));
            if let (Some(key), false) = (readable_call, duplicate) {
                *owed.entry(key).or_default() += 1;
            }
            pay(&mut owed, &out[before..])?;
        }
        let before = out.len();
        support::step(&mut broker, toolgate::broker::Input::Stop, &mut out);
        pay(&mut owed, &out[before..])?;
        prop_assert_eq!(broker.pending_count(), 0);
        owed.retain(|_, count| *count > 0);
        prop_assert!(owed.is_empty(), "calls without a decision: {owed:?}");
    }
}
