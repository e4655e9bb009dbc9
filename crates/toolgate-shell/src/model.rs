//! The program model: each admitted program's real option grammar, read from
//! `programs.txt` (checked in as data, from the installed program's `--help`
//! and man page), and one getopt_long reader that every judge uses.
//!
//! The reader does what GNU getopt_long does: short options cluster
//! (`-abc`), a short option's value is the rest of its cluster or the next
//! word (`-oFILE`, `-o FILE`, `-aoFILE`), a long option's value is attached
//! with `=` or the next word, an optional value only attached, long options
//! may be abbreviated to any unique prefix, `--` ends the options, and
//! options may follow operands unless the program stops at the first one
//! (`posix`: wrappers, whose first operand starts the command they run).
//! An option the data does not list is refused: a program whose options
//! cannot all be read is not read-only.
//!
//! What each option does is data too: its value may be data, a name, a file
//! or a tree that is read (`--files0-from=F`), it may make the operands trees
//! (`-r`), make the operands come from its file (then they may be any file),
//! or write, run a program, use the network or change the system (refused,
//! with a [`RefusalKind`]).

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::syntax::Word;
use crate::{FileRead, ReadTarget, Refusal, RefusalKind};

/// The data, one block a program.
pub(crate) const PROGRAMS: &str = include_str!("../programs.txt");

/// What a word (an operand or an option's value) is to its program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Never a path (a pattern, a count, a format).
    Data,
    /// A path whose name or metadata is used, not its content.
    Name,
    /// A file whose content is read.
    File,
    /// A file, or a directory read recursively.
    Tree,
}

/// Whether an option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value {
    /// A flag.
    None,
    /// Attached (`-oX`, `--out=X`) or the next word.
    Required,
    /// Only attached.
    Optional,
}

/// One option of a program.
#[derive(Debug, Clone)]
pub(crate) struct Opt {
    pub short: Vec<char>,
    pub long: Vec<&'static str>,
    pub value: Value,
    /// What the value is.
    pub role: Role,
    /// Further values, each the next word (`jq --rawfile NAME FILE`).
    pub more: Vec<Role>,
    /// The operands are read recursively.
    pub recursive: bool,
    /// The operands come (also) from the value's file or stdin: any file.
    pub lists_operands: bool,
    /// The option gives the pattern (`grep -e`, `-f`): the first operand is
    /// then a file like the others.
    pub gives_pattern: bool,
    /// The operands after the pattern are data (`jq --args`).
    pub rest_data: bool,
    /// Symbolic links met below a directory operand are followed
    /// (`grep -R`, `rg -L`, `tree -l`).
    pub follows_links: bool,
    /// Why the option makes the command not read-only.
    pub effect: Option<(RefusalKind, &'static str)>,
}

/// When a program with no path operand reads the working directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SearchesHere {
    Always,
    WhenRecursive,
}

/// One program's grammar.
#[derive(Debug, Clone)]
pub(crate) struct Program {
    pub names: Vec<&'static str>,
    /// What the operands are.
    pub operands: Role,
    /// Options end at the first operand.
    pub posix: bool,
    /// `@FILE` anywhere in the arguments reads FILE's words as arguments.
    pub response_files: bool,
    /// Long options must be written whole.
    pub no_abbrev: bool,
    /// The most operands that are only read (`uniq IN OUT` writes the second).
    pub max_operands: Option<(usize, &'static str)>,
    /// The first operand is a pattern (data) unless a `+gives-pattern`
    /// option is given (grep, rg, jq's filter).
    pub pattern_operand: bool,
    /// Without a path operand the working directory is read recursively:
    /// always (`rg`), or only when an option makes it recursive (`grep -r`).
    pub searches_here: Option<SearchesHere>,
    /// Attached values lose every leading `=` (clap: `-f=F` reads `F`).
    pub strip_equals: bool,
    /// `--` is refused: the program's own reader can take it as a value
    /// (`tree -P -- -o out` writes `out`).
    pub no_dashdash: bool,
    /// A word that is a negative number ends the options (`seq -5 5`).
    pub negative_numbers: bool,
    /// The first operand is a file that is read (unzip's archive); the
    /// others have the `operands` role.
    pub archive_operand: bool,
    /// Symbolic links met below a directory operand are followed, whatever
    /// the options (`diff`).
    pub follows_links: bool,
    pub options: Vec<Opt>,
}

impl Program {
    /// Does any option write, run or change anything?
    fn has_effect(&self) -> bool {
        self.max_operands.is_some() || self.options.iter().any(|o| o.effect.is_some())
    }

