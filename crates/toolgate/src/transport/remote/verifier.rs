//! The tokens of remote connections, checked against the store: one task
//! that owns a connection to the store, admits each new connection's token
//! ([`Verifier::admit`]) and keeps checking the tokens of the connections
//! it admitted, so that one revoked (or expired) mid-connection ends that
//! connection within [`REVERIFY`].
//!
//! - A token is checked again on every notification of the store's
//!   `toolgate_tokens` channel (a token made or revoked: a revocation
//!   usually ends its connections within milliseconds), and every
//!   [`REVERIFY`] whatever happens (a notification can be missed).
//! - A store that cannot be reached refuses new connections (the token
//!   cannot be checked) and is tried again at most once per
//!   [`RETRY`]. A connection whose token has not been confirmed for
//!   [`STALE`] is ended: nobody could have told it of a revocation.
//! - Each check waits at most [`QUERY_WAIT`] for the store.
//!
//! The task keeps the text of the tokens it watches (to check them again),
//! in this process's memory only; the store has only their SHA-256.

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::fleet::tokens::{Identity, TokenRefused};
use crate::fleet::{Channel, Store, Wake, Wakeups};

/// How often the tokens of open connections are checked again, whatever
/// the store's notifications say: the longest a revocation takes to end a
/// connection while the store is reachable.
pub const REVERIFY: Duration = Duration::from_secs(5);

/// How long a connection may go without its token confirmed (the store
/// unreachable) before it is ended.
pub const STALE: Duration = Duration::from_secs(15);

/// The longest a check waits for the store.
pub const QUERY_WAIT: Duration = Duration::from_secs(3);

/// The shortest pause between two attempts to connect to the store.
pub const RETRY: Duration = Duration::from_secs(1);

/// A token's text, kept to check it again; its `Debug` does not show it.
#[derive(Clone)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

impl Token {
    /// The token `text`.
    pub fn new(text: String) -> Token {
        Token(text)
    }

    /// The token's text, to check it again.
    pub fn text(&self) -> &str {
        &self.0
    }
}

/// Why a token was not admitted.
#[derive(Debug)]
pub enum Refused {
    /// The store says no: malformed, unknown, expired, revoked.
    Token(TokenRefused),
    /// The store could not say (unreachable, slow, failing): what went
    /// wrong, for the broker's stderr, not for the client.
    Unchecked(String),
}

/// A connection admitted: who its token is, and what is set to its last
/// line (an `error` frame) when it must end.
pub struct Admitted {
    /// Who the token is.
    pub identity: Identity,
    /// Set when the token is refused later (revoked, expired, or not
    /// confirmed for [`STALE`]).
    pub ended: watch::Receiver<Option<Bytes>>,
}

struct Admit {
    token: Token,
    reply: oneshot::Sender<Result<Admitted, Refused>>,
}

/// The handle on the task that checks tokens.
#[derive(Clone)]
pub struct Verifier {
    requests: mpsc::Sender<Admit>,
}

impl Verifier {
    /// Start the task for the store `url` on the current runtime; it ends
    /// when `stopped` is cancelled or every handle is gone.
    pub fn start(url: String, stopped: CancellationToken) -> Verifier {
        let (requests, received) = mpsc::channel(64);
        tokio::spawn(run(url, received, stopped));
        Verifier { requests }
    }

    /// Check `token`; if it is valid, watch it from now on.
    pub async fn admit(&self, token: Token) -> Result<Admitted, Refused> {
        let (reply, answer) = oneshot::channel();
        if self.requests.send(Admit { token, reply }).await.is_err() {
            return Err(Refused::Unchecked("the broker is stopping".into()));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(Refused::Unchecked("the broker is stopping".into())))
    }
}

/// A connection whose token is watched.
struct Watched {
    token: Token,
    name: String,
    confirmed: Instant,
    end: watch::Sender<Option<Bytes>>,
}

/// The store's connection, made again when it is lost.
struct Link {
    url: String,
    store: Option<Store>,
    wakeups: Option<Wakeups>,
    tried: Option<Instant>,
    why: String,
}

