//! The router suite: the HTTP service driven in process (no socket), with in-process test
//! modules, over the memory store and over a real PostgreSQL store.

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use elicitation_store::{
    ElicitationStore, KeyRing, ManualClock, MemoryStore, PostgresStore, Store,
};
use gating_core::GatePolicy;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use mcp_auth::{Auth, SCOPE_RESPOND, SCOPE_TOOLS_CALL, TokenGrant, token_sha256};
use mcp_gate::Gateway;
use mcp_http::service::{McpService, ServiceConfig};
use mcp_http::state::RequestStates;
use mcp_upstream::inproc::{InProcessModule, InProcessTool, text_result};
use mcp_upstream::registry::{ModuleSpec, Registry};
use serde_json::{Value, json};

const AGENT: &str = "agent-token";
const HUMAN: &str = "human-token";
const OTHER_AGENT: &str = "other-agent-token";
/// A person's MCP client: may call tools and answer confirmations natively.
const CLIENT: &str = "client-token";

/// Counts the calls that reached the test module's tools.
#[derive(Default)]
struct Calls {
    read: AtomicUsize,
    delete: AtomicUsize,
}

struct Harness {
    service: Arc<McpService>,
    calls: Arc<Calls>,
}

fn test_module(calls: &Arc<Calls>) -> InProcessModule {
    let read = calls.clone();
    let delete = calls.clone();
    InProcessModule::new(
        "test",
        vec![
            InProcessTool::new(
                json!({"name": "read", "description": "Reads.", "inputSchema": {"type": "object"},
                       "outputSchema": {"type": "object"},
                       "annotations": {"readOnlyHint": true}, "x-extra": {"kept": true}}),
                move |args| {
                    read.read.fetch_add(1, Ordering::SeqCst);
                    Ok(text_result(
                        &format!(
                            "read {}",
                            args.get("path").and_then(Value::as_str).unwrap_or("?")
                        ),
                        false,
                    ))
                },
            ),
            InProcessTool::new(
                json!({"name": "delete", "description": "Deletes.", "inputSchema": {"type": "object"},
                       "outputSchema": {"type": "object", "properties": {"deleted": {"type": "string"}}, "additionalProperties": false},
                       "annotations": {"readOnlyHint": false, "destructiveHint": true}}),
                move |args| {
                    delete.delete.fetch_add(1, Ordering::SeqCst);
                    Ok(text_result(
                        &format!(
                            "deleted {}",
                            args.get("path").and_then(Value::as_str).unwrap_or("?")
                        ),
                        false,
                    ))
                },
            ),
        ],
    )
}

/// A module that claims read-only but is not trusted.
fn shady_module() -> InProcessModule {
    InProcessModule::new(
        "shady",
        vec![InProcessTool::new(
            json!({"name": "read", "description": "Claims to read.", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
            |_| Ok(text_result("did something", false)),
        )],
    )
}

fn auth() -> Auth {
    let grant = |subject: &str, token: &str, scopes: &[&str]| TokenGrant {
        subject: subject.into(),
        tenant: None,
        token_sha256: token_sha256(token),
        scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        groups: Vec::new(),
    };
    Auth::tokens(vec![
        grant("alice", AGENT, &[SCOPE_TOOLS_CALL]),
        grant("alice", HUMAN, &[SCOPE_RESPOND]),
        grant("bob", OTHER_AGENT, &[SCOPE_TOOLS_CALL, SCOPE_RESPOND]),
        grant("alice", CLIENT, &[SCOPE_TOOLS_CALL, SCOPE_RESPOND]),
    ])
    .unwrap()
}

async fn harness_with(store: Arc<dyn Store>, durable: bool) -> Harness {
    harness_keyed(store, durable, RequestStates::ephemeral()).await
}

async fn harness_keyed(store: Arc<dyn Store>, durable: bool, states: RequestStates) -> Harness {
    let config = ServiceConfig {
        body_limit: 64 * 1024,
        ..ServiceConfig::default()
    };
    harness_configured(store, durable, states, config).await
}

async fn harness_configured(
    store: Arc<dyn Store>,
    durable: bool,
    states: RequestStates,
    config: ServiceConfig,
) -> Harness {
    let calls = Arc::new(Calls::default());
    let registry = Registry::start(vec![
        ModuleSpec {
            isolation: None,
            name: "test".into(),
            prefix: "test".into(),
            trust_annotations: true,
            module: Arc::new(test_module(&calls)),
        },
        ModuleSpec {
            isolation: None,
            name: "shady".into(),
            prefix: "shady".into(),
            trust_annotations: false,
            module: Arc::new(shady_module()),
        },
    ])
    .await
    .unwrap();
    let gateway = Arc::new(Gateway::new(
        registry,
        store,
        GatePolicy::default(),
        durable,
    ));
    Harness {
        service: Arc::new(McpService::new(gateway, auth(), config).with_request_states(states)),
        calls,
    }
}

async fn memory() -> Harness {
    harness_with(Arc::new(MemoryStore::default()), false).await
}

async fn postgres_store(db: &elicitation_store::test_support::TestDb) -> PostgresStore {
    let keys = KeyRing::parse("k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=").unwrap();
    let mut options = db.options(keys);
    options.pool_size = 4;
    PostgresStore::connect(options).await.unwrap()
}

async fn postgres() -> Harness {
    let db = elicitation_store::test_support::TestDb::new().await;
    harness_with(Arc::new(postgres_store(&db).await), true).await
}

/// One HTTP exchange with the service.
async fn send(
    h: &Harness,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (StatusCode, http::HeaderMap, Value) {
    let mut request = Request::builder().method(method).uri(path);
    // Every HTTP/1.1 client sends Host.
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request = request.header("host", "127.0.0.1:8080");
    }
    // A POST says its body is JSON, as MCP clients do.
    if method == "POST"
        && !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        request = request.header("content-type", "application/json");
    }
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = h
        .service
        .handle(request.body(Full::new(Bytes::from(body))).unwrap())
        .await;
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    (status, headers, value)
}

/// A legacy MCP session for a token.
struct Session<'a> {
    h: &'a Harness,
    token: &'static str,
    id: String,
    next: i64,
}

impl<'a> Session<'a> {
    async fn open(h: &'a Harness, token: &'static str) -> Session<'a> {
        let auth = format!("Bearer {token}");
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        let (status, headers, body) = send(
            h,
            "POST",
            "/mcp",
            &[
                ("authorization", &auth),
                ("accept", "application/json, text/event-stream"),
            ],
            serde_json::to_vec(&init).unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["result"]["protocolVersion"], "2025-11-25");
        let id = headers
            .get("mcp-session-id")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let session = Session {
            h,
            token,
            id,
            next: 1,
        };
        let (status, _, _) = session
            .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        session
    }

    async fn post(&self, message: Value) -> (StatusCode, http::HeaderMap, Value) {
        let auth = format!("Bearer {}", self.token);
        let headers = [
            ("authorization", auth.as_str()),
            ("mcp-session-id", self.id.as_str()),
            ("mcp-protocol-version", "2025-11-25"),
            ("accept", "application/json, text/event-stream"),
        ];
        send(
            self.h,
            "POST",
            "/mcp",
            &headers,
            serde_json::to_vec(&message).unwrap(),
        )
        .await
    }

    async fn rpc(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let (status, _, body) = self
            .post(json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    async fn call(&mut self, tool: &str, arguments: Value, confirmation: Option<&str>) -> Value {
        let mut params = json!({"name": tool, "arguments": arguments});
        if let Some(id) = confirmation {
            params["_meta"] = json!({"confirmation_id": id});
        }
        let body = self.rpc("tools/call", params).await;
        body.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("no result: {body}"))
    }
}

async fn rest(
    h: &Harness,
    token: &str,
    method: &str,
    path: &str,
    body: Value,
) -> (StatusCode, Value) {
    let auth = format!("Bearer {token}");
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(&body).unwrap()
    };
    let (status, headers, value) = send(h, method, path, &[("authorization", &auth)], bytes).await;
    if !status.is_success() {
        assert_eq!(
            headers.get("content-type").unwrap(),
            "application/problem+json",
            "{value}"
        );
        assert_eq!(value["status"], status.as_u16());
    }
    (status, value)
}

fn held_id(result: &Value) -> String {
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["structuredContent"]["elicitation_required"], true,
        "{result}"
    );
    result["structuredContent"]["elicitation"]["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn approve(h: &Harness, id: &str, confirmed: bool) {
    let (status, body) = rest(
        h,
        HUMAN,
        "POST",
        &format!("/v1/mcp/elicitations/{id}/respond"),
        json!({"confirmed": confirmed}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["outcome"], "recorded");
}

macro_rules! router_tests {
    ($make:ident: $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name($make().await).await;
            }
        )+
    };
}

macro_rules! both_stores {
    ($($name:ident),+ $(,)?) => {
        mod memory_store {
            use super::memory;
            router_tests!(memory: $($name),+);
        }
        mod postgres_store {
            use super::postgres;
            router_tests!(postgres: $($name),+);
        }
    };
}

both_stores!(
    read_only_tool_forwards_through_the_gate,
    destructive_tool_without_confirmation_is_held,
    destructive_tool_with_confirmation_forwards,
    destructive_tool_declined_aborts_cleanly,
    a_decline_reaches_an_agent_that_calls_again_without_the_id_once,
    elicitation_poll_respond_validate_and_404,
    confirmation_for_other_arguments_or_tool_is_held_again,
    consumed_confirmation_cannot_be_replayed,
    another_callers_confirmation_is_held_again_and_its_rest_answer_is_404,
    token_without_respond_scope_gets_403,
    untrusted_modules_read_only_claim_is_gated,
    modern_era_holds_and_forwards_with_result_type,
);

