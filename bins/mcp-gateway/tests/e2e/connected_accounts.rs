//! Connected accounts (`auth.kind = "user"`): a module run as each caller's own account at
//! its authorization server — the real `oidc-provider`, with dynamic client registration —
//! connected by the person on the approvals page in a real browser (authorization code with
//! PKCE through the server's own login pages). The module checks each token's signature,
//! audience and scope and records whose it is. A caller who has not connected is not sent
//! (the Connect link in-band, or `-32042` for a 2025-11-25 client that takes URL
//! elicitations); another caller's calls never carry the person's token; Disconnect stops
//! them; an expiring token is refreshed; no token reaches the log.

use super::tool_changes::Shifty;
use super::*;

const ALICE_AGENT: &str = "e2e-accounts-alice-agent";
const ALICE_PERSON: &str = "e2e-accounts-alice-person";
const BOB_AGENT: &str = "e2e-accounts-bob-agent";
const BOB_PERSON: &str = "e2e-accounts-bob-person";
const LIST_TOKEN: &str = "e2e-accounts-list-token-5521";

fn tools() -> Value {
    json!([
        {"name": "read", "description": "Reads a note.",
         "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
         "annotations": {"readOnlyHint": true}},
        {"name": "write", "description": "Writes a note.",
         "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
         "annotations": {"readOnlyHint": false, "destructiveHint": true}}
    ])
}

fn gateway_config(dir: &Path, store: &str, module: &str) -> PathBuf {
    let file = dir.join("gateway.toml");
    let token = |subject: &str, token: &str, scope: &str| {
        format!(
            "[[auth.tokens]]\nsubject = \"{subject}\"\ntoken_sha256 = \"{}\"\nscopes = [\"{scope}\"]\n",
            token_sha256(token)
        )
    };
    let text = format!(
        "listen = \"127.0.0.1:0\"\n{store}\n[auth]\nmode = \"tokens\"\n{}{}{}{}{module}",
        token("alice", ALICE_AGENT, "tools:call"),
        token("alice", ALICE_PERSON, "elicitations:respond"),
        token("bob", BOB_AGENT, "tools:call"),
        token("bob", BOB_PERSON, "elicitations:respond"),
    );
    std::fs::write(&file, text).unwrap();
    file
}

/// A 2026-07-28 call as `token`: its JSON-RPC answer.
async fn modern_as(base: &str, token: &str, tool: &str) -> Value {
    let params = json!({"name": tool, "arguments": {"path": "/n"}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}}}});
    let (status, _, body) = http(
        "POST",
        &format!("{base}/mcp"),
        &[
            ("authorization", &format!("Bearer {token}")),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", tool),
        ],
        Some(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// A 2025-11-25 call as `token` in a new session that declares URL elicitation when
/// `url_capable`: its JSON-RPC answer.
async fn legacy_as(base: &str, token: &str, tool: &str, url_capable: bool) -> Value {
    let auth = format!("Bearer {token}");
    let capabilities = if url_capable {
        json!({"elicitation": {"form": {}, "url": {}}})
    } else {
        json!({})
    };
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": capabilities,
        "clientInfo": {"name": "e2e", "version": "1"}}});
    let (status, headers, body) = http(
        "POST",
        &format!("{base}/mcp"),
        &[
            ("authorization", &auth),
            ("accept", "application/json, text/event-stream"),
        ],
        Some(&init),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let session = headers["mcp-session-id"].to_str().unwrap().to_owned();
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": {"path": "/n"}}});
    let (status, _, body) = http(
        "POST",
        &format!("{base}/mcp"),
        &[
            ("authorization", &auth),
            ("mcp-session-id", &session),
            ("mcp-protocol-version", "2025-11-25"),
            ("accept", "application/json"),
        ],
        Some(&call),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The person connects (`login` at the authorization server) or disconnects in Chromium.
async fn on_the_page(base: &str, person: &str, action: &str, login: &str, link: &str) -> Value {
    let mut command = Command::new(env_or_panic("MCP_INTEROP_PYTHON"));
    command
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/browser/accounts_browser.py"
        ))
        .args([base, person, "notes", action, login, link]);
    run_client(command, "the accounts page in Chromium").await
}

