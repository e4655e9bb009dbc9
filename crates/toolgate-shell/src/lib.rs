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
//! `stdbuf`, `ionice`, `command`, `builtin`, `xargs`, `bash|sh|dash|zsh -c`, up to
//! 8 levels) and judges each simple command against a read-only table.
//!
//! ```
//! use toolgate_shell::{analyze, Options, Script};
//!
//! let a = analyze(Script::Text("ls -la && wc -l src/*.rs | head -n 5"), &Options::default());
//! assert!(a.is_read_only());
//! assert_eq!(a.commands.len(), 3);
//! // git is read-only only once something has checked which repository it uses.
//! let a = analyze(Script::Text("git status"), &Options::default());
//! assert!(a.refusal.unwrap().reason.contains("project's own repository"));
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
//!   uname wc which whoami grep egrep fgrep test [ tac cmp comm expr jq sleep
//!   column od hexdump strings sha1sum sha224sum sha256sum sha384sum
//!   sha512sum md5sum b2sum cksum nproc free ps type locale` (`test -v`
//!   excepted; `printf` only with a plain format word without a `%n`
//!   conversion, which assigns a variable like `printf -v` does: `%n`,
//!   `%-5n`, `%*n`, `%ln` in any argument are refused).
//! * With flag exceptions: `find` (no `-exec`, `-delete`, `-fprint`, ...),
//!   `rg` (no `--pre`, `--hostname-bin`, `-z`), `sed` (only `-n` with a print
//!   script such as `1,40p` or `/\[deps\]/,/^\[/p`: addresses are line
//!   numbers, `$`, `first~step`, `addr,+N` and `/regex/` read as GNU sed
//!   reads them, with backslash escapes and `I`/`M` flags; commands only `p`,
//!   `q` and `=`), `sort` (no `-o`, `--compress-program`), `base64` and
//!   `tree` (no `-o`), `uniq` (one file at most), `xxd` (one file at most: a
//!   second one is written), `file` (no `-m`, `-f`, `-C`), `date` (no `-s`,
//!   `--set` or its abbreviations, and no operand but `+FORMAT`: `date
//!   0101000030` sets the clock), `hostname` (no argument). GNU long options
//!   are also caught abbreviated (`sort --outp=x`).
//! * Archive listers and `fd`, read by their models plus checks of their
//!   own: `tar` only listing (`-t`, `--list`) an archive given with `-f`
//!   (`-f -` is standard input), an old-style first word (`tar tzf A.tar`)
//!   read as tar rewrites it (each letter an option, each letter that takes
//!   a value taking the next word in turn); never extracting, creating,
//!   appending or deleting, never `--to-command`, `-I`, `-F`,
//!   `--checkpoint-action`, `--rsh-command`, `--rmt-command`,
//!   `--index-file`, `-g`, `--volno-file` or `-C`; never an archive named
//!   `HOST:FILE` (a colon with no `/` before it: GNU tar reaches it through
//!   rsh) without `--force-local`, nor no `-f` at all (`$TAPE`); `-T FILE`
//!   only after `--verbatim-files-from` (otherwise a line of FILE starting
//!   with `-` is a tar option). The archive and the `-T`/`-X` files are
//!   reads; the operands are member names (data). `unzip` only with `-l`,
//!   `-v`, `-t`, `-z`, `-p` or `-c` (they write no file, even for members
//!   named `../x` or `/x`), never `-d`, `-f`, `-u`, `-T`, no word starting
//!   with `-` after the archive but `-x`, and an archive name that is plain
//!   and has no `*`, `?` or `[` (unzip expands those itself); the archive is
//!   a read, and so are `NAME.zip` and `NAME.ZIP`, which unzip tries when
//!   `NAME` is missing. `zipinfo` and `unzip -Z` likewise (zipinfo never
//!   extracts). `fd` and `fdfind` never with `-x`/`--exec`,
//!   `-X`/`--exec-batch` or `--base-directory`; fd prints names, so its
//!   paths are names as `find`'s are (`-L` follows links to print more
//!   names, `-l` runs `ls -l` on them), and `--ignore-file F` is a read.
//!   `TAR_OPTIONS`, `UNZIP` and `ZIPINFO` in the agent's own environment
//!   add options this cannot see (set in the command, they are refused like
//!   any other environment prefix).
//! * `git` with `status log diff show branch blame grep ls-files ls-tree
//!   rev-parse rev-list describe reflog shortlog cat-file for-each-ref
//!   name-rev remote tag merge-base stash worktree config show-ref
//!   count-objects check-ignore cherry`, with `branch`, `tag`, `remote` and
//!   `reflog` only listing (`remote get-url` reads), `stash` only `list` and
//!   `show`, `worktree` only `list`, `config` only reading (`--get`,
//!   `--get-all`, `--get-regexp`, `--get-urlmatch`, `--list`/`-l`, `get`,
//!   `list`, or one `section.key`; every option known exactly); never with
//!   `-c`, `--config-env`, `--git-dir`, `--work-tree`, `--exec-path`,
//!   `--namespace`, `--super-prefix`, `-p`, `--output`, `--ext-diff`,
//!   `--textconv`, `--exec`, `-O`, `--submodule=diff` (runs git in each
//!   submodule's own repository); never checking signatures (gpg runs):
//!   `--show-signature`, a `%G` placeholder in any argument (`%G?`, `%GS`,
//!   ... in `--format`, `--pretty`, `format:`, `tformat:`), the
//!   `%(signature)` atom, `verify-commit`, `verify-tag`, `tag -v`; only
//!   inside the project root (`-C DIR` and earlier `cd`s are followed
//!   lexically), only when [`Options::trust_git_config`] is set, and only
//!   when the [`RepoOracle`] says the repository git would use is the
//!   project's own, from every directory the shell may be in (a `cd` can
//!   fail, be skipped or run in a pipeline's subshell, so it adds its target
//!   and keeps where the shell was). Without an oracle git is never
//!   read-only: a bare repository committed as files (`HEAD`, `config`,
//!   `objects/`, `refs/`) or a nested `.git` has a `config` whose
//!   `core.fsmonitor` or `diff.external` runs programs, and the oracle also
//!   answers "not own" for the project's repository when git would recurse
//!   into a submodule with a repository of its own (`git status` does).
//! * Declared extras ([`Options::extra_read_only`], checked by
//!   [`validate_read_only_extra`]) add token prefixes.
//!
//! # What it refuses
//!
//! Parse errors, backtick substitution, output process substitution
//! `>(…)`, parameter expansion with operators, arithmetic, expansions or
//! unquoted globs and braces in the program name or in the arguments of a
//! program whose flags matter, `case`, `select`, `for ((…))`, function
//! definitions, `eval`, `source`, background `&`, assignments and environment prefixes
//! other than `LANG LC_* TZ NO_COLOR TERM COLUMNS`, a `LANG`/`LC_*`
//! assignment made in the shell itself (standalone, or before a special
//! builtin) when any command follows it in the script (bash decodes each
//! later line in the new locale), line continuations glued inside a word,
//! control characters, and every redirection except `>/dev/null`,
//! `2>/dev/null`, `>>/dev/null`, `2>&1`, `1>&2`, here-documents and input
//! from a plain file inside the project.
//!
//! Input redirections (`<f`, `0<f`) read only a plain path that stays inside
//! the project root once joined to the directory the command starts in
//! (`cd`s are followed lexically), or exactly `/dev/null`: never `/dev/*`
//! (bash makes `/dev/tcp/HOST/PORT` a socket), `/proc`, `/sys`, a path
//! outside the project (`../x`, `/etc/passwd`), a word with an expansion
//! (`<$HOME/x`, `<${_}/tcp/…`), a tilde (`<~sys/tcp/…`, `~sys` being `/dev`
//! on Debian; `~root`, `~+`, `~-`) or a glob, nor a relative path after a
//! `cd` to an unknown directory. Descriptor duplications with `<&` (`1<&0`
//! makes standard output a copy of standard input), input redirections on
//! descriptors 1 and 2, `>&N` other than `2>&1`/`1>&2`, descriptors above 9
//! and named descriptors (`{NAME}>file`, `{NAME}<&0`, `{NAME}>&-`, which
//! assign `NAME` in the shell) are refused.
//!
//! # Substitutions, loops and names from a producer
//!
//! The commands inside `$(…)`, `<(…)`, subshells, `{ …; }` groups, `if`,
//! `while`/`until` and `for` loops are judged as they stand: the construct
//! only decides which of them run, and how often. Output that becomes words
//! (`cat $(…)`, `… | xargs cat`, `… | while read -r f`) may name any file,
//! unless the command printing it is one whose names are known (`find`
//! without `-L`/`-printf`/`-exec`, `git ls-files`, and line filters of them:
//! see the `names` module): then the words are among the files the globs of
//! [`WordSpan::names`] and [`ReadTarget::Names`] match on the disk, which
//! the policy checks for names a consumer would split. `for f in WORDS`
//! walks the body once per plain word with `$f` in its place, and once per
//! glob with `"$f"` standing for one of its matches. A loop or `read`
//! variable must be lower case and not one programs read (`http_proxy`):
//! `for PATH in …` and `read IFS` are refused. `<(…)` is a pipe, not a path
//! (dash reads it as a syntax error, so the line never runs there).
//!
//! A script is read as bash, but the agent's shell may be bash, zsh or
//! `/bin/sh` (dash, busybox ash), so syntax that `/bin/sh` reads differently
//! is refused unless the script is known to run in bash (`bash -c SCRIPT`,
//! `["bash", "-lc", SCRIPT]`): ANSI-C quoting `$'…'` (dash reads
//! `$'\' ;touch x #'` as `$`, `'\'` and a second command), `$"…"`, `&>`
//! and `&>>` (dash: background `&`, then a redirection), `>&file`, `|&`,
//! here-strings `<<<`, `[[ … ]]` containing `<`, `>`, `&&`, `||` or
//! parentheses (redirections and separators to dash) and `+=`. Scripts for
//! `sh` and `dash` (`sh -c`, `["/bin/sh", "-c", S]`, through any wrapper) are
//! also refused brace expansion; `ash`, `busybox` and other shells are not
//! analysed. Programs named by a path are judged by their basename only in
//! `/bin`, `/usr/bin` and `/usr/local/bin`.
//!
//! Among the wrappers, `env` stays read-only only with `-0`, `-v`, `--null`,
//! `--debug` and harmless assignments: `env -i`, `env -`, `-u NAME`,
//! `--unset`, `--ignore-environment` (abbreviated or in clusters such as
//! `-iu`) are refused, because bash's default search path, used when PATH
//! is gone, ends in `.` and runs a program planted in the project. `xargs` is
//! read as GNU xargs reads its options (abbreviations included) and refuses
//! `-I`, `-i`, `--replace` and `--process-slot-var`, which sets a variable
//! in every command it runs. Programs that run a command (`setsid`, `watch`,
//! `flock`, `chroot`, `su`, `runuser`, `script`, `strace`, `ltrace`,
//! `valgrind`, `gdb`, `unbuffer`, `parallel`, `ssh`, `pkexec`, `chrt`,
//! `taskset`, `numactl`, `unshare`, `nsenter`, `firejail`, `systemd-run`,
//! `busybox`, ...) are never read-only, whatever they run.
//!
//! ```
//! use toolgate_shell::{analyze, Options, Script};
//!
//! let opts = Options::default();
//! let why = |s| analyze(Script::Text(s), &opts).refusal.map(|r| r.reason);
//! assert_eq!(why("echo x > out.txt").unwrap(), "output redirection `> out.txt` writes a file");
//! assert_eq!(why("ls $(rm -rf /)").unwrap(), "`rm` deletes files");
//! assert_eq!(why("for PATH in /tmp; do ls; done").unwrap(), "the loop variable `PATH` could be one the environment gives programs (only lower-case names are allowed)");
//! assert!(why("for f in src/*.rs; do head -5 \"$f\"; done").is_none());
//! assert_eq!(why("PATH=/tmp ls").unwrap(), "environment prefix `PATH=…` can change what runs");
//! assert_eq!(why("git -c core.pager=evil log").unwrap(), "`git -c` sets configuration that can make git run programs");
//! assert_eq!(why("cat f </dev/tcp/127.0.0.1/9").unwrap(), "input redirection `< /dev/tcp/127.0.0.1/9` reads a device or kernel file, not a project file");
//! assert_eq!(why("sh -c \"echo \\$'\\\\' ;touch x #'\"").unwrap(), "ANSI-C quoting `$'…'` is bash-only syntax that /bin/sh reads differently");
//! assert!(why("bash -c \"echo \\$'\\\\' ;touch x #'\"").is_none());
//! assert_eq!(why("").unwrap(), "empty command");
//! ```
//!
//! # Patterns
//!
//! Each [`SimpleCommand`] carries its `text` (decoded words joined by single
//! spaces, then its redirections), its `inner` texts so a rule such as `rm *`
//! can deny `sudo rm -rf /`, and its `always` pattern. The inner texts are:
//! the command with wrappers removed; every command of a `bash -c` or `eval`
//! script; the command again with a program given by any path named by its
//! basename (`/opt/x/rm -rf` gives `rm -rf`, `./rm x` gives `rm x`); the
//! commands `find -exec/-execdir/-ok/-okdir ... ;|+` runs; and what the
//! programs that run a command run, also where they are refused (`xargs -I`,
//! `env -S`, `su -c`, `script -c`, `flock FILE -c`, `watch`, `ssh HOST CMD`,
//! `parallel CMD :::`, `gdb --args`, `gdb -ex 'shell CMD'`, `chroot DIR`,
//! ...). Where a wrapper's options cannot be read, the commands starting at
//! each of its first eight words that are not options are recorded: a rule
//! then matches whichever one runs. The `always` pattern is the arity
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
//!
//! let a = analyze(Script::Text("find . -exec /opt/bin/rm -f {} +"), &opts);
//! assert_eq!(a.commands[0].inner, ["/opt/bin/rm -f {}", "rm -f {}"]);
//! ```
//!
//! Codex-style argv works too: `["bash", "-lc", SCRIPT]` analyses the
//! script as bash (`["sh", "-c", SCRIPT]` as `/bin/sh`); any other argv is
//! one simple command whose words are taken as they are.
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
mod archives;
mod arity;
mod awk;
mod context;
mod decode;
mod git;
mod lexer;
mod model;
mod names;
mod opts;
mod parse;
mod programs;
mod sedscript;
mod syntax;
mod table;
mod toolchain;

