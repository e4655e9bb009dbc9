//! The second half of a judgement, what the session decides: a prepared
//! call meets the session's scope (the tool, an unknown tool's fields, the
//! directory searched), its mode (each check's mode answer), its repeats
//! (the doom-loop check), and then each check is judged with the session's
//! approvals and grants. A call split into variants is finished input by
//! input and gets the strictest answer.

use std::borrow::Cow;
use std::path::Path;

use super::answer::{combine, merge_options, push_unique};
use super::judge::{kind_reason, shell_reason};
use super::{fixed_check, Basis, Body, Calls, Outcome, Prepared, Ready};
use crate::grants::GrantPattern;
use crate::mode::{mode_answer, Action, Kind};
use crate::paths::{normalize, RootedPath};
use crate::scope::{ScopeRefusal, ScopeTarget};
use crate::tools::{unknown_fields, ShellInput};
use crate::{Call, CheckTrace, Context, Evaluation, Policy, Source};

impl Policy {
    /// The rest of a judgement, in the session's state: its scope, mode,
    /// repeats, approvals and grants.
    pub(super) fn finish(
        &self,
        call: &Call<'_>,
        prepared: Prepared,
        context: &Context<'_>,
    ) -> Evaluation {
        let (permission, kind) = match &prepared.body {
            // The calling tool (`use_mcp_tool`) meets the scope first.
            Body::Calls(calls) => (calls.permission.as_str(), Kind::Other),
            Body::Batch => return self.evaluate_batch(call, context),
            Body::Invalid {
                permission, kind, ..
            }
            | Body::Each {
                permission, kind, ..
            } => (permission.as_str(), *kind),
            Body::Ready(ready) => (ready.permission.as_str(), ready.kind),
        };
        if let Some(refusal) =
            context
                .scope
                .tool_refusal(call.tool, permission, &self.always_available)
        {
            return scope_denial(refusal, permission, kind);
        }
        // A tool whose input toolgate does not know is bound by the scope through
        // every path-like and command-like field it has.
        if matches!(kind, Kind::Other | Kind::Execute) && !context.scope.is_none() {
            if let Some(refusal) = self.unknown_tool_refusal(call, kind, context) {
                return scope_denial(refusal, permission, kind);
            }
        }
        let invalid = |permission: String, kind: Kind, reason: String| Evaluation {
            action: Action::Deny,
            source: Source::Invalid,
            reason,
            rule: None,
            question: None,
            permission,
            kind,
            trace: Vec::new(),
        };
        let ready = match prepared.body {
            Body::Calls(calls) => return self.finish_calls(call, prepared.policy, *calls, context),
            Body::Batch => return self.evaluate_batch(call, context),
            Body::Invalid {
                permission,
                kind,
                reason,
            } => return invalid(permission, kind, reason),
            Body::Each { each, .. } => return self.evaluate_each(call, context, each),
            Body::Ready(ready) => *ready,
        };
        let Ready {
            permission,
            kind,
            plan_allowed,
            empty_plan,
            invalid: unusable,
            searched,
            mut checks,
            title,
            plan,
        } = ready;
        let mode = context.mode;
        if empty_plan && mode_answer(mode, kind, false, plan_allowed) == Action::Ask {
            return invalid(
                permission,
                kind,
                format!(
                    "`{}` was called without a plan, so there is nothing to approve: call it again with the plan text in its `plan` field",
                    call.tool
                ),
            );
        }
        if let Some(reason) = unusable {
            return invalid(permission, kind, reason);
        }
        if let Some(directory) = &searched {
            if let Some(refusal) = context
                .scope
                .target_refusal(ScopeTarget::Directory(directory))
            {
                return scope_denial(refusal, &permission, kind);
            }
        }
        if context.repeats >= 3 {
            checks.insert(
                0,
                fixed_check(
                    "doom_loop",
                    call.tool.to_string(),
                    GrantPattern::exact(call.tool),
                ),
            );
        }
        for check in &mut checks {
            match check.basis {
                Basis::Fixed => {}
                Basis::Tool => {
                    let action = mode_answer(mode, kind, false, plan_allowed);
                    check.mode_action = action;
                    check.mode_reason = kind_reason(mode, kind, action, call.tool, plan_allowed);
                }
                Basis::Shell => {
                    let action = mode_answer(mode, kind, check.read_only, false);
                    check.mode_action = action;
                    if let Some(refusal) = &check.refusal {
                        check.mode_reason = shell_reason(mode, action, refusal).into();
                    }
                }
            }
        }

        let outcomes: Vec<Outcome> = checks
            .iter()
            .map(|check| self.judge(check, context))
            .collect();
        let trace = if context.explain {
            self.trace(&checks, &outcomes)
        } else {
            Vec::new()
        };
        let mut evaluation = combine(checks, outcomes, permission, kind, mode, title, plan);
        evaluation.trace = trace;
        evaluation
    }

