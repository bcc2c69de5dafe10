//! Delegations: a person's approvals handed to another for a window, on every store.

use super::*;
use crate::{Approval, ApprovalMode, Approver, AuditQuery, DelegationRequest, Quorum, Until};

fn acme(name: &str) -> Caller {
    Caller::new(name, Some("acme".into())).unwrap()
}

fn in_sre(name: &str) -> Approver {
    Approver::new(acme(name), vec!["sre".into()])
}

fn window(h: &Harness, starts_in: Duration, lasts: Duration, to: &str) -> DelegationRequest {
    let now = h.clock_now();
    DelegationRequest {
        to: acme(to),
        starts_at: Some(now + starts_in),
        until: Until::At(now + starts_in + lasts),
    }
}

async fn held_of(
    h: &Harness,
    caller: &Caller,
    mode: ApprovalMode,
    approvers: u8,
) -> crate::ElicitationId {
    let approval = Approval {
        group: "sre".into(),
        mode,
        quorum: Quorum {
            approvers,
            also: Vec::new(),
        },
    };
    h.store
        .create_confirmation(
            caller,
            request("fs__delete", json!({"n": approvers, "m": mode.label()}))
                .with_approval(Some(approval)),
        )
        .await
        .unwrap()
        .elicitation
        .id
}

