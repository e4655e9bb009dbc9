//! The labelled corpus: every command is classified as labelled, and no
//! command that writes is ever called read-only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)] // tests may panic and report

use toolgate_shell::{analyze, analyze_tree_sitter_only, Script};

use crate::common;

/// What a corpus line expects.
enum Expect<'a> {
    ReadOnly,
    Refused { reason: &'a str },
    KnownRefusal,
}

/// Compare one analysis with its expectation; `Some(problem)` on a mismatch.
fn check(input: &str, expected: &Expect<'_>) -> Option<String> {
    let a = analyze(Script::Text(input), &common::options());
    let got = a.refusal.as_ref().map(|r| r.reason.as_str());
    match (expected, got) {
        (Expect::ReadOnly, None) | (Expect::KnownRefusal, Some(_)) => None,
        (Expect::ReadOnly, Some(r)) => Some(format!("read-only command refused: {r}")),
        (Expect::KnownRefusal, None) => Some("now read-only: relabel it `ro`".to_string()),
        (Expect::Refused { .. }, None) => {
            Some("NOT READ-ONLY COMMAND CLASSIFIED READ-ONLY".to_string())
        }
        (Expect::Refused { reason }, Some(r)) if r.contains(reason) => None,
        (Expect::Refused { reason }, Some(r)) => {
            Some(format!("reason {r:?} does not contain {reason:?}"))
        }
    }
}

#[test]
fn corpus() {
    let cases = common::corpus();
    let mut mismatches = Vec::new();
    let mut wrongly_read_only = Vec::new();
    let mut refused_read_only = Vec::new();
    let (mut ro, mut no, mut known) = (0, 0, 0);
    for c in &cases {
        let expected = match c.label.as_str() {
            "ro" => {
                ro += 1;
                Expect::ReadOnly
            }
            "ro-refused" => {
                known += 1;
                Expect::KnownRefusal
            }
            _ => {
                no += 1;
                Expect::Refused { reason: &c.reason }
            }
        };
        if let Some(problem) = check(&c.command, &expected) {
            let line = format!(
                "{}:{} [{}] {:?}: {problem}",
                c.file, c.line, c.source, c.command
            );
            match expected {
                Expect::Refused { .. } if problem.starts_with("NOT READ-ONLY") => {
                    wrongly_read_only.push(line.clone())
                }
                Expect::ReadOnly => refused_read_only.push(line.clone()),
                _ => {}
            }
            mismatches.push(line);
        }
        if matches!(expected, Expect::KnownRefusal) {
            refused_read_only.push(format!("{}:{} {:?} (known)", c.file, c.line, c.command));
        }
    }
    println!(
        "corpus: {} commands ({ro} read-only, {no} not read-only, {known} read-only but knowingly refused)",
        cases.len()
    );
    println!(
        "not-read-only commands classified read-only: {}",
        wrongly_read_only.len()
    );
    println!("read-only commands refused: {}", refused_read_only.len());
    for r in &refused_read_only {
        println!("  {r}");
    }
    assert!(
        wrongly_read_only.is_empty(),
        "SECURITY: commands that write were classified read-only:\n{}",
        wrongly_read_only.join("\n")
    );
    assert!(
        mismatches.is_empty(),
        "{} corpus mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[test]
fn fast_path_agrees_with_tree_sitter() {
    let opts = common::options();
    let mut disagreements = Vec::new();
    let corpus = common::corpus();
    let inputs = corpus
        .iter()
        .map(|c| c.command.as_str())
        .chain(common::bench_commands(&["reads", "changes", "asks"]));
    for input in inputs {
        let fast = analyze(Script::Text(input), &opts);
        let slow = analyze_tree_sitter_only(Script::Text(input), &opts);
        if fast != slow {
            disagreements.push(format!(
                "{input:?}\n  fast: {fast:?}\n  tree-sitter: {slow:?}"
            ));
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

#[test]
fn bench_mix_is_classified_as_expected() {
    let opts = common::options();
    let (reads, changes) = (
        common::bench_commands(&["reads", "asks"]),
        common::bench_commands(&["changes"]),
    );
    assert!(
        reads.len() >= 16 && changes.len() >= 13,
        "{reads:?} {changes:?}"
    );
    for s in reads {
        let a = analyze(Script::Text(s), &opts);
        assert!(a.is_read_only(), "{s}: {:?}", a.refusal);
    }
    for s in changes {
        assert!(!analyze(Script::Text(s), &opts).is_read_only(), "{s}");
    }
}

/// The research sets (commands agents ran while researching; none writes):
/// the shell analysis refuses exactly the ones listed here, each for a
/// reason the docs give. A newly refused line fails, and so does a listed
/// one that passes now (drop it from the list). The policy's own refusals
/// (a path outside the project, a toolchain file on the disk) are measured
/// through the binary by scripts/research-refusals.
#[test]
fn research_sets_refuse_only_the_known() {
    const KNOWN: &[&str] = &[
        // Run code, reach the network or write caches (toolchain.rs).
        "npm ls --depth=0",
        "npm ls --depth=0 2>/dev/null",
        "cargo tree -d",
        "cargo tree",
        "go list ./...",
        "go list -f '{{.ImportPath}}: {{join .Imports \" \"}}' ./...",
        "go doc net/http.Client | head -40",
        "pip list",
        "pip list 2>/dev/null | head -30",
        "pip show requests",
        "python3 -m json.tool package.json | head -30",
        "python3 -m pip freeze | grep -i pytest",
        "python3 -c \"import sys; print(sys.version); print(sys.executable)\"",
        "python3 -B -c \"import tomllib; d=tomllib.load(open('pyproject.toml','rb')); print(d['project'].get('dependencies'))\"",
        "node -p \"require('./package.json').engines\"",
        "python3 -m pip list 2>/dev/null | head -n 40",
        "pip show requests 2>/dev/null",
        "python3 -c \"import tomllib,json; print(json.dumps(tomllib.load(open('pyproject.toml','rb')).get('project',{}).get('dependencies',[]), indent=2))\"",
        "cargo fmt --all -- --check",
        "yq '.jobs | keys' .github/workflows/ci.yml",
        // git's arguments from a substitution may be options (a tag name
        // from `git describe`, unlike a commit id, is not bounded).
        "git log --oneline \"$(git describe --tags --abbrev=0)\"..HEAD",
        // tree-sitter-bash drops part of this script.
        "git ls-files '*.go' | while read -r f; do echo \"$f $(grep -c 'func ' \"$f\")\"; done",
    ];
    let opts = common::options();
    let mut problems = Vec::new();
    for set in [
        "research-dev.txt",
        "research-heldout.txt",
        "research-blind.txt",
    ] {
        let path = format!("{}/tests/corpus/{set}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        {
            let a = analyze(Script::Text(line), &opts);
            let known = KNOWN.contains(&line);
            match (&a.refusal, known) {
                (Some(r), false) => {
                    problems.push(format!("{set}: {line:?}: refused: {}", r.reason))
                }
                (None, true) => {
                    problems.push(format!("{set}: {line:?}: passes now, drop it from KNOWN"))
                }
                _ => {}
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
