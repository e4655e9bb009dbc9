//! No silent no-ops: the names a policy or a scope writes must name something.
//!
//! A permission key (`permission` in the policy file, `--permission`,
//! `TOOLGATE_PERMISSION`) is checked by [`check_permission_keys`]:
//!
//! - a key written in Claude Code's rule syntax (`Bash(git *)`,
//!   `Read(./.env)`) is an error showing the same rule in OpenCode's form;
//! - a key with `*` or `?` is a pattern, and kept; with a warning when it
//!   matches no known permission name and starts with neither a wildcard nor
//!   `mcp_` (`my_*`: it can only match tools toolgate does not know);
//! - a known permission name is kept: the permission of a tool the registry
//!   knows (built in, or declared in the policy file's `tools`, with its
//!   `permission`), one of OpenCode's ([`OPENCODE_PERMISSIONS`]), or
//!   `use_mcp_tool` (its rules see the MCP tool it calls, see
//!   [`crate::mcp_caller`]);
//! - an MCP name (`mcp__server__tool`) is kept;
//! - a tool name whose permission is another name (`Read`, `write_file`) is
//!   an error naming that permission: rules are keyed by permission name, so
//!   the rule would never match;
//! - a name close to a known tool or permission name (ignoring case, at most
//!   one edit for names of 4 to 6 characters, two from 7 on; a transposition
//!   is one edit) is an error with a "did you mean" hint (`edti`, `bahs`,
//!   `webfecth`, `BASH`);
//! - any other name is kept, with a warning at start: it can only be a tool
//!   toolgate does not know, whose rules match it by its own name.
//!
//! A scope's `allowedTools` and `deniedTools` entries are checked by
//! [`Policy::scope_layer`], more strictly: an entry must be a pattern, a
//! tool name or permission name the registry knows, an always-available
//! tool, a batch tool, a tool of a supported agent that toolgate judges as
//! of unknown kind (`use_mcp_tool`, `Skill`) or an MCP name; anything else is refused (with a hint
//! when it is close to a known name), since an entry that matches nothing
//! is a scope that silently does not do what it says. A custom tool is
//! declared in the policy file's `tools` to be named in a scope.

use serde_json::Value;

use crate::error::PolicyError;
use crate::scope::{ScopeError, ScopeLayer, ScopeRules};
use crate::tools::{is_mcp, Registry};
use crate::wildcard::Wildcard;
use crate::Policy;

/// OpenCode's permission names (its `permission` config keys and the
/// permissions of its tools).
pub const OPENCODE_PERMISSIONS: &[&str] = &[
    "read",
    "edit",
    "glob",
    "grep",
    "list",
    "bash",
    "task",
    "skill",
    "lsp",
    "todoread",
    "todowrite",
    "question",
    "webfetch",
    "websearch",
    "codesearch",
    "external_directory",
    "doom_loop",
    "plan_enter",
    "plan_exit",
];

/// The batch tools (see [`crate::batch`]): judged by their calls, named by
/// their own name.
const BATCH_TOOLS: &[&str] = &[
    "batch",
    "multi_tool_use.parallel",
    "BatchTool",
    "batch-tool",
];

/// Tools of supported agents that toolgate judges as tools of unknown kind
/// (a scope must name them to let a session use them): Roo Code's MCP and
/// mode tools, Claude Code's MCP resource tools, GitHub Copilot
/// CLI's background shell tools (not in the registry's built-in table).
const OTHER_AGENT_TOOLS: &[&str] = &[
    "use_mcp_tool",
    "access_mcp_resource",
    "ListMcpResourcesTool",
    "ReadMcpResourceTool",
    "write_bash",
    "read_bash",
    "stop_bash",
];

/// The permission of a tool the registry knows, else `name` itself.
fn permission_of<'a>(registry: &'a Registry, name: &'a str) -> &'a str {
    registry
        .known()
        .find(|(known, _)| *known == name)
        .map_or(name, |(_, spec)| spec.permission.as_str())
}

/// Every permission name the registry or OpenCode knows, and the tools
/// that call an MCP tool by name (their rules tighten the calls they make,
/// see [`crate::mcp_caller`]).
fn permission_names(registry: &Registry) -> Vec<&str> {
    let mut names: Vec<&str> = OPENCODE_PERMISSIONS.to_vec();
    names.extend(crate::mcp_caller::MCP_CALLERS);
    for (_, spec) in registry.known() {
        if !names.contains(&spec.permission.as_str()) {
            names.push(&spec.permission);
        }
    }
    names
}

