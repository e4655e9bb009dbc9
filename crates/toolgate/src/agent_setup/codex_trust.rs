//! Trusting toolgate's hook in Codex the way Codex itself does it: ask
//! `codex app-server` for the hook's current hash (`hooks/list`) and write
//! it as `hooks.state."KEY".trusted_hash` (`config/value/write`). toolgate
//! does not compute the hash itself: Codex owns that definition, and its
//! app-server is the documented way to record trust.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Why the hook could not be trusted.
#[derive(Debug)]
pub enum TrustError {
    /// `codex app-server` could not be started.
    Start(std::io::Error),
    /// It did not answer within the time given.
    TimedOut(&'static str),
    /// It answered with an error, or ended.
    Refused(String),
    /// `hooks/list` did not list the hook.
    NotListed(String),
}

impl std::fmt::Display for TrustError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TrustError::Start(err) => write!(f, "cannot start `codex app-server`: {err}"),
            TrustError::TimedOut(method) => {
                write!(f, "`codex app-server` did not answer {method} in time")
            }
            TrustError::Refused(why) => write!(f, "`codex app-server` refused: {why}"),
            TrustError::NotListed(key) => {
                write!(f, "`codex app-server` does not list the hook {key}")
            }
        }
    }
}

impl std::error::Error for TrustError {}

/// One `codex app-server` and its lines.
struct Server {
    child: Child,
    lines: mpsc::Receiver<String>,
    next: u64,
    deadline: Instant,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn request(&mut self, method: &'static str, params: Value) -> Result<Value, TrustError> {
        self.next += 1;
        let id = self.next;
        self.send(&json!({"id": id, "method": method, "params": params}))?;
        loop {
            let left = self
                .deadline
                .checked_duration_since(Instant::now())
                .ok_or(TrustError::TimedOut(method))?;
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(mpsc::RecvTimeoutError::Timeout) => return Err(TrustError::TimedOut(method)),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(TrustError::Refused(format!(
                        "it ended before answering {method}"
                    )))
                }
            };
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if message.get("id").and_then(Value::as_u64) != Some(id)
                || message.get("method").is_some()
            {
                continue;
            }
            if let Some(error) = message.get("error") {
                return Err(TrustError::Refused(format!("{method}: {error}")));
            }
            return Ok(message.get("result").cloned().unwrap_or(Value::Null));
        }
    }

    fn send(&mut self, message: &Value) -> Result<(), TrustError> {
        let stdin = self
            .child
            .stdin
            .as_mut()
            .ok_or_else(|| TrustError::Refused("no stdin".into()))?;
        writeln!(stdin, "{message}")
            .and_then(|()| stdin.flush())
            .map_err(|err| TrustError::Refused(err.to_string()))
    }
}

/// Trust the hook `key` (see [`super::edit::Change::trust_key`]) with the
/// Codex at `codex`, run in `cwd` with the process's environment
/// (`CODEX_HOME` included). The key Codex trusted.
pub fn trust(codex: &Path, cwd: &Path, key: &str, wait: Duration) -> Result<String, TrustError> {
    let mut child = Command::new(codex)
        .arg("app-server")
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(TrustError::Start)?;
    let (send, lines) = mpsc::channel();
    if let Some(stdout) = child.stdout.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
    }
    let mut server = Server {
        child,
        lines,
        next: 0,
        deadline: Instant::now() + wait,
    };
    server.request(
        "initialize",
        json!({"clientInfo": {"name": "toolgate", "title": "toolgate init", "version": env!("CARGO_PKG_VERSION")}}),
    )?;
    server.send(&json!({"method": "initialized"}))?;
    let listed = server.request("hooks/list", json!({"cwds": [cwd.display().to_string()]}))?;
    // Codex names the file as it found it; ours may differ by symbolic links.
    let (file, position) = key.rsplit_once(":pre_tool_use:").unwrap_or((key, ""));
    let canonical = std::fs::canonicalize(file)
        .map(|real| format!("{}:pre_tool_use:{position}", real.display()))
        .unwrap_or_else(|_| key.to_string());
    let hooks = listed
        .get("data")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.get("hooks").and_then(Value::as_array))
        .flatten();
    let mut found = None;
    for hook in hooks {
        let listed_key = hook.get("key").and_then(Value::as_str).unwrap_or("");
        if listed_key == key || listed_key == canonical {
            found = Some((
                listed_key.to_string(),
                hook.get("currentHash").cloned().unwrap_or(Value::Null),
            ));
        }
    }
    let Some((listed_key, hash)) = found else {
        return Err(TrustError::NotListed(key.to_string()));
    };
    server.request(
        "config/value/write",
        json!({
            "keyPath": format!("hooks.state.\"{listed_key}\".trusted_hash"),
            "value": hash,
            "mergeStrategy": "upsert",
        }),
    )?;
    Ok(listed_key)
}
