//! Tools that call tools: OpenCode's `batch`, Codex's `multi_tool_use.parallel`,
//! Claude Code's former `BatchTool` and Zed's `batch-tool` run a list of other
//! tool calls. A batch is judged by its calls: each one as if it were sent
//! alone (modes, rules, scopes, grants, approvals, the doom loop), and the batch
//! gets the strictest answer (deny over ask over allow). The calls that ask are
//! asked about in one question: its patterns, `always` and grants are the union
//! of theirs, and `once` approves what each of them asked about. So a tool that
//! is denied alone is denied inside a batch, and a batch of reads passes
//! wherever the reads pass alone.
//!
//! The recognised shapes (one list field, each entry naming a tool and giving
//! its input):
//!
//! | tool | agent | list | name | input |
//! |---|---|---|---|---|
//! | `batch` | OpenCode, link-assistant/agent, Kilo Code | `tool_calls` | `tool` | `parameters` |
//! | `multi_tool_use.parallel` | Codex (OpenAI models) | `tool_uses` | `recipient_name` (`functions.NAME`) | `parameters` |
//! | `BatchTool` | Claude Code (early versions) | `invocations` | `tool_name` | `input` |
//! | `batch-tool` | Zed | `invocations` | `name` | `input` |
//!
//! Fail closed: every list field any of these reads (`tool_calls`, `tool_uses`,
//! `invocations`, `calls`, `toolCalls`) is judged whichever the tool is, an
//! entry's name may be given by any name field (two different names make the
//! batch unusable), and its input by any input field (two different inputs
//! make it unusable; an input given as a JSON string is decoded). A missing
//! input is an empty one. A `functions.` prefix on a name is dropped.
//!
//! Decided here:
//! - a batch with no calls, or an entry that is not an object, names no tool or
//!   gives an input that is not an object: the whole batch is denied (source
//!   `invalid`), naming the entry (`tool_calls[2]`);
//! - an unknown tool inside is judged as if sent alone (an "other" tool);
//! - a batch inside a batch is judged the same way, to [`MAX_DEPTH`] levels;
//!   deeper ones deny the batch (`invalid`). OpenCode refuses a batch inside a
//!   batch when it runs it, Zed allows them; no agent needs more than a few;
//! - at most [`MAX_CALLS`] calls in all (nested ones included), more deny the
//!   batch (`invalid`). OpenCode runs the first 25 (link-assistant/agent 10)
//!   and fails the rest, Zed allows 32: every call an agent would run is
//!   judged, and a frame cannot make the broker judge thousands;
//! - the names above are batches whatever the policy's `tools` declares for
//!   them: a declaration cannot turn a batch back into one opaque tool;
//! - a plan approval (`exit_plan_mode`) inside a batch denies it (`invalid`):
//!   approving a plan switches the session's mode and is asked on its own;
//! - the batch tool itself passes the session's scope like any tool (a scope
//!   with `allowedTools` must name it), and a `deny` rule for its own
//!   permission (`batch: deny`) denies every batch; its `allow` and `ask` rules
//!   change nothing, the calls inside decide;
//! - the batch's `reason` names the entry that decided, by its place in the
//!   input and its tool (`` batch call `tool_calls[1]` (`bash`): `` and that
//!   call's own reason); when several ask, each asking call's phrase, joined
//!   by `; `. Its `source` and `rule` are that call's own, as it would get them
//!   alone (for a batch denied by its own rule or the scope, those);
//! - the question's `permission` is the batch tool's permission (`batch`), its
//!   `patterns`, `always` and grants the union of the asking calls', its
//!   `title` their titles joined by `; `, and [`Question::calls`] lists each
//!   asking call. A call that asks about a second permission after the first
//!   is approved (a shell command leaving the project, then the command) asks
//!   again, as it would alone;
//! - the doom loop: the same batch a third time in a row counts as a third
//!   time for each of its calls (the broker counts repeats of the batch as a
//!   whole; identical calls inside one batch are not counted).

use serde_json::{Map, Value};

use crate::mode::{Action, Kind};
use crate::{Call, Context, Evaluation, Policy, Question, RuleRef, Source};

/// How many batches may enclose a call: a batch in a batch in a batch.
pub const MAX_DEPTH: usize = 3;

