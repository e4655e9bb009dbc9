//! The wire protocol of toolgate, version 1: every frame as a serde type.
//!
//! One JSON object per line. The client (an agent, an orchestrator, a UI)
//! sends [`ClientFrame`]s; the broker answers with [`ServerFrame`]s. Frame
//! types are snake_case; fields are camelCase with `ID` spelled as OpenCode
//! spells it (`sessionID`, `callID`, `permissionID`).
//!
//! This crate holds types and the checks that a line is a well-formed frame
//! ([`decode()`]); it knows nothing of modes, rules or decisions. The JSON
//! schemas in `schemas/` are generated from these types.
//!
//! ```
//! use toolgate_protocol::{decode, ClientFrame};
//!
//! let line = br#"{"type":"tool_call","callID":"c1","tool":"bash","input":{"command":"ls"}}"#;
//! match decode(line) {
//!     Ok(ClientFrame::ToolCall(call)) => {
//!         assert_eq!(call.call_id, "c1");
//!         assert_eq!(call.session_id, "main");
//!     }
//!     other => panic!("unexpected {other:?}"),
//! }
//! ```
#![deny(missing_docs)]

mod decode;
mod encode;
pub mod scan;

pub use encode::write_line;

pub use decode::{decode, decode_line, decode_value, DecodeError};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The protocol version this crate speaks, sent in [`Ready::protocol`].
pub const PROTOCOL_VERSION: u32 = 1;

/// The session a frame without `sessionID` belongs to.
pub const DEFAULT_SESSION: &str = "main";

// ---------------------------------------------------------------------------
// Client → broker
// ---------------------------------------------------------------------------

/// A frame sent to the broker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientFrame {
    /// A tool call the agent wants to make; answered by exactly one [`Decision`].
    ToolCall(ToolCall),
    /// The answer to a [`PermissionRequest`].
    PermissionResponse(PermissionResponse),
    /// Change a session's mode; answered by [`ModeChanged`].
    SetMode(SetMode),
    /// Open a (sub-)session with its own scope; answered by [`SessionStarted`].
    SessionStart(SessionStart),
    /// End a session: its pending calls are denied; answered by [`SessionEnded`].
    SessionEnd(SessionRef),
    /// Withdraw a pending call: it is decided `deny` with source `cancel`.
    Cancel(Cancel),
    /// Ask for the model-facing text of a session's mode; answered by [`Reminder`].
    GetReminder(SessionRef),
    /// List the grants in force; answered by [`Grants`].
    ListGrants(ListGrants),
    /// Remove a grant; answered by [`Grants`].
    RevokeGrant(RevokeGrant),
    /// Deny every pending call, flush, exit 0.
    Shutdown(Shutdown),
    /// Say who is connecting (an agent, an approver or an observer);
    /// answered by [`Ready`].
    Hello(Hello),
    /// List the sessions (a subtree, or all); answered by [`Sessions`].
    ListSessions(ListSessions),
    /// List the open questions (of a subtree, or all); answered by [`Pending`].
    ListPending(ListSessions),
    /// Which tools a session may use in its mode and scope; answered by
    /// [`Tools`].
    ListTools(SessionRef),
    /// Make a token in the shared store (an `admin` token's remote
    /// connection only); answered by [`TokenCreated`].
    CreateToken(CreateToken),
    /// List the shared store's tokens (an `admin` token's remote connection
    /// only); answered by [`Tokens`].
    ListTokens(ListTokens),
    /// Revoke a token in the shared store (an `admin` token's remote
    /// connection only); answered by [`TokenRevoked`].
    RevokeToken(RevokeToken),
}

