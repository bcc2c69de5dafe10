//! The gateway's own OAuth clients at a module's authorization server (feature `http`):
//! `client_credentials`, and `token_exchange` (RFC 8693) of the caller's own token.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use http::HeaderValue;
use serde_json::Value;

use super::{CredentialError, Credentials, SUBJECT_TOKEN, SubjectTokens};

/// `kind = "client_credentials"`: what the gateway's OAuth client is.
#[derive(Clone)]
pub struct ClientCredentialsConfig {
    /// The module's name (in errors).
    pub module: String,
    /// The module's URL: the `resource` of every token asked for (RFC 8707).
    pub resource: String,
    /// The client's id at the authorization server.
    pub client_id: String,
    /// Its secret.
    pub client_secret: String,
    /// The scopes asked for.
    pub scopes: Vec<String>,
    /// The authorization server's issuer; `None`: the one the module names (RFC 9728),
    /// when it is on the module's own host.
    pub issuer: Option<String>,
    /// The TLS roots the authorization server's certificate is checked against (`auth`'s
    /// `ca_file`); `None`: the platform's.
    pub roots: Option<Arc<rustls::ClientConfig>>,
}

/// The HTTP client of an OAuth exchange (mcp-fetch's policy): no redirects, a 10 s limit,
/// never an environment's proxy (which could see a secret in clear on an http:// loopback
/// server), answers read up to [`MAX_ANSWER`] bytes, and `roots` to check the server's
/// certificate against (else the platform's).
pub(crate) fn oauth_client(
    roots: Option<&Arc<rustls::ClientConfig>>,
) -> Result<mcp_fetch::Fetch, String> {
    mcp_fetch::Fetch::new(mcp_fetch::Options {
        roots: roots.cloned(),
        ..mcp_fetch::Options::new(MAX_ANSWER)
    })
    .map_err(|e| format!("the OAuth client: {e}"))
}

/// Where tokens come from, once found.
#[derive(Clone)]
struct Endpoint {
    token_url: String,
    /// `client_secret_basic` (else `client_secret_post`).
    basic: bool,
}

/// A token and when to get the next one.
struct Cached {
    value: HeaderValue,
    refresh_at: Instant,
}

/// The gateway's OAuth client for one module: a token cached until shortly before it
/// expires, fetched by one caller at a time (the others wait for it), forgotten when the
/// module refuses it.
pub struct ClientCredentials {
    config: ClientCredentialsConfig,
    http: mcp_fetch::Fetch,
    token: tokio::sync::Mutex<Option<Cached>>,
    endpoint: tokio::sync::Mutex<Option<Endpoint>>,
    /// The protected resource metadata URL the module's last challenge named.
    hint: std::sync::Mutex<Option<String>>,
    /// The grant, in errors.
    label: &'static str,
}

/// A URL's scheme and host (lower case), what "the module's own host" compares.
fn host_of(url: &str) -> Option<(String, String)> {
    let uri = url.parse::<http::Uri>().ok()?;
    Some((
        uri.scheme_str()?.to_ascii_lowercase(),
        uri.host()?.to_ascii_lowercase(),
    ))
}

/// Most bytes read of a metadata document or a token answer.
pub(crate) const MAX_ANSWER: usize = 64 * 1024;

/// The `resource_metadata` parameter of a `Bearer` challenge.
pub fn resource_metadata(challenge: &str) -> Option<String> {
    let at = challenge.find("resource_metadata=")?;
    let rest = &challenge[at + "resource_metadata=".len()..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => rest.split([',', ' ']).next().unwrap_or_default(),
    };
    (!value.is_empty()).then(|| value.to_owned())
}

/// When to fetch again a token that lives `lifetime`: 30 s before it ends, or halfway
/// through a shorter life.
fn refresh_after(lifetime: Duration) -> Duration {
    if lifetime > Duration::from_secs(60) {
        lifetime - Duration::from_secs(30)
    } else {
        lifetime / 2
    }
}

