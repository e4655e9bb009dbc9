//! The read-only table: which programs only read, and which of their flags
//! or subcommands make them write or run other programs.

use crate::context::{Env, State};
use crate::opts::{self, plain_args, Arg, Rules, Short};
use crate::programs::{is_interpreter, is_wrapper, legacy_count, not_read_only};
use crate::syntax::Word;
use crate::{git, Refusal, RefusalKind};

/// Programs that only read whatever their arguments are.
pub(crate) fn always_read_only(name: &str) -> bool {
    matches!(
        name,
        "cat"
            | "cd"
            | "cut"
            | "df"
            | "diff"
            | "dirname"
            | "basename"
            | "du"
            | "echo"
            | "printf"
            | "false"
            | "true"
            | "head"
            | "tail"
            | "id"
            | "ls"
            | "nl"
            | "paste"
            | "pwd"
            | "readlink"
            | "realpath"
            | "rev"
            | "seq"
            | "stat"
            | "tr"
            | "uname"
            | "wc"
            | "which"
            | "whoami"
            | "grep"
            | "egrep"
            | "fgrep"
            | "test"
            | "["
            | "[["
            | "tac"
            | "cmp"
            | "comm"
            | "expr"
            | "jq"
            | "sleep"
            | "column"
            | "od"
            | "hexdump"
            | "strings"
            | "sha1sum"
            | "sha224sum"
            | "sha256sum"
            | "sha384sum"
            | "sha512sum"
            | "md5sum"
            | "b2sum"
            | "cksum"
            | "nproc"
            | "free"
            | "ps"
            | "type"
            | "locale"
    )
}

/// Programs that `xargs` may run: read-only whatever arguments arrive on
/// its input, options included (`printf -- -o x | xargs sort` would write):
/// a modelled program none of whose options writes, runs or changes
/// anything (the files any of them reads are reads of any file, which the
/// command already makes).
pub(crate) fn any_arguments_safe(name: &str) -> bool {
    match crate::model::program(name) {
        Some(p) => {
            !p.posix && p.max_operands.is_none() && p.options.iter().all(|o| o.effect.is_none())
        }
        None => always_read_only(name) && !matches!(name, "cd" | "printf" | "test" | "[" | "[["),
    }
}

/// `read [-r] NAME...`: reads a line of the input into shell variables.
/// The variables may only be lower-case ones no program reads from the
/// environment (`PATH`, `IFS`, `http_proxy` would change what later
/// commands do); their values are unknown to every later word.
fn read(args: &[Word]) -> Result<(), Refusal> {
    let mut names = 0;
    for w in args {
        if !w.is_plain() {
            return Err(Refusal::new(format!(
                "`read` into `{}`, which is not a plain name, cannot be proven read-only",
                w.text
            )));
        }
        if w.text == "-r" && names == 0 {
            continue;
        }
        if !crate::parse::harmless_variable(&w.text) {
            return Err(Refusal::with_kind(
                RefusalKind::Environment,
                format!(
                    "`read {}` sets a variable the environment could give programs (only lower-case names are allowed)",
                    w.text
                ),
            ));
        }
        names += 1;
    }
    if names == 0 {
        // `REPLY`.
        return Err(Refusal::with_kind(
            RefusalKind::Environment,
            "`read` without a name sets `REPLY`; name a lower-case variable",
        ));
    }
    Ok(())
}

