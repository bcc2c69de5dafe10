//! A module's messages about a call reach the client that made it, and the session's GET
//! stream carries what happens outside calls: the service driven in process, with a real
//! stdio module (`fixtures/chatty_module.py`) that talks during its calls.

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use elicitation_store::{ManualClock, MemoryStore};
use gating_core::GatePolicy;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use mcp_auth::{Auth, SCOPE_RESPOND, SCOPE_TOOLS_CALL, TokenGrant, token_sha256};
use mcp_gate::Gateway;
use mcp_http::service::{Body, McpService, ServiceConfig};
use mcp_upstream::http::{HttpConfig, HttpModule};
use mcp_upstream::registry::{ModuleSpec, Registry};
use mcp_upstream::stdio::{StdioConfig, StdioModule};
use serde_json::{Value, json};

/// May call tools, not answer the gate's confirmations.
const AGENT: &str = "agent-token";
/// May answer confirmations.
const HUMAN: &str = "human-token";
/// Another caller's agent.
const BOB: &str = "bob-token";
/// A person's client: calls tools and answers confirmations.
const CLIENT: &str = "client-token";

struct Harness {
    service: Arc<McpService>,
    /// What the service reads the time from.
    clock: Arc<ManualClock>,
}

async fn harness() -> Harness {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/chatty_module.py"
    );
    let module = Arc::new(StdioModule::start(StdioConfig {
        name: "chatty".into(),
        command: "python3".into(),
        args: vec![script.into()],
        env: Vec::new(),
        inherit_env: Vec::new(),
        cwd: None,
        call_timeout: Duration::from_secs(30),
        run_as: None,
    }));
    assert!(module.ready(Duration::from_secs(30)).await);
    harness_over("chatty", module).await
}

/// A harness over an HTTP module served by a Python fixture (which prints its port); the
/// child lives as long as the returned handle.
async fn http_harness(fixture: &str, name: &str) -> (Harness, tokio::process::Child) {
    use tokio::io::AsyncBufReadExt;
    let script = format!("{}/tests/fixtures/{fixture}", env!("CARGO_MANIFEST_DIR"));
    let mut child = tokio::process::Command::new("python3")
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let port = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let module = Arc::new(
        HttpModule::new(HttpConfig {
            name: name.into(),
            url: format!("http://127.0.0.1:{port}/mcp").parse().unwrap(),
            headers: Vec::new(),
            tls: None,
            credentials: None,
            call_timeout: Duration::from_secs(30),
            era: Default::default(),
        })
        .unwrap(),
    );
    (harness_over(name, module).await, child)
}

async fn harness_over(name: &str, module: Arc<dyn mcp_upstream::Module>) -> Harness {
    let registry = Registry::start(vec![ModuleSpec {
        isolation: None,
        name: name.into(),
        prefix: name.into(),
        trust_annotations: true,
        module,
    }])
    .await
    .unwrap();
    let gateway = Arc::new(Gateway::new(
        registry,
        Arc::new(MemoryStore::default()),
        GatePolicy::default(),
        false,
    ));
    let grant = |token: &str, scopes: &[&str]| TokenGrant {
        subject: if token == BOB { "bob" } else { "alice" }.into(),
        tenant: None,
        token_sha256: token_sha256(token),
        scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        groups: Vec::new(),
    };
    let auth = Auth::tokens(vec![
        grant(AGENT, &[SCOPE_TOOLS_CALL]),
        grant(HUMAN, &[SCOPE_RESPOND]),
        grant(BOB, &[SCOPE_TOOLS_CALL]),
        grant(CLIENT, &[SCOPE_TOOLS_CALL, SCOPE_RESPOND]),
    ])
    .unwrap();
    let clock = Arc::new(ManualClock::stopped_now());
    let config = ServiceConfig {
        clock: clock.clone(),
        ..ServiceConfig::default()
    };
    Harness {
        service: Arc::new(McpService::new(gateway, auth, config)),
        clock,
    }
}

/// One raw SSE event: its id (if any) and data.
#[derive(Debug)]
struct Event {
    id: Option<u64>,
    retry: bool,
    data: String,
}

impl Event {
    fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap()
    }
}

/// Reads the events of a streaming response.
struct Events {
    body: Body,
    text: String,
}

impl Events {
    async fn next(&mut self) -> Event {
        loop {
            if let Some(end) = self.text.find("\n\n") {
                let block: String = self.text.drain(..end + 2).collect();
                let mut event = Event {
                    id: None,
                    retry: false,
                    data: String::new(),
                };
                let mut comment = true;
                for line in block.lines() {
                    if let Some(id) = line.strip_prefix("id: ") {
                        event.id = Some(id.parse().unwrap());
                        comment = false;
                    } else if line.starts_with("retry: ") {
                        event.retry = true;
                    } else if let Some(data) = line.strip_prefix("data: ") {
                        event.data.push_str(data);
                        comment = false;
                    } else if line.starts_with("data:") {
                        comment = false;
                    }
                }
                if comment {
                    continue;
                }
                return event;
            }
            let frame = tokio::time::timeout(Duration::from_secs(30), self.body.frame())
                .await
                .expect("an event within 30 s")
                .expect("the stream is open")
                .unwrap();
            if let Some(data) = frame.data_ref() {
                self.text.push_str(std::str::from_utf8(data).unwrap());
            }
        }
    }