/// `tool_call`: a tool call the agent wants to make.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCall {
    /// The session; `"main"` when absent.
    #[serde(rename = "sessionID", default = "default_session")]
    pub session_id: String,
    /// The agent's id for this call, echoed in the decision.
    #[serde(rename = "callID")]
    pub call_id: String,
    /// The tool as the agent names it (`Bash`, `bash`, `shell`, `mcp__github__get_issue`, ...).
    pub tool: String,
    /// The tool's arguments, as the agent would pass them to the tool.
    pub input: Map<String, Value>,
    /// An untrusted claim (an MCP annotation) that the tool only reads. It never
    /// admits a tool on its own.
    #[serde(
        rename = "readOnlyHint",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub read_only_hint: Option<bool>,
    /// The directory the call runs in (absolute); the project root when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// `permission_response`: the answer to a permission request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = permission_id_alias)]
pub struct PermissionResponse {
    /// The request being answered; `permission_id` is accepted as an alias.
    #[serde(rename = "permissionID", alias = "permission_id")]
    pub permission_id: String,
    /// `once`, `always` or `reject`.
    pub response: Reply,
    /// Feedback for the agent (returned with a `reject`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Where an `always` answer's grants are kept: the session (default) or
    /// every session of the project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<GrantScope>,
    /// With `always` only: one of the request's `alwaysOptions` (the same
    /// patterns, in any order), granted instead of the request's `always`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patterns: Option<Vec<String>>,
    /// With `always` only: how long the grants last, in whole seconds, from
    /// 1 to 315360000 (ten years, `MAX_EXPIRES_IN`); without it they last
    /// as long as their session keeps them (a project grant: until revoked).
    #[serde(rename = "expiresIn", default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_EXPIRES_IN))]
    pub expires_in: Option<u64>,
}

/// The longest lifetime an `always` answer may give its grants
/// (`expiresIn`, in seconds): ten years.
pub const MAX_EXPIRES_IN: u64 = 315_360_000;

/// The schema of `permission_response` names link-assistant/agent's spelling
/// `permission_id` beside `permissionID` and requires exactly one of them, as
/// the decoder does (serde's `alias` is invisible to the schema).
fn permission_id_alias(schema: &mut schemars::Schema) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        let alias = serde_json::json!({
            "description": "link-assistant/agent's spelling of `permissionID`; a frame gives one or the other, not both.",
            "type": "string"
        });
        properties.insert("permission_id".to_string(), alias);
    }
    if let Some(Value::Array(required)) = object.get_mut("required") {
        required.retain(|name| name != "permissionID");
    }
    object.insert(
        "oneOf".to_string(),
        serde_json::json!([{"required": ["permissionID"]}, {"required": ["permission_id"]}]),
    );
}

/// Where a grant applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GrantScope {
    /// The session that answered (the default).
    Session,
    /// Every session of this project root; kept across restarts with `--state-dir`.
    Project,
}

impl GrantScope {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            GrantScope::Session => "session",
            GrantScope::Project => "project",
        }
    }
}

/// What the user answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// Allow this call only.
    Once,
    /// Allow this call and grant the request's `always` patterns (or the
    /// `alwaysOptions` list named by `patterns`) for the session or project.
    Always,
    /// Deny this call and end the session's other pending asks.
    Reject,
}

/// `set_mode`: change a session's mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SetMode {
    /// The session; `"main"` when absent.
    #[serde(rename = "sessionID", default = "default_session")]
    pub session_id: String,
    /// A mode name or alias (`auto`, `auto_edit`, `ask`, `plan`, `readonly`, `default`, `yolo`, ...).
    pub mode: String,
}

/// `session_start`: open a session, optionally a child of another one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionStart {
    /// The new session.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// The parent session whose scope and mode bound this one.
    #[serde(rename = "parentID", default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// A mode at least as strict as the parent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The narrowing this session adds to its ancestors'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<ScopeSpec>,
    /// Join the session if it is already started under the same parent
    /// (answered `session_started` with its scope, nothing changed), start
    /// it otherwise: what a hook process sends for a sub-agent's calls,
    /// each from a new connection.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub join: bool,
}

