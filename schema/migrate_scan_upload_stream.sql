-- Upgrade step 2 of 4: upload stream state (scan_upload_stream) derived from receipts.
--
-- Order of the upgrade (the Rust runner, under pg_advisory_lock, on a database that
-- already has `owners`): migrate_scan_projection.sql -> migrate_scan_upload_stream.sql
-- -> migrate_search_target_ip.sql -> migrate_execution_dns_answers.sql, then
-- `UPDATE schema_version SET version = 2`.
-- A fresh database gets init.sql instead, which already contains all of this and the
-- marker, so there this file changes nothing.
--
-- One transaction: sent as one simple query (batch_execute = one implicit transaction);
-- by hand: psql -X -1 -v ON_ERROR_STOP=1 -f schema/migrate_scan_upload_stream.sql.
-- Idempotent: may run any number of times.
--   * table: CREATE TABLE IF NOT EXISTS (no lock on an existing table);
--   * view and functions: CREATE OR REPLACE every time, so fixed trigger bodies ship
--     without a new marker (this takes no lock on scan_upload_receipts);
--   * triggers: created only when missing, because CREATE TRIGGER locks
--     scan_upload_receipts in SHARE ROW EXCLUSIVE mode and a restart of an upgraded
--     instance must not stall the receipt writes of the others;
--   * backfill: only while marker 'scan_upload_stream_backfill' is absent.

SET LOCAL client_min_messages = warning;
-- Why: a role-level statement_timeout must not abort the one-time backfill of a large
-- receipt table halfway through every start-up; the lock wait, however, is bounded so a
-- forgotten old instance makes the upgrade fail visibly instead of hanging.
SET LOCAL statement_timeout = 0;
SET LOCAL lock_timeout = '60s';

-- BEGIN shared with init.sql (tests/sql/run.sh checks it is identical)
CREATE TABLE IF NOT EXISTS scan_upload_stream (
    execution_id               uuid NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
    upload_id                  uuid NOT NULL,
    -- main stream
    batch_count                integer NOT NULL DEFAULT 0,
    confirmed_count            integer NOT NULL DEFAULT 0,
    pending_count              integer NOT NULL DEFAULT 0,
    min_batch                  integer,
    max_batch                  integer,
    final_count                integer NOT NULL DEFAULT 0,
    final_batch                integer,
    confirmed_observations     bigint NOT NULL DEFAULT 0,
    -- dns sidecar (same upload_id, stream 'dns')
    dns_batch_count            integer NOT NULL DEFAULT 0,
    dns_confirmed_count        integer NOT NULL DEFAULT 0,
    dns_pending_count          integer NOT NULL DEFAULT 0,
    dns_max_batch              integer,
    dns_confirmed_observations bigint NOT NULL DEFAULT 0,
    -- true after a receipt of this stream was deleted: counts may be too high until
    -- scan_upload_stream_repair() recomputes the row.
    dirty                      boolean NOT NULL DEFAULT false,
    updated_at                 timestamptz NOT NULL DEFAULT now(),
    -- Why: the upload identity check reads exactly one stream row; the key also serves the
    -- execution cascade.
    PRIMARY KEY (execution_id, upload_id),
    -- Why: every batch is either pending or confirmed; a trigger bug or a manual edit that
    -- breaks this must fail loudly instead of admitting an incomplete final.
    CONSTRAINT scan_upload_stream_main_counts CHECK (
        pending_count >= 0 AND confirmed_count >= 0 AND final_count >= 0
        AND confirmed_observations >= 0
        AND batch_count = confirmed_count + pending_count),
    CONSTRAINT scan_upload_stream_dns_counts CHECK (
        dns_pending_count >= 0 AND dns_confirmed_count >= 0 AND dns_confirmed_observations >= 0
        AND dns_batch_count = dns_confirmed_count + dns_pending_count)
);

