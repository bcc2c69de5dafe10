use proptest::prelude::*;
use serde_json::json;

use super::*;

/// Runs the validator and renders each violation as `field: message` for compact tables.
fn check(spec: &ResponseSpec, payload: Value) -> Result<(), Vec<String>> {
    validate_response(spec, &payload).map_err(|vs| vs.iter().map(ToString::to_string).collect())
}

fn choices(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn validate_confirmation_accepts_bool_rejects_missing() {
    let spec = ResponseSpec::Confirmation;
    assert_eq!(check(&spec, json!({"confirmed": true})), Ok(()));
    assert_eq!(check(&spec, json!({"confirmed": false})), Ok(()));
    let cases = [
        (json!({}), vec!["confirmed: is required"]),
        (
            json!({"confirmed": "yes"}),
            vec!["confirmed: must be a boolean"],
        ),
        (
            json!({"confirmed": 1}),
            vec!["confirmed: must be a boolean"],
        ),
        (
            json!({"confirmed": null}),
            vec!["confirmed: must be a boolean"],
        ),
        (json!(true), vec!["the response must be a JSON object"]),
        (
            json!({"confirmed": true, "note": "x"}),
            vec!["note: is not a field of this response"],
        ),
    ];
    for (payload, want) in cases {
        let want: Vec<String> = want.into_iter().map(String::from).collect();
        assert_eq!(check(&spec, payload.clone()), Err(want), "{payload}");
    }
}

#[test]
fn validate_string_and_choice_types() {
    let string = ResponseSpec::StringInput {
        min_length: Some(2),
        max_length: Some(4),
    };
    let single = ResponseSpec::SingleChoice {
        options: choices(&["red", "blue"]),
    };
    let multi = ResponseSpec::MultiChoice {
        options: choices(&["a", "b", "c"]),
        min_items: Some(1),
        max_items: Some(2),
    };
    type Case<'a> = (&'a ResponseSpec, Value, Result<(), Vec<&'a str>>);
    let cases: Vec<Case<'_>> = vec![
        (&string, json!({"value": "héé"}), Ok(())),
        (
            &string,
            json!({"value": "h"}),
            Err(vec!["value: must have at least 2 characters"]),
        ),
        (
            &string,
            json!({"value": "hello"}),
            Err(vec!["value: must have at most 4 characters"]),
        ),
        (
            &string,
            json!({"value": 12}),
            Err(vec!["value: must be a string"]),
        ),
        (&single, json!({"choice": "red"}), Ok(())),
        (
            &single,
            json!({"choice": "green"}),
            Err(vec!["choice: \"green\" is not one of the offered options"]),
        ),
        (
            &single,
            json!({"value": "red"}),
            Err(vec![
                "choice: is required",
                "value: is not a field of this response",
            ]),
        ),
        (&multi, json!({"choices": ["a", "c"]}), Ok(())),
        (
            &multi,
            json!({"choices": []}),
            Err(vec!["choices: must have at least 1 choices"]),
        ),
        (
            &multi,
            json!({"choices": ["a", "a", "z"]}),
            Err(vec![
                "choices: \"a\" is chosen more than once",
                "choices: \"z\" is not one of the offered options",
                "choices: must have at most 2 choices",
            ]),
        ),
        (
            &multi,
            json!({"choices": ["a", 1]}),
            Err(vec!["choices: must be an array of strings"]),
        ),
        (
            &multi,
            json!({"choices": "a"}),
            Err(vec!["choices: must be an array of strings"]),
        ),
    ];
    for (spec, payload, want) in cases {
        let want = want.map_err(|v| v.into_iter().map(String::from).collect::<Vec<_>>());
        assert_eq!(check(spec, payload.clone()), want, "{payload}");
    }
}

#[test]
fn validate_file_upload_holds_the_file_to_the_specs_limits() {
    let spec = ResponseSpec::FileUpload {
        max_bytes: Some(10),
        content_types: vec!["image/*".into(), "application/pdf".into()],
    };
    let sha = "a".repeat(64);
    let file = |content_type: &str, size: u64| json!({"upload_id": "u1", "file_name": "f", "content_type": content_type, "size_bytes": size, "sha256": sha});
    assert_eq!(check(&spec, file("image/png", 10)), Ok(()));
    assert_eq!(check(&spec, file("application/pdf", 0)), Ok(()));
    assert_eq!(
        check(&spec, file("text/html", 11)),
        Err(vec![
            "content_type: must be one of: image/*, application/pdf".into(),
            "size_bytes: the file must be at most 10 bytes".into(),
        ])
    );
}

#[test]
fn validate_file_upload_reports_every_violation() {
    let spec = ResponseSpec::any_file();
    let sha = "a".repeat(64);
    let good = json!({"upload_id": "u1", "file_name": "r.pdf", "content_type": "application/pdf", "size_bytes": 0, "sha256": sha});
    assert_eq!(check(&spec, good), Ok(()));
    let bad =
        json!({"upload_id": "", "file_name": "r.pdf", "size_bytes": -1, "sha256": "A".repeat(64)});
    assert_eq!(
        check(&spec, bad),
        Err(vec![
            "content_type: is required".into(),
            "size_bytes: must be an integer of zero or more".into(),
            "upload_id: must have at least 1 characters".into(),
            "sha256: must be 64 lowercase hex digits".into(),
        ])
    );
    let float = json!({"upload_id": "u", "file_name": "f", "content_type": "t", "size_bytes": 1.5, "sha256": sha});
    assert_eq!(
        check(&spec, float),
        Err(vec![
            "size_bytes: must be an integer of zero or more".into()
        ])
    );
}

#[test]
fn violations_serialise_with_field_and_code() {
    let errors = validate_response(&ResponseSpec::Confirmation, &json!({})).unwrap_err();
    assert_eq!(
        serde_json::to_value(&errors).unwrap(),
        json!([{"field": "confirmed", "problem": {"code": "missing"}}])
    );
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,8}".prop_map(Value::String),
        prop_oneof![
            Just("confirmed"),
            Just("choice"),
            Just("choices"),
            Just("value"),
            Just("sha256")
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("confirmed".to_owned()),
                    Just("choice".to_owned()),
                    Just("choices".to_owned()),
                    Just("value".to_owned()),
                    Just("size_bytes".to_owned()),
                    Just("sha256".to_owned()),
                    ".{0,6}",
                ],
                inner,
                0..6,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn every_spec() -> Vec<ResponseSpec> {
    vec![
        ResponseSpec::StringInput {
            min_length: Some(1),
            max_length: Some(3),
        },
        ResponseSpec::SingleChoice {
            options: choices(&["a", "confirmed"]),
        },
        ResponseSpec::MultiChoice {
            options: choices(&["a", "b"]),
            min_items: Some(1),
            max_items: Some(1),
        },
        ResponseSpec::Confirmation,
        ResponseSpec::any_file(),
    ]
}

proptest! {
    #[test]
    fn validate_response_never_panics_on_arbitrary_json(payload in arb_json()) {
        for spec in every_spec() {
            // Whatever the payload, the answer is a verdict; an error always names a problem.
            if let Err(violations) = validate_response(&spec, &payload) {
                prop_assert!(!violations.is_empty());
            }
        }
    }
}
