//! The connections to one HTTP module: HTTP/1.1 over TCP, or over rustls for `https://`,
//! opened when no idle one is at hand and kept for the next request once their answer has
//! been read.
//!
//! Every request of a module goes to its one endpoint, so the idle connections are a plain
//! list, the most recently used taken first, not a map keyed by origin as a general client's
//! pool is (hyper-util's hashed its key twice a call with SipHash, byte by byte, and built a
//! connecting future beside every checkout: 6k instructions of a 100k-instruction call).
//!
//! What a general client does that matters here, this does too:
//! - a request that a reused connection did not take (the module closed it while idle, and
//!   it was found closed only now) is sent on another connection, as hyper-util retries a
//!   canceled request; a request that was written is never sent twice, so one written on a
//!   connection the module closed at that very moment fails (as with any HTTP/1.1 client:
//!   the module may have read it);
//! - a connection is kept only once it is ready for the next request (its answer read
//!   whole); one whose request was abandoned (its caller timed out or went away) is closed by
//!   hyper and never kept, so no later request reads an earlier one's answer;
//! - an idle connection is dropped once idle for [`IDLE_FOR`] (when one is taken or kept),
//!   and at most [`MAX_IDLE`] are kept.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::time::Instant;
use tower_service::Service;

use super::with_causes;

/// How long an idle connection is kept (hyper-util's default).
pub(super) const IDLE_FOR: Duration = Duration::from_secs(90);
/// Most idle connections kept to one module; one more is closed when its answer is read.
pub(super) const MAX_IDLE: usize = 1024;

type Sender = SendRequest<Full<Bytes>>;

/// The connections to one module (cheap to clone: one `Arc`).
#[derive(Clone)]
pub(super) struct Connections {
    shared: Arc<Shared>,
}

struct Shared {
    connector: HttpsConnector<HttpConnector>,
    /// The module's endpoint: what the connector connects to.
    url: Uri,
    /// Oldest first: kept at the back, taken from the back, expired from the front.
    idle: Mutex<VecDeque<Idle>>,
    idle_for: Duration,
}

struct Idle {
    sender: Sender,
    since: Instant,
}

impl Connections {
    /// The connections to `url`'s origin: TCP with `TCP_NODELAY`, through `tls` where the
    /// scheme is `https`; none is opened yet.
    pub(super) fn new(tls: &rustls::ClientConfig, url: Uri) -> Self {
        Self::with_idle_for(tls, url, IDLE_FOR)
    }

    fn with_idle_for(tls: &rustls::ClientConfig, url: Uri, idle_for: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        // The scheme is the https connector's to check.
        connector.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls.clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        Connections {
            shared: Arc::new(Shared {
                connector,
                url,
                idle: Mutex::new(VecDeque::new()),
                idle_for,
            }),
        }
    }

    /// Sends `request` (to this module's origin: its URI's path and query are what is sent,
    /// its `Host` header is the caller's to set) and gives the answer's head; the body is
    /// the caller's to read. The error says why, every cause included.
    pub(super) async fn send(
        &self,
        mut request: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, String> {
        origin_form(request.uri_mut());
        while let Some(mut sender) = self.idle() {
            match sender.try_send_request(request).await {
                Ok(response) => {
                    self.keep(sender);
                    return Ok(response);
                }
                Err(mut failed) => match failed.take_message() {
                    // Not written: the connection closed before it took the request.
                    Some(unsent) => request = unsent,
                    None => return Err(with_causes(&failed.into_error())),
                },
            }
        }
        let mut sender = self.connect().await?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| with_causes(&e))?;
        self.keep(sender);
        Ok(response)
    }

    /// The most recently kept idle connection that is still open and ready; those closed,
    /// or idle for longer than they may be, are dropped on the way.
    fn idle(&self) -> Option<Sender> {
        let mut idle = self
            .shared
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while let Some(Idle { sender, since }) = idle.pop_back() {
            if sender.is_ready() && since.elapsed() < self.shared.idle_for {
                return Some(sender);
            }
        }
        None
    }

    /// Keeps `sender` for the next request once it is ready for one: now when its answer
    /// was read whole already, else when it is (a task waits for that; a connection that
    /// closes first is dropped).
    fn keep(&self, mut sender: Sender) {
        if sender.is_ready() {
            self.shared.put(sender);
        } else if !sender.is_closed() {
            let shared = Arc::downgrade(&self.shared);
            tokio::spawn(async move {
                if sender.ready().await.is_ok()
                    && let Some(shared) = Weak::upgrade(&shared)
                {
                    shared.put(sender);
                }
            });
        }
    }

