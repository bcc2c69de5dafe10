-- Delegations (issue 50): a person away hands their approvals to another for a window. The
-- delegate answers with the approver groups the delegator had when handing them over
-- (`groups`), as themselves, for the delegator. Either of the two sees the row and may end
-- it early (revoked_at, once); nothing else of a row ever changes.

CREATE TABLE mcp_delegations (
    id           uuid PRIMARY KEY,
    from_subject text NOT NULL CHECK (char_length(from_subject) BETWEEN 1 AND 512),
    from_tenant  text CHECK (char_length(from_tenant) BETWEEN 1 AND 512),
    to_subject   text NOT NULL CHECK (char_length(to_subject) BETWEEN 1 AND 512),
    to_tenant    text CHECK (char_length(to_tenant) BETWEEN 1 AND 512),
    groups       text[] NOT NULL CHECK (cardinality(groups) BETWEEN 1 AND 256),
    starts_at    timestamptz NOT NULL,
    ends_at      timestamptz NOT NULL,
    created_at   timestamptz NOT NULL,
    revoked_at   timestamptz,
    revoked_by   text CHECK (char_length(revoked_by) BETWEEN 1 AND 512),
    CONSTRAINT mcp_delegations_to_someone_else
        CHECK (NOT (from_subject = to_subject AND from_tenant IS NOT DISTINCT FROM to_tenant)),
    CONSTRAINT mcp_delegations_within_a_tenant
        CHECK (from_tenant IS NOT DISTINCT FROM to_tenant),
    CONSTRAINT mcp_delegations_window
        CHECK (ends_at > starts_at AND ends_at <= created_at + interval '30 days 1 minute'),
    CONSTRAINT mcp_delegations_revoked_whole
        CHECK ((revoked_at IS NULL) = (revoked_by IS NULL))
);

CREATE INDEX mcp_delegations_from ON mcp_delegations (from_subject, (coalesce(from_tenant, '')), ends_at);
CREATE INDEX mcp_delegations_to ON mcp_delegations (to_subject, (coalesce(to_tenant, '')), ends_at);
CREATE INDEX mcp_delegations_by_end ON mcp_delegations (ends_at);

-- Ended early once, and never un-ended; a revocation changes nothing else.
CREATE FUNCTION mcp_delegations_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF OLD.revoked_at IS NOT NULL THEN
        RAISE EXCEPTION 'delegation % was revoked; it cannot be changed', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER mcp_delegations_guard
    BEFORE UPDATE ON mcp_delegations
    FOR EACH ROW
    EXECUTE FUNCTION mcp_delegations_guard();

-- Row-level security: a delegation is its delegator's (who alone may make one) and its
-- delegate's to see and end.
ALTER TABLE mcp_delegations ENABLE ROW LEVEL SECURITY;

CREATE POLICY mcp_delegations_of_delegator ON mcp_delegations
    TO mcp_gateway_writer
    USING (from_subject = current_setting('mcp.caller_subject', true)
           AND from_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''))
    WITH CHECK (from_subject = current_setting('mcp.caller_subject', true)
           AND from_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''));

CREATE POLICY mcp_delegations_of_delegate ON mcp_delegations
    FOR SELECT
    TO mcp_gateway_writer
    USING (to_subject = current_setting('mcp.caller_subject', true)
           AND to_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''));

CREATE POLICY mcp_delegations_ended_by_delegate ON mcp_delegations
    FOR UPDATE
    TO mcp_gateway_writer
    USING (to_subject = current_setting('mcp.caller_subject', true)
           AND to_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''))
    WITH CHECK (to_subject = current_setting('mcp.caller_subject', true)
           AND to_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''));

GRANT SELECT, INSERT ON mcp_delegations TO mcp_gateway_writer;
GRANT UPDATE (revoked_at, revoked_by) ON mcp_delegations TO mcp_gateway_writer;

-- Retention: a delegation that ended before the cutoff is erased with the finished
-- elicitations; its audit trail stays.
CREATE FUNCTION mcp_erase_ended_delegations(ended_before timestamptz, max_rows integer)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH cutoff AS (
        SELECT LEAST(ended_before, pg_catalog.now() + interval '1 minute') AS at
    ), old AS (
        SELECT d.id FROM public.mcp_delegations d, cutoff
        WHERE LEAST(coalesce(d.revoked_at, d.ends_at), d.ends_at) <= cutoff.at
        ORDER BY d.ends_at
        LIMIT max_rows
        FOR UPDATE OF d SKIP LOCKED
    ), gone AS (
        DELETE FROM public.mcp_delegations d USING old WHERE d.id = old.id RETURNING d.id
    )
    SELECT count(*) FROM gone
$$;

REVOKE ALL ON FUNCTION mcp_erase_ended_delegations(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mcp_erase_ended_delegations(timestamptz, integer) TO mcp_gateway_writer;

-- The audit events of delegations, and of chasing an elicitation that still waits (an
-- approver rule's remind_after, escalate_after).
ALTER TABLE mcp_audit_events DROP CONSTRAINT mcp_audit_events_event_check;
ALTER TABLE mcp_audit_events ADD CONSTRAINT mcp_audit_events_event_check CHECK (event IN (
    'elicitation_requested', 'elicitation_responded',
    'elicitation_cancelled', 'elicitation_validation_failed',
    'elicitation_timeout', 'tool_call_held',
    'tool_call_forwarded', 'tool_call_rejected', 'tool_call_shadowed',
    'grant_created', 'grant_revoked',
    'tool_definition_changed', 'tool_definition_approved', 'tool_definition_rejected',
    'tool_call_completed', 'elicitation_approval_counted',
    'delegation_created', 'delegation_revoked',
    'elicitation_reminded', 'elicitation_escalated'));
