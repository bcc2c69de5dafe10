//! Quotas through the gate (issue 51, item 2): two gateways on one PostgreSQL grant exactly
//! the limit between them; each refused call runs nothing, is told in band when the quota
//! starts afresh, and is audited. (Budgets in cost units: `mcp_gate::quotas`' own tests.)

use std::sync::Arc;

use elicitation_store::{KeyRing, PostgresStore, QuotaWindow, Store};
use gating_core::GatePolicy;
use mcp_gate::quotas::{QuotaPer, QuotaRule, QuotaUnit, Quotas, ToolCost};
use serde_json::json;

use crate::support::{agent, harness, result};

fn quotas() -> Quotas {
    Quotas {
        rules: vec![
            QuotaRule {
                tools: "fs__read".into(),
                per: QuotaPer::Everyone,
                window: QuotaWindow::Day,
                unit: QuotaUnit::Calls,
                limit: 10,
                server: None,
                past: mcp_gate::quotas::QuotaPast::Refuse,
            },
            QuotaRule {
                tools: "fs__w*".into(),
                per: QuotaPer::Caller,
                window: QuotaWindow::Hour,
                unit: QuotaUnit::Cost,
                limit: 5,
                server: None,
                past: mcp_gate::quotas::QuotaPast::Refuse,
            },
        ],
        costs: vec![ToolCost {
            tools: "fs__wipe".into(),
            units: 3,
        }],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_database_run_exactly_the_quota_between_them() {
    let db = elicitation_store::test_support::TestDb::new().await;
    let store = async || -> Arc<dyn Store> {
        let keys = KeyRing::parse("k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=").unwrap();
        let mut options = db.options(keys);
        options.pool_size = 8;
        let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(options).await.unwrap());
        store
    };
    let (a, b) = (store().await, store().await);
    let policy = GatePolicy::default();
    let mut gateways = Vec::new();
    for s in [a.clone(), b] {
        let h = harness(s, policy.clone()).await;
        gateways.push(Arc::new(h.gateway.with_quotas(quotas())));
    }
    let mut calls = Vec::new();
    for i in 0..64 {
        let gateway = gateways[i % 2].clone();
        calls.push(tokio::spawn(async move {
            let who = agent(&format!("agent-{}", i % 5));
            let classified = gateway
                .classify(&who, crate::support::params("fs__read", json!({}), None))
                .await
                .unwrap();
            result(gateway.run(&who, classified, None).await)
        }));
    }
    let (mut ran, mut refused) = (0, 0);
    for call in calls {
        let answer = call.await.unwrap();
        if answer["content"][0]["text"] == "contents" {
            ran += 1;
        } else {
            assert_eq!(
                answer["structuredContent"]["quota_exceeded"], true,
                "{answer}"
            );
            assert!(
                answer["structuredContent"]["retry_after_secs"]
                    .as_u64()
                    .unwrap()
                    >= 1,
                "{answer}"
            );
            refused += 1;
        }
    }
    assert_eq!(
        (ran, refused),
        (10, 54),
        "exactly the quota, across both gateways"
    );

    let reader = elicitation_store::Caller::new("auditor", None).unwrap();
    let trail = a
        .audit_events(
            &reader,
            &elicitation_store::AuditQuery {
                limit: 1000,
                ..elicitation_store::AuditQuery::default()
            },
        )
        .await
        .unwrap()
        .entries;
    let over = trail
        .iter()
        .filter(|e| e.detail["reason"] == "quota_exceeded")
        .count();
    assert_eq!(over, 54, "each refused call audited once");
}

/// An attacker's read of the quotas: a held call is counted when it runs, never burns a
/// person's approval, and a call already over its quota is refused before anyone is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_is_counted_when_it_runs_and_one_over_the_quota_is_never_asked_about() {
    crate::support::on_both_stores(|store| async move {
        let h = harness(store, GatePolicy::default()).await;
        let gateway = h.gateway.with_quotas(Quotas {
            rules: vec![QuotaRule {
                tools: "fs__write".into(),
                per: QuotaPer::Caller,
                window: QuotaWindow::Day,
                unit: QuotaUnit::Calls,
                limit: 1,
                server: None,
                past: mcp_gate::quotas::QuotaPast::Refuse,
            }],
            costs: Vec::new(),
        });
        let h = crate::support::Harness {
            gateway,
            writes: h.writes,
        };
        let alice = agent("alice");
        let first = crate::support::held(
            &h.call(&alice, "fs__write", json!({"path": "/a"}), None)
                .await,
        );
        // Being asked about spends nothing: held again and again, the quota stays whole.
        let again = crate::support::held(
            &h.call(&alice, "fs__write", json!({"path": "/a"}), None)
                .await,
        );
        assert_eq!(again, first);
        h.answer(
            &crate::support::person("alice"),
            &first,
            json!({"confirmed": true}),
        )
        .await;
        let ran = result(
            h.call(&alice, "fs__write", json!({"path": "/a"}), Some(&first))
                .await,
        );
        assert!(
            ran["content"][0]["text"]
                .as_str()
                .unwrap()
                .starts_with("wrote"),
            "{ran}"
        );
        // The quota is spent: the next write is refused at once, not asked about.
        let over = result(
            h.call(&alice, "fs__write", json!({"path": "/b"}), None)
                .await,
        );
        assert_eq!(over["structuredContent"]["quota_exceeded"], true, "{over}");
        assert!(
            h.gateway
                .store()
                .list(
                    &elicitation_store::Caller::new("alice", None).unwrap(),
                    elicitation_store::ListQuery::pending(10)
                )
                .await
                .unwrap()
                .is_empty(),
            "nobody was asked about a call over its quota"
        );
        assert_eq!(h.writes.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Another caller's quota is its own.
        let bob = agent("bob");
        crate::support::held(&h.call(&bob, "fs__write", json!({"path": "/c"}), None).await);
    })
    .await;
}

/// `past = "ask"`: a call past the quota is held for a person's leave to run this one call
/// beyond it. The leave is bound to the quota: an approval of the same call given before the
/// quota was passed is no leave, and one leave lets one call through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_allows_one_call_past_a_quota_that_asks() {
    crate::support::on_both_stores(|store| async move {
        let h = harness(store, GatePolicy::default()).await;
        let gateway = h.gateway.with_quotas(Quotas {
            rules: ["fs__w*", "fs__read"]
                .into_iter()
                .map(|tools| QuotaRule {
                    past: mcp_gate::quotas::QuotaPast::Ask,
                    ..QuotaRule::new(
                        tools,
                        QuotaPer::Caller,
                        QuotaWindow::Day,
                        QuotaUnit::Calls,
                        1,
                    )
                })
                .collect(),
            costs: Vec::new(),
        });
        let h = crate::support::Harness {
            gateway,
            writes: h.writes,
        };
        let (alice, person) = (agent("alice"), crate::support::person("alice"));
        let write = |path: &str| json!({"path": path});
        // Two writes held the ordinary way (nothing counted yet), both approved.
        let a = crate::support::held(&h.call(&alice, "fs__write", write("/a"), None).await);
        let b = crate::support::held(&h.call(&alice, "fs__write", write("/b"), None).await);
        for id in [&a, &b] {
            h.answer(&person, id, json!({"confirmed": true})).await;
        }
        // /a runs and spends the quota.
        let ran = result(h.call(&alice, "fs__write", write("/a"), Some(&a)).await);
        assert!(
            ran["content"][0]["text"]
                .as_str()
                .unwrap()
                .starts_with("wrote"),
            "{ran}"
        );
        // /b's approval was given for the call, not for passing the quota: asked anew.
        let past = h.call(&alice, "fs__write", write("/b"), Some(&b)).await;
        let leave = crate::support::held(&past);
        assert_ne!(leave, b);
        let asked = h
            .gateway
            .store()
            .get(
                &elicitation_store::Caller::new("alice", None).unwrap(),
                leave.parse().unwrap(),
            )
            .await
            .unwrap();
        let message = asked.elicitation.spec.message();
        assert!(
            message.contains("would pass the quota of 1 calls per day of fs__w*")
                && message.contains("lets this one call run beyond the quota")
                && message.contains("destructive tool `fs__write`"),
            "{message}"
        );
        assert_eq!(h.writes.load(std::sync::atomic::Ordering::SeqCst), 1);
        // The person allows it: it runs, once, beyond the quota.
        h.answer(&person, &leave, json!({"confirmed": true})).await;
        let ran = result(h.call(&alice, "fs__write", write("/b"), None).await);
        assert!(
            ran["content"][0]["text"]
                .as_str()
                .unwrap()
                .starts_with("wrote"),
            "{ran}"
        );
        assert_eq!(h.writes.load(std::sync::atomic::Ordering::SeqCst), 2);
        // The leave is used: the same call again is asked about again, and runs nothing.
        let again = crate::support::held(&h.call(&alice, "fs__write", write("/b"), None).await);
        assert_ne!(again, leave);
        assert_eq!(h.writes.load(std::sync::atomic::Ordering::SeqCst), 2);
        // A call nothing gates (a read) is held past its quota too, and runs once allowed.
        let read = result(h.call(&alice, "fs__read", json!({}), None).await);
        assert_eq!(read["content"][0]["text"], "contents", "{read}");
        let past = h.call(&alice, "fs__read", json!({}), None).await;
        let leave = crate::support::held(&past);
        let asked = h
            .gateway
            .store()
            .get(
                &elicitation_store::Caller::new("alice", None).unwrap(),
                leave.parse().unwrap(),
            )
            .await
            .unwrap();
        assert!(
            asked
                .elicitation
                .spec
                .message()
                .contains("beyond a quota the gateway keeps. Allow this one call beyond it?"),
            "{}",
            asked.elicitation.spec.message()
        );
        h.answer(&person, &leave, json!({"confirmed": true})).await;
        let read = result(h.call(&alice, "fs__read", json!({}), None).await);
        assert_eq!(read["content"][0]["text"], "contents", "{read}");
    })
    .await;
}
