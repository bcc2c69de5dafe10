//! The rmcp adapter against rmcp's own client, in process over a duplex pipe: a 2026-07-28
//! client is asked with `input_required`, a 2025-11-25 session with `elicitation/create`,
//! a client that cannot answer gets the held result and runs once a person approved,
//! naming the confirmation in `_meta`; a forged `requestState` answers nothing.

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use elicitation_store::MemoryStore;
use gating_core::GatePolicy;
use mcp_gate::Gateway;
use mcp_gate::rmcp::Gated;
use rmcp::model::*;
use rmcp::service::{RequestContext, RoleClient, RoleServer, RunningService, serve_directly};
use rmcp::{ClientHandler, ServerHandler};
use serde_json::{Value, json};

/// A shop's server: `delete_order` (destructive) and `list_orders` (read-only), counted.
#[derive(Clone, Default)]
struct Shop {
    deleted: Arc<AtomicUsize>,
}

fn tool(name: &str, annotations: ToolAnnotations) -> Tool {
    let schema = json!({"type": "object", "properties": {"order": {"type": "integer"}}});
    let mut tool = Tool::new(
        name.to_owned(),
        "",
        Arc::new(serde_json::from_value(schema).unwrap()),
    );
    tool.annotations = Some(annotations);
    tool
}

impl ServerHandler for Shop {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            tool("delete_order", ToolAnnotations::new().destructive(true)),
            tool("list_orders", ToolAnnotations::new().read_only(true)),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let order = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("order"))
            .cloned();
        let text = match request.name.as_ref() {
            "delete_order" => {
                self.deleted.fetch_add(1, Ordering::SeqCst);
                format!("deleted {}", order.unwrap_or(Value::Null))
            }
            _ => "orders: 1042".to_owned(),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

/// A person at the client: answers every question with `answer`, counting them.
#[derive(Clone)]
struct Person {
    answer: Option<ElicitationAction>,
    asked: Arc<AtomicUsize>,
}

impl ClientHandler for Person {
    // A 2026-07-28 client declares what it can do on each request.
    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::default();
        if self.answer.is_some() {
            config.capabilities = ClientCapabilities::builder().enable_elicitation().build();
        }
        config
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let action = self.answer.clone().unwrap_or(ElicitationAction::Cancel);
        let result = ElicitResult::new(action.clone());
        Ok(match action {
            ElicitationAction::Accept => result.with_content(json!({"confirmed": true})),
            _ => result,
        })
    }
}

struct Pair {
    client: RunningService<RoleClient, Person>,
    shop: Shop,
    asked: Arc<AtomicUsize>,
    gateway: Arc<Gateway>,
    _server: tokio::task::JoinHandle<()>,
}

/// The gated shop and a client of `version`, declaring elicitation when `answer` is some.
async fn pair(version: ProtocolVersion, answer: Option<ElicitationAction>) -> Pair {
    let gateway = Arc::new(
        Gateway::for_own_tools(Arc::new(MemoryStore::default()), GatePolicy::default())
            .await
            .unwrap(),
    );
    let shop = Shop::default();
    let gated = Gated::for_local_user(shop.clone(), gateway.clone()).named("shop");
    let (server_end, client_end) = tokio::io::duplex(64 * 1024);
    let capabilities = match answer {
        Some(_) => ClientCapabilities::builder().enable_elicitation().build(),
        None => ClientCapabilities::default(),
    };
    let client_info = InitializeRequestParams::new(capabilities, Implementation::new("test", "0"))
        .with_protocol_version(version.clone());
    let mut server_info =
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build());
    server_info.protocol_version = version;
    let server = tokio::spawn(async move {
        let running =
            serve_directly::<RoleServer, _, _, _, _>(gated, server_end, Some(client_info));
        let _ = running.waiting().await;
    });
    let asked = Arc::new(AtomicUsize::new(0));
    let person = Person {
        answer,
        asked: asked.clone(),
    };
    let client =
        serve_directly::<RoleClient, _, _, _, _>(person, client_end, Some(server_info.into()));
    Pair {
        client,
        shop,
        asked,
        gateway,
        _server: server,
    }
}

