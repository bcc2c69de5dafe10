//! Tasks of 2025-11-25 through the gateway, against a module that runs tasks: listed with
//! their `execution` for a client that can ask for one, created at the module, handed to
//! the client under the gateway's own handle, and reachable (`tasks/get`, `tasks/result`,
//! `tasks/list`, `tasks/cancel`) by the caller who started them only. Attacked: another
//! caller, the module's own id, a forged handle, a gated or denied tool asked as a task.
//! The real peers (the everything server's task tool, the TypeScript SDK's client) are in
//! the gateway's e2e suite.

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use elicitation_store::MemoryStore;
use gating_core::GatePolicy;
use http::Request;
use http_body_util::{BodyExt, Full};
use mcp_auth::{Auth, SCOPE_TOOLS_CALL, TokenGrant, token_sha256};
use mcp_gate::Gateway;
use mcp_http::service::{McpService, ServiceConfig};
use mcp_upstream::registry::{ModuleSpec, Registry};
use mcp_upstream::{Module, ModuleError, Relay, ToolCall};
use serde_json::value::RawValue;
use serde_json::{Value, json};

const ALICE: &str = "tasks-alice-token";
const BOB: &str = "tasks-bob-token";

/// A module that runs `research` only as a task, `summarise` either way, `wipe`
/// (destructive) either way, and `plain` says nothing of tasks (but would make one of any
/// call that asks); its task ids are guessable (`up-1`, `up-2`, …), as a module's
/// may be.
#[derive(Default)]
struct Tasks {
    /// Whether what it sends about a request comes on that request's own channel (as over
    /// HTTP); `false`: on one connection every caller shares (as a shared stdio process).
    by_request: bool,
    /// Its life: a restart makes it forget its tasks (and reuse their ids).
    generation: std::sync::atomic::AtomicU64,
    created: AtomicUsize,
    /// Calls that reached it, by tool.
    calls: Mutex<Vec<String>>,
    /// Each task's status.
    status: Mutex<HashMap<String, &'static str>>,
}

fn raw(value: Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(&value).unwrap()
}

/// A key a module's task tells of, as if it echoed what it read.
const KEY: &str = "AKIAQ4WJ3DZQ7XKZN2PR";

fn task(id: &str, status: &str) -> Value {
    json!({"taskId": id, "status": status, "createdAt": "2026-12-05T00:00:00Z",
           "lastUpdatedAt": "2026-12-05T00:00:00Z", "ttl": 60000, "pollInterval": 100,
           "statusMessage": format!("reading with {KEY}")})
}

