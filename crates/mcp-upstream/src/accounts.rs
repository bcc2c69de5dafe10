//! Connected accounts (`auth.kind = "user"`): each caller's calls to a module carry that
//! person's own OAuth token at the module's authorization server, got once through the
//! approvals page (authorization code with PKCE, [`Connect`]) and kept in the gateway's
//! store ([`Vault`]); `PersonCredentials` sends it, refreshes it when it expires, and says
//! [`CredentialError::NotConnected`](crate::credentials::CredentialError::NotConnected) when there is none.
//!
//! The values and the two traits are here; the OAuth client itself (`UserOAuth`, over
//! HTTPS) and `PersonCredentials` come with feature `http`.

#[cfg(feature = "http")]
mod oauth;
#[cfg(feature = "http")]
mod person;

#[cfg(feature = "http")]
pub use oauth::{UserOAuth, UserOAuthConfig};
#[cfg(feature = "http")]
pub use person::PersonCredentials;

use async_trait::async_trait;

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
    /// The client the tokens were issued to (refreshing needs the same one; a configured
    /// client's secret is never kept here, but read from the configuration).
    pub client: RegisteredClient,
    /// The authorization server (issuer) that issued them: they are refreshed there only.
    pub issuer: Option<String>,
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

/// A caller's stored tokens, with the version of the store's row they were read at.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The tokens.
    pub tokens: TokenSet,
    /// The row's version: a refresh replaces (a refusal removes) exactly these.
    pub version: i64,
}

/// Where the people's tokens are kept, by the caller's instance key (`who`) and module.
#[async_trait]
pub trait Vault: Send + Sync + 'static {
    /// The caller's tokens at the module.
    async fn load(&self, who: &str, module: &str) -> Result<Option<Stored>, String>;
    /// Stores refreshed tokens in place of those read at `version`; `false` when they
    /// changed meanwhile (then nothing is stored).
    async fn refreshed(
        &self,
        who: &str,
        module: &str,
        version: i64,
        tokens: &TokenSet,
    ) -> Result<bool, String>;
    /// Forgets the tokens read at `version`, which the authorization server or the module
    /// no longer takes (newer ones stay).
    async fn forget(&self, who: &str, module: &str, version: i64) -> Result<(), String>;
}

/// Why a refresh did not give new tokens.
#[derive(Debug)]
pub enum RefreshError {
    /// The server refused the refresh token: the person connects again.
    Refused(String),
    /// The server could not be asked (try again later).
    Failed(String),
}

/// Where a person connects their account at one module: the approvals page drives it (the
/// gate only carries it), so that the gate needs no HTTP client. `UserOAuth` is the one.
#[async_trait]
pub trait Connect: Send + Sync + 'static {
    /// The module's name.
    fn module(&self) -> &str;

    /// Whether the authorization server's answer (its `iss`, RFC 9207) came from this
    /// module's server.
    async fn check_issuer(&self, iss: Option<&str>) -> Result<(), String>;

    /// The authorization request a person's browser is sent to, with the client the code
    /// will be redeemed by: `state` and the PKCE S256 `challenge` are the caller's.
    async fn authorization_url(
        &self,
        redirect_url: &str,
        state: &str,
        challenge: &str,
    ) -> Result<(String, RegisteredClient), String>;

    /// Redeems the code the person came back with.
    async fn redeem(
        &self,
        client: &RegisteredClient,
        code: &str,
        verifier: &str,
        redirect_url: &str,
    ) -> Result<TokenSet, String>;
}
