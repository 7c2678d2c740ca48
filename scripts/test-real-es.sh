#!/usr/bin/env bash
# The compatibility run for a real Elasticsearch or OpenSearch cluster: runs the integration
# tests that face ES (fault-injection tests skip themselves there), the vendored YAML REST
# tests and a short benchmark against the cluster, then the same tests against the
# emulator, and prints a table of features × (emulator, cluster), made from what the two
# runs reported (rows: scripts/real-es-table.py). Starts its own throwaway PostgreSQL
# unless STORAGE_TEST_DATABASE_URL is set, and always stops it.
#
# Everything it makes on the cluster is named under one prefix unique to the run
# (indices, aliases, index templates) and deleted by name at the end, even after a failure;
# scanstore's stored script `scanstore-asset-merge` is put back as it was. Other indices
# are never written or deleted. Use a cluster that serves no production scanstore.
#
#   scripts/test-real-es.sh https://localhost:9200 --api-key-file key.txt --ca-file ca.pem
#   scripts/test-real-es.sh http://localhost:9200         # a cluster without security
#   scripts/test-real-es.sh URL --filter emulator::       # only the tests matching (repeatable)
#   scripts/test-real-es.sh --self-check                  # the table's parser and feature map
#
# The API key (the encoded form Elasticsearch prints) may also come from
# STORAGE_TEST_ES_API_KEY. Output: target/test-real-es/{cluster,emulator}.log and table.md.
# Exit status 1 when anything failed on the cluster or on the emulator.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg-cluster.sh

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

self_check() {
  python3 scripts/real-es-table.py --self-check
  # Every filter of the feature map still names a test (a renamed test would empty a row).
  local list
  list=$(mktemp)
  cargo test --quiet --test integration -- --list --include-ignored >"$list" 2>/dev/null
  python3 scripts/real-es-table.py --check-map "$list"
  rm -f "$list"
}

[ $# -ge 1 ] || usage
if [ "$1" = "--self-check" ]; then
  self_check
  exit 0
fi
case "$1" in http://* | https://*) ;; *) usage ;; esac
url=${1%/}
shift
api_key=${STORAGE_TEST_ES_API_KEY:-}
ca_file=""
filters=()
while [ $# -gt 0 ]; do
  case "$1" in
    --api-key-file) api_key=$(tr -d ' \n\r' <"$2"); shift 2 ;;
    --ca-file) ca_file=$(realpath "$2"); shift 2 ;;
    --filter) filters+=("$2"); shift 2 ;;
    *) usage ;;
  esac
done
if [ ${#filters[@]} -eq 0 ]; then
  mapfile -t filters < <(python3 scripts/real-es-table.py --filters)
fi

out=target/test-real-es
mkdir -p "$out"
export STORAGE_TEST_ES_URL=$url STORAGE_TEST_ES_API_KEY=$api_key STORAGE_TEST_ES_CA_FILE=$ca_file
cluster=$(python3 scripts/real-es-cluster.py probe)
echo "cluster: $cluster at $url"
# Lowercase, starting with a letter, short: index names and scanstore prefixes begin with it.
root="rc$(python3 -c 'import secrets; print(secrets.token_hex(4))')-"
echo "everything on the cluster is named $root*"

work=$(mktemp -d /tmp/scanstore-real-es.XXXXXX)
chmod 755 "$work"
finish() {
  STORAGE_TEST_ES_URL=$url python3 scripts/real-es-cluster.py cleanup "$root" "$work/script.json" || true
  pg_stop "$work/pg"
  rm -rf "$work"
}
trap finish EXIT
python3 scripts/real-es-cluster.py save-script scanstore-asset-merge "$work/script.json"

if [ -z "${STORAGE_TEST_DATABASE_URL:-}" ]; then
  port=$(free_port)
  pg_start "$work/pg" "$port"
  export STORAGE_TEST_DATABASE_URL="postgresql://postgres@127.0.0.1:$port/postgres"
  echo "test PostgreSQL on 127.0.0.1:$port"
fi
# The Python client's check (emulator::python_peer) skips without it.
if ! python3 -c 'import elasticsearch' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check 'elasticsearch>=8,<9'
fi

cargo test --quiet --test integration --no-run
run() {
  # --show-output: the SKIP lines of passing tests and the YAML runner's lines reach the log.
  cargo test --test integration -- --include-ignored --show-output "${filters[@]}" 2>&1 | tee "$1" |
    grep -E '^test .* \.\.\. (ok|FAILED)$|^test result:' || true
}
echo "== against $url"
STORAGE_TEST_ES_PREFIX=$root run "$out/cluster.log"
echo "== against the emulator"
(
  unset STORAGE_TEST_ES_URL STORAGE_TEST_ES_API_KEY STORAGE_TEST_ES_CA_FILE
  run "$out/emulator.log"
)

status=0
python3 scripts/real-es-table.py "$out/cluster.log" "$out/emulator.log" --cluster-name "$cluster" |
  tee "$out/table.md" || status=1
grep -q '^failed on the' "$out/table.md" && status=1
exit $status
