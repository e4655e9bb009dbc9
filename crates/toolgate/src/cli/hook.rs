//! `toolgate hook AGENT`: decide the one call of an agent's PreToolUse hook
//! (see `toolgate::adapters::hook`), in-process or by asking a broker (`--socket`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use toolgate::say;

use super::broker::{open, BrokerFlags, Opened};
use super::flags::{
    broker_flags, AskArgs, BindArgs, KeepArgs, OnAskArg, PolicyArgs, RemoteArgs, ServeArgs,
};

/// The flags of `toolgate hook`.
#[derive(Debug, Args)]
pub struct HookArgs {
    /// The agent: claude (Claude Code), qwen (qwen-code), gemini (Gemini
    /// CLI) or codex (Codex).
    #[arg(value_enum, value_name = "AGENT")]
    target: HookAgent,
    /// Ask the broker listening on this Unix socket (`toolgate serve
    /// --listen unix:PATH`) instead of deciding in-process: its sessions,
    /// grants, doom-loop counts and approvers are shared by every hook
    /// call. Also TOOLGATE_SOCKET. With no broker there, every call is
    /// denied.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// With --socket or --remote: how long to wait for the broker's decision (a
    /// person may be answering) before denying, in seconds. Keep it
    /// below the agent's own hook timeout, which lets the call through
    /// when it runs out. [default: 50]
    #[arg(long, value_name = "SECS")]
    wait: Option<u64>,
    #[command(flatten)]
    remote: RemoteArgs,
    #[command(flatten)]
    bind: BindArgs,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    keep: KeepArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum HookAgent {
    /// Claude Code's PreToolUse hook.
    Claude,
    /// qwen-code's PreToolUse hook.
    Qwen,
    /// Gemini CLI's BeforeTool hook.
    Gemini,
    /// Codex's PreToolUse hook.
    Codex,
}

/// `toolgate hook claude|qwen`: decide the one call on stdin, answer on
/// stdout in the agent's format (see `toolgate::adapters::hook`). Never fails open: a
/// broker that cannot start, input that cannot be read, or an answer that
/// cannot be written is a denial, or exit code 2 (which the agents read as
/// "blocked").
/// `outer`: the flags given before `hook`; `given`: the ids of every flag
/// given (see [`super::parse`]).
pub fn run(args: HookArgs, outer: ServeArgs, given: &[String]) -> ExitCode {
    let HookArgs {
        target: agent,
        socket,
        wait,
        remote,
        bind,
        policy,
        keep,
    } = args;
    let (policy, keep) = (policy.or(outer.policy), keep.or(outer.keep));
    use std::io::Read;
    use toolgate::adapters::hook::{self, Answer};
    let agent = match agent {
        HookAgent::Claude => hook::Agent::Claude,
        HookAgent::Qwen => hook::Agent::Qwen,
        HookAgent::Gemini => hook::Agent::Gemini,
        HookAgent::Codex => hook::Agent::Codex,
    };
    // Until the input says which event it is, answers are for the
    // agent's pre-tool event.
    let event = std::cell::Cell::new(hook::Event::PreToolUse);
    let write = |answer: &Answer| -> ExitCode {
        let mut out = std::io::stdout().lock();
        match writeln!(out, "{}", answer.to_json(agent, event.get())).and_then(|()| out.flush()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                say!(
                    "toolgate hook: cannot write the answer: {err}; {}",
                    answer.reason
                );
                ExitCode::from(2)
            }
        }
    };
    let deny = Answer::deny;
    let mut text = String::new();
    let limit = 16 << 20;
    match std::io::stdin().take(limit + 1).read_to_string(&mut text) {
        Ok(n) if n as u64 > limit => {
            return write(&deny(format!(
                "toolgate hook: the hook input is longer than {limit} bytes"
            )))
        }
        Ok(_) => {}
        Err(err) => {
            return write(&deny(format!(
                "toolgate hook: cannot read the hook input: {err}"
            )))
        }
    }
    let input: serde_json::Value = match serde_json::from_str(&text) {
        Ok(input) => input,
        Err(err) => {
            return write(&deny(format!(
                "toolgate hook: the hook input is not JSON: {err}"
            )))
        }
    };
    match hook::event(agent, &input) {
        Ok(which) => event.set(which),
        Err(err) => {
            // Not an answer in another event's format: an error, and
            // nothing on stdout. An event about a tool call may be gating
            // it under a name toolgate does not know: exit code 2, which
            // every agent reads as "blocked" before a tool runs (after
            // one, it only shows the error). Any other event gets a
            // non-blocking error (1), so a misplaced hook cannot, say,
            // keep the agent from ever stopping.
            say!("toolgate hook: {err}");
            let about_a_call = input.get("tool_name").is_some();
            return ExitCode::from(if about_a_call { 2 } else { 1 });
        }
    }
    let binding = match bind.resolve() {
        Ok(binding) => binding,
        Err(err) => return write(&deny(format!("toolgate hook: {err}"))),
    };
    #[cfg(unix)]
    let broker = match toolgate::transport::client::chosen(socket.as_deref(), remote.spec()) {
        Ok(broker) => broker,
        Err(err) => return write(&deny(format!("toolgate hook: {err}"))),
    };
    #[cfg(unix)]
    if let Some(broker) = broker {
        // The broker there has its own policy and state: flags that would
        // set up a policy here would be silently ignored, so they are
        // refused; the mode is passed on (the stricter applies).
        let given = broker_flags(given, &["mode", "permission_mode"]);
        if !given.is_empty() {
            return write(&deny(format!(
                "toolgate hook: {} belong to the broker at {} (give them to `toolgate serve --listen`), not to a hook that asks it",
                given.join(", "),
                broker.label()
            )));
        }
        let flag = match policy.chosen_mode() {
            Ok(mode) => mode,
            Err(err) => return write(&deny(format!("toolgate hook: {err}"))),
        };
        let wait = std::time::Duration::from_secs(wait.unwrap_or(50));
        return write(&hook::decide_remote(
            agent, &input, flag, &binding, &broker, wait,
        ));
    }
    #[cfg(not(unix))]
    let _ = (socket, wait, remote);
    // Questions are put to the user by the agent itself: the broker only
    // has to say that one would be asked.
    let flags = BrokerFlags {
        policy,
        ask: AskArgs {
            on_ask: Some(OnAskArg::Wait),
            ask_timeout: None,
        },
        keep,
        ..BrokerFlags::default()
    };
    let Opened {
        mut broker,
        policy,
        configured_mode,
        ..
    } = match open(flags, false) {
        Ok(opened) => opened,
        Err(_) => {
            return write(&deny(
                "toolgate hook: the broker could not start (its error is on stderr)".to_string(),
            ))
        }
    };
    let answer = hook::decide(
        agent,
        &input,
        configured_mode,
        policy.default_mode,
        &binding,
        &mut broker,
    );
    write(&answer)
}
