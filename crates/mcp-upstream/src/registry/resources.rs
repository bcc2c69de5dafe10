//! Resources, templates, prompts and completions, routed to the module (and the caller's
//! instance) they belong to.

use super::*;

impl Registry {
    /// The URIs modules say were updated (`notifications/resources/updated`).
    pub fn resource_updates(&self) -> tokio::sync::broadcast::Receiver<ResourceUpdate> {
        self.updated.subscribe()
    }

    /// The module `uri` belongs to for caller `who` (see `module_of`): `None` when none
    /// claims it; a URI two modules could claim is the caller's `-32602`.
    pub(super) fn owner(&self, uri: &str, who: Option<&str>) -> Option<Result<usize, ModuleError>> {
        match self.module_of(uri, who) {
            Ok(found) => found.map(Ok),
            Err(reason) => Some(Err(ModuleError::Rpc {
                module: String::new(),
                code: -32602,
                message: reason,
                data: None,
            })),
        }
    }

    /// `resources/subscribe` (`subscribe` false: `unsubscribe`) for `uri`, to the module the
    /// URI belongs to; `None` when no module claims it.
    pub async fn subscribe_resource(
        &self,
        uri: &str,
        subscribe: bool,
        who: Option<&str>,
    ) -> Option<Result<(), ModuleError>> {
        let module = match self.owner(uri, who)? {
            Ok(module) => module,
            Err(e) => return Some(Err(e)),
        };
        Some(match self.instance(module, who).await {
            Ok(instance) => instance.subscribe_resource(uri, subscribe).await,
            Err(e) => Err(e),
        })
    }

    /// Whether a subscription to `uri` is each caller's own (each caller's subscriptions
    /// then go to its own instance, or are refused): a URI of a module that keeps each
    /// caller's state apart, and a URI the catalog gives to no shared instance — one a module
    /// named to some caller in a result is that caller's alone, so another caller's
    /// subscription to it must reach the routing (and be refused), never be taken as known.
    pub fn isolates(&self, uri: &str) -> bool {
        // As `instance` routes: a stateless module's callers share its one instance.
        match self.owner(uri, None) {
            Some(Ok(module)) => self.own_instances(module),
            _ => true,
        }
    }

    /// Every listed resource object, in module order.
    pub fn resources(&self) -> Vec<Value> {
        self.resources_of(|_| true)
    }

    /// Every listed resource template, in module order.
    pub fn resource_templates(&self) -> Vec<Value> {
        self.resource_templates_of(|_| true)
    }

