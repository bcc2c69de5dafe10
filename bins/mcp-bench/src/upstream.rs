//! The fast upstream module: a minimal Streamable HTTP MCP server with a read-only tool
//! (`read`) and a destructive one (`delete`), a prompt (`greet`) and a resource
//! (`bench://r`) that answer small fixed results, in both eras.
//! It parses only what it must, so the measured cost is the gateway's, not this server's.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// Extra read-only tools `t0` … `t{N-1}` besides `read` and `delete` (`--tools N`), for a
/// large catalog.
static EXTRA_TOOLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Lists `extra` more read-only tools from now on.
pub(crate) fn set_extra_tools(extra: usize) {
    EXTRA_TOOLS.store(extra, std::sync::atomic::Ordering::Relaxed);
}

/// Every `delete` this upstream ran: the argument `n` of each (the soak's exactly-once
/// count), and how many ran in all.
static DELETES: std::sync::Mutex<Option<std::collections::HashMap<u64, u32>>> =
    std::sync::Mutex::new(None);

/// (executions of `delete`, distinct `n` executed more than once).
pub(crate) fn deletes() -> (u64, u64) {
    let deletes = DELETES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(seen) = deletes.as_ref() else {
        return (0, 0);
    };
    let total = seen.values().map(|n| u64::from(*n)).sum();
    let twice = seen.values().filter(|n| **n > 1).count() as u64;
    (total, twice)
}

fn record_delete(message: &Value) {
    let n = message["params"]["arguments"]["n"]
        .as_u64()
        .unwrap_or(u64::MAX);
    let mut deletes = DELETES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *deletes
        .get_or_insert_with(Default::default)
        .entry(n)
        .or_insert(0) += 1;
}

fn tools() -> Value {
    let mut tools = vec![
        json!({"name": "read", "description": "Reads (benchmark).", "inputSchema": {"type": "object"},
         "annotations": {"readOnlyHint": true, "destructiveHint": false, "openWorldHint": false}}),
        json!({"name": "delete", "description": "Deletes (benchmark).", "inputSchema": {"type": "object"},
         "annotations": {"readOnlyHint": false, "destructiveHint": true, "openWorldHint": false}}),
    ];
    for i in 0..EXTRA_TOOLS.load(std::sync::atomic::Ordering::Relaxed) {
        tools.push(json!({"name": format!("t{i}"), "description": "Reads (benchmark).", "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "openWorldHint": false}}));
    }
    Value::Array(tools)
}

fn answer(message: &Value) -> (StatusCode, Option<Value>, bool) {
    let id = message.get("id").cloned();
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let modern = message
        .get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .is_some();
    let Some(id) = id else {
        return (StatusCode::ACCEPTED, None, false);
    };
    let mut result = match method {
        "initialize" => {
            json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}, "prompts": {}, "resources": {}}, "serverInfo": {"name": "bench-upstream", "version": "1"}})
        }
        "server/discover" => {
            json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}, "prompts": {}, "resources": {}}, "ttlMs": 0, "cacheScope": "public"})
        }
        "tools/list" => json!({"tools": tools(), "ttlMs": 0, "cacheScope": "public"}),
        "tools/call" => {
            if message["params"]["name"] == "delete" {
                record_delete(message);
            }
            match message["params"]["arguments"]["bytes"].as_u64() {
                // A result of about this many bytes of prose (the content scanning bench).
                Some(bytes) => json!({"content": [{"type": "text", "text": prose(bytes)}]}),
                None => json!({"content": [{"type": "text", "text": "ok"}]}),
            }
        }
        "prompts/list" => {
            json!({"prompts": [{"name": "greet", "description": "Greets (benchmark)."}], "ttlMs": 0, "cacheScope": "public"})
        }
        "prompts/get" => {
            json!({"messages": [{"role": "user", "content": {"type": "text", "text": "ok"}}]})
        }
        "resources/list" => {
            json!({"resources": [{"uri": "bench://r", "name": "r"}], "ttlMs": 0, "cacheScope": "public"})
        }
        "resources/templates/list" => {
            json!({"resourceTemplates": [], "ttlMs": 0, "cacheScope": "public"})
        }
        "resources/read" => {
            json!({"contents": [{"uri": "bench://r", "text": "ok"}], "ttlMs": 0, "cacheScope": "public"})
        }
        "ping" => json!({}),
        _ => {
            let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "method not found"}});
            return (StatusCode::OK, Some(error), false);
        }
    };
    if modern && let Some(map) = result.as_object_mut() {
        map.insert("resultType".into(), json!("complete"));
    }
    (
        StatusCode::OK,
        Some(json!({"jsonrpc": "2.0", "id": id, "result": result})),
        method == "initialize",
    )
}

async fn handle(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let bytes = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let Ok(message) = serde_json::from_slice::<Value>(&bytes) else {
        return Ok(Response::builder()
            .status(StatusCode::BAD_REQUEST)
            .body(Full::new(Bytes::new()))
            .expect("static response"));
    };
    let (status, body, new_session) = answer(&message);
    let mut response = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if new_session {
        response = response.header("mcp-session-id", "bench-session");
    }
    let body = body
        .map(|b| Bytes::from(serde_json::to_vec(&b).unwrap_or_default()))
        .unwrap_or_default();
    Ok(response.body(Full::new(body)).expect("static response"))
}

/// Serves forever on `listener`.
pub(crate) async fn serve(listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = hyper::service::service_fn(handle);
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

/// About `bytes` (at most 1 MiB) of prose with the words that set secret rules looking
/// (`key`, `api`, `token`) but no secret: what a scan of an ordinary result costs.
fn prose(bytes: u64) -> String {
    const LINE: &str =
        "The quick brown fox reads the api docs; key_length = 32, token count 7, version 2.\n";
    let bytes = usize::try_from(bytes.min(1024 * 1024)).unwrap_or(0);
    LINE.repeat(bytes / LINE.len() + 1)[..bytes].to_owned()
}