    /// Does any option make the command unsafe or read a file through its value?
    fn has_consequential_option(&self) -> bool {
        self.options.iter().any(|o| {
            o.effect.is_some() || o.lists_operands || matches!(o.role, Role::File | Role::Tree)
        })
    }
}

/// Every program of the data, by name (aliases included). A block that does
/// not parse is left out (its program is then not read-only); a test checks
/// that every block parses.
pub(crate) fn programs() -> &'static HashMap<&'static str, Program> {
    static TABLE: OnceLock<HashMap<&'static str, Program>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = HashMap::new();
        for block in blocks(PROGRAMS) {
            if let Ok(p) = parse_block(block) {
                for n in &p.names {
                    table.insert(*n, p.clone());
                }
            }
        }
        table
    })
}

/// The model of one program.
/// Does `name` take only data: operands and every option's values (`echo`,
/// `basename`, `dirname`)? Whatever words it is given then name no file.
pub(crate) fn only_data(name: &str) -> bool {
    match program(name) {
        Some(p) => {
            p.operands == Role::Data
                && p.options
                    .iter()
                    .all(|o| o.role == Role::Data && o.more.iter().all(|r| *r == Role::Data))
        }
        None => name == "echo",
    }
}

pub(crate) fn program(name: &str) -> Option<&'static Program> {
    programs().get(name)
}

