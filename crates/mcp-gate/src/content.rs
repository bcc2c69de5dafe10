//! The content policy applied to what a module answered (`gating_core::findings`): its
//! secrets, personal data and hidden instructions redacted, labelled into the caller's flow,
//! the whole result held for a person (`held_result`) or withheld; what was found recorded
//! by kind and count, never by value.

use std::sync::PoisonError;

use gating_core::{ContentPolicy, FindingAction, FindingKind, Findings, FlowLabels};
use mcp_auth::Principal;
use mcp_upstream::registry::ToolEntry;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::Gateway;

/// `text` as a tool's error result, in place of what a module answered.
fn withheld(text: &str, raw: Box<RawValue>) -> Box<RawValue> {
    let withheld = mcp_wire::tools::text_result(text, None, true);
    serde_json::value::to_raw_value(&withheld).unwrap_or(raw)
}

/// What a definition whose hidden text or instructions are blocked says instead.
fn withheld_description(kinds: &str) -> Value {
    Value::String(format!(
        "(The gateway withheld this tool's description: it held {kinds}.)"
    ))
}

/// Every `description` in an input schema, dropped (a blocked definition's).
fn without_descriptions(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("description");
            map.values_mut().for_each(without_descriptions);
        }
        Value::Array(items) => items.iter_mut().for_each(without_descriptions),
        _ => {}
    }
}

impl Gateway {
    /// `entry`'s definition as clients are shown it: its hidden text and instructions aimed
    /// at the model (in its description, title and schema) found as in results, redacted or
    /// withheld as the content policy says (labelled ones are logged: no caller is listing
    /// it alone).
    pub(crate) fn shown_definition(&self, entry: &ToolEntry) -> Value {
        let content = self.policy.content();
        // No one can be asked while tools are listed: what would be held is withheld.
        let listed = |action| match action {
            FindingAction::Hold => FindingAction::Block,
            other => other,
        };
        let hidden = listed(content.action(FindingKind::HiddenText));
        let injection = listed(content.action(FindingKind::Injection));
        if hidden == FindingAction::Off && injection == FindingAction::Off {
            return entry.tool.clone();
        }
        let key = (entry.qualified.clone(), entry.digest);
        let kept = self
            .definitions
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        if let Some(shown) = kept {
            return shown;
        }
        let only = ContentPolicy::off()
            .with(FindingKind::HiddenText, hidden)
            .with(FindingKind::Injection, injection);
        // Its name is how it is called: never rewritten (a person is shown it made visible).
        let mut shown = entry.tool.clone();
        let name = shown.as_object_mut().and_then(|m| m.remove("name"));
        let findings = only.apply(&mut shown);
        if let (Some(name), Some(map)) = (name, shown.as_object_mut()) {
            map.insert("name".into(), name);
        }
        if !findings.is_empty() {
            let summary: Vec<String> = findings
                .counts()
                .map(|(kind, action, count)| format!("{}:{}:{count}", kind.label(), action.label()))
                .collect();
            tracing::warn!(tool = %entry.qualified, findings = %summary.join(","), "a tool's definition holds hidden text or instructions aimed at the model");
        }
        if findings.blocks()
            && let Some(map) = shown.as_object_mut()
        {
            map.insert(
                "description".into(),
                withheld_description(&findings.blocking_kinds()),
            );
            map.remove("title");
            if let Some(schema) = map.get_mut("inputSchema") {
                without_descriptions(schema);
            }
        }
        let mut definitions = self
            .definitions
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if definitions.len() >= crate::definitions::MAX_DEFINITIONS {
            definitions.clear();
        }
        definitions.insert(key, shown.clone());
        shown
    }

