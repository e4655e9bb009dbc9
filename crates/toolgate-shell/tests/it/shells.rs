//! Which shell reads a script: bash-only syntax is refused unless the script
//! is known to run in bash (`bash -c`, `["bash", "-lc", …]`); `sh`/`dash`
//! scripts also lose brace expansion. Argv and string forms agree.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use toolgate_shell::{analyze, Script};

use crate::common;

/// `None`: read-only; `Some(s)`: refused with a reason containing `s`.
fn check_argv(argv: &[&str], expected: Option<&str>) {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    let a = analyze(Script::Argv(&argv), &common::options());
    let got = a.refusal.map(|r| r.reason);
    match (expected, &got) {
        (None, None) => {}
        (Some(want), Some(r)) if r.contains(want) => {}
        _ => panic!("{argv:?}: expected {expected:?}, got {got:?}"),
    }
}

fn check_text(script: &str, expected: Option<&str>) {
    let a = analyze(Script::Text(script), &common::options());
    let got = a.refusal.map(|r| r.reason);
    match (expected, &got) {
        (None, None) => {}
        (Some(want), Some(r)) if r.contains(want) => {}
        _ => panic!("{script:?}: expected {expected:?}, got {got:?}"),
    }
}

const ANSI: &str = "echo $'\\' ;touch pwned #'";
const BASH_ONLY: &str = "bash-only syntax";

#[test]
fn argv_scripts_are_read_by_their_shell() {
    for (argv, expected) in [
        (&["sh", "-c", ANSI][..], Some(BASH_ONLY)),
        (&["/bin/sh", "-c", ANSI], Some(BASH_ONLY)),
        (&["dash", "-c", ANSI], Some(BASH_ONLY)),
        (&["/usr/bin/dash", "-lc", ANSI], Some(BASH_ONLY)),
        (&["zsh", "-c", "cat $'x' | cat"], Some(BASH_ONLY)),
        (&["bash", "-c", ANSI], None),
        (&["bash", "-lc", "ls &>/dev/null; grep x <<< y"], None),
        (&["/bin/bash", "-c", "ls |& head"], None),
        (&["sh", "-c", "ls &>/dev/null"], Some("`&>`")),
        (&["sh", "-c", "cat {a,b}"], Some("brace expansion")),
        (&["bash", "-c", "cat {a,b}"], None),
        (&["sh", "-c", "ls -la && git status"], None),
        (
            &["sh", "-c", "LC_ALL=zh_CN.GBK\nls"],
            Some("locale assignment"),
        ),
        (
            &["bash", "-c", "LC_ALL=zh_CN.GBK\nls"],
            Some("locale assignment"),
        ),
        (
            &["sh", "-c", "cat f <~sys/tcp/127.0.0.1/9 1<&0"],
            Some("starts with `~`"),
        ),
        (
            &["bash", "-c", "true {PATH}<README; ls"],
            Some("named descriptor"),
        ),
        (&["ash", "-c", "ls"], Some("runs code")),
    ] {
        check_argv(argv, expected);
    }
}

#[test]
fn nested_shells_switch_the_reading() {
    for (script, expected) in [
        // The top level may be bash, zsh or /bin/sh.
        (ANSI, Some(BASH_ONLY)),
        ("echo {a,b}", None),
        // An explicit bash reads bash; a shell inside it reads its own way.
        ("bash -c \"echo \\$'x'\"", None),
        ("bash -c \"sh -c 'echo {a,b}'\"", Some("brace expansion")),
        ("sh -c \"bash -c 'ls |& head'\"", None),
        ("sh -c 'ls |& head'", Some("`|&`")),
        ("env sh -c 'grep x <<< y'", Some("`<<<`")),
        ("timeout 5 dash -c '[[ a > b ]]'", Some("`[[ … ]]`")),
        ("bash -c '[[ a > b ]]'", None),
    ] {
        check_text(script, expected);
    }
}

#[test]
fn always_is_literal_for_unsafe_inputs_and_bash_only_syntax() {
    for (script, always) in [
        ("cat f </dev/tcp/127.0.0.1/9", "cat f </dev/tcp/127.0.0.1/9"),
        ("wc -l <../x", "wc -l <../x"),
        ("grep x f &>/dev/null", "grep x f &>/dev/null"),
        ("cut -d$'\\t' -f1 f", "cut -d\t -f1 f"),
        ("wc -l <src/lib.rs", "wc *"),
    ] {
        let a = analyze(Script::Text(script), &common::options());
        assert_eq!(a.commands[0].always, always, "{script}");
    }
}
