-- Constraints, cascades and idempotence rules on a fresh init.sql database (run.sh constraints).

INSERT INTO owners (id, name, token_sha256) VALUES
    ('00000000-0000-4000-8000-000000000001', 'alice', sha256('alice')),
    ('00000000-0000-4000-8000-000000000002', 'bob', sha256('bob'));
INSERT INTO scanners (id, name, token_sha256, owner_id) VALUES
    ('00000000-0000-4000-8000-0000000000a1', 'any', sha256('any'), NULL),
    ('00000000-0000-4000-8000-0000000000a2', 'alice-only', sha256('alice-only'), '00000000-0000-4000-8000-000000000001');
INSERT INTO tasks (id, owner_id, kind) VALUES
    ('00000000-0000-4000-8000-0000000000b1', '00000000-0000-4000-8000-000000000001', 'dns'),
    ('00000000-0000-4000-8000-0000000000b2', '00000000-0000-4000-8000-000000000002', 'port_scan');
INSERT INTO executions (id, task_id, scanner_id, status) VALUES
    ('00000000-0000-4000-8000-0000000000e1', '00000000-0000-4000-8000-0000000000b1', '00000000-0000-4000-8000-0000000000a2', 'succeeded'),
    ('00000000-0000-4000-8000-0000000000e2', '00000000-0000-4000-8000-0000000000b2', '00000000-0000-4000-8000-0000000000a1', 'succeeded');

-- Tokens are SHA-256 digests: exactly 32 bytes.
SELECT pg_temp.check_raises($$INSERT INTO owners (name, token_sha256) VALUES ('x', '\x00ff')$$,
                            '23514', 'owners_token_sha256_check', 'owner token digest must be 32 bytes');
SELECT pg_temp.check_raises($$INSERT INTO scanners (name, token_sha256) VALUES ('x', sha256('any'))$$,
                            '23505', NULL, 'scanner token digest unique');

-- Canonical target keys (search_targets, asset_tags, task_targets share the rule).
INSERT INTO search_targets (owner_id, kind, key)
SELECT '00000000-0000-4000-8000-000000000001', k, v
  FROM (VALUES ('ip', '203.0.113.7'), ('ip', '2001:db8::1'), ('cidr', '10.0.0.0/8'),
               ('cidr', '10.0.0.1/32'), ('cidr', '2001:db8::/32'), ('domain', 'example.com')) AS t(k, v);
SELECT pg_temp.check_eq((SELECT count(*) FROM search_targets), 6::bigint, 'canonical ip/cidr/domain keys accepted');
SELECT pg_temp.check_eq(
    (SELECT string_agg(kind || '=' || coalesce(target_ip::text, 'NULL'), ' ' ORDER BY kind, key) FROM search_targets),
    'cidr=10.0.0.0/8 cidr=10.0.0.1/32 cidr=2001:db8::/32 domain=NULL ip=2001:db8::1/128 ip=203.0.113.7/32',
    'target_ip generated: inet for ip/cidr, NULL for domains');
SELECT pg_temp.check_raises(format($$INSERT INTO search_targets (owner_id, kind, key) VALUES ('00000000-0000-4000-8000-000000000002', %L, %L)$$, k, v),
                            '23514', 'search_targets_key_canonical', format('non-canonical %s key %s rejected', k, v))
  FROM (VALUES ('ip', '203.0.113.7/32'), ('ip', '10.0.0.0/8'), ('ip', '2001:DB8::1'), ('ip', '2001:db8:0::1'),
               ('cidr', '10.0.0.1/8'), ('cidr', '10.0.0.0'), ('domain', 'Example.com'),
               ('domain', 'example.com.'), ('domain', ''), ('domain', '10.0.0.0/8')) AS t(k, v);
SELECT pg_temp.check_raises($$INSERT INTO search_targets (owner_id, kind, key) VALUES ('00000000-0000-4000-8000-000000000002', 'ip', 'example.com')$$,
                            '22P02', NULL, 'an ip key that is no address fails the inet cast');
SELECT pg_temp.check_raises($$INSERT INTO search_targets (owner_id, kind, key, target_ip) VALUES ('00000000-0000-4000-8000-000000000002', 'ip', '192.0.2.1', '192.0.2.2')$$,
                            '428C9', NULL, 'target_ip cannot be written');
SELECT pg_temp.check_raises($$INSERT INTO task_targets (task_id, kind, value) VALUES ('00000000-0000-4000-8000-0000000000b2', 'cidr', '192.0.2.7/24')$$,
                            '23514', 'task_targets_value_canonical', 'task target with host bits rejected');
