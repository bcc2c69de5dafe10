-- Elicitations: the store of record for questions put to a person, including the
-- confirmations that hold destructive tool calls.
--
-- Labels of the enums are exactly the wire labels of elicitation-core.
-- Payloads (tool arguments, responses) are sealed by the gateway (AES-256-GCM) before they
-- reach this table; the database never sees them in clear.

-- The role the gateway's login role is granted. Roles are cluster-wide, so creating it
-- tolerates another database (or a concurrent migration) having done so already.
DO $$
BEGIN
    CREATE ROLE mcp_gateway_writer NOLOGIN;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;

CREATE TYPE mcp_elicitation_type AS ENUM (
    'string_input', 'single_choice', 'multi_choice', 'confirmation', 'file_upload'
);

CREATE TYPE mcp_elicitation_status AS ENUM (
    'pending', 'responded', 'cancelled', 'expired', 'validation_failed'
);

CREATE TYPE mcp_cancel_reason AS ENUM (
    'declined', 'cancelled_by_person', 'cancelled_by_caller'
);

CREATE TABLE mcp_elicitations (
    id              uuid PRIMARY KEY,
    caller_subject  text NOT NULL CHECK (length(caller_subject) BETWEEN 1 AND 512),
    caller_tenant   text CHECK (length(caller_tenant) BETWEEN 1 AND 512),
    type            mcp_elicitation_type NOT NULL,
    status          mcp_elicitation_status NOT NULL DEFAULT 'pending',
    message         text NOT NULL,
    -- The non-secret part of the spec: the type and its options and bounds.
    spec            jsonb NOT NULL,
    -- The call a confirmation is bound to.
    tool_name       text,
    call_digest     bytea CHECK (octet_length(call_digest) = 32),
    request_sealed  bytea,
    request_key_id  text,
    response_sealed bytea,
    response_key_id text,
    -- Denormalised from the sealed response of a confirmation, for the gate's lookups.
    confirmed       boolean,
    retries         smallint NOT NULL DEFAULT 0 CHECK (retries BETWEEN 0 AND 3),
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    responded_at    timestamptz,
    cancelled_at    timestamptz,
    consumed_at     timestamptz,
    cancel_reason   mcp_cancel_reason,
    CHECK (expires_at > created_at),
    CHECK ((tool_name IS NULL) = (call_digest IS NULL)),
    CHECK ((request_sealed IS NULL) = (request_key_id IS NULL)),
    CHECK ((response_sealed IS NULL) = (response_key_id IS NULL)),
    CHECK ((status = 'responded') = (response_sealed IS NOT NULL)),
    CHECK ((status = 'cancelled') = (cancel_reason IS NOT NULL)),
    CHECK (consumed_at IS NULL OR (type = 'confirmation' AND confirmed))
);

-- "The caller's pending elicitations, newest first."
CREATE INDEX mcp_elicitations_pending_of_caller
    ON mcp_elicitations (caller_subject, created_at DESC)
    WHERE status = 'pending';

-- "Pending elicitations due to expire."
CREATE INDEX mcp_elicitations_due
    ON mcp_elicitations (expires_at)
    WHERE status = 'pending';

-- Listing a caller's elicitations of any status, newest first.
CREATE INDEX mcp_elicitations_of_caller
    ON mcp_elicitations (caller_subject, created_at DESC);

-- Append-only audit trail. Never holds payloads or arguments.
CREATE TABLE mcp_audit_events (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at             timestamptz NOT NULL,
    event          text NOT NULL CHECK (event IN (
                       'elicitation_requested', 'elicitation_responded',
                       'elicitation_cancelled', 'elicitation_validation_failed',
                       'elicitation_timeout', 'tool_call_held',
                       'tool_call_forwarded', 'tool_call_rejected')),
    caller_subject text NOT NULL,
    caller_tenant  text,
    elicitation_id uuid,
    tool_name      text,
    detail         jsonb NOT NULL DEFAULT '{}'
);

