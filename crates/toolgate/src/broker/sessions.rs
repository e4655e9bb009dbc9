//! Sessions: the table and its parent/children links, effective modes,
//! `session_start` / `session_end` / `set_mode`, closed-session
//! fingerprints and the repeat counts of forgotten idle sessions.
//! Invariants: parent links never form a cycle and no chain is deeper than
//! [`MAX_DEPTH`]; a closed id runs no calls until a start for it succeeds.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use toolgate_policy::{Grants, Mode, Scope, ScopeLayer, ScopeRules};
use toolgate_protocol as wire;
use toolgate_protocol::{ErrorCode, ServerFrame};

use super::{error, Broker, OnAsk};
use crate::convert;
use crate::state::{session_fingerprint, Change, StoredClosed};

/// How many ancestors a session may have: a `session_start` that would make
/// a chain deeper is refused (and shuts the session, like every refused start).
pub const MAX_DEPTH: usize = 64;

/// How many forgotten idle sessions keep their repeat count (doom loop).
const IDLE_REPEATS_KEPT: usize = 1 << 16;

pub(super) struct Session {
    /// The mode the session itself is in. Its effective mode is the strictest
    /// of this and every ancestor's (see [`Broker::effective_mode`]).
    pub(super) mode: Mode,
    /// The session that started it.
    pub(super) parent: Option<String>,
    /// The narrowing the session itself asked for, as written.
    pub(super) rules: Option<ScopeRules>,
    /// Its own narrowing after every ancestor's.
    pub(super) scope: Scope,
    /// Started by `session_start` or given a mode: kept in the state
    /// directory. A session that is not, and has no grants, pending calls or
    /// children, is forgotten once its call is decided (see [`Broker::forget_idle`]).
    pub(super) explicit: bool,
    /// Started by `session_start` (or restored with a parent or a scope):
    /// a second start is refused.
    pub(super) started: bool,
    pub(super) grants: Grants,
    /// Hash of the last call (tool and input) and how many times in a row it came.
    pub(super) last_call: Option<(u64, u32)>,
    /// callID of every pending call → its permission id.
    pub(super) live: HashMap<String, String>,
    /// The sessions it started (whose `parent` it is), in id order.
    pub(super) children: BTreeSet<String>,
}

impl Broker {
    /// Whether `session_id` was started (by `session_start`, or restored
    /// from the state directory with a parent or a scope) and not ended
    /// since: a second start would be refused. `toolgate hook` asks before
    /// it starts a sub-agent's child session.
    pub fn is_started(&self, session_id: &str) -> bool {
        self.sessions
            .get(session_id)
            .is_some_and(|session| session.started)
    }

    /// Whether `session_id` was given a mode or started (it then keeps the
    /// mode it was given, not the policy's default).
    pub fn has_own_mode(&self, session_id: &str) -> bool {
        self.sessions
            .get(session_id)
            .is_some_and(|session| session.explicit)
    }

    /// The scope of a session (none when there is no such session).
    pub(super) fn scope_of(&self, session_id: Option<&str>) -> Scope {
        session_id
            .and_then(|id| self.sessions.get(id))
            .map(|session| session.scope.clone())
            .unwrap_or_default()
    }

    /// The model-facing reminder for a session in `mode`: the mode table,
    /// the session's scope, and whether anyone can be asked.
    pub(super) fn reminder(&self, session_id: &str, mode: Mode) -> String {
        let scope = match self.sessions.get(session_id) {
            Some(session) => &session.scope,
            None => &Scope::NONE,
        };
        let granted = self.kind_grants(session_id, mode);
        let build = || {
            toolgate_policy::reminder_granted(
                &self.policy,
                mode,
                scope,
                self.config.on_ask == OnAsk::Deny,
                &granted,
            )
        };
        if scope.is_none() && granted.is_empty() {
            // Nothing of the session's own: the mode's reminder under this policy.
            let index = Mode::ALL.iter().position(|m| *m == mode);
            if let Some(cell) = index.and_then(|index| self.reminders.get(index)) {
                return cell.get_or_init(build).clone();
            }
        }
        build()
    }

    /// Remember that a session may not run calls (for good: only the
    /// fingerprint of its id is kept).
    fn close(&mut self, session_id: &str, why: Closed) {
        self.closed.insert(session_fingerprint(session_id), why);
    }

    /// Why a session may not run calls, if it was closed.
    pub(super) fn closed_why(&self, session_id: &str) -> Option<Closed> {
        if self.closed.is_empty() {
            return None;
        }
        self.closed.get(session_fingerprint(session_id))
    }

