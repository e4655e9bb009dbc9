//! A client of a remote broker (`serve --listen tls:HOST:PORT`, feature
//! `fleet`): `--remote tls://HOST:PORT --token-file FILE [--ca FILE]
//! [--client-cert FILE --client-key FILE]`, or the same in the environment
//! (`TOOLGATE_REMOTE`, `TOOLGATE_TOKEN_FILE`, `TOOLGATE_CA`,
//! `TOOLGATE_CLIENT_CERT`, `TOOLGATE_CLIENT_KEY`).
//!
//! The TLS session is carried by a bridge: a task (on a thread of its own
//! for a blocking client) that copies bytes between the TLS stream and one
//! end of a Unix socket pair, whose other end the client gets. So every
//! client speaks to a remote broker through the very code it uses for the
//! local socket (its timeouts, half-closes, the greeting), and the one
//! difference is said once: a remote broker does not greet first, it
//! answers the `hello`, which carries the token ([`super::hello`]).
//!
//! Whom a client trusts: the broker whose certificate a trusted CA issued
//! for the host it was given (`--ca`, else the system's trust store); its
//! own user's socket does not come into it.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_rustls::TlsConnector;

use super::{left, ClientError, RemoteSpec};
use crate::transport::tls::{self, TlsError};

/// The variables a client reads when the flags are not given (the address
/// itself is [`super::REMOTE_ENV`]).
pub const TOKEN_FILE_ENV: &str = "TOOLGATE_TOKEN_FILE";
/// See [`TOKEN_FILE_ENV`].
pub const CA_ENV: &str = "TOOLGATE_CA";
/// See [`TOKEN_FILE_ENV`].
pub const CLIENT_CERT_ENV: &str = "TOOLGATE_CLIENT_CERT";
/// See [`TOKEN_FILE_ENV`].
pub const CLIENT_KEY_ENV: &str = "TOOLGATE_CLIENT_KEY";

/// Why a remote broker cannot be used as given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// The address is not `tls://HOST:PORT`.
    #[error("--remote {given:?}: {why}")]
    Address {
        /// What was given.
        given: String,
        /// Why it cannot be used.
        why: String,
    },
    /// No token file was named.
    #[error("--remote needs --token-file FILE (or {TOKEN_FILE_ENV}): the file holding the token")]
    NoTokenFile,
    /// The token file could not be read.
    #[error("cannot read the token file {}: {source}", path.display())]
    TokenUnreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Others can read or change the token file.
    #[error("the token file {} can be read or changed by other users (mode {mode:03o}): make it yours alone (chmod 600 {})", path.display(), path.display())]
    TokenExposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The token file is another user's.
    #[error("the token file {} belongs to uid {owner}, not to you (uid {uid})", path.display())]
    TokenNotYours {
        /// The file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's user.
        uid: u32,
    },
    /// The token file holds no token.
    #[error("the token file {} holds no toolgate token on its first line (`tg_` and 43 characters)", path.display())]
    NotAToken {
        /// The file.
        path: PathBuf,
    },
    /// A client certificate without its key, or the other way round.
    #[error(
        "--client-cert and --client-key go together (or {CLIENT_CERT_ENV} and {CLIENT_KEY_ENV})"
    )]
    HalfIdentity,
    /// The TLS configuration could not be made.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// A remote broker, ready to be connected to.
pub struct Remote {
    host: String,
    port: u16,
    name: ServerName<'static>,
    token: String,
    tls: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Remote(tls://{})", self.address())
    }
}

/// `value`, else the environment variable `name` (empty is unset).
fn or_env<T: From<String>>(value: Option<T>, name: &str) -> Option<T> {
    value.or_else(|| {
        std::env::var(name)
            .ok()
            .filter(|value| !value.is_empty())
            .map(T::from)
    })
}

impl Remote {
    /// The remote broker `spec` names (its unset fields from the
    /// environment); `None` when none is named.
    pub fn from_spec(spec: RemoteSpec) -> Result<Option<Remote>, RemoteError> {
        let Some(address) = or_env(spec.remote, super::REMOTE_ENV) else {
            return Ok(None);
        };
        let token_file = or_env(spec.token_file, TOKEN_FILE_ENV).ok_or(RemoteError::NoTokenFile)?;
        let ca = or_env(spec.ca, CA_ENV);
        let cert = or_env(spec.client_cert, CLIENT_CERT_ENV);
        let key = or_env(spec.client_key, CLIENT_KEY_ENV);
        let identity = match (&cert, &key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
            _ => return Err(RemoteError::HalfIdentity),
        };
        Remote::new(&address, &token_file, ca.as_deref(), identity).map(Some)
    }

    /// The broker at `address` (`tls://HOST:PORT`), with the token in
    /// `token_file`, its certificate verified against `ca` (else the
    /// system's trust store), presenting `identity` (certificate and key
    /// files) if given.
    pub fn new(
        address: &str,
        token_file: &Path,
        ca: Option<&Path>,
        identity: Option<(&Path, &Path)>,
    ) -> Result<Remote, RemoteError> {
        let bad = |why: String| RemoteError::Address {
            given: address.to_string(),
            why,
        };
        let rest = address
            .strip_prefix("tls://")
            .ok_or_else(|| bad("expected tls://HOST:PORT".to_string()))?;
        let (host, port) = tls::host_port(rest.trim_end_matches('/')).map_err(bad)?;
        if port == 0 {
            return Err(bad("the port cannot be 0".to_string()));
        }
        let name = ServerName::try_from(host.clone())
            .map_err(|_| bad(format!("{host:?} is not a host name or an IP address")))?;
        let token = read_token(token_file)?;
        let tls = tls::client_config(ca, identity)?;
        Ok(Remote {
            host,
            port,
            name,
            token,
            tls,
        })
    }

