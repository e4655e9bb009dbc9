//! The programs whose operands change meaning with their options (grep's
//! pattern, rg's paths, sed's script, jq's filter): their options are parsed
//! exactly as getopt_long would, in GNU's reading and, where it differs,
//! POSIX's, and a word either reading takes for a file counts. An option
//! that is not known exactly makes every word a tree.

use super::generic::{generic, generic_word, operand};
use super::{Arg, Marks, Role, Word};

/// The options of a program whose positional arguments change meaning
/// (grep's pattern, sed's script, jq's filter): parsed exactly, or not at all.
struct Options {
    /// Short letters without a value.
    flags: &'static str,
    /// Short letters with a value.
    valued: &'static str,
    /// Short letters with an optional value, attached only (`sed -i.bak`).
    optional: &'static str,
    /// Long options without a value.
    long_flags: &'static [&'static str],
    /// Long options with a value (`--name=V` or `--name V`).
    long_valued: &'static [&'static str],
    /// Long options with an optional value (`--name=V` only).
    long_optional: &'static [&'static str],
    /// `-NUM` is an option (grep's context).
    digits: bool,
}

/// One option as parsed: its name (a letter or a long name) and its value.
#[derive(Debug, Clone, Copy)]
struct Opt<'a> {
    name: &'a str,
    value: Option<Word<'a>>,
}

#[derive(Debug, Default)]
struct Parsed<'a> {
    options: Vec<Opt<'a>>,
    positional: Vec<Word<'a>>,
}

impl<'a> Parsed<'a> {
    fn has(&self, names: &[&str]) -> bool {
        self.options.iter().any(|o| names.contains(&o.name))
    }
    fn values(&self, names: &'a [&'a str]) -> impl Iterator<Item = Word<'a>> + '_ {
        self.options
            .iter()
            .filter(move |o| names.contains(&o.name))
            .filter_map(|o| o.value)
    }
}

/// Parse `args` as getopt_long would (`permute`: options after operands, as
/// GNU tools do unless `POSIXLY_CORRECT` is set). `None` for an option that
/// is not known exactly (abbreviated long options included).
fn parse<'a>(args: &[Word<'a>], spec: &Options, permute: bool) -> Option<Parsed<'a>> {
    let mut parsed = Parsed::default();
    let mut i = 0;
    let mut options = true;
    while i < args.len() {
        let word = args[i];
        let text = word.text;
        i += 1;
        if !options || !text.starts_with('-') || text == "-" {
            parsed.positional.push(word);
            if !permute {
                options = false;
            }
            continue;
        }
        if text == "--" {
            options = false;
            continue;
        }
        if let Some(long) = text.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (long, None),
            };
            if spec.long_valued.contains(&name) {
                let value = match attached {
                    Some(value) => Word {
                        text: value,
                        marks: word.marks.part(value),
                        names: None,
                        names_split: false,
                        pipe: false,
                    },
                    None => {
                        let next = *args.get(i)?;
                        i += 1;
                        next
                    }
                };
                parsed.options.push(Opt {
                    name,
                    value: Some(value),
                });
            } else if spec.long_optional.contains(&name)
                || (attached.is_none() && spec.long_flags.contains(&name))
            {
                parsed.options.push(Opt {
                    name,
                    value: attached.map(|value| Word {
                        text: value,
                        marks: word.marks.part(value),
                        names: None,
                        names_split: false,
                        pipe: false,
                    }),
                });
            } else {
                return None;
            }
            continue;
        }
        let cluster = &text[1..];
        if spec.digits && cluster.bytes().all(|b| b.is_ascii_digit()) {
            parsed.options.push(Opt {
                name: "C",
                value: None,
            });
            continue;
        }
        for (at, c) in cluster.char_indices() {
            let name = &cluster[at..at + c.len_utf8()];
            let rest = &cluster[at + c.len_utf8()..];
            if spec.flags.contains(c) {
                parsed.options.push(Opt { name, value: None });
            } else if spec.valued.contains(c) || spec.optional.contains(c) {
                let value = if !rest.is_empty() {
                    Some(Word {
                        text: rest,
                        marks: word.marks.part(rest),
                        names: None,
                        names_split: false,
                        pipe: false,
                    })
                } else if spec.valued.contains(c) {
                    let next = *args.get(i)?;
                    i += 1;
                    Some(next)
                } else {
                    None
                };
                parsed.options.push(Opt { name, value });
                break;
            } else {
                return None;
            }
        }
    }
    Some(parsed)
}

