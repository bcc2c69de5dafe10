//! Virtual servers end to end (issue 51): two teams' servers over one real filesystem
//! module, callers of two groups through the official Python SDK in both eras, and the
//! attacks on the boundary between the servers (a tool of the other server by name, in a
//! batch, through a session or a confirmation made on another server).

use super::*;

pub(super) const ANN: &str = "servers-ann-agent";
pub(super) const ANN_HUMAN: &str = "servers-ann-human";
pub(super) const BOB: &str = "servers-bob-agent";
pub(super) const BOB_HUMAN: &str = "servers-bob-human";
pub(super) const CAROL: &str = "servers-carol-agent";
pub(super) const CAROL_HUMAN: &str = "servers-carol-human";
pub(super) const AUDITOR: &str = "servers-auditor";

/// A scene's directory, removed when the test that holds it ends.
pub(super) struct SceneDir(PathBuf);

impl Drop for SceneDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// ann is in finance, bob in eng, carol in both; finance offers reading and writing files
/// (writing held by its own rule), eng listing directories and reading files, which its own
/// rule denies there.
pub(super) fn scene(name: &str, extra: &str) -> (SceneDir, PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-servers-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let sandbox = dir.join("sandbox");
    std::fs::create_dir_all(&sandbox).unwrap();
    let sandbox = sandbox.canonicalize().unwrap();
    std::fs::write(sandbox.join("ledger.txt"), "Q4 ledger").unwrap();
    let config = dir.join("gateway.toml");
    let token = |subject: &str, token: &str, scopes: &str, groups: &str| {
        format!(
            "[[auth.tokens]]\nsubject = \"{subject}\"\ntoken_sha256 = \"{}\"\nscopes = [{scopes}]\ngroups = [{groups}]\n",
            token_sha256(token)
        )
    };
    let text = format!(
        r#"
listen = "127.0.0.1:0"
[auth]
mode = "tokens"
{ann}{ann_human}{bob}{bob_human}{carol}{carol_human}{auditor}
[[modules]]
name = "fs"
transport = "stdio"
command = "{server}"
args = ["{sandbox}"]
trust_annotations = true

[[servers]]
path = "/mcp/finance"
tools = ["fs__read_text_file", "fs__write_file"]
groups = ["finance"]
[[servers.policy]]
tool = "fs__write_file"
gate = "confirm"

[[servers]]
path = "/mcp/eng"
tools = ["fs__list_directory", "fs__read_text_file"]
groups = ["eng"]
[[servers.policy]]
tool = "fs__read_text_file"
gate = "deny"
{extra}
"#,
        ann = token("ann", ANN, "\"tools:call\"", "\"finance\""),
        ann_human = token("ann", ANN_HUMAN, "\"elicitations:respond\"", ""),
        bob = token("bob", BOB, "\"tools:call\"", "\"eng\""),
        bob_human = token("bob", BOB_HUMAN, "\"elicitations:respond\"", ""),
        carol = token("carol", CAROL, "\"tools:call\"", "\"finance\", \"eng\""),
        carol_human = token("carol", CAROL_HUMAN, "\"elicitations:respond\"", ""),
        auditor = token("auditor", AUDITOR, "\"audit:read\"", ""),
        server = filesystem_server(),
        sandbox = sandbox.display(),
    );
    write_secret(&config, &text);
    module_user_owns(&sandbox);
    (SceneDir(dir), sandbox, config)
}

/// The Python SDK as `token` on `url` in `mode`: the tools it is offered and each call's
/// result or error.
async fn python_on(url: &str, token: &str, mode: &str, calls: &Value) -> Value {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/python_servers_client.py"
    );
    let mut command = Command::new(env_or_panic("MCP_INTEROP_PYTHON"));
    command
        .arg(script)
        .arg(url)
        .args([token, mode])
        .arg(calls.to_string());
    run_client(command, &format!("python {mode} on {url}")).await
}

