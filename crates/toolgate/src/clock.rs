//! Time and ids come from here, never from the broker itself, so that a
//! replay can inject its own and reproduce a run byte for byte.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Where the broker reads time.
pub trait Clock: Send {
    /// Milliseconds since the Unix epoch, for `timestamp` fields.
    fn wall_ms(&self) -> u64;
    /// Milliseconds on a monotonic clock, for deadlines.
    fn monotonic_ms(&self) -> u64;
}

/// The real clocks.
#[derive(Debug, Clone)]
pub struct SystemClock {
    start: Instant,
}

impl SystemClock {
    /// A clock whose monotonic time starts now.
    pub fn new() -> SystemClock {
        SystemClock {
            start: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn wall_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_millis() as u64)
            .unwrap_or(0)
    }

    fn monotonic_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
}

/// Where the broker gets ids for permission requests and grants.
pub trait IdSource: Send {
    /// A new `permissionID` (`per_...`).
    fn permission_id(&mut self) -> String;
    /// A new `grantID` (`grant_...`).
    fn grant_id(&mut self) -> String;
}

/// Random v4 UUIDs.
#[derive(Debug, Clone, Default)]
pub struct UuidIds;

impl IdSource for UuidIds {
    fn permission_id(&mut self) -> String {
        format!("per_{}", uuid::Uuid::new_v4())
    }

    fn grant_id(&mut self) -> String {
        format!("grant_{}", uuid::Uuid::new_v4())
    }
}

/// Counters: `per_1`, `per_2`, ... For tests and replays.
#[derive(Debug, Clone, Default)]
pub struct SequentialIds {
    permissions: u64,
    grants: u64,
}

impl IdSource for SequentialIds {
    fn permission_id(&mut self) -> String {
        self.permissions += 1;
        format!("per_{}", self.permissions)
    }

    fn grant_id(&mut self) -> String {
        self.grants += 1;
        format!("grant_{}", self.grants)
    }
}

/// A clock that moves only when told to: for tests and replays.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl ManualClock {
    /// A clock at 0.
    pub fn new() -> ManualClock {
        ManualClock::default()
    }

    /// Move the clock to `ms`, unless it reads later already (it never
    /// goes back).
    pub fn set(&self, ms: u64) {
        self.now_ms
            .fetch_max(ms, std::sync::atomic::Ordering::SeqCst);
    }

    /// Move the clock forward.
    pub fn advance(&self, ms: u64) {
        self.now_ms
            .fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn wall_ms(&self) -> u64 {
        self.now_ms.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn monotonic_ms(&self) -> u64 {
        self.now_ms.load(std::sync::atomic::Ordering::SeqCst)
    }
}
