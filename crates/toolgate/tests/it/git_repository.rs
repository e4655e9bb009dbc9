//! git in a repository that is not the project's own, through the real
//! binary: a project (a git repository) that carries a bare repository
//! committed as plain files (`vendor/evil.git`: `HEAD`, `config`, `objects/`,
//! `refs/`, `info/attributes`), whose `config` runs programs through
//! `diff.external` and a `textconv` driver. The test first shows with real
//! git that the fixture is a real threat (a marker file appears), then that
//! plan mode denies every way of pointing git at it and still allows git in
//! the project's own repository. The same for a nested repository recorded
//! as a gitlink (`git add sub`): plain `git status` in the project recurses
//! into it and runs its `core.fsmonitor`, so plan mode denies git there,
//! and still allows it beside a submodule checked out by git.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use crate::support;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("git runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The hostile project: a repository whose tree holds `vendor/evil.git`, a
/// bare repository with two commits, committed as ordinary files.
fn hostile_project(root: &Path, marker: &Path) {
    git(root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("README"), "hello\n").unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/lib.rs"), "\n").unwrap();
    let bare = root.join("vendor/evil.git");
    std::fs::create_dir_all(&bare).unwrap();
    git(&bare, &["init", "-q", "--bare", "-b", "main"]);
    let mut parent: Option<String> = None;
    for text in ["one\n", "two\n"] {
        std::fs::write(root.join("blob.tmp"), text).unwrap();
        let blob = git(&bare, &["hash-object", "-w", "../../blob.tmp"]);
        let tree = {
            let mut child = Command::new("git")
                .args(["mktree"])
                .current_dir(&bare)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(format!("100644 blob {blob}\tfile.txt\n").as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let mut args = vec!["commit-tree", tree.as_str(), "-m", "x"];
        if let Some(p) = &parent {
            args.extend(["-p", p.as_str()]);
        }
        let commit = git(&bare, &args);
        git(&bare, &["update-ref", "refs/heads/main", &commit]);
        parent = Some(commit);
    }
    std::fs::remove_file(root.join("blob.tmp")).unwrap();
    let _ = std::fs::remove_dir_all(bare.join("hooks"));
    std::fs::write(bare.join("info/attributes"), "* diff=evil\n").unwrap();
    let m = marker.display();
    std::fs::write(
        bare.join("config"),
        format!(
            "[core]\n\tbare = true\n\tfsmonitor = \"touch {m}\"\n[diff]\n\texternal = \"touch {m}; true\"\n[diff \"evil\"]\n\ttextconv = \"touch {m}; cat\"\n"
        ),
    )
    .unwrap();
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "project"]);
}

