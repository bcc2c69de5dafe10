//! `[limits]`: per-caller rates and per-module concurrency.
use serde::{Deserialize, Serialize};
use std::time::Duration;

use super::*;

/// `[limits]`: per-caller rates and per-module concurrency.
#[derive(Debug, Serialize, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsConfig {
    /// Tool calls per minute per caller (a token bucket; 0: no limit).
    #[serde(default = "default_calls_per_minute")]
    pub(crate) calls_per_minute: u32,
    /// Calls a caller may make at once above the rate.
    #[serde(default = "default_calls_burst")]
    pub(crate) calls_burst: u32,
    /// Elicitations (confirmations among them) a caller may create per minute (0: no limit).
    #[serde(default = "default_confirmations_per_minute")]
    pub(crate) confirmations_per_minute: u32,
    /// Confirmations a caller may create at once above the rate.
    #[serde(default = "default_confirmations_burst")]
    pub(crate) confirmations_burst: u32,
    /// Calls one module runs at once (0: no limit); more wait up to `module_queue_timeout`.
    #[serde(default = "default_module_concurrency")]
    pub(crate) module_concurrency: u32,
    #[serde(default = "default_module_queue_timeout", with = "duration")]
    pub(crate) module_queue_timeout: Duration,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            calls_per_minute: default_calls_per_minute(),
            calls_burst: default_calls_burst(),
            confirmations_per_minute: default_confirmations_per_minute(),
            confirmations_burst: default_confirmations_burst(),
            module_concurrency: default_module_concurrency(),
            module_queue_timeout: default_module_queue_timeout(),
        }
    }
}

fn default_calls_per_minute() -> u32 {
    600
}
fn default_calls_burst() -> u32 {
    60
}
fn default_confirmations_per_minute() -> u32 {
    60
}
fn default_confirmations_burst() -> u32 {
    20
}
fn default_module_concurrency() -> u32 {
    64
}
fn default_module_queue_timeout() -> Duration {
    Duration::from_secs(10)
}
