//! The broker and its store, in process: what is saved and when, what a failed
//! save does, and how an unusable stored state is repaired (never loosened).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use serde_json::Value;
use toolgate::broker::Broker;
use toolgate::clock::ManualClock;
use toolgate::store::{MemoryStore, Snapshot, StoredGrant, StoredSession};
use toolgate_protocol::ServerFrame;

use crate::support;

fn broker() -> Broker {
    support::in_process(ManualClock::new(), 0)
}

/// Feed lines; return every frame written, as JSON values.
fn feed(broker: &mut Broker, lines: &[&str]) -> Vec<Value> {
    let mut out: Vec<ServerFrame> = Vec::new();
    for (number, line) in lines.iter().enumerate() {
        support::feed_line(broker, line.as_bytes(), number as u64 + 1, &mut out);
    }
    out.iter()
        .map(|frame| serde_json::to_value(frame).unwrap())
        .collect()
}

fn decision<'a>(frames: &'a [Value], call: &str) -> &'a Value {
    frames
        .iter()
        .find(|f| f["type"] == "decision" && f["callID"] == call)
        .unwrap_or_else(|| panic!("no decision for {call} in {frames:#?}"))
}

const EDIT: &str = r#"{"type":"tool_call","sessionID":"s","callID":"c1","tool":"Edit","input":{"file_path":"a.rs"}}"#;

