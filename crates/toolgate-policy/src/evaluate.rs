//! [`Policy::evaluate`]: one call, one answer, with provenance.
//!
//! A call becomes a list of *checks*, one per thing it touches: each simple
//! command of a shell call, each path of an edit, the directory it leaves the
//! project for (`external_directory`), the repetition it makes (`doom_loop`).
//! Each check is judged in this order:
//!
//! 1. the session's scope: outside it, denied;
//! 2. the mode's answer: a mode denial is final;
//! 3. the rules': the last matching rule over every layer in order (built-in
//!    defaults, policy file, `TOOLGATE_PERMISSION`, `--permission`) replaces
//!    the mode's allow or ask;
//! 4. tightening passes, which only ever make the answer stricter: a read rule
//!    a shell word reaches, the command after wrapper removal or inside
//!    `bash -c`, and for a command whose program cannot be known the strictest
//!    deny or ask rule that can still decide for the permission;
//! 5. a deny is final from here on; `readonly` turns an ask into a denial;
//! 6. a `once` for this call, a session grant or a project grant turns an ask
//!    into allow;
//! 7. `auto` allows what would still ask, unless the rule that asks was
//!    written by the user (policy file or override) or is the built-in
//!    doom-loop guard: `auto` lifts its own questions and the other built-in
//!    defaults' (`.env`, `external_directory`), never the user's.
//!
//! The call's answer is the strictest check's.

mod disk;

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use toolgate_shell::{ReadTarget, SimpleCommand};

use crate::grants::{GrantPattern, GrantSpec};
use crate::mode::{mode_answer, Action, Kind, Mode};
use crate::paths::{normalize, RootedPath};
use crate::rules::Rule;
use crate::scope::{ScopeRefusal, ScopeTarget};
use crate::script_words::{script_words, ScriptWords};
use crate::shell_words::{
    names_a_place, place, reached, stays_inside, strictest, working_directories, Arg, Guard, Marks,
    Place, Reach, Role,
};
use crate::tools::{
    extract, not_read_only_field, unknown_fields, variants, workdir, ShellInput, Subject,
};
use crate::{
    AlwaysOption, Call, CheckTrace, Context, Evaluation, Policy, Question, RuleRef, Source,
};

/// One thing a call touches, to be judged on its own.
struct Check {
    /// The tool's permission, or a fixed one (`external_directory`, `read`,
    /// `doom_loop`) that costs no allocation.
    permission: Cow<'static, str>,
    /// What patterns and questions show.
    subject: String,
    /// Further texts rules may match to tighten the answer (a shell command
    /// after wrapper removal, the commands of a `bash -c` script).
    inner: Vec<String>,
    /// What the mode's answer depends on.
    basis: Basis,
    /// The mode table's answer and why (set for the session's mode when the
    /// call is evaluated, see [`Basis`]).
    mode_action: Action,
    mode_reason: Text,
    /// What an `always` answer grants for this check.
    always: GrantPattern,
    /// A shell command proven read-only.
    read_only: bool,
    /// A shell command: why it is not read-only (`None` when it only reads).
    refusal: Option<String>,
    /// Narrower patterns an `always` may grant instead, narrow to wide
    /// (the file, its directory; the exact command; the URL, its host).
    narrower: Vec<GrantPattern>,
    /// How the session's scope judges the subject, if it does.
    scope: Option<TargetKind>,
    /// A read rule a shell word was found to reach (through a glob, a
    /// directory read recursively or a run-time expansion): judged as if the
    /// rule matched the subject.
    reached: Option<Box<(Rule, Reach)>>,
    /// A shell command whose program the analysis cannot name (an expansion,
    /// a command it could not parse, a shell whose script it did not read):
    /// every deny or ask rule of the permission may match it.
    runs_unknown: bool,
}

/// What decides a check's mode answer, once the session's mode is known.
#[derive(Clone, Copy)]
enum Basis {
    /// Allowed by every mode: left to the rules (`external_directory`,
    /// `doom_loop`, the read rules a shell word meets).
    Fixed,
    /// The mode table's row for the tool's kind.
    Tool,
    /// The mode table's row for a shell command, read-only or not.
    Shell,
}

/// A call judged as far as the policy alone can judge it
/// ([`Policy::prepare`]), for [`Policy::evaluate_prepared`].
pub struct Prepared {
    /// The policy that prepared it (its [`Policy`] id).
    policy: u64,
    body: Body,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

enum Body {
    /// A tool that calls tools: judged through its calls when evaluated.
    Batch,
    /// Unusable input: denied, once the scope has had its say.
    Invalid {
        permission: String,
        kind: Kind,
        reason: String,
    },
    /// An input split by [`variants`]: each judged as if sent alone.
    Each {
        permission: String,
        kind: Kind,
        each: Vec<(serde_json::Map<String, serde_json::Value>, Prepared)>,
    },
    Ready(Box<Ready>),
}

/// The checks of a call, without what the session decides.
struct Ready {
    permission: String,
    kind: Kind,
    plan_allowed: bool,
    /// A plan approval without a plan (denied where it would ask).
    empty_plan: bool,
    /// Why the call is unusable (a shell call with no command), after the
    /// empty plan.
    invalid: Option<String>,
    /// The directory a search looks in: the session's scope must hold it.
    searched: Option<String>,
    checks: Vec<Check>,
    title: String,
    plan: Option<String>,
}

/// How a check's subject meets the session's scope.
#[derive(Clone, Copy)]
enum TargetKind {
    File,
    Directory,
    Command,
}

/// A reason: most are fixed texts, borrowed rather than allocated.
type Text = Cow<'static, str>;

/// The answer for one check.
struct Outcome {
    action: Action,
    source: Source,
    reason: Text,
    rule: Option<RuleRef>,
}

impl Policy {
    /// Decide one call in the given session state.
    pub fn evaluate(&self, call: &Call<'_>, context: &Context<'_>) -> Evaluation {
        let prepared = self.prepare(call);
        self.finish(call, prepared, context)
    }

    /// The part of a call's judgement the policy decides alone, whatever the
    /// session: the tool's subject, its paths, the shell analysis, the words
    /// a command reaches. A transport may do this on another thread before
    /// the session's state is known, and hand the result to
    /// [`Policy::evaluate_prepared`] with the same call.
    pub fn prepare(&self, call: &Call<'_>) -> Prepared {
        if let Some(oracle) = &self.glob_oracle {
            oracle.begin_call();
        }
        Prepared {
            policy: self.id.0,
            body: self.prepare_body(call),
        }
    }

    /// [`Policy::evaluate`] of a call already [`prepare`](Policy::prepare)d:
    /// the same answer. A call prepared by another policy (the one before a
    /// reload) is prepared again.
    pub fn evaluate_prepared(
        &self,
        call: &Call<'_>,
        prepared: Prepared,
        context: &Context<'_>,
    ) -> Evaluation {
        let prepared = if prepared.policy == self.id.0 {
            prepared
        } else {
            self.prepare(call)
        };
        self.finish(call, prepared, context)
    }

