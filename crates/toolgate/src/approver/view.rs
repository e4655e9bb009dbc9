//! What a person needs to decide a `permission_request`, as lines of text,
//! and the `permission_response` their choice makes. Pure: the only outside
//! input is a function that reads a file (for a write's diff), passed in.
//!
//! Both human approvers (`toolgate approve` and `serve --approver tty`) show
//! these lines; the program approver (`--approver command:`) gets the
//! request itself. Every text of the request in them has gone through
//! [`crate::display::shown`] (blocks and diffs line by line, through
//! [`crate::display::shown_lines`]): no line holds a control character.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use toolgate_protocol::{PermissionRequest, PermissionResponse, Reply};
use toolgate_shell::{analyze, Options, Script};

use crate::display::{shown, shown_lines, shown_list};

/// How a line is shown (a terminal colours it; a test reads the tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// Ordinary text.
    Plain,
    /// A heading (`Command`, `Diff`, ...).
    Heading,
    /// A line a diff adds.
    Added,
    /// A line a diff removes.
    Removed,
    /// A diff's hunk header or a note.
    Dim,
    /// Why something is not read-only; a warning.
    Warn,
}

/// One line of a question's detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// How it is shown.
    pub tone: Tone,
    /// The text, without a newline.
    pub text: String,
}

impl Line {
    fn new(tone: Tone, text: impl Into<String>) -> Line {
        Line {
            tone,
            text: text.into(),
        }
    }
}

/// What a file read for a diff gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileRead {
    /// The file's text.
    Text(String),
    /// There is no such file: a write creates it.
    Missing,
    /// The file is larger than [`MAX_DIFF_BYTES`] (its size).
    TooLarge(u64),
    /// It could not be read, or is not UTF-8 (why).
    Unreadable(String),
}

/// The largest file (or text) a diff is computed for.
pub const MAX_DIFF_BYTES: u64 = 256 * 1024;

/// The most lines of one text block (a patch, new content) shown.
pub const MAX_SHOWN_LINES: usize = 400;

/// Read `path` for a diff, bounded by [`MAX_DIFF_BYTES`].
pub fn read_file(path: &Path) -> FileRead {
    match std::fs::metadata(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => FileRead::Missing,
        Err(error) => FileRead::Unreadable(error.to_string()),
        Ok(meta) if !meta.is_file() => FileRead::Unreadable("not a regular file".to_string()),
        Ok(meta) if meta.len() > MAX_DIFF_BYTES => FileRead::TooLarge(meta.len()),
        Ok(_) => {
            // Bounded again while reading: a size can lie (`/proc` files say 0).
            use std::io::Read;
            let mut bytes = Vec::new();
            let read = std::fs::File::open(path)
                .and_then(|file| file.take(MAX_DIFF_BYTES + 1).read_to_end(&mut bytes));
            match read {
                Err(error) => FileRead::Unreadable(error.to_string()),
                Ok(_) if bytes.len() as u64 > MAX_DIFF_BYTES => {
                    FileRead::TooLarge(bytes.len() as u64)
                }
                Ok(_) => match String::from_utf8(bytes) {
                    Ok(text) => FileRead::Text(text),
                    Err(_) => FileRead::Unreadable("not UTF-8 text".to_string()),
                },
            }
        }
    }
}

/// Another project's question (from a broker's shared store, to a
/// connection that follows every project): `HOST:PROJECT`, as its
/// `metadata` names them.
pub fn project_of(request: &PermissionRequest) -> Option<String> {
    let project = request.metadata.get("project").and_then(Value::as_str)?;
    Some(match request.metadata.get("host").and_then(Value::as_str) {
        Some(host) => format!("{host}:{project}"),
        None => project.to_string(),
    })
}

/// Another project's files are on its broker's host: a write is shown as
/// its new content.
pub fn elsewhere(_: &Path) -> FileRead {
    FileRead::Unreadable("the file is on another project's broker's host".to_string())
}

/// One line for a list of questions: another project's `HOST:PROJECT`,
/// session (and parent), client, tool, title.
pub fn summary(request: &PermissionRequest) -> String {
    let mut line = match project_of(request) {
        Some(project) => format!("{} ", shown(&project)),
        None => String::new(),
    };
    line.push_str(&shown(&request.session_id));
    if let Some(parent) = &request.parent_id {
        line.push_str(&format!(" (in {})", shown(parent)));
    }
    if let Some(client) = request.metadata.get("client").and_then(Value::as_str) {
        line.push_str(&format!(" [{}]", shown(client)));
    }
    line.push_str(&format!(
        "  {}  {}",
        shown(&tool_label(request)),
        shown(&request.title)
    ));
    line
}

