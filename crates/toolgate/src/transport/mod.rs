//! The transports: how frames reach the owner of the broker
//! ([`crate::owner`]) and how its answers leave.
//!
//! - [`lines`]: the one bounded line codec every transport frames with.
//! - [`stdio`]: `toolgate serve` on stdin and stdout; [`stdin`]: who reads
//!   stdin, the owner or a thread of its own.
//! - [`socket`]: `serve --listen`, many connections to one broker.
//! - [`remote`] (feature `fleet`): `serve --listen tls:HOST:PORT`, remote
//!   connections with bearer tokens; [`tls`]: their TLS configurations.
//! - [`client`]: the one client of a broker's socket (the hook, the MCP
//!   server and `toolgate approve` use it), or of a remote broker.
//! - [`signals`]: SIGTERM, SIGINT and SIGHUP as events.

#[cfg(unix)]
pub mod client;
pub mod lines;
#[cfg(all(unix, feature = "fleet"))]
pub mod remote;
pub mod signals;
#[cfg(unix)]
pub mod socket;
pub mod stdin;
pub mod stdio;
#[cfg(feature = "fleet")]
pub mod tls;
