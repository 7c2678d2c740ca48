-- Upgrade step (schema version 3, no version change): the asset lifecycle in the outbox.
--   - kind 'close': `closing_execution_id` names a succeeded execution of a task with a
--     port scope; a publisher closes the owner's assets in that scope the execution did
--     not see.
--   - kind 'delete': `tombstone_id` names a row of the new `asset_tombstones` (an owner's
--     deletion); a publisher deletes the owner's documents it covers, and publication and
--     rebuild consult the table so that nothing observed before it comes back.
-- An older binary claims only 'execution' and 'tags' rows, so a rollback leaves these rows
-- waiting (and publishes without consulting tombstones); this release takes them up again.
--
-- Runs after migrate_task_ports.sql (the Rust runner, under pg_advisory_lock). A fresh
-- database gets init.sql instead, which already has all of this and the marker, so there
-- this file changes nothing.
--
-- One transaction: sent as one simple query (batch_execute = one implicit transaction);
-- by hand: psql -X -1 -v ON_ERROR_STOP=1 -f schema/migrate_asset_lifecycle.sql.
-- Idempotent: every change is behind a catalog check.
--
-- Cost, first run only: a new empty table; two nullable columns (catalog changes); the
-- two CHECKs are replaced, and checking them reads the outbox once (every existing row is
-- an 'execution' or a 'tags' row with both new columns NULL, so they hold); the unique
-- indexes are built over columns that are NULL everywhere. All under a short ACCESS
-- EXCLUSIVE lock on the outbox: publishers wait, and a final's insert waits only that long.

DO $migrate$
BEGIN
    IF to_regclass('asset_tombstones') IS NULL THEN
        CREATE TABLE asset_tombstones (
            id          bigserial PRIMARY KEY,
            owner_id    uuid NOT NULL REFERENCES owners (id) ON DELETE CASCADE,
            target      cidr NOT NULL,
            port        integer CHECK (port BETWEEN 0 AND 65535),
            transport   text CHECK (transport IN ('tcp', 'udp', 'sctp')),
            deleted_at  timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT asset_tombstones_endpoint_pair CHECK ((port IS NULL) = (transport IS NULL))
        );
        CREATE INDEX asset_tombstones_owner_idx ON asset_tombstones (owner_id);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = 'scan_projection_outbox'::regclass
                      AND attname = 'tombstone_id' AND NOT attisdropped) THEN
        ALTER TABLE scan_projection_outbox
            ADD COLUMN closing_execution_id uuid REFERENCES executions (id) ON DELETE CASCADE,
            ADD COLUMN tombstone_id bigint REFERENCES asset_tombstones (id) ON DELETE CASCADE,
            DROP CONSTRAINT scan_projection_outbox_kind_check,
            DROP CONSTRAINT scan_projection_outbox_kind_shape,
            ADD CONSTRAINT scan_projection_outbox_kind_check
                CHECK (kind IN ('execution', 'tags', 'close', 'delete')),
            ADD CONSTRAINT scan_projection_outbox_kind_shape CHECK (
                num_nonnulls(execution_id, tag_scope, closing_execution_id, tombstone_id) = 1
                AND CASE kind WHEN 'execution' THEN execution_id IS NOT NULL
                              WHEN 'tags' THEN tag_scope IS NOT NULL
                              WHEN 'close' THEN closing_execution_id IS NOT NULL
                              WHEN 'delete' THEN tombstone_id IS NOT NULL END);
    END IF;
    IF to_regclass('scan_projection_outbox_closing_key') IS NULL THEN
        CREATE UNIQUE INDEX scan_projection_outbox_closing_key
            ON scan_projection_outbox (closing_execution_id);
    END IF;
    IF to_regclass('scan_projection_outbox_tombstone_key') IS NULL THEN
        CREATE UNIQUE INDEX scan_projection_outbox_tombstone_key
            ON scan_projection_outbox (tombstone_id);
    END IF;
    INSERT INTO schema_marker (name) VALUES ('asset_lifecycle') ON CONFLICT (name) DO NOTHING;
END
$migrate$;
