//! Nothing is lost when the disk runs out (issue 25), through the spawned
//! binary: under a file-size limit (`ulimit -f`) the hook denies and `serve`
//! keeps deciding instead of dying from SIGXFSZ; on a full disk (a small
//! tmpfs; these tests are skipped with a message where it cannot be
//! mounted) a session end and a revocation are in force at once, their
//! frames say they are not saved, saving is retried, and the exit says
//! what was lost when it never succeeded.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use toolgate::store::{journal_file, session_fingerprint, state_file};

use crate::support::{count_type, project_dir, state_dir, Broker};

/// `toolgate ARGS` under `ulimit -f 0` (no regular file may grow), with
/// `input` on stdin and end of input; stderr piped, or into `stderr`.
fn limited(root: &Path, args: &[&str], input: &str) -> Output {
    limited_to(root, args, input, Stdio::piped())
}

fn limited_to(root: &Path, args: &[&str], input: &str, stderr: Stdio) -> Output {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -f 0 && exec "$0" "$@""#)
        .arg(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .current_dir(root)
        .env_remove("TOOLGATE_MODE")
        .env_remove("TOOLGATE_PERMISSION")
        .env_remove("TOOLGATE_STATE_DIR")
        .env_remove("TOOLGATE_SOCKET")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    child.wait_with_output().unwrap()
}

/// How a process ended, for messages: its code, or the signal that killed it.
fn ended(output: &Output) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (output.status.code(), output.status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => "unknown".to_string(),
    }
}

fn frames_of(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn frame<'a>(frames: &'a [Value], kind: &str, key: &str, value: &str) -> &'a Value {
    frames
        .iter()
        .find(|f| f["type"] == kind && f[key] == value)
        .unwrap_or_else(|| panic!("no {kind} with {key} {value} in {frames:#?}"))
}

/// Claude Code's PreToolUse input for `ls` in `root`.
fn claude_bash_ls(root: &Path) -> String {
    serde_json::json!({
        "session_id": "s1",
        "cwd": root,
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "tool_use_id": "t1",
    })
    .to_string()
}

/// `toolgate hook claude` with its state in `state`.
fn hook_args<'a>(state: &'a Path, root: &'a Path) -> [&'a str; 6] {
    [
        "hook",
        "claude",
        "--state-dir",
        state.to_str().unwrap(),
        "--project-root",
        root.to_str().unwrap(),
    ]
}

#[test]
fn under_a_file_size_limit_the_hook_denies_rather_than_dying() {
    let root = project_dir("fsize-hook").canonicalize().unwrap();
    let state = state_dir("fsize-hook");
    let input = claude_bash_ls(&root);
    let args = hook_args(&state, &root);
    let output = limited(&root, &args, &input);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Killed by SIGXFSZ (no answer) the agent would run the call.
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}: {stderr}",
        ended(&output)
    );
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    let specific = &answer["hookSpecificOutput"];
    assert_eq!(specific["permissionDecision"], "deny", "{answer}");
    let reason = specific["permissionDecisionReason"].as_str().unwrap();
    assert!(reason.contains("File too large"), "{reason}");
    assert!(reason.contains(state.to_str().unwrap()), "{reason}");
}

/// With stderr a file the limit forbids to grow too, every line toolgate
/// would say there fails; the hook still answers (an `eprintln!` that
/// panicked made it exit 101 without an answer, which the agents take as
/// "go ahead").
#[test]
fn under_a_file_size_limit_a_hook_that_cannot_write_stderr_still_answers() {
    let root = project_dir("fsize-hook-stderr").canonicalize().unwrap();
    let state = state_dir("fsize-hook-stderr");
    // Something to warn about at start: a journal with no snapshot.
    std::fs::write(journal_file(&state_file(&state, &root)), "{}\n").unwrap();
    let input = claude_bash_ls(&root);
    let log = state.join("stderr.log");
    let stderr = std::fs::File::create(&log).unwrap();
    let args = hook_args(&state, &root);
    let output = limited_to(&root, &args, &input, Stdio::from(stderr));
    assert_eq!(output.status.code(), Some(0), "{}", ended(&output));
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        answer["hookSpecificOutput"]["permissionDecision"], "deny",
        "{answer}"
    );
    assert_eq!(std::fs::metadata(&log).unwrap().len(), 0);
}

