//! Developer and CI tasks for the mcp-gateway workspace: `cargo xtask <task>`.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};

mod cmd;
mod conformance;
mod cycles;
mod dist;
mod examples;
mod fuzz;
mod layering;
mod node;
mod postgres;
mod test;
mod tidy;

const USAGE: &str = "usage: cargo xtask <task>

tasks:
  test                           fmt, clippy, layering check, all tests against a
                                 throwaway PostgreSQL, the conformance suite, docs
                                 (exactly what CI runs)
  dist [--profile release|dev]   the release artefacts in target/dist/: the tarball (binary,
                                 migrations, example config, systemd unit, Kubernetes
                                 manifests, Containerfile, docs) and the container image
                                 (with buildah, where installed)
  dist --check                   what `test` checks of them, around the tests' debug binary
  layering [--write]             the crate and module layering; --write makes
                                 ARCHITECTURE.md's crate edges Cargo.toml's
  conformance                    the MCP conformance suite (server scenarios) against the
                                 fixture server, directly and through the gateway
  fuzz [--seconds N] [--engine auto|stable|cargo-fuzz]
                                 every fuzz target for N seconds (default 60):
                                 cargo-fuzz where a nightly toolchain exists, else the
                                 stable engine (proptest mutations of the seed corpus)
  soak [--minutes N] [--sample-secs S]
                                 the release gateway on a throwaway PostgreSQL under a
                                 mixed load for N minutes (default 10), sampled every S
                                 seconds (default 30); fails unless memory, descriptors,
                                 threads and connections stay flat and every approved
                                 confirmation ran exactly once; report in target/soak/
  migrate [--database-url URL]   apply the embedded migrations (default: $DATABASE_URL)
  bench [--quick]                the gateway's cost per call against a direct call and a
                                 null proxy (release builds, throwaway PostgreSQL), then
                                 the store benchmark; tables in target/bench/
  bench store [--quick]          confirmation cycles per second and database round trips
                                 per cycle, memory and PostgreSQL (throwaway cluster)
  bench content [--quick]        only what scanning results costs: 4 KiB and 256 KiB
                                 results, content policy on and off; target/bench/content.md
  bench per-call [--quick]       only system calls, context switches and allocations per
                                 call (perf; root) and throughput on 1, 2, 4, 8 cores
  bench compare BASELINE [--quick]
                                 this tree's gateway against BASELINE (an mcp-gateway
                                 release binary of another commit): CPU per read-only call
                                 in both eras and the null proxy's, taking turns for 8
                                 rounds, each pinned to the same CPU
  bench confirmed [--quick]      only confirmed destructive calls on PostgreSQL: calls/s,
                                 CPU and transactions per call, and the statements' times
                                 (the cluster loads pg_stat_statements)
  bench scale-out [--quick]      only the scale-out rows: 1, 2 and 3 gateway instances on
                                 one PostgreSQL, each under a CPU quota (cgroup; root)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["test"] => test::run(),
        ["conformance"] => conformance::run(),
        ["dist", rest @ ..] => dist::run(rest),
        ["layering"] => layering::check(),
        ["layering", "--write"] => layering::write(),
        ["tidy"] => tidy::check(),
        ["fuzz", rest @ ..] => fuzz::run(rest),
        ["migrate", rest @ ..] => migrate(rest),
        ["soak", rest @ ..] => soak(rest),
        ["bench", "store", rest @ ..] => bench_store(rest),
        ["bench", "scale-out", rest @ ..] => bench_scale_out(rest),
        ["bench", "content", rest @ ..] => bench_content(rest),
        ["bench", "per-call", rest @ ..] => bench_per_call(rest),
        ["bench", "compare", rest @ ..] => bench_compare(rest),
        ["bench", "confirmed", rest @ ..] => bench_confirmed(rest),
        ["bench", rest @ ..] => bench_gateway(rest),
        ["help" | "--help" | "-h"] => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn migrate(args: &[&str]) -> Result<()> {
    let url = match args {
        [] => std::env::var("DATABASE_URL")
            .context("no database given: pass --database-url URL or set DATABASE_URL")?,
        ["--database-url", url] => (*url).to_owned(),
        _ => bail!("usage: cargo xtask migrate [--database-url URL]"),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let applied = elicitation_store::migrate_url(&url, None)
            .await
            .context("run migrations")?;
        if applied.is_empty() {
            println!("xtask migrate: the database is up to date");
        }
        for name in applied {
            println!("xtask migrate: applied {name}");
        }
        Ok(())
    })
}

