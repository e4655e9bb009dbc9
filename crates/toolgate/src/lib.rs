//! The toolgate broker: sessions, pending questions, deadlines and the
//! JSON-lines transport around the pure policy engine.
//!
//! `toolgate serve` is [`transport::stdio::run`] over stdin and stdout;
//! tests run the same function over in-memory pipes. Every transport feeds
//! the one task that owns the broker ([`owner`]).
#![deny(missing_docs)]
// stderr is written through `display::say` only (a closed stderr must not panic).
#![deny(clippy::print_stderr)]

// The core: the broker's state machine and the task that owns it.
pub mod broker;
pub mod owner;
// How frames come and go: the line codec, stdio, the socket and its client,
// signals.
pub mod transport;
// What speaks each agent's language: hooks, the MCP server, settings import.
pub mod adapters;
// `toolgate init` and `doctor`: the agents' settings files.
pub mod agent_setup;
// Who answers questions: the terminal, programs, `toolgate approve`.
pub mod approver;
// What is kept on disk: the state directory.
pub mod store;
// What brokers on many hosts share: the PostgreSQL store and its tokens.
#[cfg(feature = "fleet")]
pub mod fleet;
// The web approval page over that store.
#[cfg(feature = "fleet")]
pub mod web;
// What the policy asks the disk: repositories and globs.
pub mod disk;
// Recorded sessions played back.
pub mod replay;
// The rest: the policy file, `check`, `policy`, time and ids, conversions,
// stderr.
pub mod check;
pub mod clock;
pub mod convert;
pub mod display;
pub mod policy_cli;
pub mod setup;
