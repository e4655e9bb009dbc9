//! `--approver tty`: questions asked on the controlling terminal, line by line.
//!
//! The agent keeps stdin and stdout; this approver opens `/dev/tty` and shows
//! the oldest pending question with [`super::view`], then reads one line:
//!
//! - `o` (or `once`): allow this call;
//! - `a` (or `always`): allow and grant the widest `alwaysOptions` entry;
//!   `a1` … `aN` grant entry N instead (1 is the narrowest, as listed);
//! - `t` (or `timed`): as `a`, for 30 minutes only (`expiresIn`); `t1` …
//!   `tN` as `a1` … `aN`; a lifetime after it instead of 30 minutes
//!   (`t 10m`, `t2 2h`, `t 90s`, `t 1d`; a bare number is minutes);
//! - `r` (or `reject`): deny; the next line is an optional message for the
//!   agent (empty: none); `r TEXT` rejects with TEXT at once;
//! - `s` (or `skip`): show the next pending question (answers in any order).
//!
//! A question that ends otherwise (timeout, cancel, another approver) is
//! closed with its reason and the next one is shown. When the terminal's
//! input ends (it was closed), every pending and later question is rejected
//! ("the approver's terminal closed: nobody can answer"). Several questions can be
//! pending: the prompt is a task of the transport's runtime and the terminal
//! is read through the runtime's reactor (a non-blocking description of
//! `/dev/tty` of its own), so the broker never waits for it.

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::pin::Pin;

use rustix::fs::{Mode, OFlags};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use toolgate_protocol::PermissionRequest;

use super::view::{self, Choice, Tone};
use super::{Answers, Told};
use crate::display::shown;

/// The controlling terminal, opened before the broker starts, twice: one
/// description to read and one to write, each non-blocking and the
/// approver's own (the flag touches nobody else's: the agent's stdin may be
/// the same terminal). A terminal whose output is paused (`Ctrl-S`) holds
/// up only the prompt, never the broker beside it on the runtime.
pub struct Terminal {
    out: std::fs::File,
    input: std::fs::File,
}

impl Terminal {
    /// Open `/dev/tty`, once for writing and once for reading.
    pub fn open() -> std::io::Result<Terminal> {
        let open = |flags: OFlags| -> std::io::Result<std::fs::File> {
            let flags = flags | OFlags::NONBLOCK | OFlags::CLOEXEC;
            Ok(rustix::fs::open("/dev/tty", flags, Mode::empty())?.into())
        };
        Ok(Terminal {
            out: open(OFlags::WRONLY)?,
            input: open(OFlags::RDONLY)?,
        })
    }
}

/// Start the approver on `terminal`, as tasks of the current runtime: the
/// prompt, told on `receive`, and the terminal's reader, which tells `told`
/// the lines typed. Every answer goes to `answers`.
pub fn start(
    terminal: Terminal,
    project_root: Option<PathBuf>,
    answers: Answers,
    told: &UnboundedSender<Told>,
    receive: UnboundedReceiver<Told>,
) -> std::io::Result<()> {
    // tokio's pipe ends read and write a non-blocking descriptor through
    // the reactor; a terminal behaves as a pipe does for that.
    use tokio::net::unix::pipe;
    let input = pipe::Receiver::from_file_unchecked(terminal.input)?;
    let out = pipe::Sender::from_file_unchecked(terminal.out)?;
    prompt(Box::pin(out), project_root, answers, receive);
    read_from(tokio::io::BufReader::new(input), told.clone());
    Ok(())
}

/// Start the prompt writing to `out`, as a task of the current runtime,
/// told on `told`.
pub fn prompt(
    out: Pin<Box<dyn AsyncWrite + Send>>,
    project_root: Option<PathBuf>,
    answers: Answers,
    told: UnboundedReceiver<Told>,
) {
    let prompt = Prompt {
        out,
        screen: Vec::new(),
        pending: VecDeque::new(),
        shown: None,
        typing_message: false,
        project_root,
        answers,
    };
    tokio::spawn(prompt.run(told));
}

/// Read lines from `input`, as a task of the current runtime: each is told
/// on `told`, then that the input ended (also on a read error: the
/// terminal hung up).
pub fn read_from(input: impl AsyncBufRead + Unpin + Send + 'static, told: UnboundedSender<Told>) {
    tokio::spawn(async move {
        let mut lines = input.lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if told.send(Told::Line(line)).is_err() {
                return;
            }
        }
        let _ = told.send(Told::Closed);
    });
}

