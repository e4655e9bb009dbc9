//! The words of shell commands as paths: which words of a command name files
//! (and how the program uses them), where those files are, and which read
//! rules a word could reach through a glob, a directory or an expansion.
//!
//! Everything here fails closed. A program whose arguments are not modelled
//! has every argument taken as a path it may read recursively; a word whose
//! location the shell decides at run time (`$X`, `~user`, `~+`) may be any
//! path, inside the project or out; a glob may name any file it could match;
//! a directory read recursively reaches every file under it.
//!
//! * **Roles.** Each argument gets a role from its program's model: data
//!   (`echo`, `printf`, `tr`; grep's and rg's pattern, sed's script, jq's
//!   filter, find's `-name`/`-path`/`-regex` values, cut/sort/paste
//!   separators: never a path), a name (`ls`, `stat`, `du`, `cd`, find's start
//!   points, a program run by path: it may leave the project, no content is
//!   read), a file (`cat`, `head`, grep's files, sed's files and the `r`/`w`
//!   files of its script), or a tree (`grep -r`, `rg` — the working directory
//!   when no path is named —, `diff -r`, `find … -exec`, and every argument of
//!   every other program). Options are parsed exactly for the programs whose
//!   operands change meaning (grep, rg, sed, jq); an option that is not known
//!   exactly, abbreviations included, makes every word a tree. grep and sed are
//!   read both with GNU argument permutation and without (`POSIXLY_CORRECT`),
//!   and what either reading takes for a file counts. For other programs a
//!   flag gives its `=VALUE` and whatever follows its first letter
//!   (`-f/etc/x`), and any word gives what follows `=` and `:`
//!   (`if=/etc/x`, `HEAD:secrets/key`; the part after `:` only for read rules).
//! * **Views.** The words come from the shell analysis ([`SimpleCommand::words`]);
//!   the command a wrapper runs (`sudo`, `timeout 5`, `env -i`, `xargs`) is
//!   modelled as its own program. Commands known only by their text (inside
//!   `bash -c` or `eval`, or unparsable) have their words guessed at spaces,
//!   and none of them is taken for data. `cd`/`pushd` add the directories they
//!   may go to (`cd -`, `popd`, `cd $X`: unknown) to those words are resolved in.
//! * **Places.** `~` and `~/x`, `$HOME` and `${HOME}` are the home directory;
//!   `~user`, `~+`, `~-`, `~N` and every other expansion are anywhere. A glob
//!   is read as each of its brace alternatives, and a segment that could match
//!   `.` or `..` (`.*`, `.?`) as those too.
//! * **Read rules.** A plain path meets the read rules as a `Read` of it would.
//!   A glob meets every rule that asks or denies for particular files (not a
//!   bare `*`, nor one a later `*` or the same pattern overrides, in any
//!   layer) whose pattern it could intersect: a walk over both patterns
//!   (shell `*` stays within a segment, a rule's `*` does not) that never
//!   under-approximates. A tree also
//!   meets every such rule that names a place in the tree (`secrets/**`,
//!   `config/*.pem`: it does not start with `*`) with files under it; a rule
//!   that matches at any depth (`*.env`, `**/keys/*`) is not reached through
//!   directories (every word could be a directory above such a file). A word that may be
//!   anywhere meets the strictest such rule.
//! * **Globs on the disk.** With a [`crate::GlobOracle`] (the binary installs
//!   one that reads the disk), each glob reading of a word that is read is
//!   first expanded as the shell would (over-approximating `dotglob`,
//!   `globstar` and `nocaseglob`): its matches are judged as the literal paths
//!   they are, and a glob that matches nothing as its own literal text (the
//!   shell passes it unchanged: `cat src/x.env.*` meets `*.env.*` either way).
//!   Only when the oracle cannot tell (unreadable directory, too many entries,
//!   quotes or extglob in the word) or there is none does the glob-vs-glob
//!   test above decide. Whether the word leaves the project is judged on the
//!   glob itself (its matches share its fixed head), one question however
//!   many files it matches. Words that are only names (`ls`, `stat`) never
//!   make the disk be read.

use std::path::{Path, PathBuf};

use toolgate_shell::SimpleCommand;

use crate::mode::Action;
use crate::paths::{is_plain, normalize};
use crate::rules::{Rule, Ruleset};

/// How a command uses a word that may name a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Role {
    /// Only its name or metadata (`ls`, `stat`, `cd`, `find` start points):
    /// it may leave the project, but no content is read.
    Name,
    /// A file whose content is read (`cat`, `head`, `grep PATTERN FILE`).
    File,
    /// A file, or a directory read recursively (`grep -r`, `rg`, `tar`, `cp -r`,
    /// and every argument of a program that is not modelled).
    Tree,
}

/// What the shell would expand in a word.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Marks {
    pub expansion: bool,
    pub glob: bool,
    pub tilde: bool,
}

impl Marks {
    /// Marks read from the text alone, for words whose quoting is unknown:
    /// anything that could expand is taken to expand.
    pub(crate) fn guessed(text: &str) -> Marks {
        Marks {
            expansion: text.contains(['$', '`']),
            glob: has_glob_syntax(text),
            tilde: text.starts_with('~'),
        }
    }

    /// The marks of a part of a word: it keeps what the whole word may expand,
    /// and any part may start with a `~` the shell expands (`--file=~/x`, `a:~/x`).
    fn part(self, text: &str) -> Marks {
        Marks {
            expansion: self.expansion && text.contains(['$', '`']),
            glob: self.glob && has_glob_syntax(text),
            tilde: text.starts_with('~'),
        }
    }
}

fn has_glob_syntax(text: &str) -> bool {
    text.contains(['*', '?', '[', '{']) || ["@(", "!(", "+("].iter().any(|open| text.contains(open))
}

/// A piece of a command that may name a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Arg<'a> {
    pub text: &'a str,
    pub marks: Marks,
    pub role: Role,
    /// False for parts that only name a local file to read rules (`HEAD:path`,
    /// `host:path`): `http://x` is not a path outside the project.
    pub external: bool,
    /// A glob standing for names a command printed (`$(find …)`, `find … |
    /// xargs`): if a match's path has a blank, quote, backslash or glob
    /// character, the consumer may split it into any word.
    pub names: bool,
    /// The program follows symbolic links met below this directory
    /// (`grep -R`, `rg -L`): what they lead to is read too.
    pub follows_links: bool,
}

