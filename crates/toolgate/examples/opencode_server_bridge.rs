//! A bridge that answers a running OpenCode server's permission questions
//! through toolgate.
//!
//! ```sh
//! opencode_server_bridge --url http://127.0.0.1:4096 [--directory DIR]
//!     [--socket PATH | --remote tls://HOST:PORT --token-file FILE [--ca FILE]
//!      | --toolgate BIN [--mode MODE]]
//! ```
//!
//! It reads the server's event stream (`GET /event`, server-sent events)
//! and, for each `permission.asked` (OpenCode 1.x) or `permission.updated`
//! (0.x), judges the call the question is about:
//!
//! - OpenCode's `patterns` for a shell command name its simple commands
//!   without their redirections (`echo x > f` asks about `echo x`), so the
//!   bridge judges the real call: it reads the message the question points
//!   at (`GET /session/:id/message/:messageID`) and takes the tool part with
//!   the question's `callID`: its tool name and its whole input become a
//!   toolgate `tool_call` (the call id is the permission id). A question
//!   whose call cannot be read is rejected: toolgate cannot judge what it
//!   cannot see.
//! - toolgate's `allow` is answered `once`, never `always`, so that OpenCode
//!   keeps asking and toolgate judges every call (its own grants apply);
//!   anything else is `reject`, with toolgate's reason (and the plan-mode
//!   reminder) as the message the model receives.
//! - The answer goes to `POST /permission/:id/reply` (`{"reply", "message"}`),
//!   or, when the server does not know that route (404), to the 0.x route
//!   `POST /session/:id/permissions/:id` (`{"response"}`).
//! - `permission.replied` for a question the bridge is still judging (the
//!   user answered in OpenCode's own interface): the call is withdrawn
//!   from toolgate and not answered again.
//!
//! toolgate is a running broker (`--socket PATH` or `TOOLGATE_SOCKET`; a
//! remote one with `--remote`, `--token-file` and `--ca`, or
//! `TOOLGATE_REMOTE`, `TOOLGATE_TOKEN_FILE` and `TOOLGATE_CA`;
//! whose approvers may be asked; a question that comes back because no
//! approver is connected is withdrawn and rejected) or a `toolgate serve
//! --on-ask deny` child. Each question is judged on its own thread, so one
//! waiting for a person does not hold the next. `OPENCODE_SERVER_PASSWORD`
//! is sent as HTTP basic auth (user `opencode`). When the event stream
//! ends, the bridge waits for the questions it is judging and exits 0: run
//! it under a supervisor to reconnect.
#![allow(clippy::print_stderr)] // an example reports on stderr

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

/// The server: where it is and how to authenticate.
#[derive(Clone)]
struct Server {
    host: String,
    authorization: Option<String>,
    directory: Option<String>,
}

/// An HTTP response: status and body.
struct Response {
    status: u16,
    body: Vec<u8>,
}

