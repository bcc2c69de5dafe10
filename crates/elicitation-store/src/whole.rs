//! The whole store the gateway is built on.

use crate::grant::GrantStore;
use crate::store::{AuditSink, ElicitationStore, Fleet};

/// A whole store: its elicitations, its fleet, its audit trail and its standing grants. The
/// gateway is built on one; a test double implements only the part it fakes and is put in
/// its place.
pub trait Store: ElicitationStore + Fleet + AuditSink + GrantStore {}

impl<T: ElicitationStore + Fleet + AuditSink + GrantStore> Store for T {}
