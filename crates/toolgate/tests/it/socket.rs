//! `toolgate serve --listen unix:PATH`, spawned: many connections on one
//! broker, who hears and who may answer a question, what closing a
//! connection does, and the socket's security (file and directory modes,
//! another user refused, a live socket not taken over, removal on stop).
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A broker listening on a socket in a fresh 0700 directory.
struct Broker {
    child: Child,
    dir: PathBuf,
    sock: PathBuf,
}

impl Broker {
    fn start(name: &str, args: &[&str]) -> Broker {
        let dir = std::env::temp_dir().join(format!("toolgate-sock-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("project")).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let sock = dir.join("run").join("broker.sock");
        let child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .arg("serve")
            .arg("--listen")
            .arg(format!("unix:{}", sock.display()))
            .arg("--project-root")
            .arg(dir.join("project"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while UnixStream::connect(&sock).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the broker did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Broker { child, dir, sock }
    }

    fn connect(&self) -> Conn {
        Conn::open(&self.sock)
    }

    fn stop(mut self) -> String {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let out = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap())
            .wait_with_output()
            .unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One connection, read line by line with a generous timeout.
struct Conn {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Conn {
    fn open(path: &Path) -> Conn {
        let stream = UnixStream::connect(path).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        let mut conn = Conn { stream, reader };
        assert_eq!(conn.recv()["type"], "ready");
        conn
    }

    fn hello(&mut self, role: &str, client: &str) {
        self.send(json!({"type":"hello","role":role,"client":client}));
        let ready = self.recv();
        assert_eq!(ready["type"], "ready");
        assert_eq!(ready["role"], role);
    }

    fn send(&mut self, frame: Value) {
        let mut line = frame.to_string();
        line.push('\n');
        self.stream.write_all(line.as_bytes()).unwrap();
    }

    fn recv(&mut self) -> Value {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).unwrap();
        assert!(n > 0, "the broker closed the connection");
        serde_json::from_str(&line).unwrap()
    }

    /// Nothing arrives within `ms` (used only where the absence of a frame
    /// is the point: a frame that must not come).
    fn quiet(&mut self, ms: u64) -> bool {
        self.stream
            .set_read_timeout(Some(Duration::from_millis(ms)))
            .unwrap();
        let mut line = String::new();
        let quiet = self.reader.read_line(&mut line).is_err();
        self.stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        assert!(quiet, "unexpected frame: {line}");
        quiet
    }

    fn close(self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

fn edit(session: &str, call: &str, file: &str) -> Value {
    json!({"type":"tool_call","sessionID":session,"callID":call,"tool":"Edit",
           "input":{"file_path":file,"old_string":"x","new_string":"y"}})
}

fn read(session: &str, call: &str) -> Value {
    json!({"type":"tool_call","sessionID":session,"callID":call,"tool":"Read",
           "input":{"file_path":"src/a.rs"}})
}

#[test]
fn questions_go_to_approvers_and_the_first_answer_wins() {
    let broker = Broker::start("approvers", &[]);
    let mut agent = broker.connect();
    agent.hello("agent", "claude-hook");
    let mut other = broker.connect();
    let mut ap1 = broker.connect();
    ap1.hello("approver", "tui-1");
    let mut ap2 = broker.connect();
    ap2.hello("approver", "tui-2");

    agent.send(edit("s1", "c1", "src/a.rs"));
    let q1 = ap1.recv();
    let q2 = ap2.recv();
    assert_eq!(q1["type"], "permission_request");
    assert_eq!(q1, q2);
    assert_eq!(q1["metadata"]["client"], "claude-hook");
    let id = q1["permissionID"].as_str().unwrap().to_string();

    // Another agent is served while the question is open, and may not answer it.
    other.send(read("s2", "r1"));
    assert_eq!(other.recv()["decision"], "allow");
    other.send(json!({"type":"permission_response","permissionID":id,"response":"once"}));
    let refused = other.recv();
    assert_eq!(refused["code"], "unknown_permission");

    // The agent was not asked (approvers are connected).
    assert!(agent.quiet(300));

    ap2.send(json!({"type":"permission_response","permissionID":id,"response":"once"}));
    let decision = agent.recv();
    assert_eq!(decision["type"], "decision");
    assert_eq!(decision["decision"], "allow");
    assert_eq!(decision["callID"], "c1");
    let resolved = ap1.recv();
    assert_eq!(resolved["type"], "permission_resolved");
    assert_eq!(resolved["reason"], "answered by the approver `tui-2`");
    ap1.send(json!({"type":"permission_response","permissionID":id,"response":"reject"}));
    assert_eq!(ap1.recv()["code"], "already_resolved");
    broker.stop();
}

#[test]
fn always_from_an_approver_holds_for_the_session_on_other_connections() {
    let broker = Broker::start("always", &[]);
    let mut hook1 = broker.connect();
    let mut ap = broker.connect();
    ap.hello("approver", "me");
    hook1.send(edit("s1", "c1", "src/a.rs"));
    let q = ap.recv();
    ap.send(
        json!({"type":"permission_response","permissionID":q["permissionID"],"response":"always"}),
    );
    assert_eq!(hook1.recv()["decision"], "allow");
    hook1.close();
    // A second hook process, same session: no question.
    let mut hook2 = broker.connect();
    hook2.send(edit("s1", "c2", "src/b.rs"));
    let d = hook2.recv();
    assert_eq!(
        (d["decision"].as_str(), d["source"].as_str()),
        (Some("allow"), Some("grant"))
    );
    // Another session is still asked.
    hook2.send(edit("s2", "c3", "src/b.rs"));
    assert_eq!(ap.recv()["callID"], "c3");
    broker.stop();
}

#[test]
fn a_closed_connection_denies_its_open_calls_and_the_others_go_on() {
    let broker = Broker::start("close", &[]);
    let mut a = broker.connect();
    let mut b = broker.connect();
    let mut ap = broker.connect();
    ap.hello("approver", "me");
    a.send(json!({"type":"tool_call","sessionID":"s1","callID":"c1","tool":"Bash","input":{"command":"npm publish"}}));
    let q = ap.recv();
    assert_eq!(q["callID"], "c1");
    a.close();
    let resolved = ap.recv();
    assert_eq!(resolved["type"], "permission_resolved");
    assert_eq!(
        resolved["reason"],
        "the connection that made the call closed before the question was answered"
    );
    b.send(read("s1", "r1"));
    assert_eq!(b.recv()["decision"], "allow");
    ap.send(
        json!({"type":"permission_response","permissionID":q["permissionID"],"response":"once"}),
    );
    assert_eq!(ap.recv()["code"], "already_resolved");
    broker.stop();
}

#[test]
fn without_approvers_the_caller_is_asked_and_a_late_approver_hears_it_too() {
    let broker = Broker::start("late", &[]);
    let mut a = broker.connect();
    a.send(edit("s1", "c1", "src/a.rs"));
    let q = a.recv();
    assert_eq!(q["type"], "permission_request");
    let mut ap = broker.connect();
    ap.hello("approver", "me");
    let late = ap.recv();
    assert_eq!(late["permissionID"], q["permissionID"]);
    ap.send(json!({"type":"permission_response","permissionID":q["permissionID"],"response":"reject","message":"not this one"}));
    let d = a.recv();
    assert_eq!(d["type"], "decision");
    assert_eq!(d["decision"], "deny");
    assert_eq!(d["message"], "not this one");

    // The last approver leaving sends its open questions back to the callers.
    a.send(edit("s1", "c2", "src/b.rs"));
    let q2 = ap.recv();
    assert_eq!(q2["callID"], "c2");
    assert!(a.quiet(300));
    ap.close();
    let back = a.recv();
    assert_eq!(back["type"], "permission_request");
    assert_eq!(back["permissionID"], q2["permissionID"]);
    a.send(
        json!({"type":"permission_response","permissionID":q2["permissionID"],"response":"once"}),
    );
    assert_eq!(a.recv()["decision"], "allow");
    broker.stop();
}

#[test]
fn sigterm_denies_open_calls_on_every_connection_and_removes_the_socket() {
    let broker = Broker::start("sigterm", &[]);
    let mut a = broker.connect();
    let mut b = broker.connect();
    a.send(edit("s1", "c1", "src/a.rs"));
    assert_eq!(a.recv()["type"], "permission_request");
    b.send(edit("s2", "c2", "src/a.rs"));
    assert_eq!(b.recv()["type"], "permission_request");
    let sock = broker.sock.clone();
    let stderr = broker.stop();
    for (conn, call) in [(&mut a, "c1"), (&mut b, "c2")] {
        let mut frame = conn.recv();
        if frame["type"] == "permission_resolved" {
            frame = conn.recv();
        }
        assert_eq!(frame["type"], "decision");
        assert_eq!(frame["callID"], call);
        assert_eq!(frame["source"], "shutdown");
    }
    assert!(stderr.contains("denied 2 pending calls"), "{stderr}");
    assert!(!sock.exists(), "the socket file was left behind");
}

#[test]
fn the_socket_is_private_and_not_taken_over() {
    let broker = Broker::start("modes", &[]);
    let mode = std::fs::metadata(&broker.sock)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let dir_mode = std::fs::metadata(broker.sock.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    // A second broker on the same socket is refused.
    let second = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--listen"])
        .arg(format!("unix:{}", broker.sock.display()))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&second.stderr).contains("already listens"));
    // The first still serves.
    let mut a = broker.connect();
    a.send(read("s", "r"));
    assert_eq!(a.recv()["decision"], "allow");

    // A directory others can enter is refused.
    let open_dir = broker.dir.join("open");
    std::fs::create_dir_all(&open_dir).unwrap();
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let refused = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--listen"])
        .arg(format!("unix:{}", open_dir.join("b.sock").display()))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let text = String::from_utf8_lossy(&refused.stderr);
    assert!(text.contains("can be entered by other users"), "{text}");

    // A stale socket (nobody behind it) is replaced.
    let stale_dir = broker.dir.join("stale");
    std::fs::create_dir_all(&stale_dir).unwrap();
    std::fs::set_permissions(&stale_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let stale = stale_dir.join("b.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--listen"])
        .arg(format!("unix:{}", stale.display()))
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while UnixStream::connect(&stale).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "stale socket not replaced"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    broker.stop();
}

#[test]
fn another_user_is_refused() {
    // Run as root only: drop to uid 65534 for the client.
    // A system python another user can run (pyenv's shims live under /root).
    let python = "/usr/bin/python3";
    if !Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n")
        || Command::new("setpriv").arg("--version").output().is_err()
        || !Path::new(python).exists()
    {
        eprintln!("skipped: needs root, setpriv and {python} to connect as another user");
        return;
    }
    let broker = Broker::start("peercred", &[]);
    // Open the way on purpose (as a misconfiguration would): the uid check
    // is the second line of defence.
    std::fs::set_permissions(&broker.dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(
        broker.sock.parent().unwrap(),
        std::fs::Permissions::from_mode(0o711),
    )
    .unwrap();
    std::fs::set_permissions(&broker.sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let script = format!(
        "import socket; s=socket.socket(socket.AF_UNIX); s.connect({:?}); print(s.makefile().readline().strip())",
        broker.sock.display().to_string()
    );
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            python,
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let frame: Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|_| panic!("{text} / {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(frame["type"], "error");
    assert_eq!(frame["code"], "forbidden");
    let stderr = broker.stop();
    assert!(
        stderr.contains("refused a connection from uid 65534"),
        "{stderr}"
    );
}

#[test]
fn a_shutdown_frame_stops_the_broker_for_everyone() {
    let mut broker = Broker::start("shutdown", &[]);
    let mut a = broker.connect();
    let mut b = broker.connect();
    a.send(edit("s1", "c1", "src/a.rs"));
    assert_eq!(a.recv()["type"], "permission_request");
    b.send(json!({"type":"shutdown"}));
    let mut frame = a.recv();
    if frame["type"] == "permission_resolved" {
        frame = a.recv();
    }
    assert_eq!(frame["source"], "shutdown");
    let status = broker.child.wait().unwrap();
    assert!(status.success());
    assert!(!broker.sock.exists());
}

#[test]
fn a_client_that_never_reads_is_dropped_without_holding_up_the_others() {
    let broker = Broker::start("stall", &[]);
    let mut ap = broker.connect();
    ap.hello("approver", "me");
    let mut other = broker.connect();
    // The stalled client writes calls and never reads its decisions; the
    // socket's buffers fill, then its queue, then it is disconnected.
    let stalled = UnixStream::connect(&broker.sock).unwrap();
    let writer = {
        let mut stalled = stalled.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut n = 0;
            loop {
                let line = format!(
                    "{}\n",
                    json!({"type":"tool_call","sessionID":"flood","callID":format!("f{n}"),"tool":"Read","input":{"file_path":format!("src/{n}.rs")}})
                );
                if stalled.write_all(line.as_bytes()).is_err() {
                    return n;
                }
                n += 1;
                if n > 2_000_000 {
                    return n;
                }
            }
        })
    };
    // Meanwhile another connection is answered at once, again and again.
    for i in 0..50 {
        other.send(json!({"type":"tool_call","sessionID":"s","callID":format!("r{i}"),"tool":"Read","input":{"file_path":format!("docs/{i}.md")}}));
        let d = other.recv();
        assert_eq!(d["decision"], "allow", "{d}");
    }
    let written = writer.join().unwrap();
    assert!(
        written < 2_000_000,
        "the stalled client was never disconnected"
    );
    other.send(read("s2", "after"));
    assert_eq!(other.recv()["decision"], "allow");
    drop(stalled);
    let stderr = broker.stop();
    assert!(stderr.contains("stopped reading"), "{stderr}");
}

#[test]
fn an_approved_plan_tells_the_agent_its_new_mode() {
    let broker = Broker::start("plan", &["--mode", "plan"]);
    let mut agent = broker.connect();
    let mut ap = broker.connect();
    ap.hello("approver", "me");
    agent.send(json!({"type":"tool_call","sessionID":"p","callID":"x1","tool":"ExitPlanMode","input":{"plan":"1. fix it"}}));
    let q = ap.recv();
    assert_eq!(q["kind"], "plan");
    ap.send(
        json!({"type":"permission_response","permissionID":q["permissionID"],"response":"once"}),
    );
    let decision = agent.recv();
    assert_eq!(decision["decision"], "allow");
    let changed = agent.recv();
    assert_eq!(changed["type"], "mode_changed");
    assert_eq!(changed["mode"], "ask");
    // The approver that answered hears it too.
    assert_eq!(ap.recv()["type"], "mode_changed");
    broker.stop();
}

/// Each connection prepares its calls outside the broker's lock with the
/// policy it last saw; after a SIGHUP reload a call prepared with the old
/// policy is judged under the new one all the same.
#[test]
fn a_reload_reaches_a_connection_that_prepared_with_the_old_policy() {
    let broker = Broker::start("reload", &["--mode", "readonly"]);
    let policy = broker.dir.join("project").join("toolgate.json");
    let shell = |call: &str, command: &str| json!({"type":"tool_call","sessionID":"s","callID":call,"tool":"Bash","input":{"command":command}});
    let verdict = |conn: &mut Conn, call: Value| {
        conn.send(call);
        let decision = conn.recv();
        format!("{} {}", decision["decision"], decision["source"])
    };
    std::fs::write(&policy, "{}").unwrap();
    let mut first = broker.connect();
    let mut probe = broker.connect();
    assert_eq!(
        verdict(&mut first, shell("a1", "cat notes/secret.txt")),
        r#""allow" "mode""#
    );
    std::fs::write(
        &policy,
        r#"{"permission":{"read":{"notes/secret.txt":"deny"}}}"#,
    )
    .unwrap();
    let status = Command::new("kill")
        .args(["-HUP", &broker.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // Wait on another connection until the new policy judges.
    let start = Instant::now();
    for n in 0.. {
        let command = format!("head -n {n} notes/secret.txt");
        if verdict(&mut probe, shell(&format!("p{n}"), &command)) == r#""deny" "rule""# {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the reload never took effect"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The first connection last saw the old policy.
    assert_eq!(
        verdict(&mut first, shell("a2", "tail notes/secret.txt")),
        r#""deny" "rule""#
    );
    let stderr = broker.stop();
    assert!(stderr.contains("reloaded the policy"), "{stderr}");
}

/// The connection that made a call never answers it while another can
/// (issue 25 item 2): an agent that says `hello` as an approver is not asked
/// about its own call when another approver is connected, and its answer is
/// refused; the other approver's answer decides.
#[test]
fn an_approver_never_answers_its_own_call() {
    let broker = Broker::start("self-approve", &["--ask-timeout", "5"]);
    let mut human = broker.connect();
    human.hello("approver", "tui");
    let mut sly = broker.connect();
    sly.hello("approver", "sly-agent");
    sly.send(edit("s1", "c1", "src/a.rs"));
    let question = human.recv();
    assert_eq!(question["type"], "permission_request");
    assert!(sly.quiet(300), "the agent was asked about its own call");
    let id = question["permissionID"].as_str().unwrap().to_string();
    sly.send(json!({"type":"permission_response","permissionID":id,"response":"once"}));
    assert_eq!(sly.recv()["code"], "unknown_permission");
    human.send(json!({"type":"permission_response","permissionID":id,"response":"reject"}));
    let decision = sly.recv();
    assert_eq!(decision["type"], "decision");
    assert_eq!(decision["decision"], "deny");
    assert_eq!(decision["source"], "user");
    // An approver that connects later is not handed its own open call.
    let mut late = broker.connect();
    late.hello("agent", "late");
    late.send(edit("s2", "c2", "src/b.rs"));
    let question = human.recv();
    assert_eq!(question["type"], "permission_request");
    late.hello("approver", "late-approver");
    assert!(late.quiet(300), "the late approver was handed its own call");
    broker.stop();
}
