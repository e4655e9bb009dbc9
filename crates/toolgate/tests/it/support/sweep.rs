//! The option sweep: every option of every program of `programs.txt`, alone and in
//! pairs, with hostile values, run through the execution oracle.
//!
//! [`parse`] reads the option model (its own small reader, independent of the
//! broker's: the format is the file's header comment). [`plan`] turns it into
//! [`Candidate`]s: each option alone and in pairs, its value attached (`-oV`,
//! `--opt=V`, and `-o=V`, whose value is `=V`) and separate (`-o V`, `--opt V`;
//! for an optional value, which is only attached, the next word is an operand),
//! long options abbreviated to their shortest unique prefix, short ones clustered
//! after a flag (`-ao V`, `-aoV`), placed after another option's value or after the
//! operands, with values and operands that are guarded files (`.env`,
//! `secrets/key`), response files (`@.env`), `-`, links (`docs/cfg -> ../.env`,
//! `docs/etc -> /etc`), lists of guarded names (`lists/guarded0`), absent files and
//! write targets (`out`). Wrappers (`posix` blocks) get a command after their
//! options (`timeout 5 ls`). [`run`] asks the broker (plan mode) and executes what
//! it allows under bash and dash in the hostile [`World`] (several worlds in
//! parallel), attributing each violation and guarded read to the program and
//! options of its command.
//!
//! Everything is deterministic: each program's commands come from the seed and the
//! program's name (a program added to the file changes only which pairs a capped
//! sample takes from the others).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)] // test support

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::oracle::{self, Candidate, Form, Rng, Tally, World};

/// The option model the broker reads.
pub const PROGRAMS: &str = include_str!("../../../../toolgate-shell/programs.txt");

/// What a value or an operand is to its program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Data,
    Name,
    File,
    Tree,
}

/// Whether an option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// A flag.
    Nothing,
    /// Attached or the next word (`=ROLE`).
    Value,
    /// Only attached (`?=ROLE`).
    Attached,
}

/// One option line.
#[derive(Debug, Clone)]
pub struct Opt {
    pub short: Vec<char>,
    pub long: Vec<String>,
    pub takes: Takes,
    pub role: Role,
    /// Further values, each the next word.
    pub more: Vec<Role>,
    /// `+recursive`, `+lists-operands`.
    pub flags: Vec<String>,
    /// `!write ...` and the like: the broker must refuse the option.
    pub effect: Option<String>,
}

impl Opt {
    /// The option's name in reports: its first long spelling, else its first short one.
    pub fn label(&self) -> String {
        match (self.long.first(), self.short.first()) {
            (Some(l), _) => format!("--{l}"),
            (None, Some(c)) => format!("-{c}"),
            (None, None) => "?".into(),
        }
    }

    fn lists_operands(&self) -> bool {
        self.flags.iter().any(|f| f == "+lists-operands")
    }
}

/// One program block.
#[derive(Debug, Clone)]
pub struct Program {
    pub names: Vec<String>,
    pub operands: Role,
    /// Options end at the first operand: a wrapper, whose operands are a command.
    pub posix: bool,
    pub response_files: bool,
    pub no_abbrev: bool,
    pub max_operands: Option<usize>,
    /// `archive-operand`: the first operand is an archive (unzip, zipinfo); such
    /// a `posix` block is no wrapper (its operands are not a command).
    pub archive_operand: bool,
    pub options: Vec<Opt>,
}

impl Program {
    pub fn name(&self) -> &str {
        &self.names[0]
    }
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

/// Read the model, on purpose with a reader of the sweep's own (not the
/// shell crate's): a value role the crate's reader got wrong is swept with
/// the hostile values of the role the file states, so the mistake shows as
/// a guarded read or a write instead of being mirrored.
///
/// `[names]` starts a block; comment lines and attribute lines
/// other than `operands`, `posix`, `response-files`, `no-abbrev`,
/// `archive-operand` and `max-operands` are skipped; lines starting with `-` are options.
pub fn parse(text: &str) -> Result<Vec<Program>, String> {
    let mut programs: Vec<Program> = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split(" #").next().unwrap_or_default().trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |e: String| format!("programs.txt:{}: `{line}`: {e}", n + 1);
        if let Some(head) = line.strip_prefix('[') {
            let names: Vec<String> = head
                .strip_suffix(']')
                .ok_or_else(|| at("a header is `[name alias...]`".into()))?
                .split_whitespace()
                .map(String::from)
                .collect();
            if names.is_empty() {
                return Err(at("the header names no program".into()));
            }
            programs.push(Program {
                names,
                operands: Role::File,
                posix: false,
                response_files: false,
                no_abbrev: false,
                max_operands: None,
                archive_operand: false,
                options: Vec::new(),
            });
            continue;
        }
        let Some(program) = programs.last_mut() else {
            return Err(at("outside a program block".into()));
        };
        if line.starts_with('-') {
            program.options.push(option(line).map_err(at)?);
            continue;
        }
        let mut words = line.split_whitespace();
        match words.next().unwrap_or_default() {
            "operands" => program.operands = role(words.next().unwrap_or_default()).map_err(at)?,
            "posix" => program.posix = true,
            "response-files" => program.response_files = true,
            "no-abbrev" => program.no_abbrev = true,
            "archive-operand" => program.archive_operand = true,
            "max-operands" => {
                program.max_operands = Some(
                    words
                        .next()
                        .and_then(|w| w.parse().ok())
                        .ok_or_else(|| at("max-operands needs a number".into()))?,
                );
            }
            _ => {} // `source` and whatever else describes the block
        }
    }
    // An archive lister's options end at its archive, but it runs no command:
    // swept as an ordinary program (options after the archive are tried too).
    for p in &mut programs {
        if p.archive_operand {
            p.posix = false;
        }
    }
    Ok(programs)
}

