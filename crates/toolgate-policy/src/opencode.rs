//! OpenCode's own config (`opencode.json` / `opencode.jsonc`) read as a policy
//! file: its `permission`, its legacy `tools` switches and, for one agent
//! chosen by name, that agent's `permission` and `tools`. Everything else in
//! the file (`model`, `provider`, `mcp`, `theme`, the other agents, ...) is
//! not about permissions: it is ignored and named in one warning.
//!
//! How OpenCode itself combines them, and so how toolgate does:
//!
//! - `tools: {"write": false, "bash": false}` (OpenCode's way before v1.1.1)
//!   becomes `permission` entries: `write`, `edit`, `patch` and `multiedit`
//!   map to `edit`, any other name to the permission of that name (wildcards
//!   such as `mcp_github_*` included); `false` is `deny`. Where `permission`
//!   has the same key, `permission` wins (OpenCode merges the two key by key,
//!   `permission` last). OpenCode also reads `true` as `allow`; toolgate
//!   does not: `true` only said "the tool is enabled" in the old form, so it
//!   adds no rule (the mode and the other rules decide) and is named in the
//!   warning.
//! - `agent.NAME.permission` (after that agent's own `tools`, mapped the same
//!   way) is a second layer after the top-level one: its rules come later and
//!   win where both match, as in OpenCode's `Permission.merge(defaults, user,
//!   agent)`.
//!
//! The file may have comments (`//`, `/* */`) and trailing commas, as OpenCode
//! accepts in both file names ([`strip_jsonc`]).

use serde_json::{Map, Value};

use crate::config::PolicyFile;
use crate::error::PolicyError;
use crate::rules::Ruleset;

/// Whether a file name is one of OpenCode's config names.
pub fn is_opencode_name(file_name: &str) -> bool {
    matches!(file_name, "opencode.json" | "opencode.jsonc")
}

/// Whether a parsed config declares OpenCode's schema (`"$schema":
/// "https://opencode.ai/config.json"`, or any address on opencode.ai).
fn declares_opencode_schema(value: &Value) -> bool {
    value
        .get("$schema")
        .and_then(Value::as_str)
        .is_some_and(|schema| {
            let rest = schema
                .strip_prefix("https://")
                .or_else(|| schema.strip_prefix("http://"))
                .unwrap_or(schema);
            let host = rest.split('/').next().unwrap_or_default();
            host == "opencode.ai" || host.ends_with(".opencode.ai")
        })
}

/// A policy file read from disk: toolgate's own format, or OpenCode's config
/// when the file is named `opencode.json` / `opencode.jsonc` or declares
/// OpenCode's `$schema`. Returns the file and, for an OpenCode config, the
/// one warning naming what was ignored. `agent` (`--agent`) picks
/// `agent.NAME` of an OpenCode config; it is an error for toolgate's format
/// and for a name the file does not have.
pub fn parse_policy_file(
    text: &str,
    file: &str,
    file_name: &str,
    agent: Option<&str>,
) -> Result<(PolicyFile, Option<String>), PolicyError> {
    let opencode = is_opencode_name(file_name)
        || serde_json::from_str::<Value>(&strip_jsonc(text))
            .is_ok_and(|value| declares_opencode_schema(&value));
    if opencode {
        return parse_opencode(text, file, agent);
    }
    if let Some(agent) = agent {
        return Err(PolicyError::new(
            file,
            "",
            &format!("--agent {agent} needs an OpenCode config (opencode.json, opencode.jsonc or a file whose $schema is on opencode.ai), and this is a toolgate policy file"),
        ));
    }
    PolicyFile::parse(text, file).map(|policy| (policy, None))
}