impl ClientCredentials {
    /// The client; it fetches nothing until asked.
    pub fn new(config: ClientCredentialsConfig) -> Result<Self, String> {
        if let Some(issuer) = &config.issuer
            && !mcp_fetch::secure_or_loopback(issuer)
        {
            return Err(format!(
                "auth.issuer {issuer:?} must be https:// (or http:// on this machine)"
            ));
        }
        let http = oauth_client(config.roots.as_ref())?;
        Ok(ClientCredentials {
            config,
            http,
            token: tokio::sync::Mutex::new(None),
            endpoint: tokio::sync::Mutex::new(None),
            hint: std::sync::Mutex::new(None),
            label: "client_credentials",
        })
    }

    fn failed(&self, what: impl std::fmt::Display) -> String {
        format!(
            "getting a token for module {} ({}): {what}",
            self.config.module, self.label
        )
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        self.http.get_object(url).await.map_err(|e| self.failed(e))
    }

    /// The issuer: configured, or named by the module's protected resource metadata — and
    /// then only one on the module's own host, so a module cannot send the gateway's
    /// secret to a server of its choosing.
    async fn issuer(&self) -> Result<Option<String>, String> {
        if let Some(issuer) = &self.config.issuer {
            return Ok(Some(issuer.clone()));
        }
        let hint = self
            .hint
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let Some(metadata_url) = hint else {
            return Ok(None);
        };
        // Only from the module's own host: the module names the URL.
        if host_of(&metadata_url) != host_of(&self.config.resource) {
            return Err(self.failed(format!(
                "the module names its metadata at {metadata_url}, on another host than its own"
            )));
        }
        let metadata = self.get_json(&metadata_url).await?;
        let resource = metadata.get("resource").and_then(Value::as_str);
        if resource.map(|r| r.trim_end_matches('/'))
            != Some(self.config.resource.trim_end_matches('/'))
        {
            return Err(self.failed(format!(
                "its protected resource metadata is for {:?}, not {:?}",
                mcp_fetch::printable(resource.unwrap_or_default()),
                self.config.resource
            )));
        }
        let issuer = metadata
            .get("authorization_servers")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .ok_or_else(|| {
                self.failed("its protected resource metadata names no authorization server")
            })?
            .to_owned();
        if host_of(&issuer) != host_of(&self.config.resource) {
            return Err(self.failed(format!(
                "the module names the authorization server {}, on another host than its own; set auth.issuer = {:?} to trust it",
                mcp_fetch::printable(&issuer),
                mcp_fetch::printable(&issuer)
            )));
        }
        Ok(Some(issuer))
    }