#[async_trait]
impl Module for Tasks {
    fn routes_by_request(&self) -> bool {
        self.by_request
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    async fn list_tools(&self) -> Result<Vec<Value>, ModuleError> {
        let tool = |name: &str, support: &str, destructive: bool| {
            json!({"name": name, "inputSchema": {"type": "object"},
                   "annotations": {"readOnlyHint": !destructive, "destructiveHint": destructive},
                   "execution": {"taskSupport": support}})
        };
        Ok(vec![
            tool("research", "required", false),
            tool("summarise", "optional", false),
            tool("wipe", "optional", true),
            json!({"name": "plain", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
        ])
    }

    async fn call_tool(&self, call: ToolCall<'_>) -> Result<Box<RawValue>, ModuleError> {
        self.calls.lock().unwrap().push(call.params.name.clone());
        if call.params.task().is_none() {
            return Ok(raw(
                json!({"content": [{"type": "text", "text": format!("{} ran", call.params.name)}]}),
            ));
        }
        let id = format!("up-{}", self.created.fetch_add(1, Ordering::SeqCst) + 1);
        self.status.lock().unwrap().insert(id.clone(), "working");
        Ok(raw(json!({"task": task(&id, "working")})))
    }

    async fn task_request(
        &self,
        method: &'static str,
        params: Value,
        _relay: Option<Arc<dyn Relay>>,
    ) -> Result<Box<RawValue>, ModuleError> {
        let id = params["taskId"].as_str().unwrap_or_default().to_owned();
        let mut status = self.status.lock().unwrap();
        let Some(now) = status.get_mut(&id) else {
            return Err(ModuleError::Rpc {
                module: "t".into(),
                code: -32602,
                message: format!("no task {id}"),
                data: None,
            });
        };
        match method {
            "tasks/get" => Ok(raw(task(&id, now))),
            "tasks/cancel" => {
                *now = "cancelled";
                Ok(raw(task(&id, "cancelled")))
            }
            // A cancelled task's result is the error it ended with, naming the task.
            "tasks/result" if *now == "cancelled" => Err(ModuleError::Rpc {
                module: "t".into(),
                code: -32603,
                message: format!("task {id} was cancelled"),
                data: Some(Box::new(json!({"taskId": id, "note": format!("see {id}")}))),
            }),
            _ => {
                *now = "completed";
                Ok(raw(json!({
                    "content": [{"type": "text", "text": format!("findings of {id}")}],
                    "_meta": {"io.modelcontextprotocol/related-task": {"taskId": id}},
                })))
            }
        }
    }
}

struct Harness {
    service: Arc<McpService>,
    module: Arc<Tasks>,
    store: Arc<MemoryStore>,
}

async fn harness(policy: GatePolicy) -> Harness {
    harness_of(
        policy,
        Tasks {
            by_request: true,
            ..Tasks::default()
        },
    )
    .await
}

async fn harness_of(policy: GatePolicy, module: Tasks) -> Harness {
    harness_with(policy, module, 16).await
}

async fn harness_with(policy: GatePolicy, module: Tasks, waits_per_caller: usize) -> Harness {
    harness_limited(policy, module, waits_per_caller, None).await
}

/// [`harness_with`], the gateway's per-caller call rate `calls` (none: no limit).
async fn harness_limited(
    policy: GatePolicy,
    module: Tasks,
    waits_per_caller: usize,
    calls: Option<mcp_gate::limits::Rate>,
) -> Harness {
    let module = Arc::new(module);
    let registry = Registry::start(vec![ModuleSpec {
        isolation: None,
        name: "t".into(),
        prefix: "t".into(),
        trust_annotations: true,
        module: module.clone(),
    }])
    .await
    .unwrap();
    let store = Arc::new(MemoryStore::default());
    let mut gateway = Gateway::new(registry, store.clone(), policy, false);
    if let Some(calls) = calls {
        let none = mcp_gate::limits::Rate {
            per_minute: 0,
            burst: 0,
        };
        gateway = gateway.with_limits(Arc::new(mcp_gate::limits::Limits::new(calls, none)));
    }
    let gateway = Arc::new(gateway);
    let grant = |subject: &str, token: &str| TokenGrant {
        subject: subject.into(),
        tenant: None,
        token_sha256: token_sha256(token),
        scopes: vec![SCOPE_TOOLS_CALL.into()],
        groups: Vec::new(),
    };
    let auth = Auth::tokens(vec![grant("alice", ALICE), grant("bob", BOB)]).unwrap();
    Harness {
        service: Arc::new(McpService::new(
            gateway,
            auth,
            ServiceConfig {
                max_streams_per_caller: waits_per_caller,
                ..ServiceConfig::default()
            },
        )),
        module,
        store,
    }
}

/// A 2025-11-25 session of `token`: what `send` needs to speak in it.
struct Session {
    token: &'static str,
    id: String,
}

impl Harness {
    /// Another handle on the same service (for a request sent from a task of its own).
    fn over(service: Arc<McpService>) -> Harness {
        Harness {
            service,
            module: Arc::default(),
            store: Arc::default(),
        }
    }

    async fn post(&self, headers: &[(&str, &str)], body: Value) -> Value {
        let mut request = Request::builder()
            .method("POST")
            .uri("/mcp")
            .header("host", "127.0.0.1:8080")
            .header("content-type", "application/json")
            .header("accept", "application/json");
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = self
            .service
            .handle(
                request
                    .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
                    .unwrap(),
            )
            .await;
        let session = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let mut answer: Value = serde_json::from_slice(&bytes).unwrap();
        if let Some(session) = session {
            answer["session"] = json!(session);
        }
        answer
    }

    async fn session(&self, token: &'static str) -> (Session, Value) {
        let auth = format!("Bearer {token}");
        let init = self
            .post(
                &[("authorization", &auth)],
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
            )
            .await;
        let id = init["session"].as_str().unwrap().to_owned();
        (Session { token, id }, init)
    }

    async fn send(&self, session: &Session, method: &str, params: Value) -> Value {
        let auth = format!("Bearer {}", session.token);
        self.post(
            &[
                ("authorization", &auth),
                ("mcp-session-id", &session.id),
                ("mcp-protocol-version", "2025-11-25"),
            ],
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
        )
        .await
    }
}

fn names(listed: &Value) -> Vec<String> {
    listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_task_runs_at_its_module_under_the_gateways_handle_for_its_caller_alone() {
    let h = harness(GatePolicy::default()).await;
    let (alice, init) = h.session(ALICE).await;
    assert_eq!(
        init["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"],
        json!({}),
        "task-augmented calls are offered: {init}"
    );

    // Listed with how each runs, for a client that can ask for a task.
    let listed = h.send(&alice, "tools/list", json!({})).await;
    assert_eq!(
        names(&listed),
        ["t__plain", "t__research", "t__summarise", "t__wipe"]
    );
    assert_eq!(
        listed["result"]["tools"][1]["execution"]["taskSupport"],
        "required"
    );
    // A 2026-07-28 client cannot ask for one: the task-only tool is not listed, the others
    // are listed without it.
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let modern = h
        .post(
            &[
                ("authorization", &format!("Bearer {ALICE}")),
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/list"),
            ],
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}),
        )
        .await;
    assert_eq!(
        names(&modern),
        ["t__plain", "t__summarise", "t__wipe"],
        "{modern}"
    );
    assert!(modern["result"]["tools"][1].get("execution").is_none());

    // The task is created at the module; the client holds the gateway's handle.
    let created = h
        .send(
            &alice,
            "tools/call",
            json!({"name": "t__research", "arguments": {}, "task": {"ttl": 60000}}),
        )
        .await;
    let handle = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();
    assert!(handle.starts_with("task-") && handle.len() > 30, "{handle}");
    assert_eq!(created["result"]["task"]["status"], "working");
    assert!(!created.to_string().contains("up-1"), "{created}");

    let got = h.send(&alice, "tasks/get", json!({"taskId": handle})).await;
    assert_eq!(got["result"]["taskId"], handle.as_str(), "{got}");
    assert_eq!(got["result"]["status"], "working");
    let listed = h.send(&alice, "tasks/list", json!({})).await;
    assert_eq!(
        listed["result"]["tasks"][0]["taskId"],
        handle.as_str(),
        "{listed}"
    );
    // What the module says of its task is scanned on every path, the listing's too.
    for seen in [&got, &listed] {
        assert!(!seen.to_string().contains(KEY), "{seen}");
    }
    assert_eq!(
        listed["result"]["tasks"][0]["statusMessage"], "reading with [REDACTED:secret]",
        "{listed}"
    );

    // Bob learns nothing of it: every request about it is about an unknown task, and his
    // list is empty.
    let (bob, _) = h.session(BOB).await;
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let refused = h.send(&bob, method, json!({"taskId": handle})).await;
        assert_eq!(refused["error"]["code"], -32602, "{method}: {refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("unknown task"),
            "{refused}"
        );
    }
    let bobs = h.send(&bob, "tasks/list", json!({})).await;
    assert_eq!(bobs["result"]["tasks"], json!([]), "{bobs}");
    // The module's own id, and a made-up handle, are no handles.
    for forged in ["up-1", "task-00000000000000000000000000000000", ""] {
        let refused = h.send(&alice, "tasks/get", json!({"taskId": forged})).await;
        assert_eq!(refused["error"]["code"], -32602, "{forged}: {refused}");
    }
    let refused = h.send(&alice, "tasks/get", json!({"taskId": 7})).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    // Its result, tied to the handle.
    let result = h
        .send(&alice, "tasks/result", json!({"taskId": handle}))
        .await;
    assert_eq!(
        result["result"]["content"][0]["text"], "findings of up-1",
        "the module's data as it is"
    );
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        handle.as_str()
    );
    let cancelled = h
        .send(&alice, "tasks/cancel", json!({"taskId": handle}))
        .await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    // Once the module has forgotten it, so has the gateway.
    h.module.status.lock().unwrap().clear();
    let gone = h.send(&alice, "tasks/get", json!({"taskId": handle})).await;
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
    let listed = h.send(&alice, "tasks/list", json!({})).await;
    assert_eq!(listed["result"]["tasks"], json!([]));