    /// `HOST:PORT` (an IPv6 address in brackets).
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The token, for the `hello`.
    pub(super) fn token(&self) -> &str {
        &self.token
    }
}

/// The token on the first line of `path`, which must be this user's and
/// closed to everybody else (as ssh demands of a private key).
fn read_token(path: &Path) -> Result<String, RemoteError> {
    let unreadable = |source| RemoteError::TokenUnreadable {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(unreadable)?;
    let uid = crate::transport::socket::my_uid();
    if meta.uid() != uid {
        return Err(RemoteError::TokenNotYours {
            path: path.to_path_buf(),
            owner: meta.uid(),
            uid,
        });
    }
    if meta.mode() & 0o077 != 0 {
        return Err(RemoteError::TokenExposed {
            path: path.to_path_buf(),
            mode: meta.mode() & 0o777,
        });
    }
    let text = std::fs::read_to_string(path).map_err(unreadable)?;
    let token = text.lines().next().unwrap_or("").trim();
    if !crate::fleet::tokens::well_formed(token) {
        return Err(RemoteError::NotAToken {
            path: path.to_path_buf(),
        });
    }
    Ok(token.to_string())
}

/// Connect to `remote` and finish the TLS handshake, by `deadline`.
async fn connect_tls(
    remote: &Remote,
    deadline: Instant,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, ClientError> {
    let label = format!("tls://{}", remote.address());
    let steps = async {
        let tcp = tokio::net::TcpStream::connect((remote.host.as_str(), remote.port))
            .await
            .map_err(|err| ClientError::NoRemote(label.clone(), err))?;
        let _ = tcp.set_nodelay(true);
        TlsConnector::from(remote.tls.clone())
            .connect(remote.name.clone(), tcp)
            .await
            .map_err(|err| ClientError::Handshake(label.clone(), err))
    };
    tokio::time::timeout_at(deadline.into(), steps)
        .await
        .unwrap_or(Err(ClientError::TimedOut))
}

/// Copy between the TLS stream and the local end of the pair, each way
/// until its end, passing each end on as a half-close. A way that fails
/// stops alone: what the broker said before it closed still reaches the
/// client.
async fn bridge<T, L>(tls: T, local: L)
where
    T: AsyncRead + AsyncWrite,
    L: AsyncRead + AsyncWrite,
{
    let (mut from_broker, mut to_broker) = tokio::io::split(tls);
    let (mut from_client, mut to_client) = tokio::io::split(local);
    let down = async {
        pass(&mut from_broker, &mut to_client).await;
        let _ = to_client.shutdown().await;
    };
    let up = async {
        pass(&mut from_client, &mut to_broker).await;
        let _ = to_broker.shutdown().await;
    };
    tokio::join!(down, up);
}

/// Copy `from` to `to` until `from` ends or fails (or `to` does), each
/// read written before the next is asked for. Not `tokio::io::copy`: it
/// reads ahead while it holds bytes not yet written, and returns a failed
/// read's error at once, dropping them: the broker's last frame (the
/// `error` that says why it closes the connection) would be lost when a
/// reset or a close without `close_notify` follows it.
async fn pass<R, W>(from: &mut R, to: &mut W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buffer = vec![0; 16 * 1024];
    loop {
        let count = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(count) => count,
        };
        if to.write_all(&buffer[..count]).await.is_err() || to.flush().await.is_err() {
            return;
        }
    }
}

/// Connect to `remote` by `deadline` for a blocking client: the TLS
/// session runs on a thread of its own, and the client gets the local end
/// of its bridge (see the module's documentation).
pub fn open(remote: &Arc<Remote>, deadline: Instant) -> Result<UnixStream, ClientError> {
    let (mine, theirs) = UnixStream::pair().map_err(ClientError::Io)?;
    let (told, connected) = std::sync::mpsc::channel();
    let remote = remote.clone();
    let spawned = std::thread::Builder::new()
        .name("toolgate-tls".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(err) => {
                    let _ = told.send(Err(ClientError::Io(err)));
                    return;
                }
            };
            runtime.block_on(async move {
                let tls = match connect_tls(&remote, deadline).await {
                    Ok(tls) => tls,
                    Err(err) => {
                        let _ = told.send(Err(err));
                        return;
                    }
                };
                let local = theirs
                    .set_nonblocking(true)
                    .and_then(|()| tokio::net::UnixStream::from_std(theirs));
                match local {
                    Ok(local) => {
                        let _ = told.send(Ok(()));
                        bridge(tls, local).await;
                    }
                    Err(err) => {
                        let _ = told.send(Err(ClientError::Io(err)));
                    }
                }
            });
        });
    if let Err(err) = spawned {
        return Err(ClientError::Io(err));
    }
    let wait = left(deadline).ok_or(ClientError::TimedOut)?;
    match connected.recv_timeout(wait) {
        Ok(Ok(())) => Ok(mine),
        Ok(Err(err)) => Err(err),
        Err(_) => Err(ClientError::TimedOut),
    }
}

/// Connect to `remote` by `deadline` on the current tokio runtime: the
/// TLS session is a task of it, and the client gets the local end of its
/// bridge.
pub async fn connect(
    remote: &Remote,
    deadline: Instant,
) -> Result<tokio::net::UnixStream, ClientError> {
    let tls = connect_tls(remote, deadline).await?;
    let (mine, theirs) = tokio::net::UnixStream::pair().map_err(ClientError::Io)?;
    tokio::spawn(bridge(tls, theirs));
    Ok(mine)
}
