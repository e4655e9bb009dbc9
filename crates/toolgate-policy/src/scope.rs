//! Sub-session scopes (Roo Code's subtask permissions): what a parent lets a
//! child session touch at all.
//!
//! A [`Scope`] is a list of [`ScopeLayer`]s, the outermost ancestor's first, one
//! for every session in the chain that narrowed it. A call must pass every
//! layer (AND between layers):
//!
//! - `allowedTools`: the tool must match one entry (OR within the layer);
//! - `deniedTools`: the tool must match none;
//! - `filePatterns`: every path the call names must match one glob;
//! - `commandPatterns`: every simple command of a shell call must match one pattern.
//!
//! A child can therefore only narrow: adding a layer never admits a call that
//! the layers before it refused, and the order of layers changes nothing.
//! Tool entries are matched by permission name across agents, as rules are:
//! an entry covers the tool of that name, and every tool whose permission is
//! the entry's own permission name (`Read` covers `read_file`, `view` and
//! `read`; `bash` and `Bash` both cover `shell` and `run_shell_command`).
//! Entries with `*` or `?` are OpenCode wildcards matched against the tool
//! name and its permission name. An entry that names no tool the registry,
//! the policy file or MCP knows is refused (see `Policy::scope_layer`).
//!
//! With `patternSyntax` `glob` (the default), file patterns are path globs
//! (`*` stays inside one directory, `**` crosses them) matched against the
//! project-relative path, or the absolute path for a file outside the
//! project, and command patterns are OpenCode wildcards, as in
//! `permission.bash`; a pattern that reads as a regular expression (see
//! [`regex_like`]) is refused rather than misread. With `patternSyntax`
//! `regex` (Roo Code's), both are regular expressions of the `regex` crate,
//! matched against the whole subject (`src/.*` is `^(?:src/.*)$`), at most
//! [`MAX_REGEX_LEN`] bytes each and compiled within [`REGEX_SIZE_LIMIT`]:
//! matching takes time linear in the subject, whatever the pattern.
//!
//! The tools listed in `alwaysAvailableTools` pass `allowedTools` and
//! `deniedTools`, so a parent can never trap a child without a way to finish.
//!
//! A tool of unknown kind (an MCP tool, a tool of an agent toolgate does not
//! know) passes only where every layer names it in `allowedTools`; then every
//! path-like field of its input (any depth) is held against `filePatterns`
//! and every simple command of a command-like field against
//! `commandPatterns` (see `Policy::evaluate`).

use std::collections::HashSet;
use std::sync::Arc;

use globset::{GlobBuilder, GlobMatcher};
use regex::{RegexBuilder, RegexSet, RegexSetBuilder};

use crate::wildcard::Wildcard;

/// The narrowing one session asks for (the policy's view of `permissions` in
/// `session_start`). `None` means "no limit of this sort".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopeRules {
    /// Tools the session may use at all.
    pub allowed_tools: Option<Vec<String>>,
    /// Tools the session may never use.
    pub denied_tools: Option<Vec<String>>,
    /// Globs every file path must match one of.
    pub file_patterns: Option<Vec<String>>,
    /// Patterns every simple shell command must match one of.
    pub command_patterns: Option<Vec<String>>,
    /// How `file_patterns` and `command_patterns` are read: `glob` (`None`
    /// too) or `regex`, as written.
    pub pattern_syntax: Option<String>,
}

/// The longest regular expression a scope takes, in bytes.
pub const MAX_REGEX_LEN: usize = 1024;

/// The most regular expressions one list (`filePatterns`, `commandPatterns`)
/// takes.
pub const MAX_REGEX_PATTERNS: usize = 256;

/// The most memory one list of scope regular expressions may take once
/// compiled, in bytes: its program, and separately the cache of its lazy
/// DFA. Each expression alone must fit too.
pub const REGEX_SIZE_LIMIT: usize = 256 * 1024;

/// How a scope's file and command patterns are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternSyntax {
    /// Path globs and OpenCode wildcards (the default).
    Glob,
    /// Regular expressions matched against the whole subject (Roo Code's).
    Regex,
}

impl PatternSyntax {
    /// Read `patternSyntax`.
    pub fn parse(value: Option<&str>) -> Result<PatternSyntax, ScopeError> {
        match value {
            None | Some("glob") => Ok(PatternSyntax::Glob),
            Some("regex") => Ok(PatternSyntax::Regex),
            Some(other) => Err(ScopeError {
                field: "patternSyntax",
                pattern: other.to_string(),
                reason: "expected `glob` or `regex`".to_string(),
            }),
        }
    }
}

/// A pattern that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeError {
    /// The field (`filePatterns`, ...).
    pub field: &'static str,
    /// The pattern as written.
    pub pattern: String,
    /// Why it cannot be used.
    pub reason: String,
}

impl std::fmt::Display for ScopeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let noun = match self.field {
            "allowedTools" | "deniedTools" => "entry",
            "patternSyntax" => "value",
            _ => "pattern",
        };
        write!(
            f,
            "`permissions.{}` has an unusable {noun} `{}`: {}",
            self.field, self.pattern, self.reason
        )
    }
}

impl std::error::Error for ScopeError {}

/// One `allowedTools` or `deniedTools` entry, compiled.
#[derive(Debug, Clone)]
struct ToolEntry {
    /// The entry as written: matched against the tool name and its permission.
    pattern: Wildcard,
    /// The permission name of the tool the entry names, when it names one
    /// whose permission is another name (`Read`: `read`): every tool with
    /// that permission is covered too.
    permission: Option<String>,
}