    /// `raw`, a result of `source` for `principal`'s call, as the content policy lets the
    /// agent see it; what it brought into the caller's flow (`brought`, its tool's labels,
    /// and what the findings label) recorded in the store first. A result whose flow cannot
    /// be recorded is withheld: unrecorded, a later call could send it out unheld.
    // Long: one result's path in order (too large, unreadable, scanned, blocked, held for a
    // person, redacted), each outcome recorded where it is decided.
    pub(crate) async fn guard_result(
        &self,
        principal: &Principal,
        source: &str,
        brought: FlowLabels,
        mut raw: Box<RawValue>,
    ) -> Box<RawValue> {
        let caller = &principal.caller;
        let policy = self.policy.content();
        if !policy.scans() {
            return self.recorded(caller, source, brought, &[], raw).await;
        }
        // Too large to scan is told before the result is read at all.
        let mut value = serde_json::Value::Null;
        let mut seen = Vec::new();
        let findings = match policy.too_large(raw.get().len()) {
            Some(too_large) => too_large,
            // Most results hold nothing the policy looks for: read as text, not into a value
            // (what cannot be read goes the long way, and is withheld there).
            None if policy.finds_in_json(raw.get()) == Some(false) => {
                gating_core::Findings::default()
            }
            None => {
                // What cannot be read (nested deeper than the reader goes) cannot be
                // scanned: it is withheld, not passed on unread.
                let Ok(read) = serde_json::from_str::<serde_json::Value>(raw.get()) else {
                    tracing::warn!(tool = %source, "a result could not be read to be scanned (nested too deep); withheld");
                    let _ = self.record_flow(caller, source, brought, &[]).await;
                    return withheld(
                        "The gateway withheld this result: it could not be read to be scanned.",
                        raw,
                    );
                };
                value = read;
                // A secret the agent may be shown as it is: its fingerprint enters the flow.
                let findings = policy.apply_seeing(&mut value, raw.get().len(), &mut |secret| {
                    if let Some(fingerprint) = self.flows.flow_fingerprints(secret).first() {
                        seen.push(*fingerprint);
                    }
                });
                // What leaves is what was judged: a text that says more than its value (a
                // key given twice, the earlier one's string found by the reading above but
                // dropped from the value) leaves as the value, never as the text.
                match serde_json::value::to_raw_value(&value) {
                    Ok(judged) => raw = judged,
                    Err(_) => {
                        return withheld(
                            "The gateway withheld this result: it could not be written again after it was scanned.",
                            raw,
                        );
                    }
                }
                findings
            }
        };
        if findings.is_empty() {
            return self.recorded(caller, source, brought, &seen, raw).await;
        }
        let who = crate::instance_key(caller);
        self.record_findings(&who, source, &findings);
        if findings.blocks() {
            let _ = self.record_flow(caller, source, brought, &[]).await;
            let text = format!(
                "The gateway withheld this result of `{}`: it held {} (the content policy blocks such results). Nothing of it was kept.",
                gating_core::visible(source),
                findings.blocking_kinds()
            );
            return withheld(&text, raw);
        }
        let mut labels = FlowLabels::of(brought.iter().chain(findings.labels().iter()));
        if findings.holds() {
            if let Err(told) = self.released(principal, source, &findings).await {
                let _ = self.record_flow(caller, source, labels, &[]).await;
                return withheld(&told, raw);
            }
            labels = FlowLabels::of(labels.iter().chain(findings.held_labels().iter()));
        }
        let redacted = findings
            .counts()
            .any(|(_, action, _)| action == FindingAction::Redact);
        if !redacted {
            return self.recorded(caller, source, labels, &seen, raw).await;
        }
        // The original is dropped here; only the redacted result leaves.
        let redacted = match serde_json::value::to_raw_value(&value) {
            Ok(redacted) => redacted,
            Err(_) => {
                return withheld(
                    "The gateway withheld this result: it could not be redacted.",
                    raw,
                );
            }
        };
        self.recorded(caller, source, labels, &seen, redacted).await
    }

    /// `raw` once what it brought into `caller`'s flow is recorded; withheld if that fails.
    async fn recorded(
        &self,
        caller: &elicitation_store::Caller,
        source: &str,
        labels: FlowLabels,
        seen: &[[u8; 16]],
        raw: Box<RawValue>,
    ) -> Box<RawValue> {
        match self.record_flow(caller, source, labels, seen).await {
            Ok(()) => raw,
            Err(e) => {
                tracing::warn!(tool = %source, error = %e, "what a result brought into its caller's flow could not be recorded; withheld");
                withheld(
                    "The gateway withheld this result: it could not record what the result brought into the caller's flow (its store did not answer), and unrecorded, a later call could send it out unheld. Try again.",
                    raw,
                )
            }
        }
    }

