//! The agent host's permission prompt (`transport = "permission_prompt"`): Claude Code asks,
//! through a module's `approve`, whether it may use one of its own tools. The question is a
//! call of `<prefix>__<tool_name>` with `input` as its arguments, decided as any call is —
//! `[[policy]]` and `when`, standing grants, approver rules, the store's confirmation — and
//! answered in the form Claude Code reads: `{"behavior": "allow", "updatedInput"}` (the
//! arguments that may run: the agent's, or a person's edit) or `{"behavior": "deny",
//! "message"}`. The `approve` call waits for a person's answer (the host is blocked on it
//! anyway), up to the confirmation's expiry, sending progress where the client asked for it.

use std::sync::Arc;
use std::time::Duration;

use elicitation_core::ElicitationStatus;
use elicitation_store::GateRecord;
use gating_core::{CallDigest, GateDecision};
use mcp_upstream::Relay;
use mcp_upstream::permission_prompt::{APPROVE, decision_result};
use mcp_upstream::registry::ToolEntry;
use mcp_wire::CallToolParams;
use mcp_wire::tools::Arguments;
use serde_json::{Value, json};

use crate::outcome::Audit;
use crate::own_tool::Via;
use crate::{CallOutcome, GatedCall, Gateway, timed_until};
use elicitation_store::{PolicyRef, RejectReason};

/// How often a waiting question tells the client it still waits.
const PROGRESS_EVERY: Duration = Duration::from_secs(15);

/// A name the host may give its tool: what MCP allows in a tool name.
fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn deny(message: impl Into<String>) -> CallOutcome {
    let message: String = message.into();
    CallOutcome::Done(decision_result(
        &json!({"behavior": "deny", "message": message}),
    ))
}

impl Gateway {
    /// A permission prompt's answer when its caller already has as many requests waiting
    /// for a person as it may hold (`max`): nothing may run, and the host is told why.
    pub fn too_many_waiting(max: usize) -> CallOutcome {
        deny(format!(
            "this caller already has {max} requests waiting for a person (permission prompts, long polls, confirmation streams); answer or end one, then ask again. Nothing may run."
        ))
    }

    /// The entry of the agent host's tool `qualified` (`claude__Bash`) that a
    /// permission-prompt module asks about — what a person's answer to such a question is
    /// checked against (edited arguments, a grant) — or `None` when no permission-prompt
    /// module's prefix names it.
    pub(crate) async fn host_entry(&self, qualified: &str) -> Option<ToolEntry> {
        if self.permission_prompts.is_empty() {
            return None;
        }
        // `<prefix><tool>`, the prefix ending in `__` (or none at all).
        let splits = qualified
            .match_indices("__")
            .map(|(at, _)| at + 2)
            .chain(std::iter::once(0));
        for at in splits {
            let (prefix, tool) = qualified.split_at(at);
            if !valid_tool_name(tool) {
                continue;
            }
            let Some(approve) = self.registry.find(&format!("{prefix}{APPROVE}")).await else {
                continue;
            };
            if approve.original == APPROVE && self.permission_prompts.contains(&approve.module_name)
            {
                return Some(approve.host_tool(qualified.to_owned(), tool));
            }
        }
        None
    }

    /// Answers a permission-prompt module's `approve` (see the module's docs).
    // Long: the host's tool decided, held and waited for, in one flow whose progress shares the
    // wait's state.
    pub(crate) async fn permission_prompt(
        &self,
        principal: &mcp_auth::Principal,
        entry: &Arc<ToolEntry>,
        params: CallToolParams,
        relay: Option<Arc<dyn Relay>>,
        upstream: &mut Duration,
    ) -> CallOutcome {
        let asked = match params.arguments.as_ref().map(Arguments::to_value) {
            Some(Ok(Value::Object(asked))) => asked,
            _ => return deny("the permission request could not be read; nothing may run"),
        };
        let Some(tool) = asked
            .get("tool_name")
            .and_then(Value::as_str)
            .filter(|t| valid_tool_name(t))
        else {
            return deny(
                "the permission request names no tool (tool_name: 1 to 128 letters, digits, '_', '-', '.'); nothing may run",
            );
        };
        let input = match asked.get("input") {
            None => json!({}),
            Some(Value::Object(input)) => Value::Object(input.clone()),
            Some(_) => return deny("the permission request's input is not an object"),
        };
        // The host's tool under the module's prefix: `claude__Bash`.
        let qualified = match entry.qualified.strip_suffix(APPROVE) {
            Some("") | None => tool.to_owned(),
            Some(prefix) => format!("{prefix}{tool}"),
        };
        let host = Arc::new(entry.host_tool(qualified, tool));
        let groups: Vec<String> = principal.rule_groups();
        let flow = self.flow_for(&host, &principal.caller).await;
        let decided = self.decide(&host, &input, &principal.caller, &groups, flow.as_ref());
        for (rule, why) in &decided.failures {
            tracing::warn!(tool = %host.qualified, rule, why = %why, "a [[policy]] rule's `when` could not be evaluated for a permission request; the rule was taken the way that keeps the gate shut");
        }
        let policy = PolicyRef {
            rule: decided.rule,
            policy: Some(self.policy_digest.clone()),
            server: self.server_name().map(str::to_owned),
        };
        let Value::Object(map) = &input else {
            return deny("the permission request's input is not an object");
        };
        let mut host_params = CallToolParams::new(tool.to_owned(), Some(Arguments::from_map(map)));
        host_params.meta = params.meta.clone();
        let forwarded = |shadowed| Audit::Forwarded {
            gated: false,
            shadowed,
        };
        let outcome = match decided.decision {
            GateDecision::Forward => {
                self.forward(
                    principal,
                    &host,
                    host_params,
                    (forwarded(false), None, None),
                    Via::Modules(relay),
                    upstream,
                )
                .await
            }
            GateDecision::Shadow => {
                self.record(principal, &host, GateRecord::Shadowed, None, &policy)
                    .await;
                self.forward(
                    principal,
                    &host,
                    host_params,
                    (forwarded(true), None, None),
                    Via::Modules(relay),
                    upstream,
                )
                .await
            }
            GateDecision::Deny => {
                let rejected = GateRecord::Rejected(RejectReason::PolicyDenied);
                self.record(principal, &host, rejected, None, &policy).await;
                return deny(match &decided.reason {
                    Some(reason) => format!(
                        "The gateway's policy does not allow {}: {reason}",
                        host.qualified
                    ),
                    None => format!("The gateway's policy does not allow {}.", host.qualified),
                });
            }
            GateDecision::Confirm(reason) => {
                let call = GatedCall {
                    binding: elicitation_store::CallBinding {
                        server: self.server_name().map(str::to_owned),
                        tool: host.qualified.clone(),
                        digest: CallDigest::of(&input),
                        definition: host.digest,
                    },
                    message: gating_core::confirmation_message(
                        &host.qualified,
                        reason,
                        &input,
                        &self.surfaces,
                    ),
                    entry: host,
                    params: host_params,
                    arguments: input,
                    policy,
                    ttl: decided.ttl,
                    grants: decided.grants,
                    only_named: false,
                };
                self.until_answered(principal, &call, &params, relay, upstream)
                    .await
            }
        };
        answer_of(outcome)
    }

