//! Every integration suite of `mcp-http`, one module each, linked as one test binary: on two
//! cores, linking the dependency graph once instead of once per suite is most of an
//! incremental `cargo xtask test`.

mod approvals;
mod catalog;
mod gate;
mod http_modules;
mod jwt;
mod mounted;
mod operations;
mod permission;
mod relay;
mod router;
mod serve;
mod stdio;
mod tasks;
mod wire;
