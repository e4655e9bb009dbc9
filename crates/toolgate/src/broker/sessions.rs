//! Sessions: the part that holds them ([`Sessions`]: the table and its
//! parent/children links, effective modes, closed-session fingerprints,
//! the repeat counts of forgotten idle sessions, and what the state
//! directory keeps of them), and what the broker does with them:
//! `session_start` / `session_end` / `set_mode`.
//! Invariants: parent links never form a cycle and no chain is deeper than
//! [`MAX_DEPTH`]; a closed id runs no calls until a start for it succeeds.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use toolgate_policy::{Grants, Mode, Policy, Scope, ScopeLayer, ScopeRules};
use toolgate_protocol as wire;
use toolgate_protocol::{ErrorCode, ServerFrame};

use super::grants::{stored_grant, stored_spec};
use super::outbox::Outbox;
use super::{Broker, OnAsk};
use crate::convert;
use crate::store::{session_fingerprint, Change, StoredClosed, StoredJoined, StoredSession};

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
    /// Its own narrowing after every ancestor's (and, joined, the
    /// narrowings in `joined`).
    pub(super) scope: Scope,
    /// Joined under its parent without a scope of its own: the narrowings
    /// of the parent's sub-tasks it met when it joined (by sub-task), kept
    /// with it so that a restart or another broker gives it the same scope,
    /// even once those sub-tasks ended.
    pub(super) joined: Vec<(String, ScopeRules)>,
    /// Started by `session_start` or given a mode: kept in the state
    /// directory. A session that is not, and has no grants, pending calls or
    /// children, is forgotten once its call is decided (see [`Sessions::forget_idle`]).
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

/// The session tree: every session the broker holds, the closed ones (by
/// fingerprint, for good) and the repeat counts of forgotten idle sessions.
#[derive(Default)]
pub(super) struct Sessions {
    /// Looked up several times per call: a fast hasher (foldhash, seeded
    /// per process).
    table: HashMap<String, Session, foldhash::fast::RandomState>,
    /// Sessions that ended or whose `session_start` was refused, and why, by
    /// the fingerprint of their id (never forgotten): their calls are denied
    /// rather than run in a fresh unscoped session.
    closed: ClosedSet,
    /// The repeat counts of forgotten idle sessions.
    idle_repeats: RepeatMemory,
    /// The idle session forgotten last: its id and repeat count, not yet
    /// in `idle_repeats`.
    parked: Option<(String, Option<(u64, u32)>)>,
}

impl Sessions {
    pub(super) fn get(&self, session_id: &str) -> Option<&Session> {
        self.table.get(session_id)
    }

    pub(super) fn get_mut(&mut self, session_id: &str) -> Option<&mut Session> {
        self.table.get_mut(session_id)
    }

    pub(super) fn contains_key(&self, session_id: &str) -> bool {
        self.table.contains_key(session_id)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&String, &Session)> {
        self.table.iter()
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut Session)> {
        self.table.iter_mut()
    }

    /// Whether `session_id` was started and not ended since.
    pub(super) fn is_started(&self, session_id: &str) -> bool {
        self.get(session_id).is_some_and(|session| session.started)
    }

    /// Whether `session_id` was given a mode or started.
    pub(super) fn has_own_mode(&self, session_id: &str) -> bool {
        self.get(session_id).is_some_and(|session| session.explicit)
    }

    /// The scope of a session (none when there is no such session).
    pub(super) fn scope_of(&self, session_id: Option<&str>) -> Scope {
        session_id
            .and_then(|id| self.get(id))
            .map(|session| session.scope.clone())
            .unwrap_or_default()
    }

    /// The permission id of a pending call.
    pub(super) fn live_permission(&self, session_id: &str, call_id: &str) -> Option<&str> {
        self.get(session_id)?.live.get(call_id).map(String::as_str)
    }

    /// Remember that a session may not run calls (for good: only the
    /// fingerprint of its id is kept).
    pub(super) fn close(&mut self, session_id: &str, why: Closed) {
        self.closed.insert(session_fingerprint(session_id), why);
    }

    /// A session may run calls again (a start for it succeeded).
    pub(super) fn reopen(&mut self, session_id: &str) {
        self.closed.remove(session_fingerprint(session_id));
    }

    /// Why a session may not run calls, if it was closed.
    pub(super) fn closed_why(&self, session_id: &str) -> Option<Closed> {
        if self.closed.is_empty() {
            return None;
        }
        self.closed.get(session_fingerprint(session_id))
    }

