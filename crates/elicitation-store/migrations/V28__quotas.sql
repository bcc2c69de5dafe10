-- Quotas and budgets (issue 51): one counter per key (a quota's tool pattern with a caller,
-- or with everyone) and window (a UTC minute, hour or day). A take is one guarded upsert:
-- it counts only while the counter stays within the limit, and of concurrent takes on any
-- number of instances the row lock of ON CONFLICT lets exactly the limit through. Keys name
-- no argument; a caller's subject may be in one. Counters whose window ended are erased by
-- the sweeper.

CREATE TABLE mcp_quota_counters (
    key          text NOT NULL CHECK (char_length(key) BETWEEN 1 AND 1024),
    window_start timestamptz NOT NULL,
    window_end   timestamptz NOT NULL,
    used         bigint NOT NULL CHECK (used >= 0),
    PRIMARY KEY (key, window_start),
    CONSTRAINT mcp_quota_counters_window CHECK (window_end > window_start)
);

CREATE INDEX mcp_quota_counters_by_end ON mcp_quota_counters (window_end);

-- No caller owns a counter shared by everyone: the table is the gateway's, under row-level
-- security that lets the writer role use every row (and no other role any).
ALTER TABLE mcp_quota_counters ENABLE ROW LEVEL SECURITY;

CREATE POLICY mcp_quota_counters_of_writer ON mcp_quota_counters
    TO mcp_gateway_writer
    USING (true)
    WITH CHECK (true);

GRANT SELECT, INSERT, UPDATE (used) ON mcp_quota_counters TO mcp_gateway_writer;

-- The sweeper: counters whose window ended before the cutoff, at most max_rows a call.
CREATE FUNCTION mcp_forget_old_quota_counters(before timestamptz, max_rows integer)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH old AS (
        SELECT c.key, c.window_start FROM public.mcp_quota_counters c
        WHERE c.window_end < LEAST(before, pg_catalog.now())
        ORDER BY c.window_end
        LIMIT max_rows
        FOR UPDATE OF c SKIP LOCKED
    ), gone AS (
        DELETE FROM public.mcp_quota_counters c USING old
        WHERE c.key = old.key AND c.window_start = old.window_start RETURNING 1
    )
    SELECT count(*) FROM gone
$$;

REVOKE ALL ON FUNCTION mcp_forget_old_quota_counters(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mcp_forget_old_quota_counters(timestamptz, integer) TO mcp_gateway_writer;
