//! An rmcp server whose destructive tool waits for a person, with the approvals page and its
//! REST API mounted beside it in axum: `cargo run -p embedding-examples --example rmcp_gated`.
//! MCP clients connect to `/mcp`; a person answers at `/ops/approvals`.

use std::sync::Arc;

use mcp_gate::{Gateway, rmcp::Gated};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::transport::streamable_http_server::{
    StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ServerHandler, model::*, schemars, tool, tool_handler, tool_router};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Order {
    order: u64,
}

#[derive(Clone)]
struct Shop;

#[tool_router]
impl Shop {
    #[tool(description = "Delete an order", annotations(destructive_hint = true))]
    async fn delete_order(&self, Parameters(Order { order }): Parameters<Order>) -> String {
        format!("deleted order {order}")
    }
}

#[tool_handler]
impl ServerHandler for Shop {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = Arc::new(elicitation_store::MemoryStore::default());
    let gate = Arc::new(Gateway::for_own_tools(store, Default::default()).await?);
    let gated = Gated::for_local_user(Shop, gate.clone()); // this machine alone calls
    let mcp = StreamableHttpService::new(
        move || Ok(gated.clone()),
        Arc::new(LocalSessionManager::default()),
        Default::default(),
    );
    // The page and REST API, for the same store and callers (mode none: loopback only).
    let approvals =
        mcp_http::service::McpService::new(gate, mcp_auth::Auth::none(), Default::default())
            .nested_at("/ops")?
            .into_service();
    let app = axum::Router::new()
        .nest_service("/mcp", mcp)
        .nest_service("/ops", approvals);
    let port = std::env::var("PORT").unwrap_or_else(|_| "8080".into());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
