//! The fixed response shape of each type, as an MCP form-mode `requestedSchema`.
//!
//! The shapes are defined once, in [`fields`]; [`response_schema`] renders them as JSON
//! Schema and [`crate::validate_response`] checks payloads against the same table, so the
//! two cannot drift apart.

use serde_json::{Map, Value, json};

use crate::{ElicitationType, ResponseSpec};

/// The field of a confirmation answer.
pub(crate) const CONFIRMED: &str = "confirmed";

/// The JSON kind a response field must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldKind {
    String,
    Boolean,
    /// A non-negative integer.
    Count,
    StringArray,
}

/// The fields of each type's response; all are required.
pub(crate) const fn fields(kind: ElicitationType) -> &'static [(&'static str, FieldKind)] {
    match kind {
        ElicitationType::StringInput => &[("value", FieldKind::String)],
        ElicitationType::SingleChoice => &[("choice", FieldKind::String)],
        ElicitationType::MultiChoice => &[("choices", FieldKind::StringArray)],
        ElicitationType::Confirmation => &[(CONFIRMED, FieldKind::Boolean)],
        ElicitationType::FileUpload => &[
            ("upload_id", FieldKind::String),
            ("file_name", FieldKind::String),
            ("content_type", FieldKind::String),
            ("size_bytes", FieldKind::Count),
            ("sha256", FieldKind::String),
        ],
    }
}

/// Length of a SHA-256 digest in lowercase hex.
pub(crate) const SHA256_HEX_LEN: u32 = 64;

/// The JSON schema of a valid response to `spec`.
///
/// It is a flat object of primitive properties (string, boolean, integer, and string arrays
/// with an `enum` of items), so it is also a valid MCP form-mode `requestedSchema` and the
/// same elicitation can be sent to a client natively.
pub fn response_schema(spec: &ResponseSpec) -> Value {
    let kind = spec.kind();
    let mut properties = Map::new();
    for (name, field_kind) in fields(kind) {
        let mut property = match field_kind {
            FieldKind::String => json!({"type": "string"}),
            FieldKind::Boolean => json!({"type": "boolean"}),
            FieldKind::Count => json!({"type": "integer", "minimum": 0}),
            FieldKind::StringArray => json!({"type": "array", "items": {"type": "string"}}),
        };
        refine(spec, name, &mut property);
        properties.insert((*name).to_owned(), property);
    }
    let required: Vec<&str> = fields(kind).iter().map(|(name, _)| *name).collect();
    json!({"type": "object", "properties": properties, "required": required})
}

/// Adds the spec's options and bounds, and the type's fixed constraints, to one property.
fn refine(spec: &ResponseSpec, name: &str, property: &mut Value) {
    let set = |property: &mut Value, key: &str, value: Value| {
        if let Some(object) = property.as_object_mut() {
            object.insert(key.to_owned(), value);
        }
    };
    match spec {
        ResponseSpec::StringInput {
            min_length,
            max_length,
        } => {
            if let Some(min) = min_length {
                set(property, "minLength", json!(min));
            }
            if let Some(max) = max_length {
                set(property, "maxLength", json!(max));
            }
        }
        ResponseSpec::SingleChoice { options } => set(property, "enum", json!(options)),
        ResponseSpec::MultiChoice {
            options,
            min_items,
            max_items,
        } => {
            set(
                property,
                "items",
                json!({"type": "string", "enum": options}),
            );
            if let Some(min) = min_items {
                set(property, "minItems", json!(min));
            }
            if let Some(max) = max_items {
                set(property, "maxItems", json!(max));
            }
        }
        ResponseSpec::Confirmation => set(property, "title", json!("Confirm")),
        ResponseSpec::FileUpload { .. } => match name {
            "sha256" => {
                set(property, "minLength", json!(SHA256_HEX_LEN));
                set(property, "maxLength", json!(SHA256_HEX_LEN));
                set(
                    property,
                    "description",
                    json!("SHA-256 of the file, lowercase hex"),
                );
            }
            "size_bytes" => {
                if let ResponseSpec::FileUpload {
                    max_bytes: Some(max),
                    ..
                } = spec
                {
                    set(property, "maximum", json!(max));
                }
            }
            _ => set(property, "minLength", json!(1)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confirmation_schema_requires_confirmed_boolean() {
        let schema = response_schema(&ResponseSpec::Confirmation);
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {"confirmed": {"type": "boolean", "title": "Confirm"}},
                "required": ["confirmed"]
            })
        );
    }

    #[test]
    fn choice_schemas_offer_the_options_as_enums() {
        let single = response_schema(&ResponseSpec::SingleChoice {
            options: vec!["red".into(), "blue".into()],
        });
        assert_eq!(
            single["properties"]["choice"],
            json!({"type": "string", "enum": ["red", "blue"]})
        );
        let multi = response_schema(&ResponseSpec::MultiChoice {
            options: vec!["a".into(), "b".into()],
            min_items: Some(1),
            max_items: Some(2),
        });
        assert_eq!(
            multi["properties"]["choices"],
            json!({"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 1, "maxItems": 2})
        );
        assert_eq!(multi["required"], json!(["choices"]));
    }

    #[test]
    fn string_and_file_schemas_carry_their_bounds() {
        let string = response_schema(&ResponseSpec::StringInput {
            min_length: Some(2),
            max_length: None,
        });
        assert_eq!(
            string["properties"]["value"],
            json!({"type": "string", "minLength": 2})
        );
        let file = response_schema(&ResponseSpec::any_file());
        assert_eq!(
            file["required"],
            json!([
                "upload_id",
                "file_name",
                "content_type",
                "size_bytes",
                "sha256"
            ])
        );
        assert_eq!(
            file["properties"]["size_bytes"],
            json!({"type": "integer", "minimum": 0})
        );
        assert_eq!(file["properties"]["sha256"]["maxLength"], json!(64));
    }

    /// MCP form mode allows only a flat object whose properties are primitives or
    /// string-enum arrays.
    #[test]
    fn every_schema_is_a_flat_mcp_form_schema() {
        let specs = [
            ResponseSpec::StringInput {
                min_length: None,
                max_length: Some(9),
            },
            ResponseSpec::SingleChoice {
                options: vec!["a".into()],
            },
            ResponseSpec::MultiChoice {
                options: vec!["a".into()],
                min_items: None,
                max_items: None,
            },
            ResponseSpec::Confirmation,
            ResponseSpec::any_file(),
        ];
        for spec in specs {
            let schema = response_schema(&spec);
            assert_eq!(schema["type"], "object");
            for (name, property) in schema["properties"].as_object().unwrap() {
                match property["type"].as_str().unwrap() {
                    "string" | "boolean" | "integer" | "number" => {}
                    "array" => assert_eq!(property["items"]["type"], "string", "{name}"),
                    other => panic!("{name} has non-primitive type {other}"),
                }
            }
        }
    }
}
