//! Claude Code session transcripts (`~/.claude/projects/DIR/SESSION.jsonl`,
//! and a sub-agent's `SESSION/subagents/agent-ID.jsonl`) as recordings.
//!
//! What is read (Claude Code 2.1.328; `tests/replay/claude/` holds real
//! transcripts, `scripts/record-fixtures` makes them):
//!
//! - Only `assistant` records' `tool_use` blocks are calls; the other
//!   record types (`attachment`, `api-request-blob` copies of the request,
//!   ...) are not, even where they hold such blocks. A streamed message can
//!   repeat a block on several records: each `tool_use` id is one call.
//! - The session is the record's `sessionId`. A record of a sub-agent
//!   (`isSidechain` with `agentId`) belongs to the child session
//!   `SESSION/agent/AGENT_ID` under it, as toolgate's hooks name it.
//! - The mode is the `permissionMode` of the session's user records
//!   (`default` ask, `acceptEdits` auto_edit, `plan`, `bypassPermissions`
//!   auto, `dontAsk` ask); a change is a `set_mode`. A sub-agent's session
//!   inherits its parent's mode.
//! - A `tool_result` says what became of its call: refused when Claude Code
//!   refused it (a permission rule's denial, a hook's, the user's "doesn't
//!   want to proceed", a permission `-p` could not ask for, plan mode's
//!   "Cannot write ... while in plan mode"), which the
//!   replay answers `reject` with that text and `--check` compares as a
//!   `deny`; otherwise it ran (`once`; `allow`). A call with no result has
//!   no outcome: a question about it is left unanswered.
//! - Each call is judged at its record's `timestamp`, in its `cwd`.

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::{json, Value};

use super::event::{Event, Frame};
use super::record::{epoch_ms, Outcome, ReadFrom};

/// The texts with which Claude Code tells the model a call was refused,
/// read only where the record has no `permissionDecision` (older versions).
const REFUSALS: &[&str] = &[
    "has been denied",
    "requires approval",
    "require approval",
    "needs approval",
    "doesn't want to proceed",
    "haven't granted it yet",
    "hook error",
    "blocked by",
    "was rejected",
    "Permission denied by",
    "while in plan mode",
];

/// What a tool result's `permissionDecision` (Claude Code 2.1.328 writes
/// one on the record holding the result: `decision` accept or reject, and
/// its `source`: `config` for its mode and rules, `hook`, `user_temporary`,
/// `user_permanent` or `user_reject` for a person's answer) says became of
/// the call; `None` when it cannot be read. `text` is what the model was
/// told.
fn permission_decision(decision: &Value, text: &str) -> Option<Outcome> {
    let field = |key: &str| decision.get(key).and_then(Value::as_str);
    let source = field("source")?;
    let by_person = source.starts_with("user");
    let why = [
        field("reasonType"),
        field("reasonCode"),
        field("ruleSource"),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(", ");
    match field("decision")? {
        "accept" if by_person => Some(Outcome::Answered(json!({"response": "once"}))),
        "accept" => Some(Outcome::Allowed(format!(
            "Claude Code's {source} allowed it without asking anyone{}",
            if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            }
        ))),
        "reject" if by_person => Some(Outcome::Answered(
            json!({"response": "reject", "message": text}),
        )),
        "reject" => Some(Outcome::Refused(Some(text.to_string()))),
        _ => None,
    }
}

/// Who refused a call, from its `permissionDecision` and
/// `toolDenialKind`, for `--check`: `Claude Code's config refused it
/// (permission-rule; rule:projectSettings)`.
fn refusal_kind(decision: &Value, record: &Value) -> String {
    let field = |key: &str| decision.get(key).and_then(Value::as_str);
    let kind = record
        .get("toolDenialKind")
        .and_then(Value::as_str)
        .unwrap_or("refused");
    let details = [Some(kind), field("reasonCode")]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; ");
    format!(
        "Claude Code's {} refused it: {details}",
        field("source").unwrap_or("configuration")
    )
}

/// Whether `value` is a Claude Code transcript record.
pub fn is_record(value: &Value) -> bool {
    value.get("sessionId").is_some()
        && value.get("uuid").is_some()
        && value.get("type").and_then(Value::as_str).is_some()
}

