//! Step one of the gate and the forward: which tool a call names, what the policy decides
//! for it ([`Gateway::classify`]), running a classified call ([`Gateway::run`]), refusals,
//! the fail-closed answer, the forward to the module and the audit trail of each.

use std::sync::Arc;
use std::time::Duration;

use elicitation_core::ElicitationId;
use elicitation_store::{
    CallBinding, CallCompletion, GateRecord, PolicyRef, RejectReason, StoreError,
};
use gating_core::{CallDigest, CallFacts, GateDecision, HintSource};
use mcp_upstream::registry::ToolEntry;
use mcp_upstream::{ModuleError, Relay};
use mcp_wire::CallToolParams;
use mcp_wire::jsonrpc::ErrorObject;
use mcp_wire::tools::Arguments;
use serde_json::{Map, Value};

use crate::error::GateError;
use crate::instance::instance_key;
use crate::outcome::{Audit, CallOutcome, Classified, GatedCall};
use crate::own_tool::Via;
use crate::quotas::{Over, QuotaStop, Taken};
use crate::{Gateway, timed};
use mcp_auth::Principal;

impl Gateway {
    /// Step one of the gate: which tool, and does the policy forward, deny or gate it. A
    /// gated call's binding (the digest of its arguments) and message are made here, once.
    pub async fn classify(
        &self,
        principal: &Principal,
        params: CallToolParams,
    ) -> Result<Classified, GateError> {
        let entry = self.tool(&params.name).await?;
        self.classify_entry(principal, entry, params).await
    }

