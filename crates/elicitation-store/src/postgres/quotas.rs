//! Quota counters in PostgreSQL (V28): one guarded upsert per take, so every instance
//! sharing the database counts against the same limit, exactly.

use async_trait::async_trait;
use time::OffsetDateTime;

use super::{PostgresStore, sql};
use crate::error::map_db_error;
use crate::quota::check;
use crate::{QuotaStore, QuotaTake, StoreError};

impl PostgresStore {
    /// Erases counters whose window ended before `before` (the retention job's part).
    pub(super) async fn forget_old_quota_counters(
        &self,
        before: OffsetDateTime,
    ) -> Result<u64, StoreError> {
        let erased: i64 = self
            .with_client(async |client| {
                let statement = client
                    .prepare_cached(sql::FORGET_OLD_QUOTA_COUNTERS)
                    .await
                    .map_err(map_db_error)?;
                let row = client
                    .query_one(&statement, &[&before, &super::EXPIRE_BATCH])
                    .await
                    .map_err(map_db_error)?;
                Ok(row.get(0))
            })
            .await?;
        Ok(u64::try_from(erased).unwrap_or(0))
    }
}

#[async_trait]
impl QuotaStore for PostgresStore {
    async fn take_quota(
        &self,
        key: &str,
        (start, end): (OffsetDateTime, OffsetDateTime),
        amount: i64,
        limit: i64,
    ) -> Result<QuotaTake, StoreError> {
        check(key, amount, limit)?;
        let rows = self
            .with_client(async |client| {
                let statement = client
                    .prepare_cached(sql::TAKE_QUOTA)
                    .await
                    .map_err(map_db_error)?;
                client
                    .query(&statement, &[&key, &start, &end, &amount, &limit])
                    .await
                    .map_err(map_db_error)
            })
            .await?;
        Ok(match rows.first() {
            Some(row) => QuotaTake::Taken { used: row.get(0) },
            None => QuotaTake::Over { used: None },
        })
    }

    async fn give_back_quota(
        &self,
        key: &str,
        window_start: OffsetDateTime,
        amount: i64,
    ) -> Result<(), StoreError> {
        self.with_client(async |client| {
            let statement = client
                .prepare_cached(sql::GIVE_BACK_QUOTA)
                .await
                .map_err(map_db_error)?;
            client
                .execute(&statement, &[&key, &window_start, &amount])
                .await
                .map_err(map_db_error)
        })
        .await?;
        Ok(())
    }

    async fn quota_used(&self, key: &str, window_start: OffsetDateTime) -> Result<i64, StoreError> {
        let rows = self
            .with_client(async |client| {
                let statement = client
                    .prepare_cached(sql::QUOTA_USED)
                    .await
                    .map_err(map_db_error)?;
                client
                    .query(&statement, &[&key, &window_start])
                    .await
                    .map_err(map_db_error)
            })
            .await?;
        Ok(rows.first().map_or(0, |r| r.get(0)))
    }
}