SELECT pg_temp.check_raises($$INSERT INTO asset_tags (owner_id, kind, key, tag) VALUES ('00000000-0000-4000-8000-000000000002', 'domain', 'WWW.example.com', 't')$$,
                            '23514', 'asset_tags_key_canonical', 'asset tag with upper-case domain rejected');

-- Receipts: confirmed_at exactly when confirmed.
SELECT pg_temp.check_raises($$INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, checksum, observation_count, status)
                              VALUES ('00000000-0000-4000-8000-0000000000e2', gen_random_uuid(), 'main', 0, 'x', 1, 'confirmed')$$,
                            '23514', 'scan_upload_receipts_confirmed_at', 'confirmed receipt needs confirmed_at');
SELECT pg_temp.check_raises($$INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, checksum, observation_count)
                              VALUES ('00000000-0000-4000-8000-0000000000e2', gen_random_uuid(), 'main', -1, 'x', 1)$$,
                            '23514', 'scan_upload_receipts_batch_index_check', 'negative batch index rejected');

-- Outbox: one row per execution; shape; lease pair; phase.
INSERT INTO scan_projection_outbox (kind, execution_id, owner_id)
VALUES ('execution', '00000000-0000-4000-8000-0000000000e2', '00000000-0000-4000-8000-000000000002')
ON CONFLICT (execution_id) DO NOTHING;
INSERT INTO scan_projection_outbox (kind, execution_id, owner_id)
VALUES ('execution', '00000000-0000-4000-8000-0000000000e2', '00000000-0000-4000-8000-000000000002')
ON CONFLICT (execution_id) DO NOTHING;
INSERT INTO scan_projection_outbox (kind, execution_id, owner_id)
VALUES ('execution', '00000000-0000-4000-8000-0000000000e2', '00000000-0000-4000-8000-000000000002')
ON CONFLICT (execution_id) WHERE kind = 'execution' DO NOTHING;
SELECT pg_temp.check_eq((SELECT count(*) FROM scan_projection_outbox), 1::bigint,
                        'duplicate final enqueues one outbox row (both ON CONFLICT forms)');
SELECT pg_temp.check_raises($$INSERT INTO scan_projection_outbox (kind, execution_id, owner_id) VALUES ('execution', '00000000-0000-4000-8000-0000000000e2', '00000000-0000-4000-8000-000000000002')$$,
                            '23505', 'scan_projection_outbox_execution_key', 'a second row for one execution is a unique violation');
INSERT INTO scan_projection_outbox (kind, owner_id, tag_scope)
SELECT 'tags', '00000000-0000-4000-8000-000000000002', '{"kind": "cidr", "key": "192.0.2.0/24"}' FROM generate_series(1, 2);
SELECT pg_temp.check_eq((SELECT count(*) FROM scan_projection_outbox WHERE kind = 'tags'), 2::bigint,
                        'any number of tags rows (NULL execution_id never conflicts)');
SELECT pg_temp.check_raises(format($$INSERT INTO scan_projection_outbox (kind, execution_id, owner_id, tag_scope) VALUES (%s)$$, v),
                            '23514', 'scan_projection_outbox_kind_shape', 'outbox shape: ' || v)
  FROM (VALUES ($$'execution', NULL, '00000000-0000-4000-8000-000000000002', NULL$$),
               ($$'tags', NULL, '00000000-0000-4000-8000-000000000002', NULL$$),
               ($$'tags', '00000000-0000-4000-8000-0000000000e1', '00000000-0000-4000-8000-000000000001', '{}'$$)) AS t(v);
-- A task's deletion run: one per task, carrying the task and nothing else.
INSERT INTO scan_projection_outbox (kind, owner_id, forget_task_id)
VALUES ('forget', '00000000-0000-4000-8000-000000000002', '00000000-0000-4000-8000-0000000000b2');
SELECT pg_temp.check_raises($$INSERT INTO scan_projection_outbox (kind, owner_id, forget_task_id) VALUES ('forget', '00000000-0000-4000-8000-000000000002', '00000000-0000-4000-8000-0000000000b2')$$,
                            '23505', 'scan_projection_outbox_forget_key', 'a second deletion run of one task is a unique violation');
SELECT pg_temp.check_raises(format($$INSERT INTO scan_projection_outbox (kind, owner_id, tag_scope, forget_task_id) VALUES (%s)$$, v),
                            '23514', 'scan_projection_outbox_kind_shape', 'outbox shape: ' || v)
  FROM (VALUES ($$'forget', '00000000-0000-4000-8000-000000000002', NULL, NULL$$),
               ($$'tags', '00000000-0000-4000-8000-000000000002', '{}', '00000000-0000-4000-8000-0000000000b2'$$)) AS t(v);
SELECT pg_temp.check_raises($$UPDATE scan_projection_outbox SET claim_token = gen_random_uuid() WHERE kind = 'execution'$$,
                            '23514', 'scan_projection_outbox_lease_pair', 'claim_token without lease_expires_at rejected');
