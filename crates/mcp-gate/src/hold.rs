//! Step two of the gate ([`Gateway::resolve`]): a held call settled against the
//! confirmation it names or the caller's identical one — forwarded once it is consumed,
//! refused, taken up by a standing grant, or held anew.

use std::sync::Arc;
use std::time::Duration;

use elicitation_core::{Elicitation, ElicitationId, ElicitationStatus};
use elicitation_store::{
    ConfirmationRequest, GateRecord, Grant, Redeemed, RejectReason, StoreError,
};
use gating_core::{CallDigest, ConfirmationOutcome, GateDecision, GrantScope, When};
use mcp_upstream::Relay;
use mcp_upstream::registry::ToolEntry;
use mcp_wire::CallToolParams;
use mcp_wire::tools::Arguments;
use serde_json::Value;

use crate::approve::told_of_edit;
use crate::gate::call_facts;
use crate::outcome::{Audit, CallOutcome, GatedCall, PendingConfirmation, Run, RunBy, Settled};
use crate::own_tool::Via;
use crate::pins::definition_digest;
use crate::quotas::{QuotaStop, Taken};
use crate::{Gateway, timed};
use mcp_auth::Principal;

impl Gateway {
    /// Step two of the gate: what becomes of a gated call given the confirmation the caller
    /// names (if any) — forwarded once it is consumed, refused, or held (a new confirmation,
    /// or the same one still pending). The named confirmation is redeemed in one store
    /// operation; on refusal the store returns it as it is and `gating_core::evaluate`
    /// decides the answer. A forwarded call's messages go to `relay`.
    pub async fn resolve(
        &self,
        principal: &Principal,
        call: &GatedCall,
        confirmation_id: Option<ElicitationId>,
        relay: Option<Arc<dyn Relay>>,
    ) -> CallOutcome {
        let started = std::time::Instant::now();
        let mut upstream = Duration::ZERO;
        let outcome = self
            .resolve_timed(
                principal,
                call,
                confirmation_id,
                Via::Modules(relay),
                &mut upstream,
            )
            .await;
        self.metrics.gateway_time(started.elapsed(), upstream);
        outcome
    }

    /// [`Gateway::resolve`], adding the module's time on a forwarded call to `upstream`:
    /// [`Gateway::settle`], then the call run on its module when it may be.
    pub(crate) async fn resolve_timed(
        &self,
        principal: &Principal,
        call: &GatedCall,
        confirmation_id: Option<ElicitationId>,
        via: Via<'_>,
        upstream: &mut Duration,
    ) -> CallOutcome {
        // The quota first: a call over it is refused before a confirmation (or a grant's
        // use) is spent on it, and before a person is asked about it; what was taken is given
        // back unless the call runs now.
        let taken = match self.take_quota(principal, &call.entry).await {
            Ok(taken) => taken,
            Err(QuotaStop::Refused(refused)) => return CallOutcome::Done(refused),
            // Past a quota that asks a person: their leave for this one call beyond it is
            // what the call needs now (it stands for the call's own confirmation too, and the
            // person is told both).
            Err(QuotaStop::Ask(taken, passed)) => {
                let past = crate::past_quota::Past::Gated(call, confirmation_id);
                return Box::pin(self.past_quota(principal, past, (taken, &passed), via, upstream))
                    .await;
            }
        };
        let settled = self.settle(principal, call, confirmation_id).await;
        self.run_settled(principal, call, settled, taken, via, upstream)
            .await
    }

    /// What a settled call comes to: its answer or its hold (the quota counts it took given
    /// back: it does not run now), or its run on the module, audited as redeemed or granted
    /// and told of a person's edit.
    pub(crate) async fn run_settled(
        &self,
        principal: &Principal,
        call: &GatedCall,
        settled: Settled,
        taken: Taken,
        via: Via<'_>,
        upstream: &mut Duration,
    ) -> CallOutcome {
        match settled {
            Settled::Answer(result) => {
                self.give_back_quota(taken).await;
                CallOutcome::Done(result)
            }
            Settled::Held(pending) => {
                self.give_back_quota(taken).await;
                CallOutcome::NeedsConfirmation(pending)
            }
            Settled::Run(run) => {
                let run = *run;
                let event = match run.by {
                    RunBy::Confirmation(id) => (
                        Audit::Forwarded {
                            gated: true,
                            shadowed: false,
                        },
                        Some(id),
                        Some(taken),
                    ),
                    RunBy::Grant(grant) => (Audit::Granted(grant), None, Some(taken)),
                };
                let outcome = self
                    .forward(principal, &call.entry, run.params, event, via, upstream)
                    .await;
                match &run.edited {
                    Some(edited) => told_of_edit(outcome, edited),
                    None => outcome,
                }
            }
        }
    }

