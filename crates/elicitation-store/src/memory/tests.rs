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

#[tokio::test]
async fn a_full_store_drops_the_oldest_terminal_elicitation_first() {
    let clock = Arc::new(ManualClock::new(start_time()));
    let limits = MemoryLimits {
        max_pending_per_caller: 10,
        max_records: 2,
    };
    let store = MemoryStore::new(clock.clone(), limits);
    let alice = Caller::new("alice", None).unwrap();
    let spec = ElicitationSpec::confirmation("ok?").unwrap();
    let first = store
        .create(&alice, spec.clone(), Duration::minutes(1))
        .await
        .unwrap();
    clock.advance(Duration::seconds(1));
    let second = store
        .create(&alice, spec.clone(), Duration::minutes(1))
        .await
        .unwrap();
    assert!(matches!(
        store
            .create(&alice, spec.clone(), Duration::minutes(1))
            .await,
        Err(StoreError::Full { limit: 2 })
    ));
    store
        .respond(&alice, first.id, serde_json::json!({"confirmed": true}))
        .await
        .unwrap();
    let third = store
        .create(&alice, spec, Duration::minutes(1))
        .await
        .unwrap();
    assert!(matches!(
        store.get(&alice, first.id).await,
        Err(StoreError::NotFound { .. })
    ));
    store.get(&alice, second.id).await.unwrap();
    store.get(&alice, third.id).await.unwrap();
}
