//! The calls a person approved lately: what a held call is compared with (the page's diff,
//! the notifiers' `since_last_approved`).

use crate::{
    Caller, ElicitationId, ElicitationStatus, ElicitationStore, ListQuery, StoreError,
    StoredElicitation,
};

/// How many of a caller's latest answered elicitations are looked through.
pub const RECENT_ANSWERED: usize = 100;

/// `caller`'s confirmations a person approved, among its [`RECENT_ANSWERED`] latest
/// answered elicitations (newest first).
pub async fn recently_approved(
    store: &dyn ElicitationStore,
    caller: &Caller,
) -> Result<Vec<StoredElicitation>, StoreError> {
    let query = ListQuery {
        status: Some(ElicitationStatus::Responded),
        limit: RECENT_ANSWERED,
    };
    Ok(store
        .list(caller, query)
        .await?
        .into_iter()
        .filter_map(Result::ok)
        .filter(|s| s.call.is_some() && s.elicitation.confirmation_state() == Some(true))
        .collect())
}

/// Of `approved`, the call of `tool` answered last, other than `not` (the held call itself).
pub fn last_approved<'a>(
    approved: impl IntoIterator<Item = &'a StoredElicitation>,
    tool: &str,
    not: ElicitationId,
) -> Option<&'a StoredElicitation> {
    approved
        .into_iter()
        .filter(|s| s.call.as_ref().is_some_and(|c| c.tool == tool) && s.elicitation.id != not)
        .max_by_key(|s| s.elicitation.responded_at)
}
