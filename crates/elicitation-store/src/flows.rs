//! Callers' flows: what each caller's forwarded calls touched (`gating_core::flow`), kept
//! where every instance sharing the store reads them, so a caller's untrusted read on one
//! instance and its private read on another still make the lethal trifecta on a third
//! (docs/guardrails.md).
//!
//! A flow keeps, per label, the newest [`MAX_SOURCES_PER_LABEL`] touches and the newest
//! [`MAX_SEEN`] secrets the agent was shown — by keyed fingerprint, never the secret. A flood
//! of one kind cannot push another kind out: each is bounded on its own.

use async_trait::async_trait;
pub use gating_core::flow::{MAX_SEEN, MAX_SOURCES_PER_LABEL};
use gating_core::{Flow, FlowLabels};
use time::OffsetDateTime;

use crate::{Caller, StoreError};

/// The longest window a flow is read over (the policy's window is at most this): older
/// touches are erased by the sweeper.
pub const MAX_FLOW_WINDOW: time::Duration = time::Duration::days(7);

/// The HKDF info the store's key ring derives its fingerprint key with.
#[cfg(feature = "postgres")]
pub(crate) const FLOW_FINGERPRINT_INFO: &str = "mcp-gateway/flow-fingerprint/v1";

/// One forwarded call's mark on its caller's flow.
#[derive(Debug, Clone, Copy)]
pub struct FlowTouch<'a> {
    /// The qualified tool (or `resource <uri>`, `prompt <name>`) that touched it.
    pub tool: &'a str,
    /// What it brought in (untrusted content, private data).
    pub labels: FlowLabels,
    /// The fingerprints ([`FlowStore::flow_fingerprints`]) of the secrets its result showed
    /// the agent as they are.
    pub seen: &'a [[u8; 16]],
    /// When.
    pub at: OffsetDateTime,
}

/// Where callers' flows are kept.
#[async_trait]
pub trait FlowStore: Send + Sync + 'static {
    /// Adds `touch` to `caller`'s flow (nothing when it touched nothing).
    async fn record_flow(&self, caller: &Caller, touch: FlowTouch<'_>) -> Result<(), StoreError>;

    /// `caller`'s flow: what its calls touched at or after `since`.
    async fn flow(&self, caller: &Caller, since: OffsetDateTime) -> Result<Flow, StoreError>;

    /// The keyed fingerprints of `secret`, the one a flow records first: HMAC-SHA-256 cut to
    /// 128 bits, under a key every instance sharing the store shares (the memory store's is
    /// its own, random) and, after a rotation, under each older one too, so a secret seen
    /// before the rotation is still recognised.
    fn flow_fingerprints(&self, secret: &str) -> Vec<[u8; 16]>;
}

/// `secret`'s fingerprint under `key`.
pub(crate) fn fingerprint(key: &ring::hmac::Key, secret: &str) -> [u8; 16] {
    let tag = ring::hmac::sign(key, secret.as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&tag.as_ref()[..16]);
    out
}

/// A flow from stored marks, oldest first: each `(tool, labels, fingerprint, at)`.
#[cfg(feature = "postgres")]
pub(crate) fn assembled(
    mut marks: Vec<(String, FlowLabels, Option<[u8; 16]>, OffsetDateTime)>,
) -> Flow {
    marks.sort_by_key(|(_, _, _, at)| *at);
    let mut flow = Flow::default();
    for (tool, labels, seen, at) in marks {
        match seen {
            Some(fingerprint) => flow.record_seen(fingerprint, &tool, at),
            None => flow.record(&tool, labels, at),
        }
    }
    flow
}