async fn read_only_tool_forwards_through_the_gate(h: Harness) {
    let mut s = Session::open(&h, AGENT).await;
    let result = s.call("test__read", json!({"path": "/a"}), None).await;
    assert_eq!(result["content"][0]["text"], "read /a");
    assert_eq!(h.calls.read.load(Ordering::SeqCst), 1);
    let (_, listed) = rest(
        &h,
        HUMAN,
        "GET",
        "/v1/mcp/elicitations?status=all",
        Value::Null,
    )
    .await;
    assert_eq!(
        listed["elicitations"],
        json!([]),
        "a non-gated call never touches the store"
    );
    let tools = s.rpc("tools/list", json!({})).await;
    let read = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "test__read")
        .unwrap()
        .clone();
    assert_eq!(
        read["x-extra"],
        json!({"kept": true}),
        "tool objects pass through losslessly"
    );
}

async fn destructive_tool_without_confirmation_is_held(h: Harness) {
    let mut s = Session::open(&h, AGENT).await;
    let result = s
        .call("test__delete", json!({"path": "/important"}), None)
        .await;
    let id = held_id(&result);
    let elicitation = &result["structuredContent"]["elicitation"];
    assert_eq!(elicitation["type"], "confirmation");
    assert_eq!(
        elicitation["response_schema"]["required"],
        json!(["confirmed"])
    );
    assert!(elicitation["expires_at"].is_string());
    assert_eq!(
        h.calls.delete.load(Ordering::SeqCst),
        0,
        "held, not forwarded"
    );
    let (status, pending) = rest(&h, HUMAN, "GET", "/v1/mcp/elicitations", Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(pending["elicitations"][0]["id"], id.as_str());
    assert_eq!(pending["elicitations"][0]["tool"], "test__delete");
    assert_eq!(
        pending["elicitations"][0]["arguments"],
        json!({"path": "/important"})
    );
    // Calling again with the pending id returns the same held elicitation, not a new one.
    let again = s
        .call("test__delete", json!({"path": "/important"}), Some(&id))
        .await;
    assert_eq!(held_id(&again), id);
}

async fn destructive_tool_with_confirmation_forwards(h: Harness) {
    let mut s = Session::open(&h, AGENT).await;
    let id = held_id(
        &s.call("test__delete", json!({"path": "/tmp/x"}), None)
            .await,
    );
    approve(&h, &id, true).await;
    // Key order in the arguments does not matter; the values do.
    let result = s
        .call("test__delete", json!({"path": "/tmp/x"}), Some(&id))
        .await;
    assert_eq!(result["content"][0]["text"], "deleted /tmp/x", "{result}");
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 1);
    let (_, got) = rest(
        &h,
        HUMAN,
        "GET",
        &format!("/v1/mcp/elicitations/{id}"),
        Value::Null,
    )
    .await;
    assert!(got["consumed_at"].is_string(), "{got}");
}

async fn destructive_tool_declined_aborts_cleanly(h: Harness) {
    let mut s = Session::open(&h, AGENT).await;
    let id = held_id(
        &s.call("test__delete", json!({"path": "/tmp/x"}), None)
            .await,
    );
    approve(&h, &id, false).await;
    let result = s
        .call("test__delete", json!({"path": "/tmp/x"}), Some(&id))
        .await;
    assert_eq!(result["isError"], true);
    assert_eq!(result["structuredContent"]["user_rejected"], true);
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 0);
}

