//! The policy file (`--policy FILE` or `toolgate.json`) and how the sources
//! combine into one [`Policy`]: the rules of the built-in defaults, the
//! file's `permission` and each override, in that order, form one list in
//! which the last matching rule decides.

use std::path::PathBuf;

use serde_json::Value;

use crate::error::PolicyError;
use crate::mode::{mode_answer, Action, Kind, Mode};
use crate::names::check_permission_keys;
use crate::rules::Ruleset;
use crate::tools::{Registry, ToolSpec};
use crate::wildcard::Wildcard;
use crate::Policy;

/// The policy file, checked but not yet combined with the other sources.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyFile {
    /// `mode`.
    pub mode: Option<Mode>,
    /// `projectRoot`, as written (relative paths are relative to the file's directory).
    pub project_root: Option<String>,
    /// `permission`, OpenCode's config.
    pub permission: Option<Value>,
    /// From an OpenCode config read with `--agent NAME`: the agent's name and
    /// its `permission` (legacy `tools` included), a layer after `permission`
    /// (see [`crate::opencode`]).
    pub agent: Option<(String, Value)>,
    /// `tools`, in written order.
    pub tools: Vec<ToolDeclaration>,
    /// `planModeAllowedTools`.
    pub plan_mode_allowed_tools: Vec<String>,
    /// `planModeReadOnlyCommands`.
    pub plan_mode_read_only_commands: Vec<String>,
    /// `askTimeoutSeconds` (0 = wait forever).
    pub ask_timeout_seconds: Option<u64>,
    /// `trustGitConfig`.
    pub trust_git_config: Option<bool>,
    /// `alwaysAvailableTools`.
    pub always_available_tools: Option<Vec<String>>,
    /// `readOnlyAgents`.
    pub read_only_agents: Option<Vec<String>>,
}

/// One entry of the policy file's `tools`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDeclaration {
    /// The tool's name, as the agent sends it.
    pub name: String,
    /// `kind`.
    pub kind: Kind,
    /// `permission`: the rule key (default: the tool's name).
    pub permission: Option<String>,
    /// `subject`: the fields of the input its subject is read from, in
    /// order (a dotted name reaches into nested objects), each one the
    /// input gives judged on its own (`[]`: none, not even an MCP tool's
    /// default fields); `None` for the kind's own subject.
    pub subject: Option<Vec<String>>,
}

/// The kinds whose tools may name their `subject` fields: the kinds whose
/// input toolgate does not read otherwise (a read or an edit is judged by
/// its paths, a shell call by its commands, ...).
const SUBJECT_KINDS: &[Kind] = &[Kind::Execute, Kind::Other, Kind::Think];

const KEYS: &[&str] = &[
    "$schema",
    "mode",
    "projectRoot",
    "permission",
    "tools",
    "planModeAllowedTools",
    "planModeReadOnlyCommands",
    "askTimeoutSeconds",
    "trustGitConfig",
    "alwaysAvailableTools",
    "readOnlyAgents",
];

impl PolicyFile {
    /// Parse and check a policy file's text. `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<PolicyFile, PolicyError> {
        let value: Value = serde_json::from_str(text)
            .map_err(|err| PolicyError::new(file, "", &format!("not valid JSON: {err}")))?;
        let Value::Object(object) = value else {
            return Err(PolicyError::new(
                file,
                "",
                "the policy must be a JSON object",
            ));
        };
        let mut policy = PolicyFile::default();
        for (key, value) in &object {
            match key.as_str() {
                "$schema" => {}
                "mode" => {
                    let name = string(value, file, key)?;
                    policy.mode = Some(name.parse().map_err(|err: crate::mode::UnknownMode| {
                        PolicyError::new(file, key, &err.to_string())
                    })?);
                }
                "projectRoot" => policy.project_root = Some(string(value, file, key)?.to_string()),
                "permission" => {
                    // Checked now so the error names this file; combined in `Policy::build`.
                    Ruleset::parse(value, file, key, file, None)?;
                    policy.permission = Some(value.clone());
                }
                "tools" => policy.tools = tools(value, file)?,
                "planModeAllowedTools" => {
                    policy.plan_mode_allowed_tools = strings(value, file, key)?
                }
                "planModeReadOnlyCommands" => {
                    policy.plan_mode_read_only_commands = strings(value, file, key)?
                }
                "askTimeoutSeconds" => {
                    policy.ask_timeout_seconds = Some(value.as_u64().ok_or_else(|| {
                        PolicyError::new(
                            file,
                            key,
                            "expected a whole number of seconds (0 = wait forever)",
                        )
                    })?)
                }
                "trustGitConfig" => {
                    policy.trust_git_config = Some(
                        value
                            .as_bool()
                            .ok_or_else(|| PolicyError::new(file, key, "expected true or false"))?,
                    )
                }
                "alwaysAvailableTools" => {
                    policy.always_available_tools = Some(strings(value, file, key)?)
                }
                "readOnlyAgents" => policy.read_only_agents = Some(read_only_agents(value, file)?),
                unknown => {
                    let hint = KEYS
                        .iter()
                        .find(|known| {
                            known.eq_ignore_ascii_case(unknown.trim_end_matches('s'))
                                || known.trim_end_matches('s').eq_ignore_ascii_case(unknown)
                        })
                        .map(|known| format!(" (did you mean `{known}`?)"))
                        .unwrap_or_default();
                    return Err(PolicyError::new(
                        file,
                        unknown,
                        &format!("unknown key{hint}; known keys: {}", KEYS[1..].join(", ")),
                    ));
                }
            }
        }
        Ok(policy)
    }
}

