//! Memory of idle legacy sessions, each with its GET stream open: a gateway of its own,
//! `sessions` sessions spread over enough callers (a caller may hold 64), RSS before they
//! open, once they are open, and again after they sat idle past two keep-alive ticks.
//!
//! Then, with them still open and `confirmations` more sessions each waiting on an open
//! confirmation stream (a destructive call whose `elicitation/create` the client has not
//! answered), the read-only path's latency against the same gateway idle: the cost of
//! what is held open on what is not.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::peers::{Proc, start};
use crate::procstat;

/// Sessions per caller (under the gateway's cap of 64).
const PER_CALLER: usize = 50;

/// RSS (MiB) with no session, with `sessions` idle sessions and streams just opened, and
/// after they idled `idle`.
pub(crate) struct IdleMemory {
    pub(crate) sessions: usize,
    pub(crate) confirmations: usize,
    /// Read-only p50 / p99 (ms) at concurrency 16, idle (before the sessions opened and
    /// after they closed), and with the sessions and confirmation streams open (two runs).
    pub(crate) idle_read_ms: [(f64, f64); 2],
    pub(crate) loaded_read_ms: [(f64, f64); 2],
    pub(crate) before: f64,
    pub(crate) open: f64,
    pub(crate) later: f64,
    pub(crate) idle: Duration,
}

pub(crate) async fn measure(
    binary: &Path,
    dir: &Path,
    upstream: SocketAddr,
    sessions: usize,
    confirmations: usize,
    reads: usize,
    idle: Duration,
) -> Result<IdleMemory> {
    let callers = (sessions + confirmations).div_ceil(PER_CALLER);
    let mut config = String::from(
        "listen = \"127.0.0.1:0\"\n[store]\nkind = \"memory\"\n[http]\nmax_connections = 4096\nmax_streams_per_caller = 64\n[limits]\ncalls_per_minute = 0\nconfirmations_per_minute = 0\n[auth]\nmode = \"tokens\"\n",
    );
    for i in 0..callers {
        config.push_str(&format!(
            // `elicitations:respond` too: only a token that may answer is asked natively.
            "[[auth.tokens]]\nsubject = \"idle-{i}\"\ntoken_sha256 = \"{}\"\nscopes = [\"tools:call\", \"elicitations:respond\"]\n",
            mcp_auth::token_sha256(&format!("idle-token-{i}"))
        ));
    }
    config.push_str(&format!(
        "[[modules]]\nname = \"up\"\ntransport = \"http\"\nurl = \"http://{upstream}/mcp\"\ntrust_annotations = true\n"
    ));
    let path = dir.join("idle.toml");
    std::fs::write(&path, config)?;
    let mut command = tokio::process::Command::new(binary);
    command.arg("--config").arg(&path).env("RUST_LOG", "warn");
    let gateway: Proc = start(command, "mcp-gateway listening on ").await?;
    // One session first, so what is measured is sessions, not the first request's set-up.
    let warm = open(gateway.addr, "idle-token-0").await?;
    drop(warm);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = procstat::rss_mib(gateway.pid()).0;
    let first_idle = read_latency(gateway.addr, reads).await?;
    let mut streams = Vec::with_capacity(sessions);
    for n in 0..sessions {
        let token = format!("idle-token-{}", n / PER_CALLER);
        streams.push(open(gateway.addr, &token).await?);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let open_rss = procstat::rss_mib(gateway.pid()).0;
    tokio::time::sleep(idle).await;
    let later = procstat::rss_mib(gateway.pid()).0;
    let mut asks = Vec::with_capacity(confirmations);
    for n in 0..confirmations {
        let token = format!("idle-token-{}", (sessions + n) / PER_CALLER);
        asks.push(open_confirmation(gateway.addr, &token, n).await?);
    }
    let loaded = [
        read_latency(gateway.addr, reads).await?,
        read_latency(gateway.addr, reads).await?,
    ];
    drop(asks);
    drop(streams);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second_idle = read_latency(gateway.addr, reads).await?;
    Ok(IdleMemory {
        sessions,
        confirmations,
        idle_read_ms: [first_idle, second_idle],
        loaded_read_ms: loaded,
        before,
        open: open_rss,
        later,
        idle,
    })
}

/// Opens a session for `token` and its GET stream; returns the stream's connection once
/// its priming event arrived.
async fn open(gateway: SocketAddr, token: &str) -> Result<TcpStream> {
    let body = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"idle","version":"1"}}}"#;
    let mut init = TcpStream::connect(gateway).await?;
    init.write_all(
        format!(
            "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await?;
    let mut answer = String::new();
    init.read_to_string(&mut answer).await?;
    let session = answer
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .with_context(|| format!("no session id in {answer:?}"))?;
    let mut stream = TcpStream::connect(gateway).await?;
    stream
        .write_all(
            format!(
                "GET /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\nmcp-session-id: {session}\r\nmcp-protocol-version: 2025-11-25\r\naccept: text/event-stream\r\n\r\n"
            )
            .as_bytes(),
        )
        .await?;
    let mut seen = Vec::new();
    let mut buffer = [0u8; 1024];
    while !String::from_utf8_lossy(&seen).contains("retry:") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
            .await
            .context("no priming event within 10 s")??;
        if n == 0 {
            bail!("the stream closed: {}", String::from_utf8_lossy(&seen));
        }
        seen.extend_from_slice(&buffer[..n]);
    }
    Ok(stream)
}

