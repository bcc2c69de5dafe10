use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use elicitation_store::{
    Approval, ApprovalMode, Caller, ConfirmationRequest, ManualClock, MemoryLimits, MemoryStore,
};
use gating_core::CallDigest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// One request a receiver got: its headers (lower-case names) and body.
#[derive(Debug, Clone)]
struct Got {
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl Got {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A webhook receiver on loopback: answers each request with the next scripted status
/// (then 200), and keeps what it got.
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<Got>>>,
}

impl Receiver {
    async fn start(statuses: &[u16]) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let got: Arc<Mutex<Vec<Got>>> = Arc::default();
        let statuses = Arc::new(Mutex::new(
            statuses.iter().copied().collect::<VecDeque<_>>(),
        ));
        let kept = got.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let kept = kept.clone();
                let statuses = statuses.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let head_end = loop {
                        let n = stream.read(&mut chunk).await.unwrap();
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break at + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                    let headers: HashMap<String, String> = head
                        .lines()
                        .skip(1)
                        .filter_map(|l| l.split_once(':'))
                        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
                        .collect();
                    let length: usize = headers
                        .get("content-length")
                        .and_then(|l| l.parse().ok())
                        .unwrap_or(0);
                    while buf.len() < head_end + length {
                        let n = stream.read(&mut chunk).await.unwrap();
                        if n == 0 {
                            break;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    let body = buf[head_end..head_end + length].to_vec();
                    kept.lock().unwrap().push(Got { headers, body });
                    let status = statuses.lock().unwrap().pop_front().unwrap_or(200);
                    let response = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                });
            }
        });
        Receiver { url, got }
    }

    fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }
}

const SECRET: &[u8] = b"whsec-test";

fn alice() -> Caller {
    Caller::new("alice", Some("acme".into())).unwrap()
}

fn hook(url: &str, include_arguments: bool, filter: Filter) -> Sink {
    Sink {
        name: "hook".into(),
        filter,
        kind: SinkKind::Webhook(Webhook {
            url: url.to_owned(),
            secret: SECRET.to_vec(),
            include_arguments,
        }),
    }
}

fn waiting() -> Filter {
    Filter {
        tools: Vec::new(),
        groups: Vec::new(),
        events: vec![NoticeEvent::Waiting],
        after: None,
    }
}

struct Scene {
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
    notifier: Notifier,
    metrics: Arc<Metrics>,
}

fn scene(sinks: Vec<Sink>) -> Scene {
    let clock = Arc::new(ManualClock::new(OffsetDateTime::now_utc()));
    let store = Arc::new(
        MemoryStore::new(clock.clone(), MemoryLimits::default()).notify_on(&events_of(&sinks)),
    );
    let metrics = Arc::new(Metrics::new());
    let notifier = Notifier::new(
        store.clone(),
        sinks,
        "https://gateway.example.com/",
        clock.clone(),
        metrics.clone(),
    )
    .unwrap();
    Scene {
        store,
        clock,
        notifier,
        metrics,
    }
}

async fn hold(
    store: &MemoryStore,
    tool: &str,
    arguments: Value,
    approval: Option<Approval>,
) -> elicitation_core::ElicitationId {
    let request = ConfirmationRequest::new(
        tool.to_owned(),
        CallDigest::of(&json!({"name": tool})),
        arguments,
        gating_core::confirmation_prompt(
            tool,
            gating_core::HoldReason::Destructive { declared: true },
            &gating_core::Surfaces::gateway(),
        ),
        time::Duration::minutes(10),
    )
    .with_approval(approval);
    elicitation_store::ElicitationStore::create_confirmation(store, &alice(), request)
        .await
        .unwrap()
        .elicitation
        .id
}