/// Whether the answer is the tool error saying the account is not connected, with `link`.
fn asks_to_connect(answer: &Value, link: &str) -> bool {
    let result = &answer["result"];
    result["isError"] == true
        && result["structuredContent"]["account_required"] == true
        && result["structuredContent"]["connect_url"] == link
        && text(result).contains(link)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_person_connects_their_own_account_and_their_calls_run_as_it() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-accounts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = TestDb::new().await;
    // Tokens live 45 s: fresh for 15 s (refreshed 30 s before they end). The two calls
    // that share one token come after the browser's connect; 5 s was once all they had.
    let idp = Idp::start_env(None, &[("IDP_CONNECT", "1"), ("IDP_TTL", "45")]).await;
    let env = [
        ("MCP_AUTH_ISSUER", idp.issuer.clone()),
        ("MCP_AUTH_SCOPE", "notes.write".to_owned()),
        ("MCP_AUTH_LIST_STATIC", LIST_TOKEN.to_owned()),
    ];
    let auth = "auth = { kind = \"user\", scopes = [\"notes.write\"], list_token_env = \"NOTES_LIST_TOKEN\" }";
    let shifty = Shifty::start_with(&dir, "notes", "modern-http", tools(), auth, &env).await;
    let file = gateway_config(&dir, &postgres_store(&db), &shifty.module);
    let log = dir.join("gateway.log");
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"));
    command.env("NOTES_LIST_TOKEN", LIST_TOKEN);
    let gateway = Gateway::start_logging(
        &file,
        command,
        "debug",
        Stdio::from(std::fs::File::create(&log).unwrap()),
    )
    .await;
    let base = gateway.base.clone();
    let link = format!("{base}/approvals/accounts?connect=notes");

    // Listed with the gateway's own list token; nobody's calls are sent before they connect.
    let listed = tool_names(&base, ALICE_AGENT).await;
    assert!(
        listed.contains(&"notes__read".to_owned()) && listed.contains(&"notes__write".to_owned()),
        "{listed:?}"
    );
    let answer = modern_as(&base, ALICE_AGENT, "notes__read").await;
    assert!(asks_to_connect(&answer, &link), "{answer}");
    // A destructive call is not even held: a person would approve what cannot run.
    let answer = modern_as(&base, ALICE_AGENT, "notes__write").await;
    assert!(asks_to_connect(&answer, &link), "{answer}");
    // A 2025-11-25 client that takes URL elicitations gets -32042 with the link; one that
    // does not, the tool error.
    let answer = legacy_as(&base, BOB_AGENT, "notes__read", true).await;
    assert_eq!(answer["error"]["code"], -32042, "{answer}");
    let asked = &answer["error"]["data"]["elicitations"][0];
    assert_eq!(
        (asked["mode"].as_str(), asked["url"].as_str()),
        (Some("url"), Some(link.as_str())),
        "{answer}"
    );
    assert!(
        asked["elicitationId"]
            .as_str()
            .is_some_and(|id| id.len() == 36)
    );
    let answer = legacy_as(&base, BOB_AGENT, "notes__read", false).await;
    assert!(asks_to_connect(&answer, &link), "{answer}");
    assert!(
        shifty.ledger().is_empty(),
        "nothing ran: {:?}",
        shifty.ledger()
    );

    // Alice connects her account from the link she was given.
    let page = on_the_page(&base, ALICE_PERSON, "connect", "alice-at-notes", &link).await;
    assert!(
        page["before"].as_str().unwrap().contains("Not connected"),
        "{page}"
    );
    assert_eq!(page["marked"], true, "{page}");
    assert_eq!(
        page["login_page_host"].as_str(),
        idp.issuer.strip_prefix("http://"),
        "{page}"
    );
    assert!(
        page["after"].as_str().unwrap().contains("Connected since"),
        "{page}"
    );
    assert_eq!(page["dialogs"], json!([]), "{page}");

    // Her calls run as her account at the module, over both client eras; bob's do not.
    let answer = modern_as(&base, ALICE_AGENT, "notes__read").await;
    assert_eq!(text(&answer["result"]), "ran read", "{answer}");
    let answer = legacy_as(&base, ALICE_AGENT, "notes__read", false).await;
    assert_eq!(text(&answer["result"]), "ran read", "{answer}");
    let answer = modern_as(&base, BOB_AGENT, "notes__read").await;
    assert!(asks_to_connect(&answer, &link), "{answer}");
    let ledger = shifty.ledger();
    assert_eq!(ledger.len(), 2, "{ledger:?}");
    for entry in &ledger {
        assert_eq!(entry["auth"]["sub"], "alice-at-notes", "{entry}");
        assert!(
            entry["auth"]["scope"]
                .as_str()
                .unwrap()
                .contains("notes.write")
        );
    }
    assert_eq!(
        ledger[0]["auth"]["jti"], ledger[1]["auth"]["jti"],
        "one token while it is fresh"
    );

    // Bob connects his own; each runs as themselves.
    let page = on_the_page(&base, BOB_PERSON, "connect", "bob-at-notes", &link).await;
    assert!(
        page["after"].as_str().unwrap().contains("Connected since"),
        "{page}"
    );
    let answer = legacy_as(&base, BOB_AGENT, "notes__read", true).await;
    assert_eq!(text(&answer["result"]), "ran read", "{answer}");
    let answer = modern_as(&base, ALICE_AGENT, "notes__read").await;
    assert_eq!(text(&answer["result"]), "ran read", "{answer}");
    let ledger = shifty.ledger();
    let subs: Vec<&str> = ledger
        .iter()
        .map(|e| e["auth"]["sub"].as_str().unwrap())
        .collect();
    assert_eq!(
        subs,
        [
            "alice-at-notes",
            "alice-at-notes",
            "bob-at-notes",
            "alice-at-notes"
        ]
    );

    // Past its freshness the token is refreshed (a new one, still hers).
    tokio::time::sleep(Duration::from_secs(16)).await;
    let answer = modern_as(&base, ALICE_AGENT, "notes__read").await;
    assert_eq!(text(&answer["result"]), "ran read", "{answer}");
    let ledger = shifty.ledger();
    let last = ledger.last().unwrap();
    assert_eq!(last["auth"]["sub"], "alice-at-notes");
    assert_ne!(
        last["auth"]["jti"], ledger[0]["auth"]["jti"],
        "refreshed: {ledger:?}"
    );

    // Alice disconnects: her calls are not sent; bob's still are.
    let page = on_the_page(
        &base,
        ALICE_PERSON,
        "disconnect",
        "",
        &format!("{base}/approvals/accounts"),
    )
    .await;
    assert!(
        page["after"].as_str().unwrap().contains("Not connected"),
        "{page}"
    );
    let before = shifty.ledger().len();
    let answer = modern_as(&base, ALICE_AGENT, "notes__read").await;
    assert!(asks_to_connect(&answer, &link), "{answer}");
    assert_eq!(shifty.ledger().len(), before, "nothing sent for alice");
    let answer = modern_as(&base, BOB_AGENT, "notes__read").await;
    assert_eq!(text(&answer["result"]), "ran read", "{answer}");
    assert_eq!(
        shifty.ledger().last().unwrap()["auth"]["sub"],
        "bob-at-notes"
    );

    // No call ever went with the list token, and no token reached the log.
    let ledger = shifty.ledger();
    assert!(
        ledger.iter().all(|e| e["auth"]["jti"] != "list"),
        "{ledger:?}"
    );
    gateway.stop().await;
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("account_connected"),
        "the connections are in the audit log"
    );
    let mut secrets: Vec<String> = ledger
        .iter()
        .map(|e| e["auth"]["token"].as_str().unwrap().to_owned())
        .collect();
    secrets.push(LIST_TOKEN.to_owned());
    for secret in &secrets {
        assert!(
            !logged.contains(secret.as_str()),
            "a token in the log: {}…",
            &secret[..12]
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_module_is_refused_where_it_could_not_run_as_its_callers() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-accounts-cfg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let check = async |module: &str| {
        let file = gateway_config(&dir, "[store]\nkind = \"memory\"", module);
        let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"));
        command.env("NOTES_SECRET", "a-client-secret-998");
        check_config_with(command, &file).await
    };
    let module = |auth: &str| {
        format!(
            "[[modules]]\nname = \"notes\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"\n{auth}\n"
        )
    };
    let (ok, out) = check(&module("auth = { kind = \"user\" }")).await;
    assert!(ok, "{out}");
    let (ok, out) = check(&module(
        "auth = { kind = \"user\" }\nisolation = \"shared\"",
    ))
    .await;
    assert!(
        !ok && out.contains("isolation must be \"per_caller\""),
        "{out}"
    );
    // A client secret goes only to a configured authorization server.
    let (ok, out) = check(&module(
        "auth = { kind = \"user\", client_id = \"gw\", client_secret_env = \"NOTES_SECRET\" }",
    ))
    .await;
    assert!(!ok && out.contains("set auth.issuer"), "{out}");
    let (ok, out) = check(&module(
        "auth = { kind = \"user\", client_id = \"gw\", client_secret_env = \"NOTES_SECRET\", issuer = \"https://as.example\" }",
    ))
    .await;
    assert!(ok && !out.contains("a-client-secret-998"), "{out}");
    let (ok, out) = check(&module(
        "auth = { kind = \"user\", client_secret_env = \"NOTES_SECRET\", issuer = \"https://as.example\" }",
    ))
    .await;
    assert!(!ok && out.contains("needs auth.client_id"), "{out}");
    let (ok, out) = check(&module(
        "auth = { kind = \"user\", list_token_env = \"DATABASE_URL\" }",
    ))
    .await;
    assert!(
        !ok && out.contains("a secret of the gateway's own"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `token_exchange` (RFC 8693): each caller's own access token to the gateway (mode `jwt`)
/// is exchanged at the identity provider for one whose audience is the module (a 2025-era
/// module here), cached per caller, so each call runs as its caller; no token is logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_callers_own_token_is_exchanged_for_the_modules() {
    let idp = Idp::start(None).await;
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let dir = std::env::temp_dir().join(format!("mcp-e2e-exchange-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let env = [
        ("MCP_AUTH_ISSUER", idp.issuer.clone()),
        ("MCP_AUTH_SCOPE", "notes.write".to_owned()),
        ("MCP_AUTH_LIST_STATIC", LIST_TOKEN.to_owned()),
    ];
    let auth = format!(
        "auth = {{ kind = \"token_exchange\", client_id = \"exchange-gw\", client_secret_env = \"EXCHANGE_SECRET\", issuer = \"{}\", scopes = [\"notes.write\"], list_token_env = \"NOTES_LIST_TOKEN\" }}",
        idp.issuer
    );
    let shifty = Shifty::start_with(&dir, "notes", "legacy-http", tools(), &auth, &env).await;
    let (scene, file) = jwt_gateway_config("exchange", port, &idp.issuer, "", &shifty.module);
    let log = dir.join("gateway.log");
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"));
    command
        .env("EXCHANGE_SECRET", "exchange-gw-secret")
        .env("NOTES_LIST_TOKEN", LIST_TOKEN);
    let gateway = Gateway::start_logging(
        &file,
        command,
        "debug",
        Stdio::from(std::fs::File::create(&log).unwrap()),
    )
    .await;
    let base = gateway.base.clone();
    let alice = idp.token("alice", "mcp.tools", &resource).await;
    let agent = idp.token("agent", "mcp.tools", &resource).await;

    for _ in 0..2 {
        let answer = modern_as(&base, &alice, "notes__read").await;
        assert_eq!(text(&answer["result"]), "ran read", "{answer}");
    }
    let answer = legacy_as(&base, &agent, "notes__read", false).await;
    assert_eq!(text(&answer["result"]), "ran read", "{answer}");
    let answer = legacy_as(&base, &alice, "notes__read", false).await;
    assert_eq!(text(&answer["result"]), "ran read", "{answer}");
    let ledger = shifty.ledger();
    let subs: Vec<&str> = ledger
        .iter()
        .map(|e| e["auth"]["sub"].as_str().unwrap())
        .collect();
    assert_eq!(subs, ["alice", "alice", "agent", "alice"], "{ledger:?}");
    assert_eq!(
        ledger[0]["auth"]["jti"], ledger[3]["auth"]["jti"],
        "one exchange per caller while it lives"
    );
    assert_ne!(ledger[0]["auth"]["jti"], ledger[2]["auth"]["jti"]);
    // Another token of the same person (another client, other scopes) is exchanged anew:
    // an exchanged token is kept for the token it came from only.
    let alice_again = idp.token("alice", "mcp.tools", &resource).await;
    assert_ne!(alice_again, alice);
    let answer = modern_as(&base, &alice_again, "notes__read").await;
    assert_eq!(text(&answer["result"]), "ran read", "{answer}");
    let ledger = shifty.ledger();
    assert_eq!(ledger[4]["auth"]["sub"], "alice");
    assert_ne!(ledger[4]["auth"]["jti"], ledger[0]["auth"]["jti"]);
    for entry in &ledger {
        // Not the caller's own token: the module's, exchanged.
        let token = entry["auth"]["token"].as_str().unwrap();
        assert!(
            token != alice && token != agent && token != alice_again,
            "{entry}"
        );
    }
    gateway.stop().await;
    let logged = std::fs::read_to_string(&log).unwrap();
    let mut secrets: Vec<String> = ledger
        .iter()
        .map(|e| e["auth"]["token"].as_str().unwrap().to_owned())
        .collect();
    secrets.extend([
        alice,
        agent,
        LIST_TOKEN.to_owned(),
        "exchange-gw-secret".to_owned(),
    ]);
    for secret in &secrets {
        assert!(
            !logged.contains(secret.as_str()),
            "a secret in the log: {}…",
            &secret[..12]
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&scene);
}
