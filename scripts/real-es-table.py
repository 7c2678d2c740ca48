#!/usr/bin/env python3
"""The compatibility table of scripts/test-real-es.sh, and its feature map.

FEATURES below is the one place that says which integration tests prove which feature: each
row's filters are substrings of test names, as `cargo test` matches them. The script runs
`cargo test --test integration -- --include-ignored --show-output` with these filters twice
(against the cluster, then the emulator) and hands both outputs to this program, which
prints one row per feature and per directory of the vendored YAML tests:

  pass (n)              every matched test passed (n of them)
  fail (k of n)         k of the n that ran failed
  skipped (n)           the test said it cannot prove anything there (a line `SKIP <its
                        name>` or "needs the emulator"); a test that skipped only a part
                        still counts as passed, and the row says "part skipped"
  not run               no result for the row's tests (a filter narrowed the run, or the
                        run stopped before them)

A "YAML <directory>" row counts the YAML runner's own lines: `skip-listed` are the tests
the emulator is known to fail (SKIPS in tests/integration/emulator/conformance.rs; on a
cluster the list does not apply), `version-gated` those a file's `skip` excludes.

  real-es-table.py --filters                      the cargo filters of every row
  real-es-table.py --check-map LIST               every filter matches a test of LIST
                                                  (the output of `cargo test -- --list`)
  real-es-table.py CLUSTER_LOG EMULATOR_LOG [--cluster-name NAME]   the table
  real-es-table.py --self-check                   the parser and table on made-up logs
"""

import re
import sys

# (feature, filters). Keep each row's tests about that feature; fault tests go last, where a
# real cluster shows "skipped".
FEATURES = [
    ("bulk writes: items, versions, upserts", [
        "emulator::bulk::items_come_back", "emulator::bulk::body_must_end",
        "emulator::bulk::create_conflict", "emulator::bulk::update_doc"]),
    ("index creation and strict mappings", [
        "emulator::indices::root_reports", "emulator::indices::create_index",
        "emulator::indices::missing_index", "emulator::bulk::mapping_rejections",
        "ops::upgrade::indices_of_an_earlier_release"]),
    ("index templates (monthly fact indices)", [
        "emulator::indices::template_applies"]),
    ("shards, replicas and live index settings", ["ops::shards::"]),
    ("aliases and the rebuild switch", [
        "emulator::indices::alias", "ops::rebuild::"]),
    ("stored script compiled with its context", [
        "emulator::bulk::asset_merge_stored_script", "emulator::bulk::unknown_or_missing_scripts",
        "projection::merge::"]),
    ("refresh and near-real-time visibility", ["emulator::visibility::"]),
    ("search, sort and paging", [
        "emulator::search::queries", "emulator::search::search_after",
        "emulator::search::sorting", "emulator::search::total_hits"]),
    ("aggregations", ["emulator::search::aggregations"]),
    ("text analysis and _analyze", ["emulator::analysis::", "read::text_search::"]),
    ("strictness: unknown parameters, destructive deletes, routing", ["emulator::strict::"]),
    ("TLS and API-key authentication", ["foundation::es_auth::", "reliability::tls::"]),
    ("Python elasticsearch client", ["emulator::python_peer::"]),
    ("uploads through scanstore and its client", ["upload::", "client::"]),
    ("publication through scanstore", [
        "projection::publish::", "projection::claims::", "targets::"]),
    ("reads through scanstore", ["read::"]),
    ("operations: logs, proxy, front door, restarts, hostile input", [
        "observability::", "ops::proxy::", "reliability::front_door::",
        "reliability::lifecycle::", "reliability::hostile::", "reliability::security::"]),
    ("short benchmark (scanstore-bench --quick)", ["bench::"]),
    ("conformance YAML runner", ["emulator::conformance::"]),
    ("fault injection, crashes and load (faults: emulator only)", [
        "emulator::faults::", "emulator::http_limits::", "projection::faults::",
        "reliability::crash::", "reliability::load::"]),
]

RESULT = re.compile(r"^test (\S+) \.\.\. (ok|FAILED|ignored)\s*$")
BLOCK = re.compile(r"^---- (\S+) stdout ----$")
YAML = re.compile(r"^(PASS|FAIL|SKIP|GATED) +(\S+\.yml) :: ")


def parse(text):
    """{test: status} with status ok / FAILED / ignored, and {test: [output lines]}."""
    status, output, current = {}, {}, None
    for line in text.splitlines():
        m = RESULT.match(line)
        if m:
            status[m.group(1)] = m.group(2)
            continue
        m = BLOCK.match(line)
        if m:
            current = m.group(1)
            output.setdefault(current, [])
            continue
        if line in ("successes:", "failures:") or line.startswith("test result:"):
            current = None
            continue
        if current is not None:
            output[current].append(line)
    return status, output