/// The keys a managed policy takes: its `permission` rules and its `mode`
/// floor. Everything else of a policy file (`tools`, `projectRoot`,
/// `planModeAllowedTools`, ...) shapes how calls are read and could loosen
/// them, so a managed policy that sets it is refused rather than half-read.
const MANAGED_KEYS: &[&str] = &["$schema", "mode", "permission"];

impl PolicyFile {
    /// Parse and check a managed policy's text (the syntax of a policy file,
    /// of which only `mode` and `permission` may be set). `file` names it in
    /// errors.
    pub fn parse_managed(text: &str, file: &str) -> Result<PolicyFile, PolicyError> {
        let value: Value = serde_json::from_str(text)
            .map_err(|err| PolicyError::new(file, "", &format!("not valid JSON: {err}")))?;
        if let Value::Object(object) = &value {
            if let Some(key) = object
                .keys()
                .find(|key| !MANAGED_KEYS.contains(&key.as_str()))
            {
                let known = KEYS.contains(&key.as_str());
                return Err(PolicyError::new(
                    file,
                    key,
                    &format!(
                        "{}; a managed policy takes only `mode` (a floor) and `permission`",
                        if known {
                            "not taken in a managed policy"
                        } else {
                            "unknown key"
                        }
                    ),
                ));
            }
        }
        PolicyFile::parse(text, file)
    }
}

fn string<'v>(value: &'v Value, file: &str, key: &str) -> Result<&'v str, PolicyError> {
    value
        .as_str()
        .ok_or_else(|| PolicyError::new(file, key, "expected a string"))
}

fn strings(value: &Value, file: &str, key: &str) -> Result<Vec<String>, PolicyError> {
    let Value::Array(items) = value else {
        return Err(PolicyError::new(file, key, "expected an array of strings"));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            item.as_str()
                .map(str::to_string)
                .ok_or_else(|| PolicyError::new(file, &format!("{key}[{i}]"), "expected a string"))
        })
        .collect()
}

fn tools(value: &Value, file: &str) -> Result<Vec<ToolDeclaration>, PolicyError> {
    let Value::Object(object) = value else {
        return Err(PolicyError::new(
            file,
            "tools",
            "expected an object keyed by tool name",
        ));
    };
    let mut out = Vec::new();
    for (name, spec) in object {
        let key = format!("tools.{name}");
        let Value::Object(spec) = spec else {
            return Err(PolicyError::new(
                file,
                &key,
                "expected an object such as {\"kind\": \"search\"}",
            ));
        };
        let kind_name = spec.get("kind").and_then(Value::as_str).ok_or_else(|| {
            PolicyError::new(file, &format!("{key}.kind"), "expected a kind name")
        })?;
        let kind = Kind::parse(kind_name).ok_or_else(|| {
            let names: Vec<&str> = Kind::ALL.iter().map(|kind| kind.as_str()).collect();
            PolicyError::new(
                file,
                &format!("{key}.kind"),
                &format!(
                    "unknown kind `{kind_name}` (expected one of {})",
                    names.join(", ")
                ),
            )
        })?;
        let permission = match spec.get("permission") {
            None => None,
            Some(Value::String(permission)) if !permission.is_empty() => Some(permission.clone()),
            Some(_) => {
                return Err(PolicyError::new(
                    file,
                    &format!("{key}.permission"),
                    "expected a non-empty permission name",
                ))
            }
        };
        let subject = match spec.get("subject") {
            None => None,
            Some(value) => Some(subject_fields(
                value,
                kind,
                file,
                &format!("{key}.subject"),
            )?),
        };
        for field in spec.keys() {
            if !matches!(field.as_str(), "kind" | "permission" | "subject") {
                return Err(PolicyError::new(
                    file,
                    &format!("{key}.{field}"),
                    "unknown key; a tool takes `kind`, `permission` and `subject`",
                ));
            }
        }
        out.push(ToolDeclaration {
            name: name.clone(),
            kind,
            permission,
            subject,
        });
    }
    Ok(out)
}

