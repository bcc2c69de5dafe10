//! Who is calling: the one seam where a request becomes a [`Principal`]. Modes: `none` (one
//! local caller with every scope, for loopback only), `tokens` (bearer tokens whose SHA-256
//! is configured, each with a subject and scopes) and `jwt` (OAuth access tokens verified
//! against each issuer's keys, `jwt`, feature `jwt`). [`sealed`] seals the tokens the gateway itself
//! hands out (session ids, page sign-ins, `requestState`) under one key ring.
//!
//! It knows headers, not servers: no routing, no responses. What a refusal looks like on
//! the wire (401, 403, a JSON-RPC error) is the server's business; this crate answers with
//! an [`AuthError`].

use std::collections::HashMap;
use std::sync::Arc;

use elicitation_core::Caller;
use http::HeaderMap;
use ring::digest::{SHA256, digest};

mod groups;
#[cfg(feature = "jwt")]
pub mod jwt;
mod principal;
mod remembered;
pub mod sealed;

pub use groups::{issuer_of, qualified_group, tenant_group};
pub use principal::{
    AnsweredVia, AuthError, Principal, SCOPE_AUDIT, SCOPE_CATALOG, SCOPE_CREATE, SCOPE_METRICS,
    SCOPE_RESPOND, SCOPE_TOOLS_CALL, SubjectToken,
};

/// A configured token.
#[derive(Debug, Clone)]
pub struct TokenGrant {
    /// The subject the token authenticates.
    pub subject: String,
    /// The tenant, if any.
    pub tenant: Option<String>,
    /// SHA-256 of the token, 64 hex digits.
    pub token_sha256: String,
    /// Granted scopes.
    pub scopes: Vec<String>,
    /// Approver groups the token's holder is a member of.
    pub groups: Vec<String>,
}

/// A token configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthConfigError {
    /// `token_sha256` is not 64 hex digits.
    #[error("token for {subject:?}: token_sha256 must be 64 hex digits (sha256sum of the token)")]
    BadDigest {
        /// The subject.
        subject: String,
    },
    /// The same token is configured twice.
    #[error("token for {subject:?} is configured twice")]
    Duplicate {
        /// The subject.
        subject: String,
    },
    /// Subject or tenant ids are empty or too long.
    #[error("token for {subject:?}: subject and tenant must be 1 to 512 printable bytes")]
    BadCaller {
        /// The subject.
        subject: String,
    },
    /// A scope the gateway does not know.
    #[error(
        "token for {subject:?}: unknown scope {scope:?} (known: tools:call, elicitations:respond)"
    )]
    UnknownScope {
        /// The subject.
        subject: String,
        /// The scope.
        scope: String,
    },
    /// A group name with `#`, which qualifies a group by its tenant.
    #[error(
        "token for {subject:?}: group {group:?} may not contain '#' (it qualifies a group by its tenant)"
    )]
    BadGroup {
        /// The subject.
        subject: String,
        /// The group.
        group: String,
    },
    /// Mode `tokens` with no tokens.
    #[error("auth mode \"tokens\" needs at least one [[auth.tokens]] entry")]
    NoTokens,
}

/// How requests are authenticated.
#[derive(Debug, Clone)]
pub enum Auth {
    /// Everyone is the one local caller, with every scope. Only for loopback listeners.
    None(Arc<Principal>),
    /// Bearer tokens, by SHA-256 (a request shares its principal: no copy per request).
    Tokens(HashMap<[u8; 32], Grant>),
    /// OAuth access tokens: JWTs of trusted issuers, for this gateway (feature `jwt`).
    #[cfg(feature = "jwt")]
    Jwt(Arc<jwt::JwtAuth>),
    /// The service the gateway is mounted in says who calls, from each request's headers
    /// (its own session cookie or token): `None` is not signed in. The approvals page opens
    /// its own session for the person it names, and drops it once the headers name someone
    /// else or no one.
    Embedder(CallerOfRequest),
}

/// Who makes a request, in the embedder's words ([`Auth::Embedder`]).
#[derive(Clone)]
pub struct CallerOfRequest(pub Arc<CallerFn>);