    /// Step one for a tool already found: a module's ([`Gateway::classify`]) or an
    /// embedder's own ([`Gateway::classify_own`]).
    // Long: step one's decisions in the order they are made (account, pin, policy, binding),
    // each audited where it is made.
    pub(crate) async fn classify_entry(
        &self,
        principal: &Principal,
        entry: Arc<ToolEntry>,
        params: CallToolParams,
    ) -> Result<Classified, GateError> {
        mcp_trace::record("mcp.tool", &entry.qualified);
        mcp_trace::record("mcp.module", &entry.module_name);
        // Every call is classified once: the caller's call rate is counted here.
        if let Err(wait) = self.limits.call(&principal.caller) {
            return Ok(Classified::Limited(entry, wait));
        }
        match self.pinning.verdict(&entry).await {
            Ok(crate::pins::Verdict::Listed) => {}
            Ok(crate::pins::Verdict::Held(change)) => {
                return Ok(Classified::Quarantined(entry, Some(change)));
            }
            Err(e) => {
                tracing::error!(tool = %entry.qualified, error = %e, "could not check a tool's definition against its pin; the call is not forwarded");
                return Ok(Classified::Quarantined(entry, None));
            }
        }
        // A module run as its callers: a caller without an account there is not sent (not
        // even held: a person would approve a call that cannot run). The store failing
        // sends nothing either.
        if self.registry.needs_account(&entry)
            && self
                .accounts
                .account(&principal.caller, &entry.module_name)
                .await?
                .is_none()
        {
            return Ok(Classified::NeedsAccount(entry));
        }
        if entry.original == mcp_upstream::permission_prompt::APPROVE
            && self.permission_prompts.contains(&entry.module_name)
        {
            return Ok(Classified::PermissionPrompt(entry, Box::new(params)));
        }
        let unreadable = |e: serde_json::Error| {
            GateError::InvalidParams(format!("`arguments` cannot be read: {e}"))
        };
        // A tool that mirrors arguments into headers has them read for its module; one that
        // cannot be read is refused here rather than sent without its headers.
        if !entry.mirrored.is_empty()
            && let Some(arguments) = &params.arguments
        {
            arguments.to_map().map_err(unreadable)?;
        }
        // Read once, and only where a rule's `when` reads the call: absent arguments are
        // `{}` to the rules, the digest and the message.
        let read = |params: &CallToolParams| match &params.arguments {
            None => Ok(Value::Object(Map::new())),
            Some(arguments) => arguments.to_value().map_err(unreadable),
        };
        // The arguments and groups are read only where a rule's `when` reads them (not on
        // the path of a tool no such rule names).
        let reads = self.policy.reads_calls(&entry.qualified);
        let arguments = if reads { Some(read(&params)?) } else { None };
        // What was decided on is what the module gets: arguments that were read (by a rule,
        // or below to be shown and digested) go upstream written from the tree that was
        // read, never as the client's text, which a module's JSON parser could read
        // differently (a duplicate key is the last one here, maybe the first one there).
        let mut params = params;
        let upstream_as_read = |params: &mut CallToolParams, arguments: &Value| {
            if let (Some(given), Value::Object(map)) = (&mut params.arguments, arguments) {
                *given = Arguments::from_map(map);
            }
        };
        if let Some(arguments) = &arguments {
            upstream_as_read(&mut params, arguments);
        }
        let groups: Vec<String> = if reads {
            principal.rule_groups()
        } else {
            Vec::new()
        };
        // The caller's flow only for a call judged on it (it may send data out, or a rule
        // naming it reads `flow`).
        let flow = self.flow_for(&entry, &principal.caller).await;
        let mut decided = self.policy.decide(
            &CallFacts {
                flow: flow.as_ref(),
                ..call_facts(
                    &entry,
                    arguments.as_ref().unwrap_or(&Value::Null),
                    principal.caller.subject_id(),
                    &groups,
                )
            },
            hints(&entry),
        );
        // A call that sends out a secret the agent was shown is held too, naming where it
        // was read (compared by fingerprint; a denied call stays denied).
        let mut exfiltrated = None;
        if let Some(flow) = flow.as_ref().filter(|f| f.saw_secrets())
            && decided.decision != GateDecision::Deny
            && self
                .policy
                .flow()
                .labels(&entry.qualified, hints(&entry).effective())
                .0
                .has(gating_core::FlowLabel::SendsOut)
        {
            let carried = match &arguments {
                Some(arguments) => self.exfiltrates(flow, arguments),
                None => self.exfiltrates(flow, &read(&params)?),
            };
            if carried.is_some() {
                decided = self.policy.held_for_flow(decided);
                exfiltrated = carried;
            }
        }
        for (rule, why) in &decided.failures {
            tracing::warn!(tool = %entry.qualified, rule, why = %why, "a [[policy]] rule's `when` could not be evaluated for a call; the rule was taken the way that keeps the gate shut");
        }
        let policy = || PolicyRef {
            rule: decided.rule,
            policy: Some(self.policy_digest.clone()),
            server: self.server_name().map(str::to_owned),
        };
        Ok(match decided.decision {
            GateDecision::Forward => Classified::Forward(entry, Box::new(params)),
            GateDecision::Shadow => Classified::Shadow(entry, Box::new(params), policy()),
            GateDecision::Deny => Classified::Deny(entry, decided.reason.clone(), policy()),
            GateDecision::Confirm(reason) => {
                let arguments = match arguments {
                    Some(arguments) => arguments,
                    None => {
                        let arguments = read(&params)?;
                        upstream_as_read(&mut params, &arguments);
                        arguments
                    }
                };
                let binding = CallBinding {
                    server: self.server_name().map(str::to_owned),
                    tool: entry.qualified.clone(),
                    digest: CallDigest::of(&arguments),
                    definition: entry.digest,
                };
                // A call a flow rule matched tells the person the trail (and the secret's
                // source when it sends one out).
                let message = match flow.as_ref().filter(|_| decided.trifecta) {
                    Some(flow) => gating_core::confirmation_message_after(
                        &match &exfiltrated {
                            Some(seen) => format!(
                                "{} {}",
                                gating_core::exfiltration_text(seen),
                                gating_core::flow_trail(flow, &entry.qualified)
                            ),
                            None => gating_core::flow_trail(flow, &entry.qualified),
                        },
                        &entry.qualified,
                        reason,
                        &arguments,
                        &self.surfaces,
                    ),
                    None => gating_core::confirmation_message(
                        &entry.qualified,
                        reason,
                        &arguments,
                        &self.surfaces,
                    ),
                };
                Classified::Gated(Box::new(GatedCall {
                    entry,
                    params,
                    arguments,
                    binding,
                    message,
                    policy: policy(),
                    ttl: decided.ttl,
                    grants: decided.grants,
                    only_named: false,
                }))
            }
        })
    }

