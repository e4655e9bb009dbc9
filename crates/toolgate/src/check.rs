//! `toolgate check`: one call decided as `serve` decides it in a fresh
//! session, shown with the whole way to the answer.
//!
//! The answer and every step come from one [`Policy::evaluate`] with
//! [`Context::explain`] set: the evaluation records what it judged as it
//! judged it, so `check` cannot disagree with `serve` (which runs the same
//! evaluation without the record).

use serde_json::{json, Map, Value};

use crate::display::{shown, shown_list};
use toolgate_policy::{
    Action, CheckTrace, Context, Evaluation, Grants, Mode, Policy, RuleRef, Scope, ScopeRules,
    Source, SubjectField, SubjectOrigin, SubjectRead, ToolSpec,
};

/// One call to check.
pub struct Request<'a> {
    /// The tool as the agent names it.
    pub tool: &'a str,
    /// Its input.
    pub input: &'a Map<String, Value>,
    /// The directory the agent reports for the call.
    pub cwd: Option<&'a str>,
    /// The session's mode.
    pub mode: Mode,
    /// When the mode asked for is below a managed policy's floor: which
    /// mode was asked for, and the managed policy's origin.
    pub floor: Option<(Mode, &'a str)>,
}

/// The input a tool gets for `subject`: in the field the registry reads the
/// tool's subject from (`command`, `filePath`, `url`, `pattern`, the first
/// field of a `subject` declaration, `name` for an MCP tool, ...).
/// `None` when the tool takes no subject.
pub fn input_for(spec: &ToolSpec, subject: &str) -> Option<Map<String, Value>> {
    let field = match spec.subject {
        SubjectField::Shell => "command",
        SubjectField::Path | SubjectField::OptionalPath | SubjectField::Paths => "filePath",
        SubjectField::Patch => "patchText",
        SubjectField::Url => "url",
        SubjectField::Search => "pattern",
        SubjectField::Agent => "subagent_type",
        SubjectField::Plan => "plan",
        SubjectField::Declared | SubjectField::McpDefault => spec.subject_fields().first()?,
        SubjectField::None => return None,
    };
    // A nested field (`args.name`): the objects on the way to it.
    let mut value = json!(subject);
    let mut parts: Vec<&str> = field.split('.').collect();
    let first = parts.remove(0);
    for part in parts.iter().rev() {
        let mut object = Map::new();
        object.insert((*part).to_string(), value);
        value = Value::Object(object);
    }
    let mut input = Map::new();
    input.insert(first.to_string(), value);
    Some(input)
}

/// Decide `request` under `policy` in a session narrowed by `scope`,
/// recording the way. `Err` names a scope the policy cannot compile.
pub fn evaluate(
    policy: &Policy,
    request: &Request<'_>,
    scope: Option<ScopeRules>,
) -> Result<Evaluation, String> {
    let scope = match scope {
        None => Scope::default(),
        Some(rules) => Scope::from_layers([policy
            .scope_layer("check", rules)
            .map_err(|err| format!("--session-scope: {err}"))?]),
    };
    let grants = Grants::default();
    let context = Context {
        scope: &scope,
        explain: true,
        ..Context::new(request.mode, &grants)
    };
    Ok(policy.evaluate(
        &toolgate_policy::Call {
            tool: request.tool,
            input: request.input,
            cwd: request.cwd,
        },
        &context,
    ))
}

fn action(action: Action) -> &'static str {
    match action {
        Action::Allow => "allow",
        Action::Ask => "ask",
        Action::Deny => "deny",
    }
}

fn source(source: Source) -> &'static str {
    match source {
        Source::Mode => "mode",
        Source::Rule => "rule",
        Source::Grant => "grant",
        Source::User => "user",
        Source::Scope => "scope",
        Source::Invalid => "invalid",
    }
}

fn rule_json(rule: &RuleRef) -> Value {
    json!({
        "permission": rule.permission,
        "pattern": rule.pattern,
        "action": action(rule.action),
        "origin": rule.origin,
    })
}

fn step_json(step: &CheckTrace) -> Value {
    let mut value = json!({
        "permission": step.permission,
        "subject": step.subject,
        "mode": if step.mode_reason.is_empty() {
            Value::Null
        } else {
            json!({"decision": action(step.mode_action), "reason": step.mode_reason})
        },
        "matched": step.matched.iter().map(|(rule, text)| {
            let mut value = rule_json(rule);
            value["text"] = json!(text);
            value["decides"] = json!(step.rule.as_ref() == Some(rule));
            value
        }).collect::<Vec<_>>(),
        "decision": action(step.action),
        "source": source(step.source),
        "reason": step.reason,
        "rule": step.rule.as_ref().map(rule_json),
        "always": step.always,
    });
    if !step.inner.is_empty() {
        value["inner"] = json!(step.inner);
    }
    if let Some(origin) = &step.origin {
        value["from"] = origin_json(origin);
    }
    if let Some((permission, name)) = &step.via {
        value["via"] = json!({"permission": permission, "name": name});
    }
    if step.command {
        value["readOnly"] = json!(step.not_read_only.is_none());
        if let Some(why) = &step.not_read_only {
            value["notReadOnly"] = json!(why);
        }
    }
    value
}

