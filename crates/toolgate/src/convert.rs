//! The one place where policy types become wire frames.

use serde_json::{Map, Value};
use toolgate_policy::{Action, Kind, Question, Registry, RuleRef, ShellInput, Source, Subject};
use toolgate_protocol as wire;

/// The wire name of a policy source.
pub fn source(source: Source) -> wire::Source {
    match source {
        Source::Mode => wire::Source::Mode,
        Source::Rule => wire::Source::Rule,
        Source::Grant => wire::Source::Grant,
        Source::User => wire::Source::User,
        Source::Scope => wire::Source::Scope,
        Source::Invalid => wire::Source::Invalid,
    }
}

/// A rule as the decision frame shows it.
pub fn rule(rule: RuleRef) -> wire::RuleRef {
    wire::RuleRef {
        permission: rule.permission,
        pattern: rule.pattern,
        action: rule.action.as_str().to_string(),
        origin: rule.origin,
        expires_at: rule.expires_at,
    }
}

/// A `decision`. `Ask` never reaches here; it is treated as `deny`.
#[allow(clippy::too_many_arguments)] // a frame has this many fields
pub fn decision(
    session_id: String,
    call_id: String,
    action: Action,
    from: Source,
    reason: String,
    decided_by: Option<RuleRef>,
    message: Option<String>,
    reminder: Option<String>,
) -> wire::Decision {
    wire::Decision {
        session_id,
        call_id,
        decision: match action {
            Action::Allow => wire::Verdict::Allow,
            Action::Ask | Action::Deny => wire::Verdict::Deny,
        },
        source: source(from),
        reason,
        rule: decided_by.map(rule),
        message,
        reminder,
        child_session_id: None,
    }
}

/// A `permission_request` frame for a question about one call.
#[allow(clippy::too_many_arguments)] // a frame has this many fields
pub fn request(
    permission_id: &str,
    timestamp: u64,
    session_id: &str,
    call_id: &str,
    tool_name: &str,
    input: &Map<String, Value>,
    cwd: Option<&str>,
    question: &Question,
) -> wire::PermissionRequest {
    let mut metadata = Map::new();
    metadata.insert("input".to_string(), Value::Object(input.clone()));
    metadata.insert("reason".to_string(), Value::String(question.reason.clone()));
    if let Some(cwd) = cwd {
        metadata.insert("cwd".to_string(), Value::String(cwd.to_string()));
    }
    if let Some(plan) = &question.plan {
        metadata.insert("plan".to_string(), Value::String(plan.clone()));
    }
    if !question.calls.is_empty() {
        // A batch: each call inside it that asks.
        let calls = question.calls.iter().map(|asked| {
            let strings = |list: &[String]| list.iter().cloned().map(Value::String).collect();
            let mut call = Map::new();
            call.insert("call".to_string(), Value::String(asked.call.clone()));
            call.insert("tool".to_string(), Value::String(asked.tool.clone()));
            call.insert(
                "permission".to_string(),
                Value::String(asked.permission.clone()),
            );
            call.insert(
                "patterns".to_string(),
                Value::Array(strings(&asked.patterns)),
            );
            call.insert("always".to_string(), Value::Array(strings(&asked.always)));
            call.insert("reason".to_string(), Value::String(asked.reason.clone()));
            Value::Object(call)
        });
        metadata.insert("calls".to_string(), Value::Array(calls.collect()));
    }
    wire::PermissionRequest {
        timestamp,
        session_id: session_id.to_string(),
        parent_id: None,
        permission_id: permission_id.to_string(),
        call_id: call_id.to_string(),
        tool: question.permission.clone(),
        permission: question.permission.clone(),
        tool_name: tool_name.to_string(),
        pattern: question.always.clone(),
        patterns: question.patterns.clone(),
        always: question.always.clone(),
        always_options: question
            .options()
            .into_iter()
            .map(|option| option.patterns)
            .collect(),
        title: question.title.clone(),
        kind: question.plan.as_ref().map(|_| "plan".to_string()),
        metadata,
    }
}

