//! `toolgate hook claude|qwen|gemini|codex`: one tool call from an agent's
//! `PreToolUse` (Gemini CLI: `BeforeTool`) hook, decided in-process by the
//! same broker core `serve` drives, and answered in the agent's own format.
//!
//! The hook reads the agent's JSON on stdin (`session_id`, `cwd`,
//! `permission_mode`, `tool_name`, `tool_input`, `tool_use_id`), turns it into
//! a `set_mode` and a `tool_call` frame for one broker (with the policy and,
//! with `--state-dir`, the sessions and grants of earlier calls), and writes
//! `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":…}}`
//! (Gemini CLI: `{"decision":…,"reason":…}`). An `ask` is answered `ask`, so
//! the agent puts its own prompt to the user; Gemini CLI's hooks cannot ask,
//! and it sends no permission mode (so a `yolo` run would not prompt), so
//! there an `ask` is a denial that says so.
//!
//! It never fails open: input it cannot read, a call it cannot decide, or an
//! error of its own is a `deny` naming what went wrong; if even that cannot
//! be written, the exit code is 2, which both agents read as "blocked".

use serde_json::{json, Map, Value};
use toolgate_policy::Mode;
use toolgate_protocol::{ClientFrame, ServerFrame, Verdict};

use super::bind::Binding;
use crate::broker::{Broker, Input};

/// The agents whose hook protocol this module speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    /// Claude Code's `PreToolUse` hook.
    Claude,
    /// qwen-code's `PreToolUse` hook (Claude Code's format, its own tool
    /// names and `permission_mode` values).
    Qwen,
    /// Gemini CLI's `BeforeTool` hook (`decision` / `reason`, no permission
    /// mode, no way to ask).
    Gemini,
    /// Codex's `PreToolUse` hook (Claude Code's format; its shell arrives as
    /// `Bash` with `command`, its patches as `apply_patch` with the patch
    /// text in `command`, which the registry reads as a patch).
    Codex,
}

/// The hook event a call comes from: each is answered in its own format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `PreToolUse` (Gemini CLI: `BeforeTool`): before the tool runs.
    PreToolUse,
    /// `PermissionRequest` (Claude Code, qwen-code, Codex): the agent is
    /// about to show its permission dialog; the hook may allow or deny in
    /// its place, or leave it to the dialog.
    PermissionRequest,
}

/// The event of a hook input (`hook_event_name`; absent: the agent's
/// pre-tool event). `Err` names an event toolgate does not answer, which is
/// refused rather than answered as another one.
pub fn event(agent: Agent, input: &Value) -> Result<Event, String> {
    let name = input.get("hook_event_name").and_then(Value::as_str);
    match (agent, name) {
        (_, None) => Ok(Event::PreToolUse),
        (Agent::Gemini, Some("BeforeTool")) => Ok(Event::PreToolUse),
        (Agent::Claude | Agent::Qwen | Agent::Codex, Some("PreToolUse")) => Ok(Event::PreToolUse),
        (Agent::Claude | Agent::Qwen | Agent::Codex, Some("PermissionRequest")) => {
            Ok(Event::PermissionRequest)
        }
        (agent, Some(other)) => {
            let handled = match agent {
                Agent::Gemini => "BeforeTool",
                _ => "PreToolUse and PermissionRequest",
            };
            Err(format!(
                "the hook event `{}` is not one toolgate answers (it answers {handled}): remove `toolgate hook` from that event's hooks",
                crate::display::shown(other)
            ))
        }
    }
}

/// What the hook answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// `allow`, `deny` or `ask`.
    pub decision: &'static str,
    /// Why, for the model (and the user).
    pub reason: String,
    /// The plan-mode reminder that came with a denial, for the model.
    pub reminder: Option<String>,
}

impl Answer {
    /// A denial for `reason`.
    pub fn deny(reason: String) -> Answer {
        Answer {
            decision: "deny",
            reason,
            reminder: None,
        }
    }