-- The stream rows as recomputed from the receipts. Used by the one-time backfill and by
-- scan_upload_stream_repair(); a filter on (execution_id, upload_id) is pushed below the
-- GROUP BY, so a repair reads only that stream's receipts through the identity index.
CREATE OR REPLACE VIEW scan_upload_stream_recount AS
SELECT r.execution_id,
       r.upload_id,
       (count(*) FILTER (WHERE r.stream = 'main'))::integer AS batch_count,
       (count(*) FILTER (WHERE r.stream = 'main' AND r.status = 'confirmed'))::integer AS confirmed_count,
       (count(*) FILTER (WHERE r.stream = 'main' AND r.status = 'pending'))::integer AS pending_count,
       min(r.batch_index) FILTER (WHERE r.stream = 'main') AS min_batch,
       max(r.batch_index) FILTER (WHERE r.stream = 'main') AS max_batch,
       (count(*) FILTER (WHERE r.stream = 'main' AND r.is_final))::integer AS final_count,
       max(r.batch_index) FILTER (WHERE r.stream = 'main' AND r.is_final) AS final_batch,
       COALESCE(sum(r.observation_count) FILTER (WHERE r.stream = 'main' AND r.status = 'confirmed'), 0)::bigint
           AS confirmed_observations,
       (count(*) FILTER (WHERE r.stream = 'dns'))::integer AS dns_batch_count,
       (count(*) FILTER (WHERE r.stream = 'dns' AND r.status = 'confirmed'))::integer AS dns_confirmed_count,
       (count(*) FILTER (WHERE r.stream = 'dns' AND r.status = 'pending'))::integer AS dns_pending_count,
       max(r.batch_index) FILTER (WHERE r.stream = 'dns') AS dns_max_batch,
       COALESCE(sum(r.observation_count) FILTER (WHERE r.stream = 'dns' AND r.status = 'confirmed'), 0)::bigint
           AS dns_confirmed_observations
FROM scan_upload_receipts r
GROUP BY r.execution_id, r.upload_id;

-- BEFORE UPDATE guard: a receipt's identity, final flag and observation count never change,
-- and a confirmed receipt never goes back to pending. Otherwise the incremental counts in
-- scan_upload_stream would silently diverge from the receipts.
CREATE OR REPLACE FUNCTION scan_upload_receipt_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id IS DISTINCT FROM OLD.id
       OR NEW.execution_id IS DISTINCT FROM OLD.execution_id
       OR NEW.upload_id IS DISTINCT FROM OLD.upload_id
       OR NEW.stream IS DISTINCT FROM OLD.stream
       OR NEW.batch_index IS DISTINCT FROM OLD.batch_index THEN
        RAISE EXCEPTION 'scan_upload_receipts: receipt identity is immutable (receipt %)', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'scan_upload_receipts_immutable',
                  TABLE = 'scan_upload_receipts';
    END IF;
    IF NEW.is_final IS DISTINCT FROM OLD.is_final THEN
        RAISE EXCEPTION 'scan_upload_receipts: is_final is immutable (receipt %)', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'scan_upload_receipts_immutable',
                  TABLE = 'scan_upload_receipts', COLUMN = 'is_final';
    END IF;
    IF NEW.observation_count IS DISTINCT FROM OLD.observation_count THEN
        RAISE EXCEPTION 'scan_upload_receipts: observation_count is immutable (receipt %)', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'scan_upload_receipts_immutable',
                  TABLE = 'scan_upload_receipts', COLUMN = 'observation_count';
    END IF;
    IF OLD.status = 'confirmed' AND NEW.status <> 'confirmed' THEN
        RAISE EXCEPTION 'scan_upload_receipts: a confirmed receipt cannot return to %, receipt %',
                NEW.status, OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'scan_upload_receipts_immutable',
                  TABLE = 'scan_upload_receipts', COLUMN = 'status';
    END IF;
    RETURN NEW;
END;
$$;

-- AFTER INSERT: add the new batch to its stream, as pending or confirmed as inserted.
-- Why an upsert that adds deltas (x = x + EXCLUDED.x) instead of read-modify-write: two
-- concurrent inserts of different batches of one stream both reach ON CONFLICT; the second
-- waits on the first's row lock (or on its not-yet-committed new row) and then adds its
-- delta to the committed values, so no count is lost. This relies on READ COMMITTED (the
-- default); under REPEATABLE READ the second would fail with a serialization error.
CREATE OR REPLACE FUNCTION scan_upload_stream_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    main      boolean := NEW.stream = 'main';
    confirmed boolean := NEW.status = 'confirmed';
