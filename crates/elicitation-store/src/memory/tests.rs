use std::sync::Arc;

use super::*;
use crate::ManualClock;
use crate::conformance::{Harness, Setup, conformance_tests, start_time};

async fn make(setup: Setup) -> Harness {
    let clock = Arc::new(ManualClock::new(start_time()));
    let limits = MemoryLimits {
        max_pending_per_caller: setup.max_pending_per_caller,
        ..MemoryLimits::default()
    };
    let store: Arc<dyn ElicitationStore> = Arc::new(MemoryStore::new(clock.clone(), limits));
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
        matches!(full, Err(StoreError::Full { limit: 2 })),
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
        matches!(full, Err(StoreError::Full { limit: 2 })),
        "{full:?}"
    );
    store
        .cancel(&alice, other.id, CancelReason::CancelledByCaller)
        .await
        .unwrap();
    store.create(&alice, spec, ttl).await.unwrap();
    store.get(&alice, approved.id).await.unwrap();
}
