//! Quote removal: decode the pieces of a word exactly as bash would, and
//! note anything that bash would expand (globs, braces, `~`, `$`).

use crate::syntax::Word;

/// Builds one word from its pieces (a word can be a concatenation of
/// unquoted text, quoted strings and expansions).
#[derive(Debug, Default)]
pub(crate) struct WordBuilder {
    word: Word,
    /// Whether anything has been appended yet (for the leading `~`).
    started: bool,
    /// Open unquoted `{` seen, each with "a separator (`,` or `..`) was seen inside".
    braces: Vec<bool>,
    /// The previous character was an unquoted `.` (for `{a..b}`).
    prev_dot: bool,
    /// Something could not be decoded with certainty.
    pub uncertain: Option<String>,
    /// The names bound of the last substitution or loop variable appended.
    pub names: Option<Vec<String>>,
    /// With `names`: recorded outside double quotes.
    pub names_split: bool,
    /// With `names`: the text the whole word must be for them to hold.
    pub names_text: Option<String>,
    /// Inside a double-quoted string.
    pub in_quotes: bool,
}

impl WordBuilder {
    pub(crate) fn finish(self) -> Word {
        let mut word = self.word;
        // Only a word that is exactly one expansion keeps its bound.
        if self.names_text.as_deref() == Some(word.text.as_str()) {
            word.names = self.names;
            word.names_split = self.names_split;
        }
        if word.expansion.as_deref() != Some(word.text.as_str()) {
            word.pipe = false;
        }
        word
    }

    /// Mark the word as a process substitution.
    pub(crate) fn pipe(&mut self) {
        self.word.pipe = true;
    }

    /// Append a character that bash treats literally (quoted or escaped).
    pub(crate) fn quoted(&mut self, c: char) {
        self.started = true;
        self.prev_dot = false;
        if c == ',' {
            // Conservative: a quoted separator is treated like an unquoted one.
            if let Some(top) = self.braces.last_mut() {
                *top = true;
            }
        }
        self.word.text.push(c);
    }

    pub(crate) fn quoted_str(&mut self, s: &str) {
        for c in s.chars() {
            self.quoted(c);
        }
    }

    /// Append an expansion (`$X`, `${X}`, `$(...)`, ...) by its source text.
    pub(crate) fn expansion(&mut self, source: &str) {
        self.started = true;
        self.prev_dot = false;
        if self.word.expansion.is_none() {
            self.word.expansion = Some(source.to_string());
        }
        self.word.text.push_str(source);
    }

    /// Append an unquoted character, noting globs, braces and a leading `~`.
    pub(crate) fn unquoted(&mut self, c: char) {
        let first = !self.started;
        self.started = true;
        let dot = c == '.';
        match c {
            '*' | '?' | '[' => self.glob(c),
            '~' if first => self.word.tilde = true,
            '{' => self.braces.push(false),
            ',' => {
                if let Some(top) = self.braces.last_mut() {
                    *top = true;
                }
            }
            '.' if self.prev_dot => {
                if let Some(top) = self.braces.last_mut() {
                    *top = true;
                }
            }
            '}' => {
                let closed = self.braces.pop();
                if closed == Some(true) {
                    self.glob('{');
                }
            }
            '$' | '`' => {
                self.word.expansion.get_or_insert_with(|| c.to_string());
            }
            '\'' | '"' => {
                self.uncertain = Some(format!("stray quote `{c}`"));
            }
            _ => {}
        }
        self.prev_dot = dot;
        self.word.text.push(c);
    }

    fn glob(&mut self, c: char) {
        if self.word.glob.is_none() {
            self.word.glob = Some(c);
        }
    }

