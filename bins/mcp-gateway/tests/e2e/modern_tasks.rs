//! Tasks of the 2026-07-28 tasks extension (SEP-2663) passed through: an rmcp module that
//! runs a tool as a task (asking its client a question while it runs) behind the gateway,
//! and rmcp clients of 2026-07-28 that declare the extension (or do not). The client is
//! handed the gateway's handle, never the module's id; it polls, answers the module's
//! question with `tasks/update` and reads the result; another caller learns nothing of it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::*;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RequestContext, RoleServer};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ClientHandler, ServerHandler};
use serde_json::{Value, json};

use super::{ALICE, BOB, Gateway};

/// A lab: `research` runs as a task where its client takes one (asking which topic), else
/// to its result at once.
#[derive(Clone, Default)]
struct Lab {
    tasks: Arc<TaskManager>,
    /// The ids of the tasks it made.
    made: Arc<Mutex<Vec<String>>>,
    /// Calls it ran without a task.
    inline: Arc<Mutex<usize>>,
}

impl ServerHandler for Lab {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object"});
        let mut tool = Tool::new(
            "research".to_owned(),
            "researches a topic",
            Arc::new(serde_json::from_value(schema).unwrap()),
        );
        tool.annotations = Some(ToolAnnotations::new().read_only(true));
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let takes_task = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        if !takes_task {
            *self.inline.lock().unwrap() += 1;
            return Ok(
                CallToolResult::success(vec![ContentBlock::text("ran without a task")]).into(),
            );
        }
        let task = self.tasks.spawn(
            TaskOptions::new().with_poll_interval_ms(100),
            |context| {
                Box::pin(async move {
                    let asked: ElicitRequestParams = serde_json::from_value(json!({
                        "mode": "form",
                        "message": "Which topic?",
                        "requestedSchema": {"type": "object", "properties": {"topic": {"type": "string"}}},
                    }))
                    .unwrap();
                    let answer = context
                        .request_input("topic", InputRequest::Elicitation(ElicitRequest::new(asked)))
                        .await?;
                    let topic = answer
                        .pointer("/content/topic")
                        .and_then(Value::as_str)
                        .unwrap_or("nothing")
                        .to_owned();
                    // Works until cancelled when told to.
                    if topic == "forever" {
                        context.cancelled().await;
                        return Err(TaskExit::Cancelled);
                    }
                    Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                        "findings on {topic}"
                    ))]))
                })
            },
        );
        self.made.lock().unwrap().push(task.task_id.clone());
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.tasks
            .get_task(&request.task_id)
            .map(GetTaskResult::new)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.cancel_task(&request.task_id)
    }
}

async fn serve() -> (String, Lab) {
    let lab = Lab::default();
    let served = lab.clone();
    let service = StreamableHttpService::new(
        move || Ok(served.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}/mcp"), lab)
}

/// A 2026-07-28 agent: declares the tasks extension (or not) and answers forms.
#[derive(Clone)]
struct Agent {
    tasks: bool,
    version: ProtocolVersion,
}

impl ClientHandler for Agent {
    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::default();
        let capabilities = ClientCapabilities::builder().enable_elicitation();
        config.capabilities = if self.tasks {
            capabilities.enable_tasks().build()
        } else {
            capabilities.build()
        };
        config.protocol_version = self.version.clone();
        config
    }
}

