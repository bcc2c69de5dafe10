//! Who an elicitation belongs to.

use std::fmt;

use crate::StoreError;

/// Longest subject or tenant id accepted (the database column's bound).
pub const MAX_CALLER_ID_LEN: usize = 512;

/// The authenticated caller an elicitation belongs to. Every read and write is scoped to
/// it: another caller's elicitation behaves exactly like a missing one.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Caller {
    subject_id: String,
    tenant_id: Option<String>,
}

impl Caller {
    /// A caller; ids must be 1 to 512 bytes without control characters.
    pub fn new(
        subject_id: impl Into<String>,
        tenant_id: Option<String>,
    ) -> Result<Self, StoreError> {
        let subject_id = subject_id.into();
        check_id(&subject_id)?;
        if let Some(tenant) = &tenant_id {
            check_id(tenant)?;
        }
        Ok(Caller {
            subject_id,
            tenant_id,
        })
    }

    /// The authenticated subject (for example a token's `sub`).
    pub fn subject_id(&self) -> &str {
        &self.subject_id
    }

    /// The tenant, when the deployment has tenants.
    pub fn tenant_id(&self) -> Option<&str> {
        self.tenant_id.as_deref()
    }
}

fn check_id(id: &str) -> Result<(), StoreError> {
    if id.is_empty() || id.len() > MAX_CALLER_ID_LEN || id.chars().any(char::is_control) {
        return Err(StoreError::InvalidCaller);
    }
    Ok(())
}

impl fmt::Debug for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tenant_id {
            Some(tenant) => write!(f, "Caller({}@{tenant})", self.subject_id),
            None => write!(f, "Caller({})", self.subject_id),
        }
    }
}