/// A sub-session's permissions (Roo Code's subtask permissions). A key it
/// does not know is refused: a misspelt `filePattern` would otherwise
/// start the session with no file limit at all.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScopeSpec {
    /// Tools the session may use at all (absent: no limit).
    #[serde(
        rename = "allowedTools",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub allowed_tools: Option<Vec<String>>,
    /// Tools the session may never use.
    #[serde(
        rename = "deniedTools",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub denied_tools: Option<Vec<String>>,
    /// Patterns every file path must match one of (path globs, or regular
    /// expressions with `patternSyntax: "regex"`).
    #[serde(
        rename = "filePatterns",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub file_patterns: Option<Vec<String>>,
    /// Patterns every simple shell command must match one of (OpenCode
    /// wildcards, or regular expressions with `patternSyntax: "regex"`).
    #[serde(
        rename = "commandPatterns",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub command_patterns: Option<Vec<String>>,
    /// How `filePatterns` and `commandPatterns` are read: `glob` (the
    /// default: path globs and OpenCode wildcards) or `regex` (regular
    /// expressions matched against the whole path or command, Roo Code's).
    #[serde(
        rename = "patternSyntax",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub pattern_syntax: Option<String>,
}

/// A frame that names only a session (`session_end`, `get_reminder`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionRef {
    /// The session; `"main"` when absent.
    #[serde(rename = "sessionID", default = "default_session")]
    pub session_id: String,
}

/// `cancel`: withdraw a pending call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Cancel {
    /// The session; `"main"` when absent.
    #[serde(rename = "sessionID", default = "default_session")]
    pub session_id: String,
    /// The call to withdraw.
    #[serde(rename = "callID")]
    pub call_id: String,
}

/// `list_grants`: list the grants in force.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListGrants {
    /// Only this session's grants; every session's when absent.
    #[serde(rename = "sessionID", default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// `list_sessions` and `list_pending`: what the broker holds, for the
/// asking connection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListSessions {
    /// Only this session and the sessions under it; every session when
    /// absent.
    #[serde(rename = "sessionID", default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// `revoke_grant`: remove one grant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RevokeGrant {
    /// The grant, as listed by `grants`.
    #[serde(rename = "grantID")]
    pub grant_id: String,
}

/// `shutdown`: deny every pending call, flush, exit 0.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Shutdown {}

/// What a token lets its holder do (the store's roles).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TokenRole {
    /// Sends tool calls; never answers a question.
    Agent,
    /// Answers questions.
    Approver,
    /// Watches.
    Observer,
    /// An approver that may also revoke grants, shut a broker down and
    /// manage tokens.
    Admin,
}

impl TokenRole {
    /// The role as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenRole::Agent => "agent",
            TokenRole::Approver => "approver",
            TokenRole::Observer => "observer",
            TokenRole::Admin => "admin",
        }
    }
}

/// `create_token`: make a token in the shared store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CreateToken {
    /// Its name, unique among tokens not revoked.
    pub name: String,
    /// What it may do.
    pub role: TokenRole,
    /// The project root it is limited to; every project when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Seconds until it expires (1 to 100 years); never when absent.
    #[serde(rename = "expiresIn", default, skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<u64>,
}

/// `list_tokens`: the shared store's tokens (never their text or hash).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListTokens {}

/// `revoke_token`: revoke a token by name (the one not yet revoked) or id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RevokeToken {
    /// The token's name or id.
    pub name: String,
}

/// `hello`: who the connection is. An `approver` receives every question of
/// every session; an `agent` (the default, also for connections that send no
/// `hello`) receives the questions of its own calls when no approver is
/// connected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Hello {
    /// `agent` (default) or `approver`.
    #[serde(default)]
    pub role: Role,
    /// The client's name (at most 128 characters), shown to approvers and
    /// echoed in `ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// For an `observer`: the session whose subtree it watches (every
    /// session when absent).
    #[serde(rename = "sessionID", default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// A bearer token (`tg_…`): who the connection is on a remote (TLS)
    /// listener, where the first frame must be a `hello` that carries one.
    /// Ignored on stdio and on the Unix socket, whose peers are known by
    /// their user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// For an `approver` or an `observer` on a broker that shares a store
    /// (`serve --store`): whose questions it is shown. `own` (the default):
    /// those of the broker's project root; `all`: also those every other
    /// project's brokers put in the store, each naming its project and host
    /// in `metadata` (one inbox across projects). Refused on a broker
    /// without a store, for an agent, and on a remote connection whose token
    /// is limited to one project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projects: Option<Projects>,
}

