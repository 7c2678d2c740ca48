//! Runs the vendored OpenSearch YAML REST tests (`tests/fixtures/es-conformance`, Apache-2.0)
//! and prints one line per test: `PASS`, `FAIL`, `GATED` (by the file's own `skip`) or, on
//! the emulator, `SKIP` (listed in [`SKIPS`]). On the emulator the run fails when any test
//! that is not in [`SKIPS`] fails, when a skip-listed test passes (the list must stay
//! honest), or when a skip entry names no existing test. On a real cluster
//! (`STORAGE_TEST_ES_URL`) every test the cluster's version does not gate must pass, the
//! list does not apply, and each test runs under its own index prefix, deleted after it.

use std::path::{Path, PathBuf};

use super::yaml_namespace::Namespace;
use super::yaml_runner::{
    parse_file, run_section, Outcome, Run, Section, YamlFile, RUNNER_VERSION,
};
use crate::support::emulator::{emulator_for_faults, unique, Es};

/// (file suffix, test name, reason). Keep short; every entry needs a reason a reviewer accepts.
pub const SKIPS: &[(&str, &str, &str)] = &[
    ("painless/15_update.yml", "Update Script",
     "inline Painless (`ctx._source.foo = params.bar`): the emulator runs only scripts with a registered native twin (tests/es-emulator/src/painless)"),
    ("painless/15_update.yml", "Update Script with script error",
     "expects a Painless runtime error (self-referencing map); there is no Painless interpreter in the emulator"),
    ("painless/15_update.yml", "Update script supports sha1() and sha256() method for strings",
     "inline Painless string methods; no Painless interpreter in the emulator"),
    ("search.aggregation/170_cardinality_metric.yml", "profiler int",
     "search profiling (`profile: true`) is not emulated"),
    ("search.aggregation/170_cardinality_metric.yml", "profiler double",
     "search profiling (`profile: true`) is not emulated"),
    ("search.aggregation/230_composite.yml", "Composite aggregation with nested parent",
     "`nested` aggregation: nested documents are not emulated (scanstore does not use them)"),
    ("search.aggregation/230_composite.yml", "Composite aggregation with filtered nested parent",
     "`nested` aggregation: nested documents are not emulated (scanstore does not use them)"),
    ("search.aggregation/230_composite.yml", "Composite aggregation with filtered reverse nested parent",
     "`nested`/`reverse_nested` aggregations: nested documents are not emulated (scanstore does not use them)"),
];

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            yaml_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "yml") {
            out.push(p);
        }
    }
}

/// Every section of every vendored file, run by `run` in file order: (file, section, outcome).
fn run_all(run: impl Fn(&YamlFile, &Section) -> Outcome) -> Vec<(String, String, Outcome)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/es-conformance");
    let mut files = Vec::new();
    yaml_files(&root, &mut files);
    files.sort();
    assert!(
        files.len() >= 30,
        "vendored YAML tests missing under {}",
        root.display()
    );
    let mut out = Vec::new();
    for path in &files {
        let rel = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        let text = std::fs::read_to_string(path).expect("read yaml");
        let file = parse_file(&text).unwrap_or_else(|e| panic!("{rel}: {e}"));
        for section in &file.tests {
            out.push((rel.clone(), section.name.clone(), run(&file, section)));
        }
    }
    out
}

