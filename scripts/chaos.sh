#!/usr/bin/env bash
# The longer reliability scenarios and their table: scenario / faults injected /
# requests / data checked / lost / duplicated. Runs the crash, fault, load, slow-client and
# hostile-input tests with RELIABILITY_SCALE (default 5) times more data than CI does, then
# the request-parsing fuzz driver for FUZZ_SECONDS (default 60).
#
#   scripts/chaos.sh                 # everything
#   RELIABILITY_SCALE=10 FUZZ_SECONDS=300 scripts/chaos.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg-cluster.sh
export RELIABILITY_SCALE=${RELIABILITY_SCALE:-5}
fuzz_seconds=${FUZZ_SECONDS:-60}

if [ -z "${STORAGE_TEST_DATABASE_URL:-}" ]; then
  work=$(mktemp -d /tmp/scanstore-chaos.XXXXXX)
  chmod 755 "$work"
  port=$(free_port)
  trap 'pg_stop "$work/pg"; rm -rf "$work"' EXIT
  pg_start "$work/pg" "$port"
  export STORAGE_TEST_DATABASE_URL="postgresql://postgres@127.0.0.1:$port/postgres"
fi

out=$(mktemp /tmp/scanstore-chaos-out.XXXXXX)
status=0
cargo test --test integration reliability:: -- --include-ignored --nocapture --test-threads 2 \
  >"$out" 2>&1 || status=$?
grep -E '^test .*(ok|FAILED)$' "$out" || true

crash_ok=$(grep -cE '^test reliability::crash::.* ok$' "$out" || true)
crash_all=$(grep -cE '^test reliability::crash::' "$out" || true)
hostile_ok=$(grep -cE '^test reliability::hostile::.* ok$' "$out" || true)
hostile_cases=$(grep -c . tests/fixtures/hostile/corpus.jsonl)
lifecycle_ok=$(grep -cE '^test reliability::lifecycle::.* ok$' "$out" || true)
lifecycle_all=$(grep -cE '^test reliability::lifecycle::' "$out" || true)
# A crash test passes only when every row and document equals the fault-free run's (or,
# for the lifecycle points, the expected end state): then nothing was lost or doubled.
# A failed one is reported as such, not as a count.
outcome() { if [ "$1" = "$2" ] && [ "$2" -gt 0 ]; then echo 0; else echo FAILED; fi; }

# Fuzzing: cargo-fuzz (libFuzzer, nightly) when installed, else the stable driver.
if cargo +nightly fuzz --version >/dev/null 2>&1; then
  fuzz_how="cargo fuzz (libFuzzer)"
  cargo +nightly fuzz run --fuzz-dir tests/fuzz --features libfuzzer parse -- \
    -max_total_time="$fuzz_seconds" >"$out.fuzz" 2>&1 || status=1
  fuzz_inputs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$out.fuzz" | tail -n 1)
else
  fuzz_how="stable mutation driver (cargo-fuzz not installed)"
  (cd tests/fuzz && cargo run --release --bin drive -- "$fuzz_seconds") >"$out.fuzz" 2>&1 || status=1
  fuzz_inputs=$(sed -n 's/^inputs //p' "$out.fuzz" || true)
fi

printf '\n%-52s | %-58s | %8s | %12s | %4s | %4s\n' scenario "faults injected" requests "data checked" lost dup
printf -- '-%.0s' {1..150}; echo
printf '%-52s | %-58s | %8s | %12s | %4s | %4s\n' \
  "kill -9 at 12 points (6 upload, 3 publisher, close, deletion, age limit)" "$crash_all kills + restarts ($crash_ok equal to fault-free)" \
  "-" "all rows+docs" "$(outcome "$crash_ok" "$crash_all")" "$(outcome "$crash_ok" "$crash_all")"
printf '%-52s | %-58s | %8s | %12s | %4s | %4s\n' \
  "kill -9 at heartbeat→lease expiry, abandon→repair" "$lifecycle_all kills + restarts ($lifecycle_ok as expected)" \
  "-" "rows+docs" "$(outcome "$lifecycle_ok" "$lifecycle_all")" "$(outcome "$lifecycle_ok" "$lifecycle_all")"
grep -h '^CHAOS|' "$out" | while IFS='|' read -r _ scenario faults requests checked lost dup _; do
  printf '%-52s | %-58s | %8s | %12s | %4s | %4s\n' "$scenario" "${faults:0:58}" "$requests" "$checked obs" "$lost" "$dup"
done
printf '%-52s | %-58s | %8s | %12s | %4s | %4s\n' \
  "hostile-input corpus" "$hostile_cases malformed/malicious requests" "$hostile_cases" \
  "$([ "$hostile_ok" = 1 ] && echo "0 writes" || echo FAILED)" - -
printf '%-52s | %-58s | %8s | %12s | %4s | %4s\n' \
  "fuzz: upload::batch::parse ($fuzz_seconds s)" "$fuzz_how" "${fuzz_inputs:-?}" "no panic" - -
grep -h 'VmRSS' "$out" || true
if [ "$status" -ne 0 ]; then
  echo "chaos: FAILED (full output: $out)" >&2
  exit 1
fi
rm -f "$out" "$out.fuzz"
