//! `mcp-gateway import FILE`: the `[[modules]]` of the MCP servers an MCP client is already
//! configured with — a Claude Desktop, Claude Code or Cursor `mcpServers` file, or a VS Code
//! `.vscode/mcp.json` (`servers`, `inputs`; JSON with comments) — as TOML to paste into the
//! gateway's configuration. Secrets never reach the output: each becomes a reference to the
//! gateway's environment (`inherit_env`, `auth.token_env`), with a comment saying what to
//! set; whatever cannot be carried over is a comment too.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value};

/// A string as a TOML basic string on one line: `"` and `\\` escaped, every control
/// character as `\uXXXX`, so no value can end its line (and start a table of its own, or
/// leave a commented-out block).
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Text from the file in a comment: on one line, invisible and control characters shown
/// as escapes.
fn commented(text: &str) -> String {
    gating_core::visible(text).replace(['\n', '\r'], " ")
}

/// A list of strings as a TOML array.
fn list(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|i| quoted(i)).collect();
    format!("[{}]", items.join(", "))
}

/// JSON with comments (`//`, `/* */`) and trailing commas, as VS Code writes it, made JSON.
fn strip_jsonc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => {
                    if let Some(next) = chars.next() {
                        out.push(next);
                    }
                }
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for next in chars.by_ref() {
                    if next == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for next in chars.by_ref() {
                    if last == '*' && next == '/' {
                        break;
                    }
                    last = next;
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    // Trailing commas: a comma whose next non-space character closes.
    let mut cleaned = String::with_capacity(out.len());
    let bytes: Vec<char> = out.chars().collect();
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            cleaned.push(c);
            if c == '\\' && i + 1 < bytes.len() {
                cleaned.push(bytes[i + 1]);
                i += 1;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            cleaned.push(c);
        } else if c == ',' {
            let next = bytes[i + 1..].iter().find(|n| !n.is_whitespace());
            if !matches!(next, Some('}') | Some(']')) {
                cleaned.push(c);
            }
        } else {
            cleaned.push(c);
        }
        i += 1;
    }
    cleaned
}

/// Whether a variable or header of this name holds a secret: one of its words (split at
/// `_`, `-`, `.` and lower-to-upper case changes) names one. Words, not substrings:
/// `MEMORY_FILE_PATH`, `DATA_PATH` and `AUTHOR` hold no secret (`PAT`, `AUTH` inside a word
/// are not those words).
fn secret_name(name: &str) -> bool {
    const SECRETS: [&str; 16] = [
        "KEY",
        "APIKEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "CREDENTIAL",
        "CREDENTIALS",
        "AUTH",
        "AUTHORIZATION",
        "PAT",
        "COOKIE",
        "SESSION",
        "BEARER",
        "PRIVATE",
    ];
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            previous_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && previous_lower && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        word.push(c.to_ascii_uppercase());
    }
    if !word.is_empty() {
        words.push(word);
    }
    words.iter().any(|w| SECRETS.contains(&w.as_str()))
}