    /// Runs `tools/call` with these params for `principal`. `_meta.confirmation_id` names a
    /// confirmation the caller believes approves this call.
    pub async fn call_tool(
        &self,
        principal: &Principal,
        params: CallToolParams,
    ) -> Result<CallOutcome, GateError> {
        let classified = self.classify(principal, params).await?;
        Ok(self.run(principal, classified, None).await)
    }

    /// Forwards, denies, or resolves a classified call (a gated one with the
    /// `_meta.confirmation_id` it carries). The module's messages about the call go to
    /// `relay`.
    pub async fn run(
        &self,
        principal: &Principal,
        classified: Classified,
        relay: Option<Arc<dyn Relay>>,
    ) -> CallOutcome {
        self.run_via(principal, classified, Via::Modules(relay))
            .await
    }

    /// [`Gateway::run`], a call that may run run `via` its module or the embedder's code.
    // Long: one arm per classification, each short.
    pub(crate) async fn run_via(
        &self,
        principal: &Principal,
        classified: Classified,
        via: Via<'_>,
    ) -> CallOutcome {
        let started = std::time::Instant::now();
        let mut upstream = Duration::ZERO;
        let outcome = match classified {
            Classified::Limited(entry, wait) => {
                return CallOutcome::Done(self.limited(principal, &entry, "calls", wait));
            }
            Classified::NeedsAccount(entry) => {
                mcp_trace::record("mcp.outcome", "account_required");
                let rejected = GateRecord::Rejected(RejectReason::AccountNotConnected);
                self.record(principal, &entry, rejected, None, &self.unruled())
                    .await;
                CallOutcome::NeedsAccount {
                    module: entry.module_name.clone(),
                    surfaces: self.surfaces.clone(),
                }
            }
            Classified::Quarantined(entry, change) => {
                mcp_trace::record("mcp.outcome", "quarantined");
                let rejected = GateRecord::Rejected(RejectReason::ToolQuarantined);
                self.record(principal, &entry, rejected, None, &self.unruled())
                    .await;
                CallOutcome::Done(match change {
                    Some(change) => gating_core::quarantined_result(
                        &entry.qualified,
                        &change.id.to_string(),
                        &change.reasons,
                        &self.surfaces,
                    ),
                    None => gating_core::gate_unavailable_result(
                        "the gateway could not check this tool's definition against its pin; nothing was run",
                        &self.surfaces,
                    ),
                })
            }
            Classified::Forward(entry, params) => {
                let forwarded = Audit::Forwarded {
                    gated: false,
                    shadowed: false,
                };
                self.forward(
                    principal,
                    &entry,
                    *params,
                    (forwarded, None, None),
                    via,
                    &mut upstream,
                )
                .await
            }
            Classified::Shadow(entry, params, policy) => {
                self.record(principal, &entry, GateRecord::Shadowed, None, &policy)
                    .await;
                let forwarded = Audit::Forwarded {
                    gated: false,
                    shadowed: true,
                };
                self.forward(
                    principal,
                    &entry,
                    *params,
                    (forwarded, None, None),
                    via,
                    &mut upstream,
                )
                .await
            }
            Classified::Deny(entry, reason, policy) => {
                mcp_trace::record("mcp.outcome", "denied");
                let rejected = GateRecord::Rejected(RejectReason::PolicyDenied);
                self.record(principal, &entry, rejected, None, &policy)
                    .await;
                CallOutcome::Done(gating_core::denied_result(
                    &entry.qualified,
                    reason.as_deref(),
                    &self.surfaces,
                ))
            }
            Classified::Gated(call) => {
                // A task the caller has no room for is refused before a confirmation is
                // spent on it.
                if self.sent_as_task(&call.entry, &call.params)
                    && let Err(no_room) = self.tasks.reserve(&instance_key(&principal.caller))
                {
                    return CallOutcome::Done(no_room.result());
                }
                let confirmation = call
                    .params
                    .confirmation_id()
                    .and_then(|id| id.parse::<ElicitationId>().ok());
                // Boxed: a held call's resolve is the largest part of this future, and
                // every forwarded call's future would carry (and move) room for it.
                Box::pin(self.resolve_timed(principal, &call, confirmation, via, &mut upstream))
                    .await
            }
            // Boxed: its wait holds a resolve of its own, which would double the size of
            // every call's future.
            Classified::PermissionPrompt(entry, params) => match via {
                Via::Modules(relay) => {
                    Box::pin(self.permission_prompt(
                        principal,
                        &entry,
                        *params,
                        relay,
                        &mut upstream,
                    ))
                    .await
                }
                // Only a module is a permission prompt.
                Via::Own(_) => CallOutcome::Done(gating_core::denied_result(
                    &entry.qualified,
                    Some("a permission prompt is answered only for a module"),
                    &self.surfaces,
                )),
            },
        };
        self.metrics.gateway_time(started.elapsed(), upstream);
        outcome
    }