impl<'a> Arg<'a> {
    pub(crate) fn new(text: &'a str, marks: Marks, role: Role) -> Self {
        Arg {
            text,
            marks,
            role,
            external: true,
            names: false,
            follows_links: false,
        }
    }
}

/// The words of one command as its program would see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Word<'a> {
    pub text: &'a str,
    pub marks: Marks,
    /// The globs the names in this word match (a bounded `$(…)`).
    pub names: Option<&'a [String]>,
    /// With `names`: unquoted, so split into several words.
    pub names_split: bool,
    /// A process substitution `<(…)`: a pipe, no path.
    pub pipe: bool,
}

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

/// Every argument may name a path (`role`): flags give their `=VALUE` and
/// whatever follows their first letter (`-f/etc/x`, `-I../inc`).
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

fn generic<'a>(args: &[Word<'a>], role: Role, out: &mut Vec<Arg<'a>>) {
    for word in args {
        generic_word(*word, role, out);
    }
}

fn generic_word<'a>(word: Word<'a>, role: Role, out: &mut Vec<Arg<'a>>) {
    let text = word.text;
    if text.is_empty() || text == "-" || text == "--" {
        return;
    }
    if text.starts_with('-') && !text.contains('=') {
        // A flag, or a file whose name starts with `-` (after `--`, or for a
        // program without options): to read rules, the whole word too.
        out.push(Arg {
            external: false,
            ..Arg::new(text, word.marks, role)
        });
    }
    if let Some(long) = text.strip_prefix("--") {
        if let Some((_, value)) = long.split_once('=') {
            out.push(Arg::new(value, word.marks.part(value), role));
        }
        return;
    }
    if text.starts_with('-') {
        if let Some((_, value)) = text.split_once('=') {
            out.push(Arg::new(value, word.marks.part(value), role));
        }
        // Whatever follows any option letter may be that option's value.
        for (i, _) in text.char_indices().skip(2) {
            let value = &text[i..];
            out.push(Arg::new(value, word.marks.part(value), role));
        }
        return;
    }
    out.push(Arg::new(text, word.marks, role));
    if let Some((_, value)) = text.split_once('=') {
        out.push(Arg::new(value, word.marks.part(value), role));
    }
    // `HEAD:secrets/key`, `host:path`: the part after a colon may name a file.
    for (i, _) in text.match_indices(':') {
        let value = &text[i + 1..];
        if !value.is_empty() {
            out.push(Arg {
                external: false,
                ..Arg::new(value, word.marks.part(value), role)
            });
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

/// The options of a program whose positional arguments change meaning
/// (grep's pattern, sed's script, jq's filter): parsed exactly, or not at all.
struct Options {
    /// Short letters without a value.
    flags: &'static str,
    /// Short letters with a value.
    valued: &'static str,
    /// Short letters with an optional value, attached only (`sed -i.bak`).
    optional: &'static str,
    /// Long options without a value.
    long_flags: &'static [&'static str],
    /// Long options with a value (`--name=V` or `--name V`).
    long_valued: &'static [&'static str],
    /// Long options with an optional value (`--name=V` only).
    long_optional: &'static [&'static str],
    /// `-NUM` is an option (grep's context).
    digits: bool,
}

/// One option as parsed: its name (a letter or a long name) and its value.
#[derive(Debug, Clone, Copy)]
struct Opt<'a> {
    name: &'a str,
    value: Option<Word<'a>>,
}

#[derive(Debug, Default)]
struct Parsed<'a> {
    options: Vec<Opt<'a>>,
    positional: Vec<Word<'a>>,
}

impl<'a> Parsed<'a> {
    fn has(&self, names: &[&str]) -> bool {
        self.options.iter().any(|o| names.contains(&o.name))
    }
    fn values(&self, names: &'a [&'a str]) -> impl Iterator<Item = Word<'a>> + '_ {
        self.options
            .iter()
            .filter(move |o| names.contains(&o.name))
            .filter_map(|o| o.value)
    }
}

/// Parse `args` as getopt_long would (`permute`: options after operands, as
/// GNU tools do unless `POSIXLY_CORRECT` is set). `None` for an option that
/// is not known exactly (abbreviated long options included).
fn parse<'a>(args: &[Word<'a>], spec: &Options, permute: bool) -> Option<Parsed<'a>> {
    let mut parsed = Parsed::default();
    let mut i = 0;
    let mut options = true;
    while i < args.len() {
        let word = args[i];
        let text = word.text;
        i += 1;
        if !options || !text.starts_with('-') || text == "-" {
            parsed.positional.push(word);
            if !permute {
                options = false;
            }
            continue;
        }
        if text == "--" {
            options = false;
            continue;
        }
        if let Some(long) = text.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (long, None),
            };
            if spec.long_valued.contains(&name) {
                let value = match attached {
                    Some(value) => Word {
                        text: value,
                        marks: word.marks.part(value),
                        names: None,
                        names_split: false,
                        pipe: false,
                    },
                    None => {
                        let next = *args.get(i)?;
                        i += 1;
                        next
                    }
                };
                parsed.options.push(Opt {
                    name,
                    value: Some(value),
                });
            } else if spec.long_optional.contains(&name)
                || (attached.is_none() && spec.long_flags.contains(&name))
            {
                parsed.options.push(Opt {
                    name,
                    value: attached.map(|value| Word {
                        text: value,
                        marks: word.marks.part(value),
                        names: None,
                        names_split: false,
                        pipe: false,
                    }),
                });
            } else {
                return None;
            }
            continue;
        }
        let cluster = &text[1..];
        if spec.digits && cluster.bytes().all(|b| b.is_ascii_digit()) {
            parsed.options.push(Opt {
                name: "C",
                value: None,
            });
            continue;
        }
        for (at, c) in cluster.char_indices() {
            let name = &cluster[at..at + c.len_utf8()];
            let rest = &cluster[at + c.len_utf8()..];
            if spec.flags.contains(c) {
                parsed.options.push(Opt { name, value: None });
            } else if spec.valued.contains(c) || spec.optional.contains(c) {
                let value = if !rest.is_empty() {
                    Some(Word {
                        text: rest,
                        marks: word.marks.part(rest),
                        names: None,
                        names_split: false,
                        pipe: false,
                    })
                } else if spec.valued.contains(c) {
                    let next = *args.get(i)?;
                    i += 1;
                    Some(next)
                } else {
                    None
                };
                parsed.options.push(Opt { name, value });
                break;
            } else {
                return None;
            }
        }
    }
    Some(parsed)
}

