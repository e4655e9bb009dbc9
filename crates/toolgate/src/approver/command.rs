//! `--approver command:PROG`: each question is handed to a program.
//!
//! For every `permission_request`, `sh -c PROG` is started with the request
//! (the frame as the broker writes it, one JSON line) on its stdin, which is
//! then closed. The first line of its stdout is the answer:
//!
//! - a bare word, `once`, `always` or `reject`; or
//! - a JSON object `{"response":"once"|"always"|"reject","message":"…","patterns":[…]}`
//!   (`message` and `patterns` optional; `patterns` only with `always`, and
//!   then one of the request's `alwaysOptions`).
//!
//! The answer counts once the program has exited with status 0: what it
//! wrote before it exited is read then, even when a child it left running in
//! the background still holds its stdout open. Anything
//! else is a `reject` whose message says why: no line, an unreadable line,
//! a non-zero exit, a signal, a program that cannot be started. When the
//! question ends otherwise (another approver answered, the ask timed out,
//! the call was cancelled, the broker stops), the program is killed.
//! Questions run side by side: one program per question, each on its own
//! thread, so a slow program never holds up the broker or another question.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use toolgate_protocol::{PermissionRequest, PermissionResponse, Reply, ServerFrame};

use super::view::{self, Choice};
use crate::display::shown;

/// The most bytes read for the answer line.
const MAX_ANSWER: u64 = 64 * 1024;

/// Read one answer line: a bare word or the JSON object; `Err` says what
/// was wrong with it (the reject's message).
pub fn parse_answer(line: &str, request: &PermissionRequest) -> Result<PermissionResponse, String> {
    let text = line.trim();
    let bare = |reply: Reply| PermissionResponse {
        permission_id: request.permission_id.clone(),
        response: reply,
        message: None,
        scope: None,
        patterns: None,
    };
    match text {
        "once" => return Ok(bare(Reply::Once)),
        "always" => return Ok(bare(Reply::Always)),
        "reject" => return Ok(bare(Reply::Reject)),
        "" => return Err("it answered an empty line".to_string()),
        _ => {}
    }
    let unreadable = || {
        format!(
            "its answer is not once, always, reject or a JSON answer: {}",
            shorten(text)
        )
    };
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(text) else {
        return Err(unreadable());
    };
    for key in object.keys() {
        if !matches!(key.as_str(), "response" | "message" | "patterns") {
            return Err(format!("its answer has an unknown field `{}`", shown(key)));
        }
    }
    let response = match object.get("response").and_then(Value::as_str) {
        Some("once") => Reply::Once,
        Some("always") => Reply::Always,
        Some("reject") => Reply::Reject,
        _ => return Err("its answer's `response` is not once, always or reject".to_string()),
    };
    let message = match object.get("message") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(_) => return Err("its answer's `message` is not a string".to_string()),
    };
    let patterns = match object.get("patterns") {
        None | Some(Value::Null) => None,
        Some(Value::Array(list)) => {
            let patterns: Option<Vec<String>> = list
                .iter()
                .map(|p| p.as_str().map(str::to_string))
                .collect();
            let Some(patterns) = patterns else {
                return Err("its answer's `patterns` is not a list of strings".to_string());
            };
            if response != Reply::Always {
                return Err("its answer gives `patterns` without `always`".to_string());
            }
            let mut wanted = patterns.clone();
            wanted.sort();
            wanted.dedup();
            let offered = request.always_options.iter().any(|option| {
                let mut option = option.clone();
                option.sort();
                option.dedup();
                option == wanted
            });
            if !offered {
                return Err(format!(
                    "its answer's `patterns` {} is not one of the request's alwaysOptions",
                    shorten(&serde_json::to_string(&patterns).unwrap_or_default())
                ));
            }
            Some(patterns)
        }
        Some(_) => return Err("its answer's `patterns` is not a list of strings".to_string()),
    };
    Ok(PermissionResponse {
        permission_id: request.permission_id.clone(),
        response,
        message,
        scope: None,
        patterns,
    })
}

fn shorten(text: &str) -> String {
    let text = shown(text);
    if text.chars().count() > 120 {
        format!("{}…", text.chars().take(120).collect::<String>())
    } else {
        text.into_owned()
    }
}

