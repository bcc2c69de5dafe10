//! `cargo xtask bench store`: confirmation cycles (create → respond → consume) per second
//! and database round trips per cycle, for the memory store and the Postgres store (pool
//! sizes 1 and 8, as many concurrent workers as connections). Not a test: it asserts nothing
//! about speed; it prints a table and writes it under `target/bench/`.
//!
//! Needs `DATABASE_URL` (a superuser connection of a disposable cluster); `cargo xtask
//! bench store` starts one. `--quick` runs fewer cycles.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use base64::Engine as _;
use elicitation_store::test_support::TestDb;
use elicitation_store::{
    CallBinding, Caller, ConfirmationRequest, ElicitationStore, KeyRing, MemoryStore, PostgresStore,
};
use gating_core::CallDigest;
use serde_json::json;

struct Row {
    store: &'static str,
    workers: usize,
    cycles: u64,
    seconds: f64,
    round_trips_per_cycle: Option<f64>,
}

async fn run_cycles(
    store: Arc<dyn ElicitationStore>,
    workers: usize,
    cycles_per_worker: u64,
) -> (u64, f64) {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let caller = Caller::new(format!("bench-{w}"), None).expect("valid caller");
            for i in 0..cycles_per_worker {
                let arguments = json!({"path": format!("/tmp/bench/{w}/{i}")});
                let request = ConfirmationRequest::new(
                    "bench__delete",
                    CallDigest::of(&json!({"name": "bench__delete"})),
                    arguments.clone(),
                    "Delete it?",
                    time::Duration::minutes(10),
                );
                let id = store
                    .create_confirmation(&caller, request)
                    .await
                    .expect("create")
                    .elicitation
                    .id;
                store
                    .respond(&caller, id, json!({"confirmed": true}))
                    .await
                    .expect("respond");
                let binding = CallBinding {
                    server: None,
                    tool: "bench__delete".into(),
                    digest: CallDigest::of(&arguments),
                    definition: CallDigest::of(&json!({"name": "bench__delete"})),
                };
                store
                    .consume_confirmation(&caller, id, &binding)
                    .await
                    .expect("consume");
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker finished");
    }
    (
        cycles_per_worker * workers as u64,
        started.elapsed().as_secs_f64(),
    )
}

async fn postgres_store(db: &TestDb, pool_size: usize) -> PostgresStore {
    let key = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
    let keys = KeyRing::parse(&format!("bench:{key}")).expect("valid key");
    let mut options = db.options(keys);
    options.pool_size = pool_size;
    options.max_pending_per_caller = 1_000;
    PostgresStore::connect(options).await.expect("connect")
}

#[tokio::main]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (memory_cycles, pg_cycles) = if quick { (2_000, 100) } else { (20_000, 1_000) };
    let mut rows = Vec::new();

    for workers in [1usize, 8] {
        let store: Arc<dyn ElicitationStore> = Arc::new(MemoryStore::default());
        run_cycles(store.clone(), workers, 100).await; // warm-up
        let (cycles, seconds) = run_cycles(store, workers, memory_cycles / workers as u64).await;
        rows.push(Row {
            store: "memory",
            workers,
            cycles,
            seconds,
            round_trips_per_cycle: None,
        });
    }

    for pool_size in [1usize, 8] {
        let db = TestDb::new().await;
        let store = Arc::new(postgres_store(&db, pool_size).await);
        // Warm-up: fills each connection's statement cache.
        run_cycles(store.clone(), pool_size, 20).await;
        let before = store.round_trips();
        let (cycles, seconds) =
            run_cycles(store.clone(), pool_size, pg_cycles / pool_size as u64).await;
        let trips = (store.round_trips() - before) as f64 / cycles as f64;
        rows.push(Row {
            store: "postgres",
            workers: pool_size,
            cycles,
            seconds,
            round_trips_per_cycle: Some(trips),
        });
    }

    let mut table = String::from(
        "| store | pool / workers | cycles | cycles/s | µs per cycle | DB round trips per cycle |\n|---|---|---|---|---|---|\n",
    );
    let mut json_rows = Vec::new();
    for r in &rows {
        let per_second = r.cycles as f64 / r.seconds;
        let trips = r
            .round_trips_per_cycle
            .map_or("—".to_owned(), |t| format!("{t:.2}"));
        let _ = writeln!(
            table,
            "| {} | {} | {} | {:.0} | {:.1} | {} |",
            r.store,
            r.workers,
            r.cycles,
            per_second,
            1e6 / per_second,
            trips
        );
        json_rows.push(json!({
            "store": r.store, "workers": r.workers, "cycles": r.cycles,
            "cycles_per_second": per_second, "round_trips_per_cycle": r.round_trips_per_cycle,
        }));
    }
    println!(
        "\nconfirmation cycle: create_confirmation → respond {{confirmed: true}} → consume_confirmation\n"
    );
    println!("{table}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
    std::fs::create_dir_all(&dir).expect("create target/bench");
    std::fs::write(dir.join("store.md"), &table).expect("write store.md");
    std::fs::write(
        dir.join("store.json"),
        serde_json::to_string_pretty(&json_rows).expect("json"),
    )
    .expect("write store.json");
    println!("written to target/bench/store.md and target/bench/store.json");
}
