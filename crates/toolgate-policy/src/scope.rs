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
//! Tool entries match the tool name as the agent sent it or its permission
//! name (`bash` covers `Bash`, `shell` and `run_shell_command`), with OpenCode
//! wildcards. File patterns are path globs (`*` stays inside one directory,
//! `**` crosses them) matched against the project-relative path, or the
//! absolute path for a file outside the project. Command patterns are OpenCode
//! wildcards, as in `permission.bash`. None of them is a regular expression.
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
        write!(
            f,
            "`permissions.{}` has an unusable pattern `{}`: {}",
            self.field, self.pattern, self.reason
        )
    }
}

impl std::error::Error for ScopeError {}

/// One session's narrowing, compiled.
#[derive(Debug, Clone)]
pub struct ScopeLayer {
    session: String,
    rules: ScopeRules,
    allowed: Option<Vec<Wildcard>>,
    denied: Vec<Wildcard>,
    files: Option<Vec<GlobMatcher>>,
    commands: Option<Vec<Wildcard>>,
}

impl ScopeLayer {
    /// Compile the narrowing that `session` asked for.
    pub fn new(session: &str, rules: ScopeRules) -> Result<ScopeLayer, ScopeError> {
        let wildcards = |list: &Option<Vec<String>>| {
            list.as_ref()
                .map(|list| list.iter().map(|p| Wildcard::new(p)).collect::<Vec<_>>())
        };
        let files = match &rules.file_patterns {
            None => None,
            Some(patterns) => Some(
                patterns
                    .iter()
                    .map(|pattern| compile_path_glob(pattern))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        Ok(ScopeLayer {
            session: session.to_string(),
            allowed: wildcards(&rules.allowed_tools),
            denied: wildcards(&rules.denied_tools).unwrap_or_default(),
            files,
            commands: wildcards(&rules.command_patterns),
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

fn compile_path_glob(pattern: &str) -> Result<GlobMatcher, ScopeError> {
    let error = |reason: String| ScopeError {
        field: "filePatterns",
        pattern: pattern.to_string(),
        reason,
    };
    if pattern.is_empty() {
        return Err(error("an empty pattern matches no path".to_string()));
    }
    // Paths are matched project-relative: `./src/**` means `src/**`.
    let trimmed = pattern.strip_prefix("./").unwrap_or(pattern);
    GlobBuilder::new(trimmed)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|err| error(err.kind().to_string()))
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
                    let permission = permission_of(entry);
                    let admitted = limiting.iter().enumerate().all(|(other_index, other)| {
                        other_index == index
                            || other.allowed.iter().flatten().any(|pattern| {
                                pattern.as_str() == entry
                                    || pattern.matches(entry)
                                    || pattern.matches(&permission)
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
            if let Some(files) = &layer.rules.file_patterns {
                effective.file_patterns.push(files.clone());
            }
            if let Some(commands) = &layer.rules.command_patterns {
                effective.command_patterns.push(commands.clone());
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
        let named = |pattern: &Wildcard| pattern.matches(tool) || pattern.matches(permission);
        for layer in self.layers() {
            if let Some(pattern) = layer.denied.iter().find(|pattern| named(pattern)) {
                return Some(ScopeRefusal {
                    session: layer.session.clone(),
                    reason: format!(
                        "the scope of session `{}` denies `{tool}` (deniedTools has `{}`)",
                        layer.session,
                        pattern.as_str()
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
                            "the scope of session `{}` does not include the file `{path}` (filePatterns: {})",
                            layer.session,
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
                            "the scope of session `{}` does not include {noun} `{dir}` (filePatterns: {})",
                            layer.session,
                            quoted_list(layer.rules.file_patterns.iter().flatten())
                        )
                    })
                }),
                ScopeTarget::Command(command) => layer.commands.as_ref().and_then(|patterns| {
                    (!patterns.iter().any(|pattern| pattern.matches(command))).then(|| {
                        format!(
                            "the scope of session `{}` does not allow the command `{command}` (commandPatterns: {})",
                            layer.session,
                            quoted_list(patterns)
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

impl AsRef<str> for Wildcard {
    fn as_ref(&self) -> &str {
        self.as_str()
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
