//! Wrappers: programs that run another command (`sudo`, `env`, `timeout`,
//! `xargs`, `bash -c`, ...). The inner command is found and judged; its
//! text is recorded so rules can match it.

use crate::context::{analyze_nested, enter, program_name, too_deep, Env, Shell, State, MAX_DEPTH};
use crate::opts::{long_matches, short_cluster, Arg, Short};
use crate::programs::{runner, Runner};
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
            let start = modelled(name, args, 0);
            describe_only(args, start, env, state, depth, inner);
            Err(refusal(format!("`{name}` runs a command as another user")))
        }
        "nohup" => {
            let start = usize::from(args.first().is_some_and(|a| a.text == "--"));
            describe_only(args, Ok(Some(start)), env, state, depth, inner);
            Err(refusal("`nohup` can write nohup.out"))
        }
        "exec" => {
            describe_only(args, exec_start(args), env, state, depth, inner);
            Err(refusal(
                "`exec` replaces the shell and can redirect its files",
            ))
        }
        "eval" => {
            if args.iter().all(Word::is_plain) && depth < MAX_DEPTH {
                let script = join(args);
                let mut scratch = state.clone();
                for c in analyze_nested(&script, env, &mut scratch, depth + 1) {
                    inner.push(c.text);
                    inner.extend(c.inner);
                    env.reads.borrow_mut().extend(c.reads);
                }
            }
            Err(refusal("`eval` runs its arguments as shell code"))
        }
        "env" => env_wrapper(args, env, state, depth, inner),
        // Their own options, from the model; `timeout` has a duration before
        // the command, and `time` alone (no command) reports on nothing.
        "time" | "timeout" | "stdbuf" | "ionice" => {
            let start = modelled(name, args, usize::from(name == "timeout"));
            descend(args, start, name == "time", env, state, depth, inner)
        }
        "nice" => descend(args, nice(args), true, env, state, depth, inner),
        "command" => descend(args, command(args), true, env, state, depth, inner),
        "builtin" => descend(args, Ok(Some(0)), true, env, state, depth, inner),
        "xargs" => xargs(args, env, state, depth, inner),
        "find" => find(args, env, state, depth, inner),
        _ if runner(name).is_some() => {
            describe_runner(name, args, env, state, depth, inner);
            Err(refusal(format!("`{name}` runs a command")))
        }
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
    match start {
        Ok(Some(i)) => describe_at(args, i, env, state, depth, inner),
        Ok(None) => {}
        Err(_) => describe_candidates(args, env, state, depth, inner),
    }
}

/// Record the command `args[i..]` without judging it.
fn describe_at(
    args: &[Word],
    i: usize,
    env: &Env<'_>,
    state: &State,
    depth: usize,
    inner: &mut Vec<String>,
) {
    if let Some(rest) = args.get(i..).filter(|r| !r.is_empty()) {
        let mut scratch = state.clone();
        let _ = enter(rest, env, &mut scratch, depth, inner);
    }
}

/// How many possible starts are recorded when a wrapper's options cannot be read.
const MAX_CANDIDATES: usize = 8;
/// Candidates stop once a command has this many inner texts, or this many
/// bytes of them (nested wrappers whose options cannot be read would
/// otherwise multiply them).
const MAX_INNER: usize = 256;
const MAX_INNER_BYTES: usize = 1 << 20;

fn over_budget(inner: &[String]) -> bool {
    inner.len() >= MAX_INNER || inner.iter().map(String::len).sum::<usize>() >= MAX_INNER_BYTES
}

/// When a wrapper's options cannot be read, record the command that would
/// start at each of the first few words that do not look like options: a
/// deny or ask rule then sees the inner command whichever of them it is.
fn describe_candidates(
    args: &[Word],
    env: &Env<'_>,
    state: &State,
    depth: usize,
    inner: &mut Vec<String>,
) {
    let starts = (0..args.len())
        .filter(|&i| !args[i].text.starts_with('-'))
        .take(MAX_CANDIDATES);
    for i in starts {
        if over_budget(inner) {
            break;
        }
        describe_at(args, i, env, state, depth, inner);
    }
}

