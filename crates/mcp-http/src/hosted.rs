//! Tasks the gateway holds itself — for a 2025-11-25 client that asked for a task, and a
//! 2026-07-28 client that declared the tasks extension (SEP-2848's way of holding a call;
//! the answer that makes one, and its shapes, are `held_task`'s): a gated call becomes a task that is
//! `working` while a person decides out of band (the approvals page, REST, Slack, email);
//! `input_required` once they approved (the client is to ask for the result, which runs the
//! call once, with a person's edits), `completed` once it ran, or after a decline (its
//! result the refusal with their note); `failed` when nobody answered in time; `cancelled` when the client withdrew it. Any
//! other answer the gateway gives a task-augmented call at once (a refusal, a module's
//! plain result) is a task already completed with that answer.
//!
//! A handle is sealed under the key every instance shares (`state::TaskClaims`): whose it is,
//! and the confirmation it waits on, which lives in the store, scoped to the caller, with the
//! call itself. So the task survives the client reconnecting and is served by any instance
//! on PostgreSQL; exactly one of them runs the call (the confirmation is redeemed once).

use std::sync::Arc;

use mcp_gate::{CallOutcome, Classified, Gateway};
use mcp_wire::tasks;
use mcp_wire::{CallToolParams, ResultBody};
use serde_json::Value;

use crate::PageBase;
use crate::ask;
use crate::held_task::{Status, at, rfc3339, task_value, with_related};
use crate::service::McpService;
use crate::state::{HostedTask, TaskClaims};
use elicitation_core::{CancelReason, ElicitationId, ElicitationStatus};
use mcp_auth::Principal;
use mcp_http_kit::error::McpError;

impl McpService {
    /// The caller's task `handle` of the gateway's own, or the same "unknown task" as any
    /// task that is not the caller's.
    fn hosted_claims(&self, principal: &Principal, handle: &str) -> Result<TaskClaims, McpError> {
        self.states
            .open_task(handle, self.config.clock.now())
            .filter(|c| {
                c.sub == principal.caller.subject_id()
                    && c.ten.as_deref() == principal.caller.tenant_id()
            })
            .ok_or_else(|| McpError::from(mcp_gate::tasks::unknown(handle)))
    }

    /// Where a held call's task is, by its confirmation.
    async fn held_status(
        &self,
        gateway: &Gateway,
        principal: &Principal,
        handle: &str,
        eid: ElicitationId,
    ) -> Result<Status, McpError> {
        let stored = gateway
            .store()
            .get(&principal.caller, eid)
            .await
            .map_err(|_| McpError::from(mcp_gate::tasks::unknown(handle)))?;
        let c = stored.elicitation;
        let now = self.config.clock.now();
        let updated = c.responded_at.or(c.cancelled_at).unwrap_or(c.created_at);
        let (status, message) = match (c.status_at(now), c.confirmation_state()) {
            (ElicitationStatus::Pending, _) => (
                "working",
                format!(
                    "Waiting for a person to answer confirmation {eid} (until {}).",
                    rfc3339(c.expires_at)
                ),
            ),
            (_, Some(true)) if c.consumed_at.is_some() => {
                ("completed", "Approved; the call ran, once.".to_owned())
            }
            (_, Some(true)) if now >= c.expires_at => (
                "failed",
                "Approved, but its result was not asked for before the confirmation expired: the call was not run.".to_owned(),
            ),
            // Not terminal yet (a terminal status never changes, and this one still may: it
            // fails at expiry): the client is to ask for the result, which runs the call.
            (_, Some(true)) => (
                "input_required",
                "Approved: ask for this task's result (tasks/result) now; that runs the call, once, and answers with its result.".to_owned(),
            ),
            (_, Some(false)) => (
                "completed",
                "Declined by a person: the call was not run (its result says why).".to_owned(),
            ),
            (ElicitationStatus::Cancelled, _)
                if c.cancel_reason == Some(CancelReason::CancelledByCaller) =>
            {
                (
                    "cancelled",
                    "Withdrawn before a person answered.".to_owned(),
                )
            }
            (ElicitationStatus::Cancelled, _) => (
                "completed",
                "Dismissed by a person: the call was not run.".to_owned(),
            ),
            (ElicitationStatus::Expired, _) => (
                "failed",
                format!(
                    "Nobody answered before {}: the call was not run.",
                    rfc3339(c.expires_at)
                ),
            ),
            _ => (
                "failed",
                "The confirmation failed: the call was not run.".to_owned(),
            ),
        };
        Ok(Status {
            status,
            message,
            updated,
        })
    }

