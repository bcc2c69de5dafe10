-- A confirmation binds the tool's definition as well as the call (tool integrity): the digest
-- of the tool's pinned definition when the call was held. A redemption names the definition
-- the tool has now, so a confirmation given while the tool read one way never forwards a call
-- after it changed. Written once, by the INSERT that holds the call (the writer role has no
-- UPDATE on it), and bound into the sealed arguments' associated data as well.
--
-- Rows held before this migration have none: they approve nothing (the call is held anew).

ALTER TABLE mcp_elicitations
    ADD COLUMN definition_digest bytea,
    ADD CONSTRAINT mcp_elicitations_definition_digest_is_sha256
        CHECK (definition_digest IS NULL OR octet_length(definition_digest) = 32),
    ADD CONSTRAINT mcp_elicitations_definition_only_with_a_call
        CHECK (definition_digest IS NULL OR tool_name IS NOT NULL);
