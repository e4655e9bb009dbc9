//! `toolgate policy validate` and `toolgate policy import` through the
//! spawned binary. Each source format's documented examples are replayed
//! through the converted policy (`toolgate check --policy CONVERTED`): the
//! first answer toolgate gives each call is the one the source agent
//! documents for it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::Path;

use serde_json::Value;

use crate::support;

/// Import `source` (written to `name` in `dir`): the converted policy's
/// path, and stderr.
fn import(dir: &Path, name: &str, source: &str, args: &[&str]) -> (std::path::PathBuf, String) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, source).unwrap();
    let mut argv = vec!["policy", "import", path.to_str().unwrap()];
    argv.extend_from_slice(args);
    let (code, out, err) = support::run(dir, &argv, "");
    assert_eq!(code, 0, "{name}: {err}");
    let converted = dir.join(format!("{}.toolgate.json", name.replace('/', "_")));
    serde_json::from_str::<Value>(&out).unwrap_or_else(|_| panic!("{name}: not JSON: {out}"));
    std::fs::write(&converted, out).unwrap();
    (converted, err)
}

/// toolgate's first answer to `tool subject` under `policy`.
fn answer(dir: &Path, policy: &Path, tool: &str, subject: &str) -> String {
    let (_, out, err) = support::run(
        dir,
        &[
            "check",
            "--json",
            "--project-root",
            dir.to_str().unwrap(),
            "--policy",
            policy.to_str().unwrap(),
            "--",
            tool,
            subject,
        ],
        "",
    );
    let value: Value =
        serde_json::from_str(&out).unwrap_or_else(|_| panic!("{tool} {subject}: {out}{err}"));
    value["decision"].as_str().unwrap().to_string()
}

