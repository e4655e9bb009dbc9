//! Wrappers: programs that run another command (`sudo`, `env`, `timeout`,
//! `xargs`, `bash -c`, ...). The inner command is found and judged; its
//! text is recorded so rules can match it.

use crate::analysis::{analyze_text, enter, program_name, too_deep, Env, Shell, State, MAX_DEPTH};
use crate::opts::{short_cluster, Short};
use crate::syntax::{join, Word};
use crate::table;
use crate::Refusal;

/// Where the inner command starts in the wrapper's arguments, if there is one.
type Start = Result<Option<usize>, Refusal>;

fn refusal(reason: impl Into<String>) -> Refusal {
    Refusal::new(reason)
}

/// Judge `name args` when `name` is a wrapper; `None` when it is not one.
pub(crate) fn judge(
    name: &str,
    args: &[Word],
    env: &Env<'_>,
    state: &mut State,
    depth: usize,
    inner: &mut Vec<String>,
) -> Option<Result<(), Refusal>> {
    let result = match name {
        "sudo" | "doas" => {
            let start = sudo(args);
            describe_only(args, start, env, state, depth, inner);
            Err(refusal(format!("`{name}` runs a command as another user")))
        }
        "nohup" => {
            describe_only(args, Ok(Some(0)), env, state, depth, inner);
            Err(refusal("`nohup` can write nohup.out"))
        }
        "exec" => {
            describe_only(args, Ok(Some(0)), env, state, depth, inner);
            Err(refusal(
                "`exec` replaces the shell and can redirect its files",
            ))
        }
        "eval" => {
            if args.iter().all(Word::is_plain) && depth < MAX_DEPTH {
                let script = join(args);
                let mut scratch = state.clone();
                for c in analyze_text(&script, env, &mut scratch, depth + 1) {
                    inner.push(c.text);
                    inner.extend(c.inner);
                }
            }
            Err(refusal("`eval` runs its arguments as shell code"))
        }
        "env" => env_wrapper(args, env, state, depth, inner),
        "timeout" => descend(args, timeout(args), false, env, state, depth, inner),
        "time" => descend(args, time(args), true, env, state, depth, inner),
        "nice" => descend(args, nice(args), true, env, state, depth, inner),
        "stdbuf" => descend(args, stdbuf(args), false, env, state, depth, inner),
        "ionice" => descend(args, ionice(args), false, env, state, depth, inner),
        "command" => descend(args, command(args), true, env, state, depth, inner),
        "builtin" => descend(args, Ok(Some(0)), true, env, state, depth, inner),
        "xargs" => xargs(args, env, state, depth, inner),
        _ if matches!(name, "bash" | "sh" | "zsh" | "dash") => {
            shell(name, args, env, state, depth, inner)
        }
        _ => return None,
    };
    Some(result)
}

/// Record the inner command of a wrapper that is refused whatever it runs.
fn describe_only(
    args: &[Word],
    start: Start,
    env: &Env<'_>,
    state: &State,
    depth: usize,
    inner: &mut Vec<String>,
) {
    if let Ok(Some(i)) = start {
        if let Some(rest) = args.get(i..).filter(|r| !r.is_empty()) {
            let mut scratch = state.clone();
            let _ = enter(rest, env, &mut scratch, depth, inner);
        }
    }
}

/// Judge the inner command of a transparent wrapper.
fn descend(
    args: &[Word],
    start: Start,
    alone_ok: bool,
    env: &Env<'_>,
    state: &mut State,
    depth: usize,
    inner: &mut Vec<String>,
) -> Result<(), Refusal> {
    match start? {
        Some(i) if i < args.len() => {
            let rest = &args[i..];
            enter(rest, env, state, depth, inner)
        }
        _ if alone_ok => Ok(()),
        _ => Err(refusal(
            "a wrapper without a command to run is not read-only",
        )),
    }
}

fn plain_option<'a>(w: &'a Word, wrapper: &str) -> Result<&'a str, Refusal> {
    if w.is_plain() {
        Ok(w.text.as_str())
    } else {
        Err(refusal(format!(
            "`{}` in the options of `{wrapper}` cannot be proven read-only",
            w.text
        )))
    }
}

