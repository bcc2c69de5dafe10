//! Protocol versions and eras, the `_meta` keys, and the results the gateway answers with
//! itself: `initialize`, `server/discover`, and the modern result decoration.

use serde::Serialize;
use serde_json::{Map, Value, json};

/// The modern (stateless) protocol version.
pub const MODERN_VERSION: &str = "2026-07-28";
/// Legacy versions served with the `initialize` handshake, newest first.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];
/// The one legacy version whose sessions may send JSON-RPC batches.
pub const BATCH_VERSION: &str = "2025-03-26";

/// Every protocol version the gateway serves, newest first: what a `-32022` error's
/// `data.supported` and `server/discover`'s `supportedVersions` list.
pub fn supported_versions() -> Vec<&'static str> {
    std::iter::once(MODERN_VERSION)
        .chain(LEGACY_VERSIONS.iter().copied())
        .collect()
}

/// `data` of a `-32022` (unsupported protocol version) error.
#[derive(Debug, Clone, Serialize)]
pub struct UnsupportedVersionData<'a> {
    /// Every version the server speaks, newest first.
    pub supported: &'a [&'static str],
    /// What the client asked for.
    pub requested: &'a str,
}

/// The legacy version a session runs at when a client asks for `requested`: that version
/// if served, else the newest (the client then decides whether it can go on).
pub fn negotiate_legacy(requested: &str) -> &'static str {
    LEGACY_VERSIONS
        .iter()
        .copied()
        .find(|v| *v == requested)
        .unwrap_or(LEGACY_VERSIONS[0])
}

/// Whether a legacy session at `version` writes `"id": null` on an error whose request id
/// could not be read (JSON-RPC 2.0 asks for it; 2025-11-25 made the field optional).
pub fn null_id_on_errors(version: &str) -> bool {
    version < "2025-11-25"
}

/// Whether `elicitation/create` params carry `"mode"` for a client at `version`.
pub fn elicitation_has_mode(version: &str) -> bool {
    version >= "2025-11-25"
}

/// Which protocol era a request is served in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2025-11-25 and earlier: `initialize` handshake and sessions.
    Legacy,
    /// 2026-07-28: stateless, self-describing requests.
    Modern,
}

/// What a request says about its era.
#[derive(Debug, Clone, Copy, Default)]
pub struct EraSignals<'a> {
    /// The method is `initialize`.
    pub initialize: bool,
    /// The params' `_meta` names a protocol version.
    pub modern_meta: bool,
    /// An `Mcp-Session-Id` header came with it.
    pub session_header: bool,
    /// The `MCP-Protocol-Version` header.
    pub version_header: Option<&'a str>,
}

impl EraSignals<'_> {
    /// The era: `initialize` is legacy; a 2026-07-28 `_meta` is modern, even beside a stale
    /// session id (the body is authoritative); a session id is legacy; a version header
    /// that is not a legacy version is modern; anything else is legacy.
    pub fn era(&self) -> Era {
        if self.initialize {
            Era::Legacy
        } else if self.modern_meta {
            Era::Modern
        } else if self.session_header {
            Era::Legacy
        } else if self
            .version_header
            .is_some_and(|v| !LEGACY_VERSIONS.contains(&v))
        {
            Era::Modern
        } else {
            Era::Legacy
        }
    }
}

/// `_meta` key: the modern request's protocol version.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: the modern request's client capabilities.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: the modern request's client identity.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key: the server's identity on modern results.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key: the least severe log level a modern request wants messages at (none
/// without it).
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// Prefix of the `_meta` keys that belong to one hop's protocol exchange.
pub const META_PROTOCOL_PREFIX: &str = "io.modelcontextprotocol/";
/// `_meta` key on `tools/call`: the id of the confirmation that approves this call.
pub const META_CONFIRMATION_ID: &str = "confirmation_id";

/// An MCP `Implementation` object.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Implementation {
    /// The name.
    pub name: &'static str,
    /// The version.
    pub version: &'static str,
}

/// The gateway's own identity, as server and as client.
pub const GATEWAY: Implementation = Implementation {
    name: "mcp-gateway",
    version: env!("CARGO_PKG_VERSION"),
};

/// The gateway's `Implementation` object.
pub fn server_info() -> Value {
    json!(GATEWAY)
}

/// What the gateway serves: tools, prompts, resources and completions (lists are one page; no
/// list-change notifications or subscriptions to clients yet).
/// What the gateway serves: list changes and resource updates reach a legacy session on
/// its GET stream, a 2026-07-28 client on `subscriptions/listen`.
fn capabilities() -> Value {
    json!({
        "tools": {"listChanged": true},
        "prompts": {"listChanged": true},
        "resources": {"subscribe": true, "listChanged": true},
        "completions": {},
        "logging": {},
    })
}

