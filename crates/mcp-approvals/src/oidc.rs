//! Single sign-on for the approvals page: OpenID Connect, authorization code with PKCE,
//! against one of the configured JWT issuers (found through its discovery document).
//!
//! The person is sent to the identity provider with a fresh `state`, `nonce` and PKCE
//! verifier (kept here, for ten minutes, and bound to the browser by a cookie of their own),
//! and comes back with a code. The gateway exchanges it for tokens and signs the person in
//! with the **access token** — checked exactly as a bearer token for this gateway's resource,
//! so the person's scopes decide, as everywhere — after checking that the **ID token** is the
//! provider's, for this client, carries the nonce, and names the same subject.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::digest::{SHA256, digest};
use serde::Deserialize;

use mcp_auth::Principal;
use mcp_auth::jwt::JwtAuth;

/// How long a sign-in may take at the identity provider.
const PENDING_TTL: Duration = Duration::from_secs(600);

/// The page's OpenID Connect client.
#[derive(Debug, Clone)]
pub struct SsoConfig {
    /// The issuer to sign in at (one of the JWT issuers).
    pub issuer: String,
    /// The gateway's client id there.
    pub client_id: String,
    /// Its secret (`None`: a public client, PKCE only).
    pub client_secret: Option<String>,
    /// Where the provider sends the person back: `…/approvals/oidc/callback`.
    pub redirect_url: String,
    /// Where the provider sends the person after signing out: `…/approvals`.
    pub after_sign_out_url: String,
}

#[derive(Debug, Clone, Deserialize)]
struct Discovery {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    #[serde(default)]
    end_session_endpoint: Option<String>,
}

/// A sign-in on its way, sealed in the browser's cookie (any instance finishes it).
#[derive(serde::Serialize, Deserialize)]
struct Pending {
    /// The `state` sent to the provider, which the callback must repeat.
    st: String,
    /// The PKCE verifier.
    v: String,
    nonce: String,
    next: String,
    /// When it expires, Unix seconds.
    exp: i64,
}

/// Why a sign-in failed (shown to the person, who can try again).
#[derive(Debug, thiserror::Error)]
pub enum SsoError {
    /// The identity provider cannot be used now.
    #[error("the identity provider cannot be reached or answered oddly ({0}); try again")]
    Provider(String),
    /// The sign-in is unknown, expired, or was started in another browser.
    #[error("this sign-in is unknown or has expired; start again")]
    UnknownState,
    /// The provider refused (the person cancelled, or is not allowed).
    #[error("the identity provider did not sign you in: {0}")]
    Refused(String),
    /// The tokens did not check out.
    #[error("the identity provider's tokens were not accepted: {0}")]
    BadTokens(String),
}

/// The page's OpenID Connect client.
pub struct Sso {
    config: SsoConfig,
    jwt: Arc<JwtAuth>,
    http: mcp_fetch::Fetch,
    discovery: tokio::sync::Mutex<Option<Discovery>>,
    /// Seals sign-ins on their way into the browser's cookie.
    sealer: mcp_auth::sealed::Sealer,
    /// Where a sign-in under way reads the time.
    clock: Arc<dyn elicitation_store::Clock>,
}

/// Where a sign-in starts: the provider's URL, and the state the browser must come back with.
#[derive(Debug)]
pub struct Start {
    /// The authorization request.
    pub url: String,
    /// The `state` sent to the provider.
    pub state: String,
    /// The browser-binding cookie's value: the sign-in, sealed.
    pub cookie: String,
}

/// A finished sign-in.
#[derive(Debug)]
pub struct SignedIn {
    /// Who signed in, with the access token's scopes.
    pub principal: Principal,
    /// The ID token, for the provider's sign-out.
    pub id_token: String,
    /// The page to go on to.
    pub next: String,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    id_token: Option<String>,
}

