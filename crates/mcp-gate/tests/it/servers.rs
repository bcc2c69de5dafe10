//! Virtual servers through the library: a server is the gateway seen through its scope. What
//! it does not offer is no tool there; its own rules decide its calls, and decide what a
//! person may attach to an approval of a call held there wherever they answer it.

use gating_core::{GateMode, GatePolicy, PolicyRule};
use mcp_gate::Approving;
use mcp_gate::servers::VirtualServer;
use serde_json::json;

use crate::support::{Harness, agent, harness, held, on_both_stores, person, result};

fn finance() -> VirtualServer {
    VirtualServer {
        name: "finance".into(),
        tools: vec!["fs__write".into(), "fs__read".into()],
        modules: Vec::new(),
        scopes: Vec::new(),
        groups: Vec::new(),
        groups_from: mcp_gate::GroupsFrom::Configured,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_offers_only_its_tools_and_its_rules_decide_what_an_approval_may_carry() {
    on_both_stores(|store| async move {
        let h = harness(store, GatePolicy::default()).await;
        // finance's own rule: every write is asked about, and no grant stands in.
        let rules = vec![PolicyRule::new("fs__write", GateMode::Confirm).without_grants()];
        let gateway = h.gateway.with_servers(vec![(finance(), rules)]);
        let finance = (**gateway.server("finance").unwrap()).clone();
        let h = Harness {
            gateway,
            writes: h.writes,
        };
        let on_finance = Harness {
            gateway: finance,
            writes: h.writes.clone(),
        };
        let (alice, alices_person) = (agent("alice"), person("alice"));
        // fs__wipe exists on the gateway's own endpoint, not on finance.
        let listed: Vec<String> = on_finance
            .gateway
            .list_tools(true)
            .await
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(listed, ["fs__read", "fs__write"]);
        let unknown = on_finance
            .gateway
            .classify(&alice, crate::support::params("fs__wipe", json!({}), None))
            .await;
        assert!(
            matches!(unknown, Err(mcp_gate::error::GateError::UnknownTool(_))),
            "{unknown:?}"
        );
        // A write held on finance, answered on the gateway's own surfaces (the REST API and
        // the page answer through the gateway that serves them): finance's rule decides that
        // no grant may come with it.
        let id = held(
            &on_finance
                .call(&alice, "fs__write", json!({"path": "/ledger"}), None)
                .await,
        );
        let grant = json!({"scope": "tool", "for": "30m"});
        let refused = h
            .gateway
            .answer_with(
                &alices_person,
                id.parse().unwrap(),
                json!({"confirmed": true}),
                "test",
                Approving::Grant(&grant),
            )
            .await;
        assert!(
            refused.is_err(),
            "finance's rule takes no grant: {refused:?}"
        );
        // The same write held on the gateway's own endpoint takes one (its default rules).
        let own = held(
            &h.call(&alice, "fs__write", json!({"path": "/ledger"}), None)
                .await,
        );
        let (_, _, made) = h
            .gateway
            .answer_with(
                &alices_person,
                own.parse().unwrap(),
                json!({"confirmed": true}),
                "test",
                Approving::Grant(&grant),
            )
            .await
            .unwrap();
        assert!(made.is_some());
        // finance's confirmation, approved plainly, runs there once.
        on_finance
            .answer(&alices_person, &id, json!({"confirmed": true}))
            .await;
        let ran = result(
            on_finance
                .call(&alice, "fs__write", json!({"path": "/ledger"}), Some(&id))
                .await,
        );
        assert!(
            ran["content"][0]["text"]
                .as_str()
                .unwrap()
                .starts_with("wrote"),
            "{ran}"
        );
        // The grant made on the gateway's own endpoint does not stand in for finance's rule,
        // whose calls take no grant: the next write there is asked about.
        held(
            &on_finance
                .call(&alice, "fs__write", json!({"path": "/ledger2"}), None)
                .await,
        );
    })
    .await;
}