    /// A module's error about a call of `source` as the content policy lets the agent see
    /// it: its message and data scanned as a result's content is (a module may echo what it
    /// read into an error), and what it brought into the caller's flow recorded. Other
    /// errors are the gateway's own words. An error is never held for a person: one whose
    /// findings hold or block is withheld.
    pub(crate) async fn guard_error(
        &self,
        caller: &elicitation_store::Caller,
        source: &str,
        brought: FlowLabels,
        error: mcp_upstream::ModuleError,
    ) -> mcp_upstream::ModuleError {
        let mcp_upstream::ModuleError::Rpc {
            module,
            code,
            message,
            data,
        } = error
        else {
            return error;
        };
        let policy = self.policy.content();
        let mut value = serde_json::json!([message, data.map(|d| *d)]);
        // A secret the agent is shown as it is: its fingerprint enters the flow.
        let mut seen = Vec::new();
        let findings = if policy.scans() {
            let size = serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len());
            policy.apply_seeing(&mut value, size, &mut |secret| {
                if let Some(fingerprint) = self.flows.flow_fingerprints(secret).first() {
                    seen.push(*fingerprint);
                }
            })
        } else {
            gating_core::Findings::default()
        };
        if !findings.is_empty() {
            self.record_findings(&crate::instance_key(caller), source, &findings);
        }
        let labels = FlowLabels::of(brought.iter().chain(findings.labels().iter()));
        let withheld = findings.blocks() || findings.holds();
        let seen = if withheld { &[][..] } else { &seen[..] };
        let unrecorded = self
            .record_flow(caller, source, labels, seen)
            .await
            .is_err();
        if withheld || unrecorded {
            let why = if unrecorded {
                "what it brought into the caller's flow could not be recorded".to_owned()
            } else if findings.blocks() {
                format!(
                    "it held {} (the content policy blocks such content)",
                    findings.blocking_kinds()
                )
            } else {
                format!(
                    "it held {} (which a person must release; an error is not held)",
                    findings.holding_kinds()
                )
            };
            return mcp_upstream::ModuleError::Rpc {
                module,
                code,
                message: format!("the module's error was withheld: {why}"),
                data: None,
            };
        }
        let mut parts = match value {
            serde_json::Value::Array(parts) => parts.into_iter(),
            _ => Vec::new().into_iter(),
        };
        let message = match parts.next() {
            Some(serde_json::Value::String(message)) => message,
            _ => "the module's error could not be read".to_owned(),
        };
        let data = parts.next().filter(|d| !d.is_null()).map(Box::new);
        mcp_upstream::ModuleError::Rpc {
            module,
            code,
            message,
            data,
        }
    }

    /// A module's answer to a call of `source` as the content policy lets the agent see it,
    /// what it brought in (`brought`) recorded in the caller's flow. A module's own error is
    /// its answer too (it may echo what it read); the gateway's errors pass as they are.
    pub(crate) async fn guard(
        &self,
        principal: &Principal,
        source: &str,
        brought: FlowLabels,
        answered: Result<Box<RawValue>, mcp_upstream::ModuleError>,
    ) -> Result<Box<RawValue>, mcp_upstream::ModuleError> {
        match answered {
            Ok(raw) => Ok(self.guard_result(principal, source, brought, raw).await),
            Err(error @ mcp_upstream::ModuleError::Rpc { .. }) => Err(self
                .guard_error(&principal.caller, source, brought, error)
                .await),
            Err(other) => Err(other),
        }
    }

    /// A module's answer to a request the gateway routes but does not gate
    /// (`resources/read`, `prompts/get`, `completion/complete`; `source` names it) as the
    /// content policy lets the agent see it, with what a `[[flow.tools]]` entry naming
    /// `source` says it brings in recorded in the caller's flow.
    pub(crate) async fn guarded(
        &self,
        principal: &Principal,
        source: &str,
        answered: Option<Result<Box<RawValue>, mcp_upstream::ModuleError>>,
    ) -> Option<Result<Box<RawValue>, mcp_upstream::ModuleError>> {
        let brought = self.brought_by_name(source);
        match answered {
            Some(answered) => Some(self.guard(principal, source, brought, answered).await),
            None => None,
        }
    }

    /// One audit event and the metrics of what a result held: kinds, actions and counts.
    fn record_findings(&self, who: &str, source: &str, findings: &Findings) {
        let mut summary = Vec::new();
        for (kind, action, count) in findings.counts() {
            self.metrics.findings(kind.label(), action.label(), count);
            summary.push(format!("{}:{}:{count}", kind.label(), action.label()));
        }
        tracing::info!(target: "audit", event = "result_findings", caller = %who, tool = %source, findings = %summary.join(","), "content found in a result (kinds and counts only)");
    }
}
