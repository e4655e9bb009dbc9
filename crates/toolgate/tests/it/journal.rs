//! The state directory's journal, through the spawned binary: a change costs
//! one appended line (the snapshot is not rewritten), kill -9 at any moment
//! loses nothing that was reported, a torn last record is ignored with a
//! warning, a corrupt record stops the start until `toolgate state repair`, compaction happens mid-run, and
//! `toolgate grants list|revoke` see the journal.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use toolgate::store::{journal_file, state_file, FileStore, COMPACT_FLOOR_ENV};

use crate::support::{self, project_dir, state_dir, Broker, PATIENCE};

/// Serve args for a project and a state directory, in ask mode.
fn args(root: &Path, state: &Path) -> Vec<String> {
    vec![
        "serve".to_string(),
        "--project-root".to_string(),
        root.to_string_lossy().into_owned(),
        "--state-dir".to_string(),
        state.to_string_lossy().into_owned(),
        "--mode".to_string(),
        "ask".to_string(),
    ]
}

/// [`args`] in auto mode: calls the mode does not decide run, so a session
/// that came back would run `rm -rf build`.
fn auto_args(root: &Path, state: &Path) -> Vec<String> {
    args(root, state)
        .into_iter()
        .map(|arg| {
            if arg == "ask" {
                "auto".to_string()
            } else {
                arg
            }
        })
        .collect()
}

fn dirs(name: &str) -> (PathBuf, PathBuf) {
    let root = project_dir(name).canonicalize().unwrap();
    let state = state_dir(name);
    (root, state)
}

fn start(root: &Path, state: &Path, compact: Option<&str>) -> Broker {
    let env: Vec<(String, String)> = compact
        .map(|bytes| vec![(COMPACT_FLOOR_ENV.to_string(), bytes.to_string())])
        .unwrap_or_default();
    let broker = Broker::start(root, &args(root, state), &env);
    broker.wait_for("ready", |lines| !lines.is_empty());
    broker
}

fn session_start(id: &str, mode: &str) -> String {
    format!(r#"{{"type":"session_start","sessionID":"{id}","mode":"{mode}"}}"#)
}

fn count_of(lines: &[String], kind: &str) -> usize {
    support::count_type(lines, kind)
}

/// The state as a new broker would load it (snapshot and journal).
fn loaded(root: &Path, state: &Path) -> (toolgate::store::Snapshot, Vec<String>) {
    let (_store, snapshot, warnings) = FileStore::open(state, root, 1).unwrap();
    (snapshot, warnings)
}

#[test]
fn a_change_appends_a_line_and_leaves_the_snapshot_alone() {
    let (root, state) = dirs("journal-append");
    let mut broker = start(&root, &state, None);
    broker.send(&session_start("s0", "plan"));
    broker.wait_for("s0", |lines| count_of(lines, "session_started") == 1);
    let snapshot_path = state_file(&state, &root);
    let snapshot = std::fs::read(&snapshot_path).unwrap();
    for i in 1..=20 {
        broker.send(&session_start(&format!("s{i}"), "plan"));
    }
    broker.wait_for("20 more", |lines| count_of(lines, "session_started") == 21);
    // Saved before reported: the journal already holds every session.
    let journal = std::fs::read_to_string(journal_file(&snapshot_path)).unwrap();
    assert_eq!(journal.lines().count(), 21, "{journal}");
    assert!(journal.starts_with("{\"journalGeneration\":"), "{journal}");
    for i in 1..=20 {
        assert!(
            journal.contains(&format!("\"sessionID\":\"s{i}\"")),
            "{journal}"
        );
    }
    assert_eq!(std::fs::read(&snapshot_path).unwrap(), snapshot);
    let (status, _, stderr) = broker.finish();
    assert!(status.success(), "{stderr}");
    let (loaded, warnings) = loaded(&root, &state);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(loaded.sessions.len(), 21);
    assert!(loaded.sessions.iter().all(|session| session.mode == "plan"));
}

/// A broker whose output is read as it comes and which can be killed.
struct Killable {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Killable {
    fn start(root: &Path, state: &Path, compact: Option<&str>) -> Killable {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate"));
        command
            .args(args(root, state))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(bytes) = compact {
            command.env(COMPACT_FLOOR_ENV, bytes);
        }
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                // A last line without its newline was cut by the kill: the
                // frame was never written whole, so it was not reported.
                match reader.read_line(&mut line) {
                    Ok(_) if line.ends_with('\n') => {
                        line.pop();
                        if sender.send(line).is_err() {
                            break;
                        }
                    }
                    _ => break,
                }
            }
        });
        Killable {
            child,
            stdin,
            lines,
        }
    }

    /// The next complete output line; `None` once the output closed or, after
    /// the kill, stayed quiet. Fails when a live broker stops answering.
    fn next_line(&self, killed: bool) -> Option<String> {
        let patience = if killed {
            Duration::from_secs(5)
        } else {
            PATIENCE
        };
        match self.lines.recv_timeout(patience) {
            Ok(line) => Some(line),
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                assert!(killed, "the broker stopped answering");
                None
            }
        }
    }

    fn send(&mut self, line: &str) {
        // The broker may be dead already: a broken pipe is expected.
        let _ = self.stdin.write_all(format!("{line}\n").as_bytes());
        let _ = self.stdin.flush();
    }
}

