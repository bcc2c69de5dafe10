//! Mode `jwt`: the gateway as an OAuth 2.1 resource server. A bearer token is a JWT signed by
//! one of the configured issuers, for this gateway (its `aud` is the gateway's resource URL),
//! valid now; its `sub` (with the issuer's name) is the caller and its scopes, mapped from
//! the names the organisation's identity provider issues, are the principal's.
//!
//! Keys come from each issuer's JWKS (a URL, or a file), cached: refreshed when a token names
//! a key the cache does not have (at most once per `min_refresh_interval`), and in the
//! background as the JWKS's cache headers (or `refresh_interval`) say. While the JWKS cannot
//! be fetched, the cached keys keep working for `grace` after the last successful fetch; past
//! that, every token of the issuer is refused (fail closed). Only asymmetric keys are used
//! (RSA, EC, OKP): a JWKS's `oct` keys are ignored, and HMAC algorithms cannot be configured,
//! so a public key can never be used as an HMAC secret.

mod config;

pub use config::{
    IssuerConfig, JwksSource, JwtConfig, JwtConfigError, ScopeNames, default_issuer_name,
};

use crate::qualified_group;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use elicitation_core::Caller;
pub use jsonwebtoken::Algorithm;
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{DecodingKey, Validation};
use mcp_clock::{Clock, SystemClock};
use serde_json::Value;
use time::OffsetDateTime;

use crate::principal::{
    Principal, SCOPE_AUDIT, SCOPE_CATALOG, SCOPE_CREATE, SCOPE_METRICS, SCOPE_RESPOND,
    SCOPE_TOOLS_CALL,
};

/// Why a token was refused (logged for the operator; the client gets `invalid_token`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a JWT, or an unusable header or claims.
    #[error("not a valid JWT: {0}")]
    Malformed(String),
    /// An algorithm the issuer is not configured for (`none` included).
    #[error("algorithm not accepted")]
    Algorithm,
    /// No configured issuer has this `iss`.
    #[error("unknown issuer {0:?}")]
    Issuer(String),
    /// The issuer has no key with this id (after a refresh), or none at all.
    #[error("unknown key {0:?}")]
    UnknownKey(String),
    /// The issuer's keys are older than the grace period and cannot be refreshed.
    #[error("the issuer's keys could not be refreshed within the grace period")]
    KeysExpired,
    /// Signature, time or audience checks failed.
    #[error("{0}")]
    Invalid(String),
}

struct Keys {
    by_kid: HashMap<String, Arc<DecodingKey>>,
    /// Keys without a `kid` (used only when the set has exactly one key).
    anonymous: Vec<Arc<DecodingKey>>,
    /// The keys work until then: the last successful fetch plus the grace period. Past it
    /// (the issuer unreachable), nothing is accepted.
    valid_until: Option<Instant>,
    last_attempt: Option<Instant>,
    /// When the next background refresh is due.
    next_refresh: Option<Instant>,
}

struct Issuer {
    config: IssuerConfig,
    keys: Mutex<Keys>,
    fetch: tokio::sync::Mutex<()>,
}

/// Mode `jwt`.
pub struct JwtAuth {
    config: JwtConfig,
    issuers: Vec<Issuer>,
    http: mcp_fetch::Fetch,
    /// Tokens verified lately, by SHA-256 (see [`JwtAuth::principal_cached`]).
    verified: Mutex<HashMap<[u8; 32], Verified>>,
    /// Where the time is read: token times against its wall clock, the keys' grace period
    /// and refresh times against its monotonic one (which a wall-clock step cannot move).
    clock: Arc<dyn Clock>,
}

/// A token verified lately.
struct Verified {
    principal: Arc<Principal>,
    exp: f64,
    issuer: usize,
}

/// Most tokens remembered at once.
const MAX_VERIFIED: usize = 10_000;

/// The most bytes of an issuer's key set read (a JWK set of dozens of keys is a few KiB).
const MAX_JWKS: usize = 1024 * 1024;

