//! GNU sed scripts: does a script only print to standard output?
//!
//! Not an interpreter: a parser that reads a script the way GNU sed 4.9's
//! `compile.c` does (`compile_program`, `compile_address`, `match_slash`,
//! `snarf_char_class`, `mark_subst_opts`, `read_label`, `read_filename`,
//! `read_text`, `read_end_of_cmd`), one function for each of theirs, so that
//! what this module takes for a regex, a replacement, a label, a file name
//! or appended text is exactly what sed takes for one. sed without `-i`
//! writes nothing but standard output, except through these, all refused:
//!
//! * `w FILE`, `W FILE` and the `w FILE` flag of `s` write FILE (even
//!   `/dev/stdout`, `/dev/stderr`, which GNU sed treats specially).
//! * `e` (alone: the pattern space; `e CMD`: CMD) and the `e` flag of `s`
//!   run a shell command.
//!
//! `r FILE` and `R FILE` read FILE: allowed, and reported in
//! [`SedFacts::reads`] so that guards can check the path. Everything else
//! (`s`, `y`, `p`, `d`, `n`, `N`, `=`, `a`/`i`/`c`, labels and branches,
//! blocks, `q`/`Q`/`l`/`L` with a number, `v`, `F`, `z`, comments, ...) only
//! edits the pattern and hold spaces and prints.
//!
//! Also refused, failing closed:
//!
//! * Anything sed itself rejects while parsing (unterminated regex or `s`,
//!   unknown command or `s` flag, `{` without `}`, `y` strings of different
//!   lengths, an address where none is allowed, ...). A few errors sed only
//!   finds later (an invalid regex, a jump to an undefined label, a `v`
//!   version newer than 4.9) are not looked for: sed stops before reading
//!   any input then, so accepting them is harmless.
//! * A backslash, newline, or non-ASCII delimiter for `s`, `y` or `\cREGEXc`
//!   (GNU sed accepts a backslash, but nobody means it).
//! * A NUL byte (sed would see its argument end there).
//! * A non-ASCII character directly followed by `\`, `[`, `]` or `}`, or by
//!   the delimiter of the current `s`, `y` or regex when that delimiter is a
//!   digit or a byte from `@` (0x40) on. In GBK, Big5, Shift-JIS or GB18030
//!   locales sed reads such a byte as the tail of a two- or four-byte
//!   character, so the script would be cut differently there (in
//!   `s/中\/x/` the `\` would not escape the `/`). In UTF-8 and C locales
//!   no ASCII byte is ever part of a multi-byte character.

use crate::{Refusal, RefusalKind};

/// What a sed script does beyond reading its input and printing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SedFacts {
    /// Files read by `r`/`R` (as written after the command, to end of line).
    pub reads: Vec<String>,
}

/// Ok when the script never writes a file or runs a command; Err(short human
/// reason naming the command), e.g. "`sed` command `w out.txt` writes a file".
pub(crate) fn analyse(script: &str) -> Result<SedFacts, Refusal> {
    precheck(script.as_bytes())?;
    let mut p = Parser {
        b: script.as_bytes(),
        i: 0,
        depth: 0,
        reads: Vec::new(),
    };
    p.program()?;
    Ok(SedFacts { reads: p.reads })
}

/// ASCII bytes that some multi-byte locales (GBK, Big5, Shift-JIS) take as
/// the second byte of a character and that matter to the parse wherever a
/// non-ASCII character can stand: `\\` (escapes), `[` and `]` (bracket
/// expressions) and `}` (the end of a label). Letters and digits matter only
/// as delimiters, which `match_slash` checks.
const SWALLOWABLE: &[u8] = b"[\\]}";

fn precheck(b: &[u8]) -> Result<(), Refusal> {
    if b.contains(&0) {
        return Err(bad("a NUL byte"));
    }
    for w in b.windows(2) {
        if !w[0].is_ascii() && SWALLOWABLE.contains(&w[1]) {
            return Err(Refusal::new(format!(
                "`sed` script has a non-ASCII character right before `{}`, which some locales read as one character",
                char::from(w[1])
            )));
        }
    }
    Ok(())
}

fn bad(what: &str) -> Refusal {
    Refusal::new(format!("`sed` script not understood: {what}"))
}

/// Kinds of address, as far as the checks on them need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Addr {
    /// `N`
    Num(u64),
    /// `first~step` with a step above 0
    NumMod,
    /// `+N` or `~N` with N above 0
    Step,
    /// `+0` or `~0`
    Null,
    /// `$`
    Last,
    /// `/re/` or `\cREc`
    Regex,
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    /// Open `{` blocks.
    depth: usize,
    reads: Vec<String>,
}

fn is_blank(c: u8) -> bool {
    matches!(c, b' ' | b'\t')
}

/// C `isspace` in the C locale.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