/// Whether reading `args` without GNU permutation can differ from reading
/// them with it: some word that looks like an option comes after a word
/// that does not (and not after `--`).
/// The options and operands as GNU getopt reads them (options may follow
/// operands) and, where that differs, as POSIX does (`POSIXLY_CORRECT`: the
/// first operand ends the options). `None` when either reading fails.
fn readings<'a>(args: &[Word<'a>], spec: &Options) -> Option<[Option<Parsed<'a>>; 2]> {
    let gnu = parse(args, spec, true)?;
    let posix = if posix_reading_differs(args) {
        Some(parse(args, spec, false)?)
    } else {
        None
    };
    Some([Some(gnu), posix])
}

fn posix_reading_differs(args: &[Word<'_>]) -> bool {
    let mut operand_seen = false;
    for word in args {
        let text = word.text;
        if text == "--" {
            // Without permutation a `--` after an operand is itself an operand.
            return operand_seen;
        }
        let option = text.starts_with('-') && text != "-";
        if option && operand_seen {
            return true;
        }
        operand_seen |= !option;
    }
    false
}

const GREP: Options = Options {
    flags: "EFGPiywxzsvVbnHhoqaIrRLlcTZUu",
    valued: "efmABCdD",
    optional: "",
    long_flags: &[
        "extended-regexp",
        "fixed-strings",
        "basic-regexp",
        "perl-regexp",
        "ignore-case",
        "no-ignore-case",
        "word-regexp",
        "line-regexp",
        "null-data",
        "no-messages",
        "invert-match",
        "version",
        "help",
        "byte-offset",
        "line-number",
        "no-line-number",
        "line-buffered",
        "with-filename",
        "no-filename",
        "only-matching",
        "quiet",
        "silent",
        "text",
        "recursive",
        "dereference-recursive",
        "files-without-match",
        "files-with-matches",
        "count",
        "initial-tab",
        "null",
        "no-group-separator",
        "binary",
        "unix-byte-offsets",
    ],
    long_valued: &[
        "regexp",
        "file",
        "max-count",
        "label",
        "binary-files",
        "directories",
        "devices",
        "include",
        "exclude",
        "exclude-from",
        "exclude-dir",
        "before-context",
        "after-context",
        "context",
        "group-separator",
    ],
    long_optional: &["color", "colour"],
    digits: true,
};

/// grep: the first operand is the pattern unless `-e`/`-f` give one; files
/// are read recursively with `-r` (the working directory when none is named).
pub(super) fn grep<'a>(args: &[Word<'a>], out: &mut Vec<Arg<'a>>) {
    // Options after operands count unless POSIXLY_CORRECT is set: both readings.
    let Some(readings) = readings(args, &GREP) else {
        return generic(args, Role::Tree, out);
    };
    for parsed in readings.iter().flatten() {
        let recursive = parsed.has(&["r", "R", "recursive", "dereference-recursive"])
            || parsed
                .values(&["d", "directories"])
                .any(|v| v.text == "recurse");
        let role = if recursive { Role::Tree } else { Role::File };
        for value in parsed.values(&["f", "file", "exclude-from"]) {
            generic_word(value, Role::File, out);
        }
        let given = parsed.has(&["e", "regexp", "f", "file"]);
        let files = if given {
            &parsed.positional[..]
        } else {
            parsed.positional.get(1..).unwrap_or(&[])
        };
        for file in files {
            operand(*file, role, out);
        }
        if files.is_empty() && recursive {
            out.push(Arg::new(".", Marks::default(), Role::Tree));
        }
    }
}

