//! npm packages the end-to-end tests run as real MCP peers, installed into a cache folder
//! under `target/` (never into the repository).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::test::workspace_root;

/// The official filesystem MCP server, pinned.
const FILESYSTEM_SERVER: &str = "@modelcontextprotocol/server-filesystem@2026.8.31";

/// Installs the packages (once) and returns the environment the tests need.
pub(crate) fn install() -> Result<Vec<(String, String)>> {
    let dir = workspace_root().join("target/xtask-cache/node");
    let bin: PathBuf = dir.join("node_modules/.bin/mcp-server-filesystem");
    if !bin.exists() {
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
            "xtask: installing {FILESYSTEM_SERVER} into {}",
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
            .arg(FILESYSTEM_SERVER)
            .status()
            .context("run npm")?;
        if !status.success() || !bin.exists() {
            bail!("npm could not install {FILESYSTEM_SERVER}");
        }
    }
    Ok(vec![(
        "MCP_FILESYSTEM_SERVER".into(),
        bin.display().to_string(),
    )])
}