    /// `tasks/get`, `tasks/result` or `tasks/cancel` about a task of the gateway's own.
    pub(crate) async fn hosted_task(
        &self,
        gateway: &Arc<Gateway>,
        principal: &Arc<Principal>,
        method: &str,
        handle: &str,
        page: &PageBase,
    ) -> Result<ResultBody, McpError> {
        let claims = self.hosted_claims(principal, handle)?;
        let eid = match &claims.task {
            HostedTask::Answered { result } => {
                return match method {
                    "tasks/result" => Ok(with_related(result.clone(), handle).into()),
                    "tasks/cancel" => Err(ended(handle)),
                    _ => Ok(task_value(
                        handle,
                        &claims,
                        Status {
                            status: "completed",
                            message: "Answered at once by the gateway.".into(),
                            updated: at(claims.at),
                        },
                    )
                    .into()),
                };
            }
            HostedTask::Held { eid } => eid
                .parse::<ElicitationId>()
                .map_err(|_| McpError::from(mcp_gate::tasks::unknown(handle)))?,
        };
        match method {
            "tasks/get" => {
                let status = self.held_status(gateway, principal, handle, eid).await?;
                Ok(task_value(handle, &claims, status).into())
            }
            "tasks/cancel" => {
                let status = self.held_status(gateway, principal, handle, eid).await?;
                if status.status != "working" {
                    return Err(ended(handle));
                }
                let cancelled = gateway
                    .store()
                    .cancel(&principal.caller, eid, CancelReason::CancelledByCaller)
                    .await;
                if cancelled.is_err() {
                    // Answered meanwhile: it ends as answered.
                    return Err(ended(handle));
                }
                let status = self.held_status(gateway, principal, handle, eid).await?;
                Ok(task_value(handle, &claims, status).into())
            }
            _ => {
                self.held_result(gateway, principal, handle, eid, page)
                    .await
            }
        }
    }

    /// A held call's result: once a person answered (waiting until they do, or until the
    /// confirmation expires), the call goes through the gate naming its confirmation, so it
    /// runs once if approved (a module task it makes is waited on too), and is refused as
    /// any call would be otherwise.
    async fn held_result(
        &self,
        gateway: &Arc<Gateway>,
        principal: &Arc<Principal>,
        handle: &str,
        eid: ElicitationId,
        page: &PageBase,
    ) -> Result<ResultBody, McpError> {
        let store = gateway.store();
        let stored = store
            .get(&principal.caller, eid)
            .await
            .map_err(|_| McpError::from(mcp_gate::tasks::unknown(handle)))?;
        let mut current = stored.elicitation;
        if current.status_at(self.config.clock.now()) == ElicitationStatus::Pending {
            // A wait for a person holds one of the caller's long-lived slots.
            let Some(_slot) = self.streams.try_open(&principal.caller) else {
                // An error result of this request, not the task's: the task goes on.
                let refused = mcp_wire::tools::text_result(
                    &format!(
                        "This caller already has {} requests waiting for a person; this task goes on: ask for its result again later.",
                        self.streams.max_per_caller()
                    ),
                    None,
                    true,
                );
                return Ok(with_related(refused, handle).into());
            };
            let left = current.expires_at - self.config.clock.now();
            let left = std::time::Duration::try_from(left).unwrap_or_default();
            current = store
                .wait_for_change(&principal.caller, eid, tokio::time::Instant::now() + left)
                .await
                .map_err(McpError::from)?;
        }
        // Run once: its result was the answer to the request that ran it.
        if current.confirmation_state() == Some(true) && current.consumed_at.is_some() {
            let ran = mcp_wire::tools::text_result(
                "This task's call ran once already; its result was the answer to the request that ran it. It does not run again.",
                None,
                true,
            );
            return Ok(with_related(ran, handle).into());
        }
        let Some(call) = stored.call else {
            return Err(McpError::from(mcp_gate::tasks::unknown(handle)));
        };
        let params = held_params(call, eid)?;
        let classified = match gateway.classify(principal, params).await? {
            // Settled by its confirmation alone: used, expired or changed, it is refused,
            // never asked about anew nor covered by a grant.
            Classified::Gated(mut call) => {
                call.only_named = true;
                Classified::Gated(call)
            }
            // No longer gated (the policy changed): it would run on every ask.
            Classified::Forward(..) | Classified::Shadow(..) | Classified::PermissionPrompt(..) => {
                let refused = mcp_wire::tools::text_result(
                    "The gateway's policy changed since this call was held: it no longer waits for a person. It was not run; call the tool anew.",
                    None,
                    true,
                );
                return Ok(with_related(refused, handle).into());
            }
            refused => refused,
        };
        // Run apart from this request: a client that goes away does not cut the call short.
        let run = {
            let (gateway, principal) = (gateway.clone(), principal.clone());
            tokio::spawn(async move {
                let outcome = Box::pin(gateway.run(&principal, classified, None)).await;
                match outcome {
                    CallOutcome::Forwarded(raw) => match tasks::created_task(&raw) {
                        // The module made a task of it: its result is this task's.
                        Some(made) => {
                            let params = tasks::task_params(&made.task_id);
                            Box::pin(gateway.task_request(
                                &principal,
                                ("tasks/result", false),
                                &params,
                                None,
                            ))
                            .await
                            .map(Ok)
                            .map_err(McpError::from)
                        }
                        None => Ok(Ok(ResultBody::Raw(raw))),
                    },
                    other => Ok(Err(other)),
                }
            })
        };
        let result = match run.await.map_err(|e| McpError::Internal(e.to_string()))?? {
            Ok(result) => result,
            Err(outcome) => ask::reply(outcome, page)?,
        };
        Ok(with_related(result.for_client(false).into_value(), handle).into())
    }
}