    /// The MCP call a `use_mcp_tool` call makes, once the calling tool
    /// passed the session's scope: judged as if sent alone (its checks
    /// carry the calling tool's rules, see [`super::Check::via`]).
    fn finish_calls(
        &self,
        call: &Call<'_>,
        policy: u64,
        calls: Calls,
        context: &Context<'_>,
    ) -> Evaluation {
        let inner = Call {
            tool: &calls.tool,
            input: &calls.input,
            cwd: call.cwd,
        };
        let prepared = Prepared {
            policy,
            body: calls.body,
        };
        self.finish(&inner, prepared, context)
    }

    /// A call whose input was split by [`variants`](crate::tools::variants):
    /// each input is judged as if sent alone, and the call gets the strictest
    /// answer. When that is ask, one question gathers every input that asks
    /// for the same permission.
    fn evaluate_each(
        &self,
        call: &Call<'_>,
        context: &Context<'_>,
        each: Vec<(serde_json::Map<String, serde_json::Value>, Prepared)>,
    ) -> Evaluation {
        let mut results: Vec<Evaluation> = each
            .into_iter()
            .map(|(input, prepared)| {
                self.finish(
                    &Call {
                        input: &input,
                        ..*call
                    },
                    prepared,
                    context,
                )
            })
            .collect();
        let trace: Vec<CheckTrace> = results
            .iter_mut()
            .flat_map(|evaluation| std::mem::take(&mut evaluation.trace))
            .collect();
        let strictest = results
            .iter()
            .map(|evaluation| evaluation.action)
            .max()
            .unwrap_or(Action::Deny);
        // As for checks: a scope denial first, the one no answer could lift.
        let first = results
            .iter()
            .position(|evaluation| {
                evaluation.action == Action::Deny && evaluation.source == Source::Scope
            })
            .or_else(|| {
                results
                    .iter()
                    .position(|evaluation| evaluation.action == strictest)
            })
            .unwrap_or(0);
        let mut chosen = results.remove(first);
        if let Some(question) = chosen.question.as_mut() {
            for other in results.iter().filter(|other| other.action == Action::Ask) {
                let Some(more) = &other.question else {
                    continue;
                };
                if more.permission != question.permission {
                    continue;
                }
                for pattern in &more.patterns {
                    push_unique(&mut question.patterns, pattern);
                }
                for always in &more.always {
                    push_unique(&mut question.always, always);
                }
                for grant in &more.grants {
                    if !question.grants.contains(grant) {
                        question.grants.push(grant.clone());
                    }
                }
                question.always_options =
                    merge_options(&question.always_options, &more.always_options);
                for approval in &more.approve {
                    if !question.approve.contains(approval) {
                        question.approve.push(approval.clone());
                    }
                }
                if question.managed.is_none() {
                    question.managed = more.managed.clone();
                }
                if !question.title.split('\n').any(|line| line == more.title) {
                    question.title = format!("{}\n{}", question.title, more.title);
                }
            }
        }
        chosen.trace = trace;
        chosen
    }

    /// A tool of unknown kind in a scoped session: it must be named in
    /// `allowedTools`, and every path-like field must be inside `filePatterns`,
    /// every simple command of a command-like field inside `commandPatterns`.
    fn unknown_tool_refusal(
        &self,
        call: &Call<'_>,
        kind: Kind,
        context: &Context<'_>,
    ) -> Option<ScopeRefusal> {
        if kind == Kind::Other {
            if let Some(refusal) = context
                .scope
                .unknown_tool_refusal(call.tool, &self.always_available)
            {
                return Some(refusal);
            }
        }
        let fields = unknown_fields(call.input);
        let base: Cow<'_, Path> = match call.cwd {
            Some(cwd) => Cow::Owned(normalize(cwd, &self.project_root, self.home.as_deref())),
            None => Cow::Borrowed(&self.project_root),
        };
        for path in &fields.paths {
            let rooted = RootedPath::resolve(path, &base, &self.project_root, self.home.as_deref());
            // A file, or a directory in scope when the files directly in it are.
            if let Some(refusal) = context
                .scope
                .target_refusal(ScopeTarget::Path(&rooted.subject))
            {
                return Some(refusal);
            }
        }
        for command in &fields.commands {
            let script = match command {
                ShellInput::Text(text) => toolgate_shell::Script::Text(text),
                ShellInput::Argv(argv) => toolgate_shell::Script::Argv(argv),
            };
            let analysis = toolgate_shell::analyze(script, &self.shell);
            for simple in &analysis.commands {
                if let Some(refusal) = context
                    .scope
                    .target_refusal(ScopeTarget::Command(&simple.text))
                {
                    return Some(refusal);
                }
            }
        }
        None
    }
}

fn scope_denial(refusal: ScopeRefusal, permission: &str, kind: Kind) -> Evaluation {
    Evaluation {
        action: Action::Deny,
        source: Source::Scope,
        reason: refusal.reason,
        rule: None,
        question: None,
        permission: permission.to_string(),
        kind,
        trace: Vec::new(),
    }
}