/// The blocks of the data: from a `[names]` line to the next.
pub(crate) fn blocks(data: &'static str) -> Vec<&'static str> {
    let mut starts: Vec<usize> = Vec::new();
    let mut offset = 0;
    for line in data.split_inclusive('\n') {
        if line.starts_with('[') {
            starts.push(offset);
        }
        offset += line.len();
    }
    let mut out = Vec::new();
    for (i, &s) in starts.iter().enumerate() {
        let e = starts.get(i + 1).copied().unwrap_or(data.len());
        out.push(&data[s..e]);
    }
    out
}

/// Parse one block; `Err` names the line that is wrong.
pub(crate) fn parse_block(block: &'static str) -> Result<Program, String> {
    let mut lines = block.lines();
    let head = lines.next().unwrap_or_default().trim();
    let names: Vec<&'static str> = head
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .ok_or_else(|| format!("bad header `{head}`"))?
        .split_whitespace()
        .collect();
    if names.is_empty() {
        return Err(format!("header `{head}` names no program"));
    }
    let mut program = Program {
        names,
        operands: Role::File,
        posix: false,
        response_files: false,
        no_abbrev: false,
        max_operands: None,
        pattern_operand: false,
        searches_here: None,
        strip_equals: false,
        no_dashdash: false,
        negative_numbers: false,
        archive_operand: false,
        follows_links: false,
        options: Vec::new(),
    };
    for raw in lines {
        let line = raw.split(" #").next().unwrap_or_default().trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !line.starts_with('-') {
            attribute(&mut program, line).map_err(|e| format!("{head}: `{line}`: {e}"))?;
            continue;
        }
        let opt = option(line).map_err(|e| format!("{head}: `{line}`: {e}"))?;
        program.options.push(opt);
    }
    Ok(program)
}

fn role(word: &str) -> Result<Role, String> {
    Ok(match word {
        "data" => Role::Data,
        "name" => Role::Name,
        "file" => Role::File,
        "tree" => Role::Tree,
        other => return Err(format!("unknown role `{other}`")),
    })
}

fn attribute(program: &mut Program, line: &'static str) -> Result<(), String> {
    let mut words = line.split_whitespace();
    match words.next().unwrap_or_default() {
        "operands" => program.operands = role(words.next().unwrap_or_default())?,
        "posix" => program.posix = true,
        "response-files" => program.response_files = true,
        "no-abbrev" => program.no_abbrev = true,
        "pattern-operand" => program.pattern_operand = true,
        "strip-equals" => program.strip_equals = true,
        "no-dashdash" => program.no_dashdash = true,
        "negative-numbers" => program.negative_numbers = true,
        "archive-operand" => program.archive_operand = true,
        "follows-links" => program.follows_links = true,
        "searches-here" => {
            program.searches_here = Some(match words.next() {
                None => SearchesHere::Always,
                Some("recursive") => SearchesHere::WhenRecursive,
                Some(other) => {
                    return Err(format!("searches-here takes `recursive`, not `{other}`"))
                }
            })
        }
        "source" => {}
        "max-operands" => {
            let n = words
                .next()
                .and_then(|n| n.parse().ok())
                .ok_or("max-operands needs a number")?;
            let rest = line.splitn(3, ' ').nth(2).unwrap_or("writes a file").trim();
            program.max_operands = Some((n, rest));
        }
        other => return Err(format!("unknown attribute `{other}`")),
    }
    Ok(())
}

fn effect_kind(word: &str) -> Result<RefusalKind, String> {
    Ok(match word {
        "!write" => RefusalKind::Writes,
        "!run" => RefusalKind::RunsProgram,
        "!net" => RefusalKind::Network,
        "!state" => RefusalKind::ChangesSystem,
        other => return Err(format!("unknown effect `{other}`")),
    })
}

/// `-o, --output =file !write writes a file`
fn option(line: &'static str) -> Result<Opt, String> {
    let (main, effect) = match line.find(" !") {
        Some(i) => (&line[..i], Some(line[i + 1..].trim())),
        None => (line, None),
    };
    let mut opt = Opt {
        short: Vec::new(),
        long: Vec::new(),
        value: Value::None,
        role: Role::Data,
        more: Vec::new(),
        recursive: false,
        lists_operands: false,
        gives_pattern: false,
        rest_data: false,
        follows_links: false,
        effect: None,
    };
    for word in main.split_whitespace() {
        let word = word.trim_end_matches(',');
        if let Some(long) = word.strip_prefix("--") {
            if long.is_empty() || long.contains('=') {
                return Err(format!("bad long option `{word}`"));
            }
            opt.long.push(long);
        } else if let Some(short) = word.strip_prefix('-') {
            let mut chars = short.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => opt.short.push(c),
                _ => return Err(format!("bad short option `{word}`")),
            }
        } else if let Some(r) = word.strip_prefix("?=") {
            opt.value = Value::Optional;
            opt.role = role(r)?;
        } else if let Some(r) = word.strip_prefix('=') {
            if opt.value == Value::None {
                opt.value = Value::Required;
                opt.role = role(r)?;
            } else {
                opt.more.push(role(r)?);
            }
        } else if word == "+recursive" {
            opt.recursive = true;
        } else if word == "+lists-operands" {
            opt.lists_operands = true;
        } else if word == "+gives-pattern" {
            opt.gives_pattern = true;
        } else if word == "+rest-data" {
            opt.rest_data = true;
        } else if word == "+follows-links" {
            opt.follows_links = true;
        } else {
            return Err(format!("unknown word `{word}`"));
        }
    }
    if opt.short.is_empty() && opt.long.is_empty() {
        return Err("no spelling".into());
    }
    if let Some(e) = effect {
        let (kind, reason) = e.split_once(' ').unwrap_or((e, "is not read-only"));
        opt.effect = Some((effect_kind(kind)?, reason.trim()));
    }
    Ok(opt)
}

/// A word's place in the arguments and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Use<'a> {
    /// The index of the word in the arguments.
    pub word: usize,
    /// The part of the word that is the path (a value after `=`, an
    /// attached value, a response file after `@`).
    pub text: &'a str,
    pub role: Role,
}

/// Arguments as the program reads them.
#[derive(Debug, Default)]
pub(crate) struct Parsed<'a> {
    /// Operands, in order (indices into the arguments).
    pub operands: Vec<usize>,
    /// Every option given, with its value if any and the index of its word.
    pub options: Vec<(&'static Opt, Option<&'a str>, usize)>,
    /// Values of options whose role is a name, file or tree, and response files.
    pub uses: Vec<Use<'a>>,
    /// Some option makes the operands trees.
    pub recursive: bool,
    /// Some option makes the program follow links below its operands.
    pub follows_links: bool,
    /// The operands may be any file (listed in a file, or stdin).
    pub any_operand: bool,
    /// Words the shell may turn into options (a glob, an expansion) of a
    /// program whose options read files.
    pub option_words: Vec<usize>,
    /// The first option that makes the command not read-only (the reading
    /// goes on, so the files it reads are still known).
    pub refusal: Option<Refusal>,
}

