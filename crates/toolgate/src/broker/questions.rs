//! Calls and the questions they raise: judging a `tool_call`, settling an
//! evaluation (decide, or ask and keep the call [`Pending`]), answers,
//! cancels, deadlines, and judging pending calls again after a change.
//! The open questions themselves are a part of their own, [`Questions`].
//! Invariant: a pending call is in [`Questions`] and its session's `live`
//! map at once; `take_pending` removes it from both.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet, VecDeque};

use serde_json::{Map, Value};
use toolgate_policy::{
    Action, Call, Context, Evaluation, GrantSpec, Grants, Mode, Question, Scope,
};
use toolgate_protocol as wire;
use toolgate_protocol::ErrorCode;

use super::outbox::Outbox;
use super::sessions::stricter;
use super::{duplicate, Broker, OnAsk};
use crate::convert;

/// How many answered permission ids are remembered to tell `already_resolved`
/// from `unknown_permission`.
const RESOLVED_MEMORY: usize = 1 << 16;

pub(super) struct Pending {
    /// Creation order, so shutdown denies in the order calls arrived.
    pub(super) seq: u64,
    pub(super) session_id: String,
    pub(super) call_id: String,
    pub(super) tool: String,
    pub(super) input: Map<String, Value>,
    pub(super) cwd: Option<String>,
    pub(super) repeats: u32,
    /// `(permission, subject)` the user allowed for this call.
    pub(super) approvals: Vec<(String, String)>,
    /// The last answer the user gave for this call, for the decision's reason.
    pub(super) answered: Option<wire::Reply>,
    /// After an `always`: where the grants went and for how long.
    pub(super) granted: Option<Granted>,
    /// After an `always` with `patterns`: the option chosen, when narrower
    /// than the request's `always`.
    pub(super) chosen: Option<Vec<String>>,
    /// Said after the decision's reason (an `always` that counted as `once`).
    pub(super) note: Option<String>,
    pub(super) question: Question,
    pub(super) deadline: Option<u64>,
    /// `(permission, subject)` pairs that still ask, from the latest
    /// evaluation: unless a new grant covers one of them the call keeps
    /// asking, so an `always` judges again only the calls it may decide.
    /// Empty means "judge again on every new grant" (a plan approval).
    pub(super) asking: Vec<(String, String)>,
}

/// What an `always` answer granted, for the decision's reason.
pub(super) struct Granted {
    /// Where the grants are kept.
    scope: wire::GrantScope,
    /// Their lifetime in seconds (`expiresIn`), when they have one.
    lifetime: Option<u64>,
    /// Why saving them failed, when it did.
    failed: Option<String>,
}

/// A session's open questions, indexed so that neither listing them nor
/// finding those a new grant may decide scans every pending call.
#[derive(Default)]
pub(super) struct Queue {
    /// Creation order → permission id: oldest first.
    order: BTreeMap<u64, String>,
    /// `(permission, subject)` still asked about → the calls (by creation
    /// order) that ask about it ([`Pending::asking`]).
    asking: BTreeMap<(String, String), BTreeSet<u64>>,
    /// Calls with nothing in `asking` (a plan approval): judged again on
    /// every new grant.
    unindexed: BTreeSet<u64>,
}

impl Queue {
    fn add(&mut self, seq: u64, permission_id: String, asking: &[(String, String)]) {
        self.order.insert(seq, permission_id);
        self.index(seq, asking);
    }

    fn index(&mut self, seq: u64, asking: &[(String, String)]) {
        if asking.is_empty() {
            self.unindexed.insert(seq);
        }
        for pair in asking {
            self.asking.entry(pair.clone()).or_default().insert(seq);
        }
    }

    fn unindex(&mut self, seq: u64, asking: &[(String, String)]) {
        self.unindexed.remove(&seq);
        for pair in asking {
            if let Some(seqs) = self.asking.get_mut(pair) {
                seqs.remove(&seq);
                if seqs.is_empty() {
                    self.asking.remove(pair);
                }
            }
        }
    }

    /// The calls a new grant may decide, oldest first: those asking about a
    /// subject one of `granted` covers, and the unindexed ones.
    fn covered_by(&self, granted: &[GrantSpec]) -> Vec<String> {
        let mut seqs = self.unindexed.clone();
        for grant in granted {
            // Every subject the pattern covers starts with its literal part.
            let text = grant.pattern.as_str();
            let literal = text.get(..grant.pattern.literal_len()).unwrap_or_default();
            let from = (grant.permission.clone(), literal.to_string());
            for ((permission, subject), calls) in self.asking.range(from..) {
                if *permission != grant.permission || !subject.starts_with(literal) {
                    break;
                }
                if grant.pattern.matches(subject) {
                    seqs.extend(calls.iter().copied());
                }
            }
        }
        seqs.iter()
            .filter_map(|seq| self.order.get(seq).cloned())
            .collect()
    }
}

