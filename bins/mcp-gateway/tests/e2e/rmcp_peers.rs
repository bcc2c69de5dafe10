//! rmcp, the official Rust SDK, on both sides of the gateway: rmcp servers as HTTP modules
//! (one that speaks 2026-07-28, one that speaks only 2025-11-25) and rmcp clients of both
//! eras. Every client lists both modules' tools, runs a read-only one, and is asked natively
//! before a destructive one runs once on its server.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::model::*;
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, RequestContext, RoleClient, RoleServer,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ClientHandler, ServerHandler};
use serde_json::{Value, json};

use super::{ALICE, BOB, CLIENT, Gateway, token_sha256, write_secret};

static LEGACY_ONLY: [ProtocolVersion; 1] = [ProtocolVersion::V_2025_11_25];

/// A shop: `delete_order` (destructive), `list_orders` (read-only), deletions counted.
#[derive(Clone)]
struct Shop {
    deleted: Arc<AtomicUsize>,
    legacy_only: bool,
    /// The protocol version of each call it served.
    eras: Arc<std::sync::Mutex<Vec<String>>>,
    /// The `Mcp-Session-Id` each call came with (empty: none).
    sessions: Arc<std::sync::Mutex<Vec<String>>>,
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

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        if self.legacy_only {
            Cow::Borrowed(&LEGACY_ONLY)
        } else {
            Cow::Owned(ProtocolVersion::KNOWN_VERSIONS.to_vec())
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            tool("delete_order", ToolAnnotations::new().destructive(true)),
            tool("list_orders", ToolAnnotations::new().read_only(true)),
            tool("pick_size", ToolAnnotations::new().read_only(true)),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let era = context.protocol_version().map(|v| v.to_string());
        self.eras.lock().unwrap().push(era.unwrap_or_default());
        let session = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        self.sessions.lock().unwrap().push(session);
        if request.name == "pick_size" {
            // Asks the 2025 way: a request to the client while the call runs.
            let asked: ElicitRequestParams = serde_json::from_value(json!({
                "mode": "form",
                "message": "Which size?",
                "requestedSchema": {"type": "object", "properties": {"size": {"type": "string"}}},
            }))
            .unwrap();
            let text = match context.peer.create_elicitation(asked).await {
                Ok(answer) => format!(
                    "size: {}",
                    answer
                        .content
                        .as_ref()
                        .and_then(|c| c.get("size"))
                        .and_then(Value::as_str)
                        .unwrap_or("none")
                ),
                Err(e) => format!("could not ask: {e}"),
            };
            return Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into());
        }
        let order = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("order"))
            .cloned();
        let text = match request.name.as_ref() {
            "delete_order" => {
                self.deleted.fetch_add(1, Ordering::SeqCst);
                format!("deleted order {}", order.unwrap_or(Value::Null))
            }
            _ => "orders: 1042".to_owned(),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

/// An rmcp server on a socket of its own: its address and the shop.
async fn serve(legacy_only: bool) -> (String, Shop) {
    let shop = Shop {
        deleted: Arc::default(),
        legacy_only,
        eras: Arc::default(),
        sessions: Arc::default(),
    };
    let served = shop.clone();
    let service = StreamableHttpService::new(
        move || Ok(served.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}/mcp"), shop)
}

/// A person at an rmcp client: approves what they are asked, counting the questions.
#[derive(Clone)]
struct Person {
    asked: Arc<AtomicUsize>,
    version: ProtocolVersion,
}

impl ClientHandler for Person {
    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::default();
        config.capabilities = ClientCapabilities::builder().enable_elicitation().build();
        config.protocol_version = self.version.clone();
        config
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let asked_size = serde_json::to_value(&request)
            .unwrap()
            .pointer("/requestedSchema/properties/size")
            .is_some();
        if asked_size {
            return Ok(
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({"size": "L"}))
            );
        }
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"confirmed": true})))
    }
}

