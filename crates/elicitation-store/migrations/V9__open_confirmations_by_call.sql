-- A call repeated without a confirmation id takes up the caller's open confirmation of
-- exactly that call (approved and unused, else pending): found by caller, tool and argument
-- digest without reading the caller's whole history.
CREATE INDEX mcp_elicitations_open_confirmations_by_call
    ON mcp_elicitations (caller_subject, tool_name, call_digest, created_at)
    WHERE type = 'confirmation'
      AND consumed_at IS NULL
      AND status IN ('pending', 'responded');