/// `aN` (entry N of `alwaysOptions`, 1 the narrowest), `t`/`timed` and
/// `tN` (the same for a lifetime: `rest`, else 30 minutes), as a choice;
/// `None` when `word` and `rest` are none of these.
fn timed_or_entry(word: &str, rest: &str, request: &PermissionRequest) -> Option<Choice> {
    let (timed, entry) = match word {
        "t" | "timed" => (true, ""),
        word => match word.split_at_checked(1)? {
            ("a", entry) if rest.is_empty() => (false, entry),
            ("t", entry) => (true, entry),
            _ => return None,
        },
    };
    let level = if entry.is_empty() {
        view::default_level(request)
    } else {
        let n = entry.parse::<usize>().ok()?;
        if !(1..=request.always_options.len()).contains(&n) {
            return None;
        }
        n - 1
    };
    let lifetime = match (timed, rest) {
        (false, _) => None,
        // A plan approval has no grants to time.
        (true, _) if request.always_options.is_empty() => return None,
        (true, "") => Some(view::DEFAULT_LIFETIME),
        (true, rest) => Some(view::parse_lifetime(rest)?),
    };
    Some(Choice::Always { level, lifetime })
}

/// The answer to every question once the terminal's input has ended.
fn closed_terminal() -> Choice {
    Choice::Reject {
        message: Some("the approver's terminal closed: nobody can answer".to_string()),
    }
}

struct Prompt {
    out: Pin<Box<dyn AsyncWrite + Send>>,
    /// What to write to the terminal once the event at hand is handled.
    screen: Vec<u8>,
    pending: VecDeque<PermissionRequest>,
    /// The permission id of the question on screen.
    shown: Option<String>,
    /// `r` was typed: the next line is the message.
    typing_message: bool,
    project_root: Option<PathBuf>,
    answers: Answers,
}

impl Prompt {
    async fn run(mut self, mut told: UnboundedReceiver<Told>) {
        let mut open = true;
        while let Some(told) = told.recv().await {
            let going_on = self.handle(told, &mut open).await;
            if !self.screen.is_empty() {
                let screen = std::mem::take(&mut self.screen);
                // A terminal that cannot be written (hung up) still reads
                // answers, or ends, which rejects what is pending.
                let _ = self.out.write_all(&screen).await;
            }
            if !going_on {
                return;
            }
        }
    }

    /// Handle one event (`open`: the terminal's input has not ended);
    /// `false` once the approver is told to stop.
    async fn handle(&mut self, told: Told, open: &mut bool) -> bool {
        match told {
            Told::Ask(request) => {
                if self
                    .pending
                    .iter()
                    .any(|q| q.permission_id == request.permission_id)
                {
                    return true;
                }
                if !*open {
                    // Nobody can answer on a closed terminal: fail closed.
                    let response = view::answer(&request, &closed_terminal());
                    self.answers.send(response).await;
                    return true;
                }
                self.pending.push_back(*request);
                if self.shown.is_none() {
                    self.show();
                } else {
                    self.say(
                        Tone::Dim,
                        &format!(
                            "(another question arrived: {} pending; `s` shows the next)",
                            self.pending.len()
                        ),
                    );
                }
            }
            Told::Resolved {
                permission_id,
                reason,
            } => {
                let Some(index) = self
                    .pending
                    .iter()
                    .position(|q| q.permission_id == permission_id)
                else {
                    return true;
                };
                let Some(request) = self.pending.remove(index) else {
                    return true;
                };
                self.say(
                    Tone::Warn,
                    &format!("closed: {} ({})", shown(&request.title), shown(&reason)),
                );
                if self.shown.as_deref() == Some(permission_id.as_str()) {
                    self.shown = None;
                    self.typing_message = false;
                    self.show();
                }
            }
            Told::Stop => return false,
            Told::Line(line) if *open => self.typed(line.trim()).await,
            Told::Line(_) => {}
            Told::Closed => {
                *open = false;
                self.shown = None;
                for request in std::mem::take(&mut self.pending) {
                    let response = view::answer(&request, &closed_terminal());
                    self.answers.send(response).await;
                }
            }
        }
        true
    }

    fn say(&mut self, tone: Tone, text: &str) {
        let (start, end) = match tone {
            Tone::Plain => ("", ""),
            Tone::Heading => ("\x1b[1m", "\x1b[0m"),
            Tone::Added => ("\x1b[32m", "\x1b[0m"),
            Tone::Removed => ("\x1b[31m", "\x1b[0m"),
            Tone::Dim => ("\x1b[2m", "\x1b[0m"),
            Tone::Warn => ("\x1b[33m", "\x1b[0m"),
        };
        let _ = write!(self.screen, "{start}{text}{end}\r\n");
    }