impl ToolEntry {
    fn names(&self, tool: &str, permission: &str) -> bool {
        self.pattern.matches(tool)
            || self.pattern.matches(permission)
            || self.permission.as_deref() == Some(permission)
    }
}

impl AsRef<str> for ToolEntry {
    fn as_ref(&self) -> &str {
        self.pattern.as_str()
    }
}

/// One file or command pattern, compiled.
#[derive(Debug, Clone)]
enum Matcher {
    Glob(GlobMatcher),
    Wildcard(Wildcard),
    /// A whole list of regular expressions, compiled together so that the
    /// list is bounded as one.
    Regex(RegexSet),
}

impl Matcher {
    fn is_match(&self, subject: &str) -> bool {
        match self {
            Matcher::Glob(glob) => glob.is_match(subject),
            Matcher::Wildcard(wildcard) => wildcard.matches(subject),
            Matcher::Regex(set) => set.is_match(subject),
        }
    }
}

/// One session's narrowing, compiled.
#[derive(Debug, Clone)]
pub struct ScopeLayer {
    session: String,
    rules: ScopeRules,
    syntax: PatternSyntax,
    allowed: Option<Vec<ToolEntry>>,
    denied: Vec<ToolEntry>,
    files: Option<Vec<Matcher>>,
    commands: Option<Vec<Matcher>>,
}

impl ScopeLayer {
    /// Compile the narrowing that `session` asked for, with tool entries
    /// matched as written (against the tool name and its permission name).
    /// The broker compiles with [`ScopeLayer::resolved`] (through
    /// `Policy::scope_layer`), which also knows the tool names.
    pub fn new(session: &str, rules: ScopeRules) -> Result<ScopeLayer, ScopeError> {
        ScopeLayer::resolved(session, rules, |_| Ok(None))
    }

    /// Compile the narrowing that `session` asked for. `resolve` judges each
    /// tool entry that is not a wildcard: `Ok(Some(permission))` when it
    /// names a tool whose permission is another name (the entry covers every
    /// tool with that permission), `Ok(None)` to match it as written, `Err`
    /// with the reason when it names nothing.
    pub fn resolved(
        session: &str,
        rules: ScopeRules,
        resolve: impl Fn(&str) -> Result<Option<String>, String>,
    ) -> Result<ScopeLayer, ScopeError> {
        let syntax = PatternSyntax::parse(rules.pattern_syntax.as_deref())?;
        let entries = |field: &'static str, list: &Option<Vec<String>>| match list {
            None => Ok(None),
            Some(list) => list
                .iter()
                .map(|entry| {
                    let permission = if entry.contains(['*', '?']) {
                        None
                    } else {
                        resolve(entry).map_err(|reason| ScopeError {
                            field,
                            pattern: entry.clone(),
                            reason,
                        })?
                    };
                    Ok(ToolEntry {
                        pattern: Wildcard::new(entry),
                        permission,
                    })
                })
                .collect::<Result<Vec<_>, ScopeError>>()
                .map(Some),
        };
        let patterns = |field: &'static str, list: &Option<Vec<String>>| match list {
            None => Ok(None),
            Some(list) if syntax == PatternSyntax::Regex => {
                compile_regex_list(field, list).map(Some)
            }
            Some(list) => list
                .iter()
                .map(|pattern| compile_pattern(field, pattern))
                .collect::<Result<Vec<_>, ScopeError>>()
                .map(Some),
        };
        Ok(ScopeLayer {
            session: session.to_string(),
            syntax,
            allowed: entries("allowedTools", &rules.allowed_tools)?,
            denied: entries("deniedTools", &rules.denied_tools)?.unwrap_or_default(),
            files: patterns("filePatterns", &rules.file_patterns)?,
            commands: patterns("commandPatterns", &rules.command_patterns)?,
            rules,
        })
    }

    /// A layer that admits no tool but the always-available ones: what an
    /// unusable scope becomes, so that it fails closed.
    pub fn deny_all(session: &str) -> ScopeLayer {
        ScopeLayer {
            session: session.to_string(),
            rules: ScopeRules {
                allowed_tools: Some(Vec::new()),
                ..ScopeRules::default()
            },
            syntax: PatternSyntax::Glob,
            allowed: Some(Vec::new()),
            denied: Vec::new(),
            files: None,
            commands: None,
        }
    }

    /// The session that added this layer.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The narrowing as written.
    pub fn rules(&self) -> &ScopeRules {
        &self.rules
    }

    /// True when the layer limits nothing.
    pub fn is_empty(&self) -> bool {
        self.allowed.is_none()
            && self.denied.is_empty()
            && self.files.is_none()
            && self.commands.is_none()
    }
}

fn empty_pattern(field: &'static str) -> ScopeError {
    let what = if field == "filePatterns" {
        "path"
    } else {
        "command"
    };
    ScopeError {
        field,
        pattern: String::new(),
        reason: format!("an empty pattern matches no {what}"),
    }
}

/// Compile a list of regular expressions into one matcher (none for an empty
/// list, which admits nothing). Each is checked alone first, so that an
/// error names it.
fn compile_regex_list(field: &'static str, list: &[String]) -> Result<Vec<Matcher>, ScopeError> {
    if list.len() > MAX_REGEX_PATTERNS {
        return Err(ScopeError {
            field,
            pattern: list.get(MAX_REGEX_PATTERNS).cloned().unwrap_or_default(),
            reason: format!(
                "the list has {} regular expressions, more than the limit of {MAX_REGEX_PATTERNS}",
                list.len()
            ),
        });
    }
    for pattern in list {
        if pattern.is_empty() {
            return Err(empty_pattern(field));
        }
        check_regex(pattern).map_err(|reason| ScopeError {
            field,
            pattern: pattern.clone(),
            reason,
        })?;
    }
    if list.is_empty() {
        return Ok(Vec::new());
    }
    RegexSetBuilder::new(list.iter().map(|pattern| format!("^(?:{pattern})$")))
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map(|set| vec![Matcher::Regex(set)])
        .map_err(|err| ScopeError {
            field,
            pattern: list.join("`, `"),
            reason: match err {
                regex::Error::CompiledTooBig(limit) if list.len() == 1 => format!(
                    "the compiled regular expression is larger than the limit of {limit} bytes"
                ),
                regex::Error::CompiledTooBig(limit) => {
                    format!("together they compile to more than the limit of {limit} bytes")
                }
                other => format!("not usable together: {other}"),
            },
        })
}

