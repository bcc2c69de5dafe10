//! The listener on a real socket: slow, idle and excess clients cannot exhaust the gateway.

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use elicitation_store::MemoryStore;
use gating_core::GatePolicy;
use mcp_auth::Auth;
use mcp_gate::Gateway;
use mcp_http::service::{McpService, ServiceConfig};
use mcp_http::{ServeConfig, serve};
use mcp_upstream::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Long enough for any event these tests wait for on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

async fn start(config: ServeConfig) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    start_with(config, ServiceConfig::default()).await
}

async fn start_with(
    config: ServeConfig,
    service_config: ServiceConfig,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let registry = Registry::start(Vec::new()).await.unwrap();
    let gateway = Arc::new(Gateway::new(
        registry,
        Arc::new(MemoryStore::default()),
        GatePolicy::default(),
        false,
    ));
    let service = Arc::new(McpService::new(gateway, Auth::none(), service_config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, service, config, async {
        let _ = stopped.await;
    }));
    (address, stop)
}

/// Waits until the server closes the connection; true if it did within [`PATIENCE`].
async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    let wait = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    };
    tokio::time::timeout(PATIENCE, wait).await.is_ok()
}

/// `GET /healthz` on a new connection; the status line, once served.
async fn healthz(address: SocketAddr) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    String::from_utf8_lossy(&response)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_send_half_a_header_are_closed_by_the_timeout() {
    let (address, _stop) = start(ServeConfig {
        header_read_timeout: Duration::from_secs(1),
        ..ServeConfig::default()
    })
    .await;
    let mut slow = Vec::new();
    for _ in 0..20 {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl")
            .await
            .unwrap();
        slow.push(stream);
    }
    for stream in &mut slow {
        assert!(closed_by_server(stream).await, "a half header is cut off");
    }
    assert_eq!(healthz(address).await, "HTTP/1.1 200 OK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_kept_alive_connection_is_closed() {
    let (address, _stop) = start(ServeConfig {
        idle_timeout: Duration::from_secs(1),
        header_read_timeout: Duration::from_secs(3600),
        ..ServeConfig::default()
    })
    .await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200 OK"),
        "served, and kept alive"
    );
    assert!(closed_by_server(&mut stream).await, "then closed once idle");
}

/// A connection with a request in progress: its headers are in, its body is not. Returns
/// once the gateway is handling it (it asked for the body: `100 Continue`), so the request
/// is known to be in progress, not merely sent.
async fn busy_connection(address: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n")
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("100 Continue") {
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf))
            .await
            .expect("the gateway asks for the body")
            .unwrap();
        assert!(
            n > 0,
            "the connection closed before the request was handled"
        );
        seen.extend_from_slice(&buf[..n]);
    }
    stream.write_all(b"{").await.unwrap();
    stream
}

fn long_waits() -> (ServeConfig, ServiceConfig) {
    (
        ServeConfig {
            max_connections: 2,
            header_read_timeout: Duration::from_secs(3600),
            idle_timeout: Duration::from_secs(3600),
        },
        ServiceConfig {
            body_read_timeout: Duration::from_secs(3600),
            ..ServiceConfig::default()
        },
    )
}

/// The status line and whole response of one `GET path` on a new connection.
async fn get(address: SocketAddr, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8_lossy(&response).into_owned();
    (text.lines().next().unwrap_or_default().to_owned(), text)
}

