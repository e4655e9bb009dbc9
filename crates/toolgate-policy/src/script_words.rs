//! The words of a shell script that may name paths, found from its analysis
//! alone: which command each word belongs to (a wrapper's own words apart
//! from the command it runs, a command known only by its text split at
//! spaces), how its program uses it ([`crate::shell_words::arguments`]), and
//! the redirections' targets.
//!
//! None of this looks at the disk or at the policy, so it is worked out once
//! per analysis: [`KeptWords`] keeps it beside an analysis the
//! [`crate::ShellCache`] remembers, and a repeated command (`git status`,
//! `ls`) only judges its words against the disk and the rules again.

use toolgate_shell::SimpleCommand;

use crate::shell_words::{
    arguments, command_words, guessed_words, redirect_target, unmodelled, Arg, Marks, Role, Word,
};

/// What the words of a script name, borrowed from its analysis (or from
/// [`KeptWords`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScriptWords<'a> {
    /// Every word that may name a path, with how its program uses it, in
    /// the script's order, then the redirections' targets.
    pub args: Vec<Arg<'a>>,
    /// The words of each command that changes the directory (`cd`, `pushd`,
    /// `popd`, `chdir`), program first, in the script's order: where the
    /// later words are read from.
    pub moves: Vec<Vec<Word<'a>>>,
}

impl ScriptWords<'_> {
    /// Does some command change the directory the others run in?
    pub(crate) fn changes_directory(&self) -> bool {
        !self.moves.is_empty()
    }
}

/// Is `program` one that changes the shell's directory?
fn moves_directory(program: &str) -> bool {
    matches!(program, "cd" | "pushd" | "popd" | "chdir")
}

/// The words of `commands` that may name paths.
pub(crate) fn script_words(commands: &[SimpleCommand]) -> ScriptWords<'_> {
    // Each view is a run of one command's words and whether they are
    // exact (a command known by its text only has its words guessed).
    let mut owned: Vec<Vec<Word<'_>>> = Vec::new();
    let mut views: Vec<(usize, std::ops::Range<usize>, bool)> = Vec::new();
    let mut redirects: Vec<&str> = Vec::new();
    for command in commands {
        // A construct shown by its source (`$(< .env)` gives `< .env`) has
        // one word that is not a program: it is known by its text only.
        let words = command_words(command).filter(|words| {
            words.first().is_some_and(|program| {
                !program.text.contains(char::is_whitespace)
                    && !program.text.starts_with(['<', '>', '(', ')'])
            })
        });
        let Some(words) = words else {
            guessed_view(&command.text, &mut owned, &mut views, &mut redirects);
            for inner in &command.inner {
                guessed_view(inner, &mut owned, &mut views, &mut redirects);
            }
            continue;
        };
        // The command a wrapper runs (`sudo`, `timeout 5`, `env -i`) is a tail
        // of the words: it is judged as its own program, the wrapper's words
        // as arguments of an unknown one. The wrappers come first in `inner`,
        // outermost first; every other inner command (a `bash -c` script,
        // `eval`) is known by its text only, even when it reads like a tail.
        let index = owned.len();
        let mut start = 0;
        let mut wrapped = true;
        for inner in &command.inner {
            let found = (start..words.len())
                .find(|&k| tail(&command.text, &words[k..]) == Some(inner.as_str()));
            // The command itself after its assignments (`LANG=C rg x`).
            if wrapped && start == 0 && found == Some(0) {
                continue;
            }
            wrapped = wrapped && is_wrapper(words[start].text);
            match found {
                Some(k) if wrapped && k > start => {
                    views.push((index, start..k, true));
                    start = k;
                }
                _ => {
                    wrapped = false;
                    guessed_view(inner, &mut owned, &mut views, &mut redirects);
                }
            }
        }
        views.push((index, start..words.len(), true));
        owned.insert(index, words);
        // Views pushed by `guessed_view` above point one past their place now.
        for view in views.iter_mut().rev() {
            if view.0 > index || (view.0 == index && !view.2) {
                view.0 += 1;
            }
        }
        for (k, range) in command.redirects.iter().enumerate() {
            // A word bound to a producer's names is read as its names.
            if command.bound_redirects.contains(&k) {
                continue;
            }
            redirects.extend(command.text.get(range.clone()).and_then(redirect_target));
        }
    }

    let view_words = |(index, range, _): &(usize, std::ops::Range<usize>, bool)| -> &[Word<'_>] {
        owned
            .get(*index)
            .and_then(|words| words.get(range.clone()))
            .unwrap_or(&[])
    };
    let mut args: Vec<Arg<'_>> = Vec::new();
    let mut moves = Vec::new();
    for view in &views {
        let words = view_words(view);
        if words.first().is_some_and(|w| moves_directory(w.text)) {
            moves.push(words.to_vec());
        }
        if view.2 {
            arguments(words, &mut args);
        } else {
            // Guessed words may be pieces of one quoted word: no program's
            // model applies (a pattern it skips could be a file).
            unmodelled(words, &mut args);
        }
    }
    for target in redirects {
        args.push(Arg::new(target, Marks::guessed(target), Role::File));
    }
    ScriptWords { args, moves }
}

