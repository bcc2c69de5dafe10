//! Listing the modules: their tools and prompts made entries (names qualified, what is
//! listed wrong left out), re-listed on a change or after a failure.

use super::*;

impl Registry {
    pub(super) fn entries(&self, index: usize, tools: Vec<Value>) -> Vec<ToolEntry> {
        let spec = &self.modules[index];
        tools
            .into_iter()
            .filter_map(|mut tool| {
                let original = tool.get("name")?.as_str()?.to_owned();
                let qualified = qualify(&spec.prefix, &original);
                if !is_valid_tool_name(&original) || !is_valid_tool_name(&qualified) {
                    let shown: String = original.chars().take(64).collect();
                    tracing::warn!(module = %spec.name, tool = %gating_core::visible(&shown), "not listing a tool whose name is not a valid MCP tool name (1-128 of A-Z a-z 0-9 _ . -)");
                    return None;
                }
                let annotations = tool
                    .get("annotations")
                    .and_then(|a| serde_json::from_value::<ToolAnnotations>(a.clone()).ok());
                let mirrored = tool
                    .get("inputSchema")
                    .map(mcp_wire::headers::param_headers)
                    .unwrap_or_default();
                // Listed with its `execution`: a client of 2025-11-25 may ask for a task; who
                // cannot is shown it as the gate lists it (`mcp_gate`'s catalog). A module
                // whose tasks cannot pass through (a stdio process every caller shares, where
                // what a task sends later could reach another caller's request) runs none:
                // a tool that runs only as a task is not listed.
                let mut task_support = TaskSupport::of(&tool);
                if task_support != TaskSupport::Forbidden && !self.passes_tasks(index) {
                    if task_support == TaskSupport::Required {
                        tracing::warn!(module = %spec.name, tool = %gating_core::visible(&original), "not listing a tool that runs only as a task: the module's tasks cannot pass through (a stdio module every caller shares; give it isolation = \"per_caller\")");
                        return None;
                    }
                    without_task_support(&mut tool);
                    task_support = TaskSupport::Forbidden;
                }
                let definition = pinned_definition(&tool);
                let digest = gating_core::CallDigest::of(&definition);
                tool.as_object_mut()?
                    .insert("name".into(), Value::String(qualified.clone()));
                Some(ToolEntry {
                    qualified,
                    original,
                    module_name: spec.name.clone(),
                    module: index,
                    tool,
                    annotations,
                    trusted: spec.trust_annotations,
                    mirrored,
                    definition,
                    digest,
                    task_support,
                    gate_state: super::GateState::new(),
                })
            })
            .collect()
    }

    pub(super) fn prompt_entries(&self, index: usize, prompts: Vec<Value>) -> Vec<PromptEntry> {
        let spec = &self.modules[index];
        prompts
            .into_iter()
            .filter_map(|mut prompt| {
                let original = prompt.get("name")?.as_str()?.to_owned();
                let qualified = qualify(&spec.prefix, &original);
                let definition = pinned_prompt(&prompt);
                let digest = gating_core::CallDigest::of(&definition);
                prompt
                    .as_object_mut()?
                    .insert("name".into(), Value::String(qualified.clone()));
                Some(PromptEntry {
                    qualified,
                    original,
                    module_name: spec.name.clone(),
                    module: index,
                    prompt,
                    definition,
                    digest,
                })
            })
            .collect()
    }

    pub(super) async fn list_module(&self, index: usize) -> Option<Listing> {
        let spec = &self.modules[index];
        let timed_out = || ModuleError::Timeout {
            module: spec.name.clone(),
            seconds: LIST_TIMEOUT.as_secs(),
        };
        let result = match tokio::time::timeout(LIST_TIMEOUT, spec.module.list_tools()).await {
            Ok(result) => result,
            Err(_) => Err(timed_out()),
        };
        // A module whose tools list but whose prompts or resources do not still serves its
        // tools.
        let (prompts, resources, templates) = if result.is_ok() {
            let optional = |what: &str, listed: Result<Result<Vec<Value>, ModuleError>, _>| {
                match listed {
                    Ok(Ok(items)) => items,
                    Ok(Err(err)) => {
                        tracing::warn!(module = %spec.name, error = %err, "cannot list the module's {what}; listing none");
                        Vec::new()
                    }
                    Err(_) => {
                        tracing::warn!(module = %spec.name, error = %timed_out(), "cannot list the module's {what}; listing none");
                        Vec::new()
                    }
                }
            };
            let module = &spec.module;
            (
                optional(
                    "prompts",
                    tokio::time::timeout(LIST_TIMEOUT, module.list_prompts()).await,
                ),
                optional(
                    "resources",
                    tokio::time::timeout(LIST_TIMEOUT, module.list_resources()).await,
                ),
                optional(
                    "resource templates",
                    tokio::time::timeout(LIST_TIMEOUT, module.list_resource_templates()).await,
                ),
            )
        } else {
            (Vec::new(), Vec::new(), Vec::new())
        };
        let mut failed = self
            .failed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match result {
            Ok(tools) => {
                failed[index] = None;
                Some(Listing {
                    tools,
                    prompts,
                    resources,
                    templates,
                })
            }
            Err(err) => {
                tracing::warn!(module = %spec.name, error = %err, "cannot list the module's tools; will retry");
                failed[index] = Some((self.clock.instant(), err.to_string()));
                None
            }
        }
    }

