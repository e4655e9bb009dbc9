//! `toolgate serve` (and `toolgate` with no subcommand): decide the calls
//! of a client on stdin/stdout, or of many on a Unix socket (`--listen`).

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
    // The web approval page, on a thread of its own, before the broker
    // starts: a page that cannot be served stops the start.
    #[cfg(feature = "fleet")]
    match super::web::prepare(args.page, args.store) {
        Ok(Some((addr, config))) => {
            if let Err(code) = super::web::spawn(addr, config) {
                return code;
            }
        }
        Ok(None) => {}
        Err(code) => return code,
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
