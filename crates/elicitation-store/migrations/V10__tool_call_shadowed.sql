-- A `shadow` policy rule forwards a call it would have held, and says so in the audit trail:
-- `tool_call_shadowed` joins the closed list of events. Gate decisions name the rule and the
-- policy digest in `detail` (no schema change: `detail` is jsonb).
ALTER TABLE mcp_audit_events DROP CONSTRAINT mcp_audit_events_event_check;
ALTER TABLE mcp_audit_events ADD CONSTRAINT mcp_audit_events_event_check CHECK (event IN (
    'elicitation_requested', 'elicitation_responded',
    'elicitation_cancelled', 'elicitation_validation_failed',
    'elicitation_timeout', 'tool_call_held',
    'tool_call_forwarded', 'tool_call_rejected', 'tool_call_shadowed'));
