//! The intermediate form both parsers produce: simple commands made of
//! decoded words, prefix assignments and redirections.
//!
//! Everything here is already quote-removed. What could not be decoded with
//! certainty is recorded (`expansion`, `glob`, `construct`) so the judge can
//! fail closed on it.

use crate::Refusal;

/// One shell word after quote removal.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Word {
    /// The decoded text; expansions appear as their source text.
    pub text: String,
    /// The source of the first expansion or substitution in the word, if any.
    pub expansion: Option<String>,
    /// The first unquoted glob or brace character, if the word could expand to other words.
    pub glob: Option<char>,
    /// The word starts with an unquoted `~`.
    pub tilde: bool,
    /// A bash-only spelling inside the word (`$'…'`) that `/bin/sh` reads
    /// differently: the construct, for the refusal.
    pub bash_only: Option<String>,
    /// The word is exactly one command substitution (or a loop variable
    /// bound to one) whose command prints only names matching these globs
    /// (relative to the working directory): what `find . -name '*.rs'`
    /// can print. See `names.rs`.
    pub names: Option<Vec<String>>,
    /// With `names`: the expansion is unquoted, so the shell splits the
    /// names at blanks and expands globs in them.
    pub names_split: bool,
    /// The word starts with an ANSI-C string `$'…'` without `\'` inside,
    /// and has no other bash-only piece: dash splits the script at the same
    /// places and reads this word as `$` and the string's raw body (a word
    /// that is never an option).
    pub ansi_c_lead: bool,
    /// The word is a process substitution `<(…)`: a pipe the command reads,
    /// no file.
    pub pipe: bool,
}

impl Word {
    /// A word taken verbatim (argv elements, fixed tokens).
    pub(crate) fn literal(text: &str) -> Word {
        Word {
            text: text.to_string(),
            ..Word::default()
        }
    }

    /// True when the word is exactly its text: no expansion, glob or tilde.
    pub(crate) fn is_plain(&self) -> bool {
        self.expansion.is_none() && self.glob.is_none() && !self.tilde
    }
}

/// A prefix assignment `NAME=value` (or a standalone one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Assign {
    pub name: String,
    pub value: Word,
}

/// One redirection, judged when it is parsed (its safety does not depend on the program).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Redir {
    /// How it is shown in the command text, e.g. `2>/dev/null`.
    pub text: String,
    /// Why it is not one of the safe forms.
    pub refusal: Option<Refusal>,
    /// For an input redirection from a plain path (`<file`): that path, which
    /// must name a file inside the project (checked against the working
    /// directory the command starts in).
    pub input: Option<String>,
    /// Why `/bin/sh` reads this redirection differently from bash (`&>`, `<<<`, ...).
    pub bash_only: Option<Refusal>,
    /// Input from a process substitution (`< <(…)`): a pipe, with the names
    /// bound of the command inside when it is a producer of names.
    pub pipe: Option<Option<Vec<String>>>,
    /// Input from a word bound to names a producer printed (`wc -l <
    /// "$f"` in a loop over `git ls-files`): the globs they match.
    pub input_names: Option<Vec<String>>,
}

/// One simple command as parsed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Item {
    pub assigns: Vec<Assign>,
    pub words: Vec<Word>,
    pub redirects: Vec<Redir>,
    /// A construct around or inside the command that cannot be proven read-only
    /// (substitution in a word, background `&`, subshell, loop, ...).
    pub construct: Option<Refusal>,
    /// Not a real command: a construct shown by its source (nothing else is judged).
    pub opaque: bool,
    /// A bash-only construct around or in the command (`|&`, `[[ a > b ]]`,
    /// `+=`): refused unless the script is known to run in bash.
    pub bash_only: Option<Refusal>,
    /// The command reads the output of the command before it in a pipeline.
    pub piped: bool,
    /// When `piped`: globs every line of that output matches (a name
    /// `find`, `git ls-files` or a line filter of theirs printed).
    pub stdin_names: Option<Vec<String>>,
}

impl Item {
    /// The first bash-only construct of the command, its words, assignments
    /// or redirections: why `/bin/sh` could read it differently.
    pub(crate) fn bash_only(&self) -> Option<Refusal> {
        if let Some(r) = &self.bash_only {
            return Some(r.clone());
        }
        let words = self
            .words
            .iter()
            .chain(self.assigns.iter().map(|a| &a.value));
        if let Some(c) = words.filter_map(|w| w.bash_only.as_deref()).next() {
            return Some(bash_only(c));
        }
        self.redirects.iter().find_map(|r| r.bash_only.clone())
    }

    /// The first unquoted brace of a word, assignment value or redirection
    /// target (bash expands `{a,b}`, `/bin/sh` does not).
    pub(crate) fn brace(&self) -> Option<&Word> {
        let words = self
            .words
            .iter()
            .chain(self.assigns.iter().map(|a| &a.value));
        words.into_iter().find(|w| w.glob == Some('{'))
    }

    /// The words after quote removal joined by single spaces, with assignments
    /// first and redirections last.
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        let mut push = |s: &str| {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(s);
        };
        for a in &self.assigns {
            push(&format!("{}={}", a.name, a.value.text));
        }
        for w in &self.words {
            push(&w.text);
        }
        for r in &self.redirects {
            push(&r.text);
        }
        out
    }
}

/// The refusal for a bash-only construct where `/bin/sh` may read the script.
pub(crate) fn bash_only(construct: &str) -> Refusal {
    Refusal::new(format!(
        "{construct} is bash-only syntax that /bin/sh reads differently"
    ))
}

/// Join words' texts with single spaces.
pub(crate) fn join(words: &[Word]) -> String {
    let mut out = String::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&w.text);
    }
    out
}
