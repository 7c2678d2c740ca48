#!/usr/bin/env bash
# Schema tests against a real PostgreSQL (15): install, upgrade, triggers, constraints,
# GiST plans. Creates throwaway databases named scanstore_schema_test_* and drops them at
# the end (KEEP_DBS=1 keeps them for inspection).
#
#   PGHOST=/tmp PGPORT=55432 PGUSER=postgres tests/sql/run.sh        (defaults shown)
#   tests/sql/run.sh fresh legacy triggers concurrency constraints gist   (pick sections)
#
# What it proves (one section each):
#   fresh        init.sql, then all migrations twice: pg_dump --schema-only unchanged,
#                markers/version unchanged; the shared upload-stream block of init.sql and
#                migrate_scan_upload_stream.sql is byte-identical.
#   legacy       legacy_v1.sql + legacy_seed.sql, then the migrations: schema dump
#                identical to a fresh init's; every stream row equals an independent
#                recount of the receipts; receipts and outbox rows kept (column by column),
#                new outbox and receipt columns at their defaults; target_ip filled; second run skips
#                the backfill (stream rows not rewritten, a dirty stream stays dirty).
#   backfill_lock  while the backfill transaction is open, receipt writes wait (lock
#                timeout) but reads continue; the blocked write is counted after commit.
#   triggers     tests/sql/triggers.sql: insert/confirm counts, repeated confirm adds
#                nothing, immutability raises, delete marks dirty, repair fixes exactly
#                that stream, execution delete cascades, truncate marks dirty.
#   concurrency  parallel inserts / confirms / repairs of one stream lose no count.
#   constraints  tests/sql/constraints.sql: cascades, scanner NO ACTION, canonical keys,
#                outbox uniqueness and lease pair, DNS child-task idempotence.
#   gist         tests/sql/gist.sql: 200k search targets; CIDR containment (<<=, >>=)
#                queries and the freshness UPDATE choose the partial GiST index after
#                ANALYZE (no enable_* settings); results equal a sequential recount.
set -euo pipefail

export PGHOST="${PGHOST:-/tmp}" PGPORT="${PGPORT:-55432}" PGUSER="${PGUSER:-postgres}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
schema="$root/schema"
work="$(mktemp -d /tmp/scanstore-schema-test.XXXXXX)"
prefix=scanstore_schema_test
failures=0
created_dbs=()

MIGRATIONS=(migrate_scan_projection.sql migrate_scan_upload_stream.sql migrate_search_target_ip.sql migrate_execution_dns_answers.sql migrate_execution_lifecycle.sql migrate_task_ports.sql migrate_asset_lifecycle.sql migrate_retention.sql migrate_task_delete.sql migrate_close_lookup.sql migrate_task_freshness.sql migrate_task_networks.sql migrate_backlog_count.sql)

log()  { printf '%s\n' "$*"; }
pass() { printf 'PASS  %s\n' "$*"; }
fail() { printf 'FAIL  %s\n' "$*"; failures=$((failures + 1)); }

cleanup() {
    if [[ "${KEEP_DBS:-0}" != 1 ]]; then
        for db in "${created_dbs[@]}"; do dropdb --if-exists "$db" 2>/dev/null || true; done
        rm -rf "$work"
    else
        log "kept databases: ${created_dbs[*]}; files in $work"
    fi
}
trap cleanup EXIT

psql_q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }

# newdb NAME: (re)create database ${prefix}_NAME and put its name in $DB. Not used via
# $(...) so that the cleanup list survives (a command substitution is a subshell).
newdb() {
    DB="${prefix}_$1"
    dropdb --if-exists "$DB" 2>/dev/null
    createdb "$DB"
    created_dbs+=("$DB")
}

# Run a schema file exactly as the Rust runner does: the whole file as ONE simple query
# (batch_execute), i.e. one implicit transaction.
run_file() { psql_q -d "$1" -c "$(cat "$2")" >/dev/null; }

# The Rust runner's upgrade path: every migration in order, then the version bump.
migrate_all() {
    local db="$1" m
    for m in "${MIGRATIONS[@]}"; do run_file "$db" "$schema/$m"; done
    psql_q -d "$db" -c "UPDATE schema_version SET version = 3, updated_at = now() WHERE version < 3" >/dev/null
}

