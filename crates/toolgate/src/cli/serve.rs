//! `toolgate serve` (and `toolgate` with no subcommand): decide the calls
//! of a client on stdin/stdout, or of many on a Unix socket (`--listen`),
//! alone or sharing a store with other brokers (`--store`, docs/fleet.md).

use std::path::PathBuf;
use std::process::ExitCode;

use toolgate::say;
use toolgate::transport::signals::Reloader;

use super::broker::{open, BrokerFlags, Opened};
use super::flags::ServeArgs;

/// `toolgate serve`.
pub fn run(args: ServeArgs) -> ExitCode {
    let spec = args.approver.clone();
    let listens = match Listens::parse(&args.listen) {
        Ok(listens) => listens,
        Err(err) => {
            say!("toolgate: {err}");
            return ExitCode::from(2);
        }
    };
    if spec.is_some() && !listens.is_empty() {
        say!("toolgate: --approver works with stdin/stdout only; with --listen, run `toolgate approve` beside the broker");
        return ExitCode::from(2);
    }
    #[cfg(feature = "fleet")]
    let store = args.store.clone().url();
    #[cfg(feature = "fleet")]
    if store.is_some()
        && (args.keep.state_dir.is_some() || super::broker::state_dir_env().is_some())
    {
        say!("toolgate: --store and --state-dir (or TOOLGATE_STATE_DIR) cannot be used together: with a store, the store keeps the state");
        return ExitCode::from(2);
    }
    #[cfg(feature = "fleet")]
    let page = args.page.http.clone().filter(|addr| !addr.is_empty());
    #[cfg(feature = "fleet")]
    let remote = match remote::prepare(
        &listens,
        args.tls.clone(),
        args.store.clone(),
        page.is_some(),
    ) {
        Ok(remote) => remote,
        Err(err) => {
            say!("toolgate: {err}");
            return ExitCode::from(2);
        }
    };
    // The web approval page, on a thread of its own, before the broker
    // starts: a page that cannot be served stops the start. Over HTTPS
    // with the broker's certificate (--tls-cert, --tls-key).
    #[cfg(feature = "fleet")]
    match super::web::prepare(page, args.tls.tls_cert.zip(args.tls.tls_key), args.store) {
        Ok(Some((addr, config))) => {
            if let Err(code) = super::web::spawn(addr, config) {
                return code;
            }
        }
        Ok(None) => {}
        Err(code) => return code,
    }
    #[cfg_attr(not(feature = "fleet"), allow(unused_mut))] // joins a fleet
    let Opened {
        mut broker,
        settings,
        policy,
        max_frame_bytes,
        ..
    } = match open(
        BrokerFlags {
            policy: args.policy,
            ask: args.ask,
            keep: args.keep,
            line: args.line,
            agent: Default::default(),
        },
        true,
    ) {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let approver = match spec {
        None => None,
        Some(spec) => {
            let root = Some(policy.project_root.clone());
            match toolgate::approver::InProcess::open(&spec, root) {
                Ok(approver) => Some(Box::new(approver) as Box<dyn toolgate::owner::Approver>),
                Err(err) => {
                    say!("toolgate: --approver tty: cannot open /dev/tty: {err}");
                    return ExitCode::from(2);
                }
            }
        }
    };
    #[cfg(feature = "fleet")]
    if let Some(url) = store {
        if let Err(code) = fleet::join(&mut broker, url, &policy.project_root) {
            return code;
        }
    }
    let reloader = Some(Reloader {
        settings,
        root: policy.project_root.clone(),
    });
    #[cfg(unix)]
    if !listens.is_empty() {
        let listener = match &listens.unix {
            None => None,
            Some(path) => match toolgate::transport::socket::listen(path) {
                Ok(listener) => Some(listener),
                Err(err) => {
                    say!("toolgate: {err}");
                    return ExitCode::from(2);
                }
            },
        };
        #[allow(unused_mut)] // remote listeners only with the feature `fleet`
        let mut more: Vec<Box<dyn toolgate::transport::socket::Accept>> = Vec::new();
        #[cfg(feature = "fleet")]
        if let Some(remote) = remote {
            match remote.bind(policy.project_root.clone()) {
                Ok(remote) => more.push(Box::new(remote)),
                Err(err) => {
                    say!("toolgate: {err}");
                    return ExitCode::from(2);
                }
            }
        }
        if let Some(path) = &listens.unix {
            say!("toolgate: listening on {}", path.display());
        }
        return ended(toolgate::transport::socket::run(
            listener,
            more,
            broker,
            max_frame_bytes,
            reloader,
        ));
    }
    ended(toolgate::transport::stdio::serve(
        toolgate::transport::stdio::Source::stdin(),
        std::io::stdout(),
        toolgate::transport::stdio::Room::of_stdout(),
        broker,
        max_frame_bytes,
        reloader,
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
    let inner = err.get_ref();
    if inner.is_some_and(|inner| inner.is::<toolgate::transport::stdio::Abandoned>()) {
        // Said on stderr already.
        return ExitCode::from(1);
    }
    let lost = inner.and_then(|inner| inner.downcast_ref::<toolgate::broker::Lost>());
    match lost {
        Some(lost) => say!("toolgate: error: {lost}"),
        None if err.kind() == std::io::ErrorKind::BrokenPipe => return ExitCode::SUCCESS,
        None => say!("toolgate: i/o error: {err}"),
    }
    ExitCode::from(1)
}

/// What the `--listen` flags name: at most one socket, any number of TLS
/// addresses (`HOST:PORT`).
#[derive(Debug, Default)]
struct Listens {
    unix: Option<PathBuf>,
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))] // read with `fleet`
    tls: Vec<String>,
}

