//! The broker's part in a fleet ([the fleet](../../../../docs/fleet.md)):
//! what it writes to the shared store ([`Write`]) and what it learns from
//! it ([`News`]), in plain types. The broker does no I/O here either: a
//! step leaves its writes in [`Shared`], the owner hands them to the link
//! (`crate::fleet::link`, the task that owns the connections) and holds the
//! frames that report them until the link says they are committed; what
//! the link learns comes back as [`Input::Shared`](super::Input::Shared).
//!
//! Decisions stay local. What is shared:
//! - sessions started, ended, refused and given a mode, and revocations:
//!   written, and their frames held until committed (the owner's job); a
//!   session write says what it changes ([`SessionChange`]: a start writes
//!   the whole session and opens it again, a mode change only the mode and
//!   never on a closed session), and a session's rows from the store are
//!   applied in the order of their revisions, the row a write of this
//!   broker left included, so every broker ends on the store's value;
//! - questions: a question this broker asks goes to the store with what an
//!   `always` answer grants ([`Write::Ask`]); an answer given here (to a
//!   question of this broker or of another one) is the store's conditional
//!   update ([`Write::Answer`], grants in its transaction), and only the
//!   store's first answer decides; other brokers' open questions are put
//!   to this broker's approvers; other projects' open questions
//!   ([`Changes::others`]) only to the approvers and observers that follow
//!   every project (`hello` with `"projects": "all"`), and an answer to one
//!   is written for its project ([`Write::Answer`]'s `project`): nothing of
//!   another project is applied here;
//! - grants: taken from the store (made by an answer anywhere) and dropped
//!   when revoked there; used only while the store was heard from within
//!   the staleness bound ([`Broker::grants_usable`]).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::{json, Value};
use toolgate_policy::{GrantPattern, GrantSpec, Mode, Question};
use toolgate_protocol as wire;
use toolgate_protocol::{ErrorCode, ServerFrame};
use uuid::Uuid;

use super::outbox::Outbox;
use super::routing::ConnId;
use super::sessions::Closed;
use super::{Broker, Output};
use crate::store::{session_fingerprint, StoredClosed, StoredGrant, StoredJoined, StoredSession};

/// What a joined session met, as the store keeps it (`None`: nothing).
fn joined_value(joined: &[(String, toolgate_policy::ScopeRules)]) -> Option<Value> {
    if joined.is_empty() {
        return None;
    }
    serde_json::to_value(super::sessions::stored_joined(joined)).ok()
}

/// Why a session is closed in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseWhy {
    /// It ended.
    Ended,
    /// Its start was refused.
    Refused,
}

/// A session as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRow {
    /// Its id.
    pub session_id: String,
    /// The session that started it.
    pub parent_id: Option<String>,
    /// Its own mode, when it chose one (started or given a mode).
    pub mode: Option<String>,
    /// Its own narrowing, as `session_start`'s `permissions`.
    pub permissions: Option<Value>,
    /// Whether a `session_start` for it succeeded.
    pub started: bool,
    /// Joined under its parent without a scope of its own: the narrowings
    /// of the sub-tasks it met, as the state directory keeps them
    /// (`[{"sessionID", "permissions"}]`); `None` when it met none.
    pub joined: Option<Value>,
    /// Whether, and why, it is closed (in news; never in a write).
    pub closed: Option<CloseWhy>,
    /// The store's revision of the row (in news; 0 in a write): a broker
    /// applies a session's rows in the order of their revisions, never an
    /// older one after a newer.
    pub revision: i64,
}

/// What a session write changes, so that the store changes only that
/// (see [the fleet](../../../../docs/fleet.md#two-brokers-changing-one-session)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionChange {
    /// A start (`session_start`, a delegation's child): the whole session;
    /// it opens the session again if it was closed.
    Start {
        /// The start named a mode (without one, the store keeps the mode an
        /// open session has, as a lone broker would).
        mode_given: bool,
    },
    /// A `set_mode`: the mode only; a session closed in the store stays
    /// closed, and the broker learns it.
    Mode,
}

/// A grant as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct GrantRow {
    /// `grant_…`.
    pub id: String,
    /// The session that made it (a session grant: the one that holds it).
    pub session_id: String,
    /// Session or project.
    pub scope: wire::GrantScope,
    /// The permission it answers.
    pub permission: String,
    /// Its pattern.
    pub pattern: String,
    /// How many leading bytes of the pattern are literal.
    pub literal: u32,
    /// A plan-mode kind grant.
    pub plan_only: bool,
    /// When it ends (ms since the Unix epoch).
    pub expires_at: Option<u64>,
    /// Revoked (in news).
    pub revoked: bool,
    /// The question whose answer made it (in news).
    pub question: Option<Uuid>,
}

/// Where a question is in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuestionState {
    /// Waiting for its first answer.
    Open,
    /// Answered.
    Answered,
    /// Cancelled (`cancelled` says why).
    Cancelled,
}

/// A question as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct QuestionRow {
    /// Its id in the store.
    pub question: Uuid,
    /// The project root of its call.
    pub project: String,
    /// The host of the broker that asked it (another project's question:
    /// shown with it).
    pub host: Option<String>,
    /// Asked by this broker.
    pub own: bool,
    /// Open, answered or cancelled.
    pub state: QuestionState,
    /// The `permission_request` frame.
    pub request: Value,
    /// What an `always` answer grants ([`offers`]).
    pub offers: Option<Value>,
    /// The answer (a `permission_response` frame), once answered.
    pub answer: Option<Value>,
    /// Who answered.
    pub answered_by: Option<String>,
    /// Why it was cancelled.
    pub cancelled: Option<String>,
}

/// What the broker writes to the store, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// A session started or given a mode.
    Session {
        /// The session as this broker holds it.
        row: SessionRow,
        /// What the write changes.
        change: SessionChange,
    },
    /// A session ended or refused.
    Close {
        /// The session.
        session_id: String,
        /// Why.
        why: CloseWhy,
    },
    /// A grant revoked.
    Revoke {
        /// The grant.
        grant_id: String,
        /// Who revoked it.
        by: String,
    },
    /// A question put to every broker's approvers.
    Ask {
        /// Its id in the store.
        question: Uuid,
        /// The session of the call.
        session_id: String,
        /// The `permission_request` frame.
        request: Value,
        /// What an `always` answer grants.
        offers: Value,
    },
    /// An answer: the store's first answer wins, and its grants are
    /// written in the same transaction.
    Answer {
        /// The question.
        question: Uuid,
        /// The `permission_response` frame.
        answer: Value,
        /// Who answered (`CLIENT on HOST (pid N)`, after `token NAME
        /// (ROLE) via` for a remote connection).
        by: String,
        /// What it grants.
        grants: Vec<GrantRow>,
        /// Another project's question: that project (its grants are
        /// written for it); `None`: this broker's project.
        project: Option<String>,
    },
    /// A question of this broker ended here (decided, timed out, withdrawn).
    Cancel {
        /// The question.
        question: Uuid,
        /// Why.
        why: String,
    },
}

impl Write {
    /// Whether frames report this write: they wait for its commit.
    pub fn reported(&self) -> bool {
        matches!(
            self,
            Write::Session { .. } | Write::Close { .. } | Write::Revoke { .. }
        )
    }
}

/// What the store said about an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It is the question's answer (now, or already: the same answer by the
    /// same approver, a retry).
    Won,
    /// Another answer or a cancel came first: the question as it stands.
    Lost(Box<QuestionRow>),
    /// The store holds no such question.
    Unknown,
    /// The store refused it (not a lost connection: that is retried).
    Failed(String),
}

/// What the store changed since the link last looked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Changes {
    /// Questions of this project (this broker's and the others').
    pub questions: Vec<QuestionRow>,
    /// Grants of this project made or revoked.
    pub grants: Vec<GrantRow>,
    /// Sessions of this project written or closed.
    pub sessions: Vec<SessionRow>,
    /// Other projects' questions, open or just closed: only shown to the
    /// connections that follow every project (and answered through the
    /// store), never applied to this broker's state.
    pub others: Vec<QuestionRow>,
}