/// Check a tool's `subject`: a field name, or a list of them (`[]`: the tool
/// has no subject, an MCP tool's default fields included), each a key or a
/// dotted path of keys (`args.name`), for a tool of a kind whose input
/// toolgate does not read otherwise. Repeated names are kept once.
fn subject_fields(
    value: &Value,
    kind: Kind,
    file: &str,
    key: &str,
) -> Result<Vec<String>, PolicyError> {
    if !SUBJECT_KINDS.contains(&kind) {
        let kinds: Vec<&str> = SUBJECT_KINDS.iter().map(|kind| kind.as_str()).collect();
        return Err(PolicyError::new(
            file,
            key,
            &format!(
                "a tool of kind `{}` is judged by its own subject ({}); `subject` is for the kinds {}",
                kind.as_str(),
                kind_subject(kind),
                kinds.join(", ")
            ),
        ));
    }
    let names: Vec<(String, &Value)> = match value {
        Value::String(_) => vec![(key.to_string(), value)],
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| (format!("{key}[{i}]"), item))
            .collect(),
        _ => {
            return Err(PolicyError::new(
                file,
                key,
                "expected a field name or a list of field names",
            ))
        }
    };
    let mut fields: Vec<String> = Vec::new();
    for (here, item) in names {
        let Some(field) = item.as_str() else {
            return Err(PolicyError::new(file, &here, "expected a field name"));
        };
        if field.is_empty() {
            return Err(PolicyError::new(
                file,
                &here,
                "an empty name names no field",
            ));
        }
        if field.split('.').any(str::is_empty) {
            return Err(PolicyError::new(
                file,
                &here,
                &format!("`{field}` has an empty part; a nested field is written `args.name`"),
            ));
        }
        if !fields.iter().any(|seen| seen == field) {
            fields.push(field.to_string());
        }
    }
    Ok(fields)
}

/// What a tool of `kind` is judged by, for the error above.
fn kind_subject(kind: Kind) -> &'static str {
    match kind {
        Kind::Read | Kind::Edit | Kind::List => "the paths in its input",
        Kind::Search => "its pattern and the directory it searches",
        Kind::Fetch => "its URL",
        Kind::Shell => "its command",
        Kind::Task => "its sub-agent type",
        Kind::ExitPlan => "its plan",
        Kind::Think | Kind::Execute | Kind::Other => "none",
    }
}

/// Everything that goes into a [`Policy`], lowest precedence first.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// The project root, absolute and normalised.
    pub project_root: PathBuf,
    /// The user's home directory, for `~` in patterns and paths.
    pub home: Option<PathBuf>,
    /// `--mode`, which beats the file's `mode`.
    pub mode: Option<Mode>,
    /// The policy file and the name to report it by.
    pub file: Option<(String, PolicyFile)>,
    /// `TOOLGATE_PERMISSION` then `--permission`, each with its origin name:
    /// each a layer after the policy file's rules (the last match decides).
    pub overrides: Vec<(String, Value)>,
    /// `--ask-timeout`, which beats the file's `askTimeoutSeconds`.
    pub ask_timeout_seconds: Option<u64>,
    /// `--read-only-agents`, which beats the file's `readOnlyAgents`.
    pub read_only_agents: Option<Vec<String>>,
    /// Managed policies ([`PolicyFile::parse_managed`]), each with its origin
    /// (`managed:PATH`): layers after every other, each judged on its own,
    /// whose deny and ask rules are final and whose `mode` is a floor for
    /// every session (see [`crate::Ruleset::extend_managed`]).
    pub managed: Vec<(String, PolicyFile)>,
}

