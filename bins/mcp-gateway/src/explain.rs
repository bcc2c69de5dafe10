//! `mcp-gateway policy explain`: what the configured policy decides for one call, and the
//! rule that decides it, without starting anything — the operator's way to test rules
//! before a reload.

use anyhow::{Context, Result, bail};
use gating_core::{CallFacts, GateDecision, GatePolicy, HintSource, HoldReason, ToolAnnotations};
use serde_json::Value;

use crate::config::Config;

/// The call to explain.
pub(crate) struct Call {
    pub(crate) tool: String,
    pub(crate) args: String,
    pub(crate) caller: String,
    pub(crate) groups: Vec<String>,
    pub(crate) annotations: Option<String>,
}

/// The decision for `call` under `config`'s policy, as lines for a person.
pub(crate) fn explain(config: &Config, call: &Call) -> Result<String> {
    let policy: GatePolicy = crate::app::policy(config)?;
    let args: Value = serde_json::from_str(&call.args)
        .context("--args must be the call's arguments as a JSON object")?;
    if !args.is_object() {
        bail!("--args must be a JSON object, like '{{\"path\": \"/tmp/a\"}}'");
    }
    // The module whose prefix the tool carries (its annotations count only if it is trusted).
    let module = config.modules.iter().find(|m| {
        let prefix = m.prefix.clone().unwrap_or_else(|| m.name.clone());
        prefix.is_empty() || call.tool.starts_with(&format!("{prefix}__"))
    });
    let annotations: Option<ToolAnnotations> = call
        .annotations
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .context(
            "--annotations must be the tool's annotations as JSON, like '{\"readOnlyHint\": true}'",
        )?;
    let trusted = module.is_some_and(|m| m.trust_annotations);
    let hints = match (&annotations, trusted) {
        (Some(a), true) => HintSource::Trusted(a),
        _ => HintSource::Untrusted,
    };
    let decided = policy.decide(
        &CallFacts {
            tool: &call.tool,
            module: module.map_or("", |m| m.name.as_str()),
            args: &args,
            caller: &call.caller,
            groups: &call.groups,
            hints: hints.effective(),
            flow: None,
        },
        hints,
    );
    let decision = match decided.decision {
        GateDecision::Forward => "allow: forwarded without asking".to_owned(),
        GateDecision::Deny => "deny: refused, never forwarded".to_owned(),
        GateDecision::Shadow => "shadow: forwarded, recorded as one it would have held".to_owned(),
        GateDecision::Confirm(why) => format!(
            "confirm: held until a person confirms it ({})",
            match why {
                HoldReason::Policy => "the rule says confirm",
                HoldReason::Destructive { declared: true } => "its module says it is destructive",
                HoldReason::Destructive { declared: false } =>
                    "nothing trusted says it is read-only or harmless",
                HoldReason::OpenWorld =>
                    "it reaches outside systems, and open-world tools are gated",
                HoldReason::Flow =>
                    "it sends data out from a flow that read untrusted content and private data",
                HoldReason::Quota => "it would pass a quota that asks a person",
            }
        ),
    };
    let mut out = format!("decision: {decision}\n");
    match decided.rule {
        Some(index) => {
            let rule = &policy.rules()[index];
            out.push_str(&format!(
                "rule: {index} (tool = {:?}, gate = {:?}{})\n",
                rule.tool.text(),
                rule.mode.label(),
                rule.when
                    .as_ref()
                    .map(|w| format!(", when = {:?}", w.source()))
                    .unwrap_or_default()
            ));
        }
        None => out.push_str("rule: none matched; the tool's hints decided (auto)\n"),
    }
    if let Some(reason) = &decided.reason {
        out.push_str(&format!("reason: {reason}\n"));
    }
    for (index, why) in &decided.failures {
        out.push_str(&format!(
            "note: rule {index}'s `when` could not be evaluated ({why}), so it was taken the way that keeps the gate shut\n"
        ));
    }
    out.push_str(&flow_lines(&policy, &call.tool, hints.effective()));
    if module.is_none() {
        out.push_str("note: no configured module's prefix names this tool\n");
    }
    out.push_str(&format!("policy: {}\n", policy.digest()));
    Ok(out)
}

/// The tool's flow labels, where they come from, and whether the lethal-trifecta rule may
/// hold its calls.
fn flow_lines(policy: &GatePolicy, tool: &str, hints: gating_core::EffectiveHints) -> String {
    let mut out = String::new();
    let (labels, source) = policy.flow().labels(tool, hints);
    out.push_str(&format!(
        "flow labels: {labels} ({})\n",
        match source {
            gating_core::flow::LabelSource::Rule(index) => format!(
                "[[flow.tools]] entry {index}, tool = {:?}",
                policy.flow().rules[index].tool.text()
            ),
            gating_core::flow::LabelSource::Hints => "from its hints".to_owned(),
        }
    ));
    if labels.has(gating_core::FlowLabel::SendsOut)
        && policy.flow().trifecta != gating_core::TrifectaMode::Off
    {
        out.push_str(&format!(
            "note: the lethal-trifecta rule ({}) holds this tool's calls when the caller's flow holds untrusted content and private data, unless they are denied\n",
            policy.flow().trifecta.label()
        ));
    }
    out
}
