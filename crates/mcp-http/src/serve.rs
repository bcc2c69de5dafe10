//! Accepting connections: HTTP/1.1 on a bound listener until shutdown, then draining the
//! connections in flight.
//!
//! Slow or idle clients cannot exhaust the gateway: a connection must send a request's
//! header within [`ServeConfig::header_read_timeout`] (hyper's timer, which also runs while a
//! kept-alive connection waits for its next request), an idle connection is closed after
//! [`ServeConfig::idle_timeout`], and at most [`ServeConfig::max_connections`] are open at
//! once — at the cap the gateway stops accepting, so new clients wait in the listen backlog
//! and are served as others leave, rather than being accepted in a hot loop. When `accept`
//! fails for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM), it backs off.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use crate::service::McpService;

/// How long connections in flight may take to finish after shutdown starts.
const DRAIN: Duration = Duration::from_secs(30);
/// The longest pause after a failed `accept`.
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// Limits on connections.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// A request's header must arrive within this (a kept-alive connection's next request
    /// too); else the connection is closed.
    pub header_read_timeout: Duration,
    /// A connection with no request in progress and no bytes moving for this long is closed.
    pub idle_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
        }
    }
}

/// Whether an `accept` error means the process or system is out of a resource (back off)
/// rather than one connection having failed (carry on).
fn is_resource_exhaustion(error: &std::io::Error) -> bool {
    // EMFILE, ENFILE, ENOBUFS, ENOMEM on Linux and the BSDs' numbering of the first two.
    matches!(error.raw_os_error(), Some(24 | 23 | 105 | 12 | 55))
}

/// Serves `service` on `listener` until `shutdown` completes, then stops accepting and
/// waits (up to 30 s) for requests in flight.
pub async fn serve(
    listener: TcpListener,
    service: Arc<McpService>,
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let mut backoff = Duration::ZERO;
    tokio::pin!(shutdown);
    loop {
        // At the cap, wait for a connection to end before accepting another.
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                backoff = Duration::ZERO;
                accepted
            }
            Err(e) if is_resource_exhaustion(&e) => {
                backoff = (backoff * 2).clamp(Duration::from_millis(10), MAX_ACCEPT_BACKOFF);
                tracing::warn!(error = %e, retry_in = ?backoff, "accept failed: out of descriptors or memory; backing off");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => continue,
                    () = &mut shutdown => break,
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "accept failed for one connection");
                continue;
            }
        };
        // Answers are written whole; don't let Nagle hold back their last segment.
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        let (io, idle) = IdleIo::new(TokioIo::new(stream));
        let busy = idle.busy.clone();
        let handler = service_fn(move |request| {
            let service = service.clone();
            let busy = busy.clone();
            async move {
                // A request in progress — its handling and its response body, which may be a
                // long SSE stream — keeps the connection from counting as idle.
                let guard = BusyGuard::new(busy);
                let response = service.handle(request).await;
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    body.map_frame(move |frame| {
                        let _ = &guard;
                        frame
                    })
                    .boxed()
                }))
            }
        });
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(config.header_read_timeout)
            .keep_alive(true)
            .serve_connection(io, handler);
        let connection = graceful.watch(connection);
        let idle_timeout = config.idle_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            tokio::select! {
                result = connection => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                }
                () = idle.expired(idle_timeout) => {
                    tracing::debug!(%peer, "closing an idle connection");
                }
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections did not finish within {DRAIN:?}");
    }
}

/// Tracks a connection's activity: bytes read or written, and requests in progress.
struct Activity {
    /// Bumped on every read or write.
    moved: watch::Sender<u64>,
    /// Requests (or response streams) in progress.
    busy: Arc<watch::Sender<usize>>,
}

impl Activity {
    /// Completes once the connection has had no request in progress and no bytes moving for
    /// `timeout`.
    async fn expired(self, timeout: Duration) {
        let mut moved = self.moved.subscribe();
        let mut busy = self.busy.subscribe();
        loop {
            if *busy.borrow_and_update() > 0 {
                // Wait until no request is in progress.
                if busy.changed().await.is_err() {
                    return std::future::pending().await;
                }
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep(timeout) => {
                    if *busy.borrow() == 0 {
                        return;
                    }
                }
                changed = moved.changed() => {
                    if changed.is_err() {
                        return std::future::pending().await;
                    }
                }
                changed = busy.changed() => {
                    if changed.is_err() {
                        return std::future::pending().await;
                    }
                }
            }
        }
    }
}

/// Marks a request in progress while it lives.
struct BusyGuard(Arc<watch::Sender<usize>>);

impl BusyGuard {
    fn new(busy: Arc<watch::Sender<usize>>) -> Self {
        busy.send_modify(|n| *n += 1);
        BusyGuard(busy)
    }
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// An IO wrapper that reports every read and write to its [`Activity`].
struct IdleIo<T> {
    inner: T,
    moved: watch::Sender<u64>,
}

impl<T> IdleIo<T> {
    fn new(inner: T) -> (Self, Activity) {
        let moved = watch::Sender::new(0u64);
        let activity = Activity {
            moved: moved.clone(),
            busy: Arc::new(watch::Sender::new(0)),
        };
        (IdleIo { inner, moved }, activity)
    }

    fn touch(&self) {
        self.moved.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl<T: Read + Unpin> Read for IdleIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if result.is_ready() {
            self.touch();
        }
        result
    }
}

impl<T: Write + Unpin> Write for IdleIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if result.is_ready() {
            self.touch();
        }
        result
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