    fn prepare_body(&self, call: &Call<'_>) -> Body {
        // Tools that call tools are judged by their calls (batch.rs).
        if crate::batch::is_batch(call.tool) {
            return Body::Batch;
        }
        let spec = self.registry.lookup(call.tool);
        let invalid = |reason: String| Body::Invalid {
            permission: spec.permission.clone(),
            kind: spec.kind,
            reason,
        };
        // A command or directory given twice, differently: each one must pass.
        match variants(&spec, call.input) {
            Err(reason) => {
                return invalid(format!("the `{}` call is unusable: {reason}", call.tool))
            }
            Ok(Some(inputs)) => {
                let each = inputs
                    .into_iter()
                    .map(|input| {
                        let prepared = self.prepare(&Call {
                            input: &input,
                            ..*call
                        });
                        (input, prepared)
                    })
                    .collect();
                return Body::Each {
                    permission: spec.permission.clone(),
                    kind: spec.kind,
                    each,
                };
            }
            Ok(None) => {}
        }
        // A shell call's own directory (`workdir`, `directory`, `cwd`, ...) is where it runs.
        let joined: String;
        let call = &match workdir(&spec, call.input) {
            Err(reason) => {
                return invalid(format!("the `{}` call is unusable: {reason}", call.tool))
            }
            Ok(Some(dir)) => {
                joined = join_dir(call.cwd, &dir);
                Call {
                    cwd: Some(&joined),
                    ..*call
                }
            }
            Ok(None) => *call,
        };
        // A background run, a kept session, an environment: never read-only.
        let held = not_read_only_field(&spec, call.input);
        let subject = match extract(&spec, call.input) {
            Ok(subject) => subject,
            Err(reason) => {
                return invalid(format!("the `{}` call is unusable: {reason}", call.tool))
            }
        };
        let base: Cow<'_, Path> = match call.cwd {
            Some(cwd) => Cow::Owned(normalize(cwd, &self.project_root, self.home.as_deref())),
            None => Cow::Borrowed(&self.project_root),
        };
        let plan_allowed = match (spec.kind, &subject) {
            (Kind::Other, _) => self.plan_allowed.iter().any(|tool| tool.matches(call.tool)),
            // A sub-agent of a type that only reads: launched in plan mode,
            // its own calls judged in plan mode (the hooks run them in a
            // child session, which inherits the mode).
            (Kind::Task, Subject::Text(agent)) => {
                self.read_only_agents.iter().any(|name| name == agent)
            }
            _ => false,
        };
        let mut ready = Ready {
            permission: spec.permission.clone(),
            kind: spec.kind,
            plan_allowed,
            // A plan approval of nothing: the model is told to pass its plan.
            empty_plan: spec.kind == Kind::ExitPlan
                && match &subject {
                    Subject::Text(text) => text.trim().is_empty(),
                    _ => true,
                },
            invalid: None,
            searched: None,
            // Most calls have one to three checks: no regrowth of large items.
            checks: Vec::with_capacity(4),
            title: String::new(),
            plan: None,
        };
        let checks = &mut ready.checks;
        if call.cwd.is_some() {
            let cwd = RootedPath::new(base.to_path_buf(), &self.project_root);
            if cwd.external {
                checks.push(external_check(&cwd, true));
            }
        }

        // Judged by the mode table for the tool's kind (see [`Basis::Tool`]).
        let simple = |subject: String, always: GrantPattern, scope: Option<TargetKind>| {
            let narrower = narrower_options(spec.kind, &subject, &always);
            Check {
                permission: Cow::Owned(spec.permission.clone()),
                subject,
                inner: Vec::new(),
                basis: Basis::Tool,
                mode_action: Action::Allow,
                mode_reason: Cow::Borrowed(""),
                always,
                read_only: false,
                refusal: None,
                narrower,
                scope,
                reached: None,
                runs_unknown: false,
            }
        };

        match &subject {
            Subject::Shell(script) => {
                // The shell options only change when the call names its own directory.
                let with_cwd;
                let options = match call.cwd {
                    None => &self.shell,
                    Some(raw) => {
                        // A `..` in the reported directory is resolved by the
                        // kernel after symlinks: keep it for shell analysis,
                        // which refuses git there rather than guess.
                        let dotdot = Path::new(raw)
                            .components()
                            .any(|c| c == std::path::Component::ParentDir);
                        with_cwd = toolgate_shell::Options {
                            cwd: Some(if dotdot && !raw.starts_with('~') {
                                self.project_root.join(raw)
                            } else {
                                base.to_path_buf()
                            }),
                            ..self.shell.clone()
                        };
                        &with_cwd
                    }
                };
                // A remembered analysis comes with its words (see
                // [`crate::script_words`]); a fresh one has them found here.
                let remembered;
                let fresh;
                let (analysis, kept) = match script {
                    ShellInput::Text(text) if call.cwd.is_none() => {
                        ready.title = text.clone();
                        remembered = self.shell_cache.analyze(text, options);
                        (&remembered.analysis, Some(&remembered.words))
                    }
                    ShellInput::Text(text) => {
                        ready.title = text.clone();
                        fresh =
                            toolgate_shell::analyze(toolgate_shell::Script::Text(text), options);
                        (&fresh, None)
                    }
                    ShellInput::Argv(argv) => {
                        ready.title = argv.join(" ");
                        fresh =
                            toolgate_shell::analyze(toolgate_shell::Script::Argv(argv), options);
                        (&fresh, None)
                    }
                };
                if analysis.commands.is_empty() {
                    ready.invalid = Some(format!("the `{}` call has an empty command", call.tool));
                    return Body::Ready(Box::new(ready));
                }
                // Paths the words name: outside the project (`external_directory`),
                // or files the user guards with read rules (`.env` asks by default).
                // Globs are expanded on the disk only when no command of the script
                // can change it first (`touch src/x.env.rs; cat src/*.rs`).
                let disk_settled = analysis.is_read_only();
                let words = match kept {
                    Some(kept) => kept.words(),
                    None => script_words(&analysis.commands),
                };
                checks.extend(self.shell_word_checks(
                    &analysis.commands,
                    words,
                    &base,
                    disk_settled,
                ));
                let moves = analysis.commands.iter().any(|c| {
                    c.text
                        .split(' ')
                        .next()
                        .is_some_and(|w| matches!(w, "cd" | "pushd" | "popd"))
                });
                for command in &analysis.commands {
                    let unmet = match &command.verdict {
                        Ok(()) => self.unmet_requirement(&command.requires, &base, moves),
                        Err(_) => None,
                    };
                    let read_only = command.verdict.is_ok() && held.is_none() && unmet.is_none();
                    let refusal = match (&command.verdict, &held, unmet) {
                        (Ok(()), None, None) => None,
                        (Err(refusal), _, _) => Some(refusal.reason.clone()),
                        (Ok(()), Some(held), _) => Some(held.to_string()),
                        (Ok(()), None, Some(unmet)) => Some(unmet),
                    };
                    // What the mode says of a command that only reads is the
                    // same in every mode; of any other, see [`Basis::Shell`].
                    let mode_reason = match refusal {
                        None => {
                            let text = &command.text;
                            let mut reason = String::with_capacity(text.len() + 42);
                            reason.extend(["`", text, "` only reads, which every mode allows"]);
                            reason.into()
                        }
                        Some(_) => Cow::Borrowed(""),
                    };
                    // A literal `always` (a destructive program, say) may contain
                    // `*` or `?`: it is granted as exactly that text.
                    let always = match command.always.strip_suffix(" *") {
                        Some(prefix) if command.always != command.text => {
                            GrantPattern::prefixed(prefix, " *")
                        }
                        _ => GrantPattern::exact(&command.always),
                    };
                    let runs_unknown = runs_unknown(command);
                    // The exact command, narrower than its arity prefix.
                    let narrower = if command.always == command.text {
                        Vec::new()
                    } else {
                        vec![GrantPattern::exact(&command.text)]
                    };
                    checks.push(Check {
                        permission: Cow::Owned(spec.permission.clone()),
                        subject: command.text.clone(),
                        inner: command.inner.clone(),
                        basis: Basis::Shell,
                        mode_action: Action::Allow,
                        mode_reason,
                        always,
                        read_only,
                        refusal,
                        narrower,
                        scope: Some(TargetKind::Command),
                        reached: None,
                        runs_unknown,
                    });
                }
            }
            Subject::Paths(paths) => {
                let mut shown = Vec::new();
                // OpenCode grants every edit with `always`; a read that asks
                // (a `.env` file) is granted for that file only.
                let path_check = |subject: String| {
                    let always = if spec.kind == Kind::Read {
                        GrantPattern::exact(&subject)
                    } else {
                        GrantPattern::prefixed("", "*")
                    };
                    let target = if spec.kind == Kind::List {
                        TargetKind::Directory
                    } else {
                        TargetKind::File
                    };
                    simple(subject, always, Some(target))
                };
                for path in paths {
                    let rooted =
                        RootedPath::resolve(path, &base, &self.project_root, self.home.as_deref());
                    if rooted.external {
                        checks.push(external_check(&rooted, false));
                    }
                    // A symbolic link on the way: the file it reaches is
                    // what is read or written, judged like the path itself.
                    if let Some(real) = self.linked_path(path, &base, &rooted) {
                        if real.external && !rooted.external {
                            checks.push(external_check(&real, false));
                        }
                        checks.push(path_check(real.subject));
                    }
                    shown.push(rooted.subject.clone());
                    checks.push(path_check(rooted.subject));
                }
                // Entries that are globs (Gemini's `read_many_files` `paths` and
                // `include`) read what they match: as a shell's `cat` would.
                if matches!(spec.kind, Kind::Read | Kind::List) {
                    let globs: Vec<&str> = paths
                        .iter()
                        .map(String::as_str)
                        .filter(|path| path.contains(['*', '?', '[', '{']))
                        .collect();
                    checks.extend(self.read_guard_checks("cat", &[], &globs, &base));
                }
                ready.title = shown.join(", ");
            }
            Subject::Search { pattern, path } => {
                let directory = match path {
                    Some(path) => {
                        let rooted = RootedPath::resolve(
                            path,
                            &base,
                            &self.project_root,
                            self.home.as_deref(),
                        );
                        if rooted.external {
                            checks.push(external_check(&rooted, true));
                        }
                        if let Some(real) = self.linked_path(path, &base, &rooted) {
                            if real.external && !rooted.external {
                                checks.push(external_check(&real, true));
                            }
                        }
                        rooted.subject
                    }
                    None => RootedPath::new(base.to_path_buf(), &self.project_root).subject,
                };
                ready.title = pattern.clone();
                // The directory searched must be inside the session's scope.
                ready.searched = Some(directory);
                checks.push(simple(
                    pattern.clone(),
                    GrantPattern::prefixed("", "*"),
                    None,
                ));
                // A search reads the files it looks in (`pattern: "."` prints
                // them): the directory, or the files its `glob`/`include` filter
                // picks under it, meet the read rules as `rg` in a shell would.
                let searched = path.clone().unwrap_or_else(|| ".".to_string());
                let mut filters: Vec<String> = Vec::new();
                for field in ["glob", "include"] {
                    if let Some(filter) = call.input.get(field).and_then(serde_json::Value::as_str)
                    {
                        filters.push(format!("{}/**/{filter}", searched.trim_end_matches('/')));
                    }
                }
                let filters: Vec<&str> = filters.iter().map(String::as_str).collect();
                checks.extend(self.read_guard_checks(
                    "rg -e x",
                    &[searched.as_str()],
                    &filters,
                    &base,
                ));
                // A search tool may follow the links below the directory it
                // searches (OpenCode's `grep` has run `rg --follow`).
                checks.extend(self.followed_link_checks(&searched, &base));
            }
            Subject::Text(text) if spec.kind == Kind::ExitPlan => {
                ready.title = "Leave plan mode and carry out this plan".to_string();
                ready.plan = Some(text.clone());
                checks.push(simple(
                    "*".to_string(),
                    GrantPattern::prefixed("", "*"),
                    None,
                ));
            }
            Subject::Text(text) => {
                ready.title = text.clone();
                checks.push(simple(text.clone(), GrantPattern::prefixed("", "*"), None));
            }
            Subject::None => {
                if spec.kind == Kind::ExitPlan {
                    ready.title = "Leave plan mode and carry out this plan".to_string();
                    ready.plan = Some(String::new());
                } else {
                    ready.title = call.tool.to_string();
                }
                checks.push(simple(
                    "*".to_string(),
                    GrantPattern::prefixed("", "*"),
                    None,
                ));
            }
        }
        // A tool toolgate does not know whose input carries a command
        // (`command`, `cmd`, `script`, a program with its `args`) meets the
        // `bash` rules too, in every mode, as it meets the session's scope.
        if spec.kind == Kind::Other {
            ready
                .checks
                .extend(self.embedded_command_checks(call.input));
        }
        Body::Ready(Box::new(ready))
    }

