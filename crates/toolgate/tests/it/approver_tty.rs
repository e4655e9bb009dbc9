//! The terminal approvers in a real pseudo-terminal (tmux): `toolgate
//! approve` on a socket, and `serve --approver tty` on /dev/tty.
//!
//! Each test runs its own tmux server (`tmux -L NAME`), so tests never see
//! each other's panes. Without tmux the tests say so and pass.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{json, Value};

use crate::support::tmux::Tmux;
use crate::support::{self, PATIENCE};

fn toolgate() -> &'static str {
    env!("CARGO_BIN_EXE_toolgate")
}

fn socket_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("toolgate-ttysock-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The broker accepts only a directory nobody else can enter.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir.join("broker.sock")
}

/// One side of a line connection.
struct Lines {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Lines {
    fn new(stream: UnixStream) -> Lines {
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        Lines {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
        }
    }

    fn send(&mut self, frame: &Value) {
        let mut line = serde_json::to_vec(frame).unwrap();
        line.push(b'\n');
        self.writer.write_all(&line).unwrap();
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("a line in time");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }
}

fn request(id: &str, session: &str, command: &str, options: Value) -> Value {
    json!({
        "type":"permission_request","timestamp":0,"sessionID":session,"permissionID":id,
        "callID":format!("call-{id}"),"tool":"bash","permission":"bash","toolName":"Bash",
        "pattern":[],"patterns":[command],"always":options.as_array().unwrap().last().unwrap(),
        "alwaysOptions":options,"title":command,
        "metadata":{"command":command,"client":"claude","reason":"ask mode asks before commands that are not read-only"}
    })
}

/// `toolgate approve` against a scripted broker: what it shows and what it
/// sends for each key, in a real terminal.
#[test]
fn approve_against_a_scripted_broker() {
    let socket = socket_path("scripted");
    let listener = UnixListener::bind(&socket).unwrap();
    let command = format!(
        "{} approve --socket {}; echo EXIT=$?; sleep 600",
        toolgate(),
        socket.display()
    );
    let Some(tmux) = Tmux::start("scripted", &command) else {
        return;
    };
    let (stream, _) = listener.accept().unwrap();
    let mut broker = Lines::new(stream);
    broker.send(&json!({"type":"ready","protocol":1,"version":"0","mode":"ask","projectRoot":"/","policySources":[],"stateDir":null}));
    assert_eq!(
        broker.read(),
        json!({"type":"hello","role":"approver","client":"approve"})
    );
    tmux.wait_for("(connecting…)");
    broker.send(&json!({"type":"ready","protocol":1,"version":"0","mode":"ask","projectRoot":"/","policySources":[],"stateDir":null,"role":"approver","client":"approve"}));
    tmux.wait_gone("(connecting…)");
    broker.send(&request(
        "per_1",
        "s1",
        "rm -rf build",
        json!([["rm -rf build"], ["rm *"]]),
    ));
    broker.send(&request(
        "per_2",
        "s2",
        "git push origin main",
        json!([["git push origin main"], ["git push *"]]),
    ));
    let screen = tmux.wait_for("2. s2 [claude]  bash (Bash)  git push origin main");
    assert!(screen.contains("toolgate approve — 2 pending"), "{screen}");
    assert!(
        screen.contains("rm -rf build   not read-only: `rm` deletes files"),
        "{screen}"
    );
    assert!(screen.contains(" ▶ 2. bash rm *"), "{screen}");
    // The second question first, always with the narrower entry.
    tmux.keys(&["j"]);
    tmux.wait_for("git push origin main   not read-only");
    tmux.keys(&["Left"]);
    tmux.wait_for(" ▶ 1. bash git push origin main");
    tmux.keys(&["a"]);
    assert_eq!(
        broker.read(),
        json!({"type":"permission_response","permissionID":"per_2","response":"always","patterns":["git push origin main"]})
    );
    tmux.wait_for("answered always (git push origin main): git push origin main");
    // Then the first: reject with a typed message.
    tmux.keys(&["r"]);
    tmux.wait_for("reject with message (Enter sends, Esc back):");
    tmux.text("use cargo clean");
    tmux.keys(&["Enter"]);
    assert_eq!(
        broker.read(),
        json!({"type":"permission_response","permissionID":"per_1","response":"reject","message":"use cargo clean"})
    );
    tmux.wait_for("no pending questions");
    // `t`: always, for a while only; `T` chooses how long.
    broker.send(&request(
        "per_4",
        "s1",
        "cargo build",
        json!([["cargo build"], ["cargo build *"]]),
    ));
    tmux.wait_for("1. s1 [claude]  bash (Bash)  cargo build");
    tmux.wait_for("t always for 30 min (T: how long)");
    tmux.keys(&["T"]);
    tmux.wait_for("t always for 2 h (T: how long)");
    tmux.keys(&["t"]);
    assert_eq!(
        broker.read(),
        json!({"type":"permission_response","permissionID":"per_4","response":"always","expiresIn":7200})
    );
    tmux.wait_for("answered always (cargo build *) for 2 h: cargo build");
    // A question resolved elsewhere disappears, saying why.
    broker.send(&request(
        "per_3",
        "s1",
        "make install",
        json!([["make install"], ["make *"]]),
    ));
    tmux.wait_for("1. s1 [claude]  bash (Bash)  make install");
    broker.send(&json!({"type":"permission_resolved","permissionID":"per_3","sessionID":"s1","callID":"call-per_3","reason":"answered on another connection"}));
    let screen = tmux.wait_for("closed: make install (answered on another connection)");
    assert!(screen.contains("no pending questions"), "{screen}");
    // The broker goes away: the approver says so and exits 1.
    drop(broker);
    drop(listener);
    let screen = tmux.wait_for("EXIT=1");
    assert!(
        screen.contains(&format!(
            "toolgate approve: the connection to {} was lost",
            socket.display()
        )),
        "{screen}"
    );
}

/// No broker at the socket: a clear error and exit 1.
#[test]
fn approve_without_a_broker() {
    let socket = socket_path("nobroker");
    let output = Command::new(toolgate())
        .args(["approve", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "no toolgate broker listens on {}",
            socket.display()
        )),
        "{stderr}"
    );
    let _ = Path::new(&socket);
}

