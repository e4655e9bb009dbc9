//! The broker's state machine: sessions, pending questions, grants and
//! deadlines. It is synchronous and owns no I/O: a transport hands it one
//! [`Input`] at a time through [`Broker::step`] and writes the [`Output`]s,
//! each addressed to one connection. One broker can therefore serve stdio,
//! a socket, a hook or a replay alike.
//!
//! The [`Broker`] is a few parts, each a type of its own: `Sessions` (the
//! session tree, closed ids, idle repeat counts; `sessions`), `Questions`
//! (the open questions and their deadlines; `questions`), `ProjectGrants`
//! (`grants`), `StateStore` (the state directory; `persistence`) and
//! `Connections` (who is connected, who owns each open call, who was asked
//! what; `routing`), with the policy, the settings, the clock, the ids and
//! the audit log. What needs several parts (a call, an answer, a start, a
//! mode change) is a method of the broker that uses them explicitly. Each
//! output is addressed where it is made, through the step's `Outbox`
//! (`outbox`). This module holds the broker, its settings and the dispatch
//! of each decoded frame.

use std::sync::Arc;

use toolgate_policy::Policy;
use toolgate_protocol as wire;
use toolgate_protocol::{ClientFrame, DecodeError, ErrorCode, ServerFrame};

use crate::clock::{Clock, IdSource};
use grants::ProjectGrants;
use outbox::Outbox;
use persistence::StateStore;
use questions::{call_hash, Questions};
use sessions::Sessions;

pub use persistence::Lost;
pub use routing::{ConnId, Decoded, Input, Output, To};
pub use sessions::MAX_DEPTH;
pub use shared::{
    offers, Changes, CloseWhy, GrantRow, Link, LinkHandle, News, Outcome, QuestionRow,
    QuestionState, SessionChange, SessionRow, Setup, Write,
};

pub mod audit;
mod grants;
mod observe;
mod outbox;
mod persistence;
mod questions;
mod routing;
mod sessions;
pub(crate) mod shared;

/// What to do when the answer is "ask".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnAsk {
    /// Emit a `permission_request` and wait for the answer.
    Wait,
    /// Deny at once without asking (non-interactive runs).
    Deny,
}

/// Settings of a broker that are not part of the policy.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// What to do when the answer is "ask".
    pub on_ask: OnAsk,
    /// How long an ask waits, in milliseconds; 0 waits forever.
    pub ask_timeout_ms: u64,
}

/// The state of one broker.
pub struct Broker {
    policy: Arc<Policy>,
    config: BrokerConfig,
    clock: Box<dyn Clock>,
    ids: Box<dyn IdSource>,
    /// The session tree, closed sessions, idle repeat counts.
    sessions: Sessions,
    /// The open questions.
    questions: Questions,
    /// The project's grants.
    grants: ProjectGrants,
    /// When the first grant with a lifetime ends (wall-clock ms), if one
    /// has a lifetime: until then a step checks no grant. Never later than
    /// the true first end (it may be earlier after a revocation).
    next_expiry: Option<u64>,
    /// The state directory, when state is kept.
    store: StateStore,
    stopped: bool,
    /// What `ready` says about where the policy and the state come from.
    origin: Origin,
    /// The connections, and who hears and answers which question.
    conns: routing::Connections,
    /// The audit log, when one is kept.
    audit: Option<audit::Audit>,
    /// The observer connections.
    observers: observe::Observers,
    /// What is shared with other brokers through a store (`serve --store`).
    shared: shared::Shared,
    /// The reminder of each mode for a session with no scope and no
    /// whole-permission grant (most sessions): pure in the policy and the
    /// settings, so built once per policy rather than once per decision.
    reminders: [std::cell::OnceCell<String>; toolgate_policy::Mode::ALL.len()],
}

/// Where a broker's policy and state come from, for `ready` (set by the
/// binary, which read the flags and files).
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// The policy's layers, lowest first (`built-in`, the policy file, ...).
    pub policy_sources: Vec<String>,
    /// The state directory, when state is kept.
    pub state_dir: Option<String>,
}

impl Broker {
    /// Keep an audit log: a record of every decision and every answer is
    /// appended to `log` before the decision leaves the broker.
    pub fn set_audit(&mut self, log: Box<dyn audit::AuditLog>) {
        self.audit = Some(audit::Audit::new(log));
    }