/// The open questions (lsp-server's `ReqQueue` shape): asked, taken when
/// answered or ended, listed per session, and their deadlines. A pending
/// call is also in its session's `live` map ([`super::sessions::Session`]),
/// which the broker keeps in step ([`Broker::take_pending`]).
#[derive(Default)]
pub(super) struct Questions {
    /// Open questions by permission id.
    pending: HashMap<String, Pending>,
    /// Each session's open questions (only sessions that have some).
    queues: HashMap<String, Queue>,
    /// Deadlines: (monotonic ms, permission id), earliest first. Stale
    /// entries are skipped.
    deadlines: BinaryHeap<Reverse<(u64, String)>>,
    /// Permission ids answered or ended (the latest [`RESOLVED_MEMORY`]),
    /// to tell `already_resolved` from `unknown_permission`.
    resolved: HashSet<String>,
    resolved_order: VecDeque<String>,
    /// The creation order of the last question asked.
    next_seq: u64,
}

impl Questions {
    /// Register `pending` as asked under `permission_id`: a call asked for
    /// the first time gets the next creation number; a call asked again
    /// keeps its own.
    pub(super) fn ask(&mut self, permission_id: String, mut pending: Pending) {
        if pending.seq == 0 {
            self.next_seq += 1;
            pending.seq = self.next_seq;
        }
        if let Some(deadline) = pending.deadline {
            self.deadlines
                .push(Reverse((deadline, permission_id.clone())));
        }
        self.queues
            .entry(pending.session_id.clone())
            .or_default()
            .add(pending.seq, permission_id.clone(), &pending.asking);
        self.pending.insert(permission_id, pending);
    }

    /// Remove an open question (answered or ended) from every index and
    /// remember its id as resolved.
    pub(super) fn take(&mut self, id: &str) -> Option<Pending> {
        let pending = self.pending.remove(id)?;
        if let Some(queue) = self.queues.get_mut(&pending.session_id) {
            queue.order.remove(&pending.seq);
            queue.unindex(pending.seq, &pending.asking);
            if queue.order.is_empty() {
                self.queues.remove(&pending.session_id);
            }
        }
        if self.resolved.insert(id.to_string()) {
            self.resolved_order.push_back(id.to_string());
            if self.resolved_order.len() > RESOLVED_MEMORY {
                if let Some(old) = self.resolved_order.pop_front() {
                    self.resolved.remove(&old);
                }
            }
        }
        Some(pending)
    }

    /// An open question.
    pub(super) fn get(&self, id: &str) -> Option<&Pending> {
        self.pending.get(id)
    }

    /// Whether `id` was answered or ended (and is still remembered).
    pub(super) fn was_resolved(&self, id: &str) -> bool {
        self.resolved.contains(id)
    }

    /// How many questions are open.
    pub(super) fn len(&self) -> usize {
        self.pending.len()
    }

    /// The creation number of an open question (`u64::MAX` for none), to
    /// list questions oldest first.
    pub(super) fn seq(&self, id: &str) -> u64 {
        self.pending.get(id).map_or(u64::MAX, |pending| pending.seq)
    }

    /// The session of an open question.
    pub(super) fn session_of(&self, id: &str) -> Option<String> {
        self.pending
            .get(id)
            .map(|pending| pending.session_id.clone())
    }

