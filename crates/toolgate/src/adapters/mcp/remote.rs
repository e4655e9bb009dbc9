//! Deciding with the broker listening on a Unix socket (`toolgate serve
//! --listen unix:PATH`) or a remote one (`--listen tls:HOST:PORT`): each
//! call is a future on the server's runtime, on a connection of its own, so
//! a call a person takes long over, or a broker that is stopped, holds
//! nothing but that future.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use toolgate_protocol::{Role, Source};

use super::decide::{Approval, Decide, Started, Verdict};
use crate::adapters::bind::Binding;
use crate::transport::client::{self, ClientError, Connection, Endpoint, Outcome, CONNECT_WAIT};

/// Decides with the broker at an [`Endpoint`], as a client of it
/// (role `agent`, client `mcp`): the broker's policy, sessions and grants
/// apply, and its approvers answer what asks. Fail closed: no broker there,
/// a connection that breaks or an error from the broker is a denial; a
/// question no approver can see is withdrawn and [`Verdict::Ask`].
pub struct Remote {
    endpoint: Endpoint,
    session: String,
    binding: Binding,
    calls: u64,
    client: &'static str,
}

impl Remote {
    /// Ask the broker at `endpoint`, in `session` (whose mode is the
    /// broker's), bound as `binding` says before each call.
    pub fn new(endpoint: Endpoint, session: String, binding: Binding) -> Remote {
        Remote {
            endpoint,
            session,
            binding,
            calls: 0,
            client: "mcp",
        }
    }

    /// The client name given to the broker (its `hello`) and in call ids
    /// (`mcp` unless said otherwise).
    pub fn client(mut self, client: &'static str) -> Remote {
        self.client = client;
        self
    }
}

impl Decide for Remote {
    /// The call is put to the broker by a future of its own. Taking the
    /// call (connecting, `ready`, the call written) is bounded by
    /// [`CONNECT_WAIT`]; the decision may take a person's time, until the
    /// call is withdrawn.
    fn start(&mut self, approval: &Approval, withdrawn: CancellationToken) -> Started {
        self.calls += 1;
        let call = approval
            .tool_use_id
            .clone()
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| format!("{}-{}-{}", self.client, std::process::id(), self.calls));
        let mut frames = Vec::new();
        // The broker's mode holds, but an agent that asked to be read-only
        // has its session started so: the strictest mode, never looser
        // than whatever the broker would have chosen.
        let mode = approval
            .permission_mode
            .as_deref()
            .filter(|mode| *mode == "readonly");
        if !self.binding.is_empty() || mode.is_some() {
            frames.push(self.binding.start_json(&self.session, mode));
        }
        // A sub-agent's call runs in its own session under the agent's,
        // joined if an earlier call started it (as a hook's does).
        let session = match &approval.agent_id {
            Some(agent) => {
                let child = crate::adapters::hook::child_session(&self.session, agent);
                frames.push(json!({"type": "session_start", "sessionID": child, "parentID": self.session, "join": true}));
                child
            }
            None => self.session.clone(),
        };
        frames.push(call_frame(&session, &call, approval));
        let asking = Asking {
            client: self.client,
            frames,
            endpoint: self.endpoint.clone(),
            session,
            call,
        };
        Started::Later(Box::pin(async move {
            asking.ask(withdrawn).await.unwrap_or_else(Verdict::Deny)
        }))
    }

    fn set_session(&mut self, session: &str) {
        session.clone_into(&mut self.session);
    }
}

/// The `tool_call` frame asking about `approval` as call `call` of `session`.
fn call_frame(session: &str, call: &str, approval: &Approval) -> Value {
    let mut frame = json!({
        "type": "tool_call",
        "sessionID": session,
        "callID": call,
        "tool": approval.tool_name,
        "input": approval.input,
    });
    if let Ok(cwd) = std::env::current_dir() {
        frame["cwd"] = json!(cwd.to_string_lossy());
    }
    frame
}

/// How long a withdrawn call waits for the broker to say how it ended
/// before it stops waiting (and denies).
const WITHDRAW_GRACE: Duration = Duration::from_secs(5);

/// How long a call withdrawn before it was sent waits for the broker to
/// take it (connected, `ready`): a broker that does is sent the call and
/// then the withdrawal; one that does not is cut off, the call never sent.
const TAKE_GRACE: Duration = Duration::from_secs(1);

/// The denial of a call withdrawn before the broker decided it.
const WITHDRAWN: &str = "toolgate: the call was withdrawn before the broker decided (the client cancelled it or closed its input)";

/// One call put to the broker.
struct Asking {
    client: &'static str,
    endpoint: Endpoint,
    session: String,
    call: String,
    /// The binding's `session_start`, if any, and the `tool_call`.
    frames: Vec<Value>,
}

