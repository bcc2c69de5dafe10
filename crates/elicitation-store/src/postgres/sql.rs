//! Every SQL statement of the Postgres store. Caller-scoped statements run after
//! [`SET_CALLER`] in the same transaction, so row-level security sees the caller too.

/// The columns of an elicitation row that `row::decode` reads, but when it was consumed.
macro_rules! columns_but_consumed {
    () => {
        "id, caller_subject, caller_tenant, type::text AS type, status::text AS status, message, \
         message_sealed, message_key_id, spec, \
         tool_name, call_digest, request_sealed, request_key_id, response_sealed, response_key_id, \
         retries, created_at, expires_at, responded_at, cancelled_at, \
         cancel_reason::text AS cancel_reason, answered_by, approver_group, approval_mode, \
         note_sealed, note_key_id, edited_sealed, edited_key_id, definition_digest, \
         approval_quorum, approver_also, approvals, server_name"
    };
}

/// When the elicitation row `$row` (a table name or alias in scope) was redeemed (V33: a
/// row of `mcp_redemptions`, not the wide row's own `consumed_at`), NULL if it was not.
macro_rules! redeemed_at {
    ($row:literal) => {
        concat!(
            "(SELECT r.consumed_at FROM mcp_redemptions r WHERE r.elicitation_id = ",
            $row,
            ".id)"
        )
    };
}

/// The columns of an elicitation row that `row::decode` reads.
macro_rules! columns {
    () => {
        concat!(
            columns_but_consumed!(),
            ", ",
            redeemed_at!("mcp_elicitations"),
            " AS consumed_at"
        )
    };
}

/// `$1` subject, `$2` tenant (`''` for none), `$3` approver groups (a JSON array, `''` for
/// none): the transaction's row-level security scope.
pub(super) const SET_CALLER: &str = "SELECT set_config('mcp.caller_subject', $1, true), set_config('mcp.caller_tenant', $2, true), set_config('mcp.approver_groups', $3, true)";

/// The caller filter, `$2` subject and `$3` tenant (NULL for none), where the caller's rows
/// are searched through an index that names the caller first; a row found by its id takes
/// [`row_of_caller!`].
macro_rules! caller_is {
    () => {
        "caller_subject = $2 AND caller_tenant IS NOT DISTINCT FROM $3::text"
    };
}

/// The caller filter of a row found by its id (`$1`): `$2` subject and `$3` tenant compared
/// as a pair, which no index serves, so the planner finds the row by its primary key
/// whatever the statistics say. As [`caller_is!`] a generic plan could choose the index of
/// the caller's rows and read every one of them for each answer (3–5 ms an answer for a
/// caller with 15,000 rows in `mcp-bench confirmed`, measured). The same rows match: the
/// subject is never NULL.
macro_rules! row_of_caller {
    () => {
        "(caller_subject, caller_tenant) IS NOT DISTINCT FROM ($2::text, $3::text)"
    };
}

/// Audit row for each row of CTE `changed` (which returns `id` and `tool_name`).
macro_rules! audit_from_changed {
    ($at:literal, $event:literal, $detail:literal) => {
        concat!(
            "audit AS (INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, elicitation_id, tool_name, detail) ",
            "SELECT ", $at, ", '", $event, "', $2, $3::text, id, tool_name, ", $detail, " FROM changed) "
        )
    };
}

/// Creates a row unless the caller already has `$13` pending elicitations. `$5` is the
/// sealed message and `$14` its key id; `$17` the detail of a confirmation's
/// `tool_call_held` (the deciding rule and policy); `$18` the held tool's definition digest;
/// `$19` the approvers a quorum needs (1 without one), `$20` its further groups, `$21` the
/// virtual server a held call was made on (V29).
/// Returns the number inserted (0 or 1).
pub(super) const INSERT: &str = concat!(
    "WITH changed AS (",
    "INSERT INTO mcp_elicitations (id, caller_subject, caller_tenant, type, message_sealed, message_key_id, spec, tool_name, call_digest, request_sealed, request_key_id, created_at, expires_at, approver_group, approval_mode, definition_digest, approval_quorum, approver_also, server_name) ",
    "SELECT $1, $2, $3::text, $4::text::mcp_elicitation_type, $5, $14, $6, $7, $8, $9, $10, $11, $12, $15::text, $16::text, $18, $19::smallint, $20::text[], $21::text ",
    "WHERE (SELECT count(*) FROM mcp_elicitations WHERE ",
    caller_is!(),
    " AND status = 'pending' AND expires_at > $11) < $13 ",
    "RETURNING id, tool_name), ",
    audit_from_changed!(
        "$11",
        "elicitation_requested",
        "jsonb_build_object('type', $4::text)"
    ),
    ", held AS (INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, elicitation_id, tool_name, detail) ",
    "SELECT $11, 'tool_call_held', $2, $3::text, id, tool_name, $17::jsonb FROM changed WHERE tool_name IS NOT NULL) ",
    "SELECT count(*) FROM changed"
);

pub(super) const SELECT_ONE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM mcp_elicitations WHERE id = $1 AND ",
    row_of_caller!()
);

pub(super) const SELECT_SPEC: &str = concat!(
    "SELECT spec FROM mcp_elicitations WHERE id = $1 AND ",
    row_of_caller!()
);

