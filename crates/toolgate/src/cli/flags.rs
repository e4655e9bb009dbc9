//! The flag groups subcommands share. A subcommand takes the groups that
//! mean something to it and no others, so clap itself refuses a flag that
//! does not apply (`toolgate check --listen unix` is an unexpected argument,
//! not a flag silently ignored), and `--help` lists only what applies.
//!
//! | group | flags | taken by |
//! |---|---|---|
//! | [`PolicyArgs`] | `--mode --permission-mode --policy --opencode --agent --permission --managed --project-root --read-only-agents` | serve, hook, mcp, claude-bridge, check, replay, policy validate |
//! | [`AskArgs`] | `--on-ask --ask-timeout` | serve, mcp, claude-bridge |
//! | [`KeepArgs`] | `--state-dir --audit` | serve, hook, mcp, claude-bridge |
//! | [`LineArgs`] | `--max-frame-bytes` | serve, mcp, claude-bridge |
//! | [`ServeArgs`] | the four above, `--approver --listen`, and (feature `fleet`) `TlsArgs`, `StoreArgs` and `PageArgs` | serve |
//! | [`BindArgs`] | `--parent --scope --scope-file` | hook, mcp, claude-bridge |
//! | [`RemoteArgs`] | `--remote --token-file --ca --client-cert --client-key` | hook, mcp, approve, claude-bridge, link-bridge |
//! | `TlsArgs` | `--tls-cert --tls-key --tls-client-ca` | serve (feature `fleet`) |
//! | `StoreArgs` | `--store` | serve, store migrate, tokens, web (feature `fleet`) |
//! | `PageArgs` | `--http` | serve, web (feature `fleet`) |
//! | `PageCertArgs` | `--tls-cert --tls-key` | web (feature `fleet`) |
//!
//! A client of a broker (`hook --socket`, `mcp --socket`, `claude-bridge
//! --socket`) decides nothing
//! itself: every flag of these groups then belongs to the broker and is
//! refused by [`broker_flags`], except those the client passes on.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use toolgate::setup::{parse_mode, ConfigError};
use toolgate_policy::Mode;

/// Where an orchestrator puts the agent it starts (see
/// `toolgate::adapters::bind`). Not a broker flag: a client of a broker
/// passes it on, as a `session_start`.
#[derive(Debug, Clone, Default, Args)]
pub struct BindArgs {
    /// Start the agent's session under this session the first time it is
    /// seen (its calls are then never allowed more than the parent's).
    /// Also TOOLGATE_PARENT.
    #[arg(long, value_name = "ID")]
    pub parent: Option<String>,
    /// The agent's session scope, as session_start's `permissions` JSON,
    /// e.g. '{"allowedTools":["Read","Grep"]}' (added to the parent's, so
    /// never wider). Also TOOLGATE_SCOPE.
    #[arg(long, value_name = "JSON", conflicts_with = "scope_file")]
    pub scope: Option<String>,
    /// The same scope read from a file. Also TOOLGATE_SCOPE_FILE.
    #[arg(long, value_name = "FILE")]
    pub scope_file: Option<PathBuf>,
}

impl BindArgs {
    /// The binding these flags (or the environment) give; `Err` says what
    /// cannot be used.
    pub fn resolve(self) -> Result<toolgate::adapters::bind::Binding, String> {
        toolgate::adapters::bind::Binding::resolve(self.parent, self.scope, self.scope_file)
    }
}

/// How the policy is found and built.
#[derive(Debug, Clone, Default, Args)]
pub struct PolicyArgs {
    /// The mode new sessions start in: auto, auto_edit, ask, plan or readonly
    /// (aliases: default, manual, yolo, bypassPermissions, acceptEdits,
    /// accept_edits, auto-edit, read-only, read_only). Beats TOOLGATE_MODE,
    /// which beats the policy file's `mode`; the default is ask. auto allows
    /// what the mode and the built-in defaults would ask about; an ask rule of
    /// the policy file or an override, and the doom-loop guard, still ask.
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    pub mode: Option<Mode>,