/// `edit (Write)`: the permission, and the agent's tool name when it differs.
fn tool_label(request: &PermissionRequest) -> String {
    if request.tool_name.is_empty() || request.tool_name == request.permission {
        request.permission.clone()
    } else {
        format!("{} ({})", request.permission, request.tool_name)
    }
}

/// Everything shown for one question, `level` being the `alwaysOptions` entry
/// an `always` answer would grant (see [`default_level`]). `root` resolves a
/// relative path for a write's diff (the call's `cwd` comes first).
pub fn detail(
    request: &PermissionRequest,
    level: usize,
    root: Option<&Path>,
    read: &dyn Fn(&Path) -> FileRead,
) -> Vec<Line> {
    let mut lines = about(request, root, read);
    always_lines(&mut lines, request, level);
    lines
}

/// What [`detail`] shows before the `always` options: the session, tool,
/// title, why it asks, and the command, diff, plan or input. The web page
/// shows these and offers the options as buttons of its own.
pub fn about(
    request: &PermissionRequest,
    root: Option<&Path>,
    read: &dyn Fn(&Path) -> FileRead,
) -> Vec<Line> {
    let mut lines = Vec::new();
    if let Some(project) = project_of(request) {
        lines.push(Line::new(
            Tone::Heading,
            format!("project  {}", shown(&project)),
        ));
    }
    let mut session = format!("session  {}", shown(&request.session_id));
    if let Some(parent) = &request.parent_id {
        session.push_str(&format!("  (sub-session of {})", shown(parent)));
    }
    lines.push(Line::new(Tone::Plain, session));
    if let Some(client) = request.metadata.get("client").and_then(Value::as_str) {
        lines.push(Line::new(
            Tone::Plain,
            format!("client   {}", shown(client)),
        ));
    }
    lines.push(Line::new(
        Tone::Plain,
        format!("tool     {}", shown(&tool_label(request))),
    ));
    lines.push(Line::new(
        Tone::Plain,
        format!("title    {}", shown(&request.title)),
    ));
    if let Some(reason) = request.metadata.get("reason").and_then(Value::as_str) {
        lines.push(Line::new(Tone::Warn, format!("asks     {}", shown(reason))));
    }
    let input = request.metadata.get("input").and_then(Value::as_object);
    if let Some(plan) = request.metadata.get("plan").and_then(Value::as_str) {
        lines.push(Line::new(Tone::Heading, "Plan"));
        block(&mut lines, plan, Tone::Plain);
    } else if let Some(calls) = request.metadata.get("calls").and_then(Value::as_array) {
        lines.push(Line::new(Tone::Heading, "Calls in this batch that ask"));
        for call in calls {
            let get = |key: &str| call.get(key).and_then(Value::as_str).unwrap_or("?");
            lines.push(Line::new(
                Tone::Plain,
                format!(
                    "  {} {}: {}",
                    shown(get("tool")),
                    shown(get("call")),
                    shown(get("reason"))
                ),
            ));
        }
    } else if let Some(script) = command_of(request) {
        command_lines(&mut lines, &script);
    } else if request.permission == "edit" {
        if let Some(input) = input {
            edit_lines(&mut lines, request, input, root, read);
        }
    } else if let Some(input) = input {
        lines.push(Line::new(Tone::Heading, "Input"));
        let text = serde_json::to_string_pretty(input).unwrap_or_default();
        block(&mut lines, &text, Tone::Plain);
    }
    lines
}

/// The shell command a question is about: `metadata.command` (set by the
/// broker for every shell call), else the input's `command`/`cmd` (a string,
/// or an argv list).
enum Shell {
    Text(String),
    Argv(Vec<String>),
}

fn command_of(request: &PermissionRequest) -> Option<Shell> {
    if let Some(text) = request.metadata.get("command").and_then(Value::as_str) {
        return Some(Shell::Text(text.to_string()));
    }
    if request.permission == "edit" {
        return None;
    }
    let input = request.metadata.get("input")?.as_object()?;
    for key in ["command", "cmd"] {
        match input.get(key) {
            Some(Value::String(text)) => return Some(Shell::Text(text.clone())),
            Some(Value::Array(words)) => {
                let argv: Option<Vec<String>> = words
                    .iter()
                    .map(|word| word.as_str().map(str::to_string))
                    .collect();
                if let Some(argv) = argv {
                    return Some(Shell::Argv(argv));
                }
            }
            _ => {}
        }
    }
    None
}