    /// A new connection to the module, its HTTP/1.1 handshake done; the connection itself
    /// runs on a task of its own until it closes.
    async fn connect(&self) -> Result<Sender, String> {
        fn failed(e: &dyn std::error::Error) -> String {
            format!("cannot connect: {}", with_causes(e))
        }
        let mut connector = self.shared.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(|e| failed(&*e))?;
        let io = connector
            .call(self.shared.url.clone())
            .await
            .map_err(|e| failed(&*e))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| failed(&e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "a module connection ended");
            }
        });
        Ok(sender)
    }

    /// How many idle connections are kept (for tests).
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.shared
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Shared {
    /// Keeps `sender` as the most recently used idle connection, after dropping those idle
    /// for too long (so a burst's connections do not stay open under steady traffic that
    /// only ever takes the newest).
    fn put(&self, sender: Sender) {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        while idle
            .front()
            .is_some_and(|oldest| now.duration_since(oldest.since) >= self.idle_for)
        {
            idle.pop_front();
        }
        if idle.len() < MAX_IDLE {
            idle.push_back(Idle { sender, since: now });
        }
    }
}

/// `uri` as its path and query only (`/` where it has none): what HTTP/1.1 sends to an
/// origin server.
fn origin_form(uri: &mut Uri) {
    let path = uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    *uri = Uri::from(path);
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::sync::Notify;

    /// How a test module answers.
    #[derive(Clone, Copy)]
    enum Answers {
        /// Echoes each request's path and body, keeping the connection.
        Echo,
        /// Echoes, then closes the connection saying so (`connection: close`).
        Close,
        /// Echoes the first request of a connection only when told to (`Server::release`).
        HoldFirst,
        /// Sends the head at once and the body only when told to.
        BodyLater,
    }

    /// A body of one chunk, sent when its future is done.
    struct Later(Option<std::pin::Pin<Box<dyn Future<Output = Bytes> + Send>>>);

    impl hyper::body::Body for Later {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
            let Some(chunk) = self.0.as_mut() else {
                return std::task::Poll::Ready(None);
            };
            let bytes = std::task::ready!(chunk.as_mut().poll(cx));
            self.0 = None;
            std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(bytes))))
        }
    }

    struct Server {
        url: Uri,
        accepted: Arc<AtomicUsize>,
        requests: Arc<AtomicUsize>,
        release: Arc<Notify>,
    }

    /// A listener on a port of its own, and the module URL on it (`/mcp`, and `query`).
    async fn listen(query: &str) -> (TcpListener, Uri) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp{query}", listener.local_addr().unwrap());
        (listener, url.parse().unwrap())
    }

    /// A connection to nowhere, ready for a request: what a kept connection looks like.
    /// The far end is the test's to drop.
    async fn connection_to_nowhere() -> (Sender, tokio::io::DuplexStream) {
        let (near, far) = tokio::io::duplex(1024);
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(near))
                .await
                .unwrap();
        tokio::spawn(connection);
        assert!(until(|| sender.is_ready()).await);
        (sender, far)
    }

    async fn serve(answers: Answers) -> Server {
        let (listener, url) = listen("?x=1").await;
        let accepted = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(Notify::new());
        let (counted, told) = (accepted.clone(), release.clone());
        let held = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let read = requests.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                counted.fetch_add(1, Ordering::SeqCst);
                let (told, held, read) = (told.clone(), held.clone(), read.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let (told, held) = (told.clone(), held.clone());
                        read.fetch_add(1, Ordering::SeqCst);
                        async move {
                            let target = request.uri().to_string();
                            let body = request.into_body().collect().await.unwrap().to_bytes();
                            let text = format!("{target} {}", String::from_utf8_lossy(&body));
                            match answers {
                                Answers::HoldFirst if held.fetch_add(1, Ordering::SeqCst) == 0 => {
                                    told.notified().await;
                                }
                                Answers::BodyLater => {
                                    let later = Later(Some(Box::pin(async move {
                                        told.notified().await;
                                        Bytes::from(text)
                                    })));
                                    return Ok::<_, Infallible>(Response::new(
                                        http_body_util::Either::Right(later),
                                    ));
                                }
                                _ => {}
                            }
                            Ok::<_, Infallible>(Response::new(http_body_util::Either::Left(
                                Full::new(Bytes::from(text)),
                            )))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .keep_alive(!matches!(answers, Answers::Close))
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Server {
            url,
            accepted,
            requests,
            release,
        }
    }

    fn connections(url: &Uri, idle_for: Duration) -> Connections {
        let tls = crate::tls::client_config(&crate::tls::TlsFiles::default()).unwrap();
        Connections::with_idle_for(&tls, url.clone(), idle_for)
    }

    fn request(url: &Uri, body: &str) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(Bytes::from(body.to_owned())));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = url.clone();
        request
            .headers_mut()
            .insert(http::header::HOST, "module".parse().unwrap());
        request
    }

    async fn text(response: Response<Incoming>) -> String {
        let body = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    }

    /// Yields until `done` or a while has passed (the connection tasks run meanwhile).
    async fn until(mut done: impl FnMut() -> bool) -> bool {
        for _ in 0..2_000 {
            if done() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        done()
    }

    #[tokio::test]
    async fn requests_one_after_another_share_one_connection_in_origin_form() {
        let server = serve(Answers::Echo).await;
        let connections = connections(&server.url, IDLE_FOR);
        for i in 0..5 {
            let body = format!("call {i}");
            let response = connections.send(request(&server.url, &body)).await.unwrap();
            assert_eq!(text(response).await, format!("/mcp?x=1 {body}"));
        }
        assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
        assert!(until(|| connections.idle_count() == 1).await);
    }

    #[tokio::test]
    async fn a_connection_the_module_closes_is_not_kept() {
        let server = serve(Answers::Close).await;
        let connections = connections(&server.url, IDLE_FOR);
        for i in 0..3 {
            let response = connections
                .send(request(&server.url, &i.to_string()))
                .await
                .unwrap();
            assert_eq!(text(response).await, format!("/mcp?x=1 {i}"));
            // Its connection's task has run past the answer (and closed it) by then.
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(connections.idle_count(), 0, "request {i}");
        }
        assert_eq!(server.accepted.load(Ordering::SeqCst), 3);
    }

    /// A module that closes an idle connection without saying so (as Node's servers do after
    /// five idle seconds): once the connection is seen closed, the next request goes on a new
    /// one and is answered.
    #[tokio::test]
    async fn a_connection_closed_while_idle_is_passed_over() {
        let close = Arc::new(Notify::new());
        let (url, _, accepted) = raw_module(close.clone()).await;
        let connections = connections(&url, IDLE_FOR);
        let first = connections.send(request(&url, "a")).await.unwrap();
        assert_eq!(text(first).await, "connection 0");
        assert!(until(|| connections.idle_count() == 1).await, "kept");
        close.notify_one();
        assert!(
            until(|| connections.shared.idle.lock().unwrap()[0]
                .sender
                .is_closed())
            .await,
            "the client sees the connection closed"
        );
        let second = connections.send(request(&url, "b")).await.unwrap();
        assert_eq!(text(second).await, "connection 1");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    /// A request given up while its answer is awaited (its call timed out, its caller went
    /// away) closes its connection: no later request reads the answer meant for it.
    #[tokio::test]
    async fn an_abandoned_request_is_not_answered_to_the_next() {
        let server = serve(Answers::HoldFirst).await;
        let connections = connections(&server.url, IDLE_FOR);
        let abandoned = tokio::time::timeout(
            Duration::from_millis(200),
            connections.send(request(&server.url, "abandoned")),
        )
        .await;
        assert!(abandoned.is_err(), "the module holds the first request");
        server.release.notify_one();
        for i in 0..3 {
            let next = connections
                .send(request(&server.url, &format!("next {i}")))
                .await
                .unwrap();
            assert_eq!(text(next).await, format!("/mcp?x=1 next {i}"));
        }
        assert_eq!(
            server.accepted.load(Ordering::SeqCst),
            2,
            "the abandoned request's connection was not kept; the next one was"
        );
    }

    #[tokio::test]
    async fn requests_at_once_each_read_their_own_answer_and_their_connections_are_kept() {
        let server = serve(Answers::Echo).await;
        let connections = connections(&server.url, IDLE_FOR);
        let calls = (0..16).map(|i| {
            let (connections, url) = (connections.clone(), server.url.clone());
            tokio::spawn(async move {
                let response = connections
                    .send(request(&url, &format!("{i}")))
                    .await
                    .unwrap();
                assert_eq!(text(response).await, format!("/mcp?x=1 {i}"));
            })
        });
        for call in calls.collect::<Vec<_>>() {
            call.await.unwrap();
        }
        let opened = server.accepted.load(Ordering::SeqCst);
        assert!((1..=16).contains(&opened), "{opened}");
        assert!(until(|| connections.idle_count() == opened).await);
        for i in 0..opened {
            let response = connections
                .send(request(&server.url, "again"))
                .await
                .unwrap();
            assert_eq!(text(response).await, "/mcp?x=1 again", "{i}");
        }
        assert_eq!(server.accepted.load(Ordering::SeqCst), opened);
    }

    /// An answer whose body comes after its head: the connection is kept once the body has
    /// been read, not before, and then serves the next request.
    #[tokio::test]
    async fn a_connection_is_kept_once_its_answer_is_read() {
        let server = serve(Answers::BodyLater).await;
        let connections = connections(&server.url, IDLE_FOR);
        let response = connections
            .send(request(&server.url, "first"))
            .await
            .unwrap();
        assert_eq!(connections.idle_count(), 0, "its body is still to come");
        server.release.notify_one();
        assert_eq!(text(response).await, "/mcp?x=1 first");
        assert!(until(|| connections.idle_count() == 1).await);
        let again = connections
            .send(request(&server.url, "second"))
            .await
            .unwrap();
        server.release.notify_one();
        assert_eq!(text(again).await, "/mcp?x=1 second");
        assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_idle_for_too_long_is_not_used() {
        let server = serve(Answers::Echo).await;
        let connections = connections(&server.url, Duration::ZERO);
        for i in 0..2 {
            let response = connections.send(request(&server.url, "x")).await.unwrap();
            assert_eq!(text(response).await, "/mcp?x=1 x", "{i}");
        }
        assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_module_that_cannot_be_reached_is_a_clear_error() {
        let (listener, url) = listen("").await;
        drop(listener);
        let error = connections(&url, IDLE_FOR)
            .send(request(&url, "x"))
            .await
            .unwrap_err();
        assert!(
            error.starts_with("cannot connect: ") && error.contains("refused"),
            "{error}"
        );
    }

    /// A module that reads each request of a connection and answers it, or, for the
    /// request `close`, drops the connection without an answer; told on `close`, it closes
    /// an idle connection without saying so. Gives the URL, the requests read and the
    /// connections accepted.
    async fn raw_module(close: Arc<Notify>) -> (Uri, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let (listener, url) = listen("").await;
        let (requests, accepted) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (read, counted) = (requests.clone(), accepted.clone());
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let n = counted.fetch_add(1, Ordering::SeqCst);
                let (read, close) = (read.clone(), close.clone());
                tokio::spawn(async move {
                    loop {
                        // One short request a read: head and body arrive together.
                        let mut buffer = vec![0; 4096];
                        let got = tokio::select! {
                            got = stream.read(&mut buffer) => got.unwrap_or(0),
                            () = close.notified() => 0,
                        };
                        if got == 0 {
                            break;
                        }
                        read.fetch_add(1, Ordering::SeqCst);
                        if buffer[..got].ends_with(b"close") {
                            break;
                        }
                        let body = format!("connection {n}");
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        stream.write_all(answer.as_bytes()).await.unwrap();
                    }
                });
            }
        });
        (url, requests, accepted)
    }

    /// A kept connection that looked ready when taken, and closed before it took the
    /// request (its far end gone, seen only once the request was queued on it): the
    /// request goes on a new connection, and is read once.
    #[tokio::test]
    async fn a_request_a_closed_connection_did_not_take_goes_on_another_once() {
        let server = serve(Answers::Echo).await;
        let connections = connections(&server.url, IDLE_FOR);
        let (sender, far) = connection_to_nowhere().await;
        connections.shared.put(sender);
        drop(far);
        let response = connections
            .send(request(&server.url, "once"))
            .await
            .unwrap();
        assert_eq!(text(response).await, "/mcp?x=1 once");
        assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
        assert_eq!(server.requests.load(Ordering::SeqCst), 1);
    }

    /// A request a kept connection took, and that the module dropped without answering, is
    /// an error: it is never sent again (a call is not forwarded twice).
    #[tokio::test]
    async fn a_request_a_connection_took_is_never_sent_again() {
        let (url, requests, accepted) = raw_module(Arc::default()).await;
        let connections = connections(&url, IDLE_FOR);
        let first = connections.send(request(&url, "a")).await.unwrap();
        assert_eq!(text(first).await, "connection 0");
        assert!(until(|| connections.idle_count() == 1).await, "kept");
        let error = connections.send(request(&url, "close")).await.unwrap_err();
        assert!(error.contains("closed"), "{error}");
        assert_eq!(requests.load(Ordering::SeqCst), 2);
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    /// Steady traffic takes the newest idle connection each time; those a burst left behind
    /// are dropped once idle for the limit, not kept open as long as the module allows.
    #[tokio::test]
    async fn a_bursts_idle_connections_go_once_idle_for_the_limit() {
        tokio::time::pause();
        let url: Uri = "http://module/mcp".parse().unwrap();
        let connections = connections(&url, IDLE_FOR);
        let mut far_ends = Vec::new();
        for _ in 0..4 {
            let (sender, far) = connection_to_nowhere().await;
            connections.shared.put(sender);
            far_ends.push(far);
        }
        assert_eq!(connections.idle_count(), 4);
        for _ in 0..10 {
            tokio::time::advance(IDLE_FOR / 8).await;
            let newest = connections.idle().expect("the newest is fresh");
            connections.shared.put(newest);
        }
        assert_eq!(connections.idle_count(), 1);
    }
}
