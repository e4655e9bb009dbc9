//! `toolgate mcp`: an MCP server on stdio whose one tool, `approve`, is
//! Claude Code's permission-prompt tool (`claude -p --permission-prompt-tool
//! mcp__toolgate__approve`).
//!
//! Claude Code calls `approve` with `{tool_name, input, tool_use_id}` for a
//! call that none of its own rules allows, and obeys one text content block
//! holding `{"behavior":"allow","updatedInput":INPUT}` or
//! `{"behavior":"deny","message":…}`. The decision is made by a [`Decide`]:
//! in-process from the policy (as `toolgate hook claude` decides), or by a
//! running broker over its socket, where a human approver may answer.
//!
//! A hand-written JSON-RPC 2.0 server (one JSON object per line), speaking
//! both eras of MCP:
//! - the `initialize` handshake, for protocol versions 2024-11-05,
//!   2025-03-26, 2025-06-18 and 2025-11-25: the client's version is echoed
//!   when it is one of them, else 2025-11-25 is offered; until `initialize`
//!   only `ping` is served;
//! - 2026-07-28, which has no handshake: `server/discover`, then requests
//!   carrying `_meta["io.modelcontextprotocol/protocolVersion"]`; another
//!   version there is answered with error -32022 naming the supported ones.
//!
//! Claude Code 2.1.328 probes `server/discover` at 2026-07-28 first and falls
//! back to `initialize` 2025-11-25 when the server does not know the method;
//! the official Python SDK's client does the same.
//!
//! Fail closed: whatever goes wrong while deciding a well-formed `approve`
//! call (bad arguments, a broker that cannot be reached, a question nobody
//! can answer) is a `deny` naming the reason; JSON-RPC errors are only for
//! messages that are not a valid request. End of input ends the server.

use std::io::{BufRead, Read, Write};

use serde_json::{json, Map, Value};
use toolgate_policy::Mode;

use crate::adapters::hook;
use crate::broker::{Broker, Input};

/// The versions served through the `initialize` handshake, oldest first.
pub const HANDSHAKE_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// The version without a handshake (`server/discover`, per-request `_meta`).
pub const MODERN_VERSION: &str = "2026-07-28";
/// The `_meta` key naming a modern request's protocol version.
const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";

/// JSON-RPC error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
/// MCP 2026-07-28: the request's protocol version is not supported.
const UNSUPPORTED_VERSION: i64 = -32022;

/// One permission question from Claude Code.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    /// Claude Code's tool name (`Bash`, `Write`, `mcp__server__tool`, ...).
    pub tool_name: String,
    /// The tool's input, as the model wrote it.
    pub input: Map<String, Value>,
    /// Claude Code's id of the call, when it sent one.
    pub tool_use_id: Option<String>,
}

/// The answer to an [`Approval`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The call may run with its input unchanged.
    Allow,
    /// The call is refused; the message reaches the model.
    Deny(String),
}

/// Whatever decides approvals: the in-process broker, or a broker over its
/// socket. It must always answer; what it cannot decide it denies.
pub trait Decide {
    /// Decide one call.
    fn decide(&mut self, approval: &Approval) -> Verdict;

    /// Start deciding one call: decided at once, or (when the answer may
    /// take a person's time) a job for another thread, so that the server
    /// goes on reading: pings, other calls, cancellations.
    fn start(&mut self, approval: &Approval) -> Started {
        Started::Now(self.decide(approval))
    }
}

/// A call being decided: see [`Decide::start`].
pub enum Started {
    /// Decided.
    Now(Verdict),
    /// To be decided by `run` on another thread; `cancel` (from any thread)
    /// makes `run` return soon, with a denial.
    Later {
        /// Decides the call; may wait for a person.
        run: Box<dyn FnOnce() -> Verdict + Send>,
        /// Withdraws the call.
        cancel: Box<dyn Fn() + Send>,
    },
}

