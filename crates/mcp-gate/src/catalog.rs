//! The catalog passed through from the modules, ungated: tools (policy-denied ones left
//! out, gated ones without their `outputSchema`), prompts, resources, completions, log
//! levels; and the watchers that keep the policy's and the pins' view of it current.

use std::sync::Arc;

use elicitation_store::Caller;
use gating_core::{GateMode, Listing};
use mcp_upstream::ModuleError;
use mcp_upstream::registry::ToolEntry;
use mcp_wire::tools::ForwardParams;
use mcp_wire::{CallToolParams, ResultBody};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::error::GateError;
use crate::error::module_failure;
use crate::gate::hints;
use crate::instance::instance_key;
use crate::{Gateway, Inbox};
use mcp_auth::Principal;

impl Gateway {
    /// The policy rules whose tool (a name or a prefix) names no tool any module lists now
    /// — a typo, or a module not up yet. Such a rule protects nothing.
    pub fn unmatched_policy_rules(&self) -> Vec<(String, GateMode)> {
        self.policy
            .rules()
            .iter()
            .filter(|rule| !self.registry.lists_any(|name| rule.tool.matches(name)))
            // A rule on an agent host's own tool (`claude__Bash`) names what a
            // permission-prompt module asks about, never lists.
            .filter(|rule| {
                let text = rule.tool.text();
                self.permission_prompts.is_empty()
                    || !self.registry.lists_any(|name| {
                        name.strip_suffix(mcp_upstream::permission_prompt::APPROVE)
                            .is_some_and(|prefix| !prefix.is_empty() && text.starts_with(prefix))
                    })
            })
            .map(|rule| (rule.tool.text(), rule.mode))
            .collect()
    }

