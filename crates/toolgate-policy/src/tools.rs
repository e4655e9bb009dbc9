//! The tool registry: every tool name an agent may send, mapped to the
//! permission name rules are written for, the kind of thing it does, and
//! where in its input the subject (command, path, URL) is.
//!
//! What the agent will run is what is judged, so every field any supported
//! agent's tool of that name reads is read:
//!
//! - paths: every one of [`PATH_FIELDS`] at any depth (`files[].path`,
//!   `edits[].filePath`), `paths`/`file_paths` lists, and `include` for
//!   `read_many_files`: several paths are several subjects;
//! - commands: `command` and `cmd`; given both, differently, each is judged
//!   ([`variants`]); Codex's `shell` names the program that runs the string
//!   (`[shell, "-lc" or "-c", cmd]`, `login` false gives `-c`), so a program
//!   that is not a shell toolgate reads is judged as what it is;
//! - the directory a shell command runs in: [`WORKDIR_FIELDS`];
//! - fields that make a shell call more than its command, so never read-only:
//!   background runs, `tty` sessions, `env`, `user` ([`not_read_only_field`]);
//! - for a tool of unknown kind, every path-like and command-like field, which
//!   a session's scope holds against its patterns ([`unknown_fields`]);
//! - for a tool whose policy declaration names its `subject` fields, and for
//!   an MCP tool ([`MCP_SUBJECT_FIELDS`]), each of those fields that the
//!   input gives ([`SubjectField::Declared`], [`SubjectField::McpDefault`]).

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::mode::Kind;

/// Where a tool's subject lives in its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubjectField {
    /// `command` (string or argv array) or `cmd`.
    Shell,
    /// One path: `file_path`, `filePath`, `path`, `absolute_path`, `notebook_path`.
    Path,
    /// A path when the input has one (as [`SubjectField::Path`]), else no
    /// subject: the tools a policy declares, whose input fields are not known.
    OptionalPath,
    /// Several paths: `paths` or `file_paths` (arrays), else one path.
    Paths,
    /// A patch (`input`, `patch`, `patchText`, `command`): every file it touches.
    Patch,
    /// `url`, else `query`.
    Url,
    /// A search: the `pattern` (or `query`) is the subject, `path` is checked for leaving the root.
    Search,
    /// A sub-agent: `subagent_type`, else `description`.
    Agent,
    /// Plan approval: the plan text in `plan`.
    Plan,
    /// The fields a `subject` declaration names ([`ToolSpec::fields`]):
    /// each one the input gives is a subject ([`Subject::Fields`]).
    Declared,
    /// An MCP tool's (`mcp__SERVER__TOOL`) default: each of
    /// [`MCP_SUBJECT_FIELDS`] the input gives is a subject.
    McpDefault,
    /// No subject: rules match it as `*`.
    None,
}

/// The fields an MCP tool's subject is read from when no declaration names
/// them: each one the input gives is a subject, judged on its own.
pub const MCP_SUBJECT_FIELDS: &[&str] = &["name", "command", "path", "url"];

/// The most values one subject field may give (an array of names): beyond
/// them the field is unreadable, and judged as such.
pub const MAX_FIELD_VALUES: usize = 64;

/// Is `name` an MCP tool's name as the agents write it (`mcp__SERVER__TOOL`)?
pub(crate) fn is_mcp(name: &str) -> bool {
    name.starts_with("mcp__") && name.len() > "mcp__".len()
}

/// What the registry knows of a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSpec {
    /// The permission name rules are keyed by (`bash`, `edit`, `read`, an MCP name, ...).
    pub permission: String,
    /// The row of the mode table.
    pub kind: Kind,
    /// Where the subject is.
    pub subject: SubjectField,
    /// True when the tool was found in the registry (built in or declared).
    pub known: bool,
    /// For [`SubjectField::Declared`]: the fields the policy names, in
    /// order, each a key or a dotted path into nested objects (`args.name`).
    /// Empty otherwise.
    pub fields: Vec<String>,
}

impl ToolSpec {
    /// The fields the subject is read from when it is read from named
    /// fields ([`SubjectField::Declared`], [`SubjectField::McpDefault`]);
    /// empty for every other tool.
    pub fn subject_fields(&self) -> Vec<&str> {
        match self.subject {
            SubjectField::Declared => self.fields.iter().map(String::as_str).collect(),
            SubjectField::McpDefault => MCP_SUBJECT_FIELDS.to_vec(),
            _ => Vec::new(),
        }
    }
}

/// One built-in tool: name, permission, kind, subject.
type Builtin = (&'static str, &'static str, Kind, SubjectField);

/// Built-in tools, agent by agent. A name two agents share (`glob`) is listed once.
const BUILTIN: &[(&str, &[Builtin])] = &[
    ("Claude Code", CLAUDE_CODE),
    ("OpenCode", OPENCODE),
    ("Codex", CODEX),
    ("Gemini CLI and qwen-code", GEMINI),
];

/// Tools each agent has besides the ones above, and Roo Code's (Kilo Code
/// and Cline share most names). They are classified like the others but not
/// shown as examples in the mode reminder, which stays as it was.
const MORE: &[(&str, &[Builtin])] = &[
    ("Claude Code", CLAUDE_CODE_MORE),
    ("OpenCode", OPENCODE_MORE),
    ("Codex", CODEX_MORE),
    ("Gemini CLI and qwen-code", GEMINI_MORE),
    ("Roo Code, Kilo Code and Cline", ROO_CODE),
    ("GitHub Copilot CLI", COPILOT_CLI),
];

const CLAUDE_CODE: &[Builtin] = &[
    ("Read", "read", Kind::Read, SubjectField::Path),
    ("Edit", "edit", Kind::Edit, SubjectField::Path),
    ("MultiEdit", "edit", Kind::Edit, SubjectField::Path),
    ("Write", "edit", Kind::Edit, SubjectField::Path),
    ("NotebookEdit", "edit", Kind::Edit, SubjectField::Path),
    ("Bash", "bash", Kind::Shell, SubjectField::Shell),
    ("Grep", "grep", Kind::Search, SubjectField::Search),
    ("Glob", "glob", Kind::Search, SubjectField::Search),
    ("LS", "list", Kind::List, SubjectField::Path),
    ("WebFetch", "webfetch", Kind::Fetch, SubjectField::Url),
    ("WebSearch", "websearch", Kind::Fetch, SubjectField::Url),
    ("Task", "task", Kind::Task, SubjectField::Agent),
    ("TodoWrite", "todowrite", Kind::Think, SubjectField::None),
    (
        "ExitPlanMode",
        "exit_plan_mode",
        Kind::ExitPlan,
        SubjectField::Plan,
    ),
];

const OPENCODE: &[Builtin] = &[
    ("read", "read", Kind::Read, SubjectField::Path),
    ("edit", "edit", Kind::Edit, SubjectField::Path),
    ("write", "edit", Kind::Edit, SubjectField::Path),
    ("patch", "edit", Kind::Edit, SubjectField::Patch),
    ("multiedit", "edit", Kind::Edit, SubjectField::Path),
    ("bash", "bash", Kind::Shell, SubjectField::Shell),
    ("glob", "glob", Kind::Search, SubjectField::Search),
    ("grep", "grep", Kind::Search, SubjectField::Search),
    ("list", "list", Kind::List, SubjectField::Path),
    ("webfetch", "webfetch", Kind::Fetch, SubjectField::Url),
    ("websearch", "websearch", Kind::Fetch, SubjectField::Url),
    ("task", "task", Kind::Task, SubjectField::Agent),
    ("todowrite", "todowrite", Kind::Think, SubjectField::None),
    ("todoread", "todoread", Kind::Think, SubjectField::None),
    ("question", "question", Kind::Think, SubjectField::None),
];

const CODEX: &[Builtin] = &[
    ("shell", "bash", Kind::Shell, SubjectField::Shell),
    ("exec_command", "bash", Kind::Shell, SubjectField::Shell),
    ("local_shell", "bash", Kind::Shell, SubjectField::Shell),
    ("apply_patch", "edit", Kind::Edit, SubjectField::Patch),
];

// Gemini CLI's `glob` is OpenCode's.
const GEMINI: &[Builtin] = &[
    ("read_file", "read", Kind::Read, SubjectField::Path),
    ("read_many_files", "read", Kind::Read, SubjectField::Paths),
    ("write_file", "edit", Kind::Edit, SubjectField::Path),
    ("replace", "edit", Kind::Edit, SubjectField::Path),
    (
        "run_shell_command",
        "bash",
        Kind::Shell,
        SubjectField::Shell,
    ),
    (
        "search_file_content",
        "grep",
        Kind::Search,
        SubjectField::Search,
    ),
    ("list_directory", "list", Kind::List, SubjectField::Path),
    ("web_fetch", "webfetch", Kind::Fetch, SubjectField::Url),
    (
        "google_web_search",
        "websearch",
        Kind::Fetch,
        SubjectField::Url,
    ),
    // save_memory appends to a memory file outside the project: a writer.
    ("save_memory", "save_memory", Kind::Edit, SubjectField::None),
    (
        "exit_plan_mode",
        "exit_plan_mode",
        Kind::ExitPlan,
        SubjectField::Plan,
    ),
];

const CLAUDE_CODE_MORE: &[Builtin] = &[
    // The sub-agent tool's current name.
    ("Agent", "task", Kind::Task, SubjectField::Agent),
    ("NotebookRead", "read", Kind::Read, SubjectField::Path),
    (
        "AskUserQuestion",
        "question",
        Kind::Think,
        SubjectField::None,
    ),
    // Reads what a background shell printed.
    ("BashOutput", "BashOutput", Kind::Think, SubjectField::None),
    // End a background shell: they change the state of a process.
    ("KillShell", "KillShell", Kind::Execute, SubjectField::None),
    ("KillBash", "KillBash", Kind::Execute, SubjectField::None),
    // Expands a slash command, whose text can run commands.
    (
        "SlashCommand",
        "SlashCommand",
        Kind::Execute,
        SubjectField::None,
    ),
    // Claude Code 2.1: loads a skill, whose text can run commands (as a
    // slash command's can); schedules the agent's own next turn; runs a
    // workflow of further steps. None of them is shown to be read-only.
    ("Skill", "skill", Kind::Execute, SubjectField::None),
    (
        "ScheduleWakeup",
        "ScheduleWakeup",
        Kind::Execute,
        SubjectField::None,
    ),
    ("Workflow", "Workflow", Kind::Execute, SubjectField::None),
    // Lists agents, reports a sub-agent's findings to its parent, looks up
    // deferred tool definitions: the conversation only.
    ("ListAgents", "ListAgents", Kind::Think, SubjectField::None),
    (
        "ReportFindings",
        "ReportFindings",
        Kind::Think,
        SubjectField::None,
    ),
    ("ToolSearch", "tool_search", Kind::Think, SubjectField::None),
];

