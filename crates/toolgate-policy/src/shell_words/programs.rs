//! Which words of a command name paths, and in what role (data, a name, a
//! file, a tree), by its program's model: the shell crate's model first,
//! then the table here (data programs, plain programs with their data
//! options and recursive flags, the exactly parsed ones, find), and for
//! any other program every argument read as a tree.

use super::generic::{generic, generic_word, operand};
use super::getopt::{grep, jq, ripgrep, sed};
use super::{Arg, Marks, Role, Word};

/// A word that is exactly commit ids a producer printed.
fn commit_ids(w: &Word<'_>) -> bool {
    w.names
        .is_some_and(|n| n.len() == 1 && n[0] == toolgate_shell::COMMIT_IDS)
}

/// The names bound of a word when it is one of files (not commit ids).
fn file_names<'a>(w: &Word<'a>) -> Option<&'a [String]> {
    w.names.filter(|_| !commit_ids(w))
}

/// The path arguments of a command given as words, program first.
pub(crate) fn arguments<'a>(words: &[Word<'a>], out: &mut Vec<Arg<'a>>) {
    // A commit id a producer printed is a revision to git (`git show
    // "$c"`; the shell crate refuses one after `--` or with `--no-index`),
    // and names no file there. To any other program it is a word the shell
    // decides at run time (a file named like a commit may be a link).
    let git = words
        .first()
        .is_some_and(|w| program_name(w.text) == Some("git"));
    let kept: Vec<Word<'a>>;
    let words = if git && words.iter().skip(1).any(commit_ids) {
        kept = words
            .iter()
            .enumerate()
            .filter(|(k, w)| *k == 0 || !commit_ids(w))
            .map(|(_, w)| *w)
            .collect();
        &kept[..]
    } else {
        words
    };
    let Some((program, args)) = words.split_first() else {
        return;
    };
    let name = match program_name(program.text) {
        Some(name) if program.marks == Marks::default() => name,
        _ => {
            // A program named by a path it runs from (or by an expansion): it
            // may leave the project; running it is not reading it.
            out.push(Arg::new(program.text, program.marks, Role::Name));
            generic(args, Role::Tree, out);
            return;
        }
    };
    if name == "git" && args.iter().any(|w| w.text.starts_with("-L")) {
        return git_line_ranges(args, out);
    }
    // `xargs`: the shell crate reports what the command it runs reads
    // (names from the input: any file, or the names a producer prints).
    if reads_here_recursively(name, args) {
        // `git grep`: searches the working tree from here.
        out.push(Arg::new(".", Marks::default(), Role::Tree));
    }
    // The program's model in the shell crate (`programs.txt`): the same
    // grammar that judged the command read-only says which words are paths.
    let before = out.len();
    if from_shell_model(name, args, out) {
        shifted_data(args, before, out);
        return;
    }
    if let Some(model) = model_of(name) {
        let before = out.len();
        match model.kind {
            Model::Data => {}
            Model::Plain(role) => plain(args, model, role, out),
            Model::Grep => grep(args, out),
            Model::Ripgrep => ripgrep(args, out),
            Model::Sed => sed(args, out),
            Model::Jq => jq(args, out),
            Model::Find => find(args, out),
        }
        if matches!(
            model.kind,
            Model::Grep | Model::Ripgrep | Model::Sed | Model::Jq
        ) {
            shifted_data(args, before, out);
        }
        return;
    }
    generic(args, Role::Tree, out);
}

