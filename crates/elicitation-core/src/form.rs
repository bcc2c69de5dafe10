//! A module's form elicitation (an MCP `requestedSchema`) as one of the stored elicitation
//! types, so a person can answer it out of band when the client cannot, and the stored
//! answer back as the form's `content`.
//!
//! Only a form with exactly one property maps: a boolean is a `confirmation`, a string a
//! `string_input` (its length bounds kept), a string with an `enum` (or `oneOf` of `const`s)
//! a `single_choice`, an array whose items have an `enum` (or `anyOf` of `const`s) a
//! `multi_choice` (its item bounds kept). Anything else does not map (the module gets
//! `cancel`).

use serde_json::{Map, Value};

use crate::ResponseSpec;

/// A one-property form, as a stored elicitation's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormField {
    /// The form's property.
    pub property: String,
    /// The elicitation type (and its options and bounds) it maps to.
    pub spec: ResponseSpec,
}

impl FormField {
    /// The field of a `requestedSchema`, if it maps (see the module docs).
    pub fn of(schema: &Value) -> Option<FormField> {
        let properties = schema.get("properties")?.as_object()?;
        let [(property, definition)] = properties.iter().collect::<Vec<_>>()[..] else {
            return None;
        };
        let bound = |key: &str| {
            definition
                .get(key)
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
        };
        let spec = match definition.get("type")?.as_str()? {
            "boolean" => ResponseSpec::Confirmation,
            "string" => match options(definition, "enum", "oneOf")? {
                Some(options) => ResponseSpec::SingleChoice { options },
                None => ResponseSpec::StringInput {
                    min_length: bound("minLength"),
                    max_length: bound("maxLength"),
                },
            },
            "array" => ResponseSpec::MultiChoice {
                options: options(definition.get("items")?, "enum", "anyOf")??,
                min_items: bound("minItems"),
                max_items: bound("maxItems"),
            },
            _ => return None,
        };
        spec.check().ok()?;
        Some(FormField {
            property: property.clone(),
            spec,
        })
    }

    /// The form's `content` for a stored answer (`{"confirmed": …}`, `{"value": …}`,
    /// `{"choice": …}`, `{"choices": […]}`), if it is one of this field's type.
    pub fn content(&self, response: &Value) -> Option<Value> {
        let key = match self.spec {
            ResponseSpec::Confirmation => "confirmed",
            ResponseSpec::StringInput { .. } => "value",
            ResponseSpec::SingleChoice { .. } => "choice",
            ResponseSpec::MultiChoice { .. } => "choices",
            ResponseSpec::FileUpload { .. } => return None,
        };
        let mut content = Map::new();
        content.insert(self.property.clone(), response.get(key)?.clone());
        Some(Value::Object(content))
    }
}

/// The options of an enum property: its `enum` of strings, or the `const`s of its `titled`
/// list (`oneOf` / `anyOf` of `{const, title}`). `Some(None)`: it has none; `None`: it has
/// some that are not strings.
fn options(definition: &Value, plain: &str, titled: &str) -> Option<Option<Vec<String>>> {
    let values: Vec<&Value> = match (definition.get(plain), definition.get(titled)) {
        (None, None) => return Some(None),
        (Some(Value::Array(values)), _) => values.iter().collect(),
        (None, Some(Value::Array(variants))) => variants
            .iter()
            .map(|v| v.get("const"))
            .collect::<Option<Vec<_>>>()?,
        _ => return None,
    };
    values
        .into_iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect::<Option<Vec<_>>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(property: Value) -> Option<FormField> {
        FormField::of(&json!({"type": "object", "properties": {"x": property}}))
    }

    #[test]
    fn each_one_property_form_maps_to_its_type_with_its_bounds() {
        assert_eq!(
            field(json!({"type": "boolean"})).unwrap().spec,
            ResponseSpec::Confirmation
        );
        assert_eq!(
            field(json!({"type": "string", "minLength": 2, "maxLength": 9}))
                .unwrap()
                .spec,
            ResponseSpec::StringInput {
                min_length: Some(2),
                max_length: Some(9)
            }
        );
        let single = ResponseSpec::SingleChoice {
            options: vec!["a".into(), "b".into()],
        };
        assert_eq!(
            field(json!({"type": "string", "enum": ["a", "b"]}))
                .unwrap()
                .spec,
            single
        );
        assert_eq!(
            field(json!({"type": "string", "oneOf": [{"const": "a", "title": "A"}, {"const": "b", "title": "B"}]}))
                .unwrap()
                .spec,
            single
        );
        assert_eq!(
            field(json!({"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 1}))
                .unwrap()
                .spec,
            ResponseSpec::MultiChoice {
                options: vec!["a".into(), "b".into()],
                min_items: None,
                max_items: Some(1)
            }
        );
    }

    #[test]
    fn other_forms_do_not_map() {
        assert_eq!(field(json!({"type": "number"})), None);
        assert_eq!(field(json!({"type": "string", "enum": [1, 2]})), None);
        assert_eq!(
            field(json!({"type": "string", "enum": []})),
            None,
            "no options"
        );
        assert_eq!(
            field(json!({"type": "array", "items": {"type": "string"}})),
            None
        );
        let two = json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}});
        assert_eq!(FormField::of(&two), None);
        assert_eq!(
            FormField::of(&json!({"type": "object", "properties": {}})),
            None
        );
        assert_eq!(FormField::of(&json!("x")), None);
    }

    #[test]
    fn a_stored_answer_becomes_the_forms_content() {
        let name = field(json!({"type": "string"})).unwrap();
        assert_eq!(
            name.content(&json!({"value": "Ada"})),
            Some(json!({"x": "Ada"}))
        );
        let ok = field(json!({"type": "boolean"})).unwrap();
        assert_eq!(
            ok.content(&json!({"confirmed": false})),
            Some(json!({"x": false}))
        );
        assert_eq!(ok.content(&json!({"value": "no"})), None);
    }
}