/// Decides in this process with a broker built from the policy flags, as
/// `toolgate hook claude` does. An `ask` cannot reach a human here: it is a
/// denial saying how to attach one.
pub struct InProcess {
    broker: Broker,
    session: String,
    flag: Option<Mode>,
    default: Mode,
    calls: u64,
}

impl InProcess {
    /// Decide in `session`, in mode `flag` (`--mode`, `TOOLGATE_MODE` or the
    /// policy file's `mode`) or else `default`.
    pub fn new(broker: Broker, session: String, flag: Option<Mode>, default: Mode) -> InProcess {
        InProcess {
            broker,
            session,
            flag,
            default,
            calls: 0,
        }
    }
}

/// What to say when no human can be asked in-process.
pub const NO_HUMAN: &str = "no human can be asked here: `toolgate mcp` decides in-process; to have a person answer, start a broker (`toolgate serve --listen unix`) and an approver (`toolgate approve`), and give `toolgate mcp` `--socket PATH` (or TOOLGATE_SOCKET)";

impl Decide for InProcess {
    fn decide(&mut self, approval: &Approval) -> Verdict {
        self.calls += 1;
        let call = approval
            .tool_use_id
            .clone()
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| format!("mcp-{}", self.calls));
        let mut input = json!({
            "session_id": self.session,
            "tool_name": approval.tool_name,
            "tool_input": approval.input,
            "tool_use_id": call,
        });
        if let Ok(cwd) = std::env::current_dir() {
            input["cwd"] = json!(cwd.to_string_lossy());
        }
        let answer = hook::decide(
            hook::Agent::Claude,
            &input,
            self.flag,
            self.default,
            &mut self.broker,
        );
        let mut reason = match answer.reason.strip_prefix("toolgate hook: ") {
            Some(rest) => format!("toolgate: {rest}"),
            None => answer.reason,
        };
        if let Some(reminder) = &answer.reminder {
            reason = format!("{reason}\n\n{reminder}");
        }
        match answer.decision {
            "allow" => Verdict::Allow,
            "ask" => {
                // The question stays pending in the broker: withdraw it, so
                // the same call can be asked again and nothing waits on it.
                let cancel = toolgate_protocol::Cancel {
                    session_id: self.session.clone(),
                    call_id: call,
                };
                let mut out = Vec::new();
                self.broker.step(
                    Input::Frame {
                        conn: 0,
                        frame: toolgate_protocol::ClientFrame::Cancel(cancel),
                        number: None,
                    },
                    &mut out,
                );
                self.broker.commit();
                Verdict::Deny(format!("{reason}; {NO_HUMAN}"))
            }
            _ => Verdict::Deny(reason),
        }
    }
}

/// Decides with the broker listening on a Unix socket (`toolgate serve
/// --listen unix:PATH`), as a client of it (role `agent`, client `mcp`): the
/// broker's policy, sessions and grants apply, and its approvers answer what
/// asks. Fail closed: no broker there, a connection that breaks, an error
/// from the broker, or a question no approver can see is a denial.
#[cfg(unix)]
pub struct Remote {
    path: std::path::PathBuf,
    session: String,
    calls: u64,
}

#[cfg(unix)]
impl Remote {
    /// Ask the broker at `path`, in `session` (whose mode is the broker's).
    pub fn new(path: std::path::PathBuf, session: String) -> Remote {
        Remote {
            path,
            session,
            calls: 0,
        }
    }

    fn call_id(&mut self, approval: &Approval) -> String {
        self.calls += 1;
        approval
            .tool_use_id
            .clone()
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| format!("mcp-{}-{}", std::process::id(), self.calls))
    }
}

/// The `tool_call` frame asking about `approval` as call `call` of `session`.
#[cfg(unix)]
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

