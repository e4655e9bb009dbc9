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
//!
//! The files follow these jobs. This one holds the words and their marks,
//! as the shell analysis gives them or guessed from text. `programs` says
//! which words of a command are paths and in what role, by its program's
//! model; `getopt` reads the programs whose options are parsed exactly
//! (grep, rg, sed, jq), and `generic` a word no model reads exactly.
//! `places` says where a word points once the shell has expanded it, and in
//! which directories a script's commands run; `reach` says which read rules
//! a glob, a directory read recursively or a word that may be anywhere
//! could reach.

mod generic;
mod getopt;
mod places;
mod programs;
mod reach;

use toolgate_shell::SimpleCommand;

pub(crate) use places::{place, stays_inside, working_directories, Place};
pub(crate) use programs::{arguments, unmodelled};
pub(crate) use reach::{guards, names_a_place, reached, strictest, Guard, Reach};

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

#[cfg(test)]
mod tests {
    use super::*;

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
