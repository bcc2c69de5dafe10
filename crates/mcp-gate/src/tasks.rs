//! Tasks of 2025-11-25 passed through: a task-augmented call the gate let through creates
//! its task at the module; the client is given an opaque handle of the gateway's own for
//! it, never the module's id, and every later request about it (`tasks/get`, `tasks/result`,
//! `tasks/cancel`, `tasks/list`) is routed to the module client that created it, for the
//! caller who started it only: anyone else is told the task does not exist.
//!
//! The routes live in this process (a task lives in one module session, which is this
//! instance's), survive a configuration reload, and end with the task's time to live.

use std::sync::Arc;

use mcp_upstream::Module;
use mcp_upstream::registry::ToolEntry;
use mcp_wire::ResultBody;
use mcp_wire::tasks;
use mcp_wire::tools::CallToolParams;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::Gateway;
use crate::error::GateError;
use crate::task_routes::Reservation;
pub use crate::task_routes::{LONGEST_ROUTE, MAX_TASKS, MAX_TASKS_PER_CALLER, NoRoom, TaskRoutes};
use mcp_auth::Principal;

/// A module's error about a task, naming it by the gateway's handle (in its message and
/// its `data`), never by the module's id.
fn renamed_error(
    error: mcp_upstream::ModuleError,
    upstream: &str,
    handle: &str,
) -> mcp_upstream::ModuleError {
    match error {
        mcp_upstream::ModuleError::Rpc {
            module,
            code,
            message,
            data,
        } => mcp_upstream::ModuleError::Rpc {
            module,
            code,
            message: message.replace(upstream, handle),
            data: data.map(|mut data| {
                tasks::rename_task(&mut data, upstream, handle);
                if data.to_string().contains(upstream) {
                    Box::new(Value::String(
                        "(withheld: it named the module's own task id)".into(),
                    ))
                } else {
                    data
                }
            }),
        },
        other => other,
    }
}

/// The answer to a request about a task nobody (or someone else) started: the same for
/// both, so a caller learns nothing of another's tasks.
pub fn unknown(handle: &str) -> GateError {
    GateError::InvalidParams(format!("unknown task {:?}", gating_core::visible(handle)))
}

/// A relay that tells the client of its task by the gateway's handle: what the module
/// sends while it answers a request about the task (its questions, its notifications) names
/// the task by the module's id, which the client never sees.
struct Renaming {
    inner: Arc<dyn mcp_upstream::Relay>,
    upstream: String,
    handle: String,
}

#[async_trait::async_trait]
impl mcp_upstream::Relay for Renaming {
    fn notify(&self, method: &str, mut params: Value) {
        tasks::rename_task(&mut params, &self.upstream, &self.handle);
        self.inner.notify(method, params);
    }

    async fn ask(
        &self,
        method: &str,
        mut params: Option<Value>,
    ) -> Result<Value, mcp_wire::jsonrpc::ErrorObject> {
        if let Some(params) = &mut params {
            tasks::rename_task(params, &self.upstream, &self.handle);
        }
        let mut answer = self.inner.ask(method, params).await;
        if let Ok(answer) = &mut answer {
            tasks::rename_task(answer, &self.handle, &self.upstream);
        }
        answer
    }

    fn log_level(&self) -> Option<u8> {
        self.inner.log_level()
    }

    fn answers(&self, method: &str) -> bool {
        self.inner.answers(method)
    }

    fn asks_mid_call(&self) -> bool {
        self.inner.asks_mid_call()
    }

    /// The status of this task, under the client's handle; another task's is dropped.
    fn task_status(&self, mut params: Value) {
        if params.get("taskId").and_then(Value::as_str) != Some(self.upstream.as_str()) {
            return;
        }
        tasks::rename_task(&mut params, &self.upstream, &self.handle);
        self.inner.notify(tasks::TASK_STATUS, params);
    }
}

impl Gateway {
    /// The task routes this gateway keeps (to hand to the gateway that replaces it on a
    /// reload: [`Gateway::with_tasks`]).
    pub fn tasks(&self) -> &Arc<TaskRoutes> {
        &self.tasks
    }

    /// Keeps its task routes in `tasks` (a reloaded gateway keeps its predecessor's).
    #[must_use]
    pub fn with_tasks(mut self, tasks: Arc<TaskRoutes>) -> Self {
        self.tasks = tasks;
        self
    }

    /// Whether a call of `entry` that asks for a task is sent as one: a module's tool that
    /// runs as one, of a module whose tasks can pass through.
    pub fn takes_tasks(&self, entry: &ToolEntry) -> bool {
        !entry.is_own() && entry.task_support != mcp_upstream::registry::TaskSupport::Forbidden
    }

