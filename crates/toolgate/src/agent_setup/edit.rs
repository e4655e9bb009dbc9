//! Merging toolgate's hook entry into an agent's settings file, keeping
//! everything else in it: JSON (Claude Code, Gemini CLI, qwen-code) is
//! parsed and written back with its keys in their order (serde_json's
//! `preserve_order`), TOML (Codex) is edited in place with `toml_edit`, so
//! its comments and layout stay.
//!
//! An earlier toolgate hook (`toolgate hook …`, whatever its path or flags)
//! is replaced where it stood, never doubled; a file that already holds
//! exactly the entry is left alone ([`Change::changed`] is false).

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::{is_toolgate_hook, Agent, SetupError};

/// The hook entry to install.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The agent.
    pub agent: Agent,
    /// The command (see [`super::hook_command`]).
    pub command: String,
    /// The timeout, in the agent's unit (see [`Agent::timeout`]).
    pub timeout: u64,
}

/// What installing an entry does to a file.
#[derive(Debug, Clone)]
pub struct Change {
    /// The settings file.
    pub file: PathBuf,
    /// Its text before (`None`: it does not exist).
    pub before: Option<String>,
    /// Its text after.
    pub after: String,
    /// Whether anything changes.
    pub changed: bool,
    /// Codex: the key of the hook in `hooks.state` (`FILE:pre_tool_use:I:J`).
    pub trust_key: Option<String>,
}

/// The backup of `file` that [`apply`] writes.
pub fn backup_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".toolgate-backup");
    PathBuf::from(name)
}

/// What installing `entry` into `file` would do; nothing is written.
pub fn plan(file: &Path, entry: &Entry) -> Result<Change, SetupError> {
    let before = match std::fs::read_to_string(file) {
        Ok(text) => Some(text),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(SetupError::Io {
                file: file.to_path_buf(),
                doing: "read",
                source,
            })
        }
    };
    let text = before.as_deref().unwrap_or("");
    let (after, changed, trust_key) = match entry.agent {
        Agent::Codex => {
            let (after, changed, key) = merge_toml(file, text, entry)?;
            (after, changed, Some(key))
        }
        Agent::Opencode => {
            let argv = super::split_command(&entry.command).ok_or_else(|| SetupError::Shape {
                file: file.to_path_buf(),
                message: format!("the hook command {:?} is not plain words", entry.command),
            })?;
            let after = super::opencode::plugin(&argv, entry.timeout);
            let changed = before.as_deref() != Some(after.as_str());
            if before
                .as_deref()
                .is_some_and(|text| super::opencode::argv_of(text).is_none())
            {
                return Err(SetupError::Shape {
                    file: file.to_path_buf(),
                    message: "this plugin was not written by `toolgate init opencode`".to_string(),
                });
            }
            (after, changed, None)
        }
        _ => {
            let (after, changed) = merge_json(file, text, entry)?;
            (after, changed, None)
        }
    };
    Ok(Change {
        file: file.to_path_buf(),
        changed: changed || before.is_none(),
        before,
        after,
        trust_key,
    })
}

/// Write a change: the old file first to its backup ([`backup_path`]), then
/// the new text through a temporary file renamed over it. Nothing is
/// written when nothing changes. The backup written, if any.
pub fn apply(change: &Change) -> Result<Option<PathBuf>, SetupError> {
    if !change.changed {
        return Ok(None);
    }
    let io = |doing: &'static str, file: &Path| {
        let file = file.to_path_buf();
        move |source| SetupError::Io {
            file,
            doing,
            source,
        }
    };
    if let Some(parent) = change.file.parent() {
        std::fs::create_dir_all(parent).map_err(io("create the directory of", &change.file))?;
    }
    let backup = match &change.before {
        Some(before) => {
            let backup = backup_path(&change.file);
            std::fs::write(&backup, before).map_err(io("write", &backup))?;
            Some(backup)
        }
        None => None,
    };
    let mut temporary = change.file.as_os_str().to_owned();
    temporary.push(".toolgate-new");
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, &change.after).map_err(io("write", &temporary))?;
    // Keep the file's permissions (a settings file may be private).
    if let Ok(meta) = std::fs::metadata(&change.file) {
        let _ = std::fs::set_permissions(&temporary, meta.permissions());
    }
    std::fs::rename(&temporary, &change.file).map_err(io("write", &change.file))?;
    Ok(backup)
}