    /// The listed resources of the modules `offered` names (a virtual server's whole
    /// modules), in module order.
    pub fn resources_of(&self, offered: impl Fn(&str) -> bool) -> Vec<Value> {
        let resources = self
            .resources
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        resources
            .listed
            .iter()
            .filter(|(m, _)| self.named(*m, &offered))
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// The listed resource templates of the modules `offered` names, in module order.
    pub fn resource_templates_of(&self, offered: impl Fn(&str) -> bool) -> Vec<Value> {
        let resources = self
            .resources
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        resources
            .templates
            .iter()
            .filter(|(m, _, _)| self.named(*m, &offered))
            .map(|(_, t, _)| t.clone())
            .collect()
    }

    /// Whether module `module` (an index) is one `offered` names.
    fn named(&self, module: usize, offered: &impl Fn(&str) -> bool) -> bool {
        self.modules.get(module).is_some_and(|m| offered(&m.name))
    }

    /// The name of the module resource `uri` belongs to for caller `who` (as
    /// `resources/read` routes it); `None` when none, or more than one, could claim it.
    pub fn resource_module(&self, uri: &str, who: Option<&str>) -> Option<&str> {
        match self.module_of(uri, who) {
            Ok(Some(module)) => self.modules.get(module).map(|m| m.name.as_str()),
            _ => None,
        }
    }

    /// The module a URI belongs to: the one that listed it; else the one whose template
    /// matches it; else the one that named it to caller `who` in a result (a session
    /// resource of the caller's own instance, which the shared one never lists); else, with
    /// a single module, that one. `Err` when templates of two modules match it (never a
    /// guess); `Ok(None)` when none does.
    pub(super) fn module_of(&self, uri: &str, who: Option<&str>) -> Result<Option<usize>, String> {
        let resources = self
            .resources
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(module) = resources.module_of_uri(uri) {
            return Ok(Some(module));
        }
        let mut matching: Vec<usize> = resources
            .templates
            .iter()
            .filter(|(_, _, pattern)| template_matches(pattern, uri))
            .map(|(m, _, _)| *m)
            .collect();
        matching.dedup();
        let named = || who.and_then(|who| self.announced.module_of(who, uri));
        match matching.as_slice() {
            [one] => Ok(Some(*one)),
            [] if let Some(module) = named() => Ok(Some(module)),
            [] if self.modules.len() == 1 => Ok(Some(0)),
            [] => Ok(None),
            _ => Err(format!(
                "resource {uri} matches templates of more than one module"
            )),
        }
    }

    /// Reads resource `uri` (the params' `uri`) from the module it belongs to; `None` when no
    /// module claims it.
    pub async fn read_resource(
        &self,
        params: ForwardParams,
        who: Option<&str>,
    ) -> Option<Result<Box<serde_json::value::RawValue>, ModuleError>> {
        let uri = params.str("uri")?.to_owned();
        let module = match self.owner(&uri, who)? {
            Ok(module) => module,
            Err(e) => return Some(Err(e)),
        };
        Some(match self.instance(module, who).await {
            Ok(instance) => instance.read_resource(params.for_upstream()).await,
            Err(e) => Err(e),
        })
    }

    /// Routes `completion/complete` by its reference: a prompt (`ref/prompt`, by the name the
    /// gateway lists, renamed to the module's own) or a resource (`ref/resource`, by URI or
    /// template, as `resources/read`). `None` when nothing by that reference is listed.
    pub async fn complete(
        &self,
        mut params: ForwardParams,
        who: Option<&str>,
    ) -> Option<Result<Box<serde_json::value::RawValue>, ModuleError>> {
        let reference = params.0.get_mut("ref")?.as_object_mut()?;
        let module = match reference.get("type").and_then(Value::as_str)? {
            "ref/prompt" => {
                let name = reference.get("name").and_then(Value::as_str)?;
                let entry = self
                    .prompts
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(name)
                    .cloned()?;
                reference.insert("name".into(), Value::String(entry.original.clone()));
                entry.module
            }
            "ref/resource" => {
                let uri = reference.get("uri").and_then(Value::as_str)?.to_owned();
                match self.owner(&uri, who)? {
                    Ok(module) => module,
                    Err(e) => return Some(Err(e)),
                }
            }
            _ => return None,
        };
        Some(match self.instance(module, who).await {
            Ok(instance) => instance.complete(params.for_upstream()).await,
            Err(e) => Err(e),
        })
    }

    /// Every listed prompt object, ordered by name.
    pub fn prompts(&self) -> Vec<Value> {
        self.prompts
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(|p| p.prompt.clone())
            .collect()
    }

    /// Every module's prompts, as entries.
    pub fn prompt_entries_listed(&self) -> Vec<Arc<PromptEntry>> {
        self.prompts
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// The prompt listed as `name`.
    pub fn find_prompt(&self, name: &str) -> Option<Arc<PromptEntry>> {
        self.prompts
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// Gets prompt `name` (as listed) from its module with these params, renamed to the
    /// module's own name; `None` for a name the gateway does not list.
    pub async fn get_prompt(
        &self,
        mut params: CallToolParams,
        who: Option<&str>,
    ) -> Option<Result<Box<serde_json::value::RawValue>, ModuleError>> {
        let entry = self
            .prompts
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&params.name)
            .cloned()?;
        params = params.into_upstream(&entry.original);
        Some(match self.instance(entry.module, who).await {
            Ok(instance) => instance.get_prompt(params).await,
            Err(e) => Err(e),
        })
    }
}