BEGIN
    INSERT INTO scan_upload_stream AS s (
        execution_id, upload_id,
        batch_count, confirmed_count, pending_count, min_batch, max_batch,
        final_count, final_batch, confirmed_observations,
        dns_batch_count, dns_confirmed_count, dns_pending_count, dns_max_batch,
        dns_confirmed_observations)
    VALUES (
        NEW.execution_id, NEW.upload_id,
        CASE WHEN main THEN 1 ELSE 0 END,
        CASE WHEN main AND confirmed THEN 1 ELSE 0 END,
        CASE WHEN main AND NOT confirmed THEN 1 ELSE 0 END,
        CASE WHEN main THEN NEW.batch_index END,
        CASE WHEN main THEN NEW.batch_index END,
        CASE WHEN main AND NEW.is_final THEN 1 ELSE 0 END,
        CASE WHEN main AND NEW.is_final THEN NEW.batch_index END,
        CASE WHEN main AND confirmed THEN NEW.observation_count ELSE 0 END,
        CASE WHEN NOT main THEN 1 ELSE 0 END,
        CASE WHEN NOT main AND confirmed THEN 1 ELSE 0 END,
        CASE WHEN NOT main AND NOT confirmed THEN 1 ELSE 0 END,
        CASE WHEN NOT main THEN NEW.batch_index END,
        CASE WHEN NOT main AND confirmed THEN NEW.observation_count ELSE 0 END)
    ON CONFLICT (execution_id, upload_id) DO UPDATE SET
        batch_count                = s.batch_count + EXCLUDED.batch_count,
        confirmed_count            = s.confirmed_count + EXCLUDED.confirmed_count,
        pending_count              = s.pending_count + EXCLUDED.pending_count,
        min_batch                  = LEAST(s.min_batch, EXCLUDED.min_batch),
        max_batch                  = GREATEST(s.max_batch, EXCLUDED.max_batch),
        final_count                = s.final_count + EXCLUDED.final_count,
        final_batch                = GREATEST(s.final_batch, EXCLUDED.final_batch),
        confirmed_observations     = s.confirmed_observations + EXCLUDED.confirmed_observations,
        dns_batch_count            = s.dns_batch_count + EXCLUDED.dns_batch_count,
        dns_confirmed_count        = s.dns_confirmed_count + EXCLUDED.dns_confirmed_count,
        dns_pending_count          = s.dns_pending_count + EXCLUDED.dns_pending_count,
        dns_max_batch              = GREATEST(s.dns_max_batch, EXCLUDED.dns_max_batch),
        dns_confirmed_observations = s.dns_confirmed_observations + EXCLUDED.dns_confirmed_observations,
        updated_at                 = now();
    RETURN NULL;
END;
$$;