    /// A session entry, created in `default_mode` (with the repeat count it
    /// had when it was forgotten) when there is none.
    pub(super) fn entry(&mut self, session_id: &str, default_mode: Mode) -> &mut Session {
        if !self.table.contains_key(session_id) {
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
            return self.table.entry(key).or_insert(session);
        }
        self.table
            .entry(session_id.to_string())
            .or_insert_with(|| new_session(default_mode))
    }

    /// Forget a session that holds nothing an answer depends on: never
    /// started nor given a mode, no grants, no pending calls, no children.
    /// Such a session answers exactly like one never seen, but for its
    /// repeat count, which is kept in a bounded memory.
    pub(super) fn forget_idle(&mut self, session_id: &str) {
        let idle = self.get(session_id).is_some_and(|session| {
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
        if let Some((key, session)) = self.table.remove_entry(session_id) {
            // Parked until another session is forgotten: its count then
            // joins the others' (see `entry`).
            if let Some((parked, Some(last_call))) = self.parked.replace((key, session.last_call)) {
                self.idle_repeats
                    .put(session_fingerprint(&parked), last_call);
            }
        }
    }

    /// Remove a session's entry and unlink it from its parent.
    pub(super) fn remove(&mut self, session_id: &str) -> Option<Session> {
        let session = self.table.remove(session_id)?;
        if let Some(parent) = &session.parent {
            if let Some(parent) = self.table.get_mut(parent) {
                parent.children.remove(session_id);
            }
        }
        Some(session)
    }

    /// The mode a session's calls are judged in: the strictest of its own and
    /// every ancestor's (`default_mode` for a session it does not hold).
    pub(super) fn effective_mode(&self, session_id: &str, default_mode: Mode) -> Mode {
        let Some(mut session) = self.get(session_id) else {
            return default_mode;
        };
        let mut mode = session.mode;
        // The hop limit only matters for a hand-edited state file with a cycle.
        let mut hops = self.table.len();
        while let Some(parent) = session.parent.as_ref().and_then(|p| self.get(p)) {
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

    /// The effective mode of a session's parent, if it has one.
    pub(super) fn parent_mode(&self, session_id: &str, default_mode: Mode) -> Option<Mode> {
        let parent = self.get(session_id)?.parent.as_deref()?;
        Some(self.effective_mode(parent, default_mode))
    }

    /// A session and its descendants, parents before children (breadth
    /// first, each one's children in id order).
    pub(super) fn subtree(&self, session_id: &str) -> Vec<String> {
        let mut ids = vec![session_id.to_string()];
        let mut next = 0;
        while next < ids.len() {
            if let Some(session) = self.get(&ids[next]) {
                ids.extend(session.children.iter().cloned());
            }
            next += 1;
        }
        ids
    }

    /// How many generations a session's subtree holds below it (0 for a leaf).
    pub(super) fn height(&self, session_id: &str) -> usize {
        let mut level: Vec<&str> = vec![session_id];
        let mut height = 0;
        loop {
            let below: Vec<&str> = level
                .iter()
                .filter_map(|id| self.get(id))
                .flat_map(|session| session.children.iter().map(String::as_str))
                .collect();
            if below.is_empty() || height > self.table.len() {
                return height;
            }
            height += 1;
            level = below;
        }
    }

    /// Every session held, parents before children: the roots (sessions
    /// with no parent held) in id order, each followed by its subtree.
    pub(super) fn in_tree_order(&self) -> Vec<String> {
        let mut roots: Vec<&String> = self
            .table
            .iter()
            .filter(|(_, session)| {
                session
                    .parent
                    .as_deref()
                    .is_none_or(|parent| !self.table.contains_key(parent))
            })
            .map(|(id, _)| id)
            .collect();
        roots.sort();
        roots
            .into_iter()
            .flat_map(|root| self.subtree(root))
            .collect()
    }

    /// A session's ancestors, its parent first (bounded, in case of a bug:
    /// the parent links never form a cycle).
    pub(super) fn ancestors(&self, session_id: &str) -> Vec<String> {
        let mut chain: Vec<String> = Vec::new();
        let mut current = self.get(session_id).and_then(|s| s.parent.as_deref());
        while let Some(parent) = current {
            if chain.len() > self.table.len() {
                break;
            }
            chain.push(parent.to_string());
            current = self.get(parent).and_then(|s| s.parent.as_deref());
        }
        chain
    }

    /// Whether the state directory keeps the session `session_id` now:
    /// started or given a mode, holding grants, or the parent of a kept
    /// session (an implicit parent).
    pub(super) fn is_stored(&self, session_id: &str) -> bool {
        self.get(session_id).is_some_and(is_stored)
    }

    /// The change that stores a session as it is now: the whole session
    /// when the state directory keeps it, else its removal.
    pub(super) fn stored_change(&self, session_id: &str) -> Change {
        match self.get(session_id) {
            Some(session) if is_stored(session) => {
                Change::Session(stored_session(session_id, session))
            }
            _ => Change::RemoveSession(session_id.to_string()),
        }
    }

    /// Every session the state directory keeps, in id order.
    pub(super) fn stored(&self) -> Vec<StoredSession> {
        let mut sessions: Vec<StoredSession> = self
            .table
            .iter()
            .filter(|(_, session)| is_stored(session))
            .map(|(id, session)| stored_session(id, session))
            .collect();
        sessions.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        sessions
    }

    /// Every closed session as stored, by fingerprint.
    pub(super) fn stored_closed(&self) -> Vec<StoredClosed> {
        let mut closed: Vec<(u64, Closed)> = self.closed.iter().collect();
        closed.sort_unstable_by_key(|(fp, _)| *fp);
        closed
            .into_iter()
            .map(|(fingerprint, why)| why.stored(fingerprint))
            .collect()
    }

    /// Take the sessions and closed ids of a snapshot (judged by `policy`).
    /// Parts that cannot be used are dropped, or kept more strictly than
    /// written, with a warning each.
    pub(super) fn restore(
        &mut self,
        policy: &Policy,
        sessions: &[StoredSession],
        closed: &[StoredClosed],
        warnings: &mut Vec<String>,
    ) -> bool {
        // Parents before children, whatever the order in the file.
        let mut remaining: Vec<&StoredSession> = sessions.iter().collect();
        while !remaining.is_empty() {
            let before = remaining.len();
            remaining.retain(|stored| {
                let ready = stored
                    .parent_id
                    .as_ref()
                    .is_none_or(|parent| self.contains_key(parent));
                if ready {
                    self.restore_session(policy, stored, warnings);
                }
                !ready
            });
            if remaining.len() == before {
                // Parents that are not in the file (or a cycle): each of these
                // keeps its own narrowing, in the strictest mode.
                for stored in remaining.drain(..) {
                    warnings.push(format!(
                        "the stored session `{}` names a parent `{}` that is not stored; it keeps only its own scope and starts in readonly mode",
                        stored.session_id,
                        stored.parent_id.as_deref().unwrap_or_default()
                    ));
                    let orphan = StoredSession {
                        parent_id: None,
                        mode: Mode::ReadOnly.as_str().to_string(),
                        ..stored.clone()
                    };
                    self.restore_session(policy, &orphan, warnings);
                }
            }
        }
        for stored in closed {
            let fingerprint = u64::from_str_radix(&stored.fingerprint, 16)
                .ok()
                .filter(|_| stored.fingerprint.len() == 16);
            let Some(fingerprint) = fingerprint else {
                warnings.push(format!(
                    "the stored closed session `{}` has an unusable fingerprint and was dropped",
                    stored.fingerprint
                ));
                continue;
            };
            let why = match stored.why.as_str() {
                "refused" => Closed::Refused,
                "ended" => Closed::Ended,
                other => {
                    warnings.push(format!(
                        "the stored closed session `{}` has an unknown reason `{other}`; it is kept as ended",
                        stored.fingerprint
                    ));
                    Closed::Ended
                }
            };
            self.closed.insert(fingerprint, why);
        }
        // A session both stored and closed (a hand-edited file) stays closed.
        let shut: Vec<String> = self
            .table
            .keys()
            .filter(|id| self.closed.get(session_fingerprint(id)).is_some())
            .cloned()
            .collect();
        let repaired = !shut.is_empty();
        for id in shut {
            self.remove(&id);
        }
        repaired
    }

    pub(super) fn restore_session(
        &mut self,
        policy: &Policy,
        stored: &StoredSession,
        warnings: &mut Vec<String>,
    ) {
        let mode = stored.mode.parse::<Mode>().unwrap_or_else(|err| {
            warnings.push(format!(
                "the stored session `{}` has an unusable mode ({err}); it starts in readonly mode",
                stored.session_id
            ));
            Mode::ReadOnly
        });
        let parent_scope = self.scope_of(stored.parent_id.as_deref());
        let rules = stored.permissions.clone().map(convert::scope_rules);
        let joined: Vec<(String, ScopeRules)> = stored
            .joined
            .iter()
            .map(|met| {
                (
                    met.session_id.clone(),
                    convert::scope_rules(met.permissions.clone()),
                )
            })
            .collect();
        let scope = match &rules {
            None => parent_scope,
            Some(rules) => match policy.scope_layer(&stored.session_id, rules.clone()) {
                Ok(layer) => parent_scope.with(layer),
                Err(err) => {
                    warnings.push(format!(
                        "the stored session `{}` has an unusable scope ({err}); it may use only the always-available tools",
                        stored.session_id
                    ));
                    parent_scope.with(ScopeLayer::deny_all(&stored.session_id))
                }
            },
        };
        let scope = with_joined(policy, scope, &stored.session_id, &joined, |err| {
            warnings.push(format!(
                "the stored session `{}` met an unusable scope when it joined ({err}); it may use only the always-available tools",
                stored.session_id
            ));
        });
        let mut session = new_session(mode);
        session.parent = stored.parent_id.clone();
        session.rules = rules;
        session.scope = scope;
        session.joined = joined;
        session.explicit = !stored.implicit;
        // Files of earlier builds do not say; only a start sets a parent or a scope.
        session.started = stored.started || session.parent.is_some() || session.rules.is_some();
        for grant in &stored.grants {
            match stored_spec(grant) {
                Some(spec) => {
                    session.grants.add(grant.grant_id.clone(), &spec);
                }
                None => warnings.push(format!(
                    "the stored grant `{}` of session `{}` is unusable and was dropped",
                    grant.grant_id, stored.session_id
                )),
            }
        }
        if let Some(parent) = session.parent.clone() {
            if let Some(parent) = self.table.get_mut(&parent) {
                parent.children.insert(stored.session_id.clone());
            }
        }
        self.table.insert(stored.session_id.clone(), session);
    }
}

impl Broker {
    /// Whether `session_id` was started (by `session_start`, or restored
    /// from the state directory with a parent or a scope) and not ended
    /// since: a second start would be refused. `toolgate hook` asks before
    /// it starts a sub-agent's child session.
    pub fn is_started(&self, session_id: &str) -> bool {
        self.sessions.is_started(session_id)
    }

    /// Whether `session_id` was given a mode or started (it then keeps the
    /// mode it was given, not the policy's default).
    pub fn has_own_mode(&self, session_id: &str) -> bool {
        self.sessions.has_own_mode(session_id)
    }

    /// The mode a session's calls are judged in: the strictest of its own,
    /// every ancestor's and the managed floor (the policy's default for a
    /// session never seen).
    pub(super) fn effective_mode(&self, session_id: &str) -> Mode {
        self.policy.floored(
            self.sessions
                .effective_mode(session_id, self.policy.default_mode),
        )
    }

    /// The model-facing reminder for a session in `mode`: the mode table,
    /// the session's scope and its kind grants, and whether anyone can be
    /// asked.
    pub(super) fn reminder(&self, session_id: &str, mode: Mode) -> String {
        let session = self.sessions.get(session_id);
        let scope = match session {
            Some(session) => &session.scope,
            None => &Scope::NONE,
        };
        let granted = self
            .grants
            .kind_grants(session.map(|session| &session.grants), mode);
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

    pub(super) fn set_mode(&mut self, set: wire::SetMode, ob: &mut Outbox<'_>) {
        let Some(mode) = parse_mode(&set.mode, ob) else {
            return;
        };
        if !self.sessions.contains_key(&set.session_id) {
            if let Some(why) = self.sessions.closed_why(&set.session_id) {
                let why = why.text(&set.session_id);
                ob.error(
                    ErrorCode::UnknownSession,
                    format!("{why}; start it again before changing its mode"),
                );
                return;
            }
        }
        self.change_mode(&set.session_id, mode, ob);
    }

    /// Set a session's own mode. The session and each descendant whose
    /// effective mode changes get `mode_changed` (the session always does) and
    /// have their pending calls judged again.
    pub(super) fn change_mode(&mut self, session_id: &str, mode: Mode, ob: &mut Outbox<'_>) {
        self.sessions.entry(session_id, self.policy.default_mode);
        let affected = self.sessions.subtree(session_id);
        let before: Vec<Mode> = affected.iter().map(|id| self.effective_mode(id)).collect();
        if let Some(session) = self.sessions.get_mut(session_id) {
            session.mode = mode;
            session.explicit = true;
        }
        let left_plan = self.end_plan_grants(&affected, &before);
        let changes: Vec<Change> = std::iter::once(session_id.to_string())
            .chain(left_plan.into_iter().filter(|id| id != session_id))
            .map(|id| self.sessions.stored_change(&id))
            .collect();
        self.share_session(session_id, super::shared::SessionChange::Mode);
        // On disk before it is reported; should that fail, the mode applies
        // in memory all the same and its frames say so.
        let saved = self
            .store
            .persist_now(self.clock.as_ref(), &changes, || {
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
            let granted = self
                .grants
                .kind_grants(self.sessions.get(id).map(|session| &session.grants), now);
            let reminder = reminders
                .entry((now, layers, granted))
                .or_insert_with(|| self.reminder(id, now))
                .clone();
            // The session told to go below the managed floor is told why
            // it did not.
            let reason = match &self.policy.mode_floor {
                Some((floor, origin)) if id == session_id && self.policy.floored(mode) != mode => {
                    Some(format!(
                        "the managed policy ({origin}) keeps every session at {floor} mode or stricter, so {mode} acts as {floor}"
                    ))
                }
                _ => None,
            };
            ob.mode_changed(wire::ModeChanged {
                session_id: id.clone(),
                mode: now.as_str().to_string(),
                previous: previous.as_str().to_string(),
                reason,
                reminder: Some(reminder),
                not_saved: saved.clone(),
            });
            if previous != now {
                self.revisit_session(
                    id,
                    &format!("the session's mode changed to {now}"),
                    None,
                    ob,
                );
            }
        }
    }

    /// A reload replaced `old`, whose managed floor was another: each
    /// session whose effective mode moved with the floor (`before`: each
    /// session's effective mode under `old`, parents first; a session the
    /// broker forgot but a connection still uses is in the default mode) gets
    /// `mode_changed` with a `reason` naming the managed policy, addressed
    /// to the connections that sent calls in it, started it or set its mode
    /// (and to observers), and leaves its plan-mode grants behind if it
    /// left plan mode, as after `set_mode`. Its pending calls are judged
    /// again after this, with every other session's.
    pub(super) fn floor_moved(
        &mut self,
        old: &Policy,
        before: Vec<(String, Mode)>,
        ob: &mut Outbox<'_>,
    ) {
        let moved: Vec<(String, Mode, Mode)> = before
            .into_iter()
            .filter_map(|(id, previous)| {
                let now = self.effective_mode(&id);
                (now != previous).then_some((id, previous, now))
            })
            .collect();
        if moved.is_empty() {
            return;
        }
        let ids: Vec<String> = moved.iter().map(|(id, _, _)| id.clone()).collect();
        let previous: Vec<Mode> = moved.iter().map(|(_, previous, _)| *previous).collect();
        let left_plan = self.end_plan_grants(&ids, &previous);
        let changes: Vec<Change> = left_plan
            .iter()
            .map(|id| self.sessions.stored_change(id))
            .collect();
        // On disk before it is reported; should that fail, the grants are
        // gone from memory all the same and the frames say so.
        let saved = if changes.is_empty() {
            None
        } else {
            self.store
                .persist_now(self.clock.as_ref(), &changes, || {
                    "the end of plan mode's grants when the managed floor moved".to_string()
                })
                .err()
        };
        for (id, previous, now) in moved {
            // The mode the session and its ancestors ask for, unfloored.
            let asked = self.sessions.effective_mode(&id, self.policy.default_mode);
            let reason = match (&self.policy.mode_floor, &old.mode_floor) {
                (Some((floor, origin)), _) if now != asked => format!(
                    "the managed policy ({origin}) keeps every session at {floor} mode or stricter, so {asked} acts as {floor}"
                ),
                (_, Some((floor, origin))) => format!(
                    "the managed policy ({origin}) no longer keeps sessions at {floor} mode or stricter, so the session is back in {asked} mode"
                ),
                // A floor moved, so one of the two holds.
                (_, None) => "the policy was reloaded".to_string(),
            };
            let changed = wire::ModeChanged {
                session_id: id.clone(),
                mode: now.as_str().to_string(),
                previous: previous.as_str().to_string(),
                reason: Some(reason),
                reminder: Some(self.reminder(&id, now)),
                not_saved: saved.clone().filter(|_| left_plan.contains(&id)),
            };
            self.observers
                .note(ob.len(), ServerFrame::ModeChanged(changed.clone()));
            ob.mode_changed_to(&self.conns.heard_in(&id), changed);
        }
    }

    /// The own narrowings of the sessions `parent` started with one (its
    /// sub-tasks' delegated permissions), other than `id`'s, by sub-task.
    fn delegated_rules(&self, parent: Option<&str>, id: &str) -> Vec<(String, ScopeRules)> {
        let Some(parent) = parent.and_then(|parent| self.sessions.get(parent)) else {
            return Vec::new();
        };
        parent
            .children
            .iter()
            .filter(|child| child.as_str() != id)
            .filter_map(|child| {
                let session = self.sessions.get(child).filter(|session| session.started)?;
                Some((child.clone(), session.rules.clone()?))
            })
            .collect()
    }

    pub(super) fn session_start(&mut self, start: wire::SessionStart, ob: &mut Outbox<'_>) {
        let id = start.session_id.clone();
        let from = ob.len();
        let requested = match start.mode.as_deref() {
            None => None,
            Some(name) => match parse_mode(name, ob) {
                Some(mode) => Some(mode),
                None => {
                    self.shut_refused(&id, from, ob);
                    return;
                }
            },
        };
        // Every refused start shuts the session, whether or not it ran before.
        let refuse = |broker: &mut Broker, message: String, ob: &mut Outbox<'_>| {
            let from = ob.len();
            ob.error(ErrorCode::InvalidFrame, message);
            broker.shut_refused(&id, from, ob);
        };
        if let Some(existing) = self.sessions.get(&id) {
            if existing.started && start.join && existing.parent == start.parent_id {
                // Joined as it is: its scope and mode stay.
                let scope = self.sessions.scope_of(Some(&id));
                let effective_scope = convert::effective_scope(
                    scope.effective(|tool| self.policy.registry.lookup(tool).permission.clone()),
                    &self.policy.always_available,
                );
                ob.reply(ServerFrame::SessionStarted(wire::SessionStarted {
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
                    ob,
                );
                return;
            }
        }
        if start.parent_id.as_deref() == Some(id.as_str()) {
            refuse(
                self,
                format!("the session `{id}` cannot be its own parent"),
                ob,
            );
            return;
        }
        if let Some(parent) = &start.parent_id {
            if !self.sessions.contains_key(parent) {
                if let Some(why) = self.sessions.closed_why(parent) {
                    let message = format!(
                        "{}; the session `{id}` was not started under it",
                        why.text(parent)
                    );
                    refuse(self, message, ob);
                    return;
                }
            }
            let ancestors = self.sessions.ancestors(parent);
            if ancestors.contains(&id) {
                let message = format!(
                    "the session `{parent}` descends from `{id}`, so it cannot be its parent"
                );
                refuse(self, message, ob);
                return;
            }
            // The deepest session of the new subtree: `id` or a session it started.
            let depth = ancestors.len() + 1 + self.sessions.height(&id);
            if depth > MAX_DEPTH {
                let message = format!(
                    "starting `{id}` under `{parent}` would give a session {depth} ancestors, more than the limit of {MAX_DEPTH}; the session `{id}` was not started"
                );
                refuse(self, message, ob);
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
                        ob,
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
            .is_some_and(|parent| self.sessions.is_stored(parent));
        // A parent that was never seen is the implicit session a tool call
        // would have created: the default mode and no scope.
        if let Some(parent) = &start.parent_id {
            self.sessions.entry(parent, self.policy.default_mode);
        }
        let parent_mode = start.parent_id.as_deref().map(|p| self.effective_mode(p));
        let parent_scope = self.sessions.scope_of(start.parent_id.as_deref());
        // A session joined under a parent without a scope of its own
        // (a hook's sub-agent, which cannot say which delegation
        // started it) meets the scope of every sub-task the parent
        // started with one: at least the strictest of them. A start
        // without `join` is an orchestrator's, which says what it means.
        // What it met is kept with it (a sub-task started later does not
        // narrow it; one that ends does not widen it).
        let joined = if layer.is_none() && start.join {
            self.delegated_rules(start.parent_id.as_deref(), &id)
        } else {
            Vec::new()
        };
        let scope = match layer {
            Some(layer) => parent_scope.with(layer),
            None => parent_scope,
        };
        // A narrowing that can no longer be built denies every tool.
        let scope = with_joined(&self.policy, scope, &id, &joined, |_| {});
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
        self.sessions.reopen(&id);
        // The modes before the start, to end plan-mode kind grants it ends.
        let subtree_before = self.sessions.subtree(&id);
        let modes_before: Vec<Mode> = subtree_before
            .iter()
            .map(|session| self.effective_mode(session))
            .collect();
        let session = self.sessions.entry(&id, self.policy.default_mode);
        session.mode = own_mode;
        let previous_parent = std::mem::replace(&mut session.parent, start.parent_id.clone());
        session.rules = rules;
        session.scope = scope;
        session.joined = joined;
        session.explicit = true;
        session.started = true;
        let mut changes = Vec::new();
        if let Some(previous) = previous_parent {
            let was_stored = self.sessions.is_stored(&previous);
            if let Some(session) = self.sessions.get_mut(&previous) {
                session.children.remove(&id);
            }
            if was_stored && !self.sessions.is_stored(&previous) {
                changes.push(self.sessions.stored_change(&previous));
            }
        }
        if let Some(parent) = &start.parent_id {
            if let Some(session) = self.sessions.get_mut(parent) {
                session.children.insert(id.clone());
            }
            // An implicit parent is kept from its first child on, before
            // the child that names it.
            if !parent_stored {
                changes.push(self.sessions.stored_change(parent));
            }
        }
        for ended in self.end_plan_grants(&subtree_before, &modes_before) {
            if ended != id {
                changes.push(self.sessions.stored_change(&ended));
            }
        }
        // The whole session: also reopens it if it was closed.
        changes.push(self.sessions.stored_change(&id));
        self.share_session(
            &id,
            super::shared::SessionChange::Start {
                mode_given: requested.is_some(),
            },
        );
        let mode = self.effective_mode(&id);
        // Synced with the batch, before its frames are written; a failed
        // write is said in the frame, and the session runs in memory either way.
        let saved = self.store.persist(self.clock.as_ref(), &changes, || {
            format!("the start of session `{id}`")
        });
        ob.reply(ServerFrame::SessionStarted(wire::SessionStarted {
            session_id: id.clone(),
            parent_id: start.parent_id,
            mode: mode.as_str().to_string(),
            scope: effective_scope,
            not_saved: saved.err(),
        }));
        // Sessions an implicit session already started take on its new scope,
        // and calls already waiting are judged again.
        let subtree = self.sessions.subtree(&id);
        for child in subtree.iter().skip(1) {
            self.rescope_one(child);
        }
        for session in subtree {
            self.revisit_session(&session, "the session was started with a scope", None, ob);
        }
    }

    /// The scope of `session_id` again from its parent's and its own
    /// narrowing (a narrowing that cannot be used denies every tool).
    fn rescope_one(&mut self, session_id: &str) {
        let parent_scope = self.sessions.scope_of(
            self.sessions
                .get(session_id)
                .and_then(|session| session.parent.as_deref()),
        );
        if let Some(session) = self.sessions.get_mut(session_id) {
            let scope = match &session.rules {
                Some(rules) => match self.policy.scope_layer(session_id, rules.clone()) {
                    Ok(layer) => parent_scope.with(layer),
                    Err(_) => parent_scope.with(ScopeLayer::deny_all(session_id)),
                },
                None => parent_scope,
            };
            session.scope = with_joined(&self.policy, scope, session_id, &session.joined, |_| {});
        }
    }

    /// The scopes of `session_id` and every session under it again, as a
    /// restore computes them (a session read from a fleet's store changed).
    pub(super) fn rescope(&mut self, session_id: &str) {
        for session in self.sessions.subtree(session_id) {
            self.rescope_one(&session);
        }
    }

    /// After a refused `session_start`: a running session ends with its
    /// descendants (as `session_end` ends them), and the id is closed as
    /// refused until a start for it succeeds. On disk before it is reported:
    /// should that fail, the frames from `from` on (the refusal's `error`
    /// and each `session_ended`) say so.
    pub(super) fn shut_refused(&mut self, session_id: &str, from: usize, ob: &mut Outbox<'_>) {
        let mut changes = Vec::new();
        if self.sessions.contains_key(session_id) {
            self.end_subtree(session_id, ob, &mut changes);
        }
        self.sessions.close(session_id, Closed::Refused);
        self.share_close(session_id, Closed::Refused);
        changes.push(Change::Closed(
            Closed::Refused.stored(session_fingerprint(session_id)),
        ));
        // The session is shut in memory either way.
        let saved = self.store.persist_now(self.clock.as_ref(), &changes, || {
            format!("the refusal of session `{session_id}`")
        });
        if let Err(err) = saved {
            ob.not_saved(from, &err);
        }
    }

    /// End a session and, first, every session it started: their pending
    /// calls are denied and each gets `session_ended`. Ending a session that
    /// is not running (never seen, or idle and forgotten) closes its id and
    /// reports `session_ended` with nothing denied.
    pub(super) fn session_end(&mut self, session_id: &str, ob: &mut Outbox<'_>) {
        let from = ob.len();
        let mut changes = Vec::new();
        if !self.sessions.contains_key(session_id) {
            if self.sessions.closed_why(session_id).is_some() {
                ob.error(
                    ErrorCode::UnknownSession,
                    format!("no session has the id `{session_id}`"),
                );
                return;
            }
            self.sessions.close(session_id, Closed::Ended);
            self.share_close(session_id, Closed::Ended);
            changes.push(Change::Closed(
                Closed::Ended.stored(session_fingerprint(session_id)),
            ));
            ob.reply(ServerFrame::SessionEnded(wire::SessionEnded {
                session_id: session_id.to_string(),
                denied: 0,
                not_saved: None,
            }));
        } else {
            self.end_subtree(session_id, ob, &mut changes);
        }
        // On disk before it is reported; should that fail, the sessions are
        // gone from memory all the same and their frames say so.
        let saved = self.store.persist_now(self.clock.as_ref(), &changes, || {
            format!("the end of session `{session_id}`")
        });
        if let Err(err) = saved {
            ob.not_saved(from, &err);
        }
    }

    /// End a running session and its descendants, deepest first, and close
    /// them; `changes` gets what the state directory must forget and keep.
    fn end_subtree(&mut self, session_id: &str, ob: &mut Outbox<'_>, changes: &mut Vec<Change>) {
        let parent = self
            .sessions
            .get(session_id)
            .and_then(|session| session.parent.clone());
        let parent_stored = parent
            .as_deref()
            .is_some_and(|id| self.sessions.is_stored(id));
        let subtree = self.sessions.subtree(session_id);
        // Which of them the state directory keeps, before any is unlinked
        // (an implicit parent is kept for its children).
        let stored: HashSet<String> = subtree
            .iter()
            .filter(|id| self.sessions.is_stored(id))
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
            // Gone before its calls are denied: their decisions name no
            // parent session in the audit log.
            self.sessions.remove(&ended);
            for id in ids {
                self.end_ask(&id, wire::Source::Shutdown, reason.clone(), ob);
            }
            if stored.contains(&ended) {
                changes.push(Change::RemoveSession(ended.clone()));
            }
            self.sessions.close(&ended, Closed::Ended);
            self.share_close(&ended, Closed::Ended);
            changes.push(Change::Closed(
                Closed::Ended.stored(session_fingerprint(&ended)),
            ));
            ob.reply(ServerFrame::SessionEnded(wire::SessionEnded {
                session_id: ended,
                denied,
                not_saved: None,
            }));
        }
        // An implicit parent left with nothing to hold is forgotten, and one
        // stored only for its children is no longer kept.
        if let Some(parent) = parent {
            self.sessions.forget_idle(&parent);
            if parent_stored && !self.sessions.is_stored(&parent) {
                changes.push(self.sessions.stored_change(&parent));
            }
        }
    }
}

/// Whether the state directory keeps a session: started or given a mode,
/// holding grants, or the parent of a kept session (an implicit parent).
fn is_stored(session: &Session) -> bool {
    session.explicit || !session.grants.is_empty() || !session.children.is_empty()
}

/// A session as the state directory keeps it.
fn stored_session(session_id: &str, session: &Session) -> StoredSession {
    StoredSession {
        session_id: session_id.to_string(),
        parent_id: session.parent.clone(),
        mode: session.mode.as_str().to_string(),
        permissions: session.rules.as_ref().map(convert::scope_spec),
        grants: session
            .grants
            .iter()
            .map(|grant| stored_grant(grant, session_id))
            .collect(),
        started: session.started,
        implicit: !session.explicit,
        joined: stored_joined(&session.joined),
    }
}

/// What a joined session met, as stored.
pub(super) fn stored_joined(joined: &[(String, ScopeRules)]) -> Vec<StoredJoined> {
    joined
        .iter()
        .map(|(session_id, rules)| StoredJoined {
            session_id: session_id.clone(),
            permissions: convert::scope_spec(rules),
        })
        .collect()
}

/// `scope` with the narrowings a joined session met, each a layer; one
/// that cannot be built (`unusable` is told why) denies every tool.
fn with_joined(
    policy: &Policy,
    scope: Scope,
    session_id: &str,
    joined: &[(String, ScopeRules)],
    mut unusable: impl FnMut(String),
) -> Scope {
    joined.iter().fold(scope, |scope, (sub_task, rules)| {
        match policy.scope_layer(sub_task, rules.clone()) {
            Ok(layer) => scope.with(layer),
            Err(err) => {
                unusable(err.to_string());
                scope.with(ScopeLayer::deny_all(session_id))
            }
        }
    })
}

fn new_session(mode: Mode) -> Session {
    Session {
        mode,
        parent: None,
        rules: None,
        scope: Scope::default(),
        joined: Vec::new(),
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
fn parse_mode(name: &str, ob: &mut Outbox<'_>) -> Option<Mode> {
    match name.parse::<Mode>() {
        Ok(mode) => Some(mode),
        Err(err) => {
            ob.error(ErrorCode::InvalidMode, err.to_string());
            None
        }
    }
}
