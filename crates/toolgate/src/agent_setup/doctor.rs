//! `toolgate doctor`: whether each agent whose settings are found will
//! really call toolgate before its tool calls. One [`Check`] per question:
//! the settings file parses, a toolgate hook is there with a matcher that
//! covers every tool and a timeout in the agent's unit, its program exists
//! and is executable (or is found on `PATH`), the agent trusts it (Codex's
//! `trusted_hash`, Gemini CLI's trusted folder), the broker it names
//! answers, and the command itself answers a harmless read call.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{executable, split_command, Agent, Home, Place};

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Whether it holds.
    pub ok: bool,
    /// The agent, and where: `claude (project .claude/settings.json)`.
    pub subject: String,
    /// What was found.
    pub what: String,
    /// What to do about it, when it fails.
    pub fix: Option<String>,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mark = if self.ok { "ok  " } else { "FAIL" };
        write!(f, "{mark} {}: {}", self.subject, self.what)?;
        if let Some(fix) = &self.fix {
            write!(f, "; fix: {fix}")?;
        }
        Ok(())
    }
}

/// A toolgate hook found in a settings file.
#[derive(Debug, Clone)]
struct Found {
    group: usize,
    index: usize,
    matcher: Option<String>,
    command: String,
    timeout: Option<u64>,
}

/// What the environment gives the checks (taken once, for tests).
#[derive(Debug, Clone)]
pub struct Context {
    /// The user's files.
    pub home: Home,
    /// The project whose settings are checked.
    pub project: PathBuf,
    /// `PATH`, for a bare `toolgate`.
    pub path: Option<std::ffi::OsString>,
    /// `TOOLGATE_SOCKET`, the socket of a hook given none.
    pub socket: Option<PathBuf>,
    /// `GEMINI_CLI_TRUST_WORKSPACE=true`.
    pub gemini_trusts_workspace: bool,
}

/// Every check for `agents` (every hooked agent when empty). An agent with
/// no settings file at all is not reported; one with settings but no
/// toolgate hook in them fails.
pub fn run(context: &Context, agents: &[Agent]) -> Vec<Check> {
    let agents = if agents.is_empty() {
        Agent::HOOKED.to_vec()
    } else {
        agents.to_vec()
    };
    let mut checks = Vec::new();
    for agent in agents {
        let places = [Place::User, Place::Project(context.project.clone())];
        let mut files = Vec::new();
        let mut hooked = false;
        for place in places {
            let Some(file) = context.home.settings_file(agent, &place) else {
                continue;
            };
            if !file.exists() {
                continue;
            }
            files.push(file.clone());
            let subject = format!("{} ({} {})", agent.name(), place.label(), file.display());
            hooked |= check_file(context, agent, &place, &file, &subject, &mut checks);
        }
        if !files.is_empty() && !hooked {
            let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
            checks.push(Check {
                ok: false,
                subject: agent.name().to_string(),
                what: format!(
                    "no toolgate hook in {}: {} runs its tools ungated",
                    names.join(" or "),
                    agent.title()
                ),
                fix: Some(format!(
                    "toolgate init {} --project (or --user)",
                    agent.name()
                )),
            });
        }
    }
    if checks.is_empty() {
        checks.push(Check {
            ok: false,
            subject: "toolgate".into(),
            what: "no agent's settings were found (Claude Code, Codex, Gemini CLI, qwen-code, OpenCode's toolgate plugin)"
                .into(),
            fix: Some("toolgate init AGENT --project (or --user)".into()),
        });
    }
    checks
}