/// Issue 45, item 2: after a decline, an identical call without `_meta.confirmation_id`
/// (all Claude Code, Codex or Gemini can send) was held anew: the agent never heard the
/// refusal or the person's note, and the person was asked again. It takes the declined
/// confirmation up once — the refusal with the note — and the call after is asked anew.
async fn a_decline_reaches_an_agent_that_calls_again_without_the_id_once(h: Harness) {
    let mut s = Session::open(&h, AGENT).await;
    let args = json!({"path": "/tmp/declined"});
    let id = held_id(&s.call("test__delete", args.clone(), None).await);
    let respond = format!("/v1/mcp/elicitations/{id}/respond");
    let (status, body) = rest(
        &h,
        HUMAN,
        "POST",
        &respond,
        json!({"confirmed": false, "note": "not that directory"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let told = s.call("test__delete", args.clone(), None).await;
    assert_eq!(told["isError"], true, "{told}");
    assert_eq!(told["structuredContent"]["user_rejected"], true, "{told}");
    assert!(
        told.to_string().contains("not that directory"),
        "the note: {told}"
    );
    // Told once: the same call again is a new question.
    let again = held_id(&s.call("test__delete", args.clone(), None).await);
    assert_ne!(again, id);
    // A call naming the declined confirmation still hears it.
    let named = s.call("test__delete", args, Some(&id)).await;
    assert_eq!(named["structuredContent"]["user_rejected"], true, "{named}");
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 0);
}

async fn elicitation_poll_respond_validate_and_404(h: Harness) {
    let mut s = Session::open(&h, AGENT).await;
    let id = held_id(&s.call("test__delete", json!({"path": "/p"}), None).await);
    let respond = format!("/v1/mcp/elicitations/{id}/respond");
    let (status, body) = rest(&h, HUMAN, "POST", &respond, json!({"confirmed": "yes"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["retries_left"], 2);
    assert_eq!(body["errors"][0]["field"], "confirmed");
    let (status, body) = rest(&h, HUMAN, "POST", &respond, json!({"confirmed": true})).await;
    assert_eq!(
        (status, body["outcome"].clone()),
        (StatusCode::OK, json!("recorded"))
    );
    assert_eq!(body["elicitation"]["status"], "responded");
    let (status, body) = rest(&h, HUMAN, "POST", &respond, json!({"confirmed": true})).await;
    assert_eq!(
        (status, body["outcome"].clone()),
        (StatusCode::OK, json!("already_recorded"))
    );
    let (status, _) = rest(&h, HUMAN, "POST", &respond, json!({"confirmed": false})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = rest(
        &h,
        HUMAN,
        "POST",
        &format!("/v1/mcp/elicitations/{id}/cancel"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, body) = rest(&h, HUMAN, "POST", &respond, Value::Null).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "an empty body is not JSON: {body}"
    );
    for missing in ["0190f7b2-0000-7000-8000-000000000000", "not-an-id"] {
        let (status, _) = rest(
            &h,
            HUMAN,
            "GET",
            &format!("/v1/mcp/elicitations/{missing}"),
            Value::Null,
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _) = rest(
            &h,
            HUMAN,
            "POST",
            &format!("/v1/mcp/elicitations/{missing}/respond"),
            json!({"confirmed": true}),
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    let (status, _) = rest(
        &h,
        HUMAN,
        "GET",
        "/v1/mcp/elicitations?status=bogus",
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Cancelling a pending one works and is then reported in-band to the agent.
    let other = held_id(&s.call("test__delete", json!({"path": "/q"}), None).await);
    let (status, body) = rest(
        &h,
        HUMAN,
        "POST",
        &format!("/v1/mcp/elicitations/{other}/cancel"),
        Value::Null,
    )
    .await;
    assert_eq!(
        (status, body["status"].clone()),
        (StatusCode::OK, json!("cancelled"))
    );
    let result = s
        .call("test__delete", json!({"path": "/q"}), Some(&other))
        .await;
    assert_eq!(result["structuredContent"]["confirmation_cancelled"], true);
}

async fn confirmation_for_other_arguments_or_tool_is_held_again(h: Harness) {
    let mut s = Session::open(&h, AGENT).await;
    let id = held_id(&s.call("test__delete", json!({"path": "/safe"}), None).await);
    approve(&h, &id, true).await;
    let other_args = s
        .call("test__delete", json!({"path": "/"}), Some(&id))
        .await;
    assert_ne!(held_id(&other_args), id, "other arguments: held anew");
    let other_tool = s
        .call("shady__read", json!({"path": "/safe"}), Some(&id))
        .await;
    assert_ne!(held_id(&other_tool), id, "another tool: held anew");
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 0);
    // The approved confirmation still works for its own call.
    let ok = s
        .call("test__delete", json!({"path": "/safe"}), Some(&id))
        .await;
    assert_eq!(ok["content"][0]["text"], "deleted /safe");
}

async fn consumed_confirmation_cannot_be_replayed(h: Harness) {
    let mut s = Session::open(&h, AGENT).await;
    let id = held_id(&s.call("test__delete", json!({"path": "/once"}), None).await);
    approve(&h, &id, true).await;
    s.call("test__delete", json!({"path": "/once"}), Some(&id))
        .await;
    let replay = s
        .call("test__delete", json!({"path": "/once"}), Some(&id))
        .await;
    assert_ne!(held_id(&replay), id);
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 1);
}

async fn another_callers_confirmation_is_held_again_and_its_rest_answer_is_404(h: Harness) {
    let mut alice = Session::open(&h, AGENT).await;
    let mut bob = Session::open(&h, OTHER_AGENT).await;
    let id = held_id(
        &alice
            .call("test__delete", json!({"path": "/a"}), None)
            .await,
    );
    let (status, _) = rest(
        &h,
        OTHER_AGENT,
        "POST",
        &format!("/v1/mcp/elicitations/{id}/respond"),
        json!({"confirmed": true}),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "not 403: no existence leak");
    let (status, _) = rest(
        &h,
        OTHER_AGENT,
        "GET",
        &format!("/v1/mcp/elicitations/{id}"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    approve(&h, &id, true).await;
    let stolen = bob
        .call("test__delete", json!({"path": "/a"}), Some(&id))
        .await;
    assert_ne!(held_id(&stolen), id, "bob cannot use alice's confirmation");
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 0);
    // Sessions are bound to their caller too.
    let (status, _, _) = send(
        &h,
        "POST",
        "/mcp",
        &[
            ("authorization", &format!("Bearer {OTHER_AGENT}")),
            ("mcp-session-id", &alice.id),
        ],
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 9, "method": "ping"})).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

async fn token_without_respond_scope_gets_403(h: Harness) {
    let mut s = Session::open(&h, AGENT).await;
    let id = held_id(&s.call("test__delete", json!({"path": "/a"}), None).await);
    let (status, body) = rest(
        &h,
        AGENT,
        "POST",
        &format!("/v1/mcp/elicitations/{id}/respond"),
        json!({"confirmed": true}),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "an agent cannot approve its own call: {body}"
    );
    let (status, _) = rest(
        &h,
        AGENT,
        "POST",
        &format!("/v1/mcp/elicitations/{id}/cancel"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = rest(
        &h,
        AGENT,
        "GET",
        &format!("/v1/mcp/elicitations/{id}"),
        Value::Null,
    )
    .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "reading one's own needs either scope"
    );
    // A human token cannot call tools.
    let mut human = Session::open(&h, HUMAN).await;
    human.next += 1;
    let (status, headers, _) = human
        .post(json!({"jsonrpc": "2.0", "id": 99, "method": "tools/list"}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        headers
            .get("www-authenticate")
            .unwrap()
            .to_str()
            .unwrap()
            .contains("insufficient_scope")
    );
}

async fn untrusted_modules_read_only_claim_is_gated(h: Harness) {
    let mut s = Session::open(&h, AGENT).await;
    let result = s.call("shady__read", json!({}), None).await;
    held_id(&result);
}

fn modern_headers<'a>(
    method: &'a str,
    name: Option<&'a str>,
    auth: &'a str,
) -> Vec<(&'a str, &'a str)> {
    let mut headers = vec![
        ("authorization", auth),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
        ("accept", "application/json, text/event-stream"),
    ];
    if let Some(name) = name {
        headers.push(("mcp-name", name));
    }
    headers
}

fn modern_body(id: i64, method: &str, mut params: Value) -> Vec<u8> {
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .unwrap()
}

async fn modern_era_holds_and_forwards_with_result_type(h: Harness) {
    let auth = format!("Bearer {AGENT}");
    let (status, _, discover) = send(
        &h,
        "POST",
        "/mcp",
        &modern_headers("server/discover", None, &auth),
        modern_body(1, "server/discover", json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{discover}");
    assert_eq!(
        discover["result"]["supportedVersions"],
        json!(["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"]),
        "every version served, the legacy ones through initialize"
    );
    assert_eq!(discover["result"]["resultType"], "complete");
    let (_, _, list) = send(
        &h,
        "POST",
        "/mcp",
        &modern_headers("tools/list", None, &auth),
        modern_body(2, "tools/list", json!({})),
    )
    .await;
    assert_eq!(list["result"]["cacheScope"], "private");
    assert!(list["result"]["ttlMs"].is_number());
    let call = |id: i64, confirmation: Option<String>| {
        let mut params = json!({"name": "test__delete", "arguments": {"path": "/m"}});
        if let Some(c) = confirmation {
            params["_meta"] = json!({"confirmation_id": c});
        }
        modern_body(id, "tools/call", params)
    };
    let (status, _, held) = send(
        &h,
        "POST",
        "/mcp",
        &modern_headers("tools/call", Some("test__delete"), &auth),
        call(3, None),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{held}");
    assert_eq!(held["result"]["resultType"], "complete");
    let id = held_id(&held["result"]);
    approve(&h, &id, true).await;
    let (_, _, done) = send(
        &h,
        "POST",
        "/mcp",
        &modern_headers("tools/call", Some("test__delete"), &auth),
        call(4, Some(id)),
    )
    .await;
    assert_eq!(done["result"]["content"][0]["text"], "deleted /m", "{done}");
    assert_eq!(done["result"]["resultType"], "complete");
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 1);
}

// ---- protocol edge cases (memory store) ----

#[tokio::test]
async fn unknown_tool_is_invalid_params() {
    let h = memory().await;
    let mut s = Session::open(&h, AGENT).await;
    let body = s
        .rpc(
            "tools/call",
            json!({"name": "nope__nothing", "arguments": {}}),
        )
        .await;
    assert_eq!(body["error"]["code"], -32602, "{body}");
}

#[tokio::test]
async fn malformed_json_is_a_parse_error() {
    let h = memory().await;
    let (status, _, body) = send(
        &h,
        "POST",
        "/mcp",
        &[("authorization", &format!("Bearer {AGENT}"))],
        b"{\"jsonrpc\": ".to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], -32700);
}

#[tokio::test]
async fn oversize_body_is_413() {
    let h = memory().await;
    let big = vec![b' '; 65 * 1024];
    let (status, _, body) = send(
        &h,
        "POST",
        "/mcp",
        &[("authorization", &format!("Bearer {AGENT}"))],
        big,
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert_eq!(body["id"], Value::Null, "{body}");
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("65536 bytes"),
        "{body}"
    );
}

#[tokio::test]
async fn bad_origin_is_403_and_loopback_origin_is_fine() {
    let h = memory().await;
    let init = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})).unwrap();
    let auth = format!("Bearer {AGENT}");
    let (status, _, body) = send(
        &h,
        "POST",
        "/mcp",
        &[
            ("authorization", &auth),
            ("origin", "http://evil.example.com"),
        ],
        init.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["error"]["code"], -32001, "{body}");
    assert_eq!(body["error"]["message"], "origin not allowed", "{body}");
    let (status, _, _) = send(
        &h,
        "POST",
        "/mcp",
        &[
            ("authorization", &auth),
            ("origin", "http://localhost:6274"),
        ],
        init,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn unknown_session_is_404_and_missing_session_is_400() {
    let h = memory().await;
    let auth = format!("Bearer {AGENT}");
    let ping = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).unwrap();
    let (status, _, body) = send(
        &h,
        "POST",
        "/mcp",
        &[("authorization", &auth), ("mcp-session-id", "feedface")],
        ping.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("session not found"),
        "{body}"
    );
    let (status, _, body) = send(
        &h,
        "POST",
        "/mcp",
        &[("authorization", &auth)],
        ping.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("MCP-Session-Id"),
        "{body}"
    );
    let s = Session::open(&h, AGENT).await;
    let (status, _, _) = send(
        &h,
        "DELETE",
        "/mcp",
        &[("authorization", &auth), ("mcp-session-id", &s.id)],
        Vec::new(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = s
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a deleted session is gone");
}

/// The legacy sessions held in memory, as `/metrics` says.
fn sessions_held(h: &Harness) -> String {
    h.service
        .metrics_text()
        .lines()
        .find(|l| l.starts_with("mcp_gateway_sessions "))
        .unwrap_or_default()
        .to_owned()
}

/// A legacy session idle past `session_idle_timeout` leaves this instance's memory but opens
/// again from its id; `session_max_age` after its `initialize` it ends however it was used.
#[tokio::test]
async fn a_legacy_session_idle_too_long_opens_again_and_one_past_its_age_is_gone() {
    let clock = Arc::new(ManualClock::stopped_now());
    let config = ServiceConfig {
        session_idle_timeout: Duration::from_secs(60),
        session_max_age: Duration::from_secs(3600),
        clock: clock.clone(),
        ..ServiceConfig::default()
    };
    let store = Arc::new(MemoryStore::default());
    let h = harness_configured(store, false, RequestStates::ephemeral(), config).await;
    let ping = |id: i64| json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
    let first = Session::open(&h, AGENT).await;
    assert_eq!(sessions_held(&h), "mcp_gateway_sessions 1");
    // Idle past the timeout: a new session makes room by dropping it from memory…
    clock.advance_std(Duration::from_secs(61));
    let second = Session::open(&h, AGENT).await;
    assert_eq!(
        sessions_held(&h),
        "mcp_gateway_sessions 1",
        "the idle one left"
    );
    // …and it opens again from its id when it comes back.
    let (status, _, body) = first.post(ping(1)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(sessions_held(&h), "mcp_gateway_sessions 2");
    // Used all along, a session still ends at its age (the first is 3,602 s old at the end).
    for _ in 0..59 {
        clock.advance_std(Duration::from_secs(59));
        let (status, _, body) = first.post(ping(2)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    clock.advance_std(Duration::from_secs(60));
    let (status, _, body) = first.post(ping(3)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "past its age: {body}");
    let (status, _, body) = second.post(ping(4)).await;
    assert_eq!(status, StatusCode::OK, "the younger one lives on: {body}");
}

#[tokio::test]
async fn legacy_session_accepts_the_2025_03_26_header_and_refuses_nonsense() {
    let h = memory().await;
    let s = Session::open(&h, AGENT).await;
    let auth = format!("Bearer {AGENT}");
    let ping = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).unwrap();
    let (status, _, body) = send(
        &h,
        "POST",
        "/mcp",
        &[
            ("authorization", &auth),
            ("mcp-session-id", &s.id),
            ("mcp-protocol-version", "2025-03-26"),
        ],
        ping.clone(),
    )
    .await;
    assert_eq!(
        (status, body["result"].clone()),
        (StatusCode::OK, json!({}))
    );
    let (status, _, _) = send(
        &h,
        "POST",
        "/mcp",
        &[
            ("authorization", &auth),
            ("mcp-session-id", &s.id),
            ("mcp-protocol-version", "1999-01-01"),
        ],
        ping,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn modern_mismatched_mcp_name_is_400_header_mismatch() {
    let h = memory().await;
    let auth = format!("Bearer {AGENT}");
    let body = modern_body(
        1,
        "tools/call",
        json!({"name": "test__read", "arguments": {}}),
    );
    let (status, _, reply) = send(
        &h,
        "POST",
        "/mcp",
        &modern_headers("tools/call", Some("test__delete"), &auth),
        body.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(reply["error"]["code"], -32020);
    let (status, _, reply) = send(
        &h,
        "POST",
        "/mcp",
        &modern_headers("tools/list", Some("test__read"), &auth),
        body,
    )
    .await;
    assert_eq!(
        (status, reply["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(-32020)),
        "Mcp-Method disagrees"
    );
    assert_eq!(h.calls.read.load(Ordering::SeqCst), 0);
}

/// A proxy in front might route on one copy of a header and the gateway check another: each
/// of the three is refused when sent twice, even with the same value twice.
#[tokio::test]
async fn modern_headers_sent_twice_are_400_header_mismatch() {
    let h = memory().await;
    let auth = format!("Bearer {AGENT}");
    let body = modern_body(
        1,
        "tools/call",
        json!({"name": "test__read", "arguments": {}}),
    );
    for (name, value) in [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "test__read"),
        ("mcp-name", "test__delete"),
    ] {
        let mut headers = modern_headers("tools/call", Some("test__read"), &auth);
        headers.push((name, value));
        let (status, _, reply) = send(&h, "POST", "/mcp", &headers, body.clone()).await;
        assert_eq!(
            (status, reply["error"]["code"].clone()),
            (StatusCode::BAD_REQUEST, json!(-32020)),
            "{name}: {value} twice"
        );
    }
    assert_eq!(h.calls.read.load(Ordering::SeqCst), 0);
    let once = modern_headers("tools/call", Some("test__read"), &auth);
    let (status, _, _) = send(&h, "POST", "/mcp", &once, body).await;
    assert_eq!(status, StatusCode::OK, "each once: the call goes through");
    assert_eq!(h.calls.read.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn modern_version_and_meta_errors_use_the_modern_codes() {
    let h = memory().await;
    let auth = format!("Bearer {AGENT}");
    let mut body: Value =
        serde_json::from_slice(&modern_body(1, "server/discover", json!({}))).unwrap();
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
    let mut headers = modern_headers("server/discover", None, &auth);
    headers[1] = ("mcp-protocol-version", "1900-01-01");
    let (status, _, reply) = send(
        &h,
        "POST",
        "/mcp",
        &headers,
        serde_json::to_vec(&body).unwrap(),
    )
    .await;
    assert_eq!(
        (status, reply["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(-32022))
    );
    assert_eq!(
        reply["error"]["data"]["supported"],
        json!(["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"])
    );
    let no_caps = json!({"jsonrpc": "2.0", "id": 2, "method": "server/discover", "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
    let (status, _, reply) = send(
        &h,
        "POST",
        "/mcp",
        &modern_headers("server/discover", None, &auth),
        serde_json::to_vec(&no_caps).unwrap(),
    )
    .await;
    assert_eq!(
        (status, reply["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(-32602))
    );
    let (status, _, reply) = send(
        &h,
        "POST",
        "/mcp",
        &modern_headers("ping", None, &auth),
        modern_body(3, "ping", json!({})),
    )
    .await;
    assert_eq!(
        (status, reply["error"]["code"].clone()),
        (StatusCode::NOT_FOUND, json!(-32601))
    );
}

#[tokio::test]
async fn missing_or_unknown_token_is_401_with_a_challenge() {
    let h = memory().await;
    for auth in [None, Some("Bearer wrong")] {
        let headers: Vec<(&str, &str)> =
            auth.map(|a| vec![("authorization", a)]).unwrap_or_default();
        let (status, response_headers, body) =
            send(&h, "POST", "/mcp", &headers, b"{}".to_vec()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(body["error"]["code"], -32001, "{body}");
        assert_eq!(
            body["error"]["message"], "authentication required",
            "{body}"
        );
        assert!(
            response_headers
                .get("www-authenticate")
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("Bearer")
        );
        let (status, _, problem) =
            send(&h, "GET", "/v1/mcp/elicitations", &headers, Vec::new()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(problem["status"], 401);
    }
}

#[tokio::test]
async fn get_on_the_endpoint_is_405_and_unknown_paths_are_404() {
    let h = memory().await;
    let auth = format!("Bearer {AGENT}");
    let (status, headers, body) =
        send(&h, "GET", "/mcp", &[("authorization", &auth)], Vec::new()).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(headers.get("allow").is_some());
    assert_eq!(body["error"]["code"], -32601, "{body}");
    let (status, _, body) = send(&h, "GET", "/nope", &[("authorization", &auth)], Vec::new()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], -32601, "{body}");
    // The gateway's own address tells a newcomer where things are (issue 45, item 7).
    let (status, _, body) = send(&h, "GET", "/", &[], Vec::new()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (body["mcp"].clone(), body["approvals"].clone()),
        (json!("/mcp"), json!("/approvals"))
    );
}

#[tokio::test]
async fn a_durable_store_refuses_to_gate_for_an_unauthenticated_caller() {
    let calls = Arc::new(Calls::default());
    let registry = Registry::start(vec![ModuleSpec {
        isolation: None,
        name: "test".into(),
        prefix: "test".into(),
        trust_annotations: true,
        module: Arc::new(test_module(&calls)),
    }])
    .await
    .unwrap();
    let gateway = Arc::new(Gateway::new(
        registry,
        Arc::new(MemoryStore::default()),
        GatePolicy::default(),
        true,
    ));
    let h = Harness {
        service: Arc::new(McpService::new(
            gateway,
            Auth::none(),
            ServiceConfig::default(),
        )),
        calls,
    };
    let init = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}}})).unwrap();
    let (_, headers, _) = send(&h, "POST", "/mcp", &[], init).await;
    let session = headers
        .get("mcp-session-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let call = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "test__delete", "arguments": {}}})).unwrap();
    let (_, _, body) = send(&h, "POST", "/mcp", &[("mcp-session-id", &session)], call).await;
    assert_eq!(body["result"]["isError"], true);
    assert_eq!(
        body["result"]["structuredContent"]["gate_unavailable"],
        true
    );
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 0);
}

// ---- native confirmation: modern multi round-trip and legacy SSE ----

const ELICIT_FORM: &str = r#"{"elicitation": {"form": {}}}"#;

/// A modern `tools/call` (or retry) with the given capabilities; the whole JSON-RPC answer.
async fn modern_call(
    h: &Harness,
    token: &str,
    id: i64,
    tool: &str,
    arguments: Value,
    extra: Value,
    capabilities: &str,
) -> (StatusCode, Value) {
    let auth = format!("Bearer {token}");
    let mut params = json!({"name": tool, "arguments": arguments});
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            params[k] = v;
        }
    }
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
        serde_json::from_str(capabilities).unwrap();
    let body = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}),
    )
    .unwrap();
    let (status, _, reply) = send(
        h,
        "POST",
        "/mcp",
        &modern_headers("tools/call", Some(tool), &auth),
        body,
    )
    .await;
    (status, reply)
}

fn input_request(reply: &Value) -> (String, Value) {
    let result = &reply["result"];
    assert_eq!(result["resultType"], "input_required", "{reply}");
    let ask = &result["inputRequests"]["confirm"];
    assert_eq!(ask["method"], "elicitation/create");
    assert_eq!(ask["params"]["mode"], "form");
    assert_eq!(
        ask["params"]["requestedSchema"]["required"],
        json!(["confirmed"])
    );
    (
        result["requestState"].as_str().unwrap().to_owned(),
        ask["params"].clone(),
    )
}

fn retry(state: &str, answer: Value) -> Value {
    json!({"requestState": state, "inputResponses": {"confirm": answer}})
}

async fn modern_client_with_elicitation_confirms_in_band(h: Harness) {
    let args = json!({"path": "/mrtr"});
    let (_, first) = modern_call(
        &h,
        CLIENT,
        1,
        "test__delete",
        args.clone(),
        json!({}),
        ELICIT_FORM,
    )
    .await;
    let (state, ask) = input_request(&first);
    assert!(
        ask["message"].as_str().unwrap().contains("test__delete")
            && ask["message"].as_str().unwrap().contains("/mrtr"),
        "{ask}"
    );
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 0);
    // The same confirmation is visible to the REST API.
    let (_, pending) = rest(&h, HUMAN, "GET", "/v1/mcp/elicitations", Value::Null).await;
    assert_eq!(pending["elicitations"].as_array().unwrap().len(), 1);
    let (status, done) = modern_call(
        &h,
        CLIENT,
        2,
        "test__delete",
        args.clone(),
        retry(
            &state,
            json!({"action": "accept", "content": {"confirmed": true}}),
        ),
        ELICIT_FORM,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["result"]["resultType"], "complete");
    assert_eq!(
        done["result"]["content"][0]["text"], "deleted /mrtr",
        "{done}"
    );
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 1);

    // Decline: the call is refused for good.
    let (_, first) = modern_call(
        &h,
        CLIENT,
        3,
        "test__delete",
        args.clone(),
        json!({}),
        ELICIT_FORM,
    )
    .await;
    let (state, _) = input_request(&first);
    let (_, done) = modern_call(
        &h,
        CLIENT,
        4,
        "test__delete",
        args.clone(),
        retry(&state, json!({"action": "decline"})),
        ELICIT_FORM,
    )
    .await;
    assert_eq!(
        done["result"]["structuredContent"]["user_rejected"], true,
        "{done}"
    );
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 1);

    // Cancel: the client's user dismissed the question without choosing (a headless client
    // answers so at once). The confirmation stays pending for a person elsewhere; the agent
    // gets the held result, and its plain re-call runs once the person approved.
    let dismissed_args = json!({"path": "/dismissed"});
    let (_, first) = modern_call(
        &h,
        CLIENT,
        5,
        "test__delete",
        dismissed_args.clone(),
        json!({}),
        ELICIT_FORM,
    )
    .await;
    let (state, _) = input_request(&first);
    let (_, held) = modern_call(
        &h,
        CLIENT,
        6,
        "test__delete",
        dismissed_args.clone(),
        retry(&state, json!({"action": "cancel"})),
        ELICIT_FORM,
    )
    .await;
    assert_eq!(held["result"]["resultType"], "complete", "{held}");
    let id = held_id(&held["result"]);
    let (_, pending) = rest(&h, HUMAN, "GET", "/v1/mcp/elicitations", Value::Null).await;
    assert!(
        pending["elicitations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["id"] == id.as_str() && e["status"] == "pending"),
        "still pending for the page: {pending}"
    );
    approve(&h, &id, true).await;
    let (_, ran) = modern_call(
        &h,
        CLIENT,
        7,
        "test__delete",
        dismissed_args.clone(),
        json!({}),
        ELICIT_FORM,
    )
    .await;
    assert_eq!(
        ran["result"]["content"][0]["text"], "deleted /dismissed",
        "an identical re-call redeems the approval: {ran}"
    );
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 2);

    // An invalid answer is asked again, not failed.
    let (_, first) = modern_call(
        &h,
        CLIENT,
        5,
        "test__delete",
        args.clone(),
        json!({}),
        ELICIT_FORM,
    )
    .await;
    let (state, _) = input_request(&first);
    let (_, again) = modern_call(
        &h,
        CLIENT,
        6,
        "test__delete",
        args.clone(),
        retry(
            &state,
            json!({"action": "accept", "content": {"confirmed": "yes"}}),
        ),
        ELICIT_FORM,
    )
    .await;
    input_request(&again);
}

async fn modern_request_state_is_verified_and_single_use(h: Harness) {
    let args = json!({"path": "/s"});
    let (_, first) = modern_call(
        &h,
        CLIENT,
        1,
        "test__delete",
        args.clone(),
        json!({}),
        ELICIT_FORM,
    )
    .await;
    let (state, _) = input_request(&first);
    let yes = json!({"action": "accept", "content": {"confirmed": true}});
    let mut tampered = state.clone().into_bytes();
    let at = tampered.len() - 3;
    tampered[at] = if tampered[at] == b'x' { b'y' } else { b'x' };
    let tampered = String::from_utf8(tampered).unwrap();
    let refused = [
        ("tampered", CLIENT, args.clone(), tampered.as_str()),
        (
            "other arguments",
            CLIENT,
            json!({"path": "/other"}),
            state.as_str(),
        ),
        ("another caller", OTHER_AGENT, args.clone(), state.as_str()),
        (
            "not a state",
            CLIENT,
            args.clone(),
            "eyJsb2NhdGlvbiI6Ik5ldyBZb3JrIn0",
        ),
    ];
    // An agent token of the same subject may not answer at all (and does not spend the state).
    let (status, _) = modern_call(
        &h,
        AGENT,
        2,
        "test__delete",
        args.clone(),
        retry(&state, yes.clone()),
        ELICIT_FORM,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    for (why, token, arguments, state) in refused {
        let (status, reply) = modern_call(
            &h,
            token,
            2,
            "test__delete",
            arguments,
            retry(state, yes.clone()),
            ELICIT_FORM,
        )
        .await;
        assert_eq!(
            (status, reply["error"]["code"].clone()),
            (StatusCode::BAD_REQUEST, json!(-32602)),
            "{why}: {reply}"
        );
    }
    assert_eq!(
        h.calls.delete.load(Ordering::SeqCst),
        0,
        "nothing forwarded on a refused state"
    );
    let (_, done) = modern_call(
        &h,
        CLIENT,
        3,
        "test__delete",
        args.clone(),
        retry(&state, yes.clone()),
        ELICIT_FORM,
    )
    .await;
    assert_eq!(done["result"]["content"][0]["text"], "deleted /s", "{done}");
    let (status, replay) = modern_call(
        &h,
        CLIENT,
        4,
        "test__delete",
        args.clone(),
        retry(&state, yes),
        ELICIT_FORM,
    )
    .await;
    assert_eq!(
        (status, replay["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(-32602)),
        "a state is used once: {replay}"
    );
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 1);
}

async fn modern_retry_without_answers_uses_the_rest_answer(h: Harness) {
    let args = json!({"path": "/oob"});
    let (_, first) = modern_call(
        &h,
        CLIENT,
        1,
        "test__delete",
        args.clone(),
        json!({}),
        ELICIT_FORM,
    )
    .await;
    let (state, _) = input_request(&first);
    let (_, pending) = rest(&h, HUMAN, "GET", "/v1/mcp/elicitations", Value::Null).await;
    approve(&h, pending["elicitations"][0]["id"].as_str().unwrap(), true).await;
    let (_, done) = modern_call(
        &h,
        CLIENT,
        2,
        "test__delete",
        args,
        json!({"requestState": state}),
        ELICIT_FORM,
    )
    .await;
    assert_eq!(
        done["result"]["content"][0]["text"], "deleted /oob",
        "{done}"
    );
}

async fn modern_client_without_form_elicitation_gets_the_held_result(h: Harness) {
    let (_, reply) = modern_call(
        &h,
        CLIENT,
        1,
        "test__delete",
        json!({"path": "/h"}),
        json!({}),
        "{}",
    )
    .await;
    assert_eq!(reply["result"]["resultType"], "complete");
    let id = held_id(&reply["result"]);
    // SEP-2643: the denial names the confirmation, and the page where a person approves it
    // (the gateway knows its address: a loopback Host).
    let denial = &reply["result"]["_meta"]["io.modelcontextprotocol/authorization"];
    assert_eq!(denial["authorizationContextId"], json!(id), "{reply}");
    assert_eq!(
        denial["remediationHints"][1],
        json!({"type": "url", "url": format!("http://127.0.0.1:8080/approvals/e/{id}")}),
        "{reply}"
    );
    // A URL-mode client is sent to the approvals page instead (tests/it/approvals.rs).
    let (_, reply) = modern_call(
        &h,
        CLIENT,
        2,
        "test__delete",
        json!({"path": "/h"}),
        json!({}),
        r#"{"elicitation": {"url": {}}}"#,
    )
    .await;
    assert_eq!(reply["result"]["resultType"], "input_required", "{reply}");
    assert_eq!(
        reply["result"]["inputRequests"]["confirm"]["params"]["mode"],
        "url"
    );
}

/// Reads SSE events from a streaming response until `want` of them arrived.
struct EventReader {
    body: mcp_http::service::Body,
    parser: mcp_wire::sse::Parser,
    ready: std::collections::VecDeque<Value>,
}

impl EventReader {
    async fn next(&mut self) -> Value {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return event;
            }
            let frame = tokio::time::timeout(std::time::Duration::from_secs(30), self.body.frame())
                .await
                .expect("an event within 30 s")
                .expect("the stream is open")
                .unwrap();
            if let Some(data) = frame.data_ref() {
                for event in self.parser.feed(data).unwrap() {
                    self.ready.push_back(serde_json::from_str(&event).unwrap());
                }
            }
        }
    }
}

async fn open_eliciting_session<'a>(h: &'a Harness, token: &'static str) -> Session<'a> {
    let auth = format!("Bearer {token}");
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "t", "version": "1"}}});
    let (_, headers, _) = send(
        h,
        "POST",
        "/mcp",
        &[("authorization", &auth)],
        serde_json::to_vec(&init).unwrap(),
    )
    .await;
    let id = headers
        .get("mcp-session-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    Session {
        h,
        token,
        id,
        next: 10,
    }
}

async fn stream_call(s: &Session<'_>, tool: &str, arguments: Value) -> EventReader {
    let auth = format!("Bearer {}", s.token);
    let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})).unwrap();
    let request = Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("authorization", auth)
        .header("mcp-session-id", &s.id)
        .header("accept", "application/json, text/event-stream")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = s.h.service.handle(request).await;
    assert_eq!(
        response.headers().get("content-type").unwrap(),
        "text/event-stream"
    );
    EventReader {
        body: response.into_body(),
        parser: mcp_wire::sse::Parser::default(),
        ready: Default::default(),
    }
}

async fn legacy_client_with_elicitation_is_asked_over_sse(h: Harness) {
    let s = open_eliciting_session(&h, CLIENT).await;
    // Accept: the answer is POSTed back (202), then the result arrives on the same stream.
    let mut events = stream_call(&s, "test__delete", json!({"path": "/sse"})).await;
    let ask = events.next().await;
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    assert_eq!(
        ask["params"]["requestedSchema"]["properties"]["confirmed"]["type"],
        "boolean"
    );
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 0);
    let (status, _, _) = s.post(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"confirmed": true}}})).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let result = events.next().await;
    assert_eq!(result["id"], 77);
    assert_eq!(
        result["result"]["content"][0]["text"], "deleted /sse",
        "{result}"
    );
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 1);

    // Decline.
    let mut events = stream_call(&s, "test__delete", json!({"path": "/no"})).await;
    let ask = events.next().await;
    s.post(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "decline"}}))
        .await;
    assert_eq!(
        events.next().await["result"]["structuredContent"]["user_rejected"],
        true
    );

    // An answer through the REST API completes the waiting stream.
    let mut events = stream_call(&s, "test__delete", json!({"path": "/rest"})).await;
    let ask = events.next().await;
    let id = ask["id"]
        .as_str()
        .unwrap()
        .trim_start_matches("mcp-gateway-confirm-")
        .rsplit_once('-')
        .unwrap()
        .0
        .to_owned();
    approve(&h, &id, true).await;
    let result = events.next().await;
    assert_eq!(
        result["result"]["content"][0]["text"], "deleted /rest",
        "{result}"
    );
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 2);

    // A read-only tool is never asked about.
    let mut s = s;
    let read = s.call("test__read", json!({"path": "/r"}), None).await;
    assert_eq!(read["content"][0]["text"], "read /r");
}

