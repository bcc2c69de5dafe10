//! Where a module's form question waits for a person when the call's client cannot answer
//! it: the caller's elicitations in the store, answered on any surface (the REST API, the
//! page). It is a plain elicitation, never a confirmation: it binds no call, so it can never
//! let a gated call through.

use std::sync::Arc;
use std::time::Duration;

use elicitation_core::{
    CancelReason, ElicitationId, ElicitationSpec, ElicitationStatus, FormField,
};
use elicitation_store::{Caller, ElicitationStore};
use mcp_wire::tools::ElicitResult;
use serde_json::Value;

/// The choices a person is offered for a result held for them (`[content]` action `hold`):
/// this one releases it to the agent as it is…
pub const RELEASE: &str = "release to the agent";
/// …and this one withholds it.
pub const WITHHOLD: &str = "withhold";

/// Most results of one caller waiting for a person at once (more are withheld).
pub(crate) const MAX_HELD_PER_CALLER: usize = 8;

/// How long a module's question waits in the caller's inbox (the module's own call timeout
/// usually ends it sooner: the question is then withdrawn).
const INBOX_SECS: u16 = 600;
/// How long one store operation may take here.
const STORE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a module's form elicitation waits for a person when the client cannot answer it:
/// the caller's elicitations in the store.
pub struct Inbox {
    /// Where the question is stored.
    pub store: Arc<dyn ElicitationStore>,
    /// Whose question it is (who may answer it).
    pub caller: Caller,
}

impl Inbox {
    /// Stores the question, waits for a person's answer (at most ten minutes, or until the
    /// module stops waiting: the question is then withdrawn), and gives the module the
    /// `ElicitResult`.
    pub async fn ask(&self, params: Option<&Value>) -> Value {
        let cancel = ElicitResult::cancel().to_value();
        let Some(params) = params else { return cancel };
        let is_form = params
            .get("mode")
            .is_none_or(|mode| mode.as_str() == Some("form"));
        let message = params.get("message").and_then(Value::as_str);
        let field = params.get("requestedSchema").and_then(FormField::of);
        let (true, Some(message), Some(field)) = (is_form, message, field) else {
            return cancel;
        };
        // Attributed already (see `attributed`), as on every other path.
        let Ok(spec) = ElicitationSpec::new(message.to_owned(), field.spec.clone()) else {
            return cancel;
        };
        let created = tokio::time::timeout(
            STORE_TIMEOUT,
            self.store.create(
                &self.caller,
                spec,
                time::Duration::seconds(i64::from(INBOX_SECS)),
            ),
        )
        .await;
        let elicitation = match created {
            Ok(Ok(elicitation)) => elicitation,
            Ok(Err(e)) => {
                tracing::info!(error = %e, "a module's question could not be stored for a person");
                return cancel;
            }
            Err(_) => {
                tracing::warn!("the store did not take a module's question in time");
                return cancel;
            }
        };
        let id = elicitation.id;
        let mut withdraw = Withdraw::new(self.store.clone(), self.caller.clone(), id);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(u64::from(INBOX_SECS));
        let answered = self.store.wait_for_change(&self.caller, id, deadline).await;
        let Ok(answered) = answered else {
            return cancel;
        };
        if answered.status != ElicitationStatus::Pending {
            withdraw.keep();
        }
        match (answered.status, answered.cancel_reason) {
            (ElicitationStatus::Responded, _) => answered
                .response
                .as_ref()
                .and_then(|response| field.content(response))
                .map_or(cancel, |content| ElicitResult::accept(content).to_value()),
            (ElicitationStatus::Cancelled, Some(CancelReason::Declined)) => {
                ElicitResult::decline().to_value()
            }
            _ => cancel,
        }
    }
}

/// Withdraws a question a person has not answered when whoever asked stops waiting (a
/// module's question, a held result).
pub(crate) struct Withdraw {
    store: Arc<dyn ElicitationStore>,
    caller: Caller,
    id: Option<ElicitationId>,
}

impl Withdraw {
    /// Withdraws `caller`'s question `id` when dropped, unless [`Withdraw::keep`] was called.
    pub(crate) fn new(store: Arc<dyn ElicitationStore>, caller: Caller, id: ElicitationId) -> Self {
        Withdraw {
            store,
            caller,
            id: Some(id),
        }
    }

    /// Leaves the question as it is (it was answered).
    pub(crate) fn keep(&mut self) {
        self.id = None;
    }
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let (store, caller) = (self.store.clone(), self.caller.clone());
        tokio::spawn(async move {
            let withdrawn = store.cancel(&caller, id, CancelReason::CancelledByCaller);
            let _ = tokio::time::timeout(STORE_TIMEOUT, withdrawn).await;
        });
    }
}
