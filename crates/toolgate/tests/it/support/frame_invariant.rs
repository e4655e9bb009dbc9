//! The one-decision promise, checked line by line as the transport feeds a
//! broker: every `tool_call` with a readable `callID` gets exactly one
//! answer (a decision, a question that is decided later, or `duplicate_call`
//! while the same call is pending), no decision comes for a call nobody sent,
//! and nothing is allowed from a line that did not decode.
//!
//! Shared by the property test `tests/it/frames.rs` and the libFuzzer target
//! `fuzz/fuzz_targets/frame.rs` (which includes this file by path).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)] // test support

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde_json::Value;
use toolgate::broker::{Broker, BrokerConfig, OnAsk};
use toolgate::transport::lines::{self, Line, Reader};

/// A broker over `/work/project` with the default policy (ask mode), a
/// clock that never moves and sequential ids (`per_1`, `per_2`, ...).
pub fn broker(on_ask: OnAsk) -> Broker {
    static POLICY: OnceLock<Arc<toolgate_policy::Policy>> = OnceLock::new();
    let policy = POLICY.get_or_init(|| {
        let (policy, _) = toolgate_policy::Policy::build(toolgate_policy::Sources {
            project_root: PathBuf::from("/work/project"),
            ..toolgate_policy::Sources::default()
        })
        .unwrap();
        Arc::new(policy)
    });
    Broker::new(
        policy.clone(),
        BrokerConfig {
            on_ask,
            ask_timeout_ms: 0,
        },
        Box::new(toolgate::clock::ManualClock::new()),
        Box::new(toolgate::clock::SequentialIds::default()),
    )
}

type Key = (String, String);

/// The calls a line is owed an answer for, found without the broker's
/// decoder where possible: a line that is JSON is read with serde_json; one
/// that is not with the tolerant reader.
fn owed_calls(line: &Line<&[u8]>, number: u64) -> Vec<Key> {
    let bytes = match line {
        Line::TooLarge(start) => return start.call().into_iter().collect(),
        Line::Data(bytes) => *bytes,
    };
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let bytes = match number {
        1 => bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes),
        _ => bytes,
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Vec::new();
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(frame)) => {
            let call = frame.get("callID").and_then(Value::as_str);
            match (frame.get("type").and_then(Value::as_str), call) {
                (Some("tool_call"), Some(call)) => {
                    let session = frame
                        .get("sessionID")
                        .and_then(Value::as_str)
                        .unwrap_or("main");
                    // `callID` given more than once: every distinct id is owed.
                    let mut owed = vec![(session.to_string(), call.to_string())];
                    let found = toolgate_protocol::scan::scan(bytes);
                    let earlier = found
                        .heads
                        .first()
                        .map(|head| head.earlier_call_ids.as_slice())
                        .unwrap_or_default();
                    for id in earlier
                        .iter()
                        .filter_map(toolgate_protocol::scan::Field::text)
                    {
                        let key = (session.to_string(), id.to_string());
                        if !owed.contains(&key) {
                            owed.push(key);
                        }
                    }
                    owed
                }
                _ => Vec::new(),
            }
        }
        Ok(_) => Vec::new(),
        Err(_) => toolgate_protocol::scan::scan(bytes)
            .heads
            .iter()
            .filter(|head| head.is_tool_call())
            .filter_map(|head| {
                let session = head
                    .session_id
                    .as_ref()
                    .and_then(toolgate_protocol::scan::Field::text)
                    .unwrap_or("main");
                Some((session.to_string(), head.call_id()?.to_string()))
            })
            .collect(),
    }
}

/// True when the broker's decoder takes the line as a frame.
fn decodes(line: &Line<&[u8]>, number: u64) -> bool {
    let Line::Data(bytes) = line else {
        return false;
    };
    let bytes = match number {
        1 => bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes),
        _ => bytes,
    };
    bytes.iter().all(u8::is_ascii_whitespace) || toolgate_protocol::decode(bytes).is_ok()
}

