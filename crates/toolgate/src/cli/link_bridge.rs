//! `toolgate link-bridge`: link-assistant/agent started under toolgate,
//! its `permission_request`s decided in-process or by a broker (see
//! `toolgate::adapters::link`).

use std::process::ExitCode;

use clap::Args;
use toolgate::adapters::link::{self, Spellings};
use toolgate::adapters::mcp::Remote;
use toolgate::say;

use super::broker::{
    in_process_decider, refuse_policy_with_socket, AgentRules, Decider, DeciderArgs,
};
use super::flags::ServeArgs;

/// The flags of `toolgate link-bridge`.
#[derive(Debug, Args)]
pub struct LinkBridgeArgs {
    /// The toolgate session the agent's calls belong to. [default: a new
    /// session for each bridge]
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    #[command(flatten)]
    decider: DeciderArgs,
    /// The agent's command line: `-- agent ARGS…`.
    #[arg(last = true, required = true, value_name = "AGENT")]
    command: Vec<String>,
}

/// Start the agent and relay until it ends; the exit status is the
/// agent's (2 when the flags or the agent's own spellings cannot be used
/// or the agent cannot start).
pub fn run(args: LinkBridgeArgs, outer: ServeArgs, given: &[String]) -> ExitCode {
    let LinkBridgeArgs {
        session,
        decider,
        command,
    } = args;
    let Some((program, agent_args)) = command.split_first() else {
        say!("toolgate link-bridge: give the agent's command after `--`");
        return ExitCode::from(2);
    };
    let spellings = match Spellings::read(agent_args, |name| std::env::var(name).ok()) {
        Ok(spellings) => spellings,
        Err(err) => {
            say!("toolgate link-bridge: the agent's permission settings: {err}");
            return ExitCode::from(2);
        }
    };
    let Decider {
        socket,
        binding,
        mut flags,
    } = match decider.resolve(outer) {
        Ok(decider) => decider,
        Err(err) => {
            say!("toolgate link-bridge: {err}");
            return ExitCode::from(2);
        }
    };
    let session = session
        .filter(|session| !session.is_empty())
        .unwrap_or_else(|| format!("link-{}", uuid::Uuid::new_v4().simple()));
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            say!("toolgate link-bridge: cannot start: {err}");
            return ExitCode::from(1);
        }
    };
    let args = link::agent_args(agent_args);
    let env = [(link::MODE_ENV, "ask")];
    let unset = [link::PERMISSION_ENV];
    let mode = spellings.mode.as_deref();
    let status = match socket {
        Some(path) => {
            let mut own = Vec::new();
            if spellings.permission.is_some() {
                own.push("the agent's --permission (or LINK_ASSISTANT_AGENT_PERMISSION)");
            }
            if !spellings.disabled.is_empty() {
                own.push("the agent's --disable-tools (or LINK_ASSISTANT_AGENT_DISABLE_TOOLS)");
            }
            if let Err(code) = refuse_policy_with_socket("link-bridge", given, &own, &path) {
                return code;
            }
            let mut remote = Remote::new(path, session, binding).client("link-bridge");
            runtime.block_on(link::relay(&mut remote, program, &args, &env, &unset, mode))
        }
        None => {
            // The agent's own rules are toolgate's now: its override before
            // toolgate's --permission, the tools it disables last of all
            // (a deny that decides is final).
            flags.agent = AgentRules {
                permission: spellings.permission.clone(),
                denied_last: spellings
                    .disabled_override()
                    .map(|json| ("the agent's --disable-tools".to_string(), json)),
            };
            let mut decide = match in_process_decider(flags, session, binding, "link-bridge") {
                Ok(decide) => decide,
                Err(code) => return code,
            };
            runtime.block_on(link::relay(&mut decide, program, &args, &env, &unset, mode))
        }
    };
    // stdin may still be read by a blocking thread: it is not waited for.
    runtime.shutdown_background();
    match status {
        Ok(status) => exit_code(status),
        Err(err) => {
            say!("toolgate link-bridge: {err}");
            ExitCode::from(2)
        }
    }
}

/// The agent's exit status as the bridge's: its code, or 128 + the signal
/// that ended it.
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    if let Some(code) = status.code() {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return ExitCode::from(u8::try_from(128 + signal).unwrap_or(1));
        }
    }
    ExitCode::from(1)
}
