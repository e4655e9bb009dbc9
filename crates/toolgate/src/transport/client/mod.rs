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
//!
//! A broker is reached at an [`Endpoint`]: its Unix socket, or (feature
//! `fleet`) a remote broker over TLS with a bearer token (`--remote
//! tls://HOST:PORT --token-file FILE`, see [`remote`]). Both give a client
//! a Unix stream to speak on, so everything after connecting is the same,
//! but for who speaks first: a socket's broker greets (`ready`) before the
//! client's `hello`; a remote broker says nothing until a `hello` with a
//! token was accepted, then greets and answers it, as the socket's does.

mod blocking;
#[cfg(feature = "fleet")]
pub mod remote;
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

/// Where a broker is.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// A broker's Unix socket (`serve --listen unix:PATH`).
    Socket(PathBuf),
    /// A remote broker (`serve --listen tls:HOST:PORT`).
    #[cfg(feature = "fleet")]
    Remote(std::sync::Arc<remote::Remote>),
}

impl Endpoint {
    /// The broker as messages name it: the socket's path, or
    /// `tls://HOST:PORT`.
    pub fn label(&self) -> String {
        match self {
            Endpoint::Socket(path) => path.display().to_string(),
            #[cfg(feature = "fleet")]
            Endpoint::Remote(remote) => format!("tls://{}", remote.address()),
        }
    }

    /// Whether the broker says `ready` before the client's `hello` (a
    /// socket's does; a remote broker greets only once the `hello` with
    /// its token is accepted, then answers it with a second `ready`).
    pub fn greets(&self) -> bool {
        matches!(self, Endpoint::Socket(_))
    }
}

/// What the command line says of a remote broker: `--remote`,
/// `--token-file`, `--ca`, `--client-cert`, `--client-key` (each unset one
/// read from `TOOLGATE_REMOTE`, `TOOLGATE_TOKEN_FILE`, `TOOLGATE_CA`,
/// `TOOLGATE_CLIENT_CERT`, `TOOLGATE_CLIENT_KEY`).
#[derive(Debug, Clone, Default)]
pub struct RemoteSpec {
    /// `tls://HOST:PORT`.
    pub remote: Option<String>,
    /// The file holding the token.
    pub token_file: Option<PathBuf>,
    /// The CA certificates (PEM) the broker's certificate must chain to.
    pub ca: Option<PathBuf>,
    /// A client certificate (PEM), for a broker that requires one.
    pub client_cert: Option<PathBuf>,
    /// Its key (PEM).
    pub client_key: Option<PathBuf>,
}

/// The variable that names a remote broker when `--remote` is not given.
pub const REMOTE_ENV: &str = "TOOLGATE_REMOTE";

/// Which broker a client asks: `socket` (`--socket`), else the remote
/// broker `remote` names (`--remote`), else `TOOLGATE_SOCKET`, else
/// `TOOLGATE_REMOTE` (both variables set is an error: which one was
/// meant?). `None` means "decide in-process". A remote broker named but
/// unusable (a token file others can read, a CA file missing, …) is an
/// error the caller turns into a denial.
pub fn chosen(socket: Option<&Path>, remote: RemoteSpec) -> Result<Option<Endpoint>, ClientError> {
    if let Some(path) = socket {
        return Ok(Some(Endpoint::Socket(path.to_path_buf())));
    }
    let env = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    if remote.remote.is_none() {
        match (env("TOOLGATE_SOCKET"), env(REMOTE_ENV)) {
            (Some(_), Some(_)) => return Err(ClientError::Ambiguous),
            (Some(path), None) => return Ok(Some(Endpoint::Socket(PathBuf::from(path)))),
            (None, None) => return Ok(None),
            (None, Some(_)) => {}
        }
    }
    remote_endpoint(remote)
}

#[cfg(feature = "fleet")]
fn remote_endpoint(spec: RemoteSpec) -> Result<Option<Endpoint>, ClientError> {
    match remote::Remote::from_spec(spec) {
        Ok(remote) => Ok(remote.map(|remote| Endpoint::Remote(std::sync::Arc::new(remote)))),
        Err(err) => Err(ClientError::BadRemote(err.to_string())),
    }
}

