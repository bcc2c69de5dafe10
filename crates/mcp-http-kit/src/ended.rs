//! The tokens the gateway handed out that ended before their time (legacy session ids
//! deleted, page sign-ins signed out), by hash, until they would have ended anyway: shared by
//! the sessions and the page, fed by the store's record so every instance refuses them.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use time::OffsetDateTime;

/// Ended tokens, by hash (`mcp_auth::sealed::token_hash`).
#[derive(Debug, Default)]
pub struct EndedTokens {
    until: Mutex<HashMap<[u8; 32], OffsetDateTime>>,
}

impl EndedTokens {
    /// Whether the token hashing to `hash` ended.
    pub fn contains(&self, hash: &[u8; 32]) -> bool {
        self.lock().contains_key(hash)
    }

    /// Ends, here, what hashes to `hash` until `until`.
    pub fn end(&self, hash: [u8; 32], until: OffsetDateTime) {
        self.lock().insert(hash, until);
    }

    /// Ends, here, each of `ended` (hash, until when).
    pub fn extend(&self, ended: impl IntoIterator<Item = ([u8; 32], OffsetDateTime)>) {
        self.lock().extend(ended);
    }

    /// Forgets what is past the time it would have ended anyway, it being `now`.
    pub fn prune(&self, now: OffsetDateTime) {
        self.lock().retain(|_, until| *until > now);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], OffsetDateTime>> {
        self.until.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