    /// The token endpoint (RFC 8414, else OpenID discovery), found once.
    async fn endpoint(&self) -> Result<Option<Endpoint>, String> {
        let mut known = self.endpoint.lock().await;
        if let Some(endpoint) = &*known {
            return Ok(Some(endpoint.clone()));
        }
        let Some(issuer) = self.issuer().await? else {
            return Ok(None);
        };
        // An issuer the module named is held to its own host throughout: its RFC 8414
        // metadata only (not a path under the issuer, which the module may serve), and a
        // token endpoint on the issuer's host.
        let discovered = self.config.issuer.is_none();
        let trimmed = issuer.trim_end_matches('/');
        let uri: http::Uri = trimmed
            .parse()
            .map_err(|_| self.failed(format!("issuer {issuer:?} is not a URL")))?;
        let origin = format!(
            "{}://{}",
            uri.scheme_str().unwrap_or("https"),
            uri.authority().map(|a| a.as_str()).unwrap_or_default()
        );
        let path = uri.path().trim_end_matches('/');
        let mut candidates = vec![format!(
            "{origin}/.well-known/oauth-authorization-server{path}"
        )];
        if !discovered {
            candidates.push(format!("{trimmed}/.well-known/openid-configuration"));
        }
        let mut last = String::new();
        for url in candidates {
            match self.get_json(&url).await {
                Ok(metadata) => {
                    let named = metadata.get("issuer").and_then(Value::as_str);
                    if named.map(|n| n.trim_end_matches('/')) != Some(trimmed) {
                        return Err(self.failed(format!(
                            "{url} is the metadata of {named:?}, not of {issuer:?}"
                        )));
                    }
                    let token_url = metadata
                        .get("token_endpoint")
                        .and_then(Value::as_str)
                        .filter(|u| mcp_fetch::endpoint_of(trimmed, u))
                        .ok_or_else(|| {
                            self.failed(format!("{url} names no https:// token_endpoint"))
                        })?
                        .to_owned();
                    if discovered && host_of(&token_url) != host_of(&issuer) {
                        return Err(self.failed(format!(
                            "{url} puts the token endpoint on another host than the authorization server's; set auth.issuer to trust it"
                        )));
                    }
                    let methods: Vec<&str> = metadata
                        .get("token_endpoint_auth_methods_supported")
                        .and_then(Value::as_array)
                        .map(|m| m.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    let basic = methods.is_empty() || methods.contains(&"client_secret_basic");
                    let endpoint = Endpoint { token_url, basic };
                    *known = Some(endpoint.clone());
                    return Ok(Some(endpoint));
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    async fn fetch(&self, endpoint: &Endpoint) -> Result<Cached, String> {
        let mut form = vec![
            ("grant_type", "client_credentials".to_owned()),
            ("resource", self.config.resource.clone()),
        ];
        if !self.config.scopes.is_empty() {
            form.push(("scope", self.config.scopes.join(" ")));
        }
        self.grant(endpoint, form).await
    }

    /// Asks the token endpoint for a token with the `form` of a grant (the client's own
    /// authentication added).
    async fn grant(
        &self,
        endpoint: &Endpoint,
        mut form: Vec<(&'static str, String)>,
    ) -> Result<Cached, String> {
        let mut request = self.http.client().post(&endpoint.token_url);
        if endpoint.basic {
            let id: String =
                form_urlencoded::byte_serialize(self.config.client_id.as_bytes()).collect();
            let secret: String =
                form_urlencoded::byte_serialize(self.config.client_secret.as_bytes()).collect();
            request = request.basic_auth(id, Some(secret));
        } else {
            form.push(("client_id", self.config.client_id.clone()));
            form.push(("client_secret", self.config.client_secret.clone()));
        }
        let body: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
            .finish();
        let response = request
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| self.failed(format!("{}: {e}", endpoint.token_url)))?;
        let mcp_fetch::Answer { status, body, .. } = self
            .http
            .read(response)
            .await
            .map_err(|e| self.failed(format!("{}: {e}", endpoint.token_url)))?;
        let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if !status.is_success() {
            // The server's own words, never ours: the request held the secret.
            let error = mcp_fetch::printable(
                answer
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("no error code"),
            );
            let description = answer
                .get("error_description")
                .and_then(Value::as_str)
                .map(|d| format!(": {}", mcp_fetch::printable(d)))
                .unwrap_or_default();
            return Err(self.failed(format!(
                "the authorization server refused ({status}): {error}{description}"
            )));
        }
        let token = answer
            .get("access_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| self.failed("the answer holds no access_token"))?;
        if let Some(kind) = answer.get("token_type").and_then(Value::as_str)
            && !kind.eq_ignore_ascii_case("bearer")
        {
            return Err(self.failed(format!("token_type {kind:?} is not Bearer")));
        }
        let lifetime = Duration::from_secs(
            answer
                .get("expires_in")
                .and_then(Value::as_u64)
                .unwrap_or(60)
                .clamp(1, 24 * 3600),
        );
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| self.failed("the access_token is not a valid header value"))?;
        value.set_sensitive(true);
        tracing::debug!(module = %self.config.module, expires_in = lifetime.as_secs(), "got a token for the module");
        Ok(Cached {
            value,
            refresh_at: Instant::now() + refresh_after(lifetime),
        })
    }
}

#[async_trait]
impl Credentials for ClientCredentials {
    fn kind(&self) -> &'static str {
        "client_credentials"
    }

    async fn authorization(&self) -> Result<Option<HeaderValue>, CredentialError> {
        // One fetch at a time: the others wait for its token.
        let mut token = self.token.lock().await;
        if let Some(cached) = &*token
            && Instant::now() < cached.refresh_at
        {
            return Ok(Some(cached.value.clone()));
        }
        let Some(endpoint) = self.endpoint().await? else {
            return Ok(None);
        };
        let fresh = self.fetch(&endpoint).await?;
        let value = fresh.value.clone();
        *token = Some(fresh);
        Ok(Some(value))
    }

    async fn refused(&self, used: Option<&HeaderValue>, challenge: Option<&str>) -> bool {
        let learned = challenge.and_then(resource_metadata).is_some_and(|url| {
            let mut hint = self
                .hint
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let new = hint.as_deref() != Some(url.as_str());
            *hint = Some(url);
            new
        });
        let mut token = self.token.lock().await;
        let forgot = match (&*token, used) {
            (Some(cached), Some(used)) if cached.value == used => {
                *token = None;
                true
            }
            // Refreshed by another request meanwhile: that one may do.
            (Some(_), Some(_)) => true,
            _ => false,
        };
        learned || forgot || (used.is_none() && self.config.issuer.is_some())
    }
}

/// The RFC 8693 grant type.
const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// The type of the token exchanged (and asked for).
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// Most callers whose latest token one module's exchange keeps.
const MAX_SUBJECTS: usize = 10_000;

/// `kind = "token_exchange"` (RFC 8693): each caller's own access token (mode `jwt`),
/// exchanged by the gateway's client at the identity provider for one whose audience is the
/// module; each caller's instance keeps the token it got until shortly before it ends, for
/// the same subject token.
pub struct TokenExchange {
    client: ClientCredentials,
    /// The identity provider, as the subject tokens name it (`iss`).
    issuer: String,
    /// Each caller's latest access token, by instance key, with when it was presented: for
    /// a request that does not carry one of its own (a module's stream, a prompt).
    latest: std::sync::Mutex<std::collections::HashMap<String, (Arc<str>, Instant)>>,
}

impl TokenExchange {
    /// The exchange of module `config.module` at `config.issuer` (required).
    pub fn new(config: ClientCredentialsConfig) -> Result<Self, String> {
        let Some(issuer) = config.issuer.clone() else {
            return Err("auth kind \"token_exchange\" needs auth.issuer: the identity provider that exchanges the callers' tokens".into());
        };
        let mut client = ClientCredentials::new(config)?;
        client.label = "token_exchange";
        Ok(TokenExchange {
            client,
            issuer: issuer.trim_end_matches('/').to_owned(),
            latest: std::sync::Mutex::default(),
        })
    }

    /// The module's name.
    pub fn module(&self) -> &str {
        &self.client.config.module
    }

    /// Whether `token` (a verified JWT) was issued by this exchange's identity provider:
    /// only those are sent to it (a token of another issuer the gateway trusts is not
    /// handed to this one).
    fn issued_here(&self, token: &str) -> bool {
        use base64::Engine as _;
        let claims = token.split('.').nth(1).and_then(|payload| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(payload.trim_end_matches('='))
                .ok()
        });
        let iss = claims
            .and_then(|c| serde_json::from_slice::<Value>(&c).ok())
            .and_then(|c| c.get("iss").and_then(Value::as_str).map(str::to_owned));
        iss.is_some_and(|iss| iss.trim_end_matches('/') == self.issuer)
    }

    /// The token a request of `who` is exchanged from: the request's own, else the
    /// caller's latest.
    fn subject(&self, who: &str) -> Result<Arc<str>, CredentialError> {
        let own = SUBJECT_TOKEN.try_with(Arc::clone).ok();
        let subject = own.or_else(|| {
            self.latest
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(who)
                .map(|(token, _)| token.clone())
        });
        match subject {
            Some(token) if self.issued_here(&token) => Ok(token),
            Some(_) => Err(CredentialError::Failed(self.client.failed(
                "the caller's token is not one of auth.issuer's; it is not exchanged",
            ))),
            None => Err(CredentialError::Failed(self.client.failed(
                "the caller presented no access token of its own to exchange (auth mode \"jwt\")",
            ))),
        }
    }

    async fn exchange(&self, subject: &str) -> Result<Cached, CredentialError> {
        let Some(endpoint) = self.client.endpoint().await? else {
            return Err(CredentialError::Failed(
                self.client
                    .failed("the identity provider's token endpoint is not known"),
            ));
        };
        let mut form = vec![
            ("grant_type", TOKEN_EXCHANGE.to_owned()),
            ("subject_token", subject.to_owned()),
            ("subject_token_type", ACCESS_TOKEN_TYPE.to_owned()),
            ("requested_token_type", ACCESS_TOKEN_TYPE.to_owned()),
            ("resource", self.client.config.resource.clone()),
        ];
        if !self.client.config.scopes.is_empty() {
            form.push(("scope", self.client.config.scopes.join(" ")));
        }
        Ok(self.client.grant(&endpoint, form).await?)
    }
}

impl SubjectTokens for TokenExchange {
    /// Caller `who` presented `token` (its latest request).
    fn present(&self, who: &str, token: &str) {
        if !self.issued_here(token) {
            return;
        }
        let mut latest = self
            .latest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if latest.get(who).is_some_and(|(known, _)| &**known == token) {
            return;
        }
        if latest.len() >= MAX_SUBJECTS && !latest.contains_key(who) {
            // The callers seen least recently make room.
            let mut by_age: Vec<Instant> = latest.values().map(|(_, at)| *at).collect();
            by_age.sort_unstable();
            let cutoff = by_age[by_age.len() / 2];
            latest.retain(|_, (_, at)| *at > cutoff);
        }
        latest.insert(who.to_owned(), (Arc::from(token), Instant::now()));
    }
}

/// One caller's credentials at a module of kind `token_exchange`: the token exchanged from
/// the subject token, kept for that subject token until shortly before it ends (one
/// exchange at a time for this caller).
pub struct PersonExchange {
    exchange: Arc<TokenExchange>,
    who: String,
    /// The exchanged token and the subject token it came from.
    cached: tokio::sync::Mutex<Option<(Arc<str>, Cached)>>,
}

impl PersonExchange {
    /// Caller `who`'s (an instance key) credentials at `exchange`'s module.
    pub fn new(exchange: Arc<TokenExchange>, who: String) -> Self {
        PersonExchange {
            exchange,
            who,
            cached: tokio::sync::Mutex::new(None),
        }
    }
}

#[async_trait]
impl Credentials for PersonExchange {
    fn kind(&self) -> &'static str {
        "token_exchange"
    }

    async fn authorization(&self) -> Result<Option<HeaderValue>, CredentialError> {
        let subject = self.exchange.subject(&self.who)?;
        let mut cached = self.cached.lock().await;
        if let Some((from, token)) = &*cached
            && *from == subject
            && Instant::now() < token.refresh_at
        {
            return Ok(Some(token.value.clone()));
        }
        let fresh = self.exchange.exchange(&subject).await?;
        let value = fresh.value.clone();
        *cached = Some((subject, fresh));
        Ok(Some(value))
    }

    async fn refused(&self, used: Option<&HeaderValue>, _challenge: Option<&str>) -> bool {
        let mut cached = self.cached.lock().await;
        match (&*cached, used) {
            (Some((_, token)), Some(used)) if token.value == used => {
                *cached = None;
                true
            }
            (Some(_), Some(_)) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_challenge_names_its_metadata_quoted_or_not() {
        assert_eq!(
            resource_metadata(r#"Bearer error="invalid_token", resource_metadata="https://m.example/.well-known/oauth-protected-resource/mcp""#).as_deref(),
            Some("https://m.example/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            resource_metadata("Bearer resource_metadata=https://m.example/prm, scope=x").as_deref(),
            Some("https://m.example/prm")
        );
        assert_eq!(resource_metadata("Bearer realm=x"), None);
    }

    #[test]
    fn a_token_is_fetched_again_before_it_ends() {
        assert_eq!(
            refresh_after(Duration::from_secs(300)),
            Duration::from_secs(270)
        );
        assert_eq!(
            refresh_after(Duration::from_secs(4)),
            Duration::from_secs(2)
        );
    }

    /// A tiny authorization server on loopback: its RFC 8414 metadata and a token endpoint
    /// that counts the tokens it gives (each a new one), slowly, so callers overlap.
    async fn authorization_server() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}", listener.local_addr().unwrap());
        let issued = Arc::new(AtomicUsize::new(0));
        let (base, count) = (issuer.clone(), issued.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let (base, count) = (base.clone(), count.clone());
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        let Ok(n) = socket.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        request.extend_from_slice(&buf[..n]);
                    }
                    let text = String::from_utf8_lossy(&request).into_owned();
                    let body = if text.starts_with("GET /.well-known/oauth-authorization-server") {
                        serde_json::json!({"issuer": base, "token_endpoint": format!("{base}/token")})
                    } else {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                        serde_json::json!({"access_token": format!("token-{n}"), "token_type": "Bearer", "expires_in": 300})
                    }
                    .to_string();
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(reply.as_bytes()).await;
                });
            }
        });
        (issuer, issued)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_requests_at_once_fetch_one_token_and_a_refused_one_is_replaced_once() {
        use std::sync::atomic::Ordering;
        let (issuer, issued) = authorization_server().await;
        let client = Arc::new(
            ClientCredentials::new(ClientCredentialsConfig {
                module: "notes".into(),
                resource: "http://127.0.0.1:9/mcp".into(),
                client_id: "gw".into(),
                client_secret: "s3cret".into(),
                scopes: vec!["notes.write".into()],
                issuer: Some(issuer),
                roots: None,
            })
            .unwrap(),
        );
        let mut asking = Vec::new();
        for _ in 0..20 {
            let client = client.clone();
            asking.push(tokio::spawn(async move { client.authorization().await }));
        }
        let mut values = Vec::new();
        for task in asking {
            values.push(task.await.unwrap().unwrap().unwrap());
        }
        assert_eq!(
            issued.load(Ordering::SeqCst),
            1,
            "one fetch for twenty requests"
        );
        assert!(values.iter().all(|v| v == "Bearer token-1"));
        // The module refuses it: forgotten, and the next request gets a new one; a second
        // refusal of an older token (a request that raced) changes nothing.
        assert!(client.refused(Some(&values[0]), None).await);
        let fresh = client.authorization().await.unwrap().unwrap();
        assert_eq!(fresh, "Bearer token-2");
        assert!(
            client.refused(Some(&values[1]), None).await,
            "already replaced: ask again"
        );
        assert_eq!(
            client.authorization().await.unwrap().unwrap(),
            "Bearer token-2"
        );
        assert_eq!(issued.load(Ordering::SeqCst), 2);
    }

