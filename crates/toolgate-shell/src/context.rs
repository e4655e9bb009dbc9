//! The context of an analysis, shared by every judge: its settings
//! ([`Env`], with the analysis itself as [`Recurse`] for the programs that
//! run other commands), what earlier commands changed ([`State`]), the
//! nesting limit, and how a program word is named. A leaf: it imports no
//! judge, so the judges and the analysis that calls them form no circle.

use std::cell::RefCell;
use std::path::PathBuf;

use crate::syntax::{join, Word};
use crate::{opts, FileRead, Options, Refusal, RepoFact, RepoQuery, SimpleCommand};

/// Wrappers and `bash -c` scripts nested deeper than this are refused.
pub(crate) const MAX_DEPTH: usize = 8;
/// Scripts longer than this are refused without parsing.
pub(crate) const MAX_SCRIPT: usize = 1 << 20;

/// The settings of one analysis.
pub(crate) struct Env<'o> {
    pub opts: &'o Options,
    /// The project root, normalised.
    pub root: PathBuf,
    /// The extra read-only prefixes that pass validation.
    pub extras: Vec<&'o [String]>,
    /// Skip the fast path (for tests that compare both paths).
    pub tree_sitter_only: bool,
    /// What the repository oracle answered, in order.
    pub repo_checks: RefCell<Vec<(RepoQuery, RepoFact)>>,
    /// Files read through options, response files and input, as the
    /// program models find them; each simple command takes its own.
    pub reads: RefCell<Vec<FileRead>>,
    /// For the command being judged, when it reads a pipe from a producer
    /// of names: the globs those names match (`names.rs`).
    pub stdin_names: RefCell<Option<Vec<String>>>,
    /// Disk facts the verdicts rest on; each simple command takes its own.
    pub requires: RefCell<Vec<crate::Requirement>>,
    /// The analysis, for the commands that run other commands.
    pub recurse: Recurse,
}

/// The analysis itself, handed to the judges of programs that run a script
/// or a command (`bash -c`, `sudo`, `xargs`, `find -exec`) in their [`Env`]:
/// they judge what those run without importing the module that calls them.
#[derive(Clone, Copy)]
pub(crate) struct Recurse {
    /// Analyse a script one level deeper (`analysis::analyze_text`).
    pub text: AnalyzeText,
    /// Judge a command given as words (`analysis::judge_argv`).
    pub argv: JudgeArgv,
}

/// `analysis::analyze_text`: a script, at a depth, into simple commands.
pub(crate) type AnalyzeText = fn(&str, &Env<'_>, &mut State, usize) -> Vec<SimpleCommand>;

/// `analysis::judge_argv`: a command given as words, at a depth, recording
/// the texts of the commands it runs.
pub(crate) type JudgeArgv =
    fn(&[Word], &Env<'_>, &mut State, usize, &mut Vec<String>) -> Result<(), Refusal>;

impl<'o> Env<'o> {
    /// The settings of an analysis with `options`; `extras` are the extra
    /// read-only prefixes that passed validation, `recurse` the analysis
    /// itself (see [`Recurse`]).
    pub(crate) fn new(
        opts: &'o Options,
        tree_sitter_only: bool,
        extras: Vec<&'o [String]>,
        recurse: Recurse,
    ) -> Self {
        Env {
            opts,
            root: opts::normalize(&opts.project_root),
            extras,
            tree_sitter_only,
            repo_checks: RefCell::new(Vec::new()),
            reads: RefCell::new(Vec::new()),
            stdin_names: RefCell::new(None),
            requires: RefCell::new(Vec::new()),
            recurse,
        }
    }
}

impl Env<'_> {
    /// Record that the command reads these files (paths as written).
    pub(crate) fn require(&self, facts: impl IntoIterator<Item = crate::Requirement>) {
        self.requires.borrow_mut().extend(facts);
    }

    pub(crate) fn read_files(&self, paths: impl IntoIterator<Item = String>) {
        self.reads
            .borrow_mut()
            .extend(paths.into_iter().map(|path| FileRead {
                target: crate::ReadTarget::Path(path),
                tree: false,
            }));
    }
}

/// Which shell will read a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shell {
    /// Known to be bash: `bash -c SCRIPT`, `["bash", "-lc", SCRIPT]`.
    Bash,
    /// The agent's shell, which may be bash, zsh or `/bin/sh` (dash, ash):
    /// constructs that bash and `/bin/sh` read differently are refused.
    Any,
    /// A POSIX shell (`sh -c`, `dash -c`): as [`Shell::Any`], and brace
    /// expansion is refused too.
    Posix,
}

impl Shell {
    /// The shell a program of this name is (for `NAME -c SCRIPT`).
    pub(crate) fn named(name: &str) -> Shell {
        match name {
            "bash" => Shell::Bash,
            "sh" | "dash" => Shell::Posix,
            _ => Shell::Any,
        }
    }
}

/// What earlier commands of a script changed that later ones depend on.
#[derive(Debug, Clone)]
pub(crate) struct State {
    /// The working directory, lexically; `None` once it cannot be known.
    pub cwd: Option<PathBuf>,
    /// Every directory the shell may be in, lexically: a `cd` may fail, be
    /// skipped (`||`, `&&`), or run in a subshell (a pipeline, `bash -c`), so
    /// each one adds its target without removing where the shell was. `None`
    /// once one cannot be known or there are too many. git must be safe in all.
    pub git_dirs: Option<Vec<PathBuf>>,
    /// The shell reading the script.
    pub shell: Shell,
}

impl State {
    pub(crate) fn initial(env: &Env<'_>) -> Self {
        let cwd = match &env.opts.cwd {
            Some(c) => opts::normalize(&env.root.join(c)),
            None => env.root.clone(),
        };
        State {
            git_dirs: Some(vec![cwd.clone()]),
            cwd: Some(cwd),
            shell: Shell::Any,
        }
    }
}

/// The program a word names: its basename in a standard system directory,
/// the word itself when it has no `/`, and otherwise unknown.
pub(crate) fn program_name(w: &Word) -> Result<&str, Refusal> {
    let text = w.text.as_str();
    match text.rfind('/') {
        None => Ok(text),
        Some(pos) => {
            let (dir, base) = (&text[..pos], &text[pos + 1..]);
            if matches!(dir, "/bin" | "/usr/bin" | "/usr/local/bin") && !base.is_empty() {
                Ok(base)
            } else {
                Err(Refusal::new(format!(
                    "`{text}` is not a known program: only /bin, /usr/bin and /usr/local/bin are trusted by name"
                )))
            }
        }
    }
}

pub(crate) fn too_deep() -> Refusal {
    Refusal::new(format!(
        "commands nested more than {MAX_DEPTH} levels deep (wrappers or `bash -c`) cannot be analysed"
    ))
}

/// Step into the command a wrapper runs: record its text and judge it one
/// level deeper, failing closed past the depth limit.
pub(crate) fn enter(
    words: &[Word],
    env: &Env<'_>,
    state: &mut State,
    depth: usize,
    inner: &mut Vec<String>,
) -> Result<(), Refusal> {
    if depth + 1 > MAX_DEPTH {
        return Err(too_deep());
    }
    inner.push(join(words));
    (env.recurse.argv)(words, env, state, depth + 1, inner)
}

/// Analyse `src` one level deeper: the script a command runs (`bash -c`).
pub(crate) fn analyze_nested(
    src: &str,
    env: &Env<'_>,
    state: &mut State,
    depth: usize,
) -> Vec<SimpleCommand> {
    (env.recurse.text)(src, env, state, depth)
}
