//! Checking a response payload against its spec, reporting every violation.

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::ResponseSpec;
use crate::schema::{FieldKind, SHA256_HEX_LEN, fields};

/// One way a payload fails its spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{}{problem}", field_prefix(.field))]
pub struct Violation {
    /// The response field at fault; `None` when the payload as a whole is wrong.
    pub field: Option<String>,
    /// What is wrong with it.
    pub problem: Problem,
}

fn field_prefix(field: &Option<String>) -> String {
    field.as_ref().map(|f| format!("{f}: ")).unwrap_or_default()
}

/// The JSON kinds a field can be required to have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Expected {
    /// A string.
    String,
    /// `true` or `false`.
    Boolean,
    /// An integer of zero or more.
    NonNegativeInteger,
    /// An array of strings.
    ArrayOfStrings,
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Expected::String => "a string",
            Expected::Boolean => "a boolean",
            Expected::NonNegativeInteger => "an integer of zero or more",
            Expected::ArrayOfStrings => "an array of strings",
        })
    }
}

/// What is wrong, with the data needed to say so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum Problem {
    /// The payload is not a JSON object.
    #[error("the response must be a JSON object")]
    NotAnObject,
    /// A required field is absent.
    #[error("is required")]
    Missing,
    /// A field the type does not define.
    #[error("is not a field of this response")]
    Unexpected,
    /// The field has the wrong JSON kind.
    #[error("must be {expected}")]
    WrongType {
        /// The kind required.
        expected: Expected,
    },
    /// A string shorter than allowed.
    #[error("must have at least {min} characters")]
    TooShort {
        /// The minimum length in characters.
        min: u32,
    },
    /// A string longer than allowed.
    #[error("must have at most {max} characters")]
    TooLong {
        /// The maximum length in characters.
        max: u32,
    },
    /// A value that is not one of the offered options.
    #[error("{value:?} is not one of the offered options")]
    NotAnOption {
        /// The value given.
        value: String,
    },
    /// The same choice twice.
    #[error("{value:?} is chosen more than once")]
    Duplicate {
        /// The repeated value.
        value: String,
    },
    /// Fewer choices than allowed.
    #[error("must have at least {min} choices")]
    TooFewItems {
        /// The minimum count.
        min: u32,
    },
    /// More choices than allowed.
    #[error("must have at most {max} choices")]
    TooManyItems {
        /// The maximum count.
        max: u32,
    },
    /// A file larger than allowed.
    #[error("the file must be at most {max} bytes")]
    TooLarge {
        /// The limit in bytes.
        max: u64,
    },
    /// A file of a content type the elicitation does not accept.
    #[error("must be one of: {accepted}")]
    ContentTypeNotAccepted {
        /// The accepted types, comma-separated.
        accepted: String,
    },
    /// Not a 64-character lowercase hex string.
    #[error("must be 64 lowercase hex digits")]
    NotSha256Hex,
    /// A note with anything but a decline.
    #[error("goes only with a decline (\"confirmed\": false)")]
    OnlyWithDecline,
    /// Text with control characters (other than line breaks).
    #[error("must not contain control characters")]
    ControlCharacters,
}

/// Longest note a person may give with a decline, in characters.
pub const MAX_NOTE_CHARS: u32 = 1000;

/// Takes the person's note out of a confirmation's `payload` (`{"confirmed": false, "note":
/// "…"}`), leaving the answer as it is recorded (`{"confirmed": false}`). A note is a string
/// of 1 to [`MAX_NOTE_CHARS`] characters, without control characters but line breaks, and
/// goes only with a decline. Other types have no note (a `note` field stays in the payload,
/// where validation refuses it as unexpected).
pub fn take_note(spec: &ResponseSpec, payload: &mut Value) -> Result<Option<String>, Violation> {
    if !matches!(spec, ResponseSpec::Confirmation) {
        return Ok(None);
    }
    let Some(note) = payload.as_object_mut().and_then(|o| o.remove("note")) else {
        return Ok(None);
    };
    let at = |problem| Violation {
        field: Some("note".into()),
        problem,
    };
    let Value::String(note) = note else {
        return Err(at(Problem::WrongType {
            expected: Expected::String,
        }));
    };
    if payload.get(crate::schema::CONFIRMED) != Some(&Value::Bool(false)) {
        return Err(at(Problem::OnlyWithDecline));
    }
    let note = note.trim();
    let chars = note.chars().count();
    if chars == 0 {
        return Err(at(Problem::TooShort { min: 1 }));
    }
    if chars > MAX_NOTE_CHARS as usize {
        return Err(at(Problem::TooLong {
            max: MAX_NOTE_CHARS,
        }));
    }
    if note.chars().any(|c| c.is_control() && c != '\n') {
        return Err(at(Problem::ControlCharacters));
    }
    Ok(Some(note.to_owned()))
}

/// The answer's validation and its note's together: the note, or every violation of both.
pub fn with_note(
    answer: Result<(), Vec<Violation>>,
    note: Result<Option<String>, Violation>,
) -> Result<Option<String>, Vec<Violation>> {
    match (answer, note) {
        (Ok(()), Ok(note)) => Ok(note),
        (Ok(()), Err(v)) => Err(vec![v]),
        (Err(errors), Ok(_)) => Err(errors),
        (Err(mut errors), Err(v)) => {
            errors.push(v);
            Err(errors)
        }
    }
}