/// Record every command of a shell script text without judging them.
fn describe_script(
    script: &str,
    env: &Env<'_>,
    state: &State,
    depth: usize,
    inner: &mut Vec<String>,
) {
    if depth >= MAX_DEPTH {
        return;
    }
    let mut scratch = state.clone();
    for c in analyze_nested(script, env, &mut scratch, depth + 1) {
        inner.push(c.text);
        inner.extend(c.inner);
        env.reads.borrow_mut().extend(c.reads);
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
    if start.is_err() {
        describe_candidates(args, env, state, depth, inner);
    }
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

/// Where the command of a wrapper starts, read with the wrapper's model
/// (`programs.txt`): the first operand, after `skip` operands of its own
/// (`timeout DURATION`). An unknown or unsafe option refuses.
fn modelled(name: &str, args: &[Word], skip: usize) -> Start {
    let Some(program) = crate::model::program(name) else {
        return Err(refusal(format!("`{name}` has no option model")));
    };
    let parsed = crate::model::parse(name, program, args)?;
    if let Some(r) = parsed.refusal {
        return Err(r);
    }
    Ok(parsed.operands.get(skip).copied())
}

/// `nice [-N | -n N | --adjustment=N] [COMMAND]`: GNU nice reads a first
/// argument `-N` (`-5`, `--5`, `-+5`) as an adjustment before its options.
fn nice(args: &[Word]) -> Start {
    let legacy = args.first().is_some_and(|w| {
        let t = w.text.trim_start_matches('-');
        w.is_plain()
            && w.text.starts_with('-')
            && w.text.len() - t.len() <= 2
            && t.trim_start_matches(['+', '-']).parse::<u32>().is_ok()
    });
    let skip = usize::from(legacy);
    Ok(modelled("nice", &args[skip..], 0)?.map(|i| i + skip))
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

/// GNU `env`'s long options.
const ENV_LONG: &[(&str, Arg)] = &[
    ("ignore-environment", Arg::No),
    ("null", Arg::No),
    ("unset", Arg::Required),
    ("chdir", Arg::Required),
    ("split-string", Arg::Required),
    ("block-signal", Arg::Optional),
    ("default-signal", Arg::Optional),
    ("ignore-signal", Arg::Optional),
    ("list-signal-handling", Arg::No),
    ("debug", Arg::No),
    ("help", Arg::No),
    ("version", Arg::No),
];

fn env_empties() -> Refusal {
    refusal(
        "`env -i` empties the environment, and without PATH bash's default search path runs programs from the current directory",
    )
}

fn env_unsets() -> Refusal {
    refusal(
        "`env -u` unsets environment variables, and without PATH bash's default search path runs programs from the current directory",
    )
}

/// `env [-0v] [NAME=VALUE]... [COMMAND]`: only `-0`, `-v`, `--null`,
/// `--debug` keep it read-only. Emptying or unsetting the environment (`-i`,
/// `-`, `-u NAME`, `--unset=NAME`, `--ignore-environment` and abbreviations,
/// in clusters too), `-C` and `-S` are refused; the command it runs is
/// recorded either way.
fn env_wrapper(
    args: &[Word],
    env: &Env<'_>,
    state: &mut State,
    depth: usize,
    inner: &mut Vec<String>,
) -> Result<(), Refusal> {
    let mut i = 0;
    let mut problem: Option<Refusal> = None;
    let mut split: Option<String> = None;
    while let Some(w) = args.get(i) {
        let a = plain_option(w, "env")?;
        if a == "--" {
            i += 1;
            break;
        }
        if a == "-" {
            problem.get_or_insert_with(env_empties);
            i += 1;
            continue;
        }
        if !a.starts_with('-') {
            break;
        }
        i += 1;
        if let Some(long) = a.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            let hits = long_matches(name, ENV_LONG);
            let names: Vec<&str> = hits.iter().map(|(n, _)| *n).collect();
            let why = if names.contains(&"ignore-environment") {
                env_empties()
            } else if names.contains(&"unset") {
                env_unsets()
            } else if names.contains(&"chdir") {
                refusal("`env -C` runs the command in another directory")
            } else if names.contains(&"split-string") {
                refusal("`env -S` splits a string into a command")
            } else if names.len() == 1 && matches!(names[0], "null" | "debug") {
                continue;
            } else {
                refusal(format!("`env` option `{a}` is not understood"))
            };
            problem.get_or_insert(why);
            let takes = hits.iter().any(|(_, k)| *k == Arg::Required);
            let value = match value {
                Some(v) => Some(v.to_string()),
                None if takes => {
                    i += 1;
                    args.get(i - 1).map(|v| v.text.clone())
                }
                None => None,
            };
            if names.contains(&"split-string") {
                split = value;
            }
            continue;
        }
        let cluster = &a[1..];
        for (j, ch) in cluster.char_indices() {
            match ch {
                '0' | 'v' => continue,
                'i' => {
                    problem.get_or_insert_with(env_empties);
                    continue;
                }
                'u' | 'C' | 'S' => {}
                _ => {
                    problem.get_or_insert_with(|| {
                        refusal(format!("`env` option `-{ch}` is not understood"))
                    });
                    continue;
                }
            }
            problem.get_or_insert_with(|| match ch {
                'u' => env_unsets(),
                'C' => refusal("`env -C` runs the command in another directory"),
                _ => refusal("`env -S` splits a string into a command"),
            });
            let rest = &cluster[j + ch.len_utf8()..];
            let value = if rest.is_empty() {
                i += 1;
                args.get(i - 1).map(|v| v.text.clone())
            } else {
                Some(rest.to_string())
            };
            if ch == 'S' {
                split = value;
            }
            break;
        }
    }
    while let Some(w) = args.get(i) {
        let Some((name, _)) = w.text.split_once('=') else {
            break;
        };
        if name.is_empty() || !name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
            break;
        }
        let value = &w.text[name.len() + 1..];
        if problem.is_none() && !harmless_setting(name, value, w.is_plain()) {
            problem = Some(refusal(format!(
                "environment variable `{name}=…` can change what runs"
            )));
        }
        i += 1;
    }
    if let Some(text) = split {
        // `env -S 'rm -rf x' ARGS`: the string is split into the command.
        let mut script = text;
        if let Some(rest) = args.get(i..).filter(|r| !r.is_empty()) {
            script.push(' ');
            script.push_str(&join(rest));
        }
        describe_script(&script, env, state, depth, inner);
        return Err(problem.unwrap_or_else(|| refusal("`env -S` splits a string into a command")));
    }
    let result = match args.get(i..).filter(|r| !r.is_empty()) {
        None => Ok(()),
        Some(rest) => enter(rest, env, state, depth, inner),
    };
    match problem {
        // An assignment's reason comes first; for an option, the inner command's.
        Some(p) if p.reason.starts_with("environment variable") => Err(p),
        Some(p) => result.and(Err(p)),
        None => result,
    }
}

/// The environment variables a command may be given and stay read-only.
pub(crate) fn harmless_variable(name: &str) -> bool {
    matches!(name, "LANG" | "TZ" | "NO_COLOR" | "TERM" | "COLUMNS") || name.starts_with("LC_")
}

/// A variable set to a value that is known harmless: any value of a
/// [`harmless_variable`], a pager set to `cat` (or empty: no pager) for git
/// and the programs that page (`GIT_PAGER=cat git log`), and
/// `GIT_OPTIONAL_LOCKS=0` (git then skips the index refresh it would write).
pub(crate) fn harmless_setting(name: &str, value: &str, plain: bool) -> bool {
    if harmless_variable(name) {
        return true;
    }
    plain
        && match name {
            "PAGER" | "GIT_PAGER" | "MANPAGER" | "SYSTEMD_PAGER" | "BAT_PAGER" => {
                matches!(value, "" | "cat" | "/bin/cat" | "/usr/bin/cat")
            }
            "GIT_OPTIONAL_LOCKS" => value == "0",
            _ => false,
        }
}

/// GNU `xargs`'s long options.
const XARGS_LONG: &[(&str, Arg)] = &[
    ("null", Arg::No),
    ("arg-file", Arg::Required),
    ("delimiter", Arg::Required),
    ("eof", Arg::Optional),
    ("replace", Arg::Optional),
    ("max-lines", Arg::Optional),
    ("max-args", Arg::Required),
    ("open-tty", Arg::No),
    ("interactive", Arg::No),
    ("no-run-if-empty", Arg::No),
    ("max-chars", Arg::Required),
    ("verbose", Arg::No),
    ("show-limits", Arg::No),
    ("exit", Arg::No),
    ("max-procs", Arg::Required),
    ("process-slot-var", Arg::Required),
    ("help", Arg::No),
    ("version", Arg::No),
];

fn xargs_replace() -> Refusal {
    refusal("`xargs -I` substitutes its input into the command, which cannot be proven read-only")
}

fn xargs_slot_var() -> Refusal {
    refusal("`xargs --process-slot-var` sets an environment variable in every command it runs")
}

/// `find`'s words must be plain, except a start point that is a glob
/// starting with a letter, digit, `_`, `.` or `/`: each of its matches
/// starts the same way, so none is an option or an operator.
fn find_plain_args(args: &[Word]) -> Result<(), Refusal> {
    let mut i = 0;
    while let Some(w) = args.get(i) {
        match w.text.as_str() {
            "-H" | "-L" | "-P" => i += 1,
            "-D" => i += 2,
            t if t.starts_with("-O") || (t.starts_with("-D") && t.len() > 2) => i += 1,
            _ => break,
        }
    }
    let mut start = i;
    while let Some(w) = args.get(start) {
        let t = w.text.as_str();
        if t.starts_with('-') || t == "(" || t == "!" || t == "," {
            break;
        }
        start += 1;
    }
    let safe_glob = |w: &Word| {
        w.expansion.is_none()
            && !w.tilde
            && matches!(w.glob, Some('*' | '?' | '['))
            && w.text
                .starts_with(|c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/'))
    };
    let checked: Vec<Word> = args
        .iter()
        .enumerate()
        .filter(|(k, w)| !((i..start).contains(k) && safe_glob(w)))
        .map(|(_, w)| w.clone())
        .collect();
    crate::opts::plain_args("find", &checked)
}

/// `xargs [OPTION]... [COMMAND [INITIAL-ARGS]...]` read as GNU xargs does
/// (`+0a:E:e::i::I:l::L:n:prs:txP:d:o`, no permutation). `-I`, `-i`,
/// `--replace` and `--process-slot-var` (and their abbreviations) are
/// refused; the command is recorded whatever the options.
fn xargs(
    args: &[Word],
    env: &Env<'_>,
    state: &mut State,
    depth: usize,
    inner: &mut Vec<String>,
) -> Result<(), Refusal> {
    let mut i = 0;
    let mut problem: Option<Refusal> = None;
    // `-a FILE`: the items come from FILE instead of the input.
    let mut arg_files: Vec<&str> = Vec::new();
    while let Some(w) = args.get(i) {
        let a = match plain_option(w, "xargs") {
            Ok(a) => a,
            Err(r) => {
                // Refused, but the items may still name any file.
                env.reads.borrow_mut().push(crate::FileRead {
                    target: crate::ReadTarget::Any,
                    tree: true,
                });
                return Err(r);
            }
        };
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') || a == "-" {
            break;
        }
        i += 1;
        if let Some(long) = a.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((n, _)) => (n, true),
                None => (long, false),
            };
            let hits = long_matches(name, XARGS_LONG);
            let names: Vec<&str> = hits.iter().map(|(n, _)| *n).collect();
            if names.contains(&"process-slot-var") {
                problem.get_or_insert_with(xargs_slot_var);
            } else if names.contains(&"replace") {
                problem.get_or_insert_with(xargs_replace);
            } else if names.len() != 1 {
                problem.get_or_insert_with(|| {
                    refusal(format!("`xargs` option `{a}` is not understood"))
                });
            }
            if names == ["arg-file"] {
                let file = match long.split_once('=') {
                    Some((_, v)) => Some(v),
                    None => args.get(i).map(|w| w.text.as_str()),
                };
                arg_files.extend(file);
            }
            if !attached && hits.iter().any(|(_, k)| *k == Arg::Required) {
                i += 1;
            }
            continue;
        }
        let cluster = &a[1..];
        for (j, ch) in cluster.char_indices() {
            match ch {
                '0' | 'p' | 'r' | 't' | 'x' | 'o' => {}
                'e' | 'l' => break,
                'i' | 'I' => {
                    problem.get_or_insert_with(xargs_replace);
                    if ch == 'I' && j + 1 == cluster.len() {
                        i += 1;
                    }
                    break;
                }
                'a' | 'E' | 'L' | 'n' | 's' | 'P' | 'd' => {
                    if j + 1 == cluster.len() {
                        if ch == 'a' {
                            arg_files.extend(args.get(i).map(|w| w.text.as_str()));
                        }
                        i += 1;
                    } else if ch == 'a' {
                        arg_files.push(&cluster[j + 1..]);
                    }
                    break;
                }
                _ => {
                    problem.get_or_insert_with(|| {
                        refusal(format!("`xargs` option `-{ch}` is not understood"))
                    });
                }
            }
        }
    }
    {
        // The items are read (from FILE or the input), and the command gets
        // them as arguments: they may name any file.
        // A command whose operands and option values are all data (`xargs
        // basename`, `xargs echo`) reads no file, whatever names arrive.
        let prints_only = args
            .get(i)
            .is_some_and(|w| w.is_plain() && crate::model::only_data(&w.text));
        // From a producer of known names (`find … | xargs`), the items are
        // among those names.
        let bounded = if arg_files.is_empty() {
            env.stdin_names.borrow().clone()
        } else {
            None
        };
        env.read_files(arg_files.into_iter().map(str::to_string));
        let mut reads = env.reads.borrow_mut();
        match bounded {
            _ if prints_only => {}
            Some(globs) => reads.extend(globs.into_iter().map(|g| crate::FileRead {
                target: crate::ReadTarget::Names(g),
                tree: true,
            })),
            None => reads.push(crate::FileRead {
                target: crate::ReadTarget::Any,
                tree: true,
            }),
        }
    }
    let Some(rest) = args.get(i..).filter(|r| !r.is_empty()) else {
        return problem.map_or(Ok(()), Err); // runs `echo`
    };
    let verdict = enter(rest, env, state, depth, inner);
    if let Some(p) = problem {
        return Err(p);
    }
    let name = rest.first().map(|w| program_name(w).map(str::to_string));
    match name {
        Some(Ok(n)) if table::any_arguments_safe(&n) => verdict,
        Some(Ok(n)) => Err(refusal(format!(
            "`xargs` runs `{n}` with arguments read from its input, which cannot be proven read-only"
        ))),
        _ => verdict.and(Err(refusal("`xargs` runs an unknown program"))),
    }
}

