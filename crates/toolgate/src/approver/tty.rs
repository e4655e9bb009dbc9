//! `--approver tty`: questions asked on the controlling terminal, line by line.
//!
//! The agent keeps stdin and stdout; this approver opens `/dev/tty` and shows
//! the oldest pending question with [`super::view`], then reads one line:
//!
//! - `o` (or `once`): allow this call;
//! - `a` (or `always`): allow and grant the widest `alwaysOptions` entry;
//!   `a1` … `aN` grant entry N instead (1 is the narrowest, as listed);
//! - `r` (or `reject`): deny; the next line is an optional message for the
//!   agent (empty: none); `r TEXT` rejects with TEXT at once;
//! - `s` (or `skip`): show the next pending question (answers in any order).
//!
//! A question that ends otherwise (timeout, cancel, another approver) is
//! closed with its reason and the next one is shown. When the terminal's
//! input ends (it was closed), every pending and later question is rejected
//! ("the approver's terminal closed: nobody can answer"). Several questions can be
//! pending: the terminal is read on its own thread, so the broker never waits
//! for it.

use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};

use toolgate_protocol::{PermissionRequest, PermissionResponse};

use super::view::{self, Choice, Tone};
use crate::display::shown;

/// What the approver's thread is told.
enum Event {
    Ask(Box<PermissionRequest>),
    Resolved {
        permission_id: String,
        reason: String,
    },
    Line(String),
    Closed,
}

/// A line-based approver on a terminal; cheap to clone into drivers.
#[derive(Clone)]
pub struct TtyApprover {
    events: Sender<Event>,
}

impl TtyApprover {
    /// Open `/dev/tty` and start the approver. Every answer is sent on `answers`.
    pub fn open(
        project_root: Option<PathBuf>,
        answers: Sender<PermissionResponse>,
    ) -> std::io::Result<TtyApprover> {
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")?;
        let input = std::io::BufReader::new(tty.try_clone()?);
        let approver = TtyApprover::start(Box::new(tty), project_root, answers);
        approver.read_from(input);
        Ok(approver)
    }

    /// Start the approver writing to `out`; lines come from [`Self::line`] or
    /// [`Self::read_from`].
    pub fn start(
        out: Box<dyn Write + Send>,
        project_root: Option<PathBuf>,
        answers: Sender<PermissionResponse>,
    ) -> TtyApprover {
        let (events, receive) = mpsc::channel();
        std::thread::spawn(move || {
            let mut prompt = Prompt {
                out,
                pending: VecDeque::new(),
                shown: None,
                typing_message: false,
                project_root,
                answers,
            };
            prompt.run(receive);
        });
        TtyApprover { events }
    }