# Schema dump without the random \restrict key that recent pg_dump releases emit.
dump_schema() { pg_dump --schema-only "$1" | grep -Ev '^\\(un)?restrict '; }

# Run a test SQL script (with lib.sql) and report it.
run_sql_test() {
    local db="$1" file="$2" name="$3"
    if psql -X -q -v ON_ERROR_STOP=1 -d "$db" -f "$here/lib.sql" -f "$file" >"$work/$name.log" 2>&1; then
        pass "$name ($(grep -c 'ok - ' "$work/$name.log") checks; log: $work/$name.log)"
    else
        fail "$name"; tail -n 25 "$work/$name.log"
    fi
}

scalar() { psql -X -At -v ON_ERROR_STOP=1 -d "$1" -c "$2"; }

fresh_dump=""
fresh_reference() {
    # A fresh install and its dump, the reference for every comparison.
    if [[ -z "$fresh_dump" ]]; then
        newdb fresh_ref; local db="$DB"
        run_file "$db" "$schema/init.sql"
        fresh_dump="$work/fresh.schema.sql"
        dump_schema "$db" >"$fresh_dump"
    fi
}

section_fresh() {
    log "== fresh: init.sql then all migrations twice"
    fresh_reference
    newdb fresh; local db="$DB"
    run_file "$db" "$schema/init.sql"
    local markers_before; markers_before="$(scalar "$db" "SELECT string_agg(name || '@' || applied_at, ',' ORDER BY name) FROM schema_marker")"
    migrate_all "$db"
    migrate_all "$db"
    dump_schema "$db" >"$work/fresh_migrated.schema.sql"
    if diff -u "$fresh_dump" "$work/fresh_migrated.schema.sql" >"$work/fresh.diff"; then
        pass "fresh: schema dump unchanged by two migration runs"
    else
        fail "fresh: schema changed by migrations"; head -50 "$work/fresh.diff"
    fi
    [[ "$(scalar "$db" "SELECT string_agg(name || '@' || applied_at, ',' ORDER BY name) FROM schema_marker")" == "$markers_before" ]] \
        && pass "fresh: markers unchanged" || fail "fresh: markers changed"
    [[ "$(scalar "$db" "SELECT string_agg(name, ',' ORDER BY name) FROM schema_marker")" == \
        "asset_lifecycle,backlog_count,close_lookup,execution_dns_answers,execution_lifecycle,retention,scan_projection_v2,scan_upload_stream_backfill,search_target_ip,task_delete,task_freshness,task_networks,task_ports" ]] \
        && pass "fresh: init.sql inserts the thirteen markers" || fail "fresh: markers"
    [[ "$(scalar "$db" "SELECT version FROM schema_version")" == 3 ]] \
        && pass "fresh: schema_version = 3" || fail "fresh: schema_version"
    # The upload-stream block must be byte-identical in init.sql and the migration, since
    # function bodies are dumped verbatim.
    if diff <(sed -n '/^-- BEGIN shared/,/^-- END shared/p' "$schema/init.sql" | sed '1d;$d') \
            <(sed -n '/^-- BEGIN shared/,/^-- END shared/p' "$schema/migrate_scan_upload_stream.sql" | sed '1d;$d') \
            >"$work/shared.diff"; then
        pass "fresh: shared upload-stream block identical in init.sql and migration"
    else
        fail "fresh: shared block differs"; head -30 "$work/shared.diff"
    fi
}

# Data that the upgrade must keep, column by column (new columns excluded).
snapshot_kept_data() {
    local db="$1" out="$2"
    {
        psql -X -At -d "$db" -c "SELECT id, kind, execution_id, owner_id, tag_scope, available_at, attempts, last_error, last_error_class, processed_at, created_at FROM scan_projection_outbox ORDER BY id"
        psql -X -At -d "$db" -c "SELECT id, execution_id, upload_id, stream, batch_index, is_final, checksum, observation_count, endpoint_count, dns_record_count, status, storage_references, created_at, confirmed_at FROM scan_upload_receipts ORDER BY id"
        psql -X -At -d "$db" -c "SELECT owner_id, kind, key, last_scanned_at, last_execution_id, created_at FROM search_targets ORDER BY 1, 2, 3"
        psql -X -At -d "$db" -c "SELECT owner_id, kind, key, tag, created_at FROM asset_tags ORDER BY 1, 2, 3, 4"
        # The legacy columns; later releases add their own after them.
        psql -X -At -d "$db" -c "SELECT id, owner_id, kind, status, parent_task_id, source_execution_id, tags, executions_total, executions_succeeded, endpoints_total, dns_records_total, last_succeeded_at, created_at, updated_at FROM tasks ORDER BY id"
        # The legacy columns; later releases add their own after them.
        psql -X -At -d "$db" -c "SELECT id, task_id, scanner_id, status, observation_count, endpoint_count, dns_record_count, ip_count, created_at, started_at, finished_at, updated_at FROM executions ORDER BY id"
        psql -X -At -d "$db" -c "SELECT q.* FROM scan_analysis_queue q ORDER BY id"
    } >"$out"
}

