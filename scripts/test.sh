#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit and integration tests against a throwaway
# PostgreSQL cluster and the ES emulator. Installs what is missing (PostgreSQL from Debian,
# the Python elasticsearch client from PyPI), and always stops what it started.
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
fi

# The peer client of the emulator's conformance check.
if ! python3 -c 'import elasticsearch' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check 'elasticsearch>=8,<9'
fi

cargo fmt --check
cargo clippy --all-targets -- -D warnings
cargo test -- --include-ignored "$@"
