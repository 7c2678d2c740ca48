-- scanstore schema, fresh install (schema version 3).
--
-- Owns: every table, index, constraint, trigger and function of the current model.
-- Runs only on an empty database (the runner checks `to_regclass('owners') IS NULL`),
-- as ONE transaction: the Rust runner sends the whole file as one simple query
-- (`batch_execute`), which PostgreSQL executes as a single implicit transaction; by hand
-- use `psql -X -1 -v ON_ERROR_STOP=1 -f schema/init.sql`. There is deliberately no
-- BEGIN/COMMIT here: an explicit BEGIN would leave the session in an aborted transaction
-- block after an error inside batch_execute.
--
-- Upgrades of a previous-release database (schema/legacy_v1.sql) instead run, in order:
--   migrate_scan_projection.sql -> migrate_scan_upload_stream.sql -> migrate_search_target_ip.sql
--   -> migrate_execution_dns_answers.sql -> migrate_execution_lifecycle.sql
-- and then `UPDATE schema_version SET version = 3`. An upgraded database must dump
-- (`pg_dump --schema-only`) exactly like this file's result; tests/sql/run.sh checks it.
-- Therefore:
--   * columns that the migrations ADD to existing tables are declared LAST here, in the
--     order the migrations add them (scan_projection_outbox, search_targets, asset_tags);
--   * scan_upload_stream, its view, functions and triggers are textually identical to
--     migrate_scan_upload_stream.sql (function bodies are dumped verbatim).

SET LOCAL client_min_messages = warning;

------------------------------------------------------------------------------------------
-- Bookkeeping
------------------------------------------------------------------------------------------

