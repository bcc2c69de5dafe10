//! Mode `jwt`: access tokens of trusted issuers, for this gateway, accepted; every way a token
//! can be wrong refused with 401 and a challenge that points at the protected resource
//! metadata (or 403 `insufficient_scope` with the scope to step up to); keys rotated without a
//! restart; an unreachable issuer's keys kept for the grace period, then refused.
//!
//! Tokens are signed here with keys made for the test (ES256 and EdDSA by ring, RS256 from a
//! test-only key in `fixtures/`), so each refusal is exactly one thing wrong.

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use bytes::Bytes;
use elicitation_store::{MemoryStore, Store};
use gating_core::GatePolicy;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mcp_auth::Auth;
use mcp_auth::jwt::{IssuerConfig, JwksSource, JwtAuth, JwtConfig, ScopeNames};
use mcp_gate::Gateway;
use mcp_http::service::{McpService, ServiceConfig};
use mcp_upstream::inproc::{InProcessModule, InProcessTool, text_result};
use mcp_upstream::registry::{ModuleSpec, Registry};
use ring::rand::SystemRandom;
use ring::signature::{self, KeyPair as _};
use serde_json::{Value, json};

const ISSUER: &str = "https://idp.example.com/";
const RESOURCE: &str = "https://gw.example.com/mcp";
static DIRS: AtomicUsize = AtomicUsize::new(0);

/// A signing key of the test's issuer, with its public JWK.
struct SigningKey {
    kid: String,
    alg: Algorithm,
    encoding: EncodingKey,
    jwk: Value,
}

impl SigningKey {
    fn es256(kid: &str) -> SigningKey {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = signature::EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        let pair = signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
        let point = pair.public_key().as_ref();
        SigningKey {
            kid: kid.into(),
            alg: Algorithm::ES256,
            encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk: json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
                "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..65])}),
        }
    }

    fn eddsa(kid: &str) -> SigningKey {
        let rng = SystemRandom::new();
        let pkcs8 = signature::Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let pair = signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        SigningKey {
            kid: kid.into(),
            alg: Algorithm::EdDSA,
            encoding: EncodingKey::from_ed_der(pkcs8.as_ref()),
            jwk: json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "use": "sig", "alg": "EdDSA",
                "x": B64.encode(pair.public_key().as_ref())}),
        }
    }

    fn rs256(kid: &str) -> SigningKey {
        // A test-only key (PKCS#1 DER), never used anywhere else.
        let der = std::fs::read(fixture("jwt_rsa_test_key.der")).unwrap();
        let mut jwk: Value =
            serde_json::from_slice(&std::fs::read(fixture("jwt_rsa_test_key.pub.json")).unwrap())
                .unwrap();
        jwk["kid"] = json!(kid);
        jwk["alg"] = json!("RS256");
        SigningKey {
            kid: kid.into(),
            alg: Algorithm::RS256,
            encoding: EncodingKey::from_rsa_der(&der),
            jwk,
        }
    }

    fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).unwrap()
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// Valid claims: this issuer, this audience, a minute to live, the scope to call tools.
fn claims() -> Value {
    json!({"iss": ISSUER, "aud": RESOURCE, "sub": "alice", "iat": now(), "nbf": now() - 5,
           "exp": now() + 60, "scope": "openid mcp.tools"})
}

fn write_jwks(path: &Path, keys: &[&SigningKey]) {
    let set = json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()});
    std::fs::write(path, set.to_string()).unwrap();
}

fn issuer(jwks: JwksSource, grace: Duration) -> IssuerConfig {
    IssuerConfig {
        issuer: ISSUER.into(),
        name: "idp".into(),
        jwks,
        algorithms: vec![Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA],
        grace,
        refresh_interval: Duration::from_secs(300),
        min_refresh_interval: Duration::ZERO,
    }
}

struct Harness {
    service: McpService,
    jwks_file: PathBuf,
    /// The key file's directory, where the harness made one (`harness`).
    _dir: Option<Scratch>,
    /// What the verifier reads `now` from: moved instead of sleeping.
    clock: Arc<elicitation_store::ManualClock>,
}

