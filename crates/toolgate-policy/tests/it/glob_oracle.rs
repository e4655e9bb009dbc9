//! Shell globs judged by what they match on the disk, through
//! `Policy::evaluate` with a fake [`GlobOracle`] (a fixed list of files):
//! real matches are judged as the literal paths they are, a glob that matches
//! nothing as its own text, an unknown expansion by every guarded file the
//! glob could match (as without an oracle).
//! One line per case: (policy, files on the disk, mode, command, expected).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use toolgate_policy::{segment_matches, GlobExpansion, GlobOracle, Mode, Policy};

use crate::common::{self, render, ROOT};

/// A disk holding `files` (relative to the root; their directories exist
/// too). Patterns under `locked/` cannot be read.
#[derive(Debug)]
struct FakeDisk(Vec<String>);

impl GlobOracle for FakeDisk {
    fn expand(&self, pattern: &Path) -> GlobExpansion {
        let pattern = pattern.to_str().unwrap();
        assert!(pattern.starts_with('/'), "{pattern}");
        if pattern.starts_with(&format!("{ROOT}/locked/")) {
            return GlobExpansion::Unknown;
        }
        let wanted: Vec<&str> = pattern.split('/').collect();
        let mut paths: Vec<String> = Vec::new();
        for file in &self.0 {
            let full = format!("{ROOT}/{file}");
            // The file and each directory above it.
            let segments: Vec<&str> = full.split('/').collect();
            for n in 1..=segments.len() {
                let path = &segments[..n];
                if path.len() == wanted.len()
                    && path
                        .iter()
                        .zip(&wanted)
                        .all(|(name, seg)| segment_matches(seg, name).unwrap())
                {
                    paths.push(path.join("/"));
                }
            }
        }
        paths.sort();
        paths.dedup();
        GlobExpansion::Matches(paths.into_iter().map(PathBuf::from).collect())
    }
}

fn policy(file: Option<Value>, disk: Option<&[&str]>) -> Policy {
    let mut policy = common::policy(file);
    policy.glob_oracle = disk.map(|files| {
        Arc::new(FakeDisk(files.iter().map(|f| f.to_string()).collect())) as Arc<dyn GlobOracle>
    });
    policy
}

