//! The fast path: a hand lexer for the plainest scripts.
//!
//! It accepts only unquoted words made of a small safe character set,
//! single-quoted strings, double-quoted strings without `$`, `` ` ``, `\`
//! or `!`, and the operators `&&`, `||`, `;` and `|`. Anything else
//! (redirections, expansions, globs, braces, comments, reserved words,
//! assignments, newlines, non-ASCII outside quotes, syntax errors) returns
//! `None` and the script goes to tree-sitter. Within that subset bash's
//! word splitting and quote removal are trivial, so the result is the same
//! as tree-sitter's; a test checks that on the whole corpus.

use crate::syntax::{Item, Word};

/// Words that bash treats specially at the start of a command, and the
/// declaration builtins tree-sitter parses as their own statements.
fn reserved(word: &str) -> bool {
    matches!(
        word,
        "if" | "then"
            | "else"
            | "elif"
            | "fi"
            | "do"
            | "done"
            | "case"
            | "esac"
            | "while"
            | "until"
            | "for"
            | "in"
            | "function"
            | "select"
            | "time"
            | "coproc"
            | "declare"
            | "typeset"
            | "export"
            | "local"
            | "readonly"
            | "unset"
    )
}

fn safe_unquoted(c: u8) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(
            c,
            b'_' | b'.' | b'/' | b',' | b':' | b'=' | b'@' | b'%' | b'+' | b'-'
        )
}

/// Add a command; after `|`, with the names its producer can print.
fn push(items: &mut Vec<Item>, words: Vec<Word>, piped: bool) {
    let stdin_names = if piped {
        items.last().and_then(crate::names::bound)
    } else {
        None
    };
    items.push(Item {
        words,
        piped,
        stdin_names,
        ..Item::default()
    });
}

/// Split a plain script into simple commands, or `None` to use tree-sitter.
pub(crate) fn fast(src: &str) -> Option<Vec<Item>> {
    let b = src.as_bytes();
    let mut items = Vec::new();
    let mut words: Vec<Word> = Vec::new();
    let mut i = 0;
    // The last thing seen was an operator that needs a command after it.
    let mut dangling = false;
    // The next command reads the output of the last one (`|`).
    let mut piped = false;
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' => i += 1,
            b'&' | b'|' | b';' => {
                if words.is_empty() {
                    return None;
                }
                let next = b.get(i + 1).copied();
                let len = match (c, next) {
                    (b'&', Some(b'&')) | (b'|', Some(b'|')) => 2,
                    (b'|', Some(b'&')) | (b'&', _) | (b';', Some(b';')) => return None,
                    _ => 1,
                };
                dangling = c != b';';
                push(&mut items, std::mem::take(&mut words), piped);
                piped = c == b'|' && len == 1;
                i += len;
            }
            _ => {
                let (word, next, quoted) = lex_word(src, i)?;
                // A program name: only the plainest characters (tree-sitter
                // rejects some, such as `@` and `%`, that bash accepts).
                let plain_name =
                    word.bytes().next().is_some_and(|c| {
                        c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'/')
                    }) && word.bytes().all(|c| {
                        c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'/' | b'-')
                    });
                if words.is_empty() && (quoted || !plain_name || reserved(&word)) {
                    return None;
                }
                if !quoted && reserved(&word) {
                    return None;
                }
                words.push(Word {
                    text: word,
                    ..Word::default()
                });
                dangling = false;
                i = next;
            }
        }
    }
    if !words.is_empty() {
        push(&mut items, words, piped);
    } else if dangling || items.is_empty() {
        return None;
    }
    Some(items)
}

/// One word starting at `start`: its decoded text, where it ends, and
/// whether any part of it was quoted.
fn lex_word(src: &str, start: usize) -> Option<(String, usize, bool)> {
    let b = src.as_bytes();
    let mut out = String::new();
    let mut i = start;
    let mut quoted = false;
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' | b'&' | b'|' | b';' => break,
            b'\'' => {
                let close = i + 1 + b.get(i + 1..)?.iter().position(|&x| x == b'\'')?;
                let body = src.get(i + 1..close)?;
                if body.contains('\n') {
                    return None;
                }
                out.push_str(body);
                quoted = true;
                i = close + 1;
            }
            b'"' => {
                let close = i + 1 + b.get(i + 1..)?.iter().position(|&x| x == b'"')?;
                let body = src.get(i + 1..close)?;
                if body.contains(['$', '`', '\\', '!', '\n']) {
                    return None;
                }
                out.push_str(body);
                quoted = true;
                i = close + 1;
            }
            // tree-sitter-bash reads some unquoted `=` specially (`a == b`);
            // keep `=` only in `--flag=value`.
            b'=' if !out.starts_with('-') => return None,
            _ if safe_unquoted(c) => {
                out.push(char::from(c));
                i += 1;
            }
            _ => return None,
        }
    }
    Some((out, i, quoted))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
    use super::*;

    fn texts(src: &str) -> Option<Vec<String>> {
        fast(src).map(|items| items.iter().map(Item::text).collect())
    }

    #[test]
    fn accepts_plain_scripts() {
        assert_eq!(texts("ls -la").unwrap(), ["ls -la"]);
        assert_eq!(
            texts("rg -n 'fn main' src && git status; cat a | wc -l").unwrap(),
            ["rg -n fn main src", "git status", "cat a", "wc -l"]
        );
        assert_eq!(texts("echo \"a b\"c").unwrap(), ["echo a bc"]);
        assert_eq!(texts("ls;").unwrap(), ["ls"]);
    }

    #[test]
    fn hands_everything_else_to_tree_sitter() {
        for src in [
            "",
            "ls &&",
            "&& ls",
            "ls & pwd",
            "ls > f",
            "ls $(x)",
            "ls *.rs",
            "ls {a,b}",
            "ls ~",
            "FOO=1 ls",
            "'ls'",
            "if true",
            "echo \"$x\"",
            "echo 'unterminated",
            "ls\npwd",
            "ls # c",
            "ls |& cat",
            "a;;",
            "ls; ;",
            "echo done",
            "echo é",
            "[ -f x ]",
        ] {
            assert!(fast(src).is_none(), "{src:?} should fall back");
        }
    }
}
