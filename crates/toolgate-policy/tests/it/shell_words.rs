//! The words of shell commands as paths, through `Policy::evaluate`: globs,
//! directories and run-time expansions meet read rules; `~user`, `~+`, `$HOME`
//! words leave the project; patterns, scripts and data are not paths.
//! One line per case: (policy, mode, command, expected).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use serde_json::json;
use toolgate_policy::{Mode, Policy};

use crate::common::{policy, render};

#[test]
fn shell_words_as_paths() {
    use Mode::*;
    let default = policy(None);
    let guarded = policy(Some(
        json!({"permission": {"read": {"*.env": "deny", "secrets/**": "deny"}}}),
    ));
    // A later rule that contains the whole word decides it: `*.rs` allows every
    // `src/*.rs`, so `*.env.*` (which could match `src/x.env.rs`) does not ask.
    let sources_allowed = policy(Some(
        json!({"permission": {"read": {"*.rs": "allow", "secrets/public/**": "allow"}}}),
    ));
    let public = policy(Some(
        json!({"permission": {"read": {"secrets/**": "deny", "secrets/public/**": "allow"}}}),
    ));
    let keys = policy(Some(
        json!({"permission": {"read": {"keys/*/secret*": "deny", "keys/public/*": "allow"}}}),
    ));
    let nested = policy(Some(json!({"permission": {"read": {"**/keys/*": "deny"}}})));
    let vault = policy(Some(
        json!({"permission": {"read": {"vault": "ask", "vault/**": "deny"}}}),
    ));
    let cases: &[(&Policy, Mode, &str, &str)] = &[
        // A glob or expansion where grep, sed or jq read data can become
        // several words, pushing file names into file places.
        (&guarded, ReadOnly, "grep -i .env*", "deny read:*.env"),
        (&guarded, Auto, "grep -i .env* src/a.rs", "deny read:*.env"),
        (&guarded, Auto, "rg -e secret? src", "deny read:secrets/**"),
        (&guarded, Auto, "jq . secrets/*", "deny read:secrets/**"),
        (&guarded, Plan, "grep -i '.env*' src/a.rs", "allow"),
        // `git grep` and searches without a path read the working tree.
        (&guarded, Auto, "git grep -n TODO", "deny read:secrets/**"),
        (&guarded, Auto, "git -C src grep x", "deny read:secrets/**"),
        (&guarded, Auto, "bash -c 'rg x'", "deny read:secrets/**"),
        (
            &guarded,
            Auto,
            "bash -c 'git grep -e x'",
            "deny read:secrets/**",
        ),
        (&guarded, Auto, "git log -3", "allow"),
        // A sed script is one word: `$` in `/^$/` is not an expansion.
        (
            &default,
            Plan,
            "sed -n '/^\\[package\\]/,/^$/p' Cargo.toml",
            "allow",
        ),
        // A pattern that matches at any depth is not reached through
        // directories (or `git log --oneline` would be a directory above one);
        // globs and files still reach it.
        (&nested, Auto, "tar cf x.tgz src", "allow"),
        (&nested, Auto, "git log --oneline", "allow"),
        (&nested, Auto, "cat src/keys/*", "deny read:**/keys/*"),
        (&nested, Auto, "cat src/k?ys/id", "deny read:**/keys/*"),
        // The directory itself asks; what is under it is denied: the stricter holds.
        (&vault, Auto, "tar cf x.tgz vault", "deny read:vault/**"),
        (&vault, Plan, "cat vault", "ask read [\"vault\"]"),
        (&vault, Plan, "ls vault", "allow"),
        (&default, ReadOnly, "wc -l src/*.rs", "deny read:*.env.*"),
        (&sources_allowed, ReadOnly, "wc -l src/*.rs", "allow"),
        (&sources_allowed, ReadOnly, "cat src/*", "deny read:*.env"),
        (&public, Auto, "cat secrets/public/*", "allow"),
        // The directory itself is under `secrets/**`.
        (
            &public,
            Auto,
            "tar cf x.tgz secrets/public",
            "deny read:secrets/**",
        ),
        (&keys, Auto, "tar cf x.tgz keys/public", "allow"),
        (&keys, Auto, "tar cf x.tgz keys", "deny read:keys/*/secret*"),
        (
            &public,
            Auto,
            "cat secrets/publi?/x",
            "deny read:secrets/**",
        ),
        (
            &public,
            Auto,
            "tar cf x.tgz secrets",
            "deny read:secrets/**",
        ),
        // Globs reach the files they could match (issue 8, item 12).
        (&guarded, ReadOnly, "cat .en?", "deny read:*.env"),
        (&guarded, ReadOnly, "head -c 999 .env*", "deny read:*.env"),
        (
            &guarded,
            Auto,
            "cp secret?/key /tmp/x",
            "deny read:secrets/**",
        ),
        (
            &guarded,
            Auto,
            "tar czf /tmp/x.tgz secret[s]",
            "deny read:secrets/**",
        ),
        // An archiver's model describes listing: creating reads its operands.
        (
            &guarded,
            Auto,
            "tar czf /tmp/x.tgz secrets",
            "deny read:secrets/**",
        ),
        (
            &guarded,
            Auto,
            "tar -c -f x.tar secrets/key",
            "deny read:secrets/**",
        ),
        (
            &guarded,
            Auto,
            "tar --create --file=x.tar .env",
            "deny read:*.env",
        ),
        (&guarded, Auto, "tar -tf .env", "deny read:*.env"),
        (&guarded, Auto, "cat .e*", "deny read:*.env"),
        (&guarded, Auto, "cat ?env", "deny read:*.env"),
        (&guarded, Auto, "cat .[e]nv", "deny read:*.env"),
        (&guarded, Auto, "cat {.,}env", "deny read:*.env"),
        (&guarded, Auto, "cat .e@(n)v", "deny read:*.env"),
        (&guarded, Auto, "cat */.env", "deny read:*.env"),
        (&guarded, Auto, "cat < .en?", "deny read:*.env"),
        (&guarded, Auto, "cat secr*/key", "deny read:secrets/**"),
        (&guarded, Auto, "cat .*/secrets/key", "deny read:secrets/**"),
        (&guarded, Auto, "sudo cat secret?/x", "deny read:secrets/**"),
        (&guarded, Auto, "timeout 5 cat .en?", "deny read:*.env"),
        (&guarded, Auto, "bash -c 'cat .en?'", "deny read:*.env"),
        // A script word that reads like the wrapper's tail is still judged as a script.
        (
            &guarded,
            Auto,
            "bash -c 'cat .en?' cat '.en?'",
            "deny read:*.env",
        ),
        (
            &guarded,
            Auto,
            "grep -r KEY secret?",
            "deny read:secrets/**",
        ),
        (&guarded, Auto, "grep -f.env x", "deny read:*.env"),
        (&guarded, Auto, "cat -- -.env", "deny read:*.env"),
        (&guarded, Auto, "cp -- -.env /tmp", "deny read:*.env"),
        // A quoted glob character is a file name.
        (&guarded, Auto, "cat 'x.en?'", "allow"),
        (&guarded, Auto, "cat x.en\\?", "allow"),
        // The built-in `.env` guard asks the same way; `.env.example` stays allowed.
        (&default, Plan, "cat .en?", "ask read [\".en?\"]"),
        (&default, ReadOnly, "cat .env*", "deny read:*.env"),
        (&default, Plan, "cat .env.example", "allow"),
        (&default, Auto, "cat .en?", "allow read:*.env"),
        // Directories read recursively reach the files under them.
        (
            &guarded,
            Auto,
            "tar czf x.tgz secrets",
            "deny read:secrets/**",
        ),
        (&guarded, Auto, "cp -r secret? /tmp", "deny read:secrets/**"),
        (&guarded, Auto, "zip -r x secrets", "deny read:secrets/**"),
        (
            &guarded,
            Auto,
            "tar -C secrets -czf /tmp/x .",
            "deny read:secrets/**",
        ),
        (&guarded, Plan, "rg TODO", "deny read:secrets/**"),
        (&guarded, Plan, "grep -rn TODO .", "deny read:secrets/**"),
        (
            &guarded,
            Auto,
            "find secrets -exec cat {} +",
            "deny read:secrets/**",
        ),
        // Names, not contents: listings are not reads.
        (&guarded, Plan, "ls secrets", "allow"),
        (&guarded, Plan, "ls .env*", "allow"),
        (&guarded, Plan, "find secrets -name '*.key'", "allow"),
        (&guarded, Plan, "cat secrets", "allow"),
        // `.` and `..`, `cd` and `git REV:PATH`.
        (&guarded, Auto, "cat ./.env", "deny read:*.env"),
        (&guarded, Auto, "cat src/../.env", "deny read:*.env"),
        (
            &guarded,
            Auto,
            "cd secrets && cat key",
            "deny read:secrets/**",
        ),
        (
            &guarded,
            Auto,
            "cd src; cat ../secrets/key",
            "deny read:secrets/**",
        ),
        (
            &guarded,
            Auto,
            "git show HEAD:secrets/key",
            "deny read:secrets/**",
        ),
        // Words the shell decides at run time may be any file.
        (&guarded, Auto, "cat \"$PWD/.env\"", "deny read:*.env"),
        (&guarded, Auto, "cat \"$PWD/secrets/k\"", "deny read:*.env"),
        (&guarded, Auto, "cat $(echo .env)", "deny read:*.env"),
        (&guarded, Auto, "cat ${X:-.env}", "deny read:*.env"),
        // `$(< FILE)` reads FILE.
        (&guarded, Auto, "echo \"$(< .env)\"", "deny read:*.env"),
        (&guarded, Auto, "echo $(<secret?/k)", "deny read:secrets/**"),
        // `<(…)` is a pipe; the command inside reads what it names.
        (
            &guarded,
            Auto,
            "cat <(cat secrets/k)",
            "deny read:secrets/**",
        ),
        (&guarded, Auto, "diff <(cat .env) x", "deny read:*.env"),
        // Names a producer prints meet the guards they match on the disk.
        (
            &guarded,
            Auto,
            "cat $(find . -name '*.env')",
            "deny read:*.env",
        ),
        (
            &guarded,
            Auto,
            "find secrets | xargs cat",
            "deny read:secrets/**",
        ),
        // Without the disk, a name may split into any word.
        (
            &guarded,
            Auto,
            "for f in secret?/*; do cat \"$f\"; done",
            "deny read:*.env",
        ),
        (
            &guarded,
            Auto,
            "git ls-files | while read -r f; do cat \"$f\"; done",
            "deny read:*.env",
        ),
        (
            &guarded,
            Auto,
            "bash -c 'cat < secrets/k'",
            "deny read:secrets/**",
        ),
        (
            &guarded,
            Auto,
            "bash -c 'cat 2> /tmp/x < secret?/k'",
            "deny read:secrets/**",
        ),
        (&guarded, Auto, "cd - && cat key", "deny read:*.env"),
        (
            &default,
            Auto,
            "cat \"$PWD/.env\"",
            "allow external_directory:*",
        ),
        // `~user`, `~+`, `~-`, `$HOME` are paths outside the project, also as
        // `--flag=PATH`, attached to a flag and as a redirection target.
        (
            &default,
            ReadOnly,
            "cat ~root/x",
            "deny external_directory:*",
        ),
        (
            &default,
            Plan,
            "cat ~root/x",
            "ask external_directory [\"~root/x\"]",
        ),
        (
            &default,
            Plan,
            "cat ~+/x",
            "ask external_directory [\"~+/x\"]",
        ),
        (
            &default,
            Plan,
            "cat ~-/x",
            "ask external_directory [\"~-/x\"]",
        ),
        (
            &default,
            Plan,
            "cat ~nobody",
            "ask external_directory [\"~nobody\"]",
        ),
        (
            &default,
            Plan,
            "cat $HOME/x",
            "ask external_directory [\"/home/me/x\"]",
        ),
        (
            &default,
            Plan,
            "cat ${HOME}/x",
            "ask external_directory [\"/home/me/x\"]",
        ),
        (
            &default,
            Plan,
            "cat \"$HOME\"/x",
            "ask external_directory [\"/home/me/x\"]",
        ),
        (
            &default,
            Plan,
            "cat $OLDPWD/x",
            "ask external_directory [\"$OLDPWD/x\"]",
        ),
        (
            &default,
            Plan,
            "diff --from-file=~root/x a",
            "ask external_directory [\"~root/x\"]",
        ),
        (
            &default,
            Plan,
            "grep -f~root/x y",
            "ask external_directory [\"~root/x\"]",
        ),
        (&default, Plan, "cat <~root/x", "deny"),
        (&default, Plan, "cat f <~sys/tcp/127.0.0.1/9", "deny"),
        (
            &default,
            Plan,
            "cd ~root && cat x",
            "ask external_directory [\"~root\", \"x\"]",
        ),
        (&default, ReadOnly, "cat '~root/x'", "allow"),
        (
            &default,
            Plan,
            "ls -la .*",
            "ask external_directory [\"/work\"]",
        ),
        // Patterns, scripts, filters and data are not paths.
        (&default, ReadOnly, "rg -n '/api/v1' src", "allow"),
        (&default, ReadOnly, "rg -e /api/v1 -g '/x/**' src", "allow"),
        (&default, ReadOnly, "grep -rn '/usr/lib' .", "allow"),
        (&default, ReadOnly, "grep -e /x/y f", "allow"),
        (&default, ReadOnly, "grep -C 2 -e/x/y f", "allow"),
        (&default, ReadOnly, "sed -n '/start/,/end/p' f", "allow"),
        (&default, ReadOnly, "jq '.a/.b' f.json", "allow"),
        (
            &default,
            ReadOnly,
            "find . -name '/x' -path '*/src/*'",
            "allow",
        ),
        (&default, ReadOnly, "cut -d/ -f2 f", "allow"),
        (&default, ReadOnly, "sort -t/ -k2 f", "allow"),
        (&default, ReadOnly, "echo /etc/passwd", "allow"),
        (&default, ReadOnly, "printf '%s\\n' /etc/x", "allow"),
        (&default, ReadOnly, "/usr/bin/rg foo", "allow"),
        (&default, ReadOnly, "LANG=C rg -n /api/v1 src", "allow"),
        (&default, ReadOnly, "timeout 5 grep -rn /usr/lib .", "allow"),
        // ... but files still are, wherever the program takes them.
        (
            &default,
            Plan,
            "rg -f /etc/pats src",
            "ask external_directory [\"/etc/pats\"]",
        ),
        (
            &default,
            Plan,
            "rg --files /etc",
            "ask external_directory [\"/etc\"]",
        ),
        (
            &default,
            Plan,
            "grep -e x /etc/passwd",
            "ask external_directory [\"/etc/passwd\"]",
        ),
        (
            &default,
            Plan,
            "sed -n 1p /etc/passwd",
            "ask external_directory [\"/etc/passwd\"]",
        ),
        (
            &default,
            Plan,
            "jq . /etc/x.json",
            "ask external_directory [\"/etc/x.json\"]",
        ),
        (
            &default,
            Plan,
            "find /usr -name x",
            "ask external_directory [\"/usr\"]",
        ),
        // After an operand, POSIXLY_CORRECT makes `-e` and its value files.
        (
            &default,
            Plan,
            "grep x -e /etc/passwd",
            "ask external_directory [\"/etc/passwd\"]",
        ),
        // A unique abbreviation is read as getopt_long reads it: `--reg`
        // is `--regexp`, whose value is the pattern; an ambiguous one is
        // refused.
        (&default, Plan, "grep --reg /x f", "allow"),
        // git's line ranges are no paths; a `:FILE` after one is.
        (&guarded, Auto, "git log -L 1,5:.env", "deny read:*.env"),
        (&default, Plan, "grep --no /x f", "deny"),
        // Inside `bash -c` words are guessed: every word may be a path.
        (
            &default,
            Plan,
            "bash -c 'rg /api src'",
            "ask external_directory [\"/api\"]",
        ),
    ];
    let mut failures = Vec::new();
    for (policy, mode, command, expected) in cases {
        let actual = render(policy, *mode, command);
        if actual != *expected {
            failures.push(format!(
                "{mode} {command}\n  expected {expected}\n  actual   {actual}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
