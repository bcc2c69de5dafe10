//! Reading rows back into core types: Postgres enums become Rust enums, sealed columns are
//! opened, and anything unexpected is a typed `Corrupt` error rather than a panic.

use elicitation_core::{
    CancelReason, Elicitation, ElicitationId, ElicitationSpec, ElicitationStatus, ResponseSpec,
};
use gating_core::CallDigest;
use serde_json::Value;
use time::OffsetDateTime;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::quorum::votes_from_json as quorum_votes;
use crate::seal::{KeyRing, SealContext, Sealed};
use crate::{
    Approval, ApprovalMode, Caller, HeldCall, Quorum, StoreError, StoredElicitation, Vote,
};

pub(super) const REQUEST: &str = "request";
pub(super) const RESPONSE: &str = "response";
pub(super) const MESSAGE: &str = "message";
pub(super) const NOTE: &str = "note";
/// The seal context column of the arguments a person approved instead of the agent's.
pub(super) const EDITED: &str = "edited_arguments";

/// A row as read, before its sealed columns are opened.
pub(super) struct RawRow {
    pub(super) caller: Caller,
    pub(super) elicitation: Elicitation,
    approval: Option<Approval>,
    votes: Vec<Vote>,
    tool: Option<String>,
    digest: Option<Vec<u8>>,
    definition: Option<Vec<u8>>,
    server: Option<String>,
    request: Option<Sealed>,
}

fn corrupt(id: ElicitationId, reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        id,
        reason: reason.into(),
    }
}

fn sealed(blob: Option<Vec<u8>>, key_id: Option<String>) -> Option<Sealed> {
    Some(Sealed {
        blob: blob?,
        key_id: key_id?,
    })
}

fn open_json(
    keys: &KeyRing,
    sealed: &Sealed,
    context: SealContext<'_>,
) -> Result<Value, StoreError> {
    let bytes = keys.open(sealed, context)?;
    serde_json::from_slice(&bytes)
        .map_err(|e| corrupt(context.id, format!("{} is not JSON: {e}", context.column)))
}

/// Decodes a row selected with `columns!()`, opening its response.
// Long: one column after another of a row, each opened or parsed in place.
pub(super) fn decode(row: &Row, keys: &KeyRing) -> Result<RawRow, StoreError> {
    let get_err = |e: tokio_postgres::Error| StoreError::Backend(Box::new(e));
    let id = ElicitationId::from_uuid(row.try_get::<_, Uuid>("id").map_err(get_err)?);
    let subject: String = row.try_get("caller_subject").map_err(get_err)?;
    let tenant: Option<String> = row.try_get("caller_tenant").map_err(get_err)?;
    let caller =
        Caller::new(subject, tenant).map_err(|_| corrupt(id, "caller ids out of bounds"))?;
    let status: ElicitationStatus = row
        .try_get::<_, &str>("status")
        .map_err(get_err)?
        .parse()
        .map_err(|e| corrupt(id, format!("{e}")))?;
    let spec_json: Value = row.try_get("spec").map_err(get_err)?;
    let response_spec: ResponseSpec =
        serde_json::from_value(spec_json).map_err(|e| corrupt(id, format!("spec: {e}")))?;
    let kind: &str = row.try_get("type").map_err(get_err)?;
    if kind != response_spec.kind().as_str() {
        return Err(corrupt(id, format!("type {kind} disagrees with its spec")));
    }
    // Sealed since migration V3; rows written before it hold the message in clear.
    let message = match sealed(
        row.try_get("message_sealed").map_err(get_err)?,
        row.try_get("message_key_id").map_err(get_err)?,
    ) {
        Some(s) => {
            let bytes = keys.open(
                &s,
                SealContext {
                    column: MESSAGE,
                    id,
                    caller: &caller,
                    call: None,
                },
            )?;
            String::from_utf8(bytes).map_err(|_| corrupt(id, "message is not UTF-8"))?
        }
        None => row
            .try_get::<_, Option<String>>("message")
            .map_err(get_err)?
            .ok_or_else(|| corrupt(id, "no message"))?,
    };
    let spec = ElicitationSpec::new(message, response_spec)
        .map_err(|e| corrupt(id, format!("spec: {e}")))?;
    let retries: i16 = row.try_get("retries").map_err(get_err)?;
    let cancel_reason = row
        .try_get::<_, Option<&str>>("cancel_reason")
        .map_err(get_err)?
        .map(str::parse::<CancelReason>)
        .transpose()
        .map_err(|e| corrupt(id, format!("{e}")))?;
    let response = match sealed(
        row.try_get("response_sealed").map_err(get_err)?,
        row.try_get("response_key_id").map_err(get_err)?,
    ) {
        Some(s) => Some(open_json(
            keys,
            &s,
            SealContext {
                column: RESPONSE,
                id,
                caller: &caller,
                call: None,
            },
        )?),
        None => None,
    };
    let note = match sealed(
        row.try_get("note_sealed").map_err(get_err)?,
        row.try_get("note_key_id").map_err(get_err)?,
    ) {
        Some(s) => {
            let context = SealContext {
                column: NOTE,
                id,
                caller: &caller,
                call: None,
            };
            let bytes = keys.open(&s, context)?;
            Some(String::from_utf8(bytes).map_err(|_| corrupt(id, "the note is not text"))?)
        }
        None => None,
    };
    let edited_arguments = match sealed(
        row.try_get("edited_sealed").map_err(get_err)?,
        row.try_get("edited_key_id").map_err(get_err)?,
    ) {
        Some(s) => Some(open_json(
            keys,
            &s,
            SealContext {
                column: EDITED,
                id,
                caller: &caller,
                call: None,
            },
        )?),
        None => None,
    };
    let time = |name: &str| row.try_get::<_, OffsetDateTime>(name).map_err(get_err);
    let maybe_time = |name: &str| {
        row.try_get::<_, Option<OffsetDateTime>>(name)
            .map_err(get_err)
    };
    let elicitation = Elicitation {
        id,
        spec,
        status,
        retries: u8::try_from(retries).map_err(|_| corrupt(id, "retries out of range"))?,
        response,
        created_at: time("created_at")?,
        expires_at: time("expires_at")?,
        responded_at: maybe_time("responded_at")?,
        cancelled_at: maybe_time("cancelled_at")?,
        cancel_reason,
        consumed_at: maybe_time("consumed_at")?,
        answered_by: row
            .try_get("answered_by")
            .map_err(|e| StoreError::Backend(Box::new(e)))?,
        note,
        edited_arguments,
    };
    let approval = match (
        row.try_get::<_, Option<String>>("approver_group")
            .map_err(get_err)?,
        row.try_get::<_, Option<String>>("approval_mode")
            .map_err(get_err)?,
    ) {
        (Some(group), Some(mode)) => Some(Approval {
            group,
            mode: ApprovalMode::from_label(&mode)
                .ok_or_else(|| corrupt(id, format!("unknown approval mode {mode:?}")))?,
            quorum: Quorum {
                approvers: u8::try_from(row.try_get::<_, i16>("approval_quorum").map_err(get_err)?)
                    .map_err(|_| corrupt(id, "approval quorum out of range"))?,
                also: row.try_get("approver_also").map_err(get_err)?,
            },
        }),
        (None, None) => None,
        _ => return Err(corrupt(id, "an approval is only partly stored")),
    };
    let votes = quorum_votes(&row.try_get::<_, Value>("approvals").map_err(get_err)?)
        .ok_or_else(|| corrupt(id, "the counted approvals are malformed"))?;
    Ok(RawRow {
        caller,
        elicitation,
        approval,
        votes,
        tool: row.try_get("tool_name").map_err(get_err)?,
        digest: row.try_get("call_digest").map_err(get_err)?,
        definition: row.try_get("definition_digest").map_err(get_err)?,
        server: row.try_get("server_name").map_err(get_err)?,
        request: sealed(
            row.try_get("request_sealed").map_err(get_err)?,
            row.try_get("request_key_id").map_err(get_err)?,
        ),
    })
}

