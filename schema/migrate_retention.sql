-- Upgrade step (schema version 3, no version change): what retention needs.
--   - executions.pruned_at: when retention removed the execution's upload records (its
--     receipts, upload streams, DNS answers, analysis and outbox rows); its row and its
--     results stay. A partial index finds the finished executions not yet pruned.
--   - a GiST index on asset_tombstones.target: retention writes one tombstone per stale
--     endpoint, so an owner can have many, and publication's lookup ("tombstones whose
--     target contains this address") must not read them all; and one on deleted_at, by
--     which retention finds the oldest to retire.
--   - retention_runs: one row per run, which tells every instance when the last one ran.
--   - outbox kind 'expire' (`expire_before`): a publisher deletes the owner's assets last
--     seen before that time, each with a tombstone; one waiting row per owner.
--   - an index of the processed outbox rows by time: "published in the last hour"
--     (scripts/backlog.sql) and retention read them so, not the whole history.
-- An older binary claims only its own kinds, so 'expire' rows wait for this release.
--
-- Runs after migrate_asset_lifecycle.sql (the Rust runner, under pg_advisory_lock). A
-- fresh database gets init.sql instead, which already has all of this and the marker.
--
-- One transaction: sent as one simple query; by hand:
-- psql -X -1 -v ON_ERROR_STOP=1 -f schema/migrate_retention.sql. Idempotent.
--
-- Cost, first run only: a nullable column (a catalog change); the partial index covers
-- the finished executions (built under a SHARE lock: claims and finals wait that long);
-- the GiST index over the tombstones, a handful of rows before this release; the outbox
-- CHECKs are replaced (checking them reads the outbox once, under a short ACCESS EXCLUSIVE
-- lock: publishers and finals wait that long); the index of processed rows covers the
-- outbox's history (built under a SHARE lock, as above).

DO $migrate$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = 'executions'::regclass
                      AND attname = 'pruned_at' AND NOT attisdropped) THEN
        ALTER TABLE executions ADD COLUMN pruned_at timestamptz;
    END IF;
    IF to_regclass('executions_prune_idx') IS NULL THEN
        CREATE INDEX executions_prune_idx ON executions (finished_at, id)
            WHERE finished_at IS NOT NULL AND pruned_at IS NULL;
    END IF;
    IF to_regclass('asset_tombstones_target_idx') IS NULL THEN
        CREATE INDEX asset_tombstones_target_idx ON asset_tombstones USING gist (target inet_ops);
    END IF;
    IF to_regclass('asset_tombstones_deleted_idx') IS NULL THEN
        CREATE INDEX asset_tombstones_deleted_idx ON asset_tombstones (deleted_at);
    END IF;
    IF to_regclass('retention_runs') IS NULL THEN
        CREATE TABLE retention_runs (
            id           bigserial PRIMARY KEY,
            started_at   timestamptz NOT NULL DEFAULT now(),
            finished_at  timestamptz,
            outcome      text CHECK (outcome IN ('completed', 'failed')),
            removed      jsonb,
            CONSTRAINT retention_runs_outcome_when_finished
                CHECK ((finished_at IS NULL) = (outcome IS NULL))
        );
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = 'scan_projection_outbox'::regclass
                      AND attname = 'expire_before' AND NOT attisdropped) THEN
        ALTER TABLE scan_projection_outbox
            ADD COLUMN expire_before timestamptz,
            DROP CONSTRAINT scan_projection_outbox_kind_check,
            DROP CONSTRAINT scan_projection_outbox_kind_shape,
            ADD CONSTRAINT scan_projection_outbox_kind_check
                CHECK (kind IN ('execution', 'tags', 'close', 'delete', 'expire')),
            ADD CONSTRAINT scan_projection_outbox_kind_shape CHECK (
                num_nonnulls(execution_id, tag_scope, closing_execution_id, tombstone_id,
                             expire_before) = 1
                AND CASE kind WHEN 'execution' THEN execution_id IS NOT NULL
                              WHEN 'tags' THEN tag_scope IS NOT NULL
                              WHEN 'close' THEN closing_execution_id IS NOT NULL
                              WHEN 'delete' THEN tombstone_id IS NOT NULL
                              WHEN 'expire' THEN expire_before IS NOT NULL END);
    END IF;
    IF to_regclass('scan_projection_outbox_expire_key') IS NULL THEN
        CREATE UNIQUE INDEX scan_projection_outbox_expire_key ON scan_projection_outbox (owner_id)
            WHERE kind = 'expire' AND processed_at IS NULL;
    END IF;
    IF to_regclass('scan_projection_outbox_processed_idx') IS NULL THEN
        CREATE INDEX scan_projection_outbox_processed_idx ON scan_projection_outbox (processed_at)
            WHERE processed_at IS NOT NULL;
    END IF;
    INSERT INTO schema_marker (name) VALUES ('retention') ON CONFLICT (name) DO NOTHING;
END
$migrate$;
