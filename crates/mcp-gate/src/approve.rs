//! A person's approval with more than yes ([`Gateway::answer_with`]): a standing grant's
//! terms, or edited arguments checked against the tool's schema; and the result that tells
//! the agent of an edit.

use std::sync::Arc;

use elicitation_core::ElicitationId;
use elicitation_store::{Caller, Grant, StoreError};
use gating_core::{GateDecision, GrantTerms};
use mcp_upstream::registry::ToolEntry;
use serde_json::{Map, Value};

use crate::Gateway;
use crate::error::GateError;
use crate::outcome::{Approving, CallOutcome, EDITED_META};
use mcp_auth::Principal;

/// Most schema violations told about edited arguments.
const MAX_SCHEMA_ERRORS: usize = 5;

impl Gateway {
    /// Approves confirmation `id` as `principal` (as [`answer`](fn@crate::answer) does: as its caller, or as a
    /// member of its approver group) with what `with` asks for, in the same store operation,
    /// or does nothing. Refused (`AnswerRefused`, a 422 saying why) when the tool is not
    /// listed now; for a grant, when the terms are malformed or longer than `[gate]
    /// max_grant`, or the policy no longer holds the call for a person or its rule says
    /// `grants = false`; for edited arguments, when they do not match the tool's
    /// `inputSchema` or the policy denies the call with them; and (by the store) on anything
    /// but an approval of a held call. The store enforces who may answer: a four-eyes or
    /// `must` rule's confirmation is approved only by someone who may answer it.
    // Long: each check of an approval with a grant or edited arguments must come before the one
    // store step, in this order.
    pub async fn answer_with(
        &self,
        principal: &Principal,
        id: ElicitationId,
        payload: Value,
        answered_by: &str,
        with: Approving<'_>,
    ) -> Result<(Caller, elicitation_core::RespondOutcome, Option<Grant>), GateError> {
        let refused = |why: String| GateError::Store(StoreError::AnswerRefused(why));
        // The held call, as its caller or as an approver may read it (itself, or under a
        // delegation it holds).
        let (owner, held) = match self.store.get(&principal.caller, id).await {
            Ok(stored) => (principal.caller.clone(), stored),
            Err(StoreError::NotFound { .. }) => {
                let mut found = Err(StoreError::NotFound { id });
                for (approver, _) in self.approvers_of(principal).await? {
                    found = self.grants.approver_get(&approver, id).await;
                    if found.is_ok() {
                        break;
                    }
                }
                found?
            }
            Err(e) => return Err(e.into()),
        };
        // A call held on a virtual server is judged by that server's rules (whether a grant
        // may be made, whether edited arguments pass), wherever the person answers it.
        if let Some(server) = held.call.as_ref().and_then(|c| c.server.as_deref())
            && self.server_name() != Some(server)
        {
            let Some(scoped) = self.server(server) else {
                return Err(refused(format!(
                    "the call was held on server {server}, which this gateway no longer serves"
                )));
            };
            return Box::pin(scoped.answer_with(principal, id, payload, answered_by, with)).await;
        }
        let Some(call) = held.call else {
            return Err(refused(format!(
                "only a confirmation of a tool call can carry {}",
                match with {
                    Approving::Grant(_) => "a grant",
                    Approving::Arguments(_) => "edited arguments",
                }
            )));
        };
        // A module's tool, or the agent host's own that a permission prompt asked about.
        let (entry, listed) = match self.registry.find(&call.tool).await {
            Some(entry) => (entry, true),
            None => (
                Arc::new(self.host_entry(&call.tool).await.ok_or_else(|| {
                    refused(format!(
                        "{} is not listed by any module now, so the approval cannot carry anything for it",
                        call.tool
                    ))
                })?),
                false,
            ),
        };
        // What the policy decides now for the call as held (or as edited). The caller's
        // groups are known only when the caller answers; an approver's answer is decided
        // without them — the gate decides again, with them, when the call runs.
        let groups: Vec<String> = if owner == principal.caller {
            principal.rule_groups()
        } else {
            Vec::new()
        };
        let flow = self.flow_for(&entry, &owner).await;
        let decide = |args: &Value| self.decide(&entry, args, &owner, &groups, flow.as_ref());
        let rule = |decided: &gating_core::Decided| match decided.rule {
            Some(index) => format!("[[policy]] rule {index}"),
            None => "the tool's hints".to_owned(),
        };
        let with = match with {
            Approving::Grant(grant) => {
                let terms = GrantTerms::parse(grant, self.max_grant).map_err(refused)?;
                // A grant stands for the definition the person saw: the one the call was
                // held under, and only while that is what is listed (a changed definition,
                // withheld for an operator or approved since, was never put to this person).
                let seen = self
                    .definition_put_to_the_person(&entry, listed, call.definition)
                    .await;
                let Some(seen) = seen else {
                    return Err(refused(format!(
                        "the definition of {} is not the one this call was held under (it changed, or its change waits for an operator), so no grant can stand for it; approve without a grant",
                        entry.qualified
                    )));
                };
                let decided = decide(&call.arguments);
                match decided.decision {
                    GateDecision::Confirm(_) if decided.grants => {}
                    GateDecision::Confirm(_) => {
                        return Err(refused(format!(
                            "{} holds {} for a person at every call (`grants = false`); approve without a grant",
                            rule(&decided),
                            entry.qualified
                        )));
                    }
                    _ => {
                        return Err(refused(format!(
                            "the policy no longer holds this call of {} for a person ({} decides it), so there is nothing to grant",
                            entry.qualified,
                            rule(&decided)
                        )));
                    }
                }
                elicitation_store::AnswerWith::Grant(elicitation_store::GrantRequest {
                    scope: terms.scope,
                    when: terms.when.as_ref().map(|w| w.source().to_owned()),
                    lasts: terms.lasts,
                    max_uses: terms.max_uses,
                    definition: seen,
                })
            }
            Approving::Arguments(arguments) => {
                check_arguments(&entry, arguments).map_err(refused)?;
                let decided = decide(arguments);
                if decided.decision == GateDecision::Deny {
                    return Err(refused(format!(
                        "{} denies {} with these arguments{}",
                        rule(&decided),
                        entry.qualified,
                        decided
                            .reason
                            .as_deref()
                            .map(|r| format!(": {r}"))
                            .unwrap_or_default()
                    )));
                }
                elicitation_store::AnswerWith::Arguments(arguments.clone())
            }
        };
        let own = self
            .grants
            .respond_with(
                &principal.caller,
                id,
                payload.clone(),
                Some(answered_by),
                with.clone(),
            )
            .await;
        let refused = match own {
            Ok((outcome, grant)) => return Ok((principal.caller.clone(), outcome, grant)),
            Err(e @ (StoreError::NotFound { .. } | StoreError::ApproverRequired { .. })) => e,
            Err(e) => return Err(e.into()),
        };
        // As an approver: itself, then under each delegation it holds now.
        let mut last = refused;
        for (approver, delegation) in self.approvers_of(principal).await? {
            let by = delegation.as_ref().map_or_else(
                || answered_by.to_owned(),
                |d| crate::respond::answered_for(answered_by, d),
            );
            match self
                .grants
                .approver_respond_with(&approver, id, payload.clone(), Some(&by), with.clone())
                .await
            {
                // A refusal stands unless a delegation answers instead.
                Err(e) if crate::respond::may_try_delegations(&e) => last = e,
                other => return Ok(other?),
            }
        }
        Err(last.into())
    }
}

