//! The elicitation model of the MCP gateway, as pure data and functions.
//!
//! An elicitation asks a person for one answer of a fixed shape: one of five
//! [`ElicitationType`]s, each with one response schema ([`response_schema`]) and one
//! validator ([`validate_response`]). Its life is a small state machine on [`Elicitation`]
//! (`respond`, `cancel`, `expire`, `consume`) with five [`ElicitationStatus`]es, where every
//! status but `pending` is terminal. MCP `accept`/`decline`/`cancel` answers map onto it
//! through [`Answer::from_action`].
//!
//! This crate deliberately does no IO: no clock reads (time is a parameter), no randomness
//! (ids take their random bits from the caller), no storage, no network. Stores and
//! transports build on it.
//!
//! # Example
//!
//! ```
//! use elicitation_core::{Elicitation, ElicitationId, ElicitationSpec, ElicitationStatus};
//! use time::macros::datetime;
//!
//! let now = datetime!(2026-12-05 09:00 UTC);
//! let spec = ElicitationSpec::confirmation("Refund order 1042 ($120)?")?;
//! let mut asked = Elicitation::new(ElicitationId::v7(now, [1; 10]), spec, now, time::Duration::minutes(30));
//! asked.respond(serde_json::json!({"confirmed": true}), now + time::Duration::minutes(5))?;
//! assert_eq!(asked.status, ElicitationStatus::Responded);
//! assert_eq!(asked.confirmation_state(), Some(true));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod caller;
mod form;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod id;
mod kind;
mod record;
mod schema;
mod spec;
mod validate;

pub use caller::{Approver, Caller, InvalidCaller, MAX_CALLER_ID_LEN};
pub use form::FormField;
pub use id::ElicitationId;
pub use kind::{CancelReason, ElicitationStatus, ElicitationType, UnknownLabel};
pub use record::{
    Answer, AnswerOutcome, ElicitAction, Elicitation, MAX_ANSWERED_BY_CHARS, MAX_RETRIES,
    RespondOutcome, TransitionError, answered_by, truncate_to_micros,
};
pub use schema::response_schema;
pub use spec::{
    ElicitationSpec, MAX_MESSAGE_CHARS, ResponseSpec, SpecError, content_type_accepted,
};
pub use validate::{
    Expected, MAX_NOTE_CHARS, Problem, Violation, take_note, validate_response, with_note,
};
