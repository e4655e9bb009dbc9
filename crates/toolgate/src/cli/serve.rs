//! `toolgate serve` (and `toolgate` with no subcommand): decide the calls
//! of a client on stdin/stdout, or of many on a Unix socket (`--listen`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

use toolgate::say;
use toolgate::serve::Control;
use toolgate::setup::{self, Settings};

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
    let Opened {
        broker,
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
        },
        true,
    ) {
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
                            tracing::warn!(target: "toolgate", "{warning}");
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
