//! What an elicitation asks: the message shown to the person and the per-type response spec.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::ElicitationType;

/// Longest accepted message, in characters. Messages are shown to a person; longer text is
/// a caller bug, and the bound keeps stored rows small.
pub const MAX_MESSAGE_CHARS: usize = 4096;

/// The response shape an elicitation asks for, with the options and constraints of its type.
///
/// The type is carried by the variant, so a spec can never disagree with its type. It
/// serialises as `{"type": "<label>", ...}` with the same labels as [`ElicitationType`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseSpec {
    /// `{"value": string}` with optional length bounds (in characters).
    StringInput {
        /// Fewest characters accepted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_length: Option<u32>,
        /// Most characters accepted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_length: Option<u32>,
    },
    /// `{"choice": string}`, one of `options`.
    SingleChoice {
        /// The offered options, non-empty and distinct.
        options: Vec<String>,
    },
    /// `{"choices": [string]}`, distinct members of `options`, with optional count bounds.
    MultiChoice {
        /// The offered options, non-empty and distinct.
        options: Vec<String>,
        /// Fewest choices accepted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_items: Option<u32>,
        /// Most choices accepted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_items: Option<u32>,
    },
    /// `{"confirmed": boolean}`
    Confirmation,
    /// `{"upload_id", "file_name", "content_type", "size_bytes", "sha256"}`, with an optional
    /// size limit and the content types accepted.
    FileUpload {
        /// Largest file accepted, in bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_bytes: Option<u64>,
        /// The content types accepted, each `type/subtype` or `type/*` (lowercase); empty:
        /// any.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        content_types: Vec<String>,
    },
}

impl ResponseSpec {
    /// The elicitation type this spec belongs to.
    pub const fn kind(&self) -> ElicitationType {
        match self {
            ResponseSpec::StringInput { .. } => ElicitationType::StringInput,
            ResponseSpec::SingleChoice { .. } => ElicitationType::SingleChoice,
            ResponseSpec::MultiChoice { .. } => ElicitationType::MultiChoice,
            ResponseSpec::Confirmation => ElicitationType::Confirmation,
            ResponseSpec::FileUpload { .. } => ElicitationType::FileUpload,
        }
    }

    /// Checks the spec is satisfiable: options present and distinct, bounds ordered.
    pub fn check(&self) -> Result<(), SpecError> {
        match self {
            ResponseSpec::StringInput {
                min_length,
                max_length,
            } => check_bounds(*min_length, *max_length),
            ResponseSpec::SingleChoice { options } => check_options(options),
            ResponseSpec::MultiChoice {
                options,
                min_items,
                max_items,
            } => {
                check_options(options)?;
                check_bounds(*min_items, *max_items)?;
                match min_items {
                    Some(min) if usize::try_from(*min).unwrap_or(usize::MAX) > options.len() => {
                        Err(SpecError::MinItemsAboveOptions {
                            min_items: *min,
                            options: options.len(),
                        })
                    }
                    _ => Ok(()),
                }
            }
            ResponseSpec::Confirmation => Ok(()),
            ResponseSpec::FileUpload { content_types, .. } => {
                let mut seen = BTreeSet::new();
                for pattern in content_types {
                    if !is_content_type_pattern(pattern) {
                        return Err(SpecError::BadContentType {
                            pattern: pattern.clone(),
                        });
                    }
                    if !seen.insert(pattern.as_str()) {
                        return Err(SpecError::DuplicateOption {
                            option: pattern.clone(),
                        });
                    }
                }
                Ok(())
            }
        }
    }

    /// A file upload accepting any file of any size.
    pub const fn any_file() -> Self {
        ResponseSpec::FileUpload {
            max_bytes: None,
            content_types: Vec::new(),
        }
    }
}

/// A lowercase MIME token (RFC 9110 `token`, at most 63 characters).
fn is_mime_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$&-^_.+".contains(&b))
}

/// `type/subtype` or `type/*`, lowercase, without parameters.
fn is_content_type_pattern(pattern: &str) -> bool {
    match pattern.split_once('/') {
        Some((kind, "*")) => is_mime_token(kind),
        Some((kind, sub)) => is_mime_token(kind) && is_mime_token(sub),
        None => false,
    }
}

