-- Who recorded an elicitation's answer, as the gateway described them ("alice on the
-- approvals page"): shown in the person's history and copied into the audit trail's
-- elicitation_responded detail. Written once, in the same UPDATE that records the answer.

ALTER TABLE mcp_elicitations
    ADD COLUMN answered_by text
        CONSTRAINT mcp_elicitations_answered_by_len CHECK (char_length(answered_by) <= 256),
    ADD CONSTRAINT mcp_elicitations_answered_by_only_when_answered
        CHECK (answered_by IS NULL OR status = 'responded');

-- Like the answer itself (V2), it cannot change once the elicitation is finished.
CREATE FUNCTION mcp_elicitations_guard_answered_by() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF OLD.status <> 'pending' AND NEW.answered_by IS DISTINCT FROM OLD.answered_by THEN
        RAISE EXCEPTION 'elicitation % is %; who answered it cannot be changed', OLD.id, OLD.status
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER mcp_elicitations_guard_answered_by
    BEFORE UPDATE ON mcp_elicitations
    FOR EACH ROW
    EXECUTE FUNCTION mcp_elicitations_guard_answered_by();

GRANT UPDATE (answered_by) ON mcp_elicitations TO mcp_gateway_writer;