/// Parse OpenCode's config. See the module documentation.
pub fn parse_opencode(
    text: &str,
    file: &str,
    agent: Option<&str>,
) -> Result<(PolicyFile, Option<String>), PolicyError> {
    let value: Value = serde_json::from_str(&strip_jsonc(text))
        .map_err(|err| PolicyError::new(file, "", &format!("not valid JSON: {err}")))?;
    let Value::Object(object) = value else {
        return Err(PolicyError::new(
            file,
            "",
            "an OpenCode config must be a JSON object",
        ));
    };
    let mut ignored: Vec<String> = Vec::new();
    let mut policy = PolicyFile::default();

    let (legacy, enabled) = legacy_tools(object.get("tools"), file, "tools")?;
    ignored.extend(enabled);
    let top = match (legacy, object.get("permission")) {
        (None, None) => None,
        (Some(legacy), None) => Some(legacy),
        (None, Some(permission)) => Some(permission.clone()),
        // OpenCode: mergeDeep(perms from tools, permission).
        (Some(legacy), Some(permission)) => Some(merge_deep(&legacy, permission)),
    };
    if let Some(top) = &top {
        // Checked now so the error names this file; combined in `Policy::build`.
        Ruleset::parse(top, file, "permission", file, None)?;
    }
    policy.permission = top;

    for key in object.keys() {
        match key.as_str() {
            "$schema" | "permission" | "tools" | "agent" => {}
            other => ignored.push(other.to_string()),
        }
    }

    let agents = agents_of(&object, file)?;
    match agent {
        None => {
            if !agents.is_empty() {
                let with_rules = agents
                    .values()
                    .any(|entry| entry.get("permission").is_some() || entry.get("tools").is_some());
                ignored.push(if with_rules {
                    "agent (pass --agent NAME to apply agent.NAME.permission)".to_string()
                } else {
                    "agent".to_string()
                });
            }
        }
        Some(name) => {
            let Some(entry) = agents.get(name) else {
                let names: Vec<&str> = agents.keys().map(String::as_str).collect();
                let known = if names.is_empty() {
                    "the file defines no agents".to_string()
                } else {
                    format!("agents in the file: {}", names.join(", "))
                };
                return Err(PolicyError::new(
                    file,
                    "agent",
                    &format!("--agent {name}: no agent `{name}` ({known})"),
                ));
            };
            let here = format!("agent.{name}");
            let Value::Object(entry) = entry else {
                return Err(PolicyError::new(
                    file,
                    &here,
                    "expected an object with the agent's settings",
                ));
            };
            if entry.get("disable") == Some(&Value::Bool(true)) {
                return Err(PolicyError::new(
                    file,
                    &here,
                    &format!("--agent {name}: the agent is disabled in this file (disable: true)"),
                ));
            }
            let (legacy, enabled) =
                legacy_tools(entry.get("tools"), file, &format!("{here}.tools"))?;
            ignored.extend(enabled);
            // OpenCode: Object.assign(perms from tools, permission), key by key.
            let layer = match (legacy, entry.get("permission")) {
                (None, None) => Value::Object(Map::new()),
                (Some(legacy), None) => legacy,
                (legacy, Some(Value::Object(permission))) => {
                    let mut merged = match legacy {
                        Some(Value::Object(legacy)) => legacy,
                        _ => Map::new(),
                    };
                    for (key, value) in permission {
                        merged.insert(key.clone(), value.clone());
                    }
                    Value::Object(merged)
                }
                (_, Some(permission)) => permission.clone(),
            };
            let key = format!("{here}.permission");
            Ruleset::parse(&layer, file, &key, file, None)?;
            policy.agent = Some((name.to_string(), layer));
            for other in agents.keys().filter(|other| *other != name) {
                ignored.push(format!("agent.{other}"));
            }
            for field in entry.keys() {
                if field != "permission" && field != "tools" {
                    ignored.push(format!("{here}.{field}"));
                }
            }
        }
    }

    let warning = (!ignored.is_empty()).then(|| {
        format!(
            "{file}: an OpenCode config: only its permissions are used; ignored: {}",
            ignored.join(", ")
        )
    });
    Ok((policy, warning))
}

/// One piece of OpenCode's configuration, in OpenCode's merge order: a
/// config file (`origin` is its path) or `OPENCODE_CONFIG_CONTENT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigText {
    /// The path of the file, or `OPENCODE_CONFIG_CONTENT`: names it in
    /// errors, warnings and as the origin of its rules.
    pub origin: String,
    /// Its text (JSONC).
    pub text: String,
}

