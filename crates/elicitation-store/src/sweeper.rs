//! The sweeper: moves overdue pending elicitations to `expired` on a timer, so expiry is
//! recorded (and audited) even when nobody touches the elicitation again.

use std::sync::Arc;
use std::time::Duration;

use crate::{Clock, ElicitationStore, ExpiredElicitation};

/// Runs `store.expire_due` every `every` until `stop` resolves, handing what each sweep
/// expired to `on_expired` (to remove what was kept for them, such as uploads).
pub async fn sweep(
    store: Arc<dyn ElicitationStore>,
    clock: Arc<dyn Clock>,
    every: Duration,
    on_expired: impl Fn(Vec<ExpiredElicitation>) + Send,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => match store.expire_due(clock.now()).await {
                Ok(expired) if !expired.is_empty() => {
                    tracing::info!(count = expired.len(), "expired overdue elicitations");
                    on_expired(expired);
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "the expiry sweep failed; retrying on the next tick"),
            },
            () = &mut stop => return,
        }
    }
}
