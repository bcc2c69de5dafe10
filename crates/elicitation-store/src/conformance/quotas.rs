//! Quota counters: exact under contention across instances, per window, in units.

use super::*;
use crate::{QuotaTake, QuotaWindow};

fn taken(take: QuotaTake) -> Option<i64> {
    match take {
        QuotaTake::Taken { used, .. } => Some(used),
        QuotaTake::Over { .. } => None,
    }
}

/// Sixty-four takes at once, half on each instance, against a limit of 10: exactly 10 are
/// counted. A refused take counts nothing and says when the window ends; another key starts
/// afresh; cost units count as their amount; a take given back frees its room; the sweep
/// forgets a window that ended.
// Long: one counter raced, then each other rule of counting, in turn.
pub(crate) async fn a_quota_grants_exactly_its_limit_across_instances(
    make: impl AsyncFn(Setup) -> Harness,
) {
    let h = make(Setup::default()).await;
    let minute = QuotaWindow::Minute;
    let mut tasks = Vec::new();
    for i in 0..64 {
        let store = if i % 2 == 0 {
            h.store.clone()
        } else {
            h.twin.clone()
        };
        tasks.push(tokio::spawn(async move {
            store.take_quota("q:alice", QuotaWindow::Day, 1, 10).await
        }));
    }
    let mut counted = Vec::new();
    for task in tasks {
        if let QuotaTake::Taken { used, window_start } = task.await.unwrap().unwrap() {
            counted.push((used, window_start));
        }
    }
    assert_eq!(counted.len(), 10, "exactly the limit");
    let mut used: Vec<i64> = counted.iter().map(|(u, _)| *u).collect();
    used.sort_unstable();
    assert_eq!(
        used,
        (1..=10).collect::<Vec<_>>(),
        "each take saw the one before"
    );
    let day_start = counted[0].1;
    assert_eq!(
        h.store
            .quota_used("q:alice", QuotaWindow::Day)
            .await
            .unwrap(),
        10
    );
    match h
        .twin
        .take_quota("q:alice", QuotaWindow::Day, 1, 10)
        .await
        .unwrap()
    {
        QuotaTake::Over { until } => {
            assert!(until > day_start && until - day_start == time::Duration::DAY);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        h.twin
            .quota_used("q:alice", QuotaWindow::Day)
            .await
            .unwrap(),
        10
    );
    // Another key starts afresh.
    assert_eq!(
        taken(
            h.store
                .take_quota("q:bob", QuotaWindow::Day, 1, 10)
                .await
                .unwrap()
        ),
        Some(1)
    );
    // One given back frees one.
    h.twin
        .give_back_quota("q:alice", day_start, 1)
        .await
        .unwrap();
    assert_eq!(
        taken(
            h.store
                .take_quota("q:alice", QuotaWindow::Day, 1, 10)
                .await
                .unwrap()
        ),
        Some(10)
    );
    // Cost units: three calls of 3 fit under 10, a fourth does not; one larger than the
    // limit never fits, and a refusal leaves nothing behind.
    for used in [3, 6, 9] {
        assert_eq!(
            taken(h.store.take_quota("q:budget", minute, 3, 10).await.unwrap()),
            Some(used)
        );
    }
    assert_eq!(
        taken(h.twin.take_quota("q:budget", minute, 3, 10).await.unwrap()),
        None
    );
    assert_eq!(
        taken(h.twin.take_quota("q:fresh", minute, 11, 10).await.unwrap()),
        None
    );
    assert_eq!(h.twin.quota_used("q:fresh", minute).await.unwrap(), 0);
    // Bad input is refused saying why.
    assert!(matches!(
        h.store.take_quota("", minute, 1, 10).await,
        Err(StoreError::AnswerRefused(_))
    ));
    assert!(matches!(
        h.store.take_quota("k", minute, 0, 10).await,
        Err(StoreError::AnswerRefused(_))
    ));
}