/// `-o, --output =name +FLAG !write writes a file`
fn option(line: &str) -> Result<Opt, String> {
    let (main, effect) = match line.find(" !") {
        Some(i) => (&line[..i], Some(line[i + 1..].trim().to_string())),
        None => (line, None),
    };
    let mut opt = Opt {
        short: Vec::new(),
        long: Vec::new(),
        takes: Takes::Nothing,
        role: Role::Data,
        more: Vec::new(),
        flags: Vec::new(),
        effect,
    };
    for word in main.split_whitespace() {
        let word = word.trim_end_matches(',');
        if let Some(long) = word.strip_prefix("--") {
            if long.is_empty() || long.contains('=') {
                return Err(format!("bad long option `{word}`"));
            }
            opt.long.push(long.to_string());
        } else if let Some(short) = word.strip_prefix('-') {
            let mut chars = short.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => opt.short.push(c),
                _ => return Err(format!("bad short option `{word}`")),
            }
        } else if let Some(r) = word.strip_prefix("?=") {
            opt.takes = Takes::Attached;
            opt.role = role(r)?;
        } else if let Some(r) = word.strip_prefix('=') {
            if opt.takes == Takes::Nothing {
                opt.takes = Takes::Value;
                opt.role = role(r)?;
            } else {
                opt.more.push(role(r)?);
            }
        } else if word.starts_with('+') {
            opt.flags.push(word.to_string());
        } else {
            return Err(format!("unknown word `{word}`"));
        }
    }
    if opt.short.is_empty() && opt.long.is_empty() {
        return Err("no spelling".into());
    }
    Ok(opt)
}

/// Values tried for every option that takes one: write targets, guarded files,
/// response files, stdin, links, lists of guarded names, ordinary and absent
/// files, a directory, data, paths outside the project.
pub const VALUES: &[&str] = &[
    "out",
    ".env",
    "@.env",
    "-",
    "docs/cfg",
    "lists/guarded0",
    "docs/etc",
    "README.md",
    "absent.txt",
    "secrets/key",
    "src",
    "3",
    "%e",
    "../neighbour/file.txt",
    ".env.production",
    "lists/guarded",
    "docs/etc/passwd",
];

/// The values the full sweep tries with every form (the rest in rotation).
const KEY_VALUES: usize = 6;

/// Operands of ordinary programs (`""`: none; `README.md out`: a second operand a
/// program such as `uniq` writes).
pub const OPERANDS: &[&str] = &[
    "README.md",
    ".env",
    "docs/cfg",
    "-",
    "@.env",
    "docs/etc",
    "absent.txt",
    "src",
    "secrets/key",
    "lists/guarded0",
    "README.md out",
    "docs/etc/passwd",
    "",
];

/// Commands after a wrapper's options.
pub const COMMANDS: &[&str] = &[
    "ls",
    "cat README.md",
    "cat docs/cfg",
    "wc -c .env",
    "true",
    "ls docs/etc",
];

/// Operands a wrapper takes before its command (`timeout DURATION COMMAND`).
fn wrapper_operands(name: &str) -> &'static str {
    match name {
        "timeout" => "5 ",
        _ => "",
    }
}

/// Operands a program takes before its files (a pattern: `grep PATTERN FILE`),
/// so that a file operand is one (without it, `rg -n README.md` searches `.`).
fn leading_operands(name: &str) -> &'static str {
    match name {
        "grep" | "egrep" | "fgrep" | "rg" => "x ",
        "jq" | "fd" | "fdfind" => ". ",
        // An archive to list (the operands are then member names).
        "tar" => "-tf archives/evil.tar ",
        "unzip" | "zipinfo" => "archives/evil.zip ",
        _ => "",
    }
}

