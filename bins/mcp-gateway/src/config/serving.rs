//! `[http]` and `[gate]`: the listener's limits and the gate's defaults.
use std::time::Duration;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use super::*;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HttpConfig {
    #[serde(default = "default_body_limit")]
    pub(crate) body_limit: usize,
    #[serde(default)]
    pub(crate) allowed_origins: Vec<String>,
    #[serde(default)]
    pub(crate) allowed_hosts: Vec<String>,
    #[serde(default = "default_session_idle", with = "duration")]
    pub(crate) session_idle_timeout: Duration,
    #[serde(default = "default_session_max_age", with = "duration")]
    pub(crate) session_max_age: Duration,
    #[serde(default = "default_header_read_timeout", with = "duration")]
    pub(crate) header_read_timeout: Duration,
    #[serde(default = "default_body_read_timeout", with = "duration")]
    pub(crate) body_read_timeout: Duration,
    #[serde(default = "default_idle_timeout", with = "duration")]
    pub(crate) idle_timeout: Duration,
    #[serde(default = "default_max_connections")]
    pub(crate) max_connections: usize,
    #[serde(default = "default_max_streams_per_caller")]
    pub(crate) max_streams_per_caller: usize,
    /// Most bytes of request bodies one caller (or everyone unauthenticated, together) may be
    /// sending at once (default: four bodies of `body_limit`, and at least one upload).
    #[serde(default)]
    pub(crate) body_bytes_per_caller: Option<usize>,
    /// Most bytes of request bodies being received at once, of all senders (default: four
    /// callers' shares).
    #[serde(default)]
    pub(crate) body_bytes_in_flight: Option<usize>,
    /// The approvals page's cookie is `Secure` (set when clients reach the gateway over TLS).
    #[serde(default)]
    pub(crate) secure_cookies: bool,
    /// The gateway's address as people reach it, for the approvals page's URLs.
    #[serde(default)]
    pub(crate) public_url: Option<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            body_limit: default_body_limit(),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            session_idle_timeout: default_session_idle(),
            session_max_age: default_session_max_age(),
            header_read_timeout: default_header_read_timeout(),
            body_read_timeout: default_body_read_timeout(),
            idle_timeout: default_idle_timeout(),
            max_connections: default_max_connections(),
            max_streams_per_caller: default_max_streams_per_caller(),
            body_bytes_per_caller: None,
            body_bytes_in_flight: None,
            secure_cookies: false,
            public_url: None,
        }
    }
}

impl HttpConfig {
    /// `body_bytes_per_caller` and `body_bytes_in_flight`, their defaults filled in, for a
    /// gateway whose uploads are at most `upload_max` bytes.
    pub(crate) fn body_bytes(&self, upload_max: u64) -> (usize, usize) {
        let upload = usize::try_from(upload_max).unwrap_or(usize::MAX);
        let per_caller = self
            .body_bytes_per_caller
            .unwrap_or_else(|| self.body_limit.saturating_mul(4).max(upload));
        let in_flight = self
            .body_bytes_in_flight
            .unwrap_or_else(|| per_caller.saturating_mul(4));
        (per_caller, in_flight)
    }
}

fn default_body_limit() -> usize {
    4 * 1024 * 1024
}
fn default_session_idle() -> Duration {
    Duration::from_secs(30 * 60)
}
fn default_header_read_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_body_read_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_idle_timeout() -> Duration {
    Duration::from_secs(60)
}
fn default_max_connections() -> usize {
    1024
}
fn default_max_streams_per_caller() -> usize {
    16
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GateConfig {
    #[serde(default = "default_ttl", with = "duration")]
    pub(crate) default_ttl: Duration,
    #[serde(default)]
    pub(crate) gate_open_world: bool,
    /// How a client is asked natively: `auto`, `form`, `url` or `off`.
    #[serde(default)]
    pub(crate) native: mcp_http::ask::NativeMode,
    /// The longest standing grant a person may make when approving a call.
    #[serde(default = "default_max_grant", with = "duration")]
    pub(crate) max_grant: Duration,
}

/// Longest `[gate] max_grant` an operator may configure.
pub(crate) const MAX_MAX_GRANT: Duration = Duration::from_secs(30 * 86_400);

impl GateConfig {
    /// `max_grant`, checked: 1s to 30d.
    pub(crate) fn max_grant(&self) -> Result<time::Duration> {
        if self.max_grant < Duration::from_secs(1) || self.max_grant > MAX_MAX_GRANT {
            bail!(
                "[gate] max_grant must be 1s to 30d (it bounds how long a person's standing grant may last)"
            );
        }
        Ok(time::Duration::try_from(self.max_grant).unwrap_or(time::Duration::DAY))
    }
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            default_ttl: default_ttl(),
            gate_open_world: false,
            native: mcp_http::ask::NativeMode::Auto,
            max_grant: default_max_grant(),
        }
    }
}

fn default_ttl() -> Duration {
    Duration::from_secs(600)
}

fn default_max_grant() -> Duration {
    Duration::from_secs(8 * 3600)
}
