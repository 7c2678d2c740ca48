-- Seed data for a previous-release (schema/legacy_v1.sql) database, reusable by the Rust
-- upgrade tests: load legacy_v1.sql, then this file, then run the migrations.
--
-- Fixed ids so that assertions can name rows:
--   owners    ...0001 alice (admin), ...0002 bob, ...0003 carol
--   scanners  ...00a1 scanner-any (no owner), ...00a2 scanner-bob (restricted to bob)
--   tasks     ...00b1 alice port_scan   ...00b2 alice dns (parent)   ...00b3 child of b2
--             ...00b4 bob mixed (running, many executions)           ...00b5 carol pending
--   executions ...00e1 b1 succeeded, ...00e2 b1 failed, ...00e3 b2 succeeded (dns),
--             ...00e4 b3 succeeded, ...00e5 b4 running, ...00e6 b5 queued,
--             plus 40 generated executions of b4 (ids ...0f01 .. ...0f40)
--   uploads   ...0c01 .. (see below), generated ones ...1f01 .. ...1f40
-- Receipts cover: finals, confirmed and pending main batches, sparse dns sidecars (pending
-- and confirmed), an abandoned upload, legacy receipts without storage_references.
-- Outbox: processed and unprocessed execution rows (one with errors) and a tags row.
-- Everything is plain INSERTs (no triggers exist in v1), inside one transaction.

BEGIN;

INSERT INTO owners (id, name, token_sha256, is_admin) VALUES
    ('00000000-0000-4000-8000-000000000001', 'alice', sha256('alice-token'), true),
    ('00000000-0000-4000-8000-000000000002', 'bob',   sha256('bob-token'),   false),
    ('00000000-0000-4000-8000-000000000003', 'carol', sha256('carol-token'), false);

INSERT INTO scanners (id, name, token_sha256, owner_id) VALUES
    ('00000000-0000-4000-8000-0000000000a1', 'scanner-any', sha256('scanner-any-token'), NULL),
    ('00000000-0000-4000-8000-0000000000a2', 'scanner-bob', sha256('scanner-bob-token'),
     '00000000-0000-4000-8000-000000000002');

INSERT INTO tasks (id, owner_id, kind, status, parent_task_id, tags,
                   executions_total, executions_succeeded, endpoints_total, dns_records_total,
                   last_succeeded_at) VALUES
    ('00000000-0000-4000-8000-0000000000b1', '00000000-0000-4000-8000-000000000001', 'port_scan',
     'succeeded', NULL, '{prod,web}', 2, 1, 120, 0, '2025-10-01 10:05:00+00'),
    ('00000000-0000-4000-8000-0000000000b2', '00000000-0000-4000-8000-000000000001', 'dns',
     'succeeded', NULL, '{}', 1, 1, 0, 30, '2025-10-02 09:00:00+00'),
    ('00000000-0000-4000-8000-0000000000b4', '00000000-0000-4000-8000-000000000002', 'mixed',
     'running', NULL, '{lab}', 41, 20, 5000, 200, '2025-10-03 12:00:00+00'),
    ('00000000-0000-4000-8000-0000000000b5', '00000000-0000-4000-8000-000000000003', 'port_scan',
     'pending', NULL, '{}', 1, 0, 0, 0, NULL);

INSERT INTO task_targets (task_id, kind, value) VALUES
    ('00000000-0000-4000-8000-0000000000b1', 'cidr', '10.0.0.0/24'),
    ('00000000-0000-4000-8000-0000000000b1', 'ip', '203.0.113.7'),
    ('00000000-0000-4000-8000-0000000000b2', 'domain', 'example.com'),
    ('00000000-0000-4000-8000-0000000000b4', 'cidr', '192.0.2.0/24'),
    ('00000000-0000-4000-8000-0000000000b4', 'cidr', '2001:db8::/48'),
    ('00000000-0000-4000-8000-0000000000b4', 'domain', 'lab.example.org'),
    ('00000000-0000-4000-8000-0000000000b5', 'ip', '198.51.100.1');