/// A JSON-RPC message to `path` as `token`, with these headers: the status and the answer.
pub(super) async fn post(
    base: &str,
    path: &str,
    token: &str,
    headers: &[(&str, &str)],
    message: &Value,
) -> (u16, http::HeaderMap, Value) {
    let auth = format!("Bearer {token}");
    let mut all = vec![
        ("authorization", auth.as_str()),
        ("accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    http("POST", &format!("{base}{path}"), &all, Some(message)).await
}

fn error_of(call: &Value) -> String {
    call["error"]
        .as_str()
        .unwrap_or_else(|| panic!("expected a JSON-RPC error: {call}"))
        .to_owned()
}

/// A 2025-03-26 session (the version that may send batches) of `token` on `path`.
async fn batch_session(base: &str, path: &str, token: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}});
    let (status, headers, body) = post(base, path, token, &[], &init).await;
    assert_eq!(status, 200, "{body}");
    headers["mcp-session-id"].to_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_virtual_servers_offer_each_team_only_its_tools_in_both_eras() {
    let (_dir, sandbox, config) = scene("teams", "");
    let gateway = Gateway::start(&config).await;
    let base = gateway.base.clone();
    let finance = format!("{base}/mcp/finance");
    let eng = format!("{base}/mcp/eng");
    let ledger = sandbox.join("ledger.txt").display().to_string();

    for (mode, version) in [("legacy", "2025-11-25"), ("auto", "2026-07-28")] {
        let written = sandbox
            .join(format!("finance-{mode}.txt"))
            .display()
            .to_string();
        let write = json!({"path": written, "content": format!("by ann, {mode}")});
        // ann sees and calls finance's tools; eng's and everything else are no tools there.
        let out = python_on(
            &finance,
            ANN,
            mode,
            &json!([
                ["fs__read_text_file", {"path": ledger}, null],
                ["fs__write_file", write, null],
                ["fs__list_directory", {"path": sandbox.display().to_string()}, null],
                ["fs__move_file", {"source": ledger, "destination": "/tmp/x"}, null],
            ]),
        )
        .await;
        assert_eq!(out["protocol_version"], version, "{out}");
        assert_eq!(
            out["tools"],
            json!(["fs__read_text_file", "fs__write_file"]),
            "{out}"
        );
        let calls = &out["calls"];
        assert_eq!(calls[0]["is_error"], false, "{out}");
        assert!(
            calls[0]["text"][0].as_str().unwrap().contains("Q4 ledger"),
            "{out}"
        );
        // Finance's own rule holds the write, and says so.
        let held = calls[1]["structured"]["elicitation"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("the write is held on finance: {out}"))
            .to_owned();
        // The person sees where it was asked.
        let (status, _, view) = http(
            "GET",
            &format!("{base}/v1/mcp/elicitations/{held}"),
            &[("authorization", &format!("Bearer {ANN_HUMAN}"))],
            None,
        )
        .await;
        assert_eq!(status, 200, "{view}");
        assert_eq!(view["server"], "finance", "{view}");
        for other in [&calls[2], &calls[3]] {
            assert!(error_of(other).contains("unknown tool"), "{out}");
        }
        assert!(!Path::new(&written).exists());
        // ann approves on the REST API; the call runs, on finance, with its confirmation.
        let (status, _, body) = http(
            "POST",
            &format!("{base}/v1/mcp/elicitations/{held}/respond"),
            &[("authorization", &format!("Bearer {ANN_HUMAN}"))],
            Some(&json!({"confirmed": true})),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let out = python_on(
            &finance,
            ANN,
            mode,
            &json!([["fs__write_file", write, held]]),
        )
        .await;
        assert_eq!(out["calls"][0]["is_error"], false, "{out}");
        assert_eq!(
            std::fs::read_to_string(&written).unwrap(),
            format!("by ann, {mode}")
        );

        // bob sees eng's one callable tool: reading, which eng's own rule denies, is not
        // listed there (and is refused), while finance reads freely.
        let out = python_on(
            &eng,
            BOB,
            mode,
            &json!([
                ["fs__list_directory", {"path": sandbox.display().to_string()}, null],
                ["fs__read_text_file", {"path": ledger}, null],
                ["fs__write_file", {"path": ledger, "content": "bob was here"}, null],
            ]),
        )
        .await;
        assert_eq!(out["protocol_version"], version, "{out}");
        assert_eq!(out["tools"], json!(["fs__list_directory"]), "{out}");
        let calls = &out["calls"];
        assert_eq!(calls[0]["is_error"], false, "{out}");
        assert!(
            calls[0]["text"][0].as_str().unwrap().contains("ledger.txt"),
            "{out}"
        );
        assert!(
            calls[1]["is_error"] == true || calls[1]["error"].is_string(),
            "eng denies reading: {out}"
        );
        assert!(error_of(&calls[2]).contains("unknown tool"), "{out}");
        assert_eq!(std::fs::read_to_string(&ledger).unwrap(), "Q4 ledger");
    }

    // Who may connect: ann is not in eng, bob not in finance; an unknown server is nothing.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}});
    for (path, token) in [("/mcp/eng", ANN), ("/mcp/finance", BOB)] {
        let (status, _, body) = post(&base, path, token, &[], &init).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert!(body.to_string().contains("may not connect"), "{body}");
    }
    for path in [
        "/mcp/nope",
        "/mcp/finance/x",
        "/mcp/finance/../eng",
        "/mcp/",
    ] {
        let (status, _, body) = post(&base, path, CAROL, &[], &init).await;
        assert_eq!(status, 404, "{path}: {body}");
    }

    // The gateway's own endpoint is as it was: every tool of the module.
    assert!(
        tool_names(&base, CAROL)
            .await
            .contains(&"fs__move_file".to_owned())
    );

    // The held call's record names the server it was held on.
    let (status, _, body) = http(
        "GET",
        &format!("{base}/v1/audit?tool=fs__write_file&order=oldest"),
        &[("authorization", &format!("Bearer {AUDITOR}"))],
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let held: Vec<&Value> = body["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "tool_call_held")
        .collect();
    assert_eq!(held.len(), 2, "{body}");
    assert!(
        held.iter().all(|e| e["detail"]["server"] == "finance"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_cannot_reach_another_servers_tool_by_batch_session_or_confirmation() {
    let (_dir, sandbox, config) = scene("attacks", "");
    let gateway = Gateway::start(&config).await;
    let base = gateway.base.clone();
    let ledger = sandbox.join("ledger.txt").display().to_string();
    let listing = json!({"path": sandbox.display().to_string()});

    // A batch on finance naming eng's tool: that message is an unknown tool, the others run.
    let session = batch_session(&base, "/mcp/finance", CAROL).await;
    let in_session = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-03-26"),
    ];
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "fs__list_directory", "arguments": listing}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "fs__read_text_file", "arguments": {"path": ledger}}},
    ]);
    let (status, _, answers) = post(&base, "/mcp/finance", CAROL, &in_session, &batch).await;
    assert_eq!(status, 200, "{answers}");
    let by_id = |id: i64| {
        answers
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_id(1)["error"]["code"], -32602, "{answers}");
    assert!(
        by_id(1)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool"),
        "{answers}"
    );
    assert_ne!(by_id(2)["result"]["isError"], true, "{answers}");
    assert_eq!(
        by_id(2)["result"]["content"][0]["text"],
        "Q4 ledger",
        "{answers}"
    );

    // The session made on finance, relayed to eng (where carol may connect too): no session
    // there, so not even eng's own tools are listed through it.
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
    let (status, _, body) = post(&base, "/mcp/eng", CAROL, &in_session, &list).await;
    assert_eq!(status, 404, "{body}");
    let (status, _, body) = post(&base, "/mcp", CAROL, &in_session, &list).await;
    assert_eq!(status, 404, "{body}");

    // A confirmation given on finance approves the call on finance only: named on the
    // gateway's own endpoint, whose rules are not finance's, it runs nothing (the call is
    // held there anew).
    let target = sandbox.join("carol.txt").display().to_string();
    let write = json!({"path": target, "content": "by carol"});
    let modern = |path: &'static str, confirmation: Option<String>| {
        let mut params = json!({"name": "fs__write_file", "arguments": write, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}});
        if let Some(id) = confirmation {
            params["_meta"]["confirmation_id"] = json!(id);
        }
        let base = base.clone();
        async move {
            let (status, _, body) = post(
                &base,
                path,
                CAROL,
                &[
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "fs__write_file"),
                ],
                &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            body["result"].clone()
        }
    };
    let on_finance = held_id(&modern("/mcp/finance", None).await);
    let (status, _, body) = http(
        "POST",
        &format!("{base}/v1/mcp/elicitations/{on_finance}/respond"),
        &[("authorization", &format!("Bearer {CAROL_HUMAN}"))],
        Some(&json!({"confirmed": true})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let elsewhere = modern("/mcp", Some(on_finance.clone())).await;
    assert_ne!(held_id(&elsewhere), on_finance, "{elsewhere}");
    assert!(!Path::new(&target).exists(), "nothing ran off finance");
    // On finance it runs, once.
    let ran = modern("/mcp/finance", Some(on_finance.clone())).await;
    assert_ne!(ran["isError"], true, "{ran}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "by carol");
}
