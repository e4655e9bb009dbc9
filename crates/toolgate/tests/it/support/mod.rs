//! Driving the real `toolgate` binary from tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test support

pub mod frame_invariant;
pub mod oracle;
#[cfg(feature = "fleet")]
pub mod pg;
pub mod sweep;
#[cfg(unix)]
pub mod tmux;

use std::io::{BufRead, BufReader, Write};
use std::panic::Location;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long any wait in a test may take before it fails.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A running broker with its output collected in the background.
pub struct Broker {
    child: Child,
    stdin: Option<ChildStdin>,
    output: Arc<(Mutex<Vec<String>>, Condvar)>,
    stderr: Arc<Mutex<String>>,
    /// The threads that collect stdout and stderr; they end when the pipes close.
    readers: Vec<std::thread::JoinHandle<()>>,
}

/// A fresh empty project directory for one test.
#[track_caller]
pub fn project_dir(name: &str) -> PathBuf {
    fresh_dir("test", name, Location::caller())
}

/// A fresh empty state directory for one test (`$STATE` in transcripts): a
/// sibling of [`project_dir`], never inside it.
#[track_caller]
pub fn state_dir(name: &str) -> PathBuf {
    fresh_dir("state", name, Location::caller())
}

/// `toolgate-KIND-PID-AREA-NAME` in the temporary directory, emptied. Every
/// area of the test binary runs in the same process, so AREA, the file of
/// the caller (`journal` for `journal.rs`), keeps one area's names from
/// meeting another's: a name need only be unique within its area.
fn fresh_dir(kind: &str, name: &str, caller: &Location<'_>) -> PathBuf {
    let area = Path::new(caller.file())
        .file_stem()
        .and_then(|stem| stem.to_str())
        .unwrap_or("unknown");
    let dir = std::env::temp_dir().join(format!(
        "toolgate-{kind}-{}-{area}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Broker {
    /// Start `toolgate` with `args` in `root` (which is also the project root
    /// unless the args say otherwise).
    pub fn start(root: &Path, args: &[String], env: &[(String, String)]) -> Broker {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate"));
        command
            .args(args)
            .current_dir(root)
            .env_remove("TOOLGATE_PERMISSION")
            .env_remove("TOOLGATE_MANAGED")
            .env("RUST_LOG", "warn")
            .env("HOME", "/home/tester")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn toolgate");
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let output: Arc<(Mutex<Vec<String>>, Condvar)> =
            Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let sink = output.clone();
        let out_reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let (lines, ready) = &*sink;
                lines.lock().unwrap().push(line);
                ready.notify_all();
            }
        });
        let errors = Arc::new(Mutex::new(String::new()));
        let sink = errors.clone();
        let err_reader = std::thread::spawn(move || {
            let mut reader = BufReader::new(stderr);
            let mut line = String::new();
            while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        let stdin = child.stdin.take();
        Broker {
            child,
            stdin,
            output,
            stderr: errors,
            readers: vec![out_reader, err_reader],
        }
    }

    /// Write raw bytes to the broker's stdin.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        // A broker that already exited (e.g. after shutdown) closes the pipe.
        let _ = stdin.write_all(bytes);
        let _ = stdin.flush();
    }

    /// Write one line.
    pub fn send(&mut self, line: &str) {
        let mut bytes = line.as_bytes().to_vec();
        bytes.push(b'\n');
        self.send_raw(&bytes);
    }

    /// Wait until `done(output)` holds; panic after [`PATIENCE`].
    pub fn wait_for(&self, what: &str, done: impl Fn(&[String]) -> bool) {
        let (lines, ready) = &*self.output;
        let deadline = Instant::now() + PATIENCE;
        let mut guard = lines.lock().unwrap();
        while !done(&guard) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!(
                    "timed out waiting for {what}; output so far:\n{}",
                    guard.join("\n")
                );
            }
            guard = ready.wait_timeout(guard, left).unwrap().0;
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send a signal with `kill -NAME` (std has no kill).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Wait until stderr holds `piece`; panic after [`PATIENCE`].
    pub fn wait_for_stderr(&self, piece: &str) {
        let deadline = Instant::now() + PATIENCE;
        while !self.stderr.lock().unwrap().contains(piece) {
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for `{piece}` on stderr:\n{}",
                    self.stderr.lock().unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Wait for the process to exit on its own (without closing stdin);
    /// returns the status, all stdout lines, and stderr.
    pub fn wait_exit(mut self) -> (ExitStatus, Vec<String>, String) {
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "toolgate did not exit; output:\n{}",
                    self.lines().join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        // The pipes close with the process: read them to the end.
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        let stderr = self.stderr.lock().unwrap().clone();
        (status, self.lines(), stderr)
    }

    /// Output lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.output.0.lock().unwrap().clone()
    }

    /// Output frames so far, parsed.
    pub fn frames(&self) -> Vec<Value> {
        self.lines()
            .iter()
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|err| panic!("stdout is not JSON ({err}): {line}"))
            })
            .collect()
    }

    /// Close stdin and wait for the exit; returns the status, all stdout lines, and stderr.
    pub fn finish(mut self) -> (ExitStatus, Vec<String>, String) {
        drop(self.stdin.take());
        self.wait_exit()
    }
}