    /// The JSON `agent` reads on the hook's stdout. The reminder reaches the
    /// model as `additionalContext` where the agent passes that on with a
    /// denial (Claude Code 2.1.328, Codex 0.169.0, seen in their model
    /// requests); qwen-code 0.15.10 drops a PreToolUse `additionalContext`
    /// and Gemini CLI 0.61.0 has none for BeforeTool, so there it follows
    /// the reason. Only fields each agent validates are written: Claude Code
    /// ignores an answer it cannot validate, and then runs the tool.
    pub fn to_json(&self, agent: Agent, event: Event) -> Value {
        if event == Event::PermissionRequest {
            return self.permission_request_json();
        }
        let mut reason = self.reason.clone();
        let mut context = None;
        if let Some(reminder) = &self.reminder {
            match agent {
                Agent::Claude | Agent::Codex => context = Some(reminder.clone()),
                Agent::Qwen | Agent::Gemini => reason = format!("{reason}\n\n{reminder}"),
            }
        }
        match agent {
            Agent::Claude | Agent::Qwen | Agent::Codex => {
                let mut inner = json!({
                    "hookEventName": "PreToolUse",
                    "permissionDecision": self.decision,
                    "permissionDecisionReason": reason,
                });
                if let Some(context) = context {
                    inner["additionalContext"] = json!(context);
                }
                json!({ "hookSpecificOutput": inner })
            }
            Agent::Gemini => json!({"decision": self.decision, "reason": reason}),
        }
    }

    /// The answer to a `PermissionRequest` hook: `decision.behavior` allow,
    /// or deny with the reason (and the reminder) as its `message`; an
    /// `ask` decides nothing (`{}`), so the agent shows its own dialog. An
    /// allow carries no `updatedInput`: the input runs as it was asked
    /// (Codex refuses the field; Claude Code keeps the input without it).
    fn permission_request_json(&self) -> Value {
        let decision = match self.decision {
            "allow" => json!({"behavior": "allow"}),
            "deny" => {
                let message = match &self.reminder {
                    Some(reminder) => format!("{}\n\n{reminder}", self.reason),
                    None => self.reason.clone(),
                };
                json!({"behavior": "deny", "message": message})
            }
            _ => return json!({}),
        };
        json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}})
    }
}

/// The agent's permission mode as a toolgate mode. `dontAsk` (Claude Code:
/// deny what no rule allows) is `ask` with every question answered `deny`.
/// `Err` names a value toolgate does not know.
pub fn agent_mode(agent: Agent, value: &str) -> Result<(Mode, bool), String> {
    match (agent, value) {
        (_, "dontAsk") => Ok((Mode::Ask, true)),
        (Agent::Qwen, "yolo") => Ok((Mode::Auto, false)),
        (Agent::Qwen, "auto-edit" | "autoEdit") => Ok((Mode::AutoEdit, false)),
        (_, value) => value
            .parse::<Mode>()
            .map(|mode| (mode, false))
            .map_err(|err| err.to_string()),
    }
}

/// A hook call read: where it runs, what it asks, in which mode.
struct Parsed<'a> {
    session: &'a str,
    call: &'a str,
    sub_agent: Option<String>,
    mode: Mode,
    never_ask: bool,
    tool: &'a str,
    input: Map<String, Value>,
    cwd: Option<&'a str>,
}

impl Parsed<'_> {
    /// The `tool_call` in `session`, for a broker in this process (its
    /// input taken).
    fn tool_call(&mut self, session: &str) -> ClientFrame {
        ClientFrame::ToolCall(toolgate_protocol::ToolCall {
            session_id: session.to_string(),
            call_id: self.call.to_string(),
            tool: self.tool.to_string(),
            input: std::mem::take(&mut self.input),
            read_only_hint: None,
            cwd: self.cwd.map(str::to_string),
        })
    }

    /// The `tool_call` in `session`, as the broker's socket reads it.
    fn tool_call_json(&self, session: &str) -> Value {
        let mut frame = json!({
            "type": "tool_call",
            "callID": self.call,
            "tool": self.tool,
            "input": self.input,
        });
        if let Some(cwd) = self.cwd {
            frame["cwd"] = json!(cwd);
        }
        frame["sessionID"] = json!(session);
        frame
    }
}