/// Polls the task until `done` says its state is the awaited one (ten seconds at most).
async fn poll_until(
    client: &rmcp::service::RunningService<rmcp::RoleClient, Agent>,
    task_id: &str,
    done: impl Fn(&TaskPayload) -> bool,
) -> GetTaskResult {
    for _ in 0..100 {
        let polled = client
            .get_task(GetTaskParams::new(task_id.to_owned()))
            .await
            .unwrap();
        if done(&polled.task.payload) {
            return polled;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("task {task_id} did not reach the awaited state");
}

fn research() -> CallToolRequestParams {
    CallToolRequestParams::new("lab__research")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modules_task_of_the_2026_extension_passes_through_to_its_caller_only() {
    let (url, lab) = serve().await;
    let (dir, config) = super::alice_and_bob(
        "modern-tasks",
        &format!(
            "[[modules]]\nname = \"lab\"\ntransport = \"http\"\nurl = \"{url}\"\nera = \"modern\"\ntrust_annotations = true\n"
        ),
    );
    let gateway = Gateway::start(&config).await;
    let connect_at = |token: &'static str, tasks: bool, version: ProtocolVersion| {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", gateway.base))
                .auth_header(token),
        );
        let lifecycle = if version == ProtocolVersion::V_2026_07_28 {
            ClientLifecycleMode::Discover {
                preferred_versions: vec![version.clone()],
            }
        } else {
            ClientLifecycleMode::Initialize
        };
        Agent { tasks, version }.serve_with_lifecycle(transport, lifecycle)
    };
    let connect =
        |token: &'static str, tasks: bool| connect_at(token, tasks, ProtocolVersion::V_2026_07_28);
    let alice = connect(ALICE, true).await.unwrap();
    let bob = connect(BOB, true).await.unwrap();

    // The module makes a task of it; the client is handed the gateway's handle.
    let CallToolResponse::Task(created) = alice.call_tool_once(research()).await.unwrap() else {
        panic!("the module's task reaches a client that takes one");
    };
    let handle = created.task.task_id.clone();
    let upstream = lab.made.lock().unwrap()[0].clone();
    assert_ne!(handle, upstream, "the module's id is not handed out");
    assert!(handle.starts_with("task-"), "{handle}");

    // The module's question, attributed to it, waits for the client's answer.
    let waiting = poll_until(&alice, &handle, |p| {
        matches!(p, TaskPayload::InputRequired { .. })
    })
    .await;
    let seen = serde_json::to_value(&waiting).unwrap();
    assert_eq!(seen["taskId"], handle.as_str(), "{seen}");
    let message = seen
        .pointer("/inputRequests/topic/params/message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert!(
        message.contains("lab__research") && message.contains("Which topic?"),
        "attributed to the module: {seen}"
    );
    assert!(!seen.to_string().contains(&upstream), "{seen}");

    // Another caller, or the module's own id, is told of no such task; neither can answer.
    let refused = bob
        .get_task(GetTaskParams::new(handle.clone()))
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("unknown task"), "{refused}");
    assert!(
        alice
            .get_task(GetTaskParams::new(upstream.clone()))
            .await
            .is_err()
    );
    let answer = std::collections::BTreeMap::from([(
        "topic".to_owned(),
        json!({"action": "accept", "content": {"topic": "bees"}}),
    )]);
    let mut bobs = answer.clone();
    bobs.insert(
        "topic".to_owned(),
        json!({"action": "accept", "content": {"topic": "wasps"}}),
    );
    assert!(
        bob.update_task(UpdateTaskParams::new(handle.clone(), bobs))
            .await
            .is_err()
    );
    assert!(
        bob.cancel_task(CancelTaskParams::new(handle.clone()))
            .await
            .is_err()
    );
    // Nor does the same caller's 2025-11-25 session: a task is asked about in its own era.
    let legacy = connect_at(ALICE, true, ProtocolVersion::V_2025_11_25)
        .await
        .unwrap();
    let refused = legacy
        .get_task(GetTaskParams::new(handle.clone()))
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("unknown task"), "{refused}");

    // The caller answers; the task completes with the module's result.
    alice
        .update_task(UpdateTaskParams::new(handle.clone(), answer))
        .await
        .unwrap();
    let done = poll_until(&alice, &handle, |p| {
        matches!(p, TaskPayload::Completed { .. })
    })
    .await;
    let TaskPayload::Completed { result } = &done.task.payload else {
        unreachable!()
    };
    assert_eq!(
        result["content"][0]["text"], "findings on bees",
        "{result:?}"
    );

    // Cancelled by its caller (and by nobody else).
    let CallToolResponse::Task(second) = alice.call_tool_once(research()).await.unwrap() else {
        panic!("a second task");
    };
    let second = second.task.task_id;
    poll_until(&alice, &second, |p| {
        matches!(p, TaskPayload::InputRequired { .. })
    })
    .await;
    let forever = std::collections::BTreeMap::from([(
        "topic".to_owned(),
        json!({"action": "accept", "content": {"topic": "forever"}}),
    )]);
    alice
        .update_task(UpdateTaskParams::new(second.clone(), forever))
        .await
        .unwrap();
    alice
        .cancel_task(CancelTaskParams::new(second.clone()))
        .await
        .unwrap();
    poll_until(&alice, &second, |p| matches!(p, TaskPayload::Cancelled)).await;

    // A client that does not declare the extension is never answered with a task: the
    // module is not told it may.
    let plain = connect(ALICE, false).await.unwrap();
    let result = plain.call_tool(research()).await.unwrap();
    assert_eq!(
        serde_json::to_value(&result.content).unwrap()[0]["text"],
        "ran without a task"
    );
    assert_eq!(*lab.inline.lock().unwrap(), 1);
    assert_eq!(lab.made.lock().unwrap().len(), 2);

    for client in [alice, bob, plain, legacy] {
        client.cancel().await.unwrap();
    }
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
