//! Sessions through the spawned binary: closed sessions stay closed however
//! many others end and across restarts, and a restart changes no answer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use proptest::prelude::*;
use serde_json::{json, Value};

use crate::support;

fn call(session: &str, call_id: &str, command: &str) -> String {
    json!({"type":"tool_call","sessionID":session,"callID":call_id,"tool":"Bash","input":{"command":command}})
        .to_string()
}

/// The decision (`allow scope`, `deny mode`, ...) each call got.
fn decisions(lines: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in lines {
        let frame: Value = serde_json::from_str(line).unwrap();
        if frame["type"] == "decision" {
            let id = frame["callID"].as_str().unwrap().to_string();
            let verdict = format!("{} {}", frame["decision"], frame["source"]);
            assert!(
                out.insert(id.clone(), verdict).is_none(),
                "two decisions for {id}"
            );
        }
    }
    out
}

/// Run `frames` in one broker started with `args` in `root`; returns every
/// output line (read to the end, so none is missed however slow the machine).
fn run(root: &Path, args: &[String], frames: &[String]) -> Vec<String> {
    run_with(root, args, &[], frames)
}

/// [`run`] with more environment variables.
fn run_with(root: &Path, args: &[String], env: &[(&str, &str)], frames: &[String]) -> Vec<String> {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    let mut broker = support::Broker::start(root, args, &env);
    let mut text = String::new();
    for frame in frames {
        text.push_str(frame);
        text.push('\n');
    }
    broker.send_raw(text.as_bytes());
    let (status, lines, stderr) = broker.finish();
    assert!(status.success(), "{stderr}");
    lines
}

#[test]
fn an_ended_session_stays_closed_after_70000_others_end() {
    let root = support::project_dir("closed-70000");
    let args = vec!["--mode".to_string(), "auto".to_string()];
    let mut frames = Vec::new();
    for i in 0..70_000 {
        let id = format!("s{i}");
        frames.push(call(&id, &format!("c{i}"), "ls"));
        frames.push(json!({"type":"session_end","sessionID":id}).to_string());
    }
    frames.push(call("s0", "late", "rm -rf build"));
    frames.push(call("s69999", "late2", "rm -rf build"));
    frames.push(call("fresh", "late3", "rm -rf build"));
    let lines = run(&root, &args, &frames);
    let got = decisions(&lines);
    assert_eq!(got.len(), 70_003);
    assert_eq!(got["late"], "\"deny\" \"scope\"");
    assert_eq!(got["late2"], "\"deny\" \"scope\"");
    assert_eq!(got["late3"], "\"allow\" \"mode\"");
}

