//! The execution oracle: every shell command the real `toolgate` binary allows in plan
//! mode is run, under `bash -c` and `dash -c` (argv forms directly), in a hostile
//! project, and the test fails if anything but stdout and stderr changed
//! (`support/oracle.rs` has the harness, `support/oracle_world.sh` the project).
//!
//! - `harness_reports_writers`: the harness itself can fail: known writers, planted
//!   programs, network use and left-over processes run through the same execution
//!   path (as if the broker had wrongly allowed them) are reported.
//! - `fast_slice`: a deterministic slice (part of the corpus plus generated
//!   commands) in every `cargo test`.
//! - `long_run` (ignored): `scripts/oracle [COUNT] [SEED]`: the whole corpus plus
//!   generated commands until COUNT executions.
//!
//! - `option_sweep_slice`: every option of every program of `programs.txt` alone
//!   (with a value hostile for its role and a seeded one) and a sample of pairs
//!   (`support/sweep.rs`), in every `cargo test`.
//! - `option_sweep_long` (ignored): `scripts/option-sweep [SEED]`: every option in
//!   every shape and place with every value, and pairs of options.
//! - `sweep_catches_wrongly_allowed`: commands the sweep makes for options that
//!   write or read guarded files, run as if allowed, are reported.
//!
//! Environment: `ORACLE_SEED` (default 8), `ORACLE_COUNT` (executions of the long
//! run, default 20000), `ORACLE_SLICE` (generated candidates of the fast slice,
//! default 200), `ORACLE_NO_SANDBOX=1` (try the fallback without namespaces),
//! `ORACLE_TRACE=1` (time each execution).
//!
//! The sweep: `SWEEP_SEED` (default 8), `SWEEP_PAIRS` (pairs of options in the
//! slice, default 120), `SWEEP_MAX_PAIRS` (pairs of the long run: a seeded sample of
//! 3000 by default, `all` for every pair), `SWEEP_JOBS` (worlds run in parallel,
//! default the number of CPUs), `SWEEP_VERBOSE=1` (coverage by program),
//! `SWEEP_LIST=1` (every candidate with the broker's answer), `SWEEP_DRY=1` (make
//! the candidates, print their number, run nothing), `SWEEP_ALLOW_MISSING=1` (skip,
//! with a note, the programs of programs.txt not installed here, instead of
//! failing), `SWEEP_ONLY=tar,fdfind` (only these programs).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)] // tests may panic and report

