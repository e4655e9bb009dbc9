//! Claude Code's control messages as the bridge reads and writes them:
//! what a line from Claude Code is, what a line from the orchestrator is,
//! the answers, and the `initialize` that registers toolgate's hook.

use serde_json::{json, Map, Value};

use crate::adapters::mcp::{Approval, Verdict};

/// The callback id of the `PreToolUse` hook the bridge registers in
/// Claude Code's `initialize`: Claude Code calls it before every tool
/// runs, including those its own settings would allow without asking.
pub const HOOK_ID: &str = "toolgate_pre_tool_use";

/// What a line from Claude Code is to the bridge.
#[derive(Debug, PartialEq)]
pub enum FromClaude {
    /// A permission question (`can_use_tool`), to be answered to
    /// `request_id`: the call, or why it cannot be read (to be denied with
    /// that message).
    Ask {
        /// Claude Code's id of the question.
        request_id: String,
        /// The call asked about, or the denial's message.
        approval: Result<Approval, String>,
    },
    /// A call of toolgate's `PreToolUse` hook ([`HOOK_ID`]), to be answered
    /// to `request_id` with the hook's output: the call, or why it cannot
    /// be read (to be denied with that message).
    Hook {
        /// Claude Code's id of the request.
        request_id: String,
        /// The call about to run, or the denial's message.
        approval: Result<Approval, String>,
    },
    /// Claude Code withdrew the request with this id.
    Cancel(String),
    /// Claude Code's answer to the request with this id (one the bridge
    /// may have sent itself).
    Response(String),
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
        Some("control_response") => {
            return match response_id(message) {
                Some(id) => FromClaude::Response(id.to_string()),
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
    let Some(request) = message.get("request").and_then(Value::as_object) else {
        return FromClaude::Other(None);
    };
    let hook = match request.get("subtype").and_then(Value::as_str) {
        Some("can_use_tool") => false,
        Some("hook_callback")
            if request.get("callback_id").and_then(Value::as_str) == Some(HOOK_ID) =>
        {
            true
        }
        _ => return FromClaude::Other(None),
    };
    let request_id = match message.get("request_id") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        _ if hook => {
            return FromClaude::Dropped(
                "a call of toolgate's hook without a request_id cannot be answered".into(),
            )
        }
        _ => {
            return FromClaude::Dropped(
                "a can_use_tool request without a request_id cannot be answered".into(),
            )
        }
    };
    if hook {
        let approval = match request.get("input") {
            Some(Value::Object(input)) => hook_approval(input),
            _ => Err("toolgate: the hook call's `input` is not a JSON object".into()),
        };
        return FromClaude::Hook {
            request_id,
            approval,
        };
    }
    FromClaude::Ask {
        request_id,
        approval: approval(request),
    }
}

/// The `request_id` a `control_response` answers.
fn response_id(message: &Map<String, Value>) -> Option<&str> {
    message
        .get("response")
        .and_then(|response| response.get("request_id"))
        .and_then(Value::as_str)
}

/// A required non-empty string field of a request; `Err` names it.
fn name(fields: &Map<String, Value>, key: &str, what: &str) -> Result<String, String> {
    match fields.get(key) {
        Some(Value::String(name)) if !name.is_empty() => Ok(name.clone()),
        _ => Err(format!(
            "toolgate: the {what} has no `{key}` (a non-empty string)"
        )),
    }
}

/// An optional string field; `Err` says it is not a string.
fn optional(fields: &Map<String, Value>, key: &str, what: &str) -> Result<Option<String>, String> {
    match fields.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(format!(
            "toolgate: the `{key}` of the {what} is not a string"
        )),
    }
}

/// The call a `can_use_tool` request asks about; `Err` is the denial's message.
fn approval(request: &Map<String, Value>) -> Result<Approval, String> {
    let what = "can_use_tool request";
    let tool_name = name(request, "tool_name", what)?;
    let input = match request.get("input") {
        Some(Value::Object(input)) => input.clone(),
        _ => {
            return Err(format!(
                "toolgate: the `input` of the {what} is not a JSON object"
            ))
        }
    };
    Ok(Approval {
        tool_name,
        input,
        tool_use_id: optional(request, "tool_use_id", what)?,
        // Claude Code applied its own mode before it asked; its hook call,
        // made first, carried it.
        permission_mode: None,
        agent_id: optional(request, "agent_id", what)?,
    })
}

