-- Ended 2025-era sessions. A session's state travels sealed in its Mcp-Session-Id, so any
-- gateway instance can serve any of its requests; ending it (DELETE /mcp) is recorded here so
-- every instance refuses it from then on. Only the SHA-256 of the session id is kept, until
-- the session would have expired anyway.
CREATE TABLE mcp_ended_sessions (
    session_hash   bytea PRIMARY KEY CHECK (octet_length(session_hash) = 32),
    caller_subject text NOT NULL CHECK (length(caller_subject) BETWEEN 1 AND 512),
    caller_tenant  text CHECK (length(caller_tenant) BETWEEN 1 AND 512),
    ended_at       timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL
);

ALTER TABLE mcp_ended_sessions ENABLE ROW LEVEL SECURITY;

CREATE POLICY mcp_ended_sessions_of_caller ON mcp_ended_sessions
    TO mcp_gateway_writer
    USING (caller_subject = current_setting('mcp.caller_subject', true)
           AND caller_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''))
    WITH CHECK (caller_subject = current_setting('mcp.caller_subject', true)
           AND caller_tenant IS NOT DISTINCT FROM nullif(current_setting('mcp.caller_tenant', true), ''));

GRANT SELECT, INSERT ON mcp_ended_sessions TO mcp_gateway_writer;

-- Every instance hears of an ended session at once (the payload is the hash, in hex).
CREATE FUNCTION mcp_ended_sessions_notify() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_notify('mcp_session_ended', encode(NEW.session_hash, 'hex'));
    RETURN NULL;
END
$$;

CREATE TRIGGER mcp_ended_sessions_notify
    AFTER INSERT ON mcp_ended_sessions
    FOR EACH ROW
    EXECUTE FUNCTION mcp_ended_sessions_notify();

-- What an instance loads when it starts: the hashes of sessions ended and not yet expired
-- (across callers; hashes only).
CREATE FUNCTION mcp_ended_sessions()
RETURNS TABLE (session_hash bytea, expires_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT s.session_hash, s.expires_at FROM public.mcp_ended_sessions s
    WHERE s.expires_at > pg_catalog.now()
$$;

REVOKE ALL ON FUNCTION mcp_ended_sessions() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mcp_ended_sessions() TO mcp_gateway_writer;

-- The sweeper forgets ended sessions once they would have expired anyway.
CREATE FUNCTION mcp_forget_ended_sessions()
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH gone AS (
        DELETE FROM public.mcp_ended_sessions WHERE expires_at <= pg_catalog.now() RETURNING 1
    )
    SELECT count(*) FROM gone
$$;

REVOKE ALL ON FUNCTION mcp_forget_ended_sessions() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mcp_forget_ended_sessions() TO mcp_gateway_writer;