    /// The same as --mode, spelled as link-assistant/agent and Claude Code
    /// spell it (default, acceptEdits, plan, bypassPermissions, ...). Given
    /// with --mode, both must name the same mode.
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    pub permission_mode: Option<Mode>,

    /// The policy file (JSON; see docs/modes-and-policy.md): a toolgate policy, or OpenCode's
    /// config (opencode.json, opencode.jsonc, or a file whose $schema is on
    /// opencode.ai), of which only the permissions are used. Without it:
    /// toolgate.json in --project-root when that is given, else the
    /// toolgate.json nearest the working directory, looking upward no higher
    /// than the repository root (the first directory holding .git). An
    /// invalid policy stops toolgate with exit code 2.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,

    /// Read OpenCode's own configuration as the policy: found and merged as
    /// OpenCode does (the global config, OPENCODE_CONFIG, opencode.json[c]
    /// from the worktree root down to the project, .opencode/ directories,
    /// OPENCODE_CONFIG_DIR, OPENCODE_CONFIG_CONTENT), with
    /// OPENCODE_PERMISSION applied as OpenCode applies it; only the
    /// permissions are used. Each file is named as the origin of its rules.
    /// A config that cannot be read or parsed stops toolgate with exit
    /// code 2.
    #[arg(long, conflicts_with = "policy")]
    pub opencode: bool,

    /// With an OpenCode config as the policy file, or --opencode: also apply
    /// agent.NAME.permission (and the agent's legacy tools), after the
    /// config's top-level permission, as OpenCode does for that agent. An
    /// agent the file does not define stops toolgate with exit code 2.
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,

    /// OpenCode `permission` config as JSON, e.g. '{"bash":{"git push *":"deny"}}'.
    /// The last layer of rules, after the built-in defaults, the policy file
    /// and TOOLGATE_PERMISSION: the last matching rule decides, so it can
    /// loosen them as well as tighten them. A deny that decides is final.
    #[arg(long, value_name = "JSON")]
    pub permission: Option<String>,

    /// A managed policy (the policy file's syntax; only `mode` and
    /// `permission`): applied after every other layer, its deny and ask
    /// rules are final (no rule, override, grant or answer loosens them)
    /// and its `mode` is a floor for every session. Added to
    /// /etc/toolgate/managed.json (applied whenever it exists) and
    /// TOOLGATE_MANAGED, never instead of them. One that cannot be read or
    /// parsed stops toolgate with exit code 2.
    #[arg(long, value_name = "FILE")]
    pub managed: Option<PathBuf>,

    /// The project root: paths are matched relative to it, and paths outside it
    /// ask as `external_directory`. Default: the policy file's projectRoot,
    /// else the directory of a toolgate.json found by searching upward, else
    /// the working directory.
    #[arg(long, value_name = "DIR")]
    pub project_root: Option<PathBuf>,

    /// The sub-agent types that only read, comma-separated: plan mode lets
    /// the model launch them (Claude Code's Agent/Task `subagent_type`,
    /// OpenCode's task, Gemini CLI's invoke_agent `agent_name`; TOOL:TYPE
    /// for one tool only), and every call they make stays bound by plan
    /// mode. An empty value admits none. Default: the policy file's
    /// readOnlyAgents, else Explore,Plan,task:explore,
    /// invoke_agent:codebase_investigator,invoke_agent:cli_help.
    #[arg(long, value_name = "A,B", value_parser = parse_read_only_agents)]
    pub read_only_agents: Option<ReadOnlyAgents>,
}

/// What happens to a call whose answer is "ask".
#[derive(Debug, Clone, Default, Args)]
pub struct AskArgs {
    /// What to do when the answer is "ask": `wait` emits a permission_request
    /// and waits; `deny` denies at once without asking (non-interactive runs).
    /// [default: wait]
    #[arg(long, value_name = "POLICY")]
    pub on_ask: Option<OnAskArg>,

    /// Seconds a question waits for its answer before the call is denied
    /// (source `timeout`); 0 waits forever. Default: the policy file's
    /// askTimeoutSeconds, else 300.
    #[arg(long, value_name = "SECS")]
    pub ask_timeout: Option<u64>,
}