/// Count frames of a type.
pub fn count_type(lines: &[String], kind: &str) -> usize {
    let needle = format!("{{\"type\":\"{kind}\"");
    lines
        .iter()
        .filter(|line| line.starts_with(&needle))
        .count()
}

/// A broker in process, over `/work/project` with the default policy, a
/// manual clock and sequential ids; `ask_timeout_ms` 0 waits forever.
pub fn in_process(
    clock: toolgate::clock::ManualClock,
    ask_timeout_ms: u64,
) -> toolgate::broker::Broker {
    let (policy, _) = toolgate_policy::Policy::build(toolgate_policy::Sources {
        project_root: PathBuf::from("/work/project"),
        ..toolgate_policy::Sources::default()
    })
    .unwrap();
    toolgate::broker::Broker::new(
        Arc::new(policy),
        toolgate::broker::BrokerConfig {
            on_ask: toolgate::broker::OnAsk::Wait,
            ask_timeout_ms,
        },
        Box::new(clock),
        Box::new(toolgate::clock::SequentialIds::default()),
    )
}

/// Hand one line to an in-process broker as connection 0 (as stdio does),
/// appending the frames it writes.
pub fn feed_line(
    broker: &mut toolgate::broker::Broker,
    line: &[u8],
    number: u64,
    out: &mut Vec<toolgate_protocol::ServerFrame>,
) {
    step(
        broker,
        toolgate::broker::Input::Line {
            conn: 0,
            line,
            number,
        },
        out,
    );
}

/// Run one step of an in-process broker, appending the frames it writes
/// (whoever they are for).
pub fn step(
    broker: &mut toolgate::broker::Broker,
    input: toolgate::broker::Input<'_>,
    out: &mut Vec<toolgate_protocol::ServerFrame>,
) {
    let mut outputs = Vec::new();
    broker.step(input, &mut outputs);
    out.extend(outputs.into_iter().map(|output| output.frame));
}

/// `toolgate serve --listen unix:DIR/run/broker.sock --project-root ROOT ARGS`,
/// started and waited for; killed (and `dir` removed) on drop. `dir` is
/// made 0700, as the broker demands of the socket's parents.
#[cfg(unix)]
pub struct Listening {
    child: Child,
    dir: PathBuf,
    pub socket: PathBuf,
}

#[cfg(unix)]
impl Listening {
    pub fn start(dir: &Path, root: &Path, args: &[&str]) -> Listening {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = dir.join("run/broker.sock");
        let child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["serve", "--listen"])
            .arg(format!("unix:{}", socket.display()))
            .arg("--project-root")
            .arg(root)
            .args(args)
            .current_dir(root)
            .env_remove("TOOLGATE_MODE")
            .env_remove("TOOLGATE_PERMISSION")
            .env_remove("TOOLGATE_STATE_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(
                started.elapsed() < PATIENCE,
                "no broker on {}",
                socket.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Listening {
            child,
            dir: dir.to_path_buf(),
            socket,
        }
    }