#[test]
fn yaml_rest_tests_pass_or_are_skip_listed() {
    let Some(emu) = emulator_for_faults("yaml_rest_tests_pass_or_are_skip_listed") else {
        return;
    };
    let es = emu.es();
    let run = Run {
        version: RUNNER_VERSION,
        ns: None,
    };
    let outcomes = run_all(|file, section| run_section(&es, &run, file, section, &|| emu.reset()));
    let mut problems = Vec::new();
    let mut used = vec![false; SKIPS.len()];
    let (mut passed, mut gated, mut listed) = (0, 0, 0);
    for (rel, name, outcome) in outcomes {
        let skip = SKIPS
            .iter()
            .position(|(f, t, _)| rel.ends_with(f) && *t == name);
        match (outcome, skip) {
            (Outcome::Pass, None) => {
                passed += 1;
                println!("PASS  {rel} :: {name}");
            }
            (Outcome::Gated(why), _) => {
                gated += 1;
                println!("GATED {rel} :: {name} ({why})");
            }
            (Outcome::Fail(msg), None) => {
                println!("FAIL  {rel} :: {name}\n      {msg}");
                problems.push(format!("{rel} :: {name}: {msg}"));
            }
            (Outcome::Fail(_), Some(i)) => {
                used[i] = true;
                listed += 1;
                println!("SKIP  {rel} :: {name} ({})", SKIPS[i].2);
            }
            (Outcome::Pass, Some(i)) => {
                used[i] = true;
                problems.push(format!("{rel} :: {name} passes now: remove it from SKIPS"));
            }
        }
    }
    for (i, u) in used.iter().enumerate() {
        if !u {
            problems.push(format!("SKIPS entry {:?} matches no test", SKIPS[i]));
        }
    }
    println!("conformance: {passed} passed, {gated} gated by their files, {listed} skip-listed, {} problems", problems.len());
    assert!(
        problems.is_empty(),
        "conformance problems:\n{}",
        problems.join("\n")
    );
}

/// The version a real cluster's gates are read against: an OpenSearch cluster's own;
/// Elasticsearch's numbers mean nothing in OpenSearch's ranges, so there (as on the
/// emulator, which speaks Elasticsearch 8's API) the runner's.
fn gate_version(info: &serde_json::Value) -> (u64, u64, u64) {
    let number = info["version"]["number"].as_str().unwrap_or("");
    if info["version"]["distribution"] != "opensearch" {
        return RUNNER_VERSION;
    }
    let mut parts = number
        .split(['.', '-'])
        .map(|p| p.parse::<u64>().unwrap_or(0));
    let mut next = || parts.next().unwrap_or(0);
    (next(), next(), next())
}

#[test]
fn yaml_rest_tests_all_pass_on_a_real_cluster() {
    let Some(url) = std::env::var("STORAGE_TEST_ES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        println!(
            "SKIP yaml_rest_tests_all_pass_on_a_real_cluster: needs STORAGE_TEST_ES_URL \
             (on the emulator yaml_rest_tests_pass_or_are_skip_listed runs them)"
        );
        return;
    };
    let es = Es::new(&url);
    let (status, info) = es.get("/");
    assert_eq!(status, 200, "GET / of the cluster: {info}");
    let version = gate_version(&info);
    println!(
        "cluster: {} {}; gates read as OpenSearch {}.{}.{}",
        info["version"]["distribution"]
            .as_str()
            .unwrap_or("elasticsearch"),
        info["version"]["number"].as_str().unwrap_or("?"),
        version.0,
        version.1,
        version.2
    );
    let outcomes = run_all(|file, section| {
        // Each test under its own prefix: a failed one leaves nothing for the next.
        let ns = Namespace::new(format!("{}-", unique("yaml")));
        let run = Run {
            version,
            ns: Some(&ns),
        };
        run_section(&es, &run, file, section, &|| ns.clean(&es))
    });
    let mut failed = Vec::new();
    let (mut passed, mut gated) = (0, 0);
    for (rel, name, outcome) in outcomes {
        match outcome {
            Outcome::Pass => {
                passed += 1;
                println!("PASS  {rel} :: {name}");
            }
            Outcome::Gated(why) => {
                gated += 1;
                println!("GATED {rel} :: {name} ({why})");
            }
            Outcome::Fail(msg) => {
                let listed = SKIPS
                    .iter()
                    .find(|(f, t, _)| rel.ends_with(f) && *t == name)
                    .map(|s| format!(" [skip-listed on the emulator: {}]", s.2))
                    .unwrap_or_default();
                println!("FAIL  {rel} :: {name}{listed}\n      {msg}");
                failed.push(format!("{rel} :: {name}: {msg}"));
            }
        }
    }
    println!(
        "conformance on the cluster: {passed} passed, {gated} gated by their files, {} failed",
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "YAML tests failing on the cluster:\n{}",
        failed.join("\n")
    );
}
