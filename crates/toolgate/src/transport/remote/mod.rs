//! `serve --listen tls:HOST:PORT` (feature `fleet`): remote connections to
//! the same broker as the Unix socket's, over TLS 1.3, each speaking
//! protocol v1 unchanged once its token is accepted. See docs/fleet.md,
//! "Remote connections".
//!
//! A connection's life:
//!
//! 1. The TLS handshake ([`HANDSHAKE`] at most; a client certificate
//!    required and verified with `--tls-client-ca`). Anything that is not
//!    TLS (plaintext JSON lines, say) fails here: no frame is read or
//!    written. At most [`UNPROVEN`] connections may be in their handshake
//!    or before their `hello` at once; more are closed as they come.
//! 2. The client speaks first: its first frame must be a `hello` with a
//!    `token`, within [`HELLO_WAIT`]. The broker says nothing before it
//!    (no `ready` that would tell an unknown peer the project, the mode
//!    or the policy's sources). The token is checked against the store
//!    ([`verifier`]), its project against the broker's project root, the
//!    role `hello` claims against the token's ([`gate`]). A connection
//!    refused here gets one `error` frame (`forbidden`, naming why, never
//!    the token) and is closed; the owner never hears of it, so nothing is
//!    decided for it.
//! 3. Accepted, it is opened with the owner like a socket connection
//!    ([`socket::connection`]), its `hello` (without the token) handed
//!    over as its first line: the broker greets it (`ready`) and answers
//!    the `hello` (`ready` with its role), as on the socket. From then
//!    on every line passes [`gate`] first (what the token may send), and
//!    the [`verifier`] may end it: its token revoked or expired, it gets
//!    one `error` frame and is closed, its open calls denied, within
//!    [`verifier::REVERIFY`].
//!    An admin token's token frames (`create_token`, `list_tokens`,
//!    `revoke_token`) are taken here, before the owner, and done with the
//!    store by [`admin`]: the owner gets only their reply.

pub mod admin;
pub mod gate;
pub mod verifier;

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use toolgate_protocol::{ClientFrame, DecodeError, ErrorCode, ErrorFrame, Hello, ServerFrame};

use crate::broker::Decoded;
use crate::owner::{Event, Shared};
use crate::transport::lines::{decode, Line};
use crate::transport::socket::{self, AcceptBackoff, ConnIds, Guard, Peer, Reading};
use gate::Holder;
use verifier::{Refused, Token, Verifier};

/// The longest a TLS handshake may take.
pub const HANDSHAKE: Duration = Duration::from_secs(10);

/// The longest a client may take, once connected, to send its `hello`.
pub const HELLO_WAIT: Duration = Duration::from_secs(10);

/// How long a refused connection is given to read its `error` frame and
/// close its side.
const LINGER: Duration = Duration::from_secs(2);

/// How many connections may be in their handshake or before their `hello`
/// at once; more are closed as they come, so that peers without a token
/// cannot hold the broker's memory or its store.
pub const UNPROVEN: usize = 128;

