//! `toolgate init` and `toolgate doctor`: where each agent keeps its hook
//! settings, what toolgate's entry there looks like, and how it is merged
//! into a file the user already has ([`edit`]) or checked ([`doctor`]).
//!
//! The agents' quirks live here, once: Claude Code and Codex take the hook
//! timeout in seconds, Gemini CLI and qwen-code in milliseconds; Gemini CLI
//! calls its event `BeforeTool` and matches tools by regular expression
//! (`.*`); Codex keeps TOML (`config.toml`) and runs a hook only once it is
//! trusted (`hooks.state."KEY".trusted_hash`); Gemini CLI runs project hooks
//! only in a trusted folder. OpenCode has no command hook: `init` writes it
//! a plugin that runs toolgate's hook ([`opencode`]).

pub mod codex_trust;
pub mod doctor;
pub mod edit;
pub mod opencode;

use std::path::{Path, PathBuf};

/// The agents `toolgate init` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    /// Claude Code: `.claude/settings.json`, `PreToolUse`, seconds.
    Claude,
    /// Codex: `config.toml`, `[[hooks.PreToolUse]]`, seconds, trust.
    Codex,
    /// Gemini CLI: `.gemini/settings.json`, `BeforeTool`, milliseconds.
    Gemini,
    /// qwen-code: `.qwen/settings.json`, `PreToolUse`, milliseconds.
    Qwen,
    /// OpenCode: a plugin (`.opencode/plugins/toolgate.js`) that runs the
    /// hook, see [`opencode`].
    Opencode,
}

impl Agent {
    /// Every agent `init` wires, in the order `doctor` reports them.
    pub const HOOKED: [Agent; 5] = [
        Agent::Claude,
        Agent::Codex,
        Agent::Gemini,
        Agent::Qwen,
        Agent::Opencode,
    ];

    /// The name `toolgate hook` takes.
    pub fn name(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
            Agent::Gemini => "gemini",
            Agent::Qwen => "qwen",
            Agent::Opencode => "opencode",
        }
    }

    /// The agent's own name, for messages.
    pub fn title(self) -> &'static str {
        match self {
            Agent::Claude => "Claude Code",
            Agent::Codex => "Codex",
            Agent::Gemini => "Gemini CLI",
            Agent::Qwen => "qwen-code",
            Agent::Opencode => "OpenCode",
        }
    }

    /// The event toolgate's hook is registered under.
    pub fn event(self) -> &'static str {
        match self {
            Agent::Gemini => "BeforeTool",
            _ => "PreToolUse",
        }
    }

    /// The matcher that covers every tool (Gemini CLI's is a regular
    /// expression).
    pub fn match_all(self) -> &'static str {
        match self {
            Agent::Gemini => ".*",
            _ => "*",
        }
    }

    /// Whether `matcher` (absent: `None`) covers every tool.
    pub fn covers_all(self, matcher: Option<&str>) -> bool {
        match matcher {
            None | Some("") | Some("*") => true,
            Some(".*") => self == Agent::Gemini,
            Some(_) => false,
        }
    }

    /// The hook timeout for a hook that may wait `secs` seconds, in the
    /// agent's unit (seconds for Claude Code and Codex, milliseconds for
    /// Gemini CLI and qwen-code).
    pub fn timeout(self, secs: u64) -> u64 {
        match self {
            Agent::Gemini | Agent::Qwen => secs * 1000,
            _ => secs,
        }
    }
}

/// Which settings file: the project's or the user's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// The project at this directory.
    Project(PathBuf),
    /// The user's own settings.
    User,
}

impl Place {
    /// `project` or `user`, for messages.
    pub fn label(&self) -> &'static str {
        match self {
            Place::Project(_) => "project",
            Place::User => "user",
        }
    }
}

