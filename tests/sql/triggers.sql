-- Receipt triggers and scan_upload_stream_repair() on a fresh init.sql database
-- (run.sh triggers). Each block states the rule it proves.

INSERT INTO owners (id, name, token_sha256) VALUES ('00000000-0000-4000-8000-000000000001', 'o', sha256('o'));
INSERT INTO scanners (id, name, token_sha256) VALUES ('00000000-0000-4000-8000-0000000000a1', 's', sha256('s'));
INSERT INTO tasks (id, owner_id, kind) VALUES ('00000000-0000-4000-8000-0000000000b1', '00000000-0000-4000-8000-000000000001', 'mixed');
INSERT INTO executions (id, task_id, scanner_id, status) VALUES
    ('00000000-0000-4000-8000-0000000000e1', '00000000-0000-4000-8000-0000000000b1', '00000000-0000-4000-8000-0000000000a1', 'running'),
    ('00000000-0000-4000-8000-0000000000e2', '00000000-0000-4000-8000-0000000000b1', '00000000-0000-4000-8000-0000000000a1', 'running');

-- Shorthands: stream S1 = (e1, u1), S2 = (e1, u2), S3 = (e2, u3).
CREATE TEMP VIEW s1 AS SELECT * FROM scan_upload_stream
 WHERE execution_id = '00000000-0000-4000-8000-0000000000e1' AND upload_id = '00000000-0000-4000-8000-0000000000c1';
CREATE TEMP VIEW s1_counts AS
SELECT batch_count || '/' || confirmed_count || '/' || pending_count || ' min ' || coalesce(min_batch::text, '-')
       || ' max ' || coalesce(max_batch::text, '-') || ' final ' || final_count || '@' || coalesce(final_batch::text, '-')
       || ' obs ' || confirmed_observations
       || ' | dns ' || dns_batch_count || '/' || dns_confirmed_count || '/' || dns_pending_count
       || ' max ' || coalesce(dns_max_batch::text, '-') || ' obs ' || dns_confirmed_observations
       || CASE WHEN dirty THEN ' DIRTY' ELSE '' END AS c
  FROM s1;
-- r(stream, batch): the receipt of S1 with that identity, for UPDATE statements.
\set e1 '''00000000-0000-4000-8000-0000000000e1'''
\set u1 '''00000000-0000-4000-8000-0000000000c1'''

-- INSERT adds the batch as inserted: pending ...
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, checksum, observation_count)
VALUES (:e1, :u1, 'main', 0, 'sha256:0', 7);
SELECT pg_temp.check_eq((SELECT c FROM s1_counts), '1/0/1 min 0 max 0 final 0@- obs 0 | dns 0/0/0 max - obs 0',
                        'insert pending main batch 0 creates the stream row');
-- ... or confirmed (observations counted at once).
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, checksum, observation_count, status, confirmed_at)
VALUES (:e1, :u1, 'main', 1, 'sha256:1', 5, 'confirmed', now());
SELECT pg_temp.check_eq((SELECT c FROM s1_counts), '2/1/1 min 0 max 1 final 0@- obs 5 | dns 0/0/0 max - obs 0',
                        'insert confirmed main batch 1 adds a confirmed batch and its observations');

-- pending -> confirmed moves one batch and adds its observations.
UPDATE scan_upload_receipts SET status = 'confirmed', confirmed_at = now()
 WHERE execution_id = :e1 AND upload_id = :u1 AND stream = 'main' AND batch_index = 0;
SELECT pg_temp.check_eq((SELECT c FROM s1_counts), '2/2/0 min 0 max 1 final 0@- obs 12 | dns 0/0/0 max - obs 0',
                        'confirm batch 0: pending -> confirmed, +7 observations');

-- A repeated confirm (confirmed -> confirmed) and unrelated updates add nothing.
UPDATE scan_upload_receipts SET status = 'confirmed', confirmed_at = now()
 WHERE execution_id = :e1 AND upload_id = :u1 AND stream = 'main' AND batch_index = 0;
