//! A client of a running broker's socket (`toolgate serve --listen`), as the
//! hook, the MCP server and the approver use it: connect, read `ready`, say
//! `hello`, send frames, wait for the decision of a call until a deadline.
//!
//! Which socket: `--socket PATH`, else `TOOLGATE_SOCKET`; without either a
//! client decides in-process instead. A socket that was named but has no
//! broker behind it is an error the caller turns into a denial: falling back
//! to an in-process policy could be looser than the broker's.
//!
//! Whom a client trusts: a broker of its own user, and nobody else. Whoever
//! answers on the socket decides what the agent may run, so before a client
//! says anything (see [`open`]) the socket's directory must be the user's
//! own and closed to everybody else (as the broker demands when it listens:
//! another user who made `/tmp/toolgate-UID/` first could otherwise answer
//! `allow` to anything), the socket file must be the user's, and the
//! process listening on it must run as the user (`SO_PEERCRED`, on Linux).
//! A broker that fails any of these is never asked: the caller denies.
//!
//! Nothing waits past its deadline: connecting (a broker that stopped
//! accepting leaves new connections in its queue, and a full queue holds a
//! `connect`), each write and each read are bounded by the caller's
//! deadline, and a broker that lets it pass is [`ClientError::TimedOut`].
//!
//! Two clients share what is said and what it means (this module: the
//! greeting, a call's outcome, the trust checks): [`Client`], blocking, for
//! short-lived processes (`hook`, `approve`), and [`Connection`], on tokio,
//! for a process that waits on many calls at once (`mcp`).

mod blocking;
mod tasks;

pub use blocking::Client;
pub use tasks::{within, Connection, Incoming, Outgoing};

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use toolgate_protocol::{Decision, PermissionRequest, Role, ServerFrame};

/// The socket a client should use: `flag`, else `TOOLGATE_SOCKET`; `None`
/// means "decide in-process".
pub fn chosen_socket(flag: Option<&Path>) -> Option<PathBuf> {
    flag.map(Path::to_path_buf).or_else(|| {
        std::env::var_os("TOOLGATE_SOCKET")
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
    })
}

