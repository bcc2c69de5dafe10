//! Tasks of 2025-11-25 (a task-augmented `tools/call`, `tasks/get`, `tasks/result`,
//! `tasks/list`, `tasks/cancel`, `notifications/tasks/status`) as the gateway passes them
//! between a client and the module that runs the task: a module's task id never reaches the
//! client, which is given the gateway's own handle for it instead. The tasks extension of
//! 2026-07-28 (SEP-2663: a task as `resultType: "task"`, `tasks/get`, `tasks/update`,
//! `tasks/cancel`) passes the same way between a 2026-07-28 client and module.

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

/// The requests about a task a client sends.
pub const TASK_METHODS: [&str; 4] = ["tasks/get", "tasks/result", "tasks/list", "tasks/cancel"];

/// The status notification a module may send about a task.
pub const TASK_STATUS: &str = "notifications/tasks/status";

/// The `_meta` key that ties a message (a result of `tasks/result`, a request asked while a
/// task runs) to its task: `{"taskId": …}`.
pub const META_RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The task a module created for a task-augmented call (its `CreateTaskResult`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedTask {
    /// The module's id for it.
    pub task_id: String,
    /// How long the module keeps it, in milliseconds (`None`: it did not say, or no limit).
    pub ttl_ms: Option<u64>,
}

/// The task of a `CreateTaskResult`: of 2025-11-25 (`{"task": {"taskId": …, …}}`, no
/// `content`) or of the 2026-07-28 tasks extension (`{"resultType": "task", "taskId": …,
/// "ttlMs": …}`); `None` for any other result (a module may answer a task-augmented call
/// with the plain result).
pub fn created_task(raw: &RawValue) -> Option<CreatedTask> {
    // Read whole (only answers to task-augmented calls are asked): a key spelled with
    // escapes is still the key.
    let result: Map<String, Value> = serde_json::from_str(raw.get()).ok()?;
    if result.contains_key("content") {
        return None;
    }
    let (task, ttl) = match result.get("resultType") {
        Some(kind) if kind == "task" => (&result, "ttlMs"),
        Some(_) => return None,
        None => (result.get("task")?.as_object()?, "ttl"),
    };
    let task_id = task.get("taskId")?.as_str()?;
    if task_id.is_empty() {
        return None;
    }
    Some(CreatedTask {
        task_id: task_id.to_owned(),
        ttl_ms: task.get(ttl).and_then(Value::as_u64),
    })
}

/// Whether a result is a task of the 2026-07-28 tasks extension (`resultType: "task"`).
pub fn is_modern_task(raw: &RawValue) -> bool {
    // Read whole (asked only of a task a module created): an escaped key is still the key.
    serde_json::from_str::<Map<String, Value>>(raw.get())
        .is_ok_and(|result| result.get("resultType").is_some_and(|kind| kind == "task"))
}

/// Every `"taskId": from` in `value`, at any depth, made `"taskId": to` (a task's id in a
/// `Task`, a `CreateTaskResult`, a list of tasks, the related-task `_meta`). Other strings
/// that happen to equal `from` are the module's data and are left as they are.
pub fn rename_task(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::Object(map) => {
            for (key, member) in map.iter_mut() {
                if key == "taskId" && member.as_str() == Some(from) {
                    *member = Value::String(to.to_owned());
                } else {
                    rename_task(member, from, to);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                rename_task(item, from, to);
            }
        }
        _ => {}
    }
}

/// [`rename_task`] on a result as sent; `None` when it is not JSON.
pub fn renamed(raw: &RawValue, from: &str, to: &str) -> Option<Box<RawValue>> {
    // Read whole: an id spelled with escapes is still the id.
    let mut value: Value = serde_json::from_str(raw.get()).ok()?;
    rename_task(&mut value, from, to);
    serde_json::value::to_raw_value(&value).ok()
}

/// The params of a request about the task `task_id` (`tasks/get`, `tasks/result`,
/// `tasks/cancel`).
pub fn task_params(task_id: &str) -> Value {
    json!({ "taskId": task_id })
}

/// A `tasks/list` result of these `Task` objects (one page: the gateway lists only the
/// caller's own tasks, which are bounded).
pub fn task_list(tasks: Vec<Value>) -> Value {
    json!({ "tasks": tasks })
}

/// A `Task` (2025-11-25): `status` one of `working`, `input_required`, `completed`,
/// `failed`, `cancelled`; the times as RFC 3339; `ttl_ms` how long it is kept from its
/// creation.
pub fn task_object(
    task_id: &str,
    status: &str,
    message: &str,
    (created_at, updated_at): (&str, &str),
    ttl_ms: u64,
    poll_ms: u64,
) -> Value {
    json!({
        "taskId": task_id,
        "status": status,
        "statusMessage": message,
        "createdAt": created_at,
        "lastUpdatedAt": updated_at,
        "ttl": ttl_ms,
        "pollInterval": poll_ms,
    })
}

/// The `CreateTaskResult` of `task`, with `meta` as its `_meta` (when given).
pub fn created_result(task: Value, meta: Option<Value>) -> Value {
    let mut result = json!({ "task": task });
    if let Some(meta) = meta {
        result["_meta"] = meta;
    }
    result
}

/// `_meta` tying a message to the task `task_id`.
pub fn related_meta(task_id: &str) -> Value {
    json!({ META_RELATED_TASK: { "taskId": task_id } })
}

/// The id of the tasks extension of 2026-07-28 (SEP-2663).
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// A `Task` of 2025-11-25 ([`task_object`]) in the shape of the 2026-07-28 tasks extension:
/// `ttlMs` and `pollIntervalMs` for `ttl` and `pollInterval`.
pub fn modern_task(mut task: Value) -> Value {
    if let Value::Object(map) = &mut task {
        if let Some(ttl) = map.remove("ttl") {
            map.insert("ttlMs".into(), ttl);
        }
        if let Some(poll) = map.remove("pollInterval") {
            map.insert("pollIntervalMs".into(), poll);
        }
    }
    task
}

/// A 2026-07-28 `CreateTaskResult` of a 2025-11-25 one ([`created_result`]): the task flat,
/// `resultType: "task"`, its `_meta` kept. Anything else (a result that is no task) as it is.
pub fn modern_created(created: Value) -> Value {
    let Value::Object(mut created) = created else {
        return created;
    };
    let Some(task) = created.remove("task") else {
        return Value::Object(created);
    };
    let mut flat = modern_task(task);
    if let Value::Object(map) = &mut flat {
        map.insert("resultType".into(), json!("task"));
        if let Some(meta) = created.remove("_meta") {
            map.insert("_meta".into(), meta);
        }
    }
    flat
}

/// The `tasks` capability of the gateway's `initialize` result: it lists and cancels tasks
/// and takes task-augmented `tools/call`.
pub fn server_capability() -> Value {
    json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(value: Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&value).unwrap()
    }

    #[test]
    fn a_create_task_result_is_told_from_a_tool_result() {
        let created = raw(json!({"task": {"taskId": "t-1", "status": "working", "ttl": 60000}}));
        assert_eq!(
            created_task(&created),
            Some(CreatedTask {
                task_id: "t-1".into(),
                ttl_ms: Some(60000)
            })
        );
        let unlimited = raw(json!({"task": {"taskId": "t-2", "status": "working", "ttl": null}}));
        assert_eq!(created_task(&unlimited).unwrap().ttl_ms, None);
        // A tool's own data that says "task" is not a task.
        let result = raw(json!({"content": [], "task": {"taskId": "x"}}));
        assert_eq!(created_task(&result), None);
        for other in [
            json!({"content": [{"type": "text", "text": "\"task\""}]}),
            json!({"task": "t-1"}),
            json!({"task": {"taskId": ""}}),
            json!({"task": {"taskId": 7}}),
        ] {
            assert_eq!(created_task(&raw(other.clone())), None, "{other}");
        }
    }

    #[test]
    fn a_task_of_the_2026_extension_is_told_from_a_result() {
        let created =
            raw(json!({"resultType": "task", "taskId": "m-1", "status": "working", "ttlMs": 9000}));
        assert_eq!(
            created_task(&created),
            Some(CreatedTask {
                task_id: "m-1".into(),
                ttl_ms: Some(9000)
            })
        );
        for other in [
            json!({"resultType": "complete", "taskId": "m-1"}),
            json!({"resultType": "complete", "task": {"taskId": "m-1"}}),
            json!({"resultType": "input_required", "inputRequests": {}}),
            json!({"resultType": "task", "taskId": ""}),
            json!({"resultType": "task", "content": [], "taskId": "m-1"}),
        ] {
            assert_eq!(created_task(&raw(other.clone())), None, "{other}");
        }
        let renamed = renamed(&created, "m-1", "gw-1").unwrap();
        assert_eq!(created_task(&renamed).unwrap().task_id, "gw-1");
    }

    #[test]
    fn a_task_takes_the_2026_shape() {
        let task = task_object("t", "working", "waiting", ("a", "b"), 60_000, 2000);
        let created = modern_created(created_result(task, Some(json!({"k": 1}))));
        assert_eq!(
            created,
            json!({"resultType": "task", "taskId": "t", "status": "working", "statusMessage": "waiting",
                   "createdAt": "a", "lastUpdatedAt": "b", "ttlMs": 60_000, "pollIntervalMs": 2000, "_meta": {"k": 1}})
        );
        let plain = json!({"content": []});
        assert_eq!(modern_created(plain.clone()), plain);
    }

    #[test]
    fn only_task_ids_are_renamed() {
        let mut value = json!({
            "taskId": "up-1",
            "_meta": {META_RELATED_TASK: {"taskId": "up-1"}},
            "tasks": [{"taskId": "up-1"}, {"taskId": "up-2"}],
            "content": [{"type": "text", "text": "up-1"}],
            "other": {"id": "up-1"},
        });
        rename_task(&mut value, "up-1", "gw-1");
        assert_eq!(value["taskId"], "gw-1");
        assert_eq!(value["_meta"][META_RELATED_TASK]["taskId"], "gw-1");
        assert_eq!(value["tasks"][0]["taskId"], "gw-1");
        assert_eq!(value["tasks"][1]["taskId"], "up-2", "another task's id");
        assert_eq!(value["content"][0]["text"], "up-1", "the tool's data");
        assert_eq!(value["other"]["id"], "up-1");
        let sent = raw(json!({"task": {"taskId": "up-1"}}));
        let renamed = renamed(&sent, "up-1", "gw-1").unwrap();
        assert_eq!(renamed.get(), r#"{"task":{"taskId":"gw-1"}}"#);
        // Spelled with escapes, the key and the id are still those.
        let escaped: Box<RawValue> =
            serde_json::from_str(r#"{"\u0074ask": {"taskId": "u\u0070-1", "status": "working"}}"#)
                .unwrap();
        assert_eq!(created_task(&escaped).unwrap().task_id, "up-1");
        assert_eq!(
            super::renamed(&escaped, "up-1", "gw-1").unwrap().get(),
            r#"{"task":{"taskId":"gw-1","status":"working"}}"#
        );
    }
}