/// An environment variable's name made of `text` (`github-pat` → `GITHUB_PAT`).
fn env_name(text: &str) -> String {
    let mut name: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// A module name the gateway takes (letters, digits, `_`, `-`), unique among `taken`.
fn module_name(text: &str, taken: &mut BTreeSet<String>) -> String {
    let mut base: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    base = base.trim_matches('-').to_owned();
    if base.is_empty() {
        base = "module".into();
    }
    let mut name = base.clone();
    let mut n = 2;
    while !taken.insert(name.clone()) {
        name = format!("{base}-{n}");
        n += 1;
    }
    name
}

/// What a value with placeholders (`${input:id}`, `${env:NAME}`, `${workspaceFolder}`) is.
enum Placeholder<'a> {
    /// No placeholder.
    Literal,
    /// The whole value is `${input:id}`.
    Input(&'a str),
    /// The whole value is `${env:NAME}`.
    Env(&'a str),
    /// Placeholders inside other text, or of another kind.
    Mixed,
}

fn placeholder(value: &str) -> Placeholder<'_> {
    if !value.contains("${") {
        return Placeholder::Literal;
    }
    let inner = value
        .strip_prefix("${")
        .and_then(|v| v.strip_suffix('}'))
        .filter(|v| !v.contains("${") && !v.contains('}'));
    match inner {
        Some(inner) => match inner.split_once(':') {
            Some(("input", id)) => Placeholder::Input(id),
            Some(("env", name)) => Placeholder::Env(name),
            _ => Placeholder::Mixed,
        },
        None => Placeholder::Mixed,
    }
}

/// What one server turns into.
struct Module {
    name: String,
    lines: Vec<String>,
    notes: Vec<String>,
    /// The block is written commented out: the gateway cannot run it.
    disabled: bool,
}

impl Module {
    fn new(name: String) -> Self {
        Module {
            name,
            lines: Vec::new(),
            notes: Vec::new(),
            disabled: false,
        }
    }

    fn line(&mut self, key: &str, value: String) {
        self.lines.push(format!("{key} = {value}"));
    }

    fn note(&mut self, text: String) {
        self.notes.push(text);
    }
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `host` is this machine.
fn loopback(url: &str) -> bool {
    url.parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().map(crate::notify::is_loopback))
        .unwrap_or(false)
}

/// The module of one server `key` of the file.
// Long: one field of a server's entry after another.
fn module(
    key: &str,
    server: &Map<String, Value>,
    inputs: &BTreeMap<String, bool>,
    taken: &mut BTreeSet<String>,
) -> Module {
    let mut m = Module::new(module_name(key, taken));
    if m.name != key {
        m.note(format!("named {key:?} in the file"));
    }
    let kind = server.get("type").and_then(Value::as_str);
    let url = server.get("url").and_then(Value::as_str);
    let command = server.get("command").and_then(Value::as_str);
    if server.get("disabled").and_then(Value::as_bool) == Some(true) {
        m.disabled = true;
        m.note("disabled in the file".into());
    }
    // A remote server run through `mcp-remote` (Claude Desktop's way): the gateway reaches it
    // itself.
    let args = strings(server.get("args"));
    let remote = (command.is_some()
        && args.iter().any(|a| {
            a == "mcp-remote" || a.ends_with("/mcp-remote") || a.starts_with("mcp-remote@")
        }))
    .then(|| {
        args.iter()
            .find(|a| a.starts_with("https://") || a.starts_with("http://"))
            .cloned()
    })
    .flatten();
    let transport = match (kind, url, command, &remote) {
        (_, _, _, Some(_)) => "http",
        (Some("sse"), _, _, _) => "sse",
        (Some("http" | "streamable-http" | "streamableHttp"), _, _, _)
        | (None, Some(_), None, _) => "http",
        (Some("stdio") | None, _, Some(_), _) => "stdio",
        _ => "unknown",
    };
    match transport {
        "stdio" => {
            m.line("transport", quoted("stdio"));
            m.line("command", quoted(command.unwrap_or_default()));
            if !args.is_empty() {
                for pair in args.windows(2) {
                    if pair[0].starts_with('-') && secret_name(&pair[0]) {
                        m.note(format!("the argument after {} looks like a credential, copied as written: move it to the environment if the server reads one", pair[0]));
                    }
                }
                for arg in &args {
                    flag_url(&mut m, arg);
                }
                if args.iter().any(|a| a.contains("${")) {
                    m.note("an argument holds a placeholder (${…}), passed as written: the gateway does not expand it".into());
                }
                m.line("args", list(&args));
            }
            if let Some(cwd) = server.get("cwd").and_then(Value::as_str) {
                if cwd.contains("${") {
                    m.note(format!(
                        "cwd {cwd:?} holds a placeholder: set cwd to the directory it means"
                    ));
                } else {
                    m.line("cwd", quoted(cwd));
                }
            }
            env_of(&mut m, server, inputs);
            // Each client started its own process of the server: so does each caller here.
            // The gateway's default for stdio is one process for everyone, which would hand
            // one person's session state (a memory server's graph, a browser) to the next.
            m.line("isolation", quoted("per_caller"));
            m.note("isolation = \"per_caller\": each caller gets its own process, as each client started its own; \"shared\" (one process for everyone) suits a server that keeps nothing per client, such as the filesystem server".into());
        }
        "http" => {
            let url = remote.as_deref().or(url).unwrap_or_default();
            if remote.is_some() {
                m.note("was run through mcp-remote: the gateway reaches the server itself (mcp-remote's own sign-in does not carry over: see auth in docs/configuration.md)".into());
            }
            m.line("transport", quoted("http"));
            m.line("url", quoted(url));
            flag_url(&mut m, url);
            if url.starts_with("http://") && !loopback(url) {
                m.line("allow_insecure", "true".into());
                m.note("http:// across the network: calls and credentials travel in clear; prefer https://".into());
            }
            headers_of(&mut m, server, inputs);
            if server
                .get("env")
                .is_some_and(|e| e.as_object().is_some_and(|e| !e.is_empty()))
            {
                m.note("env is for a process: an http module has none (left out)".into());
            }
        }
        "sse" => {
            m.disabled = true;
            m.line("transport", quoted("http"));
            m.line("url", quoted(url.unwrap_or_default()));
            m.note("type \"sse\" is the 2024-11-05 HTTP+SSE transport, which the gateway does not speak: use the server's Streamable HTTP endpoint (often /mcp instead of /sse), then uncomment".into());
        }
        _ => {
            m.disabled = true;
            m.note("neither a command nor a url: nothing to carry over".into());
        }
    }
    for key in server.keys() {
        if ![
            "type", "url", "command", "args", "env", "headers", "cwd", "disabled",
        ]
        .contains(&key.as_str())
        {
            m.note(format!("{key:?} has no equivalent here (left out)"));
        }
    }
    m
}

/// A note when `text` is a URL that carries a credential (user information, a query).
fn flag_url(m: &mut Module, text: &str) {
    if !(text.starts_with("https://") || text.starts_with("http://")) {
        return;
    }
    let authority = text.split("://").nth(1).unwrap_or_default();
    let authority = authority.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') || text.contains('?') {
        m.note(
            "a URL holds user information or a query, copied as written: check it for a credential"
                .into(),
        );
    }
}