/// Read the hook input. `flag` is `--mode` (or `TOOLGATE_MODE`): with the
/// agent's own mode, the stricter applies; with neither, `default`.
fn parse<'a>(
    agent: Agent,
    input: &'a Value,
    flag: Option<Mode>,
    default: Mode,
) -> Result<Parsed<'a>, Answer> {
    let Value::Object(fields) = input else {
        return Err(Answer::deny(
            "toolgate hook: the hook input is not a JSON object".into(),
        ));
    };
    let text = |key: &str| fields.get(key).and_then(Value::as_str);
    let Some(tool) = text("tool_name").filter(|tool| !tool.is_empty()) else {
        return Err(Answer::deny(
            "toolgate hook: the hook input has no `tool_name`".into(),
        ));
    };
    let tool_input = match fields.get("tool_input") {
        Some(Value::Object(object)) => object.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => {
            return Err(Answer::deny(
                "toolgate hook: `tool_input` is not a JSON object".into(),
            ))
        }
    };
    let session = text("session_id").unwrap_or("main");
    let call = text("tool_use_id").unwrap_or("hook");
    let sub_agent = sub_agent(fields).map_err(Answer::deny)?;
    let (own, never_ask) = match text("permission_mode") {
        None => (None, false),
        Some(value) => match agent_mode(agent, value) {
            Ok((mode, never_ask)) => (Some(mode), never_ask),
            Err(err) => {
                return Err(Answer::deny(format!(
                "toolgate hook: `permission_mode` {value:?} is not a mode toolgate knows ({err})"
            )))
            }
        },
    };
    let mode = match (flag, own) {
        (Some(flag), Some(own)) if own.strictness() > flag.strictness() => own,
        (Some(flag), _) => flag,
        (None, Some(own)) => own,
        (None, None) => default,
    };
    Ok(Parsed {
        session,
        call,
        sub_agent,
        mode,
        // Gemini CLI cannot ask, and its hook does not say whether it would.
        never_ask: never_ask || agent == Agent::Gemini,
        tool,
        input: tool_input,
        cwd: text("cwd"),
    })
}

/// Decide the call `input` (the hook's stdin, parsed) with `broker`. `flag`
/// is `--mode` (or `TOOLGATE_MODE`): with the agent's own mode, the stricter
/// applies; with neither, `default` (the policy's mode).
pub fn decide(
    agent: Agent,
    input: &Value,
    flag: Option<Mode>,
    default: Mode,
    binding: &Binding,
    broker: &mut Broker,
) -> Answer {
    let mut parsed = match parse(agent, input, flag, default) {
        Ok(parsed) => parsed,
        Err(answer) => return answer,
    };
    let (session, mode) = (parsed.session, parsed.mode);
    // The orchestrator's parent and scope bind the agent's session first.
    let bind = match binding.start(session, flag.map(Mode::as_str)) {
        Ok(bind) => bind,
        Err(err) => return Answer::deny(format!("toolgate hook: {err}")),
    };
    let set_mode = |session: &str| {
        ClientFrame::SetMode(toolgate_protocol::SetMode {
            session_id: session.to_string(),
            mode: mode.as_str().to_string(),
        })
    };
    let mut frames: Vec<ClientFrame> = bind.into_iter().collect();
    let caller = match &parsed.sub_agent {
        None => {
            frames.push(set_mode(session));
            session.to_string()
        }
        Some(agent) => {
            let child = child_session(session, agent);
            // The agent's session keeps the mode its own calls gave it (a
            // sub-agent may report a looser mode: a custom agent's own
            // `permissionMode`); only a session the broker has not seen
            // takes the mode this call reports.
            if !broker.has_own_mode(session) {
                frames.push(set_mode(session));
            }
            // The child inherits the parent's scope when it starts, and its
            // effective mode is never looser than the parent's.
            frames.push(if broker.is_started(&child) {
                set_mode(&child)
            } else {
                ClientFrame::SessionStart(toolgate_protocol::SessionStart {
                    session_id: child.clone(),
                    parent_id: Some(session.to_string()),
                    mode: Some(mode.as_str().to_string()),
                    permissions: None,
                    join: false,
                })
            });
            child
        }
    };
    frames.push(parsed.tool_call(&caller));
    let mut outputs = Vec::new();
    broker.step(Input::Opened { conn: 0 }, &mut outputs);
    for (number, frame) in (1..).zip(frames) {
        broker.step(
            Input::Frame {
                conn: 0,
                frame,
                number: Some(number),
            },
            &mut outputs,
        );
    }
    // The next call decides from what is on disk: what this one changed
    // (a session's mode, a sub-agent's start) must be there, or the call
    // is denied.
    if let Err(err) = broker.save_now() {
        return Answer::deny(format!(
            "toolgate hook: the state directory could not be written ({err}); denied rather than decided on a state the next call would not see"
        ));
    }
    let out: Vec<ServerFrame> = outputs.into_iter().map(|output| output.frame).collect();
    answer(&out, &caller, parsed.call, parsed.never_ask)
}