/// The text `words` (a tail of a command's words) cover in the command's text.
fn tail<'a>(text: &'a str, words: &[Word<'a>]) -> Option<&'a str> {
    let offset = |word: &str| (word.as_ptr() as usize).checked_sub(text.as_ptr() as usize);
    let first = words.first()?;
    let last = words.last()?;
    text.get(offset(first.text)?..offset(last.text)? + last.text.len())
}

/// A command known only by its text: its words split at spaces, marks
/// guessed; a word that starts like a redirection is one.
fn guessed_view<'a>(
    text: &'a str,
    owned: &mut Vec<Vec<Word<'a>>>,
    views: &mut Vec<(usize, std::ops::Range<usize>, bool)>,
    redirects: &mut Vec<&'a str>,
) {
    let mut words = Vec::new();
    // After an operator standing alone (`< .env`), the next word is its target.
    let mut target_next = false;
    for word in guessed_words(text) {
        let operator = word
            .text
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .starts_with(['<', '>', '&']);
        if target_next {
            target_next = false;
            redirects.push(word.text);
        } else if operator {
            match redirect_target(word.text) {
                Some(target) => redirects.push(target),
                // `<`, `2>>`, `&>` alone; not `<<`/`<<<` (data follows) or `2>&1`.
                None => {
                    target_next = word
                        .text
                        .trim_start_matches(|c: char| c.is_ascii_digit())
                        .trim_start_matches(['<', '>', '&', '|'])
                        .is_empty()
                        && !word.text.contains("<<");
                }
            }
        } else {
            words.push(word);
        }
    }
    views.push((owned.len(), 0..words.len(), false));
    owned.push(words);
}

/// A program that runs the rest of its words as a command (the shell
/// analysis records that command as the first of its inner texts).
fn is_wrapper(program: &str) -> bool {
    let name = program.rsplit('/').next().unwrap_or(program);
    matches!(
        name,
        "sudo"
            | "doas"
            | "nohup"
            | "exec"
            | "env"
            | "timeout"
            | "time"
            | "nice"
            | "stdbuf"
            | "ionice"
            | "command"
            | "builtin"
            | "xargs"
    )
}

/// [`ScriptWords`] that own their text, kept beside a remembered analysis.
#[derive(Debug, Default)]
pub(crate) struct KeptWords {
    args: Vec<KeptArg>,
    moves: Vec<Vec<KeptWord>>,
}

#[derive(Debug)]
struct KeptArg {
    text: Box<str>,
    marks: Marks,
    role: Role,
    external: bool,
    names: bool,
    follows_links: bool,
}

#[derive(Debug)]
struct KeptWord {
    text: Box<str>,
    marks: Marks,
    names: Option<Box<[String]>>,
    names_split: bool,
    pipe: bool,
}

impl KeptWords {
    /// The words, owned.
    pub(crate) fn keep(words: &ScriptWords<'_>) -> KeptWords {
        let args = words
            .args
            .iter()
            .map(|arg| KeptArg {
                text: arg.text.into(),
                marks: arg.marks,
                role: arg.role,
                external: arg.external,
                names: arg.names,
                follows_links: arg.follows_links,
            })
            .collect();
        let moves = words
            .moves
            .iter()
            .map(|words| {
                words
                    .iter()
                    .map(|word| KeptWord {
                        text: word.text.into(),
                        marks: word.marks,
                        names: word.names.map(Box::from),
                        names_split: word.names_split,
                        pipe: word.pipe,
                    })
                    .collect()
            })
            .collect();
        KeptWords { args, moves }
    }

