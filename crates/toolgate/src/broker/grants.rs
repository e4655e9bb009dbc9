//! Grants made by `always` answers: the project's (a part of the broker,
//! [`ProjectGrants`], with the session that made each) and the sessions'
//! own, recorded (and saved before the decision that reports them), listed,
//! revoked, the plan-only kind grants dropped when a session leaves plan
//! mode, and the grants whose lifetime is over dropped (checked on the
//! broker's wall clock at every step, never by a timer; the policy also
//! refuses to let an ended grant cover). Invariant: a grant only ever
//! turns an ask into an allow.

use std::collections::HashMap;

use toolgate_policy::{Grant, GrantAdded, GrantPattern, GrantSpec, Grants, Mode};
use toolgate_protocol as wire;
use toolgate_protocol::{ErrorCode, ServerFrame};

use super::outbox::Outbox;
use super::Broker;
use crate::store::{Change, StoredGrant};

/// The grants kept for every session of the project, and the session that
/// made each.
#[derive(Default)]
pub(super) struct ProjectGrants {
    grants: Grants,
    /// The session that made each project grant, by grant id.
    owners: HashMap<String, String>,
}

impl ProjectGrants {
    /// The project's grants, as the policy judges them.
    pub(super) fn all(&self) -> &Grants {
        &self.grants
    }

    /// Add a grant made by `owner` (or lengthen an equal one): the grant
    /// as now stored, `None` when an equal one lasting as long was there.
    fn add(&mut self, id: String, spec: &GrantSpec, owner: &str) -> Option<StoredGrant> {
        let (added, grant) = self.grants.add(id, spec);
        let grant = match added {
            GrantAdded::Unchanged => return None,
            GrantAdded::New | GrantAdded::Lengthened => grant.clone(),
        };
        if added == GrantAdded::New {
            self.owners.insert(grant.id.clone(), owner.to_string());
        }
        Some(stored_grant(&grant, self.owner(&grant.id)))
    }

    /// Add a grant from a fleet's store, made by `owner`: whether it is new
    /// (or lengthens an equal one).
    pub(super) fn add_shared(&mut self, id: String, spec: &GrantSpec, owner: &str) -> bool {
        self.add(id, spec, owner).is_some()
    }

    /// Drop the grants whose lifetime is over at `now`; returns them.
    fn expire(&mut self, now: u64) -> Vec<Grant> {
        let expired = self.grants.expire(now);
        for grant in &expired {
            self.owners.remove(&grant.id);
        }
        expired
    }

    /// Remove a grant by id; false when there is none.
    pub(super) fn remove(&mut self, id: &str) -> bool {
        if self.grants.remove(id).is_none() {
            return false;
        }
        self.owners.remove(id);
        true
    }

    /// The session that made a grant ("" when unknown).
    fn owner(&self, id: &str) -> &str {
        self.owners.get(id).map(String::as_str).unwrap_or_default()
    }

    /// The permissions `own` (a session's grants) and the project's grants
    /// cover whole (`*`) in `mode`, each once, with whether that grant lasts
    /// only while in plan mode (a grant for every mode wins).
    pub(super) fn kind_grants(&self, own: Option<&Grants>, mode: Mode) -> Vec<(String, bool)> {
        let mut granted: Vec<(String, bool)> = Vec::new();
        for grant in own
            .into_iter()
            .flat_map(Grants::iter)
            .chain(self.grants.iter())
        {
            let whole = grant.pattern.literal_len() == 0 && grant.pattern.as_str() == "*";
            if !whole || (grant.plan_only && mode != Mode::Plan) {
                continue;
            }
            match granted.iter_mut().find(|(p, _)| *p == grant.permission) {
                Some(entry) => entry.1 &= grant.plan_only,
                None => granted.push((grant.permission.clone(), grant.plan_only)),
            }
        }
        granted
    }

    /// The project's grants as the state directory keeps them.
    pub(super) fn stored(&self) -> Vec<StoredGrant> {
        self.grants
            .iter()
            .map(|grant| stored_grant(grant, self.owner(&grant.id)))
            .collect()
    }