section_legacy() {
    log "== legacy: legacy_v1 + seed, then the migrations"
    fresh_reference
    newdb legacy; local db="$DB"
    run_file "$db" "$schema/legacy_v1.sql"
    psql_q -d "$db" -f "$here/legacy_seed.sql" >/dev/null
    snapshot_kept_data "$db" "$work/legacy_before.data"
    migrate_all "$db"
    dump_schema "$db" >"$work/legacy_migrated.schema.sql"
    if diff -u "$fresh_dump" "$work/legacy_migrated.schema.sql" >"$work/legacy.diff"; then
        pass "legacy: upgraded schema dump identical to a fresh init.sql"
    else
        fail "legacy: upgraded schema differs from fresh"; head -60 "$work/legacy.diff"
    fi
    snapshot_kept_data "$db" "$work/legacy_after.data"
    if diff -u "$work/legacy_before.data" "$work/legacy_after.data" >"$work/legacy_data.diff"; then
        pass "legacy: outbox rows, receipts, targets, tags, tasks, executions, analysis queue kept ($(wc -l <"$work/legacy_after.data") rows compared)"
    else
        fail "legacy: data changed by upgrade"; head -30 "$work/legacy_data.diff"
    fi
    run_sql_test "$db" "$here/legacy_checks.sql" "legacy_checks"

    # Second run: the marker must skip the backfill. Stream rows keep their row version
    # (xmin), and a stream made dirty in between stays dirty (a backfill would clean it).
    local before after
    psql_q -d "$db" -c "DELETE FROM scan_upload_receipts WHERE execution_id = '00000000-0000-4000-8000-0000000000e5' AND stream = 'main' AND batch_index = 11" >/dev/null
    before="$(scalar "$db" "SELECT string_agg(execution_id || '/' || upload_id || ':' || xmin || ':' || dirty, ',' ORDER BY execution_id, upload_id) FROM scan_upload_stream")"
    migrate_all "$db"
    after="$(scalar "$db" "SELECT string_agg(execution_id || '/' || upload_id || ':' || xmin || ':' || dirty, ',' ORDER BY execution_id, upload_id) FROM scan_upload_stream")"
    if [[ "$before" == "$after" && "$after" == *":true"* ]]; then
        pass "legacy: second run skips the backfill (stream rows untouched, dirty stream still dirty)"
    else
        fail "legacy: second run rewrote stream rows"
    fi
    dump_schema "$db" >"$work/legacy_migrated2.schema.sql"
    diff -q "$fresh_dump" "$work/legacy_migrated2.schema.sql" >/dev/null \
        && pass "legacy: schema still identical after the second run" || fail "legacy: second run changed schema"
}