fn command_lines(lines: &mut Vec<Line>, script: &Shell) {
    let options = Options::default();
    let analysis = match script {
        Shell::Text(text) => {
            lines.push(Line::new(Tone::Heading, "Command"));
            block(lines, text, Tone::Plain);
            analyze(Script::Text(text), &options)
        }
        Shell::Argv(argv) => {
            lines.push(Line::new(Tone::Heading, "Command (argv)"));
            lines.push(Line::new(Tone::Plain, format!("  {}", shown_list(argv))));
            analyze(Script::Argv(argv), &options)
        }
    };
    lines.push(Line::new(Tone::Heading, "Simple commands"));
    for command in &analysis.commands {
        match &command.verdict {
            Ok(()) => lines.push(Line::new(
                Tone::Plain,
                format!("  {}   (reads only)", shown(&command.text)),
            )),
            Err(refusal) => lines.push(Line::new(
                Tone::Warn,
                format!(
                    "  {}   not read-only: {}",
                    shown(&command.text),
                    shown(&refusal.reason)
                ),
            )),
        }
    }
    match &analysis.refusal {
        None => lines.push(Line::new(Tone::Dim, "  every part only reads")),
        Some(refusal) if analysis.commands.iter().all(|c| c.verdict.is_ok()) => {
            lines.push(Line::new(
                Tone::Warn,
                format!("  not read-only: {}", shown(&refusal.reason)),
            ))
        }
        Some(_) => {}
    }
}

/// The first string among `keys` in `input`.
fn field<'a>(input: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a str> {
    keys.iter()
        .find_map(|key| input.get(*key).and_then(Value::as_str))
}

/// The registry's path fields (toolgate-policy's `PATH_FIELDS`).
const PATH_KEYS: &[&str] = &[
    "file_path",
    "filePath",
    "path",
    "absolute_path",
    "notebook_path",
    "dir_path",
    "target_file",
];
const OLD_KEYS: &[&str] = &["old_string", "oldString", "old_str", "search"];
const NEW_KEYS: &[&str] = &["new_string", "newString", "new_str", "replace"];
const CONTENT_KEYS: &[&str] = &["content", "contents", "file_text", "text"];
const PATCH_KEYS: &[&str] = &["patch", "patchText", "diff", "input", "command"];

fn edit_lines(
    lines: &mut Vec<Line>,
    request: &PermissionRequest,
    input: &Map<String, Value>,
    root: Option<&Path>,
    read: &dyn Fn(&Path) -> FileRead,
) {
    let path = request
        .metadata
        .get("filePath")
        .and_then(Value::as_str)
        .or_else(|| field(input, PATH_KEYS))
        .unwrap_or(&request.title)
        .to_string();
    let edits: Vec<&Map<String, Value>> = match input.get("edits").and_then(Value::as_array) {
        Some(edits) => edits.iter().filter_map(Value::as_object).collect(),
        None => vec![input],
    };
    let pairs: Vec<(&str, &str)> = edits
        .iter()
        .filter_map(|edit| Some((field(edit, OLD_KEYS)?, field(edit, NEW_KEYS)?)))
        .collect();
    if !pairs.is_empty() {
        lines.push(Line::new(
            Tone::Heading,
            format!("Diff of {}", shown(&path)),
        ));
        for (old, new) in pairs {
            diff_lines(lines, old, new);
        }
        return;
    }
    if let Some(content) = field(input, CONTENT_KEYS) {
        let cwd = request
            .metadata
            .get("cwd")
            .and_then(Value::as_str)
            .map(Path::new);
        let full = resolve(&path, cwd.or(root));
        match read(&full) {
            FileRead::Text(old) => {
                lines.push(Line::new(
                    Tone::Heading,
                    format!("Diff of {} (on disk → new content)", shown(&path)),
                ));
                diff_lines(lines, &old, content);
            }
            FileRead::Missing => {
                lines.push(Line::new(
                    Tone::Heading,
                    format!("New file {}", shown(&path)),
                ));
                block(lines, content, Tone::Added);
            }
            FileRead::TooLarge(size) => {
                lines.push(Line::new(
                    Tone::Heading,
                    format!(
                        "Replaces {} ({size} bytes: too large to diff)",
                        shown(&path)
                    ),
                ));
                block(lines, content, Tone::Added);
            }
            FileRead::Unreadable(why) => {
                lines.push(Line::new(
                    Tone::Heading,
                    format!(
                        "Replaces {} (cannot read it: {})",
                        shown(&path),
                        shown(&why)
                    ),
                ));
                block(lines, content, Tone::Added);
            }
        }
        return;
    }
    if let Some(patch) = field(input, PATCH_KEYS) {
        lines.push(Line::new(Tone::Heading, "Patch"));
        for (count, text) in shown_lines(patch).enumerate() {
            if count == MAX_SHOWN_LINES {
                lines.push(Line::new(Tone::Dim, "  … (patch cut)"));
                break;
            }
            let tone = if text.starts_with("+++") || text.starts_with("---") {
                Tone::Heading
            } else if text.starts_with('+') {
                Tone::Added
            } else if text.starts_with('-') {
                Tone::Removed
            } else if text.starts_with("@@") || text.starts_with("***") {
                Tone::Dim
            } else {
                Tone::Plain
            };
            lines.push(Line::new(tone, text));
        }
        return;
    }
    lines.push(Line::new(Tone::Heading, "Input"));
    let text = serde_json::to_string_pretty(input).unwrap_or_default();
    block(lines, &text, Tone::Plain);
}