/// `$1` subject, `$2` tenant, `$3` status filter (NULL for all) on the status as seen at
/// `$4`, `$5` limit.
pub(super) const LIST: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM mcp_elicitations WHERE caller_subject = $1 AND caller_tenant IS NOT DISTINCT FROM $2::text",
    " AND ($3::text IS NULL OR (CASE WHEN status = 'pending' AND expires_at <= $4 THEN 'expired' ELSE status::text END) = $3::text)",
    " ORDER BY created_at DESC, id DESC LIMIT $5"
);

/// Who may answer: with `$a` NULL, the caller itself (rows without an approval, or whose
/// approval lets the caller answer); else an approver whose groups are the JSON array `$a`,
/// with subject `$s` and tenant `$t` (never the caller of a four-eyes row).
macro_rules! answerer_may {
    ($a:literal, $s:literal, $t:literal) => {
        concat!(
            " AND (CASE WHEN ",
            $a,
            "::jsonb IS NULL THEN (approval_mode IS NULL OR (approval_mode = 'may' AND approval_quorum = 1 AND cardinality(approver_also) = 0)) ",
            "ELSE ((approver_group IN (SELECT jsonb_array_elements_text(",
            $a,
            "::jsonb)) OR approver_also && array(SELECT jsonb_array_elements_text(",
            $a,
            "::jsonb))) ",
            "AND NOT ((approval_mode = 'four_eyes' OR approval_quorum > 1 OR cardinality(approver_also) > 0) AND caller_subject = ",
            $s,
            "::text AND caller_tenant IS NOT DISTINCT FROM ",
            $t,
            "::text)) END)"
        )
    };
}

/// The update that records a valid answer and its audit row (see [`RESPOND_VALID`]).
macro_rules! respond_valid {
    () => {
        respond_valid!(
            "",
            "jsonb_strip_nulls(jsonb_build_object('confirmed', $6::boolean, 'answered_by', $8::text))"
        )
    };
    ($set:literal, $detail:literal) => {
        // Never the approval of a row several people must approve: that is counted
        // (COUNT_APPROVAL, RESPOND_VALID_QUORUM), whatever the caller of the SQL checked.
        respond_valid!(
            $set,
            $detail,
            " AND ($6::boolean IS NOT TRUE OR (approval_quorum = 1 AND cardinality(approver_also) = 0))"
        )
    };
    ($set:literal, $detail:literal, $guard:literal) => {
        concat!(
            "WITH changed AS (UPDATE mcp_elicitations SET status = 'responded', response_sealed = $4, response_key_id = $5, confirmed = $6, responded_at = $7, answered_by = $8, note_sealed = $12, note_key_id = $13",
            $set,
            " WHERE id = $1 AND ",
            row_of_caller!(),
            answerer_may!("$9", "$10", "$11"),
            $guard,
            " AND status = 'pending' AND expires_at > $7 RETURNING id, tool_name, call_digest, approver_group, approval_mode, approvals), ",
            audit_from_changed!("$7", "elicitation_responded", $detail)
        )
    };
}

/// Records a valid answer: `$4` sealed response, `$5` its key id, `$6` confirmed (NULL
/// unless a confirmation), `$7` now, `$8` who answered (or NULL); `$9`–`$11` the answerer
/// (see `answerer_may!`); `$12`, `$13` a decline's sealed note and its key id (or NULL).
pub(super) const RESPOND_VALID: &str = concat!(respond_valid!(), "SELECT count(*) FROM changed");

/// [`RESPOND_VALID`] for the approval that completes a quorum (V26): `$14` the number of
/// approvals it was counted against (the row must still have exactly those), `$15` this
/// approval (a one-element JSON array), added to them.
pub(super) const RESPOND_VALID_QUORUM: &str = concat!(
    respond_valid!(
        ", approvals = approvals || $15::jsonb",
        "jsonb_strip_nulls(jsonb_build_object('confirmed', $6::boolean, 'answered_by', $8::text, 'approvals', jsonb_array_length(approvals)))",
        " AND jsonb_array_length(approvals) = $14::integer"
    ),
    "SELECT count(*) FROM changed"
);

/// Counts one approval toward a quorum, not the last (V26): `$4` now, `$5` the number of
/// approvals it was counted against (the row must still have exactly those), `$6` this
/// approval (a one-element JSON array); `$7`–`$9` the approver (see `answerer_may!`); `$10`
/// who answered (or NULL), `$11` approvals needed. Returns the number counted (0 or 1).
pub(super) const COUNT_APPROVAL: &str = concat!(
    "WITH changed AS (UPDATE mcp_elicitations SET approvals = approvals || $6::jsonb WHERE id = $1 AND ",
    row_of_caller!(),
    answerer_may!("$7", "$8", "$9"),
    " AND jsonb_array_length(approvals) = $5::integer",
    " AND status = 'pending' AND expires_at > $4 RETURNING id, tool_name, approvals), ",
    audit_from_changed!(
        "$4",
        "elicitation_approval_counted",
        "jsonb_strip_nulls(jsonb_build_object('answered_by', $10::text, 'approvals', jsonb_array_length(approvals), 'needed', $11::integer))"
    ),
    "SELECT count(*) FROM changed"
);

