//! The stored state held as maps ([`Materialised`]): what a store has on
//! disk, the snapshot plus every journal record, so that applying a change
//! costs one lookup.

use std::collections::BTreeMap;

use super::format::{
    fingerprint_value, session_fingerprint, Change, Snapshot, StoredClosed, StoredGrant,
    StoredSession,
};

/// A snapshot held so that one change costs one lookup: what a store has
/// on disk, materialised (the snapshot plus every journal record).
#[derive(Debug, Clone, Default)]
pub(super) struct Materialised {
    version: u32,
    project_root: String,
    project_grants: Vec<StoredGrant>,
    sessions: BTreeMap<String, StoredSession>,
    /// Shut sessions: fingerprint → why (a few bytes each: a broker may
    /// have shut millions).
    closed: BTreeMap<u64, Why>,
}

/// Why a session is shut, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Why {
    Ended,
    Refused,
    /// Any other text a file held: kept as written (the broker decides what
    /// it means when it restores).
    Other(Box<str>),
}

impl Why {
    fn of(text: String) -> Why {
        match text.as_str() {
            "ended" => Why::Ended,
            "refused" => Why::Refused,
            _ => Why::Other(text.into_boxed_str()),
        }
    }

    fn text(&self) -> String {
        match self {
            Why::Ended => "ended".to_string(),
            Why::Refused => "refused".to_string(),
            Why::Other(text) => text.to_string(),
        }
    }
}

impl Materialised {
    pub(super) fn from_snapshot(snapshot: Snapshot) -> Materialised {
        let mut state = Materialised {
            version: snapshot.version,
            project_root: snapshot.project_root,
            ..Materialised::default()
        };
        for grant in snapshot.project_grants {
            upsert_grant(&mut state.project_grants, grant);
        }
        for session in snapshot.sessions {
            state.sessions.insert(session.session_id.clone(), session);
        }
        for closed in snapshot.closed {
            state.apply(Change::Closed(closed));
        }
        state
    }

    pub(super) fn snapshot(&self) -> Snapshot {
        Snapshot {
            version: self.version,
            project_root: self.project_root.clone(),
            project_grants: self.project_grants.clone(),
            sessions: self.sessions.values().cloned().collect(),
            closed: self
                .closed
                .iter()
                .map(|(print, why)| StoredClosed {
                    fingerprint: format!("{print:016x}"),
                    why: why.text(),
                })
                .collect(),
        }
    }

    pub(super) fn apply(&mut self, change: Change) {
        match change {
            Change::Session(session) => {
                self.closed
                    .remove(&session_fingerprint(&session.session_id));
                self.sessions.insert(session.session_id.clone(), session);
            }
            Change::RemoveSession(id) => {
                self.sessions.remove(&id);
            }
            Change::SessionGrant(grant) => {
                if let Some(session) = self.sessions.get_mut(&grant.session_id) {
                    upsert_grant(&mut session.grants, grant);
                }
            }
            Change::ProjectGrant(grant) => upsert_grant(&mut self.project_grants, grant),
            Change::RemoveProjectGrant(id) => {
                self.project_grants.retain(|grant| grant.grant_id != id);
            }
            Change::Closed(closed) => {
                // Checked when read (check_change, parse_state): an unusable
                // fingerprint never reaches a store.
                if let Some(print) = fingerprint_value(&closed.fingerprint) {
                    self.closed.insert(print, Why::of(closed.why));
                }
            }
        }
    }
}

fn upsert_grant(grants: &mut Vec<StoredGrant>, grant: StoredGrant) {
    match grants.iter_mut().find(|old| old.grant_id == grant.grant_id) {
        Some(old) => *old = grant,
        None => grants.push(grant),
    }
}
