-- Wake listeners (on any gateway instance) when an elicitation is created too, so a person's
-- approvals page shows a new one as soon as it exists. The payload is only the id, as for
-- status changes (V1).
CREATE TRIGGER mcp_elicitations_created
    AFTER INSERT ON mcp_elicitations
    FOR EACH ROW
    EXECUTE FUNCTION mcp_elicitations_notify();
