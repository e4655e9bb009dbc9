//! The policy file (`--policy FILE` or `toolgate.json`) and how the sources
//! combine into one [`Policy`].

use std::path::PathBuf;

use serde_json::Value;

use crate::error::PolicyError;
use crate::mode::{Kind, Mode};
use crate::rules::{merge_deep, Ruleset};
use crate::tools::Registry;
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
    /// `tools`: name, kind, optional permission name.
    pub tools: Vec<(String, Kind, Option<String>)>,
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
}

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

fn tools(value: &Value, file: &str) -> Result<Vec<(String, Kind, Option<String>)>, PolicyError> {
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
        for field in spec.keys() {
            if field != "kind" && field != "permission" {
                return Err(PolicyError::new(
                    file,
                    &format!("{key}.{field}"),
                    "unknown key; a tool takes `kind` and `permission`",
                ));
            }
        }
        out.push((name.clone(), kind, permission));
    }
    Ok(out)
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
    /// merged key by key (later wins) into one override.
    pub overrides: Vec<(String, Value)>,
    /// `--ask-timeout`, which beats the file's `askTimeoutSeconds`.
    pub ask_timeout_seconds: Option<u64>,
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
            for (tool, kind, permission) in &policy.tools {
                registry.declare(tool, *kind, permission.as_deref());
            }
            if let Some(permission) = &policy.permission {
                rules.extend(Ruleset::parse(permission, name, "permission", name, home)?);
            }
            for (i, tool) in policy.plan_mode_allowed_tools.iter().enumerate() {
                let spec = registry.lookup(tool);
                if spec.kind.is_writer() || spec.kind == Kind::ExitPlan {
                    warnings.push(format!(
                        "{name}: planModeAllowedTools[{i}]: `{tool}` is ignored: plan mode never allows {}",
                        spec.kind.noun()
                    ));
                } else {
                    plan_allowed.push(Wildcard::new(tool));
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

        let mut merged: Option<Value> = None;
        let mut override_origin = String::new();
        for (origin, value) in &sources.overrides {
            // Check each source on its own so the error names it.
            Ruleset::parse(value, origin, "permission", origin, home)?;
            merged = Some(match merged {
                Some(base) => merge_deep(&base, value),
                None => value.clone(),
            });
            override_origin = origin.clone();
        }
        let overrides = match &merged {
            Some(value) => Ruleset::parse(
                value,
                &override_origin,
                "permission",
                &override_origin,
                home,
            )?,
            None => Ruleset::default(),
        };

        let policy_file = file.map(|(_, policy)| policy);
        let mode = sources
            .mode
            .or(policy_file.and_then(|policy| policy.mode))
            .unwrap_or(Mode::Ask);
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
        let shell = toolgate_shell::Options {
            project_root: sources.project_root.clone(),
            cwd: None,
            trust_git_config: policy_file
                .and_then(|policy| policy.trust_git_config)
                .unwrap_or(true),
            extra_read_only,
        };
        let fetch_permissions = registry.permissions_of_kind(Kind::Fetch);
        Ok((
            Policy {
                fetch_permissions,
                shell_cache: crate::ShellCache::default(),
                default_mode: mode,
                project_root: sources.project_root,
                home: sources.home,
                registry,
                rules,
                overrides,
                plan_allowed,
                always_available,
                ask_timeout_seconds,
                shell,
            },
            warnings,
        ))
    }
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
            (r#"{"permissions":{}}"#, "toolgate.json: permissions: unknown key (did you mean `permission`?); known keys: mode, projectRoot, permission, tools, planModeAllowedTools, planModeReadOnlyCommands, askTimeoutSeconds, trustGitConfig, alwaysAvailableTools"),
            (r#"{"tools":{"deploy":{"kind":"launch"}}}"#, "toolgate.json: tools.deploy.kind: unknown kind `launch` (expected one of read, search, list, think, fetch, edit, shell, execute, exit_plan_mode, task, other)"),
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

    #[test]
    fn plan_mode_extras_that_could_write_are_ignored_with_a_warning() {
        let file = PolicyFile::parse(
            r#"{"planModeAllowedTools":["mcp__docs__search","bash","Edit","task"]}"#,
            "toolgate.json",
        )
        .unwrap();
        let (policy, warnings) = Policy::build(Sources {
            project_root: PathBuf::from("/p"),
            file: Some(("toolgate.json".into(), file)),
            ..Sources::default()
        })
        .unwrap();
        assert_eq!(policy.plan_allowed.len(), 1);
        assert_eq!(
            warnings,
            vec![
                "toolgate.json: planModeAllowedTools[1]: `bash` is ignored: plan mode never allows shell commands",
                "toolgate.json: planModeAllowedTools[2]: `Edit` is ignored: plan mode never allows file edits, writes, patches, deletes and moves",
                "toolgate.json: planModeAllowedTools[3]: `task` is ignored: plan mode never allows sub-agents",
            ]
        );
    }
}