    /// The messages left until the stream ends.
    async fn until_end(mut self) -> Vec<Value> {
        while let Some(frame) = tokio::time::timeout(Duration::from_secs(30), self.body.frame())
            .await
            .expect("the stream ends within 30 s")
        {
            if let Some(data) = frame.unwrap().data_ref() {
                self.text.push_str(std::str::from_utf8(data).unwrap());
            }
        }
        self.text
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| serde_json::from_str(data).unwrap())
            .collect()
    }

    /// Messages until the JSON-RPC response (the one with `id`).
    async fn until_response(&mut self) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let message = self.next().await.json();
            if message.get("id").is_some() && message.get("method").is_none() {
                return (before, message);
            }
            before.push(message);
        }
    }
}

/// What the service answered: JSON, or a stream of events.
enum Answer {
    Json(Value),
    Stream(Events),
}

impl Answer {
    fn stream(self) -> Events {
        match self {
            Answer::Stream(events) => events,
            Answer::Json(value) => panic!("expected a stream, got {value}"),
        }
    }

    fn json(self) -> Value {
        match self {
            Answer::Json(value) => value,
            Answer::Stream(_) => panic!("expected JSON, got a stream"),
        }
    }
}

async fn exchange(
    h: &Harness,
    method: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (StatusCode, Answer) {
    let mut request = Request::builder()
        .method(method)
        .uri("/mcp")
        .header("host", "127.0.0.1:8080");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(body).unwrap()
    };
    let response = h
        .service
        .handle(request.body(Full::new(Bytes::from(bytes))).unwrap())
        .await;
    let status = response.status();
    let sse = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v == "text/event-stream");
    if sse {
        return (
            status,
            Answer::Stream(Events {
                body: response.into_body(),
                text: String::new(),
            }),
        );
    }
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (status, Answer::Json(value))
}

/// A legacy session.
struct Session<'a> {
    h: &'a Harness,
    token: &'static str,
    id: String,
}

impl<'a> Session<'a> {
    async fn open(h: &'a Harness, token: &'static str, capabilities: Value) -> Session<'a> {
        Session::open_at(h, token, capabilities, "2025-11-25").await
    }

    async fn open_at(
        h: &'a Harness,
        token: &'static str,
        capabilities: Value,
        version: &str,
    ) -> Session<'a> {
        let auth = format!("Bearer {token}");
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": capabilities, "clientInfo": {"name": "t", "version": "1"}}});
        let mut request = Request::builder()
            .method("POST")
            .uri("/mcp")
            .header("host", "127.0.0.1:8080")
            .header("authorization", auth)
            .header("accept", "application/json, text/event-stream");
        request = request.header("content-type", "application/json");
        let response = h
            .service
            .handle(
                request
                    .body(Full::new(Bytes::from(serde_json::to_vec(&init).unwrap())))
                    .unwrap(),
            )
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        let id = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        Session { h, token, id }
    }

    async fn send(
        &self,
        method: &str,
        extra: &[(&str, &str)],
        body: &Value,
    ) -> (StatusCode, Answer) {
        let auth = format!("Bearer {}", self.token);
        let mut headers = vec![
            ("authorization", auth.as_str()),
            ("mcp-session-id", self.id.as_str()),
            ("mcp-protocol-version", "2025-11-25"),
            ("accept", "application/json, text/event-stream"),
        ];
        headers.extend_from_slice(extra);
        exchange(self.h, method, &headers, body).await
    }

    async fn request(&self, id: i64, method: &str, params: Value) -> Answer {
        let (status, answer) = self
            .send(
                "POST",
                &[],
                &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        answer
    }

    async fn call(&self, id: i64, tool: &str, meta: Value) -> Answer {
        let mut params = json!({"name": tool, "arguments": {}});
        if !meta.is_null() {
            params["_meta"] = meta;
        }
        self.request(id, "tools/call", params).await
    }

    async fn listen(&self, last_event_id: Option<u64>) -> Events {
        let last = last_event_id.map(|id| id.to_string());
        let mut extra = Vec::new();
        if let Some(last) = &last {
            extra.push(("last-event-id", last.as_str()));
        }
        let (status, answer) = self.send("GET", &extra, &Value::Null).await;
        assert_eq!(status, StatusCode::OK);
        answer.stream()
    }
}

