use proptest::prelude::*;
use serde_json::json;

use super::*;

fn digest_of_text(text: &str) -> CallDigest {
    CallDigest::of(&serde_json::from_str(text).unwrap())
}

/// Known answers computed outside Rust (Python's hashlib over the canonical text).
#[test]
fn digest_matches_an_independent_sha256_of_the_canonical_text() {
    let text = r#"{ "c": {"e": "x\"y", "d": -2.5}, "b": [true, null, "\u00e9"], "a": 1 }"#;
    let value: Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        canonical_json(&value),
        r#"{"a":1,"b":[true,null,"é"],"c":{"d":-2.5,"e":"x\"y"}}"#
    );
    assert_eq!(
        CallDigest::of(&value).to_string(),
        "fc80f8202ee42274fdbe968c963529a3ed40521221b8e292ee4a589d9d71d06d"
    );
    assert_eq!(
        CallDigest::of_arguments(None).to_string(),
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
        "absent arguments digest as {{}}"
    );
}

#[test]
fn digests_ignore_key_order_and_whitespace() {
    let a = digest_of_text(r#"{"path":"/tmp/x","opts":{"force":true,"depth":2}}"#);
    let b = digest_of_text(
        "{\n  \"opts\" : { \"depth\" : 2 , \"force\" : true },\n  \"path\" : \"/tmp/x\"\n}",
    );
    assert_eq!(a, b);
}

#[test]
fn digests_differ_for_different_arguments() {
    let base = json!({"path": "/tmp/x", "recursive": false});
    let others = [
        json!({"path": "/tmp/y", "recursive": false}),
        json!({"path": "/tmp/x", "recursive": true}),
        json!({"path": "/tmp/x"}),
        json!({"path": "/tmp/x", "recursive": false, "extra": null}),
        json!([{"path": "/tmp/x", "recursive": false}]),
        json!({"path": ["/tmp/x"], "recursive": false}),
        json!({"n": 1}),
    ];
    let base_digest = CallDigest::of(&base);
    for other in &others {
        assert_ne!(CallDigest::of(other), base_digest, "{other}");
    }
    assert_ne!(
        CallDigest::of(&json!({"n": 1})),
        CallDigest::of(&json!({"n": 1.0}))
    );
}

#[test]
fn digest_text_round_trips_and_rejects_garbage() {
    let d = CallDigest::of(&json!({"x": 1}));
    assert_eq!(d.to_string().parse::<CallDigest>(), Ok(d));
    assert_eq!(serde_json::to_value(d).unwrap(), json!(d.to_string()));
    for bad in ["", "abc", &"g".repeat(64), &"é".repeat(32)] {
        assert_eq!(bad.parse::<CallDigest>(), Err(DigestParseError), "{bad}");
    }
    assert_eq!(CallDigest::from_bytes(*d.as_bytes()), d);
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        // Quarters are exact in binary, so text round trips cannot blur them.
        (-1_000_000i32..1_000_000).prop_map(|n| json!(f64::from(n) / 4.0)),
        "\\PC{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("\\PC{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A tiny LCG: reproducible shuffles from proptest's seed.
fn next(seed: &mut u64) -> u64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *seed >> 33
}

/// Writes `value` as JSON text with every object's keys in an order chosen by `seed` and
/// arbitrary whitespace, as another client might send it.
fn write_shuffled(value: &Value, seed: &mut u64, out: &mut String) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(if next(seed).is_multiple_of(2) {
                        ","
                    } else {
                        " ,\n "
                    });
                }
                write_shuffled(item, seed, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            for i in (1..entries.len()).rev() {
                let j = usize::try_from(next(seed)).unwrap() % (i + 1);
                entries.swap(i, j);
            }
            out.push_str("{ ");
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(",\t");
                }
                out.push_str(&serde_json::to_string(key).unwrap());
                out.push_str(" : ");
                write_shuffled(item, seed, out);
            }
            out.push_str("\n}");
        }
        other => out.push_str(&other.to_string()),
    }
}

proptest! {
    #[test]
    fn digest_is_stable_under_key_permutation(value in arb_json(), seed in any::<u64>()) {
        let mut seed = seed;
        let mut text = String::new();
        write_shuffled(&value, &mut seed, &mut text);
        let reparsed: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(CallDigest::of(&reparsed), CallDigest::of(&value));
        prop_assert_eq!(canonical_json(&reparsed), canonical_json(&value));
        // The canonical text is itself JSON for the same value.
        let canonical: Value = serde_json::from_str(&canonical_json(&value)).unwrap();
        prop_assert_eq!(canonical, value);
    }
}
