//! The MCP protocol as this server speaks it: JSON-RPC 2.0 messages in,
//! replies out, the two eras of MCP (see the module above), and the one
//! tool, `approve`. No I/O: [`super::run`] reads and writes.

use std::future::Future;
use std::pin::Pin;

use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::decide::{Approval, Decide, Started, Verdict};

/// The versions served through the `initialize` handshake, oldest first.
pub const HANDSHAKE_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// The version without a handshake (`server/discover`, per-request `_meta`).
pub const MODERN_VERSION: &str = "2026-07-28";
/// The `_meta` key naming a modern request's protocol version.
const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";

/// JSON-RPC error codes.
pub(super) const PARSE_ERROR: i64 = -32700;
pub(super) const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
/// MCP 2026-07-28: the request's protocol version is not supported.
const UNSUPPORTED_VERSION: i64 = -32022;

/// The MCP server: JSON-RPC messages in, responses out.
pub struct Server<D> {
    decide: D,
    /// The version agreed by `initialize`, once it was answered.
    handshake: Option<String>,
}

/// The reply to one message: `None` for notifications and responses.
pub type Reply = Option<Value>;

/// What one message asks of [`super::run`].
pub enum Handled {
    /// Write this reply, if any.
    Reply(Reply),
    /// A `tools/call` being decided.
    Later(Later),
    /// `notifications/cancelled`: withdraw the call with this request id.
    Cancel(Value),
}

/// A `tools/call` whose decision may wait for a person.
pub struct Later {
    /// The request's id.
    pub id: Value,
    /// Withdraws the call.
    pub withdrawn: CancellationToken,
    /// The reply, once decided.
    pub reply: Pin<Box<dyn Future<Output = Reply> + Send>>,
}

/// The `tools/call` result for `verdict` on a call whose input was `input`.
fn tool_result(input: Map<String, Value>, verdict: Verdict, modern: bool) -> Value {
    // Nobody else can be asked here: an `ask` is a denial.
    let text = match verdict.or_deny() {
        Verdict::Allow => json!({"behavior": "allow", "updatedInput": input}),
        Verdict::Deny(message) | Verdict::Ask(message) => {
            json!({"behavior": "deny", "message": message})
        }
    };
    let mut result =
        json!({"content": [{"type": "text", "text": text.to_string()}], "isError": false});
    if modern {
        result["resultType"] = json!("complete");
    }
    result
}

pub(super) fn error(id: Value, code: i64, message: impl Into<String>) -> Reply {
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
                Ok((input, Started::Now(verdict), _)) => {
                    return Handled::Reply(result(id, tool_result(input, verdict, modern)))
                }
                Ok((input, Started::Later(deciding), withdrawn)) => {
                    let answer_to = id.clone();
                    return Handled::Later(Later {
                        id,
                        withdrawn,
                        reply: Box::pin(async move {
                            let verdict = deciding.await;
                            result(answer_to, tool_result(input, verdict, modern))
                        }),
                    });
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
    #[allow(clippy::type_complexity)]
    fn call(
        &mut self,
        params: &Map<String, Value>,
    ) -> Result<(Map<String, Value>, Started, CancellationToken), String> {
        let name = match params.get("name") {
            Some(Value::String(name)) => name,
            _ => return Err("`tools/call` needs `name` (a string)".into()),
        };
        if name != "approve" {
            return Err(format!("unknown tool `{name}` (this server has `approve`)"));
        }
        let withdrawn = CancellationToken::new();
        let deny = |message: &str| {
            let verdict = Started::Now(Verdict::Deny(message.into()));
            Ok((Map::new(), verdict, CancellationToken::new()))
        };
        match params.get("arguments") {
            Some(Value::Object(arguments)) => match approval(arguments) {
                Ok(approval) => {
                    let started = self.decide.start(&approval, withdrawn.clone());
                    Ok((approval.input, started, withdrawn))
                }
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
        permission_mode: None,
        agent_id: None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)] // tests may panic

    use super::*;

    struct Fixed(Verdict);

    impl Decide for Fixed {
        fn start(&mut self, _approval: &Approval, _withdrawn: CancellationToken) -> Started {
            Started::Now(self.0.clone())
        }

        fn set_session(&mut self, _session: &str) {}
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
            let Handled::Reply(Some(reply)) = server.handle(line.to_string().as_bytes()) else {
                panic!("no reply to {line}");
            };
            assert_eq!(reply["result"]["protocolVersion"], answered, "{asked}");
        }
    }
}