/// The one glob of [`WordSpan::names`] that stands for commit ids (the
/// output of `git log --format=%H`, `git rev-list`, `git rev-parse REV`):
/// hexadecimal words, no path.
pub use names::HEX as COMMIT_IDS;
mod wrappers;

use std::path::PathBuf;
use std::sync::Arc;

use analysis::analyze_text;
use context::State;
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
    /// Which repository git would use in a directory (the binary looks at the
    /// disk; this crate never does). Without one, git is never read-only.
    pub repo_oracle: Option<Arc<dyn RepoOracle>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            project_root: PathBuf::from("/"),
            cwd: None,
            trust_git_config: true,
            extra_read_only: Vec::new(),
            repo_oracle: None,
        }
    }
}

/// Where a git command would run: start in `dir` (the directory the shell is
/// in, tracked lexically through `cd` as bash and dash do), then change
/// directory physically through each `git -C` argument in order, as the kernel
/// does (`-C link/..` leaves through the link's target).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RepoQuery {
    /// The shell's working directory, absolute and lexically normalised.
    pub dir: PathBuf,
    /// The `git -C` arguments as written, in order.
    pub chdirs: Vec<String>,
}

/// Which repository git would use for a [`RepoQuery`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RepoFact {
    /// The project's own repository (the one git finds from the project root),
    /// or none at all when the project root has none either.
    Own,
    /// Another repository (a bare repository committed as files, a nested
    /// `.git`, a directory outside the project): one human phrase saying which.
    Other(String),
    /// It could not be found out: one human phrase saying why.
    Unknown(String),
}