/// The embedder's function from a request's headers to its caller.
pub type CallerFn = dyn Fn(&HeaderMap) -> Option<Principal> + Send + Sync;

impl std::fmt::Debug for CallerOfRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallerOfRequest(..)")
    }
}

/// One configured token of mode `tokens`.
#[derive(Debug, Clone)]
pub struct Grant {
    principal: Arc<Principal>,
    /// When the grant began, Unix seconds: 0 for the tokens the process started with, the
    /// time of the reload for one a reload added (or put back after revoking it). A page
    /// sign-in made before its grant began opens nothing.
    since: i64,
}

fn parse_hex32(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl Auth {
    /// Mode `none`: the caller `local`, who may call tools, answer and read the metrics.
    pub fn none() -> Self {
        Auth::None(Arc::new(Principal::local()))
    }

    /// Mode `tokens`.
    pub fn tokens(grants: Vec<TokenGrant>) -> Result<Self, AuthConfigError> {
        if grants.is_empty() {
            return Err(AuthConfigError::NoTokens);
        }
        let mut map = HashMap::new();
        for grant in grants {
            let subject = grant.subject.clone();
            let digest =
                parse_hex32(&grant.token_sha256.to_ascii_lowercase()).ok_or_else(|| {
                    AuthConfigError::BadDigest {
                        subject: subject.clone(),
                    }
                })?;
            for scope in &grant.scopes {
                if ![
                    SCOPE_TOOLS_CALL,
                    SCOPE_RESPOND,
                    SCOPE_CREATE,
                    SCOPE_METRICS,
                    SCOPE_CATALOG,
                    SCOPE_AUDIT,
                ]
                .contains(&scope.as_str())
                {
                    return Err(AuthConfigError::UnknownScope {
                        subject,
                        scope: scope.clone(),
                    });
                }
            }
            if let Some(group) = grant.groups.iter().find(|g| g.contains('#')) {
                return Err(AuthConfigError::BadGroup {
                    subject,
                    group: group.clone(),
                });
            }
            // Each group as the token's tenant's: another tenant's "sre" is not this one's.
            let groups = grant
                .groups
                .iter()
                .map(|g| tenant_group(g, grant.tenant.as_deref()))
                .collect();
            let caller = Caller::new(grant.subject, grant.tenant).map_err(|_| {
                AuthConfigError::BadCaller {
                    subject: subject.clone(),
                }
            })?;
            let principal = Principal {
                caller,
                scopes: grant.scopes.into_iter().collect(),
                authenticated: true,
                groups,
                client: None,
                subject_token: None,
            };
            let grant = Grant {
                principal: Arc::new(principal),
                since: 0,
            };
            if map.insert(digest, grant).is_some() {
                return Err(AuthConfigError::Duplicate { subject });
            }
        }
        Ok(Auth::Tokens(map))
    }

    /// Callers named by the embedding service, from each request's headers.
    pub fn embedder(
        caller: impl Fn(&HeaderMap) -> Option<Principal> + Send + Sync + 'static,
    ) -> Self {
        Auth::Embedder(CallerOfRequest(Arc::new(caller)))
    }

    /// The principal of a request: 401 without valid credentials.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Principal>, AuthError> {
        match self {
            Auth::None(principal) => Ok(principal.clone()),
            Auth::Embedder(caller) => {
                (caller.0)(headers)
                    .map(Arc::new)
                    .ok_or(AuthError::Unauthorized {
                        invalid_token: false,
                    })
            }
            // Tokens and JWTs: a bearer token.
            _ => {
                let Some(value) = headers.get(http::header::AUTHORIZATION) else {
                    return Err(AuthError::Unauthorized {
                        invalid_token: false,
                    });
                };
                let token = value
                    .to_str()
                    .ok()
                    .and_then(|v| v.split_once(' '))
                    .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                    .map(|(_, token)| token.trim())
                    .filter(|token| !token.is_empty())
                    .ok_or(AuthError::Unauthorized {
                        invalid_token: true,
                    })?;
                self.token(token).await.ok_or(AuthError::Unauthorized {
                    invalid_token: true,
                })
            }
        }
    }

    /// The principal of a bearer token; `None` for an unknown or invalid one (mode `jwt`
    /// logs why). In mode `none`, the one local caller.
    pub async fn token(&self, token: &str) -> Option<Arc<Principal>> {
        match self {
            Auth::None(principal) => Some(principal.clone()),
            // The embedder's callers carry no token of the gateway's.
            Auth::Embedder(_) => None,
            Auth::Tokens(tokens) => {
                let key = remembered::sha256(token, |digest| tokens.contains_key(digest));
                tokens.get(&key).map(|grant| grant.principal.clone())
            }
            #[cfg(feature = "jwt")]
            Auth::Jwt(jwt) => match jwt.principal_cached(token).await {
                Ok(principal) => Some(principal),
                Err(why) => {
                    tracing::info!(reason = %why, "a bearer token was refused");
                    None
                }
            },
        }
    }

    /// The mode's name (what a page sign-in is bound to).
    pub fn mode(&self) -> &'static str {
        match self {
            Auth::None(_) => "none",
            Auth::Tokens(_) => "tokens",
            #[cfg(feature = "jwt")]
            Auth::Jwt(_) => "jwt",
            Auth::Embedder(_) => "embedder",
        }
    }

    /// In mode `tokens`, the principal of the token whose SHA-256 is `digest_hex` now, for
    /// a sign-in made at `made_at` (Unix seconds): `None` once the token is revoked, and for
    /// a sign-in older than the token's grant (revoked, then put back: a new grant); in the
    /// other modes, `None`.
    pub fn by_digest(&self, digest_hex: &str, made_at: i64) -> Option<Arc<Principal>> {
        match self {
            Auth::Tokens(tokens) => tokens
                .get(&parse_hex32(digest_hex)?)
                .filter(|grant| made_at >= grant.since)
                .map(|grant| grant.principal.clone()),
            _ => None,
        }
    }

    /// This configuration of tokens as it follows `running` (a reload) at `now`: a token
    /// `running` has keeps the time its grant began; one it has not — new, or back after a
    /// reload revoked it — begins now.
    #[must_use]
    pub fn following(self, running: &Auth, now: time::OffsetDateTime) -> Auth {
        let Auth::Tokens(mut tokens) = self else {
            return self;
        };
        let now = now.unix_timestamp();
        for (digest, grant) in &mut tokens {
            grant.since = match running {
                Auth::Tokens(old) => old.get(digest).map_or(now, |g| g.since),
                _ => now,
            };
        }
        Auth::Tokens(tokens)
    }

    /// The token scope name for one of the gateway's scopes (differs in mode `jwt`).
    pub fn external_scope(&self, scope: &str) -> String {
        match self {
            #[cfg(feature = "jwt")]
            Auth::Jwt(jwt) => jwt.config().scopes.external(scope),
            _ => scope.to_owned(),
        }
    }
}

