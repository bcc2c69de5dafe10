//! How callers' groups are named, whichever mode authenticated them: an approver group
//! counts only for the issuer and tenant that asserted it.

/// The issuer name a caller of mode `jwt` belongs to: what follows the last `@` of its
/// subject (`sub@name`; names hold no `@`).
pub fn issuer_of(subject: &str) -> Option<&str> {
    subject.rsplit_once('@').map(|(_, name)| name)
}

/// A group as an issuer asserted it, for a caller of `tenant`: `group@name`, or
/// `group@name#tenant`. Approver groups count only for the issuer (and tenant) that asserted
/// them: issuer B's `sre` is not issuer A's, and tenant b's is not tenant a's.
pub fn qualified_group(group: &str, issuer_name: &str, tenant: Option<&str>) -> String {
    match tenant {
        Some(tenant) => format!("{group}@{issuer_name}#{tenant}"),
        None => format!("{group}@{issuer_name}"),
    }
}

/// A group of mode `tokens` (or a Slack user's) as its tenant's: `sre#t2`, or `sre` without
/// a tenant. Mode `jwt` qualifies groups by issuer and tenant ([`qualified_group`]).
pub fn tenant_group(group: &str, tenant: Option<&str>) -> String {
    match tenant {
        Some(tenant) => format!("{group}#{tenant}"),
        None => group.to_owned(),
    }
}
