//! `toolgate`: a permission broker for AI coding agents.
// stderr is written through `toolgate::say!` only (a closed stderr must not panic).
#![deny(clippy::print_stderr)]

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::sync::mpsc::{Receiver, Sender};
use toolgate::broker::{Broker, BrokerConfig, OnAsk, Origin};

use toolgate::clock::{Clock, SystemClock, UuidIds};
use toolgate::display::shown;
use toolgate::say;
use toolgate::serve::Control;
use toolgate::setup::{self, Settings};
use toolgate::state::{self, FileStore};
use toolgate_policy::Mode;

/// The allocator: a decision makes and frees some thirty small blocks, more
/// of one size than glibc's per-thread cache keeps (seven), so glibc frees
/// most of them through its slow path; mimalloc's per-page free lists do not.
/// Measured on 20,000 calls (readonly): 449 M -> 382 M instructions, peak RSS
/// 7.6 -> 8.4 MB. Built without transparent huge pages (`no_thp`): an
/// earlier build with them doubled the peak RSS. See
/// docs/contributing/dependencies.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A permission broker for AI coding agents.
///
/// An agent writes each tool call it wants to make to toolgate's stdin as one
/// JSON line; toolgate writes `allow` or `deny` back on stdout, asking a
/// person or orchestrator first when the mode and rules say so. The protocol
/// is described in docs/protocol.md; logs go to stderr (RUST_LOG sets the level).
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
    /// Show or remove the grants kept in a state directory (--state-dir).
    ///
    /// These commands work on the files. A broker that is running for a
    /// project keeps its own copy of that project's grants and writes it back
    /// at its next save: to revoke a grant there, send it the `revoke_grant`
    /// frame instead.
    #[command(subcommand)]
    Grants(GrantsCommand),
    /// Look after a state directory (--state-dir) that a broker refused.
    #[command(subcommand)]
    State(StateCommand),
    /// Decide one call from an agent's PreToolUse hook (JSON on stdin) and
    /// answer in the agent's format; see docs/hooks.md.
    ///
    /// The policy flags of `serve` apply. The agent's own permission mode is
    /// used; with --mode, TOOLGATE_MODE or a policy file's mode too, the
    /// stricter applies. With --state-dir the sessions and grants of earlier
    /// calls count. An `ask` is answered `ask`: the agent asks the user.
    Hook {
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
        /// With --socket: how long to wait for the broker's decision (a
        /// person may be answering) before denying, in seconds. Keep it
        /// below the agent's own hook timeout, which lets the call through
        /// when it runs out. [default: 50]
        #[arg(long, value_name = "SECS")]
        wait: Option<u64>,
        #[command(flatten)]
        args: ServeArgs,
    },
    /// An MCP server on stdio with one tool, `approve`: Claude Code's
    /// permission-prompt tool (`claude -p --mcp-config FILE
    /// --permission-prompt-tool mcp__toolgate__approve`); see docs/mcp.md.
    ///
    /// The policy flags of `serve` apply. Without --socket (or
    /// TOOLGATE_SOCKET) it decides in-process, and an `ask` is a denial: no
    /// human can be asked here. With a socket it is a client of the broker
    /// listening there, which may ask a human approver; with no broker
    /// listening there, every call is denied.
    Mcp {
        /// The toolgate session the calls belong to. [default: a new
        /// session for each `toolgate mcp` process]
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Ask the broker listening on this Unix socket (`toolgate serve
        /// --listen unix:PATH`) instead of deciding in-process. Also
        /// TOOLGATE_SOCKET.
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
        #[command(flatten)]
        args: ServeArgs,
    },
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
    Check {
        /// The session's scope, as `session_start`'s `permissions`:
        /// '{"commandPatterns":["git *"]}'.
        #[arg(long, value_name = "JSON")]
        session_scope: Option<String>,
        /// The tool's whole input as a JSON object, instead of SUBJECT.
        #[arg(long, value_name = "JSON", conflicts_with = "subject")]
        input: Option<String>,
        /// The directory the agent reports for the call (relative to the
        /// project root).
        #[arg(long, value_name = "DIR")]
        cwd: Option<String>,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// The tool, as an agent names it (bash, Bash, run_shell_command,
        /// edit, Write, webfetch, mcp__server__tool, ...).
        #[arg(value_name = "TOOL")]
        tool: String,
        /// The command, path, URL or pattern.
        #[arg(value_name = "SUBJECT")]
        subject: Option<String>,
        #[command(flatten)]
        args: ServeArgs,
    },
    /// Feed recorded sessions through a fresh broker, deterministically:
    /// the same files and flags give the same bytes (ids count up, the clock
    /// reads the recorded times). Prints toolgate's frames, one decision per
    /// call; a question the recording holds no answer to is denied (source
    /// replay). See docs/replay.md.
    ///
    /// The policy flags of `serve` apply. Exit code 0; 1 when --check or
    /// --compare found differences; 2 when a file cannot be used.
    Replay {
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
        args: ServeArgs,
    },
    /// Check policy files, or convert other agents' permission settings
    /// into a toolgate policy.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// A terminal approver: attach to a broker started with `serve --listen`
    /// and answer its questions (o once, a always, r reject, q quit).
    Approve {
        /// The broker's socket [env: TOOLGATE_SOCKET]; default
        /// $XDG_RUNTIME_DIR/toolgate/broker.sock, else /tmp/toolgate-$UID/broker.sock.
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Load each policy file as `serve` would and print every error, warning
    /// and lint with its file and key: rules shadowed by a later rule, `ask`
    /// rules the mode never lets ask, overrides (--permission) that change
    /// nothing. Exit code 2 when a file has an error, else 0.
    Validate {
        /// Policy files (toolgate.json, opencode.json(c)).
        #[arg(value_name = "FILE", required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        args: Box<ServeArgs>,
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
enum ImportFrom {
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

#[derive(Debug, Subcommand)]
enum GrantsCommand {
    /// List every grant of every project in the state directory: grantID,
    /// scope (project or session), sessionID, permission, pattern, project root.
    List {
        /// The state directory [env: TOOLGATE_STATE_DIR]
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove grants from whichever project file holds them (saved
    /// atomically). Prints what was removed; an id no file holds is reported
    /// on stderr and the exit code is 1.
    Revoke {
        /// The state directory [env: TOOLGATE_STATE_DIR]
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// The grants to remove (grant_...).
        #[arg(value_name = "GRANT_ID", required = true)]
        ids: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum StateCommand {
    /// Repair the state files a broker refuses to start on (exit code 2):
    /// a journal with a line that cannot be read is written anew from its
    /// snapshot and every journal record that can be read (the sessions it
    /// closes above all); a state file that cannot be read at all, or a
    /// journal without one, keeps the sessions it holds whole and the
    /// closed ones it names, and closes the sessions it cannot read whole.
    /// The original files are kept beside it
    /// (`<file>.before-repair-<ms>`), and everything not kept whole is
    /// named. Exit code 1 when a file could not be repaired.
    Repair {
        /// The state directory [env: TOOLGATE_STATE_DIR]
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// The project a state file that cannot be read at all belongs to,
        /// when its text no longer names it (default: the current
        /// directory); the file's name must be that project's
        #[arg(long, value_name = "DIR")]
        project_root: Option<PathBuf>,
    },
}

#[derive(Debug, Clone, Args)]
struct ServeArgs {
    /// The mode new sessions start in: auto, auto_edit, ask, plan or readonly
    /// (aliases: default, manual, yolo, bypassPermissions, acceptEdits,
    /// accept_edits, auto-edit, read-only, read_only). Beats TOOLGATE_MODE,
    /// which beats the policy file's `mode`; the default is ask. auto allows
    /// what the mode and the built-in defaults would ask about; an ask rule of
    /// the policy file or an override, and the doom-loop guard, still ask.
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    mode: Option<Mode>,

    /// The same as --mode, spelled as link-assistant/agent and Claude Code
    /// spell it (default, acceptEdits, plan, bypassPermissions, ...). Given
    /// with --mode, both must name the same mode.
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    permission_mode: Option<Mode>,

    /// The policy file (JSON; see docs/modes-and-policy.md): a toolgate policy, or OpenCode's
    /// config (opencode.json, opencode.jsonc, or a file whose $schema is on
    /// opencode.ai), of which only the permissions are used. Without it:
    /// toolgate.json in --project-root when that is given, else the
    /// toolgate.json nearest the working directory, looking upward no higher
    /// than the repository root (the first directory holding .git). An
    /// invalid policy stops toolgate with exit code 2.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,

    /// With an OpenCode config as the policy file: also apply
    /// agent.NAME.permission (and the agent's legacy tools), after the
    /// config's top-level permission, as OpenCode does for that agent. An
    /// agent the file does not define stops toolgate with exit code 2.
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,

    /// OpenCode `permission` config as JSON, e.g. '{"bash":{"git push *":"deny"}}'.
    /// The last layer of rules, after the built-in defaults, the policy file
    /// and TOOLGATE_PERMISSION: the last matching rule decides, so it can
    /// loosen them as well as tighten them. A deny that decides is final.
    #[arg(long, value_name = "JSON")]
    permission: Option<String>,

    /// The project root: paths are matched relative to it, and paths outside it
    /// ask as `external_directory`. Default: the policy file's projectRoot,
    /// else the directory of a toolgate.json found by searching upward, else
    /// the working directory.
    #[arg(long, value_name = "DIR")]
    project_root: Option<PathBuf>,

    /// Seconds a question waits for its answer before the call is denied
    /// (source `timeout`); 0 waits forever. Default: the policy file's
    /// askTimeoutSeconds, else 300.
    #[arg(long, value_name = "SECS")]
    ask_timeout: Option<u64>,

    /// The sub-agent types that only read, comma-separated: plan mode lets
    /// the model launch them (Claude Code's Agent/Task tool with that
    /// `subagent_type`), and every call they make stays bound by plan mode.
    /// An empty value admits none. Default: the policy file's
    /// readOnlyAgents, else Explore,Plan.
    #[arg(long, value_name = "A,B", value_parser = parse_read_only_agents)]
    read_only_agents: Option<ReadOnlyAgents>,

    /// What to do when the answer is "ask": `wait` emits a permission_request
    /// and waits; `deny` denies at once without asking (non-interactive runs).
    /// [default: wait]
    #[arg(long, value_name = "POLICY")]
    on_ask: Option<OnAskArg>,

    /// The longest input line accepted, in bytes; longer lines are skipped
    /// without being buffered and answered with an error frame. [default: 1048576]
    #[arg(long, value_name = "BYTES")]
    max_frame_bytes: Option<usize>,

    /// Keep grants and sessions in DIR so that they survive a restart: one
    /// file per project root, saved atomically; a corrupt file is moved aside
    /// with a warning, but a journal with a bad line before its last stops
    /// the start (exit code 2) until `toolgate state repair`. A running
    /// broker locks its file: a second broker for
    /// the same project and directory keeps its changes in memory only. Also
    /// TOOLGATE_STATE_DIR. [default: no state is kept]
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,

    /// Who answers the questions instead of the client on stdin/stdout:
    /// `tty` asks on the controlling terminal (/dev/tty), line by line;
    /// `command:PROG` runs `sh -c PROG` per question, the request as one
    /// JSON line on its stdin, its first stdout line the answer (once,
    /// always, reject, or {"response":…,"message":…,"patterns":[…]});
    /// anything else is a reject saying why. See docs/approvers.md.
    #[arg(long, value_name = "tty|command:PROG", value_parser = toolgate::approver::parse_spec)]
    approver: Option<toolgate::approver::Spec>,

    /// Serve many connections on a Unix socket instead of stdin/stdout:
    /// `unix:PATH`, or `unix` for the default path ($XDG_RUNTIME_DIR/toolgate/
    /// broker.sock, else /tmp/toolgate-UID/broker.sock). The socket is made
    /// 0600 in a directory only you can enter; other users are refused.
    #[arg(long, value_name = "unix:PATH")]
    listen: Option<String>,

    /// Append a JSON line to FILE for every decision and every answer to a
    /// question (created 0600; never rewritten): time, session and parent,
    /// client, tool, input and subject, mode, decision, source, reason, the
    /// rule with its origin or the grant used, who answered and how long the
    /// question waited. Written and flushed before the decision is sent; a
    /// decision that cannot be recorded is a denial. `toolgate replay
    /// --from audit FILE` reads it back. See docs/audit.md.
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
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
            permission_mode: self.permission_mode.or(other.permission_mode),
            policy: self.policy.or(other.policy),
            agent: self.agent.or(other.agent),
            permission: self.permission.or(other.permission),
            project_root: self.project_root.or(other.project_root),
            ask_timeout: self.ask_timeout.or(other.ask_timeout),
            read_only_agents: self.read_only_agents.or(other.read_only_agents),
            on_ask: self.on_ask.or(other.on_ask),
            max_frame_bytes: self.max_frame_bytes.or(other.max_frame_bytes),
            state_dir: self.state_dir.or(other.state_dir),
            approver: self.approver.or(other.approver),
            listen: self.listen.or(other.listen),
            audit: self.audit.or(other.audit),
        }
    }
}

/// `--read-only-agents`: sub-agent type names.
#[derive(Debug, Clone)]
struct ReadOnlyAgents(Vec<String>);

fn parse_read_only_agents(list: &str) -> Result<ReadOnlyAgents, String> {
    let names: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .collect();
    for name in &names {
        toolgate_policy::check_read_only_agent(name)?;
    }
    Ok(ReadOnlyAgents(names))
}

fn parse_mode(name: &str) -> Result<Mode, String> {
    name.parse::<Mode>().map_err(|err| {
        if name == "dontAsk" {
            format!("{err}; for Claude Code's dontAsk (deny what would ask) use --on-ask deny")
        } else {
            err.to_string()
        }
    })
}

/// The mode from the flags and `TOOLGATE_MODE` (`env`): the flag beats the
/// environment; `--mode` and `--permission-mode` must agree.
fn choose_mode(
    mode: Option<Mode>,
    permission_mode: Option<Mode>,
    env: Option<&str>,
) -> Result<Option<Mode>, String> {
    let flag = match (mode, permission_mode) {
        (Some(mode), Some(other)) if mode != other => {
            return Err(format!(
                "--mode {mode} and --permission-mode {other} name different modes; give one"
            ))
        }
        (mode, other) => mode.or(other),
    };
    if flag.is_some() {
        return Ok(flag);
    }
    match env.map(str::trim).filter(|value| !value.is_empty()) {
        None => Ok(None),
        Some(value) => parse_mode(value)
            .map(Some)
            .map_err(|err| format!("invalid TOOLGATE_MODE: {err}")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Logs go through the one stderr channel: escaped, and never a panic
    // when stderr's reader is gone (tracing's own complaint about a failed
    // write would be an `eprintln!`, so it is off too).
    tracing_subscriber::fmt()
        .with_writer(|| toolgate::display::StderrWriter)
        .log_internal_errors(false)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    survive_file_size_limit();
    // Flags may stand before or after `serve`; the ones after it win.
    let args = match cli.command {
        Some(Command::Serve(args)) => args.or(cli.serve),
        None => cli.serve,
        Some(Command::Grants(command)) => return grants(command, cli.serve.state_dir),
        Some(Command::State(StateCommand::Repair {
            state_dir,
            project_root,
        })) => return repair(state_dir.or(cli.serve.state_dir), project_root),
        Some(Command::Hook {
            target,
            socket,
            wait,
            args,
        }) => return hook(target, socket, wait, args.or(cli.serve)),
        Some(Command::Mcp {
            session,
            socket,
            args,
        }) => return mcp(session, socket, args.or(cli.serve)),
        Some(Command::Approve { socket }) => return approve(socket),
        Some(Command::Policy(PolicyCommand::Validate { files, args })) => {
            let args = args.or(cli.serve);
            let env_mode = std::env::var("TOOLGATE_MODE").ok();
            let mode = match choose_mode(args.mode, args.permission_mode, env_mode.as_deref()) {
                Ok(mode) => mode,
                Err(err) => {
                    say!("toolgate: {err}");
                    return ExitCode::from(2);
                }
            };
            return ExitCode::from(toolgate::policy_cli::validate(
                &files,
                &settings_of(mode, args, false),
            ));
        }
        Some(Command::Policy(PolicyCommand::Import { files, from, agent })) => {
            use toolgate::import::Format;
            let from = from.map(|from| match from {
                ImportFrom::Claude => Format::Claude,
                ImportFrom::Qwen => Format::Qwen,
                ImportFrom::Opencode | ImportFrom::LinkAssistant => Format::Opencode,
                ImportFrom::Gemini => Format::Gemini,
            });
            return ExitCode::from(toolgate::policy_cli::import(&files, from, agent.as_deref()));
        }
        Some(Command::Replay {
            files,
            from,
            summary,
            check,
            compare,
            args,
        }) => {
            let options = toolgate::replay::cli::Options {
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
            return replay(&files, &options, args.or(cli.serve));
        }
        Some(Command::Check {
            session_scope,
            input,
            cwd,
            json,
            tool,
            subject,
            args,
        }) => {
            return check(
                CheckArgs {
                    session_scope,
                    input,
                    cwd,
                    json,
                    tool,
                    subject,
                },
                args.or(cli.serve),
            )
        }
    };
    serve(args)
}

/// `toolgate replay`: see [`toolgate::replay`].
fn replay(
    files: &[PathBuf],
    options: &toolgate::replay::cli::Options,
    args: ServeArgs,
) -> ExitCode {
    for (flag, given) in [
        ("--state-dir", args.state_dir.is_some()),
        ("--listen", args.listen.is_some()),
        ("--approver", args.approver.is_some()),
        ("--on-ask", args.on_ask.is_some()),
        ("--ask-timeout", args.ask_timeout.is_some()),
        ("--audit", args.audit.is_some()),
        (
            "--policy (with --compare)",
            args.policy.is_some() && options.compare.is_some(),
        ),
    ] {
        if given {
            say!("toolgate replay: {flag} does not apply: a replay starts from a fresh broker, and answers questions from the recording");
            return ExitCode::from(2);
        }
    }
    let policy = |file: Option<&std::path::Path>| {
        let mut args = args.clone();
        if let Some(file) = file {
            args.policy = Some(file.to_path_buf());
        }
        open(args, true)
            .ok()
            .map(|opened| (opened.policy, opened.sources))
    };
    ExitCode::from(toolgate::replay::cli::main(files, options, &policy))
}

/// The flags of `toolgate check` besides the policy flags.
struct CheckArgs {
    session_scope: Option<String>,
    input: Option<String>,
    cwd: Option<String>,
    json: bool,
    tool: String,
    subject: Option<String>,
}

/// `toolgate check`: see [`toolgate::check`].
fn check(check: CheckArgs, args: ServeArgs) -> ExitCode {
    let usage = |message: String| {
        say!("toolgate check: {message}");
        ExitCode::from(2)
    };
    for (flag, given) in [
        ("--state-dir", args.state_dir.is_some()),
        ("--listen", args.listen.is_some()),
        ("--approver", args.approver.is_some()),
        ("--on-ask", args.on_ask.is_some()),
        ("--audit", args.audit.is_some()),
    ] {
        if given {
            return usage(format!(
                "{flag} does not apply: check decides one call in a fresh session, with no grants"
            ));
        }
    }
    let scope = match check.session_scope.as_deref().map(|text| {
        serde_json::from_str::<toolgate_protocol::ScopeSpec>(text)
            .map(toolgate::convert::scope_rules)
            .map_err(|err| format!("--session-scope is not a scope: {err}"))
    }) {
        None => None,
        Some(Ok(rules)) => Some(rules),
        Some(Err(err)) => return usage(err),
    };
    let Ok(opened) = open(args, false) else {
        return ExitCode::from(2);
    };
    let policy = opened.policy;
    let spec = policy.registry.lookup(&check.tool).into_owned();
    let input = match (&check.input, &check.subject) {
        (Some(text), _) => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(input)) => input,
            Ok(_) => return usage("--input is not a JSON object".to_string()),
            Err(err) => return usage(format!("--input is not JSON: {err}")),
        },
        (None, Some(subject)) => match toolgate::check::input_for(&spec, subject) {
            Some(input) => input,
            None => {
                return usage(format!(
                    "`{}` takes no subject; give its input with --input JSON (or none)",
                    check.tool
                ))
            }
        },
        (None, None) => serde_json::Map::new(),
    };
    let request = toolgate::check::Request {
        tool: &check.tool,
        input: &input,
        cwd: check.cwd.as_deref(),
        mode: policy.default_mode,
    };
    let evaluation = match toolgate::check::evaluate(&policy, &request, scope) {
        Ok(evaluation) => evaluation,
        Err(err) => return usage(err),
    };
    let text = if check.json {
        toolgate::check::to_json(&request, &spec, &evaluation).to_string() + "\n"
    } else {
        toolgate::check::to_text(&request, &spec, &evaluation)
    };
    let mut out = std::io::stdout().lock();
    if let Err(err) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        say!("toolgate check: cannot write: {err}");
        return ExitCode::from(2);
    }
    match evaluation.action {
        toolgate_policy::Action::Allow => ExitCode::SUCCESS,
        toolgate_policy::Action::Deny => ExitCode::from(1),
        toolgate_policy::Action::Ask => ExitCode::from(3),
    }
}

/// `toolgate approve`: the socket from --socket, else TOOLGATE_SOCKET, else
/// the default path.
fn approve(socket: Option<PathBuf>) -> ExitCode {
    let socket = socket
        .or_else(|| {
            std::env::var_os("TOOLGATE_SOCKET")
                .filter(|value| !value.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(toolgate::socket::default_path);
    match toolgate::approver::tui::run(&socket) {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    }
}

/// `TOOLGATE_STATE_DIR`, when set and not empty.
fn state_dir_env() -> Option<PathBuf> {
    std::env::var_os("TOOLGATE_STATE_DIR")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
}

/// `toolgate grants list|revoke`. `outer` is a `--state-dir` given before `grants`.
fn grants(command: GrantsCommand, outer: Option<PathBuf>) -> ExitCode {
    let (flag, json, ids) = match command {
        GrantsCommand::List { state_dir, json } => (state_dir, json, None),
        GrantsCommand::Revoke { state_dir, ids } => (state_dir, false, Some(ids)),
    };
    let Some(dir) = flag.or(outer).or_else(state_dir_env) else {
        say!("toolgate: grants needs --state-dir DIR (or TOOLGATE_STATE_DIR)");
        return ExitCode::from(2);
    };
    // This subcommand is not the broker: its stdout is for the person who ran it.
    let mut out = std::io::stdout().lock();
    let (written, code) = match ids {
        None => {
            let (rows, warnings) = match state::list_grants(&dir) {
                Ok(listed) => listed,
                Err(err) => {
                    say!("toolgate: {err}");
                    return ExitCode::from(1);
                }
            };
            for warning in &warnings {
                say!("toolgate: warning: {warning}");
            }
            let written = if rows.is_empty() {
                say!("toolgate: no grants in {}", dir.display());
                Ok(())
            } else if json {
                rows.iter().try_for_each(|row| {
                    let line = serde_json::to_string(row).map_err(std::io::Error::other)?;
                    writeln!(out, "{line}")
                })
            } else {
                out.write_all(state::grants_table(&rows).as_bytes())
            };
            (written, ExitCode::SUCCESS)
        }
        Some(ids) => {
            let revoked = match state::revoke_grants(&dir, &ids) {
                Ok(revoked) => revoked,
                Err(err) => {
                    say!("toolgate: {err}");
                    return ExitCode::from(1);
                }
            };
            for warning in &revoked.warnings {
                say!("toolgate: warning: {warning}");
            }
            let written = revoked.removed.iter().try_for_each(|row| {
                writeln!(
                    out,
                    "revoked {} ({} grant of session {}: {} `{}`) for {}",
                    shown(&row.grant_id),
                    row.scope.as_str(),
                    shown(&row.session_id),
                    shown(&row.permission),
                    shown(&row.pattern),
                    shown(&row.project_root)
                )
            });
            for id in &revoked.unknown {
                say!("toolgate: no grant has the id `{id}` in {}", dir.display());
            }
            let code = if revoked.unknown.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            };
            (written, code)
        }
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => code,
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => code,
        Err(err) => {
            say!("toolgate: cannot write the output: {err}");
            ExitCode::from(1)
        }
    }
}

/// `toolgate state repair`: see [`state::repair`]. What was repaired goes
/// to stdout, for the person who ran it.
fn repair(flag: Option<PathBuf>, project_root: Option<PathBuf>) -> ExitCode {
    let Some(dir) = flag.or_else(state_dir_env) else {
        toolgate::say!("toolgate: state repair needs --state-dir DIR (or TOOLGATE_STATE_DIR)");
        return ExitCode::from(2);
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let root = toolgate_policy::normalize(
        &project_root
            .unwrap_or_else(|| cwd.clone())
            .to_string_lossy(),
        &cwd,
        std::env::var_os("HOME").map(PathBuf::from).as_deref(),
    );
    let (repaired, warnings) = match state::repair(&dir, SystemClock::new().wall_ms(), Some(&root))
    {
        Ok(done) => done,
        Err(err) => {
            toolgate::say!("toolgate: {err}");
            return ExitCode::from(1);
        }
    };
    for warning in &warnings {
        toolgate::say!("toolgate: warning: {warning}");
    }
    let mut out = std::io::stdout().lock();
    let written = if repaired.is_empty() {
        writeln!(out, "nothing to repair in {}", dir.display())
    } else {
        repaired.iter().try_for_each(|done| write!(out, "{done}"))
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) if warnings.is_empty() => ExitCode::SUCCESS,
        Ok(()) => ExitCode::from(1),
        Err(err) => {
            toolgate::say!("toolgate: cannot write the output: {err}");
            ExitCode::from(1)
        }
    }
}

/// Under a file-size limit (`ulimit -f`), a write past it raises SIGXFSZ,
/// whose default action kills the process without a word (status 153): a
/// hook killed so lets the agent run the call. With a handler installed the
/// write fails with EFBIG instead, which every writer handles as any failed
/// write (the hook denies, the broker says what it could not save). A
/// handler rather than SIG_IGN: programs this process starts (a `command:`
/// approver) get the default action back, as SIG_IGN would be inherited.
#[cfg(unix)]
fn survive_file_size_limit() {
    let raised = Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Err(err) = signal_hook::flag::register(signal_hook::consts::SIGXFSZ, raised) {
        tracing::warn!("a file-size limit will end the process at the first write past it: {err}");
    }
}

/// No SIGXFSZ off Unix.
#[cfg(not(unix))]
fn survive_file_size_limit() {}

/// Turn SIGTERM, SIGINT and SIGHUP into orders for the transport. SIGHUP
/// loads the policy again here, as startup built it (policy file,
/// `--permission`, `TOOLGATE_PERMISSION`, project root); a policy that does
/// not load, or that would move the project root, is reported on stderr and
/// the one in force stays.
#[cfg(unix)]
fn watch_signals(
    settings: Settings,
    root: PathBuf,
) -> Option<(Sender<Control>, Receiver<Control>)> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = match signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP]) {
        Ok(signals) => signals,
        Err(err) => {
            say!("toolgate: warning: signals will not be handled: {err}");
            return None;
        }
    };
    let (orders, control) = std::sync::mpsc::channel();
    let finished = orders.clone();
    std::thread::spawn(move || {
        for signal in signals.forever() {
            let order = match signal {
                SIGTERM => Control::Stop("SIGTERM"),
                SIGINT => Control::Stop("SIGINT"),
                _ => match setup::load(&settings) {
                    Ok(loaded) if loaded.policy.project_root != root => {
                        say!(
                            "toolgate: SIGHUP received: the policy was not reloaded: its project root would change from {} to {}; keeping the policy in force",
                            root.display(),
                            loaded.policy.project_root.display()
                        );
                        continue;
                    }
                    Ok(setup::Loaded {
                        policy,
                        warnings,
                        sources,
                        ..
                    }) => {
                        for warning in &warnings {
                            tracing::warn!("{warning}");
                        }
                        Control::Reload {
                            ask_timeout_ms: policy.ask_timeout_seconds.saturating_mul(1000),
                            policy: Arc::new(policy),
                            source: setup::describe_sources(&sources),
                        }
                    }
                    Err(err) => {
                        say!(
                            "toolgate: SIGHUP received: the policy was not reloaded: {err}; keeping the policy in force"
                        );
                        continue;
                    }
                },
            };
            if orders.send(order).is_err() {
                return;
            }
        }
    });
    Some((finished, control))
}

/// No signals to watch off Unix.
#[cfg(not(unix))]
fn watch_signals(
    _settings: Settings,
    _root: PathBuf,
) -> Option<(Sender<Control>, Receiver<Control>)> {
    None
}

/// A broker built from the flags, the environment, the policy and the state
/// directory, as `serve` and `hook` both start.
struct Opened {
    broker: Broker,
    /// The policy's layers, lowest first (what `ready` names).
    sources: Vec<String>,
    settings: Settings,
    policy: Arc<toolgate_policy::Policy>,
    configured_mode: Option<Mode>,
    max_frame_bytes: usize,
}

/// What the flags and the environment say about the policy.
fn settings_of(mode: Option<Mode>, args: ServeArgs, remember_links: bool) -> Settings {
    Settings {
        remember_links,
        mode,
        policy: args.policy,
        agent: args.agent,
        permission: args.permission,
        permission_env: std::env::var("TOOLGATE_PERMISSION")
            .ok()
            .filter(|v| !v.trim().is_empty()),
        project_root: args.project_root,
        ask_timeout: args.ask_timeout,
        read_only_agents: args.read_only_agents.map(|agents| agents.0),
        cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        home: std::env::var_os("HOME").map(PathBuf::from),
    }
}

/// Opens the broker; `long_lived` for a process that judges many calls
/// (see [`Settings::remember_links`]).
fn open(args: ServeArgs, long_lived: bool) -> Result<Opened, ExitCode> {
    let env_mode = std::env::var("TOOLGATE_MODE").ok();
    let mode = match choose_mode(args.mode, args.permission_mode, env_mode.as_deref()) {
        Ok(mode) => mode,
        Err(err) => {
            say!("toolgate: {err}");
            return Err(ExitCode::from(2));
        }
    };
    let settings = settings_of(mode, args.clone(), long_lived);
    let setup::Loaded {
        policy,
        warnings,
        sources,
        configured_mode,
    } = match setup::load(&settings) {
        Ok(loaded) => loaded,
        Err(err) => {
            say!("toolgate: invalid policy: {err}");
            return Err(ExitCode::from(2));
        }
    };
    for warning in &warnings {
        tracing::warn!("{warning}");
    }
    let max_frame_bytes = args.max_frame_bytes.unwrap_or(1 << 20);
    if max_frame_bytes == 0 {
        say!("toolgate: --max-frame-bytes must be at least 1");
        return Err(ExitCode::from(2));
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
    let clock = SystemClock::new();
    let wall_ms = clock.wall_ms();
    let policy = Arc::new(policy);
    let mut broker = Broker::new(policy.clone(), config, Box::new(clock), Box::new(UuidIds));
    if let Some(path) = &args.audit {
        match toolgate::broker::audit::FileAudit::open(path) {
            Ok(log) => broker.set_audit(Box::new(log)),
            Err(err) => {
                say!("toolgate: {err}");
                return Err(ExitCode::from(2));
            }
        }
    }
    let state_dir = args.state_dir.or_else(state_dir_env);
    broker.set_origin(Origin {
        policy_sources: sources.clone(),
        state_dir: state_dir.as_ref().map(|dir| {
            toolgate_policy::normalize(&dir.to_string_lossy(), &settings.cwd, None)
                .to_string_lossy()
                .into_owned()
        }),
    });
    if let Some(dir) = state_dir {
        let (store, snapshot, warnings) = match FileStore::open(&dir, &policy.project_root, wall_ms)
        {
            Ok(opened) => opened,
            Err(err) => {
                toolgate::say!("toolgate: {err}");
                return Err(ExitCode::from(2));
            }
        };
        for warning in &warnings {
            say!("toolgate: warning: {warning}");
        }
        tracing::info!(file = %store.path().display(), "state file");
        for warning in broker.restore(Box::new(store), snapshot) {
            say!("toolgate: warning: {warning}");
        }
    }
    Ok(Opened {
        broker,
        sources,
        settings,
        policy,
        configured_mode,
        max_frame_bytes,
    })
}

fn serve(args: ServeArgs) -> ExitCode {
    let spec = args.approver.clone();
    let listen = match args.listen.as_deref().map(listen_path).transpose() {
        Ok(listen) => listen,
        Err(err) => {
            say!("toolgate: {err}");
            return ExitCode::from(2);
        }
    };
    if spec.is_some() && listen.is_some() {
        say!("toolgate: --approver works with stdin/stdout only; with --listen, run `toolgate approve` beside the broker");
        return ExitCode::from(2);
    }
    let Opened {
        broker,
        settings,
        policy,
        max_frame_bytes,
        ..
    } = match open(args, true) {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let approver = match spec {
        None => None,
        Some(spec) => {
            let (answers, answered) = std::sync::mpsc::channel();
            match toolgate::approver::InProcess::start(
                &spec,
                Some(policy.project_root.clone()),
                answers,
            ) {
                Ok(approver) => {
                    let name = match spec {
                        toolgate::approver::Spec::Tty => "tty",
                        toolgate::approver::Spec::Command(_) => "command",
                    };
                    Some((approver, name, answered))
                }
                Err(err) => {
                    say!("toolgate: --approver tty: cannot open /dev/tty: {err}");
                    return ExitCode::from(2);
                }
            }
        }
    };
    let control = watch_signals(settings, policy.project_root.clone());
    #[cfg(unix)]
    if let Some(path) = listen {
        let listener = match toolgate::socket::listen(&path) {
            Ok(listener) => listener,
            Err(err) => {
                say!("toolgate: {err}");
                return ExitCode::from(2);
            }
        };
        say!("toolgate: listening on {}", path.display());
        return ended(toolgate::socket::run(
            listener,
            broker,
            max_frame_bytes,
            control,
        ));
    }
    ended(toolgate::serve::run_with_approver(
        std::io::stdin(),
        std::io::stdout(),
        broker,
        max_frame_bytes,
        control,
        approver,
    ))
}

/// The exit status of a transport that ended with `result`: 1 for an i/o
/// error or for changes in force that could not be saved in the state
/// directory ([`toolgate::broker::Lost`], named on stderr); a client that
/// went away (a broken pipe) is a normal end.
fn ended(result: std::io::Result<()>) -> ExitCode {
    let Err(err) = result else {
        return ExitCode::SUCCESS;
    };
    let lost = err
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<toolgate::broker::Lost>());
    match lost {
        Some(lost) => say!("toolgate: error: {lost}"),
        None if err.kind() == std::io::ErrorKind::BrokenPipe => return ExitCode::SUCCESS,
        None => say!("toolgate: i/o error: {err}"),
    }
    ExitCode::from(1)
}

/// The socket path `--listen` names: `unix:PATH`, or `unix` for the default.
fn listen_path(value: &str) -> Result<PathBuf, String> {
    #[cfg(unix)]
    {
        match value {
            "unix" | "unix:" => Ok(toolgate::socket::default_path()),
            _ => match value.strip_prefix("unix:") {
                Some(path) => Ok(PathBuf::from(path)),
                None => Err(format!(
                    "--listen {value:?}: expected unix:PATH (or unix for the default path)"
                )),
            },
        }
    }
    #[cfg(not(unix))]
    {
        Err(format!(
            "--listen {value:?}: Unix sockets need a Unix system"
        ))
    }
}

/// `toolgate hook claude|qwen`: decide the one call on stdin, answer on
/// stdout in the agent's format (see `toolgate::hook`). Never fails open: a
/// broker that cannot start, input that cannot be read, or an answer that
/// cannot be written is a denial, or exit code 2 (which the agents read as
/// "blocked").
fn hook(agent: HookAgent, socket: Option<PathBuf>, wait: Option<u64>, args: ServeArgs) -> ExitCode {
    if args.approver.is_some() {
        say!("toolgate hook: --approver works with serve only (a hook asks the broker's approvers through --socket)");
        return ExitCode::from(2);
    }
    use std::io::Read;
    use toolgate::hook::{self, Answer};
    let agent = match agent {
        HookAgent::Claude => hook::Agent::Claude,
        HookAgent::Qwen => hook::Agent::Qwen,
        HookAgent::Gemini => hook::Agent::Gemini,
        HookAgent::Codex => hook::Agent::Codex,
    };
    let write = |answer: &Answer| -> ExitCode {
        let mut out = std::io::stdout().lock();
        match writeln!(out, "{}", answer.to_json(agent)).and_then(|()| out.flush()) {
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
    #[cfg(unix)]
    if let Some(path) = toolgate::client::chosen_socket(socket.as_deref()) {
        // The broker there has its own policy and state: flags that would
        // set up a policy here would be silently ignored, so they are refused.
        let given: Vec<&str> = [
            ("--policy", args.policy.is_some()),
            ("--permission", args.permission.is_some()),
            ("--project-root", args.project_root.is_some()),
            ("--state-dir", args.state_dir.is_some()),
            ("--agent", args.agent.is_some()),
            ("--ask-timeout", args.ask_timeout.is_some()),
            ("--on-ask", args.on_ask.is_some()),
            ("--listen", args.listen.is_some()),
            ("--audit", args.audit.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect();
        if !given.is_empty() {
            return write(&deny(format!(
                "toolgate hook: {} belong to the broker at {} (give them to `toolgate serve --listen`), not to a hook that asks it",
                given.join(", "),
                path.display()
            )));
        }
        let env_mode = std::env::var("TOOLGATE_MODE").ok();
        let flag = match choose_mode(args.mode, args.permission_mode, env_mode.as_deref()) {
            Ok(mode) => mode,
            Err(err) => return write(&deny(format!("toolgate hook: {err}"))),
        };
        let wait = std::time::Duration::from_secs(wait.unwrap_or(50));
        return write(&hook::decide_remote(agent, &input, flag, &path, wait));
    }
    #[cfg(not(unix))]
    let _ = (socket, wait);
    // Questions are put to the user by the agent itself: the broker only
    // has to say that one would be asked.
    let args = ServeArgs {
        on_ask: Some(OnAskArg::Wait),
        ..args
    };
    let Opened {
        mut broker,
        policy,
        configured_mode,
        ..
    } = match open(args, false) {
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
        &mut broker,
    );
    write(&answer)
}

/// `toolgate mcp`: serve MCP on stdin/stdout until end of input (see
/// `toolgate::mcp`). A broker that cannot start stops it with exit code 2
/// before it answers anything, so Claude Code reports the server as failed
/// (and, without its permission-prompt tool, asks nobody and allows nothing
/// that its own rules do not allow).
fn mcp(session: Option<String>, socket: Option<PathBuf>, args: ServeArgs) -> ExitCode {
    let limit = args.max_frame_bytes.unwrap_or(16 << 20).max(1);
    let session = session
        .filter(|session| !session.is_empty())
        .unwrap_or_else(|| format!("mcp-{}", uuid::Uuid::new_v4().simple()));
    let socket = socket.or_else(|| std::env::var_os("TOOLGATE_SOCKET").map(PathBuf::from));
    let served = match socket.filter(|path| !path.as_os_str().is_empty()) {
        Some(path) => remote(session, path, &args, limit),
        None => in_process(session, args, limit),
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

/// `toolgate mcp --socket PATH` until end of input: every call is put to the
/// broker listening there. `Err` for policy flags, which belong to the broker.
#[cfg(unix)]
fn remote(
    session: String,
    path: PathBuf,
    args: &ServeArgs,
    limit: usize,
) -> Result<std::io::Result<()>, ExitCode> {
    use toolgate::mcp::{self, Remote, Server};
    // The broker there has its own policy, and sessions it may have put in a
    // stricter mode: nothing here may loosen them.
    let given: Vec<&str> = [
        ("--mode", args.mode.is_some()),
        ("--permission-mode", args.permission_mode.is_some()),
        ("--policy", args.policy.is_some()),
        ("--agent", args.agent.is_some()),
        ("--permission", args.permission.is_some()),
        ("--project-root", args.project_root.is_some()),
        ("--ask-timeout", args.ask_timeout.is_some()),
        ("--on-ask", args.on_ask.is_some()),
        ("--state-dir", args.state_dir.is_some()),
        ("--audit", args.audit.is_some()),
    ]
    .into_iter()
    .filter_map(|(flag, given)| given.then_some(flag))
    .collect();
    if !given.is_empty() {
        say!(
            "toolgate mcp: {} cannot be used with --socket: the broker listening on {} decides with its own policy (give these flags to `toolgate serve --listen`)",
            given.join(", "),
            path.display()
        );
        return Err(ExitCode::from(2));
    }
    let mut server = Server::new(Remote::new(path, session));
    let stdin = std::io::stdin();
    Ok(mcp::run(
        stdin.lock(),
        std::io::stdout(),
        &mut server,
        limit,
    ))
}

/// No Unix sockets here: `--socket` cannot be served.
#[cfg(not(unix))]
fn remote(
    _session: String,
    _path: PathBuf,
    _args: &ServeArgs,
    _limit: usize,
) -> Result<std::io::Result<()>, ExitCode> {
    say!("toolgate mcp: --socket needs Unix sockets, which this system lacks");
    Err(ExitCode::from(2))
}

/// `toolgate mcp` deciding in-process until end of input; `Err` when the
/// broker cannot start (its error is on stderr).
fn in_process(
    session: String,
    args: ServeArgs,
    limit: usize,
) -> Result<std::io::Result<()>, ExitCode> {
    use toolgate::mcp::{self, InProcess, Server};
    let args = ServeArgs {
        on_ask: args.on_ask.or(Some(OnAskArg::Wait)),
        ..args
    };
    let Opened {
        broker,
        policy,
        configured_mode,
        ..
    } = open(args, true)?;
    let mut server = Server::new(InProcess::new(
        broker,
        session,
        configured_mode,
        policy.default_mode,
    ));
    let stdin = std::io::stdin();
    Ok(mcp::run(
        stdin.lock(),
        std::io::stdout(),
        &mut server,
        limit,
    ))
}