/// The call a `PreToolUse` hook input is about (the input a command hook
/// reads on its stdin): the tool, its input, its id, Claude Code's
/// permission mode and the sub-agent making it.
fn hook_approval(input: &Map<String, Value>) -> Result<Approval, String> {
    let what = "hook call";
    match input.get("hook_event_name").and_then(Value::as_str) {
        Some("PreToolUse") => {}
        other => {
            return Err(format!(
                "toolgate: the hook call is for {other:?}, not PreToolUse"
            ))
        }
    }
    let tool_name = name(input, "tool_name", what)?;
    let tool_input = match input.get("tool_input") {
        Some(Value::Object(object)) => object.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => {
            return Err(format!(
                "toolgate: the `tool_input` of the {what} is not a JSON object"
            ))
        }
    };
    Ok(Approval {
        tool_name,
        input: tool_input,
        tool_use_id: optional(input, "tool_use_id", what)?,
        permission_mode: optional(input, "permission_mode", what)?,
        agent_id: optional(input, "agent_id", what)?,
    })
}

/// The `control_response` answering `request_id` with `response`.
pub fn control_response(request_id: &str, response: Value) -> Value {
    json!({
        "type": "control_response",
        "response": {"subtype": "success", "request_id": request_id, "response": response},
    })
}

/// The `control_response` answering the `can_use_tool` `request_id`:
/// `allow` with the input unchanged as `updatedInput`, or `deny` with the
/// message (an `ask` nobody else may answer is a denial).
pub fn answer(request_id: &str, verdict: &Verdict, input: &Map<String, Value>) -> Value {
    let response = match verdict {
        Verdict::Allow => json!({"behavior": "allow", "updatedInput": input}),
        Verdict::Deny(message) | Verdict::Ask(message) => {
            json!({"behavior": "deny", "message": message})
        }
    };
    control_response(request_id, response)
}

/// The `control_response` answering a call of toolgate's hook: the
/// `PreToolUse` output a command hook would print. `ask` hands the call to
/// Claude Code's own question (`can_use_tool`), which the bridge then puts
/// to the orchestrator.
pub fn hook_answer(request_id: &str, verdict: &Verdict) -> Value {
    let (decision, reason) = match verdict {
        Verdict::Allow => ("allow", "toolgate: allowed"),
        Verdict::Deny(message) => ("deny", message.as_str()),
        Verdict::Ask(message) => ("ask", message.as_str()),
    };
    control_response(
        request_id,
        json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }}),
    )
}

/// toolgate's hook as an `initialize` request's `hooks` entry.
fn hook_matcher() -> Value {
    json!({"matcher": null, "hookCallbackIds": [HOOK_ID]})
}

/// The `initialize` request the bridge sends itself, as `request_id`, when
/// the orchestrator's first line is not one.
pub fn initialize(request_id: &str) -> Value {
    json!({
        "type": "control_request",
        "request_id": request_id,
        "request": {"subtype": "initialize", "hooks": {"PreToolUse": [hook_matcher()]}},
    })
}

/// What a line from the orchestrator is to the bridge.
#[derive(Debug, PartialEq)]
pub enum FromOrchestrator {
    /// Its `initialize`, with toolgate's hook put first among its
    /// `PreToolUse` hooks: the line to pass on. The text says what of the
    /// orchestrator's was replaced, if anything (hooks that are not an
    /// object, `PreToolUse` hooks that are not a list).
    Initialize(Vec<u8>, Option<String>),
    /// A `control_response` answering the request with this id; the
    /// response itself.
    Response(String, Map<String, Value>),
    /// Anything else: passed on unchanged.
    Other,
}