    /// A session entry, created in the default mode (with the repeat count it
    /// had when it was forgotten) when there is none.
    pub(super) fn session_entry(&mut self, session_id: &str) -> &mut Session {
        let default_mode = self.policy.default_mode;
        if !self.sessions.contains_key(session_id) {
            // The session forgotten last comes back with its own key and count
            // (an agent's one session, forgotten after each of its calls).
            let (key, last_call) = match self.parked.take() {
                Some((key, last_call)) if key == session_id => (key, last_call),
                other => {
                    self.parked = other;
                    let last_call = self.idle_repeats.take(session_fingerprint(session_id));
                    (session_id.to_string(), last_call)
                }
            };
            let mut session = new_session(default_mode);
            session.last_call = last_call;
            return self.sessions.entry(key).or_insert(session);
        }
        self.sessions
            .entry(session_id.to_string())
            .or_insert_with(|| new_session(default_mode))
    }

    /// Forget a session that holds nothing an answer depends on: never
    /// started nor given a mode, no grants, no pending calls, no children.
    /// Such a session answers exactly like one never seen, but for its
    /// repeat count, which is kept in a bounded memory.
    pub(super) fn forget_idle(&mut self, session_id: &str) {
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
        if let Some((key, session)) = self.sessions.remove_entry(session_id) {
            // Parked until another session is forgotten: its count then
            // joins the others' (see `session_entry`).
            if let Some((parked, Some(last_call))) = self.parked.replace((key, session.last_call)) {
                self.idle_repeats
                    .put(session_fingerprint(&parked), last_call);
            }
        }
    }

