//! Where a word points once the shell has expanded it: `~` and `$HOME`
//! are the home directory, other expansions anywhere, and a glob is read as
//! each of its brace alternatives and dot-segment choices. Also the
//! directories a script's commands may run in (after `cd`, `pushd`), and
//! the plain words that stay inside them.

use std::path::{Path, PathBuf};

use super::reach::{intersects, word_tokens, Tok};
use super::{has_glob_syntax, Marks, Word};
use crate::paths::{is_plain, normalize};

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
}
