//! The audit log (`serve --audit FILE`): one JSON line per decision and per
//! answer to a question, appended and flushed before the decision leaves
//! the broker, never rewritten.
//!
//! A decision's record holds everything needed to judge it again: the
//! call's tool, input and directory, its session (and parent), the client
//! that made it, the mode, the decision with its source, reason and rule
//! (with the rule's origin, or the grant that was used), who answered the
//! question and how long it waited. `toolgate replay --from audit` reads
//! the log back.
//!
//! A record that cannot be written is never a silent gap: the error is
//! logged, and the call it was about is denied (an `allow` is not let
//! through unrecorded).

use std::collections::HashMap;
use std::io::Write;

use serde_json::{json, Map, Value};
use toolgate_policy::Mode;
use toolgate_protocol as wire;

/// Where audit records go: one line each, appended.
pub trait AuditLog: Send {
    /// Append one record (without its newline) and flush it.
    fn append(&mut self, record: &[u8]) -> std::io::Result<()>;
}

/// An audit log file, opened for appending (created 0600 when missing).
pub struct FileAudit {
    file: std::fs::File,
    line: Vec<u8>,
}

impl FileAudit {
    /// Open `path` for appending. `Err` names the path and the reason.
    pub fn open(path: &std::path::Path) -> Result<FileAudit, AuditOpenError> {
        let mut options = std::fs::OpenOptions::new();
        options.create(true).append(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let file = options.open(path).map_err(|source| AuditOpenError {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(FileAudit {
            file,
            line: Vec::new(),
        })
    }
}

/// The audit log could not be opened: its path and the cause. The text
/// shown is the `Display`.
#[derive(Debug)]
pub struct AuditOpenError {
    /// The audit log's path.
    pub path: std::path::PathBuf,
    /// Why it could not be opened.
    pub source: std::io::Error,
}

impl std::fmt::Display for AuditOpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot open the audit log {}: {}",
            self.path.display(),
            self.source
        )
    }
}

impl std::error::Error for AuditOpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl AuditLog for FileAudit {
    fn append(&mut self, record: &[u8]) -> std::io::Result<()> {
        // One write per record: records of concurrent brokers appending to
        // the same file do not interleave within a line.
        self.line.clear();
        self.line.extend_from_slice(record);
        self.line.push(b'\n');
        self.file.write_all(&self.line)?;
        self.file.flush()
    }
}

/// What the broker remembers of a call until it is decided.
pub(super) struct Note {
    pub(super) tool: String,
    pub(super) input: Map<String, Value>,
    pub(super) cwd: Option<String>,
    pub(super) mode: Mode,
    pub(super) client: Option<String>,
}

/// The audit log and the calls it waits to record.
pub(super) struct Audit {
    log: Box<dyn AuditLog>,
    pub(super) notes: HashMap<(String, String), Note>,
}

/// What else a decision's record says.
pub(super) struct Context<'a> {
    pub(super) time: u64,
    pub(super) parent: Option<&'a str>,
    pub(super) note: Option<Note>,
    pub(super) answered_by: Option<String>,
    pub(super) waited_ms: Option<u64>,
}

fn source(source: wire::Source) -> &'static str {
    match source {
        wire::Source::Mode => "mode",
        wire::Source::Rule => "rule",
        wire::Source::Grant => "grant",
        wire::Source::User => "user",
        wire::Source::Scope => "scope",
        wire::Source::Timeout => "timeout",
        wire::Source::Cancel => "cancel",
        wire::Source::Shutdown => "shutdown",
        wire::Source::Invalid => "invalid",
        wire::Source::Replay => "replay",
    }
}

/// A key of a policy file as written: bare when it is a plain word.
fn quote(key: &str) -> String {
    if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        key.to_string()
    } else {
        format!("{key:?}")
    }
}

/// The subject of a call, for a person reading the log: the command, path,
/// URL or pattern (an argv is joined).
fn subject(input: &Map<String, Value>) -> Option<String> {
    for field in [
        "command",
        "cmd",
        "file_path",
        "filePath",
        "absolute_path",
        "path",
        "url",
        "pattern",
        "query",
        "subagent_type",
    ] {
        match input.get(field) {
            Some(Value::String(text)) => return Some(text.clone()),
            Some(Value::Array(words)) => {
                let words: Vec<&str> = words.iter().filter_map(Value::as_str).collect();
                return Some(words.join(" "));
            }
            _ => {}
        }
    }
    None
}