/// The checks of one settings file; whether it holds a toolgate hook.
fn check_file(
    context: &Context,
    agent: Agent,
    place: &Place,
    file: &Path,
    subject: &str,
    checks: &mut Vec<Check>,
) -> bool {
    let mut say = |ok: bool, what: String, fix: Option<String>| {
        checks.push(Check {
            ok,
            subject: subject.to_string(),
            what,
            fix,
        })
    };
    if agent == Agent::Opencode {
        return check_plugin(context, file, &mut say);
    }
    let settings = match read_settings(agent, file) {
        Ok(settings) => settings,
        Err(err) => {
            say(
                false,
                err,
                Some("fix the file's syntax: the agent cannot read it either".into()),
            );
            return true;
        }
    };
    let found = toolgate_hooks(agent, &settings);
    let Some(hook) = found.first() else {
        return false;
    };
    say(
        true,
        format!("settings parse, toolgate hook in hooks.{}", agent.event()),
        None,
    );
    if found.len() > 1 {
        say(
            false,
            format!(
                "{} toolgate hooks: each call is decided more than once",
                found.len()
            ),
            Some(format!(
                "toolgate init {} --{}",
                agent.name(),
                place.label()
            )),
        );
    }
    if agent.covers_all(hook.matcher.as_deref()) {
        say(
            true,
            format!(
                "matcher {:?} covers every tool",
                hook.matcher.as_deref().unwrap_or("")
            ),
            None,
        );
    } else {
        say(
            false,
            format!(
                "matcher {:?} does not cover every tool: the others run ungated",
                hook.matcher.as_deref().unwrap_or("")
            ),
            Some(format!("set it to \"{}\"", agent.match_all())),
        );
    }
    match (agent, hook.timeout) {
        (Agent::Gemini | Agent::Qwen, Some(ms)) if ms < 1000 => say(
            false,
            format!("timeout {ms} is in milliseconds for {}: the hook times out and the call goes through", agent.title()),
            Some(format!("\"timeout\": {}", agent.timeout(30))),
        ),
        (Agent::Claude | Agent::Codex, Some(secs)) if secs >= 1000 => say(
            false,
            format!("timeout {secs} is in seconds for {}", agent.title()),
            Some(format!("timeout {}", agent.timeout(30))),
        ),
        _ => {}
    }
    let Some(words) = split_command(&hook.command) else {
        say(
            false,
            format!("the command `{}` cannot be read", hook.command),
            None,
        );
        return true;
    };
    if words.get(2).map(String::as_str) != Some(agent.name()) {
        say(
            false,
            format!(
                "the command answers as `toolgate hook {}`, not `{}`",
                words.get(2).map_or("", String::as_str),
                agent.name()
            ),
            Some(format!(
                "toolgate init {} --{}",
                agent.name(),
                place.label()
            )),
        );
    }
    let program_ok = check_program(context, agent, &words[0], &mut say);
    match agent {
        Agent::Codex => {
            check_codex_trust(context, file, hook, &mut say);
            if let Place::Project(dir) = place {
                check_codex_project(context, dir, &mut say);
            }
        }
        Agent::Gemini => {
            if let Place::Project(dir) = place {
                check_gemini_trust(context, dir, &mut say);
            }
        }
        _ => {}
    }
    if program_ok && broker_answers(context, &words, &mut say) {
        dry_run(context, agent, &hook.command, &mut say);
    }
    true
}

/// The broker the hook command `words` asks (its `--socket`, else
/// `TOOLGATE_SOCKET`) answers, or there is none (the hook decides
/// in-process).
fn broker_answers(
    context: &Context,
    words: &[String],
    say: &mut impl FnMut(bool, String, Option<String>),
) -> bool {
    let socket = words
        .iter()
        .position(|w| w == "--socket")
        .and_then(|at| words.get(at + 1))
        .map(PathBuf::from)
        .or_else(|| context.socket.clone());
    match &socket {
        Some(socket) => check_broker(socket, say),
        None => {
            say(
                true,
                "no broker socket: the hook decides in-process".into(),
                None,
            );
            true
        }
    }
}

