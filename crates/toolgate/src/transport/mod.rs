//! The transports: how frames reach the owner of the broker
//! ([`crate::owner`]) and how its answers leave.
//!
//! - [`lines`]: the one bounded line codec every transport frames with.
//! - [`stdio`]: `toolgate serve` on stdin and stdout.
//! - [`signals`]: SIGTERM, SIGINT and SIGHUP as events.
//!
//! The socket (`serve --listen`) is [`crate::socket`].

pub mod lines;
pub mod signals;
pub mod stdio;
