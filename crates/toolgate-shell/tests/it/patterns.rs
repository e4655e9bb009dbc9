//! `always` and `inner` patterns, argv input and options, as data tables
//! run through one `check` helper each.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use toolgate_shell::{analyze, validate_read_only_extra, Analysis, Options, Script};

fn opts() -> Options {
    Options {
        project_root: "/work/proj".into(),
        repo_oracle: Some(std::sync::Arc::new(toolgate_shell::AssumeOwnRepository)),
        ..Options::default()
    }
}

fn run(input: &str) -> Analysis {
    analyze(Script::Text(input), &opts())
}

/// Compare every row, then fail once listing every mismatch.
fn check_all(rows: &[(&str, &[&str])], got: impl Fn(&str) -> Vec<String>) {
    let mut bad = Vec::new();
    for (input, expected) in rows {
        let actual = got(input);
        if actual != *expected {
            bad.push(format!(
                "{input:?}\n  expected {expected:?}\n  got      {actual:?}"
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn always_patterns() {
    let rows: &[(&str, &[&str])] = &[
        // arity table
        ("ls -la", &["ls *"]),
        ("ls", &["ls *"]),
        ("git commit -m x", &["git commit *"]),
        ("git status", &["git status *"]),
        ("npm run dev", &["npm run dev *"]),
        ("npm install left-pad", &["npm install *"]),
        ("docker compose up -d", &["docker compose up *"]),
        ("git stash pop", &["git stash pop *"]),
        ("cargo run --release -- x", &["cargo run x *"]),
        ("cargo build --release", &["cargo build *"]),
        ("gh pr view 12", &["gh pr view *"]),
        ("aws s3 ls", &["aws s3 ls *"]),
        ("kubectl get pods", &["kubectl get *"]),
        ("make install", &["make install *"]),
        ("unknowntool --x y", &["unknowntool *"]),
        ("./script.sh arg", &["./script.sh *"]),
        ("cat Cargo.toml", &["cat *"]),
        ("echo hi", &["echo *"]),
        // flags before the subcommand do not shift the prefix
        ("git -C crates/x status", &["git status *"]),
        ("git --no-pager log -n 3", &["git log *"]),
        ("git -c core.pager=cat log", &["git log *"]),
        ("kubectl -n prod get pods", &["kubectl get *"]),
        ("docker --context x compose up", &["docker compose up *"]),
        ("npm --prefix web run build", &["npm run build *"]),
        ("make -C sub install", &["make install *"]),
        // not enough words for the arity: literal
        ("git", &["git"]),
        ("npm run", &["npm run"]),
        // never widened: literal text
        ("taskset 0x1 rm x", &["taskset 0x1 rm x"]),
        ("chrt -f 10 ls", &["chrt -f 10 ls"]),
        ("valgrind ls", &["valgrind ls"]),
        ("unbuffer ls", &["unbuffer ls"]),
        ("numactl -C 0 ls", &["numactl -C 0 ls"]),
        ("/opt/x/rm -rf y", &["/opt/x/rm -rf y"]),
        ("rm -rf target", &["rm -rf target"]),
        ("rmdir x", &["rmdir x"]),
        ("dd if=a of=b", &["dd if=a of=b"]),
        ("mkfs.ext4 /dev/sda1", &["mkfs.ext4 /dev/sda1"]),
        ("shred x", &["shred x"]),
        ("truncate -s0 x", &["truncate -s0 x"]),
        ("chmod +x a", &["chmod +x a"]),
        ("chown me a", &["chown me a"]),
        ("kill 1", &["kill 1"]),
        ("gdb -p 1", &["gdb -p 1"]),
        ("sudo ls", &["sudo ls"]),
        ("env ls", &["env ls"]),
        ("bash -c 'ls'", &["bash -c ls"]),
        ("sh x.sh", &["sh x.sh"]),
        ("zsh -c ls", &["zsh -c ls"]),
        ("python script.py", &["python script.py"]),
        ("python3 -m http.server", &["python3 -m http.server"]),
        ("node x.js", &["node x.js"]),
        ("ruby x.rb", &["ruby x.rb"]),
        ("perl -e 1", &["perl -e 1"]),
        ("php x.php", &["php x.php"]),
        ("deno run x.ts", &["deno run x.ts"]),
        ("bun run dev", &["bun run dev"]),
        ("eval ls", &["eval ls"]),
        ("xargs rm", &["xargs rm"]),
        ("find . -name x", &["find . -name x"]),
        ("fd -x rm", &["fd -x rm"]),
        ("tar -xf a.tar", &["tar -xf a.tar"]),
        ("timeout 5 ls", &["timeout 5 ls"]),
        ("nohup ls", &["nohup ls"]),
        ("npx prettier", &["npx prettier"]),
        ("/bin/rm -rf x", &["/bin/rm -rf x"]),
        ("./rm -rf x", &["./rm -rf x"]),
        // assignments, unsafe redirections, substitutions: literal
        ("FOO=1 cargo build", &["FOO=1 cargo build"]),
        ("echo x > out.txt", &["echo x >out.txt"]),
        ("ls $(pwd)", &["ls *", "pwd *"]),
        ("ls 2>/dev/null", &["ls *"]),
        // a prefix word with glob characters or spaces would widen: literal
        ("git '*' x", &["git * x"]),
        ("npm run 'a b'", &["npm run a b"]),
        // compound: one pattern per simple command
        ("ls && git status", &["ls *", "git status *"]),
        ("cat a | grep b; rm c", &["cat *", "grep *", "rm c"]),
        (
            "git add . && git commit -m 'x y'",
            &["git add *", "git commit *"],
        ),
    ];
    check_all(rows, |input| {
        run(input)
            .commands
            .iter()
            .map(|c| c.always.clone())
            .collect::<Vec<_>>()
    });
}

#[test]
fn inner_texts() {
    let rows: &[(&str, &[&str])] = &[
        ("sudo rm -rf /", &["rm -rf /"]),
        ("sudo -u root -- rm -rf /", &["rm -rf /"]),
        ("doas rm x", &["rm x"]),
        ("env rm x", &["rm x"]),
        ("env -i rm x", &["rm x"]),
        ("env -u HOME -i FOO=1 rm x", &["rm x"]),
        ("env --unset=HOME rm x", &["rm x"]),
        ("FOO=1 rm x", &["rm x"]),
        ("timeout 5 rm x", &["rm x"]),
        ("timeout -s KILL -k 1 5 rm x", &["rm x"]),
        ("time rm x", &["rm x"]),
        ("time -p rm x", &["rm x"]),
        ("nice rm x", &["rm x"]),
        ("nice -n 10 rm x", &["rm x"]),
        ("nice -5 rm x", &["rm x"]),
        ("nohup rm x", &["rm x"]),
        ("stdbuf -oL -e0 rm x", &["rm x"]),
        ("ionice -c 3 rm x", &["rm x"]),
        ("command rm x", &["rm x"]),
        ("command -p rm x", &["rm x"]),
        ("builtin cd x", &["cd x"]),
        ("xargs rm", &["rm"]),
        ("xargs -0 -n 1 rm -f", &["rm -f"]),
        ("exec rm x", &["rm x"]),
        ("bash -c 'rm -rf /'", &["rm -rf /"]),
        ("sh -c 'ls; rm x'", &["ls", "rm x"]),
        ("zsh -c 'rm x'", &["rm x"]),
        ("bash -lc 'rm x'", &["rm x"]),
        ("bash -e -o pipefail -c 'rm x'", &["rm x"]),
        ("/bin/bash -c 'rm x'", &["bash -c rm x", "rm x"]),
        ("eval 'rm -rf /'", &["rm -rf /"]),
        ("sudo timeout 5 rm x", &["timeout 5 rm x", "rm x"]),
        (
            "sudo bash -c 'sudo rm x'",
            &["bash -c sudo rm x", "sudo rm x", "rm x"],
        ),
        (
            "env bash -c 'nice rm x && ls'",
            &["bash -c nice rm x && ls", "nice rm x", "rm x", "ls"],
        ),
        (
            "timeout 1 nice env rm x",
            &["nice env rm x", "env rm x", "rm x"],
        ),
        ("ls -la", &[]),
        ("git status", &[]),
        ("command -v rm", &[]),
        (
            "sudo sudo sudo sudo sudo sudo sudo sudo sudo sudo rm x",
            &[
                "sudo sudo sudo sudo sudo sudo sudo sudo sudo rm x",
                "sudo sudo sudo sudo sudo sudo sudo sudo rm x",
                "sudo sudo sudo sudo sudo sudo sudo rm x",
                "sudo sudo sudo sudo sudo sudo rm x",
                "sudo sudo sudo sudo sudo rm x",
                "sudo sudo sudo sudo rm x",
                "sudo sudo sudo rm x",
                "sudo sudo rm x",
            ],
        ),
    ];
    check_all(rows, |input| {
        let a = run(input);
        assert_eq!(a.commands.len(), 1, "{input}: {a:?}");
        a.commands[0].inner.clone()
    });
}

#[test]
fn wrapper_depth_limit_fails_closed() {
    let deep = format!("{}ls", "timeout 1 ".repeat(9));
    let a = run(&deep);
    assert!(!a.is_read_only());
    assert!(a.refusal.unwrap().reason.contains("nested more than 8"));
    let shallow = format!("{}ls", "timeout 1 ".repeat(8));
    assert!(run(&shallow).is_read_only());
    let mut script = "ls".to_string();
    for _ in 0..10 {
        script = format!("bash -c {}", shell_quote(&script));
    }
    assert!(!run(&script).is_read_only());
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[test]
fn text_is_decoded_words() {
    let rows: &[(&str, &[&str])] = &[
        ("find . '-de'lete", &["find . -delete"]),
        ("echo   \"a  b\"   c", &["echo a  b c"]),
        ("r\\m x", &["rm x"]),
        ("echo $'a\\tb'", &["echo a\tb"]),
        ("ls 2>/dev/null", &["ls 2>/dev/null"]),
        ("LANG=C ls", &["LANG=C ls"]),
        ("  ls  &&  pwd  ", &["ls", "pwd"]),
        ("ls \\\n  -la", &["ls -la"]),
        ("echo \"$(rm x)\"", &["echo $(rm x)", "rm x"]),
        ("ls ))", &["ls ))"]),
    ];
    check_all(rows, |input| {
        run(input)
            .commands
            .iter()
            .map(|c| c.text.clone())
            .collect::<Vec<_>>()
    });
}

#[test]
fn empty_and_unparseable() {
    for blank in ["", "   ", "\n\t", "# just a comment"] {
        let a = run(blank);
        assert!(a.commands.is_empty(), "{blank:?}");
        assert_eq!(a.refusal.unwrap().reason, "empty command");
    }
    let a = run("  echo 'open  ");
    assert_eq!(a.commands.len(), 1);
    assert_eq!(a.commands[0].text, "echo 'open");
    assert!(a.commands[0].verdict.is_err());
}

fn argv(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn argv_input() {
    let rows: &[(&[&str], (usize, bool))] = &[
        (&["bash", "-lc", "ls && git status"], (2, true)),
        (&["bash", "-lc", "ls && rm x"], (2, false)),
        (&["/bin/bash", "-c", "ls"], (1, true)),
        (&["zsh", "-lc", "ls"], (1, true)),
        (&["sh", "-c", "echo $(rm x)"], (2, false)),
        (&["ls", "-la"], (1, true)),
        // argv words are not re-parsed as shell: `*` and `$(..)` are literal
        (&["ls", "*.rs"], (1, true)),
        (&["echo", "$(rm x)"], (1, true)),
        (&["find", ".", "-delete"], (1, false)),
        (&["rm", "-rf", "/"], (1, false)),
        (&["sudo", "bash", "-c", "rm x"], (1, false)),
        (&["timeout", "5", "bash", "-c", "ls"], (1, true)),
        (&["bash", "script.sh"], (1, false)),
        (&["bash", "-lc"], (1, false)),
        (&[], (0, false)),
    ];
    let mut bad = Vec::new();
    for (items, (n, ro)) in rows {
        let v = argv(items);
        let a = analyze(Script::Argv(&v), &opts());
        if a.commands.len() != *n || a.is_read_only() != *ro {
            bad.push(format!("{items:?}: {a:?}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    let v = argv(&["ls", "-la", "a b"]);
    assert_eq!(
        analyze(Script::Argv(&v), &opts()).commands[0].text,
        "ls -la a b"
    );
    let v = argv(&["sudo", "rm", "-rf", "/"]);
    assert_eq!(
        analyze(Script::Argv(&v), &opts()).commands[0].inner,
        ["rm -rf /"]
    );
}

#[test]
fn git_trust_and_directories() {
    let untrusted = Options {
        trust_git_config: false,
        ..opts()
    };
    let a = analyze(Script::Text("git status"), &untrusted);
    assert!(a.refusal.unwrap().reason.contains("trustGitConfig"));
    assert!(analyze(Script::Text("ls"), &untrusted).is_read_only());

    let rows: &[(&str, Option<&str>, bool)] = &[
        ("git status", None, true),
        ("git status", Some("crates/x"), true),
        ("git status", Some("/work/proj/sub"), true),
        ("git status", Some("/tmp"), false),
        ("git status", Some("../other"), false),
        ("git -C .. status", Some("sub"), true),
        ("git -C ../.. status", Some("sub"), false),
        ("git -C /work/proj/a status", None, true),
        ("git -C /work/projx status", None, false),
        ("git -C /work/proj/../x status", None, false),
        // The `cd` may not have happened (it can fail, or run in a
        // pipeline's subshell): git must be safe from where the shell was too.
        ("cd sub && git -C .. log", None, false),
        ("cd sub && git log", None, true),
        ("cd /tmp || cd /work/proj; git log", None, false),
        ("cd /tmp; cd /work/proj | true; git log", None, false),
        ("cd - && git log", None, false),
        ("cd && git log", None, false),
        ("cd -P sub/.. && git log", None, false),
        ("cd -P sub && git log", None, true),
        ("cd /elsewhere && git -C /work/proj log", None, true),
    ];
    let mut bad = Vec::new();
    for (input, cwd, ro) in rows {
        let o = Options {
            cwd: cwd.map(Into::into),
            ..opts()
        };
        let a = analyze(Script::Text(input), &o);
        if a.is_read_only() != *ro {
            bad.push(format!("{input} (cwd {cwd:?}): {:?}", a.refusal));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn read_only_extras() {
    let extras: Vec<Vec<String>> = ["gh issue view", "kubectl get", "git stash list", "npm ls"]
        .iter()
        .map(|e| validate_read_only_extra(e).unwrap())
        .collect();
    let o = Options {
        extra_read_only: extras,
        ..opts()
    };
    let rows: &[(&str, bool)] = &[
        ("gh issue view 12", true),
        ("gh issue view", true),
        ("gh issue close 12", false),
        ("gh issue", false),
        ("kubectl get pods -n x", true),
        ("kubectl delete pod x", false),
        ("kubectl get pods > out", false),
        ("kubectl get $(rm x)", false),
        ("kubectl get pods*", false),
        ("git stash list", true),
        ("git stash list --output=x", false),
        ("git -c x=y stash list", false),
        ("cd /tmp && git stash list", false),
        ("npm ls", true),
        ("npm ls && rm x", false),
        ("sudo npm ls", false),
        ("timeout 5 npm ls", true),
    ];
    let mut bad = Vec::new();
    for (input, ro) in rows {
        let a = analyze(Script::Text(input), &o);
        if a.is_read_only() != *ro {
            bad.push(format!("{input}: {:?}", a.refusal));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // An extra that would not validate is ignored even if passed in.
    let sneaky = Options {
        extra_read_only: vec![vec!["bash".into(), "-c".into()], vec!["rm".into()]],
        ..opts()
    };
    assert!(!analyze(Script::Text("bash -c 'rm x'"), &sneaky).is_read_only());
    assert!(!analyze(Script::Text("rm x"), &sneaky).is_read_only());
}

/// A fake disk: `evil*` is another repository, `gone*` cannot be looked at.
#[derive(Debug)]
struct Disk;

impl toolgate_shell::RepoOracle for Disk {
    fn repository(&self, q: &toolgate_shell::RepoQuery) -> toolgate_shell::RepoFact {
        let all = format!("{} {}", q.dir.display(), q.chdirs.join(" "));
        if all.contains("evil") {
            toolgate_shell::RepoFact::Other("`evil.git` is a bare repository".into())
        } else if all.contains("gone") {
            toolgate_shell::RepoFact::Unknown("`gone` does not exist".into())
        } else {
            toolgate_shell::RepoFact::Own
        }
    }
}

#[test]
fn git_asks_which_repository() {
    use toolgate_shell::RepoQuery;
    let none = Options {
        repo_oracle: None,
        ..opts()
    };
    let a = analyze(Script::Text("git status"), &none);
    assert!(
        a.refusal.unwrap().reason.contains("own repository"),
        "no oracle means unknown means refused"
    );
    let disk = toolgate_shell::with_oracle(opts(), Disk);
    let q = |dir: &str, chdirs: &[&str]| RepoQuery {
        dir: dir.into(),
        chdirs: chdirs.iter().map(|c| c.to_string()).collect(),
    };
    // (command, cwd, refusal substring or "" for read-only, the questions asked)
    let rows: Vec<(&str, Option<&str>, &str, Vec<RepoQuery>)> = vec![
        ("git status", None, "", vec![q("/work/proj", &[])]),
        ("ls", None, "", vec![]),
        ("git commit -m x", None, "`git commit`", vec![]),
        (
            "git -C a -C ../b status",
            Some("sub"),
            "",
            vec![q("/work/proj/sub", &["a", "../b"])],
        ),
        (
            "git -C evil.git status",
            None,
            "not the project's own (`evil.git` is a bare repository)",
            vec![q("/work/proj", &["evil.git"])],
        ),
        (
            "cd evil.git && git log",
            None,
            "not the project's own",
            vec![q("/work/proj", &[]), q("/work/proj/evil.git", &[])],
        ),
        (
            "bash -c 'cd evil.git; git diff'",
            None,
            "not the project's own",
            vec![q("/work/proj", &[]), q("/work/proj/evil.git", &[])],
        ),
        (
            "git status",
            Some("/work/proj/evil.git/refs"),
            "not the project's own",
            vec![q("/work/proj/evil.git/refs", &[])],
        ),
        (
            "git log",
            Some("gone"),
            "cannot be known (`gone` does not exist)",
            vec![q("/work/proj/gone", &[])],
        ),
        ("git log", Some("sub/../x"), "given with `..`", vec![]),
        ("git log --show-signature", None, "runs gpg", vec![]),
    ];
    let mut bad = Vec::new();
    for (input, cwd, want, asked) in rows {
        let o = Options {
            cwd: cwd.map(Into::into),
            ..disk.clone()
        };
        let a = analyze(Script::Text(input), &o);
        let got = a.refusal.as_ref().map_or("", |r| r.reason.as_str());
        let ok = if want.is_empty() {
            got.is_empty()
        } else {
            got.contains(want)
        };
        let queries: Vec<RepoQuery> = a.repo_checks.iter().map(|(q, _)| q.clone()).collect();
        if !ok || queries != asked {
            bad.push(format!("{input} (cwd {cwd:?}): {got:?}, asked {queries:?}"));
        }
        for (query, fact) in &a.repo_checks {
            assert_eq!(fact, &toolgate_shell::RepoOracle::repository(&Disk, query));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));

    // planModeReadOnlyCommands git entries: git's own options inside the
    // entry are judged too, and the repository is asked about.
    let extras = Options {
        extra_read_only: [
            "git -C evil.git log",
            "git lfs ls-files",
            "git --git-dir=x.git log",
        ]
        .iter()
        .map(|e| validate_read_only_extra(e).unwrap())
        .collect(),
        ..disk.clone()
    };
    for (input, ro, asked) in [
        ("git lfs ls-files", true, vec![q("/work/proj", &[])]),
        ("git lfs ls-files --output=x", false, vec![]),
        // asked twice: as the entry, then as an ordinary git command
        (
            "git -C evil.git log",
            false,
            vec![
                q("/work/proj", &["evil.git"]),
                q("/work/proj", &["evil.git"]),
            ],
        ),
        ("git --git-dir=x.git log", false, vec![]),
        (
            "cd evil.git && git lfs ls-files",
            false,
            vec![q("/work/proj", &[]), q("/work/proj/evil.git", &[])],
        ),
    ] {
        let a = analyze(Script::Text(input), &extras);
        let queries: Vec<RepoQuery> = a.repo_checks.iter().map(|(q, _)| q.clone()).collect();
        assert_eq!(
            (a.is_read_only(), queries),
            (ro, asked),
            "{input}: {:?}",
            a.refusal
        );
    }
}
