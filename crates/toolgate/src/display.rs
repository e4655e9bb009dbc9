//! What a person reads: text from an agent made harmless to show, and the
//! one channel toolgate writes its own messages to stderr through.
//!
//! An agent chooses session ids, titles, commands, file names and file
//! contents. Written raw to a terminal, `ESC[2J` would clear the approver's
//! screen, `ESC]0;…BEL` set its title, `ESC[8m` hide the command being asked
//! about, and a right-to-left override (U+202E) show `rm -rf /` as something
//! else. [`shown`] is the one function every such text goes through before a
//! person sees it (the approvers, `check`, `grants`, replay reports, stderr).
//! What it escapes, and how:
//!
//! - newline, carriage return and tab: `\n`, `\r`, `\t`;
//! - the other C0 controls and DEL: `\x1b` (two lowercase hex digits);
//! - the C1 controls U+0080–U+009F, the bidirectional embeddings, overrides
//!   and isolates U+202A–U+202E and U+2066–U+2069, the marks U+200E, U+200F
//!   and U+061C: `\u{9b}`, `\u{202e}` (lowercase hex, as Rust writes them).
//!
//! Everything else is shown as it is, wide characters and backslashes
//! included: a literal `\x1b` typed by the agent reads the same as an escaped
//! ESC, which can mislead but cannot act on the terminal. This is the form
//! tracing-subscriber uses for the fields it escapes.
//!
//! Text shown line by line (a command, a diff, a file's new content) goes
//! through [`shown_lines`]: split at each newline, tabs expanded to spaces
//! (tab stops every 8 columns), each line then through [`shown`].
//!
//! stderr: [`say`] (and the [`say!`](crate::say) macro) writes one message,
//! each of its lines through [`shown`]; the tracing subscriber writes through
//! [`StderrWriter`], which does the same. Both ignore a stderr that fails or
//! whose reader is gone: a warning never panics and never stops a thread
//! (the thread that handles SIGTERM among them).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Write as _;

/// Whether `ch` is shown escaped (see the module's list).
fn escaped(ch: char) -> bool {
    matches!(
        ch,
        '\0'..='\x1f'
            | '\x7f'..='\u{9f}'
            | '\u{061c}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
    )
}

/// `text` as a person may be shown it: control characters, escape
/// sequences' introducers and bidirectional controls made visible (see the
/// module's list); borrowed when there is nothing to escape.
pub fn shown(text: &str) -> Cow<'_, str> {
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for ch in text.chars() {
        match ch {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0'..='\x1f' | '\x7f' => {
                let _ = write!(out, "\\x{:02x}", u32::from(ch));
            }
            ch if escaped(ch) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(ch));
            }
            ch => out.push(ch),
        }
    }
    Cow::Owned(out)
}

/// `text` as lines a person may be shown one by one: split at each `\n`
/// (none is left at the end; a `\r` before it stays, shown), tabs expanded
/// to the next multiple of 8 columns, each line through [`shown`].
pub fn shown_lines(text: &str) -> impl Iterator<Item = String> + '_ {
    let empty = text.is_empty();
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.split('\n').filter(move |_| !empty).map(|line| {
        if !line.contains('\t') {
            return shown(line).into_owned();
        }
        let mut expanded = String::with_capacity(line.len() + 16);
        let mut column = 0;
        for ch in line.chars() {
            if ch == '\t' {
                let to = (column / 8 + 1) * 8;
                expanded.extend(std::iter::repeat_n(' ', to - column));
                column = to;
            } else {
                expanded.push(ch);
                column += 1;
            }
        }
        shown(&expanded).into_owned()
    })
}

/// A list of texts as `["a", "b"]`, each through [`shown`] (where `{:?}`
/// would escape in a form of its own).
pub fn shown_list<S: AsRef<str>>(items: &[S]) -> String {
    let items: Vec<String> = items
        .iter()
        .map(|item| format!("\"{}\"", shown(item.as_ref())))
        .collect();
    format!("[{}]", items.join(", "))
}

