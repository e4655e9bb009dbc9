//! `toolgate policy import`: the permission settings of other agents as a
//! toolgate policy that decides the same, and what could not be converted.
//!
//! Where the source's semantics differ, the converted rule is the one that
//! decides the same, and where no rule decides exactly the same, the
//! conversion fails closed: an allow is converted no wider than the
//! source's, a deny or ask no narrower.
//!
//! - **Claude Code** `settings.json`: `permissions.allow`, `ask`, `deny`
//!   (`Tool` or `Tool(specifier)`). Claude Code lets a deny beat an ask beat
//!   an allow whatever their order, and toolgate's last matching rule
//!   decides: so allows are written first, then asks, then denies.
//!   `Bash(npm run test:*)` (a prefix) is `npm run test *` as an allow (the
//!   command and its arguments) and `npm run test*` as a deny or ask (every
//!   command starting so); `Bash(git push *)` is as written. Paths follow
//!   Claude's rules: `//abs` absolute, `~/` home, `/p` and `./p` relative to
//!   the settings file, `**` any depth. `WebFetch(domain:HOST)` is the URLs
//!   on that host. `defaultMode` is the mode; `additionalDirectories` are
//!   `external_directory` allows (a relative one, `../docs/`, resolved
//!   against the project whose `.claude/` holds the file, as Claude Code
//!   resolves it against the directory it runs in; else against the
//!   directory the import runs in).
//! - **qwen-code** settings: `permissions` as Claude Code's, with qwen's
//!   tool names; `tools.exclude` / `excludeTools` are denies,
//!   `tools.allowed` / `allowedTools` allows, `run_shell_command(git)` a
//!   command prefix. `tools.core` / `coreTools` (which tools exist) is not a
//!   rule: it is reported, with the session scope (`allowedTools`) that does
//!   the same.
//! - **OpenCode** `opencode.json(c)` and **link-assistant/agent**
//!   permission JSON: `permission` is toolgate's own rule syntax, taken as
//!   it is (with `agent.NAME.permission` after it for `--agent NAME`).
//! - **Gemini CLI** policy TOML: `[[rule]]` tables with `toolName`,
//!   `commandPrefix`, `decision` (`allow`, `deny`, `ask_user`) and
//!   `priority` (the highest wins): written lowest priority first.
//!   `argsPattern` (a regular expression over the arguments) and `modes`
//!   are reported, not converted.

use serde_json::{json, Map, Value};

/// The formats `import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Claude Code's settings.json.
    Claude,
    /// qwen-code's settings.json.
    Qwen,
    /// OpenCode's config (or link-assistant's permission JSON).
    Opencode,
    /// Gemini CLI's policy TOML.
    Gemini,
}

/// A converted policy being built, and what could not be converted.
#[derive(Debug, Default)]
pub struct Converted {
    /// The toolgate policy (`mode`, `permission`).
    pub policy: Map<String, Value>,
    /// `(where, why)` for each thing not converted.
    pub skipped: Vec<(String, String)>,
    /// How many rules were written.
    pub rules: usize,
}

impl Converted {
    /// Add a rule: a later one for the same permission and pattern replaces
    /// the earlier (and so decides, as it would by coming last).
    fn rule(&mut self, permission: &str, pattern: &str, action: &str) {
        let rules = self.policy.entry("permission").or_insert_with(|| json!({}));
        let Some(rules) = rules.as_object_mut() else {
            return;
        };
        let patterns = rules
            .entry(permission.to_string())
            .or_insert_with(|| json!({}));
        if let Some(patterns) = patterns.as_object_mut() {
            patterns.shift_remove(pattern);
            patterns.insert(pattern.to_string(), json!(action));
            self.rules += 1;
        }
    }

    fn skip(&mut self, place: impl Into<String>, why: impl Into<String>) {
        self.skipped.push((place.into(), why.into()));
    }
}

/// The format of a file, from its name and text.
pub fn detect(name: &str, text: &str) -> Option<Format> {
    if name.ends_with(".toml") {
        return Some(Format::Gemini);
    }
    let value: Value = serde_json::from_str(&toolgate_policy::opencode::strip_jsonc(text)).ok()?;
    if name.contains("opencode")
        || value
            .get("$schema")
            .is_some_and(|s| s.to_string().contains("opencode"))
    {
        return Some(Format::Opencode);
    }
    if name.contains(".qwen")
        || value.get("tools").is_some()
        || value.get("coreTools").is_some()
        || value.get("excludeTools").is_some()
    {
        return Some(Format::Qwen);
    }
    if value.get("permissions").is_some() {
        return Some(Format::Claude);
    }
    if value.get("permission").is_some() {
        return Some(Format::Opencode);
    }
    None
}

