//! What ends a hold without running it: a confirmation past its time, and the store's cap
//! on a caller's waiting confirmations (an in-band refusal, not an error).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use elicitation_store::{Clock, ElicitationStore, ManualClock, MemoryLimits, MemoryStore};
use gating_core::GatePolicy;
use serde_json::json;
use time::{Duration, OffsetDateTime};

use crate::support::{agent, harness, held, person, result};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_confirmation_never_forwards() {
    let clock = Arc::new(ManualClock::new(OffsetDateTime::now_utc()));
    let store = Arc::new(MemoryStore::new(clock.clone(), MemoryLimits::default()));
    let h = harness(store.clone(), GatePolicy::default()).await;
    let alice = agent("alice");
    // Unanswered and past its time.
    let unanswered = held(&h.call(&alice, "fs__write", json!({"p": 1}), None).await);
    // Answered, but used only after its time.
    let late = held(&h.call(&alice, "fs__write", json!({"p": 2}), None).await);
    h.answer(&person("alice"), &late, json!({"confirmed": true}))
        .await;
    clock.advance(Duration::minutes(11));
    store.expire_due(clock.now()).await.unwrap();
    let expired = result(
        h.call(&alice, "fs__write", json!({"p": 1}), Some(&unanswered))
            .await,
    );
    assert_eq!(expired["isError"], true, "{expired}");
    assert_eq!(
        expired["structuredContent"]["confirmation_expired"], true,
        "{expired}"
    );
    let again = h
        .call(&alice, "fs__write", json!({"p": 2}), Some(&late))
        .await;
    let fresh = held(&again);
    assert_ne!(fresh, late, "held anew, with a new confirmation");
    assert_eq!(h.writes.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_caller_pending_limit_is_an_in_band_refusal() {
    let limits = MemoryLimits {
        max_pending_per_caller: 2,
        ..MemoryLimits::default()
    };
    let store = Arc::new(MemoryStore::new(
        Arc::new(elicitation_store::SystemClock),
        limits,
    ));
    let h = harness(store, GatePolicy::default()).await;
    let alice = agent("alice");
    held(&h.call(&alice, "fs__write", json!({"p": 1}), None).await);
    held(&h.call(&alice, "fs__write", json!({"p": 2}), None).await);
    let third = result(h.call(&alice, "fs__write", json!({"p": 3}), None).await);
    assert_eq!(third["isError"], true, "{third}");
    assert_eq!(
        third["structuredContent"]["gate_unavailable"], true,
        "{third}"
    );
    assert!(
        third["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("2 confirmations waiting"),
        "{third}"
    );
    assert_eq!(h.writes.load(Ordering::SeqCst), 0);
}
