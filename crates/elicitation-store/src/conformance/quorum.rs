//! Quorum: several distinct people approve one held call, on every store and across
//! instances.

use super::*;
use crate::{Approval, ApprovalMode, Approver, AuditQuery, GrantScope, Quorum};

fn person(name: &str, groups: &[&str]) -> Approver {
    Approver {
        caller: Caller::new(name, Some("acme".into())).unwrap(),
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        on_behalf_of: None,
    }
}

fn quorum(groups: &[&str], approvers: u8) -> Option<Approval> {
    Some(Approval {
        group: groups[0].into(),
        mode: ApprovalMode::FourEyes,
        quorum: Quorum {
            approvers,
            also: groups[1..].iter().map(|g| (*g).to_owned()).collect(),
        },
    })
}

fn yes() -> Value {
    json!({"confirmed": true})
}

async fn held(h: &Harness, approval: Option<Approval>, path: &str) -> crate::ElicitationId {
    h.store
        .create_confirmation(
            &alice(),
            request("fs__delete", json!({"path": path})).with_approval(approval),
        )
        .await
        .unwrap()
        .elicitation
        .id
}

fn counted(approvals: usize, needed: usize, missing: &[&str]) -> RespondOutcome {
    RespondOutcome::Counted {
        approvals,
        needed,
        missing: missing.iter().map(|g| (*g).to_owned()).collect(),
    }
}