/// Whether reading `args` without GNU permutation can differ from reading
/// them with it: some word that looks like an option comes after a word
/// that does not (and not after `--`).
/// The options and operands as GNU getopt reads them (options may follow
/// operands) and, where that differs, as POSIX does (`POSIXLY_CORRECT`: the
/// first operand ends the options). `None` when either reading fails.
fn readings<'a>(args: &[Word<'a>], spec: &Options) -> Option<[Option<Parsed<'a>>; 2]> {
    let gnu = parse(args, spec, true)?;
    let posix = if posix_reading_differs(args) {
        Some(parse(args, spec, false)?)
    } else {
        None
    };
    Some([Some(gnu), posix])
}

fn posix_reading_differs(args: &[Word<'_>]) -> bool {
    let mut operand_seen = false;
    for word in args {
        let text = word.text;
        if text == "--" {
            // Without permutation a `--` after an operand is itself an operand.
            return operand_seen;
        }
        let option = text.starts_with('-') && text != "-";
        if option && operand_seen {
            return true;
        }
        operand_seen |= !option;
    }
    false
}

const GREP: Options = Options {
    flags: "EFGPiywxzsvVbnHhoqaIrRLlcTZUu",
    valued: "efmABCdD",
    optional: "",
    long_flags: &[
        "extended-regexp",
        "fixed-strings",
        "basic-regexp",
        "perl-regexp",
        "ignore-case",
        "no-ignore-case",
        "word-regexp",
        "line-regexp",
        "null-data",
        "no-messages",
        "invert-match",
        "version",
        "help",
        "byte-offset",
        "line-number",
        "no-line-number",
        "line-buffered",
        "with-filename",
        "no-filename",
        "only-matching",
        "quiet",
        "silent",
        "text",
        "recursive",
        "dereference-recursive",
        "files-without-match",
        "files-with-matches",
        "count",
        "initial-tab",
        "null",
        "no-group-separator",
        "binary",
        "unix-byte-offsets",
    ],
    long_valued: &[
        "regexp",
        "file",
        "max-count",
        "label",
        "binary-files",
        "directories",
        "devices",
        "include",
        "exclude",
        "exclude-from",
        "exclude-dir",
        "before-context",
        "after-context",
        "context",
        "group-separator",
    ],
    long_optional: &["color", "colour"],
    digits: true,
};

/// grep: the first operand is the pattern unless `-e`/`-f` give one; files
/// are read recursively with `-r` (the working directory when none is named).
fn grep<'a>(args: &[Word<'a>], out: &mut Vec<Arg<'a>>) {
    // Options after operands count unless POSIXLY_CORRECT is set: both readings.
    let Some(readings) = readings(args, &GREP) else {
        return generic(args, Role::Tree, out);
    };
    for parsed in readings.iter().flatten() {
        let recursive = parsed.has(&["r", "R", "recursive", "dereference-recursive"])
            || parsed
                .values(&["d", "directories"])
                .any(|v| v.text == "recurse");
        let role = if recursive { Role::Tree } else { Role::File };
        for value in parsed.values(&["f", "file", "exclude-from"]) {
            generic_word(value, Role::File, out);
        }
        let given = parsed.has(&["e", "regexp", "f", "file"]);
        let files = if given {
            &parsed.positional[..]
        } else {
            parsed.positional.get(1..).unwrap_or(&[])
        };
        for file in files {
            operand(*file, role, out);
        }
        if files.is_empty() && recursive {
            out.push(Arg::new(".", Marks::default(), Role::Tree));
        }
    }
}

/// An operand: a path as written (a leading `-` is a file name here).
fn operand<'a>(word: Word<'a>, role: Role, out: &mut Vec<Arg<'a>>) {
    if word.text != "-" && !word.text.is_empty() {
        out.push(Arg::new(word.text, word.marks, role));
    }
}

const RIPGREP: Options = Options {
    flags: "sSiFLvnNxwclqoUuzaPpHIhVb0.",
    valued: "ABCMmjtTgfeEr",
    optional: "",
    long_flags: &[
        "auto-hybrid-regex",
        "no-auto-hybrid-regex",
        "binary",
        "no-binary",
        "block-buffered",
        "no-block-buffered",
        "byte-offset",
        "no-byte-offset",
        "case-sensitive",
        "column",
        "no-column",
        "count",
        "count-matches",
        "crlf",
        "no-crlf",
        "debug",
        "trace",
        "files",
        "files-with-matches",
        "files-without-match",
        "fixed-strings",
        "no-fixed-strings",
        "follow",
        "no-follow",
        "glob-case-insensitive",
        "no-glob-case-insensitive",
        "help",
        "heading",
        "no-heading",
        "hidden",
        "no-hidden",
        "ignore-case",
        "ignore-file-case-insensitive",
        "no-ignore-file-case-insensitive",
        "include-zero",
        "no-include-zero",
        "invert-match",
        "no-invert-match",
        "json",
        "no-json",
        "line-buffered",
        "no-line-buffered",
        "line-number",
        "no-line-number",
        "line-regexp",
        "max-columns-preview",
        "no-max-columns-preview",
        "mmap",
        "no-mmap",
        "multiline",
        "no-multiline",
        "multiline-dotall",
        "no-multiline-dotall",
        "no-config",
        "no-filename",
        "with-filename",
        "no-ignore",
        "ignore",
        "no-ignore-dot",
        "ignore-dot",
        "no-ignore-exclude",
        "ignore-exclude",
        "no-ignore-files",
        "ignore-files",
        "no-ignore-global",
        "ignore-global",
        "no-ignore-messages",
        "ignore-messages",
        "no-ignore-parent",
        "ignore-parent",
        "no-ignore-vcs",
        "ignore-vcs",
        "no-messages",
        "messages",
        "no-pcre2-unicode",
        "pcre2-unicode",
        "no-require-git",
        "require-git",
        "no-unicode",
        "unicode",
        "null",
        "null-data",
        "one-file-system",
        "no-one-file-system",
        "only-matching",
        "passthru",
        "passthrough",
        "pcre2",
        "no-pcre2",
        "pcre2-version",
        "no-pre",
        "pretty",
        "quiet",
        "search-zip",
        "no-search-zip",
        "smart-case",
        "sort-files",
        "no-sort-files",
        "stats",
        "no-stats",
        "text",
        "no-text",
        "trim",
        "no-trim",
        "type-list",
        "unrestricted",
        "version",
        "vimgrep",
        "word-regexp",
        "no-context-separator",
        "no-encoding",
    ],
    long_valued: &[
        "after-context",
        "before-context",
        "context",
        "color",
        "colors",
        "context-separator",
        "dfa-size-limit",
        "encoding",
        "engine",
        "field-context-separator",
        "field-match-separator",
        "file",
        "glob",
        "iglob",
        "ignore-file",
        "max-columns",
        "max-count",
        "max-depth",
        "maxdepth",
        "max-filesize",
        "path-separator",
        "pre",
        "pre-glob",
        "regex-size-limit",
        "regexp",
        "replace",
        "sort",
        "sortr",
        "threads",
        "type",
        "type-add",
        "type-clear",
        "type-not",
    ],
    long_optional: &[],
    digits: false,
};