/// Could the shell turn this word into one starting with `-` (or `@`)?
pub(crate) fn may_be_option(w: &Word) -> bool {
    if w.is_plain() || w.pipe {
        return false;
    }
    // Names a producer prints: they start as the globs start, unless the
    // shell splits them (a name with a blank gives any word).
    if let Some(globs) = &w.names {
        return w.names_split
            || globs
                .iter()
                .any(|g| g.is_empty() || g.starts_with(['-', '@', '*', '?', '[', '{']));
    }
    // A brace alone (`{a,b}`) becomes its alternatives, which are plain.
    if w.expansion.is_none() && w.glob == Some('{') && !w.text.contains(['-', '*', '?', '[', '@']) {
        return false;
    }
    if let Some(rest) = w.text.strip_prefix('-') {
        // `--pre=$X`, `-f$X`: the option is written; its value is judged as
        // a value. `-$X`, `--$X`: the option itself may be anything.
        let name = match rest.strip_prefix('-') {
            Some(long) => long.split('=').next().unwrap_or(long),
            None => rest.get(..1).unwrap_or(rest),
        };
        return name.is_empty() || name.contains(['$', '`', '*', '?', '[', '{']);
    }
    matches!(
        w.text.as_bytes().first(),
        Some(b'$' | b'`' | b'*' | b'?' | b'[' | b'{' | b'@')
    )
}

/// Read `args` with `program`'s grammar. Refuses unknown, ambiguous or
/// unsafe options, and a word the shell may turn into an option when the
/// program has options that matter.
pub(crate) fn parse<'a>(
    name: &str,
    program: &'static Program,
    args: &'a [Word],
) -> Result<Parsed<'a>, Refusal> {
    let mut parsed = Parsed::default();
    match read_into(name, program, args, &mut parsed) {
        Ok(()) => Ok(parsed),
        // An option already read that writes or runs is the clearer reason
        // (`fd -X sh -c`: clap gives `-c` to the command, this reader to fd).
        Err(e) => Err(parsed.refusal.take().unwrap_or(e)),
    }
}

