//! The stdio client: framing (a line cut across writes, two messages in one write, a line
//! that is not JSON-RPC, a large answer) and supervision (a process that dies mid-call).

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mcp_upstream::{Module, ModuleError, Relay, ToolCall};
use mcp_wire::CallToolParams;
use mcp_wire::jsonrpc::ErrorObject;
use mcp_wire::tools::Arguments;
use serde_json::{Value, json};

use crate::framed;

/// A relay that keeps what the module said about the call.
#[derive(Default)]
struct Heard(Mutex<Vec<(String, Value)>>);

#[async_trait]
impl Relay for Heard {
    fn notify(&self, method: &str, params: Value) {
        self.0.lock().unwrap().push((method.to_owned(), params));
    }
    async fn ask(&self, method: &str, _: Option<Value>) -> Result<Value, ErrorObject> {
        mcp_upstream::refuse_ask(method)
    }
    fn log_level(&self) -> Option<u8> {
        Some(0)
    }
    fn answers(&self, _: &str) -> bool {
        false
    }
}

async fn call(
    module: &dyn Module,
    tool: &str,
    arguments: Value,
    relay: Option<Arc<dyn Relay>>,
) -> Result<Value, ModuleError> {
    let Value::Object(map) = arguments else {
        panic!("arguments are an object")
    };
    let params = CallToolParams::new(tool.to_owned(), Some(Arguments::from_map(&map)));
    let raw = module
        .call_tool(ToolCall {
            params,
            mirrored: &[],
            relay,
        })
        .await?;
    Ok(serde_json::from_str(raw.get()).unwrap())
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cut_across_writes_or_sharing_one_with_a_notification_is_read_whole() {
    let module = framed("framing").await;
    let split = call(&*module, "split", json!({}), None).await.unwrap();
    assert_eq!(text(&split), "split answer");

    let heard = Arc::new(Heard::default());
    let burst = call(&*module, "burst", json!({}), Some(heard.clone()))
        .await
        .unwrap();
    assert_eq!(text(&burst), "burst answer");
    let heard = heard.0.lock().unwrap().clone();
    assert!(
        heard
            .iter()
            .any(|(method, params)| method == "notifications/message"
                && params["data"] == "before the answer"),
        "the notification written in the same write reached the call's relay: {heard:?}"
    );

    let big = call(&*module, "big", json!({}), None).await.unwrap();
    assert_eq!(
        text(&big).len(),
        2 * 1024 * 1024,
        "a 2 MiB answer arrives whole"
    );
    module.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_that_is_not_json_rpc_is_skipped_and_the_call_still_answers() {
    let module = framed("noise").await;
    let noisy = call(&*module, "noisy", json!({}), None).await.unwrap();
    assert_eq!(text(&noisy), "noisy answer");
    let echo = call(&*module, "echo", json!({"text": "still here"}), None)
        .await
        .unwrap();
    assert_eq!(text(&echo), "still here", "the connection was kept");
    module.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_that_dies_mid_call_fails_that_call_and_is_started_again() {
    let module = framed("mortal").await;
    assert_eq!(module.health().restarts, 0);
    let died = call(&*module, "crash", json!({}), None).await;
    assert!(died.is_err(), "the call in flight fails: {died:?}");
    // The supervisor starts it again (after its first back-off).
    assert!(
        module.ready(Duration::from_secs(30)).await,
        "the module comes back"
    );
    let echo = call(&*module, "echo", json!({"text": "again"}), None)
        .await
        .unwrap();
    assert_eq!(text(&echo), "again");
    assert!(module.health().up);
    assert_eq!(module.health().restarts, 1);
    module.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalog_is_listed_and_an_unknown_tool_is_the_modules_own_error() {
    let module = framed("lister").await;
    let names: Vec<String> = module
        .list_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        names.contains(&"echo".to_owned()) && names.contains(&"grow".to_owned()),
        "{names:?}"
    );
    match call(&*module, "nope", json!({}), None).await {
        Err(ModuleError::Rpc { code, .. }) => assert_eq!(code, -32602),
        other => panic!("the module's own error is passed on: {other:?}"),
    }
    module.shutdown().await;
}
