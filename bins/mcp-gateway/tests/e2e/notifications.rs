//! Notifications end to end: the real binary, a real module, and a webhook receiver written
//! apart from the gateway (`tests/fixtures/webhook_receiver.py`, which checks each
//! signature with its own HMAC).

use super::tool_changes::{AUDITOR, Shifty, config};
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
        let mut command = Command::new("python3");
        command
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/webhook_receiver.py"
            ))
            .arg(SECRET)
            .arg(&log)
            .args(statuses.iter().map(u16::to_string));
        let (child, port) = listening(command, "the webhook receiver").await;
        Receiver {
            _child: child,
            url: format!("http://127.0.0.1:{port}/hook"),
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

pub(crate) fn write_tool() -> Value {
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

/// `kind = "email"`: a held call is mailed, as plain text with the page link and without
/// its arguments, to a real SMTP server on loopback (aiosmtpd).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_is_mailed_to_the_person_without_its_arguments() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-notify-mail-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mailbox = dir.join("mail.jsonl");
    let mut sink = Command::new(env_or_panic("MCP_INTEROP_PYTHON"));
    sink.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/smtp_sink.py"
    ))
    .arg(&mailbox);
    let (_sink, port) = listening(sink, "the SMTP sink").await;
    let shifty = Shifty::start(&dir, "notes", "stdio", write_tool(), "").await;
    let mail = format!(
        "[[notify]]\nname = \"mail\"\nkind = \"email\"\nsmtp_host = \"127.0.0.1\"\nsmtp_port = {port}\ntls = \"none\"\nfrom = \"MCP Gateway <gateway@example.com>\"\nto = [\"alice@example.com\", \"oncall@example.com\"]\n"
    );
    let config = config(
        &dir,
        "[store]\nkind = \"memory\"",
        &format!("{}\n{mail}", shifty.module),
    );
    let gateway = Gateway::start(&config).await;
    let held = modern_call(
        &gateway.base,
        "notes__write",
        json!({"path": "/srv/secret-path-value"}),
        None,
    )
    .await;
    let id = held_id(&held);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mail: Value = loop {
        if let Some(line) = std::fs::read_to_string(&mailbox)
            .ok()
            .and_then(|t| t.lines().next().map(str::to_owned))
        {
            break serde_json::from_str(&line).unwrap();
        }
        assert!(tokio::time::Instant::now() < deadline, "no mail arrived");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(mail["from"], "gateway@example.com", "{mail}");
    assert_eq!(
        mail["to"],
        json!(["alice@example.com", "oncall@example.com"])
    );
    assert_eq!(
        mail["subject"],
        "[mcp-gateway] Waiting for you: notes__write"
    );
    assert_eq!(mail["content_type"], "text/plain");
    let body = mail["body"].as_str().unwrap();
    assert!(
        body.contains(&format!("{}/approvals/e/{id}", gateway.base)),
        "{body}"
    );
    assert!(body.contains("alice"), "{body}");
    assert!(!body.contains("secret-path-value"), "no arguments: {body}");
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

const SLACK_SECRET: &str = "e2e-slack-signing-secret-0123";

/// A click on a Slack button as Slack posts it: `payload` form-encoded, signed at `ts`.
fn slack_click(user: &str, value: &str) -> Vec<u8> {
    let payload = json!({"type": "block_actions", "user": {"id": user},
                         "actions": [{"action_id": "approve", "value": value}]})
    .to_string();
    let encoded: String = payload
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    format!("payload={encoded}").into_bytes()
}

async fn post_click(base: &str, ts: &str, signature: Option<&str>, body: &[u8]) -> u16 {
    let mut headers = vec![
        ("content-type", "application/x-www-form-urlencoded"),
        ("x-slack-request-timestamp", ts),
    ];
    if let Some(signature) = signature {
        headers.push(("x-slack-signature", signature));
    }
    let (status, _, _) = raw_with_headers(
        "POST",
        &format!("{base}/v1/notify/slack/actions"),
        &headers,
        Bytes::from(body.to_vec()),
    )
    .await;
    status
}

/// `kind = "slack"` with interactive answers: the held call reaches a fake Slack as a Block
/// Kit message with Approve and Decline; clicks posted to the actions endpoint answer only
/// when signed, fresh, first, and by a mapped person the four-eyes rule lets answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_approves_from_slack_and_nothing_else_posted_there_answers() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-notify-slack-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The fake Slack: takes the incoming-webhook posts (it has no signature to check).
    let slack = Receiver::start(&dir, &[]).await;
    let shifty = Shifty::start(&dir, "notes", "stdio", write_tool(), "").await;
    let section = "[[notify]]\nname = \"slack\"\nkind = \"slack\"\nwebhook_url_env = \"E2E_SLACK_WEBHOOK\"\nsigning_secret_env = \"E2E_SLACK_SIGNING\"\ninclude_arguments = true\n[notify.users.UALICE]\nsubject = \"alice\"\n[notify.users.UBOB]\nsubject = \"bob\"\ngroups = [\"sre\"]\n[[approvers]]\ntools = \"notes__*\"\ngroup = \"sre\"\nmode = \"four_eyes\"\n";
    let config = config(
        &dir,
        "[store]\nkind = \"memory\"",
        &format!("{}\n{section}", shifty.module),
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"));
    command
        .env("E2E_SLACK_WEBHOOK", &slack.url)
        .env("E2E_SLACK_SIGNING", SLACK_SECRET);
    let gateway = Gateway::start_with(&config, command).await;
    let base = gateway.base.clone();
    let id = held_id(&modern_call(&base, "notes__write", json!({"path": "/a"}), None).await);

    let posted = slack.until(1, 30).await;
    let message = &posted[0]["body"];
    let blocks = message["blocks"].to_string();
    assert!(blocks.contains(&format!("approve:{id}")), "{message}");
    assert!(blocks.contains(&format!("decline:{id}")), "{message}");
    assert!(blocks.contains(&format!("/approvals/e/{id}")), "{message}");
    assert!(blocks.contains("notes__write"), "{message}");
    // Approve is there because the person sees what they approve (include_arguments).
    assert!(blocks.contains("/a"), "{message}");

    let state = || async {
        let (_, _, e) = http(
            "GET",
            &format!("{base}/v1/mcp/elicitations/{id}"),
            &[("authorization", &format!("Bearer {HUMAN}"))],
            None,
        )
        .await;
        e
    };
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            .to_string()
    };
    let approve = slack_click("UBOB", &format!("approve:{id}"));
    // Unsigned, signed with another secret, stale, or by someone nobody mapped: nothing.
    let ts = now();
    assert_eq!(post_click(&base, &ts, None, &approve).await, 401);
    let forged = mcp_notify::slack_signature(b"not-the-signing-secret", &ts, &approve);
    assert_eq!(post_click(&base, &ts, Some(&forged), &approve).await, 401);
    let stale_ts = (ts.parse::<u64>().unwrap() - 600).to_string();
    let stale = mcp_notify::slack_signature(SLACK_SECRET.as_bytes(), &stale_ts, &approve);
    assert_eq!(
        post_click(&base, &stale_ts, Some(&stale), &approve).await,
        401
    );
    let stranger = slack_click("UMALLORY", &format!("approve:{id}"));
    let signed = mcp_notify::slack_signature(SLACK_SECRET.as_bytes(), &ts, &stranger);
    assert_eq!(post_click(&base, &ts, Some(&signed), &stranger).await, 403);
    // Alice's agent made the call: four eyes, she may not approve it, even from Slack.
    let own = slack_click("UALICE", &format!("approve:{id}"));
    let signed = mcp_notify::slack_signature(SLACK_SECRET.as_bytes(), &ts, &own);
    assert_ne!(post_click(&base, &ts, Some(&signed), &own).await, 200);
    assert_eq!(state().await["status"], "pending", "nothing answered yet");

    // Bob, in the group, signed and fresh: recorded as his.
    let signed = mcp_notify::slack_signature(SLACK_SECRET.as_bytes(), &ts, &approve);
    assert_eq!(post_click(&base, &ts, Some(&signed), &approve).await, 200);
    let answered = state().await;
    assert_eq!(answered["status"], "responded", "{answered}");
    assert_eq!(answered["response"]["confirmed"], true, "{answered}");
    assert_eq!(answered["answered_by"], "bob in Slack", "{answered}");
    // The same request again: used once.
    assert_eq!(post_click(&base, &ts, Some(&signed), &approve).await, 401);
    let ran = modern_call(&base, "notes__write", json!({"path": "/a"}), Some(&id)).await;
    assert_eq!(text(&ran), "ran write", "{ran}");
    assert_eq!(shifty.ran(), ["write"]);
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 50, item 2, one real run of the slow human: a call held under a rule with
/// `escalate_after = "1m"` nobody answers. The team's webhook is told at once; after a real
/// minute the leads' webhook and their Slack are told, marked as an escalation; the step is
/// in the audit trail. (The reminder's and the escalation's timing, and an answered call
/// not being chased, are tested with the injected clock in mcp-notify.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_call_is_escalated_to_the_leads_webhook_and_slack_after_a_real_minute() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-escalate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["team", "leads", "slack"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let team = Receiver::start(&dir.join("team"), &[]).await;
    let leads = Receiver::start(&dir.join("leads"), &[]).await;
    let slack = Receiver::start(&dir.join("slack"), &[]).await;
    let shifty = Shifty::start(&dir, "notes", "stdio", write_tool(), "").await;
    let hook = |name: &str, url: &str, group: &str| {
        format!(
            "[[notify]]\nname = \"{name}\"\nkind = \"webhook\"\nurl = \"{url}\"\nsecret_env = \"E2E_NOTIFY_SECRET\"\ngroups = [\"{group}\"]\n"
        )
    };
    let section = format!(
        "{}{}[[notify]]\nname = \"leads-slack\"\nkind = \"slack\"\nwebhook_url_env = \"E2E_SLACK_WEBHOOK\"\ngroups = [\"sre-leads\"]\n[[approvers]]\ntools = \"notes__*\"\ngroup = \"sre\"\nescalate_after = \"1m\"\nescalate_to = [\"sre-leads\"]\n",
        hook("team", &team.url, "sre"),
        hook("leads", &leads.url, "sre-leads"),
    );
    let config = config(
        &dir,
        "[store]\nkind = \"memory\"",
        &format!("{}\n{section}", shifty.module),
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"));
    command
        .env("E2E_NOTIFY_SECRET", SECRET)
        .env("E2E_SLACK_WEBHOOK", &slack.url);
    let gateway = Gateway::start_with(&config, command).await;
    let base = gateway.base.clone();
    let id = held_id(&modern_call(&base, "notes__write", json!({"path": "/a"}), None).await);

    let told = team.until(1, 30).await;
    assert_eq!(told[0]["body"]["id"], id, "{told:?}");
    assert!(told[0]["body"].get("step").is_none(), "{told:?}");
    assert!(
        leads.received().is_empty() && slack.received().is_empty(),
        "not before its time"
    );
    // A real minute, and the notifier's second of polling, then some.
    let escalated = leads.until(1, 100).await;
    let body = &escalated[0]["body"];
    assert_eq!(escalated[0]["verified"], true, "{escalated:?}");
    assert_eq!(
        (&body["id"], &body["step"], &body["escalated_to"]),
        (&json!(id), &json!("escalation"), &json!(["sre-leads"])),
        "{body}"
    );
    assert!(body["waited_minutes"].as_i64().unwrap() >= 1, "{body}");
    let posted = slack.until(1, 30).await;
    let blocks = posted[0]["body"]["blocks"].to_string();
    assert!(
        blocks.contains("Escalated to you, unanswered after") && blocks.contains("notes__write"),
        "{blocks}"
    );
    assert_eq!(
        team.received().len(),
        1,
        "the team is not told again (no reminder)"
    );

    let (status, _, trail) = http(
        "GET",
        &format!("{base}/v1/audit?limit=100"),
        &[("authorization", &format!("Bearer {AUDITOR}"))],
        None,
    )
    .await;
    assert_eq!(status, 200, "{trail}");
    let steps: Vec<&Value> = trail["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "elicitation_escalated")
        .collect();
    assert_eq!(steps.len(), 1, "{trail}");
    assert_eq!(steps[0]["detail"]["to"], json!(["sre-leads"]), "{trail}");
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
