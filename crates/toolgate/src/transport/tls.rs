//! TLS for remote connections (feature `fleet`): the configurations of
//! `serve --listen tls:…` and of the clients' `--remote tls://…`, from PEM
//! files. rustls with the `ring` provider, TLS 1.3 only: no older version
//! is offered or accepted, so there is no downgrade to negotiate.
//!
//! - The server presents `--tls-cert` (its chain, leaf first) with
//!   `--tls-key`; with `--tls-client-ca` every client must present a
//!   certificate that CA issued (mutual TLS), in addition to its token.
//! - A client verifies the server's certificate against `--ca` (or, without
//!   it, the system's trust store) and the host it was given: the host of
//!   `tls://HOST:PORT` must be one of the certificate's names (a DNS name,
//!   or an IP address SAN for an address). With `--client-cert` and
//!   `--client-key` it presents a certificate of its own.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// Why a TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read the {what} {}: {source}", path.display())]
    Read {
        /// What the file was to hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A file holds no PEM block of the kind needed, or a broken one.
    #[error("the {what} {} holds no usable PEM {kind}: {why}", path.display())]
    Pem {
        /// What the file was to hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The kind of block looked for.
        kind: &'static str,
        /// What the PEM reader said, or that there was none.
        why: String,
    },
    /// rustls refused what the files hold (a key that does not match the
    /// certificate, a CA certificate it cannot use).
    #[error("{what}: {source}")]
    Rustls {
        /// What was being set up.
        what: String,
        /// rustls' reason.
        #[source]
        source: rustls::Error,
    },
    /// A client CA file whose certificates cannot verify clients.
    #[error("the client CA file {}: {why}", path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// No trusted root at all: no `--ca`, and the system's trust store
    /// holds none that can be read.
    #[error("no CA to verify the broker with: give --ca FILE (the system's trust store has no usable certificate{0})")]
    NoRoots(String),
}

/// The crypto provider every configuration uses.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// Every certificate in the PEM file `path` (at least one).
pub fn certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let bad = |why: String| TlsError::Pem {
        what,
        path: path.to_path_buf(),
        kind: "CERTIFICATE",
        why,
    };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| bad(err.to_string()))?;
    if certs.is_empty() {
        return Err(bad("there is none".to_string()));
    }
    Ok(certs)
}

/// The private key in the PEM file `path` (PKCS#8, PKCS#1 or SEC1).
fn private_key(what: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(what, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|err| TlsError::Pem {
        what,
        path: path.to_path_buf(),
        kind: "PRIVATE KEY",
        why: match err {
            rustls::pki_types::pem::Error::NoItemsFound => "there is none".to_string(),
            err => err.to_string(),
        },
    })
}

/// The roots in the PEM file `path`.
pub(crate) fn roots_in(what: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    roots(what, path)
}

/// The roots in the PEM file `path`.
fn roots(what: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(what, path)? {
        roots.add(cert).map_err(|source| TlsError::Rustls {
            what: format!("the {what} {}", path.display()),
            source,
        })?;
    }
    Ok(roots)
}

/// The server's configuration: its certificate chain and key, TLS 1.3
/// only, and with `client_ca` a client certificate that CA issued required
/// of every client.
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = certificates("certificate file (--tls-cert)", cert)?;
    let key_der = private_key("key file (--tls-key)", key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|source| TlsError::Rustls {
            what: "TLS 1.3".to_string(),
            source,
        })?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let roots = roots("client CA file (--tls-client-ca)", path)?;
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider(),
            )
            .build()
            .map_err(|err| TlsError::ClientCa {
                path: path.to_path_buf(),
                why: err.to_string(),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(chain, key_der)
        .map_err(|source| TlsError::Rustls {
            what: format!(
                "the certificate {} and the key {} cannot be used together",
                cert.display(),
                key.display()
            ),
            source,
        })?;
    Ok(Arc::new(config))
}

/// A client's configuration: the broker's certificate verified against
/// `ca` (else the system's trust store), TLS 1.3 only, and with
/// `identity` (certificate and key files) a certificate of its own for a
/// broker that requires one.
pub fn client_config(
    ca: Option<&Path>,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let roots = match ca {
        Some(path) => roots("CA file (--ca)", path)?,
        None => system_roots()?,
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|source| TlsError::Rustls {
            what: "TLS 1.3".to_string(),
            source,
        })?
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = certificates("client certificate file (--client-cert)", cert)?;
            let key_der = private_key("client key file (--client-key)", key)?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|source| TlsError::Rustls {
                    what: format!(
                        "the client certificate {} and the key {} cannot be used together",
                        cert.display(),
                        key.display()
                    ),
                    source,
                })?
        }
    };
    Ok(Arc::new(config))
}

/// The system's trust store (`/etc/ssl/certs` and the like, as
/// `rustls-native-certs` finds them).
pub(crate) fn system_roots() -> Result<RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = match found.errors.first() {
            Some(err) => format!(": {err}"),
            None => String::new(),
        };
        return Err(TlsError::NoRoots(why));
    }
    Ok(roots)
}

/// `HOST:PORT` as a host and a port: a name, an IPv4 address, or an IPv6
/// address in brackets (`[::1]:7300`, whose host is `::1`).
pub fn host_port(text: &str) -> Result<(String, u16), String> {
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err("expected HOST:PORT".to_string());
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("the port {port:?} is not a number from 0 to 65535"))?;
    let host = match host.strip_prefix('[') {
        Some(inner) => inner
            .strip_suffix(']')
            .ok_or_else(|| "an IPv6 address goes in brackets: [::1]:PORT".to_string())?,
        None if host.contains(':') => {
            return Err("an IPv6 address goes in brackets: [::1]:PORT".to_string())
        }
        None => host,
    };
    if host.is_empty() {
        return Err("expected HOST:PORT, with a host".to_string());
    }
    Ok((host.to_string(), port))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
    use super::*;

    /// An address, and its host and port or the error.
    type Case<'a> = (&'a str, Result<(&'a str, u16), &'a str>);

    #[test]
    fn addresses() {
        let cases: &[Case] = &[
            ("127.0.0.1:7300", Ok(("127.0.0.1", 7300))),
            ("localhost:0", Ok(("localhost", 0))),
            ("broker.example:443", Ok(("broker.example", 443))),
            ("[::1]:7300", Ok(("::1", 7300))),
            (
                "::1:7300",
                Err("an IPv6 address goes in brackets: [::1]:PORT"),
            ),
            (
                "[::1:7300",
                Err("an IPv6 address goes in brackets: [::1]:PORT"),
            ),
            ("host", Err("expected HOST:PORT")),
            (":7300", Err("expected HOST:PORT, with a host")),
            (
                "host:http",
                Err("the port \"http\" is not a number from 0 to 65535"),
            ),
            (
                "host:70000",
                Err("the port \"70000\" is not a number from 0 to 65535"),
            ),
        ];
        for (text, expected) in cases {
            let got = host_port(text);
            let expected = expected
                .map(|(host, port)| (host.to_string(), port))
                .map_err(str::to_string);
            assert_eq!(got, expected, "{text}");
        }
    }
}
