-- The arguments a person approved a held call with instead of the agent's: what the call is
-- forwarded with. Sealed like the answer (AES-256-GCM, bound to the row and the column
-- `edited_arguments`), with their digest beside it (the audit row keeps it next to the call's
-- own), written once by the UPDATE that records the approval, and only with an approval of a
-- held call.

ALTER TABLE mcp_elicitations
    ADD COLUMN edited_sealed bytea,
    ADD COLUMN edited_key_id text,
    ADD COLUMN edited_digest bytea,
    ADD CONSTRAINT mcp_elicitations_edited_sealed_with_its_key_and_digest
        CHECK ((edited_sealed IS NULL) = (edited_key_id IS NULL)
               AND (edited_sealed IS NULL) = (edited_digest IS NULL)),
    ADD CONSTRAINT mcp_elicitations_edited_digest_is_sha256
        CHECK (edited_digest IS NULL OR octet_length(edited_digest) = 32),
    ADD CONSTRAINT mcp_elicitations_edited_only_with_an_approval_of_a_call
        CHECK (edited_sealed IS NULL
               OR (status = 'responded' AND confirmed AND type = 'confirmation' AND tool_name IS NOT NULL));

-- Like the answer itself (V2) and a note (V11): once the elicitation is answered, the
-- arguments it approved cannot change, so nobody with the writer role can swap what runs
-- after a person approved it.
CREATE FUNCTION mcp_elicitations_guard_edited() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF OLD.status <> 'pending' AND (NEW.edited_sealed IS DISTINCT FROM OLD.edited_sealed
                                    OR NEW.edited_key_id IS DISTINCT FROM OLD.edited_key_id
                                    OR NEW.edited_digest IS DISTINCT FROM OLD.edited_digest) THEN
        RAISE EXCEPTION 'elicitation % is %; the arguments it approved cannot be changed', OLD.id, OLD.status
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER mcp_elicitations_guard_edited
    BEFORE UPDATE ON mcp_elicitations
    FOR EACH ROW
    EXECUTE FUNCTION mcp_elicitations_guard_edited();

GRANT UPDATE (edited_sealed, edited_key_id, edited_digest) ON mcp_elicitations TO mcp_gateway_writer;