/// Whose questions an approver or an observer is shown ([`Hello::projects`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Projects {
    /// The broker's own project root's.
    #[default]
    Own,
    /// Every project's on the broker's shared store.
    All,
}

impl Projects {
    /// As written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Projects::Own => "own",
            Projects::All => "all",
        }
    }
}

/// What a connection is, as said by `hello`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Sends tool calls; answers its own questions when no approver is connected.
    #[default]
    Agent,
    /// Receives every question and may answer it.
    Approver,
    /// Receives every decision, question, answer, resolution, session start
    /// and end and mode change (of a subtree, or of every session), and
    /// cannot act: it may only list.
    Observer,
}

impl Role {
    /// The role as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Approver => "approver",
            Role::Observer => "observer",
        }
    }
}

fn default_session() -> String {
    DEFAULT_SESSION.to_string()
}

// ---------------------------------------------------------------------------
// Broker → client
// ---------------------------------------------------------------------------

/// A frame written by the broker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// The first line the broker writes.
    Ready(Ready),
    /// The one answer to a tool call.
    Decision(Decision),
    /// A question for the user or orchestrator.
    PermissionRequest(Box<PermissionRequest>),
    /// An ask ended other than by its own response: a UI can close its prompt.
    PermissionResolved(PermissionResolved),
    /// A session's mode changed.
    ModeChanged(ModeChanged),
    /// A session was opened; carries its effective scope.
    SessionStarted(SessionStarted),
    /// A session was ended.
    SessionEnded(SessionEnded),
    /// The model-facing text of a session's mode.
    Reminder(Reminder),
    /// The grants in force.
    Grants(Grants),
    /// To observers: a question was answered, by whom and how.
    PermissionAnswered(PermissionAnswered),
    /// The answer to `list_sessions`.
    Sessions(Sessions),
    /// The answer to `list_pending`: the open questions.
    Pending(Pending),
    /// The answer to `list_tools`.
    Tools(Tools),
    /// The answer to `create_token`: the token, once.
    TokenCreated(TokenCreated),
    /// The answer to `list_tokens`.
    Tokens(Tokens),
    /// The answer to `revoke_token`.
    TokenRevoked(TokenRevoked),
    /// A frame could not be handled.
    Error(ErrorFrame),
}

/// `ready`: the broker is listening.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Ready {
    /// The protocol version, 1.
    pub protocol: u32,
    /// The broker's version.
    pub version: String,
    /// The mode new sessions start in.
    pub mode: String,
    /// The project root, absolute: paths are matched relative to it.
    #[serde(rename = "projectRoot")]
    pub project_root: String,
    /// Where the rules come from, lowest precedence first: `built-in`, the
    /// policy file's absolute path, `PATH#agent.NAME` for the agent of an
    /// OpenCode config chosen with `--agent`, `TOOLGATE_PERMISSION`,
    /// `--permission`.
    #[serde(rename = "policySources")]
    pub policy_sources: Vec<String>,
    /// The state directory grants and sessions are kept in, absolute; null
    /// when nothing is kept across restarts.
    #[serde(rename = "stateDir")]
    pub state_dir: Option<String>,
    /// The connection's role, once it said `hello`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The connection's client name, once it said `hello` with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// `all` when the connection's `hello` asked for every project's
    /// questions ([`Hello::projects`]) and the broker took it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projects: Option<Projects>,
}

