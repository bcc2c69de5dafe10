//! `[metrics]` and `[tracing]`: the operations listener and OpenTelemetry traces.

use std::net::SocketAddr;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// `[metrics]`: where the operations endpoints are served besides the main listener.
#[derive(Debug, Serialize, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub(crate) struct MetricsConfig {
    /// A separate listener for `/metrics`, `/readyz` and `/healthz`, without
    /// authentication; when set, `/metrics` is not served on the main listener.
    pub(crate) listen: Option<SocketAddr>,
}

/// `[tracing]`: OpenTelemetry traces of the gateway's requests, exported over OTLP/HTTP
/// (docs/operations.md). Read at start-up (a reload keeps the running exporter).
#[derive(Debug, Serialize, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct TracingConfig {
    /// The collector's OTLP/HTTP traces URL, `http://host:4318/v1/traces`; unset: off.
    pub(crate) otlp_endpoint: Option<String>,
    /// The share of requests traced, 0 to 1, spread evenly (a client's own sampled flag
    /// does not decide: a client cannot have all its calls traced).
    #[serde(default = "default_sample_ratio")]
    pub(crate) sample_ratio: f64,
    /// `service.name`.
    #[serde(default = "default_service_name")]
    pub(crate) service_name: String,
    /// More resource attributes (`deployment.environment = "prod"`, say).
    #[serde(default)]
    pub(crate) resource: std::collections::BTreeMap<String, String>,
    /// At most this many finished spans wait for the collector; more are dropped (counted
    /// in `/metrics`).
    #[serde(default = "default_trace_queue")]
    pub(crate) max_queue: usize,
}

impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig {
            otlp_endpoint: None,
            sample_ratio: default_sample_ratio(),
            service_name: default_service_name(),
            resource: std::collections::BTreeMap::new(),
            max_queue: default_trace_queue(),
        }
    }
}

fn default_sample_ratio() -> f64 {
    1.0
}

fn default_service_name() -> String {
    "mcp-gateway".into()
}

fn default_trace_queue() -> usize {
    2048
}

impl TracingConfig {
    /// The exporter's configuration, if tracing is on; a bad value is an error naming it.
    pub(crate) fn resolve(&self) -> Result<Option<mcp_trace::TraceConfig>> {
        let Some(endpoint) = &self.otlp_endpoint else {
            return Ok(None);
        };
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            bail!(
                "[tracing] sample_ratio must be between 0 and 1, not {}",
                self.sample_ratio
            );
        }
        let uri: http::Uri = endpoint
            .parse()
            .ok()
            .filter(|u: &http::Uri| u.scheme_str() == Some("http") && u.host().is_some())
            .with_context(|| {
                format!("[tracing] otlp_endpoint must be an http:// URL like http://127.0.0.1:4318/v1/traces, not {endpoint:?}")
            })?;
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            bail!("[tracing] otlp_endpoint must not carry user information (user:password@)");
        }
        if uri.path() == "/" {
            bail!(
                "[tracing] otlp_endpoint {endpoint:?} has no path: the OTLP/HTTP traces path is /v1/traces"
            );
        }
        if !(1..=65_536).contains(&self.max_queue) {
            bail!(
                "[tracing] max_queue must be between 1 and 65536, not {}",
                self.max_queue
            );
        }
        Ok(Some(mcp_trace::TraceConfig {
            endpoint: uri.to_string(),
            sample_ratio: self.sample_ratio,
            service_name: self.service_name.clone(),
            resource: self
                .resource
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            max_queue: self.max_queue,
        }))
    }
}