/// Decide the call `input` with the broker at `broker` (its socket, or a
/// remote broker), as one of
/// its agent connections (client `NAME-hook`): its sessions, grants,
/// doom-loop counts and approvers decide. A question no approver hears is
/// withdrawn and answered `ask` (the agent prompts; `deny` where it cannot).
/// The broker must answer before `wait` runs out (then: `deny`); no broker
/// there is a `deny` naming where it was looked for, never a fallback to a policy of
/// this process's own, which could be looser than the broker's.
#[cfg(unix)]
pub fn decide_remote(
    agent: Agent,
    input: &Value,
    flag: Option<Mode>,
    binding: &Binding,
    broker: &crate::transport::client::Endpoint,
    wait: std::time::Duration,
) -> Answer {
    use crate::transport::client::{Client, ClientError, Outcome};
    let deadline = std::time::Instant::now() + wait;
    let parsed = match parse(agent, input, flag, Mode::Ask) {
        Ok(parsed) => parsed,
        Err(answer) => return answer,
    };
    let (session, mode) = (parsed.session, parsed.mode);
    let mut frames = Vec::new();
    if !binding.is_empty() {
        frames.push(binding.start_json(session, flag.map(Mode::as_str)));
    }
    let caller = match &parsed.sub_agent {
        None => {
            // Without a mode of its own or --mode, the broker's mode holds.
            if flag.is_some() || input.get("permission_mode").is_some() {
                frames
                    .push(json!({"type": "set_mode", "sessionID": session, "mode": mode.as_str()}));
            }
            session.to_string()
        }
        Some(agent) => {
            // Each hook call is a new process: the child is joined if an
            // earlier call started it, started otherwise (under the agent's
            // session, inheriting its scope; never looser than it).
            let child = child_session(session, agent);
            frames.push(json!({"type": "session_start", "sessionID": child, "parentID": session, "mode": mode.as_str(), "join": true}));
            frames.push(json!({"type": "set_mode", "sessionID": child, "mode": mode.as_str()}));
            child
        }
    };
    frames.push(parsed.tool_call_json(&caller));
    let name = match agent {
        Agent::Claude => "claude-hook",
        Agent::Qwen => "qwen-hook",
        Agent::Gemini => "gemini-hook",
        Agent::Codex => "codex-hook",
    };
    // Every step (connecting, writing, reading) ends by the deadline: a
    // broker that stopped answering holds the hook no longer than --wait.
    let mut client = match Client::connect(broker, toolgate_protocol::Role::Agent, name, deadline)
    {
        Ok(client) => client,
        Err(ClientError::TimedOut) => {
            return Answer::deny(format!(
                "toolgate hook: no decision within {} s (--wait): the broker at {} did not take the call (it is stopped or stuck); denied before the agent's own hook timeout",
                wait.as_secs(),
                broker.label()
            ))
        }
        Err(err) => return Answer::deny(format!("toolgate hook: {err}")),
    };
    match client.call(&frames, &caller, parsed.call, Some(deadline)) {
        Ok(Outcome::Decided(decision)) => answer(
            &[ServerFrame::Decision(decision)],
            &caller,
            parsed.call,
            false,
        ),
        Ok(Outcome::Asked(request)) => {
            // No approver is connected: withdraw the question.
            client.withdraw(&caller, parsed.call);
            answer(
                &[ServerFrame::PermissionRequest(Box::new(request))],
                &caller,
                parsed.call,
                parsed.never_ask,
            )
        }
        Err(ClientError::TimedOut) => {
            client.withdraw(&caller, parsed.call);
            Answer::deny(format!(
                "toolgate hook: no decision within {} s (--wait): nobody answered the question, or the broker stopped answering; denied before the agent's own hook timeout",
                wait.as_secs()
            ))
        }
        Err(err) => Answer::deny(format!("toolgate hook: {err}")),
    }
}
/// The sub-agent a call comes from: Claude Code and qwen-code send
/// `agent_id` (with `agent_type`) for calls made inside a sub-agent, and
/// `agent_type` alone on the main thread of a session started with
/// `--agent` (which is no sub-agent). Gemini CLI and Codex send neither.
/// `Err` is the reason to deny a call whose `agent_id` is unusable.
pub fn sub_agent(fields: &Map<String, Value>) -> Result<Option<String>, String> {
    match fields.get("agent_id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) if !id.trim().is_empty() && !id.contains('/') => {
            Ok(Some(id.clone()))
        }
        Some(Value::String(id)) => Err(format!(
            "toolgate hook: `agent_id` {id:?} is not a sub-agent id (empty, or holds a `/`)"
        )),
        Some(_) => Err("toolgate hook: `agent_id` is not a string".to_string()),
    }
}