/// A `permissionMode` as a toolgate mode.
fn mode(permission_mode: &str) -> Option<&'static str> {
    Some(match permission_mode {
        "default" | "dontAsk" => "ask",
        "acceptEdits" => "auto_edit",
        "plan" => "plan",
        "bypassPermissions" => "auto",
        _ => return None,
    })
}

/// The text of a `tool_result`'s content (a string, or text blocks).
fn result_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// How many finished calls' ids are remembered, so that a block streamed
/// again after its result is still known as the same call.
const FINISHED: usize = 4096;

/// A transcript's reader (a session's transcripts, one after the other:
/// the sessions one started are not started again): the sessions started
/// and their modes, and the calls whose result has not come yet.
#[derive(Debug, Default)]
pub struct Reader {
    started: HashSet<String>,
    /// The sessions in the order started.
    order: Vec<String>,
    modes: HashMap<String, &'static str>,
    /// The calls whose result has not come yet: id → session.
    session_of: HashMap<String, String>,
    /// The latest calls that had their result (at most [`FINISHED`]).
    finished: HashSet<String>,
    finished_order: VecDeque<String>,
    /// Where the outcomes were read from.
    pub read_from: ReadFrom,
}

impl Reader {
    fn start(&mut self, session: &str) -> bool {
        if self.started.insert(session.to_string()) {
            self.order.push(session.to_string());
            return true;
        }
        false
    }

    fn finished(&mut self, id: &str) {
        if self.finished.insert(id.to_string()) {
            self.finished_order.push_back(id.to_string());
        }
        while self.finished_order.len() > FINISHED {
            if let Some(old) = self.finished_order.pop_front() {
                self.finished.remove(&old);
            }
        }
    }

