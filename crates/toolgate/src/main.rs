//! `toolgate`: a permission broker for AI coding agents.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand, ValueEnum};
use toolgate::broker::{Broker, BrokerConfig, OnAsk};
use toolgate::clock::{SystemClock, UuidIds};
use toolgate::setup::{self, Settings};
use toolgate_policy::Mode;

/// A permission broker for AI coding agents.
///
/// An agent writes each tool call it wants to make to toolgate's stdin as one
/// JSON line; toolgate writes `allow` or `deny` back on stdout, asking a
/// person or orchestrator first when the mode and rules say so. The protocol
/// is described in protocol.md; logs go to stderr (RUST_LOG sets the level).
#[derive(Debug, Parser)]
#[command(name = "toolgate", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Read tool calls on stdin, write decisions on stdout (the default).
    Serve(ServeArgs),
}

#[derive(Debug, Clone, Args)]
struct ServeArgs {
    /// The mode new sessions start in: auto, auto_edit, ask, plan or readonly
    /// (aliases: default, manual, yolo, bypassPermissions, acceptEdits,
    /// accept_edits, auto-edit, read-only, read_only). Beats the policy file's
    /// `mode`; the default is ask.
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    mode: Option<Mode>,

    /// The policy file (JSON; see README). Without it, toolgate.json in the
    /// project root is used when present. An invalid policy stops toolgate
    /// with exit code 2.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,

    /// OpenCode `permission` config as JSON, e.g. '{"bash":{"git push *":"deny"}}'.
    /// Merged key by key over TOOLGATE_PERMISSION; where it and the policy
    /// file both match a call, the stricter answer wins.
    #[arg(long, value_name = "JSON")]
    permission: Option<String>,

    /// The project root: paths are matched relative to it, and paths outside it
    /// ask as `external_directory`. Default: the policy file's projectRoot, else
    /// the working directory.
    #[arg(long, value_name = "DIR")]
    project_root: Option<PathBuf>,

    /// Seconds a question waits for its answer before the call is denied
    /// (source `timeout`); 0 waits forever. Default: the policy file's
    /// askTimeoutSeconds, else 300.
    #[arg(long, value_name = "SECS")]
    ask_timeout: Option<u64>,

    /// What to do when the answer is "ask": `wait` emits a permission_request
    /// and waits; `deny` denies at once without asking (non-interactive runs).
    /// [default: wait]
    #[arg(long, value_name = "POLICY")]
    on_ask: Option<OnAskArg>,

    /// The longest input line accepted, in bytes; longer lines are skipped
    /// without being buffered and answered with an error frame. [default: 1048576]
    #[arg(long, value_name = "BYTES")]
    max_frame_bytes: Option<usize>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OnAskArg {
    /// Ask and wait for the answer.
    Wait,
    /// Deny without asking.
    Deny,
}

impl ServeArgs {
    /// These flags, with `other`'s where these are unset.
    fn or(self, other: ServeArgs) -> ServeArgs {
        ServeArgs {
            mode: self.mode.or(other.mode),
            policy: self.policy.or(other.policy),
            permission: self.permission.or(other.permission),
            project_root: self.project_root.or(other.project_root),
            ask_timeout: self.ask_timeout.or(other.ask_timeout),
            on_ask: self.on_ask.or(other.on_ask),
            max_frame_bytes: self.max_frame_bytes.or(other.max_frame_bytes),
        }
    }
}

fn parse_mode(name: &str) -> Result<Mode, String> {
    name.parse::<Mode>().map_err(|err| err.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    // Flags may stand before or after `serve`; the ones after it win.
    let args = match cli.command {
        Some(Command::Serve(args)) => args.or(cli.serve),
        None => cli.serve,
    };
    serve(args)
}

fn serve(args: ServeArgs) -> ExitCode {
    let settings = Settings {
        mode: args.mode,
        policy: args.policy,
        permission: args.permission,
        permission_env: std::env::var("TOOLGATE_PERMISSION")
            .ok()
            .filter(|v| !v.trim().is_empty()),
        project_root: args.project_root,
        ask_timeout: args.ask_timeout,
        cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        home: std::env::var_os("HOME").map(PathBuf::from),
    };
    let (policy, warnings) = match setup::load(&settings) {
        Ok(loaded) => loaded,
        Err(err) => {
            eprintln!("toolgate: invalid policy: {err}");
            return ExitCode::from(2);
        }
    };
    for warning in &warnings {
        tracing::warn!("{warning}");
    }
    let max_frame_bytes = args.max_frame_bytes.unwrap_or(1 << 20);
    if max_frame_bytes == 0 {
        eprintln!("toolgate: --max-frame-bytes must be at least 1");
        return ExitCode::from(2);
    }
    tracing::info!(
        mode = %policy.default_mode,
        root = %policy.project_root.display(),
        "toolgate ready"
    );
    let config = BrokerConfig {
        on_ask: match args.on_ask.unwrap_or(OnAskArg::Wait) {
            OnAskArg::Wait => OnAsk::Wait,
            OnAskArg::Deny => OnAsk::Deny,
        },
        ask_timeout_ms: policy.ask_timeout_seconds.saturating_mul(1000),
    };
    let broker = Broker::new(
        Arc::new(policy),
        config,
        Box::new(SystemClock::new()),
        Box::new(UuidIds),
    );
    let result = toolgate::serve::run(std::io::stdin(), std::io::stdout(), broker, max_frame_bytes);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("toolgate: i/o error: {err}");
            ExitCode::from(1)
        }
    }
}
