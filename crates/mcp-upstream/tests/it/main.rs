//! mcp-upstream's own suites, against small fixture modules (raw JSON-RPC over stdio, so the
//! client meets the byte-level awkwardness of a real process): one test binary.

#[cfg(feature = "http")]
mod http;
mod registry;
mod stdio;

use std::sync::Arc;
use std::time::Duration;

use mcp_upstream::stdio::{StdioConfig, StdioModule};

/// The framed fixture module, started under `name` and ready.
pub(crate) async fn framed(name: &str) -> Arc<StdioModule> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/framed_module.py"
    );
    let module = Arc::new(StdioModule::start(StdioConfig {
        name: name.into(),
        command: "python3".into(),
        args: vec![script.into(), name.into()],
        env: Vec::new(),
        inherit_env: Vec::new(),
        cwd: None,
        call_timeout: Duration::from_secs(30),
        run_as: None,
    }));
    assert!(
        module.ready(Duration::from_secs(30)).await,
        "the fixture module starts"
    );
    module
}