/// The most bytes read from a program's stdout between two looks at
/// whether it has exited (a program that writes without end must not keep
/// us from seeing it exit).
const DRAIN_PER_TICK: usize = 1 << 20;

/// The first line a program writes (at most [`MAX_ANSWER`] bytes, with its
/// newline); what follows is read and dropped.
#[derive(Default)]
struct FirstLine {
    line: Vec<u8>,
    /// The line is complete (or at its limit): nothing more is kept.
    complete: bool,
}

impl FirstLine {
    fn take(&mut self, bytes: &[u8]) {
        if self.complete {
            return;
        }
        let room = (MAX_ANSWER as usize).saturating_sub(self.line.len());
        let end = bytes
            .iter()
            .position(|&byte| byte == b'\n')
            .map_or(bytes.len(), |at| at + 1);
        let kept = end.min(room);
        self.line.extend_from_slice(&bytes[..kept]);
        if kept < bytes.len() || self.line.ends_with(b"\n") || kept == room {
            self.complete = true;
        }
    }

    /// Read what `pipe` (non-blocking) holds now, at most about `budget`
    /// bytes; `false` once it has ended (or failed).
    fn read(&mut self, pipe: &mut impl Read, budget: usize) -> bool {
        let mut buffer = [0u8; 8192];
        let mut read = 0;
        while read < budget {
            match pipe.read(&mut buffer) {
                Ok(0) => return false,
                Ok(n) => {
                    self.take(&buffer[..n]);
                    read += n;
                }
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            }
        }
        true
    }
}

/// A reject saying why the program's answer does not count.
fn rejected(request: &PermissionRequest, program: &str, why: &str) -> PermissionResponse {
    let mut response = view::answer(
        request,
        &Choice::Reject {
            message: Some(format!(
                "the approver program `{}` failed: {why}",
                shorten(program)
            )),
        },
    );
    response.scope = None;
    response
}

/// The programs running, by permission id.
type Running = Arc<Mutex<HashMap<String, Arc<Mutex<Child>>>>>;

/// Runs one program per question; answers come back on a channel.
pub struct CommandApprover {
    program: String,
    running: Running,
    answers: Sender<PermissionResponse>,
}

impl CommandApprover {
    /// An approver running `program` through `sh -c`; each answer is sent on
    /// `answers` (exactly one per question asked, unless the question was
    /// [`resolved`](Self::resolved) first).
    pub fn new(program: String, answers: Sender<PermissionResponse>) -> CommandApprover {
        CommandApprover {
            program,
            running: Arc::new(Mutex::new(HashMap::new())),
            answers,
        }
    }

    /// Ask the program about `request` (returns at once).
    pub fn ask(&self, request: PermissionRequest) {
        let program = self.program.clone();
        let answers = self.answers.clone();
        let running = Arc::clone(&self.running);
        std::thread::spawn(move || {
            let id = request.permission_id.clone();
            let response = run_one(&program, &request, &running);
            let asked = running
                .lock()
                .map(|mut map| map.remove(&id).is_some())
                .unwrap_or(false);
            // A question resolved meanwhile was removed from `running`: its
            // answer would only earn an `already_resolved` error.
            if asked {
                let _ = answers.send(response);
            }
        });
    }

    /// The question ended otherwise: stop its program.
    pub fn resolved(&self, permission_id: &str) {
        let child = self
            .running
            .lock()
            .ok()
            .and_then(|mut map| map.remove(permission_id));
        if let Some(child) = child {
            kill(&child);
        }
    }

    /// Stop every program (the broker stops).
    pub fn stop_all(&self) {
        let children: Vec<_> = self
            .running
            .lock()
            .map(|mut map| map.drain().map(|(_, child)| child).collect())
            .unwrap_or_default();
        for child in children {
            kill(&child);
        }
    }
}

/// Kill a program and everything it started (its process group: `sh -c`
/// runs the program's commands as its children).
fn kill(child: &Mutex<Child>) {
    if let Ok(mut child) = child.lock() {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = child.kill();
    }
}