#[test]
fn the_signature_is_hmac_sha256_of_the_time_a_dot_and_the_body() {
    // Computed independently: python3 -c "import hmac,hashlib;
    // print(hmac.new(b'whsec-test', b'1700000000.{\"a\":1}', hashlib.sha256).hexdigest())"
    assert_eq!(
        signature(SECRET, 1_700_000_000, br#"{"a":1}"#),
        "t=1700000000,v1=fed7a1a6c799a6367d73724d76bc70c16678908a32a879cd1ded6565ac05cece"
    );
}

#[tokio::test]
async fn a_held_call_is_posted_signed_without_its_arguments_and_a_5xx_is_retried_with_the_same_delivery()
 {
    let receiver = Receiver::start(&[503]).await;
    let s = scene(vec![hook(&receiver.url, false, waiting())]);
    let id = hold(
        &s.store,
        "fs__write_file",
        json!({"path": "/etc/passwd", "content": "secret-value"}),
        None,
    )
    .await;

    assert_eq!(s.notifier.tick().await.unwrap(), 1);
    let first = receiver.got();
    assert_eq!(first.len(), 1, "one attempt");
    // Not due again before its back-off.
    assert_eq!(s.notifier.tick().await.unwrap(), 0);
    s.clock.advance(time::Duration::seconds(2));
    assert_eq!(s.notifier.tick().await.unwrap(), 1);
    let got = receiver.got();
    assert_eq!(got.len(), 2, "retried after the 503");
    for request in &got {
        let signed = &request.headers[SIGNATURE_HEADER];
        let t: i64 = signed
            .strip_prefix("t=")
            .and_then(|r| r.split(',').next())
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            signed,
            &signature(SECRET, t, &request.body),
            "signed over the exact body"
        );
        assert_eq!(request.headers["content-type"], "application/json");
    }
    let (a, b) = (got[0].json(), got[1].json());
    assert_eq!(
        a["delivery"], b["delivery"],
        "the same delivery id on a retry"
    );
    assert_eq!(a["event"], "elicitation.waiting");
    assert_eq!(a["id"], id.to_string());
    assert_eq!(a["caller"], "alice");
    assert_eq!(a["tenant"], "acme");
    assert_eq!(a["tool"], "fs__write_file");
    assert_eq!(a["type"], "confirmation");
    assert!(
        a["message"].as_str().unwrap().contains("fs__write_file"),
        "{a}"
    );
    assert_eq!(
        a["url"],
        format!("https://gateway.example.com/approvals/e/{id}")
    );
    assert!(a["expires_at"].is_string() && a["at"].is_string(), "{a}");
    assert!(a.get("arguments").is_none(), "no arguments by default: {a}");
    let raw = String::from_utf8_lossy(&got[0].body).to_string();
    assert!(!raw.contains("secret-value"), "{raw}");
    // Delivered: nothing more to send.
    s.clock.advance(time::Duration::seconds(120));
    assert_eq!(s.notifier.tick().await.unwrap(), 0);
    assert_eq!(receiver.got().len(), 2);
    let text = s.metrics.render(mcp_metrics::Live {
        sessions: 0,
        streams: 0,
        body_bytes: 0,
        modules: &[],
        quarantined: &HashMap::new(),
        trace_spans_dropped: 0,
        trace_spans_failed: 0,
    });
    assert!(
        text.contains(r#"mcp_gateway_notifications_total{sink="hook",outcome="delivered"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"mcp_gateway_notifications_total{sink="hook",outcome="retried"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn arguments_go_only_to_a_sink_that_asks_for_them() {
    let receiver = Receiver::start(&[]).await;
    let s = scene(vec![hook(&receiver.url, true, waiting())]);
    hold(&s.store, "fs__write_file", json!({"path": "/tmp/a"}), None).await;
    s.notifier.tick().await.unwrap();
    assert_eq!(
        receiver.got()[0].json()["arguments"],
        json!({"path": "/tmp/a"})
    );
}

#[tokio::test]
async fn a_refusing_receiver_is_not_retried_and_an_answered_call_is_not_announced() {
    let receiver = Receiver::start(&[400]).await;
    let s = scene(vec![hook(&receiver.url, false, waiting())]);
    hold(&s.store, "fs__write_file", json!({}), None).await;
    s.notifier.tick().await.unwrap();
    s.clock.advance(time::Duration::seconds(120));
    assert_eq!(s.notifier.tick().await.unwrap(), 0, "a 400 is not retried");
    assert_eq!(receiver.got().len(), 1);

    // Answered before the notifier looked: nothing to say it waits.
    let answered = hold(&s.store, "fs__delete", json!({}), None).await;
    elicitation_store::ElicitationStore::respond(
        &*s.store,
        &alice(),
        answered,
        json!({"confirmed": true}),
    )
    .await
    .unwrap();
    assert_eq!(s.notifier.tick().await.unwrap(), 1);
    assert_eq!(
        receiver.got().len(),
        1,
        "no notification for an answered call"
    );
}

#[tokio::test]
async fn a_receiver_that_stays_down_is_given_up_once_the_call_stops_waiting() {
    // Nothing listens on this port.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let s = scene(vec![hook(
        &format!("http://{closed}/hook"),
        false,
        waiting(),
    )]);
    hold(&s.store, "fs__write_file", json!({}), None).await;
    let mut attempts = 0;
    // The default TTL is minutes; the back-off doubles to a minute.
    for _ in 0..40 {
        attempts += s.notifier.tick().await.unwrap();
        s.clock.advance(time::Duration::seconds(61));
    }
    assert!(
        attempts >= 2 && attempts <= MAX_ATTEMPTS as usize,
        "{attempts}"
    );
    assert_eq!(s.notifier.tick().await.unwrap(), 0, "given up");
    let text = s.metrics.render(mcp_metrics::Live {
        sessions: 0,
        streams: 0,
        body_bytes: 0,
        modules: &[],
        quarantined: &HashMap::new(),
        trace_spans_dropped: 0,
        trace_spans_failed: 0,
    });
    assert!(
        text.contains(r#"mcp_gateway_notifications_total{sink="hook",outcome="failed"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn filters_pick_tools_by_name_or_prefix_groups_and_events() {
    let receiver = Receiver::start(&[]).await;
    let by_prefix = Filter {
        tools: vec!["db__*".into(), "fs__delete".into()],
        ..waiting()
    };
    let by_group = Filter {
        groups: vec!["sre".into()],
        ..waiting()
    };
    let answered = Filter {
        events: vec![NoticeEvent::Answered],
        ..waiting()
    };
    let mut sinks = vec![
        hook(&receiver.url, false, by_prefix),
        hook(&receiver.url, false, by_group),
        hook(&receiver.url, false, answered),
    ];
    for (sink, name) in sinks.iter_mut().zip(["prefix", "group", "answered"]) {
        sink.name = name.into();
    }
    let s = scene(sinks);
    let sre = Some(Approval::of_group("sre", ApprovalMode::May));
    hold(&s.store, "db__drop", json!({}), None).await;
    hold(&s.store, "fs__delete", json!({}), sre).await;
    let quiet = hold(&s.store, "fs__write_file", json!({}), None).await;
    s.notifier.tick().await.unwrap();
    let mut told: Vec<(String, String)> = receiver
        .got()
        .iter()
        .map(|g| {
            let b = g.json();
            (
                b["tool"].as_str().unwrap().to_owned(),
                b["event"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    told.sort();
    assert_eq!(
        told,
        [
            ("db__drop".to_owned(), "elicitation.waiting".to_owned()),
            ("fs__delete".to_owned(), "elicitation.waiting".to_owned()),
            ("fs__delete".to_owned(), "elicitation.waiting".to_owned()),
        ],
        "by prefix: db__drop and fs__delete; by group: fs__delete"
    );
    elicitation_store::ElicitationStore::respond(
        &*s.store,
        &alice(),
        quiet,
        json!({"confirmed": false}),
    )
    .await
    .unwrap();
    s.notifier.tick().await.unwrap();
    let last = receiver.got().last().unwrap().json();
    assert_eq!(last["event"], "elicitation.answered");
    assert_eq!(last["tool"], "fs__write_file");
    assert_eq!(receiver.got().len(), 4);
}

const SLACK_SECRET: &[u8] = b"slack-signing-secret-0123";

fn slack_actions() -> SlackActions {
    let users = [(
        "U024BE7LH".to_owned(),
        SlackUser {
            subject: "alice".into(),
            tenant: None,
            groups: vec!["sre".into()],
        },
    )]
    .into_iter()
    .collect();
    SlackActions::new(SLACK_SECRET, users, true)
}

/// Slack's form body for a click of `value` by `user`.
fn click(user: &str, value: &str) -> Vec<u8> {
    let payload = json!({"type": "block_actions", "user": {"id": user},
                         "actions": [{"action_id": "approve", "value": value}]});
    let encoded: String = payload
        .to_string()
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

#[test]
fn the_slack_signature_is_v0_hmac_sha256_of_the_version_timestamp_and_body() {
    // python3 -c "import hmac,hashlib; print(hmac.new(b'slack-signing-secret-0123',
    //   b'v0:1700000000:payload=%7B%22a%22%3A1%7D', hashlib.sha256).hexdigest())"
    assert_eq!(
        slack_signature(SLACK_SECRET, "1700000000", b"payload=%7B%22a%22%3A1%7D"),
        "v0=f409135c49de0a35c34f82cd3f9e293e02d6d219ab6262e445a8d5842df10cb9"
    );
}

#[test]
fn a_signed_click_of_a_mapped_user_is_an_answer_and_anything_else_is_refused() {
    let actions = slack_actions();
    let now = OffsetDateTime::now_utc();
    let ts = now.unix_timestamp().to_string();
    let body = click("U024BE7LH", "approve:01a23ae4-a31a-7042-91b9-ed6303298fec");
    let signed = slack_signature(SLACK_SECRET, &ts, &body);
    let action = actions
        .verify(Some(&ts), Some(&signed), &body, now)
        .unwrap();
    assert_eq!(action.user.subject, "alice");
    assert_eq!(action.user.groups, ["sre"]);
    assert!(action.approve);
    assert_eq!(action.elicitation, "01a23ae4-a31a-7042-91b9-ed6303298fec");
    // The same request again: used once.
    assert_eq!(
        actions.verify(Some(&ts), Some(&signed), &body, now),
        Err(SlackRefusal::Replayed)
    );
    // Nor spelled another way: the hex in capitals, or with a sign.
    let shouted = format!("v0={}", signed["v0=".len()..].to_ascii_uppercase());
    assert_eq!(
        actions.verify(Some(&ts), Some(&shouted), &body, now),
        Err(SlackRefusal::Replayed),
        "a case variant of a captured click is the same click"
    );
    let mixed: String = signed
        .char_indices()
        .map(|(i, c)| {
            if i % 2 == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect();
    assert_eq!(
        actions.verify(
            Some(&ts),
            Some(&mixed.replacen("V0=", "v0=", 1)),
            &body,
            now
        ),
        Err(SlackRefusal::Replayed)
    );
    let signed_plus = format!("v0=+{}", &signed["v0=".len() + 1..]);
    assert!(matches!(
        actions.verify(Some(&ts), Some(&signed_plus), &body, now),
        Err(SlackRefusal::Unsigned(_))
    ));
    // Unsigned, wrongly signed, signed over other bytes, or stale: not Slack's.
    let other = click("U024BE7LH", "decline:01a23ae4-a31a-7042-91b9-ed6303298fec");
    let stale_ts = (now.unix_timestamp() - MAX_SKEW_SECONDS - 1).to_string();
    let stale = slack_signature(SLACK_SECRET, &stale_ts, &other);
    let forged = slack_signature(b"another-secret-entirely", &ts, &other);
    for (ts, signature) in [
        (None, None),
        (Some(ts.as_str()), None),
        (Some(ts.as_str()), Some(forged.as_str())),
        (Some(ts.as_str()), Some(signed.as_str())),
        (Some(stale_ts.as_str()), Some(stale.as_str())),
        (Some("soon"), Some(signed.as_str())),
    ] {
        assert!(
            matches!(
                actions.verify(ts, signature, &other, now),
                Err(SlackRefusal::Unsigned(_))
            ),
            "{ts:?} {signature:?}"
        );
    }
    // Signed, by a user nobody mapped: answers nothing.
    let stranger = click("U0STRANGER", "approve:01a23ae4-a31a-7042-91b9-ed6303298fec");
    let signed = slack_signature(SLACK_SECRET, &ts, &stranger);
    assert_eq!(
        actions.verify(Some(&ts), Some(&signed), &stranger, now),
        Err(SlackRefusal::Unmapped("U0STRANGER".into()))
    );
    // The Open button's click, signed: nothing to answer.
    let open = click("U024BE7LH", "");
    let signed = slack_signature(SLACK_SECRET, &ts, &open);
    assert_eq!(
        actions.verify(Some(&ts), Some(&signed), &open, now),
        Err(SlackRefusal::NotAnAnswer)
    );
}

/// Genuine clicks that fill the replay set do not lock out the next one: it is still
/// answered (the set forgets the entry that stops mattering soonest).
#[test]
fn a_full_replay_set_never_refuses_a_fresh_signed_click() {
    let actions = slack_actions();
    let now = OffsetDateTime::now_utc();
    let ts = now.unix_timestamp().to_string();
    for n in 0..super::slack::SEEN_CAP {
        let body = click("U024BE7LH", &format!("decline:{n}"));
        let signed = slack_signature(SLACK_SECRET, &ts, &body);
        assert!(actions.verify(Some(&ts), Some(&signed), &body, now).is_ok());
    }
    let body = click("U024BE7LH", "approve:01a23ae4-a31a-7042-91b9-ed6303298fec");
    let signed = slack_signature(SLACK_SECRET, &ts, &body);
    assert!(actions.verify(Some(&ts), Some(&signed), &body, now).is_ok());
    assert_eq!(
        actions.verify(Some(&ts), Some(&signed), &body, now),
        Err(SlackRefusal::Replayed)
    );
}

#[test]
fn a_slack_message_shows_everything_as_plain_text_and_buttons_only_for_a_waiting_confirmation() {
    let event = json!({"event": "elicitation.waiting", "id": "e1", "caller": "alice",
        "tool": "fs__write_file", "type": "confirmation",
        "message": "<!channel> *bold* <https://evil.example|click> Arguments: {\"path\":\"/a\"}",
        "arguments": {"path": "/a"},
        "expires_at": "2099-01-01T00:00:00Z", "url": "https://gw.example/approvals/e/e1"});
    let now = OffsetDateTime::now_utc();
    let message = slack_message(&event, true, now);
    let text = message.to_string();
    assert!(!text.contains("mrkdwn"), "{text}");
    let blocks = message["blocks"].as_array().unwrap();
    assert_eq!(blocks[1]["text"]["type"], "plain_text");
    assert_eq!(
        blocks[1]["text"]["text"],
        "<!channel> *bold* <https://evil.example|click> Arguments: {\"path\":\"/a\"}"
    );
    let actions = blocks[3]["elements"].as_array().unwrap();
    let values: Vec<&str> = actions.iter().filter_map(|a| a["value"].as_str()).collect();
    assert_eq!(values, ["approve:e1", "decline:e1"]);
    assert_eq!(actions[0]["url"], "https://gw.example/approvals/e/e1");
    // Without a signing secret, or once answered: the link alone.
    assert_eq!(
        slack_message(&event, false, now)["blocks"][3]["elements"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let mut answered = event.clone();
    answered["event"] = json!("elicitation.answered");
    assert_eq!(
        slack_message(&answered, true, now)["blocks"][3]["elements"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

/// Issue 44, item 5: Slack approved blind — its message leaves the arguments out, yet its
/// Approve button approved. A message that does not show everything (no arguments sent, or
/// too long for a section) has no Approve (the person approves on the page); Decline stays;
/// and a verifier for such a sink takes no Approve click, even from a message posted before.
#[test]
fn slack_approves_only_what_its_message_shows() {
    let now = OffsetDateTime::now_utc();
    let values = |event: &Value| -> Vec<String> {
        slack_message(event, true, now)["blocks"][3]["elements"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a["value"].as_str().map(str::to_owned))
            .collect()
    };
    let blind = json!({"event": "elicitation.waiting", "id": "e1", "caller": "alice",
        "tool": "fs__delete", "type": "confirmation",
        "message": "fs__delete wants to run (its arguments are not shown here)",
        "expires_at": "2099-01-01T00:00:00Z", "url": "https://gw.example/approvals/e/e1"});
    assert_eq!(values(&blind), ["decline:e1"]);
    let context = slack_message(&blind, true, now)["blocks"][2].to_string();
    assert!(context.contains("approve on the page"), "{context}");
    let mut long = blind.clone();
    long["arguments"] = json!({"content": "x".repeat(3000)});
    long["message"] = json!(format!(
        "Run it? Arguments: {{\"content\":\"{}\"}}",
        "x".repeat(3000)
    ));
    assert_eq!(
        values(&long),
        ["decline:e1"],
        "cut short: not everything shown"
    );
    let mut shown = blind.clone();
    shown["arguments"] = json!({"path": "/a"});
    shown["message"] = json!("fs__delete wants to run. Arguments: {\"path\":\"/a\"}");
    assert_eq!(values(&shown), ["approve:e1", "decline:e1"]);
    // Who must confirm may follow the arguments.
    let mut group = shown.clone();
    group["message"] = json!(
        "fs__delete wants to run. Arguments: {\"path\":\"/a\"} A member of the approver group \"sre\" must confirm it."
    );
    assert_eq!(values(&group), ["approve:e1", "decline:e1"]);
    // Arguments sent, but a message that does not show them all (too long to show).
    let mut hidden = shown.clone();
    hidden["message"] = json!(
        "fs__delete wants to run. Its arguments are too long to show here (90000 characters): review them in the gateway's list of pending confirmations (GET /v1/mcp/elicitations) before answering."
    );
    assert_eq!(values(&hidden), ["decline:e1"]);
    assert_eq!(values(&shown), ["approve:e1", "decline:e1"]);
    // A question of a service (no call): its message is all there is.
    let mut question = blind.clone();
    question["tool"] = Value::Null;
    question["message"] = json!("Deploy to production?");
    assert_eq!(values(&question), ["approve:e1", "decline:e1"]);

    let users = [(
        "U024BE7LH".to_owned(),
        SlackUser {
            subject: "alice".into(),
            tenant: None,
            groups: Vec::new(),
        },
    )]
    .into_iter()
    .collect();
    let actions = SlackActions::new(SLACK_SECRET, users, false);
    let ts = now.unix_timestamp().to_string();
    let approve = click("U024BE7LH", "approve:01a23ae4-a31a-7042-91b9-ed6303298fec");
    let signed = slack_signature(SLACK_SECRET, &ts, &approve);
    assert_eq!(
        actions.verify(Some(&ts), Some(&signed), &approve, now),
        Err(SlackRefusal::ApproveOnThePage)
    );
    let decline = click("U024BE7LH", "decline:01a23ae4-a31a-7042-91b9-ed6303298fec");
    let signed = slack_signature(SLACK_SECRET, &ts, &decline);
    let action = actions
        .verify(Some(&ts), Some(&signed), &decline, now)
        .unwrap();
    assert!(!action.approve);
}

#[tokio::test]
async fn a_held_call_is_told_with_what_changed_since_the_last_approved_one() {
    let names_only = Receiver::start(&[]).await;
    let with_values = Receiver::start(&[]).await;
    let s = scene(vec![
        hook(&names_only.url, false, waiting()),
        Sink {
            name: "values".into(),
            ..hook(&with_values.url, true, waiting())
        },
    ]);
    // Nothing approved yet: nothing to compare with.
    let first = hold(
        &s.store,
        "fs__write_file",
        json!({"path": "/srv/a", "content": "secret-one"}),
        None,
    )
    .await;
    s.notifier.tick().await.unwrap();
    assert!(
        names_only.got()[0]
            .json()
            .get("since_last_approved")
            .is_none()
    );
    elicitation_store::ElicitationStore::respond(
        &*s.store,
        &alice(),
        first,
        json!({"confirmed": true}),
    )
    .await
    .unwrap();
    s.notifier.tick().await.unwrap();
    hold(
        &s.store,
        "fs__write_file",
        json!({"path": "/srv/a", "content": "secret-two", "mode": "append"}),
        None,
    )
    .await;
    s.notifier.tick().await.unwrap();
    let told = names_only.got().last().unwrap().json();
    let since = &told["since_last_approved"];
    assert_eq!(since["changed_count"], 2, "{told}");
    assert!(
        since.get("changed").is_none(),
        "the agent's keys only where arguments go: {told}"
    );
    assert!(since["approved_at"].is_string(), "{told}");
    assert!(!told.to_string().contains("secret-"), "{told}");
    assert_eq!(
        crate::since::since_line(&told).unwrap(),
        format!(
            "2 arguments changed since the last call of this tool a person approved ({}).",
            since["approved_at"].as_str().unwrap()
        )
    );
    let told = with_values.got().last().unwrap().json();
    assert_eq!(
        told["since_last_approved"]["changed"],
        json!(["content", "mode"]),
        "{told}"
    );
    assert_eq!(
        told["since_last_approved"]["before"],
        json!({"content": "secret-one", "mode": null}),
        "{told}"
    );
    // As a person reads it, in Slack and e-mail.
    assert_eq!(
        crate::since::since_line(&told).unwrap(),
        format!(
            "Changed since the last call of this tool a person approved ({}): content, mode.",
            since["approved_at"].as_str().unwrap()
        )
    );
    let slack = crate::slack::slack_message(&told, true, time::OffsetDateTime::now_utc());
    let shown = slack["blocks"].to_string();
    assert!(
        shown.contains("content, mode") && shown.contains("content was: \\\"secret-one\\\""),
        "{shown}"
    );
}

#[tokio::test]
async fn a_sink_told_after_a_while_hears_only_of_what_still_waits_then() {
    let now_hook = Receiver::start(&[]).await;
    let later_hook = Receiver::start(&[]).await;
    let s = scene(vec![
        hook(&now_hook.url, false, waiting()),
        Sink {
            name: "escalate".into(),
            filter: Filter {
                after: Some(std::time::Duration::from_secs(5 * 60)),
                ..waiting()
            },
            ..hook(&later_hook.url, false, waiting())
        },
    ]);
    let still = hold(&s.store, "fs__delete", json!({"path": "/a"}), None).await;
    let answered = hold(&s.store, "fs__delete", json!({"path": "/b"}), None).await;
    s.notifier.tick().await.unwrap();
    assert_eq!(now_hook.got().len(), 2, "both at once to the first sink");
    assert!(
        later_hook.got().is_empty(),
        "nothing yet to the one told later"
    );
    // One is answered within five minutes; the other still waits then (both expire in ten).
    elicitation_store::ElicitationStore::respond(
        &*s.store,
        &alice(),
        answered,
        json!({"confirmed": false}),
    )
    .await
    .unwrap();
    s.clock.advance(time::Duration::minutes(4));
    s.notifier.tick().await.unwrap();
    assert!(later_hook.got().is_empty(), "not before its time");
    s.clock.advance(time::Duration::minutes(2));
    s.notifier.tick().await.unwrap();
    let got = later_hook.got();
    assert_eq!(got.len(), 1, "only what still waits: {:?}", got.len());
    let told = got[0].json();
    assert_eq!(told["id"], still.to_string(), "{told}");
    assert_eq!(told["waited_minutes"], 6, "{told}");
    assert_eq!(now_hook.got().len(), 2, "the first sink is not told again");
    let slack = crate::slack::slack_message(&told, false, time::OffsetDateTime::now_utc());
    assert!(
        slack["blocks"][0]
            .to_string()
            .contains("Still waiting after 6 min: fs__delete"),
        "{slack}"
    );
    // Nothing more comes once it has been told.
    s.clock.advance(time::Duration::minutes(2));
    s.notifier.tick().await.unwrap();
    assert_eq!(later_hook.got().len(), 1);
}

/// Issue 50, item 2, per approver rule: a call held under a rule with `remind_after` and
/// `escalate_after` is told again to the people told at once, then to the sinks of the group
/// escalated to (another group's sink hears nothing), each once, each audited; one answered
/// before its time is chased no further. The injected clock stands for the slow human.
#[tokio::test]
async fn an_approver_rules_reminder_then_escalation_reach_their_sinks_once_and_are_audited() {
    let team = Receiver::start(&[]).await;
    let leads = Receiver::start(&[]).await;
    let others = Receiver::start(&[]).await;
    let of_group = |name: &str, url: &str, group: &str| Sink {
        name: name.into(),
        ..hook(
            url,
            false,
            Filter {
                groups: vec![group.into()],
                ..waiting()
            },
        )
    };
    let s = scene(vec![
        of_group("team", &team.url, "sre"),
        of_group("leads", &leads.url, "sre-leads"),
        of_group("dba", &others.url, "dba"),
    ]);
    let notifier = s.notifier.with_routes(vec![Route {
        tools: "fs__*".into(),
        remind_after: Some(std::time::Duration::from_secs(3 * 60)),
        escalate_after: Some(std::time::Duration::from_secs(6 * 60)),
        escalate_to: vec!["sre-leads".into()],
    }]);
    let sre = Some(Approval::of_group("sre", ApprovalMode::Must));
    let still = hold(&s.store, "fs__delete", json!({"path": "/a"}), sre.clone()).await;
    let answered = hold(&s.store, "fs__delete", json!({"path": "/b"}), sre).await;
    notifier.tick().await.unwrap();
    assert_eq!(team.got().len(), 2, "both at once to the group's sink");
    assert!(leads.got().is_empty() && others.got().is_empty());
    elicitation_store::ElicitationStore::approver_respond(
        &*s.store,
        &elicitation_store::Approver::new(
            Caller::new("bob", Some("acme".into())).unwrap(),
            vec!["sre".into()],
        ),
        answered,
        json!({"confirmed": true}),
        None,
    )
    .await
    .unwrap();

    s.clock.advance(time::Duration::minutes(2));
    notifier.tick().await.unwrap();
    assert_eq!(team.got().len(), 2, "no reminder before its time");
    s.clock.advance(time::Duration::minutes(2));
    notifier.tick().await.unwrap();
    let got = team.got();
    assert_eq!(got.len(), 3, "a reminder of what still waits only");
    let reminder = got[2].json();
    assert_eq!(
        (
            &reminder["id"],
            &reminder["step"],
            &reminder["waited_minutes"]
        ),
        (&json!(still.to_string()), &json!("reminder"), &json!(4)),
        "{reminder}"
    );
    assert!(leads.got().is_empty(), "no escalation before its time");

    s.clock.advance(time::Duration::minutes(3));
    notifier.tick().await.unwrap();
    let got = leads.got();
    assert_eq!(got.len(), 1);
    let escalated = got[0].json();
    assert_eq!(escalated["step"], "escalation", "{escalated}");
    assert_eq!(
        escalated["escalated_to"],
        json!(["sre-leads"]),
        "{escalated}"
    );
    let slack = crate::slack::slack_message(&escalated, false, time::OffsetDateTime::now_utc());
    assert!(
        slack["blocks"][0]
            .to_string()
            .contains("Escalated to you, unanswered after 7 min: fs__delete"),
        "{slack}"
    );
    // Each once; the other group's sink never.
    s.clock.advance(time::Duration::minutes(1));
    notifier.tick().await.unwrap();
    assert_eq!((team.got().len(), leads.got().len()), (3, 1));
    assert!(others.got().is_empty());

    let trail = elicitation_store::AuditSink::audit_events(
        &*s.store,
        &alice(),
        &elicitation_store::AuditQuery {
            limit: 100,
            ..elicitation_store::AuditQuery::default()
        },
    )
    .await
    .unwrap()
    .entries;
    let steps: Vec<(&str, &Value)> = trail
        .iter()
        .filter(|e| e.event == "elicitation_reminded" || e.event == "elicitation_escalated")
        .map(|e| (e.event.as_str(), &e.detail))
        .collect();
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert!(
        steps
            .iter()
            .any(|(e, d)| *e == "elicitation_reminded" && d["sinks"] == json!(["team"])),
        "{steps:?}"
    );
    assert!(
        steps.iter().any(|(e, d)| *e == "elicitation_escalated"
            && d["sinks"] == json!(["leads"])
            && d["to"] == json!(["sre-leads"])),
        "{steps:?}"
    );
}
