//! Per-caller rate limits: a token bucket per caller for tool calls, and one for creating
//! elicitations (confirmations among them). Over a limit, a tool call gets an in-band error
//! result and the REST API answers 429 with `Retry-After`.
//!
//! The buckets live in this instance's memory: with N instances behind a balancer a caller
//! gets up to N times the rate (docs/operations.md says so). Buckets that are full again are
//! forgotten, so the table holds only callers active within the last refill period.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use elicitation_store::{Caller, Clock, SystemClock};

/// The most callers tracked at once; beyond it the fullest buckets are dropped (a dropped
/// bucket is a full one, so forgetting it never lets a caller exceed its burst).
const MAX_TRACKED: usize = 100_000;

/// A rate: `per_minute` on average, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Sustained rate, per minute.
    pub per_minute: u32,
    /// How many may come at once (the bucket's size).
    pub burst: u32,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// One token bucket per caller.
#[derive(Debug)]
pub struct RateLimiter {
    rate: Rate,
    buckets: Mutex<HashMap<Caller, Bucket>>,
}

impl RateLimiter {
    /// A limiter allowing `rate` per caller; `None` for a rate of 0 (no limit).
    pub fn new(rate: Rate) -> Option<Self> {
        (rate.per_minute > 0).then(|| RateLimiter {
            rate: Rate {
                per_minute: rate.per_minute,
                burst: rate.burst.max(1),
            },
            buckets: Mutex::new(HashMap::new()),
        })
    }

    fn per_second(&self) -> f64 {
        f64::from(self.rate.per_minute) / 60.0
    }

    /// Takes one token for `caller` at `now`: `Ok` if there was one, else how long until
    /// there is.
    pub fn take_at(&self, caller: &Caller, now: Instant) -> Result<(), Duration> {
        let burst = f64::from(self.rate.burst);
        let per_second = self.per_second();
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if buckets.len() >= MAX_TRACKED && !buckets.contains_key(caller) {
            buckets.retain(|_, b| {
                b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * per_second < burst
            });
        }
        let bucket = buckets.entry(caller.clone()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * per_second).min(burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - bucket.tokens) / per_second;
            Err(Duration::from_secs_f64(wait.max(0.001)))
        }
    }
}

/// Whole seconds to wait, rounded up (what `Retry-After` and the in-band error say).
pub fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs();
    if wait.subsec_nanos() > 0 {
        secs + 1
    } else {
        secs.max(1)
    }
}

/// The limits the gateway enforces per caller.
#[derive(Debug)]
pub struct Limits {
    /// Tool calls.
    pub calls: Option<RateLimiter>,
    /// Elicitations created (by the gate, or over REST).
    pub elicitations: Option<RateLimiter>,
    /// Requests to the REST API (reads, long polls, answers): a bucket of their own at the
    /// calls' rate, so polling neither goes unbounded nor eats into the caller's calls.
    pub api: Option<RateLimiter>,
    /// Where the buckets read the time (a test moves it instead of sleeping).
    clock: Arc<dyn Clock>,
}

impl Default for Limits {
    /// No limits.
    fn default() -> Self {
        Limits {
            calls: None,
            elicitations: None,
            api: None,
            clock: Arc::new(SystemClock),
        }
    }
}

impl Limits {
    /// Limits at these rates (a rate of 0 per minute: none).
    pub fn new(calls: Rate, elicitations: Rate) -> Self {
        Limits {
            calls: RateLimiter::new(calls),
            elicitations: RateLimiter::new(elicitations),
            api: RateLimiter::new(calls),
            clock: Arc::new(SystemClock),
        }
    }

    /// The buckets read the time from `clock` (tests move it instead of sleeping).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    fn now(&self) -> Instant {
        self.clock.instant()
    }

    /// One tool call of `caller`.
    pub fn call(&self, caller: &Caller) -> Result<(), Duration> {
        let now = self.now();
        self.calls
            .as_ref()
            .map_or(Ok(()), |l| l.take_at(caller, now))
    }

    /// One REST API request of `caller`.
    pub fn api(&self, caller: &Caller) -> Result<(), Duration> {
        let now = self.now();
        self.api.as_ref().map_or(Ok(()), |l| l.take_at(caller, now))
    }

    /// One elicitation created for `caller`.
    pub fn elicitation(&self, caller: &Caller) -> Result<(), Duration> {
        let now = self.now();
        self.elicitations
            .as_ref()
            .map_or(Ok(()), |l| l.take_at(caller, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_refills_at_the_rate_per_caller() {
        let limiter = RateLimiter::new(Rate {
            per_minute: 60,
            burst: 3,
        })
        .unwrap();
        let alice = Caller::new("alice", None).unwrap();
        let bob = Caller::new("bob", None).unwrap();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limiter.take_at(&alice, t0).is_ok());
        }
        let wait = limiter.take_at(&alice, t0).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert_eq!(retry_after_secs(wait), 1);
        assert!(limiter.take_at(&bob, t0).is_ok(), "bob has his own bucket");
        // One per second comes back.
        let t1 = t0 + Duration::from_secs(1);
        assert!(limiter.take_at(&alice, t1).is_ok());
        assert!(limiter.take_at(&alice, t1).is_err());
        // Never more than the burst, however long the pause.
        let later = t1 + Duration::from_secs(3600);
        for _ in 0..3 {
            assert!(limiter.take_at(&alice, later).is_ok());
        }
        assert!(limiter.take_at(&alice, later).is_err());
    }

    #[test]
    fn a_rate_of_zero_is_no_limit() {
        assert!(
            RateLimiter::new(Rate {
                per_minute: 0,
                burst: 1
            })
            .is_none()
        );
        let limits = Limits::new(
            Rate {
                per_minute: 0,
                burst: 0,
            },
            Rate {
                per_minute: 0,
                burst: 0,
            },
        );
        let alice = Caller::new("alice", None).unwrap();
        for _ in 0..1000 {
            assert!(limits.call(&alice).is_ok());
        }
    }
}
