//! link-assistant/agent compatibility, both directions, on the golden
//! transcript `tests/transcripts/link_assistant_compat` (which the transcript
//! test replays against the spawned binary):
//!
//! - what the approver sends uses only the fields link-assistant documents
//!   for a `permission_response` (`type`, `permissionID` or `permission_id`,
//!   `response`), and the client schema accepts each such frame's shape;
//! - every `permission_request` the broker wrote has the fields a
//!   link-assistant approver reads, where it reads them: `tool` one of its
//!   three, `pattern` a list, `metadata.command` the command as sent and
//!   `metadata.patterns` equal to `pattern` for bash, `metadata.filePath` for
//!   edit, `metadata.url` for webfetch.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::{Map, Value};

fn transcript(suffix: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/transcripts")
        .join(format!("link_assistant_compat.{suffix}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap();
    text.lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn object(value: &Value) -> &Map<String, Value> {
    value.as_object().unwrap()
}

#[test]
fn the_approver_sends_only_link_assistant_fields() {
    let mut spellings = (0, 0);
    for frame in transcript("in") {
        if frame["type"] != "permission_response" {
            continue;
        }
        for key in object(&frame).keys() {
            assert!(
                ["type", "permissionID", "permission_id", "response"].contains(&key.as_str()),
                "`{key}` is not a field link-assistant documents: {frame}"
            );
        }
        match (frame.get("permissionID"), frame.get("permission_id")) {
            (Some(_), None) => spellings.0 += 1,
            (None, Some(_)) => spellings.1 += 1,
            _ => panic!("exactly one id spelling: {frame}"),
        }
    }
    assert!(
        spellings.0 > 0 && spellings.1 > 0,
        "both spellings are used"
    );

    // The client schema takes link-assistant's spelling (and not both).
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../schemas/client-frame.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let response = &schema["$defs"]["PermissionResponse"];
    assert_eq!(response["properties"]["permission_id"]["type"], "string");
    assert_eq!(response["required"], serde_json::json!(["response"]));
}

#[test]
fn every_request_has_what_a_link_assistant_approver_reads() {
    let calls: HashMap<String, Map<String, Value>> = transcript("in")
        .into_iter()
        .filter(|frame| frame["type"] == "tool_call")
        .map(|frame| {
            (
                frame["callID"].as_str().unwrap().to_string(),
                object(&frame["input"]).clone(),
            )
        })
        .collect();
    let mut tools = Vec::new();
    for frame in transcript("out") {
        if frame["type"] != "permission_request" {
            continue;
        }
        assert!(frame["timestamp"].is_u64(), "{frame}");
        for key in ["sessionID", "permissionID", "callID", "title"] {
            assert!(frame[key].is_string(), "`{key}` in {frame}");
        }
        assert!(frame["permissionID"].as_str().unwrap().starts_with("per_"));
        let pattern = frame["pattern"].as_array().expect("`pattern` is a list");
        assert!(pattern.iter().all(Value::is_string), "{frame}");
        let metadata = object(&frame["metadata"]);
        let input = &calls[frame["callID"].as_str().unwrap()];
        let tool = frame["tool"].as_str().unwrap();
        match tool {
            "bash" => {
                assert_eq!(metadata["command"], input["command"], "{frame}");
                assert_eq!(metadata["patterns"], frame["pattern"], "{frame}");
                assert_eq!(frame["title"], input["command"], "{frame}");
            }
            "edit" => {
                assert_eq!(metadata["filePath"], input["filePath"], "{frame}");
                assert_eq!(frame["title"], input["filePath"], "{frame}");
            }
            "webfetch" => {
                assert_eq!(metadata["url"], input["url"], "{frame}");
                assert_eq!(frame["title"], input["url"], "{frame}");
            }
            other => panic!("link-assistant knows no `tool` {other}: {frame}"),
        }
        tools.push(tool.to_string());
    }
    for tool in ["bash", "edit", "webfetch"] {
        assert!(tools.iter().any(|seen| seen == tool), "no {tool} request");
    }
}