/// The default for `readOnlyAgents`: the agents' built-in sub-agents that
/// only read, which their own plan modes let run: Claude Code's `Explore`
/// and `Plan`, OpenCode's `explore` (through its `task` tool), Gemini CLI
/// 0.61's `codebase_investigator` and `cli_help` (through `invoke_agent`:
/// its plan policy allows exactly these). An entry `TOOL:TYPE` names a type
/// launched through that tool only, so a custom Claude Code agent that
/// happens to be called `explore` is not taken for OpenCode's.
pub const DEFAULT_READ_ONLY_AGENTS: &[&str] = &[
    "Explore",
    "Plan",
    "task:explore",
    "invoke_agent:codebase_investigator",
    "invoke_agent:cli_help",
];

/// Whether the `readOnlyAgents` entry `entry` names the sub-agent type
/// `agent` launched through `tool` (`TOOL:TYPE` for that tool only, `TYPE`
/// through any).
pub fn read_only_agent(entry: &str, tool: &str, agent: &str) -> bool {
    match entry.split_once(':') {
        Some((through, kind)) => through == tool && kind == agent,
        None => entry == agent,
    }
}

/// How the reminder names a `readOnlyAgents` entry.
pub fn read_only_agent_shown(entry: &str) -> String {
    match entry.split_once(':') {
        Some((through, kind)) => format!("{kind} via {through}"),
        None => entry.to_string(),
    }
}

/// Check `readOnlyAgents`: a list of sub-agent type names, each non-empty
/// and without wildcards (a pattern would admit types added later, writers
/// included).
fn read_only_agents(value: &Value, file: &str) -> Result<Vec<String>, PolicyError> {
    let names = strings(value, file, "readOnlyAgents")?;
    for (i, name) in names.iter().enumerate() {
        check_read_only_agent(name)
            .map_err(|why| PolicyError::new(file, &format!("readOnlyAgents[{i}]"), &why))?;
    }
    Ok(names)
}

/// Why `name` cannot be a read-only sub-agent type (`--read-only-agents`,
/// `readOnlyAgents`): it is empty, or it holds a wildcard or a blank.
pub fn check_read_only_agent(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        Err("an empty name names no sub-agent type".to_string())
    } else if name.contains(['*', '?', '[']) {
        Err(format!(
            "`{name}` is a wildcard; list each sub-agent type that only reads (such as `Explore`)"
        ))
    } else if name.chars().any(char::is_whitespace) {
        Err(format!(
            "`{name}` holds a blank; a sub-agent type is one word"
        ))
    } else {
        Ok(())
    }
}

/// The default for `alwaysAvailableTools`.
pub const DEFAULT_ALWAYS_AVAILABLE: &[&str] = &[
    "exit_plan_mode",
    "attempt_completion",
    "TodoWrite",
    "todowrite",
];

/// The default for `--ask-timeout`.
pub const DEFAULT_ASK_TIMEOUT_SECONDS: u64 = 300;