    /// A broker with no sessions.
    pub fn new(
        policy: Arc<Policy>,
        config: BrokerConfig,
        clock: Box<dyn Clock>,
        ids: Box<dyn IdSource>,
    ) -> Broker {
        Broker {
            policy,
            config,
            clock,
            ids,
            sessions: Sessions::default(),
            questions: Questions::default(),
            grants: ProjectGrants::default(),
            next_expiry: None,
            store: StateStore::default(),
            stopped: false,
            origin: Origin::default(),
            conns: routing::Connections::default(),
            observers: observe::Observers::default(),
            shared: shared::Shared::default(),
            audit: None,
            reminders: Default::default(),
        }
    }

    /// Say in `ready` where the policy and the state come from.
    pub fn set_origin(&mut self, origin: Origin) {
        self.origin = origin;
    }

    /// The policy calls are judged under now (a reload replaces it).
    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// True once `shutdown` was handled: the transport stops reading.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// How many calls wait for an answer.
    pub fn pending_count(&self) -> usize {
        self.questions.len()
    }

    /// The current monotonic time.
    pub fn now_ms(&self) -> u64 {
        self.clock.monotonic_ms()
    }

    /// A line that did not decode: a `deny` (source `invalid`) for each
    /// `tool_call` on it whose `callID` could be read, an `error` frame for
    /// the rest (with the `callID` and `permissionID` that could be read).
    fn reject_line(&mut self, mut err: DecodeError, ob: &mut Outbox<'_>) {
        let others = std::mem::take(&mut err.others);
        match (&err.call_id, err.tool_call) {
            (Some(call_id), true) => {
                let session_id = err
                    .session_id
                    .unwrap_or_else(|| toolgate_protocol::DEFAULT_SESSION.to_string());
                if self
                    .sessions
                    .live_permission(&session_id, call_id)
                    .is_some()
                {
                    duplicate(ob, call_id, &session_id, false);
                } else {
                    let decision = wire::Decision {
                        session_id,
                        call_id: call_id.clone(),
                        decision: wire::Verdict::Deny,
                        source: wire::Source::Invalid,
                        reason: format!("the tool_call is malformed: {}", err.message),
                        rule: None,
                        message: None,
                        reminder: None,
                        child_session_id: None,
                    };
                    self.decide(decision, ob);
                }
            }
            _ => ob.error_naming(
                err.code,
                err.message,
                err.call_id,
                err.session_id,
                err.permission_id,
            ),
        }
        for other in others.into_vec() {
            self.reject_line(other, ob);
        }
    }

    /// Handle one decoded frame.
    fn handle(&mut self, frame: ClientFrame, ahead: routing::Ahead, ob: &mut Outbox<'_>) {
        if self.stopped {
            // Lines already read when the broker stopped (a `shutdown` frame
            // or a signal): their calls are denied, nothing else is done.
            if let ClientFrame::ToolCall(call) = frame {
                let decision = wire::Decision {
                    session_id: call.session_id,
                    call_id: call.call_id,
                    decision: wire::Verdict::Deny,
                    source: wire::Source::Shutdown,
                    reason: "the broker was shutting down when the call arrived".to_string(),
                    rule: None,
                    message: None,
                    reminder: None,
                    child_session_id: None,
                };
                self.decide(decision, ob);
            }
            return;
        }
        match frame {
            ClientFrame::ToolCall(call) => {
                let hash = ahead
                    .hash
                    .unwrap_or_else(|| call_hash(&call.tool, &call.input));
                self.tool_call(call, hash, ahead.prepared, ob)
            }
            ClientFrame::PermissionResponse(response) => {
                // Another broker's question, asked through the store.
                if self.shared.active() && self.answer_remote(&response, ob) {
                    return;
                }
                let session = self.questions.session_of(&response.permission_id);
                self.response(response, ob);
                if let Some(session) = session {
                    self.sessions.forget_idle(&session);
                }
            }
            ClientFrame::SetMode(set) => self.set_mode(set, ob),
            ClientFrame::SessionStart(start) => self.session_start(start, ob),
            ClientFrame::SessionEnd(end) => self.session_end(&end.session_id, ob),
            ClientFrame::Cancel(cancel) => {
                let session = cancel.session_id.clone();
                self.cancel(cancel, ob);
                self.sessions.forget_idle(&session);
            }
            ClientFrame::GetReminder(session) => {
                let mode = self.effective_mode(&session.session_id);
                ob.reply(ServerFrame::Reminder(wire::Reminder {
                    text: self.reminder(&session.session_id, mode),
                    session_id: session.session_id,
                    mode: mode.as_str().to_string(),
                }));
            }
            ClientFrame::ListGrants(list) => {
                ob.reply(self.grants_frame(list.session_id.as_deref()))
            }
            ClientFrame::RevokeGrant(revoke) => self.revoke_grant(revoke, ob),
            ClientFrame::Shutdown(_) => self.shutdown(ob),
            ClientFrame::ListSessions(list) => {
                ob.reply(self.sessions_frame(list.session_id.as_deref()))
            }
            ClientFrame::ListPending(list) => {
                ob.reply(self.pending_frame(list.session_id.as_deref()))
            }
            ClientFrame::ListTools(session) => ob.reply(self.tools_frame(&session.session_id)),
            // Answered by the routing, which knows the connection.
            ClientFrame::Hello(_) => {}
            // A remote connection's admin token has these handled by its
            // listener, with the store, before the broker sees them
            // (`transport::remote::admin`): what reaches the broker came
            // from elsewhere.
            ClientFrame::CreateToken(_)
            | ClientFrame::ListTokens(_)
            | ClientFrame::RevokeToken(_) => {
                if self.shared.active() {
                    ob.error(
                        ErrorCode::Forbidden,
                        "tokens are made, listed and revoked over a remote connection (--remote) with an admin token, or with `toolgate tokens --store`; not on the broker's Unix socket".to_string(),
                    );
                } else {
                    ob.error(
                        ErrorCode::InvalidFrame,
                        "this broker shares no store (it was started without --store), so it has no tokens: tokens live in a shared store (`toolgate tokens --store`)".to_string(),
                    );
                }
            }
        }
    }