/// OpenCode's configuration merged as OpenCode merges it (`--opencode`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Merged {
    /// The merged rules as `permission` objects, each with the origin of the
    /// entries it holds, in the merged order (the last matching rule wins):
    /// the top-level `permission` first, then `agent.NAME.permission` for
    /// `--agent NAME` (origin `PATH#agent.NAME`).
    pub layers: Vec<(String, Value)>,
    /// What went into the merge, lowest first: each config, then
    /// `OPENCODE_PERMISSION`, then each `PATH#agent.NAME`.
    pub sources: Vec<String>,
    /// One per config with keys that are not about permissions.
    pub warnings: Vec<String>,
}

/// A JSON value merged from several origins: each leaf remembers the origin
/// of the config that set it, objects keep the position a key first had.
#[derive(Debug, Clone)]
enum Tracked {
    Leaf(Value, String),
    Object(Vec<(String, Tracked)>),
}

impl Tracked {
    fn of(value: &Value, origin: &str) -> Tracked {
        match value {
            Value::Object(map) => Tracked::Object(
                map.iter()
                    .map(|(key, value)| (key.clone(), Tracked::of(value, origin)))
                    .collect(),
            ),
            other => Tracked::Leaf(other.clone(), origin.to_string()),
        }
    }

    /// remeda's `mergeDeep(self, over)`, as OpenCode merges its configs:
    /// objects merge key by key (a key keeps its first position), anything
    /// else is replaced by `over`.
    fn merge(self, over: Tracked) -> Tracked {
        match (self, over) {
            (Tracked::Object(mut base), Tracked::Object(over)) => {
                for (key, value) in over {
                    match base.iter_mut().find(|(known, _)| *known == key) {
                        Some((_, existing)) => {
                            let old = std::mem::replace(existing, Tracked::Object(Vec::new()));
                            *existing = old.merge(value);
                        }
                        None => base.push((key, value)),
                    }
                }
                Tracked::Object(base)
            }
            (_, over) => over,
        }
    }

    /// `Object.assign(self, over)`: key by key, each value replaced whole.
    fn assign(self, over: Tracked) -> Tracked {
        match (self, over) {
            (Tracked::Object(mut base), Tracked::Object(over)) => {
                for (key, value) in over {
                    match base.iter_mut().find(|(known, _)| *known == key) {
                        Some((_, existing)) => *existing = value,
                        None => base.push((key, value)),
                    }
                }
                Tracked::Object(base)
            }
            (_, over) => over,
        }
    }

    /// The leaves in order, each with its path.
    fn leaves<'a>(
        &'a self,
        path: &mut Vec<&'a str>,
        out: &mut Vec<(Vec<String>, &'a Value, &'a str)>,
    ) {
        match self {
            Tracked::Leaf(value, origin) => out.push((
                path.iter().map(|key| key.to_string()).collect(),
                value,
                origin,
            )),
            Tracked::Object(entries) => {
                for (key, value) in entries {
                    path.push(key);
                    value.leaves(path, out);
                    path.pop();
                }
            }
        }
    }

    /// The value as `permission` objects, one per run of entries from the
    /// same origin: parsed in this order, they give the rules the merged
    /// object gives, each rule named by the config that set it.
    fn runs(&self) -> Vec<(String, Value)> {
        let mut leaves = Vec::new();
        self.leaves(&mut Vec::new(), &mut leaves);
        let mut runs: Vec<(String, Value)> = Vec::new();
        for (path, value, origin) in leaves {
            if path.is_empty() {
                // A whole `permission` that is one action.
                runs.push((origin.to_string(), value.clone()));
                continue;
            }
            let fresh = !matches!(runs.last(), Some((known, Value::Object(_))) if known == origin);
            if fresh {
                runs.push((origin.to_string(), Value::Object(Map::new())));
            }
            if let Some((_, Value::Object(run))) = runs.last_mut() {
                insert_at(run, &path, value.clone());
            }
        }
        runs
    }
}