/// Judge a program (already resolved, not a wrapper) with its arguments.
pub(crate) fn judge(
    name: &str,
    args: &[Word],
    env: &Env<'_>,
    state: &mut State,
) -> Result<(), Refusal> {
    match name {
        "cd" => {
            cd(args, state);
            Ok(())
        }
        "printf" => printf(args),
        "test" | "[" | "[[" => test(name, args),
        "read" => read(args),
        "break" | "continue"
            if args
                .iter()
                .all(|w| w.is_plain() && w.text.bytes().all(|c| c.is_ascii_digit())) =>
        {
            Ok(())
        }
        "tar" => crate::archives::tar(args, env),
        "unzip" | "zipinfo" => crate::archives::unzip(name, args, env),
        _ if crate::model::program(name).is_some() => modelled(name, args, env),
        _ if always_read_only(name) => Ok(()),
        "rg" => checked(name, args, &RG).map(drop),
        "sed" => sed(args, env),
        "awk" | "gawk" | "mawk" | "nawk" | "original-awk" => awk(name, args, env),
        "sort" => checked(name, args, &SORT).map(drop),
        "base64" => checked(name, args, &BASE64).map(drop),
        "tree" => checked(name, args, &TREE).map(drop),
        "file" => checked(name, args, &FILE).map(drop),
        "date" => date(args),
        "xxd" => xxd(args),
        "uniq" => {
            let positional = checked(name, args, &UNIQ)?;
            if positional.len() > 1 {
                return Err(Refusal::new(
                    "`uniq INPUT OUTPUT` writes its second file argument",
                ));
            }
            Ok(())
        }
        "hostname" => hostname(args),
        "git" => git::judge(args, env, state),
        _ if version_only(name, args) => Ok(()),
        _ => match crate::toolchain::judge(name, args, env) {
            Some(verdict) => verdict,
            None => Err(Refusal::new(not_read_only(name))),
        },
    }
}

/// A program judged by its model alone: every option known, none unsafe;
/// the files its options read are recorded for the policy.
fn modelled(name: &str, args: &[Word], env: &Env<'_>) -> Result<(), Refusal> {
    let Some(program) = crate::model::program(name) else {
        return Err(Refusal::new(not_read_only(name)));
    };
    let legacy = args
        .first()
        .is_some_and(|w| w.is_plain() && legacy_count(name, &w.text, args.len()));
    let args = if legacy { &args[1..] } else { args };
    let parsed = crate::model::parse(name, program, args)?;
    env.reads.borrow_mut().extend(parsed.reads(program, args));
    match parsed.refusal {
        Some(r) => Err(r),
        None => Ok(()),
    }
}

/// `node --version`, `python3 -V`, `gcc --version`: an interpreter or
/// compiler asked only for its version prints it and exits. Not the
/// toolchain proxies (`cargo`, `rustc`, `go`: a toolchain file in the
/// project can make them download and install one) nor `npm` (it may look
/// for updates).
fn version_only(name: &str, args: &[Word]) -> bool {
    let flags: &[&str] = match name {
        "node" | "nodejs" | "ruby" | "perl" | "deno" => &["--version", "-v"],
        "python" | "python3" | "pypy3" => &["--version", "-V"],
        "java" | "javac" => &["--version", "-version"],
        "gcc" | "g++" | "cc" | "c++" | "clang" | "clang++" | "make" | "cmake" => &["--version"],
        _ if name.starts_with("python3.") => &["--version", "-V"],
        _ => return false,
    };
    matches!(args, [only] if only.is_plain() && flags.contains(&only.text.as_str()))
}

fn checked<'a>(name: &str, args: &'a [Word], rules: &Rules) -> Result<Vec<&'a Word>, Refusal> {
    let positional = opts::scan(name, args, rules)?;
    plain_args(name, args)?;
    Ok(positional)
}

const RG: Rules = Rules {
    short: Short {
        value: "ABCEMdefgjmrtT",
        optional: "",
        forbidden: "z",
    },
    long: &["--pre", "--hostname-bin", "--search-zip"],
    long_safe: &[],
};
const SORT: Rules = Rules {
    short: Short {
        value: "ktST",
        optional: "",
        forbidden: "o",
    },
    long: &["--output", "--compress-program"],
    long_safe: &[],
};
const BASE64: Rules = Rules {
    short: Short {
        value: "w",
        optional: "",
        forbidden: "o",
    },
    long: &["--output"],
    long_safe: &[],
};
const TREE: Rules = Rules {
    short: Short {
        value: "",
        optional: "",
        forbidden: "oR",
    },
    long: &["--output"],
    long_safe: &[],
};
const FILE: Rules = Rules {
    short: Short {
        value: "eFP",
        optional: "",
        forbidden: "mfCzZ",
    },
    long: &["--magic-file", "--files-from", "--compile", "--uncompress"],
    long_safe: &[],
};
const UNIQ: Rules = Rules {
    short: Short {
        value: "fsw",
        optional: "",
        forbidden: "",
    },
    long: &[],
    long_safe: &[],
};