/// Read one line from the orchestrator.
pub fn from_orchestrator(line: &[u8]) -> FromOrchestrator {
    let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(line) else {
        return FromOrchestrator::Other;
    };
    match message.get("type").and_then(Value::as_str) {
        Some("control_response") => {
            let Some(id) = response_id(&message).map(str::to_string) else {
                return FromOrchestrator::Other;
            };
            let response = message
                .get("response")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            FromOrchestrator::Response(id, response)
        }
        Some("control_request") => {
            let Some(request) = message.get_mut("request").and_then(Value::as_object_mut) else {
                return FromOrchestrator::Other;
            };
            if request.get("subtype").and_then(Value::as_str) != Some("initialize") {
                return FromOrchestrator::Other;
            }
            let mut replaced = None;
            let hooks = request.entry("hooks").or_insert(Value::Null);
            if hooks.is_null() {
                *hooks = json!({});
            }
            if !hooks.is_object() {
                replaced = Some("the orchestrator's `hooks`, which are not an object".into());
                *hooks = json!({});
            }
            if let Some(hooks) = hooks.as_object_mut() {
                let pre = hooks.entry("PreToolUse").or_insert_with(|| json!([]));
                if !pre.is_array() {
                    replaced =
                        Some("the orchestrator's `PreToolUse` hooks, which are not a list".into());
                    *pre = json!([]);
                }
                if let Some(list) = pre.as_array_mut() {
                    list.insert(0, hook_matcher());
                }
            }
            let line = serde_json::to_vec(&Value::Object(message)).unwrap_or_default();
            FromOrchestrator::Initialize(line, replaced)
        }
        _ => FromOrchestrator::Other,
    }
}

/// The orchestrator's answer to a `can_use_tool` it was shown.
#[derive(Debug, PartialEq)]
pub enum Answered {
    /// Allowed, with this input (its `updatedInput`, else the input asked
    /// about).
    Allow(Map<String, Value>),
    /// Denied: passed on as it is.
    Deny,
    /// Not a permission answer the bridge can read: denied, saying why.
    Unreadable(String),
}