section_backfill_lock() {
    log "== backfill_lock: receipt writes wait for the backfill, reads do not"
    newdb backfill_lock; local db="$DB"
    run_file "$db" "$schema/legacy_v1.sql"
    psql_q -d "$db" -f "$here/legacy_seed.sql" >/dev/null
    # The first migration as the runner would, then the stream migration held open for 4 s.
    run_file "$db" "$schema/migrate_scan_projection.sql"
    { printf 'BEGIN;\n'; cat "$schema/migrate_scan_upload_stream.sql"; printf '\nSELECT pg_sleep(4);\nCOMMIT;\n'; } >"$work/held_migration.sql"
    psql_q -d "$db" -f "$work/held_migration.sql" >"$work/held_migration.log" 2>&1 &
    local held=$!
    sleep 1.5
    local read_ok=0 write_blocked=0
    if psql_q -d "$db" -c "SET lock_timeout = '1s'; SELECT count(*) FROM scan_upload_receipts" >/dev/null 2>&1; then read_ok=1; fi
    if ! psql_q -d "$db" -c "SET lock_timeout = '1s'; INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, checksum, observation_count) VALUES ('00000000-0000-4000-8000-0000000000e5', '00000000-0000-4000-8000-000000000c06', 'main', 12, 'sha256:x', 1)" >"$work/blocked_write.log" 2>&1 \
       && grep -q 'lock timeout' "$work/blocked_write.log"; then write_blocked=1; fi
    # A writer that simply waits is counted once, by its trigger, after the backfill.
    psql_q -d "$db" -c "INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, checksum, observation_count) VALUES ('00000000-0000-4000-8000-0000000000e5', '00000000-0000-4000-8000-000000000c06', 'main', 13, 'sha256:y', 1)" >/dev/null &
    local waiter=$!
    wait "$held"; wait "$waiter"
    [[ $read_ok == 1 ]] && pass "backfill_lock: reads continue during the backfill" || fail "backfill_lock: read blocked"
    [[ $write_blocked == 1 ]] && pass "backfill_lock: receipt insert waits for the backfill (lock timeout)" || { fail "backfill_lock: insert not blocked"; cat "$work/blocked_write.log"; }
    [[ "$(scalar "$db" "SELECT batch_count || '/' || pending_count || '/' || max_batch FROM scan_upload_stream WHERE execution_id = '00000000-0000-4000-8000-0000000000e5'")" == "13/3/13" ]] \
        && pass "backfill_lock: the waiting insert is counted exactly once (13 batches, 3 pending, max 13)" \
        || fail "backfill_lock: stream after waiting insert: $(scalar "$db" "SELECT to_jsonb(s) FROM scan_upload_stream s WHERE execution_id = '00000000-0000-4000-8000-0000000000e5'")"
}

section_triggers() {
    log "== triggers"
    newdb triggers; local db="$DB"
    run_file "$db" "$schema/init.sql"
    run_sql_test "$db" "$here/triggers.sql" "triggers"
}

section_constraints() {
    log "== constraints"
    newdb constraints; local db="$DB"
    run_file "$db" "$schema/init.sql"
    run_sql_test "$db" "$here/constraints.sql" "constraints"
}

