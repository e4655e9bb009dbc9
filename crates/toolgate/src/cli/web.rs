//! `toolgate web --http HOST:PORT --store URL [--tls-cert F --tls-key F]`:
//! the web approval page alone, for the questions of every broker sharing
//! the store (docs/web.md); and the same page beside a broker, `serve
//! --http` ([`spawn`]).
//!
//! Exit codes: 1 the page could not be served (the address is taken, the
//! store's schema is at another version, the store refused the login, a
//! certificate that cannot be used); 2 the command line cannot be used; 3
//! the store cannot be reached.

use std::process::ExitCode;

use clap::Args;
use toolgate::fleet::{runtime, Store, StoreError};
use toolgate::say;
use toolgate::web::Config;

use super::flags::{PageArgs, PageCertArgs, StoreArgs};

#[derive(Debug, Args)]
pub struct WebArgs {
    #[command(flatten)]
    pub page: PageArgs,
    #[command(flatten)]
    pub cert: PageCertArgs,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `toolgate web`.
pub fn run(args: WebArgs) -> ExitCode {
    let cert = args.cert.tls_cert.zip(args.cert.tls_key);
    let (addr, config) = match prepare(args.page.http, cert, args.store) {
        Ok(Some(ready)) => ready,
        Ok(None) => {
            say!("toolgate: web needs --http HOST:PORT");
            return ExitCode::from(2);
        }
        Err(code) => return code,
    };
    let scheme = scheme(&config);
    let served = toolgate::web::run(&addr, config, |bound| {
        say!("toolgate: the approval page is at {scheme}://{bound}/");
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            say!("toolgate: {err}");
            ExitCode::from(1)
        }
    }
}

fn scheme(config: &Config) -> &'static str {
    if config.secure() {
        "https"
    } else {
        "http"
    }
}

/// What the page needs from the flags (`--http`, the certificate and key
/// when it is served over HTTPS), the store checked and the TLS
/// configuration built; `None` without `--http`.
pub fn prepare(
    http: Option<String>,
    cert: Option<(std::path::PathBuf, std::path::PathBuf)>,
    store: StoreArgs,
) -> Result<Option<(String, Config)>, ExitCode> {
    let Some(addr) = http.filter(|addr| !addr.is_empty()) else {
        return Ok(None);
    };
    let Some(url) = store.url() else {
        say!("toolgate: --http needs --store URL (or TOOLGATE_STORE): the page shows the store's questions");
        return Err(ExitCode::from(2));
    };
    let tls = match cert {
        Some((cert, key)) => match toolgate::web::tls::server_config(&cert, &key) {
            Ok(config) => Some(config),
            Err(err) => {
                say!("toolgate: {err}");
                return Err(ExitCode::from(1));
            }
        },
        None => None,
    };
    // The store is checked before the page is served: a wrong URL or an
    // old schema is said at once, not on the first login.
    let checked = match runtime() {
        Ok(runtime) => runtime.block_on(async {
            let store = Store::connect(&url).await?;
            store.check_schema().await
        }),
        Err(err) => {
            say!("toolgate: cannot start the runtime: {err}");
            return Err(ExitCode::from(1));
        }
    };
    if let Err(err) = checked {
        say!("toolgate: {err}");
        return Err(match err {
            StoreError::BadUrl { .. } | StoreError::BadTls { .. } => ExitCode::from(2),
            err if err.is_unreachable() => ExitCode::from(3),
            _ => ExitCode::from(1),
        });
    }
    Ok(Some((addr, Config { store: url, tls })))
}

/// Serve the page on a thread of its own (with its own runtime) beside a
/// broker, once it listens; the address is said on stderr. What stops it
/// is the process's end.
pub fn spawn(addr: String, config: Config) -> Result<(), ExitCode> {
    let scheme = scheme(&config);
    let (told, bound) = std::sync::mpsc::channel();
    let failed = told.clone();
    let thread = std::thread::Builder::new()
        .name("web".to_string())
        .spawn(move || {
            let served = toolgate::web::run(&addr, config, move |bound| {
                let _ = told.send(Ok(bound));
            });
            if let Err(err) = served {
                // Before it listened: the broker is told and does not start;
                // after: said here, and the broker goes on without its page.
                say!("toolgate: {err}");
                let _ = failed.send(Err(()));
            }
        });
    if let Err(err) = thread {
        say!("toolgate: cannot start the web page's thread: {err}");
        return Err(ExitCode::from(1));
    }
    match bound.recv() {
        Ok(Ok(bound)) => {
            say!("toolgate: the approval page is at {scheme}://{bound}/");
            Ok(())
        }
        _ => Err(ExitCode::from(1)),
    }
}
