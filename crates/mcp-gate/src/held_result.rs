//! A result held for a person (`[content]` action `hold`): what a module answered waits,
//! in this request, until a person releases it to the agent or withholds it. The question is
//! a plain elicitation in the caller's inbox (answered on the approvals page, through the
//! REST API, or announced by the notifiers): it binds no call, so answering it can never let
//! a call through, and answering it needs the `elicitations:respond` scope an agent's token
//! lacks. The result itself is kept nowhere but in this request's memory.

use std::time::Duration;

use elicitation_core::{ElicitationSpec, ElicitationStatus, ResponseSpec};
use gating_core::Findings;
use mcp_auth::Principal;

use crate::Gateway;

/// Most characters of what names a held result shown in the question.
const MAX_SOURCE_SHOWN: usize = 96;
use crate::inbox::{MAX_HELD_PER_CALLER, RELEASE, WITHHOLD, Withdraw};

impl Gateway {
    /// Puts a result of `source` that holds what `findings` say must be released to a
    /// person, and waits for them (at most the content policy's `hold_for`): `Ok` when they
    /// released it, else what the agent is told instead.
    pub(crate) async fn released(
        &self,
        principal: &Principal,
        source: &str,
        findings: &Findings,
    ) -> Result<(), String> {
        let kinds = findings.holding_kinds();
        // What names the result may be the agent's own words (a resource's URI): shown
        // escaped and cut short, so it cannot make the question say more than it does.
        let mut shown = gating_core::visible(source);
        if shown.chars().count() > MAX_SOURCE_SHOWN {
            shown = shown.chars().take(MAX_SOURCE_SHOWN).collect::<String>() + "…";
        }
        let Some(inbox) = self.inbox(principal) else {
            return Err(format!(
                "The gateway withheld this result of `{shown}`: it held {kinds}, which a person must release, and no person can be asked for an unauthenticated caller."
            ));
        };
        // A caller holds at most a few results waiting at once: more are withheld, not
        // piled onto the person.
        let Some(_slot) = self.held_results.try_open(&inbox.caller) else {
            return Err(format!(
                "The gateway withheld this result of `{shown}`: it held {kinds}, and {MAX_HELD_PER_CALLER} results of this caller already wait for a person."
            ));
        };
        let hold_for = self.policy.content().hold_for;
        let message = format!(
            "A result of `{shown}` holds {kinds}. Release it to the agent as it is, or withhold it? (Nothing of it is kept; withheld, the agent is told only that a person withheld it.)"
        );
        let spec = ElicitationSpec::new(
            message,
            ResponseSpec::SingleChoice {
                options: vec![RELEASE.to_owned(), WITHHOLD.to_owned()],
            },
        )
        .map_err(|e| {
            format!(
                "The gateway withheld this result of `{shown}`: it could not ask a person ({e})."
            )
        })?;
        let ttl = time::Duration::try_from(hold_for).unwrap_or(time::Duration::HOUR);
        let asked = match crate::timed(inbox.store.create(&inbox.caller, spec, ttl)).await {
            Ok(asked) => asked,
            Err(e) => {
                tracing::warn!(tool = %source, error = %e, "a held result could not be put to a person; withheld");
                return Err(format!(
                    "The gateway withheld this result of `{shown}`: it held {kinds}, which a person must release, and the question could not be stored ({e})."
                ));
            }
        };
        let id = asked.id;
        tracing::info!(target: "audit", event = "result_held", subject = inbox.caller.subject_id(), tenant = inbox.caller.tenant_id(), tool = %source, kinds = %kinds, elicitation_id = %id, "a result waits for a person to release it");
        // Withdrawn if this request ends first (the client went away) or the wait ends.
        let mut withdraw = Withdraw::new(inbox.store.clone(), inbox.caller.clone(), id);
        let deadline = tokio::time::Instant::now() + hold_for;
        let answered = answer_by(&inbox, id, deadline).await;
        let released = match &answered {
            Ok(e) => {
                withdraw.keep();
                e.status == ElicitationStatus::Responded
                    && e.response
                        .as_ref()
                        .and_then(|r| r.get("choice"))
                        .and_then(serde_json::Value::as_str)
                        == Some(RELEASE)
            }
            Err(_) => false,
        };
        let outcome = if released { "released" } else { "withheld" };
        tracing::info!(target: "audit", event = "result_answered", subject = inbox.caller.subject_id(), tenant = inbox.caller.tenant_id(), tool = %source, outcome, elicitation_id = %id, "a held result was released or withheld");
        self.metrics.held_result(outcome);
        if released {
            return Ok(());
        }
        Err(match answered {
            Ok(e)
                if e.status == ElicitationStatus::Responded
                    || e.status == ElicitationStatus::Cancelled =>
            {
                format!(
                    "A person withheld this result of `{shown}` (it held {kinds}): the agent is not shown it."
                )
            }
            Ok(_) | Err(None) => format!(
                "No one released this result of `{shown}` (it held {kinds}) within {}; it was withheld.",
                minutes(hold_for)
            ),
            Err(Some(e)) => format!(
                "The gateway withheld this result of `{shown}`: it could not read whether a person released it ({e})."
            ),
        })
    }
}

/// `d` as a person reads it (`10 minutes`, `90 seconds`).
fn minutes(d: Duration) -> String {
    let secs = d.as_secs();
    if secs.is_multiple_of(60) && secs >= 60 {
        format!("{} minute{}", secs / 60, if secs == 60 { "" } else { "s" })
    } else {
        format!("{secs} second{}", if secs == 1 { "" } else { "s" })
    }
}

/// The question `id` in `inbox` once it is more than pending (`Err(None)`: still pending at
/// `deadline`; `Err(Some(_))`: the store failed). The wait is bounded by its own end, not by
/// the store's operation limit.
async fn answer_by(
    inbox: &crate::Inbox,
    id: elicitation_core::ElicitationId,
    deadline: tokio::time::Instant,
) -> Result<elicitation_core::Elicitation, Option<elicitation_store::StoreError>> {
    loop {
        let now = crate::timed_until(
            deadline + crate::STORE_TIMEOUT,
            inbox.store.wait_for_change(&inbox.caller, id, deadline),
        )
        .await;
        match now {
            Ok(e) if e.status != ElicitationStatus::Pending => return Ok(e),
            Ok(_) if tokio::time::Instant::now() >= deadline => return Err(None),
            Ok(_) => {}
            Err(e) => return Err(Some(e)),
        }
    }
}
