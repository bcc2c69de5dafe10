//! The strings of a JSON text, each handed to a check as it is read: no value is built, no
//! key or string is kept (an escaped one is unescaped into one buffer of the reader's). The
//! content scan asks this first; only a result that holds something is read into a value to
//! be redacted.

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The key by which serde_json (feature `raw_value`, on in this workspace) reads an object as
/// the JSON text of its one string: read into a value, `{KEY: "{\"x\":\"\\u0041…\"}"}` is
/// `{"x": "A…"}`, which no string of the text spells. This reader does not unwrap it: a text
/// that has it is said to hold something, and goes the long way (read into a value, where it
/// is unwrapped, then scanned).
const SERDE_RAW_VALUE: &str = "$serde_json::private::RawValue";

/// Whether `check` is true of any string of `json` (keys included), stopping the checks at the
/// first; `None` when `json` cannot be read (malformed, or nested deeper than the reader
/// goes). A string that is serde_json's raw-value key counts as found.
pub(super) fn finds_in(json: &str, check: &mut dyn FnMut(&str) -> bool) -> Option<bool> {
    let check = &mut |text: &str| text == SERDE_RAW_VALUE || check(text);
    let mut found = false;
    let mut reader = serde_json::Deserializer::from_str(json);
    Strings {
        check,
        found: &mut found,
    }
    .deserialize(&mut reader)
    .ok()?;
    reader.end().ok()?;
    Some(found)
}

struct Strings<'a> {
    check: &'a mut dyn FnMut(&str) -> bool,
    found: &'a mut bool,
}

impl Strings<'_> {
    fn text(&mut self, text: &str) {
        if !*self.found && (self.check)(text) {
            *self.found = true;
        }
    }

    fn again(&mut self) -> Strings<'_> {
        Strings {
            check: &mut *self.check,
            found: &mut *self.found,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Strings<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strings<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(mut self, text: &str) -> Result<(), E> {
        self.text(text);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut items: A) -> Result<(), A::Error> {
        while items.next_element_seed(self.again())?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut members: A) -> Result<(), A::Error> {
        // A key is a string like any other (`Strings` reads it as one).
        while members.next_key_seed(self.again())?.is_some() {
            members.next_value_seed(self.again())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(json: &str) -> Option<Vec<String>> {
        let mut seen = Vec::new();
        finds_in(json, &mut |text| {
            seen.push(text.to_owned());
            false
        })
        .map(|_| seen)
    }

    #[test]
    fn every_string_is_read_keys_and_escapes_included_and_nothing_else() {
        assert_eq!(
            strings(
                r#"{"content":[{"type":"text","text":"ok \u00e9\n"}],"n":1.5,"b":[true,null]}"#
            ),
            Some(
                ["content", "type", "text", "text", "ok é\n", "n", "b"]
                    .map(String::from)
                    .to_vec()
            )
        );
        assert_eq!(strings("\"alone\""), Some(vec!["alone".to_owned()]));
        for unreadable in ["{", "[1,]", "{} {}", &"[".repeat(200)] {
            assert_eq!(strings(unreadable), None, "{unreadable}");
        }
    }

    /// serde_json reads `{"$serde_json::private::RawValue": TEXT}` into a value as TEXT's
    /// JSON: what TEXT escapes is spelled by no string here, so such a text is never passed
    /// as holding nothing.
    #[test]
    fn serde_jsons_raw_value_wrapper_is_never_passed_as_holding_nothing() {
        let wrapped = r#"{"s":{"$serde_json::private::RawValue":"{\"x\":\"\\u0041KIA\"}"}}"#;
        let read: serde_json::Value = serde_json::from_str(wrapped).unwrap();
        assert_eq!(read["s"]["x"], "AKIA", "serde_json unwraps it: {read}");
        assert_eq!(
            finds_in(wrapped, &mut |text| text.contains("AKIA")),
            Some(true)
        );
    }

    #[test]
    fn the_first_string_the_check_takes_ends_the_checks() {
        let mut asked = 0;
        let found = finds_in(r#"["a","secret","b"]"#, &mut |text| {
            asked += 1;
            text == "secret"
        });
        assert_eq!((found, asked), (Some(true), 2));
    }
}
