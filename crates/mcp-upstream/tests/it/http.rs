//! The HTTP client and era negotiation, against the fixture servers of both eras: a
//! 2025-11-25 server (no `server/discover`: the client falls back to the `initialize`
//! handshake and a session, and reads SSE answers) and a 2026-07-28 one (discovered; a
//! call that needs input is asked of the relay and sent again with the answer).

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mcp_upstream::http::{HttpConfig, HttpModule};
use mcp_upstream::{Module, Relay, ToolCall};
use mcp_wire::CallToolParams;
use mcp_wire::headers::ParamHeader;
use mcp_wire::jsonrpc::ErrorObject;
use mcp_wire::tools::Arguments;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

/// A fixture server of mcp-http's (the gateway's suites use them too), and its URL.
async fn server(fixture: &str) -> (tokio::process::Child, String) {
    let script = format!(
        "{}/../mcp-http/tests/fixtures/{fixture}",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut child = tokio::process::Command::new("python3")
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let port = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

fn module(url: &str) -> HttpModule {
    HttpModule::new(HttpConfig {
        name: "up".into(),
        url: url.parse().unwrap(),
        headers: Vec::new(),
        tls: None,
        credentials: None,
        call_timeout: Duration::from_secs(30),
        era: Default::default(),
    })
    .unwrap()
}

/// A relay whose person answers every form with `{"name": "ada"}`, and keeps what it was
/// asked.
#[derive(Default)]
struct Answers(Mutex<Vec<String>>);

#[async_trait]
impl Relay for Answers {
    fn notify(&self, _: &str, _: Value) {}
    async fn ask(&self, method: &str, params: Option<Value>) -> Result<Value, ErrorObject> {
        self.0.lock().unwrap().push(format!(
            "{method}: {}",
            params.unwrap_or_default()["message"]
        ));
        match method {
            "elicitation/create" => Ok(json!({"action": "accept", "content": {"name": "ada"}})),
            _ => mcp_upstream::refuse_ask(method),
        }
    }
    fn log_level(&self) -> Option<u8> {
        None
    }
    fn answers(&self, method: &str) -> bool {
        method == "elicitation/create"
    }
}

async fn call(
    module: &HttpModule,
    tool: &str,
    arguments: Value,
    relay: Option<Arc<dyn Relay>>,
) -> Value {
    let Value::Object(map) = arguments else {
        panic!("arguments are an object")
    };
    let raw = module
        .call_tool(ToolCall {
            params: CallToolParams::new(tool.into(), Some(Arguments::from_map(&map))),
            mirrored: &[],
            relay,
        })
        .await
        .unwrap();
    serde_json::from_str(raw.get()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_server_is_reached_through_the_initialize_handshake_and_its_sse_answers() {
    let (_server, url) = server("legacy_http_module.py").await;
    let up = module(&url);
    let names: Vec<Value> = up
        .list_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(names, [json!("shout"), json!("ask")]);
    let shouted = call(&up, "shout", json!({"text": "quiet"}), None).await;
    assert_eq!(shouted["content"][0]["text"], "QUIET", "{shouted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_server_is_discovered_and_a_call_that_needs_input_is_asked_and_sent_again() {
    let (_server, url) = server("modern_mrtr_module.py").await;
    let up = module(&url);
    let listed = up.list_tools().await.unwrap();
    assert_eq!(listed[0]["name"], "ask");
    let answers = Arc::new(Answers::default());
    let done = call(&up, "ask", json!({}), Some(answers.clone())).await;
    let reported: Value =
        serde_json::from_str(done["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        reported["state"], "state-1",
        "the server's state came back: {done}"
    );
    assert_eq!(
        reported["responses"]["who"]["content"]["name"], "ada",
        "the person's answer reached the server under its key: {done}"
    );
    assert_eq!(
        *answers.0.lock().unwrap(),
        [r#"elicitation/create: "Who are you?""#],
        "the relay was asked once"
    );
}

/// A 2026-07-28 module that asks the 2025 way, on the call's SSE stream: the person's answer
/// is POSTed back with the call's protocol version but not the headers that described the
/// call (its method, name and mirrored parameter): the answer is not a `tools/call`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_module_asking_on_the_calls_stream_gets_its_answer_without_the_calls_headers() {
    let (_server, url) = server("modern_mrtr_module.py").await;
    let up = module(&url);
    up.list_tools().await.unwrap();
    let answers = Arc::new(Answers::default());
    let arguments = json!({"path": "/x"});
    let raw = up
        .call_tool(ToolCall {
            params: CallToolParams::new(
                "asks_on_stream".into(),
                Some(Arguments::from_map(arguments.as_object().unwrap())),
            ),
            mirrored: &[ParamHeader {
                header: "mcp-param-path".parse().unwrap(),
                path: vec!["path".into()],
            }],
            relay: Some(answers.clone()),
        })
        .await
        .unwrap();
    let done: Value = serde_json::from_str(raw.get()).unwrap();
    let reported: Value =
        serde_json::from_str(done["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        reported["called_with"],
        json!({"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
               "Mcp-Name": "asks_on_stream", "Mcp-Param-Path": "/x"}),
        "{done}"
    );
    assert_eq!(
        reported["answered"]["answer"]["result"]["content"]["name"], "ada",
        "{done}"
    );
    assert_eq!(
        reported["answered"]["headers"],
        json!({"MCP-Protocol-Version": "2026-07-28"}),
        "{done}"
    );
    assert_eq!(
        *answers.0.lock().unwrap(),
        [r#"elicitation/create: "Who asks?""#]
    );
}

/// Issue 45, item 7: a 2026-07-28 module without `subscriptions/listen` that says so as
/// fastmcp does (404 with a JSON-RPC `-32601`) was asked again every 30 s, forever, with a
/// warning each time. It is asked once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_that_has_no_stream_and_says_so_with_a_404_is_asked_once() {
    let (_server, url) = server("modern_mrtr_module.py").await;
    let up = module(&url);
    up.list_tools().await.unwrap();
    // The listener's back-off would have asked again after 1 s and 2 s.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let asked = call(&up, "listens", json!({}), None).await;
    assert_eq!(asked["content"][0]["text"], "1", "{asked}");
}