/// Where the user's files are: the environment `init` and `doctor` read,
/// taken once so that tests can give their own.
#[derive(Debug, Clone)]
pub struct Home {
    /// `$HOME`.
    pub home: PathBuf,
    /// `$CODEX_HOME`, else `~/.codex`.
    pub codex_home: PathBuf,
    /// `$XDG_CONFIG_HOME`, when set (OpenCode's user plugins are under it).
    pub config_home: Option<PathBuf>,
}

impl Home {
    /// From the environment (`HOME`, `CODEX_HOME`); `None` without `HOME`.
    pub fn from_env() -> Option<Home> {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|value| !value.is_empty())
                .map(PathBuf::from)
        };
        let home = var("HOME")?;
        let codex_home = var("CODEX_HOME").unwrap_or_else(|| home.join(".codex"));
        let config_home = var("XDG_CONFIG_HOME");
        Some(Home {
            home,
            codex_home,
            config_home,
        })
    }

    /// The settings file `agent` reads at `place` (for OpenCode, the
    /// plugin file `init` writes).
    pub fn settings_file(&self, agent: Agent, place: &Place) -> Option<PathBuf> {
        let base = match place {
            Place::Project(dir) => dir.clone(),
            Place::User => self.home.clone(),
        };
        Some(match (agent, place) {
            (Agent::Claude, _) => base.join(".claude/settings.json"),
            (Agent::Gemini, _) => base.join(".gemini/settings.json"),
            (Agent::Qwen, _) => base.join(".qwen/settings.json"),
            (Agent::Codex, Place::User) => self.codex_home.join("config.toml"),
            (Agent::Codex, Place::Project(_)) => base.join(".codex/config.toml"),
            (Agent::Opencode, Place::Project(_)) => base.join(".opencode/plugins/toolgate.js"),
            (Agent::Opencode, Place::User) => {
                opencode::user_plugins(&self.home, self.config_home.as_deref()).join("toolgate.js")
            }
        })
    }
}

/// Why `init` or `doctor` could not do its work on a settings file.
#[derive(Debug)]
pub enum SetupError {
    /// The file could not be read or written.
    Io {
        /// The file.
        file: PathBuf,
        /// What was being done (`read`, `write`, `back up`).
        doing: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not JSON (or TOML) that the agent would read.
    Parse {
        /// The file.
        file: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// The file is valid but has a shape toolgate will not edit (a key
    /// that should hold an object holds a string, ...).
    Shape {
        /// The file.
        file: PathBuf,
        /// The key and what it holds.
        message: String,
    },
    /// OpenCode has no hook to install.
    NoHook(Agent),
    /// `HOME` is not set.
    NoHome,
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetupError::Io { file, doing, source } => {
                write!(f, "{}: cannot {doing} it: {source}", file.display())
            }
            SetupError::Parse { file, message } => {
                write!(f, "{}: cannot be parsed: {message}", file.display())
            }
            SetupError::Shape { file, message } => write!(
                f,
                "{}: {message}; toolgate will not change it, edit it by hand",
                file.display()
            ),
            SetupError::NoHook(agent) => write!(
                f,
                "{} has no pre-tool hook to install: toolgate answers its permission questions through the OpenCode server bridge (`opencode serve`, then `opencode_server_bridge --url http://127.0.0.1:4096 --socket PATH`, see docs/bridges.md), and `toolgate serve --opencode` reads its `permission` config as the policy (see docs/modes-and-policy.md); nothing was written",
                agent.title()
            ),
            SetupError::NoHome => f.write_str("HOME is not set: cannot find the user's settings"),
        }
    }
}

impl std::error::Error for SetupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SetupError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The hook command toolgate writes: `PROGRAM hook AGENT [--socket PATH]`,
/// each word quoted for the shell the agent runs it with.
pub fn hook_command(program: &Path, agent: Agent, socket: Option<&Path>) -> String {
    // OpenCode's plugin speaks Claude Code's hook format (with OpenCode's
    // own tool names).
    let format = match agent {
        Agent::Opencode => Agent::Claude,
        agent => agent,
    };
    let mut words = vec![
        quote(&program.to_string_lossy()),
        "hook".to_string(),
        format.name().to_string(),
    ];
    if let Some(socket) = socket {
        words.push("--socket".to_string());
        words.push(quote(&socket.to_string_lossy()));
    }
    words.join(" ")
}

