//! Small helpers for reading command-line options the way getopt does,
//! and for lexical path normalisation.

use std::path::{Component, Path, PathBuf};

use crate::syntax::Word;
use crate::Refusal;

/// The short options of one program.
pub(crate) struct Short {
    /// Letters that take a value (attached, or the next argument).
    pub value: &'static str,
    /// Letters whose value can only be attached (`-Iseconds`).
    pub optional: &'static str,
    /// Letters that make the command not read-only.
    pub forbidden: &'static str,
}

/// The option rules of one program whose flags matter.
pub(crate) struct Rules {
    pub short: Short,
    /// Long options that make the command not read-only. Abbreviations
    /// (`--outp` for `--output`) are caught too: GNU getopt accepts them.
    pub long: &'static [&'static str],
    /// Long options that are safe although they abbreviate an unsafe one.
    pub long_safe: &'static [&'static str],
}

/// How a long option takes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arg {
    /// No value.
    No,
    /// A value, attached with `=` or in the next word.
    Required,
    /// A value only when attached with `=`.
    Optional,
}

/// The long options `name` (without `--` and `=value`) selects, as GNU
/// getopt_long reads it: an exact name, else every option it abbreviates.
/// Empty when it names none; several when it is ambiguous.
pub(crate) fn long_matches<'t>(
    name: &str,
    table: &'t [(&'static str, Arg)],
) -> Vec<&'t (&'static str, Arg)> {
    if let Some(exact) = table.iter().find(|(n, _)| *n == name) {
        return vec![exact];
    }
    if name.is_empty() {
        return Vec::new();
    }
    table.iter().filter(|(n, _)| n.starts_with(name)).collect()
}

/// Read one short-option cluster (without its `-`). `Err(letter)` for a
/// forbidden letter; `Ok(true)` when the next argument is the last option's value.
pub(crate) fn short_cluster(cluster: &str, spec: &Short) -> Result<bool, char> {
    for (i, ch) in cluster.char_indices() {
        if spec.forbidden.contains(ch) {
            return Err(ch);
        }
        if spec.value.contains(ch) {
            return Ok(i + ch.len_utf8() == cluster.len());
        }
        if spec.optional.contains(ch) {
            return Ok(false);
        }
    }
    Ok(false)
}

/// The unsafe long option that `arg` names, exactly or abbreviated.
pub(crate) fn long_hit(
    arg: &str,
    unsafe_longs: &[&'static str],
    safe: &[&str],
) -> Option<&'static str> {
    let name = arg.split('=').next().unwrap_or(arg);
    if name.len() <= 2 || safe.contains(&name) {
        return None;
    }
    unsafe_longs
        .iter()
        .copied()
        .find(|u| *u == name || u.starts_with(name))
}

/// Walk the arguments of `prog` with its rules. Returns the positional
/// arguments, or the first forbidden option.
pub(crate) fn scan<'a>(
    prog: &str,
    args: &'a [Word],
    rules: &Rules,
) -> Result<Vec<&'a Word>, Refusal> {
    let mut positional = Vec::new();
    let mut i = 0;
    let mut end = false;
    while let Some(w) = args.get(i) {
        let a = w.text.as_str();
        if end || a == "-" || !a.starts_with('-') {
            positional.push(w);
            i += 1;
            continue;
        }
        if a == "--" {
            end = true;
            i += 1;
            continue;
        }
        if a.starts_with("--") {
            if let Some(u) = long_hit(a, rules.long, rules.long_safe) {
                return Err(flag_refusal(prog, u));
            }
            i += 1;
            continue;
        }
        match short_cluster(&a[1..], &rules.short) {
            Err(ch) => return Err(flag_refusal(prog, &format!("-{ch}"))),
            Ok(true) => {
                i += 1;
                // A value that looks like an option is judged as one too.
                if args.get(i).is_some_and(|v| !v.text.starts_with('-')) {
                    i += 1;
                }
            }
            Ok(false) => i += 1,
        }
    }
    Ok(positional)
}