/// Why a remote listener could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// `tls:HOST:PORT` could not be read.
    #[error("--listen {given:?}: {why}")]
    Address {
        /// What was given.
        given: String,
        /// Why it cannot be used.
        why: String,
    },
    /// The address could not be bound.
    #[error("cannot listen on tls:{address}: {source}")]
    Bind {
        /// `HOST:PORT` as given.
        address: String,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// A bound TLS listener, not yet accepting.
pub struct Bound {
    listener: std::net::TcpListener,
    address: SocketAddr,
}

impl Bound {
    /// Bind `HOST:PORT` (`tls:` already taken off; a port of 0 lets the
    /// system choose: [`Bound::address`] says which).
    pub fn bind(address: &str) -> Result<Bound, RemoteError> {
        let (host, port) =
            crate::transport::tls::host_port(address).map_err(|why| RemoteError::Address {
                given: format!("tls:{address}"),
                why,
            })?;
        let bind = |source| RemoteError::Bind {
            address: address.to_string(),
            source,
        };
        let listener = std::net::TcpListener::bind((host.as_str(), port)).map_err(bind)?;
        listener.set_nonblocking(true).map_err(bind)?;
        let address = listener.local_addr().map_err(bind)?;
        Ok(Bound { listener, address })
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

/// Every TLS listener of a broker, with what they share: the TLS
/// configuration, the store that checks tokens and the project root
/// tokens are held to.
pub struct Remote {
    /// The bound listeners.
    pub listeners: Vec<Bound>,
    /// The server's TLS configuration.
    pub tls: Arc<rustls::ServerConfig>,
    /// The store's URL.
    pub store: String,
    /// The broker's project root (what a token's project must be).
    pub root: PathBuf,
}

/// What each connection's task needs.
struct Context {
    acceptor: TlsAcceptor,
    unproven: Arc<tokio::sync::Semaphore>,
    verifier: Verifier,
    store: String,
    root: PathBuf,
    events: mpsc::Sender<Event>,
    shared: Shared,
    ids: Arc<ConnIds>,
    max_frame_bytes: usize,
}

impl socket::Accept for Remote {
    fn spawn(
        self: Box<Self>,
        events: mpsc::Sender<Event>,
        shared: Shared,
        ids: Arc<ConnIds>,
        max_frame_bytes: usize,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let Remote {
                listeners,
                tls,
                store,
                root,
            } = *self;
            let context = Arc::new(Context {
                acceptor: TlsAcceptor::from(tls),
                unproven: Arc::new(tokio::sync::Semaphore::new(UNPROVEN)),
                verifier: Verifier::start(store.clone(), shared.stopped.clone()),
                store,
                root,
                events,
                shared,
                ids,
                max_frame_bytes,
            });
            let mut loops = tokio::task::JoinSet::new();
            for bound in listeners {
                match tokio::net::TcpListener::from_std(bound.listener) {
                    Ok(listener) => {
                        loops.spawn(accept(listener, context.clone()));
                    }
                    Err(err) => {
                        crate::say!("toolgate: cannot listen on tls:{}: {err}", bound.address)
                    }
                }
            }
            drop(context);
            while loops.join_next().await.is_some() {}
        })
    }
}

/// Accept connections until the broker stops; then wait for each to end.
async fn accept(listener: tokio::net::TcpListener, context: Arc<Context>) {
    let mut connections = tokio::task::JoinSet::new();
    let mut backoff = AcceptBackoff::default();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = context.shared.stopped.cancelled() => break,
        };
        match accepted {
            Ok((stream, from)) => {
                backoff.accepted();
                while connections.try_join_next().is_some() {}
                let Ok(unproven) = context.unproven.clone().try_acquire_owned() else {
                    crate::say!(
                        "toolgate: refused a remote connection from {from}: {UNPROVEN} others are still in their handshake or before their hello"
                    );
                    continue;
                };
                connections.spawn(connection(stream, from, context.clone(), unproven));
            }
            Err(err) => tokio::time::sleep(backoff.failed(&err)).await,
        }
    }
    drop(context);
    while connections.join_next().await.is_some() {}
}

