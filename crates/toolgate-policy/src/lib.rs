//! toolgate's decision engine: modes, the tool registry, OpenCode-compatible
//! rules and grants. [`Policy::evaluate`] takes one tool call and the state of
//! its session and returns the answer (`allow`, `ask` or `deny`) together with
//! what made it: the mode, a rule (as written, with its origin), a grant or the
//! user, and a human reason.
//!
//! Tools that call tools (OpenCode's `batch`, Codex's `multi_tool_use.parallel`,
//! Claude Code's former `BatchTool`, Zed's `batch-tool`) are judged by the calls
//! they carry, each as if sent alone; the batch gets the strictest answer and one
//! question for the calls that ask ([`Question::calls`], [`Question::approve`]).
//! The shapes and limits are in [`batch`]
//! ([`is_batch`], [`MAX_CALLS`], [`MAX_DEPTH`]). A tool that calls one MCP
//! tool by name (Roo Code's `use_mcp_tool`) is judged as the call
//! `mcp__SERVER__TOOL` it makes ([`mcp_caller`]).
//!
//! The crate is pure: it does no I/O, reads no clock and no environment, and
//! knows nothing of the wire protocol. The broker owns sessions, pending
//! questions and time; it passes what a decision depends on in a [`Context`].
//!
//! ```
//! use std::path::PathBuf;
//! use serde_json::json;
//! use toolgate_policy::{Action, Call, Context, Grants, Mode, Policy, Sources};
//!
//! let (policy, _warnings) = Policy::build(Sources {
//!     project_root: PathBuf::from("/work/project"),
//!     ..Sources::default()
//! })
//! .unwrap();
//! let input = json!({"file_path": "src/main.rs", "old_string": "a", "new_string": "b"});
//! let call = Call { tool: "Edit", input: input.as_object().unwrap(), cwd: None };
//! let grants = Grants::default();
//! let plan = policy.evaluate(&call, &Context::new(Mode::Plan, &grants));
//! assert_eq!(plan.action, Action::Deny);
//! assert_eq!(plan.reason, "plan mode does not allow file edits, writes, patches, deletes and moves");
//! let ask = policy.evaluate(&call, &Context::new(Mode::Ask, &grants));
//! assert_eq!(ask.action, Action::Ask);
//! assert_eq!(ask.question.unwrap().patterns, vec!["src/main.rs".to_string()]);
//! ```
#![deny(missing_docs)]

pub mod batch;
mod config;
mod error;
mod evaluate;
mod globs;
mod grants;
pub mod lint;
pub mod mcp_caller;
mod mode;
mod names;
pub mod opencode;
mod paths;
mod reminder;
mod rules;
mod scope;
mod script_words;
mod shell_words;
mod tools;
mod wildcard;

use std::path::PathBuf;

use serde_json::{Map, Value};

pub use batch::{is_batch, AskedCall, MAX_CALLS, MAX_DEPTH};
pub use config::{
    check_read_only_agent, parse_override, PolicyFile, Sources, ToolDeclaration,
    DEFAULT_ALWAYS_AVAILABLE, DEFAULT_ASK_TIMEOUT_SECONDS, DEFAULT_READ_ONLY_AGENTS,
};
pub use error::PolicyError;
pub use evaluate::Prepared;
pub use globs::{
    has_glob_chars, segment_matches, unsupported_glob, GlobExpansion, GlobOracle, SegmentPattern,
};
pub use grants::{Grant, GrantAdded, GrantPattern, GrantSpec, Grants};
pub use mcp_caller::{is_mcp_caller, mcp_call, McpCall, MCP_CALLERS};
pub use mode::{mode_answer, Action, Kind, Mode, UnknownMode};
pub use names::OPENCODE_PERMISSIONS;
pub use paths::{normalize, RootedPath};
pub use reminder::{reminder, reminder_granted, reminder_in, tool_access, Access};
pub use rules::{Rule, Ruleset};
pub use scope::{
    regex_like, EffectiveScope, PatternSyntax, Scope, ScopeError, ScopeLayer, ScopeRefusal,
    ScopeRules, ScopeTarget, MAX_REGEX_LEN, REGEX_SIZE_LIMIT,
};
pub use tools::{
    extract, field_subjects, patch_files, variants, FieldSubject, FieldValue, Registry, ShellInput,
    Subject, SubjectField, ToolSpec, MAX_FIELD_VALUES, MCP_SUBJECT_FIELDS,
};
pub use wildcard::Wildcard;

