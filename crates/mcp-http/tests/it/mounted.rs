//! The gateway mounted in another service (`McpService::mounted_at`, `Auth::Embedder`): the
//! paths under the mount, the embedder's callers on MCP, REST and the page, and a page
//! session that follows the service's own sign-in (another person's headers, or none, open
//! nothing with it).

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use bytes::Bytes;
use elicitation_store::{Caller, MemoryStore};
use http::{HeaderMap, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use mcp_auth::{Auth, Principal, SCOPE_RESPOND, SCOPE_TOOLS_CALL};
use mcp_gate::Gateway;
use mcp_http::service::McpService;
use mcp_upstream::inproc::{InProcessModule, InProcessTool, text_result};
use mcp_upstream::registry::{ModuleSpec, Registry};
use serde_json::{Value, json};

/// The service's users: `alice` and `bob`, by their session header (a stand-in for the
/// service's own sign-in).
fn user(headers: &HeaderMap) -> Option<Principal> {
    let name = headers.get("x-session")?.to_str().ok()?;
    let name = ["alice", "bob"].into_iter().find(|n| *n == name)?;
    Some(Principal::authenticated(
        Caller::new(name, None).unwrap(),
        &[SCOPE_TOOLS_CALL, SCOPE_RESPOND],
    ))
}

async fn mounted() -> Arc<McpService> {
    Arc::new(unmounted().await.mounted_at("/ops").unwrap())
}

async fn unmounted() -> McpService {
    let module = InProcessModule::new(
        "files",
        vec![InProcessTool::new(
            json!({"name": "delete", "inputSchema": {"type": "object"},
                   "annotations": {"destructiveHint": true}}),
            |_| Ok(text_result("deleted", false)),
        )],
    );
    let registry = Registry::start(vec![ModuleSpec {
        name: "files".into(),
        prefix: "files".into(),
        trust_annotations: true,
        module: Arc::new(module),
        isolation: None,
    }])
    .await
    .unwrap();
    let gateway = Gateway::new(
        registry,
        Arc::new(MemoryStore::default()),
        Default::default(),
        true,
    );
    McpService::new(Arc::new(gateway), Auth::embedder(user), Default::default())
}

async fn send(
    service: &McpService,
    method: &str,
    path: &str,
    who: Option<&str>,
    cookie: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, HeaderMap, String) {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "127.0.0.1")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28");
    if body.as_ref().is_some_and(|b| b["method"] == "tools/call") {
        request = request
            .header("mcp-method", "tools/call")
            .header("mcp-name", "files__delete");
    }
    if let Some(who) = who {
        request = request.header("x-session", who);
    }
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, cookie);
    }
    let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
    let response = service.handle(request.body(Full::new(body)).unwrap()).await;
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

fn call(arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "files__delete", "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}})
}