fn test(name: &str, args: &[Word]) -> Result<(), Refusal> {
    for a in args {
        if a.text == "-v" {
            return Err(Refusal::new(format!(
                "`{name} -v` evaluates array subscripts, which can run commands"
            )));
        }
        if name == "[["
            && matches!(
                a.text.as_str(),
                "-eq" | "-ne" | "-lt" | "-le" | "-gt" | "-ge"
            )
        {
            return Err(Refusal::new(format!(
                "arithmetic comparison `{}` in `[[ ]]` evaluates its operands, which can run commands",
                a.text
            )));
        }
    }
    if name == "[[" {
        return Ok(());
    }
    plain_args(name, args)
}

/// `printf [-v VAR] [--] FORMAT [ARGUMENT]...`: bash's builtin assigns a
/// variable with `-v` and with every `%n` conversion of its format
/// (`%n`, `%-5n`, `%*n`, `%ln`), so the format must be a plain word without one.
fn printf(args: &[Word]) -> Result<(), Refusal> {
    let Some(first) = args.first() else {
        return Ok(());
    };
    if first.text.starts_with("-v") {
        return Err(Refusal::new("`printf -v` assigns a shell variable"));
    }
    let format = if first.is_plain() && first.text == "--" {
        args.get(1)
    } else {
        Some(first)
    };
    if format.is_some_and(|f| !f.is_plain()) {
        return Err(Refusal::new(
            "the format of `printf` contains an expansion, which could hold `%n` (assigns a shell variable)",
        ));
    }
    if args.iter().any(|a| a.is_plain() && printf_assigns(&a.text)) {
        return Err(Refusal::new("`printf %n` assigns a shell variable"));
    }
    Ok(())
}

/// Does a printf format contain a `%n` conversion (flags, width, precision,
/// `*`, `N$` and length modifiers allowed in between)?
fn printf_assigns(format: &str) -> bool {
    let b = format.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            i += 1;
            continue;
        }
        i += 1;
        if b.get(i) == Some(&b'%') {
            i += 1;
            continue;
        }
        while b
            .get(i)
            .is_some_and(|c| c.is_ascii_digit() || b"-+ #0'*.$hlLqjzt".contains(c))
        {
            i += 1;
        }
        if b.get(i) == Some(&b'n') {
            return true;
        }
    }
    false
}

/// GNU `date`'s long options.
const DATE_LONG: &[(&str, Arg)] = &[
    ("date", Arg::Required),
    ("debug", Arg::No),
    ("file", Arg::Required),
    ("iso-8601", Arg::Optional),
    ("reference", Arg::Required),
    ("resolution", Arg::No),
    ("rfc-email", Arg::No),
    ("rfc-822", Arg::No),
    ("rfc-2822", Arg::No),
    ("rfc-3339", Arg::Required),
    ("set", Arg::Required),
    ("uct", Arg::No),
    ("utc", Arg::No),
    ("universal", Arg::No),
    ("help", Arg::No),
    ("version", Arg::No),
];

