//! What an operator relies on, through the HTTP service: `/metrics` counts exactly what
//! happened, `/readyz` tells whether this instance can serve, and the limits (per-caller
//! rates, per-module concurrency) refuse with a clear answer and recover.

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use elicitation_store::{
    KeyRing, ManualClock, MemoryStore, PostgresOptions, PostgresStore, SystemClock,
};
use elicitation_store::{Metered, Store};
use gating_core::GatePolicy;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use mcp_auth::{
    Auth, SCOPE_CREATE, SCOPE_METRICS, SCOPE_RESPOND, SCOPE_TOOLS_CALL, TokenGrant, token_sha256,
};
use mcp_gate::Gateway;
use mcp_gate::limits::{Limits, Rate};
use mcp_gate::metrics::Metrics;
use mcp_http::service::{McpService, ServiceConfig};
use mcp_upstream::inproc::{InProcessModule, InProcessTool, text_result};
use mcp_upstream::registry::{CallLimit, ModuleSpec, Registry};
use mcp_upstream::stdio::{StdioConfig, StdioModule};
use mcp_upstream::{Module, ModuleError, ToolCall};
use serde_json::value::RawValue;
use serde_json::{Value, json};

const AGENT: &str = "agent-token";
const HUMAN: &str = "human-token";
const SCRAPER: &str = "scraper-token";

struct Harness {
    service: Arc<McpService>,
    store: Arc<dyn Store>,
    deletes: Arc<AtomicUsize>,
    /// What the service reads the time from (the readiness cache among others).
    clock: Arc<ManualClock>,
}

fn grant(token: &str, scopes: &[&str]) -> TokenGrant {
    TokenGrant {
        subject: "alice".into(),
        tenant: None,
        token_sha256: token_sha256(token),
        scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        groups: Vec::new(),
    }
}

fn notebook(deletes: &Arc<AtomicUsize>) -> InProcessModule {
    let d = deletes.clone();
    InProcessModule::new(
        "test",
        vec![
            InProcessTool::new(
                json!({"name": "read", "inputSchema": {"type": "object"},
                       "annotations": {"readOnlyHint": true}}),
                |_| Ok(text_result("read", false)),
            ),
            InProcessTool::new(
                json!({"name": "delete", "inputSchema": {"type": "object"},
                       "annotations": {"readOnlyHint": false, "destructiveHint": true}}),
                move |_| {
                    d.fetch_add(1, Ordering::SeqCst);
                    Ok(text_result("deleted", false))
                },
            ),
        ],
    )
}

async fn harness_with(
    store: Arc<dyn Store>,
    modules: Vec<ModuleSpec>,
    limits: Limits,
    config: ServiceConfig,
    deletes: Arc<AtomicUsize>,
) -> Harness {
    harness_requiring(store, modules, limits, config, deletes, Vec::new()).await
}