    /// The broker's process id (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

#[cfg(unix)]
impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Run `toolgate ARGS` in `cwd` with `input` on stdin and end of input;
/// the exit code and stdout (no policy from the environment).
pub fn run(cwd: &Path, args: &[&str], input: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .current_dir(cwd)
        .env_remove("TOOLGATE_MODE")
        .env_remove("TOOLGATE_PERMISSION")
        .env_remove("TOOLGATE_STATE_DIR")
        .env_remove("TOOLGATE_SOCKET")
        .env_remove("TOOLGATE_MANAGED")
        .env_remove("TOOLGATE_STORE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A process that stopped early reads nothing: its exit code says why.
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run `toolgate hook AGENT ARGS` in `dir` with `input` on stdin and `env`
/// set, none of toolgate's own variables inherited: what it wrote, and how
/// it exited.
pub fn hook_process(
    dir: &Path,
    agent: &str,
    args: &[&str],
    env: &[(&str, &str)],
    input: &[u8],
) -> std::process::Output {
    let mut argv = vec!["hook", agent];
    argv.extend_from_slice(args);
    toolgate_process(dir, &argv, env, input)
}

/// Run `toolgate ARGS` in `dir` with `input` on stdin and `env` set, none
/// of toolgate's own variables inherited: what it wrote, and how it exited.
/// (A program that exits before reading all its input is not an error
/// here: what it wrote says what it did.)
pub fn toolgate_process(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    input: &[u8],
) -> std::process::Output {
    toolgate_process_via(&[], dir, args, env, input)
}

/// [`toolgate_process`] run by `wrapper` (a program and its arguments,
/// before toolgate's path and `args`): `unshare`, `setpriv`, ...; none runs
/// toolgate itself.
pub fn toolgate_process_via(
    wrapper: &[&str],
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    input: &[u8],
) -> std::process::Output {
    let toolgate = env!("CARGO_BIN_EXE_toolgate");
    let mut command = match wrapper.split_first() {
        Some((program, rest)) => {
            let mut command = Command::new(program);
            command.args(rest).arg(toolgate);
            command
        }
        None => Command::new(toolgate),
    };
    command.args(args).current_dir(dir);
    for name in [
        "TOOLGATE_MODE",
        "TOOLGATE_PERMISSION",
        "TOOLGATE_STATE_DIR",
        "TOOLGATE_SOCKET",
        "TOOLGATE_PARENT",
        "TOOLGATE_SCOPE",
        "TOOLGATE_SCOPE_FILE",
        "TOOLGATE_MANAGED",
        "TOOLGATE_STORE",
        "TOOLGATE_REMOTE",
        "TOOLGATE_TOKEN_FILE",
        "TOOLGATE_CA",
        "TOOLGATE_CLIENT_CERT",
        "TOOLGATE_CLIENT_KEY",
    ] {
        command.env_remove(name);
    }
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(input);
    child.wait_with_output().unwrap()
}

/// The one JSON answer a hook wrote (it panics with the hook's stderr
/// when there is none).
pub fn hook_answer(out: &std::process::Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|_| {
        panic!(
            "not one JSON answer: {stdout:?}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A connection to a broker's socket, greeted, as a test drives it.
#[cfg(unix)]
pub struct Peer {
    stream: std::os::unix::net::UnixStream,
    reader: BufReader<std::os::unix::net::UnixStream>,
}

#[cfg(unix)]
impl Peer {
    /// Connect to `socket`, read `ready`, say `hello` and read its `ready`
    /// (frames the broker sends before it, such as open questions for an
    /// approver, stay to be read).
    pub fn connect(socket: &Path, hello: Value) -> Peer {
        let stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut peer = Peer::from_stream(stream);
        assert_eq!(peer.recv()["type"], "ready");
        peer.send(hello);
        let ready = peer.recv();
        assert_eq!(ready["type"], "ready", "{ready}");
        peer
    }

    /// A peer on `stream`, which has read and said nothing yet.
    pub fn from_stream(stream: std::os::unix::net::UnixStream) -> Peer {
        Peer {
            reader: BufReader::new(stream.try_clone().unwrap()),
            stream,
        }
    }

    /// Send one frame.
    pub fn send(&mut self, frame: Value) {
        self.stream
            .write_all(format!("{frame}\n").as_bytes())
            .unwrap();
    }

    /// The next frame.
    pub fn recv(&mut self) -> Value {
        let mut line = String::new();
        assert!(self.reader.read_line(&mut line).unwrap() > 0, "broker gone");
        serde_json::from_str(&line).unwrap()
    }

    /// Frames until one of `kind`, which is the last.
    pub fn until(&mut self, kind: &str) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.recv();
            let done = frame["type"] == kind;
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    /// Send `frame` and read until a frame of `kind`: that frame.
    pub fn ask(&mut self, frame: Value, kind: &str) -> Value {
        self.send(frame);
        self.until(kind).pop().unwrap()
    }

    /// What arrives within `wait` (nothing more is expected).
    pub fn quiet(&mut self, wait: Duration) -> Vec<Value> {
        self.stream.set_read_timeout(Some(wait)).unwrap();
        let mut frames = Vec::new();
        loop {
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(n) if n > 0 => frames.push(serde_json::from_str(&line).unwrap()),
                _ => break,
            }
        }
        self.stream.set_read_timeout(Some(PATIENCE)).unwrap();
        frames
    }
}
