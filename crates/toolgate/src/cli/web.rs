//! `toolgate web --http HOST:PORT --store URL`: the web approval page
//! alone, for the questions of every broker sharing the store
//! (docs/web.md).
//!
//! Exit codes: 1 the page could not be served (the address is taken, the
//! store's schema is at another version); 2 the command line cannot be
//! used; 3 the store cannot be reached.

use std::process::ExitCode;

use clap::Args;
use toolgate::fleet::{runtime, Store, StoreError};
use toolgate::say;
use toolgate::web::Config;

use super::flags::StoreArgs;

#[derive(Debug, Args)]
pub struct WebArgs {
    /// Serve the page on HOST:PORT (port 0 takes a free port; the address
    /// is said on stderr). Plain HTTP: keep it on loopback, or put it
    /// behind a TLS proxy (see docs/web.md).
    #[arg(long, value_name = "HOST:PORT")]
    pub http: String,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `toolgate web`.
pub fn run(args: WebArgs) -> ExitCode {
    let Some(url) = args.store.url() else {
        say!("toolgate: web needs --store URL (or TOOLGATE_STORE)");
        return ExitCode::from(2);
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
            return ExitCode::from(1);
        }
    };
    if let Err(err) = checked {
        say!("toolgate: {err}");
        return match err {
            StoreError::BadUrl { .. } => ExitCode::from(2),
            err if err.is_unreachable() => ExitCode::from(3),
            _ => ExitCode::from(1),
        };
    }
    let config = Config {
        store: url,
        secure: false,
    };
    let served = toolgate::web::run(&args.http, config, |addr| {
        say!("toolgate: the approval page is at http://{addr}/");
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            say!("toolgate: {err}");
            ExitCode::from(1)
        }
    }
}