/// Read-only calls at concurrency 16: (p50, p99) in ms.
async fn read_latency(gateway: SocketAddr, total: usize) -> Result<(f64, f64)> {
    let make = crate::peers::read_through("idle-token-0");
    let check: crate::load::Check = std::sync::Arc::new(|status, body: &[u8]| {
        const OK: &[u8] = b"\"text\":\"ok\"";
        status == 200 && body.windows(OK.len()).any(|w| w == OK)
    });
    let load = crate::load::run(gateway, 16, total, make, check).await?;
    if load.errors > 0 {
        bail!("{} read-only calls failed", load.errors);
    }
    Ok((load.ms(0.5), load.ms(0.99)))
}

/// A session whose client confirms in band, with a destructive call waiting on its open
/// stream for the client's answer to `elicitation/create` (never given).
async fn open_confirmation(gateway: SocketAddr, token: &str, n: usize) -> Result<TcpStream> {
    let post = |session: Option<&str>, body: String, close: bool| {
        format!(
            "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-protocol-version: 2025-11-25\r\n{}content-length: {}\r\n{}\r\n{body}",
            session
                .map(|s| format!("mcp-session-id: {s}\r\n"))
                .unwrap_or_default(),
            body.len(),
            if close { "connection: close\r\n" } else { "" },
        )
    };
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{"form":{}}},"clientInfo":{"name":"asker","version":"1"}}}"#;
    let mut connection = TcpStream::connect(gateway).await?;
    connection
        .write_all(post(None, init.to_owned(), true).as_bytes())
        .await?;
    let mut answer = String::new();
    connection.read_to_string(&mut answer).await?;
    let session = answer
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .with_context(|| format!("no session id in {answer:?}"))?;
    let mut initialized = TcpStream::connect(gateway).await?;
    initialized
        .write_all(
            post(
                Some(&session),
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
                true,
            )
            .as_bytes(),
        )
        .await?;
    let mut ignored = Vec::new();
    initialized.read_to_end(&mut ignored).await?;
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"up__delete","arguments":{{"n":{n}}}}}}}"#
    );
    let mut stream = TcpStream::connect(gateway).await?;
    stream
        .write_all(post(Some(&session), call, false).as_bytes())
        .await?;
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("elicitation/create") {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
            .await
            .context("no elicitation/create within 10 s")??;
        if read == 0 {
            bail!(
                "the call's stream closed: {}",
                String::from_utf8_lossy(&seen)
            );
        }
        seen.extend_from_slice(&buffer[..read]);
    }
    Ok(stream)
}
