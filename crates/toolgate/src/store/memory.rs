//! [`MemoryStore`]: a store that keeps everything in memory, for tests.

use std::sync::{Arc, Mutex, PoisonError};

use super::error::StateError;
use super::format::{sorted, Change, Snapshot};
use super::materialised::Materialised;
use super::Store;

/// A store in memory, for tests: clones share what was recorded, so a test
/// can keep one and hand the other to a broker.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    shared: Arc<Mutex<MemoryState>>,
}

#[derive(Debug, Default)]
struct MemoryState {
    state: Materialised,
    saved: Vec<Snapshot>,
    changes: Vec<Vec<Change>>,
    failure: Option<String>,
    /// A whole state that failed to be saved, then the changes that failed
    /// to be recorded after it, in order: kept for the next success.
    pending_save: Option<Snapshot>,
    pending: Vec<Vec<Change>>,
    /// The failure that left something pending.
    unsaved: Option<StateError>,
}

impl MemoryState {
    /// Write what failures left, then `changes` (`None`: a retry).
    fn apply(&mut self, changes: Option<&[Change]>) {
        if let Some(snapshot) = self.pending_save.take() {
            self.state = Materialised::from_snapshot(snapshot);
        }
        let pending = std::mem::take(&mut self.pending);
        for change in pending.iter().flatten().chain(changes.unwrap_or_default()) {
            self.state.apply(change.clone());
        }
        self.unsaved = None;
        if let Some(changes) = changes {
            self.changes.push(changes.to_vec());
        }
        let snapshot = self.state.snapshot();
        self.saved.push(snapshot);
    }
}

impl MemoryStore {
    /// A store that has saved nothing.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// The state after each successful save or record, oldest first.
    pub fn saved(&self) -> Vec<Snapshot> {
        self.lock().saved.clone()
    }

    /// The state after the last successful save or record.
    pub fn last(&self) -> Option<Snapshot> {
        self.lock().saved.last().cloned()
    }

    /// The changes of each successful record, oldest first.
    pub fn changes(&self) -> Vec<Vec<Change>> {
        self.lock().changes.clone()
    }

    /// Make later saves fail with `reason` (`None`: succeed again).
    pub fn fail_with(&self, reason: Option<&str>) {
        self.lock().failure = reason.map(str::to_string);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryState> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Store for MemoryStore {
    fn record(&mut self, changes: &[Change]) -> Result<(), StateError> {
        let mut state = self.lock();
        if let Some(reason) = state.failure.clone() {
            let err = StateError::Injected(reason);
            state.pending.push(changes.to_vec());
            state.unsaved = Some(err.clone());
            return Err(err);
        }
        state.apply(Some(changes));
        Ok(())
    }

    fn save(&mut self, snapshot: &Snapshot) -> Result<(), StateError> {
        let mut state = self.lock();
        if let Some(reason) = state.failure.clone() {
            let err = StateError::Injected(reason);
            state.pending_save = Some(sorted(snapshot.clone()));
            state.pending.clear();
            state.unsaved = Some(err.clone());
            return Err(err);
        }
        state.state = Materialised::from_snapshot(sorted(snapshot.clone()));
        state.pending_save = None;
        state.pending.clear();
        state.unsaved = None;
        let snapshot = state.state.snapshot();
        state.saved.push(snapshot);
        Ok(())
    }

    fn unsaved(&self) -> Option<StateError> {
        self.lock().unsaved.clone()
    }

    fn retry(&mut self) -> Result<(), StateError> {
        let mut state = self.lock();
        if state.unsaved.is_none() {
            return Ok(());
        }
        if let Some(reason) = state.failure.clone() {
            let err = StateError::Injected(reason);
            state.unsaved = Some(err.clone());
            return Err(err);
        }
        state.apply(None);
        Ok(())
    }
}
