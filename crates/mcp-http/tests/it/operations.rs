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
use elicitation_store::{KeyRing, ManualClock, MemoryStore, PostgresStore, SystemClock};
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
/// Another caller's token (subject `bob`).
const BOB: &str = "bob-token";

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
        TokenGrant {
            subject: "bob".into(),
            ..grant(BOB, &[SCOPE_TOOLS_CALL])
        },
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
    harness_configured(limits, ServiceConfig::default()).await
}

async fn harness_configured(limits: Limits, config: ServiceConfig) -> Harness {
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
        config,
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
    let mut options = db.options(keys);
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
            "DELETE FROM mcp_gateway_migrations WHERE version = (SELECT max(version) FROM mcp_gateway_migrations)",
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

/// Issue 44, item 4: REST reads take from a bucket of their own per caller (they were not
/// limited at all), which neither eats into the caller's tool calls nor another caller's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_reads_are_rate_limited_per_caller_and_recover() {
    let clock = Arc::new(ManualClock::stopped_now());
    let rate = Rate {
        per_minute: 30,
        burst: 2,
    };
    let h = harness(Limits::new(rate, rate).with_clock(clock.clone())).await;
    for _ in 0..2 {
        let (status, _, body) = send(&h, "GET", "/v1/mcp/elicitations", Some(AGENT), None).await;
        assert_eq!(status, StatusCode::OK, "{body:?}");
    }
    let (status, headers, body) = send(&h, "GET", "/v1/mcp/elicitations", Some(AGENT), None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body:?}");
    assert!(headers.contains_key("retry-after"), "{headers:?}");
    assert!(String::from_utf8_lossy(&body).contains("REST API faster than the gateway allows"));
    // The caller's tool calls have their own bucket; another caller has its own.
    assert_eq!(
        call(&h, "test__read", json!({}), None).await["isError"],
        false
    );
    let (status, _, _) = send(&h, "GET", "/v1/mcp/elicitations", Some(BOB), None).await;
    assert_eq!(status, StatusCode::OK);
    clock.advance(time::Duration::seconds(2));
    let (status, _, _) = send(&h, "GET", "/v1/mcp/elicitations", Some(AGENT), None).await;
    assert_eq!(status, StatusCode::OK, "a token came back");
}