/// The JSON hook object toolgate installs for `entry`.
fn json_hook(entry: &Entry) -> Value {
    let mut hook = Map::new();
    if entry.agent == Agent::Gemini {
        hook.insert("name".into(), json!("toolgate"));
    }
    hook.insert("type".into(), json!("command"));
    hook.insert("command".into(), json!(entry.command));
    hook.insert("timeout".into(), json!(entry.timeout));
    Value::Object(hook)
}

/// Whether a JSON hook object runs toolgate.
fn json_is_toolgate(hook: &Value) -> bool {
    hook.get("command")
        .and_then(Value::as_str)
        .is_some_and(is_toolgate_hook)
}

/// `text` (a settings file, maybe empty) with toolgate's hook group in
/// `hooks.EVENT`, every other toolgate hook removed; and whether the
/// settings changed.
fn merge_json(file: &Path, text: &str, entry: &Entry) -> Result<(String, bool), SetupError> {
    let shape = |message: String| SetupError::Shape {
        file: file.to_path_buf(),
        message,
    };
    let mut root: Value = if text.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(text).map_err(|err| SetupError::Parse {
            file: file.to_path_buf(),
            message: err.to_string(),
        })?
    };
    let event = entry.agent.event();
    let Some(object) = root.as_object_mut() else {
        return Err(shape("the settings are not a JSON object".into()));
    };
    let hooks = object.entry("hooks").or_insert_with(|| json!({}));
    let Some(hooks) = hooks.as_object_mut() else {
        return Err(shape("`hooks` is not an object".into()));
    };
    let list = hooks.entry(event).or_insert_with(|| json!([]));
    let Some(groups) = list.as_array_mut() else {
        return Err(shape(format!("`hooks.{event}` is not an array")));
    };
    let old = groups.clone();
    let mut kept = Vec::new();
    let mut at = None;
    for mut group in std::mem::take(groups) {
        let inner = group.get_mut("hooks").and_then(Value::as_array_mut);
        let had = inner
            .as_ref()
            .is_some_and(|h| h.iter().any(json_is_toolgate));
        if had {
            at.get_or_insert(kept.len());
            if let Some(inner) = inner {
                inner.retain(|hook| !json_is_toolgate(hook));
                if inner.is_empty() {
                    continue;
                }
            }
        }
        kept.push(group);
    }
    let group = json!({"matcher": entry.agent.match_all(), "hooks": [json_hook(entry)]});
    kept.insert(at.unwrap_or(kept.len()), group);
    let changed = kept != old;
    *groups = kept;
    let mut after = serde_json::to_string_pretty(&root).map_err(|err| SetupError::Parse {
        file: file.to_path_buf(),
        message: err.to_string(),
    })?;
    after.push('\n');
    Ok((after, changed))
}

/// `text` (Codex's config.toml, maybe empty) with toolgate's
/// `[[hooks.PreToolUse]]` group, every other toolgate hook removed; whether
/// it changed, and the hook's trust key.
fn merge_toml(
    file: &Path,
    text: &str,
    entry: &Entry,
) -> Result<(String, bool, String), SetupError> {
    use toml_edit::{value, ArrayOfTables, DocumentMut, Item, Table};
    let shape = |message: String| SetupError::Shape {
        file: file.to_path_buf(),
        message,
    };
    let mut doc: DocumentMut =
        text.parse()
            .map_err(|err: toml_edit::TomlError| SetupError::Parse {
                file: file.to_path_buf(),
                message: err.to_string().trim_end().replace('\n', " "),
            })?;
    let key_of = |i: usize, j: usize| format!("{}:pre_tool_use:{i}:{j}", absolute(file).display());
    // Already there, and alone: nothing to do.
    if let Some(groups) = doc
        .get("hooks")
        .and_then(|hooks| hooks.get("PreToolUse"))
        .and_then(Item::as_array_of_tables)
    {
        let mut ours = Vec::new();
        let mut exact = None;
        for (i, group) in groups.iter().enumerate() {
            let Some(hooks) = group.get("hooks").and_then(Item::as_array_of_tables) else {
                continue;
            };
            for (j, hook) in hooks.iter().enumerate() {
                let command = hook.get("command").and_then(Item::as_str).unwrap_or("");
                if is_toolgate_hook(command) {
                    ours.push((i, j));
                    if command == entry.command
                        && hook.get("type").and_then(Item::as_str) == Some("command")
                        && hook.get("timeout").and_then(Item::as_integer)
                            == i64::try_from(entry.timeout).ok()
                        && group.get("matcher").and_then(Item::as_str) == Some("*")
                    {
                        exact = Some((i, j));
                    }
                }
            }
        }
        if let (1, Some((i, j))) = (ours.len(), exact) {
            return Ok((text.to_string(), false, key_of(i, j)));
        }
    }
    let hooks = doc.entry("hooks").or_insert_with(|| {
        let mut table = Table::new();
        table.set_implicit(true);
        Item::Table(table)
    });
    let Some(hooks) = hooks.as_table_like_mut() else {
        return Err(shape("`hooks` is not a table".into()));
    };
    let list = hooks
        .entry("PreToolUse")
        .or_insert(Item::ArrayOfTables(ArrayOfTables::new()));
    let Some(groups) = list.as_array_of_tables_mut() else {
        return Err(shape(
            "`hooks.PreToolUse` is not an array of tables (`[[hooks.PreToolUse]]`)".into(),
        ));
    };
    for group in groups.iter_mut() {
        if let Some(inner) = group
            .get_mut("hooks")
            .and_then(Item::as_array_of_tables_mut)
        {
            inner.retain(|hook| {
                !hook
                    .get("command")
                    .and_then(Item::as_str)
                    .is_some_and(is_toolgate_hook)
            });
        }
    }
    groups.retain(|group| {
        group
            .get("hooks")
            .and_then(Item::as_array_of_tables)
            .is_none_or(|inner| !inner.is_empty())
    });
    let mut hook = Table::new();
    hook.insert("type", value("command"));
    hook.insert("command", value(entry.command.as_str()));
    hook.insert(
        "timeout",
        value(i64::try_from(entry.timeout).unwrap_or(i64::MAX)),
    );
    let mut inner = ArrayOfTables::new();
    inner.push(hook);
    let mut group = Table::new();
    group.insert("matcher", value("*"));
    group.insert("hooks", Item::ArrayOfTables(inner));
    groups.push(group);
    let key = key_of(groups.len() - 1, 0);
    let mut after = doc.to_string();
    if !after.ends_with('\n') {
        after.push('\n');
    }
    Ok((after, true, key))
}

