//! The broker's state machine: sessions, pending questions, grants and
//! deadlines. It is synchronous and owns no I/O: a transport hands it one
//! [`Input`] at a time through [`Broker::step`] and writes the [`Output`]s,
//! each addressed to one connection. One broker can therefore serve stdio,
//! a socket, a hook or a replay alike.
//!
//! This module holds the [`Broker`], its settings and the dispatch of each
//! decoded frame; the parts live in `routing` (the step function, the
//! connections and who hears and answers what), `sessions` (the session tree
//! and modes), `questions` (calls, pending questions, answers, deadlines),
//! `grants` (`always` grants) and `persistence` (the state directory).

use std::collections::HashMap;
use std::sync::Arc;

use toolgate_policy::{Grants, Policy};
use toolgate_protocol as wire;
use toolgate_protocol::{ClientFrame, DecodeError, ErrorCode, ServerFrame};

use crate::clock::{Clock, IdSource};
use crate::state::Store;
use questions::{call_hash, Questions};
use sessions::{ClosedSet, RepeatMemory, Session};

pub use persistence::Lost;
pub use routing::{ConnId, Decoded, Input, Output, To};
pub use sessions::MAX_DEPTH;

pub mod audit;
mod grants;
mod persistence;
mod questions;
mod routing;
mod sessions;

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
    /// Looked up several times per call: a fast hasher (foldhash, seeded per process).
    sessions: HashMap<String, Session, foldhash::fast::RandomState>,
    /// The open questions.
    questions: Questions,
    stopped: bool,
    /// Grants kept for every session of the project.
    project_grants: Grants,
    /// The session that made each project grant.
    project_grant_owners: HashMap<String, String>,
    /// Where the state survives restarts, when it does.
    store: Option<Box<dyn Store>>,
    /// What is in force but not on disk because a write failed.
    unsaved: persistence::Unsaved,
    /// Sessions that ended or whose `session_start` was refused, and why, by
    /// the fingerprint of their id (never forgotten): their calls are denied
    /// rather than run in a fresh unscoped session.
    closed: ClosedSet,
    /// The repeat counts of forgotten idle sessions.
    idle_repeats: RepeatMemory,
    /// The idle session forgotten last: its id and repeat count, not yet
    /// in `idle_repeats`.
    parked: Option<(String, Option<(u64, u32)>)>,
    /// What `ready` says about where the policy and the state come from.
    origin: Origin,
    /// The connections, and who hears and answers which question.
    conns: routing::Connections,
    /// The audit log, when one is kept.
    audit: Option<audit::Audit>,
    /// The connection whose input is being handled.
    current: Option<ConnId>,
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
            sessions: HashMap::default(),
            questions: Questions::default(),
            stopped: false,
            project_grants: Grants::default(),
            project_grant_owners: HashMap::new(),
            store: None,
            unsaved: persistence::Unsaved::default(),
            closed: ClosedSet::default(),
            idle_repeats: RepeatMemory::default(),
            parked: None,
            origin: Origin::default(),
            conns: routing::Connections::default(),
            audit: None,
            current: None,
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
    fn reject_line(&mut self, mut err: DecodeError, number: u64, out: &mut Vec<ServerFrame>) {
        let others = std::mem::take(&mut err.others);
        match (&err.call_id, err.tool_call) {
            (Some(call_id), true) => {
                let session_id = err
                    .session_id
                    .unwrap_or_else(|| toolgate_protocol::DEFAULT_SESSION.to_string());
                if self.live_permission(&session_id, call_id).is_some() {
                    out.push(duplicate(call_id, &session_id, number));
                } else {
                    out.push(ServerFrame::Decision(wire::Decision {
                        session_id,
                        call_id: call_id.clone(),
                        decision: wire::Verdict::Deny,
                        source: wire::Source::Invalid,
                        reason: format!("the tool_call is malformed: {}", err.message),
                        rule: None,
                        message: None,
                        reminder: None,
                    }))
                }
            }
            _ => out.push(ServerFrame::Error(wire::ErrorFrame {
                code: err.code,
                message: err.message,
                call_id: err.call_id,
                session_id: err.session_id,
                permission_id: err.permission_id,
                line: Some(number),
                not_saved: None,
            })),
        }
        for other in others.into_vec() {
            self.reject_line(other, number, out);
        }
    }

    /// Handle one decoded frame.
    fn handle(
        &mut self,
        frame: ClientFrame,
        ahead: routing::Ahead,
        number: u64,
        out: &mut Vec<ServerFrame>,
    ) {
        if self.stopped {
            // Lines already read when the broker stopped (a `shutdown` frame
            // or a signal): their calls are denied, nothing else is done.
            if let ClientFrame::ToolCall(call) = frame {
                out.push(ServerFrame::Decision(wire::Decision {
                    session_id: call.session_id,
                    call_id: call.call_id,
                    decision: wire::Verdict::Deny,
                    source: wire::Source::Shutdown,
                    reason: "the broker was shutting down when the call arrived".to_string(),
                    rule: None,
                    message: None,
                    reminder: None,
                }));
            }
            return;
        }
        match frame {
            ClientFrame::ToolCall(call) => {
                let hash = ahead
                    .hash
                    .unwrap_or_else(|| call_hash(&call.tool, &call.input));
                self.tool_call(call, hash, ahead.prepared, number, out)
            }
            ClientFrame::PermissionResponse(response) => {
                let session = self.questions.session_of(&response.permission_id);
                self.response(response, number, out);
                if let Some(session) = session {
                    self.forget_idle(&session);
                }
            }
            ClientFrame::SetMode(set) => self.set_mode(set, number, out),
            ClientFrame::SessionStart(start) => self.session_start(start, number, out),
            ClientFrame::SessionEnd(end) => self.session_end(&end.session_id, number, out),
            ClientFrame::Cancel(cancel) => {
                let session = cancel.session_id.clone();
                self.cancel(cancel, number, out);
                self.forget_idle(&session);
            }
            ClientFrame::GetReminder(session) => {
                let mode = self.effective_mode(&session.session_id);
                out.push(ServerFrame::Reminder(wire::Reminder {
                    text: self.reminder(&session.session_id, mode),
                    session_id: session.session_id,
                    mode: mode.as_str().to_string(),
                }));
            }
            ClientFrame::ListGrants(list) => {
                out.push(self.grants_frame(list.session_id.as_deref()))
            }
            ClientFrame::RevokeGrant(revoke) => self.revoke_grant(revoke, number, out),
            ClientFrame::Shutdown(_) => self.shutdown(out),
            // Answered by the routing, which knows the connection.
            ClientFrame::Hello(_) => {}
        }
    }

    /// Deny every pending call (source `shutdown`) and stop.
    fn shutdown(&mut self, out: &mut Vec<ServerFrame>) {
        self.deny_open(
            wire::Source::Shutdown,
            "the broker shut down before the question was answered",
            out,
        );
        self.stopped = true;
    }

    /// Deny every open call, oldest first, with `source` and `reason`.
    fn deny_open(&mut self, source: wire::Source, reason: &str, out: &mut Vec<ServerFrame>) {
        for id in self.questions.all() {
            self.end_ask(&id, source, reason.to_string(), out);
        }
    }

    /// Judge under `policy` from now on (SIGHUP reloaded it) and decide every
    /// pending call whose answer under it is no longer "ask", as a mode
    /// change does (`permission_resolved`, then the decision); the others
    /// keep their question. Sessions keep the mode they are in; a new
    /// default mode applies to sessions that appear after the reload.
    fn replace_policy(
        &mut self,
        policy: Arc<Policy>,
        ask_timeout_ms: u64,
        out: &mut Vec<ServerFrame>,
    ) {
        self.policy = policy;
        self.reminders = Default::default();
        self.config.ask_timeout_ms = ask_timeout_ms;
        // Sessions in the order of their oldest pending call.
        for session_id in self.questions.sessions_by_age() {
            self.revisit_session(&session_id, "the policy was reloaded", None, out);
        }
    }
}

