//! `cargo xtask conformance`: the MCP conformance suite (`@modelcontextprotocol/conformance`,
//! its server scenarios, the default active suite) against the project's fixture server
//! (`tests/conformance/fixture_server.py`, official Python SDK), first directly, then behind
//! the gateway. Both must pass every scenario.
//!
//! The suite's 0.1.16 bundle imports `fs.globSync`, which Node 20 lacks (only its
//! `tier-check` command uses it). On Node < 22 that one import is replaced by a stub that
//! throws if called; the rest of the bundle is untouched.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::test::{cargo, status, workspace_root};

/// The suite, pinned.
const SUITE: &str = "@modelcontextprotocol/conformance@0.1.16";
/// The import Node 20 cannot load, and what replaces it.
const GLOB_IMPORT: &str = "import{existsSync as a,globSync as o,mkdtempSync as s,promises as c,readFileSync as l}from\"fs\";";
const GLOB_STUB: &str = "import{existsSync as a,mkdtempSync as s,promises as c,readFileSync as l}from\"fs\";const o=()=>{throw new Error(\"fs.globSync is not available on this Node (stubbed by cargo xtask conformance)\")};";

/// The fixture's tools: they have no annotations, so the gate would hold them; the
/// conformance run allows them by policy, as an operator would for a trusted server.
const FIXTURE_TOOLS: &[&str] = &[
    "test_simple_text",
    "test_image_content",
    "test_audio_content",
    "test_embedded_resource",
    "test_multiple_content_types",
    "test_tool_with_logging",
    "test_tool_with_progress",
    "test_error_handling",
    "test_sampling",
    "test_elicitation",
    "test_elicitation_sep1034_defaults",
    "test_elicitation_sep1330_enums",
];

/// A child process stopped (and waited for) when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the suite directly and through the gateway (built here, debug).
pub(crate) fn run() -> Result<()> {
    let cli = install_suite()?;
    let python = crate::node::python_sdk()?;
    status({
        let mut cmd = cargo();
        cmd.args(["build", "-p", "mcp-gateway"]);
        cmd
    })?;
    let gateway_bin = workspace_root().join("target/debug/mcp-gateway");
    let work = workspace_root().join("target/xtask-cache/conformance-run");
    std::fs::create_dir_all(&work)?;

    let fixture_port = free_port()?;
    let fixture = workspace_root().join("tests/conformance/fixture_server.py");
    let fixture_log = std::fs::File::create(work.join("fixture.log"))?;
    let _fixture = Running(
        Command::new(&python)
            .arg(&fixture)
            .args(["--port", &fixture_port.to_string()])
            .stdout(fixture_log.try_clone()?)
            .stderr(fixture_log)
            .spawn()
            .context("start the fixture server")?,
    );
    wait_for_port(
        fixture_port,
        "the fixture server",
        &work.join("fixture.log"),
    )?;
    let direct = suite(&cli, fixture_port, "direct")?;

    let gateway_port = free_port()?;
    let config = work.join("gateway.toml");
    write_config(&config, gateway_port, fixture_port)?;
    let gateway_log = std::fs::File::create(work.join("gateway.log"))?;
    let _gateway = Running(
        Command::new(&gateway_bin)
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "info")
            .stdout(gateway_log.try_clone()?)
            .stderr(gateway_log)
            .spawn()
            .context("start the gateway")?,
    );
    wait_for_port(gateway_port, "the gateway", &work.join("gateway.log"))?;
    let through = suite(&cli, gateway_port, "through the gateway")?;
    println!("xtask conformance: {SUITE}: direct {direct}; through the gateway {through}");
    Ok(())
}

/// Runs the suite against `port`; its summary line, or an error with the failed scenarios.
fn suite(cli: &Path, port: u16, label: &str) -> Result<String> {
    let output = Command::new("node")
        .arg(cli)
        .args(["server", "--url", &format!("http://127.0.0.1:{port}/mcp")])
        .stdin(Stdio::null())
        .output()
        .context("run the conformance suite (node)")?;
    let text = String::from_utf8_lossy(&output.stdout);
    let summary = text
        .lines()
        .rev()
        .find(|l| l.starts_with("Total:"))
        .unwrap_or("no summary")
        .to_owned();
    let scenarios: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with('✓') || l.starts_with('✗'))
        .collect();
    let failed: Vec<&str> = scenarios
        .iter()
        .copied()
        .filter(|l| l.starts_with('✗'))
        .collect();
    if !output.status.success() || !failed.is_empty() || scenarios.is_empty() {
        bail!(
            "conformance {label}: {summary}\n{}\n{}",
            failed.join("\n"),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(format!(
        "{}/{} scenarios ({summary})",
        scenarios.len(),
        scenarios.len()
    ))
}

fn write_config(path: &Path, port: u16, fixture_port: u16) -> Result<()> {
    let mut file = std::fs::File::create(path)?;
    writeln!(
        file,
        "# Written by cargo xtask conformance.\nlisten = \"127.0.0.1:{port}\"\n\n[store]\nkind = \"memory\"\n\n[auth]\nmode = \"none\"\n\n[[modules]]\nname = \"fixture\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{fixture_port}/mcp\"\nprefix = \"\""
    )?;
    for tool in FIXTURE_TOOLS {
        writeln!(file, "\n[[policy]]\ntool = \"{tool}\"\ngate = \"allow\"")?;
    }
    Ok(())
}

/// A port free on loopback now.
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_for_port(port: u16, what: &str, log: &Path) -> Result<()> {
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!(
        "{what} did not listen on {address} within 30 s; its log: {}",
        log.display()
    )
}

/// Installs the suite (once) and makes it load on this Node; returns its CLI script.
fn install_suite() -> Result<PathBuf> {
    let dir = workspace_root().join("target/xtask-cache/conformance");
    let package = dir.join("node_modules/@modelcontextprotocol/conformance");
    let installed = std::fs::read_to_string(package.join("package.json"))
        .is_ok_and(|p| p.contains("\"version\": \"0.1.16\""));
    if !installed {
        std::fs::create_dir_all(&dir)?;
        println!("xtask: installing {SUITE} into {}", dir.display());
        let mut cmd = Command::new("npm");
        cmd.args([
            "install",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            "--prefix",
        ])
        .arg(&dir)
        .arg(SUITE);
        status(cmd).context(
            "npm could not install the conformance suite (needs Node.js 20+ and npm: apt-get install nodejs npm)",
        )?;
    }
    let bundle = package.join("dist/index.js");
    if node_major()? < 22 {
        let text = std::fs::read_to_string(&bundle)
            .with_context(|| format!("read {}", bundle.display()))?;
        if !text.contains(GLOB_STUB) {
            if text.matches(GLOB_IMPORT).count() != 1 {
                bail!(
                    "{} does not import fs.globSync as expected, so it cannot be made to run on this Node; install Node 22+",
                    bundle.display()
                );
            }
            std::fs::write(&bundle, text.replace(GLOB_IMPORT, GLOB_STUB))?;
            println!(
                "xtask: stubbed fs.globSync in {} (Node < 22)",
                bundle.display()
            );
        }
    }
    Ok(bundle)
}

fn node_major() -> Result<u32> {
    let output = Command::new("node")
        .arg("--version")
        .output()
        .context("node was not found: install Node.js 20+ (apt-get install nodejs npm)")?;
    let version = String::from_utf8_lossy(&output.stdout);
    version
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .with_context(|| format!("unreadable node version {version:?}"))
}