    /// The permission ids of a session's open questions, oldest first.
    pub(super) fn of_session(&self, session_id: &str) -> Vec<String> {
        self.queues
            .get(session_id)
            .map(|queue| queue.order.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Every open question, oldest first.
    pub(super) fn all(&self) -> Vec<String> {
        let mut ids: Vec<(u64, String)> = self
            .pending
            .iter()
            .map(|(id, pending)| (pending.seq, id.clone()))
            .collect();
        ids.sort();
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// The sessions with open questions, in the order of their oldest one.
    pub(super) fn sessions_by_age(&self) -> Vec<String> {
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
        sessions.into_iter().map(|(_, id)| id).collect()
    }

    /// The sessions with open questions, in id order.
    pub(super) fn sessions(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.queues.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// A session's open questions a new grant may decide, oldest first
    /// ([`Queue::covered_by`]).
    pub(super) fn covered_by(&self, session_id: &str, granted: &[GrantSpec]) -> Vec<String> {
        self.queues
            .get(session_id)
            .map(|queue| queue.covered_by(granted))
            .unwrap_or_default()
    }

    /// What an open question still asks about, after a new evaluation.
    pub(super) fn set_asking(&mut self, id: &str, asking: Vec<(String, String)>) {
        if let Some(pending) = self.pending.get_mut(id) {
            if pending.asking != asking {
                if let Some(queue) = self.queues.get_mut(&pending.session_id) {
                    queue.unindex(pending.seq, &pending.asking);
                    queue.index(pending.seq, &asking);
                }
                pending.asking = asking;
            }
        }
    }

    /// The earliest deadline of an open question that can time out.
    pub(super) fn next_deadline(&mut self) -> Option<u64> {
        while let Some(Reverse((deadline, permission_id))) = self.deadlines.peek() {
            match self.pending.get(permission_id) {
                Some(pending) if pending.deadline == Some(*deadline) => return Some(*deadline),
                _ => {
                    self.deadlines.pop();
                }
            }
        }
        None
    }

    /// The next open question whose deadline is `now` or earlier, taken off
    /// the deadlines (still open: the caller ends it).
    pub(super) fn expired(&mut self, now: u64) -> Option<String> {
        let deadline = self.next_deadline()?;
        if deadline > now {
            return None;
        }
        self.deadlines.pop().map(|Reverse((_, id))| id)
    }
}

impl Broker {
    /// The earliest deadline on the monotonic clock: an ask that can time
    /// out, or writing the state again after a write failed (a tick then
    /// retries it, see [`Broker::commit`]).
    pub fn next_deadline(&mut self) -> Option<u64> {
        let question = self.questions.next_deadline();
        match (question, self.store.retry_deadline()) {
            (Some(question), Some(retry)) => Some(question.min(retry)),
            (question, retry) => question.or(retry),
        }
    }

    /// Deny every ask whose deadline has passed.
    pub(super) fn expire(&mut self, ob: &mut Outbox<'_>) {
        let now = self.clock.monotonic_ms();
        while let Some(id) = self.questions.expired(now) {
            let reason = format!(
                "nobody answered the question within {}",
                duration_text(self.config.ask_timeout_ms)
            );
            let session = self.questions.session_of(&id);
            self.end_ask(&id, wire::Source::Timeout, reason, ob);
            if let Some(session) = session {
                self.sessions.forget_idle(&session);
            }
        }
    }

    /// A `tool_call`, with the hash of its tool and input ([`call_hash`]).
    pub(super) fn tool_call(
        &mut self,
        call: wire::ToolCall,
        hash: u64,
        prepared: Option<toolgate_policy::Prepared>,
        ob: &mut Outbox<'_>,
    ) {
        if self
            .sessions
            .live_permission(&call.session_id, &call.call_id)
            .is_some()
        {
            duplicate(ob, &call.call_id, &call.session_id, true);
            return;
        }
        if !self.sessions.contains_key(&call.session_id) {
            if let Some(why) = self.sessions.closed_why(&call.session_id) {
                let why = why.text(&call.session_id);
                let decision = wire::Decision {
                    session_id: call.session_id.clone(),
                    call_id: call.call_id,
                    decision: wire::Verdict::Deny,
                    source: wire::Source::Scope,
                    reason: format!(
                        "{why}; its calls are denied until a session_start for it succeeds"
                    ),
                    rule: None,
                    message: None,
                    reminder: None,
                    child_session_id: None,
                };
                self.decide(decision, ob);
                return;
            }
            self.sessions
                .entry(&call.session_id, self.policy.default_mode);
        }
        let mode = self.effective_mode(&call.session_id);
        if self.audit.is_some() {
            let client = self.client_of(ob.caller());
            if let Some(audit) = &mut self.audit {
                audit.notes.insert(
                    (call.session_id.clone(), call.call_id.clone()),
                    super::audit::Note {
                        tool: call.tool.clone(),
                        input: call.input.clone(),
                        cwd: call.cwd.clone(),
                        mode,
                        client,
                    },
                );
            }
        }
        let now = self.grant_clock();
        // Grants not heard of for too long (a fleet's store cut off) are
        // not used: the call asks instead.
        let usable = self.grants_usable();
        let none = toolgate_policy::Grants::default();
        let Some(session) = self.sessions.get_mut(&call.session_id) else {
            return;
        };
        let repeats = match session.last_call {
            Some((last, count)) if last == hash => count.saturating_add(1),
            _ => 1,
        };
        session.last_call = Some((hash, repeats));
        let judged = Call {
            tool: &call.tool,
            input: &call.input,
            cwd: call.cwd.as_deref(),
        };
        let context = Context {
            mode,
            grants: if usable { &session.grants } else { &none },
            project_grants: if usable { self.grants.all() } else { &none },
            scope: &session.scope,
            approvals: &[],
            repeats,
            explain: false,
            now,
        };
        let evaluation = match prepared {
            Some(prepared) => self.policy.evaluate_prepared(&judged, prepared, &context),
            None => self.policy.evaluate(&judged, &context),
        };
        let pending = Pending {
            seq: 0,
            session_id: call.session_id,
            call_id: call.call_id,
            tool: call.tool,
            input: call.input,
            cwd: call.cwd,
            repeats,
            approvals: Vec::new(),
            answered: None,
            granted: None,
            chosen: None,
            note: None,
            question: Question::default(),
            deadline: None,
            asking: Vec::new(),
        };
        self.settle(pending, evaluation, mode, true, ob);
    }

    /// Act on an evaluation: decide the call, or ask (registering it as pending).
    /// With `forget`, a session the decision leaves idle is forgotten (see
    /// [`Sessions::forget_idle`](super::sessions::Sessions::forget_idle)); a
    /// session with a question open never is.
    fn settle(
        &mut self,
        mut pending: Pending,
        evaluation: Evaluation,
        mode: Mode,
        forget: bool,
        ob: &mut Outbox<'_>,
    ) {
        // A fleet's broker cut off from its store asks only its own
        // approvers: with none, nobody can be asked.
        let nobody = evaluation.action == Action::Ask
            && self.config.on_ask == OnAsk::Wait
            && self.nobody_to_ask(
                self.conns
                    .owner_of(&pending.session_id, &pending.call_id)
                    .or(ob.caller()),
            );
        match (evaluation.action, evaluation.question) {
            (Action::Ask, Some(question)) if self.config.on_ask == OnAsk::Wait && !nobody => {
                let permission_id = self.ids.permission_id();
                pending.deadline = match self.config.ask_timeout_ms {
                    0 => None,
                    timeout => Some(self.clock.monotonic_ms().saturating_add(timeout)),
                };
                let mut request = convert::request(
                    &permission_id,
                    self.clock.wall_ms(),
                    &pending.session_id,
                    &pending.call_id,
                    &pending.tool,
                    &pending.input,
                    pending.cwd.as_deref(),
                    &question,
                );
                // A sub-agent's question names the session that started it.
                request.parent_id = self
                    .sessions
                    .get(&pending.session_id)
                    .and_then(|session| session.parent.clone());
                convert::link_assistant_metadata(
                    &mut request,
                    &self.policy.registry,
                    &pending.tool,
                    &pending.input,
                    &question,
                );
                self.conns.ask(Box::new(request), ob);
                pending.asking = question.approve.clone();
                pending.question = *question;
                self.sessions
                    .entry(&pending.session_id, self.policy.default_mode)
                    .live
                    .insert(pending.call_id.clone(), permission_id.clone());
                let shared = self.shared.active().then(|| pending.question.clone());
                self.questions.ask(permission_id.clone(), pending);
                if let Some(question) = shared {
                    self.share_question(&permission_id, &question);
                }
            }
            (Action::Ask, _) => {
                let why = if nobody {
                    "the shared store cannot be reached and no approver is connected to this broker, so nobody can be asked"
                } else {
                    "toolgate runs with --on-ask deny, so nothing is asked"
                };
                let reason = format!("{}; {why}", evaluation.reason);
                let reminder =
                    (mode == Mode::Plan).then(|| self.reminder(&pending.session_id, mode));
                if forget {
                    self.sessions.forget_idle(&pending.session_id);
                }
                let decision = convert::decision(
                    std::mem::take(&mut pending.session_id),
                    std::mem::take(&mut pending.call_id),
                    Action::Deny,
                    evaluation.source,
                    reason,
                    evaluation.rule,
                    None,
                    reminder,
                );
                self.decide(decision, ob);
            }
            (action, _) => {
                let reminder = (action == Action::Deny && mode == Mode::Plan)
                    .then(|| self.reminder(&pending.session_id, mode));
                let reason = match (evaluation.source, pending.answered, &pending.granted) {
                    (
                        toolgate_policy::Source::User,
                        Some(wire::Reply::Always),
                        Some(Granted {
                            scope,
                            lifetime,
                            failed,
                        }),
                    ) => {
                        let place = match scope {
                            wire::GrantScope::Session => "the session",
                            wire::GrantScope::Project => "every session of the project",
                        };
                        let place = match lifetime {
                            None => place.to_string(),
                            Some(seconds) => format!("{place} for {}", lifetime_text(*seconds)),
                        };
                        let what = match &pending.chosen {
                            None => "its `always` patterns".to_string(),
                            Some(patterns) => format!(
                                "{} (of its `alwaysOptions`)",
                                patterns
                                    .iter()
                                    .map(|pattern| format!("`{pattern}`"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        };
                        match failed {
                            None => format!("the user allowed this call and granted {what} for {place}"),
                            Some(err) => format!("the user allowed this call and granted {what} for {place}, but the grants could not be saved and will not survive a restart ({err})"),
                        }
                    }
                    (toolgate_policy::Source::User, Some(wire::Reply::Always), None) => {
                        match &pending.question.managed {
                            Some(managed) => format!("the user allowed this call once: {managed} asks every time, so `always` granted nothing"),
                            None => evaluation.reason,
                        }
                    }
                    _ => evaluation.reason,
                };
                let reason = match &pending.note {
                    Some(note) => format!("{reason}; {note}"),
                    None => reason,
                };
                // An allowed delegation that carries permissions starts its
                // sub-task's session with them; one whose permissions
                // cannot be used is denied instead.
                let (action, source, reason, child) = match action {
                    Action::Allow => match self.delegate(&pending, ob) {
                        Ok(child) => (action, evaluation.source, reason, child),
                        Err(why) => (Action::Deny, toolgate_policy::Source::Scope, why, None),
                    },
                    _ => (action, evaluation.source, reason, None),
                };
                if forget {
                    self.sessions.forget_idle(&pending.session_id);
                }
                let mut decision = convert::decision(
                    std::mem::take(&mut pending.session_id),
                    std::mem::take(&mut pending.call_id),
                    action,
                    source,
                    reason,
                    evaluation.rule,
                    None,
                    reminder,
                );
                decision.child_session_id = child;
                self.decide(decision, ob);
            }
        }
    }

    /// If `pending` is a delegation (a sub-agent tool) whose input carries
    /// `permissions`, start its child session under the call's session with
    /// that scope (never wider than the parent's, as every scope): the id
    /// the input names (`session_id`, `sessionID` or `task_id`), else
    /// `SESSION/task/CALL`. `Ok(None)` for any other call; `Err` is the
    /// reason to deny a delegation whose permissions cannot be used, or
    /// whose child cannot be started under this session.
    fn delegate(
        &mut self,
        pending: &Pending,
        ob: &mut Outbox<'_>,
    ) -> Result<Option<String>, String> {
        let Some(permissions) = pending.input.get("permissions") else {
            return Ok(None);
        };
        if self.policy.registry.lookup(&pending.tool).kind != toolgate_policy::Kind::Task
            || permissions.is_null()
        {
            return Ok(None);
        }
        let named = ["session_id", "sessionID", "task_id"]
            .iter()
            .find_map(|key| pending.input.get(*key).and_then(serde_json::Value::as_str))
            .filter(|id| !id.trim().is_empty());
        let child = match named {
            Some(id) => id.to_string(),
            None => format!("{}/task/{}", pending.session_id, pending.call_id),
        };
        let refused = |why: String| {
            format!(
                "the delegation's `permissions` cannot be used ({why}); the sub-task was not started"
            )
        };
        let frame = serde_json::json!({
            "type": "session_start",
            "sessionID": child,
            "parentID": pending.session_id,
            "permissions": permissions,
            "join": true,
        });
        let start = match toolgate_protocol::decode_value(&frame) {
            Ok(toolgate_protocol::ClientFrame::SessionStart(start)) => start,
            Ok(_) => return Err(refused("not a session scope".to_string())),
            Err(err) => return Err(refused(err.message)),
        };
        // The session itself or one above it cannot be its sub-task, and a
        // session started elsewhere is not this delegation's to restart (a
        // refused start would shut it).
        if child == pending.session_id
            || self
                .sessions
                .ancestors(&pending.session_id)
                .contains(&child)
        {
            return Err(refused(format!(
                "`{child}` is the delegating session or one above it"
            )));
        }
        if let Some(existing) = self.sessions.get(&child).filter(|session| session.started) {
            if existing.parent.as_deref() != Some(pending.session_id.as_str()) {
                return Err(refused(format!(
                    "the session `{child}` was already started under another session"
                )));
            }
        }
        let from = ob.len();
        self.session_start(start, ob);
        let started = self.sessions.get(&child).is_some_and(|session| {
            session.started && session.parent.as_deref() == Some(pending.session_id.as_str())
        });
        if !started {
            let said = ob.errors_since(from);
            return Err(refused(if said.is_empty() {
                format!(
                    "the session `{child}` could not be started under `{}`",
                    pending.session_id
                )
            } else {
                said.join("; ")
            }));
        }
        Ok(Some(child))
    }

    pub(super) fn response(&mut self, response: wire::PermissionResponse, ob: &mut Outbox<'_>) {
        let id = response.permission_id.clone();
        // `patterns` must name one of the lists the request offered; anything
        // else grants nothing and leaves the question open.
        let mut option: Option<toolgate_policy::AlwaysOption> = None;
        if let (Some(patterns), Some(pending)) = (&response.patterns, self.questions.get(&id)) {
            let offered = pending.question.options();
            let same = |listed: &[String]| {
                listed.iter().all(|p| patterns.contains(p))
                    && patterns.iter().all(|p| listed.contains(p))
            };
            match offered.into_iter().find(|offer| same(&offer.patterns)) {
                Some(found) => option = Some(found),
                None => {
                    let shown: Vec<String> = patterns
                        .iter()
                        .take(8)
                        .map(|p| format!("`{}`", p.chars().take(100).collect::<String>()))
                        .collect();
                    let message = if pending.question.plan.is_some() {
                        format!("the request `{id}` is a plan approval, which offers no `alwaysOptions`; answer it without `patterns`")
                    } else if let Some(managed) = &pending.question.managed {
                        format!("the request `{id}` is asked by {managed}, which asks every time and offers no `alwaysOptions`; answer it without `patterns`")
                    } else {
                        format!(
                            "`patterns` [{}{}] is not one of the lists the request `{id}` offered in `alwaysOptions`; nothing was granted and the request is still open",
                            shown.join(", "),
                            if patterns.len() > 8 { ", ..." } else { "" }
                        )
                    };
                    ob.error_naming(
                        ErrorCode::InvalidFrame,
                        message,
                        Some(pending.call_id.clone()),
                        Some(pending.session_id.clone()),
                        Some(id),
                    );
                    return;
                }
            }
        }
        // A plan approval grants nothing that could end: its `always`
        // changes the mode.
        if let (Some(_), Some(pending)) = (response.expires_in, self.questions.get(&id)) {
            if pending.question.plan.is_some() {
                ob.error_naming(
                    ErrorCode::InvalidFrame,
                    format!("the request `{id}` is a plan approval, whose `always` changes the mode and grants nothing that could expire; answer it without `expiresIn`"),
                    Some(pending.call_id.clone()),
                    Some(pending.session_id.clone()),
                    Some(id),
                );
                return;
            }
        }
        // In a fleet, a question in the store is answered there: the
        // store's first answer decides.
        if self.defer_answer(&response, ob) {
            return;
        }
        let Some(mut pending) = self.take_pending(&id, "answered on the broker that asked it")
        else {
            let (code, message) = if self.questions.was_resolved(&id) {
                (
                    ErrorCode::AlreadyResolved,
                    format!("the request `{id}` was already answered or ended"),
                )
            } else {
                (
                    ErrorCode::UnknownPermission,
                    format!("no request has the id `{id}`"),
                )
            };
            ob.error_naming(code, message, None, None, Some(id));
            return;
        };
        let plan = pending.question.plan.is_some();
        match response.response {
            wire::Reply::Reject => {
                let reason = if plan {
                    "the user rejected the plan; the session stays in plan mode".to_string()
                } else {
                    "the user rejected this call".to_string()
                };
                let decision = wire::Decision {
                    session_id: pending.session_id.clone(),
                    call_id: pending.call_id.clone(),
                    decision: wire::Verdict::Deny,
                    source: wire::Source::User,
                    reason,
                    rule: None,
                    message: response.message,
                    // The agent stays in plan mode: remind it what that means.
                    reminder: plan.then(|| self.reminder(&pending.session_id, Mode::Plan)),
                    child_session_id: None,
                };
                self.decide(decision, ob);
                // OpenCode semantics: a rejection ends the session's other questions.
                for other in self.pending_of(&pending.session_id) {
                    self.end_ask(
                        &other,
                        wire::Source::User,
                        format!("the user rejected another call of this session ({id})"),
                        ob,
                    );
                }
            }
            wire::Reply::Once | wire::Reply::Always if plan => {
                let (mode, answer) = if response.response == wire::Reply::Once {
                    (Mode::Ask, "once")
                } else {
                    (Mode::AutoEdit, "always")
                };
                let chained = stricter(
                    mode,
                    self.sessions
                        .parent_mode(&pending.session_id, self.policy.default_mode),
                );
                let effective = self.policy.floored(chained);
                let decision = wire::Decision {
                    session_id: pending.session_id.clone(),
                    call_id: pending.call_id.clone(),
                    decision: wire::Verdict::Allow,
                    source: wire::Source::User,
                    reason: match &self.policy.mode_floor {
                        _ if effective == mode => format!("the user approved the plan ({answer}); the session is now in {mode} mode"),
                        Some((floor, origin)) if effective != chained => format!("the user approved the plan ({answer}); the session stays in {floor} mode, the floor the managed policy ({origin}) sets"),
                        _ => format!("the user approved the plan ({answer}); the session stays in {effective} mode, the mode of its parent session"),
                    },
                    rule: None,
                    message: response.message,
                    reminder: None,
                    child_session_id: None,
                };
                self.decide(decision, ob);
                self.change_mode(&pending.session_id, mode, ob);
            }
            wire::Reply::Once | wire::Reply::Always => {
                // What the question asked about, per permission (a batch asks
                // about several).
                pending
                    .approvals
                    .extend(pending.question.approve.iter().cloned());
                // A managed rule's question is asked every time: its
                // `always` grants nothing and counts as `once`.
                let mut always =
                    response.response == wire::Reply::Always && pending.question.managed.is_none();
                pending.answered = Some(response.response);
                // A fleet's grants live in its store: a question answered
                // here without it (the store could not be reached) grants
                // nothing, so that no broker holds a grant the others cannot
                // see or revoke.
                if always && self.shared.active() && !self.shared.applying {
                    always = false;
                    pending.answered = Some(wire::Reply::Once);
                    pending.note = Some("the answer was `always`, but the shared store could not be reached, so it counts as `once` and granted nothing".to_string());
                }
                // What `always` grants: the chosen option, else the request's `always`.
                let granted = match (always, option) {
                    (false, _) => Vec::new(),
                    (true, None) => pending.question.grants.clone(),
                    (true, Some(option)) => {
                        if option.patterns != pending.question.always {
                            pending.chosen = Some(option.patterns);
                        }
                        option.grants
                    }
                };
                // A lifetime ends on the broker's wall clock, which a restart
                // keeps (a monotonic clock would start again).
                let granted = match response.expires_in {
                    None => granted,
                    Some(seconds) => {
                        let end = self
                            .clock
                            .wall_ms()
                            .saturating_add(seconds.saturating_mul(1000));
                        granted
                            .into_iter()
                            .map(|spec| GrantSpec {
                                expires_at: Some(end),
                                ..spec
                            })
                            .collect()
                    }
                };
                if always {
                    let scope = response.scope.unwrap_or(wire::GrantScope::Session);
                    // The grants are on disk before the decision that reports
                    // them (a fleet's: written with the answer, in memory already).
                    let saved = if self.shared.applying {
                        Ok(())
                    } else {
                        self.record_grants(&pending.session_id, &granted, scope)
                    };
                    pending.granted = Some(Granted {
                        scope,
                        lifetime: response.expires_in,
                        failed: saved.err(),
                    });
                }
                let session_id = pending.session_id.clone();
                self.reevaluate(pending, ob);
                if always {
                    let why = format!("an `always` answer to {id} covers it");
                    let only = Some(granted.as_slice());
                    match response.scope {
                        Some(wire::GrantScope::Project) => {
                            // Only sessions with open questions can have a call decided.
                            for session in self.questions.sessions() {
                                self.revisit_session(&session, &why, only, ob);
                            }
                        }
                        _ => self.revisit_session(&session_id, &why, only, ob),
                    }
                }
            }
        }
    }

    /// The time grants are judged at: the wall clock, read only while some
    /// grant has a lifetime (`next_expiry` is then set; with none, no grant
    /// needs a time). Were it ever missing, a grant with a lifetime would
    /// cover nothing, never more.
    fn grant_clock(&self) -> Option<u64> {
        self.next_expiry.map(|_| self.clock.wall_ms())
    }

    /// Evaluate a pending call again (after `once`/`always`, a mode change or new
    /// grants) and settle it: decided, or asked about what still needs an answer.
    fn reevaluate(&mut self, pending: Pending, ob: &mut Outbox<'_>) {
        let (evaluation, mode) = self.evaluate_pending(&pending);
        self.settle(pending, evaluation, mode, false, ob);
    }

    fn evaluate_pending(&self, pending: &Pending) -> (Evaluation, Mode) {
        let no_grants = Grants::default();
        let no_scope = Scope::default();
        let mode = self.effective_mode(&pending.session_id);
        let usable = self.grants_usable();
        let (grants, scope) = match self.sessions.get(&pending.session_id) {
            Some(session) if usable => (&session.grants, &session.scope),
            Some(session) => (&no_grants, &session.scope),
            None => (&no_grants, &no_scope),
        };
        let evaluation = self.policy.evaluate(
            &Call {
                tool: &pending.tool,
                input: &pending.input,
                cwd: pending.cwd.as_deref(),
            },
            &Context {
                mode,
                grants,
                project_grants: if usable {
                    self.grants.all()
                } else {
                    &no_grants
                },
                scope,
                approvals: &pending.approvals,
                repeats: pending.repeats,
                explain: false,
                now: self.grant_clock(),
            },
        );
        (evaluation, mode)
    }

    /// After the session's grants, mode or scope changed: decide every pending
    /// call of the session whose answer is no longer "ask"; the others keep
    /// their question. With `granted` (after an `always`: the only change is
    /// these new grants), a call is judged again only when one of them covers
    /// a `(permission, subject)` it still asks about: grants only ever turn an
    /// ask into an allow, so any other call would ask again.
    pub(super) fn revisit_session(
        &mut self,
        session_id: &str,
        why: &str,
        granted: Option<&[GrantSpec]>,
        ob: &mut Outbox<'_>,
    ) {
        let ids = match granted {
            None => self.pending_of(session_id),
            Some(granted) => self.questions.covered_by(session_id, granted),
        };
        for id in ids {
            let Some(pending) = self.questions.get(&id) else {
                continue;
            };
            let (evaluation, mode) = self.evaluate_pending(pending);
            if evaluation.action == Action::Ask {
                // What it asks about now (other grants may have covered part of it).
                let asking = evaluation
                    .question
                    .map(|question| question.approve)
                    .unwrap_or_default();
                self.questions.set_asking(&id, asking);
                continue;
            }
            if let Some(pending) = self.take_pending(&id, why) {
                let resolved = wire::PermissionResolved {
                    permission_id: id.clone(),
                    session_id: pending.session_id.clone(),
                    call_id: pending.call_id.clone(),
                    reason: why.to_string(),
                };
                self.conns.resolved(resolved, ob);
                self.settle(pending, evaluation, mode, false, ob);
            }
        }
    }

    pub(super) fn cancel(&mut self, cancel: wire::Cancel, ob: &mut Outbox<'_>) {
        match self
            .sessions
            .live_permission(&cancel.session_id, &cancel.call_id)
            .map(str::to_string)
        {
            Some(id) => self.end_ask(
                &id,
                wire::Source::Cancel,
                "the client cancelled the call".to_string(),
                ob,
            ),
            None => ob.error_naming(
                ErrorCode::UnknownCall,
                format!(
                    "no call `{}` is pending in session `{}` (already decided, or never sent)",
                    cancel.call_id, cancel.session_id
                ),
                Some(cancel.call_id),
                None,
                None,
            ),
        }
    }

    /// End a pending ask other than by its own response: `permission_resolved`,
    /// then the call's `deny`.
    pub(super) fn end_ask(
        &mut self,
        id: &str,
        source: wire::Source,
        reason: String,
        ob: &mut Outbox<'_>,
    ) {
        let Some(pending) = self.take_pending(id, &reason) else {
            return;
        };
        let resolved = wire::PermissionResolved {
            permission_id: id.to_string(),
            session_id: pending.session_id.clone(),
            call_id: pending.call_id.clone(),
            reason: reason.clone(),
        };
        self.conns.resolved(resolved, ob);
        let decision = wire::Decision {
            session_id: pending.session_id,
            call_id: pending.call_id,
            decision: wire::Verdict::Deny,
            source,
            reason,
            rule: None,
            message: None,
            reminder: None,
            child_session_id: None,
        };
        self.decide(decision, ob);
    }

    /// Take an open question (answered or ended, `why`) from the questions
    /// and from its session's live calls (and cancel it in a fleet's store).
    pub(super) fn take_pending(&mut self, id: &str, why: &str) -> Option<Pending> {
        let pending = self.questions.take(id)?;
        self.question_ended(id, why);
        if let Some(session) = self.sessions.get_mut(&pending.session_id) {
            session.live.remove(&pending.call_id);
        }
        Some(pending)
    }

    /// The permission ids of a session's pending calls, oldest first.
    pub(super) fn pending_of(&self, session_id: &str) -> Vec<String> {
        self.questions.of_session(session_id)
    }
}

/// A grant's lifetime as a reason says it: `30 minutes`, `1 hour`,
/// `90 seconds` (the largest unit that divides it).
pub(super) fn lifetime_text(seconds: u64) -> String {
    let (count, unit) = match seconds {
        s if s % 86_400 == 0 => (s / 86_400, "day"),
        s if s % 3_600 == 0 => (s / 3_600, "hour"),
        s if s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    if count == 1 {
        format!("1 {unit}")
    } else {
        format!("{count} {unit}s")
    }
}

/// `1 second`, `300 seconds`, `1.5 seconds`.
fn duration_text(ms: u64) -> String {
    match ms {
        1000 => "1 second".to_string(),
        ms if ms % 1000 == 0 => format!("{} seconds", ms / 1000),
        ms => format!("{} seconds", ms as f64 / 1000.0),
    }
}

/// A hash of the tool and its input, for spotting identical calls in a row
/// (foldhash, fixed seed, over a canonical walk of the JSON; keys in the
/// order sent). Only kept in memory; a collision can only count two calls
/// as one repeated (a `doom_loop` question sooner), never allow one.
pub(super) fn call_hash(tool: &str, input: &Map<String, Value>) -> u64 {
    use std::hash::BuildHasher;
    let mut hash =
        CallHasher(foldhash::fast::FixedState::with_seed(0x746f_6f6c_6761_7465).build_hasher());
    hash.bytes(tool.as_bytes());
    hash.map(input);
    std::hash::Hasher::finish(&hash.0)
}

struct CallHasher(foldhash::fast::FoldHasher<'static>);

impl CallHasher {
    fn bytes(&mut self, bytes: &[u8]) {
        use std::hash::Hasher;
        // The length keeps `ab`+`c` apart from `a`+`bc`.
        self.0.write_usize(bytes.len());
        self.0.write(bytes);
    }

    fn map(&mut self, map: &Map<String, Value>) {
        self.bytes(&(map.len() as u64).to_le_bytes());
        for (key, value) in map {
            self.bytes(key.as_bytes());
            self.value(value);
        }
    }

    fn value(&mut self, value: &Value) {
        match value {
            Value::Null => self.bytes(b"n"),
            Value::Bool(b) => self.bytes(if *b { b"t" } else { b"f" }),
            Value::Number(n) => {
                self.bytes(b"#");
                match (n.as_u64(), n.as_i64(), n.as_f64()) {
                    (Some(u), _, _) => self.bytes(&u.to_le_bytes()),
                    (None, Some(i), _) => self.bytes(&i.to_le_bytes()),
                    (None, None, Some(f)) => self.bytes(&f.to_bits().to_le_bytes()),
                    _ => {}
                }
            }
            Value::String(s) => {
                self.bytes(b"\"");
                self.bytes(s.as_bytes());
            }
            Value::Array(items) => {
                self.bytes(&(items.len() as u64).to_le_bytes());
                for item in items {
                    self.value(item);
                }
            }
            Value::Object(map) => {
                self.bytes(b"{");
                self.map(map);
            }
        }
    }
}