impl Link {
    /// A live connection, made if there is none (at most once per
    /// [`RETRY`]); `Err` says why there is none.
    async fn store(&mut self) -> Result<&mut Store, String> {
        if self.store.as_ref().is_some_and(Store::is_closed) {
            self.lost("the connection to the store was lost".into());
        }
        if self.store.is_none() {
            if self.tried.is_some_and(|at| at.elapsed() < RETRY) {
                return Err(self.why.clone());
            }
            self.tried = Some(Instant::now());
            let connected = tokio::time::timeout(QUERY_WAIT, async {
                let store = Store::connect(&self.url).await.map_err(|e| e.to_string())?;
                store
                    .listen(&[Channel::Tokens])
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<Store, String>(store)
            })
            .await;
            match connected {
                Ok(Ok(store)) => {
                    if !self.why.is_empty() {
                        crate::say!("toolgate: the store answers again: remote tokens are checked");
                        self.why.clear();
                    }
                    self.wakeups = Some(store.wakeups());
                    self.store = Some(store);
                }
                Ok(Err(why)) => return Err(self.failed(why)),
                Err(_) => {
                    return Err(self.failed(format!(
                        "the store did not answer within {} s",
                        QUERY_WAIT.as_secs()
                    )))
                }
            }
        }
        self.store.as_mut().ok_or_else(|| self.why.clone())
    }

    fn failed(&mut self, why: String) -> String {
        if self.why.is_empty() {
            crate::say!(
                "toolgate: warning: {why}: remote connections are refused until the store answers"
            );
        }
        self.why = why;
        self.why.clone()
    }

    fn lost(&mut self, why: String) {
        self.store = None;
        self.wakeups = None;
        self.failed(why);
    }

    /// Check `token` against the store.
    async fn check(&mut self, token: &Token) -> Result<Identity, Refused> {
        let store = self.store().await.map_err(Refused::Unchecked)?;
        match tokio::time::timeout(QUERY_WAIT, store.verify(&token.0)).await {
            Ok(Ok(identity)) => Ok(identity),
            Ok(Err(TokenRefused::Unverifiable(err))) => {
                let why = err.to_string();
                if err.is_unreachable() {
                    self.lost(why.clone());
                }
                Err(Refused::Unchecked(why))
            }
            Ok(Err(refused)) => Err(Refused::Token(refused)),
            Err(_) => {
                // A statement left hanging: start again with a new
                // connection rather than queue behind it.
                let why = format!("the store did not answer within {} s", QUERY_WAIT.as_secs());
                self.lost(why.clone());
                Err(Refused::Unchecked(why))
            }
        }
    }
}

async fn run(url: String, mut requests: mpsc::Receiver<Admit>, stopped: CancellationToken) {
    let mut link = Link {
        url,
        store: None,
        wakeups: None,
        tried: None,
        why: String::new(),
    };
    // Connect at once, so a store that cannot be reached is said at start.
    let _ = link.store().await;
    let mut watched: Vec<Watched> = Vec::new();
    let mut tick = tokio::time::interval(REVERIFY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let wakeups = link.wakeups.clone();
        let woken = async move {
            match wakeups {
                Some(wakeups) => wakeups.wait().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = stopped.cancelled() => return,
            request = requests.recv() => {
                let Some(Admit { token, reply }) = request else {
                    return;
                };
                let answer = match link.check(&token).await {
                    Ok(identity) => {
                        let (end, ended) = watch::channel(None);
                        watched.push(Watched {
                            token,
                            name: identity.name.clone(),
                            confirmed: Instant::now(),
                            end,
                        });
                        Ok(Admitted { identity, ended })
                    }
                    Err(refused) => Err(refused),
                };
                let _ = reply.send(answer);
            }
            wake = woken => {
                if wake == Wake::Closed {
                    link.lost("the connection to the store was lost".into());
                }
                recheck(&mut link, &mut watched).await;
            }
            _ = tick.tick() => recheck(&mut link, &mut watched).await,
        }
    }
}

/// Check every watched token again; end the connections of those refused,
/// and of those not confirmed for [`STALE`].
async fn recheck(link: &mut Link, watched: &mut Vec<Watched>) {
    watched.retain(|entry| !entry.end.is_closed());
    let mut kept = Vec::with_capacity(watched.len());
    for mut entry in watched.drain(..) {
        let why = match link.check(&entry.token).await {
            Ok(_) => {
                entry.confirmed = Instant::now();
                kept.push(entry);
                continue;
            }
            Err(Refused::Token(refused)) => format!("{refused}; closing the connection"),
            Err(Refused::Unchecked(_)) if entry.confirmed.elapsed() < STALE => {
                kept.push(entry);
                continue;
            }
            Err(Refused::Unchecked(_)) => format!(
                "the token `{}` could not be checked for {} s (the store does not answer); closing the connection",
                entry.name,
                STALE.as_secs()
            ),
        };
        crate::say!("toolgate: ended a remote connection: {why}");
        let _ = entry.end.send(Some(super::error_line(&why, None)));
    }
    *watched = kept;
}