    /// The settle step: what becomes of a gated call given the confirmation the caller
    /// names (if any), short of running it. The named confirmation (or the caller's
    /// confirmation of exactly this call) is redeemed in one store step; a standing grant
    /// that covers the call is used in one store step; otherwise a person is asked anew.
    /// Refusals and holds are audited here; a [`Settled::Run`] is the caller's to run (the
    /// gateway forwards it to the module, an embedder runs its own tool) and to audit as
    /// run. The gateway's pipeline and embedders settle calls through this one step.
    // Long: the settle step in order (the named or identical confirmation, its answer, a
    // grant, a new hold), each outcome audited where it is decided.
    pub async fn settle(
        &self,
        principal: &Principal,
        call: &GatedCall,
        confirmation_id: Option<ElicitationId>,
    ) -> Settled {
        let entry = &*call.entry;
        let binding = &call.binding;
        let done = Settled::Answer;
        if self.require_authenticated_caller && !principal.authenticated {
            self.refused(principal, call, RejectReason::NoAuthenticatedCaller, None)
                .await;
            return done(gating_core::gate_unavailable_result(
                "confirmations in this gateway's store need an authenticated caller (configure auth mode \"tokens\")",
                &self.surfaces,
            ));
        }
        let caller = &principal.caller;
        // A call repeated with identical arguments and no id takes up the caller's
        // confirmation of exactly this call (approved and unused first, else declined and not
        // yet told, else pending): a model that cannot set `_meta` finishes the loop by
        // calling again — and hears a refusal the same way, once — and a repeated question is
        // not asked twice. The redemption below is what grants, as with an id.
        let taken_up = confirmation_id.is_none();
        let confirmation_id = match confirmation_id {
            Some(id) => Some(id),
            None => match timed(self.store.confirmation_for(caller, binding)).await {
                Ok(found) => found,
                Err(e) => return done(self.fail_closed(principal, entry, &e)),
            },
        };
        if let Some(id) = confirmation_id {
            match timed(self.store.redeem_confirmation(caller, id, binding)).await {
                // Approved, and consumed now: forwarded, once.
                Ok(Redeemed::Consumed(consumed)) => {
                    tracing::info!(target: "mcp_trace", confirmation = %id, "redeemed");
                    mcp_trace::link_hold(&id.to_string());
                    let Some(edited) = consumed.edited_arguments else {
                        return Settled::Run(Box::new(Run {
                            params: call.params.clone(),
                            by: RunBy::Confirmation(id),
                            edited: None,
                        }));
                    };
                    // The person approved other arguments: those run, if the policy in
                    // force does not deny them, and the agent is told.
                    let flow = self.flow_for(&call.entry, caller).await;
                    return match self.edited_params(principal, call, &edited, flow.as_ref()) {
                        Ok(params) => Settled::Run(Box::new(Run {
                            params,
                            by: RunBy::Confirmation(id),
                            edited: Some(edited),
                        })),
                        Err(refusal) => {
                            let rejected = GateRecord::Rejected(RejectReason::PolicyDenied);
                            self.record(principal, entry, rejected, Some(id), &call.policy)
                                .await;
                            done(refusal)
                        }
                    };
                }
                Ok(Redeemed::Refused { current, .. }) => {
                    // The seed's truth table decides an answered confirmation; the statuses
                    // that are not answers (pending, cancelled, expired, failed) are handled
                    // around it.
                    let outcome = match current.status {
                        // Not answered yet: the same confirmation again, no new elicitation.
                        ElicitationStatus::Pending => {
                            // A grant made since covers the call: no need to wait.
                            if !call.only_named
                                && let Some(granted) = self.granted(principal, call).await
                            {
                                return granted;
                            }
                            let held = GateRecord::Held;
                            self.record(principal, entry, held, Some(id), &call.policy)
                                .await;
                            return held_on(call, current, &self.surfaces);
                        }
                        ElicitationStatus::Cancelled => {
                            let reason = RejectReason::ConfirmationCancelled;
                            self.refused(principal, call, reason, Some(id)).await;
                            return done(gating_core::cancelled_result(id));
                        }
                        ElicitationStatus::Expired => {
                            let reason = RejectReason::ConfirmationExpired;
                            self.refused(principal, call, reason, Some(id)).await;
                            return done(gating_core::expired_result(id));
                        }
                        ElicitationStatus::Responded => {
                            gating_core::evaluate(true, current.confirmation_state())
                        }
                        // Failed validation: ask anew.
                        ElicitationStatus::ValidationFailed => {
                            ConfirmationOutcome::NeedsConfirmation
                        }
                    };
                    if outcome == ConfirmationOutcome::Declined {
                        // Told once to a call that took it up without the id (then an
                        // identical call is asked about anew); a call naming it hears it
                        // every time.
                        let first = match timed(self.store.report_decline(caller, id, binding))
                            .await
                        {
                            Ok(first) => first,
                            Err(e) => {
                                tracing::warn!(confirmation = %id, error = %e, "could not record that a decline was told; an identical call may hear it again");
                                true
                            }
                        };
                        if first || !taken_up {
                            let reason = RejectReason::UserRejected;
                            self.refused(principal, call, reason, Some(id)).await;
                            return done(gating_core::user_rejected_result(
                                current.note.as_deref(),
                            ));
                        }
                        // Told already (to a call at the same moment): asked anew below.
                    }
                    // Approved but used already (or expired after the answer), or failed:
                    // ask anew below.
                }
                // Not this caller's confirmation of this call: ask anew below.
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => return done(self.fail_closed(principal, entry, &e)),
            }
        }
        // A call settled by its named confirmation alone runs by it or not at all.
        if call.only_named {
            return done(gating_core::gate_unavailable_result(
                "this call ran already, or its confirmation expired or no longer matches the call: it does not run again (call the tool anew to ask again)",
                &self.surfaces,
            ));
        }
        // Not answered for this call, or answered but of no use any more: a standing grant
        // covers it, or a person is asked anew.
        if let Some(granted) = self.granted(principal, call).await {
            return granted;
        }
        self.hold_anew(principal, call).await
    }