impl Policy {
    /// Combine the sources. Returns the policy and the warnings to print at start
    /// (entries that are ignored because they could loosen plan mode).
    pub fn build(sources: Sources) -> Result<(Policy, Vec<String>), PolicyError> {
        let home = sources.home.as_deref();
        let mut warnings = Vec::new();
        let file = sources.file.as_ref();

        let mut registry = Registry::default();
        let mut rules = Ruleset::builtin_defaults();
        let mut plan_allowed = Vec::new();
        let mut extra_read_only = Vec::new();
        if let Some((name, policy)) = file {
            for tool in &policy.tools {
                if let Some((origin, _)) = sources.managed.first() {
                    // Redeclared, a tool toolgate knows could leave the
                    // reach of the managed rules for its permission.
                    let builtin = Registry::default();
                    let known = builtin.lookup(&tool.name);
                    if known.known
                        && (known.kind != tool.kind
                            || known.permission != tool.permission.as_deref().unwrap_or(&tool.name)
                            || tool.subject.is_some())
                    {
                        return Err(PolicyError::new(
                            name,
                            &format!("tools.{}", tool.name),
                            &format!(
                                "`{}` is a tool toolgate knows (kind {}, permission `{}`), and a managed policy ({origin}) is in force: redeclared, it could leave the reach of the managed rules",
                                tool.name,
                                known.kind.as_str(),
                                known.permission
                            ),
                        ));
                    }
                }
                registry.declare(
                    &tool.name,
                    tool.kind,
                    tool.permission.as_deref(),
                    tool.subject.as_deref(),
                );
            }
            if let Some(permission) = &policy.permission {
                rules.extend(Ruleset::parse(permission, name, "permission", name, home)?);
                check_permission_keys(&registry, permission, name, &mut warnings)?;
            }
            if let Some((agent, permission)) = &policy.agent {
                let key = format!("agent.{agent}.permission");
                let origin = format!("{name}#agent.{agent}");
                rules.extend(Ruleset::parse(permission, name, &key, &origin, home)?);
                check_permission_keys(&registry, permission, &origin, &mut warnings)?;
            }
            for (i, tool) in policy.plan_mode_allowed_tools.iter().enumerate() {
                match plan_mode_extra(&registry, tool) {
                    Ok(pattern) => plan_allowed.push(pattern),
                    Err(reason) => warnings.push(format!(
                        "{name}: planModeAllowedTools[{i}]: `{tool}` is ignored: {reason}"
                    )),
                }
            }
            for (i, command) in policy.plan_mode_read_only_commands.iter().enumerate() {
                match toolgate_shell::validate_read_only_extra(command) {
                    Ok(tokens) => extra_read_only.push(tokens),
                    Err(reason) => warnings.push(format!(
                        "{name}: planModeReadOnlyCommands[{i}]: `{command}` is ignored: {reason}"
                    )),
                }
            }
        }

        // Each override is a layer of its own, after the policy file: its rules
        // keep their origin, and the last match over all layers decides.
        for (origin, value) in &sources.overrides {
            rules.extend(Ruleset::parse(value, origin, "permission", origin, home)?);
            check_permission_keys(&registry, value, origin, &mut warnings)?;
        }

        // The managed layers, last, each judged on its own; the strictest of
        // their modes is the floor of every session's mode.
        let mut mode_floor: Option<(Mode, String)> = None;
        for (origin, managed) in &sources.managed {
            if let Some(permission) = &managed.permission {
                rules.extend_managed(Ruleset::parse(
                    permission,
                    origin,
                    "permission",
                    origin,
                    home,
                )?);
                check_permission_keys(&registry, permission, origin, &mut warnings)?;
            }
            if let Some(mode) = managed.mode {
                if mode_floor
                    .as_ref()
                    .is_none_or(|(floor, _)| mode.strictness() > floor.strictness())
                {
                    mode_floor = Some((mode, origin.clone()));
                }
            }
        }

        let policy_file = file.map(|(_, policy)| policy);
        let mode = sources
            .mode
            .or(policy_file.and_then(|policy| policy.mode))
            .unwrap_or(Mode::Ask);
        let mode = match &mode_floor {
            Some((floor, _)) if floor.strictness() > mode.strictness() => *floor,
            _ => mode,
        };
        let ask_timeout_seconds = sources
            .ask_timeout_seconds
            .or(policy_file.and_then(|policy| policy.ask_timeout_seconds))
            .unwrap_or(DEFAULT_ASK_TIMEOUT_SECONDS);
        let always_available = policy_file
            .and_then(|policy| policy.always_available_tools.clone())
            .unwrap_or_else(|| {
                DEFAULT_ALWAYS_AVAILABLE
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            });
        let read_only_agents = sources
            .read_only_agents
            .clone()
            .or_else(|| policy_file.and_then(|policy| policy.read_only_agents.clone()))
            .unwrap_or_else(|| {
                DEFAULT_READ_ONLY_AGENTS
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            });
        let shell = toolgate_shell::Options {
            project_root: sources.project_root.clone(),
            cwd: None,
            trust_git_config: policy_file
                .and_then(|policy| policy.trust_git_config)
                .unwrap_or(true),
            extra_read_only,
            // Set by the binary, which can look at the disk.
            repo_oracle: None,
        };
        let fetch_permissions = registry.permissions_of_kind(Kind::Fetch);
        let read_guards = rules
            .rules()
            .iter()
            .filter(|rule| {
                rule.permission.matches("read")
                    && rule.action != Action::Allow
                    && rule.pattern.as_str() != "*"
            })
            .map(|rule| rule.pattern.clone())
            .collect();
        Ok((
            Policy {
                fetch_permissions,
                read_guards,
                shell_cache: crate::ShellCache::default(),
                id: crate::PolicyId::fresh(),
                // Set by the binary, which can look at the disk.
                glob_oracle: None,
                physical_root: None,
                default_mode: mode,
                mode_floor,
                project_root: sources.project_root,
                home: sources.home,
                registry,
                rules,
                plan_allowed,
                always_available,
                read_only_agents,
                ask_timeout_seconds,
                shell,
            },
            warnings,
        ))
    }
}

