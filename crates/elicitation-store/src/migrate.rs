//! The schema migrations, embedded from this crate's `migrations/` folder.

use tokio_postgres::Client;

use crate::StoreError;
use crate::error::map_db_error;

mod embedded {
    refinery::embed_migrations!("migrations");
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

/// The table the store's migrations are recorded in: its own, so that a service embedding
/// the store keeps refinery's default table (`refinery_schema_history`) for its own
/// migrations in the same database.
pub const MIGRATION_HISTORY_TABLE: &str = "mcp_gateway_migrations";

/// The table refinery records in by default, where the store's migrations were recorded
/// before it had a table of its own.
const REFINERY_DEFAULT: &str = "refinery_schema_history";

/// Applies every embedded migration not yet applied, under an advisory lock, and returns
/// the names of those it applied. Run it as the role that owns the schema, not as the
/// gateway's writer login. They are recorded in [`MIGRATION_HISTORY_TABLE`]; a database migrated
/// before the store had a table of its own has its history moved over first (only the
/// store's own migrations: an embedder's rows in refinery's table stay there).
///
/// On a connection of your own (a service running its own migrations beside these); else
/// [`migrate_url`], which connects for you.
pub async fn migrate(client: &mut Client) -> Result<Vec<String>, StoreError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(map_db_error)?;
    let result = run(client).await;
    let unlock = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(map_db_error);
    let applied = result?;
    unlock?;
    Ok(applied)
}

/// [`migrate`] on a connection to `url` (a `postgres://` URL or key=value string of the
/// schema owner), over TLS checked against `tls`'s roots when given (feature `tls`; without
/// it, `tls` must be `None`). The connection is closed when done.
pub async fn migrate_url(
    url: &str,
    tls: Option<crate::tls::TlsRoots>,
) -> Result<Vec<String>, StoreError> {
    let config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| StoreError::Config(format!("invalid database URL: {e}")))?;
    let failed = |e: tokio_postgres::Error| StoreError::Unavailable(Box::new(e));
    let (mut client, driver) = match tls {
        #[cfg(feature = "tls")]
        Some(roots) => {
            let tls = tokio_postgres_rustls::MakeRustlsConnect::new((*roots).clone());
            let (client, connection) = config.connect(tls).await.map_err(failed)?;
            (client, tokio::spawn(connection))
        }
        #[cfg(not(feature = "tls"))]
        Some(never) => match never {},
        None => {
            let (client, connection) = config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(failed)?;
            (client, tokio::spawn(connection))
        }
    };
    let applied = migrate(&mut client).await;
    drop(client);
    let _ = driver.await;
    applied
}

async fn run(client: &mut Client) -> Result<Vec<String>, StoreError> {
    adopt_history(client).await?;
    // V7 defined mcp_schema_version() over refinery's default table, which a database
    // migrated into the store's own table from the start never has (V24 points it at the
    // store's): the function bodies are not checked against the schema while migrating.
    client
        .batch_execute("SET check_function_bodies = false")
        .await
        .map_err(map_db_error)?;
    let mut runner = embedded::migrations::runner();
    runner.set_migration_table_name(MIGRATION_HISTORY_TABLE);
    let result = runner.run_async(client).await;
    client
        .batch_execute("RESET check_function_bodies")
        .await
        .map_err(map_db_error)?;
    let report = result.map_err(|e| StoreError::Backend(Box::new(e)))?;
    Ok(report
        .applied_migrations()
        .iter()
        .map(|m| format!("V{}__{}", m.version(), m.name()))
        .collect())
}

