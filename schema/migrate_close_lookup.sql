-- Upgrade step (schema version 3, no version change): an index of the close runs by
-- owner and creation time. Every publication page of an execution looks up its owner's
-- close runs that started after its oldest open observation (a close run misses an
-- observation published after it), and only a close row created after that observation
-- can be one: a close row is created when its execution's publication completes, after
-- the execution started. With the index, a page whose observations are newer than every
-- close run of its owner reads no row.
--
-- Runs after migrate_task_delete.sql (the Rust runner, under pg_advisory_lock). A fresh
-- database gets init.sql instead, which already has the index and the marker.
--
-- One transaction: sent as one simple query; by hand:
-- psql -X -1 -v ON_ERROR_STOP=1 -f schema/migrate_close_lookup.sql. Idempotent.
--
-- Cost, first run only: the partial index covers the close rows (one per succeeded
-- execution of a task with a port scope), built under a SHARE lock on the outbox:
-- claims, checkpoints and finals wait that long.

DO $migrate$
BEGIN
    IF to_regclass('scan_projection_outbox_close_owner_idx') IS NULL THEN
        CREATE INDEX scan_projection_outbox_close_owner_idx
            ON scan_projection_outbox (owner_id, created_at) WHERE kind = 'close';
    END IF;
    INSERT INTO schema_marker (name) VALUES ('close_lookup') ON CONFLICT (name) DO NOTHING;
END
$migrate$;
