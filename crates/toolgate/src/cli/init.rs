//! `toolgate init AGENT`: merge toolgate's hook into the agent's settings
//! file (see `toolgate::agent_setup`), showing the change; `--dry-run` only
//! shows it.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use toolgate::agent_setup::{self, codex_trust, doctor, edit, Agent, Home, Place};
use toolgate::say;

/// The flags of `toolgate init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// The agent: claude (Claude Code), codex (Codex), gemini (Gemini CLI),
    /// qwen (qwen-code), opencode (OpenCode: a plugin that runs the hook).
    #[arg(value_enum, value_name = "AGENT")]
    agent: InitAgent,
    /// The project's settings (`.claude/settings.json`, `.codex/config.toml`,
    /// `.gemini/settings.json`, `.qwen/settings.json` in the working
    /// directory). The default.
    #[arg(long, conflicts_with = "user")]
    project: bool,
    /// The user's settings (`~/.claude/settings.json`,
    /// `$CODEX_HOME/config.toml`, `~/.gemini/settings.json`,
    /// `~/.qwen/settings.json`).
    #[arg(long)]
    user: bool,
    /// The hook asks the broker listening on this socket (`hook --socket
    /// PATH`); the agent's hook timeout is set to 60 s, above the hook's
    /// default --wait of 50 s.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Codex: the `codex` program whose app-server records the hook's
    /// trust (`hooks/list`, then `config/value/write` of its
    /// `trusted_hash`). [default: `codex` on PATH; without one, the step is
    /// printed instead]
    #[arg(long, value_name = "PATH")]
    codex: Option<PathBuf>,
    /// Show the change; write nothing.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum InitAgent {
    /// Claude Code.
    Claude,
    /// Codex.
    Codex,
    /// Gemini CLI.
    Gemini,
    /// qwen-code.
    Qwen,
    /// OpenCode.
    Opencode,
}

/// `toolgate init`: exit code 0 when the hook is in place (or would be,
/// with --dry-run), 2 when it cannot be.
pub fn run(args: InitArgs) -> ExitCode {
    let agent = match args.agent {
        InitAgent::Claude => Agent::Claude,
        InitAgent::Codex => Agent::Codex,
        InitAgent::Gemini => Agent::Gemini,
        InitAgent::Qwen => Agent::Qwen,
        InitAgent::Opencode => Agent::Opencode,
    };
    let fail = |err: &dyn std::fmt::Display| {
        say!("toolgate init: {err}");
        ExitCode::from(2)
    };
    let Some(home) = Home::from_env() else {
        return fail(&agent_setup::SetupError::NoHome);
    };
    let place = if args.user {
        Place::User
    } else {
        match std::env::current_dir() {
            Ok(dir) => Place::Project(dir),
            Err(err) => return fail(&format!("cannot tell the working directory: {err}")),
        }
    };
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(err) => return fail(&format!("cannot tell where this toolgate is: {err}")),
    };
    let socket = args.socket.as_deref();
    let entry = edit::Entry {
        agent,
        command: agent_setup::hook_command(&program, agent, socket),
        timeout: agent.timeout(agent_setup::hook_wait(socket)),
    };
    let Some(file) = home.settings_file(agent, &place) else {
        return fail(&agent_setup::SetupError::NoHook(agent));
    };
    let change = match edit::plan(&file, &entry) {
        Ok(change) => change,
        Err(err) => return fail(&err),
    };
    let mut out = std::io::stdout().lock();
    let shown = file.display();
    if !change.changed {
        let _ = writeln!(
            out,
            "{shown}: toolgate's hook is already there; nothing to change"
        );
    } else {
        let before = change.before.as_deref().unwrap_or("");
        let _ = writeln!(
            out,
            "{} {shown}:",
            if args.dry_run {
                "would change"
            } else {
                "changing"
            }
        );
        let _ = write!(out, "{}", agent_setup::diff(before, &change.after));
        if args.dry_run {
            let _ = writeln!(out, "--dry-run: nothing written");
        } else {
            match edit::apply(&change) {
                Ok(Some(backup)) => {
                    let _ = writeln!(out, "written; the old file is in {}", backup.display());
                }
                Ok(None) => {
                    let _ = writeln!(out, "written (a new file)");
                }
                Err(err) => return fail(&err),
            }
        }
    }
    let _ = out.flush();
    let mut trusted = false;
    if let (Some(key), false) = (change.trust_key.as_deref(), args.dry_run) {
        let codex = args
            .codex
            .clone()
            .or_else(|| agent_setup::find_on_path("codex", std::env::var_os("PATH").as_deref()));
        if let Some(codex) = codex {
            let cwd = match &place {
                Place::Project(dir) => dir.clone(),
                Place::User => std::env::current_dir().unwrap_or_else(|_| home.home.clone()),
            };
            match codex_trust::trust(&codex, &cwd, key, std::time::Duration::from_secs(60)) {
                Ok(key) => {
                    trusted = true;
                    say!(
                        "toolgate init: Codex ({}) trusts the hook {key}",
                        codex.display()
                    );
                }
                Err(err) => say!(
                    "toolgate init: could not trust the hook with {}: {err}",
                    codex.display()
                ),
            }
        }
    }
    notes(
        agent,
        &place,
        &home,
        change.trust_key.as_deref().filter(|_| !trusted),
    );
    ExitCode::SUCCESS
}

/// What the agent still needs before it runs the hook.
fn notes(agent: Agent, place: &Place, home: &Home, trust_key: Option<&str>) {
    match (agent, place) {
        (Agent::Codex, _) => {
            if let Some(key) = trust_key {
                say!(
                    "toolgate init: Codex runs a hook only once it is trusted, and skips it silently until then: {}",
                    doctor::codex_trust_step(key)
                );
            }
            let untrusted = match place {
                Place::Project(dir) if !doctor::codex_trusts_project(home, dir) => Some(dir),
                _ => None,
            };
            if let Some(dir) = untrusted {
                say!(
                    "toolgate init: Codex reads a project's .codex/config.toml only for a trusted project ([projects.\"{}\"] trust_level = \"trusted\" in {}); `toolgate init codex --user` gates every project",
                    dir.display(),
                    home.codex_home.join("config.toml").display()
                );
            }
        }
        (Agent::Gemini, Place::Project(dir)) => say!(
            "toolgate init: Gemini CLI runs project hooks only in a trusted folder: trust {} (Gemini CLI asks on its first start there; or add it to {} as TRUST_FOLDER), or use `toolgate init gemini --user`",
            dir.display(),
            home.home.join(".gemini/trustedFolders.json").display()
        ),
        _ => {}
    }
    say!("toolgate init: check it with `toolgate doctor`");
}