/// `date` only reads with `+FORMAT` operands: any other operand
/// (`MMDDhhmm[[CC]YY][.ss]`) sets the clock, like `-s` and `--set` (and its
/// abbreviations `--s`, `--se`). Options are read as GNU getopt does:
/// permuted, clustered, values attached or in the next word.
fn date(args: &[Word]) -> Result<(), Refusal> {
    plain_args("date", args)?;
    let set = || opts::flag_refusal("date", "--set");
    let mut i = 0;
    let mut end = false;
    while let Some(w) = args.get(i) {
        let a = w.text.as_str();
        i += 1;
        if end || a == "-" || !a.starts_with('-') {
            if a.starts_with('+') {
                continue;
            }
            return Err(Refusal::new(format!(
                "`date {a}`: an operand other than `+FORMAT` sets the clock"
            )));
        }
        if a == "--" {
            end = true;
            continue;
        }
        if let Some(long) = a.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((n, _)) => (n, true),
                None => (long, false),
            };
            let hits = opts::long_matches(name, DATE_LONG);
            if hits.iter().any(|(n, _)| *n == "set") {
                return Err(set());
            }
            let Some((_, kind)) = hits.first() else {
                return Err(Refusal::new(format!(
                    "`date` option `{a}` is not understood"
                )));
            };
            if hits.iter().any(|(_, k)| k != kind) {
                return Err(Refusal::new(format!("`date` option `{a}` is ambiguous")));
            }
            if *kind == Arg::Required && !attached {
                i += 1;
            }
            continue;
        }
        let cluster = &a[1..];
        for (j, ch) in cluster.char_indices() {
            match ch {
                's' => return Err(opts::flag_refusal("date", "-s")),
                'R' | 'u' => {}
                'I' => break,
                'd' | 'f' | 'r' => {
                    if j + 1 == cluster.len() {
                        i += 1;
                    }
                    break;
                }
                _ => {
                    return Err(Refusal::new(format!(
                        "`date` option `-{ch}` is not understood"
                    )))
                }
            }
        }
    }
    Ok(())
}

/// `xxd [OPTIONS] [INFILE [OUTFILE]]`: a second operand is a file xxd writes
/// (truncated, or patched in place with `-r`). Options as xxd reads them:
/// `--x` is `-x`, the first non-option ends them, and a value option written
/// alone (`-c 8`, `-s -32`) takes the next word whatever it looks like.
/// A longer spelling (`-cols 8`) is counted as if its value were attached,
/// which can only count more operands, never fewer.
fn xxd(args: &[Word]) -> Result<(), Refusal> {
    plain_args("xxd", args)?;
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let a = w.text.as_str();
        let opt = if a.starts_with("--") && a.len() > 2 {
            &a[1..]
        } else {
            a
        };
        if opt == "--" {
            i += 1;
            break;
        }
        if !opt.starts_with('-') || opt == "-" {
            break;
        }
        i += 1;
        let letter = opt[1..].chars().next();
        if opt.len() == 2 && letter.is_some_and(|c| "cglson".contains(c)) {
            i += 1;
        }
    }
    if args.len().saturating_sub(i) > 1 {
        return Err(Refusal::new(
            "`xxd INFILE OUTFILE` writes its second file argument",
        ));
    }
    Ok(())
}

fn hostname(args: &[Word]) -> Result<(), Refusal> {
    plain_args("hostname", args)?;
    for a in args {
        let ok = matches!(
            a.text.as_str(),
            "-f" | "-s"
                | "-d"
                | "-i"
                | "-I"
                | "-a"
                | "-A"
                | "-y"
                | "--fqdn"
                | "--long"
                | "--short"
                | "--domain"
                | "--ip-address"
                | "--all-ip-addresses"
                | "--all-fqdns"
                | "--alias"
        );
        if !ok {
            return Err(Refusal::new(format!(
                "`hostname {}` can set the host name",
                a.text
            )));
        }
    }
    Ok(())
}

/// `cd DIR` is read-only, but it moves later commands: track where to, lexically.
fn cd(args: &[Word], state: &mut State) {
    let mut target = None;
    for a in args {
        if !a.is_plain() {
            state.cwd = None;
            state.git_dirs = None;
            return;
        }
        match a.text.as_str() {
            "-L" | "-P" | "-e" | "-@" | "--" | "-LP" | "-PL" | "-Pe" => continue,
            t if t.starts_with('-') && t != "-" => {
                state.cwd = None;
                state.git_dirs = None;
                return;
            }
            t => {
                target = Some(t);
                break;
            }
        }
    }
    git::track_cd(state, target);
    state.cwd = match target {
        None | Some("-") => None,
        Some(t) => state.cwd.as_ref().map(|c| opts::normalize(&c.join(t))),
    };
}

