-- Retention and readiness.
--
-- Retention: a finished elicitation older than the operator's retention period is erased
-- whole — its sealed message, arguments and response with it. The audit trail
-- (mcp_audit_events, which never holds payloads) stays: who asked, for which tool, when,
-- and what became of it. Like the sweeper, the job works across callers, so it runs as the
-- owner through this one function; the writer role still has no DELETE.
--
-- "Finished and older than the cutoff" means: not pending, and every time the row carries
-- (expiry, answer, cancellation, consumption) is at or before the cutoff. An approved
-- confirmation is therefore never erased while it could still authorise its call. The
-- cutoff is capped like the sweeper's (the database's clock plus one minute), so no caller
-- can erase a row whose times are not yet past by passing a time in the future. The
-- retention period itself is the gateway's setting: a writer that passes a recent cutoff
-- erases finished rows early (their audit trail stays).
CREATE FUNCTION mcp_erase_finished(finished_before timestamptz, max_rows integer)
RETURNS TABLE (id uuid, type public.mcp_elicitation_type)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH cutoff AS (
        SELECT LEAST(finished_before, pg_catalog.now() + interval '1 minute') AS at
    ), old AS (
        SELECT e.id FROM public.mcp_elicitations e, cutoff
        WHERE e.status <> 'pending'
          AND GREATEST(e.expires_at, e.responded_at, e.cancelled_at, e.consumed_at) <= cutoff.at
        ORDER BY e.expires_at
        LIMIT max_rows
        FOR UPDATE OF e SKIP LOCKED
    )
    DELETE FROM public.mcp_elicitations e USING old WHERE e.id = old.id
    RETURNING e.id, e.type
$$;

REVOKE ALL ON FUNCTION mcp_erase_finished(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mcp_erase_finished(timestamptz, integer) TO mcp_gateway_writer;

-- How many elicitations wait for an answer, across callers (a number, never a row): the
-- operator's gauge.
CREATE FUNCTION mcp_pending_count()
RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT count(*) FROM public.mcp_elicitations
    WHERE status = 'pending' AND expires_at > pg_catalog.now()
$$;

REVOKE ALL ON FUNCTION mcp_pending_count() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mcp_pending_count() TO mcp_gateway_writer;

-- The newest migration applied (readiness compares it with the gateway's own).
CREATE FUNCTION mcp_schema_version()
RETURNS integer
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT max(version) FROM public.refinery_schema_history
$$;

REVOKE ALL ON FUNCTION mcp_schema_version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mcp_schema_version() TO mcp_gateway_writer;