/// A stdio server's environment: plain values as `env`, secrets and placeholders as
/// `inherit_env` (set in the gateway's environment).
fn env_of(m: &mut Module, server: &Map<String, Value>, inputs: &BTreeMap<String, bool>) {
    let Some(env) = server.get("env").and_then(Value::as_object) else {
        return;
    };
    let mut plain = Vec::new();
    let mut inherit = Vec::new();
    for (key, value) in env {
        let value = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        match placeholder(&value) {
            Placeholder::Literal if !secret_name(key) => plain.push((key.clone(), value)),
            Placeholder::Literal => {
                inherit.push(key.clone());
                m.note(format!("set {key} in the gateway's environment (its value, a secret, was in the file; it is not copied here)"));
            }
            Placeholder::Env(name) if name == key => {
                inherit.push(key.clone());
                m.note(format!("set {key} in the gateway's environment"));
            }
            Placeholder::Env(name) => {
                inherit.push(key.clone());
                m.note(format!(
                    "set {key} in the gateway's environment to what {name} holds"
                ));
            }
            Placeholder::Input(id) => {
                inherit.push(key.clone());
                let asked = if inputs.get(id) == Some(&true) {
                    " (a password input)"
                } else {
                    ""
                };
                m.note(format!("set {key} in the gateway's environment: the file asked for it as input {id:?}{asked}"));
            }
            Placeholder::Mixed => {
                m.note(format!("env {key} mixes text and placeholders: set {key} in the gateway's environment to its value"));
                inherit.push(key.clone());
            }
        }
    }
    if !plain.is_empty() {
        let pairs: Vec<String> = plain
            .iter()
            .map(|(k, v)| format!("{} = {}", quoted(k), quoted(v)))
            .collect();
        m.line("env", format!("{{ {} }}", pairs.join(", ")));
    }
    if !inherit.is_empty() {
        m.line("inherit_env", list(&inherit));
    }
}

