//! Which names a command can print: the bound on what arrives through
//! `$(…)`, a pipe into `xargs` or into `while read`.
//!
//! A command whose output becomes another command's operands (`cat $(find .
//! -name Cargo.toml)`, `find src -name '*.rs' | xargs grep -l unsafe`,
//! `git ls-files | while read -r f; do wc -l "$f"; done`) hands over names
//! that are unknown until it runs: by default they may be any file. For the
//! producers below the names are known to lie under a few globs (relative
//! to the working directory), so the consumer reads only files those globs
//! match on the disk:
//!
//! - `find START... EXPR` whose expression only tests and prints (`-name`,
//!   `-type`, `-maxdepth`, `-path`, `-newer`, `-print`, `-print0`, ...): the
//!   start points and the files below them, `START/**/PATTERN` when one
//!   `-name PATTERN` is a condition every printed name meets. Not `-L`,
//!   `-follow`, `-printf`, `-ls`, `-exec`, `-files0-from`.
//! - `git ls-files [-z] [--cached|--others|--modified|--exclude-standard|
//!   --full-name] [PATHSPEC...]`: files below the working directory,
//!   narrowed by a pathspec without magic or `..`.
//! - A line filter reading one of those (`grep` selecting lines, `sort`,
//!   `uniq`, `head`, `tail` without file operands): the same names.
//!
//! The bound holds for whole names. A consumer that splits its input at
//! blanks or quotes (`xargs` without `-0`, an unquoted `$(…)`, `read`)
//! turns a name with such characters into other words, which may be any
//! file: the policy checks the matches on the disk for those characters
//! and counts the read as "any file" when one has them.

use crate::syntax::{Item, Word};

/// The bound of a producer that prints only commit ids (hexadecimal
/// words): `git log --format=%H`, `git rev-list`, `git rev-parse REV`. Such
/// a word is never an option and names no file: git takes it as a
/// revision (see `git.rs`), and the policy reads it as no path.
pub const HEX: &str = "<commit id>";

/// The globs every name `item` prints matches, if known.
pub(crate) fn bound(item: &Item) -> Option<Vec<String>> {
    if !item.assigns.is_empty() || item.construct.is_some() {
        return None;
    }
    let (program, args) = item.words.split_first()?;
    if !program.is_plain() {
        return None;
    }
    match program.text.as_str() {
        "find" => find(args),
        "git" => git_ls_files(args).or_else(|| git_commit_ids(args)),
        "grep" | "sort" | "uniq" | "head" | "tail" if item.piped => {
            line_filter(&program.text, args).then(|| item.stdin_names.clone())?
        }
        _ => None,
    }
}

/// `find`: start points, then an expression of tests and prints only.
fn find(args: &[Word]) -> Option<Vec<String>> {
    let mut starts: Vec<&str> = Vec::new();
    let mut i = 0;
    while let Some(w) = args.get(i) {
        if w.expansion.is_some() || w.tilde {
            return None;
        }
        let a = w.text.as_str();
        if a.starts_with('-') || a == "(" || a == "!" {
            break;
        }
        if w.glob == Some('{') {
            return None;
        }
        starts.push(a);
        i += 1;
    }
    // The name every printed path must have, when one `-name` is a
    // condition of the whole expression.
    let mut names: Vec<&str> = Vec::new();
    let mut conjunction = true;
    while let Some(w) = args.get(i) {
        if w.expansion.is_some() {
            return None;
        }
        i += 1;
        match w.text.as_str() {
            "-name" => {
                names.push(args.get(i)?.text.as_str());
                i += 1;
            }
            "-iname" | "-path" | "-ipath" | "-wholename" | "-iwholename" | "-regex" | "-iregex"
            | "-type" | "-xtype" | "-maxdepth" | "-mindepth" | "-newer" | "-size" | "-mtime"
            | "-mmin" | "-atime" | "-amin" | "-ctime" | "-cmin" | "-perm" | "-user" | "-group"
            | "-uid" | "-gid" | "-links" | "-regextype" | "-samefile" | "-inum" | "-used" => i += 1,
            "-empty"
            | "-readable"
            | "-writable"
            | "-executable"
            | "-prune"
            | "-true"
            | "-false"
            | "-nouser"
            | "-nogroup"
            | "-depth"
            | "-mount"
            | "-xdev"
            | "-ignore_readdir_race"
            | "-noleaf"
            | "-print"
            | "-print0"
            | "-a"
            | "-and" => {}
            "-o" | "-or" | "!" | "-not" | "(" | ")" | "," => conjunction = false,
            _ => return None,
        }
    }
    if args.get(i).is_some() {
        return None;
    }
    let starts = if starts.is_empty() { vec!["."] } else { starts };
    let mut out = Vec::new();
    for start in starts {
        let trimmed = start.trim_end_matches('/');
        let trimmed = if trimmed.is_empty() { "/" } else { trimmed };
        match (conjunction, names.as_slice()) {
            (true, [name]) if !name.contains('/') && !name.is_empty() => {
                // The start point is printed too when its own name matches.
                let last = trimmed.rsplit('/').next().unwrap_or(trimmed);
                let hard = name.len() > 64 || name.matches('*').count() > 4;
                if hard
                    || start.contains(['*', '?', '['])
                    || fnmatch(name.as_bytes(), last.as_bytes())
                {
                    out.push(start.to_string());
                }
                out.push(format!("{}/**/{name}", trimmed.trim_end_matches('/')))
            }
            _ => {
                out.push(start.to_string());
                out.push(format!("{}/**", trimmed.trim_end_matches('/')))
            }
        }
    }
    Some(out)
}

