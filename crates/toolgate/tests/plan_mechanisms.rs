//! Plan mode, round three, through the spawned binary: each mechanism that
//! let a plan-mode agent write or read a guarded file (issue 24) in several
//! spellings, in plan and readonly (never allowed) and in auto with a deny
//! rule on `.env` (the same reads meet the rule). The project is hostile: a
//! committed link to `.env`, a link out of the project, a NUL list naming
//! `.env`, a file named like an option.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

mod support;

use std::path::Path;

use serde_json::Value;

/// `toolgate check --json` in `root`: the decision and its reason.
fn decide(root: &Path, mode: &str, extra: &[&str], tool: &str, subject: &str) -> (String, String) {
    let root_arg = root.to_str().unwrap();
    let mut argv = vec![
        "check",
        "--json",
        "--project-root",
        root_arg,
        "--mode",
        mode,
    ];
    argv.extend_from_slice(extra);
    argv.extend(["--", tool, subject]);
    let (_, out, err) = support::run(root, &argv, "");
    let value: Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|_| panic!("{subject:?}: not JSON: {out:?}; stderr {err}"));
    (
        value["decision"].as_str().unwrap_or_default().to_string(),
        value["reason"].as_str().unwrap_or_default().to_string(),
    )
}

/// `toolgate check --json --input INPUT -- TOOL` in `root`, in plan mode.
fn decide_input(root: &Path, tool: &str, input: &str) -> (String, String) {
    let root_arg = root.to_str().unwrap();
    let argv = [
        "check",
        "--json",
        "--project-root",
        root_arg,
        "--mode",
        "plan",
        "--input",
        input,
        "--",
        tool,
    ];
    let (_, out, err) = support::run(root, &argv, "");
    let value: Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|_| panic!("{input}: not JSON: {out:?}; stderr {err}"));
    (
        value["decision"].as_str().unwrap_or_default().to_string(),
        value["reason"].as_str().unwrap_or_default().to_string(),
    )
}

fn hostile_project(name: &str) -> std::path::PathBuf {
    let dir = support::project_dir(name);
    let root = dir.canonicalize().unwrap();
    std::fs::write(root.join(".env"), "SECRET=hunter2\n").unwrap();
    std::fs::write(root.join("README.md"), "hello\n").unwrap();
    std::fs::write(root.join("list0"), ".env\0").unwrap();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::os::unix::fs::symlink("../.env", root.join("docs/cfg")).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("docs/etc")).unwrap();
    std::os::unix::fs::symlink(".env", root.join("notes.txt")).unwrap();
    // A link that cannot be followed may lead anywhere.
    std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
    root
}

