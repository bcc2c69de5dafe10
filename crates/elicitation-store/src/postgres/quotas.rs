//! Quota counters in PostgreSQL (V28): one guarded upsert per take, so every instance
//! sharing the database counts against the same limit, exactly.

use async_trait::async_trait;
use time::OffsetDateTime;

use super::{PostgresStore, sql};
use crate::error::map_db_error;
use crate::quota::check;
use crate::{QuotaStore, QuotaTake, QuotaWindow, StoreError};

#[async_trait]
impl QuotaStore for PostgresStore {
    async fn take_quota(
        &self,
        key: &str,
        window: QuotaWindow,
        amount: i64,
        limit: i64,
    ) -> Result<QuotaTake, StoreError> {
        check(key, amount, limit)?;
        let seconds = window.seconds();
        let taken = self
            .with_client(async |client| {
                let statement = client
                    .prepare_cached(sql::TAKE_QUOTA)
                    .await
                    .map_err(map_db_error)?;
                let rows = client
                    .query(&statement, &[&key, &seconds, &amount, &limit])
                    .await
                    .map_err(map_db_error)?;
                if let Some(row) = rows.first() {
                    return Ok(QuotaTake::Taken {
                        used: row.get(0),
                        window_start: row.get(1),
                    });
                }
                let statement = client
                    .prepare_cached(sql::QUOTA_WINDOW_END)
                    .await
                    .map_err(map_db_error)?;
                let row = client
                    .query_one(&statement, &[&seconds])
                    .await
                    .map_err(map_db_error)?;
                Ok(QuotaTake::Over { until: row.get(0) })
            })
            .await?;
        Ok(taken)
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

    async fn quota_used(&self, key: &str, window: QuotaWindow) -> Result<i64, StoreError> {
        let seconds = window.seconds();
        let rows = self
            .with_client(async |client| {
                let statement = client
                    .prepare_cached(sql::QUOTA_USED)
                    .await
                    .map_err(map_db_error)?;
                client
                    .query(&statement, &[&key, &seconds])
                    .await
                    .map_err(map_db_error)
            })
            .await?;
        Ok(rows.first().map_or(0, |r| r.get(0)))
    }
}
