-- Approvers: a confirmation may be answered by the members of a group (a value of the
-- identity provider's groups claim) besides its caller (approval_mode 'may'), instead of it
-- ('must'), or never by the caller itself ('four_eyes'). Set when the row is inserted (the
-- writer role has no UPDATE on these columns), only on confirmations of a tool call.

ALTER TABLE mcp_elicitations
    ADD COLUMN approver_group text
        CONSTRAINT mcp_elicitations_approver_group_len CHECK (char_length(approver_group) BETWEEN 1 AND 256),
    ADD COLUMN approval_mode text
        CONSTRAINT mcp_elicitations_approval_mode CHECK (approval_mode IN ('may', 'must', 'four_eyes')),
    ADD CONSTRAINT mcp_elicitations_approval_whole
        CHECK ((approver_group IS NULL) = (approval_mode IS NULL)),
    ADD CONSTRAINT mcp_elicitations_approval_only_on_calls
        CHECK (approver_group IS NULL OR tool_name IS NOT NULL);

-- The approver groups of the current transaction: a JSON array of strings the gateway sets
-- (transaction-local, from a verified token) when an approver reads or answers; empty
-- otherwise.
CREATE FUNCTION mcp_approver_groups() RETURNS text[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(
        array(SELECT jsonb_array_elements_text(nullif(current_setting('mcp.approver_groups', true), '')::jsonb)),
        '{}'::text[])
$$;

-- Row-level security, beside "the caller's own rows" (V1): the rows an approver group
-- answers are visible to a transaction that carries that group. Nothing else widens: a row
-- without an approver group is still only its caller's, and the writer role still updates
-- only the lifecycle columns, under the V2 trigger.
CREATE POLICY mcp_elicitations_of_approver ON mcp_elicitations
    USING (approver_group IS NOT NULL AND approver_group = ANY (mcp_approver_groups()))
    WITH CHECK (approver_group IS NOT NULL AND approver_group = ANY (mcp_approver_groups()));
