//! Fuzz targets for the elicitation model's readers (docs/reliability.md): a response spec
//! read from JSON, a module's `requestedSchema`, and `validate_response` on any payload.
//! Each must not panic and asserts its invariants. Run by the stable engine in this crate's
//! tests (`mcp-fuzz`) and, with the `fuzzing` feature, by cargo-fuzz (`fuzz/`).

use serde_json::Value;

use crate::{FormField, ResponseSpec, response_schema, validate_response};

/// Input: `{"spec": …, "payload": …, "requestedSchema": …}` (any part may be missing or
/// wrong).
pub fn validate(data: &[u8]) {
    let Ok(input) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if let Some(schema) = input.get("requestedSchema")
        && let Some(field) = FormField::of(schema)
    {
        assert!(
            field.spec.check().is_ok(),
            "a form field with an invalid spec"
        );
        spec_invariants(&field.spec, input.get("payload"));
    }
    let Some(spec) = input
        .get("spec")
        .and_then(|s| serde_json::from_value::<ResponseSpec>(s.clone()).ok())
    else {
        return;
    };
    // A spec round-trips through its JSON.
    let text = serde_json::to_string(&spec).expect("a spec serialises");
    let back: ResponseSpec = serde_json::from_str(&text).expect("a written spec reads back");
    assert_eq!(back, spec, "a spec changed in a round trip");
    if spec.check().is_ok() {
        spec_invariants(&spec, input.get("payload"));
    }
}

fn spec_invariants(spec: &ResponseSpec, payload: Option<&Value>) {
    let schema = response_schema(spec);
    assert!(schema.is_object(), "a response schema is an object");
    let Some(payload) = payload else {
        return;
    };
    let verdict = validate_response(spec, payload);
    if let Err(violations) = &verdict {
        assert!(!violations.is_empty(), "a refusal names what is wrong");
    }
    // The verdict does not depend on how the payload was written.
    let reread: Value = serde_json::from_str(&payload.to_string()).expect("JSON re-reads");
    assert_eq!(
        validate_response(spec, &reread).is_ok(),
        verdict.is_ok(),
        "the verdict changed when the payload was re-read"
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn fuzz_validate_response() {
        mcp_fuzz::explore("validate_response", super::validate);
    }
}
