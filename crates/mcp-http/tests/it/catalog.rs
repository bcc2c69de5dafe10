//! Prompts and resources through the gateway: every module's prompts listed as
//! `{prefix}__{name}` and `prompts/get` routed to the module that listed it; every module's
//! resources listed and `resources/read` routed to the module a URI belongs to; both eras.

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use bytes::Bytes;
use elicitation_store::MemoryStore;
use gating_core::GatePolicy;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use mcp_auth::Auth;
use mcp_gate::Gateway;
use mcp_http::service::{McpService, ServiceConfig};
use mcp_upstream::inproc::{InProcessModule, InProcessTool};
use mcp_upstream::registry::{ModuleSpec, Registry};
use serde_json::{Value, json};

/// A module with one prompt `greet` that says which module answered, and one resource
/// `file:///{name}.txt`.
fn greeter(name: &'static str) -> InProcessModule {
    InProcessModule::new(name, Vec::new())
        .with_completions(move |params| {
            let reference = &params["ref"];
            let target = reference
                .get("name")
                .or_else(|| reference.get("uri"))
                .and_then(Value::as_str)
                .unwrap_or("?");
            Ok(json!({"completion": {"values": [format!("{name}:{target}")], "hasMore": false}}))
        })
        .with_resources(vec![(
            json!({"uri": format!("file:///{name}.txt"), "name": format!("{name}.txt"), "mimeType": "text/plain"}),
            format!("the text of {name}"),
        )])
        .with_prompts(vec![InProcessTool::new(
        json!({"name": "greet", "description": "Greets.", "arguments": [{"name": "who", "required": true}]}),
        move |args| match args.get("who").and_then(Value::as_str) {
            Some(who) => Ok(json!({"messages": [{"role": "user", "content": {"type": "text", "text": format!("{name} greets {who}")}}]})),
            None => Err("`who` is required".into()),
        },
    )])
}

fn spec(name: &str, prefix: &str, module: InProcessModule) -> ModuleSpec {
    ModuleSpec {
        isolation: None,
        name: name.into(),
        prefix: prefix.into(),
        trust_annotations: true,
        module: Arc::new(module),
    }
}

async fn service() -> McpService {
    let registry = Registry::start(vec![
        spec("a", "a", greeter("a")),
        spec("b", "b", greeter("b")),
    ])
    .await
    .unwrap();
    let gateway = Arc::new(Gateway::new(
        registry,
        Arc::new(MemoryStore::default()),
        GatePolicy::default(),
        false,
    ));
    McpService::new(gateway, Auth::none(), ServiceConfig::default())
}

