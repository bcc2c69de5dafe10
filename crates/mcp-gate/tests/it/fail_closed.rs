//! The gate fails closed: a store that fails or never answers forwards no gated call and
//! holds none, tells the agent so without its internals, and leaves read-only calls alone;
//! once it is back, an approval given before still runs, once.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use elicitation_store::MemoryStore;
use gating_core::GatePolicy;
use serde_json::{Value, json};

use crate::faulty::{Fault, FaultyStore, faulty};
use crate::support::{Harness, agent, harness_over, held, person, result};

fn assert_fails_closed(result: &Value) {
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(
        result["structuredContent"]["gate_unavailable"], true,
        "{result}"
    );
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("error id"), "{text}");
    assert!(
        !text.contains("test fault"),
        "no internals reach the agent: {text}"
    );
}

/// A gateway over a store double, alice's write of `/a` approved while it worked, then the
/// store turned to `fault`: the harness, the store and the approved confirmation.
async fn approved_then(fault: Fault) -> (Harness, Arc<FaultyStore>, String) {
    let store = faulty();
    let h = harness_over(
        Arc::new(MemoryStore::default()),
        store.clone(),
        GatePolicy::default(),
    )
    .await;
    let id = held(
        &h.call(&agent("alice"), "fs__write", json!({"path": "/a"}), None)
            .await,
    );
    h.answer(&person("alice"), &id, json!({"confirmed": true}))
        .await;
    store.set(fault);
    (h, store, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_store_fails_closed_and_read_only_calls_still_pass() {
    let (h, store, id) = approved_then(Fault::Error).await;
    let alice = agent("alice");
    // The store cannot consume the approval now: not forwarded.
    assert_fails_closed(&result(
        h.call(&alice, "fs__write", json!({"path": "/a"}), Some(&id))
            .await,
    ));
    // Nor can it hold a new call.
    assert_fails_closed(&result(
        h.call(&alice, "fs__write", json!({"path": "/b"}), None)
            .await,
    ));
    assert_eq!(h.writes.load(Ordering::SeqCst), 0);
    // A read-only call never touches the store.
    let read = result(h.call(&alice, "fs__read", json!({}), None).await);
    assert_eq!(read["content"][0]["text"], "contents", "{read}");
    // Back up: the same approval is still good, once.
    store.set(Fault::None);
    let done = result(
        h.call(&alice, "fs__write", json!({"path": "/a"}), Some(&id))
            .await,
    );
    assert_eq!(done["content"][0]["text"], "wrote \"/a\"", "{done}");
    assert_eq!(h.writes.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_store_that_never_answers_fails_closed_at_the_timeout() {
    let (h, _store, id) = approved_then(Fault::Silent).await;
    let alice = agent("alice");
    // Paused time: the gate's store timeout elapses as soon as everything waits.
    assert_fails_closed(&result(
        h.call(&alice, "fs__write", json!({"path": "/a"}), Some(&id))
            .await,
    ));
    assert_fails_closed(&result(
        h.call(&alice, "fs__write", json!({"path": "/c"}), None)
            .await,
    ));
    assert_eq!(h.writes.load(Ordering::SeqCst), 0);
}