/// How long a withdrawn call's thread waits for the broker to say how it
/// ended before it stops waiting (and denies).
#[cfg(unix)]
const WITHDRAW_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The denial of a call withdrawn before the broker decided it.
#[cfg(unix)]
const WITHDRAWN: &str = "toolgate: the call was withdrawn before the broker decided (the client cancelled it or closed its input)";

/// How long a call withdrawn before it was sent waits for the broker to
/// take it (connected, `ready`): a broker that does is sent the call and
/// then the withdrawal; one that does not is cut off, the call never sent.
#[cfg(unix)]
const TAKE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// A call's connection, as its withdrawal finds it: the thread deciding the
/// call connects, then sends the call, and withdrawing acts on what is done.
#[cfg(unix)]
#[derive(Default)]
struct Link {
    /// The connection, once there is one.
    stream: Option<std::os::unix::net::UnixStream>,
    /// The call was sent on it.
    sent: bool,
    /// The call was withdrawn.
    withdrawn: bool,
    /// Withdrawn, and not sent within [`TAKE_GRACE`]: it never is.
    cut: bool,
}

#[cfg(unix)]
type Shared<T> = std::sync::Arc<std::sync::Mutex<T>>;

#[cfg(unix)]
fn lock_link(link: &std::sync::Mutex<Link>) -> std::sync::MutexGuard<'_, Link> {
    link.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Withdraw the call of `link`. A withdrawal always reaches the broker