/// rg: like grep, always recursive, the working directory when no path is named.
fn ripgrep<'a>(args: &[Word<'a>], out: &mut Vec<Arg<'a>>) {
    let Some(parsed) = parse(args, &RIPGREP, true) else {
        return generic(args, Role::Tree, out);
    };
    for value in parsed.values(&["f", "file", "ignore-file", "pre"]) {
        generic_word(value, Role::File, out);
    }
    let given = parsed.has(&["e", "regexp", "f", "file", "files", "type-list"]);
    let paths = if given {
        &parsed.positional[..]
    } else {
        parsed.positional.get(1..).unwrap_or(&[])
    };
    for path in paths {
        operand(*path, Role::Tree, out);
    }
    if paths.is_empty() {
        out.push(Arg::new(".", Marks::default(), Role::Tree));
    }
}

const SED: Options = Options {
    flags: "nrEsuzb",
    valued: "efl",
    optional: "i",
    long_flags: &[
        "quiet",
        "silent",
        "regexp-extended",
        "separate",
        "unbuffered",
        "null-data",
        "posix",
        "debug",
        "sandbox",
        "follow-symlinks",
        "help",
        "version",
        "binary",
    ],
    long_valued: &["expression", "file", "line-length"],
    long_optional: &["in-place"],
    digits: false,
};

/// sed: the first operand is the script unless `-e`/`-f` give one; the files
/// a script reads or writes (`r`, `R`, `w`, `W`, and `e` commands) count.
fn sed<'a>(args: &[Word<'a>], out: &mut Vec<Arg<'a>>) {
    let Some(readings) = readings(args, &SED) else {
        return generic(args, Role::Tree, out);
    };
    for parsed in readings.iter().flatten() {
        for value in parsed.values(&["f", "file"]) {
            generic_word(value, Role::File, out);
        }
        let mut scripts: Vec<Word<'a>> = parsed.values(&["e", "expression"]).collect();
        let given = parsed.has(&["e", "expression", "f", "file"]);
        let files = if given {
            &parsed.positional[..]
        } else {
            scripts.extend(parsed.positional.first().copied());
            parsed.positional.get(1..).unwrap_or(&[])
        };
        for script in scripts {
            // A script GNU sed's grammar reads, writing and running nothing:
            // the files its `r`/`R` commands read are known exactly (the
            // shell analysis reports them); otherwise every piece of it that
            // could follow such a command may be a file.
            if !toolgate_shell::sed_script_only_reads(script.text) {
                sed_script_files(script, out);
            }
        }
        for file in files {
            operand(*file, Role::File, out);
        }
    }
}

/// The files a sed script may name: after every `r R w W e` letter, the rest
/// of its line (whole, and word by word). Over-approximate: `s/error/x/` gives
/// `ror/x/` too, which names nothing a rule guards. The parts are marked as the
/// script word is: sed expands nothing, so `$` in `/^$/p` is no expansion.
fn sed_script_files<'a>(script: Word<'a>, out: &mut Vec<Arg<'a>>) {
    for line in script.text.split('\n') {
        for (at, c) in line.char_indices() {
            if !matches!(c, 'r' | 'R' | 'w' | 'W' | 'e') {
                continue;
            }
            let rest = line[at + 1..].trim_start();
            if rest.is_empty() {
                continue;
            }
            // The script is one word the shell already expanded: its parts
            // carry what the whole word carried (`/^$/` is no expansion).
            out.push(Arg::new(rest, script.marks.part(rest), Role::File));
            for part in rest
                .split_whitespace()
                .filter(|part| part.len() < rest.len())
            {
                out.push(Arg::new(part, script.marks.part(part), Role::File));
            }
        }
    }
}

const JQ: Options = Options {
    flags: "nrjascCMSeRhVbf",
    valued: "L",
    optional: "",
    long_flags: &[
        "tab",
        "seq",
        "stream",
        "stream-errors",
        "raw-output",
        "raw-output0",
        "join-output",
        "ascii-output",
        "sort-keys",
        "color-output",
        "monochrome-output",
        "null-input",
        "raw-input",
        "slurp",
        "compact-output",
        "exit-status",
        "unbuffered",
        "from-file",
        "args",
        "jsonargs",
        "help",
        "version",
        "build-configuration",
        "debug-dump-disasm",
        "debug-trace",
        "binary",
    ],
    long_valued: &["indent", "library-path", "run-tests"],
    long_optional: &[],
    digits: false,
};