async fn send(
    service: &McpService,
    headers: &[(&str, &str)],
    body: Value,
) -> (StatusCode, http::HeaderMap, Value) {
    let mut request = Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "127.0.0.1:8080")
        .header("content-type", "application/json");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = service
        .handle(
            request
                .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
                .unwrap(),
        )
        .await;
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn a_session_lists_every_modules_prompts_and_gets_each_from_its_module() {
    let service = service().await;
    let (_, headers, init) = send(
        &service,
        &[],
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
               "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .await;
    assert!(
        init["result"]["capabilities"]["prompts"].is_object(),
        "{init}"
    );
    let session = headers["mcp-session-id"].to_str().unwrap().to_owned();
    let h = [("mcp-session-id", session.as_str())];

    let (_, _, listed) = send(
        &service,
        &h,
        json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/list"}),
    )
    .await;
    let names: Vec<&str> = listed["result"]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a__greet", "b__greet"], "{listed}");
    assert_eq!(
        listed["result"]["prompts"][0]["arguments"][0]["name"],
        "who"
    );

    for (prompt, module) in [("a__greet", "a"), ("b__greet", "b")] {
        let (_, _, got) = send(
            &service,
            &h,
            json!({"jsonrpc": "2.0", "id": 2, "method": "prompts/get", "params": {"name": prompt, "arguments": {"who": "ada"}}}),
        )
        .await;
        assert_eq!(
            got["result"]["messages"][0]["content"]["text"],
            format!("{module} greets ada"),
            "{got}"
        );
    }

    let (_, _, unknown) = send(
        &service,
        &h,
        json!({"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": {"name": "greet"}}),
    )
    .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let (_, _, refused) = send(
        &service,
        &h,
        json!({"jsonrpc": "2.0", "id": 4, "method": "prompts/get", "params": {"name": "a__greet", "arguments": {}}}),
    )
    .await;
    assert_eq!(
        refused["error"]["code"], -32602,
        "the module's own error: {refused}"
    );
    assert_eq!(refused["error"]["message"], "`who` is required");
}

#[tokio::test]
async fn a_modern_client_lists_and_gets_prompts_with_the_modern_result_shape() {
    let service = service().await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let (status, _, listed) = send(
        &service,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "prompts/list"),
        ],
        json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/list", "params": {"_meta": meta}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["result"]["prompts"][1]["name"], "b__greet");
    assert_eq!(listed["result"]["cacheScope"], "private");
    let (status, _, got) = send(
        &service,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "prompts/get"),
            ("mcp-name", "b__greet"),
        ],
        json!({"jsonrpc": "2.0", "id": 2, "method": "prompts/get", "params": {"name": "b__greet", "arguments": {"who": "lin"}, "_meta": meta}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(
        got["result"]["messages"][0]["content"]["text"],
        "b greets lin"
    );
    assert_eq!(got["result"]["resultType"], "complete");
    assert_eq!(
        got["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-gateway"
    );
}

/// What a module lists wrong is that module's failure, never the gateway's: on today's main a
/// prompt two modules list, or a tool one module lists twice, stopped the gateway from
/// starting (and, later, every reload).
#[tokio::test]
async fn names_a_module_lists_twice_or_another_module_has_are_left_out_and_the_gateway_starts() {
    let read_only = |description: &str, annotations: Value| {
        InProcessTool::new(
            json!({"name": "wipe", "description": description, "inputSchema": {"type": "object"},
                   "annotations": annotations}),
            |_| Ok(json!({"content": []})),
        )
    };
    // One tool name, two definitions: which one the module means cannot be told, so
    // neither is listed (keeping the first would trust `readOnlyHint` of either).
    let twice = InProcessModule::new(
        "twice",
        vec![
            read_only("Reads.", json!({"readOnlyHint": true})),
            read_only("Wipes the disk.", json!({"destructiveHint": true})),
            InProcessTool::new(
                json!({"name": "other", "inputSchema": {"type": "object"}}),
                |_| Ok(json!({"content": []})),
            ),
        ],
    );
    let registry = Registry::start(vec![
        spec("a", "", greeter("a")),
        spec("b", "", greeter("b")),
        spec("twice", "t", twice),
    ])
    .await
    .expect("a module's own inconsistency does not stop the gateway");
    let prompts: Vec<Value> = registry
        .prompts()
        .iter()
        .map(|p| p["name"].clone())
        .collect();
    assert_eq!(
        prompts,
        [json!("greet")],
        "listed once: the first module keeps the name"
    );
    assert!(
        registry.lookup("t__wipe").is_none(),
        "neither definition is listed"
    );
    assert!(
        registry.lookup("t__other").is_some(),
        "the module's other tools are"
    );
    let left_out = registry.left_out();
    let names: Vec<&str> = left_out.iter().map(|(m, _)| *m).collect();
    assert_eq!(names, ["b", "twice"]);
    assert!(
        left_out[0].1[0]
            .contains("prompt \"greet\" is module \"a\"'s (earlier in the configuration)"),
        "{left_out:?}"
    );
    assert!(
        left_out[1].1[0].contains("tool \"t__wipe\" 2 times"),
        "{left_out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_of_a_module_reached_over_http_are_listed_and_got() {
    // The upstream: a gateway serving two prompt modules on a real socket.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(mcp_http::serve(
        listener,
        Arc::new(service().await),
        mcp_http::ServeConfig::default(),
        async {
            let _ = stopped.await;
        },
    ));
    let module = mcp_upstream::http::HttpModule::new(mcp_upstream::http::HttpConfig {
        name: "up".into(),
        url: format!("http://{address}/mcp").parse().unwrap(),
        headers: Vec::new(),
        tls: None,
        credentials: None,
        call_timeout: std::time::Duration::from_secs(30),
        era: Default::default(),
    })
    .unwrap();
    let registry = Registry::start(vec![ModuleSpec {
        isolation: None,
        name: "up".into(),
        prefix: "up".into(),
        trust_annotations: true,
        module: Arc::new(module),
    }])
    .await
    .unwrap();
    let names: Vec<Value> = registry
        .prompts()
        .iter()
        .map(|p| p["name"].clone())
        .collect();
    assert_eq!(names, [json!("up__a__greet"), json!("up__b__greet")]);
    let params: mcp_wire::CallToolParams =
        serde_json::from_value(json!({"name": "up__b__greet", "arguments": {"who": "kay"}}))
            .unwrap();
    let got = registry.get_prompt(params, None).await.unwrap().unwrap();
    let got: Value = serde_json::from_str(got.get()).unwrap();
    assert_eq!(
        got["messages"][0]["content"]["text"], "b greets kay",
        "{got}"
    );
    let _ = stop.send(());
    let _ = server.await;
}

#[tokio::test]
async fn every_modules_resources_are_listed_and_each_is_read_from_its_module() {
    let service = service().await;
    let (_, headers, init) = send(
        &service,
        &[],
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
               "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .await;
    assert!(
        init["result"]["capabilities"]["resources"].is_object(),
        "{init}"
    );
    let session = headers["mcp-session-id"].to_str().unwrap().to_owned();
    let h = [("mcp-session-id", session.as_str())];
    let (_, _, listed) = send(
        &service,
        &h,
        json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}),
    )
    .await;
    let uris: Vec<&str> = listed["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, ["file:///a.txt", "file:///b.txt"], "{listed}");
    let (_, _, templates) = send(
        &service,
        &h,
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/templates/list"}),
    )
    .await;
    assert_eq!(
        templates["result"]["resourceTemplates"],
        json!([]),
        "{templates}"
    );
    for module in ["a", "b"] {
        let uri = format!("file:///{module}.txt");
        let (_, _, read) = send(
            &service,
            &h,
            json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": uri}}),
        )
        .await;
        assert_eq!(
            read["result"]["contents"][0]["text"],
            format!("the text of {module}"),
            "{read}"
        );
    }
    let (_, _, unknown) = send(
        &service,
        &h,
        json!({"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": "file:///c.txt"}}),
    )
    .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let (_, _, no_uri) = send(
        &service,
        &h,
        json!({"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": {}}),
    )
    .await;
    assert_eq!(no_uri["error"]["code"], -32602, "{no_uri}");
}

