//! awk programs: does a program only read its input and print?
//!
//! Not an interpreter and not a full parser: a lexer that cuts the program
//! into tokens the way gawk, mawk and the one true awk do (and refuses where
//! they would cut it differently), then one pass over the tokens that knows
//! just enough of awk's grammar to find what runs a command, writes a file,
//! reads a file by name or changes which files are read. Whatever it does
//! not understand is refused.
//!
//! What is refused, and why:
//!
//! * `system` anywhere: it runs a command. `|` anywhere outside a string or
//!   regex (`print | "cmd"`, `"cmd" | getline`, `|&`): a pipe runs a command.
//!   `||` is logical or.
//! * `>` (and `>=`) at the top level of a `print` or `printf` list, outside
//!   any parenthesis (inside `[...]` too), and `>>` anywhere: output
//!   redirection, even to `/dev/stdout` or `/dev/stderr`. `>` elsewhere is a
//!   comparison.
//! * `getline ... <` with anything but one string literal (without
//!   backslash escapes, not a gawk `/inet...` socket) followed by the end of
//!   the expression: the file read must be known. Any `<` between `getline`
//!   and the end of its expression counts (awks disagree on where the target
//!   ends: gawk takes `getline $x++ < f`, mawk's `func` is a variable).
//!   `getline` and `getline var` read the next input record; `getline <
//!   "-"` reads standard input.
//! * Changing `ENVIRON`, `ARGV` or `ARGC` (assignment, `++`/`--`, `delete`,
//!   `getline` into it, the third argument of `sub`/`gsub`, `for (... in`),
//!   or passing `ENVIRON`/`ARGV` whole anywhere but `k in ARRAY`,
//!   `length(ARRAY)`, `isarray(ARRAY)`, `typeof(ARRAY)`: `ARGV` and `ARGC`
//!   decide which files the main loop reads.
//! * Any mention of gawk's `PROCINFO`, `BINMODE`, `SYMTAB`, `FUNCTAB`, of
//!   `dcgettext`, `dcngettext`, `bindtextdomain`; any `@` (`@load`,
//!   `@include`, `@namespace`, indirect calls, typed regexes) and `::`.
//! * A call of a name that is neither an allowed builtin nor a function the
//!   program defines (an extension or another awk's builtin could do
//!   anything). `name (x)` with a space is concatenation when `name` is
//!   known to be a variable, and refused otherwise.
//! * Where awks would cut the program differently, since a string hidden in
//!   a regex by one awk and not by another can hide a `system` call: `/`
//!   after a builtin or function name (mawk starts a regex, gawk divides),
//!   after `++`/`--` (some mawks start a regex), after `func`, `switch`,
//!   `case`, `default`, `BEGINFILE`, `ENDFILE`, `nextfile` (gawk keywords,
//!   mawk variables); `/=` outside a regex (gawk starts a regex when what
//!   precedes cannot be assigned, mawk divides); `/` inside a bracket
//!   expression of a regex (`/[/]/`: gawk and mawk keep the regex going, the
//!   one true awk ends it).
//! * Unterminated strings and regexes, unbalanced `(`, `[`, `{`, a line
//!   continuation inside a string, regex or comment, a stray `\`, `&` or any
//!   character awk has no use for.

use std::collections::HashSet;

use crate::syntax::Word;
use crate::{Refusal, RefusalKind};

/// What an awk program does beyond reading its input files and printing.
#[allow(dead_code)] // wired by the table
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AwkFacts {
    /// Files the program reads by name: `getline < "FILE"`, `getline var <
    /// "FILE"` with a string-literal FILE (standard input, `"-"`, is left out).
    pub reads: Vec<String>,
}

/// `Ok(facts)` when the program only reads its input (and the literal files
/// in `reads`) and writes to stdout/stderr; `Err(reason)` otherwise, a short
/// phrase naming the construct, e.g. "awk `system()` runs a command".
#[allow(dead_code)] // wired by the table
pub(crate) fn analyse(program: &str) -> Result<AwkFacts, String> {
    let toks = lex(program)?;
    let decl = declarations(&toks);
    let mut pass = Pass {
        toks: &toks,
        decl: &decl,
        frames: Vec::new(),
        print: None,
        facts: AwkFacts::default(),
    };
    for i in 0..toks.len() {
        pass.step(i)?;
    }
    Ok(pass.facts)
}

// ---------------------------------------------------------------------------
// Names

/// awk's reserved words (gawk's included).
fn is_keyword(name: &str) -> bool {
    matches!(
        name,
        "BEGIN"
            | "END"
            | "BEGINFILE"
            | "ENDFILE"
            | "function"
            | "func"
            | "if"
            | "else"
            | "while"
            | "for"
            | "do"
            | "break"
            | "continue"
            | "next"
            | "nextfile"
            | "exit"
            | "return"
            | "delete"
            | "in"
            | "getline"
            | "print"
            | "printf"
            | "switch"
            | "case"
            | "default"
    )
}

/// Builtin functions a program may call: none of them runs, writes or opens
/// anything (`close` and `fflush` only close or flush what is already open).
fn is_allowed_builtin(name: &str) -> bool {
    matches!(
        name,
        "length"
            | "substr"
            | "index"
            | "split"
            | "sub"
            | "gsub"
            | "match"
            | "sprintf"
            | "sin"
            | "cos"
            | "atan2"
            | "exp"
            | "log"
            | "sqrt"
            | "int"
            | "rand"
            | "srand"
            | "tolower"
            | "toupper"
            | "close"
            | "fflush"
            | "gensub"
            | "strftime"
            | "systime"
            | "mktime"
            | "asort"
            | "asorti"
            | "patsplit"
            | "and"
            | "or"
            | "xor"
            | "lshift"
            | "rshift"
            | "compl"
            | "strtonum"
            | "isarray"
            | "typeof"
    )
}

/// Builtins of some awk that are not allowed (`system`) or not understood.
fn is_other_builtin(name: &str) -> bool {
    matches!(
        name,
        "system" | "dcgettext" | "dcngettext" | "bindtextdomain" | "mkbool"
    )
}

/// Variables awk defines; with [`Decl::vars`] they make `NAME (x)` a
/// concatenation rather than a call.
fn is_special_var(name: &str) -> bool {
    matches!(
        name,
        "NR" | "NF"
            | "FNR"
            | "FS"
            | "OFS"
            | "ORS"
            | "RS"
            | "FILENAME"
            | "SUBSEP"
            | "RSTART"
            | "RLENGTH"
            | "CONVFMT"
            | "OFMT"
            | "ARGC"
            | "RT"
            | "ERRNO"
            | "IGNORECASE"
            | "ARGIND"
            | "FIELDWIDTHS"
            | "FPAT"
            | "TEXTDOMAIN"
            | "LINT"
    )
}

/// Names refused wherever they appear, with the reason.
fn refused_name(name: &str) -> Option<&'static str> {
    Some(match name {
        "system" => "awk `system()` runs a command",
        "PROCINFO" => "awk `PROCINFO` (gawk) changes how input and output work",
        "BINMODE" => "awk `BINMODE` (gawk) changes how files are opened",
        "SYMTAB" => "awk `SYMTAB` (gawk) can change any variable, `ARGV` included",
        "FUNCTAB" => "awk `FUNCTAB` (gawk) names functions for indirect calls",
        "dcgettext" | "dcngettext" | "bindtextdomain" => {
            "awk message-catalogue functions read files a program names"
        }
        _ => return None,
    })
}

/// The operators that assign to their left operand.
fn is_assign_op(op: &str) -> bool {
    matches!(op, "=" | "+=" | "-=" | "*=" | "/=" | "%=" | "^=" | "**=")
}

