//! The sweeper: moves overdue pending elicitations to `expired` on a timer, so expiry is
//! recorded (and audited) even when nobody touches the elicitation again; erases finished
//! elicitations older than the retention period; and reads how many wait (for the
//! operator's gauge).

use std::sync::Arc;
use std::time::Duration;

use crate::{Clock, ElicitationStore, ErasedElicitation, ExpiredElicitation};

/// What one sweep did.
#[derive(Debug, Default)]
pub struct Swept {
    /// Pending elicitations that were overdue, now `expired`.
    pub expired: Vec<ExpiredElicitation>,
    /// Finished elicitations older than the retention period, now erased.
    pub erased: Vec<ErasedElicitation>,
}

/// How often to sweep, and how long finished elicitations are kept.
#[derive(Debug, Clone, Copy)]
pub struct SweepOptions {
    /// Time between sweeps.
    pub every: Duration,
    /// Finished elicitations older than this are erased (`None`: kept for ever).
    pub retention: Option<Duration>,
}

/// One sweep at `clock`'s now: expire what is due, erase what retention lets go (in batches
/// until none is left), read the pending count.
pub async fn sweep_once(
    store: &dyn ElicitationStore,
    clock: &dyn Clock,
    retention: Option<Duration>,
) -> Swept {
    let now = clock.now();
    let mut swept = Swept::default();
    match store.expire_due(now).await {
        Ok(expired) => {
            if !expired.is_empty() {
                tracing::info!(count = expired.len(), "expired overdue elicitations");
            }
            swept.expired = expired;
        }
        Err(e) => tracing::warn!(error = %e, "the expiry sweep failed; retrying on the next tick"),
    }
    if let Some(retention) = retention {
        let before = now - time::Duration::try_from(retention).unwrap_or(time::Duration::MAX);
        loop {
            match store.erase_finished(before).await {
                Ok(erased) if erased.is_empty() => break,
                Ok(erased) => {
                    tracing::info!(
                        count = erased.len(),
                        "erased finished elicitations past the retention period (their audit trail stays)"
                    );
                    swept.erased.extend(erased);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the retention sweep failed; retrying on the next tick");
                    break;
                }
            }
        }
    }
    if let Err(e) = store.pending_count().await {
        tracing::debug!(error = %e, "the pending count could not be read");
    }
    swept
}

/// Sweeps every `options.every` until `stop` resolves, handing what each sweep did to
/// `on_swept` (to remove what was kept for them, such as uploads).
pub async fn sweep(
    store: Arc<dyn ElicitationStore>,
    clock: Arc<dyn Clock>,
    options: SweepOptions,
    on_swept: impl Fn(Swept) + Send,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut ticks = tokio::time::interval(options.every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                let swept = sweep_once(&*store, &*clock, options.retention).await;
                if !swept.expired.is_empty() || !swept.erased.is_empty() {
                    on_swept(swept);
                }
            }
            () = &mut stop => return,
        }
    }
}