#[test]
fn globs_judged_by_their_matches() {
    use Mode::*;
    let plain: &[&str] = &[
        "src/a.rs",
        "src/b.rs",
        ".env",
        "crates/one/Cargo.toml",
        "README.md",
    ];
    let with_env_rs: &[&str] = &["src/a.rs", "src/x.env.rs", ".env"];
    let with_secrets: &[&str] = &["src/a.rs", "secrets/key", "locked/k.rs"];
    let guarded = Some(json!({"permission": {"read": {"secrets/**": "deny"}}}));
    let none = policy(None, None);
    let env_deny = policy(
        Some(json!({"permission": {"read": {"*.env.*": "deny"}}})),
        Some(plain),
    );
    let disk = policy(None, Some(plain));
    let env_rs = policy(None, Some(with_env_rs));
    let empty = policy(None, Some(&[]));
    let secrets_none = policy(guarded.clone(), None);
    let secrets_gone = policy(guarded.clone(), Some(&["src/a.rs"]));
    let secrets = policy(guarded, Some(with_secrets));
    let cases: &[(&Policy, Mode, &str, &str)] = &[
        // Without an oracle: every guarded file the glob could match.
        (&none, ReadOnly, "wc -l src/*.rs", "deny read:*.env.*"),
        (
            &none,
            Plan,
            "cat crates/*/Cargo.toml",
            "ask read [\"crates/*/Cargo.toml\"]",
        ),
        // With one: the real matches, which no rule guards.
        (&disk, ReadOnly, "wc -l src/*.rs", "allow"),
        (&disk, Plan, "wc -l src/*.rs", "allow"),
        (&disk, ReadOnly, "cat crates/*/Cargo.toml", "allow"),
        (&disk, ReadOnly, "head -n 5 src/[ab].rs README.*", "allow"),
        (&disk, ReadOnly, "cat src/{a,b}.r?", "allow"),
        // A glob in a redirection: refused by the shell classifier.
        (&disk, ReadOnly, "cat < src/*.rs", "deny read:*.env.*"),
        (&disk, Ask, "wc -l src/*.rs", "allow"),
        // A real match that a rule guards gets the rule's answer.
        (&disk, ReadOnly, "cat .en?", "deny read:*.env"),
        (&disk, ReadOnly, "head -c 99 .env*", "deny read:*.env"),
        (&disk, Plan, "cat .[e]nv", "ask read [\".env\"]"),
        (&disk, Ask, "cat ?env", "ask read [\".env\"]"),
        // dotglob is assumed possible: `*` reaches `.env`.
        (&disk, ReadOnly, "cat *", "deny read:*.env"),
        (&disk, ReadOnly, "wc -l src/*.rs *", "deny read:*.env"),
        (&env_rs, ReadOnly, "wc -l src/*.rs", "deny read:*.env.*"),
        (&env_rs, ReadOnly, "cat src/x.env.*", "deny read:*.env.*"),
        // Nothing matches: the shell passes the word as written, a file name.
        (&empty, ReadOnly, "cat src/x.env.*", "deny read:*.env.*"),
        (&empty, ReadOnly, "cat .en?", "allow"),
        (&empty, ReadOnly, "wc -l src/*.rs", "allow"),
        (&disk, ReadOnly, "cat src/*.py", "allow"),
        (&disk, ReadOnly, "cat *.env", "deny read:*.env"),
        // Directories read recursively keep the directory logic.
        (
            &secrets_none,
            ReadOnly,
            "grep -rn x s*",
            "deny read:secrets/**",
        ),
        (&secrets_gone, ReadOnly, "grep -rn x s*", "allow"),
        (&secrets, ReadOnly, "grep -rn x s*", "deny read:secrets/**"),
        (
            &secrets,
            ReadOnly,
            "tar cf - se?rets",
            "deny read:secrets/**",
        ),
        (&secrets, ReadOnly, "cat s*/key", "deny read:secrets/**"),
        (&secrets, ReadOnly, "grep -rn x sr?", "allow"),
        // The disk cannot be read: every guarded file the glob could match.
        (&secrets, ReadOnly, "cat locked/*", "deny read:*.env"),
        (&secrets, ReadOnly, "cat locked/*.rs", "deny read:*.env.*"),
        // Outside the project: judged by the glob, one question.
        (
            &disk,
            Ask,
            "cat ../*.txt",
            "ask external_directory [\"/work/*.txt\"]",
        ),
        (
            &disk,
            ReadOnly,
            "cat /etc/*.conf",
            "deny external_directory:*",
        ),
        // Not a read (names only): the disk is not asked.
        (&disk, ReadOnly, "ls .env*", "allow"),
        // A script that can change the disk before the glob is expanded:
        // every guarded file the glob could match, as without an oracle.
        (&env_deny, Auto, "wc -l src/*.rs", "allow"),
        (
            &env_deny,
            Auto,
            "touch src/y.rs; wc -l src/*.rs",
            "deny read:*.env.*",
        ),
        (
            &env_deny,
            Auto,
            "touch src/x.env.rs; wc -l src/*.rs",
            "deny read:*.env.*",
        ),
        (
            &env_deny,
            Auto,
            "cargo build && cat crates/*/Cargo.toml",
            "deny read:*.env.*",
        ),
        (&env_deny, Auto, "cargo build && cat src/a.rs", "allow"),
        // Quoted: a file name, never expanded.
        (&disk, ReadOnly, "cat 'src/*.rs'", "allow"),
    ];
    let mut failures = Vec::new();
    for (policy, mode, command, expected) in cases {
        let got = render(policy, *mode, command);
        if got != *expected {
            failures.push(format!(
                "{mode:?} {command:?}: expected {expected:?}, got {got:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