/// Issue 48, item 5: the person answers after the stream has told the client it still waits
/// several times (here every 50 ms; 15 s by default). A client that sent a `progressToken`
/// hears rising `notifications/progress` meanwhile (so one that resets its request timeout
/// on progress keeps waiting however long the person takes), and the call runs once, after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_stream_tells_a_client_with_a_progress_token_until_the_person_answers() {
    let config = ServiceConfig {
        body_limit: 64 * 1024,
        stream_keep_alive: Duration::from_millis(50),
        ..ServiceConfig::default()
    };
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let h = harness_configured(store, false, RequestStates::ephemeral(), config).await;
    let s = open_eliciting_session(&h, CLIENT).await;
    let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
        "params": {"name": "test__delete", "arguments": {"path": "/slow"}, "_meta": {"progressToken": "p-1"}}}))
    .unwrap();
    let request = Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("authorization", format!("Bearer {CLIENT}"))
        .header("mcp-session-id", &s.id)
        .header("accept", "application/json, text/event-stream")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let mut events = EventReader {
        body: h.service.handle(request).await.into_body(),
        parser: mcp_wire::sse::Parser::default(),
        ready: Default::default(),
    };
    let ask = events.next().await;
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    let mut last = 0;
    for _ in 0..3 {
        let beat = events.next().await;
        assert_eq!(beat["method"], "notifications/progress", "{beat}");
        assert_eq!(beat["params"]["progressToken"], "p-1");
        let progress = beat["params"]["progress"].as_u64().unwrap();
        assert!(progress > last, "progress rises: {progress} after {last}");
        last = progress;
    }
    assert_eq!(
        h.calls.delete.load(Ordering::SeqCst),
        0,
        "nothing ran while waiting"
    );
    s.post(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"confirmed": true}}}))
        .await;
    let result = loop {
        let event = events.next().await;
        if event.get("id") == Some(&json!(77)) {
            break event;
        }
        assert_eq!(event["method"], "notifications/progress", "{event}");
    };
    assert_eq!(
        result["result"]["content"][0]["text"], "deleted /slow",
        "{result}"
    );
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 1);
}

