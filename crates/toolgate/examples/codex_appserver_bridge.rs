//! A bridge between a client of `codex app-server` and the app-server itself
//! that answers the app-server's approval requests through toolgate.
//!
//! ```sh
//! codex_appserver_bridge [--socket PATH | --remote tls://HOST:PORT --token-file FILE [--ca FILE]
//!                         | --toolgate BIN [--mode MODE]] -- codex app-server
//! ```
//!
//! Every JSON-RPC line passes through unchanged in both directions, except
//! the app-server's approval requests, which the bridge answers itself:
//!
//! - `item/commandExecution/requestApproval` becomes a `tool_call` of tool
//!   `Bash` with the command (an argv list is joined with shell quoting) and
//!   its `cwd`;
//! - `item/fileChange/requestApproval` becomes a `tool_call` of tool
//!   `apply_patch` with the paths the request names (a request that names
//!   none is declined: toolgate cannot judge a change it cannot see).
//!
//! toolgate's `allow` is answered `{"decision":"accept"}`, anything else
//! `{"decision":"decline"}`. toolgate is a running broker (`--socket PATH`
//! or `TOOLGATE_SOCKET`; a remote one with `--remote`, `--token-file` and
//! `--ca`, or `TOOLGATE_REMOTE`, `TOOLGATE_TOKEN_FILE` and `TOOLGATE_CA`),
//! whose approvers may be asked, or else a
//! `toolgate serve --on-ask deny` child: a question nobody can answer is a
//! decline. Anything unexpected (toolgate gone, a line that is not JSON) is
//! a decline too: the bridge fails closed.
#![allow(clippy::print_stderr)] // an example reports on stderr

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

/// Where decisions come from.
enum Toolgate {
    /// A running broker: its socket, or a remote broker.
    Broker(toolgate::transport::client::Endpoint),
    /// A `toolgate serve` child on pipes.
    Child {
        input: std::process::ChildStdin,
        output: BufReader<std::process::ChildStdout>,
    },
}

impl Toolgate {
    /// toolgate's verdict on `call`: true for allow.
    fn allows(&mut self, call: &Value) -> Result<bool, String> {
        let call_id = call["callID"].as_str().unwrap_or_default().to_string();
        match self {
            Toolgate::Broker(broker) => {
                // Only a broker of this user's is obeyed, or a remote one
                // whose certificate is trusted (see toolgate::transport::client::open).
                let stream = toolgate::transport::client::open(
                    broker,
                    std::time::Instant::now() + toolgate::transport::client::CONNECT_WAIT,
                )
                .map_err(|err| err.to_string())?;
                let mut writer = stream.try_clone().map_err(|err| err.to_string())?;
                let mut reader = BufReader::new(stream);
                // With a remote broker, the hello carries the token.
                let hello = toolgate::transport::client::hello(
                    broker,
                    toolgate_protocol::Role::Agent,
                    "codex-bridge",
                );
                writeln!(writer, "{hello}\n{call}").map_err(|err| err.to_string())?;
                read_decision(&mut reader, &call_id, Some(&mut writer), call)
            }
            Toolgate::Child { input, output } => {
                writeln!(input, "{call}").map_err(|err| err.to_string())?;
                read_decision(output, &call_id, None, call)
            }
        }
    }
}

/// Read frames until the decision of `call_id`. A question put to this
/// connection (no approver is connected) is withdrawn: decline.
fn read_decision<R: BufRead>(
    reader: &mut R,
    call_id: &str,
    writer: Option<&mut std::os::unix::net::UnixStream>,
    call: &Value,
) -> Result<bool, String> {
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).map_err(|err| err.to_string())? == 0 {
            return Err("toolgate closed the connection".into());
        }
        let frame: Value = serde_json::from_str(&line).map_err(|err| err.to_string())?;
        if frame["callID"] != call_id {
            continue;
        }
        match frame["type"].as_str() {
            Some("decision") => return Ok(frame["decision"] == "allow"),
            Some("permission_request") => {
                if let Some(writer) = writer {
                    let cancel =
                        json!({"type":"cancel","sessionID":call["sessionID"],"callID":call_id});
                    let _ = writeln!(writer, "{cancel}");
                }
                return Ok(false);
            }
            Some("error") => return Err(frame["message"].to_string()),
            _ => {}
        }
    }
}