/// [`RESPOND_VALID`] for an approval that makes a grant in the same statement, or neither:
/// `$14` the grant's id, `$15` scope, `$16`/`$17` the sealed digest and its key (scope
/// `call`), `$18`/`$19` the sealed `when` and its key, `$20` the definition digest, `$21`
/// the granter's subject, `$22` its tenant, `$23` expiry, `$24` max uses, `$25` the digest
/// in clear that the row must be bound to (scope `call`; NULL for `tool`).
pub(super) const RESPOND_VALID_GRANTING: &str = concat!(
    respond_valid!(),
    ", granted AS (INSERT INTO mcp_grants (id, elicitation_id, caller_subject, caller_tenant, tool_name, scope, digest_sealed, digest_key_id, when_sealed, when_key_id, definition_digest, approver_group, approval_mode, granted_by, granter_subject, granter_tenant, created_at, expires_at, max_uses) ",
    "SELECT $14, id, $2, $3::text, tool_name, $15::text, $16, $17::text, $18, $19::text, $20::text, approver_group, approval_mode, $8, $21::text, $22::text, $7, $23, $24::integer ",
    "FROM changed WHERE $6::boolean AND tool_name IS NOT NULL AND ($25::bytea IS NULL OR call_digest = $25) RETURNING id, elicitation_id, tool_name), ",
    "grant_audit AS (INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, elicitation_id, tool_name, detail) ",
    "SELECT $7, 'grant_created', $2, $3::text, elicitation_id, tool_name, jsonb_strip_nulls(jsonb_build_object('grant', id::text, 'scope', $15::text, 'expires_at', $23::timestamptz, 'max_uses', $24::integer, 'granted_by', $8::text)) FROM granted) ",
    "SELECT count(*), (SELECT count(*) FROM granted) FROM changed"
);

/// [`RESPOND_VALID`] for an approval with the arguments the person approved instead of the
/// agent's: `$14` sealed, `$15` its key id, `$16` their digest (which the audit row keeps
/// beside the call's).
pub(super) const RESPOND_VALID_EDITING: &str = concat!(
    respond_valid!(
        ", edited_sealed = $14, edited_key_id = $15, edited_digest = $16",
        "jsonb_strip_nulls(jsonb_build_object('confirmed', $6::boolean, 'answered_by', $8::text, 'call_digest', encode(call_digest, 'hex'), 'edited_digest', encode($16::bytea, 'hex')))"
    ),
    "SELECT count(*) FROM changed"
);

/// Counts an invalid answer; the `$4`-th is terminal. `$5` now; `$6`–`$8` the answerer (see
/// `answerer_may!`). Returns retries and status.
pub(super) const RESPOND_INVALID: &str = concat!(
    "WITH changed AS (UPDATE mcp_elicitations SET retries = retries + 1, ",
    "status = CASE WHEN retries + 1 >= $4::smallint THEN 'validation_failed'::mcp_elicitation_status ELSE status END ",
    "WHERE id = $1 AND ",
    row_of_caller!(),
    answerer_may!("$6", "$7", "$8"),
    " AND status = 'pending' AND expires_at > $5 RETURNING id, tool_name, retries, status), ",
    "audit AS (INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, elicitation_id, tool_name, detail) ",
    "SELECT $5, 'elicitation_validation_failed', $2, $3::text, id, tool_name, '{}'::jsonb FROM changed WHERE status = 'validation_failed') ",
    "SELECT retries, status::text FROM changed"
);

/// `$4` reason, `$5` now.
pub(super) const CANCEL: &str = concat!(
    "WITH changed AS (UPDATE mcp_elicitations SET status = 'cancelled', cancel_reason = $4::text::mcp_cancel_reason, cancelled_at = $5 ",
    "WHERE id = $1 AND ",
    row_of_caller!(),
    " AND status = 'pending' AND expires_at > $5 RETURNING ",
    columns!(),
    "), ",
    audit_from_changed!(
        "$5",
        "elicitation_cancelled",
        "jsonb_build_object('reason', $4::text)"
    ),
    "SELECT * FROM changed"
);

/// `$4` tool, `$5` digest, `$6` definition digest, `$7` server.
pub(super) const SELECT_CONFIRMATION: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM mcp_elicitations WHERE id = $1 AND ",
    row_of_caller!(),
    " AND type = 'confirmation' AND tool_name = $4 AND call_digest = $5 AND definition_digest = $6 AND server_name IS NOT DISTINCT FROM $7::text"
);

/// `$1` now, `$4` tool, `$5` digest, `$6` definition digest, `$7` server: the caller's unexpired confirmation of that call that a
/// repeated call takes up — approved and unused first, else declined and not yet reported
/// (V23), else pending; the oldest of each.
pub(super) const CONFIRMATION_FOR: &str = concat!(
    "SELECT id FROM mcp_elicitations WHERE ",
    caller_is!(),
    " AND type = 'confirmation' AND tool_name = $4 AND call_digest = $5 AND definition_digest = $6 AND server_name IS NOT DISTINCT FROM $7::text AND expires_at > $1",
    " AND (status = 'pending' OR (status = 'responded' AND confirmed AND ",
    redeemed_at!("mcp_elicitations"),
    " IS NULL)",
    " OR (status = 'responded' AND confirmed IS FALSE AND reported_at IS NULL))",
    " ORDER BY (status = 'responded' AND confirmed) DESC, (status = 'responded') DESC, created_at, id LIMIT 1"
);

/// `$1` id, `$4` tool, `$5` digest, `$6` now, `$7` definition digest, `$8` server: records once that the
/// caller's declined confirmation of that call was reported to the agent (V23); the row's
/// id when this statement recorded it.
pub(super) const REPORT_DECLINE: &str = concat!(
    "UPDATE mcp_elicitations SET reported_at = $6 WHERE id = $1 AND ",
    row_of_caller!(),
    " AND type = 'confirmation' AND tool_name = $4 AND call_digest = $5 AND definition_digest = $7 AND server_name IS NOT DISTINCT FROM $8::text",
    " AND status = 'responded' AND confirmed IS FALSE AND reported_at IS NULL RETURNING id"
);

