//! Tidy rules the compiler does not hold.
//!
//! - `mcp-wire` writes every JSON-RPC and MCP shape. A `json!` outside it that builds one (a
//!   key `"jsonrpc"`, `"resultType"`, `"action"` or `"inputRequests"`) is a second spelling
//!   of a wire type, and fails CI. Test code is left out (it writes what peers send), and so
//!   are the peers we run in benches and fuzzing (`bins/mcp-bench`, `crates/mcp-fuzz`): they
//!   are clients, not the gateway.
//! - Hex and random tokens are made one way, by `mcp-random`: a byte formatted as hex by hand
//!   (`02x}`) or a random fill whose failure is dropped (`let _ = ….fill(`) outside it fails
//!   CI (a failed fill must be an error, never zeros).
//! - A function of more than [`LONG`] lines outside test code says why, in a `// Long:`
//!   comment just above it (among its doc comments and attributes).
//! - A request is served on the snapshot `McpService::handle` took: in the server and the
//!   page, the reloadable state (`self.live`, `self.gateway()`, `self.auth()`) is read only by
//!   the functions that are not part of a request ([`LIVE_READERS`]).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The keys that make a JSON object a wire shape: a JSON-RPC message, a 2026-07-28 result,
/// an elicitation answer, a `CallToolResult`, a progress notification, an elicitation
/// request's schema, a handshake. (A module's own tool definitions, `inputSchema`, are its
/// data and are not checked.)
const WIRE_KEYS: &[&str] = &[
    "\"jsonrpc\"",
    "\"resultType\"",
    "\"action\"",
    "\"inputRequests\"",
    "\"content\"",
    "\"isError\"",
    "\"structuredContent\"",
    "\"progressToken\"",
    "\"requestedSchema\"",
    "\"protocolVersion\"",
    "\"serverInfo\"",
];

/// Lines a function may run to without a written reason.
const LONG: usize = 100;

/// Crates whose sources are not the gateway's.
const EXEMPT: &[&str] = &["mcp-wire", "mcp-bench", "mcp-fuzz", "xtask"];

/// The functions of the service (`crates/mcp-http/src/service.rs` and its `service/probes.rs`)
/// that may read the reloadable state: the service's own accessors and reload, what the
/// operations listener serves (outside any request's snapshot), and `handle` and
/// `probe_only` (a request on the probe lane), which take the snapshot.
const LIVE_READERS: &[(&str, &[&str])] = &[
    ("service.rs", &["gateway", "auth", "reload", "handle"]),
    (
        "service/probes.rs",
        &["metrics_text", "check_readiness", "probe_only"],
    ),
];

/// The sources a request is served by.
const REQUEST_SOURCES: &[&str] = &["crates/mcp-http/src", "crates/mcp-approvals/src"];

