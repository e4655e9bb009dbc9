//! `toolgate claude-bridge`: sits between an orchestrator and Claude Code
//! run with `--input-format stream-json --output-format stream-json
//! --permission-prompt-tool stdio`, and decides Claude Code's tool calls
//! through toolgate.
//!
//! Claude Code asks its SDK client two things on its stdout (Claude Code
//! 2.1.328, as seen on the wire), each answered on its stdin:
//!
//! - a call of a `PreToolUse` hook the client registered in its
//!   `initialize` (`control_request` `hook_callback`), made before **every**
//!   tool runs, also those Claude Code's own mode and rules would allow
//!   without asking; answered with the hook's output
//!   (`permissionDecision` allow, deny or ask). The bridge registers one,
//!   [`HOOK_ID`], first among the orchestrator's own `PreToolUse` hooks
//!   (or in an `initialize` of its own, sent before the orchestrator's first
//!   line when that is not an `initialize`). Its input is a hook's input:
//!   the call is decided as `toolgate hook claude` decides it, with Claude
//!   Code's permission mode (the stricter of it and `--mode` applies) and
//!   in a sub-agent's session for a sub-agent's call.
//! - a permission question (`control_request` `can_use_tool`):
//!
//!   ```json
//!   {"type":"control_request","request_id":"7dd9…","request":{"subtype":"can_use_tool",
//!    "tool_name":"Bash","display_name":"Bash","input":{"command":"echo hi > out.txt"},
//!    "description":"…","permission_suggestions":[…],"blocked_path":"…","tool_use_id":"toolu_0000"}}
//!   {"type":"control_response","response":{"subtype":"success","request_id":"7dd9…",
//!    "response":{"behavior":"allow","updatedInput":{"command":"ls"}}}}
//!   ```
//!
//!   decided through toolgate too, unless toolgate's hook answered `ask`
//!   for that call.
//!
//! **What nobody toolgate reaches can answer** (no broker, or no approver
//! connected to it: [`Verdict::Ask`]) goes to the orchestrator: the hook
//! answers `ask`, Claude Code asks `can_use_tool`, and the bridge passes
//! that question to the orchestrator as Claude Code wrote it. The
//! orchestrator's answer reaches Claude Code as it wrote it, except an
//! allow whose `updatedInput` changes the call: the changed call is
//! decided, and denied if toolgate denies it. An answer that cannot be read
//! is a denial; when the orchestrator's input ends, the questions it holds
//! are denied. `--on-ask deny` asks nobody.
//!
//! Every other line passes through unchanged, both ways. The orchestrator's
//! answer to a request toolgate is deciding is dropped, and so is Claude
//! Code's answer to the bridge's own `initialize`. A
//! `control_cancel_request` naming a request the bridge is deciding
//! withdraws it (it gets no answer, as the SDKs do); one naming a question
//! the orchestrator holds is passed on. The calls are decided by a
//! [`Decide`], the one `toolgate mcp` uses: in-process, or a broker over
//! its socket, in Claude Code's session (the last `session_id` it wrote).
//!
//! Fails closed: a request that cannot be read (no tool name, an input
//! that is not an object, a hook call for another event) is denied saying
//! so; a line from Claude Code that is not JSON but mentions
//! `control_request` is never passed on (the orchestrator must not answer a
//! permission question it cannot recognise). A request with no
//! `request_id` cannot be answered: it is dropped and said on stderr.

use std::collections::{HashMap, HashSet};
use std::io;

use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::adapters::mcp::{Approval, Decide, Started, Verdict};
use crate::say;
use crate::transport::lines::{AsyncReader, Line};

pub mod wire;

pub use wire::{classify, FromClaude, HOOK_ID};
use wire::{Answered, FromOrchestrator};

/// The two ends of one peer: what it writes, and where to write to it.
pub struct Peer<R, W> {
    /// Its output, read by the bridge.
    pub from: R,
    /// Its input, written by the bridge.
    pub to: W,
}

/// What a decision being made answers.
enum Kind {
    /// A `can_use_tool` question; its line, put to the orchestrator if
    /// nobody toolgate reaches can answer.
    Permission(Vec<u8>),
    /// A call of toolgate's `PreToolUse` hook.
    Hook,
    /// The orchestrator allowed a question with an input of its own: the
    /// changed call is decided, and the orchestrator's answer (this line)
    /// passed on unless toolgate denies it.
    Changed(Vec<u8>),
}

/// A question being decided.
struct Waiting {
    which: u64,
    withdrawn: CancellationToken,
    kind: Kind,
    approval: Approval,
    /// The call as the log shows it.
    shown: String,
}