impl std::fmt::Debug for JwtAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtAuth")
            .field("resource", &self.config.resource)
            .field(
                "issuers",
                &self
                    .issuers
                    .iter()
                    .map(|i| &i.config.issuer)
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

const ACCEPTED: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// The RFC 9728 metadata URL of a resource: `/.well-known/oauth-protected-resource` inserted
/// between its origin and its path.
pub fn metadata_url(resource: &str) -> String {
    let (scheme, rest) = resource.split_once("://").unwrap_or(("https", resource));
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let path = path.trim_end_matches('/');
    format!("{scheme}://{authority}/.well-known/oauth-protected-resource{path}")
}

/// The claims read from a token (after its signature and times are checked).
#[derive(serde::Deserialize)]
struct Claims {
    sub: String,
    /// Required by the validation; kept to bound how long a verified token is remembered.
    exp: f64,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Value>,
    #[serde(flatten)]
    rest: HashMap<String, Value>,
}

impl JwtAuth {
    /// Checks `config` and loads what can be loaded now (files; URLs are fetched by
    /// [`Self::refresh_all`] and on first use).
    pub fn new(config: JwtConfig) -> Result<Self, JwtConfigError> {
        if config.issuers.is_empty() {
            return Err(JwtConfigError::NoIssuers);
        }
        if !mcp_fetch::secure_or_loopback(&config.resource) {
            return Err(JwtConfigError::Resource(config.resource.clone()));
        }
        let mut seen = BTreeSet::new();
        let mut names: HashMap<&str, &str> = HashMap::new();
        for issuer in &config.issuers {
            if !seen.insert(issuer.issuer.as_str()) {
                return Err(JwtConfigError::Duplicate(issuer.issuer.clone()));
            }
            let name = issuer.name.as_str();
            if name.is_empty()
                || name.len() > 256
                || name.contains(['@', '#'])
                || name.contains("://")
                || name.chars().any(char::is_control)
            {
                return Err(JwtConfigError::Name {
                    issuer: issuer.issuer.clone(),
                    name: name.to_owned(),
                });
            }
            if let Some(first) = names.insert(name, issuer.issuer.as_str()) {
                return Err(JwtConfigError::DuplicateName {
                    name: name.to_owned(),
                    first: first.to_owned(),
                    second: issuer.issuer.clone(),
                });
            }
            if let Some(bad) = issuer.algorithms.iter().find(|a| !ACCEPTED.contains(a)) {
                return Err(JwtConfigError::Algorithm {
                    issuer: issuer.issuer.clone(),
                    algorithm: format!("{bad:?}"),
                });
            }
        }
        // Keys are fetched over https (or http on loopback) only, redirects included, and
        // read up to MAX_JWKS bytes; a proxy of the environment may carry them (they are
        // public).
        let http = mcp_fetch::Fetch::new(mcp_fetch::Options {
            redirects: mcp_fetch::Redirects::Secure(3),
            proxy_from_env: true,
            ..mcp_fetch::Options::new(MAX_JWKS)
        })
        .map_err(JwtConfigError::Client)?;
        let issuers = config
            .issuers
            .iter()
            .map(|c| Issuer {
                config: c.clone(),
                keys: Mutex::new(Keys {
                    by_kid: HashMap::new(),
                    anonymous: Vec::new(),
                    valid_until: None,
                    last_attempt: None,
                    next_refresh: None,
                }),
                fetch: tokio::sync::Mutex::new(()),
            })
            .collect();
        Ok(JwtAuth {
            config,
            issuers,
            http,
            verified: Mutex::new(HashMap::new()),
            clock: Arc::new(SystemClock),
        })
    }

    /// Reads the time from `clock` (tests move it instead of sleeping).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The wall-clock time, for the times in tokens.
    fn wall(&self) -> OffsetDateTime {
        self.clock.now()
    }

    /// A monotonic instant, for the keys' bookkeeping.
    fn tick(&self) -> Instant {
        self.clock.instant()
    }

    /// The configuration.
    pub fn config(&self) -> &JwtConfig {
        &self.config
    }

    /// Fetches every issuer's keys now (at start-up, and from the background task). A
    /// failure is logged; the cached keys stay within their grace period.
    pub async fn refresh_all(&self) {
        for issuer in &self.issuers {
            if let Err(e) = self.fetch(issuer).await {
                tracing::warn!(issuer = %issuer.config.issuer, error = %e, "the issuer's keys could not be fetched");
            }
        }
    }

    /// Refreshes each issuer's keys when due, until the returned task is dropped.
    pub fn spawn_refresh(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                for issuer in &me.issuers {
                    let due = {
                        let keys = issuer.keys.lock().unwrap_or_else(PoisonError::into_inner);
                        keys.next_refresh.is_none_or(|at| me.tick() >= at)
                    };
                    if due && let Err(e) = me.fetch(issuer).await {
                        tracing::warn!(issuer = %issuer.config.issuer, error = %e, "the issuer's keys could not be refreshed");
                    }
                }
            }
        })
    }

    async fn fetch(&self, issuer: &Issuer) -> Result<(), String> {
        let _one = issuer.fetch.lock().await;
        let started = self.tick();
        {
            let mut keys = issuer.keys.lock().unwrap_or_else(PoisonError::into_inner);
            keys.last_attempt = Some(started);
            // A failed fetch is retried after the shorter interval.
            keys.next_refresh = Some(
                started
                    + issuer
                        .config
                        .min_refresh_interval
                        .max(Duration::from_secs(1)),
            );
        }
        let (text, max_age) = match &issuer.config.jwks {
            JwksSource::File(path) => (
                tokio::fs::read_to_string(path)
                    .await
                    .map_err(|e| format!("{}: {e}", path.display()))?,
                None,
            ),
            JwksSource::Url(url) => {
                let answer = self.http.get(url).await?;
                if !answer.status.is_success() {
                    return Err(format!("{url}: status {}", answer.status));
                }
                let max_age = answer
                    .headers
                    .get("cache-control")
                    .and_then(|v| v.to_str().ok())
                    .and_then(cache_max_age);
                let text = String::from_utf8(answer.body)
                    .map_err(|_| format!("{url}: the key set is not UTF-8"))?;
                (text, max_age)
            }
        };
        let set: JwkSet = serde_json::from_str(&text).map_err(|e| format!("not a JWK set: {e}"))?;
        let mut by_kid = HashMap::new();
        let mut anonymous = Vec::new();
        for jwk in &set.keys {
            // Symmetric keys are never used: a public key must not become an HMAC secret.
            if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
                continue;
            }
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            let key = Arc::new(key);
            match &jwk.common.key_id {
                Some(kid) => {
                    by_kid.insert(kid.clone(), key);
                }
                None => anonymous.push(key),
            }
        }
        let interval = max_age
            .map(|s| {
                Duration::from_secs(s)
                    .clamp(Duration::from_secs(60), Duration::from_secs(24 * 3600))
            })
            .unwrap_or(issuer.config.refresh_interval);
        // A key may have been withdrawn: tokens are verified afresh.
        self.verified
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let mut keys = issuer.keys.lock().unwrap_or_else(PoisonError::into_inner);
        keys.by_kid = by_kid;
        keys.anonymous = anonymous;
        keys.valid_until = Some(started + issuer.config.grace);
        keys.next_refresh = Some(started + interval);
        Ok(())
    }

    /// The key `kid` of `issuer`, if its cache is within the grace period.
    fn cached(
        &self,
        issuer: &Issuer,
        kid: Option<&str>,
    ) -> Result<Option<Arc<DecodingKey>>, Refusal> {
        let keys = issuer.keys.lock().unwrap_or_else(PoisonError::into_inner);
        if keys.valid_until.is_some_and(|until| self.tick() > until) {
            // No successful fetch within the grace period.
            return Err(Refusal::KeysExpired);
        }
        Ok(match kid {
            Some(kid) => keys.by_kid.get(kid).cloned(),
            None if keys.by_kid.len() + keys.anonymous.len() == 1 => keys
                .anonymous
                .first()
                .or_else(|| keys.by_kid.values().next())
                .cloned(),
            None => None,
        })
    }

    async fn key(&self, issuer: &Issuer, kid: Option<&str>) -> Result<Arc<DecodingKey>, Refusal> {
        match self.cached(issuer, kid) {
            Ok(Some(key)) => return Ok(key),
            // An unknown key (the issuer may have rotated), or keys past their grace period
            // (the issuer may be back): fetch again, at most once per min_refresh_interval.
            Ok(None) | Err(Refusal::KeysExpired) => {}
            Err(other) => return Err(other),
        }
        let may_fetch = {
            let keys = issuer.keys.lock().unwrap_or_else(PoisonError::into_inner);
            let now = self.tick();
            keys.last_attempt.is_none_or(|at| {
                now.saturating_duration_since(at) >= issuer.config.min_refresh_interval
            })
        };
        if may_fetch && let Err(e) = self.fetch(issuer).await {
            tracing::warn!(issuer = %issuer.config.issuer, error = %e, "the issuer's keys could not be fetched");
        }
        self.cached(issuer, kid)?
            .ok_or_else(|| Refusal::UnknownKey(kid.unwrap_or("(none)").to_owned()))
    }

    /// The principal of a bearer token, or why it is refused — remembered by the token's
    /// SHA-256 until it expires, so a client's repeated requests cost one verification (a
    /// signature check is tens of microseconds, more than the rest of a forwarded call).
    /// A remembered token is refused as soon as it expires, and the memory is cleared when
    /// an issuer's key set is fetched (a withdrawn key) or its keys pass their grace period.
    pub async fn principal_cached(&self, token: &str) -> Result<Arc<Principal>, Refusal> {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(digest.as_ref());
        let tick = self.tick();
        let now = self.wall().unix_timestamp() as f64;
        let leeway = self.config.leeway.as_secs_f64();
        {
            let verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(hit) = verified.get(&key)
                && now <= hit.exp + leeway
                && self.issuers[hit.issuer]
                    .keys
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .valid_until
                    .is_some_and(|until| tick <= until)
            {
                return Ok(hit.principal.clone());
            }
        }
        let (principal, exp, issuer) = self.verify(token).await?;
        let principal = Arc::new(principal);
        let mut verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        if verified.len() >= MAX_VERIFIED {
            verified.retain(|_, v| now <= v.exp + leeway);
            if verified.len() >= MAX_VERIFIED {
                verified.clear();
            }
        }
        verified.insert(
            key,
            Verified {
                principal: principal.clone(),
                exp,
                issuer,
            },
        );
        Ok(principal)
    }

    /// The principal of a bearer token, or why it is refused (verified now, not remembered).
    pub async fn principal(&self, token: &str) -> Result<Principal, Refusal> {
        self.verify(token).await.map(|(principal, _, _)| principal)
    }

    /// Verifies a token: its principal, its `exp`, and the index of its issuer.
    async fn verify(&self, token: &str) -> Result<(Principal, f64, usize), Refusal> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| Refusal::Malformed(e.to_string()))?;
        let unverified: Value = jsonwebtoken::dangerous::insecure_decode_claims(token)
            .map_err(|e| Refusal::Malformed(e.to_string()))?;
        let iss = unverified
            .get("iss")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let index = self
            .issuers
            .iter()
            .position(|i| i.config.issuer == iss)
            .ok_or_else(|| Refusal::Issuer(iss.to_owned()))?;
        let claims: Claims = self
            .checked_claims(token, &header, index, &self.config.resource)
            .await?;
        let mut granted: BTreeSet<String> = BTreeSet::new();
        let mut names: Vec<String> = claims
            .scope
            .as_deref()
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        match &claims.scp {
            Some(Value::String(s)) => names.extend(s.split_whitespace().map(str::to_owned)),
            Some(Value::Array(items)) => {
                names.extend(items.iter().filter_map(Value::as_str).map(str::to_owned));
            }
            _ => {}
        }
        let map = &self.config.scopes;
        for name in &names {
            for (external, internal) in [
                (&map.tools_call, SCOPE_TOOLS_CALL),
                (&map.respond, SCOPE_RESPOND),
                (&map.create, SCOPE_CREATE),
                (&map.metrics, SCOPE_METRICS),
                (&map.catalog, SCOPE_CATALOG),
                (&map.audit, SCOPE_AUDIT),
            ] {
                if name == external {
                    granted.insert(internal.to_owned());
                }
            }
        }
        let tenant = match &self.config.tenant_claim {
            Some(claim) => match claims.rest.get(claim) {
                Some(Value::String(t)) if !t.is_empty() => Some(t.clone()),
                None | Some(Value::Null) => None,
                Some(_) => {
                    return Err(Refusal::Malformed(format!("claim {claim} is not a string")));
                }
            },
            None => None,
        };
        if claims.sub.trim().is_empty() {
            return Err(Refusal::Malformed("the token's sub is empty".into()));
        }
        let name = &self.issuers[index].config.name;
        let subject = format!("{}@{name}", claims.sub);
        let caller = Caller::new(subject, tenant)
            .map_err(|e| Refusal::Malformed(format!("the subject cannot be a caller: {e}")))?;
        // Each group as this issuer's (and tenant's): another issuer's "sre" is not this one's.
        let tenant = caller.tenant_id();
        let groups = match claims.rest.get(&self.config.groups_claim) {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .map(|g| qualified_group(g, name, tenant))
                .collect(),
            Some(Value::String(s)) => s
                .split_whitespace()
                .map(|g| qualified_group(g, name, tenant))
                .collect(),
            _ => BTreeSet::new(),
        };
        Ok((
            Principal {
                caller,
                scopes: granted,
                authenticated: true,
                groups,
                client: ["azp", "client_id"].iter().find_map(|claim| {
                    claims
                        .rest
                        .get(*claim)
                        .and_then(Value::as_str)
                        .filter(|c| {
                            !c.is_empty() && c.len() <= 256 && !c.chars().any(char::is_control)
                        })
                        .map(str::to_owned)
                }),
                subject_token: Some(crate::SubjectToken::new(token)),
            },
            claims.exp,
            index,
        ))
    }

    /// The caller subject of `sub` at `issuer` (`None`: not a configured issuer, or an
    /// empty `sub`).
    pub fn subject(&self, issuer: &str, sub: &str) -> Option<String> {
        if sub.trim().is_empty() {
            return None;
        }
        self.issuers
            .iter()
            .find(|i| i.config.issuer == issuer)
            .map(|i| format!("{sub}@{}", i.config.name))
    }

    /// The claims of an OpenID Connect ID token of `issuer` for `client_id`, once its
    /// signature (the issuer's keys, its algorithms), issuer, audience and times check out.
    pub async fn id_token_claims(
        &self,
        token: &str,
        issuer: &str,
        client_id: &str,
    ) -> Result<Value, Refusal> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| Refusal::Malformed(e.to_string()))?;
        let index = self
            .issuers
            .iter()
            .position(|i| i.config.issuer == issuer)
            .ok_or_else(|| Refusal::Issuer(issuer.to_owned()))?;
        self.checked_claims(token, &header, index, client_id).await
    }

    /// The claims of `token`, signed by issuer `index` with one of its algorithms and keys,
    /// for `audience`, within its times (with leeway); `exp`, `iss`, `aud` and `sub` present.
    async fn checked_claims<T: serde::de::DeserializeOwned>(
        &self,
        token: &str,
        header: &jsonwebtoken::Header,
        index: usize,
        audience: &str,
    ) -> Result<T, Refusal> {
        let issuer = &self.issuers[index];
        if !issuer.config.algorithms.contains(&header.alg) {
            return Err(Refusal::Algorithm);
        }
        let key = self.key(issuer, header.kid.as_deref()).await?;
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.set_issuer(&[&issuer.config.issuer]);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        // The times are checked here, against the injected clock, not the library's.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        let claims = jsonwebtoken::decode::<Value>(token, &key, &validation)
            .map(|data| data.claims)
            .map_err(|e| Refusal::Invalid(e.to_string()))?;
        within_times(&claims, self.wall().unix_timestamp(), self.config.leeway)?;
        serde_json::from_value(claims).map_err(|e| Refusal::Invalid(e.to_string()))
    }

    /// The protected resource metadata (RFC 9728).
    pub fn metadata(&self) -> Value {
        serde_json::json!({
            "resource": self.config.resource,
            "authorization_servers": self.config.issuers.iter().map(|i| i.issuer.clone()).collect::<Vec<_>>(),
            "scopes_supported": self.config.scopes.all(),
            "bearer_methods_supported": ["header"],
            "resource_name": "mcp-gateway",
        })
    }
}