/// after the call, so whatever the broker decided before it stands and
/// what it had not decided it denies (and says so): a sent call's
/// connection is half-closed at once; a call not sent yet is sent if the
/// broker takes it within [`TAKE_GRACE`], and then withdrawn, else its
/// connection is cut and the call never sent.
#[cfg(unix)]
fn withdraw(link: &Shared<Link>) {
    let mut guard = lock_link(link);
    guard.withdrawn = true;
    if guard.sent {
        half_close(&guard);
        return;
    }
    drop(guard);
    let link = link.clone();
    std::thread::spawn(move || {
        std::thread::sleep(TAKE_GRACE);
        let mut link = lock_link(&link);
        if !link.sent {
            link.cut = true;
            if let Some(stream) = &link.stream {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
    });
}

/// The withdrawal of a sent call: the connection half-closed, so the broker
/// reads the end of its input after the call; a broker that says nothing
/// within [`WITHDRAW_GRACE`] is cut off, and the call denied.
#[cfg(unix)]
fn half_close(link: &Link) {
    let Some(stream) = &link.stream else {
        return;
    };
    let _ = stream.shutdown(std::net::Shutdown::Write);
    if let Ok(stream) = stream.try_clone() {
        std::thread::spawn(move || {
            std::thread::sleep(WITHDRAW_GRACE);
            let _ = stream.shutdown(std::net::Shutdown::Both);
        });
    }
}

/// Why a call could not be put to the broker at `path`.
#[cfg(unix)]
fn refused(path: &str, err: crate::transport::client::ClientError) -> String {
    match err {
        crate::transport::client::ClientError::TimedOut => format!(
            "toolgate: the broker at {path} did not take the call within {} s (it is stopped or stuck)",
            crate::transport::client::CONNECT_WAIT.as_secs()
        ),
        err => format!("toolgate: {err}"),
    }
}

/// Wait on `client` for the decision of call `call` of `session` (its
/// `tool_call` already sent).
#[cfg(unix)]
fn exchange(
    mut client: crate::transport::client::Client,
    path: &str,
    session: &str,
    call: &str,
) -> Result<Verdict, String> {
    use crate::transport::client::{ClientError, Outcome};
    match client.call(&[], session, call, None) {
        Ok(Outcome::Decided(decision)) if decision.source == toolgate_protocol::Source::Cancel => {
            Ok(Verdict::Deny(WITHDRAWN.to_string()))
        }
        Ok(Outcome::Decided(decision)) => Ok(verdict(
            &serde_json::to_value(&decision).unwrap_or(Value::Null),
        )),
        Ok(Outcome::Asked(request)) => {
            // No approver is connected: the question came back to us, and
            // nobody here can answer it.
            let why = request
                .metadata
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("the policy asks a person first")
                .to_string();
            client.withdraw(session, call);
            Err(format!(
                "toolgate: {why}; no approver is connected to the broker at {path} (start one with `toolgate approve --socket {path}`)"
            ))
        }
        Err(ClientError::Protocol(message)) => {
            Err(format!("toolgate: the broker refused the call: {message}"))
        }
        Err(ClientError::Closed) => Err(format!(
            "toolgate: the connection to the broker at {path} ended before a decision (the call was withdrawn, or the broker stopped)"
        )),
        Err(err) => Err(format!("toolgate: {err}")),
    }
}

/// The verdict a broker's `decision` frame carries: its reason, the
/// approver's message and the mode's reminder make the denial's message.
#[cfg(unix)]
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

#[cfg(unix)]
impl Decide for Remote {
    fn decide(&mut self, approval: &Approval) -> Verdict {
        match self.start(approval) {
            Started::Now(verdict) => verdict,
            Started::Later { run, .. } => run(),
        }
    }

    /// The call is decided on a thread of its own from the start: a broker
    /// that does not answer (stopped, stuck) holds that thread, never the
    /// server, which goes on answering pings and reading its input. Taking
    /// the call (connecting, `ready`, the call written) is bounded by
    /// [`crate::transport::client::CONNECT_WAIT`]; the decision may take a person's
    /// time, until the call is withdrawn.
    fn start(&mut self, approval: &Approval) -> Started {
        let call = self.call_id(approval);
        let frame = call_frame(&self.session, &call, approval);
        let link: Shared<Link> = Default::default();
        let cancel: Box<dyn Fn() + Send> = {
            let link = link.clone();
            Box::new(move || withdraw(&link))
        };
        let (path, session) = (self.path.clone(), self.session.clone());
        let run = move || -> Verdict {
            let shown = path.display().to_string();
            let refused = |err| refused(&shown, err);
            let deadline = std::time::Instant::now() + crate::transport::client::CONNECT_WAIT;
            let stream = match crate::transport::client::open(&path, deadline) {
                Ok(stream) => stream,
                Err(err) => return Verdict::Deny(refused(err)),
            };
            {
                let mut link = lock_link(&link);
                if link.cut {
                    return Verdict::Deny(WITHDRAWN.to_string());
                }
                link.stream = stream.try_clone().ok();
            }
            let mut client = match crate::transport::client::Client::handshake(
                stream,
                toolgate_protocol::Role::Agent,
                "mcp",
                deadline,
            ) {
                Ok(client) => client,
                Err(_) if lock_link(&link).cut => return Verdict::Deny(WITHDRAWN.to_string()),
                Err(err) => return Verdict::Deny(refused(err)),
            };
            {
                // Sent under the lock, so that a withdrawal finds the call
                // either sent or not (see `withdraw`).
                let mut link = lock_link(&link);
                if link.cut {
                    return Verdict::Deny(WITHDRAWN.to_string());
                }
                if let Err(err) = client.send(&frame) {
                    return Verdict::Deny(match err {
                        crate::transport::client::ClientError::TimedOut => refused(err),
                        err => format!(
                            "toolgate: the connection to the broker at {shown} broke: {err}"
                        ),
                    });
                }
                link.sent = true;
                if link.withdrawn {
                    half_close(&link);
                }
            }
            match exchange(client, &shown, &session, &call) {
                Ok(verdict) => verdict,
                Err(message) => Verdict::Deny(message),
            }
        };
        Started::Later {
            run: Box::new(run),
            cancel,
        }
    }
}

/// The MCP server: JSON-RPC messages in, responses out.
pub struct Server<D> {
    decide: D,
    /// The version agreed by `initialize`, once it was answered.
    handshake: Option<String>,
}

/// The reply to one message: `None` for notifications and responses.
type Reply = Option<Value>;

/// What one message asks of [`run`].
pub enum Handled {
    /// Write this reply, if any.
    Reply(Reply),
    /// A `tools/call` being decided on another thread.
    Later(Later),
    /// `notifications/cancelled`: withdraw the call with this request id.
    Cancel(Value),
}

/// A `tools/call` whose decision may wait for a person.
pub struct Later {
    id: Value,
    modern: bool,
    input: Map<String, Value>,
    run: Box<dyn FnOnce() -> Verdict + Send>,
    cancel: Box<dyn Fn() + Send>,
}

/// The `tools/call` result for `verdict` on a call whose input was `input`.
fn tool_result(input: Map<String, Value>, verdict: Verdict, modern: bool) -> Value {
    let text = match verdict {
        Verdict::Allow => json!({"behavior": "allow", "updatedInput": input}),
        Verdict::Deny(message) => json!({"behavior": "deny", "message": message}),
    };
    let mut result =
        json!({"content": [{"type": "text", "text": text.to_string()}], "isError": false});
    if modern {
        result["resultType"] = json!("complete");
    }
    result
}

fn error(id: Value, code: i64, message: impl Into<String>) -> Reply {
    Some(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}}))
}