    /// Decode the source of an unquoted word: backslash escapes, line continuations.
    pub(crate) fn unquoted_source(&mut self, raw: &str) {
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some('\n') => {}
                    Some(next) => self.quoted(next),
                    None => self.quoted('\\'),
                }
            } else {
                self.unquoted(c);
            }
        }
    }

    /// Decode the content of a double-quoted string piece (no expansions inside).
    pub(crate) fn double_quoted_source(&mut self, raw: &str) {
        let mut chars = raw.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.peek().copied() {
                    Some('\n') => {
                        chars.next();
                    }
                    Some(next @ ('$' | '`' | '"' | '\\')) => {
                        chars.next();
                        self.quoted(next);
                    }
                    _ => self.quoted('\\'),
                }
            } else {
                self.quoted(c);
            }
        }
    }

    /// Decode an ANSI-C string `$'...'` (the whole source, with `$'` and `'`).
    pub(crate) fn ansi_c_source(&mut self, raw: &str) {
        let body_quotes = raw.get(2..).is_some_and(|b| b.contains("\\'"));
        self.word.ansi_c_lead = !self.started && !body_quotes && self.word.bash_only.is_none();
        if body_quotes {
            self.word.ansi_c_lead = false;
        }
        // dash reads `$'\'' …'` as `$`, `'\'` and more shell code.
        self.word
            .bash_only
            .get_or_insert_with(|| "ANSI-C quoting `$'…'`".to_string());
        let Some(body) = raw.strip_prefix("$'").and_then(|s| s.strip_suffix('\'')) else {
            self.uncertain = Some(format!("ANSI-C string `{raw}`"));
            return;
        };
        match decode_ansi_c(body) {
            Some(s) => self.quoted_str(&s),
            None => {
                self.uncertain = Some(format!(
                    "ANSI-C string `{raw}` with an escape that cannot be decoded"
                ));
                self.expansion(raw);
            }
        }
    }
}

/// Decode the body of `$'...'`. `None` when an escape cannot be decoded with
/// certainty (`\c`, a NUL byte, an invalid code point).
pub(crate) fn decode_ansi_c(body: &str) -> Option<String> {
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        let simple = match e {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'e' | 'E' => Some('\u{1b}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' => Some('\\'),
            '\'' => Some('\''),
            '"' => Some('"'),
            '?' => Some('?'),
            _ => None,
        };
        if let Some(s) = simple {
            out.push(s);
            continue;
        }
        let (radix, max) = match e {
            '0'..='7' => (8, 3),
            'x' => (16, 2),
            'u' => (16, 4),
            'U' => (16, 8),
            'c' => return None,
            other => {
                out.push('\\');
                out.push(other);
                continue;
            }
        };
        let mut value: u32 = 0;
        let mut digits = 0;
        if radix == 8 {
            value = e.to_digit(8)?;
            digits = 1;
        }
        while digits < max {
            match chars.peek().and_then(|d| d.to_digit(radix)) {
                Some(d) => {
                    value = value.checked_mul(radix)?.checked_add(d)?;
                    digits += 1;
                    chars.next();
                }
                None => break,
            }
        }
        if digits == 0 {
            // `\x` with no digits stays as written.
            out.push('\\');
            out.push(e);
            continue;
        }
        if value == 0 {
            return None;
        }
        // `\xHH` and `\NNN` give bytes: only ASCII is the same character in UTF-8.
        if matches!(e, 'x' | '0'..='7') && value > 0x7f {
            return None;
        }
        out.push(char::from_u32(value)?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
    use super::*;

    fn unquoted(s: &str) -> Word {
        let mut b = WordBuilder::default();
        b.unquoted_source(s);
        b.finish()
    }

    #[test]
    fn escapes_and_globs() {
        assert_eq!(unquoted("\\-delete").text, "-delete");
        assert_eq!(unquoted("\\-delete").glob, None);
        assert_eq!(unquoted("*.rs").glob, Some('*'));
        assert_eq!(unquoted("\\*.rs").glob, None);
        assert_eq!(unquoted("fi\\\nnd").text, "find");
        assert!(unquoted("~/x").tilde);
        assert!(!unquoted("a~/x").tilde);
        assert_eq!(unquoted("@{u}").glob, None);
        assert_eq!(unquoted("-{delete,print}").glob, Some('{'));
        assert_eq!(unquoted("{1..3}").glob, Some('{'));
        assert_eq!(unquoted("a{b}c").glob, None);
    }

    #[test]
    fn ansi_c() {
        assert_eq!(decode_ansi_c("-\\x64elete").as_deref(), Some("-delete"));
        assert_eq!(decode_ansi_c("\\055delete").as_deref(), Some("-delete"));
        assert_eq!(decode_ansi_c("\\u002ddelete").as_deref(), Some("-delete"));
        assert_eq!(decode_ansi_c("a\\'b").as_deref(), Some("a'b"));
        assert_eq!(decode_ansi_c("a\\x00b"), None);
        assert_eq!(decode_ansi_c("\\cA"), None);
        assert_eq!(decode_ansi_c("\\q").as_deref(), Some("\\q"));
    }
}