/// A tool name of Claude Code, qwen-code or Gemini CLI as a toolgate
/// permission name.
fn permission_of(tool: &str) -> Option<String> {
    Some(
        match tool {
            "Bash" | "run_shell_command" | "Shell" | "shell" => "bash",
            "Edit" | "Write" | "MultiEdit" | "NotebookEdit" | "write_file" | "replace" | "edit" => {
                "edit"
            }
            "Read" | "read_file" | "read_many_files" | "NotebookRead" => "read",
            "Grep" | "grep_search" | "search_file_content" => "grep",
            "Glob" | "glob" => "glob",
            "LS" | "list_directory" => "list",
            "WebFetch" | "web_fetch" => "webfetch",
            "WebSearch" | "google_web_search" | "web_search" => "websearch",
            "Task" | "Agent" | "agent" | "task" => "task",
            "TodoWrite" | "todo_write" => "todowrite",
            "ExitPlanMode" | "exit_plan_mode" => "exit_plan_mode",
            tool if tool.starts_with("mcp__") => {
                return Some(if tool.matches("__").count() >= 2 {
                    tool.to_string()
                } else {
                    format!("{tool}__*")
                });
            }
            _ => return None,
        }
        .to_string(),
    )
}

/// A Claude Code path specifier as a toolgate pattern.
fn path_pattern(spec: &str) -> String {
    let path = if let Some(abs) = spec.strip_prefix("//") {
        format!("/{abs}")
    } else if spec.starts_with("~/") {
        spec.to_string()
    } else {
        spec.trim_start_matches("./")
            .trim_start_matches('/')
            .to_string()
    };
    // `**` (any depth) and `*` are both toolgate's `*`.
    let mut out = path.replace("**", "*");
    while out.contains("**") {
        out = out.replace("**", "*");
    }
    out
}

/// Convert one `Tool(specifier)` rule.
fn claude_rule(out: &mut Converted, place: &str, rule: &str, action: &str) {
    let (tool, spec) = match rule.split_once('(') {
        Some((tool, rest)) => match rest.strip_suffix(')') {
            Some(spec) => (tool.trim(), Some(spec.trim())),
            None => {
                return out.skip(
                    place,
                    format!("`{rule}` is not `Tool` or `Tool(specifier)`"),
                )
            }
        },
        None => (rule.trim(), None),
    };
    let Some(permission) = permission_of(tool) else {
        return out.skip(place, format!("`{tool}` is a tool toolgate does not know"));
    };
    let spec = spec.filter(|spec| !spec.is_empty() && *spec != "*");
    let pattern = match (permission.as_str(), spec) {
        (_, None) => "*".to_string(),
        ("bash", Some(spec)) => match spec.strip_suffix(":*") {
            // A prefix: an allow no wider than the command and its
            // arguments, a deny or ask every command that starts so.
            Some(prefix) if action == "allow" => format!("{prefix} *"),
            Some(prefix) => format!("{prefix}*"),
            None => spec.to_string(),
        },
        ("edit" | "read" | "grep" | "glob" | "list", Some(spec)) => path_pattern(spec),
        ("webfetch", Some(spec)) => match spec.strip_prefix("domain:") {
            Some(host) => {
                out.rule(&permission, &format!("http*://{host}"), action);
                format!("http*://{host}/*")
            }
            None => {
                return out.skip(
                    place,
                    format!("`{rule}`: only `domain:HOST` is understood for WebFetch"),
                )
            }
        },
        (_, Some(_)) => {
            return out.skip(
                place,
                format!("`{rule}`: toolgate has no specifier for `{tool}`"),
            );
        }
    };
    out.rule(&permission, &pattern, action);
}