    fn show(&mut self) {
        let Some(request) = self.pending.front().cloned() else {
            self.shown = None;
            return;
        };
        self.shown = Some(request.permission_id.clone());
        self.say(
            Tone::Heading,
            &format!("── toolgate asks ({} pending) ──", self.pending.len()),
        );
        let level = view::default_level(&request);
        let lines = view::detail(
            &request,
            level,
            self.project_root.as_deref(),
            &view::read_file,
        );
        for line in lines {
            self.say(line.tone, &line.text);
        }
        self.hint(&request);
    }

    fn hint(&mut self, request: &PermissionRequest) {
        let (always, timed) = match request.always_options.len() {
            // A plan approval's `always` changes the mode: nothing to time.
            0 => ("a always".to_string(), String::new()),
            1 => (
                "a always".to_string(),
                " · t always for 30 min (t 2h: how long)".to_string(),
            ),
            n => (
                format!("a always (a1…a{n}: that entry)"),
                format!(" · t always for 30 min (t1…t{n}; t 2h: how long)"),
            ),
        };
        let text = format!("[o once · {always}{timed} · r reject [message] · s next] > ");
        let _ = write!(self.screen, "\x1b[1m{text}\x1b[0m");
    }

    async fn typed(&mut self, line: &str) {
        let Some(request) = self.pending.front().cloned() else {
            return;
        };
        if self.shown.as_deref() != Some(request.permission_id.as_str()) {
            return;
        }
        if self.typing_message {
            self.typing_message = false;
            let message = Some(line.to_string());
            self.answer(&request, Choice::Reject { message }).await;
            return;
        }
        let (word, rest) = match line.split_once(char::is_whitespace) {
            Some((word, rest)) => (word, rest.trim()),
            None => (line, ""),
        };
        let last = view::default_level(&request);
        let always = |level: usize| Choice::Always {
            level,
            lifetime: None,
        };
        match word {
            "o" | "once" => self.answer(&request, Choice::Once).await,
            "a" | "always" if rest.is_empty() => self.answer(&request, always(last)).await,
            "r" | "reject" if rest.is_empty() => {
                self.typing_message = true;
                let _ = write!(self.screen, "message for the agent (Enter for none) > ");
            }
            "r" | "reject" => {
                let message = Some(rest.to_string());
                self.answer(&request, Choice::Reject { message }).await;
            }
            "s" | "skip" | "n" | "next" => {
                self.pending.rotate_left(1);
                self.show();
            }
            word => match timed_or_entry(word, rest, &request) {
                Some(choice) => self.answer(&request, choice).await,
                None => {
                    self.say(Tone::Warn, &format!("not an answer: {}", shown(line)));
                    self.hint(&request);
                }
            },
        }
    }

    async fn answer(&mut self, request: &PermissionRequest, choice: Choice) {
        let response = view::answer(request, &choice);
        self.pending
            .retain(|q| q.permission_id != request.permission_id);
        self.shown = None;
        self.answers.send(response).await;
        self.say(Tone::Dim, "answered.");
        self.show();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::approver::{answered, channel, resolved, runtime, Started};
    use crate::owner::Deliver;
    use serde_json::{json, Value};
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};
    use std::time::Duration;
    use toolgate_protocol::ServerFrame;

    const WAIT: Duration = Duration::from_secs(10);

    /// The prompt writing to `out`: where the owner hands it frames, and
    /// where its terminal's lines go.
    fn start(out: Screen, answers: Answers) -> (Started, UnboundedSender<Told>) {
        let (told, receive) = tokio::sync::mpsc::unbounded_channel();
        prompt(Box::pin(out), None, answers, receive);
        (Started(told.clone()), told)
    }

    /// A line typed.
    fn line(terminal: &UnboundedSender<Told>, text: &str) {
        terminal.send(Told::Line(text.to_string())).unwrap();
    }

    /// The broker asks `request`, as the owner hands it over.
    fn ask(approver: &Started, request: PermissionRequest) {
        approver.deliver(&ServerFrame::PermissionRequest(Box::new(request)));
    }

    #[derive(Clone, Default)]
    struct Screen(Arc<Mutex<Vec<u8>>>);

