//! The TLS server configuration built from `--tls-cert` and `--tls-key`
//! (PEM files): rustls with the ring provider, TLS 1.3 only, HTTP/1.1
//! announced by ALPN. Kept apart from the page so that any listener that
//! takes the same two flags can build its configuration here.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The certificate file could not be read, or holds no PEM certificate.
    #[error("cannot read the certificate chain {}: {why}", .path.display())]
    Certificate {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        why: String,
    },
    /// The key file could not be read, or holds no PEM private key.
    #[error("cannot read the private key {}: {why}", .path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        why: String,
    },
    /// rustls refused the pair (a key that does not match the certificate,
    /// an unsupported key type).
    #[error("the certificate and key cannot be used: {0}")]
    Refused(#[source] rustls::Error),
}

/// A server configuration for the certificate chain `cert` and its key `key`.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|err| TlsError::Certificate {
            path: cert.to_path_buf(),
            why: err.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Certificate {
            path: cert.to_path_buf(),
            why: "no CERTIFICATE block in it".to_string(),
        });
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|err| TlsError::Key {
        path: key.to_path_buf(),
        why: err.to_string(),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::Refused)?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(TlsError::Refused)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
