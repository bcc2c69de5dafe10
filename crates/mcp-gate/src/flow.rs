//! The gate's side of flows (`gating_core::flow`): a caller's flow read for a call judged
//! on it, and a forwarded call recorded in it. The flows themselves are the store's
//! ([`elicitation_store::FlowStore`]): every instance sharing it reads the same ones, and a
//! reload keeps them.

use elicitation_store::{Caller, FlowTouch, StoreError};
use gating_core::{Flow, FlowLabel, FlowLabels};

impl crate::Gateway {
    /// `caller`'s flow now, as the policy's window has it. One that cannot be read is taken
    /// as the worst ([`Flow::unreadable`]: a call that sends out is held, a rule reading it
    /// keeps the gate shut).
    pub(crate) async fn flow_of(&self, caller: &Caller) -> Flow {
        let now = self.clock.now();
        let window =
            time::Duration::try_from(self.policy.flow().window).unwrap_or(time::Duration::DAY);
        match crate::timed(self.flows.flow(caller, now - window)).await {
            Ok(flow) => flow,
            Err(e) => {
                tracing::warn!(error = %e, "a caller's flow could not be read; it is taken as holding untrusted content and private data, and a rule's `when` reading it fails");
                Flow::unreadable(now)
            }
        }
    }

    /// `caller`'s flow, where a call of `entry` is judged on it (it may send data out, or a
    /// rule naming it reads `flow`); `None` where it is not.
    pub(crate) async fn flow_for(
        &self,
        entry: &mcp_upstream::registry::ToolEntry,
        caller: &Caller,
    ) -> Option<Flow> {
        let hints = crate::gate::hints(entry).effective();
        if !self.policy.reads_flow(&entry.qualified, hints) {
            return None;
        }
        Some(self.flow_of(caller).await)
    }

    /// Where the agent read a secret that a call's `arguments` now carry, if they carry one
    /// its flow saw (compared by fingerprint; arguments too large to scan carry none).
    pub(crate) fn exfiltrates(
        &self,
        flow: &Flow,
        arguments: &serde_json::Value,
    ) -> Option<gating_core::flow::Seen> {
        if !flow.saw_secrets() {
            return None;
        }
        let mut from = None;
        self.policy.content().secrets_in(arguments, &mut |secret| {
            if from.is_none() {
                from = self
                    .flows
                    .flow_fingerprints(secret)
                    .iter()
                    .find_map(|fingerprint| flow.seen(fingerprint))
                    .cloned();
            }
        });
        from
    }

    /// Records in `caller`'s flow that its call of `source` brought `labels` in and showed
    /// it the secrets `seen` (fingerprints). Nothing to record is not a store operation.
    pub(crate) async fn record_flow(
        &self,
        caller: &Caller,
        source: &str,
        labels: FlowLabels,
        seen: &[[u8; 16]],
    ) -> Result<(), StoreError> {
        if labels.is_empty() && seen.is_empty() {
            return Ok(());
        }
        let touch = FlowTouch {
            tool: source,
            labels,
            seen,
            at: self.clock.now(),
        };
        crate::timed(self.flows.record_flow(caller, touch)).await
    }

    /// What a resource read or a prompt (`source`: `resource <uri>`, `prompt <name>`) brings
    /// into its caller's flow: the untrusted content or private data a `[[flow.tools]]` entry
    /// naming it gives (`tool = "resource file:///srv/private/*"`); nothing otherwise (they
    /// carry no hints to default from).
    pub(crate) fn brought_by_name(&self, source: &str) -> FlowLabels {
        let hints = gating_core::HintSource::Untrusted.effective();
        match self.policy.flow().labels(source, hints) {
            (labels, gating_core::flow::LabelSource::Rule(_)) => FlowLabels::of(
                labels
                    .iter()
                    .filter(|l| matches!(l, FlowLabel::Untrusted | FlowLabel::Private)),
            ),
            (_, gating_core::flow::LabelSource::Hints) => FlowLabels::NONE,
        }
    }

    /// What a forwarded call of `entry` brings into its caller's flow: the untrusted content
    /// or private data its tool is labelled with.
    pub(crate) fn brought_in(&self, entry: &mcp_upstream::registry::ToolEntry) -> FlowLabels {
        let hints = crate::gate::hints(entry).effective();
        let (labels, _) = self.policy.flow().labels(&entry.qualified, hints);
        FlowLabels::of(
            labels
                .iter()
                .filter(|l| matches!(l, FlowLabel::Untrusted | FlowLabel::Private)),
        )
    }
}
