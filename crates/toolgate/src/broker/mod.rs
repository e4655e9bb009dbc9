//! The broker's state machine: sessions, pending questions, grants and
//! deadlines. It is synchronous and owns no I/O: the transport hands it frames
//! and the current time, and it appends the frames to write to an output list.
//! One broker can therefore serve stdio, a socket or a replay alike.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use toolgate_policy::{Grants, Mode, Policy, Scope, ScopeLayer, ScopeRules};
use toolgate_protocol as wire;
use toolgate_protocol::{ClientFrame, DecodeError, ErrorCode, ServerFrame};

use crate::clock::{Clock, IdSource};
use crate::convert;
use crate::state::{session_fingerprint, Change, Store};
use persistence::stored_closed;
use questions::{Pending, Queue};

mod grants;
mod persistence;
mod questions;

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

/// How many ancestors a session may have: a `session_start` that would make
/// a chain deeper is refused (and shuts the session, like every refused start).
pub const MAX_DEPTH: usize = 64;

/// How many forgotten idle sessions keep their repeat count (doom loop).
const IDLE_REPEATS_KEPT: usize = 1 << 16;

struct Session {
    /// The mode the session itself is in. Its effective mode is the strictest
    /// of this and every ancestor's (see [`Broker::effective_mode`]).
    mode: Mode,
    /// The session that started it.
    parent: Option<String>,
    /// The narrowing the session itself asked for, as written.
    rules: Option<ScopeRules>,
    /// Its own narrowing after every ancestor's.
    scope: Scope,
    /// Started by `session_start` or given a mode: kept in the state
    /// directory. A session that is not, and has no grants, pending calls or
    /// children, is forgotten once its call is decided (see [`Broker::forget_idle`]).
    explicit: bool,
    /// Started by `session_start` (or restored with a parent or a scope):
    /// a second start is refused.
    started: bool,
    grants: Grants,
    /// Hash of the last call (tool and input) and how many times in a row it came.
    last_call: Option<(u64, u32)>,
    /// callID of every pending call → its permission id.
    live: HashMap<String, String>,
    /// The sessions it started (whose `parent` it is), in id order.
    children: BTreeSet<String>,
}

