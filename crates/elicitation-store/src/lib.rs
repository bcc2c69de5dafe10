//! Where elicitations live: the [`ElicitationStore`] trait, the bounded [`MemoryStore`]
//! (the embedded default) and the [`PostgresStore`] (the store of record).
//!
//! Every operation is scoped to a [`Caller`]; another caller's row behaves exactly like a
//! missing one. State changes follow `elicitation-core`'s state machine and happen once
//! however many answers race. The Postgres store seals tool arguments and responses with
//! AES-256-GCM ([`KeyRing`]) so no payload reaches the database in clear, enforces the
//! caller with row-level security as well as in every statement, and wakes waiters on any
//! instance through LISTEN/NOTIFY.
//!
//! This crate owns every SQL string of the project and the embedded migrations
//! ([`migrate`]). It knows nothing of HTTP or MCP wire formats.
//!
//! # Example
//!
//! A backend asks a person and waits for the answer (docs/embedding.md; the same calls
//! on a [`PostgresStore`]):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use elicitation_store::{Caller, ElicitationSpec, ElicitationStore, MemoryStore};
//!
//! let store = MemoryStore::default();
//! let caller = Caller::new("billing-service", None)?;
//! let question = ElicitationSpec::confirmation("Refund order 1042?")?;
//! let asked = store.create(&caller, question, time::Duration::minutes(30)).await?;
//! // A person answers: on the approvals page, over REST, in Slack.
//! store.respond(&caller, asked.id, serde_json::json!({"confirmed": true})).await?;
//! let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
//! let answered = store.wait_for_change(&caller, asked.id, deadline).await?;
//! assert_eq!(answered.confirmation_state(), Some(true));
//! # Ok(())
//! # }
//! ```

mod accounts;
mod approved;
mod audit;
mod delegation;
mod error;
mod flows;
mod grant;
mod memory;
mod metered;
#[cfg(feature = "postgres")]
mod migrate;
mod notices;
mod pins;
#[cfg(feature = "postgres")]
mod postgres;
mod quorum;
mod quota;
mod seal;
mod store;
mod sweeper;
#[cfg(feature = "postgres")]
mod tls;
mod wait;
mod whole;

#[cfg(test)]
mod conformance;
#[cfg(all(feature = "postgres", any(test, feature = "test-support")))]
pub mod test_support;

pub use accounts::{
    Account, AccountStore, AccountTokens, MAX_ACCOUNT_MODULE_LEN, MAX_ACCOUNTS_PER_CALLER,
};
pub use audit::{
    AuditEntry, AuditEvent, AuditHolds, AuditOrder, AuditPage, AuditQuery, CallCompletion,
    GateRecord, PolicyRef, RejectReason, audit_outcomes,
};
// What a caller asks and gets back, so that an embedder needs this crate alone.
pub use approved::{RECENT_ANSWERED, last_approved, recently_approved};
pub use delegation::{
    Delegation, DelegationId, DelegationRequest, DelegationStore, MAX_DELEGATION,
    MAX_DELEGATIONS_PER_CALLER, Until,
};
pub use elicitation_core::{
    Approver, Caller, Elicitation, ElicitationId, ElicitationSpec, ElicitationStatus,
    MAX_CALLER_ID_LEN, ResponseSpec,
};
pub use error::StoreError;
pub use flows::{FlowStore, FlowTouch, MAX_FLOW_WINDOW, MAX_SEEN, MAX_SOURCES_PER_LABEL};
pub use gating_core::GrantScope;
pub use grant::{AnswerWith, Grant, GrantId, GrantRequest, GrantStore, MAX_GRANTS_PER_CALLER};
pub use mcp_clock::{Clock, ManualClock, SystemClock};
pub use memory::{
    MAX_MEMORY_AUDIT_EVENTS, MAX_MEMORY_FLOWS, MemoryLimits, MemoryStore, MemoryUsage,
};
pub use metered::{Metered, StoreMeter};
#[cfg(feature = "postgres")]
pub use migrate::{MIGRATION_HISTORY_TABLE, latest_version, migrate, migrate_url};
pub use notices::{MAX_MEMORY_NOTICES, Notice, NoticeEvent, NoticeStep, Outbox, Settle};
pub use pins::{
    CatalogStore, ChangeStatus, DefinitionChange, DefinitionKey, DefinitionKind, FirstSight,
    Observed, Pin, definition_digest,
};
#[cfg(feature = "postgres")]
pub use tls::TlsRoots;
/// Rows of the audit chain whose sealing stalled (a counter of the PostgreSQL store's
/// sealer; always 0 without feature `postgres`).
#[cfg(not(feature = "postgres"))]
pub fn audit_seal_stalls() -> u64 {
    0
}
#[cfg(feature = "postgres")]
pub use postgres::{
    CHAIN_KEY_INFO, ChainReport, ChainSealed, PostgresOptions, PostgresStore, audit_page,
    audit_seal_stalls, max_unsealed_wait, verify_audit,
};
pub use quorum::{Count, MAX_QUORUM, MAX_QUORUM_GROUPS, Quorum, Vote};
pub use quota::{MAX_QUOTA_KEY_LEN, QuotaStore, QuotaTake, QuotaWindow};
pub use seal::{KeyRing, SEAL_KEYS_ENV, SealContext, SealError, Sealed};
pub use store::{
    Approval, ApprovalMode, AuditSink, CallBinding, ConfirmationRequest, ElicitationStore,
    ErasedElicitation, ExpiredElicitation, Fleet, HeldCall, ListQuery, Listed, MAX_BROADCAST_BYTES,
    MAX_LIST_LIMIT, MIN_TTL, Redeemed, SingleInstance, StoredElicitation, Unreadable,
};
pub use sweeper::{SweepOptions, Swept, sweep, sweep_once};
pub use whole::Store;
