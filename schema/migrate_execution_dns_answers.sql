-- Upgrade step 4 of 4: DNS answers recorded at confirm (execution_dns_answers,
-- scan_upload_receipts.dns_answers_recorded), so a final no longer aggregates every DNS
-- fact of its execution in Elasticsearch.
--
-- Order of the upgrade (the Rust runner, under pg_advisory_lock, on a database that
-- already has `owners`): migrate_scan_projection.sql -> migrate_scan_upload_stream.sql
-- -> migrate_search_target_ip.sql -> migrate_execution_dns_answers.sql, then
-- `UPDATE schema_version SET version = 2`. A fresh database gets init.sql instead, which
-- already has all of this and the marker, so there this file changes nothing.
--
-- One transaction: sent as one simple query (batch_execute = one implicit transaction);
-- by hand: psql -X -1 -v ON_ERROR_STOP=1 -f schema/migrate_execution_dns_answers.sql.
-- Idempotent: every step is behind a catalog check (ALTER TABLE takes its table lock
-- before IF NOT EXISTS looks, and a restart must not take it again).
--
-- Cost, first run only: adding a column with a constant default is a catalog change
-- (no table rewrite, PostgreSQL >= 11), but it waits for an ACCESS EXCLUSIVE lock on the
-- receipts for that instant. Existing receipts read false: their answers were never
-- recorded, and a final over them falls back to the facts. No backfill.
-- init.sql declares the column last, so an upgraded database dumps like a fresh one.

SET LOCAL client_min_messages = warning;
SET LOCAL statement_timeout = 0;
SET LOCAL lock_timeout = '60s';

DO $migrate$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'scan_upload_receipts'::regclass
                   AND attname = 'dns_answers_recorded' AND NOT attisdropped) THEN
        ALTER TABLE scan_upload_receipts
            ADD COLUMN IF NOT EXISTS dns_answers_recorded boolean NOT NULL DEFAULT false;
    END IF;

    -- Why the primary key: a retried confirm adds nothing twice, and the final reads the
    -- answers of one execution in address order from this index alone.
    IF to_regclass('execution_dns_answers') IS NULL THEN
        CREATE TABLE execution_dns_answers (
            execution_id uuid NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
            address      inet NOT NULL,
            PRIMARY KEY (execution_id, address)
        );
    END IF;

    INSERT INTO schema_marker (name) VALUES ('execution_dns_answers') ON CONFLICT (name) DO NOTHING;
END
$migrate$;