/// `sed` is read-only when no script writes a file or runs a command
/// (`w`, `W`, `e`, `s///w`, `s///e`: [`crate::sedscript`] parses each
/// script as GNU sed does) and it edits nothing in place (`-i`); the files
/// its `r`/`R` commands read are recorded. A script from a file (`-f`)
/// cannot be seen, so it is refused.
fn sed(args: &[Word], env: &Env<'_>) -> Result<(), Refusal> {
    plain_args("sed", args)?;
    let mut scripts: Vec<&str> = Vec::new();
    let mut positional: Vec<&str> = Vec::new();
    let mut i = 0;
    let mut end = false;
    while let Some(w) = args.get(i) {
        let a = w.text.as_str();
        i += 1;
        if end || a == "-" || !a.starts_with('-') {
            positional.push(a);
            continue;
        }
        match a {
            "--" => end = true,
            "--quiet" | "--silent" | "--regexp-extended" | "--separate" | "--unbuffered"
            | "--null-data" | "--posix" | "--sandbox" | "--debug" | "--binary"
            | "--follow-symlinks" | "--help" | "--version" => {}
            "--expression" => {
                let Some(s) = args.get(i) else {
                    return Err(Refusal::new("`sed --expression` without a script"));
                };
                scripts.push(&s.text);
                i += 1;
            }
            "--line-length" => i += 1,
            _ if a.starts_with("--expression=") => scripts.push(&a["--expression=".len()..]),
            _ if a.starts_with("--line-length=") => {}
            _ if a.starts_with("--") => {
                let name = a.split('=').next().unwrap_or(a);
                let flag = if "--in-place".starts_with(name) {
                    "--in-place"
                } else if "--file".starts_with(name) {
                    "--file"
                } else {
                    a
                };
                return Err(sed_flag(flag));
            }
            _ => {
                let cluster = &a[1..];
                for (j, ch) in cluster.char_indices() {
                    match ch {
                        'n' | 'E' | 'r' | 's' | 'u' | 'z' | 'b' => {}
                        'e' | 'l' => {
                            let rest = &cluster[j + 1..];
                            let value = if rest.is_empty() {
                                let Some(s) = args.get(i) else {
                                    return Err(Refusal::new(format!(
                                        "`sed -{ch}` without a value"
                                    )));
                                };
                                i += 1;
                                s.text.as_str()
                            } else {
                                rest
                            };
                            if ch == 'e' {
                                scripts.push(value);
                            }
                            break;
                        }
                        'i' => return Err(sed_flag("-i")),
                        'f' => return Err(sed_flag("-f")),
                        other => return Err(sed_flag(&format!("-{other}"))),
                    }
                }
            }
        }
    }
    if scripts.is_empty() {
        if positional.is_empty() {
            return Err(Refusal::new("`sed` without a script"));
        }
        scripts.push(positional.remove(0));
    }
    for script in scripts {
        env.read_files(crate::sedscript::analyse(script)?.reads);
    }
    Ok(())
}

/// awk is read-only when its program only prints ([`crate::awk`] parses
/// it: no `system()`, pipes, output redirections, `getline` from a file
/// named by an expression, changes to `ENVIRON`/`ARGV`); the files its
/// `getline < "FILE"` reads are recorded.
fn awk(name: &str, args: &[Word], env: &Env<'_>) -> Result<(), Refusal> {
    let command = crate::awk::awk_command(name, args)?;
    for program in command.programs {
        env.read_files(crate::awk::analyse(program).map_err(Refusal::new)?.reads);
    }
    Ok(())
}

fn sed_flag(flag: &str) -> Refusal {
    opts::flag_refusal("sed", flag)
}

