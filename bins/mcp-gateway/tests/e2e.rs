//! End-to-end: the real binary on a real socket, the official filesystem MCP server (from
//! npm, run by `cargo xtask test`) as a stdio module, the memory store and a real
//! PostgreSQL store — including a gateway restart between the hold and the confirmation.

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use elicitation_store::test_support::TestDb;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use mcp_auth::token_sha256;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

#[path = "e2e/agent_hosts.rs"]
mod agent_hosts;
#[path = "e2e/audit.rs"]
mod audit;
#[path = "e2e/cancellation.rs"]
mod cancellation;
#[path = "e2e/connected_accounts.rs"]
mod connected_accounts;
#[path = "e2e/exhaustion.rs"]
mod exhaustion;
#[path = "e2e/flow.rs"]
mod flow;
#[path = "e2e/https_modules.rs"]
mod https_modules;
#[path = "e2e/import.rs"]
mod import;
#[path = "e2e/insights.rs"]
mod insights;
#[path = "e2e/modern_tasks.rs"]
mod modern_tasks;
#[path = "e2e/notifications.rs"]
mod notifications;
#[path = "e2e/permission_prompt.rs"]
mod permission_prompt;
#[path = "e2e/quotas.rs"]
mod quotas;
#[path = "e2e/rmcp_peers.rs"]
mod rmcp_peers;
#[path = "e2e/servers.rs"]
mod servers;
#[path = "e2e/tasks.rs"]
mod tasks;
#[path = "e2e/tool_changes.rs"]
mod tool_changes;
#[path = "e2e/traces.rs"]
mod traces;
#[path = "e2e/upstream_auth.rs"]
mod upstream_auth;

const AGENT: &str = "e2e-agent-token";
const HUMAN: &str = "e2e-human-token";
/// The person's MCP client (an SDK with an elicitation handler): calls tools and answers
/// confirmations natively.
const CLIENT: &str = "e2e-client-token";
/// A backend service of alice's: asks her questions through the REST API.
const SERVICE: &str = "e2e-service-token";
/// A metrics scraper (`metrics:read`).
const SCRAPER: &str = "e2e-scraper-token";

fn filesystem_server() -> String {
    std::env::var("MCP_FILESYSTEM_SERVER").unwrap_or_else(|_| {
        panic!("MCP_FILESYSTEM_SERVER is not set: these tests run the real @modelcontextprotocol/server-filesystem from npm. Run `cargo xtask test`, which installs it and sets the variable.")
    })
}

/// A sandbox directory for the filesystem server, and the gateway's configuration file.
struct Scene {
    dir: PathBuf,
    sandbox: PathBuf,
    config: PathBuf,
}

impl Scene {
    fn new(name: &str, store: &str) -> Scene {
        Scene::with_uploads(name, store, None)
    }

