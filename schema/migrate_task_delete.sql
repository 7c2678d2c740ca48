-- Upgrade step (schema version 3, no version change): deleting a task
-- (`scanstore-admin task delete`).
--   - tasks.deleted_at: set when the deletion is queued. From then on the task is gone for
--     reads, its executions' publication and close rows are not claimed, and rebuilds skip
--     it; the row stays until the deletion run has removed everything the task produced.
--   - outbox kind 'forget' (forget_task_id, one row per task): the deletion run. It
--     recomputes the asset documents the task's executions contributed to from what
--     remains, then deletes the task's execution-projection documents and facts, and then
--     its executions (with their receipts, streams, DNS answers and outbox rows), targets
--     and the task itself.
-- An older binary does not know deleted_at: it would show the task and publish its
-- executions again. Let every deletion run finish (scanstore-admin backlog) before a
-- rollback.
--
-- Runs after migrate_retention.sql, whose outbox kind 'expire' its CHECKs keep (the Rust runner, under pg_advisory_lock). A fresh
-- database gets init.sql instead, which already has all of this and the marker, so there
-- this file changes nothing.
--
-- One transaction: sent as one simple query (batch_execute = one implicit transaction);
-- by hand: psql -X -1 -v ON_ERROR_STOP=1 -f schema/migrate_task_delete.sql.
-- Idempotent: every change is behind a catalog check.
--
-- Cost, first run only: two nullable columns without defaults (catalog changes, no
-- rewrite) under short ACCESS EXCLUSIVE locks on tasks and the outbox; the outbox's two
-- CHECKs are replaced, and checking them reads the outbox once (every existing row has
-- the new column NULL, so they hold); the unique index is built over a column that is NULL
-- everywhere. Publishers wait meanwhile, and a final's insert waits only that long.

DO $migrate$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = 'tasks'::regclass
                      AND attname = 'deleted_at' AND NOT attisdropped) THEN
        ALTER TABLE tasks ADD COLUMN deleted_at timestamptz;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = 'scan_projection_outbox'::regclass
                      AND attname = 'forget_task_id' AND NOT attisdropped) THEN
        ALTER TABLE scan_projection_outbox
            ADD COLUMN forget_task_id uuid,
            DROP CONSTRAINT scan_projection_outbox_kind_check,
            DROP CONSTRAINT scan_projection_outbox_kind_shape,
            ADD CONSTRAINT scan_projection_outbox_kind_check
                CHECK (kind IN ('execution', 'tags', 'close', 'delete', 'expire', 'forget')),
            ADD CONSTRAINT scan_projection_outbox_kind_shape CHECK (
                num_nonnulls(execution_id, tag_scope, closing_execution_id, tombstone_id,
                             expire_before, forget_task_id) = 1
                AND CASE kind WHEN 'execution' THEN execution_id IS NOT NULL
                              WHEN 'tags' THEN tag_scope IS NOT NULL
                              WHEN 'close' THEN closing_execution_id IS NOT NULL
                              WHEN 'delete' THEN tombstone_id IS NOT NULL
                              WHEN 'expire' THEN expire_before IS NOT NULL
                              WHEN 'forget' THEN forget_task_id IS NOT NULL END);
    END IF;
    IF to_regclass('scan_projection_outbox_forget_key') IS NULL THEN
        CREATE UNIQUE INDEX scan_projection_outbox_forget_key
            ON scan_projection_outbox (forget_task_id);
    END IF;
    INSERT INTO schema_marker (name) VALUES ('task_delete') ON CONFLICT (name) DO NOTHING;
END
$migrate$;