    /// Resolves `call` until it is more than pending: waits for the person between tries,
    /// telling the client it still waits.
    async fn until_answered(
        &self,
        principal: &mcp_auth::Principal,
        call: &GatedCall,
        asked: &CallToolParams,
        relay: Option<Arc<dyn Relay>>,
        upstream: &mut Duration,
    ) -> CallOutcome {
        let token = asked
            .meta
            .as_ref()
            .and_then(|m| m.get("progressToken"))
            .cloned();
        let mut named = None;
        let mut told = 0u64;
        loop {
            let pending = match self
                .resolve_timed(
                    principal,
                    call,
                    named,
                    Via::Modules(relay.clone()),
                    upstream,
                )
                .await
            {
                CallOutcome::NeedsConfirmation(pending) => pending.confirmation,
                answered => return answered,
            };
            named = Some(pending.id);
            tracing::info!(tool = %call.entry.qualified, confirmation = %pending.id, "the agent host waits for a person to confirm its tool use");
            // Wait until it changes (an answer) or it is no longer worth waiting.
            loop {
                let left = pending.expires_at - self.clock.now();
                let Ok(left) = Duration::try_from(left) else {
                    return deny(format!(
                        "No one confirmed {} before its confirmation {} expired; it did not run.",
                        call.entry.qualified, pending.id
                    ));
                };
                if left.is_zero() {
                    return deny(format!(
                        "No one confirmed {} before its confirmation {} expired; it did not run.",
                        call.entry.qualified, pending.id
                    ));
                }
                let deadline = tokio::time::Instant::now() + left.min(PROGRESS_EVERY);
                // The wait itself is bounded by its deadline, not by the store's operation
                // limit (which is shorter than PROGRESS_EVERY, and cut every wait at 10 s):
                // only a store that does not answer past the deadline is a failure.
                let now = timed_until(
                    deadline + crate::STORE_TIMEOUT,
                    self.store
                        .wait_for_change(&principal.caller, pending.id, deadline),
                )
                .await;
                match now {
                    Ok(e) if e.status != ElicitationStatus::Pending => break,
                    Ok(_) => {
                        told += 1;
                        if let (Some(relay), Some(token)) = (&relay, &token) {
                            relay.notify(
                                "notifications/progress",
                                mcp_wire::mcp::progress_params(
                                    token,
                                    told,
                                    &format!(
                                        "waiting for a person to confirm {}",
                                        call.entry.qualified
                                    ),
                                ),
                            );
                        }
                    }
                    Err(e) => {
                        return deny(format!(
                            "The gateway could not read the confirmation of {} ({e}); it did not run.",
                            call.entry.qualified
                        ));
                    }
                }
            }
        }
    }
}

/// The host's answer from what became of the call: the permission module's own `allow`
/// when the gate let it through, else `deny` with what the gate said.
fn answer_of(outcome: CallOutcome) -> CallOutcome {
    match outcome {
        CallOutcome::Forwarded(raw) => CallOutcome::Forwarded(raw),
        CallOutcome::Done(result) => {
            let text = result
                .get("content")
                .and_then(|c| c.get(0))
                .and_then(|c| c.get("text"))
                .and_then(Value::as_str)
                .unwrap_or("The gateway did not allow this tool use.");
            // The module's decision, with a note added after it (a person's edit): the
            // decision alone, which is what the host reads. The gate's own answers are
            // results for a model (never a whole JSON text): a deny with what they say.
            if let Some(decision) = serde_json::from_str::<Value>(text)
                .ok()
                .filter(|d| d.get("behavior").is_some())
            {
                return CallOutcome::Done(decision_result(&decision));
            }
            deny(text)
        }
        CallOutcome::Upstream(error) => deny(format!(
            "the permission could not be decided: {}",
            error.message
        )),
        CallOutcome::NeedsConfirmation(_) => {
            deny("no one has confirmed this tool use; it did not run")
        }
        CallOutcome::NeedsAccount { module, .. } => deny(format!(
            "module {module} runs as the person's own account there, which is not connected; it did not run"
        )),
    }
}
