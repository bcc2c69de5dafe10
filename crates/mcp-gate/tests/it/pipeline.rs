//! The tools/call pipeline: held until a person approves, run once, a decline heard once,
//! read-only calls never touching the store, policy refusals, and nothing crossing callers.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use elicitation_store::{Caller, KeyRing, MemoryStore, PostgresOptions, PostgresStore, Store};
use gating_core::{GateMode, GatePolicy, PolicyRule};
use mcp_auth::{Principal, SCOPE_RESPOND, SCOPE_TOOLS_CALL};
use mcp_gate::{CallOutcome, Classified, Gateway};
use mcp_upstream::inproc::{InProcessModule, InProcessTool, text_result};
use mcp_upstream::registry::{ModuleSpec, Registry};
use mcp_wire::CallToolParams;
use mcp_wire::tools::Arguments;
use serde_json::{Map, Value, json};

/// A gateway over one module: `fs__write` (destructive, counted) and `fs__read`.
struct Harness {
    gateway: Gateway,
    writes: Arc<AtomicUsize>,
}

async fn harness(store: Arc<dyn Store>, policy: GatePolicy) -> Harness {
    let writes = Arc::new(AtomicUsize::new(0));
    let counted = writes.clone();
    let module = InProcessModule::new(
        "fs",
        vec![
            InProcessTool::new(
                json!({"name": "write", "description": "Writes a file.", "inputSchema": {"type": "object"},
                       "annotations": {"readOnlyHint": false, "destructiveHint": true}}),
                move |args| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    Ok(text_result(&format!("wrote {}", args["path"]), false))
                },
            ),
            InProcessTool::new(
                json!({"name": "read", "description": "Reads a file.", "inputSchema": {"type": "object"},
                       "annotations": {"readOnlyHint": true}}),
                |_| Ok(text_result("contents", false)),
            ),
        ],
    );
    let registry = Registry::start(vec![ModuleSpec {
        isolation: None,
        name: "fs".into(),
        prefix: "fs".into(),
        trust_annotations: true,
        module: Arc::new(module),
    }])
    .await
    .unwrap();
    Harness {
        gateway: Gateway::new(registry, store, policy, true),
        writes,
    }
}

fn principal(subject: &str, scope: &str) -> Principal {
    Principal {
        caller: Caller::new(subject, None).unwrap(),
        scopes: BTreeSet::from([scope.to_owned()]),
        authenticated: true,
        groups: BTreeSet::new(),
        client: None,
        subject_token: None,
    }
}

fn agent(subject: &str) -> Principal {
    principal(subject, SCOPE_TOOLS_CALL)
}

fn person(subject: &str) -> Principal {
    principal(subject, SCOPE_RESPOND)
}

fn params(tool: &str, args: Value, confirmation: Option<&str>) -> CallToolParams {
    let mut params = CallToolParams::new(
        tool.to_owned(),
        Some(Arguments::from_map(args.as_object().unwrap())),
    );
    if let Some(id) = confirmation {
        let mut meta = Map::new();
        meta.insert("confirmation_id".into(), json!(id));
        params.meta = Some(meta);
    }
    params
}

impl Harness {
    async fn call(
        &self,
        who: &Principal,
        tool: &str,
        args: Value,
        id: Option<&str>,
    ) -> CallOutcome {
        let classified = self
            .gateway
            .classify(who, params(tool, args, id))
            .await
            .unwrap();
        self.gateway.run(who, classified, None).await
    }

    /// The person answers confirmation `id` (as the page, REST and Slack do).
    async fn answer(&self, who: &Principal, id: &str, payload: Value) {
        mcp_gate::answer(
            self.gateway.store().as_ref(),
            who,
            id.parse().unwrap(),
            payload,
            "test",
        )
        .await
        .unwrap();
    }
}

/// The id of the confirmation a call waits for.
fn held(outcome: &CallOutcome) -> String {
    match outcome {
        CallOutcome::NeedsConfirmation(pending) => pending.confirmation.id.to_string(),
        other => panic!("expected a held call, got {other:?}"),
    }
}

fn result(outcome: CallOutcome) -> Value {
    match outcome {
        CallOutcome::Done(value) => value,
        CallOutcome::Forwarded(raw) => serde_json::from_str(raw.get()).unwrap(),
        other => panic!("expected a result, got {other:?}"),
    }
}

async fn postgres() -> Arc<dyn Store> {
    let db = elicitation_store::test_support::TestDb::new().await;
    let keys = KeyRing::parse("k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=").unwrap();
    let mut options = PostgresOptions::new("postgres://unused@localhost/unused", keys).unwrap();
    options.config = db.writer.clone();
    options.pool_size = 4;
    Arc::new(PostgresStore::connect(options).await.unwrap())
}

/// Both stores, one after the other.
async fn on_both_stores<F, Fut>(test: F)
where
    F: Fn(Arc<dyn Store>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    test(Arc::new(MemoryStore::default())).await;
    test(postgres().await).await;
}

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
