//! Notifications end to end: the real binary, a real module, and a webhook receiver written
//! apart from the gateway (`tests/fixtures/webhook_receiver.py`, which checks each
//! signature with its own HMAC).

use super::tool_changes::{Shifty, config};
use super::*;

const SECRET: &str = "e2e-notify-secret-0123456789";

/// A running receiver: where it listens and what it logged.
struct Receiver {
    _child: Child,
    url: String,
    log: PathBuf,
}

impl Receiver {
    async fn start(dir: &Path, statuses: &[u16]) -> Receiver {
        let log = dir.join("received.jsonl");
        let mut child = Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/webhook_receiver.py"
            ))
            .arg(SECRET)
            .arg(&log)
            .args(statuses.iter().map(u16::to_string))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the receiver prints its port")
            .unwrap()
            .unwrap();
        Receiver {
            _child: child,
            url: format!("http://127.0.0.1:{}/hook", port.trim()),
            log,
        }
    }

    fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Waits (up to `seconds`) until it has received `count` requests.
    async fn until(&self, count: usize, seconds: u64) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
        loop {
            let got = self.received();
            if got.len() >= count {
                return got;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "expected {count} requests, got {got:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A gateway whose `[[notify]]` webhook posts to `receiver`, with its secret in its
/// environment (and nowhere in the file).
async fn notifying_gateway(config: &Path) -> Gateway {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"));
    command.env("E2E_NOTIFY_SECRET", SECRET);
    Gateway::start_with(config, command).await
}

fn notify_section(receiver: &Receiver) -> String {
    format!(
        "[[notify]]\nname = \"hook\"\nkind = \"webhook\"\nurl = \"{}\"\nsecret_env = \"E2E_NOTIFY_SECRET\"\n",
        receiver.url
    )
}

fn write_tool() -> Value {
    json!([{"name": "write", "description": "Writes a note.",
            "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
            "annotations": {"readOnlyHint": false, "destructiveHint": true}}])
}

/// A held call is announced to the receiver, signed, retried after a `503` with the same
/// delivery id, without its arguments; the link in it shows a sign-in and answers nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_is_announced_by_a_signed_webhook_and_its_link_answers_nothing() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-notify-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let receiver = Receiver::start(&dir, &[503]).await;
    let shifty = Shifty::start(&dir, "notes", "stdio", write_tool(), "").await;
    let modules = format!("{}\n{}", shifty.module, notify_section(&receiver));
    let config = config(&dir, "[store]\nkind = \"memory\"", &modules);
    let gateway = notifying_gateway(&config).await;

    let held = modern_call(
        &gateway.base,
        "notes__write",
        json!({"path": "/srv/secret-path-value"}),
        None,
    )
    .await;
    let id = held_id(&held);
    let got = receiver.until(2, 30).await;
    assert_eq!(got.len(), 2, "the 503, then the retry: {got:?}");
    for request in &got {
        assert_eq!(
            request["verified"], true,
            "signed with the secret: {request}"
        );
        assert!(request["skew"].as_f64().unwrap() < 60.0, "{request}");
        assert_eq!(request["content_type"], "application/json");
    }
    let (first, second) = (&got[0]["body"], &got[1]["body"]);
    assert_eq!(first["delivery"], second["delivery"], "one delivery id");
    assert_eq!(first["event"], "elicitation.waiting");
    assert_eq!(first["id"], id);
    assert_eq!(first["caller"], "alice");
    assert_eq!(first["tool"], "notes__write");
    assert_eq!(first["type"], "confirmation");
    let link = first["url"].as_str().unwrap();
    assert_eq!(link, format!("{}/approvals/e/{id}", gateway.base));
    assert!(first.get("arguments").is_none(), "{first}");
    assert!(
        !got[0].to_string().contains("secret-path-value"),
        "no argument leaves by default: {got:?}"
    );

    // A link previewer fetching the link: a sign-in page, nothing answered.
    let (status, page) = raw("GET", link, &[], Bytes::new()).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Sign in"), "{page}");
    let (status, _, elicitation) = http(
        "GET",
        &format!("{}/v1/mcp/elicitations/{id}", gateway.base),
        &[("authorization", &format!("Bearer {HUMAN}"))],
        None,
    )
    .await;
    assert_eq!(status, 200, "{elicitation}");
    assert_eq!(elicitation["status"], "pending", "{elicitation}");
    assert!(shifty.ran().is_empty());
    gateway.stop().await;
    assert_eq!(receiver.received().len(), 2, "delivered once");
    let _ = std::fs::remove_dir_all(&dir);
}

/// On PostgreSQL a notice outlives the instance that was delivering it: killed after a
/// failed attempt, its notification is delivered by another instance, same delivery id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_killed_with_a_notification_undelivered_leaves_it_to_another() {
    let db = TestDb::new().await;
    let dir = std::env::temp_dir().join(format!("mcp-e2e-notify-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let receiver = Receiver::start(&dir, &[503]).await;
    let shifty = Shifty::start(&dir, "notes", "stdio", write_tool(), "").await;
    let modules = format!("{}\n{}", shifty.module, notify_section(&receiver));
    let config = config(&dir, &postgres_store(&db), &modules);
    let one = notifying_gateway(&config).await;
    let id = held_id(&modern_call(&one.base, "notes__write", json!({"path": "/a"}), None).await);
    let first = receiver.until(1, 30).await;
    one.kill().await;

    let other = notifying_gateway(&config).await;
    // Due again after its back-off, or, had the kill come before the attempt was settled,
    // once the dead instance's claim lapses.
    let got = receiver.until(2, 120).await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[1]["verified"], true);
    assert_eq!(got[1]["body"]["id"], id);
    assert_eq!(got[1]["body"]["delivery"], first[0]["body"]["delivery"]);
    assert_eq!(got[1]["status"], 200);
    other.stop().await;
    assert_eq!(receiver.received().len(), 2, "delivered once");
    let _ = std::fs::remove_dir_all(&dir);
}