fn compile_pattern(field: &'static str, pattern: &str) -> Result<Matcher, ScopeError> {
    let error = |reason: String| ScopeError {
        field,
        pattern: pattern.to_string(),
        reason,
    };
    let files = field == "filePatterns";
    if pattern.is_empty() {
        return Err(empty_pattern(field));
    }
    if let Some(feature) = regex_like(pattern, files) {
        return Err(error(format!(
            "it reads as a regular expression ({feature}), but these patterns are {}; write one (such as `{}`), or send `\"patternSyntax\": \"regex\"`",
            if files { "path globs" } else { "OpenCode wildcards" },
            if files { "src/**" } else { "npm *" },
        )));
    }
    if !files {
        return Ok(Matcher::Wildcard(Wildcard::new(pattern)));
    }
    // Paths are matched project-relative: `./src/**` means `src/**`.
    let trimmed = pattern.strip_prefix("./").unwrap_or(pattern);
    GlobBuilder::new(trimmed)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|glob| Matcher::Glob(glob.compile_matcher()))
        .map_err(|err| error(err.kind().to_string()))
}

/// Check one scope regular expression on its own, cheaply (it is parsed,
/// not compiled): `Err` is the reason it cannot be used. The list it is in
/// is compiled, within [`REGEX_SIZE_LIMIT`], by [`compile_regex_list`].
fn check_regex(pattern: &str) -> Result<(), String> {
    if pattern.len() > MAX_REGEX_LEN {
        return Err(format!(
            "the regular expression is {} bytes long, more than the limit of {MAX_REGEX_LEN}",
            pattern.len()
        ));
    }
    // Verbose mode (`x`) would let a `#` comment swallow the anchoring.
    if has_verbose_flag(pattern) {
        return Err("the `x` flag (verbose mode) is not supported".to_string());
    }
    // A size limit of 0 stops the compiler as soon as the expression has
    // been parsed: a syntax error is all this can report. Alone, so that
    // the error points into the pattern as written and an unbalanced `)`
    // cannot close the group that anchors it.
    match RegexBuilder::new(pattern).size_limit(0).build() {
        Ok(_) | Err(regex::Error::CompiledTooBig(_)) => Ok(()),
        Err(regex::Error::Syntax(text)) => {
            let last = text.lines().rev().find(|line| !line.trim().is_empty());
            let reason = last.unwrap_or(&text).trim();
            let reason = reason.strip_prefix("error: ").unwrap_or(reason);
            Err(format!("not a valid regular expression: {reason}"))
        }
        Err(other) => Err(format!("not a usable regular expression: {other}")),
    }
}

fn has_verbose_flag(pattern: &str) -> bool {
    pattern.match_indices("(?").any(|(at, _)| {
        pattern[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphabetic() || *c == '-')
            .any(|c| c == 'x')
    })
}

/// What makes a pattern written for the `glob` syntax read as a regular
/// expression, if anything: the piece of syntax that gives it away. These
/// mean something else, or nothing, in a glob or a wildcard, and are rare in
/// real paths and commands:
///
/// - `^` at the start, or an unescaped `$` at the end;
/// - `.*` at the start of a path component or word (`src/.*`, `npm .*`,
///   `.*`); `*.*`, `README.*` and `ls *.*` stay globs;
/// - `.+` anywhere;
/// - a backslash class or escape: `\d \D \w \W \s \S \b \B \. \+ \( \) \|`
///   (a glob escapes only `* ? [ ] { } \`);
/// - `(?` (a regex group or flag);
/// - a quantifier after a class or group: `]+`, `)+`, `)*`, `)?`, `]{2}`, `){1,3}`;
/// - in file patterns, `|` anywhere; in command patterns, `|` and `[^`
///   outside quotes (a simple command has no unquoted `|`, and a wildcard
///   has no classes).
///
/// Globs keep `*.rs`, `src/**`, `a.b`, `[!.]*`, `[^.]*` (globset's negated
/// class), `{a,b}`, `*.{1,8}`; wildcards keep `git log *`, `ls -la`, `cat foo.*`
/// and quoted text such as `grep "a|b" *`.
pub fn regex_like(pattern: &str, files: bool) -> Option<&'static str> {
    if pattern.starts_with('^') {
        return Some("`^` at the start");
    }
    if pattern.ends_with('$') && !pattern.ends_with("\\$") {
        return Some("`$` at the end");
    }
    // Command patterns: what is quoted is literal text of the command.
    let text: String = if files {
        pattern.to_string()
    } else {
        unquoted(pattern)
    };
    let bytes = text.as_bytes();
    for (at, window) in bytes.windows(2).enumerate() {
        let before = at.checked_sub(1).map(|i| bytes[i]);
        let starts_word = match before {
            None => true,
            Some(b'/') => true,
            Some(b' ') => !files,
            Some(_) => false,
        };
        let found = match window {
            b".*" if starts_word => "`.*`",
            b".+" => "`.+`",
            b"(?" => "`(?`",
            b"]+" | b")+" | b")*" | b")?" => "a quantifier after a class or group",
            [b']' | b')', b'{'] if quantifier_braces(&text[at + 1..]) => "a `{n}` quantifier",
            [b'\\', b'd' | b'D' | b'w' | b'W' | b's' | b'S' | b'b' | b'B' | b'.' | b'+' | b'(' | b')'
            | b'|'] => "a backslash class or escape",
            b"[^" if !files => "`[^`",
            _ => continue,
        };
        return Some(found);
    }
    if text.contains('|') {
        return Some("`|`");
    }
    None
}