/// How many calls a batch may hold, nested ones included.
pub const MAX_CALLS: usize = 64;

/// The fields that hold a batch's list of calls.
const LIST_FIELDS: &[&str] = &[
    "tool_calls",
    "tool_uses",
    "invocations",
    "calls",
    "toolCalls",
];
/// The fields that name an entry's tool.
const NAME_FIELDS: &[&str] = &["tool", "recipient_name", "tool_name", "name", "toolName"];
/// The fields that hold an entry's input.
const INPUT_FIELDS: &[&str] = &["parameters", "input", "args", "arguments"];

/// True when `tool` runs other tool calls (see the module documentation).
pub fn is_batch(tool: &str) -> bool {
    matches!(
        tool,
        "batch" | "multi_tool_use.parallel" | "BatchTool" | "batch-tool"
    )
}

/// One call inside a batch that asks, as the question lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskedCall {
    /// Where it is in the batch's input: `tool_calls[1]`, `tool_calls[0].tool_calls[2]`.
    pub call: String,
    /// The tool it names.
    pub tool: String,
    /// The permission asked about.
    pub permission: String,
    /// The concrete things asked about.
    pub patterns: Vec<String>,
    /// What an `always` answer grants for it.
    pub always: Vec<String>,
    /// Why it asks.
    pub reason: String,
}

/// One entry of a batch.
struct Entry {
    label: String,
    tool: String,
    input: Map<String, Value>,
}

impl Policy {
    /// Decide a batch: see the module documentation.
    pub(crate) fn evaluate_batch(&self, call: &Call<'_>, context: &Context<'_>) -> Evaluation {
        let mut budget = MAX_CALLS;
        self.batch_at(call, context, 1, "", &mut budget)
    }

