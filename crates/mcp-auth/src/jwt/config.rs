//! What mode `jwt` is configured with: the issuers (their keys, audience, scopes in their
//! own names, groups claim), and how a subject and a group are named per issuer.
use crate::principal::{
    SCOPE_AUDIT, SCOPE_CATALOG, SCOPE_CREATE, SCOPE_METRICS, SCOPE_RESPOND, SCOPE_TOOLS_CALL,
};
use std::path::PathBuf;
use std::time::Duration;

use super::*;

/// Where an issuer's keys are published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    /// An `https://` URL (or `http://` on loopback, for tests and sidecars).
    Url(String),
    /// A JSON file with the key set.
    File(PathBuf),
}

/// One trusted token issuer.
#[derive(Debug, Clone)]
pub struct IssuerConfig {
    /// Its `iss`, exactly.
    pub issuer: String,
    /// A short name for its subjects: the caller is `{sub}@{name}`.
    pub name: String,
    /// Its keys.
    pub jwks: JwksSource,
    /// Accepted algorithms (asymmetric only).
    pub algorithms: Vec<Algorithm>,
    /// How long keys are trusted after the last successful fetch: while the JWKS cannot be
    /// fetched, the cached keys keep working this long, then nothing is accepted.
    pub grace: Duration,
    /// How often the JWKS is fetched when its cache headers say nothing.
    pub refresh_interval: Duration,
    /// At most one fetch for an unknown key per this.
    pub min_refresh_interval: Duration,
}

/// The token scope names that grant the gateway's scopes.
#[derive(Debug, Clone)]
pub struct ScopeNames {
    /// Grants `tools:call`.
    pub tools_call: String,
    /// Grants `elicitations:respond`.
    pub respond: String,
    /// Grants `elicitations:create`.
    pub create: String,
    /// Grants `metrics:read`.
    pub metrics: String,
    /// Grants `catalog:approve`.
    pub catalog: String,
    /// Grants `audit:read`.
    pub audit: String,
}

impl Default for ScopeNames {
    fn default() -> Self {
        ScopeNames {
            tools_call: SCOPE_TOOLS_CALL.into(),
            respond: SCOPE_RESPOND.into(),
            create: SCOPE_CREATE.into(),
            metrics: SCOPE_METRICS.into(),
            catalog: SCOPE_CATALOG.into(),
            audit: SCOPE_AUDIT.into(),
        }
    }
}

impl ScopeNames {
    /// The token's name for one of the gateway's scopes.
    pub fn external(&self, scope: &str) -> String {
        match scope {
            SCOPE_TOOLS_CALL => self.tools_call.clone(),
            SCOPE_RESPOND => self.respond.clone(),
            SCOPE_CREATE => self.create.clone(),
            SCOPE_METRICS => self.metrics.clone(),
            SCOPE_CATALOG => self.catalog.clone(),
            SCOPE_AUDIT => self.audit.clone(),
            other => other.to_owned(),
        }
    }

    /// The token scope names an MCP client may ask for (advertised in the metadata and the
    /// challenge; the scraper's `metrics` scope is left out: no client needs it).
    pub fn all(&self) -> Vec<String> {
        vec![
            self.tools_call.clone(),
            self.respond.clone(),
            self.create.clone(),
        ]
    }
}

/// Mode `jwt`'s configuration.
#[derive(Debug, Clone)]
pub struct JwtConfig {
    /// The gateway's resource URL (`https://gw.example.com/mcp`): the audience tokens must
    /// carry (RFC 8707), and the `resource` of its protected resource metadata.
    pub resource: String,
    /// The trusted issuers.
    pub issuers: Vec<IssuerConfig>,
    /// Scope names.
    pub scopes: ScopeNames,
    /// A claim naming the caller's tenant, if the organisation has tenants.
    pub tenant_claim: Option<String>,
    /// The claim listing the caller's groups (an array of strings, or a space-separated
    /// string), for `[[approvers]]`.
    pub groups_claim: String,
    /// Clock skew allowed for `exp` and `nbf`.
    pub leeway: Duration,
}

/// A JWT configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtConfigError {
    /// No issuer.
    #[error("auth mode \"jwt\" needs at least one [[auth.jwt.issuers]] entry")]
    NoIssuers,
    /// An algorithm that is not an asymmetric signature.
    #[error(
        "issuer {issuer:?}: algorithm {algorithm} is not accepted (RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA)"
    )]
    Algorithm {
        /// The issuer.
        issuer: String,
        /// The algorithm.
        algorithm: String,
    },
    /// The resource is not an absolute http(s) URL.
    #[error(
        "the resource {0:?} must be the gateway's absolute https:// URL (http:// only on loopback)"
    )]
    Resource(String),
    /// Two issuers with one `iss`.
    #[error("issuer {0:?} is configured twice")]
    Duplicate(String),
    /// Two issuers with one name: their callers would be one caller.
    #[error(
        "issuers {first:?} and {second:?} are both named {name:?}; give each its own name (callers are sub@name, so one name would make two issuers' callers one)"
    )]
    DuplicateName {
        /// The name.
        name: String,
        /// One issuer.
        first: String,
        /// The other.
        second: String,
    },
    /// A name that cannot end a caller's subject.
    #[error(
        "issuer {issuer:?}: name {name:?} must be 1 to 256 characters, without '@', '#', \"://\" or control characters"
    )]
    Name {
        /// The issuer.
        issuer: String,
        /// The name.
        name: String,
    },
    /// The client that fetches key sets could not be made (the platform's TLS roots).
    #[error("the client that fetches the issuers' keys: {0}")]
    Client(String),
}

/// The default name of `issuer`: its URL without the scheme and a trailing `/`
/// (`https://kc.example/realms/a` → `kc.example/realms/a`), so two issuers on one host (two
/// realms, two tenants) are two names.
pub fn default_issuer_name(issuer: &str) -> String {
    let rest = issuer.split_once("://").map_or(issuer, |(_, rest)| rest);
    rest.trim_end_matches('/').to_owned()
}