/// The directory of a test's key files, removed when the test ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn harness_with(issuer: IssuerConfig, jwks_file: PathBuf) -> Harness {
    let module = InProcessModule::new(
        "test",
        vec![InProcessTool::new(
            json!({"name": "echo", "description": "Echoes.", "inputSchema": {"type": "object"},
                   "annotations": {"readOnlyHint": true}}),
            |_| Ok(text_result("echo", false)),
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
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let gateway = Arc::new(Gateway::new(registry, store, GatePolicy::default(), true));
    let jwt = JwtAuth::new(JwtConfig {
        resource: RESOURCE.into(),
        issuers: vec![issuer],
        scopes: ScopeNames {
            tools_call: "mcp.tools".into(),
            respond: "mcp.approve".into(),
            create: "mcp.ask".into(),
            metrics: "mcp.metrics".into(),
            catalog: "mcp.catalog".into(),
            audit: "mcp.audit".into(),
        },
        tenant_claim: Some("org".into()),
        groups_claim: "groups".into(),
        leeway: Duration::from_secs(5),
    })
    .unwrap();
    let clock = Arc::new(elicitation_store::ManualClock::new(
        time::OffsetDateTime::now_utc(),
    ));
    let jwt = Arc::new(jwt.with_clock(clock.clone()));
    jwt.refresh_all().await;
    Harness {
        service: McpService::new(gateway, Auth::Jwt(jwt), ServiceConfig::default()),
        jwks_file,
        _dir: None,
        clock,
    }
}

async fn harness(keys: &[&SigningKey]) -> Harness {
    let dir = std::env::temp_dir().join(format!(
        "mcp-jwt-{}-{}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("jwks.json");
    write_jwks(&file, keys);
    Harness {
        _dir: Some(Scratch(dir)),
        ..harness_with(
            issuer(JwksSource::File(file.clone()), Duration::from_secs(3600)),
            file,
        )
        .await
    }
}

struct Answer {
    status: StatusCode,
    challenge: String,
    body: Value,
}

async fn send(service: &McpService, method: &str, path: &str, token: Option<&str>) -> Answer {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "gw.example.com");
    let mut body = String::new();
    if path == "/mcp" {
        body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "test__echo", "arguments": {}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}}})
        .to_string();
        request = request
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "test__echo")
            .header("accept", "application/json")
            .header("content-type", "application/json");
    }
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = service
        .handle(request.body(Full::new(Bytes::from(body))).unwrap())
        .await;
    let status = response.status();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        challenge,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

const METADATA: &str =
    "resource_metadata=\"https://gw.example.com/.well-known/oauth-protected-resource/mcp\"";

fn assert_refused(answer: &Answer, what: &str) {
    assert_eq!(
        answer.status,
        StatusCode::UNAUTHORIZED,
        "{what}: {:?}",
        answer.body
    );
    assert!(
        answer.challenge.starts_with("Bearer ")
            && answer.challenge.contains(METADATA)
            && answer.challenge.contains("error=\"invalid_token\"")
            && answer
                .challenge
                .contains("scope=\"mcp.tools mcp.approve mcp.ask\""),
        "{what}: {}",
        answer.challenge
    );
}

