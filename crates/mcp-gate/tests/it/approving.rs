//! A person's approval with more than yes, through the library: a standing grant runs its
//! uses and then the call is held again; edited arguments are what runs, and the agent is
//! told so.

use std::sync::atomic::Ordering;

use gating_core::GatePolicy;
use mcp_gate::Approving;
use serde_json::json;

use crate::support::{agent, harness, held, on_both_stores, person, result};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_runs_its_uses_and_then_the_call_is_held_again() {
    on_both_stores(|store| async move {
        let h = harness(store, GatePolicy::default()).await;
        let (alice, alices_person) = (agent("alice"), person("alice"));
        let id = held(
            &h.call(&alice, "fs__write", json!({"path": "/a"}), None)
                .await,
        );
        let grant = json!({"scope": "tool", "for": "30m", "max_uses": 2});
        let (_, _, made) = h
            .gateway
            .answer_with(
                &alices_person,
                id.parse().unwrap(),
                json!({"confirmed": true}),
                "test",
                Approving::Grant(&grant),
            )
            .await
            .unwrap();
        assert!(made.is_some(), "a grant was made");
        // The approved call redeems its confirmation, not a use of the grant.
        result(
            h.call(&alice, "fs__write", json!({"path": "/a"}), Some(&id))
                .await,
        );
        for path in ["/b", "/c"] {
            result(
                h.call(&alice, "fs__write", json!({"path": path}), None)
                    .await,
            );
        }
        assert_eq!(h.writes.load(Ordering::SeqCst), 3);
        held(
            &h.call(&alice, "fs__write", json!({"path": "/d"}), None)
                .await,
        );
        assert_eq!(h.writes.load(Ordering::SeqCst), 3, "the third is held");
        // Another caller's calls are not covered by alice's grant.
        held(
            &h.call(&agent("bob"), "fs__write", json!({"path": "/e"}), None)
                .await,
        );
        assert_eq!(h.writes.load(Ordering::SeqCst), 3);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edited_arguments_are_what_runs_and_the_agent_is_told() {
    on_both_stores(|store| async move {
        let h = harness(store, GatePolicy::default()).await;
        let (alice, alices_person) = (agent("alice"), person("alice"));
        let asked = json!({"path": "/etc/passwd"});
        let id = held(&h.call(&alice, "fs__write", asked.clone(), None).await);
        let edited = json!({"path": "/tmp/safe"});
        h.gateway
            .answer_with(
                &alices_person,
                id.parse().unwrap(),
                json!({"confirmed": true}),
                "test",
                Approving::Arguments(&edited),
            )
            .await
            .unwrap();
        // The agent's identical call runs the person's arguments, once.
        let ran = result(h.call(&alice, "fs__write", asked.clone(), None).await);
        assert_eq!(ran["content"][0]["text"], "wrote \"/tmp/safe\"", "{ran}");
        assert!(
            ran.to_string().contains("changed the arguments"),
            "the agent is told: {ran}"
        );
        assert_eq!(h.writes.load(Ordering::SeqCst), 1);
        assert_ne!(held(&h.call(&alice, "fs__write", asked, None).await), id);
    })
    .await;
}
