//! The peers a bench drives: the processes under test (started, their address read from
//! their log) and the requests sent to them, in either era.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::load::{self, Check};

pub(crate) const AGENT: &str = "bench-agent-token";
pub(crate) const HUMAN: &str = "bench-human-token";
pub(crate) const SCRAPER: &str = "bench-scraper-token";
pub(crate) const SEAL_KEY: &str = "bench:BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=";

/// A process under test.
pub(crate) struct Proc {
    child: Child,
    pub(crate) addr: SocketAddr,
}

impl Proc {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }
}

/// Starts `command` and waits for the line that says where it listens.
pub(crate) async fn start(mut command: Command, marker: &str) -> Result<Proc> {
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let mut child = command.spawn().context("start a process")?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .context("no start-up line within 60 s")??
        .context("the process exited")?;
    let rest = line
        .strip_prefix(marker)
        .with_context(|| format!("unexpected line {line:?}"))?;
    let addr = rest
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()?;
    // Keep draining stdout so the process never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Proc { child, addr })
}

/// A folder of this run's own under the temporary directory (`mcp-bench-{what}-{pid}`):
/// the bench gateways' configurations and key files. Removed when the run ends, however it
/// ends (but for a kill); hold it longer than the processes that read it.
pub(crate) fn bench_dir(what: &str) -> Result<BenchDir> {
    let dir = std::env::temp_dir().join(format!("mcp-bench-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(BenchDir(dir))
}

/// See [`bench_dir`].
pub(crate) struct BenchDir(std::path::PathBuf);

impl std::ops::Deref for BenchDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for BenchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The fast upstream (`me upstream`), started.
pub(crate) async fn start_upstream(me: &std::path::Path) -> Result<Proc> {
    let mut command = Command::new(me);
    command.arg("upstream");
    start(command, "listening on ").await
}

/// The null proxy to `upstream`, started by `me`: this binary, as it is or pinned
/// (`place::on_cpus`).
pub(crate) async fn start_null_proxy(mut me: Command, upstream: SocketAddr) -> Result<Proc> {
    me.args(["null-proxy", "--upstream", &upstream.to_string()]);
    start(me, "listening on ").await
}

/// The read-only call straight to the upstream (`read`, no token).
pub(crate) fn read_direct() -> load::MakeRequest {
    Arc::new(|_| modern("read", None, json!({"path": "/bench"}), json!({})))
}

/// The read-only call through a gateway (`up__read`) with `token`.
pub(crate) fn read_through(token: impl Into<String>) -> load::MakeRequest {
    let token = token.into();
    Arc::new(move |_| {
        modern(
            "up__read",
            Some(&token),
            json!({"path": "/bench"}),
            json!({}),
        )
    })
}

pub(crate) fn modern(
    tool: &str,
    token: Option<&str>,
    arguments: Value,
    meta: Value,
) -> Request<Full<Bytes>> {
    let mut params = json!({"name": tool, "arguments": arguments, "_meta": meta});
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
    let body = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}),
    )
    .unwrap_or_default();
    let mut request = Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    request
        .body(Full::new(Bytes::from(body)))
        .expect("a valid request")
}

/// A modern request of `method` naming `name` (`Mcp-Name`) with these params.
pub(crate) fn modern_named(method: &str, name: &str, mut params: Value) -> Request<Full<Bytes>> {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let body =
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .unwrap_or_default();
    Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", name)
        .header("authorization", format!("Bearer {AGENT}"))
        .body(Full::new(Bytes::from(body)))
        .expect("a valid request")
}

pub(crate) fn prompt(name: &str) -> Request<Full<Bytes>> {
    modern_named("prompts/get", name, json!({"name": name, "arguments": {}}))
}

pub(crate) fn resource() -> Request<Full<Bytes>> {
    modern_named("resources/read", "bench://r", json!({"uri": "bench://r"}))
}

pub(crate) fn legacy(tool: &str, session: &str) -> Request<Full<Bytes>> {
    legacy_as(tool, session, AGENT)
}

pub(crate) fn legacy_as(tool: &str, session: &str, token: &str) -> Request<Full<Bytes>> {
    let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": {"path": "/bench"}}})).unwrap_or_default();
    Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", session)
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::from(body)))
        .expect("a valid request")
}

/// The answer of a forwarded call (or prompts/get, resources/read): the upstream's fixed
/// "ok".
pub(crate) fn forwarded() -> Check {
    const OK: &[u8] = b"\"text\":\"ok\"";
    Arc::new(|status, body| status == 200 && body.windows(OK.len()).any(|w| w == OK))
}

pub(crate) async fn open_session(gateway: SocketAddr) -> Result<String> {
    open_session_as(gateway, AGENT).await
}

pub(crate) async fn open_session_as(gateway: SocketAddr, token: &str) -> Result<String> {
    let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}))?;
    let request = Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::from(body)))?;
    let (_, headers, _) = load::once(gateway, request).await?;
    Ok(headers
        .get("mcp-session-id")
        .context("no session id")?
        .to_str()?
        .to_owned())
}
