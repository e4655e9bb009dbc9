//! `toolgate replay` streams: a large recording (questions answered a few
//! calls later by recorded ids, times recorded after their calls) replays
//! every call as recorded, the same bytes from a file and from a pipe; and
//! a pipe's first calls are decided while the writer has not finished.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support;

const START: u64 = 1_700_000_000_000;

/// A session as a live broker would have recorded it, both directions:
/// `calls` calls, every fourth a command that asks, its question answered
/// (`once` or `reject`, in turn) three calls later under the recorded id.
fn live_recording(calls: usize) -> String {
    let mut lines = vec![json!({"type": "session_start", "sessionID": "s"})];
    let mut answers: Vec<(usize, Value)> = Vec::new();
    for i in 0..calls {
        if i % 4 == 0 {
            let call = format!("c{i}");
            lines.push(
                json!({"type": "tool_call", "sessionID": "s", "callID": call,
                "tool": "bash", "input": {"command": format!("npm test -- part{i}")}}),
            );
            lines.push(
                json!({"type": "permission_request", "permissionID": format!("rec-{i}"),
                "sessionID": "s", "callID": call, "timestamp": START + i as u64}),
            );
            let (response, decision) = if i % 8 == 0 {
                ("once", "allow")
            } else {
                ("reject", "deny")
            };
            answers.push((
                i + 3,
                json!({"type": "permission_response", "permissionID": format!("rec-{i}"),
                       "response": response}),
            ));
            answers.push((
                i + 3,
                json!({"type": "decision", "sessionID": "s", "callID": call,
                       "decision": decision, "reason": "the user said so"}),
            ));
        } else {
            let call = format!("r{i}");
            lines.push(
                json!({"type": "tool_call", "sessionID": "s", "callID": call,
                "tool": "read", "input": {"filePath": format!("notes/{i}.md")}}),
            );
        }
        while answers.first().is_some_and(|(at, _)| *at <= i) {
            lines.push(answers.remove(0).1);
        }
    }
    lines.extend(answers.into_iter().map(|(_, line)| line));
    lines.iter().map(|line| format!("{line}\n")).collect()
}