#[tokio::test]
async fn a_modern_resource_read_carries_the_caching_hints_the_spec_asks_for() {
    let service = service().await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let (status, _, read) = send(
        &service,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "resources/read"),
            ("mcp-name", "file:///b.txt"),
        ],
        json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "file:///b.txt", "_meta": meta}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{read}");
    assert_eq!(read["result"]["contents"][0]["text"], "the text of b");
    assert_eq!(read["result"]["resultType"], "complete");
    assert_eq!(read["result"]["ttlMs"], 0);
    assert_eq!(read["result"]["cacheScope"], "private");
}

#[tokio::test]
async fn two_modules_listing_one_resource_uri_start_and_the_uri_stays_the_first_modules() {
    // Two copies of one server side by side (two filesystem roots) share static URIs.
    let twin = |name: &'static str| {
        InProcessModule::new(name, Vec::new()).with_resources(vec![
            (
                json!({"uri": "file:///shared.txt", "name": "shared"}),
                format!("{name}'s shared"),
            ),
            (
                json!({"uri": format!("file:///{name}.txt"), "name": name}),
                format!("{name}'s own"),
            ),
        ])
    };
    let registry = Registry::start(vec![spec("a", "a", twin("a")), spec("b", "b", twin("b"))])
        .await
        .expect("a shared URI is the module's problem, never the gateway's");
    let uris: Vec<String> = registry
        .resources()
        .iter()
        .map(|r| r["uri"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        uris,
        ["file:///shared.txt", "file:///a.txt", "file:///b.txt"],
        "listed once, and b's other resources still are"
    );
    let read = async |uri: &str| {
        let mut params = serde_json::Map::new();
        params.insert("uri".into(), json!(uri));
        let raw = registry
            .read_resource(mcp_wire::tools::ForwardParams(params), None)
            .await
            .expect("claimed")
            .expect("read");
        serde_json::from_str::<Value>(raw.get()).unwrap()["contents"][0]["text"].clone()
    };
    assert_eq!(read("file:///shared.txt").await, "a's shared");
    assert_eq!(read("file:///b.txt").await, "b's own");
}

#[test]
fn uri_templates_match_what_they_describe_and_nothing_else() {
    use mcp_upstream::registry::template_matches;
    assert!(template_matches(
        "file:///logs/{day}.txt",
        "file:///logs/monday.txt"
    ));
    assert!(!template_matches(
        "file:///logs/{day}.txt",
        "file:///logs/a/b.txt"
    ));
    assert!(template_matches("file:///{+path}", "file:///a/b/c"));
    assert!(!template_matches(
        "file:///logs/{day}.txt",
        "file:///logs/.txt"
    ));
    assert!(!template_matches("db://{table}", "file:///x"));
    assert!(template_matches("db://{table}/{id}", "db://users/42"));
}

#[tokio::test]
async fn completions_go_to_the_module_of_the_prompt_or_resource_they_refer_to() {
    let service = service().await;
    let (_, headers, init) = send(
        &service,
        &[],
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
               "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .await;
    assert!(
        init["result"]["capabilities"]["completions"].is_object(),
        "{init}"
    );
    let session = headers["mcp-session-id"].to_str().unwrap().to_owned();
    let h = [("mcp-session-id", session.as_str())];
    let complete = |reference: Value| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "completion/complete",
               "params": {"ref": reference, "argument": {"name": "who", "value": "a"}}})
    };
    let (_, _, prompt) = send(
        &service,
        &h,
        complete(json!({"type": "ref/prompt", "name": "b__greet"})),
    )
    .await;
    assert_eq!(
        prompt["result"]["completion"]["values"],
        json!(["b:greet"]),
        "routed to b, with b's own prompt name: {prompt}"
    );
    let (_, _, resource) = send(
        &service,
        &h,
        complete(json!({"type": "ref/resource", "uri": "file:///a.txt"})),
    )
    .await;
    assert_eq!(
        resource["result"]["completion"]["values"],
        json!(["a:file:///a.txt"])
    );
    let (_, _, unknown) = send(
        &service,
        &h,
        complete(json!({"type": "ref/prompt", "name": "greet"})),
    )
    .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}
