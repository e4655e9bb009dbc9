//! The command line: the subcommands, each in its own module, and the flag
//! groups they share ([`flags`]). `main.rs` parses and dispatches.

pub mod broker;
pub mod check;
pub mod claude_bridge;
pub mod doctor;
pub mod flags;
#[cfg(feature = "fleet")]
pub mod fleet;
pub mod hook;
pub mod init;
#[cfg(unix)]
pub mod link_bridge;
pub mod mcp;
pub mod policy;
pub mod replay;
pub mod serve;
pub mod state;
#[cfg(feature = "fleet")]
pub mod web;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};

/// A permission broker for AI coding agents.
///
/// An agent writes each tool call it wants to make to toolgate's stdin as one
/// JSON line; toolgate writes `allow` or `deny` back on stdout, asking a
/// person or orchestrator first when the mode and rules say so. The protocol
/// is described in docs/protocol.md; logs go to stderr (RUST_LOG sets the level).
/// With no subcommand, the flags are `serve`'s. A subcommand's flags may
/// stand before its name as well (the ones after it win), if it takes them.
#[derive(Debug, Parser)]
#[command(name = "toolgate", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub serve: flags::ServeArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Read tool calls on stdin, write decisions on stdout (the default).
    Serve(flags::ServeArgs),
    /// Show or remove the grants kept in a state directory (--state-dir).
    ///
    /// These commands work on the files. A broker that is running for a
    /// project keeps its own copy of that project's grants and writes it back
    /// at its next save: to revoke a grant there, send it the `revoke_grant`
    /// frame instead.
    #[command(subcommand)]
    Grants(state::GrantsCommand),
    /// The shared store of a fleet of brokers (PostgreSQL): `store migrate`.
    /// See docs/fleet.md.
    #[cfg(feature = "fleet")]
    #[command(subcommand)]
    Store(fleet::StoreCommand),
    /// Bearer tokens in the shared store (--store): create, list, revoke,
    /// verify. See docs/fleet.md.
    #[cfg(feature = "fleet")]
    #[command(subcommand)]
    Tokens(fleet::TokensCommand),
    /// Serve the web approval page alone: the open questions of every
    /// broker sharing the store (--store), answered from a browser with an
    /// approver token. See docs/web.md.
    #[cfg(feature = "fleet")]
    Web(web::WebArgs),
    /// Look after a state directory (--state-dir) that a broker refused.
    #[command(subcommand)]
    State(state::StateCommand),
    /// Decide one call from an agent's PreToolUse hook (JSON on stdin) and
    /// answer in the agent's format; see docs/hooks.md.
    ///
    /// The policy flags of `serve` apply. The agent's own permission mode is
    /// used; with --mode, TOOLGATE_MODE or a policy file's mode too, the
    /// stricter applies. With --state-dir the sessions and grants of earlier
    /// calls count. An `ask` is answered `ask`: the agent asks the user.
    Hook(hook::HookArgs),
    /// An MCP server on stdio with one tool, `approve`: Claude Code's
    /// permission-prompt tool (`claude -p --mcp-config FILE
    /// --permission-prompt-tool mcp__toolgate__approve`); see docs/mcp.md.
    ///
    /// The policy flags of `serve` apply. Without --socket (or
    /// TOOLGATE_SOCKET) it decides in-process, and an `ask` is a denial: no
    /// human can be asked here. With a socket it is a client of the broker
    /// listening there, which may ask a human approver; with no broker
    /// listening there, every call is denied.
    Mcp(mcp::McpArgs),
    /// Start link-assistant/agent and answer its `permission_request`s
    /// through toolgate (`toolgate link-bridge [FLAGS] -- agent ARGS…`);
    /// see docs/bridges.md.
    ///
    /// Every other line passes through unchanged both ways. The agent runs
    /// with `--permission-mode ask`; the mode it was given (or
    /// `--read-only`), its `--permission` and its `--disable-tools` (and
    /// their LINK_ASSISTANT_AGENT_* variables) are toolgate's to apply. The
    /// policy flags of `serve` apply; with --socket (or TOOLGATE_SOCKET) the
    /// broker there decides and its approvers answer what asks.
    #[cfg(unix)]
    LinkBridge(link_bridge::LinkBridgeArgs),
    /// Start Claude Code in stream-json mode (`-- claude --input-format
    /// stream-json --output-format stream-json --verbose
    /// --permission-prompt-tool stdio ...`) and sit between it and the
    /// orchestrator on this process's stdin and stdout: every line passes
    /// through unchanged except Claude Code's `can_use_tool` questions,
    /// which toolgate answers; see docs/bridges.md.
    ///
    /// The policy flags of `serve` apply. Without --socket (or
    /// TOOLGATE_SOCKET) it decides in-process, and an `ask` is a denial.
    /// With a socket it is a client of the broker listening there, whose
    /// approvers may answer. Exits with Claude Code's status.
    ClaudeBridge(claude_bridge::ClaudeBridgeArgs),
    /// Decide one call as `serve` would in a fresh session, and show the
    /// whole way to the answer: how the tool is classified, each simple
    /// command with its read-only verdict, every rule that matched (the
    /// winner and the ones that lost) with its origin, the mode's answer,
    /// the scope, and what `always` would grant.
    ///
    /// `toolgate check --mode plan -- bash 'git push && ls'`. The subject
    /// goes in the field the tool reads it from (command, filePath, url,
    /// pattern, ...); --input gives the whole input instead. The policy flags
    /// of `serve` apply. Exit code 0 for allow, 1 for deny, 3 for ask, 2 when
    /// the call or the flags are unusable.
    Check(check::CheckArgs),
    /// Feed recorded sessions through a fresh broker, deterministically:
    /// the same files and flags give the same bytes (ids count up, the clock
    /// reads the recorded times). Prints toolgate's frames, one decision per
    /// call; a question the recording holds no answer to is denied (source
    /// replay). See docs/replay.md.
    ///
    /// The policy flags of `serve` apply. Exit code 0; 1 when --check or
    /// --compare found differences; 2 when a file cannot be used.
    Replay(replay::ReplayArgs),
    /// Check policy files, or convert other agents' permission settings
    /// into a toolgate policy.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Install toolgate's hook in an agent's settings file (merged with what
    /// is there; a backup is kept; the change is shown). See docs/init.md.
    Init(init::InitArgs),
    /// Check that each agent whose settings are found will really call
    /// toolgate: its hook entry, the program, trust, the broker, and a
    /// dry-run read call. Exit code 1 when a check fails. See docs/init.md.
    Doctor(doctor::DoctorArgs),
    /// A terminal approver: attach to a broker started with `serve --listen`
    /// and answer its questions (o once, a always, r reject, q quit).
    Approve {
        /// The broker's socket [env: TOOLGATE_SOCKET]; default
        /// $XDG_RUNTIME_DIR/toolgate/broker.sock, else /tmp/toolgate-$UID/broker.sock.
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
        /// A remote broker instead (`--remote tls://HOST:PORT --token-file
        /// FILE`), with an approver's (or admin's) token.
        #[command(flatten)]
        remote: flags::RemoteArgs,
        /// One inbox across projects: also answer the questions of every
        /// other project on the broker's shared store (a broker started
        /// with --store; each names its project and host). Refused by a
        /// broker without a store and for a token limited to a project.
        #[arg(long)]
        all_projects: bool,
    },
}