/// The most edits a misspelling of a name of this length may be.
fn max_edits(len: usize) -> usize {
    match len {
        0..=3 => 0,
        4..=6 => 1,
        _ => 2,
    }
}

/// Optimal string alignment distance (Levenshtein plus adjacent
/// transpositions), ignoring ASCII case.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().map(|c| c.to_ascii_lowercase()).collect();
    let b: Vec<char> = b.chars().map(|c| c.to_ascii_lowercase()).collect();
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// The known name closest to `name` within the misspelling limit, if any
/// (the first of the closest, in the order given).
fn closest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let length = name.chars().count();
    let limit = max_edits(length);
    known
        .into_iter()
        .filter(|candidate| *candidate != name)
        // Names whose lengths differ by more than the limit are farther
        // apart: skip them, so a long entry costs no quadratic work.
        .filter(|candidate| candidate.chars().count().abs_diff(length) <= limit)
        .map(|candidate| (distance(name, candidate), candidate))
        .filter(|(edits, _)| *edits <= limit)
        .min_by_key(|(edits, _)| *edits)
        .map(|(_, candidate)| candidate)
}

fn is_pattern(name: &str) -> bool {
    name.contains(['*', '?'])
}

/// Check the keys of one `permission` value (one layer: the policy file's,
/// or one override's) against the registry. `origin` names the source in
/// errors and warnings; warnings are pushed to `warnings`.
pub(crate) fn check_permission_keys(
    registry: &Registry,
    value: &Value,
    origin: &str,
    warnings: &mut Vec<String>,
) -> Result<(), PolicyError> {
    let Value::Object(object) = value else {
        return Ok(());
    };
    let permissions = permission_names(registry);
    for key in object.keys() {
        let here = format!("permission.{key}");
        if let Some((tool, inner)) = key
            .strip_suffix(')')
            .and_then(|key| key.split_once('('))
            .filter(|(tool, _)| !tool.is_empty())
        {
            let permission = permission_of(registry, tool);
            return Err(PolicyError::new(
                origin,
                &here,
                &format!(
                    "`{key}` is Claude Code's rule syntax; here a rule is written {{\"{permission}\": {{\"{inner}\": \"allow\"}}}} (permission name, then pattern)"
                ),
            ));
        }
        if is_pattern(key) {
            let wildcard = Wildcard::new(key);
            let matches_known = key.starts_with(['*', '?'])
                || key.starts_with("mcp_")
                || permissions.iter().any(|name| wildcard.matches(name));
            if !matches_known {
                warnings.push(format!(
                    "{origin}: {here}: `{key}` matches no permission toolgate knows: its rules apply only to tools of matching names (MCP or custom tools)"
                ));
            }
            continue;
        }
        if is_mcp(key) || permissions.contains(&key.as_str()) {
            continue;
        }
        if let Some((_, spec)) = registry.known().find(|(name, _)| *name == key) {
            return Err(PolicyError::new(
                origin,
                &here,
                &format!(
                    "`{key}` is a tool name, and rules are keyed by permission name: did you mean `{}`?",
                    spec.permission
                ),
            ));
        }
        let tools = registry.known().map(|(name, _)| name);
        let near = closest(key, permissions.iter().copied()).or_else(|| closest(key, tools));
        if let Some(near) = near {
            let permission = permission_of(registry, near);
            return Err(PolicyError::new(
                origin,
                &here,
                &format!(
                    "unknown permission name (did you mean `{permission}`?); a tool of this name must be declared in the policy file's `tools`"
                ),
            ));
        }
        warnings.push(format!(
            "{origin}: {here}: `{key}` is no permission toolgate knows: its rules apply only to a tool of that name (an MCP or custom tool; declare it in the policy file's `tools` to give it a kind)"
        ));
    }
    Ok(())
}

impl Policy {
    /// Compile the scope `session` asked for, with its tool entries matched
    /// by permission name across agents (`Read` covers every tool whose
    /// permission is `read`). An entry that names nothing known is refused:
    /// see the module documentation.
    pub fn scope_layer(&self, session: &str, rules: ScopeRules) -> Result<ScopeLayer, ScopeError> {
        ScopeLayer::resolved(session, rules, |entry| self.resolve_scope_entry(entry))
    }