/// `exec [-cl] [-a NAME] COMMAND`.
fn exec_start(args: &[Word]) -> Start {
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let a = plain_option(w, "exec")?;
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') || a == "-" {
            break;
        }
        i += 1;
        for (j, ch) in a[1..].char_indices() {
            match ch {
                'c' | 'l' => {}
                'a' => {
                    if j + 2 == a.len() {
                        i += 1;
                    }
                    break;
                }
                _ => return Err(refusal(format!("`exec` option `{a}` is not understood"))),
            }
        }
    }
    Ok((i < args.len()).then_some(i))
}

/// Record the commands `find -exec/-execdir/-ok/-okdir COMMAND... ;|+` runs.
/// `find START... EXPRESSION`: read-only without `-delete`, `-fprint*`,
/// `-fls`, `-ok`/`-okdir` (they read an answer from the terminal), and with
/// `-exec`/`-execdir CMD … {} ;|+` only when CMD is read-only whatever
/// names it is given (found names start with the start point or `./`,
/// never with `-`). The files CMD is given are read: those whose name
/// matches the expression's `-name`/`-iname` when the expression is a plain
/// conjunction (`START/**/PATTERN`), else every file under the start points
/// (`START/**`): globs the policy expands on the disk, each match judged as
/// the file it is. `-files0-from F` reads F
/// and takes the start points from it. Every command `-exec` and friends
/// would run is recorded, refused or not.
fn find(
    args: &[Word],
    env: &Env<'_>,
    state: &mut State,
    depth: usize,
    inner: &mut Vec<String>,
) -> Result<(), Refusal> {
    let mut problem: Option<Refusal> = find_plain_args(args).err();
    // Leading options, then start points up to the first expression word.
    let mut i = 0;
    // `-L`/`-follow`: symbolic links are followed, wherever they lead.
    let mut follows = false;
    while let Some(w) = args.get(i) {
        match w.text.as_str() {
            "-L" => {
                follows = true;
                i += 1;
            }
            "-H" | "-P" => i += 1,
            "-D" => i += 2,
            t if t.starts_with("-O") || (t.starts_with("-D") && t.len() > 2) => i += 1,
            _ => break,
        }
    }
    let mut starts: Vec<&str> = Vec::new();
    while let Some(w) = args.get(i) {
        let t = w.text.as_str();
        if t.starts_with('-') || t == "(" || t == "!" || t == "," {
            break;
        }
        starts.push(t);
        i += 1;
    }
    let mut names: Vec<&str> = Vec::new();
    let mut conjunction = true;
    let mut runs = false;
    let mut starts_from_file = false;
    while let Some(w) = args.get(i) {
        let t = w.text.as_str();
        i += 1;
        match t {
            "-delete" | "-fls" | "-fprint" | "-fprint0" | "-fprintf" => {
                problem.get_or_insert_with(|| crate::opts::flag_refusal("find", t));
            }
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                if matches!(t, "-ok" | "-okdir") {
                    // It asks on the terminal before each command.
                    problem.get_or_insert_with(|| crate::opts::flag_refusal("find", t));
                }
                let start = i;
                let mut end = start;
                while let Some(w) = args.get(end) {
                    let plus = w.text == "+" && end > start && args[end - 1].text == "{}";
                    if w.text == ";" || plus {
                        break;
                    }
                    end += 1;
                }
                if end >= args.len() || end == start {
                    problem.get_or_insert_with(|| {
                        Refusal::new(format!(
                            "`find {t}` without a command ended by `;` or `{{}} +`"
                        ))
                    });
                } else {
                    runs = true;
                    let mut scratch = state.clone();
                    let cmd = &args[start..end];
                    let verdict = enter(cmd, env, &mut scratch, depth, inner);
                    let safe = cmd
                        .first()
                        .and_then(|w| program_name(w).ok())
                        .is_some_and(table::any_arguments_safe);
                    if let Err(e) = verdict {
                        problem.get_or_insert(e);
                    } else if !safe {
                        problem.get_or_insert_with(|| {
                            Refusal::with_kind(
                                crate::RefusalKind::RunsProgram,
                                format!("`find {t}` runs `{}`, which is not read-only with any file name", cmd[0].text),
                            )
                        });
                    }
                }
                i = end + 1;
            }
            "-name" | "-iname" => {
                if let Some(v) = args.get(i) {
                    names.push(v.text.as_str());
                }
                i += 1;
            }
            "-files0-from" => {
                env.read_files(args.get(i).map(|v| v.text.clone()));
                starts_from_file = true;
                i += 1;
            }
            "-o" | "-or" | "!" | "-not" | "(" | ")" | "," => conjunction = false,
            "-follow" => follows = true,
            _ => {}
        }
    }
    if runs {
        let mut reads = env.reads.borrow_mut();
        if starts_from_file || follows {
            reads.push(crate::FileRead {
                target: crate::ReadTarget::Any,
                tree: true,
            });
        }
        let starts = if starts.is_empty() { vec!["."] } else { starts };
        for start in starts {
            match (conjunction, names.as_slice()) {
                (true, [name, ..]) if !name.contains('/') => reads.push(crate::FileRead {
                    target: crate::ReadTarget::Path(format!(
                        "{}/**/{name}",
                        start.trim_end_matches('/')
                    )),
                    tree: false,
                }),
                // Every file under the start point, each judged as the file
                // it is (unlike a directory read recursively, `find` hands
                // each name to the command).
                _ => reads.push(crate::FileRead {
                    target: crate::ReadTarget::Path(format!("{}/**", start.trim_end_matches('/'))),
                    tree: false,
                }),
            }
        }
    }
    match problem {
        Some(p) => Err(p),
        None => Ok(()),
    }
}

