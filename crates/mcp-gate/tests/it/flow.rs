//! The flow through the library: a call held by the lethal-trifecta rule cannot be answered
//! with a standing grant (the person's answer is decided with the caller's flow, as the
//! call was), and another caller's flow is not this one's.

use gating_core::flow::FlowRule;
use gating_core::{FlowLabel, FlowLabels, FlowPolicy, GatePolicy, ToolPattern, TrifectaMode};
use mcp_gate::Approving;
use serde_json::json;

use crate::support::{agent, harness, held, on_both_stores, person, result};

fn labelled() -> GatePolicy {
    let label = |tool: &str, labels: &[FlowLabel]| FlowRule {
        tool: ToolPattern::parse(tool),
        labels: FlowLabels::of(labels.iter().copied()),
    };
    GatePolicy::default().with_flow(FlowPolicy {
        rules: vec![
            label("fs__read", &[FlowLabel::Untrusted, FlowLabel::Private]),
            label("fs__write", &[FlowLabel::SendsOut]),
        ],
        trifecta: TrifectaMode::Hold,
        ..FlowPolicy::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_trifecta_holds_cannot_be_answered_with_a_grant() {
    on_both_stores(|store| async move {
        let h = harness(store, labelled()).await;
        let (alice, alices_person) = (agent("alice"), person("alice"));
        result(
            h.call(&alice, "fs__read", json!({"path": "/x"}), None)
                .await,
        );
        let id = held(
            &h.call(&alice, "fs__write", json!({"path": "/b"}), None)
                .await,
        );
        let grant = json!({"scope": "tool", "for": "30m", "max_uses": 2});
        let refused = h
            .gateway
            .answer_with(
                &alices_person,
                id.parse().unwrap(),
                json!({"confirmed": true}),
                "test",
                Approving::Grant(&grant),
            )
            .await;
        assert!(refused.is_err(), "no grant for a call the trifecta holds");
        // Bob read nothing: his write may be granted.
        let bobs = held(
            &h.call(&agent("bob"), "fs__write", json!({"path": "/c"}), None)
                .await,
        );
        let made = h
            .gateway
            .answer_with(
                &person("bob"),
                bobs.parse().unwrap(),
                json!({"confirmed": true}),
                "test",
                Approving::Grant(&grant),
            )
            .await;
        assert!(
            made.is_ok_and(|(_, _, grant)| grant.is_some()),
            "bob's flow is his"
        );
    })
    .await;
}
