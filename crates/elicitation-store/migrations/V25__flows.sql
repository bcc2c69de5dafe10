-- Callers' flows (issue 49): what each caller's forwarded calls touched — a label a tool
-- brought in (untrusted content, private data) or a secret a result showed the agent, by
-- its keyed fingerprint (HMAC-SHA-256 under a key derived from the seal key ring, cut to
-- 16 bytes; never the secret) — so that every instance sharing the store judges a call on
-- the whole flow (the lethal-trifecta rule, a secret sent out).
--
-- Rows are their caller's alone under row-level security: the writer role reads, adds and
-- trims only the rows of the caller its transaction is scoped to. A row is never changed.
-- Each caller keeps only the newest few rows of each kind (the writer trims on every
-- write); rows older than the longest window (7 days) are erased by the sweeper.

CREATE TABLE mcp_flows (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    caller_subject text NOT NULL CHECK (char_length(caller_subject) BETWEEN 1 AND 512),
    caller_tenant  text CHECK (char_length(caller_tenant) BETWEEN 1 AND 512),
    kind           text NOT NULL CHECK (kind IN ('untrusted', 'private', 'seen')),
    tool           text NOT NULL CHECK (char_length(tool) BETWEEN 1 AND 1024),
    fingerprint    bytea,
    at             timestamptz NOT NULL,
    CONSTRAINT mcp_flows_seen_has_its_fingerprint
        CHECK ((kind = 'seen') = (fingerprint IS NOT NULL)
               AND (fingerprint IS NULL OR octet_length(fingerprint) = 16))
);

CREATE INDEX mcp_flows_by_caller ON mcp_flows (caller_subject, (coalesce(caller_tenant, '')), at);
CREATE INDEX mcp_flows_by_age ON mcp_flows (at);

ALTER TABLE mcp_flows ENABLE ROW LEVEL SECURITY;

CREATE POLICY mcp_flows_of_caller ON mcp_flows
    TO mcp_gateway_writer
    USING (caller_subject = current_setting('mcp.caller_subject', true)
           AND caller_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''))
    WITH CHECK (caller_subject = current_setting('mcp.caller_subject', true)
           AND caller_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''));

GRANT SELECT, INSERT, DELETE ON mcp_flows TO mcp_gateway_writer;

-- The sweeper: rows older than the cutoff, at most max_rows a call. It reads every caller's
-- rows, so it trusts no caller's clock: whatever cutoff it is given, a row younger than the
-- longest window (7 days, by the database's clock) stays.
CREATE FUNCTION mcp_forget_old_flows(before timestamptz, max_rows integer)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH old AS (
        SELECT f.id FROM public.mcp_flows f
        WHERE f.at < LEAST(before, pg_catalog.now() - interval '7 days')
        ORDER BY f.at
        LIMIT max_rows
        FOR UPDATE OF f SKIP LOCKED
    ), gone AS (
        DELETE FROM public.mcp_flows f USING old WHERE f.id = old.id RETURNING f.id
    )
    SELECT count(*) FROM gone
$$;

REVOKE ALL ON FUNCTION mcp_forget_old_flows(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mcp_forget_old_flows(timestamptz, integer) TO mcp_gateway_writer;
