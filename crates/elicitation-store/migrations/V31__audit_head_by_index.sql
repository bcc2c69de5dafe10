-- Sealing the audit chain cost more the busier the gateway was (issue 52). Rows are sealed
-- only once they are 15 s old, so the rows after the chain's head are always at least the
-- last 15 s of audit rows — tens of thousands at a few thousand confirmed calls a second —
-- and every lookup of the head ("the sealed row with the highest id") walked the primary key
-- backwards over all of them: twice per 500 rows sealed (mcp_audit_after_head and
-- mcp_audit_seal_many), 3–5 ms each at 2,000 calls/s. An index of the sealed rows finds the
-- head in one step, however long the unsealed tail.
--
-- And mcp_audit_seal_many sealed row by row (an EXISTS and an UPDATE per row, ~40 µs a row);
-- it now checks the whole batch and seals it in one UPDATE (~15 µs a row). The rule is V20's:
-- the head must be `after`; the ids must be the unsealed rows that follow it, in order, with
-- none skipped; sealing stops at the first id that breaks that. Two sealers that race no
-- longer meet on row locks one row at a time, so the function takes a transaction-level
-- advisory lock of its own (not the sweep's session lock, which a sealer holds for a whole
-- sweep): the second waits, finds another head and seals nothing, as before. The rows it is
-- about to seal are locked as they are read, so a row sealed meanwhile by V17's one-row
-- function (still the writer's to call) breaks the batch there, as V20's loop did. Ids and
-- MACs must be one-dimensional arrays indexed from 1 (V20 sealed nothing of any other shape;
-- unnest would flatten them).
--
-- On a large table the index build holds writes to mcp_audit_events while it runs.
CREATE INDEX mcp_audit_events_sealed ON mcp_audit_events (id) WHERE mac IS NOT NULL;

CREATE OR REPLACE FUNCTION mcp_audit_seal_many(after bigint, row_ids bigint[], row_macs bytea[], key_id text)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    head bigint;
    sealed integer;
BEGIN
    IF coalesce(cardinality(row_ids), 0) <> coalesce(cardinality(row_macs), 0) THEN
        RAISE EXCEPTION 'mcp_audit_seal_many: % row ids but % MACs',
            cardinality(row_ids), cardinality(row_macs);
    END IF;
    IF array_ndims(row_ids) > 1 OR array_ndims(row_macs) > 1
       OR array_lower(row_ids, 1) <> 1 OR array_lower(row_macs, 1) <> 1 THEN
        RAISE EXCEPTION 'mcp_audit_seal_many: the ids and MACs must be one-dimensional arrays from 1';
    END IF;
    -- One batch at a time: the head read next stays the head until this transaction ends.
    PERFORM pg_advisory_xact_lock(7306926547146614645);
    SELECT e.id INTO head FROM public.mcp_audit_events e
    WHERE e.mac IS NOT NULL ORDER BY e.id DESC LIMIT 1;
    IF coalesce(head, 0) <> coalesce(after, 0) THEN
        RETURN 0;
    END IF;
    WITH given AS (
        SELECT g.id, g.mac, g.n FROM unnest(row_ids, row_macs) WITH ORDINALITY AS g(id, mac, n)
    ), next AS (
        -- The unsealed rows after the head, in order, as many as were given.
        SELECT u.id, row_number() OVER (ORDER BY u.id) AS n FROM (
            SELECT e.id FROM public.mcp_audit_events e
            WHERE e.mac IS NULL AND e.id > coalesce(after, 0)
            ORDER BY e.id LIMIT coalesce(cardinality(row_ids), 0)
            -- A row another statement is sealing (V17's one-row function) is waited for and,
            -- once sealed, drops out here: the batch breaks at it instead of sealing past it.
            FOR UPDATE) u
    ), first_break AS (
        -- The first position whose id is not the next unsealed row (NULL ids included).
        SELECT min(g.n) AS n FROM given g LEFT JOIN next x ON x.n = g.n
        WHERE x.id IS DISTINCT FROM g.id
    ), run AS (
        SELECT g.id, g.mac FROM given g
        WHERE g.n < coalesce((SELECT n FROM first_break), 9223372036854775807)
    )
    UPDATE public.mcp_audit_events e SET mac = run.mac, mac_key = key_id
    FROM run WHERE e.id = run.id AND e.mac IS NULL;
    GET DIAGNOSTICS sealed = ROW_COUNT;
    RETURN sealed;
END
$$;
