//! Where the gateway's time comes from.
//!
//! Everything that reads the time — the store's expiries, token times, rate buckets, session
//! and sign-in lifetimes, caches and retry intervals — reads it from a [`Clock`], so that a
//! test moves time with [`ManualClock::advance`] instead of sleeping. A clock gives two
//! readings: [`Clock::now`], the wall-clock time (what is written down and compared across
//! instances: expiries, token `exp`), and [`Clock::instant`], a monotonic instant (for
//! intervals measured in this process: idle timeouts, refill rates, caches).
//!
//! This crate does nothing else: no timers, no sleeping, no async runtime.
//!
//! # Example
//!
//! ```
//! use mcp_clock::{Clock, ManualClock};
//! use time::macros::datetime;
//!
//! let clock = ManualClock::new(datetime!(2026-12-05 09:00 UTC));
//! let deadline = clock.now() + time::Duration::minutes(30);
//! clock.advance(time::Duration::minutes(31));
//! assert!(clock.now() > deadline, "a test moves time instead of sleeping");
//! ```

use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use time::{Duration, OffsetDateTime};

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The wall-clock time.
    fn now(&self) -> OffsetDateTime;

    /// A monotonic instant, for intervals within this process.
    fn instant(&self) -> Instant {
        Instant::now()
    }
}

impl fmt::Debug for dyn Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Clock").field("now", &self.now()).finish()
    }
}

/// The system's clocks.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// A clock that moves only when told to: both of its readings stand still until
/// [`ManualClock::advance`] moves them together.
#[derive(Debug)]
pub struct ManualClock {
    wall: Mutex<OffsetDateTime>,
    /// Where it started: its instants are `started` plus how far it was moved.
    start: (OffsetDateTime, Instant),
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: OffsetDateTime) -> Self {
        ManualClock {
            wall: Mutex::new(start),
            start: (start, Instant::now()),
        }
    }

    /// A clock stopped at the system's time now.
    pub fn stopped_now() -> Self {
        ManualClock::new(OffsetDateTime::now_utc())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        *self.wall.lock().unwrap_or_else(PoisonError::into_inner) += by;
    }

    /// Moves the clock forward by `by` (a `std` duration).
    pub fn advance_std(&self, by: std::time::Duration) {
        self.advance(Duration::try_from(by).unwrap_or(Duration::MAX));
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        *self.wall.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn instant(&self) -> Instant {
        let moved = std::time::Duration::try_from(self.now() - self.start.0).unwrap_or_default();
        self.start.1 + moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_stands_still_until_moved_and_moves_both_readings_together() {
        let start = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let clock = ManualClock::new(start);
        let (wall, instant) = (clock.now(), clock.instant());
        assert_eq!(clock.now(), wall);
        assert_eq!(clock.instant(), instant);
        clock.advance(Duration::seconds(90));
        assert_eq!(clock.now(), start + Duration::seconds(90));
        assert_eq!(
            clock.instant().duration_since(instant),
            std::time::Duration::from_secs(90)
        );
        clock.advance_std(std::time::Duration::from_millis(500));
        assert_eq!(clock.now(), start + Duration::milliseconds(90_500));
    }

    #[test]
    fn the_system_clock_reads_the_system_time() {
        let before = OffsetDateTime::now_utc();
        let read = SystemClock.now();
        assert!(read >= before && read <= OffsetDateTime::now_utc());
        let first = SystemClock.instant();
        assert!(SystemClock.instant() >= first);
    }
}