#[test]
fn under_a_file_size_limit_serve_keeps_deciding_and_says_what_was_lost() {
    let root = project_dir("fsize-serve").canonicalize().unwrap();
    let state = state_dir("fsize-serve");
    let audit = state.join("audit.jsonl");
    let args = [
        "serve",
        "--mode",
        "auto",
        "--project-root",
        root.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
    ];
    let input = [
        r#"{"type":"session_start","sessionID":"build","mode":"auto"}"#,
        r#"{"type":"tool_call","sessionID":"build","callID":"c1","tool":"bash","input":{"command":"rm -rf build"}}"#,
        r#"{"type":"session_end","sessionID":"build"}"#,
        r#"{"type":"tool_call","sessionID":"main","callID":"c2","tool":"bash","input":{"command":"rm -rf build"}}"#,
    ]
    .join("\n")
        + "\n";
    let output = limited(&root, &args, &input);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let frames = frames_of(&output.stdout);
    assert!(
        output.status.code().is_some(),
        "{}: {frames:#?} {stderr}",
        ended(&output)
    );
    // Every call is answered; what could not be recorded in the audit log
    // is denied.
    for call in ["c1", "c2"] {
        let decision = frame(&frames, "decision", "callID", call);
        assert_eq!(decision["decision"], "deny", "{decision}");
        let reason = decision["reason"].as_str().unwrap();
        assert!(reason.contains("File too large"), "{reason}");
    }
    let started = frame(&frames, "session_started", "sessionID", "build");
    assert!(
        started["notSaved"]
            .as_str()
            .is_some_and(|why| why.contains("File too large")),
        "{started}"
    );
    let ended = frame(&frames, "session_ended", "sessionID", "build");
    assert!(
        ended["notSaved"]
            .as_str()
            .is_some_and(|why| why.contains("File too large")),
        "{ended}"
    );
    // Never written: the exit says so.
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the end of session `build`"), "{stderr}");
    assert!(stderr.contains("lost"), "{stderr}");
}

/// A small tmpfs for one test, unmounted on drop; `None` (with a message)
/// where it cannot be mounted (not root, no mount namespace rights).
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(name: &str) -> Option<Tmpfs> {
        let dir =
            std::env::temp_dir().join(format!("toolgate-tmpfs-{}-{name}", std::process::id()));
        let _ = Command::new("umount")
            .arg(&dir)
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(&dir)
            .output();
        let why = match mounted {
            Ok(out) if out.status.success() => return Some(Tmpfs { dir }),
            Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_string(),
            Err(err) => err.to_string(),
        };
        let _ = writeln!(
            std::io::stderr(),
            "skipped: a tmpfs cannot be mounted at {} ({why})",
            dir.display()
        );
        let _ = std::fs::remove_dir(&dir);
        None
    }

    /// Fill the disk so that the broker's next journal record needs room
    /// the disk no longer has. The broker writes the journal at its own
    /// offset, so its last page must be full of its own records: a session
    /// start with an id of the right length (`p…`) first brings the journal
    /// to one byte short of a page; then a file takes every page left.
    fn fill(&self, broker: &mut Broker, journal: &Path) -> PathBuf {
        // Ids no earlier fill of this disk used (a second start is refused).
        static FILLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let tag = FILLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let page = page_size();
        let size = || std::fs::metadata(journal).unwrap().len();
        let pad = |broker: &mut Broker, id: &str| {
            broker.send(&format!(
                r#"{{"type":"session_start","sessionID":"{id}","mode":"plan"}}"#
            ));
            let needle = format!(r#""type":"session_started","sessionID":"{id}""#);
            broker.wait_for("the padding session", |lines| {
                lines.iter().any(|line| line.contains(&needle))
            });
        };
        // What a start's record costs besides its id.
        let before = size();
        let probe = format!("q{tag}");
        pad(broker, &probe);
        let now = size();
        let base = now - before - probe.len() as u64 + format!("p{tag}").len() as u64;
        let n = match (page - 1 - (now + base) % page) % page {
            0 => page,
            n => n,
        };
        pad(broker, &format!("p{tag}{}", "p".repeat(n as usize)));
        assert_eq!(size() % page, page - 1, "the padding missed");
        let path = self.dir.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 64 * 1024];
        loop {
            match file.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(err) if err.raw_os_error() == Some(28) => break,
                Err(err) => panic!("filling {}: {err}", path.display()),
            }
        }
        path
    }
}