fn read_into<'a>(
    name: &str,
    program: &'static Program,
    args: &'a [Word],
    parsed: &mut Parsed<'a>,
) -> Result<(), Refusal> {
    let mut i = 0;
    let mut end = false;
    let consequential = program.has_consequential_option() || program.response_files;
    if program.response_files {
        // binutils expand every whole `@FILE` argument before reading options.
        for (j, w) in args.iter().enumerate() {
            response_file(w, j, parsed);
        }
    }
    while let Some(w) = args.get(i) {
        let a = w.text.as_str();
        if !end && may_be_option(w) && consequential && !program.has_effect() {
            // It may become options that read files: which files, only the
            // disk can tell (does the glob match a name starting with `-`?).
            parsed.option_words.push(i);
            parsed.operands.push(i);
            if program.posix {
                end = true;
            }
            i += 1;
            continue;
        }
        if !end && may_be_option(w) && consequential {
            return Err(Refusal::with_kind(
                RefusalKind::Expansion,
                format!(
                    "expansion or glob `{}` in the arguments of `{name}` may become an option that writes or runs",
                    w.text
                ),
            ));
        }
        if end || a == "-" || !a.starts_with('-') {
            parsed.operands.push(i);
            if program.posix {
                end = true;
            }
            i += 1;
            continue;
        }
        if a == "--" {
            if program.no_dashdash {
                return Err(Refusal::with_kind(
                    RefusalKind::UnknownOption,
                    format!("`{name} --`: its reader can take `--` as an option's value"),
                ));
            }
            end = true;
            i += 1;
            continue;
        }
        if program.negative_numbers
            && a.len() > 1
            && a[1..].bytes().all(|b| b.is_ascii_digit() || b == b'.')
            && a[1..].bytes().any(|b| b.is_ascii_digit())
        {
            parsed.operands.push(i);
            end = true;
            i += 1;
            continue;
        }
        let last: &'static Opt;
        if let Some(long) = a.strip_prefix("--") {
            let (spelled, attached) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            let (opt, full) = find_long(name, program, spelled)?;
            let shown = format!("--{full}");
            last = opt;
            i += 1;
            match (opt.value, attached) {
                (Value::None, Some(_)) => {
                    return Err(Refusal::with_kind(
                        RefusalKind::UnknownOption,
                        format!("`{name} --{spelled}` takes no value"),
                    ))
                }
                (Value::None, None) | (Value::Optional, None) => {
                    parsed.record(name, &shown, opt, None, i - 1)?
                }
                (_, Some(v)) => {
                    // A glob over `--opt=VALUE` only matches names that
                    // start with `--opt=`: the same option, once per match.
                    // An expansion can split into other words.
                    if w.expansion.is_some() && consequential {
                        return Err(bad_value(name, &shown, opt, w));
                    }
                    let v = if program.strip_equals {
                        v.trim_start_matches('=')
                    } else {
                        v
                    };
                    parsed.record(name, &shown, opt, Some(v), i - 1)?;
                }
                (Value::Required, None) => {
                    let next = args.get(i).ok_or_else(|| missing_value(name, a))?;
                    if !next.is_plain() && consequential {
                        return Err(bad_value(name, &shown, opt, next));
                    }
                    parsed.record(name, &shown, opt, Some(next.text.as_str()), i)?;
                    i += 1;
                }
            }
        } else {
            // A cluster of short options.
            let cluster = &a[1..];
            let mut next_is_value = None;
            let mut final_opt = None;
            for (j, ch) in cluster.char_indices() {
                let opt = find_short(name, program, ch)?;
                let shown = format!("-{ch}");
                final_opt = Some(opt);
                if opt.value == Value::None {
                    parsed.record(name, &shown, opt, None, i)?;
                    continue;
                }
                let rest = &cluster[j + ch.len_utf8()..];
                if !rest.is_empty() {
                    // As with `--opt=VALUE`: a glob over `-oVALUE` keeps the
                    // option (only when it is the cluster's first letter).
                    let glob_keeps_option = w.expansion.is_none() && j == 0;
                    if !w.is_plain() && consequential && !glob_keeps_option {
                        return Err(bad_value(name, &shown, opt, w));
                    }
                    let rest = if program.strip_equals {
                        rest.trim_start_matches('=')
                    } else {
                        rest
                    };
                    parsed.record(name, &shown, opt, Some(rest), i)?;
                } else if opt.value == Value::Required {
                    next_is_value = Some((opt, shown));
                } else {
                    parsed.record(name, &shown, opt, None, i)?;
                }
                break;
            }
            i += 1;
            if let Some((opt, shown)) = next_is_value {
                let next = args.get(i).ok_or_else(|| missing_value(name, a))?;
                if !next.is_plain() && consequential {
                    return Err(bad_value(name, &shown, opt, next));
                }
                parsed.record(name, &shown, opt, Some(next.text.as_str()), i)?;
                i += 1;
            }
            let Some(opt) = final_opt else {
                continue;
            };
            last = opt;
        }
        // Values beyond the first, each the next word.
        for role in &last.more {
            let next = args.get(i).ok_or_else(|| missing_value(name, a))?;
            if !next.is_plain() && consequential {
                return Err(value_expansion(name, next));
            }
            if *role != Role::Data {
                parsed.uses.push(Use {
                    word: i,
                    text: next.text.as_str(),
                    role: *role,
                });
            }
            i += 1;
        }
    }
    if let Some((max, why)) = program.max_operands {
        if parsed.operands.len() > max && parsed.refusal.is_none() {
            parsed.refusal = Some(Refusal::with_kind(
                RefusalKind::Writes,
                format!("`{name}` with more than {max} operand(s) {why}"),
            ));
        }
    }
    Ok(())
}

impl<'a> Parsed<'a> {
    fn record(
        &mut self,
        name: &str,
        shown: &str,
        opt: &'static Opt,
        value: Option<&'a str>,
        word: usize,
    ) -> Result<(), Refusal> {
        if let Some((kind, why)) = opt.effect {
            if self.refusal.is_none() {
                self.refusal = Some(Refusal::with_kind(kind, format!("`{name} {shown}` {why}")));
            }
        }
        if opt.recursive {
            self.recursive = true;
        }
        if opt.follows_links {
            self.follows_links = true;
        }
        if opt.lists_operands {
            self.any_operand = true;
        }
        if let Some(text) = value {
            if opt.role != Role::Data && !text.is_empty() {
                if text == "-" && opt.lists_operands {
                    // Operands from stdin: already any file.
                } else {
                    self.uses.push(Use {
                        word,
                        text,
                        role: opt.role,
                    });
                }
            }
        }
        self.options.push((opt, value, word));
        Ok(())
    }