/// The checks of OpenCode's plugin file (`toolgate.js`); whether it is
/// toolgate's.
fn check_plugin(
    context: &Context,
    file: &Path,
    say: &mut impl FnMut(bool, String, Option<String>),
) -> bool {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(err) => {
            say(false, format!("cannot read it: {err}"), None);
            return true;
        }
    };
    let Some(words) = super::opencode::argv_of(&text).filter(|words| words.len() >= 3) else {
        say(
            false,
            "a toolgate.js that `toolgate init opencode` did not write: OpenCode's calls may run ungated".into(),
            Some("move it aside and run toolgate init opencode".into()),
        );
        return true;
    };
    say(
        true,
        "the plugin runs toolgate's hook before every tool (tool.execute.before)".into(),
        None,
    );
    let program_ok = check_program(context, Agent::Opencode, &words[0], say);
    if program_ok && broker_answers(context, &words, say) {
        let command: Vec<String> = words.iter().map(|word| super::quote(word)).collect();
        // The plugin speaks Claude Code's hook format.
        dry_run(context, Agent::Claude, &command.join(" "), say);
    }
    true
}

/// The settings as JSON (Codex's TOML converted).
fn read_settings(agent: Agent, file: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(file).map_err(|err| format!("cannot read it: {err}"))?;
    if agent == Agent::Codex {
        let table: toml::Table = toml::from_str(&text).map_err(|err| {
            format!(
                "not TOML: {}",
                err.to_string().trim_end().replace('\n', " ")
            )
        })?;
        serde_json::to_value(table).map_err(|err| format!("not TOML: {err}"))
    } else if text.trim().is_empty() {
        Ok(json!({}))
    } else {
        serde_json::from_str(&text).map_err(|err| format!("not JSON: {err}"))
    }
}

/// The toolgate hooks of `hooks.EVENT`, in order.
fn toolgate_hooks(agent: Agent, settings: &Value) -> Vec<Found> {
    let groups = settings
        .get("hooks")
        .and_then(|h| h.get(agent.event()))
        .and_then(Value::as_array);
    let mut found = Vec::new();
    for (group_at, group) in groups.into_iter().flatten().enumerate() {
        let inner = group.get("hooks").and_then(Value::as_array);
        for (index, hook) in inner.into_iter().flatten().enumerate() {
            let Some(command) = hook.get("command").and_then(Value::as_str) else {
                continue;
            };
            if super::is_toolgate_hook(command) {
                found.push(Found {
                    group: group_at,
                    index,
                    matcher: group
                        .get("matcher")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    command: command.to_string(),
                    timeout: hook.get("timeout").and_then(Value::as_u64),
                });
            }
        }
    }
    found
}

/// The hook's program exists and may be run (a bare name: on `PATH`).
fn check_program(
    context: &Context,
    agent: Agent,
    program: &str,
    say: &mut impl FnMut(bool, String, Option<String>),
) -> bool {
    let path = if program.contains('/') {
        let path = PathBuf::from(program);
        path.is_file().then_some(path)
    } else {
        super::find_on_path(program, context.path.as_deref())
    };
    let fix = Some(format!(
        "toolgate init {} (writes the absolute path of the toolgate you run)",
        agent.name()
    ));
    match path {
        None if program.contains('/') => {
            say(
                false,
                format!(
                    "{program} does not exist: {} lets the call through when its hook cannot run",
                    agent.title()
                ),
                fix,
            );
            false
        }
        None => {
            say(
                false,
                format!(
                    "`{program}` is not on PATH: {} lets the call through when its hook cannot run",
                    agent.title()
                ),
                fix,
            );
            false
        }
        Some(path) if !executable(&path) => {
            say(
                false,
                format!("{} is not executable", path.display()),
                Some(format!("chmod +x {}", path.display())),
            );
            false
        }
        Some(path) => {
            say(
                true,
                format!("{} exists and is executable", path.display()),
                None,
            );
            true
        }
    }
}

