-- Upgrade step (schema version 3, no version change): two partial indexes of a task's
-- executions for what every final of the task asks in transaction B. Whether the task is
-- settled reads only its executions that have not succeeded (a handful: those still
-- queued or running, and failed ones), and its scan time is the newest start among its
-- succeeded executions, read as the first entry of an index in that order. Without them
-- both read every execution the task ever had, so a task split among many scanners paid
-- for its whole history at every final (quadratic in its executions).
--
-- Runs after migrate_close_lookup.sql (the Rust runner, under pg_advisory_lock). A fresh
-- database gets init.sql instead, which already has the indexes and the marker.
--
-- One transaction: sent as one simple query; by hand:
-- psql -X -1 -v ON_ERROR_STOP=1 -f schema/migrate_task_freshness.sql. Idempotent.
--
-- Cost, first run only: both indexes are built under a SHARE lock on executions (the
-- second covers every succeeded execution): claims, batches and finals wait that long.

DO $migrate$
BEGIN
    IF to_regclass('executions_task_unsettled_idx') IS NULL THEN
        CREATE INDEX executions_task_unsettled_idx
            ON executions (task_id) WHERE status <> 'succeeded';
    END IF;
    IF to_regclass('executions_task_scan_time_idx') IS NULL THEN
        CREATE INDEX executions_task_scan_time_idx
            ON executions (task_id, (coalesce(started_at, created_at)), id)
            WHERE status = 'succeeded';
    END IF;
    INSERT INTO schema_marker (name) VALUES ('task_freshness') ON CONFLICT (name) DO NOTHING;
END
$migrate$;
