//! The toolgate broker: sessions, pending questions, deadlines and the
//! JSON-lines transport around the pure policy engine.
//!
//! `toolgate serve` is [`transport::stdio::run`] over stdin and stdout;
//! tests run the same function over in-memory pipes. Every transport feeds
//! the one task that owns the broker ([`owner`]).
#![deny(missing_docs)]
// stderr is written through `display::say` only (a closed stderr must not panic).
#![deny(clippy::print_stderr)]

pub mod approver;
pub mod broker;
pub mod check;
#[cfg(unix)]
pub mod client;
pub mod clock;
pub mod convert;
pub mod display;
pub mod globs;
pub mod hook;
pub mod import;
pub mod mcp;
pub mod owner;
pub mod policy_cli;
pub mod replay;
pub mod repo;
pub mod setup;
#[cfg(unix)]
pub mod socket;
pub mod state;
pub mod transport;
