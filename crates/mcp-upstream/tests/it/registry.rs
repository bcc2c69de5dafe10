//! The registry: two modules behind prefixes, calls routed by qualified name, and a module's
//! `list_changed` refreshing the catalog.

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use mcp_upstream::registry::{ModuleSpec, Registry};
use mcp_wire::CallToolParams;
use serde_json::Value;

use crate::framed;

fn spec(name: &str, module: Arc<mcp_upstream::stdio::StdioModule>) -> ModuleSpec {
    ModuleSpec {
        name: name.into(),
        prefix: name.into(),
        trust_annotations: true,
        module,
        isolation: None,
    }
}

async fn call_text(registry: &Registry, qualified: &str) -> String {
    let entry = registry.find(qualified).await.unwrap();
    let params = CallToolParams::new(entry.original.clone(), None);
    let raw = registry.call(&entry, params, None, None).await.unwrap();
    let value: Value = serde_json::from_str(raw.get()).unwrap();
    value["content"][0]["text"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_routed_by_prefix_and_a_list_change_refreshes_the_catalog() {
    let registry = Registry::start(vec![
        spec("alpha", framed("alpha").await),
        spec("beta", framed("beta").await),
    ])
    .await
    .unwrap();
    let names: Vec<String> = registry
        .tools()
        .await
        .iter()
        .map(|t| t.qualified.clone())
        .collect();
    assert!(
        names.contains(&"alpha__whoami".to_owned()) && names.contains(&"beta__whoami".to_owned()),
        "{names:?}"
    );
    assert_eq!(call_text(&registry, "alpha__whoami").await, "alpha");
    assert_eq!(call_text(&registry, "beta__whoami").await, "beta");
    assert!(registry.find("alpha__extra").await.is_none());

    let mut refreshed = registry.refreshed();
    assert_eq!(call_text(&registry, "alpha__grow").await, "grown");
    tokio::time::timeout(Duration::from_secs(30), refreshed.recv())
        .await
        .expect("the catalog is refreshed after the module's list_changed")
        .unwrap();
    assert!(registry.find("alpha__extra").await.is_some());
    assert!(
        registry.find("beta__extra").await.is_none(),
        "only the module that changed lists the new tool"
    );
    registry.shutdown().await;
}
