//! Human and program approvers: what they show and how they answer.
//!
//! - [`view`]: a `permission_request` as lines a person reads (the command's
//!   simple commands and why it is not read-only, an edit's diff, the
//!   `alwaysOptions` to choose from) and the `permission_response` a choice
//!   makes. Pure.
//! - [`tui`]: `toolgate approve`, the terminal approver on a broker's socket.
//! - [`tty`]: `--approver tty`, a line-based prompt on /dev/tty.
//! - [`command`]: `--approver command:PROG`, one program per question.
//!
//! The two in-process approvers ([`InProcess`]) are tasks of the transport's
//! runtime: each is told in order what the broker says to it ([`Told`],
//! through [`Started`]) and puts its answers straight on the owner's
//! channel ([`Answers`]).

pub mod command;
pub mod tty;
pub mod tui;
pub mod view;

use std::path::PathBuf;

use tokio::sync::mpsc;
use toolgate_protocol::{PermissionRequest, ServerFrame};

pub use crate::owner::Answers;
use crate::owner::Deliver;

/// Which in-process approver `serve --approver` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// `tty`: a prompt on the controlling terminal.
    Tty,
    /// `command:PROG`: `sh -c PROG` per question.
    Command(String),
}

/// Read `--approver`'s value: `tty` or `command:PROG`.
pub fn parse_spec(text: &str) -> Result<Spec, String> {
    match text.split_once(':') {
        None if text == "tty" => Ok(Spec::Tty),
        Some(("command", program)) if !program.trim().is_empty() => {
            Ok(Spec::Command(program.to_string()))
        }
        Some(("command", _)) => Err("command: needs a program, e.g. command:./approve.sh".into()),
        _ => Err(format!(
            "unknown approver `{text}` (expected tty or command:PROG)"
        )),
    }
}

/// An approver `serve --approver` runs inside the broker's process, made
/// ready before the broker starts (the terminal is open) and started as
/// tasks of the transport's runtime.
pub enum InProcess {
    /// `--approver tty`: the terminal, and the project root edits are shown against.
    Tty(tty::Terminal, Option<PathBuf>),
    /// `--approver command:PROG`.
    Command(String),
}

impl InProcess {
    /// Make the approver `spec` ready: open the terminal for `tty`.
    pub fn open(spec: &Spec, project_root: Option<PathBuf>) -> std::io::Result<InProcess> {
        Ok(match spec {
            Spec::Tty => InProcess::Tty(tty::Terminal::open()?, project_root),
            Spec::Command(program) => InProcess::Command(program.clone()),
        })
    }

    /// Start it as tasks of the current runtime; its answers go to
    /// `answers`.
    pub fn start(self, answers: Answers) -> std::io::Result<Started> {
        let (told, receive) = mpsc::unbounded_channel();
        match self {
            InProcess::Tty(terminal, project_root) => {
                tty::start(terminal, project_root, answers, &told, receive)?
            }
            InProcess::Command(program) => {
                tokio::spawn(command::run(program, receive, answers));
            }
        }
        Ok(Started(told))
    }
}

impl crate::owner::Approver for InProcess {
    fn name(&self) -> &'static str {
        match self {
            InProcess::Tty(..) => "tty",
            InProcess::Command(_) => "command",
        }
    }

    fn start(self: Box<Self>, answers: Answers) -> std::io::Result<Box<dyn Deliver>> {
        Ok(Box::new(InProcess::start(*self, answers)?))
    }
}

/// What an approver's task is told, in order.
pub enum Told {
    /// A question to ask.
    Ask(Box<PermissionRequest>),
    /// A question ended otherwise (timeout, cancel, another approver).
    Resolved {
        /// The question.
        permission_id: String,
        /// Why it ended.
        reason: String,
    },
    /// The broker stopped.
    Stop,
    /// A line typed on the terminal (`tty`).
    Line(String),
    /// The terminal's input ended (`tty`).
    Closed,
}

/// A started approver: its task is told the frames addressed to it.
pub struct Started(mpsc::UnboundedSender<Told>);

impl Deliver for Started {
    /// A question, or the end of one; an error (a refused answer) is
    /// logged, and nothing else is for an approver.
    fn deliver(&self, frame: &ServerFrame) {
        let told = match frame {
            ServerFrame::PermissionRequest(request) => Told::Ask(request.clone()),
            ServerFrame::PermissionResolved(resolved) => Told::Resolved {
                permission_id: resolved.permission_id.clone(),
                reason: resolved.reason.clone(),
            },
            ServerFrame::Error(error) => {
                tracing::warn!(message = %error.message, "the broker refused the approver's answer");
                return;
            }
            _ => return,
        };
        let _ = self.0.send(told);
    }

    fn stop(&self) {
        let _ = self.0.send(Told::Stop);
    }
}

/// A runtime for tests.
#[cfg(test)]
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// The frame saying that the question `id` ended for `reason`, for tests.
#[cfg(test)]
fn resolved(id: &str, reason: &str) -> ServerFrame {
    let (session_id, call_id) = ("s".to_string(), "c".to_string());
    ServerFrame::PermissionResolved(toolgate_protocol::PermissionResolved {
        permission_id: id.to_string(),
        session_id,
        call_id,
        reason: reason.to_string(),
    })
}

/// An answer channel for tests: the answers and the owner's end.
#[cfg(test)]
fn channel() -> (Answers, mpsc::Receiver<crate::owner::Event>) {
    let (events, received) = mpsc::channel(16);
    (Answers::new(1, events), received)
}

/// The next answer sent on a test's [`channel`], if one comes within `wait`.
#[cfg(test)]
async fn answered(
    received: &mut mpsc::Receiver<crate::owner::Event>,
    wait: std::time::Duration,
) -> Option<toolgate_protocol::PermissionResponse> {
    match tokio::time::timeout(wait, received.recv()).await {
        Ok(Some(crate::owner::Event::Answer { response, .. })) => Some(response),
        _ => None,
    }
}
