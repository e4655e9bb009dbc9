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
    #[cfg(feature = "fleet")]
    let store = args.store.clone().url();
    #[cfg(feature = "fleet")]
    if store.is_some()
        && (args.keep.state_dir.is_some() || super::broker::state_dir_env().is_some())
    {
        say!("toolgate: --store and --state-dir (or TOOLGATE_STATE_DIR) cannot be used together: with a store, the store keeps the state");
        return ExitCode::from(2);
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
    if let Some(path) = listen {
        let listener = match toolgate::transport::socket::listen(&path) {
            Ok(listener) => listener,
            Err(err) => {
                say!("toolgate: {err}");
                return ExitCode::from(2);
            }
        };
        say!("toolgate: listening on {}", path.display());
        return ended(toolgate::transport::socket::run(
            listener,
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
                    StoreError::BadUrl { .. } => 2,
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
