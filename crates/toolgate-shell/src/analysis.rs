//! Putting it together: parse a script (fast path or tree-sitter), judge
//! each simple command in order, and derive its patterns.

use std::path::PathBuf;

use crate::context::{program_name, too_deep, Env, Recurse, Shell, State};
use crate::context::{MAX_DEPTH, MAX_SCRIPT};
use crate::syntax::{join, Item, Word};
use crate::{
    arity, git, lexer, opts, parse, table, wrappers, FileRead, Options, Refusal, SimpleCommand,
    WordSpan,
};

/// The settings of an analysis with `options`: the extra read-only
/// prefixes that pass validation, and this module as the analysis the
/// judges recurse into.
pub(crate) fn new_env(options: &Options, tree_sitter_only: bool) -> Env<'_> {
    let extras = options
        .extra_read_only
        .iter()
        .filter(|e| table::validate_extra(&e.join(" ")).is_ok())
        .map(Vec::as_slice)
        .collect();
    Env::new(
        options,
        tree_sitter_only,
        extras,
        Recurse {
            text: analyze_text,
            argv: judge_argv,
        },
    )
}

/// Analyse shell source into simple commands (empty for a blank script).
pub(crate) fn analyze_text(
    src: &str,
    env: &Env<'_>,
    state: &mut State,
    depth: usize,
) -> Vec<SimpleCommand> {
    let trimmed = src.trim();
    if trimmed.is_empty() {
        return Vec::new();
    }
    if let Some(r) = precheck(src) {
        return vec![unparseable(trimmed, r)];
    }
    let fast = if env.tree_sitter_only {
        None
    } else {
        lexer::fast(src)
    };
    let mut items = match fast {
        Some(items) => items,
        None => match parse::parse(src) {
            Ok(items) => items,
            Err(r) => return vec![unparseable(trimmed, r)],
        },
    };
    locale_before_more(&mut items);
    items
        .iter()
        .map(|item| simple_command(item, env, state, depth))
        .collect()
}

/// Bash reads a script one line (complete command) at a time, decoding it
/// in the locale of that moment: `LC_ALL=zh_CN.GBK` on one line makes the
/// next line's multibyte characters swallow a `\`, `|` or `` ` ``. A locale
/// variable set in the shell itself (a standalone assignment, or a prefix of
/// a special builtin, which POSIX shells keep) is refused when any command
/// follows it in the script (the same line included: fail closed).
fn locale_before_more(items: &mut [Item]) {
    let Some((_, init)) = items.split_last_mut() else {
        return;
    };
    for item in init {
        let stays = item.words.first().is_none_or(|w| {
            matches!(
                w.text.as_str(),
                ":" | "."
                    | "break"
                    | "continue"
                    | "eval"
                    | "exec"
                    | "exit"
                    | "export"
                    | "readonly"
                    | "return"
                    | "set"
                    | "shift"
                    | "times"
                    | "trap"
                    | "unset"
            )
        });
        let locale = item
            .assigns
            .iter()
            .find(|a| a.name == "LANG" || a.name.starts_with("LC_"));
        if let (true, Some(a)) = (stays, locale) {
            let r = Refusal::new(format!(
                "locale assignment `{}=…` before more commands changes how they are parsed",
                a.name
            ));
            item.construct.get_or_insert(r);
        }
    }
}

fn unparseable(text: &str, refusal: Refusal) -> SimpleCommand {
    SimpleCommand {
        text: text.to_string(),
        inner: Vec::new(),
        verdict: Err(refusal),
        always: text.to_string(),
        words: Vec::new(),
        redirects: Vec::new(),
        bound_redirects: Vec::new(),
        reads: Vec::new(),
        requires: Vec::new(),
    }
}

/// Refuse what the parsers must never see: huge scripts, control
/// characters, line continuations glued inside a word or operator.
fn precheck(src: &str) -> Option<Refusal> {
    if src.len() > MAX_SCRIPT {
        return Some(Refusal::new(format!(
            "a script longer than {MAX_SCRIPT} bytes is not analysed"
        )));
    }
    if let Some(c) = src
        .chars()
        .find(|&c| (c.is_control() && c != '\n' && c != '\t') || c == '\u{2028}' || c == '\u{2029}')
    {
        return Some(Refusal::new(format!(
            "control character U+{:04X} in the script cannot be proven read-only",
            u32::from(c)
        )));
    }
    let b = src.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            let start = i;
            while i < b.len() && b[i] == b'\\' {
                i += 1;
            }
            let run = i - start;
            if run % 2 == 1 && b.get(i) == Some(&b'\n') {
                let before = start.checked_sub(1).map(|p| b[p]);
                let after = b.get(i + 1).copied();
                let glued = |c: Option<u8>| c.is_some_and(|c| !matches!(c, b' ' | b'\t' | b'\n'));
                if glued(before) && glued(after) {
                    return Some(Refusal::new(
                        "a line continuation inside a word or operator cannot be proven read-only",
                    ));
                }
            }
        } else {
            i += 1;
        }
    }
    None
}