/// Alice's call held: the id of its confirmation.
async fn held(service: &McpService, path: &str) -> String {
    let (status, _, body) = send(
        service,
        "POST",
        path,
        Some("alice"),
        None,
        Some(call(json!({"n": 1}))),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let result: Value = serde_json::from_str(&body).unwrap();
    let id = result["result"]["structuredContent"]["elicitation"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("held: {body}"))
        .to_owned();
    // The held result links to the page under the mount.
    let link = format!("\"http://127.0.0.1/ops/approvals/e/{id}\"");
    assert!(body.contains(&link), "{body}");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_its_paths_come_without_the_mount_and_its_links_go_under_it() {
    // The router took `/ops` off: the call comes to `/mcp`, the held result (checked in
    // `held`) links under `/ops`.
    let service = unmounted().await.nested_at("/ops").unwrap();
    held(&service, "/mcp").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_mount_the_embedders_callers_call_answer_and_others_are_refused() {
    let service = mounted().await;
    // Mounted with the path on requests: served under it, and nothing outside it (a route
    // the embedder protects only under /ops is not reachable beside it).
    let id = held(&service, "/ops/mcp").await;
    for outside in ["/mcp", "/v1/mcp/elicitations", "/approvals", "/opsx/mcp"] {
        let (status, _, _) = send(&service, "GET", outside, Some("alice"), None, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{outside}");
    }
    let (status, _, _) = send(
        &service,
        "GET",
        "/ops/v1/mcp/elicitations",
        None,
        None,
        None,
    )
    .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "no one signed in to the service"
    );
    // Bob cannot see or answer Alice's confirmation.
    let path = format!("/ops/v1/mcp/elicitations/{id}/respond");
    let (status, _, body) = send(
        &service,
        "POST",
        &path,
        Some("bob"),
        None,
        Some(json!({"confirmed": true})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _, body) = send(
        &service,
        "POST",
        &path,
        Some("alice"),
        None,
        Some(json!({"confirmed": true})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, _, body) = send(
        &service,
        "POST",
        "/ops/mcp",
        Some("alice"),
        None,
        Some(call(json!({"n": 1}))),
    )
    .await;
    assert!(
        body.contains("\"deleted\""),
        "the approved call ran: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_session_follows_the_services_sign_in_and_its_links_stay_under_the_mount() {
    let service = mounted().await;
    let id = held(&service, "/ops/mcp").await;
    // Not signed in to the service: nothing, and no session.
    let (status, headers, body) = send(&service, "GET", "/ops/approvals", None, None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(headers.get(header::SET_COOKIE).is_none());
    // Alice: a session under the mount, then her page, its links under the mount too.
    let (status, headers, _) =
        send(&service, "GET", "/ops/approvals", Some("alice"), None, None).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(
        headers[header::LOCATION]
            .to_str()
            .unwrap()
            .starts_with("/ops/approvals?")
    );
    let set = headers[header::SET_COOKIE].to_str().unwrap();
    assert!(set.contains("Path=/ops/approvals"), "{set}");
    let cookie = set.split(';').next().unwrap().to_owned();
    let (status, _, page) = send(
        &service,
        "GET",
        "/ops/approvals",
        Some("alice"),
        Some(&cookie),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains(&format!("id=\"e-{id}\"")),
        "her held call is shown"
    );
    assert!(
        page.contains("action=\"/ops/approvals/"),
        "forms post under the mount"
    );
    assert!(!page.contains("\"/approvals"), "no link leaves the mount");
    // Her cookie with Bob's sign-in, or with none: not her page.
    for who in [Some("bob"), None] {
        let (_, _, page) = send(&service, "GET", "/ops/approvals", who, Some(&cookie), None).await;
        assert!(!page.contains(&format!("id=\"e-{id}\"")), "{who:?}: {page}");
    }
}

/// The cross-site request of the attacker's read: a page of another site on this machine
/// (an agent can serve one and ask the person to open it) posts an approval with the
/// person's cookie riding along. A text/plain or form body needs no preflight; it is
/// refused before anything is read, under the embedder's cookie and under auth `none`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_site_post_without_a_json_body_approves_nothing() {
    let service = mounted().await;
    let id = held(&service, "/ops/mcp").await;
    let path = format!("/ops/v1/mcp/elicitations/{id}/respond");
    for kind in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let request = Request::builder()
            .method("POST")
            .uri(&path)
            .header(header::HOST, "127.0.0.1")
            .header(header::ORIGIN, "http://localhost:9999")
            .header(header::CONTENT_TYPE, kind)
            .header("x-session", "alice")
            .body(Full::new(Bytes::from(r#"{"confirmed": true}"#)))
            .unwrap();
        let response = service.handle(request).await;
        assert_eq!(
            response.status(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{kind}"
        );
    }
    // Still pending: the same call is held again on the same confirmation.
    assert_eq!(held(&service, "/ops/mcp").await, id);
    // Auth `none` (everyone on this machine is `local`): the same refusal for /mcp too.
    let gateway = Gateway::for_own_tools(Arc::new(MemoryStore::default()), Default::default())
        .await
        .unwrap();
    let local = McpService::new(Arc::new(gateway), Auth::none(), Default::default());
    let request = Request::builder()
        .method("POST")
        .uri("/mcp")
        .header(header::HOST, "127.0.0.1")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Full::new(Bytes::from(call(json!({})).to_string())))
        .unwrap();
    assert_eq!(
        local.handle(request).await.status(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
}
