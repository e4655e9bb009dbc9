//! Turning one input line into a [`ClientFrame`], or saying precisely why not.

use std::fmt;

use std::borrow::Cow;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::map::Entry;
use serde_json::{Map, Value};

use crate::scan::{self, truncate};
use crate::{
    Cancel, ClientFrame, CreateToken, ErrorCode, GrantScope, Hello, ListGrants, ListSessions,
    ListTokens, PermissionResponse, Projects, Reply, RevokeGrant, RevokeToken, Role, ScopeSpec,
    SessionRef, SessionStart, SetMode, Shutdown, TokenRole, ToolCall, DEFAULT_SESSION,
    MAX_EXPIRES_IN,
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
    /// The frame's `sessionID`, when it could be read. A `tool_call` denied
    /// without one is denied in the session `"main"`.
    pub session_id: Option<String>,
    /// The frame's permission id (`permissionID` or `permission_id`), when
    /// it could be read.
    pub permission_id: Option<String>,
    /// True when the frame was a `tool_call`.
    pub tool_call: bool,
    /// Further frames on the same line (`{...}{...}`), each answered on its
    /// own: every `tool_call` with a readable `callID`, and at most one other.
    pub others: Box<[DecodeError]>,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for DecodeError {}

/// Every field any client frame may carry; each is checked by the frame that uses it.
/// Unknown fields are ignored, but no key may appear twice: not in the frame,
/// not at any depth inside a value (`input`, `permissions`, ...). With a key
/// given twice, which one counts depends on the reader (serde keeps the last,
/// another parser the first), so the agent could run what was not judged.
#[derive(Default)]
struct Envelope {
    kind: Option<Value>,
    session_id: Option<Value>,
    call_id: Option<Value>,
    tool: Option<Value>,
    input: Option<Value>,
    read_only_hint: Option<Value>,
    cwd: Option<Value>,
    permission_id: Option<Value>,
    permission_id_alias: Option<Value>,
    response: Option<Value>,
    message: Option<Value>,
    mode: Option<Value>,
    parent_id: Option<Value>,
    permissions: Option<Value>,
    grant_id: Option<Value>,
    scope: Option<Value>,
    patterns: Option<Value>,
    expires_in: Option<Value>,
    role: Option<Value>,
    client: Option<Value>,
    join: Option<Value>,
    token: Option<Value>,
    projects: Option<Value>,
    name: Option<Value>,
    project: Option<Value>,
}

/// Fills an envelope where it lies: it is large (a slot per field of every
/// frame type), and returning it through serde's layers would copy it each time.
struct EnvelopeVisitor<'a>(&'a mut Envelope);

impl<'de> DeserializeSeed<'de> for EnvelopeVisitor<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EnvelopeVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a frame object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let envelope = self.0;
        // Unknown keys are rare: a short list is enough to see one repeated.
        let mut unknown: Vec<String> = Vec::new();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let key = key.0;
            let slot = match &*key {
                "type" => &mut envelope.kind,
                "sessionID" => &mut envelope.session_id,
                "callID" => &mut envelope.call_id,
                "tool" => &mut envelope.tool,
                "input" => &mut envelope.input,
                "readOnlyHint" => &mut envelope.read_only_hint,
                "cwd" => &mut envelope.cwd,
                "permissionID" => &mut envelope.permission_id,
                "permission_id" => &mut envelope.permission_id_alias,
                "response" => &mut envelope.response,
                "message" => &mut envelope.message,
                "mode" => &mut envelope.mode,
                "parentID" => &mut envelope.parent_id,
                "permissions" => &mut envelope.permissions,
                "grantID" => &mut envelope.grant_id,
                "scope" => &mut envelope.scope,
                "patterns" => &mut envelope.patterns,
                "expiresIn" => &mut envelope.expires_in,
                "role" => &mut envelope.role,
                "client" => &mut envelope.client,
                "join" => &mut envelope.join,
                "token" => &mut envelope.token,
                "projects" => &mut envelope.projects,
                "name" => &mut envelope.name,
                "project" => &mut envelope.project,
                other => {
                    if unknown.iter().any(|seen| seen == other) {
                        return Err(de::Error::custom(format_args!("duplicate field `{other}`")));
                    }
                    unknown.push(other.to_string());
                    map.next_value_seed(Strict { field: "the frame" })?;
                    continue;
                }
            };
            if slot.is_some() {
                return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
            }
            *slot = Some(map.next_value_seed(Strict { field: &key })?);
        }
        Ok(())
    }
}

/// A map key, borrowed from the line when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Key<'de>, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key.to_string())))
            }
            fn visit_string<E: de::Error>(self, key: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// A JSON value like [`Value`]'s own, except that an object with a key given
/// twice is an error naming the key and the frame field it is in.
#[derive(Clone, Copy)]
struct Strict<'f> {
    field: &'f str,
}

impl Strict<'_> {
    /// `` `input` `` for a frame field, `the frame` for the frame itself.
    fn field_name(&self) -> Cow<'_, str> {
        match self.field {
            "the frame" => Cow::Borrowed("the frame"),
            field => Cow::Owned(format!("`{field}`")),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }
    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }
    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }
    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_string()))
    }
    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match object.entry(key) {
                Entry::Vacant(slot) => {
                    slot.insert(map.next_value_seed(self)?);
                }
                Entry::Occupied(slot) => {
                    return Err(de::Error::custom(format_args!(
                        "the key `{}` appears twice in {}",
                        slot.key(),
                        self.field_name()
                    )))
                }
            }
        }
        Ok(Value::Object(object))
    }
}