/// Generic option walk: `long_value` long options take the next argument
/// unless written with `=`; `short` letters as in getopt. The first
/// non-option starts the inner command (`positional_skip` operands first).
fn options(
    wrapper: &str,
    args: &[Word],
    short: &Short,
    long_flag: &[&str],
    long_value: &[&str],
    positional_skip: usize,
) -> Start {
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let a = plain_option(w, wrapper)?;
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') || a == "-" {
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            let name = long.split('=').next().unwrap_or(long);
            let full = format!("--{name}");
            if long_flag.contains(&full.as_str()) {
                i += 1;
            } else if long_value.contains(&full.as_str()) {
                i += if long.contains('=') { 1 } else { 2 };
            } else {
                return Err(refusal(format!(
                    "`{wrapper}` option `{a}` is not understood"
                )));
            }
            continue;
        }
        match short_cluster(&a[1..], short) {
            Err(ch) => return Err(refusal(format!("`{wrapper} -{ch}` is not read-only"))),
            Ok(takes_next) => i += if takes_next { 2 } else { 1 },
        }
    }
    let start = i + positional_skip;
    Ok((start < args.len()).then_some(start))
}

fn sudo(args: &[Word]) -> Start {
    let short = Short {
        value: "ugCDhprtTUR",
        optional: "",
        forbidden: "",
    };
    options(
        "sudo",
        args,
        &short,
        &[
            "--login",
            "--shell",
            "--preserve-env",
            "--non-interactive",
            "--background",
            "--stdin",
            "--set-home",
            "--edit",
        ],
        &[
            "--user",
            "--group",
            "--close-from",
            "--chdir",
            "--host",
            "--prompt",
            "--role",
            "--type",
            "--command-timeout",
            "--other-user",
            "--chroot",
        ],
        0,
    )
}

fn timeout(args: &[Word]) -> Start {
    let short = Short {
        value: "sk",
        optional: "",
        forbidden: "",
    };
    options(
        "timeout",
        args,
        &short,
        &["--preserve-status", "--foreground", "--verbose"],
        &["--signal", "--kill-after"],
        1,
    )
}

fn time(args: &[Word]) -> Start {
    for w in args {
        let a = w.text.as_str();
        if a == "-o"
            || a.starts_with("--o")
            || (a.starts_with('-') && !a.starts_with("--") && a.contains('o'))
        {
            return Err(refusal("`time -o` writes a file"));
        }
        if !a.starts_with('-') {
            break;
        }
    }
    let short = Short {
        value: "f",
        optional: "",
        forbidden: "",
    };
    options(
        "time",
        args,
        &short,
        &["--portability", "--verbose", "--quiet", "--append"],
        &["--format"],
        0,
    )
}

fn nice(args: &[Word]) -> Start {
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let a = plain_option(w, "nice")?;
        if a == "--" {
            i += 1;
            break;
        }
        if a == "-n" || a == "--adjustment" {
            i += 2;
        } else if a.starts_with("--adjustment=")
            || (a.starts_with("-n") && a[2..].parse::<i32>().is_ok())
            || (a.len() > 1 && a.starts_with('-') && a[1..].parse::<i32>().is_ok())
        {
            i += 1;
        } else if a.starts_with('-') && a != "-" {
            return Err(refusal(format!("`nice` option `{a}` is not understood")));
        } else {
            break;
        }
    }
    Ok((i < args.len()).then_some(i))
}

fn stdbuf(args: &[Word]) -> Start {
    let short = Short {
        value: "ioe",
        optional: "",
        forbidden: "",
    };
    options(
        "stdbuf",
        args,
        &short,
        &[],
        &["--input", "--output", "--error"],
        0,
    )
}

fn ionice(args: &[Word]) -> Start {
    let short = Short {
        value: "cn",
        optional: "",
        forbidden: "pPu",
    };
    options(
        "ionice",
        args,
        &short,
        &["--ignore"],
        &["--class", "--classdata"],
        0,
    )
}