/// What a broker keeps beyond its own run.
#[derive(Debug, Clone, Default, Args)]
pub struct KeepArgs {
    /// Keep grants and sessions in DIR so that they survive a restart: one
    /// file per project root, saved atomically; a corrupt file is moved aside
    /// with a warning, but a journal with a bad line before its last stops
    /// the start (exit code 2) until `toolgate state repair`. A running
    /// broker locks its file: a second broker for
    /// the same project and directory keeps its changes in memory only. Also
    /// TOOLGATE_STATE_DIR. [default: no state is kept]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Append a JSON line to FILE for every decision and every answer to a
    /// question (created 0600; never rewritten): time, session and parent,
    /// client, tool, input and subject, mode, decision, source, reason, the
    /// rule with its origin or the grant used, who answered and how long the
    /// question waited. Written and flushed before the decision is sent; a
    /// decision that cannot be recorded is a denial. `toolgate replay
    /// --from audit FILE` reads it back. See docs/audit.md.
    #[arg(long, value_name = "FILE")]
    pub audit: Option<PathBuf>,
}

/// How long a line may be.
#[derive(Debug, Clone, Default, Args)]
pub struct LineArgs {
    /// The longest input line accepted, in bytes; longer lines are skipped
    /// without being buffered and answered with an error frame. [default: 1048576]
    #[arg(long, value_name = "BYTES")]
    pub max_frame_bytes: Option<usize>,
}

/// The flags of `toolgate serve` (and of `toolgate` with no subcommand).
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub ask: AskArgs,
    #[command(flatten)]
    pub keep: KeepArgs,
    #[command(flatten)]
    pub line: LineArgs,

    /// Who answers the questions instead of the client on stdin/stdout:
    /// `tty` asks on the controlling terminal (/dev/tty), line by line;
    /// `command:PROG` runs `sh -c PROG` per question, the request as one
    /// JSON line on its stdin, its first stdout line the answer (once,
    /// always, reject, or {"response":…,"message":…,"patterns":[…]});
    /// anything else is a reject saying why. See docs/approvers.md.
    #[arg(long, value_name = "tty|command:PROG", value_parser = toolgate::approver::parse_spec)]
    pub approver: Option<toolgate::approver::Spec>,

    /// Serve many connections instead of stdin/stdout, on a Unix socket:
    /// `unix:PATH`, or `unix` for the default path ($XDG_RUNTIME_DIR/toolgate/
    /// broker.sock, else /tmp/toolgate-UID/broker.sock); the socket is made
    /// 0600 in a directory only you can enter, other users are refused. Or
    /// (feature `fleet`) remote connections over TLS 1.3 with bearer tokens
    /// on `tls:HOST:PORT` (port 0: one the system chooses, said on stderr),
    /// with --tls-cert, --tls-key and --store (see docs/fleet.md, "Remote
    /// connections"). May be given several times: one socket and any
    /// number of TLS addresses, all serving one broker.
    #[arg(long, value_name = "unix:PATH|tls:HOST:PORT")]
    pub listen: Vec<String>,

    #[cfg(feature = "fleet")]
    #[command(flatten)]
    pub tls: TlsArgs,

    /// Share sessions, grants and questions with every broker on this
    /// store (docs/fleet.md); also where TLS connections' tokens are
    /// checked and what the page (`--http`) shows.
    #[cfg(feature = "fleet")]
    #[command(flatten)]
    pub store: StoreArgs,

    /// The web approval page beside the broker (`--http`; HTTPS with
    /// --tls-cert and --tls-key).
    #[cfg(feature = "fleet")]
    #[command(flatten)]
    pub page: PageArgs,
}