section_concurrency() {
    log "== concurrency: parallel writers on one stream"
    newdb concurrency; local db="$DB"
    run_file "$db" "$schema/init.sql"
    psql_q -d "$db" <<'SQL'
INSERT INTO owners (id, name, token_sha256) VALUES ('00000000-0000-4000-8000-000000000001', 'o', sha256('o'));
INSERT INTO scanners (id, name, token_sha256) VALUES ('00000000-0000-4000-8000-0000000000a1', 's', sha256('s'));
INSERT INTO tasks (id, owner_id, kind) VALUES ('00000000-0000-4000-8000-0000000000b1', '00000000-0000-4000-8000-000000000001', 'port_scan');
INSERT INTO executions (id, task_id, scanner_id, status) VALUES ('00000000-0000-4000-8000-0000000000e1', '00000000-0000-4000-8000-0000000000b1', '00000000-0000-4000-8000-0000000000a1', 'running');
SQL
    local e="'00000000-0000-4000-8000-0000000000e1'" u="'00000000-0000-4000-8000-00000000cccc'"
    # 4 writers x 50 single-row transactions, all racing to create the same stream row.
    local w pids=()
    for w in 0 1 2 3; do
        ( for i in $(seq 0 49); do
              b=$((w * 50 + i))
              printf "INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, checksum, observation_count) VALUES (%s, %s, 'main', %d, 'c%d', %d);\n" "$e" "$u" "$b" "$b" "$((b % 7))"
              printf "INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, checksum, observation_count) VALUES (%s, %s, 'dns', %d, 'd%d', 1);\n" "$e" "$u" "$((b * 3))" "$b"
          done | psql_q -d "$db" >/dev/null ) &
        pids+=($!)
    done
    for w in "${pids[@]}"; do wait "$w"; done
    [[ "$(scalar "$db" "SELECT batch_count || '/' || pending_count || '/' || min_batch || '/' || max_batch || '/' || dns_batch_count || '/' || dns_pending_count FROM scan_upload_stream")" == "200/200/0/199/200/200" ]] \
        && pass "concurrency: 400 parallel inserts counted (200 main + 200 dns, all pending)" \
        || fail "concurrency: inserts lost counts: $(scalar "$db" "SELECT to_jsonb(s) FROM scan_upload_stream s")"
    # 4 confirmers in parallel, each confirming its quarter one receipt per transaction,
    # plus a fifth session calling repair in a loop at the same time.
    pids=()
    for w in 0 1 2 3; do
        ( for i in $(seq 0 49); do
              b=$((w * 50 + i))
              printf "UPDATE scan_upload_receipts SET status = 'confirmed', confirmed_at = now() WHERE execution_id = %s AND upload_id = %s AND stream = 'main' AND batch_index = %d;\n" "$e" "$u" "$b"
              printf "UPDATE scan_upload_receipts SET status = 'confirmed', confirmed_at = now() WHERE execution_id = %s AND upload_id = %s AND stream = 'dns' AND batch_index = %d;\n" "$e" "$u" "$((b * 3))"
          done | psql_q -d "$db" >/dev/null ) &
        pids+=($!)
    done
    ( for i in $(seq 1 60); do printf "SELECT count(*) FROM scan_upload_stream_repair(%s, %s);\n" "$e" "$u"; done | psql_q -d "$db" >/dev/null ) &
    pids+=($!)
    for w in "${pids[@]}"; do wait "$w"; done
    local expected_obs; expected_obs="$(scalar "$db" "SELECT sum(b % 7) FROM generate_series(0, 199) b")"
    [[ "$(scalar "$db" "SELECT confirmed_count || '/' || pending_count || '/' || confirmed_observations || '/' || dns_confirmed_count || '/' || dns_pending_count || '/' || dns_confirmed_observations || '/' || dirty FROM scan_upload_stream")" == "200/0/$expected_obs/200/0/200/false" ]] \
        && pass "concurrency: 400 parallel confirms with concurrent repairs counted exactly" \
        || fail "concurrency: confirms: $(scalar "$db" "SELECT to_jsonb(s) FROM scan_upload_stream s")"
    # The same, with deletes and repairs interleaved with inserts: after a final repair the
    # row equals the recount.
    pids=()
    ( for i in $(seq 200 299); do printf "INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, checksum, observation_count, status, confirmed_at) VALUES (%s, %s, 'main', %d, 'c', 2, 'confirmed', now());\n" "$e" "$u" "$i"; done | psql_q -d "$db" >/dev/null ) &
    pids+=($!)
    ( for i in $(seq 0 2 98); do printf "DELETE FROM scan_upload_receipts WHERE execution_id = %s AND upload_id = %s AND stream = 'main' AND batch_index = %d;\nSELECT count(*) FROM scan_upload_stream_repair(%s, %s);\n" "$e" "$u" "$i" "$e" "$u"; done | psql_q -d "$db" >/dev/null ) &
    pids+=($!)
    for w in "${pids[@]}"; do wait "$w"; done
    psql_q -d "$db" -c "SELECT count(*) FROM scan_upload_stream_repair($e, $u)" >/dev/null
    if psql -X -q -v ON_ERROR_STOP=1 -d "$db" -f "$here/lib.sql" -c "SELECT pg_temp.check_eq((SELECT count(*) FROM pg_temp.stream_mismatches(false)), 0::bigint, 'stream equals recount after concurrent inserts, deletes and repairs')" >"$work/concurrency.log" 2>&1; then
        pass "concurrency: interleaved inserts/deletes/repairs end consistent"
    else
        fail "concurrency: interleaved"; cat "$work/concurrency.log"
    fi
}

section_gist() {
    log "== gist: 200k targets, CIDR containment uses the partial GiST index"
    newdb gist; local db="$DB"
    run_file "$db" "$schema/init.sql"
    run_sql_test "$db" "$here/gist.sql" "gist"
}

sections=("$@")
[[ ${#sections[@]} -eq 0 ]] && sections=(fresh legacy backfill_lock triggers concurrency constraints gist)
for s in "${sections[@]}"; do "section_$s"; done

if [[ $failures -eq 0 ]]; then
    log "ALL PASSED (${sections[*]})"
else
    log "$failures FAILURE(S)"
    exit 1
fi