/// Whether `arguments` may replace the agent's for `entry`: an object that the tool's
/// `inputSchema` accepts. A schema the validator cannot use refuses every edit (the gate
/// cannot check them), and it never fetches anything a `$ref` names.
pub(crate) fn check_arguments(entry: &ToolEntry, arguments: &Value) -> Result<(), String> {
    if !arguments.is_object() {
        return Err("edited arguments must be a JSON object".into());
    }
    let Some(schema) = entry.tool.get("inputSchema") else {
        return Err(format!(
            "{} lists no input schema, so edited arguments cannot be checked; approve the agent's or decline",
            entry.qualified
        ));
    };
    let validator = jsonschema::validator_for(schema).map_err(|e| {
        format!(
            "{}'s input schema cannot be used to check edited arguments ({e}); approve the agent's or decline",
            entry.qualified
        )
    })?;
    let errors: Vec<String> = validator
        .iter_errors(arguments)
        .take(MAX_SCHEMA_ERRORS)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("{at}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the edited arguments do not match {}'s input schema: {}",
            entry.qualified,
            errors.join("; ")
        ))
    }
}

/// A forwarded call's result, telling the agent that a person changed its arguments before
/// approving, and to what (a text item after the module's content, and `_meta`). Any other
/// outcome passes as it is.
pub(crate) fn told_of_edit(outcome: CallOutcome, edited: &Value) -> CallOutcome {
    let CallOutcome::Forwarded(raw) = outcome else {
        return outcome;
    };
    let Ok(Value::Object(mut result)) = serde_json::from_str::<Value>(raw.get()) else {
        return CallOutcome::Forwarded(raw);
    };
    let notice = format!(
        "A person changed the arguments before approving this call; it ran with these instead of yours: {}",
        gating_core::canonical_json(edited)
    );
    // Claude Code and Codex show their model only the structured content when there is
    // some: the notice goes there too. A gated tool is listed without its outputSchema
    // (the gateway may answer for it), so no client validates this against one.
    if let Some(Value::Object(structured)) = result.get_mut("structuredContent") {
        structured.insert(
            EDITED_META.into(),
            serde_json::json!({"notice": notice, "arguments": edited}),
        );
    }
    let told = serde_json::json!({"type": "text", "text": notice});
    match result.get_mut("content").and_then(Value::as_array_mut) {
        Some(content) => content.push(told),
        None => {
            result.insert("content".into(), Value::Array(vec![told]));
        }
    }
    let meta = result
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert(EDITED_META.into(), edited.clone());
    }
    CallOutcome::Done(Value::Object(result))
}
