use serde_json::json;
use time::macros::datetime;

use super::*;
use crate::{ElicitationSpec, Problem, ResponseSpec};

const T0: OffsetDateTime = datetime!(2026-11-30 10:00:00.123456789 UTC);

fn later(seconds: i64) -> OffsetDateTime {
    T0 + Duration::seconds(seconds)
}

fn confirmation() -> Elicitation {
    let spec = ElicitationSpec::confirmation("Delete the file?").unwrap();
    Elicitation::new(
        ElicitationId::v7(T0, [1; 10]),
        spec,
        T0,
        Duration::minutes(10),
    )
}

fn single_choice() -> Elicitation {
    let spec = ElicitationSpec::new(
        "Pick a colour",
        ResponseSpec::SingleChoice {
            options: vec!["red".into(), "blue".into()],
        },
    )
    .unwrap();
    Elicitation::new(
        ElicitationId::v7(T0, [2; 10]),
        spec,
        T0,
        Duration::minutes(10),
    )
}

#[test]
fn new_elicitations_are_pending_with_microsecond_timestamps() {
    let e = confirmation();
    assert_eq!(e.status, ElicitationStatus::Pending);
    assert_eq!(e.created_at, datetime!(2026-11-30 10:00:00.123456 UTC));
    assert_eq!(e.expires_at, datetime!(2026-11-30 10:10:00.123456 UTC));
    assert_eq!(e.confirmation_state(), None);
}

