//! `toolgate claude-bridge`: sits between an orchestrator and Claude Code
//! run with `--input-format stream-json --output-format stream-json
//! --permission-prompt-tool stdio`, and answers Claude Code's permission
//! questions through toolgate.
//!
//! Claude Code asks on its stdout (Claude Code 2.1.328, as seen on the
//! wire; the Agent SDKs answer the same way):
//!
//! ```json
//! {"type":"control_request","request_id":"7dd9…","request":{"subtype":"can_use_tool",
//!  "tool_name":"Bash","display_name":"Bash","input":{"command":"echo hi > out.txt"},
//!  "description":"…","permission_suggestions":[…],"blocked_path":"…","tool_use_id":"toolu_0000"}}
//! ```
//!
//! and reads the answer on its stdin:
//!
//! ```json
//! {"type":"control_response","response":{"subtype":"success","request_id":"7dd9…",
//!  "response":{"behavior":"allow","updatedInput":{"command":"ls"}}}}
//! {"type":"control_response","response":{"subtype":"success","request_id":"7dd9…",
//!  "response":{"behavior":"deny","message":"toolgate: …"}}}
//! ```
//!
//! Every other line passes through unchanged, both ways: the orchestrator's
//! `initialize` and user messages reach Claude Code, Claude Code's messages
//! and answers reach the orchestrator. A `control_cancel_request` naming a
//! question the bridge is deciding withdraws it (the question gets no
//! answer, as the SDKs do). The question is decided by a [`Decide`], the
//! one `toolgate mcp` uses: in-process, or a broker over its socket. The
//! calls land in Claude Code's session: the last `session_id` it wrote.
//!
//! Fails closed: a question that cannot be read (no tool name, an input
//! that is not an object) is denied saying so; a line from Claude Code that
//! is not JSON but mentions `control_request` is never passed on (the
//! orchestrator must not answer a permission question it cannot recognise).
//! A question with no `request_id` cannot be answered: it is dropped and
//! said on stderr.

use std::collections::HashMap;
use std::io;

use serde_json::{json, Map, Value};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::adapters::mcp::{Approval, Decide, Started, Verdict};
use crate::say;
use crate::transport::lines::{AsyncReader, Line};

/// What a line from Claude Code is to the bridge.
#[derive(Debug, PartialEq)]
pub enum FromClaude {
    /// A permission question, to be answered to `request_id`: the call,
    /// or why it cannot be read (to be denied with that message).
    Ask {
        /// Claude Code's id of the question.
        request_id: String,
        /// The call asked about, or the denial's message.
        approval: Result<Approval, String>,
    },
    /// Claude Code withdrew the request with this id.
    Cancel(String),
    /// A permission question that cannot be answered (no `request_id`),
    /// or a line that is not JSON but mentions a control request: not
    /// passed on. The text says why.
    Dropped(String),
    /// Anything else: passed on. The session id the line names, if any.
    Other(Option<String>),
}

/// Read one line from Claude Code.
pub fn classify(line: &[u8]) -> FromClaude {
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(_) => {
            let text = String::from_utf8_lossy(line);
            if text.contains("control_request") {
                return FromClaude::Dropped(
                    "a line that is not JSON mentions control_request: not passed on".into(),
                );
            }
            return FromClaude::Other(None);
        }
    };
    let Some(message) = value.as_object() else {
        return FromClaude::Other(None);
    };
    match message.get("type").and_then(Value::as_str) {
        Some("control_request") => {}
        Some("control_cancel_request") => {
            return match message.get("request_id").and_then(Value::as_str) {
                Some(id) => FromClaude::Cancel(id.to_string()),
                None => FromClaude::Other(None),
            }
        }
        _ => {
            let session = message
                .get("session_id")
                .and_then(Value::as_str)
                .filter(|session| !session.is_empty())
                .map(str::to_string);
            return FromClaude::Other(session);
        }
    }
    let Some(request) = message
        .get("request")
        .and_then(Value::as_object)
        .filter(|request| request.get("subtype").and_then(Value::as_str) == Some("can_use_tool"))
    else {
        return FromClaude::Other(None);
    };
    let request_id = match message.get("request_id") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        _ => {
            return FromClaude::Dropped(
                "a can_use_tool request without a request_id cannot be answered".into(),
            )
        }
    };
    FromClaude::Ask {
        request_id,
        approval: approval(request),
    }
}

