//! Answering an elicitation in one guarded statement: as its caller or as an approver, and
//! why an answer was refused.

use super::*;
use crate::{Approval, Count, Vote};

/// How often an approval of a quorum is counted again after losing a race to another.
const MAX_QUORUM_ROUNDS: usize = 16;

/// The approval that completes a quorum: counted against `counted` approvals.
pub(super) struct QuorumStep {
    /// How many approvals the row had when this one was counted.
    counted: i32,
    /// This approval, as a one-element JSON array.
    vote: Value,
}

impl PostgresStore {
    /// Records an answer to `caller`'s elicitation `id` by the caller itself, or by
    /// `approver` (the SQL holds the approval rule too, whatever was checked before); with
    /// a [`QuorumStep`], the approval that completes a quorum, counted against exactly the
    /// approvals it read.
    // Long: one guarded statement and the reading of each of its outcomes, which share the row
    // it returned.
    pub(super) async fn respond_guarded(
        &self,
        caller: &Caller,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
        approver: Option<(&Approver, Option<&QuorumStep>)>,
        with: Option<AnswerWith>,
    ) -> Result<(RespondOutcome, Option<Grant>), StoreError> {
        let (approver, step) = match approver {
            Some((approver, step)) => (Some(approver), step),
            None => (None, None),
        };
        let now = self.now();
        if let Some(with) = &with {
            crate::grant::check_with_answer(&payload, with)?;
        }
        let groups = approver.map(|a| Value::from(a.groups.clone()));
        let approver_subject = approver.map(|a| a.caller.subject_id());
        let approver_tenant = approver.and_then(|a| a.caller.tenant_id());
        let answered_by = answered_by.map(elicitation_core::answered_by);
        let spec = self.spec_of(caller, id).await?;
        let key = (id.as_uuid(), caller.subject_id(), tenant_param(caller));
        let mut payload = payload;
        let note = elicitation_core::take_note(&spec, &mut payload);
        match elicitation_core::with_note(validate_response(&spec, &payload), note) {
            Ok(note) => {
                let note = note
                    .map(|note| {
                        self.keys.seal(
                            note.as_bytes(),
                            SealContext {
                                column: NOTE,
                                id,
                                caller,
                                call: None,
                            },
                        )
                    })
                    .transpose()?;
                let plaintext =
                    serde_json::to_vec(&payload).map_err(|e| StoreError::Backend(Box::new(e)))?;
                let sealed = self.keys.seal(
                    &plaintext,
                    SealContext {
                        column: RESPONSE,
                        id,
                        caller,
                        call: None,
                    },
                )?;
                let confirmed = (spec.kind() == ElicitationType::Confirmation)
                    .then(|| payload.get("confirmed").and_then(Value::as_bool))
                    .flatten();
                let note_blob = note.as_ref().map(|n| n.blob.as_slice());
                let note_key = note.as_ref().map(|n| n.key_id.as_str());
                let answer: [&(dyn ToSql + Sync); 13] = [
                    key.0,
                    &key.1,
                    &key.2,
                    &sealed.blob,
                    &sealed.key_id,
                    &confirmed,
                    &now,
                    &answered_by,
                    &groups,
                    &approver_subject,
                    &approver_tenant,
                    &note_blob,
                    &note_key,
                ];
                if let Some(AnswerWith::Arguments(arguments)) = &with {
                    let raw = self.select_one(caller, id).await?;
                    if raw.tool().is_none() {
                        return Err(crate::grant::not_a_held_call(&AnswerWith::Arguments(
                            Value::Null,
                        )));
                    }
                    let plaintext = serde_json::to_vec(arguments)
                        .map_err(|e| StoreError::Backend(Box::new(e)))?;
                    let edited = self.keys.seal(
                        &plaintext,
                        SealContext {
                            column: row::EDITED,
                            id,
                            caller,
                            call: None,
                        },
                    )?;
                    let digest = gating_core::CallDigest::of(arguments);
                    let digest = digest.as_bytes().as_slice();
                    let mut params: Vec<&(dyn ToSql + Sync)> = answer.to_vec();
                    params.extend_from_slice(&[&edited.blob, &edited.key_id, &digest]);
                    let rows = self
                        .scoped(caller, sql::RESPOND_VALID_EDITING, &params)
                        .await?;
                    if rows.first().map(|r| r.get::<_, i64>(0)) == Some(1) {
                        audit::emit(Event::Responded, caller, id, None);
                        return Ok((RespondOutcome::Recorded, None));
                    }
                } else if let Some(AnswerWith::Grant(request)) = with {
                    let granter = approver.map_or(caller, |a| &a.caller);
                    let made = self
                        .respond_granting_row(
                            caller,
                            id,
                            granter,
                            answered_by.as_deref(),
                            request,
                            now,
                            &answer,
                        )
                        .await?;
                    if let Some(made) = made {
                        audit::emit(Event::Responded, caller, id, None);
                        return Ok((RespondOutcome::Recorded, made));
                    }
                } else if let Some(step) = step {
                    let mut params: Vec<&(dyn ToSql + Sync)> = answer.to_vec();
                    params.extend_from_slice(&[&step.counted, &step.vote]);
                    let rows = self
                        .scoped(caller, sql::RESPOND_VALID_QUORUM, &params)
                        .await?;
                    if rows.first().map(|r| r.get::<_, i64>(0)) == Some(1) {
                        audit::emit(Event::Responded, caller, id, None);
                        return Ok((RespondOutcome::Recorded, None));
                    }
                } else {
                    let rows = self.scoped(caller, sql::RESPOND_VALID, &answer).await?;
                    if rows.first().map(|r| r.get::<_, i64>(0)) == Some(1) {
                        audit::emit(Event::Responded, caller, id, None);
                        return Ok((RespondOutcome::Recorded, None));
                    }
                }
            }
            Err(errors) => {
                let max = i16::from(MAX_RETRIES);
                let rows = self
                    .scoped(
                        caller,
                        sql::RESPOND_INVALID,
                        &[
                            key.0,
                            &key.1,
                            &key.2,
                            &max,
                            &now,
                            &groups,
                            &approver_subject,
                            &approver_tenant,
                        ],
                    )
                    .await?;
                if let Some(row) = rows.first() {
                    let retries: i16 = row.get(0);
                    let status: &str = row.get(1);
                    if status == ElicitationStatus::ValidationFailed.as_str() {
                        audit::emit(Event::ValidationFailed, caller, id, None);
                        return Ok((RespondOutcome::ValidationFailed { errors }, None));
                    }
                    let used = u8::try_from(retries).unwrap_or(MAX_RETRIES);
                    return Ok((
                        RespondOutcome::Invalid {
                            errors,
                            retries_left: MAX_RETRIES.saturating_sub(used),
                        },
                        None,
                    ));
                }
            }
        }
        self.refused_respond(caller, id, payload, now, approver)
            .await
            .map(|outcome| (outcome, None))
    }