    /// `call`'s params with the arguments a person approved instead of the agent's, unless
    /// the policy in force denies the call with them (then the refusal).
    fn edited_params(
        &self,
        principal: &Principal,
        call: &GatedCall,
        edited: &Value,
        flow: Option<&gating_core::Flow>,
    ) -> Result<CallToolParams, Value> {
        let entry = &call.entry;
        let Value::Object(map) = edited else {
            return Err(gating_core::gate_unavailable_result(
                "the arguments the person approved are not an object; nothing was run",
                &self.surfaces,
            ));
        };
        let groups: Vec<String> = principal.rule_groups();
        let decided = self.decide(entry, edited, &principal.caller, &groups, flow);
        if decided.decision == GateDecision::Deny {
            return Err(gating_core::denied_result(
                &entry.qualified,
                decided.reason.as_deref(),
                &self.surfaces,
            ));
        }
        let mut params = call.params.clone();
        params.arguments = Some(Arguments::from_map(map));
        Ok(params)
    }

    /// `call` run under one of its caller's live grants that covers it, used now (one use,
    /// in one store step); `None` when none does. A store failure fails closed.
    async fn granted(&self, principal: &Principal, call: &GatedCall) -> Option<Settled> {
        if !call.grants {
            return None;
        }
        let entry = &*call.entry;
        let caller = &principal.caller;
        let live = match timed(self.grants.live_grants(caller, &entry.qualified)).await {
            Ok(live) => live,
            Err(e) => return Some(Settled::Answer(self.fail_closed(principal, entry, &e))),
        };
        if live.is_empty() {
            return None;
        }
        let definition = definition_digest(entry);
        let approval = self.approval_for(&entry.qualified, caller);
        // A grant's `when` sees the caller's flow, as a rule's does: read once, if any has one.
        let flow = match live.iter().any(|g| g.when.is_some()) {
            true => Some(self.flow_of(caller).await),
            false => None,
        };
        for grant in live {
            if !self.covers(
                &grant,
                principal,
                call,
                &definition,
                approval.as_ref(),
                flow.as_ref(),
            ) {
                continue;
            }
            match timed(self.grants.use_grant(caller, grant.id, &entry.qualified)).await {
                Ok(Some(used)) => {
                    return Some(Settled::Run(Box::new(Run {
                        params: call.params.clone(),
                        by: RunBy::Grant(used.id),
                        edited: None,
                    })));
                }
                // Used up or revoked since it was read: the next one, if any.
                Ok(None) => {}
                Err(e) => return Some(Settled::Answer(self.fail_closed(principal, entry, &e))),
            }
        }
        None
    }

    /// Whether `grant` covers `call` now: made against the tool's definition as it is listed
    /// now and under the approver rule that answers the call now, and for this call (scope
    /// `call`: the same argument digest; scope `tool`: its `when`, if any, holds). A `when`
    /// that cannot be compiled or evaluated covers nothing.
    fn covers(
        &self,
        grant: &Grant,
        principal: &Principal,
        call: &GatedCall,
        definition: &str,
        approval: Option<&elicitation_store::Approval>,
        flow: Option<&gating_core::Flow>,
    ) -> bool {
        if grant.definition != definition || grant.approval.as_ref() != approval {
            return false;
        }
        match grant.scope {
            GrantScope::Call => grant.digest.as_ref() == Some(&call.binding.digest),
            GrantScope::Tool => {
                let Some(source) = &grant.when else {
                    return true;
                };
                let groups: Vec<String> = principal.rule_groups();
                let when = match When::compile(source) {
                    Ok(when) => when,
                    Err(why) => {
                        tracing::warn!(grant_id = %grant.id, why = %why, "a grant's `when` does not compile; it covers nothing");
                        return false;
                    }
                };
                let facts = gating_core::CallFacts {
                    flow: flow.filter(|_| when.reads_flow()),
                    ..call_facts(
                        &call.entry,
                        &call.arguments,
                        principal.caller.subject_id(),
                        &groups,
                    )
                };
                match when.matches(&facts) {
                    Ok(covered) => covered,
                    Err(why) => {
                        tracing::debug!(grant_id = %grant.id, why = %why, "a grant's `when` could not be evaluated for a call; it does not cover it");
                        false
                    }
                }
            }
        }
    }