SELECT pg_temp.check_raises($$UPDATE scan_projection_outbox SET phase = 'done' WHERE kind = 'execution'$$,
                            '23514', 'scan_projection_outbox_phase_check', 'unknown phase rejected');
UPDATE scan_projection_outbox SET updated_at = '2000-01-01' WHERE kind = 'execution';
SELECT pg_temp.check((SELECT updated_at > '2001-01-01' FROM scan_projection_outbox WHERE kind = 'execution'),
                     'updated_at is maintained by trigger on every outbox update');
-- The claim shape from the seed works against the new columns (one short statement).
WITH c AS (
    SELECT id FROM scan_projection_outbox o
     WHERE processed_at IS NULL AND available_at <= now()
       AND (claim_token IS NULL OR lease_expires_at <= now())
       AND (kind = 'tags' OR EXISTS (SELECT 1 FROM executions e WHERE e.id = o.execution_id AND e.status = 'succeeded'))
     ORDER BY available_at, id
     LIMIT 1
     FOR UPDATE SKIP LOCKED)
UPDATE scan_projection_outbox o SET claim_token = gen_random_uuid(), lease_expires_at = now() + interval '120 seconds'
  FROM c WHERE o.id = c.id;
SELECT pg_temp.check_eq((SELECT count(*) FROM scan_projection_outbox WHERE claim_token IS NOT NULL), 1::bigint,
                        'claim (FOR UPDATE SKIP LOCKED + UPDATE) leases one row');

-- Analysis queue: one row per execution.
INSERT INTO scan_analysis_queue (execution_id) VALUES ('00000000-0000-4000-8000-0000000000e2') ON CONFLICT (execution_id) DO NOTHING;
INSERT INTO scan_analysis_queue (execution_id) VALUES ('00000000-0000-4000-8000-0000000000e2') ON CONFLICT (execution_id) DO NOTHING;
SELECT pg_temp.check_eq((SELECT count(*) FROM scan_analysis_queue), 1::bigint, 'analysis queue: one row per execution');

-- DNS child tasks: at most one child per source execution, whatever the retries.
CREATE TEMP TABLE child_ids (id uuid);
WITH first_try AS (
    INSERT INTO tasks (owner_id, kind, parent_task_id, source_execution_id)
    VALUES ('00000000-0000-4000-8000-000000000001', 'port_scan', '00000000-0000-4000-8000-0000000000b1',
            '00000000-0000-4000-8000-0000000000e1')
    ON CONFLICT (source_execution_id) WHERE source_execution_id IS NOT NULL
    DO UPDATE SET updated_at = tasks.updated_at
    RETURNING id)
INSERT INTO child_ids SELECT id FROM first_try;
\set child_upsert 'INSERT INTO tasks (owner_id, kind, parent_task_id, source_execution_id) VALUES (''00000000-0000-4000-8000-000000000001'', ''port_scan'', ''00000000-0000-4000-8000-0000000000b1'', ''00000000-0000-4000-8000-0000000000e1'') ON CONFLICT (source_execution_id) WHERE source_execution_id IS NOT NULL DO UPDATE SET updated_at = tasks.updated_at RETURNING id'
WITH retry AS (:child_upsert) INSERT INTO child_ids SELECT id FROM retry;
WITH retry AS (:child_upsert) INSERT INTO child_ids SELECT id FROM retry;
SELECT pg_temp.check_eq((SELECT count(DISTINCT id) || '/' || count(*) FROM child_ids), '1/3',
                        'child-task upsert returns the same task id on every retry');
INSERT INTO task_targets (task_id, kind, value)
SELECT (SELECT id FROM child_ids LIMIT 1), 'ip', ip FROM unnest(ARRAY['93.184.216.34', '93.184.216.34', '2606:2800:220:1:248:1893:25c8:1946']) ip
ON CONFLICT DO NOTHING;
SELECT pg_temp.check_eq((SELECT count(*) FROM task_targets WHERE task_id = (SELECT id FROM child_ids LIMIT 1)), 2::bigint,
                        'child targets added idempotently');
SELECT pg_temp.check_raises($$INSERT INTO tasks (owner_id, kind, source_execution_id) VALUES ('00000000-0000-4000-8000-000000000001', 'port_scan', '00000000-0000-4000-8000-0000000000e2')$$,
                            '23514', 'tasks_source_needs_parent', 'a source execution needs a parent task');

