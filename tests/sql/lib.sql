-- Assertion helpers for the SQL tests. Session-local (pg_temp), so they never appear in a
-- schema dump. \i this file at the top of each test script; every failed check raises and,
-- with ON_ERROR_STOP, stops the script with a non-zero exit code.
\set VERBOSITY terse
\pset tuples_only on
\pset format unaligned
SET client_min_messages = notice;

-- check(condition, what): the condition must be true.
CREATE OR REPLACE FUNCTION pg_temp.check(ok boolean, what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION 'FAIL: %', what;
    END IF;
    RAISE NOTICE 'ok - %', what;
END $$;

-- check_eq(actual, expected, what): equal (NULLs equal each other).
CREATE OR REPLACE FUNCTION pg_temp.check_eq(actual anycompatible, expected anycompatible, what text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF actual IS DISTINCT FROM expected THEN
        RAISE EXCEPTION 'FAIL: % (expected %, got %)', what, expected, actual;
    END IF;
    RAISE NOTICE 'ok - %', what;
END $$;

-- check_raises(sql, sqlstate, constraint_or_null, what): running sql must fail with that
-- SQLSTATE (and constraint name, if given). The failed statement is rolled back by the
-- exception block, so the test continues with unchanged data.
CREATE OR REPLACE FUNCTION pg_temp.check_raises(stmt text, state text, cons text, what text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    got_state text;
    got_cons  text;
    got_msg   text;
BEGIN
    BEGIN
        EXECUTE stmt;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS got_state = RETURNED_SQLSTATE, got_cons = CONSTRAINT_NAME,
                                got_msg = MESSAGE_TEXT;
    END;
    IF got_state IS NULL THEN
        RAISE EXCEPTION 'FAIL: % (statement succeeded: %)', what, stmt;
    END IF;
    IF got_state <> state OR (cons IS NOT NULL AND got_cons IS DISTINCT FROM cons) THEN
        RAISE EXCEPTION 'FAIL: % (expected % %, got % % "%")', what, state, cons, got_state, got_cons, got_msg;
    END IF;
    RAISE NOTICE 'ok - % (% %)', what, got_state, coalesce(got_cons, '');
END $$;

-- stream_mismatches(): stream rows that differ from an independent recount of the receipts
-- (written without the schema's scan_upload_stream_recount view), in either direction.
-- Rows marked dirty are skipped when only_clean is true.
CREATE OR REPLACE FUNCTION pg_temp.stream_mismatches(only_clean boolean)
RETURNS TABLE (side text, row_json jsonb) LANGUAGE sql AS $$
    WITH keys AS (
        SELECT DISTINCT execution_id, upload_id FROM scan_upload_receipts
    ), expected AS (
        SELECT k.execution_id, k.upload_id,
               (SELECT count(*)::int FROM scan_upload_receipts r
                 WHERE (r.execution_id, r.upload_id) = (k.execution_id, k.upload_id)
                   AND r.stream = 'main') AS batch_count,
               (SELECT count(*)::int FROM scan_upload_receipts r
                 WHERE (r.execution_id, r.upload_id) = (k.execution_id, k.upload_id)
                   AND r.stream = 'main' AND r.status = 'confirmed') AS confirmed_count,
               (SELECT count(*)::int FROM scan_upload_receipts r
                 WHERE (r.execution_id, r.upload_id) = (k.execution_id, k.upload_id)
                   AND r.stream = 'main' AND r.status = 'pending') AS pending_count,
               (SELECT min(batch_index) FROM scan_upload_receipts r
                 WHERE (r.execution_id, r.upload_id) = (k.execution_id, k.upload_id)
                   AND r.stream = 'main') AS min_batch,
               (SELECT max(batch_index) FROM scan_upload_receipts r
                 WHERE (r.execution_id, r.upload_id) = (k.execution_id, k.upload_id)
                   AND r.stream = 'main') AS max_batch,
               (SELECT count(*)::int FROM scan_upload_receipts r
                 WHERE (r.execution_id, r.upload_id) = (k.execution_id, k.upload_id)
                   AND r.stream = 'main' AND r.is_final) AS final_count,
               (SELECT max(batch_index) FROM scan_upload_receipts r
                 WHERE (r.execution_id, r.upload_id) = (k.execution_id, k.upload_id)
                   AND r.stream = 'main' AND r.is_final) AS final_batch,
               (SELECT coalesce(sum(observation_count), 0)::bigint FROM scan_upload_receipts r
                 WHERE (r.execution_id, r.upload_id) = (k.execution_id, k.upload_id)
                   AND r.stream = 'main' AND r.status = 'confirmed') AS confirmed_observations,
               (SELECT count(*)::int FROM scan_upload_receipts r
                 WHERE (r.execution_id, r.upload_id) = (k.execution_id, k.upload_id)
                   AND r.stream = 'dns') AS dns_batch_count,
               (SELECT count(*)::int FROM scan_upload_receipts r
                 WHERE (r.execution_id, r.upload_id) = (k.execution_id, k.upload_id)
                   AND r.stream = 'dns' AND r.status = 'confirmed') AS dns_confirmed_count,
               (SELECT count(*)::int FROM scan_upload_receipts r
                 WHERE (r.execution_id, r.upload_id) = (k.execution_id, k.upload_id)
                   AND r.stream = 'dns' AND r.status = 'pending') AS dns_pending_count,
               (SELECT max(batch_index) FROM scan_upload_receipts r
                 WHERE (r.execution_id, r.upload_id) = (k.execution_id, k.upload_id)
                   AND r.stream = 'dns') AS dns_max_batch,
               (SELECT coalesce(sum(observation_count), 0)::bigint FROM scan_upload_receipts r
                 WHERE (r.execution_id, r.upload_id) = (k.execution_id, k.upload_id)
                   AND r.stream = 'dns' AND r.status = 'confirmed') AS dns_confirmed_observations
          FROM keys k
    ), actual AS (
        SELECT execution_id, upload_id, batch_count, confirmed_count, pending_count, min_batch,
               max_batch, final_count, final_batch, confirmed_observations, dns_batch_count,
               dns_confirmed_count, dns_pending_count, dns_max_batch, dns_confirmed_observations
          FROM scan_upload_stream
         WHERE NOT (only_clean AND dirty)
           -- a stream row whose receipts were all deleted has nothing to compare with
           AND EXISTS (SELECT 1 FROM scan_upload_receipts r
                        WHERE (r.execution_id, r.upload_id) = (scan_upload_stream.execution_id,
                                                                scan_upload_stream.upload_id))
    ), expected_kept AS (
        SELECT e.* FROM expected e
         WHERE NOT EXISTS (SELECT 1 FROM scan_upload_stream s
                            WHERE (s.execution_id, s.upload_id) = (e.execution_id, e.upload_id)
                              AND only_clean AND s.dirty)
    )
    SELECT 'missing or wrong in scan_upload_stream', to_jsonb(x)
      FROM (SELECT * FROM expected_kept EXCEPT SELECT * FROM actual) x
    UNION ALL
    SELECT 'unexpected in scan_upload_stream', to_jsonb(y)
      FROM (SELECT * FROM actual EXCEPT SELECT * FROM expected_kept) y
$$;

-- plan_of(query): the text of EXPLAIN for the query.
CREATE OR REPLACE FUNCTION pg_temp.plan_of(q text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    line text;
    plan text := '';
BEGIN
    FOR line IN EXECUTE 'EXPLAIN ' || q LOOP
        plan := plan || line || E'\n';
    END LOOP;
    RETURN plan;
END $$;

-- check_plan_uses(query, index, what): EXPLAIN of the query mentions the index.
CREATE OR REPLACE FUNCTION pg_temp.check_plan_uses(q text, idx text, what text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    plan text := pg_temp.plan_of(q);
BEGIN
    IF position(idx IN plan) = 0 THEN
        RAISE EXCEPTION E'FAIL: % - plan does not use %:\n%', what, idx, plan;
    END IF;
    RAISE NOTICE E'ok - % uses %\n%', what, idx, plan;
END $$;
