//! The structured authorization denial of SEP-2643 (draft, PR #2643 as of its 2026-04-24
//! text: `reason`, `authorizationContextId`, `remediationHints`), carried on the gateway's
//! own in-band results in `_meta["io.modelcontextprotocol/authorization"]`, beside their
//! text and `structuredContent`: a standard client reads why the call did not run and what
//! would let it. A client echoes the context id on its retry under
//! [`META_AUTHORIZATION_CONTEXT_ID`]; the gateway reads it as the confirmation the retry
//! names.
//!
//! The draft defines the remediation hint `url` (open this address); the others here are
//! the gateway's own types, which a client that does not know them ignores, as the draft
//! requires.

use serde::Serialize;
use serde_json::{Map, Value};

/// The `_meta` key of a result's denial.
pub const META_AUTHORIZATION: &str = "io.modelcontextprotocol/authorization";
/// The `_meta` key a client echoes a denial's `authorizationContextId` under on its retry.
pub const META_AUTHORIZATION_CONTEXT_ID: &str = "io.modelcontextprotocol/authorization-context-id";
/// The draft's one `reason`.
pub const INSUFFICIENT_AUTHORIZATION: &str = "insufficient_authorization";

/// Why a call did not run and what would let it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Denial {
    /// Always [`INSUFFICIENT_AUTHORIZATION`].
    pub reason: &'static str,
    /// What the client echoes on its retry: a held call's confirmation id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization_context_id: Option<String>,
    /// What would let the call run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub remediation_hints: Vec<Hint>,
}

/// One way a denied call could come to run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum Hint {
    /// A person approves this call out of band, before it expires; then the same call runs
    /// once.
    PersonApproval {
        /// The confirmation they answer.
        confirmation_id: String,
        /// Until when (RFC 3339).
        expires_at: String,
    },
    /// The draft's `url`: a person opens this address.
    Url {
        /// The address.
        url: String,
    },
    /// A person connects their own account at the module first.
    ConnectAccount {
        /// The module.
        module: String,
    },
    /// An operator reviews the tool's changed definition first.
    DefinitionReview {
        /// The change waiting for review.
        change: String,
    },
    /// The operator's policy does not allow the call: nothing the client does changes that.
    PolicyDenied {
        /// The rule's reason, if it gives one.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

impl Denial {
    /// A denial with these hints and, for a held call, its confirmation as the context.
    pub fn new(context: Option<String>, hints: Vec<Hint>) -> Denial {
        Denial {
            reason: INSUFFICIENT_AUTHORIZATION,
            authorization_context_id: context,
            remediation_hints: hints,
        }
    }
}

/// `result` (a `CallToolResult` object) carrying `denial` in its `_meta`, beside what
/// `_meta` holds already.
pub fn with_denial(mut result: Value, denial: &Denial) -> Value {
    let Ok(written) = serde_json::to_value(denial) else {
        return result;
    };
    if let Value::Object(object) = &mut result {
        let meta = object
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert(META_AUTHORIZATION.to_owned(), written);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_retry_echoing_the_context_id_names_that_confirmation_and_confirmation_id_wins() {
        let read = |meta: Value| {
            let params: crate::CallToolParams =
                serde_json::from_value(json!({"name": "t", "_meta": meta})).unwrap();
            params.confirmation_id().map(str::to_owned)
        };
        assert_eq!(
            read(json!({META_AUTHORIZATION_CONTEXT_ID: "c1"})),
            Some("c1".into())
        );
        assert_eq!(
            read(json!({META_AUTHORIZATION_CONTEXT_ID: "c1", "confirmation_id": "c2"})),
            Some("c2".into())
        );
        assert_eq!(read(json!({})), None);
        // Not passed on to the module: the hop's protocol keys stay with the gateway.
        let params: crate::CallToolParams = serde_json::from_value(
            json!({"name": "t", "_meta": {META_AUTHORIZATION_CONTEXT_ID: "c1", "trace": 1}}),
        )
        .unwrap();
        assert_eq!(
            params.into_upstream("t").meta,
            Some(json!({"trace": 1}).as_object().unwrap().clone())
        );
    }

    #[test]
    fn a_denial_is_written_as_the_draft_reads_it() {
        let result = json!({"content": [], "isError": false, "_meta": {"other": 1}});
        let denial = Denial::new(
            Some("0193".into()),
            vec![
                Hint::PersonApproval {
                    confirmation_id: "0193".into(),
                    expires_at: "2026-12-05T10:00:00Z".into(),
                },
                Hint::Url {
                    url: "https://gw.example/approvals/e/0193".into(),
                },
            ],
        );
        assert_eq!(
            with_denial(result, &denial)["_meta"],
            json!({
                "other": 1,
                "io.modelcontextprotocol/authorization": {
                    "reason": "insufficient_authorization",
                    "authorizationContextId": "0193",
                    "remediationHints": [
                        {"type": "person_approval", "confirmationId": "0193", "expiresAt": "2026-12-05T10:00:00Z"},
                        {"type": "url", "url": "https://gw.example/approvals/e/0193"}
                    ]
                }
            })
        );
        let denied = Denial::new(None, vec![Hint::PolicyDenied { reason: None }]);
        assert_eq!(
            serde_json::to_value(&denied).unwrap(),
            json!({"reason": "insufficient_authorization", "remediationHints": [{"type": "policy_denied"}]})
        );
    }
}
