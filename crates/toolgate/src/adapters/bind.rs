//! Where an orchestrator puts an agent it starts: under a parent session,
//! within a scope. Codex, Gemini CLI and qwen-code choose their own session
//! ids, so an orchestrator cannot start their sessions ahead of them; it
//! gives the agent's hook (or `toolgate mcp`) `--parent ID` and `--scope
//! JSON` instead (or `TOOLGATE_PARENT`, `TOOLGATE_SCOPE`,
//! `TOOLGATE_SCOPE_FILE` in the agent's environment), and the agent's
//! session is started under that parent, with that scope, before its first
//! call is decided.
//!
//! The start is a `session_start` with `join`: the first call starts the
//! session; every later call joins it as it is. A session already started
//! under another parent refuses the start (and is shut: its calls are
//! denied) rather than run outside the tree the orchestrator named. As for
//! every session, the scope is added to the parent's, so the agent is never
//! allowed more than its parent.

use serde_json::{json, Value};
use toolgate_protocol::ClientFrame;

/// A parent and a scope for an agent's session; empty when neither was
/// given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Binding {
    /// The session the agent's session is started under.
    pub parent: Option<String>,
    /// The `permissions` of that start (a session scope).
    pub scope: Option<Value>,
}

/// The environment variables an orchestrator sets once per agent.
pub const PARENT_ENV: &str = "TOOLGATE_PARENT";
/// The scope as JSON.
pub const SCOPE_ENV: &str = "TOOLGATE_SCOPE";
/// A file holding the scope as JSON.
pub const SCOPE_FILE_ENV: &str = "TOOLGATE_SCOPE_FILE";

impl Binding {
    /// The binding the flags give, each falling back to its environment
    /// variable; `Err` says what cannot be used (the scope is checked as
    /// the broker would check it).
    pub fn resolve(
        parent: Option<String>,
        scope: Option<String>,
        scope_file: Option<std::path::PathBuf>,
    ) -> Result<Binding, String> {
        let env = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let parent = parent.or_else(|| env(PARENT_ENV));
        let (text, from) = match (scope, scope_file) {
            (Some(_), Some(_)) => {
                return Err("--scope and --scope-file name two scopes: give one".into())
            }
            (Some(text), None) => (Some(text), "--scope".to_string()),
            (None, Some(file)) => (
                Some(read(&file)?),
                format!("--scope-file {}", file.display()),
            ),
            (None, None) => match (env(SCOPE_ENV), env(SCOPE_FILE_ENV)) {
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "{SCOPE_ENV} and {SCOPE_FILE_ENV} name two scopes: set one"
                    ))
                }
                (Some(text), None) => (Some(text), SCOPE_ENV.to_string()),
                (None, Some(file)) => {
                    let file = std::path::PathBuf::from(file);
                    (
                        Some(read(&file)?),
                        format!("{SCOPE_FILE_ENV} {}", file.display()),
                    )
                }
                (None, None) => (None, String::new()),
            },
        };
        if parent
            .as_deref()
            .is_some_and(|parent| parent.trim().is_empty())
        {
            return Err("--parent names no session".into());
        }
        let scope = match text {
            None => None,
            Some(text) => Some(
                serde_json::from_str::<Value>(&text)
                    .map_err(|err| format!("{from} is not JSON: {err}"))?,
            ),
        };
        let binding = Binding { parent, scope };
        // Checked as the broker checks a start, so a scope it would refuse
        // is refused here, by name, before any call.
        if !binding.is_empty() {
            toolgate_protocol::decode_value(&binding.start_json("agent", None))
                .map_err(|err| format!("{from}: {}", err.message))?;
        }
        Ok(binding)
    }

    /// Neither a parent nor a scope.
    pub fn is_empty(&self) -> bool {
        self.parent.is_none() && self.scope.is_none()
    }

    /// The `session_start` (with `join`) binding `session`, as JSON; `mode`
    /// is the session's own mode when one was asked for.
    pub fn start_json(&self, session: &str, mode: Option<&str>) -> Value {
        let mut frame = json!({"type": "session_start", "sessionID": session, "join": true});
        if let Some(parent) = &self.parent {
            frame["parentID"] = json!(parent);
        }
        if let Some(scope) = &self.scope {
            frame["permissions"] = scope.clone();
        }
        if let Some(mode) = mode {
            frame["mode"] = json!(mode);
        }
        frame
    }

    /// The same start as a frame for a broker in this process; `None` when
    /// there is nothing to bind. `Err` (which [`Binding::resolve`] has ruled
    /// out) is the reason to deny the call.
    pub fn start(&self, session: &str, mode: Option<&str>) -> Result<Option<ClientFrame>, String> {
        if self.is_empty() {
            return Ok(None);
        }
        toolgate_protocol::decode_value(&self.start_json(session, mode))
            .map(Some)
            .map_err(|err| format!("the agent's session cannot be bound: {}", err.message))
    }
}

/// The text of a scope file.
fn read(file: &std::path::Path) -> Result<String, String> {
    std::fs::read_to_string(file)
        .map_err(|err| format!("cannot read the scope file {}: {err}", file.display()))
}