const OPENCODE_MORE: &[Builtin] = &[
    // A web search for code.
    ("codesearch", "websearch", Kind::Fetch, SubjectField::Url),
];

const CODEX_MORE: &[Builtin] = &[
    ("shell_command", "bash", Kind::Shell, SubjectField::Shell),
    // Types into a running process: whatever that process does with it, it does.
    (
        "write_stdin",
        "write_stdin",
        Kind::Execute,
        SubjectField::None,
    ),
    ("view_image", "read", Kind::Read, SubjectField::Path),
    ("list_dir", "list", Kind::List, SubjectField::Path),
    ("grep_files", "grep", Kind::Search, SubjectField::Search),
    ("update_plan", "todowrite", Kind::Think, SubjectField::None),
    // Codex 0.169: asks the user, keeps the session's goal, looks up tools.
    (
        "request_user_input",
        "question",
        Kind::Think,
        SubjectField::None,
    ),
    ("get_goal", "todoread", Kind::Think, SubjectField::None),
    ("create_goal", "todowrite", Kind::Think, SubjectField::None),
    ("update_goal", "todowrite", Kind::Think, SubjectField::None),
    (
        "tool_search",
        "tool_search",
        Kind::Think,
        SubjectField::None,
    ),
];

// Gemini CLI's and qwen-code's.
const GEMINI_MORE: &[Builtin] = &[
    ("smart_edit", "edit", Kind::Edit, SubjectField::Path),
    ("web_search", "websearch", Kind::Fetch, SubjectField::Url),
    ("write_todos", "todowrite", Kind::Think, SubjectField::None),
    ("todo_write", "todowrite", Kind::Think, SubjectField::None),
    // Gemini CLI 0.61 and qwen-code 0.15.
    ("grep_search", "grep", Kind::Search, SubjectField::Search),
    ("invoke_agent", "task", Kind::Task, SubjectField::Agent),
    ("agent", "task", Kind::Task, SubjectField::Agent),
    // Skills: their text can run commands (see Claude Code's `Skill`).
    ("activate_skill", "skill", Kind::Execute, SubjectField::None),
    ("skill", "skill", Kind::Execute, SubjectField::None),
    // Background processes: listing them and reading their output changes
    // nothing; stopping one, or watching one with `monitor` (which keeps a
    // process running), does.
    (
        "list_background_processes",
        "list_background_processes",
        Kind::Think,
        SubjectField::None,
    ),
    (
        "read_background_output",
        "read_background_output",
        Kind::Think,
        SubjectField::None,
    ),
    ("task_stop", "task_stop", Kind::Execute, SubjectField::None),
    ("monitor", "monitor", Kind::Execute, SubjectField::None),
    // The conversation only: the topic, a message to another agent (which is
    // gated on its own), entering plan mode (stricter, never looser). Their
    // `tool_search` is Codex's entry.
    (
        "update_topic",
        "update_topic",
        Kind::Think,
        SubjectField::None,
    ),
    (
        "send_message",
        "send_message",
        Kind::Think,
        SubjectField::None,
    ),
    (
        "enter_plan_mode",
        "enter_plan_mode",
        Kind::Think,
        SubjectField::None,
    ),
];

// Roo Code's tools; `read_file` is Gemini CLI's entry, which reads Roo's
// `path` and `files[].path` too.
const ROO_CODE: &[Builtin] = &[
    ("write_to_file", "edit", Kind::Edit, SubjectField::Path),
    ("apply_diff", "edit", Kind::Edit, SubjectField::Path),
    ("insert_content", "edit", Kind::Edit, SubjectField::Path),
    ("search_and_replace", "edit", Kind::Edit, SubjectField::Path),
    ("replace_in_file", "edit", Kind::Edit, SubjectField::Path),
    ("edit_file", "edit", Kind::Edit, SubjectField::Path),
    ("generate_image", "edit", Kind::Edit, SubjectField::Path),
    ("execute_command", "bash", Kind::Shell, SubjectField::Shell),
    // Zed's shell tool (also what its `batch-tool` carries).
    ("terminal", "bash", Kind::Shell, SubjectField::Shell),
    ("search_files", "grep", Kind::Search, SubjectField::Search),
    (
        "codebase_search",
        "grep",
        Kind::Search,
        SubjectField::Search,
    ),
    ("list_files", "list", Kind::List, SubjectField::Path),
    (
        "list_code_definition_names",
        "list",
        Kind::List,
        SubjectField::Path,
    ),
    ("browser_action", "webfetch", Kind::Fetch, SubjectField::Url),
    ("new_task", "task", Kind::Task, SubjectField::Agent),
    (
        "run_slash_command",
        "run_slash_command",
        Kind::Execute,
        SubjectField::None,
    ),
    (
        "ask_followup_question",
        "question",
        Kind::Think,
        SubjectField::None,
    ),
    (
        "update_todo_list",
        "todowrite",
        Kind::Think,
        SubjectField::None,
    ),
    (
        "fetch_instructions",
        "fetch_instructions",
        Kind::Think,
        SubjectField::None,
    ),
    (
        "plan_mode_respond",
        "question",
        Kind::Think,
        SubjectField::None,
    ),
    // Reports the task done, and may carry a `command` that Roo runs to show
    // the result: never read-only (in a scope, its command fields are checked
    // as an unknown tool's are).
    (
        "attempt_completion",
        "attempt_completion",
        Kind::Execute,
        SubjectField::None,
    ),
    // Switches Roo's mode (to `code`, say): a way out of a restricted mode,
    // so never read-only.
    (
        "switch_mode",
        "switch_mode",
        Kind::Execute,
        SubjectField::None,
    ),
];

// GitHub Copilot CLI's file viewer and file creator (`path`); its `bash` and
// `edit` are the entries above.
const COPILOT_CLI: &[Builtin] = &[
    ("view", "read", Kind::Read, SubjectField::Path),
    ("create", "edit", Kind::Edit, SubjectField::Path),
];

/// The tools the reminder takes examples from, with their agent's index.
fn example_builtins() -> impl Iterator<Item = (usize, &'static Builtin)> {
    BUILTIN
        .iter()
        .enumerate()
        .flat_map(|(agent, (_, tools))| tools.iter().map(move |tool| (agent, tool)))
}

/// Every built-in tool.
fn builtins() -> impl Iterator<Item = &'static Builtin> {
    BUILTIN
        .iter()
        .chain(MORE)
        .flat_map(|(_, tools)| tools.iter())
}

/// Maps tool names to [`ToolSpec`]s: the built-in table plus the policy's `tools`.
#[derive(Debug, Clone)]
pub struct Registry {
    /// Looked up once per call: a fast hasher (foldhash, seeded per process).
    tools: HashMap<String, ToolSpec, foldhash::fast::RandomState>,
    /// Names declared by the policy that are not built in, in declaration order.
    declared: Vec<String>,
}

impl Default for Registry {
    /// The built-in tools.
    fn default() -> Registry {
        let tools = builtins()
            .map(|(name, permission, kind, subject)| {
                (
                    (*name).to_string(),
                    ToolSpec {
                        permission: (*permission).to_string(),
                        kind: *kind,
                        subject: *subject,
                        known: true,
                        fields: Vec::new(),
                    },
                )
            })
            .collect();
        Registry {
            tools,
            declared: Vec::new(),
        }
    }
}