/// Words a `planModeReadOnlyCommands` entry may never contain.
const WRITE_WORDS: &[&str] = &[
    "add",
    "apply",
    "commit",
    "create",
    "delete",
    "edit",
    "exec",
    "merge",
    "push",
    "remove",
    "rm",
    "set",
    "update",
    "install",
    "uninstall",
    "write",
    "drop",
    "kill",
    "reset",
    "restore",
    "revert",
    "rebase",
    "run",
    "start",
    "stop",
    "restart",
    "deploy",
    "publish",
    "upgrade",
    "init",
    "mv",
    "move",
    "rename",
    "put",
    "post",
    "patch",
    "truncate",
    "clean",
    "prune",
    "purge",
    "destroy",
    "import",
    "upload",
    "sync",
    "checkout",
    "switch",
    "pull",
    "fetch",
    "clone",
    "eval",
    "replace",
    "modify",
    "change",
    "enable",
    "disable",
    "login",
    "logout",
    "scale",
    "rollout",
    "cp",
    "copy",
    "chmod",
    "chown",
    "mkdir",
    "touch",
    "link",
    "unlink",
    "tag",
    "label",
    "annotate",
    "cordon",
    "drain",
    "taint",
    "attach",
    "debug",
    "port-forward",
    "proxy",
    "shell",
    "ssh",
    "open",
    "save",
    "load",
    "build",
    "compile",
    "generate",
    "migrate",
    "seed",
    "send",
    "submit",
    "close",
    "reopen",
    "lock",
    "unlock",
    "archive",
    "unarchive",
    "fork",
    "transfer",
    "approve",
    "assign",
    "comment",
    "review",
    "sign",
    "encrypt",
    "decrypt",
    "bump",
    "release",
    "invoke",
    "call",
    "trigger",
    "dispatch",
    "cancel",
    "rerun",
    "watch",
];

/// Check a `planModeReadOnlyCommands` entry and split it into tokens.
pub(crate) fn validate_extra(entry: &str) -> Result<Vec<String>, String> {
    let tokens: Vec<String> = entry.split_whitespace().map(str::to_string).collect();
    if tokens.len() < 2 {
        return Err(format!(
            "read-only command `{entry}` must name a program and at least one more word"
        ));
    }
    for t in &tokens {
        let ok = t.bytes().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, b'.' | b'_' | b'-' | b':' | b'/' | b'@' | b'+' | b'=')
        });
        if !ok {
            return Err(format!(
                "read-only command `{entry}`: token `{t}` has characters other than letters, digits and `._-:/@+=`"
            ));
        }
        for part in t.split(['-', ':', '_', '.', '/', '=', '@', '+']) {
            let lower = part.to_ascii_lowercase();
            if WRITE_WORDS.contains(&lower.as_str()) {
                return Err(format!(
                    "read-only command `{entry}` contains the write word `{part}`"
                ));
            }
        }
    }
    let first = tokens[0].as_str();
    if first.contains('/') || first.starts_with('-') {
        return Err(format!(
            "read-only command `{entry}` must start with a program name, not `{first}`"
        ));
    }
    if is_interpreter(first) || is_wrapper(first) {
        return Err(format!(
            "read-only command `{entry}` starts with `{first}`, a shell, interpreter or wrapper"
        ));
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
    use super::*;

    #[test]
    fn extras() {
        for ok in [
            "gh issue view",
            "kubectl get",
            "npm ls",
            "git stash list",
            "cargo tree",
        ] {
            assert!(validate_extra(ok).is_ok(), "{ok}");
        }
        for bad in [
            "ls",
            "bash -c",
            "python3 -m",
            "sudo ls",
            "gh pr merge",
            "git remote set-url",
            "kubectl delete",
            "npm run",
            "git push",
            "db:migrate now",
            "x $(y)",
            "env ls",
            "xargs cat",
            "npm install",
            "kubectl apply",
            "/bin/ls -la",
        ] {
            assert!(validate_extra(bad).is_err(), "{bad}");
        }
    }
}
