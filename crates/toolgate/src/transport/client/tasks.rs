//! [`Connection`]: one connection to a broker on tokio, for a process that
//! waits on several calls at once without a thread for each (`toolgate
//! mcp`). Its halves are apart, so that one task can wait for a decision
//! while another withdraws the call by closing the write half.
//!
//! Connecting makes the same checks as the blocking [`super::open`]. A
//! broker whose queue of connections is full (stopped, or stuck) refuses a
//! non-blocking `connect` at once: it is tried again, more slowly each
//! time, until the deadline. Other deadlines are the caller's: wrap a step
//! in [`within`].

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use toolgate_protocol::{Role, ServerFrame};

use super::{
    greeted, hello, of_call, peer_trusted, readied, trusted, withdrawal, ClientError, Endpoint,
    Outcome,
};
use crate::transport::lines::{AsyncReader, Line};

/// The longest line read from a broker (a question may carry a large
/// diff): a longer one is a protocol error.
const MAX_LINE: usize = 64 << 20;

/// One connection to a broker, greeted.
pub struct Connection {
    /// What the broker says.
    pub incoming: Incoming,
    /// What this client says.
    pub outgoing: Outgoing,
    /// The broker's `ready` answer to `hello`.
    pub ready: Value,
}

/// The reading half of a [`Connection`].
pub struct Incoming(AsyncReader<OwnedReadHalf>, Option<String>);

/// The writing half of a [`Connection`].
pub struct Outgoing(OwnedWriteHalf);

impl Connection {
    /// Connect to the broker at `endpoint` (see [`super::open`]) as
    /// `role`, naming the client `name`, and be greeted, all by `deadline`.
    pub async fn open(
        endpoint: &Endpoint,
        role: Role,
        name: &str,
        deadline: Instant,
    ) -> Result<Connection, ClientError> {
        let stream = match endpoint {
            Endpoint::Socket(path) => connect(path, deadline).await?,
            #[cfg(feature = "fleet")]
            Endpoint::Remote(remote) => super::remote::connect(remote, deadline).await?,
        };
        let (reading, writing) = stream.into_split();
        let mut connection = Connection {
            incoming: Incoming(AsyncReader::new(reading, MAX_LINE), None),
            outgoing: Outgoing(writing),
            ready: Value::Null,
        };
        let greeting = async {
            if endpoint.greets() {
                greeted(&connection.incoming.recv_value().await?)?;
                connection
                    .outgoing
                    .send(&hello(endpoint, role, name))
                    .await?;
            } else {
                connection
                    .outgoing
                    .send(&hello(endpoint, role, name))
                    .await?;
                greeted(&connection.incoming.recv_value().await?)?;
            }
            readied(connection.incoming.recv_value().await?)
        };
        connection.ready = within(deadline, greeting).await?;
        Ok(connection)
    }
}

/// Connect to the broker at `path` by `deadline`, if this user can trust
/// it (see [`super::open`]).
async fn connect(path: &Path, deadline: Instant) -> Result<UnixStream, ClientError> {
    let real = trusted(path)?;
    let mut pause = Duration::from_millis(1);
    let stream = loop {
        match UnixStream::connect(&real).await {
            Ok(stream) => break stream,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() + pause >= deadline {
                    return Err(ClientError::TimedOut);
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(err) => return Err(ClientError::NoBroker(path.to_path_buf(), err)),
        }
    };
    let peer = stream.peer_cred().map(|cred| Some(cred.uid()));
    peer_trusted(path, peer)?;
    Ok(stream)
}

/// `step`, unless `deadline` passes first.
pub async fn within<T>(
    deadline: Instant,
    step: impl std::future::Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    tokio::time::timeout_at(deadline.into(), step)
        .await
        .unwrap_or(Err(ClientError::TimedOut))
}

impl Incoming {
    /// The next line; [`ClientError::Closed`] at the end of the connection.
    async fn line(&mut self) -> Result<bytes::Bytes, ClientError> {
        match self.0.next_line().await.map_err(ClientError::Io)? {
            Some(Line::Data(line)) => Ok(line),
            Some(Line::TooLarge(_)) => Err(ClientError::Protocol(format!(
                "a line longer than {MAX_LINE} bytes"
            ))),
            None => Err(super::ended(&self.1)),
        }
    }

    /// The next frame as JSON.
    pub async fn recv_value(&mut self) -> Result<Value, ClientError> {
        super::value(&self.line().await?)
    }

    /// The next frame.
    pub async fn recv(&mut self) -> Result<ServerFrame, ClientError> {
        let frame = super::frame(&self.line().await?)?;
        // Why the broker is closing the connection, when it says so.
        if let Some(why) = super::last_words(&frame) {
            self.1 = Some(why);
        }
        Ok(frame)
    }

    /// How call `call` of `session` ends for this client: its decision, or
    /// a question put to this connection (see `client::of_call` for the frames
    /// skipped meanwhile). Cancel-safe.
    pub async fn outcome(&mut self, session: &str, call: &str) -> Result<Outcome, ClientError> {
        loop {
            if let Some(outcome) = of_call(self.recv().await?, session, call) {
                return outcome;
            }
        }
    }
}

impl Outgoing {
    /// Send one frame.
    pub async fn send(&mut self, frame: &Value) -> Result<(), ClientError> {
        let mut line = serde_json::to_vec(frame).map_err(|err| ClientError::Io(err.into()))?;
        line.push(b'\n');
        self.0.write_all(&line).await.map_err(ClientError::Io)
    }

    /// Withdraw call `call` of `session` (a `cancel`), for a caller that
    /// stops waiting: best effort, and never for long.
    pub async fn withdraw(&mut self, session: &str, call: &str) {
        let wait = Instant::now() + super::WITHDRAW_WRITE;
        let _ = within(wait, self.send(&withdrawal(session, call))).await;
    }

    /// Say nothing more: the broker reads the end of this connection's
    /// input, after what was sent.
    pub async fn close(&mut self) {
        let _ = self.0.shutdown().await;
    }
}