/// One remote connection: handshake, `hello` and its token, then the
/// socket's connection with the token's [`gate`].
async fn connection(
    stream: tokio::net::TcpStream,
    from: SocketAddr,
    context: Arc<Context>,
    unproven: tokio::sync::OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    let stopped = context.shared.stopped.clone();
    let handshake = tokio::select! {
        handshake = tokio::time::timeout(HANDSHAKE, context.acceptor.accept(stream)) => handshake,
        () = stopped.cancelled() => return,
    };
    let stream = match handshake {
        Ok(Ok(stream)) => stream,
        Ok(Err(err)) => {
            crate::say!("toolgate: refused a remote connection from {from}: the TLS handshake failed ({err})");
            return;
        }
        Err(_) => {
            crate::say!(
                "toolgate: refused a remote connection from {from}: no TLS handshake within {} s",
                HANDSHAKE.as_secs()
            );
            return;
        }
    };
    let (mut reading, mut writing) = tokio::io::split(stream);
    let mut state = Reading::new(context.max_frame_bytes);
    let first = tokio::select! {
        first = tokio::time::timeout(HELLO_WAIT, first_line(&mut state, &mut reading)) => first,
        () = stopped.cancelled() => return,
    };
    let admitted = match first {
        Ok(None) => return,
        Ok(Some((line, number))) => admit(&context, line, number, state.max_frame_bytes()).await,
        Err(_) => Err(Refusal {
            told: format!(
                "no hello within {} s: the first frame on a remote connection must be a hello with a token",
                HELLO_WAIT.as_secs()
            ),
            logged: None,
            line: None,
        }),
    };
    let (hello, number, holder, token, ended) = match admitted {
        Ok(admitted) => {
            drop(unproven);
            admitted
        }
        Err(refusal) => {
            drop(unproven);
            crate::say!(
                "toolgate: refused a remote connection from {from}: {}",
                refusal.logged.as_deref().unwrap_or(&refusal.told)
            );
            let line = error_line(&refusal.told, refusal.line);
            let _ = tokio::time::timeout(LINGER, async {
                let _ = writing.write_all(&line).await;
                let _ = writing.shutdown().await;
                // Read what the client sent meanwhile before closing: a
                // socket closed with unread input is reset, and a reset can
                // take the error frame with it before the client reads it.
                let _ = tokio::io::copy(&mut reading, &mut tokio::io::sink()).await;
            })
            .await;
            return;
        }
    };
    let conn = context.ids.next();
    let peer = Peer {
        reading: state,
        first: vec![(number, Decoded::frame(ClientFrame::Hello(hello)))],
        token: Some(holder.signature()),
        guard: Some(Box::new(TokenGuard {
            holder,
            token,
            conn,
            store: context.store.clone(),
            events: context.events.clone(),
            admin: None,
        })),
        ended: Some(ended),
    };
    socket::connection(
        conn,
        reading,
        writing,
        context.events.clone(),
        context.shared.clone(),
        peer,
    )
    .await;
}

