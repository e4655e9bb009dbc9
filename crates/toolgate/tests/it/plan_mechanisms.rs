//! Plan mode, round three, through the spawned binary: each mechanism that
//! let a plan-mode agent write or read a guarded file (issue 24) in several
//! spellings, in plan and readonly (never allowed) and in auto with a deny
//! rule on `.env` (the same reads meet the rule). The project is hostile: a
//! committed link to `.env`, a link out of the project, a NUL list naming
//! `.env`, a file named like an option.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::Path;

use serde_json::Value;

use crate::support;

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

/// Every path below `root` with its size and modification time.
fn snapshot(root: &Path) -> Vec<(std::path::PathBuf, u64, Option<std::time::SystemTime>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(path.clone());
            }
            out.push((path, meta.len(), meta.modified().ok()));
        }
    }
    out.sort();
    out
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
    // Names a producer prints: a source-looking link to `.env`, and a name
    // that splits at its blank into `lib/split` and `.env`.
    std::fs::create_dir_all(root.join("lib")).unwrap();
    std::fs::write(root.join("lib/a.rs"), "pub fn a() {}\n").unwrap();
    std::os::unix::fs::symlink("../.env", root.join("lib/evil.rs")).unwrap();
    std::fs::write(root.join("lib/split .env"), "harmless\n").unwrap();
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
    // 7. Substitutions, loops and producers: what their words name.
    "cat $(echo .env)",
    "cat \"$(printf .env)\"",
    "for f in .env; do cat \"$f\"; done",
    "for f in README.md .env; do head -1 $f; done",
    "for f in docs/*; do cat \"$f\"; done",
    "for f in $(ls -a); do cat \"$f\"; done",
    "for f in *; do cat $f; done",
    "find . -name '*.txt' | xargs cat",
    "find docs -name 'c*' -print0 | xargs -0 cat",
    "find . -maxdepth 1 -name '.e*' | xargs cat",
    "find . -name x -o -name '.env' | xargs cat",
    "find . | grep -v README | xargs cat",
    "find . -name '*.md' | sed s/README.md/.env/ | xargs cat",
    "git ls-files | xargs cat",
    "cat $(find docs -name cfg)",
    "cat $(find . -name 'opt*')",
    "find . -name '*.md' | while read -r f; do cat \"$f\" docs/cfg; done",
    "ls -a | while read -r f; do cat \"$f\"; done",
    "find . -name x | { read f; cat \"$f\"; }",
    "cat <(cat .env)",
    "diff <(cat docs/cfg) README.md",
    "if true; then cat .env; fi",
    "{ cat docs/cfg; }",
    "while false; do cat notes.txt; done",
    "for PATH in .; do ls; done",
    "for IFS in x; do ls; done",
    "for http_proxy in x; do ls; done",
    "find . -name x | while read -r PATH; do ls; done",
    "ls | read LD_PRELOAD",
    "for f in README.md; do cat $f > out; done",
    "cat README.md | tee >(cat)",
    "for f in README.md; do \"$f\"; done",
    "for f in src/*; do $f; done",
    "for ((i=0;i<1;i++)); do ls; done",
    "select f in a; do ls; done",
    "for f in lib/*; do grep \\-c $f; done",
    "for f in lib/*; do cat $f; done",
    "for f in lib/*.rs; do cat \"$f\"; done",
    "find lib -name '*.rs' | xargs cat",
    "find lib -type f | xargs cat",
    "find lib -type f -print0 | xargs -0 grep -c x",
    "cat $(find lib -type f)",
    "grep -c $(find lib -name 'split*')",
    "git ls-files | while read f; do cat \"$f\"; done",
    "for f in .env; do :; done; cat \"$f\"",
    "cat $(git rev-parse HEAD)",
    "git log -- $(git rev-parse HEAD)",
    "git -C \"$(git rev-parse HEAD)\" status",
    "for f in $(find lib); do wc -l < \"$f\"; done",
    "for f in $(find . -maxdepth 1 -name '.e*'); do wc -l < \"$f\"; done",
    // 8. Archives and fd: extracting, creating, running, remote archives,
    // guarded archives and option files.
    "tar -xf a.tar",
    "tar xzf a.tar.gz",
    "tar -cf out.tar .",
    "tar -tf evil.tar --to-command=sh",
    "tar -t -f host:x",
    "tar tf host:x",
    "tar -tf a.tar -I sh",
    "tar -tf a.tar --checkpoint=1 --checkpoint-action=exec=sh",
    "tar -tf a.tar -T list0",
    "tar -tf .env",
    "tar tf docs/cfg",
    "tar -tf a.tar --verbatim-files-from -T .env",
    "unzip x.zip",
    "unzip -l x.zip -d out",
    "unzip -d out x.zip",
    "unzip -p .env",
    "unzip -l docs/cfg",
    "unzip -Z -1 .env",
    "fd -x rm",
    "fd . -X sh -c 'cat .env'",
    "fdfind -e rs --exec-batch rm",
    "fd --ignore-file .env x",
    "fd --base-directory / passwd",
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
        "cat $(find . -maxdepth 1 -name '.e*')",
        "find docs -name cfg | xargs cat",
        "git ls-files | xargs grep KEY",
        "for f in docs/*; do head -1 \"$f\"; done",
        "cat <(cat notes.txt)",
        "if true; then cat docs/cfg; fi",
        "tar tf .env",
        "tar -tf a.tar -X docs/cfg",
        "unzip -p docs/cfg",
        "zipinfo .env",
        "fdfind --ignore-file .env x",
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
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(&root)
            .output()
            .unwrap();
        assert!(status.status.success(), "git {args:?}: {status:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "src/a.rs", "README.md"]);
    git(&[
        "-c",
        "user.email=a@b",
        "-c",
        "user.name=a",
        "commit",
        "-qm",
        "init",
    ]);
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
        "find src -name '*.rs' -exec wc -l {} +",
        "sed -n 's/^fn //p' src/a.rs",
        "awk '{print $1}' README.md",
        "GIT_PAGER=cat ls",
        // Substitutions, loops and producers with read-only insides.
        "echo \"branch: $(git rev-parse --abbrev-ref HEAD)\"",
        "wc -l $(find src -name '*.rs')",
        "cat \"$(find src -name a.rs)\"",
        "find src -name '*.rs' | xargs wc -l",
        "find src -name '*.rs' -print0 | xargs -0 grep -l main",
        "find src -type f | sort | head -5 | xargs wc -c",
        "for f in src/*.rs; do echo \"== $f\"; head -5 \"$f\"; done",
        "for c in ls cat; do command -v \"$c\" || echo missing; done",
        "for d in src/; do echo \"$d: $(find \"$d\" -name '*.rs' | wc -l)\"; done",
        "find src -name '*.rs' | while read -r f; do wc -l \"$f\"; done",
        "find src -type f | while IFS= read -r f; do head -1 \"$f\"; done",
        "for c in $(git log --format=%h -1); do git show --stat --oneline \"$c\"; done",
        "git log --format=%H -n 1 | while read -r sha; do git show --stat \"$sha\"; done",
        "for f in $(git ls-files '*.md'); do echo \"$f: $(wc -l < \"$f\")\"; done",
        "comm -13 <(ls src | sort) <(ls docs | sort)",
        "if [ -f README.md ]; then head -1 README.md; fi",
        "{ ls src; ls docs; } | sort",
        // A line range is no path.
        "git blame -w -L '/fn main/,+1' src/a.rs",
        "git log -L 1,1:src/a.rs --oneline",
        "tar -tzf build.tar.gz",
        "unzip -l dist.zip",
        "fdfind -e rs main src",
    ] {
        let (decision, reason) = decide(&root, "plan", &[], "bash", command);
        if decision != "allow" {
            refused.push(format!("{command:?}: {decision}: {reason}"));
        }
    }
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
}