/// The call a `can_use_tool` request asks about; `Err` is the denial's message.
fn approval(request: &Map<String, Value>) -> Result<Approval, String> {
    let tool_name = match request.get("tool_name") {
        Some(Value::String(name)) if !name.is_empty() => name.clone(),
        _ => {
            return Err(
                "toolgate: the can_use_tool request has no `tool_name` (a non-empty string)".into(),
            )
        }
    };
    let input = match request.get("input") {
        Some(Value::Object(input)) => input.clone(),
        _ => {
            return Err(
                "toolgate: the `input` of the can_use_tool request is not a JSON object".into(),
            )
        }
    };
    let tool_use_id = match request.get("tool_use_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => Some(id.clone()),
        Some(_) => {
            return Err(
                "toolgate: the `tool_use_id` of the can_use_tool request is not a string".into(),
            )
        }
    };
    Ok(Approval {
        tool_name,
        input,
        tool_use_id,
        // Claude Code applied its own mode before it asked.
        permission_mode: None,
    })
}

/// The `control_response` answering `request_id`: `allow` with the input
/// unchanged as `updatedInput`, or `deny` with the message.
pub fn answer(request_id: &str, verdict: &Verdict, input: &Map<String, Value>) -> Value {
    let response = match verdict {
        Verdict::Allow => json!({"behavior": "allow", "updatedInput": input}),
        Verdict::Deny(message) => json!({"behavior": "deny", "message": message}),
    };
    json!({
        "type": "control_response",
        "response": {"subtype": "success", "request_id": request_id, "response": response},
    })
}

/// The two ends of one peer: what it writes, and where to write to it.
pub struct Peer<R, W> {
    /// Its output, read by the bridge.
    pub from: R,
    /// Its input, written by the bridge.
    pub to: W,
}

/// A question being decided.
struct Waiting {
    which: u64,
    withdrawn: CancellationToken,
    input: Map<String, Value>,
    /// The call as the log shows it.
    shown: String,
}

/// Bridge `orchestrator` and `claude` until Claude Code's output ends.
/// Lines longer than `limit` bytes are dropped (and said on stderr).
/// When the orchestrator's output ends, Claude Code's input is closed as
/// soon as no question waits for its answer. At the end the questions
/// still being decided are withdrawn: Claude Code is gone and cannot read
/// their answers.
pub async fn run<OR, OW, CR, CW, D>(
    orchestrator: Peer<OR, OW>,
    claude: Peer<CR, CW>,
    decide: &mut D,
    limit: usize,
) -> io::Result<()>
where
    OR: AsyncRead + Unpin,
    OW: AsyncWrite + Unpin,
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
    D: Decide,
{
    let mut from_orchestrator = AsyncReader::new(orchestrator.from, limit);
    let mut from_claude = AsyncReader::new(claude.from, limit);
    let mut bridge = Bridge {
        to_orchestrator: Some(orchestrator.to),
        to_claude: Some(claude.to),
        decide,
        waiting: HashMap::new(),
        started: 0,
        session: None,
    };
    let mut deciding: JoinSet<(String, u64, Verdict)> = JoinSet::new();
    let mut orchestrator_open = true;
    loop {
        if !orchestrator_open && bridge.waiting.is_empty() {
            bridge.close_claude().await;
        }
        tokio::select! {
            line = from_orchestrator.next_line(), if orchestrator_open => match line {
                Ok(Some(Line::Data(line))) => bridge.pass_to_claude(&line).await,
                Ok(Some(Line::TooLarge(_))) => say!(
                    "toolgate claude-bridge: a line from the orchestrator is longer than {limit} bytes: dropped"
                ),
                Ok(None) => orchestrator_open = false,
                Err(err) => {
                    say!("toolgate claude-bridge: cannot read the orchestrator's input: {err}");
                    orchestrator_open = false;
                }
            },
            line = from_claude.next_line() => match line {
                Ok(Some(Line::Data(line))) => bridge.claude_said(&line, &mut deciding).await,
                Ok(Some(Line::TooLarge(_))) => say!(
                    "toolgate claude-bridge: a line from Claude Code is longer than {limit} bytes: dropped"
                ),
                Ok(None) => break,
                Err(err) => {
                    say!("toolgate claude-bridge: cannot read Claude Code's output: {err}");
                    break;
                }
            },
            Some(decided) = deciding.join_next() => {
                // A decision's future cannot panic (no code here may), so a
                // task that did not finish is one aborted: none is.
                if let Ok((request_id, which, verdict)) = decided {
                    bridge.decided(&request_id, which, &verdict).await;
                }
            },
        }
    }
    for (_, question) in bridge.waiting.drain() {
        question.withdrawn.cancel();
    }
    if let Some(output) = bridge.to_orchestrator.as_mut() {
        output.flush().await?;
    }
    Ok(())
}

