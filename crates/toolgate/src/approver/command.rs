//! `--approver command:PROG`: each question is handed to a program.
//!
//! For every `permission_request`, `sh -c PROG` is started with the request
//! (the frame as the broker writes it, one JSON line) on its stdin, which is
//! then closed. The first line of its stdout is the answer:
//!
//! - a bare word, `once`, `always` or `reject`; or
//! - a JSON object `{"response":"once"|"always"|"reject","message":"…","patterns":[…],"expiresIn":SECONDS}`
//!   (`message`, `patterns` and `expiresIn` optional; `patterns` and
//!   `expiresIn` only with `always`: `patterns` one of the request's
//!   `alwaysOptions`, `expiresIn` how long the grants last, a whole number
//!   of seconds from 1 to ten years, passed on as the answer's own).
//!
//! The answer counts once the program has exited with status 0: what it
//! wrote before it exited is read then, even when a child it left running in
//! the background still holds its stdout open. Anything
//! else is a `reject` whose message says why: no line, an unreadable line,
//! a non-zero exit, a signal, a program that cannot be started. When the
//! question ends otherwise (another approver answered, the ask timed out,
//! the call was cancelled, the broker stops), the program is killed.
//! Questions run side by side: one program per question, each a task of the
//! transport's runtime, so a slow program never holds up the broker or
//! another question.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinSet;

use serde_json::Value;
use toolgate_protocol::{PermissionRequest, PermissionResponse, Reply, ServerFrame};

