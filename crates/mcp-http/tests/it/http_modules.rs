//! Modules over Streamable HTTP, on real sockets: a modern one (another gateway, which
//! answers `server/discover`) and a legacy-only one (a small Python server that needs the
//! `initialize` handshake and answers with SSE).

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use elicitation_store::{Clock, ManualClock, MemoryStore, SystemClock};
use gating_core::GatePolicy;
use mcp_auth::{Auth, Principal};
use mcp_gate::Gateway;
use mcp_http::service::{McpService, ServiceConfig};
use mcp_upstream::demo::demo_module;
use mcp_upstream::http::{HttpConfig, HttpModule};
use mcp_upstream::registry::{CallLimit, ModuleSpec, Registry};
use mcp_wire::CallToolParams;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

fn principal() -> Principal {
    match Auth::none() {
        Auth::None(p) => (*p).clone(),
        _ => unreachable!(),
    }
}

fn params(name: &str, arguments: Value) -> CallToolParams {
    serde_json::from_value(json!({"name": name, "arguments": arguments})).unwrap()
}

async fn gateway_over_http(url: String) -> Gateway {
    gateway_over_http_with(url, Arc::new(SystemClock)).await
}

/// [`gateway_over_http`], its registry reading the time from `clock`.
async fn gateway_over_http_with(url: String, clock: Arc<dyn Clock>) -> Gateway {
    let module = HttpModule::new(HttpConfig {
        name: "up".into(),
        url: url.parse().unwrap(),
        headers: Vec::new(),
        tls: None,
        credentials: None,
        call_timeout: Duration::from_secs(30),
        era: Default::default(),
    })
    .unwrap();
    let registry = Registry::start_with(
        vec![ModuleSpec {
            isolation: None,
            name: "up".into(),
            prefix: "up".into(),
            trust_annotations: true,
            module: Arc::new(module),
        }],
        CallLimit::default(),
        clock,
    )
    .await
    .unwrap();
    Gateway::new(
        registry,
        Arc::new(MemoryStore::default()),
        GatePolicy::default(),
        false,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_http_module_is_called_in_the_modern_era() {
    // The upstream: another gateway serving the demo module on a real socket.
    let registry = Registry::start(vec![ModuleSpec {
        isolation: None,
        name: "demo".into(),
        prefix: "demo".into(),
        trust_annotations: true,
        module: Arc::new(demo_module()),
    }])
    .await
    .unwrap();
    let upstream = Arc::new(Gateway::new(
        registry,
        Arc::new(MemoryStore::default()),
        GatePolicy::default(),
        false,
    ));
    let service = Arc::new(McpService::new(
        upstream,
        Auth::none(),
        ServiceConfig::default(),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(mcp_http::serve(
        listener,
        service,
        mcp_http::ServeConfig::default(),
        async {
            let _ = stopped.await;
        },
    ));

    let gateway = gateway_over_http(format!("http://{address}/mcp")).await;
    let names: Vec<Value> = gateway
        .list_tools(true)
        .await
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert!(names.contains(&json!("up__demo__list_notes")), "{names:?}");
    let listed = gateway
        .call_tool(&principal(), params("up__demo__list_notes", json!({})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(
        listed["structuredContent"]["notes"][0], "buy milk",
        "{listed}"
    );
    assert!(
        listed.get("resultType").is_none(),
        "the module's era does not leak downstream"
    );
    // The upstream gateway holds its own destructive tool: the held result comes back as is.
    let held = gateway
        .call_tool(
            &principal(),
            params("up__demo__delete_note", json!({"number": 1})),
        )
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert!(
        held["structuredContent"]["elicitation_required"] == true,
        "{held}"
    );
    let _ = stop.send(());
    server.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_http_module_gets_the_handshake_and_sse_answers_are_read() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/legacy_http_module.py"
    );
    let mut child = tokio::process::Command::new("python3")
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let port = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let gateway = gateway_over_http(format!("http://127.0.0.1:{port}/mcp")).await;
    let result = gateway
        .call_tool(&principal(), params("up__shout", json!({"text": "quiet"})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(result["content"][0]["text"], "QUIET", "{result}");
    // The module asks the client things during a call: the gateway answers (ping), or
    // says it cannot relay (elicitation), and never leaves the module waiting.
    let asked = gateway
        .call_tool(&principal(), params("up__ask", json!({})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(
        asked["content"][0]["text"], r#"{"elicit_error": -32601, "ping": true}"#,
        "{asked}"
    );
    child.kill().await.unwrap();
    let down = gateway
        .call_tool(&principal(), params("up__shout", json!({"text": "x"})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(
        down["structuredContent"]["upstream_error"], true,
        "a module that is down fails cleanly: {down}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_down_at_start_up_serves_its_tools_once_it_is_up_without_anyone_listing() {
    // A port nothing listens on yet.
    let port = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let clock = Arc::new(ManualClock::stopped_now());
    let gateway =
        gateway_over_http_with(format!("http://127.0.0.1:{port}/mcp"), clock.clone()).await;
    let early = gateway
        .call_tool(&principal(), params("up__demo__list_notes", json!({})))
        .await;
    assert!(
        matches!(early, Err(mcp_gate::error::GateError::UnknownTool(_))),
        "not listed while the module is down: {early:?}"
    );
    // The module comes up on that port.
    let registry = Registry::start(vec![ModuleSpec {
        isolation: None,
        name: "demo".into(),
        prefix: "demo".into(),
        trust_annotations: true,
        module: Arc::new(demo_module()),
    }])
    .await
    .unwrap();
    let upstream = Arc::new(Gateway::new(
        registry,
        Arc::new(MemoryStore::default()),
        GatePolicy::default(),
        false,
    ));
    let service = Arc::new(McpService::new(
        upstream,
        Auth::none(),
        ServiceConfig::default(),
    ));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(mcp_http::serve(
        listener,
        service,
        mcp_http::ServeConfig::default(),
        async {
            let _ = stopped.await;
        },
    ));
    // A failed listing is retried once it is older than the retry interval (5 s), not on
    // every call before that.
    let soon = gateway
        .call_tool(&principal(), params("up__demo__list_notes", json!({})))
        .await;
    assert!(
        matches!(soon, Err(mcp_gate::error::GateError::UnknownTool(_))),
        "not listed again within the retry interval: {soon:?}"
    );
    clock.advance_std(Duration::from_secs(5));
    let listed = gateway
        .call_tool(&principal(), params("up__demo__list_notes", json!({})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(listed["isError"], false, "{listed}");
    let _ = stop.send(());
    let _ = server.await;
}