-- A scanner with executions cannot be deleted on its own. The foreign key is deferred, so
-- the error comes at commit; in autocommit that is the end of the DELETE statement.
\set ON_ERROR_STOP 0
DELETE FROM scanners WHERE id = '00000000-0000-4000-8000-0000000000a1';
\set ON_ERROR_STOP 1
SELECT pg_temp.check_eq(:'LAST_ERROR_SQLSTATE', '23503', 'scanner with executions cannot be deleted (autocommit DELETE fails)');
SELECT pg_temp.check_eq((SELECT count(*) FROM scanners), 2::bigint, '... and is still there');
BEGIN;
DELETE FROM scanners WHERE id = '00000000-0000-4000-8000-0000000000a1';
\set ON_ERROR_STOP 0
COMMIT;
\set ON_ERROR_STOP 1
SELECT pg_temp.check_eq(:'LAST_ERROR_SQLSTATE', '23503', 'in an explicit transaction the same delete fails at COMMIT');
SELECT pg_temp.check_eq((SELECT count(*) FROM scanners), 2::bigint, '... and is rolled back');
-- Why the key is deferred: checked immediately (as RESTRICT would be), deleting an owner
-- whose restricted scanner has executions fails, because the scanner cascade is checked
-- before the task cascade has removed the executions.
BEGIN;
SET CONSTRAINTS executions_scanner_id_fkey IMMEDIATE;
SELECT pg_temp.check_raises($$DELETE FROM owners WHERE id = '00000000-0000-4000-8000-000000000001'$$,
                            '23503', 'executions_scanner_id_fkey', 'with an immediate check the owner delete would fail');
ROLLBACK;
-- ... a child task survives the deletion of its source execution (SET NULL) ...
BEGIN;
DELETE FROM executions WHERE id = '00000000-0000-4000-8000-0000000000e1';
SELECT pg_temp.check_eq((SELECT count(*) FROM tasks WHERE parent_task_id = '00000000-0000-4000-8000-0000000000b1' AND source_execution_id IS NULL),
                        1::bigint, 'deleting the source execution keeps the child task, source set NULL');
ROLLBACK;
-- ... and deleting an owner removes everything of that owner, including its restricted
-- scanner whose executions go in the same statement (the reason for NO ACTION).
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, checksum, observation_count)
VALUES ('00000000-0000-4000-8000-0000000000e1', gen_random_uuid(), 'main', 0, 'x', 1);
INSERT INTO scan_projection_outbox (kind, execution_id, owner_id)
VALUES ('execution', '00000000-0000-4000-8000-0000000000e1', '00000000-0000-4000-8000-000000000001');
INSERT INTO asset_tags (owner_id, kind, key, tag) VALUES ('00000000-0000-4000-8000-000000000001', 'cidr', '10.0.0.0/8', 'lan');
DELETE FROM owners WHERE id = '00000000-0000-4000-8000-000000000001';
SELECT pg_temp.check_eq(
    (SELECT (SELECT count(*) FROM scanners WHERE owner_id IS NOT NULL)
          + (SELECT count(*) FROM tasks WHERE owner_id = '00000000-0000-4000-8000-000000000001')
          + (SELECT count(*) FROM executions WHERE id = '00000000-0000-4000-8000-0000000000e1')
          + (SELECT count(*) FROM scan_upload_receipts WHERE execution_id = '00000000-0000-4000-8000-0000000000e1')
          + (SELECT count(*) FROM scan_upload_stream WHERE execution_id = '00000000-0000-4000-8000-0000000000e1')
          + (SELECT count(*) FROM scan_projection_outbox WHERE owner_id = '00000000-0000-4000-8000-000000000001')
          + (SELECT count(*) FROM search_targets WHERE owner_id = '00000000-0000-4000-8000-000000000001')
          + (SELECT count(*) FROM asset_tags WHERE owner_id = '00000000-0000-4000-8000-000000000001')),
    0::bigint, 'owner delete cascades to scanners, tasks (incl. children), executions, receipts, streams, outbox, targets, tags');
SELECT pg_temp.check_eq((SELECT count(*) FROM executions), 1::bigint, 'other owner''s execution kept');

-- A task's port scope is an nmap port list, or none.
SELECT pg_temp.check_eq(
    (SELECT string_agg(s, ' ' ORDER BY s) FROM unnest(ARRAY['22,80,443', '1-1024', 'U:53,T:1-1000',
        '0,65535', '65536', '1024-1', '-100', 'http', '22,,80', 'X:22']) AS s
      WHERE port_scope_is_valid(s)),
    '0,65535 1-1024 22,80,443 U:53,T:1-1000', 'port scopes: nmap lists taken, the rest refused');
SELECT pg_temp.check_raises(
    $$INSERT INTO tasks (owner_id, kind, ports) SELECT id, 'port_scan', '1-70000' FROM owners LIMIT 1$$,
    '23514', 'tasks_ports_valid', 'an invalid port scope is refused');
