//! The real MCP peers the end-to-end and interop tests run — npm packages and a Python
//! virtualenv with the official SDK — installed into a cache folder under `target/` (never
//! into the repository).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cmd::workspace_root;

/// The official filesystem and everything MCP servers and TypeScript SDK, oidc-provider (the
/// authorization server of the OAuth tests), and three real agent hosts — Claude Code (on a
/// scripted Messages API), Codex CLI (a scripted Responses API) and Gemini CLI (a scripted
/// Gemini API) — pinned.
const PACKAGES: &[&str] = &[
    "@modelcontextprotocol/server-filesystem@2026.8.31",
    "@modelcontextprotocol/sdk@1.32.2",
    "oidc-provider@9.13.3",
    "@anthropic-ai/claude-code@2.1.328",
    "@modelcontextprotocol/server-everything@2026.8.31",
    "@openai/codex@0.171.0",
    "@google/gemini-cli@0.61.0",
];
/// The official Python SDK, Playwright (which drives the system Chromium in the browser
/// tests), moto's server (the S3-compatible service the upload store is tested against),
/// aiosmtpd (the SMTP server e-mail notifications are sent to) and opentelemetry-proto (to
/// decode the OTLP traces the gateway exports), pinned.
const PYTHON_PACKAGES: &[&str] = &[
    "mcp==2.3.0",
    "playwright==1.65.2",
    "moto[s3,server]==5.2.5",
    "aiosmtpd==1.4.6",
    "opentelemetry-proto==1.45.2",
    // The fetch server a poisoned page is read through (issue 49's Claude Code scenario).
    "mcp-server-fetch==2026.10.24",
    // The schema validator the Kubernetes manifests are checked with (`cargo xtask test`'s
    // dist step).
    "kubernetes-validate==1.37.0",
];
/// Where the browser tests find Chromium (Debian's `chromium` package).
const CHROMIUM: &str = "/usr/bin/chromium";

/// Installs the packages (once) and returns the environment the tests need.
pub(crate) fn install() -> Result<Vec<(String, String)>> {
    let dir = workspace_root().join("target/xtask-cache/node");
    let bin: PathBuf = dir.join("node_modules/.bin/mcp-server-filesystem");
    let sdk = dir.join("node_modules/@modelcontextprotocol/sdk/package.json");
    let installed = std::fs::read_to_string(&sdk)
        .is_ok_and(|p| p.contains("\"version\": \"1.32.2\""))
        && dir.join("node_modules/oidc-provider/package.json").exists()
        && dir.join("node_modules/.bin/claude").exists()
        && dir.join("node_modules/.bin/mcp-server-everything").exists()
        && dir.join("node_modules/.bin/codex").exists()
        && dir.join("node_modules/.bin/gemini").exists();
    if !bin.exists() || !installed {
        let npm_ok = Command::new("npm")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !npm_ok {
            bail!(
                "npm was not found: the end-to-end tests run @modelcontextprotocol/server-filesystem from npm. Install Node.js 20+ and npm (Debian: apt-get install nodejs npm), then run `cargo xtask test` again."
            );
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        println!(
            "xtask: installing {} into {}",
            PACKAGES.join(" "),
            dir.display()
        );
        let status = Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                "--prefix",
            ])
            .arg(&dir)
            .args(PACKAGES)
            .status()
            .context("run npm")?;
        if !status.success() || !bin.exists() {
            bail!("npm could not install {}", PACKAGES.join(" "));
        }
    }
    let python = python_sdk()?;
    chromium()?;
    Ok(vec![
        ("MCP_FILESYSTEM_SERVER".into(), bin.display().to_string()),
        ("MCP_INTEROP_NODE_DIR".into(), dir.display().to_string()),
        ("MCP_INTEROP_PYTHON".into(), python.display().to_string()),
        (
            "MCP_CLAUDE_CODE".into(),
            dir.join("node_modules/.bin/claude").display().to_string(),
        ),
        (
            "MCP_CODEX".into(),
            dir.join("node_modules/.bin/codex").display().to_string(),
        ),
        (
            "MCP_GEMINI".into(),
            dir.join("node_modules/.bin/gemini").display().to_string(),
        ),
        (
            "MCP_EVERYTHING_SERVER".into(),
            dir.join("node_modules/.bin/mcp-server-everything")
                .display()
                .to_string(),
        ),
    ])
}

/// The Python the virtualenv is made from. As root, Debian's own `/usr/bin/python3` when it
/// is there: a root gateway runs stdio modules as `nobody`, and an interpreter under
/// `/root` (pyenv's) is closed to it.
fn base_python() -> String {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    if root && std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3".into()
    } else {
        "python3".into()
    }
}

/// A virtualenv with the Python SDK; returns its interpreter.
pub(crate) fn python_sdk() -> Result<PathBuf> {
    let venv = workspace_root().join("target/xtask-cache/venv");
    let python = venv.join("bin/python");
    let marker = venv.join(".mcp-gateway-installed");
    let base = base_python();
    let wanted = format!("{} (from {base})", PYTHON_PACKAGES.join(" "));
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == wanted) {
        return Ok(python);
    }
    let python3_ok = Command::new(&base)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !python3_ok {
        bail!(
            "python3 was not found: the interop tests run the official Python MCP SDK. Install Python 3.10+ with venv (Debian: apt-get install python3 python3-venv), then run `cargo xtask test` again."
        );
    }
    println!(
        "xtask: creating a virtualenv with {wanted} in {}",
        venv.display()
    );
    let created = Command::new(&base)
        .args(["-m", "venv", "--clear"])
        .arg(&venv)
        .status()
        .context("run python3 -m venv")?;
    if !created.success() {
        bail!(
            "`{base} -m venv` failed: install the venv module (Debian: apt-get install python3-venv)"
        );
    }
    let installed = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(PYTHON_PACKAGES)
        .status()
        .context("run pip")?;
    if !installed.success() {
        bail!("pip could not install {wanted}");
    }
    std::fs::write(&marker, wanted)?;
    Ok(python)
}

/// Debian's Chromium for the browser tests: installed with apt when missing and we are root
/// (Playwright's own browser download cannot work here; it drives this one).
fn chromium() -> Result<()> {
    if std::path::Path::new(CHROMIUM).exists() {
        return Ok(());
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !(root && std::path::Path::new("/usr/bin/apt-get").exists()) {
        bail!(
            "{CHROMIUM} was not found: the browser tests drive Debian's Chromium. Install it (`sudo apt-get install chromium`), then run `cargo xtask test` again."
        );
    }
    println!("xtask: {CHROMIUM} not found; installing the `chromium` package with apt-get");
    let update = Command::new("apt-get").args(["update", "-qq"]).status()?;
    let install = Command::new("apt-get")
        .args([
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            "chromium",
        ])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()?;
    if !update.success() || !install.success() || !std::path::Path::new(CHROMIUM).exists() {
        bail!("`apt-get install chromium` failed; install Chromium by hand");
    }
    Ok(())
}