impl RawRow {
    pub(super) fn tool(&self) -> Option<&str> {
        self.tool.as_deref()
    }

    /// The digest of the held call's arguments, as stored.
    pub(super) fn digest(&self) -> Option<&[u8]> {
        self.digest.as_deref()
    }

    /// Who answers the confirmation besides, or instead of, its caller.
    pub(super) fn approval(&self) -> Option<&Approval> {
        self.approval.as_ref()
    }

    /// The approvals counted so far toward the approval's quorum.
    pub(super) fn votes(&self) -> &[Vote] {
        &self.votes
    }

    /// The full stored elicitation, opening the held call's arguments.
    pub(super) fn into_stored(self, keys: &KeyRing) -> Result<StoredElicitation, StoreError> {
        let id = self.elicitation.id;
        let call = match (self.tool, self.digest, self.request) {
            (Some(tool), Some(digest), Some(request)) => {
                let digest: [u8; 32] = digest
                    .try_into()
                    .map_err(|_| corrupt(id, "call digest is not 32 bytes"))?;
                let digest = CallDigest::from_bytes(digest);
                let definition = match self.definition {
                    Some(bytes) => {
                        Some(CallDigest::from_bytes(bytes.try_into().map_err(|_| {
                            corrupt(id, "definition digest is not 32 bytes")
                        })?))
                    }
                    None => None,
                };
                let context = SealContext {
                    column: REQUEST,
                    id,
                    caller: &self.caller,
                    call: Some((tool.as_str(), &digest, definition.as_ref())),
                };
                let arguments = open_json(keys, &request, context)?;
                if CallDigest::of(&arguments) != digest {
                    return Err(corrupt(
                        id,
                        "the held arguments do not match the stored call digest",
                    ));
                }
                Some(HeldCall {
                    tool,
                    digest,
                    definition,
                    arguments,
                    approval: self.approval,
                    votes: self.votes,
                    server: self.server,
                })
            }
            (None, None, None) => None,
            _ => return Err(corrupt(id, "a held call is only partly stored")),
        };
        Ok(StoredElicitation {
            elicitation: self.elicitation,
            call,
        })
    }
}
