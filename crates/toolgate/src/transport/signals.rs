//! SIGTERM, SIGINT and SIGHUP as events for the owner: a task of the
//! transport's runtime. SIGHUP loads the policy again here, as start-up
//! built it (policy file, `--permission`, `TOOLGATE_PERMISSION`, project
//! root); a policy that does not load, or that would move the project root,
//! is reported on stderr and the one in force stays.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::owner::{Event, Signal};
use crate::setup::{self, Settings};

/// How SIGHUP loads the policy again: the settings start-up read, and the
/// project root the policy in force has (a reload may not move it).
pub struct Reloader {
    /// What start-up read the policy from.
    pub settings: Settings,
    /// The project root of the policy in force.
    pub root: PathBuf,
}

/// Watch the signals on a task of the current runtime, sending each as an
/// event until the owner is gone. A signal that cannot be watched is
/// reported once; the transport then runs without it.
pub fn watch(reloader: Reloader, events: mpsc::Sender<Event>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let kinds = [
            SignalKind::terminate(),
            SignalKind::interrupt(),
            SignalKind::hangup(),
        ];
        let mut streams = Vec::new();
        for kind in kinds {
            match signal(kind) {
                Ok(stream) => streams.push(stream),
                Err(err) => {
                    crate::say!("toolgate: warning: signals will not be handled: {err}");
                    return;
                }
            }
        }
        let [mut term, mut int, mut hup] = match <[_; 3]>::try_from(streams) {
            Ok(streams) => streams,
            Err(_) => return,
        };
        tokio::spawn(async move {
            loop {
                let signal = tokio::select! {
                    Some(()) = term.recv() => Signal::Stop("SIGTERM"),
                    Some(()) = int.recv() => Signal::Stop("SIGINT"),
                    Some(()) = hup.recv() => match reload(&reloader) {
                        Some(signal) => signal,
                        None => continue,
                    },
                    else => return,
                };
                if events.send(Event::Signal(signal)).await.is_err() {
                    return;
                }
            }
        });
    }
    #[cfg(not(unix))]
    {
        let _ = (reloader, events);
    }
}

/// SIGHUP: the policy loaded anew, or `None` (said on stderr) when it does
/// not load or would move the project root.
fn reload(reloader: &Reloader) -> Option<Signal> {
    match setup::load(&reloader.settings) {
        Ok(loaded) if loaded.policy.project_root != reloader.root => {
            crate::say!(
                "toolgate: SIGHUP received: the policy was not reloaded: its project root would change from {} to {}; keeping the policy in force",
                reloader.root.display(),
                loaded.policy.project_root.display()
            );
            None
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
            Some(Signal::Reload {
                ask_timeout_ms: policy.ask_timeout_seconds.saturating_mul(1000),
                policy: Arc::new(policy),
                source: setup::describe_sources(&sources),
            })
        }
        Err(err) => {
            crate::say!(
                "toolgate: SIGHUP received: the policy was not reloaded: {err}; keeping the policy in force"
            );
            None
        }
    }
}
