-- Upgrade step (schema version 3, no version change): a task's port scope,
-- `tasks.ports`, an nmap port list validated by port_scope_is_valid(). Nullable and
-- unused by an older binary, so a rollback to it needs nothing undone.
--
-- Runs after migrate_execution_lifecycle.sql (the Rust runner, under pg_advisory_lock). A
-- fresh database gets init.sql instead, which already has all of this and the marker, so
-- there this file changes nothing.
--
-- One transaction: sent as one simple query (batch_execute = one implicit transaction);
-- by hand: psql -X -1 -v ON_ERROR_STOP=1 -f schema/migrate_task_ports.sql.
-- Idempotent: the column is added behind a catalog check.
--
-- Cost, first run only: a nullable column without a default is a catalog change (no
-- rewrite), under a short ACCESS EXCLUSIVE lock on tasks; the CHECK has nothing to scan
-- (every existing row is NULL, and NULL passes).

-- Whether a task's port scope is a port list as `nmap -p` takes it and scanstore reads it:
-- ports and ascending ranges within 0-65535, comma-separated, each optionally after T:, U:
-- or S: (TCP, UDP, SCTP), at most 1024 characters. Service names, open ranges (`-100`,
-- `1-`) and wildcards are not taken: a scope must say exactly which endpoints it covers.
CREATE OR REPLACE FUNCTION port_scope_is_valid(scope text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
    SELECT length(scope) <= 1024
       AND scope ~ '^([TUS]:)?[0-9]{1,5}(-[0-9]{1,5})?(,([TUS]:)?[0-9]{1,5}(-[0-9]{1,5})?)*$'
       AND NOT EXISTS (
             SELECT 1 FROM regexp_matches(scope, '([0-9]+)(?:-([0-9]+))?', 'g') AS m
              WHERE m[1]::int > 65535 OR m[2]::int > 65535 OR m[2]::int < m[1]::int)
$fn$;

DO $migrate$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = 'tasks'::regclass AND attname = 'ports'
                      AND NOT attisdropped) THEN
        ALTER TABLE tasks ADD COLUMN ports text
            CONSTRAINT tasks_ports_valid CHECK (port_scope_is_valid(ports));
    END IF;
    INSERT INTO schema_marker (name) VALUES ('task_ports') ON CONFLICT (name) DO NOTHING;
END
$migrate$;