/// The bridge's state: the two writers it owns, the decider, the questions
/// being decided, and Claude Code's session.
struct Bridge<'d, OW, CW, D> {
    to_orchestrator: Option<OW>,
    to_claude: Option<CW>,
    decide: &'d mut D,
    /// The questions being decided, by request id.
    waiting: HashMap<String, Waiting>,
    /// How many questions were put to a decider that answers later.
    started: u64,
    /// The last session id Claude Code wrote.
    session: Option<String>,
}

impl<OW, CW, D> Bridge<'_, OW, CW, D>
where
    OW: AsyncWrite + Unpin,
    CW: AsyncWrite + Unpin,
    D: Decide,
{
    /// Pass a line of the orchestrator's on to Claude Code.
    async fn pass_to_claude(&mut self, line: &[u8]) {
        write_line(&mut self.to_claude, line, "Claude Code's input").await;
    }

    /// Close Claude Code's input (its run ends once it is done).
    async fn close_claude(&mut self) {
        if let Some(mut input) = self.to_claude.take() {
            let _ = input.shutdown().await;
        }
    }

    /// A line from Claude Code: a question is decided (a decision that
    /// takes time goes into `deciding`), anything else passed on.
    async fn claude_said(&mut self, line: &[u8], deciding: &mut JoinSet<(String, u64, Verdict)>) {
        match classify(line) {
            FromClaude::Ask {
                request_id,
                approval,
            } => self.ask(request_id, approval, deciding).await,
            FromClaude::Cancel(request_id) => match self.waiting.remove(&request_id) {
                Some(question) => question.withdrawn.cancel(),
                None => {
                    write_line(&mut self.to_orchestrator, line, "the orchestrator's output").await
                }
            },
            FromClaude::Dropped(why) => say!("toolgate claude-bridge: {why}"),
            FromClaude::Other(named) => {
                if named.is_some() {
                    self.session = named;
                }
                write_line(&mut self.to_orchestrator, line, "the orchestrator's output").await;
            }
        }
    }

    /// Decide one question: answered now, or put into `deciding`.
    async fn ask(
        &mut self,
        request_id: String,
        approval: Result<Approval, String>,
        deciding: &mut JoinSet<(String, u64, Verdict)>,
    ) {
        if let Some(earlier) = self.waiting.remove(&request_id) {
            // Claude Code does not reuse the id of a question it awaits:
            // if it did, the earlier is withdrawn and the later answered.
            earlier.withdrawn.cancel();
        }
        let approval = match approval {
            Ok(approval) => approval,
            Err(message) => {
                let verdict = Verdict::Deny(message);
                self.answer(&request_id, "(unreadable)", &verdict, &Map::new())
                    .await;
                return;
            }
        };
        let shown = format!(
            "{} {}",
            approval.tool_name,
            Value::Object(approval.input.clone())
        );
        if let Some(session) = &self.session {
            self.decide.set_session(session);
        }
        let withdrawn = CancellationToken::new();
        match self.decide.start(&approval, withdrawn.clone()) {
            Started::Now(verdict) => {
                self.answer(&request_id, &shown, &verdict, &approval.input)
                    .await;
            }
            Started::Later(future) => {
                self.started += 1;
                let which = self.started;
                let question = Waiting {
                    which,
                    withdrawn,
                    input: approval.input,
                    shown,
                };
                self.waiting.insert(request_id.clone(), question);
                deciding.spawn(async move { (request_id, which, future.await) });
            }
        }
    }

    /// A decision that took time: answered, unless its question was
    /// withdrawn (or replaced) meanwhile.
    async fn decided(&mut self, request_id: &str, which: u64, verdict: &Verdict) {
        if self
            .waiting
            .get(request_id)
            .is_none_or(|question| question.which != which)
        {
            return;
        }
        if let Some(question) = self.waiting.remove(request_id) {
            self.answer(request_id, &question.shown, verdict, &question.input)
                .await;
        }
    }

    /// Write the answer to `request_id` to Claude Code.
    async fn answer(
        &mut self,
        request_id: &str,
        shown: &str,
        verdict: &Verdict,
        input: &Map<String, Value>,
    ) {
        log(request_id, shown, verdict);
        if self.to_claude.is_none() {
            say!("toolgate claude-bridge: Claude Code's input is closed: the answer to {request_id} is lost");
            return;
        }
        let line = to_bytes(&answer(request_id, verdict, input));
        write_line(&mut self.to_claude, &line, "Claude Code's input").await;
    }
}

