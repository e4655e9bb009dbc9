//! Signals through the real binary: SIGTERM and SIGINT deny every pending
//! call (after `permission_resolved` for its question), say so on stderr and
//! exit 0, once however many signals come; SIGHUP reloads the policy and
//! judges pending calls under it, keeping the old one when the new one is
//! invalid.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use serde_json::Value;

use crate::support;

fn frames(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// `type callID [decision source]` of each frame, for exact comparisons.
fn summary(lines: &[String]) -> Vec<String> {
    frames(lines)
        .iter()
        .map(|frame| {
            let field = |name: &str| frame[name].as_str().unwrap_or("-").to_string();
            match field("type").as_str() {
                "decision" => format!(
                    "decision {} {} {}",
                    field("callID"),
                    field("decision"),
                    field("source")
                ),
                kind => format!("{kind} {}", field("callID")),
            }
        })
        .collect()
}

/// Two questions open in two sessions, one call decided.
fn broker_with_questions(name: &str) -> support::Broker {
    let root = support::project_dir(name);
    let mut broker = support::Broker::start(&root, &[], &[]);
    broker.send(r#"{"type":"tool_call","callID":"e1","tool":"Edit","input":{"file_path":"a"}}"#);
    broker.send(r#"{"type":"tool_call","sessionID":"k","callID":"b1","tool":"Bash","input":{"command":"make"}}"#);
    broker.send(r#"{"type":"tool_call","callID":"r1","tool":"Read","input":{"file_path":"a"}}"#);
    broker.wait_for("two questions and a decision", |lines| lines.len() == 4);
    broker
}

fn stops_on(signal: &str, twice: bool) {
    let broker = broker_with_questions(&format!("signal-{signal}"));
    broker.signal(signal);
    if twice {
        // A second signal while stopping writes nothing more (the process may be gone).
        let _ = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(broker.pid().to_string())
            .status();
    }
    let (status, lines, stderr) = broker.wait_exit();
    assert_eq!(status.code(), Some(0), "exit {status}; stderr:\n{stderr}");
    assert_eq!(
        summary(&lines),
        [
            "ready -",
            "permission_request e1",
            "permission_request b1",
            "decision r1 allow mode",
            "permission_resolved e1",
            "decision e1 deny shutdown",
            "permission_resolved b1",
            "decision b1 deny shutdown",
        ],
        "stdout:\n{}",
        lines.join("\n")
    );
    let expected = format!("toolgate: SIG{signal} received: denied 2 pending calls and stopped\n");
    assert!(stderr.ends_with(&expected), "stderr:\n{stderr}");
    assert_eq!(stderr.matches("received").count(), 1, "stderr:\n{stderr}");
}

#[test]
fn sigterm_denies_pending_calls_and_exits_0() {
    stops_on("TERM", true);
}

#[test]
fn sigint_denies_pending_calls_and_exits_0() {
    stops_on("INT", false);
}

#[test]
fn sigterm_with_nothing_pending() {
    let root = support::project_dir("signal-idle");
    let broker = support::Broker::start(&root, &[], &[]);
    broker.wait_for("ready", |lines| lines.len() == 1);
    broker.signal("TERM");
    let (status, lines, stderr) = broker.wait_exit();
    assert_eq!(status.code(), Some(0), "exit {status}; stderr:\n{stderr}");
    assert_eq!(summary(&lines), ["ready -"]);
    assert!(stderr.contains("toolgate: SIGTERM received: denied 0 pending calls and stopped"));
}

/// The reminder is built once per mode and policy: a reload that declares a
/// tool must show it in the next decision's reminder, not the old text.
#[test]
fn sighup_renews_the_reminder() {
    let root = support::project_dir("signal-hup-reminder");
    let policy = root.join("toolgate.json");
    std::fs::write(&policy, r#"{"tools":{"my_search":{"kind":"search"}}}"#).unwrap();
    let mut broker =
        support::Broker::start(&root, &["--mode".to_string(), "plan".to_string()], &[]);
    let write = |id: &str| {
        format!(
            r#"{{"type":"tool_call","callID":"{id}","tool":"write","input":{{"file_path":"a.txt","content":"x"}}}}"#
        )
    };
    broker.send(&write("w1"));
    broker.wait_for("the first decision", |lines| lines.len() == 2);
    std::fs::write(&policy, r#"{"tools":{"my_lookup":{"kind":"search"}}}"#).unwrap();
    broker.signal("HUP");
    broker.wait_for_stderr("SIGHUP received: reloaded the policy");
    broker.send(&write("w2"));
    broker.wait_for("the second decision", |lines| lines.len() == 3);
    let (_, lines, stderr) = broker.finish();
    let decisions = frames(&lines);
    let reminder = |frame: &Value| frame["reminder"].as_str().unwrap_or_default().to_string();
    let (before, after) = (reminder(&decisions[1]), reminder(&decisions[2]));
    assert!(
        before.contains("my_search") && !before.contains("my_lookup"),
        "{before}\n{stderr}"
    );
    assert!(
        after.contains("my_lookup") && !after.contains("my_search"),
        "{after}\n{stderr}"
    );
}

#[test]
fn sighup_reloads_the_policy_and_judges_pending_calls_again() {
    let root = support::project_dir("signal-hup");
    let policy = root.join("toolgate.json");
    std::fs::write(&policy, r#"{"permission":{"bash":{"*":"ask"}}}"#).unwrap();
    let mut broker = support::Broker::start(&root, &[], &[]);
    let call = |id: &str, command: &str| {
        format!(
            r#"{{"type":"tool_call","callID":"{id}","tool":"Bash","input":{{"command":"{command}"}}}}"#
        )
    };
    broker.send(&call("m1", "make"));
    broker.send(&call("t1", "cargo test"));
    broker.send(&call("x1", "rm -rf build"));
    broker.wait_for("three questions", |lines| lines.len() == 4);

    // Asked before, decided after: `make` allowed, `rm` denied; `cargo test` still asks.
    std::fs::write(
        &policy,
        r#"{"permission":{"bash":{"*":"ask","make":"allow","rm *":"deny"}}}"#,
    )
    .unwrap();
    broker.signal("HUP");
    broker.wait_for("the reloaded answers", |lines| lines.len() == 8);
    broker.wait_for_stderr("SIGHUP received: reloaded the policy");
    broker.send(&call("m2", "make"));
    broker.wait_for("a call under the new policy", |lines| lines.len() == 9);

    // An invalid policy: the one in force stays, stderr names the file and the problem.
    std::fs::write(&policy, r#"{"permission":{"bash":{"make":"alow"}}}"#).unwrap();
    broker.signal("HUP");
    broker.wait_for_stderr("the policy was not reloaded");
    broker.send(&call("m3", "make"));
    broker.wait_for("a call under the kept policy", |lines| lines.len() == 10);

    let (status, lines, stderr) = broker.finish();
    assert_eq!(status.code(), Some(0), "exit {status}; stderr:\n{stderr}");
    assert_eq!(
        summary(&lines),
        [
            "ready -",
            "permission_request m1",
            "permission_request t1",
            "permission_request x1",
            "permission_resolved m1",
            "decision m1 allow rule",
            "permission_resolved x1",
            "decision x1 deny rule",
            "decision m2 allow rule",
            "decision m3 allow rule",
            "permission_resolved t1",
            "decision t1 deny shutdown",
        ],
        "stdout:\n{}",
        lines.join("\n")
    );
    let resolved = frames(&lines)[4]["reason"].clone();
    assert_eq!(resolved, "the policy was reloaded");
    let file = policy.canonicalize().unwrap();
    assert!(
        stderr.contains(&format!(
            "toolgate: SIGHUP received: the policy was not reloaded: {}: permission.bash.make: unknown action `alow` (expected allow, ask or deny); keeping the policy in force",
            file.display()
        )),
        "stderr:\n{stderr}"
    );
    assert!(
        stderr.contains("reloaded the policy") && stderr.contains("2 of 3 pending calls decided"),
        "stderr:\n{stderr}"
    );
}

#[test]
fn sigterm_ends_a_broker_whose_output_nobody_reads() {
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    let root = support::project_dir("signal-blocked");
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .current_dir(&root)
        .env_remove("TOOLGATE_PERMISSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // stdout is never read: once the pipe is full the broker blocks writing.
    let _stdout = child.stdout.take();
    let mut stdin = child.stdin.take().unwrap();
    let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let progress = written.clone();
    std::thread::spawn(move || {
        for i in 0..1_000_000 {
            progress.store(i, std::sync::atomic::Ordering::SeqCst);
            let line = format!(
                "{{\"type\":\"tool_call\",\"callID\":\"c{i}\",\"tool\":\"Read\",\"input\":{{\"file_path\":\"f{i}\"}}}}\n"
            );
            if stdin.write_all(line.as_bytes()).is_err() {
                return;
            }
        }
    });
    // Wait until the writer is stuck too: the broker stopped reading because
    // it is blocked writing.
    let deadline = Instant::now() + support::PATIENCE;
    let mut last = usize::MAX;
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = written.load(std::sync::atomic::Ordering::SeqCst);
        if now == last && now > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the broker never blocked");
        last = now;
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + support::PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("toolgate did not stop on SIGTERM while its output was blocked");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(1), "stderr:\n{stderr}");
    assert!(
        stderr.contains("toolgate: SIGTERM received: the output has been blocked for 5 s; stopped without answering the pending calls"),
        "stderr:\n{stderr}"
    );
}

/// `toolgate ARGS` in `root` with stdin, stdout and stderr piped.
fn spawn_piped(root: &std::path::Path, args: &[&str]) -> std::process::Child {
    use std::process::{Command, Stdio};
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .current_dir(root)
        .env_remove("TOOLGATE_PERMISSION")
        .env_remove("TOOLGATE_MODE")
        .env_remove("TOOLGATE_STATE_DIR")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Read `pipe` line by line until a line holds `piece`.
fn read_until(pipe: &mut impl std::io::BufRead, piece: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        let read = pipe.read_line(&mut line).unwrap();
        assert!(read > 0, "the pipe ended before `{piece}`");
        if line.contains(piece) {
            return;
        }
    }
}

/// Wait for `child` to exit within a few seconds; kill it and fail otherwise.
fn exits_promptly(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: toolgate did not stop on SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A warning provoked with stderr's reader gone: a policy that does not
/// load, reloaded with SIGHUP (the signal thread reports it), then a bad
/// frame on the connection (the broker warns on its own threads).
fn warn_into_a_closed_stderr(pid: u32, policy: &std::path::Path) {
    std::fs::write(policy, "{ not json").unwrap();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // Nothing on stdout says the reload failed: give it time to be tried.
    std::thread::sleep(std::time::Duration::from_millis(500));
}

/// The parent that read stderr died: a warning must not kill the thread
/// that stops the broker, so SIGTERM still denies the pending call and ends
/// `serve` at once.
#[test]
fn sigterm_stops_serve_when_nobody_reads_stderr() {
    use std::io::{BufRead, BufReader, Write};

    let root = support::project_dir("signal-stderr-gone");
    let policy = root.join("toolgate.json");
    std::fs::write(&policy, r#"{"permission":{"bash":{"*":"ask"}}}"#).unwrap();
    let mut child = spawn_piped(&root, &["serve"]);
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    read_until(&mut stdout, r#""type":"ready""#);
    drop(child.stderr.take());
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"{\"type\":\"tool_call\",\"callID\":\"m1\",\"tool\":\"Bash\",\"input\":{\"command\":\"make\"}}\n")
        .unwrap();
    read_until(&mut stdout, r#""type":"permission_request""#);
    warn_into_a_closed_stderr(child.id(), &policy);
    // A line that is not JSON: an error frame, and nothing that stops anything.
    stdin
        .write_all(b"{\"type\":\"tool_call\"\x1b[2J\n")
        .unwrap();
    read_until(&mut stdout, r#""type":"error""#);
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = exits_promptly(&mut child, "serve");
    assert_eq!(status.code(), Some(0), "exit {status}");
    let rest: Vec<String> = stdout.lines().map(Result::unwrap).collect();
    assert!(
        rest.iter().any(
            |line| line.contains(r#""callID":"m1""#) && line.contains(r#""source":"shutdown""#)
        ),
        "the pending call is denied: {rest:?}"
    );
}

/// The same for `serve --listen`: the orphan must let go of its socket, so
/// that its replacement can listen at the same path.
#[test]
fn sigterm_stops_a_listening_broker_when_nobody_reads_stderr() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixStream;

    let root = support::project_dir("signal-stderr-gone-listen");
    let policy = root.join("toolgate.json");
    std::fs::write(&policy, r#"{"permission":{"bash":{"*":"ask"}}}"#).unwrap();
    let dir = root.join("sock");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let socket = dir.join("broker.sock");
    let listen = format!("unix:{}", socket.display());
    let args = ["serve", "--listen", &listen];
    let mut child = spawn_piped(&root, &args);
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    read_until(&mut stderr, "listening on");
    drop(stderr);
    let mut agent = UnixStream::connect(&socket).unwrap();
    agent.set_read_timeout(Some(support::PATIENCE)).unwrap();
    let mut frames = BufReader::new(agent.try_clone().unwrap());
    read_until(&mut frames, r#""type":"ready""#);
    warn_into_a_closed_stderr(child.id(), &policy);
    agent
        .write_all(b"{\"type\":\"tool_call\"\x1b]0;x\x07\n")
        .unwrap();
    read_until(&mut frames, r#""type":"error""#);
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = exits_promptly(&mut child, "serve --listen");
    assert_eq!(status.code(), Some(0), "exit {status}");
    assert!(!socket.exists(), "the socket is removed");
    // The replacement starts at the same path.
    std::fs::write(&policy, "{}").unwrap();
    let mut next = spawn_piped(&root, &args);
    let mut stderr = BufReader::new(next.stderr.take().unwrap());
    read_until(&mut stderr, "listening on");
    let mut frames = BufReader::new(UnixStream::connect(&socket).unwrap());
    let mut line = String::new();
    frames.read_line(&mut line).unwrap();
    assert!(line.contains(r#""type":"ready""#), "{line}");
    let _ = next.kill();
    let _ = next.wait();
}