/// One step of a random session script.
#[derive(Debug, Clone)]
enum Step {
    Start {
        session: usize,
        parent: Option<usize>,
        mode: Option<&'static str>,
        scope: Option<usize>,
        /// `"join": true`.
        join: bool,
    },
    End(usize),
    SetMode(usize, &'static str),
    Call(usize, usize),
}

const SESSIONS: [&str; 5] = ["main", "research", "worker", "k", "z"];
const MODES: [&str; 5] = ["auto", "auto_edit", "ask", "plan", "readonly"];
const COMMANDS: [&str; 4] = ["rm -rf build", "git status", "cargo build", "cat src/a.rs"];

fn scope(n: usize) -> Value {
    match n {
        0 => json!({"allowedTools": ["Read"]}),
        1 => json!({"deniedTools": ["bash"]}),
        2 => json!({"commandPatterns": ["git *", "cat *"]}),
        _ => json!({"filePatterns": ["src/**"]}),
    }
}

fn step() -> impl Strategy<Value = Step> {
    let session = 0..SESSIONS.len();
    let mode = prop::sample::select(MODES.to_vec());
    prop_oneof![
        3 => (
            session.clone(),
            prop::option::of(0..SESSIONS.len()),
            prop::option::of(mode.clone()),
            prop::option::of(0usize..4),
            prop::bool::weighted(0.3)
        )
            .prop_map(|(session, parent, mode, scope, join)| Step::Start {
                session,
                parent,
                mode,
                scope,
                join
            }),
        1 => session.clone().prop_map(Step::End),
        2 => (session.clone(), mode).prop_map(|(s, m)| Step::SetMode(s, m)),
        5 => (session, 0..COMMANDS.len()).prop_map(|(s, c)| Step::Call(s, c)),
    ]
}

fn frames_of(steps: &[Step]) -> Vec<String> {
    steps
        .iter()
        .enumerate()
        .map(|(n, step)| match step {
            Step::Start {
                session,
                parent,
                mode,
                scope: narrowing,
                join,
            } => {
                let mut frame = json!({"type":"session_start","sessionID":SESSIONS[*session]});
                if let Some(parent) = parent {
                    frame["parentID"] = json!(SESSIONS[*parent]);
                }
                if let Some(mode) = mode {
                    frame["mode"] = json!(mode);
                }
                if let Some(narrowing) = narrowing {
                    frame["permissions"] = scope(*narrowing);
                }
                if *join {
                    frame["join"] = json!(true);
                }
                frame.to_string()
            }
            Step::End(session) => {
                json!({"type":"session_end","sessionID":SESSIONS[*session]}).to_string()
            }
            Step::SetMode(session, mode) => {
                json!({"type":"set_mode","sessionID":SESSIONS[*session],"mode":mode}).to_string()
            }
            // Each call differs from the one before (its description), so the
            // repeat counter, which a restart forgets, plays no part.
            Step::Call(session, command) => json!({
                "type":"tool_call","sessionID":SESSIONS[*session],"callID":format!("c{n}"),
                "tool":"Bash","input":{"command":COMMANDS[*command],"description":format!("d{n}")}
            })
            .to_string(),
        })
        .collect()
}

/// Every frame but `ready`, without line numbers (they count from 1 again after a restart).
fn answers(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .map(|line| {
            let mut frame: Value = serde_json::from_str(line).unwrap();
            if let Some(map) = frame.as_object_mut() {
                map.remove("line");
            }
            frame
        })
        .filter(|frame| frame["type"] != "ready")
        .collect()
}

fn same_with_and_without_restart(steps: &[Step], split: usize, name: &str) {
    same_with_and_without_restarts(steps, &[split], None, name);
}

/// One broker for the whole script, then the same script in several brokers
/// one after the other on one state directory (its journal, compacted every
/// few records when `compact` sets the floor, in bytes): the answers match.
fn same_with_and_without_restarts(
    steps: &[Step],
    splits: &[usize],
    compact: Option<&str>,
    name: &str,
) {
    let frames = frames_of(steps);
    let mut splits: Vec<usize> = splits
        .iter()
        .map(|split| (*split).min(frames.len()))
        .collect();
    splits.sort_unstable();
    let root = support::project_dir(name);
    let plain = ["--mode", "ask", "--on-ask", "deny"]
        .map(String::from)
        .to_vec();
    let straight = answers(&run(&root, &plain, &frames));
    let state = support::state_dir(name);
    let mut args = plain.clone();
    args.push("--state-dir".to_string());
    args.push(state.to_string_lossy().into_owned());
    let env: Vec<(&str, &str)> = compact
        .map(|bytes| vec![(toolgate::store::COMPACT_FLOOR_ENV, bytes)])
        .unwrap_or_default();
    let mut restarted = Vec::new();
    let mut from = 0;
    for until in splits.iter().copied().chain([frames.len()]) {
        restarted.extend(answers(&run_with(&root, &args, &env, &frames[from..until])));
        from = until;
    }
    assert_eq!(
        straight,
        restarted,
        "restarts after frames {splits:?} (compaction floor {compact:?}) changed the answers to:\n{}",
        frames.join("\n")
    );
}

/// The orchestrator example of `docs/modes-and-policy.md` (a `research`
/// sub-session under `main`) and the cases that once differed.
#[test]
fn a_restart_changes_no_answer_table() {
    let research = |parent: Option<usize>| Step::Start {
        session: 1,
        parent,
        mode: None,
        scope: Some(2),
        join: false,
    };
    // `worker` joined under `main` without a scope of its own, after
    // `research` (under `main`, with one) started.
    let joined = Step::Start {
        session: 2,
        parent: Some(0),
        mode: None,
        scope: None,
        join: true,
    };
    let cases: Vec<(Vec<Step>, usize)> = vec![
        // `research` under the implicit `main`: ending `main` ends it.
        (
            vec![
                Step::Call(0, 1),
                research(Some(0)),
                Step::End(0),
                Step::Call(1, 0),
            ],
            2,
        ),
        // an implicit parent's mode reaches its child after the restart
        (
            vec![
                research(Some(0)),
                Step::SetMode(0, "readonly"),
                Step::Call(1, 2),
            ],
            1,
        ),
        // a session started before the restart cannot be started again
        (vec![research(None), research(None), Step::Call(1, 0)], 1),
        (
            vec![
                Step::Call(3, 0),
                research(None),
                research(None),
                Step::Call(1, 0),
            ],
            2,
        ),
        // a refused start stays refused
        (
            vec![
                Step::Start {
                    session: 3,
                    parent: Some(3),
                    mode: None,
                    scope: None,
                    join: false,
                },
                Step::Call(3, 0),
            ],
            1,
        ),
        // an ended session stays ended; a session that was only ended too
        (vec![Step::Call(3, 0), Step::End(3), Step::Call(3, 0)], 2),
        (vec![Step::End(4), Step::Call(4, 0)], 1),
        // an implicit session started under a parent after the restart takes its mode
        (
            vec![
                Step::Start {
                    session: 0,
                    parent: None,
                    mode: Some("plan"),
                    scope: None,
                    join: false,
                },
                Step::Call(3, 1),
                Step::Start {
                    session: 3,
                    parent: Some(0),
                    mode: None,
                    scope: None,
                    join: false,
                },
                Step::SetMode(0, "auto"),
                Step::Call(3, 0),
            ],
            2,
        ),
        // a joined session keeps the scope of the sub-task it met (its
        // calls outside it denied), before and after the restart, even
        // once that sub-task ended
        (
            vec![
                research(Some(0)),
                joined.clone(),
                Step::Call(2, 0),
                Step::Call(2, 3),
            ],
            2,
        ),
        (
            vec![
                research(Some(0)),
                joined.clone(),
                Step::End(1),
                Step::Call(2, 0),
            ],
            3,
        ),
        // a sub-task started after the join does not narrow it
        (vec![joined.clone(), research(Some(0)), Step::Call(2, 0)], 2),
    ];
    for (n, (steps, split)) in cases.iter().enumerate() {
        same_with_and_without_restart(steps, *split, &format!("restart-table-{n}"));
    }
}

/// A session joined under `main` without a scope of its own (a hook's
/// sub-agent) after `main` started the sub-task `t1` with one keeps `t1`'s
/// narrowing after a restart of `serve` on the same state directory (it
/// used to come back with `main`'s scope alone, and its call was allowed),
/// and still once `t1` ended before the restart.
#[test]
fn a_joined_session_keeps_its_scope_across_a_restart() {
    for end_t1 in [false, true] {
        let name = format!("joined-restart-{end_t1}");
        let root = support::project_dir(&name);
        let state = support::state_dir(&name);
        let args: Vec<String> = ["serve", "--mode", "auto", "--on-ask", "deny", "--state-dir"]
            .map(String::from)
            .into_iter()
            .chain([state.to_string_lossy().into_owned()])
            .collect();
        let edit = |id: &str| {
            json!({"type":"tool_call","sessionID":"c","callID":id,"tool":"Edit",
                   "input":{"file_path":"src/a.rs","old_string":"a","new_string":"b"}})
            .to_string()
        };
        let mut frames = vec![
            json!({"type":"session_start","sessionID":"main"}).to_string(),
            json!({"type":"session_start","sessionID":"t1","parentID":"main",
                   "permissions":{"allowedTools":["Read"]}})
            .to_string(),
            json!({"type":"session_start","sessionID":"c","parentID":"main","join":true})
                .to_string(),
            call("c", "before", "rm -rf build"),
            edit("edit-before"),
        ];
        if end_t1 {
            frames.push(json!({"type":"session_end","sessionID":"t1"}).to_string());
        }
        let first = decisions(&run(&root, &args, &frames));
        assert_eq!(first["before"], "\"deny\" \"scope\"", "{first:?}");
        assert_eq!(first["edit-before"], "\"deny\" \"scope\"", "{first:?}");
        let after = decisions(&run(
            &root,
            &args,
            &[call("c", "after", "rm -rf build"), edit("edit-after")],
        ));
        assert_eq!(after["after"], "\"deny\" \"scope\"", "ended t1: {end_t1}");
        assert_eq!(
            after["edit-after"], "\"deny\" \"scope\"",
            "ended t1: {end_t1}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// A restart anywhere in a random script of starts, ends, mode changes
    /// and calls changes no answer.
    #[test]
    fn a_restart_changes_no_answer(steps in prop::collection::vec(step(), 1..30), split in 0usize..30) {
        same_with_and_without_restart(&steps, split, "restart-random");
    }

    /// The same with three restarts and the journal compacted into the
    /// snapshot every few records (floor 64 bytes), so that the state a
    /// broker starts from comes from a compacted snapshot, a journal
    /// replayed onto it, or both.
    #[test]
    fn restarts_and_compactions_change_no_answer(
        steps in prop::collection::vec(step(), 1..40),
        splits in prop::collection::vec(0usize..40, 3),
    ) {
        same_with_and_without_restarts(&steps, &splits, Some("64"), "restart-compact");
    }
}

/// Idle implicit sessions cost (almost) nothing: 150,000 distinct sessions
/// with one call each fit in a small, fixed memory (the broker kept about
/// 600 bytes per session before: 150,000 took some 88 MB).
#[cfg(target_os = "linux")]
#[test]
fn idle_sessions_are_forgotten() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    let root = support::project_dir("idle-forgotten");
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["--mode", "auto", "--on-ask", "deny"])
        .current_dir(&root)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let count = 150_000;
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let mut text = String::new();
        for i in 0..count {
            writeln!(text, "{}", call(&format!("s{i}"), "c", "ls")).unwrap();
        }
        stdin.write_all(text.as_bytes()).unwrap();
        stdin
    });
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    // `ready`, then one decision per call.
    for _ in 0..=count {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the broker stopped early"
        );
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let peak_kb: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    drop(writer.join().unwrap());
    assert!(child.wait().unwrap().success());
    assert!(
        peak_kb < 48 * 1024,
        "peak RSS {peak_kb} kB for {count} idle sessions"
    );
}
