//! The operations endpoints: `/healthz`, `/readyz`, `/metrics`.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use serde_json::json;

use super::{Body, McpService};
use mcp_gate::Gateway;
use mcp_http_kit::error::McpError;
use mcp_http_kit::response::{self, Surface};

/// Ready, or the reasons not.
pub(super) type Readiness = Result<(), Vec<String>>;

/// How long `/readyz` waits for the store.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

impl McpService {
    /// `/metrics`: the Prometheus text exposition.
    pub fn metrics_text(&self) -> String {
        self.metrics_of(&self.gateway())
    }

    /// `/metrics` as `gateway` (a request's snapshot) renders it.
    pub(super) fn metrics_of(&self, gateway: &Gateway) -> String {
        let health = gateway.registry().health();
        let modules: Vec<_> = health
            .iter()
            .map(|(module, h)| mcp_gate::metrics::ModuleState {
                module,
                up: h.up,
                restarts: h.restarts,
            })
            .collect();
        let quarantined = gateway.pinning().quarantined_by_module();
        gateway.metrics().render(mcp_gate::metrics::Live {
            sessions: self.sessions.len(),
            streams: self.streams.open_total(),
            body_bytes: self.bodies.held(),
            modules: &modules,
            quarantined: &quarantined,
            trace_spans_dropped: mcp_trace::dropped(),
            trace_spans_failed: mcp_trace::failed(),
        })
    }

    /// `/readyz`: whether this instance can serve — the store reachable with its migrations
    /// current, and every required module up. The reasons it cannot, if any.
    pub async fn readiness(&self) -> Result<(), Vec<String>> {
        // One check at a time; its answer serves the probes of the next second.
        let mut last = self.ready.lock().await;
        let now = self.config.clock.instant();
        if let Some((at, answer)) = &*last
            && now.saturating_duration_since(*at) < Duration::from_secs(1)
        {
            return answer.clone();
        }
        let answer = self.check_readiness().await;
        *last = Some((now, answer.clone()));
        answer
    }

    pub(super) async fn check_readiness(&self) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        let gateway = self.gateway();
        match tokio::time::timeout(READY_TIMEOUT, gateway.store().ping()).await {
            Ok(Ok(())) => {}
            Ok(Err(elicitation_store::StoreError::NotMigrated)) => {
                problems.push(
                    "the store's migrations are behind this gateway's (run `mcp-gateway migrate`)"
                        .to_owned(),
                );
            }
            Ok(Err(e)) => problems.push(format!("the store is unavailable: {e}")),
            Err(_) => problems.push(format!(
                "the store did not answer within {} s",
                READY_TIMEOUT.as_secs()
            )),
        }
        let health = gateway.registry().health();
        let left_out = gateway.registry().left_out();
        for required in gateway.required_modules() {
            match health.iter().find(|(name, _)| name == required) {
                Some((_, h)) if h.up => {}
                Some(_) => problems.push(match gateway.registry().failure(required) {
                    Some(why) => format!("module {required:?} is down: {why}"),
                    None => format!("module {required:?} is down"),
                }),
                None => match gateway.unbuilt(required) {
                    Some(reason) => {
                        problems.push(format!("module {required:?} cannot be started: {reason}"));
                    }
                    None => problems.push(format!("module {required:?} is not configured")),
                },
            }
            if let Some((_, what)) = left_out.iter().find(|(name, _)| name == required) {
                problems.push(format!(
                    "module {required:?} lists what the gateway leaves out: {}",
                    what.join("; ")
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// The operations endpoints (`/healthz`, `/readyz`, `/metrics`), without authentication:
    /// for a listener only the operator's network reaches. `None` for any other path.
    pub async fn operations(&self, method: &Method, path: &str) -> Option<Response<Body>> {
        self.probe(method, path, true).await
    }

    /// A request on a connection accepted while every connection is busy: `/healthz` and
    /// `/readyz` as always (after the host check), anything else 503 with a retry.
    pub async fn probe_only<B>(&self, request: Request<B>) -> Response<Body> {
        let snap = self.live.snapshot();
        let (parts, _body) = request.into_parts();
        if !self.host_allowed(&snap, &parts.headers, &parts.uri) {
            return response::error(&McpError::BadHost, Surface::Problem);
        }
        let path = parts.uri.path();
        if (path == "/healthz" || path == "/readyz")
            && let Some(response) = self.probe(&parts.method, path, false).await
        {
            return response;
        }
        let mut response = response::json(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({
                "type": "about:blank",
                "title": "Service Unavailable",
                "status": 503,
                "detail": "every connection of the gateway is busy; try again shortly",
            }),
        );
        let headers = response.headers_mut();
        headers.insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("1"),
        );
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/problem+json"),
        );
        response
    }

    /// `/healthz` and `/readyz` (and, `private`, `/metrics` and why the instance is not
    /// ready: module names and store trouble are the operator's business, not the
    /// internet's).
    pub(super) async fn probe(
        &self,
        method: &Method,
        path: &str,
        private: bool,
    ) -> Option<Response<Body>> {
        let response = match path {
            "/healthz" => response::json(StatusCode::OK, &json!({"status": "ok"})),
            "/readyz" => match self.readiness().await {
                Ok(()) => response::json(StatusCode::OK, &json!({"status": "ready"})),
                Err(problems) if private => response::json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &json!({"status": "not ready", "problems": problems}),
                ),
                Err(problems) => {
                    tracing::debug!(?problems, "not ready");
                    response::json(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &json!({"status": "not ready"}),
                    )
                }
            },
            "/metrics" if private => response::metrics(self.metrics_text()),
            "/metrics" => response::metrics(self.metrics_text()),
            _ => return None,
        };
        if method != Method::GET && method != Method::HEAD {
            return Some(response::error(
                &McpError::MethodNotAllowed,
                Surface::Problem,
            ));
        }
        Some(response)
    }
}
