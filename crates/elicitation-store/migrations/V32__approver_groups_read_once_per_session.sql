-- The approver policies of mcp_elicitations (V6, V26) call mcp_approver_groups() in every
-- statement that reads or writes a row: in its scans and, for writes, in WITH CHECK. As a
-- SQL function with a SET clause and a sub-select it cannot be inlined, and PostgreSQL
-- parsed and planned its body anew in every statement that called it (issue 52: 9 % of the
-- cluster's CPU while redeeming confirmations, `perf`). The same function in PL/pgSQL is
-- compiled and its query planned once per connection, and a transaction that carries no
-- approver groups (every agent's) returns at once without running a query.
--
-- Same name, arguments, result and rules: the groups are the JSON array of strings the
-- gateway sets in `mcp.approver_groups` for the transaction; none when the setting is unset
-- or empty; any other text is an error, as before. The policies that name it are unchanged.
CREATE OR REPLACE FUNCTION mcp_approver_groups() RETURNS text[]
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    groups text := current_setting('mcp.approver_groups', true);
BEGIN
    IF groups IS NULL OR groups = '' THEN
        RETURN '{}'::text[];
    END IF;
    RETURN array(SELECT jsonb_array_elements_text(groups::jsonb));
END
$$;