/// Decode one line (without its `\n`; a trailing `\r` is tolerated).
///
/// A line that does not decode is read again tolerantly ([`crate::scan`]):
/// every `tool_call` on it whose `callID` can be read comes back as a
/// [`DecodeError`] with `tool_call` set, so that the broker denies it by its
/// `callID`, whatever else is wrong with the line.
///
/// Messages that place a problem in the line say `at line 1 column N`; the
/// broker uses [`decode_line`] to name the input line instead.
pub fn decode(line: &[u8]) -> Result<ClientFrame, DecodeError> {
    decode_line(line, 1)
}

/// [`decode`] the input line `number` (1-based): a message that places a
/// problem says `at line {number} column N`, N being the 1-based column
/// within the line.
pub fn decode_line(line: &[u8], number: u64) -> Result<ClientFrame, DecodeError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = match std::str::from_utf8(line) {
        Ok(text) => text,
        Err(err) => {
            let message = format!(
                "the line is not UTF-8 (invalid byte at offset {})",
                err.valid_up_to()
            );
            return Err(explain_scanned(line, ErrorCode::InvalidUtf8, message));
        }
    };
    let mut envelope = Envelope::default();
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let read = EnvelopeVisitor(&mut envelope)
        .deserialize(&mut deserializer)
        .and_then(|()| deserializer.end());
    if let Err(err) = read {
        return Err(explain_unreadable(text, &err, number));
    }
    envelope.into_frame()
}

/// Decode a frame already read as JSON (a frame a program built, a value of
/// a recording): the frame [`decode`] gives for the value's text, without
/// writing the text. `Err` when the value is not a frame as it is, or is
/// nested deeper than 100 levels (serde_json reads text only to a depth of
/// 128); [`decode`] of its text then says precisely why, or reads it.
pub fn decode_value(value: &Value) -> Result<ClientFrame, DecodeError> {
    let refused = |message: String| DecodeError {
        code: ErrorCode::InvalidFrame,
        message,
        call_id: None,
        session_id: None,
        permission_id: None,
        tool_call: false,
        others: Box::default(),
    };
    if !value.is_object() {
        return Err(refused(format!(
            "a frame must be a JSON object, not {}",
            type_name(value)
        )));
    }
    if nested_deeper(value, 100) {
        return Err(refused("the frame is nested too deeply".into()));
    }
    let mut envelope = Envelope::default();
    if let Err(err) = EnvelopeVisitor(&mut envelope).deserialize(value) {
        return Err(refused(format!("the frame is not readable: {err}")));
    }
    envelope.into_frame()
}

/// Whether `value` holds arrays or objects more than `limit` levels deep
/// (itself being the first).
fn nested_deeper(value: &Value, limit: usize) -> bool {
    let mut level: Vec<&Value> = vec![value];
    for _ in 1..=limit {
        let below: Vec<&Value> = level
            .iter()
            .flat_map(|value| -> Box<dyn Iterator<Item = &Value>> {
                match value {
                    Value::Array(items) => Box::new(items.iter()),
                    Value::Object(map) => Box::new(map.values()),
                    _ => Box::new(std::iter::empty()),
                }
            })
            .filter(|value| value.is_array() || value.is_object())
            .collect();
        if below.is_empty() {
            return false;
        }
        level = below;
    }
    true
}

/// The envelope did not deserialize: find out whether the line is JSON at all,
/// and recover the `callID` when it is.
fn explain_unreadable(text: &str, err: &serde_json::Error, number: u64) -> DecodeError {
    let err = placed(err, number);
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(_) => {
            return explain_scanned(
                text.as_bytes(),
                ErrorCode::InvalidJson,
                format!("the line is not JSON: {err}"),
            )
        }
    };
    let Value::Object(object) = value else {
        return DecodeError {
            code: ErrorCode::InvalidFrame,
            message: format!("a frame must be a JSON object, not {}", type_name(&value)),
            call_id: None,
            permission_id: None,
            session_id: None,
            tool_call: false,
            others: Box::default(),
        };
    };
    // JSON, an object, and still not an envelope: a field appears twice.
    let call_id = object
        .get("callID")
        .and_then(Value::as_str)
        .map(str::to_string);
    let tool_call = object.get("type").and_then(Value::as_str) == Some("tool_call");
    let message = format!("the frame is ambiguous: {err}");
    let session_id = object
        .get("sessionID")
        .and_then(Value::as_str)
        .map(str::to_string);
    // `callID` itself given twice: every id it was given is a call the
    // client may wait on, and each gets its one denial.
    let mut earlier: Vec<String> = Vec::new();
    if tool_call {
        let found = scan::scan(text.as_bytes());
        if let Some(head) = found.heads.first() {
            for id in head.earlier_call_ids.iter().filter_map(scan::Field::text) {
                if Some(id) != call_id.as_deref() && !earlier.iter().any(|seen| seen == id) {
                    earlier.push(id.to_string());
                }
            }
        }
    }
    let others = earlier
        .into_iter()
        .map(|id| DecodeError {
            code: ErrorCode::InvalidFrame,
            message: message.clone(),
            call_id: Some(id),
            permission_id: None,
            session_id: session_id.clone(),
            tool_call,
            others: Box::default(),
        })
        .collect();
    DecodeError {
        code: ErrorCode::InvalidFrame,
        message,
        call_id,
        permission_id: permission_of(
            object.get("permissionID").map(Value::as_str),
            object.get("permission_id").map(Value::as_str),
        ),
        session_id,
        tool_call,
        others,
    }
}