/// Put `value` at `path` in `map`, making the objects on the way.
fn insert_at(map: &mut Map<String, Value>, path: &[String], value: Value) {
    match path {
        [] => {}
        [last] => {
            map.insert(last.clone(), value);
        }
        [first, rest @ ..] => {
            let next = map
                .entry(first.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if !next.is_object() {
                *next = Value::Object(Map::new());
            }
            if let Value::Object(next) = next {
                insert_at(next, rest, value);
            }
        }
    }
}

/// OpenCode's legacy `tools` (merged) as `permission` entries: `false` is
/// `deny` of the permission the tool stands for; `true` adds no rule (see
/// the module documentation).
fn tracked_legacy(tools: Option<&Tracked>) -> Tracked {
    let mut perms = Tracked::Object(Vec::new());
    if let Some(Tracked::Object(entries)) = tools {
        for (tool, on) in entries {
            if let Tracked::Leaf(Value::Bool(false), origin) = on {
                let entry = Tracked::Object(vec![(
                    legacy_permission(tool).to_string(),
                    Tracked::Leaf(Value::String("deny".to_string()), origin.clone()),
                )]);
                perms = perms.assign(entry);
            }
        }
    }
    perms
}

/// OpenCode's configuration merged as OpenCode merges it, for `--opencode`:
/// `configs` in OpenCode's order (lowest first), each merged over the ones
/// before with `mergeDeep`; `OPENCODE_PERMISSION` (plain JSON) merged into
/// the merged `permission`; then the merged legacy `tools` put under it
/// (`mergeDeep(perms from tools, permission)`). With `agent`, that agent's
/// merged `tools` and `permission` (`Object.assign`) are a second layer, as
/// for one file. Each config is checked on its own first, so an error names
/// the file (or `OPENCODE_CONFIG_CONTENT`, `OPENCODE_PERMISSION`) and key.
pub fn merge_opencode(
    configs: &[ConfigText],
    permission_env: Option<&str>,
    agent: Option<&str>,
) -> Result<Merged, PolicyError> {
    let mut merged = Merged::default();
    let mut tools: Option<Tracked> = None;
    let mut permission: Option<Tracked> = None;
    let mut agent_tools: Option<Tracked> = None;
    let mut agent_permission: Option<Tracked> = None;
    let mut agent_disabled: Option<(bool, String)> = None;
    let mut agent_sources = Vec::new();
    let mut agent_names: Vec<String> = Vec::new();
    let over = |base: Option<Tracked>, value: &Value, origin: &str| match base {
        Some(base) => base.merge(Tracked::of(value, origin)),
        None => Tracked::of(value, origin),
    };
    for config in configs {
        let file = config.origin.as_str();
        let value: Value = serde_json::from_str(&strip_jsonc(&config.text))
            .map_err(|err| PolicyError::new(file, "", &format!("not valid JSON: {err}")))?;
        let Value::Object(object) = value else {
            return Err(PolicyError::new(
                file,
                "",
                "an OpenCode config must be a JSON object",
            ));
        };
        // Checked on its own, so an error names this config.
        let (_, enabled) = legacy_tools(object.get("tools"), file, "tools")?;
        if let Some(value) = object.get("permission") {
            Ruleset::parse(value, file, "permission", file, None)?;
        }
        let mut ignored = enabled;
        for key in object.keys() {
            match key.as_str() {
                "$schema" | "permission" | "tools" | "agent" => {}
                other => ignored.push(other.to_string()),
            }
        }
        if let Some(value) = object.get("tools") {
            tools = Some(over(tools, value, file));
        }
        if let Some(value) = object.get("permission") {
            permission = Some(over(permission, value, file));
        }
        let agents = agents_of(&object, file)?;
        for name in agents.keys() {
            if !agent_names.contains(name) {
                agent_names.push(name.clone());
            }
        }
        match agent {
            None => {
                if !agents.is_empty() {
                    let with_rules = agents.values().any(|entry| {
                        entry.get("permission").is_some() || entry.get("tools").is_some()
                    });
                    ignored.push(if with_rules {
                        "agent (pass --agent NAME to apply agent.NAME.permission)".to_string()
                    } else {
                        "agent".to_string()
                    });
                }
            }
            Some(name) => {
                for other in agents.keys().filter(|other| *other != name) {
                    ignored.push(format!("agent.{other}"));
                }
                if let Some(entry) = agents.get(name) {
                    let here = format!("agent.{name}");
                    let Value::Object(entry) = entry else {
                        return Err(PolicyError::new(
                            file,
                            &here,
                            "expected an object with the agent's settings",
                        ));
                    };
                    let origin = format!("{file}#agent.{name}");
                    let (_, enabled) =
                        legacy_tools(entry.get("tools"), file, &format!("{here}.tools"))?;
                    ignored.extend(enabled);
                    if let Some(value) = entry.get("permission") {
                        Ruleset::parse(value, file, &format!("{here}.permission"), file, None)?;
                        agent_permission = Some(over(agent_permission, value, &origin));
                    }
                    if let Some(value) = entry.get("tools") {
                        agent_tools = Some(over(agent_tools, value, &origin));
                    }
                    if let Some(Value::Bool(disable)) = entry.get("disable") {
                        agent_disabled = Some((*disable, file.to_string()));
                    }
                    for field in entry.keys() {
                        if !matches!(field.as_str(), "permission" | "tools" | "disable") {
                            ignored.push(format!("{here}.{field}"));
                        }
                    }
                    agent_sources.push(origin);
                }
            }
        }
        merged.sources.push(file.to_string());
        if !ignored.is_empty() {
            merged.warnings.push(format!(
                "{file}: an OpenCode config: only its permissions are used; ignored: {}",
                ignored.join(", ")
            ));
        }
    }
    if let Some(text) = permission_env {
        let origin = "OPENCODE_PERMISSION";
        let value: Value = serde_json::from_str(text)
            .map_err(|err| PolicyError::new(origin, "", &format!("not valid JSON: {err}")))?;
        Ruleset::parse(&value, origin, "permission", origin, None)?;
        permission = Some(over(permission, &value, origin));
        merged.sources.push(origin.to_string());
    }
    let top = tracked_legacy(tools.as_ref());
    let top = match permission {
        Some(permission) => top.merge(permission),
        None => top,
    };
    merged.layers = top.runs();

    if let Some(name) = agent {
        if agent_sources.is_empty() {
            let known = if agent_names.is_empty() {
                "the configuration defines no agents".to_string()
            } else {
                format!("agents in the configuration: {}", agent_names.join(", "))
            };
            return Err(PolicyError::new(
                "OpenCode's configuration",
                "agent",
                &format!("--agent {name}: no agent `{name}` ({known})"),
            ));
        }
        if let Some((true, file)) = &agent_disabled {
            return Err(PolicyError::new(
                file,
                &format!("agent.{name}"),
                &format!("--agent {name}: the agent is disabled (disable: true)"),
            ));
        }
        let legacy = tracked_legacy(agent_tools.as_ref());
        let layer = match agent_permission {
            Some(permission) => legacy.assign(permission),
            None => legacy,
        };
        merged.layers.extend(layer.runs());
        merged.sources.extend(agent_sources);
    }
    Ok(merged)
}

/// OpenCode's legacy `tools: {name: bool}` as a `permission` value (`false`
/// entries only), and the `true` entries, named for the warning.
fn legacy_tools(
    value: Option<&Value>,
    file: &str,
    key: &str,
) -> Result<(Option<Value>, Vec<String>), PolicyError> {
    let Some(value) = value else {
        return Ok((None, Vec::new()));
    };
    let Value::Object(tools) = value else {
        return Err(PolicyError::new(
            file,
            key,
            "expected an object of {tool: true or false} (OpenCode's legacy form)",
        ));
    };
    let mut permission = Map::new();
    let mut enabled = Vec::new();
    for (tool, on) in tools {
        let here = format!("{key}.{tool}");
        match on {
            Value::Bool(false) => {
                permission.insert(
                    legacy_permission(tool).to_string(),
                    Value::String("deny".to_string()),
                );
            }
            Value::Bool(true) => enabled.push(format!("{here}: true (adds no rule)")),
            _ => {
                return Err(PolicyError::new(
                    file,
                    &here,
                    "expected true or false (OpenCode's legacy form; in an opencode.json, tools are switched off with false)",
                ))
            }
        }
    }
    Ok((
        (!permission.is_empty()).then_some(Value::Object(permission)),
        enabled,
    ))
}

/// The permission a legacy `tools` entry stands for: the writers share `edit`.
fn legacy_permission(tool: &str) -> &str {
    match tool {
        "write" | "edit" | "patch" | "multiedit" => "edit",
        other => other,
    }
}

/// JSON with comments and trailing commas (JSONC, as OpenCode reads its
/// config) made plain JSON: `//` and `/* */` comments outside strings become
/// spaces (line breaks kept, so error positions stay right), and a comma
/// followed only by white space and comments before `}` or `]` becomes a
/// space; a leading byte order mark becomes spaces. Strings, escapes
/// included, are copied unchanged.
pub fn strip_jsonc(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let blank = |b: u8| if b == b'\n' || b == b'\r' { b } else { b' ' };
    // Where in `out` the last comma is, while only white space and comments follow it.
    let mut comma: Option<usize> = None;
    let mut i = 0;
    // A byte order mark, as editors on Windows write it.
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        out.extend_from_slice(b"   ");
        i = 3;
    }
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'"' => {
                comma = None;
                out.push(b);
                i += 1;
                while i < bytes.len() {
                    let c = bytes[i];
                    out.push(c);
                    i += 1;
                    if c == b'\\' {
                        if let Some(&next) = bytes.get(i) {
                            out.push(next);
                            i += 1;
                        }
                    } else if c == b'"' {
                        break;
                    }
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    out.push(blank(bytes[i]));
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                out.extend_from_slice(b"  ");
                i += 2;
                while i < bytes.len() {
                    if bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/') {
                        out.extend_from_slice(b"  ");
                        i += 2;
                        break;
                    }
                    out.push(blank(bytes[i]));
                    i += 1;
                }
            }
            b',' => {
                comma = Some(out.len());
                out.push(b);
                i += 1;
            }
            b'}' | b']' => {
                if let Some(at) = comma.take() {
                    out[at] = b' ';
                }
                out.push(b);
                i += 1;
            }
            b' ' | b'\t' | b'\n' | b'\r' => {
                out.push(b);
                i += 1;
            }
            _ => {
                comma = None;
                out.push(b);
                i += 1;
            }
        }
    }
    // Only ASCII bytes were replaced, and only outside strings: still UTF-8.
    String::from_utf8_lossy(&out).into_owned()
}