/// The paths of `name args` as the shell crate's program model reads them
/// (both GNU's and POSIX's reading of the options); false when the program
/// has no model or its options cannot be read.
fn from_shell_model<'a>(name: &str, args: &[Word<'a>], out: &mut Vec<Arg<'a>>) -> bool {
    let texts: Vec<&str> = args.iter().map(|w| w.text).collect();
    let Some(paths) = toolgate_shell::path_words(name, &texts) else {
        return false;
    };
    for path in &paths.words {
        let Some(word) = args.get(path.word) else {
            continue;
        };
        let Some(text) = word.text.get(path.range.clone()) else {
            continue;
        };
        if text.is_empty() || text == "-" || word.pipe {
            continue;
        }
        let whole = path.range.start == 0 && path.range.end == word.text.len();
        let role = match path.role {
            toolgate_shell::PathRole::Name => Role::Name,
            toolgate_shell::PathRole::File => Role::File,
            toolgate_shell::PathRole::Tree => Role::Tree,
        };
        if let (true, Some(globs)) = (whole, file_names(word)) {
            for glob in globs {
                let mut arg = Arg::new(glob, Marks::guessed(glob), role);
                arg.names = true;
                arg.follows_links = paths.follows_links;
                out.push(arg);
            }
            continue;
        }
        let marks = if whole {
            word.marks
        } else {
            word.marks.part(text)
        };
        out.push(Arg {
            follows_links: paths.follows_links,
            ..Arg::new(text, marks, role)
        });
    }
    if paths.searches_here {
        out.push(Arg {
            follows_links: paths.follows_links,
            ..Arg::new(".", Marks::default(), Role::Tree)
        });
    }
    true
}

/// A word the shell may turn into several words (an unquoted glob or
/// expansion) in a place the program reads as data (grep's pattern, sed's
/// script, jq's filter) can push file names into the places after it
/// (`grep -i .env*` searches `.env.production` for `.env`): such a word is
/// also a file or directory that may be read.
fn shifted_data<'a>(args: &[Word<'a>], before: usize, out: &mut Vec<Arg<'a>>) {
    for word in args {
        if !(word.marks.glob || word.marks.expansion) || word.pipe {
            continue;
        }
        if let Some(globs) = file_names(word) {
            // Whole names stay where they are (data); split ones may land
            // in file places: the files the globs match, each checked for
            // what would split.
            if word.names_split {
                for glob in globs {
                    let mut arg = Arg::new(glob, Marks::guessed(glob), Role::Tree);
                    arg.names = true;
                    out.push(arg);
                }
            }
            continue;
        }
        let seen = out[before..]
            .iter()
            .any(|arg| std::ptr::eq(arg.text.as_ptr(), word.text.as_ptr()));
        if !seen {
            // A shifted word may land where the program reads a tree (rg's
            // paths, `grep -r`): read it as one.
            out.push(Arg::new(word.text, word.marks, Role::Tree));
        }
    }
}

/// Programs that read the working directory recursively without naming it:
/// `git grep` (the work tree; `grep` anywhere among git's words, so
/// `git -C dir grep` too), `ag` and `ack`.
fn reads_here_recursively(name: &str, args: &[Word<'_>]) -> bool {
    match name {
        "git" => args.iter().any(|w| w.text == "grep"),
        "ag" | "ack" => true,
        _ => false,
    }
}

/// The path arguments of a command whose words are guessed from its text:
/// every word may be a path read recursively.
pub(crate) fn unmodelled<'a>(words: &[Word<'a>], out: &mut Vec<Arg<'a>>) {
    let Some((program, args)) = words.split_first() else {
        return;
    };
    if program_name(program.text).is_none() || program.marks != Marks::default() {
        out.push(Arg::new(program.text, program.marks, Role::Name));
    }
    // Searches that read the working directory when given no path (`rg x`).
    let searches_here = program_name(program.text).is_some_and(|name| {
        matches!(name, "rg" | "grep" | "egrep" | "fgrep" | "ag" | "ack")
            || reads_here_recursively(name, args)
    });
    if searches_here {
        out.push(Arg::new(".", Marks::default(), Role::Tree));
    }
    generic(args, Role::Tree, out);
}