/// Claude Code (and qwen-code) `permissions.allow/ask/deny`, allows first.
fn claude_permissions(out: &mut Converted, file: &str, value: &Value) {
    let Some(permissions) = value.get("permissions").and_then(Value::as_object) else {
        return;
    };
    for list in ["allow", "ask", "deny"] {
        let Some(rules) = permissions.get(list) else {
            continue;
        };
        let Some(rules) = rules.as_array() else {
            out.skip(format!("{file}: permissions.{list}"), "not a list of rules");
            continue;
        };
        for (index, rule) in rules.iter().enumerate() {
            let place = format!("{file}: permissions.{list}[{index}]");
            match rule.as_str() {
                Some(rule) => claude_rule(out, &place, rule, list),
                None => out.skip(place, "not a string"),
            }
        }
    }
    if let Some(mode) = permissions.get("defaultMode").and_then(Value::as_str) {
        match mode {
            "default" => {
                out.policy.insert("mode".into(), json!("ask"));
            }
            "acceptEdits" => {
                out.policy.insert("mode".into(), json!("auto_edit"));
            }
            "plan" => {
                out.policy.insert("mode".into(), json!("plan"));
            }
            "bypassPermissions" => {
                out.policy.insert("mode".into(), json!("auto"));
            }
            "dontAsk" => out.skip(
                format!("{file}: permissions.defaultMode"),
                "dontAsk (deny what would ask) is not a mode: run toolgate with --on-ask deny",
            ),
            other => out.skip(
                format!("{file}: permissions.defaultMode"),
                format!("unknown mode `{other}`"),
            ),
        }
    }
    if let Some(dirs) = permissions
        .get("additionalDirectories")
        .and_then(Value::as_array)
    {
        for dir in dirs.iter().filter_map(Value::as_str) {
            let Some(dir) = additional_directory(file, dir) else {
                out.skip(
                    format!("{file}: permissions.additionalDirectories"),
                    format!("`{dir}` is not a directory name"),
                );
                continue;
            };
            let dir = path_pattern(&dir);
            let dir = dir.trim_end_matches('/');
            out.rule("external_directory", dir, "allow");
            out.rule("external_directory", &format!("{dir}/*"), "allow");
        }
    }
    for key in permissions.keys() {
        if ![
            "allow",
            "ask",
            "deny",
            "defaultMode",
            "additionalDirectories",
        ]
        .contains(&key.as_str())
        {
            out.skip(
                format!("{file}: permissions.{key}"),
                "not a permission rule toolgate has",
            );
        }
    }
}

/// One of Claude Code's `additionalDirectories` as a path pattern's spec:
/// an absolute path as `//path`, a home path as `~/path`, and a relative one
/// (`../docs/`) resolved where Claude Code resolves it, against the
/// directory it runs in: the project whose `.claude/` holds the settings
/// file, else the directory the import runs in. `None` for an empty name.
fn additional_directory(file: &str, dir: &str) -> Option<String> {
    let dir = dir.trim();
    if dir.is_empty() {
        return None;
    }
    if dir == "~" || dir.starts_with("~/") {
        return Some(dir.to_string());
    }
    if dir.starts_with('/') {
        return Some(format!("//{}", dir.trim_start_matches('/')));
    }
    let settings = std::path::Path::new(file);
    let folder = settings.parent().unwrap_or(std::path::Path::new(""));
    let cwd = std::env::current_dir().unwrap_or_else(|_| std::path::PathBuf::from("/"));
    let project = match folder.file_name() {
        Some(name) if name == ".claude" => folder.parent().unwrap_or(folder).to_path_buf(),
        _ => std::path::PathBuf::new(),
    };
    let base = toolgate_policy::normalize(&project.to_string_lossy(), &cwd, None);
    let full = toolgate_policy::normalize(dir, &base, None);
    Some(format!(
        "//{}",
        full.to_string_lossy().trim_start_matches('/')
    ))
}

/// qwen-code's tool lists (`run_shell_command(git)`: a command prefix).
fn qwen_list(out: &mut Converted, file: &str, key: &str, list: &Value, action: &str) {
    let Some(list) = list.as_array() else {
        return out.skip(format!("{file}: {key}"), "not a list");
    };
    for (index, entry) in list.iter().enumerate() {
        let place = format!("{file}: {key}[{index}]");
        let Some(entry) = entry.as_str() else {
            out.skip(place, "not a string");
            continue;
        };
        // A shell prefix is a prefix: as Claude's `:*`.
        let entry = match entry.split_once('(') {
            Some((tool, rest)) if permission_of(tool).as_deref() == Some("bash") => {
                format!("{tool}({}:*)", rest.trim_end_matches(')'))
            }
            _ => entry.to_string(),
        };
        claude_rule(out, &place, &entry, action);
    }
}