fn text(result: &Value) -> String {
    result["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_and_log_messages_stream_to_the_session_client_with_its_own_token_and_level() {
    let h = harness().await;
    let s = Session::open(&h, AGENT, json!({})).await;
    let mut events = s
        .call(
            2,
            "chatty__progress",
            json!({"progressToken": "client-token-1"}),
        )
        .await
        .stream();
    let (before, result) = events.until_response().await;
    assert_eq!(text(&result), "progressed");
    let progress: Vec<&Value> = before
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3, "{before:?}");
    for (event, expected) in progress.iter().zip([0, 50, 100]) {
        assert_eq!(
            event["params"]["progressToken"], "client-token-1",
            "the client's own token"
        );
        assert_eq!(event["params"]["progress"], expected);
    }

    // At level info, the module's debug message is not the client's.
    let set = s
        .request(3, "logging/setLevel", json!({"level": "info"}))
        .await
        .json();
    assert_eq!(set["result"], json!({}), "{set}");
    let (before, result) = s
        .call(4, "chatty__log", Value::Null)
        .await
        .stream()
        .until_response()
        .await;
    assert_eq!(text(&result), "logged");
    let levels: Vec<&Value> = before.iter().map(|m| &m["params"]["level"]).collect();
    assert_eq!(levels, [&json!("info")], "{before:?}");

    let bad = s
        .request(5, "logging/setLevel", json!({"level": "loud"}))
        .await
        .json();
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modules_elicitation_is_asked_of_the_client_and_its_answer_goes_back_but_is_never_a_confirmation()
 {
    let h = harness().await;
    // An agent token: it may answer the module's question (the module asked its client),
    // never the gate's.
    let s = Session::open(&h, AGENT, json!({"elicitation": {}})).await;
    let mut events = s.call(2, "chatty__ask", Value::Null).await.stream();
    let asked = events.next().await.json();
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    // Attributed to the module as in the inbox: it cannot pass for the gate's question.
    assert_eq!(
        asked["params"]["message"],
        "A question from the module of the tool `chatty__ask` while it runs (not a confirmation of a tool call): Your name?"
    );
    let relay_id = asked["id"].clone();
    assert!(
        relay_id.as_str().unwrap().starts_with("mcp-gateway-relay-"),
        "{relay_id}"
    );
    let (status, _) = s
        .send("POST", &[], &json!({"jsonrpc": "2.0", "id": relay_id, "result": {"action": "accept", "content": {"name": "Ada"}}}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, result) = events.until_response().await;
    let answer: Value = serde_json::from_str(&text(&result)).unwrap();
    assert_eq!(
        answer,
        json!({"action": "accept", "content": {"name": "Ada"}})
    );

    // Nothing reached the store: a module's question is not a gate confirmation.
    let request = Request::builder()
        .method("GET")
        .uri("/v1/mcp/elicitations")
        .header("host", "127.0.0.1:8080")
        .header("authorization", format!("Bearer {HUMAN}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = h.service.handle(request).await;
    let body: Value =
        serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["elicitations"], json!([]), "{body}");

    // An answer to an id the gateway never asked is refused for an agent (it could be a
    // guess at a confirmation's).
    let (status, _) = s
        .send("POST", &[], &json!({"jsonrpc": "2.0", "id": "mcp-gateway-relay-999", "result": {"action": "accept"}}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

/// The REST API, as the person.
async fn rest(h: &Harness, method: &str, path: &str, body: &Value) -> (StatusCode, Value) {
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(body).unwrap()
    };
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1:8080")
        .header("authorization", format!("Bearer {HUMAN}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(bytes)))
        .unwrap();
    let response = h.service.handle(request).await;
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The person's one pending elicitation, once it is there.
async fn pending(h: &Harness) -> Value {
    for _ in 0..200 {
        let (_, listed) = rest(h, "GET", "/v1/mcp/elicitations", &Value::Null).await;
        if let Some(first) = listed["elicitations"].get(0) {
            return first.clone();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no pending elicitation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_the_client_cannot_answer_waits_for_a_person_and_their_answer_reaches_the_module()
 {
    let h = Arc::new(harness().await);
    let s = Session::open(&h, AGENT, json!({})).await;
    let id = s.id.clone();
    let call = {
        let h = h.clone();
        tokio::spawn(async move {
            let s = Session {
                h: &h,
                token: AGENT,
                id,
            };
            text(&s.call(2, "chatty__ask", Value::Null).await.json())
        })
    };
    let asked = pending(&h).await;
    assert_eq!(asked["type"], "string_input", "{asked}");
    assert_eq!(
        asked["message"],
        "A question from the module of the tool `chatty__ask` while it runs (not a confirmation of a tool call): Your name?"
    );
    assert!(
        asked.get("tool").is_none(),
        "a question, not a confirmation: {asked}"
    );
    let path = format!(
        "/v1/mcp/elicitations/{}/respond",
        asked["id"].as_str().unwrap()
    );
    let (status, _) = rest(&h, "POST", &path, &json!({"value": "Ada"})).await;
    assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_str(&call.await.unwrap()).unwrap();
    assert_eq!(
        answer,
        json!({"action": "accept", "content": {"name": "Ada"}})
    );

    // A declined question is declined for the module.
    let id = s.id.clone();
    let call = {
        let h = h.clone();
        tokio::spawn(async move {
            let s = Session {
                h: &h,
                token: AGENT,
                id,
            };
            text(&s.call(3, "chatty__ask", Value::Null).await.json())
        })
    };
    let asked = pending(&h).await;
    let path = format!(
        "/v1/mcp/elicitations/{}/cancel",
        asked["id"].as_str().unwrap()
    );
    rest(&h, "POST", &path, &json!({"reason": "declined"})).await;
    let answer: Value = serde_json::from_str(&call.await.unwrap()).unwrap();
    assert_eq!(answer, json!({"action": "decline"}));

    // The client cancels its call while the question waits: the question is withdrawn.
    let id = s.id.clone();
    let call = {
        let h = h.clone();
        tokio::spawn(async move {
            let s = Session {
                h: &h,
                token: AGENT,
                id,
            };
            s.call(6, "chatty__ask", Value::Null)
                .await
                .stream()
                .until_end()
                .await
        })
    };
    let asked = pending(&h).await;
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 6}});
    s.send("POST", &[], &cancel).await;
    // A cancelled request is not answered (issue 45, item 5): its stream ends empty.
    assert_eq!(call.await.unwrap(), Vec::<Value>::new());
    let path = format!("/v1/mcp/elicitations/{}", asked["id"].as_str().unwrap());
    let mut withdrawn = Value::Null;
    for _ in 0..200 {
        withdrawn = rest(&h, "GET", &path, &Value::Null).await.1;
        if withdrawn["status"] != "pending" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(withdrawn["status"], "cancelled", "{withdrawn}");
    assert_eq!(withdrawn["cancel_reason"], "cancelled_by_caller");

    // A form no stored type fits is cancelled at once; sampling without a client that
    // samples is an error: never a hang. (Until the module has finished the cancelled
    // call, a question cannot be told apart from that call's: refused, and asked again.)
    let mut answer = Value::Null;
    for _ in 0..100 {
        answer = serde_json::from_str(&text(
            &s.call(4, "chatty__ask_two", Value::Null).await.json(),
        ))
        .unwrap();
        if answer["error"]["code"] != -32603 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(answer, json!({"action": "cancel"}));
    let answer: Value = serde_json::from_str(&text(
        &s.call(5, "chatty__sample", Value::Null).await.json(),
    ))
    .unwrap();
    assert_eq!(answer["error"]["code"], -32601, "{answer}");

    // A client with sampling is asked.
    let s = Session::open(&h, AGENT, json!({"sampling": {}})).await;
    let mut events = s.call(2, "chatty__sample", Value::Null).await.stream();
    let asked = events.next().await.json();
    assert_eq!(asked["method"], "sampling/createMessage");
    let reply =
        json!({"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"});
    s.send(
        "POST",
        &[],
        &json!({"jsonrpc": "2.0", "id": asked["id"], "result": reply}),
    )
    .await;
    let (_, result) = events.until_response().await;
    assert_eq!(
        serde_json::from_str::<Value>(&text(&result)).unwrap(),
        reply
    );
}

/// The attack: a module asks a yes/no question, the person says yes, and the agent names
/// that answer as the confirmation of a destructive call. It is not one: the call is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_yes_to_a_modules_question_never_confirms_a_gated_call() {
    let h = Arc::new(harness().await);
    let s = Session::open(&h, AGENT, json!({})).await;
    let id = s.id.clone();
    let call = {
        let h = h.clone();
        tokio::spawn(async move {
            let s = Session {
                h: &h,
                token: AGENT,
                id,
            };
            text(&s.call(2, "chatty__ask_ok", Value::Null).await.json())
        })
    };
    let asked = pending(&h).await;
    assert_eq!(asked["type"], "confirmation");
    let question = asked["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/mcp/elicitations/{question}/respond");
    let (status, _) = rest(&h, "POST", &path, &json!({"confirmed": true})).await;
    assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_str(&call.await.unwrap()).unwrap();
    assert_eq!(answer, json!({"action": "accept", "content": {"ok": true}}));

    let held = s
        .request(
            3,
            "tools/call",
            json!({"name": "chatty__destroy", "arguments": {}, "_meta": {"confirmation_id": question}}),
        )
        .await
        .json();
    let result = &held["result"];
    assert_ne!(text(&held), "destroyed", "{held}");
    assert_eq!(
        result["structuredContent"]["elicitation_required"], true,
        "held anew: {held}"
    );
    assert_ne!(
        result["structuredContent"]["elicitation"]["id"],
        json!(question)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_calls_in_flight_a_stdio_modules_request_is_refused_not_guessed() {
    let h = harness().await;
    let waiting = Session::open(&h, AGENT, json!({"elicitation": {}})).await;
    let mut first = waiting
        .call(2, "chatty__wait", json!({"progressToken": 1}))
        .await
        .stream();
    assert_eq!(
        first.next().await.json()["method"],
        "notifications/progress"
    );
    // Another client's call asks while the first is in flight: nothing tells whose question
    // it is, so neither client is asked.
    let asking = Session::open(&h, AGENT, json!({"elicitation": {}})).await;
    let answer = asking.call(2, "chatty__ask", Value::Null).await.json();
    let answer: Value = serde_json::from_str(&text(&answer)).unwrap();
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("2 requests are in flight"),
        "{answer}"
    );

    // Closing the first call's stream cancels it at the module.
    drop(first);
    let mut cancelled = Value::Null;
    for _ in 0..100 {
        cancelled = serde_json::from_str(&text(
            &asking
                .call(3, "chatty__cancelled", Value::Null)
                .await
                .json(),
        ))
        .unwrap();
        if cancelled.as_array().is_some_and(|c| !c.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cancelled.as_array().map(Vec::len), Some(1), "{cancelled}");

    // Issue 45, item 5: the cancelled call counted as in flight for the whole call timeout
    // (120 s), so no caller's question could be relayed meanwhile. The cancellation is
    // followed by a ping; once the module answers it, it has read the cancellation, and the
    // next call's request is that call's again (this client takes no sampling: the module
    // is told so, not that requests are in flight).
    let plain = Session::open(&h, AGENT, json!({})).await;
    let mut answer = Value::Null;
    for _ in 0..100 {
        let asked = plain.call(4, "chatty__sample", Value::Null).await.json();
        answer = serde_json::from_str(&text(&asked)).unwrap();
        if !answer.to_string().contains("in flight") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!answer.to_string().contains("in flight"), "{answer}");
    assert_ne!(
        answer["error"]["code"], -32603,
        "not refused as in flight: {answer}"
    );
}

/// Issue 45, item 3: a session that negotiated a version before 2025-11-25 gets no priming
/// event (an empty `data` its client reads as a message: Gemini CLI's parses it and
/// disconnects); its stream starts with its first message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_before_2025_11_25_gets_no_priming_event() {
    let h = harness().await;
    let s = Session::open_at(&h, AGENT, json!({}), "2025-06-18").await;
    let mut stream = s.listen(None).await;
    let subscribed = s
        .request(3, "resources/subscribe", json!({"uri": "test://watched"}))
        .await
        .json();
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    s.call(5, "chatty__touch", Value::Null).await.json();
    let first = stream.next().await;
    assert!(!first.data.is_empty(), "no empty priming event first");
    assert_eq!(first.json()["method"], "notifications/resources/updated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_stream_carries_list_changes_and_subscribed_updates_and_resumes_after_a_reconnect()
 {
    let h = harness().await;
    let s = Session::open(&h, AGENT, json!({})).await;
    let mut stream = s.listen(None).await;
    let priming = stream.next().await;
    assert_eq!(
        (priming.id, priming.retry, priming.data.as_str()),
        (Some(0), true, "")
    );

    // Not subscribed: an update is not this session's.
    assert_eq!(
        text(&s.call(2, "chatty__touch", Value::Null).await.json()),
        "touched"
    );
    let subscribed = s
        .request(3, "resources/subscribe", json!({"uri": "test://watched"}))
        .await
        .json();
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    s.call(5, "chatty__touch", Value::Null).await.json();
    let updated = stream.next().await;
    assert_eq!(updated.id, Some(1));
    assert_eq!(updated.json()["method"], "notifications/resources/updated");
    assert_eq!(updated.json()["params"]["uri"], "test://watched");

    // The module changes its prompts: every list may have changed. (The first touch's
    // notice travels apart from its call's result; if it reached the gateway only once the
    // session had subscribed, it is one more update on the stream, before these.)
    s.call(6, "chatty__grow", Value::Null).await.json();
    let mut methods = Vec::new();
    let mut ids = Vec::new();
    while methods.len() < 3 {
        let event = stream.next().await;
        let method = event.json()["method"].as_str().unwrap().to_owned();
        if method == "notifications/resources/updated" {
            assert!(
                ids.is_empty(),
                "a late update comes before the list changes"
            );
            continue;
        }
        methods.push(method);
        ids.push(event.id.unwrap());
    }
    assert_eq!(
        methods,
        [
            "notifications/tools/list_changed",
            "notifications/prompts/list_changed",
            "notifications/resources/list_changed"
        ]
    );
    assert_eq!(ids, [ids[0], ids[0] + 1, ids[0] + 2], "numbered in order");
    let listed = s.request(7, "prompts/list", json!({})).await.json();
    assert_eq!(
        listed["result"]["prompts"].as_array().unwrap().len(),
        2,
        "{listed}"
    );

    // A reconnect after the first list change gets the other two again, after its priming
    // event; the old stream was taken over.
    let mut again = s.listen(Some(ids[0])).await;
    let priming = again.next().await;
    assert_eq!(priming.id, Some(ids[2]));
    assert_eq!(again.next().await.id, Some(ids[1]));
    assert_eq!(again.next().await.id, Some(ids[2]));

    // The module was subscribed once; the last unsubscribe unsubscribes it.
    let gone = s
        .request(8, "resources/unsubscribe", json!({"uri": "test://watched"}))
        .await
        .json();
    assert_eq!(gone["result"], json!({}));
    let seen: Value = serde_json::from_str(&text(
        &s.call(9, "chatty__subscriptions", Value::Null).await.json(),
    ))
    .unwrap();
    assert_eq!(
        seen,
        json!([
            ["resources/subscribe", "test://watched"],
            ["resources/unsubscribe", "test://watched"]
        ])
    );

    // DELETE ends the session and its stream.
    let (status, _) = s.send("DELETE", &[], &Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    let ended = tokio::time::timeout(Duration::from_secs(10), again.body.frame())
        .await
        .unwrap();
    assert!(ended.is_none(), "the stream ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_client_gets_progress_streamed_and_log_messages_only_when_it_asks() {
    let h = harness().await;
    let call = |id: i64, tool: &str, meta: Value| {
        let mut full = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        for (k, v) in meta.as_object().unwrap() {
            full[k] = v.clone();
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": {}, "_meta": full}});
        let h = &h;
        let tool = tool.to_owned();
        async move {
            let headers = [
                ("authorization", "Bearer agent-token"),
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", tool.as_str()),
                ("accept", "application/json, text/event-stream"),
            ];
            exchange(h, "POST", &headers, &body).await.1
        }
    };
    let (before, result) = call(1, "chatty__progress", json!({"progressToken": 9}))
        .await
        .stream()
        .until_response()
        .await;
    assert_eq!(result["result"]["resultType"], "complete", "{result}");
    assert_eq!(before.len(), 3);
    assert!(before.iter().all(|m| m["params"]["progressToken"] == 9));

    // Without logLevel, no log message: nothing came first, so plain JSON.
    let quiet = call(2, "chatty__log", json!({})).await.json();
    assert_eq!(text(&quiet), "logged");
    let (before, _) = call(
        3,
        "chatty__log",
        json!({"io.modelcontextprotocol/logLevel": "debug"}),
    )
    .await
    .stream()
    .until_response()
    .await;
    assert_eq!(before.len(), 2, "{before:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_clients_cancel_ends_the_call_and_reaches_the_module() {
    let h = harness().await;
    let s = Session::open(&h, AGENT, json!({})).await;
    let mut call = s
        .call(7, "chatty__wait", json!({"progressToken": "w"}))
        .await
        .stream();
    assert_eq!(call.next().await.json()["params"]["progressToken"], "w");
    // Another session cannot cancel it (ids are per session).
    let other = Session::open(&h, AGENT, json!({})).await;
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}});
    let (status, _) = other.send("POST", &[], &cancel).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), call.next())
            .await
            .is_err(),
        "the call goes on"
    );
    let (status, _) = s.send("POST", &[], &cancel).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // Not answered (issue 45, item 5): the stream ends with no response; a client that
    // forgot the id would report an answer as one to an unknown request.
    let rest = call.until_end().await;
    assert!(
        rest.iter().all(|m| m.get("method").is_some()),
        "no response to the cancelled request: {rest:?}"
    );
    let cancelled: Value = serde_json::from_str(&text(
        &s.call(8, "chatty__cancelled", Value::Null).await.json(),
    ))
    .unwrap();
    assert_eq!(cancelled.as_array().map(Vec::len), Some(1), "{cancelled}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_modules_input_request_is_asked_of_a_session_client_and_sent_back_with_its_state()
{
    let (h, _module) = http_harness("modern_mrtr_module.py", "mrtr").await;
    let s = Session::open(&h, AGENT, json!({"elicitation": {}})).await;
    let mut events = s.call(2, "mrtr__ask", Value::Null).await.stream();
    let asked = events.next().await.json();
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert_eq!(
        asked["params"]["message"],
        "A question from the module of the tool `mrtr__ask` while it runs (not a confirmation of a tool call): Who are you?"
    );
    let answer = json!({"action": "accept", "content": {"name": "Ada"}});
    s.send(
        "POST",
        &[],
        &json!({"jsonrpc": "2.0", "id": asked["id"], "result": answer}),
    )
    .await;
    let (_, result) = events.until_response().await;
    let got: Value = serde_json::from_str(&text(&result)).unwrap();
    assert_eq!(
        got,
        json!({"state": "state-1", "responses": {"who": answer}})
    );
    assert!(result["result"].get("resultType").is_none(), "{result}");
}

/// A modern `tools/call` of `tool` by `token` with these extra params (`_meta` besides the
/// protocol's, `requestState`, `inputResponses`).
async fn modern_call(
    h: &Harness,
    token: &str,
    id: i64,
    tool: &str,
    capabilities: Value,
    extra: Value,
) -> Answer {
    let mut params = json!({"name": tool, "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }});
    for (k, v) in extra.as_object().unwrap() {
        params[k] = v.clone();
    }
    let auth = format!("Bearer {token}");
    let headers = [
        ("authorization", auth.as_str()),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
        ("accept", "application/json, text/event-stream"),
    ];
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    exchange(h, "POST", &headers, &body).await.1
}

/// A module's question put to a modern client waits ten minutes for the retry that answers
/// it; after that the retry is refused and the module's call is cancelled (the module hears
/// it), rather than left holding its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_modules_question_unanswered_for_ten_minutes_is_cancelled() {
    let h = harness().await;
    let elicit = json!({"elicitation": {}});
    let ask =
        |id: i64, extra: Value| modern_call(&h, AGENT, id, "chatty__ask", elicit.clone(), extra);
    let answer = json!({"action": "accept", "content": {"name": "Ada"}});
    let retry = |first: &Value| json!({"requestState": first["result"]["requestState"], "inputResponses": {"input": answer}});
    let first = ask(1, json!({})).await.json();
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    h.clock.advance_std(Duration::from_secs(599));
    let done = ask(2, retry(&first)).await.json();
    assert_eq!(
        done["result"]["resultType"], "complete",
        "within its time: {done}"
    );

    let second = ask(3, json!({})).await.json();
    assert_eq!(second["result"]["resultType"], "input_required", "{second}");
    h.clock.advance_std(Duration::from_secs(601));
    let late = ask(4, retry(&second)).await.json();
    assert_eq!(late["error"]["code"], -32602, "{late}");
    assert_eq!(
        late["error"]["message"],
        "invalid params: Invalid or expired requestState"
    );
    // The module hears the cancellation (it is sent as the call is dropped).
    let mut heard = Value::Null;
    for id in 5..500 {
        let listed = modern_call(&h, AGENT, id, "chatty__cancelled", json!({}), json!({}))
            .await
            .json();
        heard = serde_json::from_str(&text(&listed)).unwrap();
        if heard.as_array().is_some_and(|a| !a.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(heard.as_array().map(Vec::len), Some(1), "{heard}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_modules_question_reaches_a_modern_client_as_input_required_and_its_answer_goes_back()
 {
    let h = harness().await;
    let elicit = json!({"elicitation": {}});
    let first = modern_call(&h, AGENT, 1, "chatty__ask", elicit.clone(), json!({}))
        .await
        .json();
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    assert_eq!(
        result["inputRequests"]["input"]["method"],
        "elicitation/create"
    );
    assert_eq!(
        result["inputRequests"]["input"]["params"]["message"],
        "A question from the module of the tool `chatty__ask` while it runs (not a confirmation of a tool call): Your name?",
        "attributed on the 2026-07-28 path too"
    );
    let state = result["requestState"].clone();
    let answer = json!({"action": "accept", "content": {"name": "Ada"}});
    let retry = json!({"requestState": state, "inputResponses": {"input": answer}});

    // Another caller holding the state gets nothing, and the call is not spent for its
    // owner; nor is another tool's call.
    let stolen = modern_call(&h, BOB, 2, "chatty__ask", elicit.clone(), retry.clone())
        .await
        .json();
    assert_eq!(stolen["error"]["code"], -32602, "{stolen}");
    let other = modern_call(&h, AGENT, 2, "chatty__log", elicit.clone(), retry.clone())
        .await
        .json();
    assert_eq!(other["error"]["code"], -32602, "{other}");

    let done = modern_call(&h, AGENT, 3, "chatty__ask", elicit.clone(), retry.clone())
        .await
        .json();
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let got: Value = serde_json::from_str(&text(&done)).unwrap();
    assert_eq!(got, answer, "the module got the client's answer");
    let again = modern_call(&h, AGENT, 4, "chatty__ask", elicit, retry)
        .await
        .json();
    assert_eq!(
        again["error"]["code"], -32602,
        "a state is used once: {again}"
    );

    // A client without elicitation is not asked: its question waits for a person (inbox).
    let h = Arc::new(h);
    let call = {
        let h = h.clone();
        tokio::spawn(async move {
            modern_call(&h, AGENT, 5, "chatty__ask", json!({}), json!({}))
                .await
                .json()
        })
    };
    let asked = pending(&h).await;
    let path = format!(
        "/v1/mcp/elicitations/{}/respond",
        asked["id"].as_str().unwrap()
    );
    rest(&h, "POST", &path, &json!({"value": "Bo"})).await;
    let done = call.await.unwrap();
    let got: Value = serde_json::from_str(&text(&done)).unwrap();
    assert_eq!(got, json!({"action": "accept", "content": {"name": "Bo"}}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_calls_module_messages_follow_the_confirmation_on_the_same_stream() {
    let h = harness().await;
    let s = Session::open(&h, CLIENT, json!({"elicitation": {}})).await;
    let mut events = s.call(2, "chatty__destroy", Value::Null).await.stream();
    let asked = events.next().await.json();
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert!(
        asked["id"]
            .as_str()
            .unwrap()
            .starts_with("mcp-gateway-confirm-")
    );
    let answer = json!({"action": "accept", "content": {"confirmed": true}});
    s.send(
        "POST",
        &[],
        &json!({"jsonrpc": "2.0", "id": asked["id"], "result": answer}),
    )
    .await;
    let (before, result) = events.until_response().await;
    assert_eq!(text(&result), "destroyed", "{result}");
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0]["method"], "notifications/message");
    assert_eq!(before[0]["params"]["data"], "destroying");
}

async fn modern_listen(h: &Harness, id: i64, notifications: Value) -> Events {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        },
        "notifications": notifications,
    }});
    let headers = [
        ("authorization", "Bearer agent-token"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "subscriptions/listen"),
        ("accept", "application/json, text/event-stream"),
    ];
    let (status, answer) = exchange(h, "POST", &headers, &body).await;
    assert_eq!(status, StatusCode::OK);
    answer.stream()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_listen_stream_carries_what_it_asked_for_and_ends_gracefully_at_shutdown() {
    let h = harness().await;
    let asked = json!({"promptsListChanged": true, "resourceSubscriptions": ["test://watched"]});
    let mut stream = modern_listen(&h, 41, asked).await;
    let ack = stream.next().await.json();
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        41
    );
    let honoured = &ack["params"]["notifications"];
    assert_eq!(honoured["promptsListChanged"], true);
    assert_eq!(honoured["toolsListChanged"], false);
    assert_eq!(honoured["resourceSubscriptions"], json!(["test://watched"]));

    let s = Session::open(&h, AGENT, json!({})).await;
    s.call(2, "chatty__touch", Value::Null).await.json();
    let updated = stream.next().await.json();
    assert_eq!(
        updated["method"], "notifications/resources/updated",
        "{updated}"
    );
    assert_eq!(updated["params"]["uri"], "test://watched");
    assert_eq!(
        updated["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        41
    );
    s.call(3, "chatty__grow", Value::Null).await.json();
    let changed = stream.next().await.json();
    assert_eq!(
        changed["method"], "notifications/prompts/list_changed",
        "only what it asked for: {changed}"
    );

    // The stream goes: the module is unsubscribed (nobody else listens).
    drop(stream);
    let mut seen = Value::Null;
    for _ in 0..100 {
        seen = serde_json::from_str(&text(
            &s.call(4, "chatty__subscriptions", Value::Null).await.json(),
        ))
        .unwrap();
        if seen.as_array().map(Vec::len) == Some(2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        seen,
        json!([
            ["resources/subscribe", "test://watched"],
            ["resources/unsubscribe", "test://watched"]
        ])
    );

    // At shutdown a listen stream ends with its result.
    let mut stream = modern_listen(&h, 42, json!({"toolsListChanged": true})).await;
    stream.next().await;
    h.service.end_session_streams();
    let (_, last) = stream.until_response().await;
    assert_eq!(last["id"], 42);
    assert_eq!(last["result"]["resultType"], "complete", "{last}");
    assert_eq!(
        last["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        42
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_cannot_hold_more_long_lived_streams_than_its_cap() {
    let h = harness().await;
    let cap = ServiceConfig::default().max_streams_per_caller;
    let mut open = Vec::new();
    for i in 0..cap {
        let id = i64::try_from(i).unwrap();
        let mut stream = modern_listen(&h, id, json!({"toolsListChanged": true})).await;
        stream.next().await;
        open.push(stream);
    }
    let body = json!({"jsonrpc": "2.0", "id": 99, "method": "subscriptions/listen", "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        },
        "notifications": {"toolsListChanged": true},
    }});
    let headers = [
        ("authorization", "Bearer agent-token"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "subscriptions/listen"),
        ("accept", "application/json, text/event-stream"),
    ];
    let (status, answer) = exchange(&h, "POST", &headers, &body).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(answer.json()["error"]["code"], -32600);
    // A session's GET stream counts too; another caller is unaffected.
    let s = Session::open(&h, AGENT, json!({})).await;
    let (status, _) = s.send("GET", &[], &Value::Null).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let bob = Session::open(&h, BOB, json!({})).await;
    let (status, _) = bob.send("GET", &[], &Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    // A stream closed frees its place.
    drop(open.pop());
    let mut freed = StatusCode::TOO_MANY_REQUESTS;
    for _ in 0..100 {
        freed = s.send("GET", &[], &Value::Null).await.0;
        if freed == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(freed, StatusCode::OK);
}
