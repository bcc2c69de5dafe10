use std::sync::Arc;

use super::*;
use crate::ConfirmationRequest;
use crate::conformance::{Harness, Setup, conformance_tests, start_time};
use crate::store::ElicitationStore;
use crate::{ManualClock, Store};
use elicitation_core::{CancelReason, ElicitationSpec};
use time::Duration;

async fn make(setup: Setup) -> Harness {
    let clock = Arc::new(ManualClock::new(start_time()));
    let limits = MemoryLimits {
        max_pending_per_caller: setup.max_pending_per_caller,
        ..MemoryLimits::default()
    };
    let store: Arc<dyn Store> =
        Arc::new(MemoryStore::new(clock.clone(), limits).notify_on(setup.notify_events));
    Harness {
        twin: store.clone(),
        store,
        clock,
    }
}

conformance_tests!(make);

fn small_store() -> (Arc<ManualClock>, MemoryStore) {
    let clock = Arc::new(ManualClock::new(start_time()));
    let limits = MemoryLimits {
        max_pending_per_caller: 10,
        max_records: 2,
        max_records_per_caller: 2,
        ..MemoryLimits::default()
    };
    (clock.clone(), MemoryStore::new(clock, limits))
}

#[tokio::test]
async fn a_full_store_drops_the_oldest_finished_elicitation_first() {
    let (clock, store) = small_store();
    let alice = Caller::new("alice", None).unwrap();
    let spec = ElicitationSpec::confirmation("ok?").unwrap();
    let ttl = Duration::minutes(1);
    let first = store.create(&alice, spec.clone(), ttl).await.unwrap();
    clock.advance(Duration::seconds(1));
    let second = store.create(&alice, spec.clone(), ttl).await.unwrap();
    let full = store.create(&alice, spec.clone(), ttl).await;
    assert!(
        matches!(full, Err(StoreError::CallerFull { records: 2, .. })),
        "{full:?}"
    );
    let declined = serde_json::json!({"confirmed": false});
    store.respond(&alice, first.id, declined).await.unwrap();
    let third = store.create(&alice, spec, ttl).await.unwrap();
    let gone = store.get(&alice, first.id).await;
    assert!(matches!(gone, Err(StoreError::NotFound { .. })), "{gone:?}");
    store.get(&alice, second.id).await.unwrap();
    store.get(&alice, third.id).await.unwrap();
}

#[tokio::test]
async fn an_approved_unused_confirmation_is_never_evicted() {
    let (clock, store) = small_store();
    let alice = Caller::new("alice", None).unwrap();
    let spec = ElicitationSpec::confirmation("ok?").unwrap();
    let ttl = Duration::minutes(1);
    let approved = store.create(&alice, spec.clone(), ttl).await.unwrap();
    clock.advance(Duration::seconds(1));
    let other = store.create(&alice, spec.clone(), ttl).await.unwrap();
    let yes = serde_json::json!({"confirmed": true});
    store.respond(&alice, approved.id, yes).await.unwrap();
    let full = store.create(&alice, spec.clone(), ttl).await;
    assert!(
        matches!(full, Err(StoreError::CallerFull { records: 2, .. })),
        "{full:?}"
    );
    store
        .cancel(&alice, other.id, CancelReason::CancelledByCaller)
        .await
        .unwrap();
    store.create(&alice, spec, ttl).await.unwrap();
    store.get(&alice, approved.id).await.unwrap();
}

fn store_with(limits: MemoryLimits) -> (Arc<ManualClock>, MemoryStore) {
    let clock = Arc::new(ManualClock::new(start_time()));
    (clock.clone(), MemoryStore::new(clock, limits))
}

fn held(arguments: serde_json::Value) -> ConfirmationRequest {
    ConfirmationRequest::new(
        "fs__write",
        gating_core::CallDigest::of(&serde_json::json!({"name": "fs__write"})),
        arguments,
        "Write?",
        Duration::minutes(10),
    )
}

/// One MiB of text in the arguments.
fn mebibyte() -> serde_json::Value {
    serde_json::json!({"content": "x".repeat(1 << 20)})
}

#[tokio::test]
async fn one_callers_unused_approvals_never_fail_another_callers_call() {
    let (_, store) = store_with(MemoryLimits {
        max_records: 20,
        max_records_per_caller: 10,
        ..MemoryLimits::default()
    });
    let alice = Caller::new("alice", None).unwrap();
    let bob = Caller::new("bob", None).unwrap();
    // Alice approves every confirmation and never uses one: none can be dropped.
    let mut held_by_alice = 0;
    loop {
        match store
            .create_confirmation(&alice, held(serde_json::json!({"n": held_by_alice})))
            .await
        {
            Ok(stored) => {
                let yes = serde_json::json!({"confirmed": true});
                store
                    .respond(&alice, stored.elicitation.id, yes)
                    .await
                    .unwrap();
                held_by_alice += 1;
            }
            Err(StoreError::CallerFull { records: 10, .. }) => break,
            Err(other) => panic!("unexpected {other:?}"),
        }
        assert!(held_by_alice <= 10, "alice is held to her own budget");
    }
    for n in 0..10 {
        store
            .create_confirmation(&bob, held(serde_json::json!({"n": n})))
            .await
            .unwrap_or_else(|e| panic!("bob's call {n} failed because of alice: {e}"));
    }
}