/// Read the orchestrator's `response` (the `control_response`'s
/// `response` object) to a question about `input`.
pub fn answered(response: &Map<String, Value>, input: &Map<String, Value>) -> Answered {
    if response.get("subtype").and_then(Value::as_str) != Some("success") {
        return Answered::Deny;
    }
    let Some(decision) = response.get("response").and_then(Value::as_object) else {
        return Answered::Unreadable("its `response` is not an object".into());
    };
    match decision.get("behavior").and_then(Value::as_str) {
        Some("allow") => match decision.get("updatedInput") {
            None | Some(Value::Null) => Answered::Allow(input.clone()),
            Some(Value::Object(updated)) => Answered::Allow(updated.clone()),
            Some(_) => Answered::Unreadable("its `updatedInput` is not an object".into()),
        },
        Some("deny") => Answered::Deny,
        other => Answered::Unreadable(format!("its `behavior` is {other:?}, not allow or deny")),
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
        let hook = br#"{"type":"control_request","request_id":"h1","request":{"subtype":"hook_callback","callback_id":"toolgate_pre_tool_use","input":{"session_id":"s","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"},"tool_use_id":"t2","permission_mode":"plan","agent_id":"a1"}}}"#;
        let FromClaude::Hook {
            request_id,
            approval,
        } = classify(hook)
        else {
            panic!("not a hook call");
        };
        assert_eq!(request_id, "h1");
        let approval = approval.unwrap();
        assert_eq!(approval.permission_mode.as_deref(), Some("plan"));
        assert_eq!(approval.agent_id.as_deref(), Some("a1"));
        for (line, expected) in [
            (&br#"{"type":"system","subtype":"init","session_id":"s1"}"#[..], FromClaude::Other(Some("s1".into()))),
            (br#"{"type":"control_request","request_id":"r2","request":{"subtype":"initialize"}}"#, FromClaude::Other(None)),
            (br#"{"type":"control_request","request_id":"r2","request":{"subtype":"hook_callback","callback_id":"hook_0","input":{}}}"#, FromClaude::Other(None)),
            (br#"{"type":"control_cancel_request","request_id":"r1"}"#, FromClaude::Cancel("r1".into())),
            (br#"{"type":"control_response","response":{"subtype":"success","request_id":"i1"}}"#, FromClaude::Response("i1".into())),
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
        let post = br#"{"type":"control_request","request_id":"h2","request":{"subtype":"hook_callback","callback_id":"toolgate_pre_tool_use","input":{"hook_event_name":"PostToolUse","tool_name":"Bash"}}}"#;
        assert_eq!(
            classify(post),
            FromClaude::Hook {
                request_id: "h2".into(),
                approval: Err(
                    "toolgate: the hook call is for Some(\"PostToolUse\"), not PreToolUse".into()
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
        assert_eq!(
            hook_answer("h1", &Verdict::Ask("why".into())).to_string(),
            r#"{"type":"control_response","response":{"subtype":"success","request_id":"h1","response":{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"why"}}}}"#
        );
    }

    #[test]
    fn the_hook_goes_first_into_the_orchestrators_initialize() {
        let cases = [
            (
                r#"{"type":"control_request","request_id":"i","request":{"subtype":"initialize","hooks":null}}"#,
                r#"{"PreToolUse":[{"hookCallbackIds":["toolgate_pre_tool_use"],"matcher":null}]}"#,
                false,
            ),
            (
                r#"{"type":"control_request","request_id":"i","request":{"subtype":"initialize"}}"#,
                r#"{"PreToolUse":[{"hookCallbackIds":["toolgate_pre_tool_use"],"matcher":null}]}"#,
                false,
            ),
            (
                r#"{"type":"control_request","request_id":"i","request":{"subtype":"initialize","hooks":{"PreToolUse":[{"matcher":"Bash","hookCallbackIds":["hook_0"]}],"Stop":[]}}}"#,
                r#"{"PreToolUse":[{"hookCallbackIds":["toolgate_pre_tool_use"],"matcher":null},{"hookCallbackIds":["hook_0"],"matcher":"Bash"}],"Stop":[]}"#,
                false,
            ),
            (
                r#"{"type":"control_request","request_id":"i","request":{"subtype":"initialize","hooks":"x"}}"#,
                r#"{"PreToolUse":[{"hookCallbackIds":["toolgate_pre_tool_use"],"matcher":null}]}"#,
                true,
            ),
            (
                r#"{"type":"control_request","request_id":"i","request":{"subtype":"initialize","hooks":{"PreToolUse":{}}}}"#,
                r#"{"PreToolUse":[{"hookCallbackIds":["toolgate_pre_tool_use"],"matcher":null}]}"#,
                true,
            ),
        ];
        for (line, hooks, replaced) in cases {
            let FromOrchestrator::Initialize(out, said) = from_orchestrator(line.as_bytes()) else {
                panic!("not an initialize: {line}");
            };
            let out: Value = serde_json::from_slice(&out).unwrap();
            let hooks: Value = serde_json::from_str(hooks).unwrap();
            assert_eq!(out["request"]["hooks"], hooks, "{line}");
            assert_eq!(out["request_id"], "i");
            assert_eq!(said.is_some(), replaced, "{line}");
        }
        assert_eq!(
            from_orchestrator(br#"{"type":"user","message":{}}"#),
            FromOrchestrator::Other
        );
    }

    #[test]
    fn the_orchestrators_answers() {
        let input = json!({"command": "ls"}).as_object().cloned().unwrap();
        let read = |text: &str| {
            answered(
                serde_json::from_str::<Value>(text)
                    .unwrap()
                    .as_object()
                    .unwrap(),
                &input,
            )
        };
        assert_eq!(
            read(r#"{"subtype":"success","request_id":"r","response":{"behavior":"allow"}}"#),
            Answered::Allow(input.clone())
        );
        assert_eq!(
            read(
                r#"{"subtype":"success","request_id":"r","response":{"behavior":"allow","updatedInput":{"command":"rm -rf /"}}}"#
            ),
            Answered::Allow(json!({"command": "rm -rf /"}).as_object().cloned().unwrap())
        );
        assert_eq!(
            read(
                r#"{"subtype":"success","request_id":"r","response":{"behavior":"deny","message":"no"}}"#
            ),
            Answered::Deny
        );
        assert_eq!(
            read(r#"{"subtype":"error","request_id":"r","error":"x"}"#),
            Answered::Deny
        );
        assert!(matches!(
            read(r#"{"subtype":"success","request_id":"r","response":{"behavior":"maybe"}}"#),
            Answered::Unreadable(_)
        ));
    }
}