/// The reason for an unsafe option, in words where we know them.
pub(crate) fn flag_refusal(prog: &str, flag: &str) -> Refusal {
    let what = match (prog, flag) {
        ("find", "-delete") => "deletes files",
        ("find", "-exec" | "-execdir" | "-ok" | "-okdir") => "runs a program",
        ("find", _) => "writes a file",
        ("rg", "--pre" | "--hostname-bin") => "runs a program",
        ("rg", _) => "runs decompression programs",
        ("sed", "-i" | "--in-place") => "edits files in place",
        ("sed", "-f" | "--file") => "runs a script from a file",
        ("sort", "--compress-program") => "runs a program",
        ("tree", "-R") => "writes files",
        ("sort" | "base64" | "tree", _) => "writes a file",
        ("file", "-C" | "--compile") => "writes a compiled magic file",
        ("file", "-z" | "-Z" | "--uncompress") => "runs decompression programs",
        ("file", _) => "reads commands from a file",
        ("date", _) => "sets the clock",
        _ => "is not read-only",
    };
    Refusal::new(format!("`{prog} {flag}` {what}"))
}

/// Refuse expansions and unquoted globs in the arguments of a program whose
/// flags matter: they could become any flag.
pub(crate) fn plain_args(prog: &str, args: &[Word]) -> Result<(), Refusal> {
    for a in args {
        if let Some(e) = &a.expansion {
            return Err(Refusal::new(format!(
                "expansion `{e}` in an argument of `{prog}` cannot be proven read-only"
            )));
        }
        if let Some(g) = a.glob {
            return Err(Refusal::new(format!(
                "unquoted glob or brace `{g}` in an argument of `{prog}` may expand to a flag"
            )));
        }
    }
    Ok(())
}

/// Normalise a path lexically: drop `.`, resolve `..` against what precedes
/// it, never touch the filesystem.
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                let at_root = matches!(
                    out.components().next_back(),
                    None | Some(Component::RootDir | Component::Prefix(_))
                );
                if at_root {
                    if out.as_os_str().is_empty() {
                        out.push("..");
                    }
                } else if matches!(out.components().next_back(), Some(Component::ParentDir)) {
                    out.push("..");
                } else {
                    out.pop();
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
    use super::*;

    #[test]
    fn normalizes_lexically() {
        for (input, want) in [
            ("/a/b/../c", "/a/c"),
            ("/a/./b/", "/a/b"),
            ("/../x", "/x"),
            ("/a/b/../../..", "/"),
            ("a/../../b", "../b"),
        ] {
            assert_eq!(normalize(Path::new(input)), PathBuf::from(want), "{input}");
        }
    }

    #[test]
    fn long_options_and_abbreviations() {
        let unsafe_longs = &["--output", "--compress-program"];
        assert_eq!(long_hit("--output=x", unsafe_longs, &[]), Some("--output"));
        assert_eq!(long_hit("--outp", unsafe_longs, &[]), Some("--output"));
        assert_eq!(
            long_hit("--comp=gzip", unsafe_longs, &[]),
            Some("--compress-program")
        );
        assert_eq!(long_hit("--reverse", unsafe_longs, &[]), None);
        assert_eq!(
            long_hit("--output-indicator-new=x", &["--output"], &[]),
            None
        );
        assert_eq!(long_hit("--text", &["--textconv"], &["--text"]), None);
    }

    #[test]
    fn short_clusters() {
        let spec = Short {
            value: "kt",
            optional: "I",
            forbidden: "o",
        };
        assert_eq!(short_cluster("rn", &spec), Ok(false));
        assert_eq!(short_cluster("ro", &spec), Err('o'));
        assert_eq!(short_cluster("to", &spec), Ok(false)); // `o` is the value of -t
        assert_eq!(short_cluster("k", &spec), Ok(true));
        assert_eq!(short_cluster("Io", &spec), Ok(false));
    }
}
