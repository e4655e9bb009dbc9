//! A broker built from the flags, the environment, the policy and the state
//! directory, as `serve`, `hook`, `mcp`, `check` and `replay` start it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use toolgate::broker::{Broker, BrokerConfig, OnAsk, Origin};
use toolgate::clock::{Clock, SystemClock, UuidIds};
use toolgate::say;
use toolgate::setup::{self, Settings};
use toolgate::store::FileStore;
use toolgate_policy::Mode;

use super::flags::{AskArgs, KeepArgs, LineArgs, OnAskArg, PolicyArgs};

/// Every flag a broker is built from; a subcommand without a group leaves
/// it at its default.
#[derive(Debug, Clone, Default)]
pub struct BrokerFlags {
    pub policy: PolicyArgs,
    pub ask: AskArgs,
    pub keep: KeepArgs,
    pub line: LineArgs,
    /// What a bridge read from its agent's own permission settings.
    pub agent: AgentRules,
}

/// An agent's own permission rules, read by a bridge from the agent's
/// command line or environment (origin, JSON each): see
/// [`Settings::agent_permission`] and [`Settings::denied_last`].
#[derive(Debug, Clone, Default)]
pub struct AgentRules {
    pub permission: Option<(String, String)>,
    pub denied_last: Option<(String, String)>,
}

/// A broker, and what it was built from.
pub struct Opened {
    pub broker: Broker,
    /// The policy's layers, lowest first (what `ready` names).
    pub sources: Vec<String>,
    pub settings: Settings,
    pub policy: Arc<toolgate_policy::Policy>,
    pub configured_mode: Option<Mode>,
    pub max_frame_bytes: usize,
}

/// `TOOLGATE_STATE_DIR`, when set and not empty.
pub fn state_dir_env() -> Option<PathBuf> {
    std::env::var_os("TOOLGATE_STATE_DIR")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
}

/// What the flags and the environment say about the policy.
pub fn settings_of(
    mode: Option<Mode>,
    policy: &PolicyArgs,
    ask_timeout: Option<u64>,
    remember_links: bool,
) -> Settings {
    Settings {
        remember_links,
        mode,
        policy: policy.policy.clone(),
        opencode: policy.opencode.then(toolgate::setup::OpenCodeEnv::from_env),
        agent: policy.agent.clone(),
        permission: policy.permission.clone(),
        permission_env: std::env::var("TOOLGATE_PERMISSION")
            .ok()
            .filter(|v| !v.trim().is_empty()),
        managed: policy.managed.clone(),
        managed_env: std::env::var_os("TOOLGATE_MANAGED")
            .filter(|value| !value.is_empty())
            .map(PathBuf::from),
        agent_permission: None,
        denied_last: None,
        project_root: policy.project_root.clone(),
        ask_timeout,
        read_only_agents: policy.read_only_agents.clone().map(|agents| agents.0),
        cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        home: std::env::var_os("HOME").map(PathBuf::from),
    }
}

/// Opens the broker; `long_lived` for a process that judges many calls
/// (see [`Settings::remember_links`]). Every failure is said on stderr and
/// is exit code 2.
pub fn open(flags: BrokerFlags, long_lived: bool) -> Result<Opened, ExitCode> {
    let mode = match flags.policy.chosen_mode() {
        Ok(mode) => mode,
        Err(err) => {
            say!("toolgate: {err}");
            return Err(ExitCode::from(2));
        }
    };
    let mut settings = settings_of(mode, &flags.policy, flags.ask.ask_timeout, long_lived);
    settings.agent_permission = flags.agent.permission.clone();
    settings.denied_last = flags.agent.denied_last.clone();
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
        tracing::warn!(target: "toolgate", "{warning}");
    }
    let max_frame_bytes = flags.line.max_frame_bytes.unwrap_or(1 << 20);
    if max_frame_bytes == 0 {
        say!("toolgate: --max-frame-bytes must be at least 1");
        return Err(ExitCode::from(2));
    }
    // Logged under the binary's name, as when this was in main.rs (the
    // golden transcripts compare stderr).
    tracing::info!(
        target: "toolgate",
        mode = %policy.default_mode,
        root = %policy.project_root.display(),
        "toolgate ready"
    );
    let config = BrokerConfig {
        on_ask: match flags.ask.on_ask.unwrap_or(OnAskArg::Wait) {
            OnAskArg::Wait => OnAsk::Wait,
            OnAskArg::Deny => OnAsk::Deny,
        },
        ask_timeout_ms: policy.ask_timeout_seconds.saturating_mul(1000),
    };
    let clock = SystemClock::new();
    let wall_ms = clock.wall_ms();
    let policy = Arc::new(policy);
    let mut broker = Broker::new(policy.clone(), config, Box::new(clock), Box::new(UuidIds));
    if let Some(path) = &flags.keep.audit {
        match toolgate::broker::audit::FileAudit::open(path) {
            Ok(log) => broker.set_audit(Box::new(log)),
            Err(err) => {
                say!("toolgate: {err}");
                return Err(ExitCode::from(2));
            }
        }
    }
    let state_dir = flags.keep.state_dir.or_else(state_dir_env);
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
                say!("toolgate: {err}");
                return Err(ExitCode::from(2));
            }
        };
        for warning in &warnings {
            say!("toolgate: warning: {warning}");
        }
        tracing::info!(target: "toolgate", file = %store.path().display(), "state file");
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

