//! The flows of this instance's callers (kept here; the gate reads and records them in
//! `flow`): what each caller's forwarded calls touched
//! (`gating_core::flow`), within the policy's window, bounded in memory. One flow per caller
//! (its instance key: subject and tenant), across its sessions and both eras
//! (docs/guardrails.md says why not per session). Kept across configuration reloads.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use gating_core::{Flow, FlowLabels};
use time::OffsetDateTime;

/// Most callers' flows one instance keeps; beyond, the flow touched longest ago is dropped.
pub const MAX_FLOWS: usize = 64 * 1024;

/// The callers' flows, and the key their secrets' fingerprints are made with (this
/// process's own, random: a fingerprint means nothing anywhere else).
pub struct Flows {
    inner: Mutex<HashMap<String, Kept>>,
    key: ring::hmac::Key,
}

impl Default for Flows {
    fn default() -> Self {
        Flows {
            inner: Mutex::default(),
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &mcp_random::bytes_or_abort::<32>()),
        }
    }
}

struct Kept {
    flow: Flow,
    touched: OffsetDateTime,
}

impl Flows {
    fn inner(&self) -> std::sync::MutexGuard<'_, HashMap<String, Kept>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `who`'s call of `tool`, labelled `labels`, was forwarded at `now`.
    pub(crate) fn record(&self, who: &str, tool: &str, labels: FlowLabels, now: OffsetDateTime) {
        let mut inner = self.inner();
        if !inner.contains_key(who) && inner.len() >= MAX_FLOWS {
            let oldest = inner
                .iter()
                .min_by_key(|(_, k)| k.touched)
                .map(|(w, _)| w.clone());
            if let Some(oldest) = oldest {
                inner.remove(&oldest);
            }
        }
        let kept = inner.entry(who.to_owned()).or_insert_with(|| Kept {
            flow: Flow::default(),
            touched: now,
        });
        kept.flow.record(tool, labels, now);
        kept.touched = now;
    }

    /// The keyed fingerprint of `secret` (HMAC-SHA-256 under this process's key, cut to 128
    /// bits): what a flow keeps of a secret it saw.
    pub(crate) fn fingerprint(&self, secret: &str) -> [u8; 16] {
        let tag = ring::hmac::sign(&self.key, secret.as_bytes());
        let mut out = [0u8; 16];
        out.copy_from_slice(&tag.as_ref()[..16]);
        out
    }

    /// Records that a result of `tool` showed `who` the secrets whose fingerprints are
    /// `seen`, at `now`.
    pub(crate) fn record_seen(
        &self,
        who: &str,
        tool: &str,
        seen: &[[u8; 16]],
        now: OffsetDateTime,
    ) {
        if seen.is_empty() {
            return;
        }
        self.record(who, tool, FlowLabels::NONE, now);
        let mut inner = self.inner();
        if let Some(kept) = inner.get_mut(who) {
            for fingerprint in seen {
                kept.flow.record_seen(*fingerprint, tool, now);
            }
        }
    }

    /// `who`'s flow as it is at `now`: what its calls touched since `since`.
    pub(crate) fn of(&self, who: &str, since: OffsetDateTime) -> Flow {
        let mut inner = self.inner();
        let Some(kept) = inner.get_mut(who) else {
            return Flow::default();
        };
        kept.flow.forget_before(since);
        if kept.flow.is_empty() {
            inner.remove(who);
            return Flow::default();
        }
        kept.flow.clone()
    }

    /// How many callers' flows are kept.
    pub fn len(&self) -> usize {
        self.inner().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.inner().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gating_core::FlowLabel;
    use time::macros::datetime;

    #[test]
    fn a_flow_is_its_callers_and_bounded_in_callers() {
        let flows = Flows::default();
        let at = datetime!(2026-12-05 10:00 UTC);
        let untrusted = FlowLabels::of([FlowLabel::Untrusted]);
        flows.record("alice", "web__fetch", untrusted, at);
        assert_eq!(flows.of("alice", at).labels(), untrusted);
        assert!(flows.of("bob", at).is_empty(), "another caller's flow");
        // Past the window it is gone, and so is the caller's entry.
        assert!(
            flows
                .of("alice", at + time::Duration::seconds(1))
                .is_empty()
        );
        assert!(flows.is_empty());
        for i in 0..=MAX_FLOWS {
            let i = i64::try_from(i).unwrap();
            flows.record(
                &format!("c{i}"),
                "web__fetch",
                untrusted,
                at + time::Duration::seconds(i),
            );
        }
        assert_eq!(flows.len(), MAX_FLOWS);
        assert!(
            flows.of("c0", at).is_empty(),
            "the one touched longest ago went"
        );
        assert!(!flows.of("c1", at).is_empty());
    }
}
