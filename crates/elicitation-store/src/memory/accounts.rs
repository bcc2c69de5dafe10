//! The memory store's connected accounts: kept in this process only (lost on restart, so a
//! person connects again), bounded per caller and in all.

use std::collections::{BTreeMap, HashMap};
use std::sync::PoisonError;

use async_trait::async_trait;

use super::MemoryStore;
use crate::accounts::{check_module, check_tokens};
use crate::{Account, AccountStore, AccountTokens, Caller, MAX_ACCOUNTS_PER_CALLER, StoreError};

/// Most accounts the memory store holds in all.
const MAX_ACCOUNTS: usize = 100_000;

/// Every caller's accounts, by module.
#[derive(Default)]
pub(super) struct Accounts {
    by_caller: HashMap<Caller, BTreeMap<String, Account>>,
    count: usize,
}

impl Accounts {
    /// Removes `caller`'s account at `module`; whether there was one.
    fn take(&mut self, caller: &Caller, module: &str) -> bool {
        let Some(mine) = self.by_caller.get_mut(caller) else {
            return false;
        };
        let removed = mine.remove(module).is_some();
        if mine.is_empty() {
            self.by_caller.remove(caller);
        }
        if removed {
            self.count -= 1;
        }
        removed
    }
}

#[async_trait]
impl AccountStore for MemoryStore {
    async fn save_account(
        &self,
        caller: &Caller,
        module: &str,
        tokens: &AccountTokens,
        reconnect: bool,
    ) -> Result<Account, StoreError> {
        check_module(module)?;
        check_tokens(tokens)?;
        let now = elicitation_core::truncate_to_micros(self.clock.now());
        let mut accounts = self.accounts.lock().unwrap_or_else(PoisonError::into_inner);
        let total = accounts.count;
        let mine = accounts.by_caller.entry(caller.clone()).or_default();
        let connected_at = match mine.get(module) {
            Some(old) if !reconnect => old.connected_at,
            Some(_) => now,
            None if mine.len() >= MAX_ACCOUNTS_PER_CALLER => {
                return Err(StoreError::AccountLimit {
                    limit: MAX_ACCOUNTS_PER_CALLER,
                });
            }
            None if total >= MAX_ACCOUNTS => {
                return Err(StoreError::Full {
                    limit: MAX_ACCOUNTS,
                });
            }
            None => now,
        };
        let version = mine.get(module).map_or(1, |old| old.version + 1);
        let account = Account {
            caller: caller.clone(),
            module: module.to_owned(),
            tokens: tokens.clone(),
            connected_at,
            updated_at: now,
            version,
        };
        let added = mine.insert(module.to_owned(), account.clone()).is_none();
        if added {
            accounts.count += 1;
        }
        Ok(account)
    }

    async fn refresh_account(
        &self,
        caller: &Caller,
        module: &str,
        version: i64,
        tokens: &AccountTokens,
    ) -> Result<Option<Account>, StoreError> {
        check_tokens(tokens)?;
        let now = elicitation_core::truncate_to_micros(self.clock.now());
        let mut accounts = self.accounts.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(account) = accounts
            .by_caller
            .get_mut(caller)
            .and_then(|mine| mine.get_mut(module))
            .filter(|a| a.version == version)
        else {
            return Ok(None);
        };
        account.tokens = tokens.clone();
        account.updated_at = now;
        account.version += 1;
        Ok(Some(account.clone()))
    }

    async fn remove_account_at(
        &self,
        caller: &Caller,
        module: &str,
        version: i64,
    ) -> Result<bool, StoreError> {
        let mut accounts = self.accounts.lock().unwrap_or_else(PoisonError::into_inner);
        let at = accounts
            .by_caller
            .get(caller)
            .and_then(|mine| mine.get(module))
            .map(|a| a.version);
        Ok(at == Some(version) && accounts.take(caller, module))
    }

    async fn account(&self, caller: &Caller, module: &str) -> Result<Option<Account>, StoreError> {
        let accounts = self.accounts.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(accounts
            .by_caller
            .get(caller)
            .and_then(|mine| mine.get(module))
            .cloned())
    }

    async fn accounts(&self, caller: &Caller) -> Result<Vec<Account>, StoreError> {
        let accounts = self.accounts.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(accounts
            .by_caller
            .get(caller)
            .map(|mine| mine.values().cloned().collect())
            .unwrap_or_default())
    }

    async fn remove_account(&self, caller: &Caller, module: &str) -> Result<bool, StoreError> {
        let mut accounts = self.accounts.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(accounts.take(caller, module))
    }
}