fn encode(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// The most bytes of a discovery document or a token answer read.
const MAX_ANSWER: usize = 256 * 1024;

/// The provider's endpoints a person is sent to and the client secret and code are posted
/// to: each `https://` or on this machine (a document naming `http://` elsewhere would have
/// them sent in clear), and on this machine only for a provider that is.
fn endpoints_secure(found: &Discovery) -> Result<(), SsoError> {
    let endpoints = [
        (
            "authorization_endpoint",
            Some(&found.authorization_endpoint),
        ),
        ("token_endpoint", Some(&found.token_endpoint)),
        ("end_session_endpoint", found.end_session_endpoint.as_ref()),
    ];
    for (name, url) in endpoints {
        if let Some(url) = url.filter(|url| !mcp_fetch::endpoint_of(&found.issuer, url)) {
            return Err(SsoError::Provider(format!(
                "its discovery document names a {name} that is neither https:// nor on this machine: {}",
                mcp_fetch::printable(url)
            )));
        }
    }
    Ok(())
}

impl Sso {
    /// The client, signing in at `config.issuer` (which `jwt` must trust).
    pub fn new(config: SsoConfig, jwt: Arc<JwtAuth>) -> Result<Self, String> {
        // The provider's discovery and token answers: no redirects, read up to
        // MAX_ANSWER bytes; the environment's proxy may carry them (as for the key sets).
        let http = mcp_fetch::Fetch::new(mcp_fetch::Options {
            proxy_from_env: true,
            ..mcp_fetch::Options::new(MAX_ANSWER)
        })?;
        Ok(Sso {
            config,
            jwt,
            http,
            discovery: tokio::sync::Mutex::new(None),
            sealer: Self::sealer(&[]),
            clock: Arc::new(elicitation_store::SystemClock),
        })
    }

    fn sealer(keys: &[[u8; 32]]) -> mcp_auth::sealed::Sealer {
        mcp_auth::sealed::Sealer::new(
            &mcp_auth::sealed::derive_all(keys, "mcp-gateway/oidc-sign-in/v1"),
            "o1.",
            b"mcp-gateway/oidc-sign-in/v1",
        )
    }

    /// Seals sign-ins on their way under a key derived from `key`: instances that share it
    /// finish each other's sign-ins.
    #[must_use]
    pub fn keyed(mut self, keys: &[[u8; 32]]) -> Self {
        self.sealer = Self::sealer(keys);
        self
    }

    /// Reads the time from `clock` (tests move it instead of sleeping).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn elicitation_store::Clock>) -> Self {
        self.clock = clock;
        self
    }

    fn random(&self) -> Result<String, SsoError> {
        let bytes = mcp_random::bytes::<32>().map_err(|e| SsoError::Provider(e.to_string()))?;
        Ok(B64.encode(bytes))
    }

    async fn discovery(&self) -> Result<Discovery, SsoError> {
        let mut cached = self.discovery.lock().await;
        if let Some(found) = cached.as_ref() {
            return Ok(found.clone());
        }
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.config.issuer.trim_end_matches('/')
        );
        let answer = self.http.get(&url).await.map_err(SsoError::Provider)?;
        if !answer.status.is_success() {
            return Err(SsoError::Provider(format!(
                "{url} answered {}",
                answer.status.as_u16()
            )));
        }
        let found: Discovery = serde_json::from_slice(&answer.body)
            .map_err(|e| SsoError::Provider(format!("its discovery document: {e}")))?;
        if found.issuer != self.config.issuer {
            return Err(SsoError::Provider(format!(
                "its discovery document names the issuer {:?}",
                found.issuer
            )));
        }
        endpoints_secure(&found)?;
        *cached = Some(found.clone());
        Ok(found)
    }

    /// Starts a sign-in that comes back to `next`.
    pub async fn start(&self, next: String) -> Result<Start, SsoError> {
        let discovery = self.discovery().await?;
        let (state, nonce, verifier) = (self.random()?, self.random()?, self.random()?);
        let challenge = B64.encode(digest(&SHA256, verifier.as_bytes()));
        let expires = self.clock.now()
            + time::Duration::try_from(PENDING_TTL).unwrap_or(time::Duration::MINUTE);
        let cookie = self
            .sealer
            .seal(&Pending {
                st: state.clone(),
                v: verifier,
                nonce: nonce.clone(),
                next,
                exp: expires.unix_timestamp(),
            })
            .ok_or_else(|| SsoError::Provider("the system random source failed".into()))?;
        let scope = format!("openid {}", self.jwt.config().scopes.respond);
        let url = format!(
            "{}{}response_type=code&client_id={}&redirect_uri={}&scope={}&state={}&nonce={}&code_challenge={challenge}&code_challenge_method=S256&resource={}",
            discovery.authorization_endpoint,
            if discovery.authorization_endpoint.contains('?') {
                '&'
            } else {
                '?'
            },
            encode(&self.config.client_id),
            encode(&self.config.redirect_url),
            encode(&scope),
            encode(&state),
            encode(&nonce),
            encode(&self.jwt.config().resource),
        );
        Ok(Start { url, state, cookie })
    }

    /// Whether `cookie` is one of this gateway's sign-ins under way with `state`, unexpired:
    /// only such a cookie is recorded as used (a forged one is refused without growing the
    /// record).
    pub fn binds(&self, state: &str, cookie: &str) -> bool {
        binds(
            &self.sealer,
            self.clock.now().unix_timestamp(),
            state,
            cookie,
        )
    }

    /// Finishes the sign-in `state` (which the browser's cookie must repeat) with the
    /// provider's answer: `code`, or `error`.
    pub async fn finish(
        &self,
        state: &str,
        cookie: Option<&str>,
        code: Option<&str>,
        error: Option<&str>,
    ) -> Result<SignedIn, SsoError> {
        // The browser that left must be the one that comes back, within the time allowed
        // (the caller refuses a cookie already used).
        let pending: Pending = cookie
            .and_then(|c| self.sealer.open(c))
            .filter(|p: &Pending| p.st == state && p.exp > self.clock.now().unix_timestamp())
            .ok_or(SsoError::UnknownState)?;
        if let Some(error) = error {
            return Err(SsoError::Refused(error.chars().take(200).collect()));
        }
        let code = code.ok_or_else(|| SsoError::Refused("no code".into()))?;
        let discovery = self.discovery().await?;
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.config.redirect_url.as_str()),
            ("code_verifier", pending.v.as_str()),
            ("resource", self.jwt.config().resource.as_str()),
        ];
        let mut request = self.http.client().post(&discovery.token_endpoint);
        match &self.config.client_secret {
            Some(secret) => {
                request = request.basic_auth(encode(&self.config.client_id), Some(encode(secret)));
            }
            None => form.push(("client_id", self.config.client_id.as_str())),
        }
        let body: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let response = request
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| SsoError::Provider(e.to_string()))?;
        let answer = self.http.read(response).await.map_err(SsoError::Provider)?;
        if !answer.status.is_success() {
            return Err(SsoError::Refused(format!(
                "the token request failed ({}): {}",
                answer.status,
                mcp_fetch::printable(&String::from_utf8_lossy(&answer.body))
            )));
        }
        let tokens: TokenResponse =
            serde_json::from_slice(&answer.body).map_err(|e| SsoError::BadTokens(e.to_string()))?;
        let principal = self
            .jwt
            .principal(&tokens.access_token)
            .await
            .map_err(|e| SsoError::BadTokens(format!("the access token: {e}")))?;
        let id_token = tokens
            .id_token
            .ok_or_else(|| SsoError::BadTokens("no ID token".into()))?;
        let claims = self
            .jwt
            .id_token_claims(&id_token, &self.config.issuer, &self.config.client_id)
            .await
            .map_err(|e| SsoError::BadTokens(format!("the ID token: {e}")))?;
        if claims.get("nonce").and_then(serde_json::Value::as_str) != Some(pending.nonce.as_str()) {
            return Err(SsoError::BadTokens(
                "the ID token's nonce does not match".into(),
            ));
        }
        let sub = claims
            .get("sub")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        if self.jwt.subject(&self.config.issuer, sub).as_deref()
            != Some(principal.caller.subject_id())
        {
            return Err(SsoError::BadTokens(
                "the ID token and the access token name different people".into(),
            ));
        }
        Ok(SignedIn {
            principal,
            id_token,
            next: pending.next,
        })
    }

    /// Where to send the person after signing out here: the provider's end-session endpoint
    /// when it has one.
    pub async fn sign_out_url(&self, id_token: Option<&str>) -> Option<String> {
        let discovery = self.discovery().await.ok()?;
        let end = discovery.end_session_endpoint?;
        let mut url = format!(
            "{end}{}client_id={}&post_logout_redirect_uri={}",
            if end.contains('?') { '&' } else { '?' },
            encode(&self.config.client_id),
            encode(&self.config.after_sign_out_url)
        );
        if let Some(hint) = id_token {
            url.push_str("&id_token_hint=");
            url.push_str(&encode(hint));
        }
        Some(url)
    }
}

