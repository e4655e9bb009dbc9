//! `toolgate claude-bridge`: starts Claude Code in stream-json mode with
//! `--permission-prompt-tool stdio`, passes its lines and the
//! orchestrator's through, and answers its permission questions through
//! toolgate (see `toolgate::adapters::claude_bridge`), deciding in-process
//! or asking a broker.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};

use clap::Args;
use toolgate::adapters::bind::Binding;
use toolgate::adapters::claude_bridge::{self, Peer};
use toolgate::adapters::mcp::Decide;
use toolgate::say;

use super::broker::{
    in_process_decider, refuse_policy_with_socket, BrokerFlags, Decider, DeciderArgs,
};
use super::flags::ServeArgs;

/// The flags of `toolgate claude-bridge`.
#[derive(Debug, Args)]
pub struct ClaudeBridgeArgs {
    #[command(flatten)]
    decider: DeciderArgs,
    /// Claude Code's command line, after `--`: `claude
    /// --input-format stream-json --output-format stream-json --verbose
    /// --permission-prompt-tool stdio ...`.
    #[arg(last = true, required = true, value_name = "CLAUDE_COMMAND")]
    command: Vec<OsString>,
}

/// The longest line passed through or read when `--max-frame-bytes` is not
/// given: Claude Code's messages carry whole tool results.
const LINE_LIMIT: usize = 64 << 20;

/// `toolgate claude-bridge`: run Claude Code until it exits, and exit with
/// its status (128 + the signal that killed it). 2 when the flags or the
/// broker cannot be used, 127 when Claude Code cannot be started; nothing
/// is started then.
pub fn run(args: ClaudeBridgeArgs, outer: ServeArgs, given: &[String]) -> ExitCode {
    let ClaudeBridgeArgs { decider, command } = args;
    let Decider {
        socket,
        binding,
        flags,
    } = match decider.resolve(outer) {
        Ok(decider) => decider,
        Err(err) => {
            say!("toolgate claude-bridge: {err}");
            return ExitCode::from(2);
        }
    };
    let limit = flags.line.max_frame_bytes.unwrap_or(LINE_LIMIT).max(1);
    // Until Claude Code names its session (its `system/init`), calls go to
    // a session of this process's own.
    let session = format!("claude-bridge-{}", uuid::Uuid::new_v4().simple());
    match socket {
        Some(path) => remote(session, path, binding, given, limit, command),
        None => in_process(session, flags, binding, limit, command),
    }
}

/// Ask the broker at `path` about every question.
#[cfg(unix)]
fn remote(
    session: String,
    path: super::broker::BrokerAt,
    binding: Binding,
    given: &[String],
    limit: usize,
    command: Vec<OsString>,
) -> ExitCode {
    use toolgate::adapters::mcp::Remote;
    if let Err(code) = refuse_policy_with_socket("claude-bridge", given, &[], &path) {
        return code;
    }
    let mut decide = Remote::new(path, session, binding).client("claude-bridge");
    bridge(&mut decide, limit, command)
}

/// No Unix sockets here: `--socket` cannot be used.
#[cfg(not(unix))]
fn remote(
    _session: String,
    _path: super::broker::BrokerAt,
    _binding: Binding,
    _given: &[String],
    _limit: usize,
    _command: Vec<OsString>,
) -> ExitCode {
    say!("toolgate claude-bridge: --socket needs Unix sockets, which this system lacks");
    ExitCode::from(2)
}

/// Decide in this process; what would ask a person is denied.
fn in_process(
    session: String,
    flags: BrokerFlags,
    binding: Binding,
    limit: usize,
    command: Vec<OsString>,
) -> ExitCode {
    match in_process_decider(flags, session, binding, "claude-bridge") {
        Ok(mut decide) => bridge(&mut decide, limit, command),
        Err(code) => code,
    }
}

/// Start Claude Code and bridge it to this process's stdin and stdout until
/// its output ends; its exit status.
fn bridge<D: Decide>(decide: &mut D, limit: usize, command: Vec<OsString>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            say!("toolgate claude-bridge: cannot start the runtime: {err}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(async {
        let Some((program, arguments)) = command.split_first() else {
            say!("toolgate claude-bridge: no Claude Code command after --");
            return ExitCode::from(2);
        };
        let spawned = tokio::process::Command::new(program)
            .args(arguments)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(err) => {
                say!(
                    "toolgate claude-bridge: cannot start {}: {err}",
                    PathBuf::from(program).display()
                );
                return ExitCode::from(127);
            }
        };
        let (Some(to), Some(from)) = (child.stdin.take(), child.stdout.take()) else {
            say!("toolgate claude-bridge: Claude Code's stdin and stdout are not pipes");
            return ExitCode::from(1);
        };
        let orchestrator = Peer {
            from: tokio::io::stdin(),
            to: tokio::io::stdout(),
        };
        if let Err(err) = claude_bridge::run(orchestrator, Peer { from, to }, decide, limit).await {
            say!("toolgate claude-bridge: i/o error: {err}");
        }
        match child.wait().await {
            Ok(status) => exit_code(status),
            Err(err) => {
                say!("toolgate claude-bridge: cannot wait for Claude Code: {err}");
                ExitCode::from(1)
            }
        }
    });
    // A read of stdin may still wait on tokio's blocking thread: it is
    // not waited for.
    runtime.shutdown_background();
    code
}

/// Claude Code's exit status as this process's: its code, or 128 + the
/// signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    if let Some(code) = status.code() {
        return ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1));
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return ExitCode::from(u8::try_from((128 + signal) & 0xff).unwrap_or(1));
        }
    }
    ExitCode::from(1)
}
