//! The reading of a word when no model says exactly what it is: every
//! argument may name a path, a flag gives its `=VALUE` and whatever follows
//! its first letter, and any word gives what follows `=` and `:`. Also an
//! operand as written, for the models that know a word is one.

use super::{Arg, Role, Word};

/// Every argument may name a path (`role`): flags give their `=VALUE` and
/// whatever follows their first letter (`-f/etc/x`, `-I../inc`).
pub(super) fn generic<'a>(args: &[Word<'a>], role: Role, out: &mut Vec<Arg<'a>>) {
    for word in args {
        generic_word(*word, role, out);
    }
}

pub(super) fn generic_word<'a>(word: Word<'a>, role: Role, out: &mut Vec<Arg<'a>>) {
    let text = word.text;
    if text.is_empty() || text == "-" || text == "--" {
        return;
    }
    if text.starts_with('-') && !text.contains('=') {
        // A flag, or a file whose name starts with `-` (after `--`, or for a
        // program without options): to read rules, the whole word too.
        out.push(Arg {
            external: false,
            ..Arg::new(text, word.marks, role)
        });
    }
    if let Some(long) = text.strip_prefix("--") {
        if let Some((_, value)) = long.split_once('=') {
            out.push(Arg::new(value, word.marks.part(value), role));
        }
        return;
    }
    if text.starts_with('-') {
        if let Some((_, value)) = text.split_once('=') {
            out.push(Arg::new(value, word.marks.part(value), role));
        }
        // Whatever follows any option letter may be that option's value.
        for (i, _) in text.char_indices().skip(2) {
            let value = &text[i..];
            out.push(Arg::new(value, word.marks.part(value), role));
        }
        return;
    }
    out.push(Arg::new(text, word.marks, role));
    if let Some((_, value)) = text.split_once('=') {
        out.push(Arg::new(value, word.marks.part(value), role));
    }
    // `HEAD:secrets/key`, `host:path`: the part after a colon may name a file.
    for (i, _) in text.match_indices(':') {
        let value = &text[i + 1..];
        if !value.is_empty() {
            out.push(Arg {
                external: false,
                ..Arg::new(value, word.marks.part(value), role)
            });
        }
    }
}

/// An operand: a path as written (a leading `-` is a file name here).
pub(super) fn operand<'a>(word: Word<'a>, role: Role, out: &mut Vec<Arg<'a>>) {
    if word.text != "-" && !word.text.is_empty() {
        out.push(Arg::new(word.text, word.marks, role));
    }
}
