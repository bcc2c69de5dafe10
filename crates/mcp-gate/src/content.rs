//! The content policy applied to what a module answered (`gating_core::findings`): its
//! secrets, personal data and hidden instructions redacted, labelled into the caller's flow,
//! or the whole result withheld; what was found recorded by kind and count, never by value.

use std::sync::PoisonError;

use gating_core::{ContentPolicy, FindingAction, FindingKind, Findings};
use mcp_upstream::registry::ToolEntry;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::Gateway;

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
        let hidden = content.action(FindingKind::HiddenText);
        let injection = content.action(FindingKind::Injection);
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

    /// `raw`, a result of `entry`'s module for `who`, as the content policy lets the agent
    /// see it. A result that cannot be read as JSON is passed on as it is (the gate refused
    /// what it could not read already).
    pub(crate) fn guard_result(
        &self,
        who: &str,
        source: &str,
        raw: Box<RawValue>,
    ) -> Box<RawValue> {
        let policy = self.policy.content();
        if !policy.scans() {
            return raw;
        }
        // Too large to scan is told before the result is read at all.
        let mut value = serde_json::Value::Null;
        let findings = match policy.too_large(raw.get().len()) {
            Some(too_large) => too_large,
            None => {
                // What cannot be read (nested deeper than the reader goes) cannot be
                // scanned: it is withheld, not passed on unread.
                let Ok(read) = serde_json::from_str::<serde_json::Value>(raw.get()) else {
                    tracing::warn!(tool = %source, "a result could not be read to be scanned (nested too deep); withheld");
                    let withheld = mcp_wire::tools::text_result(
                        "The gateway withheld this result: it could not be read to be scanned.",
                        None,
                        true,
                    );
                    return serde_json::value::to_raw_value(&withheld).unwrap_or(raw);
                };
                value = read;
                // A secret the agent is shown as it is: its fingerprint enters the flow.
                let mut seen = Vec::new();
                let findings = policy.apply_seeing(&mut value, raw.get().len(), &mut |secret| {
                    seen.push(self.flows.fingerprint(secret));
                });
                self.flows.record_seen(who, source, &seen, self.clock.now());
                findings
            }
        };
        if findings.is_empty() {
            return raw;
        }
        self.record_findings(who, source, &findings);
        let labels = findings.labels();
        if !labels.is_empty() {
            self.flows.record(who, source, labels, self.clock.now());
        }
        if findings.blocks() {
            let text = format!(
                "The gateway withheld this result of `{}`: it held {} (the content policy blocks such results). Nothing of it was kept.",
                gating_core::visible(source),
                findings.blocking_kinds()
            );
            let withheld = mcp_wire::tools::text_result(&text, None, true);
            return serde_json::value::to_raw_value(&withheld).unwrap_or(raw);
        }
        let redacted = findings
            .counts()
            .any(|(_, action, _)| action == FindingAction::Redact);
        if !redacted {
            return raw;
        }
        // The original is dropped here; only the redacted result leaves.
        match serde_json::value::to_raw_value(&value) {
            Ok(redacted) => redacted,
            Err(_) => {
                let withheld = mcp_wire::tools::text_result(
                    "The gateway withheld this result: it could not be redacted.",
                    None,
                    true,
                );
                serde_json::value::to_raw_value(&withheld).unwrap_or(raw)
            }
        }
    }

    /// A module's error about a call of `entry` as the content policy lets the agent see it:
    /// its message and data scanned as a result's content is (a module may echo what it
    /// read into an error). Other errors are the gateway's own words.
    pub(crate) fn guard_error(
        &self,
        who: &str,
        source: &str,
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
        if !policy.scans() {
            return mcp_upstream::ModuleError::Rpc {
                module,
                code,
                message,
                data,
            };
        }
        let mut value = serde_json::json!([message, data.map(|d| *d)]);
        let findings = policy.apply(&mut value);
        if !findings.is_empty() {
            self.record_findings(who, source, &findings);
            let labels = findings.labels();
            if !labels.is_empty() {
                self.flows.record(who, source, labels, self.clock.now());
            }
        }
        if findings.blocks() {
            return mcp_upstream::ModuleError::Rpc {
                module,
                code,
                message: format!(
                    "the module's error was withheld: it held {} (the content policy blocks such content)",
                    findings.blocking_kinds()
                ),
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

    /// A module's answer to a request the gateway routes but does not gate (`resources/read`,
    /// `prompts/get`, `completion/complete`; `source` names it) as the content policy lets
    /// the agent see it.
    pub(crate) fn guarded(
        &self,
        who: &str,
        source: &str,
        answered: Option<Result<Box<RawValue>, mcp_upstream::ModuleError>>,
    ) -> Option<Result<Box<RawValue>, mcp_upstream::ModuleError>> {
        answered.map(|answered| match answered {
            Ok(raw) => Ok(self.guard_result(who, source, raw)),
            Err(error) => Err(self.guard_error(who, source, error)),
        })
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