/// The caller's confirmation `$1` bound to tool `$4`, digest `$5`, definition digest `$7` and
/// server `$8`, redeemed at `$6` in one statement: a redemption row inserted (and
/// `tool_call_forwarded` recorded) if it is answered, approved, unused and unexpired; either
/// way the row comes back, with `consumed` saying which and `consumed_at` when. A refused
/// redemption returns the row as it was, so the gate decides the answer from it. The
/// redemption's primary key makes it once: a racing second one inserts nothing (V33).
pub(super) const REDEEM: &str = concat!(
    "WITH target AS (SELECT ",
    columns_but_consumed!(),
    ", confirmed FROM mcp_elicitations WHERE id = $1 AND ",
    row_of_caller!(),
    " AND type = 'confirmation' AND tool_name = $4 AND call_digest = $5 AND definition_digest = $7 AND server_name IS NOT DISTINCT FROM $8::text), ",
    // An earlier redemption is not looked up first: the key refuses this one.
    "changed AS (INSERT INTO mcp_redemptions (elicitation_id, consumed_at) SELECT id, $6 FROM target",
    " WHERE status = 'responded' AND confirmed AND expires_at > $6",
    " ON CONFLICT (elicitation_id) DO NOTHING RETURNING elicitation_id, consumed_at), ",
    "audit AS (INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, elicitation_id, tool_name, detail) ",
    "SELECT $6, 'tool_call_forwarded', $2, $3::text, t.id, t.tool_name, '{\"gated\": true}'::jsonb FROM target t JOIN changed c ON c.elicitation_id = t.id) ",
    // When it was redeemed before, read only where this redemption was refused.
    "SELECT t.*, COALESCE(c.consumed_at, ",
    redeemed_at!("t"),
    ") AS consumed_at, ",
    "c.elicitation_id IS NOT NULL AS consumed FROM target t LEFT JOIN changed c ON c.elicitation_id = t.id"
);

/// `$1` elicitation (NULL for none), `$4` tool, `$5` event, `$6` reason (NULL for none),
/// `$7` now: what the gate did with a call it held or refused.
pub(super) const RECORD_GATE: &str = concat!(
    "INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, elicitation_id, tool_name, detail) ",
    "SELECT $7, $5, $2, $3::text, $1, $4, $6::jsonb"
);

/// `$1` times, `$4` elicitations, `$5` tools, `$6` details (jsonb text), one caller's
/// (`$2`, `$3`) `tool_call_completed` rows in one statement, in the order given.
pub(super) const RECORD_COMPLETIONS: &str = concat!(
    "INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, elicitation_id, tool_name, detail) ",
    "SELECT u.at, 'tool_call_completed', $2, $3::text, u.elicitation_id, u.tool_name, u.detail::jsonb ",
    "FROM unnest($1::timestamptz[], $4::uuid[], $5::text[], $6::text[]) WITH ORDINALITY ",
    "AS u(at, elicitation_id, tool_name, detail, n) ORDER BY u.n"
);

/// The columns of a grant row, in the order `grants::decode` reads them.
macro_rules! grant_columns {
    () => {
        "id, elicitation_id, caller_subject, caller_tenant, tool_name, scope, digest_sealed, \
         digest_key_id, when_sealed, when_key_id, definition_digest, approver_group, approval_mode, \
         granted_by, granter_subject, granter_tenant, created_at, expires_at, max_uses, uses, \
         revoked_at, revoked_by"
    };
}

/// `$1` now, `$4` tool: the caller's live grants of the tool, oldest first.
pub(super) const LIVE_GRANTS: &str = concat!(
    "SELECT ",
    grant_columns!(),
    " FROM mcp_grants WHERE ",
    caller_is!(),
    " AND tool_name = $4 AND revoked_at IS NULL AND expires_at > $1",
    " AND (max_uses IS NULL OR uses < max_uses) ORDER BY created_at, id LIMIT 100"
);

/// Uses the caller's grant `$1` for a call of tool `$4` at `$5`, in one statement: counted
/// (and the forwarded call recorded with the grant's id) only if it is live. Returns the
/// grant as counted, or nothing.
pub(super) const USE_GRANT: &str = concat!(
    "WITH changed AS (UPDATE mcp_grants SET uses = uses + 1 WHERE id = $1 AND ",
    row_of_caller!(),
    " AND tool_name = $4 AND revoked_at IS NULL AND expires_at > $5",
    " AND (max_uses IS NULL OR uses < max_uses) RETURNING ",
    grant_columns!(),
    "), audit AS (INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, elicitation_id, tool_name, detail) ",
    "SELECT $5, 'tool_call_forwarded', $2, $3::text, elicitation_id, tool_name, jsonb_build_object('gated', true, 'grant', id::text, 'uses', uses) FROM changed) ",
    "SELECT * FROM changed"
);

/// `$1` subject, `$2` tenant, `$3` limit: the grants the caller holds or made, newest first.
pub(super) const GRANTS: &str = concat!(
    "SELECT ",
    grant_columns!(),
    " FROM mcp_grants WHERE (caller_subject = $1 AND caller_tenant IS NOT DISTINCT FROM $2::text)",
    " OR (granter_subject = $1 AND granter_tenant IS NOT DISTINCT FROM $2::text)",
    " ORDER BY created_at DESC, id DESC LIMIT $3"
);

