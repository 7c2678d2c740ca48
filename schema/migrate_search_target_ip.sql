-- Upgrade step 3 of 4: indexable CIDR freshness (search_targets.target_ip, asset_tags.target_ip).
--
-- Order of the upgrade (the Rust runner, under pg_advisory_lock, on a database that
-- already has `owners`): migrate_scan_projection.sql -> migrate_scan_upload_stream.sql
-- -> migrate_search_target_ip.sql -> migrate_execution_dns_answers.sql, then
-- `UPDATE schema_version SET version = 2`.
-- A fresh database gets init.sql instead, which already has all of this and the marker,
-- so there this file changes nothing.
--
-- One transaction: sent as one simple query (batch_execute = one implicit transaction);
-- by hand: psql -X -1 -v ON_ERROR_STOP=1 -f schema/migrate_search_target_ip.sql.
-- Idempotent: every step is behind a catalog check (ALTER TABLE / CREATE INDEX take their
-- table locks before IF NOT EXISTS looks, and a restart must not take them again).
--
-- Cost, first run only: adding a STORED generated column rewrites the table under an
-- ACCESS EXCLUSIVE lock, and the GiST build scans it. Plan it in the same maintenance
-- window as the upload-stream backfill. Rollback may keep the column and the indexes.
--
-- target_ip is the key as inet for kind ip/cidr and NULL for domains: the CASE never casts
-- a domain. text -> inet uses inet_in, which is IMMUTABLE, as a generated column requires.
-- init.sql declares the column last, so an upgraded database dumps like a fresh one.

SET LOCAL client_min_messages = warning;
SET LOCAL statement_timeout = 0;
SET LOCAL lock_timeout = '60s';

DO $migrate$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'search_targets'::regclass
                   AND attname = 'target_ip' AND NOT attisdropped) THEN
        ALTER TABLE search_targets ADD COLUMN IF NOT EXISTS target_ip inet
            GENERATED ALWAYS AS (CASE WHEN kind IN ('ip', 'cidr') THEN key::inet END) STORED;
    END IF;
    -- Why: freshness updates CIDR targets by containment (target_ip <<= scanned network,
    -- target_ip >>= scanned address); GiST inet_ops answers both. Partial on kind = 'cidr'
    -- because IPs and domains go through the primary key; queries must repeat
    -- kind = 'cidr' for the planner to use it.
    IF to_regclass('search_targets_cidr_gist') IS NULL THEN
        CREATE INDEX search_targets_cidr_gist ON search_targets USING gist (target_ip inet_ops)
            WHERE kind = 'cidr';
    END IF;

    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'asset_tags'::regclass
                   AND attname = 'target_ip' AND NOT attisdropped) THEN
        ALTER TABLE asset_tags ADD COLUMN IF NOT EXISTS target_ip inet
            GENERATED ALWAYS AS (CASE WHEN kind IN ('ip', 'cidr') THEN key::inet END) STORED;
    END IF;
    -- Why: tagging at upload finds the CIDR tags containing an observed IP
    -- (target_ip >>= ip AND kind = 'cidr').
    IF to_regclass('asset_tags_cidr_gist') IS NULL THEN
        CREATE INDEX asset_tags_cidr_gist ON asset_tags USING gist (target_ip inet_ops)
            WHERE kind = 'cidr';
    END IF;

    INSERT INTO schema_marker (name) VALUES ('search_target_ip') ON CONFLICT (name) DO NOTHING;
END
$migrate$;