/// Check one `planModeAllowedTools` entry. It can only admit unknown and MCP
/// tools (the `other` row of the mode table); `Err` says why it is ignored:
///
/// - it is a command (`rm -rf build`, `Bash(git status)`), not a tool name;
/// - it is a wildcard (`mcp__*`, `mcp__docs__*`, `*`, `read_?`): entries name
///   concrete tools, since a pattern admits writers and tools added later;
/// - it names or matches, ignoring case, a tool that writes, runs programs or
///   shell commands, starts sub-agents or leaves plan mode (`bash`, `Edit`,
///   `task`, `BASH`, `*`): plan mode never allows those;
/// - it names a tool of another kind, for which the entry would change nothing
///   (`Read` is allowed anyway, `webfetch` asks).
fn plan_mode_extra(registry: &Registry, entry: &str) -> Result<Wildcard, String> {
    if entry.trim().is_empty() {
        return Err("it names no tool".to_string());
    }
    if entry.contains(char::is_whitespace) || entry.contains(['(', ')']) {
        return Err("it is a command, not a tool name; plan mode never allows shell commands that are not read-only (read-only ones are listed in planModeReadOnlyCommands)".to_string());
    }
    if entry.contains(['*', '?']) {
        return Err("it is a wildcard, and entries name concrete tools: a pattern would admit every tool it matches, writers and tools added later included (list each tool that only reads, such as `mcp__docs__search`)".to_string());
    }
    if crate::mcp_caller::is_mcp_caller(entry) {
        return Err("its calls are judged as the MCP tools they name (`mcp__SERVER__TOOL`), writers included: list each MCP tool that only reads, such as `mcp__docs__search`".to_string());
    }
    let folded = Wildcard::new(&entry.to_lowercase());
    let closed =
        |(_, spec): &(&str, &ToolSpec)| spec.kind.is_writer() || spec.kind == Kind::ExitPlan;
    let closed = (registry.known().filter(closed))
        .find(|(name, _)| *name == entry)
        .or_else(|| {
            (registry.known().filter(closed)).find(|(name, _)| folded.matches(&name.to_lowercase()))
        });
    if let Some((name, spec)) = closed {
        let matches = if name == entry {
            String::new()
        } else {
            format!("it matches `{name}`, and ")
        };
        return Err(match spec.kind {
            Kind::ExitPlan => {
                format!("{matches}leaving plan mode always needs the user's approval of the plan")
            }
            kind => format!("{matches}plan mode never allows {}", kind.noun()),
        });
    }
    let spec = registry.lookup(entry);
    if spec.known && spec.kind != Kind::Other {
        let answer = match mode_answer(Mode::Plan, spec.kind, false, false) {
            Action::Allow => "already allows",
            Action::Ask => "asks before",
            Action::Deny => "never allows",
        };
        return Err(format!(
            "planModeAllowedTools admits only unknown and MCP tools, and plan mode {answer} {}",
            spec.kind.noun()
        ));
    }
    Ok(Wildcard::new(entry))
}

