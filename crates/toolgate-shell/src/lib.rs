//! Shell analysis for toolgate: split a command into simple commands, decide
//! whether every one of them only reads, and derive the patterns an `always`
//! answer grants.
//!
//! This crate is pure: it never runs, opens or stats anything. It fails
//! closed: whatever it cannot prove read-only is not read-only, with a reason
//! that names the program, flag, redirection or construct responsible.
//!
//! # What it decides
//!
//! [`analyze`] parses a script with tree-sitter-bash (a hand lexer handles
//! the plainest scripts faster and gives the same answer), splits it through
//! `&&`, `||`, `;`, `|` and newlines into simple commands, decodes quotes and
//! escapes (`'-delete'`, `\-delete` and `"-de"lete` are all `-delete`), looks
//! through wrappers (`sudo`, `env`, `timeout`, `time`, `nice`, `nohup`,
//! `stdbuf`, `ionice`, `command`, `builtin`, `xargs`, `bash|sh|zsh -c`, up to
//! 8 levels) and judges each simple command against a read-only table.
//!
//! ```
//! use toolgate_shell::{analyze, Options, Script};
//!
//! let a = analyze(Script::Text("ls -la && git status | head -n 5"), &Options::default());
//! assert!(a.is_read_only());
//! assert_eq!(a.commands.len(), 3);
//!
//! let a = analyze(Script::Text("find . -name '*.tmp' '-de'lete"), &Options::default());
//! assert!(!a.is_read_only());
//! assert_eq!(a.refusal.unwrap().reason, "`find -delete` deletes files");
//! ```
//!
//! # The read-only table
//!
//! * Always read-only: `cat cd cut df diff dirname basename du echo printf
//!   false true head tail id ls nl paste pwd readlink realpath rev seq stat tr
//!   uname wc which whoami grep egrep fgrep test [ tac cmp comm expr jq sleep`
//!   (`printf -v` and `test -v` excepted).
//! * With flag exceptions: `find` (no `-exec`, `-delete`, `-fprint`, ...),
//!   `rg` (no `--pre`, `--hostname-bin`, `-z`), `sed` (only `-n` with a print
//!   script such as `1,40p`), `sort` (no `-o`, `--compress-program`),
//!   `base64` and `tree` (no `-o`), `uniq` (one file at most), `file` (no
//!   `-m`, `-f`, `-C`), `date` (no `-s`), `hostname` (no argument). GNU long
//!   options are also caught abbreviated (`sort --outp=x`).
//! * `git` with `status log diff show branch blame grep ls-files ls-tree
//!   rev-parse rev-list describe reflog shortlog cat-file for-each-ref
//!   name-rev remote tag`, with `branch`, `tag`, `remote` and `reflog` only
//!   listing; never with `-c`, `--config-env`, `--git-dir`, `--work-tree`,
//!   `--exec-path`, `--namespace`, `--super-prefix`, `-p`, `--output`,
//!   `--ext-diff`, `--textconv`, `--exec`, `-O`; only inside the project
//!   root (`-C DIR` and earlier `cd`s are followed lexically) and only when
//!   [`Options::trust_git_config`] is set.
//! * Declared extras ([`Options::extra_read_only`], checked by
//!   [`validate_read_only_extra`]) add token prefixes.
//!
//! # What it refuses
//!
//! Parse errors, command and process substitution, parameter expansion with
//! operators, arithmetic, expansions or unquoted globs and braces in the
//! program name or in the arguments of a program whose flags matter,
//! subshells, `{ }` groups, loops, `if`, `case`, function definitions,
//! `eval`, `source`, background `&`, assignments and environment prefixes
//! other than `LANG LC_* TZ NO_COLOR TERM COLUMNS`, line continuations glued
//! inside a word, control characters, and every redirection except
//! `>/dev/null`, `2>/dev/null`, `&>/dev/null`, `>>/dev/null`, `2>&1`,
//! `1>&2`, input from a file and here-documents. Programs named by a path are
//! judged by their basename only in `/bin`, `/usr/bin` and `/usr/local/bin`.
//!
//! ```
//! use toolgate_shell::{analyze, Options, Script};
//!
//! let opts = Options::default();
//! let why = |s| analyze(Script::Text(s), &opts).refusal.map(|r| r.reason);
//! assert_eq!(why("echo x > out.txt").unwrap(), "output redirection `> out.txt` writes a file");
//! assert_eq!(why("ls $(rm -rf /)").unwrap(), "command substitution `$(...)` cannot be proven read-only");
//! assert_eq!(why("PATH=/tmp ls").unwrap(), "environment prefix `PATH=…` can change what runs");
//! assert_eq!(why("git -c core.pager=evil log").unwrap(), "`git -c` sets configuration that can make git run programs");
//! assert_eq!(why("").unwrap(), "empty command");
//! ```
//!
//! # Patterns
//!
//! Each [`SimpleCommand`] carries its `text` (decoded words joined by single
//! spaces, then its redirections), its `inner` texts (the command with
//! wrappers removed, and every command of a `bash -c` script) so a rule such
//! as `rm *` can deny `sudo rm -rf /`, and its `always` pattern: the arity
//! prefix plus ` *` with OpenCode's arity table (flags before the subcommand
//! skipped), or the literal text for destructive and code-running programs.
//!
//! ```
//! use toolgate_shell::{analyze, Options, Script};
//!
//! let opts = Options::default();
//! let a = analyze(Script::Text("git -C src commit -m 'x y' && npm run dev"), &opts);
//! assert_eq!(a.commands[0].always, "git commit *");
//! assert_eq!(a.commands[1].always, "npm run dev *");
//!
//! let a = analyze(Script::Text("sudo bash -c 'rm -rf /'"), &opts);
//! assert_eq!(a.commands[0].always, "sudo bash -c rm -rf /");
//! assert_eq!(a.commands[0].inner, ["bash -c rm -rf /", "rm -rf /"]);
//! ```
//!
//! Codex-style argv works too: `["bash", "-lc", SCRIPT]` analyses the
//! script; any other argv is one simple command whose words are taken as
//! they are.
//!
//! ```
//! use toolgate_shell::{analyze, Options, Script};
//!
//! let argv: Vec<String> = ["bash", "-lc", "ls && rm x"].map(String::from).to_vec();
//! let a = analyze(Script::Argv(&argv), &Options::default());
//! assert_eq!(a.commands.len(), 2);
//! assert!(!a.is_read_only());
//! ```
#![deny(missing_docs)]