/// The combined policy: immutable once built, cheap to share behind an `Arc`.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The mode new sessions start in (never looser than `mode_floor`).
    pub default_mode: Mode,
    /// The strictest `mode` of the managed policies, with the origin of the
    /// one that sets it: no session's calls are judged in a looser mode
    /// ([`Policy::floored`]).
    pub mode_floor: Option<(Mode, String)>,
    /// The project root, absolute and normalised.
    pub project_root: PathBuf,
    /// The home directory for `~`, when known.
    pub home: Option<PathBuf>,
    /// Tool names → permission, kind, subject.
    pub registry: Registry,
    /// Every layer's rules in order, each with its origin: the built-in
    /// defaults, the policy file's `permission`, `TOOLGATE_PERMISSION`,
    /// `--permission`, then the managed layers. The last matching rule
    /// decides, unless a managed layer asks or denies
    /// ([`Ruleset::last_match`]).
    pub rules: Ruleset,
    /// `planModeAllowedTools` that survived the writer check.
    pub plan_allowed: Vec<Wildcard>,
    /// `alwaysAvailableTools`.
    pub always_available: Vec<String>,
    /// Sub-agent types that only read (`readOnlyAgents` / `--read-only-agents`,
    /// default `Explore`, `Plan`): plan mode lets the model launch them (the
    /// `task` kind with one of these as its subject, compared exactly), and
    /// every call they make is still judged in plan mode.
    pub read_only_agents: Vec<String>,
    /// Seconds an ask waits for an answer; 0 waits forever.
    pub ask_timeout_seconds: u64,
    /// Options for shell analysis.
    pub shell: toolgate_shell::Options,
    /// Every permission of the fetch kind (`webfetch`, `websearch` and the
    /// declared fetch tools). An `always` on a fetch grants only its own
    /// permission: web fetches and web searches are separate kinds of grant.
    pub fetch_permissions: Vec<String>,
    /// Analyses of recent shell commands (run with `shell`, no `cwd`).
    pub shell_cache: ShellCache,
    /// The patterns of read rules that ask or deny for particular files: the
    /// words of shell commands that match one are checked against the read
    /// rules too.
    pub read_guards: Vec<Wildcard>,
    /// Expands shell globs on the disk (set by the binary; `None` in the pure
    /// default and tests): a glob word is then judged by its real matches, or
    /// as its literal text when it matches nothing, instead of by every guarded
    /// file it could match.
    pub glob_oracle: Option<std::sync::Arc<dyn GlobOracle>>,
    /// The project root with every symbolic link in it resolved (set by the
    /// binary with the oracle): a path that [`GlobOracle::resolve`] leads
    /// under it is inside the project.
    pub physical_root: Option<PathBuf>,
    /// Which policy this is, for [`Policy::evaluate_prepared`]: a
    /// [`Prepared`] call is taken only by the policy that prepared it.
    id: PolicyId,
}

/// A policy's identity: fresh for every policy built, and for every clone
/// (a clone may be changed before it is shared, as the binary does).
#[derive(Debug)]
struct PolicyId(u64);