/// Codex runs a hook only when `hooks.state."FILE:pre_tool_use:I:J"` holds
/// a `trusted_hash` (in the file itself or the user's config.toml).
fn check_codex_trust(
    context: &Context,
    file: &Path,
    hook: &Found,
    say: &mut impl FnMut(bool, String, Option<String>),
) {
    let key = format!(
        "{}:pre_tool_use:{}:{}",
        super::edit::absolute(file).display(),
        hook.group,
        hook.index
    );
    let user = context.home.codex_home.join("config.toml");
    let trusted = [file.to_path_buf(), user]
        .iter()
        .filter_map(|f| read_settings(Agent::Codex, f).ok())
        .any(|s| {
            s.get("hooks")
                .and_then(|h| h.get("state"))
                .and_then(|state| state.get(&key))
                .and_then(|k| k.get("trusted_hash"))
                .is_some()
        });
    if trusted {
        say(
            true,
            format!("Codex trusts the hook (hooks.state.\"{key}\".trusted_hash)"),
            None,
        );
    } else {
        say(
            false,
            format!("Codex has not trusted the hook {key}: it skips it silently"),
            Some(codex_trust_step(&key)),
        );
    }
}

/// Codex reads a project's `.codex/config.toml` only for a project the
/// user's config trusts (`[projects."DIR"] trust_level = "trusted"`, the
/// project or a directory above it).
fn check_codex_project(
    context: &Context,
    project: &Path,
    say: &mut impl FnMut(bool, String, Option<String>),
) {
    let user = context.home.codex_home.join("config.toml");
    if codex_trusts_project(&context.home, project) {
        say(
            true,
            format!("Codex trusts the project {}", project.display()),
            None,
        );
    } else {
        say(
            false,
            format!(
                "Codex does not trust the project {}: it ignores its .codex/config.toml",
                project.display()
            ),
            Some(format!(
                "add [projects.\"{}\"] trust_level = \"trusted\" to {} (Codex asks on its first interactive start there), or: toolgate init codex --user",
                project.display(),
                user.display()
            )),
        );
    }
}

/// Whether the user's Codex config trusts `project` (`[projects."DIR"]
/// trust_level = "trusted"` for it or a directory above it).
pub fn codex_trusts_project(home: &Home, project: &Path) -> bool {
    let user = home.codex_home.join("config.toml");
    let projects = read_settings(Agent::Codex, &user)
        .ok()
        .and_then(|s| s.get("projects").cloned());
    projects
        .as_ref()
        .and_then(Value::as_object)
        .is_some_and(|projects| {
            projects.iter().any(|(dir, entry)| {
                project.starts_with(dir)
                    && entry.get("trust_level").and_then(Value::as_str) == Some("trusted")
            })
        })
}

/// What to do to make Codex trust the hook `key`.
pub fn codex_trust_step(key: &str) -> String {
    format!(
        "trust it once: in `codex app-server`, `hooks/list` gives its `currentHash`, then `config/value/write` keyPath hooks.state.\"{key}\".trusted_hash with that value (or start Codex interactively and trust it when asked; `codex exec --dangerously-bypass-hook-trust` runs it untrusted for one run)"
    )
}

/// Gemini CLI runs project hooks only in a trusted folder.
fn check_gemini_trust(
    context: &Context,
    project: &Path,
    say: &mut impl FnMut(bool, String, Option<String>),
) {
    if context.gemini_trusts_workspace {
        say(
            true,
            "GEMINI_CLI_TRUST_WORKSPACE=true: the project's hooks run".into(),
            None,
        );
        return;
    }
    let file = context.home.home.join(".gemini/trustedFolders.json");
    let folders: Value = std::fs::read_to_string(&file)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);
    let trusted = folders.as_object().is_some_and(|folders| {
        folders.iter().any(|(path, level)| {
            let path = Path::new(path);
            match level.as_str() {
                Some("TRUST_FOLDER") => project.starts_with(path),
                Some("TRUST_PARENT") => path.parent().is_some_and(|p| project.starts_with(p)),
                _ => false,
            }
        })
    });
    if trusted {
        say(
            true,
            format!(
                "{} is a trusted folder ({})",
                project.display(),
                file.display()
            ),
            None,
        );
    } else {
        say(
            false,
            format!("{} is not a trusted folder: Gemini CLI skips its project hooks", project.display()),
            Some(format!(
                "trust it (Gemini CLI asks on its first start there, or add \"{}\": \"TRUST_FOLDER\" to {}), or install the hook for every folder: toolgate init gemini --user",
                project.display(),
                file.display()
            )),
        );
    }
}

