//! Turning one input line into a [`ClientFrame`], or saying precisely why not.

use std::fmt;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::{
    Cancel, ClientFrame, ErrorCode, GrantScope, ListGrants, PermissionResponse, Reply, RevokeGrant,
    ScopeSpec, SessionRef, SessionStart, SetMode, Shutdown, ToolCall, DEFAULT_SESSION,
};

/// Why a line is not a usable frame.
///
/// When the line was a `tool_call` whose `callID` could be read, `call_id` is
/// set and `tool_call` is true: the broker then owes that call a `deny`
/// decision (source `invalid`) rather than an `error` frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// The error code for the `error` frame.
    pub code: ErrorCode,
    /// One human sentence naming the offending field or input.
    pub message: String,
    /// The frame's `callID`, when it could be read.
    pub call_id: Option<String>,
    /// The frame's `sessionID` (or `"main"`), when the frame was a `tool_call`.
    pub session_id: String,
    /// True when the frame was a `tool_call`.
    pub tool_call: bool,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for DecodeError {}

/// Every field any client frame may carry; each is checked by the frame that uses it.
/// Unknown fields are ignored.
#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "type")]
    kind: Option<Value>,
    #[serde(rename = "sessionID")]
    session_id: Option<Value>,
    #[serde(rename = "callID")]
    call_id: Option<Value>,
    tool: Option<Value>,
    input: Option<Value>,
    #[serde(rename = "readOnlyHint")]
    read_only_hint: Option<Value>,
    cwd: Option<Value>,
    #[serde(rename = "permissionID")]
    permission_id: Option<Value>,
    #[serde(rename = "permission_id")]
    permission_id_alias: Option<Value>,
    response: Option<Value>,
    message: Option<Value>,
    mode: Option<Value>,
    #[serde(rename = "parentID")]
    parent_id: Option<Value>,
    permissions: Option<Value>,
    #[serde(rename = "grantID")]
    grant_id: Option<Value>,
    scope: Option<Value>,
}

/// Decode one line (without its `\n`; a trailing `\r` is tolerated).
pub fn decode(line: &[u8]) -> Result<ClientFrame, DecodeError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = std::str::from_utf8(line).map_err(|err| DecodeError {
        code: ErrorCode::InvalidUtf8,
        message: format!(
            "the line is not UTF-8 (invalid byte at offset {})",
            err.valid_up_to()
        ),
        call_id: None,
        session_id: DEFAULT_SESSION.to_string(),
        tool_call: false,
    })?;
    let envelope: Envelope = match serde_json::from_str(text) {
        Ok(envelope) => envelope,
        Err(err) => return Err(explain_unreadable(text, &err)),
    };
    envelope.into_frame()
}

/// The envelope did not deserialize: find out whether the line is JSON at all,
/// and recover the `callID` when it is.
fn explain_unreadable(text: &str, err: &serde_json::Error) -> DecodeError {
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(_) => {
            return DecodeError {
                code: ErrorCode::InvalidJson,
                message: format!("the line is not JSON: {err}"),
                call_id: None,
                session_id: DEFAULT_SESSION.to_string(),
                tool_call: false,
            }
        }
    };
    let Value::Object(object) = value else {
        return DecodeError {
            code: ErrorCode::InvalidFrame,
            message: format!("a frame must be a JSON object, not {}", type_name(&value)),
            call_id: None,
            session_id: DEFAULT_SESSION.to_string(),
            tool_call: false,
        };
    };
    // JSON, an object, and still not an envelope: a field appears twice.
    let call_id = object
        .get("callID")
        .and_then(Value::as_str)
        .map(str::to_string);
    let tool_call = object.get("type").and_then(Value::as_str) == Some("tool_call");
    DecodeError {
        code: ErrorCode::InvalidFrame,
        message: format!("the frame is ambiguous: {err}"),
        call_id,
        session_id: session_of(object.get("sessionID")),
        tool_call,
    }
}

