//! Tool definitions as the content policy lets clients see them (`content`), kept by name
//! and digest: a definition is scanned once, not on every `tools/list`.

use std::collections::HashMap;
use std::sync::Mutex;

use gating_core::CallDigest;
use serde_json::Value;

/// Most tool definitions kept as shown (beyond, the kept ones are dropped and read anew).
pub(crate) const MAX_DEFINITIONS: usize = 16 * 1024;

/// Tool definitions as shown to clients, kept by name and digest (a definition is scanned
/// once, not on every `tools/list`).
#[derive(Default)]
pub(crate) struct Definitions(pub(crate) Mutex<HashMap<(String, CallDigest), Value>>);
