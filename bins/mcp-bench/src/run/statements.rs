//! Per-statement timings from `pg_stat_statements`, where the cluster loads it
//! (`shared_preload_libraries`): which of the store's statements a confirmed call's time
//! goes to. Where it is not loaded the rounds run without them and say so once.

use anyhow::Result;

/// `pg_stat_statements` made usable in the bench's database and its counts reset; false
/// (with the reason printed) where the cluster does not load it.
pub(super) async fn reset(admin: &tokio_postgres::Client) -> bool {
    let ready = async {
        admin
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .await?;
        admin
            .batch_execute("SELECT pg_stat_statements_reset()")
            .await
    };
    match ready.await {
        Ok(()) => true,
        Err(err) => {
            eprintln!(
                "  (no statement timings: pg_stat_statements is not loaded here — {}; \
                 `cargo xtask bench confirmed` starts a cluster that loads it)",
                err.as_db_error()
                    .map(|db| db.message().to_owned())
                    .unwrap_or_else(|| err.to_string())
            );
            false
        }
    }
}

/// One statement's share of the round.
pub(super) struct Statement {
    pub(super) calls: i64,
    pub(super) mean_us: f64,
    pub(super) total_ms: f64,
    pub(super) rows: i64,
    pub(super) text: String,
}

/// The `limit` statements of this database that took the most execution time since
/// [`reset`], the most first.
pub(super) async fn top(admin: &tokio_postgres::Client, limit: i64) -> Result<Vec<Statement>> {
    let rows = admin
        .query(
            "SELECT calls, mean_exec_time, total_exec_time, rows, query FROM pg_stat_statements \
             WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND query NOT LIKE '%pg_stat_statements%' \
             ORDER BY total_exec_time DESC LIMIT $1",
            &[&limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| Statement {
            calls: row.get(0),
            mean_us: row.get::<_, f64>(1) * 1e3,
            total_ms: row.get(2),
            rows: row.get(3),
            text: row.get(4),
        })
        .collect())
}

/// Prints [`top`]'s rows (µs per confirmed call over `per_call_of` calls), each statement
/// cut to one line of 90 characters.
pub(super) fn print(statements: &[Statement], per_call_of: usize) {
    const WIDTH: usize = 90;
    for s in statements {
        let one_line: String = s
            .text
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(WIDTH)
            .collect();
        println!(
            "    {:>7} calls {:>8.1} µs mean {:>8.1} µs/confirmed call {:>7} rows  {one_line}",
            s.calls,
            s.mean_us,
            s.total_ms * 1e3 / per_call_of as f64,
            s.rows,
        );
    }
}