impl Audit {
    pub(super) fn new(log: Box<dyn AuditLog>) -> Audit {
        Audit {
            log,
            notes: HashMap::new(),
        }
    }

    /// Record `decision`. `Err` is the reason it could not be written.
    pub(super) fn decision(
        &mut self,
        decision: &wire::Decision,
        context: Context<'_>,
    ) -> Result<(), String> {
        let mut record = json!({
            "time": context.time,
            "event": "decision",
            "sessionID": decision.session_id,
            "callID": decision.call_id,
            "decision": match decision.decision {
                wire::Verdict::Allow => "allow",
                wire::Verdict::Deny => "deny",
            },
            "source": source(decision.source),
            "reason": decision.reason,
        });
        if let Some(parent) = context.parent {
            record["parentID"] = json!(parent);
        }
        if let Some(note) = &context.note {
            record["tool"] = json!(note.tool);
            if let Some(subject) = subject(&note.input) {
                record["subject"] = json!(subject);
            }
            record["input"] = Value::Object(note.input.clone());
            if let Some(cwd) = &note.cwd {
                record["cwd"] = json!(cwd);
            }
            record["mode"] = json!(note.mode.as_str());
            if let Some(client) = &note.client {
                record["client"] = json!(client);
            }
        }
        if let Some(rule) = &decision.rule {
            let mut rule_record = json!({"permission": rule.permission, "pattern": rule.pattern,
                              "action": rule.action, "origin": rule.origin});
            if let Some(end) = rule.expires_at {
                // A grant with a lifetime: when it ends.
                rule_record["expiresAt"] = json!(end);
            }
            if decision.source != wire::Source::Grant {
                // Where in its file the rule is written.
                rule_record["key"] = json!(format!(
                    "permission.{}.{}",
                    quote(&rule.permission),
                    quote(&rule.pattern)
                ));
            }
            let rule = rule_record;
            if decision.source == wire::Source::Grant {
                record["grant"] = rule;
            } else {
                record["rule"] = rule;
            }
        }
        if let Some(message) = &decision.message {
            record["message"] = json!(message);
        }
        if let Some(by) = context.answered_by {
            record["answeredBy"] = json!(by);
        }
        if let Some(waited) = context.waited_ms {
            record["waitedMs"] = json!(waited);
        }
        self.write(&record)
    }

    /// Record an answer to a question.
    pub(super) fn answer(
        &mut self,
        time: u64,
        response: &wire::PermissionResponse,
        call: Option<(&str, &str)>,
        by: &str,
    ) -> Result<(), String> {
        let mut record = json!({
            "time": time,
            "event": "answer",
            "permissionID": response.permission_id,
            "response": response.response,
            "by": by,
        });
        if let Some((session, call)) = call {
            record["sessionID"] = json!(session);
            record["callID"] = json!(call);
        }
        if let Some(message) = &response.message {
            record["message"] = json!(message);
        }
        if let Some(scope) = &response.scope {
            record["scope"] = json!(scope);
        }
        if let Some(patterns) = &response.patterns {
            record["patterns"] = json!(patterns);
        }
        if let Some(seconds) = response.expires_in {
            record["expiresIn"] = json!(seconds);
        }
        self.write(&record)
    }

    /// Record a token made (`token_created`) or revoked (`token_revoked`,
    /// with whether it `already` was) over a remote admin's connection,
    /// signed `by` it. The token's text is never in the record.
    pub(super) fn token(
        &mut self,
        time: u64,
        event: &str,
        info: &wire::TokenInfo,
        already: Option<bool>,
        by: &str,
    ) -> Result<(), String> {
        let mut record = json!({
            "time": time,
            "event": event,
            "by": by,
            "tokenID": info.id,
            "name": info.name,
            "role": info.role,
            "project": info.project,
            "expiresAt": info.expires_at,
        });
        if let Some(already) = already {
            record["already"] = json!(already);
        }
        self.write(&record)
    }

    fn write(&mut self, record: &Value) -> Result<(), String> {
        let line = serde_json::to_vec(record).map_err(|err| err.to_string())?;
        self.log.append(&line).map_err(|err| err.to_string())
    }
}