    /// Read line `number` of a transcript (`name` names it in warnings).
    pub fn line(&mut self, name: &str, number: usize, line: &str, out: &mut Vec<Event>) {
        if line.trim().is_empty() {
            return;
        }
        let record: Value = match serde_json::from_str(line) {
            Ok(record) => record,
            Err(err) => {
                out.push(Event::Warning(format!(
                    "{name}:{number}: not JSON ({err}); skipped"
                )));
                return;
            }
        };
        let kind = record.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "assistant" && kind != "user" {
            return;
        }
        let Some(main) = record.get("sessionId").and_then(Value::as_str) else {
            return;
        };
        let agent = record
            .get("agentId")
            .and_then(Value::as_str)
            .filter(|_| record.get("isSidechain").and_then(Value::as_bool) == Some(true));
        let session = match agent {
            Some(agent) => crate::adapters::hook::child_session(main, agent),
            None => main.to_string(),
        };
        // The session (and, for a sub-agent, its parent) is started first.
        if agent.is_some() && self.start(main) {
            out.push(Event::Frame(Frame::Built(
                json!({"type": "session_start", "sessionID": main}),
            )));
        }
        let recorded_mode = record
            .get("permissionMode")
            .and_then(Value::as_str)
            .and_then(mode);
        if self.start(&session) {
            let mut start = json!({"type": "session_start", "sessionID": session});
            if agent.is_some() {
                start["parentID"] = json!(main);
            }
            if let Some(mode) = recorded_mode {
                start["mode"] = json!(mode);
                self.modes.insert(session.clone(), mode);
            }
            out.push(Event::Frame(Frame::Built(start)));
        } else if let Some(mode) = recorded_mode {
            if self.modes.get(&session) != Some(&mode) {
                out.push(Event::Frame(Frame::Built(
                    json!({"type": "set_mode", "sessionID": session, "mode": mode}),
                )));
                self.modes.insert(session.clone(), mode);
            }
        }
        let Some(blocks) = record.pointer("/message/content").and_then(Value::as_array) else {
            return;
        };
        let time = record
            .get("timestamp")
            .and_then(Value::as_str)
            .and_then(epoch_ms);
        let cwd = record.get("cwd").and_then(Value::as_str);
        let results = blocks
            .iter()
            .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
            .count();
        for block in blocks {
            match (kind, block.get("type").and_then(Value::as_str)) {
                ("assistant", Some("tool_use")) => {
                    let (Some(id), Some(tool)) = (
                        block.get("id").and_then(Value::as_str),
                        block.get("name").and_then(Value::as_str),
                    ) else {
                        out.push(Event::Warning(format!(
                            "{name}:{number}: a tool_use without its id or name; skipped"
                        )));
                        continue;
                    };
                    if self.session_of.contains_key(id) || self.finished.contains(id) {
                        continue; // The same block, streamed again.
                    }
                    let mut frame = json!({"type": "tool_call", "sessionID": session, "callID": id,
                        "tool": tool, "input": block.get("input").cloned().unwrap_or(json!({}))});
                    if let Some(cwd) = cwd {
                        frame["cwd"] = json!(cwd);
                    }
                    out.push(Event::Frame(Frame::Built(frame)));
                    if let Some(time) = time {
                        out.push(Event::Time((session.clone(), id.to_string()), time));
                    }
                    self.session_of.insert(id.to_string(), session.clone());
                }
                ("user", Some("tool_result")) => {
                    let Some(id) = block.get("tool_use_id").and_then(Value::as_str) else {
                        continue;
                    };
                    // A call not made here, or whose result came already.
                    let Some(call_session) = self.session_of.remove(id) else {
                        continue;
                    };
                    self.finished(id);
                    let key = (call_session, id.to_string());
                    let text = result_text(block.get("content").unwrap_or(&Value::Null));
                    let error = block.get("is_error").and_then(Value::as_bool) == Some(true);
                    // The record's own permission decision, when it is about
                    // this one result only.
                    let decided = record
                        .get("permissionDecision")
                        .filter(|_| results == 1)
                        .and_then(|decision| permission_decision(decision, &text));
                    let outcome = match decided {
                        Some(outcome) => {
                            self.read_from.fields += 1;
                            outcome
                        }
                        None => {
                            self.read_from.text += 1;
                            if error && REFUSALS.iter().any(|phrase| text.contains(phrase)) {
                                Outcome::Refused(Some(text.clone()))
                            } else {
                                Outcome::Ran
                            }
                        }
                    };
                    let refusal = record
                        .get("permissionDecision")
                        .filter(|_| results == 1)
                        .map(|decision| refusal_kind(decision, &record));
                    let (verdict, reason) = match &outcome {
                        Outcome::Refused(_) => match refusal {
                            Some(kind) => ("deny", format!("{text} ({kind})")),
                            None => ("deny", text),
                        },
                        Outcome::Answered(answer) if answer["response"] == "reject" => {
                            ("deny", text)
                        }
                        Outcome::Allowed(by) => ("allow", by.clone()),
                        _ => ("allow", "Claude Code ran it".to_string()),
                    };
                    out.push(Event::Outcome(key.clone(), outcome));
                    out.push(Event::Recorded(key, verdict.to_string(), reason));
                }
                _ => {}
            }
        }
    }

    /// The end of the session's transcripts: every session started ends,
    /// sub-agents' before their parent's.
    pub fn finish(&mut self, out: &mut Vec<Event>) {
        let mut ends = std::mem::take(&mut self.order);
        ends.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        for session in ends {
            out.push(Event::Frame(Frame::Built(
                json!({"type": "session_end", "sessionID": session}),
            )));
        }
        self.started.clear();
    }
}