INSERT INTO executions (id, task_id, scanner_id, status, observation_count, endpoint_count,
                        dns_record_count, ip_count, created_at, started_at, finished_at) VALUES
    ('00000000-0000-4000-8000-0000000000e1', '00000000-0000-4000-8000-0000000000b1',
     '00000000-0000-4000-8000-0000000000a1', 'succeeded', 120, 120, 0, 40,
     '2025-10-01 10:00:00+00', '2025-10-01 10:01:00+00', '2025-10-01 10:05:00+00'),
    ('00000000-0000-4000-8000-0000000000e2', '00000000-0000-4000-8000-0000000000b1',
     '00000000-0000-4000-8000-0000000000a1', 'failed', 0, 0, 0, 0,
     '2025-10-01 11:00:00+00', '2025-10-01 11:01:00+00', '2025-10-01 11:30:00+00'),
    ('00000000-0000-4000-8000-0000000000e3', '00000000-0000-4000-8000-0000000000b2',
     '00000000-0000-4000-8000-0000000000a1', 'succeeded', 30, 0, 30, 0,
     '2025-10-02 08:00:00+00', '2025-10-02 08:01:00+00', '2025-10-02 09:00:00+00'),
    ('00000000-0000-4000-8000-0000000000e5', '00000000-0000-4000-8000-0000000000b4',
     '00000000-0000-4000-8000-0000000000a2', 'running', 0, 0, 0, 0,
     '2025-10-03 08:00:00+00', '2025-10-03 08:01:00+00', NULL),
    ('00000000-0000-4000-8000-0000000000e6', '00000000-0000-4000-8000-0000000000b5',
     '00000000-0000-4000-8000-0000000000a1', 'queued', 0, 0, 0, 0,
     '2025-10-04 08:00:00+00', NULL, NULL);

-- The DNS child task of b2, generated from execution e3's answers.
INSERT INTO tasks (id, owner_id, kind, status, parent_task_id, source_execution_id,
                   executions_total, executions_succeeded, endpoints_total, last_succeeded_at) VALUES
    ('00000000-0000-4000-8000-0000000000b3', '00000000-0000-4000-8000-000000000001', 'port_scan',
     'succeeded', '00000000-0000-4000-8000-0000000000b2', '00000000-0000-4000-8000-0000000000e3',
     1, 1, 12, '2025-10-02 10:00:00+00');
INSERT INTO task_targets (task_id, kind, value) VALUES
    ('00000000-0000-4000-8000-0000000000b3', 'ip', '93.184.216.34'),
    ('00000000-0000-4000-8000-0000000000b3', 'ip', '2606:2800:220:1:248:1893:25c8:1946');
INSERT INTO executions (id, task_id, scanner_id, status, observation_count, endpoint_count,
                        ip_count, created_at, started_at, finished_at) VALUES
    ('00000000-0000-4000-8000-0000000000e4', '00000000-0000-4000-8000-0000000000b3',
     '00000000-0000-4000-8000-0000000000a1', 'succeeded', 12, 12, 2,
     '2025-10-02 09:10:00+00', '2025-10-02 09:11:00+00', '2025-10-02 10:00:00+00');

-- e1 / upload c01: batches 0..4 confirmed, 5 = final confirmed. Batches 0..1 are older
-- than storage references (NULL).
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, is_final, checksum,
        observation_count, endpoint_count, status, storage_references, created_at, confirmed_at)
SELECT '00000000-0000-4000-8000-0000000000e1', '00000000-0000-4000-8000-000000000c01', 'main', b,
       b = 5, 'sha256:' || md5('e1-' || b), 20, 20, 'confirmed',
       CASE WHEN b < 2 THEN NULL ELSE ARRAY['scanstore-facts-2025.10'] END,
       '2025-10-01 10:01:00+00'::timestamptz + b * interval '10 seconds',
       '2025-10-01 10:01:05+00'::timestamptz + b * interval '10 seconds'
  FROM generate_series(0, 5) AS b;