/// What the broker reported: started sessions and `always` grants (the
/// command of each call allowed by the user after an `always`).
#[derive(Default)]
struct Reported {
    sessions: BTreeSet<String>,
    grants: BTreeSet<String>,
}

impl Reported {
    fn note(&mut self, frame: &Value, commands: &std::collections::HashMap<String, String>) {
        match frame["type"].as_str() {
            Some("session_started") => {
                self.sessions
                    .insert(frame["sessionID"].as_str().unwrap().to_string());
            }
            Some("decision") if frame["decision"] == "allow" && frame["source"] == "user" => {
                let call = frame["callID"].as_str().unwrap();
                self.grants.insert(commands[call].clone());
            }
            _ => {}
        }
    }
}

/// Session and grant floods, each killed with SIGKILL after a different
/// number of frames, some with compactions every few records; then every
/// reported session and grant must be in the state, and a restarted broker
/// must act on them.
#[test]
fn kill_9_during_floods_loses_nothing_reported() {
    let (root, state) = dirs("journal-kill");
    let mut reported = Reported::default();
    let mut commands = std::collections::HashMap::new();
    for round in 0..6u32 {
        let compact = (round % 2 == 1).then_some("2048");
        let mut broker = Killable::start(&root, &state, compact);
        let kill_after = 40 + (round as usize * 173) % 400;
        // Sessions and asks, interleaved; every ask is answered `always`
        // as soon as it arrives.
        for i in 0..150u32 {
            broker.send(&session_start(&format!("r{round}s{i}"), "plan"));
            let call = format!("r{round}c{i}");
            let command = format!("r{round}tool{i} run");
            commands.insert(call.clone(), command.clone());
            broker.send(&format!(
                r#"{{"type":"tool_call","sessionID":"g","callID":"{call}","tool":"Bash","input":{{"command":"{command}"}}}}"#
            ));
        }
        let mut seen = 0usize;
        let mut killed = false;
        while let Some(line) = broker.next_line(killed) {
            let frame: Value = serde_json::from_str(&line).unwrap();
            reported.note(&frame, &commands);
            seen += 1;
            if !killed && frame["type"] == "permission_request" {
                let id = frame["permissionID"].as_str().unwrap();
                broker.send(&format!(
                    r#"{{"type":"permission_response","permissionID":"{id}","response":"always"}}"#
                ));
            }
            if !killed && seen >= kill_after {
                broker.child.kill().unwrap();
                killed = true;
            }
        }
        let status = broker.child.wait().unwrap();
        assert!(
            !status.success(),
            "round {round}: the broker was not killed"
        );
        // Whatever the broker wrote before it died was reported.
        while let Ok(line) = broker.lines.try_recv() {
            reported.note(&serde_json::from_str(&line).unwrap(), &commands);
        }
        let (snapshot, warnings) = loaded(&root, &state);
        assert!(
            warnings.iter().all(|w| w.contains("incomplete record")),
            "round {round}: {warnings:?}"
        );
        let stored: BTreeSet<&str> = snapshot
            .sessions
            .iter()
            .map(|session| session.session_id.as_str())
            .collect();
        for session in &reported.sessions {
            assert!(
                stored.contains(session.as_str()),
                "round {round}: lost {session}"
            );
        }
        let granted: BTreeSet<&str> = snapshot
            .sessions
            .iter()
            .filter(|session| session.session_id == "g")
            .flat_map(|session| &session.grants)
            .map(|grant| grant.pattern.as_str())
            .collect();
        for command in &reported.grants {
            let pattern = format!("{} *", command.split(' ').next().unwrap());
            assert!(
                granted.contains(pattern.as_str()),
                "round {round}: lost {pattern}"
            );
        }
    }
    assert!(reported.sessions.len() > 200, "{}", reported.sessions.len());
    assert!(reported.grants.len() > 100, "{}", reported.grants.len());

    // A restarted broker acts on all of it: every reported session is still
    // in plan mode, every granted command is allowed by its grant.
    let mut broker = start(&root, &state, None);
    for session in &reported.sessions {
        broker.send(&format!(
            r#"{{"type":"get_reminder","sessionID":"{session}"}}"#
        ));
    }
    for (i, command) in reported.grants.iter().enumerate() {
        broker.send(&format!(
            r#"{{"type":"tool_call","sessionID":"g","callID":"again{i}","tool":"Bash","input":{{"command":"{command}"}}}}"#
        ));
    }
    let expected = 1 + reported.sessions.len() + reported.grants.len();
    broker.wait_for("every answer", |lines| lines.len() >= expected);
    let (_, lines, stderr) = broker.finish();
    assert!(!stderr.contains("unusable"), "{stderr}");
    for line in &lines[1..] {
        let frame: Value = serde_json::from_str(line).unwrap();
        match frame["type"].as_str().unwrap() {
            "reminder" => assert_eq!(frame["mode"], "plan", "{line}"),
            "decision" => {
                assert_eq!(frame["decision"], "allow", "{line}");
                assert_eq!(frame["source"], "grant", "{line}");
            }
            other => panic!("unexpected {other}: {line}"),
        }
    }
}