impl Listens {
    fn parse(values: &[String]) -> Result<Listens, String> {
        let mut listens = Listens::default();
        for value in values {
            if let Some(address) = value.strip_prefix("tls:") {
                if !cfg!(feature = "fleet") {
                    return Err(format!(
                        "--listen {value:?}: this toolgate was built without the `fleet` feature, which remote connections need"
                    ));
                }
                listens.tls.push(address.to_string());
                continue;
            }
            let path = listen_path(value)?;
            if listens.unix.is_some() {
                return Err(format!(
                    "--listen {value:?}: one Unix socket per broker (--listen unix: was given twice)"
                ));
            }
            listens.unix = Some(path);
        }
        Ok(listens)
    }

    fn is_empty(&self) -> bool {
        self.unix.is_none() && self.tls.is_empty()
    }
}

/// Joining a fleet: the store named by `--store` or `TOOLGATE_STORE`.
#[cfg(feature = "fleet")]
mod fleet {
    use std::path::Path;
    use std::process::ExitCode;
    use std::time::Duration;

    use toolgate::broker::{Broker, Setup};
    use toolgate::fleet::link::{self, Config};
    use toolgate::fleet::questions::BrokerId;
    use toolgate::fleet::{runtime, StoreError};
    use toolgate::say;

    /// Migrate the store, register this broker with its lease and read the
    /// project's state into `broker`; the link starts with the transport.
    /// Exit code 3 when the store cannot be reached, 1 when it refuses
    /// (a schema newer than this toolgate, a login refused), 2 for a URL
    /// that cannot be used.
    pub fn join(broker: &mut Broker, url: String, root: &Path) -> Result<(), ExitCode> {
        let lease = lease();
        let config = Config {
            url,
            project: root.to_string_lossy().into_owned(),
            broker: BrokerId::random(),
            host: host(),
            pid: std::process::id(),
            lease,
        };
        let whoami = format!("{} (pid {})", config.host, config.pid);
        let id = config.broker;
        let joined = match runtime() {
            Ok(runtime) => runtime.block_on(link::join(config)),
            Err(err) => {
                say!("toolgate: cannot start the runtime: {err}");
                return Err(ExitCode::from(1));
            }
        };
        let (changes, starter) = match joined {
            Ok(joined) => joined,
            Err(err) => {
                say!("toolgate: {err}");
                return Err(ExitCode::from(match err {
                    StoreError::BadUrl { .. } | StoreError::BadTls { .. } => 2,
                    err if err.is_unreachable() => 3,
                    _ => 1,
                }));
            }
        };
        let setup = Setup {
            link: Box::new(starter),
            whoami,
            stale: lease * 2,
        };
        for warning in broker.share(setup, changes) {
            say!("toolgate: warning: {warning}");
        }
        tracing::info!(target: "toolgate", broker = %id, lease_ms = lease.as_millis() as u64, "sharing the store");
        Ok(())
    }

