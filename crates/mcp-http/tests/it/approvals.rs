//! The approvals page, driven in process as a browser would (form posts, the cookie, the
//! form token): sign-in, a held call shown and approved or declined, questions of each type,
//! hostile text shown as text, cross-site and stale posts refused, sign-out.

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use elicitation_core::{ElicitationSpec, ResponseSpec};
use elicitation_store::{Caller, ManualClock, MemoryStore, Store};
use gating_core::GatePolicy;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use mcp_auth::{Auth, SCOPE_CREATE, SCOPE_RESPOND, SCOPE_TOOLS_CALL, TokenGrant, token_sha256};
use mcp_gate::Gateway;
use mcp_http::service::{McpService, ServiceConfig};
use mcp_uploads::{Uploads, UploadsConfig};
use mcp_upstream::inproc::{InProcessModule, InProcessTool, text_result};
use mcp_upstream::registry::{ModuleSpec, Registry};
use serde_json::{Value, json};

const AGENT: &str = "agent-token";
const HUMAN: &str = "human-token";
/// Sam reads the audit trail and the insights (scope `audit:read` alone).
const AUDITOR: &str = "auditor-token";
/// A trusted backend service of alice's: asks her questions.
const SERVICE: &str = "service-token";

static UPLOAD_DIRS: AtomicUsize = AtomicUsize::new(0);

struct Harness {
    service: Arc<McpService>,
    store: Arc<dyn Store>,
    deleted: Arc<AtomicUsize>,
    /// The service's upload store, as a second handle on the same directory.
    uploads: Uploads,
    /// What the store and the service read the time from.
    clock: Arc<ManualClock>,
    /// The uploads directory the harness made (last: removed once the service is gone).
    made: Option<MadeDir>,
}

/// A directory a test made, removed with it (runs used to leave one per harness in /tmp).
struct MadeDir(std::path::PathBuf);

impl Drop for MadeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn harness() -> Harness {
    harness_with(Vec::new()).await
}

/// Bob: a person of the `sre` approver group. Alice in `sre` too (another of her tokens).
const BOB: &str = "bob-sre-token";
const ALICE_SRE: &str = "alice-sre-token";
/// Carol: in a group named `sre` too, but of tenant `t2`.
const CAROL_T2: &str = "carol-t2-sre-token";
/// Bob's second token (another device): the same person.
const BOB_AGAIN: &str = "bob-sre-second-token";
/// Dave: another person of `sre`.
const DAVE: &str = "dave-sre-token";
/// Erin: a person of `security` only.
const ERIN: &str = "erin-security-token";
/// Carol: in no approver group (of no tenant): answers only what is handed to her.
const CAROL: &str = "carol-token";

async fn harness_with(approvers: Vec<mcp_gate::ApproverRule>) -> Harness {
    let uploads = std::env::temp_dir().join(format!(
        "mcp-approvals-uploads-{}-{}",
        std::process::id(),
        UPLOAD_DIRS.fetch_add(1, Ordering::SeqCst)
    ));
    let mut h = harness_at(approvers, uploads.clone()).await;
    h.made = Some(MadeDir(uploads));
    h
}

/// A harness whose uploads are kept in `uploads`.
async fn harness_at(
    approvers: Vec<mcp_gate::ApproverRule>,
    uploads: std::path::PathBuf,
) -> Harness {
    let deleted = Arc::new(AtomicUsize::new(0));
    let counter = deleted.clone();
    let module = InProcessModule::new(
        "test",
        vec![InProcessTool::new(
            json!({"name": "delete", "description": "Deletes.", "inputSchema": {"type": "object"},
                   "annotations": {"readOnlyHint": false, "destructiveHint": true}}),
            move |_| {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(text_result("deleted", false))
            },
        )],
    );
    let registry = Registry::start(vec![ModuleSpec {
        isolation: None,
        name: "test".into(),
        prefix: "test".into(),
        trust_annotations: true,
        module: Arc::new(module),
    }])
    .await
    .unwrap();
    let clock = Arc::new(ManualClock::stopped_now());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(
        clock.clone(),
        elicitation_store::MemoryLimits::default(),
    ));
    let gateway = Arc::new(
        Gateway::new(registry, store.clone(), GatePolicy::default(), false)
            .with_approvers(approvers),
    );
    let grant = |token: &str, scopes: &[&str]| TokenGrant {
        subject: "alice".into(),
        tenant: None,
        token_sha256: token_sha256(token),
        scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        groups: Vec::new(),
    };
    let member = |subject: &str, token: &str| TokenGrant {
        subject: subject.into(),
        tenant: None,
        token_sha256: token_sha256(token),
        scopes: vec![SCOPE_RESPOND.into()],
        groups: vec!["sre".into()],
    };
    let auth = Auth::tokens(vec![
        grant(AGENT, &[SCOPE_TOOLS_CALL]),
        grant(HUMAN, &[SCOPE_RESPOND]),
        grant(SERVICE, &[SCOPE_CREATE]),
        TokenGrant {
            subject: "sam".into(),
            ..grant(AUDITOR, &[mcp_auth::SCOPE_AUDIT])
        },
        member("bob", BOB),
        member("bob", BOB_AGAIN),
        member("dave", DAVE),
        TokenGrant {
            groups: vec!["security".into()],
            ..member("erin", ERIN)
        },
        member("alice", ALICE_SRE),
        TokenGrant {
            groups: Vec::new(),
            ..member("carol", CAROL)
        },
        TokenGrant {
            tenant: Some("t2".into()),
            ..member("carol", CAROL_T2)
        },
    ])
    .unwrap();
    let uploads = UploadsConfig::dir(uploads);
    Harness {
        service: Arc::new(
            McpService::new(
                gateway,
                auth,
                ServiceConfig {
                    clock: clock.clone(),
                    ..ServiceConfig::default()
                },
            )
            .with_uploads(Uploads::open(&uploads).unwrap()),
        ),
        store,
        deleted,
        uploads: Uploads::open(&uploads).unwrap(),
        clock,
        made: None,
    }
}

#[derive(Debug)]
struct Page {
    status: StatusCode,
    headers: http::HeaderMap,
    body: String,
}

async fn send(h: &Harness, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Page {
    let mut request = Request::builder().method(method).uri(path);
    // Every HTTP/1.1 client sends Host: the gateway's own, unless the test says otherwise.
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request = request.header("host", "127.0.0.1:8080");
    }
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = h
        .service
        .handle(
            request
                .body(Full::new(Bytes::from(body.to_owned())))
                .unwrap(),
        )
        .await;
    let status = response.status();
    let headers = response.headers().clone();
    let body = String::from_utf8(
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    Page {
        status,
        headers,
        body,
    }
}

/// A browser: its cookie, and the form token of the last page it saw.
struct Browser<'a> {
    h: &'a Harness,
    cookie: String,
    csrf: String,
}

impl<'a> Browser<'a> {
    async fn sign_in(h: &'a Harness, token: &str) -> Result<Browser<'a>, Page> {
        let form = format!("token={token}");
        let page = send(
            h,
            "POST",
            "/approvals/sign-in",
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("origin", "http://127.0.0.1:8080"),
            ],
            &form,
        )
        .await;
        if page.status != StatusCode::SEE_OTHER {
            return Err(page);
        }
        let set = page.headers["set-cookie"].to_str().unwrap().to_owned();
        let cookie = set.split(';').next().unwrap().to_owned();
        let mut browser = Browser {
            h,
            cookie,
            csrf: String::new(),
        };
        browser.get().await;
        Ok(browser)
    }

    async fn get(&mut self) -> Page {
        let page = send(self.h, "GET", "/approvals", &[("cookie", &self.cookie)], "").await;
        if let Some(start) = page.body.find("name=\"csrf\" value=\"") {
            let rest = &page.body[start + 19..];
            self.csrf = rest[..rest.find('"').unwrap()].to_owned();
        }
        page
    }

    async fn post(&self, path: &str, fields: &str) -> Page {
        let form = format!("csrf={}&{fields}", self.csrf);
        send(
            self.h,
            "POST",
            path,
            &[
                ("cookie", &self.cookie),
                ("content-type", "application/x-www-form-urlencoded"),
                ("origin", "http://127.0.0.1:8080"),
            ],
            &form,
        )
        .await
    }
}

/// The agent's `tools/call` over a modern request: the result.
async fn agent_call(h: &Harness, arguments: Value, confirmation: Option<&str>) -> Value {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    if let Some(id) = confirmation {
        meta["confirmation_id"] = json!(id);
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "test__delete", "arguments": arguments, "_meta": meta}});
    let page = send(
        h,
        "POST",
        "/mcp",
        &[
            ("authorization", "Bearer agent-token"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "test__delete"),
            ("accept", "application/json"),
            ("content-type", "application/json"),
        ],
        &body.to_string(),
    )
    .await;
    serde_json::from_str::<Value>(&page.body).unwrap()["result"].clone()
}

