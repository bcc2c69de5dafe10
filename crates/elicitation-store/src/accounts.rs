//! Connected accounts: the OAuth tokens a person got at a module's authorization server, so
//! that their calls to that module run as them (a module with `auth.kind = "user"`). A
//! caller's tokens are that caller's alone — another caller's behave exactly like missing
//! ones — and PostgreSQL keeps them sealed (AES-256-GCM, bound to the caller) under
//! row-level security. One account per caller and module; connecting again replaces it.

use std::fmt;

use time::OffsetDateTime;

use crate::{Caller, StoreError};

/// Most accounts one caller holds at once (one per module).
pub const MAX_ACCOUNTS_PER_CALLER: usize = 64;

/// Longest module name an account is kept for (the database column's bound).
pub const MAX_ACCOUNT_MODULE_LEN: usize = 200;

/// What a person's authorization server issued.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct AccountTokens {
    /// The access token sent to the module.
    pub access_token: String,
    /// The refresh token, when the server gave one.
    pub refresh_token: Option<String>,
    /// When the access token expires (`None`: the server did not say).
    pub expires_at: Option<OffsetDateTime>,
    /// The scopes granted, as the server wrote them.
    pub scope: Option<String>,
    /// The gateway's client id at the server the tokens came from (a refresh needs it).
    pub client_id: Option<String>,
    /// That client's secret, when the server gave it one at registration (a configured
    /// client's secret is the configuration's, never stored).
    pub client_secret: Option<String>,
    /// The authorization server (issuer) the tokens came from: they are refreshed there
    /// only.
    pub issuer: Option<String>,
}

impl AccountTokens {
    /// The tokens as sealed: with the module they were issued for, which opening checks
    /// (a sealed blob moved to another module's row does not open as that module's).
    #[cfg(feature = "postgres")]
    pub(crate) fn sealed_json(&self, module: &str) -> Vec<u8> {
        serde_json::json!({
            "module": module,
            "access_token": self.access_token,
            "refresh_token": self.refresh_token,
            "expires_at": self.expires_at.map(OffsetDateTime::unix_timestamp),
            "scope": self.scope,
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "issuer": self.issuer,
        })
        .to_string()
        .into_bytes()
    }

    /// The tokens of [`AccountTokens::sealed_json`], when they were sealed for `module`.
    #[cfg(feature = "postgres")]
    pub(crate) fn from_sealed_json(bytes: &[u8], module: &str) -> Option<AccountTokens> {
        let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        if value.get("module")?.as_str()? != module {
            return None;
        }
        let text = |key: &str| {
            value
                .get(key)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        Some(AccountTokens {
            access_token: text("access_token")?,
            refresh_token: text("refresh_token"),
            expires_at: match value.get("expires_at").and_then(serde_json::Value::as_i64) {
                Some(at) => Some(OffsetDateTime::from_unix_timestamp(at).ok()?),
                None => None,
            },
            scope: text("scope"),
            client_id: text("client_id"),
            client_secret: text("client_secret"),
            issuer: text("issuer"),
        })
    }
}

/// Never prints a token.
impl fmt::Debug for AccountTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccountTokens")
            .field("refresh_token", &self.refresh_token.is_some())
            .field("expires_at", &self.expires_at)
            .field("scope", &self.scope)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// A caller's connected account at one module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// Whose.
    pub caller: Caller,
    /// The module's configured name.
    pub module: String,
    /// The tokens.
    pub tokens: AccountTokens,
    /// When the person connected it (kept when its tokens are refreshed).
    pub connected_at: OffsetDateTime,
    /// When its tokens were last stored.
    pub updated_at: OffsetDateTime,
    /// From 1, one more with every change of its tokens.
    pub version: i64,
}

/// Checks a module name an account is kept for.
pub(crate) fn check_module(module: &str) -> Result<(), StoreError> {
    if module.is_empty()
        || module.len() > MAX_ACCOUNT_MODULE_LEN
        || module.chars().any(char::is_control)
    {
        return Err(StoreError::InvalidAccount(format!(
            "a module name of 1 to {MAX_ACCOUNT_MODULE_LEN} bytes without control characters"
        )));
    }
    Ok(())
}

/// Checks tokens before they are stored.
pub(crate) fn check_tokens(tokens: &AccountTokens) -> Result<(), StoreError> {
    const MAX: usize = 16 * 1024;
    if tokens.access_token.is_empty() {
        return Err(StoreError::InvalidAccount("an empty access token".into()));
    }
    if tokens.access_token.len() + tokens.refresh_token.as_ref().map_or(0, String::len) > MAX {
        return Err(StoreError::InvalidAccount(format!(
            "tokens longer than {MAX} bytes"
        )));
    }
    Ok(())
}

/// The accounts part of a store.
#[async_trait::async_trait]
pub trait AccountStore: Send + Sync + 'static {
    /// Stores `caller`'s tokens for `module` at `now`: a new account, or new tokens for the
    /// one it has (its `connected_at` kept unless `reconnect`). A caller may hold
    /// [`MAX_ACCOUNTS_PER_CALLER`] accounts.
    async fn save_account(
        &self,
        caller: &Caller,
        module: &str,
        tokens: &AccountTokens,
        reconnect: bool,
    ) -> Result<Account, StoreError>;

    /// A refresh: `caller`'s account at `module` gets `tokens` only if it is still at
    /// `version` (the one the refresh read); `None` if it changed or is gone meanwhile (a
    /// disconnection, a reconnection, another instance's refresh), and nothing is stored.
    async fn refresh_account(
        &self,
        caller: &Caller,
        module: &str,
        version: i64,
        tokens: &AccountTokens,
    ) -> Result<Option<Account>, StoreError>;

    /// Forgets `caller`'s account at `module` only if it is still at `version`; whether it
    /// did.
    async fn remove_account_at(
        &self,
        caller: &Caller,
        module: &str,
        version: i64,
    ) -> Result<bool, StoreError>;

    /// `caller`'s account at `module`, if connected.
    async fn account(&self, caller: &Caller, module: &str) -> Result<Option<Account>, StoreError>;

    /// Every account of `caller`, ordered by module.
    async fn accounts(&self, caller: &Caller) -> Result<Vec<Account>, StoreError>;

    /// Forgets `caller`'s account at `module`; whether there was one.
    async fn remove_account(&self, caller: &Caller, module: &str) -> Result<bool, StoreError>;
}