const INSTRUCTIONS: &str = "Tools are listed as {module}__{tool}. Calls to destructive tools are held until a person confirms them: a held call returns structuredContent.elicitation_required with next_step. Once a person has answered, call the tool again with exactly the same arguments: approved, it runs once; declined, you get the refusal and the person's note. (Setting _meta.confirmation_id to the elicitation's id names the confirmation, but is not needed.)";

/// The MCP log levels (`LoggingLevel`), least severe first.
pub const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// A log level's rank in [`LOG_LEVELS`] (`None` for a name that is not a level).
pub fn log_level_rank(level: &str) -> Option<u8> {
    LOG_LEVELS
        .iter()
        .position(|l| *l == level)
        .and_then(|p| u8::try_from(p).ok())
}

/// `_meta` asking a 2026-07-28 server for log messages at the level of rank `rank` (and
/// above); `None` for a rank that is not a level's.
pub fn log_level_meta(rank: u8) -> Option<&'static Map<String, Value>> {
    static METAS: std::sync::LazyLock<Vec<Map<String, Value>>> = std::sync::LazyLock::new(|| {
        LOG_LEVELS
            .iter()
            .map(|level| {
                let mut meta = Map::new();
                meta.insert(META_LOG_LEVEL.into(), json!(level));
                meta
            })
            .collect()
    });
    METAS.get(usize::from(rank))
}

/// The `initialize` result for a legacy session at `version`.
pub fn initialize_result(version: &str) -> Value {
    let mut capabilities = capabilities();
    // Tasks are new in 2025-11-25 (and not in the 2026-07-28 core).
    if version == "2025-11-25" {
        capabilities["tasks"] = crate::tasks::server_capability();
    }
    json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": GATEWAY,
        "instructions": INSTRUCTIONS,
    })
}

/// The client capabilities the gateway declares to modules: what it can relay to its own
/// clients (or answer itself when the call's client cannot: an elicitation is cancelled,
/// anything else gets an error).
pub fn upstream_capabilities() -> Value {
    json!({"elicitation": {"form": {}}, "sampling": {}, "roots": {}})
}

/// `_meta` with only `clientCapabilities`: what a 2026-07-28 module is told a call's client
/// can answer (elicitation in form mode, sampling, roots) and take (a task of the tasks
/// extension), so it asks nothing that would be refused and answers with a task only where
/// one is taken. One static map per combination (added to a call's params without copying).
pub fn capabilities_meta(can: ClientCan) -> &'static Map<String, Value> {
    static METAS: std::sync::LazyLock<Vec<Map<String, Value>>> = std::sync::LazyLock::new(|| {
        (0..16u8)
            .map(|bits| {
                let mut capabilities = Map::new();
                if bits & 1 != 0 {
                    capabilities.insert("elicitation".into(), json!({"form": {}}));
                }
                if bits & 2 != 0 {
                    capabilities.insert("sampling".into(), json!({}));
                }
                if bits & 4 != 0 {
                    capabilities.insert("roots".into(), json!({}));
                }
                if bits & 8 != 0 {
                    capabilities.insert(
                        "extensions".into(),
                        json!({ crate::tasks::TASKS_EXTENSION: {} }),
                    );
                }
                let mut meta = Map::new();
                meta.insert(META_CLIENT_CAPABILITIES.into(), Value::Object(capabilities));
                meta
            })
            .collect()
    });
    let index = usize::from(can.elicitation)
        | usize::from(can.sampling) << 1
        | usize::from(can.roots) << 2
        | usize::from(can.tasks) << 3;
    &METAS[index]
}

/// What a call's client can answer and take, as told to a 2026-07-28 module
/// ([`capabilities_meta`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientCan {
    /// `elicitation/create` in form mode.
    pub elicitation: bool,
    /// `sampling/createMessage`.
    pub sampling: bool,
    /// `roots/list`.
    pub roots: bool,
    /// A task of the tasks extension as the answer.
    pub tasks: bool,
}

/// The `initialize` params the gateway sends to a legacy module at `version`.
pub fn initialize_params(version: &str) -> Value {
    json!({
        "protocolVersion": version,
        "capabilities": upstream_capabilities(),
        "clientInfo": GATEWAY,
    })
}

/// The `server/discover` result.
pub fn discover_result() -> Value {
    let mut capabilities = capabilities();
    // The tasks extension: a call held for a person may be answered as a task.
    capabilities["extensions"] = json!({ crate::tasks::TASKS_EXTENSION: {} });
    json!({
        "supportedVersions": supported_versions(),
        "capabilities": capabilities,
        "instructions": INSTRUCTIONS,
        "ttlMs": 0,
        "cacheScope": "private",
    })
}