/// The state of one broker.
pub struct Broker {
    policy: Arc<Policy>,
    config: BrokerConfig,
    clock: Box<dyn Clock>,
    ids: Box<dyn IdSource>,
    sessions: HashMap<String, Session>,
    /// Open questions by permission id.
    pending: HashMap<String, Pending>,
    /// Each session's open questions (only sessions that have some).
    queues: HashMap<String, Queue>,
    /// Deadlines: (monotonic ms, permission id), earliest first. Stale entries are skipped.
    deadlines: BinaryHeap<Reverse<(u64, String)>>,
    resolved: HashSet<String>,
    resolved_order: VecDeque<String>,
    next_seq: u64,
    stopped: bool,
    /// Grants kept for every session of the project.
    project_grants: Grants,
    /// The session that made each project grant.
    project_grant_owners: HashMap<String, String>,
    /// Where the state survives restarts, when it does.
    store: Option<Box<dyn Store>>,
    /// Sessions that ended or whose `session_start` was refused, and why, by
    /// the fingerprint of their id (never forgotten): their calls are denied
    /// rather than run in a fresh unscoped session.
    closed: ClosedSet,
    /// The repeat counts of forgotten idle sessions.
    idle_repeats: RepeatMemory,
    /// What `ready` says about where the policy and the state come from.
    origin: Origin,
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
            sessions: HashMap::new(),
            pending: HashMap::new(),
            queues: HashMap::new(),
            deadlines: BinaryHeap::new(),
            resolved: HashSet::new(),
            resolved_order: VecDeque::new(),
            next_seq: 0,
            stopped: false,
            project_grants: Grants::default(),
            project_grant_owners: HashMap::new(),
            store: None,
            closed: ClosedSet::default(),
            idle_repeats: RepeatMemory::default(),
            origin: Origin::default(),
        }
    }

    /// Say in `ready` where the policy and the state come from.
    pub fn set_origin(&mut self, origin: Origin) {
        self.origin = origin;
    }

    /// The scope of a session (none when there is no such session).
    fn scope_of(&self, session_id: Option<&str>) -> Scope {
        session_id
            .and_then(|id| self.sessions.get(id))
            .map(|session| session.scope.clone())
            .unwrap_or_default()
    }

    /// The model-facing reminder for a session in `mode`: the mode table,
    /// the session's scope, and whether anyone can be asked.
    fn reminder(&self, session_id: &str, mode: Mode) -> String {
        let scope = match self.sessions.get(session_id) {
            Some(session) => &session.scope,
            None => &Scope::NONE,
        };
        toolgate_policy::reminder_granted(
            &self.policy,
            mode,
            scope,
            self.config.on_ask == OnAsk::Deny,
            &self.kind_grants(session_id, mode),
        )
    }

    /// Remember that a session may not run calls (for good: only the
    /// fingerprint of its id is kept).
    fn close(&mut self, session_id: &str, why: Closed) {
        self.closed.insert(session_fingerprint(session_id), why);
    }

    /// Why a session may not run calls, if it was closed.
    fn closed_why(&self, session_id: &str) -> Option<Closed> {
        self.closed.get(session_fingerprint(session_id))
    }

    /// A session entry, created in the default mode (with the repeat count it
    /// had when it was forgotten) when there is none.
    fn session_entry(&mut self, session_id: &str) -> &mut Session {
        let default_mode = self.policy.default_mode;
        let idle_repeats = &mut self.idle_repeats;
        self.sessions
            .entry(session_id.to_string())
            .or_insert_with(|| {
                let mut session = new_session(default_mode);
                session.last_call = idle_repeats.take(session_fingerprint(session_id));
                session
            })
    }

    /// Forget a session that holds nothing an answer depends on: never
    /// started nor given a mode, no grants, no pending calls, no children.
    /// Such a session answers exactly like one never seen, but for its
    /// repeat count, which is kept in a bounded memory.
    fn forget_idle(&mut self, session_id: &str) {
        let idle = self.sessions.get(session_id).is_some_and(|session| {
            !session.explicit
                && session.parent.is_none()
                && session.rules.is_none()
                && session.grants.is_empty()
                && session.live.is_empty()
                && session.children.is_empty()
        });
        if !idle {
            return;
        }
        if let Some(session) = self.sessions.remove(session_id) {
            if let Some(last_call) = session.last_call {
                self.idle_repeats
                    .put(session_fingerprint(session_id), last_call);
            }
        }
    }

    /// Remove a session's entry and unlink it from its parent.
    fn remove_session(&mut self, session_id: &str) -> Option<Session> {
        let session = self.sessions.remove(session_id)?;
        if let Some(parent) = &session.parent {
            if let Some(parent) = self.sessions.get_mut(parent) {
                parent.children.remove(session_id);
            }
        }
        Some(session)
    }

    /// The mode a session's calls are judged in: the strictest of its own and
    /// every ancestor's.
    fn effective_mode(&self, session_id: &str) -> Mode {
        let Some(mut session) = self.sessions.get(session_id) else {
            return self.policy.default_mode;
        };
        let mut mode = session.mode;
        // The hop limit only matters for a hand-edited state file with a cycle.
        let mut hops = self.sessions.len();
        while let Some(parent) = session.parent.as_ref().and_then(|p| self.sessions.get(p)) {
            if parent.mode.strictness() > mode.strictness() {
                mode = parent.mode;
            }
            session = parent;
            hops = hops.saturating_sub(1);
            if hops == 0 {
                break;
            }
        }
        mode
    }

    /// A session and its descendants, parents before children (breadth
    /// first, each one's children in id order).
    fn subtree(&self, session_id: &str) -> Vec<String> {
        let mut ids = vec![session_id.to_string()];
        let mut next = 0;
        while next < ids.len() {
            if let Some(session) = self.sessions.get(&ids[next]) {
                ids.extend(session.children.iter().cloned());
            }
            next += 1;
        }
        ids
    }

    /// How many generations a session's subtree holds below it (0 for a leaf).
    fn height(&self, session_id: &str) -> usize {
        let mut level: Vec<&str> = vec![session_id];
        let mut height = 0;
        loop {
            let below: Vec<&str> = level
                .iter()
                .filter_map(|id| self.sessions.get(*id))
                .flat_map(|session| session.children.iter().map(String::as_str))
                .collect();
            if below.is_empty() || height > self.sessions.len() {
                return height;
            }
            height += 1;
            level = below;
        }
    }

    /// The `ready` frame.
    pub fn ready(&self) -> ServerFrame {
        ServerFrame::Ready(wire::Ready {
            protocol: wire::PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION").to_string(),
            mode: self.policy.default_mode.as_str().to_string(),
            project_root: self.policy.project_root.to_string_lossy().into_owned(),
            policy_sources: self.origin.policy_sources.clone(),
            state_dir: self.origin.state_dir.clone(),
        })
    }

    /// True once `shutdown` was handled: the transport stops reading.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// How many calls wait for an answer.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// The current monotonic time.
    pub fn now_ms(&self) -> u64 {
        self.clock.monotonic_ms()
    }

    /// Handle one input line (1-based `line` number for error frames).
    pub fn handle_line(&mut self, line: &[u8], number: u64, out: &mut Vec<ServerFrame>) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        match toolgate_protocol::decode_line(line, number) {
            Ok(frame) => {
                // Error frames about a frame that decoded carry the ids it names.
                let ids = FrameIds::of(&frame);
                let start = out.len();
                self.handle(frame, number, out);
                ids.fill(&mut out[start..]);
            }
            Err(err) => {
                self.reject_line(err, number, out);
                if !self.stopped {
                    self.shut_unreadable_start(line, out);
                }
            }
        }
    }

    /// A `session_start` refused because it could not be decoded shuts its
    /// session too, when the line is JSON naming the session.
    fn shut_unreadable_start(&mut self, line: &[u8], out: &mut Vec<ServerFrame>) {
        let Ok(Value::Object(frame)) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        if frame.get("type").and_then(Value::as_str) != Some("session_start") {
            return;
        }
        if let Some(id) = frame.get("sessionID").and_then(Value::as_str) {
            self.shut_refused(id, out);
        }
    }

    /// A line that did not decode: a `deny` (source `invalid`) for each
    /// `tool_call` on it whose `callID` could be read, an `error` frame for
    /// the rest (with the `callID` and `permissionID` that could be read).
    pub fn reject_line(&mut self, mut err: DecodeError, number: u64, out: &mut Vec<ServerFrame>) {
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
            })),
        }
        for other in others.into_vec() {
            self.reject_line(other, number, out);
        }
    }

    /// Handle one decoded frame.
    pub fn handle(&mut self, frame: ClientFrame, number: u64, out: &mut Vec<ServerFrame>) {
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
            ClientFrame::ToolCall(call) => self.tool_call(call, number, out),
            ClientFrame::PermissionResponse(response) => {
                let session = self
                    .pending
                    .get(&response.permission_id)
                    .map(|pending| pending.session_id.clone());
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
        }
    }

    /// Deny every pending call (source `shutdown`) and stop.
    pub fn shutdown(&mut self, out: &mut Vec<ServerFrame>) {
        let mut ids: Vec<(u64, String)> = self
            .pending
            .iter()
            .map(|(id, pending)| (pending.seq, id.clone()))
            .collect();
        ids.sort();
        for (_, id) in ids {
            self.end_ask(
                &id,
                wire::Source::Shutdown,
                "the broker shut down before the question was answered".to_string(),
                out,
            );
        }
        self.stopped = true;
    }

    fn set_mode(&mut self, set: wire::SetMode, number: u64, out: &mut Vec<ServerFrame>) {
        let Some(mode) = parse_mode(&set.mode, number, out) else {
            return;
        };
        if !self.sessions.contains_key(&set.session_id) {
            if let Some(why) = self.closed_why(&set.session_id) {
                let why = why.text(&set.session_id);
                out.push(error(
                    ErrorCode::UnknownSession,
                    format!("{why}; start it again before changing its mode"),
                    None,
                    Some(number),
                ));
                return;
            }
        }
        self.change_mode(&set.session_id, mode, out);
    }

    /// Set a session's own mode. The session and each descendant whose
    /// effective mode changes get `mode_changed` (the session always does) and
    /// have their pending calls judged again.
    fn change_mode(&mut self, session_id: &str, mode: Mode, out: &mut Vec<ServerFrame>) {
        self.session_entry(session_id);
        let affected = self.subtree(session_id);
        let before: Vec<Mode> = affected.iter().map(|id| self.effective_mode(id)).collect();
        if let Some(session) = self.sessions.get_mut(session_id) {
            session.mode = mode;
            session.explicit = true;
        }
        let left_plan = self.end_plan_grants(&affected, &before);
        let changes: Vec<Change> = std::iter::once(session_id.to_string())
            .chain(left_plan.into_iter().filter(|id| id != session_id))
            .map(|id| self.stored_change(&id))
            .collect();
        // A failed save is logged; the mode applies in memory either way.
        let _ = self.persist(&changes);
        // Sessions with the same mode, the same scope layers (children that
        // added none) and the same kind grants get the same reminder: it is
        // written once.
        type Key = (Mode, Vec<usize>, Vec<(String, bool)>);
        let mut reminders: HashMap<Key, String> = HashMap::new();
        for (id, previous) in affected.iter().zip(before) {
            let now = self.effective_mode(id);
            if id != session_id && now == previous {
                continue;
            }
            let layers: Vec<usize> = self
                .sessions
                .get(id)
                .map(|session| {
                    session
                        .scope
                        .layers()
                        .map(|layer| layer as *const ScopeLayer as usize)
                        .collect()
                })
                .unwrap_or_default();
            let granted = self.kind_grants(id, now);
            let reminder = reminders
                .entry((now, layers, granted))
                .or_insert_with(|| self.reminder(id, now))
                .clone();
            out.push(ServerFrame::ModeChanged(wire::ModeChanged {
                session_id: id.clone(),
                mode: now.as_str().to_string(),
                previous: previous.as_str().to_string(),
                reminder: Some(reminder),
            }));
            if previous != now {
                self.revisit_session(
                    id,
                    &format!("the session's mode changed to {now}"),
                    None,
                    out,
                );
            }
        }
    }

    /// The effective mode of a session's parent, if it has one.
    fn parent_mode(&self, session_id: &str) -> Option<Mode> {
        let parent = self.sessions.get(session_id)?.parent.as_deref()?;
        Some(self.effective_mode(parent))
    }

    fn session_start(
        &mut self,
        start: wire::SessionStart,
        number: u64,
        out: &mut Vec<ServerFrame>,
    ) {
        let id = start.session_id.clone();
        let requested = match start.mode.as_deref() {
            None => None,
            Some(name) => match parse_mode(name, number, out) {
                Some(mode) => Some(mode),
                None => {
                    self.shut_refused(&id, out);
                    return;
                }
            },
        };
        // Every refused start shuts the session, whether or not it ran before.
        let refuse = |broker: &mut Broker, message: String, out: &mut Vec<ServerFrame>| {
            out.push(error(ErrorCode::InvalidFrame, message, None, Some(number)));
            broker.shut_refused(&id, out);
        };
        if let Some(existing) = self.sessions.get(&id) {
            if existing.started {
                refuse(
                    self,
                    format!(
                        "the session `{id}` was already started; end it before starting it again"
                    ),
                    out,
                );
                return;
            }
        }
        if start.parent_id.as_deref() == Some(id.as_str()) {
            refuse(
                self,
                format!("the session `{id}` cannot be its own parent"),
                out,
            );
            return;
        }
        if let Some(parent) = &start.parent_id {
            if !self.sessions.contains_key(parent) {
                if let Some(why) = self.closed_why(parent) {
                    let message = format!(
                        "{}; the session `{id}` was not started under it",
                        why.text(parent)
                    );
                    refuse(self, message, out);
                    return;
                }
            }
            let ancestors = self.ancestors(parent);
            if ancestors.contains(&id) {
                let message = format!(
                    "the session `{parent}` descends from `{id}`, so it cannot be its parent"
                );
                refuse(self, message, out);
                return;
            }
            // The deepest session of the new subtree: `id` or a session it started.
            let depth = ancestors.len() + 1 + self.height(&id);
            if depth > MAX_DEPTH {
                let message = format!(
                    "starting `{id}` under `{parent}` would give a session {depth} ancestors, more than the limit of {MAX_DEPTH}; the session `{id}` was not started"
                );
                refuse(self, message, out);
                return;
            }
        }
        let rules = start.permissions.map(convert::scope_rules);
        let layer = match &rules {
            None => None,
            Some(rules) => match self.policy.scope_layer(&id, rules.clone()) {
                Ok(layer) => Some(layer),
                Err(err) => {
                    refuse(
                        self,
                        format!("{err}; the session `{id}` was not started"),
                        out,
                    );
                    return;
                }
            },
        };
        let default_mode = self.policy.default_mode;
        // Whether the state directory kept the parent before it had this
        // child (an implicit parent is kept from its first child on).
        let parent_stored = start
            .parent_id
            .as_deref()
            .is_some_and(|parent| self.is_stored_id(parent));
        // A parent that was never seen is the implicit session a tool call
        // would have created: the default mode and no scope.
        if let Some(parent) = &start.parent_id {
            self.session_entry(parent);
        }
        let parent_mode = start.parent_id.as_deref().map(|p| self.effective_mode(p));
        let parent_scope = self.scope_of(start.parent_id.as_deref());
        let scope = match layer {
            Some(layer) => parent_scope.with(layer),
            None => parent_scope,
        };
        let effective_scope = convert::effective_scope(
            scope.effective(|tool| self.policy.registry.lookup(tool).permission.clone()),
            &self.policy.always_available,
        );
        // A session that was given a mode keeps it unless told otherwise; one
        // that only made calls never chose one, and starts like a new one.
        let own_mode = requested
            .or(self
                .sessions
                .get(&id)
                .filter(|session| session.explicit)
                .map(|session| session.mode))
            .or(parent_mode)
            .unwrap_or(default_mode);
        self.closed.remove(session_fingerprint(&id));
        // The modes before the start, to end plan-mode kind grants it ends.
        let subtree_before = self.subtree(&id);
        let modes_before: Vec<Mode> = subtree_before
            .iter()
            .map(|session| self.effective_mode(session))
            .collect();
        let session = self.session_entry(&id);
        session.mode = own_mode;
        let previous_parent = std::mem::replace(&mut session.parent, start.parent_id.clone());
        session.rules = rules;
        session.scope = scope;
        session.explicit = true;
        session.started = true;
        let mut changes = Vec::new();
        if let Some(previous) = previous_parent {
            let was_stored = self.is_stored_id(&previous);
            if let Some(session) = self.sessions.get_mut(&previous) {
                session.children.remove(&id);
            }
            if was_stored && !self.is_stored_id(&previous) {
                changes.push(self.stored_change(&previous));
            }
        }
        if let Some(parent) = &start.parent_id {
            if let Some(session) = self.sessions.get_mut(parent) {
                session.children.insert(id.clone());
            }
            // An implicit parent is kept from its first child on, before
            // the child that names it.
            if !parent_stored {
                changes.push(self.stored_change(parent));
            }
        }
        for ended in self.end_plan_grants(&subtree_before, &modes_before) {
            if ended != id {
                changes.push(self.stored_change(&ended));
            }
        }
        // The whole session: also reopens it if it was closed.
        changes.push(self.stored_change(&id));
        let mode = self.effective_mode(&id);
        // A failed save is logged; the session runs in memory either way.
        let _ = self.persist(&changes);
        out.push(ServerFrame::SessionStarted(wire::SessionStarted {
            session_id: id.clone(),
            parent_id: start.parent_id,
            mode: mode.as_str().to_string(),
            scope: effective_scope,
        }));
        // Sessions an implicit session already started take on its new scope,
        // and calls already waiting are judged again.
        let subtree = self.subtree(&id);
        for child in subtree.iter().skip(1) {
            let parent_scope = self.scope_of(
                self.sessions
                    .get(child)
                    .and_then(|session| session.parent.as_deref()),
            );
            if let Some(session) = self.sessions.get_mut(child) {
                session.scope = match &session.rules {
                    Some(rules) => match self.policy.scope_layer(child, rules.clone()) {
                        Ok(layer) => parent_scope.with(layer),
                        Err(_) => parent_scope.with(ScopeLayer::deny_all(child)),
                    },
                    None => parent_scope,
                };
            }
        }
        for session in subtree {
            self.revisit_session(&session, "the session was started with a scope", None, out);
        }
    }

    /// After a refused `session_start`: a running session ends with its
    /// descendants (as `session_end` ends them), and the id is closed as
    /// refused until a start for it succeeds.
    fn shut_refused(&mut self, session_id: &str, out: &mut Vec<ServerFrame>) {
        let mut changes = Vec::new();
        if self.sessions.contains_key(session_id) {
            self.end_subtree(session_id, out, &mut changes);
        }
        self.close(session_id, Closed::Refused);
        changes.push(Change::Closed(stored_closed(
            session_fingerprint(session_id),
            Closed::Refused,
        )));
        // A failed save is logged; the session is shut in memory either way.
        let _ = self.persist(&changes);
    }

    /// A session's ancestors, its parent first (bounded, in case of a bug:
    /// the parent links never form a cycle).
    fn ancestors(&self, session_id: &str) -> Vec<String> {
        let mut chain: Vec<String> = Vec::new();
        let mut current = self
            .sessions
            .get(session_id)
            .and_then(|s| s.parent.as_deref());
        while let Some(parent) = current {
            if chain.len() > self.sessions.len() {
                break;
            }
            chain.push(parent.to_string());
            current = self.sessions.get(parent).and_then(|s| s.parent.as_deref());
        }
        chain
    }

    /// End a session and, first, every session it started: their pending
    /// calls are denied and each gets `session_ended`. Ending a session that
    /// is not running (never seen, or idle and forgotten) closes its id and
    /// reports `session_ended` with nothing denied.
    fn session_end(&mut self, session_id: &str, number: u64, out: &mut Vec<ServerFrame>) {
        let mut changes = Vec::new();
        if !self.sessions.contains_key(session_id) {
            if self.closed_why(session_id).is_some() {
                out.push(error(
                    ErrorCode::UnknownSession,
                    format!("no session has the id `{session_id}`"),
                    None,
                    Some(number),
                ));
                return;
            }
            self.close(session_id, Closed::Ended);
            changes.push(Change::Closed(stored_closed(
                session_fingerprint(session_id),
                Closed::Ended,
            )));
            out.push(ServerFrame::SessionEnded(wire::SessionEnded {
                session_id: session_id.to_string(),
                denied: 0,
            }));
        } else {
            self.end_subtree(session_id, out, &mut changes);
        }
        // A failed save is logged; the sessions are gone from memory either way.
        let _ = self.persist(&changes);
    }

    /// End a running session and its descendants, deepest first, and close
    /// them; `changes` gets what the state directory must forget and keep.
    fn end_subtree(
        &mut self,
        session_id: &str,
        out: &mut Vec<ServerFrame>,
        changes: &mut Vec<Change>,
    ) {
        let parent = self
            .sessions
            .get(session_id)
            .and_then(|session| session.parent.clone());
        let parent_stored = parent.as_deref().is_some_and(|id| self.is_stored_id(id));
        let subtree = self.subtree(session_id);
        // Which of them the state directory keeps, before any is unlinked
        // (an implicit parent is kept for its children).
        let stored: HashSet<String> = subtree
            .iter()
            .filter(|id| self.is_stored_id(id))
            .cloned()
            .collect();
        for ended in subtree.into_iter().rev() {
            let ids = self.pending_of(&ended);
            let denied = ids.len() as u64;
            let reason = if ended == session_id {
                "the session ended before the question was answered".to_string()
            } else {
                format!("the parent session `{session_id}` ended before the question was answered")
            };
            for id in ids {
                self.end_ask(&id, wire::Source::Shutdown, reason.clone(), out);
            }
            if stored.contains(&ended) {
                changes.push(Change::RemoveSession(ended.clone()));
            }
            self.remove_session(&ended);
            self.close(&ended, Closed::Ended);
            changes.push(Change::Closed(stored_closed(
                session_fingerprint(&ended),
                Closed::Ended,
            )));
            out.push(ServerFrame::SessionEnded(wire::SessionEnded {
                session_id: ended,
                denied,
            }));
        }
        // An implicit parent left with nothing to hold is forgotten, and one
        // stored only for its children is no longer kept.
        if let Some(parent) = parent {
            self.forget_idle(&parent);
            if parent_stored && !self.is_stored_id(&parent) {
                changes.push(self.stored_change(&parent));
            }
        }
    }

    /// Judge under `policy` from now on (SIGHUP reloaded it) and decide every
    /// pending call whose answer under it is no longer "ask", as a mode
    /// change does (`permission_resolved`, then the decision); the others
    /// keep their question. Sessions keep the mode they are in; a new
    /// default mode applies to sessions that appear after the reload.
    pub fn replace_policy(
        &mut self,
        policy: Arc<Policy>,
        ask_timeout_ms: u64,
        out: &mut Vec<ServerFrame>,
    ) {
        self.policy = policy;
        self.config.ask_timeout_ms = ask_timeout_ms;
        // Sessions in the order of their oldest pending call.
        let mut oldest: HashMap<&str, u64> = HashMap::new();
        for pending in self.pending.values() {
            let seq = oldest
                .entry(pending.session_id.as_str())
                .or_insert(u64::MAX);
            *seq = (*seq).min(pending.seq);
        }
        let mut sessions: Vec<(u64, String)> = oldest
            .into_iter()
            .map(|(id, seq)| (seq, id.to_string()))
            .collect();
        sessions.sort();
        for (_, session_id) in sessions {
            self.revisit_session(&session_id, "the policy was reloaded", None, out);
        }
    }
}