/// A message as it goes to stderr: each line through [`shown`], ending in a
/// newline.
fn message(text: &str) -> String {
    let body = text.strip_suffix('\n').unwrap_or(text);
    let mut out = String::with_capacity(body.len() + 1);
    for (index, line) in body.split('\n').enumerate() {
        if index > 0 {
            out.push('\n');
        }
        out.push_str(&shown(line));
    }
    out.push('\n');
    out
}

/// Write bytes to stderr in one piece, ignoring every error.
fn to_stderr(bytes: &[u8]) {
    let stderr = std::io::stderr();
    let mut stderr = stderr.lock();
    let _ = stderr.write_all(bytes);
    let _ = stderr.flush();
}

/// Write one message to stderr, each line through [`shown`]; a stderr that
/// fails (its reader is gone) is ignored.
pub fn say(text: &str) {
    to_stderr(message(text).as_bytes());
}

/// Write a progress line of toolgate's own to stderr as it is (a `\r` in it
/// rewrites the line), with no newline; errors are ignored. Nothing from an
/// agent may be in it.
pub fn progress(text: &str) {
    to_stderr(text.as_bytes());
}

/// [`say`] with `format!` arguments: `say!("toolgate: {err}")`.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::display::say(&::std::format!($($arg)*))
    };
}

/// stderr for the tracing subscriber: every event is written as [`say`]
/// writes (each line through [`shown`], errors ignored).
#[derive(Debug, Clone, Copy, Default)]
pub struct StderrWriter;

impl std::io::Write for StderrWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        say(&String::from_utf8_lossy(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        let table = [
            ("git status", "git status"),
            ("", ""),
            ("a\nb\tc\rd", "a\\nb\\tc\\rd"),
            ("\x1b[2J", "\\x1b[2J"),
            ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
            ("\x1b[8mhidden\x1b[0m", "\\x1b[8mhidden\\x1b[0m"),
            ("\0\x7f", "\\x00\\x7f"),
            ("\u{9b}31m\u{85}", "\\u{9b}31m\\u{85}"),
            ("rm \u{202e}fdp.exe", "rm \\u{202e}fdp.exe"),
            (
                "\u{202a}\u{202b}\u{202c}\u{202d}\u{2066}\u{2067}\u{2068}\u{2069}",
                "\\u{202a}\\u{202b}\\u{202c}\\u{202d}\\u{2066}\\u{2067}\\u{2068}\\u{2069}",
            ),
            ("\u{200e}\u{200f}\u{61c}", "\\u{200e}\\u{200f}\\u{61c}"),
            // Kept: wide characters, other marks, backslashes.
            ("日本 → ⏎ é \\x1b", "日本 → ⏎ é \\x1b"),
            ("\u{a0}\u{200b}", "\u{a0}\u{200b}"),
        ];
        for (text, want) in table {
            assert_eq!(shown(text), want, "{text:?}");
        }
        assert!(matches!(shown("plain"), Cow::Borrowed(_)));
        assert_eq!(shown_list(&["a b", "\x1b[2J"]), "[\"a b\", \"\\x1b[2J\"]");
        assert_eq!(shown_list::<&str>(&[]), "[]");
    }

    #[test]
    fn lines() {
        let table: [(&str, &[&str]); 6] = [
            ("", &[]),
            ("\n", &[""]),
            ("a\nb\n", &["a", "b"]),
            ("a\r\n\x1b[2Jb", &["a\\r", "\\x1b[2Jb"]),
            ("\tx\n  \ty", &["        x", "        y"]),
            ("ab\tc", &["ab      c"]),
        ];
        for (text, want) in table {
            assert_eq!(shown_lines(text).collect::<Vec<_>>(), want, "{text:?}");
        }
    }

    #[test]
    fn messages() {
        assert_eq!(message("one"), "one\n");
        assert_eq!(message("one\n"), "one\n");
        assert_eq!(message("a\x1b[2J\nb\u{202e}"), "a\\x1b[2J\nb\\u{202e}\n");
    }
}