fn result(id: Value, result: Value) -> Reply {
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// The `approve` tool, as `tools/list` describes it.
pub fn approve_tool() -> Value {
    json!({
        "name": "approve",
        "title": "toolgate permission prompt",
        "description": "Decide whether a tool call may run, by toolgate's policy (and a human approver when toolgate runs a shared broker). Claude Code calls this as its --permission-prompt-tool. Answers one text block: {\"behavior\":\"allow\",\"updatedInput\":...} or {\"behavior\":\"deny\",\"message\":...}.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "tool_name": {"type": "string", "description": "The tool the agent wants to call (Bash, Write, Edit, ...)."},
                "input": {"type": "object", "description": "The tool's input."},
                "tool_use_id": {"type": "string", "description": "The agent's id of the call."}
            },
            "required": ["tool_name", "input"]
        }
    })
}

fn server_info() -> Value {
    json!({"name": "toolgate", "version": env!("CARGO_PKG_VERSION")})
}

impl<D: Decide> Server<D> {
    /// A server deciding with `decide`.
    pub fn new(decide: D) -> Server<D> {
        Server {
            decide,
            handshake: None,
        }
    }

    /// The reply to one line of input, waiting for a decision that takes
    /// time.
    pub fn handle_line(&mut self, line: &[u8]) -> Reply {
        match self.handle(line) {
            Handled::Reply(reply) => reply,
            Handled::Later(later) => {
                let verdict = (later.run)();
                result(later.id, tool_result(later.input, verdict, later.modern))
            }
            Handled::Cancel(_) => None,
        }
    }

    /// What one line of input asks for.
    pub fn handle(&mut self, line: &[u8]) -> Handled {
        Handled::Reply(match self.parse(line) {
            Ok((id, method, params)) => match id {
                Some(id) => return self.request(id, &method, &params),
                None if method == "notifications/cancelled" => match params.get("requestId") {
                    Some(id) => return Handled::Cancel(id.clone()),
                    None => None,
                },
                // Other notifications (`notifications/initialized`, ...)
                // need no answer; none changes what this server does.
                None => None,
            },
            Err(reply) => reply,
        })
    }

