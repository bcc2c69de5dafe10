-- The outbox of notices (docs/notifications.md): that an elicitation waits for a person,
-- was answered, or expired. A trigger records the notice in the statement that makes the
-- change, so no change is committed without its notice, whatever happens to an instance
-- afterwards; notifiers on any instance claim notices for a while (FOR UPDATE SKIP
-- LOCKED), deliver them and settle them. A claim that lapses (its instance died) is
-- claimed again by another, with the same delivery id.
--
-- A notice holds no payload: the elicitation, its caller, what happened. Which events are
-- recorded is the connection's setting `mcp.notify_events` (a comma-separated list the
-- gateway sets on its connections from its `[[notify]]` sinks): without sinks, nothing is
-- recorded and the hot path pays one setting read per change.

CREATE TABLE mcp_notices (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery       uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    -- Erased with its elicitation (retention, V7).
    elicitation_id uuid NOT NULL REFERENCES mcp_elicitations (id) ON DELETE CASCADE,
    caller_subject text NOT NULL,
    caller_tenant  text,
    event          text NOT NULL CHECK (event IN ('waiting', 'answered', 'expired')),
    at             timestamptz NOT NULL DEFAULT clock_timestamp(),
    due_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    claimed_until  timestamptz,
    attempts       integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    delivered      text[] NOT NULL DEFAULT '{}',
    done_at        timestamptz
);

-- "The notices due", the notifiers' one question.
CREATE INDEX mcp_notices_due ON mcp_notices (due_at, id) WHERE done_at IS NULL;
-- The cascade from an erased elicitation.
CREATE INDEX mcp_notices_of_elicitation ON mcp_notices (elicitation_id);

-- The events this connection's gateway records notices of.
CREATE FUNCTION mcp_notice_events() RETURNS text[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(string_to_array(nullif(current_setting('mcp.notify_events', true), ''), ','), '{}'::text[])
$$;

-- Records the notice of an elicitation's creation or change of status. Runs as the
-- migration's owner: the writer role has no INSERT on the outbox, so it cannot make up a
-- notice of an elicitation that did not change.
CREATE FUNCTION mcp_elicitations_notice() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    ev text;
    at timestamptz;
BEGIN
    IF TG_OP = 'INSERT' THEN
        ev := 'waiting';
    ELSIF NEW.status IS NOT DISTINCT FROM OLD.status THEN
        RETURN NULL;
    ELSIF NEW.status = 'expired' THEN
        ev := 'expired';
    ELSIF NEW.status IN ('responded', 'cancelled', 'validation_failed') THEN
        ev := 'answered';
    ELSE
        RETURN NULL;
    END IF;
    IF ev = ANY (public.mcp_notice_events()) THEN
        -- When it happened by the gateway's clock (the row's own times), so a notice is
        -- due by the clock the notifiers claim with, whatever the database's says.
        at := coalesce(CASE ev
                WHEN 'waiting' THEN NEW.created_at
                WHEN 'expired' THEN NEW.expires_at
                ELSE coalesce(NEW.responded_at, NEW.cancelled_at) END,
            clock_timestamp());
        INSERT INTO public.mcp_notices (elicitation_id, caller_subject, caller_tenant, event, at, due_at)
        VALUES (NEW.id, NEW.caller_subject, NEW.caller_tenant, ev, at, at);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER mcp_elicitations_notice_created
    AFTER INSERT ON mcp_elicitations
    FOR EACH ROW
    EXECUTE FUNCTION mcp_elicitations_notice();

CREATE TRIGGER mcp_elicitations_notice_changed
    AFTER UPDATE OF status ON mcp_elicitations
    FOR EACH ROW
    EXECUTE FUNCTION mcp_elicitations_notice();

-- The notifier claims and settles; it never writes a notice, its elicitation or its event.
GRANT SELECT ON mcp_notices TO mcp_gateway_writer;
GRANT UPDATE (due_at, claimed_until, attempts, delivered, done_at) ON mcp_notices TO mcp_gateway_writer;
GRANT EXECUTE ON FUNCTION mcp_notice_events() TO mcp_gateway_writer;
