//! Who an elicitation belongs to, and who answers other callers' confirmations.

use std::fmt;

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
    ) -> Result<Self, InvalidCaller> {
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

/// A caller id that is empty, too long, or holds control characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("caller ids must be 1 to 512 bytes without control characters")]
pub struct InvalidCaller;

fn check_id(id: &str) -> Result<(), InvalidCaller> {
    if id.is_empty() || id.len() > MAX_CALLER_ID_LEN || id.chars().any(char::is_control) {
        return Err(InvalidCaller);
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

/// Someone answering confirmations of other callers, as a member of approver groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approver {
    /// Who they are.
    pub caller: Caller,
    /// Their groups (their own, or — acting for someone — the groups handed to them).
    pub groups: Vec<String>,
    /// Whom they answer for, when the groups were handed to them by someone away (a
    /// delegation): they never answer that person's own calls where its caller may not,
    /// and the two of them count as one person toward a quorum.
    pub on_behalf_of: Option<Caller>,
}

impl Approver {
    /// `caller`, answering as a member of its own `groups`.
    pub fn new(caller: Caller, groups: Vec<String>) -> Self {
        Approver {
            caller,
            groups,
            on_behalf_of: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_id_is_one_to_512_bytes_without_control_characters() {
        assert!(Caller::new("alice", Some("acme".into())).is_ok());
        assert!(Caller::new("a".repeat(MAX_CALLER_ID_LEN), None).is_ok());
        for bad in [
            String::new(),
            "a".repeat(MAX_CALLER_ID_LEN + 1),
            "ali\nce".into(),
            "ali\u{1f}ce".into(),
        ] {
            assert_eq!(
                Caller::new(bad.clone(), None),
                Err(InvalidCaller),
                "{bad:?}"
            );
            assert_eq!(
                Caller::new("alice", Some(bad.clone())),
                Err(InvalidCaller),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_same_subject_of_another_tenant_is_another_caller() {
        let acme = Caller::new("alice", Some("acme".into())).unwrap();
        let plain = Caller::new("alice", None).unwrap();
        assert_ne!(acme, plain);
        assert_eq!(format!("{acme:?}"), "Caller(alice@acme)");
        assert_eq!(format!("{plain:?}"), "Caller(alice)");
    }
}