    /// Tells whoever follows [`Registry::refreshed`] that what is listed changed, though no
    /// module listed anew (a tool's definition was approved, say).
    pub fn announce_change(&self) {
        let _ = self.refreshed.send(());
    }

    /// Re-lists one module and replaces its tools, prompts and resources.
    pub(super) async fn refresh(&self, index: usize) {
        let Some(listing) = self.list_module(index).await else {
            return;
        };
        self.install(index, listing);
        tracing::info!(module = %self.modules[index].name, "tool list refreshed");
        let _ = self.refreshed.send(());
    }

    /// Puts module `index`'s listing in the catalog in place of its last one. What the
    /// module gets wrong is its own failure, never the gateway's: a name it lists more than
    /// once is left out (which of the definitions is meant cannot be told), and a name
    /// another module lists already stays that module's; each is logged and kept for
    /// [`Registry::left_out`].
    pub(super) fn install(&self, index: usize, listing: Listing) {
        let name = &self.modules[index].name;
        {
            let mut resources = self
                .resources
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            resources.remove(index);
            for (uri, other) in resources.add(index, listing.resources, listing.templates) {
                tracing::warn!(%uri, kept_by = %self.modules[other].name, left_out_of = %name, "two modules list one resource URI: it stays the first module's, and the other module's entry is not listed");
            }
        }
        let entries = self.prompt_entries(index, listing.prompts);
        let (mut problems, mut taken) = {
            let mut prompts = self.prompts.write().unwrap_or_else(PoisonError::into_inner);
            merge(&mut prompts, index, entries)
        };
        let entries = self.entries(index, listing.tools);
        let (more, taken_tools) = {
            let mut catalog = self.catalog.write().unwrap_or_else(PoisonError::into_inner);
            merge(&mut catalog, index, entries)
        };
        problems.extend(more);
        taken.extend(taken_tools);
        for problem in &problems {
            tracing::warn!(module = %name, %problem, "left out of the catalog");
        }
        let mut left_out = self.left_out.lock().unwrap_or_else(PoisonError::into_inner);
        for (other, problem) in taken {
            tracing::warn!(module = %self.modules[other].name, %problem, "left out of the catalog");
            if let Some(slot) = left_out.get_mut(other)
                && slot.len() <= MAX_PROBLEMS
            {
                slot.push(problem);
            }
        }
        if let Some(slot) = left_out.get_mut(index) {
            *slot = problems;
        }
    }

    /// Each module whose latest listing had something left out, with what and why.
    pub fn left_out(&self) -> Vec<(&str, Vec<String>)> {
        let left_out = self.left_out.lock().unwrap_or_else(PoisonError::into_inner);
        self.modules
            .iter()
            .zip(left_out.iter())
            .filter(|(_, problems)| !problems.is_empty())
            .map(|(spec, problems)| (spec.name.as_str(), problems.clone()))
            .collect()
    }

    /// Fires after each refresh of a module's tools, prompts and resources.
    pub fn refreshed(&self) -> tokio::sync::broadcast::Receiver<()> {
        self.refreshed.subscribe()
    }

    /// Lists again every module whose listing failed at least [`RETRY_LIST_AFTER`] ago.
    pub(super) async fn retry_failed(&self) {
        let retry: Vec<usize> = {
            let now = self.clock.instant();
            let failed = self
                .failed_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            failed
                .iter()
                .enumerate()
                .filter(|(_, failed)| {
                    failed.as_ref().is_some_and(|(at, _)| {
                        now.saturating_duration_since(*at) >= RETRY_LIST_AFTER
                    })
                })
                .map(|(i, _)| i)
                .collect()
        };
        for index in retry {
            self.refresh(index).await;
        }
    }

    /// Why the module `name`'s last listing failed, while it has not listed since.
    pub fn failure(&self, name: &str) -> Option<String> {
        let index = self.modules.iter().position(|spec| spec.name == name)?;
        self.failed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(index)?
            .as_ref()
            .map(|(_, why)| why.clone())
    }

    /// Each module's name and health; a module whose last listing failed is down.
    pub fn health(&self) -> Vec<(&str, crate::ModuleHealth)> {
        let failed = self
            .failed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.modules
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let mut health = spec.module.health();
                health.up &= failed.get(i).is_none_or(Option::is_none);
                (spec.name.as_str(), health)
            })
            .collect()
    }
}
