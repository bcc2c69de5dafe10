//! A module's own credentials (`[[modules]] auth`): a static bearer token, and the gateway's
//! OAuth client (`client_credentials`) at the module's authorization server — the real
//! `oidc-provider` — found through the module's `401` (RFC 9728 → RFC 8414) or configured,
//! the token's audience the module's URL (RFC 8707), cached, fetched again before it ends and
//! once after a `401`. The module checks the JWT's signature, audience and scope itself. No
//! secret or token appears in the gateway's log, even at `debug`.

use super::notifications::write_tool;
use super::tool_changes::{Shifty, config};
use super::*;

const SECRET: &str = "notes-gw-secret";

/// A gateway over `module` with `NOTES_SECRET` (and `NOTES_TOKEN`) in its environment,
/// logging at debug into `log`.
async fn gateway_with_secret(dir: &Path, module: &str, log: &Path) -> Gateway {
    let file = config(dir, "[store]\nkind = \"memory\"", module);
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"));
    command
        .env("NOTES_SECRET", SECRET)
        .env("NOTES_TOKEN", "static-token-7781");
    let log = std::fs::File::create(log).unwrap();
    Gateway::start_logging(&file, command, "debug", Stdio::from(log)).await
}

/// A held, approved and re-called write: what it returned.
async fn approved_write(base: &str, path: &str) -> Value {
    let id = held_id(&modern_call(base, "notes__write", json!({"path": path}), None).await);
    answer(base, &id, true).await;
    modern_call(base, "notes__write", json!({"path": path}), Some(&id)).await
}

