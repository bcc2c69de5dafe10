//! The gate the tests drive: a gateway over one module (`fs__write`, destructive and
//! counted; `fs__read`; `fs__wipe`, destructive), callers and people, calls, answers and
//! what they come to.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use elicitation_store::{Caller, ElicitationStore, KeyRing, MemoryStore, PostgresStore, Store};
use gating_core::GatePolicy;
use mcp_auth::{Principal, SCOPE_RESPOND, SCOPE_TOOLS_CALL};
use mcp_gate::{CallOutcome, Gateway};
use mcp_upstream::inproc::{InProcessModule, InProcessTool, text_result};
use mcp_upstream::registry::{ModuleSpec, Registry};
use mcp_wire::CallToolParams;
use mcp_wire::tools::Arguments;
use serde_json::{Map, Value, json};

/// A gateway over one module: `fs__write` (destructive, counted), `fs__read` and `fs__wipe`.
pub(crate) struct Harness {
    pub(crate) gateway: Gateway,
    pub(crate) writes: Arc<AtomicUsize>,
}

pub(crate) async fn harness(store: Arc<dyn Store>, policy: GatePolicy) -> Harness {
    let elicitations: Arc<dyn ElicitationStore> = store.clone();
    harness_over(store, elicitations, policy).await
}

/// A gateway whose elicitations are `elicitations` (a double's), the rest `store`'s.
pub(crate) async fn harness_over(
    store: Arc<dyn Store>,
    elicitations: Arc<dyn ElicitationStore>,
    policy: GatePolicy,
) -> Harness {
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
            InProcessTool::new(
                json!({"name": "wipe", "description": "Wipes a disk.", "inputSchema": {"type": "object"},
                       "annotations": {"destructiveHint": true}}),
                |_| Ok(text_result("wiped", false)),
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
        gateway: Gateway::new(registry, store, policy, true).with_elicitations(elicitations),
        writes,
    }
}

pub(crate) fn principal(subject: &str, scope: &str) -> Principal {
    Principal {
        caller: Caller::new(subject, None).unwrap(),
        scopes: BTreeSet::from([scope.to_owned()]),
        authenticated: true,
        groups: BTreeSet::new(),
        client: None,
        subject_token: None,
    }
}

pub(crate) fn agent(subject: &str) -> Principal {
    principal(subject, SCOPE_TOOLS_CALL)
}

pub(crate) fn person(subject: &str) -> Principal {
    principal(subject, SCOPE_RESPOND)
}

pub(crate) fn params(tool: &str, args: Value, confirmation: Option<&str>) -> CallToolParams {
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
    pub(crate) async fn call(
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
    pub(crate) async fn answer(&self, who: &Principal, id: &str, payload: Value) {
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
pub(crate) fn held(outcome: &CallOutcome) -> String {
    match outcome {
        CallOutcome::NeedsConfirmation(pending) => pending.confirmation.id.to_string(),
        other => panic!("expected a held call, got {other:?}"),
    }
}

pub(crate) fn result(outcome: CallOutcome) -> Value {
    match outcome {
        CallOutcome::Done(value) => value,
        CallOutcome::Forwarded(raw) => serde_json::from_str(raw.get()).unwrap(),
        other => panic!("expected a result, got {other:?}"),
    }
}

pub(crate) async fn postgres() -> Arc<dyn Store> {
    let db = elicitation_store::test_support::TestDb::new().await;
    let keys = KeyRing::parse("k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=").unwrap();
    let mut options = db.options(keys);
    options.pool_size = 4;
    Arc::new(PostgresStore::connect(options).await.unwrap())
}

/// Both stores, one after the other.
pub(crate) async fn on_both_stores<F, Fut>(test: F)
where
    F: Fn(Arc<dyn Store>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    test(Arc::new(MemoryStore::default())).await;
    test(postgres().await).await;
}