/// The session a transcript is about and the working directory it
/// recorded, from its first `lines` that say: the first user or assistant
/// record's `sessionId`, and the first `cwd` of a record with content.
pub fn peek(record: &Value, found: &mut (Option<String>, Option<String>)) {
    let kind = record.get("type").and_then(Value::as_str).unwrap_or("");
    if kind != "assistant" && kind != "user" {
        return;
    }
    let Some(main) = record.get("sessionId").and_then(Value::as_str) else {
        return;
    };
    if found.0.is_none() {
        found.0 = Some(main.to_string());
    }
    if found.1.is_none()
        && record
            .pointer("/message/content")
            .is_some_and(Value::is_array)
    {
        found.1 = record
            .get("cwd")
            .and_then(Value::as_str)
            .map(str::to_string);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assistant(session: &str, agent: Option<&str>, id: &str, tool: &str, input: Value) -> String {
        let mut record = json!({"type": "assistant", "sessionId": session, "uuid": "u", "cwd": "/p",
            "timestamp": "2026-11-24T03:21:39.409Z", "isSidechain": agent.is_some(),
            "message": {"id": "msg_1", "content": [{"type": "tool_use", "id": id, "name": tool, "input": input}]}});
        if let Some(agent) = agent {
            record["agentId"] = json!(agent);
        }
        record.to_string()
    }

    fn result(session: &str, id: &str, error: bool, text: &str) -> String {
        json!({"type": "user", "sessionId": session, "uuid": "u", "message": {"content": [
            {"type": "tool_result", "tool_use_id": id, "is_error": error, "content": text}]}})
        .to_string()
    }

    fn user(session: &str, mode: &str) -> String {
        json!({"type": "user", "sessionId": session, "uuid": "u", "permissionMode": mode,
               "message": {"content": "go"}})
        .to_string()
    }

    #[test]
    fn calls_sessions_modes_and_outcomes() {
        let lines = [
            user("s", "plan"),
            assistant("s", None, "t1", "Read", json!({"file_path": "a"})),
            // Streamed again, and copied into a request blob: one call.
            assistant("s", None, "t1", "Read", json!({"file_path": "a"})),
            json!({"type": "api-request-blob", "sessionId": "s", "uuid": "u", "message": {"content": [
                {"type": "tool_use", "id": "t9", "name": "Bash", "input": {"command": "rm -rf /"}}]}})
            .to_string(),
            result("s", "t1", false, "1\tthe notes"),
            assistant("s", None, "t2", "Write", json!({"file_path": "b", "content": "x"})),
            result("s", "t2", true, "Permission to use Write has been denied."),
            user("s", "acceptEdits"),
            assistant("s", Some("ag1"), "t3", "Bash", json!({"command": "ls"})),
            result("s", "t3", true, "ls: cannot access"),
            assistant("s", None, "t4", "Bash", json!({"command": "make"})),
            "{not json".to_string(),
        ];
        let recording = super::super::event::read_all(
            super::super::Format::Claude,
            &lines.join("\n"),
            "t.jsonl",
        );
        let frames: Vec<String> = recording
            .frames
            .iter()
            .map(|frame| {
                format!(
                    "{} {} {}{}",
                    frame["type"].as_str().unwrap_or(""),
                    frame["sessionID"].as_str().unwrap_or(""),
                    frame["callID"]
                        .as_str()
                        .or(frame["mode"].as_str())
                        .unwrap_or(""),
                    frame["parentID"]
                        .as_str()
                        .map(|p| format!(" <{p}"))
                        .unwrap_or_default()
                )
            })
            .collect();
        assert_eq!(
            frames,
            vec![
                "session_start s plan",
                "tool_call s t1",
                "tool_call s t2",
                "set_mode s auto_edit",
                "session_start s/agent/ag1  <s",
                "tool_call s/agent/ag1 t3",
                "tool_call s t4",
                "session_end s/agent/ag1 ",
                "session_end s ",
            ]
        );
        let key = |s: &str, c: &str| (s.to_string(), c.to_string());
        assert_eq!(recording.outcomes[&key("s", "t1")], Outcome::Ran);
        assert_eq!(
            recording.outcomes[&key("s", "t2")],
            Outcome::Refused(Some("Permission to use Write has been denied.".into()))
        );
        // A tool's own error is not a refusal: it ran.
        assert_eq!(recording.outcomes[&key("s/agent/ag1", "t3")], Outcome::Ran);
        assert!(!recording.outcomes.contains_key(&key("s", "t4")));
        assert_eq!(recording.decisions[&key("s", "t2")].0, "deny");
        assert_eq!(recording.times[&key("s", "t1")], 1_795_490_499_409);
        assert_eq!(recording.warnings.len(), 1, "{:?}", recording.warnings);
        assert!(recording.warnings[0].starts_with("t.jsonl:12: not JSON"));
    }
}