async fn harness_requiring(
    store: Arc<dyn Store>,
    modules: Vec<ModuleSpec>,
    limits: Limits,
    config: ServiceConfig,
    deletes: Arc<AtomicUsize>,
    required: Vec<String>,
) -> Harness {
    let metrics = Arc::new(Metrics::new());
    let store: Arc<dyn Store> = Arc::new(Metered::new(store, metrics.clone()));
    let registry = Registry::start_with(
        modules,
        CallLimit {
            max_per_module: 1,
            wait: Duration::from_millis(200),
        },
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let gateway = Gateway::new(registry, store.clone(), GatePolicy::default(), false)
        .with_metrics(metrics)
        .with_limits(limits)
        .with_required_modules(required);
    let auth = Auth::tokens(vec![
        grant(AGENT, &[SCOPE_TOOLS_CALL, SCOPE_CREATE]),
        grant(HUMAN, &[SCOPE_RESPOND]),
        grant(SCRAPER, &[SCOPE_METRICS]),
    ])
    .unwrap();
    let clock = Arc::new(ManualClock::stopped_now());
    let config = ServiceConfig {
        clock: clock.clone(),
        ..config
    };
    Harness {
        service: Arc::new(McpService::new(Arc::new(gateway), auth, config)),
        store,
        deletes,
        clock,
    }
}

async fn harness(limits: Limits) -> Harness {
    let deletes = Arc::new(AtomicUsize::new(0));
    let modules = vec![ModuleSpec {
        isolation: None,
        name: "test".into(),
        prefix: "test".into(),
        trust_annotations: true,
        module: Arc::new(notebook(&deletes)),
    }];
    harness_with(
        Arc::new(MemoryStore::default()),
        modules,
        limits,
        ServiceConfig::default(),
        deletes,
    )
    .await
}

fn no_limits() -> Limits {
    let none = Rate {
        per_minute: 0,
        burst: 0,
    };
    Limits::new(none, none)
}

async fn send(
    h: &Harness,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, http::HeaderMap, Bytes) {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let body = body.map_or_else(Bytes::new, |b| Bytes::from(serde_json::to_vec(&b).unwrap()));
    let response = h
        .service
        .handle(request.body(Full::new(body)).unwrap())
        .await;
    let status = response.status();
    let headers = response.headers().clone();
    (
        status,
        headers,
        response.into_body().collect().await.unwrap().to_bytes(),
    )
}

/// A 2026-07-28 `tools/call`; the JSON-RPC result.
async fn call(h: &Harness, tool: &str, arguments: Value, confirmation: Option<&str>) -> Value {
    let mut params = json!({"name": tool, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }});
    if let Some(id) = confirmation {
        params["_meta"]["confirmation_id"] = json!(id);
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    let request = Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "127.0.0.1")
        .header("authorization", format!("Bearer {AGENT}"))
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
        .unwrap();
    let response = h.service.handle(request).await;
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(body.get("error").is_none(), "{body}");
    body["result"].clone()
}

fn held_id(result: &Value) -> String {
    result["structuredContent"]["elicitation"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("not a held result: {result}"))
        .to_owned()
}