    fn resolve_scope_entry(&self, entry: &str) -> Result<Option<String>, String> {
        if let Some((_, spec)) = self.registry.known().find(|(name, _)| *name == entry) {
            return Ok((spec.permission != entry).then(|| spec.permission.clone()));
        }
        let permissions = permission_names(&self.registry);
        if is_mcp(entry)
            || permissions.contains(&entry)
            || BATCH_TOOLS.contains(&entry)
            || OTHER_AGENT_TOOLS.contains(&entry)
            || self.always_available.iter().any(|tool| tool == entry)
        {
            return Ok(None);
        }
        let names = self
            .registry
            .known()
            .map(|(name, _)| name)
            .chain(permissions.iter().copied())
            .chain(BATCH_TOOLS.iter().copied())
            .chain(OTHER_AGENT_TOOLS.iter().copied())
            .chain(self.always_available.iter().map(String::as_str));
        let hint = closest(entry, names)
            .map(|near| format!(" (did you mean `{near}`?)"))
            .unwrap_or_default();
        Err(format!(
            "no agent has a tool `{entry}`{hint}; a custom tool must be declared in the policy file's `tools`, an MCP tool is written `mcp__server__tool`"
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)] // tests may panic
    use super::*;
    use crate::mode::Kind;
    use serde_json::json;

    #[test]
    fn distances() {
        let cases = [
            ("edti", "edit", 1),
            ("bahs", "bash", 1),
            ("BASH", "bash", 0),
            ("webfecth", "webfetch", 1),
            ("raed", "read", 1),
            ("lisp", "list", 1),
            ("deploy", "edit", 5),
            ("", "abc", 3),
        ];
        for (a, b, expected) in cases {
            assert_eq!(distance(a, b), expected, "{a} {b}");
        }
    }

    /// `(key, expected)`: `ok`, `warn` or the error's reason.
    #[test]
    fn permission_keys() {
        let mut registry = Registry::default();
        registry.declare("deploy", Kind::Execute, None, None);
        registry.declare("lisp", Kind::Execute, None, None);
        registry.declare("mover", Kind::Edit, Some("edit"), None);
        let cases = [
            ("edit", "ok"),
            ("bash", "ok"),
            ("external_directory", "ok"),
            ("doom_loop", "ok"),
            ("skill", "ok"),
            ("lsp", "ok"),
            ("save_memory", "ok"),
            ("BashOutput", "ok"),
            ("deploy", "ok"),
            ("lisp", "ok"),
            ("*", "ok"),
            ("mcp__github__*", "ok"),
            ("mcp__docs__search", "ok"),
            ("edi?", "ok"),
            ("web*", "ok"),
            ("*_file", "ok"),
            ("mcp__docs__*", "ok"),
            ("my_*", "warn"),
            ("Bash(git *)", "`Bash(git *)` is Claude Code's rule syntax; here a rule is written {\"bash\": {\"git *\": \"allow\"}} (permission name, then pattern)"),
            ("Read(./.env)", "`Read(./.env)` is Claude Code's rule syntax; here a rule is written {\"read\": {\"./.env\": \"allow\"}} (permission name, then pattern)"),
            ("frobnicate", "warn"),
            ("my_custom_tool", "warn"),
            ("rg", "warn"),
            ("edti", "unknown permission name (did you mean `edit`?); a tool of this name must be declared in the policy file's `tools`"),
            ("bahs", "unknown permission name (did you mean `bash`?); a tool of this name must be declared in the policy file's `tools`"),
            ("BASH", "unknown permission name (did you mean `bash`?); a tool of this name must be declared in the policy file's `tools`"),
            ("webfecth", "unknown permission name (did you mean `webfetch`?); a tool of this name must be declared in the policy file's `tools`"),
            ("external_directroy", "unknown permission name (did you mean `external_directory`?); a tool of this name must be declared in the policy file's `tools`"),
            ("write_fil", "unknown permission name (did you mean `edit`?); a tool of this name must be declared in the policy file's `tools`"),
            ("Read", "`Read` is a tool name, and rules are keyed by permission name: did you mean `read`?"),
            ("write_file", "`write_file` is a tool name, and rules are keyed by permission name: did you mean `edit`?"),
            ("mover", "`mover` is a tool name, and rules are keyed by permission name: did you mean `edit`?"),
        ];
        for (key, expected) in cases {
            let mut warnings = Vec::new();
            let got = match check_permission_keys(
                &registry,
                &json!({ key: "allow" }),
                "--permission",
                &mut warnings,
            ) {
                Err(err) => {
                    assert_eq!(err.file, "--permission");
                    assert_eq!(err.key, format!("permission.{key}"));
                    err.reason
                }
                Ok(()) if warnings.is_empty() => "ok".to_string(),
                Ok(()) => "warn".to_string(),
            };
            assert_eq!(got, expected, "{key}");
        }
    }
}