fn qwen(out: &mut Converted, file: &str, value: &Value) {
    claude_permissions(out, file, value);
    let tools = value.get("tools");
    for (key, found, action) in [
        (
            "tools.allowed",
            tools.and_then(|t| t.get("allowed")),
            "allow",
        ),
        ("allowedTools", value.get("allowedTools"), "allow"),
        (
            "tools.exclude",
            tools.and_then(|t| t.get("exclude")),
            "deny",
        ),
        ("excludeTools", value.get("excludeTools"), "deny"),
    ] {
        if let Some(list) = found {
            qwen_list(out, file, key, list, action);
        }
    }
    for (key, found) in [
        ("tools.core", tools.and_then(|t| t.get("core"))),
        ("coreTools", value.get("coreTools")),
    ] {
        if found.is_some() {
            out.skip(
                format!("{file}: {key}"),
                "restricts which tools exist rather than what they may do: give it as a session scope (`session_start` permissions.allowedTools)",
            );
        }
    }
}

fn opencode(out: &mut Converted, file: &str, value: &Value, agent: Option<&str>) {
    match value.get("permission") {
        Some(Value::String(action)) => out.rule("*", "*", action),
        Some(Value::Object(rules)) => merge_permission(out, rules),
        Some(_) => out.skip(format!("{file}: permission"), "not an action or an object"),
        None => {}
    }
    if let Some(agent) = agent {
        match value.pointer(&format!("/agent/{agent}/permission")) {
            Some(Value::Object(rules)) => merge_permission(out, rules),
            Some(Value::String(action)) => out.rule("*", "*", action),
            _ => out.skip(
                format!("{file}: agent.{agent}"),
                "no such agent, or it has no permission",
            ),
        }
    }
}

fn merge_permission(out: &mut Converted, rules: &Map<String, Value>) {
    for (permission, value) in rules {
        match value {
            Value::String(action) => out.rule(permission, "*", action),
            Value::Object(patterns) => {
                for (pattern, action) in patterns {
                    if let Some(action) = action.as_str() {
                        out.rule(permission, pattern, action);
                    }
                }
            }
            _ => out.skip(
                format!("permission.{permission}"),
                "not an action or an object",
            ),
        }
    }
}

fn gemini(out: &mut Converted, file: &str, text: &str) {
    let value: toml::Table = match toml::from_str(text) {
        Ok(value) => value,
        Err(err) => return out.skip(file, format!("not TOML: {err}")),
    };
    let Some(rules) = value.get("rule").and_then(toml::Value::as_array) else {
        return out.skip(file, "no [[rule]] tables");
    };
    let mut ordered: Vec<(i64, usize, &toml::Value)> = rules
        .iter()
        .enumerate()
        .map(|(index, rule)| {
            (
                rule.get("priority")
                    .and_then(toml::Value::as_integer)
                    .unwrap_or(0),
                index,
                rule,
            )
        })
        .collect();
    ordered.sort_by_key(|(priority, index, _)| (*priority, *index));
    for (_, index, rule) in ordered {
        let place = format!("{file}: rule[{index}]");
        let action = match rule.get("decision").and_then(toml::Value::as_str) {
            Some("allow") => "allow",
            Some("deny") => "deny",
            Some("ask_user") => "ask",
            other => {
                out.skip(
                    place,
                    format!("decision {other:?} is not allow, deny or ask_user"),
                );
                continue;
            }
        };
        if rule.get("argsPattern").is_some() {
            out.skip(place, "argsPattern is a regular expression over the arguments: toolgate's rules match the command or path, so it is not converted");
            continue;
        }
        if rule.get("modes").is_some() {
            out.skip(
                place,
                "a rule for some approval modes only: toolgate's rules hold in every mode",
            );
            continue;
        }
        let tools: Vec<&str> = match rule.get("toolName") {
            Some(toml::Value::String(tool)) => vec![tool.as_str()],
            Some(toml::Value::Array(tools)) => {
                tools.iter().filter_map(toml::Value::as_str).collect()
            }
            None => vec!["*"],
            Some(_) => {
                out.skip(place, "toolName is not a name or a list of names");
                continue;
            }
        };
        let prefixes: Vec<&str> = match rule.get("commandPrefix") {
            Some(toml::Value::String(prefix)) => vec![prefix.as_str()],
            Some(toml::Value::Array(list)) => list.iter().filter_map(toml::Value::as_str).collect(),
            _ => Vec::new(),
        };
        for tool in tools {
            let permission = match tool {
                "*" => "*".to_string(),
                tool => match permission_of(tool) {
                    Some(permission) => permission,
                    None => {
                        out.skip(
                            place.clone(),
                            format!("`{tool}` is a tool toolgate does not know"),
                        );
                        continue;
                    }
                },
            };
            if prefixes.is_empty() {
                out.rule(&permission, "*", action);
            }
            for prefix in &prefixes {
                // Gemini matches the prefix on a word boundary.
                let pattern = if action == "allow" {
                    format!("{prefix} *")
                } else {
                    format!("{prefix}*")
                };
                out.rule(&permission, &pattern, action);
            }
        }
    }
}