/// A call two people must approve runs after the second distinct one, whichever instance
/// each answered on; the requester never counts, a person counts once (the same person
/// again, through another surface or instance, changes nothing), a quorum's approval makes
/// no grant, each approval is audited with who, and any one decline ends the call.
// Long: one confirmation's whole life under a quorum, step by step, then a decline.
pub(crate) async fn a_quorum_runs_after_its_nth_distinct_approver_and_any_decline_ends_it(
    make: impl AsyncFn(Setup) -> Harness,
) {
    let h = make(Setup::default()).await;
    let id = held(&h, quorum(&["sre"], 2), "/a").await;
    let alice_sre = Approver {
        caller: alice(),
        groups: vec!["sre".into()],
        on_behalf_of: None,
    };
    let (bob, carol) = (person("bob", &["sre"]), person("carol", &["sre"]));
    assert!(matches!(
        h.store.respond(&alice(), id, yes()).await,
        Err(StoreError::ApproverRequired { .. })
    ));
    assert!(matches!(
        h.store.approver_respond(&alice_sre, id, yes(), None).await,
        Err(StoreError::FourEyes { .. })
    ));
    let (owner, first) = h
        .store
        .approver_respond(&bob, id, yes(), Some("Bob (page)"))
        .await
        .unwrap();
    assert_eq!((owner, first), (alice(), counted(1, 2, &[])));
    // Bob again, on the other instance (Slack, a second token): still one approval.
    let (_, again) = h
        .twin
        .approver_respond(&bob, id, yes(), Some("Bob (slack)"))
        .await
        .unwrap();
    assert_eq!(again, counted(1, 2, &[]));
    let read = h.twin.get(&alice(), id).await.unwrap();
    assert_eq!(read.elicitation.status, ElicitationStatus::Pending);
    let votes = read.call.unwrap().votes;
    assert_eq!(votes.len(), 1);
    assert_eq!(
        (votes[0].subject.as_str(), votes[0].by.as_deref()),
        ("bob", Some("Bob (page)"))
    );
    // Not with a grant: one person's word would let later calls through.
    let grant = grant_request(GrantScope::Call, Duration::hours(1), None);
    assert!(matches!(
        h.store
            .approver_respond_with(&carol, id, yes(), None, grant.into())
            .await,
        Err(StoreError::AnswerRefused(_))
    ));
    assert_eq!(
        h.store.get(&alice(), id).await.unwrap().elicitation.status,
        ElicitationStatus::Pending
    );
    let (_, last) = h
        .twin
        .approver_respond(&carol, id, yes(), Some("Carol"))
        .await
        .unwrap();
    assert_eq!(last, RespondOutcome::Recorded);
    let done = h.store.get(&alice(), id).await.unwrap();
    assert_eq!(done.elicitation.confirmation_state(), Some(true));
    assert_eq!(done.elicitation.answered_by.as_deref(), Some("Carol"));
    let votes: Vec<String> = done
        .call
        .unwrap()
        .votes
        .into_iter()
        .map(|v| v.subject)
        .collect();
    assert_eq!(votes, ["bob", "carol"]);
    // Once complete, a further approval is the same answer again.
    let (_, after) = h
        .store
        .approver_respond(&person("dave", &["sre"]), id, yes(), None)
        .await
        .unwrap();
    assert_eq!(after, RespondOutcome::AlreadyRecorded);
    h.store
        .consume_confirmation(&alice(), id, &binding("fs__delete", &json!({"path": "/a"})))
        .await
        .unwrap();

    let reader = Caller::new("auditor", Some("acme".into())).unwrap();
    let trail = h
        .twin
        .audit_events(
            &reader,
            &AuditQuery {
                limit: 100,
                ..AuditQuery::default()
            },
        )
        .await
        .unwrap()
        .entries;
    let of_it: Vec<(&str, Value)> = trail
        .iter()
        .filter(|e| e.elicitation_id.as_deref() == Some(id.to_string().as_str()))
        .filter(|e| {
            e.event.starts_with("elicitation_approval") || e.event == "elicitation_responded"
        })
        .map(|e| (e.event.as_str(), e.detail.clone()))
        .collect();
    assert!(
        of_it
            .iter()
            .any(|(event, detail)| *event == "elicitation_approval_counted"
                && detail["answered_by"] == "Bob (page)"
                && detail["approvals"] == 1
                && detail["needed"] == 2),
        "{of_it:?}"
    );
    assert_eq!(
        of_it
            .iter()
            .filter(|(e, _)| *e == "elicitation_approval_counted")
            .count(),
        1,
        "bob's second approval is not audited as another: {of_it:?}"
    );
    assert!(
        of_it
            .iter()
            .any(|(event, detail)| *event == "elicitation_responded"
                && detail["answered_by"] == "Carol"),
        "{of_it:?}"
    );

    // Any one decline ends it, with that person's note, whatever was approved before.
    let id = held(&h, quorum(&["sre"], 3), "/b").await;
    h.store
        .approver_respond(&bob, id, yes(), None)
        .await
        .unwrap();
    let (_, declined) = h
        .twin
        .approver_respond(
            &carol,
            id,
            json!({"confirmed": false, "note": "not during the freeze"}),
            Some("Carol"),
        )
        .await
        .unwrap();
    assert_eq!(declined, RespondOutcome::Recorded);
    let done = h.store.get(&alice(), id).await.unwrap();
    assert_eq!(done.elicitation.confirmation_state(), Some(false));
    assert_eq!(
        done.elicitation.note.as_deref(),
        Some("not during the freeze")
    );
}

