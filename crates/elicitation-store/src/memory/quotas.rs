//! The memory store's quota counters: one instance's, dropped once their window has ended.

use std::collections::HashMap;
use std::sync::PoisonError;

use async_trait::async_trait;
use time::OffsetDateTime;

use super::MemoryStore;
use crate::quota::check;
use crate::{QuotaStore, QuotaTake, QuotaWindow, StoreError};

/// Most counters the memory store holds at once.
const MAX_COUNTERS: usize = 100_000;

/// Each counter by key and window start: how much is used, and when its window ends.
pub(super) type Counters = HashMap<(String, OffsetDateTime), (i64, OffsetDateTime)>;

impl MemoryStore {
    fn lock_counters(&self) -> std::sync::MutexGuard<'_, Counters> {
        self.quotas.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops the counters whose window ended by `now`.
    pub(super) fn forget_old_quota_counters(&self, now: OffsetDateTime) {
        self.lock_counters().retain(|_, (_, ends)| *ends > now);
    }
}

#[async_trait]
impl QuotaStore for MemoryStore {
    async fn take_quota(
        &self,
        key: &str,
        window: QuotaWindow,
        amount: i64,
        limit: i64,
    ) -> Result<QuotaTake, StoreError> {
        check(key, amount, limit)?;
        let now = self.clock.now();
        let (start, end) = window.around(now);
        let mut counters = self.lock_counters();
        let used = counters
            .get(&(key.to_owned(), start))
            .map_or(0, |(used, _)| *used);
        // A refused take writes nothing (a limit of 0 grows nothing).
        if used.checked_add(amount).is_none_or(|after| after > limit) {
            return Ok(QuotaTake::Over { until: end });
        }
        if used == 0 && counters.len() >= MAX_COUNTERS {
            counters.retain(|_, (_, ends)| *ends > now);
            if counters.len() >= MAX_COUNTERS {
                return Err(StoreError::Full {
                    limit: MAX_COUNTERS,
                });
            }
        }
        let (used, _) = counters.entry((key.to_owned(), start)).or_insert((0, end));
        *used += amount;
        Ok(QuotaTake::Taken {
            used: *used,
            window_start: start,
        })
    }

    async fn give_back_quota(
        &self,
        key: &str,
        window_start: OffsetDateTime,
        amount: i64,
    ) -> Result<(), StoreError> {
        if let Some((used, _)) = self
            .lock_counters()
            .get_mut(&(key.to_owned(), window_start))
        {
            *used = (*used - amount).max(0);
        }
        Ok(())
    }

    async fn quota_used(&self, key: &str, window: QuotaWindow) -> Result<i64, StoreError> {
        let (start, _) = window.around(self.clock.now());
        Ok(self
            .lock_counters()
            .get(&(key.to_owned(), start))
            .map_or(0, |(used, _)| *used))
    }
}
