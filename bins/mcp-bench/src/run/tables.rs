//! The report: docs/benchmarks.md's tables and the JSON beside them, from the measured rows.

use serde_json::{Value, json};
use std::fmt::Write as _;

use super::scale::scale_report;
use super::*;

pub(super) fn report(
    rows: &[Row],
    (idle_rss, rss_after): (f64, &[f64]),
    round_trips: Option<(f64, f64)>,
    idle: &crate::idle::IdleMemory,
    wake: &(f64, f64, f64),
    scrape: &(f64, f64, usize),
    (counted, core_rows, placed): (&Result<Vec<Counts>, String>, &[CoreRow], &str),
) -> (String, Value) {
    let mut md = String::from(
        "| path | conc. | req/s | p50 ms | p90 ms | p99 ms | CPU s / 10k calls | ctx sw / call | peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut json_rows = Vec::new();
    for r in rows {
        let _ = writeln!(
            md,
            "| {} | {} | {:.0} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} | {:.1} |",
            r.path,
            r.concurrency,
            r.load.per_second(),
            r.load.ms(0.5),
            r.load.ms(0.9),
            r.load.ms(0.99),
            r.cpu_per_10k,
            r.switches_per_call,
            r.peak_rss_mib
        );
        json_rows.push(json!({
            "path": r.path, "concurrency": r.concurrency, "requests": r.load.requests,
            "requests_per_second": r.load.per_second(), "p50_ms": r.load.ms(0.5), "p90_ms": r.load.ms(0.9), "p99_ms": r.load.ms(0.99),
            "cpu_seconds_per_10k": r.cpu_per_10k, "context_switches_per_call": r.switches_per_call, "peak_rss_mib": r.peak_rss_mib,
        }));
    }
    let _ = write!(
        md,
        "\nRatios: median over the {ROUNDS} interleaved rounds (min–max in brackets). The null proxy, read-only, prompts/get, resources/read and memory destructive rows ran with {placed} (the direct row measures the upstream where it ran); the PostgreSQL and scale-out rows ran unpinned.\n\n| ratio | conc. 1 | conc. 16 | conc. 64 |\n|---|---|---|---|\n"
    );
    let mut ratios = serde_json::Map::new();
    type Ratio = (
        &'static str,
        &'static str,
        &'static str,
        fn(&Row, &Row) -> f64,
    );
    let lines: [Ratio; 17] = [
        (
            "gateway read-only CPU/call ÷ null proxy",
            "gateway read-only",
            "null proxy",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
        (
            "traced (sample 0.1) ÷ untraced read-only CPU/call",
            "gateway read-only, traced 0.1",
            "gateway read-only",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
        (
            "jwt remembered ÷ tokens read-only CPU/call",
            "gateway read-only, jwt remembered",
            "gateway read-only",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
        (
            "jwt first sight ÷ tokens read-only CPU/call",
            "gateway read-only, jwt first sight",
            "gateway read-only",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
        (
            "gateway prompts/get CPU/call ÷ null proxy",
            "gateway prompts/get",
            "null proxy prompts/get",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
        (
            "gateway resources/read CPU/call ÷ null proxy",
            "gateway resources/read",
            "null proxy resources/read",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
        (
            "gateway read-only, legacy CPU/call ÷ null proxy",
            "gateway read-only, legacy",
            "null proxy",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
        (
            "2026-07-28 ÷ 2025-11-25 read-only CPU/call",
            "gateway read-only",
            "gateway read-only, legacy",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
        (
            "2026-07-28 − 2025-11-25 read-only context switches/call",
            "gateway read-only",
            "gateway read-only, legacy",
            |a, b| a.switches_per_call - b.switches_per_call,
        ),
        (
            "gateway read-only p99 ÷ null proxy",
            "gateway read-only",
            "null proxy",
            |a, b| a.load.ms(0.99) / b.load.ms(0.99),
        ),
        (
            "gateway read-only, legacy p99 ÷ null proxy",
            "gateway read-only, legacy",
            "null proxy",
            |a, b| a.load.ms(0.99) / b.load.ms(0.99),
        ),
        (
            "gateway read-only p50 ÷ null proxy",
            "gateway read-only",
            "null proxy",
            |a, b| a.load.ms(0.5) / b.load.ms(0.5),
        ),
        (
            "gateway read-only p50 ÷ direct",
            "gateway read-only",
            "direct",
            |a, b| a.load.ms(0.5) / b.load.ms(0.5),
        ),
        (
            "gateway read-only p99 ÷ direct",
            "gateway read-only",
            "direct",
            |a, b| a.load.ms(0.99) / b.load.ms(0.99),
        ),
        (
            "gateway read-only p99 − direct p99 (ms)",
            "gateway read-only",
            "direct",
            |a, b| a.load.ms(0.99) - b.load.ms(0.99),
        ),
        (
            "postgres confirmed calls/s, 2 instances ÷ 1",
            "gateway destructive, postgres, 2 instances",
            "gateway destructive, postgres",
            |a, b| a.load.per_second() / b.load.per_second(),
        ),
        (
            "destructive (memory) CPU/call ÷ read-only",
            "gateway destructive, memory",
            "gateway read-only",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
    ];
    for (label, a, b, f) in lines {
        let mut cells = Vec::new();
        let mut values = Vec::new();
        for c in [1, 16, 64] {
            let pairs: Vec<f64> = find_all(rows, a, c)
                .into_iter()
                .zip(find_all(rows, b, c))
                .map(|(x, y)| f(x, y))
                .collect();
            match median(&pairs) {
                Some((median, low, high)) if pairs.len() > 1 => {
                    cells.push(format!("{median:.2} ({low:.2}–{high:.2})"));
                    values.push(json!(median));
                }
                Some((median, _, _)) => {
                    cells.push(format!("{median:.2}"));
                    values.push(json!(median));
                }
                None => cells.push("—".into()),
            }
        }
        let _ = writeln!(md, "| {label} | {} |", cells.join(" | "));
        ratios.insert(label.into(), Value::Array(values));
    }
    let _ = writeln!(
        md,
        "\nGateway RSS idle: {idle_rss:.1} MiB; after three identical read-only runs (conc. 16): {} MiB.",
        rss_after
            .iter()
            .map(|r| format!("{r:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let per_session_kib = (idle.open - idle.before) * 1024.0 / idle.sessions as f64;
    let _ = writeln!(
        md,
        "{} idle sessions, each with its GET stream open: RSS {:.1} MiB before, {:.1} MiB open ({per_session_kib:.1} KiB per session), {:.1} MiB after {} s idle.",
        idle.sessions,
        idle.before,
        idle.open,
        idle.later,
        idle.idle.as_secs()
    );
    let p99 = |runs: &[(f64, f64); 2]| (runs[0].1 + runs[1].1) / 2.0;
    let _ = writeln!(
        md,
        "Read-only p50 / p99 at conc. 16 with those {} sessions and {} more each waiting on an open confirmation stream: {:.2} / {:.2} ms and {:.2} / {:.2} ms (two runs), against the same gateway idle: {:.2} / {:.2} ms before and {:.2} / {:.2} ms after; p99 loaded ÷ idle (means of the two runs): {:.2}.",
        idle.sessions,
        idle.confirmations,
        idle.loaded_read_ms[0].0,
        idle.loaded_read_ms[0].1,
        idle.loaded_read_ms[1].0,
        idle.loaded_read_ms[1].1,
        idle.idle_read_ms[0].0,
        idle.idle_read_ms[0].1,
        idle.idle_read_ms[1].0,
        idle.idle_read_ms[1].1,
        p99(&idle.loaded_read_ms) / p99(&idle.idle_read_ms),
    );
    if let Some((trips, backend_us)) = round_trips {
        let _ = writeln!(
            md,
            "PostgreSQL transactions (= network round trips) per confirmed destructive call, conc. 16: {trips:.2}; the cluster's processes' CPU per confirmed call: {backend_us:.0} µs."
        );
    }
    let _ = writeln!(
        md,
        "An answer recorded on one instance wakes a long poll waiting on the other (PostgreSQL NOTIFY): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms.",
        wake.0, wake.1, wake.2
    );
    let _ = writeln!(
        md,
        "`/metrics` with 1,000 tools in the catalog, each called once: p50 {:.2} ms, p99 {:.2} ms, {} bytes.",
        scrape.0, scrape.1, scrape.2
    );
    let scale = scale_report(&mut md, rows);
    let counts = counts_report(&mut md, counted);
    let cores = cores_report(&mut md, core_rows);
    let json = json!({"rows": json_rows, "per_call_counts": counts, "core_scaling": cores, "ratios": ratios, "scale_out": scale, "idle_rss_mib": idle_rss, "rss_after_runs_mib": rss_after, "postgres_round_trips_per_call": round_trips.map(|r| r.0), "postgres_backend_cpu_us_per_call": round_trips.map(|r| r.1),
        "cross_instance_wake_ms": {"p50": wake.0, "p99": wake.1, "max": wake.2},
        "metrics_1000_tools": {"p50_ms": scrape.0, "p99_ms": scrape.1, "bytes": scrape.2},
        "idle_sessions": {"sessions": idle.sessions, "rss_before_mib": idle.before, "rss_open_mib": idle.open, "rss_later_mib": idle.later, "idle_seconds": idle.idle.as_secs(),
            "confirmation_streams": idle.confirmations, "read_ms_idle": idle.idle_read_ms, "read_ms_loaded": idle.loaded_read_ms}});
    (md, json)
}

/// Every row of `path` at concurrency `c`, in the order measured.
pub(super) fn find_all<'a>(rows: &'a [Row], path: &str, c: usize) -> Vec<&'a Row> {
    rows.iter()
        .filter(|r| r.path == path && r.concurrency == c)
        .collect()
}

/// The median, least and greatest of `values`.
pub(super) fn median(values: &[f64]) -> Option<(f64, f64, f64)> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let mid = *sorted.get(sorted.len() / 2)?;
    Some((mid, sorted[0], sorted[sorted.len() - 1]))
}