    /// The reads that the words alone do not show: option values that are
    /// files, response files, and operands that may be any file.
    pub(crate) fn reads(&self, program: &Program, args: &[Word]) -> Vec<FileRead> {
        let mut out: Vec<FileRead> = self
            .uses
            .iter()
            .filter(|u| matches!(u.role, Role::File | Role::Tree))
            .map(|u| FileRead {
                target: ReadTarget::Path(u.text.to_string()),
                tree: u.role == Role::Tree,
            })
            .collect();
        for &i in &self.option_words {
            let Some(w) = args.get(i) else {
                continue;
            };
            match &w.names {
                // Names a producer prints: options only where a match
                // starts so (a name split at a blank is checked by the
                // policy as the word's path, which then may be any file).
                Some(globs) => out.extend(globs.iter().map(|g| FileRead {
                    target: ReadTarget::OptionsIn(g.clone()),
                    tree: true,
                })),
                None => out.push(FileRead {
                    target: ReadTarget::OptionsIn(w.text.clone()),
                    tree: true,
                }),
            }
        }
        if self.any_operand && matches!(program.operands, Role::File | Role::Tree) {
            out.push(FileRead {
                target: ReadTarget::Any,
                tree: self.recursive || program.operands == Role::Tree,
            });
        }
        out
    }
}

/// `@FILE` in an argument of a program that expands response files (in an
/// option's value too: binutils expand every argument before getopt).
fn response_file<'a>(w: &'a Word, i: usize, parsed: &mut Parsed<'a>) {
    let text = w.text.as_str();
    // `-s@F`, `--x=@F` are not expanded (only whole arguments are); the
    // whole word `@F` is, wherever it stands.
    if let Some(file) = text.strip_prefix('@') {
        if !file.is_empty() {
            parsed.uses.push(Use {
                word: i,
                text: file,
                role: Role::File,
            });
        }
    }
}