/// Could `pattern` (find's `-name`: `*`, `?`, `[…]`, `\\`) match `name`? A
/// bracket expression counts as any one character (a superset).
fn fnmatch(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|k| fnmatch(rest, &name[k..])),
        Some((b'?', rest)) => !name.is_empty() && fnmatch(rest, &name[1..]),
        Some((b'[', rest)) => match rest.iter().skip(1).position(|&c| c == b']') {
            Some(close) => !name.is_empty() && fnmatch(&rest[close + 2..], &name[1..]),
            None => name.first() == Some(&b'[') && fnmatch(rest, &name[1..]),
        },
        Some((b'\\', rest)) => match rest.split_first() {
            Some((c, tail)) => name.first() == Some(c) && fnmatch(tail, &name[1..]),
            None => name == b"\\",
        },
        Some((c, rest)) => name.first() == Some(c) && fnmatch(rest, &name[1..]),
    }
}

/// `git ls-files` with options that print bare names only.
fn git_ls_files(args: &[Word]) -> Option<Vec<String>> {
    let (sub, rest) = args.split_first()?;
    if !sub.is_plain() || sub.text != "ls-files" {
        return None;
    }
    let mut specs: Vec<&Word> = Vec::new();
    let mut end = false;
    for w in rest {
        if w.expansion.is_some() || w.tilde || w.glob == Some('{') {
            return None;
        }
        let a = w.text.as_str();
        if !end && a.starts_with('-') {
            match a {
                "--" => end = true,
                "-z" | "-c" | "--cached" | "-o" | "--others" | "-m" | "--modified"
                | "--exclude-standard" | "--full-name" => {}
                _ => return None,
            }
            continue;
        }
        specs.push(w);
    }
    if specs.is_empty() {
        return Some(vec!["**".to_string()]);
    }
    let mut out = Vec::new();
    for spec in specs {
        let s = spec.text.as_str();
        if s.is_empty()
            || s.starts_with([':', '/'])
            || s.split('/').any(|c| c == "..")
            || s.contains('\\')
        {
            return None;
        }
        let s = s.strip_prefix("./").unwrap_or(s);
        let first_glob = s.find(['*', '?', '[']);
        match first_glob {
            None => {
                let s = s.trim_end_matches('/');
                if s.is_empty() || s == "." {
                    out.push("**".to_string());
                } else {
                    out.push(s.to_string());
                    out.push(format!("{s}/**"));
                }
            }
            Some(at) => {
                // A pathspec's `*` also matches `/`: everything below the
                // literal directory before the first glob, ending as the
                // pattern ends when it starts its last part with `*`.
                let dir = s[..at].rfind('/').map_or("", |slash| &s[..slash]);
                let rest = if dir.is_empty() {
                    s
                } else {
                    &s[dir.len() + 1..]
                };
                let prefix = if dir.is_empty() {
                    String::new()
                } else {
                    format!("{dir}/")
                };
                if rest.starts_with('*') && !rest.contains('/') {
                    out.push(format!("{prefix}**/{rest}"));
                } else {
                    out.push(format!("{prefix}**"));
                }
            }
        }
    }
    Some(out)
}

