//! The whole store the gateway is built on.

use crate::accounts::AccountStore;
use crate::delegation::DelegationStore;
use crate::flows::FlowStore;
use crate::grant::GrantStore;
use crate::notices::Outbox;
use crate::pins::CatalogStore;
use crate::quota::QuotaStore;
use crate::store::{AuditSink, ElicitationStore, Fleet};

/// A whole store: its elicitations, its fleet, its audit trail, its standing grants, its
/// tool-definition pins, its outbox of notices, its connected accounts, its callers'
/// flows, its delegations and its quota counters. The gateway is built on one; a test double implements only the part it fakes and
/// is put in its place.
pub trait Store:
    ElicitationStore
    + Fleet
    + AuditSink
    + GrantStore
    + CatalogStore
    + Outbox
    + AccountStore
    + FlowStore
    + DelegationStore
    + QuotaStore
{
}

impl<T> Store for T where
    T: ElicitationStore
        + Fleet
        + AuditSink
        + GrantStore
        + CatalogStore
        + Outbox
        + AccountStore
        + FlowStore
        + DelegationStore
        + QuotaStore
{
}
