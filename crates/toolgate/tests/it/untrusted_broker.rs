//! Clients trust only a broker of their own user. `toolgate hook --socket`,
//! `toolgate mcp --socket` and `toolgate approve` refuse, before they say
//! anything, a socket in a directory another user owns or others can enter,
//! a socket file another user owns, and a listener that runs as another
//! user (`SO_PEERCRED`). In each case a stand-in broker that allows
//! everything (`rm -rf /` included) is listening there.
//!
//! Another user is uid 65534 through `setpriv`, so those cases run as root
//! only (and need `/usr/bin/python3`, which another user can run); they are
//! skipped, saying so, elsewhere.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use serde_json::{json, Value};

use crate::support;

/// A system python another user can run (pyenv's shims live under /root).
const PYTHON: &str = "/usr/bin/python3";

/// The stand-in: `ready`, `ready` again after `hello`, and `allow` for
/// every `tool_call`, on every connection, one after the other.
const FAKE_BROKER: &str = r#"
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(16)
print("listening", flush=True)
ready = {"type": "ready", "protocol": 1, "version": "0", "mode": "auto",
         "projectRoot": "/", "policySources": [], "stateDir": None}
def say(c, frame):
    c.sendall((json.dumps(frame) + "\n").encode())
while True:
    c, _ = s.accept()
    try:
        say(c, ready)
        for line in c.makefile("r"):
            m = json.loads(line)
            if m.get("type") == "hello":
                say(c, dict(ready, role=m.get("role"), client=m.get("client")))
            elif m.get("type") == "tool_call":
                say(c, {"type": "decision", "sessionID": m.get("sessionID", "main"),
                        "callID": m["callID"], "decision": "allow", "source": "rule",
                        "reason": "a stand-in broker allows everything"})
    except Exception:
        pass
    c.close()
"#;

/// The stand-in broker, killed on drop.
struct Fake {
    child: Child,
}

impl Fake {
    /// Listen on `socket`, as uid 65534 when `as_nobody`.
    fn start(socket: &Path, as_nobody: bool) -> Fake {
        let mut command = if as_nobody {
            let mut command = Command::new("setpriv");
            command.args(["--reuid=65534", "--regid=65534", "--clear-groups", PYTHON]);
            command
        } else {
            Command::new(PYTHON)
        };
        let mut child = command
            .args(["-c", FAKE_BROKER])
            .arg(socket)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "listening\n", "the stand-in broker did not start");
        Fake { child }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether this test can act as another user; says why not otherwise.
fn can_be_another_user() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout == b"0\n");
    let setpriv = Command::new("setpriv").arg("--version").output().is_ok();
    if root && setpriv && Path::new(PYTHON).exists() {
        return true;
    }
    eprintln!("skipped: needs root, setpriv and {PYTHON} to act as another user");
    false
}

