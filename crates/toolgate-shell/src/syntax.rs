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
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redir {
    /// How it is shown in the command text, e.g. `2>/dev/null`.
    pub text: String,
    /// Why it is not one of the safe forms.
    pub refusal: Option<Refusal>,
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
}

impl Item {
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