/// The size of a memory page (what a tmpfs counts), from `getconf`.
fn page_size() -> u64 {
    Command::new("getconf")
        .arg("PAGESIZE")
        .output()
        .ok()
        .and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse().ok())
        .unwrap_or(4096)
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn serve_args(root: &Path, state: &Path) -> Vec<String> {
    [
        "serve",
        "--mode",
        "ask",
        "--project-root",
        root.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ]
    .map(str::to_string)
    .to_vec()
}

fn start(root: &Path, state: &Path) -> Broker {
    let broker = Broker::start(root, &serve_args(root, state), &[]);
    broker.wait_for("ready", |lines| !lines.is_empty());
    broker
}

const START_BUILD: &str = r#"{"type":"session_start","sessionID":"build","mode":"auto"}"#;
const END_BUILD: &str = r#"{"type":"session_end","sessionID":"build"}"#;

fn rm_build(call: &str) -> String {
    format!(
        r#"{{"type":"tool_call","sessionID":"build","callID":"{call}","tool":"bash","input":{{"command":"rm -rf build"}}}}"#
    )
}

fn git_push(call: &str) -> String {
    format!(
        r#"{{"type":"tool_call","sessionID":"main","callID":"{call}","tool":"bash","input":{{"command":"git push"}}}}"#
    )
}

