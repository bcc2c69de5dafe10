//! How throughput grows with cores: the null proxy and the gateway each started pinned to
//! the first k cores it may use (`taskset -c`, so each runtime sizes its worker pool to k),
//! k = 1, 2, 4, 8 as far as the machine has cores, driven at 256 connections. A gateway
//! that scales like the null proxy has nothing shared that grows costly with cores (a
//! lock, a counter every call writes, a table every call reads under a lock).
//!
//! The upstream and the load generator are not pinned: on a machine with few cores they
//! share the pinned ones, and the last rows show the machine, not the process.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use serde_json::{Value, json};

use super::tables::median;
use super::{gateway_config, tokens_auth};
use crate::load::{self, MakeRequest};
use crate::peers::{
    AGENT, forwarded, legacy, open_session, read_direct, read_through, start, start_null_proxy,
};
use crate::place::{allowed_cpus, on_cpus};
use crate::procstat;

/// Connections in every row.
const CONNECTIONS: usize = 256;

/// Rounds of each path at each core count.
const ROUNDS: usize = 3;

/// One measured row: `path` on `cores` cores.
pub(super) struct CoreRow {
    pub(super) path: &'static str,
    pub(super) cores: usize,
    pub(super) per_second: f64,
    pub(super) cpu_us_per_call: f64,
}

const NULL: &str = "null proxy";
const MODERN: &str = "gateway 2026-07-28";
const LEGACY: &str = "gateway 2025-11-25";

/// The core counts this machine can pin: 1, 2, 4, 8 up to its cores.
fn core_counts() -> Vec<usize> {
    let available = allowed_cpus().len();
    [1, 2, 4, 8]
        .into_iter()
        .filter(|&k| k <= available)
        .collect()
}

/// One round of `make` on `target`: calls per second and CPU µs a call.
async fn round(
    path: &'static str,
    cores: usize,
    target: SocketAddr,
    pid: u32,
    requests: usize,
    make: &MakeRequest,
) -> Result<(f64, f64)> {
    let cpu_before = procstat::cpu_seconds(pid);
    let load = load::run(target, CONNECTIONS, requests, make.clone(), forwarded()).await?;
    anyhow::ensure!(
        load.errors == 0,
        "{path} on {cores} cores: {} answers were not the expected ones",
        load.errors
    );
    let cpu = procstat::cpu_seconds(pid) - cpu_before;
    eprintln!(
        "    {path} on {cores}: {:.0} req/s, p99 {:.1} ms, max {:.1} ms",
        load.per_second(),
        load.ms(0.99),
        load.ms(1.0)
    );
    Ok((load.per_second(), cpu / requests as f64 * 1e6))
}

/// The median of each path's rounds (calls per second and CPU a call, each its own median).
fn median_row(path: &'static str, cores: usize, rounds: &[(f64, f64)]) -> CoreRow {
    let of = |pick: fn(&(f64, f64)) -> f64| {
        median(&rounds.iter().map(pick).collect::<Vec<_>>()).map_or(f64::NAN, |(mid, _, _)| mid)
    };
    let row = CoreRow {
        path,
        cores,
        per_second: of(|r| r.0),
        cpu_us_per_call: of(|r| r.1),
    };
    eprintln!("  {path:<28} {cores} cores {:>8.0} req/s", row.per_second);
    row
}

/// Every core count's rows.
pub(super) async fn cores(
    me: &Path,
    gateway: &Path,
    dir: &Path,
    upstream: SocketAddr,
    quick: bool,
) -> Result<Vec<CoreRow>> {
    let requests = if quick { 4_000 } else { 15_000 };
    let config = gateway_config(
        dir,
        "cores",
        "[store]\nkind = \"memory\"",
        &tokens_auth(),
        upstream,
    )?;
    let read = read_direct();
    let through = read_through(AGENT);
    let mut rows = Vec::new();
    let allowed = allowed_cpus();
    for k in core_counts() {
        let cpus = &allowed[..k];
        let proxy = start_null_proxy(on_cpus(cpus, me), upstream).await?;
        let mut gateway_cmd = on_cpus(cpus, gateway);
        gateway_cmd
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "warn");
        let pinned = start(gateway_cmd, "mcp-gateway listening on ").await?;
        let session = open_session(pinned.addr).await?;
        let legacy_read: MakeRequest = Arc::new(move |_| legacy("up__read", &session));
        // The three paths take turns, round after round, so that a busy spell of the
        // machine falls on all of them alike; each row is the median of its rounds.
        let paths = [
            (NULL, proxy.addr, proxy.pid(), &read),
            (MODERN, pinned.addr, pinned.pid(), &through),
            (LEGACY, pinned.addr, pinned.pid(), &legacy_read),
        ];
        let mut measured: [Vec<(f64, f64)>; 3] = Default::default();
        for _ in 0..ROUNDS {
            for ((path, target, pid, make), rounds) in paths.iter().zip(&mut measured) {
                rounds.push(round(path, k, *target, *pid, requests, make).await?);
            }
        }
        for ((path, ..), rounds) in paths.iter().zip(&measured) {
            rows.push(median_row(path, k, rounds));
        }
        drop((proxy, pinned));
    }
    Ok(rows)
}

/// The core-scaling table and JSON.
pub(super) fn cores_report(md: &mut String, rows: &[CoreRow]) -> Value {
    let find = |path: &str, k: usize| rows.iter().find(|r| r.path == path && r.cores == k);
    let _ = write!(
        md,
        "\nCore scaling ({CONNECTIONS} connections; each process pinned to k cores; the median of {ROUNDS} rounds, the three paths taking turns):\n\n| cores | null proxy calls/s | 2026-07-28 | 2025-11-25 | CPU µs/call: null | 2026-07-28 | 2025-11-25 | k ÷ 1: null | 2026-07-28 (÷ null's) | 2025-11-25 (÷ null's) |\n|---|---|---|---|---|---|---|---|---|---|\n"
    );
    let mut json_rows = Vec::new();
    let ks: Vec<usize> = core_counts();
    for &k in &ks {
        let (Some(proxied), Some(modern), Some(legacy)) =
            (find(NULL, k), find(MODERN, k), find(LEGACY, k))
        else {
            continue;
        };
        let scale =
            |path: &str, now: f64| find(path, 1).map_or(f64::NAN, |one| now / one.per_second);
        let null_scale = scale(NULL, proxied.per_second);
        let modern_scale = scale(MODERN, modern.per_second);
        let legacy_scale = scale(LEGACY, legacy.per_second);
        let _ = writeln!(
            md,
            "| {k} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {null_scale:.2} | {modern_scale:.2} ({:.2}) | {legacy_scale:.2} ({:.2}) |",
            proxied.per_second,
            modern.per_second,
            legacy.per_second,
            proxied.cpu_us_per_call,
            modern.cpu_us_per_call,
            legacy.cpu_us_per_call,
            modern_scale / null_scale,
            legacy_scale / null_scale,
        );
        json_rows.push(json!({"cores": k,
            "calls_per_second": {"null": proxied.per_second, "modern": modern.per_second, "legacy": legacy.per_second},
            "cpu_us_per_call": {"null": proxied.cpu_us_per_call, "modern": modern.cpu_us_per_call, "legacy": legacy.cpu_us_per_call},
            "scaling_vs_one_core": {"null": null_scale, "modern": modern_scale, "legacy": legacy_scale}}));
    }
    Value::Array(json_rows)
}
