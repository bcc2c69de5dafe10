//! The people's connected accounts, as the modules run as their callers read them: the
//! store's accounts, by the caller of an instance key.

use std::sync::Arc;

use async_trait::async_trait;
use elicitation_store::{AccountTokens, Caller, Store};
use mcp_upstream::accounts::{RegisteredClient, Stored, TokenSet, Vault};

/// The store as a [`Vault`].
pub(crate) struct StoreVault {
    store: Arc<dyn Store>,
}

impl StoreVault {
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        StoreVault { store }
    }
}

fn caller(who: &str) -> Result<Caller, String> {
    mcp_gate::caller_of_instance_key(who).ok_or_else(|| "not a caller's instance".to_owned())
}

/// The store's tokens as the OAuth client uses them (`None`: stored without their client,
/// which cannot be refreshed or used).
pub(crate) fn token_set(tokens: AccountTokens) -> Option<TokenSet> {
    Some(TokenSet {
        client: RegisteredClient {
            id: tokens.client_id?,
            secret: tokens.client_secret,
        },
        access_token: tokens.access_token,
        refresh_token: tokens.refresh_token,
        expires_at: tokens.expires_at.map(time::OffsetDateTime::unix_timestamp),
        scope: tokens.scope,
        issuer: tokens.issuer,
    })
}

/// The OAuth client's tokens as the store keeps them.
pub(crate) fn account_tokens(tokens: &TokenSet) -> AccountTokens {
    AccountTokens {
        access_token: tokens.access_token.clone(),
        refresh_token: tokens.refresh_token.clone(),
        expires_at: tokens
            .expires_at
            .and_then(|at| time::OffsetDateTime::from_unix_timestamp(at).ok()),
        scope: tokens.scope.clone(),
        client_id: Some(tokens.client.id.clone()),
        client_secret: tokens.client.secret.clone(),
        issuer: tokens.issuer.clone(),
    }
}

#[async_trait]
impl Vault for StoreVault {
    async fn load(&self, who: &str, module: &str) -> Result<Option<Stored>, String> {
        let account = self
            .store
            .account(&caller(who)?, module)
            .await
            .map_err(|e| format!("the store: {e}"))?;
        Ok(account.and_then(|a| {
            let version = a.version;
            token_set(a.tokens).map(|tokens| Stored { tokens, version })
        }))
    }

    async fn refreshed(
        &self,
        who: &str,
        module: &str,
        version: i64,
        tokens: &TokenSet,
    ) -> Result<bool, String> {
        self.store
            .refresh_account(&caller(who)?, module, version, &account_tokens(tokens))
            .await
            .map(|account| account.is_some())
            .map_err(|e| format!("the store: {e}"))
    }

    async fn forget(&self, who: &str, module: &str, version: i64) -> Result<(), String> {
        self.store
            .remove_account_at(&caller(who)?, module, version)
            .await
            .map(|_| ())
            .map_err(|e| format!("the store: {e}"))
    }
}
