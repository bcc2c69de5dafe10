//! MCP tool annotations and the hints they effectively mean.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The `annotations` of an MCP `Tool`, with the spec's camelCase names.
///
/// Every hint is optional on the wire; [`ToolAnnotations::effective`] fills in the MCP
/// defaults. Fields this type does not know are kept in `other` and written back unchanged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// A human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not modify its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates (meaningful when not read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Repeating a call with the same arguments has no further effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool interacts with an open world of external entities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
    /// Annotations this version does not know, passed through losslessly.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// The hints after applying MCP defaults: each is a plain boolean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EffectiveHints {
    /// Does not modify its environment.
    pub read_only: bool,
    /// May perform destructive updates.
    pub destructive: bool,
    /// Repeating a call has no further effect.
    pub idempotent: bool,
    /// Reaches external entities.
    pub open_world: bool,
}

impl EffectiveHints {
    /// The MCP defaults, which are what an unannotated or untrusted tool means: not
    /// read-only, destructive, not idempotent, open world.
    pub const DEFAULTS: EffectiveHints = EffectiveHints {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: true,
    };
}

impl ToolAnnotations {
    /// A tool that only reads and can be repeated safely.
    pub fn read_only_idempotent() -> Self {
        ToolAnnotations {
            read_only_hint: Some(true),
            destructive_hint: Some(false),
            idempotent_hint: Some(true),
            ..ToolAnnotations::default()
        }
    }

    /// A tool that changes or deletes things and is not safe to repeat.
    pub fn destructive() -> Self {
        ToolAnnotations {
            read_only_hint: Some(false),
            destructive_hint: Some(true),
            idempotent_hint: Some(false),
            ..ToolAnnotations::default()
        }
    }

    /// The hints with MCP defaults for the ones not given.
    pub fn effective(&self) -> EffectiveHints {
        let d = EffectiveHints::DEFAULTS;
        EffectiveHints {
            read_only: self.read_only_hint.unwrap_or(d.read_only),
            destructive: self.destructive_hint.unwrap_or(d.destructive),
            idempotent: self.idempotent_hint.unwrap_or(d.idempotent),
            open_world: self.open_world_hint.unwrap_or(d.open_world),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn read_only_idempotent_flips_correct_hints() {
        let a = ToolAnnotations::read_only_idempotent();
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true})
        );
        let e = a.effective();
        assert!(e.read_only && !e.destructive && e.idempotent);
    }

    #[test]
    fn destructive_flips_correct_hints() {
        let a = ToolAnnotations::destructive();
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false})
        );
        let e = a.effective();
        assert!(!e.read_only && e.destructive && !e.idempotent);
    }

    #[test]
    fn missing_hints_take_the_mcp_defaults() {
        assert_eq!(
            ToolAnnotations::default().effective(),
            EffectiveHints::DEFAULTS
        );
        let partial: ToolAnnotations =
            serde_json::from_value(json!({"readOnlyHint": true})).unwrap();
        assert_eq!(
            partial.effective(),
            EffectiveHints {
                read_only: true,
                ..EffectiveHints::DEFAULTS
            }
        );
    }

    #[test]
    fn unknown_annotation_fields_pass_through() {
        let wire = json!({"title": "Delete", "destructiveHint": true, "x-vendor": {"risk": 9}});
        let a: ToolAnnotations = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(a.title.as_deref(), Some("Delete"));
        assert_eq!(serde_json::to_value(&a).unwrap(), wire);
    }
}
