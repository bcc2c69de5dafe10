//! The tools/call pipeline: held until a person approves, run once, a decline heard once,
//! read-only calls never touching the store, policy refusals, and nothing crossing callers.

use std::sync::atomic::Ordering;

use gating_core::{GateMode, GatePolicy, PolicyRule};
use mcp_gate::{CallOutcome, Classified};
use serde_json::json;

use crate::support::{agent, harness, held, on_both_stores, params, person, result};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destructive_call_is_held_until_a_person_approves_then_an_identical_call_runs_it_once() {
    on_both_stores(|store| async move {
        let h = harness(store, GatePolicy::default()).await;
        let (alice, alices_person) = (agent("alice"), person("alice"));
        let args = json!({"path": "/a"});
        let first = h.call(&alice, "fs__write", args.clone(), None).await;
        let id = held(&first);
        // Asked again before anyone answers: the same question, not a second one.
        assert_eq!(
            held(&h.call(&alice, "fs__write", args.clone(), None).await),
            id
        );
        assert_eq!(h.writes.load(Ordering::SeqCst), 0, "nothing ran while held");
        h.answer(&alices_person, &id, json!({"confirmed": true}))
            .await;
        let ran = result(h.call(&alice, "fs__write", args.clone(), None).await);
        assert_eq!(ran["content"][0]["text"], "wrote \"/a\"", "{ran}");
        assert_eq!(h.writes.load(Ordering::SeqCst), 1);
        // Used once: the same call again is a new question.
        let again = held(&h.call(&alice, "fs__write", args, None).await);
        assert_ne!(again, id);
        assert_eq!(h.writes.load(Ordering::SeqCst), 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decline_and_its_note_are_heard_once_by_an_identical_call() {
    on_both_stores(|store| async move {
        let h = harness(store, GatePolicy::default()).await;
        let (alice, alices_person) = (agent("alice"), person("alice"));
        let args = json!({"path": "/b"});
        let id = held(&h.call(&alice, "fs__write", args.clone(), None).await);
        h.answer(
            &alices_person,
            &id,
            json!({"confirmed": false, "note": "not on this machine"}),
        )
        .await;
        let refused = result(h.call(&alice, "fs__write", args.clone(), None).await);
        assert_eq!(refused["isError"], true, "{refused}");
        assert_eq!(refused["structuredContent"]["user_rejected"], true);
        assert_eq!(refused["structuredContent"]["note"], "not on this machine");
        // Heard once: the next identical call is asked anew; nothing ever ran.
        assert_ne!(held(&h.call(&alice, "fs__write", args, None).await), id);
        assert_eq!(h.writes.load(Ordering::SeqCst), 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_runs_only_the_arguments_it_was_given_and_only_for_its_caller() {
    on_both_stores(|store| async move {
        let h = harness(store, GatePolicy::default()).await;
        let (alice, alices_person, bob) = (agent("alice"), person("alice"), agent("bob"));
        let id = held(
            &h.call(&alice, "fs__write", json!({"path": "/c"}), None)
                .await,
        );
        // Another caller cannot answer it: to them it does not exist.
        let refused = mcp_gate::answer(
            h.gateway.store().as_ref(),
            &person("bob"),
            id.parse().unwrap(),
            json!({"confirmed": true}),
            "test",
        )
        .await;
        assert!(refused.is_err(), "bob answered alice's confirmation");
        h.answer(&alices_person, &id, json!({"confirmed": true}))
            .await;
        // Other arguments naming the approval: not run, held on their own question.
        let other = h
            .call(&alice, "fs__write", json!({"path": "/etc"}), Some(&id))
            .await;
        assert!(
            !matches!(other, CallOutcome::Forwarded(_)),
            "an approval of /c ran /etc: {other:?}"
        );
        // Bob's identical call is his own question, the approval alice's.
        assert_ne!(
            held(&h.call(&bob, "fs__write", json!({"path": "/c"}), None).await),
            id
        );
        assert_eq!(h.writes.load(Ordering::SeqCst), 0);
        // Alice's own identical call runs it.
        result(
            h.call(&alice, "fs__write", json!({"path": "/c"}), Some(&id))
                .await,
        );
        assert_eq!(h.writes.load(Ordering::SeqCst), 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_call_is_forwarded_and_a_denied_one_refused_without_the_store() {
    on_both_stores(|store| async move {
        let policy = GatePolicy::default().with_rule(PolicyRule::new("fs__write", GateMode::Deny));
        let h = harness(store, policy).await;
        let alice = agent("alice");
        let classified = h
            .gateway
            .classify(&alice, params("fs__read", json!({}), None))
            .await
            .unwrap();
        assert!(
            matches!(classified, Classified::Forward(..)),
            "{classified:?}"
        );
        let read = result(h.gateway.run(&alice, classified, None).await);
        assert_eq!(read["content"][0]["text"], "contents");
        let denied = result(
            h.call(&alice, "fs__write", json!({"path": "/d"}), None)
                .await,
        );
        assert_eq!(
            denied["structuredContent"]["policy_denied"], true,
            "{denied}"
        );
        assert_eq!(h.writes.load(Ordering::SeqCst), 0);
        // Neither asked anyone anything.
        let listed = h
            .gateway
            .store()
            .list(
                &alice.caller,
                elicitation_store::ListQuery {
                    status: None,
                    limit: 10,
                },
            )
            .await
            .unwrap();
        assert!(listed.is_empty(), "{listed:?}");
    })
    .await;
}
