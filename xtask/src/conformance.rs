//! `cargo xtask conformance`: the MCP conformance scenarios as a matrix — client era ×
//! module era × module transport — through the gateway.
//!
//! - Client era: a 2025-11-25 session is `@modelcontextprotocol/conformance` 0.1.16 itself
//!   (its server scenarios, the default active suite; it speaks 2025-11-25 only). A
//!   2026-07-28 client is `tests/conformance/modern_client.py`: the official Python SDK's
//!   `Client`, which negotiates 2026-07-28 with the gateway, running the suite's checks for
//!   every scenario that exists at 2026-07-28 (it names the others and why they cannot apply).
//! - Module era: the fixture (`tests/conformance/fixture_server.py`, official Python SDK)
//!   legacy only (`--era legacy`: 2026-07-28 requests get -32022, so the gateway falls back
//!   to `initialize`), or 2026-07-28 capable (`--era both`: the gateway reaches it at
//!   2026-07-28, its tools ask by `input_required`).
//!   A third fixture speaks both eras but its tools ask the 2025 way at either
//!   (`--era both-asking-2025`, mid-call requests, as a server written for 2025-11-25 on a
//!   newer SDK): the gateway reaches it at 2026-07-28, and must speak 2025-11-25 with it
//!   for a 2025-era client's calls so the tools can ask. Its cells are the 2025-11-25
//!   client's over HTTP (a 2026-07-28 client cannot answer such a tool directly either, and
//!   over stdio it is the `both` fixture's cell again).
//! - Module transport: Streamable HTTP, or stdio (the gateway starts the fixture with
//!   `--stdio`; it opens every stdio module with `initialize`, which the SDK serves at either
//!   `--era`).
//!
//! Every cell must pass every scenario that applies. The HTTP fixtures are first run directly
//! by the clients that apply to them, so a failure through the gateway is the gateway's.
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

use crate::cmd::{cargo, status, workspace_root};

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

/// The module eras of the matrix: the fixture's `--era`.
const MODULE_ERAS: &[&str] = &["legacy", "both", "both-asking-2025"];

/// The fixture whose tools ask the 2025 way at either era: only 2025-era clients over HTTP.
const ASKING_2025: &str = "both-asking-2025";

/// Runs the matrix (the gateway built here, debug).
pub(crate) fn run() -> Result<()> {
    let cli = install_suite()?;
    let python = crate::node::python_sdk()?;
    status({
        let mut cmd = cargo();
        cmd.args(["build", "-p", "mcp-gateway"]);
        cmd
    })?;
    let gateway_bin = crate::cmd::target_dir().join("debug/mcp-gateway");
    let work = workspace_root().join("target/xtask-cache/conformance-run");
    std::fs::create_dir_all(&work)?;
    let fixture = workspace_root().join("tests/conformance/fixture_server.py");
    let modern_client = workspace_root().join("tests/conformance/modern_client.py");
    let mut summary = Vec::new();
    for era in MODULE_ERAS {
        let fixture_port = free_port()?;
        let log_path = work.join(format!("fixture-{era}.log"));
        let fixture_log = std::fs::File::create(&log_path)?;
        let _fixture = Running(
            Command::new(&python)
                .arg(&fixture)
                .args(["--port", &fixture_port.to_string(), "--era", era])
                .stdout(fixture_log.try_clone()?)
                .stderr(fixture_log)
                .spawn()
                .context("start the fixture server")?,
        );
        wait_for_port(fixture_port, "the fixture server", &log_path)?;
        let url = format!("http://127.0.0.1:{fixture_port}/mcp");
        summary.push(format!(
            "2025-11-25 client, {era} module directly: {}",
            suite(&cli, &url, &format!("directly against the {era} fixture"))?
        ));
        if *era == "both" {
            summary.push(format!(
                "2026-07-28 client, {era} module directly: {}",
                modern(
                    &python,
                    &modern_client,
                    &url,
                    "directly against the both fixture"
                )?
            ));
        }
        let transports: &[&str] = if *era == ASKING_2025 {
            &["http"]
        } else {
            &["http", "stdio"]
        };
        for transport in transports {
            let module = match *transport {
                "http" => format!("transport = \"http\"\nurl = \"{url}\""),
                _ => format!(
                    "transport = \"stdio\"\ncommand = {}\nargs = [{}, \"--stdio\", \"--era\", \"{era}\"]",
                    toml_string(&python),
                    toml_string(&fixture),
                ),
            };
            let cell = format!("{era} module over {transport}");
            let gateway_port = free_port()?;
            let config = work.join(format!("gateway-{era}-{transport}.toml"));
            write_config(&config, gateway_port, &module)?;
            let log_path = work.join(format!("gateway-{era}-{transport}.log"));
            let gateway_log = std::fs::File::create(&log_path)?;
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
            wait_for_port(gateway_port, "the gateway", &log_path)?;
            let through = format!("http://127.0.0.1:{gateway_port}/mcp");
            summary.push(format!(
                "2025-11-25 client, {cell}: {}",
                suite(&cli, &through, &format!("2025-11-25 client, {cell}"))?
            ));
            if *era == ASKING_2025 {
                continue;
            }
            summary.push(format!(
                "2026-07-28 client, {cell}: {}",
                modern(
                    &python,
                    &modern_client,
                    &through,
                    &format!("2026-07-28 client, {cell}")
                )?
            ));
        }
    }
    println!("xtask conformance: {SUITE} and the 2026-07-28 client, through the gateway:");
    for line in summary {
        println!("xtask conformance:   {line}");
    }
    Ok(())
}