fn held_id(result: &Value) -> String {
    result["structuredContent"]["elicitation"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("not held: {result}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_token_that_may_answer_signs_in_and_the_cookie_is_locked_down() {
    let h = harness().await;
    let first = send(&h, "GET", "/approvals", &[], "").await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(first.body.contains("Sign in"), "{}", first.body);
    assert!(
        first.headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("default-src 'none'")
    );
    assert_eq!(
        Browser::sign_in(&h, AGENT).await.err().unwrap().status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        Browser::sign_in(&h, "nope").await.err().unwrap().status,
        StatusCode::UNAUTHORIZED
    );
    let page = send(
        &h,
        "POST",
        "/approvals/sign-in",
        &[("content-type", "application/x-www-form-urlencoded")],
        &format!("token={HUMAN}"),
    )
    .await;
    let cookie = page.headers["set-cookie"].to_str().unwrap();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/approvals", "Max-Age="] {
        assert!(cookie.contains(flag), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP here: {cookie}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_is_shown_as_text_and_approve_lets_exactly_one_re_call_through() {
    let h = harness().await;
    let hostile = json!({"path": "<script>alert(1)</script>", "note": "<img src=x onerror=alert(2)>", "name": "\u{202e}fdp.exe"});
    let held = agent_call(&h, hostile.clone(), None).await;
    let id = held_id(&held);
    let mut browser = Browser::sign_in(&h, HUMAN).await.unwrap();
    let page = browser.get().await;
    assert!(
        page.body.contains(&format!("id=\"e-{id}\"")),
        "{}",
        page.body
    );
    assert!(page.body.contains("<code>test__delete</code>"));
    assert!(
        page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("<script>alert") && !page.body.contains("<img src=x"),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains('\u{202e}'),
        "bidi override shown escaped"
    );
    assert!(page.body.contains(">Approve</button>") && page.body.contains(">Decline</button>"));

    let approved = browser
        .post(&format!("/approvals/{id}/respond"), "decision=approve")
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    let done = agent_call(&h, hostile.clone(), Some(&id)).await;
    assert_eq!(done["content"][0]["text"], "deleted", "{done}");
    let again = agent_call(&h, hostile, Some(&id)).await;
    let anew = held_id(&again);
    assert_ne!(anew, id, "a used approval holds the call anew");
    assert_eq!(h.deleted.load(Ordering::SeqCst), 1, "forwarded once");
    let page = browser.get().await;
    let (waiting, lately) = page.body.split_once("Lately").unwrap();
    assert!(
        waiting.contains(&format!("id=\"e-{anew}\""))
            && !waiting.contains(&format!("id=\"e-{id}\"")),
        "{waiting}"
    );
    assert!(
        page.body.contains("<pre>{\n  &quot;path&quot;"),
        "arguments keep their lines: {waiting}"
    );
    assert!(lately.contains("approved"), "{lately}");
    // History says who answered, and where.
    assert!(lately.contains("alice on the approvals page"), "{lately}");
    let (_, read) = rest(
        &h,
        SERVICE,
        "GET",
        &format!("/v1/mcp/elicitations/{id}"),
        Value::Null,
    )
    .await;
    assert_eq!(read["answered_by"], "alice on the approvals page", "{read}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decline_rejects_the_call_and_posts_from_elsewhere_change_nothing() {
    let h = harness().await;
    let id = held_id(&agent_call(&h, json!({"path": "/x"}), None).await);
    let browser = Browser::sign_in(&h, HUMAN).await.unwrap();

    // No form token, a wrong one, another site's origin, no cookie: nothing changes.
    let path = format!("/approvals/{id}/respond");
    let without = send(
        &h,
        "POST",
        &path,
        &[
            ("cookie", &browser.cookie),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        "decision=approve",
    )
    .await;
    assert_eq!(without.status, StatusCode::FORBIDDEN);
    let wrong = send(
        &h,
        "POST",
        &path,
        &[
            ("cookie", &browser.cookie),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        "csrf=00&decision=approve",
    )
    .await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    let cross_site = send(
        &h,
        "POST",
        &path,
        &[
            ("cookie", &browser.cookie),
            ("origin", "http://evil.example.com"),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        &format!("csrf={}&decision=approve", browser.csrf),
    )
    .await;
    assert_eq!(cross_site.status, StatusCode::FORBIDDEN);
    let no_cookie = send(
        &h,
        "POST",
        &path,
        &[("content-type", "application/x-www-form-urlencoded")],
        &format!("csrf={}&decision=approve", browser.csrf),
    )
    .await;
    assert_eq!(no_cookie.status, StatusCode::UNAUTHORIZED);
    let still = h
        .store
        .get(&Caller::new("alice", None).unwrap(), id.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(still.elicitation.status.to_string(), "pending");

    let declined = browser.post(&path, "decision=decline").await;
    assert_eq!(declined.status, StatusCode::SEE_OTHER);
    let refused = agent_call(&h, json!({"path": "/x"}), Some(&id)).await;
    assert_eq!(
        refused["structuredContent"]["user_rejected"], true,
        "{refused}"
    );
    assert_eq!(h.deleted.load(Ordering::SeqCst), 0);

    // Signing out ends the session: its cookie opens nothing any more.
    let out = browser.post("/approvals/sign-out", "").await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert!(
        out.headers["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let after = send(&h, "GET", "/approvals", &[("cookie", &browser.cookie)], "").await;
    assert!(after.body.contains("Sign in"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_question_type_gets_its_control_and_an_invalid_answer_shows_the_error_and_tries_left()
{
    let h = harness().await;
    let alice = Caller::new("alice", None).unwrap();
    let ttl = time::Duration::minutes(5);
    let ask = |response: ResponseSpec| ElicitationSpec::new("Pick", response).unwrap();
    let text = h
        .store
        .create(
            &alice,
            ask(ResponseSpec::StringInput {
                min_length: Some(3),
                max_length: Some(5),
            }),
            ttl,
        )
        .await
        .unwrap();
    let one = h
        .store
        .create(
            &alice,
            ask(ResponseSpec::SingleChoice {
                options: vec!["red".into(), "<b>blue</b>".into()],
            }),
            ttl,
        )
        .await
        .unwrap();
    let many = h
        .store
        .create(
            &alice,
            ask(ResponseSpec::MultiChoice {
                options: vec!["a".into(), "b".into(), "c".into()],
                min_items: Some(1),
                max_items: Some(2),
            }),
            ttl,
        )
        .await
        .unwrap();
    let mut browser = Browser::sign_in(&h, HUMAN).await.unwrap();
    let page = browser.get().await;
    assert!(
        page.body.contains(&format!(
            "id=\"v-{}\" name=\"value\" type=\"text\" minlength=\"3\" maxlength=\"5\"",
            text.id
        )),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("type=\"radio\" name=\"choice\" value=\"&lt;b&gt;blue&lt;/b&gt;\""),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("type=\"checkbox\" name=\"choices\" value=\"a\"")
    );
    assert!(page.body.contains("Choose 1 to 2"));

    let short = browser
        .post(&format!("/approvals/{}/respond", text.id), "value=ab")
        .await;
    assert_eq!(short.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        short.body.contains("role=\"alert\"") && short.body.contains("2 tries left"),
        "{}",
        short.body
    );
    let ok = browser
        .post(&format!("/approvals/{}/respond", text.id), "value=abcd")
        .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER);
    let ok = browser
        .post(
            &format!("/approvals/{}/respond", one.id),
            "choice=%3Cb%3Eblue%3C%2Fb%3E",
        )
        .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER);
    let ok = browser
        .post(
            &format!("/approvals/{}/respond", many.id),
            "choices=a&choices=c",
        )
        .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER);
    let mut answers = Vec::new();
    for id in [text.id, one.id, many.id] {
        answers.push(
            h.store
                .get(&alice, id)
                .await
                .unwrap()
                .elicitation
                .response
                .unwrap(),
        );
    }
    assert_eq!(
        answers,
        [
            json!({"value": "abcd"}),
            json!({"choice": "<b>blue</b>"}),
            json!({"choices": ["a", "c"]})
        ]
    );

    // Cancel on any item.
    let gone = h
        .store
        .create(&alice, ask(ResponseSpec::Confirmation), ttl)
        .await
        .unwrap();
    browser.get().await;
    let cancelled = browser
        .post(&format!("/approvals/{}/cancel", gone.id), "")
        .await;
    assert_eq!(cancelled.status, StatusCode::SEE_OTHER);
    let read = h.store.get(&alice, gone.id).await.unwrap();
    assert_eq!(read.elicitation.status.to_string(), "cancelled");
}

async fn rest(
    h: &Harness,
    token: &str,
    method: &str,
    path: &str,
    body: Value,
) -> (StatusCode, Value) {
    let auth = format!("Bearer {token}");
    let text = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let page = send(
        h,
        method,
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        &text,
    )
    .await;
    (
        page.status,
        serde_json::from_str(&page.body).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_service_asks_a_question_the_person_answers_on_the_page_and_a_long_poll_returns_it()
 {
    let h = Arc::new(harness().await);
    let question = json!({"message": "Which region?", "response": {"type": "single_choice", "options": ["eu", "us"]}, "ttl_seconds": 300});
    let (status, _) = rest(&h, AGENT, "POST", "/v1/mcp/elicitations", question.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "an agent may not ask");
    for bad in [
        json!({"message": "x", "response": {"type": "single_choice", "options": []}}),
        json!({"message": "x", "response": {"type": "confirmation"}, "ttl_seconds": 0}),
        json!({"message": "x", "response": {"type": "confirmation"}, "extra": 1}),
        json!({"message": "", "response": {"type": "confirmation"}}),
    ] {
        let (status, body) = rest(&h, SERVICE, "POST", "/v1/mcp/elicitations", bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad} → {body}");
    }
    let (status, created) = rest(&h, SERVICE, "POST", "/v1/mcp/elicitations", question).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["status"], "pending");

    let waiting = {
        let h = h.clone();
        let id = id.clone();
        tokio::spawn(async move {
            rest(
                &h,
                SERVICE,
                "GET",
                &format!("/v1/mcp/elicitations/{id}?wait=30s"),
                Value::Null,
            )
            .await
        })
    };
    let mut browser = Browser::sign_in(&h, HUMAN).await.unwrap();
    let page = browser.get().await;
    assert!(
        page.body.contains("Which region?")
            && page
                .body
                .contains("type=\"radio\" name=\"choice\" value=\"us\""),
        "{}",
        page.body
    );
    let answered = browser
        .post(&format!("/approvals/{id}/respond"), "choice=us")
        .await;
    assert_eq!(answered.status, StatusCode::SEE_OTHER);
    let (status, read) = waiting.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(read["status"], "responded", "{read}");
    assert_eq!(read["response"], json!({"choice": "us"}));
    let (status, _) = rest(
        &h,
        SERVICE,
        "GET",
        &format!("/v1/mcp/elicitations/{id}?wait=999s"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// A modern `tools/call` of `test__delete` declaring `capabilities`, with extra params.
async fn modern_call_with(h: &Harness, capabilities: Value, extra: Value) -> Value {
    let mut params = json!({"name": "test__delete", "arguments": {"path": "/u"}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }});
    for (k, v) in extra.as_object().unwrap() {
        params[k] = v.clone();
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let page = send(
        h,
        "POST",
        "/mcp",
        &[
            ("authorization", "Bearer agent-token"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "test__delete"),
            ("accept", "application/json"),
            ("content-type", "application/json"),
        ],
        &body.to_string(),
    )
    .await;
    serde_json::from_str::<Value>(&page.body).unwrap()["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_mode_client_is_sent_to_the_page_and_only_the_persons_answer_there_approves() {
    let h = harness().await;
    let url_only = json!({"elicitation": {"url": {}}});
    let first = modern_call_with(&h, url_only.clone(), json!({})).await;
    assert_eq!(first["resultType"], "input_required", "{first}");
    let asked = &first["inputRequests"]["confirm"]["params"];
    assert_eq!(asked["mode"], "url", "{first}");
    let id = asked["elicitationId"].as_str().unwrap().to_owned();
    assert_eq!(
        asked["url"],
        format!("http://127.0.0.1:8080/approvals/e/{id}")
    );

    // The client says it went there (accept): that is not an approval.
    let accept = json!({"action": "accept", "content": {"confirmed": true}});
    let retry =
        json!({"requestState": first["requestState"], "inputResponses": {"confirm": accept}});
    let again = modern_call_with(&h, url_only.clone(), retry).await;
    assert_eq!(
        again["resultType"], "input_required",
        "still waiting: {again}"
    );
    assert_eq!(
        again["inputRequests"]["confirm"]["params"]["elicitationId"],
        json!(id)
    );
    assert_eq!(h.deleted.load(Ordering::SeqCst), 0);

    // The person opens the link: exactly that call, and approves it.
    let mut browser = Browser::sign_in(&h, HUMAN).await.unwrap();
    let page = send(
        &h,
        "GET",
        &format!("/approvals/e/{id}"),
        &[("cookie", &browser.cookie)],
        "",
    )
    .await;
    assert!(
        page.body.contains(&format!("id=\"e-{id}\"")) && page.body.contains("Waiting for you (1)"),
        "{}",
        page.body
    );
    browser.get().await;
    let approved = browser
        .post(&format!("/approvals/{id}/respond"), "decision=approve")
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER);
    let retry = json!({"requestState": again["requestState"], "inputResponses": {"confirm": {"action": "accept"}}});
    let done = modern_call_with(&h, url_only, retry).await;
    assert_eq!(done["content"][0]["text"], "deleted", "{done}");
    assert_eq!(h.deleted.load(Ordering::SeqCst), 1);

    // Not signed in, the link asks to sign in first and comes back to it.
    let fresh = send(&h, "GET", &format!("/approvals/e/{id}"), &[], "").await;
    assert!(
        fresh
            .body
            .contains(&format!("name=\"next\" value=\"/approvals/e/{id}\"")),
        "{}",
        fresh.body
    );
    let signed = send(
        &h,
        "POST",
        "/approvals/sign-in",
        &[("content-type", "application/x-www-form-urlencoded")],
        &format!("token={HUMAN}&next=%2Fapprovals%2Fe%2F{id}"),
    )
    .await;
    assert_eq!(
        signed.headers["location"],
        format!("/approvals/e/{id}").as_str()
    );
    let elsewhere = send(
        &h,
        "POST",
        "/approvals/sign-in",
        &[("content-type", "application/x-www-form-urlencoded")],
        &format!("token={HUMAN}&next=https%3A%2F%2Fevil.example.com"),
    )
    .await;
    assert_eq!(
        elsewhere.headers["location"], "/approvals",
        "no open redirect"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_client_with_url_mode_waits_on_its_stream_until_the_person_answers_on_the_page() {
    let h = Arc::new(harness().await);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"url": {}}}, "clientInfo": {"name": "t", "version": "1"}}});
    let opened = send(
        &h,
        "POST",
        "/mcp",
        &[
            ("authorization", "Bearer agent-token"),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ],
        &init.to_string(),
    )
    .await;
    let session = opened.headers["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let call = {
        let h = h.clone();
        let session = session.clone();
        tokio::spawn(async move {
            let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "test__delete", "arguments": {"path": "/s"}}});
            send(
                &h,
                "POST",
                "/mcp",
                &[
                    ("authorization", "Bearer agent-token"),
                    ("mcp-session-id", &session),
                    ("content-type", "application/json"),
                    ("accept", "application/json, text/event-stream"),
                ],
                &body.to_string(),
            )
            .await
            .body
        })
    };
    let mut browser = Browser::sign_in(&h, HUMAN).await.unwrap();
    let mut id = String::new();
    for _ in 0..200 {
        let page = browser.get().await;
        if let Some(start) = page.body.find("id=\"e-") {
            id = page.body[start + 6..start + 42].to_owned();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(h.deleted.load(Ordering::SeqCst), 0);
    let approved = browser
        .post(&format!("/approvals/{id}/respond"), "decision=approve")
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER);
    let stream = call.await.unwrap();
    assert!(
        stream.contains("\"mode\":\"url\"") && stream.contains(&format!("/approvals/e/{id}")),
        "{stream}"
    );
    let complete = stream
        .find("notifications/elicitation/complete")
        .expect("the client is told");
    let result = stream.find("\"text\":\"deleted\"").expect("the call ran");
    assert!(complete < result, "{stream}");
    assert_eq!(h.deleted.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_uploaded_on_the_page_is_recorded_with_its_hash_and_only_its_callers_service_downloads_it()
 {
    let h = harness().await;
    let ask =
        json!({"message": "The signed contract, please", "response": {"type": "file_upload"}});
    let (status, created) = rest(&h, SERVICE, "POST", "/v1/mcp/elicitations", ask).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let mut browser = Browser::sign_in(&h, HUMAN).await.unwrap();
    let page = browser.get().await;
    assert!(
        page.body
            .contains(&format!("data-upload=\"/approvals/{id}/upload\"")),
        "{}",
        page.body
    );

    let upload = |csrf: String| {
        let h = &h;
        let cookie = browser.cookie.clone();
        let path = format!("/approvals/{id}/upload");
        async move {
            send(
                h,
                "POST",
                &path,
                &[
                    ("cookie", &cookie),
                    ("origin", "http://127.0.0.1:8080"),
                    ("content-type", "text/plain"),
                    ("x-file-name", "..%2F..%2Fr%C3%A9sum%C3%A9.txt"),
                    ("x-csrf-token", &csrf),
                ],
                "the contract",
            )
            .await
        }
    };
    let forged = upload("00".repeat(32)).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN, "{}", forged.body);
    let done = upload(browser.csrf.clone()).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    let (_, read) = rest(
        &h,
        SERVICE,
        "GET",
        &format!("/v1/mcp/elicitations/{id}?wait=5s"),
        Value::Null,
    )
    .await;
    assert_eq!(read["status"], "responded", "{read}");
    let response = &read["response"];
    assert_eq!(response["file_name"], "résumé.txt");
    assert_eq!(response["content_type"], "text/plain");
    assert_eq!(response["size_bytes"], 12);
    let expected =
        mcp_random::hex(ring::digest::digest(&ring::digest::SHA256, b"the contract").as_ref());
    assert_eq!(response["sha256"], expected.as_str());

    let path = format!(
        "/v1/mcp/uploads/{}",
        response["upload_id"].as_str().unwrap()
    );
    let file = send(
        &h,
        "GET",
        &path,
        &[("authorization", "Bearer service-token")],
        "",
    )
    .await;
    assert_eq!(file.status, StatusCode::OK);
    assert_eq!(file.body, "the contract");
    assert_eq!(file.headers["content-type"], "application/octet-stream");
    // Saved, never shown or sniffed by a browser, never cached.
    assert_eq!(file.headers["content-disposition"], "attachment");
    assert_eq!(file.headers["x-content-type-options"], "nosniff");
    assert_eq!(file.headers["cache-control"], "no-store");
    let agent = send(
        &h,
        "GET",
        &path,
        &[("authorization", "Bearer agent-token")],
        "",
    )
    .await;
    assert_eq!(agent.status, StatusCode::FORBIDDEN);
    let missing = send(
        &h,
        "GET",
        "/v1/mcp/uploads/..%2F..%2Fetc%2Fpasswd",
        &[("authorization", "Bearer service-token")],
        "",
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cannot_make_the_gateway_send_the_person_to_a_host_of_its_choosing() {
    let h = harness().await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "test__delete", "arguments": {"path": "/p"}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"url": {}}}}}});
    let page = send(
        &h,
        "POST",
        "/mcp",
        &[
            ("host", "login.evil.example.com"),
            ("authorization", "Bearer agent-token"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "test__delete"),
            ("accept", "application/json"),
            ("content-type", "application/json"),
        ],
        &body.to_string(),
    )
    .await;
    let result = &serde_json::from_str::<Value>(&page.body).unwrap()["result"];
    assert!(!page.body.contains("evil.example.com"), "{}", page.body);
    assert_eq!(
        result["structuredContent"]["elicitation_required"], true,
        "the held result: {result}"
    );
}

/// The page's upload of `body` as `content_type` for elicitation `id`.
async fn upload_file(
    h: &Harness,
    browser: &Browser<'_>,
    id: &str,
    content_type: &str,
    body: &str,
) -> Page {
    send(
        h,
        "POST",
        &format!("/approvals/{id}/upload"),
        &[
            ("cookie", &browser.cookie),
            ("origin", "http://127.0.0.1:8080"),
            ("content-type", content_type),
            ("x-file-name", "f.bin"),
            ("x-csrf-token", &browser.csrf),
        ],
        body,
    )
    .await
}

async fn ask_for_a_file(h: &Harness, response: Value) -> String {
    let ask = json!({"message": "A file, please", "response": response});
    let (status, created) = rest(h, SERVICE, "POST", "/v1/mcp/elicitations", ask).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_is_held_to_the_questions_size_and_content_types() {
    let h = harness().await;
    let id = ask_for_a_file(
        &h,
        json!({"type": "file_upload", "max_bytes": 5, "content_types": ["image/*"]}),
    )
    .await;
    let mut browser = Browser::sign_in(&h, HUMAN).await.unwrap();
    let page = browser.get().await;
    assert!(page.body.contains("accept=\"image/*\""), "{}", page.body);
    assert!(page.body.contains("at most 5 bytes"), "{}", page.body);

    // Too large: refused before it is kept, and it costs no retry.
    let big = upload_file(&h, &browser, &id, "image/png", "123456").await;
    assert_eq!(big.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", big.body);
    assert!(big.body.contains("at most 5"), "{}", big.body);
    // The wrong type: the core's validation says so, with the retries left.
    let wrong = upload_file(&h, &browser, &id, "text/html", "<b>").await;
    assert_eq!(
        wrong.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        wrong.body
    );
    let wrong: Value = serde_json::from_str(&wrong.body).unwrap();
    assert_eq!(
        wrong["errors"][0], "content_type: must be one of: image/*",
        "{wrong}"
    );
    assert_eq!(wrong["retries_left"], 2, "{wrong}");
    // Neither left a file behind.
    let eid = id.parse().unwrap();
    assert_eq!(h.uploads.remove_for(eid, None).await.unwrap(), 0);

    let ok = upload_file(&h, &browser, &id, "image/png", "\u{89}PNG").await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    let ok: Value = serde_json::from_str(&ok.body).unwrap();
    assert_eq!(ok["recorded"]["content_type"], "image/png");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_of_cancelled_and_expired_elicitations_are_removed_and_strays_never_download() {
    let h = harness().await;
    // A file kept for an answer that was never recorded (the gateway stopped in between).
    let cancelled = ask_for_a_file(&h, json!({"type": "file_upload"})).await;
    let stray = keep_a_stray(&h, &cancelled).await;
    // It is the caller's elicitation, but not its recorded answer: no download.
    let path = format!("/v1/mcp/uploads/{}", stray.upload_id);
    let file = send(
        &h,
        "GET",
        &path,
        &[("authorization", "Bearer service-token")],
        "",
    )
    .await;
    assert_eq!(file.status, StatusCode::NOT_FOUND, "{}", file.body);

    let (status, body) = rest(
        &h,
        HUMAN,
        "POST",
        &format!("/v1/mcp/elicitations/{cancelled}/cancel"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually_gone(&h, &stray.upload_id).await;

    // Expiry: the sweeper hands what it expired to the service.
    let expiring = ask_for_a_file(&h, json!({"type": "file_upload"})).await;
    let stray = keep_a_stray(&h, &expiring).await;
    let later = time::OffsetDateTime::now_utc() + time::Duration::days(30);
    let expired = h.store.expire_due(later).await.unwrap();
    assert_eq!(expired.len(), 1);
    h.service.swept(elicitation_store::Swept {
        expired,
        erased: Vec::new(),
    });
    eventually_gone(&h, &stray.upload_id).await;
}

/// A file kept for elicitation `id` whose answer was never recorded.
async fn keep_a_stray(h: &Harness, id: &str) -> mcp_uploads::Upload {
    h.uploads
        .save(
            id.parse().unwrap(),
            "s.txt",
            None,
            Bytes::from_static(b"stray"),
        )
        .await
        .unwrap()
}

/// Waits (up to 10 s) until the upload is removed; removal runs in the background.
async fn eventually_gone(h: &Harness, upload_id: &str) {
    for _ in 0..200 {
        if h.uploads.read(upload_id).await.unwrap().is_none() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("upload {upload_id} was not removed");
}

/// Issue 44, item 5: in mode `tokens` a group is its tenant's. A tenant `t2` token in a group
/// named `sre` listed (arguments included) and approved a tenant-less caller's four-eyes
/// call; now it sees nothing and answers nothing of it, while the caller's tenant's member
/// does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_group_of_tokens_counts_only_within_its_tenant() {
    let h = harness_with(vec![mcp_gate::ApproverRule {
        tools: "test__*".into(),
        approval: elicitation_store::Approval {
            group: "sre".into(),
            mode: elicitation_store::ApprovalMode::FourEyes,
            quorum: elicitation_store::Quorum::default(),
        },
        groups_from: mcp_gate::GroupsFrom::Configured,
    }])
    .await;
    let id = held_id(&agent_call(&h, json!({"path": "/prod"}), None).await);
    let (status, listed) = rest(
        &h,
        CAROL_T2,
        "GET",
        "/v1/mcp/elicitations?for=approval",
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["elicitations"], json!([]), "{listed}");
    let (status, body) = rest(
        &h,
        CAROL_T2,
        "POST",
        &format!("/v1/mcp/elicitations/{id}/respond"),
        json!({"confirmed": true}),
    )
    .await;
    assert!(
        status == StatusCode::FORBIDDEN || status == StatusCode::NOT_FOUND,
        "{status}: {body}"
    );
    assert_eq!(h.deleted.load(Ordering::SeqCst), 0);
    let (status, body) = rest(
        &h,
        BOB,
        "POST",
        &format!("/v1/mcp/elicitations/{id}/respond"),
        json!({"confirmed": true}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_four_eyes_confirmation_is_approved_by_another_member_of_the_group_never_by_the_caller() {
    let h = harness_with(vec![mcp_gate::ApproverRule {
        tools: "test__*".into(),
        approval: elicitation_store::Approval {
            group: "sre".into(),
            mode: elicitation_store::ApprovalMode::FourEyes,
            quorum: elicitation_store::Quorum::default(),
        },
        groups_from: mcp_gate::GroupsFrom::Configured,
    }])
    .await;
    let held = agent_call(&h, json!({"path": "/prod"}), None).await;
    let id = held_id(&held);
    // The agent learns who must confirm.
    assert!(
        held["structuredContent"]["elicitation"]["message"]
            .as_str()
            .unwrap()
            .contains("A member of the approver group \"sre\" must confirm it, not the person the agent acts for."),
        "{held}"
    );

    // Alice (the caller's person) sees it waiting for the group, with nothing to press.
    let mut alice = Browser::sign_in(&h, HUMAN).await.unwrap();
    let page = alice.get().await;
    let item = page.body.split(&format!("id=\"e-{id}\"")).nth(1).unwrap();
    let item = &item[..item.find("</article>").unwrap()];
    assert!(
        item.contains("Waits for a member of <strong>sre</strong>") && !item.contains(">Approve<"),
        "{item}"
    );
    // Neither her plain token nor her own membership of the group approves it: not on the
    // page, not through the REST API.
    let forged = alice
        .post(&format!("/approvals/{id}/respond"), "decision=approve")
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN, "{}", forged.body);
    for token in [HUMAN, ALICE_SRE] {
        let (status, body) = rest(
            &h,
            token,
            "POST",
            &format!("/v1/mcp/elicitations/{id}/respond"),
            json!({"confirmed": true}),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{token}: {body}");
    }
    let still = agent_call(&h, json!({"path": "/prod"}), Some(&id)).await;
    assert_eq!(held_id(&still), id, "still held: {still}");
    assert_eq!(h.deleted.load(Ordering::SeqCst), 0);

    // Through the REST API, bob's approver listing has it (for alice); alice's has nothing.
    let (status, listed) = rest(
        &h,
        BOB,
        "GET",
        "/v1/mcp/elicitations?for=approval",
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["elicitations"][0]["id"], id.as_str(), "{listed}");
    assert_eq!(
        listed["elicitations"][0]["for"]["subject"], "alice",
        "{listed}"
    );
    assert_eq!(
        listed["elicitations"][0]["approval"],
        json!({"group": "sre", "mode": "four_eyes"})
    );
    let (_, none) = rest(
        &h,
        HUMAN,
        "GET",
        "/v1/mcp/elicitations?for=approval",
        Value::Null,
    )
    .await;
    assert_eq!(none["elicitations"], json!([]), "{none}");

    // Bob, of the group, sees it for alice on the page and approves it.
    let mut bob = Browser::sign_in(&h, BOB).await.unwrap();
    let page = bob.get().await;
    assert!(
        page.body.contains(&format!("id=\"e-{id}\"")) && page.body.contains("for alice"),
        "{}",
        page.body
    );
    let approved = bob
        .post(&format!("/approvals/{id}/respond"), "decision=approve")
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    let done = agent_call(&h, json!({"path": "/prod"}), Some(&id)).await;
    assert_eq!(done["content"][0]["text"], "deleted", "{done}");
    assert_eq!(h.deleted.load(Ordering::SeqCst), 1);

    // The record names the approver, and alice's history shows it.
    let stored = h
        .store
        .get(
            &elicitation_store::Caller::new("alice", None).unwrap(),
            id.parse().unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        stored.elicitation.answered_by.as_deref(),
        Some("bob on the approvals page")
    );
    let page = alice.get().await;
    let (_, lately) = page.body.split_once("Lately").unwrap();
    assert!(lately.contains("bob on the approvals page"), "{lately}");
}

/// A page sign-in lasts eight hours, however it is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_sign_in_ends_after_eight_hours() {
    let h = harness().await;
    let mut bob = Browser::sign_in(&h, BOB).await.unwrap();
    h.clock
        .advance_std(std::time::Duration::from_secs(8 * 3600 - 60));
    assert!(bob.get().await.body.contains("Sign out"), "a minute left");
    h.clock.advance_std(std::time::Duration::from_secs(60));
    let page = send(&h, "GET", "/approvals", &[("cookie", &bob.cookie)], "").await;
    assert!(
        page.body.contains("Sign in") && !page.body.contains("Sign out"),
        "{}",
        page.body
    );
}

/// A page sign-in holds only while its credential does: a token revoked by a reload signs
/// the page out (each request takes the token's grant as configured now), and a sign-in
/// made under another auth mode opens nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_sign_in_follows_its_token_and_the_auth_mode() {
    let h = harness().await;
    let mut bob = Browser::sign_in(&h, BOB).await.unwrap();
    assert!(bob.get().await.body.contains("Sign out"));
    let gateway = h.service.gateway();
    let grant = |subject: &str, token: &str, groups: Vec<String>| mcp_auth::TokenGrant {
        subject: subject.into(),
        tenant: None,
        token_sha256: token_sha256(token),
        scopes: vec![SCOPE_RESPOND.into()],
        groups,
    };
    // A reload that keeps his token keeps him signed in.
    h.service.reload(
        gateway.clone(),
        Auth::tokens(vec![
            grant("bob", BOB, Vec::new()),
            grant("alice", HUMAN, Vec::new()),
        ])
        .unwrap(),
    );
    let page = bob.get().await;
    assert!(
        page.body.contains("Sign out"),
        "still signed in: {}",
        page.body
    );
    // His token is revoked: the cookie opens nothing any more.
    h.service.reload(
        gateway.clone(),
        Auth::tokens(vec![grant("alice", HUMAN, Vec::new())]).unwrap(),
    );
    let page = send(&h, "GET", "/approvals", &[("cookie", &bob.cookie)], "").await;
    assert!(
        page.body.contains("Sign in") && !page.body.contains("Sign out"),
        "{}",
        page.body
    );
    // Put back, his token is a new grant: the sign-in made under the old one stays dead
    // (on today's main it worked again), and a new sign-in works.
    h.clock.advance_std(std::time::Duration::from_secs(1));
    h.service.reload(
        gateway.clone(),
        Auth::tokens(vec![
            grant("bob", BOB, Vec::new()),
            grant("alice", HUMAN, Vec::new()),
        ])
        .unwrap(),
    );
    let page = send(&h, "GET", "/approvals", &[("cookie", &bob.cookie)], "").await;
    assert!(
        !page.body.contains("Sign out"),
        "a sign-in outlived its grant: {}",
        page.body
    );
    let mut again = Browser::sign_in(&h, BOB).await.unwrap();
    assert!(again.get().await.body.contains("Sign out"));
    // A cookie made under auth `none` opens nothing under auth `tokens`.
    let none = harness().await;
    none.service.reload(none.service.gateway(), Auth::none());
    let visit = send(&none, "GET", "/approvals", &[], "").await;
    let cookie = visit.headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    none.service.reload(
        none.service.gateway(),
        Auth::tokens(vec![grant("alice", HUMAN, Vec::new())]).unwrap(),
    );
    let page = send(&none, "GET", "/approvals", &[("cookie", &cookie)], "").await;
    assert!(!page.body.contains("Sign out"), "{}", page.body);
}

/// Every file under `dir`, staging files included.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

/// A small tmpfs mounted for the test (the disk that fills up), unmounted when dropped.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(size: &str) -> SmallDisk {
        let dir = std::env::temp_dir().join(format!("mcp-small-disk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            mounted,
            "this test mounts a small tmpfs as the upload disk, which needs root (as `cargo xtask test` runs in CI)"
        );
        SmallDisk(dir)
    }

    fn read_only(&self) {
        let done = std::process::Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        assert!(done, "remount the upload disk read-only");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let unmounted = std::process::Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if unmounted {
            let _ = std::fs::remove_dir(&self.0);
        } else {
            eprintln!("could not unmount the test's tmpfs at {}", self.0.display());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_or_read_only_upload_disk_fails_uploads_cleanly_and_nothing_else() {
    let disk = SmallDisk::mount("256k");
    let h = harness_at(Vec::new(), disk.0.join("uploads")).await;
    let file = ask_for_a_file(&h, json!({"type": "file_upload"})).await;
    let mut browser = Browser::sign_in(&h, HUMAN).await.unwrap();
    browser.get().await;

    // Disk full: a file larger than the space left is refused with a clear error, costs
    // no retry, and leaves nothing behind.
    let big = "x".repeat(512 * 1024);
    let full = upload_file(&h, &browser, &file, "text/plain", &big).await;
    assert_eq!(
        full.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        full.body
    );
    assert!(full.body.contains("upload store"), "{}", full.body);
    assert_eq!(
        files_under(&disk.0),
        Vec::<std::path::PathBuf>::new(),
        "a failed upload left a file (or a staging file) behind"
    );
    // Nothing else is affected: a held call is confirmed on the page and runs.
    let args = json!({"path": "/full-disk"});
    let id = held_id(&agent_call(&h, args.clone(), None).await);
    browser.get().await;
    let approved = browser
        .post(&format!("/approvals/{id}/respond"), "decision=approve")
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    let done = agent_call(&h, args, Some(&id)).await;
    assert_eq!(done["content"][0]["text"], "deleted", "{done}");
    // The question is still open, and a file that fits is kept.
    let fits = upload_file(&h, &browser, &file, "text/plain", "small").await;
    assert_eq!(fits.status, StatusCode::OK, "{}", fits.body);

    // Read-only: the same clean refusal for another question; answers still work.
    disk.read_only();
    let second = ask_for_a_file(&h, json!({"type": "file_upload"})).await;
    browser.get().await;
    let refused = upload_file(&h, &browser, &second, "text/plain", "hello").await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        refused.body
    );
    let (status, listed) = rest(&h, HUMAN, "GET", "/v1/mcp/elicitations", Value::Null).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert!(
        listed["elicitations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["id"] == second.as_str()),
        "the question whose upload failed is still pending: {listed}"
    );
}

/// Declining on the page with a note: the agent's refusal carries it, escaped on the page
/// and told as data; an empty note is no note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_typed_next_to_decline_reaches_the_agent() {
    let h = harness().await;
    let id = held_id(&agent_call(&h, json!({"path": "/prod"}), None).await);
    let mut browser = Browser::sign_in(&h, HUMAN).await.unwrap();
    let page = browser.get().await;
    assert!(page.body.contains("name=\"note\""), "{}", page.body);
    let declined = browser
        .post(
            &format!("/approvals/{id}/respond"),
            "decision=decline&note=use+%3Cb%3Estaging%3C%2Fb%3E+instead",
        )
        .await;
    assert_eq!(declined.status, StatusCode::SEE_OTHER, "{}", declined.body);
    let refused = agent_call(&h, json!({"path": "/prod"}), Some(&id)).await;
    assert_eq!(
        refused["structuredContent"]["note"], "use <b>staging</b> instead",
        "{refused}"
    );
    let other = held_id(&agent_call(&h, json!({"path": "/other"}), None).await);
    browser
        .post(
            &format!("/approvals/{other}/respond"),
            "decision=decline&note=+",
        )
        .await;
    let plain = agent_call(&h, json!({"path": "/other"}), Some(&other)).await;
    assert_eq!(
        plain["structuredContent"],
        json!({"user_rejected": true, "message": "The user declined this call; it was not run."}),
        "{plain}"
    );
    assert_eq!(h.deleted.load(Ordering::SeqCst), 0);
}

/// Approve and allow, from the page: the durations offered stop at `[gate] max_grant`, a
/// longer one or a number of calls that is not one is refused with why and answers
/// nothing, and a grant made runs its calls then holds again. Where a four-eyes rule keeps
/// the caller from approving, the caller cannot grant either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_made_on_the_page_is_bounded_and_only_whoever_may_approve_makes_one() {
    let h = harness().await;
    let id = held_id(&agent_call(&h, json!({"path": "/prod"}), None).await);
    let mut browser = Browser::sign_in(&h, HUMAN).await.unwrap();
    let page = browser.get().await;
    for offered in ["15m", "1h", "8h"] {
        assert!(
            page.body.contains(&format!("<option value=\"{offered}\">")),
            "{}",
            page.body
        );
    }
    assert!(
        !page.body.contains("<option value=\"1d\">"),
        "{}",
        page.body
    );
    let respond = format!("/approvals/{id}/respond");
    let too_long = browser
        .post(&respond, "decision=grant_tool&grant_for=9h")
        .await;
    assert_eq!(
        too_long.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        too_long.body
    );
    assert!(too_long.body.contains("8h"), "{}", too_long.body);
    let not_a_number = browser
        .post(&respond, "decision=grant_tool&grant_for=1h&grant_uses=two")
        .await;
    assert_eq!(not_a_number.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        not_a_number.body.contains("whole number"),
        "{}",
        not_a_number.body
    );
    let still = agent_call(&h, json!({"path": "/prod"}), Some(&id)).await;
    assert_eq!(held_id(&still), id, "nothing was answered: {still}");

    let granted = browser
        .post(&respond, "decision=grant_tool&grant_for=1h&grant_uses=1")
        .await;
    assert_eq!(granted.status, StatusCode::SEE_OTHER, "{}", granted.body);
    let page = browser.get().await;
    assert!(page.body.contains("id=\"grants\""), "{}", page.body);
    assert!(
        page.body.contains("/revoke\""),
        "a live grant with Revoke: {}",
        page.body
    );
    agent_call(&h, json!({"path": "/prod"}), Some(&id)).await;
    agent_call(&h, json!({"path": "/elsewhere"}), None).await;
    assert_eq!(
        h.deleted.load(Ordering::SeqCst),
        2,
        "the approved call and one granted"
    );
    held_id(&agent_call(&h, json!({"path": "/third"}), None).await);
    let page = browser.get().await;
    assert!(
        page.body.contains("No standing grants"),
        "used up: {}",
        page.body
    );

    let strict = harness_with(vec![mcp_gate::ApproverRule {
        tools: "test__*".into(),
        approval: elicitation_store::Approval {
            group: "sre".into(),
            mode: elicitation_store::ApprovalMode::FourEyes,
            quorum: elicitation_store::Quorum::default(),
        },
        groups_from: mcp_gate::GroupsFrom::Configured,
    }])
    .await;
    let id = held_id(&agent_call(&strict, json!({"path": "/prod"}), None).await);
    let alice = Browser::sign_in(&strict, HUMAN).await.unwrap();
    let forged = alice
        .post(
            &format!("/approvals/{id}/respond"),
            "decision=grant_tool&grant_for=1h",
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN, "{}", forged.body);
    let still = agent_call(&strict, json!({"path": "/prod"}), Some(&id)).await;
    assert_eq!(held_id(&still), id, "{still}");
    assert_eq!(strict.deleted.load(Ordering::SeqCst), 0);
}

/// Auth `none` (the demo): a first visit opens a session and asks for the page again with
/// its cookie. A client that keeps no cookies (`curl`) was sent round that redirect for
/// ever (issue 45, item 7); it is told that the page needs cookies. A browser is unchanged.
#[tokio::test]
async fn a_client_that_keeps_no_cookies_is_told_so_instead_of_being_redirected_for_ever() {
    let mut h = harness().await;
    let registry = Registry::start(Vec::new()).await.unwrap();
    let gateway = Arc::new(Gateway::new(
        registry,
        h.store.clone(),
        GatePolicy::default(),
        false,
    ));
    h.service = Arc::new(McpService::new(
        gateway,
        Auth::none(),
        ServiceConfig::default(),
    ));
    for start in ["/approvals", "/approvals/audit", "/approvals/accounts"] {
        // curl -L: follows each redirect, sends no cookie back.
        let mut path = start.to_owned();
        let mut hops = 0;
        let last = loop {
            let page = send(&h, "GET", &path, &[], "").await;
            if page.status != StatusCode::SEE_OTHER {
                break page;
            }
            hops += 1;
            assert!(hops < 3, "{start}: redirected again to {path}");
            path = page.headers["location"].to_str().unwrap().to_owned();
        };
        assert_eq!(
            last.status,
            StatusCode::BAD_REQUEST,
            "{start}: {}",
            last.body
        );
        assert!(last.body.contains("cookie"), "{}", last.body);
        // A browser sends the cookie it was given and lands on the page.
        let first = send(&h, "GET", start, &[], "").await;
        let cookie = first.headers["set-cookie"].to_str().unwrap();
        let cookie = cookie.split(';').next().unwrap();
        let to = first.headers["location"].to_str().unwrap();
        // With its cookie, the marker is taken off the address, then the page is served.
        let back = send(&h, "GET", to, &[("cookie", cookie)], "").await;
        assert_eq!(back.status, StatusCode::SEE_OTHER, "{start}: {}", back.body);
        let clean = back.headers["location"].to_str().unwrap();
        assert!(!clean.contains("cookie-sent"), "{clean}");
        let page = send(&h, "GET", clean, &[("cookie", cookie)], "").await;
        assert_eq!(page.status, StatusCode::OK, "{start}: {}", page.body);
        assert!(
            !page.body.contains("Cookies needed"),
            "{start}: {}",
            page.body
        );
    }
}

/// The Insights view: with `audit:read` a person reads what was asked per tool and caller;
/// without it, nothing; a period it does not offer is refused with why.
#[tokio::test]
async fn the_insights_view_shows_what_was_asked_to_an_auditor_only() {
    let h = harness().await;
    let first = held_id(&agent_call(&h, json!({"path": "/srv/a"}), None).await);
    let mut person = Browser::sign_in(&h, HUMAN).await.unwrap();
    person.get().await;
    let approved = person
        .post(&format!("/approvals/{first}/respond"), "decision=approve")
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER);
    let page = send(
        &h,
        "GET",
        "/approvals/insights",
        &[("cookie", &person.cookie)],
        "",
    )
    .await;
    assert_eq!(page.status, StatusCode::FORBIDDEN, "{}", page.body);

    let auditor = Browser::sign_in(&h, AUDITOR).await.unwrap();
    let page = send(
        &h,
        "GET",
        "/approvals/insights",
        &[("cookie", &auditor.cookie)],
        "",
    )
    .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body.contains("What people were asked"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("<td><code>test__delete</code></td><td>alice</td><td>1</td><td>1</td>"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("/srv/a"), "no argument: {}", page.body);
    let page = send(
        &h,
        "GET",
        "/approvals/insights?days=365",
        &[("cookie", &auditor.cookie)],
        "",
    )
    .await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST, "{}", page.body);
    assert!(page.body.contains("1 to 90"), "{}", page.body);
}

/// A client that retries at once, saying each time that it sent the person to the page (as
/// Claude Code's headless mode does, and then gives up with an error after ten rounds): after
/// three such rounds with no answer it gets the held result, not another question; the
/// person's answer on the page then lets the identical call run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_mode_client_that_retries_at_once_gets_the_held_result_after_three_rounds() {
    let h = harness().await;
    let url_only = json!({"elicitation": {"url": {}}});
    let mut result = modern_call_with(&h, url_only.clone(), json!({})).await;
    let accept = json!({"action": "accept"});
    for round in 1..=3 {
        assert_eq!(
            result["resultType"], "input_required",
            "round {round}: {result}"
        );
        let retry =
            json!({"requestState": result["requestState"], "inputResponses": {"confirm": accept}});
        result = modern_call_with(&h, url_only.clone(), retry).await;
    }
    assert_eq!(
        result["structuredContent"]["elicitation_required"], true,
        "the held result after three rounds: {result}"
    );
    let id = held_id(&result);
    assert_eq!(h.deleted.load(Ordering::SeqCst), 0);
    let mut browser = Browser::sign_in(&h, HUMAN).await.unwrap();
    browser.get().await;
    let approved = browser
        .post(&format!("/approvals/{id}/respond"), "decision=approve")
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER);
    let done = modern_call_with(&h, url_only, json!({})).await;
    assert_eq!(done["content"][0]["text"], "deleted", "{done}");
    assert_eq!(h.deleted.load(Ordering::SeqCst), 1);
}

/// What changed since the last approved call: an approver answering another caller's call
/// is shown a comparison only with calls its group could have answered — never one the
/// caller answered alone (here, before the call was routed to the group), which the
/// caller herself still sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_compares_only_with_calls_its_group_could_have_answered() {
    let h = harness_with(vec![mcp_gate::ApproverRule {
        tools: "test__*".into(),
        approval: elicitation_store::Approval {
            group: "sre".into(),
            mode: elicitation_store::ApprovalMode::May,
            quorum: elicitation_store::Quorum::default(),
        },
        groups_from: mcp_gate::GroupsFrom::Configured,
    }])
    .await;
    // Alice's earlier call of the tool, held and approved by her alone (no group).
    let alice = elicitation_store::Caller::new("alice", None).unwrap();
    let earlier = elicitation_store::ConfirmationRequest::new(
        "test__delete",
        gating_core::CallDigest::of(&json!({"name": "delete"})),
        json!({"path": "/srv/private-earlier"}),
        "Delete?",
        time::Duration::minutes(10),
    );
    let stored = h.store.create_confirmation(&alice, earlier).await.unwrap();
    h.store
        .respond(&alice, stored.elicitation.id, json!({"confirmed": true}))
        .await
        .unwrap();
    let now = held_id(&agent_call(&h, json!({"path": "/srv/now"}), None).await);
    let mut bob = Browser::sign_in(&h, BOB).await.unwrap();
    let page = bob.get().await;
    assert!(
        page.body.contains(&format!("id=\"e-{now}\"")),
        "{}",
        page.body
    );
    assert!(!page.body.contains("private-earlier"), "{}", page.body);
    assert!(!page.body.contains("class=\"since"), "{}", page.body);
    let mut herself = Browser::sign_in(&h, HUMAN).await.unwrap();
    let page = herself.get().await;
    assert!(
        page.body.contains("private-earlier"),
        "her own: {}",
        page.body
    );
}

fn quorum_rule(also_from: &[&str]) -> mcp_gate::ApproverRule {
    mcp_gate::ApproverRule {
        tools: "test__*".into(),
        approval: elicitation_store::Approval {
            group: "sre".into(),
            mode: elicitation_store::ApprovalMode::FourEyes,
            quorum: elicitation_store::Quorum {
                approvers: 2,
                also: also_from.iter().map(|g| (*g).to_owned()).collect(),
            },
        },
        groups_from: mcp_gate::GroupsFrom::Configured,
    }
}

async fn respond_as(h: &Harness, token: &str, id: &str) -> (StatusCode, Value) {
    rest(
        h,
        token,
        "POST",
        &format!("/v1/mcp/elicitations/{id}/respond"),
        json!({"confirmed": true}),
    )
    .await
}

/// Issue 50, item 1: a call two people of `sre` must approve. The agent learns so; the first
/// approval (on the page) is counted and shown with who and when; the same person again,
/// through another token and the REST API, is not a second approval; the requester's own
/// membership counts for nothing; nor does a grant ride on it; the second person's approval
/// runs the call, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_two_people_must_approve_runs_after_the_second_and_one_person_counts_once() {
    let h = harness_with(vec![quorum_rule(&[])]).await;
    let held = agent_call(&h, json!({"path": "/prod"}), None).await;
    let id = held_id(&held);
    let message = held["structuredContent"]["elicitation"]["message"]
        .as_str()
        .unwrap();
    assert!(
        message.contains("2 people must approve it (members of the approver group \"sre\"), not the person the agent acts for."),
        "{message}"
    );

    let mut bob = Browser::sign_in(&h, BOB).await.unwrap();
    let approved = bob
        .post(&format!("/approvals/{id}/respond"), "decision=approve")
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    assert_eq!(approved.headers["location"], "/approvals?done=counted");
    let page = bob.get().await;
    let item = page.body.split(&format!("id=\"e-{id}\"")).nth(1).unwrap();
    let item = &item[..item.find("</article>").unwrap()];
    assert!(
        item.contains("Needs 2 approvals (from <strong>sre</strong>): 1 so far")
            && item.contains("You approved it")
            && !item.contains(">Approve<"),
        "{item}"
    );
    let still = agent_call(&h, json!({"path": "/prod"}), Some(&id)).await;
    assert_eq!(
        held_id(&still),
        id,
        "one approval of two runs nothing: {still}"
    );

    // Bob again, another token: counted once.
    let (status, body) = respond_as(&h, BOB_AGAIN, &id).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["outcome"], "counted", "{body}");
    let approval = &body["elicitation"]["approval"];
    assert_eq!(approval["approvers_needed"], 2, "{body}");
    assert_eq!(approval["approvals"].as_array().unwrap().len(), 1, "{body}");
    // The requester, though a member of sre, counts for nothing.
    let (status, body) = respond_as(&h, ALICE_SRE, &id).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // Nor may the second approver make a grant of it.
    let (status, body) = rest(
        &h,
        DAVE,
        "POST",
        &format!("/v1/mcp/elicitations/{id}/respond"),
        json!({"confirmed": true, "grant": {"scope": "call", "for": "1h"}}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(h.deleted.load(Ordering::SeqCst), 0);

    let (status, body) = respond_as(&h, DAVE, &id).await;
    assert_eq!(
        (status, &body["outcome"]),
        (StatusCode::OK, &json!("recorded")),
        "{body}"
    );
    let done = agent_call(&h, json!({"path": "/prod"}), Some(&id)).await;
    assert_eq!(done["content"][0]["text"], "deleted", "{done}");
    assert_eq!(h.deleted.load(Ordering::SeqCst), 1);
}

/// "One from sre and one from security": two people of sre leave it waiting for security;
/// a person of security alone sees it and completes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_needing_one_from_each_group_waits_for_the_missing_group() {
    let h = harness_with(vec![quorum_rule(&["security"])]).await;
    let id = held_id(&agent_call(&h, json!({"path": "/prod"}), None).await);
    for token in [BOB, DAVE] {
        let (status, body) = respond_as(&h, token, &id).await;
        assert_eq!(
            (status, &body["outcome"]),
            (StatusCode::OK, &json!("counted")),
            "{body}"
        );
        assert_eq!(
            body["elicitation"]["approval"]["waiting_for"],
            json!(["security"]),
            "{body}"
        );
    }
    let still = agent_call(&h, json!({"path": "/prod"}), Some(&id)).await;
    assert_eq!(held_id(&still), id, "{still}");
    let (status, listed) = rest(
        &h,
        ERIN,
        "GET",
        "/v1/mcp/elicitations?for=approval",
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(
        listed["elicitations"].as_array().unwrap().len(),
        1,
        "{listed}"
    );
    let (status, body) = respond_as(&h, ERIN, &id).await;
    assert_eq!(
        (status, &body["outcome"]),
        (StatusCode::OK, &json!("recorded")),
        "{body}"
    );
    let done = agent_call(&h, json!({"path": "/prod"}), Some(&id)).await;
    assert_eq!(done["content"][0]["text"], "deleted", "{done}");
}

fn four_eyes_rule() -> mcp_gate::ApproverRule {
    mcp_gate::ApproverRule {
        tools: "test__*".into(),
        approval: elicitation_store::Approval::of_group(
            "sre",
            elicitation_store::ApprovalMode::FourEyes,
        ),
        groups_from: mcp_gate::GroupsFrom::Configured,
    }
}

async fn delegate(h: &Harness, token: &str, to: &str) -> (StatusCode, Value) {
    rest(
        h,
        token,
        "POST",
        "/v1/mcp/delegations",
        json!({"to": to, "for": "3d"}),
    )
    .await
}

/// Issue 50, item 3: Bob (sre) is away; Carol (in no group) answers for him. She sees and
/// approves Alice's four-eyes call, recorded with both names; the page shows whose delegate
/// she is. The requester cannot approve through a delegation (hers handed to Carol, or Bob's
/// handed to her), and once Bob ends it Carol sees and answers nothing.
// Long: one delegation across the REST API and the page, then each attack on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegate_answers_for_someone_away_but_never_for_the_requester_nor_after_it_ends() {
    let h = harness_with(vec![four_eyes_rule()]).await;
    // Carol has no groups: nothing of hers to hand over.
    let (status, body) = delegate(&h, CAROL, "bob").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, made) = delegate(&h, BOB, "carol").await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(made["status"], "live", "{made}");
    assert_eq!(made["groups"], json!(["sre"]), "{made}");
    let (status, listed) = rest(&h, CAROL, "GET", "/v1/mcp/delegations", Value::Null).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["delegations"][0]["id"], made["id"], "{listed}");

    let id = held_id(&agent_call(&h, json!({"path": "/prod"}), None).await);
    let (status, waiting) = rest(
        &h,
        CAROL,
        "GET",
        "/v1/mcp/elicitations?for=approval",
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{waiting}");
    assert_eq!(waiting["elicitations"][0]["id"], json!(id), "{waiting}");
    assert_eq!(
        waiting["elicitations"][0]["delegated_by"]["subject"], "bob",
        "{waiting}"
    );
    let mut carol = Browser::sign_in(&h, CAROL).await.unwrap();
    let page = carol.get().await;
    assert!(
        page.body.contains("as bob&#39;s delegate") || page.body.contains("as bob's delegate"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("You answer for <strong>bob</strong>"),
        "{}",
        page.body
    );
    let approved = carol
        .post(&format!("/approvals/{id}/respond"), "decision=approve")
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    let done = agent_call(&h, json!({"path": "/prod"}), Some(&id)).await;
    assert_eq!(done["content"][0]["text"], "deleted", "{done}");
    let (_, answered) = rest(
        &h,
        AGENT,
        "GET",
        &format!("/v1/mcp/elicitations/{id}"),
        Value::Null,
    )
    .await;
    let by = answered["answered_by"].as_str().unwrap_or_default();
    assert!(by.contains("carol") && by.contains("for bob"), "{answered}");

    // The requester through a delegation: Alice's own, handed to Carol ...
    let (status, alices) = delegate(&h, ALICE_SRE, "carol").await;
    assert_eq!(status, StatusCode::CREATED, "{alices}");
    let next = held_id(&agent_call(&h, json!({"path": "/prod/2"}), None).await);
    let (status, body) = rest(
        &h,
        BOB,
        "DELETE",
        &format!("/v1/mcp/delegations/{}", made["id"].as_str().unwrap()),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "revoked", "{body}");
    let (status, body) = respond_as(&h, CAROL, &next).await;
    assert!(
        status == StatusCode::FORBIDDEN || status == StatusCode::NOT_FOUND,
        "carol for alice on alice's own call, or for bob after it ended: {status} {body}"
    );
    // ... and Bob's handed to Alice.
    let (status, to_alice) = delegate(&h, BOB, "alice").await;
    assert_eq!(status, StatusCode::CREATED, "{to_alice}");
    let (status, body) = respond_as(&h, HUMAN, &next).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let still = agent_call(&h, json!({"path": "/prod/2"}), Some(&next)).await;
    assert_eq!(held_id(&still), next, "{still}");
    assert_eq!(h.deleted.load(Ordering::SeqCst), 1);

    // After Bob's delegation to Carol ended she lists nothing of it (Alice's own call is
    // no one's to answer through Alice's delegation).
    let (_, waiting) = rest(
        &h,
        CAROL,
        "GET",
        "/v1/mcp/elicitations?for=approval",
        Value::Null,
    )
    .await;
    assert_eq!(waiting["elicitations"], json!([]), "{waiting}");
}

/// Issue 50, item 4, "one click makes the grant": after a person approved five calls of a
/// tool under one folder, the sixth such call is shown with "Approve and allow calls where
/// …" (the shape they approved); one click approves it and grants that `when` for a while:
/// the next call under the folder runs without asking, one elsewhere is held. A call of
/// another shape is offered no such button.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_click_grants_the_shape_of_the_calls_a_person_kept_approving() {
    let h = harness().await;
    let mut alice = Browser::sign_in(&h, HUMAN).await.unwrap();
    for i in 0..5 {
        let args = json!({"path": format!("/srv/notes/{i}.txt")});
        let id = held_id(&agent_call(&h, args.clone(), None).await);
        alice.get().await;
        let approved = alice
            .post(&format!("/approvals/{id}/respond"), "decision=approve")
            .await;
        assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
        agent_call(&h, args, Some(&id)).await;
    }
    let elsewhere = held_id(&agent_call(&h, json!({"path": "/etc/hosts"}), None).await);
    let sixth = held_id(&agent_call(&h, json!({"path": "/srv/notes/5.txt"}), None).await);
    let page = alice.get().await;
    let item = |id: &str| {
        let item = page.body.split(&format!("id=\"e-{id}\"")).nth(1).unwrap();
        item[..item.find("</article>").unwrap()].to_owned()
    };
    let offered = item(&sixth);
    assert!(
        offered.contains(
            "Approve and allow calls where <code>args.path.startsWith(&#39;/srv/notes/&#39;)"
        ) || offered
            .contains("Approve and allow calls where <code>args.path.startsWith('/srv/notes/')"),
        "{offered}"
    );
    assert!(
        !item(&elsewhere).contains("value=\"grant_when\""),
        "another shape"
    );
    let when = "args.path.startsWith('/srv/notes/') && !args.path.contains('/../') && !args.path.endsWith('/..')";
    let form = format!(
        "decision=grant_when&grant_for=15m&grant_when={}",
        when.replace('/', "%2F")
            .replace('\'', "%27")
            .replace(' ', "+")
            .replace('&', "%26")
            .replace('(', "%28")
            .replace(')', "%29")
            .replace('!', "%21")
    );
    let granted = alice
        .post(&format!("/approvals/{sixth}/respond"), &form)
        .await;
    assert_eq!(granted.status, StatusCode::SEE_OTHER, "{}", granted.body);
    let ran = agent_call(&h, json!({"path": "/srv/notes/5.txt"}), Some(&sixth)).await;
    assert_eq!(ran["content"][0]["text"], "deleted", "{ran}");
    let next = agent_call(&h, json!({"path": "/srv/notes/6.txt"}), None).await;
    assert_eq!(
        next["content"][0]["text"], "deleted",
        "under the grant: {next}"
    );
    let outside = agent_call(&h, json!({"path": "/srv/other/6.txt"}), None).await;
    assert!(
        outside["structuredContent"]["elicitation"]["id"].is_string(),
        "outside the shape it is asked: {outside}"
    );
    assert_eq!(h.deleted.load(Ordering::SeqCst), 7);
}