/// Answers which repository git would use. Implemented by the binary, which
/// looks at the disk (git's discovery: from the directory git runs in, walk
/// up; at each directory a `.git` directory or `gitdir:` file, or the
/// directory itself being a repository). Shell analysis asks it for every git
/// command it would otherwise call read-only; the answers it got are listed
/// in [`Analysis::repo_checks`], so a memo can ask again before it reuses one.
pub trait RepoOracle: Send + Sync + std::fmt::Debug {
    /// Which repository git would use when started as `query` says.
    fn repository(&self, query: &RepoQuery) -> RepoFact;
}

/// An oracle that calls every directory inside the project root the
/// project's own repository, without looking. For tests and benchmarks only:
/// it is exactly the blindness the real oracle exists to remove.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AssumeOwnRepository;

impl RepoOracle for AssumeOwnRepository {
    fn repository(&self, _query: &RepoQuery) -> RepoFact {
        RepoFact::Own
    }
}

/// [`Options`] with a [`RepoOracle`] set, for tests and examples.
#[doc(hidden)]
pub fn with_oracle(options: Options, oracle: impl RepoOracle + 'static) -> Options {
    Options {
        repo_oracle: Some(Arc::new(oracle)),
        ..options
    }
}

/// A shell command as the agent sent it.
#[derive(Debug, Clone, Copy)]
pub enum Script<'a> {
    /// Shell source text, as the agent's shell would get it (`bash -c`,
    /// `zsh -c` or `/bin/sh -c`: syntax they read differently is refused).
    Text(&'a str),
    /// An argv vector such as Codex's `["bash", "-lc", "ls"]` or `["ls", "-la"]`.
    Argv(&'a [String]),
}

/// Why a command is not read-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What kind of problem it is, for code that acts on refusals.
    pub kind: RefusalKind,
    /// One human phrase, naming the program, flag, redirection or construct,
    /// e.g. "`find -delete` deletes files".
    pub reason: String,
}