/// The first line that is not blank, and its number; `None` when the
/// connection ends first.
async fn first_line<R: AsyncRead + Unpin>(
    state: &mut Reading,
    reading: &mut R,
) -> Option<(Line<Bytes>, u64)> {
    loop {
        let (line, number) = state.next_line(reading).await?;
        match &line {
            Line::Data(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => continue,
            _ => return Some((line, number)),
        }
    }
}

/// Why a connection is refused: what its client is told, what stderr
/// says (when it is more), and the line it is about.
struct Refusal {
    told: String,
    logged: Option<String>,
    line: Option<u64>,
}

/// The `hello` (line `number`) that opens a connection, admitted: its
/// token valid for this project and the role it claims. The `hello` comes
/// back without its token, with the token's holder and what ends the
/// connection.
async fn admit(
    context: &Context,
    line: Line<Bytes>,
    number: u64,
    max_frame_bytes: usize,
) -> Result<
    (
        Hello,
        u64,
        Holder,
        Token,
        tokio::sync::watch::Receiver<Option<Bytes>>,
    ),
    Refusal,
> {
    let refuse = |told: String| Refusal {
        told,
        logged: None,
        line: Some(number),
    };
    let must = "the first frame on a remote connection must be a hello with a token";
    let bytes = match &line {
        Line::Data(bytes) if number == 1 => bytes
            .strip_prefix(crate::transport::lines::BOM)
            .unwrap_or(bytes),
        Line::Data(bytes) => bytes,
        Line::TooLarge(_) => {
            return Err(refuse(format!(
                "{must} (this line is longer than {max_frame_bytes} bytes)"
            )))
        }
    };
    let mut hello = match toolgate_protocol::decode_line(bytes, number) {
        Ok(ClientFrame::Hello(hello)) => hello,
        Ok(_) => return Err(refuse(format!("{must}, not another frame"))),
        Err(err) => return Err(refuse(format!("{must} ({})", err.message))),
    };
    let Some(token) = hello.token.take() else {
        return Err(refuse(format!("no token: {must}")));
    };
    let token = Token::new(token);
    let admitted = match context.verifier.admit(token.clone()).await {
        Ok(admitted) => admitted,
        Err(Refused::Token(refused)) => return Err(refuse(format!("token refused: {refused}"))),
        Err(Refused::Unchecked(why)) => {
            return Err(Refusal {
                told: "token refused: the token could not be checked (the broker cannot reach its store); try again later".into(),
                logged: Some(format!("the token could not be checked: {why}")),
                line: Some(number),
            })
        }
    };
    let identity = admitted.identity;
    if let Some(project) = &identity.project {
        if !gate::project_matches(project, &context.root) {
            return Err(refuse(format!(
                "token refused: the token `{}` is for the project {}, not for this broker's ({})",
                identity.name,
                crate::display::shown(project),
                context.root.display()
            )));
        }
    }
    let holder = Holder {
        name: identity.name,
        role: identity.role,
        project: identity.project,
    };
    holder.may_say(hello.role).map_err(refuse)?;
    holder.may_follow(hello.projects).map_err(refuse)?;
    Ok((hello, number, holder, token, admitted.ended))
}

/// An accepted connection's lines, checked against what its token may
/// send before the owner sees them. An admin's token frames are done by
/// [`admin`] with the store, beside the owner.
struct TokenGuard {
    holder: Holder,
    token: Token,
    conn: crate::broker::ConnId,
    store: String,
    events: mpsc::Sender<Event>,
    /// The task doing its token frames, once it sent one.
    admin: Option<mpsc::Sender<(ClientFrame, u64)>>,
}

impl Guard for TokenGuard {
    fn decode(&mut self, line: Line<&[u8]>, number: u64, max_frame_bytes: usize) -> Decoded {
        let Line::Data(bytes) = line else {
            return decode(line, number, max_frame_bytes);
        };
        match toolgate_protocol::decode_line(bytes, number) {
            Ok(frame) => match self.holder.may_send(&frame) {
                Ok(()) if admin::is_token_frame(&frame) => {
                    let worker = self.admin.get_or_insert_with(|| {
                        admin::worker(admin::Admin {
                            store: self.store.clone(),
                            conn: self.conn,
                            token: self.token.clone(),
                            holder: self.holder.clone(),
                            events: self.events.clone(),
                        })
                    });
                    match worker.try_send((frame, number)) {
                        // The reply comes from the task, once the store has
                        // committed: the owner sees nothing of the line.
                        Ok(()) => Decoded::blank(),
                        Err(full_or_closed) => {
                            let why = match &full_or_closed {
                                mpsc::error::TrySendError::Full(_) => format!(
                                    "{} token frames of this connection are already waiting for the store: send this one again once one is answered",
                                    admin::QUEUE
                                ),
                                mpsc::error::TrySendError::Closed(_) => {
                                    "the broker is stopping: nothing was changed".to_string()
                                }
                            };
                            let (frame, _) = full_or_closed.into_inner();
                            let mut error = refused(&frame, why);
                            error.code = ErrorCode::StoreUnavailable;
                            Decoded::unreadable(error)
                        }
                    }
                }
                Ok(()) => Decoded::frame(frame),
                Err(why) => Decoded::unreadable(refused(&frame, why)),
            },
            // The broker explains what is wrong with it, as anywhere.
            Err(_) => decode(line, number, max_frame_bytes),
        }
    }
}

/// The error the broker answers a refused `frame` with (in its turn, with
/// its line number): `forbidden`, saying `why`.
fn refused(frame: &ClientFrame, why: String) -> DecodeError {
    let (session_id, permission_id) = match frame {
        ClientFrame::PermissionResponse(response) => (None, Some(response.permission_id.clone())),
        ClientFrame::RevokeGrant(_) | ClientFrame::Shutdown(_) | ClientFrame::Hello(_) => {
            (None, None)
        }
        ClientFrame::ListPending(list) | ClientFrame::ListSessions(list) => {
            (list.session_id.clone(), None)
        }
        ClientFrame::ListGrants(list) => (list.session_id.clone(), None),
        _ => (None, None),
    };
    DecodeError {
        code: ErrorCode::Forbidden,
        message: why,
        call_id: None,
        session_id,
        permission_id,
        tool_call: false,
        others: Box::new([]),
    }
}

/// One `error` frame (`forbidden`) saying `why`, as a line.
pub fn error_line(why: &str, line: Option<u64>) -> Bytes {
    let frame = ServerFrame::Error(ErrorFrame {
        line,
        ..ErrorFrame::new(ErrorCode::Forbidden, why.to_string())
    });
    let mut bytes = serde_json::to_vec(&frame).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}