/// What a run of [`feed`] saw.
#[derive(Debug, Default)]
pub struct Tally {
    /// Lines handed to the broker.
    pub lines: u64,
    /// Decisions written.
    pub decisions: usize,
    /// `deny` decisions for lines that did not decode.
    pub invalid: usize,
    /// Every decision: (callID, decision, source).
    pub decided: Vec<(String, String, String)>,
}

/// Feed `input` to `broker` as the transport does (lines of at most `max`
/// bytes), then end the input; check the promise after every line.
pub fn feed(mut broker: Broker, input: &[u8], max: usize) -> Result<Tally, String> {
    let mut reader = Reader::new(input, max);
    let mut pending: HashMap<Key, usize> = HashMap::new();
    let mut tally = Tally::default();
    let mut number = 0u64;
    // The promise is checked after every line.
    while let Some(line) = reader.next_line().map_err(|err| err.to_string())? {
        let line = line.as_slice();
        number += 1;
        let owed = owed_calls(&line, number);
        let decoded = decodes(&line, number);
        let mut outputs = Vec::new();
        lines::handle_line(&mut broker, 0, line, number, max, &mut outputs);
        let frames: Vec<_> = outputs.into_iter().map(|output| output.frame).collect();
        tally.lines += 1;
        if let Err(problem) = check(&frames, owed, decoded, &mut pending, &mut tally) {
            return Err(format!("line {number}: {problem}"));
        }
        if broker.stopped() {
            break;
        }
    }
    if !broker.stopped() {
        let mut outputs = Vec::new();
        broker.step(toolgate::broker::Input::Stop, &mut outputs);
        let frames: Vec<_> = outputs.into_iter().map(|output| output.frame).collect();
        check(&frames, Vec::new(), true, &mut pending, &mut tally)
            .map_err(|problem| format!("end of input: {problem}"))?;
    }
    if let Some((key, _)) = pending.iter().find(|(_, count)| **count > 0) {
        return Err(format!(
            "call {key:?} is still pending after the broker stopped"
        ));
    }
    Ok(tally)
}

fn check(
    frames: &[toolgate_protocol::ServerFrame],
    owed: Vec<Key>,
    decoded: bool,
    pending: &mut HashMap<Key, usize>,
    tally: &mut Tally,
) -> Result<(), String> {
    // What this line's frames answered, other than calls already pending.
    let mut answered: HashMap<Key, usize> = HashMap::new();
    let mut duplicates: HashMap<String, usize> = HashMap::new();
    for frame in frames {
        let frame = serde_json::to_value(frame).map_err(|err| err.to_string())?;
        let text = |field: &str| frame[field].as_str().unwrap_or_default().to_string();
        let key = (text("sessionID"), text("callID"));
        match frame["type"].as_str() {
            Some("decision") => {
                tally.decisions += 1;
                tally
                    .decided
                    .push((text("callID"), text("decision"), text("source")));
                if !decoded && frame["decision"] == "allow" {
                    return Err(format!(
                        "a line that did not decode allowed a call: {frame}"
                    ));
                }
                if !decoded {
                    tally.invalid += 1;
                }
                match pending.get_mut(&key) {
                    Some(count) if *count > 0 => *count -= 1,
                    _ => *answered.entry(key).or_default() += 1,
                }
            }
            Some("permission_request") => {
                let count = pending.entry(key.clone()).or_default();
                if *count == 0 {
                    // A new question; a pending call asked again is not new.
                    *count += 1;
                    *answered.entry(key).or_default() += 1;
                }
            }
            Some("error") if frame["code"] == "duplicate_call" => {
                *duplicates.entry(text("callID")).or_default() += 1;
            }
            _ => {}
        }
    }
    for key in owed {
        match answered.get_mut(&key) {
            Some(count) if *count > 0 => *count -= 1,
            _ => match duplicates.get_mut(&key.1) {
                Some(count) if *count > 0 => *count -= 1,
                _ => return Err(format!("call {key:?} got no answer: {frames:?}")),
            },
        }
    }
    if let Some((key, _)) = answered.iter().find(|(_, count)| **count > 0) {
        return Err(format!(
            "an answer for call {key:?}, which was not sent: {frames:?}"
        ));
    }
    Ok(())
}
