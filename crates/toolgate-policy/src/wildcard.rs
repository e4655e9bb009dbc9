//! OpenCode's wildcard patterns: `*` is any run of characters (including `/`),
//! `?` is one character, everything else is literal, and the whole string must
//! match. A pattern ending in ` *` also matches the bare command before it, so
//! `ls *` matches `ls` and `ls -la` but not `lsof`.

/// A compiled wildcard pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wildcard {
    source: String,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// `*`: matches everything.
    Any,
    /// No wildcard characters: plain equality.
    Literal,
    /// General pattern; `bare` is the pattern without its trailing ` *`, if it had one.
    Glob {
        bare: Option<String>,
        /// Without `?`: the literal runs between its stars, matched by
        /// searching for each in turn (the usual path rule, `*.env`).
        stars: Option<Stars>,
        bare_stars: Option<Stars>,
    },
}

/// A pattern of literal runs and stars only: `prefix*middle…*suffix`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stars {
    prefix: Box<[u8]>,
    middle: Box<[Box<[u8]>]>,
    suffix: Box<[u8]>,
}

impl Stars {
    /// `None` when the pattern has a `?`, or no star.
    fn new(pattern: &str) -> Option<Stars> {
        if pattern.contains('?') || !pattern.contains('*') {
            return None;
        }
        let mut runs: Vec<&[u8]> = pattern.as_bytes().split(|&b| b == b'*').collect();
        // At least two runs: there is a star.
        let suffix = runs.pop()?;
        let prefix = runs.first().copied().unwrap_or_default();
        let middle = runs
            .iter()
            .skip(1)
            .filter(|run| !run.is_empty())
            .map(|run| Box::<[u8]>::from(*run))
            .collect();
        Some(Stars {
            prefix: prefix.into(),
            middle,
            suffix: suffix.into(),
        })
    }

    /// Whole-text match; ASCII letters of either case the same when `fold`.
    /// Each middle run is taken at its first place after the one before:
    /// with stars only, the earliest place leaves the most room for the
    /// rest, so this finds a match whenever there is one. (A run starts
    /// with a character's first byte, which never occurs inside another
    /// character of valid UTF-8: a byte search finds only whole characters.)
    fn matches(&self, text: &[u8], fold: bool) -> bool {
        let same = |a: &[u8], b: &[u8]| {
            if fold {
                a.eq_ignore_ascii_case(b)
            } else {
                a == b
            }
        };
        let (prefix, suffix) = (&self.prefix[..], &self.suffix[..]);
        if text.len() < prefix.len() + suffix.len()
            || !same(&text[..prefix.len()], prefix)
            || !same(&text[text.len() - suffix.len()..], suffix)
        {
            return false;
        }
        let mut rest = &text[prefix.len()..text.len() - suffix.len()];
        for run in self.middle.iter() {
            match rest.windows(run.len()).position(|window| same(window, run)) {
                Some(at) => rest = &rest[at + run.len()..],
                None => return false,
            }
        }
        true
    }
}