/// The in-process decider of `toolgate CLIENT` (`mcp` and the bridges): a
/// broker built from `flags` deciding in `session`, bound as `binding`
/// says; an `ask` waits in it (and is answered as a denial, since nobody
/// can be asked here). `Err` when the broker cannot start (said on stderr).
pub fn in_process_decider(
    mut flags: BrokerFlags,
    session: String,
    binding: toolgate::adapters::bind::Binding,
    client: &'static str,
) -> Result<toolgate::adapters::mcp::InProcess, ExitCode> {
    flags.ask.on_ask = flags.ask.on_ask.or(Some(OnAskArg::Wait));
    let Opened {
        broker,
        policy,
        configured_mode,
        ..
    } = open(flags, true)?;
    Ok(toolgate::adapters::mcp::InProcess::new(
        broker,
        session,
        configured_mode,
        policy.default_mode,
        binding,
    )
    .client(client))
}

/// How `mcp` and the bridges decide: the broker on `--socket` (or
/// `TOOLGATE_SOCKET`) or at `--remote` (or `TOOLGATE_REMOTE`), else one in
/// this process built from the policy flags; and where the agent's session
/// is bound.
#[derive(Debug, clap::Args)]
pub struct DeciderArgs {
    /// Ask the broker listening on this Unix socket (`toolgate serve
    /// --listen unix:PATH`) instead of deciding in-process; its approvers
    /// may answer what asks. Also TOOLGATE_SOCKET.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    #[command(flatten)]
    remote: super::flags::RemoteArgs,
    #[command(flatten)]
    bind: super::flags::BindArgs,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    ask: AskArgs,
    #[command(flatten)]
    keep: KeepArgs,
    #[command(flatten)]
    line: LineArgs,
}

/// Where a client finds the broker that decides: an endpoint (a socket or
/// a remote broker), or off Unix a socket's path, which cannot be used.
#[cfg(unix)]
pub type BrokerAt = toolgate::transport::client::Endpoint;
/// See the Unix definition.
#[cfg(not(unix))]
pub type BrokerAt = PathBuf;

/// What [`DeciderArgs`] resolve to.
pub struct Decider {
    /// The broker, when one decides.
    pub socket: Option<BrokerAt>,
    /// Where the agent's session is bound.
    pub binding: toolgate::adapters::bind::Binding,
    /// The flags an in-process broker is built from.
    pub flags: BrokerFlags,
}

impl DeciderArgs {
    /// These flags with `outer`'s (given before the subcommand) where these
    /// are unset, the broker from the flags or the environment (see
    /// `toolgate::transport::client::chosen`). `Err` says why the binding
    /// or the broker named cannot be used.
    pub fn resolve(self, outer: super::flags::ServeArgs) -> Result<Decider, String> {
        let binding = self.bind.resolve()?;
        #[cfg(unix)]
        let socket =
            toolgate::transport::client::chosen(self.socket.as_deref(), self.remote.spec())
                .map_err(|err| err.to_string())?;
        #[cfg(not(unix))]
        let socket = self
            .socket
            .or_else(|| std::env::var_os("TOOLGATE_SOCKET").map(PathBuf::from))
            .filter(|path| !path.as_os_str().is_empty());
        let flags = BrokerFlags {
            policy: self.policy.or(outer.policy),
            ask: self.ask.or(outer.ask),
            keep: self.keep.or(outer.keep),
            line: self.line.or(outer.line),
            agent: AgentRules::default(),
        };
        Ok(Decider {
            socket,
            binding,
            flags,
        })
    }
}

/// With `--socket` (or `--remote`), the broker there decides with its own
/// policy: the policy flags given (`given`, clap ids), and `more` that a
/// command read elsewhere, are refused, said on stderr as `toolgate
/// COMMAND: ...` (exit code 2).
pub fn refuse_policy_with_socket(
    command: &str,
    given: &[String],
    more: &[&str],
    broker: &BrokerAt,
) -> Result<(), ExitCode> {
    let mut named = super::flags::broker_flags(given, &["max_frame_bytes"]);
    named.extend(more.iter().map(|more| more.to_string()));
    if named.is_empty() {
        return Ok(());
    }
    #[cfg(unix)]
    let (flag, label) = (broker_flag(broker), broker.label());
    #[cfg(not(unix))]
    let (flag, label) = ("--socket", broker.display().to_string());
    say!(
        "toolgate {command}: {} cannot be used with {flag}: the broker at {label} decides with its own policy (give these flags to `toolgate serve --listen`)",
        named.join(", "),
    );
    Err(ExitCode::from(2))
}

/// The flag that names a broker of this kind: `--socket` or `--remote`.
#[cfg(unix)]
pub fn broker_flag(broker: &BrokerAt) -> &'static str {
    match broker {
        toolgate::transport::client::Endpoint::Socket(_) => "--socket",
        #[cfg(feature = "fleet")]
        toolgate::transport::client::Endpoint::Remote(_) => "--remote",
    }
}