/// Whether a token's `exp` (required, a number) and `nbf` (if any, a number) allow it at
/// `now` (Unix seconds), with `leeway` either side.
fn within_times(claims: &Value, now: i64, leeway: Duration) -> Result<(), Refusal> {
    let leeway = leeway.as_secs_f64();
    let now = now as f64;
    let time = |name: &str| match claims.get(name) {
        None => Ok(None),
        Some(value) => value
            .as_f64()
            .map(Some)
            .ok_or_else(|| Refusal::Invalid(format!("{name} is not a number"))),
    };
    match time("exp")? {
        None => return Err(Refusal::Invalid("exp is missing".into())),
        Some(exp) if now > exp + leeway => return Err(Refusal::Invalid("ExpiredSignature".into())),
        Some(_) => {}
    }
    if let Some(nbf) = time("nbf")?
        && now + leeway < nbf
    {
        return Err(Refusal::Invalid("ImmatureSignature".into()));
    }
    Ok(())
}

/// `max-age` of a `Cache-Control` value.
fn cache_max_age(value: &str) -> Option<u64> {
    value.split(',').find_map(|part| {
        part.trim()
            .strip_prefix("max-age=")
            .and_then(|n| n.trim().parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tokens_times_are_read_against_the_clock_with_the_leeway_either_side() {
        let leeway = Duration::from_secs(5);
        let at = |claims: Value, now: i64| within_times(&claims, now, leeway).is_ok();
        let exp = serde_json::json!({"exp": 1000});
        assert!(at(exp.clone(), 1000));
        assert!(at(exp.clone(), 1005), "within the leeway");
        assert!(!at(exp.clone(), 1006), "past it");
        assert!(!at(serde_json::json!({}), 0), "exp is required");
        assert!(
            !at(serde_json::json!({"exp": "2999"}), 0),
            "exp is a number"
        );
        let nbf = serde_json::json!({"exp": 2000, "nbf": 1000});
        assert!(!at(nbf.clone(), 994), "not yet");
        assert!(at(nbf.clone(), 995), "within the leeway");
        assert!(
            !at(serde_json::json!({"exp": 2000, "nbf": "soon"}), 1500),
            "nbf is a number"
        );
        assert!(
            at(serde_json::json!({"exp": 1000.5}), 1005),
            "a fraction counts"
        );
    }

    #[test]
    fn metadata_urls_insert_the_well_known_path() {
        assert_eq!(
            metadata_url("https://gw.example.com/mcp"),
            "https://gw.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url("https://gw.example.com"),
            "https://gw.example.com/.well-known/oauth-protected-resource"
        );
    }

    #[test]
    fn cache_control_max_age_is_read() {
        assert_eq!(cache_max_age("public, max-age=300"), Some(300));
        assert_eq!(cache_max_age("no-store"), None);
    }
}