fn assert_accepted(answer: &Answer, what: &str) {
    assert_eq!(answer.status, StatusCode::OK, "{what}: {:?}", answer.body);
    assert_eq!(
        answer.body["result"]["content"][0]["text"], "echo",
        "{what}: {:?}",
        answer.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_of_each_configured_algorithm_are_accepted() {
    let (rsa, ec, ed) = (
        SigningKey::rs256("r1"),
        SigningKey::es256("e1"),
        SigningKey::eddsa("d1"),
    );
    let h = harness(&[&rsa, &ec, &ed]).await;
    for key in [&rsa, &ec, &ed] {
        let answer = send(&h.service, "POST", "/mcp", Some(&key.sign(&claims()))).await;
        assert_accepted(&answer, &format!("{:?}", key.alg));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_wrong_token_is_refused_with_a_challenge_that_names_the_metadata() {
    let key = SigningKey::es256("k1");
    let stranger = SigningKey::es256("k1");
    let h = harness(&[&key]).await;
    let with = |patch: Value| {
        let mut c = claims();
        for (k, v) in patch.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    let payload = B64.encode(claims().to_string());
    let rsa_public_pem = std::fs::read(fixture("jwt_rsa_test_key.pub.pem")).unwrap();
    let hs256_with_public_key = {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("k1".into());
        // The attack: sign with HMAC, using a public key (the issuer's JWK as published, or a
        // PEM) as the secret, hoping the verifier uses it as one.
        let secret = key.jwk.to_string();
        let a = jsonwebtoken::encode(
            &header,
            &claims(),
            &EncodingKey::from_secret(secret.as_bytes()).unwrap(),
        )
        .unwrap();
        let b = jsonwebtoken::encode(
            &header,
            &claims(),
            &EncodingKey::from_secret(&rsa_public_pem).unwrap(),
        )
        .unwrap();
        [a, b]
    };
    let cases: Vec<(&str, String)> = vec![
        ("expired", key.sign(&with(json!({"exp": now() - 120})))),
        (
            "not yet valid",
            key.sign(&with(json!({"nbf": now() + 120}))),
        ),
        (
            "wrong issuer",
            key.sign(&with(json!({"iss": "https://evil.example.com/"}))),
        ),
        (
            "wrong audience",
            key.sign(&with(json!({"aud": "https://other.example.com/mcp"}))),
        ),
        ("no audience", {
            let mut c = claims();
            c.as_object_mut().unwrap().remove("aud");
            key.sign(&c)
        }),
        ("no expiry", {
            let mut c = claims();
            c.as_object_mut().unwrap().remove("exp");
            key.sign(&c)
        }),
        (
            "alg none",
            format!("{}.{payload}.", B64.encode(r#"{"alg":"none","kid":"k1"}"#)),
        ),
        ("alg none, signature kept", {
            let good = key.sign(&claims());
            let signature = good.rsplit('.').next().unwrap().to_owned();
            format!(
                "{}.{payload}.{signature}",
                B64.encode(r#"{"alg":"none","kid":"k1"}"#)
            )
        }),
        (
            "HS256 with the JWK as secret",
            hs256_with_public_key[0].clone(),
        ),
        (
            "HS256 with a public PEM as secret",
            hs256_with_public_key[1].clone(),
        ),
        ("unknown kid", {
            let mut other = SigningKey::es256("k2");
            other.kid = "k2".into();
            other.sign(&claims())
        }),
        (
            "signed by another key under the same kid",
            stranger.sign(&claims()),
        ),
        ("tampered claims", {
            let good = key.sign(&claims());
            let parts: Vec<&str> = good.split('.').collect();
            let forged = B64.encode(with(json!({"sub": "admin"})).to_string());
            format!("{}.{forged}.{}", parts[0], parts[2])
        }),
        ("not a JWT", "not-a-jwt".into()),
    ];
    for (what, token) in &cases {
        let answer = send(&h.service, "POST", "/mcp", Some(token)).await;
        assert_refused(&answer, what);
    }
    // No token at all: 401, a challenge without an error, pointing at the metadata.
    let none = send(&h.service, "POST", "/mcp", None).await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED);
    assert!(
        none.challenge.contains(METADATA) && !none.challenge.contains("error="),
        "{}",
        none.challenge
    );
    // The right token still works after all that.
    assert_accepted(
        &send(&h.service, "POST", "/mcp", Some(&key.sign(&claims()))).await,
        "valid",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_the_scope_gets_403_insufficient_scope_with_the_scope_to_ask_for() {
    let key = SigningKey::es256("k1");
    let h = harness(&[&key]).await;
    let mut c = claims();
    c["scope"] = json!("openid mcp.approve");
    let answer = send(&h.service, "POST", "/mcp", Some(&key.sign(&c))).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{:?}", answer.body);
    assert!(
        answer.challenge.contains("error=\"insufficient_scope\"")
            && answer.challenge.contains("scope=\"mcp.tools\"")
            && answer.challenge.contains(METADATA),
        "{}",
        answer.challenge
    );
    // `scp` as an array (some identity providers) grants the same.
    let mut c = claims();
    c.as_object_mut().unwrap().remove("scope");
    c["scp"] = json!(["mcp.tools"]);
    assert_accepted(
        &send(&h.service, "POST", "/mcp", Some(&key.sign(&c))).await,
        "scp",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protected_resource_metadata_names_the_issuer_and_scopes() {
    let key = SigningKey::es256("k1");
    let h = harness(&[&key]).await;
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let answer = send(&h.service, "GET", path, None).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}");
        assert_eq!(
            answer.body,
            json!({"resource": RESOURCE, "authorization_servers": [ISSUER],
                   "scopes_supported": ["mcp.tools", "mcp.approve", "mcp.ask"],
                   "bearer_methods_supported": ["header"], "resource_name": "mcp-gateway"})
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_rotate_without_a_restart() {
    let (old, new) = (SigningKey::es256("2026-11"), SigningKey::eddsa("2026-12"));
    let h = harness(&[&old]).await;
    assert_accepted(
        &send(&h.service, "POST", "/mcp", Some(&old.sign(&claims()))).await,
        "old",
    );
    // The new key is not published yet: refused.
    assert_refused(
        &send(&h.service, "POST", "/mcp", Some(&new.sign(&claims()))).await,
        "unpublished",
    );
    // Published beside the old one: a token naming it makes the gateway fetch again.
    write_jwks(&h.jwks_file, &[&old, &new]);
    assert_accepted(
        &send(&h.service, "POST", "/mcp", Some(&new.sign(&claims()))).await,
        "new",
    );
    assert_accepted(
        &send(&h.service, "POST", "/mcp", Some(&old.sign(&claims()))).await,
        "old still",
    );
    // The old key is withdrawn: once the set is fetched again, its tokens are refused.
    write_jwks(&h.jwks_file, &[&new]);
    let probe = SigningKey::es256("unknown");
    assert_refused(
        &send(&h.service, "POST", "/mcp", Some(&probe.sign(&claims()))).await,
        "probe",
    );
    assert_refused(
        &send(&h.service, "POST", "/mcp", Some(&old.sign(&claims()))).await,
        "withdrawn",
    );
    assert_accepted(
        &send(&h.service, "POST", "/mcp", Some(&new.sign(&claims()))).await,
        "new still",
    );
}

/// A JWKS endpoint on loopback that can be stopped (the issuer going down).
async fn serve_jwks(body: String) -> (String, tokio::task::JoinHandle<()>) {
    serve(None, body).await
}

/// An endpoint on loopback answering every request with `body`, or with a redirect to
/// `redirect`.
async fn serve(redirect: Option<String>, body: String) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let body = body.clone();
            let redirect = redirect.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_req| {
                    let body = body.clone();
                    let redirect = redirect.clone();
                    async move {
                        let mut response = http::Response::builder();
                        if let Some(to) = redirect {
                            response = response.status(302).header("location", to);
                        }
                        Ok::<_, std::convert::Infallible>(
                            response
                                .header("content-type", "application/json")
                                .header("cache-control", "max-age=60")
                                // No kept-alive connection outlives the server.
                                .header("connection", "close")
                                .body(Full::new(Bytes::from(body)))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (url, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_issuer_keeps_working_for_the_grace_period_then_fails_closed() {
    let key = SigningKey::es256("k1");
    let (url, server) = serve_jwks(json!({"keys": [key.jwk]}).to_string()).await;
    let mut config = issuer(JwksSource::Url(url), Duration::from_secs(2));
    config.refresh_interval = Duration::from_secs(1);
    let h = harness_with(config, PathBuf::new()).await;
    assert_accepted(
        &send(&h.service, "POST", "/mcp", Some(&key.sign(&claims()))).await,
        "fetched",
    );
    server.abort();
    let _ = server.await;
    // Down, within the grace period: the cached key still works.
    assert_accepted(
        &send(&h.service, "POST", "/mcp", Some(&key.sign(&claims()))).await,
        "within grace",
    );
    // Past it: refused, whatever the token.
    h.clock.advance(time::Duration::milliseconds(2500));
    assert_refused(
        &send(&h.service, "POST", "/mcp", Some(&key.sign(&claims()))).await,
        "past grace",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_token_is_refused_once_it_expires_past_grace_or_its_key_is_withdrawn() {
    // The very same token string each time: after its first verification it is remembered.
    let key = SigningKey::es256("k1");
    let h = harness(&[&key]).await;
    let token = key.sign(&claims());
    for n in 0..3 {
        assert_accepted(
            &send(&h.service, "POST", "/mcp", Some(&token)).await,
            &format!("#{n}"),
        );
    }
    write_jwks(&h.jwks_file, &[]);
    let probe = SigningKey::es256("unknown");
    assert_refused(
        &send(&h.service, "POST", "/mcp", Some(&probe.sign(&claims()))).await,
        "probe",
    );
    assert_refused(
        &send(&h.service, "POST", "/mcp", Some(&token)).await,
        "withdrawn key",
    );

    // Expiry: within the leeway (5 s) it is accepted, then refused. Expired by the
    // harness's clock, which stands still (by the system's, the clock moved on 3.5 s would
    // not reach past the leeway where this test took over 1.5 s to get here).
    write_jwks(&h.jwks_file, &[&key]);
    let mut c = claims();
    c["exp"] = json!(elicitation_store::Clock::now(&*h.clock).unix_timestamp() - 3);
    let expiring = key.sign(&c);
    assert_accepted(
        &send(&h.service, "POST", "/mcp", Some(&expiring)).await,
        "within leeway",
    );
    h.clock.advance(time::Duration::milliseconds(3500));
    assert_refused(
        &send(&h.service, "POST", "/mcp", Some(&expiring)).await,
        "expired",
    );

    // Grace: an issuer gone for longer than its grace period fails even remembered tokens.
    let (url, server) = serve_jwks(json!({"keys": [key.jwk]}).to_string()).await;
    let mut config = issuer(JwksSource::Url(url), Duration::from_secs(2));
    config.refresh_interval = Duration::from_secs(1);
    let h = harness_with(config, PathBuf::new()).await;
    let token = key.sign(&claims());
    assert_accepted(
        &send(&h.service, "POST", "/mcp", Some(&token)).await,
        "fetched",
    );
    server.abort();
    let _ = server.await;
    assert_accepted(
        &send(&h.service, "POST", "/mcp", Some(&token)).await,
        "remembered",
    );
    h.clock.advance(time::Duration::milliseconds(2500));
    assert_refused(
        &send(&h.service, "POST", "/mcp", Some(&token)).await,
        "past grace",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_never_fetched_through_a_redirect_away_from_https() {
    // The issuer's JWKS URL redirects to plain http on another host: the keys are not
    // fetched from there, and tokens are refused. (This machine reaches no other host, so
    // the refusal itself is the redirect policy's decision, `mcp_fetch::secure_or_loopback`,
    // unit tested there with the user-information trick; here: such a redirect never yields
    // keys.)
    let key = SigningKey::es256("k1");
    let (url, _server) = serve(
        Some("http://keys.example.com/jwks".into()),
        json!({"keys": [key.jwk]}).to_string(),
    )
    .await;
    let h = harness_with(
        issuer(JwksSource::Url(url), Duration::from_secs(3600)),
        PathBuf::new(),
    )
    .await;
    assert_refused(
        &send(&h.service, "POST", "/mcp", Some(&key.sign(&claims()))).await,
        "redirected keys",
    );
    // A redirect that stays on loopback is followed.
    let (target, _keys) = serve_jwks(json!({"keys": [key.jwk]}).to_string()).await;
    let (url, _server) = serve(Some(target), String::new()).await;
    let h = harness_with(
        issuer(JwksSource::Url(url), Duration::from_secs(3600)),
        PathBuf::new(),
    )
    .await;
    assert_accepted(
        &send(&h.service, "POST", "/mcp", Some(&key.sign(&claims()))).await,
        "loopback redirect",
    );
}

const REALM_A: &str = "https://kc.example.com/realms/a";
const REALM_B: &str = "https://kc.example.com/realms/b";

/// Two Keycloak realms on one host, each with its own keys and the default name; a
/// destructive tool whose confirmations a four-eyes group `sre` answers. The key files'
/// directory goes when the returned guard drops.
async fn two_realms(
    a: &SigningKey,
    b: &SigningKey,
    tenant_claim: Option<&str>,
) -> (McpService, Scratch) {
    use mcp_auth::jwt::default_issuer_name;
    let dir = std::env::temp_dir().join(format!(
        "mcp-jwt-realms-{}-{}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let realm = |iss: &str, key: &SigningKey, file: &str| {
        let path = dir.join(file);
        write_jwks(&path, &[key]);
        IssuerConfig {
            issuer: iss.into(),
            name: default_issuer_name(iss),
            ..issuer(JwksSource::File(path), Duration::from_secs(3600))
        }
    };
    let module = InProcessModule::new(
        "test",
        vec![InProcessTool::new(
            json!({"name": "delete", "description": "Deletes.", "inputSchema": {"type": "object"},
                   "annotations": {"destructiveHint": true}}),
            |_| Ok(text_result("deleted", false)),
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
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let gateway = Arc::new(
        Gateway::new(registry, store, GatePolicy::default(), true).with_approvers(vec![
            mcp_gate::ApproverRule {
                tools: "test__*".into(),
                approval: elicitation_store::Approval {
                    group: "sre".into(),
                    mode: elicitation_store::ApprovalMode::FourEyes,
                    quorum: elicitation_store::Quorum::default(),
                },
                groups_from: mcp_gate::GroupsFrom::CallersIssuer,
            },
        ]),
    );
    let jwt = JwtAuth::new(JwtConfig {
        resource: RESOURCE.into(),
        issuers: vec![realm(REALM_A, a, "a.json"), realm(REALM_B, b, "b.json")],
        scopes: ScopeNames {
            tools_call: "mcp.tools".into(),
            respond: "mcp.approve".into(),
            create: "mcp.ask".into(),
            metrics: "mcp.metrics".into(),
            catalog: "mcp.catalog".into(),
            audit: "mcp.audit".into(),
        },
        tenant_claim: tenant_claim.map(str::to_owned),
        groups_claim: "groups".into(),
        leeway: Duration::from_secs(5),
    })
    .unwrap();
    let jwt = Arc::new(jwt);
    jwt.refresh_all().await;
    (
        McpService::new(gateway, Auth::Jwt(jwt), ServiceConfig::default()),
        Scratch(dir),
    )
}

/// A token of `iss` for `sub` with `scope` and `groups`.
fn realm_token(key: &SigningKey, iss: &str, sub: &str, scope: &str, groups: &[&str]) -> String {
    key.sign(
        &json!({"iss": iss, "aud": RESOURCE, "sub": sub, "iat": now(), "nbf": now() - 5,
        "exp": now() + 60, "scope": scope, "groups": groups}),
    )
}

/// A request with a JSON body and a bearer token: status and body.
async fn request(
    service: &McpService,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "gw.example.com")
        .header("authorization", format!("Bearer {token}"))
        .header("accept", "application/json")
        .header("content-type", "application/json");
    if path == "/mcp" {
        request = request
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "test__delete");
    }
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let response = service
        .handle(request.body(Full::new(Bytes::from(body))).unwrap())
        .await;
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// On today's main both realms were named `kc.example.com`: realm b's `alice` read,
/// cancelled and approved realm a's `alice`'s held call, and realm b's `sre` answered realm
/// a's four-eyes confirmations. Now each realm is its own name, its own callers and its own
/// groups; a token without a `sub` is nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_issuers_on_one_host_are_two_sets_of_callers_and_groups() {
    let (a, b) = (SigningKey::es256("a1"), SigningKey::es256("b1"));
    let (service, _dir) = two_realms(&a, &b, None).await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "test__delete", "arguments": {"path": "/prod"}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}});
    let alice_a = realm_token(&a, REALM_A, "alice", "mcp.tools mcp.approve", &[]);
    let (status, held) = request(&service, "POST", "/mcp", &alice_a, Some(call.clone())).await;
    assert_eq!(status, StatusCode::OK, "{held}");
    let id = held["result"]["structuredContent"]["elicitation"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("held: {held}"))
        .to_owned();
    let path = format!("/v1/mcp/elicitations/{id}");
    let approve = json!({"confirmed": true});

    // Realm b's alice is not realm a's: she finds nothing to read, cancel or approve.
    let alice_b = realm_token(&b, REALM_B, "alice", "mcp.tools mcp.approve", &[]);
    let (status, _) = request(&service, "GET", &path, &alice_b, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = request(
        &service,
        "POST",
        &format!("{path}/respond"),
        &alice_b,
        Some(approve.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = request(&service, "POST", &format!("{path}/cancel"), &alice_b, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Realm b's "sre" is not realm a's: it cannot answer realm a's four-eyes confirmation.
    let sre_b = realm_token(&b, REALM_B, "bob", "mcp.approve", &["sre"]);
    let (status, body) = request(
        &service,
        "POST",
        &format!("{path}/respond"),
        &sre_b,
        Some(approve.clone()),
    )
    .await;
    assert!(
        status == StatusCode::NOT_FOUND || status == StatusCode::FORBIDDEN,
        "another issuer's group answered: {status} {body}"
    );
    let (status, again) = request(&service, "POST", "/mcp", &alice_a, Some(call.clone())).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        again["result"]["structuredContent"]["elicitation"]["id"].is_string(),
        "still held: {again}"
    );

    // Realm a's own sre answers it, and the agent's re-call runs.
    let sre_a = realm_token(&a, REALM_A, "carol", "mcp.approve", &["sre"]);
    let (status, body) = request(
        &service,
        "POST",
        &format!("{path}/respond"),
        &sre_a,
        Some(approve),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, ran) = request(&service, "POST", "/mcp", &alice_a, Some(call.clone())).await;
    assert_eq!(ran["result"]["content"][0]["text"], "deleted", "{ran}");

    // A token whose sub is empty (or missing) is refused.
    for sub in [json!(""), json!("  ")] {
        let token = a.sign(
            &json!({"iss": REALM_A, "aud": RESOURCE, "sub": sub, "iat": now(),
            "nbf": now() - 5, "exp": now() + 60, "scope": "mcp.tools"}),
        );
        let (status, body) = request(&service, "POST", "/mcp", &token, Some(call.clone())).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "sub {sub}: {body}");
    }
    let token = a.sign(&json!({"iss": REALM_A, "aud": RESOURCE, "iat": now(),
        "nbf": now() - 5, "exp": now() + 60, "scope": "mcp.tools"}));
    let (status, _) = request(&service, "POST", "/mcp", &token, Some(call)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "no sub");
}

/// Within one issuer, a group is the tenant's: tenant b's `sre` answers none of tenant a's
/// confirmations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_group_counts_only_within_its_tenant() {
    let (a, b) = (SigningKey::es256("a1"), SigningKey::es256("b1"));
    let (service, _dir) = two_realms(&a, &b, Some("org")).await;
    let token = |sub: &str, org: &str, scope: &str, groups: &[&str]| {
        a.sign(
            &json!({"iss": REALM_A, "aud": RESOURCE, "sub": sub, "iat": now(),
            "nbf": now() - 5, "exp": now() + 60, "scope": scope, "groups": groups, "org": org}),
        )
    };
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "test__delete", "arguments": {"path": "/prod"}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}});
    let alice = token("alice", "acme", "mcp.tools", &[]);
    let (_, held) = request(&service, "POST", "/mcp", &alice, Some(call)).await;
    let id = held["result"]["structuredContent"]["elicitation"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("held: {held}"))
        .to_owned();
    let respond = format!("/v1/mcp/elicitations/{id}/respond");
    let approve = json!({"confirmed": true});
    let other_tenant = token("bob", "globex", "mcp.approve", &["sre"]);
    let (status, body) = request(
        &service,
        "POST",
        &respond,
        &other_tenant,
        Some(approve.clone()),
    )
    .await;
    assert!(
        status == StatusCode::NOT_FOUND || status == StatusCode::FORBIDDEN,
        "another tenant's group answered: {status} {body}"
    );
    let same_tenant = token("carol", "acme", "mcp.approve", &["sre"]);
    let (status, body) = request(&service, "POST", &respond, &same_tenant, Some(approve)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[test]
fn two_issuers_with_one_name_are_refused() {
    let file = |n: &str| JwksSource::File(PathBuf::from(format!("/nonexistent/{n}.json")));
    let named = |iss: &str, name: &str, n: &str| IssuerConfig {
        issuer: iss.into(),
        name: name.into(),
        ..issuer(file(n), Duration::from_secs(3600))
    };
    let config = |issuers| JwtConfig {
        resource: RESOURCE.into(),
        issuers,
        scopes: ScopeNames {
            tools_call: "t".into(),
            respond: "r".into(),
            create: "c".into(),
            metrics: "m".into(),
            catalog: "k".into(),
            audit: "a".into(),
        },
        tenant_claim: None,
        groups_claim: "groups".into(),
        leeway: Duration::ZERO,
    };
    let Err(err) = JwtAuth::new(config(vec![
        named(REALM_A, "kc", "a"),
        named(REALM_B, "kc", "b"),
    ])) else {
        panic!("one name for two issuers is refused");
    };
    let err = err.to_string();
    assert!(err.contains("both named \"kc\""), "{err}");
    let Err(err) = JwtAuth::new(config(vec![named(REALM_A, "corp@x", "a")])) else {
        panic!("a name with @ is refused");
    };
    let err = err.to_string();
    assert!(err.contains("without '@'"), "{err}");
    for bad in ["corp#x", "https://corp"] {
        let Err(err) = JwtAuth::new(config(vec![named(REALM_A, bad, "a")])) else {
            panic!("name {bad:?} is refused");
        };
        assert!(err.to_string().contains("must be 1 to 256"), "{err}");
    }
    assert_ne!(
        mcp_auth::jwt::default_issuer_name(REALM_A),
        mcp_auth::jwt::default_issuer_name(REALM_B),
        "two realms on one host have two default names"
    );
    assert_eq!(
        mcp_auth::jwt::default_issuer_name("https://idp.example.com/"),
        "idp.example.com"
    );
}

/// The OAuth client a token was issued to (`azp`, else `client_id`) is the principal's
/// `client`, recorded with what it asks for; a token that names none, or names one that is
/// not a short printable string, has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tokens_client_is_the_principals() {
    let key = SigningKey::es256("e1");
    let dir = std::env::temp_dir().join(format!(
        "mcp-jwt-client-{}-{}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("jwks.json");
    write_jwks(&file, &[&key]);
    let jwt = JwtAuth::new(JwtConfig {
        resource: RESOURCE.into(),
        issuers: vec![issuer(JwksSource::File(file), Duration::from_secs(3600))],
        scopes: ScopeNames::default(),
        tenant_claim: None,
        groups_claim: "groups".into(),
        leeway: Duration::from_secs(5),
    })
    .unwrap();
    jwt.refresh_all().await;
    let with = |extra: Value| {
        let mut claims = claims();
        for (k, v) in extra.as_object().unwrap() {
            claims[k] = v.clone();
        }
        key.sign(&claims)
    };
    for (extra, expected) in [
        (
            json!({"azp": "cursor", "client_id": "other"}),
            Some("cursor"),
        ),
        (json!({"client_id": "claude-code"}), Some("claude-code")),
        (json!({}), None),
        (json!({"azp": "evil\nline"}), None),
        (json!({"azp": 7}), None),
    ] {
        let principal = jwt.principal(&with(extra.clone())).await.unwrap();
        assert_eq!(principal.client.as_deref(), expected, "{extra}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
