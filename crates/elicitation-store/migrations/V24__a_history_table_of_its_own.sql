-- The store's migrations are recorded in a table of its own, mcp_gateway_migrations, not in
-- refinery's default refinery_schema_history: a service that embeds the store and runs its
-- own refinery migrations in the same database keeps its history apart (before, the two
-- sets clashed: "applied migration V1__mcp_elicitations is different than filesystem one").
-- A database migrated before this has its history copied into the new table by the
-- migration runner (elicitation_store::migrate) before this file runs; refinery's table is
-- left as it is.

-- The newest migration applied, read from the store's own history (readiness compares it
-- with the build's).
CREATE OR REPLACE FUNCTION mcp_schema_version()
RETURNS integer
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT max(version) FROM public.mcp_gateway_migrations
$$;
