#!/usr/bin/env bash
# Runs schemathesis against `scanstore serve` on a fresh database of the test cluster
# ($STORAGE_TEST_DATABASE_URL) and a fresh ES emulator, every operation with its token (an
# owner's; a scanner's for the scanner operations), twice: with every identifier generated
# (malformed and unknown ones), then with the ids of a real task and its claimed execution,
# so that generated queries and bodies reach the handlers behind the lookups; generated
# batches get a valid checksum and the task's scope (schemathesis_hooks.py), so that some
# are stored and their answers checked too (none stored fails the script). Bounded:
# SCHEMATHESIS_EXAMPLES (default 25) examples per operation, SCHEMATHESIS_SECONDS
# (default 300) per pass. Exits non-zero on any failed check.
set -euo pipefail
cd "$(dirname "$0")/../.."
examples=${SCHEMATHESIS_EXAMPLES:-25}
seconds=${SCHEMATHESIS_SECONDS:-300}
cargo build --quiet --bins
bin=${CARGO_TARGET_DIR:-target}/debug
work=$(mktemp -d /tmp/scanstore-st.XXXXXX)
db="scanstore_st_$$"
base_url=${STORAGE_TEST_DATABASE_URL%/*}
psql "$STORAGE_TEST_DATABASE_URL" -X -q -c "CREATE DATABASE $db"
export SCANSTORE_DATABASE_URL="$base_url/$db"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  psql "$STORAGE_TEST_DATABASE_URL" -X -q -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
  rm -rf "$work"
}
trap cleanup EXIT
"$bin/scanstore-es-emulator" --listen 127.0.0.1:0 >"$work/es.out" 2>/dev/null &
pids+=($!)
for _ in $(seq 50); do grep -q '^listening on ' "$work/es.out" && break; sleep 0.1; done
export SCANSTORE_ES_URL=$(sed -n 's/^listening on //p' "$work/es.out")
cat >"$work/scanstore.toml" <<TOML
[server]
listen = "127.0.0.1:0"
[projection]
workers = 1
TOML
chmod 600 "$work/scanstore.toml"
"$bin/scanstore" serve --config "$work/scanstore.toml" >"$work/serve.out" 2>"$work/serve.log" &
pids+=($!)
for _ in $(seq 100); do grep -q '^scanstore listening on ' "$work/serve.out" && break; sleep 0.1; done
url=$(sed -n 's/^scanstore listening on //p' "$work/serve.out")
[ -n "$url" ] || { cat "$work/serve.log"; exit 1; }
admin=scripts/scanstore-admin
field() { sed -n "s/^$1=//p"; }
owner=$($admin owner create schemathesis)
owner_id=$(field owner_id <<<"$owner")
export SCHEMATHESIS_OWNER_TOKEN=$(field token <<<"$owner")
scanner=$($admin scanner create schemathesis --owner "$owner_id")
export SCHEMATHESIS_SCANNER_TOKEN=$(field token <<<"$scanner")
task=$($admin task create --owner "$owner_id" --kind mixed --target 127.0.0.1 \
  --target scanstore.test --scanner "$(field scanner_id <<<"$scanner")")
task_id=$(field task_id <<<"$task")
execution_id=$(field execution_id <<<"$task")
# The scanner claims its execution, so that batches and heartbeats meet a running one.
python3 - "$url/api/v1/scanner/executions/claim" <<'PY'
import os, sys, urllib.request
token = os.environ["SCHEMATHESIS_SCANNER_TOKEN"]
claim = urllib.request.Request(sys.argv[1], method="POST", headers={"Authorization": f"Bearer {token}"})
assert urllib.request.urlopen(claim).status == 200, "the claim found no execution"
PY
# config [TASK_ID EXECUTION_ID]: a schemathesis.toml giving each operation its token (the
# file names only the variables, the tokens stay in the environment) and, when given,
# those ids in place of generated ones.
config() {
  cat <<TOML
headers = { Authorization = "Bearer \${SCHEMATHESIS_OWNER_TOKEN}" }

[[operations]]
include-path-regex = "^/api/v1/scanner/"
headers = { Authorization = "Bearer \${SCHEMATHESIS_SCANNER_TOKEN}" }
TOML
  if [ $# -eq 2 ]; then
    cat <<TOML
parameters = { "path.execution_id" = "$2" }

[[operations]]
include-path-regex = "^/api/v1/tasks/"
parameters = { "path.task_id" = "$1" }
TOML
  fi
}
config >"$work/generated.toml"
config "$task_id" "$execution_id" >"$work/real.toml"

# Generated batches carry their own checksum and the task's addresses, names and times
# (tests/python/schemathesis_hooks.py).
export PYTHONPATH="$PWD/tests/python${PYTHONPATH:+:$PYTHONPATH}"
export SCHEMATHESIS_HOOKS=schemathesis_hooks

# pass NAME CONFIG: one schemathesis run; a failed one fails the script.
pass() {
  echo "schemathesis, $1: $url (examples $examples, at most ${seconds}s)"
  timeout "$seconds" schemathesis --config-file "$2" run src/http/openapi.json --url "$url" \
    --max-examples "$examples" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
    --seed 1 2>&1 | tail -n 40
  return "${PIPESTATUS[0]}"
}
pass "generated ids" "$work/generated.toml"
pass "a real task and its claimed execution" "$work/real.toml"
# Generated batches that the hooks gave their checksum and the task's scope were stored, so
# their answers were checked too; none would mean the hooks no longer take effect.
stored=$(psql "$SCANSTORE_DATABASE_URL" -X -At -c \
  "SELECT count(*) FROM scan_upload_receipts WHERE status = 'confirmed'")
echo "schemathesis: $stored generated batches stored"
[ "$stored" -gt 0 ]