fn find_short(name: &str, program: &'static Program, ch: char) -> Result<&'static Opt, Refusal> {
    program
        .options
        .iter()
        .find(|o| o.short.contains(&ch))
        .ok_or_else(|| {
            Refusal::with_kind(
                RefusalKind::UnknownOption,
                format!("`{name}` option `-{ch}` is not understood"),
            )
        })
}

fn find_long(
    name: &str,
    program: &'static Program,
    spelled: &str,
) -> Result<(&'static Opt, &'static str), Refusal> {
    for o in &program.options {
        if let Some(full) = o.long.iter().find(|l| **l == spelled) {
            return Ok((o, full));
        }
    }
    let unknown = || {
        Refusal::with_kind(
            RefusalKind::UnknownOption,
            format!("`{name}` option `--{spelled}` is not understood"),
        )
    };
    if program.no_abbrev || spelled.is_empty() {
        return Err(unknown());
    }
    let hits: Vec<(&'static Opt, &'static str)> = program
        .options
        .iter()
        .flat_map(|o| {
            o.long
                .iter()
                .filter(|l| l.starts_with(spelled))
                .map(move |l| (o, *l))
        })
        .collect();
    match hits.as_slice() {
        [] => Err(unknown()),
        [one] => Ok(*one),
        [first, rest @ ..] => {
            // An abbreviation of several options: if any of them is unsafe,
            // say so (getopt refuses the ambiguity, but a refusal that names
            // the unsafe option is the clearer answer either way).
            if let Some((bad, full)) = hits.iter().find(|(o, _)| o.effect.is_some()) {
                if let Some((kind, why)) = bad.effect {
                    return Err(Refusal::with_kind(kind, format!("`{name} --{full}` {why}")));
                }
            }
            if rest.iter().all(|(o, _)| std::ptr::eq(*o, first.0)) {
                return Ok(*first);
            }
            Err(Refusal::with_kind(
                RefusalKind::UnknownOption,
                format!("`{name}` option `--{spelled}` is ambiguous"),
            ))
        }
    }
}

fn missing_value(name: &str, a: &str) -> Refusal {
    Refusal::with_kind(
        RefusalKind::UnknownOption,
        format!("`{name} {a}` needs a value"),
    )
}

/// An option whose value the shell expands: its own effect if it has one,
/// else the expansion.
fn bad_value(name: &str, shown: &str, opt: &Opt, w: &Word) -> Refusal {
    match opt.effect {
        Some((kind, why)) => Refusal::with_kind(kind, format!("`{name} {shown}` {why}")),
        None => value_expansion(name, w),
    }
}

fn value_expansion(name: &str, w: &Word) -> Refusal {
    Refusal::with_kind(
        RefusalKind::Expansion,
        format!(
            "expansion or glob in `{}`, a value of an option of `{name}`, cannot be proven read-only",
            w.text
        ),
    )
}

/// How `name` reads each of `args` as a path (see [`crate::path_words`]).
pub(crate) fn path_words(name: &str, args: &[&str]) -> Option<crate::PathWords> {
    use crate::{PathRole, PathWord};
    if matches!(name, "awk" | "gawk" | "mawk" | "nawk" | "original-awk") {
        let words: Vec<Word> = args.iter().map(|a| Word::literal(a)).collect();
        let command = crate::awk::awk_command(name, &words).ok()?;
        let words = command
            .files
            .iter()
            .map(|&i| PathWord {
                word: i,
                range: 0..args.get(i).map_or(0, |a| a.len()),
                role: PathRole::File,
            })
            .collect();
        return Some(crate::PathWords {
            words,
            searches_here: false,
            any_file: false,
            follows_links: false,
        });
    }
    // `unzip -Z ARGS` is `zipinfo ARGS`.
    if name == "unzip" && args.first() == Some(&"-Z") {
        let mut paths = path_words("zipinfo", &args[1..])?;
        for w in &mut paths.words {
            w.word += 1;
        }
        return Some(paths);
    }
    let program = program(name)?;
    // `tar tzf A.tar`: the old-style letters, as tar reads them.
    if name == "tar" {
        if let Some(pieces) = args
            .first()
            .and_then(|first| tar_old_style(program, first, args.len()))
        {
            let texts: Vec<String> = pieces
                .iter()
                .map(|p| match p {
                    Piece::Letter(c) => format!("-{c}"),
                    Piece::Word(i) => args.get(*i).copied().unwrap_or_default().to_string(),
                })
                .collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let mut paths = path_words_as_read(name, program, &refs)?;
            for w in &mut paths.words {
                w.word = match pieces.get(w.word) {
                    Some(Piece::Word(i)) => *i,
                    _ => 0,
                };
            }
            return Some(paths);
        }
    }
    // `head -20 F`: the obsolete count, as the judge reads it.
    if let Some(first) = args.first() {
        if crate::programs::legacy_count(name, first, args.len()) {
            let mut paths = path_words_as_read(name, program, &args[1..])?;
            for w in &mut paths.words {
                w.word += 1;
            }
            return Some(paths);
        }
    }
    path_words_as_read(name, program, args)
}

/// [`path_words`] for arguments as the program reads them.
fn path_words_as_read(
    name: &str,
    program: &'static Program,
    args: &[&str],
) -> Option<crate::PathWords> {
    use crate::{PathRole, PathWord};
    let words: Vec<Word> = args.iter().map(|a| Word::literal(a)).collect();
    let parsed = parse(name, program, &words).ok()?;
    // The model of an archiver describes listing only: when the command
    // creates, extracts or changes an archive (refused), or names no mode,
    // its operands are files it reads or writes, not member names, and the
    // caller reads every word as a path instead.
    let lists = parsed
        .options
        .iter()
        .any(|(opt, _, _)| opt.short.contains(&'t') || opt.long.contains(&"list"));
    if (name == "tar" || program.archive_operand) && parsed.refusal.is_some()
        || name == "tar" && !lists
    {
        return None;
    }
    let role_of = |r: Role| match r {
        Role::Data => None,
        Role::Name => Some(PathRole::Name),
        Role::File => Some(PathRole::File),
        Role::Tree => Some(PathRole::Tree),
    };
    let mut out = Vec::new();
    for u in &parsed.uses {
        let Some(role) = role_of(u.role) else {
            continue;
        };
        let text = args.get(u.word).copied().unwrap_or_default();
        let start = (u.text.as_ptr() as usize).saturating_sub(words[u.word].text.as_ptr() as usize);
        let start = start.min(text.len());
        out.push(PathWord {
            word: u.word,
            range: start..(start + u.text.len()).min(text.len()),
            role,
        });
    }
    let operand_role = match (program.operands, parsed.recursive) {
        (Role::File, true) | (Role::Name, true) => Role::Tree,
        (r, _) => r,
    };
    let pattern_given = parsed.options.iter().any(|(o, _, _)| o.gives_pattern);
    // `jq --args`: the operands after it are strings.
    let rest_data_from = parsed
        .options
        .iter()
        .filter(|(o, _, _)| o.rest_data)
        .map(|(_, _, at)| *at)
        .min();
    let mut operands = parsed.operands.clone();
    // Without GNU permutation (POSIXLY_CORRECT) every word after the first
    // operand is an operand: what either reading takes for a path counts.
    if let Some(&first) = operands.first() {
        if !program.posix {
            for i in first + 1..args.len() {
                if !operands.contains(&i) {
                    operands.push(i);
                }
            }
        }
    }
    operands.sort_unstable();
    let first_operand = parsed.operands.first().copied();
    let mut has_path_operand = false;
    for &i in &operands {
        if program.pattern_operand && !pattern_given && Some(i) == first_operand {
            continue;
        }
        if rest_data_from.is_some_and(|at| i > at) {
            continue;
        }
        let role = if program.archive_operand && Some(i) == first_operand {
            Some(PathRole::File)
        } else {
            role_of(operand_role)
        };
        let Some(role) = role else {
            continue;
        };
        if parsed.operands.contains(&i) {
            has_path_operand = true;
        }
        let len = args.get(i).map_or(0, |a| a.len());
        out.push(PathWord {
            word: i,
            range: 0..len,
            role,
        });
    }
    let searches_here = match program.searches_here {
        Some(SearchesHere::Always) => !has_path_operand,
        Some(SearchesHere::WhenRecursive) => parsed.recursive && !has_path_operand,
        None => false,
    };
    Some(crate::PathWords {
        words: out,
        searches_here,
        any_file: parsed.any_operand,
        follows_links: parsed.follows_links || program.follows_links,
    })
}

/// One argument of tar's old-style call as tar rewrites it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Piece {
    /// A letter of the first word, which tar reads as `-LETTER`.
    Letter(char),
    /// The word at this index of the arguments.
    Word(usize),
}