    // A tool that runs either way runs as the call asks.
    let plain = h
        .send(
            &alice,
            "tools/call",
            json!({"name": "t__summarise", "arguments": {}}),
        )
        .await;
    assert_eq!(
        plain["result"]["content"][0]["text"], "summarise ran",
        "{plain}"
    );
    // A tool that says nothing of tasks runs none: asked for one, the call runs to its
    // result and the module never sees `task`.
    let plain = h
        .send(
            &alice,
            "tools/call",
            json!({"name": "t__plain", "arguments": {}, "task": {"ttl": 60000}}),
        )
        .await;
    assert_eq!(
        plain["result"]["content"][0]["text"], "plain ran",
        "{plain}"
    );
}

/// The confirmation a held call's task waits on, from its `CreateTaskResult`.
fn confirmation_of(created: &Value) -> elicitation_core::ElicitationId {
    created["result"]["_meta"]["io.modelcontextprotocol/authorization"]["authorizationContextId"]
        .as_str()
        .unwrap_or_else(|| panic!("a held call's task: {created}"))
        .parse()
        .unwrap()
}

fn alice() -> elicitation_core::Caller {
    elicitation_core::Caller::new("alice", None).unwrap()
}

#[tokio::test]
async fn a_held_call_asked_as_a_task_is_a_task_that_runs_once_after_a_person_approves() {
    use elicitation_store::ElicitationStore;
    let h = harness(GatePolicy::default()).await;
    let (alice_session, _) = h.session(ALICE).await;
    let wipe = json!({"name": "t__wipe", "arguments": {"what": "logs"}, "task": {"ttl": 60000}});
    // Held: a task of the gateway's own, working while a person decides; nothing ran.
    let created = h.send(&alice_session, "tools/call", wipe.clone()).await;
    let task = &created["result"]["task"];
    assert_eq!(task["status"], "working", "{created}");
    let handle = task["taskId"].as_str().unwrap().to_owned();
    assert!(handle.starts_with("t1."), "{handle}");
    assert!(
        task["statusMessage"].as_str().unwrap().contains("approve"),
        "tells where a person answers: {created}"
    );
    assert_eq!(
        created["result"]["_meta"]["io.modelcontextprotocol/authorization"]["reason"],
        "insufficient_authorization"
    );
    let confirmation = confirmation_of(&created);
    let polled = h
        .send(&alice_session, "tasks/get", json!({"taskId": handle}))
        .await;
    assert_eq!(polled["result"]["status"], "working", "{polled}");
    // Bob cannot see it, wait on it or withdraw it.
    let (bob, _) = h.session(BOB).await;
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let refused = h.send(&bob, method, json!({"taskId": handle})).await;
        assert_eq!(refused["error"]["code"], -32602, "{method}: {refused}");
    }
    // A tampered handle is nobody's.
    let mut tampered = handle.clone().into_bytes();
    let last = tampered.len() - 2;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let refused = h
        .send(&alice_session, "tasks/get", json!({"taskId": tampered}))
        .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    // The client waits on the result; the person answers later.
    let waiting = {
        let service = h.service.clone();
        let session = alice_session.id.clone();
        let handle = handle.clone();
        tokio::spawn(async move {
            let h = Harness::over(service);
            let s = Session {
                token: ALICE,
                id: session,
            };
            h.send(&s, "tasks/result", json!({"taskId": handle})).await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        h.module.calls.lock().unwrap().is_empty(),
        "nothing runs before the answer"
    );
    h.store
        .respond(&alice(), confirmation, json!({"confirmed": true}))
        .await
        .unwrap();
    let result = waiting.await.unwrap();
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        handle.as_str(),
        "{result}"
    );
    // The module ran it (as a task of its own, whose result is this task's), once.
    assert_eq!(*h.module.calls.lock().unwrap(), ["wipe"]);
    assert!(
        result["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("findings of up-")
    );
    let done = h
        .send(&alice_session, "tasks/get", json!({"taskId": handle}))
        .await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    // Asked again, it does not run again.
    let again = h
        .send(&alice_session, "tasks/result", json!({"taskId": handle}))
        .await;
    assert_eq!(*h.module.calls.lock().unwrap(), ["wipe"], "{again}");
    assert_eq!(again["result"]["isError"], true, "{again}");
    let cancel = h
        .send(&alice_session, "tasks/cancel", json!({"taskId": handle}))
        .await;
    assert_eq!(cancel["error"]["code"], -32602, "an ended task: {cancel}");

    // Declined: completed, its result the refusal with the person's note; nothing ran.
    let created = h
        .send(
            &alice_session,
            "tools/call",
            json!({"name": "t__wipe", "arguments": {"what": "db"}, "task": {}}),
        )
        .await;
    let handle = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    h.store
        .respond(
            &alice(),
            confirmation_of(&created),
            json!({"confirmed": false, "note": "not the database"}),
        )
        .await
        .unwrap();
    let done = h
        .send(&alice_session, "tasks/get", json!({"taskId": handle}))
        .await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    let refused = h
        .send(&alice_session, "tasks/result", json!({"taskId": handle}))
        .await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(
        refused.to_string().contains("not the database"),
        "{refused}"
    );
    assert_eq!(h.module.calls.lock().unwrap().len(), 1);

    // Withdrawn by the client: cancelled, and the confirmation with it.
    let created = h
        .send(
            &alice_session,
            "tools/call",
            json!({"name": "t__wipe", "arguments": {"what": "tmp"}, "task": {}}),
        )
        .await;
    let handle = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let cancelled = h
        .send(&alice_session, "tasks/cancel", json!({"taskId": handle}))
        .await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    let stored = h
        .store
        .get(&alice(), confirmation_of(&created))
        .await
        .unwrap();
    assert_eq!(
        stored.elicitation.status,
        elicitation_core::ElicitationStatus::Cancelled
    );
    assert_eq!(h.module.calls.lock().unwrap().len(), 1);
    // Approved while nobody waits: the task asks for its result (not yet terminal: it
    // would fail at expiry), and asking runs the call.
    let created = h
        .send(
            &alice_session,
            "tools/call",
            json!({"name": "t__wipe", "arguments": {"what": "cache"}, "task": {}}),
        )
        .await;
    let handle = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    h.store
        .respond(
            &alice(),
            confirmation_of(&created),
            json!({"confirmed": true}),
        )
        .await
        .unwrap();
    let approved = h
        .send(&alice_session, "tasks/get", json!({"taskId": handle}))
        .await;
    assert_eq!(approved["result"]["status"], "input_required", "{approved}");
    assert_eq!(
        h.module.calls.lock().unwrap().len(),
        1,
        "not run before it is asked for"
    );
    let ran = h
        .send(&alice_session, "tasks/result", json!({"taskId": handle}))
        .await;
    assert!(
        ran["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("findings of up-"),
        "{ran}"
    );
    assert_eq!(h.module.calls.lock().unwrap().len(), 2);
    let done = h
        .send(&alice_session, "tasks/get", json!({"taskId": handle}))
        .await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
}

#[tokio::test]
async fn a_held_calls_task_runs_once_however_many_wait_on_it_and_never_asks_anew() {
    use elicitation_store::ElicitationStore;
    let h = harness_with(
        GatePolicy::default(),
        Tasks {
            by_request: true,
            ..Tasks::default()
        },
        4,
    )
    .await;
    let (alice_session, _) = h.session(ALICE).await;
    let created = h
        .send(
            &alice_session,
            "tools/call",
            json!({"name": "t__wipe", "arguments": {}, "task": {}}),
        )
        .await;
    let handle = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let confirmation = confirmation_of(&created);
    // Four wait on its result (the caller's cap of long waits); a fifth is refused at once.
    let mut waits = Vec::new();
    for _ in 0..4 {
        let service = h.service.clone();
        let (session, handle) = (alice_session.id.clone(), handle.clone());
        waits.push(tokio::spawn(async move {
            let h = Harness::over(service);
            let s = Session {
                token: ALICE,
                id: session,
            };
            h.send(&s, "tasks/result", json!({"taskId": handle})).await
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let fifth = h
        .send(&alice_session, "tasks/result", json!({"taskId": handle}))
        .await;
    assert!(
        fifth.to_string().contains("requests waiting for a person"),
        "{fifth}"
    );
    h.store
        .respond(&alice(), confirmation, json!({"confirmed": true}))
        .await
        .unwrap();
    let mut ran = 0;
    for wait in waits {
        let answer = wait.await.unwrap();
        if answer["result"]["isError"] != true {
            ran += 1;
        } else {
            assert!(
                answer.to_string().contains("does not run again"),
                "{answer}"
            );
        }
    }
    assert_eq!(ran, 1);
    assert_eq!(*h.module.calls.lock().unwrap(), ["wipe"]);
    // No one was asked anew.
    let pending = h
        .store
        .list(&alice(), elicitation_store::ListQuery::pending(100))
        .await
        .unwrap()
        .len();
    assert_eq!(pending, 0);
}

#[tokio::test]
async fn asking_for_a_task_gets_past_no_gate() {
    let policy = GatePolicy::default().with_rule(gating_core::PolicyRule::new(
        "t__summarise",
        gating_core::GateMode::Deny,
    ));
    let h = harness(policy).await;
    let (alice, _) = h.session(ALICE).await;
    // A denied tool asked as a task: a task completed at once whose result is the refusal.
    let denied = h
        .send(
            &alice,
            "tools/call",
            json!({"name": "t__summarise", "arguments": {}, "task": {}}),
        )
        .await;
    assert_eq!(denied["result"]["task"]["status"], "completed", "{denied}");
    let handle = denied["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = h
        .send(&alice, "tasks/result", json!({"taskId": handle}))
        .await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    // Held ones wait (above); nothing reached the module.
    let held = h
        .send(
            &alice,
            "tools/call",
            json!({"name": "t__wipe", "arguments": {}, "task": {}}),
        )
        .await;
    assert_eq!(held["result"]["task"]["status"], "working", "{held}");
    assert!(h.module.calls.lock().unwrap().is_empty());
    let listed = h.send(&alice, "tasks/list", json!({})).await;
    assert_eq!(listed["result"]["tasks"], json!([]));
}

#[tokio::test]
async fn a_module_whose_tasks_could_reach_another_caller_runs_none() {
    // What a shared stdio process sends while a task runs is told apart from other requests
    // only by timing: its tasks do not pass through.
    let h = harness_of(GatePolicy::default(), Tasks::default()).await;
    let (alice, _) = h.session(ALICE).await;
    let listed = h.send(&alice, "tools/list", json!({})).await;
    assert_eq!(
        names(&listed),
        ["t__plain", "t__summarise", "t__wipe"],
        "{listed}"
    );
    assert!(listed["result"]["tools"][1].get("execution").is_none());
    let ran = h
        .send(
            &alice,
            "tools/call",
            json!({"name": "t__summarise", "arguments": {}, "task": {}}),
        )
        .await;
    assert_eq!(
        ran["result"]["content"][0]["text"], "summarise ran",
        "{ran}"
    );
    assert_eq!(h.module.created.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_task_of_a_module_that_restarted_is_unknown_though_its_id_is_reused() {
    let h = harness(GatePolicy::default()).await;
    let (alice, _) = h.session(ALICE).await;
    let created = h
        .send(
            &alice,
            "tools/call",
            json!({"name": "t__research", "arguments": {}, "task": {}}),
        )
        .await;
    let handle = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    // The module restarts and numbers its tasks from the start again: `up-1` is now
    // someone else's.
    h.module.generation.fetch_add(1, Ordering::SeqCst);
    let gone = h.send(&alice, "tasks/get", json!({"taskId": handle})).await;
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
    let listed = h.send(&alice, "tasks/list", json!({})).await;
    assert_eq!(listed["result"]["tasks"], json!([]));
}

#[tokio::test]
async fn one_caller_has_at_most_256_tasks_open() {
    let h = harness(GatePolicy::default()).await;
    let (alice, _) = h.session(ALICE).await;
    let call = json!({"name": "t__research", "arguments": {}, "task": {}});
    for n in 0..mcp_gate::tasks::MAX_TASKS_PER_CALLER {
        let created = h.send(&alice, "tools/call", call.clone()).await;
        assert!(
            created["result"]["task"]["taskId"].is_string(),
            "{n}: {created}"
        );
    }
    // Refused: a task completed at once, whose result says why.
    let refused = h.send(&alice, "tools/call", call.clone()).await;
    assert_eq!(
        refused["result"]["task"]["status"], "completed",
        "{refused}"
    );
    let handle = refused["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let why = h
        .send(&alice, "tasks/result", json!({"taskId": handle}))
        .await;
    assert_eq!(why["result"]["isError"], true, "{why}");
    assert!(
        why["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("256 tasks open"),
        "{why}"
    );
    // Bob is not held back by alice's.
    let (bob, _) = h.session(BOB).await;
    let his = h.send(&bob, "tools/call", call).await;
    assert!(his["result"]["task"]["taskId"].is_string(), "{his}");
}

#[tokio::test]
async fn polls_of_a_task_count_against_the_callers_call_rate() {
    let h = harness_limited(
        GatePolicy::default(),
        Tasks {
            by_request: true,
            ..Tasks::default()
        },
        16,
        Some(mcp_gate::limits::Rate {
            per_minute: 60,
            burst: 4,
        }),
    )
    .await;
    let (alice, _) = h.session(ALICE).await;
    let created = h
        .send(
            &alice,
            "tools/call",
            json!({"name": "t__research", "arguments": {}, "task": {"ttl": 60000}}),
        )
        .await;
    let handle = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();
    // A poll loop with no pause runs out of the caller's burst, and is told why.
    let mut refused = None;
    for _ in 0..10 {
        let got = h.send(&alice, "tasks/get", json!({"taskId": handle})).await;
        if got.get("error").is_some() {
            refused = Some(got);
            break;
        }
        assert_eq!(got["result"]["taskId"], handle.as_str(), "{got}");
    }
    let refused = refused.expect("polls beyond the burst are refused");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("asking about its tasks faster"),
        "{refused}"
    );
}