/// How long the hook may wait, in seconds: with a broker, above the hook's
/// default `--wait` of 50 s (a person may be answering); else 30 s, far
/// above the milliseconds an in-process decision takes.
pub fn hook_wait(socket: Option<&Path>) -> u64 {
    if socket.is_some() {
        60
    } else {
        30
    }
}

/// `word` as the shell reads it back: as is when it holds only plain
/// characters, else in single quotes.
pub fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The words of a hook command as a POSIX shell splits them (quotes and
/// backslashes; no expansion). `None` when the command is more than words
/// (an unclosed quote).
pub fn split_command(command: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        other => word.push(other),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => word.push(chars.next()?),
                        other => word.push(other),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.push(chars.next()?);
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            other => {
                in_word = true;
                word.push(other);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

/// Whether `command` runs `toolgate hook …` (the program's file name is
/// `toolgate`, and its first argument `hook`).
pub fn is_toolgate_hook(command: &str) -> bool {
    split_command(command).is_some_and(|words| {
        words.len() >= 2
            && Path::new(&words[0]).file_name().and_then(|n| n.to_str()) == Some("toolgate")
            && words[1] == "hook"
    })
}

/// The executable `name` in the directories of `path` (a `PATH` value).
pub fn find_on_path(name: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path?)
        .map(|dir| dir.join(name))
        .find(|candidate| executable(candidate))
}

/// Whether `path` is a file someone may execute.
pub fn executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

/// A line diff of `before` and `after` (`-` removed, `+` added, two lines
/// of context around each change), from the longest common subsequence of
/// their lines. Empty when they are equal.
pub fn diff(before: &str, after: &str) -> String {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    // lcs[i][j]: the common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', a[i]));
            i += 1;
        } else {
            ops.push(('+', b[j]));
            j += 1;
        }
    }
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k].0 != ' ').collect();
    let near = |k: usize| changed.iter().any(|&c| c.abs_diff(k) <= 2);
    let mut out = String::new();
    let mut skipped = false;
    for (k, (mark, line)) in ops.iter().enumerate() {
        if near(k) {
            if skipped {
                out.push_str("  ...\n");
                skipped = false;
            }
            out.push(*mark);
            out.push(' ');
            out.push_str(line);
            out.push('\n');
        } else if !out.is_empty() || k > 0 {
            skipped = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_round_trips() {
        for word in ["/usr/bin/toolgate", "/a b/toolgate", "it's", "", "$HOME"] {
            let quoted = quote(word);
            assert_eq!(
                split_command(&quoted),
                Some(vec![word.to_string()]),
                "{quoted}"
            );
        }
        assert_eq!(quote("/usr/bin/toolgate"), "/usr/bin/toolgate");
    }

    #[test]
    fn toolgate_hooks_are_recognised() {
        let table = [
            ("toolgate hook claude", true),
            ("/opt/bin/toolgate hook gemini --mode plan", true),
            ("'/my dir/toolgate' hook qwen", true),
            ("toolgate serve", false),
            ("my-linter --fix", false),
            ("toolgate-other hook claude", false),
        ];
        for (command, want) in table {
            assert_eq!(is_toolgate_hook(command), want, "{command}");
        }
    }

    #[test]
    fn diff_shows_changed_lines() {
        assert_eq!(diff("a\nb\n", "a\nb\n"), "");
        assert_eq!(diff("a\nb\nc\n", "a\nx\nc\n"), "  a\n- b\n+ x\n  c\n");
        assert_eq!(diff("", "x\n"), "+ x\n");
    }
}
