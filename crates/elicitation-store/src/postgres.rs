//! The store of record: PostgreSQL through a deadpool connection pool.
//!
//! Each caller-scoped operation is one transaction sent as one pipelined batch — `BEGIN`,
//! [`sql::SET_CALLER`], the statement, `COMMIT` — so it costs one network round trip, and
//! row-level security sees the caller as well as the statement's own `WHERE`. State changes
//! are single statements guarded by the current status (`UPDATE … WHERE status = 'pending'
//! … RETURNING`), so concurrent answers record exactly once. A status change fires
//! `NOTIFY mcp_elicitation_changed` with the id; a dedicated LISTEN connection per store
//! wakes this instance's waiters whichever instance made the change.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration as StdDuration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use elicitation_core::{
    Elicitation, ElicitationId, ElicitationStatus, ElicitationType, MAX_RETRIES, RespondOutcome,
    ResponseSpec, truncate_to_micros, validate_response,
};
use ring::rand::SystemRandom;
use serde_json::Value;
use time::OffsetDateTime;
use tokio::sync::broadcast;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use crate::audit::{self, Event, PolicyRef};
use crate::error::map_db_error;
use crate::grant::AnswerWith;
use crate::seal::{KeyRing, SealContext};
use crate::store::as_seen;
use crate::{Approver, CallBinding, Caller, Clock, HeldCall, StoreError, SystemClock};

mod accounts;
mod chain;
mod completions;
mod delegations;
mod elicitations;
mod fleet;
mod flows;
mod grants;
mod listen;
mod notices;
mod pins;
mod quotas;
mod respond;
mod row;
pub use chain::{
    CHAIN_KEY_INFO, ChainReport, ChainSealed, audit_page, audit_seal_stalls, max_unsealed_wait,
    verify_audit,
};
pub(crate) mod sql;

use crate::grant::Grant;
use row::{MESSAGE, NOTE, REQUEST, RESPONSE, decode};

/// How a [`PostgresStore`] connects and behaves.
pub struct PostgresOptions {
    /// Where to connect, as the gateway's writer login (not the schema owner): from the URL
    /// [`PostgresOptions::new`] reads (no driver type in the public API).
    pub(crate) config: tokio_postgres::Config,
    /// Pooled connections (the LISTEN connection is extra).
    pub pool_size: usize,
    /// The keys that seal payloads. Required: there is no Postgres store without one.
    pub keys: KeyRing,
    /// Where `now` comes from.
    pub clock: Arc<dyn Clock>,
    /// Pending elicitations one caller may have at once.
    pub max_pending_per_caller: usize,
    /// Waiters re-read at least this often, in case a notification was lost while the
    /// LISTEN connection was down.
    pub recheck_interval: StdDuration,
    /// How long to wait for a pooled connection before reporting the store unavailable.
    pub acquire_timeout: StdDuration,
    /// The longest one operation may take, from asking the pool for a connection to its
    /// last answer. Past it the operation fails with [`StoreError::Unavailable`] and its
    /// connection is discarded (a frozen or partitioned database answers nothing, and its
    /// connection may never recover). An operation that timed out may still take effect
    /// if the database later runs what it was sent; callers treat the error as "not done"
    /// and never act on a result they did not receive.
    pub operation_timeout: StdDuration,
    /// The events the outbox records notices of (`[[notify]]`'s; none: it records none).
    pub notify_events: Vec<crate::NoticeEvent>,
    /// Connect even when the login bypasses row-level security (a superuser, a role with
    /// `BYPASSRLS`, or the tables' owner): then every caller's rows are every caller's, and
    /// only the gateway's own queries keep them apart. Off: such a login is refused at
    /// connect. For a throwaway database only.
    pub allow_rls_bypass: bool,
    /// TLS to the database (feature `tls`), checked against these roots (with `sslmode=require` in the URL
    /// the connection is refused without it; the default `prefer` uses TLS when the server
    /// offers it). `None`: no TLS.
    #[cfg(feature = "tls")]
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl PostgresOptions {
    /// Options for `url` (a `postgres://` URL or key=value string) with default limits.
    pub fn new(url: &str, keys: KeyRing) -> Result<Self, StoreError> {
        let config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Config(format!("invalid database URL: {e}")))?;
        Ok(PostgresOptions {
            config,
            pool_size: 16,
            keys,
            clock: Arc::new(SystemClock),
            max_pending_per_caller: 100,
            recheck_interval: StdDuration::from_secs(2),
            acquire_timeout: StdDuration::from_secs(5),
            operation_timeout: StdDuration::from_secs(5),
            notify_events: Vec::new(),
            allow_rls_bypass: false,
            #[cfg(feature = "tls")]
            tls: None,
        })
    }
}

