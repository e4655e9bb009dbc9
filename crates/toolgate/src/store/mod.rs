//! The state that survives a restart (`--state-dir DIR`): per project root,
//! a snapshot file and a journal of the changes made since.
//!
//! - The snapshot for a project is `DIR/project-<16 hex digits>.json`, the
//!   digits being the 64-bit FNV-1a hash of the project root's path
//!   ([`state_file`]). It records `projectRoot`; a file whose `projectRoot`
//!   differs (a hash collision, or a copied file) is never used for another
//!   project: the store warns and moves on to `project-<hash>-2.json`, `-3`, ...
//! - Beside it, `project-<hash>.journal` ([`journal_file`]): one JSON line per
//!   [`Change`]. Its first line, `{"journalGeneration":N}`, names the snapshot
//!   it follows: the snapshot's `journalGeneration` field. A journal of
//!   another generation (or beside a snapshot that names none) is stale and
//!   ignored.
//! - A change is one `write` of its line to the journal: its cost is the
//!   size of the change, not of the state. Session starts are staged
//!   ([`Store::stage`]) and synced together (`fdatasync`) by
//!   [`Store::commit`], which the transport calls before it writes a batch
//!   of frames: one sync per batch of input lines. Grants and what shuts or
//!   narrows (a session ended or refused, a grant revoked, a mode set) are
//!   synced at once ([`Store::record`]), since their frame says whether
//!   saving failed. Either way nothing is reported before it is on disk.
//! - A failed write leaves the change in [`Store::unsaved`]: the store keeps
//!   it, and the next change or [`Store::retry`] writes the whole state.
//! - Compaction: when the journal outgrows twice the snapshot and
//!   [`COMPACT_FLOOR`] (1 MiB; [`COMPACT_FLOOR_ENV`] changes it, for tests),
//!   the whole state is written as a new snapshot under generation N+1, then
//!   a new journal holding only its header. Each file is replaced atomically
//!   (written to a temporary file in the same directory, synced, renamed
//!   over, directory synced). A crash between the two leaves the new
//!   snapshot and a stale journal: nothing is lost or applied twice. The
//!   first change after a start that found no usable journal compacts too.
//! - Loading reads the snapshot and replays the journal. A last line without
//!   its newline is a write that was never confirmed (so never reported): it
//!   is ignored with a warning, and the next change starts a new journal
//!   rather than append after it. Any other line that is not a change (the
//!   header included) keeps the broker from starting (fail closed: nothing
//!   after a bad record can be trusted to be complete, and a lost revocation
//!   or session end must not come back as a grant or an open session) until
//!   [`repair()`]. A snapshot that names no journal generation ignores
//!   whatever journal is beside it.
//! - Opening fails for such a journal, and likewise for a snapshot that
//!   cannot be read, is not JSON, has another `version` or does not fit
//!   together, and for a journal with no snapshot beside it: starting clean
//!   would forget which sessions ended and which grants were revoked.
//!   Nothing is moved; [`repair()`] keeps what can be read.
//! - One broker per project root and state directory at a time: the broker
//!   holds `<file>.lock` (an advisory lock); a second one reads the state but
//!   keeps its changes in memory.
//! - Sessions are kept when they were started, given a mode, hold grants or
//!   are the parent of a kept session (an implicit parent is marked
//!   `implicit`), with whether they were `started`. Every session that ended or
//!   whose start was refused is kept, without a count bound, as the
//!   fingerprint of its id ([`session_fingerprint`]) in `closed`.
//!
//! [`repair()`] serves `toolgate state repair`: a journal with a bad line
//! before its last keeps the broker from starting, and the repair keeps
//! every record that can be read.
//!
//! [`list_grants`] and [`revoke_grants`] serve `toolgate grants list|revoke`,
//! which read the snapshot and the journal, and work while no broker holds
//! the files (a revocation writes a snapshot that names no journal).
//!
//! The files of this module, by job: `format` (what is on disk: the
//! snapshot, a journal line, parsing, checking and encoding them),
//! `materialised` (the state as maps, a change applied in one lookup),
//! `load` (a snapshot read and its journal replayed), `files` (paths, atomic
//! replacement, locks), `file_store` ([`FileStore`]), `memory`
//! ([`MemoryStore`]), `grants` (`toolgate grants list|revoke`), `repair`
//! and `error`.

mod error;
mod file_store;
mod files;
mod format;
mod grants;
mod load;
mod materialised;
mod memory;
mod repair;

pub use error::{Invalid, IoOp, JournalDamage, StateError, Task, Unreadable};
pub use file_store::{FileStore, COMPACT_FLOOR, COMPACT_FLOOR_ENV};
pub use files::{journal_file, state_file, write_snapshot};
pub use format::{
    parse_snapshot, session_fingerprint, Change, Snapshot, StoredClosed, StoredGrant, StoredJoined,
    StoredSession, VERSION,
};
pub use grants::{grants_table, list_grants, revoke_grants, GrantRow, GrantScope, Revoked};
pub use memory::MemoryStore;
pub use repair::{repair, LineLoss, Repaired};

/// Where the broker saves its state.
pub trait Store: Send {
    /// Make `changes` durable, in order, before returning (the broker reports
    /// a change only after this returned). The error says what failed.
    fn record(&mut self, changes: &[Change]) -> Result<(), StateError>;
    /// Record `changes` without waiting for the disk: they are durable once
    /// [`Store::commit`] (or a later [`Store::record`]) returned. For changes
    /// whose frames the transport writes only after committing (group
    /// commit: one sync for a batch of frames). By default, [`Store::record`].
    fn stage(&mut self, changes: &[Change]) -> Result<(), StateError> {
        self.record(changes)
    }
    /// Make every staged change durable. The error says what failed.
    fn commit(&mut self) -> Result<(), StateError> {
        Ok(())
    }
    /// Replace the whole stored state with `snapshot`. The error says what failed.
    fn save(&mut self, snapshot: &Snapshot) -> Result<(), StateError>;
    /// Why changes this store accepted are not all on disk, when a write
    /// failed: they are kept, and written by the next successful
    /// [`Store::retry`] or change. `None` when everything accepted is on
    /// disk, and for a store that writes nothing by design (another broker
    /// holds the file): it lost nothing it tried to write.
    fn unsaved(&self) -> Option<StateError> {
        None
    }
    /// Try again to write everything accepted, when a write failed. Ok when
    /// nothing is unsaved (any more); the error says what failed.
    fn retry(&mut self) -> Result<(), StateError> {
        Ok(())
    }
}