/// SHA-256 of a token as 64 hex digits (what `token_sha256` holds).
pub fn token_sha256(token: &str) -> String {
    mcp_random::hex(digest(&SHA256, token.as_bytes()).as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(authorization: Option<&str>) -> HeaderMap {
        let mut map = HeaderMap::new();
        if let Some(value) = authorization {
            map.insert(http::header::AUTHORIZATION, value.parse().unwrap());
        }
        map
    }

    #[tokio::test]
    async fn a_tokens_groups_are_its_tenants_and_a_hash_in_a_group_is_refused() {
        let grant = |token: &str, tenant: Option<&str>, group: &str| TokenGrant {
            subject: "carol".into(),
            tenant: tenant.map(str::to_owned),
            token_sha256: token_sha256(token),
            scopes: vec![SCOPE_RESPOND.into()],
            groups: vec![group.into()],
        };
        let auth = Auth::tokens(vec![
            grant("t2-token", Some("t2"), "sre"),
            grant("plain-token", None, "sre"),
        ])
        .unwrap();
        let groups = |p: Arc<Principal>| p.groups.iter().cloned().collect::<Vec<_>>();
        let t2 = auth
            .authenticate(&headers(Some("Bearer t2-token")))
            .await
            .unwrap();
        // A rule written against the configured name still sees it.
        assert_eq!(t2.rule_groups(), ["sre#t2", "sre"]);
        assert_eq!(groups(t2), ["sre#t2"]);
        let plain = auth
            .authenticate(&headers(Some("Bearer plain-token")))
            .await
            .unwrap();
        assert_eq!(groups(plain), ["sre"]);
        assert!(matches!(
            Auth::tokens(vec![grant("x", None, "sre#t2")]),
            Err(AuthConfigError::BadGroup { .. })
        ));
    }

    /// The digests a thread keeps are of the tokens it was given: a token one character from
    /// a kept one, or a kept one a reload revoked, opens nothing.
    #[tokio::test]
    async fn a_kept_token_opens_only_its_own_grant_and_only_while_granted() {
        let grant = |subject: &str, token: &str| TokenGrant {
            subject: subject.into(),
            tenant: None,
            token_sha256: token_sha256(token),
            scopes: vec![SCOPE_TOOLS_CALL.into()],
            groups: Vec::new(),
        };
        let both = Auth::tokens(vec![grant("a", "token-a"), grant("b", "token-b")]).unwrap();
        for _ in 0..3 {
            let a = both.token("token-a").await.unwrap();
            assert_eq!(a.caller.subject_id(), "a");
            let b = both.token("token-b").await.unwrap();
            assert_eq!(b.caller.subject_id(), "b");
            for near in ["token-c", "token-a ", "token-", "Token-a", ""] {
                assert!(both.token(near).await.is_none(), "{near:?}");
            }
        }
        let revoked = Auth::tokens(vec![grant("b", "token-b")]).unwrap();
        assert!(
            revoked.token("token-a").await.is_none(),
            "revoked by the reload"
        );
        assert_eq!(
            revoked.token("token-b").await.unwrap().caller.subject_id(),
            "b"
        );
        // Granted again, to someone else: the kept digest names whom the grants say.
        let moved = Auth::tokens(vec![grant("c", "token-a")]).unwrap();
        assert_eq!(
            moved.token("token-a").await.unwrap().caller.subject_id(),
            "c"
        );
    }

    #[tokio::test]
    async fn tokens_map_to_their_subject_and_scopes() {
        let auth = Auth::tokens(vec![TokenGrant {
            subject: "agent-1".into(),
            tenant: None,
            token_sha256: token_sha256("s3cret"),
            scopes: vec![SCOPE_TOOLS_CALL.into()],
            groups: Vec::new(),
        }])
        .unwrap();
        let p = auth
            .authenticate(&headers(Some("Bearer s3cret")))
            .await
            .unwrap();
        assert_eq!(p.caller.subject_id(), "agent-1");
        assert!(p.authenticated);
        assert!(p.require(SCOPE_TOOLS_CALL).is_ok());
        assert!(matches!(
            p.require(SCOPE_RESPOND),
            Err(AuthError::Forbidden { .. })
        ));
        assert!(
            auth.authenticate(&headers(Some("bearer s3cret")))
                .await
                .is_ok()
        );
        for bad in [
            None,
            Some("Bearer nope"),
            Some("Basic s3cret"),
            Some("Bearer "),
        ] {
            assert!(
                matches!(
                    auth.authenticate(&headers(bad)).await,
                    Err(AuthError::Unauthorized { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn bad_token_configuration_is_refused() {
        let grant = |digest: &str, scopes: &[&str]| TokenGrant {
            subject: "a".into(),
            tenant: None,
            token_sha256: digest.into(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            groups: Vec::new(),
        };
        let good = token_sha256("x");
        assert!(matches!(
            Auth::tokens(vec![]),
            Err(AuthConfigError::NoTokens)
        ));
        assert!(matches!(
            Auth::tokens(vec![grant("abc", &[])]),
            Err(AuthConfigError::BadDigest { .. })
        ));
        assert!(matches!(
            Auth::tokens(vec![grant(&good, &["admin"])]),
            Err(AuthConfigError::UnknownScope { .. })
        ));
        assert!(matches!(
            Auth::tokens(vec![grant(&good, &[]), grant(&good.to_uppercase(), &[])]),
            Err(AuthConfigError::Duplicate { .. })
        ));
    }
}
