//! Connected accounts in PostgreSQL: one row per caller and module, its tokens sealed, read
//! and written only in a transaction scoped to its caller (row-level security).

use async_trait::async_trait;
use elicitation_core::ElicitationId;
use ring::digest::{SHA256, digest};
use ring::rand::SecureRandom;
use tokio_postgres::Row;
use uuid::Uuid;

use super::{PostgresStore, sql, tenant_param};
use crate::accounts::{check_module, check_tokens};
use crate::grant::GrantId;
use crate::seal::{KeyRing, SealContext, Sealed};
use crate::{Account, AccountStore, AccountTokens, Caller, MAX_ACCOUNTS_PER_CALLER, StoreError};

const ACCOUNT_TOKENS: &str = "account_tokens";

/// What the tokens of `caller`'s account at `module` are sealed to: the caller, and (as the
/// row id of the associated data) a digest of the module's name, so a sealed blob moved to
/// another caller's or module's row does not open.
fn seal_context<'a>(caller: &'a Caller, module: &str) -> SealContext<'a> {
    let hash = digest(&SHA256, module.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&hash.as_ref()[..16]);
    SealContext {
        column: ACCOUNT_TOKENS,
        id: ElicitationId::from_uuid(Uuid::from_bytes(bytes)),
        caller,
        call: None,
    }
}

fn corrupt(module: &str) -> StoreError {
    StoreError::Corrupt {
        id: ElicitationId::from_uuid(Uuid::nil()),
        reason: format!("the connected account at module {module:?} does not open as its tokens"),
    }
}

/// Reads a row selected with `account_columns!()`, opening its tokens.
fn decode(row: &Row, caller: &Caller, keys: &KeyRing) -> Result<Account, StoreError> {
    let get_err = |e: tokio_postgres::Error| StoreError::Backend(Box::new(e));
    let module: String = row.try_get("module").map_err(get_err)?;
    let sealed = Sealed {
        blob: row.try_get("tokens_sealed").map_err(get_err)?,
        key_id: row.try_get("tokens_key_id").map_err(get_err)?,
    };
    let bytes = keys.open(&sealed, seal_context(caller, &module))?;
    let tokens =
        AccountTokens::from_sealed_json(&bytes, &module).ok_or_else(|| corrupt(&module))?;
    Ok(Account {
        caller: caller.clone(),
        tokens,
        connected_at: row.try_get("connected_at").map_err(get_err)?,
        updated_at: row.try_get("updated_at").map_err(get_err)?,
        version: row.try_get("version").map_err(get_err)?,
        module,
    })
}

#[async_trait]
impl AccountStore for PostgresStore {
    async fn save_account(
        &self,
        caller: &Caller,
        module: &str,
        tokens: &AccountTokens,
        reconnect: bool,
    ) -> Result<Account, StoreError> {
        check_module(module)?;
        check_tokens(tokens)?;
        let now = self.now();
        let mut random = [0u8; 10];
        self.rng
            .fill(&mut random)
            .map_err(|_| StoreError::Seal(crate::SealError::Random))?;
        let id = *GrantId::v7(now, random).as_uuid();
        let sealed = self
            .keys
            .seal(&tokens.sealed_json(module), seal_context(caller, module))?;
        let limit = i64::try_from(MAX_ACCOUNTS_PER_CALLER).unwrap_or(i64::MAX);
        let rows = self
            .scoped(
                caller,
                sql::SAVE_ACCOUNT,
                &[
                    &id,
                    &caller.subject_id(),
                    &tenant_param(caller),
                    &module,
                    &sealed.blob,
                    &sealed.key_id,
                    &now,
                    &reconnect,
                    &limit,
                ],
            )
            .await?;
        match rows.first() {
            Some(row) => decode(row, caller, &self.keys),
            None => Err(StoreError::AccountLimit {
                limit: MAX_ACCOUNTS_PER_CALLER,
            }),
        }
    }

    async fn refresh_account(
        &self,
        caller: &Caller,
        module: &str,
        version: i64,
        tokens: &AccountTokens,
    ) -> Result<Option<Account>, StoreError> {
        check_tokens(tokens)?;
        let sealed = self
            .keys
            .seal(&tokens.sealed_json(module), seal_context(caller, module))?;
        let now = self.now();
        let rows = self
            .scoped(
                caller,
                sql::REFRESH_ACCOUNT,
                &[
                    &caller.subject_id(),
                    &tenant_param(caller),
                    &module,
                    &version,
                    &sealed.blob,
                    &sealed.key_id,
                    &now,
                ],
            )
            .await?;
        rows.first()
            .map(|row| decode(row, caller, &self.keys))
            .transpose()
    }

    async fn remove_account_at(
        &self,
        caller: &Caller,
        module: &str,
        version: i64,
    ) -> Result<bool, StoreError> {
        let rows = self
            .scoped(
                caller,
                sql::REMOVE_ACCOUNT_AT,
                &[
                    &caller.subject_id(),
                    &tenant_param(caller),
                    &module,
                    &version,
                ],
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn account(&self, caller: &Caller, module: &str) -> Result<Option<Account>, StoreError> {
        let rows = self
            .scoped(
                caller,
                sql::ACCOUNT_ONE,
                &[&caller.subject_id(), &tenant_param(caller), &module],
            )
            .await?;
        rows.first()
            .map(|row| decode(row, caller, &self.keys))
            .transpose()
    }

    async fn accounts(&self, caller: &Caller) -> Result<Vec<Account>, StoreError> {
        let rows = self
            .scoped(
                caller,
                sql::ACCOUNTS_OF_CALLER,
                &[&caller.subject_id(), &tenant_param(caller)],
            )
            .await?;
        rows.iter()
            .map(|row| decode(row, caller, &self.keys))
            .collect()
    }

    async fn remove_account(&self, caller: &Caller, module: &str) -> Result<bool, StoreError> {
        let rows = self
            .scoped(
                caller,
                sql::REMOVE_ACCOUNT,
                &[&caller.subject_id(), &tenant_param(caller), &module],
            )
            .await?;
        Ok(!rows.is_empty())
    }
}