/// How an option is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `-o V`; a flag `-a`.
    Short,
    /// `-oV`.
    ShortAttached,
    /// `-o=V` (the value is `=V`).
    ShortEquals,
    /// `--output V`; a flag `--all`.
    Long,
    /// `--output=V`.
    LongAttached,
    /// `--outp V` (the shortest unique prefix); a flag `--al`.
    Abbrev,
    /// `--outp=V`.
    AbbrevAttached,
    /// `-ao V` after a flag `-a`; a flag `-ya`.
    Cluster,
    /// `-aoV`; a flag first in its cluster, `-ay`.
    ClusterAttached,
    /// An optional value left out (`--time`).
    Bare,
}

const SHAPES: [Shape; 10] = [
    Shape::Short,
    Shape::ShortAttached,
    Shape::ShortEquals,
    Shape::Long,
    Shape::LongAttached,
    Shape::Abbrev,
    Shape::AbbrevAttached,
    Shape::Cluster,
    Shape::ClusterAttached,
    Shape::Bare,
];

/// Where the option goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Alone,
    /// After another option and its value (`-d 3 -o V`).
    AfterValue,
    /// After the operands (GNU permutation; not for `posix` programs).
    AfterOperand,
}

/// The shortest prefix of `long` that no other option's long spelling starts with
/// (and that is shorter than `long`).
fn abbreviation(p: &Program, opt: usize, long: &str) -> Option<String> {
    let others: Vec<&str> = p
        .options
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != opt)
        .flat_map(|(_, o)| o.long.iter().map(String::as_str))
        .collect();
    (1..long.len())
        .filter(|&k| long.is_char_boundary(k))
        .map(|k| &long[..k])
        .find(|prefix| !others.iter().any(|o| o.starts_with(prefix)))
        .map(str::to_string)
}

/// The flags another option can be clustered with (no value, no effect, a short
/// spelling).
fn partners(p: &Program, opt: usize) -> Vec<char> {
    p.options
        .iter()
        .enumerate()
        .filter(|(i, o)| *i != opt && o.takes == Takes::Nothing && o.effect.is_none())
        .filter_map(|(_, o)| o.short.first().copied())
        .filter(|c| c.is_ascii_alphanumeric())
        .collect()
}

/// The words of option `opt` written in `shape` with its `k`-th spelling of that
/// kind; `None` when the option cannot be written so.
fn words(
    p: &Program,
    opt: usize,
    shape: Shape,
    k: usize,
    value: &str,
    more: &[&str],
    partner: Option<char>,
) -> Option<Vec<String>> {
    let o = &p.options[opt];
    let short = (!o.short.is_empty()).then(|| o.short[k % o.short.len()]);
    let long = (!o.long.is_empty()).then(|| o.long[k % o.long.len()].clone());
    let abbrev = || {
        if p.no_abbrev {
            None
        } else {
            long.as_deref().and_then(|l| abbreviation(p, opt, l))
        }
    };
    let flag = o.takes == Takes::Nothing;
    let optional = o.takes == Takes::Attached;
    let mut out: Vec<String> = match shape {
        Shape::Short => vec![format!("-{}", short?)],
        Shape::Long => vec![format!("--{}", long?)],
        Shape::Abbrev => vec![format!("--{}", abbrev()?)],
        Shape::Cluster => vec![format!("-{}{}", partner?, short?)],
        Shape::ShortAttached if !flag => vec![format!("-{}{value}", short?)],
        Shape::ShortEquals if !flag => vec![format!("-{}={value}", short?)],
        Shape::LongAttached if !flag => vec![format!("--{}={value}", long?)],
        Shape::AbbrevAttached if !flag => vec![format!("--{}={value}", abbrev()?)],
        Shape::ClusterAttached if flag => vec![format!("-{}{}", short?, partner?)],
        Shape::ClusterAttached => vec![format!("-{}{}{value}", partner?, short?)],
        Shape::Bare if optional => {
            return Some(vec![match (&long, short) {
                (Some(l), _) => format!("--{l}"),
                (None, Some(c)) => format!("-{c}"),
                (None, None) => return None,
            }])
        }
        _ => return None,
    };
    let attached = matches!(
        shape,
        Shape::ShortAttached | Shape::ShortEquals | Shape::LongAttached | Shape::AbbrevAttached
    ) || (shape == Shape::ClusterAttached && !flag);
    // A separate value of an optional-value option is an operand (or the command
    // of a wrapper): tried too.
    if !flag && !attached {
        out.push(value.to_string());
    }
    if !flag {
        out.extend(more.iter().map(|m| m.to_string()));
    }
    Some(out)
}