/// Commands that wrote a file or read a guarded one, each allowed in plan
/// mode before: none may be allowed in plan or readonly.
const NEVER_ALLOWED: &[&str] = &[
    // 1. A wrapper's options read past an option's value.
    "time -f %e -o out.txt ls",
    "time -f %e -aoout.txt ls",
    "/usr/bin/time --format X -oout ls",
    "time --format=X --out=o ls",
    "time --form X --outp o ls",
    "env time -f x -o o ls",
    "command time -p -o o ls",
    "timeout 5 time -f x -ao o ls",
    "nice -n 5 time -qo o ls",
    "nice -5 /usr/bin/time -o o ls",
    "bash -c 'time -vo o ls'",
    "stdbuf -oL time -f%e -o o ls",
    // 2. Options that read a file's contents.
    "du --files0-from=.env",
    "du -s --files0-from .env",
    "du --files0=.env",
    "wc --files0-from=list0",
    "wc -l --files0-f list0",
    "sort --files0-from=list0",
    "sort --random-source=.env README.md",
    "grep -f .env README.md",
    "grep --file=.env README.md",
    "diff --from-file=.env README.md",
    "hexdump -f .env README.md",
    // 3. Response files.
    "strings -s @.env README.md",
    "strings @.env",
    "strings -n 4 -s @docs/cfg README.md",
    // 4. Names that arrive on stdin.
    "echo .env | xargs cat",
    "ls -a | xargs grep KEY",
    "ls -a | xargs -0 strings",
    "printf '.env' | xargs du",
    "echo .env | xargs -n1 head -c 100",
    "xargs -a .env echo",
    "xargs --arg-file=list0 -0 cat",
    // 5. Links inside the project.
    "cat docs/cfg",
    "head -c 20 docs/cfg",
    "wc -c docs/cfg",
    "cat notes.txt",
    "cd docs && cat cfg",
    "cat docs/etc/passwd",
    "cat docs/etc/../etc/passwd",
    "grep -h root docs/etc/passwd",
    "sed '1r docs/cfg' README.md",
    "sed 's/x/y/w out' README.md",
    "cat docs/*",
    "cat loop",
    // 6. Case.
    "cat .ENV",
    "cat .Env",
    // 7. Programs that follow the links inside a tree they read.
    "grep -R KEY docs",
    "grep --dereference-recursive KEY docs",
    "grep -R KEY",
    "grep -nR KEY .",
    "rg -L KEY docs",
    "rg --follow KEY",
    "diff docs README.md",
    "diff -r docs docs",
    "tree -l docs",
    "ls -RL docs",
    "du -L docs",
    "grep -R KEY d*",
    "cd docs && grep -R KEY .",
];

#[test]
fn plan_and_readonly_never_allow_the_mechanisms() {
    let root = hostile_project("plan-mechanisms");
    let mut allowed = Vec::new();
    for mode in ["plan", "readonly"] {
        for command in NEVER_ALLOWED {
            let (decision, reason) = decide(&root, mode, &[], "bash", command);
            if decision == "allow" {
                allowed.push(format!("{mode}: {command:?}: {reason}"));
            }
        }
    }
    assert!(allowed.is_empty(), "allowed:\n{}", allowed.join("\n"));
}