fn decided(broker: &Broker, call: &str) -> Value {
    let what = format!("the decision for {call}");
    broker.wait_for(&what, |lines| {
        lines
            .iter()
            .any(|line| line.contains(r#""type":"decision""#) && line.contains(call))
    });
    frame(&broker.frames(), "decision", "callID", call).clone()
}

/// A journal with a session `build` started (auto mode) and a project grant
/// for `git push`; returns the grant's id.
fn prepare(broker: &mut Broker) -> String {
    broker.send(START_BUILD);
    broker.send(&git_push("p1"));
    broker.wait_for("the question", |lines| {
        count_type(lines, "permission_request") == 1
    });
    let frames = broker.frames();
    let request = frame(&frames, "permission_request", "callID", "p1");
    let permission = request["permissionID"].as_str().unwrap();
    broker.send(&format!(
        r#"{{"type":"permission_response","permissionID":"{permission}","response":"always","scope":"project"}}"#
    ));
    assert_eq!(decided(broker, "p1")["decision"], "allow");
    broker.send(r#"{"type":"list_grants"}"#);
    broker.wait_for("grants", |lines| count_type(lines, "grants") == 1);
    let frames = broker.frames();
    let grants = frames.iter().find(|f| f["type"] == "grants").unwrap();
    grants["grants"][0]["grantID"].as_str().unwrap().to_string()
}

/// After a restart: whether `build` still runs `rm -rf build` and whether
/// the grant still allows `git push`.
fn after_restart(root: &Path, state: &Path) -> (Value, Vec<Value>) {
    let mut broker = start(root, state);
    broker.send(&rm_build("c9"));
    let build = decided(&broker, "c9");
    broker.send(&git_push("p9"));
    broker.wait_for("p9 asked or decided", |lines| {
        lines.iter().any(|line| line.contains("\"p9\""))
    });
    let (_, lines, _) = broker.finish();
    let push: Vec<Value> = lines
        .iter()
        .filter(|line| line.contains("\"p9\""))
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (build, push)
}

#[test]
fn a_session_end_and_a_revocation_on_a_full_disk_are_saved_once_there_is_room() {
    let Some(disk) = Tmpfs::mount("end-revoke") else {
        return;
    };
    let root = project_dir("full-end-revoke").canonicalize().unwrap();
    let state = disk.dir.join("state");
    let mut broker = start(&root, &state);
    let grant = prepare(&mut broker);
    let filler = disk.fill(&mut broker, &journal_file(&state_file(&state, &root)));

    broker.send(END_BUILD);
    broker.send(&format!(r#"{{"type":"revoke_grant","grantID":"{grant}"}}"#));
    broker.wait_for("the revocation", |lines| count_type(lines, "grants") == 2);
    // In force at once.
    broker.send(&rm_build("c1"));
    assert_eq!(decided(&broker, "c1")["decision"], "deny");
    let frames = broker.frames();
    let ended = frame(&frames, "session_ended", "sessionID", "build").clone();
    let revoked = frames
        .iter()
        .filter(|f| f["type"] == "grants")
        .nth(1)
        .cloned();

    // Room again, then a clean stop: what was not saved is saved at exit.
    std::fs::remove_file(filler).unwrap();
    broker.signal("TERM");
    let (status, _, stderr) = broker.wait_exit();
    let (build, push) = after_restart(&root, &state);
    assert_eq!(build["decision"], "deny", "the ended session ran: {build}");
    assert_eq!(build["source"], "scope", "{build}");
    assert!(
        push.iter().all(|f| f["decision"] != "allow"),
        "the revoked grant allowed: {push:?}"
    );
    assert!(status.success(), "{status}: {stderr}");
    assert!(!stderr.contains("lost"), "{stderr}");
    assert!(
        ended["notSaved"]
            .as_str()
            .is_some_and(|why| why.contains("No space left on device")),
        "{ended}"
    );
    let revoked = revoked.unwrap();
    assert!(
        revoked["grants"].as_array().unwrap().is_empty(),
        "{revoked}"
    );
    assert!(
        revoked["notSaved"]
            .as_str()
            .is_some_and(|why| why.contains("No space left on device")),
        "{revoked}"
    );
}

#[test]
fn saving_is_retried_while_the_broker_runs() {
    let Some(disk) = Tmpfs::mount("retry") else {
        return;
    };
    let root = project_dir("full-retry").canonicalize().unwrap();
    let state = disk.dir.join("state");
    let mut broker = start(&root, &state);
    broker.send(START_BUILD);
    broker.wait_for("started", |lines| count_type(lines, "session_started") == 1);
    let snapshot = state_file(&state, &root);
    let journal = journal_file(&snapshot);
    let filler = disk.fill(&mut broker, &journal);
    broker.send(END_BUILD);
    broker.wait_for("ended", |lines| count_type(lines, "session_ended") == 1);
    std::fs::remove_file(filler).unwrap();
    // No frame comes: the broker retries on its own.
    let print = format!("{:016x}", session_fingerprint("build"));
    let on_disk = || {
        [&snapshot, &journal]
            .iter()
            .any(|path| std::fs::read_to_string(path).is_ok_and(|text| text.contains(&print)))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !on_disk() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    // A crash now loses nothing that was reported.
    broker.signal("KILL");
    let _ = broker.wait_exit();
    let (build, _) = after_restart(&root, &state);
    assert_eq!(build["decision"], "deny", "the ended session ran: {build}");
}

#[test]
fn what_is_still_not_saved_at_exit_is_named_and_the_exit_code_says_so() {
    let Some(disk) = Tmpfs::mount("lost") else {
        return;
    };
    let root = project_dir("full-lost").canonicalize().unwrap();
    let state = disk.dir.join("state");
    let journal = journal_file(&state_file(&state, &root));
    for (round, stop) in ["end of input", "SIGTERM"].into_iter().enumerate() {
        let mut broker = start(&root, &state);
        let session = format!("build{round}");
        broker.send(&format!(
            r#"{{"type":"session_start","sessionID":"{session}","mode":"auto"}}"#
        ));
        broker.wait_for("started", |lines| count_type(lines, "session_started") == 1);
        let filler = disk.fill(&mut broker, &journal);
        broker.send(&format!(
            r#"{{"type":"session_end","sessionID":"{session}"}}"#
        ));
        broker.wait_for("ended", |lines| count_type(lines, "session_ended") == 1);
        let (status, _, stderr) = if stop == "SIGTERM" {
            broker.signal("TERM");
            broker.wait_exit()
        } else {
            broker.finish()
        };
        assert_eq!(status.code(), Some(1), "{stop}: {status}: {stderr}");
        assert!(
            stderr.contains(&format!("the end of session `{session}`")),
            "{stop}: {stderr}"
        );
        assert!(stderr.contains("lost"), "{stop}: {stderr}");
        assert!(
            stderr.contains("No space left on device"),
            "{stop}: {stderr}"
        );
        std::fs::remove_file(filler).unwrap();
    }
}