#[test]
fn each_formats_documented_examples_decide_the_same() {
    let dir = support::project_dir("policy-import");
    let dir = dir.canonicalize().unwrap();
    // (file, source, [(tool, subject, what the source agent documents)])
    type Case<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str, &'a str)>);
    let cases: Vec<Case> = vec![
        (
            ".claude/settings.json",
            r#"{"permissions": {
                "allow": ["Bash(npm run test:*)", "Bash(git:*)", "Edit(/src/**/*.ts)", "WebFetch(domain:example.com)"],
                "deny": ["Bash(curl:*)", "Bash(git push:*)", "Read(./.env)"],
                "ask": ["Bash(git commit:*)"]}}"#,
            vec![
                ("bash", "npm run test", "allow"),
                ("bash", "npm run test unit", "allow"),
                ("bash", "curl http://x", "deny"),
                // Deny beats ask beats allow, whatever the order written.
                ("bash", "git push origin main", "deny"),
                ("bash", "git commit -m x", "ask"),
                ("bash", "git status", "allow"),
                ("read", ".env", "deny"),
                ("edit", "src/app/main.ts", "allow"),
                ("edit", "lib/main.ts", "ask"),
                ("webfetch", "https://example.com/docs", "allow"),
                ("webfetch", "https://other.example/", "ask"),
            ],
        ),
        (
            ".qwen/settings.json",
            r#"{"tools": {"allowed": ["run_shell_command(git status)"], "exclude": ["run_shell_command(rm)", "web_fetch"]}}"#,
            vec![
                ("run_shell_command", "git status", "allow"),
                ("run_shell_command", "rm -rf build", "deny"),
                ("web_fetch", "https://example.com", "deny"),
                ("run_shell_command", "make", "ask"),
            ],
        ),
        (
            "policies/git.toml",
            r#"
[[rule]]
toolName = "run_shell_command"
commandPrefix = "git"
decision = "allow"
priority = 10

[[rule]]
toolName = "run_shell_command"
commandPrefix = "git push"
decision = "deny"
priority = 100

[[rule]]
toolName = "write_file"
decision = "ask_user"
priority = 5
"#,
            vec![
                ("run_shell_command", "git status", "allow"),
                // The higher priority wins.
                ("run_shell_command", "git push origin", "deny"),
                ("write_file", "notes.md", "ask"),
            ],
        ),
        (
            "opencode.json",
            r#"{"$schema": "https://opencode.ai/config.json", "permission": {"bash": {"*": "ask", "git *": "allow"}, "webfetch": "deny"}}"#,
            vec![
                ("bash", "git log", "allow"),
                ("bash", "make", "ask"),
                ("webfetch", "https://x.example", "deny"),
            ],
        ),
        (
            "agent-permissions.json",
            r#"{"permission": {"edit": "deny", "bash": {"ls *": "allow"}}}"#,
            vec![("edit", "src/a.rs", "deny"), ("bash", "ls -la", "allow")],
        ),
    ];
    let mut failures = Vec::new();
    for (name, source, calls) in cases {
        let (policy, _) = import(&dir, name, source, &[]);
        for (tool, subject, expected) in calls {
            let actual = answer(&dir, &policy, tool, subject);
            if actual != expected {
                failures.push(format!(
                    "{name}: {tool} `{subject}`: documented {expected}, converted {actual}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn what_cannot_be_converted_is_listed() {
    let dir = support::project_dir("policy-import-skipped");
    let (policy, err) = import(
        &dir,
        ".claude/settings.json",
        r#"{"permissions": {"allow": ["Frobnicate", "WebFetch(https://x)"], "deny": ["Read"], "defaultMode": "dontAsk"}}"#,
        &[],
    );
    for piece in [
        "not converted: ",
        "permissions.allow[0]: `Frobnicate` is a tool toolgate does not know",
        "permissions.allow[1]: `WebFetch(https://x)`: only `domain:HOST` is understood for WebFetch",
        "permissions.defaultMode: dontAsk (deny what would ask) is not a mode: run toolgate with --on-ask deny",
        "1 rule from 1 file",
    ] {
        assert!(err.contains(piece), "missing {piece:?} in {err}");
    }
    // What was converted serves as it is.
    let (code, _, err) = support::run(&dir, &["policy", "validate", policy.to_str().unwrap()], "");
    assert_eq!(code, 0, "{err}");
    // Nothing readable: exit 2.
    let (code, out, err) = support::run(&dir, &["policy", "import", "missing.json"], "");
    assert_eq!(code, 2, "{out}");
    assert!(err.contains("cannot read missing.json"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn validate_reports_errors_warnings_and_lints() {
    let dir = support::project_dir("policy-validate");
    std::fs::write(dir.join("bad.json"), r#"{"permission":{"edti":"allow"}}"#).unwrap();
    std::fs::write(
        dir.join("lints.json"),
        r#"{"mode":"plan","permission":{"bash":{"git push *":"deny","*":"allow"},"edit":{"src/*":"ask"}}}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("clean.json"),
        r#"{"permission":{"bash":{"*":"ask","git *":"allow"}}}"#,
    )
    .unwrap();
    let (code, out, _) = support::run(
        &dir,
        &["policy", "validate", "bad.json", "lints.json", "clean.json"],
        "",
    );
    assert_eq!(code, 2, "{out}");
    let lines: Vec<String> = out
        .lines()
        .map(|l| l.replace(&dir.canonicalize().unwrap().display().to_string(), "$DIR"))
        .collect();
    assert_eq!(
        lines,
        vec![
            "error: $DIR/bad.json: permission.edti: unknown permission name (did you mean `edit`?); a tool of this name must be declared in the policy file's `tools`",
            "warning: $DIR/lints.json: permission.bash.\"git push *\": `bash: git push *` deny is shadowed by the later `bash: *` allow (from $DIR/lints.json), which matches every subject it matches: it never decides",
            "warning: $DIR/lints.json: permission.edit.\"src/*\": `edit: src/*` ask never asks: plan mode denies file edits, writes, patches, deletes and moves before any rule is read",
            "ok: clean.json",
        ]
    );
    // Warnings alone: exit 0; an override with no effect is named.
    let (code, out, _) = support::run(
        &dir,
        &[
            "policy",
            "validate",
            "clean.json",
            "--permission",
            r#"{"bash":{"git *":"allow"}}"#,
        ],
        "",
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "warning: --permission: permission.bash.\"git *\": `bash: git *` allow has no effect"
        ),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Claude Code resolves a relative `additionalDirectories` entry against the
/// directory it runs in (the project whose `.claude/` holds the settings):
/// the import allows that directory, not `/../docs` (issue 25 item 14).
#[test]
fn relative_additional_directories_are_resolved_against_the_project() {
    let top = support::project_dir("policy-import-dirs")
        .canonicalize()
        .unwrap();
    let project = top.join("app");
    std::fs::create_dir_all(top.join("docs")).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let (policy, err) = import(
        &project,
        ".claude/settings.json",
        r#"{"permissions":{"additionalDirectories":["../docs/","/srv/shared/","lib/../../notes"]}}"#,
        &[],
    );
    let text = std::fs::read_to_string(&policy).unwrap();
    assert!(!text.contains("/.."), "a `..` left in a path: {text}");
    let docs = top.join("docs");
    let notes = top.join("notes");
    for (dir, pattern) in [(&docs, "docs"), (&notes, "notes")] {
        assert!(
            text.contains(&format!("\"{}\"", dir.display())),
            "{pattern}: {text}\n{err}"
        );
    }
    // Reading a file in `../docs` is allowed by the imported policy, as
    // Claude Code allows it; a sibling directory still asks.
    let inside = docs.join("guide.md");
    std::fs::write(&inside, "x").unwrap();
    assert_eq!(
        answer(&project, &policy, "read", inside.to_str().unwrap()),
        "allow"
    );
    let other = top.join("other/secret.md");
    assert_eq!(
        answer(&project, &policy, "read", other.to_str().unwrap()),
        "ask"
    );
}
