//! One row measured: load driven for a while, the gateway's and the database's CPU read
//! around it, spread across rounds; and the special rows (a wake across instances, a
//! large catalog's metrics).

use crate::load::{self, Check, Load, MakeRequest};
use crate::peers::{AGENT, HUMAN, SCRAPER, modern, start};
use crate::procstat;
use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::process::Command;

use super::*;

/// One measured row.
pub(super) struct Row {
    pub(super) path: &'static str,
    pub(super) concurrency: usize,
    pub(super) load: Load,
    pub(super) cpu_per_10k: f64,
    /// Context switches of the process under test per call.
    pub(super) switches_per_call: f64,
    pub(super) peak_rss_mib: f64,
}

pub(super) async fn measure(
    path: &'static str,
    target: SocketAddr,
    process: u32,
    concurrency: usize,
    total: usize,
    make: MakeRequest,
    check: Check,
) -> Result<Row> {
    let cpu_before = procstat::cpu_seconds(process);
    let switches_before = procstat::context_switches(process);
    let load = load::run(target, concurrency, total, make, check).await?;
    let cpu = procstat::cpu_seconds(process) - cpu_before;
    let switches = procstat::context_switches(process) - switches_before;
    if load.errors > 0 {
        bail!(
            "{path} at concurrency {concurrency}: {} of {} answers were not the expected ones",
            load.errors,
            load.requests
        );
    }
    let (_, peak) = procstat::rss_mib(process);
    eprintln!(
        "  {path:<28} c={concurrency:<3} {:>8.0} req/s  p50 {:.3} ms  p99 {:.3} ms",
        load.per_second(),
        load.ms(0.5),
        load.ms(0.99)
    );
    Ok(Row {
        path,
        concurrency,
        cpu_per_10k: cpu / load.requests as f64 * 10_000.0,
        switches_per_call: switches / load.requests as f64,
        peak_rss_mib: peak,
        load,
    })
}

/// [`measure`] with the connections spread over several instances (CPU summed over them).
pub(super) async fn measure_spread(
    path: &'static str,
    targets: &[SocketAddr],
    processes: &[u32],
    concurrency: usize,
    total: usize,
    make: MakeRequest,
    check: Check,
) -> Result<Row> {
    let cpu = || {
        processes
            .iter()
            .map(|p| procstat::cpu_seconds(*p))
            .sum::<f64>()
    };
    let switches = || {
        processes
            .iter()
            .map(|p| procstat::context_switches(*p))
            .sum::<f64>()
    };
    let (cpu_before, switches_before) = (cpu(), switches());
    let load = load::run_spread(targets, concurrency, total, make, check).await?;
    let used = cpu() - cpu_before;
    let switched = switches() - switches_before;
    if load.errors > 0 {
        bail!(
            "{path} at concurrency {concurrency}: {} of {} answers were not the expected ones",
            load.errors,
            load.requests
        );
    }
    let peak = processes
        .iter()
        .map(|p| procstat::rss_mib(*p).1)
        .fold(0.0, f64::max);
    eprintln!(
        "  {path:<28} c={concurrency:<3} {:>8.0} req/s  p50 {:.3} ms  p99 {:.3} ms",
        load.per_second(),
        load.ms(0.5),
        load.ms(0.99)
    );
    Ok(Row {
        path,
        concurrency,
        cpu_per_10k: used / load.requests as f64 * 10_000.0,
        switches_per_call: switched / load.requests as f64,
        peak_rss_mib: peak,
        load,
    })
}

