//! A real child process as a stdio module: crashes mid-call are errors, not outages, and
//! list_changed notifications refresh the catalog.

// Helpers of a test crate: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use elicitation_store::MemoryStore;
use gating_core::GatePolicy;
use mcp_auth::Principal;
use mcp_gate::Gateway;
use mcp_upstream::registry::{ModuleSpec, Registry};
use mcp_upstream::stdio::{StdioConfig, StdioModule};
use mcp_wire::CallToolParams;
use serde_json::{Value, json};

fn principal() -> Principal {
    match mcp_auth::Auth::none() {
        mcp_auth::Auth::None(p) => (*p).clone(),
        _ => unreachable!(),
    }
}

async fn crashy() -> (Arc<StdioModule>, Arc<Registry>, Gateway) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/crashy_module.py"
    );
    let module = Arc::new(StdioModule::start(StdioConfig {
        name: "crashy".into(),
        command: "python3".into(),
        args: vec![script.into()],
        env: Vec::new(),
        inherit_env: Vec::new(),
        cwd: None,
        call_timeout: Duration::from_secs(30),
        run_as: None,
    }));
    assert!(
        module.ready(Duration::from_secs(30)).await,
        "the fixture starts"
    );
    let registry = Registry::start(vec![ModuleSpec {
        isolation: None,
        name: "crashy".into(),
        prefix: "crashy".into(),
        trust_annotations: true,
        module: module.clone(),
    }])
    .await
    .unwrap();
    let gateway = Gateway::new(
        registry.clone(),
        Arc::new(MemoryStore::default()),
        GatePolicy::default(),
        false,
    );
    (module, registry, gateway)
}

