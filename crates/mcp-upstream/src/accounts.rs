//! Connected accounts (`auth.kind = "user"`): each caller's calls to a module carry that
//! person's own OAuth token at the module's authorization server, got once through the
//! approvals page (authorization code with PKCE, [`UserOAuth`]) and kept in the gateway's
//! store ([`Vault`]); [`PersonCredentials`] sends it, refreshes it when it expires, and says
//! [`CredentialError::NotConnected`] when there is none.
//!
//! Where the authorization server is: the configured `issuer`, or the one the module's
//! protected resource metadata (RFC 9728) names. A discovered server gets no secret of the
//! gateway's: it is used only with a client it registered (RFC 7591, a public client; PKCE
//! protects the code) — a configured client secret goes only to a configured issuer.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use http::HeaderValue;
use serde_json::Value;

use crate::credentials::{CredentialError, Credentials};

/// What an authorization server issued to a person (and the client it issued it to).
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSet {
    /// The access token.
    pub access_token: String,
    /// The refresh token, if any.
    pub refresh_token: Option<String>,
    /// When the access token expires, Unix seconds (`None`: not said).
    pub expires_at: Option<i64>,
    /// The scopes granted.
    pub scope: Option<String>,
    /// The client the tokens were issued to (refreshing needs the same one).
    pub client: RegisteredClient,
}

/// Never prints a token.
impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSet")
            .field("refresh_token", &self.refresh_token.is_some())
            .field("expires_at", &self.expires_at)
            .field("client_id", &self.client.id)
            .finish_non_exhaustive()
    }
}

/// The gateway's client at a person's authorization server: configured, or registered.
#[derive(Clone, PartialEq, Eq)]
pub struct RegisteredClient {
    /// Its id.
    pub id: String,
    /// Its secret (`None`: a public client).
    pub secret: Option<String>,
}

impl std::fmt::Debug for RegisteredClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredClient")
            .field("id", &self.id)
            .field("secret", &self.secret.is_some())
            .finish()
    }
}

/// Where the people's tokens are kept, by the caller's instance key (`who`) and module.
#[async_trait]
pub trait Vault: Send + Sync + 'static {
    /// The caller's tokens at the module.
    async fn load(&self, who: &str, module: &str) -> Result<Option<TokenSet>, String>;
    /// Stores refreshed tokens.
    async fn save(&self, who: &str, module: &str, tokens: &TokenSet) -> Result<(), String>;
    /// Forgets tokens the authorization server no longer takes.
    async fn forget(&self, who: &str, module: &str) -> Result<(), String>;
}

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
}

/// An authorization server as its metadata describes it.
#[derive(Debug, Clone)]
struct Server {
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
    config: UserOAuthConfig,
    http: reqwest::Client,
    server: tokio::sync::Mutex<Option<Server>>,
    registered: tokio::sync::Mutex<Option<(String, RegisteredClient)>>,
}

/// Why a refresh did not give new tokens.
#[derive(Debug)]
pub enum RefreshError {
    /// The server refused the refresh token: the person connects again.
    Refused(String),
    /// The server could not be asked (try again later).
    Failed(String),
}