fn new_session(mode: Mode) -> Session {
    Session {
        mode,
        parent: None,
        rules: None,
        scope: Scope::default(),
        explicit: false,
        started: false,
        grants: Grants::default(),
        last_call: None,
        live: HashMap::new(),
        children: BTreeSet::new(),
    }
}

/// The repeat counts (tool and input hash, count) of forgotten idle
/// sessions by the fingerprint of their id; beyond [`IDLE_REPEATS_KEPT`] the
/// longest forgotten is dropped, and that session's next call counts from 1.
#[derive(Default)]
struct RepeatMemory {
    /// Fingerprint → (last call, when it was put).
    counts: HashMap<u64, ((u64, u32), u64)>,
    /// (when, fingerprint), oldest first; entries whose time no longer
    /// matches `counts` are stale.
    order: VecDeque<(u64, u64)>,
    clock: u64,
}

impl RepeatMemory {
    fn put(&mut self, fingerprint: u64, last_call: (u64, u32)) {
        self.clock += 1;
        self.counts.insert(fingerprint, (last_call, self.clock));
        self.order.push_back((self.clock, fingerprint));
        while self.counts.len() > IDLE_REPEATS_KEPT {
            let Some((when, oldest)) = self.order.pop_front() else {
                break;
            };
            if self
                .counts
                .get(&oldest)
                .is_some_and(|(_, put)| *put == when)
            {
                self.counts.remove(&oldest);
            }
        }
        if self.order.len() > 2 * IDLE_REPEATS_KEPT {
            let counts = &self.counts;
            self.order
                .retain(|(when, fp)| counts.get(fp).is_some_and(|(_, put)| put == when));
        }
    }