/// A `can_use_tool` question put to the orchestrator.
struct Forwarded {
    approval: Approval,
    shown: String,
}

/// The decisions being made, each with its request id and which question
/// it was.
type Deciding = JoinSet<(String, u64, Verdict)>;

/// Bridge `orchestrator` and `claude` until Claude Code's output ends.
/// Lines longer than `limit` bytes are dropped (and said on stderr).
/// When the orchestrator's output ends, the questions it was asked are
/// denied and Claude Code's input is closed as soon as no question waits
/// for toolgate's answer. At the end the questions still being decided are
/// withdrawn: Claude Code is gone and cannot read their answers.
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
        forwarded: HashMap::new(),
        handed: HashSet::new(),
        started: 0,
        session: None,
        own_initialize: None,
        first_line: true,
        orchestrator_open: true,
    };
    let mut deciding = Deciding::new();
    loop {
        if !bridge.orchestrator_open && bridge.waiting.is_empty() {
            bridge.close_claude().await;
        }
        tokio::select! {
            line = from_orchestrator.next_line(), if bridge.orchestrator_open => match line {
                Ok(Some(Line::Data(line))) => bridge.orchestrator_said(&line, &mut deciding).await,
                Ok(Some(Line::TooLarge(_))) => say!(
                    "toolgate claude-bridge: a line from the orchestrator is longer than {limit} bytes: dropped"
                ),
                Ok(None) => bridge.orchestrator_ended().await,
                Err(err) => {
                    say!("toolgate claude-bridge: cannot read the orchestrator's input: {err}");
                    bridge.orchestrator_ended().await;
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
                    bridge.decided(&request_id, which, verdict).await;
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
/// being decided or put to the orchestrator, and Claude Code's session.
struct Bridge<'d, OW, CW, D> {
    to_orchestrator: Option<OW>,
    to_claude: Option<CW>,
    decide: &'d mut D,
    /// The questions toolgate is deciding, by request id.
    waiting: HashMap<String, Waiting>,
    /// The `can_use_tool` questions put to the orchestrator, by request id.
    forwarded: HashMap<String, Forwarded>,
    /// The calls (by `tool_use_id`) whose hook call was answered `ask`
    /// because nobody toolgate reaches could answer: Claude Code's question
    /// about each goes to the orchestrator.
    handed: HashSet<String>,
    /// How many decisions were started.
    started: u64,
    /// The last session id Claude Code wrote.
    session: Option<String>,
    /// The request id of the bridge's own `initialize`, until Claude Code
    /// answers it (the answer is not the orchestrator's).
    own_initialize: Option<String>,
    /// Whether the orchestrator's next line is its first.
    first_line: bool,
    /// Whether the orchestrator's output is still open (it can answer).
    orchestrator_open: bool,
}

impl<OW, CW, D> Bridge<'_, OW, CW, D>
where
    OW: AsyncWrite + Unpin,
    CW: AsyncWrite + Unpin,
    D: Decide,
{
    /// A line of the orchestrator's: its `initialize` gets toolgate's hook
    /// (and, if its first line is something else, the bridge's own
    /// `initialize` goes first); its answer to a question it was shown is
    /// checked; an answer to a question toolgate is deciding is dropped;
    /// anything else passes on unchanged.
    async fn orchestrator_said(&mut self, line: &[u8], deciding: &mut Deciding) {
        let first = std::mem::replace(&mut self.first_line, false);
        let read = wire::from_orchestrator(line);
        if first && !matches!(read, FromOrchestrator::Initialize(..)) {
            // Claude Code calls the hook only if an `initialize` named it.
            let id = format!("toolgate_initialize_{}", uuid::Uuid::new_v4().simple());
            let own = to_bytes(&wire::initialize(&id));
            write_line(&mut self.to_claude, &own, "Claude Code's input").await;
            self.own_initialize = Some(id);
        }
        match read {
            FromOrchestrator::Initialize(line, replaced) => {
                if let Some(what) = replaced {
                    say!("toolgate claude-bridge: replaced {what} in the orchestrator's initialize with toolgate's hook");
                }
                write_line(&mut self.to_claude, &line, "Claude Code's input").await;
            }
            FromOrchestrator::Response(id, response) => {
                if let Some(question) = self.forwarded.remove(&id) {
                    self.orchestrator_answered(&id, question, &response, line, deciding)
                        .await;
                } else if self.waiting.contains_key(&id) {
                    say!("toolgate claude-bridge: dropped the orchestrator's control_response to {id}: toolgate answers that request");
                } else {
                    write_line(&mut self.to_claude, line, "Claude Code's input").await;
                }
            }
            FromOrchestrator::Other => {
                write_line(&mut self.to_claude, line, "Claude Code's input").await;
            }
        }
    }

    /// The orchestrator answered question `id`, about `question`: a denial
    /// passes on; an allow passes on as it is when it keeps the input, and
    /// only if toolgate does not deny the changed call when it changes it;
    /// an answer that cannot be read is a denial.
    async fn orchestrator_answered(
        &mut self,
        id: &str,
        question: Forwarded,
        response: &Map<String, Value>,
        line: &[u8],
        deciding: &mut Deciding,
    ) {
        match wire::answered(response, &question.approval.input) {
            Answered::Allow(input) if input != question.approval.input => {
                let changed = Approval {
                    input,
                    tool_use_id: None,
                    ..question.approval
                };
                let shown = shown(&changed);
                self.start(
                    id.to_string(),
                    changed,
                    shown,
                    Kind::Changed(line.to_vec()),
                    deciding,
                )
                .await;
            }
            Answered::Allow(_) | Answered::Deny => {
                tracing::info!(
                    "claude-bridge: {id} {}: the orchestrator answered",
                    question.shown
                );
                write_line(&mut self.to_claude, line, "Claude Code's input").await;
            }
            Answered::Unreadable(why) => {
                let verdict = Verdict::Deny(format!(
                    "toolgate: the orchestrator's answer cannot be read ({why}): denied"
                ));
                self.answer(id, &question.shown, &verdict, &question.approval.input)
                    .await;
            }
        }
    }

    /// The orchestrator's output ended: nobody is left to answer the
    /// questions it was shown, which are denied.
    async fn orchestrator_ended(&mut self) {
        self.orchestrator_open = false;
        let shown: Vec<(String, Forwarded)> = self.forwarded.drain().collect();
        for (id, question) in shown {
            let verdict =
                Verdict::Deny("toolgate: the orchestrator's input ended before it answered".into());
            self.answer(&id, &question.shown, &verdict, &question.approval.input)
                .await;
        }
    }

    /// Close Claude Code's input (its run ends once it is done).
    async fn close_claude(&mut self) {
        if let Some(mut input) = self.to_claude.take() {
            let _ = input.shutdown().await;
        }
    }

    /// A line from Claude Code: a question or a hook call is decided (a
    /// decision that takes time goes into `deciding`), anything else passed
    /// on.
    async fn claude_said(&mut self, line: &[u8], deciding: &mut Deciding) {
        match classify(line) {
            FromClaude::Ask {
                request_id,
                approval,
            } => match approval {
                Err(message) => {
                    let verdict = Verdict::Deny(message);
                    self.answer(&request_id, "(unreadable)", &verdict, &Map::new())
                        .await;
                }
                Ok(approval) => {
                    let shown = shown(&approval);
                    let handed = approval
                        .tool_use_id
                        .as_ref()
                        .is_some_and(|call| self.handed.remove(call));
                    if handed && self.orchestrator_open {
                        // toolgate already found nobody to ask about it.
                        self.forward(request_id, approval, shown, line).await;
                    } else {
                        let kind = Kind::Permission(line.to_vec());
                        self.start(request_id, approval, shown, kind, deciding)
                            .await;
                    }
                }
            },
            FromClaude::Hook {
                request_id,
                approval,
            } => match approval {
                Err(message) => {
                    let verdict = Verdict::Deny(message);
                    self.hook_answer(&request_id, "(unreadable)", &verdict, None)
                        .await;
                }
                Ok(approval) => {
                    let shown = shown(&approval);
                    self.start(request_id, approval, shown, Kind::Hook, deciding)
                        .await;
                }
            },
            FromClaude::Cancel(request_id) => {
                if let Some(question) = self.waiting.remove(&request_id) {
                    question.withdrawn.cancel();
                } else {
                    // Withdrawn from the orchestrator too, if it was asked.
                    self.forwarded.remove(&request_id);
                    write_line(&mut self.to_orchestrator, line, "the orchestrator's output").await
                }
            }
            FromClaude::Response(request_id) => {
                if self.own_initialize.as_deref() == Some(request_id.as_str()) {
                    self.own_initialize = None;
                    if line.windows(7).any(|window| window == b"\"error\"") {
                        say!("toolgate claude-bridge: Claude Code refused the bridge's initialize: {}", String::from_utf8_lossy(line));
                    }
                } else {
                    write_line(&mut self.to_orchestrator, line, "the orchestrator's output").await;
                }
            }
            FromClaude::Dropped(why) => say!("toolgate claude-bridge: {why}"),
            FromClaude::Other(named) => {
                if named.is_some() {
                    self.session = named;
                }
                write_line(&mut self.to_orchestrator, line, "the orchestrator's output").await;
            }
        }
    }

    /// Start deciding `approval` for request `request_id`: answered now,
    /// or put into `deciding`.
    async fn start(
        &mut self,
        request_id: String,
        approval: Approval,
        shown: String,
        kind: Kind,
        deciding: &mut Deciding,
    ) {
        if let Some(earlier) = self.waiting.remove(&request_id) {
            // Claude Code does not reuse the id of a request it awaits:
            // if it did, the earlier is withdrawn and the later answered.
            earlier.withdrawn.cancel();
        }
        if let Some(session) = &self.session {
            self.decide.set_session(session);
        }
        let withdrawn = CancellationToken::new();
        let started = self.decide.start(&approval, withdrawn.clone());
        self.started += 1;
        let which = self.started;
        let question = Waiting {
            which,
            withdrawn,
            kind,
            approval,
            shown,
        };
        self.waiting.insert(request_id.clone(), question);
        match started {
            Started::Now(verdict) => self.decided(&request_id, which, verdict).await,
            Started::Later(future) => {
                deciding.spawn(async move { (request_id, which, future.await) });
            }
        }
    }

    /// A decision: answered, unless its question was withdrawn (or
    /// replaced) meanwhile. An `ask` nobody toolgate reaches can answer
    /// goes to the orchestrator while it can answer.
    async fn decided(&mut self, request_id: &str, which: u64, verdict: Verdict) {
        if self
            .waiting
            .get(request_id)
            .is_none_or(|question| question.which != which)
        {
            return;
        }
        let Some(question) = self.waiting.remove(request_id) else {
            return;
        };
        let Waiting {
            kind,
            approval,
            shown,
            ..
        } = question;
        let verdict = match verdict {
            Verdict::Ask(why) if !self.orchestrator_open => Verdict::Deny(format!(
                "{why}; the orchestrator's input has ended, so it cannot be asked either"
            )),
            verdict => verdict,
        };
        match (kind, verdict) {
            (Kind::Permission(line), Verdict::Ask(why)) => {
                tracing::info!(
                    "claude-bridge: {request_id} {shown}: asking the orchestrator: {why}"
                );
                self.forward(request_id.to_string(), approval, shown, &line)
                    .await;
            }
            (Kind::Permission(_), verdict) => {
                self.answer(request_id, &shown, &verdict, &approval.input)
                    .await;
            }
            (Kind::Hook, verdict) => {
                self.hook_answer(request_id, &shown, &verdict, approval.tool_use_id)
                    .await;
            }
            (Kind::Changed(line), Verdict::Deny(message)) => {
                let verdict = Verdict::Deny(format!(
                    "the orchestrator allowed the call with an input of its own, which toolgate denies: {message}"
                ));
                self.answer(request_id, &shown, &verdict, &approval.input)
                    .await;
                drop(line);
            }
            (Kind::Changed(line), _) => {
                tracing::info!("claude-bridge: {request_id} {shown}: the orchestrator answered, with an input of its own");
                write_line(&mut self.to_claude, &line, "Claude Code's input").await;
            }
        }
    }

    /// Put the question `request_id` (its `line`, as Claude Code wrote it)
    /// to the orchestrator.
    async fn forward(
        &mut self,
        request_id: String,
        approval: Approval,
        shown: String,
        line: &[u8],
    ) {
        self.forwarded
            .insert(request_id, Forwarded { approval, shown });
        write_line(&mut self.to_orchestrator, line, "the orchestrator's output").await;
    }

    /// Write the answer to the `can_use_tool` `request_id` to Claude Code.
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
        let line = to_bytes(&wire::answer(request_id, verdict, input));
        write_line(&mut self.to_claude, &line, "Claude Code's input").await;
    }

    /// Write the answer to a call of toolgate's hook to Claude Code; an
    /// `ask` hands the call (`tool_use_id`) to the orchestrator.
    async fn hook_answer(
        &mut self,
        request_id: &str,
        shown: &str,
        verdict: &Verdict,
        tool_use_id: Option<String>,
    ) {
        log(request_id, shown, verdict);
        if let (Verdict::Ask(_), Some(call)) = (verdict, tool_use_id) {
            self.handed.insert(call);
        }
        let line = to_bytes(&wire::hook_answer(request_id, verdict));
        write_line(&mut self.to_claude, &line, "Claude Code's input").await;
    }
}

/// The call as the log shows it: the tool and its input.
fn shown(approval: &Approval) -> String {
    format!(
        "{} {}",
        approval.tool_name,
        Value::Object(approval.input.clone())
    )
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
        Verdict::Ask(message) => {
            tracing::info!("claude-bridge: {request_id} {call}: ask: {message}")
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