    /// A call refused by a rate limit: logged and counted, never written to the store (a
    /// caller over its rate must not be able to fill the audit trail).
    pub(crate) fn limited(
        &self,
        principal: &Principal,
        entry: &ToolEntry,
        limit: &'static str,
        wait: Duration,
    ) -> Value {
        mcp_trace::record("mcp.outcome", "limited");
        self.metrics.limited(limit);
        self.audit(
            principal,
            entry,
            Audit::Rejected(RejectReason::RateLimited.label()),
            None,
        );
        let what = match limit {
            "calls" => "this caller is making tool calls faster than the gateway allows",
            _ => "this caller is asking for confirmations faster than the gateway allows",
        };
        let has_output_schema = entry.tool.get("outputSchema").is_some();
        gating_core::rate_limited_result(
            what,
            crate::limits::retry_after_secs(wait),
            has_output_schema,
        )
    }

    /// Counts the call about to run against its quotas: what it took (to give back if it
    /// does not run after all), or the result that refuses it (a quota passed, or the
    /// counters unreadable: fail closed), recorded as `quota_exceeded` (or `store_error`).
    pub(crate) async fn take_quota(
        &self,
        principal: &Principal,
        entry: &ToolEntry,
    ) -> Result<Taken, QuotaStop> {
        if self.quotas.rules.is_empty() {
            return Ok(Taken::default());
        }
        let has_output_schema = entry.tool.get("outputSchema").is_some();
        let remaining = |rule: &crate::quotas::QuotaRule, left: i64| {
            self.metrics.quota_remaining(
                &rule.tools,
                rule.server.as_deref().unwrap_or(""),
                rule.window.label(),
                rule.unit_label(),
                left,
            );
        };
        let (reason, result) = match self
            .quotas
            .take(
                self.counters.as_ref(),
                &entry.qualified,
                (principal, self.server_name()),
                &remaining,
            )
            .await
        {
            Ok(Ok(taken)) => return Ok(taken),
            // A person may allow this one call beyond them.
            Ok(Err(Over::Ask(taken, passed))) => return Err(QuotaStop::Ask(taken, passed)),
            Ok(Err(Over::Refused(passed))) => {
                self.metrics.limited("quota");
                mcp_trace::record("mcp.outcome", "quota_exceeded");
                let wait = (passed.until - self.clock.now()).whole_seconds().max(1);
                (
                    RejectReason::QuotaExceeded,
                    gating_core::quota_result(
                        &passed.what,
                        passed.quota,
                        u64::try_from(wait).unwrap_or(1),
                        has_output_schema,
                    ),
                )
            }
            Err(e) => {
                tracing::error!(tool = %entry.qualified, error = %e, "the quota counters could not be read; the call is not forwarded");
                mcp_trace::record("mcp.outcome", "store_error");
                (
                    RejectReason::StoreError,
                    gating_core::gate_unavailable_result(
                        "the gateway could not count this call against its quota; nothing was run",
                        &self.surfaces,
                    ),
                )
            }
        };
        let policy = PolicyRef {
            server: self.server_name().map(str::to_owned),
            ..PolicyRef::default()
        };
        self.record(
            principal,
            entry,
            GateRecord::Rejected(reason),
            None,
            &policy,
        )
        .await;
        Err(QuotaStop::Refused(result))
    }