    fn batch_at(
        &self,
        call: &Call<'_>,
        context: &Context<'_>,
        depth: usize,
        prefix: &str,
        budget: &mut usize,
    ) -> Evaluation {
        let permission = self.registry.lookup(call.tool).permission.clone();
        let answer =
            |action: Action, source: Source, reason: String, rule: Option<RuleRef>| Evaluation {
                action,
                source,
                reason,
                rule,
                question: None,
                permission: permission.clone(),
                kind: Kind::Other,
                trace: Vec::new(),
            };
        let invalid = |reason: String| {
            answer(
                Action::Deny,
                Source::Invalid,
                format!("the `{}` call is unusable: {reason}", call.tool),
                None,
            )
        };
        if let Some(refusal) =
            context
                .scope
                .tool_refusal(call.tool, &permission, &self.always_available)
        {
            return answer(Action::Deny, Source::Scope, refusal.reason, None);
        }
        if let Some(rule) = self.deny_rule(&permission) {
            let reason = format!(
                "the {} rule `{}: {}` denies every `{}` call",
                origin_label(&rule.origin),
                rule.permission,
                rule.pattern,
                call.tool
            );
            return answer(Action::Deny, Source::Rule, reason, Some(rule));
        }
        // What an unusable batch is called: the outer one is "it".
        let what = match prefix.strip_suffix('.') {
            Some(label) => format!("`{label}` (`{}`)", call.tool),
            None => "it".to_string(),
        };
        let entries = match entries(call.input, prefix) {
            Ok(entries) => entries,
            Err(reason) => return invalid(reason),
        };
        if entries.len() > *budget {
            return invalid(format!(
                "the batch holds more than {MAX_CALLS} calls (nested batches included)"
            ));
        }
        *budget -= entries.len();

        let mut judged: Vec<(Entry, Evaluation)> = Vec::with_capacity(entries.len());
        for entry in entries {
            let inner = Call {
                tool: &entry.tool,
                input: &entry.input,
                cwd: call.cwd,
            };
            let evaluation = if is_batch(&entry.tool) {
                if depth >= MAX_DEPTH {
                    return invalid(format!(
                        "`{}` is a `{}` nested more than {MAX_DEPTH} batches deep",
                        entry.label, entry.tool
                    ));
                }
                let nested = format!("{}.", entry.label);
                let evaluation = self.batch_at(&inner, context, depth + 1, &nested, budget);
                if evaluation.source == Source::Invalid {
                    return Evaluation {
                        permission: permission.clone(),
                        ..evaluation
                    };
                }
                evaluation
            } else {
                let evaluation = self.evaluate(&inner, context);
                if evaluation
                    .question
                    .as_ref()
                    .is_some_and(|question| question.plan.is_some())
                {
                    return invalid(format!(
                        "`{}` (`{}`) asks to approve a plan, which is asked alone, not in a batch",
                        entry.label, entry.tool
                    ));
                }
                evaluation
            };
            judged.push((entry, evaluation));
        }
        if judged.is_empty() {
            return invalid(format!("{what} has no calls"));
        }
        let trace: Vec<crate::CheckTrace> = judged
            .iter_mut()
            .flat_map(|(_, evaluation)| std::mem::take(&mut evaluation.trace))
            .collect();

        let strictest = judged
            .iter()
            .map(|(_, evaluation)| evaluation.action)
            .max()
            .unwrap_or(Action::Deny);
        let mut result = match strictest {
            Action::Deny => {
                // A scope denial first: no answer could lift it.
                let index = judged
                    .iter()
                    .position(|(_, e)| e.action == Action::Deny && e.source == Source::Scope)
                    .or_else(|| judged.iter().position(|(_, e)| e.action == Action::Deny))
                    .unwrap_or(0);
                let (entry, evaluation) = judged.swap_remove(index);
                let reason = phrase(&entry, &evaluation.reason);
                answer(Action::Deny, evaluation.source, reason, evaluation.rule)
            }
            Action::Allow => {
                // The most specific reason: the user's, a grant's, a rule's, the mode's.
                let rank = |source: Source| match source {
                    Source::User => 0,
                    Source::Grant => 1,
                    Source::Rule => 2,
                    _ => 3,
                };
                let count = judged.len();
                let index = (0..count)
                    .min_by_key(|&i| rank(judged[i].1.source))
                    .unwrap_or(0);
                let (entry, evaluation) = judged.swap_remove(index);
                let reason = match count {
                    1 => phrase(&entry, &evaluation.reason),
                    _ => format!(
                        "all {count} calls of the batch are allowed; {}",
                        phrase(&entry, &evaluation.reason)
                    ),
                };
                answer(Action::Allow, evaluation.source, reason, evaluation.rule)
            }
            Action::Ask => {
                let mut question = Question {
                    permission: permission.clone(),
                    ..Question::default()
                };
                let mut titles: Vec<String> = Vec::new();
                let mut reasons: Vec<String> = Vec::new();
                let mut decided: Option<(Source, Option<RuleRef>)> = None;
                for (entry, evaluation) in judged {
                    let Some(asked) = evaluation.question else {
                        continue;
                    };
                    if evaluation.action != Action::Ask {
                        continue;
                    }
                    if decided.is_none() {
                        decided = Some((evaluation.source, evaluation.rule));
                    }
                    for pattern in &asked.patterns {
                        push_unique(&mut question.patterns, pattern);
                    }
                    for always in &asked.always {
                        push_unique(&mut question.always, always);
                    }
                    for grant in asked.grants {
                        if !question.grants.contains(&grant) {
                            question.grants.push(grant);
                        }
                    }
                    for approval in asked.approve {
                        if !question.approve.contains(&approval) {
                            question.approve.push(approval);
                        }
                    }
                    if question.managed.is_none() {
                        question.managed = asked.managed.clone();
                    }
                    push_unique(&mut titles, &asked.title);
                    if is_batch(&entry.tool) {
                        // A nested batch lists its own calls, already labelled.
                        reasons.push(evaluation.reason);
                        question.calls.extend(asked.calls);
                    } else {
                        reasons.push(phrase(&entry, &evaluation.reason));
                        question.calls.push(AskedCall {
                            call: entry.label,
                            tool: entry.tool,
                            permission: asked.permission,
                            patterns: asked.patterns,
                            always: asked.always,
                            reason: asked.reason,
                        });
                    }
                }
                let (source, rule) = decided.unwrap_or((Source::Mode, None));
                let reason = reasons.join("; ");
                question.title = titles.join("; ");
                question.reason = reason.clone();
                Evaluation {
                    question: Some(Box::new(question)),
                    ..answer(Action::Ask, source, reason, rule)
                }
            }
        };
        result.trace = trace;
        result
    }

