//! The LISTEN connection: one per store, outside the pool, forwarding
//! `mcp_elicitation_changed` notifications (whose payload is only an id) to the store's
//! waiters, and reconnecting with backoff when the connection drops.

use std::future::poll_fn;
use std::time::Duration;

use elicitation_core::ElicitationId;
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, NoTls, Socket};
#[cfg(feature = "tls")]
use tokio_postgres_rustls::MakeRustlsConnect;

/// The TLS connector, when the store has one (feature `tls`).
#[cfg(feature = "tls")]
pub(super) type TlsStack = MakeRustlsConnect;
/// Without feature `tls` there is none.
#[cfg(not(feature = "tls"))]
pub(super) type TlsStack = NoTlsStack;
/// The connector that does not exist without feature `tls`.
#[cfg(not(feature = "tls"))]
#[derive(Clone)]
pub(super) enum NoTlsStack {}

use super::{map_db_error, sql};
use crate::StoreError;

/// The running listener; stops when dropped.
pub(super) struct Listener(JoinHandle<()>);

impl Drop for Listener {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Listener {
    /// Starts listening and returns once the first LISTEN is in place, so no change made
    /// after the store is built can be missed.
    pub(super) async fn start(
        config: tokio_postgres::Config,
        tls: Option<TlsStack>,
        feeds: Feeds,
        limit: Duration,
    ) -> Result<Self, StoreError> {
        let (ready_tx, ready_rx) = oneshot::channel();
        let task = tokio::spawn(run(config, tls, feeds, ready_tx, limit));
        match ready_rx.await {
            Ok(Ok(())) => Ok(Listener(task)),
            Ok(Err(err)) => {
                task.abort();
                Err(err)
            }
            Err(_) => Err(StoreError::Unavailable(
                "the listener stopped before it started".into(),
            )),
        }
    }
}

/// Where notifications go: changed elicitations, and ended sessions.
#[derive(Clone)]
pub(super) struct Feeds {
    pub(super) changes: broadcast::Sender<ElicitationId>,
    pub(super) sessions: broadcast::Sender<[u8; 32]>,
    pub(super) broadcasts: broadcast::Sender<String>,
}

async fn run(
    config: tokio_postgres::Config,
    tls: Option<TlsStack>,
    changes: Feeds,
    ready: oneshot::Sender<Result<(), StoreError>>,
    limit: Duration,
) {
    let mut ready = Some(ready);
    let mut backoff = Duration::from_millis(100);
    loop {
        let once = match &tls {
            #[cfg(feature = "tls")]
            Some(tls) => listen_once(&config, tls.clone(), &changes, &mut ready, limit).await,
            _ => listen_once(&config, NoTls, &changes, &mut ready, limit).await,
        };
        match once {
            Ok(()) => backoff = Duration::from_millis(100),
            Err(err) => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Err(err));
                    return;
                }
                tracing::warn!(error = %err, retry_in = ?backoff, "elicitation change listener lost its connection");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// One connection's life: LISTEN, then forward notifications until it ends. Connecting
/// (the login included) and the LISTEN itself are bounded by `limit`, so a server that
/// accepts connections but answers nothing (frozen) is retried, not waited on for ever.
async fn listen_once<T>(
    config: &tokio_postgres::Config,
    tls: T,
    changes: &Feeds,
    ready: &mut Option<oneshot::Sender<Result<(), StoreError>>>,
    limit: Duration,
) -> Result<(), StoreError>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let silent = || {
        StoreError::Unavailable(
            format!(
                "the database did not accept the LISTEN connection within {} ms",
                limit.as_millis()
            )
            .into(),
        )
    };
    let (client, mut connection) = tokio::time::timeout(limit, config.connect(tls))
        .await
        .map_err(|_| silent())?
        .map_err(map_db_error)?;
    let forward = changes.clone();
    let driver = tokio::spawn(async move {
        while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(AsyncMessage::Notification(n)) if n.channel() == sql::BROADCAST_CHANNEL => {
                    let _ = forward.broadcasts.send(n.payload().to_owned());
                }
                Ok(AsyncMessage::Notification(n)) if n.channel() == sql::SESSION_ENDED_CHANNEL => {
                    if let Some(hash) = hash_from_hex(n.payload()) {
                        let _ = forward.sessions.send(hash);
                    }
                }
                Ok(AsyncMessage::Notification(n)) => {
                    if let Ok(id) = n.payload().parse::<ElicitationId>() {
                        let _ = forward.changes.send(id);
                    }
                }
                Ok(_) => {}
                Err(err) => return Err(map_db_error(err)),
            }
        }
        Ok(())
    });
    match tokio::time::timeout(limit, client.batch_execute(sql::LISTEN)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            driver.abort();
            return Err(map_db_error(e));
        }
        Err(_) => {
            driver.abort();
            return Err(silent());
        }
    }
    if let Some(ready) = ready.take() {
        let _ = ready.send(Ok(()));
    }
    let ended = driver.await.map_err(|e| StoreError::Backend(Box::new(e)))?;
    drop(client);
    ended
}

/// 64 hex digits as 32 bytes.
fn hash_from_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}