/// The kind of a [`Refusal`]: code branches on this, never on the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalKind {
    /// Not proven read-only for a reason without a kind of its own (syntax,
    /// a construct, an unknown program).
    NotProven,
    /// An option the program's model does not list, an ambiguous
    /// abbreviation, or a missing value.
    UnknownOption,
    /// An expansion or glob that could become an option or a program.
    Expansion,
    /// Writes, creates, moves or deletes files.
    Writes,
    /// Runs another program or code.
    RunsProgram,
    /// Uses the network.
    Network,
    /// Changes the system (the clock, the host name, processes).
    ChangesSystem,
    /// Changes the environment a program runs in (variables, PATH).
    Environment,
}

impl Refusal {
    /// A refusal with this reason and no particular kind.
    pub fn new(reason: impl Into<String>) -> Self {
        Refusal {
            kind: RefusalKind::NotProven,
            reason: reason.into(),
        }
    }

    /// A refusal of this kind with this reason.
    pub fn with_kind(kind: RefusalKind, reason: impl Into<String>) -> Self {
        Refusal {
            kind,
            reason: reason.into(),
        }
    }
}

/// A file a command reads that its words alone do not show as one: the
/// value of an option that names a file (`du --files0-from=F`, `grep -f F`),
/// a response file (`strings @F`), or the operands of a command whose names
/// arrive on its input (`xargs cat`, `sort --files0-from=-`), which may be
/// any file. Paths are as written, relative to the directory the command
/// runs in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileRead {
    /// Which file.
    pub target: ReadTarget,
    /// A directory given here is read recursively.
    pub tree: bool,
}