/// The hostile project with a Cargo package in it.
fn crate_project(name: &str) -> std::path::PathBuf {
    let root = hostile_project(name);
    std::fs::write(
        root.join("Cargo.toml"),
        "[package]\nname = \"a\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/lib.rs"), "").unwrap();
    root
}

/// Toolchain queries are read-only only while no file in the project (or
/// above it) makes the toolchain install or run something: checked on the
/// disk for each call.
#[test]
fn toolchain_queries_rest_on_the_disk() {
    let root = crate_project("toolchain-queries");
    let queries = [
        "cargo --version",
        "rustc -vV",
        "rustup toolchain list",
        "cargo metadata --format-version 1 --no-deps --offline",
        "cargo tree --offline --locked",
    ];
    for command in queries {
        let (decision, reason) = decide(&root, "plan", &[], "bash", command);
        assert_eq!(decision, "allow", "{command}: {reason}");
    }
    // Run what was allowed, under bash and dash: the project is unchanged.
    let before = snapshot(&root);
    for command in queries
        .iter()
        .chain(&["go version", "go env GOPATH GOVERSION"])
    {
        for shell in ["bash", "dash"] {
            let _ = std::process::Command::new(shell)
                .args(["-c", command])
                .current_dir(&root)
                .output();
        }
    }
    assert_eq!(
        before,
        snapshot(&root),
        "a toolchain query changed the project"
    );
    // go: a go.mod above the working directory can name a toolchain.
    for command in ["go version", "go env GOPATH"] {
        let (decision, reason) = decide(&root, "plan", &[], "bash", command);
        assert_eq!(decision, "allow", "{command}: {reason}");
    }
    std::fs::write(root.join("go.mod"), "module a\n\ngo 1.99\n").unwrap();
    for command in ["go version", "go env GOPATH"] {
        let (decision, reason) = decide(&root, "plan", &[], "bash", command);
        assert_eq!(decision, "deny", "{command}: {reason}");
        assert!(reason.contains("go.mod"), "{command}: {reason}");
    }
    std::fs::remove_file(root.join("go.mod")).unwrap();
    // A toolchain file makes every one of them a possible install.
    std::fs::write(
        root.join("rust-toolchain.toml"),
        "[toolchain]\nchannel = \"nightly\"\n",
    )
    .unwrap();
    for command in queries {
        let (decision, reason) = decide(&root, "plan", &[], "bash", command);
        assert_eq!(decision, "deny", "{command}: {reason}");
        assert!(
            reason.contains("rust-toolchain.toml"),
            "{command}: {reason}"
        );
    }
    std::fs::remove_file(root.join("rust-toolchain.toml")).unwrap();
    // A cargo configuration can name the compiler cargo tree runs; metadata
    // without dependencies runs none.
    std::fs::create_dir_all(root.join(".cargo")).unwrap();
    std::fs::write(
        root.join(".cargo/config.toml"),
        "[build]\nrustc-wrapper = \"./x.sh\"\n",
    )
    .unwrap();
    let (decision, reason) = decide(&root, "plan", &[], "bash", "cargo tree --offline --locked");
    assert_eq!(decision, "deny", "{reason}");
    assert!(reason.contains(".cargo/config.toml"), "{reason}");
    let (decision, reason) = decide(
        &root,
        "plan",
        &[],
        "bash",
        "cargo metadata --no-deps --offline",
    );
    assert_eq!(decision, "allow", "{reason}");
    // Off the network and the lock file only with the flags that say so.
    for command in [
        "cargo tree",
        "cargo metadata",
        "cargo tree --offline",
        "cargo +nightly --version",
    ] {
        let (decision, reason) = decide(&root, "plan", &[], "bash", command);
        assert_eq!(decision, "deny", "{command}: {reason}");
    }
}