/// An http server's headers: a bearer `Authorization` becomes `auth` with the token from
/// the gateway's environment; other plain headers stay; secret or placeholder ones are
/// left out with a note.
fn headers_of(m: &mut Module, server: &Map<String, Value>, inputs: &BTreeMap<String, bool>) {
    let Some(headers) = server.get("headers").and_then(Value::as_object) else {
        return;
    };
    let mut kept = Vec::new();
    for (name, value) in headers {
        let value = value.as_str().unwrap_or_default();
        if name.eq_ignore_ascii_case("authorization") {
            let token = value
                .strip_prefix("Bearer ")
                .or_else(|| value.strip_prefix("bearer "));
            let Some(token) = token else {
                m.note(format!("the {name} header is not a bearer token (left out): set it in headers if this file stays private"));
                continue;
            };
            let env = match placeholder(token) {
                Placeholder::Env(env) => env.to_owned(),
                Placeholder::Input(id) => env_name(id),
                _ => format!("{}_TOKEN", env_name(&m.name)),
            };
            m.line(
                "auth",
                format!("{{ kind = \"bearer\", token_env = {} }}", quoted(&env)),
            );
            let from = match placeholder(token) {
                Placeholder::Input(id) => {
                    let asked = if inputs.get(id) == Some(&true) {
                        " (a password input)"
                    } else {
                        ""
                    };
                    format!(" (the file asked for it as input {id:?}{asked})")
                }
                Placeholder::Env(_) => String::new(),
                _ => " (its value was in the file; it is not copied here)".into(),
            };
            m.note(format!(
                "set {env} in the gateway's environment to the token{from}"
            ));
            continue;
        }
        match placeholder(value) {
            Placeholder::Literal if !secret_name(name) => kept.push((name.clone(), value.to_owned())),
            Placeholder::Literal => m.note(format!("the {name} header holds a secret (left out): add it to headers yourself if this file stays private")),
            _ => m.note(format!("the {name} header holds a placeholder, which the gateway does not expand (left out)")),
        }
    }
    if !kept.is_empty() {
        let pairs: Vec<String> = kept
            .iter()
            .map(|(k, v)| format!("{} = {}", quoted(k), quoted(v)))
            .collect();
        m.line("headers", format!("{{ {} }}", pairs.join(", ")));
    }
}