impl Registry {
    /// Every built-in tool name, in table order (Claude Code, OpenCode, Codex,
    /// Gemini CLI and qwen-code, then each one's further tools and Roo Code's),
    /// each once. Every one has an explicit kind:
    /// none of them is [`Kind::Other`].
    pub fn builtin_names() -> impl Iterator<Item = &'static str> {
        builtins().map(|(name, ..)| *name)
    }

    /// Every tool this registry knows: those the policy declared first, then
    /// the built-in ones, each once.
    pub fn names(&self) -> Vec<String> {
        let mut names = self.declared.clone();
        for name in Registry::builtin_names() {
            if !self.declared.iter().any(|declared| declared == name) {
                names.push(name.to_string());
            }
        }
        names
    }

    /// A few tool names of `kind`, to show a model which of its tools a line of
    /// the reminder means, and whether more exist. Taken from this registry (so a
    /// declared tool counts, and a built-in the policy redeclared as another kind
    /// does not): tools declared by the policy first, then each agent's tools in
    /// turn so every agent's spelling is represented, skipping spellings that
    /// differ only in case (`Bash`, `bash`). At most `max` names, in table order.
    pub fn examples(&self, kind: Kind, max: usize) -> (Vec<&str>, bool) {
        self.examples_of(kind, None, max)
    }

    /// As [`Registry::examples`], only tools of `kind` with `permission` when given.
    pub fn examples_of(
        &self,
        kind: Kind,
        permission: Option<&str>,
        max: usize,
    ) -> (Vec<&str>, bool) {
        let of_kind = |name: &str| {
            self.tools.get(name).is_some_and(|spec| {
                spec.kind == kind && permission.is_none_or(|p| spec.permission == p)
            })
        };
        // One list per source: the policy's, then one per agent.
        let mut sources: Vec<Vec<&str>> = vec![Vec::new(); BUILTIN.len() + 1];
        let mut seen: Vec<String> = Vec::new();
        let declared = self.declared.iter().map(|name| (0, name.as_str()));
        let builtin = example_builtins().map(|(agent, (name, ..))| (agent + 1, *name));
        for (source, name) in declared.chain(builtin) {
            let folded = name.to_lowercase();
            if of_kind(name) && !seen.contains(&folded) {
                seen.push(folded);
                sources[source].push(name);
            }
        }
        let total = seen.len();
        let mut picked: Vec<&str> = Vec::new();
        let mut round = 0;
        while picked.len() < max.min(total) {
            for source in &sources {
                if let Some(name) = source.get(round) {
                    if picked.len() < max {
                        picked.push(name);
                    }
                }
            }
            round += 1;
        }
        // Back into table order: the policy's, then each agent's.
        let order: Vec<&str> = sources.concat();
        picked.sort_by_key(|name| order.iter().position(|n| n == name));
        (picked, total > max)
    }

    /// Every tool the registry knows, with its spec: the built-in ones in table
    /// order (as the policy may have redeclared them), then the ones only the
    /// policy declares.
    pub fn known<'a>(&'a self) -> impl Iterator<Item = (&'a str, &'a ToolSpec)> {
        let builtin = Registry::builtin_names().map(|name| -> &'a str { name });
        let declared = self.declared.iter().map(String::as_str);
        builtin
            .chain(declared)
            .filter_map(move |name| self.tools.get_key_value(name))
            .map(|(name, spec)| (name.as_str(), spec))
    }

    /// Add or override a tool (`tools` in the policy file). `subject`, when
    /// given, names the fields its subject is read from (the policy file
    /// allows it for the kinds `execute`, `other` and `think`, whose input
    /// toolgate does not otherwise read; an empty list: no subject); without
    /// it an MCP tool of such a kind keeps the MCP default
    /// ([`MCP_SUBJECT_FIELDS`]).
    pub fn declare(
        &mut self,
        name: &str,
        kind: Kind,
        permission: Option<&str>,
        subject: Option<&[String]>,
    ) {
        let (subject, fields) = match subject {
            Some([]) => (SubjectField::None, Vec::new()),
            Some(fields) => (SubjectField::Declared, fields.to_vec()),
            None => {
                let subject = match kind {
                    Kind::Read | Kind::Edit | Kind::List => SubjectField::OptionalPath,
                    Kind::Search => SubjectField::Search,
                    Kind::Fetch => SubjectField::Url,
                    Kind::Shell => SubjectField::Shell,
                    Kind::Task => SubjectField::Agent,
                    Kind::ExitPlan => SubjectField::Plan,
                    Kind::Think | Kind::Execute | Kind::Other if is_mcp(name) => {
                        SubjectField::McpDefault
                    }
                    Kind::Think | Kind::Execute | Kind::Other => SubjectField::None,
                };
                (subject, Vec::new())
            }
        };
        let builtin = Registry::builtin_names().any(|builtin| builtin == name);
        if !builtin && !self.declared.iter().any(|declared| declared == name) {
            self.declared.push(name.to_string());
        }
        self.tools.insert(
            name.to_string(),
            ToolSpec {
                permission: permission.unwrap_or(name).to_string(),
                kind,
                subject,
                known: true,
                fields,
            },
        );
    }

    /// Look a tool up. Unknown tools (MCP tools included) are [`Kind::Other`]
    /// with their own name as permission; an MCP tool's subject is read
    /// from [`MCP_SUBJECT_FIELDS`].
    pub fn lookup(&self, name: &str) -> Cow<'_, ToolSpec> {
        match self.tools.get(name) {
            Some(spec) => Cow::Borrowed(spec),
            None => Cow::Owned(ToolSpec {
                permission: name.to_string(),
                kind: Kind::Other,
                subject: if is_mcp(name) {
                    SubjectField::McpDefault
                } else {
                    SubjectField::None
                },
                known: false,
                fields: Vec::new(),
            }),
        }
    }

    /// Every permission name of the given kind (built-in and declared): what an
    /// `always` on a fetch grants.
    pub fn permissions_of_kind(&self, kind: Kind) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let of_kind = self
            .tools
            .values()
            .filter(|spec| spec.kind == kind)
            .map(|spec| spec.permission.clone());
        for name in of_kind {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names.sort();
        names
    }
}

/// A shell command as it appears in a tool's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShellInput {
    /// Source text.
    Text(String),
    /// An argv vector (Codex).
    Argv(Vec<String>),
}

/// The subject of one call, read from its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// A shell command.
    Shell(ShellInput),
    /// Paths, as the agent wrote them.
    Paths(Vec<String>),
    /// A search: the pattern rules match, and the directory searched if given.
    Search {
        /// The pattern.
        pattern: String,
        /// The directory.
        path: Option<String>,
    },
    /// A URL, query, agent type or plan text.
    Text(String),
    /// What the named subject fields give ([`SubjectField::Declared`],
    /// [`SubjectField::McpDefault`]), each value once, in the order of the
    /// fields; empty when the input gives none of them.
    Fields(Vec<FieldSubject>),
    /// Nothing to match: rules see `*`.
    None,
}

/// One value a subject field gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldSubject {
    /// The field, as declared (`name`, `args.name`).
    pub field: String,
    /// What it gives.
    pub value: FieldValue,
}

/// How the value of a subject field is matched, by the field's name: a
/// command-like field (`command`, `cmd`, `script`, ...) as a shell command,
/// one step per simple command; a path-like one (`path`, `file`, `dir`, ...,
/// as a session's scope reads an unknown tool's fields) as a path, relative
/// to the project root, unless it holds a URL; any other as text. A number
/// or a boolean is its JSON text; an array gives each of its items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldValue {
    /// Matched as written.
    Text(String),
    /// Matched as a path: normalised, relative to the project root.
    Path(String),
    /// Matched as a shell command, simple command by simple command.
    Command(ShellInput),
    /// Given, but not as text (an object, an array holding one, more than
    /// [`MAX_FIELD_VALUES`] items, a dotted path through something that is
    /// not an object): the reason. Judged as a call without a subject.
    Unreadable(String),
}

/// Read the subject of a call. `Err` names what is missing or malformed.
///
/// Every field an agent's tool of that name reads is read: an input that
/// names several paths (`filePath` and `file_path`, `paths` and `include`,
/// `files[].path`) has them all as subjects. Fields that hold one command or
/// one directory but are given differently more than once are split by
/// [`variants`] first; given to this function, they are an error.
pub fn extract(spec: &ToolSpec, input: &Map<String, Value>) -> Result<Subject, String> {
    match spec.subject {
        SubjectField::Shell => shell(input).map(Subject::Shell),
        SubjectField::Path | SubjectField::Paths => {
            let mut paths = Vec::new();
            collect_paths(input, spec.subject == SubjectField::Paths, &mut paths)?;
            if !paths.is_empty() {
                return Ok(Subject::Paths(paths));
            }
            match spec.subject {
                // A listing without a path lists the working directory.
                _ if spec.kind == Kind::List => Ok(Subject::Paths(vec![".".to_string()])),
                SubjectField::Paths => Err("the input has no `paths`".to_string()),
                _ if spec.known && spec.kind != Kind::Other => Err(format!(
                    "the input has no path (expected one of {})",
                    PATH_FIELDS.join(", ")
                )),
                _ => Ok(Subject::None),
            }
        }
        SubjectField::OptionalPath => {
            let mut paths = Vec::new();
            collect_paths(input, false, &mut paths)?;
            Ok(if paths.is_empty() {
                Subject::None
            } else {
                Subject::Paths(paths)
            })
        }
        SubjectField::Patch => {
            let mut files = Vec::new();
            for text in strings_of(input, PATCH_FIELDS)? {
                for file in patch_files(&text) {
                    push_new(&mut files, file);
                }
            }
            if files.is_empty() {
                return Err(if strings_of(input, PATCH_FIELDS)?.is_empty() {
                    "the input has no patch text".to_string()
                } else {
                    "the patch names no file".to_string()
                });
            }
            // A path field beside the patch is a file too.
            collect_paths(input, false, &mut files)?;
            Ok(Subject::Paths(files))
        }
        SubjectField::Url => Ok(first_string(input, &["url", "query", "prompt"])?
            .map(Subject::Text)
            .unwrap_or(Subject::None)),
        SubjectField::Search => Ok(Subject::Search {
            pattern: first_string(input, &["pattern", "query", "regex"])?
                .unwrap_or_else(|| "*".into()),
            path: single(input, SEARCH_DIR_FIELDS)?,
        }),
        SubjectField::Agent => Ok(
            // Claude Code and OpenCode name the agent type `subagent_type`,
            // Gemini CLI's `invoke_agent` `agent_name`.
            first_string(
                input,
                &["subagent_type", "agent_name", "mode", "description"],
            )?
            .map(Subject::Text)
            .unwrap_or(Subject::None),
        ),
        SubjectField::Plan => Ok(first_string(input, &["plan"])?
            .map(Subject::Text)
            .unwrap_or(Subject::None)),
        SubjectField::Declared | SubjectField::McpDefault => Ok(Subject::Fields(field_subjects(
            &spec.subject_fields(),
            input,
        ))),
        SubjectField::None => Ok(Subject::None),
    }
}

/// Every value the subject fields give, each once, in the order of the
/// fields: a field that is absent, `null`, `""` or `[]` gives nothing.
/// Never an error: what cannot be read is a [`FieldValue::Unreadable`],
/// judged as strictly as any value could be.
pub fn field_subjects(fields: &[&str], input: &Map<String, Value>) -> Vec<FieldSubject> {
    let mut out: Vec<FieldSubject> = Vec::new();
    let mut push = |field: &str, value: FieldValue| {
        if !out.iter().any(|seen| seen.value == value) {
            out.push(FieldSubject {
                field: field.to_string(),
                value,
            });
        }
    };
    for field in fields {
        let value = match field_value(input, field) {
            Ok(Some(value)) => value,
            Ok(None) => continue,
            Err(why) => {
                push(field, FieldValue::Unreadable(why));
                continue;
            }
        };
        let last = field.rsplit('.').next().unwrap_or(field);
        let folded = Folded::new(last);
        let command = is_subject_command_key(folded.as_str());
        let path = !command && is_path_key(last);
        let read = |text: String| {
            if command {
                FieldValue::Command(ShellInput::Text(text))
            } else if path && (!text.contains("://") || text.starts_with("file://")) {
                FieldValue::Path(uri_path(&text).to_string())
            } else {
                FieldValue::Text(text)
            }
        };
        match value {
            Value::Array(items) if items.is_empty() => {}
            Value::Array(items) if items.len() > MAX_FIELD_VALUES => push(
                field,
                FieldValue::Unreadable(format!(
                    "`{field}` holds {} items, more than {MAX_FIELD_VALUES}",
                    items.len()
                )),
            ),
            // An argv (`["rm", "-rf", "x"]`) is one command; `commands` a list of them.
            Value::Array(items)
                if command
                    && !folded.as_str().ends_with('s')
                    && items.iter().all(Value::is_string) =>
            {
                let argv = items.iter().filter_map(Value::as_str).map(str::to_string);
                push(field, FieldValue::Command(ShellInput::Argv(argv.collect())));
            }
            Value::Array(items) => {
                for item in items {
                    match scalar_text(item) {
                        Ok(Some(text)) => push(field, read(text)),
                        Ok(None) => {}
                        Err(what) => {
                            push(
                                field,
                                FieldValue::Unreadable(format!("`{field}` holds {what}")),
                            );
                            break;
                        }
                    }
                }
            }
            value => match scalar_text(value) {
                Ok(Some(text)) => push(field, read(text)),
                Ok(None) => {}
                Err(what) => push(
                    field,
                    FieldValue::Unreadable(format!("`{field}` is {what}")),
                ),
            },
        }
    }
    out
}

