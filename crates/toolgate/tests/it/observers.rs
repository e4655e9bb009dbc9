//! Observers and listings on a running broker (`serve --listen`): an
//! observer sees every decision, question, answer, resolution, session
//! start and end and mode change of the sessions it watches, in order, and
//! can do nothing else; `list_sessions` and `list_pending` answer the
//! asking connection. Through the spawned broker and socket connections.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support;

/// `type sessionID [callID] [decision|response]` of each frame.
fn summary(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .map(|frame| {
            let mut parts = vec![frame["type"].as_str().unwrap().to_string()];
            for key in ["sessionID", "callID", "decision", "response", "mode"] {
                if let Some(text) = frame[key].as_str() {
                    parts.push(text.to_string());
                }
            }
            parts.join(" ")
        })
        .collect()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("toolgate-observe-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("project")).unwrap();
    dir
}

#[test]
fn an_observer_sees_two_agents_in_order_and_can_only_list() {
    let dir = scratch("two");
    let broker = support::Listening::start(&dir, &dir.join("project"), &["--mode", "ask"]);
    let socket = broker.socket.clone();
    let mut all = support::Peer::connect(
        &socket,
        json!({"type":"hello","role":"observer","client":"dashboard"}),
    );
    let mut tree = support::Peer::connect(
        &socket,
        json!({"type":"hello","role":"observer","client":"orch-ui","sessionID":"orch"}),
    );
    let mut orchestrator =
        support::Peer::connect(&socket, json!({"type":"hello","client":"orchestrator"}));
    let mut codex = support::Peer::connect(&socket, json!({"type":"hello","client":"codex"}));
    let mut claude = support::Peer::connect(&socket, json!({"type":"hello","client":"claude"}));
    let mut human = support::Peer::connect(
        &socket,
        json!({"type":"hello","role":"approver","client":"human"}),
    );
    orchestrator.send(json!({"type":"session_start","sessionID":"orch","mode":"auto_edit"}));
    orchestrator.until("session_started");
    for agent in ["codex-1", "claude-1"] {
        orchestrator.send(json!({"type":"session_start","sessionID":agent,"parentID":"orch"}));
        orchestrator.until("session_started");
    }
    codex.send(json!({"type":"tool_call","sessionID":"codex-1","callID":"c1","tool":"read","input":{"filePath":"a"}}));
    codex.until("decision");
    claude.send(json!({"type":"tool_call","sessionID":"claude-1","callID":"k1","tool":"bash","input":{"command":"rm -rf build"}}));
    let question = human.until("permission_request").pop().unwrap();
    // Outside the orchestrator's tree: the whole-broker observer sees it.
    codex.send(json!({"type":"tool_call","sessionID":"elsewhere","callID":"e1","tool":"read","input":{"filePath":"a"}}));
    codex.until("decision");
    // The listings, for any connection.
    orchestrator.send(json!({"type":"list_sessions","sessionID":"orch"}));
    let listed = orchestrator.until("sessions").pop().unwrap();
    let sessions = listed["sessions"].as_array().unwrap();
    let ids: Vec<&str> = sessions
        .iter()
        .map(|s| s["sessionID"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["orch", "claude-1", "codex-1"], "{listed}");
    assert_eq!(sessions[1]["parentID"], "orch");
    assert_eq!(sessions[1]["clients"], json!(["claude"]));
    assert_eq!(sessions[1]["pending"], 1);
    assert_eq!(sessions[2]["clients"], json!(["codex"]));
    assert_eq!(sessions[2]["pending"], 0);
    assert_eq!(sessions[2]["mode"], "auto_edit");
    all.send(json!({"type":"list_pending"}));
    let mut before = all.until("pending");
    let pending = before.pop().unwrap();
    assert_eq!(
        pending["questions"].as_array().unwrap().len(),
        1,
        "{pending}"
    );
    assert_eq!(
        pending["questions"][0]["permissionID"],
        question["permissionID"]
    );
    // The answer, then a mode change and the end of the tree.
    human.send(json!({"type":"permission_response","permissionID":question["permissionID"],"response":"reject","message":"not now"}));
    claude.until("decision");
    orchestrator.send(json!({"type":"set_mode","sessionID":"orch","mode":"plan"}));
    orchestrator.until("mode_changed");
    // An observer cannot act: a call gets its one decision, a denial;
    // anything else an error.
    tree.send(json!({"type":"tool_call","sessionID":"orch","callID":"x1","tool":"read","input":{"filePath":"a"}}));
    tree.send(json!({"type":"permission_response","permissionID":question["permissionID"],"response":"once"}));
    // Connections are read side by side: the end waits until the broker
    // has answered the observer.
    let mut frames = tree.until("error");
    orchestrator.send(json!({"type":"session_end","sessionID":"orch"}));
    orchestrator.until("session_ended");
    let expected_tree = [
        "session_started orch auto_edit",
        "session_started codex-1 auto_edit",
        "session_started claude-1 auto_edit",
        "decision codex-1 c1 allow",
        "permission_request claude-1 k1",
        "permission_answered claude-1 k1 reject",
        "decision claude-1 k1 deny",
        "mode_changed orch plan",
        "mode_changed claude-1 plan",
        "mode_changed codex-1 plan",
        "decision orch x1 deny",
        "error",
        "session_ended codex-1",
        "session_ended claude-1",
        "session_ended orch",
    ];
    frames.extend(tree.quiet(Duration::from_millis(500)));
    assert_eq!(summary(&frames), expected_tree);
    let refused = &frames[10];
    assert_eq!(refused["source"], "invalid", "{refused}");
    assert_eq!(frames[11]["code"], "forbidden", "{}", frames[11]);
    before.extend(all.quiet(Duration::from_millis(500)));
    let mut expected_all: Vec<&str> = expected_tree
        .iter()
        .copied()
        .filter(|line| *line != "error")
        .collect();
    // The whole-broker observer also sees the call outside the tree (the
    // other observer's refusal is news too; its error is not).
    expected_all.insert(5, "decision elsewhere e1 allow");
    assert_eq!(summary(&before), expected_all);
    subtree_is_for_observers_only(&socket);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `hello` naming a subtree is for observers only.
fn subtree_is_for_observers_only(socket: &std::path::Path) {
    let mut conn = support::Peer::connect(socket, json!({"type":"hello","client":"plain"}));
    conn.send(json!({"type":"hello","role":"approver","sessionID":"orch"}));
    let error = conn.recv();
    assert_eq!(error["type"], "error", "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("observer"),
        "{error}"
    );
}
