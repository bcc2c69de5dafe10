-- Tool-definition pins (tool integrity): the definition of each module's tool or prompt that
-- the gateway trusts, by the SHA-256 of its canonical JSON, and the changes modules made since,
-- each waiting for a person. Shared by every instance; catalog rows, not a caller's.
--
-- Pins are append-only: a key's versions 1, 2, … (the first seen, then each approved change).
-- The writer role may insert and read them, never rewrite or remove one.

CREATE TABLE mcp_pins (
    module     text NOT NULL CHECK (length(module) BETWEEN 1 AND 200),
    kind       text NOT NULL CHECK (kind IN ('tool', 'prompt')),
    name       text NOT NULL CHECK (length(name) BETWEEN 1 AND 512),
    version    integer NOT NULL CHECK (version >= 1),
    digest     bytea NOT NULL CHECK (octet_length(digest) = 32),
    definition jsonb NOT NULL,
    pinned_at  timestamptz NOT NULL,
    pinned_by  text,
    PRIMARY KEY (module, kind, name, version)
);

-- A definition a module listed that is not its pin, against the pin version it would replace
-- (NULL: a first sight held for approval). One pending change per proposal and pin.
CREATE TABLE mcp_definition_changes (
    id              uuid PRIMARY KEY,
    module          text NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('tool', 'prompt')),
    name            text NOT NULL,
    pinned_version  integer,
    proposed_digest bytea NOT NULL CHECK (octet_length(proposed_digest) = 32),
    proposed        jsonb NOT NULL,
    reasons         jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(reasons) = 'array'),
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'rejected')),
    seen_at         timestamptz NOT NULL,
    decided_at      timestamptz,
    decided_by      text,
    CHECK ((status = 'pending') = (decided_at IS NULL))
);

CREATE UNIQUE INDEX mcp_definition_changes_one_per_proposal
    ON mcp_definition_changes (module, kind, name, proposed_digest, coalesce(pinned_version, 0))
    WHERE status <> 'approved';

-- A decision is made once: a change leaves `pending` once, and nothing else of it changes.
CREATE FUNCTION mcp_definition_changes_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF OLD.status <> 'pending' OR NEW.status = 'pending'
       OR (NEW.id, NEW.module, NEW.kind, NEW.name, NEW.pinned_version, NEW.proposed_digest, NEW.proposed, NEW.reasons, NEW.seen_at)
          IS DISTINCT FROM
          (OLD.id, OLD.module, OLD.kind, OLD.name, OLD.pinned_version, OLD.proposed_digest, OLD.proposed, OLD.reasons, OLD.seen_at) THEN
        RAISE EXCEPTION 'definition change % is %; it is decided once', OLD.id, OLD.status
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER mcp_definition_changes_guard
    BEFORE UPDATE ON mcp_definition_changes
    FOR EACH ROW
    EXECUTE FUNCTION mcp_definition_changes_guard();

GRANT SELECT, INSERT ON mcp_pins TO mcp_gateway_writer;
GRANT SELECT, INSERT ON mcp_definition_changes TO mcp_gateway_writer;
GRANT UPDATE (status, decided_at, decided_by) ON mcp_definition_changes TO mcp_gateway_writer;

ALTER TABLE mcp_audit_events DROP CONSTRAINT mcp_audit_events_event_check;
ALTER TABLE mcp_audit_events ADD CONSTRAINT mcp_audit_events_event_check CHECK (event IN (
    'elicitation_requested', 'elicitation_responded',
    'elicitation_cancelled', 'elicitation_validation_failed',
    'elicitation_timeout', 'tool_call_held',
    'tool_call_forwarded', 'tool_call_rejected', 'tool_call_shadowed',
    'grant_created', 'grant_revoked',
    'tool_definition_changed', 'tool_definition_approved', 'tool_definition_rejected'));
