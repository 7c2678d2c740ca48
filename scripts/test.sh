#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit and integration tests against a throwaway
# PostgreSQL cluster and the ES emulator. Installs what is missing (PostgreSQL and Chromium
# from Debian, the Python elasticsearch client from PyPI), and always stops what it started.
#
#   scripts/test.sh                 # everything
#   scripts/test.sh projection::    # extra arguments go to `cargo test` as a filter
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg-cluster.sh

if [ -z "${STORAGE_TEST_DATABASE_URL:-}" ]; then
  work=$(mktemp -d /tmp/scanstore-test.XXXXXX)
  chmod 755 "$work"
  port=$(free_port)
  trap 'pg_stop "$work/pg"; rm -rf "$work"' EXIT
  pg_start "$work/pg" "$port"
  export STORAGE_TEST_DATABASE_URL="postgresql://postgres@127.0.0.1:$port/postgres"
  echo "test PostgreSQL on 127.0.0.1:$port"
  # A second cluster without pg_stat_statements preloaded, for the slow-SQL "not loaded" case.
  bare_port=$(free_port)
  trap 'pg_stop "$work/pg"; pg_stop "$work/bare"; rm -rf "$work"' EXIT
  PG_PRELOAD="" pg_start "$work/bare" "$bare_port"
  export STORAGE_TEST_NO_PRELOAD_URL="postgresql://postgres@127.0.0.1:$bare_port/postgres"
fi

# The peer client of the emulator's conformance check.
if ! python3 -c 'import elasticsearch' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check 'elasticsearch>=8,<9'
fi

# Headless Chromium for the console's browser test (read::browser), from Debian.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "Installing Chromium from Debian's packages..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "chromium not installed (Debian package 'chromium'); the browser test will be skipped." >&2
  fi
fi

# nginx for the reverse-proxy test (ops::proxy), from Debian; the test starts its own.
if [ ! -x /usr/sbin/nginx ] && [ "$(id -u)" -eq 0 ]; then
  echo "Installing nginx from Debian's packages..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null
  # A package's service, if its start was not blocked, is not ours to keep.
  systemctl stop nginx 2>/dev/null || true
  pkill -x nginx 2>/dev/null || true
fi

# nmap for the scanner agent's test (client::agent), which scans only loopback.
if ! command -v nmap >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "Installing nmap from Debian's packages..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nmap >/dev/null
  else
    echo "nmap not installed (Debian package 'nmap'); the agent test will fail." >&2
  fi
fi

cargo fmt --check
cargo clippy --all-targets -- -D warnings
if [ $# -eq 0 ]; then
  # Schema-level tests in SQL (install, upgrade, triggers, constraints, GiST plans).
  db_port=$(python3 -c 'import sys, urllib.parse as u; print(u.urlparse(sys.argv[1]).port or 5432)' "$STORAGE_TEST_DATABASE_URL")
  db_host=$(python3 -c 'import sys, urllib.parse as u; print(u.urlparse(sys.argv[1]).hostname or "127.0.0.1")' "$STORAGE_TEST_DATABASE_URL")
  db_user=$(python3 -c 'import sys, urllib.parse as u; print(u.urlparse(sys.argv[1]).username or "postgres")' "$STORAGE_TEST_DATABASE_URL")
  PGHOST=$db_host PGPORT=$db_port PGUSER=$db_user bash tests/sql/run.sh
  # The compatibility run's table parser and feature map (scripts/test-real-es.sh; seconds).
  bash scripts/test-real-es.sh --self-check
  # The README's run command, end to end: start everything, upload the demo, see it published.
  # Its own data directory and ports, so it runs beside a developer's scripts/dev.sh.
  SCANSTORE_DEV_DIR=target/dev-smoke DEV_EXIT=1 bash scripts/dev.sh >target/dev-smoke.log 2>&1 ||
    { cat target/dev-smoke.log; exit 1; }
  echo "scripts/dev.sh: demo uploaded and published"
  SCANSTORE_DEV_DIR=target/dev-smoke-secure SCANSTORE_DEV_SECURE=1 DEV_EXIT=1 bash scripts/dev.sh \
    >target/dev-smoke-secure.log 2>&1 || { cat target/dev-smoke-secure.log; exit 1; }
  echo "SCANSTORE_DEV_SECURE=1 scripts/dev.sh: demo uploaded and published over TLS"
  # Security on: every emulator over HTTPS requiring an API key, every scanstore serving
  # HTTPS; a representative set (uploads, publication, rebuild, reads, both TLS suites).
  STORAGE_TEST_ES_SECURE=1 STORAGE_TEST_SERVER_TLS=1 cargo test --test integration -- \
    --include-ignored upload:: projection::publish ops::rebuild read::api foundation::es_auth \
    reliability::tls emulator::python_peer
  # Several shards per index: publication, reads, rebuilds and finals once more with every
  # index family scanstore creates at three primary shards (about a minute).
  STORAGE_TEST_ES_SHARDS=3 cargo test --test integration -- --include-ignored \
    projection::publish read::api read::paging read::text_search ops::rebuild \
    upload::final_scope upload::abandon upload::dns_answers
  # Schemathesis (PyPI) against a running server, driven by src/http/openapi.json: bounded
  # examples and time; fails on server errors (5xx) and on answers that break the schema.
  if ! python3 -c 'import schemathesis' 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check 'schemathesis>=4,<5'
  fi
  bash tests/python/schemathesis.sh
fi
# Last, so that its summary closes the run.
cargo test -- --include-ignored "$@"