fn assert_no_secret_in(log: &Path, secrets: &[String]) {
    let text = std::fs::read_to_string(log).unwrap();
    assert!(!text.is_empty(), "the log was written");
    for secret in secrets {
        assert!(!secret.is_empty());
        assert!(
            !text.contains(secret.as_str()),
            "a secret in the log: {}…",
            &secret[..secret.len().min(12)]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_gets_its_static_token_and_nothing_else_does() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-bearer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let env = [("MCP_AUTH_STATIC", "static-token-7781".to_owned())];
    let auth = "auth = { kind = \"bearer\", token_env = \"NOTES_TOKEN\" }";
    let shifty = Shifty::start_with(&dir, "notes", "modern-http", write_tool(), auth, &env).await;
    let log = dir.join("gateway.log");
    let gateway = gateway_with_secret(&dir, &shifty.module, &log).await;
    let ran = approved_write(&gateway.base, "/a").await;
    assert_eq!(text(&ran), "ran write", "{ran}");
    assert_eq!(
        shifty.ledger()[0]["auth"]["jti"],
        "static",
        "{:?}",
        shifty.ledger()
    );
    gateway.stop().await;
    assert_no_secret_in(&log, &["static-token-7781".into()]);

    // Without it the module refuses the gateway, and a module that asks to inherit it is
    // refused at start: the token is a gateway secret.
    let check = async |module: &str, with_env: bool| {
        let file = config(&dir, "[store]\nkind = \"memory\"", module);
        let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"));
        if with_env {
            command.env("NOTES_TOKEN", "static-token-7781");
        } else {
            command.env_remove("NOTES_TOKEN");
        }
        check_config_with(command, &file).await
    };
    let (ok, out) = check(&shifty.module, false).await;
    assert!(
        !ok && out.contains("NOTES_TOKEN") && out.contains("module \"notes\""),
        "{out}"
    );
    let (ok, out) = check(&shifty.module, true).await;
    assert!(ok, "{out}");
    assert!(
        !out.contains("static-token-7781"),
        "check-config prints no secret: {out}"
    );
    let stdio = "[[modules]]\nname = \"other\"\ntransport = \"stdio\"\ncommand = \"/bin/true\"\ninherit_env = [\"NOTES_TOKEN\"]\n";
    let (ok, out) = check(&format!("{}{stdio}", shifty.module), true).await;
    assert!(
        !ok && out.contains("inherit_env lists NOTES_TOKEN"),
        "{out}"
    );
    let header = shifty.module.replace(
        auth,
        &format!("{auth}\nheaders = {{ Authorization = \"Bearer x\" }}"),
    );
    let (ok, out) = check(&header, true).await;
    assert!(!ok && out.contains("keep one"), "{out}");
    // A module's credentials can never be one of the gateway's own secrets (which would
    // then be sent to the module).
    for own in ["MCP_GATEWAY_SEAL_KEYS", "DATABASE_URL"] {
        let theirs = shifty.module.replace("NOTES_TOKEN", own);
        let (ok, out) = check(&theirs, true).await;
        assert!(
            !ok && out.contains(&format!("auth names {own}, a secret of the gateway's own")),
            "{out}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Found through the module's challenge: the first request goes without a token, the
/// module's `401` names its metadata, the metadata its authorization server; the token the
/// module gets has the module's URL as audience and the scope asked for. It is reused while
/// it lives and fetched again before it ends (tokens live 20 s here, so fetched again after
/// 10 s: the two calls that share one token have those 10 s on a loaded machine, where 2 s
/// was once all they had).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_credentials_found_through_the_modules_challenge_are_cached_and_renewed() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-cc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let idp = Idp::start_env(None, &[("IDP_TTL", "20")]).await;
    let env = [
        ("MCP_AUTH_ISSUER", idp.issuer.clone()),
        ("MCP_AUTH_SCOPE", "notes.write".to_owned()),
    ];
    let auth = "auth = { kind = \"client_credentials\", client_id = \"notes-gw\", client_secret_env = \"NOTES_SECRET\", scopes = [\"notes.write\"] }";
    let shifty = Shifty::start_with(&dir, "notes", "modern-http", write_tool(), auth, &env).await;
    let log = dir.join("gateway.log");
    let gateway = gateway_with_secret(&dir, &shifty.module, &log).await;
    listing(&gateway.base, "notes__write").await;
    assert_eq!(
        text(&approved_write(&gateway.base, "/a").await),
        "ran write"
    );
    assert_eq!(
        text(&approved_write(&gateway.base, "/b").await),
        "ran write"
    );
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(
        text(&approved_write(&gateway.base, "/c").await),
        "ran write"
    );
    let ledger = shifty.ledger();
    assert_eq!(ledger.len(), 3, "{ledger:?}");
    let jti = |i: usize| ledger[i]["auth"]["jti"].as_str().unwrap().to_owned();
    assert_eq!(jti(0), jti(1), "one token while it lives");
    assert_ne!(jti(1), jti(2), "a new one before it ends");
    assert!(ledger.iter().all(|l| {
        l["auth"]["scope"]
            .as_str()
            .unwrap()
            .split(' ')
            .any(|s| s == "notes.write")
    }));
    gateway.stop().await;
    let mut secrets = vec![SECRET.to_owned()];
    secrets.extend(
        ledger
            .iter()
            .map(|l| l["auth"]["token"].as_str().unwrap().to_owned()),
    );
    assert_no_secret_in(&log, &secrets);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Configured issuer: the first request already carries a token; the module refuses it once
/// (`401`), the gateway gets a new one and the call runs, once. Asking for a scope the
/// module does not accept: every call is refused in band and nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_is_replaced_once_and_a_wrong_scope_runs_nothing() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-cc401-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let idp = Idp::start(None).await;
    let env = [
        ("MCP_AUTH_ISSUER", idp.issuer.clone()),
        ("MCP_AUTH_SCOPE", "notes.write".to_owned()),
        ("MCP_AUTH_REFUSE_FIRST", "1".to_owned()),
    ];
    let auth = format!(
        "auth = {{ kind = \"client_credentials\", client_id = \"notes-gw\", client_secret_env = \"NOTES_SECRET\", scopes = [\"notes.write\"], issuer = \"{}\" }}",
        idp.issuer
    );
    let shifty = Shifty::start_with(&dir, "notes", "legacy-http", write_tool(), &auth, &env).await;
    let log = dir.join("gateway.log");
    let gateway = gateway_with_secret(&dir, &shifty.module, &log).await;
    listing(&gateway.base, "notes__write").await;
    assert_eq!(
        text(&approved_write(&gateway.base, "/a").await),
        "ran write"
    );
    assert_eq!(shifty.ran().len(), 1, "ran once");
    gateway.stop().await;

    let wrong = shifty
        .module
        .replace("scopes = [\"notes.write\"]", "scopes = [\"notes.read\"]");
    let log = dir.join("gateway-wrong.log");
    let gateway = gateway_with_secret(&dir, &wrong, &log).await;
    assert!(
        tool_names(&gateway.base, AGENT).await.is_empty(),
        "a module that refuses the gateway lists nothing through it"
    );
    gateway.stop().await;
    assert_eq!(shifty.ran().len(), 1, "nothing more ran");
    let mut secrets = vec![SECRET.to_owned()];
    secrets.extend(
        shifty
            .ledger()
            .iter()
            .map(|l| l["auth"]["token"].as_str().unwrap().to_owned()),
    );
    assert_no_secret_in(&log, &secrets);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits until the agent's listing holds `tool`.
async fn listing(base: &str, tool: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let names = tool_names(base, AGENT).await;
        if names.iter().any(|n| n == tool) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{tool} listed: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A module that names an authorization server on another host than its own (where the
/// gateway would send its client secret) is not followed: nothing is sent there, nothing is
/// listed, and the log says to configure `auth.issuer` to trust it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_cannot_send_the_gateways_secret_to_a_server_of_its_choosing() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-cc-elsewhere-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let idp = Idp::start(None).await;
    // The same server by another name: another host, as far as the module's URL goes.
    let elsewhere = idp.issuer.replace("127.0.0.1", "localhost");
    let env = [
        ("MCP_AUTH_ISSUER", elsewhere.clone()),
        ("MCP_AUTH_SCOPE", "notes.write".to_owned()),
    ];
    let auth = "auth = { kind = \"client_credentials\", client_id = \"notes-gw\", client_secret_env = \"NOTES_SECRET\", scopes = [\"notes.write\"] }";
    let shifty = Shifty::start_with(&dir, "notes", "modern-http", write_tool(), auth, &env).await;
    let log = dir.join("gateway.log");
    let gateway = gateway_with_secret(&dir, &shifty.module, &log).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("on another host than its own; set auth.issuer") {
            assert!(text.contains(&elsewhere), "names the server");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(tool_names(&gateway.base, AGENT).await.is_empty());
    gateway.stop().await;
    assert!(shifty.ran().is_empty());
    assert_no_secret_in(&log, &[SECRET.to_owned()]);
    let _ = std::fs::remove_dir_all(&dir);
}
