//! Tasks of 2025-11-25 through the gateway, with real peers: the everything server's tool
//! that runs only as a task (`simulate-research-query`), over HTTP and over stdio (a
//! process per caller: a shared one runs no tasks through the gateway), and the
//! TypeScript SDK's task-capable client, which creates the task, polls it, answers the
//! module's question while it waits, and reads its result; another caller cannot reach it.

use std::path::PathBuf;

use serde_json::Value;
use tokio::process::Command;

use super::{ALICE, BOB, Gateway, env_or_panic};

/// The TypeScript client's run against `tool`; what it printed.
async fn ts_tasks(base: &str, tool: &str, ambiguous: bool) -> Value {
    // ESM resolves packages from the script's folder: run it from the npm cache.
    let dir = PathBuf::from(env_or_panic("MCP_INTEROP_NODE_DIR"));
    let script = dir.join(format!("ts_tasks_client_{}_{tool}.mjs", std::process::id()));
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/ts_tasks_client.mjs"
        ),
        &script,
    )
    .unwrap();
    let mut command = Command::new("node");
    command.arg(&script).arg(format!("{base}/mcp")).args([
        ALICE,
        BOB,
        tool,
        if ambiguous { "true" } else { "false" },
    ]);
    let out = super::run_client(command, &format!("typescript tasks {tool}")).await;
    let _ = std::fs::remove_file(&script);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_everything_servers_task_tool_runs_as_a_task_through_the_gateway_for_its_caller_alone()
{
    let server = env_or_panic("MCP_EVERYTHING_SERVER");
    let (_everything, port) = super::everything_over_http().await;
    let (dir, config) = super::alice_and_bob(
        "tasks",
        &format!(
            "[[modules]]\nname = \"web\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{port}/mcp\"\ntrust_annotations = true\n\
             [[modules]]\nname = \"local\"\ntransport = \"stdio\"\ncommand = \"{server}\"\ntrust_annotations = true\nisolation = \"per_caller\"\n\
             [[modules]]\nname = \"held\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{port}/mcp\"\ntrust_annotations = true\n\
             [[policy]]\ntool = \"held__*\"\ngate = \"confirm\"\n"
        ),
    );
    let gateway = Gateway::start(&config).await;
    for (tool, ambiguous) in [
        ("web__simulate-research-query", true),
        ("local__simulate-research-query", true),
        ("web__simulate-research-query", false),
    ] {
        let what = format!("{tool} ambiguous={ambiguous}");
        let out = ts_tasks(&gateway.base, tool, ambiguous).await;
        assert!(
            out["tasks_capability"]["requests"]["tools"]["call"].is_object(),
            "{what}: {out}"
        );
        assert_eq!(
            out["listed"]["execution"]["taskSupport"], "required",
            "{what}: {out}"
        );
        assert_eq!(out["error"], Value::Null, "{what}: {out}");
        let task_id = out["task_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: {out}"));
        assert!(task_id.starts_with("task-"), "the gateway's handle: {out}");
        let kinds: Vec<&str> = out["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        assert_eq!(kinds.first(), Some(&"taskCreated"), "{what}: {out}");
        assert_eq!(kinds.last(), Some(&"result"), "{what}: {out}");
        assert!(
            kinds.contains(&"status:working"),
            "polled while it worked: {out}"
        );
        let text = out["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: {out}"));
        assert!(text.contains("tide mills"), "the module's report: {out}");
        assert_eq!(out["related"]["taskId"], task_id, "{what}: {out}");
        if ambiguous {
            // The module's question reached the client while it waited on the result, tied
            // to the gateway's handle, and its answer reached the module.
            assert_eq!(out["asked"].as_array().unwrap().len(), 1, "{what}: {out}");
            assert_eq!(
                out["asked"][0]["related"]["taskId"], task_id,
                "the module's own id never reaches the client: {out}"
            );
            assert!(text.contains("the history of it"), "{what}: {out}");
        }
        assert!(
            out["mine"].as_array().unwrap().iter().any(|t| t == task_id),
            "listed for its caller: {out}"
        );
        assert_eq!(out["forged"]["code"], -32602, "{what}: {out}");
        for method in ["get", "result", "cancel"] {
            assert_eq!(
                out["stranger"][method]["code"], -32602,
                "another caller's {method}: {out}"
            );
        }
        assert_eq!(out["stranger"]["list"], serde_json::json!([]), "{out}");
    }

    // Held for a person: a task of the gateway's own, which the client polls (working)
    // while the person takes their time, then approves on the approvals page; it completes
    // with the module's result; the call ran once, as the module's own task.
    let client = {
        let base = gateway.base.clone();
        tokio::spawn(async move { ts_tasks(&base, "held__simulate-research-query", false).await })
    };
    let id = pending_confirmation(&gateway.base).await;
    // The person answers after several polls, on the approvals page, in a real browser.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let mut browser = Command::new(env_or_panic("MCP_INTEROP_PYTHON"));
    browser
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/browser/approve_one.py"
        ))
        .arg(&gateway.base)
        .args([super::HUMAN, id.as_str()]);
    let approved = super::run_client(browser, "the person's browser").await;
    assert_eq!(approved["approved"], true, "{approved}");
    let out = client.await.unwrap();
    let kinds: Vec<&str> = out["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert!(
        kinds.iter().filter(|k| **k == "status:working").count() >= 2,
        "polled while the person decided: {out}"
    );
    assert_eq!(kinds.last(), Some(&"result"), "{out}");
    // Approved, it asks for the result (input_required), which runs the call.
    assert!(kinds.contains(&"status:input_required"), "{out}");
    assert_eq!(out["error"], Value::Null, "{out}");
    assert!(
        out["text"]
            .as_str()
            .unwrap_or_default()
            .contains("tide mills"),
        "the module's report: {out}"
    );
    let task_id = out["task_id"].as_str().unwrap();
    assert!(task_id.starts_with("t1."), "{out}");
    assert_eq!(out["related"]["taskId"], task_id, "{out}");
    for method in ["get", "result", "cancel"] {
        assert_eq!(
            out["stranger"][method]["code"], -32602,
            "another caller's {method}: {out}"
        );
    }
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The id of alice's first pending confirmation, once there is one.
async fn pending_confirmation(base: &str) -> String {
    let pending = super::pending_elicitation(base).await;
    pending["id"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_calls_task_is_served_by_either_instance_on_postgres_and_runs_once() {
    let db = elicitation_store::test_support::TestDb::new().await;
    let (_everything, port) = super::everything_over_http().await;
    let (dir, config) = super::alice_and_bob_on(
        "tasks-two",
        &super::postgres_store(&db),
        &format!(
            "[[modules]]\nname = \"held\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{port}/mcp\"\ntrust_annotations = true\n\
             [[policy]]\ntool = \"held__*\"\ngate = \"confirm\"\n"
        ),
    );
    let a = Gateway::start(&config).await;
    let b = Gateway::start(&config).await;
    let on_a = super::session_of(&a, ALICE).await;
    let on_b = super::session_of(&b, ALICE).await;
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "held__simulate-research-query", "arguments": {"topic": "weirs"}, "task": {}}});
    let created = super::in_session(&a, ALICE, &on_a, call).await;
    let handle = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let ask = |method: &str| serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": {"taskId": handle}});
    // The other instance knows it (its state is the store's; the handle opens anywhere).
    let polled = super::in_session(&b, ALICE, &on_b, ask("tasks/get")).await;
    assert_eq!(polled["result"]["status"], "working", "{polled}");
    // Bob, on either, does not.
    let bobs = super::session_of(&b, BOB).await;
    let refused = super::in_session(&b, BOB, &bobs, ask("tasks/get")).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let id = pending_confirmation(&b.base).await;
    super::answer(&b.base, &id, true).await;
    let polled = super::in_session(&a, ALICE, &on_a, ask("tasks/get")).await;
    assert_eq!(polled["result"]["status"], "input_required", "{polled}");
    // Both instances asked for its result at once: it runs once.
    let (x, y) = tokio::join!(
        super::in_session(&a, ALICE, &on_a, ask("tasks/result")),
        super::in_session(&b, ALICE, &on_b, ask("tasks/result")),
    );
    let reports: Vec<&Value> = [&x, &y]
        .into_iter()
        .filter(|r| {
            r["result"]["content"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("weirs"))
        })
        .collect();
    assert_eq!(reports.len(), 1, "one ran: {x} / {y}");
    let other = if reports[0] == &x { &y } else { &x };
    assert!(other.to_string().contains("does not run again"), "{other}");
    a.stop().await;
    b.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
