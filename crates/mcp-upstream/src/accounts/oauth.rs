//! The OAuth client a person connects an account through (feature `http`).
//!
//! Where the authorization server is: the configured `issuer`, or the one the module's
//! protected resource metadata (RFC 9728) names. A discovered server gets no secret of the
//! gateway's: it is used only with a client it registered (RFC 7591, a public client; PKCE
//! protects the code) — a configured client secret goes only to a configured issuer.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde_json::Value;

use super::{Connect, RefreshError, RegisteredClient, TokenSet};
use mcp_fetch::printable;

/// A module's `auth.kind = "user"`.
#[derive(Clone)]
pub struct UserOAuthConfig {
    /// The module's name.
    pub module: String,
    /// The module's URL: the `resource` of every token (RFC 8707).
    pub resource: String,
    /// A configured client (else one is registered at the server).
    pub client: Option<RegisteredClient>,
    /// The scopes asked for.
    pub scopes: Vec<String>,
    /// The authorization server's issuer (else the one the module names).
    pub issuer: Option<String>,
    /// The TLS roots the server's certificate is checked against; `None`: the platform's.
    pub roots: Option<Arc<rustls::ClientConfig>>,
}

/// An authorization server as its metadata describes it.
#[derive(Debug, Clone)]
struct Server {
    issuer: String,
    /// The server sends `iss` with its answer (RFC 9207): the callback must carry it.
    iss_parameter: bool,
    authorization_endpoint: String,
    token_endpoint: String,
    registration_endpoint: Option<String>,
    /// `client_secret_basic` (else `client_secret_post`) for a client with a secret.
    basic: bool,
}

/// The gateway's OAuth client for the people of one module: finds the authorization server
/// (once), registers a client there when none is configured (once per process), builds the
/// authorization request and redeems codes and refresh tokens.
pub struct UserOAuth {
    pub(super) config: UserOAuthConfig,
    http: mcp_fetch::Fetch,
    server: tokio::sync::Mutex<Option<Server>>,
    registered: tokio::sync::Mutex<Option<(String, RegisteredClient)>>,
}

