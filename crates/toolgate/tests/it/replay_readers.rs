//! Real recordings replayed: `tests/replay/` holds transcripts Claude Code
//! 2.1.328 and a rollout Codex 0.169.0 wrote while driven offline through
//! tool calls (`scripts/record-fixtures` makes them again). Each is replayed
//! through the spawned binary and compared with its expected replay in
//! `tests/replay/expected/` (`UPDATE_EXPECT=1` rewrites them); what each
//! replay must say is also checked call by call, and `--check` finds the
//! replayed decisions alike to what the agents did.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/replay")
}

/// Replay `files` (relative to tests/replay) with `args`: exit code, stdout, stderr.
fn replay(args: &[&str], files: &[&str]) -> (i32, String, String) {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = support::project_dir(&format!("replay-readers-{run}"));
    let mut argv = vec!["replay", "--project-root", "/work/project"];
    argv.extend_from_slice(args);
    let paths: Vec<String> = files
        .iter()
        .map(|file| fixtures().join(file).to_string_lossy().into_owned())
        .collect();
    argv.extend(paths.iter().map(String::as_str));
    let out = support::run(&dir, &argv, "");
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// `callID decision source` of every decision, in order.
fn decisions(out: &str) -> Vec<String> {
    out.lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|frame| frame["type"] == "decision")
        .map(|frame| {
            format!(
                "{} {} {}",
                frame["callID"].as_str().unwrap(),
                frame["decision"].as_str().unwrap(),
                frame["source"].as_str().unwrap()
            )
        })
        .collect()
}

fn expect(name: &str, out: &str) {
    let path = fixtures().join("expected").join(name);
    if std::env::var("UPDATE_EXPECT").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, out).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        expected == out,
        "{name} differs from its expected replay (UPDATE_EXPECT=1 rewrites it)\nexpected:\n{expected}\nreplayed:\n{out}"
    );
}

const SUB_AGENT: &str = "claude/accept-edits.jsonl-agent-af78e4805a1eb5ca6.jsonl";

#[test]
fn a_claude_code_session_with_its_sub_agent_replays() {
    let (code, out, err) = replay(&[], &["claude/accept-edits.jsonl", SUB_AGENT]);
    assert_eq!(code, 0, "{err}");
    expect("claude-accept-edits.out.jsonl", &out);
    // acceptEdits: the read, `ls` and the write pass; `rm -rf src` asks and
    // is refused as Claude Code's deny rule refused it; `touch made` and
    // the sub-agent ask and are answered as they went (they ran); the
    // sub-agent's calls run in its child session, in the same broker.
    assert_eq!(
        decisions(&out),
        vec![
            "toolu_0000 allow mode",
            "toolu_0001 allow mode",
            "toolu_0002 allow mode",
            "toolu_0003 deny user",
            "toolu_0004 allow user",
            "toolu_0005 allow user",
            "toolu_s0000 allow mode",
            "toolu_s0001 allow user",
        ]
    );
    let frames: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let child = frames
        .iter()
        .find(|f| f["type"] == "session_started" && f["parentID"].is_string())
        .unwrap();
    assert!(child["sessionID"]
        .as_str()
        .unwrap()
        .ends_with("/agent/af78e4805a1eb5ca6"));
    assert_eq!(
        child["mode"], "auto_edit",
        "the sub-agent inherits acceptEdits"
    );
    let rm = frames
        .iter()
        .find(|f| f["type"] == "decision" && f["callID"] == "toolu_0003")
        .unwrap();
    assert_eq!(
        rm["message"],
        "Permission to use Bash with command rm -rf src has been denied."
    );
    let (code, _, err) = replay(&["--check"], &["claude/accept-edits.jsonl", SUB_AGENT]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_claude_code_plan_session_replays_and_checks() {
    let (code, out, err) = replay(&[], &["claude/plan.jsonl"]);
    assert_eq!(code, 0, "{err}");
    expect("claude-plan.out.jsonl", &out);
    assert_eq!(
        decisions(&out),
        vec!["toolu_0000 allow mode", "toolu_0001 deny mode"]
    );
    let (code, _, err) = replay(&["--check"], &["claude/plan.jsonl"]);
    assert_eq!(code, 0, "{err}");
    // The whole directory: two recordings (the sub-agent's transcript joins
    // its session's), ten calls.
    let (code, out, _) = replay(&["--summary"], &["claude"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("10 calls in 2 files\n"), "{out}");
}

#[test]
fn a_codex_rollout_replays_and_checks() {
    let (code, out, err) = replay(&[], &["codex/workspace-write.jsonl"]);
    assert_eq!(code, 0, "{err}");
    expect("codex-workspace-write.out.jsonl", &out);
    // `approval_policy: never`: auto mode; the read, the shell write and the
    // patch pass, as they did.
    assert_eq!(
        decisions(&out),
        vec![
            "call_0000 allow mode",
            "call_0001 allow mode",
            "call_0002 allow mode"
        ]
    );
    let (code, _, err) = replay(&["--check"], &["codex/workspace-write.jsonl"]);
    assert_eq!(code, 0, "{err}");
    // A stricter policy: the shell write and the patch are denied, and
    // `--check` names both.
    let (code, out, _) = replay(
        &[
            "--check",
            "--permission",
            r#"{"bash":{"echo *":"deny"},"edit":"deny"}"#,
        ],
        &["codex/workspace-write.jsonl"],
    );
    assert_eq!(code, 1);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(
        out.contains("call_0001 exec_command `echo hi > made.txt`: recorded allow"),
        "{out}"
    );
    assert!(out.contains("call_0002 apply_patch"), "{out}");
}

/// The formats are told apart without `--from`, a whole directory at once.
#[test]
fn formats_are_detected_in_a_directory() {
    let (code, out, err) = replay(&[], &["claude", "codex"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with(r#"{"type":"ready""#))
            .count(),
        3,
        "one broker per recording: the sub-agent's transcript joins its session's"
    );
    assert_eq!(decisions(&out).len(), 13);
}
