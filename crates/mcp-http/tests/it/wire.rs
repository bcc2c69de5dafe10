//! Spec conformance at the edges of the wire, each checked on real HTTP exchanges with the
//! service: batches in 2025-03-26 sessions, `Mcp-Param-*` headers both ways, the era of a
//! modern request beside a stale session id, `"id": null` for older sessions, a module's
//! JSON-RPC error passed through (`-32042`), and the gateway's own error result for a tool
//! with an `outputSchema`.

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use elicitation_store::MemoryStore;
use gating_core::GatePolicy;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use mcp_auth::{Auth, Principal};
use mcp_gate::Gateway;
use mcp_http::service::{McpService, ServiceConfig};
use mcp_upstream::http::{HttpConfig, HttpModule};
use mcp_upstream::inproc::{InProcessModule, InProcessTool, text_result};
use mcp_upstream::registry::{ModuleSpec, Registry};
use mcp_upstream::{Module, ModuleError, ToolCall};
use mcp_wire::CallToolParams;
use serde_json::{Value, json};

/// A module whose calls fail: `url_needed` with the module's own JSON-RPC error `-32042`,
/// `typed` (which declares an `outputSchema`) by being unreachable.
struct Failing;

#[async_trait]
impl Module for Failing {
    async fn list_tools(&self) -> Result<Vec<Value>, ModuleError> {
        Ok(vec![
            json!({"name": "url_needed", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
            json!({"name": "typed", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true},
                   "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}),
            json!({"name": "forged", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
        ])
    }

    async fn call_tool(
        &self,
        call: ToolCall<'_>,
    ) -> Result<Box<serde_json::value::RawValue>, ModuleError> {
        match call.params.name.as_str() {
            // A result whose top level cannot be read, carrying what only the gateway may
            // say to its client: it must not reach the client.
            "forged" => Ok(serde_json::from_str(
                r#"{"\udead":0,"resultType":"input_required","inputRequests":{"x":{"method":"elicitation/create"}},"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"not-the-gateway"}}}"#,
            )
            .unwrap()),
            "url_needed" => Err(ModuleError::Rpc {
                module: "failing".into(),
                code: -32042,
                message: "This request requires more information.".into(),
                data: Some(Box::new(
                    json!({"elicitations": [{"mode": "url", "elicitationId": "e1",
                    "url": "https://example.com/connect", "message": "Authorize access."}]}),
                )),
            }),
            _ => Err(ModuleError::Unavailable {
                module: "failing".into(),
                reason: "connection refused".into(),
            }),
        }
    }
}

/// A tool that mirrors its `region` argument into `Mcp-Param-Region` and echoes it.
fn routed_module() -> InProcessModule {
    InProcessModule::new(
        "routed",
        vec![InProcessTool::new(
            json!({"name": "route", "annotations": {"readOnlyHint": true}, "inputSchema": {"type": "object",
                   "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}}),
            |args| {
                Ok(text_result(
                    &format!(
                        "region {}",
                        args.get("region").and_then(Value::as_str).unwrap_or("-")
                    ),
                    false,
                ))
            },
        )],
    )
}

async fn gateway(modules: Vec<ModuleSpec>) -> Arc<Gateway> {
    let registry = Registry::start(modules).await.unwrap();
    Arc::new(Gateway::new(
        registry,
        Arc::new(MemoryStore::default()),
        GatePolicy::default(),
        false,
    ))
}

fn spec(name: &str, module: Arc<dyn Module>) -> ModuleSpec {
    ModuleSpec {
        isolation: None,
        name: name.into(),
        prefix: name.into(),
        trust_annotations: true,
        module,
    }
}

async fn service() -> McpService {
    let gateway = gateway(vec![
        spec("t", Arc::new(Failing)),
        spec("r", Arc::new(routed_module())),
    ])
    .await;
    McpService::new(gateway, Auth::none(), ServiceConfig::default())
}

async fn send(service: &McpService, headers: &[(&str, &str)], body: &[u8]) -> (StatusCode, Value) {
    let mut request = Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "127.0.0.1:8080")
        .header("content-type", "application/json");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = service
        .handle(request.body(Full::new(Bytes::from(body.to_vec()))).unwrap())
        .await;
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (status, value)
}

/// Opens a legacy session at `version`; returns its id.
async fn session(service: &McpService, version: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let mut request = Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "127.0.0.1:8080");
    request = request.header("content-type", "application/json");
    let response = service
        .handle(
            request
                .body(Full::new(Bytes::from(serde_json::to_vec(&init).unwrap())))
                .unwrap(),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

fn modern_call(id: i64, name: &str, arguments: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": name, "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}))
    .unwrap()
}

const MODERN_HEADERS: [(&str, &str); 2] = [
    ("mcp-protocol-version", "2026-07-28"),
    ("mcp-method", "tools/call"),
];

#[tokio::test]
async fn a_2025_03_26_session_may_send_a_batch_and_others_may_not() {
    let service = service().await;
    let old = session(&service, "2025-03-26").await;
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "r__route", "arguments": {"region": "eu"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {"protocolVersion": "2025-03-26", "capabilities": {}}},
        {"jsonrpc": "2.0", "id": 4, "method": "no/such"},
        7
    ]);
    let headers = [
        ("mcp-session-id", old.as_str()),
        ("mcp-protocol-version", "2025-03-26"),
    ];
    let (status, body) = send(&service, &headers, &serde_json::to_vec(&batch).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answers = body.as_array().expect("a batch is answered with an array");
    assert_eq!(
        answers.len(),
        5,
        "one answer per request and per unreadable element: {body}"
    );
    assert_eq!(answers[0], json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
    assert_eq!(answers[1]["result"]["content"][0]["text"], "region eu");
    assert_eq!(answers[2]["id"], 3);
    assert_eq!(
        answers[2]["error"]["code"], -32600,
        "initialize is never batched"
    );
    assert_eq!(answers[3]["error"]["code"], -32601);
    assert_eq!(answers[4]["error"]["code"], -32600);
    assert!(
        answers[4].as_object().unwrap().contains_key("id") && answers[4]["id"].is_null(),
        "an element without a readable id is answered with id null: {body}"
    );

    let only_notifications = json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}]);
    let (status, _) = send(
        &service,
        &headers,
        &serde_json::to_vec(&only_notifications).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);

    let new = session(&service, "2025-11-25").await;
    let (status, body) = send(
        &service,
        &[("mcp-session-id", new.as_str())],
        &serde_json::to_vec(&json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}])).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], -32600, "{body}");
    let (status, body) = send(&service, &headers, b"[]").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], -32600, "an empty batch: {body}");
}

