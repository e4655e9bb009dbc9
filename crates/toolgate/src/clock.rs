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

/// `ms` since the Unix epoch as an RFC 3339 UTC time to the second
/// (`2026-11-24T03:21:39Z`), for people to read.
pub fn utc_text(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // The civil date of a day count (proleptic Gregorian; Howard Hinnant's
    // `civil_from_days`).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest / 60 % 60,
        rest % 60
    )
}

/// Milliseconds since the Unix epoch of `time` (0 before it).
pub fn epoch_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
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

#[cfg(test)]
mod tests {
    #[test]
    fn utc_text_of_milliseconds() {
        for (ms, text) in [
            (0, "1970-01-01T00:00:00Z"),
            (1_795_490_499_409, "2026-11-24T03:21:39Z"),
            (951_825_600_500, "2000-02-29T12:00:00Z"),
            (951_868_799_999, "2000-02-29T23:59:59Z"),
            (951_868_800_000, "2000-03-01T00:00:00Z"),
            (4_107_542_400_000, "2100-03-01T00:00:00Z"),
        ] {
            assert_eq!(super::utc_text(ms), text, "{ms}");
            // The replay's reader reads it back (to the second).
            assert_eq!(
                crate::replay::record::epoch_ms(text),
                Some(ms / 1000 * 1000),
                "{text}"
            );
        }
    }
}