/// Most rows one sweep expires.
const EXPIRE_BATCH: i32 = 1000;
/// Specs kept in the in-process cache (specs never change, so the cache is always right).
const SPEC_CACHE_CAPACITY: usize = 10_000;

/// The Postgres store.
pub struct PostgresStore {
    pool: Pool,
    keys: KeyRing,
    clock: Arc<dyn Clock>,
    rng: SystemRandom,
    max_pending_per_caller: usize,
    changes: broadcast::Sender<ElicitationId>,
    session_ends: broadcast::Sender<[u8; 32]>,
    broadcasts: broadcast::Sender<String>,
    recheck_interval: StdDuration,
    operation_timeout: StdDuration,
    specs: Mutex<HashMap<ElicitationId, ResponseSpec>>,
    round_trips: Arc<AtomicU64>,
    completions: completions::Completions,
    _listener: listen::Listener,
}

fn pool_error(err: deadpool_postgres::PoolError) -> StoreError {
    match err {
        deadpool_postgres::PoolError::Backend(e) => map_db_error(e),
        other => StoreError::Unavailable(Box::new(other)),
    }
}

/// Fills in what the operator's database URL left out so that no connection can hang for
/// ever, and no statement the gateway gave up on keeps working on the server: a connect
/// timeout; TCP keepalives and a TCP user timeout that notice a peer gone silent (a
/// partition) within about half a minute, including the LISTEN connection's; and a server
/// `statement_timeout` of the operation timeout, so a statement stuck on a lock is ended
/// by the server too (and its connection freed) rather than committing long after.
fn bound_connections(config: &mut tokio_postgres::Config, operation_timeout: StdDuration) {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(operation_timeout);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(StdDuration::from_secs(30));
    }
    if config.get_options().is_none() {
        config.options(format!(
            "-c statement_timeout={}",
            operation_timeout.as_millis()
        ));
    }
    if config.get_keepalives()
        && config.get_keepalives_idle() == StdDuration::from_secs(2 * 60 * 60)
    {
        config.keepalives_idle(StdDuration::from_secs(10));
        config.keepalives_interval(StdDuration::from_secs(5));
        config.keepalives_retries(3);
    }
}

/// Has the connections' outbox trigger (V16) record notices of `events`, on top of whatever
/// options the URL set.
fn record_notices(config: &mut tokio_postgres::Config, events: &[crate::NoticeEvent]) {
    if events.is_empty() {
        return;
    }
    let labels: Vec<&str> = events.iter().map(|e| e.label()).collect();
    let setting = format!("-c mcp.notify_events={}", labels.join(","));
    let options = match config.get_options() {
        Some(existing) if !existing.is_empty() => format!("{existing} {setting}"),
        _ => setting,
    };
    config.options(options);
}

/// A pooled connection lent to one operation: unless the operation finished, the
/// connection leaves the pool when the lease is dropped — on this operation's timeout, and
/// equally when the caller stops waiting first (its own timeout, a client gone) — since
/// whatever it was waiting for may never come, and must not hold up the next operation.
struct Lease {
    client: Option<deadpool_postgres::Client>,
    finished: bool,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.finished
            && let Some(client) = self.client.take()
        {
            drop(deadpool_postgres::Object::take(client));
        }
    }
}

/// Runs `op` on a pooled connection, the whole of it (waiting for the connection
/// included) bounded by `limit`. A connection whose operation did not finish is taken out
/// of the pool and dropped, not reused ([`Lease`]).
async fn bounded<T>(
    pool: &Pool,
    limit: StdDuration,
    op: impl AsyncFnOnce(&deadpool_postgres::Client) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let deadline = tokio::time::Instant::now() + limit;
    let timed_out = || {
        StoreError::Unavailable(
            format!(
                "the database did not answer within {} ms",
                limit.as_millis()
            )
            .into(),
        )
    };
    let client = tokio::time::timeout_at(deadline, pool.get())
        .await
        .map_err(|_| timed_out())?
        .map_err(pool_error)?;
    let mut lease = Lease {
        client: Some(client),
        finished: false,
    };
    let Some(client) = lease.client.as_ref() else {
        return Err(timed_out());
    };
    let outcome = tokio::time::timeout_at(deadline, op(client)).await;
    match outcome {
        Ok(result) => {
            lease.finished = true;
            result
        }
        Err(_) => Err(timed_out()),
    }
}

