//! Quotas and budgets (issue 51): counters of calls or cost units per key (a tool pattern
//! with a caller, or with everyone) over a fixed window (a UTC minute, hour or day). A take
//! either fits under the limit and is counted, or is refused and counts nothing, in one
//! store step: on PostgreSQL one guarded upsert of the counter's row, so N instances
//! together grant exactly the limit.

use async_trait::async_trait;
use time::{Duration, OffsetDateTime};

use crate::StoreError;

/// The longest key a counter is kept under.
pub const MAX_QUOTA_KEY_LEN: usize = 1024;

/// A quota's window: counters start afresh at each UTC minute, hour or day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaWindow {
    /// A UTC minute.
    Minute,
    /// A UTC hour.
    Hour,
    /// A UTC day.
    Day,
}

impl QuotaWindow {
    /// Its label (configuration, metrics).
    pub fn label(self) -> &'static str {
        match self {
            QuotaWindow::Minute => "minute",
            QuotaWindow::Hour => "hour",
            QuotaWindow::Day => "day",
        }
    }

    /// The window of `label`.
    pub fn from_label(label: &str) -> Option<Self> {
        match label {
            "minute" => Some(QuotaWindow::Minute),
            "hour" => Some(QuotaWindow::Hour),
            "day" => Some(QuotaWindow::Day),
            _ => None,
        }
    }

    fn length(self) -> Duration {
        match self {
            QuotaWindow::Minute => Duration::MINUTE,
            QuotaWindow::Hour => Duration::HOUR,
            QuotaWindow::Day => Duration::DAY,
        }
    }

    /// The window `at` falls in: its start and end.
    pub fn around(self, at: OffsetDateTime) -> (OffsetDateTime, OffsetDateTime) {
        let length = self.length().whole_seconds();
        let seconds = at.unix_timestamp();
        let start = seconds - seconds.rem_euclid(length);
        let start = OffsetDateTime::from_unix_timestamp(start).unwrap_or(at);
        (start, start + self.length())
    }

    /// Its length in seconds.
    pub fn seconds(self) -> i64 {
        self.length().whole_seconds()
    }
}

/// What taking from a counter came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaTake {
    /// Counted: the counter of the window starting `window_start` now stands at `used`.
    Taken {
        /// The counter after the take.
        used: i64,
        /// The window it was counted in (what a give-back names).
        window_start: OffsetDateTime,
    },
    /// Refused: it would pass the limit; nothing was counted. The window ends `until`.
    Over {
        /// When the window starts afresh.
        until: OffsetDateTime,
    },
}

/// Where the counters live: in memory for one instance, in PostgreSQL for all. The window
/// a take counts in is the store's (on PostgreSQL the database's clock, the same for every
/// instance, however their clocks drift).
#[async_trait]
pub trait QuotaStore: Send + Sync {
    /// Counts `amount` against `key`'s counter of the current `window`, if it stays within
    /// `limit`; else counts nothing.
    async fn take_quota(
        &self,
        key: &str,
        window: QuotaWindow,
        amount: i64,
        limit: i64,
    ) -> Result<QuotaTake, StoreError>;

    /// Gives back `amount` taken from `key`'s counter of the window starting `window_start`
    /// (a call that was counted and then not run after all).
    async fn give_back_quota(
        &self,
        key: &str,
        window_start: OffsetDateTime,
        amount: i64,
    ) -> Result<(), StoreError>;

    /// What `key`'s counter of the current `window` stands at (0 if none).
    async fn quota_used(&self, key: &str, window: QuotaWindow) -> Result<i64, StoreError>;
}

/// Checks a counter's key and amounts.
pub(crate) fn check(key: &str, amount: i64, limit: i64) -> Result<(), StoreError> {
    if key.is_empty() || key.len() > MAX_QUOTA_KEY_LEN || key.chars().any(char::is_control) {
        return Err(StoreError::AnswerRefused(
            "a quota key is 1 to 1024 characters without control characters".into(),
        ));
    }
    if amount < 1 || limit < 0 {
        return Err(StoreError::AnswerRefused(
            "a quota takes a positive amount against a limit of 0 or more".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_the_utc_minute_hour_and_day_around_a_time() {
        let at = OffsetDateTime::from_unix_timestamp(1_764_936_367).unwrap(); // 12:06:07
        let (start, end) = QuotaWindow::Minute.around(at);
        assert_eq!(
            (start.unix_timestamp(), end - start),
            (1_764_936_360, Duration::MINUTE)
        );
        let (start, _) = QuotaWindow::Hour.around(at);
        assert_eq!(start.unix_timestamp() % 3600, 0);
        let (start, end) = QuotaWindow::Day.around(at);
        assert_eq!(
            (start.unix_timestamp() % 86_400, end - start),
            (0, Duration::DAY)
        );
        assert!(start <= at && at < end);
    }
}