    /// Whether a call of `entry` whose 2026-07-28 client takes a task is sent declaring the
    /// tasks extension: a module's tool, of a module reached at 2026-07-28 that runs tasks
    /// and whose tasks can pass through.
    pub fn takes_modern_tasks(&self, entry: &ToolEntry) -> bool {
        !entry.is_own() && self.registry.runs_modern_tasks(entry)
    }

    /// Whether a call with `params` is sent as a task (of either era) to `entry`'s module.
    pub(crate) fn sent_as_task(&self, entry: &ToolEntry, params: &CallToolParams) -> bool {
        (params.task().is_some() && self.takes_tasks(entry))
            || (params.takes_modern_task() && self.takes_modern_tasks(entry))
    }

    /// A module's answer to a task-augmented call: when it created a task, the route is
    /// kept and the client is handed the gateway's handle instead of the module's id. An
    /// answer that is no task is passed on (a module may run such a call to its result).
    pub(crate) fn adopt_task(
        &self,
        reservation: Reservation<'_>,
        entry: &ToolEntry,
        module: Arc<dyn Module>,
        result: Box<RawValue>,
    ) -> Box<RawValue> {
        let Some(created) = tasks::created_task(&result) else {
            return result;
        };
        let refused = |text: &str| {
            serde_json::value::to_raw_value(&mcp_wire::tools::text_result(text, None, true))
        };
        let modern = tasks::is_modern_task(&result);
        let Some(handle) = self
            .tasks
            .adopt(reservation, module, &created, entry, modern)
        else {
            tracing::error!(tool = %entry.qualified, "no random source for a task's handle; the module's id is not passed on");
            return refused(
                "the gateway could not hand this task to the client (no random source)",
            )
            .unwrap_or(result);
        };
        match tasks::renamed(&result, &created.task_id, &handle) {
            Some(renamed) => renamed,
            None => {
                refused("the module's task could not be handed to the client").unwrap_or(result)
            }
        }
    }

    /// The tool whose task `handle` is, when it is the caller's (a client's `tasks/result`
    /// relays what its module asks, attributed to the tool).
    pub fn task_tool(&self, principal: &Principal, handle: &str) -> Option<Arc<ToolEntry>> {
        let who = crate::instance_key(&principal.caller);
        self.tasks
            .find(&who, handle)
            .filter(|r| self.offers(&r.entry.module_name, &r.entry.qualified))
            .map(|r| r.entry)
    }