#[test]
fn grants_are_saved_before_the_decision_that_reports_them_is_handed_out() {
    let store = MemoryStore::new();
    let mut broker = broker();
    assert!(broker
        .restore(Box::new(store.clone()), Snapshot::default())
        .is_empty());
    feed(&mut broker, &[EDIT]);
    let before = store.saved().len();
    // The broker hands frames to the transport only when `handle_line`
    // returns: the save must already have happened by then.
    let frames = feed(
        &mut broker,
        &[r#"{"type":"permission_response","permissionID":"per_1","response":"always"}"#],
    );
    assert_eq!(decision(&frames, "c1")["decision"], "allow");
    assert_eq!(store.saved().len(), before + 1);
    let saved = store.last().unwrap();
    let session = saved.sessions.iter().find(|s| s.session_id == "s").unwrap();
    assert_eq!(session.grants.len(), 1);
    assert_eq!(session.grants[0].permission, "edit");
    assert_eq!(session.grants[0].pattern, "*");

    // Project grants go to `projectGrants`, with the session that made them.
    let frames = feed(
        &mut broker,
        &[
            r#"{"type":"tool_call","sessionID":"t","callID":"c2","tool":"Bash","input":{"command":"cargo build"}}"#,
            r#"{"type":"permission_response","permissionID":"per_2","response":"always","scope":"project"}"#,
        ],
    );
    assert_eq!(decision(&frames, "c2")["decision"], "allow");
    let saved = store.last().unwrap();
    assert_eq!(saved.project_grants.len(), 1);
    assert_eq!(saved.project_grants[0].session_id, "t");
    assert_eq!(saved.project_grants[0].pattern, "cargo build *");
    assert_eq!(saved.project_grants[0].literal, "cargo build".len());
}

#[test]
fn a_failed_save_is_said_in_the_decision() {
    let store = MemoryStore::new();
    store.fail_with(Some("disk full"));
    let mut broker = broker();
    broker.restore(Box::new(store.clone()), Snapshot::default());
    let frames = feed(
        &mut broker,
        &[
            EDIT,
            r#"{"type":"permission_response","permissionID":"per_1","response":"always"}"#,
        ],
    );
    let reason = decision(&frames, "c1")["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(reason.contains("could not be saved"), "{reason}");
    assert!(reason.contains("disk full"), "{reason}");
    // The grant still holds in memory.
    let frames = feed(
        &mut broker,
        &[
            r#"{"type":"tool_call","sessionID":"s","callID":"c3","tool":"Edit","input":{"file_path":"b.rs"}}"#,
        ],
    );
    assert_eq!(decision(&frames, "c3")["source"], "grant");
}

fn stored_session(
    id: &str,
    parent: Option<&str>,
    mode: &str,
    permissions: Option<Value>,
) -> StoredSession {
    StoredSession {
        session_id: id.to_string(),
        parent_id: parent.map(str::to_string),
        mode: mode.to_string(),
        permissions: permissions.map(|p| serde_json::from_value(p).unwrap()),
        grants: Vec::new(),
        started: false,
        implicit: false,
        joined: Vec::new(),
    }
}

/// `k`, joined under `p` after `p`'s sub-task `t1` started with `met`.
fn joined_session(met: Value) -> StoredSession {
    StoredSession {
        started: true,
        joined: vec![toolgate::store::StoredJoined {
            session_id: "t1".to_string(),
            permissions: serde_json::from_value(met).unwrap(),
        }],
        ..stored_session("k", Some("p"), "auto", None)
    }
}

/// `(stored sessions, call in session "k", expected decision and source, a piece of the warnings)`.
#[test]
fn unusable_stored_state_is_repaired_strictly() {
    let bash = r#"{"type":"tool_call","sessionID":"k","callID":"x","tool":"Bash","input":{"command":"rm -rf build"}}"#;
    let read = r#"{"type":"tool_call","sessionID":"k","callID":"x","tool":"Read","input":{"file_path":"a.rs"}}"#;
    let cases: Vec<(Vec<StoredSession>, &str, &str, &str)> = vec![
        // A child whose parent is gone keeps its own scope and starts in readonly.
        (
            vec![stored_session("k", Some("gone"), "auto", None)],
            bash,
            "deny mode",
            "names a parent `gone` that is not stored",
        ),
        // An unknown mode becomes readonly.
        (
            vec![stored_session("k", None, "sideways", None)],
            bash,
            "deny mode",
            "unusable mode",
        ),
        // An unusable scope admits only the always-available tools.
        (
            vec![stored_session(
                "k",
                None,
                "auto",
                Some(serde_json::json!({"filePatterns": ["[z"]})),
            )],
            read,
            "deny scope",
            "unusable scope",
        ),
        // A child restored before its parent in the file still gets the parent's scope.
        (
            vec![
                stored_session("k", Some("p"), "auto", None),
                stored_session(
                    "p",
                    None,
                    "auto",
                    Some(serde_json::json!({"deniedTools": ["bash"]})),
                ),
            ],
            bash,
            "deny scope",
            "",
        ),
        // A joined session keeps the scope it met, though the sub-task
        // that had it is not stored (it ended).
        (
            vec![
                stored_session("p", None, "auto", None),
                joined_session(serde_json::json!({"allowedTools": ["Read"]})),
            ],
            bash,
            "deny scope",
            "",
        ),
        // One it met that cannot be used admits only the always-available tools.
        (
            vec![
                stored_session("p", None, "auto", None),
                joined_session(serde_json::json!({"filePatterns": ["[z"]})),
            ],
            read,
            "deny scope",
            "met an unusable scope when it joined",
        ),
        // A well-formed session comes back as stored.
        (
            vec![stored_session("k", None, "auto", None)],
            bash,
            "allow mode",
            "",
        ),
    ];
    for (sessions, call, expected, warning) in cases {
        let mut broker = broker();
        let snapshot = Snapshot {
            version: 1,
            project_root: "/work/project".to_string(),
            project_grants: Vec::new(),
            sessions,
            closed: Vec::new(),
        };
        let warnings = broker
            .restore(Box::new(MemoryStore::new()), snapshot)
            .join("\n");
        if warning.is_empty() {
            assert!(warnings.is_empty(), "{warnings}");
        } else {
            assert!(warnings.contains(warning), "{warnings}");
        }
        let frames = feed(&mut broker, &[call]);
        let got = decision(&frames, "x");
        let got = format!(
            "{} {}",
            got["decision"].as_str().unwrap(),
            got["source"].as_str().unwrap()
        );
        assert_eq!(got, expected, "{warning}");
    }
}

#[test]
fn an_unusable_stored_grant_is_dropped_with_a_warning() {
    let mut broker = broker();
    let snapshot = Snapshot {
        version: 1,
        project_root: "/work/project".to_string(),
        project_grants: vec![StoredGrant {
            grant_id: "grant_x".to_string(),
            permission: "bash".to_string(),
            pattern: "ls *".to_string(),
            literal: 99,
            session_id: "s".to_string(),
            mode: None,
            expires_at: None,
        }],
        sessions: Vec::new(),
        closed: Vec::new(),
    };
    let warnings = broker.restore(Box::new(MemoryStore::new()), snapshot);
    assert_eq!(
        warnings,
        vec!["the stored project grant `grant_x` is unusable and was dropped".to_string()]
    );
}

/// A store and an output that log, in one list, what reaches them.
#[derive(Clone, Default)]
struct Log(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Log {
    fn push(&self, entry: String) {
        self.0.lock().unwrap().push(entry);
    }
}

impl toolgate::store::Store for Log {
    fn record(
        &mut self,
        changes: &[toolgate::store::Change],
    ) -> Result<(), toolgate::store::StateError> {
        self.push(format!("record {}", changes.len()));
        Ok(())
    }
    fn stage(
        &mut self,
        changes: &[toolgate::store::Change],
    ) -> Result<(), toolgate::store::StateError> {
        self.push(format!("stage {}", changes.len()));
        Ok(())
    }
    fn commit(&mut self) -> Result<(), toolgate::store::StateError> {
        self.push("commit".to_string());
        Ok(())
    }
    fn save(&mut self, _: &Snapshot) -> Result<(), toolgate::store::StateError> {
        self.push("save".to_string());
        Ok(())
    }
}

impl std::io::Write for Log {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        for line in String::from_utf8_lossy(bytes).lines() {
            let frame: Value = serde_json::from_str(line).unwrap();
            self.push(format!("out {}", frame["type"].as_str().unwrap()));
        }
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The transport syncs staged changes (session starts) before it writes
/// the frames that report them (one sync for a batch); grants and what
/// shuts or narrows (a mode set, a session ended) are recorded at once,
/// before their frames are made.
#[test]
fn staged_changes_are_committed_before_their_frames_are_written() {
    let log = Log::default();
    let mut broker = broker();
    broker.restore(Box::new(log.clone()), Snapshot::default());
    let input = [
        r#"{"type":"session_start","sessionID":"a","mode":"plan"}"#,
        r#"{"type":"session_start","sessionID":"b","mode":"plan"}"#,
        r#"{"type":"set_mode","sessionID":"a","mode":"ask"}"#,
        r#"{"type":"session_end","sessionID":"b"}"#,
    ]
    .join("\n")
        + "\n";
    toolgate::transport::stdio::run(
        std::io::Cursor::new(input.into_bytes()),
        log.clone(),
        broker,
        1 << 20,
    )
    .unwrap();
    let entries = log.0.lock().unwrap().clone();
    let first_out = |kind: &str| {
        entries
            .iter()
            .position(|entry| entry == &format!("out {kind}"))
            .unwrap_or_else(|| panic!("no {kind} in {entries:?}"))
    };
    let last_stage = entries
        .iter()
        .rposition(|e| e.starts_with("stage"))
        .unwrap();
    let commit_after = entries[last_stage..]
        .iter()
        .position(|e| e == "commit")
        .map(|offset| last_stage + offset)
        .unwrap_or_else(|| panic!("nothing committed after the last stage: {entries:?}"));
    assert!(commit_after < first_out("session_started"), "{entries:?}");
    let recorded = |what: &str| {
        entries
            .iter()
            .position(|entry| entry == what)
            .unwrap_or_else(|| panic!("no {what} in {entries:?}"))
    };
    // set_mode records the session; session_end its removal and the
    // shutting, together.
    assert!(
        recorded("record 1") < first_out("mode_changed"),
        "{entries:?}"
    );
    assert!(
        recorded("record 2") < first_out("session_ended"),
        "{entries:?}"
    );
}

mod journal_matches_the_broker {
    //! Every change the broker makes to what it keeps reaches the store as a
    //! change record: after each frame of a random script, the state the
    //! store built from the records equals the whole state the broker would
    //! write, and a broker restored from it keeps the same state.

    use proptest::prelude::*;
    use serde_json::{json, Value};
    use toolgate::store::{MemoryStore, Snapshot, StoredGrant};
    use toolgate_protocol::ServerFrame;

    const SESSIONS: [&str; 5] = ["main", "research", "worker", "k", "z"];
    const MODES: [&str; 6] = ["auto", "ask", "plan", "readonly", "auto_edit", "bogus"];
    const COMMANDS: [&str; 4] = ["rm -rf build", "cargo build", "cat a.rs", "git push"];
    const RESPONSES: [&str; 3] = ["once", "always", "reject"];

    #[derive(Debug, Clone)]
    enum Step {
        Start(usize, Option<usize>, Option<usize>, Option<usize>),
        Unreadable(usize),
        End(usize),
        SetMode(usize, usize),
        Call(usize, usize),
        Respond(usize, usize, bool),
        Cancel(usize),
        Revoke(usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        let s = 0..SESSIONS.len();
        prop_oneof![
            4 => (s.clone(), prop::option::of(0..SESSIONS.len()), prop::option::of(0..MODES.len()), prop::option::of(0usize..5))
                .prop_map(|(s, p, m, c)| Step::Start(s, p, m, c)),
            1 => s.clone().prop_map(Step::Unreadable),
            2 => s.clone().prop_map(Step::End),
            1 => (s.clone(), 0..MODES.len()).prop_map(|(s, m)| Step::SetMode(s, m)),
            5 => (s, 0..COMMANDS.len()).prop_map(|(s, c)| Step::Call(s, c)),
            3 => (0usize..8, 0usize..3, any::<bool>()).prop_map(|(i, k, p)| Step::Respond(i, k, p)),
            1 => (0usize..8).prop_map(Step::Cancel),
            1 => (0usize..8).prop_map(Step::Revoke),
        ]
    }

    fn scope(n: usize) -> Value {
        match n {
            0 => json!({"allowedTools": ["Read"]}),
            1 => json!({"deniedTools": ["bash"]}),
            2 => json!({"commandPatterns": ["git *", "cat *"]}),
            3 => json!({"filePatterns": ["src/**"]}),
            // An unusable pattern: the start is refused.
            _ => json!({"filePatterns": ["src/[a"]}),
        }
    }

    /// What must match: sessions, grants and closed sessions, in one order.
    fn kept(snapshot: &Snapshot) -> Value {
        let sort = |grants: &[StoredGrant]| {
            let mut grants = grants.to_vec();
            grants.sort_by(|a, b| a.grant_id.cmp(&b.grant_id));
            grants
        };
        let mut sessions = snapshot.sessions.clone();
        sessions.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        for session in &mut sessions {
            session.grants = sort(&session.grants);
        }
        let mut closed = snapshot.closed.clone();
        closed.sort_by(|a, b| a.fingerprint.cmp(&b.fingerprint));
        json!({
            "projectGrants": sort(&snapshot.project_grants),
            "sessions": sessions,
            "closed": closed,
        })
    }

    fn grant_ids(snapshot: &Snapshot) -> Vec<String> {
        snapshot
            .project_grants
            .iter()
            .chain(snapshot.sessions.iter().flat_map(|s| &s.grants))
            .map(|grant| grant.grant_id.clone())
            .collect()
    }

    fn line(
        step: &Step,
        n: usize,
        asked: &[(String, String, String)],
        grants: &[String],
    ) -> String {
        match step {
            Step::Start(s, parent, mode, narrowing) => {
                let mut frame = json!({"type":"session_start","sessionID":SESSIONS[*s]});
                if let Some(parent) = parent {
                    frame["parentID"] = json!(SESSIONS[*parent]);
                }
                if let Some(mode) = mode {
                    frame["mode"] = json!(MODES[*mode]);
                }
                if let Some(narrowing) = narrowing {
                    frame["permissions"] = scope(*narrowing);
                }
                frame.to_string()
            }
            Step::Unreadable(s) => {
                json!({"type":"session_start","sessionID":SESSIONS[*s],"mode":5}).to_string()
            }
            Step::End(s) => json!({"type":"session_end","sessionID":SESSIONS[*s]}).to_string(),
            Step::SetMode(s, m) => {
                json!({"type":"set_mode","sessionID":SESSIONS[*s],"mode":MODES[*m]}).to_string()
            }
            Step::Call(s, c) => json!({
                "type":"tool_call","sessionID":SESSIONS[*s],"callID":format!("c{n}"),
                "tool":"Bash","input":{"command":COMMANDS[*c],"description":format!("d{n}")}
            })
            .to_string(),
            Step::Respond(i, kind, project) => {
                let id = asked
                    .get(i % asked.len().max(1))
                    .map_or("per_none", |(id, _, _)| id.as_str());
                let mut frame = json!({"type":"permission_response","permissionID":id,
                    "response":RESPONSES[*kind]});
                if *project {
                    frame["scope"] = json!("project");
                }
                frame.to_string()
            }
            Step::Cancel(i) => {
                let (session, call) = asked
                    .get(i % asked.len().max(1))
                    .map_or(("main", "none"), |(_, s, c)| (s.as_str(), c.as_str()));
                json!({"type":"cancel","sessionID":session,"callID":call}).to_string()
            }
            Step::Revoke(i) => {
                let id = grants
                    .get(i % grants.len().max(1))
                    .map_or("grant_none", String::as_str);
                json!({"type":"revoke_grant","grantID":id}).to_string()
            }
        }
    }

    fn check(steps: &[Step]) {
        let store = MemoryStore::new();
        let mut broker = super::broker();
        broker.restore(Box::new(store.clone()), Snapshot::default());
        let mut asked: Vec<(String, String, String)> = Vec::new();
        let mut script = Vec::new();
        for (n, step) in steps.iter().enumerate() {
            let grants = grant_ids(&broker.stored_state());
            let text = line(step, n, &asked, &grants);
            script.push(text.clone());
            let mut out: Vec<ServerFrame> = Vec::new();
            crate::support::feed_line(&mut broker, text.as_bytes(), n as u64 + 1, &mut out);
            broker.commit();
            for frame in &out {
                let frame = serde_json::to_value(frame).unwrap();
                if frame["type"] == "permission_request" {
                    asked.push((
                        frame["permissionID"].as_str().unwrap().to_string(),
                        frame["sessionID"].as_str().unwrap().to_string(),
                        frame["callID"].as_str().unwrap().to_string(),
                    ));
                }
            }
            let stored = store.last().unwrap_or_default();
            assert_eq!(
                kept(&stored),
                kept(&broker.stored_state()),
                "the store and the broker differ after:\n{}",
                script.join("\n")
            );
        }
        // A broker restored from the records holds the same state.
        let stored = store.last().unwrap_or_default();
        let mut again = super::broker();
        let warnings = again.restore(Box::new(MemoryStore::new()), stored.clone());
        assert!(warnings.is_empty(), "{warnings:?}\n{}", script.join("\n"));
        assert_eq!(
            kept(&again.stored_state()),
            kept(&stored),
            "restored from the records:\n{}",
            script.join("\n")
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn every_kept_change_reaches_the_store(steps in prop::collection::vec(step(), 1..60)) {
            check(&steps);
        }
    }

    /// The cases that once differed: an implicit parent ended with its
    /// child, an implicit parent left without children, a refused start of
    /// a running session with a child.
    #[test]
    fn implicit_parents_and_shut_sessions() {
        check(&[
            Step::Call(0, 1),
            Step::Start(1, Some(0), None, Some(2)),
            Step::End(0),
        ]);
        check(&[
            Step::Call(0, 1),
            Step::Start(1, Some(0), None, None),
            Step::End(1),
            Step::Start(2, Some(0), None, None),
        ]);
        check(&[
            Step::Start(3, None, Some(2), None),
            Step::Start(4, Some(3), None, None),
            Step::Start(3, None, None, None),
            Step::Start(4, None, None, None),
        ]);
    }
}

/// A grant with a lifetime ends on the broker's clock, not a timer's: it
/// covers to the millisecond before its end and nothing from its end on,
/// when the broker's next step drops it from memory and from the store.
#[test]
fn a_timed_grant_ends_on_the_broker_clock() {
    let clock = ManualClock::new();
    clock.set(1_000_000);
    let store = MemoryStore::new();
    let mut broker = support::in_process(clock.clone(), 0);
    assert!(broker
        .restore(Box::new(store.clone()), Snapshot::default())
        .is_empty());
    let build = |call: &str, command: &str| {
        format!(
            r#"{{"type":"tool_call","sessionID":"s","callID":"{call}","tool":"Bash","input":{{"command":"{command}"}}}}"#
        )
    };
    feed(&mut broker, &[&build("c1", "cargo build")]);
    let frames = feed(
        &mut broker,
        &[
            r#"{"type":"permission_response","permissionID":"per_1","response":"always","expiresIn":60}"#,
        ],
    );
    assert_eq!(
        decision(&frames, "c1")["reason"],
        "the user allowed this call and granted its `always` patterns for the session for 1 minute"
    );
    let saved = store.last().unwrap();
    assert_eq!(saved.sessions[0].grants[0].expires_at, Some(1_060_000));

    clock.set(1_059_999);
    let frames = feed(&mut broker, &[&build("c2", "cargo build --release")]);
    assert_eq!(decision(&frames, "c2")["source"], "grant");
    assert_eq!(decision(&frames, "c2")["rule"]["expiresAt"], 1_060_000);

    clock.set(1_060_000);
    let frames = feed(&mut broker, &[&build("c3", "cargo build -v")]);
    assert_eq!(frames[0]["type"], "permission_request", "{frames:?}");
    let saved = store.last().unwrap();
    assert!(
        saved.sessions.iter().all(|s| s.grants.is_empty()),
        "{saved:?}"
    );
    assert_eq!(saved.sessions, broker.stored_state().sessions);
    let frames = feed(&mut broker, &[r#"{"type":"list_grants"}"#]);
    assert_eq!(frames[0]["grants"], serde_json::json!([]));
}

/// Stored grants whose end has passed while no broker ran are dropped by
/// the first step of the broker that reads them (and the drop stored);
/// the others keep their end.
#[test]
fn ended_stored_grants_are_dropped_at_the_first_step() {
    let clock = ManualClock::new();
    clock.set(5_000);
    let store = MemoryStore::new();
    let mut broker = support::in_process(clock, 0);
    let grant = |id: &str, pattern: &str, expires_at: Option<u64>| StoredGrant {
        grant_id: id.to_string(),
        permission: "bash".to_string(),
        pattern: format!("{pattern} *"),
        literal: pattern.len(),
        session_id: "s".to_string(),
        mode: None,
        expires_at,
    };
    let snapshot = Snapshot {
        version: 1,
        project_root: "/work/project".to_string(),
        project_grants: vec![
            grant("grant_ended", "make", Some(4_999)),
            grant("grant_later", "npm test", Some(9_000)),
        ],
        sessions: vec![StoredSession {
            session_id: "s".to_string(),
            parent_id: None,
            mode: "ask".to_string(),
            permissions: None,
            grants: vec![grant("grant_at", "cargo build", Some(5_000))],
            started: false,
            implicit: true,
            joined: Vec::new(),
        }],
        closed: Vec::new(),
    };
    // The store holds what the broker reads.
    toolgate::store::Store::save(&mut store.clone(), &snapshot).unwrap();
    assert!(broker.restore(Box::new(store.clone()), snapshot).is_empty());
    let frames = feed(&mut broker, &[r#"{"type":"list_grants"}"#]);
    assert_eq!(
        frames[0]["grants"],
        serde_json::json!([{"grantID":"grant_later","sessionID":"s","scope":"project",
                            "permission":"bash","pattern":"npm test *","expiresAt":9000}])
    );
    let saved = store.last().unwrap();
    let ids: Vec<&str> = saved
        .project_grants
        .iter()
        .map(|grant| grant.grant_id.as_str())
        .collect();
    assert_eq!(ids, ["grant_later"]);
    // The session was kept only for its grant: it is gone too.
    assert!(saved.sessions.is_empty(), "{saved:?}");
}
