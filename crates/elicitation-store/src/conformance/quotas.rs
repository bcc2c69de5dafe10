//! Quota counters: exact under contention across instances, per window, in units.

use super::*;
use crate::{QuotaTake, QuotaWindow};

/// Sixty-four takes at once, half on each instance, against a limit of 10: exactly 10 are
/// counted. A refused take counts nothing; a window of its own starts afresh; cost units
/// count as their amount; a take given back frees its room.
// Long: one counter raced, then each other rule of counting, in turn.
pub(crate) async fn a_quota_grants_exactly_its_limit_across_instances(
    make: impl AsyncFn(Setup) -> Harness,
) {
    let h = make(Setup::default()).await;
    let now = h.clock_now();
    let minute = QuotaWindow::Minute.around(now);
    let mut tasks = Vec::new();
    for i in 0..64 {
        let store = if i % 2 == 0 {
            h.store.clone()
        } else {
            h.twin.clone()
        };
        tasks.push(tokio::spawn(async move {
            store.take_quota("fs__*|alice@acme", minute, 1, 10).await
        }));
    }
    let mut taken = 0;
    for task in tasks {
        if let QuotaTake::Taken { .. } = task.await.unwrap().unwrap() {
            taken += 1;
        }
    }
    assert_eq!(taken, 10, "exactly the limit");
    assert_eq!(
        h.store
            .quota_used("fs__*|alice@acme", minute.0)
            .await
            .unwrap(),
        10
    );
    assert!(matches!(
        h.twin
            .take_quota("fs__*|alice@acme", minute, 1, 10)
            .await
            .unwrap(),
        QuotaTake::Over { .. }
    ));
    assert_eq!(
        h.twin
            .quota_used("fs__*|alice@acme", minute.0)
            .await
            .unwrap(),
        10
    );
    // Another caller's counter, and the next minute, start afresh.
    assert_eq!(
        h.store
            .take_quota("fs__*|bob@acme", minute, 1, 10)
            .await
            .unwrap(),
        QuotaTake::Taken { used: 1 }
    );
    let next = QuotaWindow::Minute.around(minute.1);
    assert_eq!(
        h.store
            .take_quota("fs__*|alice@acme", next, 1, 10)
            .await
            .unwrap(),
        QuotaTake::Taken { used: 1 }
    );
    // One given back frees one.
    h.twin
        .give_back_quota("fs__*|alice@acme", minute.0, 1)
        .await
        .unwrap();
    assert_eq!(
        h.store
            .take_quota("fs__*|alice@acme", minute, 1, 10)
            .await
            .unwrap(),
        QuotaTake::Taken { used: 10 }
    );
    // Cost units: three calls of 3 fit under 10, a fourth does not; one larger than the
    // limit never fits.
    let day = QuotaWindow::Day.around(now);
    for used in [3, 6, 9] {
        assert_eq!(
            h.store.take_quota("budget|all", day, 3, 10).await.unwrap(),
            QuotaTake::Taken { used }
        );
    }
    assert!(matches!(
        h.twin.take_quota("budget|all", day, 3, 10).await.unwrap(),
        QuotaTake::Over { .. }
    ));
    assert!(matches!(
        h.twin.take_quota("fresh|all", day, 11, 10).await.unwrap(),
        QuotaTake::Over { .. }
    ));
    assert_eq!(h.twin.quota_used("fresh|all", day.0).await.unwrap(), 0);
    // Bad input is refused saying why.
    assert!(matches!(
        h.store.take_quota("", day, 1, 10).await,
        Err(StoreError::AnswerRefused(_))
    ));
    assert!(matches!(
        h.store.take_quota("k", day, 0, 10).await,
        Err(StoreError::AnswerRefused(_))
    ));
}
