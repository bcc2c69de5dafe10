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

/// A resource a module named to a caller in a result, and that no module lists, is read
/// from that module for that caller (issue 45, item 6: a session resource of a caller's own
/// instance); never for another caller, and never instead of the module that lists a URI.
#[tokio::test]
async fn a_uri_a_module_named_in_a_result_is_read_from_it_for_that_caller_only() {
    use mcp_upstream::inproc::{InProcessModule, InProcessTool};
    use mcp_wire::tools::ForwardParams;
    use serde_json::json;

    let maker = InProcessModule::new(
        "maker",
        vec![InProcessTool::new(
            json!({"name": "make", "inputSchema": {"type": "object"}}),
            |_| {
                Ok(json!({"content": [
                    {"type": "resource_link", "uri": "maker://session/1", "name": "made"},
                    // Another module's listed URI: named, but not taken over.
                    {"type": "resource_link", "uri": "keeper://listed", "name": "taken?"},
                ]}))
            },
        )],
    )
    .with_resources(vec![(json!({"uri": "maker://static"}), "static".into())]);
    let keeper = InProcessModule::new("keeper", Vec::new()).with_resources(vec![(
        json!({"uri": "keeper://listed"}),
        "the keeper's".into(),
    )]);
    let spec = |name: &str, module: InProcessModule| ModuleSpec {
        name: name.into(),
        prefix: name.into(),
        trust_annotations: true,
        module: Arc::new(module),
        isolation: None,
    };
    let registry = Registry::start(vec![spec("maker", maker), spec("keeper", keeper)])
        .await
        .unwrap();
    let read = |who: &'static str, uri: &'static str| {
        let registry = registry.clone();
        async move {
            let params = ForwardParams(json!({"uri": uri}).as_object().cloned().unwrap());
            registry.read_resource(params, Some(who)).await
        }
    };
    // Before any result names it, no module claims it.
    assert!(read("alice", "maker://session/1").await.is_none());
    let entry = registry.find("maker__make").await.unwrap();
    let params = CallToolParams::new(entry.original.clone(), None);
    registry
        .call(&entry, params, None, Some("alice"))
        .await
        .unwrap();
    // The in-process module serves only what it lists: its own refusal shows the read
    // reached it.
    match read("alice", "maker://session/1").await {
        Some(Err(mcp_upstream::ModuleError::Rpc {
            module, message, ..
        })) => {
            assert_eq!(module, "maker", "{message}");
        }
        other => panic!("routed to the module that named it: {other:?}"),
    }
    assert!(
        read("bob", "maker://session/1").await.is_none(),
        "bob was never told of it"
    );
    // A subscription to it is each caller's own: never taken as one the module already
    // holds for another caller (bob's must reach the routing, and be refused there).
    assert!(registry.isolates("maker://session/1"));
    assert!(
        !registry.isolates("keeper://listed"),
        "a shared module's listed URI"
    );
    // A later result naming alice's URI from another module, or the keeper's listed URI,
    // takes neither over.
    let entry = registry.find("maker__make").await.unwrap();
    registry
        .call(
            &entry,
            CallToolParams::new(entry.original.clone(), None),
            None,
            Some("alice"),
        )
        .await
        .unwrap();
    let kept = read("alice", "keeper://listed").await.unwrap().unwrap();
    assert!(kept.get().contains("the keeper's"), "{}", kept.get());
    let kept = read("alice", "keeper://listed").await.unwrap().unwrap();
    assert!(kept.get().contains("the keeper's"), "{}", kept.get());
}
