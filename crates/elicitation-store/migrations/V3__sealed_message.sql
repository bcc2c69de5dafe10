-- The message of an elicitation is sealed like its payloads.
--
-- A confirmation's message shows the call's arguments to the person, so a message in clear
-- put the arguments in the database in clear. From now on the gateway writes the message
-- sealed (AES-256-GCM, bound to the row and caller) into message_sealed and leaves message
-- NULL. Rows written before this migration keep their clear message; the gateway reads both.

ALTER TABLE mcp_elicitations
    ALTER COLUMN message DROP NOT NULL,
    ADD COLUMN message_sealed bytea,
    ADD COLUMN message_key_id text,
    ADD CONSTRAINT mcp_elicitations_message_once
        CHECK ((message IS NULL) <> (message_sealed IS NULL)),
    ADD CONSTRAINT mcp_elicitations_message_key
        CHECK ((message_sealed IS NULL) = (message_key_id IS NULL));

-- The writer's table-wide INSERT covers the new columns; it has no UPDATE on them (they are
-- not lifecycle columns), so a message cannot be rewritten.

-- New rows carry the sealed message only: a clear message is accepted from old rows, never
-- written anew (it is not authenticated, so it could show a person anything).
CREATE FUNCTION mcp_elicitations_sealed_message() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NEW.message IS NOT NULL THEN
        RAISE EXCEPTION 'a new elicitation''s message must be sealed (message_sealed)'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER mcp_elicitations_sealed_message
    BEFORE INSERT ON mcp_elicitations
    FOR EACH ROW
    EXECUTE FUNCTION mcp_elicitations_sealed_message();