/// The program a first word names: a bare name, or a name in the standard
/// system directories; `None` for a path to a program elsewhere.
fn program_name(word: &str) -> Option<&str> {
    match word.rsplit_once('/') {
        None => Some(word),
        Some(("/bin" | "/usr/bin" | "/usr/local/bin", base)) => Some(base),
        Some(_) => None,
    }
}

/// `git log|blame -L RANGE`: a line range (`10,20`, `/regex/,+5`,
/// `:funcname`) is no path; only a `:FILE` after it names a file (`git log
/// -L 1,5:src/a.rs`). Every other word as [`generic`] reads it.
fn git_line_ranges<'a>(args: &[Word<'a>], out: &mut Vec<Arg<'a>>) {
    let mut i = 0;
    while let Some(word) = args.get(i) {
        i += 1;
        let (word, range) = if word.text == "-L" {
            let Some(value) = args.get(i) else {
                break;
            };
            i += 1;
            (value, value.text)
        } else if let Some(attached) = word.text.strip_prefix("-L") {
            (word, attached)
        } else {
            generic_word(*word, Role::Tree, out);
            continue;
        };
        if let Some((_, file)) = range.rsplit_once(':') {
            if !file.is_empty() {
                out.push(Arg::new(file, word.marks.part(file), Role::File));
            }
        }
        // The range itself may still hold an expansion or a glob.
        if word.marks.expansion || word.marks.glob {
            generic_word(*word, Role::Tree, out);
        }
    }
}

/// How a modelled program's arguments are read.
#[derive(Debug, Clone, Copy)]
enum Model {
    /// Every argument is data, never a path (`echo`, `printf`, `tr`).
    Data,
    /// Options as in `generic`, except the listed data options; every other
    /// argument has this role (`-r` style flags in `tree_flags` make it `Tree`).
    Plain(Role),
    Grep,
    Ripgrep,
    Sed,
    Jq,
    Find,
}

struct ProgramModel {
    names: &'static [&'static str],
    kind: Model,
    /// Short options whose value is data (a separator, a count, a pattern).
    data_short: &'static str,
    /// Long options whose value is data.
    data_long: &'static [&'static str],
    /// Flags that make the program read directories recursively.
    tree_flags: &'static [&'static str],
}

const fn model(names: &'static [&'static str], kind: Model) -> ProgramModel {
    ProgramModel {
        names,
        kind,
        data_short: "",
        data_long: &[],
        tree_flags: &[],
    }
}

