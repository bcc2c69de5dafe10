//! The outcomes of forwarded gated calls (`tool_call_completed`), written in groups. A
//! completion is recorded after the caller has its answer, so nothing waits on it but its
//! own record: each is handed to one writer task, which writes every completion waiting
//! when it is free in one transaction per caller (one multi-row `INSERT` under that
//! caller's row-level security scope), then tells each its outcome. Under load a confirmed
//! call then costs one round trip of its own (the redemption) and a share of a group's;
//! alone it costs what it did. A completion waits for its group's write, and a failed
//! write is each one's error (logged by the gate, as before); callers' transactions run
//! side by side, so one caller's slow write does not hold up another's. What the gate
//! gives up waiting for (its store timeout, a database that does not answer) is logged as
//! not recorded; completions still queued when the process ends are not written (as a
//! record spawned but not run before was not).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration as StdDuration;

use deadpool_postgres::Pool;
use time::OffsetDateTime;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::{scoped_on, sql};
use crate::{Caller, StoreError};

/// Completions waiting for the writer at most (beyond, recording one waits for room).
const QUEUE: usize = 4096;
/// Most completions taken at once.
const GROUP: usize = 256;
/// Most callers' transactions of one group at once.
const PARALLEL: usize = 8;

/// One completion to record.
struct Completion {
    caller: Caller,
    at: OffsetDateTime,
    elicitation: Option<Uuid>,
    tool: String,
    detail: String,
    done: oneshot::Sender<Result<(), String>>,
}

/// The writer's queue.
pub(super) struct Completions {
    queue: mpsc::Sender<Completion>,
}

impl Completions {
    /// Starts the writer on `pool` (it ends when this is dropped).
    pub(super) fn start(
        pool: Pool,
        limit: StdDuration,
        round_trips: Arc<AtomicU64>,
    ) -> Completions {
        let (queue, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write_groups(pool, limit, round_trips, rx));
        Completions { queue }
    }

    /// Records one completion; returns once its group is written (or failed).
    pub(super) async fn record(
        &self,
        caller: &Caller,
        at: OffsetDateTime,
        elicitation: Option<Uuid>,
        tool: &str,
        detail: String,
    ) -> Result<(), StoreError> {
        let (done, outcome) = oneshot::channel();
        let completion = Completion {
            caller: caller.clone(),
            at,
            elicitation,
            tool: tool.to_owned(),
            detail,
            done,
        };
        let gone = || StoreError::Unavailable("the completion writer has stopped".into());
        self.queue.send(completion).await.map_err(|_| gone())?;
        outcome
            .await
            .map_err(|_| gone())?
            .map_err(|e| StoreError::Unavailable(e.into()))
    }
}

/// Writes what waits, a group at a time, until the store is dropped.
async fn write_groups(
    pool: Pool,
    limit: StdDuration,
    round_trips: Arc<AtomicU64>,
    mut rx: mpsc::Receiver<Completion>,
) {
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        while group.len() < GROUP {
            match rx.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        // One transaction per caller (its own row-level security scope), in arrival order
        // within each.
        let mut by_caller: BTreeMap<Caller, Vec<Completion>> = BTreeMap::new();
        for completion in group {
            by_caller
                .entry(completion.caller.clone())
                .or_default()
                .push(completion);
        }
        // Callers' transactions side by side (at most `PARALLEL` at once): one slow or
        // failing caller's write does not hold up the others'.
        let mut groups = by_caller.into_values();
        loop {
            let mut running = tokio::task::JoinSet::new();
            for completions in groups.by_ref().take(PARALLEL) {
                let (pool, round_trips) = (pool.clone(), round_trips.clone());
                running.spawn(async move {
                    let outcome = write(&pool, limit, &round_trips, &completions)
                        .await
                        .map_err(|e| e.to_string());
                    for completion in completions {
                        let _ = completion.done.send(outcome.clone());
                    }
                });
            }
            if running.is_empty() {
                break;
            }
            // A write that panicked dropped its completions' senders: their recorders get
            // an error, never a hang.
            while running.join_next().await.is_some() {}
        }
    }
}

/// One caller's completions in one statement.
async fn write(
    pool: &Pool,
    limit: StdDuration,
    round_trips: &AtomicU64,
    completions: &[Completion],
) -> Result<(), StoreError> {
    let Some(first) = completions.first() else {
        return Ok(());
    };
    let caller = &first.caller;
    let at: Vec<OffsetDateTime> = completions.iter().map(|c| c.at).collect();
    let elicitations: Vec<Option<Uuid>> = completions.iter().map(|c| c.elicitation).collect();
    let tools: Vec<&str> = completions.iter().map(|c| c.tool.as_str()).collect();
    let details: Vec<&str> = completions.iter().map(|c| c.detail.as_str()).collect();
    scoped_on(
        pool,
        limit,
        round_trips,
        caller,
        "",
        sql::RECORD_COMPLETIONS,
        &[
            &at,
            &caller.subject_id(),
            &caller.tenant_id(),
            &elicitations,
            &tools,
            &details,
        ],
    )
    .await?;
    Ok(())
}