fn replay(root: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("replay")
        .args(["--project-root", root.to_str().unwrap()])
        .args(args)
        .current_dir(root)
        .env_remove("TOOLGATE_MODE")
        .env_remove("TOOLGATE_PERMISSION")
        .env_remove("TOOLGATE_STATE_DIR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// 30,000 calls (seven times the window a call waits in): each decided once, as recorded, its question at its
/// recorded time; `--check` finds them alike; a pipe gives the same bytes.
#[test]
fn a_large_recording_replays_as_recorded_from_a_file_and_a_pipe() {
    let dir = support::project_dir("replay-stream-large");
    let root = dir.canonicalize().unwrap();
    let calls = 30_000;
    std::fs::write(root.join("live.jsonl"), live_recording(calls)).unwrap();
    let (code, out, err) = replay(&root, &["live.jsonl"]);
    assert_eq!(code, 0, "{err}");
    let frames: Vec<Value> = out
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let mut decided: HashMap<String, String> = HashMap::new();
    for frame in frames.iter().filter(|f| f["type"] == "decision") {
        let call = frame["callID"].as_str().unwrap().to_string();
        let verdict = frame["decision"].as_str().unwrap().to_string();
        assert!(
            decided.insert(call.clone(), verdict).is_none(),
            "{call} twice"
        );
    }
    assert_eq!(decided.len(), calls);
    for i in 0..calls {
        let (call, expected) = match i % 8 {
            0 => (format!("c{i}"), "allow"),
            4 => (format!("c{i}"), "deny"),
            _ => (format!("r{i}"), "allow"),
        };
        assert_eq!(decided[&call], expected, "{call}");
    }
    for question in frames.iter().filter(|f| f["type"] == "permission_request") {
        let call = question["callID"].as_str().unwrap();
        let i: u64 = call[1..].parse().unwrap();
        assert_eq!(question["timestamp"], START + i, "{question}");
    }
    let (code, _, err) = replay(&root, &["--check", "live.jsonl"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("every recorded decision was replayed alike"),
        "{err}"
    );
    // The same bytes through a pipe, which is read once.
    let fifo = root.join("pipe.jsonl");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let writer = {
        let (fifo, from) = (fifo.clone(), root.join("live.jsonl"));
        std::thread::spawn(move || {
            let text = std::fs::read(from).unwrap();
            std::fs::OpenOptions::new()
                .write(true)
                .open(fifo)
                .unwrap()
                .write_all(&text)
                .unwrap();
        })
    };
    let (code, piped, err) = replay(&root, &[fifo.to_str().unwrap()]);
    writer.join().unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(piped == out, "a pipe replays otherwise than the file");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A recording in a pipe is replayed as it comes: the first calls are
/// decided (and written) while the writer still holds the rest back.
#[test]
fn a_pipe_is_replayed_as_it_comes() {
    let dir = support::project_dir("replay-stream-pipe");
    let root = dir.canonicalize().unwrap();
    let fifo = root.join("pipe.jsonl");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["replay", "--project-root", root.to_str().unwrap()])
        .arg(&fifo)
        .current_dir(&root)
        .env_remove("TOOLGATE_MODE")
        .env_remove("TOOLGATE_PERMISSION")
        .env_remove("TOOLGATE_STATE_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (seen, decisions) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if line.contains(r#""type":"decision""#) {
                let _ = seen.send(line);
            }
        }
    });
    let call = |i: usize| {
        format!(
            "{}\n",
            json!({"type": "tool_call", "sessionID": "s", "callID": format!("r{i}"),
                   "tool": "read", "input": {"filePath": format!("notes/{i}.md")}})
        )
    };
    let half = 10_000;
    let mut pipe = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    let first: String = (0..half).map(call).collect();
    pipe.write_all(first.as_bytes()).unwrap();
    pipe.flush().unwrap();
    // Decisions come while the pipe is still open (the replay holds a few
    // thousand calls back, waiting for what the recording says of them).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut early = 0;
    while early < half / 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        match decisions.recv_timeout(left) {
            Ok(_) => early += 1,
            Err(_) => panic!("only {early} decisions before the writer finished"),
        }
    }
    let rest: String = (half..2 * half).map(call).collect();
    pipe.write_all(rest.as_bytes()).unwrap();
    drop(pipe);
    assert!(child.wait().unwrap().success());
    reader.join().unwrap();
    let total = early + decisions.try_iter().count();
    assert_eq!(total, 2 * half);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A recorded call that differs from an earlier one only in its `callID`