/// jq: the first operand is the filter (a file with `-f`); `--arg NAME VALUE`
/// and friends take two words; after `--args` operands are data.
fn jq<'a>(args: &[Word<'a>], out: &mut Vec<Arg<'a>>) {
    // The options of two values are taken out first; the rest is parsed.
    let mut rest: Vec<Word<'a>> = Vec::with_capacity(args.len());
    let mut data_from: Option<usize> = None;
    let mut i = 0;
    let mut options = true;
    while i < args.len() {
        let word = args[i];
        i += 1;
        match word.text {
            "--" if options => {
                options = false;
                rest.push(word);
            }
            "--arg" | "--argjson" if options => i += 2,
            "--slurpfile" | "--rawfile" | "--argfile" if options => {
                if let Some(file) = args.get(i + 1) {
                    generic_word(*file, Role::File, out);
                }
                i += 2;
            }
            "--args" | "--jsonargs" if options => {
                data_from.get_or_insert(rest.len());
            }
            _ => rest.push(word),
        }
    }
    let Some(parsed) = parse(&rest, &JQ, true) else {
        return generic(args, Role::Tree, out);
    };
    for value in parsed.values(&["L", "library-path", "run-tests"]) {
        generic_word(value, Role::Tree, out);
    }
    let from_file = parsed.has(&["f", "from-file"]);
    let mut operands = parsed.positional.iter();
    if !from_file {
        if let Some(filter) = operands.next() {
            // A filter that loads modules reads files named inside it.
            if filter.text.contains("import") || filter.text.contains("include") {
                out.push(Arg::new(
                    filter.text,
                    Marks {
                        expansion: true,
                        ..filter.marks
                    },
                    Role::File,
                ));
            }
        }
    }
    for file in operands {
        // After `--args`, operands are data; which ones is found by position.
        let index = rest
            .iter()
            .position(|w| std::ptr::eq(w.text, file.text))
            .unwrap_or(0);
        if data_from.is_some_and(|from| index >= from) {
            continue;
        }
        operand(*file, Role::File, out);
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

/// The words of a command, program first, with their marks; `None` when the
/// command could not be parsed (its text is all there is).
pub(crate) fn command_words(command: &SimpleCommand) -> Option<Vec<Word<'_>>> {
    if command.words.is_empty() {
        return None;
    }
    command
        .words
        .iter()
        .map(|span| {
            Some(Word {
                text: command.text.get(span.range.clone())?,
                marks: Marks {
                    expansion: span.expansion,
                    glob: span.glob,
                    tilde: span.tilde,
                },
                names: span.names.as_deref(),
                names_split: span.names_split,
                pipe: span.pipe,
            })
        })
        .collect()
}

/// Text split at spaces, with guessed marks: for commands known only by
/// their text (inside `bash -c`, unparsable ones).
pub(crate) fn guessed_words(text: &str) -> Vec<Word<'_>> {
    text.split(' ')
        .filter(|t| !t.is_empty())
        .map(|text| Word {
            text,
            marks: Marks::guessed(text),
            names: None,
            names_split: false,
            pipe: false,
        })
        .collect()
}

/// The path a redirection names, if any: `<in`, `2>>log`, `&>out`; not a
/// descriptor (`2>&1`, `<&-`), a here-document or a here-string (data).
pub(crate) fn redirect_target(text: &str) -> Option<&str> {
    let rest = match text.strip_prefix('{') {
        Some(named) => named.split_once('}').map_or(text, |(_, rest)| rest),
        None => text.trim_start_matches(|c: char| c.is_ascii_digit()),
    };
    if rest.starts_with("<<") {
        return None;
    }
    let target = rest.trim_start_matches(['<', '>', '&', '|']);
    if target.len() == rest.len()
        || target.is_empty()
        || target == "-"
        || target.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    Some(target)
}

/// Where a word may point once the shell has expanded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// Normalised absolute paths (globs kept), one per reading of the word.
    Paths(Vec<PathBuf>),
    /// Decided at run time (`$X`, `~user`, `~+`, a directory `cd` went to that
    /// cannot be known): any path, inside the project or out.
    Anywhere,
}

/// The most readings of one word (brace alternatives times dot-glob choices)
/// followed; a word with more may be anywhere.
const MAX_READINGS: usize = 32;

/// Where `text` points, relative to each possible working directory (`None`:
/// unknown).
pub(crate) fn place(
    text: &str,
    marks: Marks,
    bases: &[Option<PathBuf>],
    home: Option<&Path>,
) -> Place {
    let mut text = std::borrow::Cow::Borrowed(text);
    if marks.expansion {
        // Only `$HOME` leading an otherwise plain word is known.
        let rest = text
            .strip_prefix("${HOME}")
            .or_else(|| text.strip_prefix("$HOME"))
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
            .filter(|rest| !rest.contains(['$', '`']));
        match (rest, home) {
            (Some(rest), Some(home)) => {
                text = std::borrow::Cow::Owned(format!("{}{rest}", home.to_string_lossy()))
            }
            _ => return Place::Anywhere,
        }
    } else if marks.tilde {
        // `~` and `~/x` are the home directory; `~user`, `~+`, `~-`, `~2` are not known.
        let known = text == "~" || text.starts_with("~/");
        match home {
            Some(home) if known => {
                text = std::borrow::Cow::Owned(format!("{}{}", home.to_string_lossy(), &text[1..]))
            }
            _ => return Place::Anywhere,
        }
    }
    let readings = if marks.glob {
        match glob_readings(&text) {
            Some(readings) => readings,
            None => return Place::Anywhere,
        }
    } else {
        vec![text.into_owned()]
    };
    let mut paths = Vec::new();
    for reading in readings {
        for base in bases {
            match base {
                Some(base) => paths.push(normalize(&reading, base, home)),
                None if reading.starts_with('/') => {
                    paths.push(normalize(&reading, Path::new("/"), home))
                }
                None => return Place::Anywhere,
            }
        }
    }
    paths.dedup();
    Place::Paths(paths)
}

/// The readings of a glob word: its brace alternatives, and for each segment
/// that could match `.` or `..` (`.*`, `.?`) those too; `None` past the limit.
fn glob_readings(text: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for alternative in expand_braces(text)? {
        let segments: Vec<&str> = alternative.split('/').collect();
        let dotty: Vec<usize> = (0..segments.len())
            .filter(|&i| could_be_dot(segments[i]))
            .collect();
        let choices = 3usize.checked_pow(u32::try_from(dotty.len()).ok()?)?;
        if out.len() + choices > MAX_READINGS {
            return None;
        }
        for mut choice in 0..choices {
            let mut segments = segments.clone();
            for &i in &dotty {
                segments[i] = match choice % 3 {
                    0 => segments[i],
                    1 => ".",
                    _ => "..",
                };
                choice /= 3;
            }
            out.push(segments.join("/"));
        }
    }
    Some(out)
}

