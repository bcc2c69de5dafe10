//! The scale-out rows: 1, 2 and 3 gateway instances on one PostgreSQL, each under a CPU
//! quota.

use crate::load;
use crate::peers::{AGENT, Proc, forwarded, read_through};
use anyhow::Result;
use elicitation_store::test_support::TestDb;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::*;

/// Scale-out on one machine: three gateway instances on the one PostgreSQL, each capped at
/// [`SCALE_CPU_PERCENT`] % of a CPU in a cgroup of its own; read-only and confirmed calls
/// spread over 1, 2 and 3 of them ([`SCALE_CONNECTIONS`] connections each). Confirmations
/// are held and approved beforehand through `prepare` (uncapped). Without a writable cgroup
/// CPU controller the rows are left out, saying why.
pub(super) async fn scale_out(
    options: &Options,
    dir: &Path,
    store: &str,
    upstream: SocketAddr,
    prepare: SocketAddr,
) -> Result<Vec<Row>> {
    let mut instances = Vec::new();
    let mut quotas = Vec::new();
    for i in 0..3 {
        let instance =
            start_gateway(&options.gateway, dir, &format!("scale{i}"), store, upstream).await?;
        let name = format!("mcp-bench-{}-{i}", std::process::id());
        match crate::quota::Quota::cap(&name, instance.pid(), SCALE_CPU_PERCENT) {
            Ok(quota) => quotas.push(quota),
            Err(e) => {
                eprintln!("  scale-out rows left out: no CPU quota can be set here ({e:#})");
                return Ok(Vec::new());
            }
        }
        instances.push(instance);
    }
    let read = read_through(AGENT);
    // Each instance's upstream session and connections exist before anything is measured.
    for instance in &instances {
        load::run(instance.addr, 4, 100, read.clone(), forwarded()).await?;
    }
    // Enough calls that each row spans many of the quota's 100 ms periods (a row of a
    // few periods measures where the throttling fell, not the instances).
    let (read_per, confirmed_per) = if options.quick {
        (3_000, 600)
    } else {
        (10_000, 2_000)
    };
    let mut rows = Vec::new();
    for n in 1..=3 {
        let targets: Vec<SocketAddr> = instances[..n].iter().map(|p| p.addr).collect();
        let pids: Vec<u32> = instances[..n].iter().map(Proc::pid).collect();
        let throttled = |q: &[crate::quota::Quota]| {
            q[..n]
                .iter()
                .map(crate::quota::Quota::throttled_seconds)
                .sum::<f64>()
        };
        let before = throttled(&quotas);
        rows.push(
            measure_spread(
                SCALE_READ[n - 1],
                &targets,
                &pids,
                SCALE_CONNECTIONS * n,
                read_per * n,
                read.clone(),
                forwarded(),
            )
            .await?,
        );
        eprintln!(
            "    throttled {:.2} s (the cap held the instances back)",
            throttled(&quotas) - before
        );
        let ids = Arc::new(ready_confirmations(prepare, confirmed_per * n).await?);
        let count = ids.len();
        let confirmed = confirmed_calls(ids);
        rows.push(
            measure_spread(
                SCALE_CONFIRMED[n - 1],
                &targets,
                &pids,
                SCALE_CONNECTIONS * n,
                count,
                confirmed,
                forwarded(),
            )
            .await?,
        );
    }
    // The processes end before their cgroups are removed.
    drop(instances);
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(quotas);
    Ok(rows)
}

/// `mcp-bench scale-out`: only the scale-out rows (needs DATABASE_URL), printed.
pub(crate) async fn scale_only(options: Options) -> Result<()> {
    let me = std::env::current_exe()?;
    let dir = bench_dir("scale-out")?;
    let upstream = start_upstream(&me).await?;
    let db = TestDb::new().await;
    let store = postgres_store(&db);
    let prepare = start_gateway(&options.gateway, &dir, "postgres", &store, upstream.addr).await?;
    eprintln!("measuring scale-out (release build, RUST_LOG=warn, all on 127.0.0.1):");
    let rows = scale_out(&options, &dir, &store, upstream.addr, prepare.addr).await?;
    let mut md = String::new();
    scale_report(&mut md, &rows);
    println!("{md}");
    drop((prepare, upstream));
    Ok(())
}

/// The scale-out lines of the report: calls/s of n instances ÷ one.
pub(super) fn scale_report(md: &mut String, rows: &[Row]) -> Value {
    let rate = |path: &str| {
        rows.iter()
            .find(|r| r.path == path)
            .map(|r| r.load.per_second())
    };
    let mut json_lines = serde_json::Map::new();
    for (what, paths) in [("read-only", SCALE_READ), ("confirmed", SCALE_CONFIRMED)] {
        let (Some(one), Some(two), Some(three)) = (rate(paths[0]), rate(paths[1]), rate(paths[2]))
        else {
            continue;
        };
        let _ = writeln!(
            md,
            "Scale-out, {what} (each instance capped at {SCALE_CPU_PERCENT} % of a CPU, {SCALE_CONNECTIONS} connections each, one PostgreSQL): {one:.0} / {two:.0} / {three:.0} calls/s with 1 / 2 / 3 instances; 2 ÷ 1 = {:.2}, 3 ÷ 1 = {:.2}.",
            two / one,
            three / one
        );
        json_lines.insert(
            what.into(),
            json!({"calls_per_second": [one, two, three], "two_over_one": two / one, "three_over_one": three / one}),
        );
    }
    Value::Object(json_lines)
}