async fn answer(h: &Harness, id: &str, confirmed: bool) {
    let (status, _, body) = send(
        h,
        "POST",
        &format!("/v1/mcp/elicitations/{id}/respond"),
        Some(HUMAN),
        Some(json!({"confirmed": confirmed})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
}

async fn scrape(h: &Harness) -> String {
    let (status, headers, body) = send(h, "GET", "/metrics", Some(SCRAPER), None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    String::from_utf8(body.to_vec()).unwrap()
}

/// The value of the sample `name{labels}` (labels exactly as written), or `None`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

#[tokio::test]
async fn metrics_count_exactly_what_a_scripted_run_did() {
    let h = harness(no_limits()).await;
    for _ in 0..2 {
        assert_eq!(
            call(&h, "test__read", json!({}), None).await["isError"],
            false
        );
    }
    let mut held = Vec::new();
    for n in 0..3 {
        held.push(held_id(
            &call(&h, "test__delete", json!({"n": n}), None).await,
        ));
    }
    elicitation_store::sweep_once(&*h.store, &SystemClock, None).await;
    let text = scrape(&h).await;
    assert_eq!(
        sample(&text, "mcp_gateway_elicitations_pending"),
        Some(3.0),
        "{text}"
    );
    answer(&h, &held[0], true).await;
    answer(&h, &held[1], true).await;
    answer(&h, &held[2], false).await;
    for (n, id) in held.iter().enumerate() {
        call(&h, "test__delete", json!({"n": n}), Some(id)).await;
    }
    assert_eq!(h.deletes.load(Ordering::SeqCst), 2);
    elicitation_store::sweep_once(&*h.store, &SystemClock, None).await;

    let text = scrape(&h).await;
    let calls = |tool: &str, outcome: &str, reason: &str| {
        sample(
            &text,
            &format!(
                "mcp_gateway_tool_calls_total{{module=\"test\",tool=\"{tool}\",outcome=\"{outcome}\",reason=\"{reason}\"}}"
            ),
        )
    };
    assert_eq!(calls("test__read", "forwarded", ""), Some(2.0), "{text}");
    assert_eq!(calls("test__delete", "held", ""), Some(3.0), "{text}");
    assert_eq!(
        calls("test__delete", "forwarded", "confirmed"),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        calls("test__delete", "rejected", "user_rejected"),
        Some(1.0),
        "{text}"
    );
    let created = sample(
        &text,
        "mcp_gateway_elicitations_created_total{type=\"confirmation\"}",
    );
    assert_eq!(created, Some(3.0), "{text}");
    let answered = |outcome: &str| {
        sample(
            &text,
            &format!("mcp_gateway_elicitations_answered_total{{outcome=\"{outcome}\"}}"),
        )
    };
    assert_eq!(answered("approved"), Some(2.0), "{text}");
    assert_eq!(answered("declined"), Some(1.0), "{text}");
    assert_eq!(
        sample(&text, "mcp_gateway_answer_seconds_count"),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "mcp_gateway_elicitations_pending"),
        Some(0.0),
        "{text}"
    );
    // Every call went through the pipeline once; four reached the module.
    assert_eq!(
        sample(&text, "mcp_gateway_gateway_seconds_count"),
        Some(8.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "mcp_gateway_module_seconds_count{module=\"test\"}"),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "mcp_gateway_module_up{module=\"test\"}"),
        Some(1.0),
        "{text}"
    );
    assert!(
        sample(
            &text,
            "mcp_gateway_store_seconds_count{op=\"redeem_confirmation\"}"
        )
        .is_some_and(|n| n >= 3.0),
        "{text}"
    );
    // No label carries an id or an argument.
    for id in &held {
        assert!(!text.contains(id.as_str()), "{text}");
    }
    assert!(!text.contains("\"n\""), "{text}");
}

#[tokio::test]
async fn metrics_on_the_main_listener_need_their_scope() {
    let h = harness(no_limits()).await;
    let (status, _, _) = send(&h, "GET", "/metrics", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = send(&h, "GET", "/metrics", Some(AGENT), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // On the operations listener (bound where only the operator reaches), no token.
    let open = h
        .service
        .operations(&http::Method::GET, "/metrics")
        .await
        .unwrap();
    assert_eq!(open.status(), StatusCode::OK);
    let off = harness_with(
        Arc::new(MemoryStore::default()),
        Vec::new(),
        no_limits(),
        ServiceConfig {
            metrics_on_main: false,
            ..ServiceConfig::default()
        },
        Arc::default(),
    )
    .await;
    let (status, _, _) = send(&off, "GET", "/metrics", Some(SCRAPER), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_caller_over_its_rates_is_refused_clearly_and_recovers() {
    let clock = Arc::new(ManualClock::stopped_now());
    let h = harness(
        Limits::new(
            Rate {
                per_minute: 30,
                burst: 2,
            },
            Rate {
                per_minute: 30,
                burst: 1,
            },
        )
        .with_clock(clock.clone()),
    )
    .await;
    // Calls: a burst of two, then an in-band error that says when to try again.
    for _ in 0..2 {
        assert_eq!(
            call(&h, "test__read", json!({}), None).await["isError"],
            false
        );
    }
    let refused = call(&h, "test__read", json!({}), None).await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(refused["structuredContent"]["rate_limited"], true);
    // One token every 2 s: the steps below have that long before one comes back.
    let wait = refused["structuredContent"]["retry_after_secs"]
        .as_u64()
        .unwrap();
    assert!((1..=2).contains(&wait), "{refused}");
    assert!(
        refused["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("faster than the gateway allows")
    );
    // A gated call counts too: refused, not held.
    let gated = call(&h, "test__delete", json!({}), None).await;
    assert_eq!(gated["structuredContent"]["rate_limited"], true, "{gated}");
    // So does opening a session (it may be recorded and told to every instance).
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let (status, headers, _) = send(&h, "POST", "/mcp", Some(AGENT), Some(init)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        ["1", "2"].contains(&headers["retry-after"].to_str().unwrap()),
        "{headers:?}"
    );
    // A call comes back after the window.
    clock.advance_std(Duration::from_millis(2100));
    assert_eq!(
        call(&h, "test__read", json!({}), None).await["isError"],
        false
    );

    // Elicitations over REST: the second in the same second is 429 with Retry-After.
    let ask = json!({"message": "Which?", "response": {"type": "string_input"}, "ttl_seconds": 60});
    let (status, _, body) = send(
        &h,
        "POST",
        "/v1/mcp/elicitations",
        Some(AGENT),
        Some(ask.clone()),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (status, headers, body) = send(
        &h,
        "POST",
        "/v1/mcp/elicitations",
        Some(AGENT),
        Some(ask.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        ["1", "2"].contains(&headers["retry-after"].to_str().unwrap()),
        "{headers:?}"
    );
    let problem: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["status"], 429, "{problem}");
    // After the window, one more; the gate's confirmations draw on the same bucket, so a
    // gated call right after it is refused, not held (and not run).
    clock.advance_std(Duration::from_millis(2100));
    let (status, _, _) = send(&h, "POST", "/v1/mcp/elicitations", Some(AGENT), Some(ask)).await;
    assert_eq!(status, StatusCode::CREATED);
    let refused = call(&h, "test__delete", json!({}), None).await;
    assert_eq!(
        refused["structuredContent"]["rate_limited"], true,
        "{refused}"
    );
    assert_eq!(h.deletes.load(Ordering::SeqCst), 0);
    let text = scrape(&h).await;
    assert_eq!(
        sample(&text, "mcp_gateway_limited_total{limit=\"calls\"}"),
        Some(3.0)
    );
    assert_eq!(
        sample(&text, "mcp_gateway_limited_total{limit=\"confirmations\"}"),
        Some(2.0)
    );
}

/// A module whose calls wait until released.
struct Gate {
    release: tokio::sync::Semaphore,
    started: AtomicUsize,
}

#[async_trait]
impl Module for Gate {
    async fn list_tools(&self) -> Result<Vec<Value>, ModuleError> {
        Ok(vec![
            json!({"name": "slow", "inputSchema": {"type": "object"},
                        "annotations": {"readOnlyHint": true}}),
        ])
    }

    async fn call_tool(&self, _call: ToolCall<'_>) -> Result<Box<RawValue>, ModuleError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let _permit = self.release.acquire().await.unwrap();
        Ok(RawValue::from_string(text_result("done", false).to_string()).unwrap())
    }
}

#[tokio::test]
async fn a_module_at_its_concurrency_cap_makes_a_call_wait_then_fail_in_band() {
    let gate = Arc::new(Gate {
        release: tokio::sync::Semaphore::new(0),
        started: AtomicUsize::new(0),
    });
    let modules = vec![ModuleSpec {
        isolation: None,
        name: "slow".into(),
        prefix: "slow".into(),
        trust_annotations: true,
        module: gate.clone(),
    }];
    let h = Arc::new(
        harness_with(
            Arc::new(MemoryStore::default()),
            modules,
            no_limits(),
            ServiceConfig::default(),
            Arc::default(),
        )
        .await,
    );
    // The harness allows one call per module at once, waiting 200 ms for a slot.
    let first = tokio::spawn({
        let h = h.clone();
        async move { call(&h, "slow__slow", json!({}), None).await }
    });
    while gate.started.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let busy = call(&h, "slow__slow", json!({}), None).await;
    assert_eq!(busy["isError"], true, "{busy}");
    assert!(
        busy["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("module slow is busy"),
        "{busy}"
    );
    assert_eq!(
        gate.started.load(Ordering::SeqCst),
        1,
        "never reached the module"
    );
    gate.release.add_permits(1);
    assert_eq!(first.await.unwrap()["isError"], false);
    gate.release.add_permits(1);
    assert_eq!(
        call(&h, "slow__slow", json!({}), None).await["isError"],
        false
    );
    let text = scrape(&h).await;
    assert_eq!(
        sample(
            &text,
            "mcp_gateway_limited_total{limit=\"module_concurrency\"}"
        ),
        Some(1.0)
    );
}

#[tokio::test]
async fn readiness_needs_a_current_schema_and_every_required_module() {
    let db = elicitation_store::test_support::TestDb::new().await;
    let keys = KeyRing::parse("k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=").unwrap();
    let mut options = PostgresOptions::new("postgres://unused@localhost/unused", keys).unwrap();
    options.config = db.writer.clone();
    options.pool_size = 2;
    let store = Arc::new(PostgresStore::connect(options).await.unwrap());
    let broken: Arc<dyn Module> = Arc::new(StdioModule::start(StdioConfig {
        name: "broken".into(),
        command: "/nonexistent/mcp-server".into(),
        args: Vec::new(),
        env: Vec::new(),
        inherit_env: Vec::new(),
        cwd: None,
        call_timeout: Duration::from_secs(5),
        run_as: None,
    }));
    let deletes = Arc::new(AtomicUsize::new(0));
    let modules = vec![
        ModuleSpec {
            isolation: None,
            name: "test".into(),
            prefix: "test".into(),
            trust_annotations: true,
            module: Arc::new(notebook(&deletes)),
        },
        ModuleSpec {
            isolation: None,
            name: "broken".into(),
            prefix: "broken".into(),
            trust_annotations: false,
            module: broken,
        },
    ];
    let h = harness_requiring(
        store.clone(),
        modules,
        no_limits(),
        ServiceConfig::default(),
        deletes,
        vec!["test".into()],
    )
    .await;
    let (status, _, body) = send(&h, "GET", "/readyz", None, None).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));

    // A required module that is down.
    let h2 = harness_requiring(
        store.clone(),
        vec![ModuleSpec {
            isolation: None,
            name: "broken".into(),
            prefix: "broken".into(),
            trust_annotations: false,
            module: Arc::new(StdioModule::start(StdioConfig {
                name: "broken".into(),
                command: "/nonexistent/mcp-server".into(),
                args: Vec::new(),
                env: Vec::new(),
                inherit_env: Vec::new(),
                cwd: None,
                call_timeout: Duration::from_secs(5),
                run_as: None,
            })),
        }],
        no_limits(),
        ServiceConfig::default(),
        Arc::default(),
        vec!["broken".into()],
    )
    .await;
    let (status, _, body) = send(&h2, "GET", "/readyz", None, None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        body,
        json!({"status": "not ready"}),
        "the main listener does not say why"
    );
    let private = h2
        .service
        .operations(&http::Method::GET, "/readyz")
        .await
        .unwrap();
    assert_eq!(private.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value =
        serde_json::from_slice(&private.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let problems = body["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{body}");
    let problem = problems[0].as_str().unwrap();
    assert!(
        problem.starts_with("module \"broken\" is down: ")
            && problem.contains("cannot start `/nonexistent/mcp-server`"),
        "named, with why: {problem}"
    );
    // Liveness is not readiness.
    let (status, _, _) = send(&h2, "GET", "/healthz", None, None).await;
    assert_eq!(status, StatusCode::OK);

    // A schema behind this build's migrations (readiness is checked at most once a second;
    // probes in between get the last answer).
    h.clock.advance_std(Duration::from_millis(1100));
    let admin = db.admin().await;
    admin
        .execute(
            "DELETE FROM refinery_schema_history WHERE version = (SELECT max(version) FROM refinery_schema_history)",
            &[],
        )
        .await
        .unwrap();
    let response = h
        .service
        .operations(&http::Method::GET, "/readyz")
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value =
        serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert!(
        body["problems"][0]
            .as_str()
            .unwrap()
            .contains("mcp-gateway migrate"),
        "{body}"
    );
    // The metrics show the required module down as well.
    let text = String::from_utf8(
        h2.service
            .operations(&http::Method::GET, "/metrics")
            .await
            .unwrap()
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    assert_eq!(
        sample(&text, "mcp_gateway_module_up{module=\"broken\"}"),
        Some(0.0),
        "{text}"
    );
}