/// A glob segment that could match `.` or `..`: it starts with a literal dot
/// and what follows could be empty or one dot.
fn could_be_dot(segment: &str) -> bool {
    let Some(rest) = segment.strip_prefix('.') else {
        return false;
    };
    if !has_glob_syntax(rest) {
        return false;
    }
    let tokens = word_tokens(rest);
    intersects(&tokens, &[]) || intersects(&tokens, &[Tok::Lit('.')])
}

/// Brace expansion as bash does it (`a{b,c}d`, nested, `{1..3}`), with the
/// word itself kept (a quoted `{a,b}` is a file of that name). `None` when
/// the alternatives exceed the limit.
fn expand_braces(text: &str) -> Option<Vec<String>> {
    let mut out = vec![text.to_string()];
    let mut work = vec![text.to_string()];
    while let Some(word) = work.pop() {
        let Some((prefix, alternatives, suffix)) = first_brace(&word) else {
            continue;
        };
        for alternative in alternatives {
            let expanded = format!("{prefix}{alternative}{suffix}");
            if !out.contains(&expanded) {
                if out.len() >= MAX_READINGS {
                    return None;
                }
                out.push(expanded.clone());
                work.push(expanded);
            }
        }
    }
    Some(out)
}

/// The first brace group with alternatives: (before, alternatives, after).
fn first_brace(word: &str) -> Option<(&str, Vec<String>, &str)> {
    let bytes = word.as_bytes();
    for (open, _) in word.match_indices('{') {
        let mut depth = 0;
        let mut commas = Vec::new();
        let mut close = None;
        for (at, &b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(at);
                        break;
                    }
                }
                b',' if depth == 1 => commas.push(at),
                _ => {}
            }
        }
        let Some(close) = close else {
            continue;
        };
        let inner = &word[open + 1..close];
        let alternatives: Vec<String> = if !commas.is_empty() {
            let mut parts = Vec::new();
            let mut from = open + 1;
            for &comma in &commas {
                parts.push(word[from..comma].to_string());
                from = comma + 1;
            }
            parts.push(word[from..close].to_string());
            parts
        } else if let Some(sequence) = sequence(inner) {
            sequence
        } else {
            continue;
        };
        return Some((&word[..open], alternatives, &word[close + 1..]));
    }
    None
}

/// `{1..5}`, `{a..e}`, `{1..9..2}`: the elements, or a star-like stand-in
/// (letters and digits only) when there are too many.
fn sequence(inner: &str) -> Option<Vec<String>> {
    let mut parts = inner.split("..");
    let (from, to) = (parts.next()?, parts.next()?);
    let step = parts.next();
    if parts.next().is_some() || step.is_some_and(|s| s.parse::<i64>().is_err()) {
        return None;
    }
    let numeric = |s: &str| s.parse::<i64>().is_ok();
    let letter = |s: &str| s.len() == 1 && s.bytes().all(|b| b.is_ascii_alphabetic());
    if (numeric(from) && numeric(to)) || (letter(from) && letter(to)) {
        // Letters, digits and a minus sign: never `/` or `.`; a non-crossing star covers them.
        Some(vec!["*".to_string()])
    } else {
        None
    }
}

/// One element of a glob as matched here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tok {
    Lit(char),
    /// Any one character.
    One,
    /// Any run of characters other than `/` (a shell `*`).
    Star,
    /// Any run of characters (a rule's `*`, a shell `**`).
    Any,
}

/// A shell glob (already brace-expanded) as tokens: `*`, `**`, `?`,
/// `[...]`, extglob groups; every other character literal.
pub(crate) fn word_tokens(text: &str) -> Vec<Tok> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let group = chars.get(i + 1) == Some(&'(') && matches!(c, '*' | '?' | '@' | '!' | '+');
        if group {
            // An extglob group matches within one segment.
            let mut depth = 0;
            let mut j = i + 1;
            while j < chars.len() {
                match chars[j] {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            out.push(Tok::Star);
            i = j + 1;
            continue;
        }
        match c {
            '*' => {
                let mut j = i;
                while chars.get(j) == Some(&'*') {
                    j += 1;
                }
                out.push(if j - i > 1 { Tok::Any } else { Tok::Star });
                i = j;
            }
            '?' => {
                out.push(Tok::One);
                i += 1;
            }
            '[' => {
                // A bracket expression up to its `]` (a `]` right after `[` or `[!` is literal).
                let mut j = i + 1;
                if matches!(chars.get(j), Some('!' | '^')) {
                    j += 1;
                }
                if chars.get(j) == Some(&']') {
                    j += 1;
                }
                while j < chars.len() && chars[j] != ']' {
                    j += 1;
                }
                if j < chars.len() {
                    out.push(Tok::One);
                    i = j + 1;
                } else {
                    out.push(Tok::Lit('['));
                    i += 1;
                }
            }
            c => {
                out.push(Tok::Lit(c));
                i += 1;
            }
        }
    }
    out
}

/// A rule pattern as tokens: `*` any run (including `/`), `?` one character.
pub(crate) fn rule_tokens(pattern: &str) -> Vec<Tok> {
    pattern
        .chars()
        .map(|c| match c {
            '*' => Tok::Any,
            '?' => Tok::One,
            c => Tok::Lit(c),
        })
        .collect()
}

fn literal_tokens(text: &str) -> impl Iterator<Item = Tok> + '_ {
    text.chars().map(Tok::Lit)
}