/// Builds the release gateway and harness, then runs `mcp-bench <args> --gateway …` on a
/// throwaway PostgreSQL (DATABASE_URL).
fn release_harness(args: &[&str]) -> Result<()> {
    release_harness_on(args, "")
}

/// [`release_harness`] on a cluster started with the extra server options `server_options`.
fn release_harness_on(args: &[&str], server_options: &str) -> Result<()> {
    let mut build = cmd::cargo();
    build.args(["build", "--release", "-p", "mcp-gateway", "-p", "mcp-bench"]);
    cmd::status(build)?;
    let cluster = postgres::Cluster::start_with(server_options)?;
    let mut run = std::process::Command::new(cmd::target_dir().join("release/mcp-bench"));
    run.args(args)
        .arg("--gateway")
        .arg(cmd::target_dir().join("release/mcp-gateway"))
        .env("DATABASE_URL", cluster.url())
        .current_dir(cmd::workspace_root());
    let result = cmd::status(run);
    drop(cluster);
    result
}

/// `[]` or `["--quick"]`, else the usage.
fn quick_flag<'a>(args: &[&'a str], usage: &str) -> Result<&'a [&'a str]> {
    match args {
        [] => Ok(&[]),
        ["--quick"] => Ok(&["--quick"]),
        _ => bail!("{usage}"),
    }
}

fn bench_gateway(args: &[&str]) -> Result<()> {
    let quick = quick_flag(args, "usage: cargo xtask bench [--quick]")?;
    release_harness(&[&["run"], quick].concat())?;
    bench_store(args)
}

fn bench_content(args: &[&str]) -> Result<()> {
    let quick = quick_flag(args, "usage: cargo xtask bench content [--quick]")?;
    release_harness(&[&["content"], quick].concat())
}

fn bench_per_call(args: &[&str]) -> Result<()> {
    let quick = quick_flag(args, "usage: cargo xtask bench per-call [--quick]")?;
    release_harness(&[&["per-call"], quick].concat())
}

/// `bench compare BASELINE [--quick]`: this tree's release build against the gateway
/// binary `BASELINE` (a release build of another commit).
fn bench_compare(args: &[&str]) -> Result<()> {
    const USAGE: &str = "usage: cargo xtask bench compare BASELINE [--quick] (BASELINE: an mcp-gateway release binary of another commit)";
    let (baseline, quick) = match args {
        [baseline] => (*baseline, false),
        [baseline, "--quick"] | ["--quick", baseline] => (*baseline, true),
        _ => bail!("{USAGE}"),
    };
    let baseline = std::fs::canonicalize(baseline)
        .with_context(|| format!("the baseline {baseline}: no such file ({USAGE})"))?;
    let baseline = baseline.to_string_lossy();
    let mut run = vec!["compare", "--baseline", &baseline];
    if quick {
        run.push("--quick");
    }
    release_harness(&run)
}

fn bench_confirmed(args: &[&str]) -> Result<()> {
    let quick = quick_flag(args, "usage: cargo xtask bench confirmed [--quick]")?;
    release_harness_on(
        &[&["confirmed"], quick].concat(),
        "-c shared_preload_libraries=pg_stat_statements",
    )
}

fn bench_scale_out(args: &[&str]) -> Result<()> {
    let quick = quick_flag(args, "usage: cargo xtask bench scale-out [--quick]")?;
    release_harness(&[&["scale-out"], quick].concat())
}

fn soak(args: &[&str]) -> Result<()> {
    let usage = "usage: cargo xtask soak [--minutes N] [--sample-secs S]";
    let mut minutes = "10".to_owned();
    let mut sample_secs = "30".to_owned();
    let mut rest = args;
    while let [flag, value, tail @ ..] = rest {
        match *flag {
            "--minutes" => minutes = (*value).to_owned(),
            "--sample-secs" => sample_secs = (*value).to_owned(),
            _ => bail!("{usage}"),
        }
        rest = tail;
    }
    if !rest.is_empty() {
        bail!("{usage}");
    }
    release_harness(&["soak", "--minutes", &minutes, "--sample-secs", &sample_secs])
}

fn bench_store(args: &[&str]) -> Result<()> {
    let quick = quick_flag(args, "usage: cargo xtask bench store [--quick]")?;
    let cluster = postgres::Cluster::start()?;
    let mut cmd = cmd::cargo();
    cmd.args([
        "bench",
        "-p",
        "elicitation-store",
        "--features",
        "test-support",
        "--bench",
        "store",
        "--",
    ])
    .args(quick)
    .env("DATABASE_URL", cluster.url());
    let result = cmd::status(cmd);
    drop(cluster);
    result
}