const MODELS: &[ProgramModel] = &[
    model(
        &[
            "echo", "printf", "true", "false", ":", "seq", "sleep", "expr", "tr", "basename",
            "dirname", "which", "type", "uname", "id", "whoami", "nproc", "pwd", "printenv",
            "locale", "yes",
        ],
        Model::Data,
    ),
    model(&["grep", "egrep", "fgrep"], Model::Grep),
    model(&["rg"], Model::Ripgrep),
    model(&["sed"], Model::Sed),
    model(&["jq"], Model::Jq),
    model(&["find"], Model::Find),
    ProgramModel {
        data_short: "IwT",
        data_long: &[
            "ignore",
            "hide",
            "width",
            "tabsize",
            "format",
            "time-style",
            "block-size",
            "color",
            "colour",
            "indicator-style",
            "quoting-style",
            "sort",
            "time",
        ],
        ..model(&["ls", "dir", "vdir"], Model::Plain(Role::Name))
    },
    model(
        &[
            "stat", "du", "tree", "test", "[", "cd", "pushd", "realpath", "readlink", "mkdir",
            "rmdir", "touch",
        ],
        Model::Plain(Role::Name),
    ),
    ProgramModel {
        data_short: "tkS",
        data_long: &[
            "field-separator",
            "key",
            "buffer-size",
            "batch-size",
            "parallel",
            "sort",
        ],
        ..model(&["sort"], Model::Plain(Role::File))
    },
    ProgramModel {
        data_short: "dfbc",
        data_long: &[
            "delimiter",
            "fields",
            "bytes",
            "characters",
            "output-delimiter",
        ],
        ..model(&["cut"], Model::Plain(Role::File))
    },
    ProgramModel {
        data_short: "d",
        data_long: &["delimiters"],
        ..model(&["paste"], Model::Plain(Role::File))
    },
    ProgramModel {
        data_short: "soclNWHREOTdnr",
        data_long: &[
            "separator",
            "output-separator",
            "output-width",
            "table-columns",
            "table-columns-limit",
            "table-name",
            "table-order",
            "table-right",
            "table-hide",
            "table-wrap",
            "table-truncate",
            "table-noextreme",
            "tree",
            "tree-id",
            "tree-parent",
        ],
        ..model(&["column"], Model::Plain(Role::File))
    },
    ProgramModel {
        data_short: "tjo12e",
        ..model(&["join"], Model::Plain(Role::File))
    },
    ProgramModel {
        data_short: "AjNStw",
        data_long: &[
            "address-radix",
            "skip-bytes",
            "read-bytes",
            "strings",
            "format",
            "width",
        ],
        ..model(&["od"], Model::Plain(Role::File))
    },
    ProgramModel {
        data_short: "cglos",
        data_long: &["cols", "groupsize", "len", "offset", "seek"],
        ..model(&["xxd"], Model::Plain(Role::File))
    },
    ProgramModel {
        data_short: "ens",
        data_long: &["format", "length", "skip"],
        ..model(&["hexdump"], Model::Plain(Role::File))
    },
    ProgramModel {
        data_short: "ntes",
        data_long: &["bytes", "radix", "encoding", "output-separator"],
        ..model(&["strings"], Model::Plain(Role::File))
    },
    ProgramModel {
        data_short: "nc",
        data_long: &["lines", "bytes"],
        ..model(&["head", "tail"], Model::Plain(Role::File))
    },
    ProgramModel {
        data_short: "ILxFCUWDS",
        data_long: &[
            "label",
            "ignore-matching-lines",
            "exclude",
            "show-function-line",
            "context",
            "unified",
            "width",
            "ifdef",
            "starting-file",
            "color",
            "palette",
            "tabsize",
        ],
        tree_flags: &["-r", "--recursive"],
        ..model(&["diff"], Model::Plain(Role::File))
    },
    model(
        &[
            "cat",
            "wc",
            "nl",
            "uniq",
            "tac",
            "rev",
            "md5sum",
            "sha1sum",
            "sha224sum",
            "sha256sum",
            "sha384sum",
            "sha512sum",
            "b2sum",
            "cksum",
            "sum",
            "base64",
            "base32",
            "cmp",
            "comm",
            "less",
            "more",
            "fold",
            "fmt",
            "expand",
            "unexpand",
            "file",
        ],
        Model::Plain(Role::File),
    ),
];

/// The model of a program: first by the first byte, so most programs that
/// have none (`git`, `npm`, `cargo`) are told apart without comparing names.
fn model_of(name: &str) -> Option<&'static ProgramModel> {
    let first = *name.as_bytes().first()?;
    MODELS.iter().find(|m| {
        m.names
            .iter()
            .any(|n| n.as_bytes().first() == Some(&first) && *n == name)
    })
}

