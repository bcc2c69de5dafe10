//! The gate driven as a library, without a server: `Gateway::classify` then `Gateway::run`
//! over an in-process module, on the memory store and on PostgreSQL. What a person answers
//! goes through `mcp_gate::answer`, as every surface's does.

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod approving;
mod binding;
mod content;
mod expiry;
mod fail_closed;
mod faulty;
mod flow;
mod own;
mod pipeline;
mod quotas;
mod servers;
mod settle;
mod support;