/// Judge one parsed simple command and derive its patterns.
pub(crate) fn simple_command(
    item: &Item,
    env: &Env<'_>,
    state: &mut State,
    depth: usize,
) -> SimpleCommand {
    let text = item.text();
    let mut inner = Vec::new();
    // An `always` answer grants the literal text, not `PROGRAM *`, when a
    // redirection reads outside the project or the syntax is bash-only.
    let literal = item.bash_only().is_some()
        || item
            .redirects
            .iter()
            .filter_map(|r| r.input.as_deref())
            .any(|p| input_problem(p, env, state).is_some());
    let first_read = env.reads.borrow().len();
    let first_require = env.requires.borrow().len();
    let outer_names = env.stdin_names.replace(item.stdin_names.clone());
    let verdict = verdict(item, env, state, depth, &mut inner);
    env.stdin_names.replace(outer_names);
    let mut reads = env.reads.borrow_mut().split_off(first_read);
    for globs in item.redirects.iter().filter_map(|r| r.input_names.as_ref()) {
        reads.extend(globs.iter().map(|g| FileRead {
            target: crate::ReadTarget::Names(g.clone()),
            tree: false,
        }));
    }
    reads.dedup();
    let mut requires = env.requires.borrow_mut().split_off(first_require);
    requires.dedup();
    let always = if literal {
        text.clone()
    } else {
        arity::always(item, &text)
    };
    let (words, redirects) = spans(item);
    SimpleCommand {
        text,
        inner,
        verdict,
        always,
        words,
        redirects,
        bound_redirects: item
            .redirects
            .iter()
            .enumerate()
            .filter(|(_, r)| r.input_names.is_some())
            .map(|(k, _)| k)
            .collect(),
        reads,
        requires,
    }
}

/// Where the words and redirections of `item` lie in `item.text()`, which
/// joins assignments, words and redirections with single spaces.
fn spans(item: &Item) -> (Vec<WordSpan>, Vec<std::ops::Range<usize>>) {
    let mut pos = 0;
    let mut first = true;
    let mut next = |len: usize| {
        if !first {
            pos += 1;
        }
        first = false;
        let start = pos;
        pos += len;
        start..pos
    };
    for a in &item.assigns {
        next(a.name.len() + 1 + a.value.text.len());
    }
    let words = item
        .words
        .iter()
        .map(|w| WordSpan {
            range: next(w.text.len()),
            expansion: w.expansion.is_some(),
            glob: w.glob.is_some(),
            tilde: w.tilde,
            names: w.names.clone(),
            names_split: w.names_split,
            pipe: w.pipe,
        })
        .collect();
    let redirects = item.redirects.iter().map(|r| next(r.text.len())).collect();
    (words, redirects)
}

fn verdict(
    item: &Item,
    env: &Env<'_>,
    state: &mut State,
    depth: usize,
    inner: &mut Vec<String>,
) -> Result<(), Refusal> {
    if item.opaque {
        return Err(item
            .construct
            .clone()
            .unwrap_or_else(|| Refusal::new("this construct cannot be proven read-only")));
    }
    // Redirections are opened before the command runs (before a `cd` moves
    // the directory), so their paths are judged first and reported last.
    let input = item
        .redirects
        .iter()
        .filter_map(|r| r.input.as_deref())
        .find_map(|p| input_problem(p, env, state));
    if item.words.is_empty() {
        if item.assigns.is_empty() {
            let first = item.redirects.iter().find_map(|r| r.refusal.clone());
            return Err(first.or_else(|| item.construct.clone()).unwrap_or_else(|| {
                Refusal::new("a redirection without a command cannot be proven read-only")
            }));
        }
    } else {
        if !item.assigns.is_empty() {
            inner.push(join(&item.words));
        }
        judge_argv(&item.words, env, state, depth, inner)?;
    }
    // `IFS= read -r f`: an empty IFS for the `read` builtin alone (a
    // regular builtin: the assignment lasts for that command in bash and
    // dash) keeps the line whole.
    let read_ifs = |a: &crate::syntax::Assign| {
        a.name == "IFS"
            && a.value.text.is_empty()
            && a.value.is_plain()
            && item
                .words
                .first()
                .is_some_and(|w| w.is_plain() && w.text == "read")
    };
    for a in &item.assigns {
        if !read_ifs(a) && !wrappers::harmless_setting(&a.name, &a.value.text, a.value.is_plain()) {
            let shown = format!("{}=…", a.name);
            return Err(Refusal::new(if item.words.is_empty() {
                format!("assignment `{shown}` can change what later commands run")
            } else {
                format!("environment prefix `{shown}` can change what runs")
            }));
        }
    }
    if let Some(r) = item.redirects.iter().find_map(|r| r.refusal.as_ref()) {
        return Err(r.clone());
    }
    if let Some(c) = &item.construct {
        return Err(c.clone());
    }
    if let Some(r) = input {
        return Err(r);
    }
    if state.shell != Shell::Bash {
        if let Some(r) = item.bash_only() {
            if !ansi_c_data_only(item) {
                return Err(r);
            }
        }
    }
    if state.shell == Shell::Posix {
        if let Some(w) = item.brace() {
            return Err(Refusal::new(format!(
                "brace expansion in `{}` is bash-only syntax that /bin/sh reads differently",
                w.text
            )));
        }
    }
    Ok(())
}