    /// Read lines from `input` on a thread of its own.
    pub fn read_from(&self, input: impl BufRead + Send + 'static) {
        let events = self.events.clone();
        std::thread::spawn(move || {
            for line in input.lines() {
                match line {
                    Ok(line) => {
                        if events.send(Event::Line(line)).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = events.send(Event::Closed);
        });
    }

    /// A question to ask.
    pub fn ask(&self, request: PermissionRequest) {
        let _ = self.events.send(Event::Ask(Box::new(request)));
    }

    /// A question ended otherwise.
    pub fn resolved(&self, permission_id: &str, reason: &str) {
        let _ = self.events.send(Event::Resolved {
            permission_id: permission_id.to_string(),
            reason: reason.to_string(),
        });
    }

    /// One line typed (tests; [`Self::read_from`] uses the same path).
    pub fn line(&self, text: &str) {
        let _ = self.events.send(Event::Line(text.to_string()));
    }
}

/// The answer to every question once the terminal's input has ended.
fn closed_terminal() -> Choice {
    Choice::Reject {
        message: Some("the approver's terminal closed: nobody can answer".to_string()),
    }
}

struct Prompt {
    out: Box<dyn Write + Send>,
    pending: VecDeque<PermissionRequest>,
    /// The permission id of the question on screen.
    shown: Option<String>,
    /// `r` was typed: the next line is the message.
    typing_message: bool,
    project_root: Option<PathBuf>,
    answers: Sender<PermissionResponse>,
}

impl Prompt {
    fn run(&mut self, events: Receiver<Event>) {
        let mut open = true;
        while let Ok(event) = events.recv() {
            match event {
                Event::Ask(request) => {
                    if self
                        .pending
                        .iter()
                        .any(|q| q.permission_id == request.permission_id)
                    {
                        continue;
                    }
                    if !open {
                        // Nobody can answer on a closed terminal: fail closed.
                        let response = view::answer(&request, &closed_terminal());
                        let _ = self.answers.send(response);
                        continue;
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
                Event::Resolved {
                    permission_id,
                    reason,
                } => {
                    let Some(index) = self
                        .pending
                        .iter()
                        .position(|q| q.permission_id == permission_id)
                    else {
                        continue;
                    };
                    let Some(request) = self.pending.remove(index) else {
                        continue;
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
                Event::Line(line) if open => self.typed(line.trim()),
                Event::Line(_) => {}
                Event::Closed => {
                    open = false;
                    self.shown = None;
                    for request in std::mem::take(&mut self.pending) {
                        let response = view::answer(&request, &closed_terminal());
                        let _ = self.answers.send(response);
                    }
                }
            }
        }
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
        let _ = write!(self.out, "{start}{text}{end}\r\n");
        let _ = self.out.flush();
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
        let always = match request.always_options.len() {
            0 | 1 => "a always".to_string(),
            n => format!("a always (a1…a{n}: that entry)"),
        };
        let text = format!("[o once · {always} · r reject [message] · s next] > ");
        let _ = write!(self.out, "\x1b[1m{text}\x1b[0m");
        let _ = self.out.flush();
    }

    fn typed(&mut self, line: &str) {
        let Some(request) = self.pending.front().cloned() else {
            return;
        };
        if self.shown.as_deref() != Some(request.permission_id.as_str()) {
            return;
        }
        if self.typing_message {
            self.typing_message = false;
            let message = Some(line.to_string());
            self.answer(&request, Choice::Reject { message });
            return;
        }
        let (word, rest) = match line.split_once(char::is_whitespace) {
            Some((word, rest)) => (word, rest.trim()),
            None => (line, ""),
        };
        let last = view::default_level(&request);
        match word {
            "o" | "once" => self.answer(&request, Choice::Once),
            "a" | "always" => self.answer(&request, Choice::Always { level: last }),
            "r" | "reject" if rest.is_empty() => {
                self.typing_message = true;
                let _ = write!(self.out, "message for the agent (Enter for none) > ");
                let _ = self.out.flush();
            }
            "r" | "reject" => {
                let message = Some(rest.to_string());
                self.answer(&request, Choice::Reject { message });
            }
            "s" | "skip" | "n" | "next" => {
                self.pending.rotate_left(1);
                self.show();
            }
            word => {
                let level = word
                    .strip_prefix('a')
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|n| (1..=request.always_options.len()).contains(n));
                match level {
                    Some(n) => self.answer(&request, Choice::Always { level: n - 1 }),
                    None => {
                        self.say(Tone::Warn, &format!("not an answer: {}", shown(line)));
                        self.hint(&request);
                    }
                }
            }
        }
    }

    fn answer(&mut self, request: &PermissionRequest, choice: Choice) {
        let response = view::answer(request, &choice);
        self.pending
            .retain(|q| q.permission_id != request.permission_id);
        self.shown = None;
        let _ = self.answers.send(response);
        self.say(Tone::Dim, "answered.");
        self.show();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use serde_json::{json, Value};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    #[derive(Clone, Default)]
    struct Screen(Arc<Mutex<Vec<u8>>>);

    impl Write for Screen {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
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
            let (sender, answers) = mpsc::channel();
            let screen = Screen::default();
            let approver = TtyApprover::start(Box::new(screen.clone()), None, sender);
            approver.ask(request("p1", "rm a"));
            approver.ask(request("p2", "rm b"));
            for line in lines {
                approver.line(line);
            }
            let got: Vec<Value> = (0..want.len())
                .map(|_| {
                    serde_json::to_value(answers.recv_timeout(Duration::from_secs(10)).unwrap())
                        .unwrap()
                })
                .collect();
            assert_eq!(got, want, "{lines:?}");
        }
    }

    #[test]
    fn a_closed_terminal_rejects() {
        let (sender, answers) = mpsc::channel();
        let approver = TtyApprover::start(Box::new(Screen::default()), None, sender);
        approver.ask(request("p1", "rm a"));
        approver.read_from(std::io::Cursor::new(Vec::new()));
        approver.ask(request("p2", "rm b"));
        for id in ["p1", "p2"] {
            let got = serde_json::to_value(answers.recv_timeout(Duration::from_secs(10)).unwrap())
                .unwrap();
            assert_eq!(
                got,
                json!({"permissionID":id,"response":"reject","message":"the approver's terminal closed: nobody can answer"})
            );
        }
    }

    #[test]
    fn resolved_question_closes_and_the_next_shows() {
        let (sender, answers) = mpsc::channel();
        let screen = Screen::default();
        let approver = TtyApprover::start(Box::new(screen.clone()), None, sender);
        approver.ask(request("p1", "rm a"));
        approver.ask(request("p2", "rm b"));
        approver.line("r");
        approver.resolved("p1", "the call was cancelled");
        approver.line("o");
        let got = answers.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(got.permission_id, "p2");
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