UPDATE scan_upload_receipts SET storage_references = ARRAY['scanstore-facts-2026.11']
 WHERE execution_id = :e1 AND upload_id = :u1;
SELECT pg_temp.check_eq((SELECT c FROM s1_counts), '2/2/0 min 0 max 1 final 0@- obs 12 | dns 0/0/0 max - obs 0',
                        'repeated confirm and storage_references update add nothing');

-- A retried reservation that finds the existing receipt inserts nothing and counts nothing.
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, checksum, observation_count)
VALUES (:e1, :u1, 'main', 1, 'sha256:1', 5)
ON CONFLICT (execution_id, upload_id, stream, batch_index) DO NOTHING;
SELECT pg_temp.check_eq((SELECT c FROM s1_counts), '2/2/0 min 0 max 1 final 0@- obs 12 | dns 0/0/0 max - obs 0',
                        'INSERT ... ON CONFLICT DO NOTHING of an existing identity adds nothing');

-- DNS sidecar: sparse batch numbers, kept apart from the main counts.
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, checksum, observation_count, dns_record_count)
VALUES (:e1, :u1, 'dns', 3, 'sha256:d3', 4, 4);
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, checksum, observation_count, dns_record_count, status, confirmed_at)
VALUES (:e1, :u1, 'dns', 1, 'sha256:d1', 2, 2, 'confirmed', now());
SELECT pg_temp.check_eq((SELECT c FROM s1_counts), '2/2/0 min 0 max 1 final 0@- obs 12 | dns 2/1/1 max 3 obs 2',
                        'dns sidecar batches 3 (pending) and 1 (confirmed) counted separately');
UPDATE scan_upload_receipts SET status = 'confirmed', confirmed_at = now()
 WHERE execution_id = :e1 AND upload_id = :u1 AND stream = 'dns' AND batch_index = 3;
SELECT pg_temp.check_eq((SELECT c FROM s1_counts), '2/2/0 min 0 max 1 final 0@- obs 12 | dns 2/2/0 max 3 obs 6',
                        'confirm dns batch 3');

-- A dns receipt can never be final.
SELECT pg_temp.check_raises(
    $$INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, is_final, checksum, observation_count)
      VALUES ('00000000-0000-4000-8000-0000000000e1', '00000000-0000-4000-8000-0000000000c1', 'dns', 9, true, 'x', 0)$$,
    '23514', 'scan_upload_receipts_dns_not_final', 'a final dns receipt is rejected');

-- The final batch.
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, is_final, checksum, observation_count)
VALUES (:e1, :u1, 'main', 2, true, 'sha256:2', 3);
SELECT pg_temp.check_eq((SELECT c FROM s1_counts), '3/2/1 min 0 max 2 final 1@2 obs 12 | dns 2/2/0 max 3 obs 6',
                        'reserve final batch 2: final_count 1, final_batch 2, pending 1');
UPDATE scan_upload_receipts SET status = 'confirmed', confirmed_at = now()
 WHERE execution_id = :e1 AND upload_id = :u1 AND stream = 'main' AND batch_index = 2;
SELECT pg_temp.check_eq((SELECT c FROM s1_counts), '3/3/0 min 0 max 2 final 1@2 obs 15 | dns 2/2/0 max 3 obs 6',
                        'confirm final batch 2');
SELECT pg_temp.check_eq((SELECT count(*) FROM pg_temp.stream_mismatches(false)), 0::bigint,
                        'S1 equals an independent recount');

