//! `toolgate mcp`: Claude Code's permission-prompt tool as an MCP server on
//! stdio (see `toolgate::adapters::mcp`), deciding in-process or asking a broker.

use std::process::ExitCode;

use clap::Args;
use toolgate::say;

use super::broker::{
    in_process_decider, refuse_policy_with_socket, BrokerFlags, Decider, DeciderArgs,
};
use super::flags::ServeArgs;

/// The flags of `toolgate mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The toolgate session the calls belong to. [default: a new
    /// session for each `toolgate mcp` process]
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    #[command(flatten)]
    decider: DeciderArgs,
}

/// `toolgate mcp`: serve MCP on stdin/stdout until end of input (see
/// `toolgate::adapters::mcp`). A broker that cannot start stops it with exit code 2
/// before it answers anything, so Claude Code reports the server as failed
/// (and, without its permission-prompt tool, asks nobody and allows nothing
/// that its own rules do not allow).
/// `outer`: the flags given before `mcp`; `given`: the ids of every flag
/// given (see [`super::parse`]).
pub fn run(args: McpArgs, outer: ServeArgs, given: &[String]) -> ExitCode {
    let McpArgs { session, decider } = args;
    let Decider {
        socket,
        binding,
        flags,
    } = match decider.resolve(outer) {
        Ok(decider) => decider,
        Err(err) => {
            say!("toolgate mcp: {err}");
            return ExitCode::from(2);
        }
    };
    let limit = flags.line.max_frame_bytes.unwrap_or(16 << 20).max(1);
    let session = session
        .filter(|session| !session.is_empty())
        .unwrap_or_else(|| format!("mcp-{}", uuid::Uuid::new_v4().simple()));
    let served = match socket {
        Some(path) => remote(session, path, binding, given, limit),
        None => in_process(session, flags, binding, limit),
    };
    match served {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(err)) if err.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Ok(Err(err)) => {
            say!("toolgate mcp: i/o error: {err}");
            ExitCode::from(1)
        }
        Err(code) => code,
    }
}

/// `toolgate mcp --socket PATH` (or `--remote tls://HOST:PORT`) until end
/// of input: every call is put to the broker there. `Err` for policy flags,
/// which belong to the broker.
#[cfg(unix)]
fn remote(
    session: String,
    path: super::broker::BrokerAt,
    binding: toolgate::adapters::bind::Binding,
    given: &[String],
    limit: usize,
) -> Result<std::io::Result<()>, ExitCode> {
    use toolgate::adapters::mcp::{self, Remote, Server};
    // The broker there has its own policy, and sessions it may have put in a
    // stricter mode: nothing here may loosen them.
    refuse_policy_with_socket("mcp", given, &[], &path)?;
    let mut server = Server::new(Remote::new(path, session, binding));
    Ok(mcp::serve(&mut server, limit))
}

/// No Unix sockets here: `--socket` cannot be served.
#[cfg(not(unix))]
fn remote(
    _session: String,
    _path: super::broker::BrokerAt,
    _binding: toolgate::adapters::bind::Binding,
    _given: &[String],
    _limit: usize,
) -> Result<std::io::Result<()>, ExitCode> {
    say!("toolgate mcp: --socket needs Unix sockets, which this system lacks");
    Err(ExitCode::from(2))
}

/// `toolgate mcp` deciding in-process until end of input; `Err` when the
/// broker cannot start (its error is on stderr).
fn in_process(
    session: String,
    flags: BrokerFlags,
    binding: toolgate::adapters::bind::Binding,
    limit: usize,
) -> Result<std::io::Result<()>, ExitCode> {
    use toolgate::adapters::mcp::{self, Server};
    let mut server = Server::new(in_process_decider(flags, session, binding, "mcp")?);
    Ok(mcp::serve(&mut server, limit))
}