/// The `tool_call` for an approval request, or `None` when toolgate could
/// not judge it (declined).
fn tool_call(method: &str, id: &Value, params: &Value) -> Option<Value> {
    let session = params["threadId"].as_str().unwrap_or("codex").to_string();
    let call_id = format!("codex-{}", id.to_string().trim_matches('"'));
    let mut call = match method {
        "item/commandExecution/requestApproval" => {
            let command = match &params["command"] {
                Value::String(command) => command.clone(),
                Value::Array(argv) => argv
                    .iter()
                    .map(|word| quote(word.as_str().unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join(" "),
                _ => return None,
            };
            json!({"type":"tool_call","sessionID":session,"callID":call_id,"tool":"Bash","input":{"command":command}})
        }
        "item/fileChange/requestApproval" => {
            let paths: Vec<Value> = match &params["changes"] {
                Value::Array(changes) => changes
                    .iter()
                    .filter_map(|change| change.get("path").cloned())
                    .collect(),
                Value::Object(changes) => changes.keys().map(|path| json!(path)).collect(),
                _ => Vec::new(),
            };
            let first = paths.first()?.clone();
            json!({"type":"tool_call","sessionID":session,"callID":call_id,"tool":"Write","input":{"file_path":first,"content":""}})
        }
        _ => return None,
    };
    if let Some(cwd) = params["cwd"].as_str() {
        call["cwd"] = json!(cwd);
    }
    Some(call)
}

/// A word quoted for a POSIX shell when it needs it.
fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(split) = args.iter().position(|arg| arg == "--") else {
        eprintln!("usage: codex_appserver_bridge [--socket PATH | --remote tls://HOST:PORT --token-file FILE [--ca FILE] | --toolgate BIN [--mode MODE]] -- CODEX_COMMAND...");
        return std::process::ExitCode::from(2);
    };
    let (own, codex) = (&args[..split], &args[split + 1..]);
    let option = |name: &str| {
        own.iter()
            .position(|arg| arg == name)
            .and_then(|i| own.get(i + 1).cloned())
    };
    let remote = toolgate::transport::client::RemoteSpec {
        remote: option("--remote"),
        token_file: option("--token-file").map(Into::into),
        ca: option("--ca").map(Into::into),
        ..Default::default()
    };
    let socket = option("--socket").map(std::path::PathBuf::from);
    let broker = match toolgate::transport::client::chosen(socket.as_deref(), remote) {
        Ok(broker) => broker,
        Err(err) => {
            eprintln!("codex_appserver_bridge: {err}");
            return std::process::ExitCode::from(2);
        }
    };
    let toolgate = match broker {
        Some(broker) => Toolgate::Broker(broker),
        None => {
            let bin = option("--toolgate").unwrap_or_else(|| "toolgate".into());
            let mut command = Command::new(bin);
            command.args(["serve", "--on-ask", "deny"]);
            if let Some(mode) = option("--mode") {
                command.args(["--mode", &mode]);
            }
            let child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn();
            match child {
                Ok(mut child) => match (child.stdin.take(), child.stdout.take()) {
                    (Some(input), Some(output)) => Toolgate::Child {
                        input,
                        output: BufReader::new(output),
                    },
                    _ => return std::process::ExitCode::from(1),
                },
                Err(err) => {
                    eprintln!("codex_appserver_bridge: cannot start toolgate: {err}");
                    return std::process::ExitCode::from(1);
                }
            }
        }
    };
    let Some((program, rest)) = codex.split_first() else {
        eprintln!("codex_appserver_bridge: no app-server command after --");
        return std::process::ExitCode::from(2);
    };
    let mut server = match Command::new(program)
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(server) => server,
        Err(err) => {
            eprintln!("codex_appserver_bridge: cannot start {program}: {err}");
            return std::process::ExitCode::from(1);
        }
    };
    let (Some(server_in), Some(server_out)) = (server.stdin.take(), server.stdout.take()) else {
        return std::process::ExitCode::from(1);
    };
    let server_in = Arc::new(Mutex::new(server_in));
    // Client → app-server, untouched.
    {
        let server_in = server_in.clone();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines().map_while(Result::ok) {
                let mut sink = server_in.lock().unwrap_or_else(|e| e.into_inner());
                if writeln!(sink, "{line}")
                    .and_then(|()| sink.flush())
                    .is_err()
                {
                    return;
                }
            }
        });
    }
    // App-server → client, approvals answered on the way.
    let mut toolgate = toolgate;
    let stdout = std::io::stdout();
    for line in BufReader::new(server_out).lines().map_while(Result::ok) {
        let message: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        let method = message["method"].as_str().unwrap_or_default();
        if message.get("id").is_some() && method.ends_with("/requestApproval") {
            let call = tool_call(method, &message["id"], &message["params"]);
            let accept = match &call {
                Some(call) => toolgate.allows(call).unwrap_or_else(|err| {
                    eprintln!("codex_appserver_bridge: {err}; declining");
                    false
                }),
                None => false,
            };
            let decision = if accept { "accept" } else { "decline" };
            // One line per answer on stderr, for whoever runs the bridge.
            let judged = call.map_or(Value::Null, |call| call["input"].clone());
            eprintln!("codex_appserver_bridge: {decision} {method} {judged}");
            let reply = json!({"id": message["id"], "result": {"decision": decision}});
            let mut sink = server_in.lock().unwrap_or_else(|e| e.into_inner());
            let _ = writeln!(sink, "{reply}").and_then(|()| sink.flush());
            continue;
        }
        let mut out = stdout.lock();
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
    let _ = server.wait();
    std::process::ExitCode::SUCCESS
}
