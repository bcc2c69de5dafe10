//! `mcp-bench content`: what scanning results costs (`[content]`, docs/guardrails.md): the
//! gateway's CPU per read-only call whose result is 4 KiB or 256 KiB of text, with the
//! default content policy and with every kind off, and their ratio.

use std::sync::Arc;

use anyhow::Result;
use serde_json::json;

use super::{MakeRequest, Options, measure, start_gateway};
use crate::load::Check;
use crate::peers::{AGENT, bench_dir, modern, start_upstream};

/// Every kind off: nothing is scanned.
const UNSCANNED: &str = "[store]\nkind = \"memory\"\n[content]\nsecret = \"off\"\ncard = \"off\"\nhidden_text = \"off\"\ninjection = \"off\"\ntoo_large = \"off\"";

/// A sized result of the upstream's `read` came back.
fn sized() -> Check {
    const TEXT: &[u8] = b"quick brown fox";
    Arc::new(|status, body| status == 200 && body.windows(TEXT.len()).any(|w| w == TEXT))
}

pub(crate) async fn content(options: Options) -> Result<()> {
    let me = std::env::current_exe()?;
    let dir = bench_dir("content")?;
    let upstream = start_upstream(&me).await?;
    let scanned = start_gateway(
        &options.gateway,
        &dir,
        "scanned",
        "[store]\nkind = \"memory\"",
        upstream.addr,
    )
    .await?;
    let unscanned = start_gateway(
        &options.gateway,
        &dir,
        "unscanned",
        UNSCANNED,
        upstream.addr,
    )
    .await?;
    let mut table = String::from(
        "| result | gateway CPU per call, scanned | not scanned | ratio |\n|---|---:|---:|---:|\n",
    );
    eprintln!("measuring content scanning (release build, c=16):");
    for (label, bytes, total) in [
        (
            "4 KiB",
            4096usize,
            if options.quick { 1_000 } else { 10_000 },
        ),
        (
            "256 KiB",
            256 * 1024,
            if options.quick { 100 } else { 1_000 },
        ),
    ] {
        let make: MakeRequest = Arc::new(move |_| {
            modern(
                "up__read",
                Some(AGENT),
                json!({"path": "/bench", "bytes": bytes}),
                json!({}),
            )
        });
        // Each measured twice, alternating, and the lower of each kept (the machine is shared).
        let mut best = [f64::MAX, f64::MAX];
        for _ in 0..2 {
            for (i, gateway) in [&scanned, &unscanned].into_iter().enumerate() {
                let path = if i == 0 {
                    "content scanned"
                } else {
                    "content not scanned"
                };
                let row = measure(
                    path,
                    gateway.addr,
                    gateway.pid(),
                    16,
                    total,
                    make.clone(),
                    sized(),
                )
                .await?;
                best[i] = best[i].min(row.cpu_per_10k);
            }
        }
        let us = |per_10k: f64| per_10k / 10_000.0 * 1e6;
        table.push_str(&format!(
            "| {label} | {:.1} µs | {:.1} µs | {:.2}× |\n",
            us(best[0]),
            us(best[1]),
            best[0] / best[1]
        ));
    }
    println!("{table}");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("content.md"), &table)?;
    println!("written to target/bench/content.md");
    drop((upstream, scanned, unscanned));
    Ok(())
}
