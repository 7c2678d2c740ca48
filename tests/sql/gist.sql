-- The generated target_ip column and the partial GiST indexes (run.sh gist): with 200k
-- search targets (and 60k tags) and fresh statistics, CIDR containment queries choose
-- the GiST index on their own. No enable_* planner setting is changed for the plan checks.

SELECT setseed(0.4242);
INSERT INTO owners (id, name, token_sha256)
SELECT ('00000000-0000-4000-8000-0000000000' || lpad(to_hex(n), 2, '0'))::uuid, 'owner-' || n, sha256(('owner-' || n)::bytea)
  FROM generate_series(1, 10) n;

-- 100k single IPs spread over IPv4, 60k IPv4 CIDRs (/16 to /28) spread over IPv4,
-- 5k IPv6 CIDRs, 40k domains; duplicates of the random keys are skipped, then the table
-- is topped up to at least 200k rows with more domains.
INSERT INTO search_targets (owner_id, kind, key)
SELECT ('00000000-0000-4000-8000-0000000000' || lpad(to_hex(1 + (random() * 9)::int), 2, '0'))::uuid,
       'ip', host('0.0.0.0'::inet + (random() * 4294967295)::bigint)
  FROM generate_series(1, 100000)
ON CONFLICT DO NOTHING;
INSERT INTO search_targets (owner_id, kind, key)
SELECT ('00000000-0000-4000-8000-0000000000' || lpad(to_hex(1 + (random() * 9)::int), 2, '0'))::uuid,
       'cidr', network(set_masklen('0.0.0.0'::inet + (random() * 4294967295)::bigint, 16 + (random() * 12)::int))::text
  FROM generate_series(1, 60000)
ON CONFLICT DO NOTHING;
INSERT INTO search_targets (owner_id, kind, key)
SELECT ('00000000-0000-4000-8000-0000000000' || lpad(to_hex(1 + (random() * 9)::int), 2, '0'))::uuid,
       'cidr', network(set_masklen('2001:db8::'::inet + (random() * 9.2e18)::bigint, 64 + (random() * 48)::int))::text
  FROM generate_series(1, 5000)
ON CONFLICT DO NOTHING;
INSERT INTO search_targets (owner_id, kind, key)
SELECT ('00000000-0000-4000-8000-0000000000' || lpad(to_hex(1 + n % 10), 2, '0'))::uuid,
       'domain', 'host-' || n || '.example.com'
  FROM generate_series(1, 40000 + (200000 - 40000 - (SELECT count(*) FROM search_targets))) n;
-- Known rows for exact answers: owner 01 has 10.0.0.0/8's subnets 10.20.30.0/24 and
-- 10.20.0.0/16, and the covering 10.0.0.0/8 itself.
INSERT INTO search_targets (owner_id, kind, key) VALUES
    ('00000000-0000-4000-8000-000000000001', 'cidr', '10.20.30.0/24'),
    ('00000000-0000-4000-8000-000000000001', 'cidr', '10.20.0.0/16'),
    ('00000000-0000-4000-8000-000000000001', 'cidr', '10.0.0.0/8'),
    ('00000000-0000-4000-8000-000000000001', 'domain', '10.20.30.40.example.com')
ON CONFLICT DO NOTHING;
ANALYZE search_targets;

SELECT pg_temp.check((SELECT count(*) >= 200000 FROM search_targets), 'at least 200k search targets');
SELECT pg_temp.check_eq((SELECT count(*) FROM search_targets WHERE kind = 'domain' AND target_ip IS NOT NULL), 0::bigint,
                        'no domain has a target_ip');

-- Plans: the containment queries as the freshness update and the tag lookup write them.
SELECT pg_temp.check_plan_uses(
    $$SELECT owner_id, key FROM search_targets WHERE kind = 'cidr' AND target_ip <<= '10.0.0.0/8'$$,
    'search_targets_cidr_gist', 'CIDR targets inside 10.0.0.0/8 (<<=)');
SELECT pg_temp.check_plan_uses(
    $$SELECT owner_id, key FROM search_targets WHERE kind = 'cidr' AND target_ip >>= '10.20.30.40'$$,
    'search_targets_cidr_gist', 'CIDR targets containing 10.20.30.40 (>>=)');