const RIPGREP: Options = Options {
    flags: "sSiFLvnNxwclqoUuzaPpHIhVb0.",
    valued: "ABCMmjtTgfeEr",
    optional: "",
    long_flags: &[
        "auto-hybrid-regex",
        "no-auto-hybrid-regex",
        "binary",
        "no-binary",
        "block-buffered",
        "no-block-buffered",
        "byte-offset",
        "no-byte-offset",
        "case-sensitive",
        "column",
        "no-column",
        "count",
        "count-matches",
        "crlf",
        "no-crlf",
        "debug",
        "trace",
        "files",
        "files-with-matches",
        "files-without-match",
        "fixed-strings",
        "no-fixed-strings",
        "follow",
        "no-follow",
        "glob-case-insensitive",
        "no-glob-case-insensitive",
        "help",
        "heading",
        "no-heading",
        "hidden",
        "no-hidden",
        "ignore-case",
        "ignore-file-case-insensitive",
        "no-ignore-file-case-insensitive",
        "include-zero",
        "no-include-zero",
        "invert-match",
        "no-invert-match",
        "json",
        "no-json",
        "line-buffered",
        "no-line-buffered",
        "line-number",
        "no-line-number",
        "line-regexp",
        "max-columns-preview",
        "no-max-columns-preview",
        "mmap",
        "no-mmap",
        "multiline",
        "no-multiline",
        "multiline-dotall",
        "no-multiline-dotall",
        "no-config",
        "no-filename",
        "with-filename",
        "no-ignore",
        "ignore",
        "no-ignore-dot",
        "ignore-dot",
        "no-ignore-exclude",
        "ignore-exclude",
        "no-ignore-files",
        "ignore-files",
        "no-ignore-global",
        "ignore-global",
        "no-ignore-messages",
        "ignore-messages",
        "no-ignore-parent",
        "ignore-parent",
        "no-ignore-vcs",
        "ignore-vcs",
        "no-messages",
        "messages",
        "no-pcre2-unicode",
        "pcre2-unicode",
        "no-require-git",
        "require-git",
        "no-unicode",
        "unicode",
        "null",
        "null-data",
        "one-file-system",
        "no-one-file-system",
        "only-matching",
        "passthru",
        "passthrough",
        "pcre2",
        "no-pcre2",
        "pcre2-version",
        "no-pre",
        "pretty",
        "quiet",
        "search-zip",
        "no-search-zip",
        "smart-case",
        "sort-files",
        "no-sort-files",
        "stats",
        "no-stats",
        "text",
        "no-text",
        "trim",
        "no-trim",
        "type-list",
        "unrestricted",
        "version",
        "vimgrep",
        "word-regexp",
        "no-context-separator",
        "no-encoding",
    ],
    long_valued: &[
        "after-context",
        "before-context",
        "context",
        "color",
        "colors",
        "context-separator",
        "dfa-size-limit",
        "encoding",
        "engine",
        "field-context-separator",
        "field-match-separator",
        "file",
        "glob",
        "iglob",
        "ignore-file",
        "max-columns",
        "max-count",
        "max-depth",
        "maxdepth",
        "max-filesize",
        "path-separator",
        "pre",
        "pre-glob",
        "regex-size-limit",
        "regexp",
        "replace",
        "sort",
        "sortr",
        "threads",
        "type",
        "type-add",
        "type-clear",
        "type-not",
    ],
    long_optional: &[],
    digits: false,
};

/// rg: like grep, always recursive, the working directory when no path is named.
pub(super) fn ripgrep<'a>(args: &[Word<'a>], out: &mut Vec<Arg<'a>>) {
    let Some(parsed) = parse(args, &RIPGREP, true) else {
        return generic(args, Role::Tree, out);
    };
    for value in parsed.values(&["f", "file", "ignore-file", "pre"]) {
        generic_word(value, Role::File, out);
    }
    let given = parsed.has(&["e", "regexp", "f", "file", "files", "type-list"]);
    let paths = if given {
        &parsed.positional[..]
    } else {
        parsed.positional.get(1..).unwrap_or(&[])
    };
    for path in paths {
        operand(*path, Role::Tree, out);
    }
    if paths.is_empty() {
        out.push(Arg::new(".", Marks::default(), Role::Tree));
    }
}

const SED: Options = Options {
    flags: "nrEsuzb",
    valued: "efl",
    optional: "i",
    long_flags: &[
        "quiet",
        "silent",
        "regexp-extended",
        "separate",
        "unbuffered",
        "null-data",
        "posix",
        "debug",
        "sandbox",
        "follow-symlinks",
        "help",
        "version",
        "binary",
    ],
    long_valued: &["expression", "file", "line-length"],
    long_optional: &["in-place"],
    digits: false,
};

/// sed: the first operand is the script unless `-e`/`-f` give one; the files
/// a script reads or writes (`r`, `R`, `w`, `W`, and `e` commands) count.
pub(super) fn sed<'a>(args: &[Word<'a>], out: &mut Vec<Arg<'a>>) {
    let Some(readings) = readings(args, &SED) else {
        return generic(args, Role::Tree, out);
    };
    for parsed in readings.iter().flatten() {
        for value in parsed.values(&["f", "file"]) {
            generic_word(value, Role::File, out);
        }
        let mut scripts: Vec<Word<'a>> = parsed.values(&["e", "expression"]).collect();
        let given = parsed.has(&["e", "expression", "f", "file"]);
        let files = if given {
            &parsed.positional[..]
        } else {
            scripts.extend(parsed.positional.first().copied());
            parsed.positional.get(1..).unwrap_or(&[])
        };
        for script in scripts {
            // A script GNU sed's grammar reads, writing and running nothing:
            // the files its `r`/`R` commands read are known exactly (the
            // shell analysis reports them); otherwise every piece of it that
            // could follow such a command may be a file.
            if !toolgate_shell::sed_script_only_reads(script.text) {
                sed_script_files(script, out);
            }
        }
        for file in files {
            operand(*file, Role::File, out);
        }
    }
}