// ---------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    /// An identifier or a keyword.
    Name(&'a str),
    Number,
    /// A string literal: the text between the quotes, escapes undecoded.
    Str(&'a str),
    Regex,
    Dollar,
    LParen,
    /// `true` when it closes the condition of `if`, `while` or `for`, after
    /// which a statement (and so a regex) may start. (Not `switch`: mawk
    /// has no `switch`, and divides after `switch (x)`.)
    RParen(bool),
    LBracket,
    RBracket,
    LBrace,
    RBrace,
    Semi,
    Comma,
    Newline,
    Op(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Token<'a> {
    tok: Tok<'a>,
    /// Whitespace (or a line continuation) comes right before it.
    space: bool,
}

/// Whether a `/` after `last` starts a regex (an operand is expected) rather
/// than a division: after an identifier, number, string, regex, `)`, `]` or
/// a postfix `++`/`--` it divides; after the `)` of an `if`/`while`/`for`
/// condition, a keyword (but `getline`), an operator or a separator it is a
/// regex.
fn operand_expected(last: Option<&Token<'_>>) -> bool {
    match last.map(|t| t.tok) {
        None => true,
        Some(Tok::Name(n)) => is_keyword(n) && n != "getline",
        Some(Tok::Number | Tok::Str(_) | Tok::Regex | Tok::RBracket | Tok::RParen(false)) => false,
        Some(Tok::Op("++" | "--")) => false,
        Some(_) => true,
    }
}

/// Why a `/` after `last` is refused: awks disagree on whether it divides or
/// starts a regex. mawk starts a regex after a builtin name (gawk divides or
/// fails) and, in some versions, after `++`/`--`; `func`, `switch`, `case`,
/// `default`, `BEGINFILE`, `ENDFILE` and `nextfile` are gawk keywords but
/// mawk variables, after which mawk divides.
fn ambiguous_slash(last: Option<&Token<'_>>) -> Option<String> {
    let after = match last.map(|t| t.tok)? {
        Tok::Op(op @ ("++" | "--")) => op,
        Tok::Name(
            n @ ("func" | "switch" | "case" | "default" | "BEGINFILE" | "ENDFILE" | "nextfile"),
        ) => n,
        Tok::Name(n) if is_allowed_builtin(n) || is_other_builtin(n) => n,
        _ => return None,
    };
    Some(format!(
        "awk `/` after `{after}` is a regex in some awks and a division in others"
    ))
}

/// The end (one past the closing quote) of the string starting at `start`.
fn string_end(b: &[u8], start: usize) -> Result<usize, String> {
    let mut i = start + 1;
    loop {
        match b.get(i) {
            None | Some(b'\n') => return Err("awk string is not terminated".into()),
            Some(b'\\') => match b.get(i + 1) {
                None | Some(b'\n' | b'\r') => {
                    return Err("awk line continuation inside a string".into())
                }
                Some(_) => i += 2,
            },
            Some(b'"') => return Ok(i + 1),
            Some(0) => return Err("awk program contains a NUL byte".into()),
            Some(_) => i += 1,
        }
    }
}

/// The end (one past the closing `/`) of the regex starting at `start`.
///
/// Every awk reads `\x` as a pair and ends the regex at an unescaped `/`;
/// gawk (and newer awks) keep going when that `/` is inside a bracket
/// expression, older ones do not, so a `/` inside brackets is refused.
fn regex_end(b: &[u8], start: usize) -> Result<usize, String> {
    const SPLIT: &str =
        "awk `/` inside a regex bracket expression ends the regex in some awks only";
    let mut i = start + 1;
    let mut in_bracket = false;
    loop {
        match b.get(i) {
            None | Some(b'\n') => return Err("awk regex is not terminated".into()),
            Some(0) => return Err("awk program contains a NUL byte".into()),
            Some(b'\\') => match b.get(i + 1) {
                None | Some(b'\n' | b'\r') => {
                    return Err("awk line continuation inside a regex".into())
                }
                Some(_) => i += 2,
            },
            Some(b'/') if in_bracket => return Err(SPLIT.into()),
            Some(b'/') => return Ok(i + 1),
            Some(b'[') if !in_bracket => {
                in_bracket = true;
                i += 1;
                if b.get(i) == Some(&b'^') {
                    i += 1;
                }
                // A `]` first in the list is a member, not the end.
                if b.get(i) == Some(&b']') {
                    i += 1;
                }
            }
            Some(b'[') => match b.get(i + 1) {
                Some(b':') => {
                    // `[:alpha:]`: letters only, then `:]`.
                    let mut j = i + 2;
                    while b.get(j).is_some_and(u8::is_ascii_alphabetic) {
                        j += 1;
                    }
                    if j == i + 2 || b.get(j) != Some(&b':') || b.get(j + 1) != Some(&b']') {
                        return Err("awk regex character class not understood".into());
                    }
                    i = j + 2;
                }
                Some(b'.' | b'=') => {
                    return Err("awk regex collating element not understood".into())
                }
                _ => i += 1,
            },
            Some(b']') if in_bracket => {
                in_bracket = false;
                i += 1;
            }
            Some(_) => i += 1,
        }
    }
}

/// The end of the number starting at `i`: digits, an optional fraction and
/// an optional exponent, as `strtod` reads them (a hex prefix is left out:
/// `0x1F` lexes as `0` and the name `x1F`, which only ever shows more names).
fn number_end(b: &[u8], mut i: usize) -> usize {
    let digits = |b: &[u8], mut i: usize| {
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        i
    };
    i = digits(b, i);
    if b.get(i) == Some(&b'.') {
        i = digits(b, i + 1);
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        let mut j = i + 1;
        if matches!(b.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        if b.get(j).is_some_and(u8::is_ascii_digit) {
            i = digits(b, j);
        }
    }
    i
}

/// Why an `@` is refused.
fn at_reason(rest: &[u8]) -> String {
    let word: Vec<u8> = rest
        .iter()
        .copied()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == b'_')
        .collect();
    match word.as_slice() {
        b"load" => "awk `@load` (gawk) loads compiled code".into(),
        b"include" => "awk `@include` (gawk) reads another program file".into(),
        b"namespace" => "awk `@namespace` (gawk) is not understood".into(),
        _ => "awk `@` (a gawk indirect call or typed regex) is not understood".into(),
    }
}

/// An operator of one to three characters at `i`, longest first.
fn operator(b: &[u8], i: usize) -> Result<(&'static str, usize), String> {
    let c = b.get(i).copied().unwrap_or(0);
    let n = b.get(i + 1).copied().unwrap_or(0);
    let n2 = b.get(i + 2).copied().unwrap_or(0);
    Ok(match (c, n) {
        (b'|', b'|') => ("||", 2),
        (b'|', b'&') => return Err("awk `|&` runs a coprocess".into()),
        (b'|', _) => return Err("awk `|` pipes to or from a command".into()),
        (b'&', b'&') => ("&&", 2),
        (b'>', b'>') => (">>", 2),
        (b'>', b'=') => (">=", 2),
        (b'>', _) => (">", 1),
        (b'<', b'=') => ("<=", 2),
        (b'<', _) => ("<", 1),
        (b'=', b'=') => ("==", 2),
        (b'=', _) => ("=", 1),
        (b'!', b'=') => ("!=", 2),
        (b'!', b'~') => ("!~", 2),
        (b'!', _) => ("!", 1),
        (b'+', b'+') => ("++", 2),
        (b'+', b'=') => ("+=", 2),
        (b'+', _) => ("+", 1),
        (b'-', b'-') => ("--", 2),
        (b'-', b'=') => ("-=", 2),
        (b'-', _) => ("-", 1),
        (b'*', b'*') if n2 == b'=' => ("**=", 3),
        (b'*', b'*') => ("**", 2),
        (b'*', b'=') => ("*=", 2),
        (b'*', _) => ("*", 1),
        (b'%', b'=') => ("%=", 2),
        (b'%', _) => ("%", 1),
        (b'^', b'=') => ("^=", 2),
        (b'^', _) => ("^", 1),
        (b'~', _) => ("~", 1),
        (b'?', _) => ("?", 1),
        (b':', b':') => return Err("awk `::` (a gawk namespace) is not understood".into()),
        (b':', _) => (":", 1),
        _ => {
            let shown = if c.is_ascii_graphic() {
                format!("`{}`", char::from(c))
            } else {
                format!("byte {c:#04x}")
            };
            return Err(format!("awk program has an unexpected {shown}"));
        }
    })
}

fn lex(src: &str) -> Result<Vec<Token<'_>>, String> {
    let b = src.as_bytes();
    let mut out: Vec<Token<'_>> = Vec::new();
    // Open delimiters; for `(`, whether it opens an `if`/`while`/`for` condition.
    let mut open: Vec<(u8, bool)> = Vec::new();
    let mut space = false;
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        let start = i;
        let tok = match c {
            b' ' | b'\t' | b'\r' => {
                space = true;
                i += 1;
                continue;
            }
            b'\\' => {
                match (b.get(i + 1), b.get(i + 2)) {
                    (Some(b'\n'), _) => i += 2,
                    (Some(b'\r'), Some(b'\n')) => i += 3,
                    _ => return Err("awk `\\` outside a string or regex".into()),
                }
                space = true;
                continue;
            }
            b'#' => {
                while b.get(i).is_some_and(|c| *c != b'\n') {
                    i += 1;
                }
                let body = src[start..i].trim_end_matches('\r');
                if body.ends_with('\\') {
                    return Err("awk comment ends with `\\`".into());
                }
                continue;
            }
            b'\n' => {
                i += 1;
                Tok::Newline
            }
            b'"' => {
                i = string_end(b, i)?;
                Tok::Str(&src[start + 1..i - 1])
            }
            b'/' => {
                if let Some(reason) = ambiguous_slash(out.last()) {
                    return Err(reason);
                }
                if operand_expected(out.last()) {
                    i = regex_end(b, i)?;
                    Tok::Regex
                } else if b.get(i + 1) == Some(&b'=') {
                    // gawk reads `/=` after anything but a plain variable as
                    // the start of a regex (`"s" /= x/`, `getline x /=...`),
                    // mawk as division-assignment.
                    return Err(
                        "awk `/=` is a division-assignment in some awks and a regex in others"
                            .into(),
                    );
                } else {
                    i += 1;
                    Tok::Op("/")
                }
            }
            b'0'..=b'9' => {
                i = number_end(b, i);
                Tok::Number
            }
            b'.' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                i = number_end(b, i);
                Tok::Number
            }
            b'A'..=b'Z' | b'a'..=b'z' | b'_' => {
                while b
                    .get(i)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
                {
                    i += 1;
                }
                Tok::Name(&src[start..i])
            }
            b'@' => return Err(at_reason(&b[i + 1..])),
            b'$' => {
                i += 1;
                Tok::Dollar
            }
            b';' => {
                i += 1;
                Tok::Semi
            }
            b',' => {
                i += 1;
                Tok::Comma
            }
            b'(' | b'[' | b'{' => {
                i += 1;
                let header = c == b'('
                    && matches!(
                        out.last().map(|t| t.tok),
                        Some(Tok::Name("if" | "while" | "for"))
                    );
                open.push((c, header));
                match c {
                    b'(' => Tok::LParen,
                    b'[' => Tok::LBracket,
                    _ => Tok::LBrace,
                }
            }
            b')' | b']' | b'}' => {
                i += 1;
                let want = match c {
                    b')' => b'(',
                    b']' => b'[',
                    _ => b'{',
                };
                match open.pop() {
                    Some((o, header)) if o == want => match c {
                        b')' => Tok::RParen(header),
                        b']' => Tok::RBracket,
                        _ => Tok::RBrace,
                    },
                    _ => {
                        return Err(format!(
                            "awk `{}` has no matching `{}`",
                            char::from(c),
                            char::from(want)
                        ))
                    }
                }
            }
            _ => {
                let (op, len) = operator(b, i)?;
                i += len;
                Tok::Op(op)
            }
        };
        out.push(Token { tok, space });
        space = false;
    }
    if let Some((o, _)) = open.last() {
        return Err(format!("awk `{}` is not closed", char::from(*o)));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Analysis

/// Names the program declares: its functions, and names it uses as variables.
struct Decl<'a> {
    functions: HashSet<&'a str>,
    vars: HashSet<&'a str>,
}