    /// Gives back what a call took from its quotas (it did not run after all).
    pub(crate) async fn give_back_quota(&self, taken: Taken) {
        self.quotas.give_back(self.counters.as_ref(), taken).await;
    }

    /// A gated call refused.
    pub(crate) async fn refused(
        &self,
        principal: &Principal,
        call: &GatedCall,
        reason: RejectReason,
        id: Option<ElicitationId>,
    ) {
        mcp_trace::record("mcp.outcome", "rejected");
        tracing::info!(target: "mcp_trace", reason = reason.label(), "rejected");
        let rejected = GateRecord::Rejected(reason);
        self.record(principal, &call.entry, rejected, id, &call.policy)
            .await;
    }

    /// What the gate did, logged and recorded in the store's audit trail (a failure to
    /// record is logged; the answer is the same either way).
    pub(crate) async fn record(
        &self,
        principal: &Principal,
        entry: &ToolEntry,
        record: GateRecord,
        id: Option<ElicitationId>,
        policy: &PolicyRef,
    ) {
        let event = match record {
            GateRecord::Held => Audit::Held,
            GateRecord::Rejected(reason) => Audit::Rejected(reason.label()),
            GateRecord::Shadowed => Audit::Shadowed,
            // Recorded where the call came back (`forward`).
            GateRecord::Completed(..) => return,
        };
        self.audit(principal, entry, event, id);
        if let Err(e) =
            timed(
                self.trail
                    .record_gate(&principal.caller, id, &entry.qualified, record, policy),
            )
            .await
        {
            tracing::warn!(error = %e, "could not record the gate's decision in the store's audit trail");
        }
    }

    /// Fails closed on a store failure. The refusal is recorded in the background: the store
    /// that just failed must not hold up the answer.
    pub(crate) fn fail_closed(
        &self,
        principal: &Principal,
        entry: &ToolEntry,
        error: &StoreError,
    ) -> Value {
        let error_id = crate::error::new_error_id();
        tracing::error!(tool = %entry.qualified, %error_id, error = %error, source = ?std::error::Error::source(error), "confirmation store failed; the call is not forwarded");
        self.audit(
            principal,
            entry,
            Audit::Rejected(RejectReason::StoreError.label()),
            None,
        );
        let trail = self.trail.clone();
        let caller = principal.caller.clone();
        let tool = entry.qualified.clone();
        let policy = self.unruled();
        tokio::spawn(async move {
            let record = GateRecord::Rejected(RejectReason::StoreError);
            if let Err(e) = timed(trail.record_gate(&caller, None, &tool, record, &policy)).await {
                tracing::debug!(error = %e, "could not record a store failure in the store");
            }
        });
        gating_core::gate_unavailable_result(
            &format!("the confirmation store is unavailable (error id {error_id})"),
            &self.surfaces,
        )
    }