-- AFTER UPDATE OF status, only for pending -> confirmed (the trigger's WHEN clause), so a
-- repeated confirm (confirmed -> confirmed) adds nothing. Moves one batch from pending to
-- confirmed and adds its observations. A plain UPDATE re-reads the latest row version
-- after waiting for a concurrent writer's lock, so concurrent confirms do not lose counts.
-- If the row is missing or has no pending batch to move (only possible after a manual
-- edit), the stream is marked dirty instead of failing the upload; the next upload repairs it.
CREATE OR REPLACE FUNCTION scan_upload_stream_on_confirm() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.stream = 'main' THEN
        UPDATE scan_upload_stream
           SET confirmed_count        = confirmed_count + 1,
               pending_count          = pending_count - 1,
               confirmed_observations = confirmed_observations + NEW.observation_count,
               updated_at             = now()
         WHERE execution_id = NEW.execution_id AND upload_id = NEW.upload_id
           AND pending_count > 0;
    ELSE
        UPDATE scan_upload_stream
           SET dns_confirmed_count        = dns_confirmed_count + 1,
               dns_pending_count          = dns_pending_count - 1,
               dns_confirmed_observations = dns_confirmed_observations + NEW.observation_count,
               updated_at                 = now()
         WHERE execution_id = NEW.execution_id AND upload_id = NEW.upload_id
           AND dns_pending_count > 0;
    END IF;
    IF NOT FOUND THEN
        INSERT INTO scan_upload_stream AS s (execution_id, upload_id, dirty)
        VALUES (NEW.execution_id, NEW.upload_id, true)
        ON CONFLICT (execution_id, upload_id) DO UPDATE SET dirty = true, updated_at = now();
    END IF;
    RETURN NULL;
END;
$$;

-- AFTER DELETE, once per statement: mark every stream that lost a receipt dirty. It does
-- not recount (that would scan receipts inside someone else's delete); the upload path
-- calls scan_upload_stream_repair() when it sees dirty. Statement level so that deleting
-- many receipts (or an execution cascade) touches each stream row once.
CREATE OR REPLACE FUNCTION scan_upload_stream_on_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE scan_upload_stream s
       SET dirty = true, updated_at = now()
      FROM (SELECT DISTINCT execution_id, upload_id FROM old_receipts) d
     WHERE s.execution_id = d.execution_id AND s.upload_id = d.upload_id;
    RETURN NULL;
END;
$$;

-- AFTER TRUNCATE: TRUNCATE fires no delete triggers, so every stream becomes dirty.
CREATE OR REPLACE FUNCTION scan_upload_stream_on_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE scan_upload_stream SET dirty = true, updated_at = now();
    RETURN NULL;
END;
$$;

-- Recompute one stream row from its receipts and clear dirty; returns the repaired row
-- (no row when the stream has neither a row nor receipts). Touches only that stream.
-- Why lock before counting: the row lock makes concurrent receipt inserts/confirms of this
-- stream wait until we commit (they then add their delta on top of our recount), and the
-- recount statement, started after the lock was granted, sees every receipt committed
-- before it. Counting first and locking later could overwrite a concurrent increment.
CREATE OR REPLACE FUNCTION scan_upload_stream_repair(p_execution_id uuid, p_upload_id uuid)
RETURNS SETOF scan_upload_stream
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO scan_upload_stream (execution_id, upload_id, dirty)
    SELECT p_execution_id, p_upload_id, true
     WHERE EXISTS (SELECT 1 FROM scan_upload_receipts r
                    WHERE r.execution_id = p_execution_id AND r.upload_id = p_upload_id)
    ON CONFLICT (execution_id, upload_id) DO NOTHING;

    PERFORM 1 FROM scan_upload_stream s
      WHERE s.execution_id = p_execution_id AND s.upload_id = p_upload_id
      FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;

    RETURN QUERY
    UPDATE scan_upload_stream s
       SET batch_count                = COALESCE(c.batch_count, 0),
           confirmed_count            = COALESCE(c.confirmed_count, 0),
           pending_count              = COALESCE(c.pending_count, 0),
           min_batch                  = c.min_batch,
           max_batch                  = c.max_batch,
           final_count                = COALESCE(c.final_count, 0),
           final_batch                = c.final_batch,
           confirmed_observations     = COALESCE(c.confirmed_observations, 0),
           dns_batch_count            = COALESCE(c.dns_batch_count, 0),
           dns_confirmed_count        = COALESCE(c.dns_confirmed_count, 0),
           dns_pending_count          = COALESCE(c.dns_pending_count, 0),
           dns_max_batch              = c.dns_max_batch,
           dns_confirmed_observations = COALESCE(c.dns_confirmed_observations, 0),
           dirty                      = false,
           updated_at                 = now()
      FROM (SELECT p_execution_id AS execution_id, p_upload_id AS upload_id) k
      LEFT JOIN scan_upload_stream_recount c
             ON c.execution_id = k.execution_id AND c.upload_id = k.upload_id
     WHERE s.execution_id = k.execution_id AND s.upload_id = k.upload_id
    RETURNING s.*;
END;
$$;

-- END shared

-- Triggers on scan_upload_receipts, created when missing (see the header for why not
-- CREATE OR REPLACE TRIGGER). Definitions identical to init.sql.
DO $migrate$
BEGIN
    -- Why guard: see scan_upload_receipt_guard(). BEFORE, so a forbidden change never lands.
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'scan_upload_receipts'::regclass
                   AND tgname = 'scan_upload_receipts_guard') THEN
        CREATE TRIGGER scan_upload_receipts_guard BEFORE UPDATE ON scan_upload_receipts
            FOR EACH ROW EXECUTE FUNCTION scan_upload_receipt_guard();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'scan_upload_receipts'::regclass
                   AND tgname = 'scan_upload_receipts_stream_insert') THEN
        CREATE TRIGGER scan_upload_receipts_stream_insert AFTER INSERT ON scan_upload_receipts
            FOR EACH ROW EXECUTE FUNCTION scan_upload_stream_on_insert();
    END IF;
    -- Why the WHEN clause: only a real pending -> confirmed transition counts.
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'scan_upload_receipts'::regclass
                   AND tgname = 'scan_upload_receipts_stream_confirm') THEN
        CREATE TRIGGER scan_upload_receipts_stream_confirm AFTER UPDATE OF status ON scan_upload_receipts
            FOR EACH ROW WHEN (OLD.status = 'pending' AND NEW.status = 'confirmed')
            EXECUTE FUNCTION scan_upload_stream_on_confirm();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'scan_upload_receipts'::regclass
                   AND tgname = 'scan_upload_receipts_stream_delete') THEN
        CREATE TRIGGER scan_upload_receipts_stream_delete AFTER DELETE ON scan_upload_receipts
            REFERENCING OLD TABLE AS old_receipts
            FOR EACH STATEMENT EXECUTE FUNCTION scan_upload_stream_on_delete();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'scan_upload_receipts'::regclass
                   AND tgname = 'scan_upload_receipts_stream_truncate') THEN
        CREATE TRIGGER scan_upload_receipts_stream_truncate AFTER TRUNCATE ON scan_upload_receipts
            FOR EACH STATEMENT EXECUTE FUNCTION scan_upload_stream_on_truncate();
    END IF;