    /// The checks that hold each simple command found in an unknown tool's
    /// input against the `bash` rules: allowed by every mode (the tool's
    /// own check carries the mode's answer), so a rule can only make the
    /// call stricter; a command whose program cannot be known meets every
    /// deny and ask rule of `bash`, as in a shell call.
    fn embedded_command_checks(
        &self,
        input: &serde_json::Map<String, serde_json::Value>,
    ) -> Vec<Check> {
        let mut checks = Vec::new();
        for command in unknown_fields(input).commands {
            let script = match &command {
                ShellInput::Text(text) => toolgate_shell::Script::Text(text),
                ShellInput::Argv(argv) => toolgate_shell::Script::Argv(argv),
            };
            let analysis = toolgate_shell::analyze(script, &self.shell);
            for simple in &analysis.commands {
                checks.push(Check {
                    permission: Cow::Borrowed("bash"),
                    subject: simple.text.clone(),
                    inner: simple.inner.clone(),
                    basis: Basis::Fixed,
                    mode_action: Action::Allow,
                    mode_reason: Cow::Borrowed(
                        "a command in the input of a tool toolgate does not know meets the `bash` rules",
                    ),
                    always: GrantPattern::exact(&simple.text),
                    read_only: false,
                    refusal: None,
                    narrower: Vec::new(),
                    scope: Some(TargetKind::Command),
                    reached: None,
                    runs_unknown: runs_unknown(simple),
                });
            }
        }
        checks
    }