impl Wildcard {
    /// Compile a pattern. Every string is a valid pattern.
    pub fn new(pattern: &str) -> Wildcard {
        let kind = if pattern == "*" {
            Kind::Any
        } else if !pattern.contains(['*', '?']) {
            Kind::Literal
        } else {
            let bare = pattern.strip_suffix(" *");
            Kind::Glob {
                bare: bare.map(str::to_string),
                stars: Stars::new(pattern),
                bare_stars: bare.and_then(Stars::new),
            }
        };
        Wildcard {
            source: pattern.to_string(),
            kind,
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// True when `text` matches the whole pattern with ASCII letters of
    /// either case taken as the same (a file system that ignores case, as
    /// macOS's and Windows' do by default, opens `.ENV` for `.env`).
    pub fn matches_any_case(&self, text: &str) -> bool {
        match &self.kind {
            Kind::Any => true,
            Kind::Literal => self.source.eq_ignore_ascii_case(text),
            Kind::Glob { .. } => self.glob(text, true),
        }
    }

    /// True when `text` matches the whole pattern.
    pub fn matches(&self, text: &str) -> bool {
        match &self.kind {
            Kind::Any => true,
            Kind::Literal => self.source == text,
            Kind::Glob { .. } => self.glob(text, false),
        }
    }

    /// A general pattern's match, or its bare form's.
    fn glob(&self, text: &str, fold: bool) -> bool {
        let Kind::Glob {
            bare,
            stars,
            bare_stars,
        } = &self.kind
        else {
            return false;
        };
        let one = |pattern: &str, stars: &Option<Stars>| match stars {
            Some(stars) => stars.matches(text.as_bytes(), fold),
            None => glob_match_with(pattern, text, fold),
        };
        one(&self.source, stars) || bare.as_deref().is_some_and(|bare| one(bare, bare_stars))
    }
}

/// Iterative matcher with single-star backtracking: O(pattern × text) at worst,
/// never exponential; ASCII letters of either case the same when `fold`.
fn glob_match_with(pattern: &str, text: &str, fold: bool) -> bool {
    let pattern: &[u8] = pattern.as_bytes();
    let text_bytes = text.as_bytes();
    let (mut p, mut t) = (0usize, 0usize);
    // Where to resume after the most recent `*`: (pattern index after it, text index).
    let mut resume: Option<(usize, usize)> = None;
    while t < text_bytes.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    resume = Some((p + 1, t));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += char_len(text_bytes[t]);
                    continue;
                }
                byte if byte == text_bytes[t]
                    || (fold && byte.eq_ignore_ascii_case(&text_bytes[t])) =>
                {
                    p += 1;
                    t += 1;
                    continue;
                }
                _ => {}
            }
        }
        match resume {
            Some((after_star, from)) => {
                // Let the star swallow one more character and try again.
                let next = from + char_len(text_bytes[from]);
                resume = Some((after_star, next));
                p = after_star;
                t = next;
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&byte| byte == b'*')
}

/// The length of the UTF-8 character starting with `lead`.
fn char_len(lead: u8) -> usize {
    match lead {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xff => 4,
        // A continuation byte cannot start a character of valid UTF-8; step one.
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pattern: &str, text: &str, expected: bool) {
        assert_eq!(
            Wildcard::new(pattern).matches(text),
            expected,
            "pattern {pattern:?} against {text:?}"
        );
    }

    #[test]
    fn opencode_semantics() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "", true),
            ("*", "anything at all/with/slashes", true),
            ("ls *", "ls", true),
            ("ls *", "ls -la", true),
            ("ls *", "lsof", false),
            ("git push *", "git push origin main", true),
            ("git push *", "git push", true),
            ("git push *", "git pushx", false),
            ("git *", "git", true),
            ("*.env", ".env", true),
            ("*.env", "config/prod.env", true),
            ("*.env", "config/prod.env.example", false),
            ("*.env.*", "a/.env.local", true),
            ("docs/**", "docs/a/b.md", true),
            ("docs/**", "src/docs/a.md", false),
            ("/tmp/*", "/tmp/x/y", true),
            ("src/?.rs", "src/a.rs", true),
            ("src/?.rs", "src/ab.rs", false),
            ("src/?.rs", "src/é.rs", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("[abc]", "[abc]", true),
            ("[abc]", "a", false),
            ("mcp__github__*", "mcp__github__get_issue", true),
            ("mcp__github__*", "mcp__gitlab__get_issue", false),
            ("rm *", "rm -rf /", true),
            ("npm run dev *", "npm run dev --port 3", true),
            ("npm run dev *", "npm run devx", false),
        ];
        for (pattern, text, expected) in cases {
            check(pattern, text, *expected);
        }
    }

    proptest::proptest! {
        /// The run search of star-only patterns answers as the general
        /// matcher does, in either case mode.
        #[test]
        fn star_runs_agree_with_the_general_matcher(
            pattern in "[ab.*é]{0,8}",
            text in "[abAB.é/]{0,12}",
            fold: bool,
        ) {
            if let Some(stars) = Stars::new(&pattern) {
                proptest::prop_assert_eq!(
                    stars.matches(text.as_bytes(), fold),
                    glob_match_with(&pattern, &text, fold),
                    "pattern {:?} text {:?}", pattern, text
                );
            }
        }
    }

    #[test]
    fn pathological_patterns_terminate() {
        let text = "a".repeat(5000);
        let pattern = format!("{}b", "*a".repeat(50));
        // Quadratic at worst (50 × 5000 steps); an exponential matcher would never return.
        assert!(!Wildcard::new(&pattern).matches(&text));
    }
}