/// The shapes option `opt` can be written in, with the spelling index: each
/// distinct way once.
fn shapes(p: &Program, opt: usize) -> Vec<(Shape, usize)> {
    let o = &p.options[opt];
    let partner = partners(p, opt).first().copied();
    let spellings = o.short.len().max(o.long.len()).max(1);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for shape in SHAPES {
        for k in 0..spellings {
            if let Some(w) = words(p, opt, shape, k, "V", &[], partner) {
                if seen.insert(w) {
                    out.push((shape, k));
                }
            }
        }
    }
    out
}

/// One candidate of the sweep, with the program and options it exercises.
#[derive(Debug, Clone)]
pub struct Swept {
    pub candidate: Candidate,
    /// Index into the programs.
    pub program: usize,
    /// Indices into the program's options.
    pub options: Vec<usize>,
}

/// How much to generate.
#[derive(Debug, Clone, Copy)]
pub enum Budget {
    /// Every option alone once (a flag in a seeded shape, place and operand, an
    /// option with a value with a value hostile for its role, again with
    /// `lists/guarded0` when it lists operands), and `pairs` seeded pairs (the
    /// programs in turn, each its next pair).
    Slice { pairs: usize },
    /// Every option alone in every shape and spelling, after another option's
    /// value and after the operands, with every value (an option with a value) or
    /// every operand (a flag); and every pair of options of a program, or a seeded
    /// sample of `max_pairs` (the programs in turn).
    Full { max_pairs: Option<usize> },
}

/// What [`plan`] made.
#[derive(Debug, Default)]
pub struct Plan {
    pub swept: Vec<Swept>,
    /// Pairs of options of the programs swept, and how many of them were taken.
    pub pairs_total: usize,
    pub pairs_taken: usize,
}

fn name_hash(name: &str) -> u64 {
    // FNV-1a: stable across runs and Rust versions.
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A value meant to hurt an option of this role.
fn hostile(p: &Program, o: &Opt, rng: &mut Rng) -> &'static str {
    match o.role {
        Role::Data if p.response_files => "@.env",
        Role::Data => ["3", "%e", ".env", "@.env"][rng.below(4)],
        Role::Name => "out",
        Role::File | Role::Tree => ".env",
    }
}

/// Builds one program's commands.
struct Maker<'a> {
    p: &'a Program,
    index: usize,
    rng: Rng,
    seen: &'a mut BTreeSet<String>,
    out: &'a mut Vec<Swept>,
}

/// One option as it is written in a command.
#[derive(Debug, Clone, Copy)]
struct Use {
    opt: usize,
    shape: Shape,
    k: usize,
    value: &'static str,
}