/// GNU tar's old-style call (`tar tzf A.tar MEMBER`): when the first word
/// does not start with `-`, each of its letters is an option, and each
/// letter that takes a value takes the next word in turn (tar.c rewrites
/// `tar tfb A 20 M` to `tar -t -f A -b 20 M`). The arguments as tar reads
/// them; `None` when the call is not old-style.
pub(crate) fn tar_old_style(program: &Program, first: &str, count: usize) -> Option<Vec<Piece>> {
    if count == 0 || first.starts_with('-') {
        return None;
    }
    let mut out = Vec::new();
    let mut next = 1;
    for c in first.chars() {
        out.push(Piece::Letter(c));
        let takes_value = program
            .options
            .iter()
            .find(|o| o.short.contains(&c))
            .is_some_and(|o| o.value != Value::None);
        if takes_value && next < count {
            out.push(Piece::Word(next));
            next += 1;
        }
    }
    out.extend((next..count).map(Piece::Word));
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
    use super::*;

    #[test]
    fn every_block_parses() {
        for block in blocks(PROGRAMS) {
            if let Err(e) = parse_block(block) {
                panic!("{e}");
            }
        }
    }

    /// A fuzz crash (`du \xdc`, decoded as U+FFFD): a first word that starts
    /// with a multi-byte character is no obsolete count.
    #[test]
    fn multibyte_first_arguments() {
        for script in ["du \u{fffd}", "head \u{fffd}5", "tail \u{fffd}", "wc é -l"] {
            let _ = crate::analyze(crate::Script::Text(script), &crate::Options::default());
        }
    }

    /// Options that follow the links below a directory operand say so;
    /// the same reads without them do not.
    #[test]
    fn link_following_options() {
        for (name, args, follows) in [
            ("grep", &["-R", "KEY", "docs"][..], true),
            ("grep", &["--dereference-recursive", "KEY"][..], true),
            ("grep", &["-r", "KEY", "docs"][..], false),
            ("rg", &["-L", "KEY"][..], true),
            ("rg", &["--follow", "KEY", "docs"][..], true),
            ("rg", &["KEY", "docs"][..], false),
            ("tree", &["-l", "docs"][..], true),
            ("tree", &["docs"][..], false),
            ("ls", &["-RL", "docs"][..], true),
            ("du", &["-L", "docs"][..], true),
            ("diff", &["docs", "other"][..], true),
        ] {
            let words = path_words(name, args).unwrap();
            assert_eq!(words.follows_links, follows, "{name} {args:?}");
        }
    }

    #[test]
    fn names_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for block in blocks(PROGRAMS) {
            let p = parse_block(block).unwrap();
            for n in p.names {
                assert!(seen.insert(n), "{n} is described twice");
            }
        }
    }
}