/// The call a held call's task runs: the stored tool and arguments, naming its
/// confirmation, asked as a task again (so a tool that runs only as one runs).
fn held_params(
    call: elicitation_store::HeldCall,
    eid: ElicitationId,
) -> Result<CallToolParams, McpError> {
    let arguments = match call.arguments {
        Value::Object(map) => Some(map),
        _ => None,
    };
    let params: CallToolParams = serde_json::from_value(serde_json::json!({
        "name": call.tool,
        "arguments": arguments,
    }))
    .map_err(|e| McpError::Internal(e.to_string()))?;
    Ok(params
        .naming_confirmation(&eid.to_string())
        .with_task(serde_json::json!({})))
}

/// Cancelling a task that has ended (`-32602`, as the spec says).
fn ended(handle: &str) -> McpError {
    McpError::InvalidParams(format!(
        "task {:?} has ended; it cannot be cancelled",
        gating_core::visible(handle)
    ))
}

impl McpService {
    /// `tasks/get`, `tasks/update` or `tasks/cancel` of the 2026-07-28 tasks extension, about
    /// a task of the gateway's own: `tasks/get` answers the task with its payload (the
    /// result once completed: an approved call runs, once, when it is first read so; the
    /// error once failed); `tasks/cancel` withdraws it; `tasks/update` is acknowledged (such
    /// a task asks for no input).
    pub(crate) async fn modern_hosted_task(
        &self,
        gateway: &Arc<Gateway>,
        principal: &Arc<Principal>,
        method: &str,
        handle: &str,
        page: &PageBase,
    ) -> Result<ResultBody, McpError> {
        let claims = self.hosted_claims(principal, handle)?;
        let empty = || Ok(Value::Object(serde_json::Map::new()).into());
        match method {
            "tasks/update" => return empty(),
            "tasks/cancel" => {
                self.hosted_task(gateway, principal, method, handle, page)
                    .await?;
                return empty();
            }
            _ => {}
        }
        let task = self
            .hosted_task(gateway, principal, "tasks/get", handle, page)
            .await?
            .for_client(false)
            .into_value();
        let mut task = tasks::modern_task(task);
        let status = task["status"].as_str().unwrap_or_default().to_owned();
        match status.as_str() {
            // Approved (input_required at 2025-11-25, which has no place here): the call runs
            // now and the task completes with its result.
            "completed" | "input_required" => {
                task["status"] = Value::String("completed".into());
                let result = match &claims.task {
                    HostedTask::Answered { result } => result.clone(),
                    HostedTask::Held { .. } => self
                        .hosted_task(gateway, principal, "tasks/result", handle, page)
                        .await?
                        .for_client(true)
                        .into_value(),
                };
                task["result"] = result;
            }
            "failed" => {
                task["error"] = serde_json::json!({
                    "code": mcp_wire::codes::INTERNAL_ERROR,
                    "message": task["statusMessage"].clone(),
                });
            }
            _ => {}
        }
        Ok(task.into())
    }
}