/// Read `TOOLGATE_PERMISSION` / `--permission` text as a `permission` value.
pub fn parse_override(text: &str, origin: &str) -> Result<Value, PolicyError> {
    let value: Value = serde_json::from_str(text)
        .map_err(|err| PolicyError::new(origin, "", &format!("not valid JSON: {err}")))?;
    Ruleset::parse(&value, origin, "permission", origin, None)?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic

    use super::*;
    use serde_json::json;

    fn check(text: &str, expected: &str) {
        let actual = match PolicyFile::parse(text, "toolgate.json") {
            Ok(_) => "ok".to_string(),
            Err(err) => err.to_string(),
        };
        assert_eq!(actual, expected, "{text}");
    }

    #[test]
    fn policy_files_are_checked() {
        let cases = [
            (r#"{"mode":"plan","permission":{"bash":"ask"}}"#, "ok"),
            (r#"{"mode":"acceptEdits"}"#, "ok"),
            (
                r#"{"mode":"careful"}"#,
                "toolgate.json: mode: unknown mode `careful` (expected auto, auto_edit, ask, plan or readonly, or an alias such as default, yolo, acceptEdits, read-only)",
            ),
            (r#"{"permission":{"bash":{"rm *":"never"}}}"#, "toolgate.json: permission.bash.\"rm *\": unknown action `never` (expected allow, ask or deny)"),
            (r#"{"permissions":{}}"#, "toolgate.json: permissions: unknown key (did you mean `permission`?); known keys: mode, projectRoot, permission, tools, planModeAllowedTools, planModeReadOnlyCommands, askTimeoutSeconds, trustGitConfig, alwaysAvailableTools, readOnlyAgents"),
            (r#"{"readOnlyAgents":["Explore","Scout"]}"#, "ok"),
            (r#"{"readOnlyAgents":[]}"#, "ok"),
            (r#"{"readOnlyAgents":"Explore"}"#, "toolgate.json: readOnlyAgents: expected an array of strings"),
            (r#"{"readOnlyAgents":["Explore*"]}"#, "toolgate.json: readOnlyAgents[0]: `Explore*` is a wildcard; list each sub-agent type that only reads (such as `Explore`)"),
            (r#"{"readOnlyAgents":["Plan",""]}"#, "toolgate.json: readOnlyAgents[1]: an empty name names no sub-agent type"),
            (r#"{"readOnlyAgents":["general purpose"]}"#, "toolgate.json: readOnlyAgents[0]: `general purpose` holds a blank; a sub-agent type is one word"),
            (r#"{"tools":{"deploy":{"kind":"launch"}}}"#, "toolgate.json: tools.deploy.kind: unknown kind `launch` (expected one of read, search, list, think, fetch, edit, shell, execute, exit_plan_mode, task, other)"),
            (r#"{"tools":{"deploy":{"kind":"execute","subject":"target"}}}"#, "ok"),
            (r#"{"tools":{"mcp__gw__invoke":{"kind":"other","subject":["name","args.name"]}}}"#, "ok"),
            (r#"{"tools":{"notes":{"kind":"think","subject":["file","file"]}}}"#, "ok"),
            (r#"{"tools":{"deploy":{"kind":"execute","subject":""}}}"#, "toolgate.json: tools.deploy.subject: an empty name names no field"),
            (r#"{"tools":{"mcp__gh__get":{"kind":"other","subject":[]}}}"#, "ok"),
            (r#"{"tools":{"deploy":{"kind":"execute","subject":3}}}"#, "toolgate.json: tools.deploy.subject: expected a field name or a list of field names"),
            (r#"{"tools":{"deploy":{"kind":"execute","subject":["target",1]}}}"#, "toolgate.json: tools.deploy.subject[1]: expected a field name"),
            (r#"{"tools":{"deploy":{"kind":"execute","subject":["args..name"]}}}"#, "toolgate.json: tools.deploy.subject[0]: `args..name` has an empty part; a nested field is written `args.name`"),
            (r#"{"tools":{"mcp__fs__get":{"kind":"read","subject":"file"}}}"#, "toolgate.json: tools.mcp__fs__get.subject: a tool of kind `read` is judged by its own subject (the paths in its input); `subject` is for the kinds execute, other, think"),
            (r#"{"tools":{"x":{"kind":"shell","subject":"file"}}}"#, "toolgate.json: tools.x.subject: a tool of kind `shell` is judged by its own subject (its command); `subject` is for the kinds execute, other, think"),
            (r#"{"tools":{"deploy":{"kind":"execute","subjects":"target"}}}"#, "toolgate.json: tools.deploy.subjects: unknown key; a tool takes `kind`, `permission` and `subject`"),
            (r#"{"askTimeoutSeconds":-1}"#, "toolgate.json: askTimeoutSeconds: expected a whole number of seconds (0 = wait forever)"),
            (r#"{"planModeAllowedTools":"x"}"#, "toolgate.json: planModeAllowedTools: expected an array of strings"),
            (r#"{"planModeAllowedTools":[1]}"#, "toolgate.json: planModeAllowedTools[0]: expected a string"),
            ("[]", "toolgate.json: the policy must be a JSON object"),
            ("{", "toolgate.json: not valid JSON: EOF while parsing an object at line 1 column 1"),
        ];
        for (text, expected) in cases {
            check(text, expected);
        }
    }

    /// One `planModeAllowedTools` entry: `kept`, or the warning's reason.
    fn check_plan_extra(entry: &str, expected: &str) {
        let text = json!({
            "planModeAllowedTools": [entry],
            "tools": {"deploy": {"kind": "execute"}, "mcp__docs__get": {"kind": "read"},
                      "mcp__notes__add": {"kind": "edit"}, "mcp__misc__x": {"kind": "other"}}
        });
        let file = PolicyFile::parse(&text.to_string(), "toolgate.json").unwrap();
        let (policy, warnings) = Policy::build(Sources {
            project_root: PathBuf::from("/p"),
            file: Some(("toolgate.json".into(), file)),
            ..Sources::default()
        })
        .unwrap();
        let actual = match (policy.plan_allowed.as_slice(), warnings.as_slice()) {
            ([kept], []) => format!("kept {}", kept.as_str()),
            ([], [warning]) => {
                let prefix =
                    format!("toolgate.json: planModeAllowedTools[0]: `{entry}` is ignored: ");
                warning.strip_prefix(&prefix).unwrap_or(warning).to_string()
            }
            (kept, warnings) => format!("{} kept, warnings {warnings:?}", kept.len()),
        };
        assert_eq!(actual, expected, "{entry}");
    }

    const WILDCARD: &str = "it is a wildcard, and entries name concrete tools: a pattern would admit every tool it matches, writers and tools added later included (list each tool that only reads, such as `mcp__docs__search`)";

    #[test]
    fn plan_mode_extras_admit_only_unknown_and_mcp_tools() {
        let cases = [
            ("mcp__docs__search", "kept mcp__docs__search"),
            ("mcp__docs__*", WILDCARD),
            ("mcp__docs__searc?", WILDCARD),
            ("mcp__misc__x", "kept mcp__misc__x"),
            ("frobnicate", "kept frobnicate"),
            ("bash", "plan mode never allows shell commands"),
            ("Bash", "plan mode never allows shell commands"),
            ("run_shell_command", "plan mode never allows shell commands"),
            ("Edit", "plan mode never allows file edits, writes, patches, deletes and moves"),
            ("apply_patch", "plan mode never allows file edits, writes, patches, deletes and moves"),
            ("save_memory", "plan mode never allows file edits, writes, patches, deletes and moves"),
            ("task", "plan mode never allows sub-agents"),
            ("deploy", "plan mode never allows tools that run programs"),
            ("mcp__notes__add", "plan mode never allows file edits, writes, patches, deletes and moves"),
            ("exit_plan_mode", "leaving plan mode always needs the user's approval of the plan"),
            // Spellings and patterns that reach a closed tool.
            ("BASH", "it matches `Bash`, and plan mode never allows shell commands"),
            ("Shell", "it matches `shell`, and plan mode never allows shell commands"),
            // Wildcards: refused whatever they match.
            ("*", WILDCARD),
            ("mcp__*", WILDCARD),
            ("*_command", WILDCARD),
            ("mcp__github__get_*", WILDCARD),
            ("?", WILDCARD),
            // A tool that calls MCP tools by name is judged as the tool it calls.
            ("use_mcp_tool", "its calls are judged as the MCP tools they name (`mcp__SERVER__TOOL`), writers included: list each MCP tool that only reads, such as `mcp__docs__search`"),
            // Commands are not tool names.
            ("rm -rf build", "it is a command, not a tool name; plan mode never allows shell commands that are not read-only (read-only ones are listed in planModeReadOnlyCommands)"),
            ("Bash(rm:*)", "it is a command, not a tool name; plan mode never allows shell commands that are not read-only (read-only ones are listed in planModeReadOnlyCommands)"),
            ("git status", "it is a command, not a tool name; plan mode never allows shell commands that are not read-only (read-only ones are listed in planModeReadOnlyCommands)"),
            ("", "it names no tool"),
            // Tools of other kinds: listing them would change nothing.
            ("Read", "planModeAllowedTools admits only unknown and MCP tools, and plan mode already allows file reads"),
            ("mcp__docs__get", "planModeAllowedTools admits only unknown and MCP tools, and plan mode already allows file reads"),
            ("webfetch", "planModeAllowedTools admits only unknown and MCP tools, and plan mode asks before web fetches and web searches"),
        ];
        for (entry, expected) in cases {
            check_plan_extra(entry, expected);
        }
    }
}
