//! What the span makers and the exporter share: whether an exporter is installed, the
//! sample ratio, and the counts of spans dropped and refused.

use std::sync::atomic::{AtomicBool, AtomicU64};

/// The target of the gateway's trace spans and span events (kept out of the log).
pub const TARGET: &str = "mcp_trace";

pub(crate) static DROPPED: AtomicU64 = AtomicU64::new(0);
pub(crate) static FAILED: AtomicU64 = AtomicU64::new(0);
/// Whether an exporter is installed (no span is made without one).
pub(crate) static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The sample ratio's bits (an `f64`).
pub(crate) static RATIO: AtomicU64 = AtomicU64::new(0);
