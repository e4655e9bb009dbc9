//! [`Client`]: one blocking connection to a broker, for a process that
//! waits on one thing at a time (`toolgate hook`, `toolgate approve`).

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Instant;

use serde_json::Value;
use toolgate_protocol::{Decision, Role, ServerFrame};

use super::{
    ended, greeted, hello, last_words, left, of_call, open, readied, timed_out, withdrawal,
    ClientError, Endpoint, Outcome, WITHDRAW_WRITE,
};

/// One connection to a broker.
pub struct Client {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    /// The broker's `ready` answer to `hello` (read leniently: a client
    /// needs only its type).
    pub ready: Value,
    /// Why the broker is closing the connection, when it said so.
    last_words: Option<String>,
}

impl Client {
    /// Connect to the broker at `endpoint` as `role`, naming the client
    /// `name`, by `deadline` (see [`open`]).
    pub fn connect(
        endpoint: &Endpoint,
        role: Role,
        name: &str,
        deadline: Instant,
    ) -> Result<Client, ClientError> {
        Client::handshake(open(endpoint, deadline)?, endpoint, role, name, deadline)
    }

    /// Greet the broker at `endpoint`, at the other end of `stream` (from
    /// [`open`]), as `role`, naming the client `name`, by `deadline`.
    pub fn handshake(
        stream: UnixStream,
        endpoint: &Endpoint,
        role: Role,
        name: &str,
        deadline: Instant,
    ) -> Result<Client, ClientError> {
        let reader = BufReader::new(stream.try_clone().map_err(ClientError::Io)?);
        let mut client = Client {
            writer: stream,
            reader,
            ready: Value::Null,
            last_words: None,
        };
        client.bound_writes(Some(deadline))?;
        if endpoint.greets() {
            greeted(&client.recv_value(Some(deadline))?)?;
            client.send(&hello(endpoint, role, name))?;
        } else {
            client.send(&hello(endpoint, role, name))?;
            greeted(&client.recv_value(Some(deadline))?)?;
        }
        client.ready = readied(client.recv_value(Some(deadline))?)?;
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
        let _ = self.send(&withdrawal(session, call));
    }

    /// The next frame, waiting at most until `deadline`.
    pub fn recv(&mut self, deadline: Option<Instant>) -> Result<ServerFrame, ClientError> {
        let frame = super::frame(&self.recv_line(deadline)?)?;
        if let Some(why) = last_words(&frame) {
            self.last_words = Some(why);
        }
        Ok(frame)
    }

    /// The next frame as JSON, waiting at most until `deadline`.
    pub fn recv_value(&mut self, deadline: Option<Instant>) -> Result<Value, ClientError> {
        super::value(&self.recv_line(deadline)?)
    }

    fn recv_line(&mut self, deadline: Option<Instant>) -> Result<Vec<u8>, ClientError> {
        let timeout = match deadline {
            None => None,
            Some(deadline) => Some(left(deadline).ok_or(ClientError::TimedOut)?),
        };
        self.reader
            .get_ref()
            .set_read_timeout(timeout)
            .map_err(ClientError::Io)?;
        let mut line = Vec::new();
        match self.reader.read_until(b'\n', &mut line) {
            Ok(0) => Err(ended(&self.last_words)),
            Ok(_) => Ok(line),
            Err(err) if timed_out(&err) => Err(ClientError::TimedOut),
            Err(err) => Err(ClientError::Io(err)),
        }
    }

    /// Send `frames` (the last one the `tool_call` of `session`/`call`) and
    /// wait until `deadline` for its decision, or for a question put to this
    /// connection (see `client::of_call` for the frames skipped meanwhile).
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
            if let Some(outcome) = of_call(self.recv(deadline)?, session, call) {
                return outcome;
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
