//! What the broker keeps in the state directory: [`Change`] records staged
//! as frames are handled and made durable by `commit` before the transport
//! writes the frames that report them, the whole [`Snapshot`], and restoring
//! from one. Invariant: a stored part that cannot be used is dropped or kept
//! more strictly than written (readonly mode, deny-all scope), never more loosely.

use toolgate_policy::{GrantPattern, GrantSpec, Mode, ScopeLayer};

use super::sessions::{new_session, Closed, Session};
use super::Broker;
use crate::convert;
use crate::state::{
    session_fingerprint, Change, Snapshot, StateError, Store, StoredGrant, StoredSession,
};

impl Broker {
    /// Keep state in `store` from now on, starting from `snapshot` (what the
    /// store held). Returns warnings about parts of the snapshot that could
    /// not be used; those parts are dropped, or kept more strictly than
    /// written, never more loosely.
    pub fn restore(&mut self, store: Box<dyn Store>, snapshot: Snapshot) -> Vec<String> {
        let mut warnings = Vec::new();
        for stored in &snapshot.project_grants {
            match stored_spec(stored) {
                Some(spec) => {
                    self.project_grants.add(stored.grant_id.clone(), &spec);
                    self.project_grant_owners
                        .insert(stored.grant_id.clone(), stored.session_id.clone());
                }
                None => warnings.push(format!(
                    "the stored project grant `{}` is unusable and was dropped",
                    stored.grant_id
                )),
            }
        }
        // Parents before children, whatever the order in the file.
        let mut remaining: Vec<&StoredSession> = snapshot.sessions.iter().collect();
        while !remaining.is_empty() {
            let before = remaining.len();
            remaining.retain(|stored| {
                let ready = stored
                    .parent_id
                    .as_ref()
                    .is_none_or(|parent| self.sessions.contains_key(parent));
                if ready {
                    self.restore_session(stored, &mut warnings);
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
                    self.restore_session(&orphan, &mut warnings);
                }
            }
        }
        for stored in &snapshot.closed {
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
            .sessions
            .keys()
            .filter(|id| self.closed.get(session_fingerprint(id)).is_some())
            .cloned()
            .collect();
        let repaired = !shut.is_empty();
        for id in shut {
            self.remove_session(&id);
        }
        self.store = Some(store);
        if repaired || !warnings.is_empty() {
            // What was repaired is stored as the broker holds it.
            let snapshot = self.snapshot();
            if let Some(store) = self.store.as_mut() {
                if let Err(err) = store.save(&snapshot) {
                    tracing::warn!("the repaired state could not be saved: {err}");
                    self.unsaved
                        .name(&**store, || "the state as repaired at start".to_string());
                }
            }
        }
        warnings
    }

    fn restore_session(&mut self, stored: &StoredSession, warnings: &mut Vec<String>) {
        let mode = stored.mode.parse::<Mode>().unwrap_or_else(|err| {
            warnings.push(format!(
                "the stored session `{}` has an unusable mode ({err}); it starts in readonly mode",
                stored.session_id
            ));
            Mode::ReadOnly
        });
        let parent_scope = self.scope_of(stored.parent_id.as_deref());
        let rules = stored.permissions.clone().map(convert::scope_rules);
        let scope = match &rules {
            None => parent_scope,
            Some(rules) => match self.policy.scope_layer(&stored.session_id, rules.clone()) {
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
        let mut session = new_session(mode);
        session.parent = stored.parent_id.clone();
        session.rules = rules;
        session.scope = scope;
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
            if let Some(parent) = self.sessions.get_mut(&parent) {
                parent.children.insert(stored.session_id.clone());
            }
        }
        self.sessions.insert(stored.session_id.clone(), session);
    }

    /// The whole state the state directory should hold now, as the broker
    /// sees it (what a compaction would write if the journal's changes were
    /// right): for tests that compare it with the store's.
    pub fn stored_state(&self) -> Snapshot {
        self.snapshot()
    }

    /// What the state directory keeps: project grants, every session that
    /// was started, given a mode, granted something or is the parent of one
    /// of those, and every closed session.
    fn snapshot(&self) -> Snapshot {
        let mut sessions: Vec<StoredSession> = self
            .sessions
            .iter()
            .filter(|(_, session)| is_stored(session))
            .map(|(id, session)| stored_session(id, session))
            .collect();
        sessions.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        Snapshot {
            version: 1,
            project_root: self.policy.project_root.to_string_lossy().into_owned(),
            project_grants: self
                .project_grants
                .iter()
                .map(|grant| {
                    let owner = self
                        .project_grant_owners
                        .get(&grant.id)
                        .map(String::as_str)
                        .unwrap_or_default();
                    stored_grant(grant, owner)
                })
                .collect(),
            sessions,
            closed: {
                let mut closed: Vec<(u64, Closed)> = self.closed.iter().collect();
                closed.sort_unstable_by_key(|(fp, _)| *fp);
                closed
                    .into_iter()
                    .map(|(fingerprint, why)| why.stored(fingerprint))
                    .collect()
            },
        }
    }

    /// Whether the state directory keeps the session `session_id` now.
    pub(super) fn is_stored_id(&self, session_id: &str) -> bool {
        self.sessions.get(session_id).is_some_and(is_stored)
    }

    /// The change that stores a session as it is now: the whole session
    /// when the state directory keeps it (see [`is_stored`]), else its
    /// removal.
    pub(super) fn stored_change(&self, session_id: &str) -> Change {
        match self.sessions.get(session_id) {
            Some(session) if is_stored(session) => {
                Change::Session(stored_session(session_id, session))
            }
            _ => Change::RemoveSession(session_id.to_string()),
        }
    }

    /// Stage `changes` in the state directory, when there is one: they are
    /// durable once [`Broker::commit`] returned, which the transport calls
    /// before it writes the frames that report them. `what` names them (`the
    /// start of session `x``) should they never reach the disk. A failure is
    /// logged and returned as its text, for the frame's `notSaved`; the
    /// broker carries on with its state in memory and retries (see
    /// [`Unsaved`]).
    pub(super) fn persist(
        &mut self,
        changes: &[Change],
        what: impl FnOnce() -> String,
    ) -> Result<(), String> {
        let Some(store) = self.store.as_mut() else {
            return Ok(());
        };
        if changes.is_empty() {
            return Ok(());
        }
        match store.stage(changes) {
            Ok(()) => {
                self.unsaved.staged.push(what());
                Ok(())
            }
            Err(err) => {
                tracing::warn!("the state could not be saved: {err}");
                self.unsaved.name(&**store, what);
                self.unsaved.retry_at = self.clock.monotonic_ms().saturating_add(RETRY_MS);
                Err(err.to_string())
            }
        }
    }

    /// Record `changes` durably now (with whatever was staged), for a
    /// change whose frame says whether saving it failed: grants, and every
    /// change that shuts or narrows something (a session ended or refused,
    /// a grant revoked, a mode set), so that it is on disk before it is
    /// reported done. `what` names them; see [`Broker::persist`].
    pub(super) fn persist_now(
        &mut self,
        changes: &[Change],
        what: impl FnOnce() -> String,
    ) -> Result<(), String> {
        let Some(store) = self.store.as_mut() else {
            return Ok(());
        };
        if changes.is_empty() {
            return Ok(());
        }
        match store.record(changes) {
            Ok(()) => {
                self.unsaved.staged.clear();
                Ok(())
            }
            Err(err) => {
                tracing::warn!("the state could not be saved: {err}");
                self.unsaved.name(&**store, what);
                self.unsaved.retry_at = self.clock.monotonic_ms().saturating_add(RETRY_MS);
                Err(err.to_string())
            }
        }
    }

    /// Make every staged change durable (one sync for a batch of frames).
    /// Call it before writing the frames `handle_line` produced: they may
    /// report those changes. A failure is logged. Then, when a write failed
    /// earlier, the whole state is written again, at most once every
    /// [`RETRY_MS`] (the deadline thread also wakes for it, see
    /// [`Broker::next_deadline`]).
    pub fn commit(&mut self) {
        self.commit_staged();
        let _ = self.retry_saving(false);
    }

    /// Make what is staged durable and, when a write failed earlier, write
    /// the whole state again now. The error is the last write's, while
    /// something in force is still not on disk.
    pub fn save_now(&mut self) -> Result<(), StateError> {
        self.commit_staged();
        self.retry_saving(true)
    }

    /// Sync what was staged; should that fail, name it as unsaved.
    fn commit_staged(&mut self) {
        let Some(store) = self.store.as_mut() else {
            return;
        };
        let committed = store.commit();
        let staged = std::mem::take(&mut self.unsaved.staged);
        if let Err(err) = committed {
            tracing::warn!("the state could not be saved: {err}");
            for what in staged {
                self.unsaved.name(&**store, || what);
            }
            self.unsaved.retry_at = self.clock.monotonic_ms().saturating_add(RETRY_MS);
        }
    }

    /// At exit: [`Broker::save_now`]; the error names what is lost and why,
    /// for the line on stderr and a failing exit status.
    pub fn finish_saving(&mut self) -> Result<(), Lost> {
        self.save_now().map_err(|err| {
            Lost(format!(
                "not saved in the state directory ({err}), so lost at exit: {}",
                self.unsaved.names()
            ))
        })
    }

    /// When a write to the state directory failed and what it carried is
    /// not on disk yet: when to try again (monotonic ms).
    pub(super) fn retry_deadline(&self) -> Option<u64> {
        let store = self.store.as_ref()?;
        store.unsaved().map(|_| self.unsaved.retry_at)
    }

    /// Write again what a failed write left unsaved, when it is time (or
    /// `now`). Err while it is still not on disk.
    fn retry_saving(&mut self, now: bool) -> Result<(), StateError> {
        let Some(store) = self.store.as_mut() else {
            return Ok(());
        };
        let Some(err) = store.unsaved() else {
            // A later change rewrote the whole state.
            self.unsaved.saved();
            return Ok(());
        };
        let time = self.clock.monotonic_ms();
        if !now && time < self.unsaved.retry_at {
            return Err(err);
        }
        match store.retry() {
            Ok(()) => {
                self.unsaved.saved();
                Ok(())
            }
            Err(err) => {
                tracing::debug!("the state could still not be saved: {err}");
                self.unsaved.retry_at = time.saturating_add(RETRY_MS);
                Err(err)
            }
        }
    }
}

/// What a transport ends with when changes in force could not be written to
/// the state directory by exit: what they were and why (see
/// [`Broker::finish_saving`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost(pub String);

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Lost {}

/// How long after a failed write to the state directory the whole state is
/// written again (milliseconds).
pub const RETRY_MS: u64 = 1000;

/// What is in force but not on disk because a write to the state directory
/// failed, by name, for the line at exit when it never gets there. The
/// store keeps the changes themselves and writes them all with the next
/// whole state it manages to write: the names are cleared then.
#[derive(Debug, Default)]
pub(super) struct Unsaved {
    /// What each change not on disk did (`the end of session `x``), oldest
    /// first, at most [`Unsaved::NAMED`].
    named: Vec<String>,
    /// How many more there are.
    more: usize,
    /// The changes staged since the last commit, named in case the sync fails.
    staged: Vec<String>,
    /// When to write again (monotonic ms).
    retry_at: u64,
}

impl Unsaved {
    /// The most changes named at exit.
    const NAMED: usize = 50;

    /// Name a change that `store` could not write, unless the store writes
    /// nothing by design (another broker holds the file).
    fn name(&mut self, store: &dyn crate::state::Store, what: impl FnOnce() -> String) {
        if store.unsaved().is_none() {
            return;
        }
        if self.named.len() < Self::NAMED {
            self.named.push(what());
        } else {
            self.more += 1;
        }
    }

    /// Everything is on disk.
    fn saved(&mut self) {
        if !self.named.is_empty() {
            tracing::warn!(
                "the state is saved now, with what could not be written before: {}",
                self.names()
            );
        }
        self.named.clear();
        self.more = 0;
        self.retry_at = 0;
    }

    fn names(&self) -> String {
        let mut text = if self.named.is_empty() {
            "changes this broker made".to_string()
        } else {
            self.named.join("; ")
        };
        if self.more > 0 {
            text.push_str(&format!("; and {} more changes", self.more));
        }
        text
    }
}

/// Whether the state directory keeps a session: started or given a mode,
/// holding grants, or the parent of a kept session (an implicit parent).
pub(super) fn is_stored(session: &Session) -> bool {
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
    }
}

fn stored_grant(grant: &toolgate_policy::Grant, session_id: &str) -> StoredGrant {
    StoredGrant {
        grant_id: grant.id.clone(),
        permission: grant.permission.clone(),
        pattern: grant.pattern.as_str().to_string(),
        literal: grant.pattern.literal_len(),
        session_id: session_id.to_string(),
        mode: grant.plan_only.then(|| "plan".to_string()),
    }
}

/// A grant just made from `spec`, as stored.
pub(super) fn spec_grant(id: &str, spec: &GrantSpec, session_id: &str) -> StoredGrant {
    StoredGrant {
        grant_id: id.to_string(),
        permission: spec.permission.clone(),
        pattern: spec.pattern.as_str().to_string(),
        literal: spec.pattern.literal_len(),
        session_id: session_id.to_string(),
        mode: spec.plan_only.then(|| "plan".to_string()),
    }
}

/// A stored grant as the policy holds it, when its parts fit together.
fn stored_spec(stored: &StoredGrant) -> Option<GrantSpec> {
    Some(GrantSpec {
        permission: stored.permission.clone(),
        pattern: GrantPattern::from_parts(&stored.pattern, stored.literal)?,
        plan_only: match stored.mode.as_deref() {
            None => false,
            Some("plan") => true,
            Some(_) => return None,
        },
    })
}