/// How a program reads one of its words as a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathRole {
    /// Only its name or metadata is used (`ls`, `stat`, `du`).
    Name,
    /// A file whose content is read.
    File,
    /// A file, or a directory read recursively.
    Tree,
}

/// One word, or part of a word, that a program reads as a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathWord {
    /// The index of the word among the arguments.
    pub word: usize,
    /// The part of the word that is the path (`F` of `--files0-from=F`).
    pub range: std::ops::Range<usize>,
    /// How it is read.
    pub role: PathRole,
}

/// The paths of one command, as its program model reads its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathWords {
    /// Every word or part of a word that is a path; words that are data
    /// (patterns, counts, formats) and options are left out. Both GNU's
    /// reading (options after operands) and POSIX's (the first operand ends
    /// the options) are followed: what either takes for a path is here.
    pub words: Vec<PathWord>,
    /// No path operand is given and the program reads its working
    /// directory recursively (`rg PATTERN`, `grep -r PATTERN`).
    pub searches_here: bool,
    /// The operands (also) come from a file or the input: any file.
    pub any_file: bool,
    /// Symbolic links below a directory among the paths are followed
    /// (`grep -R`, `rg -L`, `tree -l`, `du -L`, `diff`): what they lead to
    /// is read (or listed) too.
    pub follows_links: bool,
}