CREATE INDEX mcp_audit_events_of_elicitation ON mcp_audit_events (elicitation_id);

-- Wake waiters (on any gateway instance) when an elicitation leaves a status. The payload is
-- only the id.
CREATE FUNCTION mcp_elicitations_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mcp_elicitation_changed', NEW.id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER mcp_elicitations_status_changed
    AFTER UPDATE OF status ON mcp_elicitations
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION mcp_elicitations_notify();

-- Row-level security: the gateway sets mcp.caller_subject / mcp.caller_tenant per
-- transaction; a row of another caller is invisible, as if it did not exist. This is defence
-- in depth: every statement also filters on the caller.
ALTER TABLE mcp_elicitations ENABLE ROW LEVEL SECURITY;
ALTER TABLE mcp_audit_events ENABLE ROW LEVEL SECURITY;

CREATE POLICY mcp_elicitations_of_caller ON mcp_elicitations
    TO mcp_gateway_writer
    USING (caller_subject = current_setting('mcp.caller_subject', true)
           AND caller_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''))
    WITH CHECK (caller_subject = current_setting('mcp.caller_subject', true)
           AND caller_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''));

CREATE POLICY mcp_audit_events_of_caller ON mcp_audit_events
    TO mcp_gateway_writer
    USING (caller_subject = current_setting('mcp.caller_subject', true)
           AND caller_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''))
    WITH CHECK (caller_subject = current_setting('mcp.caller_subject', true)
           AND caller_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''));

-- The sweeper works across callers, so it runs as the owner (which RLS does not restrict),
-- through this one function and nothing else: it can only move overdue pending rows to
-- expired, and it records the timeout in the audit trail. The cutoff is capped at the
-- database's clock plus one minute (tolerating skew between gateway instances), so a caller
-- cannot expire rows early by passing a time in the future. search_path ends with pg_temp
-- and every name is qualified, so a temporary object cannot hijack the owner's rights.
CREATE FUNCTION mcp_expire_due(due_at timestamptz, max_rows integer)
RETURNS SETOF public.mcp_elicitations
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH cutoff AS (
        SELECT LEAST(due_at, pg_catalog.now() + interval '1 minute') AS at
    ), due AS (
        SELECT e.id FROM public.mcp_elicitations e, cutoff
        WHERE e.status = 'pending' AND e.expires_at <= cutoff.at
        ORDER BY e.expires_at
        LIMIT max_rows
        FOR UPDATE OF e SKIP LOCKED
    ), expired AS (
        UPDATE public.mcp_elicitations e SET status = 'expired'
        FROM due WHERE e.id = due.id AND e.status = 'pending'
        RETURNING e.*
    ), audit AS (
        INSERT INTO public.mcp_audit_events (at, event, caller_subject, caller_tenant, elicitation_id, tool_name, detail)
        SELECT (SELECT at FROM cutoff), 'elicitation_timeout', caller_subject, caller_tenant, id, tool_name, '{}'::jsonb
        FROM expired
    )
    SELECT * FROM expired
$$;

REVOKE ALL ON FUNCTION mcp_expire_due(timestamptz, integer) FROM PUBLIC;

-- Grants: insert and read; update only the lifecycle columns; never delete, never rewrite
-- who asked, what was asked, or the call a confirmation is bound to.
GRANT USAGE ON SCHEMA public TO mcp_gateway_writer;
GRANT SELECT, INSERT ON mcp_elicitations TO mcp_gateway_writer;
GRANT UPDATE (status, response_sealed, response_key_id, confirmed, retries,
              responded_at, cancelled_at, consumed_at, cancel_reason)
    ON mcp_elicitations TO mcp_gateway_writer;
GRANT SELECT, INSERT ON mcp_audit_events TO mcp_gateway_writer;
GRANT EXECUTE ON FUNCTION mcp_expire_due(timestamptz, integer) TO mcp_gateway_writer;