impl PolicyId {
    fn fresh() -> PolicyId {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        PolicyId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl Clone for PolicyId {
    /// A clone is another policy.
    fn clone(&self) -> PolicyId {
        PolicyId::fresh()
    }
}

/// A bounded memo of shell analyses: agents run the same few commands again
/// and again (`git status`, `ls`). Analysis is a pure function of the text,
/// the policy's shell options and the answers of their repository oracle
/// (which repository git would use: a fact of the disk that can change
/// between calls). A remembered analysis is reused only after the oracle has
/// been asked every question it asked and has answered the same, so
/// remembering changes no answer; the lock is never held while analysing or
/// asking.
#[derive(Debug, Default)]
pub struct ShellCache {
    entries: std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<Analyzed>>>,
}

/// A remembered analysis and the words of its script that may name paths
/// (a pure function of the analysis, so worked out once).
#[derive(Debug)]
pub(crate) struct Analyzed {
    pub(crate) analysis: toolgate_shell::Analysis,
    pub(crate) words: script_words::KeptWords,
}

impl ShellCache {
    /// How many analyses are kept; the memo is emptied when it fills.
    pub const CAPACITY: usize = 4096;

    /// The analysis of `text`: shared, since a remembered one is handed out
    /// again without being copied.
    fn analyze(&self, text: &str, options: &toolgate_shell::Options) -> std::sync::Arc<Analyzed> {
        let lock = || {
            self.entries
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let remembered = lock().get(text).cloned();
        if let Some(analyzed) = remembered {
            let still_true = analyzed.analysis.repo_checks.iter().all(|(query, fact)| {
                options
                    .repo_oracle
                    .as_ref()
                    .is_some_and(|oracle| &oracle.repository(query) == fact)
            });
            if still_true {
                return analyzed;
            }
        }
        let analysis = toolgate_shell::analyze(toolgate_shell::Script::Text(text), options);
        let words = script_words::KeptWords::keep(&script_words::script_words(&analysis.commands));
        let analysis = std::sync::Arc::new(Analyzed { analysis, words });
        // Long scripts are rare repeats and would make the memo large.
        if text.len() <= 1024 {
            let mut entries = lock();
            if entries.len() >= Self::CAPACITY {
                entries.clear();
            }
            entries.insert(text.to_string(), analysis.clone());
        }
        analysis
    }
}

impl Clone for ShellCache {
    /// A clone starts with an empty memo.
    fn clone(&self) -> ShellCache {
        ShellCache::default()
    }
}

/// One tool call, as the policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The tool name as the agent sent it.
    pub tool: &'a str,
    /// The tool's input.
    pub input: &'a Map<String, Value>,
    /// The working directory the agent reported.
    pub cwd: Option<&'a str>,
}

static NO_GRANTS: Grants = Grants::EMPTY;
static NO_SCOPE: Scope = Scope::NONE;

/// What a decision depends on besides the call: the session's state.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The session's mode.
    pub mode: Mode,
    /// The session's grants.
    pub grants: &'a Grants,
    /// Grants kept for every session of the project.
    pub project_grants: &'a Grants,
    /// The session's scope: its own narrowing and every ancestor's.
    pub scope: &'a Scope,
    /// `(permission, subject)` pairs the user allowed `once` for this very call.
    pub approvals: &'a [(String, String)],
    /// How many times in a row the session has made this exact call, this one included.
    pub repeats: u32,
    /// Record the whole way to the answer in [`Evaluation::trace`].
    pub explain: bool,
    /// The time on the broker's wall clock (ms since the Unix epoch) at
    /// which grants are judged: a grant whose lifetime is over covers
    /// nothing. `None` (no clock): a grant with a lifetime covers nothing.
    pub now: Option<u64>,
}

impl<'a> Context<'a> {
    /// A context with no approvals and no repeats.
    pub fn new(mode: Mode, grants: &'a Grants) -> Context<'a> {
        Context {
            mode,
            grants,
            project_grants: &NO_GRANTS,
            scope: &NO_SCOPE,
            approvals: &[],
            repeats: 1,
            explain: false,
            now: None,
        }
    }
}

/// What made a decision (the policy's half of the wire `source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The mode table.
    Mode,
    /// A configured rule.
    Rule,
    /// A grant.
    Grant,
    /// The user's `once` for this call.
    User,
    /// The session's scope.
    Scope,
    /// The call's input is unusable.
    Invalid,
}

/// A rule or grant as written, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleRef {
    /// The permission name (pattern) as written.
    pub permission: String,
    /// The subject pattern as written.
    pub pattern: String,
    /// The action.
    pub action: Action,
    /// A file path, `--permission`, `TOOLGATE_PERMISSION`, `built-in`,
    /// `grant`, or `managed:PATH` for a managed layer's rule.
    pub origin: String,
    /// A managed layer's rule: its deny and ask are final.
    pub managed: bool,
    /// For a grant with a lifetime: when it ends (ms since the Unix epoch).
    pub expires_at: Option<u64>,
}

/// A question to put to the user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Question {
    /// The permission asked about (`bash`, `edit`, `external_directory`, ...).
    pub permission: String,
    /// The concrete things asked about.
    pub patterns: Vec<String>,
    /// What an `always` answer grants, as shown to the user.
    pub always: Vec<String>,
    /// The grants an `always` answer records.
    pub grants: Vec<GrantSpec>,
    /// What an `always` answer may grant instead, narrow to wide; the last is
    /// `always` with `grants`. Empty means only `always` is offered (a batch).
    /// See [`Question::options`].
    pub always_options: Vec<AlwaysOption>,
    /// What a `once` (or `always`) answer approves for this very call:
    /// `(permission, subject)` pairs, passed back in [`Context::approvals`].
    pub approve: Vec<(String, String)>,
    /// For a batch: each call inside it that asks (empty otherwise).
    pub calls: Vec<AskedCall>,
    /// The command, path or URL.
    pub title: String,
    /// For a plan approval: the plan text.
    pub plan: Option<String>,
    /// Why the question is asked.
    pub reason: String,
    /// When a managed rule asks it: that rule, as a reason names it. Such a
    /// question is put every time: it offers no `always` (`always`,
    /// `grants` and `always_options` are empty), and an `always` answer
    /// counts as `once`.
    pub managed: Option<String>,
}