def outcome(name, status, output):
    """pass / fail / skipped / partial (passed, a part skipped) / None (no result)."""
    s = status.get(name)
    if s is None or s == "ignored":
        return None
    if s == "FAILED":
        return "fail"
    short = name.rsplit("::", 1)[-1]
    lines = [l for l in output.get(name, []) if not YAML.match(l)]
    skips = [l for l in lines if l.startswith(("SKIP ", "SKIPPED "))]
    whole = [l for l in skips if l.split(" ", 1)[1].startswith(short) or "needs the emulator" in l]
    if whole:
        return "skipped"
    return "partial" if skips else "pass"


def cell(outcomes):
    ran = [o for o in outcomes if o is not None]
    if not ran:
        return "not run"
    n = {k: ran.count(k) for k in ("pass", "fail", "skipped", "partial")}
    done = n["pass"] + n["fail"] + n["partial"]
    if done == 0:
        text = f"skipped ({n['skipped']})"
    elif n["fail"]:
        text = f"fail ({n['fail']} of {done})"
    else:
        text = f"pass ({done})"
    if done and n["skipped"]:
        text += f", skipped ({n['skipped']})"
    if n["partial"]:
        text += f", part skipped ({n['partial']})"
    if len(ran) < len(outcomes):
        text += f", not run ({len(outcomes) - len(ran)})"
    return text


def yaml_cells(output):
    """{directory: cell} from the YAML runner's per-test lines."""
    groups = {}
    for lines in output.values():
        for line in lines:
            m = YAML.match(line)
            if not m:
                continue
            directory = m.group(2).split("/")[-2]
            groups.setdefault(directory, []).append(m.group(1))
    cells = {}
    for directory, kinds in groups.items():
        n = {k: kinds.count(k) for k in ("PASS", "FAIL", "SKIP", "GATED")}
        ran = n["PASS"] + n["FAIL"]
        parts = [f"fail ({n['FAIL']} of {ran})" if n["FAIL"] else f"pass ({ran})"] if ran else []
        if n["SKIP"]:
            parts.append(f"skip-listed ({n['SKIP']})")
        if n["GATED"]:
            parts.append(f"version-gated ({n['GATED']})")
        cells[directory] = ", ".join(parts)
    return cells


def matching(filters, names):
    return sorted(t for t in names if any(f in t for f in filters))


def table(cluster_text, emulator_text, cluster_name="cluster"):
    """The table's lines, and whether anything failed on the cluster."""
    runs = [parse(cluster_text), parse(emulator_text)]
    names = set(runs[0][0]) | set(runs[1][0])
    lines = [f"| feature | emulator | {cluster_name} |", "|---|---|---|"]
    failed = False
    for feature, filters in FEATURES:
        tests = matching(filters, names)
        cells = []
        for status, output in (runs[1], runs[0]):
            cells.append(cell([outcome(t, status, output) for t in tests]) if tests else "not run")
        failed |= cells[1].startswith("fail")
        lines.append(f"| {feature} | {cells[0]} | {cells[1]} |")
    yaml = [yaml_cells(runs[1][1]), yaml_cells(runs[0][1])]
    for directory in sorted(set(yaml[0]) | set(yaml[1])):
        cells = [y.get(directory, "not run") for y in yaml]
        failed |= cells[1].startswith("fail")
        lines.append(f"| YAML {directory} | {cells[0]} | {cells[1]} |")
    for label, (status, output) in (("emulator", runs[1]), (cluster_name, runs[0])):
        for lines_of in output.values():
            for line in lines_of:
                if line.startswith("BENCH "):
                    lines.append(f"\nbenchmark on the {label} (debug build): {line[6:]}")
    return lines, failed


def failures(text):
    """Names of the tests that failed, and the YAML tests that failed, in a run."""
    status, output = parse(text)
    out = [t for t, s in sorted(status.items()) if s == "FAILED"]
    for lines in output.values():
        out += [l[6:] for l in lines if l.startswith("FAIL  ")]
    return out