/// "One from sre and one from security": two from sre are not enough, someone in both groups
/// counts for one of them only, a member of only the further group sees and completes it,
/// and someone in neither sees nothing.
pub(crate) async fn a_quorum_from_several_groups_needs_one_of_each_and_nobody_counts_twice(
    make: impl AsyncFn(Setup) -> Harness,
) {
    let h = make(Setup::default()).await;
    let id = held(&h, quorum(&["sre", "security"], 2), "/c").await;
    let (bob, carol) = (person("bob", &["sre"]), person("carol", &["sre"]));
    let erin = person("erin", &["security"]);
    let both = person("dave", &["sre", "security"]);
    let nobody = person("mallory", &["finance"]);
    assert!(matches!(
        h.store.approver_respond(&nobody, id, yes(), None).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(
        h.store
            .approver_pending(&nobody, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let pending = h.twin.approver_pending(&erin, 10).await.unwrap();
    assert_eq!(pending.len(), 1, "a member of the further group sees it");
    assert_eq!(
        h.store
            .approver_respond(&bob, id, yes(), None)
            .await
            .unwrap()
            .1,
        counted(1, 2, &["security"])
    );
    assert_eq!(
        h.twin
            .approver_respond(&carol, id, yes(), None)
            .await
            .unwrap()
            .1,
        counted(2, 2, &["security"]),
        "two from sre are not one from security"
    );
    assert_eq!(
        h.store.get(&alice(), id).await.unwrap().elicitation.status,
        ElicitationStatus::Pending
    );
    // A crowd of sre cannot fill the approvals while security is waited for (on PostgreSQL
    // the row keeps at most 32: a crowd would have made the call unapprovable).
    for i in 0..20 {
        match h
            .store
            .approver_respond(&person(&format!("sre{i}"), &["sre"]), id, yes(), None)
            .await
        {
            Err(StoreError::AnswerRefused(why)) => assert!(why.contains("security"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        h.twin
            .approver_respond(&erin, id, yes(), Some("Erin"))
            .await
            .unwrap()
            .1,
        RespondOutcome::Recorded
    );

    // Someone in both groups counts once: for one of them.
    let id = held(&h, quorum(&["sre", "security"], 2), "/d").await;
    assert_eq!(
        h.store
            .approver_respond(&both, id, yes(), None)
            .await
            .unwrap()
            .1,
        counted(1, 2, &[])
    );
    assert_eq!(
        h.store.get(&alice(), id).await.unwrap().elicitation.status,
        ElicitationStatus::Pending
    );
    // ... and the other person may be of either group: dave then counts for the other.
    assert_eq!(
        h.twin
            .approver_respond(&bob, id, yes(), None)
            .await
            .unwrap()
            .1,
        RespondOutcome::Recorded
    );
}

/// Approvals arriving at once on two instances: of each call exactly one approval completes
/// it, the others are counted before it or find it approved, and no approval is lost or
/// counted twice.
pub(crate) async fn concurrent_approvals_complete_a_quorum_exactly_once(
    make: impl AsyncFn(Setup) -> Harness,
) {
    let h = make(Setup::default()).await;
    // Two approvers at once, on two instances, twenty times.
    for round in 0..20 {
        let id = held(&h, quorum(&["sre"], 2), &format!("/pair/{round}")).await;
        let (bob, carol) = (person("bob", &["sre"]), person("carol", &["sre"]));
        let (a, b) = tokio::join!(
            h.store.approver_respond(&bob, id, yes(), None),
            h.twin.approver_respond(&carol, id, yes(), None)
        );
        let mut outcomes = [a.unwrap().1, b.unwrap().1];
        outcomes.sort_by_key(|o| format!("{o:?}"));
        assert_eq!(outcomes, [counted(1, 2, &[]), RespondOutcome::Recorded]);
        let done = h.store.get(&alice(), id).await.unwrap();
        assert_eq!(done.elicitation.confirmation_state(), Some(true));
        assert_eq!(done.call.unwrap().votes.len(), 2);
    }
    // Eight people at once for a quorum of three: three counted, one of them completing it.
    let id = held(&h, quorum(&["sre"], 3), "/eight").await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = if i % 2 == 0 {
            h.store.clone()
        } else {
            h.twin.clone()
        };
        let p = person(&format!("p{i}"), &["sre"]);
        tasks.push(tokio::spawn(async move {
            store.approver_respond(&p, id, yes(), None).await
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap().unwrap().1);
    }
    let recorded = outcomes
        .iter()
        .filter(|o| **o == RespondOutcome::Recorded)
        .count();
    let counted_before = outcomes
        .iter()
        .filter(|o| matches!(o, RespondOutcome::Counted { .. }))
        .count();
    assert_eq!((recorded, counted_before), (1, 2), "{outcomes:?}");
    assert_eq!(
        h.store
            .get(&alice(), id)
            .await
            .unwrap()
            .call
            .unwrap()
            .votes
            .len(),
        3
    );
}
