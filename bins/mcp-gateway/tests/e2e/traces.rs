//! OpenTelemetry traces (`[tracing] otlp_endpoint`): a local OTLP/HTTP receiver (Python,
//! opentelemetry-proto decoding the protobuf) reads what the gateway exports. A read-only
//! call continues the client's `traceparent`, with the module call as its child and the
//! context passed on to the HTTP module; a held-then-approved call shows the hold and the
//! redemption as span events and its store operations as child spans; a module that dies
//! mid-call shows as such. No argument value is in anything exported, and with the
//! receiver gone calls go on (what could not be sent is counted).

use super::notifications::write_tool;
use super::tool_changes::{Shifty, config};
use super::*;

/// A marker put in every argument: it must appear nowhere in the export.
const MARKER: &str = "ARGUMENT-MARKER-9d41";
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn tools() -> Value {
    let mut tools = write_tool();
    tools.as_array_mut().unwrap().push(json!({
        "name": "read", "description": "Reads a note.",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
        "annotations": {"readOnlyHint": true}}));
    tools
}

/// A 2026-07-28 call of `tool` with a client `traceparent` (when given).
async fn traced_call(
    base: &str,
    tool: &str,
    arguments: Value,
    confirmation: Option<&str>,
    traceparent: Option<&str>,
) -> Value {
    let mut params = json!({"name": tool, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}});
    if let Some(id) = confirmation {
        params["_meta"]["confirmation_id"] = json!(id);
    }
    let auth = format!("Bearer {AGENT}");
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
    ];
    if let Some(parent) = traceparent {
        headers.push(("traceparent", parent));
    }
    let (status, _, body) = http(
        "POST",
        &format!("{base}/mcp"),
        &headers,
        Some(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["result"].clone()
}

/// The spans received so far.
fn spans(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Waits (up to 20 s) for the export to hold a span that `wanted` accepts; all spans then.
async fn until(log: &Path, what: &str, wanted: impl Fn(&Value) -> bool) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let seen = spans(log);
        if seen.iter().any(&wanted) {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no span {what} in {seen:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn request_of<'a>(spans: &'a [Value], tool: &str, outcome: &str) -> Vec<&'a Value> {
    spans
        .iter()
        .filter(|s| {
            s["name"] == "tools/call"
                && s["attributes"]["mcp.tool"] == tool
                && s["attributes"]["mcp.outcome"] == outcome
        })
        .collect()
}

fn children<'a>(spans: &'a [Value], parent: &Value) -> Vec<&'a Value> {
    spans
        .iter()
        .filter(|s| s["parent_span_id"] == parent["span_id"] && s["trace_id"] == parent["trace_id"])
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_traced_from_the_client_through_the_gateway_into_the_module() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-traces-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("spans.jsonl");
    let mut receiver = Command::new(env_or_panic("MCP_INTEROP_PYTHON"));
    receiver
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/otlp_receiver.py"
        ))
        .arg(&log);
    let (mut receiver, port) = listening(receiver, "the OTLP receiver").await;
    let shifty = Shifty::start(&dir, "notes", "modern-http", tools(), "").await;
    let local = Shifty::start(&dir, "local", "stdio", tools(), "").await;
    let modules = format!(
        "{}\n{}\n[tracing]\notlp_endpoint = \"http://127.0.0.1:{port}/v1/traces\"\nsample_ratio = 1.0\nmax_queue = 64\n[tracing.resource]\n\"deployment.environment\" = \"e2e\"\n",
        shifty.module, local.module
    );
    let file = config(&dir, "[store]\nkind = \"memory\"", &modules);
    let gateway = Gateway::start(&file).await;
    let base = gateway.base.clone();

    // A read-only call, continuing the client's trace.
    let client = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let read = traced_call(
        &base,
        "notes__read",
        json!({"path": MARKER}),
        None,
        Some(&client),
    )
    .await;
    assert_eq!(text(&read), "ran read", "{read}");
    let seen = until(&log, "of the read call", |s| {
        s["attributes"]["mcp.tool"] == "notes__read"
    })
    .await;
    let request = request_of(&seen, "notes__read", "forwarded");
    assert_eq!(request.len(), 1, "{seen:#?}");
    let request = request[0];
    assert_eq!(
        request["trace_id"], CLIENT_TRACE,
        "the client's trace continued"
    );
    assert_eq!(request["parent_span_id"], CLIENT_SPAN);
    assert_eq!(request["kind"], 2, "a server span");
    let attributes = &request["attributes"];
    assert_eq!(attributes["mcp.method"], "tools/call");
    assert_eq!(attributes["mcp.module"], "notes");
    assert_eq!(attributes["mcp.era"], "2026-07-28");
    assert_eq!(request["resource"]["service.name"], "mcp-gateway");
    assert_eq!(request["resource"]["deployment.environment"], "e2e");
    let module_call: Vec<&Value> = children(&seen, request)
        .into_iter()
        .filter(|s| s["name"] == "mcp.module_call")
        .collect();
    assert_eq!(module_call.len(), 1, "{seen:#?}");
    assert_eq!(module_call[0]["kind"], 3, "a client span");
    // The module got the context: the same trace, the module call its parent.
    let ledger = shifty.ledger();
    let sent = ledger[0]["traceparent"].as_str().unwrap_or_default();
    assert_eq!(
        sent,
        format!(
            "00-{CLIENT_TRACE}-{}-01",
            module_call[0]["span_id"].as_str().unwrap()
        ),
        "{ledger:?}"
    );

    // A stdio module gets the context in `_meta.traceparent`.
    let read = traced_call(
        &base,
        "local__read",
        json!({"path": "/x"}),
        None,
        Some(&client),
    )
    .await;
    assert_eq!(text(&read), "ran read", "{read}");
    let sent = local.ledger()[0]["traceparent"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        sent.starts_with(&format!("00-{CLIENT_TRACE}-")) && !sent.contains(CLIENT_SPAN),
        "the stdio module's call is a child of the gateway's span: {sent}"
    );

    // A 2025-11-25 client in a session: its call is traced too, continuing its trace, the
    // era recorded.
    let session = session_of(&gateway, AGENT).await;
    let legacy_trace = "5bf92f3577b34da6a3ce929d0e0e4737";
    let parent = format!("00-{legacy_trace}-00f067aa0ba902b8-01");
    let (status, _, body) = http(
        "POST",
        &format!("{base}/mcp"),
        &[
            ("authorization", &format!("Bearer {AGENT}")),
            ("mcp-session-id", &session),
            ("mcp-protocol-version", "2025-11-25"),
            ("accept", "application/json, text/event-stream"),
            ("traceparent", &parent),
        ],
        Some(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "notes__read", "arguments": {"path": MARKER}}})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(text(&body["result"]), "ran read", "{body}");
    let seen = until(&log, "of the 2025-era call", |s| {
        s["trace_id"] == legacy_trace && s["name"] == "tools/call"
    })
    .await;
    let legacy: Vec<&Value> = seen
        .iter()
        .filter(|s| s["trace_id"] == legacy_trace && s["attributes"]["mcp.tool"] == "notes__read")
        .collect();
    assert_eq!(legacy.len(), 1, "{seen:#?}");
    assert_eq!(legacy[0]["attributes"]["mcp.era"], "2025");
    assert_eq!(legacy[0]["attributes"]["mcp.outcome"], "forwarded");
    assert_eq!(
        children(&seen, legacy[0])
            .iter()
            .filter(|s| s["name"] == "mcp.module_call")
            .count(),
        1,
        "{seen:#?}"
    );

    // A held call, approved, re-called: the hold and the redemption are events, the
    // store's operations child spans.
    let held = traced_call(&base, "notes__write", json!({"path": MARKER}), None, None).await;
    let id = held_id(&held);
    answer(&base, &id, true).await;
    let ran = traced_call(
        &base,
        "notes__write",
        json!({"path": MARKER}),
        Some(&id),
        None,
    )
    .await;
    assert_eq!(text(&ran), "ran write", "{ran}");
    let seen = until(&log, "of the approved write", |s| {
        s["attributes"]["mcp.tool"] == "notes__write"
            && s["attributes"]["mcp.outcome"] == "forwarded"
    })
    .await;
    let hold = request_of(&seen, "notes__write", "held");
    assert_eq!(hold.len(), 1, "{seen:#?}");
    let held_event = hold[0]["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "held")
        .unwrap_or_else(|| panic!("{:#?}", hold[0]));
    assert_eq!(held_event["attributes"]["confirmation"], id.as_str());
    // Named by the operation (`create_confirmation`, …).
    let store_ops: Vec<&Value> = children(&seen, hold[0])
        .into_iter()
        .filter(|s| s["attributes"]["store.operation"].as_str().is_some())
        .collect();
    assert!(
        store_ops.iter().any(|s| s["name"] == "create_confirmation"),
        "{seen:#?}"
    );
    let redeemed = request_of(&seen, "notes__write", "forwarded");
    assert!(
        redeemed[0]["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "redeemed" && e["attributes"]["confirmation"] == id.as_str()),
        "{:#?}",
        redeemed[0]
    );
    // The re-call's span links to the hold's (another trace: each request continues its
    // own client's).
    assert!(
        redeemed[0]["links"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["span_id"] == hold[0]["span_id"] && l["trace_id"] == hold[0]["trace_id"]),
        "the re-call links to the hold: {:#?} {:#?}",
        redeemed[0],
        hold[0]
    );

    // A module that dies mid-call.
    let died = traced_call(&base, "notes__read", json!({"die": true}), None, None).await;
    assert_eq!(died["isError"], true, "{died}");
    let seen = until(&log, "of the failed call", |s| {
        s["attributes"]["mcp.outcome"] == "module_error"
    })
    .await;
    assert_eq!(request_of(&seen, "notes__read", "module_error").len(), 1);

    // No argument value anywhere in the export.
    let exported = std::fs::read_to_string(&log).unwrap();
    assert!(!exported.contains(MARKER), "an argument was exported");

    // The receiver goes away: calls go on; what cannot be sent is counted.
    receiver.kill().await.unwrap();
    for _ in 0..100 {
        let listed = tool_names(&base, AGENT).await;
        assert!(listed.contains(&"notes__write".to_owned()));
    }
    let held = traced_call(&base, "notes__write", json!({"path": "/after"}), None, None).await;
    assert!(held_id(&held).len() > 10, "{held}");
    let lost = async || {
        let (_, _, text) = raw_with_headers(
            "GET",
            &format!("{base}/metrics"),
            &[("authorization", &format!("Bearer {SCRAPER}"))],
            Bytes::new(),
        )
        .await;
        ["dropped", "failed"]
            .iter()
            .map(|what| {
                text.lines()
                    .find_map(|l| l.strip_prefix(&format!("mcp_gateway_trace_spans_{what}_total ")))
                    .and_then(|n| n.trim().parse::<u64>().ok())
                    .unwrap_or_else(|| panic!("no trace_spans_{what} in {text}"))
            })
            .sum::<u64>()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while lost().await == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the spans that could not be sent are counted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