/// Whether `cookie` opens under `sealer` as a sign-in with `state` that ends after `now`.
fn binds(sealer: &mcp_auth::sealed::Sealer, now: i64, state: &str, cookie: &str) -> bool {
    sealer
        .open::<Pending>(cookie)
        .is_some_and(|p| p.st == state && p.exp > now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_discovery_document_naming_an_endpoint_in_clear_elsewhere_is_refused() {
        let document = |token: &str, end: Option<&str>| Discovery {
            issuer: "https://idp.example".into(),
            authorization_endpoint: "https://idp.example/auth".into(),
            token_endpoint: token.into(),
            end_session_endpoint: end.map(str::to_owned),
        };
        assert!(endpoints_secure(&document("https://idp.example/token", None)).is_ok());
        // A remote provider cannot send the gateway to this machine's services.
        assert!(endpoints_secure(&document("http://127.0.0.1:8080/token", None)).is_err());
        let refused = endpoints_secure(&document("http://idp.example/token", None)).unwrap_err();
        assert!(refused.to_string().contains("token_endpoint"), "{refused}");
        assert!(
            endpoints_secure(&document(
                "https://idp.example/token",
                Some("http://127.0.0.1:80@evil.example/logout")
            ))
            .is_err()
        );
    }

    #[test]
    fn only_a_sign_in_of_this_gateway_with_its_state_binds() {
        let sealer = Sso::sealer(&[[3u8; 32]]);
        let pending = Pending {
            st: "s1".into(),
            v: "v".into(),
            nonce: "n".into(),
            next: "/approvals".into(),
            exp: 1000,
        };
        let cookie = sealer.seal(&pending).unwrap();
        assert!(binds(&sealer, 999, "s1", &cookie));
        assert!(!binds(&sealer, 999, "s2", &cookie), "another state");
        assert!(!binds(&sealer, 1000, "s1", &cookie), "expired");
        assert!(!binds(&sealer, 999, "s1", "o1.forged"), "forged");
        let theirs = Sso::sealer(&[[4u8; 32]]);
        assert!(
            !binds(&theirs, 999, "s1", &cookie),
            "another gateway's keys"
        );
    }
}
