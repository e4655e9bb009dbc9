//! `toolgate replay`: feed recorded sessions through a fresh broker (see
//! `toolgate::replay`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use toolgate::say;

use super::broker::{open, BrokerFlags};
use super::flags::{PolicyArgs, ServeArgs};

/// The flags of `toolgate replay`. A replay starts from a fresh broker and
/// answers questions from the recording: the state, audit, ask, approver
/// and socket flags of `serve` do not apply to it.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Recordings: files, or directories searched for *.jsonl.
    #[arg(value_name = "FILE", required = true)]
    files: Vec<PathBuf>,
    /// The files' format: toolgate (its own frames), audit (its audit
    /// log), claude (a Claude Code transcript) or codex (a Codex
    /// rollout). [default: detected per file]
    #[arg(long, value_enum, value_name = "FORMAT")]
    from: Option<FromArg>,
    /// Print a table of calls by tool, answer and source, and the
    /// subjects most often asked about or denied, instead of the frames.
    #[arg(long)]
    summary: bool,
    /// Compare with the decisions the files hold and list every
    /// difference (exit 1 when there is one).
    #[arg(long)]
    check: bool,
    /// Replay under two policy files and list the calls answered
    /// differently, grouped by what decided (exit 1 when there are
    /// some).
    #[arg(long, num_args = 2, value_names = ["POLICY_A", "POLICY_B"])]
    compare: Option<Vec<PathBuf>>,
    #[command(flatten)]
    policy: PolicyArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FromArg {
    /// toolgate's own frames (a transcript, a captured session, a replay's output).
    Toolgate,
    /// toolgate's audit log (serve --audit).
    Audit,
    /// A Claude Code session transcript (~/.claude/projects/DIR/SESSION.jsonl).
    Claude,
    /// A Codex rollout (~/.codex/sessions/.../rollout-*.jsonl).
    Codex,
}

/// `toolgate replay`: see [`toolgate::replay`].
/// `outer`: the flags given before `replay`.
pub fn run(args: ReplayArgs, outer: ServeArgs) -> ExitCode {
    let ReplayArgs {
        files,
        from,
        summary,
        check,
        compare,
        policy,
    } = args;
    let policy = policy.or(outer.policy);
    // A mode given on the command line holds for the whole replay; one
    // from TOOLGATE_MODE or the policy file is the default mode, as for
    // `serve`, and the recorded modes apply.
    if let Err(err) = policy.chosen_mode() {
        say!("toolgate replay: {err}");
        return ExitCode::from(2);
    }
    let mode = policy.mode.or(policy.permission_mode);
    let options = toolgate::replay::cli::Options {
        mode,
        root_given: policy.project_root.is_some(),
        from: from.map(|from| match from {
            FromArg::Toolgate => toolgate::replay::Format::Toolgate,
            FromArg::Audit => toolgate::replay::Format::Audit,
            FromArg::Claude => toolgate::replay::Format::Claude,
            FromArg::Codex => toolgate::replay::Format::Codex,
        }),
        summary,
        check,
        compare: compare.and_then(|pair| match pair.as_slice() {
            [a, b] => Some((a.clone(), b.clone())),
            _ => None,
        }),
    };
    if policy.policy.is_some() && options.compare.is_some() {
        say!("toolgate replay: --policy does not apply with --compare, which names the two policy files itself");
        return ExitCode::from(2);
    }
    let policy_of = |file: Option<&std::path::Path>, root: Option<&std::path::Path>| {
        let mut flags = BrokerFlags {
            policy: policy.clone(),
            ..BrokerFlags::default()
        };
        if let Some(file) = file {
            flags.policy.policy = Some(file.to_path_buf());
        }
        if let Some(root) = root {
            flags.policy.project_root = Some(root.to_path_buf());
        }
        open(flags, true)
            .ok()
            .map(|opened| (opened.policy, opened.sources))
    };
    ExitCode::from(toolgate::replay::cli::main(&files, &options, &policy_of))
}