fn params(name: &str, arguments: Value) -> CallToolParams {
    serde_json::from_value(json!({"name": name, "arguments": arguments})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_that_crashes_mid_call_yields_an_error_result_and_the_gateway_keeps_serving() {
    let (module, _registry, gateway) = crashy().await;
    let p = principal();
    let echoed = gateway
        .call_tool(&p, params("crashy__echo", json!({"text": "before"})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(echoed["content"][0]["text"], "before");

    let crashed = gateway
        .call_tool(&p, params("crashy__crash", json!({})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(crashed["isError"], true, "{crashed}");
    assert_eq!(crashed["structuredContent"]["upstream_error"], true);
    assert!(
        crashed["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("failed during the call"),
        "{crashed}"
    );

    // The supervisor restarts it; the same gateway serves the next call.
    assert!(
        module.ready(Duration::from_secs(30)).await,
        "the module comes back"
    );
    let echoed = gateway
        .call_tool(&p, params("crashy__echo", json!({"text": "after"})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(echoed["content"][0]["text"], "after");
    mcp_upstream::Module::shutdown(&*module).await;
    let down = gateway
        .call_tool(&p, params("crashy__echo", json!({"text": "x"})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(
        down["structuredContent"]["upstream_error"], true,
        "a stopped module fails cleanly: {down}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_from_a_module_refreshes_the_tool_list() {
    let (module, registry, gateway) = crashy().await;
    let mut refreshed = registry.refreshed();
    assert!(registry.lookup("crashy__extra").is_none());
    gateway
        .call_tool(&principal(), params("crashy__grow", json!({})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), refreshed.recv())
        .await
        .expect("a refresh follows the notification")
        .unwrap();
    let names: Vec<String> = gateway
        .list_tools(true)
        .await
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.contains(&"crashy__extra".to_owned()), "{names:?}");
    mcp_upstream::Module::shutdown(&*module).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_arguments_cannot_end_the_line_and_smuggle_a_second_request_to_a_stdio_module() {
    let (module, _registry, gateway) = crashy().await;
    let p = principal();
    // Arguments pass through as the client wrote them, newlines between tokens included. If
    // they reached the module's stdin unchanged, the second line would be a call of `crash`
    // that no gate ever saw.
    let smuggling: CallToolParams = serde_json::from_str(
        "{\"name\":\"crashy__echo\",\"arguments\":{\"text\":\n\"smuggle\",\"x\":\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"crash\",\"arguments\":{}}}\r\n}}",
    )
    .unwrap();
    let echoed = gateway
        .call_tool(&p, smuggling)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(echoed["content"][0]["text"], "smuggle", "{echoed}");
    let after = gateway
        .call_tool(&p, params("crashy__echo", json!({"text": "still up"})))
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(
        after["content"][0]["text"], "still up",
        "the module never ran the smuggled crash: {after}"
    );
    mcp_upstream::Module::shutdown(&*module).await;
}

/// The misbehaving fixture as module `faulty`, with `call_timeout`, its ledger, and a
/// gateway over it on the memory store.
async fn faulty(
    call_timeout: Duration,
) -> (
    Arc<StdioModule>,
    Gateway,
    Arc<MemoryStore>,
    std::path::PathBuf,
) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/faulty_module.py"
    );
    let ledger = std::env::temp_dir().join(format!(
        "mcp-faulty-ledger-{}-{}",
        std::process::id(),
        NEXT_LEDGER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&ledger);
    let module = Arc::new(StdioModule::start(StdioConfig {
        name: "faulty".into(),
        command: "python3".into(),
        args: vec![script.into(), ledger.display().to_string()],
        env: Vec::new(),
        inherit_env: Vec::new(),
        cwd: None,
        call_timeout,
        run_as: None,
    }));
    assert!(
        module.ready(Duration::from_secs(30)).await,
        "the fixture starts"
    );
    let registry = Registry::start(vec![ModuleSpec {
        isolation: None,
        name: "faulty".into(),
        prefix: "faulty".into(),
        trust_annotations: true,
        module: module.clone(),
    }])
    .await
    .unwrap();
    let store = Arc::new(MemoryStore::default());
    let gateway = Gateway::new(registry, store.clone(), GatePolicy::default(), false);
    (module, gateway, store, ledger)
}

static NEXT_LEDGER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

async fn result_of(gateway: &Gateway, name: &str, arguments: Value, meta: Option<Value>) -> Value {
    let mut params = json!({"name": name, "arguments": arguments});
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    let params: CallToolParams = serde_json::from_value(params).unwrap();
    gateway
        .call_tool(&principal(), params)
        .await
        .unwrap()
        .into_result()
        .unwrap()
}

fn ledger_lines(ledger: &std::path::Path) -> usize {
    std::fs::read_to_string(ledger).map_or(0, |t| t.lines().count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_that_answers_garbage_twice_or_never_gets_an_error_and_the_next_call_works() {
    let (module, gateway, _store, _ledger) = faulty(Duration::from_secs(2)).await;
    for (tool, what) in [("garbage", "garbage"), ("silent", "no answer")] {
        let failed = result_of(&gateway, &format!("faulty__{tool}"), json!({}), None).await;
        assert_eq!(failed["isError"], true, "{what}: {failed}");
        assert_eq!(
            failed["structuredContent"]["upstream_error"], true,
            "{what}: {failed}"
        );
        // The module is still usable, and the next call gets its own answer.
        let echoed = result_of(&gateway, "faulty__echo", json!({"text": tool}), None).await;
        assert_eq!(echoed["content"][0]["text"], tool, "after {what}: {echoed}");
    }
    // Answered twice (and a third, stale time): the first answer counts, the others are
    // dropped, and do not become the answer to the next call.
    let twice = result_of(&gateway, "faulty__twice", json!({}), None).await;
    assert_eq!(twice["content"][0]["text"], "first", "{twice}");
    for i in 0..3 {
        let text = format!("own answer {i}");
        let echoed = result_of(&gateway, "faulty__echo", json!({"text": text}), None).await;
        assert_eq!(echoed["content"][0]["text"], text, "{echoed}");
    }
    mcp_upstream::Module::shutdown(&*module).await;
}

/// Resident memory of this process now (`VmRSS`) or at its peak (`VmHWM`), in bytes.
fn memory_bytes(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib * 1024
}

/// Set in the process the flood test runs alone in.
const ALONE: &str = "MCP_TEST_ALONE";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_flooding_notifications_does_not_grow_the_gateways_memory() {
    // The memory measured is the whole process's: run alone, in a process of its own, so
    // that no other test of this binary, running beside it, counts as the flood's.
    if std::env::var_os(ALONE).is_none() {
        let name = "stdio::a_module_flooding_notifications_does_not_grow_the_gateways_memory";
        let alone = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--test-threads=1", "--nocapture"])
            .env(ALONE, "1")
            .output()
            .await
            .unwrap();
        let said = String::from_utf8_lossy(&alone.stdout).into_owned()
            + &String::from_utf8_lossy(&alone.stderr);
        assert!(
            alone.status.success() && said.contains("1 passed"),
            "alone: {said}"
        );
        return;
    }
    // Time enough to read 64 MiB in a debug build on a loaded machine.
    let (module, gateway, _store, _ledger) = faulty(Duration::from_secs(120)).await;
    // Warm up the paths the flood takes, so their one-off allocations are not counted.
    let warm = result_of(
        &gateway,
        "faulty__flood",
        json!({"count": 2000, "size": 2048}),
        None,
    )
    .await;
    assert_eq!(warm["content"][0]["text"], "flooded", "{warm}");
    let before = memory_bytes("VmRSS:");
    let peak_before = memory_bytes("VmHWM:");
    // 64 MiB of notifications: kept, they would show many times over.
    let flooded = result_of(
        &gateway,
        "faulty__flood",
        json!({"count": 32_768, "size": 2048}),
        None,
    )
    .await;
    assert_eq!(flooded["content"][0]["text"], "flooded", "{flooded}");
    let grown = memory_bytes("VmRSS:").saturating_sub(before);
    // The peak too: a queue drained by the end would still have raised it. (The peak is
    // the whole test process's, so it can only overstate what the flood cost.)
    let peak = memory_bytes("VmHWM:").saturating_sub(peak_before.max(before));
    for (what, bytes) in [("grew", grown), ("peaked", peak)] {
        assert!(
            bytes < 24 * 1024 * 1024,
            "the gateway {what} by {} MiB over a 64 MiB flood of notifications",
            bytes / (1024 * 1024)
        );
    }
    let echoed = result_of(&gateway, "faulty__echo", json!({"text": "after"}), None).await;
    assert_eq!(echoed["content"][0]["text"], "after");
    mcp_upstream::Module::shutdown(&*module).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmation_used_by_a_call_whose_module_died_must_be_approved_again() {
    let (module, gateway, store, ledger) = faulty(Duration::from_secs(30)).await;
    let caller = principal().caller;
    let args = json!({"path": "/important"});
    let held = result_of(&gateway, "faulty__erase_then_die", args.clone(), None).await;
    let id = held["structuredContent"]["elicitation"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("held: {held}"))
        .to_owned();
    elicitation_store::ElicitationStore::respond(
        &*store,
        &caller,
        id.parse().unwrap(),
        json!({"confirmed": true}),
    )
    .await
    .unwrap();
    // The module ran part of it (the ledger line) and died before answering.
    let died = result_of(
        &gateway,
        "faulty__erase_then_die",
        args.clone(),
        Some(json!({"confirmation_id": id})),
    )
    .await;
    assert_eq!(died["isError"], true, "{died}");
    assert_eq!(died["structuredContent"]["upstream_error"], true, "{died}");
    assert_eq!(ledger_lines(&ledger), 1);
    assert!(
        module.ready(Duration::from_secs(30)).await,
        "the module restarts"
    );
    // The confirmation was used: re-calling with it is held anew, not forwarded.
    let again = result_of(
        &gateway,
        "faulty__erase_then_die",
        args.clone(),
        Some(json!({"confirmation_id": id})),
    )
    .await;
    assert_eq!(
        again["structuredContent"]["elicitation_required"], true,
        "{again}"
    );
    assert_ne!(
        again["structuredContent"]["elicitation"]["id"], id,
        "a new confirmation: {again}"
    );
    assert_eq!(
        ledger_lines(&ledger),
        1,
        "a used confirmation ran its call again"
    );
    let _ = std::fs::remove_file(&ledger);
    mcp_upstream::Module::shutdown(&*module).await;
}