-- e2 / upload c02: 0..2 confirmed, 3 pending (the execution failed mid-upload);
-- e2 / upload c03: an abandoned restart with one pending batch.
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, is_final, checksum,
        observation_count, endpoint_count, status, storage_references, confirmed_at)
SELECT '00000000-0000-4000-8000-0000000000e2', '00000000-0000-4000-8000-000000000c02', 'main', b,
       false, 'sha256:' || md5('e2-' || b), 7, 7,
       CASE WHEN b < 3 THEN 'confirmed' ELSE 'pending' END,
       ARRAY['scanstore-facts-2025.10'],
       CASE WHEN b < 3 THEN '2025-10-01 11:05:00+00'::timestamptz END
  FROM generate_series(0, 3) AS b;
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, is_final, checksum,
        observation_count, endpoint_count, status, storage_references) VALUES
    ('00000000-0000-4000-8000-0000000000e2', '00000000-0000-4000-8000-000000000c03', 'main', 0,
     false, 'sha256:abandoned', 3, 3, 'pending', ARRAY['scanstore-facts-2025.10']);

-- e3 (dns task) / upload c04: main 0..1 confirmed, final 2 confirmed (empty);
-- dns sidecar with sparse batches 0, 1 confirmed and 5 confirmed.
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, is_final, checksum,
        observation_count, endpoint_count, dns_record_count, status, storage_references, confirmed_at) VALUES
    ('00000000-0000-4000-8000-0000000000e3', '00000000-0000-4000-8000-000000000c04', 'main', 0, false,
     'sha256:e3-0', 0, 0, 0, 'confirmed', '{}', '2025-10-02 08:10:00+00'),
    ('00000000-0000-4000-8000-0000000000e3', '00000000-0000-4000-8000-000000000c04', 'main', 1, false,
     'sha256:e3-1', 0, 0, 0, 'confirmed', '{}', '2025-10-02 08:20:00+00'),
    ('00000000-0000-4000-8000-0000000000e3', '00000000-0000-4000-8000-000000000c04', 'main', 2, true,
     'sha256:e3-2', 0, 0, 0, 'confirmed', '{}', '2025-10-02 09:00:00+00'),
    ('00000000-0000-4000-8000-0000000000e3', '00000000-0000-4000-8000-000000000c04', 'dns', 0, false,
     'sha256:e3-d0', 10, 0, 10, 'confirmed', ARRAY['scanstore-facts-2025.10'], '2025-10-02 08:11:00+00'),
    ('00000000-0000-4000-8000-0000000000e3', '00000000-0000-4000-8000-000000000c04', 'dns', 1, false,
     'sha256:e3-d1', 15, 0, 15, 'confirmed', ARRAY['scanstore-facts-2025.10'], '2025-10-02 08:21:00+00'),
    ('00000000-0000-4000-8000-0000000000e3', '00000000-0000-4000-8000-000000000c04', 'dns', 5, false,
     'sha256:e3-d5', 5, 0, 5, 'confirmed', NULL, '2025-10-02 08:59:00+00');

-- e4 (child) / upload c05: 0..2 confirmed, final 3 confirmed.
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, is_final, checksum,
        observation_count, endpoint_count, status, storage_references, confirmed_at)
SELECT '00000000-0000-4000-8000-0000000000e4', '00000000-0000-4000-8000-000000000c05', 'main', b,
       b = 3, 'sha256:' || md5('e4-' || b), 3, 3, 'confirmed',
       ARRAY['scanstore-facts-2025.10'], '2025-10-02 09:30:00+00'
  FROM generate_series(0, 3) AS b;

-- e5 (running) / upload c06: 0..9 confirmed, 10..11 pending; dns 3 pending, 4 confirmed.
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, is_final, checksum,
        observation_count, endpoint_count, status, storage_references, confirmed_at)
