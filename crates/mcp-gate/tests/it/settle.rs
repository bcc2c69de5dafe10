//! The settle step on its own (`Gateway::settle`), as an embedder that runs its own tool
//! uses it: it decides and takes the store steps, and never runs the call.

use std::sync::atomic::Ordering;

use gating_core::GatePolicy;
use mcp_gate::{Approving, Classified, GatedCall, RunBy, Settled};
use serde_json::json;

use crate::support::{Harness, agent, harness, on_both_stores, params, person};

async fn gated(h: &Harness, args: serde_json::Value) -> GatedCall {
    match h
        .gateway
        .classify(&agent("alice"), params("fs__write", args, None))
        .await
        .unwrap()
    {
        Classified::Gated(call) => *call,
        other => panic!("fs__write is gated: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settling_holds_then_lets_an_approved_call_run_once_and_never_runs_it_itself() {
    on_both_stores(|store| async move {
        let h = harness(store, GatePolicy::default()).await;
        let alice = agent("alice");
        let call = gated(&h, json!({"path": "/a"})).await;
        let Settled::Held(pending) = h.gateway.settle(&alice, &call, None).await else {
            panic!("held first")
        };
        let id = pending.confirmation.id;
        // Asked again before anyone answers: the same confirmation, not a new one.
        let Settled::Held(again) = h.gateway.settle(&alice, &call, Some(id)).await else {
            panic!("still held")
        };
        assert_eq!(again.confirmation.id, id);
        h.answer(
            &person("alice"),
            &id.to_string(),
            json!({"confirmed": true}),
        )
        .await;
        let Settled::Run(run) = h.gateway.settle(&alice, &call, Some(id)).await else {
            panic!("approved: it may run")
        };
        assert_eq!(run.by, RunBy::Confirmation(id));
        assert_eq!(run.edited, None);
        assert_eq!(run.params.name, "fs__write");
        assert_eq!(h.writes.load(Ordering::SeqCst), 0, "settling runs nothing");
        // The approval was consumed by that step: naming it again is asked anew.
        let Settled::Held(anew) = h.gateway.settle(&alice, &call, Some(id)).await else {
            panic!("used approvals do not run twice")
        };
        assert_ne!(anew.confirmation.id, id);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settling_gives_a_persons_edited_arguments_a_decline_and_a_grants_use() {
    on_both_stores(|store| async move {
        let h = harness(store, GatePolicy::default()).await;
        let alice = agent("alice");
        // Edited: the run carries the person's arguments, and says so.
        let call = gated(&h, json!({"path": "/etc/passwd"})).await;
        let Settled::Held(pending) = h.gateway.settle(&alice, &call, None).await else {
            panic!("held")
        };
        let id = pending.confirmation.id;
        let safer = json!({"path": "/tmp/passwd"});
        h.gateway
            .answer_with(
                &person("alice"),
                id,
                json!({"confirmed": true}),
                "test",
                Approving::Arguments(&safer),
            )
            .await
            .unwrap();
        let Settled::Run(run) = h.gateway.settle(&alice, &call, Some(id)).await else {
            panic!("approved with other arguments")
        };
        assert_eq!(run.edited.as_ref(), Some(&safer));
        let sent = serde_json::to_value(run.params.arguments.as_ref().unwrap()).unwrap();
        assert_eq!(sent, safer);
        // Declined: the gate's answer, nothing to run.
        let call = gated(&h, json!({"path": "/b"})).await;
        let Settled::Held(pending) = h.gateway.settle(&alice, &call, None).await else {
            panic!("held")
        };
        let id = pending.confirmation.id;
        h.answer(
            &person("alice"),
            &id.to_string(),
            json!({"confirmed": false}),
        )
        .await;
        let Settled::Answer(refusal) = h.gateway.settle(&alice, &call, Some(id)).await else {
            panic!("declined")
        };
        assert_eq!(refusal["isError"], true, "{refusal}");
        // Granted: the next call runs under the grant's use.
        let call = gated(&h, json!({"path": "/c"})).await;
        let Settled::Held(pending) = h.gateway.settle(&alice, &call, None).await else {
            panic!("held")
        };
        let grant = json!({"scope": "tool", "for": "30m", "max_uses": 1});
        h.gateway
            .answer_with(
                &person("alice"),
                pending.confirmation.id,
                json!({"confirmed": true}),
                "test",
                Approving::Grant(&grant),
            )
            .await
            .unwrap();
        let other = gated(&h, json!({"path": "/d"})).await;
        let Settled::Run(run) = h.gateway.settle(&alice, &other, None).await else {
            panic!("covered by the grant")
        };
        assert!(matches!(run.by, RunBy::Grant(_)), "{:?}", run.by);
        assert_eq!(h.writes.load(Ordering::SeqCst), 0);
    })
    .await;
}