/// Generic options, minus the model's data options, around arguments of `role`.
fn plain<'a>(args: &[Word<'a>], model: &ProgramModel, role: Role, out: &mut Vec<Arg<'a>>) {
    let recursive = args.iter().any(|w| {
        model.tree_flags.contains(&w.text)
            || (w.text.starts_with('-')
                && !w.text.starts_with("--")
                && model
                    .tree_flags
                    .iter()
                    .filter_map(|f| f.strip_prefix('-').filter(|f| f.len() == 1))
                    .any(|f| w.text[1..].contains(f)))
    });
    let role = if recursive { Role::Tree } else { role };
    let mut i = 0;
    let mut options = true;
    while i < args.len() {
        let word = args[i];
        let text = word.text;
        i += 1;
        if !options {
            operand(word, role, out);
            continue;
        }
        if !text.starts_with('-') || text == "-" {
            generic_word(word, role, out);
            continue;
        }
        if text == "--" {
            options = false;
            continue;
        }
        if let Some(long) = text.strip_prefix("--") {
            match long.split_once('=') {
                Some((name, _)) if model.data_long.contains(&name) => {}
                None if model.data_long.contains(&long) => i += 1,
                _ => generic_word(word, role, out),
            }
            continue;
        }
        // A short cluster: letters up to the first data option, whose value is
        // the rest of the word or the next word.
        let mut data_at = None;
        for (at, c) in text.char_indices().skip(1) {
            if model.data_short.contains(c) {
                data_at = Some(at + c.len_utf8());
                break;
            }
        }
        match data_at {
            Some(end) if end == text.len() => i += 1,
            Some(_) => {}
            None => generic_word(word, role, out),
        }
    }
}

