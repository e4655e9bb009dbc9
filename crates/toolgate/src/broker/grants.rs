//! Grants made by `always` answers: recorded in the session or for the
//! whole project (and saved before the decision that reports them),
//! listed, revoked, and the plan-only kind grants dropped when a session
//! leaves plan mode. Invariant: a grant only ever turns an ask into an allow.

use toolgate_policy::{GrantSpec, Grants, Mode};
use toolgate_protocol as wire;
use toolgate_protocol::{ErrorCode, ServerFrame};

use super::persistence::{is_stored, spec_grant};
use super::sessions::{not_saved, Session};
use super::{error, Broker};
use crate::state::Change;

impl Broker {
    /// The permissions a session's and the project's grants cover whole
    /// (`*`) in `mode`, each once, with whether that grant lasts only while in
    /// plan mode (a grant for every mode wins).
    pub(super) fn kind_grants(&self, session_id: &str, mode: Mode) -> Vec<(String, bool)> {
        let own = self.sessions.get(session_id).map(|session| &session.grants);
        let mut granted: Vec<(String, bool)> = Vec::new();
        for grant in own
            .into_iter()
            .flat_map(Grants::iter)
            .chain(self.project_grants.iter())
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

    /// Record an `always` answer's grants in the session or the project, and
    /// save them when there is a state directory.
    pub(super) fn record_grants(
        &mut self,
        session_id: &str,
        granted: &[GrantSpec],
        scope: wire::GrantScope,
    ) -> Result<(), String> {
        let ids: Vec<String> = granted.iter().map(|_| self.ids.grant_id()).collect();
        let what = format!("the grants {} of session `{session_id}`", ids.join(", "));
        let mut changes = Vec::new();
        match scope {
            wire::GrantScope::Project => {
                for (id, spec) in ids.into_iter().zip(granted) {
                    if self.project_grants.add(id.clone(), spec) {
                        changes.push(Change::ProjectGrant(spec_grant(&id, spec, session_id)));
                        self.project_grant_owners.insert(id, session_id.to_string());
                    }
                }
            }
            wire::GrantScope::Session => {
                let session = self.session_entry(session_id);
                // A session already stored gets just its new grants.
                let stored = is_stored(session);
                for (id, spec) in ids.into_iter().zip(granted) {
                    if session.grants.add(id.clone(), spec) && stored {
                        changes.push(Change::SessionGrant(spec_grant(&id, spec, session_id)));
                    }
                }
                if !stored {
                    changes.push(self.stored_change(session_id));
                }
            }
        }
        self.persist_now(&changes, || what)
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
    pub(super) fn revoke_grant(
        &mut self,
        revoke: wire::RevokeGrant,
        number: u64,
        out: &mut Vec<ServerFrame>,
    ) {
        let id = &revoke.grant_id;
        let removed = if self.project_grants.remove(id).is_some() {
            self.project_grant_owners.remove(id);
            Some(Change::RemoveProjectGrant(id.clone()))
        } else {
            self.sessions
                .iter_mut()
                .find_map(|(holder, session)| session.grants.remove(id).map(|_| holder.clone()))
                .map(|holder| self.stored_change(&holder))
        };
        if let Some(change) = removed {
            // On disk before it is reported; should that fail, the grant is
            // gone from memory all the same and the frame says so.
            let saved = self.persist_now(&[change], || format!("the revocation of grant `{id}`"));
            let mut frame = self.grants_frame(None);
            if let Err(err) = saved {
                not_saved(std::slice::from_mut(&mut frame), &err);
            }
            out.push(frame);
        } else {
            out.push(error(
                ErrorCode::UnknownGrant,
                format!("no grant has the id `{}`", revoke.grant_id),
                None,
                Some(number),
            ));
        }
    }

    pub(super) fn grants_frame(&self, session_filter: Option<&str>) -> ServerFrame {
        let mut sessions: Vec<(&String, &Session)> = self
            .sessions
            .iter()
            .filter(|(id, _)| session_filter.is_none_or(|filter| filter == id.as_str()))
            .collect();
        sessions.sort_by(|a, b| a.0.cmp(b.0));
        let project = self.project_grants.iter().map(|grant| wire::GrantInfo {
            grant_id: grant.id.clone(),
            session_id: self
                .project_grant_owners
                .get(&grant.id)
                .cloned()
                .unwrap_or_default(),
            scope: wire::GrantScope::Project,
            permission: grant.permission.clone(),
            pattern: grant.pattern.as_str().to_string(),
            mode: grant.plan_only.then(|| "plan".to_string()),
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
                })
            }))
            .collect();
        ServerFrame::Grants(wire::Grants {
            grants,
            not_saved: None,
        })
    }
}
