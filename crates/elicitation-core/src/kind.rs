//! The two closed enums of the model and the reasons an elicitation can be cancelled.
//!
//! Their wire labels are the labels of the Postgres enums `mcp_elicitation_type` and
//! `mcp_elicitation_status`; `as_str`, `FromStr` and serde all use the same table.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A label that names no variant of the enum it was parsed as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} label {label:?}")]
pub struct UnknownLabel {
    /// Which enum was being parsed.
    pub what: &'static str,
    /// The label that did not match.
    pub label: String,
}

macro_rules! labelled_enum {
    (
        $(#[$meta:meta])*
        $name:ident, $what:literal {
            $($(#[$vmeta:meta])* $variant:ident => $label:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The wire and database label.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $label,)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownLabel;

            fn from_str(label: &str) -> Result<Self, Self::Err> {
                match label {
                    $($label => Ok($name::$variant),)+
                    _ => Err(UnknownLabel { what: $what, label: label.to_owned() }),
                }
            }
        }
    };
}

labelled_enum! {
    /// What kind of answer an elicitation asks for. Each type has one fixed response shape.
    ElicitationType, "elicitation type" {
        /// `{"value": string}`
        StringInput => "string_input",
        /// `{"choice": string}`, one of the offered options.
        SingleChoice => "single_choice",
        /// `{"choices": [string]}`, distinct offered options.
        MultiChoice => "multi_choice",
        /// `{"confirmed": boolean}`
        Confirmation => "confirmation",
        /// Metadata of an uploaded file.
        FileUpload => "file_upload",
    }
}

labelled_enum! {
    /// Where an elicitation is in its life. Every status but `Pending` is terminal.
    ElicitationStatus, "elicitation status" {
        /// Waiting for an answer.
        Pending => "pending",
        /// A valid answer was recorded.
        Responded => "responded",
        /// Declined or cancelled (see [`CancelReason`]).
        Cancelled => "cancelled",
        /// Nobody answered before `expires_at`.
        Expired => "expired",
        /// Too many invalid answers.
        ValidationFailed => "validation_failed",
    }
}

labelled_enum! {
    /// Why an elicitation was cancelled; kept so that decline, cancel and expiry stay
    /// distinguishable in the record and the audit trail.
    CancelReason, "cancel reason" {
        /// The person explicitly refused (MCP `decline` on a non-confirmation type).
        Declined => "declined",
        /// The person dismissed the prompt without choosing (MCP `cancel`).
        CancelledByPerson => "cancelled_by_person",
        /// The caller that asked withdrew the request.
        CancelledByCaller => "cancelled_by_caller",
    }
}

impl ElicitationStatus {
    /// Whether no further transition is possible.
    pub const fn is_terminal(self) -> bool {
        !matches!(self, ElicitationStatus::Pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_and_status_have_exactly_five_variants() {
        let types: Vec<&str> = ElicitationType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(
            types,
            [
                "string_input",
                "single_choice",
                "multi_choice",
                "confirmation",
                "file_upload"
            ]
        );
        let statuses: Vec<&str> = ElicitationStatus::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            statuses,
            [
                "pending",
                "responded",
                "cancelled",
                "expired",
                "validation_failed"
            ]
        );
    }

    #[test]
    fn labels_round_trip_through_from_str_and_serde() {
        for t in ElicitationType::ALL {
            assert_eq!(t.as_str().parse::<ElicitationType>(), Ok(*t));
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
            let back: ElicitationType = serde_json::from_value(t.as_str().into()).unwrap();
            assert_eq!(back, *t);
        }
        for s in ElicitationStatus::ALL {
            assert_eq!(s.as_str().parse::<ElicitationStatus>(), Ok(*s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for r in CancelReason::ALL {
            assert_eq!(r.as_str().parse::<CancelReason>(), Ok(*r));
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
        }
    }

    #[test]
    fn unknown_label_is_a_typed_error() {
        let err = "Confirmation".parse::<ElicitationType>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown elicitation type label \"Confirmation\""
        );
    }

    #[test]
    fn only_pending_is_not_terminal() {
        let open: Vec<_> = ElicitationStatus::ALL
            .iter()
            .filter(|s| !s.is_terminal())
            .collect();
        assert_eq!(open, [&ElicitationStatus::Pending]);
    }
}