/// One list of patterns an `always` answer may grant, with the grants it records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AlwaysOption {
    /// The patterns, as shown to the user.
    pub patterns: Vec<String>,
    /// The grants recorded when this option is chosen.
    pub grants: Vec<GrantSpec>,
}

impl Question {
    /// The lists an `always` answer may grant, narrow to wide; the last is
    /// what a bare `always` grants. None for a plan approval (its `always`
    /// changes the mode) or a question whose `always` grants nothing.
    pub fn options(&self) -> Vec<AlwaysOption> {
        if self.plan.is_some() || self.always.is_empty() {
            return Vec::new();
        }
        let widest = AlwaysOption {
            patterns: self.always.clone(),
            grants: self.grants.clone(),
        };
        match self.always_options.last() {
            Some(last) if *last == widest => self.always_options.clone(),
            _ => vec![widest],
        }
    }
}

/// The answer for one call, with its full provenance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    /// `Allow`, `Ask` (see `question`) or `Deny`.
    pub action: Action,
    /// What decided.
    pub source: Source,
    /// One human sentence.
    pub reason: String,
    /// The rule or grant that decided, when one did.
    pub rule: Option<RuleRef>,
    /// The question, when `action` is `Ask`.
    pub question: Option<Box<Question>>,
    /// The permission name of the tool.
    pub permission: String,
    /// The kind of the tool.
    pub kind: Kind,
    /// With [`Context::explain`]: how each thing the call touches was
    /// judged, in the order judged (empty otherwise, and for a call refused
    /// before anything was judged: then the answer above is the whole way).
    pub trace: Vec<CheckTrace>,
}

/// How one thing a call touches (a simple command, a path, a directory
/// outside the project, a repeated call) was judged: a step of
/// [`Evaluation::trace`]. The call's answer is the strictest step's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckTrace {
    /// The permission judged (`bash`, `edit`, `external_directory`, ...).
    pub permission: String,
    /// What rules were matched against: the command, the path, the URL.
    pub subject: String,
    /// Further texts rules were matched against to tighten the answer (the
    /// command after wrapper removal, the commands of a `bash -c` script).
    pub inner: Vec<String>,
    /// For a simple command: `None` when it only reads, else why it is not
    /// read-only. `None` for other steps too (see `command`).
    pub not_read_only: Option<String>,
    /// Whether this step is a simple command of a shell script.
    pub command: bool,
    /// The mode table's answer for this step, and why.
    pub mode_action: Action,
    /// Why the mode answers so.
    pub mode_reason: String,
    /// Every rule whose permission and pattern match the subject or an
    /// inner text, in the order the policy lists them (later wins): the
    /// winner and the ones that lost.
    pub matched: Vec<(RuleRef, String)>,
    /// What an `always` for this step grants.
    pub always: String,
    /// The step's answer.
    pub action: Action,
    /// What decided the step.
    pub source: Source,
    /// Why, in one sentence.
    pub reason: String,
    /// The rule or grant that decided the step, if one did.
    pub rule: Option<RuleRef>,
    /// For a tool whose subject is read from named fields of its input (a
    /// `subject` declaration, or the MCP default): where this step's
    /// subject came from. `None` for every other step.
    pub origin: Option<SubjectOrigin>,
    /// For a step of an MCP call made through a tool that calls one by name
    /// ([`mcp_caller`]): that tool's permission (`use_mcp_tool`) and the
    /// MCP tool's name (`mcp__SERVER__TOOL`), which its rules were matched
    /// against (a deny or ask among them tightens). `None` otherwise.
    pub via: Option<(String, String)>,
}

/// Where a step's subject came from, for a tool whose subject is read from
/// named fields of its input: the fields of a `subject` declaration in the
/// policy's `tools`, or [`MCP_SUBJECT_FIELDS`] for an MCP tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectOrigin {
    /// The fields the subject is read from, in order.
    pub fields: Vec<String>,
    /// True when a `subject` declaration names them, false for the MCP default.
    pub declared: bool,
    /// The field this step's subject was read from; `None` when the input
    /// gives none of the fields.
    pub field: Option<String>,
    /// How the subject was matched.
    pub read: SubjectRead,
}

/// How a subject read from a field was matched (see [`FieldValue`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubjectRead {
    /// As written.
    Text,
    /// As a path, relative to the project root.
    Path,
    /// As a shell command: one step per simple command.
    Command,
    /// Not at all: the input gives none of the fields, or gives one that is
    /// not text (the reason). The step is matched as `*`, and every deny or
    /// ask rule of the permission may match it.
    Unknown(String),
}
