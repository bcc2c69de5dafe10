//! The gateway inside another service: [`GatewayService`], a tower `Service` an embedder
//! mounts in its router (axum's `nest_service`, `route_service`, `fallback_service`), and
//! [`McpService::mounted_at`] and [`McpService::nested_at`], the path it is mounted at
//! (`crate::mount`).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use mcp_http_kit::body::Body;

use super::McpService;
use crate::mount::{MountError, check};

impl McpService {
    /// The service as mounted at `path` (`/ops`: the page at `/ops/approvals`, the REST API
    /// at `/ops/v1/...`, MCP at `/ops/mcp`) by a router that hands requests on with the path
    /// still on them (axum's `route_service` or `fallback_service`, a proxy): the service
    /// takes it off, and answers 404 to any path outside it. A path is `/` and segments of
    /// letters, digits and `-._~`, without a trailing `/`.
    pub fn mounted_at(mut self, path: &str) -> Result<Self, MountError> {
        check(path)?;
        self.mount = path.to_owned();
        self.page_site = super::page_site(&self.config, path);
        self.nested = false;
        Ok(self)
    }

    /// The service as mounted at `path` by a router that takes the path off before it hands
    /// requests on (axum's `nest_service`): served as they come; the page's links, redirects
    /// and cookie are put under `path`.
    pub fn nested_at(mut self, path: &str) -> Result<Self, MountError> {
        check(path)?;
        self.mount = path.to_owned();
        self.page_site = super::page_site(&self.config, path);
        self.nested = true;
        Ok(self)
    }

    /// The service as a tower `Service`, to mount in another service's router.
    pub fn into_service(self) -> GatewayService {
        GatewayService(Arc::new(self))
    }
}

/// The gateway's HTTP service as a tower `Service` (cheap to clone: one service shared).
#[derive(Clone)]
pub struct GatewayService(pub Arc<McpService>);

impl<B> tower_service::Service<Request<B>> for GatewayService
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { Ok(service.handle(request).await) })
    }
}
