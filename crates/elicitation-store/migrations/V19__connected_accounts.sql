-- Connected accounts: the OAuth tokens a person got at a module's authorization server
-- (a module with auth.kind = "user"), so that their calls to that module run as them.
-- One row per caller and module; connecting again or a refresh replaces the tokens.
--
-- The tokens (access and refresh) are sealed like arguments (AES-256-GCM, bound to the
-- column and the caller; the module they were issued for is inside the sealed text and
-- checked on opening). Rows are their caller's alone under row-level security: the writer
-- role sees, changes and removes only the rows of the caller its transaction is scoped to,
-- and may not move a row to another caller or module.

CREATE TABLE mcp_accounts (
    id             uuid PRIMARY KEY,
    caller_subject text NOT NULL CHECK (char_length(caller_subject) BETWEEN 1 AND 512),
    caller_tenant  text CHECK (char_length(caller_tenant) BETWEEN 1 AND 512),
    module         text NOT NULL CHECK (char_length(module) BETWEEN 1 AND 200),
    tokens_sealed  bytea NOT NULL,
    tokens_key_id  text NOT NULL,
    connected_at   timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    -- One more with every change of the tokens: a refresh replaces (or a refused one
    -- removes) exactly the tokens it read, never newer ones another instance stored.
    version        bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    CONSTRAINT mcp_accounts_updated_after_connected CHECK (updated_at >= connected_at)
);

CREATE UNIQUE INDEX mcp_accounts_one_per_module
    ON mcp_accounts (caller_subject, (coalesce(caller_tenant, '')), module);

ALTER TABLE mcp_accounts ENABLE ROW LEVEL SECURITY;

CREATE POLICY mcp_accounts_of_caller ON mcp_accounts
    TO mcp_gateway_writer
    USING (caller_subject = current_setting('mcp.caller_subject', true)
           AND caller_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''))
    WITH CHECK (caller_subject = current_setting('mcp.caller_subject', true)
           AND caller_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''));

GRANT SELECT, INSERT, DELETE ON mcp_accounts TO mcp_gateway_writer;
GRANT UPDATE (tokens_sealed, tokens_key_id, connected_at, updated_at, version) ON mcp_accounts TO mcp_gateway_writer;