impl Envelope {
    fn into_frame(self) -> Result<ClientFrame, DecodeError> {
        let kind = match &self.kind {
            Some(Value::String(kind)) => kind.as_str(),
            Some(other) => {
                return Err(self.error(
                    ErrorCode::InvalidFrame,
                    format!("`type` must be a string, not {}", type_name(other)),
                ))
            }
            None => {
                return Err(self.error(ErrorCode::InvalidFrame, "the frame has no `type`".into()))
            }
        };
        match kind {
            "tool_call" => self.tool_call(),
            "permission_response" => self.permission_response(),
            "set_mode" => Ok(ClientFrame::SetMode(SetMode {
                session_id: self.session("set_mode")?,
                mode: self.required_str(&self.mode, "mode", "set_mode")?,
            })),
            "session_start" => self.session_start(),
            "session_end" => Ok(ClientFrame::SessionEnd(SessionRef {
                session_id: self.session("session_end")?,
            })),
            "cancel" => Ok(ClientFrame::Cancel(Cancel {
                session_id: self.session("cancel")?,
                call_id: self.required_str(&self.call_id, "callID", "cancel")?,
            })),
            "get_reminder" => Ok(ClientFrame::GetReminder(SessionRef {
                session_id: self.session("get_reminder")?,
            })),
            "list_grants" => Ok(ClientFrame::ListGrants(ListGrants {
                session_id: self.optional_str(&self.session_id, "sessionID", "list_grants")?,
            })),
            "revoke_grant" => Ok(ClientFrame::RevokeGrant(RevokeGrant {
                grant_id: self.required_str(&self.grant_id, "grantID", "revoke_grant")?,
            })),
            "shutdown" => Ok(ClientFrame::Shutdown(Shutdown {})),
            other => Err(self.error(
                ErrorCode::UnknownType,
                format!("unknown frame type `{}`", truncate(other, 64)),
            )),
        }
    }

    fn tool_call(mut self) -> Result<ClientFrame, DecodeError> {
        // Fields are moved out, never copied: this is the hot path.
        let call_id = match self.call_id.take() {
            Some(Value::String(call_id)) => call_id,
            other => {
                self.call_id = other;
                return Err(match &self.call_id {
                    None => self.error(ErrorCode::InvalidFrame, "tool_call has no `callID`".into()),
                    Some(other) => self.error(
                        ErrorCode::InvalidFrame,
                        format!(
                            "`callID` of tool_call must be a string, not {}",
                            type_name(other)
                        ),
                    ),
                });
            }
        };
        let session_value = self.session_id.take();
        let invalid = |message: String| DecodeError {
            code: ErrorCode::InvalidFrame,
            message,
            call_id: Some(call_id.clone()),
            session_id: session_of(session_value.as_ref()),
            tool_call: true,
        };
        let session_id = match &session_value {
            None => DEFAULT_SESSION.to_string(),
            Some(Value::String(session)) => session.clone(),
            Some(other) => {
                return Err(invalid(format!(
                    "`sessionID` of a tool_call must be a string, not {}",
                    type_name(other)
                )))
            }
        };
        let tool = match self.tool.take() {
            Some(Value::String(tool)) if !tool.is_empty() => tool,
            Some(Value::String(_)) => return Err(invalid("`tool` of a tool_call is empty".into())),
            Some(other) => {
                return Err(invalid(format!(
                    "`tool` of a tool_call must be a string, not {}",
                    type_name(&other)
                )))
            }
            None => return Err(invalid("the tool_call has no `tool`".into())),
        };
        let input = match self.input.take() {
            Some(Value::Object(input)) => input,
            Some(other) => {
                return Err(invalid(format!(
                    "`input` of a tool_call must be an object, not {}",
                    type_name(&other)
                )))
            }
            None => return Err(invalid("the tool_call has no `input`".into())),
        };
        let read_only_hint = match &self.read_only_hint {
            None => None,
            Some(Value::Bool(hint)) => Some(*hint),
            Some(other) => {
                return Err(invalid(format!(
                    "`readOnlyHint` must be a boolean, not {}",
                    type_name(other)
                )))
            }
        };
        let cwd = match self.cwd.take() {
            None => None,
            Some(Value::String(cwd)) => Some(cwd),
            Some(other) => {
                return Err(invalid(format!(
                    "`cwd` must be a string, not {}",
                    type_name(&other)
                )))
            }
        };
        Ok(ClientFrame::ToolCall(ToolCall {
            session_id,
            call_id,
            tool,
            input,
            read_only_hint,
            cwd,
        }))
    }