    /// The words again, borrowed from these.
    pub(crate) fn words(&self) -> ScriptWords<'_> {
        let args = self
            .args
            .iter()
            .map(|arg| Arg {
                text: &arg.text,
                marks: arg.marks,
                role: arg.role,
                external: arg.external,
                names: arg.names,
                follows_links: arg.follows_links,
            })
            .collect();
        let moves = self
            .moves
            .iter()
            .map(|words| {
                words
                    .iter()
                    .map(|word| Word {
                        text: &word.text,
                        marks: word.marks,
                        names: word.names.as_deref(),
                        names_split: word.names_split,
                        pipe: word.pipe,
                    })
                    .collect()
            })
            .collect();
        ScriptWords { args, moves }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scripts that reach every branch above: wrappers (one, nested, with
    /// assignments), commands known by their text only (`bash -c`, `eval`,
    /// a construct shown by its source), redirections of every shape, names
    /// a producer prints, process substitutions, directory changes.
    const SCRIPTS: &[&str] = &[
        "git status",
        "ls -la src && cat README.md",
        "sudo -u x timeout 5 cat /etc/passwd",
        "env -i LANG=C nice -n 5 rg -L secret .",
        "LANG=C grep -r key . > out.txt 2>&1",
        "bash -c 'cat .env; ls /tmp' < in.txt",
        "eval \"cat $F\" 2>> log",
        "cat $(find . -name '*.env') | xargs cat",
        "find . -name '*.pem' -print0 | xargs -0 cat",
        "diff <(cat a) <(sort b) &> both",
        "cd src && cat lib.rs; pushd ../x; popd; chdir /",
        "cd; cd -; cd -- dir; cd -P ~/x",
        "echo $(< .env)",
        "x=$(cat ~/.ssh/id_rsa) && echo \"$x\"",
        "for f in *.rs; do wc -l \"$f\"; done",
        "git show HEAD:src/main.rs -- '*.toml'",
        "xargs -a list.txt cat",
        "command cat {a,b}.txt 3< fd.txt",
        "exec 3>&- && cat notes.txt <&3",
        "head -n 5 ~/notes ~+/x ~other/y",
    ];

    #[test]
    fn kept_words_give_back_the_same_words() {
        let options = toolgate_shell::Options::default();
        for script in SCRIPTS {
            let analysis = toolgate_shell::analyze(toolgate_shell::Script::Text(script), &options);
            let words = script_words(&analysis.commands);
            assert!(!words.args.is_empty(), "{script}: no words found");
            let kept = KeptWords::keep(&words);
            assert_eq!(kept.words(), words, "{script}");
        }
    }

    /// Every command of the shell crate's corpora (the last field of a
    /// `.tsv` line, a whole line of a `.txt`).
    const CORPORA: &[&str] = &[
        include_str!("../../toolgate-shell/tests/corpus.tsv"),
        include_str!("../../toolgate-shell/tests/corpus/git.tsv"),
        include_str!("../../toolgate-shell/tests/corpus/gitlinks.tsv"),
        include_str!("../../toolgate-shell/tests/corpus/oracle.tsv"),
        include_str!("../../toolgate-shell/tests/corpus/programs.tsv"),
        include_str!("../../toolgate-shell/tests/corpus/syntax.tsv"),
        include_str!("../../toolgate-shell/tests/corpus/research-blind.txt"),
        include_str!("../../toolgate-shell/tests/corpus/research-blind2.txt"),
        include_str!("../../toolgate-shell/tests/corpus/research-dev.txt"),
        include_str!("../../toolgate-shell/tests/corpus/research-heldout.txt"),
    ];

    #[test]
    fn kept_words_give_back_the_same_words_for_every_corpus_command() {
        let options = toolgate_shell::Options::default();
        let mut seen = 0;
        for corpus in CORPORA {
            for line in corpus.lines() {
                if line.trim().is_empty() || line.starts_with('#') {
                    continue;
                }
                let script = line.rsplit('\t').next().unwrap_or(line);
                let analysis =
                    toolgate_shell::analyze(toolgate_shell::Script::Text(script), &options);
                let words = script_words(&analysis.commands);
                assert_eq!(KeptWords::keep(&words).words(), words, "{script}");
                seen += 1;
            }
        }
        assert!(seen > 2000, "only {seen} corpus commands were read");
    }

    #[test]
    fn directory_changes_are_kept_in_order() {
        let options = toolgate_shell::Options::default();
        let analysis = toolgate_shell::analyze(
            toolgate_shell::Script::Text("cd src && cat lib.rs; sudo pushd ../x"),
            &options,
        );
        let words = script_words(&analysis.commands);
        let programs: Vec<Vec<&str>> = words
            .moves
            .iter()
            .map(|words| words.iter().map(|w| w.text).collect())
            .collect();
        assert_eq!(programs, vec![vec!["cd", "src"], vec!["pushd", "../x"]]);
        assert!(KeptWords::keep(&words).words().changes_directory());
    }
}