/// Most bytes read of a metadata document or a token answer.
const MAX_ANSWER: usize = 64 * 1024;

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn encode(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

fn printable(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(200).collect()
}

/// A URL tokens or codes may go to: `https://`, or `http://` to this machine.
fn safe_url(url: &str) -> bool {
    crate::credentials::safe_url(url)
}

impl UserOAuth {
    /// The client; it asks nothing until a person connects.
    pub fn new(config: UserOAuthConfig) -> Result<Self, String> {
        if let Some(issuer) = &config.issuer
            && !safe_url(issuer)
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
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .map_err(|e| format!("the OAuth client: {e}"))?;
        Ok(UserOAuth {
            config,
            http,
            server: tokio::sync::Mutex::new(None),
            registered: tokio::sync::Mutex::new(None),
        })
    }

    /// The module's name.
    pub fn module(&self) -> &str {
        &self.config.module
    }

    fn failed(&self, what: impl std::fmt::Display) -> String {
        format!(
            "connecting an account at module {}: {what}",
            self.config.module
        )
    }

    async fn read(&self, response: reqwest::Response) -> Result<(u16, Value), String> {
        let status = response.status().as_u16();
        let mut response = response;
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.failed(e))? {
            if body.len() + chunk.len() > MAX_ANSWER {
                return Err(self.failed(format!("an answer larger than {MAX_ANSWER} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        if !safe_url(url) {
            return Err(self.failed(format!("{url} is neither https:// nor on this machine")));
        }
        let response = self
            .http
            .get(url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| self.failed(format!("{url}: {e}")))?;
        match self.read(response).await? {
            (200..=299, value) if value.is_object() => Ok(value),
            (200..=299, _) => Err(self.failed(format!("{url}: not a JSON object"))),
            (status, _) => Err(self.failed(format!("{url} answered {status}"))),
        }
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
                        .filter(|issuer| safe_url(issuer))
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
                    .filter(|u| safe_url(u))
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

    /// The authorization request a person's browser is sent to, with the client the code
    /// will be redeemed by: `state` and the PKCE S256 `challenge` are the caller's.
    pub async fn authorization_url(
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
        Ok((url, client))
    }

    /// Redeems the code the person came back with.
    pub async fn redeem(
        &self,
        client: &RegisteredClient,
        code: &str,
        verifier: &str,
        redirect_url: &str,
    ) -> Result<TokenSet, String> {
        let server = self.server().await?;
        self.token(
            &server,
            client,
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

    /// New tokens for a refresh token.
    pub async fn refresh(&self, tokens: &TokenSet) -> Result<TokenSet, RefreshError> {
        let Some(refresh) = &tokens.refresh_token else {
            return Err(RefreshError::Refused("no refresh token".into()));
        };
        let server = self.server().await.map_err(RefreshError::Failed)?;
        self.token(
            &server,
            &tokens.client,
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
        let mut request = self.http.post(&server.token_endpoint);
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
            // A refused grant (invalid_grant: revoked, expired) will not get better.
            return Err(if (400..500).contains(&status) {
                RefreshError::Refused(why)
            } else {
                RefreshError::Failed(why)
            });
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
            client: client.clone(),
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
const REFRESH_EARLY: i64 = 30;

/// One caller's credentials at a module of kind `user`: their own token, from the vault,
/// refreshed when it is about to expire (by one request at a time).
pub struct PersonCredentials {
    oauth: Arc<UserOAuth>,
    vault: Arc<dyn Vault>,
    who: String,
    cached: tokio::sync::Mutex<Option<TokenSet>>,
}

impl PersonCredentials {
    /// The credentials of caller `who` (an instance key) at `oauth`'s module.
    pub fn new(oauth: Arc<UserOAuth>, vault: Arc<dyn Vault>, who: String) -> Self {
        PersonCredentials {
            oauth,
            vault,
            who,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    fn not_connected(&self) -> CredentialError {
        CredentialError::NotConnected {
            module: self.oauth.config.module.clone(),
        }
    }

    fn fresh(tokens: &TokenSet) -> bool {
        tokens
            .expires_at
            .is_none_or(|at| at - REFRESH_EARLY > now_unix())
    }
}

fn header(token: &str) -> Result<HeaderValue, CredentialError> {
    let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
        CredentialError::Failed("the access token is not a valid header value".into())
    })?;
    value.set_sensitive(true);
    Ok(value)
}

#[async_trait]
impl Credentials for PersonCredentials {
    fn kind(&self) -> &'static str {
        "user"
    }

    async fn authorization(&self) -> Result<Option<HeaderValue>, CredentialError> {
        let module = &self.oauth.config.module;
        let mut cached = self.cached.lock().await;
        if let Some(tokens) = &*cached
            && Self::fresh(tokens)
        {
            return header(&tokens.access_token).map(Some);
        }
        // The store has the newest (another instance may have refreshed, or the person
        // connected again or disconnected).
        let stored = self
            .vault
            .load(&self.who, module)
            .await
            .map_err(CredentialError::Failed)?;
        let Some(tokens) = stored else {
            *cached = None;
            return Err(self.not_connected());
        };
        if Self::fresh(&tokens) {
            let value = header(&tokens.access_token)?;
            *cached = Some(tokens);
            return Ok(Some(value));
        }
        match self.oauth.refresh(&tokens).await {
            Ok(new) => {
                if let Err(e) = self.vault.save(&self.who, module, &new).await {
                    tracing::warn!(module = %module, error = %e, "could not store a person's refreshed token; it is used for this process only");
                }
                let value = header(&new.access_token)?;
                *cached = Some(new);
                Ok(Some(value))
            }
            Err(RefreshError::Refused(why)) => {
                tracing::info!(module = %module, reason = %why, "a person's account no longer works; they connect it again");
                if let Err(e) = self.vault.forget(&self.who, module).await {
                    tracing::warn!(module = %module, error = %e, "could not forget a refused account");
                }
                *cached = None;
                Err(self.not_connected())
            }
            Err(RefreshError::Failed(why)) => Err(CredentialError::Failed(why)),
        }
    }

    async fn refused(&self, used: Option<&HeaderValue>, _challenge: Option<&str>) -> bool {
        // The module refused the person's token: refreshed once if it can be (the next
        // `authorization` sees it as expired), else the person connects again.
        let mut cached = self.cached.lock().await;
        let Some(tokens) = cached.as_mut() else {
            return false;
        };
        let same = used.is_some_and(|u| header(&tokens.access_token).is_ok_and(|h| h == u));
        if !same {
            // Replaced meanwhile: try the new one.
            return true;
        }
        if tokens.refresh_token.is_none() {
            return false;
        }
        tokens.expires_at = Some(0);
        // The stored copy is as stale: the next read refreshes rather than reloading it.
        let stale = tokens.clone();
        drop(cached);
        let _ = self
            .vault
            .save(&self.who, &self.oauth.config.module, &stale)
            .await;
        true
    }
}