/// Where a runner's command starts; `Err` when its options cannot be read.
fn runner_start(args: &[Word], spec: &Runner) -> Result<usize, ()> {
    let mut i = 0;
    while let Some(a) = args.get(i).map(|w| w.text.as_str()) {
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') || a == "-" {
            break;
        }
        i += 1;
        if let Some(long) = a.strip_prefix("--") {
            if spec.long_value.contains(&a) {
                i += 1;
            } else if long.contains('=') || spec.long_flags.contains(&a) {
            } else if spec.strict || spec.long_value.iter().any(|v| v.starts_with(a)) {
                // Unknown, or an abbreviation of an option that takes a value.
                return Err(());
            }
            continue;
        }
        let short = Short {
            value: spec.value,
            optional: "",
            forbidden: "",
        };
        if let Ok(true) = short_cluster(&a[1..], &short) {
            i += 1;
        }
    }
    Ok(i + spec.operands)
}

/// The value of a `-c COMMAND` option (`-c X`, `-cX`, `--command X`,
/// `--command=X`, `--session-command X`) anywhere in the arguments.
fn command_options(args: &[Word]) -> Vec<&str> {
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let a = w.text.as_str();
        i += 1;
        if let Some(v) = a
            .strip_prefix("--command=")
            .or_else(|| a.strip_prefix("--session-command="))
        {
            found.push(v);
        } else if matches!(a, "-c" | "--command" | "--session-command") {
            if let Some(v) = args.get(i) {
                found.push(v.text.as_str());
                i += 1;
            }
        } else if let Some(cluster) = a.strip_prefix('-').filter(|c| !c.starts_with('-')) {
            // `-qc CMD`, `-cCMD`: a `c` in a cluster takes the rest or the next word.
            if let Some(pos) = cluster.find('c') {
                match &cluster[pos + 1..] {
                    "" => {
                        if let Some(v) = args.get(i) {
                            found.push(v.text.as_str());
                            i += 1;
                        }
                    }
                    v => found.push(v),
                }
            }
        }
    }
    found
}