SELECT '00000000-0000-4000-8000-0000000000e5', '00000000-0000-4000-8000-000000000c06', 'main', b,
       false, 'sha256:' || md5('e5-' || b), 100 + b, 100 + b,
       CASE WHEN b < 10 THEN 'confirmed' ELSE 'pending' END,
       ARRAY['scanstore-facts-2025.09', 'scanstore-facts-2025.10'],
       CASE WHEN b < 10 THEN '2025-10-03 09:00:00+00'::timestamptz END
  FROM generate_series(0, 11) AS b;
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, is_final, checksum,
        observation_count, dns_record_count, status, storage_references, confirmed_at) VALUES
    ('00000000-0000-4000-8000-0000000000e5', '00000000-0000-4000-8000-000000000c06', 'dns', 3, false,
     'sha256:e5-d3', 9, 9, 'pending', ARRAY['scanstore-facts-2025.10'], NULL),
    ('00000000-0000-4000-8000-0000000000e5', '00000000-0000-4000-8000-000000000c06', 'dns', 4, false,
     'sha256:e5-d4', 11, 11, 'confirmed', ARRAY['scanstore-facts-2025.10'], '2025-10-03 09:30:00+00');

-- 40 generated executions of b4, one upload each with 25 main batches: even executions
-- succeeded (all confirmed, batch 24 final), odd ones are still uploading (last 3 pending);
-- every third also has a dns sidecar of 4 sparse batches (0, 2, 4, 6), the last pending.
INSERT INTO executions (id, task_id, scanner_id, status, observation_count, endpoint_count,
                        created_at, started_at, finished_at)
SELECT ('00000000-0000-4000-8000-000000000f' || lpad(n::text, 2, '0'))::uuid,
       '00000000-0000-4000-8000-0000000000b4', '00000000-0000-4000-8000-0000000000a2',
       CASE WHEN n % 2 = 0 THEN 'succeeded' ELSE 'running' END, 250, 250,
       '2025-10-03 10:00:00+00'::timestamptz + n * interval '1 minute',
       '2025-10-03 10:00:30+00'::timestamptz + n * interval '1 minute',
       CASE WHEN n % 2 = 0 THEN '2025-10-03 11:00:00+00'::timestamptz + n * interval '1 minute' END
  FROM generate_series(1, 40) AS n;
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, is_final, checksum,
        observation_count, endpoint_count, status, storage_references, confirmed_at)
SELECT ('00000000-0000-4000-8000-000000000f' || lpad(n::text, 2, '0'))::uuid,
       ('00000000-0000-4000-8000-000000001f' || lpad(n::text, 2, '0'))::uuid,
       'main', b, n % 2 = 0 AND b = 24, 'sha256:' || md5(n || '-' || b), 10, 10,
       CASE WHEN n % 2 = 1 AND b >= 22 THEN 'pending' ELSE 'confirmed' END,
       CASE WHEN n <= 5 THEN NULL ELSE ARRAY['scanstore-facts-2025.10'] END,
       CASE WHEN n % 2 = 1 AND b >= 22 THEN NULL ELSE '2025-10-03 12:00:00+00'::timestamptz END
  FROM generate_series(1, 40) AS n, generate_series(0, 24) AS b;
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, is_final, checksum,
        observation_count, dns_record_count, status, storage_references, confirmed_at)
SELECT ('00000000-0000-4000-8000-000000000f' || lpad(n::text, 2, '0'))::uuid,
       ('00000000-0000-4000-8000-000000001f' || lpad(n::text, 2, '0'))::uuid,
       'dns', b, false, 'sha256:' || md5(n || '-d' || b), 4, 4,
       CASE WHEN b = 6 THEN 'pending' ELSE 'confirmed' END,
       ARRAY['scanstore-facts-2025.10'],
       CASE WHEN b = 6 THEN NULL ELSE '2025-10-03 12:00:00+00'::timestamptz END
  FROM generate_series(1, 40) AS n, generate_series(0, 6, 2) AS b
 WHERE n % 3 = 0;