    /// `tasks/get`, `tasks/result` or `tasks/cancel` (2025-11-25), or `tasks/get`,
    /// `tasks/update` or `tasks/cancel` of the 2026-07-28 tasks extension (`modern`), about
    /// the caller's task `params.taskId` of that era: sent to the module client that created
    /// it with the module's id, answered with the gateway's handle; what the module asks
    /// while `tasks/result` waits goes to `relay`.
    pub async fn task_request(
        &self,
        principal: &Principal,
        (method, modern): (&str, bool),
        params: &Value,
        relay: Option<Arc<dyn mcp_upstream::Relay>>,
    ) -> Result<ResultBody, GateError> {
        let method: &'static str = match (method, modern) {
            ("tasks/get", _) => "tasks/get",
            ("tasks/result", false) => "tasks/result",
            ("tasks/update", true) => "tasks/update",
            ("tasks/cancel", _) => "tasks/cancel",
            (other, _) => {
                return Err(GateError::InvalidParams(format!(
                    "{other} is not about one task"
                )));
            }
        };
        let handle = params
            .get("taskId")
            .and_then(Value::as_str)
            .ok_or_else(|| GateError::InvalidParams(format!("{method} needs a string taskId")))?;
        let who = crate::instance_key(&principal.caller);
        // A task is asked about in the era it was created in (a 2025 session of the same
        // caller does not see the 2026 client's tasks, nor the other way round), and on an
        // endpoint that offers its tool (a virtual server knows no task of another's tool).
        let route = self
            .tasks
            .find(&who, handle)
            .filter(|route| route.modern == modern)
            .filter(|route| self.offers(&route.entry.module_name, &route.entry.qualified))
            .ok_or_else(|| unknown(handle))?;
        // Only the task's id goes on (the client's `_meta` is its own hop's), and the
        // answers `tasks/update` carries.
        let mut upstream = tasks::task_params(&route.upstream);
        if method == "tasks/update" {
            let responses = params
                .get("inputResponses")
                .filter(|r| r.is_object())
                .ok_or_else(|| {
                    GateError::InvalidParams("tasks/update needs an object inputResponses".into())
                })?;
            upstream["inputResponses"] = responses.clone();
        }
        let relay = relay.map(|inner| -> Arc<dyn mcp_upstream::Relay> {
            Arc::new(Renaming {
                inner,
                upstream: route.upstream.clone(),
                handle: handle.to_owned(),
            })
        });
        let answered = self
            .registry
            .task_request(&route.module, method, upstream, relay)
            .await;
        let answered = match answered {
            Ok(raw) => match tasks::renamed(&raw, &route.upstream, handle) {
                // A task's result is the tool's: it enters the caller's flow now (when the
                // agent can read it), and the content policy applies to it.
                Some(renamed) => Ok(self
                    .guard_result(
                        principal,
                        &route.entry.qualified,
                        self.brought_in(&route.entry),
                        renamed,
                    )
                    .await),
                None => Err(mcp_upstream::ModuleError::Protocol {
                    module: route.entry.module_name.clone(),
                    reason: format!("{method} answered with something that is not JSON"),
                }),
            },
            // The module forgot it (expired, or its session ended): so does the gateway.
            // Only `tasks/get` says so; the others' -32602 may be the task's own (a finished
            // task cancelled, the call's own error through `tasks/result`).
            Err(mcp_upstream::ModuleError::Rpc { code, .. })
                if code == mcp_wire::codes::INVALID_PARAMS && method == "tasks/get" =>
            {
                self.tasks.forget(handle);
                return Err(unknown(handle));
            }
            // A module's own error is the task's answer too (it may echo what it read).
            Err(e @ mcp_upstream::ModuleError::Rpc { .. }) => Err(self
                .guard_error(
                    &principal.caller,
                    &route.entry.qualified,
                    self.brought_in(&route.entry),
                    renamed_error(e, &route.upstream, handle),
                )
                .await),
            Err(e) => Err(renamed_error(e, &route.upstream, handle)),
        };
        crate::catalog::passed_on(&format!("task {handle}"), Some(answered))
    }

    /// `tasks/list`: the caller's own tasks through the gateway, each as its module tells it
    /// now (one page; a task its module forgot is left out, and forgotten).
    pub async fn list_tasks(&self, principal: &Principal) -> Result<ResultBody, GateError> {
        let who = crate::instance_key(&principal.caller);
        let mut listed = Vec::new();
        let listed_here = |r: &crate::task_routes::Route| {
            !r.modern && self.offers(&r.entry.module_name, &r.entry.qualified)
        };
        for (handle, route) in self
            .tasks
            .of(&who)
            .into_iter()
            .filter(|(_, r)| listed_here(r))
        {
            let asked = self
                .registry
                .task_request(
                    &route.module,
                    "tasks/get",
                    tasks::task_params(&route.upstream),
                    None,
                )
                .await;
            match asked {
                Ok(raw) => {
                    let Ok(mut task) = serde_json::from_str::<Value>(raw.get()) else {
                        continue;
                    };
                    tasks::rename_task(&mut task, &route.upstream, &handle);
                    if let Value::Object(map) = &mut task {
                        map.remove("_meta");
                        map.remove("resultType");
                        // What the module says of the task reaches the model too: the
                        // content policy applies to it (only to it: the handle is ours).
                        if let Some(message) = map.get_mut("statusMessage") {
                            let findings = self.policy.content().apply(message);
                            if findings.blocks() || findings.holds() {
                                *message = Value::String(
                                    "(withheld by the gateway's content policy)".into(),
                                );
                            }
                        }
                    }
                    listed.push(task);
                }
                Err(mcp_upstream::ModuleError::Rpc { code, .. })
                    if code == mcp_wire::codes::INVALID_PARAMS =>
                {
                    self.tasks.forget(&handle);
                }
                Err(e) => {
                    tracing::info!(task = %handle, error = %e, "a task's module did not tell its state; not listed now");
                }
            }
        }
        Ok(tasks::task_list(listed).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Heard(Mutex<Vec<(String, Value)>>);

    #[async_trait::async_trait]
    impl mcp_upstream::Relay for Heard {
        fn notify(&self, method: &str, params: Value) {
            self.0.lock().unwrap().push((method.to_owned(), params));
        }
        async fn ask(
            &self,
            _method: &str,
            _params: Option<Value>,
        ) -> Result<Value, mcp_wire::jsonrpc::ErrorObject> {
            Ok(Value::Null)
        }
        fn log_level(&self) -> Option<u8> {
            None
        }
        fn answers(&self, _method: &str) -> bool {
            false
        }
    }

    #[test]
    fn only_the_followed_tasks_status_reaches_its_client_under_its_handle() {
        let heard = Arc::new(Heard::default());
        let renaming = Renaming {
            inner: heard.clone(),
            upstream: "up-1".into(),
            handle: "task-aa".into(),
        };
        use mcp_upstream::Relay;
        renaming.task_status(json!({"taskId": "up-1", "status": "working"}));
        // Another task of the module's (perhaps another caller's) is not told.
        renaming.task_status(json!({"taskId": "up-2", "status": "completed"}));
        renaming.task_status(json!({"status": "completed"}));
        let heard = heard.0.lock().unwrap();
        assert_eq!(
            *heard,
            vec![(
                tasks::TASK_STATUS.to_owned(),
                json!({"taskId": "task-aa", "status": "working"})
            )]
        );
    }
}