/// The `metadata` fields link-assistant/agent's clients read, added beside
/// toolgate's own (`input`, `reason`, ...), never in their place:
///
/// - a shell call (any question about it: `bash`, `external_directory`,
///   `read`, `doom_loop`): `command`, the command the policy judged, as the
///   agent sent it (a string as is; an argv array joined with spaces, each
///   word quoted as a POSIX shell would need; a script run by another
///   program, Codex's `shell`, as that program's command line; a command
///   given twice, `command` and `cmd`, both, one per line), and `patterns`,
///   what an `always` answer grants (the request's `pattern`, as
///   link-assistant sets it);
/// - an `edit` question about one file: `filePath`, that file as in
///   `patterns`;
/// - a `webfetch` question about one URL: `url`.
///
/// A batch's question and a plan approval get none of them.
pub fn link_assistant_metadata(
    request: &mut wire::PermissionRequest,
    registry: &Registry,
    tool: &str,
    input: &Map<String, Value>,
    question: &Question,
) {
    if !question.calls.is_empty() || question.plan.is_some() {
        return;
    }
    let spec = registry.lookup(tool);
    let metadata = &mut request.metadata;
    if spec.kind == Kind::Shell {
        let inputs = match toolgate_policy::variants(&spec, input) {
            Ok(Some(inputs)) => inputs,
            Ok(None) => vec![input.clone()],
            Err(_) => Vec::new(),
        };
        let mut commands: Vec<String> = Vec::new();
        for input in &inputs {
            let text = match toolgate_policy::extract(&spec, input) {
                Ok(Subject::Shell(ShellInput::Text(text))) => text,
                Ok(Subject::Shell(ShellInput::Argv(argv))) => argv
                    .iter()
                    .map(|word| shell_quote(word))
                    .collect::<Vec<_>>()
                    .join(" "),
                _ => continue,
            };
            if !commands.contains(&text) {
                commands.push(text);
            }
        }
        if !commands.is_empty() {
            metadata.insert("command".to_string(), Value::String(commands.join("\n")));
        }
        let patterns = question.always.iter().cloned().map(Value::String);
        metadata.insert("patterns".to_string(), Value::Array(patterns.collect()));
        return;
    }
    match (question.permission.as_str(), question.patterns.as_slice()) {
        ("edit", [path]) => {
            metadata.insert("filePath".to_string(), Value::String(path.clone()));
        }
        ("webfetch", [url]) => {
            metadata.insert("url".to_string(), Value::String(url.clone()));
        }
        _ => {}
    }
}

/// A word as a POSIX shell reads it back: as is when it holds only
/// characters no shell treats specially, else in single quotes.
fn shell_quote(word: &str) -> String {
    let plain = |ch: char| ch.is_ascii_alphanumeric() || "_@%+=:,./-".contains(ch);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// A `session_start`'s `permissions` as the policy reads them.
pub fn scope_rules(spec: wire::ScopeSpec) -> toolgate_policy::ScopeRules {
    toolgate_policy::ScopeRules {
        allowed_tools: spec.allowed_tools,
        denied_tools: spec.denied_tools,
        file_patterns: spec.file_patterns,
        command_patterns: spec.command_patterns,
        pattern_syntax: spec.pattern_syntax,
    }
}

/// The narrowing a session asked for, as stored and sent.
pub fn scope_spec(rules: &toolgate_policy::ScopeRules) -> wire::ScopeSpec {
    wire::ScopeSpec {
        allowed_tools: rules.allowed_tools.clone(),
        denied_tools: rules.denied_tools.clone(),
        file_patterns: rules.file_patterns.clone(),
        command_patterns: rules.command_patterns.clone(),
        pattern_syntax: rules.pattern_syntax.clone(),
    }
}

/// A session's effective scope for `session_started`.
pub fn effective_scope(
    scope: toolgate_policy::EffectiveScope,
    always_available: &[String],
) -> wire::EffectiveScope {
    wire::EffectiveScope {
        allowed_tools: scope.allowed_tools,
        denied_tools: scope.denied_tools,
        file_patterns: scope.file_patterns,
        command_patterns: scope.command_patterns,
        always_available_tools: always_available.to_vec(),
    }
}