    /// A message's id, method and params; `Err` is the reply to a message
    /// that is not a request or notification (`None`: a response).
    #[allow(clippy::type_complexity)]
    fn parse(&mut self, line: &[u8]) -> Result<(Option<Value>, String, Map<String, Value>), Reply> {
        let message: Value = match serde_json::from_slice(line) {
            Ok(message) => message,
            Err(err) => return Err(error(Value::Null, PARSE_ERROR, format!("not JSON: {err}"))),
        };
        let Value::Object(message) = message else {
            return Err(error(
                Value::Null,
                INVALID_REQUEST,
                "a message must be one JSON object (batches are not supported)",
            ));
        };
        let id = message.get("id").cloned();
        let answer_to = id.clone().unwrap_or(Value::Null);
        if let Some(id) = &id {
            if !(id.is_string() || id.is_i64() || id.is_u64()) {
                return Err(error(
                    Value::Null,
                    INVALID_REQUEST,
                    "`id` must be a string or an integer",
                ));
            }
        }
        if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(error(
                answer_to,
                INVALID_REQUEST,
                "`jsonrpc` must be \"2.0\"",
            ));
        }
        let method = match message.get("method") {
            Some(Value::String(method)) => method.as_str(),
            // A response to a request of ours: we send none.
            None if id.is_some()
                && (message.contains_key("result") || message.contains_key("error")) =>
            {
                return Err(None)
            }
            _ => {
                return Err(error(
                    answer_to,
                    INVALID_REQUEST,
                    "`method` must be a string",
                ))
            }
        };
        let params = match message.get("params") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(params)) => params.clone(),
            Some(_) => {
                return Err(error(
                    answer_to,
                    INVALID_PARAMS,
                    "`params` must be an object",
                ))
            }
        };
        Ok((id, method.to_string(), params))
    }

    fn request(&mut self, id: Value, method: &str, params: &Map<String, Value>) -> Handled {
        let requested = params
            .get("_meta")
            .and_then(|meta| meta.get(VERSION_KEY))
            .map(|version| match version {
                Value::String(version) => version.clone(),
                other => other.to_string(),
            });
        // A modern request names its version; one we serve is answered in
        // the modern form (`resultType`), another is refused with the list.
        let modern = match (&requested, &self.handshake) {
            (Some(version), None) if version == MODERN_VERSION => true,
            (Some(version), None) => {
                return Handled::Reply(Some(json!({"jsonrpc": "2.0", "id": id, "error": {
                    "code": UNSUPPORTED_VERSION,
                    "message": format!("protocol version {version:?} is not supported (supported: {MODERN_VERSION}, or {} through `initialize`)", HANDSHAKE_VERSIONS.join(", ")),
                    "data": {"supported": [MODERN_VERSION], "requested": version},
                }})))
            }
            _ => false,
        };
        let answer = match method {
            "ping" => json!({}),
            "initialize" => return Handled::Reply(self.initialize(id, params)),
            "server/discover" => {
                if self.handshake.is_some() {
                    return Handled::Reply(error(
                        id,
                        INVALID_REQUEST,
                        "the connection was initialized: `server/discover` is for 2026-07-28",
                    ));
                }
                let mut versions: Vec<&str> = HANDSHAKE_VERSIONS.to_vec();
                versions.push(MODERN_VERSION);
                json!({
                    "supportedVersions": versions,
                    "capabilities": {"tools": {}},
                    "ttlMs": 0,
                    "cacheScope": "private",
                    "_meta": {"io.modelcontextprotocol/serverInfo": server_info()},
                    "resultType": "complete",
                })
            }
            "tools/list" | "tools/call" if !modern && self.handshake.is_none() => {
                return Handled::Reply(error(
                    id,
                    INVALID_REQUEST,
                    "the server is not initialized: send `initialize` first (or name protocol version 2026-07-28 in `_meta`)",
                ))
            }
            "tools/list" => {
                let mut list = json!({"tools": [approve_tool()]});
                if modern {
                    list["ttlMs"] = json!(0);
                    list["cacheScope"] = json!("private");
                }
                list
            }
            "tools/call" => match self.call(params) {
                Ok((input, Started::Now(verdict))) => {
                    return Handled::Reply(result(id, tool_result(input, verdict, modern)))
                }
                Ok((input, Started::Later { run, cancel })) => {
                    return Handled::Later(Later {
                        id,
                        modern,
                        input,
                        run,
                        cancel,
                    })
                }
                Err(message) => return Handled::Reply(error(id, INVALID_PARAMS, message)),
            },
            _ => return Handled::Reply(error(id, METHOD_NOT_FOUND, format!("unknown method `{method}`"))),
        };
        let mut answer = answer;
        if modern && method != "server/discover" {
            answer["resultType"] = json!("complete");
        }
        Handled::Reply(result(id, answer))
    }

    fn initialize(&mut self, id: Value, params: &Map<String, Value>) -> Reply {
        if self.handshake.is_some() {
            return error(id, INVALID_REQUEST, "the server is already initialized");
        }
        let Some(asked) = params.get("protocolVersion").and_then(Value::as_str) else {
            return error(
                id,
                INVALID_PARAMS,
                "`initialize` needs `protocolVersion` (a string)",
            );
        };
        // The client's version when we speak it, else the newest we do.
        let version = HANDSHAKE_VERSIONS
            .iter()
            .find(|version| **version == asked)
            .unwrap_or(&HANDSHAKE_VERSIONS[HANDSHAKE_VERSIONS.len() - 1]);
        self.handshake = Some(version.to_string());
        result(
            id,
            json!({
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": false}},
                "serverInfo": server_info(),
                "instructions": "toolgate's permission-prompt tool: pass `--permission-prompt-tool mcp__toolgate__approve` to Claude Code.",
            }),
        )
    }

    /// `tools/call`: the call's input and its decision, started; `Err` for
    /// a call that is not one of the tool (a protocol error). Arguments the
    /// tool cannot read are a denial.
    fn call(
        &mut self,
        params: &Map<String, Value>,
    ) -> Result<(Map<String, Value>, Started), String> {
        let name = match params.get("name") {
            Some(Value::String(name)) => name,
            _ => return Err("`tools/call` needs `name` (a string)".into()),
        };
        if name != "approve" {
            return Err(format!("unknown tool `{name}` (this server has `approve`)"));
        }
        let deny = |message: &str| Ok((Map::new(), Started::Now(Verdict::Deny(message.into()))));
        match params.get("arguments") {
            Some(Value::Object(arguments)) => match approval(arguments) {
                Ok(approval) => Ok((approval.input.clone(), self.decide.start(&approval))),
                Err(message) => deny(&message),
            },
            None | Some(Value::Null) => deny("toolgate: `approve` was called without arguments"),
            Some(_) => deny("toolgate: the `approve` arguments are not a JSON object"),
        }
    }
}

