//! `toolgate doctor`: check that each configured agent will really call
//! toolgate (see `toolgate::agent_setup::doctor`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use toolgate::agent_setup::doctor::{self, Context};
use toolgate::agent_setup::{Agent, Home};
use toolgate::say;

/// The flags of `toolgate doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Check only these agents (claude, codex, gemini, qwen, opencode). [default: every
    /// agent whose settings are found]
    #[arg(value_name = "AGENT", value_parser = ["claude", "codex", "gemini", "qwen", "opencode"])]
    agents: Vec<String>,
    /// The project whose settings are checked. [default: the working directory]
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
}

/// `toolgate doctor`: one line per check; exit code 1 when one fails, 2
/// when nothing can be checked.
pub fn run(args: DoctorArgs) -> ExitCode {
    let Some(home) = Home::from_env() else {
        say!("toolgate doctor: HOME is not set: cannot find the user's settings");
        return ExitCode::from(2);
    };
    let project = match args.project.map_or_else(std::env::current_dir, Ok) {
        Ok(dir) => std::fs::canonicalize(&dir).unwrap_or(dir),
        Err(err) => {
            say!("toolgate doctor: cannot tell the working directory: {err}");
            return ExitCode::from(2);
        }
    };
    let agents: Vec<Agent> = args
        .agents
        .iter()
        .filter_map(|name| Agent::HOOKED.into_iter().find(|agent| agent.name() == name))
        .collect();
    let context = Context {
        home,
        project,
        path: std::env::var_os("PATH"),
        socket: toolgate::transport::client::chosen_socket(None),
        gemini_trusts_workspace: std::env::var("GEMINI_CLI_TRUST_WORKSPACE")
            .is_ok_and(|value| value == "true"),
    };
    let checks = doctor::run(&context, &agents);
    let mut out = std::io::stdout().lock();
    for check in &checks {
        let _ = writeln!(out, "{}", toolgate::display::shown(&check.to_string()));
    }
    let _ = out.flush();
    if checks.iter().all(|check| check.ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