/// A deny rule on `.env` meets the same reads in auto mode.
#[test]
fn a_deny_rule_meets_the_same_reads_in_auto() {
    let root = hostile_project("auto-mechanisms");
    let deny = ["--permission", r#"{"read":{"*.env":"deny"}}"#];
    let reads_env = [
        "du --files0-from=.env",
        "grep -f .env README.md",
        "strings -s @.env README.md",
        "strings @.env",
        "cat docs/cfg",
        "cat notes.txt",
        "cd docs && cat cfg",
        "cat .ENV",
        "echo .env | xargs cat",
        "xargs -a .env echo",
        "sed '1r .env' README.md",
        "sed -n '/x/R docs/cfg' README.md",
    ];
    let mut missed = Vec::new();
    for command in reads_env {
        let (decision, reason) = decide(&root, "auto", &deny, "bash", command);
        if decision != "deny" {
            missed.push(format!("{command:?}: {decision}: {reason}"));
        }
    }
    for path in ["docs/cfg", "notes.txt", ".ENV"] {
        let (decision, reason) = decide(&root, "auto", &deny, "read", path);
        if decision != "deny" {
            missed.push(format!("read {path:?}: {decision}: {reason}"));
        }
    }
    assert!(missed.is_empty(), "not denied:\n{}", missed.join("\n"));
}

/// A link-following recursive read meets each guard and boundary its links
/// lead to: a link to `.env` asks under `read: *.env`, one to `/etc` as
/// `external_directory`; the same reads without following stay allowed.
#[test]
fn recursive_reads_that_follow_links() {
    let root = hostile_project("recursive-links");
    std::fs::create_dir_all(root.join("inner/sub")).unwrap();
    std::os::unix::fs::symlink("../../.env", root.join("inner/sub/key")).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/a.rs"), "fn main() {}\n").unwrap();
    std::os::unix::fs::symlink("a.rs", root.join("src/b.rs")).unwrap();
    for (command, expect) in [
        ("grep -R KEY docs", "external_directory"),
        ("rg -L KEY docs", "external_directory"),
        ("tree -l docs", "external_directory"),
        ("grep -R KEY inner", "`read: *.env`"),
        ("rg --follow KEY inner", "`read: *.env`"),
        ("diff -r inner src", "`read: *.env`"),
        ("grep -r KEY docs", ""),
        ("grep -r KEY inner", ""),
        ("rg KEY docs", ""),
        ("rg KEY inner", ""),
        ("tree docs", ""),
        ("ls -R docs", ""),
        // Links that stay among ordinary files change nothing.
        ("grep -R main src", ""),
        ("rg -L main src", ""),
    ] {
        let (decision, reason) = decide(&root, "plan", &[], "bash", command);
        if expect.is_empty() {
            assert_eq!(decision, "allow", "{command}: {reason}");
        } else {
            assert_eq!(decision, "ask", "{command}: {reason}");
            assert!(reason.contains(expect), "{command}: {reason}");
        }
    } // An agent's search tool may follow them too (OpenCode's `grep` has run
      // `rg --follow`).
    for (input, expect) in [
        (r#"{"pattern":"KEY","path":"docs"}"#, "external_directory"),
        (r#"{"pattern":"KEY","path":"inner"}"#, "`read: *.env`"),
        // `.` holds `docs/etc -> /etc`: either question, as the walk of
        // `/etc` goes.
        (r#"{"pattern":"KEY"}"#, "asks before"),
        (r#"{"pattern":"main","path":"src"}"#, ""),
    ] {
        let (decision, reason) = decide_input(&root, "grep", input);
        if expect.is_empty() {
            assert_eq!(decision, "allow", "{input}: {reason}");
        } else {
            assert_eq!(decision, "ask", "{input}: {reason}");
            assert!(reason.contains(expect), "{input}: {reason}");
        }
    }
}

/// Tools that take paths follow links too: a link to `.env` asks, a link out
/// of the project asks as `external_directory`, in plan mode.
#[test]
fn tool_paths_follow_links() {
    let root = hostile_project("tool-links");
    for (tool, path, expect) in [
        ("read", "docs/cfg", "`read: *.env`"),
        ("read", "notes.txt", "`read: *.env`"),
        ("read", "docs/etc/passwd", "/etc/passwd"),
        ("read", ".ENV", "`read: *.env`"),
        ("read", "loop", "external_directory"),
        ("read", "README.md", ""),
    ] {
        let (decision, reason) = decide(&root, "plan", &[], tool, path);
        if expect.is_empty() {
            assert_eq!(decision, "allow", "{tool} {path}: {reason}");
        } else {
            assert_eq!(decision, "ask", "{tool} {path}: {reason}");
            assert!(reason.contains(expect), "{tool} {path}: {reason}");
        }
    }
}

/// Research that stays allowed: the model reads every option, so ordinary
/// spellings must keep flowing.
#[test]
fn everyday_research_still_flows() {
    let root = hostile_project("research-flows");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/a.rs"), "fn main() {}\n").unwrap();
    let mut refused = Vec::new();
    for command in [
        "time -f %e ls",
        "timeout 5 ls -la",
        "nice -n 5 wc -l src/a.rs",
        "du -sh src",
        "wc -l src/*.rs",
        "head -20 README.md",
        "tail -n 5 README.md",
        "grep -rn main src",
        "strings -n 8 README.md",
        "sort -u README.md",
        "ls -la docs",
        "cat README.md src/a.rs",
        // A glob over `--opt=VALUE` only makes more of the same option.
        "grep -rn main --include=*.rs src",
        "find . -name '*.rs' -exec wc -l {} +",
        "sed -n 's/^fn //p' src/a.rs",
        "awk '{print $1}' README.md",
        "GIT_PAGER=cat ls",
    ] {
        let (decision, reason) = decide(&root, "plan", &[], "bash", command);
        if decision != "allow" {
            refused.push(format!("{command:?}: {decision}: {reason}"));
        }
    }
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
}