-- Outbox: e1 published, e4 waiting after two transient errors, the 20 succeeded generated
-- executions waiting, and one tags row for alice. (DNS-only e3 has no row.)
INSERT INTO scan_projection_outbox (kind, execution_id, owner_id, tag_scope, available_at,
                                    attempts, last_error, last_error_class, processed_at, created_at) VALUES
    ('execution', '00000000-0000-4000-8000-0000000000e1', '00000000-0000-4000-8000-000000000001', NULL,
     '2025-10-01 10:05:00+00', 0, NULL, NULL, '2025-10-01 10:06:00+00', '2025-10-01 10:05:00+00'),
    ('execution', '00000000-0000-4000-8000-0000000000e4', '00000000-0000-4000-8000-000000000001', NULL,
     '2025-10-02 10:04:00+00', 2, 'es: 503 Service Unavailable', 'transient', NULL,
     '2025-10-02 10:00:00+00'),
    ('tags', NULL, '00000000-0000-4000-8000-000000000001', '{"kind": "cidr", "key": "10.0.0.0/8"}',
     '2025-10-02 11:00:00+00', 0, NULL, NULL, NULL, '2025-10-02 11:00:00+00');
INSERT INTO scan_projection_outbox (kind, execution_id, owner_id, available_at, created_at)
SELECT 'execution', ('00000000-0000-4000-8000-000000000f' || lpad(n::text, 2, '0'))::uuid,
       '00000000-0000-4000-8000-000000000002',
       '2025-10-03 11:00:00+00'::timestamptz + n * interval '1 minute',
       '2025-10-03 11:00:00+00'::timestamptz + n * interval '1 minute'
  FROM generate_series(2, 40, 2) AS n;

INSERT INTO scan_analysis_queue (execution_id, processed_at) VALUES
    ('00000000-0000-4000-8000-0000000000e1', '2025-10-01 10:07:00+00'),
    ('00000000-0000-4000-8000-0000000000e3', NULL),
    ('00000000-0000-4000-8000-0000000000e4', NULL);

INSERT INTO search_targets (owner_id, kind, key, last_scanned_at, last_execution_id) VALUES
    ('00000000-0000-4000-8000-000000000001', 'ip', '203.0.113.7', '2025-10-01 10:05:00+00',
     '00000000-0000-4000-8000-0000000000e1'),
    ('00000000-0000-4000-8000-000000000001', 'cidr', '10.0.0.0/8', NULL, NULL),
    ('00000000-0000-4000-8000-000000000001', 'cidr', '10.0.0.0/24', '2025-10-01 10:05:00+00',
     '00000000-0000-4000-8000-0000000000e1'),
    ('00000000-0000-4000-8000-000000000001', 'domain', 'example.com', '2025-10-02 10:00:00+00',
     '00000000-0000-4000-8000-0000000000e3'),
    ('00000000-0000-4000-8000-000000000002', 'cidr', '192.0.2.0/24', NULL, NULL),
    ('00000000-0000-4000-8000-000000000002', 'cidr', '2001:db8::/48', NULL, NULL),
    ('00000000-0000-4000-8000-000000000002', 'ip', '2001:db8::1', NULL, NULL),
    ('00000000-0000-4000-8000-000000000002', 'domain', 'lab.example.org', NULL, NULL);

INSERT INTO asset_tags (owner_id, kind, key, tag) VALUES
    ('00000000-0000-4000-8000-000000000001', 'cidr', '10.0.0.0/8', 'internal'),
    ('00000000-0000-4000-8000-000000000001', 'ip', '203.0.113.7', 'edge'),
    ('00000000-0000-4000-8000-000000000001', 'domain', 'example.com', 'web'),
    ('00000000-0000-4000-8000-000000000002', 'cidr', '2001:db8::/48', 'lab');

COMMIT;
