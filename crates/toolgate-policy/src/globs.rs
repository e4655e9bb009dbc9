//! Expanding a shell glob on the disk, asked through a trait object.
//!
//! A shell word with glob syntax (`src/*.rs`) names the files the shell finds
//! when the command runs. Without looking at the disk the policy can only ask
//! whether the glob *could* match a guarded file (`*.env.*` could match
//! `src/x.env.rs`), which refuses everyday research. The binary, which may
//! read the disk, installs a [`GlobOracle`] on [`crate::Policy::glob_oracle`];
//! the policy then judges each real match as the literal path it is, and a
//! glob that matches nothing as its own literal text (the shell passes it
//! unchanged). This crate stays pure: it never reads the disk itself, and
//! without an oracle (tests, the pure default) the glob-vs-glob
//! over-approximation stays.
//!
//! What an oracle must do (see [`GlobOracle::expand`]): return every path the
//! shell could produce, over-approximating freely, never under-approximating;
//! [`GlobExpansion::Unknown`] when it cannot tell.

use std::path::{Path, PathBuf};

/// What expanding one glob on the disk gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GlobExpansion {
    /// Every path the shell could expand the glob to (absolute). Empty: it
    /// matches nothing, and the shell passes the word as it is written.
    Matches(Vec<PathBuf>),
    /// Not known (the disk could not be read, too much to visit, syntax this
    /// expansion does not follow): the policy keeps its over-approximation.
    Unknown,
}

/// Expands shell globs on the disk for the policy.
pub trait GlobOracle: Send + Sync + std::fmt::Debug {
    /// Expand `pattern`, an absolute, normalised path whose segments may hold
    /// `*`, `?` and `[...]` (braces already expanded), as bash or dash would
    /// when the command runs, under any shell options the user may have set
    /// (`dotglob`, `globstar`, `nocaseglob`): a superset of what the shell
    /// would produce, or [`GlobExpansion::Unknown`].
    fn expand(&self, pattern: &Path) -> GlobExpansion;

    /// Is there a file, directory or link (followed or not) at `path`
    /// (absolute)? `None` when it cannot be told; the default cannot.
    fn exists(&self, _path: &Path) -> Option<bool> {
        None
    }

    /// A call's judgement begins. An oracle that remembers answers must
    /// give, from here on, none that the disk's changes made before this
    /// point have made wrong. The policy calls it at the start of
    /// [`crate::Policy::prepare`].
    fn begin_call(&self) {}

    /// The path `path` (absolute, not normalised: `link/..` leaves through
    /// the link's target, as the kernel resolves it) reaches on the disk,
    /// every symbolic link followed, component by component; the part that
    /// does not exist is joined lexically. `None` when it cannot be told (a
    /// loop, a directory that cannot be searched). The policy judges a path
    /// by both its lexical form and this one, and one that cannot be
    /// resolved as a place outside the project. The default (an oracle that
    /// only expands globs) sees no links.
    fn resolve(&self, path: &Path) -> Option<PathBuf> {
        Some(path.to_path_buf())
    }

    /// [`GlobOracle::resolve`] of `base.join(relative)`, where `base` is
    /// already a real path (no symbolic link in it): only the components of
    /// `relative` are looked at.
    fn resolve_below(&self, base: &Path, relative: &Path) -> Option<PathBuf> {
        self.resolve(&base.join(relative))
    }

    /// Where the symbolic links met below the directory `dir` (absolute,
    /// normalised) lead, for a program that follows them while it walks the
    /// tree (`grep -R`): the real place of every link reached, the links
    /// below a linked directory too. Empty when `dir` is not a directory or
    /// holds no link; `None` when it cannot be told (a directory that cannot
    /// be read, too much to visit). The default sees no links.
    fn links_below(&self, dir: &Path) -> Option<Vec<PathBuf>> {
        let _ = dir;
        Some(Vec::new())
    }

    /// Does `base.join(relative)` (`base` real, `relative` plain: no `.`
    /// or `..`) lead anywhere else once links are followed? True when it
    /// cannot be told.
    fn leaves_through_link(&self, base: &Path, relative: &Path) -> bool {
        self.resolve_below(base, relative)
            .is_none_or(|real| real != base.join(relative))
    }
}

/// A segment has glob syntax this matcher follows.
pub fn has_glob_chars(segment: &str) -> bool {
    segment.contains(['*', '?', '['])
}