fn command(args: &[Word]) -> Start {
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let a = plain_option(w, "command")?;
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') || a == "-" {
            break;
        }
        let letters = &a[1..];
        if letters.chars().all(|c| c == 'p') {
            i += 1;
        } else if letters.chars().all(|c| matches!(c, 'p' | 'v' | 'V')) {
            // `command -v NAME` only describes NAME.
            return Ok(None);
        } else {
            return Err(refusal(format!("`command` option `{a}` is not understood")));
        }
    }
    Ok((i < args.len()).then_some(i))
}

/// `env [-i] [-u NAME] [NAME=VALUE]... [COMMAND]`.
fn env_wrapper(
    args: &[Word],
    env: &Env<'_>,
    state: &mut State,
    depth: usize,
    inner: &mut Vec<String>,
) -> Result<(), Refusal> {
    let mut i = 0;
    let mut problem: Option<Refusal> = None;
    while let Some(w) = args.get(i) {
        let a = plain_option(w, "env")?;
        match a {
            "-i" | "-" | "--ignore-environment" | "-0" | "--null" | "-v" | "--debug" => i += 1,
            "-u" | "--unset" => i += 2,
            "--" => {
                i += 1;
                break;
            }
            _ if a.starts_with("--unset=") || (a.starts_with("-u") && a.len() > 2) => i += 1,
            _ if a.starts_with("-C") || a.starts_with("--chdir") => {
                return Err(refusal("`env -C` runs the command in another directory"))
            }
            _ if a.starts_with("-S") || a.starts_with("--split-string") => {
                return Err(refusal("`env -S` splits a string into a command"))
            }
            _ if a.starts_with('-') => {
                return Err(refusal(format!("`env` option `{a}` is not understood")))
            }
            _ => break,
        }
    }
    while let Some(w) = args.get(i) {
        let Some((name, _)) = w.text.split_once('=') else {
            break;
        };
        if name.is_empty() || !name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
            break;
        }
        if problem.is_none() && !harmless_variable(name) {
            problem = Some(refusal(format!(
                "environment variable `{name}=…` can change what runs"
            )));
        }
        i += 1;
    }
    let result = match args.get(i..).filter(|r| !r.is_empty()) {
        None => Ok(()),
        Some(rest) => enter(rest, env, state, depth, inner),
    };
    match problem {
        Some(p) => Err(p),
        None => result,
    }
}

/// The environment variables a command may be given and stay read-only.
pub(crate) fn harmless_variable(name: &str) -> bool {
    matches!(name, "LANG" | "TZ" | "NO_COLOR" | "TERM" | "COLUMNS") || name.starts_with("LC_")
}

fn xargs(
    args: &[Word],
    env: &Env<'_>,
    state: &mut State,
    depth: usize,
    inner: &mut Vec<String>,
) -> Result<(), Refusal> {
    let short = Short {
        value: "adELnPs",
        optional: "el",
        forbidden: "Ii",
    };
    let start = options(
        "xargs",
        args,
        &short,
        &["--null", "--no-run-if-empty", "--verbose", "--exit", "--open-tty", "--show-limits", "--interactive"],
        &["--arg-file", "--delimiter", "--max-lines", "--max-args", "--max-procs", "--max-chars", "--process-slot-var", "--eof"],
        0,
    )
    .map_err(|e| {
        if e.reason.contains("-I") || e.reason.contains("-i") || e.reason.contains("--replace") {
            refusal("`xargs -I` substitutes its input into the command, which cannot be proven read-only")
        } else {
            e
        }
    })?;
    let Some(i) = start else {
        return Ok(()); // runs `echo`
    };
    let rest = &args[i..];
    let verdict = enter(rest, env, state, depth, inner);
    let name = rest.first().map(|w| program_name(w).map(str::to_string));
    match name {
        Some(Ok(n)) if table::any_arguments_safe(&n) => verdict,
        Some(Ok(n)) => Err(refusal(format!(
            "`xargs` runs `{n}` with arguments read from its input, which cannot be proven read-only"
        ))),
        _ => verdict.and(Err(refusal("`xargs` runs an unknown program"))),
    }
}