/// Every option the toolchain queries admit, with hostile values (a guarded
/// file, a link to it, a path outside, `-`, an option-looking word), asked
/// of the binary in plan mode; what it allows runs under bash and dash in
/// the hostile project and must change nothing and print no secret.
#[test]
fn toolchain_options_swept() {
    let root = crate_project("toolchain-sweep");
    let values = [
        ".env",
        "docs/cfg",
        "/etc/passwd",
        "-",
        "--config=x",
        "@.env",
        "1",
    ];
    let mut commands: Vec<String> = Vec::new();
    for base in ["cargo metadata --no-deps", "cargo tree --offline --locked"] {
        for opt in [
            "--features",
            "-F",
            "--color",
            "--manifest-path",
            "--format-version",
            "--filter-platform",
            "-e",
            "-i",
            "--depth",
            "--prefix",
            "--charset",
            "-p",
            "--target",
            "-f",
            "--exclude",
            "--prune",
        ] {
            for v in values {
                commands.push(format!("{base} {opt} {v}"));
                commands.push(format!("{base} {opt}={v}"));
            }
        }
        for flag in [
            "--offline",
            "--frozen",
            "--locked",
            "-q",
            "--all-features",
            "--no-default-features",
            "--workspace",
            "-d",
            "--no-dedupe",
        ] {
            commands.push(format!("{base} {flag}"));
        }
    }
    for v in values {
        commands.push(format!("rustc --print {v}"));
        commands.push(format!("rustc --print cfg --target {v}"));
        commands.push(format!("cargo locate-project --message-format {v}"));
        commands.push(format!("go env {v}"));
    }
    let before = snapshot(&root);
    let mut allowed = 0;
    let mut problems = Vec::new();
    for command in &commands {
        let (decision, _) = decide(&root, "plan", &[], "bash", command);
        if decision != "allow" {
            continue;
        }
        allowed += 1;
        for shell in ["bash", "dash"] {
            let out = std::process::Command::new(shell)
                .args(["-c", command])
                .current_dir(&root)
                .output()
                .unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if text.contains("hunter2") || text.contains("root:x:0") {
                problems.push(format!("{shell}: {command}: printed a secret"));
            }
        }
    }
    if before != snapshot(&root) {
        problems.push("the project changed".to_string());
    }
    assert!(allowed > 50, "only {allowed} of {} allowed", commands.len());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
