//! `cargo xtask test`'s step "examples": the embedding examples of docs/embedding.md run as a
//! user would run them. The backend one prints its answer; the two servers are started on a
//! free port and driven by a script of the official Python SDK's clients (both eras) and a
//! person in headless Chromium (`examples/drive/`).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::cmd::cargo;

/// The server examples and the script that drives each.
const SERVERS: &[&str] = &["rmcp_gated", "gateway_in_axum"];

pub(crate) fn run(peers: &[(String, String)]) -> Result<()> {
    let root = crate::cmd::workspace_root();
    backend()?;
    let mut build = cargo();
    build.args([
        "build",
        "--quiet",
        "--package",
        "embedding-examples",
        "--examples",
    ]);
    crate::cmd::status(build)?;
    let python = peers
        .iter()
        .find(|(k, _)| k == "MCP_INTEROP_PYTHON")
        .map(|(_, v)| v.clone())
        .context("the peers step found no Python for the examples' drivers")?;
    let target = crate::cmd::target_dir();
    for example in SERVERS {
        let binary = target.join("debug/examples").join(example);
        let mut server = Server::start(&binary)?;
        let base = server.address()?;
        let script = root.join("examples/drive").join(format!("{example}.py"));
        let output = Command::new(&python)
            .arg(&script)
            .arg(&base)
            .output()
            .with_context(|| format!("could not run {}", script.display()))?;
        let said = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            bail!(
                "the example {example} failed its driver ({}): {said}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        println!("xtask test: example {example}: {}", said.trim());
        server.stop();
    }
    Ok(())
}

/// The backend example: asks, a task answers, it prints what it did.
fn backend() -> Result<()> {
    let output = cargo()
        .args([
            "run",
            "--quiet",
            "--package",
            "elicitation-store",
            "--example",
            "ask_a_person",
        ])
        .output()
        .context("could not run the example ask_a_person")?;
    let said = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || !said.contains("approved: refunding order 1042") {
        bail!(
            "the example ask_a_person failed ({}): {said}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// A server example, stopped when dropped.
struct Server(Child);

impl Server {
    fn start(binary: &Path) -> Result<Server> {
        let child = Command::new(binary)
            .env("PORT", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("could not start {}", binary.display()))?;
        Ok(Server(child))
    }

    /// The address it prints (`listening on http://…`), within a minute.
    fn address(&mut self) -> Result<String> {
        let stdout = self.0.stdout.take().context("the example's output")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            // Keep reading, so the example never blocks on a full pipe.
            for _ in lines {}
        });
        let started = Instant::now();
        let line = rx
            .recv_timeout(Duration::from_secs(60).saturating_sub(started.elapsed()))
            .context("the example said nothing within a minute")?;
        line.strip_prefix("listening on ")
            .map(str::to_owned)
            .with_context(|| format!("the example said {line:?}, not where it listens"))
    }

    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
