//! A real child process as a stdio module: crashes mid-call are errors, not outages, and
//! list_changed notifications refresh the catalog.

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use elicitation_store::MemoryStore;
use gating_core::GatePolicy;
use mcp_http::auth::Principal;
use mcp_http::gateway::Gateway;
use mcp_upstream::registry::{ModuleSpec, Registry};
use mcp_upstream::stdio::{StdioConfig, StdioModule};
use mcp_wire::CallToolParams;
use serde_json::{Value, json};

fn principal() -> Principal {
    match mcp_http::auth::Auth::none() {
        mcp_http::auth::Auth::None(p) => (*p).clone(),
        _ => unreachable!(),
    }
}

async fn crashy() -> (Arc<StdioModule>, Arc<Registry>, Gateway) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/crashy_module.py"
    );
    let module = Arc::new(StdioModule::start(StdioConfig {
        name: "crashy".into(),
        command: "python3".into(),
        args: vec![script.into()],
        env: Vec::new(),
        inherit_env: Vec::new(),
        cwd: None,
        call_timeout: Duration::from_secs(30),
    }));
    assert!(
        module.ready(Duration::from_secs(30)).await,
        "the fixture starts"
    );
    let registry = Registry::start(vec![ModuleSpec {
        name: "crashy".into(),
        prefix: "crashy".into(),
        trust_annotations: true,
        module: module.clone(),
    }])
    .await
    .unwrap();
    let gateway = Gateway::new(
        registry.clone(),
        Arc::new(MemoryStore::default()),
        GatePolicy::default(),
        false,
    );
    (module, registry, gateway)
}

fn params(name: &str, arguments: Value) -> CallToolParams {
    serde_json::from_value(json!({"name": name, "arguments": arguments})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_that_crashes_mid_call_yields_an_error_result_and_the_gateway_keeps_serving() {
    let (module, _registry, gateway) = crashy().await;
    let p = principal();
    let echoed = gateway
        .call_tool(&p, params("crashy__echo", json!({"text": "before"})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(echoed["content"][0]["text"], "before");

    let crashed = gateway
        .call_tool(&p, params("crashy__crash", json!({})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(crashed["isError"], true, "{crashed}");
    assert_eq!(crashed["structuredContent"]["upstream_error"], true);
    assert!(
        crashed["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("failed during the call"),
        "{crashed}"
    );

    // The supervisor restarts it; the same gateway serves the next call.
    assert!(
        module.ready(Duration::from_secs(30)).await,
        "the module comes back"
    );
    let echoed = gateway
        .call_tool(&p, params("crashy__echo", json!({"text": "after"})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(echoed["content"][0]["text"], "after");
    mcp_upstream::Module::shutdown(&*module).await;
    let down = gateway
        .call_tool(&p, params("crashy__echo", json!({"text": "x"})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(
        down["structuredContent"]["upstream_error"], true,
        "a stopped module fails cleanly: {down}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_from_a_module_refreshes_the_tool_list() {
    let (module, registry, gateway) = crashy().await;
    let mut refreshed = registry.refreshed();
    assert!(registry.lookup("crashy__extra").is_none());
    gateway
        .call_tool(&principal(), params("crashy__grow", json!({})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), refreshed.recv())
        .await
        .expect("a refresh follows the notification")
        .unwrap();
    let names: Vec<String> = gateway
        .list_tools()
        .await
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.contains(&"crashy__extra".to_owned()), "{names:?}");
    mcp_upstream::Module::shutdown(&*module).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_arguments_cannot_end_the_line_and_smuggle_a_second_request_to_a_stdio_module() {
    let (module, _registry, gateway) = crashy().await;
    let p = principal();
    // Arguments pass through as the client wrote them, newlines between tokens included. If
    // they reached the module's stdin unchanged, the second line would be a call of `crash`
    // that no gate ever saw.
    let smuggling: CallToolParams = serde_json::from_str(
        "{\"name\":\"crashy__echo\",\"arguments\":{\"text\":\n\"smuggle\",\"x\":\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"crash\",\"arguments\":{}}}\r\n}}",
    )
    .unwrap();
    let echoed = gateway
        .call_tool(&p, smuggling)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(echoed["content"][0]["text"], "smuggle", "{echoed}");
    let after = gateway
        .call_tool(&p, params("crashy__echo", json!({"text": "still up"})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(
        after["content"][0]["text"], "still up",
        "the module never ran the smuggled crash: {after}"
    );
    mcp_upstream::Module::shutdown(&*module).await;
}
