-- scanstore schema of the PREVIOUS release (schema version 1), kept for upgrade tests.
--
-- Never run by the server. tests/sql/run.sh loads it (plus tests/sql/legacy_seed.sql) to
-- prove that migrate_scan_projection.sql -> migrate_scan_upload_stream.sql ->
-- migrate_search_target_ip.sql turn it into exactly the schema of init.sql.
-- Differences from init.sql: the outbox has no lease/cursor columns (claim_token,
-- lease_expires_at, cursor, phase, processed_endpoints, updated_at) and an older claim
-- index on (available_at); there is no scan_upload_stream (table, view, functions, receipt
-- triggers); search_targets and asset_tags have no target_ip column or GiST index;
-- schema_version = 1 and none of the three markers exist.

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

-- The schema generation, for humans and readiness checks (legacy = 1, current = 2).
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
    CONSTRAINT tasks_source_needs_parent CHECK (source_execution_id IS NULL OR parent_task_id IS NOT NULL)
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
    scanner_id       uuid NOT NULL REFERENCES scanners (id) ON DELETE NO ACTION
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
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- Why: the scanner claim reads "oldest queued execution of this scanner"; partial so the
-- index holds only the (few) queued rows, not the whole history.
CREATE INDEX executions_claim_idx ON executions (scanner_id, created_at) WHERE status = 'queued';
-- Why: executions of a task (task detail, aggregation, freshness) and the task cascade.
CREATE INDEX executions_task_idx ON executions (task_id, created_at);

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
    -- Why: one receipt per batch identity; a retry finds its receipt here. The index also
    -- serves "this execution's receipts" and the execution cascade (leading column).
    CONSTRAINT scan_upload_receipts_identity_key UNIQUE (execution_id, upload_id, stream, batch_index),
    -- Why: the dns sidecar has no final; only the main stream ends with one.
    CONSTRAINT scan_upload_receipts_dns_not_final CHECK (stream = 'main' OR NOT is_final),
    -- Why: confirmed_at records when the receipt was confirmed, and only then.
    CONSTRAINT scan_upload_receipts_confirmed_at CHECK ((status = 'confirmed') = (confirmed_at IS NOT NULL))
);

------------------------------------------------------------------------------------------
-- Queues
------------------------------------------------------------------------------------------

-- Asset publication outbox of the previous release (no leases: one synchronous publisher).
CREATE TABLE scan_projection_outbox (
    id               bigserial PRIMARY KEY,
    kind             text NOT NULL CHECK (kind IN ('execution', 'tags')),
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
    -- Why: an execution row must say which execution to publish, a tags row which targets;
    -- tags rows carry no execution, which also lets the execution_id index be plain unique.
    CONSTRAINT scan_projection_outbox_kind_shape CHECK (
        (kind = 'execution' AND execution_id IS NOT NULL AND tag_scope IS NULL)
        OR (kind = 'tags' AND execution_id IS NULL AND tag_scope IS NOT NULL))
);

-- Why unique: at most one publication row per execution, so a duplicate final enqueues
-- nothing twice (INSERT ... ON CONFLICT (execution_id) DO NOTHING; the form
-- ON CONFLICT (execution_id) WHERE kind = 'execution' is inferred from it as well).
-- Plain (not partial) so it also serves the ON DELETE CASCADE from executions; tags rows
-- have NULL execution_id and NULLs never conflict.
CREATE UNIQUE INDEX scan_projection_outbox_execution_key ON scan_projection_outbox (execution_id);
-- Why: the previous release's claim: due unprocessed rows by available_at.
CREATE INDEX scan_projection_outbox_due_idx ON scan_projection_outbox (available_at)
    WHERE processed_at IS NULL;

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

CREATE TABLE search_targets (
    owner_id          uuid NOT NULL REFERENCES owners (id) ON DELETE CASCADE,
    kind              text NOT NULL CHECK (kind IN ('ip', 'cidr', 'domain')),
    key               text NOT NULL,
    -- Freshness: the last successful scan covering this target. Not a foreign key: the
    -- time stays true after the execution is deleted, and no extra index is needed.
    last_scanned_at   timestamptz,
    last_execution_id uuid,
    created_at        timestamptz NOT NULL DEFAULT now(),
    -- Why: single IPs and domains are updated by this key (owner, kind, key).
    PRIMARY KEY (owner_id, kind, key),
    -- Why: exact-key matching needs one spelling per address (scanstore_target_key_ok).
    CONSTRAINT search_targets_key_canonical CHECK (scanstore_target_key_ok(kind, key))
);

CREATE TABLE asset_tags (
    owner_id   uuid NOT NULL REFERENCES owners (id) ON DELETE CASCADE,
    kind       text NOT NULL CHECK (kind IN ('ip', 'cidr', 'domain')),
    key        text NOT NULL,
    tag        text NOT NULL CHECK (tag <> ''),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_id, kind, key, tag),
    -- Why: tags are looked up by exact key for IPs/domains; one spelling per address.
    CONSTRAINT asset_tags_key_canonical CHECK (scanstore_target_key_ok(kind, key))
);

------------------------------------------------------------------------------------------
-- Version (no markers: none of the current one-time steps has run)
------------------------------------------------------------------------------------------

INSERT INTO schema_version (version) VALUES (1);
