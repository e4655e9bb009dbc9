//! `toolgate replay`: recorded sessions fed through a fresh broker,
//! deterministically, as a stream. [`source`] reads each file line by
//! line (never whole); each format's reader ([`event::Reader`]) turns the
//! lines into [`event::Event`]s in the recording's order; a
//! [`window::Window`] holds a call until the recording has said what
//! became of it (or a few thousand frames passed); a [`driver::Replay`]
//! feeds the frames to the broker core (the same `Broker::step` every
//! transport drives) and answers the questions it asks from those
//! outcomes; [`report::Tally`] gathers `--summary`, `--check` and
//! `--compare` call by call. What is kept is about the calls in flight,
//! never the recording: memory does not grow with its size.
//!
//! Nothing comes from the wall clock or a random source: permission ids
//! count up (`per_1`, `per_2`, ... in each replayed file), grant ids too,
//! and the clock reads the recorded time of the call being judged (0 where
//! the recording has none). The same files and flags give the same bytes.

pub mod audit;
pub mod claude;
pub mod cli;
pub mod codex;
pub mod driver;
pub mod event;
pub mod frames;
pub mod read;
pub mod record;
pub mod report;
pub mod source;
pub mod window;

use serde_json::Value;

/// The formats `toolgate replay` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// toolgate's own frames.
    Toolgate,
    /// toolgate's audit log (`serve --audit`).
    Audit,
    /// A Claude Code session transcript.
    Claude,
    /// A Codex rollout.
    Codex,
}

impl Format {
    /// The format a line (a JSON value) says its file is in, if it says.
    pub fn detect(value: &Value) -> Option<Format> {
        if frames::is_frame(value) {
            return Some(Format::Toolgate);
        }
        if audit::is_record(value) {
            return Some(Format::Audit);
        }
        if claude::is_record(value) {
            return Some(Format::Claude);
        }
        if codex::is_record(value) {
            return Some(Format::Codex);
        }
        None
    }
}

/// How the questions of a replay were answered, and what of the recording
/// it set aside: what `--summary` says about the replay itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Notes {
    /// Answered with a person's recorded answer (or toolgate's own).
    pub recorded: usize,
    /// Answered `reject` because the recording says the call was refused.
    pub refusals: usize,
    /// Answered `once` only because the recording says the call ran, not
    /// why: an inference.
    pub inferred: usize,
    /// Left unanswered: the agent's own configuration allowed the call, so
    /// nobody was asked and the recording holds no answer (or it holds no
    /// outcome at all).
    pub unanswered: usize,
    /// Recorded mode changes (and session modes) set aside because a mode
    /// was given for the whole replay.
    pub modes_ignored: usize,
}

impl Notes {
    /// Add another replay's notes.
    pub fn add(&mut self, other: &Notes) {
        self.recorded += other.recorded;
        self.refusals += other.refusals;
        self.inferred += other.inferred;
        self.unanswered += other.unanswered;
        self.modes_ignored += other.modes_ignored;
    }
}
