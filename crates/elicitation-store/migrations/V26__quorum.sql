-- Quorum (issue 50): a confirmation that several distinct people must approve, optionally
-- one from each of several groups ("one from sre and one from security").
--
-- approval_quorum is how many distinct approvers are needed (1: one answer decides, as
-- before); approver_also the further groups, besides approver_group, of each of which one
-- approver must count. Both are set when the row is inserted, like the approval itself.
-- approvals holds the approvals counted so far: a JSON array of {subject, tenant, groups,
-- at, by, for} (at most the 16 people a quorum needs, and one more for each of its 8 groups
-- whose approver is still missing). The approval that completes the quorum records the answer in the same UPDATE,
-- guarded by the approvals it read, so of concurrent approvals on any number of instances
-- exactly one completes it; the others read again.

ALTER TABLE mcp_elicitations
    ADD COLUMN approval_quorum smallint NOT NULL DEFAULT 1
        CONSTRAINT mcp_elicitations_approval_quorum CHECK (approval_quorum BETWEEN 1 AND 16),
    ADD COLUMN approver_also text[] NOT NULL DEFAULT '{}'
        CONSTRAINT mcp_elicitations_approver_also CHECK (cardinality(approver_also) <= 7),
    ADD COLUMN approvals jsonb NOT NULL DEFAULT '[]'
        CONSTRAINT mcp_elicitations_approvals CHECK (jsonb_typeof(approvals) = 'array' AND jsonb_array_length(approvals) <= 32),
    ADD CONSTRAINT mcp_elicitations_quorum_needs_a_group
        CHECK ((approval_quorum = 1 AND cardinality(approver_also) = 0) OR approver_group IS NOT NULL);

GRANT UPDATE (approvals) ON mcp_elicitations TO mcp_gateway_writer;

-- Approvals are only ever added, and only while the row is pending: a counted approval
-- cannot be taken back or rewritten, and a finished row's count is final.
CREATE FUNCTION mcp_elicitations_approvals_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NEW.approvals IS DISTINCT FROM OLD.approvals AND (
           OLD.status <> 'pending'
        OR NOT (NEW.approvals @> OLD.approvals)
        OR jsonb_array_length(NEW.approvals) <> jsonb_array_length(OLD.approvals) + 1) THEN
        RAISE EXCEPTION 'elicitation %: approvals are only added, one at a time, while it is pending', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER mcp_elicitations_approvals_guard
    BEFORE UPDATE OF approvals ON mcp_elicitations
    FOR EACH ROW
    EXECUTE FUNCTION mcp_elicitations_approvals_guard();

-- A new row has no approvals yet, whoever inserts it.
CREATE FUNCTION mcp_elicitations_approvals_start_empty() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF jsonb_array_length(NEW.approvals) <> 0 THEN
        RAISE EXCEPTION 'a new elicitation has no approvals'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER mcp_elicitations_approvals_start_empty
    BEFORE INSERT ON mcp_elicitations
    FOR EACH ROW
    EXECUTE FUNCTION mcp_elicitations_approvals_start_empty();

-- The members of a quorum's further groups see and answer its rows too (beside V6's
-- policy for approver_group).
CREATE POLICY mcp_elicitations_of_quorum_group ON mcp_elicitations
    USING (approver_also && mcp_approver_groups())
    WITH CHECK (approver_also && mcp_approver_groups());

-- The new audit event: one approval counted, the call still waiting for others.
ALTER TABLE mcp_audit_events DROP CONSTRAINT mcp_audit_events_event_check;
ALTER TABLE mcp_audit_events ADD CONSTRAINT mcp_audit_events_event_check CHECK (event IN (
    'elicitation_requested', 'elicitation_responded',
    'elicitation_cancelled', 'elicitation_validation_failed',
    'elicitation_timeout', 'tool_call_held',
    'tool_call_forwarded', 'tool_call_rejected', 'tool_call_shadowed',
    'grant_created', 'grant_revoked',
    'tool_definition_changed', 'tool_definition_approved', 'tool_definition_rejected',
    'tool_call_completed', 'elicitation_approval_counted'));