/// Waits until the gateway has noticed that alice's streams ended.
async fn streams_closed(h: &Harness) {
    let alice = elicitation_store::Caller::new("alice", None).unwrap();
    for _ in 0..600 {
        if h.service.open_streams(&alice) == 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the gateway never noticed the client went away");
}

async fn legacy_disconnect_is_not_a_cancellation(h: Harness) {
    let alice = elicitation_store::Caller::new("alice", None).unwrap();
    let s = open_eliciting_session(&h, CLIENT).await;
    let mut events = stream_call(&s, "test__delete", json!({"path": "/gone"})).await;
    let ask = events.next().await;
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    assert_eq!(h.service.open_streams(&alice), 1);
    drop(events);
    // The gateway notices the disconnect (the stream's task ends)...
    streams_closed(&h).await;
    // ...and the confirmation is still pending: a person can still answer it.
    let (_, pending) = rest(&h, HUMAN, "GET", "/v1/mcp/elicitations", Value::Null).await;
    assert_eq!(pending["elicitations"][0]["status"], "pending", "{pending}");
    let id = pending["elicitations"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    approve(&h, &id, true).await;
    assert_eq!(
        h.calls.delete.load(Ordering::SeqCst),
        0,
        "nobody is left to forward the call to"
    );
}

/// A client declaring elicitation with a token that lacks `elicitations:respond` (an agent)
/// is never asked natively — it would be answering its own question — and cannot post an
/// answer either.
async fn an_agent_token_cannot_answer_its_own_confirmation_natively(h: Harness) {
    let (_, reply) = modern_call(
        &h,
        AGENT,
        1,
        "test__delete",
        json!({"path": "/self"}),
        json!({}),
        ELICIT_FORM,
    )
    .await;
    assert_eq!(reply["result"]["resultType"], "complete", "{reply}");
    held_id(&reply["result"]);
    let s = open_eliciting_session(&h, AGENT).await;
    let mut s = s;
    let held = s.call("test__delete", json!({"path": "/self"}), None).await;
    held_id(&held);
    let (status, _, _) = s
        .post(json!({"jsonrpc": "2.0", "id": "mcp-gateway-confirm-x-0", "result": {"action": "accept", "content": {"confirmed": true}}}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 0);
}

/// Arguments too long to show in one message are never approved from the message: the
/// client gets the held result (whose REST view shows every argument).
async fn arguments_too_long_to_show_are_not_asked_natively(h: Harness) {
    let huge = json!({"path": "/x", "content": "y".repeat(6000)});
    let (_, reply) = modern_call(&h, CLIENT, 1, "test__delete", huge, json!({}), ELICIT_FORM).await;
    let id = held_id(&reply["result"]);
    let (_, got) = rest(
        &h,
        HUMAN,
        "GET",
        &format!("/v1/mcp/elicitations/{id}"),
        Value::Null,
    )
    .await;
    assert_eq!(got["arguments"]["content"].as_str().unwrap().len(), 6000);
}

mod native_memory {
    use super::memory;
    router_tests!(memory:
        an_agent_token_cannot_answer_its_own_confirmation_natively,
        arguments_too_long_to_show_are_not_asked_natively,
        modern_client_with_elicitation_confirms_in_band,
        modern_request_state_is_verified_and_single_use,
        modern_retry_without_answers_uses_the_rest_answer,
        modern_client_without_form_elicitation_gets_the_held_result,
        legacy_client_with_elicitation_is_asked_over_sse,
        legacy_disconnect_is_not_a_cancellation,
    );
}

mod native_postgres {
    use super::postgres;
    router_tests!(postgres:
        modern_client_with_elicitation_confirms_in_band,
        modern_request_state_is_verified_and_single_use,
        legacy_client_with_elicitation_is_asked_over_sse,
    );
}

/// Two gateway instances on one PostgreSQL, sharing the state key: the retry lands on the
/// instance that did not issue the state, and a stream waiting on one completes from a REST
/// answer given to the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_postgres_share_confirmations() {
    let db = elicitation_store::test_support::TestDb::new().await;
    let a = harness_keyed(
        Arc::new(postgres_store(&db).await),
        true,
        RequestStates::new([5; 32]),
    )
    .await;
    let b = harness_keyed(
        Arc::new(postgres_store(&db).await),
        true,
        RequestStates::new([5; 32]),
    )
    .await;
    let args = json!({"path": "/twin"});
    let (_, first) = modern_call(
        &a,
        CLIENT,
        1,
        "test__delete",
        args.clone(),
        json!({}),
        ELICIT_FORM,
    )
    .await;
    let (state, _) = input_request(&first);
    let (_, done) = modern_call(
        &b,
        CLIENT,
        2,
        "test__delete",
        args,
        retry(
            &state,
            json!({"action": "accept", "content": {"confirmed": true}}),
        ),
        ELICIT_FORM,
    )
    .await;
    assert_eq!(
        done["result"]["content"][0]["text"], "deleted /twin",
        "{done}"
    );
    assert_eq!(
        (
            a.calls.delete.load(Ordering::SeqCst),
            b.calls.delete.load(Ordering::SeqCst)
        ),
        (0, 1)
    );

    let s = open_eliciting_session(&a, CLIENT).await;
    let mut events = stream_call(&s, "test__delete", json!({"path": "/across"})).await;
    let ask = events.next().await;
    let id = ask["id"]
        .as_str()
        .unwrap()
        .trim_start_matches("mcp-gateway-confirm-")
        .rsplit_once('-')
        .unwrap()
        .0
        .to_owned();
    approve(&b, &id, true).await;
    let result = events.next().await;
    assert_eq!(
        result["result"]["content"][0]["text"], "deleted /across",
        "{result}"
    );
}

/// Every row of every table of the schema, as JSON text: what a raw database dump holds.
async fn dump_every_table(db: &elicitation_store::test_support::TestDb) -> String {
    let admin = db.admin().await;
    let tables = admin
        .query(
            "SELECT quote_ident(table_name) FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
            &[],
        )
        .await
        .unwrap();
    assert!(tables.len() >= 2, "the schema has its tables");
    let mut dump = String::new();
    for table in tables {
        let name: String = table.get(0);
        for row in admin
            .query(&format!("SELECT row_to_json(t)::text FROM {name} t"), &[])
            .await
            .unwrap()
        {
            dump.push_str(&row.get::<_, String>(0));
            dump.push('\n');
        }
    }
    dump
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_argument_reaches_the_database_unsealed() {
    let db = elicitation_store::test_support::TestDb::new().await;
    // Calls are made twenty minutes in the past, so the sweeper (capped at the database's
    // clock) can expire the one left pending.
    let clock = Arc::new(elicitation_store::ManualClock::new(
        time::OffsetDateTime::now_utc() - time::Duration::minutes(20),
    ));
    let keys = KeyRing::parse("k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=").unwrap();
    let mut options = db.options(keys);
    options.pool_size = 2;
    options.clock = clock.clone();
    let store = Arc::new(PostgresStore::connect(options).await.unwrap());
    let h = harness_with(store.clone(), true).await;
    let mut s = Session::open(&h, AGENT).await;
    let marker = |what: &str| format!("MARKER-{what}-7f3a9c");

    // Approved and forwarded.
    let args = json!({"path": marker("approved"), "nested": {"text": marker("nested")}});
    let id = held_id(&s.call("test__delete", args.clone(), None).await);
    approve(&h, &id, true).await;
    let done = s.call("test__delete", args, Some(&id)).await;
    assert_ne!(done["isError"], true, "{done}");
    // Declined.
    let args = json!({"path": marker("declined")});
    let id = held_id(&s.call("test__delete", args.clone(), None).await);
    approve(&h, &id, false).await;
    let rejected = s.call("test__delete", args, Some(&id)).await;
    assert_eq!(rejected["structuredContent"]["user_rejected"], true);
    // Cancelled.
    let id = held_id(
        &s.call("test__delete", json!({"path": marker("cancelled")}), None)
            .await,
    );
    let (status, body) = rest(
        &h,
        HUMAN,
        "POST",
        &format!("/v1/mcp/elicitations/{id}/cancel"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Held and left to expire.
    let expiring = held_id(
        &s.call("test__delete", json!({"path": marker("expired")}), None)
            .await,
    );
    clock.advance(time::Duration::minutes(15));
    let expired = store
        .expire_due(elicitation_store::Clock::now(clock.as_ref()))
        .await
        .unwrap();
    assert!(
        expired
            .iter()
            .any(|e| e.elicitation.id.to_string() == expiring),
        "the held call expired"
    );
    // Still held, never answered.
    held_id(
        &s.call("test__delete", json!({"path": marker("pending")}), None)
            .await,
    );
    // The REST view shows the arguments to the person: the sealed copy opens.
    let (status, listed) = rest(
        &h,
        HUMAN,
        "GET",
        "/v1/mcp/elicitations?status=all",
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert!(listed.to_string().contains(&marker("pending")), "{listed}");

    let dump = dump_every_table(&db).await;
    assert!(
        dump.contains("tool_call_forwarded"),
        "the dump has the audit trail"
    );
    assert!(
        !dump.contains("MARKER-"),
        "an argument reached the database in clear:\n{dump}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_row_is_reported_alone_and_never_turns_an_answer_into_a_500() {
    let db = elicitation_store::test_support::TestDb::new().await;
    // A row sealed under a key that is later dropped from the ring cannot be opened.
    let old_key = KeyRing::parse("k0:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=").unwrap();
    let options = db.options(old_key);
    let old = PostgresStore::connect(options).await.unwrap();
    let alice = elicitation_store::Caller::new("alice", None).unwrap();
    let lost = old
        .create_confirmation(
            &alice,
            elicitation_store::ConfirmationRequest::new(
                "test__delete",
                gating_core::CallDigest::of(&json!({"name": "delete"})),
                json!({"path": "/old"}),
                "Delete?",
                time::Duration::minutes(10),
            ),
        )
        .await
        .unwrap()
        .elicitation
        .id
        .to_string();
    let h = harness_with(Arc::new(postgres_store(&db).await), true).await;
    let mut s = Session::open(&h, AGENT).await;
    let readable = held_id(&s.call("test__delete", json!({"path": "/new"}), None).await);

    let (status, listed) = rest(&h, HUMAN, "GET", "/v1/mcp/elicitations", Value::Null).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let items = listed["elicitations"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{listed}");
    let find = |id: &str| items.iter().find(|e| e["id"] == id).unwrap().clone();
    assert_eq!(find(&readable)["arguments"], json!({"path": "/new"}));
    let bad = find(&lost);
    assert_eq!(bad["unreadable"], true, "{bad}");
    assert!(
        bad["error_id"].as_str().is_some_and(|e| e.len() == 16),
        "{bad}"
    );
    assert!(
        !bad.to_string().contains("seal") && !bad.to_string().contains("key"),
        "no internals reach the client: {bad}"
    );

    let (status, one) = rest(
        &h,
        HUMAN,
        "GET",
        &format!("/v1/mcp/elicitations/{lost}"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one["unreadable"], true, "{one}");

    // The answer commits (the row's type and spec are in the clear); showing it afterwards
    // cannot, and that is reported without undoing the answer.
    let (status, answered) = rest(
        &h,
        HUMAN,
        "POST",
        &format!("/v1/mcp/elicitations/{lost}/respond"),
        json!({"confirmed": true}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answered}");
    assert_eq!(answered["outcome"], "recorded");
    assert_eq!(answered["elicitation"]["unreadable"], true, "{answered}");

    // And the gate fails closed on it: the call is held anew, never forwarded.
    let again = s
        .call("test__delete", json!({"path": "/old"}), Some(&lost))
        .await;
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 0, "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_auth_only_loopback_and_configured_hosts_are_served() {
    let registry = Registry::start(Vec::new()).await.unwrap();
    let gateway = Arc::new(Gateway::new(
        registry,
        Arc::new(MemoryStore::default()),
        GatePolicy::default(),
        false,
    ));
    let config = ServiceConfig {
        allowed_hosts: vec!["gw.internal".into()],
        ..ServiceConfig::default()
    };
    let h = Harness {
        service: Arc::new(McpService::new(gateway, Auth::none(), config)),
        calls: Arc::new(Calls::default()),
    };
    let init = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}))
    .unwrap();
    // A DNS-rebinding page: the browser sends the attacker's name as Host and no Origin.
    for host in [
        "rebind.attacker.example:8080",
        "rebind.attacker.example",
        "127.0.0.1.attacker.example",
        "localhost.attacker.example:8080",
        "10.0.0.5:8080",
    ] {
        for (method, path, body) in [
            ("GET", "/v1/mcp/elicitations?status=all", Vec::new()),
            ("POST", "/mcp", init.clone()),
            ("GET", "/healthz", Vec::new()),
        ] {
            let (status, _, body) = send(&h, method, path, &[("host", host)], body).await;
            assert_eq!(
                status,
                StatusCode::MISDIRECTED_REQUEST,
                "{host} {path}: {body}"
            );
        }
    }
    let hostless = Request::builder()
        .uri("/v1/mcp/elicitations")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let status = h.service.handle(hostless).await.status();
    assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "no Host at all");
    for host in [
        "127.0.0.1:8080",
        "localhost",
        "LOCALHOST:1",
        "[::1]:8080",
        "127.5.6.7",
        "gw.internal:8080",
    ] {
        let (status, _, body) = send(
            &h,
            "GET",
            "/v1/mcp/elicitations",
            &[("host", host)],
            Vec::new(),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{host}: {body}");
        let (status, _, body) = send(&h, "POST", "/mcp", &[("host", host)], init.clone()).await;
        assert_eq!(status, StatusCode::OK, "{host}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_its_stream_cap_a_caller_gets_the_held_result_instead_of_a_stream() {
    let config = ServiceConfig {
        max_streams_per_caller: 1,
        ..ServiceConfig::default()
    };
    let h = harness_configured(
        Arc::new(MemoryStore::default()),
        false,
        RequestStates::ephemeral(),
        config,
    )
    .await;
    let mut s = open_eliciting_session(&h, CLIENT).await;
    let mut first = stream_call(&s, "test__delete", json!({"path": "/one"})).await;
    assert_eq!(first.next().await["method"], "elicitation/create");
    // The first stream is still waiting for the person: a second would exceed the cap.
    let second = s.call("test__delete", json!({"path": "/two"}), None).await;
    held_id(&second);
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 0);
    // Once the first stream ends, the caller may stream again.
    drop(first);
    streams_closed(&h).await;
    let mut third = stream_call(&s, "test__delete", json!({"path": "/three"})).await;
    assert_eq!(third.next().await["method"], "elicitation/create");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_rule_naming_no_listed_tool_is_reported() {
    let calls = Arc::new(Calls::default());
    let registry = Registry::start(vec![ModuleSpec {
        isolation: None,
        name: "test".into(),
        prefix: "test".into(),
        trust_annotations: true,
        module: Arc::new(test_module(&calls)),
    }])
    .await
    .unwrap();
    let deny = |tool| gating_core::PolicyRule::new(tool, gating_core::GateMode::Deny);
    let policy = GatePolicy::default()
        .with_rule(deny("test__delete"))
        .with_rule(deny("test__delte"))
        .with_rule(deny("test__*"))
        .with_rule(deny("tset__*"));
    let gateway = Gateway::new(registry, Arc::new(MemoryStore::default()), policy, false);
    assert_eq!(
        gateway.unmatched_policy_rules(),
        [
            ("test__delte".to_owned(), gating_core::GateMode::Deny),
            ("tset__*".to_owned(), gating_core::GateMode::Deny)
        ],
        "the typos are reported, the real rules are not"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_refuses_a_cursor_it_never_gave_out() {
    let h = memory().await;
    let mut s = Session::open(&h, AGENT).await;
    let body = s.rpc("tools/list", json!({"cursor": "bogus"})).await;
    assert_eq!(body["error"]["code"], -32602, "{body}");
    let body = s.rpc("tools/list", json!({})).await;
    assert!(body["result"]["tools"].is_array(), "{body}");
    let (status, _, body) = send(
        &h,
        "POST",
        "/mcp",
        &modern_headers("tools/list", None, &format!("Bearer {AGENT}")),
        modern_body(3, "tools/list", json!({"cursor": "bogus"})),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(-32602)),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_with_names_mcp_does_not_allow_are_not_listed() {
    let tool = |name: &str| {
        InProcessTool::new(
            json!({"name": name, "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
            |_| Ok(text_result("ok", false)),
        )
    };
    let long = "x".repeat(129);
    let module = InProcessModule::new(
        "odd",
        vec![
            tool("fine.name-1"),
            tool("has space"),
            tool("ünïcode"),
            tool("rtl\u{202e}name"),
            tool(&long),
            tool(""),
        ],
    );
    let registry = Registry::start(vec![ModuleSpec {
        isolation: None,
        name: "odd".into(),
        prefix: "odd".into(),
        trust_annotations: true,
        module: Arc::new(module),
    }])
    .await
    .unwrap();
    let names: Vec<String> = registry
        .tools()
        .await
        .iter()
        .map(|t| t.qualified.clone())
        .collect();
    assert_eq!(names, ["odd__fine.name-1"]);
}

/// Two gateway instances on one PostgreSQL, sharing the seal keys: a session begun on A is
/// served by B; a person's answer to A's `elicitation/create` that reaches B completes A's
/// stream (B records it, A hears it through the store); a session ended on A is refused by B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_postgres_serve_one_session_and_one_answer() {
    let db = elicitation_store::test_support::TestDb::new().await;
    let config = || ServiceConfig {
        session_key: Some(mcp_http::sessions::SessionKey(vec![[9; 32]])),
        ..ServiceConfig::default()
    };
    let a = harness_configured(
        Arc::new(postgres_store(&db).await),
        true,
        RequestStates::ephemeral(),
        config(),
    )
    .await;
    let b = harness_configured(
        Arc::new(postgres_store(&db).await),
        true,
        RequestStates::ephemeral(),
        config(),
    )
    .await;
    let on_a = open_eliciting_session(&a, CLIENT).await;
    let mut on_b = Session {
        h: &b,
        token: CLIENT,
        id: on_a.id.clone(),
        next: 100,
    };
    let read = on_b.call("test__read", json!({"path": "/r"}), None).await;
    assert_eq!(
        read["content"][0]["text"], "read /r",
        "B serves A's session"
    );

    let mut events = stream_call(&on_a, "test__delete", json!({"path": "/x"})).await;
    let ask = events.next().await;
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    let (status, _, body) = on_b
        .post(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"confirmed": true}}}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let result = events.next().await;
    assert_eq!(
        result["result"]["content"][0]["text"], "deleted /x",
        "{result}"
    );
    assert_eq!(a.calls.delete.load(Ordering::SeqCst), 1, "run once, on A");
    assert_eq!(b.calls.delete.load(Ordering::SeqCst), 0);

    // Another caller cannot use the session on either instance.
    let bobs = format!("Bearer {OTHER_AGENT}");
    let list =
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).unwrap();
    for h in [&a, &b] {
        let (status, _, _) = send(
            h,
            "POST",
            "/mcp",
            &[("authorization", &bobs), ("mcp-session-id", &on_a.id)],
            list.clone(),
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }

    // A page sign-in made on A is served by B; signing out on B ends it on A too.
    let cookie = page_sign_in(&a).await;
    let (status, on_b_page) = approvals_page(&b, &cookie).await;
    assert_eq!(status, StatusCode::OK);
    assert!(on_b_page.contains("Sign out"), "B serves A's sign-in");
    let start = on_b_page.find("name=\"csrf\" value=\"").unwrap() + 19;
    let csrf = &on_b_page[start..start + on_b_page[start..].find('"').unwrap()];
    let (status, _, _) = send(
        &b,
        "POST",
        "/approvals/sign-out",
        &[
            ("cookie", &cookie),
            ("content-type", "application/x-www-form-urlencoded"),
            ("origin", "http://127.0.0.1:8080"),
        ],
        format!("csrf={csrf}").into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (_, on_a_page) = approvals_page(&a, &cookie).await;
        if on_a_page.contains("Sign in") && !on_a_page.contains("Sign out") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "A hears of the sign-out"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // Ended on A, refused by B (which held it in memory).
    let auth = format!("Bearer {CLIENT}");
    let (status, _, _) = send(
        &a,
        "DELETE",
        "/mcp",
        &[("authorization", &auth), ("mcp-session-id", &on_a.id)],
        Vec::new(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (status, _, _) = send(
            &b,
            "POST",
            "/mcp",
            &[("authorization", &auth), ("mcp-session-id", &on_a.id)],
            list.clone(),
        )
        .await;
        if status == StatusCode::NOT_FOUND {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "B hears the session ended"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // And an instance started after the end learns it from the store.
    let c = harness_configured(
        Arc::new(postgres_store(&db).await),
        true,
        RequestStates::ephemeral(),
        config(),
    )
    .await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (status, _, _) = send(
            &c,
            "POST",
            "/mcp",
            &[("authorization", &auth), ("mcp-session-id", &on_a.id)],
            list.clone(),
        )
        .await;
        if status == StatusCode::NOT_FOUND {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "C reads the ended session"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Signs in to the approvals page with the human's token; the cookie.
async fn page_sign_in(h: &Harness) -> String {
    let (status, headers, _) = send(
        h,
        "POST",
        "/approvals/sign-in",
        &[
            ("content-type", "application/x-www-form-urlencoded"),
            ("origin", "http://127.0.0.1:8080"),
        ],
        format!("token={HUMAN}").into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let set = headers["set-cookie"].to_str().unwrap().to_owned();
    set.split(';').next().unwrap().to_owned()
}

/// The approvals page with `cookie`: its status and HTML.
async fn approvals_page(h: &Harness, cookie: &str) -> (StatusCode, String) {
    let (status, _, body) = send(h, "GET", "/approvals", &[("cookie", cookie)], Vec::new()).await;
    (status, body.as_str().unwrap_or_default().to_owned())
}

/// Every path under `/v1/` is the REST API's: an unknown one is a 404 problem document, not
/// a JSON-RPC error (on today's main it was one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_path_under_v1_answers_a_problem_document() {
    let h = harness_with(Arc::new(MemoryStore::default()), false).await;
    for path in ["/v1/mcp/nothing-here", "/v1/other", "/v1/"] {
        // `rest` asserts the problem document's content type and status.
        let (status, body) = rest(&h, HUMAN, "GET", path, Value::Null).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert!(body.get("jsonrpc").is_none(), "{path}: {body}");
    }
}

/// Reloads `h` with the same modules and store under `policy`.
fn reload_with(h: &Harness, policy: GatePolicy) {
    let now = h.service.gateway();
    // The memory harness's fleet and audit trail keep nothing; its elicitations carry over.
    let gateway = Gateway::new(
        now.registry().clone(),
        Arc::new(MemoryStore::default()),
        policy,
        false,
    )
    .with_elicitations(now.store().clone());
    h.service.reload(Arc::new(gateway), auth());
}

fn denying_delete() -> GatePolicy {
    GatePolicy::default().with_rule(gating_core::PolicyRule::new(
        "test__delete",
        gating_core::GateMode::Deny,
    ))
}

/// A legacy call held on its stream when a reload denies its tool finishes as it began: the
/// person's answer releases it under the policy it was classified by. Calls that begin after
/// the reload are denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_finishes_under_the_configuration_it_began_with_across_a_reload() {
    let h = memory().await;
    let mut s = open_eliciting_session(&h, CLIENT).await;
    let mut events = stream_call(&s, "test__delete", json!({"path": "/straddle"})).await;
    let ask = events.next().await;
    assert_eq!(ask["method"], "elicitation/create", "{ask}");

    reload_with(&h, denying_delete());
    let denied = s
        .call("test__delete", json!({"path": "/after"}), None)
        .await;
    assert_eq!(
        denied["structuredContent"]["policy_denied"], true,
        "a call that begins after the reload is under the new policy: {denied}"
    );

    let (status, _, _) = s.post(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"confirmed": true}}})).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let result = events.next().await;
    assert_eq!(
        result["result"]["content"][0]["text"], "deleted /straddle",
        "the held call ends under the policy it was classified by: {result}"
    );
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 1);
}

/// In 2026-07-28 every round trip is a request of its own: a retry after a reload that denies
/// the tool is classified by the new policy and never forwarded, whatever its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_retry_after_a_reload_is_a_new_request_under_the_new_policy() {
    let h = memory().await;
    let args = json!({"path": "/mrtr-straddle"});
    let (_, first) = modern_call(
        &h,
        CLIENT,
        1,
        "test__delete",
        args.clone(),
        json!({}),
        ELICIT_FORM,
    )
    .await;
    let (state, _) = input_request(&first);
    reload_with(&h, denying_delete());
    let (_, retried) = modern_call(
        &h,
        CLIENT,
        2,
        "test__delete",
        args,
        retry(
            &state,
            json!({"action": "accept", "content": {"confirmed": true}}),
        ),
        ELICIT_FORM,
    )
    .await;
    assert_eq!(
        retried["result"]["structuredContent"]["policy_denied"], true,
        "{retried}"
    );
    assert_eq!(h.calls.delete.load(Ordering::SeqCst), 0);
}