impl Server {
    fn from_url(url: &str, directory: Option<String>) -> Result<Server, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{url}: only http:// URLs are supported"))?;
        let host = rest.trim_end_matches('/').to_string();
        if host.is_empty() || host.contains('/') {
            return Err(format!(
                "{url}: give the server's address, as http://HOST:PORT"
            ));
        }
        let authorization = std::env::var("OPENCODE_SERVER_PASSWORD")
            .ok()
            .filter(|password| !password.is_empty())
            .map(|password| {
                format!(
                    "Basic {}",
                    base64(format!("opencode:{password}").as_bytes())
                )
            });
        Ok(Server {
            host,
            authorization,
            directory,
        })
    }

    /// `path` with the `directory` query when one was given.
    fn target(&self, path: &str) -> String {
        match &self.directory {
            Some(dir) => format!("{path}?directory={}", percent(dir)),
            None => path.to_string(),
        }
    }

    /// Send a request; the connection to read the response from.
    fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        stream: bool,
    ) -> Result<BufReader<TcpStream>, String> {
        let mut socket = TcpStream::connect(&self.host)
            .map_err(|err| format!("cannot reach the OpenCode server at {}: {err}", self.host))?;
        let mut head = format!(
            "{method} {} HTTP/1.1\r\nHost: {}\r\n",
            self.target(path),
            self.host
        );
        if let Some(auth) = &self.authorization {
            head.push_str(&format!("Authorization: {auth}\r\n"));
        }
        if stream {
            head.push_str("Accept: text/event-stream\r\n");
        } else {
            head.push_str("Accept: application/json\r\nConnection: close\r\n");
        }
        let body = body.map(Value::to_string).unwrap_or_default();
        if method == "POST" {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        head.push_str(&body);
        socket
            .write_all(head.as_bytes())
            .map_err(|err| err.to_string())?;
        Ok(BufReader::new(socket))
    }

    /// A whole request and response.
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Response, String> {
        let mut reader = self.send(method, path, body, false)?;
        let (status, chunked, length) = read_head(&mut reader)?;
        let mut body = Vec::new();
        if chunked {
            let mut chunks = Chunked::new(reader);
            chunks
                .read_to_end(&mut body)
                .map_err(|err| err.to_string())?;
        } else if let Some(length) = length {
            body.resize(length, 0);
            reader
                .read_exact(&mut body)
                .map_err(|err| err.to_string())?;
        } else {
            reader
                .read_to_end(&mut body)
                .map_err(|err| err.to_string())?;
        }
        Ok(Response { status, body })
    }
}

/// Read a response's status line and headers: (status, chunked, length).
fn read_head<R: BufRead>(reader: &mut R) -> Result<(u16, bool, Option<usize>), String> {
    let mut line = String::new();
    reader.read_line(&mut line).map_err(|err| err.to_string())?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not an HTTP response: {line:?}"))?;
    let (mut chunked, mut length) = (false, None);
    loop {
        line.clear();
        if reader.read_line(&mut line).map_err(|err| err.to_string())? == 0 {
            return Err("the response ended in its headers".into());
        }
        let header = line.trim_end();
        if header.is_empty() {
            return Ok((status, chunked, length));
        }
        if let Some((name, value)) = header.split_once(':') {
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
                chunked = true;
            } else if name == "content-length" {
                length = value.parse().ok();
            }
        }
    }
}

/// A chunked body, read as a stream.
struct Chunked<R> {
    inner: R,
    left: usize,
    done: bool,
}

impl<R: BufRead> Chunked<R> {
    fn new(inner: R) -> Chunked<R> {
        Chunked {
            inner,
            left: 0,
            done: false,
        }
    }
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        if self.left == 0 {
            let mut size = String::new();
            if self.inner.read_line(&mut size)? == 0 {
                self.done = true;
                return Ok(0);
            }
            if size.trim().is_empty() {
                // The CRLF that ends the previous chunk.
                size.clear();
                if self.inner.read_line(&mut size)? == 0 {
                    self.done = true;
                    return Ok(0);
                }
            }
            let hex = size.trim().split(';').next().unwrap_or("");
            self.left = usize::from_str_radix(hex, 16)
                .map_err(|_| std::io::Error::other(format!("bad chunk size {hex:?}")))?;
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let want = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            self.done = true;
        }
        self.left -= n;
        Ok(n)
    }
}

fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(TABLE[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn percent(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Where decisions come from.
#[derive(Clone)]
enum Toolgate {
    Broker(toolgate::transport::client::Endpoint),
    Child(
        Arc<
            Mutex<(
                std::process::ChildStdin,
                BufReader<std::process::ChildStdout>,
            )>,
        >,
    ),
}

/// What toolgate said: allowed, or the reason it was not.
type Verdict = Result<(), String>;

impl Toolgate {
    /// Judge `call`. Over a socket, the connection is left in `withdrawn`,
    /// where another thread may close it to withdraw the call.
    fn judge(&self, call: &Value, withdrawn: &Slot) -> Verdict {
        let call_id = call["callID"].as_str().unwrap_or_default().to_string();
        match self {
            Toolgate::Broker(broker) => {
                // Only a broker of this user's is obeyed, or a remote one
                // whose certificate is trusted (see toolgate::transport::client::open).
                let stream = toolgate::transport::client::open(
                    broker,
                    std::time::Instant::now() + toolgate::transport::client::CONNECT_WAIT,
                )
                .map_err(|err| format!("toolgate: {err}"))?;
                let mut writer = stream.try_clone().map_err(|err| err.to_string())?;
                if let Ok(mut slot) = withdrawn.lock() {
                    *slot = stream.try_clone().ok().map(TcpLike);
                }
                // With a remote broker, the hello carries the token.
                let hello = toolgate::transport::client::hello(
                    broker,
                    toolgate_protocol::Role::Agent,
                    "opencode-bridge",
                );
                writeln!(writer, "{hello}\n{call}").map_err(|err| err.to_string())?;
                decision(
                    &mut BufReader::new(stream),
                    &call_id,
                    Some(&mut writer),
                    call,
                )
            }
            Toolgate::Child(child) => {
                let mut child = child.lock().map_err(|_| "toolgate is gone".to_string())?;
                let (input, output) = &mut *child;
                writeln!(input, "{call}").map_err(|err| err.to_string())?;
                decision(output, &call_id, None, call)
            }
        }
    }
}

/// A socket to toolgate that another thread may withdraw the call on.
struct TcpLike(std::os::unix::net::UnixStream);

/// Where a question's connection to toolgate is kept while it is judged.
type Slot = Arc<Mutex<Option<TcpLike>>>;

/// Read frames until the decision of `call_id`.
fn decision<R: BufRead>(
    reader: &mut R,
    call_id: &str,
    writer: Option<&mut std::os::unix::net::UnixStream>,
    call: &Value,
) -> Verdict {
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).map_err(|err| err.to_string())? == 0 {
            return Err(
                "toolgate: the call was withdrawn, or toolgate went away, before a decision".into(),
            );
        }
        let frame: Value = serde_json::from_str(&line).map_err(|err| err.to_string())?;
        if frame["callID"] != call_id {
            continue;
        }
        match frame["type"].as_str() {
            Some("decision") if frame["decision"] == "allow" => return Ok(()),
            Some("decision") => {
                let mut reason =
                    format!("toolgate: {}", frame["reason"].as_str().unwrap_or("denied"));
                if let Some(message) = frame["message"].as_str() {
                    reason = format!("{reason}: {message}");
                }
                if let Some(reminder) = frame["reminder"].as_str() {
                    reason = format!("{reason}\n\n{reminder}");
                }
                return Err(reason);
            }
            Some("permission_request") => {
                // No approver is connected: nobody can answer it here.
                if let Some(writer) = writer {
                    let cancel =
                        json!({"type":"cancel","sessionID":call["sessionID"],"callID":call_id});
                    let _ = writeln!(writer, "{cancel}");
                }
                let why = frame["metadata"]["reason"]
                    .as_str()
                    .unwrap_or("toolgate asks first");
                return Err(format!(
                    "toolgate: {why}; no approver is connected to answer it"
                ));
            }
            Some("error") => return Err(format!("toolgate: {}", frame["message"])),
            _ => {}
        }
    }
}

/// A permission question, from either era's event.
struct Question {
    id: String,
    session: String,
    message: Option<String>,
    call: Option<String>,
    legacy: bool,
}

fn question(event: &Value) -> Option<Question> {
    let kind = event["type"].as_str()?;
    let p = &event["properties"];
    let text = |value: &Value| value.as_str().map(str::to_string);
    match kind {
        "permission.asked" => Some(Question {
            id: text(&p["id"])?,
            session: text(&p["sessionID"])?,
            message: text(&p["tool"]["messageID"]),
            call: text(&p["tool"]["callID"]),
            legacy: false,
        }),
        "permission.updated" => Some(Question {
            id: text(&p["id"])?,
            session: text(&p["sessionID"])?,
            message: text(&p["messageID"]),
            call: text(&p["callID"]),
            legacy: true,
        }),
        _ => None,
    }
}

/// The `tool_call` for a question: the tool part it points at, read from
/// the server. `Err` says why the call cannot be seen.
fn tool_call(server: &Server, question: &Question) -> Result<Value, String> {
    let (Some(message), Some(call)) = (&question.message, &question.call) else {
        return Err(
            "the question names no tool call, so toolgate cannot see what it would allow".into(),
        );
    };
    let path = format!("/session/{}/message/{}", question.session, message);
    let response = server.request("GET", &path, None)?;
    if response.status != 200 {
        return Err(format!("GET {path} answered {}", response.status));
    }
    let body: Value =
        serde_json::from_slice(&response.body).map_err(|err| format!("GET {path}: {err}"))?;
    let part = body["parts"]
        .as_array()
        .and_then(|parts| {
            parts
                .iter()
                .find(|part| part["type"] == "tool" && part["callID"] == call.as_str())
        })
        .ok_or_else(|| format!("the message holds no tool part with callID {call}"))?;
    let tool = part["tool"].as_str().ok_or("the tool part names no tool")?;
    let input = part["state"]["input"].clone();
    if !input.is_object() {
        return Err("the tool part holds no input".into());
    }
    Ok(
        json!({"type":"tool_call","sessionID":question.session,"callID":question.id,"tool":tool,"input":input}),
    )
}

/// Answer `question` on the server.
fn reply(server: &Server, question: &Question, verdict: &Verdict) -> Result<(), String> {
    let word = if verdict.is_ok() { "once" } else { "reject" };
    if !question.legacy {
        let mut body = json!({"reply": word});
        if let Err(message) = verdict {
            body["message"] = json!(message);
        }
        let path = format!("/permission/{}/reply", question.id);
        let response = server.request("POST", &path, Some(&body))?;
        if response.status != 404 {
            return match response.status {
                200..=299 => Ok(()),
                status => Err(format!("POST {path} answered {status}")),
            };
        }
    }
    let path = format!("/session/{}/permissions/{}", question.session, question.id);
    let response = server.request("POST", &path, Some(&json!({"response": word})))?;
    match response.status {
        200..=299 => Ok(()),
        status => Err(format!("POST {path} answered {status}")),
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let option = |name: &str| {
        args.iter()
            .position(|arg| arg == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let Some(url) = option("--url") else {
        eprintln!("usage: opencode_server_bridge --url http://HOST:PORT [--directory DIR] [--socket PATH | --remote tls://HOST:PORT --token-file FILE [--ca FILE] | --toolgate BIN [--mode MODE]]");
        return std::process::ExitCode::from(2);
    };
    let server = match Server::from_url(&url, option("--directory")) {
        Ok(server) => server,
        Err(err) => {
            eprintln!("opencode_server_bridge: {err}");
            return std::process::ExitCode::from(2);
        }
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
            eprintln!("opencode_server_bridge: {err}");
            return std::process::ExitCode::from(2);
        }
    };
    let toolgate = match broker {
        Some(broker) => Toolgate::Broker(broker),
        None => {
            let mut command =
                Command::new(option("--toolgate").unwrap_or_else(|| "toolgate".into()));
            command.args(["serve", "--on-ask", "deny"]);
            if let Some(mode) = option("--mode") {
                command.args(["--mode", &mode]);
            }
            match command.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn() {
                Ok(mut child) => match (child.stdin.take(), child.stdout.take()) {
                    (Some(input), Some(output)) => {
                        Toolgate::Child(Arc::new(Mutex::new((input, BufReader::new(output)))))
                    }
                    _ => return std::process::ExitCode::from(1),
                },
                Err(err) => {
                    eprintln!("opencode_server_bridge: cannot start toolgate: {err}");
                    return std::process::ExitCode::from(1);
                }
            }
        }
    };
    let mut events = match server
        .send("GET", "/event", None, true)
        .and_then(|mut reader| {
            let (status, chunked, _) = read_head(&mut reader)?;
            if status != 200 {
                return Err(format!("GET /event answered {status}"));
            }
            let body: Box<dyn BufRead + Send> = if chunked {
                Box::new(BufReader::new(Chunked::new(reader)))
            } else {
                Box::new(reader)
            };
            Ok(body)
        }) {
        Ok(events) => events,
        Err(err) => {
            eprintln!("opencode_server_bridge: {err}");
            return std::process::ExitCode::from(1);
        }
    };
    // Questions being judged, by permission id: the socket to withdraw on.
    let judging: Arc<Mutex<HashMap<String, Slot>>> = Arc::default();
    let mut threads = Vec::new();
    let mut data = String::new();
    let mut line = String::new();
    loop {
        line.clear();
        match events.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = line.trim_end_matches(['\r', '\n']);
        if let Some(rest) = text.strip_prefix("data:") {
            data.push_str(rest.trim_start());
            continue;
        }
        if !text.is_empty() || data.is_empty() {
            continue;
        }
        let event: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
        data.clear();
        // `/global/event` wraps each event in `payload`.
        let event = if event.get("payload").is_some() {
            event["payload"].clone()
        } else {
            event
        };
        if matches!(event["type"].as_str(), Some("permission.replied")) {
            let p = &event["properties"];
            let id = p["requestID"]
                .as_str()
                .or(p["permissionID"].as_str())
                .unwrap_or("");
            let withdrawn = judging.lock().ok().and_then(|mut map| map.remove(id));
            if let Some(slot) = withdrawn {
                if let Some(TcpLike(socket)) = slot.lock().ok().and_then(|mut s| s.take()) {
                    let _ = socket.shutdown(std::net::Shutdown::Both);
                }
                eprintln!("opencode_server_bridge: {id} was answered in OpenCode; withdrawn");
            }
            continue;
        }
        let Some(question) = question(&event) else {
            continue;
        };
        let slot: Slot = Arc::default();
        if let Ok(mut map) = judging.lock() {
            map.insert(question.id.clone(), slot.clone());
        }
        let (server, toolgate, judging) = (server.clone(), toolgate.clone(), judging.clone());
        threads.push(std::thread::spawn(move || {
            let call = tool_call(&server, &question);
            let verdict = match &call {
                Ok(call) => toolgate.judge(call, &slot),
                Err(why) => Err(format!("toolgate: {why}")),
            };
            let still = judging
                .lock()
                .map(|mut map| map.remove(&question.id).is_some())
                .unwrap_or(false);
            if !still {
                return; // Answered in OpenCode meanwhile.
            }
            let word = if verdict.is_ok() { "once" } else { "reject" };
            let (tool, input) = match &call {
                Ok(call) => (
                    call["tool"].as_str().unwrap_or("").to_string(),
                    call["input"].to_string(),
                ),
                Err(_) => ("?".to_string(), "null".to_string()),
            };
            match reply(&server, &question, &verdict) {
                Ok(()) => eprintln!(
                    "opencode_server_bridge: {word} {} {tool} {input}",
                    question.id
                ),
                Err(err) => eprintln!(
                    "opencode_server_bridge: {} not answered: {err}",
                    question.id
                ),
            }
        }));
    }
    for thread in threads {
        let _ = thread.join();
    }
    eprintln!("opencode_server_bridge: the event stream ended");
    std::process::ExitCode::SUCCESS
}
