//! The agent host's own tools, gated: the real Claude Code (`-p`, a scripted Messages API on
//! loopback) asks the gateway's permission-prompt module whether it may run its `Bash`
//! tool; a person answers over the REST API; the command runs only when approved.

use super::tool_changes::config;
use super::*;

const MODULE: &str = "[[modules]]\nname = \"claude\"\ntransport = \"permission_prompt\"\n";

/// The person's pending elicitations, once there are `n` of them (within 30 s).
pub(crate) async fn pending(base: &str, n: usize) -> Vec<Value> {
    let auth = format!("Bearer {HUMAN}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, _, listed) = http(
            "GET",
            &format!("{base}/v1/mcp/elicitations?status=pending"),
            &[("authorization", &auth)],
            None,
        )
        .await;
        let items = listed["elicitations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if items.len() >= n {
            return items;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{n} questions wait: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The agent host asks the permission prompt whether it may run `command` (2026-07-28, in
/// the background): the call's result.
pub(crate) fn ask_permission(
    base: &str,
    command: String,
    tool_use_id: String,
) -> tokio::task::JoinHandle<Value> {
    let base = base.to_owned();
    tokio::spawn(async move {
        modern_call(
            &base,
            "claude__approve",
            json!({"tool_name": "Bash", "input": {"command": command}, "tool_use_id": tool_use_id}),
            None,
        )
        .await
    })
}

/// Claude Code with `--permission-prompt-tool mcp__gw__claude__approve`, the person
/// answering `decision`; what the script saw.
async fn claude_asks(name: &str, decision: &str, policy: &str) -> (Value, PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-prompt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = config(
        &dir,
        "[store]\nkind = \"memory\"",
        &format!("{MODULE}{policy}"),
    );
    let gateway = Gateway::start(&config).await;
    let target = dir.join("bash.txt");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/claude_code.py");
    let mut command = Command::new(env_or_panic("MCP_INTEROP_PYTHON"));
    command
        .arg(script)
        .arg(env_or_panic("MCP_CLAUDE_CODE"))
        .arg(&gateway.base)
        // The agent's token: it may call tools, never answer.
        .args([AGENT, HUMAN, "Bash"])
        .arg(&target)
        .args(["mcp__gw__claude__approve", decision]);
    let out = run_client(command, "claude code").await;
    gateway.stop().await;
    (out, target, dir)
}

/// The person takes 12 s to answer: longer than the store's 10-second operation limit, which
/// used to end the wait with "the store is unavailable" (issue 45, item 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_codes_shell_command_runs_only_after_a_person_approves_it() {
    let (out, target, dir) = claude_asks("approve", "approve-after-12", "").await;
    assert_eq!(out["exit"], 0, "{out}");
    let asked = &out["asked"][0];
    assert_eq!(asked["tool"], "claude__Bash", "{out}");
    assert!(
        asked["arguments"]["command"]
            .as_str()
            .unwrap()
            .contains("printf"),
        "the person saw the command: {out}"
    );
    assert!(
        asked["message"].as_str().unwrap().contains("claude__Bash"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "run by claude code",
        "approved, the command ran: {out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_codes_shell_command_declined_never_runs_and_the_model_reads_why() {
    let (out, target, dir) = claude_asks("decline", "decline", "").await;
    assert_eq!(out["asked"][0]["tool"], "claude__Bash", "{out}");
    assert!(!target.exists(), "declined, nothing ran: {out}");
    let results = out["results"].to_string();
    assert!(
        results.contains("not on this machine"),
        "the person's note reaches the model: {out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The person approves a different command than the model asked for: Claude Code runs the
/// person's (`updatedInput`), never the model's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_runs_the_command_as_the_person_edited_it() {
    let (out, target, dir) = claude_asks("edit", "edit", "").await;
    assert_eq!(out["asked"][0]["tool"], "claude__Bash", "{out}");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "edited by a person",
        "the edited command ran, not the model's: {out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A 2026-07-28 client (no Claude Code: a plain stateless call) asks `approve` directly:
/// the call waits for the person, who approves with edited input, and the answer is Claude
/// Code's documented shape with the edited input; declined, `deny` with the note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_gets_the_permission_answer_with_the_persons_edit() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-prompt-modern-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = config(&dir, "[store]\nkind = \"memory\"", MODULE);
    let gateway = Gateway::start(&config).await;
    let base = gateway.base.clone();
    for (decision, expected) in [
        (
            "edit",
            json!({"behavior": "allow", "updatedInput": {"command": "ls /srv", "description": "List"}}),
        ),
        (
            "decline",
            json!({"behavior": "deny", "message": "not today"}),
        ),
    ] {
        let asking = {
            let base = base.clone();
            tokio::spawn(async move {
                modern_call(
                    &base,
                    "claude__approve",
                    json!({"tool_name": "Bash", "input": {"command": "rm -rf /srv", "description": "List"}, "tool_use_id": "toolu_9"}),
                    None,
                )
                .await
            })
        };
        // The person finds the question and answers it.
        let auth = format!("Bearer {HUMAN}");
        let item = pending(&base, 1).await[0].clone();
        assert_eq!(item["tool"], "claude__Bash", "{item}");
        assert_eq!(item["arguments"]["command"], "rm -rf /srv", "{item}");
        let body = if decision == "edit" {
            json!({"confirmed": true, "arguments": {"command": "ls /srv", "description": "List"}})
        } else {
            json!({"confirmed": false, "note": "not today"})
        };
        let id = item["id"].as_str().unwrap();
        let (status, _, answered) = http(
            "POST",
            &format!("{base}/v1/mcp/elicitations/{id}/respond"),
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            Some(&body),
        )
        .await;
        assert_eq!(status, 200, "{answered}");
        let result = asking.await.unwrap();
        assert_eq!(result["isError"], false, "{result}");
        let said: Value = serde_json::from_str(&text(&result)).unwrap();
        match expected["message"].as_str() {
            // The refusal tells the model the person's note, in a sentence of its own.
            Some(note) => {
                assert_eq!(said["behavior"], "deny", "{result}");
                assert!(said["message"].as_str().unwrap().contains(note), "{result}");
            }
            None => assert_eq!(said, expected, "{decision}: {result}"),
        }
    }
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `[[policy]]` rule on the host's tool decides without a person: denied, with its reason
/// told to the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_rule_denies_claude_codes_shell_without_asking_anyone() {
    let deny = "[[policy]]\ntool = \"claude__Bash\"\ngate = \"deny\"\nreason = \"no shell on the build host\"\n";
    let (out, target, dir) = claude_asks("policy", "approve", deny).await;
    assert!(!target.exists(), "denied, nothing ran: {out}");
    assert_eq!(out["asked"], json!([]), "nobody was asked: {out}");
    assert!(
        out["results"]
            .to_string()
            .contains("no shell on the build host"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 44, item 4: a permission prompt waiting for a person holds one of its caller's
/// long-lived slots (80 of them held every connection and `/healthz`), so past
/// `max_streams_per_caller` the next is denied at once — nothing runs — while the waiting
/// ones are still answered by the person, and probes are served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_permission_prompts_hold_their_callers_share_and_the_next_is_denied() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-prompt-share-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = config(
        &dir,
        "[store]\nkind = \"memory\"\n[http]\nmax_streams_per_caller = 2\nmax_connections = 8",
        MODULE,
    );
    let gateway = Gateway::start(&config).await;
    let base = gateway.base.clone();
    let ask = |n: usize| ask_permission(&base, format!("rm -rf /srv/{n}"), format!("toolu_{n}"));
    let waiting = [ask(1), ask(2)];
    let auth = format!("Bearer {HUMAN}");
    let questions = pending(&base, 2).await;
    // The third is denied at once: no question is asked, nothing may run.
    let third = tokio::time::timeout(Duration::from_secs(30), ask(3))
        .await
        .expect("answered at once")
        .unwrap();
    let said: Value = serde_json::from_str(&text(&third)).unwrap();
    assert_eq!(said["behavior"], "deny", "{third}");
    assert!(
        said["message"]
            .as_str()
            .unwrap()
            .contains("requests waiting for a person"),
        "{third}"
    );
    let (status, _, _) = http("GET", &format!("{base}/healthz"), &[], None).await;
    assert_eq!(status, 200);
    // The person answers the two that wait.
    for item in &questions {
        let id = item["id"].as_str().unwrap();
        let (status, _, answered) = http(
            "POST",
            &format!("{base}/v1/mcp/elicitations/{id}/respond"),
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            Some(&json!({"confirmed": false, "note": "not now"})),
        )
        .await;
        assert_eq!(status, 200, "{answered}");
    }
    for asking in waiting {
        let result = asking.await.unwrap();
        let said: Value = serde_json::from_str(&text(&result)).unwrap();
        assert_eq!(said["behavior"], "deny", "{result}");
        assert!(
            said["message"].as_str().unwrap().contains("not now"),
            "{result}"
        );
    }
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