impl Maker<'_> {
    fn more_values(&mut self, opt: usize) -> Vec<&'static str> {
        let n = self.p.options[opt].more.len();
        (0..n).map(|_| *self.rng.pick(VALUES)).collect()
    }

    fn partner(&mut self, opt: usize) -> Option<char> {
        let partners = partners(self.p, opt);
        (!partners.is_empty()).then(|| *self.rng.pick(&partners))
    }

    fn random_shape(&mut self, opt: usize) -> (Shape, usize) {
        *self.rng.pick(&shapes(self.p, opt))
    }

    fn random_operand(&mut self) -> &'static str {
        if self.p.posix {
            COMMANDS[self.rng.below(COMMANDS.len())]
        } else {
            OPERANDS[self.rng.below(OPERANDS.len())]
        }
    }

    fn random_place(&mut self) -> Place {
        match self.rng.below(10) {
            0 | 1 => Place::AfterValue,
            // Options after an archive are refused (`unzip A -d out`): the full
            // sweep tries them; the slice runs the archive listers' options.
            2 | 3 if !self.p.posix && !self.p.archive_operand => Place::AfterOperand,
            _ => Place::Alone,
        }
    }

    /// Write the command; `false` when it cannot be written (or was made before).
    fn emit(&mut self, uses: &[Use], operand: &str, place: Place, name: usize) -> bool {
        let p = self.p;
        let mut opts: Vec<String> = Vec::new();
        for u in uses {
            let more = self.more_values(u.opt);
            let partner = self.partner(u.opt);
            match words(p, u.opt, u.shape, u.k, u.value, &more, partner) {
                Some(w) => opts.extend(w),
                None => return false,
            }
        }
        if place == Place::AfterValue {
            // Another option with a value goes first (a data one, without an effect).
            let used: Vec<usize> = uses.iter().map(|u| u.opt).collect();
            let before: Vec<usize> = (0..p.options.len())
                .filter(|i| {
                    let o = &p.options[*i];
                    !used.contains(i) && o.takes == Takes::Value && o.effect.is_none()
                })
                .collect();
            if before.is_empty() {
                return false;
            }
            let b = before
                .iter()
                .copied()
                .find(|i| p.options[*i].role == Role::Data)
                .unwrap_or(before[0]);
            let o = &p.options[b];
            let mut first = match (o.short.first(), o.long.first()) {
                (Some(c), _) => vec![format!("-{c}"), "3".to_string()],
                (None, Some(l)) => vec![format!("--{l}=3")],
                (None, None) => return false,
            };
            first.extend(o.more.iter().map(|_| "3".to_string()));
            first.extend(opts);
            opts = first;
        }
        // An option whose file lists the operands: no file operands (they would not
        // combine).
        let operand = if uses.iter().any(|u| p.options[u.opt].lists_operands()) {
            ""
        } else {
            operand
        };
        let tail = if p.posix {
            format!("{}{operand}", wrapper_operands(p.name()))
        } else {
            format!("{}{operand}", leading_operands(p.name()))
        };
        let tail = tail.trim_end().to_string();
        let mut parts = vec![p.names[name % p.names.len()].clone()];
        if place == Place::AfterOperand && !p.posix {
            parts.push(tail);
            parts.extend(opts);
        } else {
            parts.extend(opts);
            parts.push(tail);
        }
        let text = parts
            .into_iter()
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        if !self.seen.insert(text.clone()) {
            return false;
        }
        let labels: Vec<String> = uses.iter().map(|u| p.options[u.opt].label()).collect();
        self.out.push(Swept {
            candidate: Candidate {
                form: Form::Text(text),
                cwd: None,
                origin: format!("sweep {} {}", p.name(), labels.join(" ")),
            },
            program: self.index,
            options: uses.iter().map(|u| u.opt).collect(),
        });
        true
    }

    /// Emit one candidate for `opt` alone in a seeded shape (or `shape`), place
    /// (or alone) and operand; again when that command was made already.
    fn alone(
        &mut self,
        opt: usize,
        value: &'static str,
        shape: Option<(Shape, usize)>,
        place: Option<Place>,
    ) {
        for attempt in 0..12 {
            let (shape, k) = match shape {
                Some(s) if attempt == 0 => s,
                _ => self.random_shape(opt),
            };
            let place = match place {
                Some(p) if attempt == 0 => p,
                _ => self.random_place(),
            };
            let operand = self.random_operand();
            let name = self.rng.below(self.p.names.len());
            let u = Use {
                opt,
                shape,
                k,
                value,
            };
            if self.emit(&[u], operand, place, name) {
                return;
            }
        }
    }

    /// Each option alone once: a flag in a seeded shape, place and operand; an
    /// option with a value, alone, with a value hostile for its role (and, when it
    /// lists operands, again with `lists/guarded0`), in a seeded shape (an optional
    /// value as the next word).
    fn slice_singles(&mut self) {
        for opt in 0..self.p.options.len() {
            let o = &self.p.options[opt];
            if o.takes == Takes::Nothing {
                self.alone(opt, "", None, None);
                continue;
            }
            let lists = o.lists_operands();
            let value = hostile(self.p, o, &mut self.rng);
            // An optional value is only attached: the next word is an operand, the
            // form most easily misread (`diff --context .env`).
            let shape = (o.takes == Takes::Attached)
                .then(|| {
                    shapes(self.p, opt)
                        .into_iter()
                        .find(|(s, _)| matches!(s, Shape::Long | Shape::Short))
                })
                .flatten();
            self.alone(opt, value, shape, Some(Place::Alone));
            if lists {
                self.alone(opt, "lists/guarded0", None, None);
            }
        }
    }

    /// Every option alone in every shape, after another option's value and after
    /// the operands. A flag with every operand (the shapes in rotation); an option
    /// with a value with every value (the shapes in rotation), and in its first
    /// shape with the first operand and each key value.
    fn full_singles(&mut self) {
        for opt in 0..self.p.options.len() {
            let shapes = shapes(self.p, opt);
            let flag = self.p.options[opt].takes == Takes::Nothing;
            let first_operand = if self.p.posix {
                COMMANDS[0]
            } else {
                OPERANDS[0]
            };
            let single = |maker: &mut Self, i: usize, value: &'static str, operand, place| {
                let (shape, k) = shapes[i % shapes.len()];
                let u = Use {
                    opt,
                    shape,
                    k,
                    value,
                };
                maker.emit(&[u], operand, place, i);
            };
            if flag {
                let operands = if self.p.posix { COMMANDS } else { OPERANDS };
                for i in 0..operands.len().max(shapes.len()) {
                    single(self, i, "", operands[i % operands.len()], Place::Alone);
                }
                for (i, place) in [Place::AfterValue, Place::AfterOperand]
                    .into_iter()
                    .enumerate()
                {
                    let operand = self.random_operand();
                    single(self, i + 1, "", operand, place);
                }
                continue;
            }
            // The first shape with a plain operand (what a value does is not hidden by
            // an operand that fails), and each key value.
            for &value in &VALUES[..KEY_VALUES] {
                single(self, 0, value, first_operand, Place::Alone);
            }
            // Every shape, the key values in rotation.
            for i in 1..shapes.len() {
                let value = VALUES[(i + opt) % KEY_VALUES];
                let operand = self.random_operand();
                single(self, i, value, operand, Place::Alone);
            }
            // Every value, the shapes in rotation.
            for (i, &value) in VALUES.iter().enumerate() {
                let operand = self.random_operand();
                single(self, i + opt, value, operand, Place::Alone);
            }
            let value = hostile(self.p, &self.p.options[opt], &mut self.rng);
            for (i, place) in [Place::AfterValue, Place::AfterOperand]
                .into_iter()
                .enumerate()
            {
                let operand = self.random_operand();
                single(self, i, value, operand, place);
            }
        }
    }

    /// One candidate for the pair (a, b), in a seeded order, shapes and values.
    fn pair(&mut self, a: usize, b: usize) {
        let (a, b) = if self.rng.chance(50) { (a, b) } else { (b, a) };
        for _ in 0..6 {
            let mut uses = Vec::new();
            for opt in [a, b] {
                let o = &self.p.options[opt];
                let value = if o.takes == Takes::Nothing {
                    ""
                } else if self.rng.chance(50) {
                    hostile(self.p, o, &mut self.rng)
                } else {
                    *self.rng.pick(VALUES)
                };
                let (shape, k) = self.random_shape(opt);
                uses.push(Use {
                    opt,
                    shape,
                    k,
                    value,
                });
            }
            let operand = self.random_operand();
            let place = if self.rng.chance(20) && !self.p.posix {
                Place::AfterOperand
            } else {
                Place::Alone
            };
            // Both in one cluster: `-a` then `-o V` as `-ao V` / `-aoV`.
            let (oa, ob) = (&self.p.options[a], &self.p.options[b]);
            if self.rng.chance(30)
                && oa.takes == Takes::Nothing
                && !oa.short.is_empty()
                && !ob.short.is_empty()
                && oa.short[0].is_ascii_alphanumeric()
            {
                let c = oa.short[0];
                let value = uses[1].value;
                let more = self.more_values(b);
                let shape = if self.rng.chance(50) {
                    Shape::Cluster
                } else {
                    Shape::ClusterAttached
                };
                if let Some(w) = words(self.p, b, shape, 0, value, &more, Some(c)) {
                    // Written by hand: the cluster is one use of both options.
                    let tail = if self.p.posix {
                        format!("{}{operand}", wrapper_operands(self.p.name()))
                    } else if ob.lists_operands() {
                        leading_operands(self.p.name()).to_string()
                    } else {
                        format!("{}{operand}", leading_operands(self.p.name()))
                    };
                    let text = format!("{} {} {tail}", self.p.name(), w.join(" "))
                        .trim_end()
                        .to_string();
                    if self.seen.insert(text.clone()) {
                        self.out.push(Swept {
                            candidate: Candidate {
                                form: Form::Text(text),
                                cwd: None,
                                origin: format!(
                                    "sweep {} {} {}",
                                    self.p.name(),
                                    oa.label(),
                                    ob.label()
                                ),
                            },
                            program: self.index,
                            options: vec![a, b],
                        });
                        return;
                    }
                    continue;
                }
            }
            let name = self.rng.below(self.p.names.len());
            if self.emit(&uses, operand, place, name) {
                return;
            }
        }
    }
}

