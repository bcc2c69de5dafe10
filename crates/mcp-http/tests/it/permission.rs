//! The permission prompt (`transport = "permission_prompt"`) with a slow person: the agent
//! host's question waits for the person's answer up to the confirmation's TTL, with a
//! progress notification every 15 s, however long past every internal timeout they take.

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use elicitation_store::{MemoryStore, Store};
use gating_core::GatePolicy;
use http::Request;
use http_body_util::{BodyExt, Full};
use mcp_auth::{Auth, SCOPE_RESPOND, SCOPE_TOOLS_CALL, TokenGrant, token_sha256};
use mcp_gate::Gateway;
use mcp_http::service::{McpService, ServiceConfig};
use mcp_upstream::permission_prompt::PermissionPromptModule;
use mcp_upstream::registry::{ModuleSpec, Registry};
use serde_json::{Value, json};

const AGENT: &str = "agent-token";
const HUMAN: &str = "human-token";

async fn service() -> Arc<McpService> {
    let registry = Registry::start(vec![ModuleSpec {
        isolation: None,
        name: "claude".into(),
        prefix: "claude".into(),
        trust_annotations: false,
        module: Arc::new(PermissionPromptModule::new("claude")),
    }])
    .await
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let gateway = Gateway::new(registry, store, GatePolicy::default(), false)
        .with_permission_prompts(vec!["claude".into()]);
    let grant = |token: &str, scope: &str| TokenGrant {
        subject: "alice".into(),
        tenant: None,
        token_sha256: token_sha256(token),
        scopes: vec![scope.into()],
        groups: Vec::new(),
    };
    let auth = Auth::tokens(vec![
        grant(AGENT, SCOPE_TOOLS_CALL),
        grant(HUMAN, SCOPE_RESPOND),
    ])
    .unwrap();
    Arc::new(McpService::new(
        Arc::new(gateway),
        auth,
        ServiceConfig::default(),
    ))
}

async fn send(service: &McpService, request: Request<Full<Bytes>>) -> (u16, String) {
    let response = service.handle(request).await;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn rest(method: &str, path: &str, body: Option<Value>) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1")
        .header("authorization", format!("Bearer {HUMAN}"))
        .header("content-type", "application/json")
        .body(Full::new(body.map_or_else(Bytes::new, |b| {
            Bytes::from(serde_json::to_vec(&b).unwrap())
        })))
        .unwrap()
}

/// Issue 45, item 1: the question waited at most the store's 10-second operation limit
/// ("the store is unavailable", deny at 10.2 s) though docs/permission-prompt.md promises
/// the confirmation's TTL. A person who answers after 40 s — past every internal timeout,
/// on tokio's paused clock — is heard: the host gets the person's answer, after a progress
/// notification every 15 s.
#[tokio::test(start_paused = true)]
async fn a_permission_prompt_waits_for_a_slow_person_with_progress() {
    let service = service().await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "claude__approve",
        "arguments": {"tool_name": "Bash", "input": {"command": "rm -rf /srv"}, "tool_use_id": "toolu_1"},
        "_meta": {"progressToken": "p1",
                  "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let asking = {
        let service = service.clone();
        tokio::spawn(async move {
            let request = Request::builder()
                .method("POST")
                .uri("/mcp")
                .header("host", "127.0.0.1")
                .header("authorization", format!("Bearer {AGENT}"))
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "tools/call")
                .header("mcp-name", "claude__approve")
                .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
                .unwrap();
            let started = tokio::time::Instant::now();
            let answer = send(&service, request).await;
            (answer, started.elapsed())
        })
    };
    // The person finds the question, and answers 40 s later.
    let id = loop {
        let (_, listed) = send(
            &service,
            rest("GET", "/v1/mcp/elicitations?status=pending", None),
        )
        .await;
        let listed: Value = serde_json::from_str(&listed).unwrap();
        if let Some(id) = listed["elicitations"][0]["id"].as_str() {
            break id.to_owned();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::time::sleep(Duration::from_secs(40)).await;
    let (status, answered) = send(
        &service,
        rest(
            "POST",
            &format!("/v1/mcp/elicitations/{id}/respond"),
            Some(json!({"confirmed": true})),
        ),
    )
    .await;
    assert_eq!(status, 200, "{answered}");
    let ((status, said), waited) = asking.await.unwrap();
    assert_eq!(status, 200, "{said}");
    assert!(
        waited >= Duration::from_secs(40),
        "answered at {waited:?}: {said}"
    );
    assert!(
        said.contains(r#"\"behavior\":\"allow\""#),
        "the person's answer: {said}"
    );
    assert!(!said.contains("unavailable"), "{said}");
    let progress = said.matches("notifications/progress").count();
    assert_eq!(progress, 2, "at 15 s and 30 s: {said}");
}