#[test]
fn invalid_answers_retry_then_go_terminal() {
    let mut e = confirmation();
    let bad = json!({"confirmed": "yes"});
    let outcomes: Vec<_> = (0..3)
        .map(|i| match e.respond(bad.clone(), later(i)).unwrap() {
            RespondOutcome::Invalid {
                retries_left,
                errors,
            } => {
                assert_eq!(errors.len(), 1);
                format!("invalid, {retries_left} left")
            }
            RespondOutcome::ValidationFailed { errors } => {
                assert_eq!(errors.len(), 1);
                "failed".to_owned()
            }
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(outcomes, ["invalid, 2 left", "invalid, 1 left", "failed"]);
    assert_eq!(e.status, ElicitationStatus::ValidationFailed);
    assert_eq!(e.retries, MAX_RETRIES);
    // Terminal: even a valid answer is now refused.
    assert_eq!(
        e.respond(json!({"confirmed": true}), later(4)),
        Err(TransitionError::NotPending {
            id: e.id,
            status: ElicitationStatus::ValidationFailed
        })
    );
}

#[test]
fn a_valid_answer_after_an_invalid_one_is_recorded() {
    let mut e = confirmation();
    assert!(matches!(
        e.respond(json!({}), later(1)),
        Ok(RespondOutcome::Invalid {
            retries_left: 2,
            ..
        })
    ));
    assert_eq!(
        e.respond(json!({"confirmed": true}), later(2)),
        Ok(RespondOutcome::Recorded)
    );
    assert_eq!(
        e.responded_at,
        Some(datetime!(2026-11-30 10:00:02.123456 UTC))
    );
    assert_eq!(e.retries, 1);
}

#[test]
fn identical_resubmit_is_already_recorded_and_changes_nothing() {
    let mut e = confirmation();
    e.respond(json!({"confirmed": true}), later(1)).unwrap();
    let before = e.clone();
    assert_eq!(
        e.respond(json!({"confirmed": true}), later(2)),
        Ok(RespondOutcome::AlreadyRecorded)
    );
    assert_eq!(
        e, before,
        "an idempotent resubmit must not move responded_at"
    );
}

#[test]
fn conflicting_resubmit_is_an_error() {
    let mut e = confirmation();
    e.respond(json!({"confirmed": true}), later(1)).unwrap();
    assert_eq!(
        e.respond(json!({"confirmed": false}), later(2)),
        Err(TransitionError::ConflictingResponse { id: e.id })
    );
    assert_eq!(e.confirmation_state(), Some(true));
}

#[test]
fn answering_a_cancelled_elicitation_is_refused() {
    let mut e = confirmation();
    e.cancel(CancelReason::CancelledByCaller, later(1)).unwrap();
    let refused = Err(TransitionError::NotPending {
        id: e.id,
        status: ElicitationStatus::Cancelled,
    });
    assert_eq!(e.respond(json!({"confirmed": true}), later(2)), refused);
    assert_eq!(
        e.cancel(CancelReason::CancelledByPerson, later(3)),
        refused.map(|_| ())
    );
    assert_eq!(e.cancel_reason, Some(CancelReason::CancelledByCaller));
    assert_eq!(e.confirmation_state(), None);
}

#[test]
fn expired_pending_cannot_be_answered() {
    let mut e = confirmation();
    assert_eq!(e.status_at(later(599)), ElicitationStatus::Pending);
    assert_eq!(e.status_at(later(600)), ElicitationStatus::Expired);
    assert_eq!(
        e.respond(json!({"confirmed": true}), later(600)),
        Err(TransitionError::NotPending {
            id: e.id,
            status: ElicitationStatus::Expired
        })
    );
    assert_eq!(
        e.status,
        ElicitationStatus::Expired,
        "the refusal records the expiry"
    );
    assert!(!e.expire(later(700)), "expiry happens once");
}

#[test]
fn expire_moves_only_due_pending_elicitations() {
    let mut e = confirmation();
    assert!(!e.expire(later(10)));
    assert!(e.expire(later(601)));
    let mut answered = confirmation();
    answered
        .respond(json!({"confirmed": false}), later(1))
        .unwrap();
    assert!(!answered.expire(later(601)));
    assert_eq!(answered.status, ElicitationStatus::Responded);
}

#[test]
fn decline_and_cancel_map_onto_distinguishable_transitions() {
    use ElicitAction::*;
    let cases = [
        (
            ElicitationType::Confirmation,
            Accept,
            Some(json!({"confirmed": true})),
            Answer::Respond(json!({"confirmed": true})),
        ),
        (
            ElicitationType::Confirmation,
            Accept,
            None,
            Answer::Respond(json!({})),
        ),
        (
            ElicitationType::Confirmation,
            Decline,
            None,
            Answer::Respond(json!({"confirmed": false})),
        ),
        (
            ElicitationType::Confirmation,
            Cancel,
            None,
            Answer::Cancel(CancelReason::CancelledByPerson),
        ),
        (
            ElicitationType::SingleChoice,
            Decline,
            None,
            Answer::Cancel(CancelReason::Declined),
        ),
        (
            ElicitationType::StringInput,
            Cancel,
            Some(json!({"value": "x"})),
            Answer::Cancel(CancelReason::CancelledByPerson),
        ),
    ];
    for (kind, action, content, want) in cases {
        assert_eq!(
            Answer::from_action(kind, action, content),
            want,
            "{kind} {action:?}"
        );
    }
}

#[test]
fn applying_answers_records_decline_and_cancel_differently() {
    let mut declined_confirmation = confirmation();
    let answer = Answer::from_action(ElicitationType::Confirmation, ElicitAction::Decline, None);
    assert_eq!(
        declined_confirmation.apply(answer, later(1)),
        Ok(AnswerOutcome::Responded(RespondOutcome::Recorded))
    );
    assert_eq!(declined_confirmation.confirmation_state(), Some(false));

    let mut declined_choice = single_choice();
    let answer = Answer::from_action(ElicitationType::SingleChoice, ElicitAction::Decline, None);
    assert_eq!(
        declined_choice.apply(answer, later(1)),
        Ok(AnswerOutcome::Cancelled(CancelReason::Declined))
    );
    let mut cancelled_choice = single_choice();
    let answer = Answer::from_action(ElicitationType::SingleChoice, ElicitAction::Cancel, None);
    cancelled_choice.apply(answer, later(1)).unwrap();
    assert_eq!(declined_choice.status, ElicitationStatus::Cancelled);
    assert_eq!(cancelled_choice.status, ElicitationStatus::Cancelled);
    assert_ne!(
        declined_choice.cancel_reason,
        cancelled_choice.cancel_reason
    );
}

#[test]
fn confirmation_state_reflects_approval_decline_and_absence() {
    let mut approved = confirmation();
    approved
        .respond(json!({"confirmed": true}), later(1))
        .unwrap();
    let mut declined = confirmation();
    declined
        .respond(json!({"confirmed": false}), later(1))
        .unwrap();
    let mut cancelled = confirmation();
    cancelled
        .cancel(CancelReason::CancelledByPerson, later(1))
        .unwrap();
    let mut choice = single_choice();
    choice.respond(json!({"choice": "red"}), later(1)).unwrap();
    assert_eq!(approved.confirmation_state(), Some(true));
    assert_eq!(declined.confirmation_state(), Some(false));
    assert_eq!(confirmation().confirmation_state(), None);
    assert_eq!(cancelled.confirmation_state(), None);
    assert_eq!(choice.confirmation_state(), None);
}

#[test]
fn an_approved_confirmation_is_consumed_once_before_expiry() {
    let mut e = confirmation();
    assert_eq!(
        e.consume(later(1)),
        Err(TransitionError::NotApproved { id: e.id })
    );
    e.respond(json!({"confirmed": true}), later(1)).unwrap();
    let mut late = e.clone();
    assert_eq!(e.consume(later(2)), Ok(()));
    assert_eq!(
        e.consume(later(3)),
        Err(TransitionError::AlreadyConsumed { id: e.id })
    );
    assert_eq!(
        late.consume(later(600)),
        Err(TransitionError::Expired { id: late.id })
    );

    let mut declined = confirmation();
    declined
        .respond(json!({"confirmed": false}), later(1))
        .unwrap();
    assert_eq!(
        declined.consume(later(2)),
        Err(TransitionError::NotApproved { id: declined.id })
    );
    let mut choice = single_choice();
    assert_eq!(
        choice.consume(later(2)),
        Err(TransitionError::NotAConfirmation {
            id: choice.id,
            kind: ElicitationType::SingleChoice
        })
    );
}

#[test]
fn records_round_trip_through_json() {
    let mut e = single_choice();
    e.respond(json!({"choice": "blue"}), later(5)).unwrap();
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(json["status"], "responded");
    assert_eq!(json["spec"]["response"]["type"], "single_choice");
    let back: Elicitation = serde_json::from_value(json).unwrap();
    assert_eq!(back, e);
}

/// A decline may carry the person's note: recorded apart from the answer, which stays
/// exactly `{"confirmed": false}`. A note on an approval, or one that is not plain text, is an
/// invalid answer (counted as a retry), and other types have no note.
#[test]
fn a_decline_keeps_its_note_apart_from_the_answer() {
    let mut e = confirmation();
    let declined = json!({"confirmed": false, "note": "  use the staging bucket\nthanks "});
    assert_eq!(
        e.respond(declined.clone(), later(1)),
        Ok(RespondOutcome::Recorded)
    );
    assert_eq!(e.response, Some(json!({"confirmed": false})));
    assert_eq!(e.note.as_deref(), Some("use the staging bucket\nthanks"));
    assert_eq!(
        e.respond(declined, later(2)),
        Ok(RespondOutcome::AlreadyRecorded)
    );
    assert_eq!(
        e.respond(json!({"confirmed": false, "note": "other"}), later(3)),
        Ok(RespondOutcome::AlreadyRecorded)
    );
    assert_eq!(
        e.note.as_deref(),
        Some("use the staging bucket\nthanks"),
        "the first note stands"
    );
    assert!(matches!(
        e.respond(json!({"confirmed": true}), later(3)),
        Err(TransitionError::ConflictingResponse { .. })
    ));

    for (payload, problem) in [
        (
            json!({"confirmed": true, "note": "ok"}),
            Problem::OnlyWithDecline,
        ),
        (
            json!({"confirmed": false, "note": 7}),
            Problem::WrongType {
                expected: crate::Expected::String,
            },
        ),
        (
            json!({"confirmed": false, "note": "  "}),
            Problem::TooShort { min: 1 },
        ),
        (
            json!({"confirmed": false, "note": "x".repeat(1001)}),
            Problem::TooLong { max: 1000 },
        ),
        (
            json!({"confirmed": false, "note": "a\u{1b}[2Jb"}),
            Problem::ControlCharacters,
        ),
    ] {
        let mut e = confirmation();
        match e.respond(payload.clone(), later(1)) {
            Ok(RespondOutcome::Invalid { errors, .. }) => {
                assert_eq!(errors.len(), 1, "{payload}");
                assert_eq!(errors[0].field.as_deref(), Some("note"));
                assert_eq!(errors[0].problem, problem, "{payload}");
            }
            other => panic!("{payload}: {other:?}"),
        }
        assert_eq!(e.status, ElicitationStatus::Pending);
        assert_eq!(e.note, None);
    }
    let mut choice = single_choice();
    assert!(matches!(
        choice.respond(json!({"choice": "red", "note": "x"}), later(1)),
        Ok(RespondOutcome::Invalid { .. })
    ));
}