/// A subject field's value, through the dots of a nested field
/// (`args.name`): `None` when it is absent, `Err` when the way to it goes
/// through something that is neither an object nor absent.
fn field_value<'v>(
    input: &'v Map<String, Value>,
    field: &str,
) -> Result<Option<&'v Value>, String> {
    let mut parts = field.split('.');
    let first = parts.next().unwrap_or(field);
    let Some(mut value) = lookup(input, first) else {
        return Ok(None);
    };
    let mut walked = first.len();
    for part in parts {
        value = match value {
            Value::Null => return Ok(None),
            Value::Object(object) => match object.get(part) {
                Some(inner) => inner,
                None => return Ok(None),
            },
            _ => {
                let through = field.get(..walked).unwrap_or(field);
                return Err(format!(
                    "`{through}` is not an object, so `{field}` cannot be read"
                ));
            }
        };
        walked += 1 + part.len();
    }
    Ok(Some(value))
}

/// The text of a scalar: a string as is, a number or boolean as its JSON
/// text; `None` for `null` and `""`; `Err` names what else it is.
fn scalar_text(value: &Value) -> Result<Option<String>, &'static str> {
    match value {
        Value::Null => Ok(None),
        Value::String(text) if text.is_empty() => Ok(None),
        Value::String(text) => Ok(Some(text.clone())),
        Value::Number(number) => Ok(Some(number.to_string())),
        Value::Bool(flag) => Ok(Some(flag.to_string())),
        Value::Array(_) => Err("an array, not text"),
        Value::Object(_) => Err("an object, not text"),
    }
}

/// A subject field whose value is a shell command: `command`, `cmd`,
/// `commands`, `script`, `shell_command`, ... (the command-like keys of
/// [`unknown_fields`], without what is typed into a running process).
fn is_subject_command_key(folded: &str) -> bool {
    is_command_key(folded) && !matches!(folded, "chars" | "keys" | "stdin")
}

/// Fields that name the file a tool reads or writes, across agents: Claude
/// Code and Gemini CLI `file_path`, OpenCode `filePath`, Roo Code and many
/// others `path`, Gemini CLI's older `absolute_path`, `notebook_path`,
/// Gemini CLI and Codex `dir_path`, Kilo Code's `target_file`. Looked for at
/// any depth (`files[].path`, `edits[].filePath`).
pub const PATH_FIELDS: &[&str] = &[
    "file_path",
    "filePath",
    "path",
    "absolute_path",
    "notebook_path",
    "dir_path",
    "target_file",
];

/// Fields that hold a list of paths (for [`SubjectField::Paths`] also
/// `include`, which Gemini CLI's `read_many_files` merges with `paths`).
const PATH_LIST_FIELDS: &[&str] = &["paths", "file_paths"];

/// Fields that hold a shell command: `command` (a string, or an argv array)
/// and Codex's `cmd`.
const COMMAND_FIELDS: &[&str] = &["command", "cmd"];
/// Where a patch tool's text is: Codex's `input` (its hooks hand the same
/// text over as `command`), OpenCode's `patchText`, others' `patch`.
const PATCH_FIELDS: &[&str] = &["input", "patch", "patchText", "command"];

/// Fields that name the directory a shell command runs in: Codex and OpenCode
/// `workdir`, Gemini CLI and qwen-code `directory` (`dir_path` in newer
/// Gemini CLI), Roo Code `cwd`, Codex `local_shell`'s `working_directory`.
pub const WORKDIR_FIELDS: &[&str] = &[
    "workdir",
    "directory",
    "dir_path",
    "cwd",
    "working_directory",
];

/// Fields that name the directory a search looks in.
const SEARCH_DIR_FIELDS: &[&str] = &["path", "dir_path", "directory", "absolute_path"];

/// The shells whose scripts toolgate reads (`shell` in Codex's `exec_command`).
const ANALYSED_SHELLS: &[&str] = &["bash", "sh", "zsh", "dash"];

/// The value of one top-level field. Tool inputs have a handful of keys,
/// and a call looks up twenty or so names (each spelling of the command,
/// the directory, the background flags): comparing keys in place is several
/// times cheaper than hashing each name for a small map.
pub(crate) fn lookup<'v>(input: &'v Map<String, Value>, name: &str) -> Option<&'v Value> {
    if input.len() <= 8 {
        input
            .iter()
            .find_map(|(key, value)| (key == name).then_some(value))
    } else {
        input.get(name)
    }
}

/// Every path the input names, at any depth, each once, in order.
fn collect_paths(
    input: &Map<String, Value>,
    lists: bool,
    paths: &mut Vec<String>,
) -> Result<(), String> {
    for (key, value) in input {
        let key = key.as_str();
        if PATH_FIELDS.contains(&key) {
            match value {
                Value::Null => {}
                Value::String(path) => push_new(paths, path.clone()),
                // `path` inside a nested object may be anything; at the top it must be a string.
                _ => return Err(format!("`{key}` must be a string")),
            }
        } else if PATH_LIST_FIELDS.contains(&key) || (lists && key == "include") {
            match value {
                Value::Null => {}
                value => {
                    let list = string_array(value, key)?;
                    if list.is_empty() && key != "include" {
                        return Err(format!("`{key}` is empty"));
                    }
                    for path in list {
                        push_new(paths, path);
                    }
                }
            }
        } else {
            nested_paths(value, paths);
        }
    }
    Ok(())
}

/// Paths inside nested objects and arrays (`files[].path`, `edits[].filePath`).
fn nested_paths(value: &Value, paths: &mut Vec<String>) {
    match value {
        Value::Array(items) => items.iter().for_each(|item| nested_paths(item, paths)),
        Value::Object(object) => {
            for (key, value) in object {
                match value {
                    Value::String(path) if PATH_FIELDS.contains(&key.as_str()) => {
                        push_new(paths, path.clone())
                    }
                    Value::Array(items) if PATH_LIST_FIELDS.contains(&key.as_str()) => {
                        for path in items.iter().filter_map(Value::as_str) {
                            push_new(paths, path.to_string());
                        }
                    }
                    value => nested_paths(value, paths),
                }
            }
        }
        _ => {}
    }
}

fn push_new(list: &mut Vec<String>, item: String) {
    if !list.contains(&item) {
        list.push(item);
    }
}

/// An input whose single-valued fields (the command, the directory it runs
/// in, the directory a search looks in) are given more than once with
/// different values, split into one input per combination, each with the
/// field under one name: every one must pass. `None` when there is nothing to
/// split (the usual case, which costs a few map lookups).
pub fn variants(
    spec: &ToolSpec,
    input: &Map<String, Value>,
) -> Result<Option<Vec<Map<String, Value>>>, String> {
    let groups: &[(&[&str], &str)] = match spec.subject {
        SubjectField::Shell => &[(COMMAND_FIELDS, "command"), (WORKDIR_FIELDS, "workdir")],
        SubjectField::Search => &[(SEARCH_DIR_FIELDS, "path")],
        SubjectField::Url => return url_variants(input),
        _ => return Ok(None),
    };
    // The usual case, decided without allocating: no group has two values.
    let split_needed = groups.iter().any(|(fields, _)| {
        let mut given = fields
            .iter()
            .filter_map(|field| lookup(input, field))
            .filter(|value| !value.is_null());
        given
            .next()
            .is_some_and(|first| given.any(|other| other != first))
    });
    if !split_needed {
        return Ok(None);
    }
    let mut split: Vec<(&[&str], &str, Vec<&Value>)> = Vec::new();
    for (fields, canonical) in groups {
        let mut values: Vec<&Value> = Vec::new();
        for field in *fields {
            match lookup(input, field) {
                None | Some(Value::Null) => {}
                Some(value) if !values.contains(&value) => values.push(value),
                Some(_) => {}
            }
        }
        split.push((fields, canonical, values));
    }
    if split.iter().all(|(_, _, values)| values.len() <= 1) {
        return Ok(None);
    }
    let mut inputs: Vec<Map<String, Value>> = vec![input.clone()];
    for (fields, canonical, values) in split {
        if values.is_empty() {
            continue;
        }
        let mut next = Vec::new();
        for base in &inputs {
            for value in &values {
                let mut one = base.clone();
                for field in fields {
                    one.remove(*field);
                }
                one.insert(canonical.to_string(), (*value).clone());
                next.push(one);
            }
        }
        inputs = next;
    }
    if inputs.len() > 16 {
        return Err(format!(
            "the input gives its command or directory in {} different combinations",
            inputs.len()
        ));
    }
    Ok(Some(inputs))
}

