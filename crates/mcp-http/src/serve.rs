//! Accepting connections: HTTP/1.1 on a bound listener until shutdown, then draining the
//! connections in flight.
//!
//! Slow or idle clients cannot exhaust the gateway: a connection must send a request's
//! header within [`ServeConfig::header_read_timeout`] (hyper's timer, which also runs while a
//! kept-alive connection waits for its next request), an idle connection is closed after
//! [`ServeConfig::idle_timeout`], and at most [`ServeConfig::max_connections`] are open at
//! once. At the cap, a new client takes the place of the connection that has waited longest
//! without a request in progress (a slow-header client, an idle keep-alive); when every
//! connection is busy, the new client waits and no other is accepted (they wait in the listen
//! backlog) until one ends — never a hot accept loop. When `accept`
//! fails for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM), it backs off.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use mcp_http_kit::body::Body;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

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

/// Connections the kernel queues for `accept` (the listen backlog). Tokio's
/// `TcpListener::bind` asks for 128: a burst of more new clients than that, arriving while
/// the workers are busy, overflows the queue, and each client whose SYN was dropped waits
/// a second for its retransmission (the connection-scaling bench showed it: 256 clients
/// connecting at once, a run of 5,000 calls took a second longer). The kernel caps it at
/// `net.core.somaxconn`.
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `address` with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR`, as Tokio's own
/// `bind` sets, so a restarted gateway can take its port back while old connections linger).
pub fn bind(address: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves `service` on `listener` until `shutdown` completes, then stops accepting and
/// waits (up to 30 s) for requests in flight.
// Long: the accept loop with its timeouts, connection cap, probe lane and drain, which share
// the listener's state.
pub async fn serve(
    listener: TcpListener,
    service: Arc<McpService>,
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let probes = Arc::new(Semaphore::new(PROBE_LANE));
    let open = Arc::new(Open::default());
    let mut next_id = 0u64;
    let mut backoff = Duration::ZERO;
    tokio::pin!(shutdown);
    loop {
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
        // At the cap, a connection that is only waiting (for its first request, or idle
        // between requests) makes room; when every one is busy, the new connection is
        // served on the probe lane (probes answered, anything else told to retry), and only
        // when that is full too does this client wait for one to end (and no other is
        // accepted meanwhile).
        let permit = match slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if open.shed_one() {
                    tracing::debug!("at the connection cap: closing a waiting connection");
                } else if let Ok(lane) = probes.clone().try_acquire_owned() {
                    serve_probe_only(stream, service.clone(), lane, &graceful);
                    continue;
                }
                tokio::select! {
                    permit = slots.clone().acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                    () = &mut shutdown => break,
                }
            }
        };
        // Answers are written whole; don't let Nagle hold back their last segment.
        let _ = stream.set_nodelay(true);
        let counted = service.gateway().metrics().connection();
        let service = service.clone();
        let (io, activity) = IdleIo::new(TokioIo::new(stream));
        let busy = activity.clone();
        let handler = service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            let service = service.clone();
            let busy = busy.clone();
            request
                .extensions_mut()
                .insert(crate::service::PeerAddress(peer.ip()));
            async move {
                // A request in progress — its handling and its response body, which may be a
                // long SSE stream — keeps the connection from counting as idle.
                let guard = BusyGuard::new(busy);
                let response = service.handle(request).await;
                Ok::<_, std::convert::Infallible>(
                    response.map(|body| BusyBody { body, _busy: guard }.boxed()),
                )
            }
        });
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(config.header_read_timeout)
            .keep_alive(true)
            .serve_connection(io, handler);
        let connection = graceful.watch(connection);
        let idle_timeout = config.idle_timeout;
        let id = next_id;
        next_id += 1;
        let shed = open.add(id, activity.clone());
        let open = open.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _counted = counted;
            tokio::select! {
                () = shed.notified() => {}
                result = connection => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                }
                () = activity.expired(idle_timeout) => {
                    tracing::debug!(%peer, "closing an idle connection");
                }
            }
            open.remove(id);
        });
    }
    drop(listener);
    // Sessions' GET streams would keep their connections open forever: end them, so the
    // drain waits only for calls in flight.
    service.end_session_streams();
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections did not finish within {DRAIN:?}");
    }
}

/// Connections served beyond `max_connections` while every connection is busy: each
/// answers `/healthz` and `/readyz` and tells anything else to retry, so a client holding
/// every connection (with long requests) cannot make the gateway look dead to its probes.
const PROBE_LANE: usize = 32;

/// How long a connection on the probe lane may take, its request and answer together (a
/// probe sends its request at once: one that sends nothing gives its place up soon).
const PROBE_LANE_TIMEOUT: Duration = Duration::from_secs(2);

/// Serves one connection accepted at the cap on the probe lane: one request, then closed.
fn serve_probe_only(
    stream: tokio::net::TcpStream,
    service: Arc<McpService>,
    lane: tokio::sync::OwnedSemaphorePermit,
    graceful: &GracefulShutdown,
) {
    let _ = stream.set_nodelay(true);
    let handler = service_fn(move |request| {
        let service = service.clone();
        async move { Ok::<_, std::convert::Infallible>(service.probe_only(request).await) }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(PROBE_LANE_TIMEOUT)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), handler);
    let connection = graceful.watch(connection);
    tokio::spawn(async move {
        let _lane = lane;
        let _ = tokio::time::timeout(PROBE_LANE_TIMEOUT, connection).await;
    });
}

/// Most connections the operations listener serves at once.
const OPERATIONS_CONNECTIONS: usize = 32;

/// Serves the operations endpoints (`/healthz`, `/readyz`, `/metrics`) of `service` on
/// `listener`, without authentication — bind it where only the operator's network reaches —
/// until `shutdown` completes. Anything else is 404.
pub async fn serve_operations(
    listener: TcpListener,
    service: Arc<McpService>,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    // A scraper and a few probes need a handful of connections; more wait.
    let slots = Arc::new(Semaphore::new(OPERATIONS_CONNECTIONS));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed on the operations listener");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = service.clone();
        let handler = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let service = service.clone();
            async move {
                let response = match service
                    .operations(request.method(), request.uri().path())
                    .await
                {
                    Some(response) => response,
                    None => mcp_http_kit::response::error(
                        &mcp_http_kit::error::McpError::NotFound,
                        mcp_http_kit::response::Surface::Problem,
                    ),
                };
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(Duration::from_secs(10))
            .serve_connection(TokioIo::new(stream), handler);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tokio::time::timeout(Duration::from_secs(60), connection).await;
        });
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
}

/// The open connections, so that at the cap one that is only waiting can be closed.
#[derive(Default)]
struct Open {
    connections: std::sync::Mutex<std::collections::HashMap<u64, OpenConnection>>,
}

struct OpenConnection {
    activity: Arc<Activity>,
    shed: Arc<tokio::sync::Notify>,
}

impl Open {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, OpenConnection>> {
        self.connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a connection; the returned notification closes it.
    fn add(&self, id: u64, activity: Arc<Activity>) -> Arc<tokio::sync::Notify> {
        let shed = Arc::new(tokio::sync::Notify::new());
        self.lock().insert(
            id,
            OpenConnection {
                activity,
                shed: shed.clone(),
            },
        );
        shed
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Closes the connection that has waited longest with no request in progress; false if
    /// every connection is busy.
    fn shed_one(&self) -> bool {
        let mut connections = self.lock();
        let victim = connections
            .iter()
            .filter(|(_, c)| c.activity.busy.load(Ordering::Relaxed) == 0)
            .min_by_key(|(_, c)| c.activity.last.load(Ordering::Relaxed))
            .map(|(id, _)| *id);
        match victim.and_then(|id| connections.remove(&id)) {
            Some(connection) => {
                connection.shed.notify_one();
                true
            }
            None => false,
        }
    }
}

/// The instant activity times are measured from.
fn epoch() -> std::time::Instant {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(std::time::Instant::now)
}

fn nanos_since_epoch() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A connection's activity, kept in atomics so the hot path pays one clock read and one
/// store per read or write, and wakes nobody.
struct Activity {
    /// When bytes last moved, in nanoseconds since [`epoch`].
    last: AtomicU64,
    /// Requests (or response bodies) in progress.
    busy: AtomicUsize,
}

impl Activity {
    fn touch(&self) {
        self.last.store(nanos_since_epoch(), Ordering::Relaxed);
    }

    /// Completes once the connection has had no request in progress and no bytes moving for
    /// `timeout`. One timer per check; activity itself wakes nothing.
    async fn expired(&self, timeout: Duration) {
        loop {
            if self.busy.load(Ordering::Relaxed) > 0 {
                tokio::time::sleep(timeout).await;
                continue;
            }
            let idle = Duration::from_nanos(
                nanos_since_epoch().saturating_sub(self.last.load(Ordering::Relaxed)),
            );
            if idle >= timeout {
                return;
            }
            tokio::time::sleep(timeout - idle).await;
        }
    }
}

/// Marks a request in progress while it lives.
struct BusyGuard(Arc<Activity>);

impl BusyGuard {
    fn new(activity: Arc<Activity>) -> Self {
        activity.busy.fetch_add(1, Ordering::Relaxed);
        BusyGuard(activity)
    }
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// A response body that keeps its request counted in progress until hyper is done with it
/// (a long SSE stream included), and otherwise is the body it wraps: its frames, its end,
/// and its size, so an answer of known length goes out with `content-length`, not chunked
/// (`map_frame`, used before, cannot say the size and every answer went out chunked).
struct BusyBody {
    body: Body,
    _busy: BusyGuard,
}

impl hyper::body::Body for BusyBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// An IO wrapper that records every read and write in its [`Activity`].
struct IdleIo<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> IdleIo<T> {
    fn new(inner: T) -> (Self, Arc<Activity>) {
        let activity = Arc::new(Activity {
            last: AtomicU64::new(nanos_since_epoch()),
            busy: AtomicUsize::new(0),
        });
        (
            IdleIo {
                inner,
                activity: activity.clone(),
            },
            activity,
        )
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
            self.activity.touch();
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
            self.activity.touch();
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