/// Alice (sre) hands her approvals to Carol (in no group) while away. Carol answers Dave's
/// four-eyes call with them, as herself for Alice — but never Alice's own call (Alice's eyes
/// by proxy), and she and Alice count as one person toward a quorum. What cannot be handed
/// over is refused; a delegation starts and ends on time, either of the two ends it early,
/// a delegate acts on nothing after; every step is audited with both names.
// Long: one delegation's life, each rule of it checked at the step it matters.
pub(crate) async fn a_delegation_answers_for_its_window_never_the_delegators_own_calls(
    make: impl AsyncFn(Setup) -> Harness,
) {
    let h = make(Setup::default()).await;
    let alice = in_sre("alice");
    // What cannot be handed over.
    for (from, request, why) in [
        (
            alice.clone(),
            window(&h, Duration::ZERO, Duration::days(1), "alice"),
            "someone else",
        ),
        (
            alice.clone(),
            DelegationRequest {
                to: Caller::new("carol", Some("globex".into())).unwrap(),
                ..window(&h, Duration::ZERO, Duration::days(1), "carol")
            },
            "own tenant",
        ),
        (
            Approver::new(acme("erin"), Vec::new()),
            window(&h, Duration::ZERO, Duration::days(1), "carol"),
            "no approver group",
        ),
        (
            alice.clone(),
            window(&h, Duration::ZERO, Duration::days(31), "carol"),
            "30 days",
        ),
        (
            alice.clone(),
            window(&h, -Duration::days(2), Duration::days(1), "carol"),
            "after now",
        ),
        (
            Approver {
                on_behalf_of: Some(acme("bob")),
                ..alice.clone()
            },
            window(&h, Duration::ZERO, Duration::days(1), "carol"),
            "handed on",
        ),
    ] {
        match h.store.delegate(&from, request).await {
            Err(StoreError::AnswerRefused(said)) => assert!(said.contains(why), "{why}: {said}"),
            other => panic!("{why}: {other:?}"),
        }
    }
    assert!(
        h.store
            .delegations(&acme("alice"), 10)
            .await
            .unwrap()
            .is_empty()
    );

    let made = h
        .store
        .delegate(
            &alice,
            window(&h, Duration::ZERO, Duration::days(2), "carol"),
        )
        .await
        .unwrap();
    assert_eq!(
        (made.from.clone(), made.to.clone()),
        (acme("alice"), acme("carol"))
    );
    assert_eq!(made.groups, ["sre"]);
    // Both see it (on either instance); nobody else does.
    assert_eq!(
        h.twin.delegations(&acme("alice"), 10).await.unwrap()[0].id,
        made.id
    );
    assert_eq!(
        h.twin.delegations(&acme("carol"), 10).await.unwrap()[0].id,
        made.id
    );
    assert!(
        h.twin
            .delegations(&acme("bob"), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(h.twin.acting_for(&acme("bob")).await.unwrap().is_empty());
    let acting = h.twin.acting_for(&acme("carol")).await.unwrap();
    assert_eq!(acting.len(), 1);
    let carol = acting[0].approver();
    assert_eq!(carol.on_behalf_of, Some(acme("alice")));

    // Carol answers Dave's four-eyes call for Alice.
    let daves = held_of(&h, &acme("dave"), ApprovalMode::FourEyes, 1).await;
    let (owner, outcome) = h
        .store
        .approver_respond(
            &carol,
            daves,
            json!({"confirmed": true}),
            Some("carol for alice"),
        )
        .await
        .unwrap();
    assert_eq!((owner, outcome), (acme("dave"), RespondOutcome::Recorded));
    // Never Alice's own four-eyes (or quorum) call: that would be Alice approving herself.
    for (mode, approvers) in [(ApprovalMode::FourEyes, 1), (ApprovalMode::FourEyes, 2)] {
        let alices = held_of(&h, &acme("alice"), mode, approvers).await;
        assert!(
            matches!(
                h.store
                    .approver_respond(&carol, alices, json!({"confirmed": true}), None)
                    .await,
                Err(StoreError::FourEyes { .. })
            ),
            "{mode:?} {approvers}"
        );
    }
    // Nor Carol's own call with Alice's groups, under any mode (under `must` she, outside
    // the group, would approve herself).
    let carols = held_of(&h, &acme("carol"), ApprovalMode::Must, 1).await;
    assert!(matches!(
        h.store
            .approver_respond(&carol, carols, json!({"confirmed": true}), None)
            .await,
        Err(StoreError::FourEyes { .. })
    ));
    // And no standing grant rides on an approval for someone away: it would outlive the
    // delegation.
    let daves_next = held_of(&h, &acme("dave"), ApprovalMode::Must, 1).await;
    let grant = grant_request(crate::GrantScope::Tool, Duration::hours(1), None);
    assert!(matches!(
        h.twin
            .approver_respond_with(
                &carol,
                daves_next,
                json!({"confirmed": true}),
                None,
                grant.into()
            )
            .await,
        Err(StoreError::AnswerRefused(_))
    ));
    // Alice and Carol-for-Alice are one person toward a quorum, in either order.
    let quorum = held_of(&h, &acme("dave"), ApprovalMode::FourEyes, 2).await;
    h.store
        .approver_respond(&alice, quorum, json!({"confirmed": true}), None)
        .await
        .unwrap();
    let (_, again) = h
        .twin
        .approver_respond(&carol, quorum, json!({"confirmed": true}), None)
        .await
        .unwrap();
    assert!(
        matches!(again, RespondOutcome::Counted { approvals: 1, .. }),
        "{again:?}"
    );
    let (_, done) = h
        .twin
        .approver_respond(&in_sre("bob"), quorum, json!({"confirmed": true}), None)
        .await
        .unwrap();
    assert_eq!(done, RespondOutcome::Recorded);

    // A delegation that starts later acts from then on, and not after it ends.
    let later = h
        .store
        .delegate(
            &in_sre("bob"),
            window(&h, Duration::hours(1), Duration::hours(1), "erin"),
        )
        .await
        .unwrap();
    assert!(h.store.acting_for(&acme("erin")).await.unwrap().is_empty());
    h.clock.advance(Duration::minutes(61));
    assert_eq!(
        h.twin.acting_for(&acme("erin")).await.unwrap()[0].id,
        later.id
    );
    h.clock.advance(Duration::hours(1));
    assert!(h.twin.acting_for(&acme("erin")).await.unwrap().is_empty());

    // Ended early by the delegate (or the delegator); then nobody acts on it, and it cannot
    // be ended again, nor by anyone else.
    assert!(matches!(
        h.store.revoke_delegation(&acme("bob"), made.id).await,
        Err(StoreError::DelegationNotFound { .. })
    ));
    let revoked = h
        .twin
        .revoke_delegation(&acme("carol"), made.id)
        .await
        .unwrap();
    assert_eq!(revoked.revoked_by.as_deref(), Some("carol"));
    assert!(h.store.acting_for(&acme("carol")).await.unwrap().is_empty());
    assert!(matches!(
        h.store.revoke_delegation(&acme("alice"), made.id).await,
        Err(StoreError::DelegationNotFound { .. })
    ));
    assert_eq!(
        h.store.delegations(&acme("alice"), 10).await.unwrap()[0].status_at(h.clock_now()),
        "revoked"
    );

    let reader = acme("auditor");
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
    let of_it: Vec<(&str, &str, &Value)> = trail
        .iter()
        .filter(|e| e.detail["delegation"] == made.id.to_string())
        .map(|e| (e.event.as_str(), e.caller.as_str(), &e.detail))
        .collect();
    assert!(
        of_it
            .iter()
            .any(|(event, by, d)| *event == "delegation_created"
                && *by == "alice"
                && d["from"] == "alice"
                && d["to"] == "carol"),
        "{of_it:?}"
    );
    assert!(
        of_it
            .iter()
            .any(|(event, by, d)| *event == "delegation_revoked"
                && *by == "carol"
                && d["revoked_by"] == "carol"
                && d["from"] == "alice"),
        "{of_it:?}"
    );
}