/// `$1` id, `$2` subject, `$3` tenant: one grant the caller holds or made.
pub(super) const GRANT_ONE: &str = concat!(
    "SELECT ",
    grant_columns!(),
    " FROM mcp_grants WHERE id = $1 AND ((caller_subject = $2 AND caller_tenant IS NOT DISTINCT FROM $3::text)",
    " OR (granter_subject = $2 AND granter_tenant IS NOT DISTINCT FROM $3::text))"
);

/// Revokes grant `$1` of the caller (`$2`, `$3`) at `$4` by `$5` (who, as recorded), if it
/// is live and the revoker (`$6` subject, `$7` tenant) holds or made it; returns it.
pub(super) const REVOKE_GRANT: &str = concat!(
    "WITH changed AS (UPDATE mcp_grants SET revoked_at = $4, revoked_by = $5 WHERE id = $1 AND ",
    row_of_caller!(),
    " AND revoked_at IS NULL AND expires_at > $4 AND (max_uses IS NULL OR uses < max_uses)",
    " AND ((caller_subject = $6 AND caller_tenant IS NOT DISTINCT FROM $7::text)",
    " OR (granter_subject = $6 AND granter_tenant IS NOT DISTINCT FROM $7::text)) RETURNING ",
    grant_columns!(),
    "), audit AS (INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, elicitation_id, tool_name, detail) ",
    "SELECT $4, 'grant_revoked', $2, $3::text, elicitation_id, tool_name, jsonb_strip_nulls(jsonb_build_object('grant', id::text, 'revoked_by', $5::text)) FROM changed) ",
    "SELECT * FROM changed"
);

/// `$1` cutoff, `$2` batch size.
pub(super) const ERASE_ENDED_GRANTS: &str = "SELECT mcp_erase_ended_grants($1, $2)";

/// The columns of a delegation row, in the order `delegations::decode` reads them.
macro_rules! delegation_columns {
    () => {
        "id, from_subject, from_tenant, to_subject, to_tenant, groups, starts_at, ends_at, created_at, revoked_at, revoked_by"
    };
}

/// The audit row of each delegation of CTE `changed`, by the actor `$2`/`$3` at `$a`.
macro_rules! delegation_audit {
    ($at:literal, $event:literal) => {
        concat!(
            "audit AS (INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, detail) ",
            "SELECT ", $at, ", '", $event, "', $2, $3::text, jsonb_strip_nulls(jsonb_build_object('delegation', id::text, 'from', from_subject, 'to', to_subject, ",
            "'starts_at', starts_at, 'ends_at', ends_at, 'revoked_by', revoked_by)) FROM changed) "
        )
    };
}

/// A delegation by the caller `$2`/`$3` to `$4`/`$5` (`$3` and `$5` NULL for none) with
/// `$6` groups, from `$7` to `$8`, made `$9`; unless the caller has `$10` delegations that
/// have not ended. Returns the row made (none at the limit).
pub(super) const DELEGATE: &str = concat!(
    "WITH changed AS (INSERT INTO mcp_delegations (id, from_subject, from_tenant, to_subject, to_tenant, groups, starts_at, ends_at, created_at) ",
    "SELECT $1, $2, $3::text, $4, $5::text, $6::text[], $7, $8, $9 ",
    "WHERE (SELECT count(*) FROM mcp_delegations WHERE from_subject = $2 AND from_tenant IS NOT DISTINCT FROM $3::text ",
    "AND revoked_at IS NULL AND ends_at > $9) < $10 RETURNING ",
    delegation_columns!(),
    "), ",
    delegation_audit!("$9", "delegation_created"),
    "SELECT ",
    delegation_columns!(),
    " FROM changed"
);

/// The delegations the caller `$1`/`$2` gave or received, newest first, at most `$3`.
pub(super) const DELEGATIONS: &str = concat!(
    "SELECT ",
    delegation_columns!(),
    " FROM mcp_delegations WHERE (from_subject = $1 AND from_tenant IS NOT DISTINCT FROM $2::text) ",
    "OR (to_subject = $1 AND to_tenant IS NOT DISTINCT FROM $2::text) ORDER BY created_at DESC, id DESC LIMIT $3"
);

/// Ends delegation `$1` at `$4` as the caller `$2`/`$3`, one of its two people, unless it
/// ended already.
pub(super) const REVOKE_DELEGATION: &str = concat!(
    "WITH changed AS (UPDATE mcp_delegations SET revoked_at = $4, revoked_by = $2 WHERE id = $1 ",
    "AND ((from_subject = $2 AND from_tenant IS NOT DISTINCT FROM $3::text) OR (to_subject = $2 AND to_tenant IS NOT DISTINCT FROM $3::text)) ",
    "AND revoked_at IS NULL AND ends_at > $4 RETURNING ",
    delegation_columns!(),
    "), ",
    delegation_audit!("$4", "delegation_revoked"),
    "SELECT ",
    delegation_columns!(),
    " FROM changed"
);

/// The delegations to the caller `$1`/`$2` live at `$3`, oldest first.
pub(super) const ACTING_FOR: &str = concat!(
    "SELECT ",
    delegation_columns!(),
    " FROM mcp_delegations WHERE to_subject = $1 AND to_tenant IS NOT DISTINCT FROM $2::text ",
    "AND revoked_at IS NULL AND starts_at <= $3 AND ends_at > $3 ORDER BY created_at, id LIMIT 256"
);

/// `$1` cutoff, `$2` batch size.
pub(super) const ERASE_ENDED_DELEGATIONS: &str = "SELECT mcp_erase_ended_delegations($1, $2)";