    /// Take the project grants of a snapshot; an unusable one is dropped
    /// with a warning.
    pub(super) fn restore(&mut self, stored: &[StoredGrant], warnings: &mut Vec<String>) {
        for stored in stored {
            match stored_spec(stored) {
                Some(spec) => {
                    self.grants.add(stored.grant_id.clone(), &spec);
                    self.owners
                        .insert(stored.grant_id.clone(), stored.session_id.clone());
                }
                None => warnings.push(format!(
                    "the stored project grant `{}` is unusable and was dropped",
                    stored.grant_id
                )),
            }
        }
    }
}

impl Broker {
    /// Record an `always` answer's grants in the session or the project, and
    /// save them when there is a state directory.
    pub(super) fn record_grants(
        &mut self,
        session_id: &str,
        granted: &[GrantSpec],
        scope: wire::GrantScope,
    ) -> Result<(), String> {
        let ids: Vec<String> = granted.iter().map(|_| self.ids.grant_id()).collect();
        let mut changes = Vec::new();
        // The grants recorded (new or lengthened), by id, for `notSaved`.
        let mut recorded: Vec<String> = Vec::new();
        match scope {
            wire::GrantScope::Project => {
                for (id, spec) in ids.into_iter().zip(granted) {
                    if let Some(stored) = self.grants.add(id, spec, session_id) {
                        recorded.push(stored.grant_id.clone());
                        changes.push(Change::ProjectGrant(stored));
                    }
                }
            }
            wire::GrantScope::Session => {
                // A session already stored gets just its new grants.
                let stored = self.sessions.is_stored(session_id);
                let session = self.sessions.entry(session_id, self.policy.default_mode);
                for (id, spec) in ids.into_iter().zip(granted) {
                    let (added, grant) = session.grants.add(id, spec);
                    if added == GrantAdded::Unchanged {
                        continue;
                    }
                    recorded.push(grant.id.clone());
                    if stored {
                        changes.push(Change::SessionGrant(stored_grant(grant, session_id)));
                    }
                }
                if !stored {
                    changes.push(self.sessions.stored_change(session_id));
                }
            }
        }
        if let Some(end) = granted.iter().filter_map(|spec| spec.expires_at).min() {
            self.next_expiry = Some(self.next_expiry.map_or(end, |next| next.min(end)));
        }
        let what = format!(
            "the grants {} of session `{session_id}`",
            recorded.join(", ")
        );
        self.store
            .persist_now(self.clock.as_ref(), &changes, || what)
    }

    /// Drop every grant whose lifetime is over on the broker's wall clock,
    /// from the project, the sessions and the state directory (staged, like
    /// a session start: a grant that ended covers nothing whether or not its
    /// removal is on disk, and one read back after its end is dropped
    /// again). Called at the start of every step; costs one clock reading
    /// while no grant has ended.
    pub(super) fn expire_grants(&mut self) {
        let Some(next) = self.next_expiry else {
            return;
        };
        let now = self.clock.wall_ms();
        if now < next {
            return;
        }
        let mut ended: Vec<String> = Vec::new();
        let mut changes = Vec::new();
        for grant in self.grants.expire(now) {
            changes.push(Change::RemoveProjectGrant(grant.id.clone()));
            ended.push(grant.id);
        }
        let mut holders: Vec<String> = Vec::new();
        for (holder, session) in self.sessions.iter_mut() {
            let expired = session.grants.expire(now);
            if !expired.is_empty() {
                holders.push(holder.clone());
                ended.extend(expired.into_iter().map(|grant| grant.id));
            }
        }
        for holder in &holders {
            changes.push(self.sessions.stored_change(holder));
        }
        // The failure is logged and retried by the store; no frame reports it.
        let _ = self.store.persist(self.clock.as_ref(), &changes, || {
            format!("the end of the expired grants {}", ended.join(", "))
        });
        for holder in &holders {
            self.sessions.forget_idle(holder);
        }
        self.next_expiry = self.earliest_expiry();
    }

    /// When the first grant of the project or of any session ends, if any
    /// has a lifetime.
    pub(super) fn earliest_expiry(&self) -> Option<u64> {
        self.sessions
            .iter()
            .filter_map(|(_, session)| session.grants.next_expiry())
            .chain(self.grants.all().next_expiry())
            .min()
    }