/// A fetch whose `prompt` names URLs (Gemini CLI's `web_fetch` fetches every
/// URL in its prompt): one input per URL, `url` beside them included, so
/// rules and questions see each URL rather than the prompt's text.
fn url_variants(input: &Map<String, Value>) -> Result<Option<Vec<Map<String, Value>>>, String> {
    let Some(Value::String(prompt)) = lookup(input, "prompt") else {
        return Ok(None);
    };
    let mut urls: Vec<String> = Vec::new();
    match lookup(input, "url") {
        None | Some(Value::Null) => {}
        Some(Value::String(url)) => urls.push(url.clone()),
        Some(_) => return Err("`url` must be a string".to_string()),
    }
    let given = urls.len();
    for word in prompt.split(|c: char| {
        c.is_whitespace() || matches!(c, '<' | '>' | '"' | '\'' | '(' | ')' | '[' | ']')
    }) {
        let lower = word.to_ascii_lowercase();
        if let Some(at) = lower.find("http://").or_else(|| lower.find("https://")) {
            let url = word[at..].trim_end_matches(['.', ',', ';', ':', '!', '?']);
            push_new(&mut urls, url.to_string());
        }
    }
    if urls.len() == given {
        return Ok(None);
    }
    if urls.len() > 20 {
        return Err(format!("the prompt names {} URLs", urls.len()));
    }
    let mut base = input.clone();
    for field in ["url", "query", "prompt"] {
        base.remove(field);
    }
    Ok(Some(
        urls.into_iter()
            .map(|url| {
                let mut one = base.clone();
                one.insert("url".to_string(), Value::String(url));
                one
            })
            .collect(),
    ))
}

/// The directory a shell call runs in, from its input, when it names one.
pub fn workdir(spec: &ToolSpec, input: &Map<String, Value>) -> Result<Option<String>, String> {
    if spec.subject != SubjectField::Shell {
        return Ok(None);
    }
    let dir = single(input, WORKDIR_FIELDS)?;
    if dir.as_deref() == Some("") {
        return Ok(None);
    }
    Ok(dir)
}

/// A field of a shell call that makes it more than the command it runs, so
/// that it is never read-only, with the reason: a background run
/// (`run_in_background`, `is_background`, `background`), an interactive
/// session kept open (`tty`), environment variables set for the command
/// (`env`), another user (`user`), a `shell` that is not one toolgate
/// analyses (bash, sh, dash, zsh).
pub fn not_read_only_field(spec: &ToolSpec, input: &Map<String, Value>) -> Option<String> {
    if spec.subject != SubjectField::Shell {
        return None;
    }
    let set = |field: &str| match lookup(input, field) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        // Any text but "" counts: `"false"` is true to a loose test.
        Some(Value::String(text)) => !text.is_empty(),
        Some(Value::Object(map)) => !map.is_empty(),
        Some(Value::Array(items)) => !items.is_empty(),
        Some(_) => true,
    };
    for field in ["run_in_background", "is_background", "background"] {
        if set(field) {
            return Some(format!(
                "it runs in the background (`{field}`), and a process that outlives the call is not read-only"
            ));
        }
    }
    if let Some(Value::String(program)) = lookup(input, "shell") {
        let name = program.rsplit('/').next().unwrap_or(program);
        if !ANALYSED_SHELLS.contains(&name) {
            return Some(format!(
                "`{program}` is not a shell toolgate analyses (`shell`), and it runs the command"
            ));
        }
    }
    if set("tty") {
        return Some(
            "it keeps an interactive session open (`tty`), and a process that outlives the call is not read-only"
                .to_string(),
        );
    }
    if set("env") {
        return Some("it sets environment variables for the command (`env`)".to_string());
    }
    if set("user") {
        return Some("it runs the command as another user (`user`)".to_string());
    }
    None
}

fn shell(input: &Map<String, Value>) -> Result<ShellInput, String> {
    let Some((field, command)) = single_value(input, COMMAND_FIELDS)? else {
        return Err("the input has no `command`".to_string());
    };
    let command = match command {
        Value::String(text) => ShellInput::Text(text.clone()),
        value @ Value::Array(_) => {
            let argv = string_array(value, field)?;
            if argv.is_empty() {
                return Err(format!("`{field}` is an empty argv"));
            }
            ShellInput::Argv(argv)
        }
        _ => return Err(format!("`{field}` must be a string or an array of strings")),
    };
    // Codex's `exec_command` runs `cmd` with `shell` (default bash), as a
    // login shell unless `login` is false: the script is that shell's, and a
    // program that is not one of the shells analysed is judged as the program
    // it is (`python3 -c SCRIPT` runs code).
    let login = match lookup(input, "login") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(login)) => *login,
        Some(_) => return Err("`login` must be true or false".to_string()),
    };
    match (lookup(input, "shell"), command) {
        (None | Some(Value::Null), command) => Ok(command),
        (Some(Value::String(program)), ShellInput::Text(script)) => {
            let name = program.rsplit('/').next().unwrap_or(program);
            let flag = if login && ANALYSED_SHELLS.contains(&name) && name != "dash" {
                "-lc"
            } else {
                "-c"
            };
            Ok(ShellInput::Argv(vec![
                program.clone(),
                flag.to_string(),
                script,
            ]))
        }
        (Some(Value::String(_)), ShellInput::Argv(_)) => {
            Err("`shell` is given with an argv `command`, which names its own program".to_string())
        }
        (Some(_), _) => Err("`shell` must be a string".to_string()),
    }
}

/// The one value of a field that may be spelled several ways: `Err` when two
/// spellings disagree (split them with [`variants`] first).
fn single_value<'v>(
    input: &'v Map<String, Value>,
    fields: &[&'static str],
) -> Result<Option<(&'static str, &'v Value)>, String> {
    let mut found: Option<(&'static str, &'v Value)> = None;
    for field in fields {
        match lookup(input, field) {
            None | Some(Value::Null) => {}
            Some(value) => match found {
                None => found = Some((field, value)),
                Some((_, seen)) if seen == value => {}
                Some((first, _)) => {
                    return Err(format!("`{first}` and `{field}` differ"));
                }
            },
        }
    }
    Ok(found)
}

fn single(input: &Map<String, Value>, fields: &[&'static str]) -> Result<Option<String>, String> {
    match single_value(input, fields)? {
        None => Ok(None),
        Some((_, Value::String(text))) => Ok(Some(text.clone())),
        Some((field, _)) => Err(format!("`{field}` must be a string")),
    }
}

/// Every string among `fields`, each once.
fn strings_of(input: &Map<String, Value>, fields: &[&str]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for field in fields {
        match lookup(input, field) {
            None | Some(Value::Null) => continue,
            Some(Value::String(text)) => push_new(&mut out, text.clone()),
            Some(_) => return Err(format!("`{field}` must be a string")),
        }
    }
    Ok(out)
}

fn first_string(input: &Map<String, Value>, fields: &[&str]) -> Result<Option<String>, String> {
    for field in fields {
        match lookup(input, field) {
            None | Some(Value::Null) => continue,
            Some(Value::String(text)) => return Ok(Some(text.clone())),
            Some(_) => return Err(format!("`{field}` must be a string")),
        }
    }
    Ok(None)
}

/// What a tool toolgate does not know names in its input, for the session's
/// scope: the values of path-like fields (a key that mentions a path, file or
/// directory, `cwd`, `uri`, ...) and of command-like fields (`command`, `cmd`,
/// `script`, ...), at any depth.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct UnknownFields {
    /// Path-like values (a `file://` URI as its path).
    pub paths: Vec<String>,
    /// Command-like values.
    pub commands: Vec<ShellInput>,
}

/// Scan an unknown tool's input; see [`UnknownFields`].
pub fn unknown_fields(input: &Map<String, Value>) -> UnknownFields {
    let mut found = UnknownFields::default();
    scan_object(input, &mut found);
    found
}

/// A key's ASCII letters and digits in lower case (`Command`, `shell_command`
/// and `shellCommand` alike), without allocating: the names looked for are
/// at most 16 long, and a longer key folds to `""`, which is none of them.
struct Folded {
    bytes: [u8; 16],
    length: usize,
}

impl Folded {
    fn new(key: &str) -> Folded {
        let mut folded = Folded {
            bytes: [0; 16],
            length: 0,
        };
        for byte in key.bytes().filter(u8::is_ascii_alphanumeric) {
            match folded.bytes.get_mut(folded.length) {
                Some(slot) => *slot = byte.to_ascii_lowercase(),
                None => {
                    folded.length = 0;
                    break;
                }
            }
            folded.length += 1;
        }
        folded
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.length]).unwrap_or_default()
    }
}

fn scan_object(object: &Map<String, Value>, found: &mut UnknownFields) {
    // A program and its arguments given apart (`{"command": "rm", "args":
    // ["-rf", "x"]}`, as MCP shell servers take them), or an `argv` list:
    // the whole command line, as an argument vector.
    let string_list = |value: &Value| -> Option<Vec<String>> {
        match value {
            Value::Array(items) => items
                .iter()
                .map(|item| item.as_str().map(str::to_string))
                .collect(),
            _ => None,
        }
    };
    let mut program: Option<&str> = None;
    let mut arguments: Option<Vec<String>> = None;
    let mut argument_line: Option<&str> = None;
    for (key, value) in object {
        let folded = Folded::new(key);
        let folded = folded.as_str();
        match (folded, value) {
            ("command" | "cmd" | "program" | "executable" | "exe" | "bin", Value::String(text)) => {
                program = Some(text)
            }
            ("args" | "arguments" | "argv", Value::String(line)) => argument_line = Some(line),
            ("args" | "arguments" | "argv", value) => arguments = string_list(value),
            _ => {}
        }
    }
    // Arguments given as one line: the program and that line, as a shell
    // would read them (an unknown spelling meets every deny rule anyway).
    if let (Some(program), Some(line)) = (program, argument_line) {
        found
            .commands
            .push(ShellInput::Text(format!("{program} {line}")));
    }
    match (program, arguments) {
        (Some(program), Some(arguments)) => {
            let mut argv = vec![program.to_string()];
            argv.extend(arguments);
            found.commands.push(ShellInput::Argv(argv));
        }
        (None, Some(argv)) if !argv.is_empty() && object.contains_key("argv") => {
            found.commands.push(ShellInput::Argv(argv));
        }
        _ => {}
    }
    for (key, value) in object {
        let folded = Folded::new(key);
        let folded = folded.as_str();
        if is_command_key(folded) {
            match value {
                Value::String(text) => found.commands.push(ShellInput::Text(text.clone())),
                Value::Array(items) if items.iter().all(Value::is_string) && !items.is_empty() => {
                    let argv: Vec<String> = items
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect();
                    if folded.ends_with('s') {
                        // `commands`: a list of command lines.
                        found
                            .commands
                            .extend(argv.into_iter().map(ShellInput::Text));
                    } else {
                        found.commands.push(ShellInput::Argv(argv));
                    }
                }
                other => scan_value(other, found),
            }
        } else if is_path_key(key) {
            match value {
                Value::String(text) => push_new(&mut found.paths, uri_path(text).to_string()),
                Value::Array(items) => {
                    for item in items {
                        match item {
                            Value::String(text) => {
                                push_new(&mut found.paths, uri_path(text).to_string())
                            }
                            other => scan_value(other, found),
                        }
                    }
                }
                other => scan_value(other, found),
            }
        } else if !(value.is_string() && is_content_key(folded)) {
            scan_value(value, found);
        }
    }
}