#[cfg(not(feature = "fleet"))]
fn remote_endpoint(_: RemoteSpec) -> Result<Option<Endpoint>, ClientError> {
    Err(ClientError::BadRemote(
        "this toolgate was built without the `fleet` feature: it cannot reach a remote broker"
            .to_string(),
    ))
}

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
    /// No remote broker answers at the address (`tls://HOST:PORT`).
    NoRemote(String, io::Error),
    /// The TLS handshake with the remote broker (`tls://HOST:PORT`) failed:
    /// a certificate not to be trusted, a name it is not for.
    Handshake(String, io::Error),
    /// The remote broker cannot be used as named (why).
    BadRemote(String),
    /// Both `TOOLGATE_SOCKET` and `TOOLGATE_REMOTE` name a broker.
    Ambiguous,
    /// The broker refused the connection (another user).
    Refused(String),
    /// The socket may not be trusted (see [`open`]): its path, and why.
    Untrusted(PathBuf, String),
    /// The deadline passed before the answer came.
    TimedOut,
    /// The broker closed the connection.
    Closed,
    /// The broker closed the connection after saying why in an `error`
    /// frame about no call (a remote connection whose token was revoked or
    /// expired): its words.
    Ended(String),
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
            ClientError::NoRemote(address, err) => write!(
                f,
                "no toolgate broker answers at {address} ({err})"
            ),
            ClientError::Handshake(address, err) => write!(
                f,
                "will not trust the broker at {address}: the TLS handshake failed ({err})"
            ),
            ClientError::BadRemote(why) => f.write_str(why),
            ClientError::Ambiguous => f.write_str(
                "both TOOLGATE_SOCKET and TOOLGATE_REMOTE are set: unset one, or give --socket or --remote",
            ),
            ClientError::Refused(why) => write!(f, "the broker refused the connection: {why}"),
            ClientError::Untrusted(path, why) => write!(
                f,
                "will not trust the broker at {}: {why}",
                path.display()
            ),
            ClientError::TimedOut => f.write_str("the broker did not answer in time"),
            ClientError::Closed => f.write_str("the broker closed the connection"),
            ClientError::Ended(why) => write!(f, "the broker closed the connection: {why}"),
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

/// Connect to the broker at `endpoint` by `deadline`: [`open_socket`] for
/// a socket; for a remote broker, the local end of a bridge to its TLS
/// session (see [`remote`]). Nothing is sent; the stream has no timeouts
/// of its own. Say [`hello`] next: after the broker's `ready` when
/// [`Endpoint::greets`], else at once (the greeting follows it).
pub fn open(endpoint: &Endpoint, deadline: Instant) -> Result<UnixStream, ClientError> {
    match endpoint {
        Endpoint::Socket(path) => open_socket(path, deadline),
        #[cfg(feature = "fleet")]
        Endpoint::Remote(remote) => remote::open(remote, deadline),
    }
}

/// Connect to the broker at `path` by `deadline`, if it is one this user
/// can trust: the socket's directory (symbolic links resolved) belongs to
/// the user and nobody else can enter it, the socket belongs to the user,
/// and the process listening on it runs as the user. Nothing is sent; the
/// stream has no timeouts of its own.
pub fn open_socket(path: &Path, deadline: Instant) -> Result<UnixStream, ClientError> {
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

/// The `hello` a client says to the broker at `endpoint` as `role`, naming
/// itself `name`: with the token, for a remote broker.
pub fn hello(endpoint: &Endpoint, role: Role, name: &str) -> Value {
    #[allow(unused_mut)] // a token only with the feature `fleet`
    let mut hello = serde_json::json!({"type": "hello", "role": role.as_str(), "client": name});
    #[cfg(feature = "fleet")]
    if let (Endpoint::Remote(remote), Value::Object(fields)) = (endpoint, &mut hello) {
        fields.insert("token".into(), Value::String(remote.token().to_string()));
    }
    #[cfg(not(feature = "fleet"))]
    let _ = endpoint;
    hello
}

/// The broker's answer to `hello`: its `ready` (an `error` refuses us: a
/// remote broker that will not take the token says why).
fn readied(ready: Value) -> Result<Value, ClientError> {
    match ready.get("type").and_then(Value::as_str) {
        Some("ready") => Ok(ready),
        Some("error") => greeted(&ready).map(|()| ready),
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

/// The words of an `error` frame about no call, no question and no line:
/// the broker says why it is about to close the connection (a remote
/// token revoked or expired), kept to tell why it closed.
fn last_words(frame: &ServerFrame) -> Option<String> {
    match frame {
        ServerFrame::Error(error)
            if error.call_id.is_none()
                && error.session_id.is_none()
                && error.permission_id.is_none()
                && error.line.is_none() =>
        {
            Some(error.message.clone())
        }
        _ => None,
    }
}

/// The end of a connection: [`ClientError::Ended`] when the broker said
/// why before it closed it, else [`ClientError::Closed`].
fn ended(last_words: &Option<String>) -> ClientError {
    match last_words {
        Some(why) => ClientError::Ended(why.clone()),
        None => ClientError::Closed,
    }
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