/// What the link tells the broker.
#[derive(Debug, Clone, PartialEq)]
pub enum News {
    /// Connected (again), lease renewed, state read: writes go through.
    Online,
    /// The connection is lost: writes wait, questions stay local.
    Offline {
        /// Why.
        why: String,
    },
    /// The write `seq` is committed, or (`failed`) could not be for now:
    /// it is retried once the store is back.
    Settled {
        /// The write.
        seq: u64,
        /// Why it is not committed, when it is not.
        failed: Option<String>,
    },
    /// A session write (`Write::Session`, `Write::Close`) is done: the row
    /// the store holds once it committed (for a mode change refused because
    /// the session is closed, the closed row), or `None` when the store
    /// refused it. (A write kept for when the store is back is not done.)
    SessionWritten {
        /// The write.
        seq: u64,
        /// Its session.
        session_id: String,
        /// The store's row.
        row: Option<SessionRow>,
        /// The store did not make the change, and why, in a person's words
        /// (a mode change to a session closed in the store): the frames
        /// that report the write say so (`notSaved`).
        refused: Option<String>,
    },
    /// A question could not be put in the store.
    AskFailed {
        /// The question.
        question: Uuid,
    },
    /// What became of an answer.
    Answered {
        /// The question.
        question: Uuid,
        /// What the store said.
        outcome: Outcome,
    },
    /// What changed in the store (also sent, empty, on each renewal: the
    /// store was heard from).
    Changes(Changes),
}

/// The connection to the store, started on the owner's runtime.
pub trait Link: Send {
    /// Start its tasks on the current runtime.
    fn start(self: Box<Self>) -> Box<dyn LinkHandle>;
}