/// The child session a sub-agent's calls run in: `SESSION/agent/AGENT_ID`.
pub fn child_session(session: &str, agent_id: &str) -> String {
    format!("{session}/agent/{agent_id}")
}

/// The answer for `call` of `session` among the frames the broker wrote.
fn answer(out: &[ServerFrame], session: &str, call: &str, never_ask: bool) -> Answer {
    for frame in out {
        match frame {
            ServerFrame::Decision(decision)
                if decision.call_id == call && decision.session_id == session =>
            {
                let mut reason = decision.reason.clone();
                if let Some(message) = &decision.message {
                    reason = format!("{reason}: {message}");
                }
                return Answer {
                    decision: match decision.decision {
                        Verdict::Allow => "allow",
                        Verdict::Deny => "deny",
                    },
                    reason: format!("toolgate: {reason}"),
                    reminder: decision.reminder.clone(),
                };
            }
            ServerFrame::PermissionRequest(request)
                if request.call_id == call && request.session_id == session =>
            {
                let why = request
                    .metadata
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("the policy asks the user first")
                    .to_string();
                return if never_ask {
                    Answer::deny(format!(
                        "toolgate: {why}; nobody can be asked here (the agent runs without asking, or its hook cannot ask), so it is denied"
                    ))
                } else {
                    Answer {
                        decision: "ask",
                        reason: format!("toolgate: {why}"),
                        reminder: None,
                    }
                };
            }
            _ => {}
        }
    }
    let errors: Vec<String> = out
        .iter()
        .filter_map(|frame| match frame {
            ServerFrame::Error(error) => Some(error.message.clone()),
            _ => None,
        })
        .collect();
    Answer::deny(format!(
        "toolgate hook: the call got no decision ({})",
        if errors.is_empty() {
            "no error was reported".to_string()
        } else {
            errors.join("; ")
        }
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic

    use super::*;

    #[test]
    fn agent_modes() {
        let cases = [
            (Agent::Claude, "default", Ok((Mode::Ask, false))),
            (Agent::Claude, "plan", Ok((Mode::Plan, false))),
            (Agent::Claude, "acceptEdits", Ok((Mode::AutoEdit, false))),
            (Agent::Claude, "bypassPermissions", Ok((Mode::Auto, false))),
            (Agent::Claude, "dontAsk", Ok((Mode::Ask, true))),
            (Agent::Qwen, "yolo", Ok((Mode::Auto, false))),
            (Agent::Qwen, "auto-edit", Ok((Mode::AutoEdit, false))),
            (Agent::Qwen, "plan", Ok((Mode::Plan, false))),
        ];
        for (agent, value, expected) in cases {
            assert_eq!(agent_mode(agent, value), expected, "{value}");
        }
        assert!(agent_mode(Agent::Claude, "careful").is_err());
    }
}
