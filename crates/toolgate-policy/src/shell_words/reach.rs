//! Which read rules a word could reach: globs as tokens and a walk that
//! tells whether a word's glob and a rule's pattern could match one path,
//! the guards (read rules that ask or deny for particular files and that no
//! later rule overrides), and the strictest guard a glob, a directory read
//! recursively or a word that may be anywhere reaches.

use std::path::Path;

use super::Role;
use crate::mode::Action;
use crate::rules::{Rule, Ruleset};

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
/// rule overrides wholesale (a later `*`, or the same pattern again): a rule
/// of any later layer, or for a managed rule, a later rule of its own managed
/// layer (nothing else overrides it).
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
                .filter(|later| {
                    later.permission.matches("read")
                        && later.managed == rule.managed
                        && (!rule.managed || later.origin == rule.origin)
                })
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