END
$migrate$;

-- One-time backfill of every stream from the historical receipts.
DO $migrate$
BEGIN
    IF EXISTS (SELECT 1 FROM schema_marker WHERE name = 'scan_upload_stream_backfill') THEN
        RETURN;
    END IF;

    -- Why SHARE ROW EXCLUSIVE: it conflicts with the ROW EXCLUSIVE lock of every
    -- INSERT/UPDATE/DELETE, so no receipt is written (by a forgotten old instance, an
    -- admin script, anything) between the grouped read below and the commit - such a
    -- write would otherwise be counted twice (by its trigger and by the backfill) or not
    -- at all. Plain reads (ACCESS SHARE) continue. It also conflicts with itself, so two
    -- migrators could never backfill at once even without the advisory lock. Held until
    -- the migration commits.
    LOCK TABLE scan_upload_receipts IN SHARE ROW EXCLUSIVE MODE;

    -- One grouped pass over all receipts. ON CONFLICT overwrites: under the lock the
    -- recount is exact, whatever rows the triggers may already have written.
    INSERT INTO scan_upload_stream AS s (
        execution_id, upload_id,
        batch_count, confirmed_count, pending_count, min_batch, max_batch,
        final_count, final_batch, confirmed_observations,
        dns_batch_count, dns_confirmed_count, dns_pending_count, dns_max_batch,
        dns_confirmed_observations, dirty, updated_at)
    SELECT c.execution_id, c.upload_id,
           c.batch_count, c.confirmed_count, c.pending_count, c.min_batch, c.max_batch,
           c.final_count, c.final_batch, c.confirmed_observations,
           c.dns_batch_count, c.dns_confirmed_count, c.dns_pending_count, c.dns_max_batch,
           c.dns_confirmed_observations, false, now()
      FROM scan_upload_stream_recount c
    ON CONFLICT (execution_id, upload_id) DO UPDATE SET
        batch_count                = EXCLUDED.batch_count,
        confirmed_count            = EXCLUDED.confirmed_count,
        pending_count              = EXCLUDED.pending_count,
        min_batch                  = EXCLUDED.min_batch,
        max_batch                  = EXCLUDED.max_batch,
        final_count                = EXCLUDED.final_count,
        final_batch                = EXCLUDED.final_batch,
        confirmed_observations     = EXCLUDED.confirmed_observations,
        dns_batch_count            = EXCLUDED.dns_batch_count,
        dns_confirmed_count        = EXCLUDED.dns_confirmed_count,
        dns_pending_count          = EXCLUDED.dns_pending_count,
        dns_max_batch              = EXCLUDED.dns_max_batch,
        dns_confirmed_observations = EXCLUDED.dns_confirmed_observations,
        dirty                      = false,
        updated_at                 = now();

    INSERT INTO schema_marker (name) VALUES ('scan_upload_stream_backfill')
    ON CONFLICT (name) DO NOTHING;
END
$migrate$;