/// Convert `text` (the file `name`) from `format` into `out`.
pub fn convert(out: &mut Converted, format: Format, name: &str, text: &str, agent: Option<&str>) {
    if format == Format::Gemini {
        return gemini(out, name, text);
    }
    let value: Value = match serde_json::from_str(&toolgate_policy::opencode::strip_jsonc(text)) {
        Ok(value) => value,
        Err(err) => return out.skip(name, format!("not JSON: {err}")),
    };
    match format {
        Format::Claude => claude_permissions(out, name, &value),
        Format::Qwen => qwen(out, name, &value),
        Format::Opencode => opencode(out, name, &value, agent),
        Format::Gemini => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic

    use super::*;

    fn converted(format: Format, text: &str) -> (Value, Vec<String>) {
        let mut out = Converted::default();
        convert(&mut out, format, "f", text, None);
        (
            Value::Object(out.policy),
            out.skipped
                .into_iter()
                .map(|(place, why)| format!("{place}: {why}"))
                .collect(),
        )
    }

    #[test]
    fn claude_rules_in_precedence_order() {
        let (policy, skipped) = converted(
            Format::Claude,
            r#"{"permissions": {"deny": ["Bash(git push:*)", "Read(~/.ssh/**)"], "allow": ["Bash(git:*)", "Read", "Edit(./src/**)", "WebFetch(domain:docs.rs)", "mcp__github"],
                "ask": ["Bash(npm publish)"], "defaultMode": "acceptEdits", "additionalDirectories": ["/srv/shared/"], "disableBypassPermissionsMode": "disable"}}"#,
        );
        assert_eq!(
            policy,
            json!({"permission": {
                "bash": {"git *": "allow", "npm publish": "ask", "git push*": "deny"},
                "read": {"*": "allow", "~/.ssh/*": "deny"},
                "edit": {"src/*": "allow"},
                "webfetch": {"http*://docs.rs": "allow", "http*://docs.rs/*": "allow"},
                "mcp__github__*": {"*": "allow"},
                "external_directory": {"/srv/shared": "allow", "/srv/shared/*": "allow"}},
              "mode": "auto_edit"})
        );
        assert_eq!(
            skipped,
            vec!["f: permissions.disableBypassPermissionsMode: not a permission rule toolgate has"]
        );
    }

    #[test]
    fn gemini_priorities_and_what_is_not_converted() {
        let (policy, skipped) = converted(
            Format::Gemini,
            r#"
[[rule]]
toolName = "run_shell_command"
commandPrefix = "git"
decision = "allow"
priority = 10

[[rule]]
toolName = "run_shell_command"
commandPrefix = ["git push", "git reset"]
decision = "deny"
priority = 100

[[rule]]
toolName = "write_file"
decision = "ask_user"

[[rule]]
toolName = "run_shell_command"
argsPattern = "rm .*"
decision = "deny"
"#,
        );
        assert_eq!(
            policy,
            json!({"permission": {"edit": {"*": "ask"}, "bash": {"git *": "allow", "git push*": "deny", "git reset*": "deny"}}})
        );
        assert_eq!(skipped.len(), 1);
        assert!(
            skipped[0].starts_with("f: rule[3]: argsPattern"),
            "{skipped:?}"
        );
    }

    #[test]
    fn qwen_lists_and_detection() {
        let text = r#"{"tools": {"allowed": ["run_shell_command(git status)"], "exclude": ["run_shell_command(rm)", "web_fetch"], "core": ["read_file"]}}"#;
        assert_eq!(detect("settings.json", text), Some(Format::Qwen));
        let (policy, skipped) = converted(Format::Qwen, text);
        assert_eq!(
            policy,
            json!({"permission": {"bash": {"git status *": "allow", "rm*": "deny"}, "webfetch": {"*": "deny"}}})
        );
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert_eq!(detect("p.toml", ""), Some(Format::Gemini));
        assert_eq!(
            detect("opencode.jsonc", "{\"permission\":{}}"),
            Some(Format::Opencode)
        );
        assert_eq!(
            detect(".claude/settings.json", "{\"permissions\":{}}"),
            Some(Format::Claude)
        );
        assert_eq!(detect("x.json", "{}"), None);
    }
}
