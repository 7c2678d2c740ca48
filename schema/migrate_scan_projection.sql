-- Upgrade step 1 of 4: leased, resumable asset publication queue (scan_projection_outbox).
--
-- Order of the upgrade (the Rust runner, under pg_advisory_lock, on a database that
-- already has `owners`): migrate_scan_projection.sql -> migrate_scan_upload_stream.sql
-- -> migrate_search_target_ip.sql -> migrate_execution_dns_answers.sql, then
-- `UPDATE schema_version SET version = 2`.
-- A fresh database gets init.sql instead, which already has all of this and the marker,
-- so there this file changes nothing.
--
-- One transaction: sent as one simple query (batch_execute = one implicit transaction);
-- by hand: psql -X -1 -v ON_ERROR_STOP=1 -f schema/migrate_scan_projection.sql.
-- Idempotent: may run any number of times. Every ALTER is behind a catalog check,
-- because ALTER TABLE ... IF NOT EXISTS still takes an ACCESS EXCLUSIVE lock before it
-- looks, and restarting an already-upgraded instance must not stall the other
-- instances' workers.
--
-- Existing queue rows are kept: unprocessed rows become phase 'publishing' with cursor
-- NULL, processed_endpoints 0 and no lease (the column defaults), i.e. they are claimed and
-- published from the start by the new worker. Old instances must be stopped first: they
-- do not know the lease protocol.
--
-- Column order matters: init.sql declares these columns last, in this order, so an
-- upgraded database dumps exactly like a fresh one.

SET LOCAL client_min_messages = warning;
SET LOCAL lock_timeout = '60s';

DO $migrate$
BEGIN
    IF EXISTS (
        SELECT 1
          FROM unnest(ARRAY['claim_token', 'lease_expires_at', 'cursor', 'phase',
                            'processed_endpoints', 'updated_at']) AS c(name)
         WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a
                            WHERE a.attrelid = 'scan_projection_outbox'::regclass
                              AND a.attname = c.name AND NOT a.attisdropped))
    THEN
        -- Nullable or constant defaults: PostgreSQL adds these without rewriting the table
        -- (now() is evaluated once for all existing rows).
        ALTER TABLE scan_projection_outbox
            ADD COLUMN IF NOT EXISTS claim_token         uuid,
            ADD COLUMN IF NOT EXISTS lease_expires_at    timestamptz,
            ADD COLUMN IF NOT EXISTS cursor              text,
            ADD COLUMN IF NOT EXISTS phase               text NOT NULL DEFAULT 'publishing',
            ADD COLUMN IF NOT EXISTS processed_endpoints bigint NOT NULL DEFAULT 0,
            ADD COLUMN IF NOT EXISTS updated_at          timestamptz NOT NULL DEFAULT now();
    END IF;

    -- Why: a phase outside these two would be claimable but never finishable.
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'scan_projection_outbox'::regclass
                   AND conname = 'scan_projection_outbox_phase_check') THEN
        ALTER TABLE scan_projection_outbox ADD CONSTRAINT scan_projection_outbox_phase_check
            CHECK (phase IN ('publishing', 'refreshing'));
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'scan_projection_outbox'::regclass
                   AND conname = 'scan_projection_outbox_processed_endpoints_check') THEN
        ALTER TABLE scan_projection_outbox ADD CONSTRAINT scan_projection_outbox_processed_endpoints_check
            CHECK (processed_endpoints >= 0);
    END IF;
    -- Why: a row is either unleased (both NULL) or leased (both set); a token without an
    -- expiry could never be taken over, an expiry without a token could never be renewed.
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'scan_projection_outbox'::regclass
                   AND conname = 'scan_projection_outbox_lease_pair') THEN
        ALTER TABLE scan_projection_outbox ADD CONSTRAINT scan_projection_outbox_lease_pair
            CHECK ((claim_token IS NULL) = (lease_expires_at IS NULL));
    END IF;

    -- Why: the claim takes the oldest due unprocessed rows,
    --   WHERE processed_at IS NULL AND available_at <= now()
    --     AND (claim_token IS NULL OR lease_expires_at <= now())
    --   ORDER BY available_at, id ... FOR UPDATE SKIP LOCKED
    -- partial so finished rows (the bulk of the table) are not in the index. It replaces
    -- the previous release's (available_at) index, which it makes redundant.
    IF to_regclass('scan_projection_outbox_claim_idx') IS NULL THEN
        CREATE INDEX scan_projection_outbox_claim_idx ON scan_projection_outbox (available_at, id)
            WHERE processed_at IS NULL;
    END IF;
    IF to_regclass('scan_projection_outbox_due_idx') IS NOT NULL THEN
        DROP INDEX scan_projection_outbox_due_idx;
    END IF;

    -- Keeps updated_at honest for every lease/checkpoint write.
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'scan_projection_outbox'::regclass
                   AND tgname = 'scan_projection_outbox_touch_updated_at') THEN
        CREATE TRIGGER scan_projection_outbox_touch_updated_at BEFORE UPDATE ON scan_projection_outbox
            FOR EACH ROW EXECUTE FUNCTION scanstore_touch_updated_at();
    END IF;

    INSERT INTO schema_marker (name) VALUES ('scan_projection_v2') ON CONFLICT (name) DO NOTHING;
END
$migrate$;