/// Whether `content_type` (a recorded `type/subtype`) is accepted by `patterns` (empty:
/// everything is).
pub fn content_type_accepted(patterns: &[String], content_type: &str) -> bool {
    patterns.is_empty()
        || patterns
            .iter()
            .any(|pattern| match pattern.strip_suffix("/*") {
                Some(kind) => content_type
                    .split_once('/')
                    .is_some_and(|(k, _)| k.eq_ignore_ascii_case(kind)),
                None => pattern.eq_ignore_ascii_case(content_type),
            })
}

fn check_bounds(min: Option<u32>, max: Option<u32>) -> Result<(), SpecError> {
    match (min, max) {
        (Some(min), Some(max)) if min > max => Err(SpecError::MinAboveMax { min, max }),
        _ => Ok(()),
    }
}

fn check_options(options: &[String]) -> Result<(), SpecError> {
    if options.is_empty() {
        return Err(SpecError::NoOptions);
    }
    let mut seen = BTreeSet::new();
    for option in options {
        if option.is_empty() {
            return Err(SpecError::EmptyOption);
        }
        if !seen.insert(option.as_str()) {
            return Err(SpecError::DuplicateOption {
                option: option.clone(),
            });
        }
    }
    Ok(())
}

/// A spec that cannot be answered as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The message is empty or only whitespace.
    #[error("the message is empty")]
    EmptyMessage,
    /// The message is longer than [`MAX_MESSAGE_CHARS`].
    #[error("the message has {chars} characters, more than {MAX_MESSAGE_CHARS}")]
    MessageTooLong {
        /// Its length in characters.
        chars: usize,
    },
    /// A choice type offers no options.
    #[error("a choice elicitation needs at least one option")]
    NoOptions,
    /// An offered option is the empty string.
    #[error("an option is empty")]
    EmptyOption,
    /// The same option is offered twice.
    #[error("option {option:?} is offered twice")]
    DuplicateOption {
        /// The repeated option.
        option: String,
    },
    /// A lower bound is above its upper bound.
    #[error("minimum {min} is above maximum {max}")]
    MinAboveMax {
        /// The lower bound.
        min: u32,
        /// The upper bound.
        max: u32,
    },
    /// An accepted content type that is not `type/subtype` or `type/*` in lowercase.
    #[error("content type {pattern:?} is not a lowercase type/subtype or type/*")]
    BadContentType {
        /// The pattern as given.
        pattern: String,
    },
    /// More choices are required than there are options.
    #[error("min_items {min_items} is more than the {options} options offered")]
    MinItemsAboveOptions {
        /// The required number of choices.
        min_items: u32,
        /// How many options are offered.
        options: usize,
    },
}

/// What an elicitation asks: a message for the person and the response it expects.
///
/// Only constructible through [`ElicitationSpec::new`] (or deserialisation, which runs the
/// same checks), so every spec in the system is answerable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "SpecRepr")]
pub struct ElicitationSpec {
    message: String,
    response: ResponseSpec,
}

#[derive(Deserialize)]
struct SpecRepr {
    message: String,
    response: ResponseSpec,
}

impl TryFrom<SpecRepr> for ElicitationSpec {
    type Error = SpecError;

    fn try_from(repr: SpecRepr) -> Result<Self, Self::Error> {
        ElicitationSpec::new(repr.message, repr.response)
    }
}

impl ElicitationSpec {
    /// A checked spec.
    pub fn new(message: impl Into<String>, response: ResponseSpec) -> Result<Self, SpecError> {
        let message = message.into();
        if message.trim().is_empty() {
            return Err(SpecError::EmptyMessage);
        }
        let chars = message.chars().count();
        if chars > MAX_MESSAGE_CHARS {
            return Err(SpecError::MessageTooLong { chars });
        }
        response.check()?;
        Ok(ElicitationSpec { message, response })
    }

    /// A confirmation with the given prompt.
    pub fn confirmation(message: impl Into<String>) -> Result<Self, SpecError> {
        ElicitationSpec::new(message, ResponseSpec::Confirmation)
    }

    /// The text shown to the person.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The expected response.
    pub fn response(&self) -> &ResponseSpec {
        &self.response
    }

