#!/usr/bin/env bash
# The benchmark: builds release binaries, starts a throwaway PostgreSQL cluster
# unless SCANSTORE_DATABASE_URL or STORAGE_TEST_DATABASE_URL is set (scanstore-bench starts
# a fresh ES emulator per scenario unless SCANSTORE_ES_URL is set), installs the Python
# peer's client if missing, runs scanstore-bench and stops what it started. The report goes
# to target/bench/report.md (with PNG plots and the scanstore logs under target/bench/).
#
#   scripts/bench.sh                       # 10 k, 100 k and 1 M endpoints, pool 1 vs 16
#   scripts/bench.sh --quick               # 10 k only, small (under 2 minutes)
#   scripts/bench.sh --sizes 10000,100000  # any scanstore-bench option (--help lists them)
#   scripts/bench.sh --no-sizes --no-queue --no-imports --no-pool --attack-connections 0 \
#     --no-peer --fairness-backlog 100000  # only "fair and fresh under a backlog", at 100 k
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg-cluster.sh

target=${CARGO_TARGET_DIR:-target}
echo "== building release binaries"
cargo build --release --quiet --bins
bin=$target/release

if [ -z "${SCANSTORE_DATABASE_URL:-}" ] && [ -z "${STORAGE_TEST_DATABASE_URL:-}" ]; then
  work=$(mktemp -d /tmp/scanstore-bench.XXXXXX)
  chmod 755 "$work"
  port=$(free_port)
  trap 'pg_stop "$work/pg"; rm -rf "$work"' EXIT
  pg_start "$work/pg" "$port"
  export STORAGE_TEST_DATABASE_URL="postgresql://postgres@127.0.0.1:$port/postgres"
  echo "== throwaway PostgreSQL on 127.0.0.1:$port"
fi

# The peer: the official Python client (PyPI).
if ! python3 -c 'import elasticsearch' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check 'elasticsearch>=8,<9'
fi
# The plots' text needs a TrueType font (Debian's DejaVu); without one the plots are skipped.
if ! ls /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-dejavu-core >/dev/null 2>&1 || true
fi

echo "== machine: $(nproc) CPUs, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
out=(--out target/bench)
for arg in "$@"; do [ "$arg" = --out ] && out=(); done
"$bin/scanstore-bench" \
  --scanstore-bin "$bin/scanstore" \
  --emulator-bin "$bin/scanstore-es-emulator" \
  "${out[@]}" "$@"