    /// The deciding rule for the batch tool's own permission (subject `*`),
    /// when it denies.
    fn deny_rule(&self, permission: &str) -> Option<RuleRef> {
        self.rules
            .last_match(permission, "*")
            .filter(|rule| rule.action == Action::Deny)
            .map(|rule| RuleRef {
                permission: rule.permission.as_str().to_string(),
                pattern: rule.pattern.as_str().to_string(),
                action: rule.action,
                origin: rule.origin.to_string(),
                managed: rule.managed,
                expires_at: None,
            })
    }
}

/// ``batch call `tool_calls[1]` (`bash`): REASON``; a nested batch's reason
/// already names its entry.
fn phrase(entry: &Entry, reason: &str) -> String {
    if is_batch(&entry.tool) && reason.starts_with("batch call ") {
        reason.to_string()
    } else {
        format!("batch call `{}` (`{}`): {reason}", entry.label, entry.tool)
    }
}

fn origin_label(origin: &str) -> String {
    if origin == "built-in" {
        "built-in".to_string()
    } else {
        format!("`{origin}`")
    }
}

fn push_unique(list: &mut Vec<String>, item: &str) {
    if !list.iter().any(|existing| existing == item) {
        list.push(item.to_string());
    }
}

/// The calls of a batch, in order, labelled by where they are in the input.
fn entries(input: &Map<String, Value>, prefix: &str) -> Result<Vec<Entry>, String> {
    let mut lists = LIST_FIELDS
        .iter()
        .filter_map(|field| input.get(*field).map(|value| (*field, value)))
        .peekable();
    if lists.peek().is_none() {
        return Err(format!(
            "the input has no list of calls ({})",
            quoted(LIST_FIELDS)
        ));
    }
    let mut entries = Vec::new();
    for (field, value) in lists {
        let Value::Array(items) = value else {
            return Err(format!("`{prefix}{field}` is not a list"));
        };
        for (index, item) in items.iter().enumerate() {
            let label = format!("{prefix}{field}[{index}]");
            let Value::Object(item) = item else {
                return Err(format!("`{label}` is not an object"));
            };
            let tool = entry_tool(item, &label)?;
            let input = entry_input(item, &label)?;
            entries.push(Entry { label, tool, input });
        }
    }
    Ok(entries)
}

/// The tool an entry names: every name field given must agree.
fn entry_tool(item: &Map<String, Value>, label: &str) -> Result<String, String> {
    let mut tool: Option<&str> = None;
    for field in NAME_FIELDS {
        match item.get(*field) {
            None => {}
            Some(Value::String(name)) => {
                let name = name.strip_prefix("functions.").unwrap_or(name);
                match tool {
                    Some(seen) if seen != name => {
                        return Err(format!("`{label}` names two tools, `{seen}` and `{name}`"))
                    }
                    _ => tool = Some(name),
                }
            }
            Some(_) => return Err(format!("`{label}.{field}` is not a string")),
        }
    }
    match tool {
        Some(name) if !name.is_empty() => Ok(name.to_string()),
        _ => Err(format!("`{label}` names no tool ({})", quoted(NAME_FIELDS))),
    }
}

/// The input an entry gives: every input field given must agree; a JSON
/// string is decoded; none is an empty input.
fn entry_input(item: &Map<String, Value>, label: &str) -> Result<Map<String, Value>, String> {
    let mut input: Option<Map<String, Value>> = None;
    for field in INPUT_FIELDS {
        let value = match item.get(*field) {
            None | Some(Value::Null) => continue,
            Some(Value::Object(map)) => map.clone(),
            Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(map)) => map,
                _ => return Err(format!("`{label}.{field}` is not a JSON object")),
            },
            Some(_) => return Err(format!("`{label}.{field}` is not an object")),
        };
        match &input {
            Some(seen) if *seen != value => {
                return Err(format!("`{label}` gives two different inputs"))
            }
            _ => input = Some(value),
        }
    }
    Ok(input.unwrap_or_default())
}

fn quoted(fields: &[&str]) -> String {
    fields
        .iter()
        .map(|field| format!("`{field}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