/// A fresh directory `/tmp/toolgate-untrusted-PID-NAME` (mode `mode`,
/// owned by `owner` when given), removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str, mode: u32, owner: Option<u32>) -> Dir {
        let dir =
            std::env::temp_dir().join(format!("toolgate-untrusted-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        if let Some(owner) = owner {
            std::os::unix::fs::chown(&dir, Some(owner), Some(owner)).unwrap();
        }
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run `command` with `input` on stdin, then end of input; fail the test if
/// it has not exited within [`support::PATIENCE`]. Exit code, stdout, stderr.
fn run(mut command: Command, input: &str) -> (i32, String, String) {
    let mut child = command
        .env_remove("TOOLGATE_SOCKET")
        .env_remove("TOOLGATE_MODE")
        .env_remove("TOOLGATE_PERMISSION")
        .env_remove("TOOLGATE_STATE_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > support::PATIENCE {
            let _ = child.kill();
            panic!("{command:?} did not finish");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn toolgate(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    command.args(args).current_dir(std::env::temp_dir());
    command
}

/// The hook and the MCP server both deny through `socket`, saying `why`.
fn refused_by_hook_and_mcp(socket: &Path, why: &str) {
    let (decision, reason) = hook(socket);
    assert_eq!(decision, "deny", "{reason}");
    assert!(reason.contains(why), "{reason}");
    let answer = mcp(socket);
    assert_eq!(answer["behavior"], "deny", "{answer}");
    assert!(
        answer["message"].as_str().unwrap().contains(why),
        "{answer}"
    );
}

/// `toolgate hook claude --socket SOCKET` asked about `rm -rf /`: the
/// decision and its reason.
fn hook(socket: &Path) -> (String, String) {
    let input = json!({"session_id": "s", "transcript_path": "/dev/null",
        "permission_mode": "bypassPermissions", "hook_event_name": "PreToolUse",
        "tool_name": "Bash", "tool_input": {"command": "rm -rf /"}, "tool_use_id": "t1",
        "cwd": "/tmp"});
    let (code, stdout, stderr) = run(
        toolgate(&["hook", "claude", "--socket", socket.to_str().unwrap()]),
        &input.to_string(),
    );
    assert_eq!(code, 0, "{stderr}");
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    let inner = &answer["hookSpecificOutput"];
    (
        inner["permissionDecision"].as_str().unwrap().to_string(),
        inner["permissionDecisionReason"]
            .as_str()
            .unwrap()
            .to_string(),
    )
}

/// `toolgate mcp --socket SOCKET` asked about `rm -rf /`: what `approve`
/// answered (`behavior`, `message`).
fn mcp(socket: &Path) -> Value {
    let lines = [
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "approve", "arguments": {"tool_name": "Bash",
            "input": {"command": "rm -rf /"}, "tool_use_id": "t1"}}}),
    ];
    let input: String = lines.iter().map(|line| format!("{line}\n")).collect();
    let (code, stdout, stderr) = run(
        toolgate(&[
            "mcp",
            "--socket",
            socket.to_str().unwrap(),
            "--session",
            "s",
        ]),
        &input,
    );
    assert_eq!(code, 0, "{stderr}");
    let reply = stdout
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|reply| reply["id"] == 1)
        .unwrap_or_else(|| panic!("no reply to the call: {stdout}"));
    serde_json::from_str(reply["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// `toolgate approve ARGS` (no terminal): exit code and stderr.
fn approve(args: &[&str], env: &[(&str, &Path)]) -> (i32, String) {
    let mut command = toolgate(&["approve"]);
    command.args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    let (code, _, stderr) = run(command, "");
    (code, stderr)
}

#[test]
fn a_socket_in_another_users_directory_is_refused() {
    if !can_be_another_user() {
        return;
    }
    // Another user made the default socket directory first
    // ($XDG_RUNTIME_DIR/toolgate here, as /tmp/toolgate-UID would be).
    let runtime = Dir::new("runtime", 0o700, None);
    let theirs = runtime.0.join("toolgate");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    // Theirs must be reachable by them.
    std::fs::set_permissions(&runtime.0, std::fs::Permissions::from_mode(0o711)).unwrap();
    let socket = theirs.join("broker.sock");
    let _fake = Fake::start(&socket, true);
    let why = format!(
        "the socket's directory {} belongs to uid 65534, not to you (uid 0)",
        theirs.display()
    );

    refused_by_hook_and_mcp(&socket, &why);

    // `toolgate approve` on the default path finds their socket, and
    // refuses it.
    let (code, stderr) = approve(&[], &[("XDG_RUNTIME_DIR", &runtime.0)]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains(&why), "{stderr}");
}

#[test]
fn a_socket_in_a_directory_others_can_enter_is_refused() {
    if !Path::new(PYTHON).exists() {
        eprintln!("skipped: needs {PYTHON} for the stand-in broker");
        return;
    }
    let open = Dir::new("open", 0o777, None);
    let socket = open.0.join("broker.sock");
    let _fake = Fake::start(&socket, false);
    let why = format!(
        "the socket's directory {} can be entered by other users (mode 777)",
        open.0.display()
    );
    refused_by_hook_and_mcp(&socket, &why);
    let (code, stderr) = approve(&["--socket", socket.to_str().unwrap()], &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains(&why), "{stderr}");

    // The same directory made private: the stand-in is trusted (so what
    // was refused above was the directory).
    std::fs::set_permissions(&open.0, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (decision, reason) = hook(&socket);
    assert_eq!(
        (decision.as_str(), reason.as_str()),
        ("allow", "toolgate: a stand-in broker allows everything")
    );
}

#[test]
fn a_broker_running_as_another_user_is_refused() {
    if !can_be_another_user() {
        return;
    }
    // They listen in a directory of theirs; the socket is then moved into
    // ours (as a mistaken or hostile setup could leave it).
    let theirs = Dir::new("theirs", 0o700, Some(65534));
    let ours = Dir::new("ours", 0o700, None);
    let _fake = Fake::start(&theirs.0.join("broker.sock"), true);
    let socket = ours.0.join("broker.sock");
    std::fs::rename(theirs.0.join("broker.sock"), &socket).unwrap();

    // Their socket file in our directory.
    let (decision, reason) = hook(&socket);
    assert_eq!(decision, "deny", "{reason}");
    assert!(
        reason.contains(&format!(
            "the socket {} belongs to uid 65534, not to you (uid 0)",
            socket.display()
        )),
        "{reason}"
    );

    // Ours in name only: the process behind it runs as uid 65534.
    std::os::unix::fs::chown(&socket, Some(0), Some(0)).unwrap();
    let why = format!(
        "the broker listening on {} runs as uid 65534, not as you (uid 0)",
        socket.display()
    );
    refused_by_hook_and_mcp(&socket, &why);
    let (code, stderr) = approve(&["--socket", socket.to_str().unwrap()], &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains(&why), "{stderr}");
}