/// The approval the arguments of `approve` ask for; `Err` says what is wrong.
fn approval(arguments: &Map<String, Value>) -> Result<Approval, String> {
    let tool_name = match arguments.get("tool_name") {
        Some(Value::String(name)) if !name.is_empty() => name.clone(),
        _ => return Err("toolgate: `approve` needs `tool_name` (a non-empty string)".into()),
    };
    let input = match arguments.get("input") {
        Some(Value::Object(input)) => input.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err("toolgate: the `input` of `approve` is not a JSON object".into()),
    };
    let tool_use_id = match arguments.get("tool_use_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => Some(id.clone()),
        Some(_) => return Err("toolgate: `tool_use_id` of `approve` is not a string".into()),
    };
    Ok(Approval {
        tool_name,
        input,
        tool_use_id,
    })
}

/// The calls being decided on other threads: how to withdraw each, by
/// request id (as JSON text).
type Waiting =
    std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Box<dyn Fn() + Send>>>>;

/// Write one reply line.
fn send<W: Write>(output: &std::sync::Mutex<W>, reply: &Value) -> std::io::Result<()> {
    let mut output = output
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    writeln!(output, "{reply}")?;
    output.flush()
}

/// Serve MCP on `input`/`output` until end of input. Lines longer than
/// `limit` bytes are skipped without being buffered, answered with a parse
/// error. A call whose decision may take a person's time is decided on a
/// thread of its own, and answered when decided, unless the client
/// cancelled it first (`notifications/cancelled`: the call is withdrawn and
/// gets no reply). At end of input the calls still waiting are withdrawn
/// (a call the broker decided before the withdrawal reached it keeps that
/// decision; the others are denied), each answered, and then it returns.
pub fn run<R: BufRead, W: Write + Send + 'static, D: Decide>(
    mut input: R,
    output: W,
    server: &mut Server<D>,
    limit: usize,
) -> std::io::Result<()> {
    let output = std::sync::Arc::new(std::sync::Mutex::new(output));
    let waiting: Waiting = Default::default();
    let mut threads: Vec<std::thread::JoinHandle<()>> = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut input)
            .take(limit as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if read == 0 {
            // The client is gone: withdraw what still waits (each thread
            // then answers its denial), and end when all have answered.
            for cancel in waiting
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .values()
            {
                cancel();
            }
            for thread in threads {
                let _ = thread.join();
            }
            return Ok(());
        }
        let handled = if line.len() > limit && line.last() != Some(&b'\n') {
            // Skip the rest of the line.
            loop {
                let buffer = input.fill_buf()?;
                if buffer.is_empty() {
                    break;
                }
                match buffer.iter().position(|byte| *byte == b'\n') {
                    Some(at) => {
                        input.consume(at + 1);
                        break;
                    }
                    None => {
                        let length = buffer.len();
                        input.consume(length);
                    }
                }
            }
            Handled::Reply(error(
                Value::Null,
                PARSE_ERROR,
                format!("the message is longer than {limit} bytes"),
            ))
        } else if line.iter().all(u8::is_ascii_whitespace) {
            Handled::Reply(None)
        } else {
            server.handle(&line)
        };
        match handled {
            Handled::Reply(None) => {}
            Handled::Reply(Some(reply)) => send(&output, &reply)?,
            Handled::Cancel(id) => {
                let cancel = waiting
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .remove(&id.to_string());
                if let Some(cancel) = cancel {
                    cancel();
                }
            }
            Handled::Later(later) => {
                let key = later.id.to_string();
                let mut pending = waiting
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                if pending.contains_key(&key) {
                    drop(pending);
                    (later.cancel)();
                    let reply = error(
                        later.id,
                        INVALID_REQUEST,
                        "a request with this id is still being answered",
                    );
                    if let Some(reply) = reply {
                        send(&output, &reply)?;
                    }
                    continue;
                }
                pending.insert(key.clone(), later.cancel);
                drop(pending);
                let (output, waiting) = (output.clone(), waiting.clone());
                let (id, input, modern, run) = (later.id, later.input, later.modern, later.run);
                threads.retain(|thread| !thread.is_finished());
                threads.push(std::thread::spawn(move || {
                    let verdict = run();
                    let answered = waiting
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .remove(&key)
                        .is_some();
                    // A cancelled call gets no reply.
                    if answered {
                        if let Some(reply) = result(id, tool_result(input, verdict, modern)) {
                            let _ = send(&output, &reply);
                        }
                    }
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic

    use super::*;

    struct Fixed(Verdict);

    impl Decide for Fixed {
        fn decide(&mut self, _approval: &Approval) -> Verdict {
            self.0.clone()
        }
    }

    #[test]
    fn handshake_versions() {
        for (asked, answered) in [
            ("2024-11-05", "2024-11-05"),
            ("2025-03-26", "2025-03-26"),
            ("2025-06-18", "2025-06-18"),
            ("2025-11-25", "2025-11-25"),
            ("2026-07-28", "2025-11-25"),
            ("1999-01-01", "2025-11-25"),
        ] {
            let mut server = Server::new(Fixed(Verdict::Allow));
            let line = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
            let reply = server.handle_line(line.to_string().as_bytes()).unwrap();
            assert_eq!(reply["result"]["protocolVersion"], answered, "{asked}");
        }
    }
}