/// The window of `$W` seconds the database's clock is in now (the same for every instance).
macro_rules! quota_window {
    ($w:literal) => {
        concat!(
            "to_timestamp(floor(extract(epoch FROM now()) / ",
            $w,
            "::bigint) * ",
            $w,
            "::bigint)"
        )
    };
}

/// Counts `$3` against counter `$1` of the window of `$2` seconds the database's clock is in,
/// if it stays within `$4` (V28): one guarded upsert, the conflict's row lock serialising
/// concurrent takes. Returns the counter after the take and its window's start; no row when
/// it would pass the limit.
pub(super) const TAKE_QUOTA: &str = concat!(
    "INSERT INTO mcp_quota_counters AS c (key, window_start, window_end, used) ",
    "SELECT $1::text, ",
    quota_window!("$2"),
    ", ",
    quota_window!("$2"),
    " + make_interval(secs => $2::bigint), $3::bigint WHERE $3::bigint <= $4::bigint ",
    "ON CONFLICT (key, window_start) DO UPDATE SET used = c.used + EXCLUDED.used ",
    "WHERE c.used + EXCLUDED.used <= $4::bigint RETURNING used, window_start"
);

/// When the window of `$1` seconds the database's clock is in ends.
pub(super) const QUOTA_WINDOW_END: &str = concat!(
    "SELECT ",
    quota_window!("$1"),
    " + make_interval(secs => $1::bigint)"
);

/// Gives back `$3` to counter `$1` of the window starting `$2` (never below 0).
pub(super) const GIVE_BACK_QUOTA: &str = "UPDATE mcp_quota_counters SET used = GREATEST(used - $3, 0) WHERE key = $1 AND window_start = $2";

/// What counter `$1` of the window of `$2` seconds the database's clock is in stands at.
pub(super) const QUOTA_USED: &str = concat!(
    "SELECT used FROM mcp_quota_counters WHERE key = $1 AND window_start = ",
    quota_window!("$2")
);

/// `$1` cutoff, `$2` batch size.
pub(super) const FORGET_OLD_QUOTA_COUNTERS: &str = "SELECT mcp_forget_old_quota_counters($1, $2)";

/// `$1` now, `$2` batch size. Runs unscoped: the function works across callers.
pub(super) const EXPIRE_DUE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM mcp_expire_due($1, $2) AS mcp_elicitations"
);

/// `$1` cutoff, `$2` batch size.
pub(super) const ERASE_FINISHED: &str = "SELECT id, type::text FROM mcp_erase_finished($1, $2)";

pub(super) const PENDING_COUNT: &str = "SELECT mcp_pending_count()";

pub(super) const SCHEMA_VERSION: &str = "SELECT mcp_schema_version()";

/// What lets the login bypass row-level security, if anything: `superuser`, `bypassrls`
/// (the attribute), `owner` (it has the privileges of the owner of one of the store's tables
/// under row-level security — elicitations, grants, accounts, the audit trail, ended
/// sessions — that does not force it on its owner); `NULL` when nothing does.
pub(super) const RLS_BYPASS: &str = "SELECT CASE WHEN r.rolsuper THEN 'superuser' WHEN r.rolbypassrls THEN 'bypassrls' WHEN EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relname LIKE 'mcp\\_%' AND c.relkind = 'r' AND c.relrowsecurity AND NOT c.relforcerowsecurity AND pg_has_role(current_user, c.relowner, 'USAGE')) THEN 'owner' END, current_user::text FROM pg_roles r WHERE r.rolname = current_user";

pub(super) const IS_MIGRATED: &str = "SELECT to_regclass('public.mcp_elicitations') IS NOT NULL AND to_regprocedure('mcp_expire_due(timestamptz, integer)') IS NOT NULL";

/// The pending confirmations the transaction's approver groups answer, newest first. `$1`
/// now, `$2` limit.
pub(super) const APPROVER_PENDING: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM mcp_elicitations WHERE (approver_group = ANY (mcp_approver_groups()) OR approver_also && mcp_approver_groups())",
    " AND status = 'pending' AND expires_at > $1 ORDER BY created_at DESC, id DESC LIMIT $2"
);

/// One confirmation the transaction's approver groups answer. `$1` id.
pub(super) const APPROVER_ONE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM mcp_elicitations WHERE id = $1 AND (approver_group = ANY (mcp_approver_groups()) OR approver_also && mcp_approver_groups())"
);

pub(super) const LISTEN: &str =
    "LISTEN mcp_elicitation_changed; LISTEN mcp_session_ended; LISTEN mcp_gateway_broadcast";

/// The channel of [`LISTEN`] that carries [`BROADCAST`]s.
pub(super) const BROADCAST_CHANNEL: &str = "mcp_gateway_broadcast";

/// `$1` the message.
pub(super) const BROADCAST: &str = "SELECT pg_notify('mcp_gateway_broadcast', $1)";

/// The channel of [`LISTEN`] that carries ended sessions.
pub(super) const SESSION_ENDED_CHANNEL: &str = "mcp_session_ended";

/// `$1` hash, `$2` subject, `$3` tenant, `$4` now, `$5` until. Scoped to the caller.
pub(super) const END_SESSION: &str = "INSERT INTO mcp_ended_sessions (session_hash, caller_subject, caller_tenant, ended_at, expires_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (session_hash) DO NOTHING";

pub(super) const ENDED_SESSIONS: &str = "SELECT session_hash, expires_at FROM mcp_ended_sessions()";