pub(super) fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn encode(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

impl UserOAuth {
    /// The client; it asks nothing until a person connects.
    pub fn new(config: UserOAuthConfig) -> Result<Self, String> {
        if let Some(issuer) = &config.issuer
            && !mcp_fetch::secure_or_loopback(issuer)
        {
            return Err(format!(
                "auth.issuer {issuer:?} must be https:// (or http:// on this machine)"
            ));
        }
        if config.client.as_ref().is_some_and(|c| c.secret.is_some()) && config.issuer.is_none() {
            return Err(
                "a client secret goes only to a configured authorization server: set auth.issuer"
                    .into(),
            );
        }
        let http = crate::credentials::oauth_client(config.roots.as_ref())?;
        Ok(UserOAuth {
            config,
            http,
            server: tokio::sync::Mutex::new(None),
            registered: tokio::sync::Mutex::new(None),
        })
    }

    fn failed(&self, what: impl std::fmt::Display) -> String {
        format!(
            "connecting an account at module {}: {what}",
            self.config.module
        )
    }

    async fn read(&self, response: reqwest::Response) -> Result<(u16, Value), String> {
        let answer = self.http.read(response).await.map_err(|e| self.failed(e))?;
        Ok((
            answer.status.as_u16(),
            serde_json::from_slice(&answer.body).unwrap_or(Value::Null),
        ))
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        self.http.get_object(url).await.map_err(|e| self.failed(e))
    }

    /// The issuer: configured, or the first the module's RFC 9728 metadata names.
    async fn issuer(&self) -> Result<String, String> {
        if let Some(issuer) = &self.config.issuer {
            return Ok(issuer.clone());
        }
        let uri: http::Uri = self
            .config
            .resource
            .parse()
            .map_err(|_| self.failed("the module's URL"))?;
        let origin = format!(
            "{}://{}",
            uri.scheme_str().unwrap_or("https"),
            uri.authority().map(|a| a.as_str()).unwrap_or_default()
        );
        let path = uri.path().trim_end_matches('/');
        let mut last = String::new();
        for url in [
            format!("{origin}/.well-known/oauth-protected-resource{path}"),
            format!("{origin}/.well-known/oauth-protected-resource"),
        ] {
            match self.get_json(&url).await {
                Ok(metadata) => {
                    return metadata
                        .get("authorization_servers")
                        .and_then(Value::as_array)
                        .and_then(|a| a.first())
                        .and_then(Value::as_str)
                        .filter(|issuer| mcp_fetch::secure_or_loopback(issuer))
                        .map(str::to_owned)
                        .ok_or_else(|| {
                            self.failed(format!(
                                "{url} names no https:// authorization server; set auth.issuer"
                            ))
                        });
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The server's metadata (RFC 8414, else OpenID discovery), found once.
    async fn server(&self) -> Result<Server, String> {
        let mut known = self.server.lock().await;
        if let Some(server) = &*known {
            return Ok(server.clone());
        }
        let issuer = self.issuer().await?;
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
        let mut last = String::new();
        for url in [
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{trimmed}/.well-known/openid-configuration"),
        ] {
            let metadata = match self.get_json(&url).await {
                Ok(metadata) => metadata,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            let named = metadata.get("issuer").and_then(Value::as_str);
            if named.map(|n| n.trim_end_matches('/')) != Some(trimmed) {
                return Err(self.failed(format!(
                    "{url} is the metadata of {:?}, not of {issuer:?}",
                    named.map(printable)
                )));
            }
            let endpoint = |key: &str| {
                metadata
                    .get(key)
                    .and_then(Value::as_str)
                    .filter(|u| mcp_fetch::endpoint_of(trimmed, u))
                    .map(str::to_owned)
            };
            let methods: Vec<&str> = metadata
                .get("code_challenge_methods_supported")
                .and_then(Value::as_array)
                .map(|m| m.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if !methods.is_empty() && !methods.contains(&"S256") {
                return Err(self.failed("the authorization server does not take PKCE S256"));
            }
            let auth_methods: Vec<&str> = metadata
                .get("token_endpoint_auth_methods_supported")
                .and_then(Value::as_array)
                .map(|m| m.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let server = Server {
                issuer: trimmed.to_owned(),
                iss_parameter: metadata
                    .get("authorization_response_iss_parameter_supported")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                authorization_endpoint: endpoint("authorization_endpoint").ok_or_else(|| {
                    self.failed(format!("{url} names no https:// authorization_endpoint"))
                })?,
                token_endpoint: endpoint("token_endpoint").ok_or_else(|| {
                    self.failed(format!("{url} names no https:// token_endpoint"))
                })?,
                registration_endpoint: endpoint("registration_endpoint"),
                basic: auth_methods.is_empty() || auth_methods.contains(&"client_secret_basic"),
            };
            *known = Some(server.clone());
            return Ok(server);
        }
        Err(last)
    }

    /// The client for `redirect_url`: the configured one, or one registered (RFC 7591) once.
    async fn client(
        &self,
        server: &Server,
        redirect_url: &str,
    ) -> Result<RegisteredClient, String> {
        if let Some(client) = &self.config.client {
            return Ok(client.clone());
        }
        let mut registered = self.registered.lock().await;
        if let Some((url, client)) = &*registered
            && url == redirect_url
        {
            return Ok(client.clone());
        }
        let Some(endpoint) = &server.registration_endpoint else {
            return Err(self.failed(
                "the authorization server offers no dynamic client registration; configure auth.client_id",
            ));
        };
        let body = serde_json::json!({
            "client_name": "mcp-gateway",
            "redirect_uris": [redirect_url],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        });
        let response = self
            .http
            .client()
            .post(endpoint)
            .header("accept", "application/json")
            .json(&body)
            .send()
            .await
            .map_err(|e| self.failed(format!("registering a client: {e}")))?;
        let (status, answer) = self.read(response).await?;
        if !(200..300).contains(&status) {
            return Err(self.failed(format!(
                "the authorization server refused to register a client ({status}): {}",
                server_error(&answer)
            )));
        }
        let id = answer
            .get("client_id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| self.failed("the registration answer holds no client_id"))?;
        let client = RegisteredClient {
            id: id.to_owned(),
            secret: answer
                .get("client_secret")
                .and_then(Value::as_str)
                .map(str::to_owned),
        };
        tracing::info!(module = %self.config.module, client_id = %printable(id), "registered the gateway as a client at the module's authorization server");
        *registered = Some((redirect_url.to_owned(), client.clone()));
        Ok(client)
    }

    /// A client as kept with tokens or in a connection under way: a configured client's
    /// secret is the configuration's, never kept.
    fn kept(&self, client: &RegisteredClient) -> RegisteredClient {
        match &self.config.client {
            Some(configured) if configured.id == client.id => RegisteredClient {
                id: client.id.clone(),
                secret: None,
            },
            _ => client.clone(),
        }
    }

    /// A kept client as used: the configured one (with its current secret) when it is that.
    fn resolve(&self, client: &RegisteredClient) -> RegisteredClient {
        match &self.config.client {
            Some(configured) if configured.id == client.id => configured.clone(),
            _ => client.clone(),
        }
    }

    /// New tokens for a refresh token.
    pub async fn refresh(&self, tokens: &TokenSet) -> Result<TokenSet, RefreshError> {
        let Some(refresh) = &tokens.refresh_token else {
            return Err(RefreshError::Refused("no refresh token".into()));
        };
        let server = self.server().await.map_err(RefreshError::Failed)?;
        if tokens.issuer.as_deref().is_some_and(|i| i != server.issuer) {
            // The module's server changed since: its refresh token goes nowhere else.
            return Err(RefreshError::Refused(self.failed(
                "the tokens were issued by another authorization server than the module's now",
            )));
        }
        let client = self.resolve(&tokens.client);
        self.token(
            &server,
            &client,
            &[("grant_type", "refresh_token"), ("refresh_token", refresh)],
            Some(tokens),
        )
        .await
    }

    async fn token(
        &self,
        server: &Server,
        client: &RegisteredClient,
        grant: &[(&str, &str)],
        old: Option<&TokenSet>,
    ) -> Result<TokenSet, RefreshError> {
        let mut form: Vec<(&str, &str)> = grant.to_vec();
        form.push(("resource", &self.config.resource));
        let mut request = self.http.client().post(&server.token_endpoint);
        match &client.secret {
            Some(secret) if server.basic => {
                request = request.basic_auth(encode(&client.id), Some(encode(secret)));
            }
            Some(secret) => {
                form.push(("client_id", &client.id));
                form.push(("client_secret", secret));
            }
            None => form.push(("client_id", &client.id)),
        }
        let body: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let response = request
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| RefreshError::Failed(self.failed(format!("the token endpoint: {e}"))))?;
        let (status, answer) = self.read(response).await.map_err(RefreshError::Failed)?;
        if !(200..300).contains(&status) {
            let why = self.failed(format!(
                "the authorization server refused ({status}): {}",
                server_error(&answer)
            ));
            // A refused grant (invalid_grant: revoked, expired, used) will not get better;
            // anything else (a limit, the server's trouble) may.
            return Err(
                if answer.get("error").and_then(Value::as_str) == Some("invalid_grant") {
                    RefreshError::Refused(why)
                } else {
                    RefreshError::Failed(why)
                },
            );
        }
        let access = answer
            .get("access_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| RefreshError::Failed(self.failed("the answer holds no access_token")))?;
        if let Some(kind) = answer.get("token_type").and_then(Value::as_str)
            && !kind.eq_ignore_ascii_case("bearer")
        {
            return Err(RefreshError::Failed(
                self.failed(format!("token_type {kind:?} is not Bearer")),
            ));
        }
        let text = |key: &str| answer.get(key).and_then(Value::as_str).map(str::to_owned);
        Ok(TokenSet {
            access_token: access.to_owned(),
            // A refresh answer without a new refresh token keeps the old one (RFC 6749 §6).
            refresh_token: text("refresh_token")
                .or_else(|| old.and_then(|o| o.refresh_token.clone())),
            expires_at: answer
                .get("expires_in")
                .and_then(Value::as_i64)
                .map(|s| now_unix().saturating_add(s.clamp(1, 365 * 24 * 3600))),
            scope: text("scope").or_else(|| old.and_then(|o| o.scope.clone())),
            client: self.kept(client),
            issuer: Some(server.issuer.clone()),
        })
    }
}

#[async_trait]
impl Connect for UserOAuth {
    /// The module's name.
    fn module(&self) -> &str {
        &self.config.module
    }

    /// Whether the authorization server's answer came from this module's server: its `iss`
    /// (RFC 9207) must be the issuer when given, and given when the server says it sends it
    /// (a person's code from another server is never redeemed here: the mix-up attack).
    async fn check_issuer(&self, iss: Option<&str>) -> Result<(), String> {
        let server = self.server().await?;
        match iss {
            Some(iss) if iss.trim_end_matches('/') != server.issuer => Err(format!(
                "the answer came from another authorization server ({}) than the module's",
                printable(iss)
            )),
            None if server.iss_parameter => {
                Err("the authorization server's answer does not say who sent it (iss)".into())
            }
            _ => Ok(()),
        }
    }

    /// The authorization request a person's browser is sent to, with the client the code
    /// will be redeemed by (as kept: no configured secret): `state` and the PKCE S256
    /// `challenge` are the caller's.
    async fn authorization_url(
        &self,
        redirect_url: &str,
        state: &str,
        challenge: &str,
    ) -> Result<(String, RegisteredClient), String> {
        let server = self.server().await?;
        let client = self.client(&server, redirect_url).await?;
        let mut url = format!(
            "{}{}response_type=code&client_id={}&redirect_uri={}&state={}&code_challenge={}&code_challenge_method=S256&resource={}",
            server.authorization_endpoint,
            if server.authorization_endpoint.contains('?') {
                '&'
            } else {
                '?'
            },
            encode(&client.id),
            encode(redirect_url),
            encode(state),
            encode(challenge),
            encode(&self.config.resource),
        );
        if !self.config.scopes.is_empty() {
            url.push_str("&scope=");
            url.push_str(&encode(&self.config.scopes.join(" ")));
        }
        Ok((url, self.kept(&client)))
    }

    /// Redeems the code the person came back with.
    async fn redeem(
        &self,
        client: &RegisteredClient,
        code: &str,
        verifier: &str,
        redirect_url: &str,
    ) -> Result<TokenSet, String> {
        let server = self.server().await?;
        let client = self.resolve(client);
        self.token(
            &server,
            &client,
            &[
                ("grant_type", "authorization_code"),
                ("code", code),
                ("redirect_uri", redirect_url),
                ("code_verifier", verifier),
            ],
            None,
        )
        .await
        .map_err(|e| match e {
            RefreshError::Refused(why) | RefreshError::Failed(why) => why,
        })
    }
}

/// An authorization server's error code and description, printable.
fn server_error(answer: &Value) -> String {
    let error = answer
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or("no error code");
    match answer.get("error_description").and_then(Value::as_str) {
        Some(description) => format!("{}: {}", printable(error), printable(description)),
        None => printable(error),
    }
}

/// How long before its expiry a person's token is refreshed.
pub(super) const REFRESH_EARLY: i64 = 30;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounts::{PersonCredentials, Stored, Vault};
    use crate::credentials::Credentials;

    /// An authorization server's metadata on loopback (RFC 8414), with `extra` in it.
    async fn metadata_server(extra: Value) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}", listener.local_addr().unwrap());
        let base = issuer.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let mut body = serde_json::json!({
                    "issuer": base,
                    "authorization_endpoint": format!("{base}/auth"),
                    "token_endpoint": format!("{base}/token"),
                    "code_challenge_methods_supported": ["S256"],
                });
                if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
                    body.extend(extra.clone());
                }
                let body = body.to_string();
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            }
        });
        issuer
    }

    fn oauth(issuer: &str, client: Option<RegisteredClient>) -> UserOAuth {
        UserOAuth::new(UserOAuthConfig {
            module: "notes".into(),
            resource: "http://127.0.0.1:9/mcp".into(),
            client,
            scopes: vec!["notes.write".into()],
            issuer: Some(issuer.into()),
            roots: None,
        })
        .unwrap()
    }

    #[tokio::test]
    async fn an_answer_from_another_server_is_refused() {
        let issuer = metadata_server(Value::Null).await;
        let oauth = oauth(&issuer, None);
        assert!(oauth.check_issuer(Some(&issuer)).await.is_ok());
        assert!(
            oauth.check_issuer(None).await.is_ok(),
            "the server does not send iss"
        );
        let other = oauth.check_issuer(Some("https://evil.example")).await;
        assert!(other.unwrap_err().contains("another authorization server"));
        // A server that says it sends iss must have sent it.
        let strict = metadata_server(serde_json::json!({
            "authorization_response_iss_parameter_supported": true
        }))
        .await;
        let oauth = self::oauth(&strict, None);
        assert!(oauth.check_issuer(None).await.is_err());
        assert!(oauth.check_issuer(Some(&strict)).await.is_ok());
    }

    #[tokio::test]
    async fn a_configured_clients_secret_is_never_kept_and_the_current_one_is_used() {
        let issuer = metadata_server(Value::Null).await;
        let configured = RegisteredClient {
            id: "gw".into(),
            secret: Some("secret-now".into()),
        };
        let oauth = oauth(&issuer, Some(configured.clone()));
        let (url, client) = oauth
            .authorization_url("http://127.0.0.1/cb", "st", "ch")
            .await
            .unwrap();
        assert_eq!(client.secret, None, "not into the browser's cookie");
        assert!(url.starts_with(&format!("{issuer}/auth?response_type=code&client_id=gw&")));
        assert!(url.contains("code_challenge_method=S256") && url.contains("state=st"));
        assert!(url.contains("resource=http%3A%2F%2F127.0.0.1%3A9%2Fmcp"));
        assert_eq!(oauth.resolve(&client), configured);
        // Another (registered) client is used as kept.
        let registered = RegisteredClient {
            id: "dcr-1".into(),
            secret: Some("theirs".into()),
        };
        assert_eq!(oauth.resolve(&registered), registered);
        assert_eq!(oauth.kept(&registered), registered);
    }

    /// An authorization server on loopback whose token endpoint counts refreshes, issues
    /// tokens living `expires_in` seconds, rotates refresh tokens and — as providers with
    /// reuse detection do — refuses a refresh token used before.
    async fn rotating_server(expires_in: i64) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}", listener.local_addr().unwrap());
        let refreshes = Arc::new(AtomicUsize::new(0));
        let (base, count) = (issuer.clone(), refreshes.clone());
        let current = Arc::new(std::sync::Mutex::new("r0".to_owned()));
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let (base, count, current) = (base.clone(), count.clone(), current.clone());
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    let request = loop {
                        let Ok(n) = socket.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&seen).into_owned();
                        if let Some((head, body)) = text.split_once("\r\n\r\n") {
                            let length = head
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase()
                                        .strip_prefix("content-length:")
                                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                                })
                                .unwrap_or(0);
                            if body.len() >= length {
                                break text;
                            }
                        }
                    };
                    let (status, body) = if request.starts_with("POST /token") {
                        let used = request
                            .split("refresh_token=")
                            .nth(1)
                            .and_then(|rest| rest.split('&').next())
                            .unwrap_or_default()
                            .to_owned();
                        let mut latest = current.lock().unwrap();
                        if used == *latest {
                            let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                            *latest = format!("r{n}");
                            (
                                "200 OK",
                                serde_json::json!({"access_token": format!("a{n}"), "token_type": "Bearer",
                                    "expires_in": expires_in, "refresh_token": format!("r{n}")}),
                            )
                        } else {
                            (
                                "400 Bad Request",
                                serde_json::json!({"error": "invalid_grant"}),
                            )
                        }
                    } else {
                        (
                            "200 OK",
                            serde_json::json!({"issuer": base, "authorization_endpoint": format!("{base}/auth"),
                                "token_endpoint": format!("{base}/token"), "code_challenge_methods_supported": ["S256"]}),
                        )
                    };
                    let body = body.to_string();
                    let reply = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(reply.as_bytes()).await;
                });
            }
        });
        (issuer, refreshes)
    }

    /// One person's tokens, kept in memory, versioned as the store keeps them.
    struct OneAccount(std::sync::Mutex<Option<Stored>>);

    #[async_trait]
    impl Vault for OneAccount {
        async fn load(&self, _who: &str, _module: &str) -> Result<Option<Stored>, String> {
            Ok(self.0.lock().unwrap().clone())
        }
        async fn refreshed(
            &self,
            _who: &str,
            _module: &str,
            version: i64,
            tokens: &TokenSet,
        ) -> Result<bool, String> {
            let mut kept = self.0.lock().unwrap();
            match kept.as_mut() {
                Some(stored) if stored.version == version => {
                    *stored = Stored {
                        tokens: tokens.clone(),
                        version: version + 1,
                    };
                    Ok(true)
                }
                _ => Ok(false),
            }
        }
        async fn forget(&self, _who: &str, _module: &str, version: i64) -> Result<(), String> {
            let mut kept = self.0.lock().unwrap();
            if kept.as_ref().is_some_and(|s| s.version == version) {
                *kept = None;
            }
            Ok(())
        }
    }

    /// Issue 44, item 5: 12 calls after the person's token expired sent 3 refreshes and 10
    /// failed (a refresh that issued a short-lived token looked stale to every waiter, which
    /// refreshed again). One refresh serves every request waiting for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_requests_after_expiry_send_one_refresh_and_all_go_through() {
        // New tokens live 20 s: less than the 30 s a token is refreshed early by.
        let (issuer, refreshes) = rotating_server(20).await;
        let vault = Arc::new(OneAccount(std::sync::Mutex::new(Some(Stored {
            tokens: TokenSet {
                access_token: "a0".into(),
                refresh_token: Some("r0".into()),
                expires_at: Some(now_unix() - 60),
                scope: None,
                client: RegisteredClient {
                    id: "c".into(),
                    secret: None,
                },
                issuer: Some(issuer.clone()),
            },
            version: 1,
        }))));
        let credentials = Arc::new(PersonCredentials::new(
            Arc::new(oauth(&issuer, None)),
            vault.clone(),
            "alice".into(),
        ));
        let calls: Vec<_> = (0..12)
            .map(|_| {
                let credentials = credentials.clone();
                tokio::spawn(async move { credentials.authorization().await })
            })
            .collect();
        for call in calls {
            let value = call.await.unwrap().expect("every call goes through");
            assert_eq!(value.unwrap().to_str().unwrap(), "Bearer a1");
        }
        assert_eq!(refreshes.load(std::sync::atomic::Ordering::SeqCst), 1);
        // The new token lives 20 s: the next requests use it rather than refresh it again.
        for _ in 0..5 {
            let value = credentials.authorization().await.unwrap().unwrap();
            assert_eq!(value.to_str().unwrap(), "Bearer a1");
        }
        assert_eq!(refreshes.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(vault.0.lock().unwrap().is_some(), "the account is kept");
    }

    #[tokio::test]
    async fn tokens_of_another_server_are_not_refreshed_there() {
        let issuer = metadata_server(Value::Null).await;
        let oauth = oauth(&issuer, None);
        let tokens = TokenSet {
            access_token: "a".into(),
            refresh_token: Some("r".into()),
            expires_at: None,
            scope: None,
            client: RegisteredClient {
                id: "c".into(),
                secret: None,
            },
            issuer: Some("https://the-old-server.example".into()),
        };
        assert!(matches!(
            oauth.refresh(&tokens).await,
            Err(RefreshError::Refused(why)) if why.contains("another authorization server")
        ));
    }
}