/// Keys whose text is data, never a path to check (`file_text`, `content`).
fn is_content_key(folded: &str) -> bool {
    matches!(
        folded,
        "content"
            | "contents"
            | "filetext"
            | "text"
            | "body"
            | "message"
            | "description"
            | "newstring"
            | "oldstring"
            | "pattern"
            | "query"
            | "prompt"
            | "diff"
            | "patch"
    )
}

/// Any other string that reads as a path (`/etc/passwd`, `~/.bashrc`,
/// `../x`, `./x`) is one, whatever its key (`to`, `dst`, `output`).
fn scan_value(value: &Value, found: &mut UnknownFields) {
    match value {
        Value::Object(object) => scan_object(object, found),
        Value::Array(items) => items.iter().for_each(|item| scan_value(item, found)),
        Value::String(text) if looks_like_path(text) => {
            push_new(&mut found.paths, uri_path(text).to_string())
        }
        _ => {}
    }
}

fn looks_like_path(text: &str) -> bool {
    !text.contains('\n')
        && (text.starts_with(['/', '~'])
            || text.starts_with("./")
            || text.starts_with("file://")
            || text == ".."
            || text.starts_with("../")
            || text.contains("/../"))
}

/// `command`, `cmd`, `commands`, `script`, `shell_command`, `commandLine`, ...
fn is_command_key(folded: &str) -> bool {
    matches!(
        folded,
        "command"
            | "commands"
            | "cmd"
            | "cmds"
            | "script"
            | "commandline"
            | "shellcommand"
            | "bash"
            // What a tool types into a running process (Codex `write_stdin`).
            | "chars"
            | "keys"
            | "stdin"
    )
}

/// A key that names a file or directory: one of its words (split at `_`,
/// `-` and case changes: `file_path`, `filePath`, `targetDir`) is `path`,
/// `file`, `dir`, `directory`, `folder`, `cwd`, `workdir`, `uri`, `root`,
/// `source`, `destination`, `target`, ...; a key with a word that says it
/// holds contents or a pattern (`file_text`, `content`, `file_pattern`) is not.
fn is_path_key(key: &str) -> bool {
    const PATH_WORDS: &[&str] = &[
        "path",
        "paths",
        "pathname",
        "file",
        "files",
        "filename",
        "filepath",
        "filepaths",
        "dir",
        "dirs",
        "dirname",
        "dirpath",
        "directory",
        "directories",
        "folder",
        "folders",
        "cwd",
        "workdir",
        "uri",
        "uris",
        "root",
        "source",
        "sources",
        "src",
        "destination",
        "dest",
        "target",
    ];
    const NOT_PATH_WORDS: &[&str] = &[
        "content", "contents", "text", "pattern", "patterns", "glob", "regex", "type", "count",
        "size", "line", "lines", "encoding", "mode",
    ];
    let is = |list: &[&str], word: &str| list.iter().any(|known| known.eq_ignore_ascii_case(word));
    key_words(key).any(|word| is(PATH_WORDS, word))
        && !key_words(key).any(|word| is(NOT_PATH_WORDS, word))
}

/// The words of a key, split at every other character than an ASCII letter
/// or digit and where a lower-case letter or digit meets an upper-case one
/// (`file_path`, `filePath`, `targetDir`), in their own case.
fn key_words(key: &str) -> impl Iterator<Item = &str> {
    let bytes = key.as_bytes();
    let mut start = 0;
    let mut position = 0;
    std::iter::from_fn(move || {
        while position < bytes.len() {
            let byte = bytes[position];
            let boundary = !byte.is_ascii_alphanumeric()
                || (byte.is_ascii_uppercase()
                    && position > start
                    && (bytes[position - 1].is_ascii_lowercase()
                        || bytes[position - 1].is_ascii_digit()));
            if boundary && position > start {
                let word = &key[start..position];
                start = if byte.is_ascii_alphanumeric() {
                    position
                } else {
                    position + 1
                };
                position += 1;
                return Some(word);
            }
            if !byte.is_ascii_alphanumeric() {
                start = position + 1;
            }
            position += 1;
        }
        if start < bytes.len() {
            let word = &key[start..];
            start = bytes.len();
            return Some(word);
        }
        None
    })
}

/// `file:///x` is `/x`; other text is itself.
fn uri_path(text: &str) -> &str {
    text.strip_prefix("file://").unwrap_or(text)
}

fn string_array(value: &Value, field: &str) -> Result<Vec<String>, String> {
    let Value::Array(items) = value else {
        return Err(format!("`{field}` must be an array of strings"));
    };
    items
        .iter()
        .map(|item| {
            item.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("`{field}` must contain only strings"))
        })
        .collect()
}

