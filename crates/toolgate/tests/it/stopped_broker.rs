//! A broker that stops answering (here: `SIGSTOP`) holds no client past its
//! time: `toolgate hook --socket` answers `deny` when `--wait` runs out,
//! whichever step it was at (connecting, writing, reading), and `toolgate
//! mcp --socket` goes on answering pings and ends at end of input.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support;

/// `toolgate serve --listen` in a fresh 0700 directory
/// ([`support::Listening`]), stopped with `SIGSTOP` once it listens;
/// continued (then killed) on drop.
struct Stopped {
    broker: support::Listening,
    dir: PathBuf,
    socket: PathBuf,
}

impl Stopped {
    fn start(name: &str) -> Stopped {
        let dir =
            std::env::temp_dir().join(format!("toolgate-stopped-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let broker = support::Listening::start(&dir, &dir, &[]);
        let socket = broker.socket.clone();
        let stopped = Stopped {
            broker,
            dir,
            socket,
        };
        stopped.signal("STOP");
        stopped
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.broker.pid().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name}");
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // Continued first, so the kill that follows (Listening's drop) ends it.
        let _ = Command::new("kill")
            .arg("-CONT")
            .arg(self.broker.pid().to_string())
            .status();
    }
}

/// Wait at most `limit` for `child`; kill it and fail the test after that.
fn wait_within(child: &mut Child, limit: Duration, what: &str) -> Duration {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} still ran after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    started.elapsed()
}

/// `toolgate hook claude --wait 2 --socket SOCKET` asked about a command:
/// it must answer `deny`, naming the wait, after about 2 s and well within
/// 6 s.
fn hook_denies_in_time(socket: &Path) {
    let input = json!({"session_id": "s", "transcript_path": "/dev/null",
        "permission_mode": "default", "hook_event_name": "PreToolUse",
        "tool_name": "Bash", "tool_input": {"command": "rm -rf build"}, "tool_use_id": "t1",
        "cwd": "/tmp"});
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["hook", "claude", "--wait", "2", "--socket"])
        .arg(socket)
        .env_remove("TOOLGATE_SOCKET")
        .env_remove("TOOLGATE_MODE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    wait_within(&mut child, Duration::from_secs(6), "the hook");
    let took = started.elapsed();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    let inner = &answer["hookSpecificOutput"];
    assert_eq!(inner["permissionDecision"], "deny", "{answer}");
    let reason = inner["permissionDecisionReason"].as_str().unwrap();
    assert!(reason.contains("within 2 s"), "{reason}");
    assert!(took >= Duration::from_millis(1900), "{took:?}: {reason}");
}

#[test]
fn a_hook_on_a_stopped_broker_denies_when_its_wait_runs_out() {
    let broker = Stopped::start("hook");
    hook_denies_in_time(&broker.socket);
}

#[test]
fn a_hook_whose_connection_is_never_queued_denies_in_time() {
    // A listener whose queue of connections is full (backlog 0, one
    // connection waiting, never accepted): `connect` itself waits.
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let dir = std::env::temp_dir().join(format!("toolgate-stopped-{}-full", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let socket = dir.join("broker.sock");
    let address = SocketAddrUnix::new(&socket).unwrap();
    let new_socket = |flags| {
        rustix::net::socket_with(AddressFamily::UNIX, SocketType::STREAM, flags, None).unwrap()
    };
    let listener = new_socket(SocketFlags::CLOEXEC);
    rustix::net::bind(&listener, &address).unwrap();
    rustix::net::listen(&listener, 0).unwrap();
    let mut queued = Vec::new();
    loop {
        let client = new_socket(SocketFlags::CLOEXEC | SocketFlags::NONBLOCK);
        match rustix::net::connect(&client, &address) {
            Ok(()) => queued.push(client),
            Err(rustix::io::Errno::AGAIN) => break,
            Err(err) => panic!("{err}"),
        }
        assert!(queued.len() < 100, "the queue does not fill");
    }
    hook_denies_in_time(&socket);
    drop(listener);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `toolgate mcp` on a pipe: its replies, parsed, as they come.
fn replies(child: &mut Child) -> Receiver<Value> {
    let stdout = child.stdout.take().unwrap();
    let (send, replies) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if send.send(serde_json::from_str(&line).unwrap()).is_err() {
                return;
            }
        }
    });
    replies
}

#[test]
fn mcp_on_a_stopped_broker_answers_pings_and_ends_at_end_of_input() {
    let broker = Stopped::start("mcp");
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["mcp", "--session", "s", "--socket"])
        .arg(&broker.socket)
        .current_dir(&broker.dir)
        .env_remove("TOOLGATE_SOCKET")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let replies = replies(&mut child);
    let mut stdin = child.stdin.take().unwrap();
    let mut send = |line: Value| {
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}}),
    );
    assert_eq!(replies.recv_timeout(support::PATIENCE).unwrap()["id"], 0);
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "approve", "arguments": {"tool_name": "Bash",
        "input": {"command": "rm -rf build"}, "tool_use_id": "t1"}}}),
    );
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}));
    // The call waits for the broker; the ping does not.
    let pong = replies.recv_timeout(Duration::from_secs(2));
    let Ok(pong) = pong else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("no answer to a ping while the broker is stopped");
    };
    assert_eq!(pong, json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
    // End of input: the waiting call is withdrawn and denied, and the
    // server ends.
    drop(stdin);
    wait_within(&mut child, Duration::from_secs(3), "toolgate mcp");
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let rest: Vec<Value> = replies.iter().collect();
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0]["id"], 1);
    let text: Value =
        serde_json::from_str(rest[0]["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text["behavior"], "deny", "{text}");
}
