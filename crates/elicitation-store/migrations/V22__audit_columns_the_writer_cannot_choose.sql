-- The writer role inserted audit rows with a table-wide INSERT, so it could choose
-- `recorded_at` (and `mac`, `mac_key`, and `id` through OVERRIDING SYSTEM VALUE). One row
-- dated in the future stopped the sealer for good (it seals in id order, only what has
-- settled), and every change after it went unverified. The writer now names only the
-- columns the gateway writes; the database sets the rest. A revoke of the table privilege
-- takes column privileges with it, so the column grant comes after.
REVOKE INSERT ON mcp_audit_events FROM mcp_gateway_writer;
GRANT INSERT (at, event, caller_subject, caller_tenant, elicitation_id, tool_name, detail)
    ON mcp_audit_events TO mcp_gateway_writer;

-- No role records a row in the future (the owner's own functions, a restore): a row's
-- `recorded_at` is at most the moment it is written. Not part of a row's MAC, so a restored
-- chain still verifies.
CREATE FUNCTION mcp_audit_events_recorded_now() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NEW.recorded_at IS NULL OR NEW.recorded_at > clock_timestamp() THEN
        NEW.recorded_at := clock_timestamp();
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER mcp_audit_events_recorded_now BEFORE INSERT ON mcp_audit_events
    FOR EACH ROW EXECUTE FUNCTION mcp_audit_events_recorded_now();
