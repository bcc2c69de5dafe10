-- Standing grants: a person approving a confirmation may also let later calls of the same
-- caller run without asking — the same call (scope 'call', bound to the argument digest) or
-- the tool (scope 'tool', narrowed by an optional CEL `when`) — until `expires_at`, at most
-- `max_uses` times. A grant is inserted in the same statement that records the approval.
--
-- What the writer role may do: insert a grant for a caller it is scoped to, on one of that
-- caller's confirmations of the same tool; count a use (`uses` up by one, on a grant not
-- revoked); revoke (set `revoked_at` once). It may not extend a grant (`expires_at`,
-- `max_uses` are not updatable), un-use it (`uses` never goes down), re-own it (the caller
-- and granter columns are not updatable) or un-revoke it (the trigger below).
-- The argument digest and the `when` are sealed like arguments (AES-256-GCM, bound to the
-- column, the confirmation's id and the caller).

CREATE TABLE mcp_grants (
    id uuid PRIMARY KEY,
    elicitation_id uuid NOT NULL UNIQUE,
    caller_subject text NOT NULL,
    caller_tenant text,
    tool_name text NOT NULL CHECK (char_length(tool_name) BETWEEN 1 AND 512),
    scope text NOT NULL CHECK (scope IN ('call', 'tool')),
    digest_sealed bytea,
    digest_key_id text,
    when_sealed bytea,
    when_key_id text,
    definition_digest text NOT NULL CHECK (char_length(definition_digest) BETWEEN 1 AND 128),
    approver_group text,
    approval_mode text CHECK (approval_mode IN ('may', 'must', 'four_eyes')),
    granted_by text,
    granter_subject text NOT NULL,
    granter_tenant text,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    max_uses integer CHECK (max_uses IS NULL OR max_uses > 0),
    uses integer NOT NULL DEFAULT 0,
    revoked_at timestamptz,
    revoked_by text,
    CONSTRAINT mcp_grants_ends_after_it_starts CHECK (expires_at > created_at),
    CONSTRAINT mcp_grants_uses_within_max CHECK (uses >= 0 AND (max_uses IS NULL OR uses <= max_uses)),
    CONSTRAINT mcp_grants_call_has_its_digest
        CHECK ((scope = 'call') = (digest_sealed IS NOT NULL)),
    CONSTRAINT mcp_grants_when_only_on_tool CHECK (scope = 'tool' OR when_sealed IS NULL),
    CONSTRAINT mcp_grants_sealed_with_keys
        CHECK ((digest_sealed IS NULL) = (digest_key_id IS NULL)
               AND (when_sealed IS NULL) = (when_key_id IS NULL)),
    CONSTRAINT mcp_grants_approval_whole CHECK ((approver_group IS NULL) = (approval_mode IS NULL)),
    CONSTRAINT mcp_grants_revoked_whole CHECK (revoked_by IS NULL OR revoked_at IS NOT NULL)
);

CREATE INDEX mcp_grants_by_caller_tool ON mcp_grants (caller_subject, caller_tenant, tool_name, expires_at);
CREATE INDEX mcp_grants_by_granter ON mcp_grants (granter_subject, granter_tenant, created_at);

-- A grant is made on one of its caller's confirmations of the same tool (read through
-- row-level security, so only a confirmation the transaction may see).
CREATE FUNCTION mcp_grants_guard_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM public.mcp_elicitations e
                   WHERE e.id = NEW.elicitation_id AND e.type = 'confirmation'
                     AND e.caller_subject = NEW.caller_subject
                     AND e.caller_tenant IS NOT DISTINCT FROM NEW.caller_tenant
                     AND e.tool_name = NEW.tool_name) THEN
        RAISE EXCEPTION 'a grant is made on a confirmation of its caller for the same tool'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.uses <> 0 OR NEW.revoked_at IS NOT NULL THEN
        RAISE EXCEPTION 'a grant starts unused and unrevoked'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER mcp_grants_guard_insert
    BEFORE INSERT ON mcp_grants
    FOR EACH ROW
    EXECUTE FUNCTION mcp_grants_guard_insert();

-- Uses only go up, one at a time, and never on a revoked grant; a revocation is final.
CREATE FUNCTION mcp_grants_guard_update() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NEW.uses < OLD.uses OR NEW.uses > OLD.uses + 1 THEN
        RAISE EXCEPTION 'grant %: uses only go up by one', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF OLD.revoked_at IS NOT NULL AND (NEW.revoked_at IS DISTINCT FROM OLD.revoked_at
                                       OR NEW.revoked_by IS DISTINCT FROM OLD.revoked_by
                                       OR NEW.uses <> OLD.uses) THEN
        RAISE EXCEPTION 'grant % is revoked', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER mcp_grants_guard_update
    BEFORE UPDATE ON mcp_grants
    FOR EACH ROW
    EXECUTE FUNCTION mcp_grants_guard_update();

-- Row-level security: a grant is its caller's, and visible to (and revocable by) whoever
-- made it.
ALTER TABLE mcp_grants ENABLE ROW LEVEL SECURITY;

CREATE POLICY mcp_grants_of_caller ON mcp_grants
    TO mcp_gateway_writer
    USING (caller_subject = current_setting('mcp.caller_subject', true)
           AND caller_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''))
    WITH CHECK (caller_subject = current_setting('mcp.caller_subject', true)
           AND caller_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''));

CREATE POLICY mcp_grants_of_granter ON mcp_grants
    FOR SELECT
    TO mcp_gateway_writer
    USING (granter_subject = current_setting('mcp.caller_subject', true)
           AND granter_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''));

GRANT SELECT, INSERT ON mcp_grants TO mcp_gateway_writer;
GRANT UPDATE (uses, revoked_at, revoked_by) ON mcp_grants TO mcp_gateway_writer;

-- Retention: a grant that ended (expired, or revoked) before the cutoff is erased with the
-- finished elicitations; its audit trail stays. Capped like mcp_erase_finished.
CREATE FUNCTION mcp_erase_ended_grants(ended_before timestamptz, max_rows integer)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH cutoff AS (
        SELECT LEAST(ended_before, pg_catalog.now() + interval '1 minute') AS at
    ), old AS (
        SELECT g.id FROM public.mcp_grants g, cutoff
        WHERE LEAST(coalesce(g.revoked_at, g.expires_at), g.expires_at) <= cutoff.at
        ORDER BY g.expires_at
        LIMIT max_rows
        FOR UPDATE OF g SKIP LOCKED
    ), gone AS (
        DELETE FROM public.mcp_grants g USING old WHERE g.id = old.id RETURNING g.id
    )
    SELECT count(*) FROM gone
$$;

REVOKE ALL ON FUNCTION mcp_erase_ended_grants(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mcp_erase_ended_grants(timestamptz, integer) TO mcp_gateway_writer;

ALTER TABLE mcp_audit_events DROP CONSTRAINT mcp_audit_events_event_check;
ALTER TABLE mcp_audit_events ADD CONSTRAINT mcp_audit_events_event_check CHECK (event IN (
    'elicitation_requested', 'elicitation_responded',
    'elicitation_cancelled', 'elicitation_validation_failed',
    'elicitation_timeout', 'tool_call_held',
    'tool_call_forwarded', 'tool_call_rejected', 'tool_call_shadowed',
    'grant_created', 'grant_revoked'));