/// The frames `serve` wrote to `path` so far.
fn frames_in(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Wait until `path` holds the decision of `call`; that decision.
fn decision_of(path: &Path, call: &str) -> Value {
    let start = Instant::now();
    loop {
        if let Some(decision) = frames_in(path)
            .into_iter()
            .find(|f| f["type"] == "decision" && f["callID"] == call)
        {
            return decision;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "no decision for {call}: {:?}",
            frames_in(path)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `serve --approver tty` in a tmux pane of its own (under `script`, which
/// logs what the terminal received to `ROOT/typescript`, when `logged`),
/// its stdin a FIFO the test writes the agent's frames to and its stdout
/// `ROOT/out.jsonl`. `None` (after saying why) when tmux is missing.
struct TtyServe {
    tmux: Tmux,
    root: PathBuf,
    output: PathBuf,
    agent: std::fs::File,
}

impl TtyServe {
    fn start(name: &str, logged: bool) -> Option<TtyServe> {
        let root = support::project_dir(name);
        let input = root.join("in.fifo");
        let output = root.join("out.jsonl");
        let status = Command::new("mkfifo").arg(&input).status().unwrap();
        assert!(status.success());
        let serve = format!(
            "{bin} serve --approver tty --ask-timeout 0 <{input} >{output} 2>{root}/err.txt",
            root = root.display(),
            bin = toolgate(),
            input = input.display(),
            output = output.display(),
        );
        let serve = if logged {
            format!(
                "script -q -f -c '{serve}' {}",
                root.join("typescript").display()
            )
        } else {
            serve
        };
        let command = format!("cd {} && {serve}; echo EXIT=$?; sleep 600", root.display());
        let tmux = Tmux::start(name, &command)?;
        let agent = std::fs::OpenOptions::new()
            .write(true)
            .open(&input)
            .unwrap();
        Some(TtyServe {
            tmux,
            root,
            output,
            agent,
        })
    }
}

/// One frame on the agent's pipe.
fn send_frame(agent: &mut std::fs::File, frame: &Value) {
    let mut line = serde_json::to_vec(frame).unwrap();
    line.push(b'\n');
    agent.write_all(&line).unwrap();
}

/// `serve --approver tty` with stdin and stdout redirected (the agent's
/// pipes) asks on the tmux pane, its /dev/tty.
#[test]
fn serve_asks_on_the_terminal() {
    let Some(TtyServe {
        tmux,
        root: _,
        output,
        mut agent,
    }) = TtyServe::start("ttyserve", false)
    else {
        return;
    };
    let mut send = |frame: Value| send_frame(&mut agent, &frame);
    let call = |id: &str, command: &str| json!({"type":"tool_call","callID":id,"tool":"bash","input":{"command":command}});
    send(call("c1", "rm -rf build"));
    let screen = tmux.wait_for(
        "[o once · a always · t always for 30 min (t 2h: how long) · r reject [message] · s next] >",
    );
    assert!(
        screen.contains("── toolgate asks (1 pending) ──"),
        "{screen}"
    );
    assert!(
        screen.contains("rm -rf build   not read-only: `rm` deletes files"),
        "{screen}"
    );
    send(call("c2", "git commit -m one"));
    tmux.wait_for("(another question arrived: 2 pending; `s` shows the next)");
    // Answer the second first: always, with the narrower entry.
    tmux.keys(&["s", "Enter"]);
    tmux.wait_for("a always (a1…a2: that entry) · t always for 30 min (t1…t2; t 2h: how long)");
    tmux.text("a1");
    tmux.keys(&["Enter"]);
    let decision = decision_of(&output, "c2");
    assert_eq!(decision["decision"], "allow");
    assert_eq!(decision["source"], "user");
    // The grant covers exactly `git commit -m one`.
    send(call("c3", "git commit -m one"));
    assert_eq!(decision_of(&output, "c3")["source"], "grant");
    // The first: reject with a typed message.
    tmux.wait_for("── toolgate asks (1 pending) ──");
    tmux.keys(&["r", "Enter"]);
    tmux.wait_for("message for the agent (Enter for none) >");
    tmux.text("use make clean");
    tmux.keys(&["Enter"]);
    let decision = decision_of(&output, "c1");
    assert_eq!(decision["decision"], "deny");
    assert_eq!(decision["message"], "use make clean");
    // A question the agent withdraws closes on the terminal.
    send(call("c4", "git commit -m two"));
    tmux.wait_for("git commit -m two   not read-only");
    send(json!({"type":"cancel","callID":"c4"}));
    tmux.wait_for("closed: git commit -m two (");
    assert_eq!(decision_of(&output, "c4")["source"], "cancel");
    // `t 2h`: always, for two hours only.
    send(call("c5", "cargo build"));
    tmux.wait_for("cargo build   not read-only");
    tmux.text("t 2h");
    tmux.keys(&["Enter"]);
    let decision = decision_of(&output, "c5");
    assert_eq!(
        decision["reason"],
        "the user allowed this call and granted its `always` patterns for the session for 2 hours"
    );
    send(call("c6", "cargo build --release"));
    let decision = decision_of(&output, "c6");
    assert_eq!(decision["source"], "grant");
    assert!(
        decision["rule"]["expiresAt"].as_u64().is_some(),
        "{decision}"
    );
    drop(agent);
    tmux.wait_for("EXIT=0");
    let frames = frames_in(&output);
    assert!(
        frames
            .iter()
            .all(|f| f["type"] == "ready" || f["type"] == "decision"),
        "the agent sees no question: {frames:?}"
    );
}

/// A spawned `toolgate serve --listen unix:PATH`, stopped when dropped.
struct Listening {
    child: std::process::Child,
}

impl Listening {
    fn start(root: &Path, socket: &Path) -> Listening {
        let child = Command::new(toolgate())
            .args(["serve", "--listen"])
            .arg(format!("unix:{}", socket.display()))
            .arg("--project-root")
            .arg(root)
            .current_dir(root)
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while UnixStream::connect(socket).is_err() {
            assert!(
                start.elapsed() < PATIENCE,
                "the broker never listened on {}",
                socket.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Listening { child }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An agent on the socket: it reads frames until the decision of a call.
fn agent(socket: &Path) -> Lines {
    let mut agent = Lines::new(UnixStream::connect(socket).unwrap());
    assert_eq!(agent.read()["type"], "ready");
    agent.send(&json!({"type":"hello","role":"agent","client":"tester"}));
    assert_eq!(agent.read()["type"], "ready");
    agent
}

impl Lines {
    /// Frames until the decision of `call`; that decision.
    fn decision(&mut self, call: &str) -> Value {
        loop {
            let frame = self.read();
            if frame["type"] == "decision" && frame["callID"] == call {
                return frame;
            }
        }
    }
}

/// `toolgate approve` attached to a real broker on its socket, an agent on
/// another connection: answers in any order, a narrower always grant, a
/// reject with a message the agent receives, a cancelled question closes,
/// the broker's end is reported.
#[test]
fn approve_a_real_broker() {
    let root = support::project_dir("approve-live");
    let socket = socket_path("live");
    let mut broker = Listening::start(&root, &socket);
    let command = format!(
        "{} approve --socket {}; echo EXIT=$?; sleep 600",
        toolgate(),
        socket.display()
    );
    let Some(tmux) = Tmux::start("live", &command) else {
        return;
    };
    // Questions come to the approver once the broker has its hello.
    tmux.wait_for("toolgate approve — 0 pending — ");
    tmux.wait_gone("(connecting…)");
    let mut agent = agent(&socket);
    let call = |id: &str, session: &str, command: &str| json!({"type":"tool_call","callID":id,"sessionID":session,"tool":"bash","input":{"command":command}});
    agent.send(&call("c1", "s1", "git commit -m one"));
    agent.send(&call("c2", "s2", "git push origin main"));
    let screen = tmux.wait_for("2. s2 [tester]  bash  git push origin main");
    assert!(
        screen.contains("1. s1 [tester]  bash  git commit -m one"),
        "{screen}"
    );
    // The second first: once.
    tmux.keys(&["j"]);
    tmux.wait_for("title    git push origin main");
    tmux.keys(&["o"]);
    let decision = agent.decision("c2");
    assert_eq!(decision["decision"], "allow");
    assert_eq!(decision["source"], "user");
    // Then the first: always, the narrower entry.
    tmux.wait_for("title    git commit -m one");
    tmux.keys(&["Left"]);
    tmux.wait_for(" ▶ 1. bash git commit -m one");
    tmux.keys(&["a"]);
    assert_eq!(agent.decision("c1")["decision"], "allow");
    // The grant covers exactly that command, in that session.
    agent.send(&call("c3", "s1", "git commit -m one"));
    assert_eq!(agent.decision("c3")["source"], "grant");
    agent.send(&call("c4", "s1", "git commit -m two"));
    tmux.wait_for("title    git commit -m two");
    tmux.keys(&["r"]);
    tmux.wait_for("reject with message (Enter sends, Esc back):");
    tmux.text("squash them first");
    tmux.keys(&["Enter"]);
    let decision = agent.decision("c4");
    assert_eq!(decision["decision"], "deny");
    assert_eq!(decision["message"], "squash them first");
    // A question that ends elsewhere leaves the list, saying why.
    agent.send(&call("c5", "s2", "make install"));
    tmux.wait_for("title    make install");
    agent.send(&json!({"type":"cancel","callID":"c5","sessionID":"s2"}));
    assert_eq!(agent.decision("c5")["source"], "cancel");
    tmux.wait_for("closed: make install (");
    // The broker stops: the approver says the connection was lost, exit 1.
    let _ = Command::new("kill")
        .arg(broker.child.id().to_string())
        .status();
    let _ = broker.child.wait();
    let screen = tmux.wait_for("EXIT=1");
    assert!(
        screen.contains("toolgate approve: the connection to"),
        "{screen}"
    );
}

/// What an agent can put in the strings a person reads: a clear-screen, a
/// title change (ended by BEL), hidden text and a right-to-left override.
const CLEAR: &str = "\u{1b}[2J";
const TITLE: &str = "\u{1b}]0;pwned\u{7}";
const HIDE: &str = "\u{1b}[8m";
const RTL: &str = "\u{202e}";

/// The bytes `script` logged (all the terminal received) hold none of the
/// agent's sequences raw, and every `visible` form.
fn assert_shown_escaped(log: &Path, visible: &[&str]) {
    let raw = std::fs::read(log).unwrap();
    let text = String::from_utf8_lossy(&raw);
    for bad in [CLEAR, "\u{1b}]0;", HIDE, RTL] {
        assert!(
            !text.contains(bad),
            "the terminal received {bad:?} raw:\n{text:?}"
        );
    }
    for good in visible {
        assert!(text.contains(good), "{good:?} is not shown:\n{text:?}");
    }
}

/// `toolgate approve` shows a session id, a parent, a client, a title and a
/// command that carry escape sequences with the sequences made visible
/// (`\x1b[2J`, `\u{202e}`): the terminal never receives them raw.
#[test]
fn approve_shows_escape_sequences_visibly() {
    let socket = socket_path("escapes");
    let listener = UnixListener::bind(&socket).unwrap();
    let log = socket.with_file_name("typescript");
    let command = format!(
        "script -q -f -c '{} approve --socket {}' {}; echo EXIT=$?; sleep 600",
        toolgate(),
        socket.display(),
        log.display()
    );
    let Some(tmux) = Tmux::start("escapes", &command) else {
        return;
    };
    let (stream, _) = listener.accept().unwrap();
    let mut broker = Lines::new(stream);
    assert_eq!(broker.read()["type"], "hello");
    broker.send(&json!({"type":"ready","protocol":1,"version":"0","mode":"ask","projectRoot":"/","policySources":[],"stateDir":null,"role":"approver","client":"approve"}));
    tmux.wait_gone("(connecting…)");
    let shown = format!("echo {HIDE}hidden {RTL}txt.exe");
    let mut question = request(
        "per_1",
        &format!("s{CLEAR}x"),
        &shown,
        json!([[shown.clone()], ["echo *"]]),
    );
    question["parentID"] = json!(format!("main{TITLE}"));
    question["metadata"]["client"] = json!(format!("cl{CLEAR}"));
    broker.send(&question);
    tmux.wait_for("title    echo \\x1b[8mhidden \\u{202e}txt.exe");
    let screen = tmux.screen();
    assert!(
        screen.contains("1. s\\x1b[2Jx (in main\\x1b]0;pwned\\x07) [cl\\x1b[2J]"),
        "{screen}"
    );
    assert!(
        screen.contains("session  s\\x1b[2Jx  (sub-session of main\\x1b]0;pwned\\x07)"),
        "{screen}"
    );
    // The always entries, and the notice of the answer, escape it too.
    tmux.keys(&["Left", "a"]);
    assert_eq!(broker.read()["response"], "always");
    tmux.wait_for("answered always (echo \\x1b[8mhidden \\u{202e}txt.exe)");
    broker.send(&request(
        "per_2",
        "s",
        &format!("rm {RTL}x"),
        json!([["rm *"]]),
    ));
    broker.send(&json!({"type":"permission_resolved","permissionID":"per_2","sessionID":"s","callID":"call-per_2","reason":format!("gone{CLEAR}")}));
    tmux.wait_for("closed: rm \\u{202e}x (gone\\x1b[2J)");
    tmux.keys(&["q"]);
    tmux.wait_for("EXIT=0");
    assert_shown_escaped(&log, &SHOWN_ESCAPED);
}

/// How the escape sequences the tests send must appear on the terminal.
const SHOWN_ESCAPED: [&str; 4] = [
    "\\x1b[2J",
    "\\x1b]0;pwned\\x07",
    "\\x1b[8mhidden",
    "\\u{202e}txt.exe",
];

/// `serve --approver tty` (on script's pseudo-terminal) with a sub-session
/// and a command from the agent carrying escape sequences.
#[test]
fn the_tty_approver_shows_escape_sequences_visibly() {
    let Some(TtyServe {
        tmux,
        root,
        output,
        mut agent,
    }) = TtyServe::start("ttyescapes", true)
    else {
        return;
    };
    let log = root.join("typescript");
    let mut send = |frame: Value| send_frame(&mut agent, &frame);
    let parent = format!("main{TITLE}");
    let session = format!("s{CLEAR}x");
    send(json!({"type":"session_start","sessionID":parent}));
    send(json!({"type":"session_start","sessionID":session,"parentID":parent}));
    let command = format!("echo {HIDE}hidden > {RTL}txt.exe");
    send(
        json!({"type":"tool_call","callID":"c1","sessionID":session,"tool":"bash","input":{"command":command}}),
    );
    let screen = tmux.wait_for("[o once · a always");
    assert!(
        screen.contains("session  s\\x1b[2Jx  (sub-session of main\\x1b]0;pwned\\x07)"),
        "{screen}"
    );
    assert!(
        screen.contains("  echo \\x1b[8mhidden > \\u{202e}txt.exe"),
        "{screen}"
    );
    tmux.text("o");
    tmux.keys(&["Enter"]);
    assert_eq!(decision_of(&output, "c1")["decision"], "allow");
    drop(agent);
    tmux.wait_for("EXIT=0");
    assert_shown_escaped(&log, &SHOWN_ESCAPED);
}

/// With `--approver tty` the agent's pipe is not an answerer (issue 25 item
/// 2): its `hello` as an approver is refused, no question reaches its
/// stdout, its answer is refused, and the person at the terminal decides.
#[test]
fn the_agent_cannot_answer_for_the_tty_approver() {
    let Some(TtyServe {
        tmux,
        root: _,
        output,
        mut agent,
    }) = TtyServe::start("ttyself", false)
    else {
        return;
    };
    let mut send = |frame: Value| send_frame(&mut agent, &frame);
    send(json!({"type":"hello","role":"approver","client":"sly"}));
    send(
        json!({"type":"tool_call","callID":"c1","tool":"bash","input":{"command":"rm -rf build"}}),
    );
    tmux.wait_for("[o once · a always · t always for 30 min (t 2h: how long) · r reject [message] · s next] >");
    let frames = frames_in(&output);
    assert!(
        frames
            .iter()
            .any(|f| f["type"] == "error" && f["code"] == "forbidden"),
        "{frames:?}"
    );
    assert!(
        frames.iter().all(|f| f["type"] != "permission_request"),
        "a question reached the agent: {frames:?}"
    );
    send(json!({"type":"permission_response","permissionID":"per_1","response":"once"}));
    tmux.keys(&["r", "Enter"]);
    tmux.wait_for("message for the agent (Enter for none) >");
    tmux.keys(&["Enter"]);
    let decision = decision_of(&output, "c1");
    assert_eq!(decision["decision"], "deny", "{decision}");
    assert_eq!(decision["source"], "user", "{decision}");
}