fn run_one(program: &str, request: &PermissionRequest, running: &Running) -> PermissionResponse {
    let frame = ServerFrame::PermissionRequest(Box::new(request.clone()));
    let mut line = match serde_json::to_vec(&frame) {
        Ok(line) => line,
        Err(error) => return rejected(request, program, &error.to_string()),
    };
    line.push(b'\n');
    let spawned = Command::new("sh")
        .arg("-c")
        .arg(program)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            return rejected(
                request,
                program,
                &format!("it could not be started: {error}"),
            )
        }
    };
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let child = Arc::new(Mutex::new(child));
    if let Ok(mut map) = running.lock() {
        map.insert(request.permission_id.clone(), Arc::clone(&child));
    }
    // The request goes in on its own thread: a program that never reads
    // must not keep us from reading its answer.
    if let Some(mut stdin) = stdin {
        std::thread::spawn(move || {
            let _ = stdin.write_all(&line);
        });
    }
    // The program is waited on, not the end of its stdout: a child it left
    // running in the background may hold the pipe open for long after.
    // Meanwhile the pipe is read without blocking, so the program never
    // blocks on a full pipe; once it has exited, everything it wrote is in
    // the pipe and the rest of it is read.
    let mut pipe = match stdout {
        Some(stdout) => match rustix::io::ioctl_fionbio(&stdout, true) {
            Ok(()) => Some(stdout),
            Err(error) => {
                return rejected(
                    request,
                    program,
                    &format!("its output cannot be read: {error}"),
                )
            }
        },
        None => None,
    };
    let mut answer = FirstLine::default();
    let status = loop {
        if let Some(stdout) = &mut pipe {
            if !answer.read(stdout, DRAIN_PER_TICK) {
                pipe = None;
            }
        }
        let polled = match child.lock() {
            Ok(mut child) => child.try_wait(),
            Err(_) => return rejected(request, program, "internal error"),
        };
        match polled {
            Ok(Some(status)) => break status,
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(error) => return rejected(request, program, &error.to_string()),
        }
    };
    if let Some(stdout) = &mut pipe {
        answer.read(stdout, DRAIN_PER_TICK);
    }
    drop(pipe);
    let answer = String::from_utf8_lossy(&answer.line);
    if !status.success() {
        let why = match status.code() {
            Some(code) => format!("it exited with status {code}"),
            None => "it was killed by a signal".to_string(),
        };
        return rejected(request, program, &why);
    }
    if answer.is_empty() {
        return rejected(request, program, "it exited without answering");
    }
    match parse_answer(&answer, request) {
        Ok(response) => response,
        Err(why) => rejected(request, program, &why),
    }
}