    /// Warns about [`Gateway::unmatched_policy_rules`] now and after every refresh of a
    /// module's tools, until the registry is dropped.
    pub fn watch_policy_rules(self: &Arc<Self>) {
        let mut refreshed = self.registry.refreshed();
        let gateway = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(live) = gateway.upgrade() else {
                    return;
                };
                for (tool, mode) in live.unmatched_policy_rules() {
                    tracing::warn!(%tool, ?mode, "a [[policy]] rule names a tool that no module lists; it protects nothing until one does (check the name: a rule names a qualified tool name, or a prefix ending in `*`)");
                }
                drop(live);
                if let Err(tokio::sync::broadcast::error::RecvError::Closed) =
                    refreshed.recv().await
                {
                    return;
                }
            }
        });
    }

    /// Checks every listed tool's definition against its pin — now (awaited: the catalog
    /// as read at start-up is verified before the gateway serves) and after every refresh
    /// of a module's tools (on `list_changed`, after a restart), until the registry is
    /// dropped. A change is recorded for review as soon as a module lists it, and a tool
    /// verified here keeps working if the store goes away later.
    pub async fn watch_pins(self: &Arc<Self>) {
        let mut refreshed = self.registry.refreshed();
        self.verify_pins().await;
        let gateway = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                if let Err(tokio::sync::broadcast::error::RecvError::Closed) =
                    refreshed.recv().await
                {
                    return;
                }
                let Some(live) = gateway.upgrade() else {
                    return;
                };
                live.verify_pins().await;
            }
        });
    }

    /// Checks every listed tool's definition against its pin once.
    async fn verify_pins(&self) {
        for entry in self.registry.tools().await {
            if let Err(e) = self.pinning.verdict(&entry).await {
                tracing::warn!(tool = %entry.qualified, error = %e, "could not check a tool's definition against its pin; it is withheld until it can be");
            }
        }
        for entry in self.registry.prompt_entries_listed() {
            if let Err(e) = self.pinning.verdict(&entry).await {
                tracing::warn!(prompt = %entry.qualified, error = %e, "could not check a prompt's definition against its pin; it is withheld until it can be");
            }
        }
    }

    /// The tools clients see: every module's tools but those policy denies. A gated tool is
    /// listed without its `outputSchema`: the gateway may answer for it with the held result,
    /// whose `structuredContent` cannot match the module's schema, and clients validate
    /// non-error results against it (the Python SDK refuses the result otherwise).
    ///
    /// `tasks`: the client can ask for a 2025-11-25 task, so a tool's `execution.taskSupport`
    /// is shown; for a client that cannot (2026-07-28), a tool that runs only as a task is not
    /// listed and the others are listed without it.
    pub async fn list_tools(&self, tasks: bool) -> Vec<Value> {
        let mut listed = Vec::new();
        for entry in self.registry.tools().await {
            // A virtual server lists only what it offers.
            if !self.offers(&entry.module_name, &entry.qualified) {
                continue;
            }
            if !tasks && entry.task_support == mcp_upstream::registry::TaskSupport::Required {
                continue;
            }
            // A definition that is not its pin is withheld (and so is one the store cannot
            // vouch for now).
            match self.pinning.verdict(&entry).await {
                Ok(crate::pins::Verdict::Listed) => {}
                Ok(crate::pins::Verdict::Held(_)) => continue,
                Err(e) => {
                    tracing::warn!(tool = %entry.qualified, error = %e, "could not check a tool's definition against its pin; not listing it");
                    continue;
                }
            }
            let shown = |mut tool: Value| {
                if !tasks && entry.task_support != mcp_upstream::registry::TaskSupport::Forbidden {
                    mcp_upstream::registry::without_task_support(&mut tool);
                }
                tool
            };
            match self.policy.listing(&entry.qualified, hints(&entry)) {
                Listing::Hidden => {}
                Listing::Plain => listed.push(shown(self.shown_definition(&entry))),
                Listing::Gated => {
                    let mut tool = self.shown_definition(&entry);
                    if let Some(map) = tool.as_object_mut() {
                        map.remove("outputSchema");
                    }
                    listed.push(shown(tool));
                }
            }
        }
        listed
    }

    /// Every module's prompts, named `{prefix}__{name}` like tools, but those whose
    /// definition is not their pin (withheld like a changed tool).
    pub async fn list_prompts(&self) -> Vec<Value> {
        let mut listed = Vec::new();
        for entry in self.registry.prompt_entries_listed() {
            if !self.offers(&entry.module_name, &entry.qualified) {
                continue;
            }
            match self.pinning.verdict(&entry).await {
                Ok(crate::pins::Verdict::Listed) => listed.push(entry.prompt.clone()),
                Ok(crate::pins::Verdict::Held(_)) => {}
                Err(e) => {
                    tracing::warn!(prompt = %entry.qualified, error = %e, "could not check a prompt's definition against its pin; not listing it");
                }
            }
        }
        listed
    }

    /// `prompts/get`, routed to the module that listed the prompt. Prompts are not gated:
    /// they run no tool.
    pub async fn get_prompt(
        &self,
        principal: &Principal,
        params: CallToolParams,
    ) -> Result<ResultBody, GateError> {
        let name = params.name.clone();
        let found = self.registry.find_prompt(&name);
        // A virtual server's prompts are those it offers: another is no prompt there.
        if found
            .as_ref()
            .is_some_and(|e| !self.offers(&e.module_name, &e.qualified))
        {
            return passed_on(&format!("prompt {name}"), None);
        }
        // A prompt whose definition is not its pin is not served (its text reaches the model).
        if let Some(entry) = found {
            match self.pinning.verdict(&entry).await {
                Ok(crate::pins::Verdict::Listed) => {}
                Ok(crate::pins::Verdict::Held(change)) => {
                    return Err(GateError::InvalidParams(format!(
                        "prompt {} is withheld: its definition changed since it was trusted; it waits for an operator's review as change {}",
                        gating_core::visible(&name),
                        change.id
                    )));
                }
                Err(e) => {
                    tracing::error!(prompt = %entry.qualified, error = %e, "could not check a prompt's definition against its pin; not serving it");
                    return Err(GateError::Store(e));
                }
            }
        }
        let who = instance_key(&principal.caller);
        let answered = self.registry.get_prompt(params, Some(&who)).await;
        // A prompt's text reaches the model: the content policy applies to it.
        let what = format!("prompt {name}");
        passed_on(&what, self.guarded(principal, &what, answered).await)
    }

    /// Fires after a module's tools, prompts or resources were listed anew.
    pub fn catalog_changes(&self) -> tokio::sync::broadcast::Receiver<()> {
        self.registry.refreshed()
    }

    /// The URIs modules say were updated.
    pub fn resource_updates(
        &self,
    ) -> tokio::sync::broadcast::Receiver<mcp_upstream::registry::ResourceUpdate> {
        self.registry.resource_updates()
    }

    /// `resources/subscribe` (`subscribe` false: `unsubscribe`) for `uri`, to its module
    /// (the caller's own instance of an isolated module).
    pub async fn subscribe_resource(
        &self,
        caller: &Caller,
        uri: &str,
        subscribe: bool,
    ) -> Result<(), GateError> {
        let who = instance_key(caller);
        if !self.offers_resource(uri, &who) {
            return Err(GateError::InvalidParams(format!("unknown resource {uri}")));
        }
        match self
            .registry
            .subscribe_resource(uri, subscribe, Some(&who))
            .await
        {
            None => Err(GateError::InvalidParams(format!("unknown resource {uri}"))),
            Some(Ok(())) => Ok(()),
            Some(Err(err)) => Err(module_failure(&format!("resource {uri}"), err)),
        }
    }

    /// The inbox where a module's questions to `principal` wait for a person
    /// when its client cannot answer them; none where confirmations need an authenticated caller
    /// and this one is not.
    pub fn inbox(&self, principal: &Principal) -> Option<Inbox> {
        if self.require_authenticated_caller && !principal.authenticated {
            return None;
        }
        Some(Inbox {
            store: self.store.clone(),
            caller: principal.caller.clone(),
        })
    }

    /// `logging/setLevel` from a client, for the modules (see `Registry::set_log_level`).
    pub async fn set_log_level(&self, level: &str) {
        self.registry.set_log_level(level).await;
    }

    /// Every module's resources (URIs are the modules' own; one URI belongs to one module);
    /// a virtual server's, only those of the modules it offers whole.
    pub fn list_resources(&self) -> Vec<Value> {
        match &self.server {
            None => self.registry.resources(),
            Some(_) => self
                .registry
                .resources_of(|module| self.offers_resources_of(module)),
        }
    }

    /// Every module's resource templates (a virtual server's: as its resources).
    pub fn list_resource_templates(&self) -> Vec<Value> {
        match &self.server {
            None => self.registry.resource_templates(),
            Some(_) => self
                .registry
                .resource_templates_of(|module| self.offers_resources_of(module)),
        }
    }

    /// Whether this endpoint serves resource `uri` to caller `who`: everywhere on the
    /// gateway's own; on a virtual server, when the module it belongs to is offered whole.
    fn offers_resource(&self, uri: &str, who: &str) -> bool {
        self.server.is_none()
            || self
                .registry
                .resource_module(uri, Some(who))
                .is_some_and(|module| self.offers_resources_of(module))
    }

    /// Whether this endpoint serves a completion of `params`' reference (a prompt it
    /// offers, a resource it serves).
    fn offers_reference(&self, params: &ForwardParams, who: &str) -> bool {
        if self.server.is_none() {
            return true;
        }
        let reference = params.0.get("ref");
        let field = |key: &str| reference.and_then(|r| r.get(key)).and_then(Value::as_str);
        match field("type") {
            Some("ref/prompt") => field("name")
                .and_then(|name| self.registry.find_prompt(name))
                .is_some_and(|e| self.offers(&e.module_name, &e.qualified)),
            Some("ref/resource") => field("uri").is_some_and(|uri| self.offers_resource(uri, who)),
            _ => false,
        }
    }

    /// `completion/complete`, routed by its reference (see `Registry::complete`).
    pub async fn complete(
        &self,
        principal: &Principal,
        params: ForwardParams,
    ) -> Result<ResultBody, GateError> {
        let who = instance_key(&principal.caller);
        let what = "completion reference";
        if !self.offers_reference(&params, &who) {
            return passed_on(what, None);
        }
        let answered = self.registry.complete(params, Some(&who)).await;
        passed_on(what, self.guarded(principal, what, answered).await)
    }

    /// `resources/read`, routed to the module the URI belongs to (see `Registry`).
    pub async fn read_resource(
        &self,
        principal: &Principal,
        params: ForwardParams,
    ) -> Result<ResultBody, GateError> {
        let Some(uri) = params.str("uri").map(str::to_owned) else {
            return Err(GateError::InvalidParams(
                "resources/read needs a string `uri`".into(),
            ));
        };
        let who = instance_key(&principal.caller);
        if !self.offers_resource(&uri, &who) {
            return passed_on(&format!("resource {uri}"), None);
        }
        let answered = self.registry.read_resource(params, Some(&who)).await;
        // A resource's contents reach the model: the content policy applies to them.
        let what = format!("resource {uri}");
        passed_on(&what, self.guarded(principal, &what, answered).await)
    }

    /// The tool a call names (`-32602` for one the gateway does not list, and on a virtual
    /// server for one it does not offer: there, it does not exist).
    pub async fn tool(&self, name: &str) -> Result<Arc<ToolEntry>, GateError> {
        self.registry
            .find(name)
            .await
            .filter(|entry| self.offers(&entry.module_name, &entry.qualified))
            .ok_or_else(|| GateError::UnknownTool(name.to_owned()))
    }
}

/// A module's answer to a request the gateway routes but does not gate (`what` names it):
/// `None` is nothing by that name (`-32602`); a result passes on as the module wrote it once
/// its top level reads as a result; the module's own JSON-RPC error passes on with code and
/// data; any other failure is ours to report (logged, with an error id).
pub(crate) fn passed_on(
    what: &str,
    answered: Option<Result<Box<RawValue>, ModuleError>>,
) -> Result<ResultBody, GateError> {
    match answered {
        None => Err(GateError::InvalidParams(format!("unknown {what}"))),
        Some(Ok(raw)) => match mcp_wire::result::usable(&raw) {
            Ok(()) => Ok(ResultBody::Raw(raw)),
            Err(why) => Err(GateError::Internal(format!("{what}: {why}"))),
        },
        Some(Err(err)) => Err(module_failure(what, err)),
    }
}