-- Immutability: identity, is_final, observation_count; confirmed never returns to pending.
SELECT pg_temp.check_raises(format($$UPDATE scan_upload_receipts SET %s WHERE execution_id = %L AND upload_id = %L AND stream = 'main' AND batch_index = 1$$,
                                   upd, '00000000-0000-4000-8000-0000000000e1', '00000000-0000-4000-8000-0000000000c1'),
                            '23514', 'scan_upload_receipts_immutable', 'immutable: SET ' || upd)
  FROM unnest(ARRAY[
      'batch_index = 7',
      'execution_id = ''00000000-0000-4000-8000-0000000000e2''',
      'upload_id = gen_random_uuid()',
      'stream = ''dns''',
      'id = id + 1000',
      'is_final = true',
      'observation_count = observation_count + 1',
      'status = ''pending'', confirmed_at = NULL']) AS upd;
SELECT pg_temp.check_eq((SELECT c FROM s1_counts), '3/3/0 min 0 max 2 final 1@2 obs 15 | dns 2/2/0 max 3 obs 6',
                        'rejected updates changed nothing');

-- Two more streams to watch for collateral changes: S2 (e1, other upload), S3 (e2).
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, checksum, observation_count, status, confirmed_at)
SELECT '00000000-0000-4000-8000-0000000000e1', '00000000-0000-4000-8000-0000000000c2', 'main', b, 'x', 1, 'confirmed', now()
  FROM generate_series(0, 3) b;
INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, checksum, observation_count)
SELECT '00000000-0000-4000-8000-0000000000e2', '00000000-0000-4000-8000-0000000000c3', 'main', b, 'x', 2
  FROM generate_series(0, 4) b;
SELECT pg_temp.check_eq((SELECT count(*) FROM pg_temp.stream_mismatches(false)), 0::bigint,
                        'multi-row inserts into S2 and S3 equal the recount');

-- DELETE marks the stream dirty and recounts nothing; other streams are untouched.
CREATE TEMP TABLE before_delete AS SELECT execution_id, upload_id, to_jsonb(s) AS j FROM scan_upload_stream s;
DELETE FROM scan_upload_receipts WHERE execution_id = :e1 AND upload_id = :u1 AND stream = 'main' AND batch_index = 1;
SELECT pg_temp.check_eq((SELECT c FROM s1_counts), '3/3/0 min 0 max 2 final 1@2 obs 15 | dns 2/2/0 max 3 obs 6 DIRTY',
                        'delete marks S1 dirty, counts untouched');
SELECT pg_temp.check_eq(
    (SELECT count(*) FROM scan_upload_stream s JOIN before_delete b USING (execution_id, upload_id)
      WHERE to_jsonb(s) = b.j AND NOT (s.execution_id = :e1 AND s.upload_id = :u1)),
    2::bigint, 'delete leaves S2 and S3 untouched');
-- Make S2 dirty as well, then repair S1 only.
DELETE FROM scan_upload_receipts WHERE upload_id = '00000000-0000-4000-8000-0000000000c2' AND batch_index IN (0, 3);
CREATE TEMP TABLE before_repair AS SELECT execution_id, upload_id, to_jsonb(s) AS j FROM scan_upload_stream s;
SELECT pg_temp.check_eq(
    (SELECT batch_count || '/' || confirmed_count || ' min ' || min_batch || ' obs ' || confirmed_observations || ' dirty ' || dirty
       FROM scan_upload_stream_repair(:e1, :u1)),
    '2/2 min 0 obs 10 dirty false', 'repair(S1) returns the recomputed row');
SELECT pg_temp.check_eq((SELECT c FROM s1_counts), '2/2/0 min 0 max 2 final 1@2 obs 10 | dns 2/2/0 max 3 obs 6',
                        'repair(S1): counts recomputed, dirty cleared');
SELECT pg_temp.check_eq(
    (SELECT count(*) FROM scan_upload_stream s JOIN before_repair b USING (execution_id, upload_id)
      WHERE to_jsonb(s) = b.j AND NOT (s.execution_id = :e1 AND s.upload_id = :u1)),
    2::bigint, 'repair(S1) leaves S2 (still dirty) and S3 untouched');
SELECT pg_temp.check_eq((SELECT dirty FROM scan_upload_stream WHERE upload_id = '00000000-0000-4000-8000-0000000000c2'),
                        true, 'S2 is still dirty');