mod analysis;
mod arity;
mod decode;
mod git;
mod lexer;
mod opts;
mod parse;
mod syntax;
mod table;
mod wrappers;

use std::path::PathBuf;

use analysis::{analyze_text, Env, State};
use syntax::{Item, Word};

/// Settings that change how commands are judged.
#[derive(Debug, Clone)]
pub struct Options {
    /// The project root: `git -C DIR` is read-only only when DIR stays inside it.
    pub project_root: PathBuf,
    /// The directory the command runs in, when the agent said so.
    pub cwd: Option<PathBuf>,
    /// When false, git is never read-only (repository config can run programs).
    pub trust_git_config: bool,
    /// Extra read-only token prefixes (`planModeReadOnlyCommands`), each already
    /// accepted by [`validate_read_only_extra`].
    pub extra_read_only: Vec<Vec<String>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            project_root: PathBuf::from("/"),
            cwd: None,
            trust_git_config: true,
            extra_read_only: Vec::new(),
        }
    }
}

/// A shell command as the agent sent it.
#[derive(Debug, Clone, Copy)]
pub enum Script<'a> {
    /// Shell source text, as `bash -c` would get it.
    Text(&'a str),
    /// An argv vector such as Codex's `["bash", "-lc", "ls"]` or `["ls", "-la"]`.
    Argv(&'a [String]),
}

/// Why a command is not read-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// One human phrase, naming the program, flag, redirection or construct,
    /// e.g. "`find -delete` deletes files".
    pub reason: String,
}

impl Refusal {
    /// A refusal with this reason.
    pub fn new(reason: impl Into<String>) -> Self {
        Refusal {
            reason: reason.into(),
        }
    }
}

/// One simple command of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleCommand {
    /// The words after quote removal joined by single spaces: what rule patterns match.
    /// Prefix assignments come first and redirections last (`echo x >out.txt`).
    pub text: String,
    /// The command's texts once wrappers are removed, outermost first, plus every
    /// simple command of a `bash -c` script: `sudo rm -rf /` gives `["rm -rf /"]`.
    pub inner: Vec<String>,
    /// `Ok` when this command only reads.
    pub verdict: Result<(), Refusal>,
    /// What an `always` answer grants for this command: the arity prefix plus ` *`,
    /// or the literal `text` for destructive or code-running programs (and for
    /// commands with assignments, unsafe redirections or unprovable constructs).
    pub always: String,
    /// Where each word (program first, after any prefix assignments) lies in
    /// `text`, with what the shell would expand in it. Empty when the command
    /// could not be parsed: then only `text` is known.
    pub words: Vec<WordSpan>,
    /// Where each redirection (`2>/dev/null`, `<in.txt`) lies in `text`.
    pub redirects: Vec<std::ops::Range<usize>>,
}