    /// Deny every pending call (source `shutdown`) and stop.
    fn shutdown(&mut self, ob: &mut Outbox<'_>) {
        self.deny_open(
            wire::Source::Shutdown,
            "the broker shut down before the question was answered",
            ob,
        );
        self.stopped = true;
    }

    /// Deny every open call, oldest first, with `source` and `reason`.
    fn deny_open(&mut self, source: wire::Source, reason: &str, ob: &mut Outbox<'_>) {
        for id in self.questions.all() {
            self.end_ask(&id, source, reason.to_string(), ob);
        }
    }

    /// Judge under `policy` from now on (SIGHUP reloaded it) and decide every
    /// pending call whose answer under it is no longer "ask", as a mode
    /// change does (`permission_resolved`, then the decision); the others
    /// keep their question. Sessions keep the mode they are in; a new
    /// default mode applies to sessions that appear after the reload. A
    /// managed floor that moved is news first: each session whose
    /// effective mode moved with it is told (`Broker::floor_moved`).
    fn replace_policy(&mut self, policy: Arc<Policy>, ask_timeout_ms: u64, ob: &mut Outbox<'_>) {
        // A moved managed floor moves the sessions it holds (or held): the
        // sessions the broker holds, parents first, then those it forgot
        // that a connection still uses (an agent's implicit session).
        let before: Vec<(String, toolgate_policy::Mode)> =
            if self.policy.mode_floor == policy.mode_floor {
                Vec::new()
            } else {
                let forgotten = self.conns.sessions_named().into_iter().filter(|id| {
                    !self.sessions.contains_key(id) && self.sessions.closed_why(id).is_none()
                });
                self.sessions
                    .in_tree_order()
                    .into_iter()
                    .chain(forgotten)
                    .map(|id| {
                        let mode = self.effective_mode(&id);
                        (id, mode)
                    })
                    .collect()
            };
        let old = std::mem::replace(&mut self.policy, policy);
        self.reminders = Default::default();
        self.config.ask_timeout_ms = ask_timeout_ms;
        if !before.is_empty() {
            self.floor_moved(&old, before, ob);
        }
        // Sessions in the order of their oldest pending call.
        for session_id in self.questions.sessions_by_age() {
            self.revisit_session(&session_id, "the policy was reloaded", None, ob);
        }
    }
}

/// The `error` a second live call with the same id in `session_id` gets
/// (naming the session when `named`).
fn duplicate(ob: &mut Outbox<'_>, call_id: &str, session_id: &str, named: bool) {
    ob.error_naming(
        ErrorCode::DuplicateCall,
        format!(
            "a call `{call_id}` is already pending in session `{session_id}`; this one is ignored"
        ),
        Some(call_id.to_string()),
        named.then(|| session_id.to_string()),
        None,
    );
}