/// Issue 44, item 4: with every connection busy (long requests of one client), probes are
/// still answered at once and anything else is told to retry, instead of every new client,
/// probes included, waiting for a busy one to end; once one ends, requests are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_cap_probes_are_answered_and_the_rest_told_to_retry_until_a_busy_one_leaves()
 {
    let (serve_config, service_config) = long_waits();
    let (address, _stop) = start_with(serve_config, service_config).await;
    // Two requests in progress hold both slots.
    let first = busy_connection(address).await;
    let _second = busy_connection(address).await;
    for probe in ["/healthz", "/readyz"] {
        let (status, _) = tokio::time::timeout(PATIENCE, get(address, probe))
            .await
            .expect("a probe is answered while every connection is busy");
        assert!(
            status == "HTTP/1.1 200 OK" || status.starts_with("HTTP/1.1 503"),
            "{probe}: {status}"
        );
    }
    let (status, _) = get(address, "/healthz").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    let (status, text) = tokio::time::timeout(PATIENCE, get(address, "/no-such-path"))
        .await
        .expect("told at once");
    assert_eq!(status, "HTTP/1.1 503 Service Unavailable", "{text}");
    assert!(
        text.to_ascii_lowercase().contains("retry-after: 1"),
        "{text}"
    );
    drop(first);
    // Served by the gateway again (its 404), once a slot is free.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let (status, _) = get(address, "/no-such-path").await;
        if status == "HTTP/1.1 404 Not Found" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "still {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_cap_a_connection_that_only_waits_makes_room() {
    let (serve_config, service_config) = long_waits();
    let (address, _stop) = start_with(serve_config, service_config).await;
    // Slow-header clients: connected, half a header, then nothing.
    let mut a = TcpStream::connect(address).await.unwrap();
    a.write_all(b"GET /healthz HTTP/1.1\r\nHo").await.unwrap();
    let mut b = TcpStream::connect(address).await.unwrap();
    b.write_all(b"GET /healthz HTTP/1.1\r\nHo").await.unwrap();
    // Connections are accepted in order, so both hold a slot when this one arrives.
    let status = tokio::time::timeout(PATIENCE, healthz(address))
        .await
        .expect("served at once: a waiting connection made room");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let one_closed = tokio::select! {
        closed = closed_by_server(&mut a) => closed,
        closed = closed_by_server(&mut b) => closed,
    };
    assert!(one_closed, "a waiting connection was closed to make room");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_arrives_gets_408_and_frees_the_connection() {
    let service_config = ServiceConfig {
        body_read_timeout: Duration::from_secs(1),
        ..ServiceConfig::default()
    };
    let (address, _stop) = start_with(
        ServeConfig {
            max_connections: 1,
            idle_timeout: Duration::from_secs(3600),
            header_read_timeout: Duration::from_secs(3600),
        },
        service_config,
    )
    .await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        .await
        .unwrap();
    let mut response = Vec::new();
    let read = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut response)).await;
    assert!(read.is_ok(), "the server answers and closes");
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("-32600"), "{text}");
    // The only slot is free again.
    let status = tokio::time::timeout(PATIENCE, healthz(address))
        .await
        .unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
}

/// The raw response to one request on a new connection.
async fn exchange(address: SocketAddr, request: &str) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    String::from_utf8_lossy(&response).into_owned()
}

/// The raw response to a 2026-07-28 `server/discover` with a body of announced length,
/// sent in one piece on a new connection.
async fn discover(address: SocketAddr) -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    exchange(
        address,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
             Mcp-Method: server/discover\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
    .await
}

/// An answer whose length is known goes out with `content-length`, as one piece: every
/// answer went out chunked while the body that keeps a request counted in progress hid
/// its size from hyper. A stream of unknown length is still chunked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_of_known_length_is_sent_with_its_length_not_chunked() {
    let (address, _stop) = start(ServeConfig::default()).await;
    let response = discover(address).await;
    let (head, answer) = response.split_once("\r\n\r\n").unwrap();
    let head = head.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{response}");
    assert!(!head.contains("transfer-encoding"), "{response}");
    let length = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length: "))
        .unwrap_or_else(|| panic!("no content-length: {response}"));
    assert_eq!(length.parse::<usize>().unwrap(), answer.len());
    let answer: serde_json::Value = serde_json::from_str(answer).unwrap();
    assert_eq!(answer["id"], 1, "{answer}");
    assert!(answer["result"]["supportedVersions"].is_array(), "{answer}");
}

/// Over a real socket: hyper tells the end of a body of announced length exactly, so a
/// body whose bytes came with its head is read without taking a share of the budget for
/// bodies still arriving, while one still arriving and a chunked one are counted. (One
/// sender here: no authentication.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_body_is_read_while_its_senders_share_is_held_by_one_still_arriving() {
    let service_config = ServiceConfig {
        body_limit: 1000,
        body_bytes_per_caller: 1000,
        body_bytes_in_flight: 1000,
        ..ServiceConfig::default()
    };
    let (address, _stop) = start_with(ServeConfig::default(), service_config).await;
    // All of a body but its last byte: held, counted.
    let mut held = TcpStream::connect(address).await.unwrap();
    held.write_all(
        format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{}",
            " ".repeat(999)
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    // A chunked body is counted from its first byte: refused once the held one is counted.
    let chunked = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\na\r\n          \r\n0\r\n\r\n";
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let answer = exchange(address, chunked).await;
        if answer.starts_with("HTTP/1.1 429") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{answer}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A whole body of announced length is read and answered.
    let answer = discover(address).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("supportedVersions"), "{answer}");
    drop(held);
}