    /// The rest of a judgement, in the session's state: its scope, mode,
    /// repeats, approvals and grants.
    fn finish(&self, call: &Call<'_>, prepared: Prepared, context: &Context<'_>) -> Evaluation {
        let (permission, kind) = match &prepared.body {
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

    /// The steps of an evaluation, from the checks and their outcomes as
    /// judged (nothing is judged again), with every rule that matched.
    fn trace(&self, checks: &[Check], outcomes: &[Outcome]) -> Vec<CheckTrace> {
        let rule_ref = |rule: &Rule| RuleRef {
            permission: rule.permission.as_str().to_string(),
            pattern: rule.pattern.as_str().to_string(),
            action: rule.action,
            origin: rule.origin.to_string(),
        };
        checks
            .iter()
            .zip(outcomes)
            .map(|(check, outcome)| {
                let mut matched = Vec::new();
                for rule in self.rules.rules() {
                    if !rule.permission.matches(&check.permission) {
                        continue;
                    }
                    let texts = std::iter::once(&check.subject).chain(&check.inner);
                    for text in texts {
                        if rule.pattern.matches(text) {
                            matched.push((rule_ref(rule), text.clone()));
                        }
                    }
                }
                CheckTrace {
                    permission: check.permission.to_string(),
                    subject: check.subject.clone(),
                    inner: check.inner.clone(),
                    not_read_only: check.refusal.clone(),
                    command: matches!(check.scope, Some(TargetKind::Command)),
                    mode_action: check.mode_action,
                    mode_reason: check.mode_reason.to_string(),
                    matched,
                    always: check.always.as_str().to_string(),
                    action: outcome.action,
                    source: outcome.source,
                    reason: outcome.reason.to_string(),
                    rule: outcome.rule.clone(),
                }
            })
            .collect()
    }

    /// A call whose input was split by [`variants`]: each input is judged as
    /// if sent alone, and the call gets the strictest answer. When that is
    /// ask, one question gathers every input that asks for the same permission.
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

    /// The answer for one check; see the module documentation for the order.
    fn judge(&self, check: &Check, context: &Context<'_>) -> Outcome {
        let mode = context.mode;
        if let Some(kind) = check.scope {
            let target = match kind {
                TargetKind::File => ScopeTarget::File(&check.subject),
                TargetKind::Directory => ScopeTarget::Directory(&check.subject),
                TargetKind::Command => ScopeTarget::Command(&check.subject),
            };
            if let Some(refusal) = context.scope.target_refusal(target) {
                return Outcome {
                    action: Action::Deny,
                    source: Source::Scope,
                    reason: refusal.reason.into(),
                    rule: None,
                };
            }
        }
        if check.mode_action == Action::Deny {
            return Outcome {
                action: Action::Deny,
                source: Source::Mode,
                reason: check.mode_reason.clone(),
                rule: None,
            };
        }
        // Whether the deciding rule is one the user wrote (or the doom-loop
        // guard): an ask from it is not lifted by `auto`.
        let mut binds = false;
        let mut outcome = match self.rule_for(&check.permission, &check.subject) {
            Some(rule) => {
                binds = binds_in_auto(rule, &check.permission);
                rule_outcome(rule, &check.subject)
            }
            None => Outcome {
                action: check.mode_action,
                source: Source::Mode,
                reason: check.mode_reason.clone(),
                rule: None,
            },
        };
        // A tightening pass takes a rule that is stricter, or one that asks as
        // the answer does but binds where the answer's rule does not.
        let tightens = |rule: &Rule, outcome: &Outcome, binds: bool| {
            rule.action > outcome.action
                || (rule.action == Action::Ask
                    && outcome.action == Action::Ask
                    && !binds
                    && binds_in_auto(rule, &check.permission))
        };
        if let Some((rule, reach)) = check.reached.as_deref() {
            if tightens(rule, &outcome, binds) {
                binds = binds_in_auto(rule, &check.permission);
                outcome = rule_outcome(rule, &check.subject);
                outcome.reason = format!("{} ({})", outcome.reason, reach.phrase()).into();
            }
        }
        // A deny or ask on the command after wrapper removal (or inside `bash -c`)
        // tightens the answer; an allow there never loosens it.
        for inner in &check.inner {
            if let Some(rule) = self.rule_for(&check.permission, inner) {
                if tightens(rule, &outcome, binds) {
                    binds = binds_in_auto(rule, &check.permission);
                    outcome = rule_outcome(rule, inner);
                }
            }
        }
        // A command whose program the analysis cannot name (`"$RM" -rf x`,
        // `coproc rm x`, `echo 'rm x' | sh`) could run any program: every deny or
        // ask rule of the permission may match it.
        if check.runs_unknown {
            if let Some(rule) = self.strictest_rule_of(&check.permission) {
                if tightens(rule, &outcome, binds) {
                    binds = binds_in_auto(rule, &check.permission);
                    outcome = rule_outcome(rule, &check.subject);
                    outcome.reason = format!(
                        "{} (what it runs cannot be known, so the rule may match it)",
                        outcome.reason
                    )
                    .into();
                }
            }
        }
        if outcome.action != Action::Ask {
            return outcome;
        }
        if mode == Mode::ReadOnly {
            // The mode denies; the rule that asked stays in the provenance.
            return Outcome {
                action: Action::Deny,
                source: Source::Mode,
                reason: format!(
                    "readonly mode never asks, so what would ask is denied: {}",
                    outcome.reason
                )
                .into(),
                rule: outcome.rule,
            };
        }
        if context.approvals.iter().any(|(permission, subject)| {
            *permission == check.permission && *subject == check.subject
        }) {
            return Outcome {
                action: Action::Allow,
                source: Source::User,
                reason: Cow::Borrowed("the user allowed this call once"),
                rule: None,
            };
        }
        let granted = [
            (context.grants, "in this session", "grant"),
            (context.project_grants, "for this project", "project grant"),
        ];
        for (grants, place, origin) in granted {
            if let Some(grant) =
                grants.covering(&check.permission, &check.subject, mode == Mode::Plan)
            {
                return Outcome {
                    action: Action::Allow,
                    source: Source::Grant,
                    reason: format!(
                        "an earlier `always` granted `{}` for {} {place}",
                        grant.pattern.as_str(),
                        grant.permission
                    )
                    .into(),
                    rule: Some(RuleRef {
                        permission: grant.permission.clone(),
                        pattern: grant.pattern.as_str().to_string(),
                        action: Action::Allow,
                        origin: origin.to_string(),
                    }),
                };
            }
        }
        // `auto` lifts its own questions and the built-in defaults' (`.env`,
        // `external_directory`), never a rule the user wrote nor the doom loop.
        if mode == Mode::Auto && !binds {
            return Outcome {
                action: Action::Allow,
                source: Source::Mode,
                reason: format!("auto mode allows what would ask ({})", outcome.reason).into(),
                rule: outcome.rule,
            };
        }
        outcome
    }

    /// A read rule that guards this file by name: one that asks or denies
    /// with a pattern other than a bare `*` (which would take every word of
    /// every command for a file).
    fn read_guard(&self, subject: &str) -> Option<&Rule> {
        self.rule_for("read", subject)
            .filter(|rule| rule.action != Action::Allow && rule.pattern.as_str() != "*")
    }

    /// The strictest deny or ask rule that can still decide for `permission`
    /// (the last one written among the strictest), whatever its pattern: the
    /// rules from the last `*` rule of the permission on (a rule before it is
    /// never the last match for any subject).
    fn strictest_rule_of(&self, permission: &str) -> Option<&Rule> {
        let rules = self.rules.rules();
        let live = rules
            .iter()
            .rposition(|rule| rule.permission.matches(permission) && rule.pattern.as_str() == "*")
            .unwrap_or(0);
        rules[live..]
            .iter()
            .filter(|rule| rule.action > Action::Allow && rule.permission.matches(permission))
            .fold(None, |best: Option<&Rule>, rule| match best {
                Some(best) if best.action > rule.action => Some(best),
                _ => Some(rule),
            })
    }

    /// The deciding rule for a permission and subject: the last match over
    /// every layer (built-in defaults, policy file, `TOOLGATE_PERMISSION`,
    /// `--permission`).
    fn rule_for(&self, permission: &str, subject: &str) -> Option<&Rule> {
        self.rules.last_match(permission, subject)
    }
}

/// A shell call's own directory, against the directory the agent reported.
/// An argument standing for any file a command could name (names that
/// arrive on its input, unknown until it runs).
fn any_name<'a>(role: Role) -> Arg<'a> {
    Arg::new(
        NAMES_FROM_INPUT,
        Marks {
            expansion: true,
            ..Marks::default()
        },
        role,
    )
}

fn join_dir(cwd: Option<&str>, dir: &str) -> String {
    match cwd {
        Some(cwd) if !dir.starts_with(['/', '~']) => {
            format!("{}/{dir}", cwd.trim_end_matches('/'))
        }
        _ => dir.to_string(),
    }
}

fn external_check(path: &RootedPath, is_directory: bool) -> Check {
    let dir = if is_directory {
        path.absolute.clone()
    } else {
        path.absolute
            .parent()
            .unwrap_or(&path.absolute)
            .to_path_buf()
    };
    let dir = dir.to_string_lossy();
    let always = GrantPattern::prefixed(&format!("{}/", dir.trim_end_matches('/')), "*");
    fixed_check("external_directory", path.subject.clone(), always)
}

/// A check the mode allows in every mode (see [`Basis::Fixed`]): the rules
/// alone judge it.
fn fixed_check(permission: &'static str, subject: String, always: GrantPattern) -> Check {
    Check {
        permission: Cow::Borrowed(permission),
        subject,
        inner: Vec::new(),
        basis: Basis::Fixed,
        mode_action: Action::Allow,
        mode_reason: Cow::Borrowed(""),
        always,
        read_only: false,
        refusal: None,
        narrower: Vec::new(),
        scope: None,
        reached: None,
        runs_unknown: false,
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

/// `read` for a file a shell command names, judged by the read rules alone
/// (the mode allows reading); `always` grants that file.
fn read_argument_check(subject: String) -> Check {
    let always = GrantPattern::exact(&subject);
    fixed_check("read", subject, always)
}

/// `read` for a shell word that reaches a guarded file through a glob, a
/// directory read recursively or a run-time expansion: judged by that rule
/// (and by any rule matching the word itself); `always` grants the word.
fn reached_check(subject: String, rule: &Rule, reach: Reach) -> Check {
    Check {
        reached: Some(Box::new((rule.clone(), reach))),
        runs_unknown: false,
        ..read_argument_check(subject)
    }
}

/// The device files every shell uses are not paths outside the project.
fn is_standard_device(path: &Path) -> bool {
    matches!(
        path.to_str(),
        Some("/dev/null" | "/dev/stdin" | "/dev/stdout" | "/dev/stderr")
    )
}

/// `external_directory` for a shell word whose place the shell decides at run
/// time (`$X/y`, `~user/x`, `~+/x`): it may be anywhere, so it asks like a
/// path outside the project; `always` grants that word only.
fn anywhere_check(word: &str) -> Check {
    let mut check = external_argument_check(&RootedPath {
        absolute: PathBuf::from(word),
        subject: word.to_string(),
        external: true,
    });
    check.always = GrantPattern::exact(word);
    check
}

impl Policy {
    /// The checks for the paths the words of a script name: `external_directory`
    /// for those that may leave the project, `read` for those that may be files a
    /// read rule guards. See [`crate::shell_words`] for which words count.
    /// The read-rule checks a tool's reads get when they are written as
    /// `COMMAND -- PATHS GLOBS` in a shell: the same judgement as a shell
    /// command's words (globs, directories read recursively, guarded files).
    /// `paths` are literal; `globs` keep their glob characters. External paths
    /// are left to the caller, which checks each subject itself.
    fn read_guard_checks(
        &self,
        command: &str,
        paths: &[&str],
        globs: &[&str],
        base: &Path,
    ) -> Vec<Check> {
        if self.read_guards.is_empty() || (paths.is_empty() && globs.is_empty()) {
            return Vec::new();
        }
        // The common search (`src`, `.`, no filter) reaches a guard only when it
        // is a guarded file itself or a guard names a place in the tree: the
        // shell's own judgement would find nothing else, so it is not asked.
        let plain = |path: &&str| {
            !path.starts_with('/')
                && path.split('/').all(|segment| segment != "..")
                && path
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
        };
        if globs.is_empty()
            && paths.iter().all(plain)
            && !paths.iter().any(|path| {
                self.read_guards
                    .iter()
                    .any(|guard| guard.matches_any_case(path))
            })
            && !self.anchored_read_guard()
        {
            return Vec::new();
        }
        let mut script = format!("{command} --");
        let words = paths
            .iter()
            .map(|path| (*path, false))
            .chain(globs.iter().map(|glob| (*glob, true)));
        for (word, glob) in words {
            script.push(' ');
            if !shell_quote(word, glob, &mut script) {
                // A word no shell line can carry (a newline, NUL): fail closed.
                let guards = self.guards();
                return strictest(&guards)
                    .map(|guard| reached_check(word.to_string(), guard.rule, Reach::Anywhere))
                    .into_iter()
                    .collect();
            }
        }
        let analysis = toolgate_shell::analyze(toolgate_shell::Script::Text(&script), &self.shell);
        let words = script_words(&analysis.commands);
        self.shell_word_checks(&analysis.commands, words, base, true)
            .into_iter()
            .filter(|check| check.permission != "external_directory")
            .collect()
    }

    /// Is there a deny or ask read rule that names a place in the tree
    /// (`secrets/**`), which a directory read recursively can reach?
    fn anchored_read_guard(&self) -> bool {
        self.rules.rules().iter().any(|rule| {
            rule.permission.matches("read")
                && rule.action != Action::Allow
                && rule.pattern.as_str() != "*"
                && names_a_place(rule.pattern.as_str())
        })
    }

    fn shell_word_checks(
        &self,
        commands: &[SimpleCommand],
        words: ScriptWords<'_>,
        base: &Path,
        disk_settled: bool,
    ) -> Vec<Check> {
        let home = self.home.as_deref();
        let changes_directory = words.changes_directory();
        let mut followed: Vec<(Option<String>, Role)> = Vec::new();
        let ScriptWords { mut args, moves } = words;
        // What the program models found read beyond the words: option
        // values (`--files0-from=F`), response files (`@F`), and names that
        // arrive on the input (`xargs cat`), which may be any file, or the
        // names a producer prints (`find … | xargs cat`).
        for read in commands.iter().flat_map(|c| &c.reads) {
            let role = if read.tree { Role::Tree } else { Role::File };
            if let ReadTarget::OptionsIn(word) = &read.target {
                if !self.may_become_options(word, base, changes_directory, disk_settled) {
                    continue;
                }
            }
            args.push(match &read.target {
                ReadTarget::Path(path) => Arg::new(path, Marks::guessed(path), role),
                ReadTarget::Names(glob) => Arg {
                    names: true,
                    ..Arg::new(glob, Marks::guessed(glob), role)
                },
                ReadTarget::Any | ReadTarget::OptionsIn(_) => any_name(role),
            });
        }
        // A program that follows the links below a directory it reads (`grep
        // -R`, `rg -L`) reads what they lead to as well: each link's real
        // place is judged like a word of the command; a tree the disk cannot
        // show (too large, unreadable, a glob or an
        // expansion, a directory changed by a `cd` or by the script itself)
        // may lead anywhere.
        for arg in &args {
            // Without a disk oracle no link is seen, as for every path.
            if !arg.follows_links || self.glob_oracle.is_none() {
                continue;
            }
            let oracle = match &self.glob_oracle {
                Some(oracle)
                    if !arg.marks.expansion
                        && !arg.marks.glob
                        && !changes_directory
                        && disk_settled =>
                {
                    oracle
                }
                _ => {
                    followed.push((None, arg.role));
                    continue;
                }
            };
            let dir = normalize(arg.text, base, self.home.as_deref());
            // A link that stays inside the tree leads where the tree's read
            // already goes.
            let tree = oracle.resolve(&dir).unwrap_or_else(|| dir.clone());
            match oracle.links_below(&dir) {
                Some(reached) => followed.extend(
                    reached
                        .into_iter()
                        .filter(|real| !real.starts_with(&tree))
                        .map(|real| (Some(real.to_string_lossy().into_owned()), arg.role)),
                ),
                None => followed.push((None, arg.role)),
            }
        }
        for (reached, role) in &followed {
            args.push(match reached {
                Some(path) => Arg::new(path, Marks::guessed(path), *role),
                None => Arg::new(
                    NAMES_FROM_INPUT,
                    Marks {
                        expansion: true,
                        ..Marks::default()
                    },
                    *role,
                ),
            });
        }
        // A name a consumer may split into other words is any file.
        let split: Vec<Role> = args
            .iter()
            .filter(|arg| {
                arg.names && self.names_may_split(arg.text, base, changes_directory, disk_settled)
            })
            .map(|arg| arg.role)
            .collect();
        args.extend(split.into_iter().map(any_name));
        let mut bases: Option<Vec<Option<PathBuf>>> = None;

        let at_root = !changes_directory && *base == *self.project_root;
        let anchored_guard = self.anchored_read_guard();
        let mut guards: Option<Vec<Guard<'_>>> = None;
        let mut outside: Vec<String> = Vec::new();
        let mut guarded: Vec<String> = Vec::new();
        let mut reached_seen: Vec<String> = Vec::new();
        let mut checks = Vec::new();
        for arg in &args {
            let reads = arg.role >= Role::File && !self.read_guards.is_empty();
            // A word whose path crosses a symbolic link is judged where it
            // leads as well, through the general path below.
            let crosses_link = self.glob_oracle.is_some()
                && !arg.marks.expansion
                && !arg.marks.glob
                && self.crosses_link(arg.text, base);
            if at_root && stays_inside(arg.text, arg.marks) && !crosses_link {
                // A plain relative word names itself.
                if reads
                    && self
                        .read_guards
                        .iter()
                        .any(|guard| guard.matches_any_case(arg.text))
                    && !guarded.iter().any(|seen| seen == arg.text)
                    && self.read_guard(arg.text).is_some()
                {
                    guarded.push(arg.text.to_string());
                    checks.push(read_argument_check(arg.text.to_string()));
                }
                if !(reads && arg.role == Role::Tree && anchored_guard) {
                    continue;
                }
            }
            let bases = bases.get_or_insert_with(|| {
                working_directories(moves.iter().map(Vec::as_slice), base, home)
            });
            match place(arg.text, arg.marks, bases, home) {
                Place::Anywhere => {
                    if arg.external && !outside.iter().any(|seen| seen == arg.text) {
                        outside.push(arg.text.to_string());
                        checks.push(anywhere_check(arg.text));
                    }
                    if reads && !reached_seen.iter().any(|seen| seen == arg.text) {
                        let guards = guards.get_or_insert_with(|| self.guards());
                        if let Some(guard) = strictest(guards) {
                            reached_seen.push(arg.text.to_string());
                            checks.push(reached_check(
                                arg.text.to_string(),
                                guard.rule,
                                Reach::Anywhere,
                            ));
                        }
                    }
                }
                Place::Paths(mut paths) => {
                    // From the command's own directory, `crosses_link` already
                    // looked; after a `cd` every possible directory is asked.
                    let look = crosses_link || (changes_directory && self.glob_oracle.is_some());
                    if look && !arg.marks.expansion && !arg.marks.glob {
                        let mut real = Vec::new();
                        for base in bases.iter().flatten() {
                            let lexical = RootedPath::new(
                                normalize(arg.text, base, home),
                                &self.project_root,
                            );
                            if let Some(linked) = self.linked_path(arg.text, base, &lexical) {
                                let placed =
                                    RootedPath::new(linked.absolute.clone(), &self.project_root);
                                if linked.external && !placed.external {
                                    // Its links could not be followed: it may
                                    // lead anywhere.
                                    if !outside.iter().any(|seen| seen == arg.text) {
                                        outside.push(arg.text.to_string());
                                        checks.push(anywhere_check(arg.text));
                                    }
                                } else {
                                    real.push(linked.absolute);
                                }
                            }
                        }
                        paths.extend(real);
                        paths.dedup();
                    }
                    for path in paths {
                        // Outside the project or not is a matter of the word's
                        // fixed head: a glob's matches only replace its glob
                        // segments by names (never `.` or `..`), so the glob
                        // itself is judged, one question however many it matches.
                        let rooted = RootedPath::new(path, &self.project_root);
                        if arg.external
                            && rooted.external
                            && !is_standard_device(&rooted.absolute)
                            && !outside.contains(&rooted.subject)
                        {
                            outside.push(rooted.subject.clone());
                            checks.push(external_argument_check(&rooted));
                        }
                        if !reads {
                            continue;
                        }
                        let mut expanded =
                            self.expand_globs(rooted.absolute, arg.marks.glob, disk_settled);
                        if arg.marks.glob {
                            // A match that is a link is read where it leads.
                            let linked: Vec<(PathBuf, bool)> = expanded
                                .iter()
                                .filter(|(_, glob)| !glob)
                                .filter_map(|(path, _)| {
                                    let oracle = self.glob_oracle.as_ref()?;
                                    let lexical = RootedPath::new(path.clone(), &self.project_root);
                                    self.linked(oracle.as_ref(), path, &lexical)
                                })
                                .map(|real| (real.absolute, false))
                                .collect();
                            for (real, _) in &linked {
                                let real = RootedPath::new(real.clone(), &self.project_root);
                                if arg.external && real.external && !outside.contains(&real.subject)
                                {
                                    outside.push(real.subject.clone());
                                    checks.push(external_argument_check(&real));
                                }
                            }
                            expanded.extend(linked);
                        }
                        for (path, glob) in expanded {
                            let rooted = RootedPath::new(path, &self.project_root);
                            if !glob
                                && !guarded.contains(&rooted.subject)
                                && self
                                    .read_guards
                                    .iter()
                                    .any(|guard| guard.matches_any_case(&rooted.subject))
                                && self.read_guard(&rooted.subject).is_some()
                            {
                                guarded.push(rooted.subject.clone());
                                checks.push(read_argument_check(rooted.subject.clone()));
                            }
                            // A glob, or a directory read recursively, may reach more.
                            if !(glob || arg.role == Role::Tree && anchored_guard)
                                || reached_seen.contains(&rooted.subject)
                            {
                                continue;
                            }
                            let guards = guards.get_or_insert_with(|| self.guards());
                            if let Some((guard, reach)) =
                                reached(guards, &rooted.absolute, glob, arg.role)
                            {
                                reached_seen.push(rooted.subject.clone());
                                checks.push(reached_check(rooted.subject, guard.rule, reach));
                            }
                        }
                    }
                }
            }
        }
        checks
    }

    fn guards(&self) -> Vec<Guard<'_>> {
        crate::shell_words::guards(&self.rules, &self.project_root)
    }
}

/// How a read of any file (names from a command's input) is shown.
const NAMES_FROM_INPUT: &str = "$(names read from input)";

/// `external_directory` for a path named in a shell command. Whether it is a
/// file or a directory is unknown, so `always` grants its parent directory,
/// or only the path itself when the parent is `/`.
fn external_argument_check(path: &RootedPath) -> Check {
    let mut check = external_check(path, false);
    let parent = path
        .absolute
        .parent()
        .map(|p| p.to_string_lossy().into_owned());
    if parent.as_deref().is_none_or(|p| p == "/") {
        check.always = GrantPattern::exact(&path.subject);
    }
    check
}

/// Append `word` to a shell line as one literal word, its glob characters
/// (`* ? [ ] { } , ! ^`) left to the shell when `glob`. False for a word no
/// line can hold (a newline or NUL).
fn shell_quote(word: &str, glob: bool, out: &mut String) -> bool {
    if word.contains(['\n', '\0']) {
        return false;
    }
    for c in word.chars() {
        if (glob && "*?[]{},!^".contains(c)) || c.is_ascii_alphanumeric() || "/._-+@%=:".contains(c)
        {
            out.push(c);
        } else if c == '\'' {
            out.push_str("\\'");
        } else {
            out.push('\'');
            out.push(c);
            out.push('\'');
        }
    }
    true
}

/// Does a simple command run something its analysis cannot name? So it does
/// when it could not be parsed into words, when its program (or an inner
/// command's) is decided at run time ([`unknown_program`]), when it hands
/// text to the shell to run later or as code (`coproc`, `trap`, `alias`,
/// `hash`, `source`), and when it runs a shell whose script was not read
/// (from its input, a file, or behind options the analysis does not know).
fn runs_unknown(command: &SimpleCommand) -> bool {
    const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"];
    fn program_of(text: &str) -> &str {
        let first = text.split(' ').next().unwrap_or("");
        first.rsplit('/').next().unwrap_or(first)
    }
    if command.words.is_empty() {
        return true;
    }
    let texts = || std::iter::once(&command.text).chain(&command.inner);
    if texts().any(|text| {
        unknown_program(text)
            || matches!(
                program_of(text),
                "coproc" | "trap" | "alias" | "hash" | "source" | "." | "enable" | "bind"
            )
            || program_of(text).contains(['{', '}', '\\', '*', '?', '['])
    }) {
        return true;
    }
    // A shell runs what its analysed script holds: the inner commands after
    // it (wrappers come first, outermost first). Without one after the last
    // shell, that shell's script was not read.
    let is_shell = |text: &String| SHELLS.contains(&program_of(text));
    let last_shell = texts()
        .enumerate()
        .filter(|(_, text)| is_shell(text))
        .last();
    last_shell.is_some_and(|(last, _)| last + 1 == 1 + command.inner.len())
}

/// Is the program of a simple command's text (words joined by spaces,
/// expansions as written) decided only when it runs? So it is when the
/// program word is an expansion, when `eval` is given one, and when a
/// shell's `-c` script starts with one (`sh -c "$X"`: the first word after
/// `-c` is the script's program).
fn unknown_program(text: &str) -> bool {
    let expanded = |word: &str| word.contains(['$', '`']);
    let mut words = text.split(' ');
    let Some(program) = words.next() else {
        return false;
    };
    if expanded(program) {
        return true;
    }
    match program.rsplit('/').next().unwrap_or(program) {
        "eval" => words.any(expanded),
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "ash" | "busybox" => {
            let mut words = words.skip_while(|word| {
                !(word.starts_with('-') && !word.starts_with("--") && word.contains('c'))
            });
            words.next().is_some() && words.next().is_some_and(expanded)
        }
        _ => false,
    }
}

/// Does an ask from this rule hold in `auto`? So it does for every rule the
/// user wrote (policy file, `TOOLGATE_PERMISSION`, `--permission`) and for
/// the built-in doom-loop guard; the other built-in defaults are questions
/// `auto` was chosen to skip.
fn binds_in_auto(rule: &Rule, permission: &str) -> bool {
    !rule.builtin || permission == "doom_loop"
}

fn rule_outcome(rule: &Rule, subject: &str) -> Outcome {
    let verb = match rule.action {
        Action::Allow => "allows",
        Action::Ask => "asks before",
        Action::Deny => "denies",
    };
    let permission = rule.permission.as_str();
    let pattern = rule.pattern.as_str();
    let origin: &str = &rule.origin;
    // Written piece by piece into one string: this runs for most calls.
    let mut reason =
        String::with_capacity(80 + origin.len() + permission.len() + pattern.len() + subject.len());
    reason.push_str("the ");
    if origin == "built-in" {
        reason.push_str("built-in");
    } else {
        reason.extend(["`", origin, "`"]);
    }
    reason.extend([" rule `", permission, ": ", pattern, "` ", verb, " "]);
    match permission {
        "external_directory" => {
            reason.extend(["leaving the project root for `", subject, "`"]);
        }
        "doom_loop" => reason.extend(["a third identical `", subject, "` call in a row"]),
        _ if subject == "*" => reason.push_str("this call"),
        _ => reason.extend(["`", subject, "`"]),
    }
    Outcome {
        action: rule.action,
        source: Source::Rule,
        reason: reason.into(),
        rule: Some(RuleRef {
            permission: permission.to_string(),
            pattern: pattern.to_string(),
            action: rule.action,
            origin: origin.to_string(),
        }),
    }
}

fn kind_reason(mode: Mode, kind: Kind, action: Action, tool: &str, plan_allowed: bool) -> Text {
    match action {
        Action::Allow if kind == Kind::Other && mode == Mode::Plan && plan_allowed => {
            format!("plan mode allows `{tool}`: it is in planModeAllowedTools").into()
        }
        Action::Allow if kind == Kind::Task && mode == Mode::Plan && plan_allowed => format!(
            "plan mode allows sub-agents of a read-only type (readOnlyAgents) through `{tool}`; their calls stay bound by plan mode"
        ).into(),
        Action::Ask if kind == Kind::ExitPlan => "leaving plan mode needs the user's approval of the plan".into(),
        Action::Deny if kind == Kind::Other && mode == Mode::Plan => format!(
            "plan mode does not allow other and MCP tools unless planModeAllowedTools lists them, and `{tool}` is not listed"
        ).into(),
        _ => match mode_kind_text(mode, kind, action) {
            Some(text) => Cow::Borrowed(text),
            None => format!("{mode} mode {} {}", action_verb(action), kind.noun()).into(),
        },
    }
}

fn action_verb(action: Action) -> &'static str {
    match action {
        Action::Allow => "allows",
        Action::Ask => "asks before",
        Action::Deny => "does not allow",
    }
}

/// `{mode} mode allows {noun}` (asks before, does not allow) for every mode,
/// kind and action, written once per process: the reason most calls get
/// costs no allocation.
fn mode_kind_text(mode: Mode, kind: Kind, action: Action) -> Option<&'static str> {
    static TEXTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    const ACTIONS: [Action; 3] = [Action::Allow, Action::Ask, Action::Deny];
    let texts = TEXTS.get_or_init(|| {
        let mut texts = Vec::new();
        for mode in Mode::ALL {
            for kind in Kind::ALL {
                for action in ACTIONS {
                    texts.push(format!(
                        "{mode} mode {} {}",
                        action_verb(action),
                        kind.noun()
                    ));
                }
            }
        }
        texts
    });
    let mode = Mode::ALL.iter().position(|m| *m == mode)?;
    let kind = Kind::ALL.iter().position(|k| *k == kind)?;
    let action = ACTIONS.iter().position(|a| *a == action)?;
    let at = (mode * Kind::ALL.len() + kind) * ACTIONS.len() + action;
    texts.get(at).map(String::as_str)
}

fn shell_reason(mode: Mode, action: Action, refusal: &str) -> String {
    match action {
        Action::Allow => {
            format!("{mode} mode allows shell commands that are not read-only ({refusal})")
        }
        Action::Ask => {
            format!("{mode} mode asks before shell commands that are not read-only: {refusal}")
        }
        Action::Deny => format!("{mode} mode allows only read-only shell commands: {refusal}"),
    }
}

/// The call's answer: the strictest check's; a question gathers every asking
/// check of the first asking permission.
#[allow(clippy::too_many_arguments)] // the parts of one evaluation
fn combine(
    mut checks: Vec<Check>,
    mut outcomes: Vec<Outcome>,
    permission: String,
    kind: Kind,
    mode: Mode,
    title: String,
    plan: Option<String>,
) -> Evaluation {
    let strictest = outcomes
        .iter()
        .map(|o| o.action)
        .max()
        .unwrap_or(Action::Deny);
    let evaluation =
        |outcome: Outcome, question: Option<Box<Question>>, permission: String| Evaluation {
            action: outcome.action,
            source: outcome.source,
            reason: outcome.reason.into_owned(),
            rule: outcome.rule,
            question,
            permission,
            kind,
            trace: Vec::new(),
        };
    // `checks[i]` was judged `outcomes[i]`.
    let pairs = || checks.iter().zip(&outcomes);
    match strictest {
        Action::Deny | Action::Allow => {
            // For a denial, the first one; for an allow, the most specific reason.
            let rank = |source: Source| match source {
                Source::User => 0,
                Source::Grant => 1,
                Source::Rule => 2,
                _ => 3,
            };
            let index = if strictest == Action::Deny {
                // A scope denial first: it is the one no answer could lift.
                outcomes
                    .iter()
                    .position(|o| o.source == Source::Scope)
                    .or_else(|| outcomes.iter().position(|o| o.action == Action::Deny))
            } else {
                (0..outcomes.len()).min_by_key(|&i| rank(outcomes[i].source))
            };
            let all_read_only = kind == Kind::Shell
                && outcomes.len() > 1
                && pairs()
                    .all(|(check, outcome)| check.read_only && outcome.source == Source::Mode);
            match index {
                Some(_) if all_read_only => evaluation(
                    Outcome {
                        action: Action::Allow,
                        source: Source::Mode,
                        reason: format!(
                            "every simple command of `{title}` only reads, which every mode allows"
                        )
                        .into(),
                        rule: None,
                    },
                    None,
                    permission,
                ),
                Some(index) => evaluation(outcomes.swap_remove(index), None, permission),
                None => evaluation(
                    Outcome {
                        action: Action::Deny,
                        source: Source::Invalid,
                        reason: Cow::Borrowed("the call touches nothing that can be judged"),
                        rule: None,
                    },
                    None,
                    permission,
                ),
            }
        }
        Action::Ask => {
            let first = outcomes
                .iter()
                .position(|o| o.action == Action::Ask)
                .unwrap_or(0);
            let asked_permission = checks[first].permission.to_string();
            let mut patterns: Vec<String> = Vec::new();
            let asking: Vec<&Check> = pairs()
                .filter(|(check, outcome)| {
                    outcome.action == Action::Ask && check.permission == asked_permission
                })
                .map(|(check, _)| check)
                .collect();
            for check in &asking {
                push_unique(&mut patterns, &check.subject);
            }
            let mut always_options = always_options(&asking, mode);
            let widest = always_options.last().cloned().unwrap_or_default();
            let mut always = widest.patterns;
            let mut grants = widest.grants;
            let (check, outcome) = (checks.swap_remove(first), outcomes.swap_remove(first));
            let title = match check.permission.as_ref() {
                "external_directory" | "doom_loop" => check.subject.clone(),
                _ => title,
            };
            let is_plan =
                kind == Kind::ExitPlan && mode == Mode::Plan && asked_permission == permission;
            if is_plan {
                // A plan approval grants nothing: `always` switches the mode instead.
                patterns.clear();
                always.clear();
                grants.clear();
                always_options.clear();
            }
            let approve = patterns
                .iter()
                .map(|pattern| (asked_permission.clone(), pattern.clone()))
                .collect();
            let question = Question {
                permission: asked_permission,
                patterns,
                always,
                grants,
                always_options,
                approve,
                calls: Vec::new(),
                title,
                plan: if is_plan {
                    plan.or(Some(String::new()))
                } else {
                    None
                },
                reason: outcome.reason.to_string(),
            };
            evaluation(outcome, Some(Box::new(question)), permission)
        }
    }
}

/// The lists an `always` answer may grant for the asking checks, narrow to
/// wide: level `n` takes each check's `n`-th narrower pattern (its widest
/// narrower one once it has no more, its `always` when it has none), a level
/// that shows the same patterns as the one before it replaces it, and the
/// last level is every check's `always`. A bare `*` granted
/// in plan mode is a plan-only kind grant.
fn always_options(asking: &[&Check], mode: Mode) -> Vec<AlwaysOption> {
    let levels = asking
        .iter()
        .map(|check| check.narrower.len())
        .max()
        .unwrap_or(0);
    let mut options: Vec<AlwaysOption> = Vec::new();
    for level in 0..=levels {
        let mut option = AlwaysOption::default();
        for check in asking {
            // A check with fewer levels keeps its widest narrower pattern
            // until the last level, which is every check's `always`.
            let pattern = if level == levels {
                &check.always
            } else {
                check
                    .narrower
                    .get(level)
                    .or(check.narrower.last())
                    .unwrap_or(&check.always)
            };
            push_unique(&mut option.patterns, pattern.as_str());
            let spec = GrantSpec {
                permission: check.permission.to_string(),
                pattern: pattern.clone(),
                plan_only: mode == Mode::Plan
                    && pattern.literal_len() == 0
                    && pattern.as_str() == "*",
            };
            if !option.grants.contains(&spec) {
                option.grants.push(spec);
            }
        }
        push_level(&mut options, option);
    }
    options
}

/// Add the next (wider) level: one that shows the same patterns as the level
/// before it replaces it, so the last level stays what a bare `always` grants.
fn push_level(options: &mut Vec<AlwaysOption>, option: AlwaysOption) {
    if options
        .last()
        .is_some_and(|previous| same_patterns(previous, &option))
    {
        options.pop();
    }
    options.push(option);
}

/// The options of two questions asked as one (a call whose input was split
/// by [`variants`]): level by level, each side's list at that level (its
/// widest once it has no more), so the last level is the union of both
/// `always`. Empty when either side offers none.
fn merge_options(first: &[AlwaysOption], second: &[AlwaysOption]) -> Vec<AlwaysOption> {
    let (Some(last_first), Some(last_second)) = (first.last(), second.last()) else {
        return Vec::new();
    };
    let levels = first.len().max(second.len());
    let mut options: Vec<AlwaysOption> = Vec::new();
    for level in 0..levels {
        let mut option = first.get(level).unwrap_or(last_first).clone();
        let more = second.get(level).unwrap_or(last_second);
        for pattern in &more.patterns {
            push_unique(&mut option.patterns, pattern);
        }
        for grant in &more.grants {
            if !option.grants.contains(grant) {
                option.grants.push(grant.clone());
            }
        }
        push_level(&mut options, option);
    }
    options
}

/// Do two options show the same patterns (in any order)?
fn same_patterns(a: &AlwaysOption, b: &AlwaysOption) -> bool {
    a.patterns.len() == b.patterns.len() && a.patterns.iter().all(|p| b.patterns.contains(p))
}

/// Patterns narrower than `always` that an `always` on a simple check may
/// grant instead, narrow to wide: an edited file itself, then its directory
/// (`src/*`, which also covers the directories under it); a fetched URL
/// itself, then its host (`https://host/*`); any other subject itself.
fn narrower_options(kind: Kind, subject: &str, always: &GrantPattern) -> Vec<GrantPattern> {
    // Only a grant of everything (`*`) has anything narrower.
    if always.literal_len() != 0 || always.as_str() != "*" || subject == "*" {
        return Vec::new();
    }
    let mut options = vec![GrantPattern::exact(subject)];
    match kind {
        Kind::Edit => {
            if let Some((dir, _)) = subject.rsplit_once('/') {
                if !dir.is_empty() {
                    options.push(GrantPattern::prefixed(&format!("{dir}/"), "*"));
                }
            }
        }
        Kind::Fetch => {
            if let Some(host) = url_host_prefix(subject) {
                if host.len() < subject.len() {
                    options.push(GrantPattern::prefixed(host, "*"));
                }
            }
        }
        _ => {}
    }
    options
}

/// `https://host/` of an `http(s)` URL: the scheme and authority (with any
/// port) and the `/` after them; `None` when there is no `/` after the host,
/// or the authority has a user part (`https://docs.rs@evil.com/` would read
/// as docs.rs), or a `\` ends it (which browsers read as `/`).
fn url_host_prefix(url: &str) -> Option<&str> {
    let starts = |scheme: &str| {
        url.get(..scheme.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(scheme))
    };
    let scheme_len = if starts("https://") {
        8
    } else if starts("http://") {
        7
    } else {
        return None;
    };
    let rest = &url[scheme_len..];
    let end = rest.find(['/', '?', '#', '\\'])?;
    if end == 0 || rest.as_bytes()[end] != b'/' || rest[..end].contains('@') {
        return None;
    }
    url.get(..scheme_len + end + 1)
}

fn push_unique(list: &mut Vec<String>, item: &str) {
    if !list.iter().any(|existing| existing == item) {
        list.push(item.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::{narrower_options, url_host_prefix, GrantPattern, Kind};

    #[test]
    fn host_prefixes_of_urls() {
        let cases: &[(&str, Option<&str>)] = &[
            ("https://docs.rs/tokio", Some("https://docs.rs/")),
            (
                "HTTP://Example.com:8080/a?b",
                Some("HTTP://Example.com:8080/"),
            ),
            ("https://docs.rs", None),
            ("https://docs.rs?x=/y", None),
            ("https://docs.rs#/y", None),
            ("https://docs.rs\\@evil.com/x", None),
            ("https://docs.rs@evil.com/x", None),
            ("https:///x", None),
            ("ftp://host/x", None),
            ("tokio select", None),
            ("héllo wörld", None),
            ("httpsé://x/", None),
            ("http://é/x", Some("http://é/")),
        ];
        for (url, expected) in cases {
            assert_eq!(url_host_prefix(url), *expected, "{url}");
        }
    }

    #[test]
    fn narrower_patterns_of_a_subject() {
        let everything = GrantPattern::prefixed("", "*");
        let cases: &[(Kind, &str, &GrantPattern, &[&str])] = &[
            (Kind::Edit, "src/a.py", &everything, &["src/a.py", "src/*"]),
            (Kind::Edit, "a.py", &everything, &["a.py"]),
            (
                Kind::Edit,
                "/abs/dir/a.py",
                &everything,
                &["/abs/dir/a.py", "/abs/dir/*"],
            ),
            (Kind::Edit, "/a.py", &everything, &["/a.py"]),
            (
                Kind::Fetch,
                "https://docs.rs/x",
                &everything,
                &["https://docs.rs/x", "https://docs.rs/*"],
            ),
            (
                Kind::Fetch,
                "https://docs.rs/",
                &everything,
                &["https://docs.rs/"],
            ),
            (Kind::Fetch, "tokio select", &everything, &["tokio select"]),
            (Kind::Task, "general", &everything, &["general"]),
            (Kind::Other, "*", &everything, &[]),
            // Only a grant of everything has narrower options.
            (Kind::Read, ".env", &GrantPattern::exact(".env"), &[]),
        ];
        for (kind, subject, always, expected) in cases {
            let got: Vec<String> = narrower_options(*kind, subject, always)
                .iter()
                .map(|p| p.as_str().to_string())
                .collect();
            assert_eq!(got, *expected, "{kind:?} {subject}");
        }
        // The directory is a literal prefix: `[` in it is no glob.
        let dir = &narrower_options(Kind::Edit, "s[r]c/a.py", &everything)[1];
        assert!(dir.matches("s[r]c/deep/b.py"));
        assert!(!dir.matches("src/b.py"));
    }

    #[test]
    fn programs_named_by_an_expansion() {
        let cases: &[(&str, bool)] = &[
            ("$RM -rf build", true),
            ("$(which rm) -rf x", true),
            ("`which rm` x", true),
            ("${RM:-rm} x", true),
            ("eval $CMD", true),
            ("sh -c $X", true),
            ("/bin/bash -lc $X y", true),
            ("bash -c echo $HOME", false),
            ("sh -c rm $X", false),
            ("rm $X", false),
            ("ls $HOME", false),
            ("eval ls", false),
            ("echo $X", false),
        ];
        for (text, expected) in cases {
            assert_eq!(super::unknown_program(text), *expected, "{text}");
        }
    }
}