fn declarations<'a>(toks: &[Token<'a>]) -> Decl<'a> {
    let tok = |i: usize| toks.get(i).map(|t| t.tok);
    let mut functions = HashSet::new();
    let mut vars = HashSet::new();
    for i in 0..toks.len() {
        let Some(Tok::Name(n)) = tok(i) else { continue };
        if is_keyword(n) {
            if matches!(n, "function" | "func") {
                if let Some(Tok::Name(f)) = tok(i + 1) {
                    functions.insert(f);
                    // The parameters.
                    if tok(i + 2) == Some(Tok::LParen) {
                        let mut j = i + 3;
                        loop {
                            match tok(j) {
                                Some(Tok::Name(p)) => {
                                    vars.insert(p);
                                }
                                Some(Tok::Comma | Tok::Newline) => {}
                                _ => break,
                            }
                            j += 1;
                        }
                    }
                }
            }
            continue;
        }
        let assigned_after = matches!(tok(i + 1), Some(Tok::LBracket | Tok::Op("++" | "--")))
            || matches!(tok(i + 1), Some(Tok::Op(op)) if is_assign_op(op));
        let assigned_before = i > 0
            && matches!(
                tok(i - 1),
                Some(Tok::Name("in" | "getline") | Tok::Op("++" | "--"))
            );
        if assigned_after || assigned_before {
            vars.insert(n);
        }
    }
    Decl { functions, vars }
}

#[derive(Debug)]
enum Frame<'a> {
    /// `(`, with the name it calls, if any, and how many commas so far.
    Paren {
        call: Option<&'a str>,
        commas: usize,
    },
    Bracket,
    Brace,
}

struct Pass<'t, 'a> {
    toks: &'t [Token<'a>],
    decl: &'t Decl<'a>,
    frames: Vec<Frame<'a>>,
    /// Inside a `print`/`printf` statement: the frame depth at its keyword,
    /// and the keyword.
    print: Option<(usize, &'a str)>,
    facts: AwkFacts,
}

