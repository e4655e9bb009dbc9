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