/// Is every bash-only piece of `item` an ANSI-C string `$'…'` that starts a
/// word that both shells read as data? dash splits such a script at the
/// same places (the string holds no `\'`) and reads the word as `$` and the
/// raw body, which is never an option; the word must be no option in bash
/// either (so the options and operands line up the same in both readings),
/// an argument of a program whose operands are roles by position (its
/// model in programs.txt; not one that reads code: sed, awk, jq, find, or
/// runs a command), and no path there: a data operand or option value,
/// such as grep's pattern (`grep -rn $'\t' src`). The bash reading is the
/// one judged; the dash one only differs in that data.
fn ansi_c_data_only(item: &Item) -> bool {
    if item.bash_only.is_some()
        || item.redirects.iter().any(|r| r.bash_only.is_some())
        || item.assigns.iter().any(|a| a.value.bash_only.is_some())
    {
        return false;
    }
    let Some((program, args)) = item.words.split_first() else {
        return false;
    };
    if program.bash_only.is_some() || !program.is_plain() {
        return false;
    }
    let name = program.text.as_str();
    let lead_only = |w: &Word| w.bash_only.is_none() || (w.ansi_c_lead && !w.text.starts_with('-'));
    if name == "echo" {
        // Every word is printed (dash's echo also reads escapes in it).
        return args.iter().all(lead_only);
    }
    let scripted = matches!(
        name,
        "sed" | "awk" | "gawk" | "mawk" | "nawk" | "jq" | "yq" | "find" | "xargs" | "git" | "env"
    ) || crate::programs::is_wrapper(name);
    if scripted || crate::model::program(name).is_none() {
        return false;
    }
    let texts: Vec<&str> = args.iter().map(|w| w.text.as_str()).collect();
    let Some(paths) = crate::model::path_words(name, &texts) else {
        return false;
    };
    args.iter().enumerate().all(|(i, w)| {
        lead_only(w) && (w.bash_only.is_none() || !paths.words.iter().any(|p| p.word == i))
    })
}

/// An input redirection reads only a plain file inside the project: never
/// a device (`/dev/tcp/HOST/PORT` is a socket to bash, `/dev/stdin` is
/// another descriptor), `/proc` or `/sys`, nor anything outside the root.
/// `/dev/null` is judged before (it never gets here).
fn input_problem(path: &str, env: &Env<'_>, state: &State) -> Option<Refusal> {
    let joined = if path.starts_with('/') {
        PathBuf::from(path)
    } else {
        match &state.cwd {
            Some(cwd) => cwd.join(path),
            None => {
                return Some(Refusal::new(format!(
                    "input redirection `< {path}` after a `cd` to an unknown directory cannot be proven to read a project file"
                )))
            }
        }
    };
    let full = opts::normalize(&joined);
    let system = ["/dev", "/proc", "/sys"]
        .iter()
        .any(|d| full.starts_with(d) || path.starts_with(d));
    if system {
        return Some(Refusal::new(format!(
            "input redirection `< {path}` reads a device or kernel file, not a project file"
        )));
    }
    if !full.starts_with(&env.root) {
        return Some(Refusal::new(format!(
            "input redirection `< {path}` reads outside the project"
        )));
    }
    None
}