/// Syntax [`segment_matches`] does not follow: quotes and backslashes (the
/// word's text is not its value), extglob groups, expansions. An oracle
/// answers [`GlobExpansion::Unknown`] for a pattern that has any.
pub fn unsupported_glob(pattern: &str) -> bool {
    pattern.contains(['\\', '"', '\'', '$', '`', '{', '}'])
        || ["@(", "!(", "+(", "*(", "?("]
            .iter()
            .any(|group| pattern.contains(group))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum SegTok {
    Lit(char),
    One,
    Star,
    /// A bracket expression: its literal characters, negated or not; `any`
    /// when it holds a range or a class (matched as any character).
    Class {
        chars: Vec<char>,
        negated: bool,
        any: bool,
    },
}

fn segment_tokens(segment: &str) -> Option<Vec<SegTok>> {
    let chars: Vec<char> = segment.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' => {
                if out.last() != Some(&SegTok::Star) {
                    out.push(SegTok::Star);
                }
                i += 1;
            }
            '?' => {
                out.push(SegTok::One);
                i += 1;
            }
            '[' => {
                let mut j = i + 1;
                let negated = matches!(chars.get(j), Some('!' | '^'));
                if negated {
                    j += 1;
                }
                let start = j;
                let mut set = Vec::new();
                let mut any = false;
                loop {
                    match chars.get(j) {
                        // An unterminated bracket (or one cut by `/`): not followed.
                        None => return None,
                        Some(']') if j > start => break,
                        Some('[') if matches!(chars.get(j + 1), Some(':' | '=' | '.')) => {
                            any = true;
                            let close = chars.get(j + 1).copied();
                            let end = (j + 2..chars.len().saturating_sub(1))
                                .find(|&k| Some(chars[k]) == close && chars[k + 1] == ']')?;
                            j = end + 2;
                        }
                        Some(&c) => {
                            if chars.get(j + 1) == Some(&'-')
                                && chars.get(j + 2).is_some_and(|&d| d != ']')
                            {
                                any = true;
                                j += 3;
                            } else {
                                set.push(c);
                                j += 1;
                            }
                        }
                    }
                }
                out.push(SegTok::Class {
                    chars: set,
                    negated,
                    any,
                });
                i = j + 1;
            }
            c => {
                out.push(SegTok::Lit(c));
                i += 1;
            }
        }
    }
    Some(out)
}

/// One glob token matches one character, case either way (`nocaseglob`):
/// a superset of both readings.
fn token_matches(token: &SegTok, c: char) -> bool {
    let same = |a: char, b: char| a == b || a.to_lowercase().eq(b.to_lowercase());
    match token {
        SegTok::Star | SegTok::One => true,
        SegTok::Lit(l) => same(*l, c),
        SegTok::Class {
            chars,
            negated,
            any,
        } => {
            *any || (chars.contains(&c) != *negated)
                || (chars.iter().any(|&k| same(k, c)) != *negated)
        }
    }
}

/// Glob matching with one backtracking point (the last `*`): every other
/// token matches exactly one character, so this is exact and linear-ish,
/// and it allocates nothing.
fn tokens_match(tokens: &[SegTok], name: &[char]) -> bool {
    let (mut t, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match tokens.get(t) {
            Some(SegTok::Star) => {
                star = Some((t, n));
                t += 1;
            }
            Some(token) if token_matches(token, name[n]) => {
                t += 1;
                n += 1;
            }
            _ => match star {
                Some((st, sn)) => {
                    t = st + 1;
                    n = sn + 1;
                    star = Some((st, sn + 1));
                }
                None => return false,
            },
        }
    }
    tokens[t..].iter().all(|token| *token == SegTok::Star)
}

/// One path segment of a glob, parsed once, matched against many names.
#[derive(Debug, Clone)]
pub struct SegmentPattern {
    tokens: Vec<SegTok>,
}

impl SegmentPattern {
    /// `None`: syntax not followed (an unterminated bracket).
    pub fn new(segment: &str) -> Option<SegmentPattern> {
        Some(SegmentPattern {
            tokens: segment_tokens(segment)?,
        })
    }

    /// Whether the file `name` could match; see [`segment_matches`].
    pub fn matches(&self, name: &str) -> bool {
        let chars: Vec<char> = name.chars().collect();
        tokens_match(&self.tokens, &chars)
    }
}

/// Whether a file `name` could match the glob `segment` (one path segment:
/// `*`, `?`, `[...]`, `[!...]`, `[^...]`), over-approximated for every shell
/// option the user may have set: a leading dot is matched like any other
/// character (`dotglob`), case is matched either way (`nocaseglob`), and a
/// bracket holding a range or a class matches any character (ranges follow
/// the locale's collation). `None`: syntax not followed (an unterminated
/// bracket).
pub fn segment_matches(segment: &str, name: &str) -> Option<bool> {
    Some(SegmentPattern::new(segment)?.matches(name))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
    use super::*;

    #[test]
    fn segments() {
        let table: &[(&str, &str, Option<bool>)] = &[
            ("*.rs", "a.rs", Some(true)),
            ("*.rs", "a.rs.bak", Some(false)),
            ("*.rs", ".hidden.rs", Some(true)),
            ("*", ".env", Some(true)),
            (".en?", ".env", Some(true)),
            (".en?", ".envx", Some(false)),
            ("?", "", Some(false)),
            ("[ab].rs", "b.rs", Some(true)),
            ("[ab].rs", "c.rs", Some(false)),
            ("[!ab].rs", "c.rs", Some(true)),
            ("[^ab].rs", "a.rs", Some(false)),
            ("[]a]", "]", Some(true)),
            ("[!]]", "]", Some(false)),
            ("[a-c]x", "zx", Some(true)),
            ("[[:digit:]]", "q", Some(true)),
            ("*.RS", "a.rs", Some(true)),
            ("[!A]", "a", Some(true)),
            ("x[ab", "xa", None),
            ("a*b*c", "abxbyc", Some(true)),
            ("a*b*c", "acb", Some(false)),
            ("**", "anything", Some(true)),
            ("*a", "aaa", Some(true)),
            ("*?x", "ax", Some(true)),
            ("*?x", "x", Some(false)),
            ("a*", "a", Some(true)),
            ("*.env.*", "x.env.rs", Some(true)),
            ("*.env.*", "x.env", Some(false)),
            ("[Ab]*", "ax", Some(true)),
            ("", "", Some(true)),
            ("", "a", Some(false)),
        ];
        for (segment, name, expected) in table {
            assert_eq!(
                segment_matches(segment, name),
                *expected,
                "{segment} vs {name}"
            );
        }
    }
}