    /// Holds `call` on a new confirmation (its approver rule told in its message), or says
    /// why it cannot be held: the caller's confirmation rate, the store's limits, the store
    /// failing (fail closed).
    async fn hold_anew(&self, principal: &Principal, call: &GatedCall) -> Settled {
        let entry = &*call.entry;
        let binding = &call.binding;
        let caller = &principal.caller;
        let done = Settled::Answer;
        let approval = self.approval_for(&entry.qualified, caller);
        // Whoever reads the confirmation (the agent's held result, the page, the REST API)
        // learns who must answer it.
        let message = match &approval {
            Some(a) if a.quorum.is_plural() => {
                let groups: Vec<String> = a.groups().map(|g| format!("\"{g}\"")).collect();
                format!(
                    "{} {} people must approve it ({}), not the person the agent acts for.",
                    call.message.text,
                    a.quorum.needed(),
                    if groups.len() > 1 {
                        format!("one from each of the approver groups {}", groups.join(", "))
                    } else {
                        format!("members of the approver group {}", groups.join(""))
                    }
                )
            }
            Some(a) if !a.caller_may_answer() => format!(
                "{} A member of the approver group \"{}\" must confirm it{}.",
                call.message.text,
                a.group,
                if a.mode == elicitation_store::ApprovalMode::FourEyes {
                    ", not the person the agent acts for"
                } else {
                    ""
                }
            ),
            _ => call.message.text.clone(),
        };
        if let Err(wait) = self.limits.elicitation(caller) {
            return done(self.limited(principal, entry, "confirmations", wait));
        }
        let request = ConfirmationRequest {
            binding: binding.clone(),
            arguments: call.arguments.clone(),
            message,
            ttl: call.ttl,
            approval,
            policy: call.policy.clone(),
            client: principal.client.clone(),
        };
        match timed(self.store.create_confirmation(caller, request)).await {
            Ok(stored) => {
                self.audit(principal, entry, Audit::Held, Some(stored.elicitation.id));
                held_on(call, stored.elicitation, &self.surfaces)
            }
            Err(StoreError::PendingLimit { limit }) => {
                self.refused(principal, call, RejectReason::PendingLimit, None)
                    .await;
                done(gating_core::gate_unavailable_result(
                    &format!(
                        "this caller already has {limit} confirmations waiting; answer or cancel some first"
                    ),
                    &self.surfaces,
                ))
            }
            Err(StoreError::CallerFull { .. }) => {
                self.refused(principal, call, RejectReason::CallerFull, None)
                    .await;
                done(gating_core::gate_unavailable_result(
                    "this caller holds as many confirmations as the gateway keeps for one caller; answer or cancel some first",
                    &self.surfaces,
                ))
            }
            Err(e) => done(self.fail_closed(principal, entry, &e)),
        }
    }
}

/// `call` held on `confirmation` (pending), traced as held.
fn held_on(
    call: &GatedCall,
    confirmation: Elicitation,
    surfaces: &Arc<gating_core::Surfaces>,
) -> Settled {
    mcp_trace::record("mcp.outcome", "held");
    tracing::info!(target: "mcp_trace", confirmation = %confirmation.id, "held");
    mcp_trace::hold(&confirmation.id.to_string());
    Settled::Held(Box::new(PendingConfirmation {
        confirmation,
        askable_natively: call.message.shows_all_arguments,
        surfaces: surfaces.clone(),
    }))
}

impl Gateway {
    /// The digest of the definition a held call (held under `held_under`) was put to the
    /// person with, when it is still what is listed for `entry`: the same digest and, for a
    /// module's tool (`listed`), its pin's verdict `Listed`. `None` otherwise.
    pub(crate) async fn definition_put_to_the_person(
        &self,
        entry: &Arc<ToolEntry>,
        listed: bool,
        held_under: Option<CallDigest>,
    ) -> Option<String> {
        let held_under = held_under?;
        if entry.digest != held_under {
            return None;
        }
        if listed
            && !matches!(
                self.pinning.verdict(entry).await,
                Ok(crate::pins::Verdict::Listed)
            )
        {
            return None;
        }
        Some(held_under.to_string())
    }
}