pub(crate) fn check() -> Result<()> {
    let root = crate::cmd::workspace_root();
    let mut problems = Vec::new();
    for dir in REQUEST_SOURCES {
        let mut files = Vec::new();
        collect(&root.join(dir), &mut files)?;
        for file in files {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("read {}", file.display()))?;
            let allowed: &[&str] = LIVE_READERS
                .iter()
                .find(|(name, _)| file.ends_with(name))
                .map_or(&[], |(_, functions)| functions);
            for (line, function) in live_reads(&text, allowed) {
                let shown = file.strip_prefix(&root).unwrap_or(&file).display();
                problems.push(format!(
                    "{shown}:{line}: {function} reads the reloadable state mid-request; use the request's snapshot"
                ));
            }
        }
    }
    for (krate, src) in crate::cycles::workspace_crates(&root)? {
        if EXEMPT.contains(&krate.as_str()) {
            continue;
        }
        let mut files = Vec::new();
        collect(&src, &mut files)?;
        // Test code by role, though not in a `mod tests`: the store's shared conformance suite
        // and its test provisioning.
        files.retain(|f| !f.ends_with("conformance.rs") && !f.ends_with("test_support.rs"));
        for file in files {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("read {}", file.display()))?;
            if krate != "mcp-random" {
                for (line, what) in by_hand(&text) {
                    let shown = file.strip_prefix(&root).unwrap_or(&file).display();
                    problems.push(format!("{shown}:{line}: {what}; use mcp-random"));
                }
            }
            for (line, name, lines) in long_functions(&text) {
                let shown = file.strip_prefix(&root).unwrap_or(&file).display();
                problems.push(format!(
                    "{shown}:{line}: fn {name} is {lines} lines; cut it, or say why in a `// Long:` comment above it"
                ));
            }
            for (line, key) in wire_shapes(&text) {
                let shown = file.strip_prefix(&root).unwrap_or(&file).display();
                problems.push(format!(
                    "{shown}:{line}: json! builds a wire shape ({key}); use mcp-wire's type"
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        bail!("untidy:\n  {}", problems.join("\n  "))
    }
}

/// The sources the rules read: `cycles::sources` without the fuzz targets' module.
fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    crate::cycles::sources(dir, out)?;
    out.retain(|path| path.file_name().is_none_or(|n| n != "fuzzing.rs"));
    Ok(())
}

/// Each read of the reloadable state outside the `allowed` functions: its line and the
/// function it is in (test modules left out).
fn live_reads(text: &str, allowed: &[&str]) -> Vec<(usize, String)> {
    let test_start = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    let code = &text[..test_start];
    let mut found = Vec::new();
    let mut function = String::from("(top level)");
    let lines: Vec<&str> = code.lines().collect();
    for (n, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if let Some(at) = trimmed.find("fn ")
            && (at == 0 || trimmed[..at].ends_with(' '))
            && !trimmed.starts_with("//")
        {
            let name: String = trimmed[at + 3..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                function = name;
            }
        }
        // A chain may go on on the next line (`self` then `.gateway()`).
        let mut squeezed: String = line.split_whitespace().collect();
        if let Some(next) = lines.get(n + 1)
            && next.trim_start().starts_with('.')
        {
            squeezed.extend(next.split_whitespace());
        }
        let reads = squeezed.contains("self.live.")
            || squeezed.contains("self.gateway()")
            || squeezed.contains("self.auth()");
        if reads && !allowed.contains(&function.as_str()) {
            found.push((n + 1, function.clone()));
        }
    }
    found
}

/// Each hex written by hand, and each random fill whose failure is dropped, outside test
/// modules: its line and what it is.
fn by_hand(text: &str) -> Vec<(usize, &'static str)> {
    let test_start = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    let lines: Vec<&str> = text[..test_start].lines().collect();
    let mut found = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        if line.contains("02x}") {
            found.push((n + 1, "hex by hand"));
        }
        // `let _ = rng.fill(…)`, `_ = …`, `drop(…)` or `….fill(…).ok();`, on one line or
        // with the call on the next.
        let joined: String = lines[n..lines.len().min(n + 3)].concat();
        let statement = joined.split(';').next().unwrap_or_default();
        let trimmed = line.trim_start();
        let dropped = trimmed.starts_with("let _ =")
            || trimmed.starts_with("_ =")
            || trimmed.starts_with("drop(")
            || statement.trim_end().ends_with(".ok()");
        if dropped && statement.contains(".fill(") {
            found.push((n + 1, "a random fill whose failure is dropped"));
        }
    }
    found
}

/// Each function over [`LONG`] lines outside test modules without a `// Long:` reason: its
/// line, name and length. A function ends at the first line that closes at its indent.
fn long_functions(text: &str) -> Vec<(usize, String, usize)> {
    let test_start = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    let lines: Vec<&str> = text[..test_start].lines().collect();
    let mut found = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let Some(at) = trimmed.find("fn ") else {
            continue;
        };
        let head = &trimmed[..at];
        let is_fn = head.split_whitespace().all(|w| {
            [
                "pub",
                "pub(crate)",
                "pub(super)",
                "async",
                "const",
                "unsafe",
            ]
            .contains(&w)
        });
        if !is_fn {
            continue;
        }
        let name: String = trimmed[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The signature ends at its body's `{` (or `;`: no body).
        let Some(open) = (n..lines.len()).find(|&k| {
            let l = lines[k].trim_end();
            l.ends_with('{') || l.ends_with(';')
        }) else {
            continue;
        };
        if lines[open].trim_end().ends_with(';') {
            continue;
        }
        let closing = " ".repeat(indent) + "}";
        let Some(end) = (open + 1..lines.len()).find(|&k| lines[k].starts_with(&closing)) else {
            continue;
        };
        let length = end - n + 1;
        if length <= LONG {
            continue;
        }
        let reasoned = lines[..n]
            .iter()
            .rev()
            .map(|l| l.trim_start())
            .take_while(|l| l.starts_with("//") || l.starts_with("#["))
            .any(|l| l.starts_with("// Long:"));
        if !reasoned {
            found.push((n + 1, name, length));
        }
    }
    found
}