    /// Remove a session's entry and unlink it from its parent.
    pub(super) fn remove_session(&mut self, session_id: &str) -> Option<Session> {
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
    pub(super) fn effective_mode(&self, session_id: &str) -> Mode {
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

    pub(super) fn set_mode(&mut self, set: wire::SetMode, number: u64, out: &mut Vec<ServerFrame>) {
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
    pub(super) fn change_mode(&mut self, session_id: &str, mode: Mode, out: &mut Vec<ServerFrame>) {
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
        // On disk before it is reported; should that fail, the mode applies
        // in memory all the same and its frames say so.
        let saved = self
            .persist_now(&changes, || {
                format!("the mode {mode} of session `{session_id}`")
            })
            .err();
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
                not_saved: saved.clone(),
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
    pub(super) fn parent_mode(&self, session_id: &str) -> Option<Mode> {
        let parent = self.sessions.get(session_id)?.parent.as_deref()?;
        Some(self.effective_mode(parent))
    }

    pub(super) fn session_start(
        &mut self,
        start: wire::SessionStart,
        number: u64,
        out: &mut Vec<ServerFrame>,
    ) {
        let id = start.session_id.clone();
        let from = out.len();
        let requested = match start.mode.as_deref() {
            None => None,
            Some(name) => match parse_mode(name, number, out) {
                Some(mode) => Some(mode),
                None => {
                    self.shut_refused(&id, from, out);
                    return;
                }
            },
        };
        // Every refused start shuts the session, whether or not it ran before.
        let refuse = |broker: &mut Broker, message: String, out: &mut Vec<ServerFrame>| {
            let from = out.len();
            out.push(error(ErrorCode::InvalidFrame, message, None, Some(number)));
            broker.shut_refused(&id, from, out);
        };
        if let Some(existing) = self.sessions.get(&id) {
            if existing.started && start.join && existing.parent == start.parent_id {
                // Joined as it is: its scope and mode stay.
                let scope = self.scope_of(Some(&id));
                let effective_scope = convert::effective_scope(
                    scope.effective(|tool| self.policy.registry.lookup(tool).permission.clone()),
                    &self.policy.always_available,
                );
                out.push(ServerFrame::SessionStarted(wire::SessionStarted {
                    session_id: id.clone(),
                    parent_id: start.parent_id,
                    mode: self.effective_mode(&id).as_str().to_string(),
                    scope: effective_scope,
                    not_saved: None,
                }));
                return;
            }
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
        // Synced with the batch, before its frames are written; a failed
        // write is said in the frame, and the session runs in memory either way.
        let saved = self.persist(&changes, || format!("the start of session `{id}`"));
        out.push(ServerFrame::SessionStarted(wire::SessionStarted {
            session_id: id.clone(),
            parent_id: start.parent_id,
            mode: mode.as_str().to_string(),
            scope: effective_scope,
            not_saved: saved.err(),
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
    /// refused until a start for it succeeds. On disk before it is reported:
    /// should that fail, the frames from `from` on (the refusal's `error`
    /// and each `session_ended`) say so.
    pub(super) fn shut_refused(
        &mut self,
        session_id: &str,
        from: usize,
        out: &mut Vec<ServerFrame>,
    ) {
        let mut changes = Vec::new();
        if self.sessions.contains_key(session_id) {
            self.end_subtree(session_id, out, &mut changes);
        }
        self.close(session_id, Closed::Refused);
        changes.push(Change::Closed(
            Closed::Refused.stored(session_fingerprint(session_id)),
        ));
        // The session is shut in memory either way.
        let saved = self.persist_now(&changes, || {
            format!("the refusal of session `{session_id}`")
        });
        if let Err(err) = saved {
            let from = from.min(out.len());
            not_saved(&mut out[from..], &err);
        }
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
    pub(super) fn session_end(
        &mut self,
        session_id: &str,
        number: u64,
        out: &mut Vec<ServerFrame>,
    ) {
        let from = out.len();
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
            changes.push(Change::Closed(
                Closed::Ended.stored(session_fingerprint(session_id)),
            ));
            out.push(ServerFrame::SessionEnded(wire::SessionEnded {
                session_id: session_id.to_string(),
                denied: 0,
                not_saved: None,
            }));
        } else {
            self.end_subtree(session_id, out, &mut changes);
        }
        // On disk before it is reported; should that fail, the sessions are
        // gone from memory all the same and their frames say so.
        let saved = self.persist_now(&changes, || format!("the end of session `{session_id}`"));
        if let Err(err) = saved {
            not_saved(&mut out[from..], &err);
        }
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
            changes.push(Change::Closed(
                Closed::Ended.stored(session_fingerprint(&ended)),
            ));
            out.push(ServerFrame::SessionEnded(wire::SessionEnded {
                session_id: ended,
                denied,
                not_saved: None,
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
}

pub(super) fn new_session(mode: Mode) -> Session {
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
pub(super) struct RepeatMemory {
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
pub(super) struct ClosedSet {
    ended: HashSet<u64>,
    refused: HashSet<u64>,
}

impl ClosedSet {
    pub(super) fn insert(&mut self, fingerprint: u64, why: Closed) {
        let (into, from) = match why {
            Closed::Ended => (&mut self.ended, &mut self.refused),
            Closed::Refused => (&mut self.refused, &mut self.ended),
        };
        from.remove(&fingerprint);
        into.insert(fingerprint);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ended.is_empty() && self.refused.is_empty()
    }

    pub(super) fn get(&self, fingerprint: u64) -> Option<Closed> {
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

    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, Closed)> + '_ {
        let ended = self.ended.iter().map(|fp| (*fp, Closed::Ended));
        ended.chain(self.refused.iter().map(|fp| (*fp, Closed::Refused)))
    }
}

/// Why a session may not run calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Closed {
    /// It ended (`session_end`, or an ancestor's).
    Ended,
    /// Its `session_start` was refused.
    Refused,
}

impl Closed {
    /// This closing as the state directory keeps it, for the session
    /// whose fingerprint is `fingerprint`.
    pub(super) fn stored(self, fingerprint: u64) -> StoredClosed {
        StoredClosed {
            fingerprint: format!("{fingerprint:016x}"),
            why: self.as_str().to_string(),
        }
    }

    /// As stored (`StoredClosed::why`).
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Closed::Ended => "ended",
            Closed::Refused => "refused",
        }
    }

    pub(super) fn text(self, session_id: &str) -> String {
        match self {
            Closed::Ended => format!("the session `{session_id}` has ended"),
            Closed::Refused => format!("the session_start for `{session_id}` was refused"),
        }
    }
}

/// The stricter of a mode and an optional bound.
pub(super) fn stricter(mode: Mode, bound: Option<Mode>) -> Mode {
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

/// Mark the frames that report a change (in `frames`) as not saved, and why.
pub(super) fn not_saved(frames: &mut [ServerFrame], err: &str) {
    for frame in frames {
        let field = match frame {
            ServerFrame::SessionEnded(frame) => &mut frame.not_saved,
            ServerFrame::SessionStarted(frame) => &mut frame.not_saved,
            ServerFrame::ModeChanged(frame) => &mut frame.not_saved,
            ServerFrame::Grants(frame) => &mut frame.not_saved,
            ServerFrame::Error(frame) => &mut frame.not_saved,
            _ => continue,
        };
        field.get_or_insert_with(|| err.to_string());
    }
}