impl Parser<'_> {
    /// `inchar`: the next byte, consumed; `None` at the end.
    fn inchar(&mut self) -> Option<u8> {
        let c = self.b.get(self.i).copied();
        if c.is_some() {
            self.i += 1;
        }
        c
    }

    /// `savchar`: give back the byte `inchar` just returned (nothing at the end).
    fn savchar(&mut self, c: Option<u8>) {
        if c.is_some() {
            self.i -= 1;
        }
    }

    /// `in_nonblank`: the next byte that is not a space or tab, consumed.
    fn in_nonblank(&mut self) -> Option<u8> {
        loop {
            match self.inchar() {
                Some(c) if is_blank(c) => {}
                other => return other,
            }
        }
    }

    /// The text from `start` to the current position.
    fn text(&self, start: usize) -> String {
        let end = self.i.min(self.b.len());
        let start = start.min(end);
        String::from_utf8_lossy(&self.b[start..end]).into_owned()
    }

    /// `compile_program`: the whole script.
    fn program(&mut self) -> Result<(), Refusal> {
        loop {
            let mut ch = loop {
                match self.inchar() {
                    Some(c) if c == b';' || is_space(c) => {}
                    other => break other,
                }
            };
            if ch.is_none() {
                break;
            }
            let mut a1 = None;
            let mut a2 = None;
            if let Some(a) = self.address(ch)? {
                if a == Addr::Step {
                    return Err(bad("`+N` or `~N` as first address"));
                }
                a1 = Some(a);
                ch = self.in_nonblank();
                if ch == Some(b',') {
                    let c = self.in_nonblank();
                    match self.address(c)? {
                        Some(a) => a2 = Some(a),
                        None => return Err(bad("unexpected `,`")),
                    }
                    ch = self.in_nonblank();
                }
                if a1 == Some(Addr::Num(0))
                    && match a2 {
                        None => ch != Some(b'r'),
                        Some(a) => a != Addr::Regex,
                    }
                {
                    return Err(bad("invalid usage of line address 0"));
                }
            }
            if ch == Some(b'!') {
                ch = self.in_nonblank();
                if ch == Some(b'!') {
                    return Err(bad("multiple `!`s"));
                }
            }
            let Some(cmd) = ch else {
                return Err(bad("missing command"));
            };
            let start = self.i - 1;
            match cmd {
                b'#' => {
                    if a1.is_some() {
                        return Err(bad("an address before a comment"));
                    }
                    while !matches!(self.inchar(), None | Some(b'\n')) {}
                }
                b'v' => {
                    self.read_label();
                }
                b'{' => self.depth += 1,
                b'}' => {
                    if self.depth == 0 {
                        return Err(bad("unexpected `}`"));
                    }
                    if a1.is_some() {
                        return Err(bad("an address before `}`"));
                    }
                    self.read_end_of_cmd()?;
                    self.depth -= 1;
                }
                b'e' => {
                    let c = self.in_nonblank();
                    return Err(match c {
                        None | Some(b'\n') => Refusal::with_kind(
                            RefusalKind::RunsProgram,
                            "`sed` command `e` runs the pattern space as a command",
                        ),
                        Some(_) => {
                            self.savchar(c);
                            let command = self.read_filename();
                            Refusal::with_kind(
                                RefusalKind::RunsProgram,
                                format!("`sed` command `e {command}` runs a command"),
                            )
                        }
                    });
                }
                b'a' | b'i' | b'c' => {
                    let mut c = self.in_nonblank();
                    if c.is_none() {
                        return Err(bad("expected `\\` after `a`, `c` or `i`"));
                    }
                    if c == Some(b'\\') {
                        c = self.inchar();
                    } else {
                        self.savchar(c);
                        c = Some(b'\n');
                    }
                    self.read_text(c);
                }
                b':' => {
                    if a1.is_some() {
                        return Err(bad("an address before `:`"));
                    }
                    if self.read_label().is_empty() {
                        return Err(bad("`:` lacks a label"));
                    }
                }
                b'T' | b'b' | b't' => {
                    self.read_label();
                }
                b'Q' | b'q' | b'L' | b'l' => {
                    if matches!(cmd, b'Q' | b'q') && a2.is_some() {
                        return Err(bad("`q` only uses one address"));
                    }
                    let c = self.in_nonblank();
                    if c.is_some_and(|c| c.is_ascii_digit()) {
                        self.in_integer(c);
                    } else {
                        self.savchar(c);
                    }
                    self.read_end_of_cmd()?;
                }
                b'=' | b'd' | b'D' | b'F' | b'g' | b'G' | b'h' | b'H' | b'n' | b'N' | b'p'
                | b'P' | b'z' | b'x' => self.read_end_of_cmd()?,
                b'r' | b'R' => {
                    let file = self.read_filename();
                    if file.is_empty() {
                        return Err(bad("missing file name after `r`/`R`"));
                    }
                    self.reads.push(file);
                }
                b'w' | b'W' => {
                    let file = self.read_filename();
                    return Err(Refusal::with_kind(
                        RefusalKind::Writes,
                        format!("`sed` command `{} {file}` writes a file", char::from(cmd)),
                    ));
                }
                b's' => self.subst()?,
                b'y' => self.translate()?,
                _ => {
                    let name = String::from_utf8_lossy(&self.b[start..]);
                    let name = name.chars().next().unwrap_or_default();
                    return Err(bad(&format!("unknown command `{}`", name.escape_default())));
                }
            }
        }
        if self.depth > 0 {
            return Err(bad("unmatched `{`"));
        }
        Ok(())
    }

    /// `read_end_of_cmd`: blanks, then `;`, a newline or the end (consumed),
    /// or `}` or `#` (left for the next command).
    fn read_end_of_cmd(&mut self) -> Result<(), Refusal> {
        let c = self.in_nonblank();
        match c {
            Some(b'}' | b'#') => {
                self.savchar(c);
                Ok(())
            }
            None | Some(b'\n' | b';') => Ok(()),
            Some(_) => Err(bad("extra characters after command")),
        }
    }

    /// `in_integer`: digits from `first` on; the byte after them is given back.
    fn in_integer(&mut self, first: Option<u8>) -> u64 {
        let mut n: u64 = 0;
        let mut c = first;
        while let Some(d) = c.filter(u8::is_ascii_digit) {
            n = n.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
            c = self.inchar();
        }
        self.savchar(c);
        n
    }

    /// `compile_address`: an address starting with `ch` (already consumed),
    /// or `None` (nothing more read) when `ch` starts none.
    fn address(&mut self, ch: Option<u8>) -> Result<Option<Addr>, Refusal> {
        match ch {
            Some(c @ (b'/' | b'\\')) => {
                let delim = if c == b'\\' {
                    self.inchar()
                } else {
                    Some(b'/')
                };
                let delim = check_delim(delim, "address regex")?;
                self.match_slash(delim, true, "unterminated address regex")?;
                loop {
                    let f = self.in_nonblank();
                    if !matches!(f, Some(b'I' | b'M')) {
                        self.savchar(f);
                        return Ok(Some(Addr::Regex));
                    }
                }
            }
            Some(c) if c.is_ascii_digit() => {
                let n = self.in_integer(Some(c));
                let t = self.in_nonblank();
                if t != Some(b'~') {
                    self.savchar(t);
                    return Ok(Some(Addr::Num(n)));
                }
                let first = self.in_nonblank();
                if self.in_integer(first) > 0 {
                    Ok(Some(Addr::NumMod))
                } else {
                    Ok(Some(Addr::Num(n)))
                }
            }
            Some(b'+' | b'~') => {
                let first = self.in_nonblank();
                if self.in_integer(first) > 0 {
                    Ok(Some(Addr::Step))
                } else {
                    Ok(Some(Addr::Null))
                }
            }
            Some(b'$') => Ok(Some(Addr::Last)),
            _ => Ok(None),
        }
    }

    /// `match_slash`: a regex (`regex`) or replacement / `y` string up to the
    /// unescaped `delim`, which is consumed. Returns the text as sed stores
    /// it (`\delim` without its backslash, `\` before a newline dropped), or
    /// `Err(unterminated)` when a newline or the end comes first.
    fn match_slash(
        &mut self,
        delim: u8,
        regex: bool,
        unterminated: &str,
    ) -> Result<Vec<u8>, Refusal> {
        let mut buf = Vec::new();
        loop {
            let prev = self.i.checked_sub(1).and_then(|j| self.b.get(j)).copied();
            let c = match self.inchar() {
                None | Some(b'\n') => return Err(bad(unterminated)),
                Some(c) => c,
            };
            if c == delim {
                if (delim.is_ascii_digit() || delim >= 0x40) && prev.is_some_and(|p| !p.is_ascii())
                {
                    return Err(Refusal::new(format!(
                        "`sed` script has a non-ASCII character right before the delimiter `{}`, which some locales read as one character",
                        char::from(delim)
                    )));
                }
                return Ok(buf);
            }
            if c == b'\\' {
                let Some(e) = self.inchar() else {
                    return Err(bad(unterminated));
                };
                if e != b'\n' && (e != delim || (!regex && e == b'&')) {
                    buf.push(b'\\');
                }
                buf.push(e);
            } else if c == b'[' && regex {
                buf.push(c);
                if self.snarf_char_class(&mut buf) != Some(b']') {
                    return Err(bad(unterminated));
                }
                buf.push(b']');
            } else {
                buf.push(c);
            }
        }
    }

    /// `snarf_char_class`: a bracket expression after its `[`, in which
    /// neither the delimiter nor `\` is special. Returns the byte that ended
    /// it: `]` (consumed, not pushed), or a newline or `None` (error).
    fn snarf_char_class(&mut self, buf: &mut Vec<u8>) -> Option<u8> {
        let mut ch = self.inchar();
        if ch == Some(b'^') {
            buf.push(b'^');
            ch = self.inchar();
        }
        if ch == Some(b']') {
            buf.push(b']');
            ch = self.inchar();
        }
        // 0 outside [. [: [=, 1 after the inner `[`, 2 after the opening
        // `.`/`:`/`=`, 3 after the closing one.
        let mut state = 0u8;
        let mut open = 0u8;
        loop {
            let c = match ch {
                None | Some(b'\n') => return ch,
                Some(c) => c,
            };
            let mut reset = true;
            match c {
                b'.' | b':' | b'=' => {
                    if state == 1 {
                        open = c;
                        state = 2;
                        reset = false;
                    } else if state == 2 && c == open {
                        state = 3;
                        reset = false;
                    }
                }
                b'[' => {
                    if state == 0 {
                        state = 1;
                    }
                    reset = false;
                }
                b']' => {
                    if state == 0 || state == 1 {
                        return ch;
                    }
                    if state == 3 {
                        state = 0;
                    }
                }
                _ => {}
            }
            if reset {
                state &= !1;
            }
            buf.push(c);
            ch = self.inchar();
        }
    }

    /// `read_label`: blanks, then up to a blank, `;`, `}`, `#`, newline or
    /// the end (that byte is left for the next command).
    fn read_label(&mut self) -> String {
        let mut c = self.in_nonblank();
        let start = self.i - usize::from(c.is_some());
        while let Some(x) = c {
            if x == b'\n' || is_blank(x) || matches!(x, b';' | b'}' | b'#') {
                break;
            }
            c = self.inchar();
        }
        self.savchar(c);
        self.text(start)
    }

    /// `read_filename`: blanks, then everything to the end of the line (the
    /// newline is consumed, `;` and `}` are part of the name).
    fn read_filename(&mut self) -> String {
        let mut c = self.in_nonblank();
        let start = self.i - usize::from(c.is_some());
        let mut end = start;
        while let Some(x) = c {
            if x == b'\n' {
                break;
            }
            end = self.i;
            c = self.inchar();
        }
        let start = start.min(end);
        String::from_utf8_lossy(&self.b[start..end]).into_owned()
    }

    /// `read_text`: text of `a`, `i`, `c` after `leadin` (already consumed),
    /// to a newline not escaped by a backslash.
    fn read_text(&mut self, leadin: Option<u8>) {
        if leadin.is_none() {
            return;
        }
        loop {
            match self.inchar() {
                None | Some(b'\n') => return,
                Some(b'\\') => {
                    if self.inchar().is_none() {
                        return;
                    }
                }
                Some(_) => {}
            }
        }
    }

    /// `s/regex/replacement/flags`, after the `s`.
    fn subst(&mut self) -> Result<(), Refusal> {
        let delim = check_delim(self.inchar(), "`s`")?;
        self.match_slash(delim, true, "unterminated `s` command")?;
        self.match_slash(delim, false, "unterminated `s` command")?;
        // `mark_subst_opts`
        let (mut global, mut print, mut number) = (false, false, false);
        loop {
            let c = self.in_nonblank();
            match c {
                Some(b'i' | b'I' | b'm' | b'M') => {}
                Some(b'e') => {
                    return Err(Refusal::with_kind(
                        RefusalKind::RunsProgram,
                        "`sed` `s///e` runs the pattern space as a command",
                    ))
                }
                Some(b'p') => {
                    if print {
                        return Err(bad("multiple `p` options to `s`"));
                    }
                    print = true;
                }
                Some(b'g') => {
                    if global {
                        return Err(bad("multiple `g` options to `s`"));
                    }
                    global = true;
                }
                Some(b'w') => {
                    let file = self.read_filename();
                    return Err(Refusal::with_kind(
                        RefusalKind::Writes,
                        format!("`sed` `s///w {file}` writes a file"),
                    ));
                }
                Some(d) if d.is_ascii_digit() => {
                    if number {
                        return Err(bad("multiple number options to `s`"));
                    }
                    number = true;
                    if self.in_integer(c) == 0 {
                        return Err(bad("number option to `s` may not be zero"));
                    }
                }
                Some(b'}' | b'#') => {
                    self.savchar(c);
                    return Ok(());
                }
                None | Some(b'\n' | b';') => return Ok(()),
                Some(b'\r') if self.inchar() == Some(b'\n') => return Ok(()),
                Some(x) => {
                    return Err(bad(&format!(
                        "unknown option `{}` to `s`",
                        char::from(x).escape_default()
                    )))
                }
            }
        }
    }

    /// `y/source/dest/`, after the `y`.
    fn translate(&mut self) -> Result<(), Refusal> {
        let delim = check_delim(self.inchar(), "`y`")?;
        let src = self.match_slash(delim, false, "unterminated `y` command")?;
        let dst = self.match_slash(delim, false, "unterminated `y` command")?;
        if y_len(&src)? != y_len(&dst)? {
            return Err(bad("strings for `y` are different lengths"));
        }
        self.read_end_of_cmd()
    }
}