/// Each `json!` outside test modules that holds a wire key: its line and the key.
fn wire_shapes(text: &str) -> Vec<(usize, &'static str)> {
    let test_start = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    let code = &text[..test_start];
    let mut found = Vec::new();
    let mut rest = 0;
    while let Some(at) = code[rest..].find("json!(") {
        let start = rest + at + "json!(".len();
        let mut depth = 1usize;
        let mut end = code.len();
        for (k, ch) in code[start..].char_indices() {
            match ch {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = start + k;
                        break;
                    }
                }
                _ => {}
            }
        }
        let body = &code[start..end];
        if let Some(key) = WIRE_KEYS
            .iter()
            .find(|key| body.contains(&format!("{key}:")))
        {
            found.push((code[..start].lines().count(), *key));
        }
        rest = end.min(code.len());
        if rest == start {
            break;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_of_the_live_state_is_found_outside_the_functions_that_may() {
        let text = "impl S {\n    pub fn gateway(&self) -> G {\n        self.live.gateway()\n    }\n\
                    async fn route(&self, snap: &Snapshot) {\n        let g = snap.gateway.clone();\n\
                    \x20       self.gateway().list();\n    }\n    fn page(&self) {\n        self\n            .auth()\n            .mode();\n    }\n}\n";
        assert_eq!(
            live_reads(text, &["gateway"]),
            [(7, "route".to_owned()), (10, "page".to_owned())]
        );
    }

    #[test]
    fn hex_by_hand_and_a_dropped_fill_are_found_and_the_helpers_are_not() {
        let text = "fn a() {\n    let h = format!(\"{b:02x}\");\n    let _ = rng\n        .fill(&mut bytes);\n    \
                    let _ = other(x);\n    let t = mcp_random::hex_token::<8>()?;\n    // {b:02x} in a comment\n    \
                    rng.fill(&mut more).ok();\n    _ = rng.fill(&mut again);\n    rng.fill(&mut kept)?;\n}\n\
                    #[cfg(test)]\nmod tests {\n    let _ = rng.fill(&mut b);\n}\n";
        assert_eq!(
            by_hand(text),
            [
                (2, "hex by hand"),
                (3, "a random fill whose failure is dropped"),
                (8, "a random fill whose failure is dropped"),
                (9, "a random fill whose failure is dropped"),
            ]
        );
    }

    #[test]
    fn a_long_function_needs_a_reason_and_a_short_one_does_not() {
        let body = "        step();\n".repeat(LONG);
        let text = format!(
            "/// Does it.\npub async fn long(\n    x: u8,\n) {{\n{body}}}\n\n\
             /// Also.\n// Long: one step after another.\n#[allow(x)]\nfn reasoned() {{\n{body}}}\n\n\
             fn short() {{\n    step();\n}}\n\nimpl A {{\n    fn inner() {{\n    {body}    }}\n}}\n"
        );
        let found: Vec<(String, usize)> = long_functions(&text)
            .into_iter()
            .map(|(_, name, lines)| (name, lines))
            .collect();
        assert_eq!(
            found,
            [
                ("long".to_owned(), LONG + 4),
                ("inner".to_owned(), LONG + 2)
            ]
        );
    }

    #[test]
    fn a_wire_shape_in_json_is_found_and_other_json_is_not() {
        let text = "fn a() -> Value {\n    json!({\"action\": \"cancel\"})\n}\n\
                    fn b() -> Value { json!({\"uri\": u, \"nested\": json!({\"x\": 1})}) }\n\
                    fn c() { let _ = json!({\"jsonrpc\": \"2.0\"}); }\n\
                    #[cfg(test)]\nmod tests {\n    fn t() { json!({\"resultType\": \"complete\"}); }\n}\n";
        assert_eq!(wire_shapes(text), [(2, "\"action\""), (5, "\"jsonrpc\"")]);
    }
}