/// `decision`: the one answer to a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Decision {
    /// The call's session.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// The call.
    #[serde(rename = "callID")]
    pub call_id: String,
    /// `allow` or `deny`.
    pub decision: Verdict,
    /// What decided.
    pub source: Source,
    /// One human sentence saying why.
    pub reason: String,
    /// The configured rule or grant that decided, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<RuleRef>,
    /// What the user typed with `reject`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Model-facing plan-mode text (on plan-mode denials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reminder: Option<String>,
    /// On an allowed delegation that carried `permissions` (a sub-task):
    /// the child session it started, with that scope, for the sub-agent's
    /// calls.
    #[serde(
        rename = "childSessionID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub child_session_id: Option<String>,
}

/// The two answers a call can get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The agent may run the call.
    Allow,
    /// The agent must not run the call.
    Deny,
}

/// What made a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The mode table.
    Mode,
    /// A configured rule (built-in default, policy file or override).
    Rule,
    /// A grant recorded by an earlier `always`.
    Grant,
    /// The user's answer.
    User,
    /// The session's scope.
    Scope,
    /// Nobody answered in time.
    Timeout,
    /// The client cancelled the call.
    Cancel,
    /// The broker shut down (or the session ended) first.
    Shutdown,
    /// The call was malformed.
    Invalid,
    /// A replayed recording holds no answer to the question the call raised
    /// (`toolgate replay`): it is denied, never silently allowed.
    Replay,
}

/// A rule as written, with where it was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RuleRef {
    /// The permission name the rule is for (a glob).
    pub permission: String,
    /// The pattern the rule matches (a wildcard).
    pub pattern: String,
    /// `allow`, `ask` or `deny`.
    pub action: String,
    /// Where it came from: a file path, `--permission`, `built-in` or `grant`.
    pub origin: String,
    /// For a grant with a lifetime: when it ends, in milliseconds since the
    /// Unix epoch (the broker's clock).
    #[serde(rename = "expiresAt", default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
}

/// `permission_request`: a question, compatible with link-assistant/agent's frame
/// and OpenCode's `patterns`/`always`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PermissionRequest {
    /// Milliseconds since the Unix epoch.
    pub timestamp: u64,
    /// The call's session.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// The session's parent, when it was started under one (a sub-agent asks).
    #[serde(rename = "parentID", default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// The id the answer must name.
    #[serde(rename = "permissionID")]
    pub permission_id: String,
    /// The call asked about.
    #[serde(rename = "callID")]
    pub call_id: String,
    /// The permission name, as link-assistant clients read it.
    pub tool: String,
    /// The permission name, as OpenCode reads it.
    pub permission: String,
    /// The tool as the agent named it.
    #[serde(rename = "toolName")]
    pub tool_name: String,
    /// Repeats `always`, for link-assistant clients.
    pub pattern: Vec<String>,
    /// The concrete things asked about.
    pub patterns: Vec<String>,
    /// What an `always` answer grants.
    pub always: Vec<String>,
    /// What an `always` answer may grant instead, narrow to wide (the file,
    /// its directory, everything; the command, its prefix): the last list is
    /// `always`. Empty for a plan approval.
    #[serde(rename = "alwaysOptions")]
    pub always_options: Vec<Vec<String>>,
    /// The command, file path or URL.
    pub title: String,
    /// `plan` for a plan approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Anything a UI needs to show the question (`input`, `reason`, `plan`).
    pub metadata: Map<String, Value>,
}

/// `permission_resolved`: an ask ended other than by its own response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PermissionResolved {
    /// The request that ended.
    #[serde(rename = "permissionID")]
    pub permission_id: String,
    /// The call's session.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// The call asked about.
    #[serde(rename = "callID")]
    pub call_id: String,
    /// Why it ended.
    pub reason: String,
}