#[test]
fn a_torn_last_record_is_ignored_with_a_warning() {
    let (root, state) = dirs("journal-torn");
    let mut broker = start(&root, &state, None);
    broker.send(&session_start("a", "plan"));
    broker.send(&session_start("b", "plan"));
    broker.wait_for("two sessions", |lines| {
        count_of(lines, "session_started") == 2
    });
    let (status, _, _) = broker.finish();
    assert!(status.success());
    let journal = journal_file(&state_file(&state, &root));
    // A write the broker never finished (it never reported it).
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&journal)
        .unwrap();
    file.write_all(br#"{"session":{"sessionID":"torn","mode":"au"#)
        .unwrap();
    drop(file);

    let mut broker = start(&root, &state, None);
    broker.send(r#"{"type":"get_reminder","sessionID":"b"}"#);
    broker.send(r#"{"type":"get_reminder","sessionID":"torn"}"#);
    // The next change must not land after the torn bytes.
    broker.send(&session_start("c", "plan"));
    broker.wait_for("c", |lines| count_of(lines, "session_started") == 1);
    let (_, lines, stderr) = broker.finish();
    assert!(
        stderr.contains("ends in an incomplete record") && stderr.contains("it was ignored"),
        "{stderr}"
    );
    assert!(
        lines[1].contains(r#""sessionID":"b","mode":"plan""#),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].contains(r#""sessionID":"torn","mode":"ask""#),
        "{}",
        lines[2]
    );

    let (snapshot, warnings) = loaded(&root, &state);
    assert!(warnings.is_empty(), "the torn bytes are gone: {warnings:?}");
    let ids: Vec<&str> = snapshot
        .sessions
        .iter()
        .map(|session| session.session_id.as_str())
        .collect();
    assert_eq!(ids, ["a", "b", "c"]);
}

/// One unreadable journal line before the last (not a crash's torn write)
/// stops the start, naming the file and the line, rather than start with no
/// saved state and forget which sessions ended. `toolgate state repair`
/// keeps every record it can read (a session end even from a garbled
/// line), keeps the original files beside the repaired ones, and names the
/// lines it lost.
#[test]
fn a_bad_journal_line_stops_the_start_until_the_state_is_repaired() {
    let (root, state) = dirs("journal-corrupt");
    // Calls the mode does not decide run: an ended session that came back
    // would run `rm -rf build`.
    let auto = auto_args(&root, &state);
    let mut broker = Broker::start(&root, &auto, &[]);
    // The first change writes the snapshot; the others are journal lines.
    broker.send(&session_start("first", "plan"));
    broker.send(&session_start("a", "plan"));
    broker.send(&session_start("build", "auto"));
    broker.send(r#"{"type":"session_end","sessionID":"build"}"#);
    broker.send(&session_start("gone", "auto"));
    broker.send(r#"{"type":"session_end","sessionID":"gone"}"#);
    broker.send(&session_start("b", "plan"));
    broker.wait_for("the sessions", |lines| {
        count_of(lines, "session_started") == 5 && count_of(lines, "session_ended") == 2
    });
    let (status, _, _) = broker.finish();
    assert!(status.success());
    let journal = journal_file(&state_file(&state, &root));
    let text = std::fs::read_to_string(&journal).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 7, "{text}");
    assert!(lines[5].contains(r#"{"removeSession":"gone"}"#), "{text}");
    // The start of `a` is cut short; the end of `gone` is garbled, but the
    // fingerprint of what it closed can still be read.
    lines[1] = "{\"session\":".to_string();
    lines[5] = lines[5].replace(r#"{"removeSession":"gone"}"#, r#"{"removeSession:"gone"}"#);
    std::fs::write(&journal, lines.join("\n") + "\n").unwrap();
    let damaged = std::fs::read(&journal).unwrap();

    let mut broker = Broker::start(&root, &auto, &[]);
    let rm = |session: &str, call: &str| {
        format!(
            r#"{{"type":"tool_call","sessionID":"{session}","callID":"{call}","tool":"bash","input":{{"command":"rm -rf build"}}}}"#
        )
    };
    broker.send(&rm("build", "c1"));
    let (status, lines, stderr) = broker.finish();
    assert!(
        !lines
            .iter()
            .any(|line| line.contains(r#""decision":"allow""#)),
        "the ended session ran: {lines:?}"
    );
    assert_eq!(status.code(), Some(2), "{lines:?} {stderr}");
    assert!(lines.is_empty(), "{lines:?}");
    assert!(stderr.contains(&journal.display().to_string()), "{stderr}");
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "toolgate state repair --state-dir {}",
            state.display()
        )),
        "{stderr}"
    );
    // Nothing was moved or rewritten.
    assert_eq!(std::fs::read(&journal).unwrap(), damaged);
    let names = |piece: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&state)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.contains(piece))
            .collect();
        names.sort();
        names
    };
    assert!(names(".corrupt-").is_empty());

    let state_arg = state.to_string_lossy().into_owned();
    let (code, out, err) = support::run(&root, &["state", "repair", "--state-dir", &state_arg], "");
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("line 2: lost"), "{out}");
    assert!(out.contains("line 6"), "{out}");
    assert!(out.contains("1 closed session"), "{out}");
    // The originals are kept beside the repaired files.
    let kept = names(".before-repair-");
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(kept[0].contains(".journal.before-repair-"), "{kept:?}");
    assert!(kept[1].contains(".json.before-repair-"), "{kept:?}");
    assert_eq!(std::fs::read(state.join(&kept[0])).unwrap(), damaged);
    // Nothing is left to repair.
    let (code, out, err) = support::run(&root, &["state", "repair", "--state-dir", &state_arg], "");
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("nothing to repair"), "{out}");

    let mut broker = Broker::start(&root, &auto, &[]);
    broker.send(&rm("build", "c2"));
    broker.send(&rm("gone", "c3"));
    broker.send(r#"{"type":"get_reminder","sessionID":"a"}"#);
    broker.send(r#"{"type":"get_reminder","sessionID":"b"}"#);
    broker.wait_for("the answers", |lines| lines.len() == 5);
    let (_, lines, stderr) = broker.finish();
    assert!(stderr.is_empty(), "{stderr}");
    for line in &lines[1..3] {
        assert!(
            line.contains(r#""decision":"deny","source":"scope""#),
            "{line}"
        );
        assert!(line.contains("has ended"), "{line}");
    }
    // The lost start of `a`: a new session; `b` kept its mode.
    assert!(
        lines[3].contains(r#""sessionID":"a","mode":"auto""#),
        "{}",
        lines[3]
    );
    assert!(
        lines[4].contains(r#""sessionID":"b","mode":"plan""#),
        "{}",
        lines[4]
    );
}

#[test]
fn compaction_mid_run_keeps_everything() {
    let (root, state) = dirs("journal-compact");
    let mut broker = start(&root, &state, Some("1024"));
    for i in 0..300 {
        broker.send(&session_start(&format!("s{i:03}"), "auto_edit"));
    }
    broker.send(r#"{"type":"session_end","sessionID":"s007"}"#);
    broker.wait_for("every start", |lines| count_of(lines, "session_ended") == 1);
    let (status, lines, stderr) = broker.finish();
    assert!(status.success(), "{stderr}");
    assert_eq!(count_of(&lines, "session_started"), 300);
    let snapshot_path = state_file(&state, &root);
    let snapshot_text = std::fs::read_to_string(&snapshot_path).unwrap();
    let journal_text = std::fs::read_to_string(journal_file(&snapshot_path)).unwrap();
    // Several compactions: the generation counted on, the journal is short.
    let header: Value = serde_json::from_str(journal_text.lines().next().unwrap()).unwrap();
    assert!(
        header["journalGeneration"].as_u64().unwrap() > 3,
        "{header}"
    );
    assert!(
        journal_text.len() <= 2 * snapshot_text.len() + 200,
        "{} {}",
        journal_text.len(),
        snapshot_text.len()
    );
    let (snapshot, warnings) = loaded(&root, &state);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(snapshot.sessions.len(), 299);
    assert_eq!(snapshot.closed.len(), 1);
    assert_eq!(
        snapshot.closed[0].fingerprint,
        format!("{:016x}", toolgate::store::session_fingerprint("s007"))
    );

    // The ended session stays shut after a restart.
    let mut broker = start(&root, &state, None);
    broker.send(
        r#"{"type":"tool_call","sessionID":"s007","callID":"c1","tool":"Read","input":{"file_path":"a.rs"}}"#,
    );
    broker.send(r#"{"type":"get_reminder","sessionID":"s299"}"#);
    broker.wait_for("two answers", |lines| lines.len() == 3);
    let (_, lines, _) = broker.finish();
    assert!(lines[1].contains(r#""decision":"deny""#), "{}", lines[1]);
    assert!(lines[1].contains("has ended"), "{}", lines[1]);
    assert!(lines[2].contains(r#""mode":"auto_edit""#), "{}", lines[2]);
}

/// `toolgate grants list|revoke` on a directory whose grants are still in
/// the journal.
#[test]
fn grants_revoke_works_on_the_journal() {
    let (root, state) = dirs("journal-revoke");
    let mut broker = start(&root, &state, None);
    broker.send(&session_start("g", "ask"));
    let ask = |broker: &mut Broker, call: &str, command: &str, scope: &str, n: usize| {
        broker.send(&format!(
            r#"{{"type":"tool_call","sessionID":"g","callID":"{call}","tool":"Bash","input":{{"command":"{command}"}}}}"#
        ));
        broker.wait_for("the question", |lines| {
            count_of(lines, "permission_request") == n
        });
        let request = broker
            .frames()
            .into_iter()
            .rfind(|frame| frame["type"] == "permission_request")
            .unwrap();
        let id = request["permissionID"].as_str().unwrap().to_string();
        broker.send(&format!(
            r#"{{"type":"permission_response","permissionID":"{id}","response":"always","scope":"{scope}"}}"#
        ));
        broker.wait_for("the decision", |lines| count_of(lines, "decision") == n);
    };
    ask(&mut broker, "c1", "alpha run", "session", 1);
    ask(&mut broker, "c2", "beta run", "project", 2);
    ask(&mut broker, "c3", "gamma run", "session", 3);
    broker.finish();
    let snapshot_path = state_file(&state, &root);
    assert!(
        std::fs::read_to_string(journal_file(&snapshot_path))
            .unwrap()
            .contains("beta *"),
        "the grants are in the journal, not yet in the snapshot"
    );

    let cli = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(args)
            .arg("--state-dir")
            .arg(&state)
            .env_remove("TOOLGATE_STATE_DIR")
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let rows: Vec<Value> = cli(&["grants", "list", "--json"])
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let patterns: Vec<&str> = rows
        .iter()
        .map(|row| row["pattern"].as_str().unwrap())
        .collect();
    assert_eq!(patterns, ["beta *", "alpha *", "gamma *"]);
    let id_of = |pattern: &str| {
        rows.iter().find(|row| row["pattern"] == pattern).unwrap()["grantID"]
            .as_str()
            .unwrap()
            .to_string()
    };
    cli(&["grants", "revoke", &id_of("beta *"), &id_of("gamma *")]);
    let rows: Vec<Value> = cli(&["grants", "list", "--json"])
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["pattern"], "alpha *");

    // A broker started afterwards asks again for what was revoked.
    let mut broker = start(&root, &state, None);
    broker.send(r#"{"type":"list_grants"}"#);
    broker.send(
        r#"{"type":"tool_call","sessionID":"g","callID":"d1","tool":"Bash","input":{"command":"gamma run"}}"#,
    );
    broker.send(
        r#"{"type":"tool_call","sessionID":"g","callID":"d2","tool":"Bash","input":{"command":"alpha run"}}"#,
    );
    broker.wait_for("answers", |lines| lines.len() == 4);
    let (_, lines, _) = broker.finish();
    assert_eq!(lines[1].matches("\"grantID\"").count(), 1, "{}", lines[1]);
    assert!(lines[2].contains("permission_request"), "{}", lines[2]);
    assert!(lines[3].contains(r#""source":"grant""#), "{}", lines[3]);
}

/// The frames of one group of the shutting flood: sessions that end, are
/// refused, are shut by a refused start with a child, are ended without
/// ever running, implicit parents ended with their child or left by it, and
/// an implicit parent whose child keeps running.
fn shutting_group(p: &str) -> Vec<String> {
    let call = |session: &str, call: &str| {
        format!(
            r#"{{"type":"tool_call","sessionID":"{session}","callID":"{call}","tool":"Bash","input":{{"command":"cargo build"}}}}"#
        )
    };
    let start = |session: &str, parent: &str| {
        format!(r#"{{"type":"session_start","sessionID":"{session}","parentID":"{parent}"}}"#)
    };
    let end = |session: &str| format!(r#"{{"type":"session_end","sessionID":"{session}"}}"#);
    vec![
        session_start(&format!("{p}a"), "plan"),
        end(&format!("{p}a")),
        session_start(&format!("{p}r"), "bogus"),
        call(&format!("{p}p"), &format!("{p}c1")),
        start(&format!("{p}c"), &format!("{p}p")),
        end(&format!("{p}p")),
        session_start(&format!("{p}k"), "ask"),
        start(&format!("{p}kc"), &format!("{p}k")),
        session_start(&format!("{p}k"), "ask"),
        end(&format!("{p}u")),
        call(&format!("{p}q"), &format!("{p}c2")),
        start(&format!("{p}d"), &format!("{p}q")),
        end(&format!("{p}d")),
        call(&format!("{p}m"), &format!("{p}c3")),
        start(&format!("{p}e"), &format!("{p}m")),
        format!(r#"{{"type":"session_start","sessionID":"{p}x","parentID":"{p}x"}}"#),
    ]
}

/// Floods of session ends and refused starts (implicit parents, shut
/// subtrees, ids that never ran), each killed with SIGKILL after a different
/// number of frames, some compacting every few records: every session
/// reported ended or refused before the kill is still closed, for the same
/// reason, after a restart; an implicit parent left by its last child is not
/// kept; an implicit parent with a running child still ends it.
#[test]
fn kill_9_keeps_reported_ended_and_refused_sessions_closed() {
    let (root, state) = dirs("journal-kill-closed");
    // Session id → "ended" or "refused", as last reported.
    let mut closed: std::collections::BTreeMap<String, &str> = Default::default();
    let mut left_parents: BTreeSet<String> = BTreeSet::new();
    let mut running_children: Vec<(String, String)> = Vec::new();
    for round in 0..6u32 {
        let compact = (round % 2 == 1).then_some("512");
        let mut broker = Killable::start(&root, &state, compact);
        let mut frames: Vec<String> = Vec::new();
        for i in 0..60u32 {
            frames.extend(shutting_group(&format!("r{round}g{i}")));
        }
        for frame in &frames {
            broker.send(frame);
        }
        let kill_after = 30 + (round as usize * 211) % 600;
        let mut seen = 0usize;
        let mut killed = false;
        let mut lines = Vec::new();
        while let Some(line) = broker.next_line(killed) {
            lines.push(line);
            seen += 1;
            if !killed && seen >= kill_after {
                broker.child.kill().unwrap();
                killed = true;
            }
        }
        let status = broker.child.wait().unwrap();
        assert!(
            !status.success(),
            "round {round}: the broker was not killed"
        );
        // Frame by frame, in the order written: what was reported.
        let mut started: BTreeSet<String> = BTreeSet::new();
        for line in &lines {
            let frame: Value = serde_json::from_str(line).unwrap();
            let id = |key: &str| frame[key].as_str().unwrap_or_default().to_string();
            match frame["type"].as_str().unwrap() {
                "session_started" => {
                    started.insert(id("sessionID"));
                }
                "session_ended" => {
                    let session = id("sessionID");
                    started.remove(&session);
                    // A refused start reports its error before the
                    // session_ended frames of what it shut: refused stays.
                    closed.entry(session.clone()).or_insert("ended");
                    if let Some(group) = session.strip_suffix('d') {
                        left_parents.insert(format!("{group}q"));
                    }
                }
                "error" => {
                    let number = frame["line"].as_u64().unwrap() as usize;
                    let sent: Value = serde_json::from_str(&frames[number - 1]).unwrap();
                    assert_eq!(sent["type"], "session_start", "{line}");
                    closed.insert(sent["sessionID"].as_str().unwrap().to_string(), "refused");
                }
                _ => {}
            }
        }
        for session in started {
            if let Some(group) = session.strip_suffix('e') {
                running_children.push((format!("{group}m"), session.clone()));
            }
        }
        let (snapshot, warnings) = loaded(&root, &state);
        assert!(
            warnings.iter().all(|w| w.contains("incomplete record")),
            "round {round}: {warnings:?}"
        );
        for parent in &left_parents {
            assert!(
                snapshot.sessions.iter().all(|s| &s.session_id != parent),
                "round {round}: the implicit parent {parent} is still kept"
            );
        }
    }
    assert!(closed.len() > 300, "{}", closed.len());
    assert!(
        closed.values().filter(|why| **why == "refused").count() > 100,
        "{closed:?}"
    );
    assert!(running_children.len() > 20, "{}", running_children.len());

    // A restarted broker denies every closed session's call, saying why,
    // and ending an implicit parent still ends the child it had.
    let mut broker = start(&root, &state, None);
    for (n, session) in closed.keys().enumerate() {
        broker.send(&format!(
            r#"{{"type":"tool_call","sessionID":"{session}","callID":"after{n}","tool":"Read","input":{{"file_path":"a.rs"}}}}"#
        ));
    }
    for (parent, _) in &running_children {
        broker.send(&format!(
            r#"{{"type":"session_end","sessionID":"{parent}"}}"#
        ));
    }
    let expected = 1 + closed.len() + 2 * running_children.len();
    broker.wait_for("every answer", |lines| lines.len() >= expected);
    let (_, lines, stderr) = broker.finish();
    assert!(!stderr.contains("unusable"), "{stderr}");
    let mut decided = 0;
    let mut ended: BTreeSet<String> = BTreeSet::new();
    let ids: Vec<&String> = closed.keys().collect();
    for line in &lines[1..] {
        let frame: Value = serde_json::from_str(line).unwrap();
        match frame["type"].as_str().unwrap() {
            "decision" => {
                let n: usize = frame["callID"].as_str().unwrap()["after".len()..]
                    .parse()
                    .unwrap();
                let session = ids[n];
                assert_eq!(frame["decision"], "deny", "{session}: {line}");
                let reason = frame["reason"].as_str().unwrap();
                let why = if closed[session] == "refused" {
                    "was refused"
                } else {
                    "has ended"
                };
                assert!(
                    reason.contains(why),
                    "{session} {}: {line}",
                    closed[session]
                );
                decided += 1;
            }
            "session_ended" => {
                ended.insert(frame["sessionID"].as_str().unwrap().to_string());
            }
            other => panic!("unexpected {other}: {line}"),
        }
    }
    assert_eq!(decided, closed.len());
    for (parent, child) in &running_children {
        assert!(ended.contains(parent), "{parent} did not end");
        assert!(ended.contains(child), "{child} did not end with {parent}");
    }
}

/// A state file that cannot be read at all (cut short), or a journal left
/// without its state file, stops the start too, rather than start with no
/// saved state: an ended session would run again and a scoped sub-session
/// come back with no scope. `toolgate state repair` keeps the closed
/// sessions it can read and closes every session it cannot hold whole.
#[test]
fn an_unreadable_state_file_stops_the_start_until_it_is_repaired() {
    for orphan in [false, true] {
        let (root, state) = dirs(if orphan {
            "journal-orphan"
        } else {
            "snapshot-cut"
        });
        let auto = auto_args(&root, &state);
        let mut broker = Broker::start(&root, &auto, &[]);
        broker.send(&session_start("build", "auto"));
        broker.send(
            r#"{"type":"session_start","sessionID":"kid","parentID":"build","permissions":{"filePatterns":["src/**"]}}"#,
        );
        broker.send(&session_start("gone", "auto"));
        broker.send(r#"{"type":"session_end","sessionID":"gone"}"#);
        broker.wait_for("the sessions", |lines| {
            count_of(lines, "session_ended") == 1
        });
        let (status, _, _) = broker.finish();
        assert!(status.success());
        let file = state_file(&state, &root);
        if orphan {
            std::fs::remove_file(&file).unwrap();
        } else {
            let text = std::fs::read_to_string(&file).unwrap();
            std::fs::write(&file, &text[..text.len() * 2 / 3]).unwrap();
        }
        let calls = [
            ("gone", "rm -rf build"),
            ("kid", "cat README.md"),
            ("build", "rm -rf build"),
        ];
        let send_calls = |broker: &mut Broker| {
            for (n, (session, command)) in calls.iter().enumerate() {
                broker.send(&format!(
                    r#"{{"type":"tool_call","sessionID":"{session}","callID":"c{n}","tool":"bash","input":{{"command":"{command}"}}}}"#
                ));
            }
        };
        let mut broker = Broker::start(&root, &auto, &[]);
        send_calls(&mut broker);
        let (status, lines, stderr) = broker.finish();
        assert_eq!(status.code(), Some(2), "{orphan}: {lines:?} {stderr}");
        assert!(lines.is_empty(), "{orphan}: {lines:?}");
        assert!(
            stderr.contains("toolgate state repair --state-dir"),
            "{stderr}"
        );

        let state_arg = state.to_string_lossy().into_owned();
        let root_arg = root.to_string_lossy().into_owned();
        let (code, out, err) = support::run(
            &root,
            &[
                "state",
                "repair",
                "--state-dir",
                &state_arg,
                "--project-root",
                &root_arg,
            ],
            "",
        );
        assert_eq!(code, 0, "{orphan}: {out} {err}");
        let mut broker = Broker::start(&root, &auto, &[]);
        send_calls(&mut broker);
        broker.wait_for("the decisions", |lines| count_of(lines, "decision") == 3);
        let (status, lines, stderr) = broker.finish();
        assert!(status.success(), "{stderr}");
        // `build` was recorded in the snapshot only: cut short, it is closed;
        // deleted, nothing names it any more (it never ended, had no scope,
        // and comes back as a new session).
        let closed: &[&str] = if orphan {
            &["gone", "kid"]
        } else {
            &["gone", "kid", "build"]
        };
        for session in closed {
            let decision = lines
                .iter()
                .find(|line| {
                    line.contains(&format!(r#""sessionID":"{session}""#))
                        && line.contains("\"decision\"")
                })
                .unwrap();
            assert!(
                decision.contains(r#""decision":"deny""#),
                "{orphan}: {session} ran: {decision}\n{out}"
            );
        }
    }
}
