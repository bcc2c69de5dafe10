//! Memory of idle legacy sessions, each with its GET stream open: a gateway of its own,
//! `sessions` sessions spread over enough callers (a caller may hold 64), RSS before they
//! open, once they are open, and again after they sat idle past two keep-alive ticks.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::procstat;
use crate::run::{Proc, start};

/// Sessions per caller (under the gateway's cap of 64).
const PER_CALLER: usize = 50;

/// RSS (MiB) with no session, with `sessions` idle sessions and streams just opened, and
/// after they idled `idle`.
pub(crate) struct IdleMemory {
    pub(crate) sessions: usize,
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
    idle: Duration,
) -> Result<IdleMemory> {
    let callers = sessions.div_ceil(PER_CALLER);
    let mut config = String::from(
        "listen = \"127.0.0.1:0\"\n[store]\nkind = \"memory\"\n[http]\nmax_connections = 4096\nmax_streams_per_caller = 64\n[auth]\nmode = \"tokens\"\n",
    );
    for i in 0..callers {
        config.push_str(&format!(
            "[[auth.tokens]]\nsubject = \"idle-{i}\"\ntoken_sha256 = \"{}\"\nscopes = [\"tools:call\"]\n",
            mcp_http::auth::token_sha256(&format!("idle-token-{i}"))
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
    let mut streams = Vec::with_capacity(sessions);
    for n in 0..sessions {
        let token = format!("idle-token-{}", n / PER_CALLER);
        streams.push(open(gateway.addr, &token).await?);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let open_rss = procstat::rss_mib(gateway.pid()).0;
    tokio::time::sleep(idle).await;
    let later = procstat::rss_mib(gateway.pid()).0;
    drop(streams);
    Ok(IdleMemory {
        sessions,
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
