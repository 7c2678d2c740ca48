-- Checks on a legacy_v1 + legacy_seed database after the upgrade migrations (run.sh legacy).

-- Streams: one row per (execution_id, upload_id) of the receipts, all equal to a recount.
SELECT pg_temp.check_eq((SELECT count(*) FROM scan_upload_stream),
                        (SELECT count(*) FROM (SELECT DISTINCT execution_id, upload_id FROM scan_upload_receipts) k),
                        'backfill: one stream row per (execution_id, upload_id)');
SELECT pg_temp.check_eq((SELECT count(*) FROM pg_temp.stream_mismatches(false)), 0::bigint,
                        'backfill: every stream row equals an independent recount of its receipts');
SELECT pg_temp.check_eq((SELECT count(*) FROM scan_upload_stream WHERE dirty), 0::bigint,
                        'backfill: no stream is dirty');
SELECT pg_temp.check_eq(
    (SELECT to_jsonb(s) - 'execution_id' - 'upload_id' - 'updated_at' FROM scan_upload_stream s
      WHERE execution_id = '00000000-0000-4000-8000-0000000000e3'),
    '{"batch_count": 3, "confirmed_count": 3, "pending_count": 0, "min_batch": 0, "max_batch": 2,
      "final_count": 1, "final_batch": 2, "confirmed_observations": 0,
      "dns_batch_count": 3, "dns_confirmed_count": 3, "dns_pending_count": 0, "dns_max_batch": 5,
      "dns_confirmed_observations": 30, "dirty": false, "abandoned_at": null}'::jsonb,
    'backfill: dns execution e3 (sparse sidecar 0,1,5; empty final 2)');
SELECT pg_temp.check_eq(
    (SELECT to_jsonb(s) - 'execution_id' - 'upload_id' - 'updated_at' FROM scan_upload_stream s
      WHERE execution_id = '00000000-0000-4000-8000-0000000000e5'),
    '{"batch_count": 12, "confirmed_count": 10, "pending_count": 2, "min_batch": 0, "max_batch": 11,
      "final_count": 0, "final_batch": null, "confirmed_observations": 1045,
      "dns_batch_count": 2, "dns_confirmed_count": 1, "dns_pending_count": 1, "dns_max_batch": 4,
      "dns_confirmed_observations": 11, "dirty": false, "abandoned_at": null}'::jsonb,
    'backfill: running execution e5 (10 confirmed, 2 pending, dns 1+1)');
SELECT pg_temp.check_eq(
    (SELECT count(*) FROM scan_upload_stream WHERE execution_id = '00000000-0000-4000-8000-0000000000e2'),
    2::bigint, 'backfill: failed execution e2 keeps both of its uploads');

-- Outbox: rows kept; new columns at their defaults.
SELECT pg_temp.check_eq((SELECT count(*) FROM scan_projection_outbox), 23::bigint, 'outbox: all 23 rows kept');
SELECT pg_temp.check_eq(
    (SELECT count(*) FROM scan_projection_outbox
      WHERE phase = 'publishing' AND cursor IS NULL AND processed_endpoints = 0
        AND claim_token IS NULL AND lease_expires_at IS NULL AND updated_at IS NOT NULL),
    23::bigint, 'outbox: phase publishing, cursor NULL, processed_endpoints 0, no lease');
SELECT pg_temp.check_eq(
    (SELECT attempts || ' ' || last_error || ' ' || last_error_class FROM scan_projection_outbox
      WHERE execution_id = '00000000-0000-4000-8000-0000000000e4'),
    '2 es: 503 Service Unavailable transient', 'outbox: error history kept');
SELECT pg_temp.check_eq((SELECT count(*) FROM scan_projection_outbox WHERE processed_at IS NULL),
                        22::bigint, 'outbox: 22 rows still waiting (1 processed)');

-- Generated column filled for existing rows; domains stay NULL.
SELECT pg_temp.check_eq(
    (SELECT count(*) FROM search_targets
      WHERE (kind IN ('ip', 'cidr')) <> (target_ip IS NOT NULL)
         OR (target_ip IS NOT NULL AND target_ip <> key::inet)),
    0::bigint, 'search_targets.target_ip = key::inet for ip/cidr, NULL for domains');
SELECT pg_temp.check_eq(
    (SELECT count(*) FROM asset_tags
      WHERE (kind IN ('ip', 'cidr')) <> (target_ip IS NOT NULL)),
    0::bigint, 'asset_tags.target_ip filled likewise');

-- Old receipts never recorded their DNS answers; nothing is recorded for them.
SELECT pg_temp.check_eq((SELECT count(*) FROM scan_upload_receipts WHERE dns_answers_recorded),
                        0::bigint, 'receipts: dns_answers_recorded false on every old receipt');
SELECT pg_temp.check_eq((SELECT count(*) FROM execution_dns_answers), 0::bigint,
                        'execution_dns_answers starts empty');

-- Bookkeeping.
SELECT pg_temp.check_eq((SELECT string_agg(name, ',' ORDER BY name) FROM schema_marker),
                        'asset_lifecycle,backlog_count,close_lookup,execution_dns_answers,execution_lifecycle,retention,scan_projection_v2,scan_upload_stream_backfill,search_target_ip,task_delete,task_freshness,task_networks,task_ports',
                        'markers: every current marker');
SELECT pg_temp.check_eq((SELECT version FROM schema_version), 3, 'schema_version = 3');

-- The upgraded triggers work on the old data: confirm e5's pending batch 10.
UPDATE scan_upload_receipts SET status = 'confirmed', confirmed_at = now()
 WHERE execution_id = '00000000-0000-4000-8000-0000000000e5' AND stream = 'main' AND batch_index = 10;
SELECT pg_temp.check_eq(
    (SELECT confirmed_count || '/' || pending_count || '/' || confirmed_observations FROM scan_upload_stream
      WHERE execution_id = '00000000-0000-4000-8000-0000000000e5'),
    '11/1/1155', 'after upgrade: confirming an old pending receipt moves it to confirmed');
