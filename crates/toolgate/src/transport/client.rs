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

use std::io::{self, BufRead, BufReader, Write};
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
    let untrusted = |why| ClientError::Untrusted(path.to_path_buf(), why);
    let no_broker = |err| ClientError::NoBroker(path.to_path_buf(), err);
    let uid = crate::transport::socket::my_uid();
    // Checked and connected through the real path, so that no link on the
    // way can be pointed elsewhere in between.
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
    let stream = connect_by(&real, deadline).map_err(|err| {
        if timed_out(&err) {
            ClientError::TimedOut
        } else {
            no_broker(err)
        }
    })?;
    stream.set_write_timeout(None).map_err(ClientError::Io)?;
    match crate::transport::socket::peer_uid(&stream) {
        Ok(None) => {}
        Ok(Some(peer)) if peer == uid => {}
        Ok(Some(peer)) => {
            return Err(untrusted(format!(
                "the broker listening on {} runs as uid {peer}, not as you (uid {uid})",
                path.display()
            )))
        }
        Err(err) => {
            return Err(untrusted(format!(
                "who listens on {} cannot be told ({err})",
                path.display()
            )))
        }
    }
    Ok(stream)
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

/// One connection to a broker.
pub struct Client {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    /// The broker's `ready` answer to `hello` (read leniently: a client
    /// needs only its type).
    pub ready: Value,
}

impl Client {
    /// Connect to `path` as `role`, naming the client `name`, by
    /// `deadline` (see [`open`]).
    pub fn connect(
        path: &Path,
        role: Role,
        name: &str,
        deadline: Instant,
    ) -> Result<Client, ClientError> {
        Client::handshake(open(path, deadline)?, role, name, deadline)
    }

    /// Greet the broker at the other end of `stream` (from [`open`]) as
    /// `role`, naming the client `name`, by `deadline`.
    pub fn handshake(
        stream: UnixStream,
        role: Role,
        name: &str,
        deadline: Instant,
    ) -> Result<Client, ClientError> {
        let reader = BufReader::new(stream.try_clone().map_err(ClientError::Io)?);
        let mut client = Client {
            writer: stream,
            reader,
            ready: Value::Null,
        };
        client.bound_writes(Some(deadline))?;
        let first = client.recv_value(Some(deadline))?;
        match first.get("type").and_then(Value::as_str) {
            Some("ready") => {}
            Some("error") => {
                return Err(ClientError::Refused(
                    first
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("no reason given")
                        .to_string(),
                ))
            }
            _ => return Err(ClientError::Protocol(first.to_string())),
        }
        client.send(&serde_json::json!({
            "type": "hello",
            "role": role.as_str(),
            "client": name,
        }))?;
        let ready = client.recv_value(Some(deadline))?;
        if ready.get("type").and_then(Value::as_str) != Some("ready") {
            return Err(ClientError::Protocol(ready.to_string()));
        }
        client.ready = ready;
        Ok(client)
    }

    /// Another handle on the connection's socket, to shut it down from
    /// another thread (which withdraws this client's open calls).
    pub fn stream(&self) -> io::Result<UnixStream> {
        self.writer.try_clone()
    }

    /// Send one frame (within the time the last deadline left it).
    pub fn send(&mut self, frame: &Value) -> Result<(), ClientError> {
        let mut line = serde_json::to_vec(frame).map_err(|err| ClientError::Io(err.into()))?;
        line.push(b'\n');
        self.writer.write_all(&line).map_err(|err| {
            if timed_out(&err) {
                ClientError::TimedOut
            } else {
                ClientError::Io(err)
            }
        })
    }

    /// Writes from now on wait at most until `deadline` (`None`: as long
    /// as they must).
    fn bound_writes(&self, deadline: Option<Instant>) -> Result<(), ClientError> {
        let timeout = match deadline {
            None => None,
            Some(deadline) => Some(left(deadline).ok_or(ClientError::TimedOut)?),
        };
        self.writer
            .set_write_timeout(timeout)
            .map_err(ClientError::Io)
    }

    /// Withdraw call `call` of `session` (a `cancel`), for a caller that
    /// stops waiting: best effort, and never for long.
    pub fn withdraw(&mut self, session: &str, call: &str) {
        let _ = self.writer.set_write_timeout(Some(WITHDRAW_WRITE));
        let _ =
            self.send(&serde_json::json!({"type": "cancel", "sessionID": session, "callID": call}));
    }

    /// The next frame, waiting at most until `deadline`.
    pub fn recv(&mut self, deadline: Option<Instant>) -> Result<ServerFrame, ClientError> {
        let line = self.recv_line(deadline)?;
        serde_json::from_str(&line)
            .map_err(|err| ClientError::Protocol(format!("{err}: {}", line.trim_end())))
    }

    /// The next frame as JSON, waiting at most until `deadline`.
    pub fn recv_value(&mut self, deadline: Option<Instant>) -> Result<Value, ClientError> {
        let line = self.recv_line(deadline)?;
        serde_json::from_str(&line)
            .map_err(|err| ClientError::Protocol(format!("{err}: {}", line.trim_end())))
    }

    fn recv_line(&mut self, deadline: Option<Instant>) -> Result<String, ClientError> {
        let timeout = match deadline {
            None => None,
            Some(deadline) => Some(left(deadline).ok_or(ClientError::TimedOut)?),
        };
        self.reader
            .get_ref()
            .set_read_timeout(timeout)
            .map_err(ClientError::Io)?;
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Err(ClientError::Closed),
            Ok(_) => Ok(line),
            Err(err) if timed_out(&err) => Err(ClientError::TimedOut),
            Err(err) => Err(ClientError::Io(err)),
        }
    }

    /// Send `frames` (the last one the `tool_call` of `session`/`call`) and
    /// wait until `deadline` for its decision, or for a question put to this
    /// connection. Other frames (`mode_changed`, `session_started`, errors
    /// about the other frames) are skipped; an error about the call itself
    /// is a protocol error.
    pub fn call(
        &mut self,
        frames: &[Value],
        session: &str,
        call: &str,
        deadline: Option<Instant>,
    ) -> Result<Outcome, ClientError> {
        self.bound_writes(deadline)?;
        for frame in frames {
            self.send(frame)?;
        }
        loop {
            match self.recv(deadline)? {
                ServerFrame::Decision(decision)
                    if decision.call_id == call && decision.session_id == session =>
                {
                    return Ok(Outcome::Decided(decision))
                }
                ServerFrame::PermissionRequest(request)
                    if request.call_id == call && request.session_id == session =>
                {
                    return Ok(Outcome::Asked(*request))
                }
                ServerFrame::Error(error)
                    if error.call_id.as_deref() == Some(call)
                        && error.session_id.as_deref().is_none_or(|s| s == session) =>
                {
                    return Err(ClientError::Protocol(error.message))
                }
                _ => {}
            }
        }
    }

    /// Wait until `deadline` for the decision of `session`/`call` (after a
    /// question this client passed on, or an answer it sent).
    pub fn decision(
        &mut self,
        session: &str,
        call: &str,
        deadline: Option<Instant>,
    ) -> Result<Decision, ClientError> {
        loop {
            if let ServerFrame::Decision(decision) = self.recv(deadline)? {
                if decision.call_id == call && decision.session_id == session {
                    return Ok(decision);
                }
            }
        }
    }
}