    /// Forwards the call to its module: the params go through untouched but for the tool's
    /// own name, the gateway's `confirmation_id`, the client's multi round-trip fields and
    /// the downstream hop's protocol `_meta`.
    // Long: the forward, its timing and its audit record share the call's locals.
    pub(crate) async fn forward(
        &self,
        principal: &Principal,
        entry: &ToolEntry,
        params: CallToolParams,
        (event, confirmation, taken): (Audit, Option<ElicitationId>, Option<Taken>),
        via: Via<'_>,
        upstream: &mut Duration,
    ) -> CallOutcome {
        // A module's tool runs on its module, an embedder's own in the embedder's code, never
        // the one where the other belongs (a classification handed to the wrong run).
        if entry.is_own() != matches!(via, Via::Own(_)) {
            tracing::error!(tool = %entry.qualified, "a call was to run where its tool does not belong; nothing was run");
            return CallOutcome::Done(gating_core::gate_unavailable_result(
                "the call was classified for another runner; nothing was run",
                &self.surfaces,
            ));
        }
        // Every quota the call counts against, or none: over one, nothing runs (a held call
        // was counted before its confirmation was spent).
        let mut taken = match taken {
            Some(taken) => taken,
            None => match self.take_quota(principal, entry).await {
                Ok(taken) => taken,
                Err(QuotaStop::Refused(refused)) => return CallOutcome::Done(refused),
                // Past a quota that asks a person: the call is theirs to allow, once.
                Err(QuotaStop::Ask(taken, passed)) => {
                    let past =
                        crate::past_quota::Past::Direct(Arc::new(entry.clone()), Box::new(params));
                    return Box::pin(self.past_quota(
                        principal,
                        past,
                        (taken, &passed),
                        via,
                        upstream,
                    ))
                    .await;
                }
            },
        };
        self.audit(principal, entry, event, confirmation);
        let started = std::time::Instant::now();
        let who = instance_key(&principal.caller);
        let mut params = params.into_upstream(&entry.original);
        // A task goes on only to a module tool that runs as one, for a caller with room for
        // another (held until the module answered); anything else runs to its result.
        let mut reservation = None;
        if self.sent_as_task(entry, &params) {
            match self.tasks.reserve(&who) {
                Ok(room) => reservation = Some(room),
                Err(no_room) => {
                    self.give_back_quota(taken).await;
                    return CallOutcome::Done(no_room.result());
                }
            }
        } else {
            params = params.without_task().with_modern_task(false);
        }
        // A module's task of the 2026-07-28 extension is its answer only where one was taken.
        let takes_task = reservation.is_some();
        let run = async {
            match via {
                Via::Modules(relay) => {
                    match self
                        .registry
                        .call_served(entry, params, relay, Some(&who))
                        .await
                    {
                        Ok((result, module)) => Ok(match reservation {
                            Some(room) => self.adopt_task(room, entry, module, result),
                            None => result,
                        }),
                        Err(e) => Err(e),
                    }
                }
                Via::Own(tool) => tool.run(params).await,
            }
        };
        let call = tracing::Instrument::instrument(run, mcp_trace::module_span(&entry.module_name));
        // A module that exchanges the caller's own token exchanges exactly this request's.
        let answered = match &principal.subject_token {
            Some(token) if !self.exchanges.is_empty() => {
                let token: Arc<str> = Arc::from(token.expose());
                mcp_upstream::credentials::SUBJECT_TOKEN
                    .scope(token, call)
                    .await
            }
            _ => call.await,
        };
        let took = started.elapsed();
        *upstream += took;
        let series = series_of(&self.metrics, entry);
        self.metrics
            .module_time_with(series, &entry.module_name, took);
        // Passed on unparsed, so read at its top level first.
        let answered = answered.and_then(|result| {
            mcp_wire::result::usable(&result)
                .or_else(|refused| {
                    if takes_task && mcp_wire::tasks::created_task(&result).is_some() {
                        Ok(())
                    } else {
                        Err(refused)
                    }
                })
                .map(|()| result)
                .map_err(|reason| ModuleError::Protocol {
                    module: entry.module_name.clone(),
                    reason,
                })
        });
        // What the module answered is now in the caller's flow (whatever it said), as the
        // content policy lets the agent see it.
        let answered = self
            .guard(
                principal,
                &entry.qualified,
                self.brought_in(entry),
                answered,
            )
            .await;
        let (outcome, reason) = match &answered {
            Ok(_) if confirmation.is_some() => ("forwarded", "confirmed"),
            Ok(_) if matches!(event, Audit::Granted(_)) => ("forwarded", "granted"),
            Ok(_) if matches!(event, Audit::Forwarded { shadowed: true, .. }) => ("shadowed", ""),
            Ok(_) => ("forwarded", ""),
            Err(ModuleError::Rpc { .. }) => ("module_error", "rpc_error"),
            Err(ModuleError::Timeout { .. }) => ("module_error", "timeout"),
            Err(ModuleError::Busy { .. }) => {
                self.metrics.limited("module_concurrency");
                // Nothing ran: the quota is not spent.
                self.give_back_quota(std::mem::take(&mut taken)).await;
                ("module_error", "busy")
            }
            Err(_) => ("module_error", "failed"),
        };
        self.metrics.tool_call_with(
            series,
            (&entry.module_name, &entry.qualified),
            outcome,
            reason,
        );
        mcp_trace::record("mcp.outcome", outcome);
        // A gated call's outcome joins its record (a forward with none is visibly
        // unfinished), in the background: the caller has waited for the module already.
        if confirmation.is_some() || matches!(event, Audit::Granted(_)) {
            let completion = match &answered {
                Ok(result) if mcp_wire::result::is_error(result) => CallCompletion::ToolError,
                Ok(_) => CallCompletion::Ok,
                Err(_) => CallCompletion::ModuleFailed,
            };
            let credential = self.registry.credential_kind(entry);
            tracing::info!(target: "audit", event = "tool_call_completed", subject = principal.caller.subject_id(), tenant = principal.caller.tenant_id(), tool = %entry.qualified, outcome = completion.label(), credential, elicitation_id = confirmation.as_ref().map(tracing::field::display));
            let trail = self.trail.clone();
            let caller = principal.caller.clone();
            let tool = entry.qualified.clone();
            let policy = self.unruled();
            tokio::spawn(async move {
                let record = GateRecord::Completed(completion, credential);
                if let Err(e) =
                    timed(trail.record_gate(&caller, confirmation, &tool, record, &policy)).await
                {
                    tracing::warn!(error = %e, "could not record a call's outcome in the store's audit trail");
                }
            });
        }
        match answered {
            Ok(result) => CallOutcome::Forwarded(result),
            Err(ModuleError::Rpc {
                code,
                message,
                data,
                ..
            }) => CallOutcome::Upstream(ErrorObject {
                code,
                message,
                data: data.map(|d| *d),
            }),
            Err(err) => {
                let error_id = crate::error::new_error_id();
                tracing::warn!(tool = %entry.qualified, %error_id, error = %err, "forwarded call failed");
                // A gated tool is listed without its outputSchema; a forwarded one with it.
                let has_output_schema = matches!(event, Audit::Forwarded { gated: false, .. })
                    && entry.tool.get("outputSchema").is_some();
                CallOutcome::Done(gating_core::upstream_error_result(
                    &err.public_message(&error_id),
                    has_output_schema,
                ))
            }
        }
    }
}

