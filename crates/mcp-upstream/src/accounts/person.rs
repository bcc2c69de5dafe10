//! A person's own account at a module's authorization server, as the credentials each of
//! their calls carries: the stored tokens, refreshed shortly before they end.

use crate::credentials::{CredentialError, Credentials};
use async_trait::async_trait;
use http::HeaderValue;
use std::sync::Arc;

use super::oauth::{REFRESH_EARLY, now_unix};
use super::*;

/// One caller's credentials at a module of kind `user`: their own token, read from the
/// vault for every request (a disconnection or reconnection, on any instance, counts at
/// once), refreshed when it is about to expire or the module refused it (one refresh at a
/// time), forgotten when it cannot be refreshed.
pub struct PersonCredentials {
    oauth: Arc<UserOAuth>,
    vault: Arc<dyn Vault>,
    who: String,
    /// The access token the module last refused: refreshed rather than sent again.
    refused: std::sync::Mutex<Option<HeaderValue>>,
    /// Held while a refresh runs.
    refreshing: tokio::sync::Mutex<()>,
    /// The access token this instance last obtained and the seconds it was issued for: a
    /// token living less than twice [`REFRESH_EARLY`] is refreshed at half its life, not
    /// 30 s before its end (which would refresh it at every request).
    obtained: std::sync::Mutex<Option<(String, i64)>>,
}

impl PersonCredentials {
    /// The credentials of caller `who` (an instance key) at `oauth`'s module.
    pub fn new(oauth: Arc<UserOAuth>, vault: Arc<dyn Vault>, who: String) -> Self {
        PersonCredentials {
            oauth,
            vault,
            who,
            refused: std::sync::Mutex::new(None),
            refreshing: tokio::sync::Mutex::new(()),
            obtained: std::sync::Mutex::new(None),
        }
    }

    fn not_connected(&self) -> CredentialError {
        CredentialError::NotConnected {
            module: self.oauth.config.module.clone(),
        }
    }

    fn fresh(&self, tokens: &TokenSet) -> bool {
        let Some(at) = tokens.expires_at else {
            return true;
        };
        let margin = match &*self
            .obtained
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            Some((token, lifetime)) if *token == tokens.access_token => {
                REFRESH_EARLY.min(lifetime / 2)
            }
            _ => REFRESH_EARLY,
        };
        at - margin > now_unix()
    }

    fn was_refused(&self, value: &HeaderValue) -> bool {
        self.refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            == Some(value)
    }

    async fn forget(&self, version: i64) {
        if let Err(e) = self
            .vault
            .forget(&self.who, &self.oauth.config.module, version)
            .await
        {
            tracing::warn!(module = %self.oauth.config.module, error = %e, "could not forget an account that no longer works");
        }
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
        // Twice at most: once more when the tokens changed under a refresh.
        for _ in 0..2 {
            let Some(stored) = self
                .vault
                .load(&self.who, module)
                .await
                .map_err(CredentialError::Failed)?
            else {
                return Err(self.not_connected());
            };
            let value = header(&stored.tokens.access_token)?;
            if self.fresh(&stored.tokens) && !self.was_refused(&value) {
                return Ok(Some(value));
            }
            let _one = self.refreshing.lock().await;
            // Refreshed by another request meanwhile: its tokens serve this one too (judged
            // fresh or not, they are the newest there are: refreshing them again would send
            // one refresh per waiting request, and a provider that detects a refresh token's
            // reuse revokes the whole family).
            let again = self
                .vault
                .load(&self.who, module)
                .await
                .map_err(CredentialError::Failed)?;
            match again {
                Some(again) if again.version != stored.version => {
                    let value = header(&again.tokens.access_token)?;
                    let live = again.tokens.expires_at.is_none_or(|at| at > now_unix());
                    if live && !self.was_refused(&value) {
                        return Ok(Some(value));
                    }
                    continue;
                }
                Some(_) => {}
                None => return Err(self.not_connected()),
            }
            if stored.tokens.refresh_token.is_none() {
                tracing::info!(module = %module, "a person's token ended or was refused and cannot be refreshed; they connect again");
                self.forget(stored.version).await;
                return Err(self.not_connected());
            }
            match self.oauth.refresh(&stored.tokens).await {
                Ok(new) => {
                    let value = header(&new.access_token)?;
                    match self
                        .vault
                        .refreshed(&self.who, module, stored.version, &new)
                        .await
                    {
                        Ok(true) => {
                            if let Some(at) = new.expires_at {
                                *self
                                    .obtained
                                    .lock()
                                    .unwrap_or_else(std::sync::PoisonError::into_inner) =
                                    Some((new.access_token.clone(), at - now_unix()));
                            }
                            return Ok(Some(value));
                        }
                        // Changed meanwhile (disconnected, reconnected, refreshed
                        // elsewhere): what the store has now decides.
                        Ok(false) => continue,
                        Err(e) => return Err(CredentialError::Failed(e)),
                    }
                }
                Err(RefreshError::Refused(why)) => {
                    // Another instance may have used the refresh token first (rotation):
                    // its newer tokens stay; only these are forgotten.
                    let now = self
                        .vault
                        .load(&self.who, module)
                        .await
                        .map_err(CredentialError::Failed)?;
                    if now.as_ref().map(|s| s.version) != Some(stored.version) {
                        continue;
                    }
                    tracing::info!(module = %module, reason = %why, "a person's account no longer works; they connect it again");
                    self.forget(stored.version).await;
                    return Err(self.not_connected());
                }
                Err(RefreshError::Failed(why)) => return Err(CredentialError::Failed(why)),
            }
        }
        Err(CredentialError::Failed(format!(
            "module {module}: the person's account kept changing while it was read"
        )))
    }

    async fn refused(&self, used: Option<&HeaderValue>, _challenge: Option<&str>) -> bool {
        // The module refused the person's token: the next request refreshes it (or, without
        // a refresh token, forgets it) rather than sending it again.
        let Some(used) = used else {
            return false;
        };
        *self
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(used.clone());
        true
    }
}
