//! The frames read but not yet fed: a call waits here until the recording
//! has said what the replay needs to know before feeding it (for toolgate's
//! own frames the time it was asked, recorded after it; for an agent's
//! transcript what became of it, its result coming after it), or until
//! [`AHEAD`] frames came after it, or the recording ended. What arrives for
//! a call still here is known before it is fed, as if the whole recording
//! had been read first; what arrives later finds it fed already.

use std::collections::{HashMap, VecDeque};

use super::event::Frame;
use super::record::CallKey;
use super::Format;

/// How many frames a call waits for what the recording says of it.
pub const AHEAD: usize = 4096;

/// What a call waits for before it is fed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Its time (toolgate's `permission_request`, after the call).
    Time,
    /// Its outcome (an agent's result, after the call).
    Outcome,
    /// Nothing: a record says everything with the call (an audit log).
    Nothing,
}

impl Wait {
    /// What a call of `format` waits for.
    pub fn of(format: Format) -> Wait {
        match format {
            Format::Toolgate => Wait::Time,
            Format::Claude | Format::Codex => Wait::Outcome,
            Format::Audit => Wait::Nothing,
        }
    }
}

/// A call held: how many of its frames are here, and whether what it waits
/// for came.
#[derive(Debug)]
struct Held {
    count: u32,
    known: bool,
}

/// The frames read and not yet fed, in order.
#[derive(Debug)]
pub struct Window {
    wait: Wait,
    queue: VecDeque<(Frame, Option<CallKey>)>,
    /// Looked up for every frame and outcome: a fast hasher (foldhash,
    /// seeded at random, so a recording cannot pick colliding ids).
    held: HashMap<CallKey, Held, foldhash::fast::RandomState>,
}

impl Window {
    /// An empty window for calls that wait for `wait`.
    pub fn new(wait: Wait) -> Window {
        Window {
            wait,
            queue: VecDeque::new(),
            held: HashMap::default(),
        }
    }

    /// A frame read.
    pub fn push(&mut self, frame: Frame) {
        let key = match frame.kind() {
            Some("tool_call") => frame.key(),
            _ => None,
        };
        if let Some(key) = &key {
            match self.held.get_mut(key) {
                Some(held) => held.count += 1,
                None => {
                    self.held.insert(
                        key.clone(),
                        Held {
                            count: 1,
                            known: self.wait == Wait::Nothing,
                        },
                    );
                }
            }
        }
        self.queue.push_back((frame, key));
    }

    /// Whether a call is here, not fed yet.
    pub fn holds(&self, key: &CallKey) -> bool {
        self.held.contains_key(key)
    }

    /// What the call `key` waited for (`what`) came: it need not wait more.
    pub fn known(&mut self, key: &CallKey, what: Wait) {
        if what == self.wait {
            if let Some(held) = self.held.get_mut(key) {
                held.known = true;
            }
        }
    }

    /// The next frame to feed, unless the first waits still (`end`: the
    /// recording ended, nothing waits). With it, its call when no other
    /// frame of that call is left here.
    pub fn next(&mut self, end: bool) -> Option<(Frame, Option<CallKey>)> {
        let (_, key) = self.queue.front()?;
        if let Some(key) = key {
            let waits = self.held.get(key).is_some_and(|held| !held.known);
            if waits && !end && self.queue.len() <= AHEAD {
                return None;
            }
        }
        let (frame, key) = self.queue.pop_front()?;
        let Some(key) = key else {
            return Some((frame, None));
        };
        let last = match self.held.get_mut(&key) {
            Some(held) if held.count > 1 => {
                held.count -= 1;
                false
            }
            _ => true,
        };
        if last {
            self.held.remove(&key);
            return Some((frame, Some(key)));
        }
        Some((frame, None))
    }
}