/// A database whose store migrations were recorded in refinery's default table (before
/// V24): its rows of the store's own migrations are copied into [`MIGRATION_HISTORY_TABLE`], once.
async fn adopt_history(client: &mut Client) -> Result<(), StoreError> {
    let found = client
        .query_one(
            "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL",
            &[&MIGRATION_HISTORY_TABLE, &REFINERY_DEFAULT],
        )
        .await
        .map_err(map_db_error)?;
    let (ours, refinery): (bool, bool) = (found.get(0), found.get(1));
    if ours || !refinery {
        return Ok(());
    }
    let migrations = embedded::migrations::runner().get_migrations().clone();
    let versions: Vec<i32> = migrations.iter().map(|m| m.version()).collect();
    let names: Vec<String> = migrations.iter().map(|m| m.name().to_owned()).collect();
    let transaction = client.transaction().await.map_err(map_db_error)?;
    transaction
        .batch_execute(&format!(
            "CREATE TABLE {MIGRATION_HISTORY_TABLE} (LIKE {REFINERY_DEFAULT} INCLUDING ALL)"
        ))
        .await
        .map_err(map_db_error)?;
    let copied = transaction
        .execute(
            &format!(
                "INSERT INTO {MIGRATION_HISTORY_TABLE} SELECT h.* FROM {REFINERY_DEFAULT} h \
                 WHERE (h.version, h.name) IN (SELECT * FROM unnest($1::int4[], $2::text[]))"
            ),
            &[&versions, &names],
        )
        .await
        .map_err(map_db_error)?;
    if copied == 0 {
        let tables = transaction
            .query_one("SELECT to_regclass('mcp_elicitations') IS NOT NULL", &[])
            .await
            .map_err(map_db_error)?;
        if tables.get::<_, bool>(0) {
            // The store's tables exist, but refinery's table (the one on this search path)
            // records none of their migrations: an empty history now would have V1 run
            // again and fail on every later run. Nothing is changed.
            transaction.rollback().await.map_err(map_db_error)?;
            return Err(StoreError::Config(format!(
                "the store's tables exist but {REFINERY_DEFAULT} records none of its migrations (another schema first on the search_path?); nothing was migrated"
            )));
        }
    }
    transaction.commit().await.map_err(map_db_error)?;
    tracing::info!(
        rows = copied,
        "the store's migration history moved to {MIGRATION_HISTORY_TABLE}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{TestDb, connect};

    /// An embedding service's own refinery migrations (`orders`), in refinery's default
    /// history table.
    mod embedder {
        refinery::embed_migrations!("tests/fixtures/embedder_migrations");
    }

    async fn history(client: &Client, table: &str) -> Vec<(i32, String)> {
        client
            .query(
                &format!("SELECT version, name FROM {table} ORDER BY version"),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_stores_migrations_run_beside_an_embedders_own_refinery_migrations() {
        let db = TestDb::new().await;
        let config = db.empty_beside("shared").await;
        let mut client = connect(&config).await;
        // The embedder's first, in refinery's default table; then the store's; then the
        // embedder's again (and again the store's): none mistakes the other's for its own.
        embedder::migrations::runner()
            .set_target(refinery::Target::Version(1))
            .run_async(&mut client)
            .await
            .unwrap();
        let applied = db.role_locked(migrate(&mut client)).await.unwrap();
        assert_eq!(applied.len(), usize::try_from(latest_version()).unwrap());
        let report = embedder::migrations::runner()
            .run_async(&mut client)
            .await
            .expect("the embedder's runner finds only its own history");
        assert_eq!(report.applied_migrations().len(), 1, "its V2");
        assert!(
            db.role_locked(migrate(&mut client))
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            history(&client, "refinery_schema_history").await,
            [(1, "orders".to_owned()), (2, "order_notes".to_owned())]
        );
        let ours = history(&client, MIGRATION_HISTORY_TABLE).await;
        assert_eq!(ours.first(), Some(&(1, "mcp_elicitations".to_owned())));
        assert_eq!(ours.len(), usize::try_from(latest_version()).unwrap());
        let version: i32 = client
            .query_one("SELECT mcp_schema_version()", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(version, latest_version());
        client
            .batch_execute("INSERT INTO orders (id, item, note) VALUES (1, 'x', 'y')")
            .await
            .unwrap();
    }

    /// A database beside `db`'s, migrated to V23 into refinery's default history table (as
    /// the store did before it had a table of its own).
    async fn migrated_by_refinerys_default(db: &TestDb, name: &str) -> tokio_postgres::Client {
        let config = db.empty_beside(name).await;
        let mut client = connect(&config).await;
        db.role_locked(async {
            embedded::migrations::runner()
                .set_target(refinery::Target::Version(23))
                .run_async(&mut client)
                .await
                .unwrap();
        })
        .await;
        client
    }

    /// A database the store migrated before it had a history table of its own (its rows in
    /// refinery's default table) is taken over: nothing runs twice, and only the new
    /// migration applies.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_database_migrated_into_refinerys_default_table_is_taken_over_without_rerunning() {
        let db = TestDb::new().await;
        let mut client = migrated_by_refinerys_default(&db, "old").await;
        let applied = db.role_locked(migrate(&mut client)).await.unwrap();
        // Only what came after V23 runs: V24 first, and every later one.
        assert_eq!(
            applied.first().map(String::as_str),
            Some("V24__a_history_table_of_its_own")
        );
        assert_eq!(
            applied.len(),
            usize::try_from(latest_version() - 23).unwrap()
        );
        let ours = history(&client, MIGRATION_HISTORY_TABLE).await;
        assert_eq!(ours.len(), usize::try_from(latest_version()).unwrap());
        assert_eq!(
            history(&client, "refinery_schema_history").await.len(),
            23,
            "refinery's table is left as it was"
        );
        let version: i32 = client
            .query_one("SELECT mcp_schema_version()", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(version, latest_version());
    }

    /// The store's tables, but a refinery history without their migrations: refused,
    /// leaving the database as it was (no empty history that would make V1 run again).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_history_that_records_none_of_the_stores_migrations_is_not_adopted() {
        let db = TestDb::new().await;
        let mut client = migrated_by_refinerys_default(&db, "orphan").await;
        client
            .batch_execute("DELETE FROM refinery_schema_history")
            .await
            .unwrap();
        let refused = db.role_locked(migrate(&mut client)).await.unwrap_err();
        assert!(refused.to_string().contains("records none"), "{refused}");
        let ours: bool = client
            .query_one(
                "SELECT to_regclass('mcp_gateway_migrations') IS NOT NULL",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(!ours, "no empty history is left behind");
    }

    /// Three approved confirmations in a database at V32: `a` redeemed there (the wide row's
    /// `consumed_at`), `b` and `c` not. Written as the owner, as V32's store would have.
    async fn approved_at_v32(client: &Client) -> [uuid::Uuid; 3] {
        let ids = [1, 2, 3].map(uuid::Uuid::from_u128);
        client
            .execute(
                "INSERT INTO mcp_elicitations (id, caller_subject, caller_tenant, type, message_sealed, message_key_id, spec, tool_name, call_digest, request_sealed, request_key_id, created_at, expires_at, definition_digest) \
                 SELECT id, 'alice', 'acme', 'confirmation', '\\x00', 'k1', '{}', 'fs__delete', decode(repeat('ab', 32), 'hex'), '\\x00', 'k1', now(), now() + interval '10 minutes', decode(repeat('cd', 32), 'hex') FROM unnest($1::uuid[]) AS id",
                &[&ids.as_slice()],
            )
            .await
            .unwrap();
        client
            .execute(
                "UPDATE mcp_elicitations SET status = 'responded', response_sealed = '\\x00', response_key_id = 'k1', confirmed = true, responded_at = now() WHERE id = ANY($1)",
                &[&ids.as_slice()],
            )
            .await
            .unwrap();
        client
            .execute(
                "UPDATE mcp_elicitations SET consumed_at = now() WHERE id = $1",
                &[&ids[0]],
            )
            .await
            .unwrap();
        ids
    }

    /// V33 moves redemptions to a table of their own. A redemption made before it is carried
    /// over; during a rolling upgrade an older instance still redeems through the wide row,
    /// and either way each confirmation is redeemed once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redemptions_made_before_v33_or_by_an_older_instance_count_once() {
        let db = TestDb::new().await;
        let config = db.empty_beside("v32").await;
        let mut client = connect(&config).await;
        db.role_locked(async {
            // As `run` does: V7's function names a table this history never has.
            client
                .batch_execute("SET check_function_bodies = false")
                .await
                .unwrap();
            let mut runner =
                embedded::migrations::runner().set_target(refinery::Target::Version(32));
            runner.set_migration_table_name(MIGRATION_HISTORY_TABLE);
            runner.run_async(&mut client).await.unwrap();
        })
        .await;
        let [a, b, c] = approved_at_v32(&client).await;
        let before: time::OffsetDateTime = client
            .query_one(
                "SELECT consumed_at FROM mcp_elicitations WHERE id = $1",
                &[&a],
            )
            .await
            .unwrap()
            .get(0);
        let applied = db.role_locked(migrate(&mut client)).await.unwrap();
        assert_eq!(
            applied.first().map(String::as_str),
            Some("V33__redemptions_of_their_own")
        );
        let carried: time::OffsetDateTime = client
            .query_one(
                "SELECT consumed_at FROM mcp_redemptions WHERE elicitation_id = $1",
                &[&a],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(carried, before);

        // As the gateway's writer, caller alice.
        client
            .batch_execute(&format!(
                "SET ROLE {}; SELECT set_config('mcp.caller_subject', 'alice', false), set_config('mcp.caller_tenant', 'acme', false)",
                crate::test_support::WRITER_LOGIN
            ))
            .await
            .unwrap();
        // What an older instance runs, and what this one runs.
        let older = "UPDATE mcp_elicitations SET consumed_at = now() WHERE id = $1 AND status = 'responded' AND confirmed AND consumed_at IS NULL AND expires_at > now()";
        let newer = "INSERT INTO mcp_redemptions (elicitation_id, consumed_at) VALUES ($1, now()) ON CONFLICT (elicitation_id) DO NOTHING";
        let run = async |statement: &str, id: &uuid::Uuid| {
            client.execute(statement, &[id]).await.unwrap()
        };
        assert_eq!(run(newer, &a).await, 0, "redeemed before the upgrade");
        assert_eq!(run(older, &a).await, 0, "redeemed before the upgrade");
        assert_eq!(run(older, &b).await, 1, "the older instance redeems b");
        assert_eq!(run(newer, &b).await, 0, "b is used");
        assert_eq!(run(newer, &c).await, 1, "this instance redeems c");
        assert_eq!(run(older, &c).await, 0, "c is used");
        let redemptions: Vec<uuid::Uuid> = client
            .query(
                "SELECT elicitation_id FROM mcp_redemptions ORDER BY consumed_at, elicitation_id",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(redemptions.len(), 3);
        assert!([a, b, c].iter().all(|id| redemptions.contains(id)));
    }
}