/// Both halves of the caller filter as statement parameters.
fn tenant_param(caller: &Caller) -> Option<&str> {
    caller.tenant_id()
}

/// [`PostgresStore::scoped_to`] on `pool` (what the completion writer, which holds no
/// store, needs too).
async fn scoped_on(
    pool: &Pool,
    limit: StdDuration,
    round_trips: &AtomicU64,
    caller: &Caller,
    groups: &str,
    statement: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, StoreError> {
    bounded(pool, limit, async |client| {
        let set_scope = client
            .prepare_cached(sql::SET_CALLER)
            .await
            .map_err(map_db_error)?;
        let statement = client
            .prepare_cached(statement)
            .await
            .map_err(map_db_error)?;
        let subject = caller.subject_id();
        let tenant = caller.tenant_id().unwrap_or("");
        let scope_params: [&(dyn ToSql + Sync); 3] = [&subject, &tenant, &groups];
        round_trips.fetch_add(1, Ordering::Relaxed);
        // Each future sends its messages when first polled, in this order, before any
        // answer arrives. If the statement fails, the server answers COMMIT with
        // ROLLBACK.
        let (begin, set, rows, commit) = tokio::join!(
            client.batch_execute("BEGIN"),
            client.query(&set_scope, &scope_params),
            client.query(&statement, params),
            client.batch_execute("COMMIT"),
        );
        begin.map_err(map_db_error)?;
        set.map_err(map_db_error)?;
        let rows = rows.map_err(map_db_error)?;
        commit.map_err(map_db_error)?;
        Ok(rows)
    })
    .await
}

impl PostgresStore {
    /// Connects, checks the schema is migrated, and starts listening for changes.
    pub async fn connect(mut options: PostgresOptions) -> Result<Self, StoreError> {
        bound_connections(&mut options.config, options.operation_timeout);
        record_notices(&mut options.config, &options.notify_events);
        let recycling = || ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        #[cfg(feature = "tls")]
        let tls = options
            .tls
            .as_ref()
            .map(|roots| tokio_postgres_rustls::MakeRustlsConnect::new((**roots).clone()));
        #[cfg(not(feature = "tls"))]
        let tls: Option<listen::NoTlsStack> = None;
        let manager = match &tls {
            #[cfg(feature = "tls")]
            Some(tls) => Manager::from_config(options.config.clone(), tls.clone(), recycling()),
            _ => Manager::from_config(options.config.clone(), NoTls, recycling()),
        };
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .wait_timeout(Some(options.acquire_timeout))
            .create_timeout(Some(options.acquire_timeout))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Config(format!("connection pool: {e}")))?;
        let migrated = bounded(&pool, options.operation_timeout, async |client| {
            let row = client
                .query_one(sql::IS_MIGRATED, &[])
                .await
                .map_err(map_db_error)?;
            Ok(row.get::<_, bool>(0))
        })
        .await?;
        if !migrated {
            return Err(StoreError::NotMigrated);
        }
        let (bypass, login) = bounded(&pool, options.operation_timeout, async |client| {
            let row = client
                .query_one(sql::RLS_BYPASS, &[])
                .await
                .map_err(map_db_error)?;
            Ok((row.get::<_, Option<String>>(0), row.get::<_, String>(1)))
        })
        .await?;
        if let Some(why) = bypass {
            let what = match why.as_str() {
                "superuser" => "is a superuser",
                "bypassrls" => "has BYPASSRLS",
                _ => "owns the gateway's tables",
            };
            if !options.allow_rls_bypass {
                return Err(StoreError::Config(format!(
                    "the database login {login:?} {what}, so row-level security would not keep callers' elicitations apart; connect as a login granted mcp_gateway_writer (docs/postgres.md), or set allow_rls_bypass for a throwaway database"
                )));
            }
            tracing::warn!(login = %login, "the database login {what}: row-level security does not apply to it (allow_rls_bypass is set)");
        }
        let changes = broadcast::channel(4096).0;
        let session_ends = broadcast::channel(1024).0;
        let broadcasts = broadcast::channel(1024).0;
        let listener = listen::Listener::start(
            options.config,
            tls,
            listen::Feeds {
                changes: changes.clone(),
                sessions: session_ends.clone(),
                broadcasts: broadcasts.clone(),
            },
            options.operation_timeout,
        )
        .await?;
        let round_trips = Arc::new(AtomicU64::new(0));
        let completions = completions::Completions::start(
            pool.clone(),
            options.operation_timeout,
            round_trips.clone(),
        );
        Ok(PostgresStore {
            pool,
            keys: options.keys,
            clock: options.clock,
            rng: SystemRandom::new(),
            max_pending_per_caller: options.max_pending_per_caller,
            changes,
            session_ends,
            broadcasts,
            recheck_interval: options.recheck_interval,
            operation_timeout: options.operation_timeout,
            specs: Mutex::new(HashMap::new()),
            round_trips,
            completions,
            _listener: listener,
        })
    }

    /// The ids of elicitations whose status changed, on any instance sharing the database,
    /// as this store's LISTEN connection hears them (NOTIFY). The receiver sees the changes
    /// made after this call.
    pub fn subscribe_changes(&self) -> broadcast::Receiver<ElicitationId> {
        self.changes.subscribe()
    }

    /// Callers waiting for a change right now (subscribers of the change feed).
    pub fn waiting(&self) -> usize {
        self.changes.receiver_count()
    }

    /// Network round trips to the database so far (each pipelined transaction counts once;
    /// one-off statement preparation per connection is not counted).
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    fn now(&self) -> OffsetDateTime {
        truncate_to_micros(self.clock.now())
    }

    /// Runs `op` on a pooled connection within the operation timeout (see [`bounded`]).
    async fn with_client<T>(
        &self,
        op: impl AsyncFnOnce(&deadpool_postgres::Client) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        bounded(&self.pool, self.operation_timeout, op).await
    }

    /// Runs one statement in a transaction scoped to `caller`, pipelined into one round trip.
    async fn scoped(
        &self,
        caller: &Caller,
        statement: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        self.scoped_to(caller, "", statement, params).await
    }

    /// Runs `statement` on the caller's confirmation `id` of the call `binding` names, now,
    /// with the parameters `REDEEM` and `REPORT_DECLINE` share: `$1` id, `$2`/`$3` the
    /// caller, `$4` tool, `$5` digest, `$6` now, `$7` definition digest.
    async fn on_bound_confirmation(
        &self,
        statement: &str,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<Vec<Row>, StoreError> {
        let now = self.now();
        self.scoped(
            caller,
            statement,
            &[
                id.as_uuid(),
                &caller.subject_id(),
                &tenant_param(caller),
                &binding.tool,
                &binding.digest.as_bytes().as_slice(),
                &now,
                &binding.definition.as_bytes().as_slice(),
                &binding.server,
            ],
        )
        .await
    }

    /// Runs one statement as `approver`: its own rows, and the rows its groups answer.
    async fn scoped_approver(
        &self,
        approver: &Approver,
        statement: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let groups = Value::from(approver.groups.clone()).to_string();
        self.scoped_to(&approver.caller, &groups, statement, params)
            .await
    }

    /// Runs one statement in a transaction whose row-level security scope is `caller` and
    /// the approver `groups` (a JSON array, or `""`), pipelined into one round trip.
    async fn scoped_to(
        &self,
        caller: &Caller,
        groups: &str,
        statement: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        scoped_on(
            &self.pool,
            self.operation_timeout,
            &self.round_trips,
            caller,
            groups,
            statement,
            params,
        )
        .await
    }

    fn remember_spec(&self, id: ElicitationId, spec: &ResponseSpec) {
        let mut specs = self.specs.lock().unwrap_or_else(PoisonError::into_inner);
        if specs.len() >= SPEC_CACHE_CAPACITY {
            specs.clear();
        }
        specs.insert(id, spec.clone());
    }

    /// The response spec of the caller's elicitation, from the cache or the database.
    async fn spec_of(
        &self,
        caller: &Caller,
        id: ElicitationId,
    ) -> Result<ResponseSpec, StoreError> {
        let cached = self
            .specs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned();
        if let Some(spec) = cached {
            return Ok(spec);
        }
        let rows = self
            .scoped(
                caller,
                sql::SELECT_SPEC,
                &[id.as_uuid(), &caller.subject_id(), &tenant_param(caller)],
            )
            .await?;
        let row = rows.first().ok_or(StoreError::NotFound { id })?;
        let json: Value = row
            .try_get(0)
            .map_err(|e| StoreError::Backend(Box::new(e)))?;
        let spec: ResponseSpec = serde_json::from_value(json).map_err(|e| StoreError::Corrupt {
            id,
            reason: format!("spec: {e}"),
        })?;
        self.remember_spec(id, &spec);
        Ok(spec)
    }

    async fn insert(
        &self,
        caller: &Caller,
        elicitation: &Elicitation,
        call: Option<&HeldCall>,
        policy: &PolicyRef,
        client: Option<&str>,
    ) -> Result<(), StoreError> {
        let held_detail = crate::audit::held_detail(
            policy,
            elicitation.spec.message(),
            call.map(|c| &c.digest),
            client,
        );
        let id = elicitation.id;
        let spec_json = serde_json::to_value(elicitation.spec.response())
            .map_err(|e| StoreError::Backend(Box::new(e)))?;
        let sealed = match call {
            Some(call) => {
                let plaintext = serde_json::to_vec(&call.arguments)
                    .map_err(|e| StoreError::Backend(Box::new(e)))?;
                Some(self.keys.seal(
                    &plaintext,
                    SealContext {
                        column: REQUEST,
                        id,
                        caller,
                        call: Some((call.tool.as_str(), &call.digest, call.definition.as_ref())),
                    },
                )?)
            }
            None => None,
        };
        let message = self.keys.seal(
            elicitation.spec.message().as_bytes(),
            SealContext {
                column: MESSAGE,
                id,
                caller,
                call: None,
            },
        )?;
        let tool = call.map(|c| c.tool.as_str());
        let digest = call.map(|c| c.digest.as_bytes().as_slice());
        let definition = call
            .and_then(|c| c.definition.as_ref())
            .map(|d| d.as_bytes().as_slice());
        let approval = call.and_then(|c| c.approval.as_ref());
        let approver_group = approval.map(|a| a.group.as_str());
        let approval_mode = approval.map(|a| a.mode.label());
        let quorum = approval.map_or(1, |a| i16::from(a.quorum.approvers.max(1)));
        let also: Vec<&str> = approval.map_or(Vec::new(), |a| {
            a.quorum.also.iter().map(String::as_str).collect()
        });
        let limit = i64::try_from(self.max_pending_per_caller).unwrap_or(i64::MAX);
        let rows = self
            .scoped(
                caller,
                sql::INSERT,
                &[
                    id.as_uuid(),
                    &caller.subject_id(),
                    &tenant_param(caller),
                    &elicitation.kind().as_str(),
                    &message.blob,
                    &spec_json,
                    &tool,
                    &digest,
                    &sealed.as_ref().map(|s| s.blob.as_slice()),
                    &sealed.as_ref().map(|s| s.key_id.as_str()),
                    &elicitation.created_at,
                    &elicitation.expires_at,
                    &limit,
                    &message.key_id,
                    &approver_group,
                    &approval_mode,
                    &held_detail,
                    &definition,
                    &quorum,
                    &also,
                    &call.and_then(|c| c.server.as_deref()),
                ],
            )
            .await?;
        let inserted: i64 = rows.first().map(|r| r.get(0)).unwrap_or(0);
        if inserted == 0 {
            return Err(StoreError::PendingLimit {
                limit: self.max_pending_per_caller,
            });
        }
        self.remember_spec(id, elicitation.spec.response());
        audit::emit(Event::Requested(elicitation.kind()), caller, id, tool);
        Ok(())
    }

    async fn select_one(
        &self,
        caller: &Caller,
        id: ElicitationId,
    ) -> Result<row::RawRow, StoreError> {
        let rows = self
            .scoped(
                caller,
                sql::SELECT_ONE,
                &[id.as_uuid(), &caller.subject_id(), &tenant_param(caller)],
            )
            .await?;
        let row = rows.first().ok_or(StoreError::NotFound { id })?;
        decode(row, &self.keys)
    }
}

#[cfg(test)]
mod tests;