fn text(result: &CallToolResult) -> String {
    result.content[0].as_text().unwrap().text.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_clients_of_both_eras_call_rmcp_modules_of_both_eras_and_are_asked_first() {
    let (modern_url, modern) = serve(false).await;
    let (legacy_url, legacy) = serve(true).await;
    // Speaks both eras; the operator pins it to the 2025 one (era = "legacy").
    let (pinned_url, pinned) = serve(false).await;
    let dir = std::env::temp_dir().join(format!("mcp-e2e-rmcp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    write_secret(
        &config,
        &format!(
            r#"
listen = "127.0.0.1:0"
[store]
kind = "memory"
[auth]
mode = "tokens"
[[auth.tokens]]
subject = "alice"
token_sha256 = "{client}"
scopes = ["tools:call", "elicitations:respond"]
[[modules]]
name = "modern"
transport = "http"
url = "{modern_url}"
trust_annotations = true
[[modules]]
name = "legacy"
transport = "http"
url = "{legacy_url}"
trust_annotations = true
[[modules]]
name = "pinned"
transport = "http"
url = "{pinned_url}"
trust_annotations = true
era = "legacy"
"#,
            client = token_sha256(CLIENT),
        ),
    );
    let gateway = Gateway::start(&config).await;
    let mut order = 0;
    for version in [ProtocolVersion::V_2026_07_28, ProtocolVersion::V_2025_11_25] {
        let asked = Arc::new(AtomicUsize::new(0));
        let person = Person {
            asked: asked.clone(),
            version: version.clone(),
        };
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", gateway.base))
                .auth_header(CLIENT),
        );
        // A 2026-07-28 client discovers the server (no handshake); a 2025 one initializes.
        let lifecycle = if version == ProtocolVersion::V_2026_07_28 {
            ClientLifecycleMode::Discover {
                preferred_versions: vec![version.clone()],
            }
        } else {
            ClientLifecycleMode::Initialize
        };
        let client = person
            .serve_with_lifecycle(transport, lifecycle)
            .await
            .unwrap();
        let negotiated = client.peer_info().map(|i| i.protocol_version.clone());
        assert_eq!(
            negotiated,
            Some(version.clone()),
            "the client's era is kept"
        );
        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        for name in [
            "modern__delete_order",
            "legacy__delete_order",
            "legacy__list_orders",
        ] {
            assert!(names.contains(&name), "{version}: {name} in {names:?}");
        }
        for (module, deleted) in [("modern", &modern.deleted), ("legacy", &legacy.deleted)] {
            let listed = client
                .call_tool(CallToolRequestParams::new(format!("{module}__list_orders")))
                .await
                .unwrap();
            assert_eq!(text(&listed), "orders: 1042", "{version} via {module}");
            order += 1;
            let before = asked.load(Ordering::SeqCst);
            let deletion = CallToolRequestParams::new(format!("{module}__delete_order"))
                .with_arguments(json!({"order": order}).as_object().unwrap().clone());
            let result = client.call_tool(deletion).await.unwrap();
            assert_eq!(
                text(&result),
                format!("deleted order {order}"),
                "{version} via {module}: {result:?}"
            );
            assert_eq!(asked.load(Ordering::SeqCst), before + 1, "asked once first");
            assert_eq!(
                deleted.load(Ordering::SeqCst),
                if version == ProtocolVersion::V_2026_07_28 {
                    1
                } else {
                    2
                }
            );
        }
        client.cancel().await.unwrap();
    }
    // The pinned module is spoken to in the 2025 era though it offers 2026-07-28; the legacy
    // one in the only era it speaks; the one that speaks both in each client's era.
    let listed = Person {
        asked: Arc::default(),
        version: ProtocolVersion::V_2025_11_25,
    };
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", gateway.base))
            .auth_header(CLIENT),
    );
    let client = listed
        .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
        .await
        .unwrap();
    client
        .call_tool(CallToolRequestParams::new("pinned__list_orders"))
        .await
        .unwrap();
    client.cancel().await.unwrap();
    assert_eq!(
        *modern.eras.lock().unwrap(),
        ["2026-07-28", "2026-07-28", "2025-11-25", "2025-11-25"],
        "the 2026-07-28 client's two calls, then the 2025-11-25 client's"
    );
    for (shop, era) in [(&pinned, "2025-11-25"), (&legacy, "2025-11-25")] {
        let eras = shop.eras.lock().unwrap().clone();
        assert!(
            !eras.is_empty() && eras.iter().all(|e| e == era),
            "{era}: {eras:?}"
        );
    }
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// An rmcp client of `version` at the gateway with `token`, answering what it is asked.
async fn connect(
    base: &str,
    token: &str,
    version: ProtocolVersion,
) -> rmcp::service::RunningService<RoleClient, Person> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("{base}/mcp")).auth_header(token),
    );
    let lifecycle = if version == ProtocolVersion::V_2026_07_28 {
        ClientLifecycleMode::Discover {
            preferred_versions: vec![version.clone()],
        }
    } else {
        ClientLifecycleMode::Initialize
    };
    Person {
        asked: Arc::default(),
        version,
    }
    .serve_with_lifecycle(transport, lifecycle)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_of_both_eras_is_spoken_to_in_each_clients_era_so_it_can_ask_the_2025_way() {
    // Speaks both eras; its `pick_size` asks the client mid-call, as a 2025 tool does.
    let (url, shop) = serve(false).await;
    let (dir, config) = super::alice_and_bob(
        "rmcp-eras",
        &format!(
            "[[modules]]\nname = \"shop\"\ntransport = \"http\"\nurl = \"{url}\"\ntrust_annotations = true\n"
        ),
    );
    let gateway = Gateway::start(&config).await;
    let pick = || CallToolRequestParams::new("shop__pick_size");

    // A 2025-era client: the module is reached in the 2025 era and its question reaches the
    // client mid-call, as it would directly.
    let alice = connect(&gateway.base, ALICE, ProtocolVersion::V_2025_11_25).await;
    let answered = alice.call_tool(pick()).await.unwrap();
    assert_eq!(text(&answered), "size: L", "{answered:?}");
    assert_eq!(alice.service().asked.load(Ordering::SeqCst), 1);
    // Again: the same session of hers with the module.
    assert_eq!(text(&alice.call_tool(pick()).await.unwrap()), "size: L");

    // Another 2025-era caller gets a session of its own with the module.
    let bob = connect(&gateway.base, BOB, ProtocolVersion::V_2025_11_25).await;
    assert_eq!(text(&bob.call_tool(pick()).await.unwrap()), "size: L");

    // A 2026-07-28 client: the module is reached at 2026-07-28, where a tool that asks the
    // 2025 way cannot (as directly); nothing is asked of the client.
    let modern = connect(&gateway.base, ALICE, ProtocolVersion::V_2026_07_28).await;
    let refused = modern.call_tool(pick()).await.unwrap();
    assert!(text(&refused).starts_with("could not ask"), "{refused:?}");
    assert_eq!(modern.service().asked.load(Ordering::SeqCst), 0);

    let eras = shop.eras.lock().unwrap().clone();
    assert_eq!(
        eras,
        ["2025-11-25", "2025-11-25", "2025-11-25", "2026-07-28"],
        "each client's era"
    );
    let sessions = shop.sessions.lock().unwrap().clone();
    assert!(
        !sessions[0].is_empty() && sessions[0] == sessions[1],
        "one session for alice's calls: {sessions:?}"
    );
    assert!(
        !sessions[2].is_empty() && sessions[2] != sessions[0],
        "bob's own session: {sessions:?}"
    );
    assert!(
        sessions[3].is_empty(),
        "no session at 2026-07-28: {sessions:?}"
    );
    for client in [alice, bob, modern] {
        client.cancel().await.unwrap();
    }
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A 2026-07-28 agent that does tasks (the tasks extension) but answers no elicitation.
#[derive(Clone)]
struct TaskAgent;

impl ClientHandler for TaskAgent {
    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::default();
        config.capabilities = ClientCapabilities::builder().enable_tasks().build();
        config.protocol_version = ProtocolVersion::V_2026_07_28;
        config
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rmcp_task_client_polls_a_held_call_as_a_task_until_a_person_approves_it() {
    let (url, shop) = serve(false).await;
    let (dir, config) = super::alice_and_bob(
        "rmcp-tasks",
        &format!(
            "[[modules]]\nname = \"shop\"\ntransport = \"http\"\nurl = \"{url}\"\ntrust_annotations = true\n"
        ),
    );
    let gateway = Gateway::start(&config).await;
    let connect = |token: &'static str| {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", gateway.base))
                .auth_header(token),
        );
        TaskAgent.serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
    };
    let agent = connect(ALICE).await.unwrap();
    let deletion = CallToolRequestParams::new("shop__delete_order")
        .with_arguments(json!({"order": 77}).as_object().unwrap().clone());
    let CallToolResponse::Task(created) = agent.call_tool_once(deletion).await.unwrap() else {
        panic!("a held call answered as a task");
    };
    let task_id = created.task.task_id.clone();
    assert_eq!(created.task.status, rmcp::model::TaskStatus::Working);
    // Another caller cannot read it.
    let bob = connect(BOB).await.unwrap();
    assert!(
        bob.get_task(GetTaskParams::new(task_id.clone()))
            .await
            .is_err()
    );
    // The agent polls while the person takes their time; then they approve over REST.
    for _ in 0..3 {
        let polled = agent
            .get_task(GetTaskParams::new(task_id.clone()))
            .await
            .unwrap();
        assert_eq!(polled.task.status(), rmcp::model::TaskStatus::Working);
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert_eq!(
        shop.deleted.load(Ordering::SeqCst),
        0,
        "nothing ran meanwhile"
    );
    let id = created
        .meta
        .as_ref()
        .and_then(|m| m.get("io.modelcontextprotocol/authorization"))
        .and_then(|a| a.get("authorizationContextId"))
        .and_then(Value::as_str)
        .unwrap()
        .to_owned();
    super::answer(&gateway.base, &id, true).await;
    let done = agent
        .get_task(GetTaskParams::new(task_id.clone()))
        .await
        .unwrap();
    let rmcp::model::TaskPayload::Completed { result } = &done.task.payload else {
        panic!("completed: {done:?}");
    };
    assert_eq!(
        result["content"][0]["text"], "deleted order 77",
        "{result:?}"
    );
    assert_eq!(shop.deleted.load(Ordering::SeqCst), 1, "ran once");
    // Read again, it does not run again.
    let again = agent.get_task(GetTaskParams::new(task_id)).await.unwrap();
    assert!(matches!(
        again.task.payload,
        rmcp::model::TaskPayload::Completed { .. }
    ));
    assert_eq!(shop.deleted.load(Ordering::SeqCst), 1);
    for client in [agent, bob] {
        client.cancel().await.unwrap();
    }
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