/// The line is not JSON (or not UTF-8): read it tolerantly. The first object
/// on the line is the error itself; every further `tool_call` with a readable
/// `callID` goes into `others`, and so does the first further object that is
/// not one (at most one error frame per line besides the denials).
fn explain_scanned(line: &[u8], code: ErrorCode, fallback: String) -> DecodeError {
    let found = scan::scan(line);
    let line_problem = found.problem.clone();
    let mut heads = found.heads.into_iter().map(|head| {
        let call_id = head.call_id().map(str::to_string);
        let tool_call = head.is_tool_call() && call_id.is_some();
        let problem = head.problem.clone().or_else(|| line_problem.clone());
        DecodeError {
            code,
            message: match (&problem, tool_call) {
                // A denied call's reason names the construct.
                (Some(problem), true) => problem.clone(),
                // An error frame keeps the decoder's sentence, with the
                // construct when the decoder did not name it.
                (Some(problem), false) if code == ErrorCode::InvalidJson => {
                    format!("{fallback} ({problem})")
                }
                _ => fallback.clone(),
            },
            call_id,
            permission_id: head.permission_id().map(str::to_string),
            session_id: head
                .session_id
                .as_ref()
                .and_then(scan::Field::text)
                .map(str::to_string),
            tool_call: head.is_tool_call(),
            others: Box::default(),
        }
    });
    let Some(mut first) = heads.next() else {
        return DecodeError {
            code,
            message: fallback,
            call_id: None,
            permission_id: None,
            session_id: None,
            tool_call: false,
            others: Box::default(),
        };
    };
    let mut error_frame = !(first.tool_call && first.call_id.is_some());
    let mut others = Vec::new();
    for other in heads {
        if other.tool_call && other.call_id.is_some() {
            others.push(other);
        } else if !error_frame {
            error_frame = true;
            others.push(other);
        }
    }
    first.others = others.into_boxed_slice();
    first
}