pub(super) const FORGET_ENDED_SESSIONS: &str = "SELECT mcp_forget_ended_sessions()";

/// Every statement that writes audit rows (held against the audit vocabulary in a test).
#[cfg(test)]
pub(crate) const ALL: &[&str] = &[
    INSERT,
    RESPOND_VALID,
    RESPOND_VALID_QUORUM,
    COUNT_APPROVAL,
    RESPOND_INVALID,
    CANCEL,
    REDEEM,
    RECORD_GATE,
    RESPOND_VALID_GRANTING,
    USE_GRANT,
    REVOKE_GRANT,
    DELEGATE,
    REVOKE_DELEGATION,
    EXPIRE_DUE,
];

/// The notices due at `$1` that no live claim holds, oldest first, at most `$3`, claimed
/// until `$2` (V16).
pub(super) const CLAIM_NOTICES: &str = concat!(
    "WITH due AS (SELECT id FROM mcp_notices ",
    "WHERE done_at IS NULL AND due_at <= $1 AND (claimed_until IS NULL OR claimed_until <= $1) ",
    "ORDER BY due_at, id LIMIT $3 FOR UPDATE SKIP LOCKED) ",
    "UPDATE mcp_notices n SET claimed_until = $2 FROM due WHERE n.id = due.id ",
    "RETURNING n.id, n.delivery, n.elicitation_id, n.caller_subject, n.caller_tenant, n.event, n.at, n.attempts, n.delivered"
);

/// Settles notice `$1`: delivered to `$2`, one attempt more, due again at `$3` or done at
/// `$4` (when `$3` is NULL). A notice already done is left as it is.
/// Audits a step of chasing an elicitation: `$1` at, `$2` the event, `$3`/`$4` the caller,
/// `$5` the elicitation, `$6` its tool, `$7` the detail.
pub(super) const RECORD_STEP: &str = "INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, elicitation_id, tool_name, detail) VALUES ($1, $2, $3, $4::text, $5, $6::text, $7::jsonb)";

pub(super) const SETTLE_NOTICE: &str = concat!(
    "UPDATE mcp_notices SET delivered = $2, attempts = attempts + 1, claimed_until = NULL, ",
    "due_at = coalesce($3::timestamptz, due_at), done_at = CASE WHEN $3::timestamptz IS NULL THEN $4::timestamptz END ",
    "WHERE id = $1 AND done_at IS NULL"
);

/// The audit chain's advisory lock (V17), taken by one sealer at a time.
pub(super) const CHAIN_LOCK: &str = "SELECT pg_try_advisory_lock(7306926547146614644)";
pub(super) const CHAIN_UNLOCK: &str = "SELECT pg_advisory_unlock(7306926547146614644)";
/// The unsealed rows after the chain's head, with the head.
pub(super) const CHAIN_AFTER_HEAD: &str = "SELECT * FROM mcp_audit_after_head($1)";
/// Seals rows in order after the head `$1` (V20): `$2` ids, `$3` MACs, `$4` key; how many.
pub(super) const CHAIN_SEAL_MANY: &str = "SELECT mcp_audit_seal_many($1, $2, $3, $4)";
/// The whole table in id order, a page at a time (run by the schema owner: `audit verify`).
pub(super) const CHAIN_WALK: &str = "SELECT id, at, event, caller_subject, caller_tenant, elicitation_id, tool_name, detail::text AS detail, mac, mac_key, recorded_at, clock_timestamp() AS checked_at FROM mcp_audit_events WHERE id > $1 ORDER BY id LIMIT $2";
/// A page of audit events by time (`$1` from, `$2` before, or NULL), after id `$3`.
pub(super) const AUDIT_PAGE: &str = "SELECT id, at, event, caller_subject, caller_tenant, elicitation_id, tool_name, detail::text AS detail, mac IS NOT NULL AS sealed FROM mcp_audit_events WHERE at >= $1 AND ($2::timestamptz IS NULL OR at < $2) AND id > $3 ORDER BY id LIMIT $4";
/// A page of the trail for a reader with `audit:read`, in the scope's tenant (V18): `$1`
/// since, `$2` until, `$3`/`$4` the tool and whether it is a prefix, `$5` caller, `$6`
/// outcome, `$7` newest first, `$8` cursor, `$9` limit.
pub(super) const AUDIT_READ: &str = "SELECT id, at, event, caller_subject, caller_tenant, elicitation_id, tool_name, detail, sealed FROM mcp_audit_read($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// The columns of an account row, in the order `accounts::decode` reads them.
macro_rules! account_columns {
    () => {
        "module, tokens_sealed, tokens_key_id, connected_at, updated_at, version"
    };
}

/// Stores a caller's tokens for a module: `$1` a new row id, `$2` subject, `$3` tenant, `$4`
/// module, `$5`/`$6` the sealed tokens and key id, `$7` now, `$8` whether this is a new
/// connection (else a refresh keeps `connected_at`), `$9` the most accounts a caller holds
/// (a caller at the limit may still replace one of its own). No row: the limit.
pub(super) const SAVE_ACCOUNT: &str = concat!(
    "WITH mine AS (SELECT count(*) AS n, coalesce(bool_or(module = $4), false) AS has FROM mcp_accounts \
     WHERE caller_subject = $2 AND caller_tenant IS NOT DISTINCT FROM $3::text) \
     INSERT INTO mcp_accounts AS a (id, caller_subject, caller_tenant, module, tokens_sealed, tokens_key_id, connected_at, updated_at) \
     SELECT $1, $2, $3, $4, $5, $6, $7, $7 FROM mine WHERE mine.n < $9 OR mine.has \
     ON CONFLICT (caller_subject, (coalesce(caller_tenant, '')), module) DO UPDATE SET \
     tokens_sealed = EXCLUDED.tokens_sealed, tokens_key_id = EXCLUDED.tokens_key_id, \
     updated_at = EXCLUDED.updated_at, version = a.version + 1, \
     connected_at = CASE WHEN $8 THEN EXCLUDED.connected_at ELSE a.connected_at END \
     RETURNING ",
    account_columns!()
);

