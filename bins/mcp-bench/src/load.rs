//! The load generator: N keep-alive HTTP/1.1 connections sharing a fixed number of requests,
//! every request timed into a latency histogram. The same generator drives every path.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use hdrhistogram::Histogram;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Builds request `i` (its method, path, headers and body).
pub(crate) type MakeRequest = Arc<dyn Fn(usize) -> Request<Full<Bytes>> + Send + Sync>;
/// Whether an answer is the expected one.
pub(crate) type Check = Arc<dyn Fn(http::StatusCode, &[u8]) -> bool + Send + Sync>;

/// What one run measured.
pub(crate) struct Load {
    pub(crate) requests: u64,
    pub(crate) errors: u64,
    pub(crate) elapsed: Duration,
    pub(crate) histogram: Histogram<u64>,
}

impl Load {
    pub(crate) fn per_second(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    /// A latency quantile in milliseconds.
    pub(crate) fn ms(&self, quantile: f64) -> f64 {
        self.histogram.value_at_quantile(quantile) as f64 / 1000.0
    }
}

/// One HTTP exchange on a fresh connection (for set-up steps).
pub(crate) async fn once(
    target: SocketAddr,
    request: Request<Full<Bytes>>,
) -> Result<(http::StatusCode, http::HeaderMap, Bytes)> {
    let stream = TcpStream::connect(target).await.context("connect")?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let response = sender.send_request(request).await?;
    let (parts, body) = response.into_parts();
    Ok((
        parts.status,
        parts.headers,
        body.collect().await?.to_bytes(),
    ))
}

/// Sends `total` requests over `concurrency` connections.
pub(crate) async fn run(
    target: SocketAddr,
    concurrency: usize,
    total: usize,
    make: MakeRequest,
    check: Check,
) -> Result<Load> {
    run_spread(&[target], concurrency, total, make, check).await
}

/// [`run`], with the connections spread over `targets` in turn (several gateway instances).
pub(crate) async fn run_spread(
    targets: &[SocketAddr],
    concurrency: usize,
    total: usize,
    make: MakeRequest,
    check: Check,
) -> Result<Load> {
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..concurrency {
        let target = targets[worker % targets.len()];
        let (next, errors, make, check) =
            (next.clone(), errors.clone(), make.clone(), check.clone());
        workers.push(tokio::spawn(async move {
            let mut histogram =
                Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
            let stream = TcpStream::connect(target).await?;
            stream.set_nodelay(true)?;
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(connection);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let request = make(i);
                let sent = Instant::now();
                sender.ready().await?;
                let response = sender.send_request(request).await?;
                let status = response.status();
                let body = response.into_body().collect().await?.to_bytes();
                let micros = u64::try_from(sent.elapsed().as_micros())
                    .unwrap_or(u64::MAX)
                    .max(1);
                histogram.saturating_record(micros);
                if !check(status, &body) {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            anyhow::Ok(histogram)
        }));
    }
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
    for worker in workers {
        histogram.add(worker.await??)?;
    }
    Ok(Load {
        requests: total as u64,
        errors: errors.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
        histogram,
    })
}