fn resolve(path: &str, base: Option<&Path>) -> PathBuf {
    let path = Path::new(path);
    match base {
        Some(base) if path.is_relative() => base.join(path),
        _ => path.to_path_buf(),
    }
}

/// A text block, indented, cut at [`MAX_SHOWN_LINES`].
fn block(lines: &mut Vec<Line>, text: &str, tone: Tone) {
    let mut rows = shown_lines(text);
    for line in rows.by_ref().take(MAX_SHOWN_LINES) {
        lines.push(Line::new(tone, format!("  {line}")));
    }
    let more = rows.count();
    if more > 0 {
        lines.push(Line::new(Tone::Dim, format!("  … ({more} more lines)")));
    }
}

/// The lines of a unified diff of `old` → `new` (3 lines of context).
fn diff_lines(lines: &mut Vec<Line>, old: &str, new: &str) {
    if old.len() as u64 > MAX_DIFF_BYTES || new.len() as u64 > MAX_DIFF_BYTES {
        lines.push(Line::new(Tone::Dim, "  (too large to diff; new text:)"));
        block(lines, new, Tone::Added);
        return;
    }
    let old = shown_lines(old).collect::<Vec<_>>().join("\n");
    let new = shown_lines(new).collect::<Vec<_>>().join("\n");
    for line in unified(&old, &new, 3) {
        let tone = match line.as_bytes().first() {
            Some(b'+') => Tone::Added,
            Some(b'-') => Tone::Removed,
            Some(b'@') => Tone::Dim,
            _ => Tone::Plain,
        };
        lines.push(Line::new(tone, line));
    }
}

/// One step of a line diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Same(usize, usize),
    Del(usize),
    Add(usize),
}

/// The most cells of the longest-common-subsequence table; beyond it the
/// diff is "all removed, all added" (still correct, just not minimal).
const MAX_TABLE: usize = 4_000_000;

