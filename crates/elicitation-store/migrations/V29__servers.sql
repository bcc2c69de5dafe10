-- Virtual servers (issue 51): the `[[servers]]` endpoint a held call was made on, NULL for
-- the gateway's own `/mcp`. A confirmation is bound to it like to the tool, the arguments
-- and the definition: it approves the call only on the server where it was asked, whose
-- rules held it. Written once, at insert (the writer role's UPDATE grant names no such
-- column).

ALTER TABLE mcp_elicitations
    ADD COLUMN server_name text
        CONSTRAINT mcp_elicitations_server_name CHECK (
            server_name IS NULL
            OR (char_length(server_name) BETWEEN 1 AND 64 AND server_name ~ '^[a-z0-9][a-z0-9_-]*$')
        );