/// The facts of one call of `entry` that a rule's or a grant's `when` sees.
pub(crate) fn call_facts<'a>(
    entry: &'a ToolEntry,
    args: &'a Value,
    caller: &'a str,
    groups: &'a [String],
) -> CallFacts<'a> {
    CallFacts {
        tool: &entry.qualified,
        module: &entry.module_name,
        args,
        caller,
        groups,
        hints: hints(entry).effective(),
        flow: None,
    }
}

impl Gateway {
    /// What the policy in force decides for a call of `entry` with `args` by `caller`, with
    /// its `flow` where the call is judged on it ([`Gateway::flow_for`], as a call's own
    /// classification reads it).
    pub(crate) fn decide(
        &self,
        entry: &ToolEntry,
        args: &Value,
        caller: &elicitation_store::Caller,
        groups: &[String],
        flow: Option<&gating_core::Flow>,
    ) -> gating_core::Decided {
        self.policy.decide(
            &CallFacts {
                flow,
                ..call_facts(entry, args, caller.subject_id(), groups)
            },
            hints(entry),
        )
    }
}

pub(crate) fn hints(entry: &ToolEntry) -> HintSource<'_> {
    match (&entry.annotations, entry.trusted) {
        (Some(annotations), true) => HintSource::Trusted(annotations),
        _ => HintSource::Untrusted,
    }
}