/// A channel for answers, for tests and drivers.
pub fn channel() -> (
    Sender<PermissionResponse>,
    mpsc::Receiver<PermissionResponse>,
) {
    mpsc::channel()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use serde_json::json;

    fn request() -> PermissionRequest {
        serde_json::from_value(json!({
            "timestamp":0,"sessionID":"s","permissionID":"per_1","callID":"c1","tool":"bash",
            "permission":"bash","toolName":"bash","pattern":["git commit *"],
            "patterns":["git commit -m x"],"always":["git commit *"],
            "alwaysOptions":[["git commit -m x"],["git commit *"]],"title":"git commit -m x",
            "metadata":{}
        }))
        .unwrap()
    }

    #[test]
    fn answers() {
        let table: Vec<(&str, Result<Value, &str>)> = vec![
            (
                "once\n",
                Ok(json!({"permissionID":"per_1","response":"once"})),
            ),
            (
                "  always ",
                Ok(json!({"permissionID":"per_1","response":"always"})),
            ),
            (
                "reject",
                Ok(json!({"permissionID":"per_1","response":"reject"})),
            ),
            (
                r#"{"response":"reject","message":"not now"}"#,
                Ok(json!({"permissionID":"per_1","response":"reject","message":"not now"})),
            ),
            (
                r#"{"response":"always","patterns":["git commit -m x"]}"#,
                Ok(
                    json!({"permissionID":"per_1","response":"always","patterns":["git commit -m x"]}),
                ),
            ),
            (
                r#"{"response":"once","message":null}"#,
                Ok(json!({"permissionID":"per_1","response":"once"})),
            ),
            ("", Err("it answered an empty line")),
            (
                "yes",
                Err("its answer is not once, always, reject or a JSON answer: yes"),
            ),
            (
                "ONCE",
                Err("its answer is not once, always, reject or a JSON answer: ONCE"),
            ),
            (
                "[1]",
                Err("its answer is not once, always, reject or a JSON answer: [1]"),
            ),
            (
                r#"{"response":"allow"}"#,
                Err("its answer's `response` is not once, always or reject"),
            ),
            (
                r#"{"message":"x"}"#,
                Err("its answer's `response` is not once, always or reject"),
            ),
            (
                r#"{"response":"once","scope":"project"}"#,
                Err("its answer has an unknown field `scope`"),
            ),
            (
                r#"{"response":"reject","message":3}"#,
                Err("its answer's `message` is not a string"),
            ),
            (
                r#"{"response":"once","patterns":["git commit *"]}"#,
                Err("its answer gives `patterns` without `always`"),
            ),
            (
                r#"{"response":"always","patterns":[1]}"#,
                Err("its answer's `patterns` is not a list of strings"),
            ),
            (
                r#"{"response":"always","patterns":"*"}"#,
                Err("its answer's `patterns` is not a list of strings"),
            ),
            (
                r#"{"response":"always","patterns":["*"]}"#,
                Err("its answer's `patterns` [\"*\"] is not one of the request's alwaysOptions"),
            ),
        ];
        for (line, want) in table {
            let got = parse_answer(line, &request()).map(|r| serde_json::to_value(r).unwrap());
            assert_eq!(got, want.map_err(str::to_string), "{line:?}");
        }
    }

    fn ask(program: &str) -> Value {
        let (sender, answers) = channel();
        let approver = CommandApprover::new(program.to_string(), sender);
        approver.ask(request());
        serde_json::to_value(answers.recv_timeout(Duration::from_secs(20)).unwrap()).unwrap()
    }

    #[test]
    fn programs() {
        let fail = |why: &str| format!("the approver program `PROG` failed: {why}");
        let table: Vec<(&str, Value)> = vec![
            (
                "echo once",
                json!({"permissionID":"per_1","response":"once"}),
            ),
            // The request arrives on stdin, one line.
            (
                r#"read -r line; case "$line" in *'"permissionID":"per_1"'*'"title":"git commit -m x"'*) echo always;; *) echo reject;; esac"#,
                json!({"permissionID":"per_1","response":"always"}),
            ),
            (
                r#"echo '{"response":"reject","message":"ask Bob"}'; echo ignored"#,
                json!({"permissionID":"per_1","response":"reject","message":"ask Bob"}),
            ),
            (
                "echo once; exit 3",
                json!({"permissionID":"per_1","response":"reject","message":fail("it exited with status 3")}),
            ),
            (
                "exit 0",
                json!({"permissionID":"per_1","response":"reject","message":fail("it exited without answering")}),
            ),
            (
                "echo maybe",
                json!({"permissionID":"per_1","response":"reject","message":fail("its answer is not once, always, reject or a JSON answer: maybe")}),
            ),
            (
                "kill -9 $$",
                json!({"permissionID":"per_1","response":"reject","message":fail("it was killed by a signal")}),
            ),
            // An endless line: the first 64 KiB are read, the rest drained.
            (
                "head -c 300000 /dev/zero | tr '\\0' x",
                json!({"permissionID":"per_1","response":"reject","message":fail(&format!("its answer is not once, always, reject or a JSON answer: {}…", "x".repeat(120)))}),
            ),
        ];
        for (program, mut want) in table {
            let message = want
                .get("message")
                .and_then(Value::as_str)
                .map(|m| m.replace("PROG", program));
            if let Some(message) = message {
                want["message"] = json!(message);
            }
            assert_eq!(ask(program), want, "{program}");
        }
    }

    #[test]
    fn resolved_kills_the_program_and_sends_nothing() {
        let (sender, answers) = channel();
        let approver = CommandApprover::new("sleep 600; echo once".to_string(), sender);
        approver.ask(request());
        // Wait until it runs, then end the question.
        for _ in 0..2000 {
            if approver.running.lock().unwrap().contains_key("per_1") {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        approver.resolved("per_1");
        assert!(answers.recv_timeout(Duration::from_secs(2)).is_err());
    }
}