/// Milliseconds from an answer recorded on one instance (its REST response) to the return
/// of a long poll on that confirmation waiting on the other instance, `samples` times:
/// (p50, p99, max).
pub(super) async fn cross_instance_wake(
    first: SocketAddr,
    second: SocketAddr,
    samples: usize,
) -> Result<(f64, f64, f64)> {
    let mut waits = Vec::with_capacity(samples);
    for sample in 0..samples {
        let (_, _, body) = load::once(
            first,
            modern(
                "up__delete",
                Some(AGENT),
                json!({"path": "/wake", "n": sample}),
                json!({}),
            ),
        )
        .await?;
        let reply: Value = serde_json::from_slice(&body)?;
        let id = reply["result"]["structuredContent"]["elicitation"]["id"]
            .as_str()
            .context("expected a held call")?
            .to_owned();
        let poll = Request::builder()
            .method("GET")
            .uri(format!("/v1/mcp/elicitations/{id}?wait=30"))
            .header("host", "127.0.0.1")
            .header("authorization", format!("Bearer {HUMAN}"))
            .body(Full::new(Bytes::new()))?;
        let waiting = tokio::spawn(async move {
            let answer = load::once(second, poll).await;
            (answer, std::time::Instant::now())
        });
        // Let the poll reach its wait on the other instance.
        tokio::time::sleep(Duration::from_millis(30)).await;
        let approve = Request::builder()
            .method("POST")
            .uri(format!("/v1/mcp/elicitations/{id}/respond"))
            .header("host", "127.0.0.1")
            .header("authorization", format!("Bearer {HUMAN}"))
            .body(Full::new(Bytes::from_static(b"{\"confirmed\": true}")))?;
        let (status, _, _) = load::once(first, approve).await?;
        let recorded = std::time::Instant::now();
        if status != 200 {
            bail!("approving a confirmation answered {status}");
        }
        let (answer, woke) = waiting.await?;
        let (status, _, body) = answer?;
        let seen: Value = serde_json::from_slice(&body)?;
        if status != 200 || seen["status"] != "responded" {
            bail!("the long poll on the other instance answered {status}: {seen}");
        }
        waits.push(woke.saturating_duration_since(recorded).as_secs_f64() * 1000.0);
    }
    waits.sort_by(f64::total_cmp);
    let at = |q: f64| waits[((waits.len() as f64 * q).ceil() as usize).clamp(1, waits.len()) - 1];
    Ok((at(0.5), at(0.99), waits[waits.len() - 1]))
}

/// `/metrics` of a gateway whose catalog holds 1,000 tools, each called once (so each has
/// its series): (p50 ms, p99 ms, bytes), over 200 scrapes on one connection.
pub(super) async fn metrics_with_a_large_catalog(
    me: &Path,
    gateway: &Path,
    dir: &Path,
) -> Result<(f64, f64, usize)> {
    const TOOLS: usize = 1_000;
    let mut upstream_cmd = Command::new(me);
    upstream_cmd.args(["upstream", "--tools", &TOOLS.to_string()]);
    let upstream = start(upstream_cmd, "listening on ").await?;
    let big = start_gateway(
        gateway,
        dir,
        "catalog",
        "[store]\nkind = \"memory\"",
        upstream.addr,
    )
    .await?;
    for i in 0..TOOLS {
        let (status, _, _) = load::once(
            big.addr,
            modern(&format!("up__t{i}"), Some(AGENT), json!({}), json!({})),
        )
        .await?;
        if status != 200 {
            bail!("calling up__t{i} answered {status}");
        }
    }
    let scrape: MakeRequest = Arc::new(|_| {
        Request::builder()
            .method("GET")
            .uri("/metrics")
            .header("host", "127.0.0.1")
            .header("authorization", format!("Bearer {SCRAPER}"))
            .body(Full::new(Bytes::new()))
            .expect("a valid request")
    });
    let ok: Check = Arc::new(|status, body| status == 200 && !body.is_empty());
    let (_, _, text) = load::once(big.addr, scrape(0)).await?;
    let load = load::run(big.addr, 1, 200, scrape, ok).await?;
    if load.errors > 0 {
        bail!("/metrics failed {} times", load.errors);
    }
    eprintln!(
        "  /metrics, {TOOLS} tools         p50 {:.3} ms  p99 {:.3} ms  {} bytes",
        load.ms(0.5),
        load.ms(0.99),
        text.len()
    );
    drop((big, upstream));
    Ok((load.ms(0.5), load.ms(0.99), text.len()))
}

pub(super) async fn transactions(admin: &tokio_postgres::Client) -> Result<i64> {
    let row = admin
        .query_one("SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database WHERE datname = current_database()", &[])
        .await?;
    Ok(row.get(0))
}

/// CPU seconds used so far by each of the cluster's server processes (backends and
/// background workers, by `pg_stat_activity`).
pub(super) async fn backend_cpu(
    admin: &tokio_postgres::Client,
) -> Result<std::collections::HashMap<i32, f64>> {
    let rows = admin.query("SELECT pid FROM pg_stat_activity", &[]).await?;
    Ok(rows
        .iter()
        .map(|row| {
            let pid: i32 = row.get(0);
            (pid, procstat::cpu_seconds(pid.unsigned_abs()))
        })
        .collect())
}

/// The CPU the cluster's processes used between two [`backend_cpu`] readings (a process
/// that started in between counts whole).
pub(super) fn backend_cpu_used(
    before: &std::collections::HashMap<i32, f64>,
    after: &std::collections::HashMap<i32, f64>,
) -> f64 {
    after
        .iter()
        .map(|(pid, cpu)| cpu - before.get(pid).copied().unwrap_or(0.0))
        .sum()
}