/// A running link.
pub trait LinkHandle: Send {
    /// Queue a write (committed in the order sent).
    fn send(&mut self, seq: u64, write: Write);
    /// The next news (`None`: the link is gone).
    fn poll_news(&mut self, cx: &mut Context<'_>) -> Poll<Option<News>>;
    /// The broker stopped: try the queued writes once more and retire the
    /// broker from the store (its open questions cancelled), within
    /// `patience`.
    fn finish(&mut self, patience: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// How a broker joins a fleet ([`Broker::share`]).
pub struct Setup {
    /// The link, taken by the owner when it runs.
    pub link: Box<dyn Link>,
    /// This broker as answers name it: `HOST (pid N)`.
    pub whoami: String,
    /// Past this long without hearing from the store, grants are not used.
    pub stale: Duration,
}

/// One of this broker's questions, as shared.
struct Ballot {
    question: Uuid,
    state: BallotState,
    /// An `Ask` was written (it may be in the store even if it failed).
    sent: bool,
    /// What an `always` answer grants ([`offers`]).
    offers: Value,
}

enum BallotState {
    /// Not in the store: asked while it could not be reached.
    Local,
    /// Being put in the store.
    Asking,
    /// In the store, open.
    Open,
    /// An answer given here is being written.
    Answering {
        conn: Option<ConnId>,
        response: wire::PermissionResponse,
        grants: Vec<GrantRow>,
        /// As the store will name who answered.
        by: String,
    },
}

/// Another broker's open question, put to this broker's approvers.
struct Remote {
    question: Uuid,
    session_id: String,
    call_id: String,
    kind_plan: bool,
    always_options: Vec<Vec<String>>,
    offers: Option<Value>,
    /// An answer given here, being written: who gave it, what, and as the
    /// store will name who answered.
    answering: Option<(Option<ConnId>, wire::PermissionResponse, String)>,
    /// Another project's question: that project (an `always` answer's
    /// grants are written for it, never held here).
    project: Option<String>,
}

/// The broker's part in a fleet (inactive without `--store`).
#[derive(Default)]
pub(super) struct Shared {
    active: bool,
    link: Option<Box<dyn Link>>,
    online: bool,
    /// When the store was last heard from (monotonic ms).
    heard_at: u64,
    stale_ms: u64,
    whoami: String,
    next_seq: u64,
    writes: Vec<(u64, Write)>,
    ballots: HashMap<String, Ballot>,
    by_uuid: HashMap<Uuid, String>,
    remote: HashMap<String, Remote>,
    remote_by_uuid: HashMap<Uuid, String>,
    /// Other brokers' questions that closed (the latest
    /// [`CLOSED_MEMORY`]), to tell a late answer `already_resolved`.
    closed: std::collections::HashSet<String>,
    closed_order: std::collections::VecDeque<String>,
    /// Sessions with a write in flight, and its seq: rows read meanwhile
    /// wait in `deferred` (the write's own row, newer, usually replaces
    /// them), so what this broker holds now is not undone by an older row.
    writing: HashMap<String, u64>,
    /// The newest row read of a session while a write of it was in flight.
    deferred: HashMap<String, SessionRow>,
    /// The revision of the newest row of each session applied here (read,
    /// or returned by this broker's own write): a row no newer is ignored,
    /// so every broker ends on the store's last revision of a session.
    known: HashMap<String, i64>,
    /// An answer from the store is being applied: it is not written again,
    /// and its grants are in memory already.
    pub(super) applying: bool,
    /// Who gave the answer being applied, when it was given on another
    /// broker (as the store names them): the audit log's `answeredBy`.
    pub(super) applying_by: Option<String>,
}

impl Shared {
    /// Whether the broker shares a store (`serve --store`).
    pub(super) fn active(&self) -> bool {
        self.active
    }
}

/// How many closed questions of other brokers are remembered.
const CLOSED_MEMORY: usize = 1 << 16;

impl Shared {
    /// Another broker's question closed: remember it for a late answer.
    fn closed(&mut self, id: &str) {
        if self.closed.insert(id.to_string()) {
            self.closed_order.push_back(id.to_string());
            if self.closed_order.len() > CLOSED_MEMORY {
                if let Some(old) = self.closed_order.pop_front() {
                    self.closed.remove(&old);
                }
            }
        }
    }

    /// Take another broker's open question that closed.
    fn take_remote(&mut self, id: &str) -> Option<Remote> {
        let remote = self.remote.remove(id)?;
        self.remote_by_uuid.remove(&remote.question);
        self.closed(id);
        Some(remote)
    }
}

/// What an `always` answer to `question` grants, for the store
/// (`migrations/v2.sql`): the grants of its `always`, those of each
/// option, or why it grants nothing.
pub fn offers(question: &Question) -> Value {
    let grants = |specs: &[GrantSpec]| -> Value {
        specs
            .iter()
            .map(|spec| {
                json!({
                    "permission": spec.permission,
                    "pattern": spec.pattern.as_str(),
                    "literal": spec.pattern.literal_len(),
                    "planOnly": spec.plan_only,
                })
            })
            .collect()
    };
    let none = if question.plan.is_some() {
        Some("plan")
    } else if question.managed.is_some() {
        Some("managed")
    } else {
        None
    };
    let options: Vec<Value> = question
        .options()
        .iter()
        .map(|option| json!({"patterns": option.patterns, "grants": grants(&option.grants)}))
        .collect();
    json!({"grants": grants(&question.grants), "options": options, "none": none})
}

/// The grants an answer makes, from the question's `offers`: none but for
/// `always`; the option its `patterns` name, else the question's `always`.
/// `Err` names `patterns` that are not one of the options.
pub(crate) fn answer_grants(
    offers: Option<&Value>,
    response: &wire::PermissionResponse,
    session_id: &str,
    now_ms: u64,
    mut grant_id: impl FnMut() -> String,
) -> Result<Vec<GrantRow>, String> {
    let Some(offers) = offers else {
        return Ok(Vec::new());
    };
    if response.response != wire::Reply::Always || offers["none"].is_string() {
        return Ok(Vec::new());
    }
    let list = match &response.patterns {
        None => &offers["grants"],
        Some(patterns) => {
            let same = |listed: &Value| {
                let listed: Vec<&str> = listed
                    .as_array()
                    .map(|items| items.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                listed.iter().all(|p| patterns.iter().any(|q| q == p))
                    && patterns.iter().all(|p| listed.contains(&p.as_str()))
            };
            let options = offers["options"].as_array().map(Vec::as_slice);
            match options
                .unwrap_or_default()
                .iter()
                .find(|option| same(&option["patterns"]))
            {
                Some(option) => &option["grants"],
                None => {
                    return Err(format!(
                        "`patterns` is not one of the lists the request `{}` offered in `alwaysOptions`; nothing was granted and the request is still open",
                        response.permission_id
                    ))
                }
            }
        }
    };
    let expires_at = response
        .expires_in
        .map(|seconds| now_ms.saturating_add(seconds.saturating_mul(1000)));
    let scope = response.scope.unwrap_or(wire::GrantScope::Session);
    Ok(list
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|grant| {
            Some(GrantRow {
                id: grant_id(),
                session_id: session_id.to_string(),
                scope,
                permission: grant["permission"].as_str()?.to_string(),
                pattern: grant["pattern"].as_str()?.to_string(),
                literal: u32::try_from(grant["literal"].as_u64()?).ok()?,
                plan_only: grant["planOnly"].as_bool().unwrap_or(false),
                expires_at,
                revoked: false,
                question: None,
            })
        })
        .collect())
}

/// A grant row as the policy holds it, when its parts fit together.
fn grant_spec(row: &GrantRow) -> Option<GrantSpec> {
    Some(GrantSpec {
        permission: row.permission.clone(),
        pattern: GrantPattern::from_parts(&row.pattern, row.literal as usize)?,
        plan_only: row.plan_only,
        expires_at: row.expires_at,
    })
}

/// An answer as the store keeps it: the `permission_response` frame.
pub(crate) fn answer_value(response: &wire::PermissionResponse) -> Value {
    let mut value = serde_json::to_value(response).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.insert(
            "type".to_string(),
            Value::String("permission_response".to_string()),
        );
    }
    value
}

/// The answer a store row holds.
pub(crate) fn read_answer(value: Option<&Value>) -> Option<wire::PermissionResponse> {
    match toolgate_protocol::decode_value(value?) {
        Ok(wire::ClientFrame::PermissionResponse(response)) => Some(response),
        _ => None,
    }
}

/// Why a question was cancelled, as a person reads it.
fn cancelled_text(why: Option<&str>) -> String {
    match why {
        Some("lease") => "the broker that asked it stopped renewing its lease on the shared store (it stopped or lost the store), so the question was cancelled".to_string(),
        Some(why) => format!("the question was cancelled: {why}"),
        None => "the question was cancelled".to_string(),
    }
}

impl Broker {
    /// Share a store: from now on this broker writes what it changes and
    /// asks through `setup.link` (see the module), starting from `loaded`
    /// (the store's state at start). Warnings about parts of it that could
    /// not be used (dropped, or kept more strictly).
    pub fn share(&mut self, setup: Setup, loaded: Changes) -> Vec<String> {
        let shared = &mut self.shared;
        shared.active = true;
        shared.link = Some(setup.link);
        shared.whoami = setup.whoami;
        shared.stale_ms = u64::try_from(setup.stale.as_millis()).unwrap_or(u64::MAX);
        shared.online = true;
        shared.heard_at = self.clock.monotonic_ms();
        self.conns.fleet = true;
        let mut warnings = Vec::new();
        // Sessions and grants as a state directory's snapshot would hold
        // them, restored the same way (parents first; what cannot be used
        // kept more strictly).
        let mut project_grants = Vec::new();
        let mut session_grants: HashMap<String, Vec<StoredGrant>> = HashMap::new();
        for row in &loaded.grants {
            let stored = StoredGrant {
                grant_id: row.id.clone(),
                permission: row.permission.clone(),
                pattern: row.pattern.clone(),
                literal: row.literal as usize,
                session_id: row.session_id.clone(),
                mode: row.plan_only.then(|| "plan".to_string()),
                expires_at: row.expires_at,
            };
            match row.scope {
                wire::GrantScope::Project => project_grants.push(stored),
                wire::GrantScope::Session => session_grants
                    .entry(row.session_id.clone())
                    .or_default()
                    .push(stored),
            }
        }
        let mut sessions = Vec::new();
        let mut closed = Vec::new();
        for row in &loaded.sessions {
            self.shared
                .known
                .insert(row.session_id.clone(), row.revision);
            match row.closed {
                Some(why) => closed.push(StoredClosed {
                    fingerprint: format!("{:016x}", session_fingerprint(&row.session_id)),
                    why: match why {
                        CloseWhy::Ended => "ended",
                        CloseWhy::Refused => "refused",
                    }
                    .to_string(),
                }),
                None => sessions.push(self.stored_row(row, &mut warnings)),
            }
        }
        for session in &mut sessions {
            if let Some(grants) = session_grants.remove(&session.session_id) {
                session.grants = grants;
            }
        }
        // Session grants of sessions the store holds no row for (they
        // never chose a mode): implicit sessions.
        for (session_id, grants) in session_grants {
            sessions.push(StoredSession {
                session_id,
                parent_id: None,
                mode: self.policy.default_mode.as_str().to_string(),
                permissions: None,
                grants,
                started: false,
                implicit: true,
                joined: Vec::new(),
            });
        }
        self.grants.restore(&project_grants, &mut warnings);
        self.sessions
            .restore(&self.policy, &sessions, &closed, &mut warnings);
        self.next_expiry = self.earliest_expiry();
        let mut out = Vec::new();
        for row in loaded.questions {
            self.question_row(row, &mut out);
        }
        for row in loaded.others {
            self.other_row(row, &mut out);
        }
        warnings
    }

    /// The link to the store, for the owner to start (once).
    pub fn take_link(&mut self) -> Option<Box<dyn Link>> {
        self.shared.link.take()
    }

    /// The writes the last steps made, in order, each with its number.
    pub fn take_shared_writes(&mut self) -> Vec<(u64, Write)> {
        std::mem::take(&mut self.shared.writes)
    }

    /// A session row from a store row, for a restore.
    fn stored_row(&self, row: &SessionRow, warnings: &mut Vec<String>) -> StoredSession {
        let permissions = match &row.permissions {
            None => None,
            Some(value) => match serde_json::from_value::<wire::ScopeSpec>(value.clone()) {
                Ok(spec) => Some(spec),
                Err(err) => {
                    warnings.push(format!(
                        "the shared store holds an unusable scope for session `{}` ({err}); it may use only the always-available tools",
                        row.session_id
                    ));
                    Some(wire::ScopeSpec {
                        allowed_tools: Some(Vec::new()),
                        ..Default::default()
                    })
                }
            },
        };
        // What a joined session met that cannot be read denies every tool:
        // never looser than the broker that wrote it.
        let joined = match &row.joined {
            None => Vec::new(),
            Some(value) => match serde_json::from_value::<Vec<StoredJoined>>(value.clone()) {
                Ok(joined) => joined,
                Err(err) => {
                    warnings.push(format!(
                        "the shared store holds an unusable joined scope for session `{}` ({err}); it may use only the always-available tools",
                        row.session_id
                    ));
                    vec![StoredJoined {
                        session_id: row.session_id.clone(),
                        permissions: wire::ScopeSpec {
                            allowed_tools: Some(Vec::new()),
                            ..Default::default()
                        },
                    }]
                }
            },
        };
        StoredSession {
            session_id: row.session_id.clone(),
            parent_id: row.parent_id.clone(),
            mode: row
                .mode
                .clone()
                .unwrap_or_else(|| self.policy.default_mode.as_str().to_string()),
            permissions,
            grants: Vec::new(),
            started: row.started,
            implicit: row.mode.is_none(),
            joined,
        }
    }

    /// Queue a write for the store (nothing without one).
    fn shared_write(&mut self, write: Write) {
        if !self.shared.active {
            return;
        }
        self.shared.next_seq += 1;
        let seq = self.shared.next_seq;
        match &write {
            Write::Session {
                row: SessionRow { session_id, .. },
                ..
            }
            | Write::Close { session_id, .. } => {
                self.shared.writing.insert(session_id.clone(), seq);
            }
            _ => {}
        }
        self.shared.writes.push((seq, write));
    }

    /// Write a session as this broker holds it (started, or given a mode:
    /// `change` says which, and the store changes only that).
    pub(super) fn share_session(&mut self, session_id: &str, change: SessionChange) {
        if !self.shared.active {
            return;
        }
        let Some(session) = self.sessions.get(session_id) else {
            return;
        };
        let row = SessionRow {
            session_id: session_id.to_string(),
            parent_id: session.parent.clone(),
            mode: session.explicit.then(|| session.mode.as_str().to_string()),
            permissions: session
                .rules
                .as_ref()
                .map(crate::convert::scope_spec)
                .and_then(|spec| serde_json::to_value(spec).ok()),
            started: session.started,
            joined: joined_value(&session.joined),
            closed: None,
            revision: 0,
        };
        self.shared_write(Write::Session { row, change });
    }

    /// Write that a session ended or was refused.
    pub(super) fn share_close(&mut self, session_id: &str, why: Closed) {
        let why = match why {
            Closed::Ended => CloseWhy::Ended,
            Closed::Refused => CloseWhy::Refused,
        };
        self.shared_write(Write::Close {
            session_id: session_id.to_string(),
            why,
        });
    }

    /// Write a revocation, by the connection `conn`.
    pub(super) fn share_revocation(&mut self, grant_id: &str, conn: Option<ConnId>) {
        if !self.shared.active {
            return;
        }
        let by = self.answerer(conn);
        self.shared_write(Write::Revoke {
            grant_id: grant_id.to_string(),
            by,
        });
    }

    /// `CLIENT on HOST (pid N)`: who answered or revoked, for the store;
    /// a remote connection's token first (`token alice (approver) via
    /// CLIENT on HOST (pid N)`).
    fn answerer(&self, conn: Option<ConnId>) -> String {
        let client = self.signed(conn).unwrap_or_else(|| "toolgate".to_string());
        format!("{client} on {}", self.shared.whoami)
    }

    /// Whether grants may be used: always without a store; with one, while
    /// it was heard from within the staleness bound (a revocation made
    /// elsewhere reaches this broker within it, or its grants are not used).
    pub(super) fn grants_usable(&self) -> bool {
        !self.shared.active
            || self
                .clock
                .monotonic_ms()
                .saturating_sub(self.shared.heard_at)
                <= self.shared.stale_ms
    }

    /// Whether a question about the call `(session, call)` of `owner` can
    /// be put to nobody: the store cannot be reached and no approver of
    /// this broker but the caller is connected.
    pub(super) fn nobody_to_ask(&self, owner: Option<ConnId>) -> bool {
        self.shared.active && !self.shared.online && !self.conns.has_approver_besides(owner)
    }

    /// A question was just asked here: put it in the store, when it can be
    /// reached (else it stays with this broker's approvers, and goes to the
    /// store once it is back).
    pub(super) fn share_question(&mut self, permission_id: &str, question: &Question) {
        if !self.shared.active {
            return;
        }
        let uuid = Uuid::new_v4();
        let ballot = Ballot {
            question: uuid,
            state: BallotState::Local,
            sent: false,
            offers: offers(question),
        };
        self.shared
            .ballots
            .insert(permission_id.to_string(), ballot);
        self.shared.by_uuid.insert(uuid, permission_id.to_string());
        if self.shared.online {
            self.send_ask(permission_id);
        }
    }

    /// Write the question `permission_id` to the store.
    fn send_ask(&mut self, permission_id: &str) {
        let Some(request) = self.conns.request(permission_id) else {
            return;
        };
        let request =
            serde_json::to_value(ServerFrame::PermissionRequest(Box::new(request.clone())))
                .unwrap_or(Value::Null);
        let session_id = self.questions.session_of(permission_id).unwrap_or_default();
        let Some(ballot) = self.shared.ballots.get_mut(permission_id) else {
            return;
        };
        ballot.state = BallotState::Asking;
        ballot.sent = true;
        let write = Write::Ask {
            question: ballot.question,
            session_id,
            request,
            offers: ballot.offers.clone(),
        };
        self.shared_write(write);
    }

    /// A local answer to a question this broker put in the store: written
    /// there first (the store's first answer decides). True when it was
    /// (or is a repeat of the answer being written, or was refused with an
    /// error frame): the caller does nothing more now.
    pub(super) fn defer_answer(
        &mut self,
        response: &wire::PermissionResponse,
        ob: &mut Outbox<'_>,
    ) -> bool {
        if !self.shared.active || self.shared.applying {
            return false;
        }
        let id = &response.permission_id;
        let conn = ob.caller();
        let now = self.clock.wall_ms();
        let session_id = self.questions.session_of(id).unwrap_or_default();
        let by = self.answerer(conn);
        let ids = &mut self.ids;
        let Some(ballot) = self.shared.ballots.get_mut(id) else {
            return false;
        };
        match &ballot.state {
            BallotState::Local => return false,
            BallotState::Answering {
                conn: answering,
                response: sent,
                ..
            } => {
                if *answering != conn || sent != response {
                    ob.error_naming(
                        ErrorCode::AlreadyResolved,
                        format!(
                            "an answer to the request `{id}` is being recorded in the shared store"
                        ),
                        None,
                        None,
                        Some(id.clone()),
                    );
                }
                return true;
            }
            BallotState::Asking | BallotState::Open => {}
        }
        let grants = match answer_grants(Some(&ballot.offers), response, &session_id, now, || {
            ids.grant_id()
        }) {
            Ok(grants) => grants,
            Err(message) => {
                ob.error_naming(
                    ErrorCode::InvalidFrame,
                    message,
                    None,
                    None,
                    Some(id.clone()),
                );
                return true;
            }
        };
        let question = ballot.question;
        ballot.state = BallotState::Answering {
            conn,
            response: response.clone(),
            grants: grants.clone(),
            by: by.clone(),
        };
        self.shared_write(Write::Answer {
            question,
            answer: answer_value(response),
            by,
            grants,
            project: None,
        });
        true
    }

    /// An answer to another broker's question, from one of this broker's
    /// approvers: written to the store (its first answer wins). False when
    /// `response` is about no such question.
    pub(super) fn answer_remote(
        &mut self,
        response: &wire::PermissionResponse,
        ob: &mut Outbox<'_>,
    ) -> bool {
        let id = response.permission_id.clone();
        let conn = ob.caller();
        let Some(remote) = self.shared.remote.get(&id) else {
            if self.shared.closed.contains(&id) {
                ob.error_naming(
                    ErrorCode::AlreadyResolved,
                    format!("the request `{id}` was already answered or ended"),
                    None,
                    None,
                    Some(id.clone()),
                );
                return true;
            }
            return false;
        };
        let refuse = |ob: &mut Outbox<'_>, code, message: String| {
            ob.error_naming(code, message, None, None, Some(id.clone()));
        };
        if let Some((answering, sent, _)) = &remote.answering {
            if *answering != conn || sent != response {
                refuse(
                    ob,
                    ErrorCode::AlreadyResolved,
                    format!(
                        "an answer to the request `{id}` is being recorded in the shared store"
                    ),
                );
            }
            return true;
        }
        if !self.shared.online {
            refuse(ob, ErrorCode::StoreUnavailable, format!("the request `{id}` was asked on another broker and can be answered only through the shared store, which cannot be reached now; the request is still open"));
            return true;
        }
        if remote.kind_plan && (response.patterns.is_some() || response.expires_in.is_some()) {
            refuse(ob, ErrorCode::InvalidFrame, format!("the request `{id}` is a plan approval, which offers no `alwaysOptions` and grants nothing that could expire; answer it without `patterns` or `expiresIn`"));
            return true;
        }
        if let Some(patterns) = &response.patterns {
            let offered = remote.always_options.iter().any(|listed| {
                listed.iter().all(|p| patterns.contains(p))
                    && patterns.iter().all(|p| listed.contains(p))
            });
            if !offered {
                refuse(ob, ErrorCode::InvalidFrame, format!("`patterns` is not one of the lists the request `{id}` offered in `alwaysOptions`; nothing was granted and the request is still open"));
                return true;
            }
        }
        let now = self.clock.wall_ms();
        let session_id = remote.session_id.clone();
        let offers = remote.offers.clone();
        let question = remote.question;
        let project = remote.project.clone();
        let ids = &mut self.ids;
        let grants = match answer_grants(offers.as_ref(), response, &session_id, now, || {
            ids.grant_id()
        }) {
            Ok(grants) => grants,
            Err(message) => {
                refuse(ob, ErrorCode::InvalidFrame, message);
                return true;
            }
        };
        let by = self.answerer(conn);
        if let Some(remote) = self.shared.remote.get_mut(&id) {
            remote.answering = Some((conn, response.clone(), by.clone()));
        }
        self.shared_write(Write::Answer {
            question,
            answer: answer_value(response),
            by,
            grants,
            project,
        });
        true
    }

    /// One of this broker's questions ended here (`why`): it is cancelled
    /// in the store, unless an answer from the store is what ended it.
    pub(super) fn question_ended(&mut self, permission_id: &str, why: &str) {
        let Some(ballot) = self.shared.ballots.remove(permission_id) else {
            return;
        };
        self.shared.by_uuid.remove(&ballot.question);
        if ballot.sent && !self.shared.applying {
            self.shared_write(Write::Cancel {
                question: ballot.question,
                why: why.to_string(),
            });
        }
    }

    /// What the link says.
    pub(super) fn shared_news(&mut self, news: News, out: &mut Vec<Output>) {
        match news {
            News::Online => {
                self.shared.online = true;
                self.shared.heard_at = self.clock.monotonic_ms();
                // Questions asked while the store could not be reached go
                // to it now, oldest first.
                let mut local: Vec<(u64, String)> = self
                    .shared
                    .ballots
                    .iter()
                    .filter(|(_, ballot)| matches!(ballot.state, BallotState::Local))
                    .map(|(id, _)| (self.questions.seq(id), id.clone()))
                    .collect();
                local.sort();
                for (_, id) in local {
                    self.send_ask(&id);
                }
            }
            News::Offline { why } => {
                if self.shared.online {
                    tracing::warn!(
                        "the shared store cannot be reached ({why}): decisions go on; questions go to this broker's approvers only; writes wait for the store"
                    );
                }
                self.shared.online = false;
            }
            // A session write is done when it commits, not when it fails
            // for now (it is written again): `SessionWritten`.
            News::Settled { .. } => {}
            News::SessionWritten {
                seq,
                session_id,
                row,
                ..
            } => self.session_written(seq, &session_id, row, out),
            News::AskFailed { question } => self.ask_failed(question, out),
            News::Answered { question, outcome } => self.answered(question, outcome, out),
            News::Changes(changes) => {
                tracing::debug!(
                    questions = changes.questions.len(),
                    grants = changes.grants.len(),
                    sessions = changes.sessions.len(),
                    others = changes.others.len(),
                    "heard from the store"
                );
                self.shared.heard_at = self.clock.monotonic_ms();
                self.shared.online = true;
                self.apply_changes(changes, out);
            }
        }
    }

    fn ask_failed(&mut self, question: Uuid, out: &mut Vec<Output>) {
        let Some(id) = self.shared.by_uuid.get(&question).cloned() else {
            return;
        };
        let Some(ballot) = self.shared.ballots.get_mut(&id) else {
            return;
        };
        if !matches!(ballot.state, BallotState::Asking) {
            return;
        }
        ballot.state = BallotState::Local;
        if self.conns.addressees(&id) == 0 {
            let ob = &mut Outbox::new(out, None, None);
            self.end_ask(
                &id,
                wire::Source::Cancel,
                "the shared store could not be reached when the question was asked, and no approver is connected to this broker: nobody can be asked".to_string(),
                ob,
            );
        }
    }

    /// The connection `conn`, if it is still open.
    fn open_conn(&self, conn: Option<ConnId>) -> Option<ConnId> {
        conn.filter(|conn| self.conns.is_open(*conn))
    }

    fn answered(&mut self, question: Uuid, outcome: Outcome, out: &mut Vec<Output>) {
        if let Some(id) = self.shared.by_uuid.get(&question).cloned() {
            self.own_answered(&id, outcome, out);
        } else if let Some(id) = self.shared.remote_by_uuid.get(&question).cloned() {
            self.remote_answered(&id, outcome, out);
        }
    }

    /// What became of an answer given here to one of this broker's questions.
    fn own_answered(&mut self, id: &str, outcome: Outcome, out: &mut Vec<Output>) {
        let Some(ballot) = self.shared.ballots.get_mut(id) else {
            return;
        };
        let BallotState::Answering {
            conn,
            response,
            grants,
            ..
        } = std::mem::replace(&mut ballot.state, BallotState::Open)
        else {
            return;
        };
        let conn = self.open_conn(conn);
        match outcome {
            Outcome::Won => {
                self.apply_grant_rows(grants, None, out);
                self.apply_store_answer(id, response, None, conn, out);
            }
            Outcome::Lost(row) => {
                let ob = &mut Outbox::new(out, conn, None);
                ob.error_naming(
                    ErrorCode::AlreadyResolved,
                    lost_text(id, &row),
                    None,
                    None,
                    Some(id.to_string()),
                );
                // The store's answer (with its grants) or its cancel comes
                // with the next changes the link reads.
            }
            Outcome::Unknown => {
                // Never in the store: answered here, as a question asked
                // while the store could not be reached.
                if let Some(ballot) = self.shared.ballots.get_mut(id) {
                    ballot.state = BallotState::Local;
                }
                let ob = &mut Outbox::new(out, conn, None);
                self.response(response, ob);
            }
            Outcome::Failed(why) => {
                let ob = &mut Outbox::new(out, conn, None);
                ob.error_naming(
                    ErrorCode::InvalidFrame,
                    format!("the answer could not be recorded in the shared store ({why}); the request `{id}` is still open"),
                    None,
                    None,
                    Some(id.to_string()),
                );
            }
        }
    }

    /// What became of an answer given here to another broker's question.
    fn remote_answered(&mut self, id: &str, outcome: Outcome, out: &mut Vec<Output>) {
        let Some(remote) = self.shared.remote.get_mut(id) else {
            return;
        };
        let Some((conn, ..)) = remote.answering.take() else {
            return;
        };
        let conn = self.open_conn(conn);
        match outcome {
            Outcome::Won => {
                let reason = match self.client_of(conn) {
                    Some(name) => format!("answered by the approver `{name}`"),
                    None => "answered by another approver".to_string(),
                };
                self.end_remote(id, reason, conn, out);
            }
            Outcome::Lost(row) => {
                let reason = closed_reason(&row);
                {
                    let ob = &mut Outbox::new(out, conn, None);
                    ob.error_naming(
                        ErrorCode::AlreadyResolved,
                        lost_text(id, &row),
                        None,
                        None,
                        Some(id.to_string()),
                    );
                }
                self.end_remote(id, reason, conn, out);
            }
            Outcome::Unknown => {
                {
                    let ob = &mut Outbox::new(out, conn, None);
                    ob.error_naming(
                        ErrorCode::UnknownPermission,
                        format!("the request `{id}` is no longer in the shared store"),
                        None,
                        None,
                        Some(id.to_string()),
                    );
                }
                self.end_remote(
                    id,
                    "the question is no longer in the shared store".to_string(),
                    conn,
                    out,
                );
            }
            Outcome::Failed(why) => {
                let ob = &mut Outbox::new(out, conn, None);
                ob.error_naming(
                    ErrorCode::InvalidFrame,
                    format!("the answer could not be recorded in the shared store ({why}); the request `{id}` is still open"),
                    None,
                    None,
                    Some(id.to_string()),
                );
            }
        }
    }

    /// Another broker's question closed: this broker's approvers it was
    /// put to (but `except`) hear why.
    fn end_remote(
        &mut self,
        id: &str,
        reason: String,
        except: Option<ConnId>,
        out: &mut Vec<Output>,
    ) {
        let Some(remote) = self.shared.take_remote(id) else {
            return;
        };
        let resolved = wire::PermissionResolved {
            permission_id: id.to_string(),
            session_id: remote.session_id,
            call_id: remote.call_id,
            reason,
        };
        self.conns
            .end_remote(resolved, except, &mut Outbox::new(out, None, None));
    }

    /// Apply an answer the store holds to this broker's question `id`:
    /// `by` names who answered on another broker (this broker's approvers
    /// hear it); `conn` is this broker's approver whose answer it is.
    fn apply_store_answer(
        &mut self,
        id: &str,
        response: wire::PermissionResponse,
        by: Option<String>,
        conn: Option<ConnId>,
        out: &mut Vec<Output>,
    ) {
        if let Some(ballot) = self.shared.ballots.remove(id) {
            self.shared.by_uuid.remove(&ballot.question);
        }
        let Some(pending) = self.questions.get(id) else {
            return;
        };
        // Observers hear the answer as they do a local one, with who gave it.
        let answered = (!self.observers.is_empty()).then(|| wire::PermissionAnswered {
            permission_id: id.to_string(),
            session_id: pending.session_id.clone(),
            call_id: pending.call_id.clone(),
            response: response.response,
            message: response.message.clone(),
            patterns: response.patterns.clone(),
            expires_in: response.expires_in,
            by: by.clone().or_else(|| self.signed(conn)),
        });
        let ob = &mut Outbox::new(out, conn, None);
        if let Some(by) = &by {
            let resolved = wire::PermissionResolved {
                permission_id: id.to_string(),
                session_id: pending.session_id.clone(),
                call_id: pending.call_id.clone(),
                reason: format!("answered by {by}"),
            };
            self.conns.resolved(resolved, ob);
        }
        let response = wire::PermissionResponse {
            permission_id: id.to_string(),
            ..response
        };
        let session = self.questions.session_of(id);
        let at = ob.len();
        self.shared.applying = true;
        self.shared.applying_by = by;
        self.response(response, ob);
        self.shared.applying = false;
        self.shared.applying_by = None;
        if let Some(answered) = answered {
            // Taken: the question is closed.
            if self.conns.request(id).is_none() {
                self.observers.answered(at, answered);
            }
        }
        if let Some(session) = session {
            self.sessions.forget_idle(&session);
        }
    }

    /// What the store changed: grants first (an answer's grants are in
    /// force before the answer is applied), then sessions, then questions.
    fn apply_changes(&mut self, changes: Changes, out: &mut Vec<Output>) {
        if !changes.grants.is_empty() {
            self.apply_grant_rows(
                changes.grants,
                Some("a grant made on another broker covers it"),
                out,
            );
        }
        for row in changes.sessions {
            self.session_row(row, out);
        }
        for row in changes.questions {
            self.question_row(row, out);
        }
        for row in changes.others {
            self.other_row(row, out);
        }
    }

    /// Grants made or revoked in the store; with `why`, the open questions
    /// a new grant may decide are judged again.
    fn apply_grant_rows(&mut self, rows: Vec<GrantRow>, why: Option<&str>, out: &mut Vec<Output>) {
        let now = self.clock.wall_ms();
        let mut project: Vec<GrantSpec> = Vec::new();
        let mut by_session: Vec<(String, Vec<GrantSpec>)> = Vec::new();
        for row in rows {
            if row.revoked {
                self.drop_grant(&row.id);
                continue;
            }
            let Some(spec) = grant_spec(&row) else {
                tracing::warn!(grant = %row.id, "the shared store holds an unusable grant; it is not used");
                continue;
            };
            if spec.expires_at.is_some_and(|end| end <= now) {
                continue;
            }
            let added = match row.scope {
                wire::GrantScope::Project => {
                    self.grants
                        .add_shared(row.id.clone(), &spec, &row.session_id)
                }
                wire::GrantScope::Session => {
                    let session = self
                        .sessions
                        .entry(&row.session_id, self.policy.default_mode);
                    session.grants.add(row.id.clone(), &spec).0
                        != toolgate_policy::GrantAdded::Unchanged
                }
            };
            if !added {
                continue;
            }
            if let Some(end) = spec.expires_at {
                self.next_expiry = Some(self.next_expiry.map_or(end, |next| next.min(end)));
            }
            // The answer to one of this broker's questions made it: applying
            // that answer decides its call, and judges again what the
            // grants may decide.
            if row
                .question
                .is_some_and(|question| self.shared.by_uuid.contains_key(&question))
            {
                continue;
            }
            match row.scope {
                wire::GrantScope::Project => project.push(spec),
                wire::GrantScope::Session => {
                    match by_session.iter_mut().find(|(id, _)| *id == row.session_id) {
                        Some((_, specs)) => specs.push(spec),
                        None => by_session.push((row.session_id.clone(), vec![spec])),
                    }
                }
            }
        }
        let Some(why) = why else {
            return;
        };
        let ob = &mut Outbox::new(out, None, None);
        if !project.is_empty() {
            for session in self.questions.sessions() {
                self.revisit_session(&session, why, Some(&project), ob);
            }
        }
        for (session, specs) in by_session {
            self.revisit_session(&session, why, Some(&specs), ob);
        }
    }

    /// A grant revoked in the store is gone here too.
    fn drop_grant(&mut self, grant_id: &str) {
        if self.grants.remove(grant_id) {
            return;
        }
        for (_, session) in self.sessions.iter_mut() {
            if session.grants.remove(grant_id).is_some() {
                return;
            }
        }
    }

    /// A write of this broker to a session is done: the store's row then
    /// (or the newest read meanwhile, if newer) is applied, unless another
    /// write of it is still in flight.
    fn session_written(
        &mut self,
        seq: u64,
        session_id: &str,
        row: Option<SessionRow>,
        out: &mut Vec<Output>,
    ) {
        if self
            .shared
            .writing
            .get(session_id)
            .is_some_and(|last| *last != seq)
        {
            // A later write of it is in flight: its row will be newer.
            if let Some(row) = row {
                self.defer_row(row);
            }
            return;
        }
        self.shared.writing.remove(session_id);
        let deferred = self.shared.deferred.remove(session_id);
        let newest = match (row, deferred) {
            (Some(row), Some(read)) if read.revision > row.revision => Some(read),
            (Some(row), _) => Some(row),
            (None, read) => read,
        };
        if let Some(row) = newest {
            self.session_row(row, out);
        }
    }

    /// Keep the newest row of a session read while a write of it is in
    /// flight.
    fn defer_row(&mut self, row: SessionRow) {
        match self.shared.deferred.get(&row.session_id) {
            Some(kept) if kept.revision >= row.revision => {}
            _ => {
                self.shared.deferred.insert(row.session_id.clone(), row);
            }
        }
    }

    /// A session written or closed in the store.
    fn session_row(&mut self, row: SessionRow, out: &mut Vec<Output>) {
        // This broker is writing it: what it holds is newer than anything
        // read before its write commits.
        if self.shared.writing.contains_key(&row.session_id) {
            self.defer_row(row);
            return;
        }
        // No newer than what was applied (a row read again, this broker's
        // own write read back, an older revision read late).
        match self.shared.known.get(&row.session_id) {
            Some(known) if *known >= row.revision => return,
            _ => {
                self.shared
                    .known
                    .insert(row.session_id.clone(), row.revision);
            }
        }
        let id = row.session_id.clone();
        if let Some(why) = row.closed {
            let why = match why {
                CloseWhy::Ended => Closed::Ended,
                CloseWhy::Refused => Closed::Refused,
            };
            if !self.sessions.contains_key(&id) {
                self.sessions.close(&id, why);
                return;
            }
            let ob = &mut Outbox::new(out, None, None);
            for ended in self.sessions.subtree(&id).into_iter().rev() {
                let pending = self.pending_of(&ended);
                self.sessions.remove(&ended);
                for permission in pending {
                    self.end_ask(
                        &permission,
                        wire::Source::Shutdown,
                        "the session ended on another broker sharing the store".to_string(),
                        ob,
                    );
                }
                self.sessions.close(&ended, why);
            }
            return;
        }
        let mut warnings = Vec::new();
        let stored = self.stored_row(&row, &mut warnings);
        for warning in warnings {
            tracing::warn!("{warning}");
        }
        self.sessions.reopen(&id);
        if !self.sessions.contains_key(&id) {
            if let Some(parent) = &row.parent_id {
                self.sessions.entry(parent, self.policy.default_mode);
            }
            let mut warnings = Vec::new();
            self.sessions
                .restore_session(&self.policy, &stored, &mut warnings);
            for warning in warnings {
                tracing::warn!("{warning}");
            }
            return;
        }
        let subtree = self.sessions.subtree(&id);
        let before: Vec<Mode> = subtree.iter().map(|s| self.effective_mode(s)).collect();
        let mode = stored.mode.parse::<Mode>().unwrap_or(Mode::ReadOnly);
        let rules = stored.permissions.clone().map(crate::convert::scope_rules);
        let old_parent = self.sessions.get(&id).and_then(|s| s.parent.clone());
        // The narrowing as the store spells it: unchanged, the scope is left
        // as it is (a session joined under a parent holds more than its
        // own narrowing, see `session_start`).
        let old_permissions = self.sessions.get(&id).and_then(|session| {
            session
                .rules
                .as_ref()
                .map(crate::convert::scope_spec)
                .and_then(|spec| serde_json::to_value(spec).ok())
        });
        let joined: Vec<(String, toolgate_policy::ScopeRules)> = stored
            .joined
            .iter()
            .map(|met| {
                (
                    met.session_id.clone(),
                    crate::convert::scope_rules(met.permissions.clone()),
                )
            })
            .collect();
        let old_joined = self
            .sessions
            .get(&id)
            .and_then(|session| joined_value(&session.joined));
        let rescope = old_parent != row.parent_id
            || old_permissions != row.permissions
            || old_joined != joined_value(&joined);
        if let Some(session) = self.sessions.get_mut(&id) {
            if row.mode.is_some() {
                session.mode = mode;
                session.explicit = true;
            }
            session.started = row.started;
            session.parent = row.parent_id.clone();
            if rescope {
                session.rules = rules;
                session.joined = joined;
            }
        }
        if old_parent != row.parent_id {
            if let Some(old) = old_parent.and_then(|old| self.sessions.get_mut(&old)) {
                old.children.remove(&id);
            }
            if let Some(parent) = &row.parent_id {
                self.sessions
                    .entry(parent, self.policy.default_mode)
                    .children
                    .insert(id.clone());
            }
        }
        if rescope {
            self.rescope(&id);
        }
        let ob = &mut Outbox::new(out, None, None);
        for (session, previous) in subtree.iter().zip(before) {
            if self.effective_mode(session) != previous {
                self.revisit_session(
                    session,
                    "the session's mode changed on another broker",
                    None,
                    ob,
                );
            }
        }
    }

    /// A question in the store: this broker's (answered or cancelled
    /// elsewhere), or another broker's (put to this broker's approvers
    /// while it is open).
    fn question_row(&mut self, row: QuestionRow, out: &mut Vec<Output>) {
        if row.own {
            self.own_question_row(row, out);
            return;
        }
        self.remote_row(row, false, out);
    }

    /// Another project's question in the store: put, while it is open, only
    /// to the connections that follow every project, naming its project
    /// and host in `metadata`. Nothing of it touches this broker's state:
    /// an answer given here is written to the store for that project.
    fn other_row(&mut self, row: QuestionRow, out: &mut Vec<Output>) {
        if row.own {
            return;
        }
        self.remote_row(row, true, out);
    }

    /// Another broker's question (`foreign`: of another project).
    fn remote_row(&mut self, row: QuestionRow, foreign: bool, out: &mut Vec<Output>) {
        let request = match serde_json::from_value::<ServerFrame>(row.request.clone()) {
            Ok(ServerFrame::PermissionRequest(mut request)) => {
                if foreign {
                    request
                        .metadata
                        .insert("project".to_string(), Value::String(row.project.clone()));
                    if let Some(host) = &row.host {
                        request
                            .metadata
                            .insert("host".to_string(), Value::String(host.clone()));
                    }
                }
                request
            }
            _ => {
                tracing::warn!(question = %row.question, "the shared store holds a question toolgate cannot read; it is not shown");
                return;
            }
        };
        let id = request.permission_id.clone();
        match row.state {
            QuestionState::Open => {
                if self.shared.remote.contains_key(&id) || self.questions.get(&id).is_some() {
                    return;
                }
                self.shared.remote_by_uuid.insert(row.question, id.clone());
                self.shared.remote.insert(
                    id,
                    Remote {
                        question: row.question,
                        session_id: request.session_id.clone(),
                        call_id: request.call_id.clone(),
                        kind_plan: request.kind.as_deref() == Some("plan"),
                        always_options: request.always_options.clone(),
                        offers: row.offers.clone(),
                        answering: None,
                        project: foreign.then(|| row.project.clone()),
                    },
                );
                self.conns
                    .ask_remote(request, foreign, &mut Outbox::new(out, None, None));
            }
            QuestionState::Answered | QuestionState::Cancelled => {
                let Some(remote) = self.shared.remote.get(&id) else {
                    return;
                };
                let mut except = None;
                if let Some((conn, sent, by)) = &remote.answering {
                    let conn = self.open_conn(*conn);
                    // Its approver hears either nothing (its answer won) or
                    // that its answer came second.
                    except = conn;
                    let won = row.answered_by.as_ref() == Some(by)
                        && row.answer.as_ref() == Some(&answer_value(sent));
                    if let (false, Some(conn)) = (won, conn) {
                        lost(out, conn, &id, &row);
                    }
                }
                let Some(remote) = self.shared.take_remote(&id) else {
                    return;
                };
                let resolved = wire::PermissionResolved {
                    permission_id: id,
                    session_id: remote.session_id,
                    call_id: remote.call_id,
                    reason: closed_reason(&row),
                };
                self.conns
                    .end_remote(resolved, except, &mut Outbox::new(out, None, None));
            }
        }
    }

    fn own_question_row(&mut self, row: QuestionRow, out: &mut Vec<Output>) {
        let Some(id) = self.shared.by_uuid.get(&row.question).cloned() else {
            return;
        };
        let Some(ballot) = self.shared.ballots.get_mut(&id) else {
            return;
        };
        match row.state {
            QuestionState::Open => {
                if matches!(ballot.state, BallotState::Asking | BallotState::Local) {
                    ballot.state = BallotState::Open;
                }
            }
            QuestionState::Answered => {
                let Some(response) = read_answer(row.answer.as_ref()) else {
                    return;
                };
                let mine = match &ballot.state {
                    BallotState::Answering {
                        conn,
                        response: sent,
                        grants,
                        by,
                    } if row.answered_by.as_ref() == Some(by)
                        && row.answer.as_ref() == Some(&answer_value(sent)) =>
                    {
                        Some((*conn, grants.clone()))
                    }
                    BallotState::Answering { conn, .. } => {
                        if let Some(conn) = conn.filter(|conn| self.conns.is_open(*conn)) {
                            lost(out, conn, &id, &row);
                        }
                        None
                    }
                    _ => None,
                };
                match mine {
                    Some((conn, grants)) => {
                        let conn = self.open_conn(conn);
                        self.apply_grant_rows(grants, None, out);
                        self.apply_store_answer(&id, response, None, conn, out);
                    }
                    None => {
                        let by = row
                            .answered_by
                            .clone()
                            .unwrap_or_else(|| "an approver on another broker".to_string());
                        self.apply_store_answer(&id, response, Some(by), None, out);
                    }
                }
            }
            QuestionState::Cancelled => {
                self.shared.ballots.remove(&id);
                self.shared.by_uuid.remove(&row.question);
                let session = self.questions.session_of(&id);
                self.end_ask(
                    &id,
                    wire::Source::Cancel,
                    match row.cancelled.as_deref() {
                        Some("lease") => "the question was cancelled in the shared store: this broker's lease lapsed while it could not reach the store".to_string(),
                        other => format!("the question was cancelled in the shared store ({})", other.unwrap_or("no reason given")),
                    },
                    &mut Outbox::new(out, None, None),
                );
                if let Some(session) = session {
                    self.sessions.forget_idle(&session);
                }
            }
        }
    }
}

/// The `error` an approver whose answer came second gets.
fn lost(out: &mut Vec<Output>, conn: ConnId, id: &str, row: &QuestionRow) {
    out.push(Output {
        to: super::To::Caller(conn),
        frame: ServerFrame::Error(wire::ErrorFrame {
            code: ErrorCode::AlreadyResolved,
            message: lost_text(id, row),
            call_id: None,
            session_id: None,
            permission_id: Some(id.to_string()),
            line: None,
            not_saved: None,
        }),
    });
}

/// What an approver whose answer came second is told.
fn lost_text(id: &str, row: &QuestionRow) -> String {
    match row.state {
        QuestionState::Answered => format!(
            "the request `{id}` was already answered by {}",
            row.answered_by.as_deref().unwrap_or("another approver")
        ),
        QuestionState::Cancelled => format!(
            "the request `{id}` was already ended: {}",
            cancelled_text(row.cancelled.as_deref())
        ),
        QuestionState::Open => format!("the request `{id}` is still open"),
    }
}

/// Why a question closed, for `permission_resolved`.
fn closed_reason(row: &QuestionRow) -> String {
    match row.state {
        QuestionState::Answered => format!(
            "answered by {}",
            row.answered_by.as_deref().unwrap_or("another approver")
        ),
        _ => cancelled_text(row.cancelled.as_deref()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
    use super::*;

    fn response(reply: wire::Reply, patterns: Option<Vec<&str>>) -> wire::PermissionResponse {
        wire::PermissionResponse {
            permission_id: "per_1".to_string(),
            response: reply,
            message: None,
            scope: Some(wire::GrantScope::Project),
            patterns: patterns.map(|list| list.into_iter().map(str::to_string).collect()),
            expires_in: Some(60),
        }
    }

    #[test]
    fn offers_say_what_each_answer_grants() {
        let offers = json!({
            "grants": [{"permission": "bash", "pattern": "git commit *", "literal": 10, "planOnly": false}],
            "options": [
                {"patterns": ["git commit -m x"], "grants": [{"permission": "bash", "pattern": "git commit -m x", "literal": 15, "planOnly": false}]},
                {"patterns": ["git commit *"], "grants": [{"permission": "bash", "pattern": "git commit *", "literal": 10, "planOnly": false}]}
            ],
            "none": null
        });
        let mut n = 0;
        let mut next = || {
            n += 1;
            format!("grant_{n}")
        };
        let always = answer_grants(
            Some(&offers),
            &response(wire::Reply::Always, None),
            "s",
            1000,
            &mut next,
        )
        .unwrap_or_default();
        assert_eq!(always.len(), 1);
        assert_eq!(always[0].pattern, "git commit *");
        assert_eq!(always[0].expires_at, Some(61_000));
        assert_eq!(always[0].scope, wire::GrantScope::Project);
        let narrow = answer_grants(
            Some(&offers),
            &response(wire::Reply::Always, Some(vec!["git commit -m x"])),
            "s",
            0,
            &mut next,
        )
        .unwrap_or_default();
        assert_eq!(narrow[0].pattern, "git commit -m x");
        assert!(answer_grants(
            Some(&offers),
            &response(wire::Reply::Always, Some(vec!["rm *"])),
            "s",
            0,
            &mut next
        )
        .is_err());
        assert!(answer_grants(
            Some(&offers),
            &response(wire::Reply::Once, None),
            "s",
            0,
            &mut next
        )
        .unwrap_or_default()
        .is_empty());
        let plan = json!({"grants": [], "options": [], "none": "plan"});
        assert!(answer_grants(
            Some(&plan),
            &response(wire::Reply::Always, None),
            "s",
            0,
            &mut next
        )
        .unwrap_or_default()
        .is_empty());
        assert!(answer_grants(
            None,
            &response(wire::Reply::Always, None),
            "s",
            0,
            &mut next
        )
        .unwrap_or_default()
        .is_empty());
    }

    /// A link never started (the tests hand the broker its news).
    struct Idle;

    impl Link for Idle {
        fn start(self: Box<Self>) -> Box<dyn LinkHandle> {
            panic!("the tests start no link")
        }
    }

    fn row(session: &str, mode: &str, revision: i64) -> SessionRow {
        SessionRow {
            session_id: session.to_string(),
            parent_id: None,
            mode: Some(mode.to_string()),
            permissions: None,
            started: true,
            joined: None,
            closed: None,
            revision,
        }
    }

    /// A broker in ask mode sharing a store that holds `loaded`.
    fn sharing(loaded: Vec<SessionRow>) -> Broker {
        let (policy, _) = toolgate_policy::Policy::build(toolgate_policy::Sources {
            project_root: std::path::PathBuf::from("/work/app"),
            home: None,
            mode: Some(Mode::Ask),
            file: None,
            overrides: Vec::new(),
            ask_timeout_seconds: None,
            read_only_agents: None,
            managed: Vec::new(),
        })
        .unwrap();
        let mut broker = Broker::new(
            std::sync::Arc::new(policy),
            super::super::BrokerConfig {
                on_ask: super::super::OnAsk::Wait,
                ask_timeout_ms: 0,
            },
            Box::new(crate::clock::ManualClock::new()),
            Box::new(crate::clock::SequentialIds::default()),
        );
        let setup = Setup {
            link: Box::new(Idle),
            whoami: "host (pid 1)".to_string(),
            stale: Duration::from_secs(20),
        };
        let warnings = broker.share(
            setup,
            Changes {
                sessions: loaded,
                ..Changes::default()
            },
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        broker
    }

    fn news(broker: &mut Broker, news: News) {
        broker.step(super::super::Input::Shared(news), &mut Vec::new());
    }

    fn read(broker: &mut Broker, rows: Vec<SessionRow>) {
        news(
            broker,
            News::Changes(Changes {
                sessions: rows,
                ..Changes::default()
            }),
        );
    }

    /// `set_mode` on connection 1: the write it made (its seq).
    fn set_mode(broker: &mut Broker, session: &str, mode: &str) -> u64 {
        let mut out = Vec::new();
        broker.step(super::super::Input::Opened { conn: 1 }, &mut out);
        let line = json!({"type": "set_mode", "sessionID": session, "mode": mode}).to_string();
        broker.step(
            super::super::Input::Line {
                conn: 1,
                line: line.as_bytes(),
                number: 1,
            },
            &mut out,
        );
        let writes = broker.take_shared_writes();
        assert_eq!(writes.len(), 1, "{writes:?}");
        let (seq, write) = &writes[0];
        assert!(
            matches!(
                write,
                Write::Session {
                    change: SessionChange::Mode,
                    ..
                }
            ),
            "{write:?}"
        );
        *seq
    }

    #[test]
    fn a_sessions_rows_apply_in_revision_order_and_never_go_back() {
        let mut broker = sharing(vec![row("s", "ask", 10)]);
        assert_eq!(broker.effective_mode("s"), Mode::Ask);
        read(&mut broker, vec![row("s", "plan", 12)]);
        assert_eq!(broker.effective_mode("s"), Mode::Plan);
        // An older revision read late (or read again) changes nothing.
        read(&mut broker, vec![row("s", "auto", 11)]);
        read(&mut broker, vec![row("s", "auto", 12)]);
        assert_eq!(broker.effective_mode("s"), Mode::Plan);
    }

    #[test]
    fn rows_read_while_a_write_is_in_flight_wait_for_its_row() {
        let mut broker = sharing(vec![row("s", "ask", 10)]);
        let seq = set_mode(&mut broker, "s", "auto");
        assert_eq!(broker.effective_mode("s"), Mode::Auto);
        // Another broker's plan, committed before this write: it waits.
        read(&mut broker, vec![row("s", "plan", 11)]);
        assert_eq!(broker.effective_mode("s"), Mode::Auto);
        // This write committed after it: the store holds auto, and so
        // does the broker; the plan read before is older.
        news(
            &mut broker,
            News::SessionWritten {
                seq,
                session_id: "s".to_string(),
                row: Some(row("s", "auto", 12)),
                refused: None,
            },
        );
        assert_eq!(broker.effective_mode("s"), Mode::Auto);
        // Its row read back changes nothing; a later plan is taken.
        read(&mut broker, vec![row("s", "auto", 12)]);
        read(&mut broker, vec![row("s", "plan", 13)]);
        assert_eq!(broker.effective_mode("s"), Mode::Plan);
        // A write the store refused leaves the newest row read meanwhile.
        let seq = set_mode(&mut broker, "s", "auto");
        read(&mut broker, vec![row("s", "readonly", 14)]);
        news(
            &mut broker,
            News::SessionWritten {
                seq,
                session_id: "s".to_string(),
                row: None,
                refused: None,
            },
        );
        assert_eq!(broker.effective_mode("s"), Mode::ReadOnly);
    }

    #[test]
    fn a_mode_change_to_a_session_closed_in_the_store_closes_it_here() {
        let mut broker = sharing(vec![row("s", "ask", 10)]);
        let seq = set_mode(&mut broker, "s", "auto");
        let closed = SessionRow {
            closed: Some(CloseWhy::Ended),
            ..row("s", "ask", 11)
        };
        news(
            &mut broker,
            News::SessionWritten {
                seq,
                session_id: "s".to_string(),
                row: Some(closed),
                refused: Some("closed elsewhere".to_string()),
            },
        );
        assert!(!broker.sessions.contains_key("s"));
        assert_eq!(broker.sessions.closed_why("s"), Some(Closed::Ended));
    }

    #[test]
    fn an_answer_reads_back_as_written() {
        let sent = response(wire::Reply::Always, Some(vec!["git commit *"]));
        let value = answer_value(&sent);
        assert_eq!(value["type"], "permission_response");
        assert_eq!(read_answer(Some(&value)), Some(sent));
    }
}
