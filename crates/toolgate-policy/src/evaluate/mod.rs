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
//!    the mode's allow or ask, unless a managed layer's own last match asks
//!    or denies and is at least as strict, which then decides;
//! 4. tightening passes, which only ever make the answer stricter: a read rule
//!    a shell word reaches, the command after wrapper removal or inside
//!    `bash -c`, and for a command whose program cannot be known (or a call
//!    that gives none of its subject fields, see [`crate::SubjectRead`]) the
//!    strictest deny or ask rule that can still decide for the permission;
//! 5. a deny is final from here on; `readonly` turns an ask into a denial;
//! 6. a `once` for this call turns an ask into allow, and so does a session
//!    grant or a project grant unless a managed rule asks (its question is
//!    put every time);
//! 7. `auto` allows what would still ask, unless the rule that asks was
//!    written by the user (policy file, override or managed policy) or is the
//!    built-in doom-loop guard: `auto` lifts its own questions and the other
//!    built-in defaults' (`.env`, `external_directory`), never the user's.
//!
//! The session's mode is first held to the managed floor
//! ([`Policy::floored`]), and a question a managed rule asks offers no
//! `always` ([`crate::Question::managed`]).
//!
//! The call's answer is the strictest check's.
//!
//! The work is split by job. `prepare` turns a call into its checks (the
//! tool's subject and paths, the shell analysis), `words` finds the checks
//! for the paths a script's words name, and `disk` asks the disk where
//! links lead and what globs match; all of that is what the policy decides
//! alone. `session` finishes a prepared call in the session's state,
//! `judge` answers one check, and `answer` makes the call's answer, its
//! question and its trace from the checks and their answers.

mod answer;
mod disk;
mod judge;
mod prepare;
mod session;
mod words;

use std::borrow::Cow;

use crate::grants::GrantPattern;
use crate::mode::{Action, Kind, Mode};
use crate::paths::RootedPath;
use crate::rules::Rule;
use crate::shell_words::Reach;
use crate::{Call, Context, Evaluation, Policy, RuleRef, Source, SubjectOrigin};

/// One thing a call touches, to be judged on its own.
#[derive(Clone)]
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
    /// Where the subject came from, for a tool whose subject is read from
    /// named fields; an unknown one ([`crate::SubjectRead::Unknown`]) meets every
    /// deny or ask rule of the permission, as `runs_unknown` does.
    origin: Option<Box<SubjectOrigin>>,
    /// For a check of an MCP call made through a tool that calls one by
    /// name (`use_mcp_tool`, see [`crate::mcp_caller`]): that tool's
    /// permission and the MCP tool's name, which its rules are matched
    /// against to tighten the answer.
    via: Option<Box<Via>>,
}

/// The tool an MCP call was made through, as a check of that call meets
/// its rules: a deny or ask among them tightens, an allow loosens nothing.
#[derive(Clone)]
struct Via {
    /// The calling tool's permission (`use_mcp_tool`).
    permission: String,
    /// The MCP tool's name (`mcp__SERVER__TOOL`), the subject its rules see.
    name: String,
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
/// ([`Policy::prepare`]), for [`Policy::evaluate_prepared`]. A clone is
/// the same judgement: a caller that meets the same call again (the same
/// tool, input and working directory, under the same policy, with the disk
/// as it was) may reuse it.
#[derive(Clone)]
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

#[derive(Clone)]
enum Body {
    /// A tool that calls tools: judged through its calls when evaluated.
    Batch,
    /// A tool that calls one MCP tool by name (`use_mcp_tool`): judged as
    /// that call once the calling tool has passed the session's scope.
    Calls(Box<Calls>),
    /// Unusable input: denied, once the scope has had its say.
    Invalid {
        permission: String,
        kind: Kind,
        reason: String,
    },
    /// An input split by [`variants`](crate::tools::variants): each judged
    /// as if sent alone.
    Each {
        permission: String,
        kind: Kind,
        each: Vec<(serde_json::Map<String, serde_json::Value>, Prepared)>,
    },
    Ready(Box<Ready>),
}

/// The MCP call a `use_mcp_tool` call makes, prepared as that call.
#[derive(Clone)]
struct Calls {
    /// The calling tool's permission, for the session's scope.
    permission: String,
    /// The MCP tool's name (`mcp__SERVER__TOOL`).
    tool: String,
    /// Its input: the call's `arguments`.
    input: serde_json::Map<String, serde_json::Value>,
    /// The MCP call, prepared; each check of its own permission carries
    /// [`Check::via`].
    body: Body,
}

impl Body {
    /// An MCP call made through `via`: each check of the MCP tool's own
    /// permission (not `external_directory`, not a read a word reaches)
    /// meets `via`'s rules too.
    fn called_via(&mut self, via: &Via) {
        match self {
            Body::Ready(ready) => {
                for check in &mut ready.checks {
                    if check.permission == ready.permission {
                        check.via = Some(Box::new(via.clone()));
                    }
                }
            }
            Body::Each { each, .. } => {
                for (_, prepared) in each {
                    prepared.body.called_via(via);
                }
            }
            Body::Calls(calls) => calls.body.called_via(via),
            Body::Batch | Body::Invalid { .. } => {}
        }
    }
}

/// The checks of a call, without what the session decides.
#[derive(Clone)]
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
    /// A file, or a directory the files directly in which are in scope (a
    /// path read from a field of a tool whose input toolgate does not know).
    Path,
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
        self.settled(call, prepared, context)
    }

    /// [`Policy::finish`] in the session's mode held to the managed floor
    /// ([`Policy::mode_floor`]), with a managed question's `always` taken
    /// away (see [`crate::Question::managed`]).
    fn settled(&self, call: &Call<'_>, prepared: Prepared, context: &Context<'_>) -> Evaluation {
        let context = Context {
            mode: self.floored(context.mode),
            ..*context
        };
        let mut evaluation = self.finish(call, prepared, &context);
        if let Some(question) = evaluation.question.as_deref_mut() {
            if question.managed.is_some() {
                question.always.clear();
                question.grants.clear();
                question.always_options.clear();
                for asked in &mut question.calls {
                    asked.always.clear();
                }
            }
        }
        evaluation
    }

    /// `mode`, or the managed floor where that is stricter: the mode a
    /// session's calls are judged in.
    pub fn floored(&self, mode: Mode) -> Mode {
        match &self.mode_floor {
            Some((floor, _)) if floor.strictness() > mode.strictness() => *floor,
            _ => mode,
        }
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
        self.settled(call, prepared, context)
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
        origin: None,
        via: None,
    }
}