fn permission_of(canonical: Option<Option<&str>>, alias: Option<Option<&str>>) -> Option<String> {
    match (canonical, alias) {
        (Some(Some(id)), None) | (None, Some(Some(id))) => Some(id.to_string()),
        (Some(Some(a)), Some(Some(b))) if a == b => Some(a.to_string()),
        _ => None,
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
            "hello" => self.hello(),
            "list_sessions" => Ok(ClientFrame::ListSessions(ListSessions {
                session_id: self.optional_str(&self.session_id, "sessionID", "list_sessions")?,
            })),
            "list_tools" => Ok(ClientFrame::ListTools(SessionRef {
                session_id: self.session("list_tools")?,
            })),
            "list_pending" => Ok(ClientFrame::ListPending(ListSessions {
                session_id: self.optional_str(&self.session_id, "sessionID", "list_pending")?,
            })),
            "create_token" => self.create_token(),
            "list_tokens" => Ok(ClientFrame::ListTokens(ListTokens {})),
            "revoke_token" => Ok(ClientFrame::RevokeToken(RevokeToken {
                name: self.required_str(&self.name, "name", "revoke_token")?,
            })),
            other => Err(self.error(
                ErrorCode::UnknownType,
                format!("unknown frame type `{}`", truncate(other, 64)),
            )),
        }
    }

    fn create_token(&self) -> Result<ClientFrame, DecodeError> {
        let name = self.required_str(&self.name, "name", "create_token")?;
        let role = match self.required_str(&self.role, "role", "create_token")?.as_str() {
            "agent" => TokenRole::Agent,
            "approver" => TokenRole::Approver,
            "observer" => TokenRole::Observer,
            "admin" => TokenRole::Admin,
            other => {
                return Err(self.error(
                    ErrorCode::InvalidFrame,
                    format!(
                        "`role` of create_token must be `agent`, `approver`, `observer` or `admin`, not `{}`",
                        truncate(other, 64)
                    ),
                ))
            }
        };
        let project = self.optional_str(&self.project, "project", "create_token")?;
        let expires_in = match &self.expires_in {
            None | Some(Value::Null) => None,
            Some(Value::Number(number)) if number.as_u64().is_some() => number.as_u64(),
            Some(other) => {
                return Err(self.error(
                    ErrorCode::InvalidFrame,
                    format!(
                        "`expiresIn` of create_token must be a whole number of seconds, not {}",
                        type_name(other)
                    ),
                ))
            }
        };
        Ok(ClientFrame::CreateToken(CreateToken {
            name,
            role,
            project,
            expires_in,
        }))
    }

    fn hello(&self) -> Result<ClientFrame, DecodeError> {
        let role = match self.optional_str(&self.role, "role", "hello")?.as_deref() {
            None | Some("agent") => Role::Agent,
            Some("approver") => Role::Approver,
            Some("observer") => Role::Observer,
            Some(other) => {
                return Err(self.error(
                    ErrorCode::InvalidFrame,
                    format!(
                        "`role` of hello must be `agent`, `approver` or `observer`, not `{}`",
                        truncate(other, 64)
                    ),
                ))
            }
        };
        let client = self.optional_str(&self.client, "client", "hello")?;
        if client
            .as_ref()
            .is_some_and(|name| name.chars().count() > 128)
        {
            return Err(self.error(
                ErrorCode::InvalidFrame,
                "`client` of hello is longer than 128 characters".into(),
            ));
        }
        let session_id = self.optional_str(&self.session_id, "sessionID", "hello")?;
        if session_id.is_some() && role != Role::Observer {
            return Err(self.error(
                ErrorCode::InvalidFrame,
                "`sessionID` of hello names the subtree an observer watches: only `role` observer takes it".into(),
            ));
        }
        // A token is a secret: no message repeats it.
        let token = self.optional_str(&self.token, "token", "hello")?;
        let projects = match self
            .optional_str(&self.projects, "projects", "hello")?
            .as_deref()
        {
            None => None,
            Some("own") => Some(Projects::Own),
            Some("all") => Some(Projects::All),
            Some(other) => {
                return Err(self.error(
                    ErrorCode::InvalidFrame,
                    format!(
                        "`projects` of hello must be `own` or `all`, not `{}`",
                        truncate(other, 64)
                    ),
                ))
            }
        };
        if projects == Some(Projects::All) && role == Role::Agent {
            return Err(self.error(
                ErrorCode::InvalidFrame,
                "`projects` of hello says whose questions an approver or an observer is shown: an agent is shown none".into(),
            ));
        }
        Ok(ClientFrame::Hello(Hello {
            role,
            client,
            session_id,
            token,
            projects,
        }))
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
        // Moved out, not copied; an error names the session only when the
        // frame gave one.
        let (session_id, given) = match self.session_id.take() {
            None => (DEFAULT_SESSION.to_string(), false),
            Some(Value::String(session)) => (session, true),
            Some(other) => {
                return Err(DecodeError {
                    code: ErrorCode::InvalidFrame,
                    message: format!(
                        "`sessionID` of a tool_call must be a string, not {}",
                        type_name(&other)
                    ),
                    call_id: Some(call_id),
                    permission_id: None,
                    session_id: None,
                    tool_call: true,
                    others: Box::default(),
                })
            }
        };
        let invalid = |message: String| DecodeError {
            code: ErrorCode::InvalidFrame,
            message,
            call_id: Some(call_id.clone()),
            permission_id: None,
            session_id: given.then(|| session_id.clone()),
            tool_call: true,
            others: Box::default(),
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
        let patterns = match &self.patterns {
            None => None,
            Some(Value::Array(items)) => {
                let mut patterns = Vec::with_capacity(items.len());
                for item in items {
                    match item {
                        Value::String(pattern) => patterns.push(pattern.clone()),
                        other => {
                            return Err(self.error(
                                ErrorCode::InvalidFrame,
                                format!(
                                    "`patterns` of permission_response must be a list of strings, not a list holding {}",
                                    type_name(other)
                                ),
                            ))
                        }
                    }
                }
                Some(patterns)
            }
            Some(other) => {
                return Err(self.error(
                    ErrorCode::InvalidFrame,
                    format!(
                        "`patterns` of permission_response must be a list of strings, not {}",
                        type_name(other)
                    ),
                ))
            }
        };
        let expires_in = self.expires_in()?;
        let only_always = [
            ("patterns", patterns.is_some()),
            ("expiresIn", expires_in.is_some()),
        ];
        if let Some((field, _)) = only_always
            .iter()
            .find(|(_, given)| *given && response != Reply::Always)
        {
            return Err(self.error(
                ErrorCode::InvalidFrame,
                format!(
                    "`{field}` goes only with `\"response\":\"always\"`, not with `{}`",
                    match response {
                        Reply::Once => "once",
                        Reply::Reject => "reject",
                        Reply::Always => "always",
                    }
                ),
            ));
        }
        Ok(ClientFrame::PermissionResponse(PermissionResponse {
            permission_id,
            response,
            message: self.optional_str(&self.message, "message", frame)?,
            scope,
            patterns,
            expires_in,
        }))
    }

    /// `expiresIn` of a `permission_response`: a whole number of seconds,
    /// 1 to [`MAX_EXPIRES_IN`].
    fn expires_in(&self) -> Result<Option<u64>, DecodeError> {
        let Some(value) = &self.expires_in else {
            return Ok(None);
        };
        let refused = |what: String| {
            self.error(
                ErrorCode::InvalidFrame,
                format!(
                    "`expiresIn` of permission_response must be a whole number of seconds from 1 to {MAX_EXPIRES_IN} (ten years), not {what}"
                ),
            )
        };
        match value {
            Value::Number(number) => match number.as_u64() {
                Some(seconds @ 1..=MAX_EXPIRES_IN) => Ok(Some(seconds)),
                _ => Err(refused(truncate(&number.to_string(), 64).to_string())),
            },
            other => Err(refused(type_name(other).to_string())),
        }
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
        let join = match &self.join {
            None | Some(Value::Bool(false)) => false,
            Some(Value::Bool(true)) => true,
            Some(other) => {
                return Err(self.error(
                    ErrorCode::InvalidFrame,
                    format!("`join` must be a boolean, not {}", type_name(other)),
                ))
            }
        };
        Ok(ClientFrame::SessionStart(SessionStart {
            session_id,
            parent_id,
            mode,
            permissions,
            join,
        }))
    }

    fn scope_spec(&self, object: &Map<String, Value>) -> Result<ScopeSpec, DecodeError> {
        // A key the scope does not know is refused, as the policy file
        // refuses one: `filePattern` for `filePatterns` would start the
        // session with no file limit.
        if let Some(key) = object
            .keys()
            .find(|key| !SCOPE_KEYS.contains(&key.as_str()))
        {
            let hint = SCOPE_KEYS
                .iter()
                .find(|known| known.eq_ignore_ascii_case(key) || close_to(known, key))
                .map(|known| format!(" (did you mean `{known}`?)"))
                .unwrap_or_default();
            return Err(self.error(
                ErrorCode::InvalidFrame,
                format!(
                    "`permissions.{key}` is not a scope field{hint}: a scope has {}",
                    SCOPE_KEYS
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
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
        let pattern_syntax = match object.get("patternSyntax") {
            None | Some(Value::Null) => None,
            Some(Value::String(syntax)) => Some(syntax.clone()),
            Some(other) => {
                return Err(self.error(
                    ErrorCode::InvalidFrame,
                    format!(
                        "`permissions.patternSyntax` must be a string (`glob` or `regex`), not {}",
                        type_name(other)
                    ),
                ))
            }
        };
        Ok(ScopeSpec {
            allowed_tools: list("allowedTools")?,
            denied_tools: list("deniedTools")?,
            file_patterns: list("filePatterns")?,
            command_patterns: list("commandPatterns")?,
            pattern_syntax,
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
            permission_id: permission_of(
                self.permission_id.as_ref().map(Value::as_str),
                self.permission_id_alias.as_ref().map(Value::as_str),
            ),
            session_id: self
                .session_id
                .as_ref()
                .and_then(Value::as_str)
                .map(str::to_string),
            tool_call: self.kind.as_ref().and_then(Value::as_str) == Some("tool_call"),
            others: Box::default(),
        }
    }
}

/// serde_json's message, with its position placed in the input: serde counts
/// lines within the frame (always line 1), the broker counts input lines.
fn placed(err: &serde_json::Error, number: u64) -> String {
    let text = err.to_string();
    if err.line() == 0 {
        return text;
    }
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    match text.strip_suffix(&suffix) {
        Some(head) => format!(
            "{head} at line {} column {}",
            number.saturating_add(err.line() as u64 - 1),
            err.column()
        ),
        None => text,
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

/// The fields of `session_start.permissions`.
const SCOPE_KEYS: [&str; 5] = [
    "allowedTools",
    "deniedTools",
    "filePatterns",
    "commandPatterns",
    "patternSyntax",
];

/// `typed` is `known` with one character added, dropped or changed (a
/// plural dropped, a letter slipped), letter case aside.
fn close_to(known: &str, typed: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (
        known.to_ascii_lowercase().chars().collect(),
        typed.to_ascii_lowercase().chars().collect(),
    );
    let (long, short) = if a.len() >= b.len() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    if long.len() - short.len() > 1 {
        return false;
    }
    let start = long
        .iter()
        .zip(short.iter())
        .take_while(|(x, y)| x == y)
        .count();
    // Past the first difference, the rest must be the same (after the
    // changed character, or after the one added).
    let skip = if long.len() == short.len() { 1 } else { 0 };
    long.get(start + 1..) == short.get(start + skip..)
        || (start == long.len() && start == short.len())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

    use super::*;

    #[test]
    fn token_frames_decode_and_say_what_is_wrong() {
        let frame = |line: &str| decode(line.as_bytes());
        assert_eq!(
            frame(
                r#"{"type":"create_token","name":"bob","role":"admin","project":"/p","expiresIn":60}"#
            ),
            Ok(ClientFrame::CreateToken(CreateToken {
                name: "bob".into(),
                role: TokenRole::Admin,
                project: Some("/p".into()),
                expires_in: Some(60),
            }))
        );
        assert_eq!(
            frame(r#"{"type":"create_token","name":"bob","role":"agent"}"#),
            Ok(ClientFrame::CreateToken(CreateToken {
                name: "bob".into(),
                role: TokenRole::Agent,
                project: None,
                expires_in: None,
            }))
        );
        assert_eq!(
            frame(r#"{"type":"list_tokens"}"#),
            Ok(ClientFrame::ListTokens(ListTokens {}))
        );
        assert_eq!(
            frame(r#"{"type":"revoke_token","name":"bob"}"#),
            Ok(ClientFrame::RevokeToken(RevokeToken { name: "bob".into() }))
        );
        for (line, says) in [
            (r#"{"type":"create_token","role":"agent"}"#, "create_token has no `name`"),
            (r#"{"type":"create_token","name":"b"}"#, "create_token has no `role`"),
            (
                r#"{"type":"create_token","name":"b","role":"root"}"#,
                "`role` of create_token must be `agent`, `approver`, `observer` or `admin`, not `root`",
            ),
            (
                r#"{"type":"create_token","name":"b","role":"agent","expiresIn":-1}"#,
                "`expiresIn` of create_token must be a whole number of seconds, not a number",
            ),
            (
                r#"{"type":"create_token","name":"b","role":"agent","project":1}"#,
                "`project` of create_token must be a string, not a number",
            ),
            (r#"{"type":"revoke_token"}"#, "revoke_token has no `name`"),
            (
                r#"{"type":"revoke_token","name":"a","name":"b"}"#,
                "duplicate field `name`",
            ),
        ] {
            let err = frame(line).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidFrame, "{line}");
            assert!(err.message.contains(says), "{line}: {}", err.message);
        }
    }

    #[test]
    fn a_value_decodes_as_its_text_does() {
        for line in [
            r#"{"type":"tool_call","callID":"c1","tool":"bash","input":{"command":"ls","n":[1,-2,3.5,null,true]},"cwd":"/p"}"#,
            r#"{"type":"tool_call","sessionID":"s","callID":"c2","tool":"read","input":{},"readOnlyHint":true}"#,
            r#"{"type":"permission_response","permission_id":"per_1","response":"always","scope":"project","patterns":["a*"]}"#,
            r#"{"type":"set_mode","sessionID":"s","mode":"plan"}"#,
            r#"{"type":"session_start","sessionID":"c","parentID":"s","mode":"ask","permissions":{"tools":["read"]},"join":true}"#,
            r#"{"type":"session_end","sessionID":"s"}"#,
            r#"{"type":"cancel","sessionID":"s","callID":"c1"}"#,
            r#"{"type":"hello","role":"approver","client":"tty"}"#,
            r#"{"type":"hello","role":"approver","token":"tg_x"}"#,
            r#"{"type":"list_grants"}"#,
            r#"{"type":"shutdown","extra":1}"#,
        ] {
            let value: Value = serde_json::from_str(line).unwrap();
            assert_eq!(decode_value(&value), decode(line.as_bytes()), "{line}");
        }
        // Not frames as they are: refused, to be decoded from their text.
        for line in [
            r#"{"type":"tool_call","callID":"c1","tool":"","input":{}}"#,
            r#"{"type":"set_mode","sessionID":"s"}"#,
            r#"{"type":"nothing"}"#,
            r#"[1]"#,
        ] {
            let value: Value = serde_json::from_str(line).unwrap();
            assert!(decode_value(&value).is_err(), "{line}");
        }
        let mut deep = json_object("input", Value::Null);
        for _ in 0..120 {
            deep = json_object("x", deep);
        }
        let mut frame = Map::new();
        frame.insert("type".into(), Value::String("tool_call".into()));
        frame.insert("callID".into(), Value::String("c".into()));
        frame.insert("tool".into(), Value::String("t".into()));
        frame.insert("input".into(), deep);
        assert!(decode_value(&Value::Object(frame)).is_err());
    }

    fn json_object(key: &str, value: Value) -> Value {
        let mut map = Map::new();
        map.insert(key.to_string(), value);
        Value::Object(map)
    }

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
                r#"{"type":"hello","role":"agent","client":"hook","token":"tg_abc"}"#,
                r#"ok {"type":"hello","role":"agent","client":"hook","token":"tg_abc"}"#,
            ),
            // The token is never repeated in a message.
            (
                r#"{"type":"hello","role":"approver","projects":"all"}"#,
                r#"ok {"type":"hello","role":"approver","projects":"all"}"#,
            ),
            (
                r#"{"type":"hello","role":"approver","projects":"some"}"#,
                "err invalid_frame call=- tool_call=false :: `projects` of hello must be `own` or `all`, not `some`",
            ),
            (
                r#"{"type":"hello","projects":"all"}"#,
                "err invalid_frame call=- tool_call=false :: `projects` of hello says whose questions an approver or an observer is shown: an agent is shown none",
            ),
            (
                r#"{"type":"hello","token":12345}"#,
                "err invalid_frame call=- tool_call=false :: `token` of hello must be a string, not a number",
            ),
            (
                r#"{"type":"hello","token":"tg_a","token":"tg_b"}"#,
                "err invalid_frame call=- tool_call=false :: the frame is ambiguous: duplicate field `token` at line 1 column 38",
            ),
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
            // A key given twice, at any depth inside a value or in the frame itself,
            // however it is spelled (escapes are decoded before keys are compared).
            (
                r#"{"type":"tool_call","callID":"c1","tool":"Bash","input":{"command":"rm -rf src","command":"ls"}}"#,
                "err invalid_frame call=c1 tool_call=true :: the frame is ambiguous: the key `command` appears twice in `input` at line 1 column 89",
            ),
            (
                r#"{"type":"tool_call","callID":"c1","tool":"Bash","input":{"comm\u0061nd":"rm -rf src","command":"ls"}}"#,
                "err invalid_frame call=c1 tool_call=true :: the frame is ambiguous: the key `command` appears twice in `input` at line 1 column 94",
            ),
            (
                r#"{"type":"tool_call","callID":"c1","tool":"MultiEdit","input":{"file_path":"a","edits":[{"old_string":"x","old_string":"y"}]}}"#,
                "err invalid_frame call=c1 tool_call=true :: the frame is ambiguous: the key `old_string` appears twice in `input` at line 1 column 117",
            ),
            (
                r#"{"type":"tool_call","callID":"c1","tool":"x","input":{"a":{"b":{"c":1,"c":2}}}}"#,
                "err invalid_frame call=c1 tool_call=true :: the frame is ambiguous: the key `c` appears twice in `input` at line 1 column 73",
            ),
            (
                r#"{"type":"tool_call","callID":"c1","tool":"x","input":{},"note":1,"note":2}"#,
                "err invalid_frame call=c1 tool_call=true :: the frame is ambiguous: duplicate field `note` at line 1 column 71",
            ),
            (
                r#"{"type":"tool_call","callID":"c1","tool":"x","input":{},"extra":{"k":1,"k":2}}"#,
                "err invalid_frame call=c1 tool_call=true :: the frame is ambiguous: the key `k` appears twice in the frame at line 1 column 74",
            ),
            (
                r#"{"type":"tool_call","callID":"c1","tool":"Bash","tool":"Read","input":{}}"#,
                "err invalid_frame call=c1 tool_call=true :: the frame is ambiguous: duplicate field `tool` at line 1 column 54",
            ),
            (
                r#"{"type":"tool_call","callID":"c1","tool":"Bash","input":{"command":"ls"},"inp\u0075t":{"command":"rm -rf /"}}"#,
                "err invalid_frame call=c1 tool_call=true :: the frame is ambiguous: duplicate field `input` at line 1 column 85",
            ),
            (
                r#"{"type":"session_start","sessionID":"k","permissions":{"filePatterns":["src/**"],"filePatterns":["**"]}}"#,
                "err invalid_frame call=- tool_call=false :: the frame is ambiguous: the key `filePatterns` appears twice in `permissions` at line 1 column 95",
            ),
            (
                r#"{"type":"tool_call","callID":"c1","tool":"Bash","input":{"a":[1,2.5,null,true,{"b":"c"}],"command":"ls"}}"#,
                r#"ok {"type":"tool_call","sessionID":"main","callID":"c1","tool":"Bash","input":{"a":[1,2.5,null,true,{"b":"c"}],"command":"ls"}}"#,
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
                r#"{"type":"permission_response","permissionID":"per_1","response":"always","patterns":["src/*"]}"#,
                r#"ok {"type":"permission_response","permissionID":"per_1","response":"always","patterns":["src/*"]}"#,
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"once","patterns":["src/*"]}"#,
                "err invalid_frame call=- tool_call=false :: `patterns` goes only with `\"response\":\"always\"`, not with `once`",
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"always","expiresIn":1800,"scope":"project"}"#,
                r#"ok {"type":"permission_response","permissionID":"per_1","response":"always","scope":"project","expiresIn":1800}"#,
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"always","expiresIn":315360000}"#,
                r#"ok {"type":"permission_response","permissionID":"per_1","response":"always","expiresIn":315360000}"#,
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"always","expiresIn":0}"#,
                "err invalid_frame call=- tool_call=false :: `expiresIn` of permission_response must be a whole number of seconds from 1 to 315360000 (ten years), not 0",
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"always","expiresIn":-5}"#,
                "err invalid_frame call=- tool_call=false :: `expiresIn` of permission_response must be a whole number of seconds from 1 to 315360000 (ten years), not -5",
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"always","expiresIn":1.5}"#,
                "err invalid_frame call=- tool_call=false :: `expiresIn` of permission_response must be a whole number of seconds from 1 to 315360000 (ten years), not 1.5",
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"always","expiresIn":315360001}"#,
                "err invalid_frame call=- tool_call=false :: `expiresIn` of permission_response must be a whole number of seconds from 1 to 315360000 (ten years), not 315360001",
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"always","expiresIn":"1800"}"#,
                "err invalid_frame call=- tool_call=false :: `expiresIn` of permission_response must be a whole number of seconds from 1 to 315360000 (ten years), not a string",
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"always","expiresIn":null}"#,
                "err invalid_frame call=- tool_call=false :: `expiresIn` of permission_response must be a whole number of seconds from 1 to 315360000 (ten years), not null",
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"once","expiresIn":60}"#,
                "err invalid_frame call=- tool_call=false :: `expiresIn` goes only with `\"response\":\"always\"`, not with `once`",
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"reject","expiresIn":60}"#,
                "err invalid_frame call=- tool_call=false :: `expiresIn` goes only with `\"response\":\"always\"`, not with `reject`",
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"always","patterns":"src/*"}"#,
                "err invalid_frame call=- tool_call=false :: `patterns` of permission_response must be a list of strings, not a string",
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"always","patterns":[["src/*"]]}"#,
                "err invalid_frame call=- tool_call=false :: `patterns` of permission_response must be a list of strings, not a list holding an array",
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"always","patterns":[],"patterns":["*"]}"#,
                "err invalid_frame call=- tool_call=false :: the frame is ambiguous: duplicate field `patterns` at line 1 column 97",
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
                "err invalid_json call=- tool_call=false :: the line is not JSON: EOF while parsing a value at line 1 column 8 (the line ends before the frame does)",
            ),
            // Valid-looking calls the decoder cannot read are denied by callID.
            (
                r#"{"type":"tool_call","callID":"c1","tool":"Read","input":{"file_path":"caf\udce9.txt"}}"#,
                "err invalid_json call=c1 tool_call=true :: the input holds a lone surrogate escape \\udce9, which is not Unicode",
            ),
            (
                r#"{"type":"tool_call","callID":"c1","tool":"Read","input":{"n":1e400}}"#,
                "err invalid_json call=c1 tool_call=true :: the input holds the number 1e400, which is out of range",
            ),
            (
                r#"{"type":"tool_call","callID":"c1","tool":"Read","input":{"n":1}}{"type":"tool_call","callID":"c2"}"#,
                "err invalid_json call=c1 tool_call=true :: the line holds more than one frame",
            ),
            (
                r#"{"type":"tool_call","callID":"c\ud800","tool":"Read","input":{}"#,
                "err invalid_json call=- tool_call=true :: the line is not JSON: unexpected end of hex escape at line 1 column 38 (`callID` holds a lone surrogate escape \\ud800, which is not Unicode)",
            ),
            (
                r#"{"type":"permission_response","permissionID":"per_1","response":"once"#,
                "err invalid_json call=- tool_call=false :: the line is not JSON: EOF while parsing a string at line 1 column 69 (the line ends before the frame does)",
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
    fn unreadable_lines_keep_their_ids() {
        let err =
            decode(br#"{"type":"permission_response","permissionID":"per_1","response":"maybe"}"#)
                .unwrap_err();
        assert_eq!(err.permission_id.as_deref(), Some("per_1"));
        let err = decode(
            br#"{"type":"permission_response","permission_id":"per_2","response":"once"} x"#,
        )
        .unwrap_err();
        assert_eq!(err.permission_id.as_deref(), Some("per_2"));
        let err = decode(b"{\"type\":\"tool_call\",\"callID\":\"c1\",\"input\":{\"a\":\"\xff\"}}")
            .unwrap_err();
        assert_eq!(
            (err.code, err.call_id.as_deref(), err.tool_call),
            (ErrorCode::InvalidUtf8, Some("c1"), true)
        );
        assert_eq!(
            err.message,
            "the input holds the byte 0xff, which is not UTF-8"
        );
        let err = decode(br#"{"type":"tool_call","callID":"a"}{"type":"set_mode"}{"type":"tool_call","callID":"b"}{"type":"x"}"#)
            .unwrap_err();
        let others: Vec<_> = err
            .others
            .iter()
            .map(|o| (o.call_id.as_deref(), o.tool_call))
            .collect();
        assert_eq!(others, vec![(None, false), (Some("b"), true)]);
    }

    #[test]
    fn deep_and_long_lines_are_read_in_one_pass() {
        let mut line = br#"{"type":"tool_call","callID":"deep","tool":"x","input":{"a":"#.to_vec();
        line.extend(std::iter::repeat_n(b'[', 1_000_000));
        let err = decode(&line).unwrap_err();
        assert_eq!(err.call_id.as_deref(), Some("deep"));
        assert_eq!(err.message, "the input nests deeper than 127 levels");
        let mut line = br#"{"type":"tool_call","callID":"long","tool":"x","input":{"a":""#.to_vec();
        line.extend(std::iter::repeat_n(b'a', 16 << 20));
        line.extend(b"\\udc00\"}}");
        let err = decode(&line).unwrap_err();
        assert_eq!(err.call_id.as_deref(), Some("long"));
        assert_eq!(
            err.message,
            "the input holds a lone surrogate escape \\udc00, which is not Unicode"
        );
    }

    #[test]
    fn many_objects_on_a_line_cost_no_memory_each() {
        let line = "{}".repeat(1 << 20);
        let found = crate::scan::scan(line.as_bytes());
        assert_eq!(found.heads.len(), 2);
        let err = decode(line.as_bytes()).unwrap_err();
        assert_eq!((err.others.len(), err.call_id), (0, None));
    }

    #[test]
    fn non_utf8_is_its_own_error() {
        let err = decode(b"{\"type\":\"tool_call\",\"callID\":\"\xff\"}").unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidUtf8);
        assert_eq!(err.call_id, None);
    }

    /// A position in a message names the input line the broker read, not
    /// serde's line within the frame; the ids the line gives are kept.
    #[test]
    fn messages_name_the_input_line_and_errors_keep_ids() {
        // The line, its number, the message, callID, sessionID, permissionID.
        type Case<'a> = (
            &'a [u8],
            u64,
            &'a str,
            Option<&'a str>,
            Option<&'a str>,
            Option<&'a str>,
        );
        let cases: &[Case] = &[
            (b"not json", 7, "the line is not JSON: expected ident at line 7 column 2", None, None, None),
            (
                br#"{"type":"cancel","sessionID":"s","callID":"c",}"#,
                12,
                "the line is not JSON: trailing comma at line 12 column 47 (the frame is not JSON (unexpected `}` at offset 46))",
                Some("c"),
                Some("s"),
                None,
            ),
            (
                br#"{"type":"tool_call","callID":"a","callID":"b","tool":"x","input":{}}"#,
                3,
                "the frame is ambiguous: duplicate field `callID` at line 3 column 41",
                Some("b"),
                None,
                None,
            ),
            (
                br#"{"type":"permission_response","permission_id":"per_1","response":"yes"}"#,
                9,
                "`response` must be `once`, `always` or `reject`, not `yes`",
                None,
                None,
                Some("per_1"),
            ),
            (
                br#"{"type":"set_mode","sessionID":"s","mode":5}"#,
                2,
                "`mode` of set_mode must be a string, not a number",
                None,
                Some("s"),
                None,
            ),
        ];
        for (line, number, message, call, session, permission) in cases {
            let err = decode_line(line, *number).unwrap_err();
            assert_eq!(err.message, *message);
            assert_eq!(err.call_id.as_deref(), *call);
            assert_eq!(err.session_id.as_deref(), *session);
            assert_eq!(err.permission_id.as_deref(), *permission);
        }
    }
}