/// `permission_answered` (to observers): an approver's (or the calling
/// connection's) answer to a question was taken; the decision follows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PermissionAnswered {
    /// The question.
    #[serde(rename = "permissionID")]
    pub permission_id: String,
    /// The call's session.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// The call asked about.
    #[serde(rename = "callID")]
    pub call_id: String,
    /// `once`, `always` or `reject`.
    pub response: Reply,
    /// The answer's message, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The `always` patterns chosen, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patterns: Option<Vec<String>>,
    /// The lifetime an `always` gave its grants, in seconds, if any.
    #[serde(rename = "expiresIn", default, skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<u64>,
    /// Who answered: the connection's client name, or its role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// `sessions`: the answer to `list_sessions`, parents before children.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Sessions {
    /// The sessions.
    pub sessions: Vec<SessionInfo>,
}

/// One session, as `sessions` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionInfo {
    /// The session.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// Its parent, if any.
    #[serde(rename = "parentID", default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// Its effective mode (never looser than its parent's).
    pub mode: String,
    /// Whether it was started (`session_start`), not only seen in calls.
    pub started: bool,
    /// The effective scope.
    pub scope: EffectiveScope,
    /// The clients (names, else roles) of the open connections that sent
    /// calls in it.
    pub clients: Vec<String>,
    /// How many of its calls wait for an answer.
    pub pending: usize,
}

/// `tools`: the answer to `list_tools`, by the mode and scope of the
/// session (not by the user's rules, which judge each call's input).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Tools {
    /// The session.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// Its effective mode.
    pub mode: String,
    /// Tools every call of which the mode and scope allow.
    pub available: Vec<String>,
    /// Tools some calls of which are allowed, depending on their input
    /// (read-only shell commands, read-only sub-agent types, paths and
    /// commands a scope admits).
    pub limited: Vec<String>,
    /// Tools whose calls are put to a person first.
    pub asks: Vec<String>,
    /// Tools no call of which can run: a host may hide them from the model.
    pub unavailable: Vec<String>,
}

/// `pending`: the answer to `list_pending`, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Pending {
    /// The open questions, as they were put.
    pub questions: Vec<PermissionRequest>,
}

/// `mode_changed`: a session's mode changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModeChanged {
    /// The session.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// The new mode.
    pub mode: String,
    /// The mode before.
    pub previous: String,
    /// Present when `mode` is not the mode `set_mode` asked for because a
    /// managed policy's `mode` is a floor no session goes below: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The model-facing text of the new mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reminder: Option<String>,
    /// Present when the change this frame reports could not be saved in
    /// the state directory (`--state-dir`): why. The change is in force
    /// all the same; the broker keeps retrying, and says at exit if it was
    /// lost. Absent when saved, or when no state is kept.
    #[serde(rename = "notSaved", default, skip_serializing_if = "Option::is_none")]
    pub not_saved: Option<String>,
}

/// `session_started`: a session was opened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionStarted {
    /// The session.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// Its parent, if any.
    #[serde(rename = "parentID", default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// Its mode.
    pub mode: String,
    /// The effective scope: its own narrowing intersected with every ancestor's.
    pub scope: EffectiveScope,
    /// Present when the change this frame reports could not be saved in
    /// the state directory (`--state-dir`): why. The change is in force
    /// all the same; the broker keeps retrying, and says at exit if it was
    /// lost. Absent when saved, or when no state is kept.
    #[serde(rename = "notSaved", default, skip_serializing_if = "Option::is_none")]
    pub not_saved: Option<String>,
}

/// A session's effective scope.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EffectiveScope {
    /// Tools allowed at all (absent: no limit).
    #[serde(
        rename = "allowedTools",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub allowed_tools: Option<Vec<String>>,
    /// Tools never allowed.
    #[serde(rename = "deniedTools", default)]
    pub denied_tools: Vec<String>,
    /// Layers of file patterns: a path must match one pattern of every layer.
    /// A `patternSyntax: "regex"` layer shows its expressions anchored, as
    /// they are matched (`^(?:src/.*)$`).
    #[serde(rename = "filePatterns", default)]
    pub file_patterns: Vec<Vec<String>>,
    /// Layers of command patterns: each simple command must match one pattern
    /// of every layer (a regex layer's shown anchored, as for `filePatterns`).
    #[serde(rename = "commandPatterns", default)]
    pub command_patterns: Vec<Vec<String>>,
    /// Tools exempt from `allowedTools`/`deniedTools`.
    #[serde(rename = "alwaysAvailableTools", default)]
    pub always_available_tools: Vec<String>,
}

