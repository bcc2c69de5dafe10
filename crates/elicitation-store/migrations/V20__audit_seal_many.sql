-- The audit chain sealed a batch at a time (V17 sealed one row per statement, 500 rows per
-- sweep: under a sustained load of more than a few gated calls a second its unsealed tail
-- grew without end). The same rule as `mcp_audit_seal`, applied in one statement to rows in
-- order: the head must be `after`; each row is sealed once, only after the one before
-- (the first after the head) with no unsealed row between them (V17's function allowed
-- that gap); the pass stops at the first row that cannot be sealed. The writer role still
-- has no UPDATE on the table.
CREATE FUNCTION mcp_audit_seal_many(after bigint, row_ids bigint[], row_macs bytea[], key_id text)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    head bigint;
    previous bigint := coalesce(after, 0);
    sealed integer := 0;
BEGIN
    IF coalesce(cardinality(row_ids), 0) <> coalesce(cardinality(row_macs), 0) THEN
        RAISE EXCEPTION 'mcp_audit_seal_many: % row ids but % MACs',
            cardinality(row_ids), cardinality(row_macs);
    END IF;
    SELECT e.id INTO head FROM public.mcp_audit_events e
    WHERE e.mac IS NOT NULL ORDER BY e.id DESC LIMIT 1;
    IF coalesce(head, 0) <> previous THEN
        RETURN 0;
    END IF;
    FOR i IN 1 .. coalesce(cardinality(row_ids), 0) LOOP
        EXIT WHEN row_ids[i] IS NULL OR row_ids[i] <= previous;
        -- No unsealed row may be left behind between the last sealed one and this one.
        EXIT WHEN EXISTS (SELECT 1 FROM public.mcp_audit_events g
                          WHERE g.mac IS NULL AND g.id > previous AND g.id < row_ids[i]);
        UPDATE public.mcp_audit_events SET mac = row_macs[i], mac_key = key_id
        WHERE id = row_ids[i] AND mac IS NULL;
        EXIT WHEN NOT FOUND;
        previous := row_ids[i];
        sealed := sealed + 1;
    END LOOP;
    RETURN sealed;
END
$$;

REVOKE ALL ON FUNCTION mcp_audit_seal_many(bigint, bigint[], bytea[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mcp_audit_seal_many(bigint, bigint[], bytea[], text) TO mcp_gateway_writer;