/// Where a step's subject came from: the field and how it was matched.
fn origin_json(origin: &SubjectOrigin) -> Value {
    let (read, why) = match &origin.read {
        SubjectRead::Text => ("text", None),
        SubjectRead::Path => ("path", None),
        SubjectRead::Command => ("command", None),
        SubjectRead::Unknown(why) => ("unknown", Some(why)),
    };
    let mut value = json!({"field": origin.field, "as": read});
    if let Some(why) = why {
        value["why"] = json!(why);
    }
    value
}

/// The machine form (`--json`): one object. `modeFloor` (the mode asked
/// for and the managed policy holding it up) and a question's `managed`
/// (the managed rule that asks it every time) only when they apply.
pub fn to_json(request: &Request<'_>, spec: &ToolSpec, evaluation: &Evaluation) -> Value {
    let mut value = json!({
        "tool": request.tool,
        "input": request.input,
        "known": spec.known,
        "subjectFields": subject_fields_json(spec),
        "permission": evaluation.permission,
        "kind": evaluation.kind.as_str(),
        "mode": request.mode.as_str(),
        "decision": action(evaluation.action),
        "source": source(evaluation.source),
        "reason": evaluation.reason,
        "rule": evaluation.rule.as_ref().map(rule_json),
        "steps": evaluation.trace.iter().map(step_json).collect::<Vec<_>>(),
        "question": evaluation.question.as_ref().map(|question| json!({
            "permission": question.permission,
            "patterns": question.patterns,
            "always": question.always,
            "alwaysOptions": question.options().iter().map(|option| option.patterns.clone()).collect::<Vec<_>>(),
            "reason": question.reason,
        })),
    });
    if let Some(mcp) = mcp_call(request) {
        value["calls"] = json!({
            "tool": mcp.name,
            "serverName": mcp.server,
            "toolName": mcp.tool,
            "arguments": mcp.arguments,
        });
    }
    if let Some((asked, origin)) = request.floor {
        value["modeFloor"] = json!({"asked": asked.as_str(), "origin": origin});
    }
    if let Some(managed) = evaluation
        .question
        .as_ref()
        .and_then(|q| q.managed.as_ref())
    {
        value["question"]["managed"] = json!(managed);
    }
    value
}

/// The MCP call a tool that calls one by name (`use_mcp_tool`) makes, when
/// its input can be read (see [`toolgate_policy::mcp_caller`]).
pub fn mcp_call(request: &Request<'_>) -> Option<toolgate_policy::McpCall> {
    if !toolgate_policy::is_mcp_caller(request.tool) {
        return None;
    }
    toolgate_policy::mcp_call(request.input).ok()
}

/// The fields a tool's subject is read from, when it is read from named
/// fields: `{"fields": [...], "declared": bool}`, else `null`.
fn subject_fields_json(spec: &ToolSpec) -> Value {
    let fields = spec.subject_fields();
    if fields.is_empty() {
        return Value::Null;
    }
    json!({"fields": fields, "declared": spec.subject == SubjectField::Declared})
}

fn rule_text(rule: &RuleRef) -> String {
    format!(
        "`{}: {}` {} ({})",
        shown(&rule.permission),
        shown(&rule.pattern),
        action(rule.action),
        shown(&rule.origin)
    )
}

/// Where a step's subject came from, in words.
fn origin_text(origin: &SubjectOrigin) -> String {
    let field = origin.field.as_deref().unwrap_or_default();
    match &origin.read {
        SubjectRead::Text => format!("from the input's `{field}`, matched as text"),
        SubjectRead::Path => format!(
            "from the input's `{field}`, matched as a path relative to the project root"
        ),
        SubjectRead::Command => {
            format!("from the input's `{field}`, a command: each simple command is a step")
        }
        SubjectRead::Unknown(why) => format!(
            "unknown: {why}; matched as `*`, and every deny or ask rule of the permission may match it"
        ),
    }
}