/// Generate the sweep's candidates for the programs whose `include` is true.
pub fn plan(programs: &[Program], include: &[bool], seed: u64, budget: Budget) -> Plan {
    let mut seen = BTreeSet::new();
    let mut swept = Vec::new();
    // Each program's pairs, shuffled by its own generator.
    let mut pair_lists: Vec<(usize, Vec<(usize, usize)>)> = Vec::new();
    let mut pairs_total = 0;
    for (index, p) in programs.iter().enumerate() {
        if !include.get(index).copied().unwrap_or(true) {
            continue;
        }
        let mut maker = Maker {
            p,
            index,
            rng: Rng::new(seed ^ name_hash(p.name())),
            seen: &mut seen,
            out: &mut swept,
        };
        match budget {
            Budget::Slice { .. } => maker.slice_singles(),
            Budget::Full { .. } => maker.full_singles(),
        }
        let n = p.options.len();
        let mut rng = Rng::new(seed ^ name_hash(p.name()) ^ 0xA5A5);
        let mut pairs: Vec<(usize, usize)> = (0..n)
            .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
            .collect();
        pairs_total += pairs.len();
        shuffle(&mut pairs, &mut rng);
        pair_lists.push((index, pairs));
    }
    let limit = match budget {
        Budget::Slice { pairs } => pairs,
        Budget::Full { max_pairs } => max_pairs.unwrap_or(usize::MAX),
    }
    .min(pairs_total);
    // The programs in turn, each its next pair, until the limit.
    let mut taken = Vec::new();
    let mut round = 0;
    while taken.len() < limit {
        for (index, pairs) in &pair_lists {
            if let Some(&pair) = pairs.get(round) {
                if taken.len() < limit {
                    taken.push((*index, pair));
                }
            }
        }
        round += 1;
    }
    let mut makers: HashMap<usize, Rng> = HashMap::new();
    for (index, (a, b)) in &taken {
        let p = &programs[*index];
        let rng = makers
            .remove(index)
            .unwrap_or_else(|| Rng::new(seed ^ name_hash(p.name()) ^ 0x5A5A));
        let mut maker = Maker {
            p,
            index: *index,
            rng,
            seen: &mut seen,
            out: &mut swept,
        };
        maker.pair(*a, *b);
        makers.insert(*index, maker.rng);
    }
    Plan {
        swept,
        pairs_total,
        pairs_taken: taken.len(),
    }
}

