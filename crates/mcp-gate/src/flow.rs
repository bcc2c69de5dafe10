//! The gate's side of flows (`gating_core::flow`): a caller's flow read for a call judged
//! on it, and a forwarded call recorded in it. The flows themselves are kept in
//! [`Flows`], across configuration reloads.

pub use crate::flow_state::{Flows, MAX_FLOWS};

impl crate::Gateway {
    /// The callers' flows this gateway keeps (to hand to the gateway that replaces it on a
    /// reload: [`crate::Gateway::with_flows`]).
    pub fn flows(&self) -> &std::sync::Arc<Flows> {
        &self.flows
    }

    /// Keeps its callers' flows in `flows` (a reloaded gateway keeps its predecessor's).
    #[must_use]
    pub fn with_flows(mut self, flows: std::sync::Arc<Flows>) -> Self {
        self.flows = flows;
        self
    }

    /// `who`'s flow now, as the policy's window has it.
    pub(crate) fn flow_of(&self, who: &str) -> gating_core::Flow {
        let window =
            time::Duration::try_from(self.policy.flow().window).unwrap_or(time::Duration::DAY);
        self.flows.of(who, self.clock.now() - window)
    }

    /// Where the agent read a secret that a call's `arguments` now carry, if they carry one
    /// its flow saw (compared by fingerprint; arguments too large to scan carry none).
    pub(crate) fn exfiltrates(
        &self,
        flow: &gating_core::Flow,
        arguments: &serde_json::Value,
    ) -> Option<gating_core::flow::Seen> {
        if !flow.saw_secrets() {
            return None;
        }
        let mut from = None;
        self.policy.content().secrets_in(arguments, &mut |secret| {
            if from.is_none() {
                from = flow.seen(&self.flows.fingerprint(secret)).cloned();
            }
        });
        from
    }

    /// Records a forwarded call of `entry` by `who` in its flow, when its tool brings
    /// untrusted content or private data in.
    pub(crate) fn touch_flow(&self, who: &str, entry: &mcp_upstream::registry::ToolEntry) {
        let hints = crate::gate::hints(entry).effective();
        let (labels, _) = self.policy.flow().labels(&entry.qualified, hints);
        if labels.has(gating_core::FlowLabel::Untrusted)
            || labels.has(gating_core::FlowLabel::Private)
        {
            self.flows
                .record(who, &entry.qualified, labels, self.clock.now());
        }
    }
}