/// Every file a patch touches: Codex's `*** Add/Update/Delete File:` and
/// `*** Move to:` headers, and unified diff `---`/`+++` headers.
pub fn patch_files(text: &str) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        let file = [
            "*** Add File: ",
            "*** Update File: ",
            "*** Delete File: ",
            "*** Move to: ",
        ]
        .iter()
        .find_map(|prefix| line.strip_prefix(prefix))
        .or_else(|| {
            ["+++ ", "--- "].iter().find_map(|prefix| {
                line.strip_prefix(prefix).map(|rest| {
                    // `+++ b/path\t2024-01-01 ...`: drop the timestamp and the a/ b/ prefix.
                    let rest = rest.split('\t').next().unwrap_or(rest);
                    rest.strip_prefix("a/")
                        .or_else(|| rest.strip_prefix("b/"))
                        .unwrap_or(rest)
                })
            })
        });
        if let Some(file) = file {
            let file = file.trim();
            if !file.is_empty() && file != "/dev/null" && !files.iter().any(|f| f == file) {
                files.push(file.to_string());
            }
        }
    }
    files
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic

    use super::*;
    use serde_json::json;

    /// The words of a key, as the allocating version said them.
    fn words_by_chars(key: &str) -> Vec<String> {
        let mut words: Vec<String> = Vec::new();
        let mut current = String::new();
        let mut previous_lower = false;
        for c in key.chars() {
            let boundary = !c.is_ascii_alphanumeric() || (c.is_ascii_uppercase() && previous_lower);
            if boundary && !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            if c.is_ascii_alphanumeric() {
                current.push(c.to_ascii_lowercase());
            }
            previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        }
        if !current.is_empty() {
            words.push(current);
        }
        words
    }

    proptest::proptest! {
        #[test]
        fn key_words_split_as_by_characters(key in "[a-zA-Z0-9_\\-. é漢]{0,24}") {
            let split: Vec<String> = key_words(&key).map(str::to_ascii_lowercase).collect();
            proptest::prop_assert_eq!(split, words_by_chars(&key));
        }

        #[test]
        fn folded_keys_are_their_letters_and_digits(key in "[a-zA-Z0-9_\\-. é]{0,20}") {
            let letters: String = key
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .map(|c| c.to_ascii_lowercase())
                .collect();
            let expected = if letters.len() > 16 { "" } else { letters.as_str() };
            let folded = Folded::new(&key);
            proptest::prop_assert_eq!(folded.as_str(), expected);
        }
    }

    #[test]
    fn key_words_of_known_spellings() {
        for (key, words) in [
            ("file_path", vec!["file", "path"]),
            ("filePath", vec!["file", "Path"]),
            ("targetDir", vec!["target", "Dir"]),
            ("HTTPServer", vec!["HTTPServer"]),
            ("v2Path", vec!["v2", "Path"]),
            ("__x__", vec!["x"]),
            ("é-path", vec!["path"]),
            ("", vec![]),
        ] {
            assert_eq!(key_words(key).collect::<Vec<_>>(), words, "{key}");
        }
    }

    fn check(tool: &str, input: Value, expected: &str) {
        let registry = Registry::default();
        let spec = registry.lookup(tool);
        let Value::Object(input) = input else {
            unreachable!()
        };
        let actual = match extract(&spec, &input) {
            Ok(subject) => format!("{} {:?} {subject:?}", spec.permission, spec.kind),
            Err(err) => format!("{} error: {err}", spec.permission),
        };
        assert_eq!(actual, expected, "{tool}");
    }

    #[test]
    fn subjects_of_each_agent() {
        let cases = [
            ("Bash", json!({"command": "ls -la"}), r#"bash Shell Shell(Text("ls -la"))"#),
            (
                "shell",
                json!({"command": ["bash", "-lc", "ls"]}),
                r#"bash Shell Shell(Argv(["bash", "-lc", "ls"]))"#,
            ),
            ("exec_command", json!({"cmd": "pwd"}), r#"bash Shell Shell(Text("pwd"))"#),
            ("run_shell_command", json!({}), "bash error: the input has no `command`"),
            ("bash", json!({"command": 5}), "bash error: `command` must be a string or an array of strings"),
            ("Read", json!({"file_path": "a.rs"}), r#"read Read Paths(["a.rs"])"#),
            ("read", json!({"filePath": "/x/a.rs"}), r#"read Read Paths(["/x/a.rs"])"#),
            ("read_file", json!({"absolute_path": "/x"}), r#"read Read Paths(["/x"])"#),
            ("NotebookEdit", json!({"notebook_path": "n.ipynb"}), r#"edit Edit Paths(["n.ipynb"])"#),
            ("Write", json!({"content": "x"}), "edit error: the input has no path (expected one of file_path, filePath, path, absolute_path, notebook_path, dir_path, target_file)"),
            ("LS", json!({}), r#"list List Paths(["."])"#),
            ("read_many_files", json!({"paths": ["a", "b"]}), r#"read Read Paths(["a", "b"])"#),
            (
                "apply_patch",
                json!({"input": "*** Begin Patch\n*** Update File: src/a.rs\n@@\n*** Add File: b.rs\n*** Delete File: c.rs\n*** End Patch"}),
                r#"edit Edit Paths(["src/a.rs", "b.rs", "c.rs"])"#,
            ),
            (
                "patch",
                json!({"patchText": "--- a/x.txt\n+++ b/x.txt\n@@ -1 +1 @@\n-a\n+b\n--- /dev/null\n+++ b/new.txt\n"}),
                r#"edit Edit Paths(["x.txt", "new.txt"])"#,
            ),
            ("apply_patch", json!({"input": "nothing"}), "edit error: the patch names no file"),
            ("WebFetch", json!({"url": "https://x.y/"}), r#"webfetch Fetch Text("https://x.y/")"#),
            ("google_web_search", json!({"query": "tokio"}), r#"websearch Fetch Text("tokio")"#),
            ("Grep", json!({"pattern": "fn main", "path": "src"}), r#"grep Search Search { pattern: "fn main", path: Some("src") }"#),
            ("glob", json!({"pattern": "**/*.rs"}), r#"glob Search Search { pattern: "**/*.rs", path: None }"#),
            ("Task", json!({"subagent_type": "explore", "prompt": "x"}), r#"task Task Text("explore")"#),
            ("invoke_agent", json!({"agent_name": "codebase_investigator", "prompt": "x"}), r#"task Task Text("codebase_investigator")"#),
            ("ExitPlanMode", json!({"plan": "1. do"}), r#"exit_plan_mode ExitPlan Text("1. do")"#),
            ("TodoWrite", json!({"todos": []}), "todowrite Think None"),
            ("mcp__github__get_issue", json!({"number": 1}), "mcp__github__get_issue Other Fields([])"),
            ("frobnicate", json!({}), "frobnicate Other None"),
            // Every path field any agent's tool reads is a subject.
            ("edit", json!({"filePath": "/etc/passwd", "file_path": "src/ok.rs"}), r#"edit Edit Paths(["/etc/passwd", "src/ok.rs"])"#),
            ("read_file", json!({"absolute_path": "/etc/shadow", "file_path": "a.rs"}), r#"read Read Paths(["/etc/shadow", "a.rs"])"#),
            ("read_file", json!({"path": "a.rs", "file_path": "a.rs"}), r#"read Read Paths(["a.rs"])"#),
            ("read_file", json!({"files": [{"path": "a.rs"}, {"path": "/etc/x", "line_ranges": []}]}), r#"read Read Paths(["a.rs", "/etc/x"])"#),
            ("multiedit", json!({"filePath": "a.rs", "edits": [{"filePath": "/etc/x", "oldString": "a"}]}), r#"edit Edit Paths(["a.rs", "/etc/x"])"#),
            ("read_many_files", json!({"paths": ["a"], "include": ["/etc/**"]}), r#"read Read Paths(["a", "/etc/**"])"#),
            ("read_many_files", json!({"include": ["src/**"]}), r#"read Read Paths(["src/**"])"#),
            ("read_many_files", json!({"exclude": ["x"]}), "read error: the input has no `paths`"),
            ("list_directory", json!({"dir_path": "/etc"}), r#"list List Paths(["/etc"])"#),
            ("edit_file", json!({"target_file": "src/a.rs", "code_edit": "x"}), r#"edit Edit Paths(["src/a.rs"])"#),
            ("apply_patch", json!({"input": "*** Begin Patch\n*** Add File: a.rs\n*** End Patch", "path": "/etc/x"}), r#"edit Edit Paths(["a.rs", "/etc/x"])"#),
            ("read", json!({"filePath": 5}), "read error: `filePath` must be a string"),
            // Roo Code and the other agents' further tools.
            ("execute_command", json!({"command": "rm -rf /", "cwd": "src"}), r#"bash Shell Shell(Text("rm -rf /"))"#),
            ("write_to_file", json!({"path": "/etc/passwd", "content": "x"}), r#"edit Edit Paths(["/etc/passwd"])"#),
            ("apply_diff", json!({"path": "a.rs", "diff": "x"}), r#"edit Edit Paths(["a.rs"])"#),
            ("search_files", json!({"path": "src", "regex": "fn"}), r#"grep Search Search { pattern: "fn", path: Some("src") }"#),
            ("list_files", json!({"path": "src", "recursive": true}), r#"list List Paths(["src"])"#),
            ("new_task", json!({"mode": "code", "message": "x"}), r#"task Task Text("code")"#),
            ("Agent", json!({"subagent_type": "explore", "prompt": "x"}), r#"task Task Text("explore")"#),
            ("shell_command", json!({"command": "ls", "workdir": "src"}), r#"bash Shell Shell(Text("ls"))"#),
            // Codex's hooks hand apply_patch's text over as `command`.
            ("apply_patch", json!({"command": "*** Begin Patch\n*** Add File: a.txt\n+x\n*** End Patch\n"}), r#"edit Edit Paths(["a.txt"])"#),
            ("write_stdin", json!({"session_id": 1, "chars": "y"}), "write_stdin Execute None"),
            // The command a shell tool runs, as the agent runs it.
            ("exec_command", json!({"cmd": "ls", "shell": "python3"}), r#"bash Shell Shell(Argv(["python3", "-c", "ls"]))"#),
            ("exec_command", json!({"cmd": "ls", "shell": "/bin/bash"}), r#"bash Shell Shell(Argv(["/bin/bash", "-lc", "ls"]))"#),
            ("exec_command", json!({"cmd": "ls", "shell": "zsh", "login": false}), r#"bash Shell Shell(Argv(["zsh", "-c", "ls"]))"#),
            ("exec_command", json!({"cmd": "ls", "shell": "dash"}), r#"bash Shell Shell(Argv(["dash", "-c", "ls"]))"#),
            ("exec_command", json!({"cmd": "ls", "login": "yes"}), "bash error: `login` must be true or false"),
            ("exec_command", json!({"cmd": "ls", "shell": 1}), "bash error: `shell` must be a string"),
            ("shell", json!({"command": ["ls"], "shell": "bash"}), "bash error: `shell` is given with an argv `command`, which names its own program"),
            ("exec_command", json!({"command": "ls", "cmd": "ls"}), r#"bash Shell Shell(Text("ls"))"#),
            ("exec_command", json!({"command": "rm -rf src", "cmd": "ls"}), "bash error: `command` and `cmd` differ"),
        ];
        for (tool, input, expected) in cases {
            check(tool, input, expected);
        }
    }

    /// What named subject fields give: each field the input gives, each
    /// value once, matched by the field's name as text, a path or a command;
    /// what cannot be read is said, never dropped.
    #[test]
    fn field_subjects_of_inputs() {
        let mcp = MCP_SUBJECT_FIELDS;
        let cases: &[(&[&str], Value, &str)] = &[
            (
                mcp,
                json!({"name": "gmail_delete_all"}),
                "name=text:gmail_delete_all",
            ),
            (
                mcp,
                json!({"name": "gmail_list", "limit": 3}),
                "name=text:gmail_list",
            ),
            (mcp, json!({"number": 1}), ""),
            (mcp, json!({"name": null, "url": ""}), ""),
            // Every default field the input gives is judged: the server may read any.
            (
                mcp,
                json!({"url": "https://x.example/", "name": "a"}),
                "name=text:a url=text:https://x.example/",
            ),
            (mcp, json!({"path": "./src/a.rs"}), "path=path:./src/a.rs"),
            (
                mcp,
                json!({"path": "file:///etc/passwd"}),
                "path=path:/etc/passwd",
            ),
            (
                mcp,
                json!({"path": "https://x.example/a"}),
                "path=text:https://x.example/a",
            ),
            (
                mcp,
                json!({"command": "rm -rf x"}),
                "command=command:Text(\"rm -rf x\")",
            ),
            (
                mcp,
                json!({"command": ["rm", "-rf", "x"]}),
                "command=command:Argv([\"rm\", \"-rf\", \"x\"])",
            ),
            (mcp, json!({"name": 42}), "name=text:42"),
            (mcp, json!({"name": true}), "name=text:true"),
            (
                mcp,
                json!({"name": ["a", "b", "a", 7]}),
                "name=text:a name=text:b name=text:7",
            ),
            (mcp, json!({"name": []}), ""),
            (
                mcp,
                json!({"name": {"first": "x"}}),
                "name=unreadable:`name` is an object, not text",
            ),
            (
                mcp,
                json!({"name": ["a", {"b": 1}]}),
                "name=text:a name=unreadable:`name` holds an object, not text",
            ),
            (
                mcp,
                json!({"name": [["a"]]}),
                "name=unreadable:`name` holds an array, not text",
            ),
            // The same value under two fields is one subject.
            (mcp, json!({"name": "x", "url": "x"}), "name=text:x"),
            // Declared fields, nested ones included.
            (
                &["args.name"],
                json!({"args": {"name": "deploy prod"}}),
                "args.name=text:deploy prod",
            ),
            (&["args.name"], json!({"args": {}}), ""),
            (&["args.name"], json!({"args": null}), ""),
            (
                &["args.name"],
                json!({"args": "deploy"}),
                "args.name=unreadable:`args` is not an object, so `args.name` cannot be read",
            ),
            (
                &["a.b.c"],
                json!({"a": {"b": 3}}),
                "a.b.c=unreadable:`a.b` is not an object, so `a.b.c` cannot be read",
            ),
            (
                &["target", "env"],
                json!({"env": "prod", "target": "web"}),
                "target=path:web env=text:prod",
            ),
            (
                &["script"],
                json!({"script": "make"}),
                "script=command:Text(\"make\")",
            ),
            (
                &["commands"],
                json!({"commands": ["a", "b"]}),
                "commands=command:Text(\"a\") commands=command:Text(\"b\")",
            ),
            (&["keys"], json!({"keys": "y"}), "keys=text:y"),
        ];
        for (fields, input, expected) in cases {
            let found = field_subjects(fields, &object(input.clone()));
            let actual: Vec<String> = found
                .iter()
                .map(|FieldSubject { field, value }| match value {
                    FieldValue::Text(text) => format!("{field}=text:{text}"),
                    FieldValue::Path(path) => format!("{field}=path:{path}"),
                    FieldValue::Command(command) => format!("{field}=command:{command:?}"),
                    FieldValue::Unreadable(why) => format!("{field}=unreadable:{why}"),
                })
                .collect();
            assert_eq!(actual.join(" "), *expected, "{fields:?} {input}");
        }
        let many: Vec<u32> = (0..=MAX_FIELD_VALUES as u32).collect();
        let found = field_subjects(mcp, &object(json!({"name": many})));
        assert_eq!(
            found,
            vec![FieldSubject {
                field: "name".into(),
                value: FieldValue::Unreadable(format!(
                    "`name` holds {} items, more than {MAX_FIELD_VALUES}",
                    MAX_FIELD_VALUES + 1
                )),
            }]
        );
    }

    /// Which tools read their subject from named fields: MCP tools by
    /// default (declared of a kind without a subject of its own too), and
    /// tools whose declaration names the fields.
    #[test]
    fn subject_fields_of_tools() {
        let mut registry = Registry::default();
        registry.declare("mcp__db__query", Kind::Read, None, None);
        registry.declare("mcp__notes__list", Kind::Think, None, None);
        registry.declare("deploy", Kind::Execute, None, Some(&["target".to_string()]));
        registry.declare("mcp__gw__invoke", Kind::Edit, None, None);
        registry.declare("mcp__gh__get", Kind::Other, None, Some(&[]));
        registry.declare(
            "mcp__gw__call",
            Kind::Other,
            None,
            Some(&["args.name".to_string(), "name".to_string()]),
        );
        let cases = [
            ("mcp__github__get_issue", "McpDefault name,command,path,url"),
            ("mcp__notes__list", "McpDefault name,command,path,url"),
            ("mcp__db__query", "OptionalPath "),
            ("mcp__gw__invoke", "OptionalPath "),
            ("mcp__gw__call", "Declared args.name,name"),
            ("mcp__gh__get", "None "),
            ("deploy", "Declared target"),
            ("mcp__", "None "),
            ("mcp_github_x", "None "),
            ("frobnicate", "None "),
            ("Bash", "Shell "),
        ];
        for (tool, expected) in cases {
            let spec = registry.lookup(tool);
            let actual = format!("{:?} {}", spec.subject, spec.subject_fields().join(","));
            assert_eq!(actual, expected, "{tool}");
        }
    }

    /// A few names per kind: policy-declared first, then one per agent in turn,
    /// case-insensitive duplicates skipped, shown in table order.
    #[test]
    fn examples_of_each_kind() {
        let mut registry = Registry::default();
        registry.declare("my_search", Kind::Search, None, None);
        registry.declare("Bash", Kind::Execute, None, None);
        let cases = [
            (Kind::Read, 4, "Read, read_file, read_many_files"),
            (
                Kind::Search,
                4,
                "my_search, Grep, Glob, search_file_content",
            ),
            (Kind::Search, 2, "my_search, Grep, ..."),
            (Kind::Edit, 4, "Edit, patch, apply_patch, write_file, ..."),
            (
                Kind::Shell,
                4,
                "bash, shell, exec_command, run_shell_command, ...",
            ),
            (Kind::Execute, 4, "Bash"),
            (Kind::Think, 4, "TodoWrite, todoread, question"),
            (Kind::ExitPlan, 4, "ExitPlanMode, exit_plan_mode"),
            (Kind::Other, 4, ""),
        ];
        for (kind, max, expected) in cases {
            let (mut names, more) = registry.examples(kind, max);
            if more {
                names.push("...");
            }
            assert_eq!(names.join(", "), expected, "{kind:?} {max}");
        }
    }

    #[test]
    fn declared_tools_override_builtins() {
        let mut registry = Registry::default();
        registry.declare("my_search", Kind::Search, None, None);
        registry.declare("Bash", Kind::Execute, Some("deploy"), None);
        registry.declare("mcp__db__query", Kind::Read, None, None);
        assert_eq!(registry.lookup("my_search").kind, Kind::Search);
        // A declared tool's input is its own: a path is checked when there is one.
        let query = registry.lookup("mcp__db__query");
        let input = |value: Value| value.as_object().cloned().unwrap();
        assert_eq!(
            extract(&query, &input(json!({"sql": "select 1"}))),
            Ok(Subject::None)
        );
        assert_eq!(
            extract(&query, &input(json!({"path": "/etc/passwd"}))),
            Ok(Subject::Paths(vec!["/etc/passwd".to_string()]))
        );
        let bash = registry.lookup("Bash");
        assert_eq!(
            (bash.kind, bash.permission.as_str()),
            (Kind::Execute, "deploy")
        );
        assert_eq!(
            registry.permissions_of_kind(Kind::Fetch),
            vec!["webfetch".to_string(), "websearch".to_string()]
        );
    }

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    /// Inputs that give one command or directory several ways are split, one
    /// input per combination, each under the canonical name.
    #[test]
    fn variants_split_what_is_given_twice() {
        let registry = Registry::default();
        let cases = [
            ("Bash", json!({"command": "ls"}), "none"),
            ("Bash", json!({"command": "ls", "cmd": "ls"}), "none"),
            ("Read", json!({"file_path": "a", "path": "b"}), "none"),
            (
                "exec_command",
                json!({"command": "rm -rf src", "cmd": "ls", "shell": "bash"}),
                r#"{"shell":"bash","command":"rm -rf src"} {"shell":"bash","command":"ls"}"#,
            ),
            (
                "run_shell_command",
                json!({"command": "ls", "directory": "src", "dir_path": "/etc"}),
                r#"{"command":"ls","workdir":"src"} {"command":"ls","workdir":"/etc"}"#,
            ),
            ("web_fetch", json!({"prompt": "summarise this"}), "none"),
            (
                "web_fetch",
                json!({"prompt": "compare https://a.example/x, and <http://B.example/y>."}),
                r#"{"url":"https://a.example/x"} {"url":"http://B.example/y"}"#,
            ),
            (
                "WebFetch",
                json!({"url": "https://docs.rs/", "prompt": "also read https://evil.example/"}),
                r#"{"url":"https://docs.rs/"} {"url":"https://evil.example/"}"#,
            ),
            (
                "WebFetch",
                json!({"url": "https://docs.rs/", "prompt": "summarise"}),
                "none",
            ),
            (
                "Grep",
                json!({"pattern": "x", "path": "src", "dir_path": "/"}),
                r#"{"pattern":"x","path":"src"} {"pattern":"x","path":"/"}"#,
            ),
        ];
        for (tool, input, expected) in cases {
            let spec = registry.lookup(tool);
            let actual = match variants(&spec, &object(input)) {
                Ok(None) => "none".to_string(),
                Ok(Some(inputs)) => inputs
                    .iter()
                    .map(|input| serde_json::to_string(input).unwrap())
                    .collect::<Vec<_>>()
                    .join(" "),
                Err(err) => format!("error: {err}"),
            };
            assert_eq!(actual, expected, "{tool}");
        }
    }

    /// The fields that make a shell call more than its command.
    #[test]
    fn fields_that_are_never_read_only() {
        let registry = Registry::default();
        let cases = [
            ("Bash", json!({"command": "ls"}), ""),
            (
                "Bash",
                json!({"command": "ls", "run_in_background": false}),
                "",
            ),
            (
                "Bash",
                json!({"command": "ls", "run_in_background": true}),
                "`run_in_background`",
            ),
            (
                "Bash",
                json!({"command": "ls", "run_in_background": "true"}),
                "`run_in_background`",
            ),
            (
                "Bash",
                json!({"command": "ls", "run_in_background": 1}),
                "`run_in_background`",
            ),
            (
                "run_shell_command",
                json!({"command": "ls", "is_background": true}),
                "`is_background`",
            ),
            (
                "execute_command",
                json!({"command": "ls", "background": true}),
                "`background`",
            ),
            ("exec_command", json!({"cmd": "cat", "tty": true}), "`tty`"),
            (
                "local_shell",
                json!({"command": ["ls"], "env": {"PATH": "."}}),
                "`env`",
            ),
            ("local_shell", json!({"command": ["ls"], "env": {}}), ""),
            (
                "local_shell",
                json!({"command": ["ls"], "user": "root"}),
                "`user`",
            ),
            // Only shell calls: a read's fields are its own.
            (
                "Read",
                json!({"file_path": "a", "run_in_background": true}),
                "",
            ),
        ];
        for (tool, input, expected) in cases {
            let spec = registry.lookup(tool);
            let actual = not_read_only_field(&spec, &object(input)).unwrap_or_default();
            assert!(
                (expected.is_empty() && actual.is_empty())
                    || (!expected.is_empty() && actual.contains(expected)),
                "{tool}: {actual}"
            );
        }
    }

    /// Path-like and command-like fields of a tool toolgate does not know.
    #[test]
    fn unknown_tools_fields() {
        let cases = [
            (json!({"query": "x", "limit": 3}), "paths [] commands []"),
            (
                json!({"path": "/etc/passwd"}),
                r#"paths ["/etc/passwd"] commands []"#,
            ),
            (
                json!({"filePath": "a", "targetDir": "b", "file_name": "c"}),
                r#"paths ["a", "b", "c"] commands []"#,
            ),
            (
                json!({"args": {"source": "a", "destination": "../b"}}),
                r#"paths ["a", "../b"] commands []"#,
            ),
            (
                json!({"uri": "file:///etc/passwd"}),
                r#"paths ["/etc/passwd"] commands []"#,
            ),
            (
                json!({"files": ["a", "b"]}),
                r#"paths ["a", "b"] commands []"#,
            ),
            (
                json!({"file_text": "hello", "content": "x", "file_pattern": "*.rs", "profile": "p"}),
                "paths [] commands []",
            ),
            (
                json!({"command": "rm -rf /"}),
                r#"paths [] commands [Text("rm -rf /")]"#,
            ),
            (
                json!({"cmd": ["rm", "-rf", "/"]}),
                r#"paths [] commands [Argv(["rm", "-rf", "/"])]"#,
            ),
            (
                json!({"steps": [{"script": "make"}], "commands": ["a", "b"]}),
                r#"paths [] commands [Text("make"), Text("a"), Text("b")]"#,
            ),
        ];
        for (input, expected) in cases {
            let found = unknown_fields(&object(input.clone()));
            let actual = format!("paths {:?} commands {:?}", found.paths, found.commands);
            assert_eq!(actual, expected, "{input}");
        }
    }
}