/// OpenCode's `mergeDeep`: objects merge key by key (a key already present
/// keeps its place, so written order, which decides between rules, is kept);
/// anything else is replaced by `over`.
fn merge_deep(base: &Value, over: &Value) -> Value {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            let mut merged = base.clone();
            for (key, value) in over {
                let next = match merged.get(key) {
                    Some(existing) => merge_deep(existing, value),
                    None => value.clone(),
                };
                merged.insert(key.clone(), next);
            }
            Value::Object(merged)
        }
        (_, over) => over.clone(),
    }
}

/// The `agent` object of an OpenCode config (empty when it has none).
fn agents_of(object: &Map<String, Value>, file: &str) -> Result<Map<String, Value>, PolicyError> {
    match object.get("agent") {
        None => Ok(Map::new()),
        Some(Value::Object(agents)) => Ok(agents.clone()),
        Some(_) => Err(PolicyError::new(
            file,
            "agent",
            "expected an object keyed by agent name",
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic

    use super::*;
    use serde_json::json;

    #[test]
    fn jsonc_is_made_json() {
        // Expected output with runs of white space shown as one space; the
        // output always has the input's length and line breaks.
        let cases = [
            ("{}", "{}"),
            ("{\"a\": 1, // one\n}", "{\"a\": 1 }"),
            ("[1, 2,]", "[1, 2 ]"),
            ("{\"a\": [1,],}", "{\"a\": [1 ] }"),
            ("{\"a\":1 /* x */ , /* y */ }", "{\"a\":1 }"),
            // Comment markers and commas inside strings stay.
            (
                "{\"u\": \"http://x/*y*/\", \"c\": \",]\"}",
                "{\"u\": \"http://x/*y*/\", \"c\": \",]\"}",
            ),
            // Escaped quotes and backslashes do not end a string early.
            ("{\"q\": \"a\\\"//b\", }", "{\"q\": \"a\\\"//b\" }"),
            ("{\"q\": \"\\\\\" // c\n}", "{\"q\": \"\\\\\" }"),
            ("/* a\nb */{}", " {}"),
            // Non-ASCII text in comments becomes spaces; in strings it stays.
            ("{\"é\": 1} // é", "{\"é\": 1} "),
            // A comma before a value is not trailing.
            ("[1, /* c */ 2]", "[1, 2]"),
            // An unterminated comment runs to the end (and the JSON then fails).
            ("{ /* open", "{ "),
            ("\u{feff}{\"a\": 1,}", "{\"a\": 1 }"),
        ];
        for (input, expected) in cases {
            let output = strip_jsonc(input);
            assert_eq!(output.len(), input.len(), "{input}");
            let breaks = |text: &str| text.matches('\n').count();
            assert_eq!(breaks(&output), breaks(input), "{input}");
            let collapsed: String = output
                .split(|c: char| c.is_ascii_whitespace())
                .filter(|piece| !piece.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            let expected_collapsed: String = expected
                .split(' ')
                .filter(|piece| !piece.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            assert_eq!(collapsed, expected_collapsed, "{input}");
        }
    }

    #[test]
    fn jsonc_errors_keep_their_position() {
        let text = "{\n  // comment\n  \"a\": 1,\n  \"b\": nope\n}";
        let err = serde_json::from_str::<Value>(&strip_jsonc(text)).unwrap_err();
        assert_eq!((err.line(), err.column()), (4, 9));
    }

    fn parsed(text: &str, agent: Option<&str>) -> String {
        match parse_policy_file(text, "opencode.json", "opencode.json", agent) {
            Ok((policy, warning)) => format!(
                "permission={} agent={} warning={}",
                policy.permission.map(|v| v.to_string()).unwrap_or_default(),
                policy
                    .agent
                    .map(|(name, v)| format!("{name}:{v}"))
                    .unwrap_or_default(),
                warning.unwrap_or_default()
            ),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn opencode_configs_give_their_permissions() {
        let realistic = r#"{
            "$schema": "https://opencode.ai/config.json",
            "model": "anthropic/claude-sonnet-4-5",
            "tools": {"write": false, "bash": true, "mcp_github_*": false},
            "permission": {"bash": {"git push *": "deny"}},
            "agent": {
                "review": {"model": "x", "tools": {"patch": false}, "permission": {"webfetch": "ask"}},
                "build": {"prompt": "p"}
            },
        }"#;
        let cases = [
            (realistic, None, r#"permission={"edit":"deny","mcp_github_*":"deny","bash":{"git push *":"deny"}} agent= warning=opencode.json: an OpenCode config: only its permissions are used; ignored: tools.bash: true (adds no rule), model, agent (pass --agent NAME to apply agent.NAME.permission)"#),
            (realistic, Some("review"), r#"permission={"edit":"deny","mcp_github_*":"deny","bash":{"git push *":"deny"}} agent=review:{"edit":"deny","webfetch":"ask"} warning=opencode.json: an OpenCode config: only its permissions are used; ignored: tools.bash: true (adds no rule), model, agent.build, agent.review.model"#),
            (realistic, Some("build"), r#"permission={"edit":"deny","mcp_github_*":"deny","bash":{"git push *":"deny"}} agent=build:{} warning=opencode.json: an OpenCode config: only its permissions are used; ignored: tools.bash: true (adds no rule), model, agent.review, agent.build.prompt"#),
            (realistic, Some("plan"), "opencode.json: agent: --agent plan: no agent `plan` (agents in the file: review, build)"),
            ("{}", Some("plan"), "opencode.json: agent: --agent plan: no agent `plan` (the file defines no agents)"),
            // `permission` wins over the legacy form, key by key.
            (r#"{"tools": {"edit": false}, "permission": {"edit": {"src/*": "allow"}}}"#, None, r#"permission={"edit":{"src/*":"allow"}} agent= warning="#),
            (r#"{"tools": {"edit": "no"}}"#, None, "opencode.json: tools.edit: expected true or false (OpenCode's legacy form; in an opencode.json, tools are switched off with false)"),
            (r#"{"permission": {"bash": "never"}}"#, None, "opencode.json: permission.bash: unknown action `never` (expected allow, ask or deny)"),
            (r#"{"agent": {"r": {"permission": {"bash": "never"}}}}"#, Some("r"), "opencode.json: agent.r.permission.bash: unknown action `never` (expected allow, ask or deny)"),
            (r#"{"agent": {"r": {"disable": true}}}"#, Some("r"), "opencode.json: agent.r: --agent r: the agent is disabled in this file (disable: true)"),
            ("{\"model\": \"x\" // c\n}", None, "permission= agent= warning=opencode.json: an OpenCode config: only its permissions are used; ignored: model"),
            ("[]", None, "opencode.json: an OpenCode config must be a JSON object"),
        ];
        for (text, agent, expected) in cases {
            assert_eq!(parsed(text, agent), expected, "{text} {agent:?}");
        }
    }

    #[test]
    fn the_format_is_told_by_name_or_schema() {
        let opencode_schema = json!({"$schema": "https://opencode.ai/config.json", "model": "m"});
        let check = |text: &str, name: &str, agent: Option<&str>| match parse_policy_file(
            text, name, name, agent,
        ) {
            Ok((_, warning)) => format!("ok {}", warning.is_some()),
            Err(err) => err.to_string(),
        };
        // By $schema, whatever the name.
        assert_eq!(
            check(&opencode_schema.to_string(), "policy.json", None),
            "ok true"
        );
        assert_eq!(
            check(&opencode_schema.to_string(), "toolgate.json", None),
            "ok true"
        );
        // A look-alike host is not OpenCode's.
        let other = json!({"$schema": "https://opencode.ai.example.com/x", "model": "m"});
        assert!(check(&other.to_string(), "toolgate.json", None).contains("model: unknown key"));
        // An opencode.jsonc by name.
        assert_eq!(
            check("{\"theme\": \"x\",}", "opencode.jsonc", None),
            "ok true"
        );
        // toolgate's format keeps refusing unknown keys, and --agent.
        assert!(check(r#"{"model": "m"}"#, "toolgate.json", None).contains("model: unknown key"));
        assert_eq!(
            check(r#"{"mode": "plan"}"#, "toolgate.json", Some("review")),
            "toolgate.json: --agent review needs an OpenCode config (opencode.json, opencode.jsonc or a file whose $schema is on opencode.ai), and this is a toolgate policy file"
        );
    }

    #[test]
    fn configs_merge_as_opencode_merges_them() {
        let text = |origin: &str, text: &str| ConfigText {
            origin: origin.to_string(),
            text: text.to_string(),
        };
        let configs = [
            text("g", r#"{"model": "m", "tools": {"write": false}, "permission": {"*": "deny", "bash": {"*": "ask", "rm *": "deny"}}}"#),
            text("p", "{\"permission\": {\"*\": \"allow\", \"bash\": {\"*\": \"allow\", \"git *\": \"ask\"},}, // c\n \"agent\": {\"r\": {\"tools\": {\"bash\": false}, \"permission\": {\"edit\": \"ask\"}}}}"),
        ];
        let merged = merge_opencode(
            &configs,
            Some(r#"{"bash": {"rm *": "allow"}, "webfetch": "deny"}"#),
            Some("r"),
        )
        .unwrap();
        let layers: Vec<String> = merged
            .layers
            .iter()
            .map(|(origin, value)| format!("{origin} {value}"))
            .collect();
        // A key keeps the place it first had: `*` of p stays before g's bash,
        // which OPENCODE_PERMISSION's `rm *` changes in place.
        assert_eq!(
            layers,
            [
                r#"g {"edit":"deny"}"#,
                r#"p {"*":"allow","bash":{"*":"allow"}}"#,
                r#"OPENCODE_PERMISSION {"bash":{"rm *":"allow"}}"#,
                r#"p {"bash":{"git *":"ask"}}"#,
                r#"OPENCODE_PERMISSION {"webfetch":"deny"}"#,
                r#"p#agent.r {"bash":"deny","edit":"ask"}"#,
            ]
        );
        assert_eq!(
            merged.sources,
            ["g", "p", "OPENCODE_PERMISSION", "p#agent.r"]
        );
        assert_eq!(
            merged.warnings,
            ["g: an OpenCode config: only its permissions are used; ignored: model"]
        );
        let err = merge_opencode(&configs, Some("{bad"), None).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("OPENCODE_PERMISSION: not valid JSON"),
            "{err}"
        );
        let err = merge_opencode(&configs, None, Some("nope")).unwrap_err();
        assert_eq!(err.to_string(), "OpenCode's configuration: agent: --agent nope: no agent `nope` (agents in the configuration: r)");
        let broken = [
            text("g", "{}"),
            text("p", r#"{"permission": {"bash": "never"}}"#),
        ];
        assert_eq!(
            merge_opencode(&broken, None, None).unwrap_err().to_string(),
            "p: permission.bash: unknown action `never` (expected allow, ask or deny)"
        );
    }
}