/// Could one string match both token sequences? A walk over pairs of
/// positions (at most |a|·|b| of them), so never exponential.
pub(crate) fn intersects(a: &[Tok], b: &[Tok]) -> bool {
    let width = b.len() + 1;
    let mut seen = vec![false; (a.len() + 1) * width];
    let mut stack = vec![(0usize, 0usize)];
    let star = |t: Tok| matches!(t, Tok::Star | Tok::Any);
    while let Some((i, j)) = stack.pop() {
        if std::mem::replace(&mut seen[i * width + j], true) {
            continue;
        }
        if i == a.len() && j == b.len() {
            return true;
        }
        let mut push = |i: usize, j: usize| {
            if !seen[i * width + j] {
                stack.push((i, j));
            }
        };
        if i < a.len() && star(a[i]) {
            push(i + 1, j);
        }
        if j < b.len() && star(b[j]) {
            push(i, j + 1);
        }
        if i < a.len() && j < b.len() {
            let (x, y) = (a[i], b[j]);
            if star(x) && star(y) {
                continue;
            }
            let compatible = match (x, y) {
                (Tok::Lit(c), Tok::Lit(d)) => c == d,
                (Tok::Lit(c), Tok::Star) | (Tok::Star, Tok::Lit(c)) => c != '/',
                _ => true,
            };
            if compatible {
                let next_i = if star(x) { i } else { i + 1 };
                let next_j = if star(y) { j } else { j + 1 };
                push(next_i, next_j);
            }
        }
    }
    false
}

/// A read rule that guards particular files, with its pattern as absolute
/// token sequences.
#[derive(Debug)]
pub(crate) struct Guard<'p> {
    pub rule: &'p Rule,
    /// The pattern names a place in the tree (`secrets/**`, `config/*.pem`),
    /// so a directory read recursively can reach it; a pattern that matches at
    /// any depth (`*.env`, `**/keys/*`) is not reached through directories.
    anchored: bool,
    absolute: Vec<Vec<Tok>>,
    /// Later rules `PREFIX*SUFFIX` (absolute), which decide every path they match.
    overriding: Vec<(String, String)>,
}

impl Guard<'_> {
    /// A later rule matches every string of `tokens` (so this rule decides none).
    fn overridden_for(&self, tokens: &[Tok]) -> bool {
        self.overriding
            .iter()
            .any(|(prefix, suffix)| contained(tokens, prefix, suffix))
    }
}

/// Every string `tokens` match starts with `prefix` and ends with `suffix`
/// (so matches `prefix*suffix`): the first and last tokens spell them and do
/// not overlap.
fn contained(tokens: &[Tok], prefix: &str, suffix: &str) -> bool {
    let (p, s) = (prefix.chars().count(), suffix.chars().count());
    p + s <= tokens.len()
        && tokens
            .iter()
            .zip(prefix.chars())
            .all(|(t, c)| *t == Tok::Lit(c))
        && tokens
            .iter()
            .rev()
            .zip(suffix.chars().rev())
            .all(|(t, c)| *t == Tok::Lit(c))
}

/// The read rules that ask or deny for particular files and that no later
/// rule (of any layer) overrides wholesale (a later `*`, or the same pattern
/// again).
pub(crate) fn guards<'p>(ruleset: &'p Ruleset, root: &Path) -> Vec<Guard<'p>> {
    let root = root.to_string_lossy();
    let prefix = if root.ends_with('/') {
        root.into_owned()
    } else {
        format!("{root}/")
    };
    let mut out = Vec::new();
    {
        let rules = ruleset.rules();
        for (index, rule) in rules.iter().enumerate() {
            let pattern = rule.pattern.as_str();
            if !rule.permission.matches("read") || rule.action == Action::Allow || pattern == "*" {
                continue;
            }
            let later: Vec<&Rule> = rules[index + 1..]
                .iter()
                .filter(|later| later.permission.matches("read"))
                .collect();
            if later
                .iter()
                .any(|later| later.pattern.as_str() == "*" || later.pattern.as_str() == pattern)
            {
                continue;
            }
            // Later rules of the form `PREFIX*SUFFIX` decide every path they
            // contain: a word inside one of them is past this rule.
            let overriding = later
                .iter()
                .filter_map(|later| {
                    let pattern = later.pattern.as_str();
                    let (before, after) = pattern.split_once('*')?;
                    let after = after.trim_start_matches('*');
                    if after.contains(['*', '?']) || before.contains('?') {
                        return None;
                    }
                    let before = if before.starts_with('/') {
                        before.to_string()
                    } else {
                        format!("{prefix}{before}")
                    };
                    Some((before, after.to_string()))
                })
                .collect();
            let tokens = rule_tokens(pattern);
            let mut absolute = Vec::new();
            if !pattern.starts_with('/') {
                absolute.push(
                    literal_tokens(&prefix)
                        .chain(tokens.iter().copied())
                        .collect(),
                );
            }
            if matches!(tokens.first(), Some(Tok::Lit('/') | Tok::One | Tok::Any)) {
                absolute.push(tokens.clone());
            }
            let anchored = names_a_place(pattern);
            out.push(Guard {
                rule,
                anchored,
                absolute,
                overriding,
            });
        }
    }
    out
}

/// A read pattern that names a place in the tree (`secrets/**`,
/// `config/*.pem`, `/home/me/.ssh/*`), as opposed to one that matches at any
/// depth (`*.env`, `**/keys/*`): only the former is reached through
/// directories, or every word of every command could be a directory above it.
pub(crate) fn names_a_place(pattern: &str) -> bool {
    !pattern.starts_with('*')
}

/// How a word reaches a guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// A glob that could match a file the rule guards.
    Glob,
    /// A directory read recursively with guarded files under it.
    Directory,
    /// A word the shell decides at run time.
    Anywhere,
}

impl Reach {
    pub(crate) fn phrase(self) -> &'static str {
        match self {
            Reach::Glob => "a glob that could match a file it guards",
            Reach::Directory => "a directory read recursively with files it guards inside",
            Reach::Anywhere => {
                "a word the shell expands at run time, which could name a file it guards"
            }
        }
    }
}