/// `git log --format=%H` (or `%h`), `git rev-list`, `git rev-parse REV`,
/// `git merge-base A B`, with options that add nothing to the ids.
fn git_commit_ids(args: &[Word]) -> Option<Vec<String>> {
    let (sub, rest) = args.split_first()?;
    if !sub.is_plain() || rest.iter().any(|w| !w.is_plain()) {
        return None;
    }
    let texts: Vec<&str> = rest.iter().map(|w| w.text.as_str()).collect();
    let id_format = |f: &str| {
        matches!(
            f,
            "%H" | "%h" | "format:%H" | "format:%h" | "tformat:%H" | "tformat:%h"
        )
    };
    // Options that only choose commits.
    let choose = |a: &str| {
        matches!(
            a,
            "--no-merges"
                | "--merges"
                | "--first-parent"
                | "--reverse"
                | "--all"
                | "--branches"
                | "--tags"
                | "--remotes"
                | "--topo-order"
                | "--date-order"
        ) || [
            "--max-count=",
            "--since=",
            "--until=",
            "--after=",
            "--before=",
            "--author=",
            "--grep=",
            "--skip=",
        ]
        .iter()
        .any(|p| a.starts_with(p))
            || a.strip_prefix('-')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
    };
    let revision = |a: &str| !a.starts_with('-') && !a.contains(':');
    let mut i = 0;
    let mut ids = false;
    match sub.text.as_str() {
        "log" => {
            while let Some(a) = texts.get(i) {
                i += 1;
                if let Some(f) = a
                    .strip_prefix("--format=")
                    .or_else(|| a.strip_prefix("--pretty="))
                {
                    if !id_format(f) {
                        return None;
                    }
                    ids = true;
                } else if *a == "-n" {
                    texts.get(i)?.parse::<u64>().ok()?;
                    i += 1;
                } else if !(choose(a) || revision(a)) {
                    return None;
                }
            }
        }
        "rev-list" => {
            ids = true;
            while let Some(a) = texts.get(i) {
                i += 1;
                if *a == "-n" {
                    texts.get(i)?.parse::<u64>().ok()?;
                    i += 1;
                } else if !(choose(a) || revision(a)) {
                    return None;
                }
            }
        }
        "rev-parse" | "merge-base" => {
            ids = !texts.is_empty()
                && texts.iter().all(|a| {
                    revision(a)
                        || matches!(*a, "--verify" | "--short" | "-q" | "--quiet")
                        || a.strip_prefix("--short=")
                            .is_some_and(|n| n.parse::<u8>().is_ok())
                });
        }
        _ => return None,
    }
    ids.then(|| vec![HEX.to_string()])
}