/// Checks `payload` against `spec` and returns every violation, in field order.
///
/// Unknown fields are violations too: a response carries exactly its type's fields, so
/// nothing a person typed is silently dropped.
pub fn validate_response(spec: &ResponseSpec, payload: &Value) -> Result<(), Vec<Violation>> {
    let Some(object) = payload.as_object() else {
        return Err(vec![Violation {
            field: None,
            problem: Problem::NotAnObject,
        }]);
    };
    let defined = fields(spec.kind());
    let mut violations = Vec::new();
    let mut at = |field: &str, problem: Problem| {
        violations.push(Violation {
            field: Some(field.to_owned()),
            problem,
        });
    };
    for (name, kind) in defined {
        match object.get(*name) {
            None => at(name, Problem::Missing),
            Some(value) => {
                if let Err(problem) = check_kind(*kind, value) {
                    at(name, problem);
                }
            }
        }
    }
    for name in object.keys() {
        if !defined.iter().any(|(defined, _)| defined == name) {
            at(name, Problem::Unexpected);
        }
    }
    check_constraints(spec, object, &mut at);
    if violations.is_empty() {
        Ok(())
    } else {
        Err(violations)
    }
}

fn check_kind(kind: FieldKind, value: &Value) -> Result<(), Problem> {
    let (ok, expected) = match kind {
        FieldKind::String => (value.is_string(), Expected::String),
        FieldKind::Boolean => (value.is_boolean(), Expected::Boolean),
        FieldKind::Count => (value.is_u64(), Expected::NonNegativeInteger),
        FieldKind::StringArray => (
            value
                .as_array()
                .is_some_and(|items| items.iter().all(Value::is_string)),
            Expected::ArrayOfStrings,
        ),
    };
    if ok {
        Ok(())
    } else {
        Err(Problem::WrongType { expected })
    }
}

/// Per-type checks on fields that already have the right kind.
fn check_constraints(
    spec: &ResponseSpec,
    object: &Map<String, Value>,
    at: &mut impl FnMut(&str, Problem),
) {
    let string = |name: &str| object.get(name).and_then(Value::as_str);
    match spec {
        ResponseSpec::StringInput {
            min_length,
            max_length,
        } => {
            if let Some(value) = string("value") {
                let chars = value.chars().count();
                if let Some(min) = min_length.filter(|min| chars < widen(*min)) {
                    at("value", Problem::TooShort { min });
                }
                if let Some(max) = max_length.filter(|max| chars > widen(*max)) {
                    at("value", Problem::TooLong { max });
                }
            }
        }
        ResponseSpec::SingleChoice { options } => {
            if let Some(choice) = string("choice").filter(|c| !options.iter().any(|o| o == c)) {
                at(
                    "choice",
                    Problem::NotAnOption {
                        value: choice.to_owned(),
                    },
                );
            }
        }
        ResponseSpec::MultiChoice {
            options,
            min_items,
            max_items,
        } => {
            let Some(choices) = object.get("choices").and_then(Value::as_array) else {
                return;
            };
            let mut seen = BTreeSet::new();
            for choice in choices.iter().filter_map(Value::as_str) {
                if !options.iter().any(|o| o == choice) {
                    at(
                        "choices",
                        Problem::NotAnOption {
                            value: choice.to_owned(),
                        },
                    );
                } else if !seen.insert(choice) {
                    at(
                        "choices",
                        Problem::Duplicate {
                            value: choice.to_owned(),
                        },
                    );
                }
            }
            if let Some(min) = min_items.filter(|min| choices.len() < widen(*min)) {
                at("choices", Problem::TooFewItems { min });
            }
            if let Some(max) = max_items.filter(|max| choices.len() > widen(*max)) {
                at("choices", Problem::TooManyItems { max });
            }
        }
        ResponseSpec::Confirmation => {}
        ResponseSpec::FileUpload {
            max_bytes,
            content_types,
        } => {
            for name in ["upload_id", "file_name", "content_type"] {
                if string(name).is_some_and(str::is_empty) {
                    at(name, Problem::TooShort { min: 1 });
                }
            }
            if let Some(given) = string("content_type").filter(|t| !t.is_empty())
                && !crate::spec::content_type_accepted(content_types, given)
            {
                at(
                    "content_type",
                    Problem::ContentTypeNotAccepted {
                        accepted: content_types.join(", "),
                    },
                );
            }
            let size = object.get("size_bytes").and_then(Value::as_u64);
            if let (Some(max), Some(size)) = (max_bytes, size)
                && size > *max
            {
                at("size_bytes", Problem::TooLarge { max: *max });
            }
            if string("sha256").is_some_and(|hex| !is_sha256_hex(hex)) {
                at("sha256", Problem::NotSha256Hex);
            }
        }
    }
}

fn widen(n: u32) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == widen(SHA256_HEX_LEN) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests;