/// `file` made absolute against the working directory (as Codex names it).
pub fn absolute(file: &Path) -> PathBuf {
    if file.is_absolute() {
        file.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|dir| dir.join(file))
            .unwrap_or_else(|_| file.to_path_buf())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
mod tests {
    use super::*;

    fn entry(agent: Agent) -> Entry {
        Entry {
            agent,
            command: "/bin/toolgate hook x".into(),
            timeout: 30,
        }
    }

    #[test]
    fn json_keeps_other_hooks_and_replaces_old_toolgate() {
        let text = r#"{"model":"m","hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"lint"},{"type":"command","command":"toolgate hook claude --mode plan"}]}],"Stop":[]}}"#;
        let (after, changed) =
            merge_json(Path::new("s.json"), text, &entry(Agent::Claude)).unwrap();
        assert!(changed);
        let value: Value = serde_json::from_str(&after).unwrap();
        assert_eq!(
            value["hooks"]["PreToolUse"],
            json!([
                {"matcher":"*","hooks":[{"type":"command","command":"/bin/toolgate hook x","timeout":30}]},
                {"matcher":"Bash","hooks":[{"type":"command","command":"lint"}]}
            ])
        );
        let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["model", "hooks"]);
        let (again, changed) =
            merge_json(Path::new("s.json"), &after, &entry(Agent::Claude)).unwrap();
        assert!(!changed);
        assert_eq!(again, after);
    }

    #[test]
    fn toml_keeps_comments_and_is_idempotent() {
        let text = "# mine\nmodel = \"m\" # the model\n\n[[hooks.PreToolUse]]\nmatcher = \"Bash\"\n[[hooks.PreToolUse.hooks]]\ntype = \"command\"\ncommand = \"lint\"\n";
        let (after, changed, key) =
            merge_toml(Path::new("/c/config.toml"), text, &entry(Agent::Codex)).unwrap();
        assert!(changed);
        assert!(
            after.starts_with("# mine\nmodel = \"m\" # the model\n"),
            "{after}"
        );
        assert!(after.contains("command = \"lint\""), "{after}");
        assert_eq!(key, "/c/config.toml:pre_tool_use:1:0");
        let (again, changed, key) =
            merge_toml(Path::new("/c/config.toml"), &after, &entry(Agent::Codex)).unwrap();
        assert!(!changed);
        assert_eq!(again, after);
        assert_eq!(key, "/c/config.toml:pre_tool_use:1:0");
        let parsed: toml::Table = toml::from_str(&after).unwrap();
        assert_eq!(
            parsed["hooks"]["PreToolUse"][1]["hooks"][0]["timeout"].as_integer(),
            Some(30)
        );
    }
}
