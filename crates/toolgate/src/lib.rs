//! The toolgate broker: sessions, pending questions, deadlines and the
//! JSON-lines transport around the pure policy engine.
//!
//! `toolgate serve` is [`serve::run`] over stdin and stdout; tests run the
//! same function over in-memory pipes.
#![deny(missing_docs)]

pub mod approver;
pub mod broker;
pub mod check;
#[cfg(unix)]
pub mod client;
pub mod clock;
pub mod convert;
pub mod globs;
pub mod hook;
pub mod import;
pub mod mcp;
pub mod policy_cli;
pub mod replay;
pub mod repo;
pub mod serve;
pub mod setup;
#[cfg(unix)]
pub mod socket;
pub mod state;

/// `eprintln!` that never panics: one line on stderr, dropped when stderr
/// fails (a file past `ulimit -f`, a full disk). `eprintln!` panics then: a
/// hook that panics exits 101 without an answer, which the agents read as
/// "go ahead", and a panic on the reading thread of `serve` leaves the
/// others waiting for good.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = ::std::io::Write::write_fmt(
            &mut ::std::io::stderr().lock(),
            ::std::format_args!("{}\n", ::std::format_args!($($arg)*)),
        );
    }};
}
