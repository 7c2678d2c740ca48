#!/usr/bin/env bash
# Runs schemathesis against `scanstore serve` on a fresh database of the test cluster
# ($STORAGE_TEST_DATABASE_URL) and a fresh ES emulator, with an owner token. Bounded:
# SCHEMATHESIS_EXAMPLES (default 25) examples per operation, SCHEMATHESIS_SECONDS
# (default 300) in all. Exits non-zero on any failed check.
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
token=$(SCANSTORE_DATABASE_URL=$SCANSTORE_DATABASE_URL scripts/scanstore-admin owner create schemathesis | sed -n 's/^token=//p')
echo "schemathesis: $url (examples $examples, at most ${seconds}s)"
timeout "$seconds" schemathesis run src/http/openapi.json --url "$url" \
  --header "Authorization: Bearer $token" \
  --max-examples "$examples" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --seed 1 2>&1 | tail -n 40
exit "${PIPESTATUS[0]}"
