//! A caller as the gateway knows it: who (the `Caller` elicitations are scoped to), what it
//! may do (scopes), which approver groups it is in, and the refusal when it may not.

use std::collections::BTreeSet;

use elicitation_core::Caller;

/// Why a request is refused for who it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No credentials, or unknown ones.
    #[error("authentication required")]
    Unauthorized {
        /// Credentials were sent but are not valid.
        invalid_token: bool,
    },
    /// Authenticated, but without the scope this needs.
    #[error("this needs the scope {scope}")]
    Forbidden {
        /// The scope required.
        scope: &'static str,
    },
}

/// Lists and calls tools.
pub const SCOPE_TOOLS_CALL: &str = "tools:call";
/// Answers and cancels elicitations through the REST API.
pub const SCOPE_RESPOND: &str = "elicitations:respond";
/// May ask the caller's person questions through the REST API (`POST
/// /v1/mcp/elicitations`) and read their answers: for a trusted backend service.
pub const SCOPE_CREATE: &str = "elicitations:create";
/// Reading `/metrics` on the main listener.
pub const SCOPE_METRICS: &str = "metrics:read";
/// Reviewing changed tool definitions (`/v1/catalog/changes`): an operator's scope, apart
/// from answering elicitations.
pub const SCOPE_CATALOG: &str = "catalog:approve";
/// Reading the whole audit trail of the caller's tenant (`GET /v1/audit`, the page's Audit
/// view): a security reviewer's scope, apart from answering.
pub const SCOPE_AUDIT: &str = "audit:read";

/// An authenticated (or, in mode `none`, assumed) caller and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The caller elicitations are scoped to.
    pub caller: Caller,
    /// Granted scopes.
    pub scopes: BTreeSet<String>,
    /// Whether credentials proved who this is (false in mode `none`).
    pub authenticated: bool,
    /// The approver groups it is a member of (`[[approvers]]`).
    pub groups: BTreeSet<String>,
    /// The OAuth client its token was issued to (the token's `azp`, else `client_id`),
    /// when the token says: recorded with what it asks for.
    pub client: Option<String>,
    /// The access token it presented (mode `jwt`): what a module with `auth.kind =
    /// "token_exchange"` exchanges for one of its own. Never printed.
    pub subject_token: Option<SubjectToken>,
}

/// A caller's own access token, kept only to be exchanged (RFC 8693); its `Debug` names
/// nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct SubjectToken(std::sync::Arc<str>);

impl SubjectToken {
    /// Keeps `token`.
    pub fn new(token: &str) -> Self {
        SubjectToken(std::sync::Arc::from(token))
    }

    /// The token.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SubjectToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SubjectToken(..)")
    }
}

/// Where a person answered, for [`Principal::answered_by`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnsweredVia {
    /// The approvals page.
    Page,
    /// The REST API.
    Rest,
    /// Natively, in the caller's MCP client.
    Client,
    /// A button in a Slack notification.
    Slack,
}

impl Principal {
    /// A caller its service has authenticated (an embedder's user, [`crate::Auth::Embedder`]),
    /// with these scopes (`tools:call`, `elicitations:respond`, …) and no groups.
    pub fn authenticated(caller: Caller, scopes: &[&str]) -> Principal {
        Principal {
            caller,
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            authenticated: true,
            groups: BTreeSet::new(),
            client: None,
            subject_token: None,
        }
    }

    /// The caller `local` of mode `none` (and of an embedder's server that names no
    /// callers): it may call tools, answer, and read the metrics, catalog and audit trail.
    /// Not authenticated.
    pub fn local() -> Principal {
        Principal {
            caller: Caller::new("local", None).expect("\"local\" is a valid subject"),
            scopes: [
                SCOPE_TOOLS_CALL,
                SCOPE_RESPOND,
                SCOPE_METRICS,
                SCOPE_CATALOG,
                SCOPE_AUDIT,
            ]
            .into_iter()
            .map(String::from)
            .collect(),
            authenticated: false,
            groups: BTreeSet::new(),
            client: None,
            subject_token: None,
        }
    }

    /// The groups as a policy rule's `when` sees them: each group, and a group qualified by
    /// the caller's own tenant (`sre#t2`, mode `tokens`) also as written (`sre`), so a rule
    /// written against a token's configured group names matches it whatever its tenant.
    pub fn rule_groups(&self) -> Vec<String> {
        let own = self.caller.tenant_id().map(|t| format!("#{t}"));
        let mut groups: Vec<String> = Vec::with_capacity(self.groups.len());
        for group in &self.groups {
            groups.push(group.clone());
            if let Some(bare) = own.as_deref().and_then(|own| group.strip_suffix(own))
                && !bare.contains('@')
            {
                groups.push(bare.to_owned());
            }
        }
        groups
    }

    /// As an approver: who, and in which groups (`None` without groups).
    pub fn approver(&self) -> Option<elicitation_core::Approver> {
        (!self.groups.is_empty()).then(|| elicitation_core::Approver {
            caller: self.caller.clone(),
            groups: self.groups.iter().cloned().collect(),
            on_behalf_of: None,
        })
    }

    /// Who answered, as recorded with the answer: the principal's subject (and tenant) and
    /// where, e.g. `alice on the approvals page`.
    pub fn answered_by(&self, via: AnsweredVia) -> String {
        let who = match (self.authenticated, self.caller.tenant_id()) {
            (false, _) => "the local user".to_owned(),
            (true, Some(tenant)) => format!("{} ({tenant})", self.caller.subject_id()),
            (true, None) => self.caller.subject_id().to_owned(),
        };
        let place = match via {
            AnsweredVia::Page => "on the approvals page",
            AnsweredVia::Rest => "through the REST API",
            AnsweredVia::Client => "in the MCP client",
            AnsweredVia::Slack => "in Slack",
        };
        format!("{who} {place}")
    }

    /// Fails with 403 unless the principal has `scope`.
    pub fn require(&self, scope: &'static str) -> Result<(), AuthError> {
        if self.scopes.contains(scope) {
            Ok(())
        } else {
            Err(AuthError::Forbidden { scope })
        }
    }

    /// Fails with 403 unless the principal has at least one of `scopes`.
    pub fn require_any(&self, scopes: &[&'static str]) -> Result<(), AuthError> {
        match scopes.iter().find(|s| self.scopes.contains(**s)) {
            Some(_) => Ok(()),
            None => Err(AuthError::Forbidden { scope: scopes[0] }),
        }
    }
}