    fn take(&mut self, fingerprint: u64) -> Option<(u64, u32)> {
        self.counts
            .remove(&fingerprint)
            .map(|(last_call, _)| last_call)
    }
}

/// The fingerprints of closed sessions: one set per reason, 8 bytes (and
/// the hash table's overhead) per session.
#[derive(Default)]
struct ClosedSet {
    ended: HashSet<u64>,
    refused: HashSet<u64>,
}

impl ClosedSet {
    fn insert(&mut self, fingerprint: u64, why: Closed) {
        let (into, from) = match why {
            Closed::Ended => (&mut self.ended, &mut self.refused),
            Closed::Refused => (&mut self.refused, &mut self.ended),
        };
        from.remove(&fingerprint);
        into.insert(fingerprint);
    }

    fn get(&self, fingerprint: u64) -> Option<Closed> {
        if self.refused.contains(&fingerprint) {
            Some(Closed::Refused)
        } else if self.ended.contains(&fingerprint) {
            Some(Closed::Ended)
        } else {
            None
        }
    }

    fn remove(&mut self, fingerprint: u64) {
        self.ended.remove(&fingerprint);
        self.refused.remove(&fingerprint);
    }

    fn iter(&self) -> impl Iterator<Item = (u64, Closed)> + '_ {
        let ended = self.ended.iter().map(|fp| (*fp, Closed::Ended));
        ended.chain(self.refused.iter().map(|fp| (*fp, Closed::Refused)))
    }
}