    /// A kind grant made in plan mode ends when its session leaves plan mode:
    /// drop the plan-only grants of each of `ids` whose effective mode was
    /// plan (`before`, in the same order) and is no longer. Returns the
    /// sessions that lost grants (to be saved).
    pub(super) fn end_plan_grants(&mut self, ids: &[String], before: &[Mode]) -> Vec<String> {
        let mut changed = Vec::new();
        for (id, previous) in ids.iter().zip(before) {
            if *previous == Mode::Plan && self.effective_mode(id) != Mode::Plan {
                if let Some(session) = self.sessions.get_mut(id) {
                    if !session.grants.drop_plan_only().is_empty() {
                        changed.push(id.clone());
                    }
                }
            }
        }
        changed
    }

    /// Remove a session or project grant by id (and from the state
    /// directory); the answer is the `grants` frame, or `unknown_grant`.
    pub(super) fn revoke_grant(&mut self, revoke: wire::RevokeGrant, ob: &mut Outbox<'_>) {
        let id = &revoke.grant_id;
        let removed = if self.grants.remove(id) {
            Some(Change::RemoveProjectGrant(id.clone()))
        } else {
            let holder = self
                .sessions
                .iter_mut()
                .find_map(|(holder, session)| session.grants.remove(id).map(|_| holder.clone()));
            holder.map(|holder| self.sessions.stored_change(&holder))
        };
        if let Some(change) = removed {
            // In a fleet's store too: every broker drops it.
            self.share_revocation(id, ob.caller());
            // On disk before it is reported; should that fail, the grant is
            // gone from memory all the same and the frame says so.
            let saved = self.store.persist_now(self.clock.as_ref(), &[change], || {
                format!("the revocation of grant `{id}`")
            });
            let from = ob.len();
            ob.reply(self.grants_frame(None));
            if let Err(err) = saved {
                ob.not_saved(from, &err);
            }
        } else {
            ob.error(
                ErrorCode::UnknownGrant,
                format!("no grant has the id `{}`", revoke.grant_id),
            );
        }
    }

    pub(super) fn grants_frame(&self, session_filter: Option<&str>) -> ServerFrame {
        let mut sessions: Vec<_> = self
            .sessions
            .iter()
            .filter(|(id, _)| session_filter.is_none_or(|filter| filter == id.as_str()))
            .collect();
        sessions.sort_by(|a, b| a.0.cmp(b.0));
        let project = self.grants.all().iter().map(|grant| wire::GrantInfo {
            grant_id: grant.id.clone(),
            session_id: self.grants.owner(&grant.id).to_string(),
            scope: wire::GrantScope::Project,
            permission: grant.permission.clone(),
            pattern: grant.pattern.as_str().to_string(),
            mode: grant.plan_only.then(|| "plan".to_string()),
            expires_at: grant.expires_at,
        });
        let grants = project
            .chain(sessions.into_iter().flat_map(|(session_id, session)| {
                session.grants.iter().map(move |grant| wire::GrantInfo {
                    grant_id: grant.id.clone(),
                    session_id: session_id.clone(),
                    scope: wire::GrantScope::Session,
                    permission: grant.permission.clone(),
                    pattern: grant.pattern.as_str().to_string(),
                    mode: grant.plan_only.then(|| "plan".to_string()),
                    expires_at: grant.expires_at,
                })
            }))
            .collect();
        ServerFrame::Grants(wire::Grants {
            grants,
            not_saved: None,
        })
    }
}

/// A grant as the state directory keeps it, made by `session_id`.
pub(super) fn stored_grant(grant: &Grant, session_id: &str) -> StoredGrant {
    StoredGrant {
        grant_id: grant.id.clone(),
        permission: grant.permission.clone(),
        pattern: grant.pattern.as_str().to_string(),
        literal: grant.pattern.literal_len(),
        session_id: session_id.to_string(),
        mode: grant.plan_only.then(|| "plan".to_string()),
        expires_at: grant.expires_at,
    }
}

/// A stored grant as the policy holds it, when its parts fit together.
pub(super) fn stored_spec(stored: &StoredGrant) -> Option<GrantSpec> {
    Some(GrantSpec {
        permission: stored.permission.clone(),
        pattern: GrantPattern::from_parts(&stored.pattern, stored.literal)?,
        plan_only: match stored.mode.as_deref() {
            None => false,
            Some("plan") => true,
            Some(_) => return None,
        },
        expires_at: stored.expires_at,
    })
}
