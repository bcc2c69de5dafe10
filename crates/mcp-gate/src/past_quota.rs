//! A call past a quota that asks a person (`[[quotas]] past = "ask"`): held, through the
//! same settle step as any gated call, for a person's leave to run this one call beyond the
//! quota. The leave is a confirmation bound to the call (caller, tool, arguments, server) and
//! to the quotas' counters in their windows, in place of the tool's definition digest: an
//! ordinary approval of the same call is no leave to pass a quota, a leave to pass one quota
//! none to pass another, and one given in a window none in the next. It takes no standing
//! grant (each call past a quota is asked about). A quota that refuses is never passed this
//! way (the call is refused first); the call counts in every quota it is within, and not in
//! those a person allowed it past.

use std::sync::Arc;
use std::time::Duration;

use elicitation_core::ElicitationId;
use elicitation_store::{CallBinding, PolicyRef};
use gating_core::{CallDigest, ConfirmationMessage, HoldReason};
use mcp_auth::Principal;
use mcp_upstream::registry::ToolEntry;
use mcp_wire::CallToolParams;
use serde_json::{Map, Value, json};

use crate::Gateway;
use crate::outcome::{CallOutcome, GatedCall};
use crate::own_tool::Via;
use crate::quotas::{Passed, Taken};

/// The digest a leave to pass the quota counters `key` names (each in its window) is bound
/// to in place of the call's definition digest `definition`: what the person allowed, and
/// under which definition.
fn beyond(definition: &CallDigest, key: &str) -> CallDigest {
    CallDigest::of(&json!({"beyond_quota": key, "definition": definition.to_string()}))
}

/// A call past quotas that ask a person, as it reached the gate.
pub(crate) enum Past<'a> {
    /// A call the policy holds anyway, with the confirmation it names: the person's leave
    /// stands for that confirmation too, and they are told both why it is held and which
    /// quota it passes.
    Gated(&'a GatedCall, Option<ElicitationId>),
    /// A call the policy forwards: its tool and params.
    Direct(Arc<ToolEntry>, Box<CallToolParams>),
}

impl Gateway {
    /// A call past the quotas `passed` says, which ask a person (and within every other
    /// quota, whose counts are `taken`): held for their leave, or run once they gave it —
    /// counted in the other quotas, not in those it was allowed past.
    pub(crate) async fn past_quota(
        &self,
        principal: &Principal,
        past: Past<'_>,
        (taken, passed): (Taken, &Passed),
        via: Via<'_>,
        upstream: &mut Duration,
    ) -> CallOutcome {
        let (call, confirmation) = match self.leave_for(past, passed) {
            Ok(found) => found,
            Err(refused) => {
                self.give_back_quota(taken).await;
                return CallOutcome::Done(refused);
            }
        };
        // It takes no grant (`grants: false`): it runs on the person's leave, redeemed.
        let settled = self.settle(principal, &call, confirmation).await;
        self.run_settled(principal, &call, settled, taken, via, upstream)
            .await
    }

    /// The call a person's leave to pass `passed` is asked and redeemed for, with the
    /// confirmation the caller names; the refusal when its arguments cannot be read.
    fn leave_for(
        &self,
        past: Past<'_>,
        passed: &Passed,
    ) -> Result<(GatedCall, Option<ElicitationId>), Value> {
        let why = format!("Past a quota: {}.", passed.what);
        match past {
            Past::Gated(held, confirmation) => {
                // Told both: the quota, then why the call is held anyway.
                let text = format!(
                    "{why} Allowing it lets this one call run beyond the quota. {}",
                    held.message.text
                );
                let message = if text.chars().count() <= elicitation_core::MAX_MESSAGE_CHARS {
                    ConfirmationMessage {
                        text,
                        shows_all_arguments: held.message.shows_all_arguments,
                    }
                } else {
                    gating_core::confirmation_message_after(
                        &format!("{why} {}", held.message.text),
                        &held.entry.qualified,
                        HoldReason::Quota,
                        &held.arguments,
                        &self.surfaces,
                    )
                };
                let call = GatedCall {
                    binding: CallBinding {
                        definition: beyond(&held.binding.definition, &passed.key),
                        ..held.binding.clone()
                    },
                    message,
                    grants: false,
                    entry: held.entry.clone(),
                    params: held.params.clone(),
                    arguments: held.arguments.clone(),
                    policy: held.policy.clone(),
                    ttl: held.ttl,
                    only_named: held.only_named,
                };
                Ok((call, confirmation))
            }
            Past::Direct(entry, params) => {
                let arguments = match &params.arguments {
                    None => Value::Object(Map::new()),
                    Some(arguments) => arguments.to_value().map_err(|e| {
                        gating_core::gate_unavailable_result(
                            &format!("the call's arguments could not be read: {e}"),
                            &self.surfaces,
                        )
                    })?,
                };
                let confirmation = params
                    .confirmation_id()
                    .and_then(|id| id.parse::<ElicitationId>().ok());
                let message = gating_core::confirmation_message_after(
                    &why,
                    &entry.qualified,
                    HoldReason::Quota,
                    &arguments,
                    &self.surfaces,
                );
                let server = self.server_name().map(str::to_owned);
                let call = GatedCall {
                    binding: CallBinding {
                        tool: entry.qualified.clone(),
                        digest: CallDigest::of(&arguments),
                        definition: beyond(&entry.digest, &passed.key),
                        server: server.clone(),
                    },
                    entry,
                    params: *params,
                    arguments,
                    message,
                    policy: PolicyRef {
                        rule: None,
                        policy: Some(self.policy_digest.clone()),
                        server,
                    },
                    ttl: self.policy.default_ttl(),
                    grants: false,
                    only_named: false,
                };
                Ok((call, confirmation))
            }
        }
    }
}
