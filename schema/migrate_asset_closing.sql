-- Upgrade step (schema version 3, no version change): close runs in the outbox. A row of
-- kind 'close' names, in its own column `closing_execution_id`, a succeeded execution of a
-- task with a port scope; a publisher closes the owner's assets in that scope that the
-- execution did not see. An older binary claims only 'execution' and 'tags' rows, so a
-- rollback leaves close rows waiting, and this release takes them up again.
--
-- Runs after migrate_task_ports.sql (the Rust runner, under pg_advisory_lock). A fresh
-- database gets init.sql instead, which already has all of this and the marker, so there
-- this file changes nothing.
--
-- One transaction: sent as one simple query (batch_execute = one implicit transaction);
-- by hand: psql -X -1 -v ON_ERROR_STOP=1 -f schema/migrate_asset_closing.sql.
-- Idempotent: every change is behind a catalog check.
--
-- Cost, first run only: the nullable column is a catalog change; the two CHECKs are
-- replaced, and checking them reads the outbox once (every existing row is an 'execution'
-- or a 'tags' row with a NULL closing_execution_id, so they hold); the unique index is
-- built over a column that is NULL everywhere. All under a short ACCESS EXCLUSIVE lock on
-- the outbox: publishers wait, uploads do not (a final's insert waits only that long).

DO $migrate$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = 'scan_projection_outbox'::regclass
                      AND attname = 'closing_execution_id' AND NOT attisdropped) THEN
        ALTER TABLE scan_projection_outbox
            ADD COLUMN closing_execution_id uuid REFERENCES executions (id) ON DELETE CASCADE,
            DROP CONSTRAINT scan_projection_outbox_kind_check,
            DROP CONSTRAINT scan_projection_outbox_kind_shape,
            ADD CONSTRAINT scan_projection_outbox_kind_check
                CHECK (kind IN ('execution', 'tags', 'close')),
            ADD CONSTRAINT scan_projection_outbox_kind_shape CHECK (
                (kind = 'execution' AND execution_id IS NOT NULL AND tag_scope IS NULL
                     AND closing_execution_id IS NULL)
                OR (kind = 'tags' AND execution_id IS NULL AND tag_scope IS NOT NULL
                     AND closing_execution_id IS NULL)
                OR (kind = 'close' AND execution_id IS NULL AND tag_scope IS NULL
                     AND closing_execution_id IS NOT NULL));
    END IF;
    IF to_regclass('scan_projection_outbox_closing_key') IS NULL THEN
        CREATE UNIQUE INDEX scan_projection_outbox_closing_key
            ON scan_projection_outbox (closing_execution_id);
    END IF;
    INSERT INTO schema_marker (name) VALUES ('asset_closing') ON CONFLICT (name) DO NOTHING;
END
$migrate$;
