//! `cargo xtask test`: the one test command, identical for developers and CI.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::layering;
use crate::postgres::Cluster;

/// The workspace root (xtask lives one level below it).
pub(crate) fn workspace_root() -> PathBuf {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map(PathBuf::from)
        .unwrap_or(manifest_dir)
}

/// A `cargo` command run at the workspace root.
pub(crate) fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

/// Runs one step, printing a one-line summary; fails on a non-zero exit.
fn step(name: &str, run: impl FnOnce() -> Result<()>) -> Result<()> {
    let started = Instant::now();
    let result = run();
    let secs = started.elapsed().as_secs_f64();
    match &result {
        Ok(()) => println!("xtask test: ok     {name} ({secs:.1}s)"),
        Err(err) => println!("xtask test: FAILED {name} ({secs:.1}s): {err:#}"),
    }
    result.with_context(|| format!("step `{name}` failed"))
}

/// Runs `cmd`, failing on a non-zero exit.
pub(crate) fn status(mut cmd: Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("could not start {shown}"))?;
    if !status.success() {
        bail!("{shown} exited with {status}");
    }
    Ok(())
}

pub(crate) fn run() -> Result<()> {
    step("fmt", || {
        let mut cmd = cargo();
        cmd.args(["fmt", "--all", "--check"]);
        status(cmd)
    })?;
    step("clippy", || {
        let mut cmd = cargo();
        cmd.args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ]);
        status(cmd)
    })?;
    step("layering", layering::check)?;
    let mut node_env = Vec::new();
    step("mcp peers (npm, PyPI)", || {
        node_env = crate::node::install()?;
        Ok(())
    })?;
    let mut clusters = None;
    step("postgres", || {
        let shared = Cluster::start()?;
        println!("xtask test: throwaway PostgreSQL at {}", shared.url());
        // A second cluster the fault tests stop, start, freeze and thaw.
        let faults = Cluster::start()?;
        println!("xtask test: fault-test PostgreSQL at {}", faults.url());
        clusters = Some((shared, faults));
        Ok(())
    })?;
    let (shared, faults) = clusters
        .as_ref()
        .context("the postgres step started no cluster")?;
    let (url, fault_url, control) = (shared.url(), faults.url(), faults.control_script()?);
    let tests = step("tests", || {
        let mut cmd = cargo();
        // Every failing test in one run, not only the first failing binary's.
        cmd.args(["test", "--workspace", "--no-fail-fast"])
            .env("DATABASE_URL", &url)
            .env("TEST_INTEGRATION", "1")
            .env("MCP_FAULT_DATABASE_URL", &fault_url)
            .env("MCP_FAULT_PG_CONTROL", &control)
            .envs(node_env.iter().map(|(k, v)| (k, v)));
        status(cmd)
    });
    // Stop and delete the clusters whether or not the tests passed.
    drop(clusters);
    tests?;
    step("conformance", crate::conformance::run)?;
    step("doc", || {
        let mut cmd = cargo();
        cmd.args(["doc", "--workspace", "--no-deps"])
            .env("RUSTDOCFLAGS", "-D warnings");
        status(cmd)
    })?;
    println!("xtask test: all steps passed");
    Ok(())
}
