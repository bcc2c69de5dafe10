//! The memory store's flows: kept in this process only, at most [`MAX_MEMORY_FLOWS`]
//! callers' (beyond, the flow touched longest ago is dropped), each bounded by
//! `gating_core::Flow` itself. Fingerprints are made with a key of this process's own.

use std::collections::HashMap;
use std::sync::PoisonError;

use async_trait::async_trait;
use gating_core::Flow;
use time::OffsetDateTime;

use super::MemoryStore;
use crate::flows::{FlowStore, FlowTouch, fingerprint};
use crate::{Caller, StoreError};

/// Most callers' flows the memory store keeps.
pub const MAX_MEMORY_FLOWS: usize = 64 * 1024;

/// Every caller's flow, with when it was last touched.
pub(super) struct Flows {
    by_caller: HashMap<Caller, (Flow, OffsetDateTime)>,
    key: ring::hmac::Key,
}

impl Default for Flows {
    fn default() -> Self {
        Flows {
            by_caller: HashMap::new(),
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &mcp_random::bytes_or_abort::<32>()),
        }
    }
}

#[async_trait]
impl FlowStore for MemoryStore {
    async fn record_flow(&self, caller: &Caller, touch: FlowTouch<'_>) -> Result<(), StoreError> {
        if touch.labels.is_empty() && touch.seen.is_empty() {
            return Ok(());
        }
        let mut flows = self.flows.lock().unwrap_or_else(PoisonError::into_inner);
        if !flows.by_caller.contains_key(caller) && flows.by_caller.len() >= MAX_MEMORY_FLOWS {
            let oldest = flows
                .by_caller
                .iter()
                .min_by_key(|(_, (_, touched))| *touched)
                .map(|(c, _)| c.clone());
            if let Some(oldest) = oldest {
                flows.by_caller.remove(&oldest);
            }
        }
        let (flow, touched) = flows
            .by_caller
            .entry(caller.clone())
            .or_insert_with(|| (Flow::default(), touch.at));
        flow.record(touch.tool, touch.labels, touch.at);
        for seen in touch.seen {
            flow.record_seen(*seen, touch.tool, touch.at);
        }
        *touched = (*touched).max(touch.at);
        Ok(())
    }

    async fn flow(&self, caller: &Caller, since: OffsetDateTime) -> Result<Flow, StoreError> {
        let mut flows = self.flows.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((flow, _)) = flows.by_caller.get_mut(caller) else {
            return Ok(Flow::default());
        };
        let mut read = flow.clone();
        read.forget_before(since);
        // Nothing left even over the longest window: the caller's entry goes.
        flow.forget_before(self.clock.now() - crate::flows::MAX_FLOW_WINDOW);
        if flow.is_empty() {
            flows.by_caller.remove(caller);
        }
        Ok(read)
    }

    fn flow_fingerprints(&self, secret: &str) -> Vec<[u8; 16]> {
        let flows = self.flows.lock().unwrap_or_else(PoisonError::into_inner);
        vec![fingerprint(&flows.key, secret)]
    }
}