/// A caller's account at a module: `$1` subject, `$2` tenant, `$3` module.
pub(super) const ACCOUNT_ONE: &str = concat!(
    "SELECT ",
    account_columns!(),
    " FROM mcp_accounts WHERE caller_subject = $1 AND caller_tenant IS NOT DISTINCT FROM $2::text AND module = $3"
);

/// Every account of a caller: `$1` subject, `$2` tenant.
pub(super) const ACCOUNTS_OF_CALLER: &str = concat!(
    "SELECT ",
    account_columns!(),
    " FROM mcp_accounts WHERE caller_subject = $1 AND caller_tenant IS NOT DISTINCT FROM $2::text ORDER BY module"
);

/// Forgets a caller's account at a module: `$1` subject, `$2` tenant, `$3` module.
pub(super) const REMOVE_ACCOUNT: &str = "DELETE FROM mcp_accounts WHERE caller_subject = $1 AND caller_tenant IS NOT DISTINCT FROM $2::text AND module = $3 RETURNING id";

/// A refresh: `$1` subject, `$2` tenant, `$3` module, `$4` the version read, `$5`/`$6` the
/// sealed tokens and key id, `$7` now. No row: the account changed or is gone.
pub(super) const REFRESH_ACCOUNT: &str = concat!(
    "UPDATE mcp_accounts SET tokens_sealed = $5, tokens_key_id = $6, updated_at = $7, version = version + 1 \
     WHERE caller_subject = $1 AND caller_tenant IS NOT DISTINCT FROM $2::text AND module = $3 AND version = $4 \
     RETURNING ",
    account_columns!()
);

/// Forgets an account still at a version: `$1` subject, `$2` tenant, `$3` module, `$4` version.
pub(super) const REMOVE_ACCOUNT_AT: &str = "DELETE FROM mcp_accounts WHERE caller_subject = $1 AND caller_tenant IS NOT DISTINCT FROM $2::text AND module = $3 AND version = $4 RETURNING id";

/// The newest row of each key of a caller's flow (`$1` subject, `$2` tenant): a label's
/// tool, or a seen secret's fingerprint, ranked per kind from the newest (`n`).
macro_rules! flow_keys {
    () => {
        "SELECT id, kind, tool, fingerprint, at, \
         row_number() OVER (PARTITION BY kind ORDER BY at DESC, id DESC) AS n FROM (\
         SELECT DISTINCT ON (kind, CASE WHEN kind = 'seen' THEN encode(fingerprint, 'hex') ELSE tool END) \
         id, kind, tool, fingerprint, at FROM mcp_flows \
         WHERE caller_subject = $1 AND caller_tenant IS NOT DISTINCT FROM $2::text"
    };
}

/// The end of [`flow_keys`]: the newest row of each key first.
macro_rules! flow_keys_end {
    () => {
        " ORDER BY kind, CASE WHEN kind = 'seen' THEN encode(fingerprint, 'hex') ELSE tool END, at DESC, id DESC) k"
    };
}

/// Adds to a caller's flow (`$1` subject, `$2` tenant): `$3` tool at `$4`, one row per
/// `$5` kind (a label's name, or `seen` with its `$6` fingerprint); then keeps of each kind
/// written only the newest row of each of the newest `$7` tools (labels) or `$8`
/// fingerprints (seen), as a flow in memory keeps them. The rows written here are not seen
/// by the trim (one snapshot), so they always stay.
pub(super) const RECORD_FLOW: &str = concat!(
    "WITH added AS (\
     INSERT INTO mcp_flows (caller_subject, caller_tenant, tool, at, kind, fingerprint) \
     SELECT $1, $2::text, $3, $4, k.kind, k.fingerprint \
     FROM unnest($5::text[], $6::bytea[]) AS k(kind, fingerprint) RETURNING kind) \
     DELETE FROM mcp_flows f WHERE f.caller_subject = $1 AND f.caller_tenant IS NOT DISTINCT FROM $2::text \
     AND f.kind IN (SELECT DISTINCT kind FROM added) \
     AND f.id NOT IN (SELECT r.id FROM (",
    flow_keys!(),
    flow_keys_end!(),
    ") r WHERE r.n <= CASE WHEN r.kind = 'seen' THEN $8::bigint ELSE $7::bigint END)"
);

/// A caller's flow (`$1` subject, `$2` tenant) since `$3`: of each kind the newest row of
/// each of the newest `$4` tools (labels) or `$5` fingerprints (seen).
pub(super) const READ_FLOW: &str = concat!(
    "SELECT kind, tool, fingerprint, at FROM (",
    flow_keys!(),
    " AND at >= $3",
    flow_keys_end!(),
    ") r WHERE n <= CASE WHEN kind = 'seen' THEN $5::bigint ELSE $4::bigint END"
);

/// Erases flow rows older than `$1` (the longest window ago), at most `$2` a call.
pub(super) const FORGET_OLD_FLOWS: &str = "SELECT mcp_forget_old_flows($1, $2)";
