-- A person's note with a declined confirmation ("use the staging bucket"), told to the agent.
-- Sealed like the answer (AES-256-GCM, bound to the row and the column `note`), written once
-- in the same UPDATE that records the answer, and only with a decline.

ALTER TABLE mcp_elicitations
    ADD COLUMN note_sealed bytea,
    ADD COLUMN note_key_id text,
    ADD CONSTRAINT mcp_elicitations_note_sealed_with_its_key
        CHECK ((note_sealed IS NULL) = (note_key_id IS NULL)),
    ADD CONSTRAINT mcp_elicitations_note_only_with_a_decline
        CHECK (note_sealed IS NULL OR (status = 'responded' AND confirmed = false));

-- Like the answer itself (V2), it cannot change once the elicitation is finished.
CREATE FUNCTION mcp_elicitations_guard_note() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF OLD.status <> 'pending' AND (NEW.note_sealed IS DISTINCT FROM OLD.note_sealed
                                    OR NEW.note_key_id IS DISTINCT FROM OLD.note_key_id) THEN
        RAISE EXCEPTION 'elicitation % is %; its note cannot be changed', OLD.id, OLD.status
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER mcp_elicitations_guard_note
    BEFORE UPDATE ON mcp_elicitations
    FOR EACH ROW
    EXECUTE FUNCTION mcp_elicitations_guard_note();

GRANT UPDATE (note_sealed, note_key_id) ON mcp_elicitations TO mcp_gateway_writer;