/// The files a sed script may name: after every `r R w W e` letter, the rest
/// of its line (whole, and word by word). Over-approximate: `s/error/x/` gives
/// `ror/x/` too, which names nothing a rule guards. The parts are marked as the
/// script word is: sed expands nothing, so `$` in `/^$/p` is no expansion.
fn sed_script_files<'a>(script: Word<'a>, out: &mut Vec<Arg<'a>>) {
    for line in script.text.split('\n') {
        for (at, c) in line.char_indices() {
            if !matches!(c, 'r' | 'R' | 'w' | 'W' | 'e') {
                continue;
            }
            let rest = line[at + 1..].trim_start();
            if rest.is_empty() {
                continue;
            }
            // The script is one word the shell already expanded: its parts
            // carry what the whole word carried (`/^$/` is no expansion).
            out.push(Arg::new(rest, script.marks.part(rest), Role::File));
            for part in rest
                .split_whitespace()
                .filter(|part| part.len() < rest.len())
            {
                out.push(Arg::new(part, script.marks.part(part), Role::File));
            }
        }
    }
}

const JQ: Options = Options {
    flags: "nrjascCMSeRhVbf",
    valued: "L",
    optional: "",
    long_flags: &[
        "tab",
        "seq",
        "stream",
        "stream-errors",
        "raw-output",
        "raw-output0",
        "join-output",
        "ascii-output",
        "sort-keys",
        "color-output",
        "monochrome-output",
        "null-input",
        "raw-input",
        "slurp",
        "compact-output",
        "exit-status",
        "unbuffered",
        "from-file",
        "args",
        "jsonargs",
        "help",
        "version",
        "build-configuration",
        "debug-dump-disasm",
        "debug-trace",
        "binary",
    ],
    long_valued: &["indent", "library-path", "run-tests"],
    long_optional: &[],
    digits: false,
};

/// jq: the first operand is the filter (a file with `-f`); `--arg NAME VALUE`
/// and friends take two words; after `--args` operands are data.
pub(super) fn jq<'a>(args: &[Word<'a>], out: &mut Vec<Arg<'a>>) {
    // The options of two values are taken out first; the rest is parsed.
    let mut rest: Vec<Word<'a>> = Vec::with_capacity(args.len());
    let mut data_from: Option<usize> = None;
    let mut i = 0;
    let mut options = true;
    while i < args.len() {
        let word = args[i];
        i += 1;
        match word.text {
            "--" if options => {
                options = false;
                rest.push(word);
            }
            "--arg" | "--argjson" if options => i += 2,
            "--slurpfile" | "--rawfile" | "--argfile" if options => {
                if let Some(file) = args.get(i + 1) {
                    generic_word(*file, Role::File, out);
                }
                i += 2;
            }
            "--args" | "--jsonargs" if options => {
                data_from.get_or_insert(rest.len());
            }
            _ => rest.push(word),
        }
    }
    let Some(parsed) = parse(&rest, &JQ, true) else {
        return generic(args, Role::Tree, out);
    };
    for value in parsed.values(&["L", "library-path", "run-tests"]) {
        generic_word(value, Role::Tree, out);
    }
    let from_file = parsed.has(&["f", "from-file"]);
    let mut operands = parsed.positional.iter();
    if !from_file {
        if let Some(filter) = operands.next() {
            // A filter that loads modules reads files named inside it.
            if filter.text.contains("import") || filter.text.contains("include") {
                out.push(Arg::new(
                    filter.text,
                    Marks {
                        expansion: true,
                        ..filter.marks
                    },
                    Role::File,
                ));
            }
        }
    }
    for file in operands {
        // After `--args`, operands are data; which ones is found by position.
        let index = rest
            .iter()
            .position(|w| std::ptr::eq(w.text, file.text))
            .unwrap_or(0);
        if data_from.is_some_and(|from| index >= from) {
            continue;
        }
        operand(*file, Role::File, out);
    }
}