/// The form for a person. Every text from the call (the tool, its input,
/// the subjects and reasons built from them) and from the policy is shown as
/// [`crate::display::shown`] escapes it: nothing in it acts on the terminal.
pub fn to_text(request: &Request<'_>, spec: &ToolSpec, evaluation: &Evaluation) -> String {
    let mut out = String::new();
    let known = if spec.known {
        "a tool toolgate knows"
    } else {
        "a tool toolgate does not know: judged as other tools"
    };
    out.push_str(&format!(
        "tool       {} → permission `{}`, kind {} ({known})\n",
        shown(request.tool),
        shown(&evaluation.permission),
        evaluation.kind.as_str()
    ));
    if let Some(mcp) = mcp_call(request) {
        out.push_str(&format!(
            "calls      `{}` (server `{}`, tool `{}`) with `arguments` as its input: judged as that call; the rules of `{}` are matched against `{}` and can only tighten\n",
            shown(&mcp.name),
            shown(&mcp.server),
            shown(&mcp.tool),
            shown(request.tool),
            shown(&mcp.name)
        ));
    }
    let fields = spec.subject_fields();
    if !fields.is_empty() {
        let names: Vec<String> = fields.iter().map(|field| format!("`{field}`")).collect();
        let whose = if spec.subject == SubjectField::Declared {
            "declared in the policy's `tools`"
        } else {
            "the default for MCP tools"
        };
        out.push_str(&format!(
            "subject    read from {} ({whose}): each one given is judged\n",
            shown(&names.join(", "))
        ));
    }
    out.push_str(&format!(
        "input      {}\n",
        shown(&Value::Object(request.input.clone()).to_string())
    ));
    match request.floor {
        Some((asked, origin)) => out.push_str(&format!(
            "mode       {} ({asked} asked for, held to the floor of the managed policy {})\n",
            request.mode,
            shown(origin)
        )),
        None => out.push_str(&format!("mode       {}\n", request.mode)),
    }
    out.push_str(&format!(
        "decision   {} (source {}): {}\n",
        action(evaluation.action),
        source(evaluation.source),
        shown(&evaluation.reason)
    ));
    if let Some(rule) = &evaluation.rule {
        out.push_str(&format!("decided by {}\n", rule_text(rule)));
    }
    if evaluation.trace.is_empty() {
        out.push_str("steps      none: the call was refused before anything in it was judged\n");
    }
    for (n, step) in evaluation.trace.iter().enumerate() {
        out.push_str(&format!(
            "\nstep {}     {} `{}`\n",
            n + 1,
            shown(&step.permission),
            shown(&step.subject)
        ));
        if step.command {
            match &step.not_read_only {
                None => out.push_str("  command  only reads\n"),
                Some(why) => out.push_str(&format!("  command  not read-only: {}\n", shown(why))),
            }
        }
        if let Some(origin) = &step.origin {
            out.push_str(&format!("  subject  {}\n", shown(&origin_text(origin))));
        }
        for inner in &step.inner {
            out.push_str(&format!("  also     rules match `{}` too\n", shown(inner)));
        }
        if let Some((permission, name)) = &step.via {
            out.push_str(&format!(
                "  via      `{}` rules match `{}` too (a deny or ask among them tightens)\n",
                shown(permission),
                shown(name)
            ));
        }
        if step.mode_reason.is_empty() {
            out.push_str("  mode     has no say here: the rules decide\n");
        } else {
            out.push_str(&format!(
                "  mode     {}: {}\n",
                action(step.mode_action),
                shown(&step.mode_reason)
            ));
        }
        if step.matched.is_empty() {
            out.push_str("  rules    none match\n");
        }
        for (rule, text) in &step.matched {
            let mark = if step.rule.as_ref() == Some(rule) {
                "decides"
            } else {
                "matches"
            };
            out.push_str(&format!(
                "  rule     {} {mark} `{}`\n",
                rule_text(rule),
                shown(text)
            ));
        }
        out.push_str(&format!(
            "  answer   {} (source {}): {}\n",
            action(step.action),
            source(step.source),
            shown(&step.reason)
        ));
        match &step.rule {
            _ if step.action != Action::Ask => {}
            Some(rule) if rule.managed => {
                out.push_str("  always   grants nothing: a managed rule asks every time\n")
            }
            _ => out.push_str(&format!(
                "  always   would grant `{}`\n",
                shown(&step.always)
            )),
        }
    }
    match &evaluation.question {
        Some(question) => {
            out.push_str(&format!(
                "\nasks       about {} {}\n",
                shown(&question.permission),
                shown_list(&question.patterns)
            ));
            for option in question.options() {
                out.push_str(&format!(
                    "always     would grant {}\n",
                    shown_list(&option.patterns)
                ));
            }
            match &question.managed {
                Some(managed) => out.push_str(&format!(
                    "always     grants nothing: {} asks every time\n",
                    shown(managed)
                )),
                None if question.options().is_empty() => {
                    out.push_str("always     grants nothing here\n")
                }
                None => {}
            }
        }
        None => out.push_str("\nasks       nothing\n"),
    }
    out
}
