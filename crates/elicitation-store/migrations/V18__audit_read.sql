-- The audit trail for a reader with `audit:read` (`GET /v1/audit`, the approvals page's
-- Audit view): every caller's events in the reader's tenant — the tenant of the
-- transaction's scope (`mcp.caller_tenant`, set by the gateway from a verified token, as
-- for row-level security; none: the events without a tenant) — filtered, a page at a time
-- in id order either way. The table holds no arguments or payloads; the writer role still
-- reads only its caller's rows directly.

CREATE FUNCTION mcp_audit_read(p_since timestamptz, p_until timestamptz, p_tool text,
                               p_tool_prefix boolean, p_caller text, p_outcome text,
                               p_newest boolean, p_cursor bigint, p_limit integer)
RETURNS TABLE (id bigint, at timestamptz, event text, caller_subject text, caller_tenant text,
               elicitation_id uuid, tool_name text, detail text, sealed boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    reader_tenant text := nullif(current_setting('mcp.caller_tenant', true), '');
    n integer := least(greatest(coalesce(p_limit, 100), 1), 1000);
BEGIN
    IF p_newest THEN
        RETURN QUERY
        SELECT e.id, e.at, e.event, e.caller_subject, e.caller_tenant, e.elicitation_id,
               e.tool_name, e.detail::text, e.mac IS NOT NULL
        FROM public.mcp_audit_events e
        WHERE e.caller_tenant IS NOT DISTINCT FROM reader_tenant
          AND (p_cursor IS NULL OR e.id < p_cursor)
          AND (p_since IS NULL OR e.at >= p_since)
          AND (p_until IS NULL OR e.at < p_until)
          AND (p_tool IS NULL OR CASE WHEN p_tool_prefix
                                      THEN left(e.tool_name, length(p_tool)) = p_tool
                                      ELSE e.tool_name = p_tool END)
          AND (p_caller IS NULL OR e.caller_subject = p_caller)
          AND (p_outcome IS NULL OR e.event = 'tool_call_' || p_outcome
               OR e.detail->>'outcome' = p_outcome OR e.detail->>'reason' = p_outcome)
        ORDER BY e.id DESC
        LIMIT n;
    ELSE
        RETURN QUERY
        SELECT e.id, e.at, e.event, e.caller_subject, e.caller_tenant, e.elicitation_id,
               e.tool_name, e.detail::text, e.mac IS NOT NULL
        FROM public.mcp_audit_events e
        WHERE e.caller_tenant IS NOT DISTINCT FROM reader_tenant
          AND (p_cursor IS NULL OR e.id > p_cursor)
          AND (p_since IS NULL OR e.at >= p_since)
          AND (p_until IS NULL OR e.at < p_until)
          AND (p_tool IS NULL OR CASE WHEN p_tool_prefix
                                      THEN left(e.tool_name, length(p_tool)) = p_tool
                                      ELSE e.tool_name = p_tool END)
          AND (p_caller IS NULL OR e.caller_subject = p_caller)
          AND (p_outcome IS NULL OR e.event = 'tool_call_' || p_outcome
               OR e.detail->>'outcome' = p_outcome OR e.detail->>'reason' = p_outcome)
        ORDER BY e.id
        LIMIT n;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION mcp_audit_read(timestamptz, timestamptz, text, boolean, text, text, boolean, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mcp_audit_read(timestamptz, timestamptz, text, boolean, text, text, boolean, bigint, integer) TO mcp_gateway_writer;
