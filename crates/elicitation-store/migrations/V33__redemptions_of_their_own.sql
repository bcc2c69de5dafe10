-- A confirmation's redemption is a row of its own (issue 52). Redeeming set `consumed_at` on
-- the elicitation, so every confirmed call wrote a new version of that wide row and paid for
-- it: its 32 CHECK constraints (PostgreSQL reads their stored expressions back per
-- statement), the row-level security WITH CHECK, the guard trigger and the WAL of the whole
-- row. Now it inserts (elicitation id, time) here, and the primary key is what makes it
-- once: a second redemption of the same confirmation, racing or late, conflicts and
-- inserts nothing.
--
-- The writer role may insert and read redemptions, never update or delete them (a used
-- confirmation cannot be made usable again), and only insert one for its own answered,
-- approved, unexpired confirmation: the policy's WITH CHECK reads the elicitation under
-- that table's own row-level security and names the caller again. A redemption is visible
-- exactly when its elicitation is. Retention erases a row's redemption with the row.
--
-- A running older instance still redeems by setting `consumed_at` (the column and its grant
-- stay, for a rolling upgrade): the guard records that redemption here too, and where the
-- confirmation was redeemed here first, its update does nothing, so the older instance
-- refuses the call as already used. Readers take the time from this table only; the
-- migration copies in every redemption made before it. An older instance does not read
-- this table: until it is replaced it takes a confirmation redeemed here for unused, so an
-- identical call there without a confirmation id is refused as used and asked anew
-- (never run twice). Keep the mixed-version window short.
--
-- No redemption may be committed between the copy below and the new guard: the table is
-- locked against writes (reads go on) until this migration commits; on a large table
-- that holds every instance's writes for the length of the copy.
LOCK TABLE mcp_elicitations IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE mcp_redemptions (
    elicitation_id uuid PRIMARY KEY REFERENCES mcp_elicitations (id) ON DELETE CASCADE,
    consumed_at    timestamptz NOT NULL
);

INSERT INTO mcp_redemptions (elicitation_id, consumed_at)
SELECT id, consumed_at FROM mcp_elicitations WHERE consumed_at IS NOT NULL;

ALTER TABLE mcp_redemptions ENABLE ROW LEVEL SECURITY;

-- The WITH CHECK finds the elicitation by its id alone and tests the rest in the select
-- list (NULL, so refused, where the id names no row the writer may see): with the tests in
-- the WHERE clause the planner, while the table's statistics were young, chose another
-- index that their columns matched (the caller's rows; the open confirmations by expiry)
-- and scanned all of a busy caller's rows on every redemption (3–5 ms a redemption in the
-- first round of `mcp-bench confirmed`, measured). The caller is compared as a pair, so a
-- tenant-less caller's NULL matches NULL.
CREATE POLICY mcp_redemptions_of_visible ON mcp_redemptions
    TO mcp_gateway_writer
    USING (EXISTS (SELECT 1 FROM mcp_elicitations e WHERE e.id = mcp_redemptions.elicitation_id))
    WITH CHECK ((
        SELECT (e.caller_subject, e.caller_tenant) IS NOT DISTINCT FROM
                   (current_setting('mcp.caller_subject', true),
                    nullif(current_setting('mcp.caller_tenant', true), ''))
               AND e.type = 'confirmation'
               AND e.status = 'responded'
               AND e.confirmed
               AND e.expires_at > mcp_redemptions.consumed_at
        FROM mcp_elicitations e
        WHERE e.id = mcp_redemptions.elicitation_id) IS TRUE);

GRANT SELECT, INSERT ON mcp_redemptions TO mcp_gateway_writer;

-- V30's guard, with the older instance's redemption recorded at the end.
CREATE OR REPLACE FUNCTION mcp_elicitations_guard_update() RETURNS trigger
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
    -- V33: an older instance's redemption is recorded where redemptions are; where the
    -- confirmation was redeemed there already, this update does nothing.
    IF NEW.consumed_at IS NOT NULL AND OLD.consumed_at IS NULL THEN
        INSERT INTO public.mcp_redemptions (elicitation_id, consumed_at)
        VALUES (OLD.id, NEW.consumed_at)
        ON CONFLICT (elicitation_id) DO NOTHING;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    RETURN NEW;
END
$$;
