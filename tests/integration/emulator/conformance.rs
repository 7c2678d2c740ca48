//! Runs the vendored OpenSearch YAML REST tests (`tests/fixtures/es-conformance`, Apache-2.0)
//! against the emulator and prints pass/fail per test. The test fails when any test that is
//! not in [`SKIPS`] fails, when a skip-listed test passes (the list must stay honest), or
//! when a skip entry names no existing test.

use std::path::{Path, PathBuf};

use super::yaml_runner::{parse_file, run_section, Outcome};
use crate::support::emulator::emulator_for_faults;

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

#[test]
fn yaml_rest_tests_pass_or_are_skip_listed() {
    let Some(emu) = emulator_for_faults("yaml_rest_tests_pass_or_are_skip_listed") else {
        return;
    };
    let es = emu.es();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/es-conformance");
    let mut files = Vec::new();
    yaml_files(&root, &mut files);
    files.sort();
    assert!(
        files.len() >= 30,
        "vendored YAML tests missing under {}",
        root.display()
    );
    let mut problems = Vec::new();
    let mut used = vec![false; SKIPS.len()];
    let (mut passed, mut gated, mut listed) = (0, 0, 0);
    for path in &files {
        let rel = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        let text = std::fs::read_to_string(path).expect("read yaml");
        let file = parse_file(&text).unwrap_or_else(|e| panic!("{rel}: {e}"));
        for section in &file.tests {
            let skip = SKIPS
                .iter()
                .position(|(f, t, _)| rel.ends_with(f) && *t == section.name);
            let outcome = run_section(&es, &file, section, &|| emu.reset());
            match (outcome, skip) {
                (Outcome::Pass, None) => {
                    passed += 1;
                    println!("PASS  {rel} :: {}", section.name);
                }
                (Outcome::Gated(why), _) => {
                    gated += 1;
                    println!("GATED {rel} :: {} ({why})", section.name);
                }
                (Outcome::Fail(msg), None) => {
                    println!("FAIL  {rel} :: {}\n      {msg}", section.name);
                    problems.push(format!("{rel} :: {}: {msg}", section.name));
                }
                (Outcome::Fail(_), Some(i)) => {
                    used[i] = true;
                    listed += 1;
                    println!("SKIP  {rel} :: {} ({})", section.name, SKIPS[i].2);
                }
                (Outcome::Pass, Some(i)) => {
                    used[i] = true;
                    problems.push(format!(
                        "{rel} :: {} passes now: remove it from SKIPS",
                        section.name
                    ));
                }
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