    impl AsyncWrite for Screen {
        fn poll_write(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn request(id: &str, title: &str) -> PermissionRequest {
        serde_json::from_value(json!({
            "timestamp":0,"sessionID":"s","permissionID":id,"callID":"c","tool":"bash",
            "permission":"bash","toolName":"bash","pattern":["rm *"],"patterns":[title],
            "always":["rm *"],"alwaysOptions":[[title],["rm *"]],"title":title,
            "metadata":{"command":title}
        }))
        .unwrap()
    }

    #[test]
    fn lines_answer() {
        // (lines typed with p1 "rm a" and p2 "rm b" pending, answers)
        let table: Vec<(&[&str], Vec<Value>)> = vec![
            (&["o"], vec![json!({"permissionID":"p1","response":"once"})]),
            (
                &["always"],
                vec![json!({"permissionID":"p1","response":"always"})],
            ),
            (
                &["a1"],
                vec![json!({"permissionID":"p1","response":"always","patterns":["rm a"]})],
            ),
            (
                &["a2"],
                vec![json!({"permissionID":"p1","response":"always"})],
            ),
            (
                &["a3", "x", "r", ""],
                vec![json!({"permissionID":"p1","response":"reject"})],
            ),
            (
                &["r", "use git clean"],
                vec![json!({"permissionID":"p1","response":"reject","message":"use git clean"})],
            ),
            (
                &["t"],
                vec![json!({"permissionID":"p1","response":"always","expiresIn":1800})],
            ),
            (
                &["timed 2h"],
                vec![json!({"permissionID":"p1","response":"always","expiresIn":7200})],
            ),
            (
                &["t1"],
                vec![
                    json!({"permissionID":"p1","response":"always","patterns":["rm a"],"expiresIn":1800}),
                ],
            ),
            (
                &["t1 90s"],
                vec![
                    json!({"permissionID":"p1","response":"always","patterns":["rm a"],"expiresIn":90}),
                ],
            ),
            (
                &["t 0", "t 5x", "t3", "a 2h", "t 10"],
                vec![json!({"permissionID":"p1","response":"always","expiresIn":600})],
            ),
            (
                &["r  not now "],
                vec![json!({"permissionID":"p1","response":"reject","message":"not now"})],
            ),
            (
                &["s", "o", "o"],
                vec![
                    json!({"permissionID":"p2","response":"once"}),
                    json!({"permissionID":"p1","response":"once"}),
                ],
            ),
        ];
        for (lines, want) in table {
            runtime().unwrap().block_on(async {
                let (answers, mut received) = channel();
                let (approver, terminal) = start(Screen::default(), answers);
                ask(&approver, request("p1", "rm a"));
                ask(&approver, request("p2", "rm b"));
                for text in lines {
                    line(&terminal, text);
                }
                let mut got = Vec::new();
                for _ in 0..want.len() {
                    let answer = answered(&mut received, WAIT).await.unwrap();
                    got.push(serde_json::to_value(answer).unwrap());
                }
                assert_eq!(got, want, "{lines:?}");
            });
        }
    }

    #[test]
    fn a_closed_terminal_rejects() {
        runtime().unwrap().block_on(async {
            let (answers, mut received) = channel();
            let (approver, terminal) = start(Screen::default(), answers);
            ask(&approver, request("p1", "rm a"));
            read_from(std::io::Cursor::new(Vec::new()), terminal);
            ask(&approver, request("p2", "rm b"));
            for id in ["p1", "p2"] {
                let answer = answered(&mut received, WAIT).await.unwrap();
                assert_eq!(
                    serde_json::to_value(answer).unwrap(),
                    json!({"permissionID":id,"response":"reject","message":"the approver's terminal closed: nobody can answer"})
                );
            }
        });
    }

    #[test]
    fn resolved_question_closes_and_the_next_shows() {
        let screen = Screen::default();
        runtime().unwrap().block_on(async {
            let (answers, mut received) = channel();
            let (approver, terminal) = start(screen.clone(), answers);
            ask(&approver, request("p1", "rm a"));
            ask(&approver, request("p2", "rm b"));
            line(&terminal, "r");
            approver.deliver(&resolved("p1", "the call was cancelled"));
            line(&terminal, "o");
            let got = answered(&mut received, WAIT).await.unwrap();
            assert_eq!(got.permission_id, "p2");
        });
        let text = String::from_utf8(screen.0.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains("closed: rm a (the call was cancelled)"),
            "{text}"
        );
        assert!(
            text.contains("(another question arrived: 2 pending"),
            "{text}"
        );
        assert!(
            text.contains("rm -rf") || text.contains("  rm b   not read-only"),
            "{text}"
        );
    }
}
