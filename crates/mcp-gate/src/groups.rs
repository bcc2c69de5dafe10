//! Whose word that someone is in a group counts, and a configured group as the caller's
//! principal carries it: shared by approver rules and virtual servers.

use elicitation_store::Caller;

/// Whose assertion of an approver rule's group counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupsFrom {
    /// The group as configured, of the caller's tenant: mode `tokens`, where groups are the
    /// tokens' own (a token's groups are its tenant's, [`mcp_auth::tenant_group`]).
    Configured,
    /// The group as the held call's caller's own issuer asserts it (mode `jwt`), for the
    /// caller's tenant: another issuer's (or tenant's) "sre" answers nothing of its callers.
    CallersIssuer,
    /// The group as the issuer of this name asserts it, for every caller of the same tenant
    /// (mode `jwt`).
    Issuer(String),
}

impl GroupsFrom {
    /// Configured group `group` as it appears among the groups of a principal of `caller`'s
    /// tenant whose membership counts: qualified by the issuer whose word counts (mode `jwt`),
    /// or by the caller's tenant (mode `tokens`: a token of another tenant in a group of the
    /// same name is not in this one).
    pub fn qualify(&self, group: &str, caller: &Caller) -> String {
        let issuer = match self {
            GroupsFrom::Configured => None,
            GroupsFrom::CallersIssuer => {
                Some(mcp_auth::issuer_of(caller.subject_id()).unwrap_or_default())
            }
            GroupsFrom::Issuer(name) => Some(name.as_str()),
        };
        match issuer {
            Some(issuer) => mcp_auth::qualified_group(group, issuer, caller.tenant_id()),
            None => mcp_auth::tenant_group(group, caller.tenant_id()),
        }
    }
}