    fn permission_response(self) -> Result<ClientFrame, DecodeError> {
        let frame = "permission_response";
        let permission_id = match (&self.permission_id, &self.permission_id_alias) {
            (Some(_), Some(_)) => {
                return Err(self.error(
                    ErrorCode::InvalidFrame,
                    "permission_response has both `permissionID` and `permission_id`".into(),
                ))
            }
            (Some(id), None) => self.required_str(&Some(id.clone()), "permissionID", frame)?,
            (None, alias) => self.required_str(alias, "permissionID", frame)?,
        };
        let response = match &self.response {
            Some(Value::String(response)) => match response.as_str() {
                "once" => Reply::Once,
                "always" => Reply::Always,
                "reject" => Reply::Reject,
                other => {
                    return Err(self.error(
                        ErrorCode::InvalidFrame,
                        format!(
                            "`response` must be `once`, `always` or `reject`, not `{}`",
                            truncate(other, 64)
                        ),
                    ))
                }
            },
            Some(other) => {
                return Err(self.error(
                    ErrorCode::InvalidFrame,
                    format!("`response` must be a string, not {}", type_name(other)),
                ))
            }
            None => {
                return Err(self.error(
                    ErrorCode::InvalidFrame,
                    "permission_response has no `response`".into(),
                ))
            }
        };
        let scope = match self.optional_str(&self.scope, "scope", frame)?.as_deref() {
            None => None,
            Some("session") => Some(GrantScope::Session),
            Some("project") => Some(GrantScope::Project),
            Some(other) => {
                return Err(self.error(
                    ErrorCode::InvalidFrame,
                    format!(
                        "`scope` must be `session` or `project`, not `{}`",
                        truncate(other, 64)
                    ),
                ))
            }
        };
        Ok(ClientFrame::PermissionResponse(PermissionResponse {
            permission_id,
            response,
            message: self.optional_str(&self.message, "message", frame)?,
            scope,
        }))
    }

    fn session_start(self) -> Result<ClientFrame, DecodeError> {
        let frame = "session_start";
        let session_id = self.required_str(&self.session_id, "sessionID", frame)?;
        let parent_id = self.optional_str(&self.parent_id, "parentID", frame)?;
        let mode = self.optional_str(&self.mode, "mode", frame)?;
        let permissions = match &self.permissions {
            None => None,
            Some(Value::Object(object)) => Some(self.scope_spec(object)?),
            Some(other) => {
                return Err(self.error(
                    ErrorCode::InvalidFrame,
                    format!("`permissions` must be an object, not {}", type_name(other)),
                ))
            }
        };
        Ok(ClientFrame::SessionStart(SessionStart {
            session_id,
            parent_id,
            mode,
            permissions,
        }))
    }

    fn scope_spec(&self, object: &Map<String, Value>) -> Result<ScopeSpec, DecodeError> {
        let list = |key: &str| -> Result<Option<Vec<String>>, DecodeError> {
            match object.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|item| match item {
                        Value::String(item) => Ok(item.clone()),
                        other => Err(self.error(
                            ErrorCode::InvalidFrame,
                            format!(
                                "`permissions.{key}` must list strings, not {}",
                                type_name(other)
                            ),
                        )),
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some),
                Some(other) => Err(self.error(
                    ErrorCode::InvalidFrame,
                    format!(
                        "`permissions.{key}` must be an array, not {}",
                        type_name(other)
                    ),
                )),
            }
        };
        Ok(ScopeSpec {
            allowed_tools: list("allowedTools")?,
            denied_tools: list("deniedTools")?,
            file_patterns: list("filePatterns")?,
            command_patterns: list("commandPatterns")?,
        })
    }

    fn session(&self, frame: &str) -> Result<String, DecodeError> {
        Ok(self
            .optional_str(&self.session_id, "sessionID", frame)?
            .unwrap_or_else(|| DEFAULT_SESSION.to_string()))
    }

    fn required_str(
        &self,
        field: &Option<Value>,
        name: &str,
        frame: &str,
    ) -> Result<String, DecodeError> {
        match self.optional_str(field, name, frame)? {
            Some(value) => Ok(value),
            None => Err(self.error(ErrorCode::InvalidFrame, format!("{frame} has no `{name}`"))),
        }
    }

    fn optional_str(
        &self,
        field: &Option<Value>,
        name: &str,
        frame: &str,
    ) -> Result<Option<String>, DecodeError> {
        match field {
            None => Ok(None),
            Some(Value::String(value)) => Ok(Some(value.clone())),
            Some(other) => Err(self.error(
                ErrorCode::InvalidFrame,
                format!(
                    "`{name}` of {frame} must be a string, not {}",
                    type_name(other)
                ),
            )),
        }
    }

    fn error(&self, code: ErrorCode, message: String) -> DecodeError {
        DecodeError {
            code,
            message,
            call_id: self
                .call_id
                .as_ref()
                .and_then(Value::as_str)
                .map(str::to_string),
            session_id: session_of(self.session_id.as_ref()),
            tool_call: self.kind.as_ref().and_then(Value::as_str) == Some("tool_call"),
        }
    }
}

