//! The memory store's quota counters: one instance's, dropped once their window has ended.

use std::collections::HashMap;
use std::sync::PoisonError;

use async_trait::async_trait;
use time::OffsetDateTime;

use super::MemoryStore;
use crate::quota::check;
use crate::{QuotaStore, QuotaTake, StoreError};

/// Most counters the memory store holds at once.
const MAX_COUNTERS: usize = 100_000;

/// Each counter by key and window start: how much is used, and when its window ends.
pub(super) type Counters = HashMap<(String, OffsetDateTime), (i64, OffsetDateTime)>;

impl MemoryStore {
    fn lock_counters(&self) -> std::sync::MutexGuard<'_, Counters> {
        self.quotas.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl QuotaStore for MemoryStore {
    async fn take_quota(
        &self,
        key: &str,
        (start, end): (OffsetDateTime, OffsetDateTime),
        amount: i64,
        limit: i64,
    ) -> Result<QuotaTake, StoreError> {
        check(key, amount, limit)?;
        let now = self.clock.now();
        let mut counters = self.lock_counters();
        if counters.len() >= MAX_COUNTERS {
            counters.retain(|_, (_, ends)| *ends > now);
            if counters.len() >= MAX_COUNTERS {
                return Err(StoreError::Full {
                    limit: MAX_COUNTERS,
                });
            }
        }
        let (used, _) = counters.entry((key.to_owned(), start)).or_insert((0, end));
        if *used + amount > limit {
            return Ok(QuotaTake::Over { used: Some(*used) });
        }
        *used += amount;
        Ok(QuotaTake::Taken { used: *used })
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

    async fn quota_used(&self, key: &str, window_start: OffsetDateTime) -> Result<i64, StoreError> {
        Ok(self
            .lock_counters()
            .get(&(key.to_owned(), window_start))
            .map_or(0, |(used, _)| *used))
    }
}
