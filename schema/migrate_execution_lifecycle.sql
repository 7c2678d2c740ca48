-- Upgrade step 5 of 5 (schema version 2 -> 3): the scanner's execution lifecycle
-- (executions: lease, attempts, failure reason, claim by any scanner of the owner;
-- scan_upload_stream.abandoned_at) and freshness of single-IP search targets inside a
-- scanned network (search_targets_ip_gist).
--
-- Order of the upgrade (the Rust runner, under pg_advisory_lock, on a database that
-- already has `owners`): migrate_scan_projection.sql -> migrate_scan_upload_stream.sql
-- -> migrate_search_target_ip.sql -> migrate_execution_dns_answers.sql
-- -> migrate_execution_lifecycle.sql, then `UPDATE schema_version SET version = 3`.
-- A fresh database gets init.sql instead, which already has all of this and the marker,
-- so there this file changes nothing.
--
-- One transaction: sent as one simple query (batch_execute = one implicit transaction);
-- by hand: psql -X -1 -v ON_ERROR_STOP=1 -f schema/migrate_execution_lifecycle.sql.
-- Idempotent: every step is behind a catalog check (CREATE INDEX takes its table lock
-- before IF NOT EXISTS looks, and a restart must not take it again).
--
-- Cost, first run only: the new columns have constant defaults and dropping NOT NULL is a
-- catalog change (no rewrite), but they take ACCESS EXCLUSIVE locks on executions and
-- scan_upload_stream, and one transaction holds them until it commits: through the CHECK
-- constraint's scan of executions and the index builds (two on executions, a GiST over
-- search_targets). Claims, uploads and reads of executions wait that long; it is why the
-- upgrade stops every instance first. No backfill: executions running at the upgrade have
-- no lease and never lapse; their scanner's first heartbeat or batch gives them one.
-- init.sql declares the columns last, so an upgraded database dumps like a fresh one.

SET LOCAL client_min_messages = warning;
SET LOCAL statement_timeout = 0;
SET LOCAL lock_timeout = '60s';

DO $migrate$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'executions'::regclass
               AND attname = 'scanner_id' AND attnotnull) THEN
        ALTER TABLE executions ALTER COLUMN scanner_id DROP NOT NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'executions'::regclass
                   AND attname = 'lease_expires_at' AND NOT attisdropped) THEN
        ALTER TABLE executions
            ADD COLUMN lease_expires_at timestamptz,
            ADD COLUMN attempts integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
            ADD COLUMN failure_reason text CHECK (octet_length(failure_reason) <= 1024),
            ADD COLUMN any_scanner boolean NOT NULL DEFAULT false;
    END IF;
    -- Why: only a queued execution may wait for a scanner; once claimed it has one.
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'executions'::regclass
                   AND conname = 'executions_scanner_when_claimed') THEN
        ALTER TABLE executions ADD CONSTRAINT executions_scanner_when_claimed
            CHECK (scanner_id IS NOT NULL OR status = 'queued');
    END IF;
    -- Why: the lease sweeper reads "running executions whose lease has lapsed".
    IF to_regclass('executions_lease_idx') IS NULL THEN
        CREATE INDEX executions_lease_idx ON executions (lease_expires_at) WHERE status = 'running';
    END IF;
    -- Why: a scanner's own executions, newest first, and the scanner-deletion check.
    IF to_regclass('executions_scanner_idx') IS NULL THEN
        CREATE INDEX executions_scanner_idx ON executions (scanner_id, created_at);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'scan_upload_stream'::regclass
                   AND attname = 'abandoned_at' AND NOT attisdropped) THEN
        ALTER TABLE scan_upload_stream ADD COLUMN abandoned_at timestamptz;
    END IF;
    -- Why: the lease sweep looks for abandoned uploads with pending batches to undo.
    IF to_regclass('scan_upload_stream_abandoned_idx') IS NULL THEN
        CREATE INDEX scan_upload_stream_abandoned_idx ON scan_upload_stream (execution_id)
            WHERE abandoned_at IS NOT NULL AND (pending_count > 0 OR dns_pending_count > 0);
    END IF;

    -- Why: freshness updates single-IP targets inside a scanned network or address
    -- (target_ip <<= scanned); partial on kind = 'ip' as search_targets_cidr_gist is on
    -- 'cidr', and queries must repeat kind = 'ip' for the planner to use it.
    IF to_regclass('search_targets_ip_gist') IS NULL THEN
        CREATE INDEX search_targets_ip_gist ON search_targets USING gist (target_ip inet_ops)
            WHERE kind = 'ip';
    END IF;

    INSERT INTO schema_marker (name) VALUES ('execution_lifecycle') ON CONFLICT (name) DO NOTHING;
END
$migrate$;
