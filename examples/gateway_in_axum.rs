//! The whole gateway inside another axum service: `cargo run -p embedding-examples --example
//! gateway_in_axum`. The service keeps its own routes; MCP is at `/gateway/mcp`, the page at
//! `/gateway/approvals`, the REST API under `/gateway/v1/`; the callers are its own users.

use std::sync::Arc;

use axum::http::HeaderMap;
use mcp_auth::{Auth, Principal, SCOPE_RESPOND, SCOPE_TOOLS_CALL};
use mcp_gate::Gateway;
use mcp_http::service::McpService;
use mcp_upstream::inproc::{InProcessModule, InProcessTool, text_result};
use mcp_upstream::registry::{ModuleSpec, Registry};
use serde_json::json;

/// The service's own users, by bearer token (a real service reads its session store): Alice's
/// agent may call tools; Alice herself answers (an agent that may answer approves itself).
fn user(headers: &HeaderMap) -> Option<Principal> {
    let token = headers
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?;
    let scope = match token {
        "alice-agent" => SCOPE_TOOLS_CALL,
        "alice-secret" => SCOPE_RESPOND,
        _ => return None,
    };
    let caller = elicitation_store::Caller::new("alice", None).ok()?;
    Some(Principal::authenticated(caller, &[scope]))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let delete = InProcessTool::new(
        json!({"name": "delete_file", "inputSchema": {"type": "object"},
               "annotations": {"destructiveHint": true}}),
        |args| Ok(text_result(&format!("deleted {}", args["path"]), false)),
    );
    let files = ModuleSpec {
        name: "files".into(),
        prefix: "files".into(),
        trust_annotations: true,
        module: Arc::new(InProcessModule::new("files", vec![delete])),
        isolation: None,
    };
    let store = Arc::new(elicitation_store::MemoryStore::default());
    let gateway = Gateway::new(
        Registry::start(vec![files]).await?,
        store,
        Default::default(),
        true,
    );
    let mounted = McpService::new(Arc::new(gateway), Auth::embedder(user), Default::default())
        .nested_at("/gateway")?
        .into_service();
    let app = axum::Router::new()
        .route(
            "/health",
            axum::routing::get(|| async { "the service's own route" }),
        )
        .nest_service("/gateway", mounted);
    let port = std::env::var("PORT").unwrap_or_else(|_| "8081".into());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