/// `session_ended`: a session was ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionEnded {
    /// The session.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// How many pending calls were denied.
    pub denied: u64,
    /// Present when the change this frame reports could not be saved in
    /// the state directory (`--state-dir`): why. The change is in force
    /// all the same; the broker keeps retrying, and says at exit if it was
    /// lost. Absent when saved, or when no state is kept.
    #[serde(rename = "notSaved", default, skip_serializing_if = "Option::is_none")]
    pub not_saved: Option<String>,
}

/// `reminder`: the model-facing text of a session's mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Reminder {
    /// The session.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// Its mode.
    pub mode: String,
    /// The text.
    pub text: String,
}

/// `grants`: the grants in force.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Grants {
    /// The grants, oldest first.
    pub grants: Vec<GrantInfo>,
    /// Present when the change this frame reports could not be saved in
    /// the state directory (`--state-dir`): why. The change is in force
    /// all the same; the broker keeps retrying, and says at exit if it was
    /// lost. Absent when saved, or when no state is kept.
    #[serde(rename = "notSaved", default, skip_serializing_if = "Option::is_none")]
    pub not_saved: Option<String>,
}

/// One grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GrantInfo {
    /// Its id, for `revoke_grant`.
    #[serde(rename = "grantID")]
    pub grant_id: String,
    /// The session it belongs to; for a project grant, the session that granted it.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// `session` or `project`.
    pub scope: GrantScope,
    /// The permission name it covers.
    pub permission: String,
    /// The pattern it covers.
    pub pattern: String,
    /// `plan` for a kind grant made in plan mode: it covers only in plan
    /// mode, and a session grant of this sort ends when the session leaves
    /// plan mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// For a grant made with `expiresIn`: when it ends, in milliseconds since
    /// the Unix epoch (the broker's clock). An ended grant is never listed.
    #[serde(rename = "expiresAt", default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
}

/// A stored token as `list_tokens` shows it: never its text or hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TokenInfo {
    /// Its id (a UUID), for `revoke_token`.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its role.
    pub role: TokenRole,
    /// The project root it is limited to; null: every project.
    pub project: Option<String>,
    /// When it was made, in milliseconds since the Unix epoch (the store's clock).
    #[serde(rename = "createdAt")]
    pub created_at: u64,
    /// When it ends, in milliseconds since the Unix epoch; null: never.
    #[serde(rename = "expiresAt")]
    pub expires_at: Option<u64>,
    /// Whether its lifetime was over when it was read (the store's clock).
    pub expired: bool,
    /// When it was revoked, in milliseconds since the Unix epoch; null: not revoked.
    #[serde(rename = "revokedAt")]
    pub revoked_at: Option<u64>,
}

/// `token_created`: the token made, once committed to the store. Its text
/// is in this frame only: the store keeps its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TokenCreated {
    /// The token's text (`tg_…`), shown this once.
    pub token: String,
    /// What the store holds of it.
    pub info: TokenInfo,
}

/// `tokens`: the shared store's tokens, revoked and expired ones too,
/// oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Tokens {
    /// The tokens.
    pub tokens: Vec<TokenInfo>,
}

/// `token_revoked`: the token is revoked in the store (now, or it already
/// was).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TokenRevoked {
    /// The token.
    pub info: TokenInfo,
    /// True when it was revoked already (nothing changed).
    pub already: bool,
}

