-- Upgrade step (schema version 3, no version change): the claim index also carries each
-- row's creation time. The backlog query (the sampler's and /readyz's: how many rows wait,
-- and since when) is then an index-only scan; without it, every waiting row is fetched
-- from the heap, whose pages the processed history spreads out, so the query slowed down
-- as the history grew. Pages that claims and releases have just rewritten (not yet marked
-- all-visible by a vacuum) are still visited.
--
-- Runs after migrate_task_networks.sql (the Rust runner, under pg_advisory_lock). A fresh
-- database gets init.sql instead, which already has the index and the marker.
--
-- One transaction: sent as one simple query; by hand:
-- psql -X -1 -v ON_ERROR_STOP=1 -f schema/migrate_backlog_count.sql. Idempotent.
--
-- Cost, first run only: the new index covers the unprocessed rows only, built under a
-- SHARE lock on the outbox: claims, checkpoints and finals wait that long.

DO $migrate$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_index
                    WHERE indexrelid = to_regclass('scan_projection_outbox_claim_idx')
                      AND indnatts > indnkeyatts) THEN
        DROP INDEX IF EXISTS scan_projection_outbox_claim_idx;
        CREATE INDEX scan_projection_outbox_claim_idx ON scan_projection_outbox (available_at, id)
            INCLUDE (created_at) WHERE processed_at IS NULL;
    END IF;
    INSERT INTO schema_marker (name) VALUES ('backlog_count') ON CONFLICT (name) DO NOTHING;
END
$migrate$;