/// The command line, and the flags given on it (by clap id, before the
/// subcommand and after it: [`flags::broker_flags`] reads them). A flag
/// before a subcommand that the subcommand does not take is refused, as
/// clap refuses one after it. A command line refused ends the process with
/// clap's message and exit code 2, as `--help` and `--version` end it with 0.
pub fn parse() -> (Cli, Vec<String>) {
    let command = Cli::command();
    let matches = command.clone().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    };
    let mut given = given_ids(&command, &matches);
    // The subcommand that runs (`grants list`), and its matches.
    let mut leaf = &command;
    let mut leaf_matches = &matches;
    let mut path = Vec::new();
    while let Some((name, sub)) = leaf_matches.subcommand() {
        let Some(found) = leaf.find_subcommand(name) else {
            break;
        };
        leaf = found;
        leaf_matches = sub;
        path.push(name.to_string());
    }
    if !path.is_empty() {
        let stray: Vec<String> = given
            .iter()
            .filter(|id| !leaf.get_arguments().any(|arg| arg.get_id() == id.as_str()))
            .map(|id| long_name(&command, id))
            .collect();
        if !stray.is_empty() {
            let mut command = command;
            command
                .error(
                    clap::error::ErrorKind::ArgumentConflict,
                    format!(
                        "{} cannot be used with `toolgate {}`, which does not take {}",
                        stray.join(", "),
                        path.join(" "),
                        if stray.len() == 1 { "it" } else { "them" }
                    ),
                )
                .exit();
        }
        given.extend(given_ids(leaf, leaf_matches));
    }
    (cli, given)
}

/// The ids of the arguments of `command` that `matches` got from the
/// command line, in the order `command` declares them (groups, which clap
/// also reports as given, are not arguments).
fn given_ids(command: &clap::Command, matches: &ArgMatches) -> Vec<String> {
    command
        .get_arguments()
        .map(|arg| arg.get_id().as_str())
        .filter(|id| {
            matches.try_contains_id(id).unwrap_or(false)
                && matches.value_source(id) == Some(ValueSource::CommandLine)
        })
        .map(str::to_string)
        .collect()
}

/// `--long-name` of the argument `id` of `command`.
fn long_name(command: &clap::Command, id: &str) -> String {
    command
        .get_arguments()
        .find(|arg| arg.get_id() == id)
        .and_then(|arg| arg.get_long())
        .map_or_else(|| id.to_string(), |long| format!("--{long}"))
}

/// `toolgate approve`: the socket from --socket, else the remote broker of
/// --remote, else TOOLGATE_SOCKET, else TOOLGATE_REMOTE, else the default
/// socket.
pub fn approve(socket: Option<PathBuf>, remote: flags::RemoteArgs, all_projects: bool) -> ExitCode {
    use toolgate::transport::client::{self, Endpoint};
    let endpoint = match client::chosen(socket.as_deref(), remote.spec()) {
        Ok(Some(endpoint)) => endpoint,
        Ok(None) => Endpoint::Socket(toolgate::transport::socket::default_path()),
        Err(err) => {
            toolgate::say!("toolgate approve: {err}");
            return ExitCode::from(1);
        }
    };
    match toolgate::approver::tui::run(&endpoint, all_projects) {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    }
}
