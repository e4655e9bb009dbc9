//! What the broker keeps in the state directory: its store part
//! ([`StateStore`]: [`Change`] records staged as frames are handled and made
//! durable by `commit` before the transport writes the frames that report
//! them, and what a failed write left unsaved), the whole [`Snapshot`], and
//! restoring from one. The parts say what they keep (`Sessions::stored`,
//! `ProjectGrants::stored`); this module only puts it together. Invariant:
//! a stored part that cannot be used is dropped or kept more strictly than
//! written (readonly mode, deny-all scope), never more loosely.

use super::Broker;
use crate::clock::Clock;
use crate::store::{Change, Snapshot, StateError, Store};

/// Where the state survives restarts, when it does, and what is in force
/// but not on disk because a write failed.
#[derive(Default)]
pub(super) struct StateStore {
    store: Option<Box<dyn Store>>,
    unsaved: Unsaved,
}

impl StateStore {
    /// Stage `changes` in the state directory, when there is one: they are
    /// durable once [`Broker::commit`] returned, which the transport calls
    /// before it writes the frames that report them. `what` names them (`the
    /// start of session `x``) should they never reach the disk. A failure is
    /// logged and returned as its text, for the frame's `notSaved`; the
    /// broker carries on with its state in memory and retries (see
    /// [`Unsaved`]).
    pub(super) fn persist(
        &mut self,
        clock: &dyn Clock,
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
                self.unsaved.retry_at = clock.monotonic_ms().saturating_add(RETRY_MS);
                Err(err.to_string())
            }
        }
    }

    /// Record `changes` durably now (with whatever was staged), for a
    /// change whose frame says whether saving it failed: grants, and every
    /// change that shuts or narrows something (a session ended or refused,
    /// a grant revoked, a mode set), so that it is on disk before it is
    /// reported done. `what` names them; see [`StateStore::persist`].
    pub(super) fn persist_now(
        &mut self,
        clock: &dyn Clock,
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
                self.unsaved.retry_at = clock.monotonic_ms().saturating_add(RETRY_MS);
                Err(err.to_string())
            }
        }
    }

    /// Keep state in `store` from now on; with `repaired`, `snapshot` (the
    /// state as the broker holds it after repairs) is written at once.
    fn start(&mut self, store: Box<dyn Store>, repaired: Option<Snapshot>) {
        let store = self.store.insert(store);
        if let Some(snapshot) = repaired {
            if let Err(err) = store.save(&snapshot) {
                tracing::warn!("the repaired state could not be saved: {err}");
                self.unsaved
                    .name(&**store, || "the state as repaired at start".to_string());
            }
        }
    }

    /// Sync what was staged; should that fail, name it as unsaved.
    fn commit_staged(&mut self, clock: &dyn Clock) {
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
            self.unsaved.retry_at = clock.monotonic_ms().saturating_add(RETRY_MS);
        }
    }

    /// When a write to the state directory failed and what it carried is
    /// not on disk yet: when to try again (monotonic ms).
    pub(super) fn retry_deadline(&self) -> Option<u64> {
        let store = self.store.as_ref()?;
        store.unsaved().map(|_| self.unsaved.retry_at)
    }

    /// Write again what a failed write left unsaved, when it is time (or
    /// `now`). Err while it is still not on disk.
    fn retry_saving(&mut self, clock: &dyn Clock, now: bool) -> Result<(), StateError> {
        let Some(store) = self.store.as_mut() else {
            return Ok(());
        };
        let Some(err) = store.unsaved() else {
            // A later change rewrote the whole state.
            self.unsaved.saved();
            return Ok(());
        };
        let time = clock.monotonic_ms();
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

impl Broker {
    /// Keep state in `store` from now on, starting from `snapshot` (what the
    /// store held). Returns warnings about parts of the snapshot that could
    /// not be used; those parts are dropped, or kept more strictly than
    /// written, never more loosely.
    pub fn restore(&mut self, store: Box<dyn Store>, snapshot: Snapshot) -> Vec<String> {
        let mut warnings = Vec::new();
        self.grants.restore(&snapshot.project_grants, &mut warnings);
        let repaired = self.sessions.restore(
            &self.policy,
            &snapshot.sessions,
            &snapshot.closed,
            &mut warnings,
        );
        // What was repaired is stored as the broker holds it.
        let repaired = (repaired || !warnings.is_empty()).then(|| self.snapshot());
        self.store.start(store, repaired);
        // Grants whose lifetime is over are dropped (and the drop stored)
        // by the first step.
        self.next_expiry = self.earliest_expiry();
        warnings
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
        Snapshot {
            version: 1,
            project_root: self.policy.project_root.to_string_lossy().into_owned(),
            project_grants: self.grants.stored(),
            sessions: self.sessions.stored(),
            closed: self.sessions.stored_closed(),
        }
    }

    /// Make every staged change durable (one sync for a batch of frames).
    /// Call it before writing the frames `handle_line` produced: they may
    /// report those changes. A failure is logged. Then, when a write failed
    /// earlier, the whole state is written again, at most once every
    /// `RETRY_MS` (the deadline thread also wakes for it, see
    /// [`Broker::next_deadline`]).
    pub fn commit(&mut self) {
        self.store.commit_staged(self.clock.as_ref());
        let _ = self.store.retry_saving(self.clock.as_ref(), false);
    }

    /// Make what is staged durable and, when a write failed earlier, write
    /// the whole state again now. The error is the last write's, while
    /// something in force is still not on disk.
    pub fn save_now(&mut self) -> Result<(), StateError> {
        self.store.commit_staged(self.clock.as_ref());
        self.store.retry_saving(self.clock.as_ref(), true)
    }

    /// At exit: [`Broker::save_now`]; the error names what is lost and why,
    /// for the line on stderr and a failing exit status.
    pub fn finish_saving(&mut self) -> Result<(), Lost> {
        self.save_now().map_err(|err| {
            Lost(format!(
                "not saved in the state directory ({err}), so lost at exit: {}",
                self.store.unsaved.names()
            ))
        })
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
struct Unsaved {
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
    fn name(&mut self, store: &dyn crate::store::Store, what: impl FnOnce() -> String) {
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