/// is judged once and reused (`replay/read.rs`, `Seen`): every call of a
/// recording full of such repeats, and of lines that only look like them,
/// is decided exactly as `serve` decides the same lines, call by call.
/// The near misses: a `callID` key inside the input that the policy takes
/// as the tool's subject, the same top-level id with a different nested
/// one, ids with escapes, a number as the id, spaces around the colon,
/// the id first or last, other sessions and working directories, a
/// duplicate id.
#[test]
fn repeated_calls_replay_as_serve_decides_them() {
    let dir = support::project_dir("replay-stream-repeats");
    let root = dir.canonicalize().unwrap();
    std::fs::create_dir_all(root.join("sub")).unwrap();
    let policy = root.join("toolgate.json");
    std::fs::write(
        &policy,
        json!({
            "tools": {"mcp__x__run": {"kind": "execute", "subject": "callID"}},
            "permission": {
                "mcp__x__run": {"*": "allow", "rm*": "deny"},
                "bash": {"git push*": "deny"},
                "doom_loop": "allow"
            }
        })
        .to_string(),
    )
    .unwrap();
    let cwd = root.to_str().unwrap().to_string();
    let sub = root.join("sub").to_str().unwrap().to_string();
    let commands = [
        "git status",
        "rm -rf target",
        "ls",
        "git push origin main",
        "cat .env",
    ];
    let mut lines = Vec::new();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    for i in 0..4000 {
        let id = format!("c-{i}");
        let line = match next(10) {
            0 => format!(
                r#"{{"type":"tool_call","callID":"{id}","sessionID":"main","tool":"mcp__x__run","input":{{"callID":"{}"}}}}"#,
                ["rm-1", "ok-1"][next(2)]
            ),
            // The same top-level id, the nested one decides.
            1 => format!(
                r#"{{"type":"tool_call","callID":"same","sessionID":"s{}","tool":"mcp__x__run","input":{{"callID":"{}"}}}}"#,
                i,
                ["rm-2", "ok-2"][next(2)]
            ),
            2 => format!(
                r#"{{"tool":"bash","input":{{"command":"{}"}},"type":"tool_call","sessionID":"main","callID":"{id}"}}"#,
                commands[next(commands.len())]
            ),
            3 => format!(
                r#"{{"type":"tool_call","callID":"c\u002d{i}\"q","tool":"bash","input":{{"command":"{}"}}}}"#,
                commands[next(commands.len())]
            ),
            4 => format!(
                r#"{{"type":"tool_call","callID" : "{id}","tool":"read","input":{{"file_path":"{}"}}}}"#,
                [".env", "README.md", "../x"][next(3)]
            ),
            5 => format!(
                r#"{{"type":"tool_call","callID":{i},"tool":"bash","input":{{"command":"ls"}}}}"#
            ),
            6 => format!(
                r#"{{"type":"tool_call","callID":"{id}","tool":"read","cwd":"{}","input":{{"file_path":"{}"}}}}"#,
                [&cwd, &sub, "/tmp"][next(3)],
                ["../secret", "a.txt", "/etc/passwd"][next(3)]
            ),
            7 => format!(
                r#"{{"type":"tool_call","callID":"{id}","sessionID":"{}","tool":"edit","input":{{"file_path":"{}","old_string":"a","new_string":"b"}}}}"#,
                ["main", "other"][next(2)],
                ["src/lib.rs", ".git/config", "/etc/hosts"][next(3)]
            ),
            8 => format!(
                r#"{{"type":"tool_call","callID":"dup","tool":"bash","input":{{"command":"{}"}}}}"#,
                commands[next(commands.len())]
            ),
            _ => format!(
                r#"{{"type":"tool_call","callID":"{id}","tool":"grep","input":{{"pattern":"fn","path":"{}"}}}}"#,
                ["src", "/", "sub"][next(3)]
            ),
        };
        lines.push(line);
    }
    let recording: String = lines.iter().map(|line| format!("{line}\n")).collect();
    std::fs::write(root.join("repeats.jsonl"), &recording).unwrap();
    let policy = policy.to_str().unwrap();
    let (code, replayed, err) = replay(
        &root,
        &["--mode", "auto", "--policy", policy, "repeats.jsonl"],
    );
    assert_eq!(code, 0, "{err}");
    let root_arg = root.to_str().unwrap();
    // The recording from a file: its answers are more than a pipe holds.
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args([
            "--mode",
            "auto",
            "--policy",
            policy,
            "--project-root",
            root_arg,
        ])
        .current_dir(&root)
        .env_remove("TOOLGATE_MODE")
        .env_remove("TOOLGATE_PERMISSION")
        .env_remove("TOOLGATE_STATE_DIR")
        .env_remove("TOOLGATE_MANAGED")
        .stdin(std::fs::File::open(root.join("repeats.jsonl")).unwrap())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let served = String::from_utf8_lossy(&out.stdout).into_owned();
    // Nothing asks (auto mode, no rule that asks): every call is decided
    // as it comes, so both outputs hold the same answers in the same order.
    assert!(!replayed.contains("permission_request"), "{replayed}");
    assert!(!served.contains("permission_request"), "{served}");
    // Decisions and errors, in order: the same ids, verdicts, reasons.
    let answers = |out: &str| -> Vec<Value> {
        out.lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .filter(|frame| frame["type"] == "decision" || frame["type"] == "error")
            .collect()
    };
    let (replayed, served) = (answers(&replayed), answers(&served));
    assert!(replayed.len() >= 3500, "{}", replayed.len());
    assert_eq!(replayed.len(), served.len());
    for (index, (a, b)) in replayed.iter().zip(&served).enumerate() {
        assert_eq!(a, b, "answer {index}: replay {a} against serve {b}");
    }
    // The near misses did decide differently.
    let verdicts = |id: &str| -> Vec<&str> {
        replayed
            .iter()
            .filter(|frame| frame["callID"] == id)
            .filter_map(|frame| frame["decision"].as_str())
            .collect()
    };
    let same = verdicts("same");
    assert!(
        same.contains(&"allow") && same.contains(&"deny"),
        "{same:?}"
    );
}
