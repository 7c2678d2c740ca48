-- Upgrade step (schema version 3, no version change): a GiST index of the tasks' network
-- targets. A batch is checked against its task's targets; when a task has more than a
-- thousand networks, the check reads only those overlapping the smallest network that
-- spans the batch's addresses (coverage::NAMED_TARGETS) through this index, instead of
-- every network of the task on every batch.
--
-- Runs after migrate_task_freshness.sql (the Rust runner, under pg_advisory_lock). A fresh
-- database gets init.sql instead, which already has the index and the marker.
--
-- One transaction: sent as one simple query; by hand:
-- psql -X -1 -v ON_ERROR_STOP=1 -f schema/migrate_task_networks.sql. Idempotent.
--
-- Cost, first run only: the index is built under a SHARE lock on task_targets (over its
-- network rows only): task creation and target changes wait that long.

DO $migrate$
BEGIN
    IF to_regclass('task_targets_cidr_gist') IS NULL THEN
        CREATE INDEX task_targets_cidr_gist ON task_targets USING gist ((value::inet) inet_ops)
            WHERE kind = 'cidr';
    END IF;
    INSERT INTO schema_marker (name) VALUES ('task_networks') ON CONFLICT (name) DO NOTHING;
END
$migrate$;
