//! Codex CLI and Gemini CLI through the gateway (issue 45, items 3 and 8), beside Claude
//! Code (e2e.rs, permission_prompt.rs): each the real agent host, headless, on a scripted
//! model API on loopback. Each lists the gateway's tools, runs a read-only call, has a
//! destructive call held, and finishes it by an identical call once a person approves it
//! over REST — or hears the person's decline and note by that call. Neither can set
//! `_meta`; each connects with a token that may not answer confirmations, so the gateway
//! never asks it natively (Codex headless declines every question, which is final).

use super::*;

/// `script` (tests/interop) driving the agent host at the path in `host_env`, writing
/// `{name}.txt` in a new scene's sandbox; the person answers as `decision` says. The scene,
/// the gateway (still running) and what the script saw.
async fn agent_host_writes(
    host_env: &str,
    script: &str,
    name: &str,
    decision: &str,
) -> (Scene, Gateway, Value) {
    let scene = Scene::new(name, "[store]\nkind = \"memory\"");
    let gateway = Gateway::start(&scene.config).await;
    let mut command = Command::new(env_or_panic("MCP_INTEROP_PYTHON"));
    command
        .arg(format!(
            "{}/tests/interop/{script}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .arg(env_or_panic(host_env))
        .arg(&gateway.base)
        .args([AGENT, HUMAN])
        .arg(scene.file(&format!("{name}.txt")))
        .arg(decision);
    let out = run_client(command, name).await;
    (scene, gateway, out)
}

/// What every run shows: the host exited cleanly, offered the model the gateway's tools,
/// ran the read-only call, and had the write held. The results after the held one.
fn listed_read_and_held(out: &Value) -> Vec<String> {
    assert_eq!(out["exit"], 0, "{out}");
    let tools = out["tools"].to_string();
    assert!(
        tools.contains("fs__write_file") && tools.contains("fs__list_allowed_directories"),
        "the gateway's tools reached the model: {out}"
    );
    let results: Vec<String> = out["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(results.len(), 3, "read, held, then answered: {out}");
    assert!(
        results[0].contains("Allowed directories"),
        "the read-only call ran: {out}"
    );
    assert!(
        results[1].contains("approve confirmation"),
        "the write was held: {out}"
    );
    assert_eq!(out["approved"].as_array().map(Vec::len), Some(1), "{out}");
    results[2..].to_vec()
}

async fn approved_write_runs_once(host_env: &str, script: &str, name: &str, written: &str) {
    let (scene, gateway, out) = agent_host_writes(host_env, script, name, "approve").await;
    let after = listed_read_and_held(&out);
    assert!(after[0].contains("Successfully wrote"), "{out}");
    let target = scene.file(&format!("{name}.txt"));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), written);
    let approved = out["approved"][0].as_str().unwrap();
    held_anew_once_used(&gateway, &target, written, approved).await;
    gateway.stop().await;
}

async fn decline_and_note_are_heard(host_env: &str, script: &str, name: &str) {
    let (scene, gateway, out) = agent_host_writes(host_env, script, name, "decline").await;
    let after = listed_read_and_held(&out);
    assert!(
        after[0].contains("declined") && after[0].contains("not run"),
        "the refusal reached the model: {out}"
    );
    assert!(
        after[0].contains("not on this machine"),
        "with the note: {out}"
    );
    assert!(
        !scene.file(&format!("{name}.txt")).exists(),
        "nothing was written"
    );
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_cli_finishes_a_held_call_once_a_person_approves_it() {
    approved_write_runs_once("MCP_CODEX", "codex.py", "codex", "written by codex").await;
}

/// Codex shows the model only a result's structured content: the decline's words are there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_cli_hears_a_decline_and_its_note_by_calling_again() {
    decline_and_note_are_heard("MCP_CODEX", "codex.py", "codex-decline").await;
}

/// Item 3: Gemini CLI negotiates 2025-06-18; a priming event with empty data on its session
/// stream made it disconnect and load no tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_loads_the_tools_and_finishes_a_held_call_once_a_person_approves_it() {
    approved_write_runs_once("MCP_GEMINI", "gemini.py", "gemini", "written by gemini").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_hears_a_decline_and_its_note_by_calling_again() {
    decline_and_note_are_heard("MCP_GEMINI", "gemini.py", "gemini-decline").await;
}
