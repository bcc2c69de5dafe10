-- A decision record nobody can rewrite (docs/audit.md): every audit row is sealed into a
-- chain, its `mac` the HMAC-SHA256 — keyed from the gateway's seal keys, which the
-- database never sees — of the previous sealed row's `mac` and this row's fields. A row
-- changed, removed, reordered or put between sealed rows breaks the chain at that row;
-- `mcp-gateway audit verify` walks it.
--
-- Rows are written as before (one statement with the change they record, no lock), and
-- sealed a little later by whichever instance holds the chain's advisory lock, in id
-- order, once they are settled (`recorded_at` older than any transaction that could still
-- commit a row below them). The writer role still has no UPDATE on the table: it seals
-- through `mcp_audit_seal`, which sets `mac` once, on the row after the head; a wrong MAC
-- it could set there is a broken link that verification reports.

ALTER TABLE mcp_audit_events
    ADD COLUMN recorded_at timestamptz,
    ADD COLUMN mac bytea CONSTRAINT mcp_audit_events_mac_len CHECK (octet_length(mac) = 32),
    ADD COLUMN mac_key text,
    ADD CONSTRAINT mcp_audit_events_mac_whole CHECK ((mac IS NULL) = (mac_key IS NULL));
-- New rows only (no rewrite of the table): rows written before stay NULL and count as
-- settled.
ALTER TABLE mcp_audit_events ALTER COLUMN recorded_at SET DEFAULT clock_timestamp();

CREATE INDEX mcp_audit_events_unsealed ON mcp_audit_events (id) WHERE mac IS NULL;

-- The forwarded call's outcome (`ok`, `tool_error`, `module_failed`): a forward with no
-- completion is visibly unfinished.
ALTER TABLE mcp_audit_events DROP CONSTRAINT mcp_audit_events_event_check;
ALTER TABLE mcp_audit_events ADD CONSTRAINT mcp_audit_events_event_check CHECK (event IN (
    'elicitation_requested', 'elicitation_responded',
    'elicitation_cancelled', 'elicitation_validation_failed',
    'elicitation_timeout', 'tool_call_held',
    'tool_call_forwarded', 'tool_call_rejected', 'tool_call_shadowed',
    'grant_created', 'grant_revoked',
    'tool_definition_changed', 'tool_definition_approved', 'tool_definition_rejected',
    'tool_call_completed'));

-- The chain's head and the rows after it, across callers (the sealer's view; it reads no
-- payload: the table holds none).
CREATE FUNCTION mcp_audit_after_head(max_rows integer)
RETURNS TABLE (id bigint, at timestamptz, event text, caller_subject text, caller_tenant text,
               elicitation_id uuid, tool_name text, detail text, recorded_at timestamptz,
               head_id bigint, head_mac bytea, head_key text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH head AS (
        SELECT e.id, e.mac, e.mac_key FROM public.mcp_audit_events e
        WHERE e.mac IS NOT NULL ORDER BY e.id DESC LIMIT 1
    )
    SELECT e.id, e.at, e.event, e.caller_subject, e.caller_tenant, e.elicitation_id,
           e.tool_name, e.detail::text, e.recorded_at,
           (SELECT id FROM head), (SELECT mac FROM head), (SELECT mac_key FROM head)
    FROM public.mcp_audit_events e
    WHERE e.id > coalesce((SELECT id FROM head), 0) AND e.mac IS NULL
    ORDER BY e.id
    LIMIT max_rows
$$;

-- Seals row `row_id` with `row_mac` under `key_id`: only a row not sealed yet, only the
-- first after the head (`after` is the head the MAC was computed on), so the chain grows
-- in order even if two sealers raced.
CREATE FUNCTION mcp_audit_seal(row_id bigint, after bigint, row_mac bytea, key_id text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    head bigint;
BEGIN
    SELECT e.id INTO head FROM public.mcp_audit_events e
    WHERE e.mac IS NOT NULL ORDER BY e.id DESC LIMIT 1;
    IF coalesce(head, 0) <> coalesce(after, 0) THEN
        RETURN false;
    END IF;
    UPDATE public.mcp_audit_events SET mac = row_mac, mac_key = key_id
    WHERE id = row_id AND mac IS NULL AND id > coalesce(after, 0);
    RETURN FOUND;
END
$$;

REVOKE ALL ON FUNCTION mcp_audit_after_head(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION mcp_audit_seal(bigint, bigint, bytea, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mcp_audit_after_head(integer) TO mcp_gateway_writer;
GRANT EXECUTE ON FUNCTION mcp_audit_seal(bigint, bigint, bytea, text) TO mcp_gateway_writer;