fn delete(order: i64) -> CallToolRequestParams {
    CallToolRequestParams::new("delete_order")
        .with_arguments(json!({"order": order}).as_object().unwrap().clone())
}

fn text(result: &CallToolResult) -> String {
    result.content[0].as_text().unwrap().text.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_is_asked_with_input_required_and_its_answer_runs_the_call_once() {
    let p = pair(
        ProtocolVersion::V_2026_07_28,
        Some(ElicitationAction::Accept),
    )
    .await;
    let result = p.client.call_tool(delete(1042)).await.unwrap();
    assert_eq!(text(&result), "deleted 1042");
    assert_eq!(p.asked.load(Ordering::SeqCst), 1);
    assert_eq!(p.shop.deleted.load(Ordering::SeqCst), 1);
    // Not destructive: runs without a question.
    let listed = p
        .client
        .call_tool(CallToolRequestParams::new("list_orders"))
        .await
        .unwrap();
    assert_eq!(text(&listed), "orders: 1042");
    assert_eq!(p.asked.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_session_is_asked_on_its_stream_and_a_decline_runs_nothing() {
    let p = pair(
        ProtocolVersion::V_2025_11_25,
        Some(ElicitationAction::Accept),
    )
    .await;
    let result = p.client.call_tool(delete(7)).await.unwrap();
    assert_eq!(text(&result), "deleted 7");
    assert_eq!(p.shop.deleted.load(Ordering::SeqCst), 1);

    let p = pair(
        ProtocolVersion::V_2025_11_25,
        Some(ElicitationAction::Decline),
    )
    .await;
    let result = p.client.call_tool(delete(8)).await.unwrap();
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert_eq!(p.asked.load(Ordering::SeqCst), 1);
    assert_eq!(p.shop.deleted.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_cannot_answer_gets_the_held_result_and_runs_after_a_person_approves() {
    for version in [ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28] {
        let p = pair(version, None).await;
        let held = p.client.call_tool(delete(1042)).await.unwrap();
        let structured = held.structured_content.clone().unwrap();
        assert_eq!(structured["elicitation_required"], true, "{held:?}");
        let id = structured["elicitation"]["id"].as_str().unwrap().to_owned();
        // A server of its own: its held result names no surface of the gateway's.
        assert!(!text(&held).contains("gateway"), "{}", text(&held));
        assert_eq!(p.shop.deleted.load(Ordering::SeqCst), 0);
        // Asked again before anyone answered: still held, nothing ran.
        let again = p.client.call_tool(delete(1042)).await.unwrap();
        assert_eq!(
            again.structured_content.unwrap()["elicitation"]["id"],
            json!(id)
        );
        // A person approves elsewhere (the approvals page, REST); the agent names it.
        mcp_gate::answer(
            p.gateway.store().as_ref(),
            &mcp_auth::Principal::local(),
            id.parse().unwrap(),
            json!({"confirmed": true}),
            "the test's person",
        )
        .await
        .unwrap();
        let mut named = delete(1042);
        named.meta = Some(serde_json::from_value(json!({"confirmation_id": id})).unwrap());
        let ran = p.client.call_tool(named).await.unwrap();
        assert_eq!(text(&ran), "deleted 1042");
        assert_eq!(p.shop.deleted.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_state_naming_another_calls_confirmation_answers_nothing() {
    let p = pair(
        ProtocolVersion::V_2026_07_28,
        Some(ElicitationAction::Accept),
    )
    .await;
    let asked = p.client.call_tool_once(delete(1)).await.unwrap();
    let CallToolResponse::InputRequired(asked) = asked else {
        panic!("asked with input_required: {asked:?}")
    };
    let state = asked.request_state.unwrap();
    // The state of the question about order 1, sent back with order 2 and an approval.
    let mut forged = delete(2);
    forged.request_state = Some(state);
    forged.input_responses = Some(
        [(
            "confirm".to_owned(),
            json!({"action": "accept", "content": {"confirmed": true}}),
        )]
        .into_iter()
        .collect(),
    );
    let refused = p.client.call_tool_once(forged).await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(p.shop.deleted.load(Ordering::SeqCst), 0);
    // The question about order 1 was not answered by it: asked again, still pending.
    let still = p.client.call_tool_once(delete(1)).await.unwrap();
    assert!(
        matches!(still, CallToolResponse::InputRequired(_)),
        "{still:?}"
    );
    assert_eq!(p.shop.deleted.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_answering_a_question_the_client_was_never_asked_answers_nothing() {
    // This client shows no forms: it gets the held result, and a forged retry with the
    // confirmation as requestState and an approval is refused before anything is recorded.
    let p = pair(ProtocolVersion::V_2026_07_28, None).await;
    let held = p.client.call_tool(delete(5)).await.unwrap();
    let id = held.structured_content.unwrap()["elicitation"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut forged = delete(5);
    forged.request_state = Some(id.clone());
    forged.input_responses = Some(
        [(
            "confirm".to_owned(),
            json!({"action": "accept", "content": {"confirmed": true}}),
        )]
        .into_iter()
        .collect(),
    );
    assert!(p.client.call_tool_once(forged).await.is_err());
    let still = p.client.call_tool(delete(5)).await.unwrap();
    assert_eq!(
        still.structured_content.unwrap()["elicitation"]["id"],
        json!(id)
    );
    assert_eq!(p.shop.deleted.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_named_by_the_server_never_use_each_others_approvals() {
    let gateway = Arc::new(
        Gateway::for_own_tools(Arc::new(MemoryStore::default()), GatePolicy::default())
            .await
            .unwrap(),
    );
    let shop = Shop::default();
    // Who calls: the client's name, as its handshake gave it (a real server reads a token).
    let gated = Gated::new(shop.clone(), gateway.clone(), |context| {
        let name = context.peer.peer_info()?.client_info.name.clone();
        let caller = elicitation_store::Caller::new(&name, None).ok()?;
        Some(mcp_auth::Principal::authenticated(
            caller,
            &[mcp_auth::SCOPE_TOOLS_CALL],
        ))
    });
    let connect = |name: &'static str| {
        let gated = gated.clone();
        async move {
            let (server_end, client_end) = tokio::io::duplex(64 * 1024);
            let client_info = InitializeRequestParams::new(
                ClientCapabilities::default(),
                Implementation::new(name, "0"),
            )
            .with_protocol_version(ProtocolVersion::V_2025_11_25);
            let mut server_info =
                InitializeResult::new(ServerCapabilities::builder().enable_tools().build());
            server_info.protocol_version = ProtocolVersion::V_2025_11_25;
            tokio::spawn(async move {
                let running =
                    serve_directly::<RoleServer, _, _, _, _>(gated, server_end, Some(client_info));
                let _ = running.waiting().await;
            });
            let person = Person {
                answer: None,
                asked: Arc::default(),
            };
            serve_directly::<RoleClient, _, _, _, _>(person, client_end, Some(server_info.into()))
        }
    };
    let alice = connect("alice").await;
    let mallory = connect("mallory").await;
    let held = alice.call_tool(delete(1042)).await.unwrap();
    let id = held.structured_content.unwrap()["elicitation"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let alices = mcp_auth::Principal::authenticated(
        elicitation_store::Caller::new("alice", None).unwrap(),
        &[mcp_auth::SCOPE_RESPOND],
    );
    mcp_gate::answer(
        gateway.store().as_ref(),
        &alices,
        id.parse().unwrap(),
        json!({"confirmed": true}),
        "alice",
    )
    .await
    .unwrap();
    // Mallory's identical call does not take up Alice's approval: it is held on its own.
    let theirs = mallory.call_tool(delete(1042)).await.unwrap();
    assert_ne!(
        theirs.structured_content.unwrap()["elicitation"]["id"],
        json!(id)
    );
    assert_eq!(shop.deleted.load(Ordering::SeqCst), 0);
    let ran = alice.call_tool(delete(1042)).await.unwrap();
    assert_eq!(text(&ran), "deleted 1042");
}