/// The `_meta` the gateway puts on modern requests to modules.
pub fn modern_meta() -> &'static Map<String, Value> {
    static META: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(|| {
        let mut meta = Map::new();
        meta.insert(META_PROTOCOL_VERSION.into(), json!(MODERN_VERSION));
        meta.insert(META_CLIENT_CAPABILITIES.into(), upstream_capabilities());
        meta.insert(META_CLIENT_INFO.into(), json!(GATEWAY));
        meta
    });
    &META
}

/// A `complete` result with nothing but `_meta` (the end of a `subscriptions/listen`
/// stream).
pub fn complete_result(meta: Value) -> Value {
    json!({"resultType": "complete", "_meta": meta})
}

/// Marks a modern result complete and adds the server's identity; list results also get
/// caching hints (`ttlMs: 0`, `cacheScope: "private"`: tool lists depend on authorization).
/// The result is changed in place.
pub fn modern_result(mut result: Value, cacheable: bool) -> Value {
    static SERVER_INFO: std::sync::LazyLock<Value> = std::sync::LazyLock::new(server_info);
    if let Some(map) = result.as_object_mut() {
        if !map.contains_key("resultType") {
            map.insert("resultType".into(), json!("complete"));
        }
        let meta = map
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(META_SERVER_INFO.into(), SERVER_INFO.clone());
        }
        if cacheable {
            map.entry("ttlMs").or_insert_with(|| json!(0));
            map.entry("cacheScope").or_insert_with(|| json!("private"));
        }
    }
    result
}

/// The params of a `notifications/progress` for the request that gave `token`: how far it
/// is (`progress`, rising) and what it waits for.
pub fn progress_params(token: &Value, progress: u64, message: &str) -> Value {
    let mut params = serde_json::Map::new();
    params.insert("progressToken".into(), token.clone());
    params.insert("progress".into(), Value::from(progress));
    params.insert("message".into(), Value::String(message.to_owned()));
    Value::Object(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_reports_the_workspaces_real_version() {
        let info = server_info();
        assert_eq!(info["name"], "mcp-gateway");
        let version = info["version"].as_str().unwrap();
        assert_ne!(version, "0.0.0", "a placeholder tells an operator nothing");
        let parts: Vec<u64> = version.split('.').map(|p| p.parse().unwrap()).collect();
        assert_eq!(parts.len(), 3, "{version}");
    }

    #[test]
    fn log_levels_rank_from_debug_to_emergency_and_other_names_have_none() {
        assert_eq!(log_level_rank("debug"), Some(0));
        assert_eq!(log_level_rank("emergency"), Some(7));
        assert!(log_level_rank("warning") > log_level_rank("info"));
        assert_eq!(log_level_rank("verbose"), None);
        assert_eq!(log_level_rank("DEBUG"), None);
    }

    #[test]
    fn the_body_decides_the_era_before_a_stale_session_header() {
        let era = |initialize, modern_meta, session_header, version_header| {
            EraSignals {
                initialize,
                modern_meta,
                session_header,
                version_header,
            }
            .era()
        };
        assert_eq!(era(true, true, true, Some(MODERN_VERSION)), Era::Legacy);
        assert_eq!(era(false, true, true, Some("2025-11-25")), Era::Modern);
        assert_eq!(era(false, false, true, Some(MODERN_VERSION)), Era::Legacy);
        assert_eq!(era(false, false, false, Some(MODERN_VERSION)), Era::Modern);
        assert_eq!(era(false, false, false, Some("2025-06-18")), Era::Legacy);
        assert_eq!(era(false, false, false, None), Era::Legacy);
    }

    #[test]
    fn versions_are_negotiated_and_their_rules_follow_the_version() {
        assert_eq!(negotiate_legacy("2025-03-26"), "2025-03-26");
        assert_eq!(negotiate_legacy("1999-01-01"), "2025-11-25");
        assert!(null_id_on_errors("2025-06-18") && null_id_on_errors("2025-03-26"));
        assert!(!null_id_on_errors("2025-11-25"));
        assert!(elicitation_has_mode("2025-11-25") && !elicitation_has_mode("2025-06-18"));
        assert_eq!(
            supported_versions(),
            ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"]
        );
    }

    #[test]
    fn a_modern_result_keeps_the_modules_meta_and_result_type() {
        let result = modern_result(
            json!({"content": [], "resultType": "complete", "_meta": {"x": 1}}),
            false,
        );
        assert_eq!(result["_meta"]["x"], 1);
        assert_eq!(result["_meta"][META_SERVER_INFO]["name"], "mcp-gateway");
        assert!(result.get("ttlMs").is_none());
        let listed = modern_result(json!({"tools": []}), true);
        assert_eq!(listed["resultType"], "complete");
        assert_eq!(listed["cacheScope"], "private");
    }
}
