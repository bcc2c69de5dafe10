//! Waiting for an elicitation to leave `pending`, shared by both stores: subscribe to the
//! store's change feed first, then read, then sleep until a change of this id, the
//! elicitation's expiry, or the deadline.

use std::future::Future;

use elicitation_core::{Elicitation, ElicitationId, ElicitationStatus};
use time::OffsetDateTime;
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::StoreError;

/// Waits on `changes` for `id`, re-reading with `read` after each wake-up.
/// `recheck` bounds each sleep, so a missed notification delays but never loses a change.
pub(crate) async fn wait_for_change<R, F>(
    changes: &broadcast::Sender<ElicitationId>,
    id: ElicitationId,
    deadline: Instant,
    recheck: Option<std::time::Duration>,
    now: impl Fn() -> OffsetDateTime,
    read: R,
) -> Result<Elicitation, StoreError>
where
    R: Fn() -> F,
    F: Future<Output = Result<Elicitation, StoreError>>,
{
    let mut feed = changes.subscribe();
    loop {
        let current = read().await?;
        let started = Instant::now();
        if current.status != ElicitationStatus::Pending || started >= deadline {
            return Ok(current);
        }
        let until_expiry = (current.expires_at - now()).max(time::Duration::ZERO);
        let mut wake =
            deadline.min(started + std::time::Duration::try_from(until_expiry).unwrap_or_default());
        if let Some(recheck) = recheck {
            wake = wake.min(started + recheck);
        }
        loop {
            tokio::select! {
                changed = feed.recv() => match changed {
                    Ok(changed) if changed == id => break,
                    Ok(_) => continue,
                    // Missed some ids: read again to be sure.
                    Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Err(broadcast::error::RecvError::Closed) => {
                        tokio::time::sleep_until(wake).await;
                        break;
                    }
                },
                () = tokio::time::sleep_until(wake) => break,
            }
        }
    }
}