/// A filter that prints some of its input lines unchanged.
fn line_filter(program: &str, args: &[Word]) -> bool {
    if args.iter().any(|w| !w.is_plain()) {
        return false;
    }
    let texts: Vec<&str> = args.iter().map(|w| w.text.as_str()).collect();
    match program {
        // Options that select lines; one pattern (or `-e PATTERN`s), no file.
        "grep" => {
            let mut given = 0;
            let mut operands = 0;
            let mut i = 0;
            while let Some(a) = texts.get(i) {
                match *a {
                    "-v" | "-E" | "-F" | "-G" | "-i" | "-w" | "-x" | "-vE" | "-Ev" | "-vF"
                    | "-Fv" | "-vi" | "-iv" => {}
                    "-e" => {
                        given += 1;
                        i += 1;
                    }
                    _ if a.starts_with('-') => return false,
                    _ => operands += 1,
                }
                i += 1;
            }
            // A file operand would be read instead of the input.
            (given >= 1 && operands == 0) || (given == 0 && operands == 1)
        }
        "sort" => texts
            .iter()
            .all(|a| matches!(*a, "-u" | "-r" | "-n" | "-V" | "-f" | "-h" | "-ru" | "-ur")),
        "uniq" => texts.iter().all(|a| matches!(*a, "-u" | "-d")),
        "head" | "tail" => {
            let mut i = 0;
            while let Some(a) = texts.get(i) {
                if *a == "-n" {
                    match texts.get(i + 1) {
                        Some(n) if n.bytes().all(|c| c.is_ascii_digit()) && !n.is_empty() => {}
                        _ => return false,
                    }
                    i += 2;
                    continue;
                }
                let digits = a.strip_prefix("-n").or_else(|| a.strip_prefix('-'));
                match digits {
                    Some(n) if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => {}
                    _ => return false,
                }
                i += 1;
            }
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(words: &[&str]) -> Item {
        Item {
            words: words.iter().map(|w| Word::literal(w)).collect(),
            ..Item::default()
        }
    }

    fn globbed(words: &[&str]) -> Item {
        let mut it = item(words);
        for w in &mut it.words {
            if w.text.contains(['*', '?', '[']) {
                w.glob = Some('*');
            }
        }
        it
    }

    #[test]
    fn producers() {
        let cases: &[(&[&str], Option<&[&str]>)] = &[
            (&["find", ".", "-name", "*.rs"], Some(&["./**/*.rs"])),
            (&["find", "src", "-name", "s*"], Some(&["src", "src/**/s*"])),
            (&["find", "src/", "-name", "x"], Some(&["src/**/x"])),
            (&["find", "src", "-type", "f"], Some(&["src", "src/**"])),
            (&["find", "-name", "x"], Some(&["./**/x"])),
            (
                &["find", ".", "-name", "a", "-o", "-name", "b"],
                Some(&[".", "./**"]),
            ),
            (&["find", ".", "-print0"], Some(&[".", "./**"])),
            (&["find", "-L", "."], None),
            (&["find", ".", "-follow"], None),
            (&["find", ".", "-printf", "%p"], None),
            (&["find", ".", "-ls"], None),
            (&["find", ".", "-exec", "cat", "{}", ";"], None),
            (&["find", ".", "-files0-from", "x"], None),
            (&["git", "ls-files"], Some(&["**"])),
            (&["git", "ls-files", "-z", "*.rs"], Some(&["**/*.rs"])),
            (&["git", "ls-files", "src/*.rs"], Some(&["src/**/*.rs"])),
            (&["git", "ls-files", "src"], Some(&["src", "src/**"])),
            (&["git", "ls-files", "a*/b"], Some(&["**"])),
            (&["git", "ls-files", ".."], None),
            (&["git", "ls-files", ":/x"], None),
            (&["git", "ls-files", "-s"], None),
            (&["git", "ls-files", "--format=%(objectname)"], None),
            (&["git", "-C", "x", "ls-files"], None),
            (&["ls"], None),
        ];
        for (words, want) in cases {
            let got = bound(&globbed(words));
            let want: Option<Vec<String>> = want.map(|w| w.iter().map(|s| s.to_string()).collect());
            assert_eq!(got, want, "{words:?}");
        }
    }

    #[test]
    fn filters_pass_the_bound_on() {
        let names = Some(vec!["src/**".to_string()]);
        for words in [
            &["grep", "-v", "test"][..],
            &["grep", "-e", "a", "-e", "b"],
            &["sort", "-u"],
            &["head", "-n", "5"],
            &["tail", "-3"],
            &["uniq"],
        ] {
            let mut it = item(words);
            it.piped = true;
            it.stdin_names = names.clone();
            assert_eq!(bound(&it), names, "{words:?}");
        }
        for words in [
            &["grep", "-n", "x"][..],
            &["grep", "-o", "x"],
            &["grep", "x", "file"],
            &["sort", "-k2"],
            &["uniq", "-c"],
            &["head", "-c", "5"],
            &["sed", "s/a/b/"],
        ] {
            let mut it = item(words);
            it.piped = true;
            it.stdin_names = names.clone();
            assert_eq!(bound(&it), None, "{words:?}");
        }
        // Not reading a bounded pipe.
        assert_eq!(bound(&item(&["sort", "-u"])), None);
    }
}
