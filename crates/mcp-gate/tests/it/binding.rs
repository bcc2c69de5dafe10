//! What goes upstream is what was decided on: the arguments a person approved, or a rule
//! read, and never another reading of the client's text (a JSON object with a key twice).

use gating_core::{GateMode, GatePolicy, PolicyRule, When};
use mcp_gate::Classified;
use serde_json::json;

use crate::support::{agent, harness};
use elicitation_store::MemoryStore;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_call_goes_upstream_with_the_arguments_the_person_approved_not_the_clients_text() {
    let h = harness(Arc::new(MemoryStore::default()), GatePolicy::default()).await;
    // A duplicate key: this gateway reads the last one; a module's parser might read the
    // first. The person is shown, and the digest binds, the last.
    let params: mcp_wire::CallToolParams = serde_json::from_str(
        r#"{"name":"fs__write","arguments":{"path":"/tmp/x","path":"/etc","n":1.0}}"#,
    )
    .unwrap();
    let Classified::Gated(call) = h.gateway.classify(&agent("alice"), params).await.unwrap() else {
        panic!("write is gated")
    };
    assert!(call.message.text.contains("/etc"), "{}", call.message.text);
    let upstream = serde_json::to_string(&call.params.clone().into_upstream("write")).unwrap();
    assert!(
        !upstream.contains("/tmp/x") && upstream.contains("/etc"),
        "what goes upstream is what was approved: {upstream}"
    );
    assert_eq!(
        call.binding.digest,
        gating_core::CallDigest::of(&json!({"path": "/etc", "n": 1.0}))
    );
}

/// The same attack on a rule: an allow rule reads the last of two `path`s; the call goes
/// upstream with only that one, so a module whose parser reads the first cannot be sent
/// somewhere the rule never saw. So too for a shadowed call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_a_rule_lets_through_goes_upstream_as_the_rule_read_it() {
    let policy = GatePolicy::default()
        .with_rule(
            PolicyRule::new("fs__write", GateMode::Allow)
                .when(When::compile("args.path.startsWith('/tmp/')").unwrap()),
        )
        .with_rule(
            PolicyRule::new("fs__wipe", GateMode::Shadow)
                .when(When::compile("has(args.path)").unwrap()),
        );
    let h = harness(Arc::new(MemoryStore::default()), policy).await;
    for (text, tool) in [
        (
            r#"{"name":"fs__write","arguments":{"path":"/etc","path":"/tmp/x"}}"#,
            "write",
        ),
        (
            r#"{"name":"fs__wipe","arguments":{"path":"/etc","path":"/tmp/x"}}"#,
            "wipe",
        ),
    ] {
        let params: mcp_wire::CallToolParams = serde_json::from_str(text).unwrap();
        let params = match h.gateway.classify(&agent("alice"), params).await.unwrap() {
            Classified::Forward(_, params) | Classified::Shadow(_, params, _) => params,
            other => panic!("{tool} is let through by its rule: {other:?}"),
        };
        let upstream = serde_json::to_string(&params.into_upstream(tool)).unwrap();
        assert!(
            upstream.contains("/tmp/x") && !upstream.contains("/etc"),
            "what goes upstream is what the rule read: {upstream}"
        );
    }
}
