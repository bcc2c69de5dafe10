//! `cargo xtask test`: the one test command, identical for developers and CI.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::cmd::{cargo, running_as_root, status, workspace_root};
use crate::layering;
use crate::postgres::Cluster;

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

/// The user a root gateway runs its stdio modules as (and so the tests' modules).
const MODULE_UID: u32 = 65534;

/// Whether the user `nobody` can enter `dir`: every directory from `/` down to it is
/// searchable by it (by the permission bits).
fn reachable_by_nobody(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(real) = dir.canonicalize() else {
        return false;
    };
    real.ancestors().all(|d| {
        std::fs::metadata(d).is_ok_and(|m| {
            let bits = if m.uid() == MODULE_UID {
                m.mode() >> 6
            } else if m.gid() == MODULE_UID {
                m.mode() >> 3
            } else {
                m.mode()
            };
            bits & 0o1 != 0
        })
    })
}

/// As root, the gateway runs stdio modules as `nobody`: the tests' modules (scripts in the
/// checkout, the SDKs under `target/xtask-cache`) must be readable by it. A checkout it
/// cannot enter (one under `/root`, mode 700) is tested from a copy that it can, in the
/// system's temporary directory, built into this checkout's `target/`. Returns whether the
/// tests ran there (and passed).
fn from_a_reachable_copy() -> Result<bool> {
    let root = workspace_root();
    if !running_as_root() || reachable_by_nobody(&root) {
        return Ok(false);
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in root.display().to_string().bytes() {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let copy = std::env::temp_dir().join(format!("mcp-gateway-checkout-{hash:016x}"));
    println!(
        "xtask test: {} is closed to `nobody`, whom a root gateway runs its stdio modules as; testing a copy at {}",
        root.display(),
        copy.display()
    );
    // The copy's own `target/` keeps only the peers' cache between runs.
    if copy.exists() {
        for entry in std::fs::read_dir(&copy)? {
            let path = entry?.path();
            if path.file_name() != Some(std::ffi::OsStr::new("target")) {
                if path.is_dir() {
                    std::fs::remove_dir_all(&path)?;
                } else {
                    std::fs::remove_file(&path)?;
                }
            }
        }
    }
    std::fs::create_dir_all(&copy)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755))?;
    }
    let mut tar = Command::new("sh");
    tar.arg("-c")
        .arg("tar -C \"$1\" --exclude=./target -cf - . | tar -C \"$2\" -xf -")
        .arg("sh")
        .arg(&root)
        .arg(&copy);
    status(tar).context("copy the checkout")?;
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(["xtask", "test"])
        .current_dir(&copy)
        .env("CARGO_TARGET_DIR", root.join("target"));
    status(cmd)?;
    Ok(true)
}

/// The crates meant for other services (docs/embedding.md, CHANGELOG.md), in dependency
/// order: `cargo xtask test` packages and verifies them. The others are `publish = false`.
const PUBLIC_CRATES: &[&str] = &[
    "mcp-clock",
    "mcp-random",
    "mcp-seal",
    "elicitation-core",
    "mcp-wire",
    "gating-core",
    "elicitation-store",
];

/// Where `cargo package` verifies the public crates: a target folder of its own.
const PACKAGE_TARGET: &str = "package-check";

/// Makes the next `cargo package` verify the public crates from their new sources. Cargo
/// verifies each package against the others through a local registry of the same name and
/// version every time; it unpacks those under `$CARGO_HOME/registry/src/-<hash>/` once and
/// takes a build of them as fresh by name and version, so a crate changed since (same
/// version) would be verified against its old source or build. Both are removed; the
/// dependencies' builds in [`PACKAGE_TARGET`] stay.
fn forget_packaged_sources() -> Result<()> {
    let home = std::env::var_os("CARGO_HOME").map_or_else(
        || std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo"),
        std::path::PathBuf::from,
    );
    let version = env!("CARGO_PKG_VERSION");
    let mut stale = Vec::new();
    if let Ok(sources) = std::fs::read_dir(home.join("registry/src")) {
        for source in sources.flatten() {
            // Local registries' folders are named `-<hash>`; crates.io's are not.
            if source.file_name().to_string_lossy().starts_with('-') {
                for krate in PUBLIC_CRATES {
                    stale.push(source.path().join(format!("{krate}-{version}")));
                }
            }
        }
    }
    let fingerprints = crate::cmd::target_dir()
        .join(PACKAGE_TARGET)
        .join("debug/.fingerprint");
    if let Ok(entries) = std::fs::read_dir(&fingerprints) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let ours = PUBLIC_CRATES.iter().any(|krate| {
                name.strip_prefix(krate)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|hash| hash.chars().all(|c| c.is_ascii_hexdigit()))
            });
            if ours {
                stale.push(entry.path());
            }
        }
    }
    for path in stale.into_iter().filter(|p| p.exists()) {
        std::fs::remove_dir_all(&path)
            .with_context(|| format!("cannot remove {}", path.display()))?;
    }
    Ok(())
}

pub(crate) fn run() -> Result<()> {
    if from_a_reachable_copy()? {
        return Ok(());
    }
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
    // The gate as a library builds with its own features only (in the workspace build the
    // binary's `http`, `jwt` and `otlp` are on for every crate).
    step("the gate alone", || {
        let mut cmd = cargo();
        cmd.args([
            "clippy",
            "--package",
            "mcp-gate",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]);
        status(cmd)
    })?;
    step("layering", layering::check)?;
    step("tidy", crate::tidy::check)?;
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
    // The embedding examples run as a user would run them (docs/embedding.md).
    step("examples", || crate::examples::run(&node_env))?;
    // The public crates package, and each builds from its package alone (no file outside
    // its folder, such as migrations, is missed).
    step("package", || {
        forget_packaged_sources()?;
        let mut cmd = cargo();
        cmd.args(["package", "--allow-dirty", "--quiet"]).env(
            "CARGO_TARGET_DIR",
            crate::cmd::target_dir().join(PACKAGE_TARGET),
        );
        for krate in PUBLIC_CRATES {
            cmd.args(["--package", krate]);
        }
        status(cmd)
    })?;
    step("conformance", crate::conformance::run)?;
    // What an operator deploys (docs/deployment.md), around the binary the tests built.
    step("dist", || {
        let python = node_env
            .iter()
            .find(|(k, _)| k == "MCP_INTEROP_PYTHON")
            .map(|(_, v)| std::path::PathBuf::from(v))
            .context("the mcp peers step named no Python")?;
        crate::dist::check(&crate::cmd::target_dir().join("debug/mcp-gateway"), &python)
    })?;
    step("doc", || {
        let mut cmd = cargo();
        cmd.args(["doc", "--workspace", "--no-deps"])
            .env("RUSTDOCFLAGS", "-D warnings");
        status(cmd)
    })?;
    println!("xtask test: all steps passed");
    Ok(())
}