-- One row per one-time step that has been applied. init.sql inserts every marker the
-- migrations check, so a fresh install never runs a backfill.
CREATE TABLE schema_marker (
    name       text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- The schema generation, for humans and readiness checks (legacy = 1, current = 3).
CREATE TABLE schema_version (
    -- Why: exactly one row; the boolean key that must be true makes a second row impossible.
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version    integer NOT NULL CHECK (version > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Keeps updated_at honest without every UPDATE statement having to remember it.
CREATE FUNCTION scanstore_touch_updated_at() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;

-- Canonical text form of a target key. Single IPs and domains are matched by primary key
-- (owner_id, kind, key), so one address must have exactly one spelling:
--   ip     = host(key::inet)           e.g. '203.0.113.7', '2001:db8::1' (no mask)
--   cidr   = network(key::inet)::text  e.g. '10.0.0.0/8' (mask always present, no host bits)
--   domain = lower case, non-empty, no trailing dot, no '/'
-- A key that is not an address at all fails the inet cast (SQLSTATE 22P02).
CREATE FUNCTION scanstore_target_key_ok(kind text, key text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE kind
        WHEN 'ip' THEN key = host(key::inet)
        WHEN 'cidr' THEN key = network(key::inet)::text
        WHEN 'domain' THEN key <> '' AND key = lower(key) AND right(key, 1) <> '.'
                           AND strpos(key, '/') = 0
        ELSE false
    END
$$;

------------------------------------------------------------------------------------------
-- Principals
------------------------------------------------------------------------------------------

CREATE TABLE owners (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name         text NOT NULL UNIQUE CHECK (name <> ''),
    -- Why: only the SHA-256 of the token is stored; unique so a token names one owner;
    -- length 32 rejects hex text or truncated digests stored by mistake.
    token_sha256 bytea NOT NULL UNIQUE CHECK (octet_length(token_sha256) = 32),
    is_admin     boolean NOT NULL DEFAULT false,
    disabled     boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE scanners (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name         text NOT NULL UNIQUE CHECK (name <> ''),
    -- Why: as for owners; a scanner authenticates only by this digest.
    token_sha256 bytea NOT NULL UNIQUE CHECK (octet_length(token_sha256) = 32),
    -- NULL = may work for any owner; set = restricted to that owner, and removed with it.
    owner_id     uuid REFERENCES owners (id) ON DELETE CASCADE,
    disabled     boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now()
);

------------------------------------------------------------------------------------------
-- Tasks and executions
------------------------------------------------------------------------------------------

-- Whether a task's port scope is a port list as `nmap -p` takes it and scanstore reads it:
-- ports and ascending ranges within 0-65535, comma-separated, each optionally after T:, U:
-- or S: (TCP, UDP, SCTP), at most 1024 characters. Service names, open ranges (`-100`,
-- `1-`) and wildcards are not taken: a scope must say exactly which endpoints it covers.
CREATE OR REPLACE FUNCTION port_scope_is_valid(scope text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
    SELECT length(scope) <= 1024
       AND scope ~ '^([TUS]:)?[0-9]{1,5}(-[0-9]{1,5})?(,([TUS]:)?[0-9]{1,5}(-[0-9]{1,5})?)*$'
       AND NOT EXISTS (
             SELECT 1 FROM regexp_matches(scope, '([0-9]+)(?:-([0-9]+))?', 'g') AS m
              WHERE m[1]::int > 65535 OR m[2]::int > 65535 OR m[2]::int < m[1]::int)
$fn$;

CREATE TABLE tasks (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner_id             uuid NOT NULL REFERENCES owners (id) ON DELETE CASCADE,
    kind                 text NOT NULL CHECK (kind IN ('port_scan', 'dns', 'mixed')),
    status               text NOT NULL DEFAULT 'pending'
                         CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
    -- Set on tasks generated from the DNS answers of a parent task's execution.
    parent_task_id       uuid REFERENCES tasks (id) ON DELETE CASCADE,
    -- The parent execution whose DNS answers generated this child task (FK added below,
    -- after executions exists). See tasks_source_execution_key.
    source_execution_id  uuid,
    tags                 text[] NOT NULL DEFAULT '{}',
    -- Aggregation maintained by transaction B of each final upload.
    executions_total     bigint NOT NULL DEFAULT 0 CHECK (executions_total >= 0),
    executions_succeeded bigint NOT NULL DEFAULT 0 CHECK (executions_succeeded >= 0),
    endpoints_total      bigint NOT NULL DEFAULT 0 CHECK (endpoints_total >= 0),
    dns_records_total    bigint NOT NULL DEFAULT 0 CHECK (dns_records_total >= 0),
    last_succeeded_at    timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    -- Why: a task cannot be its own parent (the cascade would be meaningless).
    CONSTRAINT tasks_parent_not_self CHECK (parent_task_id IS DISTINCT FROM id),
    -- Why: only generated (child) tasks have a source execution.
    CONSTRAINT tasks_source_needs_parent CHECK (source_execution_id IS NULL OR parent_task_id IS NOT NULL),
    -- The ports a port scan covers (`scanstore-admin task create --ports`), handed to the
    -- scanner with the claim; NULL: whatever the scanner scans, and nothing can be said of
    -- the ports it did not report.
    ports                text CONSTRAINT tasks_ports_valid CHECK (port_scope_is_valid(ports)),
    -- Added by migrate_task_delete.sql on upgrade; declared last.
    -- Set by `scanstore-admin task delete`: from then on the task is gone for reads, its
    -- executions' publication rows are not claimed and rebuilds skip it; the row stays
    -- until its deletion run (outbox kind 'forget') has removed what the task produced.
    deleted_at           timestamptz
);

-- Why: the task list of an owner, newest first, and the owner cascade.
CREATE INDEX tasks_owner_created_idx ON tasks (owner_id, created_at);
-- Why: "does this DNS parent still wait for children?" and the parent cascade; partial
-- because most tasks have no parent.
CREATE INDEX tasks_parent_idx ON tasks (parent_task_id) WHERE parent_task_id IS NOT NULL;

CREATE TRIGGER tasks_touch_updated_at BEFORE UPDATE ON tasks
    FOR EACH ROW EXECUTE FUNCTION scanstore_touch_updated_at();

CREATE TABLE task_targets (
    task_id uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    kind    text NOT NULL CHECK (kind IN ('ip', 'cidr', 'domain')),
    value   text NOT NULL,
    PRIMARY KEY (task_id, kind, value),
    -- Why: freshness matches task targets against search targets by text; one spelling only.
    CONSTRAINT task_targets_value_canonical CHECK (scanstore_target_key_ok(kind, value))
);
-- Why: a batch of a task given more than a thousand networks is checked against only the
-- networks around its addresses (coverage::NAMED_TARGETS), not all of them; partial, on
-- the networks alone. Also created by migrate_task_networks.sql.
CREATE INDEX task_targets_cidr_gist ON task_targets USING gist ((value::inet) inet_ops)
    WHERE kind = 'cidr';

CREATE TABLE executions (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    task_id          uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    -- Why deferred NO ACTION and not RESTRICT: deleting a scanner that authored executions
    -- must fail (its author must not vanish silently), and it does, at the end of the
    -- transaction (in autocommit: of the statement), SQLSTATE 23503. But deleting an owner
    -- cascades both to its restricted scanners and to its tasks' executions, each cascade
    -- being its own nested query; RESTRICT and immediate NO ACTION both check at the end
    -- of the scanner cascade, before the task cascade has removed the executions, so the
    -- owner could never be deleted (tests/sql/constraints.sql shows the
    -- immediate case). Checking at commit sees the final state.
    -- The scanner that claimed (or was assigned) the execution; NULL only while it is
    -- queued for any enabled scanner of the task's owner (see any_scanner).
    scanner_id       uuid REFERENCES scanners (id) ON DELETE NO ACTION
                     DEFERRABLE INITIALLY DEFERRED,
    status           text NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
    observation_count bigint NOT NULL DEFAULT 0 CHECK (observation_count >= 0),
    endpoint_count    bigint NOT NULL DEFAULT 0 CHECK (endpoint_count >= 0),
    dns_record_count  bigint NOT NULL DEFAULT 0 CHECK (dns_record_count >= 0),
    ip_count          bigint NOT NULL DEFAULT 0 CHECK (ip_count >= 0),
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- Added by migrate_execution_lifecycle.sql on upgrade; declared last.
    -- While running: when the claim lapses unless the scanner heartbeats or sends a batch.
    -- NULL on executions that were running before the upgrade (they never lapse).
    lease_expires_at timestamptz,
    -- Claims so far; a lease that lapses on the last allowed one fails the execution.
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- Why it failed: the scanner's reason, or lease_expired.
    failure_reason   text CHECK (octet_length(failure_reason) <= 1024),
    -- Created without a scanner: a lapsed lease returns it to the whole owner's scanners.
    any_scanner      boolean NOT NULL DEFAULT false,
    -- Added by migrate_retention.sql on upgrade; declared last.
    -- When retention removed the execution's upload records (receipts, upload streams, DNS
    -- answers, analysis and outbox rows); the row and its results stay. NULL while kept.
    pruned_at        timestamptz,
    -- Why: only a queued execution may wait for a scanner; once claimed it has one.
    CONSTRAINT executions_scanner_when_claimed CHECK (scanner_id IS NOT NULL OR status = 'queued')
);

-- Why: the scanner claim reads "oldest queued execution of this scanner" (or with no
-- scanner, scanner_id IS NULL); partial so the index holds only the (few) queued rows,
-- not the whole history.
CREATE INDEX executions_claim_idx ON executions (scanner_id, created_at) WHERE status = 'queued';
-- Why: the lease sweeper reads "running executions whose lease has lapsed"; partial on
-- running, which is a handful of rows. Also created by migrate_execution_lifecycle.sql.
CREATE INDEX executions_lease_idx ON executions (lease_expires_at) WHERE status = 'running';
-- Why: a scanner's own executions, newest first (GET /api/v1/scanner/executions), and the
-- check at commit that a deleted scanner authored none. Also created by
-- migrate_execution_lifecycle.sql.
CREATE INDEX executions_scanner_idx ON executions (scanner_id, created_at);
-- Why: executions of a task (task detail, aggregation) and the task cascade.
CREATE INDEX executions_task_idx ON executions (task_id, created_at);
-- Why: every final asks whether its task is settled (no execution left that has not
-- succeeded); partial, so it reads the few unsettled ones, not the task's whole history.
-- Also created by migrate_task_freshness.sql.
CREATE INDEX executions_task_unsettled_idx ON executions (task_id) WHERE status <> 'succeeded';
-- Why: a settled task's scan time is the newest start among its succeeded executions,
-- read backwards as one entry instead of sorting them all. Also created by
-- migrate_task_freshness.sql.
CREATE INDEX executions_task_scan_time_idx
    ON executions (task_id, (coalesce(started_at, created_at)), id) WHERE status = 'succeeded';
-- Why: retention walks the finished executions whose records it has not pruned, oldest
-- first, by (finished_at, id) keyset; partial, so pruned history leaves the index. Also created by migrate_retention.sql.
CREATE INDEX executions_prune_idx ON executions (finished_at, id)
    WHERE finished_at IS NOT NULL AND pruned_at IS NULL;

CREATE TRIGGER executions_touch_updated_at BEFORE UPDATE ON executions
    FOR EACH ROW EXECUTE FUNCTION scanstore_touch_updated_at();

-- Why: a child task remembers the execution that generated it; SET NULL because a deleted
-- execution must not take the child's own results with it.
ALTER TABLE tasks ADD CONSTRAINT tasks_source_execution_id_fkey
    FOREIGN KEY (source_execution_id) REFERENCES executions (id) ON DELETE SET NULL;
-- Why: DNS child generation must be idempotent under upload retries and duplicate finals:
-- at most one child task per source execution. The generator upserts
--   INSERT INTO tasks (...) VALUES (...)
--   ON CONFLICT (source_execution_id) WHERE source_execution_id IS NOT NULL
--   DO UPDATE SET updated_at = tasks.updated_at RETURNING id
-- and then adds targets with INSERT INTO task_targets ... ON CONFLICT DO NOTHING.
-- The index also serves the SET NULL above.
CREATE UNIQUE INDEX tasks_source_execution_key ON tasks (source_execution_id)
    WHERE source_execution_id IS NOT NULL;

------------------------------------------------------------------------------------------
-- Upload receipts
------------------------------------------------------------------------------------------

CREATE TABLE scan_upload_receipts (
    id                 bigserial PRIMARY KEY,
    execution_id       uuid NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
    upload_id          uuid NOT NULL,
    stream             text NOT NULL CHECK (stream IN ('main', 'dns')),
    batch_index        integer NOT NULL CHECK (batch_index >= 0),
    is_final           boolean NOT NULL DEFAULT false,
    checksum           text NOT NULL,
    observation_count  integer NOT NULL CHECK (observation_count >= 0),
    endpoint_count     integer NOT NULL DEFAULT 0 CHECK (endpoint_count >= 0),
    dns_record_count   integer NOT NULL DEFAULT 0 CHECK (dns_record_count >= 0),
    status             text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'confirmed')),
    -- ES indices this batch wrote. NULL = legacy receipt written before references were
    -- recorded: a final over such receipts uses the all-history index scope.
    storage_references text[],
    created_at         timestamptz NOT NULL DEFAULT now(),
    confirmed_at       timestamptz,
    -- Set by the confirm that also recorded the batch's A/AAAA answers in
    -- execution_dns_answers. false on a receipt confirmed by an older release: a final
    -- over such receipts reads the answers from the facts instead. Added by
    -- migrate_execution_dns_answers.sql on upgrade; declared last.
    dns_answers_recorded boolean NOT NULL DEFAULT false,
    -- Why: one receipt per batch identity; a retry finds its receipt here. The index also
    -- serves "this execution's receipts" and the execution cascade (leading column).
    CONSTRAINT scan_upload_receipts_identity_key UNIQUE (execution_id, upload_id, stream, batch_index),
    -- Why: the dns sidecar has no final; only the main stream ends with one.
    CONSTRAINT scan_upload_receipts_dns_not_final CHECK (stream = 'main' OR NOT is_final),
    -- Why: confirmed_at records when the receipt was confirmed, and only then.
    CONSTRAINT scan_upload_receipts_confirmed_at CHECK ((status = 'confirmed') = (confirmed_at IS NOT NULL))
);

------------------------------------------------------------------------------------------
-- DNS answers awaiting the final (also created by migrate_execution_dns_answers.sql)
------------------------------------------------------------------------------------------

-- The distinct A/AAAA answers of a running DNS or mixed execution, at most 1024 (the child
-- task's target limit), recorded by each batch's confirm under the execution lock so
-- that the final reads a bounded set instead of aggregating every DNS fact of the
-- execution in Elasticsearch. The final turns them into the child task and deletes them.
CREATE TABLE IF NOT EXISTS execution_dns_answers (
    execution_id uuid NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
    address      inet NOT NULL,
    -- Why: a retried confirm adds nothing twice, and the final reads the answers of one
    -- execution in address order from this index alone.
    PRIMARY KEY (execution_id, address)
);

------------------------------------------------------------------------------------------
-- Upload streams: per (execution_id, upload_id) state derived from the receipts.
-- Identical text in migrate_scan_upload_stream.sql.
------------------------------------------------------------------------------------------

-- BEGIN shared with migrate_scan_upload_stream.sql (tests/sql/run.sh checks it is identical)
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

-- Added by migrate_execution_lifecycle.sql on upgrade; declared after the shared block.
-- Set when the upload is abandoned (by its scanner, or when its claim ended): its
-- confirmed batches stay and count, it takes no more batches, and a final does not wait
-- for it.
ALTER TABLE scan_upload_stream ADD COLUMN abandoned_at timestamptz;
-- Why: the lease sweep looks for abandoned uploads whose pending batches are still to be
-- undone (a crash may interrupt the clean-up); partial, so it holds only those few rows.
-- Also created by migrate_execution_lifecycle.sql.
CREATE INDEX scan_upload_stream_abandoned_idx ON scan_upload_stream (execution_id)
    WHERE abandoned_at IS NOT NULL AND (pending_count > 0 OR dns_pending_count > 0);

-- Why guard: see scan_upload_receipt_guard(). BEFORE, so a forbidden change never lands.
CREATE TRIGGER scan_upload_receipts_guard BEFORE UPDATE ON scan_upload_receipts
    FOR EACH ROW EXECUTE FUNCTION scan_upload_receipt_guard();
CREATE TRIGGER scan_upload_receipts_stream_insert AFTER INSERT ON scan_upload_receipts
    FOR EACH ROW EXECUTE FUNCTION scan_upload_stream_on_insert();
-- Why the WHEN clause: only a real pending -> confirmed transition counts; a repeated
-- confirm or any other update does not even call the function.
CREATE TRIGGER scan_upload_receipts_stream_confirm AFTER UPDATE OF status ON scan_upload_receipts
    FOR EACH ROW WHEN (OLD.status = 'pending' AND NEW.status = 'confirmed')
    EXECUTE FUNCTION scan_upload_stream_on_confirm();
CREATE TRIGGER scan_upload_receipts_stream_delete AFTER DELETE ON scan_upload_receipts
    REFERENCING OLD TABLE AS old_receipts
    FOR EACH STATEMENT EXECUTE FUNCTION scan_upload_stream_on_delete();
CREATE TRIGGER scan_upload_receipts_stream_truncate AFTER TRUNCATE ON scan_upload_receipts
    FOR EACH STATEMENT EXECUTE FUNCTION scan_upload_stream_on_truncate();

------------------------------------------------------------------------------------------
-- Queues
------------------------------------------------------------------------------------------

-- An owner's deletion (`scanstore-admin asset delete`): the owner's asset documents in
-- `target` (one address as /32 or /128, or a network), on one endpoint (port and transport)
-- or all, are deleted, and no observation made at or before `deleted_at` brings them back
-- into the owner's view (publication and rebuild consult this table); a newer one does.
CREATE TABLE asset_tombstones (
    id          bigserial PRIMARY KEY,
    owner_id    uuid NOT NULL REFERENCES owners (id) ON DELETE CASCADE,
    target      cidr NOT NULL,
    port        integer CHECK (port BETWEEN 0 AND 65535),
    transport   text CHECK (transport IN ('tcp', 'udp', 'sctp')),
    deleted_at  timestamptz NOT NULL DEFAULT now(),
    -- Why: one endpoint of each address names both; the whole address neither.
    CONSTRAINT asset_tombstones_endpoint_pair CHECK ((port IS NULL) = (transport IS NULL))
);

-- Why: every publication page looks up its owner's tombstones.
CREATE INDEX asset_tombstones_owner_idx ON asset_tombstones (owner_id);
-- Why: retention writes one tombstone per stale endpoint, so an owner may have many, and
-- the lookup of "tombstones whose target contains this address" must not read them all.
-- Also created by migrate_retention.sql.
CREATE INDEX asset_tombstones_target_idx ON asset_tombstones USING gist (target inet_ops);
-- Why: retention retires the oldest tombstones first (retention.tombstone_days). Also
-- created by migrate_retention.sql.
CREATE INDEX asset_tombstones_deleted_idx ON asset_tombstones (deleted_at);

-- One row per retention run (`scanstore retention run`, or the daily run in `serve`): the
-- instances read the latest to know whether a run is due. Also created by
-- migrate_retention.sql.
CREATE TABLE retention_runs (
    id           bigserial PRIMARY KEY,
    started_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    outcome      text CHECK (outcome IN ('completed', 'failed')),
    -- What it removed, by kind: {"facts_indices": 1, "assets": 250, ...}.
    removed      jsonb,
    -- Why: a run is either under way (neither) or over (both).
    CONSTRAINT retention_runs_outcome_when_finished
        CHECK ((finished_at IS NULL) = (outcome IS NULL))
);

-- Asset publication outbox. States of a row:
--   waiting    processed_at IS NULL, claim_token IS NULL (or lease expired), available_at
--   leased     claim_token + lease_expires_at > now(): only that token may renew,
--              checkpoint (cursor, processed_endpoints, phase), retry or complete
--   done       processed_at IS NOT NULL
-- phase 'publishing' pages through the execution's endpoints from cursor; 'refreshing'
-- means all pages are written and only the final refresh remains (and, for a 'forget'
-- row, removing the task's documents and rows, each step idempotent).
CREATE TABLE scan_projection_outbox (
    id               bigserial PRIMARY KEY,
    kind             text NOT NULL,
    execution_id     uuid REFERENCES executions (id) ON DELETE CASCADE,
    owner_id         uuid NOT NULL REFERENCES owners (id) ON DELETE CASCADE,
    -- kind 'tags': which of the owner's targets the tag change affects,
    -- e.g. {"kind": "cidr", "key": "10.0.0.0/8"}.
    tag_scope        jsonb,
    available_at     timestamptz NOT NULL DEFAULT now(),
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error       text,
    last_error_class text CHECK (last_error_class IN ('transient', 'permanent')),
    processed_at     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- Added by migrate_scan_projection.sql on upgrade; declared last, in that order.
    claim_token         uuid,
    lease_expires_at    timestamptz,
    cursor              text,
    phase               text NOT NULL DEFAULT 'publishing',
    processed_endpoints bigint NOT NULL DEFAULT 0,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    -- Added by migrate_asset_lifecycle.sql on upgrade; declared last, in that order.
    -- kind 'close': the succeeded execution whose port scope closes what it did not see.
    -- A column of its own, not execution_id: that one's unique index is what a final's
    -- ON CONFLICT (execution_id) infers, in this release and the one before it.
    closing_execution_id uuid REFERENCES executions (id) ON DELETE CASCADE,
    -- kind 'delete': the tombstone whose asset documents to delete.
    tombstone_id        bigint REFERENCES asset_tombstones (id) ON DELETE CASCADE,
    -- Added by migrate_retention.sql on upgrade; declared last.
    -- kind 'expire': the owner's assets last seen before this time are deleted, each with
    -- a tombstone (retention.asset_days).
    expire_before       timestamptz,
    -- Added by migrate_task_delete.sql on upgrade; declared last.
    -- kind 'forget': the deleted task (tasks.deleted_at) whose contributions to the asset
    -- views, documents and rows the run removes. No foreign key: the run's last statement
    -- deletes the task and completes the row together, and the row stays as its record.
    forget_task_id      uuid,
    -- Why: each kind of row carries exactly its own reference (an execution to publish,
    -- the targets of a tag change, the execution that closes, the tombstone to apply, the
    -- age limit, the task to forget), which also lets the execution_id index be plain
    -- unique.
    CONSTRAINT scan_projection_outbox_kind_check
        CHECK (kind IN ('execution', 'tags', 'close', 'delete', 'expire', 'forget')),
    CONSTRAINT scan_projection_outbox_kind_shape CHECK (
        num_nonnulls(execution_id, tag_scope, closing_execution_id, tombstone_id,
                     expire_before, forget_task_id) = 1
        AND CASE kind WHEN 'execution' THEN execution_id IS NOT NULL
                      WHEN 'tags' THEN tag_scope IS NOT NULL
                      WHEN 'close' THEN closing_execution_id IS NOT NULL
                      WHEN 'delete' THEN tombstone_id IS NOT NULL
                      WHEN 'expire' THEN expire_before IS NOT NULL
                      WHEN 'forget' THEN forget_task_id IS NOT NULL END),
    -- Why: a phase outside these two would be claimable but never finishable.
    CONSTRAINT scan_projection_outbox_phase_check CHECK (phase IN ('publishing', 'refreshing')),
    CONSTRAINT scan_projection_outbox_processed_endpoints_check CHECK (processed_endpoints >= 0),
    -- Why: a row is either unleased (both NULL) or leased (both set); a token without an
    -- expiry could never be taken over, an expiry without a token could never be renewed.
    CONSTRAINT scan_projection_outbox_lease_pair CHECK ((claim_token IS NULL) = (lease_expires_at IS NULL))
);

-- Why unique: at most one publication row per execution, so a duplicate final enqueues
-- nothing twice (INSERT ... ON CONFLICT (execution_id) DO NOTHING; the form
-- ON CONFLICT (execution_id) WHERE kind = 'execution' is inferred from it as well).
-- Plain (not partial) so it also serves the ON DELETE CASCADE from executions; tags rows
-- have NULL execution_id and NULLs never conflict.
CREATE UNIQUE INDEX scan_projection_outbox_execution_key ON scan_projection_outbox (execution_id);
-- Why unique: one close run per execution, however often its publication completes (a
-- requeue, a lost completion); also serves the ON DELETE CASCADE from executions.
CREATE UNIQUE INDEX scan_projection_outbox_closing_key ON scan_projection_outbox (closing_execution_id);
-- Why unique: one deletion run per tombstone; also serves the cascade from tombstones.
CREATE UNIQUE INDEX scan_projection_outbox_tombstone_key ON scan_projection_outbox (tombstone_id);
-- Why unique: one waiting age-limit run per owner; a retention run moves its limit on
-- (ON CONFLICT … DO UPDATE) instead of queueing another. Also created by
-- migrate_retention.sql.
CREATE UNIQUE INDEX scan_projection_outbox_expire_key ON scan_projection_outbox (owner_id)
    WHERE kind = 'expire' AND processed_at IS NULL;
-- Why: "published in the last hour" (scripts/backlog.sql) and retention's removal of
-- processed rows that belong to no execution (tag changes, deletions, age limits) read
-- the processed rows by time, which would otherwise read the whole history. Also created
-- by migrate_retention.sql.
CREATE INDEX scan_projection_outbox_processed_idx ON scan_projection_outbox (processed_at)
    WHERE processed_at IS NOT NULL;
-- Why unique: one deletion run per task, however often `task delete` is repeated.
CREATE UNIQUE INDEX scan_projection_outbox_forget_key ON scan_projection_outbox (forget_task_id);
-- Why: every publication page of an execution looks up the owner's close runs that
-- started after its oldest open observation; a close row is created after its execution
-- started, so only rows created after that observation qualify, and a page newer than
-- every close run reads none. Also created by migrate_close_lookup.sql.
CREATE INDEX scan_projection_outbox_close_owner_idx ON scan_projection_outbox (owner_id, created_at)
    WHERE kind = 'close';
-- Why: the claim takes the oldest due unprocessed rows,
--   WHERE processed_at IS NULL AND available_at <= now()
--     AND (claim_token IS NULL OR lease_expires_at <= now())
--   ORDER BY available_at, id ... FOR UPDATE SKIP LOCKED
-- partial so finished rows (the bulk of the table) are not in the index. created_at is
-- carried so that the backlog query (count and oldest of the unprocessed rows) is an
-- index-only scan: it visits the heap, which the processed history spreads out, only for
-- pages not marked all-visible. Also created by
-- migrate_backlog_count.sql.
CREATE INDEX scan_projection_outbox_claim_idx ON scan_projection_outbox (available_at, id)
    INCLUDE (created_at) WHERE processed_at IS NULL;

CREATE TRIGGER scan_projection_outbox_touch_updated_at BEFORE UPDATE ON scan_projection_outbox
    FOR EACH ROW EXECUTE FUNCTION scanstore_touch_updated_at();

CREATE TABLE scan_analysis_queue (
    id           bigserial PRIMARY KEY,
    -- Why unique: one analysis per execution even if the final is retried.
    execution_id uuid NOT NULL UNIQUE REFERENCES executions (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz
);

-- Why: the consumer takes unprocessed rows in order; partial keeps it small.
CREATE INDEX scan_analysis_queue_pending_idx ON scan_analysis_queue (id) WHERE processed_at IS NULL;

------------------------------------------------------------------------------------------
-- Search targets and tags
------------------------------------------------------------------------------------------

-- target_ip: STORED generated column, the key as inet for kind ip/cidr, NULL for domains
-- (a domain is never cast). text -> inet goes through inet_in, which is IMMUTABLE, so
-- PostgreSQL accepts the expression in a generated column.
CREATE TABLE search_targets (
    owner_id          uuid NOT NULL REFERENCES owners (id) ON DELETE CASCADE,
    kind              text NOT NULL CHECK (kind IN ('ip', 'cidr', 'domain')),
    key               text NOT NULL,
    -- Freshness: the last successful scan covering this target. Not a foreign key: the
    -- time stays true after the execution is deleted, and no extra index is needed.
    last_scanned_at   timestamptz,
    last_execution_id uuid,
    created_at        timestamptz NOT NULL DEFAULT now(),
    -- Added by migrate_search_target_ip.sql on upgrade; declared last.
    target_ip         inet GENERATED ALWAYS AS (CASE WHEN kind IN ('ip', 'cidr') THEN key::inet END) STORED,
    -- Why: single IPs and domains are updated by this key (owner, kind, key).
    PRIMARY KEY (owner_id, kind, key),
    -- Why: exact-key matching needs one spelling per address (scanstore_target_key_ok).
    CONSTRAINT search_targets_key_canonical CHECK (scanstore_target_key_ok(kind, key))
);

-- Why: freshness updates CIDR targets by containment (target_ip <<= scanned network,
-- target_ip >>= scanned address); GiST inet_ops answers both. Partial on kind = 'cidr'
-- because IPs and domains go through the primary key; queries must repeat
-- kind = 'cidr' for the planner to use it.
CREATE INDEX search_targets_cidr_gist ON search_targets USING gist (target_ip inet_ops)
    WHERE kind = 'cidr';
-- Why: freshness updates single-IP targets inside a scanned network or address
-- (target_ip <<= scanned); partial on kind = 'ip' as search_targets_cidr_gist is on
-- 'cidr', and queries must repeat kind = 'ip' for the planner to use it. Also created by
-- migrate_execution_lifecycle.sql.
CREATE INDEX search_targets_ip_gist ON search_targets USING gist (target_ip inet_ops)
    WHERE kind = 'ip';

CREATE TABLE asset_tags (
    owner_id   uuid NOT NULL REFERENCES owners (id) ON DELETE CASCADE,
    kind       text NOT NULL CHECK (kind IN ('ip', 'cidr', 'domain')),
    key        text NOT NULL,
    tag        text NOT NULL CHECK (tag <> ''),
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Added by migrate_search_target_ip.sql on upgrade; declared last.
    target_ip  inet GENERATED ALWAYS AS (CASE WHEN kind IN ('ip', 'cidr') THEN key::inet END) STORED,
    PRIMARY KEY (owner_id, kind, key, tag),
    -- Why: tags are looked up by exact key for IPs/domains; one spelling per address.
    CONSTRAINT asset_tags_key_canonical CHECK (scanstore_target_key_ok(kind, key))
);

-- Why: tagging at upload finds the CIDR tags containing an observed IP
-- (target_ip >>= ip AND kind = 'cidr').
CREATE INDEX asset_tags_cidr_gist ON asset_tags USING gist (target_ip inet_ops)
    WHERE kind = 'cidr';

------------------------------------------------------------------------------------------
-- Version and markers of a fresh install
------------------------------------------------------------------------------------------

INSERT INTO schema_version (version) VALUES (3);
INSERT INTO schema_marker (name) VALUES
    ('scan_projection_v2'),
    ('scan_upload_stream_backfill'),
    ('search_target_ip'),
    ('execution_dns_answers'),
    ('execution_lifecycle'),
    ('task_ports'),
    ('asset_lifecycle'),
    ('retention'),
    ('task_delete'),
    ('close_lookup'),
    ('task_freshness'),
    ('task_networks'),
    ('backlog_count');