    /// A test CA and a certificate it signed for `localhost`: (CA PEM, cert DER, key DER).
    fn test_pki() -> (
        String,
        rustls_pki_types::CertificateDer<'static>,
        rustls_pki_types::PrivateKeyDer<'static>,
    ) {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let key = rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        (issuer.pem(), cert.der().clone(), key)
    }

    /// An authorization server over https on loopback (a thread per connection, rustls):
    /// its RFC 8414 metadata and a token endpoint. Its issuer, `https://localhost:PORT`.
    fn tls_authorization_server(
        cert: rustls_pki_types::CertificateDer<'static>,
        key: rustls_pki_types::PrivateKeyDer<'static>,
    ) -> String {
        use std::io::{Read, Write};
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::aws_lc_rs::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap(),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let issuer = format!(
            "https://localhost:{}",
            listener.local_addr().unwrap().port()
        );
        let base = issuer.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let (Ok(stream), config, base) = (stream, config.clone(), base.clone()) else {
                    continue;
                };
                std::thread::spawn(move || {
                    let Ok(connection) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(connection, stream);
                    let mut request = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let body = if request.starts_with(b"GET /.well-known/oauth-authorization-server") {
                        serde_json::json!({"issuer": base, "token_endpoint": format!("{base}/token")})
                    } else {
                        serde_json::json!({"access_token": "tls-token", "token_type": "Bearer", "expires_in": 300})
                    }
                    .to_string();
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = tls.write_all(reply.as_bytes());
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                });
            }
        });
        issuer
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_authorization_server_is_trusted_through_its_ca_file_only() {
        let (ca, cert, key) = test_pki();
        let issuer = tls_authorization_server(cert, key);
        let dir = std::env::temp_dir().join(format!("mcp-oauth-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, ca).unwrap();
        let client = |roots: Option<Arc<rustls::ClientConfig>>| {
            ClientCredentials::new(ClientCredentialsConfig {
                module: "notes".into(),
                resource: "https://localhost:9/mcp".into(),
                client_id: "gw".into(),
                client_secret: "s3cret".into(),
                scopes: vec![],
                issuer: Some(issuer.clone()),
                roots,
            })
            .unwrap()
        };
        let roots = crate::tls::client_config(&crate::tls::TlsFiles {
            ca_file: Some(ca_file),
            ..Default::default()
        })
        .unwrap();
        let trusted = client(Some(roots)).authorization().await.unwrap().unwrap();
        assert_eq!(trusted, "Bearer tls-token");
        // With the platform's roots the test CA vouches for nothing: no token, and why.
        let refused = client(None).authorization().await.unwrap_err().to_string();
        assert!(
            refused.contains("module notes (client_credentials)"),
            "{refused}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
