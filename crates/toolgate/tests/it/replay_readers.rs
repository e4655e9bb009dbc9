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

/// Replay `files` (relative to tests/replay) with `args` and
/// `--project-root /work/project`: exit code, stdout, stderr.
fn replay(args: &[&str], files: &[&str]) -> (i32, String, String) {
    let mut rooted = vec!["--project-root", "/work/project"];
    rooted.extend_from_slice(args);
    replay_at_recorded_root(&rooted, files)
}

/// Replay `files` (relative to tests/replay) with `args` only: without
/// `--project-root`, an agent's recording is judged at its recorded `cwd`.
fn replay_at_recorded_root(args: &[&str], files: &[&str]) -> (i32, String, String) {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = support::project_dir(&format!("replay-readers-{run}"));
    let mut argv = vec!["replay"];
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
    // is refused as Claude Code's deny rule refused it (source `replay`: no
    // person answered); `touch made` and
    // the sub-agent ask, and the recording holds no answer: Claude Code's
    // own acceptEdits let them run without asking anyone (its
    // `permissionDecision` says so), so they are denied, source `replay`,
    // not answered as if a person had allowed them. The sub-agent's calls
    // run in its child session, in the same broker.
    assert_eq!(
        decisions(&out),
        vec![
            "toolu_0000 allow mode",
            "toolu_0001 allow mode",
            "toolu_0002 allow mode",
            "toolu_0003 deny replay",
            "toolu_0004 deny replay",
            "toolu_0005 deny replay",
            "toolu_s0000 allow mode",
            "toolu_s0001 deny replay",
        ]
    );
    assert!(
        out.contains(r#""reason":"the recording holds no answer to this question: Claude Code's config allowed it without asking anyone (subcommandResults)""#),
        "{out}"
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
        rm["reason"],
        "the recording says the call was refused: Permission to use Bash with command rm -rf src has been denied."
    );
    // --check lists the three calls Claude Code ran and toolgate would have
    // asked about.
    let (code, out, _) = replay(&["--check"], &["claude/accept-edits.jsonl", SUB_AGENT]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out.lines().count(), 3, "{out}");
    assert!(out.contains("toolu_0004 Bash `touch made`: recorded allow (Claude Code's config allowed it without asking anyone (subcommandResults)), replayed deny (replay"), "{out}");
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
    // The whole directory: four recordings (the sub-agent's transcript
    // joins its session's), 26 calls.
    let (code, out, _) = replay(&["--summary"], &["claude"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("26 calls in 4 files\n"), "{out}");
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
        5,
        "one broker per recording: the sub-agent's transcript joins its session's"
    );
    assert_eq!(decisions(&out).len(), 29);
}

const RISKY: &str = "claude/accept-edits-risky.jsonl";

/// A real acceptEdits session replayed under `--mode plan`: its reads are
/// allowed and every edit, write, `rm`, `curl | sh` and `git push` refused
/// by plan mode, whatever mode the transcript recorded; the paths keep
/// their meaning (the recorded cwd is the project root), so nothing asks
/// as an outside directory.
#[test]
fn a_risky_session_replayed_under_plan_mode() {
    let (code, out, err) = replay_at_recorded_root(&["--mode", "plan"], &[RISKY]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        decisions(&out),
        vec![
            "toolu_0000 allow mode",
            "toolu_0001 allow mode",
            "toolu_0002 deny mode",
            "toolu_0003 deny mode",
            "toolu_0004 deny mode",
            "toolu_0005 deny mode",
            "toolu_0006 deny mode",
            "toolu_0007 allow mode",
        ]
    );
    assert!(!out.contains("external_directory"), "{out}");
    assert!(!out.contains("permission_request"), "{out}");
    let (code, summary, _) = replay_at_recorded_root(&["--mode", "plan", "--summary"], &[RISKY]);
    assert_eq!(code, 0);
    for said in [
        "mode: plan for every session (--mode); 1 recorded mode set aside",
        "project root: /work/project (the directory the agent recorded; --project-root to choose another)",
        "outcomes read: 7 from the agent's permission record, 1 from the result's text",
    ] {
        assert!(summary.contains(said), "{said}\n{summary}");
    }
    // The same session in the mode it recorded: the edit and the write
    // run, and what Claude Code refused (its `-p` run could not ask) is
    // refused, never read as the user allowing it.
    let (code, out, err) = replay_at_recorded_root(&[], &[RISKY]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        decisions(&out),
        vec![
            "toolu_0000 allow mode",
            "toolu_0001 allow mode",
            "toolu_0002 allow mode",
            "toolu_0003 allow mode",
            "toolu_0004 deny replay",
            "toolu_0005 deny replay",
            "toolu_0006 deny replay",
            "toolu_0007 allow mode",
        ]
    );
    assert!(out.contains(r#""reason":"the recording says the call was refused: This Bash command contains multiple operations. The following part requires approval: cargo fmt"#), "{out}");
    assert!(
        out.contains(
            r#""reason":"the recording says the call was refused: This command requires approval""#
        ),
        "{out}"
    );
    let (_, summary, _) = replay_at_recorded_root(&["--summary"], &[RISKY]);
    assert!(summary.contains("mode: as recorded"), "{summary}");
    assert!(
        summary.contains(
            "questions answered: 0 with a recorded answer, 3 with a recorded refusal, 0 inferred"
        ),
        "{summary}"
    );
    // `--check` finds the replay alike to what Claude Code did.
    let (code, out, err) = replay_at_recorded_root(&["--check"], &[RISKY]);
    assert_eq!(code, 0, "{out}{err}");
}

/// Every kind of refusal Claude Code 2.1.328 writes is read from its
/// permission record; the only call replayed differently is the one its
/// hook denied (toolgate has no such hook).
#[test]
fn every_refusal_kind_is_read_from_the_permission_record() {
    let (code, out, _) = replay_at_recorded_root(&["--check"], &["claude/refusals.jsonl"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.contains("toolu_0004 Bash `echo hook-me`: recorded deny (PreToolUse:Bash hook error: no hook-me here (Claude Code's hook refused it: permission-rule; hook:PreToolUse))"), "{out}");
    let (_, summary, _) = replay_at_recorded_root(&["--summary"], &["claude/refusals.jsonl"]);
    assert!(
        summary.contains(
            "outcomes read: 8 from the agent's permission record, 0 from the result's text"
        ),
        "{summary}"
    );
}

/// A transcript without permission records (an older Claude Code): the
/// refusals are read from their text, and the summary says so; what ran is
/// answered by inference, counted as such.
#[test]
fn without_permission_records_the_text_is_read_and_answers_are_inferred() {
    let text = std::fs::read_to_string(fixtures().join(RISKY)).unwrap();
    let stripped: String = text
        .lines()
        .map(|line| {
            let mut record: Value = serde_json::from_str(line).unwrap();
            if let Some(fields) = record.as_object_mut() {
                fields.remove("permissionDecision");
                fields.remove("toolDenialKind");
            }
            format!("{record}\n")
        })
        .collect();
    let dir = support::project_dir("replay-older-transcript");
    let file = dir.join("older.jsonl");
    std::fs::write(&file, stripped).unwrap();
    let (code, out, err) = support::run(&dir, &["replay", file.to_str().unwrap()], "");
    assert_eq!(code, 0, "{err}");
    let decided = decisions(&out);
    assert_eq!(
        decided[4..7],
        [
            "toolu_0004 deny replay",
            "toolu_0005 deny replay",
            "toolu_0006 deny replay"
        ],
        "{decided:?}"
    );
    let (_, summary, _) = support::run(
        &dir,
        &[
            "replay",
            "--summary",
            "--mode",
            "ask",
            file.to_str().unwrap(),
        ],
        "",
    );
    for said in [
        "outcomes read: 0 from the agent's permission record, 8 from the result's text",
        "questions answered: 0 with a recorded answer, 3 with a recorded refusal, 2 inferred (the recording says only that the call ran)",
    ] {
        assert!(summary.contains(said), "{said}\n{summary}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