    /// The elicitation type.
    pub const fn kind(&self) -> ElicitationType {
        self.response.kind()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn spec_serialises_with_the_type_label() {
        let specs = [
            ResponseSpec::StringInput {
                min_length: Some(1),
                max_length: None,
            },
            ResponseSpec::SingleChoice {
                options: options(&["a"]),
            },
            ResponseSpec::MultiChoice {
                options: options(&["a", "b"]),
                min_items: None,
                max_items: Some(2),
            },
            ResponseSpec::Confirmation,
            ResponseSpec::any_file(),
            ResponseSpec::FileUpload {
                max_bytes: Some(1024),
                content_types: options(&["image/*", "application/pdf"]),
            },
        ];
        for spec in specs {
            let json = serde_json::to_value(&spec).unwrap();
            assert_eq!(json["type"], spec.kind().as_str());
            let back: ResponseSpec = serde_json::from_value(json).unwrap();
            assert_eq!(back, spec);
        }
    }

    #[test]
    fn unanswerable_specs_are_rejected() {
        let cases = [
            (
                ElicitationSpec::new(" ", ResponseSpec::Confirmation),
                SpecError::EmptyMessage,
            ),
            (
                ElicitationSpec::new(
                    "x".repeat(MAX_MESSAGE_CHARS + 1),
                    ResponseSpec::Confirmation,
                ),
                SpecError::MessageTooLong {
                    chars: MAX_MESSAGE_CHARS + 1,
                },
            ),
            (
                ElicitationSpec::new("pick", ResponseSpec::SingleChoice { options: vec![] }),
                SpecError::NoOptions,
            ),
            (
                ElicitationSpec::new(
                    "pick",
                    ResponseSpec::SingleChoice {
                        options: options(&["a", ""]),
                    },
                ),
                SpecError::EmptyOption,
            ),
            (
                ElicitationSpec::new(
                    "pick",
                    ResponseSpec::MultiChoice {
                        options: options(&["a", "b", "a"]),
                        min_items: None,
                        max_items: None,
                    },
                ),
                SpecError::DuplicateOption { option: "a".into() },
            ),
            (
                ElicitationSpec::new(
                    "say",
                    ResponseSpec::StringInput {
                        min_length: Some(5),
                        max_length: Some(2),
                    },
                ),
                SpecError::MinAboveMax { min: 5, max: 2 },
            ),
            (
                ElicitationSpec::new(
                    "pick",
                    ResponseSpec::MultiChoice {
                        options: options(&["a", "b"]),
                        min_items: Some(3),
                        max_items: None,
                    },
                ),
                SpecError::MinItemsAboveOptions {
                    min_items: 3,
                    options: 2,
                },
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, Err(want));
        }
        for bad in [
            "image",
            "Image/png",
            "image/png; q=1",
            "*/*",
            "/png",
            "a b/c",
        ] {
            let spec = ResponseSpec::FileUpload {
                max_bytes: None,
                content_types: options(&[bad]),
            };
            assert_eq!(
                spec.check(),
                Err(SpecError::BadContentType {
                    pattern: bad.into()
                }),
                "{bad}"
            );
        }
        let twice = ResponseSpec::FileUpload {
            max_bytes: None,
            content_types: options(&["text/plain", "text/plain"]),
        };
        assert!(matches!(
            twice.check(),
            Err(SpecError::DuplicateOption { .. })
        ));
    }

    #[test]
    fn content_types_match_exactly_or_by_wildcard() {
        let accepted = options(&["image/*", "application/pdf"]);
        assert!(content_type_accepted(&accepted, "image/png"));
        assert!(content_type_accepted(&accepted, "application/pdf"));
        assert!(!content_type_accepted(&accepted, "application/pdfx"));
        assert!(!content_type_accepted(&accepted, "imagex/png"));
        assert!(!content_type_accepted(&accepted, "text/html"));
        assert!(content_type_accepted(&[], "text/html"));
    }

    #[test]
    fn a_bare_file_upload_spec_still_reads() {
        let spec: ResponseSpec =
            serde_json::from_value(serde_json::json!({"type": "file_upload"})).unwrap();
        assert_eq!(spec, ResponseSpec::any_file());
        assert_eq!(
            serde_json::to_value(&spec).unwrap(),
            serde_json::json!({"type": "file_upload"})
        );
    }

    #[test]
    fn deserialising_runs_the_same_checks() {
        let bad = serde_json::json!({"message": "pick", "response": {"type": "single_choice", "options": []}});
        let err = serde_json::from_value::<ElicitationSpec>(bad).unwrap_err();
        assert!(err.to_string().contains("at least one option"), "{err}");
        let good = serde_json::json!({"message": "ok?", "response": {"type": "confirmation"}});
        let spec: ElicitationSpec = serde_json::from_value(good).unwrap();
        assert_eq!(spec.kind(), ElicitationType::Confirmation);
    }
}