/// How a shell was asked to run.
pub(crate) enum ShellMode {
    /// `-c SCRIPT`: the index of the script argument.
    Script(usize),
    /// A script file.
    File,
    /// Commands from standard input.
    Stdin,
}

/// Read a shell's options (`-l`, `-e`, `-o pipefail`, `--norc`, `-c`, ...).
pub(crate) fn shell_options(name: &str, args: &[Word]) -> Result<ShellMode, Refusal> {
    let mut i = 0;
    let mut command = false;
    while let Some(w) = args.get(i) {
        let a = plain_option(w, name)?;
        match a {
            "--login" | "--norc" | "--noprofile" | "--posix" | "--noediting" => {}
            "--" | "-" => {
                i += 1;
                break;
            }
            "-o" | "+o" => {
                i += 1;
                let ok = args.get(i).is_some_and(|v| {
                    matches!(
                        v.text.as_str(),
                        "pipefail"
                            | "errexit"
                            | "nounset"
                            | "xtrace"
                            | "noglob"
                            | "posix"
                            | "verbose"
                    )
                });
                if !ok {
                    return Err(refusal(format!(
                        "`{name} -o` with this option is not understood"
                    )));
                }
            }
            _ if (a.starts_with('-') || a.starts_with('+'))
                && a.len() > 1
                && !a.starts_with("--") =>
            {
                for ch in a[1..].chars() {
                    match ch {
                        'c' => command = true,
                        'l' | 'e' | 'u' | 'x' | 'v' | 'f' | 'n' | 'B' | 'h' => {}
                        _ => {
                            return Err(refusal(format!("`{name}` option `{a}` is not understood")))
                        }
                    }
                }
            }
            _ if a.starts_with('-') => {
                return Err(refusal(format!("`{name}` option `{a}` is not understood")))
            }
            _ => break,
        }
        i += 1;
    }
    if command {
        if i < args.len() {
            Ok(ShellMode::Script(i))
        } else {
            Err(refusal(format!("`{name} -c` without a script")))
        }
    } else if i < args.len() {
        Ok(ShellMode::File)
    } else {
        Ok(ShellMode::Stdin)
    }
}

/// Why a `-c` script cannot be analysed as bash, if it cannot.
pub(crate) fn script_problem(name: &str, script: &Word) -> Option<Refusal> {
    if !script.is_plain() {
        return Some(refusal(format!(
            "the script of `{name} -c` contains an expansion and cannot be proven read-only"
        )));
    }
    if name == "zsh" && script.text.contains(['(', '=']) {
        return Some(refusal(
            "zsh scripts with `(` or `=` can use zsh-only expansions that cannot be proven read-only",
        ));
    }
    None
}

fn shell(
    name: &str,
    args: &[Word],
    env: &Env<'_>,
    state: &mut State,
    depth: usize,
    inner: &mut Vec<String>,
) -> Result<(), Refusal> {
    match shell_options(name, args)? {
        ShellMode::Script(_) if depth + 1 > MAX_DEPTH => Err(too_deep()),
        ShellMode::Script(i) => {
            let script = &args[i];
            if let Some(p) = script_problem(name, script) {
                return Err(p);
            }
            let mut nested = state.clone();
            nested.shell = Shell::named(name);
            let commands = analyze_text(&script.text, env, &mut nested, depth + 1);
            if commands.is_empty() {
                return Err(refusal(format!("the script of `{name} -c` is empty")));
            }
            let mut verdict = Ok(());
            for c in commands {
                if verdict.is_ok() {
                    if let Err(e) = &c.verdict {
                        verdict = Err(e.clone());
                    }
                }
                inner.push(c.text);
                inner.extend(c.inner);
            }
            verdict
        }
        ShellMode::File => Err(refusal(format!("`{name} FILE` runs a script file"))),
        ShellMode::Stdin => Err(refusal(format!(
            "`{name}` without `-c` runs commands from its input"
        ))),
    }
}