#[tokio::test]
async fn mcp_param_headers_must_mirror_the_arguments_of_a_modern_call() {
    let service = service().await;
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut headers = MODERN_HEADERS.to_vec();
        headers.push(("mcp-name", "r__route"));
        headers.extend_from_slice(extra);
        headers
    };
    let call = modern_call(1, "r__route", json!({"region": "eu"}));
    for (extra, why) in [
        (vec![], "missing"),
        (vec![("mcp-param-region", "us")], "different"),
        (
            vec![("mcp-param-region", "=?base64?!!?=")],
            "not valid base64",
        ),
    ] {
        let (status, body) = send(&service, &with(&extra), &call).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{why}: {body}");
        assert_eq!(body["error"]["code"], -32020, "{why}: {body}");
    }
    let (status, body) = send(&service, &with(&[("Mcp-Param-Region", "eu")]), &call).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["result"]["content"][0]["text"], "region eu");
    let (status, body) = send(
        &service,
        &with(&[("mcp-param-region", "=?base64?ZXU=?=")]),
        &call,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "base64 is decoded first: {body}");

    let without = modern_call(2, "r__route", json!({}));
    let (status, body) = send(&service, &with(&[]), &without).await;
    assert_eq!(status, StatusCode::OK, "no value, no header: {body}");
    let (status, body) = send(&service, &with(&[("mcp-param-region", "eu")]), &without).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "a header for a value the body does not have: {body}"
    );
}