/// The strictest guard a glob path (or, read recursively, anything under it)
/// could match.
pub(crate) fn reached<'g, 'p>(
    guards: &'g [Guard<'p>],
    path: &Path,
    glob: bool,
    role: Role,
) -> Option<(&'g Guard<'p>, Reach)> {
    let text = path.to_string_lossy();
    let file: Vec<Tok> = if glob {
        word_tokens(&text)
    } else {
        literal_tokens(&text).collect()
    };
    let mut best: Option<(&Guard<'p>, Reach)> = None;
    let mut consider = |guard: &'g Guard<'p>, reach: Reach| {
        if best.is_none_or(|(b, _)| guard.rule.action > b.rule.action) {
            best = Some((guard, reach));
        }
    };
    for guard in guards {
        if glob
            && !guard.overridden_for(&file)
            && guard.absolute.iter().any(|g| intersects(&file, g))
        {
            consider(guard, Reach::Glob);
        } else if role == Role::Tree && guard.anchored {
            let mut under = file.clone();
            if text != "/" {
                under.push(Tok::Lit('/'));
            }
            under.push(Tok::Any);
            if !guard.overridden_for(&under) && guard.absolute.iter().any(|g| intersects(&under, g))
            {
                consider(guard, Reach::Directory);
            }
        }
    }
    best
}

/// The strictest guard of all, for a word that may be anywhere.
pub(crate) fn strictest<'g, 'p>(guards: &'g [Guard<'p>]) -> Option<&'g Guard<'p>> {
    let mut best: Option<&Guard<'p>> = None;
    for guard in guards {
        if best.is_none_or(|b| guard.rule.action > b.rule.action) {
            best = Some(guard);
        }
    }
    best
}

/// The working directories a script's commands may run in: the base, and
/// every directory a `cd` or `pushd` in it may go to (`None`: unknown).
pub(crate) fn working_directories<'w, 'a: 'w>(
    views: impl Iterator<Item = &'w [Word<'a>]>,
    base: &Path,
    home: Option<&Path>,
) -> Vec<Option<PathBuf>> {
    const MAX_BASES: usize = 8;
    let mut bases = vec![Some(base.to_path_buf())];
    for words in views {
        let Some((program, args)) = words.split_first() else {
            continue;
        };
        if !matches!(program.text, "cd" | "pushd" | "popd" | "chdir") {
            continue;
        }
        let target = args
            .iter()
            .find(|w| !(w.text.starts_with('-') && w.text.len() > 1) || w.text == "--");
        let target = match target {
            Some(w) if w.text == "--" => args.iter().skip_while(|w| w.text != "--").nth(1),
            other => other,
        };
        let places = match (program.text, target) {
            ("popd", _) => Place::Anywhere,
            (_, None) => match home {
                Some(home) => Place::Paths(vec![home.to_path_buf()]),
                None => Place::Anywhere,
            },
            (_, Some(w)) if w.text == "-" => Place::Anywhere,
            (_, Some(w)) => {
                let known: Vec<Option<PathBuf>> = bases.clone();
                place(w.text, w.marks, &known, home)
            }
        };
        match places {
            Place::Paths(paths) => {
                for path in paths {
                    if !bases.contains(&Some(path.clone())) {
                        bases.push(Some(path));
                    }
                }
            }
            Place::Anywhere => {
                if !bases.contains(&None) {
                    bases.push(None);
                }
            }
        }
        if bases.len() > MAX_BASES {
            bases.retain(Option::is_none);
            bases.insert(0, Some(base.to_path_buf()));
            bases.push(None);
            bases.dedup();
        }
    }
    bases
}

/// A plain word that names a path inside the base without resolving: no
/// expansion, glob, `..`, absolute or home path.
pub(crate) fn stays_inside(text: &str, marks: Marks) -> bool {
    marks == Marks::default() && is_plain(text)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn glob_intersections() {
        // (word glob, rule pattern, could one path match both)
        let cases: &[(&str, &str, bool)] = &[
            (".en?", "*.env", true),
            (".env*", "*.env", true),
            (".env*", "*.env.*", true),
            ("src/*.rs", "*.env", false),
            ("src/*", "*.env", true),
            ("secret?/key", "secrets/**", true),
            ("secret[s]", "secrets/**", false),
            ("secret[s]/x", "secrets/**", true),
            ("s*/key", "secrets/**", true),
            ("*/key", "secrets/**", true),
            ("*", "secrets/key", false),
            ("**", "secrets/key", true),
            ("docs/*.md", "secrets/**", false),
            ("a/*/c", "a/b/c/d", false),
            ("a/*", "a/b/c", false),
            ("a/**", "a/b/c", true),
            (".e@(n)v", "*.env", true),
            ("x.[e]nv", "*.env", true),
            ("[", "[", true),
            ("x.txt", "*.env", false),
        ];
        for (word, rule, expected) in cases {
            assert_eq!(
                intersects(&word_tokens(word), &rule_tokens(rule)),
                *expected,
                "{word} vs {rule}"
            );
        }
    }

    #[test]
    fn places() {
        let root = Path::new("/p");
        let home = Path::new("/home/me");
        let bases = [Some(root.to_path_buf())];
        let paths = |list: &[&str]| Place::Paths(list.iter().map(PathBuf::from).collect());
        let cases: &[(&str, Place)] = &[
            ("a/b", paths(&["/p/a/b"])),
            ("~/x", paths(&["/home/me/x"])),
            ("$HOME/x", paths(&["/home/me/x"])),
            ("${HOME}/x", paths(&["/home/me/x"])),
            ("$HOME", paths(&["/home/me"])),
            ("$HOMEX/x", Place::Anywhere),
            ("$PWD/.env", Place::Anywhere),
            ("~root/x", Place::Anywhere),
            ("~+/x", Place::Anywhere),
            ("~-/x", Place::Anywhere),
            ("src/$X", Place::Anywhere),
            ("{a,b}/c", paths(&["/p/{a,b}/c", "/p/b/c", "/p/a/c"])),
            (".*/x", paths(&["/p/.*/x", "/p/x", "/x"])),
        ];
        for (word, expected) in cases {
            let mut got = place(word, Marks::guessed(word), &bases, Some(home));
            if let Place::Paths(paths) = &mut got {
                paths.sort();
            }
            let mut expected = expected.clone();
            if let Place::Paths(paths) = &mut expected {
                paths.sort();
            }
            assert_eq!(got, expected, "{word}");
        }
    }

    #[test]
    fn redirect_targets() {
        let cases: &[(&str, Option<&str>)] = &[
            ("<in", Some("in")),
            ("2>>/var/log/x", Some("/var/log/x")),
            ("&>out", Some("out")),
            ("<~sys/tcp/h/9", Some("~sys/tcp/h/9")),
            ("{fd}>x", Some("x")),
            ("2>&1", None),
            ("1<&0", None),
            ("<&-", None),
            ("<<<data /etc/x", None),
            ("<<EOF", None),
        ];
        for (text, expected) in cases {
            assert_eq!(redirect_target(text), *expected, "{text}");
        }
    }
}