/// Judge a command given as words (after any wrappers around it).
pub(crate) fn judge_argv(
    words: &[Word],
    env: &Env<'_>,
    state: &mut State,
    depth: usize,
    inner: &mut Vec<String>,
) -> Result<(), Refusal> {
    if depth > MAX_DEPTH {
        return Err(too_deep());
    }
    let Some((first, args)) = words.split_first() else {
        return Err(Refusal::new("empty command"));
    };
    // A program given by a path (`/bin/rm`, `./rm`, `/opt/x/rm`) is also
    // recorded under its name, so a rule such as `rm *` sees it.
    let base = first.text.rsplit('/').next().unwrap_or_default();
    let by_path = first.text.contains('/') && !base.is_empty();
    if by_path {
        let mut text = base.to_string();
        if !args.is_empty() {
            text.push(' ');
            text.push_str(&join(args));
        }
        inner.push(text);
    }
    if let Some(e) = &first.expansion {
        return Err(Refusal::new(format!(
            "expansion `{e}` in the program name cannot be proven read-only"
        )));
    }
    if let Some(g) = first.glob {
        return Err(Refusal::new(format!(
            "glob or brace `{g}` in the program name `{}` cannot be proven read-only",
            first.text
        )));
    }
    let name = match program_name(first) {
        Ok(name) => name,
        Err(e) => {
            // Refused by path; still record what it would run as `base`.
            if by_path {
                let mut scratch = state.clone();
                let _ = wrappers::judge(base, args, env, &mut scratch, depth, inner);
            }
            return Err(e);
        }
    };
    if let Some(result) = wrappers::judge(name, args, env, state, depth, inner) {
        return result;
    }
    if extra_matches(name, args, env, state) {
        return Ok(());
    }
    table::judge(name, args, env, state)
}

/// Does a `planModeReadOnlyCommands` prefix cover this command?
fn extra_matches(name: &str, args: &[Word], env: &Env<'_>, state: &State) -> bool {
    env.extras.iter().any(|extra| {
        let Some((prog, rest)) = extra.split_first() else {
            return false;
        };
        prog == name
            && args.len() >= rest.len()
            && rest
                .iter()
                .zip(args)
                .all(|(e, a)| a.is_plain() && &a.text == e)
            && args
                .iter()
                .all(|a| a.expansion.is_none() && a.glob.is_none())
            && (name != "git" || git::extra_check(args, rest.len(), env, state).is_ok())
    })
}

#[cfg(test)]
mod span_tests {
    use crate::{analyze, Options, Script};

    /// Each command's word and redirection spans cut its text into the words
    /// and redirections as written, with the expansion marks of each word.
    #[test]
    fn spans_cut_the_text() {
        // (script, [(word, expansion, glob, tilde)] of the first command, [redirection])
        type Case<'a> = (&'a str, &'a [(&'a str, bool, bool, bool)], &'a [&'a str]);
        let cases: &[Case<'_>] = &[
            (
                "cat a b",
                &[
                    ("cat", false, false, false),
                    ("a", false, false, false),
                    ("b", false, false, false),
                ],
                &[],
            ),
            (
                "LANG=C grep -e 'a b' f 2>/dev/null <in",
                &[
                    ("grep", false, false, false),
                    ("-e", false, false, false),
                    ("a b", false, false, false),
                    ("f", false, false, false),
                ],
                &["2>/dev/null", "<in"],
            ),
            (
                "cat '*.env' .en? ~root/x '~x' \"$HOME\"/y {a,b}",
                &[
                    ("cat", false, false, false),
                    ("*.env", false, false, false),
                    (".en?", false, true, false),
                    ("~root/x", false, false, true),
                    ("~x", false, false, false),
                    ("$HOME/y", true, false, false),
                    ("{a,b}", false, true, false),
                ],
                &[],
            ),
            (
                "A=1 B=2 ls >/dev/null",
                &[("ls", false, false, false)],
                &[">/dev/null"],
            ),
        ];
        for (script, words, redirects) in cases {
            for tree_sitter_only in [false, true] {
                let analysis = if tree_sitter_only {
                    crate::analyze_tree_sitter_only(Script::Text(script), &Options::default())
                } else {
                    analyze(Script::Text(script), &Options::default())
                };
                let c = &analysis.commands[0];
                let got: Vec<(&str, bool, bool, bool)> = c
                    .words
                    .iter()
                    .map(|w| (&c.text[w.range.clone()], w.expansion, w.glob, w.tilde))
                    .collect();
                assert_eq!(got, *words, "{script}");
                let got: Vec<&str> = c.redirects.iter().map(|r| &c.text[r.clone()]).collect();
                assert_eq!(got, *redirects, "{script}");
            }
        }
    }
}
