//! Chasing a waiting elicitation: each reminder and escalation is audited, as its caller's.

use super::*;
use crate::{AuditQuery, NoticeStep};

/// A step taken is an audit row of the held call's caller, with who was told; another
/// tenant's reader does not see it.
pub(crate) async fn a_reminder_and_an_escalation_are_audited_as_the_callers(
    make: impl AsyncFn(Setup) -> Harness,
) {
    let h = make(Setup::default()).await;
    let id = h
        .store
        .create_confirmation(&alice(), request("fs__delete", json!({"path": "/a"})))
        .await
        .unwrap()
        .elicitation
        .id;
    for (step, detail) in [
        (
            NoticeStep::Reminder,
            json!({"sinks": ["team"], "waited_minutes": 15, "to": []}),
        ),
        (
            NoticeStep::Escalation,
            json!({"sinks": ["leads"], "waited_minutes": 45, "to": ["sre-leads"]}),
        ),
    ] {
        h.twin
            .record_step(&alice(), id, Some("fs__delete"), step, detail)
            .await
            .unwrap();
    }
    let read = async |reader: Caller| {
        h.store
            .audit_events(
                &reader,
                &AuditQuery {
                    limit: 100,
                    ..AuditQuery::default()
                },
            )
            .await
            .unwrap()
            .entries
    };
    let trail = read(Caller::new("auditor", Some("acme".into())).unwrap()).await;
    let steps: Vec<(&str, &str, &Value)> = trail
        .iter()
        .filter(|e| e.event == "elicitation_reminded" || e.event == "elicitation_escalated")
        .map(|e| (e.event.as_str(), e.caller.as_str(), &e.detail))
        .collect();
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert!(steps.iter().all(|(_, caller, _)| *caller == "alice"));
    assert!(
        steps
            .iter()
            .any(|(e, _, d)| *e == "elicitation_escalated" && d["to"] == json!(["sre-leads"])),
        "{steps:?}"
    );
    let elsewhere = read(Caller::new("auditor", Some("globex".into())).unwrap()).await;
    assert!(
        !elsewhere
            .iter()
            .any(|e| e.event == "elicitation_reminded" || e.event == "elicitation_escalated"),
        "another tenant's reader sees none of it"
    );
}