use super::view::{self, Choice};
use super::{Answers, Told};
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
        expires_in: None,
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
        if !matches!(
            key.as_str(),
            "response" | "message" | "patterns" | "expiresIn"
        ) {
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
    let expires_in = match object.get("expiresIn") {
        None | Some(Value::Null) => None,
        Some(value) => {
            let max = toolgate_protocol::MAX_EXPIRES_IN;
            let Some(seconds) = value.as_u64().filter(|seconds| (1..=max).contains(seconds)) else {
                return Err(format!(
                    "its answer's `expiresIn` {} is not a whole number of seconds from 1 to {max}",
                    shorten(&value.to_string())
                ));
            };
            if response != Reply::Always {
                return Err("its answer gives `expiresIn` without `always`".to_string());
            }
            if request.kind.as_deref() == Some("plan") {
                return Err(
                    "its answer gives `expiresIn` for a plan approval, which grants nothing that could expire"
                        .to_string(),
                );
            }
            Some(seconds)
        }
    };
    Ok(PermissionResponse {
        permission_id: request.permission_id.clone(),
        response,
        message,
        scope: None,
        patterns,
        expires_in,
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

/// The most bytes read from a program's stdout once it has exited (a
/// child left in the background that writes without end must not hold up
/// the answer).
const DRAIN_AFTER_EXIT: usize = 1 << 20;

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

/// The approver running `program` through `sh -c`, told on `told`: exactly
/// one answer per question asked goes to `answers`, unless the question
/// was resolved first. Each question's program runs as a task of its own;
/// a question that ends otherwise has its task aborted, which kills its
/// program (dropping `run_one` does), and nothing is sent, since its answer
/// would only earn an `already_resolved` error. When the approver stops,
/// dropping the tasks kills every program.
pub async fn run(program: String, mut told: UnboundedReceiver<Told>, answers: Answers) {
    let mut running = HashMap::new();
    let mut programs = JoinSet::new();
    loop {
        tokio::select! {
            told = told.recv() => match told {
                Some(Told::Ask(request)) => {
                    let program = program.clone();
                    let id = request.permission_id.clone();
                    let task = programs.spawn(async move {
                        let response = run_one(&program, &request).await;
                        (request.permission_id, response)
                    });
                    running.insert(id, task);
                }
                Some(Told::Resolved { permission_id, .. }) => {
                    if let Some(task) = running.remove(&permission_id) {
                        task.abort();
                    }
                }
                Some(Told::Line(_) | Told::Closed) => {}
                Some(Told::Stop) | None => return,
            },
            Some(done) = programs.join_next() => {
                if let Ok((id, response)) = done {
                    if running.remove(&id).is_some() {
                        answers.send(response).await;
                    }
                }
            }
        }
    }
}

/// A running program's process group, killed when this is dropped before
/// the program exited: `sh -c` runs the program's commands as its
/// children, and a question that ends otherwise stops them all.
struct Group(Option<u32>);

impl Drop for Group {
    fn drop(&mut self) {
        let pid = self.0.and_then(|pid| i32::try_from(pid).ok());
        if let Some(pid) = pid.and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

async fn run_one(program: &str, request: &PermissionRequest) -> PermissionResponse {
    let frame = ServerFrame::PermissionRequest(Box::new(request.clone()));
    let mut line = match serde_json::to_vec(&frame) {
        Ok(line) => line,
        Err(error) => return rejected(request, program, &error.to_string()),
    };
    line.push(b'\n');
    let spawned = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(program)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .kill_on_drop(true)
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
    let mut group = Group(child.id());
    // The request goes in on a task of its own: a program that never reads
    // must not keep us from reading its answer.
    if let Some(mut stdin) = child.stdin.take() {
        tokio::spawn(async move {
            let _ = stdin.write_all(&line).await;
        });
    }
    // The program is waited on, not the end of its stdout: a child it left
    // running in the background may hold the pipe open for long after.
    // Meanwhile the pipe is read, so the program never blocks on a full
    // pipe; once it has exited, what it wrote is in the pipe and is read.
    let mut stdout = child.stdout.take();
    let mut answer = FirstLine::default();
    let mut buffer = vec![0u8; 8192];
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            read = read_some(&mut stdout, &mut buffer) => match read {
                Some(count) => answer.take(&buffer[..count]),
                None => stdout = None,
            },
        }
    };
    group.0 = None;
    if let Some(out) = &mut stdout {
        let mut drained = 0;
        while drained < DRAIN_AFTER_EXIT {
            // Only what is there now: a background child may hold it open.
            match tokio::time::timeout(Duration::ZERO, out.read(&mut buffer)).await {
                Ok(Ok(count)) if count > 0 => {
                    answer.take(&buffer[..count]);
                    drained += count;
                }
                _ => break,
            }
        }
    }
    let status = match status {
        Ok(status) => status,
        Err(error) => return rejected(request, program, &error.to_string()),
    };
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

/// The next bytes of the program's stdout; `None` once it ended (or
/// failed); never ready when there is no stdout left to read.
async fn read_some(
    stdout: &mut Option<tokio::process::ChildStdout>,
    buffer: &mut [u8],
) -> Option<usize> {
    match stdout {
        Some(out) => match out.read(buffer).await {
            Ok(0) | Err(_) => None,
            Ok(count) => Some(count),
        },
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::approver::{answered, channel, resolved, runtime, InProcess};
    use crate::owner::Deliver;
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
            (
                r#"{"response":"always","expiresIn":1800}"#,
                Ok(json!({"permissionID":"per_1","response":"always","expiresIn":1800})),
            ),
            (
                r#"{"response":"always","patterns":["git commit -m x"],"expiresIn":60}"#,
                Ok(
                    json!({"permissionID":"per_1","response":"always","patterns":["git commit -m x"],"expiresIn":60}),
                ),
            ),
            (
                r#"{"response":"always","expiresIn":null}"#,
                Ok(json!({"permissionID":"per_1","response":"always"})),
            ),
            (
                r#"{"response":"always","expiresIn":0}"#,
                Err("its answer's `expiresIn` 0 is not a whole number of seconds from 1 to 315360000"),
            ),
            (
                r#"{"response":"always","expiresIn":"30m"}"#,
                Err("its answer's `expiresIn` \"30m\" is not a whole number of seconds from 1 to 315360000"),
            ),
            (
                r#"{"response":"always","expiresIn":1.5}"#,
                Err("its answer's `expiresIn` 1.5 is not a whole number of seconds from 1 to 315360000"),
            ),
            (
                r#"{"response":"once","expiresIn":60}"#,
                Err("its answer gives `expiresIn` without `always`"),
            ),
        ];
        for (line, want) in table {
            let got = parse_answer(line, &request()).map(|r| serde_json::to_value(r).unwrap());
            assert_eq!(got, want.map_err(str::to_string), "{line:?}");
        }
    }

    fn ask_frame() -> ServerFrame {
        ServerFrame::PermissionRequest(Box::new(request()))
    }

    fn ask(program: &str) -> Value {
        runtime().unwrap().block_on(async {
            let (answers, mut received) = channel();
            let approver = InProcess::Command(program.to_string())
                .start(answers)
                .unwrap();
            approver.deliver(&ask_frame());
            let answer = answered(&mut received, Duration::from_secs(20)).await;
            serde_json::to_value(answer.unwrap()).unwrap()
        })
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
        let dir = std::env::temp_dir().join(format!("toolgate-command-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pid_file = dir.join("pid");
        let program = format!(
            "sleep 600 & echo $! > {}; wait; echo once",
            pid_file.display()
        );
        runtime().unwrap().block_on(async {
            let (answers, mut received) = channel();
            let approver = InProcess::Command(program).start(answers).unwrap();
            approver.deliver(&ask_frame());
            // Wait until it runs, then end the question.
            let mut pid = String::new();
            for _ in 0..2000 {
                pid = std::fs::read_to_string(&pid_file).unwrap_or_default();
                if pid.ends_with('\n') {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            approver.deliver(&resolved("per_1", "cancelled"));
            assert!(answered(&mut received, Duration::from_secs(2))
                .await
                .is_none());
            // The program's process group was killed: its background
            // `sleep` is gone (or a zombie nobody reaped yet).
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()));
            assert!(
                stat.as_ref().map_or(true, |stat| stat.contains(") Z ")),
                "{pid:?} still runs: {stat:?}"
            );
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
}
