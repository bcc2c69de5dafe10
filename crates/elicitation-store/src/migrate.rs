//! The schema migrations, embedded from the workspace's `migrations/` folder.

use tokio_postgres::Client;

use crate::StoreError;
use crate::error::map_db_error;

mod embedded {
    refinery::embed_migrations!("../../migrations");
}

/// The newest migration this build embeds: a database whose newest applied migration is
/// older is not ready for it.
pub fn latest_version() -> i32 {
    embedded::migrations::runner()
        .get_migrations()
        .iter()
        .map(|m| m.version())
        .max()
        .unwrap_or(0)
}

/// An arbitrary constant naming the advisory lock that serialises migration runs (refinery
/// takes none, and two instances starting at once must not race).
const MIGRATION_LOCK: i64 = 0x6d63_705f_6d69_6772;

/// Applies every embedded migration not yet applied, under an advisory lock, and returns
/// the names of those it applied. Run it as the role that owns the schema, not as the
/// gateway's writer login.
pub async fn migrate(client: &mut Client) -> Result<Vec<String>, StoreError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(map_db_error)?;
    let result = embedded::migrations::runner().run_async(client).await;
    let unlock = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(map_db_error);
    let report = result.map_err(|e| StoreError::Backend(Box::new(e)))?;
    unlock?;
    Ok(report
        .applied_migrations()
        .iter()
        .map(|m| format!("V{}__{}", m.version(), m.name()))
        .collect())
}
