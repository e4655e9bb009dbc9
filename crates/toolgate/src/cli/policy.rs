//! `toolgate policy validate|import`: check policy files, or convert other
//! agents' permission settings (see `toolgate::policy_cli`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Subcommand, ValueEnum};
use toolgate::say;

use super::broker::settings_of;
use super::flags::{PolicyArgs, ServeArgs};

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Load each policy file as `serve` would and print every error, warning
    /// and lint with its file and key: rules shadowed by a later rule, `ask`
    /// rules the mode never lets ask, overrides (--permission) that change
    /// nothing. Exit code 2 when a file has an error, else 0.
    Validate {
        /// Policy files (toolgate.json, opencode.json(c)).
        #[arg(value_name = "FILE", required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        policy: Box<PolicyArgs>,
    },
    /// Print a toolgate policy converted from other agents' permission
    /// settings (Claude Code or qwen-code settings.json, opencode.json,
    /// Gemini CLI policy TOML, link-assistant permission JSON), merged in
    /// order; what could not be converted is listed on stderr. See
    /// docs/modes-and-policy.md, "Bring your rules".
    Import {
        /// The files to convert.
        #[arg(value_name = "FILE", required = true)]
        files: Vec<PathBuf>,
        /// Their format. [default: detected per file]
        #[arg(long, value_enum, value_name = "FORMAT")]
        from: Option<ImportFrom>,
        /// With an OpenCode config: also that agent's `permission`.
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ImportFrom {
    /// Claude Code settings.json.
    Claude,
    /// qwen-code settings.json.
    Qwen,
    /// OpenCode config (also link-assistant/agent's permission JSON).
    Opencode,
    /// link-assistant/agent permission JSON (OpenCode's shape).
    LinkAssistant,
    /// Gemini CLI policy TOML.
    Gemini,
}

/// `toolgate policy …`; `outer`: the flags given before `policy`.
pub fn run(command: PolicyCommand, outer: ServeArgs) -> ExitCode {
    match command {
        PolicyCommand::Validate { files, policy } => {
            let policy = policy.or(outer.policy);
            let mode = match policy.chosen_mode() {
                Ok(mode) => mode,
                Err(err) => {
                    say!("toolgate: {err}");
                    return ExitCode::from(2);
                }
            };
            ExitCode::from(toolgate::policy_cli::validate(
                &files,
                &settings_of(mode, &policy, None, false),
            ))
        }
        PolicyCommand::Import { files, from, agent } => {
            use toolgate::adapters::import::Format;
            let from = from.map(|from| match from {
                ImportFrom::Claude => Format::Claude,
                ImportFrom::Qwen => Format::Qwen,
                ImportFrom::Opencode | ImportFrom::LinkAssistant => Format::Opencode,
                ImportFrom::Gemini => Format::Gemini,
            });
            let agent = agent.or(outer.policy.agent);
            ExitCode::from(toolgate::policy_cli::import(&files, from, agent.as_deref()))
        }
    }
}
