//! A call past a quota that asks a person (`[[quotas]] past = "ask"`): held, through the
//! same settle step as any gated call, for a person's leave to run this one call beyond the
//! quota. The leave is a confirmation bound to the call (caller, tool, arguments, server) and
//! to the quota's counter, in place of the tool's definition digest: an ordinary approval of
//! the same call is no leave to pass a quota, and a leave to pass one quota none to pass
//! another. It takes no standing grant (each call past a quota is asked about) and, being
//! the quota's, runs the call without counting it.

use std::sync::Arc;
use std::time::Duration;

use elicitation_core::ElicitationId;
use elicitation_store::{CallBinding, PolicyRef};
use gating_core::{CallDigest, HoldReason};
use mcp_auth::Principal;
use mcp_upstream::registry::ToolEntry;
use mcp_wire::CallToolParams;
use serde_json::{Map, Value, json};

use crate::Gateway;
use crate::approve::told_of_edit;
use crate::outcome::{Audit, CallOutcome, GatedCall, RunBy, Settled};
use crate::own_tool::Via;
use crate::quotas::{Passed, Taken};

/// The digest a leave to pass quota counter `key` with tool definition `definition` is bound
/// to in place of the definition's: what the person allowed, and under which definition.
fn beyond(definition: &CallDigest, key: &str) -> CallDigest {
    CallDigest::of(&json!({"beyond_quota": key, "definition": definition.to_string()}))
}

impl Gateway {
    /// `call` (its tool, params and, when read already, arguments) past the quota `passed`
    /// says, which asks a person: held for their leave, or run once they gave it.
    pub(crate) async fn past_quota(
        &self,
        principal: &Principal,
        (entry, params, arguments): (Arc<ToolEntry>, CallToolParams, Option<Value>),
        passed: &Passed,
        via: Via<'_>,
        upstream: &mut Duration,
    ) -> CallOutcome {
        let arguments = match arguments {
            Some(arguments) => arguments,
            None => match &params.arguments {
                None => Value::Object(Map::new()),
                Some(arguments) => match arguments.to_value() {
                    Ok(arguments) => arguments,
                    Err(e) => {
                        return CallOutcome::Done(gating_core::gate_unavailable_result(
                            &format!("the call's arguments could not be read: {e}"),
                            &self.surfaces,
                        ));
                    }
                },
            },
        };
        let confirmation = params
            .confirmation_id()
            .and_then(|id| id.parse::<ElicitationId>().ok());
        let message = gating_core::confirmation_message_after(
            &format!("{}.", capitalized(&passed.what)),
            &entry.qualified,
            HoldReason::Quota,
            &arguments,
            &self.surfaces,
        );
        let call = GatedCall {
            binding: CallBinding {
                tool: entry.qualified.clone(),
                digest: CallDigest::of(&arguments),
                definition: beyond(&entry.digest, &passed.key),
                server: self.server_name().map(str::to_owned),
            },
            entry,
            params,
            arguments,
            message,
            policy: PolicyRef {
                rule: None,
                policy: Some(self.policy_digest.clone()),
                server: self.server_name().map(str::to_owned),
            },
            ttl: self.policy.default_ttl(),
            grants: false,
            only_named: false,
        };
        match self.settle(principal, &call, confirmation).await {
            Settled::Answer(result) => CallOutcome::Done(result),
            Settled::Held(pending) => CallOutcome::NeedsConfirmation(pending),
            Settled::Run(run) => {
                let run = *run;
                let id = match run.by {
                    RunBy::Confirmation(id) => Some(id),
                    RunBy::Grant(_) => None,
                };
                let forwarded = Audit::Forwarded {
                    gated: true,
                    shadowed: false,
                };
                // Allowed beyond the quota: run without counting it.
                let outcome = self
                    .forward(
                        principal,
                        &call.entry,
                        run.params,
                        (forwarded, id, Some(Taken::default())),
                        via,
                        upstream,
                    )
                    .await;
                match &run.edited {
                    Some(edited) => told_of_edit(outcome, edited),
                    None => outcome,
                }
            }
        }
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
