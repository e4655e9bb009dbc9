//! The tool registry: every tool name an agent may send, mapped to the
//! permission name rules are written for, the kind of thing it does, and
//! where in its input the subject (command, path, URL) is.

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
    /// A patch (`input`, `patch`, `patchText`): every file it touches.
    Patch,
    /// `url`, else `query`.
    Url,
    /// A search: the `pattern` (or `query`) is the subject, `path` is checked for leaving the root.
    Search,
    /// A sub-agent: `subagent_type`, else `description`.
    Agent,
    /// Plan approval: the plan text in `plan`.
    Plan,
    /// No subject: rules match it as `*`.
    None,
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

fn builtins() -> impl Iterator<Item = (usize, &'static Builtin)> {
    BUILTIN
        .iter()
        .enumerate()
        .flat_map(|(agent, (_, tools))| tools.iter().map(move |tool| (agent, tool)))
}

/// Maps tool names to [`ToolSpec`]s: the built-in table plus the policy's `tools`.
#[derive(Debug, Clone)]
pub struct Registry {
    tools: HashMap<String, ToolSpec>,
    /// Names declared by the policy that are not built in, in declaration order.
    declared: Vec<String>,
}

impl Default for Registry {
    /// The built-in tools.
    fn default() -> Registry {
        let tools = builtins()
            .map(|(_, (name, permission, kind, subject))| {
                (
                    (*name).to_string(),
                    ToolSpec {
                        permission: (*permission).to_string(),
                        kind: *kind,
                        subject: *subject,
                        known: true,
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
    /// Gemini CLI and qwen-code), each once. Every one has an explicit kind:
    /// none of them is [`Kind::Other`].
    pub fn builtin_names() -> impl Iterator<Item = &'static str> {
        builtins().map(|(_, (name, ..))| *name)
    }

    /// A few tool names of `kind`, to show a model which of its tools a line of
    /// the reminder means, and whether more exist. Taken from this registry (so a
    /// declared tool counts, and a built-in the policy redeclared as another kind
    /// does not): tools declared by the policy first, then each agent's tools in
    /// turn so every agent's spelling is represented, skipping spellings that
    /// differ only in case (`Bash`, `bash`). At most `max` names, in table order.
    pub fn examples(&self, kind: Kind, max: usize) -> (Vec<&str>, bool) {
        let of_kind = |name: &str| self.tools.get(name).is_some_and(|spec| spec.kind == kind);
        // One list per source: the policy's, then one per agent.
        let mut sources: Vec<Vec<&str>> = vec![Vec::new(); BUILTIN.len() + 1];
        let mut seen: Vec<String> = Vec::new();
        let declared = self.declared.iter().map(|name| (0, name.as_str()));
        let builtin = builtins().map(|(agent, (name, ..))| (agent + 1, *name));
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

    /// Add or override a tool (`tools` in the policy file).
    pub fn declare(&mut self, name: &str, kind: Kind, permission: Option<&str>) {
        let subject = match kind {
            Kind::Read | Kind::Edit | Kind::List => SubjectField::OptionalPath,
            Kind::Search => SubjectField::Search,
            Kind::Fetch => SubjectField::Url,
            Kind::Shell => SubjectField::Shell,
            Kind::Task => SubjectField::Agent,
            Kind::ExitPlan => SubjectField::Plan,
            Kind::Think | Kind::Execute | Kind::Other => SubjectField::None,
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
            },
        );
    }

    /// Look a tool up. Unknown tools (MCP tools included) are [`Kind::Other`]
    /// with their own name as permission.
    pub fn lookup(&self, name: &str) -> Cow<'_, ToolSpec> {
        match self.tools.get(name) {
            Some(spec) => Cow::Borrowed(spec),
            None => Cow::Owned(ToolSpec {
                permission: name.to_string(),
                kind: Kind::Other,
                subject: SubjectField::None,
                known: false,
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
    /// Nothing to match: rules see `*`.
    None,
}

/// Read the subject of a call. `Err` names what is missing or malformed.
pub fn extract(spec: &ToolSpec, input: &Map<String, Value>) -> Result<Subject, String> {
    match spec.subject {
        SubjectField::Shell => shell(input).map(Subject::Shell),
        SubjectField::Path => match first_string(input, PATH_FIELDS)? {
            Some(path) => Ok(Subject::Paths(vec![path])),
            // A listing without a path lists the working directory.
            None if spec.kind == Kind::List => Ok(Subject::Paths(vec![".".to_string()])),
            None if spec.known && spec.kind != Kind::Other => Err(format!(
                "the input has no path (expected one of {})",
                PATH_FIELDS.join(", ")
            )),
            None => Ok(Subject::None),
        },
        SubjectField::OptionalPath => Ok(first_string(input, PATH_FIELDS)?
            .map(|path| Subject::Paths(vec![path]))
            .unwrap_or(Subject::None)),
        SubjectField::Paths => {
            for field in ["paths", "file_paths"] {
                if let Some(value) = input.get(field) {
                    let paths = string_array(value, field)?;
                    if paths.is_empty() {
                        return Err(format!("`{field}` is empty"));
                    }
                    return Ok(Subject::Paths(paths));
                }
            }
            match first_string(input, PATH_FIELDS)? {
                Some(path) => Ok(Subject::Paths(vec![path])),
                None => Err("the input has no `paths`".to_string()),
            }
        }
        SubjectField::Patch => {
            let text = first_string(input, &["input", "patch", "patchText"])?
                .ok_or_else(|| "the input has no patch text".to_string())?;
            let files = patch_files(&text);
            if files.is_empty() {
                return Err("the patch names no file".to_string());
            }
            Ok(Subject::Paths(files))
        }
        SubjectField::Url => Ok(first_string(input, &["url", "query"])?
            .map(Subject::Text)
            .unwrap_or(Subject::None)),
        SubjectField::Search => Ok(Subject::Search {
            pattern: first_string(input, &["pattern", "query"])?.unwrap_or_else(|| "*".into()),
            path: first_string(input, PATH_FIELDS)?,
        }),
        SubjectField::Agent => Ok(first_string(input, &["subagent_type", "description"])?
            .map(Subject::Text)
            .unwrap_or(Subject::None)),
        SubjectField::Plan => Ok(first_string(input, &["plan"])?
            .map(Subject::Text)
            .unwrap_or(Subject::None)),
        SubjectField::None => Ok(Subject::None),
    }
}

const PATH_FIELDS: &[&str] = &[
    "file_path",
    "filePath",
    "path",
    "absolute_path",
    "notebook_path",
];

fn shell(input: &Map<String, Value>) -> Result<ShellInput, String> {
    for field in ["command", "cmd"] {
        match input.get(field) {
            None | Some(Value::Null) => continue,
            Some(Value::String(text)) => return Ok(ShellInput::Text(text.clone())),
            Some(value @ Value::Array(_)) => {
                let argv = string_array(value, field)?;
                if argv.is_empty() {
                    return Err(format!("`{field}` is an empty argv"));
                }
                return Ok(ShellInput::Argv(argv));
            }
            Some(_) => return Err(format!("`{field}` must be a string or an array of strings")),
        }
    }
    Err("the input has no `command`".to_string())
}

fn first_string(input: &Map<String, Value>, fields: &[&str]) -> Result<Option<String>, String> {
    for field in fields {
        match input.get(*field) {
            None | Some(Value::Null) => continue,
            Some(Value::String(text)) => return Ok(Some(text.clone())),
            Some(_) => return Err(format!("`{field}` must be a string")),
        }
    }
    Ok(None)
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
            ("Write", json!({"content": "x"}), "edit error: the input has no path (expected one of file_path, filePath, path, absolute_path, notebook_path)"),
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
            ("ExitPlanMode", json!({"plan": "1. do"}), r#"exit_plan_mode ExitPlan Text("1. do")"#),
            ("TodoWrite", json!({"todos": []}), "todowrite Think None"),
            ("mcp__github__get_issue", json!({"number": 1}), "mcp__github__get_issue Other None"),
            ("frobnicate", json!({}), "frobnicate Other None"),
        ];
        for (tool, input, expected) in cases {
            check(tool, input, expected);
        }
    }

    /// A few names per kind: policy-declared first, then one per agent in turn,
    /// case-insensitive duplicates skipped, shown in table order.
    #[test]
    fn examples_of_each_kind() {
        let mut registry = Registry::default();
        registry.declare("my_search", Kind::Search, None);
        registry.declare("Bash", Kind::Execute, None);
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
        registry.declare("my_search", Kind::Search, None);
        registry.declare("Bash", Kind::Execute, Some("deploy"));
        registry.declare("mcp__db__query", Kind::Read, None);
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
}