/// How the program `name` (already past any wrapper) reads each of `args` as
/// a path, from its model in `programs.txt`: the one description of each
/// program's options that both the read-only judgement and the policy's
/// path checks use. `None` when the program has no model or its options
/// cannot be read (an unknown option): the caller then takes every word
/// for a path.
///
/// ```
/// use toolgate_shell::{path_words, PathRole};
///
/// let p = path_words("grep", &["-rn", "-f", "pats", "main", "src"]).unwrap();
/// let roles: Vec<(usize, PathRole)> = p.words.iter().map(|w| (w.word, w.role)).collect();
/// assert_eq!(roles, [(2, PathRole::File), (3, PathRole::Tree), (4, PathRole::Tree)]);
/// let p = path_words("du", &["-s", "--files0-from=list"]).unwrap();
/// assert_eq!((p.words[0].range.clone(), p.words[0].role), (14..18, PathRole::File));
/// assert!(path_words("cat", &["--no-such-option"]).is_none());
/// ```
pub fn path_words(name: &str, args: &[&str]) -> Option<PathWords> {
    model::path_words(name, args)
}

/// Does GNU sed read `script` as commands that write no file and run no
/// command (no `w`, `W`, `e`, `s///w`, `s///e`)? The files it reads (`r`,
/// `R`) are then reported in [`SimpleCommand::reads`] by [`analyze`].
///
/// ```
/// assert!(toolgate_shell::sed_script_only_reads("s/^version = //p"));
/// assert!(toolgate_shell::sed_script_only_reads("1r notes.txt"));
/// assert!(!toolgate_shell::sed_script_only_reads("s/a/b/w out"));
/// ```
pub fn sed_script_only_reads(script: &str) -> bool {
    sedscript::analyse(script).is_ok()
}

/// A fact about the disk that a command's verdict rests on and that the
/// analysis cannot see: the caller checks it (the policy with its disk
/// oracle) and refuses the command when it does not hold or cannot be told.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Requirement {
    /// No file or directory at `name` (a relative path) in the directory
    /// the command runs in, nor in any directory above it.
    AbsentUpward {
        /// The path looked for in each directory.
        name: &'static str,
        /// What such a file would do (for the refusal).
        why: &'static str,
    },
}