/// One JSON value as a line's bytes (without its `\n`).
fn to_bytes(value: &Value) -> Vec<u8> {
    // A `Value` always serializes.
    serde_json::to_vec(value).unwrap_or_default()
}

/// Say an answer on the log (`RUST_LOG=info`): the request, the call, the
/// answer.
fn log(request_id: &str, call: &str, verdict: &Verdict) {
    match verdict {
        Verdict::Allow => tracing::info!("claude-bridge: {request_id} {call}: allow"),
        Verdict::Deny(message) => {
            tracing::info!("claude-bridge: {request_id} {call}: deny: {message}")
        }
    }
}

/// Write `line` and its `\n` to `output` while it takes them; a write that
/// fails (the reader is gone) closes it for good, said once on stderr.
async fn write_line<W: AsyncWrite + Unpin>(output: &mut Option<W>, line: &[u8], what: &str) {
    let Some(writer) = output.as_mut() else {
        return;
    };
    let mut framed = Vec::with_capacity(line.len() + 1);
    framed.extend_from_slice(line);
    framed.push(b'\n');
    let written = async {
        writer.write_all(&framed).await?;
        writer.flush().await
    };
    if let Err(err) = written.await {
        if err.kind() != io::ErrorKind::BrokenPipe {
            say!("toolgate claude-bridge: cannot write to {what}: {err}");
        }
        *output = None;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)] // tests may panic

    use super::*;

    #[test]
    fn classify_lines() {
        let ask = br#"{"type":"control_request","request_id":"r1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"ls"},"tool_use_id":"t1","permission_suggestions":[]}}"#;
        let FromClaude::Ask {
            request_id,
            approval,
        } = classify(ask)
        else {
            panic!("not an ask");
        };
        assert_eq!(request_id, "r1");
        let approval = approval.unwrap();
        assert_eq!(approval.tool_name, "Bash");
        assert_eq!(approval.tool_use_id.as_deref(), Some("t1"));
        for (line, expected) in [
            (&br#"{"type":"system","subtype":"init","session_id":"s1"}"#[..], FromClaude::Other(Some("s1".into()))),
            (br#"{"type":"control_request","request_id":"r2","request":{"subtype":"initialize"}}"#, FromClaude::Other(None)),
            (br#"{"type":"control_cancel_request","request_id":"r1"}"#, FromClaude::Cancel("r1".into())),
            (b"not json", FromClaude::Other(None)),
            (b"{\"type\":\"control_request\" cut", FromClaude::Dropped("a line that is not JSON mentions control_request: not passed on".into())),
            (br#"{"type":"control_request","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{}}}"#, FromClaude::Dropped("a can_use_tool request without a request_id cannot be answered".into())),
        ] {
            assert_eq!(classify(line), expected, "{}", String::from_utf8_lossy(line));
        }
        let bad = br#"{"type":"control_request","request_id":"r3","request":{"subtype":"can_use_tool","tool_name":"Bash","input":"ls"}}"#;
        assert_eq!(
            classify(bad),
            FromClaude::Ask {
                request_id: "r3".into(),
                approval: Err(
                    "toolgate: the `input` of the can_use_tool request is not a JSON object".into()
                )
            }
        );
    }

    #[test]
    fn answers() {
        let input = json!({"command": "ls"}).as_object().cloned().unwrap();
        assert_eq!(
            answer("r1", &Verdict::Allow, &input).to_string(),
            r#"{"type":"control_response","response":{"subtype":"success","request_id":"r1","response":{"behavior":"allow","updatedInput":{"command":"ls"}}}}"#
        );
        assert_eq!(
            answer("r2", &Verdict::Deny("no".into()), &input).to_string(),
            r#"{"type":"control_response","response":{"subtype":"success","request_id":"r2","response":{"behavior":"deny","message":"no"}}}"#
        );
    }
}