def self_check():
    """The parser and the table on made-up logs: every kind of cell comes out right."""
    emulator = """
test emulator::bulk::items_come_back_in_order ... ok
test emulator::faults::refresh_can_fail ... ok
test emulator::conformance::yaml_rest_tests_pass_or_are_skip_listed ... ok
test emulator::conformance::yaml_rest_tests_all_pass_on_a_real_cluster ... ok
test emulator::indices::missing_index_is_index_not_found ... ok
test bench::quick_mode_writes_a_sane_report ... ok

successes:

---- emulator::conformance::yaml_rest_tests_pass_or_are_skip_listed stdout ----
PASS  rest-api-spec/test/bulk/10_basic.yml :: Array of objects
SKIP  modules/painless/15_update.yml :: Update Script (no interpreter)

---- emulator::conformance::yaml_rest_tests_all_pass_on_a_real_cluster stdout ----
SKIP yaml_rest_tests_all_pass_on_a_real_cluster: needs STORAGE_TEST_ES_URL
---- bench::quick_mode_writes_a_sane_report stdout ----
BENCH upload 10 endpoints/s

successes:
    emulator::bulk::items_come_back_in_order
test result: ok. 6 passed; 0 failed
"""
    cluster = """
test emulator::bulk::items_come_back_in_order ... FAILED
test emulator::faults::refresh_can_fail ... ok
test emulator::conformance::yaml_rest_tests_pass_or_are_skip_listed ... ok
test emulator::conformance::yaml_rest_tests_all_pass_on_a_real_cluster ... FAILED
test emulator::indices::missing_index_is_index_not_found ... ok

successes:

---- emulator::faults::refresh_can_fail stdout ----
SKIP refresh_can_fail: needs the emulator; STORAGE_TEST_ES_URL points at a real cluster
---- emulator::indices::missing_index_is_index_not_found stdout ----
SKIP wildcard deletes: the answer depends on the cluster's setting
---- emulator::conformance::yaml_rest_tests_pass_or_are_skip_listed stdout ----
SKIP yaml_rest_tests_pass_or_are_skip_listed: needs the emulator; STORAGE_TEST_ES_URL points at a real cluster

failures:

---- emulator::bulk::items_come_back_in_order stdout ----
thread 'x' panicked
---- emulator::conformance::yaml_rest_tests_all_pass_on_a_real_cluster stdout ----
PASS  rest-api-spec/test/bulk/10_basic.yml :: Array of objects
FAIL  modules/painless/15_update.yml :: Update Script
      boom

failures:
    emulator::bulk::items_come_back_in_order
test result: FAILED. 3 passed; 2 failed
"""
    lines, failed = table(cluster, emulator, "ES 8")
    rows = {l.split(" | ")[0][2:]: l.split(" | ")[1:] for l in lines if l.startswith("| ")}
    expect = {
        "bulk writes: items, versions, upserts": ["pass (1)", "fail (1 of 1) |"],
        "index creation and strict mappings": ["pass (1)", "pass (1), part skipped (1) |"],
        "fault injection, crashes and load (faults: emulator only)": ["pass (1)", "skipped (1) |"],
        "conformance YAML runner": ["pass (1), skipped (1)", "fail (1 of 1), skipped (1) |"],
        "short benchmark (scanstore-bench --quick)": ["pass (1)", "not run |"],
        "YAML bulk": ["pass (1)", "pass (1) |"],
        "YAML painless": ["skip-listed (1)", "fail (1 of 1) |"],
        "aggregations": ["not run", "not run |"],
    }
    problems = [f"{k}: {rows.get(k)} != {v}" for k, v in expect.items() if rows.get(k) != v]
    if not failed:
        problems.append("a failure on the cluster was not reported")
    if not any("benchmark on the emulator (debug build): upload 10" in l for l in lines):
        problems.append("the benchmark figures are missing")
    if failures(cluster) != ["emulator::bulk::items_come_back_in_order",
                             "emulator::conformance::yaml_rest_tests_all_pass_on_a_real_cluster",
                             "modules/painless/15_update.yml :: Update Script"]:
        problems.append(f"failures: {failures(cluster)}")
    for p in problems:
        print("self-check:", p, file=sys.stderr)
    print("self-check:", "ok" if not problems else f"{len(problems)} problems")
    return 1 if problems else 0


def main(argv):
    if argv[:1] == ["--filters"]:
        print("\n".join(f for _, filters in FEATURES for f in filters))
        return 0
    if argv[:1] == ["--self-check"]:
        return self_check()
    if argv[:1] == ["--check-map"] and len(argv) == 2:
        names = [l.split(": test")[0] for l in open(argv[1]) if l.endswith(": test\n")]
        unmatched = [f for _, fs in FEATURES for f in fs if not matching([f], names)]
        for f in unmatched:
            print(f"feature map: filter {f!r} matches no test", file=sys.stderr)
        print(f"feature map: {len(names)} tests listed, {len(unmatched)} filters match none")
        return 1 if unmatched else 0
    if len(argv) >= 2 and not argv[0].startswith("-"):
        name = argv[3] if argv[2:3] == ["--cluster-name"] and len(argv) > 3 else "cluster"
        cluster, emulator = (open(p, errors="replace").read() for p in argv[:2])
        lines, failed = table(cluster, emulator, name)
        print("\n".join(lines))
        for label, text in (("emulator", emulator), (name, cluster)):
            for f in failures(text):
                print(f"failed on the {label}: {f}")
        return 1 if failed else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