/// The file a [`FileRead`] reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ReadTarget {
    /// This path, as written.
    Path(String),
    /// Any file the command could name: the names come from its input or
    /// from a file's content, unknown until it runs.
    Any,
    /// A word with a glob or an expansion (as written) that the shell may
    /// turn into options of a program whose options read files (`wc *`
    /// where a file is named `--files0-from=x`): any file when it may
    /// expand to a word starting with `-` or `@`, nothing more otherwise.
    OptionsIn(String),
    /// A name a producer printed (`find src -name '*.rs' | xargs cat`):
    /// one of the files this glob matches on the disk, as long as none of
    /// them has a blank, quote, backslash or glob character in its path
    /// (the consumer would split it into other words, which may be any
    /// file).
    Names(String),
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
    /// The redirections (indices into `redirects`) that read a word bound
    /// to names a producer printed (`< "$f"`): what they read is in
    /// `reads` as [`ReadTarget::Names`], not their text.
    pub bound_redirects: Vec<usize>,
    /// Files the command (or a command it runs) reads that are not its
    /// operands: option values, response files, names from its input.
    pub reads: Vec<FileRead>,
    /// What must hold on the disk for `verdict` to stand (`cargo --version`
    /// with no `rust-toolchain.toml` above the working directory).
    pub requires: Vec<Requirement>,
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
    /// The word is exactly a command substitution (or a loop variable bound
    /// to names) whose command prints only names matching these globs,
    /// relative to the working directory: a path there is one of their
    /// matches on the disk (see [`ReadTarget::Names`] for split names).
    pub names: Option<Vec<String>>,
    /// With `names`: the word is unquoted, so the shell splits the names at
    /// blanks (and expands globs in them) into several words, which may
    /// land where the program reads files even from a data position.
    pub names_split: bool,
    /// The word is a process substitution `<(…)`: a pipe, not a file.
    pub pipe: bool,
}

/// The analysis of a whole script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Analysis {
    /// Every simple command, in source order. Never empty for a non-blank script.
    pub commands: Vec<SimpleCommand>,
    /// `None` when every simple command is read-only; otherwise the first reason.
    pub refusal: Option<Refusal>,
    /// What the [`RepoOracle`] answered during the analysis, in order. The
    /// verdict depends on these facts: a memo must ask again (and analyse
    /// again when an answer changed) before it reuses the analysis.
    pub repo_checks: Vec<(RepoQuery, RepoFact)>,
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
    let env = analysis::new_env(options, tree_sitter_only);
    let mut state = State::initial(&env);
    let commands = match script {
        Script::Text(text) => analyze_text(text, &env, &mut state, 0),
        Script::Argv(argv) => {
            let words: Vec<Word> = argv.iter().map(|a| Word::literal(a)).collect();
            match shell_script(&words) {
                Some((shell, script)) => {
                    state.shell = shell;
                    analyze_text(script, &env, &mut state, 0)
                }
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
    Analysis {
        commands,
        refusal,
        repo_checks: env.repo_checks.into_inner(),
    }
}

/// The shell and script of an argv such as `["bash", "-lc", SCRIPT]`.
fn shell_script(words: &[Word]) -> Option<(context::Shell, &str)> {
    let (first, args) = words.split_first()?;
    let name = context::program_name(first).ok()?;
    if !matches!(name, "bash" | "sh" | "zsh" | "dash") {
        return None;
    }
    match wrappers::shell_options(name, args).ok()? {
        wrappers::ShellMode::Script(i) => {
            let script = args.get(i)?;
            if wrappers::script_problem(name, script).is_some() {
                return None;
            }
            Some((context::Shell::named(name), script.text.as_str()))
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