fn shuffle<T>(items: &mut [T], rng: &mut Rng) {
    for i in (1..items.len()).rev() {
        items.swap(i, rng.below(i + 1));
    }
}

/// Whether `name` is a program on the PATH the oracle's commands run with.
pub fn installed(name: &str) -> bool {
    Command::new("which")
        .arg(name)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One program's figures.
#[derive(Debug, Default, Clone)]
pub struct ProgramReport {
    pub name: String,
    pub listed: usize,
    /// Options used by at least one candidate.
    pub covered: BTreeSet<usize>,
    /// Options used by at least one allowed (so executed) candidate.
    pub executed: BTreeSet<usize>,
    pub candidates: usize,
    pub allowed: usize,
}

/// A violation or guarded read, with what caused it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub program: String,
    /// The options' labels, in command order.
    pub options: Vec<String>,
    pub command: String,
    /// The messages of the oracle (violations, then guarded reads).
    pub what: Vec<String>,
    pub guarded_read: bool,
}

/// The outcome of a sweep.
#[derive(Debug, Default)]
pub struct Report {
    pub tally: Tally,
    pub programs: Vec<ProgramReport>,
    pub failures: Vec<Failure>,
}

/// The timeout of a program that timed out twice already.
const SLOW_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Ask the broker about every candidate (unless `ask` is false: then all are run,
/// as if the broker had allowed them) and run what it allows, spread over the
/// `worlds` (one thread each; the broker is asked in the first).
pub fn run(worlds: &mut [World], programs: &[Program], swept: &[Swept], ask: bool) -> Report {
    let mut report = Report::default();
    let mut per: BTreeMap<usize, ProgramReport> = BTreeMap::new();
    for s in swept {
        let r = per.entry(s.program).or_insert_with(|| ProgramReport {
            name: programs[s.program].name().to_string(),
            listed: programs[s.program].options.len(),
            ..ProgramReport::default()
        });
        r.candidates += 1;
        r.covered.extend(s.options.iter().copied());
    }
    let candidates: Vec<Candidate> = swept.iter().map(|s| s.candidate.clone()).collect();
    let allowed: Vec<Candidate> = if ask {
        let (allowed, refused) = oracle::ask_broker(&worlds[0], &candidates);
        report.tally.refused = refused;
        allowed
    } else {
        candidates.clone()
    };
    report.tally.candidates = candidates.len();
    report.tally.allowed = allowed.len();
    if std::env::var("SWEEP_LIST").is_ok_and(|v| v == "1") {
        let yes: BTreeSet<&Form> = allowed.iter().map(|c| &c.form).collect();
        for c in &candidates {
            let verdict = if yes.contains(&c.form) {
                "allow "
            } else {
                "refuse"
            };
            println!("sweep {verdict} {}", c.describe());
        }
    }
    let by_form: HashMap<&Form, usize> = swept
        .iter()
        .enumerate()
        .map(|(i, s)| (&s.candidate.form, i))
        .collect();
    let order: Vec<usize> = allowed.iter().map(|c| by_form[&c.form]).collect();
    for &i in &order {
        let s = &swept[i];
        let r = per.get_mut(&s.program).unwrap();
        r.allowed += 1;
        r.executed.extend(s.options.iter().copied());
    }
    let started = std::time::Instant::now();
    let done = AtomicUsize::new(0);
    let jobs = worlds.len().max(1);
    let parts: Vec<(Tally, Vec<(usize, Failure)>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = worlds
            .iter_mut()
            .enumerate()
            .map(|(j, world)| {
                let (order, done) = (&order, &done);
                let total = order.len();
                scope.spawn(move || {
                    let mut tally = Tally::default();
                    let mut failures = Vec::new();
                    // A program whose commands timed out twice (`tail -f`, `sleep 3`)
                    // gets a short timeout from then on: what it changed is still
                    // checked, but a follow option does not cost seconds each time.
                    let full = world.timeout;
                    let mut timeouts: HashMap<usize, usize> = HashMap::new();
                    for &i in order.iter().skip(j).step_by(jobs) {
                        let s = &swept[i];
                        let p = &programs[s.program];
                        let slow = timeouts.get(&s.program).copied().unwrap_or(0) >= 2;
                        world.timeout = if slow { full.min(SLOW_TIMEOUT) } else { full };
                        let mut t = Tally::default();
                        oracle::run_allowed(world, std::slice::from_ref(&s.candidate), &mut t);
                        *timeouts.entry(s.program).or_default() += t.timeouts;
                        let Form::Text(text) = &s.candidate.form else {
                            unreachable!("the sweep makes text commands")
                        };
                        for (what, guarded_read) in
                            [(&t.violations, false), (&t.guarded_reads, true)]
                        {
                            if !what.is_empty() {
                                failures.push((
                                    i,
                                    Failure {
                                        program: p.name().to_string(),
                                        options: s
                                            .options
                                            .iter()
                                            .map(|&o| p.options[o].label())
                                            .collect(),
                                        command: text.clone(),
                                        what: what.clone(),
                                        guarded_read,
                                    },
                                ));
                            }
                        }
                        tally.add(t);
                        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                        if n % 1000 == 0 {
                            println!(
                                "... option sweep: {n} of {total} allowed commands run, {:.0} s",
                                started.elapsed().as_secs_f64()
                            );
                        }
                    }
                    world.timeout = full;
                    (tally, failures)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut failures = Vec::new();
    for (tally, f) in parts {
        report.tally.add(tally);
        failures.extend(f);
    }
    // In the order of the candidates, whatever thread ran them.
    failures.sort_by_key(|(i, f)| (*i, f.guarded_read));
    report.failures = failures.into_iter().map(|(_, f)| f).collect();
    report.programs = per.into_values().collect();
    report
}

impl Report {
    /// `option sweep: P programs, O options (C covered), ...`
    pub fn line(&self, seed: u64) -> String {
        let listed: usize = self.programs.iter().map(|p| p.listed).sum();
        let covered: usize = self.programs.iter().map(|p| p.covered.len()).sum();
        let executed: usize = self.programs.iter().map(|p| p.executed.len()).sum();
        let runner = |r: &str| self.tally.executions.get(r).copied().unwrap_or(0);
        format!(
            "option sweep: {} programs, {listed} options ({covered} covered), {} candidates, {} allowed, {} executions (bash {}, dash {}), {} violations, {} guarded reads; seed {seed}, {executed} options run in some allowed command, {} timeouts",
            self.programs.len(),
            self.tally.candidates,
            self.tally.allowed,
            self.tally.executed(),
            runner("bash"),
            runner("dash"),
            self.tally.violations.len(),
            self.tally.guarded_reads.len(),
            self.tally.timeouts,
        )
    }

    /// One line a program: options covered / listed.
    pub fn coverage(&self) -> String {
        let mut out = String::new();
        for p in &self.programs {
            let _ = writeln!(
                out,
                "  {:<12} {:>3}/{:<3} options covered, {:>3} run in an allowed command; {:>5} candidates, {:>5} allowed",
                p.name,
                p.covered.len(),
                p.listed,
                p.executed.len(),
                p.candidates,
                p.allowed
            );
        }
        out
    }

    /// The failures, one a program and option: a pair is shown only when neither
    /// of its options failed alone.
    pub fn distinct_failures(&self) -> Vec<String> {
        let alone: BTreeSet<(String, String)> = self
            .failures
            .iter()
            .filter(|f| f.options.len() == 1)
            .map(|f| (f.program.clone(), f.options[0].clone()))
            .collect();
        let mut seen: BTreeMap<(String, String), (usize, &Failure)> = BTreeMap::new();
        for f in &self.failures {
            let key = match f
                .options
                .iter()
                .find(|o| alone.contains(&(f.program.clone(), (*o).clone())))
            {
                Some(o) => (f.program.clone(), o.clone()),
                None => (f.program.clone(), f.options.join(" + ")),
            };
            seen.entry(key).or_insert((0, f)).0 += 1;
        }
        seen.iter()
            .map(|((program, option), (count, f))| {
                format!(
                    "{program} {option}: {} ({count} command{}), e.g. `{}`: {}",
                    if f.guarded_read {
                        "GUARDED READ"
                    } else {
                        "VIOLATION"
                    },
                    if *count == 1 { "" } else { "s" },
                    f.command,
                    f.what[0].replace('\n', " ").replace("    ", " ")
                )
            })
            .collect()
    }
}