    /// The row of confirmation `id` as `approver` reads it (its groups answer it), with its
    /// caller.
    pub(super) async fn approver_row(
        &self,
        approver: &Approver,
        id: ElicitationId,
    ) -> Result<row::RawRow, StoreError> {
        let rows = self
            .scoped_approver(approver, sql::APPROVER_ONE, &[id.as_uuid()])
            .await?;
        let row = rows.first().ok_or(StoreError::NotFound { id })?;
        decode(row, &self.keys)
    }

    /// Answers another caller's confirmation as `approver` (the rule checked here and held
    /// again by the SQL), with a grant or not.
    pub(super) async fn approver_answer(
        &self,
        approver: &Approver,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
        with: Option<AnswerWith>,
    ) -> Result<(Caller, RespondOutcome, Option<Grant>), StoreError> {
        if approver.on_behalf_of.is_some() && matches!(with, Some(AnswerWith::Grant(_))) {
            return Err(crate::delegation::no_grant_by_a_delegate());
        }
        let mut raw = self.approver_row(approver, id).await?;
        let owner = raw.caller.clone();
        // Of concurrent approvals of a quorum, each counted against the approvals it read:
        // one that lost the race reads again (a bounded number of times).
        for _ in 0..MAX_QUORUM_ROUNDS {
            let approval = match raw.approval() {
                Some(a) if a.admits(&owner, approver) => a.clone(),
                Some(a) if a.answered_by_groups(&approver.groups) => {
                    return Err(StoreError::FourEyes { id });
                }
                _ => return Err(StoreError::NotFound { id }),
            };
            if !approval.quorum.is_plural() || !crate::quorum::approves(&payload) {
                let (outcome, grant) = self
                    .respond_guarded(
                        &owner,
                        id,
                        payload,
                        answered_by,
                        Some((approver, None)),
                        with,
                    )
                    .await?;
                return Ok((owner, outcome, grant));
            }
            if with.is_some() {
                return Err(approval.refuse_with());
            }
            let now = self.now();
            if as_seen(raw.elicitation.clone(), now).status != ElicitationStatus::Pending {
                let outcome = self
                    .refused_respond(&owner, id, payload, now, Some(approver))
                    .await?;
                return Ok((owner, outcome, None));
            }
            let vote = approval.vote(approver, now, answered_by);
            let counted = i32::try_from(raw.votes().len()).unwrap_or(i32::MAX);
            let outcome = match approval.count(raw.votes(), vote.clone()) {
                Count::Already => return Ok((owner, approval.counted(raw.votes()), None)),
                Count::NotNeeded => return Err(approval.not_needed(raw.votes())),
                Count::Complete(_) => {
                    let step = QuorumStep {
                        counted,
                        vote: crate::quorum::votes_json(std::slice::from_ref(&vote)),
                    };
                    match self
                        .respond_guarded(
                            &owner,
                            id,
                            payload.clone(),
                            answered_by,
                            Some((approver, Some(&step))),
                            None,
                        )
                        .await
                    {
                        // Counted against approvals that changed meanwhile.
                        Err(StoreError::Conflict(_)) => None,
                        other => Some(other.map(|(outcome, _)| outcome)?),
                    }
                }
                Count::Counted(votes) => self
                    .count_approval(&owner, approver, id, counted, &vote, &approval, now)
                    .await?
                    .then(|| approval.counted(&votes)),
            };
            match outcome {
                Some(outcome) => return Ok((owner, outcome, None)),
                None => raw = self.approver_row(approver, id).await?,
            }
        }
        Err(StoreError::Conflict(
            "too many approvals of this call at once; answer again".into(),
        ))
    }