/// Why a session may not run calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    /// It ended (`session_end`, or an ancestor's).
    Ended,
    /// Its `session_start` was refused.
    Refused,
}

impl Closed {
    /// As stored (`StoredClosed::why`).
    fn as_str(self) -> &'static str {
        match self {
            Closed::Ended => "ended",
            Closed::Refused => "refused",
        }
    }

    fn text(self, session_id: &str) -> String {
        match self {
            Closed::Ended => format!("the session `{session_id}` has ended"),
            Closed::Refused => format!("the session_start for `{session_id}` was refused"),
        }
    }
}

/// The stricter of a mode and an optional bound.
fn stricter(mode: Mode, bound: Option<Mode>) -> Mode {
    match bound {
        Some(bound) if bound.strictness() > mode.strictness() => bound,
        _ => mode,
    }
}

/// A mode name or alias; an unknown one gets an `invalid_mode` error.
fn parse_mode(name: &str, number: u64, out: &mut Vec<ServerFrame>) -> Option<Mode> {
    match name.parse::<Mode>() {
        Ok(mode) => Some(mode),
        Err(err) => {
            out.push(error(
                ErrorCode::InvalidMode,
                err.to_string(),
                None,
                Some(number),
            ));
            None
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
            ClientFrame::RevokeGrant(_) | ClientFrame::Shutdown(_) => (None, None, None),
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
