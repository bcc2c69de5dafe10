//! Decision insights from a real run (issue 50, item 4): forty writes of the filesystem
//! server under one folder, each held and approved by a person, then a write elsewhere
//! declined — `GET /v1/insights` counts them and suggests the rule that would have let the
//! approved ones run, and nothing that was declined.

use serde_json::json;

use super::tool_changes::{AUDITOR, OPERATOR};
use super::{HUMAN, Scene, answer, held_id, http, modern_call, token_sha256};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forty_approved_writes_under_one_folder_are_counted_and_become_a_suggested_rule() {
    let scene = Scene::new("insights", "[store]\nkind = \"memory\"");
    let mut config = std::fs::read_to_string(&scene.config).unwrap();
    config.push_str(&format!(
        "\n[[auth.tokens]]\nsubject = \"sam\"\ntoken_sha256 = \"{}\"\nscopes = [\"audit:read\"]\n\
         [[auth.tokens]]\nsubject = \"olga\"\ntoken_sha256 = \"{}\"\nscopes = [\"audit:read\", \"catalog:approve\"]\n\
         [limits]\ncalls_burst = 500\nconfirmations_burst = 100\n",
        token_sha256(AUDITOR),
        token_sha256(OPERATOR)
    ));
    super::write_secret(&scene.config, &config);
    std::fs::create_dir_all(scene.file("notes")).unwrap();
    super::module_user_owns(&scene.file("notes"));
    let gateway = super::Gateway::start(&scene.config).await;
    let notes = scene.file("notes").display().to_string();
    for n in 0..40 {
        let args =
            json!({"path": format!("{notes}/day-{n}.md"), "content": format!("notes of day {n}")});
        let id = held_id(&modern_call(&gateway.base, "fs__write_file", args.clone(), None).await);
        answer(&gateway.base, &id, true).await;
        let ran = modern_call(&gateway.base, "fs__write_file", args, Some(&id)).await;
        assert_ne!(ran["isError"], true, "{ran}");
    }
    let elsewhere =
        json!({"path": scene.file("elsewhere.md").display().to_string(), "content": "x"});
    let id = held_id(&modern_call(&gateway.base, "fs__write_file", elsewhere, None).await);
    answer(&gateway.base, &id, false).await;

    let read = |token: &'static str| {
        let base = gateway.base.clone();
        async move {
            let auth = format!("Bearer {token}");
            http(
                "GET",
                &format!("{base}/v1/insights?days=1"),
                &[("authorization", &auth)],
                None,
            )
            .await
        }
    };
    // audit:read alone: the counts, and no suggestion (they carry what arguments share).
    let (status, _, body) = read(AUDITOR).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["suggestions"].is_null(), "{body}");
    assert!(
        !body.to_string().contains("notes"),
        "nothing of an argument: {body}"
    );
    let (status, _, body) = read(OPERATOR).await;
    assert_eq!(status, 200, "{body}");
    let row = &body["tools"][0];
    assert_eq!(row["tool"], "fs__write_file", "{body}");
    assert_eq!(row["asked"], 41, "{body}");
    assert_eq!(row["approved"], 40, "{body}");
    assert_eq!(row["declined"], 1, "{body}");
    let suggested = &body["suggestions"][0];
    assert_eq!(suggested["approved"], 40, "{body}");
    assert_eq!(suggested["covers_approved"], 40, "{body}");
    assert_eq!(suggested["also_allows_refused"], 0, "{body}");
    assert_eq!(
        suggested["when"],
        format!(
            "args.path.startsWith('{notes}/') && !args.path.contains('/../') && !args.path.endsWith('/..')"
        ),
        "{body}"
    );
    assert_eq!(suggested["unconstrained"], json!(["content"]), "{body}");
    assert!(
        suggested["policy"]
            .as_str()
            .unwrap()
            .starts_with("[[policy]]\ntool = \"fs__write_file\"\nwhen = "),
        "{body}"
    );
    // A person answering holds no audit scope: they read no insights.
    let human = format!("Bearer {HUMAN}");
    let (status, _, _) = http(
        "GET",
        &format!("{}/v1/insights", gateway.base),
        &[("authorization", &human)],
        None,
    )
    .await;
    assert_eq!(status, 403);
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&scene.dir);
}