/// A delimiter for `s`, `y` or `\cREGEXc`: refuse the end, a newline, a
/// backslash and non-ASCII bytes.
fn check_delim(delim: Option<u8>, what: &str) -> Result<u8, Refusal> {
    match delim {
        None | Some(b'\n') => Err(bad(&format!("unterminated {what}"))),
        Some(b'\\') => Err(bad(&format!("a backslash as {what} delimiter"))),
        Some(d) if !d.is_ascii() => Err(bad(&format!("a non-ASCII {what} delimiter"))),
        Some(d) => Ok(d),
    }
}

/// Characters in a `y` string once `normalize_text` has turned its escapes
/// (`\n`, `\t`, `\\`, `\x41`, `\cA`, ...) into bytes, counted the way a
/// UTF-8 locale counts them (an invalid byte is one character).
fn y_len(s: &[u8]) -> Result<usize, Refusal> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c != b'\\' || i + 1 >= s.len() {
            out.push(c);
            i += 1;
            continue;
        }
        let e = s[i + 1];
        i += 2;
        let base: u32 = match e {
            b'a' => {
                out.push(0x07);
                continue;
            }
            b'f' => {
                out.push(0x0c);
                continue;
            }
            b'\n' | b'n' => {
                out.push(b'\n');
                continue;
            }
            b'r' => {
                out.push(b'\r');
                continue;
            }
            b't' => {
                out.push(b'\t');
                continue;
            }
            b'v' => {
                out.push(0x0b);
                continue;
            }
            b'd' => 10,
            b'x' => 16,
            b'o' => 8,
            b'c' => {
                // `\cX` is control-X; `\c\\` is control-backslash.
                if let Some(&x) = s.get(i) {
                    out.push(x.to_ascii_uppercase() ^ 0x40);
                    if x == b'\\' {
                        i += 1;
                        if s.get(i) != Some(&b'\\') {
                            return Err(bad("recursive escaping after `\\c`"));
                        }
                    }
                    i += 1;
                }
                continue;
            }
            // Any other escaped byte stands for itself.
            _ => {
                out.push(e);
                continue;
            }
        };
        // `convert_number`: up to 3 decimal or octal digits, 2 hex digits;
        // without any, the letter itself.
        let mut n: u32 = 0;
        let mut max: u32 = 1;
        let start = i;
        while let Some(d) = s.get(i).and_then(|&d| char::from(d).to_digit(16)) {
            if d >= base || max > 255 {
                break;
            }
            n = n * base + d;
            i += 1;
            max *= base;
        }
        out.push(if i == start { e } else { (n & 0xff) as u8 });
    }
    Ok(out
        .utf8_chunks()
        .map(|c| c.valid().chars().count() + c.invalid().len())
        .sum())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn ok(script: &str) -> Vec<String> {
        match analyse(script) {
            Ok(f) => f.reads,
            Err(e) => panic!("{script:?} refused: {}", e.reason),
        }
    }

    fn err(script: &str) -> String {
        match analyse(script) {
            Ok(f) => panic!("{script:?} accepted: {f:?}"),
            Err(e) => e.reason,
        }
    }

    #[test]
    fn brief_examples_are_ok() {
        for s in [
            "s/^version = //p",
            "s/^/  /",
            "s/foo/bar/g",
            "/^#/d",
            "1,5d",
            "/start/,/end/{p}",
            "s/\\t/    /g",
            "s/([a-z]+)=.*/\\1/",
            "y/abc/xyz/",
            "$!N;s/\\n/ /",
            "1,40p",
            "$p",
            "/fn main/p",
            "1p;5q",
            "/\\[deps\\]/,/^\\[/p",
            "/a\\/b/p",
            "0,/x/p",
            "1~2p",
            "/x/,+3p",
            "s/a/b/2g",
            "/^$/d",
            ":a;N;$!ba;s/\\n/ /g",
            "s#/usr/local#/opt#g",
            "s/[;]/,/g",
            "s/a/b;c/",
            "y/;/,/",
            "/x/{s/a/b/;p}",
            "1!G;h;$!d",
            "n;d",
            "$=",
            "s/a/\\n/",
            "s/'//g",
            "2q",
            "l 80",
            "#n\np",
            "#n",
            "1d # comment",
            "/re/I p",
            "s/x/y/I",
        ] {
            assert_eq!(ok(s), Vec::<String>::new(), "{s}");
        }
    }

    #[test]
    fn brief_examples_are_refused() {
        for s in [
            "w out",
            "1,5w out",
            "p;w x",
            "s/a/b/w x",
            "s/a/b/gw x",
            "s/a/b/e",
            "1e rm -rf /",
            "e",
            "/x/e ls",
            "W x",
            "s|a|b|w x",
            "s/a/b/;e ls",
            "0,/x/s/a/b/e",
            "/a/{w x\n}",
            "s/a/b",
            "{p",
            "s/a/b/z",
            "y/ab/c/",
            "s/x/y/w /dev/null",
            "s/x/y/w /dev/stdout",
            "w /dev/stderr",
        ] {
            err(s);
        }
    }

    #[test]
    fn reasons_name_the_command() {
        assert_eq!(err("w out.txt"), "`sed` command `w out.txt` writes a file");
        assert_eq!(err("1,5W  x y"), "`sed` command `W x y` writes a file");
        assert_eq!(err("s/a/b/gw x"), "`sed` `s///w x` writes a file");
        assert_eq!(
            err("s/a/b/e"),
            "`sed` `s///e` runs the pattern space as a command"
        );
        assert_eq!(
            err("1e rm -rf /"),
            "`sed` command `e rm -rf /` runs a command"
        );
        assert_eq!(
            err("$e"),
            "`sed` command `e` runs the pattern space as a command"
        );
        assert_eq!(
            err("e\np"),
            "`sed` command `e` runs the pattern space as a command"
        );
        assert!(err("s/a/b").contains("unterminated `s`"));
        assert!(err("{p").contains("unmatched `{`"));
        assert!(err("k").contains("unknown command `k`"));
        assert!(err("s/a/b/z").contains("unknown option `z`"));
    }

    #[test]
    fn reads_are_reported() {
        assert_eq!(ok("r /etc/passwd"), ["/etc/passwd"]);
        assert_eq!(ok("R x"), ["x"]);
        assert_eq!(ok("/a/r .env"), [".env"]);
        // The name runs to the end of the line: `;`, `}` and `#` included.
        assert_eq!(ok("r x; p"), ["x; p"]);
        assert_eq!(ok("rfile"), ["file"]);
        assert_eq!(ok("$r  tail.txt \np"), ["tail.txt "]);
        assert_eq!(ok("0r head.txt"), ["head.txt"]);
        assert_eq!(ok("/x/{r a\n};R b\n1r c"), ["a", "b", "c"]);
        assert_eq!(ok("r a # not a comment"), ["a # not a comment"]);
        // What looks like a command after the name is part of it.
        assert_eq!(ok("r x;w y"), ["x;w y"]);
        err("r");
        err("R \np");
        err("/x/{r a}");
    }

    #[test]
    fn write_and_execute_anywhere_are_refused() {
        for s in [
            "w",
            "1w\tout",
            "$!W x",
            "/x/I,/y/M w x",
            "/x/ I w x",
            "0~3w x",
            "1~2 ! w x",
            "p\nw x",
            "{{p};w x}",
            "/x/{\n  s/a/b/\n  w x\n}",
            "s/a/b/ w x",
            "s/a/b/pw x",
            "s/a/b/2 w x",
            "s/a/b/I;s/c/d/ e",
            "s/a/b/pe",
            "s/a/b/ep",
            "s,a,b,e",
            "s\ta\tb\te",
            "s a b e",
            "y/a/b/;e",
            "ecat /etc/passwd",
            "e  ",
            "1,3{e ls\n}",
            "a foo\nw x",
            ":a;e",
            "b end;e",
            "bend\ne",
            "#c\ne",
            "1d # c\nw x",
            "s/[/]/x/w x",
            "/[/]/w x",
            "\\%x%e",
            "s/a\\/b/c/w x",
            "y/a/b/\nW x",
            "s/a/b/\r\nw x",
        ] {
            err(s);
        }
    }

    #[test]
    fn any_delimiter() {
        for s in [
            "s|a|b|",
            "s,a,b,g",
            "s:a:b:",
            "s;a;b;",
            "s}a}b}",
            "s a b ",
            "s\ta\tb\t",
            "sxaxbx",
            "s1a1b1",
            "s&a&b&g",
            "s#a#b#",
            "s|a\\|b|c|",
            "y,a\\,,b\\,,",
            "y|ab|cd|",
            "\\%a/b%p",
            "\\,x,p",
            "\\;x;p",
            "\\%a\\%b%p",
            "{s}a}b}}",
        ] {
            ok(s);
        }
        // The escaped delimiter is literal: the flags start after the real one.
        ok("s|a\\|b|w x|");
        err("s|a\\|b|c|w x");
        ok("s|a\\|b|c|g");
        // Newline, backslash, non-ASCII or no delimiter.
        err("s\na\nb\n");
        err("s\\a\\b\\");
        err("s");
        err("y");
        err("\\");
        err("\\\nx\np");
        err("\\\\x\\p");
        err("sé a é b é");
    }

    #[test]
    fn separators_inside_regex_and_replacement() {
        for s in [
            "s/[;]/,/g",
            "s/a/b;c/",
            "s/a/b}c/",
            "s/;w x/y/",
            "s/x/;w x/",
            "s/x/\\n/g",
            "/;w x/p",
            "/}/p",
            "s/#/x/",
            "y/;/,/",
            "y/}/{/",
            "s/a/\\\n/",
            "s/a\\\nb/c/",
        ] {
            assert_eq!(ok(s), Vec::<String>::new(), "{s}");
        }
        err("s/a/b/;w x");
        err("s/a\n/b/");
        err("s/a/b\n/");
    }

    #[test]
    fn bracket_expressions_in_regexes() {
        // In a bracket expression neither the delimiter nor `\` is special.
        ok("s/[/]/x/");
        ok("s/[\\/]/x/");
        ok("s/[\\]/x/");
        ok("/[/]/p");
        ok("s/[]/]/x/");
        ok("s/[^]/]/x/");
        ok("s/[[:alpha:]/]/x/");
        ok("s/[[:alpha:]]/x/g");
        ok("s/[[.-.]]/x/");
        ok("s/[[=a=]/]/x/");
        // `s/[\/]w x/` is a regex `[\/]w x` that never ends.
        err("s/[\\/]w x/");
        // A newline ends nothing but an error inside brackets.
        err("s/[\n]/x/");
        err("s/[a/x/");
        // `[:` opens a class name that `]` does not close: still inside.
        err("s/[[:]/]/x/");
        err("/[/p");
        // The replacement knows no brackets.
        err("s/a/[/]/");
        ok("s/a/[/");
        // With `[` as the delimiter there are no bracket expressions.
        ok("s[a[b[");
        // `\[` is a literal bracket.
        ok("s/\\[/x/");
    }

    #[test]
    fn addresses() {
        for s in [
            "1p",
            "1,40p",
            "$p",
            "1,$p",
            "1 , 3 p",
            "0~3p",
            "1~2p",
            "1 ~ 2p",
            "1~p",
            "2,~4p",
            "2,+4p",
            "/x/,+3p",
            "/x/,~3p",
            "0,/x/p",
            "0,\\%x%p",
            "/x/I,/y/Mp",
            "/x/MI p",
            "/x/ I M p",
            "/x/i foo",
            "/x/ix",
            "!p",
            "1!p",
            "1! p",
            "1 ! p",
            "$!N",
            "/x/!{p}",
            "+0p",
            "0r x",
            "/a/,/b/!d",
        ] {
            ok(s);
        }
        for s in [
            "0p", "0,3p", "0,$p", "0~0p", "+1p", "~2p", "1,p", "1,", "1", "/x/", "1!", "1!!p",
            "1! !p", "/x", "/x\n/p", "1,3q", "1,3Q", "1#c", "1:a", "1}",
        ] {
            err(s);
        }
    }

    #[test]
    fn blocks() {
        for s in [
            "/x/{p}",
            "/x/{p};p",
            "/x/{p;}",
            "/x/{;p;};",
            "{{{p}}}",
            "1,3{/x/!{p}}",
            "/x/{\n  s/a/b/\n  p\n}",
            "{p}\n#c",
            "{p}#c",
            "{p} ;p",
            "{}",
            "!{p}",
            "{p\n}",
        ] {
            ok(s);
        }
        for s in [
            "{p", "p}", "{p}}", "{p} p", "{p}x", "{{p}", "1{p;1}", "{p;}}",
        ] {
            err(s);
        }
    }

    #[test]
    fn labels_and_branches() {
        for s in [
            ":a;N;$!ba;s/\\n/ /g",
            ":a\nN\n$!ba",
            ": a;b a",
            ":a p",
            "ba",
            "b",
            "b;p",
            "t",
            "T",
            "tx;:x",
            "/x/{b}",
            "/x/{bend};:end",
            "bx#c\n:x",
            ":a#c",
            "b end # c\n:end",
            // A jump to an undefined label is sed's runtime check: harmless.
            "b nowhere",
        ] {
            ok(s);
        }
        err(":");
        err(":;p");
        err(": \np");
        err("1:a");
        // A label ends at `;`, so what follows is a command.
        err(":a;w x");
        err("ba;w x");
        err("ba w x");
        err("b\tend\te");
    }

    #[test]
    fn text_commands() {
        for s in [
            "a foo",
            "1a foo",
            "$a\\\nfoo",
            "i\\foo",
            "c\\\nfoo\\\nbar",
            "a foo; w x",
            "a foo\\\nw x",
            "a foo\\\\\np",
            "1a\\",
            "a\\  \np",
            "a\np",
            "/x/{a foo\n}",
            "/x/{a foo}\n}",
            "1,3c\\\nreplaced",
            "a\te x",
        ] {
            assert_eq!(ok(s), Vec::<String>::new(), "{s}");
        }
        err("a");
        err("1i");
        err("a  ");
        // The text ends at the first unescaped newline.
        err("a foo\nw x");
        err("a foo\\\\\nw x");
        err("a\\\nfoo\nw x");
        err("a\\  \nw x");
        err("/x/{a foo}");
    }

    #[test]
    fn numbers_after_commands() {
        for s in [
            "q", "q5", "q 5", "2q", "2 q 5", "Q", "Q1;", "l", "l 80", "l80;1p", "L", "L 3",
            "/x/{q}", "$!{l 0}",
        ] {
            ok(s);
        }
        for s in ["q x", "q5x", "l a", "qq", "pp", "p x", "d1", "=x"] {
            err(s);
        }
    }

    #[test]
    fn simple_commands() {
        for s in [
            "=",
            "d",
            "D",
            "F",
            "g",
            "G",
            "h",
            "H",
            "n",
            "N",
            "p",
            "P",
            "z",
            "x",
            "h;G;x;g;H;N;n;D;P;z;F;=",
            " \t\n;;p;; \n",
            "",
            ";",
            "\n\n",
            "\x0b\rp\n\x0c",
        ] {
            ok(s);
        }
        for s in ["k", "o", "u", "|", "p\r", "p\x0c", "j", "1", "?", "é"] {
            err(s);
        }
    }

    #[test]
    fn subst_flags() {
        for s in [
            "s/a/b/",
            "s/a/b/g",
            "s/a/b/p",
            "s/a/b/gp",
            "s/a/b/ g p",
            "s/a/b/2",
            "s/a/b/2g",
            "s/a/b/g3p",
            "s/a/b/i",
            "s/a/b/I",
            "s/a/b/m",
            "s/a/b/M",
            "s/a/b/gIpM",
            "s/a/b/;p",
            "s/a/b/#c",
            "s/a/b/ # c",
            "s/a/b/\r\np",
            "/x/{s/a/b/g}",
            "/x/{s/a/b/ g }",
        ] {
            ok(s);
        }
        for s in [
            "s/a/b/gg",
            "s/a/b/pp",
            "s/a/b/0",
            "s/a/b/1 2",
            "s/a/b/z",
            "s/a/b/x",
            "s/a/b/\rp",
            "s/a/b/ E",
            "s/a/b/gp q",
        ] {
            err(s);
        }
        // A `}` after `s` flags closes a block, which needs opening.
        err("s/a/b/}");
    }

    #[test]
    fn replacement_escapes() {
        for s in [
            "s/\\(a\\)/\\1\\2&/",
            "s/a/\\&/",
            "s/a/\\L&\\E\\U\\1\\l\\u/",
            "s/a/\\n\\t/",
            "s&a&\\&&",
            "s/a/\\//",
            "s/a/\\\\/",
            "s/a\\\\/b/",
        ] {
            ok(s);
        }
        // `\\` is one escaped backslash: the next `/` ends the regex.
        err("s/a\\\\/b/w x");
        err("s/a/b\\\\/w x");
    }

    #[test]
    fn translate() {
        for s in [
            "y/abc/xyz/",
            "y/;/,/",
            "y/a\\/b/xyz/",
            "y/a\\nb/xyz/",
            "y/\\\\/x/",
            "y/\\t/x/",
            "y/a\\x41b/xyz/",
            "y/a\\dx/xyz/",
            "y/\\d065/x/",
            "y/\\o101\\o1/xy/",
            "y/\\cA/x/",
            "y/\\c\\\\/x/",
            "y/éà/ea/",
            "y/abc/xyz/;p",
            "y/a/b/ # c",
            "/x/{y/a/b/}",
        ] {
            ok(s);
        }
        for s in [
            "y/ab/c/",
            "y/a/bc/",
            "y/a\\n/b/",
            "y/abc/xyz/g",
            "y/a/b",
            "y/a/",
            "y/\\c\\x/y/",
            "y/a\n/b/",
        ] {
            err(s);
        }
    }

    #[test]
    fn comments_and_version() {
        for s in [
            "#n", "#n\np", "# w x\np", "p # w x", "p;# e\n=", "v", "v 4.2", "v 4.2;p", "v\np",
        ] {
            ok(s);
        }
        err("1#c");
        err("# c\nw x");
        err("v;w x");
    }

    #[test]
    fn locale_and_nul_guards() {
        ok("s/é/e/g");
        ok("s/café/cafe/");
        ok("/中文/p");
        ok("y/éà/ea/");
        ok("a 中文");
        ok("r 文件");
        // Where a GBK or Big5 locale would read the ASCII byte as the tail
        // of a character.
        err("s/中\\/x/");
        err("s/中[/x/");
        err("a 中\\\nw x");
        err("/x/{b中}");
        err("sxa中xRxg;axe");
        err("s1中1b1");
        err("p\0w x");
        err("p\0");
        // Bytes no locale swallows, or that matter nowhere after text.
        ok("s/中|文/x/g");
        ok("s/中{2}/x/");
        ok("s/中~/x/");
        ok("s:é:e:");
        ok("s,中,x,");
        // A delimiter some locales would swallow.
        err("s|中|x|");
        err("s_中_x_");
    }

    #[test]
    fn real_world_scripts() {
        for s in [
            "s/^version = \"\\(.*\\)\"/\\1/p",
            "/^\\[package\\]/,/^\\[/{/^version/p}",
            "s/[[:space:]]*$//",
            "s/\\x1b\\[[0-9;]*m//g",
            "1,/^$/d",
            "/^---$/,/^---$/!d",
            "s/^\\(.\\{80\\}\\).*/\\1/",
            "N;P;D",
            "$!{h;d};x;G",
            "/./,$!d",
            "s/\\s\\+$//;/^$/d",
            "s/.*/\"&\"/",
            "1h;1!H;${g;s/\\n/,/g;p}",
            "/BEGIN/,/END/{//!p}",
            "s/\\(^\\|[^0-9.]\\)\\([0-9]\\+\\)/\\1<\\2>/g",
        ] {
            assert_eq!(ok(s), Vec::<String>::new(), "{s}");
        }
    }
}