use crate::support::oracle::{self, Candidate, Form, Runner, Sandbox, Tally, World};
use crate::support::sweep;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Commands a broker must never allow, run through the execution path: each must be
/// reported with the expected violation (so a wrong `allow` cannot go unseen).
#[test]
fn harness_reports_writers() {
    let sandbox = oracle::detect_sandbox();
    oracle::say_sandbox(sandbox);
    let mut world = World::build(&oracle::work_dir("selftest"), sandbox);
    let both = &[Runner::Bash, Runner::Dash][..];
    let bash = &[Runner::Bash][..];
    // (runners, command, cwd, a substring of one reported violation)
    let mut cases: Vec<(&[Runner], &str, Option<&str>, &str)> = vec![
        (both, "touch new.txt", None, "created proj/new.txt"),
        (
            both,
            "echo x >>README.md",
            None,
            "modified proj/README.md (content",
        ),
        (both, "rm .env", None, "removed proj/.env"),
        (both, "chmod 600 README.md", None, "(mode"),
        (both, "touch -d 2001-01-01 README.md", None, "mtime"),
        (
            both,
            "cp -p README.md R && mv R README.md",
            None,
            "inode (replaced)",
        ),
        (both, "echo x >../neighbour/y", None, "created neighbour/y"),
        (
            both,
            "echo x >home/.bashrc",
            None,
            "created proj/home/.bashrc",
        ),
        (both, "mkdir d", Some("src"), "created proj/src/d"),
        (both, "PATH=0 ls", None, "planted program ran: planted-0-ls"),
        (
            both,
            "PATH=11:$PATH; ls",
            None,
            "planted program ran: planted-11-ls",
        ),
        (
            both,
            "env -i bash -c planted-only-here",
            None,
            "planted-root-planted-only-here",
        ),
        (bash, "printf %n PATH; ls", None, "planted-0-ls"),
        (bash, "true {PATH}<README.md; tree", None, "planted-1"),
        (both, "cd evil.git && git status", None, "fsmonitor-evil"),
        (both, "git status", Some("evil.git"), "fsmonitor-evil"),
        (both, "git -C evil.git diff", None, "diffext-evil"),
        (both, "cd sub && git diff", None, "diffext-sub"),
        (both, "git -C sub status", None, "fsmonitor-sub"),
        (both, "git status", Some("hooked"), "hook-hooked"),
        (both, "HOME=0 git status", None, "fsmonitor-home0"),
        (both, "HOME=11 git diff", None, "diffext-home0"),
        (both, "HOME=$PWD/0 git st", None, "alias-home0"),
        (both, "git lg", None, "alias-home"),
    ];
    // Only inside the namespaces: scratch directories on their own tmpfs, a pid
    // namespace to see left-over processes, no right to set the clock or reach a network.
    if sandbox == Sandbox::Full {
        cases.extend([
            (
                both,
                "echo x >/tmp/oracle-x",
                None,
                "created outside the project: /tmp/oracle-x",
            ),
            (
                both,
                "mkdir /dev/shm/d",
                None,
                "created outside the project: /dev/shm/d",
            ),
            (both, "sleep 5 &", None, "outlived"),
            (both, "date 0101000030", None, "refused an operation"),
            (
                bash,
                "cat README.md <~sys/tcp/127.0.0.1/9 1<&0",
                None,
                "network",
            ),
            (bash, "echo x >/dev/udp/127.0.0.1/9", None, "network"),
            (both, "hostname pwned", None, "host name changed"),
        ]);
    }
    let mut failures = Vec::new();
    for (runners, command, cwd, expected) in &cases {
        for &runner in *runners {
            let c = Candidate {
                cwd: cwd.map(str::to_string),
                ..Candidate::text(command)
            };
            let outcome = world.execute(&c, runner);
            if !outcome.violations.iter().any(|v| v.contains(expected)) {
                failures.push(format!(
                    "{command:?} under {}: expected a violation containing {expected:?}, got {:?} (stderr {:?})",
                    runner.name(),
                    outcome.violations,
                    outcome.stderr
                ));
            }
        }
    }
    let argv = Candidate {
        form: Form::Argv(
            ["env", "-i", "bash", "-c", "planted-only-here"]
                .map(String::from)
                .to_vec(),
        ),
        ..Candidate::text("")
    };
    let outcome = world.execute(&argv, Runner::Argv);
    if !outcome
        .violations
        .iter()
        .any(|v| v.contains("planted-root-planted-only-here"))
    {
        failures.push(format!(
            "argv env -i bash -c planted-only-here: got {:?}",
            outcome.violations
        ));
    }
    // The path the broker's answers take: a wrongly allowed writer is counted.
    let mut tally = Tally::default();
    oracle::run_allowed(
        &mut world,
        &[Candidate::text("ls; touch wrongly-allowed")],
        &mut tally,
    );
    if tally.violations.len() != 2 || tally.executed() != 2 {
        failures.push(format!(
            "run_allowed missed a wrongly allowed writer: {:?}",
            tally.violations
        ));
    }
    // Reading a guarded file is seen (by its access time).
    for (command, file) in [
        ("cat .en?", ".env"),
        ("head -c 5 secret?/key", "secrets/key"),
    ] {
        let outcome = world.execute(&Candidate::text(command), Runner::Dash);
        if !outcome.guarded_reads.iter().any(|r| r.ends_with(file)) {
            failures.push(format!("{command:?}: guarded read not seen: {outcome:?}"));
        }
    }
    // Reading, in the project's own repository and elsewhere, changes nothing
    // (`git grep` and `rg` read guarded files: reported as guarded reads, not failed).
    for command in [
        "ls -la",
        "cat .env secrets/key",
        "git status",
        "git log -p -2",
        "git diff",
        "git show HEAD~1",
        "git grep TODO",
        "git blame src/main.rs",
        "rg -n TODO",
        "find . -name '*.rs'",
        "cat README.md </dev/null >/dev/null 2>&1",
    ] {
        for runner in [Runner::Bash, Runner::Dash] {
            let outcome = world.execute(&Candidate::text(command), runner);
            if !outcome.violations.is_empty()
                || outcome.timed_out
                || (command.starts_with("cat .env") && outcome.guarded_reads.is_empty())
            {
                failures.push(format!(
                    "read-only {command:?} under {}: {:?} (timed out: {})",
                    runner.name(),
                    outcome.violations,
                    outcome.timed_out
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "the harness missed:\n{}",
        failures.join("\n")
    );
}

/// The slice run by every `cargo test`: every corpus line of the area files
/// (`corpus/*.tsv`), every sixth line of corpus.tsv, the mechanisms in the
/// grammar's special list, and ORACLE_SLICE generated commands.
#[test]
fn fast_slice() {
    let seed = env_number("ORACLE_SEED", 8);
    let count = env_number("ORACLE_SLICE", 200) as usize;
    let sandbox = oracle::detect_sandbox();
    oracle::say_sandbox(sandbox);
    let mut world = World::build(&oracle::work_dir("slice"), sandbox);
    let mut candidates: Vec<Candidate> = oracle::corpus_candidates()
        .into_iter()
        .enumerate()
        .filter(|(i, c)| !c.origin.starts_with("corpus.tsv") || i % 6 == (seed % 6) as usize)
        .map(|(_, c)| c)
        .collect();
    candidates.extend(oracle::special());
    candidates.extend(oracle::generated(seed, count));
    let tally = run(&mut world, candidates);
    println!("violations by kind:\n{}", tally.kinds_report());
    println!("{}", tally.line(seed, sandbox));
    assert!(
        tally.violations.is_empty(),
        "commands toolgate allows in plan mode changed something:\n{}\n{}",
        tally.violations.join("\n"),
        tally.line(seed, sandbox)
    );
}

/// The long run (`scripts/oracle [COUNT] [SEED]`): the whole corpus, then generated
/// commands until ORACLE_COUNT executions.
#[test]
#[ignore = "long: run with scripts/oracle"]
fn long_run() {
    let seed = env_number("ORACLE_SEED", 8);
    let target = env_number("ORACLE_COUNT", 20_000) as usize;
    let sandbox = oracle::detect_sandbox();
    oracle::say_sandbox(sandbox);
    let mut world = World::build(&oracle::work_dir("long"), sandbox);
    world.timeout = std::time::Duration::from_secs(5);
    let started = std::time::Instant::now();
    let mut candidates = oracle::corpus_candidates();
    candidates.extend(oracle::special());
    let mut tally = run(&mut world, candidates);
    println!("corpus done: {}", tally.line(seed, sandbox));
    let mut rng = oracle::Rng::new(seed);
    let mut seen = std::collections::BTreeSet::new();
    while tally.executed() < target {
        let mut batch = Vec::new();
        let mut tries = 0;
        while batch.len() < 400 && tries < 100_000 {
            tries += 1;
            let c = oracle::generate(&mut rng);
            if seen.insert((c.form.clone(), c.cwd.clone())) {
                batch.push(c);
            }
        }
        assert!(!batch.is_empty(), "the grammar has no new commands left");
        tally.add(run(&mut world, batch));
        println!(
            "... {} executions, {} violations, {:.0} s",
            tally.executed(),
            tally.violations.len(),
            started.elapsed().as_secs_f64()
        );
    }
    println!("violations by kind:\n{}", tally.kinds_report());
    println!("{}", tally.line(seed, sandbox));
    println!(
        "time: {:.0} s; world repaired {} times",
        started.elapsed().as_secs_f64(),
        world.rebuilds
    );
    assert!(
        tally.violations.is_empty(),
        "commands toolgate allows in plan mode changed something:\n{}\n{}",
        tally.violations.join("\n"),
        tally.line(seed, sandbox)
    );
}

/// Ask the broker about `candidates` and execute what it allows.
fn run(world: &mut World, candidates: Vec<Candidate>) -> Tally {
    let (allowed, refused) = oracle::ask_broker(world, &candidates);
    let mut tally = Tally {
        candidates: candidates.len(),
        allowed: allowed.len(),
        refused,
        ..Tally::default()
    };
    oracle::run_allowed(world, &allowed, &mut tally);
    tally
}

/// The option sweep's test: the model, minus what is not installed (a failure
/// unless SWEEP_ALLOW_MISSING=1), swept with `budget`; fails on any violation or
/// guarded read, and when an option of an installed program was not covered.
fn option_sweep(budget: sweep::Budget, timeout: std::time::Duration) {
    let seed = env_number("SWEEP_SEED", 8);
    let mut programs = sweep::parse(sweep::PROGRAMS).unwrap_or_else(|e| panic!("{e}"));
    // A program installed under one of its names only (fd-find's `fdfind` on
    // Debian) is swept under the names it has here.
    for p in &mut programs {
        if p.names.len() > 1 && p.names.iter().any(|n| sweep::installed(n)) {
            p.names.retain(|n| sweep::installed(n));
        }
    }
    let mut missing = Vec::new();
    // SWEEP_ONLY=tar,unzip: only these programs (any of their names).
    let only: Option<Vec<String>> = std::env::var("SWEEP_ONLY")
        .ok()
        .map(|v| v.split(',').map(str::to_string).collect());
    let include: Vec<bool> = programs
        .iter()
        .map(|p| {
            let absent: Vec<&String> = p.names.iter().filter(|n| !sweep::installed(n)).collect();
            // sudo and doas are modelled only to find the command they run:
            // the broker refuses them whatever they run, so nothing of theirs
            // is admitted, installed or not.
            let never_admitted = ["sudo", "doas"];
            missing.extend(
                absent
                    .iter()
                    .filter(|n| !never_admitted.contains(&n.as_str()))
                    .map(|n| n.to_string()),
            );
            !absent.contains(&&p.names[0])
                && only
                    .as_ref()
                    .is_none_or(|only| p.names.iter().any(|n| only.contains(n)))
        })
        .collect();
    if !missing.is_empty() {
        let allow = std::env::var("SWEEP_ALLOW_MISSING").is_ok_and(|v| v == "1");
        assert!(
            allow,
            "programs of programs.txt not installed on this machine: {} (install them, or set SWEEP_ALLOW_MISSING=1 to skip them)",
            missing.join(", ")
        );
        println!(
            "option sweep: not installed, skipped (SWEEP_ALLOW_MISSING=1): {}",
            missing.join(", ")
        );
    }
    let sandbox = oracle::detect_sandbox();
    oracle::say_sandbox(sandbox);
    let plan = sweep::plan(&programs, &include, seed, budget);
    println!(
        "option sweep: {:?}: {} candidates, {} of {} pairs of options",
        budget,
        plan.swept.len(),
        plan.pairs_taken,
        plan.pairs_total
    );
    if std::env::var("SWEEP_DRY").is_ok_and(|v| v == "1") {
        return;
    }
    let jobs = env_number(
        "SWEEP_JOBS",
        std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
    )
    .max(1);
    let mut worlds: Vec<World> = (0..jobs)
        .map(|j| {
            let mut world = World::build(&oracle::work_dir(&format!("sweep-{j}")), sandbox);
            world.timeout = timeout;
            world
        })
        .collect();
    let started = std::time::Instant::now();
    let report = sweep::run(&mut worlds, &programs, &plan.swept, true);
    if std::env::var("SWEEP_VERBOSE").is_ok_and(|v| v == "1") {
        print!("{}", report.coverage());
    }
    let line = report.line(seed);
    println!("{line}");
    println!(
        "time: {:.0} s with {jobs} worlds; worlds repaired {} times",
        started.elapsed().as_secs_f64(),
        worlds.iter().map(|w| w.rebuilds).sum::<usize>()
    );
    let distinct = report.distinct_failures();
    if !distinct.is_empty() {
        println!("distinct failures (by program and option):");
        for d in &distinct {
            println!("  {d}");
        }
    }
    let uncovered: Vec<String> = report
        .programs
        .iter()
        .filter(|p| p.covered.len() < p.listed)
        .map(|p| format!("{} ({}/{})", p.name, p.covered.len(), p.listed))
        .collect();
    assert!(
        uncovered.is_empty(),
        "options no candidate used: {}",
        uncovered.join(", ")
    );
    assert!(
        report.failures.is_empty(),
        "commands toolgate allows in plan mode wrote or read a guarded file:\n{}\n{line}",
        distinct.join("\n")
    );
}

/// Every option alone and a sample of pairs, in every `cargo test`.
#[test]
fn option_sweep_slice() {
    let pairs = env_number("SWEEP_PAIRS", 120) as usize;
    option_sweep(
        sweep::Budget::Slice { pairs },
        std::time::Duration::from_secs(2),
    );
}

/// Every option in every shape, every pair (`scripts/option-sweep [SEED]`).
#[test]
#[ignore = "long: run with scripts/option-sweep"]
fn option_sweep_long() {
    let max_pairs = match std::env::var("SWEEP_MAX_PAIRS").as_deref() {
        Ok("all") => None,
        Ok(n) => Some(n.parse().expect("SWEEP_MAX_PAIRS is a number or `all`")),
        Err(_) => Some(3000),
    };
    option_sweep(
        sweep::Budget::Full { max_pairs },
        std::time::Duration::from_secs(5),
    );
}

/// The sweep's own model of options that write or read guarded files, as the
/// broker must refuse them: what the sweep makes for them is reported when run as
/// if allowed (bypassing the broker, as `harness_reports_writers` does).
const BAD_MODEL: &str = "\
[sort]
-o, --output =name !write writes a file
-r, --reverse
[time]
posix
-f, --format =data
-o, --output =name !write writes a file
-p, --portability
[du]
operands name
--files0-from =file +lists-operands
-a, --all
[wc]
--files0-from =file +lists-operands
-l, --lines
";

#[test]
fn sweep_catches_wrongly_allowed() {
    let programs = sweep::parse(BAD_MODEL).unwrap();
    let plan = sweep::plan(
        &programs,
        &[true; 4],
        8,
        sweep::Budget::Full { max_pairs: None },
    );
    // (the start of a command the sweep must make, up to its operands; the runners;
    // program, option and what is reported)
    let cases: &[(&str, &[Runner], &str, &str, &str)] = &[
        (
            "sort -o out",
            &[Runner::Bash, Runner::Dash],
            "sort",
            "--output",
            "created proj/out",
        ),
        // bash's `time` keyword reads `-o` as the command: only dash runs GNU time.
        (
            "time -o out",
            &[Runner::Dash],
            "time",
            "--output",
            "created proj/out",
        ),
        (
            "time -oout",
            &[Runner::Dash],
            "time",
            "--output",
            "created proj/out",
        ),
        // After another option's value.
        (
            "time -f 3 -o out",
            &[Runner::Dash],
            "time",
            "--output",
            "created proj/out",
        ),
        // du reads its list from `.env`.
        (
            "du --files0-from=.env",
            &[Runner::Bash, Runner::Dash],
            "du",
            "--files0-from",
            "proj/.env",
        ),
        // wc reads `.env`, named in the list.
        (
            "wc --files0-from=lists/guarded0",
            &[Runner::Bash, Runner::Dash],
            "wc",
            "--files0-from",
            "proj/.env",
        ),
    ];
    let mut chosen: Vec<sweep::Swept> = Vec::new();
    for (start, ..) in cases {
        let s = plan
            .swept
            .iter()
            .find(|s| {
                let Form::Text(t) = &s.candidate.form else {
                    return false;
                };
                (t == start || t.starts_with(&format!("{start} "))) && s.options.len() == 1
            })
            .unwrap_or_else(|| panic!("the sweep makes no command {start:?}"));
        chosen.push(s.clone());
    }
    let pair = plan.swept.iter().any(|s| {
        programs[s.program].name() == "time" && s.options.len() == 2 && s.options.contains(&0)
    });
    assert!(pair, "the sweep makes no pair with `time -f`");
    let sandbox = oracle::detect_sandbox();
    let world = World::build(&oracle::work_dir("sweep-selftest"), sandbox);
    let report = sweep::run(&mut [world], &programs, &chosen, false);
    println!("{}", report.line(8));
    for d in report.distinct_failures() {
        println!("  {d}");
    }
    let mut missed = Vec::new();
    for ((_, runners, program, option, expected), s) in cases.iter().zip(&chosen) {
        let Form::Text(command) = &s.candidate.form else {
            unreachable!()
        };
        for runner in *runners {
            let found = report.failures.iter().any(|f| {
                f.command == *command
                    && f.program == *program
                    && f.options == [option.to_string()]
                    && f.what.iter().any(|w| {
                        w.contains(expected) && w.contains(&format!("under {}", runner.name()))
                    })
            });
            if !found {
                missed.push(format!("{command:?} under {}: {expected:?}", runner.name()));
            }
        }
    }
    assert!(
        missed.is_empty(),
        "the sweep missed:\n{}\nfailures: {:#?}",
        missed.join("\n"),
        report.failures
    );
}