SELECT pg_temp.check_plan_uses(
    $$SELECT key FROM search_targets WHERE owner_id = '00000000-0000-4000-8000-000000000001' AND kind = 'cidr' AND target_ip <<= '10.0.0.0/8'$$,
    'search_targets_cidr_gist', 'one owner''s CIDR targets inside 10.0.0.0/8');
SELECT pg_temp.check_plan_uses(
    $$SELECT key FROM search_targets WHERE kind = 'cidr' AND target_ip <<= '2001:db8::/32'::cidr AND masklen(target_ip) >= 100$$,
    'search_targets_cidr_gist', 'IPv6 CIDR targets inside 2001:db8::/32, narrow ones');
SELECT pg_temp.check_plan_uses(
    $$UPDATE search_targets SET last_scanned_at = now(), last_execution_id = '00000000-0000-4000-8000-0000000000e1'
       WHERE owner_id = '00000000-0000-4000-8000-000000000001' AND kind = 'cidr' AND target_ip <<= '10.20.0.0/16'
         AND (last_scanned_at IS NULL OR last_scanned_at < now())$$,
    'search_targets_cidr_gist', 'freshness UPDATE of CIDR targets inside a scanned network');

-- Results: the index answers exactly what a sequential recount answers.
CREATE TEMP TABLE via_index AS
SELECT (SELECT count(*) FROM search_targets WHERE kind = 'cidr' AND target_ip <<= '10.0.0.0/8') AS inside,
       (SELECT count(*) FROM search_targets WHERE kind = 'cidr' AND target_ip >>= '10.20.30.40') AS containing;
BEGIN;
-- Only to compute the reference answer without the index (not a plan check).
SET LOCAL enable_indexscan = off;
SET LOCAL enable_bitmapscan = off;
CREATE TEMP TABLE via_seq AS
SELECT (SELECT count(*) FROM search_targets WHERE kind = 'cidr' AND key::inet <<= '10.0.0.0/8') AS inside,
       (SELECT count(*) FROM search_targets WHERE kind = 'cidr' AND key::inet >>= '10.20.30.40') AS containing;
COMMIT;
SELECT pg_temp.check_eq((SELECT inside || '/' || containing FROM via_index), (SELECT inside || '/' || containing FROM via_seq),
                        'index results equal a sequential recount');
SELECT pg_temp.check((SELECT containing >= 3 FROM via_index), 'the known 10.20.30.0/24, 10.20.0.0/16, 10.0.0.0/8 contain 10.20.30.40');
SELECT pg_temp.check(
    (SELECT array_agg(key) @> ARRAY['10.0.0.0/8', '10.20.0.0/16', '10.20.30.0/24'] AND bool_and(key::inet >>= '10.20.30.40')
       FROM search_targets
      WHERE owner_id = '00000000-0000-4000-8000-000000000001' AND kind = 'cidr' AND target_ip >>= '10.20.30.40'),
    'owner 01''s CIDRs containing 10.20.30.40 include the known three, and only containing ones');
-- IPv4 and IPv6 never match each other.
SELECT pg_temp.check_eq((SELECT count(*) FROM search_targets WHERE kind = 'cidr' AND target_ip <<= '::/0'),
                        (SELECT count(*) FROM search_targets WHERE kind = 'cidr' AND family(target_ip) = 6),
                        '::/0 contains exactly the IPv6 CIDRs');

-- Tags: 60k CIDR/IP tags; "which CIDR tags contain this observed IP" uses the GiST index.
INSERT INTO asset_tags (owner_id, kind, key, tag)
SELECT owner_id, kind, key, 'tag-' || (random() * 5)::int FROM search_targets
 WHERE kind IN ('cidr', 'ip') ORDER BY random() LIMIT 60000
ON CONFLICT DO NOTHING;
ANALYZE asset_tags;
SELECT pg_temp.check_plan_uses(
    $$SELECT tag FROM asset_tags WHERE owner_id = '00000000-0000-4000-8000-000000000003' AND kind = 'cidr' AND target_ip >>= '192.0.2.77'$$,
    'asset_tags_cidr_gist', 'CIDR tags containing an observed IP');