/// Issue 44, item 4: a REST long poll holds one of its caller's long-lived slots while it
/// waits (1,100 of them held every connection), so past `max_streams_per_caller` one is
/// refused at once; another caller is unaffected, and an answer ends the waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_long_polls_hold_its_share_of_long_requests() {
    let config = ServiceConfig {
        max_streams_per_caller: 2,
        ..ServiceConfig::default()
    };
    let h = Arc::new(harness_configured(no_limits(), config).await);
    let id = held_id(&call(&h, "test__delete", json!({}), None).await);
    let poll = format!("/v1/mcp/elicitations/{id}?wait=60s");
    let polls: Vec<_> = (0..2)
        .map(|_| {
            let (h, poll) = (h.clone(), poll.clone());
            tokio::spawn(async move { send(&h, "GET", &poll, Some(AGENT), None).await })
        })
        .collect();
    // Once both polls wait (the gauge of long-lived requests says so), a third — even one
    // that would not wait — is refused at once.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sample(&h.service.metrics_text(), "mcp_gateway_open_streams") != Some(2.0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the polls never held the share"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let now = format!("/v1/mcp/elicitations/{id}?wait=0s");
    let (status, _, body) = send(&h, "GET", &now, Some(AGENT), None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body:?}");
    assert!(
        String::from_utf8_lossy(&body).contains("open streams"),
        "{body:?}"
    );
    // Reads that do not wait hold nothing.
    let (status, _, _) = send(
        &h,
        "GET",
        &format!("/v1/mcp/elicitations/{id}"),
        Some(AGENT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // The person answers: both polls end with the answer, and the share is free again.
    answer(&h, &id, false).await;
    for poll in polls {
        let (status, _, body) = tokio::time::timeout(Duration::from_secs(10), poll)
            .await
            .expect("the answer ends the wait")
            .unwrap();
        assert_eq!(status, StatusCode::OK);
        let view: Value = serde_json::from_slice(&body).unwrap();
        assert_ne!(view["status"], "pending", "{view}");
    }
    let (status, _, _) = send(&h, "GET", &now, Some(AGENT), None).await;
    assert_eq!(status, StatusCode::OK);
}

/// A JSON POST to `path` by `token` (or none).
fn post_to(path: &str, token: Option<&str>) -> http::request::Builder {
    let request = Request::builder()
        .method("POST")
        .uri(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json");
    match token {
        Some(token) => request.header("authorization", format!("Bearer {token}")),
        None => request,
    }
}

/// What the gateway holds of bodies still arriving, as `/metrics` says.
fn body_bytes_held(h: &Harness) -> f64 {
    sample(&h.service.metrics_text(), "mcp_gateway_request_body_bytes").unwrap_or(-1.0)
}

/// Waits until the gateway holds `bytes` of bodies still arriving.
async fn until_held(h: &Harness, bytes: f64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while body_bytes_held(h) != bytes {
        assert!(
            tokio::time::Instant::now() < deadline,
            "held {}",
            body_bytes_held(h)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One request whose body arrives through `sender`, by `token` (or none), to `path`.
fn pending_body(
    h: &Harness,
    path: &str,
    token: Option<&str>,
) -> (
    tokio::sync::mpsc::Sender<Bytes>,
    tokio::task::JoinHandle<StatusCode>,
) {
    let (sender, body) = mcp_http_kit::body::ChannelBody::new(4);
    let request = post_to(path, token).body(body).unwrap();
    let service = h.service.clone();
    let answered = tokio::spawn(async move { service.handle(request).await.status() });
    (sender, answered)
}

/// A whole body of `n` bytes from `token` to `path`: the status.
async fn whole_body(h: &Harness, path: &str, token: Option<&str>, n: usize) -> StatusCode {
    let (sender, answered) = pending_body(h, path, token);
    sender.send(Bytes::from(vec![b' '; n])).await.unwrap();
    drop(sender);
    answered.await.unwrap()
}

/// Issue 44, item 4: the bytes of bodies still arriving are bounded per caller and in all
/// (100 bodies held one byte short took 400 MiB; the bound was max_connections ×
/// body_limit). A body past its sender's share or the gateway's is refused with a retry,
/// other senders go on, and the bytes come back when a body ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_in_flight_are_bounded_per_caller_and_in_all() {
    let config = ServiceConfig {
        body_limit: 1000,
        body_bytes_per_caller: 1500,
        body_bytes_in_flight: 2500,
        ..ServiceConfig::default()
    };
    let h = harness_configured(no_limits(), config).await;
    // Alice sends all of a body but its last bytes, and holds it.
    let (alice, alice_answered) = pending_body(&h, "/mcp", Some(AGENT));
    alice.send(Bytes::from(vec![b' '; 999])).await.unwrap();
    until_held(&h, 999.0).await;
    // Her next body does not fit her share.
    assert_eq!(
        whole_body(&h, "/mcp", Some(AGENT), 600).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Bob's does, and is served (a body of spaces is not JSON: 400, not 429).
    assert_eq!(
        whole_body(&h, "/mcp", Some(BOB), 600).await,
        StatusCode::BAD_REQUEST
    );
    // Bob holds one too: 1,999 of 2,500 bytes in flight; a third sender (the page, before
    // anyone signs in) does not fit the gateway's total.
    let (bob, bob_answered) = pending_body(&h, "/mcp", Some(BOB));
    bob.send(Bytes::from(vec![b' '; 1000])).await.unwrap();
    until_held(&h, 1999.0).await;
    assert_eq!(
        whole_body(&h, "/approvals/sign-in", None, 600).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Bodies that end give their bytes back.
    drop((alice, bob));
    assert_eq!(alice_answered.await.unwrap(), StatusCode::BAD_REQUEST);
    assert_eq!(bob_answered.await.unwrap(), StatusCode::BAD_REQUEST);
    assert_ne!(
        whole_body(&h, "/approvals/sign-in", None, 600).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        whole_body(&h, "/mcp", Some(AGENT), 1000).await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(body_bytes_held(&h), 0.0);
}

/// A body that is whole when first looked at, of a length it does not announce (as an
/// embedder's stream may be).
struct CameWhole(Option<Bytes>);

impl hyper::body::Body for CameWhole {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.take().map(|data| Ok(hyper::body::Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_none()
    }
}

/// A request of `token` to `path` whose body of `n` bytes came whole with its head (as most
/// do over a socket): the status.
async fn body_with_its_head(h: &Harness, path: &str, token: Option<&str>, n: usize) -> StatusCode {
    let request = post_to(path, token)
        .body(CameWhole(Some(Bytes::from(vec![b' '; n]))))
        .unwrap();
    h.service.handle(request).await.status()
}

/// The budget bounds what is held while bodies arrive. A body that came whole with its
/// head holds nothing while it arrives: it is served (or refused for its size) whatever its
/// sender and the gateway hold, and is not counted; bodies still arriving are counted as
/// before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_came_whole_takes_no_share_of_what_arrives() {
    let config = ServiceConfig {
        body_limit: 1000,
        body_bytes_per_caller: 1000,
        body_bytes_in_flight: 1000,
        ..ServiceConfig::default()
    };
    let h = harness_configured(no_limits(), config).await;
    // Alice holds her share and the gateway's: a body of hers still arriving is refused.
    let (alice, alice_answered) = pending_body(&h, "/mcp", Some(AGENT));
    alice.send(Bytes::from(vec![b' '; 1000])).await.unwrap();
    until_held(&h, 1000.0).await;
    assert_eq!(
        whole_body(&h, "/mcp", Some(AGENT), 10).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Whole bodies are read (spaces are not JSON: 400), hers, Bob's and the page's.
    assert_eq!(
        body_with_its_head(&h, "/mcp", Some(AGENT), 600).await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        body_with_its_head(&h, "/mcp", Some(BOB), 1000).await,
        StatusCode::BAD_REQUEST
    );
    // (The sign-in form refuses spaces for itself: not 429.)
    assert_eq!(
        body_with_its_head(&h, "/approvals/sign-in", None, 600).await,
        StatusCode::UNAUTHORIZED
    );
    // One past the limit is refused for its size, whole or not.
    assert_eq!(
        body_with_its_head(&h, "/mcp", Some(BOB), 1001).await,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert_eq!(
        body_bytes_held(&h),
        1000.0,
        "only Alice's arriving body is counted"
    );
    drop(alice);
    assert_eq!(alice_answered.await.unwrap(), StatusCode::BAD_REQUEST);
    assert_eq!(body_bytes_held(&h), 0.0);
}