/// How a client reaches a remote broker (`serve --listen tls:HOST:PORT`).
/// Each flag falls back to its environment variable.
#[derive(Debug, Clone, Default, Args)]
pub struct RemoteArgs {
    /// Ask the remote broker at tls://HOST:PORT (`toolgate serve --listen
    /// tls:HOST:PORT`) instead of a local one, over TLS 1.3 with the token
    /// in --token-file; HOST must be a name (or address) its certificate
    /// is for. Also TOOLGATE_REMOTE. With no broker there, every call is
    /// denied.
    #[arg(long, value_name = "tls://HOST:PORT", conflicts_with = "socket")]
    pub remote: Option<String>,
    /// With --remote: the file holding the token (its first line; `toolgate
    /// tokens create` prints it). It must be yours and closed to group and
    /// others (chmod 600), or it is refused. Also TOOLGATE_TOKEN_FILE.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// With --remote: the CA certificates (PEM) the broker's certificate
    /// must chain to. Also TOOLGATE_CA. [default: the system's trust store]
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// With --remote: a client certificate (PEM) to present to a broker
    /// that requires one (its --tls-client-ca), with --client-key. Also
    /// TOOLGATE_CLIENT_CERT.
    #[arg(long, value_name = "FILE")]
    pub client_cert: Option<PathBuf>,
    /// With --client-cert: its private key (PEM). Also TOOLGATE_CLIENT_KEY.
    #[arg(long, value_name = "FILE")]
    pub client_key: Option<PathBuf>,
}

impl RemoteArgs {
    /// What the client library reads (see
    /// `toolgate::transport::client::chosen`).
    pub fn spec(self) -> toolgate::transport::client::RemoteSpec {
        toolgate::transport::client::RemoteSpec {
            remote: self.remote,
            token_file: self.token_file,
            ca: self.ca,
            client_cert: self.client_cert,
            client_key: self.client_key,
        }
    }
}

/// The TLS of `serve --listen tls:HOST:PORT` and of its page (`--http`;
/// feature `fleet`).
#[cfg(feature = "fleet")]
#[derive(Debug, Clone, Default, Args)]
pub struct TlsArgs {
    /// With --listen tls:… (and --http: the page over HTTPS): the broker's
    /// certificate chain (PEM, its own certificate first), for the names
    /// clients use to reach it.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// With --tls-cert: the certificate's private key (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// With --listen tls:…: require of every remote client a certificate
    /// this CA (PEM) issued (mutual TLS), besides its token.
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
}

#[cfg(feature = "fleet")]
impl TlsArgs {
    /// See [`PolicyArgs::or`].
    pub fn or(self, outer: TlsArgs) -> TlsArgs {
        TlsArgs {
            tls_cert: self.tls_cert.or(outer.tls_cert),
            tls_key: self.tls_key.or(outer.tls_key),
            tls_client_ca: self.tls_client_ca.or(outer.tls_client_ca),
        }
    }

    /// Whether any of these flags was given.
    pub fn any(&self) -> bool {
        self.tls_cert.is_some() || self.tls_key.is_some() || self.tls_client_ca.is_some()
    }
}

/// `--on-ask`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OnAskArg {
    /// Ask and wait for the answer.
    Wait,
    /// Deny without asking.
    Deny,
}

/// `--read-only-agents`: sub-agent type names.
#[derive(Debug, Clone)]
pub struct ReadOnlyAgents(pub Vec<String>);

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

impl PolicyArgs {
    /// The mode from the flags and `TOOLGATE_MODE`: the flag beats the
    /// environment; `--mode` and `--permission-mode` must agree.
    pub fn chosen_mode(&self) -> Result<Option<Mode>, ConfigError> {
        let env = std::env::var("TOOLGATE_MODE").ok();
        choose_mode(self.mode, self.permission_mode, env.as_deref())
    }
}