#[tokio::test]
async fn the_store_is_bounded_in_bytes_and_finished_payloads_make_room() {
    let limits = MemoryLimits {
        max_bytes: 16 << 20,
        max_bytes_per_caller: 8 << 20,
        ..MemoryLimits::default()
    };
    let (_, store) = store_with(limits);
    let alice = Caller::new("alice", None).unwrap();
    // Create and cancel, 150 times, with 1 MiB of arguments each.
    for _ in 0..150 {
        let stored = store
            .create_confirmation(&alice, held(mebibyte()))
            .await
            .unwrap();
        store
            .cancel(
                &alice,
                stored.elicitation.id,
                CancelReason::CancelledByCaller,
            )
            .await
            .unwrap();
        assert!(
            store.usage().bytes <= limits.max_bytes_per_caller,
            "{:?}",
            store.usage()
        );
    }
    assert!(store.usage().records < 10, "{:?}", store.usage());
}

#[tokio::test]
async fn a_caller_over_its_byte_budget_is_refused_and_others_are_not() {
    let (_, store) = store_with(MemoryLimits {
        max_bytes: 64 << 20,
        max_bytes_per_caller: 4 << 20,
        ..MemoryLimits::default()
    });
    let alice = Caller::new("alice", None).unwrap();
    let bob = Caller::new("bob", None).unwrap();
    let mut pending = 0;
    let refusal = loop {
        match store.create_confirmation(&alice, held(mebibyte())).await {
            Ok(_) => pending += 1,
            Err(e) => break e,
        }
        assert!(pending < 10, "the byte budget holds");
    };
    assert!(
        matches!(refusal, StoreError::CallerFull { .. }),
        "{refusal:?}"
    );
    assert!(store.usage_of(&alice).bytes <= 4 << 20);
    store
        .create_confirmation(&bob, held(mebibyte()))
        .await
        .unwrap();
}

#[tokio::test]
async fn approved_unused_confirmations_are_dropped_once_past_their_ttl() {
    let (clock, store) = store_with(MemoryLimits {
        max_records: 3,
        max_records_per_caller: 3,
        ..MemoryLimits::default()
    });
    let alice = Caller::new("alice", None).unwrap();
    let mut approved = Vec::new();
    for n in 0..3 {
        let stored = store
            .create_confirmation(&alice, held(serde_json::json!({"n": n})))
            .await
            .unwrap();
        let yes = serde_json::json!({"confirmed": true});
        store
            .respond(&alice, stored.elicitation.id, yes)
            .await
            .unwrap();
        approved.push(stored.elicitation.id);
    }
    assert!(
        store
            .create_confirmation(&alice, held(serde_json::json!({"n": 3})))
            .await
            .is_err()
    );
    clock.advance(Duration::minutes(11));
    store
        .create_confirmation(&alice, held(serde_json::json!({"n": 4})))
        .await
        .expect("an approval past its TTL makes room");
    let gone = store.get(&alice, approved[0]).await;
    assert!(matches!(gone, Err(StoreError::NotFound { .. })), "{gone:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_totals_always_equal_what_the_entries_hold() {
    let (_, store) = store_with(MemoryLimits {
        max_records: 12,
        max_records_per_caller: 8,
        max_bytes: 1 << 20,
        max_bytes_per_caller: 600 << 10,
        ..MemoryLimits::default()
    });
    let store = Arc::new(store);
    let mut tasks = Vec::new();
    for who in ["alice", "bob", "carol"] {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let caller = Caller::new(who, None).unwrap();
            for n in 0..60 {
                let arguments = serde_json::json!({"n": n, "pad": "x".repeat(n * 997 % 50_000)});
                let Ok(stored) = store.create_confirmation(&caller, held(arguments)).await else {
                    continue;
                };
                let id = stored.elicitation.id;
                match n % 3 {
                    0 => {
                        let _ = store
                            .respond(&caller, id, serde_json::json!({"confirmed": false}))
                            .await;
                    }
                    1 => {
                        let _ = store
                            .cancel(&caller, id, CancelReason::CancelledByCaller)
                            .await;
                    }
                    _ => {}
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    store.assert_accounting();
    assert!(store.usage().bytes <= 1 << 20, "{:?}", store.usage());
}