fn error(
    code: ErrorCode,
    message: String,
    call_id: Option<String>,
    line: Option<u64>,
) -> ServerFrame {
    ServerFrame::Error(wire::ErrorFrame {
        code,
        message,
        call_id,
        session_id: None,
        permission_id: None,
        line,
        not_saved: None,
    })
}

/// The ids a decoded frame names: every `error` frame it gets carries them
/// (unless the error names its own).
struct FrameIds {
    call_id: Option<String>,
    session_id: Option<String>,
    permission_id: Option<String>,
}

impl FrameIds {
    fn of(frame: &ClientFrame) -> FrameIds {
        let (call_id, session_id, permission_id) = match frame {
            ClientFrame::ToolCall(call) => (Some(&call.call_id), Some(&call.session_id), None),
            ClientFrame::PermissionResponse(response) => {
                (None, None, Some(&response.permission_id))
            }
            ClientFrame::SetMode(set) => (None, Some(&set.session_id), None),
            ClientFrame::SessionStart(start) => (None, Some(&start.session_id), None),
            ClientFrame::SessionEnd(end) | ClientFrame::GetReminder(end) => {
                (None, Some(&end.session_id), None)
            }
            ClientFrame::Cancel(cancel) => (Some(&cancel.call_id), Some(&cancel.session_id), None),
            ClientFrame::ListGrants(list) => (None, list.session_id.as_ref(), None),
            ClientFrame::RevokeGrant(_) | ClientFrame::Shutdown(_) | ClientFrame::Hello(_) => {
                (None, None, None)
            }
        };
        FrameIds {
            call_id: call_id.cloned(),
            session_id: session_id.cloned(),
            permission_id: permission_id.cloned(),
        }
    }

    fn fill(&self, frames: &mut [ServerFrame]) {
        for frame in frames {
            if let ServerFrame::Error(error) = frame {
                if error.call_id.is_none() {
                    error.call_id.clone_from(&self.call_id);
                }
                if error.session_id.is_none() {
                    error.session_id.clone_from(&self.session_id);
                }
                if error.permission_id.is_none() {
                    error.permission_id.clone_from(&self.permission_id);
                }
            }
        }
    }
}

fn duplicate(call_id: &str, session_id: &str, number: u64) -> ServerFrame {
    error(
        ErrorCode::DuplicateCall,
        format!(
            "a call `{call_id}` is already pending in session `{session_id}`; this one is ignored"
        ),
        Some(call_id.to_string()),
        Some(number),
    )
}
