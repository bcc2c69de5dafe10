//! A client cancels a call (issue 45, item 5), with the official TypeScript SDK: it hears no
//! answer to the request it cancelled (the spec's receiver sends none; the SDK reports one as
//! a response to an unknown id), and the stdio module whose call was cancelled can ask the
//! next caller a question at once, not after the call timeout.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_cancels_a_call_hears_no_answer_to_it_and_the_module_asks_again_at_once()
{
    let scene = Scene::new("ts-cancel", "[store]\nkind = \"memory\"");
    let gateway = Gateway::start(&scene.config).await;
    let out = typescript(&gateway, "cancel", &scene.file("unused.txt")).await;
    assert!(
        out["waited"]
            .as_str()
            .is_some_and(|w| w.starts_with("rejected")),
        "the SDK gave up the call itself: {out}"
    );
    assert_eq!(
        out["errors"],
        json!([]),
        "no answer to the cancelled request reached the SDK: {out}"
    );
    // The module's question on the same stdio connection reached the client (which
    // declines it) — before, it was refused for as long as the cancelled call counted.
    assert_eq!(out["asked"].as_array().map(Vec::len), Some(1), "{out}");
    let answered: Value = serde_json::from_str(out["asked_back"].as_str().unwrap()).unwrap();
    assert_eq!(answered["action"], "decline", "{out}");
    gateway.stop().await;
}