/// The TOML of the servers in `text` (the file `source`).
pub(crate) fn import(text: &str, source: &str) -> Result<String> {
    let json: Value = serde_json::from_str(text)
        .or_else(|_| serde_json::from_str(&strip_jsonc(text)))
        .with_context(|| format!("{source} is not JSON (with or without comments)"))?;
    let (servers, shape) = if let Some(servers) = json.get("mcpServers") {
        (
            servers,
            "an mcpServers file (Claude Desktop, Claude Code, Cursor)",
        )
    } else if let Some(servers) = json.get("servers") {
        (servers, "a VS Code mcp.json")
    } else if let Some(servers) = json.get("mcp").and_then(|m| m.get("servers")) {
        (servers, "VS Code settings (mcp.servers)")
    } else {
        bail!("{source} holds neither mcpServers nor servers: not an MCP client's configuration");
    };
    let servers = servers
        .as_object()
        .with_context(|| format!("{source}: the servers must be an object of name → server"))?;
    let inputs: BTreeMap<String, bool> = json
        .get("inputs")
        .and_then(Value::as_array)
        .map(|inputs| {
            inputs
                .iter()
                .filter_map(|i| {
                    Some((
                        i.get("id")?.as_str()?.to_owned(),
                        i.get("password").and_then(Value::as_bool).unwrap_or(false),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut out = format!(
        "# Imported from {} ({shape}) by mcp-gateway import: {} server(s).\n# Review each module before use. Secrets in env and headers were not copied (the notes say\n# what to set); args and URLs are copied as written: check them for credentials.\n",
        commented(source),
        servers.len()
    );
    let mut taken = BTreeSet::new();
    for (key, server) in servers {
        let Some(server) = server.as_object() else {
            let _ = write!(out, "\n# {key:?}: not an object (left out)\n");
            continue;
        };
        let m = module(key, server, &inputs, &mut taken);
        out.push('\n');
        for note in &m.notes {
            let _ = writeln!(out, "# {}: {}", m.name, commented(note));
        }
        let prefix = if m.disabled { "# " } else { "" };
        let _ = writeln!(out, "{prefix}[[modules]]");
        debug_assert!(m.lines.iter().all(|l| !l.contains('\n')));
        let _ = writeln!(out, "{prefix}name = {}", quoted(&m.name));
        for line in &m.lines {
            let _ = writeln!(out, "{prefix}{line}");
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_trailing_commas_go_but_strings_stay() {
        let text = "{\n // a comment\n \"a\": \"http://x//y\", /* block */ \"b\": [1, 2,],\n}";
        let value: Value = serde_json::from_str(&strip_jsonc(text)).unwrap();
        assert_eq!(value, serde_json::json!({"a": "http://x//y", "b": [1, 2]}));
    }

    #[test]
    fn a_crafted_file_cannot_add_toml_of_its_own() {
        let evil = "\n[[modules]]\nname='pwn'\ntransport='stdio'\ncommand='/bin/sh'\n#";
        let file = serde_json::json!({"mcpServers": {
            "one": {"url": "https://ok.example/mcp", "headers": {format!("X-Api-Key{evil}"): "k", "X-Plain": evil}},
            "two": {"type": "sse", "url": format!("https://old.example/sse{evil}")},
            format!("three{evil}"): {"command": format!("echo{evil}"), "args": [evil], "env": {format!("A{evil}"): evil, "MIXED": "a${env:B}"}, "cwd": evil},
        }});
        let out = import(&file.to_string(), &format!("file{evil}")).unwrap();
        let parsed: toml::Value = toml::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        let modules = parsed["modules"].as_array().unwrap();
        assert_eq!(modules.len(), 2, "the sse block stays commented out: {out}");
        assert!(
            modules.iter().all(|m| m["name"].as_str() != Some("pwn")),
            "{out}"
        );
        assert!(
            !out.lines()
                .any(|l| l.trim_start().starts_with("name='pwn'")),
            "{out}"
        );
        // Values arrive as they were, escaped.
        assert_eq!(modules[1]["args"][0].as_str(), Some(evil), "{out}");
    }

    /// Issue 45, item 7: names were taken for secrets by substring — `MEMORY_FILE_PATH`,
    /// `DATA_PATH` ("PAT") and `AUTHOR` ("AUTH") became secrets.
    #[test]
    fn a_secret_is_named_by_a_word_not_a_substring() {
        for secret in [
            "GITHUB_PERSONAL_ACCESS_TOKEN",
            "OPENAI_API_KEY",
            "X-Api-Key",
            "Authorization",
            "apiKey",
            "DB_PASSWORD",
            "GITHUB_PAT",
            "AWS_SECRET_ACCESS_KEY",
            "SESSION_COOKIE",
        ] {
            assert!(secret_name(secret), "{secret}");
        }
        for plain in [
            "MEMORY_FILE_PATH",
            "DATA_PATH",
            "AUTHOR",
            "PATH",
            "KEYCLOAK_URL",
            "LOG_LEVEL",
            "Patience",
        ] {
            assert!(!secret_name(plain), "{plain}");
        }
    }

    #[test]
    fn secrets_never_reach_the_output() {
        let text = r#"{"mcpServers": {
            "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                       "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_sEcReT123", "LOG_LEVEL": "debug"}},
            "linear": {"url": "https://mcp.linear.app/mcp", "headers": {"Authorization": "Bearer lin_sEcReT456", "X-Api-Key": "k_sEcReT789", "X-Team": "core"}},
            "odd name!": {"type": "sse", "url": "https://old.example/sse"}
        }}"#;
        let out = import(text, "claude.json").unwrap();
        for secret in ["ghp_sEcReT123", "lin_sEcReT456", "k_sEcReT789"] {
            assert!(!out.contains(secret), "{out}");
        }
        assert!(
            out.contains("inherit_env = [\"GITHUB_PERSONAL_ACCESS_TOKEN\"]"),
            "{out}"
        );
        assert!(out.contains("env = { \"LOG_LEVEL\" = \"debug\" }"), "{out}");
        // A server each client ran for itself is run for each caller.
        assert!(out.contains("isolation = \"per_caller\""), "{out}");
        assert!(
            out.contains("auth = { kind = \"bearer\", token_env = \"LINEAR_TOKEN\" }"),
            "{out}"
        );
        assert!(out.contains("headers = { \"X-Team\" = \"core\" }"), "{out}");
        assert!(
            out.contains("# [[modules]]\n# name = \"odd-name\""),
            "{out}"
        );
    }
}