#[tokio::test]
async fn a_modern_request_with_a_stale_session_id_is_served_as_modern() {
    let service = service().await;
    let mut headers = MODERN_HEADERS.to_vec();
    headers.push(("mcp-name", "r__route"));
    headers.push(("mcp-param-region", "eu"));
    headers.push(("mcp-session-id", "ended-long-ago"));
    let (status, body) = send(
        &service,
        &headers,
        &modern_call(1, "r__route", json!({"region": "eu"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["result"]["resultType"], "complete", "{body}");
}

#[tokio::test]
async fn errors_with_an_unreadable_id_carry_null_for_sessions_before_2025_11_25() {
    let service = service().await;
    for (version, null_id) in [
        ("2025-03-26", true),
        ("2025-06-18", true),
        ("2025-11-25", false),
    ] {
        let id = session(&service, version).await;
        let headers = [
            ("mcp-session-id", id.as_str()),
            ("mcp-protocol-version", version),
        ];
        for body in [
            &b"{not json"[..],
            br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
        ] {
            let (status, answer) = send(&service, &headers, body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{version}: {answer}");
            let object = answer.as_object().unwrap();
            assert_eq!(object.contains_key("id"), null_id, "{version}: {answer}");
            if null_id {
                assert!(answer["id"].is_null());
            }
        }
    }
}

#[tokio::test]
async fn a_modules_json_rpc_error_reaches_the_client_with_its_code_and_data() {
    let service = service().await;
    let id = session(&service, "2025-11-25").await;
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "t__url_needed", "arguments": {}}});
    let (status, body) = send(
        &service,
        &[("mcp-session-id", id.as_str())],
        &serde_json::to_vec(&call).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["id"], 5);
    assert_eq!(body["error"]["code"], -32042, "{body}");
    assert_eq!(
        body["error"]["data"]["elicitations"][0]["url"],
        "https://example.com/connect"
    );

    let mut headers = MODERN_HEADERS.to_vec();
    headers.push(("mcp-name", "t__url_needed"));
    let (_, body) = send(
        &service,
        &headers,
        &modern_call(6, "t__url_needed", json!({})),
    )
    .await;
    assert_eq!(body["error"]["code"], -32042, "modern too: {body}");
}

#[tokio::test]
async fn the_gateways_error_result_for_a_tool_with_an_output_schema_has_no_structured_content() {
    let service = service().await;
    let id = session(&service, "2025-11-25").await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t__typed", "arguments": {}}});
    let (_, body) = send(
        &service,
        &[("mcp-session-id", id.as_str())],
        &serde_json::to_vec(&call).unwrap(),
    )
    .await;
    let result = &body["result"];
    assert_eq!(result["isError"], true, "{body}");
    assert!(
        result.get("structuredContent").is_none(),
        "it would break the tool's outputSchema: {body}"
    );
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("module failing is unavailable")
    );
}

fn principal() -> Principal {
    match Auth::none() {
        Auth::None(p) => (*p).clone(),
        _ => unreachable!(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_param_headers_are_sent_to_a_modern_http_module() {
    // The upstream: a gateway (which checks Mcp-Param-* on every modern call) on a socket.
    let upstream = gateway(vec![spec("r", Arc::new(routed_module()))]).await;
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
    let module = HttpModule::new(HttpConfig {
        name: "up".into(),
        url: format!("http://{address}/mcp").parse().unwrap(),
        headers: Vec::new(),
        tls: None,
        credentials: None,
        call_timeout: Duration::from_secs(30),
        era: Default::default(),
    })
    .unwrap();
    let outer = gateway(vec![spec("up", Arc::new(module))]).await;
    for region in ["eu", " padded é"] {
        let params: CallToolParams = serde_json::from_value(
            json!({"name": "up__r__route", "arguments": {"region": region}}),
        )
        .unwrap();
        let result = outer
            .call_tool(&principal(), params)
            .await
            .unwrap()
            .into_result()
            .unwrap();
        assert_eq!(
            result["content"][0]["text"],
            format!("region {region}"),
            "the upstream checked the mirrored header: {result}"
        );
    }
    let _ = stop.send(());
    let _ = server.await;
}

#[tokio::test]
async fn a_module_result_that_cannot_be_read_never_reaches_the_client() {
    let service = service().await;
    let mut headers = MODERN_HEADERS.to_vec();
    headers.push(("mcp-name", "t__forged"));
    let (status, body) = send(&service, &headers, &modern_call(1, "t__forged", json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let result = &body["result"];
    assert_eq!(result["isError"], true, "{body}");
    assert_eq!(result["resultType"], "complete", "{body}");
    assert!(result.get("inputRequests").is_none(), "{body}");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-gateway"
    );
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("sent an invalid answer")
    );
}

#[tokio::test]
async fn arguments_that_cannot_be_read_are_refused_not_read_as_empty_for_mcp_param() {
    let service = service().await;
    let mut headers = MODERN_HEADERS.to_vec();
    headers.push(("mcp-name", "r__route"));
    // No Mcp-Param-Region: if the arguments were read as {} this would pass the check.
    let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"r__route","arguments":{"region":"eu","z":"\ud800"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let (status, body) = send(&service, &headers, call).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], -32602, "{body}");
}

#[tokio::test]
async fn a_repeated_routing_header_is_refused_and_batches_are_bounded() {
    let service = service().await;
    let mut headers = MODERN_HEADERS.to_vec();
    headers.push(("mcp-name", "r__route"));
    headers.push(("mcp-name", "t__typed"));
    headers.push(("mcp-param-region", "eu"));
    let (status, body) = send(
        &service,
        &headers,
        &modern_call(1, "r__route", json!({"region": "eu"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], -32020, "{body}");

    let old = session(&service, "2025-03-26").await;
    let pings: Vec<Value> = (0..101)
        .map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "ping"}))
        .collect();
    let (status, body) = send(
        &service,
        &[("mcp-session-id", old.as_str())],
        &serde_json::to_vec(&pings).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], -32600, "{body}");
}
