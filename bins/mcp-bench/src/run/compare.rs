//! `mcp-bench compare`: one gateway build against another, CPU per read-only call in both
//! eras beside the null proxy's, the three taking turns round after round.
//!
//! A change of a few per cent is below the spread of the reference run's rounds on a busy
//! machine; it shows only when the two builds run the same calls one after the other,
//! many times, each on the same core. Every process under test (the null proxy, the
//! baseline, the build measured) runs pinned to one CPU; the upstream and the load
//! generator on the others (place.rs). The report is the median of each path's rounds, its
//! range, its ratio to the null proxy's median, and the build's ratio to the baseline's.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Result, bail};

use super::rows::measure;
use super::tables::median;
use super::{start_gateway_with, tokens_auth};
use crate::load::{self, MakeRequest};
use crate::peers::{
    AGENT, bench_dir, forwarded, legacy, open_session, read_direct, read_through, start_null_proxy,
    start_upstream,
};
use crate::place::{self, Placement};

/// What `compare` is asked to do.
pub(crate) struct CompareOptions {
    /// The build measured.
    pub(crate) gateway: std::path::PathBuf,
    /// The build it is compared with.
    pub(crate) baseline: std::path::PathBuf,
    pub(crate) rounds: usize,
    pub(crate) concurrency: usize,
    pub(crate) requests: usize,
}

/// Calls driven, unmeasured, before each measured run (connections made, caches warm).
const WARM_UP: usize = 3_000;

/// The paths of one round, in the order they take turns.
const PATHS: [&str; 5] = [
    "null proxy",
    "baseline 2026-07-28",
    "baseline 2025-11-25",
    "gateway 2026-07-28",
    "gateway 2025-11-25",
];

pub(crate) async fn compare(options: CompareOptions) -> Result<()> {
    if options.rounds == 0 || options.requests == 0 {
        bail!("compare needs at least one round of at least one request");
    }
    let me = std::env::current_exe()?;
    let dir = bench_dir("compare")?;
    let upstream = start_upstream(&me).await?;
    let place = Placement::of_this_machine();
    let proxy = start_null_proxy(place::command(place.as_ref(), &me), upstream.addr).await?;
    let store = "[store]\nkind = \"memory\"";
    let start = |binary: &Path, name: &'static str| {
        let place = place.as_ref();
        let dir = &dir;
        let binary = binary.to_owned();
        let upstream = upstream.addr;
        async move {
            start_gateway_with(&binary, dir, name, store, &tokens_auth(), upstream, place).await
        }
    };
    let baseline = start(&options.baseline, "baseline").await?;
    let measured = start(&options.gateway, "measured").await?;
    let placed = place::keep_apart(place.as_ref(), &[std::process::id(), upstream.pid()]).await?;
    let session_of = |s: String| -> MakeRequest { Arc::new(move |_| legacy("up__read", &s)) };
    let targets = [
        (proxy.addr, proxy.pid(), read_direct()),
        (baseline.addr, baseline.pid(), read_through(AGENT)),
        (
            baseline.addr,
            baseline.pid(),
            session_of(open_session(baseline.addr).await?),
        ),
        (measured.addr, measured.pid(), read_through(AGENT)),
        (
            measured.addr,
            measured.pid(),
            session_of(open_session(measured.addr).await?),
        ),
    ];
    eprintln!(
        "comparing {} with {} ({} rounds of {} read-only calls at concurrency {}; {placed}):",
        options.gateway.display(),
        options.baseline.display(),
        options.rounds,
        options.requests,
        options.concurrency
    );
    let mut cpu: [Vec<f64>; 5] = Default::default();
    for round in 1..=options.rounds {
        eprintln!(" round {round}");
        for ((path, (target, pid, make)), samples) in PATHS.iter().zip(&targets).zip(&mut cpu) {
            load::run(
                *target,
                options.concurrency,
                WARM_UP,
                make.clone(),
                forwarded(),
            )
            .await?;
            let row = measure(
                path,
                *target,
                *pid,
                options.concurrency,
                options.requests,
                make.clone(),
                forwarded(),
            )
            .await?;
            // CPU seconds per 10,000 calls are microseconds per 100 calls.
            samples.push(row.cpu_per_10k * 100.0);
        }
    }
    println!("{}", report(&options, &placed, &cpu));
    Ok(())
}

/// The comparison's table: each path's median µs a call (range), ÷ the null proxy's, and
/// the build's ÷ the baseline's.
fn report(options: &CompareOptions, placed: &str, cpu: &[Vec<f64>; 5]) -> String {
    let medians: Vec<(f64, f64, f64)> = cpu
        .iter()
        .map(|samples| median(samples).unwrap_or((f64::NAN, f64::NAN, f64::NAN)))
        .collect();
    let null = medians[0].0;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "CPU per read-only call, {} rounds of {} calls at concurrency {} ({placed}); the baseline is {}, the build {}:\n",
        options.rounds,
        options.requests,
        options.concurrency,
        options.baseline.display(),
        options.gateway.display()
    );
    let _ = writeln!(
        md,
        "| path | µs/call (median) | range | ÷ null proxy |\n|---|---|---|---|"
    );
    for (path, (mid, low, high)) in PATHS.iter().zip(&medians) {
        let _ = writeln!(
            md,
            "| {path} | {mid:.2} | {low:.2}–{high:.2} | {:.2} |",
            mid / null
        );
    }
    let _ = writeln!(
        md,
        "\nThe build ÷ the baseline: 2026-07-28 {:.3}, 2025-11-25 {:.3}.",
        medians[3].0 / medians[1].0,
        medians[4].0 / medians[2].0
    );
    md
}