/// A path as a TOML basic string.
fn toml_string(path: &Path) -> String {
    format!("{:?}", path.display().to_string())
}

/// Runs the 2026-07-28 client's scenarios against `url`; its summary, or an error with the
/// failed scenarios.
fn modern(python: &Path, client: &Path, url: &str, label: &str) -> Result<String> {
    let output = Command::new(python)
        .arg(client)
        .args(["--url", url])
        .stdin(Stdio::null())
        .output()
        .context("run the 2026-07-28 client (python)")?;
    scenarios(&output, label)
}

/// Runs the suite against `url`; its summary line, or an error with the failed scenarios.
fn suite(cli: &Path, url: &str, label: &str) -> Result<String> {
    let output = Command::new("node")
        .arg(cli)
        .args(["server", "--url", url])
        .stdin(Stdio::null())
        .output()
        .context("run the conformance suite (node)")?;
    scenarios(&output, label)
}

/// Reads a run's scenario lines (`✓`, `✗`, and `-` for one that cannot apply) and summary.
fn scenarios(output: &std::process::Output, label: &str) -> Result<String> {
    let text = String::from_utf8_lossy(&output.stdout);
    let summary = text
        .lines()
        .rev()
        .find(|l| l.starts_with("Total:"))
        .unwrap_or("no summary")
        .to_owned();
    let ran: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with('✓') || l.starts_with('✗'))
        .collect();
    let failed: Vec<&str> = ran.iter().copied().filter(|l| l.starts_with('✗')).collect();
    let inapplicable = text.lines().filter(|l| l.starts_with("- ")).count();
    if !output.status.success() || !failed.is_empty() || ran.is_empty() {
        bail!(
            "conformance, {label}: {summary}\n{}\n{}",
            failed.join("\n"),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let na = if inapplicable > 0 {
        format!(", {inapplicable} not applicable at this era")
    } else {
        String::new()
    };
    Ok(format!(
        "{}/{} scenarios{na} ({summary})",
        ran.len(),
        ran.len()
    ))
}

fn write_config(path: &Path, port: u16, module: &str) -> Result<()> {
    let mut file = std::fs::File::create(path)?;
    writeln!(
        file,
        "# Written by cargo xtask conformance.\nlisten = \"127.0.0.1:{port}\"\n\n[store]\nkind = \"memory\"\n\n[auth]\nmode = \"none\"\n\n[[modules]]\nname = \"fixture\"\n{module}\nprefix = \"\""
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
