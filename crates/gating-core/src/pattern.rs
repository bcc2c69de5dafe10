//! How rules and labels name tools: a qualified name, or a prefix.

/// Whether the pattern `pattern` — a qualified name, or a prefix written with a trailing
/// `*` — names `tool`, read as it is written (no [`ToolPattern`] made: for patterns kept as
/// configured text and matched on every call).
pub fn covers(pattern: &str, tool: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => tool.starts_with(prefix),
        None => pattern == tool,
    }
}

/// The tools a rule names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolPattern {
    /// One qualified name.
    Exact(String),
    /// Every name that starts with this (written with a trailing `*`).
    Prefix(String),
}

impl ToolPattern {
    /// `fs__*` is a prefix, anything else an exact name.
    pub fn parse(text: &str) -> ToolPattern {
        match text.strip_suffix('*') {
            Some(prefix) => ToolPattern::Prefix(prefix.to_owned()),
            None => ToolPattern::Exact(text.to_owned()),
        }
    }

    /// Whether it names `tool`.
    pub fn matches(&self, tool: &str) -> bool {
        match self {
            ToolPattern::Exact(name) => name == tool,
            ToolPattern::Prefix(prefix) => tool.starts_with(prefix.as_str()),
        }
    }

    /// As written in the configuration.
    pub fn text(&self) -> String {
        match self {
            ToolPattern::Exact(name) => name.clone(),
            ToolPattern::Prefix(prefix) => format!("{prefix}*"),
        }
    }
}