    /// A scene whose uploads go where `uploads` (an `[uploads]` section) says; by default a
    /// directory of the scene's.
    fn with_uploads(name: &str, store: &str, uploads: Option<&str>) -> Scene {
        let dir = std::env::temp_dir().join(format!("mcp-e2e-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let sandbox = dir.join("sandbox");
        std::fs::create_dir_all(&sandbox).unwrap();
        let sandbox = sandbox.canonicalize().unwrap();
        let config = dir.join("gateway.toml");
        let text = format!(
            r#"
listen = "127.0.0.1:0"
{store}
[auth]
mode = "tokens"
[[auth.tokens]]
subject = "alice"
token_sha256 = "{agent}"
scopes = ["tools:call"]
[[auth.tokens]]
subject = "alice"
token_sha256 = "{human}"
scopes = ["elicitations:respond"]
[[auth.tokens]]
subject = "alice"
token_sha256 = "{client}"
scopes = ["tools:call", "elicitations:respond"]
[[auth.tokens]]
subject = "alice"
token_sha256 = "{service}"
scopes = ["elicitations:create"]
[[auth.tokens]]
subject = "scraper"
token_sha256 = "{scraper}"
scopes = ["metrics:read"]
{uploads}
[[modules]]
name = "fs"
transport = "stdio"
command = "{server}"
args = ["{sandbox}"]
trust_annotations = true
[[modules]]
name = "chatty"
transport = "stdio"
command = "python3"
args = ["{chatty}"]
trust_annotations = true
"#,
            agent = token_sha256(AGENT),
            human = token_sha256(HUMAN),
            client = token_sha256(CLIENT),
            service = token_sha256(SERVICE),
            scraper = token_sha256(SCRAPER),
            uploads = uploads.map_or_else(
                || format!("[uploads]\ndir = \"{}\"", dir.join("uploads").display()),
                str::to_owned
            ),
            chatty = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../crates/mcp-http/tests/fixtures/chatty_module.py"
            ),
            server = filesystem_server(),
            sandbox = sandbox.display(),
        );
        write_secret(&config, &text);
        module_user_owns(&sandbox);
        Scene {
            dir,
            sandbox,
            config,
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.sandbox.join(name)
    }
}

/// Writes a file only its owner can read: a configuration with seal keys or a database
/// password in it (the gateway refuses to start when a module's user could read one).
fn write_secret(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Gives `dir` to the user stdio modules run as: `nobody` when the tests run as root (a root
/// gateway runs its modules as `nobody`), else the tests' own user, who has it already.
fn module_user_owns(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata("/proc/self").unwrap().uid() == 0 {
        std::os::unix::fs::chown(dir, Some(65534), Some(65534)).unwrap();
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The running binary.
struct Gateway {
    child: Child,
    base: String,
}

impl Gateway {
    async fn start(config: &Path) -> Gateway {
        Gateway::start_with(config, Command::new(env!("CARGO_BIN_EXE_mcp-gateway"))).await
    }

    /// Starts the binary from a prepared command (extra environment, another user).
    async fn start_with(config: &Path, command: Command) -> Gateway {
        Gateway::start_logging(config, command, "warn", Stdio::inherit()).await
    }

    /// [`Gateway::start_with`], logging at `level` (`RUST_LOG`) into `log`.
    async fn start_logging(
        config: &Path,
        mut command: Command,
        level: &str,
        log: Stdio,
    ) -> Gateway {
        let mut child = command
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", level)
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the gateway starts within a minute")
            .unwrap()
            .expect("the gateway prints where it listens");
        let url = line
            .strip_prefix("mcp-gateway listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        let base = url.trim_end_matches("/mcp").to_owned();
        Gateway { child, base }
    }

    /// SIGTERM, and the process must exit cleanly.
    async fn stop(mut self) {
        let pid = self.child.id().unwrap().to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("stops within 30 s")
            .unwrap();
        assert!(exit.success(), "graceful shutdown exits 0, got {exit}");
    }
}

async fn http(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, http::HeaderMap, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let bytes = body
        .map(|b| serde_json::to_vec(b).unwrap())
        .unwrap_or_default();
    let response = client
        .request(request.body(Full::new(Bytes::from(bytes))).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    // JSON, or an SSE stream whose last JSON-RPC answer is the reply.
    let value = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .rfind(|m| m.get("id").is_some() && m.get("method").is_none())
            .unwrap_or(Value::Null)
    });
    (status, headers, value)
}

struct Session {
    base: String,
    id: String,
    next: i64,
}

impl Session {
    async fn open(gateway: &Gateway) -> Session {
        let id = session_of(gateway, AGENT).await;
        let session = Session {
            base: gateway.base.clone(),
            id,
            next: 0,
        };
        let auth = format!("Bearer {AGENT}");
        let (status, _, _) = http(
            "POST",
            &format!("{}/mcp", session.base),
            &[("authorization", &auth), ("mcp-session-id", &session.id)],
            Some(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
        )
        .await;
        assert_eq!(status, 202);
        session
    }

    async fn call(&mut self, tool: &str, arguments: Value, confirmation: Option<&str>) -> Value {
        self.next += 1;
        let mut params = json!({"name": tool, "arguments": arguments});
        if let Some(id) = confirmation {
            params["_meta"] = json!({"confirmation_id": id});
        }
        let auth = format!("Bearer {AGENT}");
        let headers = [
            ("authorization", auth.as_str()),
            ("mcp-session-id", self.id.as_str()),
            ("mcp-protocol-version", "2025-11-25"),
        ];
        let (status, _, body) = http("POST", &format!("{}/mcp", self.base), &headers, Some(&json!({"jsonrpc": "2.0", "id": self.next, "method": "tools/call", "params": params}))).await;
        assert_eq!(status, 200, "{body}");
        body["result"].clone()
    }
}

/// `mcp-gateway check-config FILE` run by `command` (its environment prepared): whether
/// the file is valid, and everything it printed.
async fn check_config_with(mut command: Command, file: &Path) -> (bool, String) {
    let output = command
        .arg("check-config")
        .arg(file)
        .output()
        .await
        .unwrap();
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

fn held_id(result: &Value) -> String {
    assert_eq!(
        result["structuredContent"]["elicitation_required"], true,
        "expected a held call: {result}"
    );
    result["structuredContent"]["elicitation"]["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn answer(base: &str, id: &str, confirmed: bool) {
    let auth = format!("Bearer {HUMAN}");
    let (status, _, body) = http(
        "POST",
        &format!("{base}/v1/mcp/elicitations/{id}/respond"),
        &[("authorization", &auth)],
        Some(&json!({"confirmed": confirmed})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The whole flow against one running gateway.
async fn read_passes_write_is_held_confirmed_or_declined(scene: &Scene, gateway: &Gateway) {
    let mut s = Session::open(gateway).await;
    let notes = scene.file("notes.txt");
    std::fs::write(&notes, "hello from the sandbox").unwrap();
    let read = s
        .call("fs__read_text_file", json!({"path": notes}), None)
        .await;
    assert_eq!(text(&read), "hello from the sandbox", "{read}");

    let target = scene.file("written.txt");
    let args = json!({"path": target, "content": "approved content"});
    let id = held_id(&s.call("fs__write_file", args.clone(), None).await);
    assert!(!target.exists(), "a held write does not touch the file");
    answer(&gateway.base, &id, true).await;
    let done = s.call("fs__write_file", args, Some(&id)).await;
    assert_ne!(done["isError"], true, "{done}");
    assert!(text(&done).starts_with("Successfully wrote"), "{done}");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "approved content"
    );

    let declined = scene.file("declined.txt");
    let args = json!({"path": declined, "content": "never"});
    let id = held_id(&s.call("fs__write_file", args.clone(), None).await);
    answer(&gateway.base, &id, false).await;
    let rejected = s.call("fs__write_file", args, Some(&id)).await;
    assert_eq!(
        rejected["structuredContent"]["user_rejected"], true,
        "{rejected}"
    );
    assert!(
        !declined.exists(),
        "a declined write does not touch the file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_server_behind_the_gateway_with_the_memory_store() {
    let scene = Scene::new("memory", "[store]\nkind = \"memory\"");
    let gateway = Gateway::start(&scene.config).await;
    read_passes_write_is_held_confirmed_or_declined(&scene, &gateway).await;
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_server_behind_the_gateway_with_postgres_surviving_a_restart() {
    let db = TestDb::new().await;
    let store = format!(
        "[store]\nkind = \"postgres\"\ndatabase_url = \"{}\"\nseal_keys = [\"e2e:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\"]",
        TestDb::url(&db.writer)
    );
    let scene = Scene::new("postgres", &store);
    let gateway = Gateway::start(&scene.config).await;
    read_passes_write_is_held_confirmed_or_declined(&scene, &gateway).await;

    // Hold a write, restart the gateway, confirm through the new process, re-invoke.
    let target = scene.file("after-restart.txt");
    let args = json!({"path": target, "content": "survived"});
    let id = held_id(
        &Session::open(&gateway)
            .await
            .call("fs__write_file", args.clone(), None)
            .await,
    );
    gateway.stop().await;
    let gateway = Gateway::start(&scene.config).await;
    answer(&gateway.base, &id, true).await;
    let done = Session::open(&gateway)
        .await
        .call("fs__write_file", args, Some(&id))
        .await;
    assert_ne!(done["isError"], true, "{done}");
    assert!(text(&done).starts_with("Successfully wrote"), "{done}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "survived");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_subcommand_applies_the_migrations() {
    let db = TestDb::new().await;
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"))
        .args(["migrate", "--database-url", &TestDb::url(&db.admin)])
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "the database is up to date"
    );
}

#[tokio::test]
async fn a_bad_configuration_fails_with_a_clear_message() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-badconfig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("listen = \"0.0.0.0:0\"", "loopback"),
        (
            "[store]\nkind = \"postgres\"\ndatabase_url = \"postgres://x@127.0.0.1:1/x\"",
            "seal",
        ),
        ("[auth]\nmode = \"tokens\"", "at least one"),
    ];
    for (i, (text, expected)) in cases.into_iter().enumerate() {
        let path = dir.join(format!("c{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"))
            .arg("--config")
            .arg(&path)
            .env_remove("MCP_GATEWAY_SEAL_KEYS")
            .output()
            .await
            .unwrap();
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{text}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_prints_the_effective_configuration_without_secrets() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-checkconfig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        format!(
            r#"
[store]
kind = "postgres"
database_url = "postgres://gw:hunter2-db-password@db.internal/mcp"
seal_keys = ["k1:{key}"]
retention = "30d"
[auth]
mode = "tokens"
[[auth.tokens]]
subject = "alice"
token_sha256 = "{agent}"
scopes = ["tools:call"]
[[modules]]
name = "fs"
transport = "stdio"
command = "server"
env = {{ API_KEY = "module-api-key-1234" }}
[[modules]]
name = "remote"
transport = "http"
url = "http://bot:url-secret-9012@127.0.0.1:9/mcp"
headers = {{ Authorization = "Bearer remote-secret-5678" }}
"#,
            key = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=",
            agent = token_sha256(AGENT),
        ),
    )
    .unwrap();
    // Readable by the module's user (the file is 0644): refused, naming the file.
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"))
        .arg("check-config")
        .arg(&good)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("module \"fs\" runs as user nobody")
            && stderr.contains("good.toml")
            && stderr.contains("seal keys"),
        "{stderr}"
    );
    write_secret(&good, &std::fs::read_to_string(&good).unwrap());
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"))
        .arg("check-config")
        .arg(&good)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("is valid"), "{stdout}");
    // Defaults are filled in, in the file's own units.
    assert!(stdout.contains("retention = \"30d\""), "{stdout}");
    assert!(stdout.contains("calls_per_minute = 600"), "{stdout}");
    assert!(stdout.contains("sweep_interval = \"30s\""), "{stdout}");
    assert!(stdout.contains("user = \"nobody\""), "{stdout}");
    // Secrets are not.
    for secret in [
        "hunter2-db-password",
        "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=",
        "module-api-key-1234",
        "remote-secret-5678",
        "url-secret-9012",
    ] {
        assert!(!stdout.contains(secret), "{secret} leaked: {stdout}");
    }
    assert!(
        stdout.contains("postgres://gw:<redacted>@db.internal/mcp"),
        "{stdout}"
    );
    assert!(stdout.contains("API_KEY = \"<redacted>\""), "{stdout}");
    // A keyword connection string is not printed with its password either.
    let keyword = dir.join("keyword.toml");
    std::fs::write(
        &keyword,
        format!(
            "[store]\nkind = \"postgres\"\ndatabase_url = \"host=db user=gw password = kw-secret-3456 dbname=mcp\"\nseal_keys = [\"k1:{}\"]\n",
            "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="
        ),
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"))
        .arg("check-config")
        .arg(&keyword)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(!stdout.contains("kw-secret-3456"), "{stdout}");
    // An invalid file: a non-zero exit that names the key.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[limits]\ncalls_per_minute = \"many\"").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"))
        .arg("check-config")
        .arg(&bad)
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("calls_per_minute"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tools/list` names of a 2026-07-28 request with `token`.
async fn tool_names(base: &str, token: &str) -> Vec<String> {
    let (status, _, body) = http(
        "POST",
        &format!("{base}/mcp"),
        &[
            ("authorization", &format!("Bearer {token}")),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
            ("accept", "application/json"),
        ],
        Some(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// How many live child processes of `parent` have `argument` as one of their arguments,
/// whole or as the last part of a path. Never a substring of one: a directory named after
/// the test's process id (10015) in another module's arguments held "1001", which counted
/// that module as one of two `sleep 1001`s (CI failed on it).
fn children_running(parent: u32, argument: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let stat = std::fs::read_to_string(path.join("stat")).ok()?;
            // pid (comm) state ppid …; comm may hold spaces, so read after the last ')'.
            let mut fields = stat[stat.rfind(')')? + 2..].split(' ');
            let state = fields.next()?;
            let ppid: u32 = fields.next()?.parse().ok()?;
            let cmdline = std::fs::read(path.join("cmdline")).ok()?;
            use std::os::unix::ffi::OsStrExt;
            let named = cmdline.split(|b| *b == 0).any(|arg| {
                let arg = Path::new(std::ffi::OsStr::from_bytes(arg));
                arg == Path::new(argument) || arg.file_name() == Some(argument.as_ref())
            });
            (ppid == parent && state != "Z" && named).then_some(())
        })
        .count()
}

/// Issue 45, item 7: modules that never answer their handshake were started one after
/// another, each waiting out its timeout before the next began (two broken servers kept the
/// port closed for 30-44 s). They start side by side: both are running before either's
/// handshake could have timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modules_that_do_not_come_up_are_started_side_by_side() {
    // "1001" in the scene's name, so in the other modules' arguments too: only the module
    // whose argument it is counts (a process id of 10015 once made the fs module count).
    let scene = Scene::new("side-by-side-1001", "[store]\nkind = \"memory\"");
    let config = std::fs::read_to_string(&scene.config).unwrap()
        + "[[modules]]\nname = \"mute1\"\ntransport = \"stdio\"\ncommand = \"sleep\"\nargs = [\"1001\"]\n[[modules]]\nname = \"mute2\"\ntransport = \"stdio\"\ncommand = \"sleep\"\nargs = [\"1002\"]\n";
    write_secret(&scene.config, &config);
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"))
        .arg("--config")
        .arg(&scene.config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    // The gateway's own start (and its other modules') takes what a loaded machine makes
    // it take; from the first mute module seen running, the second must be running well
    // inside the 15 s start-up waits for a handshake: started one after another, it would
    // not be running yet.
    let started = tokio::time::Instant::now();
    let mut first_seen = None;
    loop {
        let running = [children_running(pid, "1001"), children_running(pid, "1002")];
        if running == [1, 1] {
            break;
        }
        let now = tokio::time::Instant::now();
        if running.contains(&1) {
            let first = *first_seen.get_or_insert(now);
            assert!(
                now - first < Duration::from_secs(10),
                "the modules were not started side by side"
            );
        } else {
            assert!(
                now - started < Duration::from_secs(60),
                "neither module was started"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill().await;
}

fn hangup(gateway: &Gateway) {
    let pid = gateway.child.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
}

/// A module that lists one tool name twice is that module's failure: on today's main it
/// made the gateway exit at start-up, and, when it went wrong after a clean start, made
/// every `SIGHUP` refuse the whole file, so a token taken out of it kept working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_listing_a_name_twice_neither_stops_the_start_nor_a_reload_that_revokes_a_token() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-dupe-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = dir.join("dupe_module.py");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/dupe_module.py"),
        &fixture,
    )
    .unwrap();
    let operations = free_port();
    let config_with = |tokens: &[&str], later: bool| {
        let mut text = format!(
            "listen = \"127.0.0.1:0\"\n[metrics]\nlisten = \"127.0.0.1:{operations}\"\n[auth]\nmode = \"tokens\"\n"
        );
        for token in tokens {
            text += &format!(
                "[[auth.tokens]]\nsubject = \"alice\"\ntoken_sha256 = \"{}\"\nscopes = [\"tools:call\"]\n",
                token_sha256(token)
            );
        }
        text += &format!(
            "[[modules]]\nname = \"dupe\"\ntransport = \"stdio\"\ncommand = \"/usr/bin/python3\"\nargs = [\"{}\"{}]\ntrust_annotations = true\nrequired = true\n",
            fixture.display(),
            if later { ", \"--later\"" } else { "" }
        );
        text
    };
    let config = dir.join("gateway.toml");
    let readyz = format!("http://127.0.0.1:{operations}/readyz");

    // Wrong from the start: the gateway starts, without either `wipe`.
    std::fs::write(&config, config_with(&[AGENT], false)).unwrap();
    let gateway = Gateway::start(&config).await;
    assert_eq!(tool_names(&gateway.base, AGENT).await, ["dupe__keep"]);
    let (status, _, body) = http("GET", &readyz, &[], None).await;
    assert_eq!(
        status, 503,
        "a required module that lists a name twice: {body}"
    );
    assert!(
        body["problems"]
            .to_string()
            .contains("tool \\\"dupe__wipe\\\" 2 times"),
        "{body}"
    );
    gateway.stop().await;

    // Clean at the start, wrong on the reload that revokes a token: the token stops working.
    std::fs::write(&config, config_with(&[AGENT, HUMAN], true)).unwrap();
    let gateway = Gateway::start(&config).await;
    assert_eq!(
        tool_names(&gateway.base, HUMAN).await,
        ["dupe__keep", "dupe__wipe"]
    );
    std::fs::write(&config, config_with(&[AGENT], true)).unwrap();
    hangup(&gateway);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _, _) = http(
            "POST",
            &format!("{}/mcp", gateway.base),
            &[("authorization", &format!("Bearer {HUMAN}"))],
            Some(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
        )
        .await;
        if status == 401 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the token taken out of the file still works after the reload ({status})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        tool_names(&gateway.base, AGENT).await,
        ["dupe__keep"],
        "the reloaded catalog leaves the duplicated name out"
    );
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_adds_and_removes_modules_and_revokes_a_token_while_a_call_finishes() {
    let scene = Scene::new("reload", "[store]\nkind = \"memory\"");
    let gateway = Gateway::start(&scene.config).await;
    let base = gateway.base.clone();
    assert!(
        !tool_names(&base, AGENT)
            .await
            .contains(&"extra__snoop".to_owned())
    );
    let (status, _) = call_with_token(&base, "fs__list_allowed_directories", CLIENT).await;
    assert_eq!(status, 200, "the client's token works before the reload");
    let gateway_pid = gateway.child.id().unwrap();
    assert_eq!(children_running(gateway_pid, "chatty_module.py"), 1);

    // A call in flight across the reload. The module makes the marker once it has the call
    // (where its user, nobody under a root gateway, may write: the sticky temporary
    // directory).
    let nap_marker = std::env::temp_dir().join(format!("mcp-e2e-nap-{}", std::process::id()));
    let _ = std::fs::remove_file(&nap_marker);
    let in_flight = tokio::spawn({
        let base = base.clone();
        let marker = nap_marker.display().to_string();
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "chatty__nap", "arguments": {"seconds": 3, "marker": marker}, "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {}}}});
            http(
                "POST",
                &format!("{base}/mcp"),
                &[
                    ("authorization", &format!("Bearer {AGENT}")),
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "chatty__nap"),
                    ("accept", "application/json"),
                ],
                Some(&body),
            )
            .await
        }
    });
    // The module has the call (it made the marker) before the reload removes it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !nap_marker.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the call reaches the module"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = std::fs::remove_file(&nap_marker);

    // The client's token is revoked, the module serving the call is removed, and a module
    // is added.
    let text = std::fs::read_to_string(&scene.config).unwrap();
    let client_grant = format!(
        "[[auth.tokens]]\nsubject = \"alice\"\ntoken_sha256 = \"{}\"\nscopes = [\"tools:call\", \"elicitations:respond\"]\n",
        token_sha256(CLIENT)
    );
    assert!(text.contains(&client_grant));
    let snoop = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/snoop_module.py"
    );
    let chatty_start = text.find("[[modules]]\nname = \"chatty\"").unwrap();
    let without_chatty = text[..chatty_start].to_owned();
    let reloaded = without_chatty.replace(&client_grant, "")
        + &format!(
            "[[modules]]\nname = \"extra\"\ntransport = \"stdio\"\ncommand = \"python3\"\nargs = [\"{snoop}\"]\ntrust_annotations = true\n"
        );
    std::fs::write(&scene.config, &reloaded).unwrap();
    hangup(&gateway);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !tool_names(&base, AGENT)
        .await
        .contains(&"extra__snoop".to_owned())
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the added module's tools appear"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _, body) = in_flight.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["result"]["content"][0]["text"], "napped",
        "the call in flight finished: {body}"
    );
    let (status, _) = call_with_token(&base, "fs__list_allowed_directories", CLIENT).await;
    assert_eq!(status, 401, "the revoked token is refused");
    assert!(
        !tool_names(&base, AGENT)
            .await
            .contains(&"chatty__nap".to_owned())
    );
    // The removed module's process is stopped once its call has ended.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while children_running(gateway_pid, "chatty_module.py") > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the removed module stops"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _) = call_with_token(&base, "extra__snoop", AGENT).await;
    assert_eq!(status, 200, "the added module answers");

    // An invalid file is refused; the running configuration stays. The refusal is counted,
    // so the test waits for the gateway to have read the file, not for a second.
    assert_eq!(reloads(&base, "refused").await, 0);
    std::fs::write(&scene.config, "[[modules]]\nname = \"broken\"\n").unwrap();
    hangup(&gateway);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while reloads(&base, "refused").await == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the invalid file is read and refused"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        reloads(&base, "applied").await,
        1,
        "the first reload was applied"
    );
    let names = tool_names(&base, AGENT).await;
    assert!(names.contains(&"extra__snoop".to_owned()), "{names:?}");
    assert!(
        names.contains(&"fs__read_text_file".to_owned()),
        "{names:?}"
    );
    let (status, _) = call_with_token(&base, "fs__list_allowed_directories", CLIENT).await;
    assert_eq!(status, 401);

    // A file that changes a setting that takes a restart still revokes tokens.
    let human_grant = format!(
        "[[auth.tokens]]\nsubject = \"alice\"\ntoken_sha256 = \"{}\"\nscopes = [\"elicitations:respond\"]\n",
        token_sha256(HUMAN)
    );
    assert!(reloaded.contains(&human_grant));
    let list = format!("{base}/v1/mcp/elicitations");
    let human = format!("Bearer {HUMAN}");
    let (status, _, _) = http("GET", &list, &[("authorization", &human)], None).await;
    assert_eq!(status, 200);
    std::fs::write(
        &scene.config,
        reloaded.replace(&human_grant, "") + "[http]\nbody_limit = 1000000\n",
    )
    .unwrap();
    hangup(&gateway);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while http("GET", &list, &[("authorization", &human)], None)
        .await
        .0
        != 401
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the human's token is revoked"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gateway.stop().await;
}

// ---- scale-out: several instances on one PostgreSQL behind a balancer ----

/// A round-robin TCP balancer: each connection goes to the next backend that accepts it
/// (a dead one is skipped). It keeps, per connection, the backend and the first bytes the
/// client sent, so a test can tell which instance served which request.
struct Balancer {
    address: std::net::SocketAddr,
    seen: Arc<std::sync::Mutex<Vec<(usize, String)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Balancer {
    async fn start(backends: Vec<String>) -> Balancer {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let seen: Arc<std::sync::Mutex<Vec<(usize, String)>>> = Arc::default();
        let log = seen.clone();
        let task = tokio::spawn(async move {
            let mut next = 0usize;
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let mut chosen = None;
                for _ in 0..backends.len() {
                    let index = next % backends.len();
                    next += 1;
                    if let Ok(upstream) = tokio::net::TcpStream::connect(&backends[index]).await {
                        chosen = Some((index, upstream));
                        break;
                    }
                }
                let Some((index, upstream)) = chosen else {
                    continue;
                };
                let slot = {
                    let mut seen = log.lock().unwrap();
                    seen.push((index, String::new()));
                    seen.len() - 1
                };
                let log = log.clone();
                tokio::spawn(async move {
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut upstream_read, mut upstream_write) = upstream.into_split();
                    let back = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut upstream_read, &mut client_write).await;
                        let _ = client_write.shutdown().await;
                    });
                    let mut buffer = vec![0u8; 16 * 1024];
                    let mut recorded = 0usize;
                    loop {
                        let n = match client_read.read(&mut buffer).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if recorded < 8192 {
                            log.lock().unwrap()[slot]
                                .1
                                .push_str(&String::from_utf8_lossy(&buffer[..n]));
                            recorded += n;
                        }
                        if upstream_write.write_all(&buffer[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = upstream_write.shutdown().await;
                    let _ = back.await;
                });
            }
        });
        Balancer {
            address,
            seen,
            task,
        }
    }

    /// The backend of the first connection whose request contains every one of `needles`.
    fn backend_of(&self, needles: &[&str]) -> Option<usize> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .find(|(_, text)| needles.iter().all(|n| text.contains(n)))
            .map(|(index, _)| *index)
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_behind_a_balancer_serve_one_python_sdk_client_and_survive_losing_one() {
    let db = TestDb::new().await;
    let store = format!(
        "[store]\nkind = \"postgres\"\ndatabase_url = \"{}\"\nseal_keys = [\"e2e:AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM=\"]",
        TestDb::url(&db.writer)
    );
    let scene = Scene::new("scaleout", &store);
    let a = Gateway::start(&scene.config).await;
    let b = Gateway::start(&scene.config).await;
    let balancer = Balancer::start(vec![
        a.base.trim_start_matches("http://").to_owned(),
        b.base.trim_start_matches("http://").to_owned(),
    ])
    .await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/python_scaleout_client.py"
    );
    let mut child = Command::new(env_or_panic("MCP_INTEROP_PYTHON"))
        .arg(script)
        .arg(format!("http://{}/mcp", balancer.address))
        .args([CLIENT, HUMAN])
        .arg(&scene.sandbox)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let next_line = async |lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>| {
        tokio::time::timeout(Duration::from_secs(120), lines.next_line())
            .await
            .expect("the client goes on within two minutes")
            .unwrap()
            .expect("the client prints its progress")
    };
    assert_eq!(next_line(&mut lines).await, "KILL");

    // The native answer was recorded by the instance that did not ask.
    let asked_on = balancer
        .backend_of(&["tools/call", "native.txt"])
        .expect("the call went through the balancer");
    let answered_on = balancer
        .backend_of(&["mcp-gateway-confirm-", "\"result\""])
        .expect("the answer went through the balancer");
    assert_ne!(
        asked_on, answered_on,
        "the answer reached the other instance"
    );
    let used: std::collections::BTreeSet<usize> = balancer
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(used.len(), 2, "both instances served the client");

    // One instance dies; the client carries on through the other.
    let mut a = a;
    a.child.kill().await.unwrap();
    let _ = a.child.wait().await;
    use tokio::io::AsyncWriteExt;
    stdin.write_all(b"go\n").await.unwrap();
    let report: Value = serde_json::from_str(&next_line(&mut lines).await).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());

    assert!(
        report["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("fs__write_file")),
        "{report}"
    );
    assert_eq!(report["native"]["is_error"], false, "{report}");
    assert_eq!(report["native"]["asked"], 1, "{report}");
    assert_eq!(report["held"]["is_error"], false, "{report}");
    assert_eq!(report["rest_status"], 200, "{report}");
    assert_eq!(report["recalled"]["is_error"], false, "{report}");
    assert_eq!(report["after"]["is_error"], false, "{report}");
    assert_eq!(report["after"]["asked"], 2, "{report}");
    for (file, content) in [
        ("native.txt", "native"),
        ("held.txt", "held"),
        ("after.txt", "after"),
    ] {
        assert_eq!(
            std::fs::read_to_string(scene.file(file)).unwrap(),
            content,
            "{file}"
        );
    }
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_made_through_one_instance_reaches_the_session_stream_on_another() {
    let db = TestDb::new().await;
    let store = format!(
        "[store]\nkind = \"postgres\"\ndatabase_url = \"{}\"\nseal_keys = [\"e2e:BAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQ=\"]",
        TestDb::url(&db.writer)
    );
    let scene = Scene::new("subscribe", &store);
    let a = Gateway::start(&scene.config).await;
    let b = Gateway::start(&scene.config).await;
    let on_a = Session::open(&a).await;
    let mut on_b = Session {
        base: b.base.clone(),
        id: on_a.id.clone(),
        next: 100,
    };
    // The session's stream, on B.
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let request = http::Request::builder()
        .method("GET")
        .uri(format!("{}/mcp", b.base))
        .header("authorization", format!("Bearer {AGENT}"))
        .header("mcp-session-id", &on_a.id)
        .header("mcp-protocol-version", "2025-11-25")
        .header("accept", "text/event-stream")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut seen = String::new();
    while !seen.contains("retry:") {
        let frame = tokio::time::timeout(Duration::from_secs(20), body.frame())
            .await
            .expect("the stream primes within 20 s")
            .expect("the stream is open")
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(frame.data_ref().unwrap()));
    }
    // Subscribed through A.
    let auth = format!("Bearer {AGENT}");
    let (status, _, answer) = http(
        "POST",
        &format!("{}/mcp", a.base),
        &[
            ("authorization", &auth),
            ("mcp-session-id", &on_a.id),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        Some(&json!({"jsonrpc": "2.0", "id": 5, "method": "resources/subscribe", "params": {"uri": "test://watched"}})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.get("error").is_none(), "{answer}");
    // B's copy of the module says the resource changed; B's stream of the session tells
    // the client (B learned of the subscription from A through the store).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !seen.contains("notifications/resources/updated") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the update reaches the stream on B: {seen}"
        );
        let touched = on_b.call("chatty__touch", json!({}), None).await;
        assert_eq!(text(&touched), "touched", "{touched}");
        if let Ok(Some(Ok(frame))) =
            tokio::time::timeout(Duration::from_millis(500), body.frame()).await
        {
            seen.push_str(&String::from_utf8_lossy(
                frame.data_ref().unwrap_or(&Bytes::new()),
            ));
        }
    }
    assert!(seen.contains("test://watched"), "{seen}");
    a.stop().await;
    b.stop().await;
}

// ---- interop with the official SDKs as clients ----

/// Starts a test peer that prints the port it listens on as its first line (a fixture
/// module, a webhook receiver, an SMTP sink): the running process and that port.
async fn listening(mut command: Command, what: &str) -> (Child, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{what} could not be started: {e}"));
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let port = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("{what} prints its port within 30 s"))
        .unwrap()
        .unwrap_or_else(|| panic!("{what} printed nothing"));
    (child, port.trim().to_owned())
}

fn env_or_panic(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: the interop tests run the official MCP SDKs. Run `cargo xtask test`, which installs them and sets it.")
    })
}

/// Runs a client script; returns the JSON line it printed last. A script that does not
/// finish in time is killed, and what it printed so far is shown.
async fn run_client(mut command: Command, what: &str) -> Value {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let logs = std::env::temp_dir().join(format!("mcp-e2e-client-{}-{n}", std::process::id()));
    let (out_path, err_path) = (logs.with_extension("out"), logs.with_extension("err"));
    let mut child = command
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(180), child.wait()).await;
    let read = |path: &PathBuf| std::fs::read_to_string(path).unwrap_or_default();
    let (stdout, stderr) = (read(&out_path), read(&err_path));
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&err_path);
    let Ok(status) = status else {
        let _ = child.kill().await;
        panic!("{what} did not finish in 180 s:\n{stdout}\n{stderr}");
    };
    let output = std::process::Output {
        status: status.unwrap(),
        stdout: stdout.into_bytes(),
        stderr: stderr.into_bytes(),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{what} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {stdout}"))
}

async fn python(gateway: &Gateway, mode: &str, scenario: &str, path: &Path) -> Value {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/python_client.py"
    );
    let mut command = Command::new(env_or_panic("MCP_INTEROP_PYTHON"));
    command
        .arg(script)
        .arg(format!("{}/mcp", gateway.base))
        .args([CLIENT, mode, scenario])
        .arg(path);
    run_client(command, &format!("python {mode} {scenario}")).await
}

async fn typescript(gateway: &Gateway, scenario: &str, path: &Path) -> Value {
    // ESM resolves packages from the script's folder: run it from the npm cache.
    let dir = PathBuf::from(env_or_panic("MCP_INTEROP_NODE_DIR"));
    // One copy per call: tests run concurrently in this process.
    static COPIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let script = dir.join(format!("ts_client_{}_{n}.mjs", std::process::id()));
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/ts_client.mjs"),
        &script,
    )
    .unwrap();
    let mut command = Command::new("node");
    command
        .arg(&script)
        .arg(format!("{}/mcp", gateway.base))
        .args([CLIENT, scenario])
        .arg(path);
    let out = run_client(command, &format!("typescript {scenario}")).await;
    let _ = std::fs::remove_file(&script);
    out
}

async fn sdk_clients_confirm_natively_or_through_rest(scene: &Scene, gateway: &Gateway) {
    for (mode, version) in [("legacy", "2025-11-25"), ("auto", "2026-07-28")] {
        let written = scene.file(&format!("py-{mode}-accept.txt"));
        let out = python(gateway, mode, "accept", &written).await;
        assert_eq!(out["protocol_version"], version, "{out}");
        assert_eq!(
            out["asked"].as_array().unwrap().len(),
            1,
            "asked once: {out}"
        );
        assert!(
            out["asked"][0]["message"]
                .as_str()
                .unwrap()
                .contains("fs__write_file"),
            "{out}"
        );
        assert_eq!(
            std::fs::read_to_string(&written).unwrap(),
            "written by the python sdk"
        );

        let untouched = scene.file(&format!("py-{mode}-decline.txt"));
        let out = python(gateway, mode, "decline", &untouched).await;
        assert_eq!(out["is_error"], true, "{out}");
        assert_eq!(out["structured"]["user_rejected"], true, "{out}");
        assert!(
            !untouched.exists(),
            "{mode} decline leaves the file untouched"
        );

        // A cancel (dismissed without choosing, as a headless client answers) leaves the
        // confirmation pending: the agent gets the held result, a person approves over REST,
        // and the agent's identical re-call — no confirmation id — runs once.
        let dismissed = scene.file(&format!("py-{mode}-cancel.txt"));
        let out = python(gateway, mode, "cancel", &dismissed).await;
        assert_ne!(out["is_error"], true, "{out}");
        assert_eq!(out["structured"]["elicitation_required"], true, "{out}");
        assert!(
            !dismissed.exists(),
            "{mode} cancel leaves the file untouched"
        );
        let id = out["structured"]["elicitation"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        answer(&gateway.base, &id, true).await;
        let out = python(gateway, mode, "held", &dismissed).await;
        assert_ne!(out["is_error"], true, "{out}");
        assert_eq!(
            std::fs::read_to_string(&dismissed).unwrap(),
            "written by the python sdk",
            "{out}"
        );

        let out = python(gateway, mode, "readonly", &written).await;
        assert_eq!(
            out["asked"],
            json!([]),
            "a read-only tool never invokes the callback: {out}"
        );
        assert_eq!(out["text"][0], "written by the python sdk");
    }

    // Without an elicitation callback: the held result, a REST answer, and a second call.
    let later = scene.file("py-held.txt");
    let out = python(gateway, "auto", "held", &later).await;
    assert_eq!(out["structured"]["elicitation_required"], true, "{out}");
    assert!(!later.exists());
    let id = out["structured"]["elicitation"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    answer(&gateway.base, &id, true).await;
    let out = python(gateway, "auto", &format!("confirmed:{id}"), &later).await;
    assert_ne!(out["is_error"], true, "{out}");
    assert_eq!(
        std::fs::read_to_string(&later).unwrap(),
        "written by the python sdk"
    );

    let ts_yes = scene.file("ts-accept.txt");
    let out = typescript(gateway, "accept", &ts_yes).await;
    assert_eq!(out["asked"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(
        std::fs::read_to_string(&ts_yes).unwrap(),
        "written by the typescript sdk"
    );
    let ts_no = scene.file("ts-decline.txt");
    let out = typescript(gateway, "decline", &ts_no).await;
    assert_eq!(out["structured"]["user_rejected"], true, "{out}");
    assert!(!ts_no.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdk_clients_with_the_memory_store() {
    let scene = Scene::new("sdk-memory", "[store]\nkind = \"memory\"");
    let gateway = Gateway::start(&scene.config).await;
    sdk_clients_confirm_natively_or_through_rest(&scene, &gateway).await;
    gateway.stop().await;
}

/// Claude Code (`-p`, a scripted Messages API on loopback) writing `claude.txt` in a new
/// scene's sandbox through the filesystem server; the write is held and the person answers
/// over REST as `answer` says (`approve`, `edit`, `decline`). The client token may answer:
/// the gateway asks Claude Code natively, and Claude Code in -p mode dismisses the question
/// (cancel). The scene, the gateway (still running) and what the script saw.
async fn claude_code_writes(name: &str, answer: &str) -> (Scene, Gateway, Value) {
    let scene = Scene::new(name, "[store]\nkind = \"memory\"");
    let gateway = Gateway::start(&scene.config).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/claude_code.py");
    let mut command = Command::new(env_or_panic("MCP_INTEROP_PYTHON"));
    command
        .arg(script)
        .arg(env_or_panic("MCP_CLAUDE_CODE"))
        .arg(&gateway.base)
        .args([CLIENT, HUMAN, "fs__write_file"])
        .arg(scene.file("claude.txt"))
        // No permission-prompt tool.
        .args(["", answer]);
    let out = run_client(command, "claude code").await;
    (scene, gateway, out)
}

/// Issue 45, item 4, with Claude Code: a person approves the held write with other content;
/// Claude Code's identical call runs the person's content, and its model is told so (it
/// shows the model only a result's structured content when there is some: the notice is
/// there too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_codes_model_is_told_of_a_persons_edit() {
    let (scene, gateway, out) = claude_code_writes("claude-code-edit", "edit").await;
    let target = scene.file("claude.txt");
    assert_eq!(out["exit"], 0, "{out}");
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "held, then run: {out}");
    assert!(
        results[1]
            .as_str()
            .unwrap()
            .contains("changed the arguments"),
        "the model read of the edit: {out}"
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "edited by a person"
    );
    gateway.stop().await;
}

/// Issue 45, item 2, with Claude Code: it cannot set `_meta`, so after a person declines,
/// its identical call is how it hears the refusal — once, with the person's note — instead
/// of the call being held anew (the model never heard "no", the person was asked again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_hears_a_decline_and_its_note_by_calling_again() {
    let (scene, gateway, out) = claude_code_writes("claude-code-decline", "decline").await;
    let target = scene.file("claude.txt");
    assert_eq!(out["exit"], 0, "{out}");
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "held, then refused: {out}");
    assert!(
        results[0]
            .as_str()
            .unwrap()
            .contains("elicitation_required"),
        "{out}"
    );
    let refused = results[1].as_str().unwrap();
    assert!(
        refused.contains("declined") && refused.contains("not run"),
        "the refusal reached the model: {out}"
    );
    assert!(
        refused.contains("not on this machine"),
        "with the note: {out}"
    );
    assert!(!target.exists(), "nothing was written");
    gateway.stop().await;
}

/// Claude Code itself (`@anthropic-ai/claude-code`, `-p`), on a scripted Messages API on
/// loopback: its native elicitation answers `cancel` at once, and it shows the model only the
/// held result's structured content, with no way to set `_meta`. The first call is held, a
/// person approves over REST, and Claude Code's next identical call runs, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_finishes_a_held_call_once_a_person_approves_it() {
    let (scene, gateway, out) = claude_code_writes("claude-code", "approve").await;
    let target = scene.file("claude.txt");
    assert_eq!(out["exit"], 0, "{out}");
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "held, then run: {out}");
    assert!(
        results[0]
            .as_str()
            .unwrap()
            .contains("elicitation_required"),
        "{out}"
    );
    let approved = out["approved"][0].as_str().unwrap().to_owned();
    assert!(
        results[1].as_str().unwrap().contains("Successfully wrote"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "written by claude code"
    );
    held_anew_once_used(&gateway, &target, "written by claude code", &approved).await;
    gateway.stop().await;
}

/// A write the agent host ran on approval `approved`, called again (`content` into
/// `target`): the approval was used once, so the call is held anew.
async fn held_anew_once_used(gateway: &Gateway, target: &Path, content: &str, approved: &str) {
    let mut session = Session::open(gateway).await;
    let again = session
        .call(
            "fs__write_file",
            json!({"path": target.display().to_string(), "content": content}),
            None,
        )
        .await;
    assert_ne!(
        held_id(&again),
        approved,
        "a used approval holds the call anew"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdk_clients_with_postgres() {
    let db = TestDb::new().await;
    let store = format!(
        "[store]\nkind = \"postgres\"\ndatabase_url = \"{}\"\nseal_keys = [\"e2e:AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM=\"]",
        TestDb::url(&db.writer)
    );
    let scene = Scene::new("sdk-postgres", &store);
    let gateway = Gateway::start(&scene.config).await;
    sdk_clients_confirm_natively_or_through_rest(&scene, &gateway).await;
    gateway.stop().await;
}

// ---- modules are untrusted ----

/// The user the gateway runs as in the module-isolation test: `nobody` when the tests run as
/// root (a module of a root gateway could read anything anyway), else the test's own user.
fn unprivileged(command: &mut Command) {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata("/proc/self").unwrap().uid() == 0 {
        command.uid(65534).gid(65534);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_module_sees_none_of_the_gateways_secrets() {
    let seal_material = "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=";
    let db_password = "db-password-of-the-gateway";
    let dir = std::env::temp_dir().join(format!("mcp-e2e-snoop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    // The binary and the module are copied next to the configuration, so the unprivileged
    // user can run them wherever the checkout lives.
    let fixture = dir.join("snoop_module.py");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/snoop_module.py"
        ),
        &fixture,
    )
    .unwrap();
    let fixture = fixture.display();
    let binary = dir.join("mcp-gateway");
    std::fs::copy(env!("CARGO_BIN_EXE_mcp-gateway"), &binary).unwrap();
    std::fs::write(
        &config,
        format!(
            r#"
listen = "127.0.0.1:0"
[[modules]]
name = "snoop"
transport = "stdio"
command = "/usr/bin/python3"
args = ["{fixture}"]
trust_annotations = true
inherit_env = ["AWS_PROFILE"]
env = {{ MODULE_OWN = "own value" }}
"#
        ),
    )
    .unwrap();
    let mut command = Command::new(&binary);
    command
        .env("MCP_GATEWAY_SEAL_KEYS", format!("k1:{seal_material}"))
        .env(
            "DATABASE_URL",
            format!("postgres://gw:{db_password}@127.0.0.1:1/gw"),
        )
        .env("PGPASSWORD", db_password)
        .env("AWS_PROFILE", "ops")
        .env("UNLISTED_TOKEN", "unlisted-secret")
        .current_dir(&dir);
    unprivileged(&mut command);
    let gateway = Gateway::start_with(&config, command).await;
    let seen = snoop(&gateway).await;
    let everything = seen.to_string();
    for secret in [seal_material, db_password, "unlisted-secret"] {
        assert!(
            !everything.contains(secret),
            "the module saw {secret}: {seen:#}"
        );
    }
    let env = seen["env"].as_object().unwrap();
    for name in env.keys() {
        assert!(
            [
                "PATH",
                "HOME",
                "LANG",
                "TZ",
                "TMPDIR",
                "USER",
                "AWS_PROFILE",
                "MODULE_OWN"
            ]
            .contains(&name.as_str())
                || name.starts_with("LC_"),
            "unexpected variable {name} in {env:?}"
        );
    }
    assert_eq!(env["AWS_PROFILE"], "ops", "listed names are inherited");
    assert_eq!(env["MODULE_OWN"], "own value");
    assert_eq!(seen["cwd"], "/", "not the gateway's directory");
    let fds: Vec<&String> = seen["fds"].as_object().unwrap().keys().collect();
    assert_eq!(fds, ["0", "1", "2"], "only stdio is inherited: {seen:#}");
    assert!(
        seen["parent_environ"]
            .as_str()
            .unwrap()
            .starts_with("unreadable"),
        "the gateway's /proc environ is closed to its modules: {seen:#}"
    );
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the snoop module reports, through the gateway's `snoop__snoop`.
async fn snoop(gateway: &Gateway) -> Value {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "snoop__snoop", "arguments": {},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}});
    let (status, _, body) = http(
        "POST",
        &format!("{}/mcp", gateway.base),
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "snoop__snoop"),
        ],
        Some(&call),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&text(&body["result"])).unwrap()
}

/// The hostile module under a gateway run as root (as CI runs, and as most containers run):
/// it runs as `nobody` with a home of its own, and everything it tries on its parent fails.
/// On a gateway that ran modules as itself, it read the keys from `/proc/<pid>/environ`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_gateways_stdio_module_reads_nothing_secret_and_cannot_signal_or_trace_it() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!(
        std::fs::metadata("/proc/self").unwrap().uid(),
        0,
        "this test runs the gateway as root, as CI does: run `cargo xtask test` as root"
    );
    let seal_material = "CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk=";
    let env_seal_material = "CgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgo=";
    let db_password = "db-password-in-a-file";
    let dir = std::env::temp_dir().join(format!("mcp-e2e-rootsnoop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let fixture = dir.join("snoop_module.py");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/snoop_module.py"
        ),
        &fixture,
    )
    .unwrap();
    let keys = dir.join("seal.keys");
    std::fs::write(&keys, format!("k1:{seal_material}\n")).unwrap();
    let url_file = dir.join("database.url");
    std::fs::write(
        &url_file,
        format!("postgres://gw:{db_password}@127.0.0.1:1/gw\n"),
    )
    .unwrap();
    let config = dir.join("gateway.toml");
    let text = format!(
        r#"
listen = "127.0.0.1:0"
[store]
seal_keys_file = "{keys}"
database_url_file = "{url}"
[[modules]]
name = "snoop"
transport = "stdio"
command = "/usr/bin/python3"
args = ["{fixture}", "{keys}", "{url}", "{config}"]
trust_annotations = true
"#,
        keys = keys.display(),
        url = url_file.display(),
        fixture = fixture.display(),
        config = config.display(),
    );
    std::fs::write(&config, &text).unwrap();
    let secret_files = [&keys, &url_file, &config];
    let start = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"));
        command
            .env("MCP_GATEWAY_SEAL_KEYS", format!("k2:{env_seal_material}"))
            .env("PGPASSWORD", db_password)
            .env("UNLISTED_TOKEN", "unlisted-secret-value");
        command
    };

    // A secret file the module's user could read: the gateway refuses to start, naming it.
    for file in secret_files {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let refused = start().arg("--config").arg(&config).output().await.unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("user nobody") && stderr.contains("chmod 600"),
        "{stderr}"
    );
    for file in secret_files {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    let gateway = Gateway::start_with(&config, start()).await;
    let seen = snoop(&gateway).await;
    let everything = seen.to_string();
    for secret in [
        seal_material,
        env_seal_material,
        db_password,
        "unlisted-secret-value",
    ] {
        assert!(
            !everything.contains(secret),
            "the module found {secret}: {seen:#}"
        );
    }
    assert_eq!(seen["uid"], 65534, "a root gateway's module runs as nobody");
    assert_eq!(seen["euid"], 65534);
    assert_eq!(seen["gid"], 65534);
    assert!(
        seen["groups"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| *g == 65534),
        "no supplementary group of root's: {seen:#}"
    );
    let unreadable = |what: &Value| what.as_str().is_some_and(|s| s.starts_with("unreadable"));
    assert!(unreadable(&seen["parent_environ"]), "{seen:#}");
    assert!(unreadable(&seen["parent_fds"]), "{seen:#}");
    assert!(unreadable(&seen["parent_mem"]["maps"]), "{seen:#}");
    assert!(unreadable(&seen["parent_mem"]["mem"]), "{seen:#}");
    for file in secret_files {
        assert!(
            unreadable(&seen["files"][file.display().to_string()]),
            "{} is closed to the module: {seen:#}",
            file.display()
        );
    }
    // The command line is public to every process; it holds no secret (checked above).
    assert!(
        seen["parent_cmdline"]
            .as_str()
            .unwrap()
            .contains("--config"),
        "{seen:#}"
    );
    assert_eq!(seen["signal"], "refused: EPERM", "{seen:#}");
    assert_eq!(seen["trace"], "refused: EPERM", "{seen:#}");
    let home = &seen["home"];
    assert_eq!(home["uid"], 65534, "its home is its own: {seen:#}");
    assert_eq!(home["mode"], "0o700");
    assert_eq!(home["writable"], true);
    let home_path = PathBuf::from(home["path"].as_str().unwrap());
    assert!(home_path.is_dir());
    assert_eq!(seen["env"]["USER"], "nobody");
    gateway.stop().await;
    assert!(
        !home_path.exists(),
        "the module's private home is removed when its process ends"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_module_cannot_be_configured_to_receive_the_gateways_secrets() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-secretcfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let module = "[[modules]]\nname = \"m\"\ntransport = \"stdio\"\ncommand = \"true\"\n";
    let cases = [
        (
            format!("{module}inherit_env = [\"MCP_GATEWAY_SEAL_KEYS\"]"),
            "MCP_GATEWAY_SEAL_KEYS",
        ),
        (
            format!("{module}inherit_env = [\"DATABASE_URL\"]"),
            "DATABASE_URL",
        ),
        (
            format!(
                "{module}env = {{ KEYS = \"x,CAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAg=\" }}"
            ),
            "seal key",
        ),
        (
            format!("{module}env = {{ PGPASSWORD = \"hunter2-long-password\" }}"),
            "database password",
        ),
        (
            format!("{module}args = [\"--key=CAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAg=\"]"),
            "seal key",
        ),
    ];
    for (i, (text, expected)) in cases.into_iter().enumerate() {
        let path = dir.join(format!("s{i}.toml"));
        std::fs::write(&path, &text).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"))
            .arg("--config")
            .arg(&path)
            .env(
                "MCP_GATEWAY_SEAL_KEYS",
                "k:CAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAg=",
            )
            .env(
                "DATABASE_URL",
                "postgres://gw:hunter2-long-password@127.0.0.1:1/gw",
            )
            .output()
            .await
            .unwrap();
        assert!(!output.status.success(), "{text}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{text}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The conformance fixture (official Python SDK, 2025-11-25) as an HTTP module `fx`, with
/// its tools allowed; returns the fixture process (alive while held) and the gateway.
async fn behind_the_gateway_the_fixture(dir: &Path) -> (tokio::process::Child, Gateway) {
    let port = free_port();
    let fixture = Command::new(env_or_panic("MCP_INTEROP_PYTHON"))
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/conformance/fixture_server.py"
        ))
        .args(["--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the conformance fixture listens on port {port}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut config = format!(
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
[[auth.tokens]]
subject = "alice"
token_sha256 = "{agent}"
scopes = ["tools:call"]
[[modules]]
name = "fx"
transport = "http"
url = "http://127.0.0.1:{port}/mcp"
"#,
        client = token_sha256(CLIENT),
        agent = token_sha256(AGENT),
    );
    for tool in [
        "grow_tools",
        "test_tool_with_logging",
        "test_tool_with_progress",
        "test_elicitation",
        "test_sampling",
    ] {
        config.push_str(&format!(
            "[[policy]]\ntool = \"fx__{tool}\"\ngate = \"allow\"\n"
        ));
    }
    let path = dir.join("relay.toml");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(&path, config).unwrap();
    (fixture, Gateway::start(&path).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_sees_a_modules_progress_logs_elicitation_and_sampling_through_the_gateway()
{
    let dir = std::env::temp_dir().join(format!("mcp-e2e-relay-{}", std::process::id()));
    let (_fixture, gateway) = behind_the_gateway_the_fixture(&dir).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/python_relay_client.py"
    );
    for mode in ["legacy", "auto"] {
        let mut command = Command::new(env_or_panic("MCP_INTEROP_PYTHON"));
        command
            .arg(script)
            .arg(format!("{}/mcp", gateway.base))
            .args([CLIENT, mode]);
        let seen = run_client(command, &format!("python relay {mode}")).await;
        let version = if mode == "auto" {
            "2026-07-28"
        } else {
            "2025-11-25"
        };
        assert_eq!(seen["protocol_version"], version, "{seen}");
        assert_eq!(
            seen["progress"],
            json!([0.0, 50.0, 100.0]),
            "{mode}: {seen}"
        );
        let logs = seen["logs"].as_array().unwrap();
        assert!(
            logs.len() >= 3,
            "{mode}: log messages during the call: {seen}"
        );
        assert_eq!(
            seen["elicited"].as_array().unwrap().len(),
            1,
            "{mode}: {seen}"
        );
        let elicited = seen["texts"]["fx__test_elicitation"][0].as_str().unwrap();
        assert!(
            elicited.contains("action=accept") && elicited.contains("ada@example.com"),
            "{mode}: the module got the client's answer: {elicited}"
        );
        let sampled = seen["texts"]["fx__test_sampling"][0].as_str().unwrap();
        assert!(sampled.contains("sampled by python"), "{mode}: {sampled}");
    }
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_modules_list_change_reaches_a_session_stream_and_the_new_tool_is_listed() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-lists-{}", std::process::id()));
    let (_fixture, gateway) = behind_the_gateway_the_fixture(&dir).await;
    let mut session = Session::open(&gateway).await;
    // The session's stream.
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let request = http::Request::builder()
        .method("GET")
        .uri(format!("{}/mcp", gateway.base))
        .header("authorization", format!("Bearer {AGENT}"))
        .header("mcp-session-id", &session.id)
        .header("mcp-protocol-version", "2025-11-25")
        .header("accept", "text/event-stream")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut seen = String::new();
    let mut next_chunk = async || {
        let frame = tokio::time::timeout(Duration::from_secs(20), body.frame())
            .await
            .expect("the stream says something within 20 s")
            .expect("the stream is open")
            .unwrap();
        frame
            .data_ref()
            .map(|d| String::from_utf8_lossy(d).into_owned())
            .unwrap_or_default()
    };
    while !seen.contains("retry:") {
        seen.push_str(&next_chunk().await);
    }
    let grown = session.call("fx__grow_tools", json!({}), None).await;
    assert_eq!(text(&grown), "grown", "{grown}");
    while !seen.contains("notifications/tools/list_changed") {
        seen.push_str(&next_chunk().await);
    }
    let auth = format!("Bearer {AGENT}");
    let (_, _, listed) = http(
        "POST",
        &format!("{}/mcp", gateway.base),
        &[
            ("authorization", &auth),
            ("mcp-session-id", &session.id),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        Some(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})),
    )
    .await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"fx__added_tool"), "{names:?}");
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The browser script `script` (tests/browser) against `gateway`: its base URL, the person's
/// and the agent's tokens, the scene's sandbox, where its screenshot `shot` goes
/// (target/browser) and the service's token.
fn browser_page(script: &str, gateway: &Gateway, scene: &Scene, shot: &str) -> Command {
    let shots = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/browser"));
    std::fs::create_dir_all(&shots).unwrap();
    let mut command = Command::new(env_or_panic("MCP_INTEROP_PYTHON"));
    command
        .arg(format!(
            "{}/tests/browser/{script}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .arg(&gateway.base)
        .args([HUMAN, AGENT])
        .arg(&scene.sandbox)
        .arg(shots.join(shot))
        .arg(SERVICE);
    command
}

/// Issue 50, items 5 and 6: the approvals page at a phone's width (390 px) in headless
/// Chromium — approve, decline with a note, approve and allow the tool — with nothing wider
/// than the screen; and a held call shows what changed since the last call of the same tool
/// a person approved, as an inert diff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_answers_on_a_phone_and_sees_what_changed_since_the_last_approval() {
    let scene = Scene::new("browser-phone", "[store]\nkind = \"memory\"");
    let gateway = Gateway::start(&scene.config).await;
    let command = browser_page(
        "approvals_phone_browser.py",
        &gateway,
        &scene,
        "approvals-phone.png",
    );
    let seen = run_client(command, "the phone browser").await;
    for measured in seen["measures"].as_array().unwrap() {
        assert!(
            measured["scroll"].as_u64().unwrap() <= 390,
            "nothing wider than the screen: {seen}"
        );
        assert_eq!(measured["outside"], 0, "every button on the screen: {seen}");
    }
    // Nothing approved before: nothing to compare with.
    assert_eq!(seen["first_since"], 0, "{seen}");
    assert_ne!(seen["first_call"]["isError"], true, "{seen}");
    // The second call shows what changed since the first was approved, line by line.
    assert!(
        seen["since_text"]
            .as_str()
            .unwrap()
            .contains("Changed since the last call of this tool a person approved"),
        "{seen}"
    );
    let removed = seen["since_removed"].to_string();
    let added = seen["since_added"].to_string();
    assert!(
        removed.contains("first version") && !removed.contains("phone.txt"),
        "{seen}"
    );
    assert!(
        added.contains("second version") && !added.contains("phone.txt"),
        "{seen}"
    );
    assert_eq!(
        seen["declined_call"]["structuredContent"]["note"], "keep the first version",
        "{seen}"
    );
    assert_eq!(
        std::fs::read_to_string(scene.file("phone.txt")).unwrap(),
        "first version of the notes"
    );
    assert_ne!(seen["granted_call"]["isError"], true, "{seen}");
    assert_ne!(
        seen["after_grant"]["structuredContent"]["elicitation_required"], true,
        "the grant made on the phone covers the next call: {seen}"
    );
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&scene.dir);
}

/// Issue 50, items 1 and 3, on the page in headless Chromium over PostgreSQL with the real
/// filesystem server: a write two people of `sre` must approve. Bob's approval is counted
/// and the call still waits; Carol, away, hands her approvals to Dave on the page; Dave,
/// in no group himself, approves as her delegate: the second approval, and the file is
/// written, once.
// Long: one scene's configuration (people, rule), then what each person saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_people_approve_on_the_page_one_of_them_for_a_colleague_away() {
    const BOB: &str = "e2e-quorum-bob";
    const CAROL: &str = "e2e-quorum-carol";
    const DAVE: &str = "e2e-quorum-dave";
    let db = TestDb::new().await;
    let store = format!(
        "[store]\nkind = \"postgres\"\ndatabase_url = \"{}\"\nseal_keys = [\"e2e:BQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQU=\"]",
        TestDb::url(&db.writer)
    );
    let scene = Scene::new("browser-quorum", &store);
    let person = |subject: &str, token: &str, groups: &str| {
        format!(
            "[[auth.tokens]]\nsubject = \"{subject}\"\ntoken_sha256 = \"{}\"\nscopes = [\"elicitations:respond\"]\ngroups = {groups}\n",
            token_sha256(token)
        )
    };
    let mut config = std::fs::read_to_string(&scene.config).unwrap();
    config.push_str(&person("bob", BOB, "[\"sre\"]"));
    config.push_str(&person("carol", CAROL, "[\"sre\"]"));
    config.push_str(&person("dave", DAVE, "[]"));
    config.push_str("[[approvers]]\ntools = \"fs__write_file\"\ngroup = \"sre\"\napprovers = 2\n");
    write_secret(&scene.config, &config);
    let gateway = Gateway::start(&scene.config).await;
    let mut command = browser_page(
        "approvals_quorum_browser.py",
        &gateway,
        &scene,
        "approvals-quorum.png",
    );
    command.args([BOB, CAROL, DAVE]);
    let seen = run_client(command, "the quorum browser").await;
    assert!(
        seen["held_message"]
            .as_str()
            .unwrap()
            .contains("2 people must approve it"),
        "{seen}"
    );
    assert!(
        seen["tally_before"]
            .as_str()
            .unwrap()
            .contains("Needs 2 approvals (from sre): 0 so far"),
        "{seen}"
    );
    let after_bob = seen["tally_after_bob"].as_str().unwrap();
    assert!(
        after_bob.contains("1 so far") && after_bob.contains("bob"),
        "{seen}"
    );
    assert_eq!(seen["bob_sees_approve"], 0, "{seen}");
    // One approval of several carries no grant and no edit; nor one for someone away.
    assert_eq!(seen["bob_grant_or_edit"], 0, "{seen}");
    assert_eq!(seen["dave_grant_or_edit"], 0, "{seen}");
    assert!(
        seen["after_one"]["structuredContent"]["elicitation"]["id"].is_string(),
        "one approval of two runs nothing: {seen}"
    );
    assert!(
        seen["carol_away"]
            .as_str()
            .unwrap()
            .contains("dave answers for you"),
        "{seen}"
    );
    assert!(
        seen["dave_sees"]
            .as_str()
            .unwrap()
            .contains("as carol's delegate"),
        "{seen}"
    );
    assert!(
        seen["dave_away"]
            .as_str()
            .unwrap()
            .contains("You answer for carol"),
        "{seen}"
    );
    assert_ne!(seen["after_two"]["isError"], true, "{seen}");
    assert_eq!(
        std::fs::read_to_string(scene.file("quorum.txt")).unwrap(),
        "two people said yes"
    );
    gateway.stop().await;
}

/// The approvals page in headless Chromium (Debian's package, driven by Playwright for
/// Python): sign-in, a held `write_file` of the real filesystem server appearing without a
/// reload, Approve (the re-call runs once), Decline, hostile arguments inert, a cross-site
/// form post refused, sign-out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_approves_and_declines_in_a_real_browser() {
    let scene = Scene::new("browser", "[store]\nkind = \"memory\"");
    let gateway = Gateway::start(&scene.config).await;
    let command = browser_page("approvals_browser.py", &gateway, &scene, "approvals.png");
    let seen = run_client(command, "the browser").await;
    assert_eq!(seen["signed_in"], true, "{seen}");
    let arguments = seen["arguments_text"].as_str().unwrap();
    assert!(
        arguments.contains("<script>alert(1)</script>"),
        "shown as text: {arguments}"
    );
    assert!(
        arguments.contains("\\u202e"),
        "the override is shown escaped: {arguments}"
    );
    assert_eq!(seen["script_tags_in_item"], 0, "{seen}");
    // In a background tab: the count in the title, and a notification of the arrival whose
    // text is the item's heading as plain text.
    assert!(
        seen["title_waiting"].as_str().unwrap().starts_with("(1) "),
        "{seen}"
    );
    let notes = seen["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "one arrival, one notification: {seen}");
    assert_eq!(notes[0]["title"], "Waiting for you (1)", "{seen}");
    assert!(
        notes[0]["body"]
            .as_str()
            .unwrap()
            .contains("fs__write_file"),
        "{seen}"
    );
    assert_eq!(seen["dialogs"], json!([]), "no script ran: {seen}");
    assert_ne!(seen["approved_call"]["isError"], true, "{seen}");
    assert!(
        std::fs::read_to_string(scene.file("approved.txt"))
            .unwrap()
            .contains("<script>")
    );
    assert_eq!(
        seen["approved_again"]["structuredContent"]["elicitation_required"], true,
        "used once: {seen}"
    );
    assert_eq!(
        seen["declined_call"]["structuredContent"]["user_rejected"], true,
        "{seen}"
    );
    assert_eq!(
        seen["declined_call"]["structuredContent"]["note"], "use <b>staging</b> instead",
        "the note typed next to Decline reaches the agent: {seen}"
    );
    assert!(!scene.file("declined.txt").exists());
    // The page updated in place: what was being typed, and where, survived an arrival.
    assert_eq!(seen["note_kept"], "half a tho", "{seen}");
    assert_eq!(seen["focus_kept"], true, "{seen}");
    assert_eq!(
        seen["typing_declined"]["structuredContent"]["note"], "half a thought",
        "{seen}"
    );
    // Approve and allow the tool for two calls: they run, the third is held.
    assert_ne!(seen["granted_approved_call"]["isError"], true, "{seen}");
    for n in 1..=2 {
        assert_eq!(
            std::fs::read_to_string(scene.file(&format!("granted-{n}.txt"))).unwrap(),
            format!("granted {n}"),
            "{seen}"
        );
    }
    assert_eq!(
        seen["after_grant"]["structuredContent"]["elicitation_required"], true,
        "{seen}"
    );
    // Approve and allow this call: it runs again unasked until revoked on the page.
    assert_ne!(seen["call_grant_approved"]["isError"], true, "{seen}");
    assert_ne!(seen["call_grant_reused"]["isError"], true, "{seen}");
    assert!(
        seen["call_grant_reused"]["structuredContent"]
            .get("elicitation_required")
            .is_none(),
        "{seen}"
    );
    assert!(
        seen["grant_row"]
            .as_str()
            .unwrap()
            .contains("fs__write_file"),
        "{seen}"
    );
    assert_eq!(
        seen["after_revoke"]["structuredContent"]["elicitation_required"], true,
        "{seen}"
    );
    assert!(
        seen["grants_after_revoke"]
            .as_str()
            .unwrap()
            .contains("No standing grants"),
        "{seen}"
    );
    // Edit arguments on the page: mistakes shown in place, keeping what was typed; the edit
    // approved is what the filesystem server writes.
    assert!(
        seen["edit_error"].as_str().unwrap().contains("not JSON"),
        "{seen}"
    );
    assert!(
        seen["edit_kept"].as_str().unwrap().contains("edited.txt"),
        "{seen}"
    );
    assert!(
        seen["edit_schema_error"]
            .as_str()
            .unwrap()
            .contains("input schema"),
        "{seen}"
    );
    assert_ne!(seen["edited_call"]["isError"], true, "{seen}");
    assert_eq!(
        std::fs::read_to_string(scene.file("edited.txt")).unwrap(),
        "the <i>person's</i>"
    );
    assert!(!scene.file("asked.txt").exists(), "{seen}");
    assert_eq!(seen["forged_still_waiting"], true, "{seen}");
    assert!(!scene.file("forged.txt").exists());
    assert_eq!(
        seen["module_answer"],
        json!({"action": "accept", "content": {"colour": "green"}}),
        "the module got the person's choice: {seen}"
    );
    assert!(
        seen["invalid_shown"]
            .as_str()
            .unwrap()
            .contains("2 tries left"),
        "{seen}"
    );
    assert_eq!(
        seen["invalid_then_valid"]["response"],
        json!({"value": "long enough"}),
        "{seen}"
    );
    assert_eq!(seen["upload"]["status"], "responded", "{seen}");
    assert_eq!(
        seen["upload"]["response"]["sha256"], seen["upload_sha256"],
        "{seen}"
    );
    assert_eq!(seen["downloaded_same"], true, "{seen}");
    assert!(
        seen["url_mode_link"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{}/approvals/e/", gateway.base)),
        "{seen}"
    );
    assert_eq!(seen["url_mode_call"]["is_error"], false, "{seen}");
    assert_eq!(
        std::fs::read_to_string(scene.file("url-mode.txt")).unwrap(),
        "via url mode"
    );
    assert_eq!(seen["signed_out"], true, "{seen}");
    gateway.stop().await;
}

// ---- the upload blob store on an S3-compatible service ----

/// An S3-compatible service on loopback: moto's server (from PyPI, in the interop
/// virtualenv), with one empty bucket.
struct S3Service {
    _child: Child,
    endpoint: String,
}

impl S3Service {
    async fn start(bucket: &str) -> S3Service {
        let python = PathBuf::from(env_or_panic("MCP_INTEROP_PYTHON"));
        let port = free_port();
        let child = Command::new(python.with_file_name("moto_server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("moto_server is in the interop virtualenv (cargo xtask test installs it)");
        let endpoint = format!("http://127.0.0.1:{port}");
        for _ in 0..300 {
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            let request = http::Request::put(format!("{endpoint}/{bucket}"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            if let Ok(response) = client.request(request).await
                && response.status().is_success()
            {
                return S3Service {
                    _child: child,
                    endpoint,
                };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the S3-compatible service did not start");
    }

    /// The keys in `bucket` (from its XML listing).
    async fn keys(&self, bucket: &str) -> Vec<String> {
        let (status, body) = raw(
            "GET",
            &format!("{}/{bucket}?list-type=2", self.endpoint),
            &[],
            Bytes::new(),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        body.split("<Key>")
            .skip(1)
            .filter_map(|rest| rest.split("</Key>").next())
            .map(str::to_owned)
            .collect()
    }
}

/// One HTTP request with a raw body; the status and the body as text.
async fn raw(method: &str, url: &str, headers: &[(&str, &str)], body: Bytes) -> (u16, String) {
    let (status, _, body) = raw_with_headers(method, url, headers, body).await;
    (status, body)
}

async fn raw_with_headers(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> (u16, http::HeaderMap, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = client
        .request(request.body(Full::new(body)).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_answered_on_the_page_is_kept_in_an_s3_bucket_and_downloads_from_it() {
    const BUCKET: &str = "approvals-uploads";
    let s3 = S3Service::start(BUCKET).await;
    let uploads = format!(
        "[uploads]\nprefix = \"gw/uploads\"\n[uploads.s3]\nbucket = \"{BUCKET}\"\nendpoint = \"{}\"\nregion = \"us-east-1\"",
        s3.endpoint
    );
    let scene = Scene::with_uploads("s3", "[store]\nkind = \"memory\"", Some(&uploads));
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"));
    command
        .env("AWS_ACCESS_KEY_ID", "e2e-access-key")
        .env("AWS_SECRET_ACCESS_KEY", "e2e-secret-key");
    let gateway = Gateway::start_with(&scene.config, command).await;
    let base = &gateway.base;

    let service = format!("Bearer {SERVICE}");
    let ask = json!({"message": "The signed contract", "response": {"type": "file_upload", "content_types": ["application/pdf"]}});
    let (status, _, created) = http(
        "POST",
        &format!("{base}/v1/mcp/elicitations"),
        &[("authorization", &service)],
        Some(&ask),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();

    // The person signs in on the page and uploads the file, as the page's script does.
    let origin = base.as_str();
    let (status, headers, body) = raw_with_headers(
        "POST",
        &format!("{base}/approvals/sign-in"),
        &[
            ("content-type", "application/x-www-form-urlencoded"),
            ("origin", origin),
        ],
        Bytes::from(format!("token={HUMAN}")),
    )
    .await;
    assert_eq!(status, 303, "{body}");
    let cookie = headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let (status, page) = raw(
        "GET",
        &format!("{base}/approvals"),
        &[("cookie", &cookie)],
        Bytes::new(),
    )
    .await;
    assert_eq!(status, 200);
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    assert!(page.contains("accept=\"application/pdf\""), "{page}");
    let contract = Bytes::from_static(b"%PDF-1.7 the contract");
    let (status, answered) = raw(
        "POST",
        &format!("{base}/approvals/{id}/upload"),
        &[
            ("cookie", &cookie),
            ("origin", origin),
            ("content-type", "application/pdf"),
            ("x-file-name", "contract.pdf"),
            ("x-csrf-token", &csrf),
        ],
        contract.clone(),
    )
    .await;
    assert_eq!(status, 200, "{answered}");
    let answered: Value = serde_json::from_str(&answered).unwrap();
    let upload_id = answered["recorded"]["upload_id"].as_str().unwrap();

    // The file is in the bucket, under the prefix and the elicitation, named by the id only.
    let keys = s3.keys(BUCKET).await;
    let eid = id.replace('-', "");
    assert_eq!(
        keys,
        vec![format!("gw/uploads/{eid}/{}", &upload_id[32..])],
        "{keys:?}"
    );
    // The backend downloads it through the gateway.
    let (status, downloaded) = raw(
        "GET",
        &format!("{base}/v1/mcp/uploads/{upload_id}"),
        &[("authorization", &service)],
        Bytes::new(),
    )
    .await;
    assert_eq!(status, 200, "{downloaded}");
    assert_eq!(downloaded.as_bytes(), &contract[..]);
    // A second answer is not recorded, and leaves nothing behind in the bucket.
    let (status, again) = raw(
        "POST",
        &format!("{base}/approvals/{id}/upload"),
        &[
            ("cookie", &cookie),
            ("origin", origin),
            ("content-type", "application/pdf"),
            ("x-file-name", "other.pdf"),
            ("x-csrf-token", &csrf),
        ],
        Bytes::from_static(b"%PDF other"),
    )
    .await;
    assert_eq!(status, 409, "{again}");
    assert_eq!(s3.keys(BUCKET).await, keys);
    gateway.stop().await;
}

// ---- OAuth: the gateway as a resource server of a real authorization server ----

/// A loopback port free now, for a process started later to listen on. Drawn below the
/// kernel's ephemeral range, where that leaves room: the kernel hands ports of that range
/// to every `bind(…:0)` and outgoing connection of the tests running beside this one, and
/// could hand this one out again before its listener is up. The kernel's own choice where
/// the range leaves no room below it.
fn free_port() -> u16 {
    const FLOOR: u16 = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(0);
    if ephemeral > FLOOR + 1_000 {
        for _ in 0..64 {
            let draw = u16::from_le_bytes(mcp_random::bytes().unwrap());
            let port = FLOOR + draw % (ephemeral - FLOOR);
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `oidc-provider` (npm) on loopback: see tests/oauth/idp.mjs.
struct Idp {
    _child: Child,
    script: PathBuf,
    issuer: String,
}

impl Idp {
    /// The authorization server; with `gateway`, also the approvals page's SSO client.
    async fn start(gateway: Option<&str>) -> Idp {
        Idp::start_env(gateway, &[]).await
    }

    /// [`Idp::start`] with `env` for the script (`IDP_TTL`: access tokens' life, seconds).
    async fn start_env(gateway: Option<&str>, env: &[(&str, &str)]) -> Idp {
        // ESM resolves packages from the script's folder: run it from the npm cache.
        let dir = PathBuf::from(env_or_panic("MCP_INTEROP_NODE_DIR"));
        let script = dir.join(format!("idp_{}_{}.mjs", std::process::id(), free_port()));
        std::fs::copy(
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/oauth/idp.mjs"),
            &script,
        )
        .unwrap();
        let mut child = Command::new("node")
            .arg(&script)
            .arg(free_port().to_string())
            .args(gateway)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the authorization server starts")
            .unwrap()
            .expect("it prints its issuer");
        let issuer = serde_json::from_str::<Value>(&line).unwrap()["issuer"]
            .as_str()
            .unwrap()
            .to_owned();
        // Keep reading what it prints (its development pages log), so it never writes to a
        // closed pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Idp {
            _child: child,
            script,
            issuer,
        }
    }

    /// An access token by client_credentials for `resource`.
    async fn token(&self, client: &str, scope: &str, resource: &str) -> String {
        let basic = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("{client}:{client}-secret"),
        );
        let form = format!(
            "grant_type=client_credentials&scope={}&resource={}",
            scope.replace(' ', "+"),
            resource.replace(':', "%3A").replace('/', "%2F")
        );
        let (status, body) = raw(
            "POST",
            &format!("{}/token", self.issuer),
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("authorization", &format!("Basic {basic}")),
            ],
            Bytes::from(form),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()["access_token"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

impl Drop for Idp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.script);
    }
}

/// A gateway configuration in mode `jwt` on `port`, trusting `issuer` (the test IdP's scope
/// names), with the demo module; `head` goes before `[auth]` (a store), `tail` after it
/// (sso, approvers). Returns the scene's directory and the file.
fn jwt_gateway_config(
    name: &str,
    port: u16,
    issuer: &str,
    head: &str,
    tail: &str,
) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            r#"
listen = "127.0.0.1:{port}"
{head}
[auth]
mode = "jwt"
[auth.jwt]
resource = "http://127.0.0.1:{port}/mcp"
[auth.jwt.scopes]
tools_call = "mcp.tools"
respond = "mcp.approve"
create = "mcp.ask"
[[auth.jwt.issuers]]
issuer = "{issuer}"
jwks_url = "{issuer}/jwks"
algorithms = ["ES256", "RS256"]
{tail}
[uploads]
dir = "{uploads}"
[[modules]]
name = "demo"
transport = "demo"
"#,
            uploads = dir.join("uploads").display(),
        ),
    )
    .unwrap();
    (dir, config)
}

/// A 2026-07-28 `tools/call` of `tool` with `token`: the status and `WWW-Authenticate`.
async fn call_with_token(base: &str, tool: &str, token: &str) -> (u16, String) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": {}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}});
    let (status, headers, _) = raw_with_headers(
        "POST",
        &format!("{base}/mcp"),
        &[
            ("authorization", &format!("Bearer {token}")),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", tool),
            ("accept", "application/json"),
            ("content-type", "application/json"),
        ],
        Bytes::from(body.to_string()),
    )
    .await;
    let challenge = headers
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, challenge)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oauth_client_discovers_the_authorization_server_and_calls_a_tool_with_its_token() {
    let idp = Idp::start(None).await;
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let resource = format!("{base}/mcp");
    let (dir, config) = jwt_gateway_config("oauth", port, &idp.issuer, "", "");
    let gateway = Gateway::start(&config).await;
    assert_eq!(gateway.base, base);

    // The official Python SDK: 401 → protected resource metadata → the authorization
    // server's metadata → a client_credentials token for this resource → the tool.
    let mut command = Command::new(env_or_panic("MCP_INTEROP_PYTHON"));
    command
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/python_oauth_client.py"
        ))
        .arg(&resource)
        .args([
            idp.issuer.as_str(),
            "agent",
            "agent-secret",
            "demo__list_notes",
        ]);
    let seen = run_client(command, "the python oauth client").await;
    assert_eq!(seen["got_token"], true, "{seen}");
    assert_eq!(seen["is_error"], false, "{seen}");
    assert!(
        seen["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("demo__list_notes")),
        "{seen}"
    );

    // The authorization server's own tokens, refused for what is wrong with them.
    let good = idp.token("agent", "mcp.tools", &resource).await;
    assert_eq!(
        call_with_token(&base, "demo__list_notes", &good).await.0,
        200
    );
    let elsewhere = idp
        .token("agent", "mcp.tools", "https://other.example.com/mcp")
        .await;
    let (status, challenge) = call_with_token(&base, "demo__list_notes", &elsewhere).await;
    assert_eq!(status, 401, "a token for another resource");
    assert!(
        challenge.contains("error=\"invalid_token\"")
            && challenge.contains(&format!(
                "resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\""
            )),
        "{challenge}"
    );
    let reader = idp.token("reader", "mcp.approve", &resource).await;
    let (status, challenge) = call_with_token(&base, "demo__list_notes", &reader).await;
    assert_eq!(status, 403, "a token without mcp.tools");
    assert!(
        challenge.contains("error=\"insufficient_scope\"")
            && challenge.contains("scope=\"mcp.tools\""),
        "{challenge}"
    );
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The approvals page's single sign-on in a real browser (see
/// tests/browser/approvals_sso_browser.py), against oidc-provider's own login pages, with a
/// four-eyes rule: the caller's person cannot approve, an approver of the group can, and the
/// audit trail (PostgreSQL) names the approver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_to_the_approvals_page_through_the_identity_provider() {
    let db = TestDb::new().await;
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let resource = format!("{base}/mcp");
    let idp = Idp::start(Some(&base)).await;
    let store = format!(
        "[store]\nkind = \"postgres\"\ndatabase_url = \"{}\"\nseal_keys = [\"e2e:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\"]",
        TestDb::url(&db.writer)
    );
    let sso = "[auth.jwt.sso]\nclient_id = \"approvals\"\n[[approvers]]\ntools = \"demo__delete_note\"\ngroup = \"sre\"\nmode = \"four_eyes\"";
    let (dir, config) = jwt_gateway_config("sso", port, &idp.issuer, &store, sso);
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"));
    command.env("MCP_GATEWAY_OIDC_CLIENT_SECRET", "approvals-secret");
    let gateway = Gateway::start_with(&config, command).await;
    let agent = idp.token("alice", "mcp.tools", &resource).await;
    let mut command = Command::new(env_or_panic("MCP_INTEROP_PYTHON"));
    command
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/browser/approvals_sso_browser.py"
        ))
        .arg(&base)
        .arg(&agent);
    let seen = run_client(command, "the SSO browser").await;
    let idp_host = idp.issuer.trim_start_matches("http://");
    assert_eq!(seen["login_page_host"], idp_host, "{seen}");
    assert!(
        seen["caller_sees"]
            .as_str()
            .unwrap()
            .contains("Waits for a member of sre"),
        "{seen}"
    );
    assert_eq!(seen["caller_buttons"], 0, "{seen}");
    assert_eq!(seen["caller_forged_status"], 403, "{seen}");
    assert_eq!(
        seen["held_after_caller"]["structuredContent"]["elicitation_required"], true,
        "{seen}"
    );
    assert!(
        seen["approver_sees"]
            .as_str()
            .unwrap()
            .contains(&format!("for alice@{idp_host}")),
        "{seen}"
    );
    assert_eq!(seen["approved_call"]["isError"], false, "{seen}");
    assert_ne!(
        seen["approved_call"]["structuredContent"]["elicitation_required"], true,
        "{seen}"
    );
    assert_eq!(seen["signed_out"], true, "{seen}");
    // The audit trail names the approver on alice's row.
    let audit = db
        .admin()
        .await
        .query(
            "SELECT caller_subject, detail->>'answered_by' FROM mcp_audit_events WHERE event = 'elicitation_responded'",
            &[],
        )
        .await
        .unwrap();
    let rows: Vec<(String, Option<String>)> = audit.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        rows,
        vec![(
            format!("alice@{idp_host}"),
            Some(format!("bob@{idp_host} on the approvals page"))
        )],
        "callers are sub@name, the name being the whole issuer URL without its scheme"
    );

    // The way back is bound to the browser that left: another browser's `state` (login
    // CSRF: an attacker's sign-in finished in the victim's browser), a bad code, and a
    // replay are all refused.
    let (status, headers, _) = raw_with_headers(
        "GET",
        &format!("{base}/approvals/oidc/start"),
        &[],
        Bytes::new(),
    )
    .await;
    assert_eq!(status, 303);
    let location = headers["location"].to_str().unwrap().to_owned();
    assert!(
        location.starts_with(&format!("{}/auth?", idp.issuer))
            && location.contains("code_challenge_method=S256")
            && location.contains("nonce="),
        "{location}"
    );
    let state = location
        .split("state=")
        .nth(1)
        .and_then(|rest| rest.split('&').next())
        .unwrap()
        .to_owned();
    let bound = headers["set-cookie"].to_str().unwrap().to_owned();
    // The sign-in on its way is sealed in the cookie: the state, the PKCE verifier and the
    // nonce stay unreadable in the browser, and any instance can finish it.
    assert!(
        bound.starts_with("mcp_gateway_oidc=o1.")
            && !bound.contains(&state)
            && bound.contains("HttpOnly"),
        "{bound}"
    );
    let callback = format!("{base}/approvals/oidc/callback?state={state}&code=forged");
    let (status, page) = raw("GET", &callback, &[], Bytes::new()).await;
    assert_eq!(status, 400, "without the browser's cookie: {page}");
    let cookie = bound.split(';').next().unwrap().to_owned();
    let (status, page) = raw("GET", &callback, &[("cookie", &cookie)], Bytes::new()).await;
    assert_eq!(status, 400, "a code the provider never issued: {page}");
    assert!(page.contains("did not sign you in"), "{page}");
    let (status, page) = raw("GET", &callback, &[("cookie", &cookie)], Bytes::new()).await;
    assert_eq!(status, 400, "a replay: {page}");
    assert!(page.contains("unknown or has expired"), "{page}");
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------
// Faults (docs/reliability.md): the database stopped or frozen mid-run, the gateway killed.
// ---------------------------------------------------------------------------------------

/// Awaits `work`, failing the test if it has not finished after a minute: a hang detector,
/// not a timing assertion.
async fn answers<T>(what: &str, work: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), work)
        .await
        .unwrap_or_else(|_| panic!("{what} hung"))
}

/// Signs in to the approvals page with the person's token; returns the cookie.
async fn page_sign_in(base: &str) -> String {
    let (status, headers, body) = raw_with_headers(
        "POST",
        &format!("{base}/approvals/sign-in"),
        &[
            ("content-type", "application/x-www-form-urlencoded"),
            ("origin", base),
        ],
        Bytes::from(format!("token={HUMAN}")),
    )
    .await;
    assert_eq!(status, 303, "{body}");
    let set = headers["set-cookie"].to_str().unwrap();
    set.split(';').next().unwrap().to_owned()
}

/// Whether `/readyz` answers `status` within 30 s (it re-checks the store at most once a
/// second, so it may say the previous answer for that long). Each request must answer.
async fn readiness_becomes(base: &str, status: u16) -> bool {
    for _ in 0..60 {
        let (now, _) = answers(
            "GET /readyz",
            raw("GET", &format!("{base}/readyz"), &[], Bytes::new()),
        )
        .await;
        if now == status {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

fn is_store_unavailable(result: &Value) -> bool {
    result["isError"] == true && text(result).contains("store is unavailable")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_or_frozen_mid_run_fails_gated_paths_closed_and_recovers_without_a_restart()
 {
    let cluster = elicitation_store::test_support::FaultCluster::take().await;
    let db = cluster.database().await;
    let store = format!(
        "[store]\nkind = \"postgres\"\ndatabase_url = \"{}\"\noperation_timeout = \"1s\"\nseal_keys = [\"e2e:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\"]",
        TestDb::url(&db.writer)
    );
    let scene = Scene::new("pg-faults", &store);
    let gateway = Gateway::start(&scene.config).await;
    let base = gateway.base.clone();
    let mut s = Session::open(&gateway).await;
    let cookie = page_sign_in(&base).await;
    let human = format!("Bearer {HUMAN}");
    let notes = scene.file("notes.txt");
    std::fs::write(&notes, "still readable").unwrap();

    // Held before the fault: it must survive it.
    let kept = scene.file("kept.txt");
    let kept_args = json!({"path": kept, "content": "written once"});
    let kept_id = held_id(&s.call("fs__write_file", kept_args.clone(), None).await);

    for fault in ["frozen", "stopped"] {
        match fault {
            "frozen" => cluster.freeze(),
            _ => cluster.stop(),
        }
        // Read-only calls need no store: they keep working.
        let read = answers(
            "a read-only call",
            s.call("fs__read_text_file", json!({"path": notes}), None),
        )
        .await;
        assert_eq!(text(&read), "still readable", "{fault}: {read}");
        // A new destructive call fails closed, in band, and is not forwarded.
        let never = scene.file("never.txt");
        let refused = answers(
            "a gated call",
            s.call(
                "fs__write_file",
                json!({"path": never, "content": "x"}),
                None,
            ),
        )
        .await;
        assert!(is_store_unavailable(&refused), "{fault}: {refused}");
        assert!(!never.exists(), "{fault}: a gated call was forwarded");
        // So does a re-call with a confirmation id (the store cannot say it is approved).
        let recall = answers(
            "a re-call",
            s.call("fs__write_file", kept_args.clone(), Some(&kept_id)),
        )
        .await;
        assert!(is_store_unavailable(&recall), "{fault}: {recall}");
        assert!(!kept.exists(), "{fault}: an unconfirmed call was forwarded");
        // REST, the approvals page and readiness answer 503.
        let (status, _, body) = answers(
            "GET /v1/mcp/elicitations",
            http(
                "GET",
                &format!("{base}/v1/mcp/elicitations"),
                &[("authorization", &human)],
                None,
            ),
        )
        .await;
        assert_eq!(status, 503, "{fault}: {body}");
        let (status, _, body) = answers(
            "POST …/respond",
            http(
                "POST",
                &format!("{base}/v1/mcp/elicitations/{kept_id}/respond"),
                &[("authorization", &human)],
                Some(&json!({"confirmed": true})),
            ),
        )
        .await;
        assert_eq!(status, 503, "{fault}: {body}");
        let (status, page) = answers(
            "GET /approvals",
            raw(
                "GET",
                &format!("{base}/approvals"),
                &[("cookie", &cookie)],
                Bytes::new(),
            ),
        )
        .await;
        assert_eq!(status, 503, "{fault}: {page}");
        assert!(page.contains("unavailable"), "{fault}: {page}");
        assert!(
            readiness_becomes(&base, 503).await,
            "{fault}: /readyz still says ready"
        );

        match fault {
            "frozen" => cluster.thaw(),
            _ => cluster.start(),
        }
        // Back without a restart: a gated call is held again.
        let mut held_again = None;
        for attempt in 0..60 {
            let probe = scene.file(&format!("probe-{fault}-{attempt}.txt"));
            let result = s
                .call(
                    "fs__write_file",
                    json!({"path": probe, "content": "x"}),
                    None,
                )
                .await;
            if result["structuredContent"]["elicitation_required"] == true {
                held_again = Some(result);
                break;
            }
            assert!(is_store_unavailable(&result), "{fault}: {result}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert!(
            held_again.is_some(),
            "{fault}: the gate did not recover within 30 s"
        );
        assert!(
            readiness_becomes(&base, 200).await,
            "{fault}: not ready after recovery"
        );
        let (status, page) = raw(
            "GET",
            &format!("{base}/approvals"),
            &[("cookie", &cookie)],
            Bytes::new(),
        )
        .await;
        assert_eq!(status, 200, "{fault}");
        assert!(
            page.contains(&kept_id),
            "{fault}: the held call is gone from the page"
        );
    }

    // Nothing was lost: the confirmation held before both faults is approved now, and its
    // re-call runs once.
    answer(&base, &kept_id, true).await;
    let done = s
        .call("fs__write_file", kept_args.clone(), Some(&kept_id))
        .await;
    assert_ne!(done["isError"], true, "{done}");
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), "written once");
    std::fs::remove_file(&kept).unwrap();
    let again = s.call("fs__write_file", kept_args, Some(&kept_id)).await;
    assert!(
        !kept.exists(),
        "a used confirmation ran its call again: {again}"
    );
    gateway.stop().await;
}

/// A gateway over the misbehaving fixture module `faulty` (its `erase` appends each call's
/// arguments to a ledger: the module's own count of executions).
struct FaultScene {
    dir: PathBuf,
    config: PathBuf,
    ledger: PathBuf,
}

impl FaultScene {
    fn new(name: &str, store: &str) -> FaultScene {
        let dir = std::env::temp_dir().join(format!("mcp-e2e-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // The module writes its ledger in a directory of its own user's.
        let work = dir.join("module");
        std::fs::create_dir_all(&work).unwrap();
        module_user_owns(&work);
        let ledger = work.join("ledger");
        let config = dir.join("gateway.toml");
        let text = format!(
            r#"
listen = "127.0.0.1:0"
{store}
[auth]
mode = "tokens"
[[auth.tokens]]
subject = "alice"
token_sha256 = "{agent}"
scopes = ["tools:call"]
[[auth.tokens]]
subject = "alice"
token_sha256 = "{human}"
scopes = ["elicitations:respond"]
[limits]
calls_per_minute = 0
confirmations_per_minute = 0
[[modules]]
name = "faulty"
transport = "stdio"
command = "python3"
args = ["{script}", "{ledger}"]
trust_annotations = true
"#,
            agent = token_sha256(AGENT),
            human = token_sha256(HUMAN),
            script = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../crates/mcp-http/tests/fixtures/faulty_module.py"
            ),
            ledger = ledger.display(),
        );
        write_secret(&config, &text);
        FaultScene {
            dir,
            config,
            ledger,
        }
    }

    /// The executions the module recorded, in order.
    fn executed(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.ledger)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for FaultScene {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Gateway {
    /// SIGKILL: no shutdown, nothing flushed.
    async fn kill(mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }
}

/// How many configuration reloads `/metrics` counts with `outcome`.
async fn reloads(base: &str, outcome: &str) -> u64 {
    let (status, _, text) = raw_with_headers(
        "GET",
        &format!("{base}/metrics"),
        &[("authorization", &format!("Bearer {SCRAPER}"))],
        Bytes::new(),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let series = format!("mcp_gateway_config_reloads_total{{outcome=\"{outcome}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .unwrap_or_else(|| panic!("no {series}in {text}"))
        .trim()
        .parse()
        .unwrap()
}

/// A 2026-07-28 `tools/call` by the agent (stateless: any instance serves it).
async fn modern_call(
    base: &str,
    tool: &str,
    arguments: Value,
    confirmation: Option<&str>,
) -> Value {
    let mut params = json!({"name": tool, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}});
    if let Some(id) = confirmation {
        params["_meta"]["confirmation_id"] = json!(id);
    }
    let auth = format!("Bearer {AGENT}");
    let (status, _, body) = http(
        "POST",
        &format!("{base}/mcp"),
        &[
            ("authorization", &auth),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", tool),
        ],
        Some(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["result"].clone()
}

fn postgres_store(db: &TestDb) -> String {
    format!(
        "[store]\nkind = \"postgres\"\ndatabase_url = \"{}\"\nseal_keys = [\"e2e:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\"]",
        TestDb::url(&db.writer)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_between_hold_approval_and_re_call_loses_nothing_on_postgres() {
    let db = TestDb::new().await;
    let scene = FaultScene::new("sigkill-postgres", &postgres_store(&db));
    // Killed between the hold and the approval.
    let a = Gateway::start(&scene.config).await;
    let one = held_id(&modern_call(&a.base, "faulty__erase", json!({"path": "/one"}), None).await);
    a.kill().await;
    let b = Gateway::start(&scene.config).await;
    answer(&b.base, &one, true).await;
    // Killed between the approval and the re-call.
    let two = held_id(&modern_call(&b.base, "faulty__erase", json!({"path": "/two"}), None).await);
    answer(&b.base, &two, true).await;
    b.kill().await;
    assert!(
        scene.executed().is_empty(),
        "nothing ran before its re-call"
    );
    let c = Gateway::start(&scene.config).await;
    for (id, path) in [(&one, "/one"), (&two, "/two")] {
        let done = modern_call(&c.base, "faulty__erase", json!({"path": path}), Some(id)).await;
        assert_eq!(text(&done), "erased", "{done}");
        // Used now: another re-call is held anew, never run again.
        let again = modern_call(&c.base, "faulty__erase", json!({"path": path}), Some(id)).await;
        assert_ne!(held_id(&again), *id, "{again}");
    }
    assert_eq!(
        scene.executed(),
        vec![json!({"path": "/one"}), json!({"path": "/two"})],
        "each approved call ran exactly once"
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_on_the_memory_store_forgets_its_confirmations_and_forwards_nothing() {
    let scene = FaultScene::new("sigkill-memory", "[store]\nkind = \"memory\"");
    let a = Gateway::start(&scene.config).await;
    let approved =
        held_id(&modern_call(&a.base, "faulty__erase", json!({"path": "/lost"}), None).await);
    answer(&a.base, &approved, true).await;
    a.kill().await;
    let b = Gateway::start(&scene.config).await;
    // The approval died with the process: the re-call is held anew, not forwarded.
    let again = modern_call(
        &b.base,
        "faulty__erase",
        json!({"path": "/lost"}),
        Some(&approved),
    )
    .await;
    assert_ne!(held_id(&again), approved, "{again}");
    let auth = format!("Bearer {HUMAN}");
    let (status, _, body) = http(
        "GET",
        &format!("{}/v1/mcp/elicitations/{approved}", b.base),
        &[("authorization", &auth)],
        None,
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert!(
        scene.executed().is_empty(),
        "a forgotten approval ran its call"
    );
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_re_calls_over_two_instances_run_one_approved_call_once() {
    let db = TestDb::new().await;
    let scene = FaultScene::new("contended", &postgres_store(&db));
    let a = Gateway::start(&scene.config).await;
    let b = Gateway::start(&scene.config).await;
    let args = json!({"path": "/contended"});
    let id = held_id(&modern_call(&a.base, "faulty__erase", args.clone(), None).await);
    answer(&b.base, &id, true).await;
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..64 {
        let base = if i % 2 == 0 {
            a.base.clone()
        } else {
            b.base.clone()
        };
        let (id, args) = (id.clone(), args.clone());
        calls.spawn(async move { modern_call(&base, "faulty__erase", args, Some(&id)).await });
    }
    let mut ran = 0;
    while let Some(result) = calls.join_next().await {
        let result = result.unwrap();
        if text(&result) == "erased" {
            ran += 1;
        } else {
            // Every other re-call is held anew (the confirmation was used), never run.
            assert_ne!(held_id(&result), id, "{result}");
        }
    }
    assert_eq!(ran, 1, "one re-call ran");
    assert_eq!(
        scene.executed(),
        vec![args],
        "the module ran the call exactly once"
    );
    a.stop().await;
    b.stop().await;
}

// ---- Module state kept apart between callers ----

const ALICE: &str = "e2e-isolation-alice";
const BOB: &str = "e2e-isolation-bob";

/// A 2025-11-25 session of `token` at the gateway; returns its id.
async fn session_of(gateway: &Gateway, token: &str) -> String {
    let auth = format!("Bearer {token}");
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}});
    let (status, headers, body) = http(
        "POST",
        &format!("{}/mcp", gateway.base),
        &[
            ("authorization", &auth),
            ("accept", "application/json, text/event-stream"),
        ],
        Some(&init),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    headers
        .get("mcp-session-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

/// One request in `session`; the JSON-RPC answer.
async fn in_session(gateway: &Gateway, token: &str, session: &str, message: Value) -> Value {
    let auth = format!("Bearer {token}");
    let (status, _, body) = http(
        "POST",
        &format!("{}/mcp", gateway.base),
        &[
            ("authorization", &auth),
            ("mcp-session-id", session),
            ("mcp-protocol-version", "2025-11-25"),
            ("accept", "application/json, text/event-stream"),
        ],
        Some(&message),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The everything server (`@modelcontextprotocol/server-everything`) behind the gateway as
/// `module` (a `[[modules]]` body), beside another module; alice leaves a session resource
/// in it and reads it back. Whether bob can read it, and the per-caller instances the
/// gateway ran.
async fn bob_reads_alices_session_resource(name: &str, module: &str) -> (bool, usize) {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            r#"
listen = "127.0.0.1:0"
[store]
kind = "memory"
[auth]
mode = "tokens"
[[auth.tokens]]
subject = "alice"
token_sha256 = "{alice}"
scopes = ["tools:call"]
[[auth.tokens]]
subject = "bob"
token_sha256 = "{bob}"
scopes = ["tools:call"]
[[modules]]
name = "ev"
{module}
# A second module: a URI no module lists is no longer the single module's by default
# (issue 45, item 6: alice could not read her own session resource then).
[[modules]]
name = "demo"
transport = "demo"
[[policy]]
tool = "ev__gzip-file-as-resource"
gate = "allow"
[[policy]]
tool = "ev__toggle-simulated-logging"
gate = "allow"
[[policy]]
tool = "ev__echo"
gate = "allow"
"#,
            alice = token_sha256(ALICE),
            bob = token_sha256(BOB),
        ),
    )
    .unwrap();
    let gateway = Gateway::start(&config).await;
    let (alice, bob) = (
        session_of(&gateway, ALICE).await,
        session_of(&gateway, BOB).await,
    );
    let made = in_session(
        &gateway,
        ALICE,
        &alice,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "ev__gzip-file-as-resource", "arguments": {"name": "alice-secret.gz",
            "data": "data:text/plain;base64,YWxpY2UncyBzZWNyZXQ=", "outputType": "resourceLink"}}}),
    )
    .await;
    let uri = made["result"]["content"][0]["uri"]
        .as_str()
        .unwrap_or_else(|| panic!("a session resource link: {made}"))
        .to_owned();
    assert!(uri.starts_with("demo://resource/session/"), "{uri}");
    let read = |token: &'static str, session: String, uri: String| {
        let gateway = &gateway;
        async move {
            in_session(
                gateway,
                token,
                &session,
                json!({"jsonrpc": "2.0", "id": 2,
                "method": "resources/read", "params": {"uri": uri}}),
            )
            .await
        }
    };
    let own = read(ALICE, alice.clone(), uri.clone()).await;
    assert!(
        own["result"]["contents"][0]["blob"].is_string(),
        "alice reads her own session resource: {own}"
    );
    // Bob runs something of the module's too (his own instance, where it keeps state).
    let echoed = in_session(
        &gateway,
        BOB,
        &bob,
        json!({"jsonrpc": "2.0", "id": 6,
        "method": "tools/call", "params": {"name": "ev__echo", "arguments": {"message": "hi"}}}),
    )
    .await;
    assert!(echoed.to_string().contains("hi"), "{echoed}");
    let other = read(BOB, bob.clone(), uri.clone()).await;
    let listed = in_session(
        &gateway,
        BOB,
        &bob,
        json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list"}),
    )
    .await;
    let bob_sees =
        other["result"]["contents"].is_array() || listed.to_string().contains("alice-secret.gz");
    if !bob_sees {
        assert!(other["error"].is_object(), "{other}");
    }
    let instances = children_running(gateway.child.id().unwrap(), "mcp-server-everything");
    if !bob_sees {
        // The module's own log messages, sent outside any call, reach alice's session
        // stream and never bob's.
        let mut alice_stream = session_stream(&gateway, ALICE, &alice).await;
        let mut bob_stream = session_stream(&gateway, BOB, &bob).await;
        for (token, session) in [(ALICE, &alice), (BOB, &bob)] {
            let set = in_session(
                &gateway,
                token,
                session,
                json!({"jsonrpc": "2.0", "id": 4,
                "method": "logging/setLevel", "params": {"level": "debug"}}),
            )
            .await;
            assert!(set.get("error").is_none(), "{set}");
        }
        let toggled = in_session(&gateway, ALICE, &alice, json!({"jsonrpc": "2.0", "id": 5,
            "method": "tools/call", "params": {"name": "ev__toggle-simulated-logging", "arguments": {}}}))
        .await;
        assert!(
            toggled["result"]["content"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("Started")),
            "{toggled}"
        );
        // The server logs every 5 s; on a loaded 2-core machine the first may take longer
        // than 30 s to come through (seen once in a full run), so the wait is generous.
        let alice_saw = read_until(&mut alice_stream, "notifications/message", 90).await;
        assert!(
            alice_saw.contains("notifications/message"),
            "alice's module session logs to alice: {alice_saw}"
        );
        let bob_saw = read_until(&mut bob_stream, "notifications/message", 6).await;
        assert!(
            !bob_saw.contains("notifications/message"),
            "never to bob: {bob_saw}"
        );
    }
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    (bob_sees, instances)
}

/// A session's GET stream, primed.
async fn session_stream(gateway: &Gateway, token: &str, session: &str) -> hyper::body::Incoming {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let request = http::Request::builder()
        .method("GET")
        .uri(format!("{}/mcp", gateway.base))
        .header("authorization", format!("Bearer {token}"))
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-11-25")
        .header("accept", "text/event-stream")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let primed = read_until(&mut body, "retry:", 20).await;
    assert!(primed.contains("retry:"), "the stream primes: {primed}");
    body
}

/// What a stream carries until `needle` shows up or `seconds` pass.
async fn read_until(body: &mut hyper::body::Incoming, needle: &str, seconds: u64) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let mut seen = String::new();
    while !seen.contains(needle) {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    seen.push_str(&String::from_utf8_lossy(data));
                }
            }
            _ => break,
        }
    }
    seen
}

/// The everything server over Streamable HTTP on a free port, once it listens: the child
/// (stopped when dropped) and its port.
async fn everything_over_http() -> (Child, u16) {
    let port = free_port();
    let everything = Command::new(env_or_panic("MCP_EVERYTHING_SERVER"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let up = tokio::time::timeout(Duration::from_secs(30), async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(up.is_ok(), "the everything server listens within 30 s");
    (everything, port)
}

/// A gateway configuration in a folder of its own (`name`): a memory store, tokens for alice
/// (`ALICE`) and bob (`BOB`) who may call tools and for alice as a person who answers
/// (`HUMAN`), then `modules`. The folder and the file.
fn alice_and_bob(name: &str, modules: &str) -> (PathBuf, PathBuf) {
    alice_and_bob_on(name, "[store]\nkind = \"memory\"", modules)
}

/// [`alice_and_bob`] on the store `store` (a `[store]` section).
fn alice_and_bob_on(name: &str, store: &str, modules: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    let mut tokens = String::new();
    for (subject, token, scope) in [
        ("alice", ALICE, "tools:call"),
        ("bob", BOB, "tools:call"),
        ("alice", HUMAN, "elicitations:respond"),
    ] {
        tokens.push_str(&format!(
            "[[auth.tokens]]\nsubject = \"{subject}\"\ntoken_sha256 = \"{}\"\nscopes = [\"{scope}\"]\n",
            token_sha256(token)
        ));
    }
    write_secret(
        &config,
        &format!("listen = \"127.0.0.1:0\"\n{store}\n[auth]\nmode = \"tokens\"\n{tokens}{modules}"),
    );
    (dir, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_callers_of_the_everything_server_see_none_of_each_others_module_state() {
    let server = env_or_panic("MCP_EVERYTHING_SERVER");
    // Over HTTP: the module's sessions are the callers' (per_caller is the default).
    let (mut everything, port) = everything_over_http().await;
    let http = format!("transport = \"http\"\nurl = \"http://127.0.0.1:{port}/mcp\"");
    let (leaked, _) = bob_reads_alices_session_resource("isolation-http", &http).await;
    assert!(
        !leaked,
        "over HTTP, bob sees nothing of alice's module session"
    );
    // The same server shared on purpose (for a server that keeps no state per client): the
    // leak the default prevents is real.
    let shared = format!("{http}\nisolation = \"shared\"");
    let (leaked, _) = bob_reads_alices_session_resource("isolation-shared", &shared).await;
    assert!(
        leaked,
        "a shared module session is one state for every caller"
    );
    let _ = everything.kill().await;

    // Over stdio, per_caller: one process each (the catalog's own, alice's and bob's).
    let stdio =
        format!("transport = \"stdio\"\ncommand = \"{server}\"\nisolation = \"per_caller\"");
    let (leaked, processes) = bob_reads_alices_session_resource("isolation-stdio", &stdio).await;
    assert!(
        !leaked,
        "over stdio, bob sees nothing of alice's module process"
    );
    assert_eq!(processes, 3, "the catalog's instance, alice's and bob's");
}

/// Rotating the seal key: restarted with `new, old`, an open session, a page sign-in and a
/// pending 2026-07-28 `requestState` made under `old` keep working (they were sealed under
/// the active key alone, so every one ended); restarted with `new` alone, they end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_seal_key_ends_no_session_or_sign_in_until_the_old_key_is_dropped() {
    let db = TestDb::new().await;
    let old = "old:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";
    let new = "new:DQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0=";
    let store = |keys: &[&str]| {
        let keys: Vec<String> = keys.iter().map(|k| format!("\"{k}\"")).collect();
        format!(
            "[store]\nkind = \"postgres\"\ndatabase_url = \"{}\"\nseal_keys = [{}]",
            TestDb::url(&db.writer),
            keys.join(", ")
        )
    };
    let scene = Scene::new("rotation", &store(&[old]));
    let with_keys = |keys: &[&str]| {
        let text = std::fs::read_to_string(&scene.config).unwrap();
        let start = text.find("[store]").unwrap();
        let end = start + text[start..].find("\n[auth]").unwrap();
        write_secret(
            &scene.config,
            &format!("{}{}{}", &text[..start], store(keys), &text[end..]),
        );
    };
    // Whether the session answers (a legacy `ping` on it), and whether the cookie is signed in.
    let still = |base: String, session: String, cookie: String| async move {
        let (status, _, _) = http(
            "POST",
            &format!("{base}/mcp"),
            &[
                ("authorization", &format!("Bearer {AGENT}")),
                ("mcp-session-id", &session),
                ("mcp-protocol-version", "2025-11-25"),
            ],
            Some(&json!({"jsonrpc": "2.0", "id": 9, "method": "ping"})),
        )
        .await;
        let (_, _, page) = raw_with_headers(
            "GET",
            &format!("{base}/approvals"),
            &[("cookie", &cookie)],
            Bytes::new(),
        )
        .await;
        (status == 200, page.contains("Sign out"))
    };

    let gateway = Gateway::start(&scene.config).await;
    let session = Session::open(&gateway).await;
    let cookie = page_sign_in(&gateway.base).await;
    assert_eq!(
        still(gateway.base.clone(), session.id.clone(), cookie.clone()).await,
        (true, true)
    );
    // Two calls held in band, each waiting for its retry with the person's answer.
    let kept = scene.sandbox.join("kept.txt");
    let dropped = scene.sandbox.join("dropped.txt");
    let kept_state = request_state(&gateway.base, &kept, None).await;
    let dropped_state = request_state(&gateway.base, &dropped, None).await;
    gateway.stop().await;

    // The new key is active; the old one still opens what it sealed.
    with_keys(&[new, old]);
    let gateway = Gateway::start(&scene.config).await;
    assert_eq!(
        still(gateway.base.clone(), session.id.clone(), cookie.clone()).await,
        (true, true),
        "a rotation ends neither the session nor the sign-in"
    );
    let done = request_state(&gateway.base, &kept, Some(&kept_state)).await;
    assert_eq!(done, "complete", "a rotation ends no requestState");
    assert!(kept.exists(), "the retried call ran");
    let fresh = Session::open(&gateway).await;
    gateway.stop().await;

    // The old key dropped: what it sealed ends; what the new key sealed lives on.
    with_keys(&[new]);
    let gateway = Gateway::start(&scene.config).await;
    assert_eq!(
        still(gateway.base.clone(), session.id.clone(), cookie.clone()).await,
        (false, false),
        "the old key's session and sign-in end with it"
    );
    assert!(
        still(gateway.base.clone(), fresh.id.clone(), cookie.clone())
            .await
            .0,
        "the session sealed under the new key lives on"
    );
    let refused = request_state(&gateway.base, &dropped, Some(&dropped_state)).await;
    assert!(
        refused.contains("Invalid or expired requestState"),
        "the old key's requestState ends with it: {refused}"
    );
    assert!(!dropped.exists(), "and its call never runs");
    gateway.stop().await;
}

/// A 2026-07-28 `fs__write_file` of `path` by the person's client, which can answer a form:
/// without `state`, the call is held in band and its `requestState` is returned; with one,
/// the retry accepts, and its `resultType` (or, refused, its error message) is returned.
async fn request_state(base: &str, path: &std::path::Path, state: Option<&str>) -> String {
    let mut params = json!({"name": "fs__write_file",
        "arguments": {"path": path, "content": "rotated"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}});
    if let Some(state) = state {
        params["requestState"] = json!(state);
        params["inputResponses"] =
            json!({"confirm": {"action": "accept", "content": {"confirmed": true}}});
    }
    let (_, _, body) = http(
        "POST",
        &format!("{base}/mcp"),
        &[
            ("authorization", &format!("Bearer {CLIENT}")),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "fs__write_file"),
        ],
        Some(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params})),
    )
    .await;
    match (state, body["result"]["resultType"].as_str()) {
        (None, Some("input_required")) => body["result"]["requestState"]
            .as_str()
            .unwrap_or_else(|| panic!("no requestState: {body}"))
            .to_owned(),
        (Some(_), Some(kind)) => kind.to_owned(),
        _ => body["error"]["message"]
            .as_str()
            .map_or_else(|| body.to_string(), str::to_owned),
    }
}

/// `policy explain` prints what the rules decide for one call and which rule decided; a
/// `when` that does not compile is refused at load, naming its rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_explain_names_the_deciding_rule_and_a_bad_when_is_refused_by_its_rule() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-explain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("policy.toml");
    let rules = r#"
[[modules]]
name = "fs"
transport = "http"
url = "http://127.0.0.1:9/mcp"
[[policy]]
tool = "fs__*"
when = "has(args.path) && args.path.contains('..')"
gate = "deny"
reason = "paths with .. are refused"
[[policy]]
tool = "fs__write_file"
when = "args.path.startsWith('/srv/shared/tmp/')"
gate = "allow"
[[policy]]
tool = "fs__write_file"
gate = "confirm"
[[flow.tools]]
tool = "fs__write_*"
labels = ["sends_out", "private"]
"#;
    std::fs::write(&file, rules).unwrap();
    let explain = |args: &'static str| {
        let file = file.clone();
        async move {
            let output = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"))
                .args(["policy", "explain", "--config"])
                .arg(&file)
                .args(["--tool", "fs__write_file", "--args", args])
                .output()
                .await
                .unwrap();
            assert!(output.status.success(), "{output:?}");
            String::from_utf8_lossy(&output.stdout).into_owned()
        }
    };
    let scratch = explain(r#"{"path": "/srv/shared/tmp/a", "content": "x"}"#).await;
    assert!(scratch.starts_with("decision: allow"), "{scratch}");
    assert!(
        scratch.contains("rule: 1 (tool = \"fs__write_file\""),
        "{scratch}"
    );
    // Each tool's flow labels, and where they come from.
    assert!(
        scratch.contains(
            "flow labels: private, sends_out ([[flow.tools]] entry 0, tool = \"fs__write_*\")"
        ),
        "{scratch}"
    );
    assert!(
        scratch.contains("the lethal-trifecta rule (hold)"),
        "{scratch}"
    );
    let elsewhere = explain(r#"{"path": "/srv/a"}"#).await;
    assert!(elsewhere.starts_with("decision: confirm"), "{elsewhere}");
    assert!(elsewhere.contains("rule: 2 "), "{elsewhere}");
    let climbing = explain(r#"{"path": "/srv/shared/tmp/../x"}"#).await;
    assert!(climbing.starts_with("decision: deny"), "{climbing}");
    assert!(climbing.contains("rule: 0 (tool = \"fs__*\""), "{climbing}");
    assert!(
        climbing.contains("reason: paths with .. are refused"),
        "{climbing}"
    );
    // Not JSON: a clear error, not a decision.
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"))
        .args(["policy", "explain", "--config"])
        .arg(&file)
        .args(["--tool", "fs__write_file", "--args", "path=/x"])
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--args"));
    // A `when` that does not compile: the file is refused, naming the rule.
    std::fs::write(
        &file,
        rules.replace("startsWith('/srv", "startsWith(('/srv"),
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"))
        .arg("check-config")
        .arg(&file)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("[[policy]] rule 1 (tool = \"fs__write_file\"): when:"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The issue's rules against the real filesystem server: writes under a scratch directory
/// run, other writes are held, a path with `..` is refused with the rule's reason, and a
/// shadow rule forwards while it counts what it would have held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_on_arguments_let_scratch_writes_run_hold_the_rest_and_refuse_dot_dot() {
    let scene = Scene::new("rules", "[store]\nkind = \"memory\"");
    let scratch = scene.file("tmp");
    std::fs::create_dir_all(&scratch).unwrap();
    module_user_owns(&scratch);
    let rules = format!(
        r#"
[[policy]]
tool = "fs__*"
when = "has(args.path) && args.path.contains('..')"
gate = "deny"
reason = "paths with .. are refused"
[[policy]]
tool = "fs__write_file"
when = "args.path.startsWith('{scratch}/')"
gate = "allow"
[[policy]]
tool = "fs__create_directory"
gate = "shadow"
"#,
        scratch = scratch.display()
    );
    let config = std::fs::read_to_string(&scene.config).unwrap() + &rules;
    write_secret(&scene.config, &config);
    let gateway = Gateway::start(&scene.config).await;
    let mut s = Session::open(&gateway).await;

    let free = scratch.join("free.txt");
    let done = s
        .call(
            "fs__write_file",
            json!({"path": free, "content": "ran"}),
            None,
        )
        .await;
    assert!(text(&done).starts_with("Successfully wrote"), "{done}");
    assert_eq!(std::fs::read_to_string(&free).unwrap(), "ran");

    let elsewhere = scene.file("kept.txt");
    held_id(
        &s.call(
            "fs__write_file",
            json!({"path": elsewhere, "content": "x"}),
            None,
        )
        .await,
    );
    assert!(!elsewhere.exists(), "held, not written");

    let climbing = format!("{}/../escaped.txt", scratch.display());
    let refused = s
        .call(
            "fs__write_file",
            json!({"path": climbing, "content": "x"}),
            None,
        )
        .await;
    assert_eq!(
        refused["structuredContent"]["policy_denied"], true,
        "{refused}"
    );
    assert_eq!(
        refused["structuredContent"]["reason"], "paths with .. are refused",
        "{refused}"
    );
    assert!(!scene.file("escaped.txt").exists());

    let made = scene.file("made");
    let shadowed = s
        .call("fs__create_directory", json!({"path": made}), None)
        .await;
    assert_ne!(shadowed["isError"], true, "{shadowed}");
    assert!(made.is_dir(), "a shadow rule forwards");
    let auth = format!("Bearer {SCRAPER}");
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let request = http::Request::get(format!("{}/metrics", gateway.base))
        .header("authorization", &auth)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let metrics = String::from_utf8_lossy(&body);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("mcp_gateway_tool_calls_total{")
                && l.contains("tool=\"fs__create_directory\"")
                && l.contains("outcome=\"shadowed\"")
                && l.ends_with(" 1")),
        "{metrics}"
    );
    gateway.stop().await;
}

/// Issue 44, items 1 and 2, against a module on the official Python SDK whose pydantic reads
/// `"true"`, `1` and `"yes"` as `True` and `"5000"` as `5000`: a `deny` comparing `force` with
/// `true` denies every such form (it used to forward them, and the module ran with
/// `force=True`); a `deny` comparing with a string denies a list holding it (it used to be
/// held); and a failing `auto` rule before an `allow` holds the payment (`allow` used to pay).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_is_not_talked_past_by_a_json_type_the_module_coerces() {
    let scene = Scene::new("lax", "[store]\nkind = \"memory\"");
    let rules = format!(
        r#"
[[modules]]
name = "lax"
transport = "stdio"
command = "{python}"
args = ["{fixture}"]
[[policy]]
tool = "lax__delete_branch"
when = "has(args.force) && args.force == true"
gate = "deny"
reason = "no forced deletes"
[[policy]]
tool = "lax__delete_branch"
when = "args.name == 'main'"
gate = "deny"
reason = "not main"
[[policy]]
tool = "lax__delete_branch"
gate = "allow"
[[policy]]
tool = "lax__pay"
when = "args.amount > 100"
gate = "auto"
[[policy]]
tool = "lax__*"
gate = "allow"
"#,
        python = env_or_panic("MCP_INTEROP_PYTHON"),
        fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/lax_module.py"),
    );
    let config = std::fs::read_to_string(&scene.config).unwrap() + &rules;
    write_secret(&scene.config, &config);
    let gateway = Gateway::start(&scene.config).await;
    // The Python module takes a moment to start.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !tool_names(&gateway.base, AGENT)
        .await
        .iter()
        .any(|t| t == "lax__echo_force")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lax module never listed its tools"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut s = Session::open(&gateway).await;

    // The module is as lax as its users think.
    for force in [json!("yes"), json!(1), json!("true")] {
        let read = s
            .call("lax__echo_force", json!({ "force": force }), None)
            .await;
        assert_eq!(text(&read), "force=True", "{force}: {read}");
    }
    let ran = s
        .call(
            "lax__delete_branch",
            json!({"name": "topic", "force": false}),
            None,
        )
        .await;
    assert_eq!(text(&ran), "deleted topic force=False", "{ran}");

    for force in [
        json!(true),
        json!("true"),
        json!(1),
        json!("yes"),
        json!([true]),
    ] {
        let refused = s
            .call(
                "lax__delete_branch",
                json!({"name": "topic", "force": force}),
                None,
            )
            .await;
        assert_eq!(
            refused["structuredContent"]["policy_denied"], true,
            "force = {force}: {refused}"
        );
        assert_eq!(refused["structuredContent"]["reason"], "no forced deletes");
    }
    for name in [json!("main"), json!(["main"])] {
        let refused = s
            .call("lax__delete_branch", json!({ "name": name }), None)
            .await;
        assert_eq!(
            refused["structuredContent"]["reason"], "not main",
            "name = {name}: {refused}"
        );
    }

    let small = s.call("lax__pay", json!({"amount": 5}), None).await;
    assert_eq!(text(&small), "paid 5", "{small}");
    for amount in [json!(5000), json!("5000"), json!([5000])] {
        held_id(&s.call("lax__pay", json!({ "amount": amount }), None).await);
    }
    gateway.stop().await;
}

/// A person approves one write to the real filesystem server and grants the tool for three
/// more under the scratch directory: the next three writes run with nobody asked, the fourth
/// is held; a grant longer than `[gate] max_grant` is refused with why. (A 2025-era session;
/// the gate suite runs the same over 2026-07-28.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_for_write_file_lets_the_next_writes_run_and_holds_the_one_after() {
    let scene = Scene::new("grants", "[store]\nkind = \"memory\"");
    let scratch = scene.file("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    module_user_owns(&scratch);
    let config = std::fs::read_to_string(&scene.config).unwrap() + "\n[gate]\nmax_grant = \"1h\"\n";
    write_secret(&scene.config, &config);
    let gateway = Gateway::start(&scene.config).await;
    let mut s = Session::open(&gateway).await;
    let auth = format!("Bearer {HUMAN}");
    let write = |n: usize| json!({"path": scratch.join(format!("{n}.txt")), "content": format!("write {n}")});

    let id = held_id(&s.call("fs__write_file", write(0), None).await);
    let respond = format!("{}/v1/mcp/elicitations/{id}/respond", gateway.base);
    let within = format!(
        "has(args.path) && args.path.startsWith('{}/')",
        scratch.display()
    );
    let (status, _, problem) = http(
        "POST",
        &respond,
        &[("authorization", &auth)],
        Some(&json!({"confirmed": true, "grant": {"scope": "tool", "for": "2h", "when": within}})),
    )
    .await;
    assert_eq!(status, 422, "{problem}");
    assert!(
        problem.to_string().contains("1h"),
        "says the most: {problem}"
    );
    let (status, _, body) = http(
        "POST",
        &respond,
        &[("authorization", &auth)],
        Some(&json!({"confirmed": true, "grant": {"scope": "tool", "for": "30m", "max_uses": 3, "when": within}})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["grant"]["uses_left"], 3, "{body}");
    let done = s.call("fs__write_file", write(0), Some(&id)).await;
    assert!(text(&done).starts_with("Successfully wrote"), "{done}");
    for n in 1..=3 {
        let done = s.call("fs__write_file", write(n), None).await;
        assert!(text(&done).starts_with("Successfully wrote"), "{n}: {done}");
        assert_eq!(
            std::fs::read_to_string(scratch.join(format!("{n}.txt"))).unwrap(),
            format!("write {n}")
        );
    }
    held_id(&s.call("fs__write_file", write(4), None).await);
    assert!(!scratch.join("4.txt").exists(), "the fourth is held");
    // Outside what the `when` names, the grant never applied.
    let outside = scene.file("outside.txt");
    held_id(
        &s.call(
            "fs__write_file",
            json!({"path": outside, "content": "x"}),
            None,
        )
        .await,
    );
    assert!(!outside.exists());
    let (status, _, listed) = http(
        "GET",
        &format!("{}/v1/mcp/grants", gateway.base),
        &[("authorization", &auth)],
        None,
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["grants"][0]["status"], "used_up", "{listed}");
    assert_eq!(listed["grants"][0]["uses"], 3, "{listed}");
    gateway.stop().await;
}

/// A person approves a write to the real filesystem server with other arguments: the module
/// writes what the person approved, not what the agent asked, and the agent is told. (A
/// 2025-era session; the gate suite runs the same over 2026-07-28.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edited_arguments_are_what_the_filesystem_server_writes() {
    let scene = Scene::new("edited", "[store]\nkind = \"memory\"");
    let gateway = Gateway::start(&scene.config).await;
    let mut s = Session::open(&gateway).await;
    let asked_path = scene.file("prod.txt");
    let asked = json!({"path": asked_path, "content": "from the agent"});
    let id = held_id(&s.call("fs__write_file", asked.clone(), None).await);
    let edited_path = scene.file("staging.txt");
    let auth = format!("Bearer {HUMAN}");
    let (status, _, body) = http(
        "POST",
        &format!("{}/v1/mcp/elicitations/{id}/respond", gateway.base),
        &[("authorization", &auth)],
        Some(&json!({"confirmed": true, "arguments": {"path": edited_path, "content": "as the person said"}})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let done = s.call("fs__write_file", asked, Some(&id)).await;
    assert!(text(&done).starts_with("Successfully wrote"), "{done}");
    let told = done["content"][1]["text"].as_str().unwrap_or_default();
    assert!(told.contains("changed the arguments"), "{done}");
    assert_eq!(
        std::fs::read_to_string(&edited_path).unwrap(),
        "as the person said"
    );
    assert!(!asked_path.exists(), "the agent's arguments never ran");
    gateway.stop().await;
}

/// The first question waiting for alice, as the REST API lists it.
async fn pending_elicitation(base: &str) -> Value {
    let auth = format!("Bearer {HUMAN}");
    for _ in 0..300 {
        let (_, _, listed) = http(
            "GET",
            &format!("{base}/v1/mcp/elicitations"),
            &[("authorization", &auth)],
            None,
        )
        .await;
        if let Some(found) = listed["elicitations"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["status"] == "pending")
        {
            return found.clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("no question was put to a person within 30 s");
}