/// find: start points are named, not read (unless `-exec` and friends run a
/// command on what is found); the values of name tests are patterns.
fn find<'a>(args: &[Word<'a>], out: &mut Vec<Arg<'a>>) {
    let runs = args
        .iter()
        .any(|w| matches!(w.text, "-exec" | "-execdir" | "-ok" | "-okdir"));
    let role = if runs { Role::Tree } else { Role::Name };
    let mut i = 0;
    while i < args.len() {
        let word = args[i];
        i += 1;
        match word.text {
            "-name" | "-iname" | "-path" | "-ipath" | "-wholename" | "-iwholename" | "-regex"
            | "-iregex" | "-lname" | "-ilname" | "-printf" => i += 1,
            "-fprintf" => {
                if let Some(file) = args.get(i) {
                    generic_word(*file, Role::File, out);
                }
                i += 2;
            }
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                while let Some(inner) = args.get(i) {
                    i += 1;
                    if matches!(inner.text, ";" | "+") {
                        break;
                    }
                    generic_word(*inner, Role::Tree, out);
                }
            }
            _ => generic_word(word, role, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell_words::guessed_words;

    fn words(text: &str) -> Vec<Word<'_>> {
        guessed_words(text)
    }

    /// (command, [(argument, role)]) for the paths a command's words name.
    #[test]
    fn argument_roles() {
        use Role::*;
        let cases: &[(&str, &[(&str, Role)])] = &[
            ("rg -n /api/v1 src", &[("src", Tree)]),
            ("rg -e /api/v1 src", &[("src", Tree)]),
            ("rg --regexp=/x -e /y", &[(".", Tree)]),
            ("rg /x", &[(".", Tree)]),
            ("rg --files /etc", &[("/etc", Tree)]),
            ("rg -g*.rs TODO", &[(".", Tree)]),
            // Quoted, a --glob value is data; unquoted, the shell expands it
            // first and its words may shift into rg's paths.
            ("rg --glob '/x/**' TODO src", &[("src", Tree)]),
            (
                "rg --glob /x/** TODO src",
                &[("src", Tree), ("/x/**", Tree)],
            ),
            ("rg -f /etc/pats src", &[("/etc/pats", File), ("src", Tree)]),
            // An option rg is not known to take: every word may be a path.
            ("rg --unknown /x src", &[("/x", Tree), ("src", Tree)]),
            ("grep -rn /usr/lib .", &[(".", Tree)]),
            ("grep -rn /usr/lib", &[(".", Tree)]),
            ("grep -e /x/y f", &[("f", File)]),
            ("grep -e/x/y f", &[("f", File)]),
            ("grep /x/y f g", &[("f", File), ("g", File)]),
            ("grep -C 3 /x f", &[("f", File)]),
            ("grep -5 /x f", &[("f", File)]),
            ("grep -f /etc/pats f", &[("/etc/pats", File), ("f", File)]),
            (
                "grep --file=/etc/pats f",
                &[("/etc/pats", File), ("f", File)],
            ),
            (
                "grep --exclude-from /etc/x p f",
                &[("/etc/x", File), ("f", File)],
            ),
            ("grep --include=*.env -r KEY .", &[(".", Tree)]),
            // After an operand, POSIXLY_CORRECT makes `-e` a file: both readings count.
            (
                "grep x -e /etc/passwd",
                &[("x", File), ("-e", File), ("/etc/passwd", File)],
            ),
            // An abbreviated long option is not guessed.
            (
                "grep --fil /etc/x p f",
                &[("/etc/x", Tree), ("p", Tree), ("f", Tree)],
            ),
            ("grep -- -e /etc/x", &[("/etc/x", File)]),
            ("grep x -- -e", &[("--", File), ("-e", File)]),
            ("sed -n /start/,/end/p f", &[("f", File)]),
            ("sed -n -e /x/p f", &[("f", File)]),
            // A script GNU sed reads: its `r` file is reported exactly by the
            // shell analysis (`SimpleCommand::reads`), not guessed here.
            ("sed -n 1r/etc/passwd f", &[("f", File)]),
            // One it cannot read: every piece after `r`/`w` may be a file.
            ("sed -n 1w/etc/x f", &[("/etc/x", File), ("f", File)]),
            (
                "sed -f /etc/script f",
                &[("/etc/script", File), ("f", File)],
            ),
            ("sed -i.bak s/a/b/ f", &[("f", File)]),
            ("jq .a/.b f.json", &[("f.json", File)]),
            ("jq -r --arg x /etc/y .a f.json", &[("f.json", File)]),
            ("jq --rawfile x /etc/y .a", &[("/etc/y", File)]),
            ("jq -n $ARGS --args /a /b", &[]),
            (
                "jq -f /etc/prog.jq f",
                &[("/etc/prog.jq", File), ("f", File)],
            ),
            ("echo /etc/passwd ~root", &[]),
            ("printf %s /etc/x", &[]),
            ("find /abs -name /x -path */y", &[("/abs", Name)]),
            (
                "find . -name *.env -exec cat {} ;",
                &[(".", Tree), ("cat", Tree), ("{}", Tree)],
            ),
            ("ls -la /etc", &[("/etc", Name)]),
            ("cut -d/ -f2 f", &[("f", File)]),
            ("cut -d / -f2 f", &[("f", File)]),
            ("sort -t/ -k2 f", &[("f", File)]),
            ("cat a -", &[("a", File)]),
            ("cat -- -.env", &[("-.env", File)]),
            ("cp -- -.env /tmp", &[("-.env", Tree), ("/tmp", Tree)]),
            ("diff -r a b", &[("a", Tree), ("b", Tree)]),
            ("diff -ru a b", &[("a", Tree), ("b", Tree)]),
            (
                "tar czf x.tgz secrets",
                &[("x.tgz", Tree), ("secrets", Tree)],
            ),
            ("/usr/bin/cat f", &[("f", File)]),
            ("./run x", &[("./run", Name), ("x", Tree)]),
            ("/opt/bin/tool x", &[("/opt/bin/tool", Name), ("x", Tree)]),
        ];
        let mut failures = Vec::new();
        for (command, expected) in cases {
            let mut out = Vec::new();
            arguments(&words(command), &mut out);
            // Every listed argument is found with its role, and no other
            // absolute path is: what is not listed and not absolute (flag
            // letters, pieces of a sed script) names nothing outside the project.
            let got: Vec<(&str, Role)> = out.iter().map(|a| (a.text, a.role)).collect();
            for want in *expected {
                if !got.contains(want) {
                    failures.push(format!("{command}: {want:?} not in {got:?}"));
                }
            }
            for arg in &got {
                if arg.0.starts_with('/') && !expected.contains(arg) {
                    failures.push(format!("{command}: {arg:?} is not expected"));
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}