/// True when `text` starts with `{n}`, `{n,}` or `{n,m}`.
fn quantifier_braces(text: &str) -> bool {
    let Some(rest) = text.strip_prefix('{') else {
        return false;
    };
    let Some(end) = rest.find('}') else {
        return false;
    };
    let inner = &rest[..end];
    !inner.is_empty()
        && inner.starts_with(|c: char| c.is_ascii_digit())
        && inner.chars().all(|c| c.is_ascii_digit() || c == ',')
        && inner.matches(',').count() <= 1
}

/// The pattern with quoted text ('...' and "...") blanked out.
fn unquoted(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut quote: Option<char> = None;
    for c in pattern.chars() {
        match quote {
            Some(q) if c == q => {
                quote = None;
                out.push(' ');
            }
            Some(_) => out.push('_'),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                out.push(' ');
            }
            None => out.push(c),
        }
    }
    out
}

/// What a scope refused, and which layer did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeRefusal {
    /// The session whose layer refused.
    pub session: String,
    /// One human sentence.
    pub reason: String,
}

/// The thing a scope judges besides the tool itself.
#[derive(Debug, Clone, Copy)]
pub enum ScopeTarget<'a> {
    /// A file path (project-relative, or absolute outside the project).
    File(&'a str),
    /// A directory a search or listing looks in: in scope when it, or the
    /// files directly in it, match.
    Directory(&'a str),
    /// One simple shell command.
    Command(&'a str),
    /// A path that may be a file or a directory (a field of a tool toolgate
    /// does not know): in scope when it matches as either.
    Path(&'a str),
}

/// A session's effective scope: its own layer after every ancestor's.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    layers: Vec<Arc<ScopeLayer>>,
}

/// A scope summed up for display (`session_started`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EffectiveScope {
    /// Tools admitted by every layer that limits tools (`None`: no limit).
    pub allowed_tools: Option<Vec<String>>,
    /// Tools some layer denies.
    pub denied_tools: Vec<String>,
    /// The file-pattern layers, outermost first.
    pub file_patterns: Vec<Vec<String>>,
    /// The command-pattern layers, outermost first.
    pub command_patterns: Vec<Vec<String>>,
}

impl Scope {
    /// The scope that limits nothing.
    pub const NONE: Scope = Scope { layers: Vec::new() };

    /// This scope narrowed by one more layer (a child's).
    pub fn with(&self, layer: ScopeLayer) -> Scope {
        let mut layers = self.layers.clone();
        if !layer.is_empty() {
            layers.push(Arc::new(layer));
        }
        Scope { layers }
    }

    /// A scope of the given layers, in order.
    pub fn from_layers(layers: impl IntoIterator<Item = ScopeLayer>) -> Scope {
        layers
            .into_iter()
            .fold(Scope::default(), |scope, layer| scope.with(layer))
    }

    /// The layers, outermost first.
    pub fn layers(&self) -> impl Iterator<Item = &ScopeLayer> {
        self.layers.iter().map(|layer| layer.as_ref())
    }

    /// True when no layer limits anything.
    pub fn is_none(&self) -> bool {
        self.layers.is_empty()
    }

    /// The summary shown to clients. `allowedTools` is the intersection of
    /// the layers' lists: an entry is kept when every limiting layer admits
    /// it, by its name or by `permission_of` it (the registry's permission name).
    pub fn effective(&self, permission_of: impl Fn(&str) -> String) -> EffectiveScope {
        let mut effective = EffectiveScope::default();
        let limiting: Vec<&ScopeLayer> = self
            .layers()
            .filter(|layer| layer.allowed.is_some())
            .collect();
        if !limiting.is_empty() {
            let mut allowed: Vec<String> = Vec::new();
            // Each distinct entry is judged once, and its own layer admits it:
            // a chain of layers repeating one list costs one pass per layer.
            let mut judged: HashSet<&str> = HashSet::new();
            for (index, layer) in limiting.iter().enumerate() {
                for entry in layer.rules.allowed_tools.iter().flatten() {
                    if !judged.insert(entry.as_str()) {
                        continue;
                    }
                    let own = layer
                        .allowed
                        .iter()
                        .flatten()
                        .find(|own| own.pattern.as_str() == entry)
                        .and_then(|own| own.permission.clone());
                    let permission = own.unwrap_or_else(|| permission_of(entry));
                    let admitted = limiting.iter().enumerate().all(|(other_index, other)| {
                        other_index == index
                            || other.allowed.iter().flatten().any(|other| {
                                other.pattern.as_str() == entry || other.names(entry, &permission)
                            })
                    });
                    if admitted {
                        allowed.push(entry.clone());
                    }
                }
            }
            effective.allowed_tools = Some(allowed);
        }
        for layer in self.layers() {
            for entry in layer.rules.denied_tools.iter().flatten() {
                if !effective.denied_tools.contains(entry) {
                    effective.denied_tools.push(entry.clone());
                }
            }
            // A regex layer shows its patterns anchored, as they are matched:
            // a glob never starts with `^` (one that does is refused).
            let shown = |patterns: &Vec<String>| -> Vec<String> {
                match layer.syntax {
                    PatternSyntax::Glob => patterns.clone(),
                    PatternSyntax::Regex => patterns
                        .iter()
                        .map(|pattern| format!("^(?:{pattern})$"))
                        .collect(),
                }
            };
            if let Some(files) = &layer.rules.file_patterns {
                effective.file_patterns.push(shown(files));
            }
            if let Some(commands) = &layer.rules.command_patterns {
                effective.command_patterns.push(shown(commands));
            }
        }
        effective
    }

    /// Whether the tool may be used at all. `tool` is the name as sent,
    /// `permission` its permission name; `always_available` tools always may.
    pub fn tool_refusal(
        &self,
        tool: &str,
        permission: &str,
        always_available: &[String],
    ) -> Option<ScopeRefusal> {
        if self.layers.is_empty() || always_available.iter().any(|name| name == tool) {
            return None;
        }
        let named = |entry: &ToolEntry| entry.names(tool, permission);
        for layer in self.layers() {
            if let Some(entry) = layer.denied.iter().find(|entry| named(entry)) {
                return Some(ScopeRefusal {
                    session: layer.session.clone(),
                    reason: format!(
                        "the scope of session `{}` denies `{tool}` (deniedTools has `{}`)",
                        layer.session,
                        entry.pattern.as_str()
                    ),
                });
            }
            if let Some(allowed) = &layer.allowed {
                if !allowed.iter().any(named) {
                    return Some(ScopeRefusal {
                        session: layer.session.clone(),
                        reason: format!(
                            "the scope of session `{}` does not allow `{tool}` (allowedTools: {})",
                            layer.session,
                            quoted_list(allowed)
                        ),
                    });
                }
            }
        }
        None
    }

    /// Whether a tool of unknown kind may be used: every layer that limits
    /// anything must name it in `allowedTools` (checked by
    /// [`Scope::tool_refusal`]); a layer without `allowedTools` refuses it,
    /// since what such a tool touches cannot be held against the layer's
    /// patterns with certainty. `always_available` tools always may.
    pub fn unknown_tool_refusal(
        &self,
        tool: &str,
        always_available: &[String],
    ) -> Option<ScopeRefusal> {
        if always_available.iter().any(|name| name == tool) {
            return None;
        }
        self.layers()
            .find(|layer| layer.allowed.is_none())
            .map(|layer| ScopeRefusal {
                session: layer.session.clone(),
                reason: format!(
                    "the scope of session `{}` does not allow `{tool}`: a tool of unknown kind must be named in allowedTools",
                    layer.session
                ),
            })
    }

    /// Whether a path or simple command is inside every layer.
    pub fn target_refusal(&self, target: ScopeTarget<'_>) -> Option<ScopeRefusal> {
        for layer in self.layers() {
            let refused = match target {
                ScopeTarget::File(path) => layer.files.as_ref().and_then(|globs| {
                    (!globs.iter().any(|glob| glob.is_match(path))).then(|| {
                        format!(
                            "the scope of session `{}` does not include the file `{path}` (filePatterns{}: {})",
                            layer.session,
                            layer.syntax_note(),
                            quoted_list(layer.rules.file_patterns.iter().flatten())
                        )
                    })
                }),
                ScopeTarget::Directory(dir) | ScopeTarget::Path(dir) => layer.files.as_ref().and_then(|globs| {
                    let child = match dir {
                        "" | "." => "_".to_string(),
                        dir => format!("{}/_", dir.trim_end_matches('/')),
                    };
                    let inside = globs
                        .iter()
                        .any(|glob| glob.is_match(dir) || glob.is_match(&child));
                    let noun = match target {
                        ScopeTarget::Path(_) => "the path",
                        _ => "the directory",
                    };
                    (!inside).then(|| {
                        format!(
                            "the scope of session `{}` does not include {noun} `{dir}` (filePatterns{}: {})",
                            layer.session,
                            layer.syntax_note(),
                            quoted_list(layer.rules.file_patterns.iter().flatten())
                        )
                    })
                }),
                ScopeTarget::Command(command) => layer.commands.as_ref().and_then(|patterns| {
                    (!patterns.iter().any(|pattern| pattern.is_match(command))).then(|| {
                        format!(
                            "the scope of session `{}` does not allow the command `{command}` (commandPatterns{}: {})",
                            layer.session,
                            layer.syntax_note(),
                            quoted_list(layer.rules.command_patterns.iter().flatten())
                        )
                    })
                }),
            };
            if let Some(reason) = refused {
                return Some(ScopeRefusal {
                    session: layer.session.clone(),
                    reason,
                });
            }
        }
        None
    }
}

fn quoted_list<T: AsRef<str>>(items: impl IntoIterator<Item = T>) -> String {
    let items: Vec<String> = items
        .into_iter()
        .map(|item| format!("`{}`", item.as_ref()))
        .collect();
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

impl ScopeLayer {
    /// How a refusal names the layer's pattern syntax, when it is not the default.
    fn syntax_note(&self) -> &'static str {
        match self.syntax {
            PatternSyntax::Glob => "",
            PatternSyntax::Regex => " (regex)",
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)] // tests may panic
    use super::*;

    fn layer(session: &str, rules: ScopeRules) -> ScopeLayer {
        match ScopeLayer::new(session, rules) {
            Ok(layer) => layer,
            Err(err) => panic!("{err}"),
        }
    }

    fn list(items: &[&str]) -> Option<Vec<String>> {
        Some(items.iter().map(|s| s.to_string()).collect())
    }

    /// `(target, expected refusing session or "")` against a two-layer scope.
    fn check(scope: &Scope, target: ScopeTarget<'_>, expected: &str) {
        let got = scope
            .target_refusal(target)
            .map(|refusal| refusal.session)
            .unwrap_or_default();
        assert_eq!(got, expected, "{target:?}");
    }

    #[test]
    fn targets_must_pass_every_layer() {
        let scope = Scope::from_layers([
            layer(
                "parent",
                ScopeRules {
                    file_patterns: list(&["src/**", "docs/**"]),
                    command_patterns: list(&["git *", "cargo test *", "ls *"]),
                    ..ScopeRules::default()
                },
            ),
            layer(
                "child",
                ScopeRules {
                    file_patterns: list(&["src/**", "README.md"]),
                    command_patterns: list(&["git status *", "git log *", "cargo *"]),
                    ..ScopeRules::default()
                },
            ),
        ]);
        use ScopeTarget::*;
        let cases: &[(ScopeTarget<'_>, &str)] = &[
            (File("src/main.rs"), ""),
            (File("src/a/b/c.rs"), ""),
            (File("docs/x.md"), "child"),
            (File("README.md"), "parent"),
            (File("/etc/passwd"), "parent"),
            (File("srcx/main.rs"), "parent"),
            (Directory("src"), ""),
            (Directory("src/a"), ""),
            (Directory("."), "parent"),
            (Directory(""), "parent"),
            (Command("git status"), ""),
            (Command("git status --short"), ""),
            (Command("git log -3"), ""),
            (Command("git push"), "child"),
            (Command("cargo test -p x"), ""),
            (Command("cargo build"), "parent"),
            (Command("ls -la"), "child"),
            (Command("gitk"), "parent"),
            // A path of unknown sort: in scope as a file or as a directory.
            (Path("src"), ""),
            (Path("src/a/b.rs"), ""),
            (Path("README.md"), "parent"),
            (Path("docs/x.md"), "child"),
            (Path("/etc/passwd"), "parent"),
            (Path("."), "parent"),
        ];
        for (target, expected) in cases {
            check(&scope, *target, expected);
        }
    }

    #[test]
    fn tools_pass_every_layer_and_always_available_are_exempt() {
        let scope = Scope::from_layers([
            layer(
                "parent",
                ScopeRules {
                    allowed_tools: list(&["read", "grep", "bash", "mcp__docs__*"]),
                    denied_tools: list(&["webfetch"]),
                    ..ScopeRules::default()
                },
            ),
            layer(
                "child",
                ScopeRules {
                    allowed_tools: list(&["Read", "Bash", "mcp__docs__search", "edit"]),
                    denied_tools: list(&["Grep"]),
                    ..ScopeRules::default()
                },
            ),
        ]);
        let always = vec!["exit_plan_mode".to_string(), "TodoWrite".to_string()];
        let cases: &[(&str, &str, &str)] = &[
            ("Read", "read", ""),
            ("read", "read", "child"),
            ("Bash", "bash", ""),
            ("shell", "bash", "child"),
            ("Grep", "grep", "child"),
            ("Edit", "edit", "parent"),
            ("edit", "edit", "parent"),
            ("WebFetch", "webfetch", "parent"),
            ("mcp__docs__search", "mcp__docs__search", ""),
            ("mcp__docs__fetch", "mcp__docs__fetch", "child"),
            ("exit_plan_mode", "exit_plan_mode", ""),
            ("TodoWrite", "todowrite", ""),
        ];
        for (tool, permission, expected) in cases {
            let got = scope
                .tool_refusal(tool, permission, &always)
                .map(|refusal| refusal.session)
                .unwrap_or_default();
            assert_eq!(got, *expected, "{tool}");
        }
        let permission_of = |tool: &str| match tool {
            "Read" => "read".to_string(),
            "Bash" => "bash".to_string(),
            "Grep" => "grep".to_string(),
            other => other.to_string(),
        };
        let effective = scope.effective(permission_of);
        assert_eq!(
            effective.allowed_tools,
            list(&["Read", "Bash", "mcp__docs__search"])
        );
        assert_eq!(effective.denied_tools, vec!["webfetch", "Grep"]);
    }

    /// A tool of unknown kind passes a scope only where every layer names it
    /// in allowedTools; the always-available tools stay exempt.
    #[test]
    fn unknown_tools_must_be_named() {
        let files_only = layer(
            "files",
            ScopeRules {
                file_patterns: list(&["src/**"]),
                ..ScopeRules::default()
            },
        );
        let naming = layer(
            "naming",
            ScopeRules {
                allowed_tools: list(&["mcp__docs__*", "read"]),
                ..ScopeRules::default()
            },
        );
        let always = vec!["attempt_completion".to_string()];
        let cases: &[(&[&ScopeLayer], &str, &str)] = &[
            (&[], "mcp__docs__search", ""),
            (&[&files_only], "mcp__docs__search", "files"),
            (&[&files_only], "attempt_completion", ""),
            (&[&naming], "mcp__docs__search", ""),
            (&[&naming, &files_only], "mcp__docs__search", "files"),
            (&[&files_only, &naming], "frobnicate", "files"),
        ];
        for (layers, tool, expected) in cases {
            let scope = Scope::from_layers(layers.iter().map(|layer| (*layer).clone()));
            let got = scope
                .unknown_tool_refusal(tool, &always)
                .map(|refusal| refusal.session)
                .unwrap_or_default();
            assert_eq!(got, *expected, "{tool} {}", layers.len());
        }
    }

    #[test]
    fn bad_globs_are_errors_naming_the_pattern() {
        let err = ScopeLayer::new(
            "s",
            ScopeRules {
                file_patterns: list(&["src/[a"]),
                ..ScopeRules::default()
            },
        )
        .err()
        .map(|err| err.to_string())
        .unwrap_or_default();
        assert!(
            err.starts_with("`permissions.filePatterns` has an unusable pattern `src/[a`"),
            "{err}"
        );
    }

    /// `(file patterns, command patterns, target, in scope)` with regex syntax.
    #[test]
    fn regex_patterns_match_whole_subjects() {
        let scope = Scope::from_layers([layer(
            "r",
            ScopeRules {
                file_patterns: list(&["src/.*", "^docs/[a-z]+\\.md$", "(?i)readme\\.md"]),
                command_patterns: list(&["^npm .*", "git (status|log)( .*)?", "cargo test"]),
                pattern_syntax: Some("regex".to_string()),
                ..ScopeRules::default()
            },
        )]);
        use ScopeTarget::*;
        let cases: &[(ScopeTarget<'_>, bool)] = &[
            (File("src/a.py"), true),
            (File("src/.env"), true),
            (File("src/a/b/c.rs"), true),
            (File("../x"), false),
            (File("docs/a"), false),
            (File("xsrc/a.py"), false),
            (File("lib/src/a.py"), false),
            (File("docs/guide.md"), true),
            (File("docs/guide.md.bak"), false),
            (File("docs/sub/guide.md"), false),
            (File("README.md"), true),
            (File("Readme.MD"), true),
            (Directory("src"), true),
            (Directory("docs"), false),
            (Directory("."), false),
            (Path("src"), true),
            (Command("npm test"), true),
            (Command("npm run build"), true),
            (Command("npx x"), false),
            (Command("npm"), false),
            (Command("pnpm test"), false),
            (Command("git status"), true),
            (Command("git log -3"), true),
            (Command("git push"), false),
            (Command("cargo test"), true),
            (Command("cargo test -p x"), false),
            (Command("cargo testx"), false),
        ];
        for (target, inside) in cases {
            assert_eq!(
                scope.target_refusal(*target).is_none(),
                *inside,
                "{target:?}"
            );
        }
        // Shown anchored, as matched.
        let effective = scope.effective(|tool| tool.to_string());
        assert_eq!(effective.command_patterns[0][0], "^(?:^npm .*)$");
    }

    /// A regex child under a glob parent: a target must pass both.
    #[test]
    fn regex_and_glob_layers_intersect() {
        let scope = Scope::from_layers([
            layer(
                "parent",
                ScopeRules {
                    file_patterns: list(&["src/**"]),
                    command_patterns: list(&["npm *"]),
                    ..ScopeRules::default()
                },
            ),
            layer(
                "child",
                ScopeRules {
                    file_patterns: list(&[".*\\.py", "docs/.*"]),
                    command_patterns: list(&["(npm|yarn) test"]),
                    pattern_syntax: Some("regex".to_string()),
                    ..ScopeRules::default()
                },
            ),
        ]);
        use ScopeTarget::*;
        let cases: &[(ScopeTarget<'_>, &str)] = &[
            (File("src/a.py"), ""),
            (File("src/a.rs"), "child"),
            (File("docs/a.md"), "parent"),
            (File("docs/a.py"), "parent"),
            (Command("npm test"), ""),
            (Command("yarn test"), "parent"),
            (Command("npm publish"), "child"),
        ];
        for (target, expected) in cases {
            check(&scope, *target, expected);
        }
    }

    fn error_of(rules: ScopeRules) -> String {
        ScopeLayer::new("s", rules)
            .err()
            .map(|err| err.to_string())
            .unwrap_or_else(|| "ok".to_string())
    }

    #[test]
    fn unusable_regexes_are_errors_naming_the_pattern() {
        let regex = |pattern: &str| ScopeRules {
            file_patterns: Some(vec![pattern.to_string()]),
            pattern_syntax: Some("regex".to_string()),
            ..ScopeRules::default()
        };
        let long = "a".repeat(MAX_REGEX_LEN + 1);
        let cases: Vec<(String, String)> = vec![
            ("src/(a".into(), "`permissions.filePatterns` has an unusable pattern `src/(a`: not a valid regular expression: unclosed group".into()),
            ("a)|(b".into(), "`permissions.filePatterns` has an unusable pattern `a)|(b`: not a valid regular expression: unopened group".into()),
            ("(a)\\1".into(), "`permissions.filePatterns` has an unusable pattern `(a)\\1`: not a valid regular expression: backreferences are not supported".into()),
            ("(?x)a#".into(), "`permissions.filePatterns` has an unusable pattern `(?x)a#`: the `x` flag (verbose mode) is not supported".into()),
            ("\\w{500}\\w{500}".into(), format!("`permissions.filePatterns` has an unusable pattern `\\w{{500}}\\w{{500}}`: the compiled regular expression is larger than the limit of {REGEX_SIZE_LIMIT} bytes")),
            (long.clone(), format!("`permissions.filePatterns` has an unusable pattern `{long}`: the regular expression is {} bytes long, more than the limit of {MAX_REGEX_LEN}", MAX_REGEX_LEN + 1)),
            ("".into(), "`permissions.filePatterns` has an unusable pattern ``: an empty pattern matches no path".into()),
            ("\\w+/.*".into(), "ok".into()),
        ];
        for (pattern, expected) in cases {
            assert_eq!(error_of(regex(&pattern)), expected, "{pattern}");
        }
        // Each fits alone; the list is bounded as a whole.
        let big: Vec<String> = (0..8).map(|i| format!("{i}\\w{{4}}")).collect();
        let alone = error_of(ScopeRules {
            file_patterns: Some(vec![big[0].clone()]),
            pattern_syntax: Some("regex".to_string()),
            ..ScopeRules::default()
        });
        assert_eq!(alone, "ok");
        let together = error_of(ScopeRules {
            file_patterns: Some(big.clone()),
            pattern_syntax: Some("regex".to_string()),
            ..ScopeRules::default()
        });
        assert!(
            together.ends_with(&format!(
                "`: together they compile to more than the limit of {REGEX_SIZE_LIMIT} bytes"
            )),
            "{together}"
        );
        let many = error_of(ScopeRules {
            command_patterns: Some(
                (0..=MAX_REGEX_PATTERNS)
                    .map(|i| format!("cmd{i}"))
                    .collect(),
            ),
            pattern_syntax: Some("regex".to_string()),
            ..ScopeRules::default()
        });
        assert_eq!(
            many,
            format!("`permissions.commandPatterns` has an unusable pattern `cmd{MAX_REGEX_PATTERNS}`: the list has {} regular expressions, more than the limit of {MAX_REGEX_PATTERNS}", MAX_REGEX_PATTERNS + 1)
        );
        let bad_syntax = ScopeRules {
            pattern_syntax: Some("pcre".to_string()),
            ..ScopeRules::default()
        };
        assert_eq!(
            error_of(bad_syntax),
            "`permissions.patternSyntax` has an unusable value `pcre`: expected `glob` or `regex`"
        );
    }

    /// `(pattern, is a file pattern, what gives it away or "")`.
    #[test]
    fn globs_that_read_as_regexes_are_refused() {
        let cases: &[(&str, bool, &str)] = &[
            ("src/.*", true, "`.*`"),
            (".*", true, "`.*`"),
            ("src/.+", true, "`.+`"),
            ("^src/", true, "`^` at the start"),
            ("src/a$", true, "`$` at the end"),
            ("src/\\d/*", true, "a backslash class or escape"),
            ("*\\.py", true, "a backslash class or escape"),
            ("(?i)src/**", true, "`(?`"),
            ("src/(a|b)/**", true, "`|`"),
            ("[0-9]{4}/*", true, "a `{n}` quantifier"),
            ("[a-z]+.rs", true, "a quantifier after a class or group"),
            ("^npm .*", false, "`^` at the start"),
            ("npm .*", false, "`.*`"),
            ("npm (test|run)", false, "`|`"),
            ("git [^p]*", false, "`[^`"),
            ("grep \\d *", false, "a backslash class or escape"),
            // Legitimate globs and wildcards.
            ("*.rs", true, ""),
            ("src/**", true, ""),
            ("a.b", true, ""),
            ("*.*", true, ""),
            ("README.*", true, ""),
            ("src/*.{rs,toml}", true, ""),
            ("man/*.{1,8}", true, ""),
            ("[!.]*", true, ""),
            ("[^.]*", true, ""),
            ("src/\\*literal", true, ""),
            ("git log *", false, ""),
            ("ls -la", false, ""),
            ("ls *.*", false, ""),
            ("cat foo.*", false, ""),
            ("grep \"a|b\" *", false, ""),
            ("grep '^x$' *", false, ""),
            ("echo $HOME", false, ""),
        ];
        for (pattern, files, expected) in cases {
            assert_eq!(
                regex_like(pattern, *files).unwrap_or(""),
                *expected,
                "{pattern}"
            );
        }
        assert_eq!(
            error_of(ScopeRules {
                file_patterns: list(&["src/.*"]),
                ..ScopeRules::default()
            }),
            "`permissions.filePatterns` has an unusable pattern `src/.*`: it reads as a regular expression (`.*`), but these patterns are path globs; write one (such as `src/**`), or send `\"patternSyntax\": \"regex\"`"
        );
    }

    /// Entries resolved to a permission cover every tool with it.
    #[test]
    fn resolved_entries_cover_their_permission() {
        let resolve = |entry: &str| match entry {
            "Read" => Ok(Some("read".to_string())),
            "Bash" => Ok(Some("bash".to_string())),
            "Raed" => Err("no agent has it".to_string()),
            _ => Ok(None),
        };
        let scope = Scope::from_layers([ScopeLayer::resolved(
            "s",
            ScopeRules {
                allowed_tools: list(&["Read", "Bash", "mcp__docs__*"]),
                denied_tools: list(&["Bash"]),
                ..ScopeRules::default()
            },
            resolve,
        )
        .unwrap_or_else(|err| panic!("{err}"))]);
        let cases: &[(&str, &str, bool)] = &[
            ("read_file", "read", true),
            ("view_image", "read", true),
            ("read", "read", true),
            ("Write", "edit", false),
            ("shell", "bash", false),
            ("mcp__docs__x", "mcp__docs__x", true),
        ];
        for (tool, permission, allowed) in cases {
            assert_eq!(
                scope.tool_refusal(tool, permission, &[]).is_none(),
                *allowed,
                "{tool}"
            );
        }
        let err = ScopeLayer::resolved(
            "s",
            ScopeRules {
                allowed_tools: list(&["Raed"]),
                ..ScopeRules::default()
            },
            resolve,
        )
        .err()
        .map(|err| err.to_string());
        assert_eq!(
            err.as_deref(),
            Some("`permissions.allowedTools` has an unusable entry `Raed`: no agent has it")
        );
    }

    #[test]
    fn empty_lists_admit_nothing() {
        let scope = Scope::from_layers([layer(
            "s",
            ScopeRules {
                allowed_tools: list(&[]),
                file_patterns: list(&[]),
                ..ScopeRules::default()
            },
        )]);
        assert!(scope.tool_refusal("Read", "read", &[]).is_some());
        assert!(scope.target_refusal(ScopeTarget::File("a")).is_some());
        assert!(scope
            .tool_refusal("todowrite", "todowrite", &["todowrite".into()])
            .is_none());
    }
}