    /// Counts `vote` toward the quorum of `owner`'s confirmation `id`, if it still has
    /// exactly `counted` approvals and is pending: `false` when it changed meanwhile.
    #[allow(clippy::too_many_arguments)]
    async fn count_approval(
        &self,
        owner: &Caller,
        approver: &Approver,
        id: ElicitationId,
        counted: i32,
        vote: &Vote,
        approval: &Approval,
        now: OffsetDateTime,
    ) -> Result<bool, StoreError> {
        let groups = Value::from(approver.groups.clone());
        let tenant = tenant_param(owner);
        let approver_tenant = approver.caller.tenant_id();
        let one = crate::quorum::votes_json(std::slice::from_ref(vote));
        let needed = i32::try_from(approval.quorum.needed()).unwrap_or(i32::MAX);
        let rows = self
            .scoped(
                owner,
                sql::COUNT_APPROVAL,
                &[
                    id.as_uuid(),
                    &owner.subject_id(),
                    &tenant,
                    &now,
                    &counted,
                    &one,
                    &groups,
                    &approver.caller.subject_id(),
                    &approver_tenant,
                    &vote.by,
                    &needed,
                ],
            )
            .await?;
        let done = rows.first().map(|r| r.get::<_, i64>(0)) == Some(1);
        if done {
            audit::emit(Event::Counted, owner, id, None);
        }
        Ok(done)
    }

    /// After a guarded update matched nothing: explain why from the row as it is now.
    pub(super) async fn refused_respond(
        &self,
        caller: &Caller,
        id: ElicitationId,
        payload: Value,
        now: OffsetDateTime,
        approver: Option<&Approver>,
    ) -> Result<RespondOutcome, StoreError> {
        let raw = self.select_one(caller, id).await?;
        match (raw.approval(), approver) {
            (Some(a), None) if !a.caller_may_answer() => {
                return Err(StoreError::ApproverRequired {
                    id,
                    group: a.group.clone(),
                });
            }
            (Some(a), Some(approver)) if !a.admits(caller, approver) => {
                return Err(StoreError::FourEyes { id });
            }
            (None, Some(_)) => return Err(StoreError::NotFound { id }),
            _ => {}
        }
        let mut current = as_seen(raw.elicitation, now);
        match current.respond(payload, now)? {
            RespondOutcome::AlreadyRecorded => Ok(RespondOutcome::AlreadyRecorded),
            // The row is pending after all: it changed under us in a way the guard did not
            // expect. Report a conflict rather than guess.
            _ => Err(StoreError::Conflict(
                "elicitation changed during respond".into(),
            )),
        }
    }
}
