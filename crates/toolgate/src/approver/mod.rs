//! Human and program approvers: what they show and how they answer.
//!
//! - [`view`]: a `permission_request` as lines a person reads (the command's
//!   simple commands and why it is not read-only, an edit's diff, the
//!   `alwaysOptions` to choose from) and the `permission_response` a choice
//!   makes. Pure.
//! - [`tui`]: `toolgate approve`, the terminal approver on a broker's socket.
//! - [`tty`]: `--approver tty`, a line-based prompt on /dev/tty.
//! - [`command`]: `--approver command:PROG`, one program per question.

pub mod command;
pub mod tty;
pub mod tui;
pub mod view;

use std::path::PathBuf;
use std::sync::mpsc::Sender;

use toolgate_protocol::{PermissionResponse, ServerFrame};

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

/// An approver running inside the broker's process: it is handed the frames
/// the broker addresses to its connection and sends its answers on a channel,
/// which the transport feeds back to the broker as lines of that connection.
pub enum InProcess {
    /// `--approver tty`.
    Tty(tty::TtyApprover),
    /// `--approver command:PROG`.
    Command(command::CommandApprover),
}

impl InProcess {
    /// Start the approver `spec`; its answers go to `answers`.
    pub fn start(
        spec: &Spec,
        project_root: Option<PathBuf>,
        answers: Sender<PermissionResponse>,
    ) -> std::io::Result<InProcess> {
        Ok(match spec {
            Spec::Tty => InProcess::Tty(tty::TtyApprover::open(project_root, answers)?),
            Spec::Command(program) => {
                InProcess::Command(command::CommandApprover::new(program.clone(), answers))
            }
        })
    }
}

impl crate::owner::Deliver for InProcess {
    /// A frame the broker addressed to this approver: a question to ask, or
    /// one that ended (anything else is logged).
    fn deliver(&self, frame: &ServerFrame) {
        match (self, frame) {
            (InProcess::Tty(tty), ServerFrame::PermissionRequest(request)) => {
                tty.ask(toolgate_protocol::PermissionRequest::clone(request))
            }
            (InProcess::Command(command), ServerFrame::PermissionRequest(request)) => {
                command.ask(toolgate_protocol::PermissionRequest::clone(request))
            }
            (InProcess::Tty(tty), ServerFrame::PermissionResolved(resolved)) => {
                tty.resolved(&resolved.permission_id, &resolved.reason)
            }
            (InProcess::Command(command), ServerFrame::PermissionResolved(resolved)) => {
                command.resolved(&resolved.permission_id)
            }
            (_, ServerFrame::Error(error)) => {
                tracing::warn!(message = %error.message, "the broker refused the approver's answer")
            }
            _ => {}
        }
    }

    /// The broker stopped: end what still runs.
    fn stop(&self) {
        if let InProcess::Command(command) = self {
            command.stop_all();
        }
    }
}