/// The broker at `socket` takes a connection and says `ready`.
#[cfg(unix)]
fn check_broker(socket: &Path, say: &mut impl FnMut(bool, String, Option<String>)) -> bool {
    use crate::transport::client::{Client, Endpoint};
    let deadline = Instant::now() + Duration::from_secs(3);
    match Client::connect(
        &Endpoint::Socket(socket.to_path_buf()),
        toolgate_protocol::Role::Agent,
        "toolgate-doctor",
        deadline,
    ) {
        Ok(_) => {
            say(
                true,
                format!("the broker at {} answers", socket.display()),
                None,
            );
            true
        }
        Err(err) => {
            say(
                false,
                err.to_string(),
                Some(format!("toolgate serve --listen unix:{}", socket.display())),
            );
            false
        }
    }
}

/// No socket off Unix.
#[cfg(not(unix))]
fn check_broker(socket: &Path, say: &mut impl FnMut(bool, String, Option<String>)) -> bool {
    say(
        false,
        format!("{}: brokers listen on Unix sockets only", socket.display()),
        None,
    );
    false
}

/// A read call in the agent's own hook format.
fn probe(agent: Agent, project: &Path) -> Value {
    let file = project.join("toolgate-doctor-probe").display().to_string();
    let (event, tool, input) = match agent {
        Agent::Claude => ("PreToolUse", "Read", json!({"file_path": file})),
        Agent::Qwen => ("PreToolUse", "read_file", json!({"file_path": file})),
        Agent::Gemini => ("BeforeTool", "read_file", json!({"file_path": file})),
        Agent::Codex | Agent::Opencode => ("PreToolUse", "Bash", json!({"command": "pwd"})),
    };
    let mut call = json!({
        "session_id": format!("toolgate-doctor-{}", std::process::id()),
        "hook_event_name": event,
        "cwd": project.display().to_string(),
        "tool_name": tool,
        "tool_input": input,
        "tool_use_id": "toolgate-doctor-1",
    });
    if agent != Agent::Gemini {
        call["permission_mode"] = json!("default");
    }
    call
}

/// Run the hook's command as the agent would (`sh -c`), with a read call on
/// stdin, and check that it answers with a decision within 10 s.
fn dry_run(
    context: &Context,
    agent: Agent,
    command: &str,
    say: &mut impl FnMut(bool, String, Option<String>),
) {
    let input = probe(agent, &context.project).to_string();
    let child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(&context.project)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(err) => {
            say(
                false,
                format!("the hook command could not be started: {err}"),
                None,
            );
            return;
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input.as_bytes());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_string(&mut out);
    }
    if let Some(mut stderr) = child.stderr.take() {
        let _ = stderr.read_to_string(&mut err);
    }
    let Some(status) = status else {
        say(
            false,
            "a dry-run read call got no answer within 10 s".into(),
            None,
        );
        return;
    };
    let answer: Option<Value> = serde_json::from_str(out.trim()).ok();
    let decision = answer.as_ref().and_then(|a| {
        a.get("decision")
            .or_else(|| a.pointer("/hookSpecificOutput/permissionDecision"))
            .and_then(Value::as_str)
            .map(|d| {
                let reason = a
                    .get("reason")
                    .or_else(|| a.pointer("/hookSpecificOutput/permissionDecisionReason"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                (d.to_string(), reason.to_string())
            })
    });
    match decision {
        Some((decision, reason)) if status.success() => say(
            true,
            format!("a dry-run read call is decided: {decision} ({reason})"),
            None,
        ),
        _ => say(
            false,
            format!(
                "a dry-run read call got no decision (exit {}, stdout {:?}, stderr {:?})",
                status.code().unwrap_or(-1),
                out.trim(),
                err.trim()
            ),
            None,
        ),
    }
}
