//! An embedder's own tools through the gate's own steps (`classify_own`, `run_own`,
//! `resolve_own`): held, settled, run once by the embedder's code and audited as a
//! module's call is.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use elicitation_store::AuditQuery;
use gating_core::{GateMode, GatePolicy, PolicyRule};
use mcp_gate::{CallOutcome, Classified, ClientAnswer, OwnTool};
use mcp_upstream::ModuleError;
use mcp_upstream::registry::ToolEntry;
use mcp_wire::CallToolParams;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::support::{Harness, agent, harness, held, on_both_stores, params, person, result};

/// The embedder's tool: remembers every call it ran.
#[derive(Default)]
struct Orders {
    ran: Mutex<Vec<CallToolParams>>,
}

impl OwnTool for Orders {
    fn run(
        &self,
        params: CallToolParams,
    ) -> Pin<Box<dyn Future<Output = Result<Box<RawValue>, ModuleError>> + Send + '_>> {
        Box::pin(async move {
            let arguments = params.arguments.as_ref().map(|a| a.to_value().unwrap());
            self.ran.lock().unwrap().push(params);
            let text = format!("deleted {}", arguments.unwrap_or(Value::Null)["order"]);
            let result = json!({"content": [{"type": "text", "text": text}]});
            Ok(RawValue::from_string(result.to_string()).unwrap())
        })
    }
}

fn entry(name: &str, annotations: Value) -> Arc<ToolEntry> {
    let tool = json!({"name": name, "inputSchema": {"type": "object"}, "annotations": annotations});
    Arc::new(ToolEntry::own("orders", tool).unwrap())
}

