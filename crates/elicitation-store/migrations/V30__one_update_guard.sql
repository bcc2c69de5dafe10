-- One guard for every UPDATE of an elicitation (issue 52): the four BEFORE UPDATE triggers of
-- V2 (a finished row keeps its status, answer and timestamps; a consumption is once and only
-- of an answered row; retries only count up), V5 (who answered), V11 (a decline's note) and
-- V13 (edited arguments) become one function run once per updated row, in the order their
-- triggers fired (by name), with the same errors. Redeeming a confirmation — the update every
-- confirmed call makes — ran four PL/pgSQL functions; it runs one. What each guard holds is
-- unchanged, and so is every test that tries to break it.

CREATE FUNCTION mcp_elicitations_guard_update() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- V2
    IF OLD.consumed_at IS NOT NULL AND NEW.consumed_at IS DISTINCT FROM OLD.consumed_at THEN
        RAISE EXCEPTION 'elicitation % was consumed; its consumption cannot be changed', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF OLD.status <> 'pending' AND (
           NEW.status IS DISTINCT FROM OLD.status
        OR NEW.response_sealed IS DISTINCT FROM OLD.response_sealed
        OR NEW.response_key_id IS DISTINCT FROM OLD.response_key_id
        OR NEW.confirmed IS DISTINCT FROM OLD.confirmed
        OR NEW.retries IS DISTINCT FROM OLD.retries
        OR NEW.responded_at IS DISTINCT FROM OLD.responded_at
        OR NEW.cancelled_at IS DISTINCT FROM OLD.cancelled_at
        OR NEW.cancel_reason IS DISTINCT FROM OLD.cancel_reason) THEN
        RAISE EXCEPTION 'elicitation % is %; a finished elicitation cannot be changed', OLD.id, OLD.status
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.retries < OLD.retries THEN
        RAISE EXCEPTION 'elicitation %: retries only count up', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.consumed_at IS NOT NULL AND OLD.status <> 'responded' THEN
        RAISE EXCEPTION 'elicitation % is not an answered confirmation; it cannot be consumed', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF OLD.status <> 'pending' THEN
        -- V5
        IF NEW.answered_by IS DISTINCT FROM OLD.answered_by THEN
            RAISE EXCEPTION 'elicitation % is %; who answered it cannot be changed', OLD.id, OLD.status
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        -- V13
        IF NEW.edited_sealed IS DISTINCT FROM OLD.edited_sealed
           OR NEW.edited_key_id IS DISTINCT FROM OLD.edited_key_id
           OR NEW.edited_digest IS DISTINCT FROM OLD.edited_digest THEN
            RAISE EXCEPTION 'elicitation % is %; the arguments it approved cannot be changed', OLD.id, OLD.status
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        -- V11
        IF NEW.note_sealed IS DISTINCT FROM OLD.note_sealed
           OR NEW.note_key_id IS DISTINCT FROM OLD.note_key_id THEN
            RAISE EXCEPTION 'elicitation % is %; its note cannot be changed', OLD.id, OLD.status
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    END IF;
    RETURN NEW;
END
$$;

-- The new trigger is in place before the old ones go, in one transaction: no update runs
-- unguarded.
CREATE TRIGGER mcp_elicitations_guard_update
    BEFORE UPDATE ON mcp_elicitations
    FOR EACH ROW
    EXECUTE FUNCTION mcp_elicitations_guard_update();

DROP TRIGGER mcp_elicitations_guard ON mcp_elicitations;
DROP TRIGGER mcp_elicitations_guard_answered_by ON mcp_elicitations;
DROP TRIGGER mcp_elicitations_guard_note ON mcp_elicitations;
DROP TRIGGER mcp_elicitations_guard_edited ON mcp_elicitations;
DROP FUNCTION mcp_elicitations_guard();
DROP FUNCTION mcp_elicitations_guard_answered_by();
DROP FUNCTION mcp_elicitations_guard_note();
DROP FUNCTION mcp_elicitations_guard_edited();