/// What went wrong talking to a broker.
#[derive(Debug)]
pub enum ClientError {
    /// Nothing listens on the socket.
    NoBroker(PathBuf, io::Error),
    /// The broker refused the connection (another user).
    Refused(String),
    /// The socket may not be trusted (see [`open`]): its path, and why.
    Untrusted(PathBuf, String),
    /// The deadline passed before the answer came.
    TimedOut,
    /// The broker closed the connection.
    Closed,
    /// The broker said something this client did not expect.
    Protocol(String),
    /// Reading or writing failed.
    Io(io::Error),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::NoBroker(path, err) => write!(
                f,
                "no toolgate broker listens on {} ({err}); start one with `toolgate serve --listen unix:{}`",
                path.display(),
                path.display()
            ),
            ClientError::Refused(why) => write!(f, "the broker refused the connection: {why}"),
            ClientError::Untrusted(path, why) => write!(
                f,
                "will not trust the broker at {}: {why}",
                path.display()
            ),
            ClientError::TimedOut => f.write_str("the broker did not answer in time"),
            ClientError::Closed => f.write_str("the broker closed the connection"),
            ClientError::Protocol(what) => write!(f, "unexpected frame from the broker: {what}"),
            ClientError::Io(err) => write!(f, "talking to the broker failed: {err}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// How long a client with no deadline of its own (`mcp`, `approve`, the
/// bridges) waits for a broker to take its connection and say `ready`: a
/// running broker does at once, one that does not is stopped or stuck.
pub const CONNECT_WAIT: Duration = Duration::from_secs(5);

/// How long withdrawing a call may wait to write its `cancel`.
const WITHDRAW_WRITE: Duration = Duration::from_millis(100);

/// The time left until `deadline`; `None` once it has passed.
fn left(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|left| !left.is_zero())
}

/// Whether `err` is a timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO` give `EAGAIN`).
fn timed_out(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Connect to the broker at `path` by `deadline`, if it is one this user
/// can trust: the socket's directory (symbolic links resolved) belongs to
/// the user and nobody else can enter it, the socket belongs to the user,
/// and the process listening on it runs as the user. Nothing is sent; the
/// stream has no timeouts of its own.
pub fn open(path: &Path, deadline: Instant) -> Result<UnixStream, ClientError> {
    let real = trusted(path)?;
    let stream = connect_by(&real, deadline).map_err(|err| {
        if timed_out(&err) {
            ClientError::TimedOut
        } else {
            ClientError::NoBroker(path.to_path_buf(), err)
        }
    })?;
    stream.set_write_timeout(None).map_err(ClientError::Io)?;
    peer_trusted(path, crate::transport::socket::peer_uid(&stream))?;
    Ok(stream)
}

/// The real path of the socket `path` names, if its directory and the
/// socket are the user's (see [`open`]). A client connects through the real
/// path, so that no link on the way can be pointed elsewhere in between.
fn trusted(path: &Path) -> Result<PathBuf, ClientError> {
    let untrusted = |why| ClientError::Untrusted(path.to_path_buf(), why);
    let no_broker = |err| ClientError::NoBroker(path.to_path_buf(), err);
    let uid = crate::transport::socket::my_uid();
    let real = std::fs::canonicalize(path).map_err(no_broker)?;
    let dir = real.parent().unwrap_or(Path::new("/"));
    let meta = std::fs::metadata(dir).map_err(no_broker)?;
    if let Some(why) = crate::transport::socket::unsafe_directory(dir, &meta, uid) {
        return Err(untrusted(why));
    }
    let meta = std::fs::metadata(&real).map_err(no_broker)?;
    if !meta.file_type().is_socket() {
        return Err(untrusted(format!("{} is not a socket", real.display())));
    }
    if meta.uid() != uid {
        return Err(untrusted(format!(
            "the socket {} belongs to uid {}, not to you (uid {uid})",
            real.display(),
            meta.uid()
        )));
    }
    Ok(real)
}

/// Whether the process listening on `path`, of uid `peer` (`None`: cannot
/// be known here), may be trusted: it must run as the user.
fn peer_trusted(path: &Path, peer: io::Result<Option<u32>>) -> Result<(), ClientError> {
    let uid = crate::transport::socket::my_uid();
    let why = match peer {
        Ok(None) => return Ok(()),
        Ok(Some(peer)) if peer == uid => return Ok(()),
        Ok(Some(peer)) => format!(
            "the broker listening on {} runs as uid {peer}, not as you (uid {uid})",
            path.display()
        ),
        Err(err) => format!("who listens on {} cannot be told ({err})", path.display()),
    };
    Err(ClientError::Untrusted(path.to_path_buf(), why))
}

/// Connect to `path` by `deadline`. On Linux a `connect` that waits for
/// room in the broker's queue of connections waits at most the socket's
/// send timeout, which is set first; elsewhere it is not bounded (what
/// follows it is).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn connect_by(path: &Path, deadline: Instant) -> io::Result<UnixStream> {
    use rustix::net::{sockopt, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let left = left(deadline).ok_or_else(|| io::Error::from(io::ErrorKind::TimedOut))?;
    let socket = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    sockopt::set_socket_timeout(&socket, sockopt::Timeout::Send, Some(left))?;
    rustix::net::connect(&socket, &SocketAddrUnix::new(path)?)?;
    Ok(UnixStream::from(socket))
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn connect_by(path: &Path, deadline: Instant) -> io::Result<UnixStream> {
    if left(deadline).is_none() {
        return Err(io::ErrorKind::TimedOut.into());
    }
    UnixStream::connect(path)
}

/// How a call ended for this client.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The broker decided.
    Decided(Decision),
    /// The broker asked *this* connection (no approver is connected): the
    /// caller answers it, cancels the call, or puts the question elsewhere.
    Asked(PermissionRequest),
}

/// The broker's first frame, `ready` (anything else refuses us).
fn greeted(first: &Value) -> Result<(), ClientError> {
    match first.get("type").and_then(Value::as_str) {
        Some("ready") => Ok(()),
        Some("error") => Err(ClientError::Refused(
            first
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no reason given")
                .to_string(),
        )),
        _ => Err(ClientError::Protocol(first.to_string())),
    }
}

/// The `hello` a client says as `role`, naming itself `name`.
fn hello(role: Role, name: &str) -> Value {
    serde_json::json!({"type": "hello", "role": role.as_str(), "client": name})
}

/// The broker's answer to `hello`: its `ready`.
fn readied(ready: Value) -> Result<Value, ClientError> {
    match ready.get("type").and_then(Value::as_str) {
        Some("ready") => Ok(ready),
        _ => Err(ClientError::Protocol(ready.to_string())),
    }
}

/// The `cancel` withdrawing call `call` of `session`.
fn withdrawal(session: &str, call: &str) -> Value {
    serde_json::json!({"type": "cancel", "sessionID": session, "callID": call})
}

/// One line from the broker as JSON.
fn value(line: &[u8]) -> Result<Value, ClientError> {
    serde_json::from_slice(line).map_err(|err| unreadable(err, line))
}

/// One line from the broker as a frame.
fn frame(line: &[u8]) -> Result<ServerFrame, ClientError> {
    serde_json::from_slice(line).map_err(|err| unreadable(err, line))
}

fn unreadable(err: serde_json::Error, line: &[u8]) -> ClientError {
    ClientError::Protocol(format!(
        "{err}: {}",
        String::from_utf8_lossy(line).trim_end()
    ))
}

/// What `frame` says of call `call` of `session`: how it ended, or `None`
/// for a frame about something else (`mode_changed`, `session_started`,
/// errors about other frames), which a client skips. An error about the
/// call itself is a protocol error.
fn of_call(frame: ServerFrame, session: &str, call: &str) -> Option<Result<Outcome, ClientError>> {
    match frame {
        ServerFrame::Decision(decision)
            if decision.call_id == call && decision.session_id == session =>
        {
            Some(Ok(Outcome::Decided(decision)))
        }
        ServerFrame::PermissionRequest(request)
            if request.call_id == call && request.session_id == session =>
        {
            Some(Ok(Outcome::Asked(*request)))
        }
        ServerFrame::Error(error)
            if error.call_id.as_deref() == Some(call)
                && error.session_id.as_deref().is_none_or(|s| s == session) =>
        {
            Some(Err(ClientError::Protocol(error.message)))
        }
        _ => None,
    }
}