async fn call(
    h: &Harness,
    tool: &Orders,
    name: &str,
    annotations: Value,
    args: Value,
    confirmation: Option<&str>,
) -> CallOutcome {
    let alice = agent("alice");
    let classified = h
        .gateway
        .classify_own(
            &alice,
            entry(name, annotations),
            params(name, args, confirmation),
        )
        .await
        .unwrap();
    h.gateway.run_own(&alice, classified, tool).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_own_destructive_tool_is_held_then_run_once_by_the_embedder_and_audited() {
    on_both_stores(|store| async move {
        let h = harness(store, GatePolicy::default()).await;
        let orders = Orders::default();
        let destructive = json!({"destructiveHint": true});
        let args = json!({"order": 1042});
        let first = call(
            &h,
            &orders,
            "delete_order",
            destructive.clone(),
            args.clone(),
            None,
        )
        .await;
        let id = held(&first);
        assert!(orders.ran.lock().unwrap().is_empty(), "held: nothing ran");
        h.answer(&person("alice"), &id, json!({"confirmed": true}))
            .await;
        // The retry echoes the held result's SEP-2643 context id, as a standard client does.
        let echoed = first_context_id(&first);
        assert_eq!(echoed, id);
        let ran = call_echoing(
            &h,
            &orders,
            "delete_order",
            destructive.clone(),
            args.clone(),
            &echoed,
        )
        .await;
        assert_eq!(result(ran)["content"][0]["text"], "deleted 1042");
        {
            let ran = orders.ran.lock().unwrap();
            assert_eq!(ran.len(), 1);
            assert_eq!(ran[0].name, "delete_order");
            assert_eq!(
                ran[0].confirmation_id(),
                None,
                "the gate's own _meta stays with the gate"
            );
        }
        // The approval was used: naming it again is held anew and runs nothing.
        let again = call(&h, &orders, "delete_order", destructive, args, Some(&id)).await;
        assert_ne!(held(&again), id);
        assert_eq!(orders.ran.lock().unwrap().len(), 1);
        // Audited as a module's call: held, forwarded, completed.
        let page = h
            .gateway
            .trail()
            .audit_events(
                &agent("auditor").caller,
                &AuditQuery {
                    tool: Some("delete_order".into()),
                    limit: 100,
                    ..AuditQuery::default()
                },
            )
            .await
            .unwrap();
        let events: Vec<&str> = page.entries.iter().map(|e| e.event.as_str()).collect();
        for expected in ["tool_call_held", "tool_call_forwarded"] {
            assert!(events.contains(&expected), "{expected} in {events:?}");
        }
    })
    .await;
}

/// The context id of a held call's SEP-2643 denial.
fn first_context_id(outcome: &CallOutcome) -> String {
    let CallOutcome::NeedsConfirmation(pending) = outcome else {
        panic!("held: {outcome:?}")
    };
    let result = gating_core::held_result(&pending.confirmation, &pending.surfaces);
    result["_meta"][mcp_wire::denial::META_AUTHORIZATION]["authorizationContextId"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A call echoing `context` under SEP-2643's retry key, with no `confirmation_id`.
async fn call_echoing(
    h: &Harness,
    tool: &Orders,
    name: &str,
    annotations: Value,
    args: Value,
    context: &str,
) -> CallOutcome {
    let alice = agent("alice");
    let mut params = params(name, args, None);
    let mut meta = serde_json::Map::new();
    meta.insert(
        mcp_wire::denial::META_AUTHORIZATION_CONTEXT_ID.into(),
        json!(context),
    );
    params.meta = Some(meta);
    let classified = h
        .gateway
        .classify_own(&alice, entry(name, annotations), params)
        .await
        .unwrap();
    h.gateway.run_own(&alice, classified, tool).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_own_read_only_tool_runs_and_a_denied_one_never_does() {
    on_both_stores(|store| async move {
        let mut deny = PolicyRule::new("drop_*", GateMode::Deny);
        deny.reason = Some("never from an agent".into());
        let policy = GatePolicy::default().with_rule(deny);
        let h = harness(store, policy).await;
        let orders = Orders::default();
        let read = call(
            &h,
            &orders,
            "list_orders",
            json!({"readOnlyHint": true}),
            json!({"order": 1}),
            None,
        )
        .await;
        assert_eq!(result(read)["content"][0]["text"], "deleted 1");
        let denied = call(
            &h,
            &orders,
            "drop_orders",
            json!({"readOnlyHint": true}),
            json!({}),
            None,
        )
        .await;
        let denied = result(denied);
        assert_eq!(denied["isError"], true);
        assert!(
            denied.to_string().contains("never from an agent"),
            "{denied}"
        );
        assert_eq!(orders.ran.lock().unwrap().len(), 1, "only the read ran");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_in_the_callers_client_settles_an_own_call_and_a_dismissal_leaves_it_held() {
    on_both_stores(|store| async move {
        let h = harness(store, GatePolicy::default()).await;
        let orders = Orders::default();
        let alice = agent("alice");
        let asker = person("alice");
        let classified = h
            .gateway
            .classify_own(
                &alice,
                entry("delete_order", json!({"destructiveHint": true})),
                params("delete_order", json!({"order": 7}), None),
            )
            .await
            .unwrap();
        let Classified::Gated(call) = classified else {
            panic!("gated")
        };
        let CallOutcome::NeedsConfirmation(pending) =
            h.gateway.resolve_own(&alice, &call, None, &orders).await
        else {
            panic!("held")
        };
        let id = pending.confirmation.id;
        let dismissed = h
            .gateway
            .record_client_answer(&asker, id, json!({"action": "cancel"}))
            .await;
        assert_eq!(dismissed, ClientAnswer::Dismissed);
        let still = h
            .gateway
            .resolve_own(&alice, &call, Some(id), &orders)
            .await;
        assert_eq!(held(&still), id.to_string());
        let answered = h
            .gateway
            .record_client_answer(
                &asker,
                id,
                json!({"action": "accept", "content": {"confirmed": true}}),
            )
            .await;
        assert_eq!(answered, ClientAnswer::Answered);
        let ran = h
            .gateway
            .resolve_own(&alice, &call, Some(id), &orders)
            .await;
        assert_eq!(result(ran)["content"][0]["text"], "deleted 7");
        assert_eq!(orders.ran.lock().unwrap().len(), 1);
    })
    .await;
}

#[test]
fn an_own_tool_needs_a_valid_name() {
    for bad in [
        json!({}),
        json!({"name": ""}),
        json!({"name": "a b"}),
        json!({"name": 7}),
    ] {
        assert!(ToolEntry::own("orders", bad.clone()).is_none(), "{bad}");
    }
    let entry = ToolEntry::own("orders", json!({"name": "delete_order"})).unwrap();
    assert_eq!(entry.qualified, "delete_order");
    assert!(entry.trusted, "an embedder's own annotations are believed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classification_handed_to_the_other_runner_runs_nothing() {
    let h = harness(
        Arc::new(elicitation_store::MemoryStore::default()),
        GatePolicy::default(),
    )
    .await;
    let orders = Orders::default();
    let alice = agent("alice");
    // An own tool's call handed to the gateway's run (its modules): refused, nothing ran.
    let own = h
        .gateway
        .classify_own(
            &alice,
            entry("list_orders", json!({"readOnlyHint": true})),
            params("list_orders", json!({}), None),
        )
        .await
        .unwrap();
    let refused = result(h.gateway.run(&alice, own, None).await);
    assert_eq!(refused["isError"], true, "{refused}");
    // A module's call handed to the embedder's runner: refused, neither ran.
    let module = h
        .gateway
        .classify(&alice, params("fs__read", json!({"path": "/a"}), None))
        .await
        .unwrap();
    let refused = result(h.gateway.run_own(&alice, module, &orders).await);
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(orders.ran.lock().unwrap().is_empty());
}
