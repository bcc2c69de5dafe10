use std::sync::Arc;

use base64::Engine as _;
use elicitation_core::{ElicitationSpec, ElicitationStatus, RespondOutcome, ResponseSpec};
use serde_json::json;
use tokio_postgres::error::SqlState;

use super::*;
use crate::ConfirmationRequest;
use crate::GateRecord;
use crate::ListQuery;
use crate::Redeemed;
use crate::conformance::{Harness, Setup, conformance_tests, start_time};
use crate::store::ElicitationStore;
use crate::{AuditSink, Fleet};
use crate::{GrantStore as _, ManualClock, PolicyRef, RejectReason, SealError};
use elicitation_core::{CancelReason, TransitionError};
use time::Duration;

use crate::test_support::TestDb;

fn key_spec(ids: &[(&str, u8)]) -> String {
    ids.iter()
        .map(|(id, byte)| {
            format!(
                "{id}:{}",
                base64::engine::general_purpose::STANDARD.encode([*byte; 32])
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

async fn store_on(
    db: &TestDb,
    keys: &str,
    clock: Arc<ManualClock>,
    setup: Setup,
    pool_size: usize,
) -> PostgresStore {
    let mut options = PostgresOptions::new(
        "postgres://unused@localhost/unused",
        KeyRing::parse(keys).unwrap(),
    )
    .unwrap();
    options.config = db.writer.clone();
    options.clock = clock;
    options.pool_size = pool_size;
    options.max_pending_per_caller = setup.max_pending_per_caller;
    options.notify_events = setup.notify_events.to_vec();
    PostgresStore::connect(options)
        .await
        .expect("the store connects as the writer login")
}

/// Two stores with separate pools (and LISTEN connections) on one fresh database, as two
/// gateway instances would be.
async fn make(setup: Setup) -> Harness {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let keys = key_spec(&[("k1", 1)]);
    let store = store_on(&db, &keys, clock.clone(), setup, 8).await;
    let twin = store_on(&db, &keys, clock.clone(), setup, 8).await;
    Harness {
        store: Arc::new(store),
        twin: Arc::new(twin),
        clock,
    }
}

conformance_tests!(make);

fn alice() -> Caller {
    Caller::new("alice", Some("acme".into())).unwrap()
}

fn bob() -> Caller {
    Caller::new("bob", Some("acme".into())).unwrap()
}

fn confirmation_request(arguments: Value) -> ConfirmationRequest {
    ConfirmationRequest::new(
        "fs__delete",
        gating_core::CallDigest::of(&json!({"name": "fs__delete"})),
        arguments,
        "Delete it?",
        Duration::minutes(10),
    )
}

/// The binding of a call of `fs__delete` with `arguments`, as [`confirmation_request`]
/// holds it.
fn delete_binding(arguments: &Value) -> CallBinding {
    CallBinding {
        server: None,
        tool: "fs__delete".into(),
        digest: gating_core::CallDigest::of(arguments),
        definition: gating_core::CallDigest::of(&json!({"name": "fs__delete"})),
    }
}

/// Every column of every row, as text, as an operator with raw SQL access would see it.
async fn raw_rows(db: &TestDb) -> String {
    let admin = db.admin().await;
    let rows = admin
        .query("SELECT row_to_json(e)::text FROM mcp_elicitations e UNION ALL SELECT row_to_json(a)::text FROM mcp_audit_events a", &[])
        .await
        .unwrap();
    rows.iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_persists_seals_and_is_caller_scoped() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let keys = key_spec(&[("k1", 1)]);
    let store = store_on(&db, &keys, clock.clone(), Setup::default(), 2).await;

    let arguments = json!({"path": "/home/alice/ARGUMENT-MARKER-7f3a.txt"});
    let held = store
        .create_confirmation(&alice(), confirmation_request(arguments.clone()))
        .await
        .unwrap();
    let spec = ElicitationSpec::new(
        "Your codename?",
        ResponseSpec::StringInput {
            min_length: None,
            max_length: None,
        },
    )
    .unwrap();
    let question = store
        .create(&alice(), spec, Duration::minutes(5))
        .await
        .unwrap();
    assert_eq!(
        store
            .respond(
                &alice(),
                question.id,
                json!({"value": "RESPONSE-MARKER-91c2"})
            )
            .await
            .unwrap(),
        RespondOutcome::Recorded
    );
    store
        .respond(&alice(), held.elicitation.id, json!({"confirmed": true}))
        .await
        .unwrap();

    let raw = raw_rows(&db).await;
    assert!(
        raw.contains(&held.elicitation.id.to_string()),
        "the rows are there"
    );
    for secret in [
        "ARGUMENT-MARKER-7f3a",
        "RESPONSE-MARKER-91c2",
        "/home/alice",
    ] {
        assert!(
            !raw.contains(secret),
            "{secret} reached the database in clear:\n{raw}"
        );
    }

    // Another caller sees and answers nothing.
    assert!(matches!(
        store.get(&bob(), held.elicitation.id).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store
            .respond(&bob(), question.id, json!({"value": "x"}))
            .await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(
        store
            .list(
                &bob(),
                ListQuery {
                    status: None,
                    limit: 10
                }
            )
            .await
            .unwrap()
            .is_empty()
    );

    // The rows survive a new pool (and a new process's empty caches).
    let before_held = store.get(&alice(), held.elicitation.id).await.unwrap();
    let before_question = store.get(&alice(), question.id).await.unwrap();
    drop(store);
    let reopened = store_on(&db, &keys, clock, Setup::default(), 2).await;
    let after_held = reopened.get(&alice(), held.elicitation.id).await.unwrap();
    assert_eq!(after_held, before_held);
    assert_eq!(after_held.call.unwrap().arguments, arguments);
    assert_eq!(
        reopened.get(&alice(), question.id).await.unwrap(),
        before_question
    );
    assert_eq!(
        reopened
            .respond(
                &alice(),
                question.id,
                json!({"value": "RESPONSE-MARKER-91c2"})
            )
            .await
            .unwrap(),
        RespondOutcome::AlreadyRecorded
    );
}

/// Sets the caller for the rest of the transaction on a raw connection.
async fn as_caller(client: &tokio_postgres::Client, subject: &str, tenant: &str) {
    client
        .query("SELECT set_config('mcp.caller_subject', $1, false), set_config('mcp.caller_tenant', $2, false)", &[&subject, &tenant])
        .await
        .unwrap();
}

fn sqlstate(result: Result<u64, tokio_postgres::Error>) -> Option<SqlState> {
    result.err().and_then(|e| e.code().cloned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_role_cannot_delete_or_rewrite_the_caller() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(&db, &key_spec(&[("k1", 1)]), clock, Setup::default(), 1).await;
    let id = store
        .create_confirmation(&alice(), confirmation_request(json!({"p": 1})))
        .await
        .unwrap()
        .elicitation
        .id;

    let writer = db.writer().await;
    as_caller(&writer, "alice", "acme").await;
    let denied = [
        "DELETE FROM mcp_elicitations",
        "UPDATE mcp_elicitations SET caller_subject = 'mallory'",
        "UPDATE mcp_elicitations SET caller_tenant = NULL",
        "UPDATE mcp_elicitations SET type = 'string_input'",
        "UPDATE mcp_elicitations SET tool_name = 'fs__read'",
        "UPDATE mcp_elicitations SET call_digest = call_digest",
        "UPDATE mcp_elicitations SET request_sealed = NULL, request_key_id = NULL",
        "UPDATE mcp_elicitations SET message = 'Read it?'",
        "UPDATE mcp_elicitations SET expires_at = expires_at + interval '1 year'",
        "UPDATE mcp_elicitations SET approver_group = 'everyone', approval_mode = 'may'",
        "DELETE FROM mcp_audit_events",
        "UPDATE mcp_audit_events SET event = 'tool_call_forwarded'",
        "TRUNCATE mcp_elicitations",
        "TRUNCATE mcp_audit_events",
        "ALTER TABLE mcp_elicitations DISABLE ROW LEVEL SECURITY",
    ];
    for statement in denied {
        let code = sqlstate(writer.execute(statement, &[]).await);
        assert!(
            code == Some(SqlState::INSUFFICIENT_PRIVILEGE)
                || code == Some(SqlState::from_code("42501")),
            "{statement}: {code:?}"
        );
    }
    // What the writer may do: move the lifecycle columns.
    let updated = writer
        .execute("UPDATE mcp_elicitations SET status = 'cancelled', cancel_reason = 'cancelled_by_caller', cancelled_at = now() WHERE id = $1", &[id.as_uuid()])
        .await
        .unwrap();
    assert_eq!(updated, 1);
    let admin = db.admin().await;
    let subject: String = admin
        .query_one(
            "SELECT caller_subject FROM mcp_elicitations WHERE id = $1",
            &[id.as_uuid()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(subject, "alice");
}

/// Rows of both tables visible on this connection.
async fn count(client: &tokio_postgres::Client) -> (i64, i64) {
    let e: i64 = client
        .query_one("SELECT count(*) FROM mcp_elicitations", &[])
        .await
        .unwrap()
        .get(0);
    let a: i64 = client
        .query_one("SELECT count(*) FROM mcp_audit_events", &[])
        .await
        .unwrap()
        .get(0);
    (e, a)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_level_security_hides_other_callers() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(&db, &key_spec(&[("k1", 1)]), clock, Setup::default(), 1).await;
    let id = store
        .create_confirmation(&alice(), confirmation_request(json!({"p": 1})))
        .await
        .unwrap()
        .elicitation
        .id;
    store
        .create_confirmation(&bob(), confirmation_request(json!({"p": 2})))
        .await
        .unwrap();

    // Raw SQL without any WHERE on the caller: RLS alone decides what is visible.
    let writer = db.writer().await;
    assert_eq!(
        count(&writer).await,
        (0, 0),
        "no caller set: nothing visible"
    );
    // Each caller: one elicitation, two audit rows (requested, held).
    as_caller(&writer, "alice", "acme").await;
    assert_eq!(count(&writer).await, (1, 2));
    as_caller(&writer, "alice", "globex").await;
    assert_eq!(count(&writer).await, (0, 0), "same subject, other tenant");
    as_caller(&writer, "bob", "acme").await;
    assert_eq!(count(&writer).await, (1, 2));
    let touched = writer
        .execute("UPDATE mcp_elicitations SET status = 'cancelled', cancel_reason = 'declined', cancelled_at = now() WHERE id = $1", &[id.as_uuid()])
        .await
        .unwrap();
    assert_eq!(touched, 0, "bob cannot update alice's row even by id");
    let forged = writer
        .execute(
            "INSERT INTO mcp_elicitations (id, caller_subject, caller_tenant, type, message_sealed, message_key_id, spec, created_at, expires_at) \
             VALUES (gen_random_uuid(), 'alice', 'acme', 'confirmation', '\\x00', 'k1', '{\"type\":\"confirmation\"}', now(), now() + interval '1 minute')",
            &[],
        )
        .await;
    assert_eq!(
        sqlstate(forged),
        Some(SqlState::INSUFFICIENT_PRIVILEGE),
        "bob cannot write a row owned by alice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ciphertext_moved_to_another_row_fails_to_open() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(&db, &key_spec(&[("k1", 1)]), clock, Setup::default(), 1).await;
    let a = store
        .create_confirmation(&alice(), confirmation_request(json!({"path": "/a"})))
        .await
        .unwrap()
        .elicitation
        .id;
    let b = store
        .create_confirmation(&alice(), confirmation_request(json!({"path": "/b"})))
        .await
        .unwrap()
        .elicitation
        .id;
    let c = store
        .create_confirmation(&bob(), confirmation_request(json!({"path": "/c"})))
        .await
        .unwrap()
        .elicitation
        .id;
    let admin = db.admin().await;
    for (from, to) in [(a, b), (a, c)] {
        admin
            .execute(
                "UPDATE mcp_elicitations t SET request_sealed = f.request_sealed, request_key_id = f.request_key_id \
                 FROM mcp_elicitations f WHERE f.id = $1 AND t.id = $2",
                &[from.as_uuid(), to.as_uuid()],
            )
            .await
            .unwrap();
    }
    assert!(matches!(
        store.get(&alice(), b).await,
        Err(StoreError::Seal(SealError::Open))
    ));
    assert!(matches!(
        store.get(&bob(), c).await,
        Err(StoreError::Seal(SealError::Open))
    ));
    assert_eq!(
        store
            .get(&alice(), a)
            .await
            .unwrap()
            .call
            .unwrap()
            .arguments,
        json!({"path": "/a"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_key_still_opens_old_rows() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let old = store_on(
        &db,
        &key_spec(&[("k1", 1)]),
        clock.clone(),
        Setup::default(),
        1,
    )
    .await;
    let before = old
        .create_confirmation(&alice(), confirmation_request(json!({"n": 1})))
        .await
        .unwrap()
        .elicitation
        .id;
    drop(old);

    let rotated = store_on(
        &db,
        &key_spec(&[("k2", 2), ("k1", 1)]),
        clock.clone(),
        Setup::default(),
        1,
    )
    .await;
    rotated
        .respond(&alice(), before, json!({"confirmed": true}))
        .await
        .unwrap();
    let after = rotated
        .create_confirmation(&alice(), confirmation_request(json!({"n": 2})))
        .await
        .unwrap()
        .elicitation
        .id;
    let got = rotated.get(&alice(), before).await.unwrap();
    assert_eq!(got.call.unwrap().arguments, json!({"n": 1}));
    assert_eq!(got.elicitation.response, Some(json!({"confirmed": true})));

    let admin = db.admin().await;
    let key_ids = |id: ElicitationId| {
        let admin = &admin;
        async move {
            let row = admin
                .query_one(
                    "SELECT request_key_id, response_key_id FROM mcp_elicitations WHERE id = $1",
                    &[id.as_uuid()],
                )
                .await
                .unwrap();
            (row.get::<_, String>(0), row.get::<_, Option<String>>(1))
        }
    };
    assert_eq!(
        key_ids(before).await,
        ("k1".to_owned(), Some("k2".to_owned()))
    );
    assert_eq!(key_ids(after).await, ("k2".to_owned(), None));

    let retired = store_on(&db, &key_spec(&[("k2", 2)]), clock, Setup::default(), 1).await;
    assert!(matches!(
        retired.get(&alice(), before).await,
        Err(StoreError::Seal(SealError::UnknownKey { .. }))
    ));
    retired.get(&alice(), after).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_trail_records_the_lifecycle_without_payloads() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(
        &db,
        &key_spec(&[("k1", 1)]),
        clock.clone(),
        Setup::default(),
        1,
    )
    .await;
    let args = json!({"path": "/secret-audit-path"});
    let answered = store
        .create_confirmation(&alice(), confirmation_request(args.clone()))
        .await
        .unwrap()
        .elicitation
        .id;
    store
        .respond(&alice(), answered, json!({"confirmed": true}))
        .await
        .unwrap();
    let binding = delete_binding(&args);
    store
        .consume_confirmation(&alice(), answered, &binding)
        .await
        .unwrap();
    let cancelled = store
        .create_confirmation(&alice(), confirmation_request(args.clone()))
        .await
        .unwrap()
        .elicitation
        .id;
    store
        .cancel(&alice(), cancelled, CancelReason::CancelledByPerson)
        .await
        .unwrap();
    let rejected = GateRecord::Rejected(RejectReason::ConfirmationCancelled);
    store
        .record_gate(
            &alice(),
            Some(cancelled),
            "fs__delete",
            rejected,
            &PolicyRef::default(),
        )
        .await
        .unwrap();
    // A refusal about no confirmation (policy), naming the rule and policy that made it,
    // and a call a shadow rule forwarded; a hold on one still pending.
    let by_rule = |rule| PolicyRef {
        rule: Some(rule),
        policy: Some("ab12".into()),
        server: None,
    };
    let denied = GateRecord::Rejected(RejectReason::PolicyDenied);
    store
        .record_gate(&alice(), None, "fs__format", denied, &by_rule(2))
        .await
        .unwrap();
    store
        .record_gate(
            &alice(),
            None,
            "fs__write",
            GateRecord::Shadowed,
            &by_rule(0),
        )
        .await
        .unwrap();
    let failed = store
        .create_confirmation(&alice(), confirmation_request(args.clone()))
        .await
        .unwrap()
        .elicitation
        .id;
    for _ in 0..3 {
        store
            .respond(&alice(), failed, json!({"confirmed": "maybe"}))
            .await
            .unwrap();
    }
    // What every hold records: the call's digest and the shown message's.
    let message = confirmation_request(args.clone()).message;
    let message_digest = ring::digest::digest(&ring::digest::SHA256, message.as_bytes());
    let held = format!(
        r#"{{"call_digest": "{}", "message_digest": "{}"}}"#,
        gating_core::CallDigest::of(&args),
        message_digest
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    let mut short = confirmation_request(args);
    short.ttl = Duration::seconds(1);
    let expired = store
        .create_confirmation(&alice(), short)
        .await
        .unwrap()
        .elicitation
        .id;
    clock.advance(Duration::seconds(2));
    assert_eq!(store.expire_due(clock.now()).await.unwrap().len(), 1);

    let admin = db.admin().await;
    let rows = admin
        .query("SELECT elicitation_id, event, detail::text, tool_name FROM mcp_audit_events WHERE elicitation_id IS NOT NULL ORDER BY id", &[])
        .await
        .unwrap();
    let unbound = admin
        .query("SELECT event, detail::text, tool_name FROM mcp_audit_events WHERE elicitation_id IS NULL ORDER BY id", &[])
        .await
        .unwrap();
    let unbound: Vec<(String, String, String)> = unbound
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        unbound,
        [
            (
                "tool_call_rejected".to_owned(),
                r#"{"rule": 2, "policy": "ab12", "reason": "policy_denied"}"#.to_owned(),
                "fs__format".to_owned()
            ),
            (
                "tool_call_shadowed".to_owned(),
                r#"{"rule": 0, "policy": "ab12"}"#.to_owned(),
                "fs__write".to_owned()
            )
        ]
    );
    // Rows written by one statement have no guaranteed order among themselves: compare sorted.
    let mut events: Vec<(uuid::Uuid, String, String)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    events.sort();
    let expect = |id: ElicitationId, event: &str, detail: &str| {
        (*id.as_uuid(), event.to_owned(), detail.to_owned())
    };
    let requested = r#"{"type": "confirmation"}"#;
    let mut expected = vec![
        expect(answered, "elicitation_requested", requested),
        expect(answered, "tool_call_held", &held),
        expect(answered, "elicitation_responded", r#"{"confirmed": true}"#),
        expect(answered, "tool_call_forwarded", r#"{"gated": true}"#),
        expect(cancelled, "elicitation_requested", requested),
        expect(cancelled, "tool_call_held", &held),
        expect(
            cancelled,
            "elicitation_cancelled",
            r#"{"reason": "cancelled_by_person"}"#,
        ),
        expect(
            cancelled,
            "tool_call_rejected",
            r#"{"reason": "confirmation_cancelled"}"#,
        ),
        expect(failed, "elicitation_requested", requested),
        expect(failed, "tool_call_held", &held),
        expect(failed, "elicitation_validation_failed", "{}"),
        expect(expired, "elicitation_requested", requested),
        expect(expired, "tool_call_held", &held),
        expect(expired, "elicitation_timeout", "{}"),
    ];
    expected.sort();
    assert_eq!(events, expected);
    assert!(
        rows.iter()
            .all(|r| r.get::<_, Option<String>>(3).as_deref() == Some("fs__delete"))
    );
    assert!(!raw_rows(&db).await.contains("secret-audit-path"));
    let state: String = admin
        .query_one(
            "SELECT status::text FROM mcp_elicitations WHERE id = $1",
            &[expired.as_uuid()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, ElicitationStatus::Expired.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmigrated_database_is_refused_with_a_clear_error() {
    let db = TestDb::new().await;
    let admin = db.admin().await;
    let name = format!("{}_empty", db.name);
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let mut config = db.admin.clone();
    config.dbname(&name);
    let mut options = PostgresOptions::new(
        "postgres://x@localhost/x",
        KeyRing::parse(&key_spec(&[("k1", 1)])).unwrap(),
    )
    .unwrap();
    options.config = config;
    let err = PostgresStore::connect(options)
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, StoreError::NotMigrated), "{err:?}");
    assert!(err.to_string().contains("mcp-gateway migrate"));
}

/// A login that bypasses row-level security (here the cluster's superuser) would let every
/// caller's rows be read by every other: refused at connect, unless explicitly allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_that_bypasses_row_level_security_is_refused_unless_allowed() {
    let db = TestDb::new().await;
    let options = |allow: bool| {
        let mut options = PostgresOptions::new(
            "postgres://x@localhost/x",
            KeyRing::parse(&key_spec(&[("k1", 1)])).unwrap(),
        )
        .unwrap();
        options.config = db.admin.clone();
        options.allow_rls_bypass = allow;
        options
    };
    let err = PostgresStore::connect(options(false))
        .await
        .err()
        .expect("a superuser login is refused");
    assert!(matches!(err, StoreError::Config(_)), "{err:?}");
    let said = err.to_string();
    assert!(
        said.contains("is a superuser") && said.contains("mcp_gateway_writer"),
        "{said}"
    );
    PostgresStore::connect(options(true))
        .await
        .expect("allowed explicitly");
    // The writer login the tests use is not refused.
    let mut writer = options(false);
    writer.config = db.writer.clone();
    PostgresStore::connect(writer)
        .await
        .expect("the writer login");
    // Nor is a plain login that owns one of the tables under row-level security (owners
    // bypass it): the elicitations, or only the accounts (found by an attacker's read: the
    // first check looked at the elicitations alone).
    for table in ["mcp_elicitations", "mcp_accounts"] {
        let owner = format!("{}_owner", db.name);
        db.admin()
            .await
            .batch_execute(&format!(
                "CREATE ROLE {owner} LOGIN; ALTER TABLE {table} OWNER TO {owner}"
            ))
            .await
            .unwrap();
        let mut as_owner = options(false);
        as_owner.config.user(&owner);
        let err = PostgresStore::connect(as_owner)
            .await
            .err()
            .unwrap_or_else(|| panic!("the owner of {table} is refused"));
        assert!(
            err.to_string().contains("owns the gateway's tables"),
            "{err}"
        );
        db.admin()
            .await
            .batch_execute(&format!(
                "ALTER TABLE {table} OWNER TO CURRENT_USER; DROP ROLE {owner}"
            ))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_bad_database_url_is_a_config_error() {
    let keys = KeyRing::parse(&key_spec(&[("k1", 1)])).unwrap();
    let err = PostgresOptions::new("postgres://host:notaport/db", keys)
        .err()
        .expect("refused");
    assert!(matches!(err, StoreError::Config(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_are_idempotent() {
    let db = TestDb::new().await;
    let mut owner = db.admin().await;
    assert!(
        crate::migrate(&mut owner).await.unwrap().is_empty(),
        "nothing left to apply"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_confirmed_column_does_not_authorise_a_call() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(&db, &key_spec(&[("k1", 1)]), clock, Setup::default(), 1).await;
    let args = json!({"path": "/x"});
    let id = store
        .create_confirmation(&alice(), confirmation_request(args.clone()))
        .await
        .unwrap()
        .elicitation
        .id;
    store
        .respond(&alice(), id, json!({"confirmed": false}))
        .await
        .unwrap();
    // Someone with the writer login flips the plain column: the database refuses to change
    // a finished row.
    let writer = db.writer().await;
    as_caller(&writer, "alice", "acme").await;
    let flip = "UPDATE mcp_elicitations SET confirmed = true WHERE id = $1";
    assert_eq!(
        sqlstate(writer.execute(flip, &[id.as_uuid()]).await),
        Some(SqlState::INTEGRITY_CONSTRAINT_VIOLATION)
    );
    // Past that guard (the owner switches it off), the sealed answer still decides.
    let admin = db.admin().await;
    admin
        .batch_execute("ALTER TABLE mcp_elicitations DISABLE TRIGGER mcp_elicitations_guard_update")
        .await
        .unwrap();
    assert_eq!(admin.execute(flip, &[id.as_uuid()]).await.unwrap(), 1);
    let binding = delete_binding(&args);
    let attempt = store.consume_confirmation(&alice(), id, &binding).await;
    assert!(
        matches!(attempt, Err(StoreError::Corrupt { .. })),
        "{attempt:?}"
    );
    assert_eq!(
        store
            .confirmation_state(&alice(), id, &binding)
            .await
            .unwrap(),
        Some(false),
        "the sealed answer wins"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_cannot_expire_rows_ahead_of_the_database_clock() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(&db, &key_spec(&[("k1", 1)]), clock, Setup::default(), 1).await;
    let id = store
        .create_confirmation(&alice(), confirmation_request(json!({})))
        .await
        .unwrap()
        .elicitation
        .id;
    let writer = db.writer().await;
    let expired = writer
        .query("SELECT id FROM mcp_expire_due('infinity', 1000)", &[])
        .await
        .unwrap();
    assert!(
        expired.is_empty(),
        "a ten-minute confirmation is not due within a minute of now"
    );
    assert_eq!(
        store.get(&alice(), id).await.unwrap().elicitation.status,
        ElicitationStatus::Pending
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_confirmation_cannot_be_made_usable_again_by_the_writer_role() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(&db, &key_spec(&[("k1", 1)]), clock, Setup::default(), 1).await;
    let args = json!({"path": "/x"});
    let binding = delete_binding(&args);
    let mut ids = Vec::new();
    for answer in [
        json!({"confirmed": true}),
        json!({"confirmed": false, "note": "use the staging bucket"}),
    ] {
        let id = store
            .create_confirmation(&alice(), confirmation_request(args.clone()))
            .await
            .unwrap()
            .elicitation
            .id;
        store.respond(&alice(), id, answer).await.unwrap();
        ids.push(id);
    }
    let (used, declined) = (ids[0], ids[1]);
    // The note is sealed at rest.
    let sealed: Vec<u8> = db
        .admin()
        .await
        .query_one(
            "SELECT note_sealed FROM mcp_elicitations WHERE id = $1",
            &[declined.as_uuid()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!sealed.windows(7).any(|w| w == b"staging"));
    store
        .consume_confirmation(&alice(), used, &binding)
        .await
        .unwrap();

    let writer = db.writer().await;
    as_caller(&writer, "alice", "acme").await;
    // The redemption is a row of its own (V33): the writer may neither remove nor move it.
    for statement in [
        "DELETE FROM mcp_redemptions WHERE elicitation_id = $1",
        "UPDATE mcp_redemptions SET consumed_at = NULL WHERE elicitation_id = $1",
        "UPDATE mcp_redemptions SET consumed_at = consumed_at + interval '1 second' WHERE elicitation_id = $1",
        "UPDATE mcp_redemptions SET elicitation_id = gen_random_uuid() WHERE elicitation_id = $1",
    ] {
        let code = sqlstate(writer.execute(statement, &[used.as_uuid()]).await);
        assert_eq!(code, Some(SqlState::INSUFFICIENT_PRIVILEGE), "{statement}");
    }
    assert_eq!(
        sqlstate(writer.execute("TRUNCATE mcp_redemptions", &[]).await),
        Some(SqlState::INSUFFICIENT_PRIVILEGE)
    );
    // An older instance redeems by setting the wide row's `consumed_at`: on a confirmation
    // redeemed already, that update does nothing.
    assert_eq!(
        writer
            .execute(
                "UPDATE mcp_elicitations SET consumed_at = now() WHERE id = $1 AND status = 'responded' AND confirmed AND consumed_at IS NULL",
                &[used.as_uuid()],
            )
            .await
            .unwrap(),
        0
    );
    let refused = [
        (
            used,
            "UPDATE mcp_elicitations SET status = 'pending', response_sealed = NULL, response_key_id = NULL, confirmed = NULL, responded_at = NULL, consumed_at = NULL WHERE id = $1",
        ),
        (
            used,
            "UPDATE mcp_elicitations SET response_sealed = response_sealed || '\\x00'::bytea WHERE id = $1",
        ),
        (
            used,
            "UPDATE mcp_elicitations SET retries = 1 WHERE id = $1",
        ),
        (
            used,
            "UPDATE mcp_elicitations SET answered_by = 'mallory on the approvals page' WHERE id = $1",
        ),
        (
            declined,
            "UPDATE mcp_elicitations SET confirmed = true WHERE id = $1",
        ),
        (
            declined,
            "UPDATE mcp_elicitations SET note_sealed = NULL, note_key_id = NULL WHERE id = $1",
        ),
        (
            declined,
            "UPDATE mcp_elicitations SET note_sealed = note_sealed || '\\x00'::bytea WHERE id = $1",
        ),
        (
            used,
            "UPDATE mcp_elicitations SET note_sealed = '\\x00'::bytea, note_key_id = 'k1' WHERE id = $1",
        ),
        (
            declined,
            "UPDATE mcp_elicitations SET status = 'pending', response_sealed = NULL, response_key_id = NULL, confirmed = NULL, responded_at = NULL WHERE id = $1",
        ),
        (
            declined,
            "UPDATE mcp_elicitations SET status = 'cancelled', cancel_reason = 'cancelled_by_person', cancelled_at = now(), response_sealed = NULL, response_key_id = NULL, confirmed = NULL WHERE id = $1",
        ),
    ];
    for (id, statement) in refused {
        let code = sqlstate(writer.execute(statement, &[id.as_uuid()]).await);
        assert_eq!(
            code,
            Some(SqlState::INTEGRITY_CONSTRAINT_VIOLATION),
            "{statement}"
        );
    }
    let again = store.consume_confirmation(&alice(), used, &binding).await;
    assert!(
        matches!(
            again,
            Err(StoreError::Transition(
                TransitionError::AlreadyConsumed { .. }
            ))
        ),
        "{again:?}"
    );
}

/// A redemption row (V33) is the writer's only for its own answered, approved, unexpired
/// confirmation, once; it is seen exactly where its confirmation is. An approver that sees
/// another caller's confirmation through its group cannot use it up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_role_redeems_only_its_own_approved_unexpired_confirmation_once() {
    use crate::{Approval, ApprovalMode};
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(&db, &key_spec(&[("k1", 1)]), clock, Setup::default(), 1).await;
    let held = async |caller: &Caller, n: i32, approval: Option<Approval>| {
        store
            .create_confirmation(
                caller,
                confirmation_request(json!({ "n": n })).with_approval(approval),
            )
            .await
            .unwrap()
            .elicitation
            .id
    };
    let pending = held(&alice(), 1, None).await;
    let declined = held(&alice(), 2, None).await;
    let approved = held(&alice(), 3, None).await;
    let of_the_group = held(
        &alice(),
        4,
        Some(Approval {
            group: "sre".into(),
            mode: ApprovalMode::May,
            quorum: crate::Quorum::default(),
        }),
    )
    .await;
    let bobs = held(&bob(), 5, None).await;
    for (caller, id, confirmed) in [
        (alice(), declined, false),
        (alice(), approved, true),
        (alice(), of_the_group, true),
        (bob(), bobs, true),
    ] {
        store
            .respond(&caller, id, json!({ "confirmed": confirmed }))
            .await
            .unwrap();
    }
    let writer = db.writer().await;
    let (in_time, too_late) = (
        start_time() + Duration::minutes(1),
        start_time() + Duration::minutes(11),
    );
    let redeem = async |id: ElicitationId, at: time::OffsetDateTime| {
        sqlstate(
            writer
                .execute(
                    "INSERT INTO mcp_redemptions (elicitation_id, consumed_at) VALUES ($1, $2)",
                    &[id.as_uuid(), &at],
                )
                .await,
        )
    };
    // bob, and bob as an approver of the group that sees alice's row: none of hers.
    as_caller(&writer, "bob", "acme").await;
    writer
        .query(
            "SELECT set_config('mcp.approver_groups', '[\"sre\"]', false)",
            &[],
        )
        .await
        .unwrap();
    let seen: i64 = writer
        .query_one(
            "SELECT count(*) FROM mcp_elicitations WHERE id = $1",
            &[of_the_group.as_uuid()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(seen, 1, "the approver sees the row it could answer");
    for id in [of_the_group, approved] {
        assert_eq!(
            redeem(id, in_time).await,
            Some(SqlState::INSUFFICIENT_PRIVILEGE)
        );
    }
    // alice of another tenant: not hers.
    as_caller(&writer, "alice", "other").await;
    assert_eq!(
        redeem(approved, in_time).await,
        Some(SqlState::INSUFFICIENT_PRIVILEGE)
    );
    // alice: not a pending, declined or another caller's confirmation, not after it expired.
    as_caller(&writer, "alice", "acme").await;
    for id in [pending, declined, bobs] {
        assert_eq!(
            redeem(id, in_time).await,
            Some(SqlState::INSUFFICIENT_PRIVILEGE)
        );
    }
    assert_eq!(
        redeem(approved, too_late).await,
        Some(SqlState::INSUFFICIENT_PRIVILEGE)
    );
    // Her approved one, once; a second conflicts on the key.
    assert_eq!(redeem(approved, in_time).await, None);
    assert_eq!(
        redeem(approved, in_time).await,
        Some(SqlState::UNIQUE_VIOLATION)
    );
    let visible = async |subject: &str| -> i64 {
        as_caller(&writer, subject, "acme").await;
        writer
            .query_one("SELECT count(*) FROM mcp_redemptions", &[])
            .await
            .unwrap()
            .get(0)
    };
    assert_eq!(visible("alice").await, 1);
    assert_eq!(visible("bob").await, 0);
    let again = store
        .consume_confirmation(&alice(), approved, &delete_binding(&json!({"n": 3})))
        .await;
    assert!(
        matches!(
            again,
            Err(StoreError::Transition(
                TransitionError::AlreadyConsumed { .. }
            ))
        ),
        "{again:?}"
    );
    // A caller without a tenant redeems its own (the pair compares NULL with NULL).
    let carol = Caller::new("carol", None).unwrap();
    let hers = held(&carol, 6, None).await;
    store
        .respond(&carol, hers, json!({ "confirmed": true }))
        .await
        .unwrap();
    let used = store
        .consume_confirmation(&carol, hers, &delete_binding(&json!({"n": 6})))
        .await
        .unwrap();
    assert!(used.consumed_at.is_some());
}

/// Arguments a person approved instead of the agent's are sealed, audited with both digests,
/// and once the approval is recorded the writer role can neither swap, drop nor add them
/// (nor put them on a decline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_role_cannot_swap_the_arguments_a_person_approved() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(&db, &key_spec(&[("k1", 1)]), clock, Setup::default(), 1).await;
    let args = json!({"path": "/srv/prod"});
    let edited = json!({"path": "/srv/staging-only"});
    let mut ids = Vec::new();
    for answer in [json!({"confirmed": true}), json!({"confirmed": false})] {
        let id = store
            .create_confirmation(&alice(), confirmation_request(args.clone()))
            .await
            .unwrap()
            .elicitation
            .id;
        if answer["confirmed"] == true {
            store
                .respond_with(
                    &alice(),
                    id,
                    answer,
                    None,
                    crate::AnswerWith::Arguments(edited.clone()),
                )
                .await
                .unwrap();
        } else {
            store.respond(&alice(), id, answer).await.unwrap();
        }
        ids.push(id);
    }
    let (approved, declined) = (ids[0], ids[1]);
    let admin = db.admin().await;
    let row = admin
        .query_one(
            "SELECT edited_sealed, encode(edited_digest, 'hex') FROM mcp_elicitations WHERE id = $1",
            &[approved.as_uuid()],
        )
        .await
        .unwrap();
    let sealed: Vec<u8> = row.get(0);
    assert!(
        !sealed.windows(7).any(|w| w == b"staging"),
        "sealed at rest"
    );
    let digest: String = row.get(1);
    assert_eq!(digest, gating_core::CallDigest::of(&edited).to_string());
    let detail: Value = admin
        .query_one(
            "SELECT detail FROM mcp_audit_events WHERE event = 'elicitation_responded' AND elicitation_id = $1",
            &[approved.as_uuid()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(detail["edited_digest"], digest.as_str(), "{detail}");
    assert_eq!(
        detail["call_digest"],
        gating_core::CallDigest::of(&args).to_string().as_str(),
        "{detail}"
    );

    let writer = db.writer().await;
    as_caller(&writer, "alice", "acme").await;
    for (id, statement) in [
        (
            approved,
            "UPDATE mcp_elicitations SET edited_sealed = NULL, edited_key_id = NULL, edited_digest = NULL WHERE id = $1",
        ),
        (
            approved,
            "UPDATE mcp_elicitations SET edited_sealed = edited_sealed || '\\x00'::bytea WHERE id = $1",
        ),
        (
            declined,
            "UPDATE mcp_elicitations SET edited_sealed = '\\x00'::bytea, edited_key_id = 'k1', edited_digest = decode(repeat('00', 32), 'hex') WHERE id = $1",
        ),
    ] {
        let code = sqlstate(writer.execute(statement, &[id.as_uuid()]).await);
        assert!(
            code == Some(SqlState::INTEGRITY_CONSTRAINT_VIOLATION)
                || code == Some(SqlState::CHECK_VIOLATION),
            "{statement}: {code:?}"
        );
    }
    assert_eq!(
        store
            .get(&alice(), approved)
            .await
            .unwrap()
            .elicitation
            .edited_arguments,
        Some(edited)
    );
}

/// A store that never re-reads on its own: a waiter wakes only if NOTIFY reaches it.
async fn deaf_but_for_notify(db: &TestDb, clock: Arc<ManualClock>) -> PostgresStore {
    let mut options = PostgresOptions::new(
        "postgres://unused@localhost/unused",
        KeyRing::parse(&key_spec(&[("k1", 1)])).unwrap(),
    )
    .unwrap();
    options.config = db.writer.clone();
    options.clock = clock;
    options.pool_size = 2;
    options.recheck_interval = std::time::Duration::from_secs(6 * 3600);
    PostgresStore::connect(options).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_from_another_instance_reaches_the_change_feed() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let here = deaf_but_for_notify(&db, clock.clone()).await;
    let there = deaf_but_for_notify(&db, clock).await;
    let id = there
        .create_confirmation(&alice(), confirmation_request(json!({"p": 1})))
        .await
        .unwrap()
        .elicitation
        .id;
    // Subscribed before the answer is sent, by construction.
    let mut feed = here.subscribe_changes();
    there
        .respond(&alice(), id, json!({"confirmed": true}))
        .await
        .unwrap();
    let heard = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            if feed.recv().await.unwrap() == id {
                return;
            }
        }
    })
    .await;
    assert!(heard.is_ok(), "the other instance's answer was never heard");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_wakes_on_notify_with_the_recheck_set_to_hours() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let here = Arc::new(deaf_but_for_notify(&db, clock.clone()).await);
    let there = deaf_but_for_notify(&db, clock).await;
    let id = there
        .create_confirmation(&alice(), confirmation_request(json!({"p": 2})))
        .await
        .unwrap()
        .elicitation
        .id;
    let before = here.round_trips();
    let waiter = here.clone();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    let waiting = tokio::spawn(async move { waiter.wait_for_change(&alice(), id, deadline).await });
    // The waiter has subscribed and sent its first read before the answer goes out.
    while here.waiting() == 0 || here.round_trips() == before {
        tokio::task::yield_now().await;
    }
    there
        .respond(&alice(), id, json!({"confirmed": true}))
        .await
        .unwrap();
    // Without NOTIFY the waiter would sleep to its deadline and return the row pending.
    let seen = waiting.await.unwrap().unwrap();
    assert_eq!(seen.status, ElicitationStatus::Responded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_role_cannot_insert_an_answered_row_a_clear_message_or_undo_retries() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(&db, &key_spec(&[("k1", 1)]), clock, Setup::default(), 1).await;
    let id = store
        .create(
            &alice(),
            ElicitationSpec::new(
                "Name?",
                ResponseSpec::StringInput {
                    min_length: None,
                    max_length: None,
                },
            )
            .unwrap(),
            Duration::minutes(10),
        )
        .await
        .unwrap()
        .id;
    // An invalid answer: still pending, one retry used.
    let invalid = store
        .respond(&alice(), id, json!({"value": 7}))
        .await
        .unwrap();
    assert!(
        matches!(
            invalid,
            RespondOutcome::Invalid {
                retries_left: 2,
                ..
            }
        ),
        "{invalid:?}"
    );
    let writer = db.writer().await;
    as_caller(&writer, "alice", "acme").await;
    let columns = "INSERT INTO mcp_elicitations (id, caller_subject, caller_tenant, type, spec, created_at, expires_at, ";
    let values = "VALUES (gen_random_uuid(), 'alice', 'acme', 'confirmation', '{\"type\":\"confirmation\"}', now(), now() + interval '1 minute', ";
    let refused = [
        format!(
            "{columns}message_sealed, message_key_id, status, response_sealed, response_key_id, confirmed, responded_at) {values}'\\x00', 'k1', 'responded', '\\x00', 'k1', true, now())"
        ),
        format!("{columns}message) {values}'Approve? (unsealed)')"),
        format!("{columns}message_sealed, message_key_id, retries) {values}'\\x00', 'k1', 2)"),
        "UPDATE mcp_elicitations SET retries = 0 WHERE retries > 0".to_owned(),
    ];
    for statement in refused {
        let code = sqlstate(writer.execute(statement.as_str(), &[]).await);
        assert_eq!(
            code,
            Some(SqlState::INTEGRITY_CONSTRAINT_VIOLATION),
            "{statement}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_caller_sees_a_confirmation_only_through_its_approver_group() {
    use crate::{Approval, ApprovalMode};
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(&db, &key_spec(&[("k1", 1)]), clock, Setup::default(), 1).await;
    let approval = Some(Approval {
        group: "sre".into(),
        mode: ApprovalMode::FourEyes,
        quorum: crate::Quorum::default(),
    });
    let id = store
        .create_confirmation(
            &alice(),
            confirmation_request(json!({"p": 1})).with_approval(approval),
        )
        .await
        .unwrap()
        .elicitation
        .id;
    let plain = store
        .create_confirmation(&alice(), confirmation_request(json!({"p": 2})))
        .await
        .unwrap()
        .elicitation
        .id;

    // Row-level security, as bob: nothing of alice's without a group, her approver rows
    // (only those) with the group; never a change to the approval itself.
    let writer = db.writer().await;
    as_caller(&writer, "bob", "acme").await;
    let count = |groups: &'static str| {
        let writer = &writer;
        async move {
            writer
                .query(
                    "SELECT set_config('mcp.approver_groups', $1, false)",
                    &[&groups],
                )
                .await
                .unwrap();
            let rows = writer
                .query("SELECT id FROM mcp_elicitations", &[])
                .await
                .unwrap();
            rows.iter()
                .map(|r| r.get::<_, uuid::Uuid>(0))
                .collect::<Vec<_>>()
        }
    };
    assert!(count("").await.is_empty());
    assert!(count("[\"ops\"]").await.is_empty());
    assert_eq!(count("[\"ops\", \"sre\"]").await, vec![*id.as_uuid()]);
    assert!(!count("[\"sre\"]").await.contains(plain.as_uuid()));
    assert_eq!(
        sqlstate(
            writer
                .execute("UPDATE mcp_elicitations SET approver_group = 'ops'", &[])
                .await
        ),
        Some(SqlState::INSUFFICIENT_PRIVILEGE)
    );
    // A forged groups setting that is not a JSON array fails the statement, never widens
    // it (V32 rewrote the function that reads it: the same rules).
    for forged in ["sre", "\"sre\"", "{\"sre\": true}", "null"] {
        writer
            .query(
                "SELECT set_config('mcp.approver_groups', $1, false)",
                &[&forged],
            )
            .await
            .unwrap();
        assert!(
            writer
                .query("SELECT id FROM mcp_elicitations", &[])
                .await
                .is_err(),
            "{forged}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_erases_payloads_keeps_the_audit_trail_and_only_through_its_function() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(
        &db,
        &key_spec(&[("k1", 1)]),
        clock.clone(),
        Setup::default(),
        1,
    )
    .await;
    let mut request = confirmation_request(json!({"path": "/srv/secret-plans.txt"}));
    request.ttl = Duration::seconds(5);
    let id = store
        .create_confirmation(&alice(), request)
        .await
        .unwrap()
        .elicitation
        .id;
    store
        .respond(&alice(), id, json!({"confirmed": false}))
        .await
        .unwrap();
    // And a used confirmation: its redemption (V33) goes with it.
    let mut request = confirmation_request(json!({"path": "/srv/used.txt"}));
    request.ttl = Duration::seconds(5);
    let used = store
        .create_confirmation(&alice(), request)
        .await
        .unwrap()
        .elicitation
        .id;
    store
        .respond(&alice(), used, json!({"confirmed": true}))
        .await
        .unwrap();
    let binding = delete_binding(&json!({"path": "/srv/used.txt"}));
    store
        .consume_confirmation(&alice(), used, &binding)
        .await
        .unwrap();
    clock.advance(Duration::seconds(6));
    let audit_before: i64 = db
        .admin()
        .await
        .query_one(
            "SELECT count(*) FROM mcp_audit_events WHERE elicitation_id = $1",
            &[id.as_uuid()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(audit_before >= 2, "requested and responded");

    // A future cutoff is capped at the database's clock: nothing recent goes early.
    let far = crate::Clock::now(&*clock) + Duration::days(365);
    let writer = db.writer().await;
    let early: i64 = writer
        .query_one(
            "SELECT count(*) FROM mcp_erase_finished(now() - interval '1 hour', 100)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(early, 0);
    // The writer still cannot delete by itself.
    as_caller(&writer, "alice", "acme").await;
    assert_eq!(
        sqlstate(writer.execute("DELETE FROM mcp_elicitations", &[]).await),
        Some(SqlState::INSUFFICIENT_PRIVILEGE)
    );

    let mut erased: Vec<_> = store
        .erase_finished(far)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    erased.sort_by_key(|e| *e.as_uuid());
    let mut both = vec![id, used];
    both.sort_by_key(|e| *e.as_uuid());
    assert_eq!(erased, both);
    let admin = db.admin().await;
    let redemptions: i64 = admin
        .query_one("SELECT count(*) FROM mcp_redemptions", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(redemptions, 0, "a redemption is erased with its row");
    let left: i64 = admin
        .query_one(
            "SELECT count(*) FROM mcp_elicitations WHERE id = $1",
            &[id.as_uuid()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "the record and its sealed payloads are gone");
    let audit_after: i64 = admin
        .query_one(
            "SELECT count(*) FROM mcp_audit_events WHERE elicitation_id = $1",
            &[id.as_uuid()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(audit_after, audit_before, "the audit trail stays");
}

fn fault_binding() -> CallBinding {
    delete_binding(&json!({"path": "a"}))
}

/// A store on the fault cluster with a short operation timeout.
async fn fault_store(db: &TestDb, clock: Arc<ManualClock>) -> PostgresStore {
    let mut options = PostgresOptions::new(
        "postgres://unused@localhost/unused",
        KeyRing::parse(&key_spec(&[("k1", 1)])).unwrap(),
    )
    .unwrap();
    options.config = db.writer.clone();
    options.clock = clock;
    options.pool_size = 4;
    options.operation_timeout = std::time::Duration::from_secs(1);
    options.recheck_interval = std::time::Duration::from_secs(6 * 3600);
    PostgresStore::connect(options).await.unwrap()
}

/// Every kind of operation the gateway's paths use (the gate, REST, the page, readiness,
/// the sweep), each of which must come back — with an error while the database is away.
async fn every_operation(
    store: &PostgresStore,
    held: ElicitationId,
) -> Vec<(&'static str, Result<(), StoreError>)> {
    vec![
        ("ping", store.ping().await),
        ("get", store.get(&alice(), held).await.map(drop)),
        (
            "list",
            store
                .list(&alice(), ListQuery::pending(100))
                .await
                .map(drop),
        ),
        (
            "create_confirmation",
            store
                .create_confirmation(&alice(), confirmation_request(json!({"during": "fault"})))
                .await
                .map(drop),
        ),
        (
            "redeem_confirmation",
            store
                .redeem_confirmation(&alice(), held, &fault_binding())
                .await
                .map(drop),
        ),
        ("pending_count", store.pending_count().await.map(drop)),
        ("expire_due", store.expire_due(start_time()).await.map(drop)),
        ("ended_sessions", store.ended_sessions().await.map(drop)),
    ]
}

/// Waits (up to a minute) until the store answers again.
async fn until_it_answers(store: &PostgresStore) {
    for _ in 0..120 {
        if store.ping().await.is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    panic!("the store did not recover within a minute of the database coming back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_or_stopped_database_fails_every_operation_as_unavailable_and_the_store_recovers()
{
    let cluster = crate::test_support::FaultCluster::take().await;
    let db = cluster.database().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = fault_store(&db, clock.clone()).await;
    let held = store
        .create_confirmation(&alice(), confirmation_request(json!({"path": "a"})))
        .await
        .unwrap()
        .elicitation
        .id;

    for fault in ["frozen", "stopped"] {
        match fault {
            "frozen" => cluster.freeze(),
            _ => cluster.stop(),
        }
        // Not a timing assertion: the outer bound only turns a hang into a failure.
        let outcomes = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            every_operation(&store, held),
        )
        .await
        .unwrap_or_else(|_| panic!("an operation hung with the database {fault}"));
        for (name, outcome) in outcomes {
            assert!(
                matches!(outcome, Err(StoreError::Unavailable(_))),
                "{name} with the database {fault}: {outcome:?}"
            );
        }
        match fault {
            "frozen" => cluster.thaw(),
            _ => cluster.start(),
        }
        until_it_answers(&store).await;
        // Nothing pending was lost.
        let listed = store.list(&alice(), ListQuery::pending(100)).await.unwrap();
        assert!(
            listed
                .iter()
                .any(|l| l.as_ref().is_ok_and(|s| s.elicitation.id == held)),
            "{fault}: the confirmation held before the fault is gone"
        );
        // The change feed (LISTEN) hears answers again once it has reconnected (a notice
        // sent before that is missed; waiters re-read every `recheck_interval` for it).
        let twin = fault_store(&db, clock.clone()).await;
        let mut feed = store.subscribe_changes();
        let mut heard = false;
        for attempt in 0..30 {
            let probe = store
                .create_confirmation(&alice(), confirmation_request(json!({"probe": attempt})))
                .await
                .unwrap()
                .elicitation
                .id;
            twin.respond(&alice(), probe, json!({"confirmed": false}))
                .await
                .unwrap();
            heard = tokio::time::timeout(std::time::Duration::from_secs(2), async {
                loop {
                    match feed.recv().await {
                        Ok(id) if id == probe => return,
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            })
            .await
            .is_ok();
            if heard {
                break;
            }
        }
        assert!(
            heard,
            "after the database was {fault}, LISTEN never heard an answer again"
        );
    }
    // The confirmation held before both faults is still pending and works once.
    store
        .respond(&alice(), held, json!({"confirmed": true}))
        .await
        .unwrap();
    let binding = fault_binding();
    assert!(matches!(
        store.redeem_confirmation(&alice(), held, &binding).await,
        Ok(Redeemed::Consumed(_))
    ));
    assert!(matches!(
        store.redeem_confirmation(&alice(), held, &binding).await,
        Ok(Redeemed::Refused { .. })
    ));
}

/// The writer login, scoped as the grant's own caller, tries what an attacker with it would:
/// extend a grant, give it more uses, un-use it, re-own it, un-revoke it, use a revoked one,
/// forge one for another caller or on no confirmation. Each is refused by the database; the
/// argument digest and the `when` are sealed at rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_role_cannot_extend_unuse_reown_or_forge_a_grant() {
    use crate::{GrantRequest, GrantScope, GrantStore};
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(&db, &key_spec(&[("k1", 1)]), clock, Setup::default(), 1).await;
    let make = async |scope: GrantScope, when: Option<&str>| {
        let id = store
            .create_confirmation(
                &alice(),
                confirmation_request(json!({"path": "/srv/secret-path"})),
            )
            .await
            .unwrap()
            .elicitation
            .id;
        let request = GrantRequest {
            scope,
            when: when.map(str::to_owned),
            lasts: Duration::hours(1),
            max_uses: Some(2),
            definition: "def".into(),
        };
        store
            .respond_with(
                &alice(),
                id,
                json!({"confirmed": true}),
                None,
                request.into(),
            )
            .await
            .unwrap()
            .1
            .unwrap()
    };
    let call = make(GrantScope::Call, None).await;
    let tool = make(
        GrantScope::Tool,
        Some("args.path.startsWith('/srv/secret')"),
    )
    .await;
    store
        .use_grant(&alice(), call.id, &call.tool)
        .await
        .unwrap()
        .unwrap();
    let revoked = make(GrantScope::Tool, None).await;
    store
        .revoke_grant(&alice(), revoked.id, None)
        .await
        .unwrap();

    let admin = db.admin().await;
    for row in admin
        .query("SELECT coalesce(digest_sealed, ''::bytea) || coalesce(when_sealed, ''::bytea) FROM mcp_grants", &[])
        .await
        .unwrap()
    {
        let sealed: Vec<u8> = row.get(0);
        assert!(!sealed.windows(6).any(|w| w == b"secret"), "the when is sealed");
        assert!(!sealed.windows(32).any(|w| w == call.digest.unwrap().as_bytes()), "the digest is sealed");
    }

    let writer = db.writer().await;
    as_caller(&writer, "alice", "acme").await;
    let no_privilege = [
        "UPDATE mcp_grants SET expires_at = expires_at + interval '1 year'",
        "UPDATE mcp_grants SET max_uses = 1000000",
        "UPDATE mcp_grants SET max_uses = NULL",
        "UPDATE mcp_grants SET caller_subject = 'mallory'",
        "UPDATE mcp_grants SET granter_subject = 'mallory'",
        "UPDATE mcp_grants SET tool_name = 'fs__delete'",
        "UPDATE mcp_grants SET scope = 'tool', digest_sealed = NULL, digest_key_id = NULL",
        "UPDATE mcp_grants SET when_sealed = NULL, when_key_id = NULL",
        "UPDATE mcp_grants SET definition_digest = 'other'",
        "DELETE FROM mcp_grants",
        "TRUNCATE mcp_grants",
        "ALTER TABLE mcp_grants DISABLE ROW LEVEL SECURITY",
    ];
    for statement in no_privilege {
        let code = sqlstate(writer.execute(statement, &[]).await);
        assert_eq!(code, Some(SqlState::INSUFFICIENT_PRIVILEGE), "{statement}");
    }
    let refused = [
        (call.id, "UPDATE mcp_grants SET uses = 0 WHERE id = $1"),
        (
            call.id,
            "UPDATE mcp_grants SET uses = uses - 1 WHERE id = $1",
        ),
        (
            tool.id,
            "UPDATE mcp_grants SET uses = uses + 2 WHERE id = $1",
        ),
        (
            revoked.id,
            "UPDATE mcp_grants SET revoked_at = NULL, revoked_by = NULL WHERE id = $1",
        ),
        (
            revoked.id,
            "UPDATE mcp_grants SET revoked_at = revoked_at + interval '1 year' WHERE id = $1",
        ),
        (
            revoked.id,
            "UPDATE mcp_grants SET uses = uses + 1 WHERE id = $1",
        ),
    ];
    for (id, statement) in refused {
        let code = sqlstate(writer.execute(statement, &[id.as_uuid()]).await);
        assert_eq!(
            code,
            Some(SqlState::INTEGRITY_CONSTRAINT_VIOLATION),
            "{statement}"
        );
    }
    // Past its maximum: the CHECK.
    writer
        .execute(
            "UPDATE mcp_grants SET uses = uses + 1 WHERE id = $1",
            &[call.id.as_uuid()],
        )
        .await
        .unwrap();
    let code = sqlstate(
        writer
            .execute(
                "UPDATE mcp_grants SET uses = uses + 1 WHERE id = $1",
                &[call.id.as_uuid()],
            )
            .await,
    );
    assert_eq!(code, Some(SqlState::CHECK_VIOLATION));

    // Forged grants: for another caller (row-level security), on no confirmation, or on a
    // confirmation of another tool (the insert trigger).
    let forge = |caller: &str, elicitation: &str, tool: &str| {
        format!(
            "INSERT INTO mcp_grants (id, elicitation_id, caller_subject, caller_tenant, tool_name, scope, definition_digest, granter_subject, granter_tenant, created_at, expires_at) \
             VALUES (gen_random_uuid(), {elicitation}, '{caller}', 'acme', '{tool}', 'tool', 'def', '{caller}', 'acme', now(), now() + interval '1 year')"
        )
    };
    let fresh = store
        .create_confirmation(&alice(), confirmation_request(json!({"path": "/other"})))
        .await
        .unwrap()
        .elicitation
        .id;
    let fresh = format!("'{fresh}'::uuid");
    let attempts = [
        forge("bob", &fresh, "fs__delete"),
        forge("alice", "gen_random_uuid()", "fs__delete"),
        forge("alice", &fresh, "fs__read_file"),
    ];
    for statement in attempts {
        let code = sqlstate(writer.execute(statement.as_str(), &[]).await);
        assert!(
            code == Some(SqlState::INTEGRITY_CONSTRAINT_VIOLATION)
                || code == Some(SqlState::INSUFFICIENT_PRIVILEGE),
            "{statement}: {code:?}"
        );
    }
    // Row-level security on its own: a grant of Bob's, written as Alice.
    let as_bob = forge("bob", &fresh, "fs__delete").replace(
        "'bob', 'acme', 'fs__delete'",
        "'alice', 'acme', 'fs__delete'",
    );
    as_caller(&writer, "bob", "acme").await;
    let code = sqlstate(writer.execute(as_bob.as_str(), &[]).await);
    assert!(
        code.is_some(),
        "a grant of Alice's written in Bob's scope is refused"
    );
    // Another caller sees none of them.
    as_caller(&writer, "bob", "acme").await;
    let seen: i64 = writer
        .query_one("SELECT count(*) FROM mcp_grants", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(seen, 0);
    assert!(
        store
            .use_grant(&alice(), revoked.id, &revoked.tool)
            .await
            .unwrap()
            .is_none()
    );
}

/// Pins are append-only for the writer role: it can neither rewrite nor remove one, nor
/// decide a change again; a change's audit rows name both digests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_role_cannot_rewrite_a_pin_or_a_decision() {
    use crate::{CatalogStore as _, DefinitionKey, DefinitionKind, FirstSight, Observed};
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(&db, &key_spec(&[("k1", 1)]), clock, Setup::default(), 1).await;
    let key = DefinitionKey {
        module: "fs".into(),
        kind: DefinitionKind::Tool,
        name: "write_file".into(),
    };
    store
        .observe(&key, &json!({"d": 1}), FirstSight::Trust, &[])
        .await
        .unwrap();
    let Observed::Held(change) = store
        .observe(&key, &json!({"d": 2}), FirstSight::Trust, &[])
        .await
        .unwrap()
    else {
        panic!("held")
    };
    store
        .decide_change(change.id, false, Some("ops"))
        .await
        .unwrap();
    let detail: Value = db
        .admin()
        .await
        .query_one(
            "SELECT detail FROM mcp_audit_events WHERE event = 'tool_definition_changed'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        detail["pinned_digest"],
        crate::definition_digest(&json!({"d": 1}))
            .to_string()
            .as_str(),
        "{detail}"
    );
    assert_eq!(
        detail["proposed_digest"],
        crate::definition_digest(&json!({"d": 2}))
            .to_string()
            .as_str(),
        "{detail}"
    );
    let writer = db.writer().await;
    for statement in [
        "UPDATE mcp_pins SET definition = '{\"d\": 2}'",
        "DELETE FROM mcp_pins",
    ] {
        let code = sqlstate(writer.execute(statement, &[]).await);
        assert_eq!(code, Some(SqlState::INSUFFICIENT_PRIVILEGE), "{statement}");
    }
    let code = sqlstate(
        writer
            .execute(
                "UPDATE mcp_definition_changes SET status = 'approved' WHERE id = $1",
                &[&change.id],
            )
            .await,
    );
    assert_eq!(code, Some(SqlState::INTEGRITY_CONSTRAINT_VIOLATION));
    let code = sqlstate(
        writer
            .execute(
                "UPDATE mcp_definition_changes SET proposed = '{}' WHERE id = $1",
                &[&change.id],
            )
            .await,
    );
    assert_eq!(code, Some(SqlState::INSUFFICIENT_PRIVILEGE));
    assert_eq!(
        store.pin(&key).await.unwrap().unwrap().definition,
        json!({"d": 1})
    );
}

/// The outbox (V16) as an attacker with the writer's login sees it: it can claim and settle
/// notices, never make one up, point one at another elicitation or caller, or delete one
/// (which would silence a person's notification).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_role_cannot_forge_redirect_or_drop_a_notice() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let setup = Setup {
        notify_events: &crate::NoticeEvent::ALL,
        ..Setup::default()
    };
    let store = store_on(&db, &key_spec(&[("k1", 1)]), clock, setup, 1).await;
    let id = store
        .create_confirmation(&alice(), confirmation_request(json!({"p": 1})))
        .await
        .unwrap()
        .elicitation
        .id;
    let writer = db.writer().await;
    let forge = format!(
        "INSERT INTO mcp_notices (elicitation_id, caller_subject, event) VALUES ('{}', 'mallory', 'waiting')",
        id.as_uuid()
    );
    for statement in [
        forge.as_str(),
        "UPDATE mcp_notices SET caller_subject = 'mallory'",
        "UPDATE mcp_notices SET elicitation_id = gen_random_uuid()",
        "UPDATE mcp_notices SET event = 'expired'",
        "UPDATE mcp_notices SET delivery = gen_random_uuid()",
        "DELETE FROM mcp_notices",
    ] {
        assert_eq!(
            sqlstate(writer.execute(statement, &[]).await),
            Some(SqlState::INSUFFICIENT_PRIVILEGE),
            "{statement}"
        );
    }
    let left: i64 = writer
        .query_one(
            "SELECT count(*) FROM mcp_notices WHERE caller_subject = 'alice'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 1, "the notice is there, unchanged");
}

/// A gateway's run that leaves audit rows: holds, answers, a refusal. Sealed, the chain
/// verifies.
async fn sealed_trail() -> (TestDb, KeyRing, Vec<i64>) {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let keys = key_spec(&[("k1", 1), ("k0", 9)]);
    let store = store_on(&db, &keys, clock.clone(), Setup::default(), 2).await;
    for n in 0..3 {
        let id = store
            .create_confirmation(&alice(), confirmation_request(json!({"n": n})))
            .await
            .unwrap()
            .elicitation
            .id;
        store
            .respond(&alice(), id, json!({"confirmed": n != 1}))
            .await
            .unwrap();
    }
    // Settled: older than any statement could still be.
    clock.advance(time::Duration::seconds(20));
    let sealed = store.seal_audit().await.unwrap();
    let ids: Vec<i64> = db
        .admin()
        .await
        .query("SELECT id FROM mcp_audit_events ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(ids.len() >= 6, "{ids:?}");
    assert_eq!(sealed.sealed, ids.len(), "every settled row sealed");
    assert_eq!(sealed.head.as_ref().map(|h| h.0), ids.last().copied());
    // Sealed once: another pass (another instance) seals nothing again.
    let twin = store_on(&db, &keys, clock.clone(), Setup::default(), 1).await;
    assert_eq!(twin.seal_audit().await.unwrap().sealed, 0);
    let report = verify_audit(&db.admin().await, &KeyRing::parse(&keys).unwrap())
        .await
        .unwrap();
    assert_eq!(report.broken, None, "{report:?}");
    assert_eq!(report.verified, ids.len() as u64);
    (db, KeyRing::parse(&keys).unwrap(), ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_chain_names_the_row_a_superuser_changed() {
    let (db, keys, ids) = sealed_trail().await;
    let admin = db.admin().await;
    admin
        .execute(
            "UPDATE mcp_audit_events SET detail = '{\"answered_by\": \"mallory\"}' WHERE id = $1",
            &[&ids[3]],
        )
        .await
        .unwrap();
    let report = verify_audit(&admin, &keys).await.unwrap();
    let (row, why) = report.broken.expect("caught");
    assert_eq!(row, ids[3], "{why}");
    assert!(why.contains("changed"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_chain_names_where_a_superuser_removed_a_row() {
    let (db, keys, ids) = sealed_trail().await;
    let admin = db.admin().await;
    admin
        .execute("DELETE FROM mcp_audit_events WHERE id = $1", &[&ids[2]])
        .await
        .unwrap();
    let report = verify_audit(&admin, &keys).await.unwrap();
    let (row, why) = report.broken.expect("caught");
    assert_eq!(row, ids[2], "{why}");
    assert!(why.contains("removed"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_chain_names_a_row_a_superuser_inserted_or_reordered() {
    let (db, keys, ids) = sealed_trail().await;
    let admin = db.admin().await;
    // Inserted before sealed rows, without a link.
    admin
        .execute(
            "INSERT INTO mcp_audit_events (id, at, event, caller_subject, detail) OVERRIDING SYSTEM VALUE VALUES (-1, now(), 'tool_call_forwarded', 'alice', '{}')",
            &[],
        )
        .await
        .unwrap();
    let report = verify_audit(&admin, &keys).await.unwrap();
    let (row, why) = report.broken.expect("caught");
    assert_eq!(row, -1, "{why}");
    assert!(why.contains("inserted"), "{why}");
    admin
        .execute("DELETE FROM mcp_audit_events WHERE id = -1", &[])
        .await
        .unwrap();
    assert_eq!(verify_audit(&admin, &keys).await.unwrap().broken, None);
    // Two rows' contents swapped, their links left as they were.
    admin
        .execute(
            "UPDATE mcp_audit_events a SET event = b.event, detail = b.detail, elicitation_id = b.elicitation_id FROM mcp_audit_events b WHERE (a.id, b.id) IN (($1, $2), ($2, $1))",
            &[&ids[1], &ids[2]],
        )
        .await
        .unwrap();
    let report = verify_audit(&admin, &keys).await.unwrap();
    assert_eq!(report.broken.map(|b| b.0), Some(ids[1]), "reordered");
}

/// V23: the writer records that a decline was told only on a declined confirmation, once:
/// it cannot mark an approval (which would hide it from an identical call) or un-tell a
/// decline (which would tell it again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_role_tells_a_decline_once_and_only_a_decline() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(&db, &key_spec(&[("k1", 1)]), clock, Setup::default(), 1).await;
    let declined = store
        .create_confirmation(&alice(), confirmation_request(json!({"n": 1})))
        .await
        .unwrap()
        .elicitation
        .id;
    let approved = store
        .create_confirmation(&alice(), confirmation_request(json!({"n": 2})))
        .await
        .unwrap()
        .elicitation
        .id;
    store
        .respond(&alice(), declined, json!({"confirmed": false}))
        .await
        .unwrap();
    store
        .respond(&alice(), approved, json!({"confirmed": true}))
        .await
        .unwrap();
    let writer = db.writer().await;
    as_caller(&writer, "alice", "acme").await;
    let set = "UPDATE mcp_elicitations SET reported_at = now() WHERE id = $1";
    assert!(
        writer.execute(set, &[approved.as_uuid()]).await.is_err(),
        "an approval is no decline"
    );
    assert_eq!(writer.execute(set, &[declined.as_uuid()]).await.unwrap(), 1);
    for again in [
        "UPDATE mcp_elicitations SET reported_at = NULL WHERE id = $1",
        "UPDATE mcp_elicitations SET reported_at = now() + interval '1 s' WHERE id = $1",
    ] {
        assert!(
            writer.execute(again, &[declined.as_uuid()]).await.is_err(),
            "{again}"
        );
    }
}

/// Issue 44, item 3: the writer login names only the columns the gateway writes. It cannot
/// date a row (a row dated 2999 stopped the sealer for good), seal one, or number one; and no
/// role records a row in the future.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_role_cannot_date_seal_or_number_an_audit_row() {
    let (db, _keys, ids) = sealed_trail().await;
    let writer = db.writer().await;
    as_caller(&writer, "alice", "acme").await;
    for forged in [
        "INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, detail, recorded_at) VALUES (now(), 'tool_call_held', 'alice', 'acme', '{}', '2999-01-01')",
        "INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, detail, mac, mac_key) VALUES (now(), 'tool_call_held', 'alice', 'acme', '{}', decode(repeat('00', 32), 'hex'), 'k1')",
        "INSERT INTO mcp_audit_events (id, at, event, caller_subject, caller_tenant, detail) OVERRIDING SYSTEM VALUE VALUES (9000000000, now(), 'tool_call_held', 'alice', 'acme', '{}')",
    ] {
        assert_eq!(
            sqlstate(writer.execute(forged, &[]).await),
            Some(SqlState::INSUFFICIENT_PRIVILEGE),
            "{forged}"
        );
    }
    // What the gateway writes still goes in, recorded now.
    let row = writer
        .query_one(
            "INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, detail) VALUES (now(), 'tool_call_held', 'alice', 'acme', '{}') RETURNING id",
            &[],
        )
        .await
        .unwrap();
    let id: i64 = row.get(0);
    assert!(id > *ids.last().unwrap());
    // Not even the owner records a row in the future.
    let admin = db.admin().await;
    let future: bool = admin
        .query_one(
            "INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, detail, recorded_at) VALUES (now(), 'tool_call_held', 'alice', 'acme', '{}', '2999-01-01') RETURNING recorded_at > clock_timestamp()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!future, "the trigger dates it now");
}

/// Every event the store names is one the audit table takes, and nothing else is: from the
/// writer, and from the owner with a yes-to-anything `=` on text first on its search_path
/// (the CHECK names its operator when it is made, not when it runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_table_takes_every_event_the_store_names_and_no_other() {
    let db = TestDb::new().await;
    let writer = db.writer().await;
    as_caller(&writer, "alice", "acme").await;
    let insert = "INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, detail) VALUES (now(), $1, 'alice', 'acme', '{}')";
    for event in crate::AuditEvent::ALL {
        writer
            .execute(insert, &[&event.label()])
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", event.label()));
    }
    let admin = db.admin().await;
    admin
        .batch_execute(
            "CREATE SCHEMA elsewhere; \
             CREATE FUNCTION elsewhere.yes(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true'; \
             CREATE OPERATOR elsewhere.= (LEFTARG = text, RIGHTARG = text, FUNCTION = elsewhere.yes); \
             SET search_path = elsewhere, public, pg_catalog",
        )
        .await
        .unwrap();
    for client in [&writer, &admin] {
        for unknown in [
            "no_such_event",
            "",
            "TOOL_CALL_FORWARDED",
            "tool_call_forwarded ",
        ] {
            assert_eq!(
                sqlstate(client.execute(insert, &[&unknown]).await),
                Some(SqlState::CHECK_VIOLATION),
                "{unknown:?}"
            );
        }
    }
}

/// A row dated in the future (written before V22, or re-dated by the owner) stops the sealer
/// at it: the sweep says so and counts it, and `audit verify` reports the tail as not
/// verified instead of "whole". A tail that only waits too long is reported too; a fresh one
/// is settling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_dated_in_the_future_stalls_the_chain_loudly_and_is_not_verified() {
    let (db, keys, _ids) = sealed_trail().await;
    let admin = db.admin().await;
    let writer = db.writer().await;
    as_caller(&writer, "alice", "acme").await;
    let insert = "INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, detail) VALUES (now(), 'tool_call_held', 'alice', 'acme', '{}') RETURNING id";
    let fresh: i64 = writer.query_one(insert, &[]).await.unwrap().get(0);
    let report = verify_audit(&admin, &keys).await.unwrap();
    assert_eq!((report.unsealed_tail, report.broken.clone()), (1, None));
    assert_eq!(
        report.stalled(max_unsealed_wait(std::time::Duration::from_secs(30))),
        None,
        "a fresh tail is settling"
    );
    admin
        .execute(
            "UPDATE mcp_audit_events SET recorded_at = '2999-01-01' WHERE id = $1",
            &[&fresh],
        )
        .await
        .unwrap();
    for _ in 0..3 {
        writer.query_one(insert, &[]).await.unwrap();
    }
    let clock = Arc::new(ManualClock::new(start_time()));
    clock.advance(time::Duration::seconds(20));
    // The keys sealed_trail used.
    let spec = key_spec(&[("k1", 1), ("k0", 9)]);
    let store = store_on(&db, &spec, clock, Setup::default(), 1).await;
    let before = crate::audit_seal_stalls();
    let sealed = store.seal_audit().await.unwrap();
    assert_eq!(sealed.sealed, 0, "{sealed:?}");
    assert_eq!(sealed.stalled.map(|s| s.0), Some(fresh));
    assert!(crate::audit_seal_stalls() > before, "counted for /metrics");
    let report = verify_audit(&admin, &keys).await.unwrap();
    assert_eq!((report.unsealed_tail, report.broken.clone()), (4, None));
    let why = report
        .stalled(std::time::Duration::from_secs(3600))
        .expect("not verified");
    assert!(
        why.contains(&format!("row {fresh}")) && why.contains("future"),
        "{why}"
    );

    // Re-dated to an hour ago: no longer in the future, but older than a few sweeps.
    admin
        .execute(
            "UPDATE mcp_audit_events SET recorded_at = clock_timestamp() - interval '1 hour' WHERE id = $1",
            &[&fresh],
        )
        .await
        .unwrap();
    let report = verify_audit(&admin, &keys).await.unwrap();
    let why = report
        .stalled(max_unsealed_wait(std::time::Duration::from_secs(30)))
        .expect("waited too long");
    assert!(why.contains("has waited"), "{why}");
}

/// The writer login cannot rewrite a sealed row, and a link it forges on the next row is a
/// break the walk reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_role_cannot_reseal_the_audit_chain() {
    let (db, keys, ids) = sealed_trail().await;
    let writer = db.writer().await;
    assert_eq!(
        sqlstate(
            writer
                .execute("UPDATE mcp_audit_events SET mac = NULL", &[])
                .await
        ),
        Some(SqlState::INSUFFICIENT_PRIVILEGE)
    );
    let sealed_again: bool = writer
        .query_one(
            "SELECT mcp_audit_seal($1, $2, $3, 'k1')",
            &[&ids[4], &ids[3], &vec![0u8; 32]],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!sealed_again, "a sealed row is sealed once");
    // A new row, sealed by the writer with a MAC it made up.
    as_caller(&writer, "alice", "acme").await;
    let next: i64 = writer
        .query_one(
            "INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, detail) VALUES (now(), 'tool_call_held', 'alice', 'acme', '{}') RETURNING id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let forged: bool = writer
        .query_one(
            "SELECT mcp_audit_seal($1, $2, $3, 'k1')",
            &[&next, ids.last().unwrap(), &vec![7u8; 32]],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        forged,
        "the writer may seal the next row, but not with a true link"
    );
    let report = verify_audit(&db.admin().await, &keys).await.unwrap();
    assert_eq!(report.broken.map(|b| b.0), Some(next));
}

/// Completions recorded at once by many calls of several callers are written in groups
/// (fewer transactions than completions), every one of them, each in its own caller's
/// row-level security scope; the writer role's limits intact (the group statement under one
/// caller's scope cannot write another caller's row).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_recorded_at_once_are_written_in_groups_each_callers_own() {
    use crate::{AuditSink as _, CallCompletion, GateRecord};
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = Arc::new(store_on(&db, &key_spec(&[("k1", 1)]), clock, Setup::default(), 4).await);
    let mallory = Caller::new("alice", Some("evil".into())).unwrap();
    let callers = [alice(), bob(), mallory.clone()];
    let before = store.round_trips();
    let mut tasks = Vec::new();
    for n in 0..300usize {
        let (store, caller) = (store.clone(), callers[n % 3].clone());
        tasks.push(tokio::spawn(async move {
            store
                .record_gate(
                    &caller,
                    None,
                    &format!("fs__delete_{n}"),
                    GateRecord::Completed(CallCompletion::Ok, None),
                    &PolicyRef::default(),
                )
                .await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let trips = store.round_trips() - before;
    assert!(
        trips < 300,
        "grouped: {trips} round trips for 300 completions"
    );
    let admin = db.admin().await;
    let rows = admin
        .query(
            "SELECT caller_subject, caller_tenant, tool_name, detail->>'outcome' FROM mcp_audit_events WHERE event = 'tool_call_completed' ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 300, "none lost");
    for row in &rows {
        let (subject, tenant, tool, outcome): (String, Option<String>, String, String) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        let n: usize = tool.trim_start_matches("fs__delete_").parse().unwrap();
        let caller = &callers[n % 3];
        assert_eq!(
            (subject.as_str(), tenant.as_deref()),
            (caller.subject_id(), caller.tenant_id()),
            "row {n} is its own caller's"
        );
        assert_eq!(outcome, "ok");
    }
    // The group statement under one caller's scope cannot write another caller's row.
    let writer = db.writer().await;
    as_caller(&writer, "alice", "acme").await;
    let now = time::OffsetDateTime::now_utc();
    let refused = writer
        .execute(
            sql::RECORD_COMPLETIONS,
            &[
                &vec![now],
                &"bob",
                &Some("acme"),
                &vec![None::<uuid::Uuid>],
                &vec!["fs__delete"],
                &vec!["{}"],
            ],
        )
        .await;
    assert_eq!(sqlstate(refused), Some(SqlState::INSUFFICIENT_PRIVILEGE));
}

/// A backlog of more rows than one statement seals (a busy gateway writes thousands per
/// sweep interval) is sealed by one sweep, and the chain verifies: V17's one row per
/// statement, 500 per sweep, fell behind for good above a few gated calls a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_audit_rows_is_sealed_in_one_sweep() {
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let keys = key_spec(&[("k1", 1)]);
    let store = store_on(&db, &keys, clock.clone(), Setup::default(), 2).await;
    let writer = db.writer().await;
    as_caller(&writer, "alice", "acme").await;
    writer
        .execute(
            "INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, tool_name, detail) SELECT now(), 'tool_call_completed', 'alice', 'acme', 'fs__delete', jsonb_build_object('outcome', 'ok', 'n', n) FROM generate_series(1, 1234) AS n",
            &[],
        )
        .await
        .unwrap();
    clock.advance(time::Duration::seconds(20));
    let sealed = store.seal_audit().await.unwrap();
    assert_eq!(sealed.sealed, 1234, "{sealed:?}");
    let admin = db.admin().await;
    let last: i64 = admin
        .query_one("SELECT max(id) FROM mcp_audit_events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(sealed.head.as_ref().map(|h| h.0), Some(last));
    let report = verify_audit(&admin, &KeyRing::parse(&keys).unwrap())
        .await
        .unwrap();
    assert_eq!(report.broken, None, "{report:?}");
    assert_eq!((report.verified, report.unsealed_tail), (1234, 0));
    assert_eq!(store.seal_audit().await.unwrap().sealed, 0, "sealed once");
}

/// The batch sealing function holds the writer to the one-row rule: not after another
/// head, not a sealed row again, not out of order, not past an unsealed row, not with more
/// ids than MACs; it seals up to the first row that breaks a rule, and a link the writer
/// makes up is a break the walk reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_role_cannot_reseal_the_audit_chain_in_a_batch() {
    let (db, keys, ids) = sealed_trail().await;
    let writer = db.writer().await;
    let head = *ids.last().unwrap();
    let seal = |after: Option<i64>, rows: Vec<i64>, macs: usize| {
        let writer = &writer;
        async move {
            writer
                .query_one(
                    "SELECT mcp_audit_seal_many($1, $2, $3, 'k1')",
                    &[&after, &rows, &vec![vec![7u8; 32]; macs]],
                )
                .await
                .map(|row| row.get::<_, i32>(0))
        }
    };
    // Sealed rows again, from an old head or from none.
    assert_eq!(
        seal(Some(ids[2]), vec![ids[3], ids[4]], 2).await.unwrap(),
        0
    );
    assert_eq!(seal(None, vec![ids[0]], 1).await.unwrap(), 0);
    assert!(
        seal(Some(head), vec![head + 1], 2).await.is_err(),
        "ids and MACs must pair"
    );
    for shape in [
        "SELECT mcp_audit_seal_many($1, ARRAY[ARRAY[$2::bigint]], ARRAY[ARRAY[$3::bytea]], 'k1')",
        "SELECT mcp_audit_seal_many($1, '[2:2]={0}'::bigint[] || $2::bigint, ARRAY[$3::bytea, $3::bytea], 'k1')",
    ] {
        assert!(
            writer
                .query_one(shape, &[&Some(head), &(head + 1), &vec![7u8; 32]])
                .await
                .is_err(),
            "one-dimensional arrays from 1 only: {shape}"
        );
    }
    // Three new rows; the writer lists them out of order: only those before the break.
    let new = unsealed_rows(&writer, 3).await;
    assert_eq!(
        seal(Some(head), vec![new[1], new[2]], 2).await.unwrap(),
        0,
        "no unsealed row is left behind below a sealed one"
    );
    assert_eq!(
        seal(Some(head), vec![new[0], new[2], new[1]], 3)
            .await
            .unwrap(),
        1,
        "stops where a row would be left behind (new[2] before new[1])"
    );
    assert_eq!(
        seal(Some(new[0]), vec![new[0]], 1).await.unwrap(),
        0,
        "the head is never sealed again"
    );
    let report = verify_audit(&db.admin().await, &keys).await.unwrap();
    assert_eq!(
        report.broken.map(|b| b.0),
        Some(new[0]),
        "the made-up link is caught"
    );
}

/// `n` new audit rows of alice's, unsealed, written through `writer`: their ids.
async fn unsealed_rows(writer: &tokio_postgres::Client, n: i32) -> Vec<i64> {
    as_caller(writer, "alice", "acme").await;
    writer
        .query(
            "INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, detail) SELECT now(), 'tool_call_held', 'alice', 'acme', '{}' FROM generate_series(1, $1) RETURNING id",
            &[&n],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Returns once some session waits for a lock (`filter`: more conditions on `pg_locks`,
/// each followed by `AND`); fails with `never` after five seconds.
async fn waits_on_a_lock(admin: &tokio_postgres::Client, filter: &str, never: &str) {
    let query = format!("SELECT count(*) FROM pg_locks WHERE {filter} NOT granted");
    for _ in 0..500 {
        let waiting: i64 = admin.query_one(&query, &[]).await.unwrap().get(0);
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{never}");
}

async fn unsealed_count(admin: &tokio_postgres::Client) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM mcp_audit_events WHERE mac IS NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// A batch racing the one-row sealer of V17 (which the writer role may still call): the
/// row the batch would seal first is sealed by the other while the batch waits for it, so
/// the batch seals nothing — not the rows after it, chained on a link that is not the
/// chain's (a review of V31 found the one-statement batch skipping the taken row and
/// sealing the rest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_racing_a_one_row_seal_seals_nothing() {
    let (db, _keys, ids) = sealed_trail().await;
    let head = *ids.last().unwrap();
    let (first, second) = (db.writer().await, db.writer().await);
    let new = unsealed_rows(&first, 3).await;
    first.batch_execute("BEGIN").await.unwrap();
    let one: bool = first
        .query_one(
            "SELECT mcp_audit_seal($1, $2, $3, 'k1')",
            &[&new[0], &Some(head), &vec![1u8; 32]],
        )
        .await
        .unwrap()
        .get(0);
    assert!(one);
    let batch = tokio::spawn(async move {
        second
            .query_one(
                "SELECT mcp_audit_seal_many($1, $2, $3, 'k1')",
                &[&Some(head), &new, &vec![vec![2u8; 32]; 3]],
            )
            .await
            .map(|row| row.get::<_, i32>(0))
    });
    let admin = db.admin().await;
    waits_on_a_lock(
        &admin,
        "",
        "the batch never waited for the row being sealed",
    )
    .await;
    first.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        batch.await.unwrap().unwrap(),
        0,
        "nothing sealed past the taken row"
    );
    let unsealed = unsealed_count(&admin).await;
    assert_eq!(unsealed, 2);
}

/// Two batches computed on the same head race (two sealers, or a writer with MACs of its
/// own): the first seals its rows, the second waits for it and seals none — not even the
/// rows past the first's batch, which it chained on links that are not the chain's. V31
/// seals a batch in one statement, so this rests on the function's own lock, not on row
/// locks met one row at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_batches_sealed_from_the_same_head_cannot_fork_the_chain() {
    let (db, keys, ids) = sealed_trail().await;
    let head = *ids.last().unwrap();
    let (first, second) = (db.writer().await, db.writer().await);
    let new = unsealed_rows(&first, 4).await;
    let first_new = new[0];
    const SEAL: &str = "SELECT mcp_audit_seal_many($1, $2, $3, 'k1')";
    first.batch_execute("BEGIN").await.unwrap();
    let sealed: i32 = first
        .query_one(
            SEAL,
            &[&Some(head), &new[..2].to_vec(), &vec![vec![1u8; 32]; 2]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(sealed, 2);
    let racing = tokio::spawn(async move {
        second
            .query_one(SEAL, &[&Some(head), &new, &vec![vec![2u8; 32]; 4]])
            .await
            .map(|row| row.get::<_, i32>(0))
    });
    // The second batch is waiting for the first (not sealing around it).
    let admin = db.admin().await;
    waits_on_a_lock(
        &admin,
        "locktype = 'advisory' AND",
        "the second batch never waited",
    )
    .await;
    first.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        racing.await.unwrap().unwrap(),
        0,
        "a batch computed on a head that moved seals nothing"
    );
    let unsealed = unsealed_count(&admin).await;
    assert_eq!(
        unsealed, 2,
        "the rows past the first batch wait for a real sealer"
    );
    let report = verify_audit(&admin, &keys).await.unwrap();
    assert_eq!(
        report.broken.as_ref().map(|b| b.0),
        Some(first_new),
        "the first batch's made-up link is where the walk breaks: {report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connected_accounts_are_sealed_scoped_and_cannot_be_moved() {
    use crate::{AccountStore, AccountTokens};
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(&db, &key_spec(&[("k1", 1)]), clock, Setup::default(), 1).await;
    let tokens = |access: &str| AccountTokens {
        access_token: access.to_owned(),
        refresh_token: Some(format!("{access}-REFRESH")),
        client_secret: Some("CLIENT-SECRET".into()),
        ..Default::default()
    };
    store
        .save_account(&alice(), "github", &tokens("ALICE-GH-TOKEN"), true)
        .await
        .unwrap();
    store
        .save_account(&alice(), "linear", &tokens("ALICE-LINEAR-TOKEN"), true)
        .await
        .unwrap();
    store
        .save_account(&bob(), "github", &tokens("BOB-GH-TOKEN"), true)
        .await
        .unwrap();

    // At rest: no token in any column, as an operator with raw SQL access sees it.
    let admin = db.admin().await;
    let raw: String = admin
        .query_one(
            "SELECT string_agg(row_to_json(a)::text || encode(tokens_sealed, 'escape'), ' ') FROM mcp_accounts a",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    for secret in ["ALICE-GH-TOKEN", "REFRESH", "BOB-GH-TOKEN", "CLIENT-SECRET"] {
        assert!(!raw.contains(secret), "{secret} is sealed: {raw}");
    }

    // The writer sees only the caller it is scoped to, and cannot re-own or delete others'.
    let writer = db.writer().await;
    as_caller(&writer, "alice", "acme").await;
    let visible: i64 = writer
        .query_one("SELECT count(*) FROM mcp_accounts", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(visible, 2, "only alice's rows");
    let no_privilege = [
        "UPDATE mcp_accounts SET caller_subject = 'bob'",
        "UPDATE mcp_accounts SET module = 'atlassian'",
        "TRUNCATE mcp_accounts",
        "ALTER TABLE mcp_accounts DISABLE ROW LEVEL SECURITY",
    ];
    for statement in no_privilege {
        let code = sqlstate(writer.execute(statement, &[]).await);
        assert_eq!(code, Some(SqlState::INSUFFICIENT_PRIVILEGE), "{statement}");
    }
    let deleted = writer
        .execute("DELETE FROM mcp_accounts WHERE caller_subject = 'bob'", &[])
        .await
        .unwrap();
    assert_eq!(deleted, 0, "bob's row is not alice's to delete");
    let code = sqlstate(
        writer
            .execute(
                "INSERT INTO mcp_accounts (id, caller_subject, caller_tenant, module, tokens_sealed, tokens_key_id, connected_at, updated_at) \
                 VALUES (gen_random_uuid(), 'bob', 'acme', 'jira', '\\x00', 'k1', now(), now())",
                &[],
            )
            .await,
    );
    assert_eq!(
        code,
        Some(SqlState::INSUFFICIENT_PRIVILEGE),
        "no row for another caller"
    );

    // A sealed blob swapped into another module's row, or another caller's, does not open.
    admin
        .execute(
            "UPDATE mcp_accounts SET tokens_sealed = (SELECT tokens_sealed FROM mcp_accounts WHERE caller_subject = 'alice' AND module = 'github') \
             WHERE caller_subject = 'alice' AND module = 'linear'",
            &[],
        )
        .await
        .unwrap();
    assert!(
        store
            .account(&alice(), "linear")
            .await
            .unwrap_err()
            .is_unreadable()
    );
    admin
        .execute(
            "UPDATE mcp_accounts SET tokens_sealed = (SELECT tokens_sealed FROM mcp_accounts WHERE caller_subject = 'alice' AND module = 'github') \
             WHERE caller_subject = 'bob' AND module = 'github'",
            &[],
        )
        .await
        .unwrap();
    assert!(
        store
            .account(&bob(), "github")
            .await
            .unwrap_err()
            .is_unreadable()
    );
    assert_eq!(
        store
            .account(&alice(), "github")
            .await
            .unwrap()
            .unwrap()
            .tokens,
        tokens("ALICE-GH-TOKEN")
    );
}

/// The store connects over TLS, its pool and its LISTEN connection both, checking the
/// server against roots it is given: a certificate made now, which the test cluster is
/// switched to (SSL settings reload without a restart; clients without TLS go on as before).
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_connects_over_tls_to_a_server_with_a_certificate_made_now() {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    let db = TestDb::new().await;
    let admin = db.admin().await;
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let issuer = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    // The server reads its files as its own user: in its data directory, owned by it.
    let data_dir: String = admin
        .query_one("SHOW data_directory", &[])
        .await
        .unwrap()
        .get(0);
    let owner = std::fs::metadata(&data_dir).unwrap();
    let crt = format!("{data_dir}/{}.crt", db.name);
    let pem_key = format!("{data_dir}/{}.key", db.name);
    for (path, text) in [(&crt, cert.pem()), (&pem_key, key.serialize_pem())] {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(path, Some(owner.uid()), Some(owner.gid())).unwrap();
    }
    for statement in [
        format!("ALTER SYSTEM SET ssl_cert_file = '{crt}'"),
        format!("ALTER SYSTEM SET ssl_key_file = '{pem_key}'"),
        "ALTER SYSTEM SET ssl = on".to_owned(),
        "SELECT pg_reload_conf()".to_owned(),
    ] {
        admin.batch_execute(&statement).await.unwrap();
    }
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(issuer.pem().as_bytes()).unwrap())
        .unwrap();
    let tls = Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    );
    let mut config = db.writer.clone();
    config.ssl_mode(tokio_postgres::config::SslMode::Require);
    let connect = || {
        let mut options = PostgresOptions::new(
            "postgres://x@localhost/x",
            KeyRing::parse(&key_spec(&[("k1", 1)])).unwrap(),
        )
        .unwrap();
        options.config = config.clone();
        options.tls = Some(tls.clone());
        PostgresStore::connect(options)
    };
    // The reload is the server's to apply, shortly.
    let mut store = None;
    for _ in 0..50 {
        match connect().await {
            Ok(connected) => {
                store = Some(connected);
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
    let store = store.expect("the store connects over TLS");
    let caller = Caller::new("alice", None).unwrap();
    let asked = store
        .create(
            &caller,
            ElicitationSpec::confirmation("Over TLS?").unwrap(),
            Duration::minutes(5),
        )
        .await
        .unwrap();
    // The pool's connections are encrypted (the LISTEN connection connected with the same
    // `sslmode=require`, or the store would not have been built).
    let encrypted: bool = store
        .pool
        .get()
        .await
        .unwrap()
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(encrypted);
    // Migrating over TLS too (the schema owner's connection, `sslmode=require`): the
    // database is up to date; without roots for TLS, `require` refuses to connect.
    let host = match &db.admin.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        #[allow(unreachable_patterns)]
        _ => "localhost".to_owned(),
    };
    let owner_url = format!(
        "host={host} port={} user={} dbname={} sslmode=require",
        db.admin.get_ports()[0],
        db.admin.get_user().unwrap(),
        db.name
    );
    let applied = crate::migrate_url(&owner_url, Some(tls.clone()))
        .await
        .unwrap();
    assert_eq!(applied, Vec::<String>::new());
    assert!(crate::migrate_url(&owner_url, None).await.is_err());
    store
        .respond(&caller, asked.id, json!({"confirmed": true}))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let answered = store
        .wait_for_change(&caller, asked.id, deadline)
        .await
        .unwrap();
    assert_eq!(answered.confirmation_state(), Some(true));
    // Roots that do not know the server's certificate are refused.
    let mut options = PostgresOptions::new(
        "postgres://x@localhost/x",
        KeyRing::parse(&key_spec(&[("k1", 1)])).unwrap(),
    )
    .unwrap();
    options.config = config.clone();
    options.tls = Some(Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth(),
    ));
    assert!(PostgresStore::connect(options).await.is_err());
}

/// The sweeper's function reads every caller's flows, so it cannot be told to erase young
/// ones: a writer (or an instance whose clock runs days fast) asking it to forget everything
/// before tomorrow erases only what is older than the longest window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgetting_old_flows_never_erases_a_flow_within_the_longest_window() {
    use crate::{FlowStore, FlowTouch};
    use gating_core::{FlowLabel, FlowLabels};
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let keys = key_spec(&[("k1", 1)]);
    let store = store_on(&db, &keys, clock.clone(), Setup::default(), 2).await;
    let now = start_time();
    for (tool, at) in [
        ("web__old", now - Duration::days(8)),
        ("web__new", now - Duration::hours(1)),
    ] {
        let touch = FlowTouch {
            tool,
            labels: FlowLabels::of([FlowLabel::Untrusted]),
            seen: &[],
            at,
        };
        store.record_flow(&alice(), touch).await.unwrap();
    }
    let writer = db.writer().await;
    let erased: i64 = writer
        .query_one(
            "SELECT mcp_forget_old_flows(now() + interval '1 day', 1000)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(erased, 1, "only the row older than 7 days");
    let flow = store
        .flow(&alice(), now - Duration::days(30))
        .await
        .unwrap();
    let sources: Vec<&str> = flow
        .sources(FlowLabel::Untrusted)
        .map(|t| t.tool.as_str())
        .collect();
    assert_eq!(sources, ["web__new"]);
}

/// The SQL holds the rule itself, whatever the Rust before it checked (an attacker's read
/// of the quorum): the plain answer statement approves no row several people must approve,
/// and never lets a tenant-less requester approve its own four-eyes call (its tenant was
/// compared as '' with the row's NULL, so only the Rust check kept it out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_statement_itself_refuses_one_person_for_a_quorum_and_the_requester() {
    use crate::{Approval, ApprovalMode, Approver, Quorum};
    let db = TestDb::new().await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let store = store_on(&db, &key_spec(&[("k1", 1)]), clock, Setup::default(), 1).await;
    let rule = |approvers| {
        Some(Approval {
            group: "sre".into(),
            mode: ApprovalMode::FourEyes,
            quorum: Quorum {
                approvers,
                also: Vec::new(),
            },
        })
    };
    let carl = Caller::new("carl", None).unwrap();
    let yes = || json!({"confirmed": true});
    let quorum = store
        .create_confirmation(
            &alice(),
            confirmation_request(json!({"q": 1})).with_approval(rule(2)),
        )
        .await
        .unwrap()
        .elicitation
        .id;
    let own = store
        .create_confirmation(
            &carl,
            confirmation_request(json!({"q": 2})).with_approval(rule(1)),
        )
        .await
        .unwrap()
        .elicitation
        .id;
    let bob_sre = Approver::new(
        Caller::new("bob", Some("acme".into())).unwrap(),
        vec!["sre".into()],
    );
    let carl_sre = Approver::new(carl.clone(), vec!["sre".into()]);
    for (owner, id, approver) in [(alice(), quorum, &bob_sre), (carl.clone(), own, &carl_sre)] {
        let outcome = store
            .respond_guarded(&owner, id, yes(), None, Some((approver, None)), None)
            .await;
        assert!(
            !matches!(outcome, Ok((RespondOutcome::Recorded, _))),
            "{outcome:?}"
        );
        assert_eq!(
            store.get(&owner, id).await.unwrap().elicitation.status,
            ElicitationStatus::Pending
        );
    }
}
