-- A declined confirmation is told to the agent once when it repeats the call without the
-- confirmation's id (a model that cannot set `_meta` has no other way to hear it): until
-- then an identical call takes it up, as it takes up an approved one, and gets the
-- refusal and the person's note; afterwards an identical call is asked about anew.
-- `reported_at` records that, once, for a declined confirmation only.
ALTER TABLE mcp_elicitations ADD COLUMN reported_at timestamptz;
ALTER TABLE mcp_elicitations ADD CONSTRAINT mcp_elicitations_reported_is_a_decline
    CHECK (reported_at IS NULL OR (type = 'confirmation' AND status = 'responded' AND confirmed IS FALSE));
GRANT UPDATE (reported_at) ON mcp_elicitations TO mcp_gateway_writer;

-- Once reported, it stays reported (the guard of V2 keeps every other column of a finished
-- row as it is).
CREATE FUNCTION mcp_elicitations_reported_once() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF OLD.reported_at IS NOT NULL AND NEW.reported_at IS DISTINCT FROM OLD.reported_at THEN
        RAISE EXCEPTION 'elicitation % was reported; it cannot be reported again', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER mcp_elicitations_reported_once
    BEFORE UPDATE OF reported_at ON mcp_elicitations
    FOR EACH ROW
    EXECUTE FUNCTION mcp_elicitations_reported_once();