impl Gateway {
    /// One structured audit event (target `audit`), never with arguments or payloads; a
    /// hold or a refusal is counted (a forward is counted once the module answered).
    pub(crate) fn audit(
        &self,
        principal: &Principal,
        entry: &ToolEntry,
        event: Audit,
        elicitation: Option<ElicitationId>,
    ) {
        match event {
            Audit::Held => self
                .metrics
                .tool_call(&entry.module_name, &entry.qualified, "held", ""),
            Audit::Rejected(reason) => {
                self.metrics
                    .tool_call(&entry.module_name, &entry.qualified, "rejected", reason)
            }
            Audit::Forwarded { .. } | Audit::Shadowed => {}
            // The store recorded the use (with the grant's id) as it counted it.
            Audit::Granted(_) => return,
        }
        let credential = self.registry.credential_kind(entry);
        audit(principal, entry, event, elicitation, credential);
    }
}

/// One structured audit event (target `audit`). Never arguments or payloads.
pub(crate) fn audit(
    principal: &Principal,
    entry: &ToolEntry,
    event: Audit,
    elicitation: Option<ElicitationId>,
    credential: Option<&'static str>,
) {
    let subject = principal.caller.subject_id();
    let tenant = principal.caller.tenant_id();
    // Formatted only if the event is recorded.
    let elicitation_id = elicitation.as_ref().map(tracing::field::display);
    match event {
        Audit::Held => {
            tracing::info!(target: "audit", event = "tool_call_held", subject, tenant, tool = %entry.qualified, elicitation_id)
        }
        Audit::Forwarded { gated, shadowed } => {
            tracing::info!(target: "audit", event = "tool_call_forwarded", subject, tenant, tool = %entry.qualified, gated, shadowed, credential, elicitation_id)
        }
        Audit::Shadowed => {
            tracing::info!(target: "audit", event = "tool_call_shadowed", subject, tenant, tool = %entry.qualified)
        }
        Audit::Rejected(reason) => {
            tracing::info!(target: "audit", event = "tool_call_rejected", subject, tenant, tool = %entry.qualified, reason, elicitation_id)
        }
        Audit::Granted(_) => {}
    }
}

/// `entry`'s metric series, made in `metrics` on its first call and kept in the entry (a
/// call then counts without a lookup); `None` where the entry keeps something else. A series
/// of other metrics (an entry two gateways share) is not counted through by them.
fn series_of<'e>(
    metrics: &mcp_metrics::Metrics,
    entry: &'e ToolEntry,
) -> Option<&'e mcp_metrics::ToolSeries> {
    entry
        .gate_state
        .get_or_init(|| Arc::new(metrics.tool_series(&entry.module_name, &entry.qualified)))
        .downcast_ref()
}