impl<'a> Pass<'_, 'a> {
    fn tok(&self, i: usize) -> Option<Tok<'a>> {
        self.toks.get(i).map(|t| t.tok)
    }

    /// In a `print` statement, outside anything opened since its keyword.
    fn at_print_level(&self) -> bool {
        self.print
            .is_some_and(|(base, _)| self.frames.len() == base)
    }

    fn before(&self, i: usize, back: usize) -> Option<Tok<'a>> {
        i.checked_sub(back).and_then(|j| self.tok(j))
    }

    /// One past the closer matching the opener at `i`.
    fn after_group(&self, i: usize) -> usize {
        let mut depth = 0usize;
        let mut j = i;
        while let Some(t) = self.tok(j) {
            match t {
                Tok::LParen | Tok::LBracket | Tok::LBrace => depth += 1,
                Tok::RParen(_) | Tok::RBracket | Tok::RBrace => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return j + 1;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        j
    }

    fn step(&mut self, i: usize) -> Result<(), String> {
        let Some(t) = self.tok(i) else { return Ok(()) };
        match t {
            Tok::Name(n) => self.name(i, n)?,
            Tok::LParen => {
                let call = match self.before(i, 1) {
                    Some(Tok::Name(n)) if !is_keyword(n) => Some(n),
                    _ => None,
                };
                self.frames.push(Frame::Paren { call, commas: 0 });
            }
            Tok::LBracket => self.frames.push(Frame::Bracket),
            Tok::LBrace => self.frames.push(Frame::Brace),
            Tok::RParen(_) | Tok::RBracket | Tok::RBrace => {
                self.frames.pop();
                if self.print.is_some_and(|(base, _)| self.frames.len() < base) {
                    self.print = None;
                }
            }
            Tok::Comma => {
                if let Some(Frame::Paren { commas, .. }) = self.frames.last_mut() {
                    *commas += 1;
                }
            }
            // `;` ends the statement; a newline only after a complete
            // expression (awk goes on after `,`, `&&`, `||`, ...).
            Tok::Semi if self.at_print_level() => self.print = None,
            Tok::Newline
                if self.at_print_level() && self.before(i, 1).is_some_and(ends_expression) =>
            {
                self.print = None;
            }
            Tok::Op(">>") => return Err("awk `>>` appends to a file".into()),
            Tok::Op(op @ (">" | ">=")) => {
                if let Some((base, keyword)) = self.print {
                    let in_parens = self
                        .frames
                        .get(base..)
                        .is_some_and(|f| f.iter().any(|f| matches!(f, Frame::Paren { .. })));
                    if !in_parens {
                        return Err(if op == ">" {
                            format!("awk `{keyword} >` writes to a file")
                        } else {
                            format!("awk `>=` at the top level of a `{keyword}` list is ambiguous")
                        });
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn name(&mut self, i: usize, n: &'a str) -> Result<(), String> {
        if let Some(reason) = refused_name(n) {
            return Err(reason.into());
        }
        match n {
            "print" | "printf" => self.print = Some((self.frames.len(), n)),
            "getline" => self.getline(i)?,
            "ENVIRON" | "ARGV" | "ARGC" => self.protected(i, n)?,
            _ => {}
        }
        let next = self.toks.get(i + 1);
        // (After builtin names the lexer already refused it.)
        if self.decl.functions.contains(n) && matches!(next.map(|t| t.tok), Some(Tok::Op("/"))) {
            return Err(format!(
                "awk `/` after `{n}` is a regex in some awks and a division in others"
            ));
        }
        if let Some(next) = next {
            if next.tok == Tok::LParen && !is_keyword(n) {
                let known = is_allowed_builtin(n)
                    || self.decl.functions.contains(n)
                    || (next.space
                        && !is_other_builtin(n)
                        && (is_special_var(n) || self.decl.vars.contains(n)));
                if !known {
                    return Err(format!(
                        "awk calls `{n}()`, neither an allowed builtin nor a function the program defines"
                    ));
                }
            }
        }
        Ok(())
    }

    /// `getline`, `getline var`, `getline < "file"`, `getline var < "file"`.
    fn getline(&mut self, i: usize) -> Result<(), String> {
        // Where getline's target ends differs between awks (gawk takes
        // `getline $x++ < f`, mawk's `func` and `case` are variables), so
        // any `<` before the end of the expression is taken as a redirection.
        let mut j = i + 1;
        let mut depth = 0usize;
        loop {
            match self.tok(j) {
                None
                | Some(
                    Tok::Semi
                    | Tok::Newline
                    | Tok::Comma
                    | Tok::LBrace
                    | Tok::RBrace
                    | Tok::Op("&&" | "||" | "?" | ":"),
                ) if depth == 0 => return Ok(()),
                Some(Tok::RParen(_) | Tok::RBracket) if depth == 0 => return Ok(()),
                Some(Tok::LParen | Tok::LBracket | Tok::LBrace) => depth += 1,
                Some(Tok::RParen(_) | Tok::RBracket | Tok::RBrace) => depth -= 1,
                Some(Tok::Op("<")) if depth == 0 => break,
                _ => {}
            }
            j += 1;
        }
        let Some(Tok::Str(file)) = self.tok(j + 1) else {
            return Err("awk `getline <` reads a file named by an expression".into());
        };
        // gawk reads `getline < EXPR` with EXPR a concatenation-free
        // expression, mawk and the one true awk with arithmetic included:
        // only an expression's end leaves no doubt.
        if !matches!(
            self.tok(j + 2),
            None | Some(
                Tok::RParen(_)
                    | Tok::RBracket
                    | Tok::RBrace
                    | Tok::Semi
                    | Tok::Comma
                    | Tok::Newline
                    | Tok::Op("&&" | "||")
            )
        ) {
            return Err(
                "awk `getline < \"file\"` goes on with an expression awks read differently".into(),
            );
        }
        if file.contains('\\') {
            return Err("awk `getline <` a file name with backslash escapes".into());
        }
        if file.starts_with("/inet") {
            return Err("awk `getline < \"/inet/...\"` (gawk) opens a network connection".into());
        }
        if file != "-" && !self.facts.reads.iter().any(|r| r == file) {
            self.facts.reads.push(file.to_string());
        }
        Ok(())
    }

    /// `ENVIRON`, `ARGV` and `ARGC` may be read, never changed.
    fn protected(&mut self, i: usize, n: &str) -> Result<(), String> {
        let changed = || match n {
            "ENVIRON" => "awk changes `ENVIRON`".to_string(),
            _ => format!("awk changes `{n}`, which decides the files awk reads"),
        };
        let prev = self.before(i, 1);
        let prev2 = self.before(i, 2);
        let changes_next = |t: Option<Tok<'_>>| {
            matches!(
                t,
                Some(Tok::Op("++" | "--") | Tok::Name("delete" | "getline"))
            )
        };
        if changes_next(prev) || (prev == Some(Tok::LParen) && changes_next(prev2)) {
            return Err(changed());
        }
        let mut j = i + 1;
        if self.tok(j) == Some(Tok::LBracket) {
            // gawk's arrays of arrays: `ARGV[1][2]`.
            while self.tok(j) == Some(Tok::LBracket) {
                j = self.after_group(j);
            }
        } else if n != "ARGC" {
            // The whole array: only `k in ARRAY` and a few builtins that
            // only look at it.
            let looked_at = prev == Some(Tok::Name("in"))
                || (prev == Some(Tok::LParen)
                    && matches!(prev2, Some(Tok::Name("length" | "isarray" | "typeof")))
                    && self.tok(j).is_some_and(|t| matches!(t, Tok::RParen(_))));
            if !looked_at {
                return Err(format!(
                    "awk passes the array `{n}` where it can be changed"
                ));
            }
        }
        match self.tok(j) {
            Some(Tok::Op(op)) if is_assign_op(op) || op == "++" || op == "--" => {
                return Err(changed())
            }
            // `for (X in a)` assigns X.
            Some(Tok::Name("in")) => return Err(changed()),
            _ => {}
        }
        // Arguments a function assigns, parenthesised or not (the one true
        // awk changes an element through `(x)` too): the target of `sub` and
        // `gsub`, the arrays `split`, `patsplit`, `match`, `asort` and
        // `asorti` fill (gawk makes an element a subarray), and anything
        // passed to a function of the program.
        let argument_of = self
            .frames
            .iter()
            .rev()
            .find(|f| !matches!(f, Frame::Paren { call: None, .. }));
        if let Some(Frame::Paren {
            call: Some(call),
            commas,
        }) = argument_of
        {
            let assigned = match *call {
                "sub" | "gsub" | "match" => *commas == 2,
                "split" | "patsplit" => matches!(*commas, 1 | 3),
                "asort" | "asorti" => true,
                f => self.decl.functions.contains(f),
            };
            if assigned {
                return Err(changed());
            }
        }
        Ok(())
    }
}

/// Whether a newline after `t` can end a statement.
fn ends_expression(t: Tok<'_>) -> bool {
    match t {
        Tok::Name(n) => !is_keyword(n) || matches!(n, "getline" | "print" | "printf"),
        Tok::Number | Tok::Str(_) | Tok::Regex | Tok::RParen(_) | Tok::RBracket => true,
        Tok::Op(op) => matches!(op, "++" | "--"),
        _ => false,
    }
}

/// An awk command line as awk reads it: its program and which arguments are
/// files (the rest are options, their values, and `NAME=value` assignments).
pub(crate) struct AwkCommand<'a> {
    /// The program texts (the first operand, or every `-e`/`--source`).
    pub programs: Vec<&'a str>,
    /// Indices of the arguments that are input files.
    pub files: Vec<usize>,
}

/// Read an awk command line (POSIX awk, gawk, mawk, the one true awk):
/// `-F FS`, `-v NAME=VALUE` (never a name awk treats specially), `--`,
/// gawk's harmless flags and `-e PROGRAM`; refused: a program from a file
/// (`-f`, `-E`), loading code (`-l`, `-i`), mawk's `-W` and every option
/// not listed. An operand `NAME=value` after the program is an assignment.
pub(crate) fn awk_command<'a>(name: &str, args: &'a [Word]) -> Result<AwkCommand<'a>, Refusal> {
    const SPECIAL: &[&str] = &[
        "ARGV", "ARGC", "ENVIRON", "PROCINFO", "BINMODE", "SYMTAB", "FUNCTAB", "AWKPATH",
    ];
    let unknown = |a: &str| {
        Refusal::with_kind(
            RefusalKind::UnknownOption,
            format!("`{name}` option `{a}` is not understood"),
        )
    };
    let assignment = |text: &str| -> Option<Result<(), Refusal>> {
        let (var, _) = text.split_once('=')?;
        let ident = !var.is_empty()
            && !var.starts_with(|c: char| c.is_ascii_digit())
            && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ident {
            return None;
        }
        Some(if SPECIAL.contains(&var) {
            Err(Refusal::new(format!(
                "`{name}` assignment `{var}=…` changes what awk reads or runs"
            )))
        } else {
            Ok(())
        })
    };
    let mut programs = Vec::new();
    let mut files = Vec::new();
    let mut i = 0;
    let mut options = true;
    while let Some(w) = args.get(i) {
        let a = w.text.as_str();
        i += 1;
        if options && a.starts_with('-') && a != "-" {
            if !w.is_plain() {
                return Err(Refusal::with_kind(
                    RefusalKind::Expansion,
                    format!("expansion or glob `{a}` in the options of `{name}` cannot be proven read-only"),
                ));
            }
            let (opt, attached) = match a.strip_prefix("--") {
                Some("") => {
                    options = false;
                    continue;
                }
                Some(long) => match long.split_once('=') {
                    Some((n, v)) => (n, Some(v)),
                    None => (long, None),
                },
                None => {
                    let (letter, rest) =
                        a[1..].split_at(a[1..].chars().next().map_or(0, char::len_utf8));
                    (letter, (!rest.is_empty()).then_some(rest))
                }
            };
            let value = |attached: Option<&'a str>, i: &mut usize| -> Result<&'a str, Refusal> {
                match attached {
                    Some(v) => Ok(v),
                    None => {
                        let v = args
                            .get(*i)
                            .ok_or_else(|| Refusal::new(format!("`{name} {a}` needs a value")))?;
                        if !v.is_plain() {
                            return Err(Refusal::with_kind(
                                RefusalKind::Expansion,
                                format!("expansion `{}` in a value of `{name} {a}` cannot be proven read-only", v.text),
                            ));
                        }
                        *i += 1;
                        Ok(v.text.as_str())
                    }
                }
            };
            match opt {
                "F" | "field-separator" => {
                    value(attached, &mut i)?;
                }
                "v" | "assign" => {
                    let v = value(attached, &mut i)?;
                    match assignment(v) {
                        Some(r) => r?,
                        None => return Err(unknown(a)),
                    }
                }
                "e" | "source" => programs.push(value(attached, &mut i)?),
                "f" | "file" | "E" | "exec" => {
                    return Err(Refusal::new(format!(
                        "`{name} {a}` reads its program from a file, which cannot be analysed"
                    )))
                }
                "l" | "load" | "i" | "include" => {
                    return Err(Refusal::with_kind(
                        RefusalKind::RunsProgram,
                        format!("`{name} {a}` loads code"),
                    ))
                }
                "b"
                | "characters-as-bytes"
                | "c"
                | "traditional"
                | "P"
                | "posix"
                | "r"
                | "re-interval"
                | "S"
                | "sandbox"
                | "N"
                | "use-lc-numeric"
                | "s"
                | "no-optimize"
                | "O"
                | "optimize"
                | "version"
                | "V"
                | "help"
                | "h"
                    if attached.is_none() => {}
                _ => return Err(unknown(a)),
            }
            continue;
        }
        if programs.is_empty() {
            programs.push(a);
            if !w.is_plain() {
                return Err(Refusal::with_kind(
                    RefusalKind::Expansion,
                    format!("the program of `{name}` holds an expansion, which cannot be proven read-only"),
                ));
            }
            options = false;
            continue;
        }
        options = false;
        match assignment(a) {
            Some(r) => r?,
            None => files.push(i - 1),
        }
    }
    if programs.is_empty() {
        return Err(Refusal::new(format!("`{name}` without a program")));
    }
    Ok(AwkCommand { programs, files })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
    use super::*;

    /// Programs that only read their input and print (each also runs under
    /// mawk and gawk, see the report of the change that added this file).
    const OK: &[&str] = &[
        // The brief's examples.
        r#"{print $1}"#,
        r#"{print $1, $3}"#,
        r#"NR<=10"#,
        r#"NR==1, NR==5"#,
        r#"/^\[dependencies\]/{flag=1;next}/^\[/{flag=0}flag"#,
        r#"{ s += $1 } END { print s }"#,
        r#"{ printf "%-20s %s\n", $1, $2 }"#,
        r#"length($0) > 120 { print FILENAME": "FNR }"#,
        r#"BEGIN { FS="," } { print $2 }"#,
        r#"{ a[$1]++ } END { for (k in a) print k, a[k] }"#,
        r#"/^version/ {print $2; exit}"#,
        r#"{ print ($1 > 5) }"#,
        r#"$1 > 5"#,
        r#"{ if ($3 > 100) print $0 }"#,
        r#"{ gsub(/x/, "y"); print }"#,
        r#"{ print toupper($0) }"#,
        r#"{ n = split($0, p, "/"); print p[n] }"#,
        r#"{ while ((getline line < "other.txt") > 0) print line }"#,
        r#"BEGIN { print ENVIRON["HOME"] }"#,
        r#"{print $NF}"#,
        r#"{ print substr($0, index($0, "=")+1) }"#,
        r#"NF { c++ } END { print c+0 }"#,
        // From the research corpus.
        r#"/^name/ {print $2}"#,
        r#"NR>=120 && NR<=180"#,
        r#"/^require \(/,/^\)/"#,
        r#"FNR==1{print "==> " FILENAME " <=="} FNR<=3"#,
        r#"length > 120 {print FILENAME": "FNR}"#,
        // Regex or division.
        r#"{ print $1/2 }"#,
        r#"{ x = 4 /2/ 1; print x }"#,
        r#"{ print $1 / $2 }"#,
        r#"{ print (NR) / 2 }"#,
        r#"{ a[1] = 4; print a[1] / 2 }"#,
        r#"$0 ~ /a\/b/"#,
        r#"/[[:alpha:]]+=/ { print }"#,
        r#"/[]a]/ || /[^]b]/"#,
        r#"{ if (NR > 1) /x/ ? c++ : d++ } END { print c, d }"#,
        r#"BEGIN { x = "a/b"; n = split(x, p, /\//); print n }"#,
        r#"/=/ { print }"#,
        r#"{ print /x/ + 0 }"#,
        // Comparisons, not redirections.
        r#"{ print ($1 > 5), ($2 >= 3) }"#,
        r#"{ print substr($0, 1, length($0) > 5 ? 5 : length($0)) }"#,
        r#"{ if (a > b) print }"#,
        r#"{ print; if ($1 > 0) n++ }"#,
        "{ print }\n$1 > 3 { n++ }",
        r#"{ printf("%d\n", $1 > 2) }"#,
        r#"{ x = $1 > $2; print x }"#,
        r#"{ while (i > 0) i-- }"#,
        r#"{ for (i = NF; i > 0; i--) printf "%s ", $i; print "" }"#,
        "{ print $1,\n  $2 }",
        r#"{ print "a > b" }"#,
        r#"{ print "x" } # print > "f" in a comment"#,
        // Layout.
        "BEGIN {\n  FS = \":\"\n}\n{\n  print $1 # the user\n}\n",
        "{ print \\\n  $1 }",
        "{ print $1; ; };",
        "\n\n{ print }\n\n",
        "# only a comment",
        "",
        "BEGIN { }",
        "{print $1}{print $2}",
        // getline and friends.
        r#"{ getline; print }"#,
        r#"{ getline line; print line }"#,
        r#"{ while ((getline line) > 0) n++ } END { print n }"#,
        r#"BEGIN { while ((getline line < "-") > 0) print line }"#,
        r#"BEGIN { getline x < "a.txt"; getline y < "b.txt"; print x, y }"#,
        r#"BEGIN { if ((getline l < "a.txt") > 0 && l != "") print l }"#,
        r#"{ getline $0 < "a.txt"; print }"#,
        r#"{ getline a[NR] < "a.txt"; print a[NR] }"#,
        r#"END { close("a.txt"); fflush() }"#,
        // Functions and builtins.
        r#"function f(x) { return x * 2 } { print f($1) }"#,
        r#"func g(a, b) { return a b } { print g($1, $2) }"#,
        r#"function max(a, b) { return a > b ? a : b } { print max($1, $2) }"#,
        r#"{ print length, length(), length($1) }"#,
        r#"{ print int(rand() * 10), srand(), sin(0), cos(0), atan2(0, 1), exp(1), log(1), sqrt(4) }"#,
        r#"{ print sprintf("%05d", NR), tolower($0), match($0, /a+/), RSTART, RLENGTH }"#,
        r#"{ print index ($0, "x") }"#,
        r#"{ print NR ($1 > 0 ? "+" : "-") }"#,
        r#"{ x = 1; print x (2) }"#,
        // Reading ENVIRON and ARGV.
        r#"BEGIN { for (k in ENVIRON) n++; print n }"#,
        r#"BEGIN { if ("HOME" in ENVIRON) print "yes" }"#,
        r#"BEGIN { for (i = 0; i < ARGC; i++) print ARGV[i] }"#,
        r#"BEGIN { print length(ARGV), (ARGV[0] == "awk") }"#,
        r#"BEGIN { x = ENVIRON["HOME"] "/bin"; print x }"#,
        r#"BEGIN { gsub(/a/, "b", x[ENVIRON["HOME"]]) ; sub(/a/, ENVIRON["HOME"]) }"#,
        r#"{ delete a[ARGV[1]]; print }"#,
        r#"{ getline a[ARGC]; print }"#,
        r#"BEGIN { n = split(ENVIRON["PATH"], dirs, ":"); print n, dirs[1] }"#,
        r#"BEGIN { print match(ENVIRON["HOME"], /h/), substr(ARGV[0], 1, 3) }"#,
        r#"function f(s) { return s "!" } BEGIN { print f(x[ARGV[0]]) }"#,
        // Keywords.
        r#"{ if ($1) next; else print }"#,
        r#"{ do { i++ } while (i < 3); print i }"#,
        r#"{ delete a; delete b[1] }"#,
        r#"END { exit 1 }"#,
        r#"NR == 2 { nextfile }"#,
    ];

    /// Programs refused, with a piece of the reason.
    const ERR: &[(&str, &str)] = &[
        // The brief's examples.
        (r#"{ system("rm -rf /") }"#, "`system()` runs a command"),
        (r#"{ print | "sh" }"#, "`|` pipes"),
        (r#"{ print > "out.txt" }"#, "`print >` writes"),
        (r#"{ print >> $1 }"#, "`>>` appends"),
        (r#"{ "date" | getline d; print d }"#, "`|` pipes"),
        (r#"{ getline x < $1 }"#, "named by an expression"),
        (
            r#"BEGIN { while (("ls" | getline f) > 0) print f }"#,
            "`|` pipes",
        ),
        (r#"@load "filefuncs""#, "`@load`"),
        (r#"BEGIN { ENVIRON["PATH"]="/tmp" }"#, "changes `ENVIRON`"),
        (r#"BEGIN { ARGV[1]="/etc/shadow" }"#, "changes `ARGV`"),
        (
            r#"{ printf "%s", $0 > "/dev/stderr" }"#,
            "`printf >` writes",
        ),
        (r#"{ print $1 |& "cat" }"#, "`|&` runs a coprocess"),
        (
            r#"BEGIN { PROCINFO["sorted_in"]="@ind_str_asc" }"#,
            "`PROCINFO`",
        ),
        (r#"{ print "abc }"#, "string is not terminated"),
        (r#"{ print ; system ("id") }"#, "`system()`"),
        (r#"{ s = "system"; @s("id") }"#, "`@`"),
        (r#"{ print > "/dev/stdout" }"#, "`print >` writes"),
        // Commands.
        (r#"BEGIN{system("rm x")}"#, "`system()`"),
        ("BEGIN { system\n(\"id\") }", "`system()`"),
        (r#"{ x = system; }"#, "`system()`"),
        (r#"{ print "a" | "cat 1>&2" }"#, "`|` pipes"),
        (r#"{ print | cmd }"#, "`|` pipes"),
        (r#"{ cmd | getline }"#, "`|` pipes"),
        (r#"BEGIN { "id" |& getline x }"#, "`|&`"),
        (r#"{ close("x") ; print |"sort" }"#, "`|` pipes"),
        // Redirections.
        (r#"{ print $1 > "out" }"#, "`print >`"),
        (r#"{ print($1) > "out" }"#, "`print >`"),
        (r#"{ print ($1, $2) > "out" }"#, "`print >`"),
        (r#"{ printf("%s\n", $1) > "out" }"#, "`printf >`"),
        (r#"{ print > $1 ".txt" }"#, "`print >`"),
        (r#"{ print $1 > "/dev/fd/3" }"#, "`print >`"),
        (r#"{ print $1, $2 > "out" }"#, "`print >`"),
        (r#"{ print $1 > $2 ? "a" : "b" }"#, "`print >`"),
        (r#"{ if (x) print > "f"; else print }"#, "`print >`"),
        (r#"{ for (k in a) print k > "f" }"#, "`print >`"),
        ("{ print $1,\n $2 > \"f\" }", "`print >`"),
        ("{ print $1, # comment\n $2 > \"f\" }", "`print >`"),
        ("{ print $1 \\\n > \"f\" }", "`print >`"),
        (r#"{ print a[$1 > 2] }"#, "`print >`"),
        (r#"{ print $1 >= 2 }"#, "`>=` at the top level"),
        (r#"{ x = 1 >> 2 }"#, "`>>` appends"),
        (r#"{ print $1 >"out"}"#, "`print >`"),
        (r#"{ print; print >"out"}"#, "`print >`"),
        // getline from files named by expressions.
        (r#"{ getline < FILENAME }"#, "named by an expression"),
        (r#"{ getline line < $2 }"#, "named by an expression"),
        (r#"{ getline < ("a" "b") }"#, "named by an expression"),
        (
            r#"{ getline line < "a" "b" }"#,
            "goes on with an expression",
        ),
        (r#"{ getline line < "a" x }"#, "goes on with an expression"),
        (
            r#"{ getline line < "a" + 1 }"#,
            "goes on with an expression",
        ),
        (
            r#"{ while (getline line < "f" > 0) n++ }"#,
            "goes on with an expression",
        ),
        (r#"{ getline a[1] < b }"#, "named by an expression"),
        (r#"{ getline a [1] < b }"#, "named by an expression"),
        (r#"{ getline $1 < b }"#, "named by an expression"),
        (r#"{ getline $(NF) < b }"#, "named by an expression"),
        (r#"{ getline $$1 < b }"#, "named by an expression"),
        (r#"{ getline $-1 < v }"#, "named by an expression"),
        (r#"{ getline (x) < v }"#, "named by an expression"),
        (r#"BEGIN { getline $x++ < v }"#, "named by an expression"),
        (r#"BEGIN { getline $x-- < v }"#, "named by an expression"),
        (r#"BEGIN { getline $substr(x, 1) < v }"#, "named by an expression"),
        (r#"BEGIN { getline $"1" < v }"#, "named by an expression"),
        (r#"BEGIN { getline func < v }"#, "named by an expression"),
        (r#"BEGIN { getline case < v }"#, "named by an expression"),
        (r#"BEGIN { getline default < NR && x }"#, "named by an expression"),
        (r#"BEGIN { getline default < /"/ }"#, "named by an expression"),
        (r#"BEGIN { getline x y < v }"#, "named by an expression"),
        (r#"BEGIN { getline getline < v }"#, "named by an expression"),
        (r#"BEGIN { getline x < "a\x2fb" }"#, "backslash escapes"),
        (
            r#"BEGIN { getline x < "/inet/tcp/0/example.com/80" }"#,
            "network",
        ),
        (
            r#"BEGIN { getline < ENVIRON["HOME"] "/.netrc" }"#,
            "named by an expression",
        ),
        // ENVIRON, ARGV, ARGC.
        (r#"BEGIN { ENVIRON["X"] = 1 }"#, "changes `ENVIRON`"),
        (r#"BEGIN { ENVIRON [ "X" ]= 1 }"#, "changes `ENVIRON`"),
        (r#"BEGIN { ENVIRON["X"] += 1 }"#, "changes `ENVIRON`"),
        (r#"BEGIN { ENVIRON["X"]++ }"#, "changes `ENVIRON`"),
        (r#"BEGIN { --ENVIRON["X"] }"#, "changes `ENVIRON`"),
        (r#"BEGIN { delete ENVIRON["X"] }"#, "changes `ENVIRON`"),
        (r#"BEGIN { delete ENVIRON }"#, "changes `ENVIRON`"),
        (r#"BEGIN { delete(ENVIRON) }"#, "changes `ENVIRON`"),
        (
            r#"BEGIN { split("a b", ENVIRON) }"#,
            "passes the array `ENVIRON`",
        ),
        (
            r#"BEGIN { sub(/x/, "y", ENVIRON["PATH"]) }"#,
            "changes `ENVIRON`",
        ),
        (
            r#"BEGIN { gsub(/x/, "y", ENVIRON["PATH"]) }"#,
            "changes `ENVIRON`",
        ),
        (r#"{ getline ENVIRON["X"] }"#, "changes `ENVIRON`"),
        (
            r#"BEGIN { ARGV[1] = "/etc/shadow"; ARGC = 2 }"#,
            "changes `ARGV`",
        ),
        (r#"BEGIN { ARGC = 5 }"#, "changes `ARGC`"),
        (r#"BEGIN { ARGC++ }"#, "changes `ARGC`"),
        (r#"BEGIN { ARGC-- }"#, "changes `ARGC`"),
        (r#"BEGIN { ARGC *= 2 }"#, "changes `ARGC`"),
        (r#"BEGIN { ARGV[1] /= 2 }"#, "`/=`"),
        (r#"BEGIN { ARGV[ARGC++] = "x" }"#, "changes `ARGV`"),
        (r#"BEGIN { x[ARGC++] = "x" }"#, "changes `ARGC`"),
        (r#"BEGIN { delete ARGV[1] }"#, "changes `ARGV`"),
        (
            r#"BEGIN { split("/etc/shadow", ARGV) }"#,
            "passes the array `ARGV`",
        ),
        (
            r#"function f(a) { a[1] = "x" } BEGIN { f(ARGV) }"#,
            "passes the array `ARGV`",
        ),
        (r#"BEGIN { asort(ARGV) }"#, "passes the array `ARGV`"),
        (r#"BEGIN { sub(/a/, "b", ARGV[1]) }"#, "changes `ARGV`"),
        (r#"BEGIN { getline ARGV[1] }"#, "changes `ARGV`"),
        (r#"BEGIN { getline ARGC }"#, "changes `ARGC`"),
        (r#"BEGIN { for (ARGC in a) n++ }"#, "changes `ARGC`"),
        (r#"BEGIN { for (ARGV[1] in a) n++ }"#, "changes `ARGV`"),
        (r#"BEGIN { ARGV[1] = ARGV[2] }"#, "changes `ARGV`"),
        (r#"BEGIN { ARGV[1][2] = 1 }"#, "changes `ARGV`"),
        (r#"BEGIN { split("a b", ARGV[5]) }"#, "changes `ARGV`"),
        (r#"BEGIN { split("a b", x, " ", ARGV[5]) }"#, "changes `ARGV`"),
        (r#"BEGIN { match("a", /a/, ARGV[5]) }"#, "changes `ARGV`"),
        (r#"BEGIN { asort(ARGV[5]) }"#, "changes `ARGV`"),
        (r#"function f(a) { a[1] = 1 } BEGIN { f(ARGV[5]) }"#, "changes `ARGV`"),
        (r#"function f(a) { a[1] = 1 } BEGIN { f((ARGV[5])) }"#, "changes `ARGV`"),
        // gawk extensions.
        (r#"@include "lib.awk""#, "`@include`"),
        (r#"@namespace "x""#, "`@namespace`"),
        (r#"BEGIN { f = "system"; @f("id") }"#, "`@`"),
        (r#"$0 ~ @/x/"#, "`@`"),
        (r#"BEGIN { awk::system("id") }"#, "`::`"),
        (r#"BEGIN { awk::ARGV[1] = "x" }"#, "`::`"),
        (r#"BEGIN { print PROCINFO["pid"] }"#, "`PROCINFO`"),
        (r#"BEGIN { BINMODE = 1 }"#, "`BINMODE`"),
        (r#"BEGIN { SYMTAB["ARGC"] = 1 }"#, "`SYMTAB`"),
        (r#"BEGIN { print FUNCTAB["f"] }"#, "`FUNCTAB`"),
        (r#"BEGIN { bindtextdomain("/tmp") }"#, "message-catalogue"),
        (r#"BEGIN { print dcgettext("x") }"#, "message-catalogue"),
        // Unknown functions.
        (r#"BEGIN { foo(1) }"#, "`foo()`"),
        (r#"BEGIN { readfile("x") }"#, "`readfile()`"),
        (r#"BEGIN { mkbool(1) }"#, "`mkbool()`"),
        (r#"BEGIN { print foo (1) }"#, "`foo()`"),
        (r#"BEGIN { print NR(1) }"#, "`NR()`"),
        (r#"BEGIN { print $1system("id") }"#, "`system()`"),
        (r#"BEGIN { print 1esystem("id") }"#, "`esystem()`"),
        // Where awks read `/` differently.
        (r#"{ print length / 2 }"#, "`/` after `length`"),
        (r#"function f(x) { } { print f / 2 }"#, "`/` after `f`"),
        (r#"{ print length /x/ }"#, "`/` after `length`"),
        (r#"{ print substr /x/ }"#, "`/` after `substr`"),
        (r#"{ n++ / 2; print n }"#, "`/` after `++`"),
        (r#"{ n-- /= 2 }"#, "`/` after `--`"),
        (r#"{ x = 6; x /= 2; print x }"#, "`/=`"),
        (r#"{ "s" /= x/ }"#, "`/=`"),
        (r#"BEGIN { printf "/" /= n++ = /|// ARGC + ARGC }"#, "`/=`"),
        (
            "getline getline x /= length()\\\nARGV[1] # f(1); else \"\\\"\"/ $1 length() && system(\"M\")",
            "`/=`",
        ),
        (
            r##"{ n++ /"/; system("id;}"); x = "#" }"##,
            "`/` after `++`",
        ),
        (
            r#"{ x = func /2; system("id"); y = 1/ 3 }"#,
            "`/` after `func`",
        ),
        (
            r#"{ x = case /2; system("id"); y = 1/ 3 }"#,
            "`/` after `case`",
        ),
        (
            r#"{ x = default /2; system("id"); y = 1/ 3 }"#,
            "`/` after `default`",
        ),
        (
            r#"{ x = nextfile /2; system("id"); y = 1/ 3 }"#,
            "`/` after `nextfile`",
        ),
        (r#"{ y = switch (x) /2; system("id"); z = 1/ 3 }"#, "`system()`"),
        (r#"/[/]/"#, "bracket expression"),
        (r#"/[a/]/"#, "bracket expression"),
        (r#"/[]/]/"#, "bracket expression"),
        (r#"/[[:alpha:]/]/"#, "bracket expression"),
        (r#"/[\]/]/"#, "bracket expression"),
        (r#"/[[:alpha]/"#, "character class"),
        (r#"/[[.a.]]/"#, "collating"),
        // Malformed.
        (r#"{ print "abc"#, "string is not terminated"),
        ("{ print \"a\nb\" }", "string is not terminated"),
        ("{ print \"a\\\nb\" }", "continuation inside a string"),
        (r#"/abc"#, "regex is not terminated"),
        ("/a\nb/", "regex is not terminated"),
        ("/a\\\nb/", "continuation inside a regex"),
        ("{ print \"", "string is not terminated"),
        (r#"{ print $1"#, "`{` is not closed"),
        (r#"{ print $1 }}"#, "`}` has no matching `{`"),
        (r#"{ print ($1 }"#, "`}` has no matching `{`"),
        (r#"{ print a[1 }"#, "`}` has no matching `{`"),
        (r#"{ print ) }"#, "`)` has no matching `(`"),
        (r#"{ print $1 \ }"#, "`\\` outside"),
        ("# comment \\\n{ system(\"id\") }", "comment ends with"),
        (r#"{ x = a & b }"#, "unexpected `&`"),
        (r#"{ x = `id` }"#, "unexpected `"),
        (r#"{ print 'a' }"#, "unexpected `'`"),
        ("{ print \"\0\" }", "NUL"),
        ("{ print é }", "unexpected byte"),
    ];

    #[test]
    fn allowed_programs() {
        let refused: Vec<String> = OK
            .iter()
            .filter_map(|p| analyse(p).err().map(|e| format!("{p:?}: {e}")))
            .collect();
        assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
    }

    #[test]
    fn refused_programs() {
        let wrong: Vec<String> = ERR
            .iter()
            .filter_map(|(p, why)| match analyse(p) {
                Ok(f) => Some(format!("{p:?} allowed: {f:?}")),
                Err(e) if !e.contains(why) || !e.starts_with("awk ") => {
                    Some(format!("{p:?}: {e:?} does not say {why:?}"))
                }
                Err(_) => None,
            })
            .collect();
        assert!(wrong.is_empty(), "wrong:\n{}", wrong.join("\n"));
    }

    #[test]
    fn reads_are_the_literal_files() {
        let reads = |p: &str| analyse(p).unwrap().reads;
        assert_eq!(
            reads(r#"{ while ((getline line < "other.txt") > 0) print line }"#),
            ["other.txt"]
        );
        assert_eq!(
            reads(r#"BEGIN { getline x < "a.txt"; getline < "b.txt"; getline y < "a.txt" }"#),
            ["a.txt", "b.txt"]
        );
        assert_eq!(reads(r#"BEGIN { getline < "/dev/stdin" }"#), ["/dev/stdin"]);
        assert!(reads(r#"BEGIN { getline < "-" }"#).is_empty());
        assert!(reads(r#"{ getline; getline x; print x }"#).is_empty());
        assert!(reads(r#"{ print "getline < \"x\"" }"#).is_empty());
        assert_eq!(reads(r#"{ getline $2 < "f" }"#), ["f"]);
        assert_eq!(reads(r#"{ getline a[$1, 2] < "f g" }"#), ["f g"]);
        assert_eq!(reads(r#"{ getline $x++ < "h" }"#), ["h"]);
        assert_eq!(reads(r#"{ getline (x) < "i" }"#), ["i"]);
        assert_eq!(
            reads(r#"{ if ((getline x) < 1) exit }"#),
            Vec::<String>::new()
        );
        assert_eq!(reads(r#"{ getline a[x < 1] }"#), Vec::<String>::new());
        assert!(reads("{ print }").is_empty());
    }

    #[test]
    fn strings_regexes_and_comments_hide_what_they_contain() {
        for p in [
            r#"{ print "system(\"id\") | sh > out" }"#,
            r#"/system\(|>>/ { print }"#,
            r#"$0 ~ "@load" { print "ENVIRON[\"x\"] = 1" }"#,
            "{ print } # system(\"id\") | sh > out @load",
            r#"{ print "a\"b", "\\" }"#,
            r#"/\// { print }"#,
            r#"/[|]/"#,
            r#"/a\[b|c]/"#,
        ] {
            assert!(analyse(p).is_ok(), "{p:?}: {:?}", analyse(p));
        }
    }

    fn kinds(p: &str) -> Vec<Tok<'_>> {
        lex(p).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn slash_is_a_regex_where_an_operand_is_expected() {
        use Tok::*;
        assert_eq!(kinds("/x/"), [Regex]);
        assert_eq!(
            kinds("a / b / c"),
            [Name("a"), Op("/"), Name("b"), Op("/"), Name("c")]
        );
        assert_eq!(kinds("4 /2/ 1"), [Number, Op("/"), Number, Op("/"), Number]);
        assert_eq!(kinds("$1/2"), [Dollar, Number, Op("/"), Number]);
        assert_eq!(
            kinds("(a)/2"),
            [LParen, Name("a"), RParen(false), Op("/"), Number]
        );
        assert_eq!(
            kinds("a[1]/2"),
            [Name("a"), LBracket, Number, RBracket, Op("/"), Number]
        );
        assert_eq!(kinds("\"s\"/2"), [Str("s"), Op("/"), Number]);
        assert_eq!(kinds("getline/2"), [Name("getline"), Op("/"), Number]);
        assert!(lex("a /= 2").is_err());
        assert_eq!(kinds("x ~ /=/"), [Name("x"), Op("~"), Regex]);
        assert_eq!(kinds("a,/x/"), [Name("a"), Comma, Regex]);
        assert_eq!(kinds("!/x/"), [Op("!"), Regex]);
        assert_eq!(kinds("print /x/"), [Name("print"), Regex]);
        assert_eq!(kinds("a\n/x/"), [Name("a"), Newline, Regex]);
        assert_eq!(kinds("a;/x/"), [Name("a"), Semi, Regex]);
        assert_eq!(kinds("{}/x/"), [LBrace, RBrace, Regex]);
        assert_eq!(kinds("$/x/"), [Dollar, Regex]);
        assert_eq!(
            kinds("if (a) /x/"),
            [Name("if"), LParen, Name("a"), RParen(true), Regex]
        );
        assert_eq!(
            kinds("while ((a) > 0) /x/"),
            [
                Name("while"),
                LParen,
                LParen,
                Name("a"),
                RParen(false),
                Op(">"),
                Number,
                RParen(true),
                Regex
            ]
        );
        // Line continuation is whitespace: the `/` still follows `a`.
        assert_eq!(kinds("a \\\n/ 2"), [Name("a"), Op("/"), Number]);
    }

    #[test]
    fn numbers_and_names() {
        use Tok::*;
        assert_eq!(kinds("1e5 .5 1.5e-3 1."), [Number, Number, Number, Number]);
        assert_eq!(kinds("1e"), [Number, Name("e")]);
        assert_eq!(kinds("0x1F"), [Number, Name("x1F")]);
        assert_eq!(kinds("$1x"), [Dollar, Number, Name("x")]);
        assert_eq!(kinds("a_1 _b"), [Name("a_1"), Name("_b")]);
        assert_eq!(
            kinds("a**=2 b**2 c^=2"),
            [
                Name("a"),
                Op("**="),
                Number,
                Name("b"),
                Op("**"),
                Number,
                Name("c"),
                Op("^="),
                Number
            ]
        );
    }

    #[test]
    fn space_before_a_parenthesis_is_recorded() {
        let t = lex("f (x) g(y)").unwrap();
        assert!(t[1].space);
        assert!(!t[5].space);
    }

    #[test]
    fn error_reasons_are_short_phrases() {
        assert_eq!(
            analyse(r#"{ system("id") }"#).unwrap_err(),
            "awk `system()` runs a command"
        );
        assert_eq!(
            analyse(r#"{ print > "f" }"#).unwrap_err(),
            "awk `print >` writes to a file"
        );
        assert_eq!(
            analyse(r#"{ print | "sh" }"#).unwrap_err(),
            "awk `|` pipes to or from a command"
        );
    }

    mod properties {
        #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
        use super::super::analyse;
        use proptest::prelude::*;

        /// Statements that only read and print.
        const SAFE: &[&str] = &[
            "print",
            "print $1",
            "print $1, $2",
            "print ($1 > 5)",
            "printf \"%s\\n\", $1",
            "x = $1 / 2",
            "n++",
            "a[$1]++",
            "if ($1 > 3) print",
            "if (x) /re/ ? n++ : m++",
            "gsub(/a|b/, \"c\")",
            "getline",
            "getline line",
            "getline line < \"f.txt\"",
            "s = s ENVIRON[\"HOME\"]",
            "for (k in a) print k",
            "for (i = 0; i < ARGC; i++) print ARGV[i]",
            "x = \"|> system\"",
            "y = length($0) > 80",
            "close(\"f.txt\")",
        ];

        /// Statements that run, write, or change what is read.
        const DANGEROUS: &[&str] = &[
            "system(\"id\")",
            "print > \"f\"",
            "print >> \"f\"",
            "printf \"x\" > \"f\"",
            "print | \"sh\"",
            "\"id\" | getline",
            "getline < $1",
            "ARGV[1] = \"x\"",
            "ARGC = 3",
            "ENVIRON[\"A\"] = 1",
            "delete ARGV[1]",
            "split(\"a\", ARGV)",
            "print $1, $2 > $3",
            "PROCINFO[\"x\"] = 1",
            "zork(1)",
        ];

        fn separator() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec!["; ", "\n", " ;\n ", "\n\n# note\n"])
        }

        fn program(stmts: &[&str], seps: &[&str]) -> String {
            let mut body = String::new();
            for (i, s) in stmts.iter().enumerate() {
                if i > 0 {
                    body.push_str(seps[i % seps.len()]);
                }
                body.push_str(s);
            }
            format!("{{ {body} }}")
        }

        proptest! {
            #[test]
            fn safe_statements_stay_safe(
                stmts in prop::collection::vec(prop::sample::select(SAFE.to_vec()), 1..8),
                seps in prop::collection::vec(separator(), 1..4),
            ) {
                let p = program(&stmts, &seps);
                prop_assert!(analyse(&p).is_ok(), "{:?}: {:?}", p, analyse(&p));
            }

            #[test]
            fn one_dangerous_statement_is_enough(
                stmts in prop::collection::vec(prop::sample::select(SAFE.to_vec()), 0..6),
                bad in prop::sample::select(DANGEROUS.to_vec()),
                at in 0usize..7,
                seps in prop::collection::vec(separator(), 1..4),
            ) {
                let mut stmts = stmts;
                let at = at.min(stmts.len());
                stmts.insert(at, bad);
                let p = program(&stmts, &seps);
                prop_assert!(analyse(&p).is_err(), "{:?} allowed", p);
            }

            #[test]
            fn never_panics(p in "[ -~\\n\\t]{0,60}") {
                let _ = analyse(&p);
            }

            #[test]
            fn appending_a_system_call_is_refused(p in "[ -~\\n]{0,40}") {
                if analyse(&p).is_ok() {
                    let q = format!("{p}\n{{ system(\"id\") }}");
                    prop_assert!(analyse(&q).is_err(), "{:?} allowed", q);
                }
            }
        }
    }
}
