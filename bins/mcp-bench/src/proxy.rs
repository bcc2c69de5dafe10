//! The null proxy: forwards each request's bytes to the upstream and the answer back, without
//! parsing them — the floor for "one extra hop".

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

type Upstream = Client<HttpConnector, Full<Bytes>>;

async fn forward(
    client: Upstream,
    upstream: SocketAddr,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (mut parts, body) = request.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    parts.uri = format!("http://{upstream}{path}")
        .parse()
        .expect("a valid upstream URI");
    let outgoing = Request::from_parts(parts, Full::new(bytes));
    match client.request(outgoing).await {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            Ok(Response::from_parts(parts, Full::new(bytes)))
        }
        Err(_) => Ok(Response::builder()
            .status(StatusCode::BAD_GATEWAY)
            .body(Full::new(Bytes::new()))
            .expect("static response")),
    }
}

/// Proxies `listener` to `upstream` forever.
pub(crate) async fn serve(listener: TcpListener, upstream: SocketAddr) {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Upstream = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(256)
        .build(connector);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let client = client.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                forward(client.clone(), upstream, request)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Answers every request `200` with an empty body (an OTLP `ExportTraceServiceResponse`
/// with nothing rejected), after reading it whole: the cheapest collector there is.
pub(crate) async fn sink(listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(|request: Request<hyper::body::Incoming>| async move {
                    let _ = request.into_body().collect().await;
                    Ok::<_, std::convert::Infallible>(
                        Response::builder()
                            .header("content-type", "application/x-protobuf")
                            .body(Full::new(Bytes::new()))
                            .expect("static response"),
                    )
                });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