    /// The lease: [`link::LEASE`], or `TOOLGATE_LEASE_MS` (for tests).
    fn lease() -> Duration {
        std::env::var(link::LEASE_ENV)
            .ok()
            .and_then(|ms| ms.trim().parse::<u64>().ok())
            .filter(|ms| *ms >= 300)
            .map(Duration::from_millis)
            .unwrap_or(link::LEASE)
    }

    /// This host's name.
    fn host() -> String {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|name| name.trim().to_string())
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "localhost".to_string())
    }
}

/// The socket path `--listen` names: `unix:PATH`, or `unix` for the default.
fn listen_path(value: &str) -> Result<PathBuf, String> {
    #[cfg(unix)]
    {
        match value {
            "unix" | "unix:" => Ok(toolgate::transport::socket::default_path()),
            _ => match value.strip_prefix("unix:") {
                Some(path) => Ok(PathBuf::from(path)),
                None => Err(format!(
                    "--listen {value:?}: expected unix:PATH (or unix for the default path), or tls:HOST:PORT"
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

/// The remote listeners of `--listen tls:HOST:PORT` (feature `fleet`).
#[cfg(feature = "fleet")]
mod remote {
    use std::path::PathBuf;
    use std::sync::Arc;

    use super::Listens;
    use crate::cli::flags::{StoreArgs, TlsArgs};

    /// The TLS listeners to open, checked before the broker starts.
    pub struct Prepared {
        addresses: Vec<String>,
        tls: Arc<rustls::ServerConfig>,
        store: String,
    }

    /// What `--listen tls:…` needs, checked: the certificate and key
    /// (loaded), and the store's URL. `None` without a TLS address (and then
    /// no TLS flag may be given, but for the certificate and key of the
    /// web page, `page`).
    pub fn prepare(
        listens: &Listens,
        tls: TlsArgs,
        store: StoreArgs,
        page: bool,
    ) -> Result<Option<Prepared>, String> {
        if listens.tls.is_empty() {
            if page && tls.tls_client_ca.is_none() {
                if tls.tls_cert.is_some() != tls.tls_key.is_some() {
                    return Err("--tls-cert and --tls-key go together".to_string());
                }
                return Ok(None);
            }
            if tls.any() {
                return Err(
                    "--tls-cert, --tls-key and --tls-client-ca are for --listen tls:HOST:PORT (the certificate and key also for --http), which was not given"
                        .to_string(),
                );
            }
            return Ok(None);
        }
        let (Some(cert), Some(key)) = (&tls.tls_cert, &tls.tls_key) else {
            return Err(
                "--listen tls:… needs --tls-cert FILE and --tls-key FILE (the broker's certificate and key, PEM)"
                    .to_string(),
            );
        };
        let Some(store) = store.url() else {
            return Err(format!(
                "--listen tls:… needs the store that holds the tokens: --store URL (or {})",
                toolgate::fleet::STORE_ENV
            ));
        };
        if let Err(err) = store.parse::<tokio_postgres::Config>() {
            return Err(format!(
                "the store URL cannot be used ({err}); expected postgres://USER@HOST:PORT/DATABASE"
            ));
        }
        let config =
            toolgate::transport::tls::server_config(cert, key, tls.tls_client_ca.as_deref())
                .map_err(|err| err.to_string())?;
        Ok(Some(Prepared {
            addresses: listens.tls.clone(),
            tls: config,
            store,
        }))
    }

    impl Prepared {
        /// Bind every address, each said on stderr with the port it got:
        /// `toolgate: listening on tls:127.0.0.1:40123`.
        pub fn bind(self, root: PathBuf) -> Result<toolgate::transport::remote::Remote, String> {
            let mut listeners = Vec::new();
            for address in &self.addresses {
                let bound = toolgate::transport::remote::Bound::bind(address)
                    .map_err(|err| err.to_string())?;
                listeners.push(bound);
            }
            for bound in &listeners {
                toolgate::say!("toolgate: listening on tls:{}", bound.address());
            }
            Ok(toolgate::transport::remote::Remote {
                listeners,
                tls: self.tls,
                store: self.store,
                root,
            })
        }
    }
}