impl Asking {
    /// Put the call to the broker and wait for its decision; `Err` is the
    /// denial's message. A withdrawal always reaches the broker after the
    /// call, so whatever the broker decided before it stands and what it
    /// had not decided it denies (and says so): a sent call's connection is
    /// half-closed at once; a call not sent yet is sent if the broker takes
    /// it within [`TAKE_GRACE`], and then withdrawn, else its connection is
    /// dropped and the call never sent.
    async fn ask(&self, withdrawn: CancellationToken) -> Result<Verdict, String> {
        let taking = self.take();
        tokio::pin!(taking);
        let (mut connection, early) = tokio::select! {
            taken = &mut taking => (taken?, false),
            () = withdrawn.cancelled() => match tokio::time::timeout(TAKE_GRACE, &mut taking).await {
                Ok(taken) => (taken?, true),
                Err(_) => return Ok(Verdict::Deny(WITHDRAWN.to_string())),
            },
        };
        let deciding = connection.incoming.outcome(&self.session, &self.call);
        tokio::pin!(deciding);
        let decided = if early {
            None
        } else {
            tokio::select! {
                decided = &mut deciding => Some(decided),
                () = withdrawn.cancelled() => None,
            }
        };
        let decided = match decided {
            Some(decided) => decided,
            None => {
                connection.outgoing.close().await;
                match tokio::time::timeout(WITHDRAW_GRACE, &mut deciding).await {
                    Ok(decided) => decided,
                    Err(_) => return Ok(Verdict::Deny(WITHDRAWN.to_string())),
                }
            }
        };
        let shown = self.endpoint.label();
        match decided {
            Ok(Outcome::Decided(decision)) if decision.source == Source::Cancel => {
                Ok(Verdict::Deny(WITHDRAWN.to_string()))
            }
            Ok(Outcome::Decided(decision)) => Ok(verdict(
                &serde_json::to_value(&decision).unwrap_or(Value::Null),
            )),
            Ok(Outcome::Asked(request)) => {
                // No approver is connected: the question came back to us,
                // and nobody here can answer it.
                let why = request
                    .metadata
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("the policy asks a person first")
                    .to_string();
                connection
                    .outgoing
                    .withdraw(&self.session, &self.call)
                    .await;
                let flag = match &self.endpoint {
                    Endpoint::Socket(_) => "--socket",
                    #[cfg(feature = "fleet")]
                    Endpoint::Remote(_) => "--remote",
                };
                Ok(Verdict::Ask(format!(
                    "toolgate: {why}; no approver is connected to the broker at {shown} (start one with `toolgate approve {flag} {shown}`)"
                )))
            }
            Err(ClientError::Protocol(message)) => {
                Err(format!("toolgate: the broker refused the call: {message}"))
            }
            Err(ClientError::Closed) => Err(format!(
                "toolgate: the connection to the broker at {shown} ended before a decision (the call was withdrawn, or the broker stopped)"
            )),
            Err(err) => Err(format!("toolgate: {err}")),
        }
    }

    /// Connect, be greeted and send the call, within [`CONNECT_WAIT`].
    async fn take(&self) -> Result<Connection, String> {
        let deadline = Instant::now() + CONNECT_WAIT;
        let shown = self.endpoint.label();
        let mut connection = Connection::open(&self.endpoint, Role::Agent, self.client, deadline)
            .await
            .map_err(|err| refused(&shown, err))?;
        let sending = async {
            for frame in &self.frames {
                connection.outgoing.send(frame).await?;
            }
            Ok(())
        };
        match client::within(deadline, sending).await {
            Ok(()) => Ok(connection),
            Err(err @ ClientError::TimedOut) => Err(refused(&shown, err)),
            Err(err) => Err(format!(
                "toolgate: the connection to the broker at {shown} broke: {err}"
            )),
        }
    }
}

/// Why a call could not be put to the broker at `path`.
fn refused(path: &impl std::fmt::Display, err: ClientError) -> String {
    match err {
        ClientError::TimedOut => format!(
            "toolgate: the broker at {path} did not take the call within {} s (it is stopped or stuck)",
            CONNECT_WAIT.as_secs()
        ),
        err => format!("toolgate: {err}"),
    }
}

/// The verdict a broker's `decision` frame carries: its reason, the
/// approver's message and the mode's reminder make the denial's message.
fn verdict(decision: &Value) -> Verdict {
    let text = |key: &str| decision.get(key).and_then(Value::as_str);
    if text("decision") == Some("allow") {
        return Verdict::Allow;
    }
    let mut message = format!("toolgate: {}", text("reason").unwrap_or("denied"));
    if let Some(said) = text("message") {
        message = format!("{message}: {said}");
    }
    if let Some(reminder) = text("reminder") {
        message = format!("{message}\n\n{reminder}");
    }
    Verdict::Deny(message)
}
