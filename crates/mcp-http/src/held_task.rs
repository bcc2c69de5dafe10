//! A call held for a person, answered as a task (`hosted`): the task's handle, its shape in
//! either era, and the answer to a task-augmented call once the gate decided. No IO: the
//! task's state is read by `hosted`.

use mcp_gate::CallOutcome;
use mcp_wire::ResultBody;
use mcp_wire::tasks;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::PageBase;
use crate::reply::reply;
use crate::state::{HostedTask, RequestStates, TASK_PREFIX, TaskClaims};
use mcp_auth::Principal;
use mcp_http_kit::error::McpError;

/// How often a client is asked to poll a held call's task.
pub(crate) const POLL_MS: u64 = 2000;
/// How long a task is answered about after its confirmation expired (to say it failed), and
/// a task answered at once.
pub(crate) const AFTERLIFE_SECS: i64 = 3600;
/// The longest handle handed out: an answer too long for one is given as it is.
pub(crate) const MAX_HANDLE: usize = 16 * 1024;

/// Whether `handle` names a task the gateway holds itself.
pub(crate) fn is_hosted(handle: &str) -> bool {
    handle.starts_with(TASK_PREFIX)
}

pub(crate) fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

pub(crate) fn at(seconds: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(seconds).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// What a task says about itself now.
pub(crate) struct Status {
    pub(crate) status: &'static str,
    pub(crate) message: String,
    pub(crate) updated: OffsetDateTime,
}

/// The answer to a task-augmented call once the gate decided (`outcome`): a task the module
/// created passes on; a call held for a person becomes a task of the gateway's; any other
/// answer becomes a task completed with it (or, too long for a handle, is given as it is).
pub(crate) fn as_task(
    states: &RequestStates,
    now: OffsetDateTime,
    principal: &Principal,
    outcome: CallOutcome,
    page: &PageBase,
) -> Result<ResultBody, McpError> {
    let claims = |exp: OffsetDateTime, task: HostedTask| TaskClaims {
        sub: principal.caller.subject_id().to_owned(),
        ten: principal.caller.tenant_id().map(str::to_owned),
        at: now.unix_timestamp(),
        exp: exp.unix_timestamp(),
        task,
    };
    let (sealed, status, message, meta, given, claims) = match outcome {
        CallOutcome::Forwarded(raw) if tasks::created_task(&raw).is_some() => {
            return Ok(ResultBody::Raw(raw));
        }
        CallOutcome::NeedsConfirmation(pending) => {
            let confirmation = pending.confirmation.clone();
            let held = reply(CallOutcome::NeedsConfirmation(pending), page)?
                .for_client(false)
                .into_value();
            let claims = claims(
                confirmation.expires_at + time::Duration::seconds(AFTERLIFE_SECS),
                HostedTask::Held {
                    eid: confirmation.id.to_string(),
                },
            );
            let message = held["structuredContent"]["next_step"]
                    .as_str()
                    .map_or_else(String::new, |step| {
                        format!("Waiting for a person to answer. {step} (This task completes once they have; its result is the call's.)")
                    });
            let meta = held.get("_meta").cloned();
            (
                states.seal_task(&claims),
                "working",
                message,
                meta,
                held,
                claims,
            )
        }
        other => {
            let answer = reply(other, page)?.for_client(false).into_value();
            let claims = claims(
                now + time::Duration::seconds(AFTERLIFE_SECS),
                HostedTask::Answered {
                    result: answer.clone(),
                },
            );
            let message = "Answered at once by the gateway; its result is the answer.".to_owned();
            (
                states.seal_task(&claims),
                "completed",
                message,
                None,
                answer,
                claims,
            )
        }
    };
    let Some(handle) = sealed.filter(|h| h.len() <= MAX_HANDLE) else {
        return Ok(given.into());
    };
    let task = task_value(
        &handle,
        &claims,
        Status {
            status,
            message,
            updated: now,
        },
    );
    Ok(tasks::created_result(task, meta).into())
}

/// The `Task` of a task of the gateway's own.
pub(crate) fn task_value(handle: &str, claims: &TaskClaims, status: Status) -> Value {
    let ttl = (claims.exp - claims.at).max(0) * 1000;
    tasks::task_object(
        handle,
        status.status,
        &status.message,
        (&rfc3339(at(claims.at)), &rfc3339(status.updated)),
        u64::try_from(ttl).unwrap_or_default(),
        POLL_MS,
    )
}

/// A task's result tied to it (`_meta` related-task).
pub(crate) fn with_related(mut result: Value, handle: &str) -> Value {
    if let Value::Object(map) = &mut result {
        let meta = map
            .entry("_meta")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let (Value::Object(meta), Value::Object(related)) = (meta, tasks::related_meta(handle)) {
            meta.extend(related);
        }
    }
    result
}

/// A call held for a person, for a 2026-07-28 client that declared the tasks extension and
/// is not asked in its own client: a task of the extension's shape (SEP-2848's way), the same
/// task as a 2025-11-25 session's.
pub(crate) fn modern_held(
    states: &RequestStates,
    now: OffsetDateTime,
    principal: &Principal,
    pending: Box<mcp_gate::PendingConfirmation>,
    page: &PageBase,
) -> Result<ResultBody, McpError> {
    let created = as_task(
        states,
        now,
        principal,
        CallOutcome::NeedsConfirmation(pending),
        page,
    )?
    .for_client(false)
    .into_value();
    Ok(tasks::modern_created(created).into())
}