/// A unified diff of two texts, line by line, with `context` lines around
/// each change: `@@ -a,b +c,d @@` headers, then ` `, `-`, `+` lines.
/// Equal texts give nothing.
pub fn unified(old: &str, new: &str, context: usize) -> Vec<String> {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    // Common prefix and suffix first: most edits are small.
    let mut head = 0;
    while head < a.len() && head < b.len() && a[head] == b[head] {
        head += 1;
    }
    let mut tail = 0;
    while tail < a.len() - head
        && tail < b.len() - head
        && a[a.len() - 1 - tail] == b[b.len() - 1 - tail]
    {
        tail += 1;
    }
    let (ma, mb) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let mut ops: Vec<Op> = (0..head).map(|i| Op::Same(i, i)).collect();
    let cells = (ma.len() + 1).saturating_mul(mb.len() + 1);
    if cells <= MAX_TABLE {
        // table[i][j]: LCS length of ma[i..] and mb[j..].
        let width = mb.len() + 1;
        let mut table = vec![0u32; cells];
        for i in (0..ma.len()).rev() {
            for j in (0..mb.len()).rev() {
                table[i * width + j] = if ma[i] == mb[j] {
                    table[(i + 1) * width + j + 1] + 1
                } else {
                    table[(i + 1) * width + j].max(table[i * width + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < ma.len() || j < mb.len() {
            if i < ma.len() && j < mb.len() && ma[i] == mb[j] {
                ops.push(Op::Same(head + i, head + j));
                i += 1;
                j += 1;
            } else if i < ma.len()
                && (j == mb.len() || table[(i + 1) * width + j] >= table[i * width + j + 1])
            {
                ops.push(Op::Del(head + i));
                i += 1;
            } else {
                ops.push(Op::Add(head + j));
                j += 1;
            }
        }
    } else {
        ops.extend((0..ma.len()).map(|i| Op::Del(head + i)));
        ops.extend((0..mb.len()).map(|j| Op::Add(head + j)));
    }
    ops.extend((0..tail).map(|k| Op::Same(a.len() - tail + k, b.len() - tail + k)));
    // Group the changes into hunks.
    let changed: Vec<usize> = (0..ops.len())
        .filter(|&k| !matches!(ops[k], Op::Same(..)))
        .collect();
    let mut out = Vec::new();
    let mut k = 0;
    while k < changed.len() {
        let start = changed[k].saturating_sub(context);
        let mut end = changed[k];
        while k < changed.len() && changed[k] <= end + 2 * context + 1 {
            end = changed[k];
            k += 1;
        }
        let end = (end + context + 1).min(ops.len());
        let hunk = &ops[start..end];
        let (mut a0, mut b0, mut na, mut nb) = (None, None, 0, 0);
        for op in hunk {
            match *op {
                Op::Same(i, j) => {
                    a0.get_or_insert(i);
                    b0.get_or_insert(j);
                    na += 1;
                    nb += 1;
                }
                Op::Del(i) => {
                    a0.get_or_insert(i);
                    na += 1;
                }
                Op::Add(j) => {
                    b0.get_or_insert(j);
                    nb += 1;
                }
            }
        }
        // An empty side starts where the other one's change sits.
        let a_start = a0.map_or(start_line(&ops[..start], true), |i| i + 1);
        let b_start = b0.map_or(start_line(&ops[..start], false), |j| j + 1);
        out.push(format!("@@ -{a_start},{na} +{b_start},{nb} @@"));
        for op in hunk {
            match *op {
                Op::Same(i, _) => out.push(format!(" {}", a[i])),
                Op::Del(i) => out.push(format!("-{}", a[i])),
                Op::Add(j) => out.push(format!("+{}", b[j])),
            }
        }
    }
    out
}

/// The line number before a hunk whose side `old` is empty (as diff -u writes it).
fn start_line(before: &[Op], old: bool) -> usize {
    before
        .iter()
        .filter(|op| match op {
            Op::Same(..) => true,
            Op::Del(_) => old,
            Op::Add(_) => !old,
        })
        .count()
}

/// The `alwaysOptions` entry a plain `always` grants: the last (widest).
pub fn default_level(request: &PermissionRequest) -> usize {
    request.always_options.len().saturating_sub(1)
}

fn always_lines(lines: &mut Vec<Line>, request: &PermissionRequest, level: usize) {
    if request.always_options.is_empty() {
        if request.kind.as_deref() == Some("plan") {
            lines.push(Line::new(
                Tone::Heading,
                "always: approves the plan and leaves plan mode",
            ));
        }
        return;
    }
    lines.push(Line::new(
        Tone::Heading,
        "always grants (narrow → wide; ▶ is what always would grant)",
    ));
    for (index, option) in request.always_options.iter().enumerate() {
        let mark = if index == level { "▶" } else { " " };
        let tone = if index == level {
            Tone::Plain
        } else {
            Tone::Dim
        };
        lines.push(Line::new(
            tone,
            format!(
                " {mark} {}. {} {}",
                index + 1,
                shown(&request.permission),
                shown(&option.join(", "))
            ),
        ));
    }
}

/// What a person chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Allow this call.
    Once,
    /// Allow it and grant the `alwaysOptions` entry `level`.
    Always {
        /// The index in `alwaysOptions`.
        level: usize,
        /// How long the grants last, in seconds (`expiresIn`); `None`:
        /// as long as the session keeps them.
        lifetime: Option<u64>,
    },
    /// Deny it, with what the person typed (nothing typed: no message).
    Reject {
        /// The message for the agent.
        message: Option<String>,
    },
}

/// The `permission_response` for a choice. An `always` names `patterns`
/// only when a narrower entry than the widest was chosen (the widest is what
/// a plain `always` grants); a level past the end is the widest.
pub fn answer(request: &PermissionRequest, choice: &Choice) -> PermissionResponse {
    let (response, message, patterns) = match choice {
        Choice::Once => (Reply::Once, None, None),
        Choice::Always { level, .. } => {
            let patterns = if *level < default_level(request) {
                request.always_options.get(*level).cloned()
            } else {
                None
            };
            (Reply::Always, None, patterns)
        }
        Choice::Reject { message } => (
            Reply::Reject,
            message.clone().filter(|text| !text.trim().is_empty()),
            None,
        ),
    };
    PermissionResponse {
        permission_id: request.permission_id.clone(),
        response,
        message,
        scope: None,
        patterns,
        // A plan approval's `always` changes the mode: it has no lifetime.
        expires_in: match choice {
            Choice::Always { lifetime, .. } if request.kind.as_deref() != Some("plan") => *lifetime,
            _ => None,
        },
    }
}

/// The lifetime a timed `always` gives its grants unless told otherwise:
/// 30 minutes.
pub const DEFAULT_LIFETIME: u64 = 30 * 60;

/// A lifetime as typed: a whole number and a unit, `90s`, `10m`, `2h`,
/// `1d` (a bare number is minutes), 1 second to ten years. `None` when it
/// is not one.
pub fn parse_lifetime(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "m"),
    };
    let count: u64 = digits.parse().ok()?;
    let unit = match unit.trim() {
        "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3_600,
        "d" | "day" | "days" => 86_400,
        _ => return None,
    };
    let seconds = count.checked_mul(unit)?;
    (1..=toolgate_protocol::MAX_EXPIRES_IN)
        .contains(&seconds)
        .then_some(seconds)
}

/// A lifetime as an approver shows it: `30 min`, `2 h`, `90 s`, `1 d`.
pub fn lifetime_label(seconds: u64) -> String {
    match seconds {
        s if s % 86_400 == 0 => format!("{} d", s / 86_400),
        s if s % 3_600 == 0 => format!("{} h", s / 3_600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use serde_json::json;

    fn request(value: Value) -> PermissionRequest {
        let mut base = json!({
            "type":"permission_request","timestamp":0,"sessionID":"s","permissionID":"per_1",
            "callID":"c1","tool":"bash","permission":"bash","toolName":"bash","pattern":[],
            "patterns":[],"always":[],"alwaysOptions":[],"title":"t","metadata":{}
        });
        for (key, value) in value.as_object().unwrap() {
            base[key] = value.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    fn text(lines: &[Line]) -> String {
        lines
            .iter()
            .map(|line| format!("{:?}|{}", line.tone, line.text))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn no_files(_: &Path) -> FileRead {
        FileRead::Missing
    }

    #[test]
    fn summaries() {
        let table = [
            (json!({}), "s  bash  t"),
            (
                json!({"parentID":"main","sessionID":"main/agent/a1"}),
                "main/agent/a1 (in main)  bash  t",
            ),
            (
                json!({"metadata":{"client":"claude"},"permission":"edit","toolName":"Write","title":"a\nb"}),
                "s [claude]  edit (Write)  a\\nb",
            ),
            (json!({"title":"x\u{1b}[2Jy"}), "s  bash  x\\x1b[2Jy"),
            // Another project's question (one inbox across projects).
            (
                json!({"metadata":{"project":"/p2","host":"build-7","client":"claude"}}),
                "build-7:/p2 s [claude]  bash  t",
            ),
            (
                json!({"metadata":{"project":"/p\u{1b}[2J"}}),
                "/p\\x1b[2J s  bash  t",
            ),
            (
                json!({"sessionID":"s\u{1b}[2J","parentID":"p\u{202e}","title":"\u{9b}8m"}),
                "s\\x1b[2J (in p\\u{202e})  bash  \\u{9b}8m",
            ),
        ];
        for (input, expected) in table {
            assert_eq!(summary(&request(input.clone())), expected, "{input}");
        }
    }

    #[test]
    fn details_contain() {
        // (request fields, level, lines that must appear in order)
        let table: Vec<(Value, usize, Vec<&str>)> = vec![
            (
                json!({"metadata":{"command":"ls && rm -rf build","reason":"ask mode asks"},"alwaysOptions":[["rm -rf build"],["rm *"]]}),
                1,
                vec![
                    "Warn|asks     ask mode asks",
                    "Heading|Command",
                    "Plain|  ls && rm -rf build",
                    "Heading|Simple commands",
                    "Plain|  ls   (reads only)",
                    "Warn|  rm -rf build   not read-only:",
                    "Dim|   1. bash rm -rf build",
                    "Plain| ▶ 2. bash rm *",
                ],
            ),
            (
                json!({"metadata":{"input":{"cmd":["bash","-lc","cat a > b"]}}}),
                0,
                vec!["Heading|Command (argv)", "Warn|  cat a >b   not read-only:"],
            ),
            (
                json!({"metadata":{"command":"cat x | head -n 3"}}),
                0,
                vec!["Dim|  every part only reads"],
            ),
            (
                json!({"permission":"edit","toolName":"Edit","title":"src/a.rs","metadata":{"filePath":"src/a.rs","input":{"file_path":"src/a.rs","old_string":"one\ntwo\nthree","new_string":"one\n2\nthree"}},"alwaysOptions":[["src/a.rs"],["src/*"],["*"]]}),
                0,
                vec![
                    "Heading|Diff of src/a.rs",
                    "Dim|@@ -1,3 +1,3 @@",
                    "Plain| one",
                    "Removed|-two",
                    "Added|+2",
                    "Plain| three",
                    "Plain| ▶ 1. edit src/a.rs",
                    "Dim|   2. edit src/*",
                ],
            ),
            (
                json!({"permission":"edit","title":"a.rs","metadata":{"input":{"filePath":"a.rs","edits":[{"oldString":"x","newString":"y"},{"oldString":"p","newString":"q"}]}}}),
                0,
                vec!["Removed|-x", "Added|+y", "Removed|-p", "Added|+q"],
            ),
            (
                json!({"permission":"edit","title":"new.txt","metadata":{"input":{"path":"new.txt","content":"hello\n"}}}),
                0,
                vec!["Heading|New file new.txt", "Added|  hello"],
            ),
            (
                json!({"permission":"edit","title":"p","metadata":{"input":{"patchText":"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"}}}),
                0,
                vec![
                    "Heading|Patch",
                    "Heading|--- a/x",
                    "Dim|@@ -1 +1 @@",
                    "Removed|-a",
                    "Added|+b",
                ],
            ),
            (
                json!({"tool":"exit_plan_mode","permission":"exit_plan_mode","kind":"plan","metadata":{"plan":"1. Fix it."}}),
                0,
                vec![
                    "Heading|Plan",
                    "Plain|  1. Fix it.",
                    "Heading|always: approves the plan",
                ],
            ),
            (
                json!({"permission":"webfetch","metadata":{"input":{"url":"https://x"}}}),
                0,
                vec!["Heading|Input", "\"url\": \"https://x\""],
            ),
            (
                json!({"metadata":{"client":"cl\u{7}x","command":"echo \u{1b}[31m"}}),
                0,
                vec!["Plain|client   cl\\x07x", "Plain|  echo \\x1b[31m"],
            ),
        ];
        for (fields, level, wanted) in table {
            let shown = text(&detail(&request(fields.clone()), level, None, &no_files));
            let mut rest = shown.as_str();
            for want in wanted {
                match rest.find(want) {
                    Some(at) => rest = &rest[at + want.len()..],
                    None => panic!("{fields}: {want:?} missing (in order) from\n{shown}"),
                }
            }
        }
    }

    #[test]
    fn write_diffs_against_the_file_on_disk() {
        let req = request(
            json!({"permission":"edit","title":"a.txt","metadata":{"cwd":"/w","input":{"file_path":"a.txt","content":"a\nB\nc\n"}}}),
        );
        let read = |path: &Path| match path.to_str() {
            Some("/w/a.txt") => FileRead::Text("a\nb\nc\n".to_string()),
            _ => FileRead::Unreadable(format!("{path:?}")),
        };
        let shown = text(&detail(&req, 0, Some(Path::new("/root")), &read));
        assert!(shown.contains("Heading|Diff of a.txt (on disk → new content)\nDim|@@ -1,3 +1,3 @@\nPlain| a\nRemoved|-b\nAdded|+B\nPlain| c"), "{shown}");
        let big = |_: &Path| FileRead::TooLarge(999_999);
        let shown = text(&detail(&req, 0, None, &big));
        assert!(shown.contains("999999 bytes: too large to diff"), "{shown}");
    }

    #[test]
    fn reading_files_is_bounded() {
        let dir = std::env::temp_dir().join(format!("toolgate-view-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("small"), "a\n").unwrap();
        std::fs::write(dir.join("big"), vec![b'x'; MAX_DIFF_BYTES as usize + 1]).unwrap();
        std::fs::write(dir.join("binary"), [0xff, 0xfe]).unwrap();
        assert_eq!(read_file(&dir.join("small")), FileRead::Text("a\n".into()));
        assert_eq!(read_file(&dir.join("none")), FileRead::Missing);
        assert_eq!(
            read_file(&dir.join("big")),
            FileRead::TooLarge(MAX_DIFF_BYTES + 1)
        );
        assert_eq!(
            read_file(&dir.join("binary")),
            FileRead::Unreadable("not UTF-8 text".into())
        );
        assert_eq!(
            read_file(&dir),
            FileRead::Unreadable("not a regular file".into())
        );
        assert_eq!(
            read_file(Path::new("/dev/zero")),
            FileRead::Unreadable("not a regular file".into())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn unified_diffs() {
        let table: [(&str, &str, &[&str]); 6] = [
            ("a\nb", "a\nb", &[]),
            ("", "x", &["@@ -0,0 +1,1 @@", "+x"]),
            ("x", "", &["@@ -1,1 +0,0 @@", "-x"]),
            (
                "1\n2\n3\n4\n5\n6\n7\n8\n9\n10",
                "1\n2\n3\n4\n5\n6\n7\n8\n9\nX",
                &["@@ -7,4 +7,4 @@", " 7", " 8", " 9", "-10", "+X"],
            ),
            (
                "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12",
                "A\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\nB",
                &[
                    "@@ -1,4 +1,4 @@",
                    "-1",
                    "+A",
                    " 2",
                    " 3",
                    " 4",
                    "@@ -9,4 +9,4 @@",
                    " 9",
                    " 10",
                    " 11",
                    "-12",
                    "+B",
                ],
            ),
            ("a\nc", "a\nb\nc", &["@@ -1,2 +1,3 @@", " a", "+b", " c"]),
        ];
        for (old, new, want) in table {
            assert_eq!(unified(old, new, 3), want, "{old:?} -> {new:?}");
        }
    }

    #[test]
    fn answers() {
        let req = request(json!({"alwaysOptions":[["git commit -m x"],["git commit *"]]}));
        let table = [
            (
                Choice::Once,
                json!({"permissionID":"per_1","response":"once"}),
            ),
            (
                Choice::Always {
                    level: 1,
                    lifetime: None,
                },
                json!({"permissionID":"per_1","response":"always"}),
            ),
            (
                Choice::Always {
                    level: 9,
                    lifetime: None,
                },
                json!({"permissionID":"per_1","response":"always"}),
            ),
            (
                Choice::Always {
                    level: 0,
                    lifetime: None,
                },
                json!({"permissionID":"per_1","response":"always","patterns":["git commit -m x"]}),
            ),
            (
                Choice::Always {
                    level: 1,
                    lifetime: Some(1800),
                },
                json!({"permissionID":"per_1","response":"always","expiresIn":1800}),
            ),
            (
                Choice::Always {
                    level: 0,
                    lifetime: Some(60),
                },
                json!({"permissionID":"per_1","response":"always","patterns":["git commit -m x"],"expiresIn":60}),
            ),
            (
                Choice::Reject { message: None },
                json!({"permissionID":"per_1","response":"reject"}),
            ),
            (
                Choice::Reject {
                    message: Some("  ".into()),
                },
                json!({"permissionID":"per_1","response":"reject"}),
            ),
            (
                Choice::Reject {
                    message: Some("use cargo".into()),
                },
                json!({"permissionID":"per_1","response":"reject","message":"use cargo"}),
            ),
        ];
        for (choice, want) in table {
            assert_eq!(
                serde_json::to_value(answer(&req, &choice)).unwrap(),
                want,
                "{choice:?}"
            );
        }
        assert_eq!(default_level(&req), 1);
        assert_eq!(default_level(&request(json!({}))), 0);
        // A plan approval's `always` has no lifetime to give.
        let plan = request(json!({"kind":"plan"}));
        let timed = Choice::Always {
            level: 0,
            lifetime: Some(60),
        };
        assert_eq!(
            serde_json::to_value(answer(&plan, &timed)).unwrap(),
            json!({"permissionID":"per_1","response":"always"})
        );
    }

    #[test]
    fn lifetimes_as_typed() {
        let cases = [
            ("30", Some(1_800)),
            ("90s", Some(90)),
            ("10m", Some(600)),
            (" 2h ", Some(7_200)),
            ("1d", Some(86_400)),
            ("3 hours", Some(10_800)),
            ("0", None),
            ("0s", None),
            ("", None),
            ("m", None),
            ("-5m", None),
            ("1.5h", None),
            ("10y", None),
            ("3651d", None),
            ("99999999999999999999d", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_lifetime(text), want, "{text:?}");
        }
        let labels = [
            (1_800, "30 min"),
            (7_200, "2 h"),
            (90, "90 s"),
            (86_400, "1 d"),
        ];
        for (seconds, label) in labels {
            assert_eq!(lifetime_label(seconds), label);
        }
    }
}
