//! Which instance of a module serves a caller: the shared one, or the caller's own (started
//! on first use and followed).

use super::*;

impl Registry {
    /// The instance of module `index` that serves caller `who`: its own, for an isolated
    /// module that keeps state; else the shared one.
    pub(super) async fn instance(
        &self,
        index: usize,
        who: Option<&str>,
    ) -> Result<Arc<dyn Module>, ModuleError> {
        // An index of no module (an embedder's own tool) is no module's to run.
        if index >= self.modules.len() {
            return Err(ModuleError::Unavailable {
                module: String::new(),
                reason: "the tool is not a module's".into(),
            });
        }
        let shared = &self.modules[index].module;
        let per_person = self.instances[index]
            .as_ref()
            .is_some_and(|i| i.per_person().is_some());
        let (Some(instances), Some(who)) = (&self.instances[index], who) else {
            // A module run as its callers serves nobody without a caller.
            if per_person {
                return Err(ModuleError::NotConnected {
                    module: self.modules[index].name.clone(),
                });
            }
            return Ok(shared.clone());
        };
        if !self.own_instances(index) {
            return Ok(shared.clone());
        }
        let Some(start) = self.modules[index]
            .isolation
            .as_ref()
            .map(|i| i.start.clone())
        else {
            return Ok(shared.clone());
        };
        let (instance, started) = instances.of(who, || start(who)).await?;
        if started {
            self.adopt(index, &instance, who).await;
        }
        Ok(instance)
    }

    /// The module client that serves a call of `who` whose client is asked mid-call (a
    /// 2025-11-25 session): for a module that speaks both eras and is reached at 2026-07-28,
    /// the caller's own 2025-era session with it (started now when it has none), so what the
    /// module asks the 2025 way (`elicitation/create`, `sampling/createMessage`, `roots/list`
    /// mid-call) reaches the client as it would directly; `base` (the caller's instance)
    /// otherwise, and when that session cannot be had (the module does not answer
    /// `initialize`, or every such session is in use).
    pub(super) async fn in_client_era(
        &self,
        index: usize,
        who: Option<&str>,
        base: Arc<dyn Module>,
    ) -> Arc<dyn Module> {
        let twins = &self.legacy_twins[index];
        if twins.unavailable.load(std::sync::atomic::Ordering::Relaxed) || !base.speaks_both() {
            return base;
        }
        let key = who.unwrap_or("");
        let twin = twins.instances.of(key, || base.legacy_twin()).await;
        match twin {
            Ok((twin, started)) => {
                if started {
                    let rank = self.log_level.load(std::sync::atomic::Ordering::Acquire);
                    if let Some(level) = mcp_wire::mcp::LOG_LEVELS.get(usize::from(rank)) {
                        let _ = twin.set_log_level(level).await;
                    }
                }
                twin
            }
            Err(ModuleError::Busy { .. }) => {
                tracing::info!(module = %self.modules[index].name, "every 2025-era session with the module is in use: the call goes at 2026-07-28");
                base
            }
            Err(e @ (ModuleError::Rpc { .. } | ModuleError::Protocol { .. })) => {
                // It answered, and not as a 2025 server: asked once, its calls stay at
                // 2026-07-28.
                twins
                    .unavailable
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                tracing::info!(module = %self.modules[index].name, error = %e, "the module does not speak 2025-11-25: its calls from 2025-era clients go at 2026-07-28");
                base
            }
            Err(e) => {
                tracing::info!(module = %self.modules[index].name, error = %e, "no 2025-era session with the module now: this call goes at 2026-07-28");
                base
            }
        }
    }

    /// Log messages per-caller module instances sent outside any call, each with the caller
    /// (the `who` its instance serves): for that caller's sessions only.
    pub fn instance_logs(&self) -> tokio::sync::broadcast::Receiver<(Arc<str>, Value)> {
        self.instance_logs.subscribe()
    }

    /// A per-caller instance just started: it gets the log level asked for so far, and its
    /// resource updates reach the registry's feed.
    pub(super) async fn adopt(&self, index: usize, instance: &Arc<dyn Module>, who: &str) {
        // Its feeds are followed before anything is awaited (a request dropped meanwhile
        // cannot leave them unfollowed); the log level comes last. Its list changes (a
        // caller's call may add a tool) re-list the module.
        if let (Some(changes), Some(weak)) = (instance.tools_changed(), self.this.get().cloned()) {
            refresh_on_change(changes, weak, index);
        }
        let who: Arc<str> = Arc::from(who);
        if let Some(logs) = instance.log_messages() {
            let (out, who) = (self.instance_logs.clone(), who.clone());
            forward(logs, move |params| {
                let _ = out.send((who.clone(), params));
            });
        }
        if let Some(updates) = instance.resource_updates() {
            let out = self.updated.clone();
            forward(updates, move |uri| {
                let _ = out.send(ResourceUpdate {
                    uri,
                    who: Some(who.clone()),
                });
            });
        }
        let rank = self.log_level.load(std::sync::atomic::Ordering::Acquire);
        if let Some(level) = mcp_wire::mcp::LOG_LEVELS.get(usize::from(rank))
            && let Err(e) = instance.set_log_level(level).await
        {
            tracing::info!(module = %self.modules[index].name, error = %e, "the module instance did not take the log level");
        }
    }

    /// Whether each caller of module `index` has an instance of its own: an isolated
    /// module that keeps state, or one run as its callers.
    pub(super) fn own_instances(&self, index: usize) -> bool {
        self.instances[index]
            .as_ref()
            .is_some_and(|i| i.per_person().is_some() || !self.modules[index].module.stateless())
    }

    /// Whether the tasks of module `index` may pass through: what a task sends while it runs
    /// can reach only its own caller, because the module tells each request's messages on
    /// that request's own channel (HTTP), or each caller has an instance of its own.
    pub fn passes_tasks(&self, index: usize) -> bool {
        self.modules
            .get(index)
            .is_some_and(|spec| spec.module.routes_by_request() || self.own_instances(index))
    }

    /// Whether a call of `entry` whose client takes a task of the 2026-07-28 tasks extension
    /// is sent declaring it ([`Module::runs_modern_tasks`]), where its module's tasks may
    /// pass through ([`Registry::passes_tasks`]).
    pub fn runs_modern_tasks(&self, entry: &ToolEntry) -> bool {
        let index = entry.module;
        self.passes_tasks(index)
            && self
                .modules
                .get(index)
                .is_some_and(|spec| spec.module.runs_modern_tasks())
    }

    /// The kind of credentials the module of `entry` sends on a caller's calls (`None`:
    /// none).
    pub fn credential_kind(&self, entry: &ToolEntry) -> Option<&'static str> {
        if let Some(kind) = self
            .instances
            .get(entry.module)?
            .as_ref()
            .and_then(|i| i.per_person())
        {
            return Some(kind);
        }
        self.modules.get(entry.module)?.module.credential_kind()
    }

    /// Whether the module of `entry` runs as each caller's own connected account
    /// (`auth.kind = "user"`): a caller without one is not sent.
    pub fn needs_account(&self, entry: &ToolEntry) -> bool {
        self.instances
            .get(entry.module)
            .and_then(Option::as_ref)
            .is_some_and(|i| i.per_person() == Some("user"))
    }
}