#[test]
fn git_never_uses_a_foreign_repository_in_plan_mode() {
    if Command::new("git").arg("--version").output().is_err() {
        eprintln!("git is not installed: nothing to check");
        return;
    }
    let root = support::project_dir("git-repository");
    let marker = root.with_extension("PWNED");
    let _ = std::fs::remove_file(&marker);
    hostile_project(&root, &marker);
    std::os::unix::fs::symlink(root.join("vendor/evil.git"), root.join("docs")).unwrap();
    // `deep/..` is the project root lexically, but `vendor/evil.git/refs` physically.
    std::os::unix::fs::symlink(root.join("vendor/evil.git/refs/heads"), root.join("deep")).unwrap();

    // The fixture is a real threat: git run where the calls below point runs
    // the repository's programs.
    git(&root, &["-C", "vendor/evil.git", "diff", "HEAD~1", "HEAD"]);
    assert!(
        marker.exists(),
        "diff.external of the committed bare repository did not run"
    );
    std::fs::remove_file(&marker).unwrap();
    git(&root.join("docs"), &["show", "HEAD"]);
    assert!(
        marker.exists(),
        "textconv of the committed bare repository did not run"
    );
    std::fs::remove_file(&marker).unwrap();

    let args: Vec<String> = vec![
        "--mode".into(),
        "plan".into(),
        "--project-root".into(),
        root.to_string_lossy().into_owned(),
    ];
    let mut broker = support::Broker::start(&root, &args, &[]);
    let evil = root.join("vendor/evil.git");
    let calls: Vec<(&str, Value, &str)> = vec![
        (
            "own1",
            json!({"command": "git status && git log --oneline -3"}),
            "allow",
        ),
        (
            "own2",
            json!({"command": "git diff HEAD -- src && git show-ref --heads"}),
            "allow",
        ),
        ("own3", json!({"command": "cd src && git log -1"}), "allow"),
        (
            "bad1",
            json!({"command": "git -C vendor/evil.git show HEAD"}),
            "deny",
        ),
        (
            "bad2",
            json!({"command": "git -C vendor -C evil.git diff HEAD~1 HEAD"}),
            "deny",
        ),
        (
            "bad3",
            json!({"command": "cd vendor/evil.git && git show"}),
            "deny",
        ),
        (
            "bad4",
            json!({"command": "bash -c 'cd vendor/evil.git/refs; git log -p'"}),
            "deny",
        ),
        ("bad5", json!({"command": "git -C docs show HEAD"}), "deny"),
        (
            "bad6",
            json!({"command": "cd docs && git show HEAD"}),
            "deny",
        ),
        (
            "bad7",
            json!({"command": "git -C src/../docs/refs/.. log -p"}),
            "deny",
        ),
        ("bad8", json!({"command": "git -C missing status"}), "deny"),
        (
            "bad9",
            json!({"command": "cd vendor/evil.git || cd ..; git show"}),
            "deny",
        ),
    ];
    for (id, input, _) in &calls {
        broker.send(
            &json!({"type": "tool_call", "callID": id, "tool": "Bash", "input": input}).to_string(),
        );
    }
    // A call whose own working directory is inside the bare repository.
    broker.send(
        &json!({"type": "tool_call", "callID": "cwd1", "tool": "Bash",
                "input": {"command": "git show HEAD"}, "cwd": evil.join("refs")})
        .to_string(),
    );
    broker.send(
        &json!({"type": "tool_call", "callID": "cwd2", "tool": "Bash",
                "input": {"command": "git log -1"}, "cwd": root.join("src")})
        .to_string(),
    );
    broker.send(
        &json!({"type": "tool_call", "callID": "cwd3", "tool": "Bash",
                "input": {"command": "git show HEAD"}, "cwd": root.join("deep/..")})
        .to_string(),
    );
    let (_, lines, stderr) = broker.finish();
    let decisions: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|f| f["type"] == "decision")
        .collect();
    let decision = |id: &str| {
        decisions
            .iter()
            .find(|d| d["callID"] == id)
            .unwrap_or_else(|| panic!("no decision for {id}; stderr: {stderr}"))
            .clone()
    };
    let mut bad = Vec::new();
    let expected = calls.iter().map(|(id, _, want)| (*id, *want)).chain([
        ("cwd1", "deny"),
        ("cwd2", "allow"),
        ("cwd3", "deny"),
    ]);
    for (id, want) in expected {
        let d = decision(id);
        if d["decision"] != want {
            bad.push(format!("{id}: {d}"));
        } else if want == "deny"
            && !d["reason"].as_str().unwrap_or("").contains("project's own")
            && !d["reason"]
                .as_str()
                .unwrap_or("")
                .contains("cannot be known")
            && !d["reason"]
                .as_str()
                .unwrap_or("")
                .contains("outside the project root")
            && !d["reason"]
                .as_str()
                .unwrap_or("")
                .contains("given with `..`")
            && !d["reason"]
                .as_str()
                .unwrap_or("")
                .contains("directory that cannot be determined")
        {
            bad.push(format!("{id} denied for another reason: {d}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(!marker.exists(), "judging ran something");
    let _ = std::fs::remove_dir_all(&root);
}

/// A repository at `dir` with one commit, whose `config` runs
/// `core.fsmonitor` (writing `marker`) whenever git works in it.
fn fsmonitor_repo(dir: &Path, marker: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("f"), "x\n").unwrap();
    git(dir, &["add", "f"]);
    git(dir, &["commit", "-q", "-m", "c"]);
    // git appends arguments: `false` swallows them.
    let hook = format!("touch {}; false", marker.display());
    git(dir, &["config", "core.fsmonitor", &hook]);
}

/// `git status`, `git diff` and the other git commands in plan mode, in the
/// project's own repository, and from `src`: the decisions, by call.
fn plan_decisions(root: &Path) -> Vec<(String, Value)> {
    let args: Vec<String> = vec![
        "--mode".into(),
        "plan".into(),
        "--project-root".into(),
        root.to_string_lossy().into_owned(),
    ];
    let mut broker = support::Broker::start(root, &args, &[]);
    let commands = [
        "git status",
        "git diff",
        "git log --oneline -1",
        "git ls-files",
    ];
    for (n, command) in commands.iter().enumerate() {
        broker.send(
            &json!({"type": "tool_call", "callID": format!("root{n}"), "tool": "Bash",
                    "input": {"command": command}})
            .to_string(),
        );
        broker.send(
            &json!({"type": "tool_call", "callID": format!("src{n}"), "tool": "Bash",
                    "input": {"command": command}, "cwd": root.join("src")})
            .to_string(),
        );
    }
    let (_, lines, stderr) = broker.finish();
    let decisions: Vec<(String, Value)> = lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|f| f["type"] == "decision")
        .map(|d| (d["callID"].as_str().unwrap_or("").to_string(), d))
        .collect();
    assert_eq!(decisions.len(), 2 * commands.len(), "stderr: {stderr}");
    decisions
}

#[test]
fn git_never_recurses_into_a_repository_the_project_brought() {
    if Command::new("git").arg("--version").output().is_err() {
        eprintln!("git is not installed: nothing to check");
        return;
    }
    let base = support::project_dir("git-gitlinks");
    let marker = base.join("PWNED");
    std::fs::create_dir_all(&base).unwrap();

    // 1. A nested repository added with `git add sub`: a gitlink whose
    // directory holds its own `.git` directory, with a hostile config.
    let embedded = base.join("embedded");
    std::fs::create_dir_all(embedded.join("src")).unwrap();
    git(&embedded, &["init", "-q", "-b", "main"]);
    std::fs::write(embedded.join("src/lib.rs"), "\n").unwrap();
    fsmonitor_repo(&embedded.join("sub"), &marker);
    git(&embedded, &["add", "src", "sub"]);
    git(&embedded, &["commit", "-q", "-m", "project"]);
    let _ = std::fs::remove_file(&marker);
    // The threat is real: plain `git status` in the project's own
    // repository runs the nested repository's fsmonitor.
    git(&embedded, &["status"]);
    assert!(
        marker.exists(),
        "git status did not recurse into the embedded repository"
    );
    std::fs::remove_file(&marker).unwrap();

    // 2. The same upstream as a submodule checked out by git: its
    // repository lives in `.git/modules/`, with a config git wrote.
    let upstream = base.join("upstream");
    fsmonitor_repo(&upstream, &marker);
    let normal = base.join("normal");
    std::fs::create_dir_all(normal.join("src")).unwrap();
    git(&normal, &["init", "-q", "-b", "main"]);
    std::fs::write(normal.join("src/lib.rs"), "\n").unwrap();
    git(&normal, &["add", "src"]);
    let url = upstream.display().to_string();
    git(
        &normal,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            &url,
            "lib/up",
        ],
    );
    git(&normal, &["commit", "-q", "-m", "project"]);
    assert!(normal.join("lib/up/.git").is_file(), "not a gitdir: file");
    let _ = std::fs::remove_file(&marker);
    git(&normal, &["status"]);
    assert!(
        !marker.exists(),
        "a submodule checked out by git ran its upstream's config"
    );

    // 3. A clean repository.
    let clean = base.join("clean");
    std::fs::create_dir_all(clean.join("src")).unwrap();
    git(&clean, &["init", "-q", "-b", "main"]);
    std::fs::write(clean.join("src/lib.rs"), "\n").unwrap();
    git(&clean, &["add", "src"]);
    git(&clean, &["commit", "-q", "-m", "project"]);

    let mut bad = Vec::new();
    for (project, want) in [(&embedded, "deny"), (&normal, "allow"), (&clean, "allow")] {
        for (id, d) in plan_decisions(project) {
            let reason = d["reason"].as_str().unwrap_or("");
            if d["decision"] != want
                || (want == "deny"
                    && !reason.contains(
                        "`sub` is a submodule with its own repository, a `.git` directory: git recurses into it",
                    ))
            {
                bad.push(format!("{}: {id}: {d}", project.display()));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(!marker.exists(), "judging ran something");
    let _ = std::fs::remove_dir_all(&base);
}
