//! What an HTTP module is sent as its `Authorization`: a static bearer token, or (feature
//! `http`) the gateway's own OAuth client at the module's authorization server
//! (`client_credentials`, `token_exchange`). Secrets stay here: no error or log line carries
//! a token or a client secret.

#[cfg(feature = "http")]
mod oauth;

#[cfg(feature = "http")]
pub(crate) use oauth::oauth_client;
#[cfg(feature = "http")]
pub use oauth::{
    ClientCredentials, ClientCredentialsConfig, PersonExchange, TokenExchange, resource_metadata,
};

use std::sync::Arc;

use async_trait::async_trait;
use http::HeaderValue;

/// Why no credentials could be had for a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// They could not be had (why, without any secret).
    #[error("{0}")]
    Failed(String),
    /// The caller has no connected account at this module (`auth.kind = "user"`), or it no
    /// longer works: the person connects (again) on the approvals page.
    #[error("module {module} needs the caller's own account, which is not connected")]
    NotConnected {
        /// The module.
        module: String,
    },
}

impl From<String> for CredentialError {
    fn from(reason: String) -> Self {
        CredentialError::Failed(reason)
    }
}

/// The credentials of one module's requests.
#[async_trait]
pub trait Credentials: Send + Sync + 'static {
    /// The kind, for the audit record and the log (`bearer`, `client_credentials`).
    fn kind(&self) -> &'static str;

    /// The `Authorization` value of the next request; `None` while none can be had yet
    /// (the module's challenge will say where to get one).
    async fn authorization(&self) -> Result<Option<HeaderValue>, CredentialError>;

    /// The module answered `401` to a request sent with `used`, challenging with
    /// `challenge` (its `WWW-Authenticate`): `used` is forgotten and the challenge read.
    /// Whether asking again may succeed.
    async fn refused(&self, used: Option<&HeaderValue>, challenge: Option<&str>) -> bool;
}

/// Names the kind only: credentials are never printed.
impl std::fmt::Debug for dyn Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({})", self.kind())
    }
}

/// A token configured for the module (`kind = "bearer"`).
pub struct StaticBearer {
    value: HeaderValue,
}

impl StaticBearer {
    /// `Bearer <token>`, marked sensitive (never printed by the HTTP stack).
    pub fn new(token: &str) -> Result<Self, String> {
        let mut value = HeaderValue::from_str(&format!("Bearer {}", token.trim()))
            .map_err(|_| "the token is not a valid header value".to_owned())?;
        value.set_sensitive(true);
        Ok(StaticBearer { value })
    }
}

#[async_trait]
impl Credentials for StaticBearer {
    fn kind(&self) -> &'static str {
        "bearer"
    }

    async fn authorization(&self) -> Result<Option<HeaderValue>, CredentialError> {
        Ok(Some(self.value.clone()))
    }

    async fn refused(&self, _: Option<&HeaderValue>, _: Option<&str>) -> bool {
        // The same token again would be refused again.
        false
    }
}

/// Credentials shared by a module's requests and its stream.
pub type SharedCredentials = Arc<dyn Credentials>;

tokio::task_local! {
    /// The access token of the caller whose request is being served, for the exchanges
    /// (set around a tool call by the gate): exactly the token this request came with.
    pub static SUBJECT_TOKEN: Arc<str>;
}

/// Where the caller's own access token goes when they make a request (mode `jwt`): the
/// token-exchange modules keep each caller's latest, for requests that carry none of their
/// own (a module's stream, a prompt). The gate hands tokens over through this, without
/// knowing the exchange's HTTP client.
pub trait SubjectTokens: Send + Sync + 'static {
    /// Caller `who` (its instance key) presented `token` (its latest request).
    fn present(&self, who: &str, token: &str);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_static_token_is_sent_as_is_and_not_asked_again() {
        let bearer = StaticBearer::new("s3cret").unwrap();
        let value = bearer.authorization().await.unwrap().unwrap();
        assert_eq!(value, "Bearer s3cret");
        assert!(value.is_sensitive());
        assert!(!bearer.refused(Some(&value), None).await);
        assert!(StaticBearer::new("bad\nvalue").is_err());
    }
}