/// Record what a runner will run: its command, or its `-c` script.
fn describe_runner(
    name: &str,
    args: &[Word],
    env: &Env<'_>,
    state: &State,
    depth: usize,
    inner: &mut Vec<String>,
) {
    let Some(spec) = runner(name) else {
        return;
    };
    match name {
        // `su USER -c CMD`, `runuser -u USER -- CMD`, `script -c CMD FILE`,
        // `flock FILE -c CMD` / `flock FILE CMD...`.
        "su" | "runuser" | "script" | "flock" => {
            for script in command_options(args) {
                describe_script(script, env, state, depth, inner);
            }
            if name != "script" {
                describe_candidates(args, env, state, depth, inner);
            }
        }
        // `gdb --args PROG ARGS`, `gdb -ex 'shell CMD'`.
        "gdb" => {
            for (i, w) in args.iter().enumerate() {
                if w.text == "--args" {
                    describe_at(args, i + 1, env, state, depth, inner);
                    break;
                }
                let prev = i.checked_sub(1).map(|p| args[p].text.as_str());
                if matches!(
                    prev,
                    Some("-ex" | "--ex" | "-eval-command" | "--eval-command")
                ) {
                    let text = w.text.trim_start();
                    if let Some(cmd) = text
                        .strip_prefix("shell ")
                        .or_else(|| text.strip_prefix('!'))
                    {
                        describe_script(cmd, env, state, depth, inner);
                    }
                }
            }
        }
        // `ssh -o ProxyCommand=CMD HOST CMD`: both run (the first one here).
        "ssh" => {
            let mut i = 0;
            while let Some(w) = args.get(i) {
                i += 1;
                let option = match w.text.as_str() {
                    "-o" => args.get(i).map(|v| v.text.as_str()),
                    t => t.strip_prefix("-o"),
                };
                let Some(option) = option else { continue };
                let (key, value) = option.split_once(['=', ' ', '\t']).unwrap_or((option, ""));
                if key.eq_ignore_ascii_case("ProxyCommand")
                    || key.eq_ignore_ascii_case("LocalCommand")
                {
                    describe_script(
                        value.trim_start_matches(['=', ' ', '\t']),
                        env,
                        state,
                        depth,
                        inner,
                    );
                }
            }
            if let Ok(i) = runner_start(args, &spec) {
                if let Some(rest) = args.get(i..).filter(|r| !r.is_empty()) {
                    describe_script(&join(rest), env, state, depth, inner);
                }
            }
        }
        // `parallel [OPTIONS] COMMAND ::: ARGS`: the command is run by a shell.
        "parallel" => {
            let end = args
                .iter()
                .position(|w| matches!(w.text.as_str(), ":::" | "::::" | ":::+" | "::::+"))
                .unwrap_or(args.len());
            let command = &args[..end];
            let starts = (0..command.len())
                .filter(|&i| !command[i].text.starts_with('-'))
                .take(MAX_CANDIDATES);
            for i in starts {
                if over_budget(inner) {
                    break;
                }
                describe_script(&join(&command[i..]), env, state, depth, inner);
            }
        }
        _ => match runner_start(args, &spec) {
            Ok(i) if spec.shell => {
                if let Some(rest) = args.get(i..).filter(|r| !r.is_empty()) {
                    describe_script(&join(rest), env, state, depth, inner);
                }
            }
            Ok(i) => describe_at(args, i, env, state, depth, inner),
            Err(()) => describe_candidates(args, env, state, depth, inner),
        },
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
            let commands = analyze_nested(&script.text, env, &mut nested, depth + 1);
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
                env.reads.borrow_mut().extend(c.reads);
            }
            verdict
        }
        ShellMode::File => Err(refusal(format!("`{name} FILE` runs a script file"))),
        ShellMode::Stdin => Err(refusal(format!(
            "`{name}` without `-c` runs commands from its input"
        ))),
    }
}