/// The mode from the flags and `TOOLGATE_MODE` (`env`).
fn choose_mode(
    mode: Option<Mode>,
    permission_mode: Option<Mode>,
    env: Option<&str>,
) -> Result<Option<Mode>, ConfigError> {
    let flag = match (mode, permission_mode) {
        (Some(mode), Some(other)) if mode != other => {
            return Err(ConfigError::ModesDiffer { mode, other })
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
            .map_err(|source| ConfigError::Environment {
                variable: "TOOLGATE_MODE",
                source,
            }),
    }
}

/// Of the flags `given` (clap ids, see [`super::parse`]), those a client of
/// a broker cannot use: every flag of the broker's groups ([`PolicyArgs`],
/// [`AskArgs`], [`KeepArgs`], [`LineArgs`]) except the ones in `passed_on`,
/// as `--long-name`, in the order the groups declare them.
pub fn broker_flags(given: &[String], passed_on: &[&str]) -> Vec<String> {
    let group = clap::Command::new("broker");
    let group = PolicyArgs::augment_args(group);
    let group = AskArgs::augment_args(group);
    let group = KeepArgs::augment_args(group);
    let group = LineArgs::augment_args(group);
    group
        .get_arguments()
        .map(|arg| arg.get_id().as_str())
        .filter(|id| !passed_on.contains(id) && given.iter().any(|given| given == id))
        .map(|id| format!("--{}", id.replace('_', "-")))
        .collect()
}

impl PolicyArgs {
    /// These flags, with `outer`'s (given before the subcommand) where
    /// these are unset.
    pub fn or(self, outer: PolicyArgs) -> PolicyArgs {
        PolicyArgs {
            mode: self.mode.or(outer.mode),
            permission_mode: self.permission_mode.or(outer.permission_mode),
            policy: self.policy.or(outer.policy),
            opencode: self.opencode || outer.opencode,
            agent: self.agent.or(outer.agent),
            permission: self.permission.or(outer.permission),
            managed: self.managed.or(outer.managed),
            project_root: self.project_root.or(outer.project_root),
            read_only_agents: self.read_only_agents.or(outer.read_only_agents),
        }
    }
}

impl AskArgs {
    /// See [`PolicyArgs::or`].
    pub fn or(self, outer: AskArgs) -> AskArgs {
        AskArgs {
            on_ask: self.on_ask.or(outer.on_ask),
            ask_timeout: self.ask_timeout.or(outer.ask_timeout),
        }
    }
}

impl KeepArgs {
    /// See [`PolicyArgs::or`].
    pub fn or(self, outer: KeepArgs) -> KeepArgs {
        KeepArgs {
            state_dir: self.state_dir.or(outer.state_dir),
            audit: self.audit.or(outer.audit),
        }
    }
}

impl LineArgs {
    /// See [`PolicyArgs::or`].
    pub fn or(self, outer: LineArgs) -> LineArgs {
        LineArgs {
            max_frame_bytes: self.max_frame_bytes.or(outer.max_frame_bytes),
        }
    }
}

impl ServeArgs {
    /// See [`PolicyArgs::or`].
    pub fn or(self, outer: ServeArgs) -> ServeArgs {
        ServeArgs {
            policy: self.policy.or(outer.policy),
            ask: self.ask.or(outer.ask),
            keep: self.keep.or(outer.keep),
            line: self.line.or(outer.line),
            approver: self.approver.or(outer.approver),
            listen: if self.listen.is_empty() {
                outer.listen
            } else {
                self.listen
            },
            #[cfg(feature = "fleet")]
            tls: self.tls.or(outer.tls),
            #[cfg(feature = "fleet")]
            store: StoreArgs {
                store: self.store.store.or(outer.store.store),
            },
            #[cfg(feature = "fleet")]
            page: PageArgs {
                http: self.page.http.or(outer.page.http),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate::setup::ModeNameError;
    use toolgate_policy::UnknownMode;

    #[test]
    fn the_flag_beats_the_environment_and_both_flags_must_agree() {
        let chosen = |mode, permission_mode, env| choose_mode(mode, permission_mode, env).ok();
        assert_eq!(
            chosen(Some(Mode::Plan), None, Some("auto")),
            Some(Some(Mode::Plan))
        );
        assert_eq!(
            chosen(None, Some(Mode::Plan), Some("auto")),
            Some(Some(Mode::Plan))
        );
        assert_eq!(chosen(None, None, Some("auto")), Some(Some(Mode::Auto)));
        assert_eq!(chosen(None, None, Some("  ")), Some(None));
        let differ = choose_mode(Some(Mode::Plan), Some(Mode::Auto), None);
        assert!(matches!(
            differ,
            Err(ConfigError::ModesDiffer {
                mode: Mode::Plan,
                other: Mode::Auto
            })
        ));
        let env = choose_mode(None, None, Some("dontAsk"));
        assert!(matches!(
            &env,
            Err(ConfigError::Environment {
                variable: "TOOLGATE_MODE",
                source: ModeNameError(UnknownMode(name)),
            }) if name == "dontAsk"
        ));
        let text = env.err().map(|err| err.to_string()).unwrap_or_default();
        assert!(text.starts_with("invalid TOOLGATE_MODE: "), "{text}");
        assert!(text.ends_with("use --on-ask deny"), "{text}");
    }
}

/// Where the shared store is (`toolgate store`, `toolgate tokens`).
#[cfg(feature = "fleet")]
#[derive(Debug, Clone, Default, Args)]
pub struct StoreArgs {
    /// The shared store: a PostgreSQL URL, postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE
    /// (or the key=value form). Also TOOLGATE_STORE, the better place for a
    /// URL that holds a password (the command line is visible to others).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
}

/// A broker to manage tokens through instead of the store (`tokens create
/// | list | revoke --remote`): an admin token's connection.
#[cfg(feature = "fleet")]
#[derive(Debug, Clone, Default, Args)]
pub struct AdminArgs {
    /// Manage the tokens through the broker at tls://HOST:PORT (`serve
    /// --listen tls:…`) with the admin token in --token-file, instead of
    /// with the store's credentials (--store). The admin's own project and
    /// expiry bound what it may make. See docs/fleet.md.
    #[arg(long, value_name = "tls://HOST:PORT", conflicts_with = "store")]
    pub remote: Option<String>,
    /// With --remote: the file holding the admin token (its first line;
    /// chmod 600). Also TOOLGATE_TOKEN_FILE.
    #[arg(long, value_name = "FILE", requires = "remote")]
    pub token_file: Option<PathBuf>,
    /// With --remote: the CA certificates (PEM) the broker's certificate
    /// must chain to. Also TOOLGATE_CA. [default: the system's trust store]
    #[arg(long, value_name = "FILE", requires = "remote")]
    pub ca: Option<PathBuf>,
    /// With --remote: a client certificate (PEM) for a broker that
    /// requires one, with --client-key. Also TOOLGATE_CLIENT_CERT.
    #[arg(long, value_name = "FILE", requires = "remote")]
    pub client_cert: Option<PathBuf>,
    /// With --client-cert: its private key (PEM). Also TOOLGATE_CLIENT_KEY.
    #[arg(long, value_name = "FILE", requires = "remote")]
    pub client_key: Option<PathBuf>,
}

#[cfg(feature = "fleet")]
impl AdminArgs {
    /// What the client library reads, when --remote is given.
    pub fn spec(&self) -> Option<toolgate::transport::client::RemoteSpec> {
        self.remote
            .as_ref()
            .map(|remote| toolgate::transport::client::RemoteSpec {
                remote: Some(remote.clone()),
                token_file: self.token_file.clone(),
                ca: self.ca.clone(),
                client_cert: self.client_cert.clone(),
                client_key: self.client_key.clone(),
            })
    }
}

/// Where the web approval page is served (`serve --http`, `web`).
#[cfg(feature = "fleet")]
#[derive(Debug, Clone, Default, Args)]
pub struct PageArgs {
    /// Serve the web approval page (the store's open questions, answered
    /// from a browser with an approver token) on HOST:PORT; port 0 takes a
    /// free port, said on stderr. Needs --store. See docs/web.md.
    #[arg(long, value_name = "HOST:PORT")]
    pub http: Option<String>,
}

/// The certificate of `toolgate web`'s page (`serve` has [`TlsArgs`], the
/// same two flags for its TLS listeners and its page).
#[cfg(feature = "fleet")]
#[derive(Debug, Clone, Default, Args)]
pub struct PageCertArgs {
    /// The page's certificate chain (PEM): serve it over HTTPS (TLS 1.3)
    /// instead of HTTP. Needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

#[cfg(feature = "fleet")]
impl StoreArgs {
    /// The URL from --store, else TOOLGATE_STORE (empty is unset).
    pub fn url(self) -> Option<String> {
        self.store.filter(|url| !url.is_empty()).or_else(|| {
            std::env::var(toolgate::fleet::STORE_ENV)
                .ok()
                .filter(|url| !url.is_empty())
        })
    }
}
