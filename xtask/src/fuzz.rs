//! `cargo xtask fuzz --seconds N`: every fuzz target for N seconds (docs/reliability.md).
//!
//! Coverage-guided with cargo-fuzz (libFuzzer) where a nightly toolchain is installed
//! (cargo-fuzz itself is installed with `cargo install` when missing); the config loader,
//! which lives in the binary, and every target on a machine without nightly run on the
//! stable engine (`mcp-fuzz`: proptest mutations of the seed corpus). Each line of output
//! says which engine ran which target.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cmd::{cargo, status, workspace_root};

/// The cargo-fuzz targets (`fuzz/fuzz_targets/`), each seeded from the corpus directory
/// of the same name in `crates/mcp-fuzz/corpus/`.
const LIBFUZZER_TARGETS: &[&str] = &[
    "jsonrpc",
    "sse",
    "headers",
    "validate_response",
    "sealed_tokens",
    "rest_bodies",
];

/// The stable engine's tests: (package, cargo target selector, test name filter).
const STABLE: &[(&str, &str, &str)] = &[
    ("mcp-wire", "--lib", "fuzzing::tests::fuzz_"),
    ("elicitation-core", "--lib", "fuzzing::tests::fuzz_"),
    ("mcp-http", "--lib", "fuzzing::tests::fuzz_"),
    ("mcp-gateway", "--bins", "config::tests::fuzz_"),
];

fn has_nightly() -> bool {
    Command::new("rustup")
        .args(["toolchain", "list"])
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.starts_with("nightly"))
        })
}

fn ensure_cargo_fuzz() -> Result<()> {
    let installed = Command::new("cargo")
        .args(["+nightly", "fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if installed {
        return Ok(());
    }
    println!("xtask fuzz: installing cargo-fuzz (cargo install cargo-fuzz --locked)");
    let mut install = Command::new("cargo");
    install.args(["install", "cargo-fuzz", "--locked"]);
    status(install).context(
        "cargo-fuzz could not be installed; run `cargo xtask fuzz --engine stable` to use the stable engine only",
    )
}

pub(crate) fn run(args: &[&str]) -> Result<()> {
    let usage = "usage: cargo xtask fuzz [--seconds N] [--engine auto|stable|cargo-fuzz]";
    let mut seconds = 60u64;
    let mut engine = "auto";
    let mut rest = args;
    while let [flag, value, tail @ ..] = rest {
        match *flag {
            "--seconds" => {
                seconds = value
                    .parse()
                    .with_context(|| format!("{usage}: --seconds takes a whole number"))?
            }
            "--engine" => engine = value,
            _ => bail!("{usage}"),
        }
        rest = tail;
    }
    if !rest.is_empty() || seconds == 0 {
        bail!("{usage}");
    }
    let coverage = match engine {
        "stable" => false,
        "cargo-fuzz" if !has_nightly() => {
            bail!(
                "--engine cargo-fuzz needs a nightly toolchain (`rustup toolchain list` shows none)"
            )
        }
        "cargo-fuzz" => true,
        "auto" => has_nightly(),
        other => bail!("{usage}: unknown engine {other:?}"),
    };
    let root = workspace_root();
    if coverage {
        ensure_cargo_fuzz()?;
        for target in LIBFUZZER_TARGETS {
            libfuzzer(&root, target, seconds)?;
        }
    } else {
        println!("xtask fuzz: no nightly toolchain; every target runs on the stable engine");
    }
    for (package, selector, filter) in STABLE {
        if coverage && *package != "mcp-gateway" {
            continue;
        }
        println!(
            "xtask fuzz: stable engine (proptest mutations of the seed corpus), {package} {filter}*, {seconds} s each"
        );
        let mut cmd = cargo();
        cmd.args([
            "test",
            "--release",
            "-p",
            package,
            selector,
            filter,
            "--",
            "--nocapture",
        ])
        .env("MCP_FUZZ_SECONDS", seconds.to_string());
        status(cmd)?;
    }
    println!("xtask fuzz: every target ran {seconds} s without a failure");
    Ok(())
}

fn libfuzzer(root: &Path, target: &str, seconds: u64) -> Result<()> {
    println!("xtask fuzz: cargo-fuzz (libFuzzer, coverage-guided), target {target}, {seconds} s");
    // New inputs go to a working corpus under target/, the seeds stay as committed.
    let work = root.join("target/fuzz-corpus").join(target);
    std::fs::create_dir_all(&work).with_context(|| format!("create {}", work.display()))?;
    let seeds = root.join("crates/mcp-fuzz/corpus").join(target);
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root.join("fuzz"))
        .env("CARGO_TARGET_DIR", root.join("target/fuzz"))
        .args(["+nightly", "fuzz", "run", target])
        .arg(&work)
        .arg(&seeds)
        .args([
            "--",
            &format!("-max_total_time={seconds}"),
            "-rss_limit_mb=2048",
            "-malloc_limit_mb=512",
            "-max_len=65536",
            "-print_final_stats=1",
        ]);
    status(cmd).with_context(|| {
        format!("fuzz target {target} failed; the crashing input is in fuzz/artifacts/{target}/")
    })
}