/// One word of a [`SimpleCommand`]: its place in the command's `text` (after
/// quote removal) and what the shell would expand in it, so a caller can tell
/// a quoted `'*.env'` (a file of that name) from a glob, or `'~x'` from `~x`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WordSpan {
    /// The byte range of the word in `text`.
    pub range: std::ops::Range<usize>,
    /// The word holds an expansion or substitution (`$X`, `${X}`, `$(…)`, `` `…` ``).
    pub expansion: bool,
    /// The word holds an unquoted glob (`*`, `?`, `[`) or brace expansion (`{a,b}`).
    pub glob: bool,
    /// The word starts with an unquoted `~`.
    pub tilde: bool,
}

/// The analysis of a whole script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Analysis {
    /// Every simple command, in source order. Never empty for a non-blank script.
    pub commands: Vec<SimpleCommand>,
    /// `None` when every simple command is read-only; otherwise the first reason.
    pub refusal: Option<Refusal>,
}

impl Analysis {
    /// True when every part of the script is proven read-only.
    pub fn is_read_only(&self) -> bool {
        self.refusal.is_none()
    }
}

/// Analyse a script. Never panics; fails closed.
pub fn analyze(script: Script<'_>, options: &Options) -> Analysis {
    analyze_with(script, options, false)
}

/// [`analyze`] without the fast path: every script goes through tree-sitter.
/// For tests and benchmarks that compare the two paths.
#[doc(hidden)]
pub fn analyze_tree_sitter_only(script: Script<'_>, options: &Options) -> Analysis {
    analyze_with(script, options, true)
}

fn analyze_with(script: Script<'_>, options: &Options, tree_sitter_only: bool) -> Analysis {
    let env = Env::new(options, tree_sitter_only);
    let mut state = State::initial(&env);
    let commands = match script {
        Script::Text(text) => analyze_text(text, &env, &mut state, 0),
        Script::Argv(argv) => {
            let words: Vec<Word> = argv.iter().map(|a| Word::literal(a)).collect();
            match shell_script(&words) {
                Some(script) => analyze_text(script, &env, &mut state, 0),
                None if words.is_empty() => Vec::new(),
                None => {
                    let item = Item {
                        words,
                        ..Item::default()
                    };
                    vec![analysis::simple_command(&item, &env, &mut state, 0)]
                }
            }
        }
    };
    let refusal = if commands.is_empty() {
        Some(Refusal::new("empty command"))
    } else {
        commands.iter().find_map(|c| c.verdict.clone().err())
    };
    Analysis { commands, refusal }
}

/// The script of an argv such as `["bash", "-lc", SCRIPT]`.
fn shell_script(words: &[Word]) -> Option<&str> {
    let (first, args) = words.split_first()?;
    let name = analysis::program_name(first).ok()?;
    if !matches!(name, "bash" | "sh" | "zsh" | "dash") {
        return None;
    }
    match wrappers::shell_options(name, args).ok()? {
        wrappers::ShellMode::Script(i) => {
            let script = args.get(i)?;
            if wrappers::script_problem(name, script).is_some() {
                return None;
            }
            Some(script.text.as_str())
        }
        _ => None,
    }
}

/// Check a `planModeReadOnlyCommands` entry and split it into tokens.
///
/// An entry needs at least two words, may not start with a shell,
/// interpreter or wrapper, and may not contain a write word such as `add`,
/// `apply`, `commit`, `create`, `delete`, `edit`, `exec`, `merge`, `push`,
/// `remove`, `rm`, `set` or `update` (also inside `set-url` or `db:push`).
///
/// ```
/// use toolgate_shell::validate_read_only_extra;
///
/// assert_eq!(validate_read_only_extra("gh issue view").unwrap(), ["gh", "issue", "view"]);
/// assert!(validate_read_only_extra("kubectl").is_err());
/// assert!(validate_read_only_extra("bash -c").is_err());
/// assert!(validate_read_only_extra("git remote set-url").is_err());
/// ```
pub fn validate_read_only_extra(entry: &str) -> Result<Vec<String>, String> {
    table::validate_extra(entry)
}