/// `error`: a frame could not be handled. The broker carries on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorFrame {
    /// What went wrong.
    pub code: ErrorCode,
    /// One human sentence.
    pub message: String,
    /// The call concerned, when one could be read.
    #[serde(rename = "callID", default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The session concerned: the `sessionID` the line gives when it could
    /// be read; for a frame that decoded, the session it addresses (`"main"`
    /// when it names none).
    #[serde(rename = "sessionID", default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The permission request concerned, when one could be read.
    #[serde(
        rename = "permissionID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub permission_id: Option<String>,
    /// The 1-based input line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// Present when the change this frame reports could not be saved in
    /// the state directory (`--state-dir`): why. The change is in force
    /// all the same; the broker keeps retrying, and says at exit if it was
    /// lost. Absent when saved, or when no state is kept.
    #[serde(rename = "notSaved", default, skip_serializing_if = "Option::is_none")]
    pub not_saved: Option<String>,
}

impl ErrorFrame {
    /// An `error` with `code` and `message` that names no call, session,
    /// permission or line (set those with struct update syntax).
    pub fn new(code: ErrorCode, message: String) -> ErrorFrame {
        ErrorFrame {
            code,
            message,
            call_id: None,
            session_id: None,
            permission_id: None,
            line: None,
            not_saved: None,
        }
    }
}

/// The kinds of [`ErrorFrame`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The line is not JSON.
    InvalidJson,
    /// The line is not UTF-8.
    InvalidUtf8,
    /// The line is longer than the frame limit.
    FrameTooLarge,
    /// The line is JSON but not a well-formed frame (not an object, missing or mistyped field).
    InvalidFrame,
    /// The `type` is not one this broker knows.
    UnknownType,
    /// No request has this `permissionID`.
    UnknownPermission,
    /// The request was already answered or ended.
    AlreadyResolved,
    /// A call with this `callID` is already pending in the session.
    DuplicateCall,
    /// No such session.
    UnknownSession,
    /// No pending call has this `callID` (a `cancel` that came too late).
    UnknownCall,
    /// No grant has this `grantID`.
    UnknownGrant,
    /// The frame names a mode that does not exist.
    InvalidMode,
    /// The peer may not use this broker (another user on its socket).
    Forbidden,
    /// No token has this name or id (`revoke_token`).
    UnknownToken,
    /// A token not revoked already has this name (`create_token`).
    NameTaken,
    /// The shared store could not be reached or did not answer: nothing was
    /// changed (`create_token`, `list_tokens`, `revoke_token`; an answer to
    /// a question asked on another broker, which stays open).
    StoreUnavailable,
}

impl Verdict {
    /// The verdict as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
        }
    }
}

impl Source {
    /// The source as written on the wire (serde's `snake_case` of the variant).
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Mode => "mode",
            Source::Rule => "rule",
            Source::Grant => "grant",
            Source::User => "user",
            Source::Scope => "scope",
            Source::Timeout => "timeout",
            Source::Cancel => "cancel",
            Source::Shutdown => "shutdown",
            Source::Invalid => "invalid",
            Source::Replay => "replay",
        }
    }
}

impl ErrorCode {
    /// The code as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::InvalidUtf8 => "invalid_utf8",
            ErrorCode::FrameTooLarge => "frame_too_large",
            ErrorCode::InvalidFrame => "invalid_frame",
            ErrorCode::UnknownType => "unknown_type",
            ErrorCode::UnknownPermission => "unknown_permission",
            ErrorCode::AlreadyResolved => "already_resolved",
            ErrorCode::DuplicateCall => "duplicate_call",
            ErrorCode::UnknownSession => "unknown_session",
            ErrorCode::UnknownCall => "unknown_call",
            ErrorCode::UnknownGrant => "unknown_grant",
            ErrorCode::InvalidMode => "invalid_mode",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::UnknownToken => "unknown_token",
            ErrorCode::NameTaken => "name_taken",
            ErrorCode::StoreUnavailable => "store_unavailable",
        }
    }
}
