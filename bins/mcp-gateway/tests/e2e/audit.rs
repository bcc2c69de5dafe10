//! The audit trail end to end: the chain a running gateway seals, verified by
//! `mcp-gateway audit verify`, and what it says once the database's superuser changes it.

use super::notifications::write_tool;
use super::tool_changes::{Shifty, config};
use super::*;

/// `mcp-gateway audit verify` on a real run: the chain the gateway sealed while it served is
/// whole, and a row the database's superuser changes afterwards is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_verify_finds_the_row_a_superuser_changed_after_a_real_run() {
    let db = TestDb::new().await;
    let dir = std::env::temp_dir().join(format!("mcp-e2e-audit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let shifty = Shifty::start(&dir, "notes", "stdio", write_tool(), "").await;
    let store = format!("{}\nsweep_interval = \"1s\"", postgres_store(&db));
    let config = config(&dir, &store, &shifty.module);
    let gateway = Gateway::start(&config).await;
    let id =
        held_id(&modern_call(&gateway.base, "notes__write", json!({"path": "/a"}), None).await);
    answer(&gateway.base, &id, true).await;
    let ran = modern_call(
        &gateway.base,
        "notes__write",
        json!({"path": "/a"}),
        Some(&id),
    )
    .await;
    assert_eq!(text(&ran), "ran write", "{ran}");
    let admin = db.admin().await;
    // The call's outcome joins its record (in the background, after it ran).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let completed = admin
            .query(
                "SELECT detail->>'outcome' FROM mcp_audit_events WHERE event = 'tool_call_completed'",
                &[],
            )
            .await
            .unwrap();
        if let Some(row) = completed.first() {
            assert_eq!(row.get::<_, Option<String>>(0).as_deref(), Some("ok"));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no tool_call_completed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rows: i64 = admin
        .query_one("SELECT count(*) FROM mcp_audit_events", &[])
        .await
        .unwrap()
        .get(0);
    // Sealed once settled (15 s after they were written), by the running gateway's sweep.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let sealed: i64 = admin
            .query_one(
                "SELECT count(*) FROM mcp_audit_events WHERE mac IS NOT NULL",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if sealed >= rows {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{sealed} of {rows} sealed"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    gateway.stop().await;
    let verify = || async {
        let out = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"))
            .args(["--config"])
            .arg(&config)
            .args(["audit", "verify", "--database-url", &TestDb::url(&db.admin)])
            .output()
            .await
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (ok, said) = verify().await;
    assert!(ok, "{said}");
    assert!(said.contains("the audit chain is whole"), "{said}");
    let forwarded: i64 = admin
        .query_one(
            "SELECT id FROM mcp_audit_events WHERE event = 'tool_call_forwarded'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    admin
        .execute(
            "UPDATE mcp_audit_events SET caller_subject = 'bob' WHERE id = $1",
            &[&forwarded],
        )
        .await
        .unwrap();
    let (ok, said) = verify().await;
    assert!(!ok, "{said}");
    assert!(
        said.contains(&format!("BROKEN at row {forwarded}")),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