fn session_of(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(session)) => session.clone(),
        _ => DEFAULT_SESSION.to_string(),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

    use super::*;

    /// Decode `input` and compare a compact rendering of the result with `expected`.
    fn check(input: &str, expected: &str) {
        let actual = match decode(input.as_bytes()) {
            Ok(frame) => format!("ok {}", serde_json::to_string(&frame).unwrap()),
            Err(err) => format!(
                "err {} call={} tool_call={} :: {}",
                err.code.as_str(),
                err.call_id.as_deref().unwrap_or("-"),
                err.tool_call,
                err.message
            ),
        };
        assert_eq!(actual, expected, "input: {input}");
    }

    #[test]
    fn decodes_frames_and_explains_failures() {
        let cases: &[(&str, &str)] = &[
            (
                r#"{"type":"tool_call","callID":"c1","tool":"bash","input":{"command":"ls"}}"#,
                r#"ok {"type":"tool_call","sessionID":"main","callID":"c1","tool":"bash","input":{"command":"ls"}}"#,
            ),
            (
                "{\"type\":\"tool_call\",\"callID\":\"c1\",\"tool\":\"Read\",\"input\":{},\"x\":1}\r",
                r#"ok {"type":"tool_call","sessionID":"main","callID":"c1","tool":"Read","input":{}}"#,
            ),
            (
                r#"{"type":"tool_call","callID":"c1","input":{}}"#,
                "err invalid_frame call=c1 tool_call=true :: the tool_call has no `tool`",
            ),
            (
                r#"{"type":"tool_call","callID":"c1","tool":"bash","input":"ls"}"#,
                "err invalid_frame call=c1 tool_call=true :: `input` of a tool_call must be an object, not a string",
            ),
            (
                r#"{"type":"tool_call","callID":"c1","tool":"bash"}"#,
                "err invalid_frame call=c1 tool_call=true :: the tool_call has no `input`",
            ),
            (
                r#"{"type":"tool_call","callID":"c1","tool":"bash","input":{},"readOnlyHint":"yes"}"#,
                "err invalid_frame call=c1 tool_call=true :: `readOnlyHint` must be a boolean, not a string",
            ),
            (
                r#"{"type":"tool_call","callID":7,"tool":"bash","input":{}}"#,
                "err invalid_frame call=- tool_call=true :: `callID` of tool_call must be a string, not a number",
            ),
            (
                r#"{"type":"tool_call","callID":"a","callID":"b","tool":"bash","input":{}}"#,
                "err invalid_frame call=b tool_call=true :: the frame is ambiguous: duplicate field `callID` at line 1 column 41",
            ),
            (
                r#"{"type":"permission_response","permission_id":"per_1","response":"once"}"#,
                r#"ok {"type":"permission_response","permissionID":"per_1","response":"once"}"#,
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"maybe"}"#,
                "err invalid_frame call=- tool_call=false :: `response` must be `once`, `always` or `reject`, not `maybe`",
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"always","scope":"project"}"#,
                r#"ok {"type":"permission_response","permissionID":"per_1","response":"always","scope":"project"}"#,
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"always","scope":"global"}"#,
                "err invalid_frame call=- tool_call=false :: `scope` must be `session` or `project`, not `global`",
            ),
            (
                r#"{"type":"set_mode","mode":"plan"}"#,
                r#"ok {"type":"set_mode","sessionID":"main","mode":"plan"}"#,
            ),
            (
                r#"{"type":"launch","callID":"c9"}"#,
                "err unknown_type call=c9 tool_call=false :: unknown frame type `launch`",
            ),
            (
                r#"{"callID":"c9"}"#,
                "err invalid_frame call=c9 tool_call=false :: the frame has no `type`",
            ),
            (
                "[1,2]",
                "err invalid_frame call=- tool_call=false :: a frame must be a JSON object, not an array",
            ),
            (
                "{\"type\":",
                "err invalid_json call=- tool_call=false :: the line is not JSON: EOF while parsing a value at line 1 column 8",
            ),
            (
                r#"{"type":"session_start","sessionID":"k","parentID":"main","permissions":{"allowedTools":["read"]}}"#,
                r#"ok {"type":"session_start","sessionID":"k","parentID":"main","permissions":{"allowedTools":["read"]}}"#,
            ),
            (
                r#"{"type":"session_start","sessionID":"k","permissions":{"allowedTools":"read"}}"#,
                "err invalid_frame call=- tool_call=false :: `permissions.allowedTools` must be an array, not a string",
            ),
            (r#"{"type":"shutdown"}"#, r#"ok {"type":"shutdown"}"#),
        ];
        for (input, expected) in cases {
            check(input, expected);
        }
    }

    #[test]
    fn non_utf8_is_its_own_error() {
        let err = decode(b"{\"type\":\"tool_call\",\"callID\":\"\xff\"}").unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidUtf8);
        assert_eq!(err.call_id, None);
    }
}
