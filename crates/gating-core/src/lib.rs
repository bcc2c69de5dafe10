//! The destructive-tool gate of the MCP gateway, as pure data and functions.
//!
//! - [`ToolAnnotations`]: the MCP hints, with [`EffectiveHints`] after MCP defaults.
//! - [`GatePolicy`]: the operator's per-tool [`GateMode`] and TTL; [`GatePolicy::decide`]
//!   says whether a call is forwarded, gated, or denied.
//! - [`flow`]: flow labels, a caller's [`Flow`] and the lethal-trifecta rule
//!   ([`GatePolicy::with_flow`]).
//! - [`evaluate`]: the truth table from a gated call and its confirmation state to a
//!   [`ConfirmationOutcome`].
//! - [`CallDigest`]: SHA-256 of the canonical JSON of a call's arguments, which a
//!   confirmation is bound to.
//! - The `CallToolResult` shapes the gate answers with: [`held_result`],
//!   [`user_rejected_result`], [`cancelled_result`], [`expired_result`], [`denied_result`],
//!   [`gate_unavailable_result`], [`upstream_error_result`], [`rate_limited_result`].
//!
//! This crate does no IO and keeps no state: it neither stores confirmations nor forwards
//! calls. The store and the HTTP service do that, asking this crate what to do.
//!
//! # Example
//!
//! ```
//! use gating_core::{CallFacts, GateDecision, GatePolicy, HintSource, ToolAnnotations};
//!
//! let destructive: ToolAnnotations = serde_json::from_value(serde_json::json!({"destructiveHint": true}))?;
//! let args = serde_json::json!({"order": 1042});
//! let facts = CallFacts {
//!     tool: "delete_order",
//!     module: "shop",
//!     args: &args,
//!     caller: "billing-agent",
//!     groups: &[],
//!     hints: HintSource::Trusted(&destructive).effective(),
//!     flow: None,
//! };
//! let decided = GatePolicy::default().decide(&facts, HintSource::Trusted(&destructive));
//! assert!(matches!(decided.decision, GateDecision::Confirm(_)), "a person confirms it first");
//! # Ok::<(), serde_json::Error>(())
//! ```

mod annotations;
mod digest;
mod evaluate;
pub mod findings;
pub mod flow;
mod grant;
mod pattern;
pub use pattern::covers;
mod policy;
mod result;
mod surfaces;
mod when;

pub use annotations::{EffectiveHints, ToolAnnotations};
pub use digest::{CallDigest, DigestParseError, canonical_json};
pub use evaluate::{ConfirmationOutcome, evaluate};
pub use findings::{ContentPolicy, FindingAction, FindingKind, Findings};
pub use flow::{Flow, FlowLabel, FlowLabels, FlowPolicy, FlowRule, TrifectaMode};
pub use grant::{GrantScope, GrantTerms, MAX_GRANT_USES, format_duration, parse_duration};
pub use policy::{
    DEFAULT_CONFIRMATION_TTL, Decided, GateDecision, GateMode, GatePolicy, HintSource, HoldReason,
    Listing, PolicyRule, ToolPattern,
};
pub use result::{
    ConfirmationMessage, ResultParts, account_required_result, cancelled_result,
    confirmation_message, confirmation_message_after, confirmation_prompt, denied_result,
    exfiltration_text, expired_result, flow_trail, gate_unavailable_result, held_result,
    held_result_at, held_result_parts, message_shows_arguments, message_without_arguments,
    quarantined_result, quota_result, rate_limited_result, upstream_error_result,
    user_rejected_result, visible, visible_json,
};
pub use surfaces::Surfaces;
pub use when::{
    CallFacts, MAX_ARGS_BYTES, MAX_ARGS_DEPTH, MAX_NESTING, MAX_SOURCE, When, WhenError,
};
