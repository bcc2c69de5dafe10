-- A finished elicitation cannot be changed, a consumption cannot be undone, and a row starts
-- life pending.
--
-- The writer role may update the lifecycle columns, so without this it could set a used
-- confirmation's consumed_at back to NULL (making it authorise a second call) or rewrite a
-- recorded answer. This trigger holds below the application, for every role: a row that is
-- no longer pending keeps its status, answer and timestamps; the only change it accepts is
-- recording the consumption of an approved confirmation, once. A pending row may only move
-- forward (the CHECK constraints of V1 keep it consistent) and is never consumed.

CREATE FUNCTION mcp_elicitations_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
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
    RETURN NEW;
END
$$;

CREATE TRIGGER mcp_elicitations_guard
    BEFORE UPDATE ON mcp_elicitations
    FOR EACH ROW
    EXECUTE FUNCTION mcp_elicitations_guard();

-- A new row is a fresh question: pending, unanswered, never consumed. So a row cannot be
-- inserted already answered or consumed, whoever inserts it.
CREATE FUNCTION mcp_elicitations_guard_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NEW.status <> 'pending' OR NEW.retries <> 0 OR NEW.consumed_at IS NOT NULL
       OR NEW.response_sealed IS NOT NULL OR NEW.confirmed IS NOT NULL
       OR NEW.responded_at IS NOT NULL OR NEW.cancelled_at IS NOT NULL THEN
        RAISE EXCEPTION 'a new elicitation must be pending and unanswered'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER mcp_elicitations_guard_insert
    BEFORE INSERT ON mcp_elicitations
    FOR EACH ROW
    EXECUTE FUNCTION mcp_elicitations_guard_insert();