SELECT pg_temp.check_eq((SELECT count(*) FROM pg_temp.stream_mismatches(true)), 0::bigint,
                        'every clean stream equals the recount');
SELECT count(*) FROM scan_upload_stream_repair(:e1, '00000000-0000-4000-8000-0000000000c2');
SELECT pg_temp.check_eq((SELECT count(*) FROM pg_temp.stream_mismatches(false)), 0::bigint,
                        'after repair(S2) every stream equals the recount');
SELECT pg_temp.check_eq((SELECT min_batch || '-' || max_batch FROM scan_upload_stream WHERE upload_id = '00000000-0000-4000-8000-0000000000c2'),
                        '1-2', 'repair(S2) recomputes min/max batch');

-- Repair of a stream with no receipts and no row: no row returned, none created.
SELECT pg_temp.check_eq((SELECT count(*) FROM scan_upload_stream_repair(:e1, gen_random_uuid())), 0::bigint,
                        'repair of an unknown stream returns nothing');
SELECT pg_temp.check_eq((SELECT count(*) FROM scan_upload_stream), 3::bigint, '... and creates nothing');
-- Repair after all receipts of a stream were deleted: an empty, clean row.
DELETE FROM scan_upload_receipts WHERE upload_id = '00000000-0000-4000-8000-0000000000c2';
SELECT pg_temp.check_eq(
    (SELECT batch_count || '/' || coalesce(min_batch::text, 'null') || '/' || dirty
       FROM scan_upload_stream_repair(:e1, '00000000-0000-4000-8000-0000000000c2')),
    '0/null/false', 'repair of a stream whose receipts are all gone: zero counts, NULL min');

-- A missing stream row (manual deletion) does not break a confirm: the row comes back
-- dirty, and repair makes it exact.
DELETE FROM scan_upload_stream WHERE execution_id = '00000000-0000-4000-8000-0000000000e2';
UPDATE scan_upload_receipts SET status = 'confirmed', confirmed_at = now()
 WHERE execution_id = '00000000-0000-4000-8000-0000000000e2' AND batch_index = 0;
SELECT pg_temp.check_eq((SELECT dirty FROM scan_upload_stream WHERE execution_id = '00000000-0000-4000-8000-0000000000e2'),
                        true, 'confirm with the stream row missing recreates it dirty');
SELECT count(*) FROM scan_upload_stream_repair('00000000-0000-4000-8000-0000000000e2', '00000000-0000-4000-8000-0000000000c3');
SELECT pg_temp.check_eq((SELECT count(*) FROM pg_temp.stream_mismatches(false)), 0::bigint,
                        'repair makes the recreated row exact');

-- TRUNCATE fires no delete trigger; it marks every stream dirty (checked, then undone).
BEGIN;
TRUNCATE scan_upload_receipts;
SELECT pg_temp.check_eq((SELECT bool_and(dirty) FROM scan_upload_stream), true, 'TRUNCATE marks every stream dirty');
ROLLBACK;

-- Deleting an execution cascades to its receipts and stream rows, and to nothing else.
DELETE FROM executions WHERE id = '00000000-0000-4000-8000-0000000000e2';
SELECT pg_temp.check_eq((SELECT count(*) FROM scan_upload_stream WHERE execution_id = '00000000-0000-4000-8000-0000000000e2'),
                        0::bigint, 'execution delete removes its stream rows');
SELECT pg_temp.check_eq((SELECT count(*) FROM scan_upload_receipts WHERE execution_id = '00000000-0000-4000-8000-0000000000e2'),
                        0::bigint, 'execution delete removes its receipts');
SELECT pg_temp.check_eq((SELECT c FROM s1_counts), '2/2/0 min 0 max 2 final 1@2 obs 10 | dns 2/2/0 max 3 obs 6',
                        'other execution''s stream untouched by the cascade');
