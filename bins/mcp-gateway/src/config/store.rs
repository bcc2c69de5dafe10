//! `[store]`: memory or PostgreSQL, and their limits.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::*;

#[derive(Debug, Serialize, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum StoreKind {
    #[default]
    Memory,
    Postgres,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StoreConfig {
    #[serde(default)]
    pub(crate) kind: StoreKind,
    #[serde(serialize_with = "redact::url")]
    pub(crate) database_url: Option<String>,
    /// A file holding the database URL (its first line), for a URL kept out of the
    /// configuration and the environment.
    pub(crate) database_url_file: Option<PathBuf>,
    #[serde(default)]
    #[serde(serialize_with = "redact::keys")]
    pub(crate) seal_keys: Vec<String>,
    pub(crate) seal_keys_file: Option<PathBuf>,
    #[serde(default = "default_pool_size")]
    pub(crate) pool_size: usize,
    /// The longest one database operation may take before it fails as unavailable.
    #[serde(default = "default_operation_timeout", with = "duration")]
    pub(crate) operation_timeout: Duration,
    #[serde(default = "default_max_pending")]
    pub(crate) max_pending_per_caller: usize,
    #[serde(default = "default_max_records")]
    pub(crate) max_records: usize,
    /// Default: see [`StoreConfig::records_per_caller`].
    #[serde(default)]
    pub(crate) max_records_per_caller: Option<usize>,
    #[serde(default = "default_max_bytes", with = "bytes")]
    pub(crate) max_bytes: usize,
    /// Default: see [`StoreConfig::bytes_per_caller`].
    #[serde(default, with = "bytes::option")]
    pub(crate) max_bytes_per_caller: Option<usize>,
    #[serde(default = "default_sweep", with = "duration")]
    pub(crate) sweep_interval: Duration,
    /// Finished elicitations older than this are erased (their audit trail stays).
    #[serde(default, with = "duration::option")]
    pub(crate) retention: Option<Duration>,
    /// Connect even as a login that bypasses row-level security (a superuser, `BYPASSRLS`,
    /// the tables' owner); refused otherwise. For a throwaway database only.
    #[serde(default)]
    pub(crate) allow_rls_bypass: bool,
    /// TLS to the database (`true`: checked against the platform's roots, or `ca_file`'s);
    /// `sslmode=require` in the URL refuses a server without it.
    #[serde(default)]
    pub(crate) tls: bool,
    /// The CA (PEM) that alone vouches for the database server's certificate (implies
    /// `tls`).
    pub(crate) ca_file: Option<PathBuf>,
}

impl StoreConfig {
    /// Records one caller may keep: as configured, else 25,000 or the total when that is
    /// lower (lowering `max_records` alone is a valid configuration).
    pub(crate) fn records_per_caller(&self) -> usize {
        self.max_records_per_caller
            .unwrap_or_else(|| self.max_records.min(25_000))
    }

    /// Bytes one caller may keep: as configured, else 64 MiB or the total when that is
    /// lower.
    pub(crate) fn bytes_per_caller(&self) -> usize {
        self.max_bytes_per_caller
            .unwrap_or_else(|| self.max_bytes.min(64 * 1024 * 1024))
    }

    /// The database URL: `database_url`, else the first line of `database_url_file`, else
    /// the `DATABASE_URL` environment variable.
    pub(crate) fn database_url(&self) -> Result<Option<String>> {
        if let Some(url) = &self.database_url {
            return Ok(Some(url.clone()));
        }
        if let Some(path) = &self.database_url_file {
            let text = std::fs::read_to_string(path).with_context(|| {
                format!("cannot read store.database_url_file {}", path.display())
            })?;
            let url = text.lines().next().unwrap_or_default().trim();
            if url.is_empty() {
                bail!(
                    "store.database_url_file {} is empty; it holds the database URL on its first line",
                    path.display()
                );
            }
            return Ok(Some(url.to_owned()));
        }
        Ok(std::env::var("DATABASE_URL").ok())
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::Memory,
            database_url: None,
            database_url_file: None,
            seal_keys: Vec::new(),
            seal_keys_file: None,
            pool_size: default_pool_size(),
            operation_timeout: default_operation_timeout(),
            max_pending_per_caller: default_max_pending(),
            max_records: default_max_records(),
            max_records_per_caller: None,
            max_bytes: default_max_bytes(),
            max_bytes_per_caller: None,
            sweep_interval: default_sweep(),
            retention: None,
            allow_rls_bypass: false,
            tls: false,
            ca_file: None,
        }
    }
}

fn default_pool_size() -> usize {
    16
}
fn default_max_pending() -> usize {
    100
}
fn default_max_records() -> usize {
    100_000
}

fn default_max_bytes() -> usize {
    256 * 1024 * 1024
}

fn default_operation_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_sweep() -> Duration {
    Duration::from_secs(30)
}
