//! TLS to the store: `sslmode` and `sslrootcert` of the store's URL, as
//! libpq reads them, with rustls (the `ring` provider, TLS 1.3 only, as
//! every TLS of toolgate).
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | - |
//! | `prefer` (the default) | when the server offers it, else plaintext | not checked |
//! | `require` | always (a server without TLS is refused) | not checked; with `sslrootcert`, as `verify-ca` (as libpq does) |
//! | `verify-ca` | always | issued by `sslrootcert` (else the system's trust store) |
//! | `verify-full` | always | the same, and for the host the URL names |
//!
//! tokio-postgres knows `disable`, `prefer` and `require` only, and no
//! `sslrootcert`: [`StoreUrl::parse`] takes both out of the URL before
//! tokio-postgres parses the rest, and [`MakeRustls`] is the connector
//! (its own, a hundred lines: `tokio-postgres-rustls` would add crates for
//! what `tokio-rustls`, already in the build, does).
//!
//! No channel binding is offered (`SCRAM-SHA-256` without `-PLUS`):
//! `verify-full` is what binds the connection to the server.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

use super::StoreError;

/// How a connection to the store uses TLS (`sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Never.
    Disable,
    /// When the server offers it; its certificate is not checked.
    Prefer,
    /// Always; the certificate is not checked (without `sslrootcert`).
    Require,
    /// Always, with a certificate the CA issued.
    VerifyCa,
    /// Always, with a certificate the CA issued for the host named.
    VerifyFull,
}

impl SslMode {
    fn parse(text: &str) -> Result<SslMode, StoreError> {
        Ok(match text {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err(StoreError::BadTls {
                    why: "`sslmode=allow` is not supported (it tries plaintext first): use `prefer`, or `require` and stronger".to_string(),
                })
            }
            other => {
                return Err(StoreError::BadTls {
                    why: format!(
                        "unknown `sslmode={}`: use disable, prefer, require, verify-ca or verify-full",
                        crate::display::shown(other)
                    ),
                })
            }
        })
    }

    /// As the URL says it.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a connection without TLS is refused.
    pub fn required(self) -> bool {
        matches!(
            self,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull
        )
    }
}

/// A store URL with its TLS settings taken out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreUrl {
    /// The rest of the URL, for tokio-postgres.
    pub rest: String,
    /// `sslmode` (`prefer` when not given, as libpq).
    pub mode: SslMode,
    /// `sslrootcert`: the CA certificates (PEM) the server's must chain to.
    pub root_cert: Option<PathBuf>,
}

impl StoreUrl {
    /// Take `sslmode` and `sslrootcert` out of `url` (`postgres://…?…` or
    /// `key=value …`). A URL this cannot read is given back whole, for
    /// tokio-postgres to say what is wrong with it.
    pub fn parse(url: &str) -> Result<StoreUrl, StoreError> {
        let (rest, settings) = if url.starts_with("postgres://") || url.starts_with("postgresql://")
        {
            split_query(url)
        } else {
            split_pairs(url)
        };
        let mut mode = SslMode::Prefer;
        let mut root_cert = None;
        for (key, value) in settings {
            match key.as_str() {
                "sslmode" => mode = SslMode::parse(&value)?,
                _ => {
                    if value.is_empty() {
                        return Err(StoreError::BadTls {
                            why: "`sslrootcert` names no file".to_string(),
                        });
                    }
                    if value == "system" {
                        root_cert = None;
                    } else {
                        root_cert = Some(PathBuf::from(value));
                    }
                }
            }
        }
        Ok(StoreUrl {
            rest,
            mode,
            root_cert,
        })
    }

    /// What the server's certificate is checked against, for messages.
    pub fn trust(&self) -> String {
        match self.check() {
            Check::Nothing => "its certificate not checked".to_string(),
            Check::Issuer => format!(
                "its certificate checked against {}",
                shown_root(self.root_cert.as_deref())
            ),
            Check::Full => format!(
                "its certificate checked against {}, and its host name",
                shown_root(self.root_cert.as_deref())
            ),
        }
    }

    fn check(&self) -> Check {
        match (self.mode, &self.root_cert) {
            (SslMode::Disable | SslMode::Prefer, _) | (SslMode::Require, None) => Check::Nothing,
            (SslMode::Require | SslMode::VerifyCa, Some(_)) | (SslMode::VerifyCa, None) => {
                Check::Issuer
            }
            (SslMode::VerifyFull, _) => Check::Full,
        }
    }

    /// The TLS connector for this URL (with `disable`, tokio-postgres never
    /// uses it).
    pub fn connector(&self) -> Result<MakeRustls, StoreError> {
        let check = self.check();
        let verifier: Arc<dyn ServerCertVerifier> = match check {
            Check::Nothing => Arc::new(Unchecked),
            Check::Issuer | Check::Full => {
                let roots = self.roots()?;
                let webpki = WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots),
                    crate::transport::tls::provider(),
                )
                .build()
                .map_err(|err| StoreError::BadTls {
                    why: format!("the store's CA certificates cannot be used: {err}"),
                })?;
                let verifier: Arc<dyn ServerCertVerifier> = match check {
                    Check::Full => webpki,
                    _ => Arc::new(AnyName(webpki)),
                };
                verifier
            }
        };
        let config = ClientConfig::builder_with_provider(crate::transport::tls::provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|err| StoreError::BadTls {
                why: format!("TLS 1.3: {err}"),
            })?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeRustls {
            config: Arc::new(config),
        })
    }

    fn roots(&self) -> Result<RootCertStore, StoreError> {
        let found = match &self.root_cert {
            Some(path) => crate::transport::tls::roots_in("store's CA file (sslrootcert)", path),
            None => crate::transport::tls::system_roots(),
        };
        found.map_err(|err| StoreError::BadTls {
            why: err.to_string(),
        })
    }
}

/// How much of the server's certificate is checked.
#[derive(Clone, Copy)]
enum Check {
    Nothing,
    Issuer,
    Full,
}

/// `postgres://…?a=b&sslmode=…`: the URL without the TLS settings, and
/// them (percent-decoded).
fn split_query(url: &str) -> (String, Vec<(String, String)>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), Vec::new());
    };
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key_text = percent_decoded(key);
        if key_text == "sslmode" || key_text == "sslrootcert" {
            taken.push((key_text, percent_decoded(value)));
        } else {
            kept.push(pair);
        }
    }
    let rest = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (rest, taken)
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    out.push((high * 16 + low) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `host=… sslmode=… sslrootcert='…'`: the pairs but the TLS settings,
/// as written, and them (unquoted). Text that is not such pairs is given
/// back whole.
fn split_pairs(text: &str) -> (String, Vec<(String, String)>) {
    let whole = || (text.to_string(), Vec::new());
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut i = 0;
    let mut kept: Vec<&str> = Vec::new();
    let mut taken = Vec::new();
    loop {
        while i < chars.len() && chars[i].1.is_whitespace() {
            i += 1;
        }
        if i == chars.len() {
            break;
        }
        let start = chars[i].0;
        let mut key = String::new();
        while i < chars.len() && chars[i].1 != '=' && !chars[i].1.is_whitespace() {
            key.push(chars[i].1);
            i += 1;
        }
        while i < chars.len() && chars[i].1.is_whitespace() {
            i += 1;
        }
        if i == chars.len() || chars[i].1 != '=' {
            return whole();
        }
        i += 1;
        while i < chars.len() && chars[i].1.is_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if i < chars.len() && chars[i].1 == '\'' {
            i += 1;
            loop {
                match chars.get(i).map(|c| c.1) {
                    None => return whole(),
                    Some('\'') => {
                        i += 1;
                        break;
                    }
                    Some('\\') => {
                        match chars.get(i + 1) {
                            Some((_, c)) => value.push(*c),
                            None => return whole(),
                        }
                        i += 2;
                    }
                    Some(c) => {
                        value.push(c);
                        i += 1;
                    }
                }
            }
        } else {
            while i < chars.len() && !chars[i].1.is_whitespace() {
                if chars[i].1 == '\\' && i + 1 < chars.len() {
                    i += 1;
                }
                value.push(chars[i].1);
                i += 1;
            }
        }
        let end = chars.get(i).map_or(text.len(), |c| c.0);
        if key == "sslmode" || key == "sslrootcert" {
            taken.push((key, value));
        } else {
            kept.push(&text[start..end]);
        }
    }
    (kept.join(" "), taken)
}

/// A certificate verifier that checks nothing of the certificate but that
/// the server holds its key (`prefer`, `require` without a CA, as libpq).
#[derive(Debug)]
struct Unchecked;

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        // Only TLS 1.3 is offered.
        Err(rustls::Error::General("TLS 1.2 is not offered".to_string()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &crate::transport::tls::provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        crate::transport::tls::provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `verify-ca`: the chain is checked, the name is not.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// tokio-postgres' TLS connector, on rustls.
#[derive(Clone)]
pub struct MakeRustls {
    config: Arc<ClientConfig>,
}

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, io::Error> {
        // A Unix socket has no name (and the server offers no TLS there).
        let name = ServerName::try_from(domain.to_string()).ok();
        Ok(RustlsConnect {
            config: self.config.clone(),
            name,
        })
    }
}

/// One connection's TLS handshake.
pub struct RustlsConnect {
    config: Arc<ClientConfig>,
    name: Option<ServerName<'static>>,
}

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let name = self.name.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the store's host is no name or address a certificate could be for",
                )
            })?;
            let stream = tokio_rustls::TlsConnector::from(self.config)
                .connect(name, stream)
                .await?;
            Ok(RustlsStream(Box::new(stream)))
        })
    }
}

/// A TLS session to the store.
pub struct RustlsStream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

/// The roots a certificate is checked against, for messages.
fn shown_root(root: Option<&Path>) -> String {
    match root {
        Some(path) => format!("the CA in {}", path.display()),
        None => "the system's trust store".to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
    use super::*;

    #[test]
    fn tls_settings_come_out_of_either_form() {
        let url = StoreUrl::parse(
            "postgres://u@h:5432/db?connect_timeout=3&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem",
        )
        .unwrap();
        assert_eq!(url.rest, "postgres://u@h:5432/db?connect_timeout=3");
        assert_eq!(url.mode, SslMode::VerifyFull);
        assert_eq!(url.root_cert, Some(PathBuf::from("/tmp/ca.pem")));
        let url = StoreUrl::parse("postgres://u@h/db?sslmode=require").unwrap();
        assert_eq!(url.rest, "postgres://u@h/db");
        assert_eq!(url.mode, SslMode::Require);
        let url = StoreUrl::parse("postgres://u@h/db").unwrap();
        assert_eq!(url.mode, SslMode::Prefer);
        let url =
            StoreUrl::parse("host=h  sslmode = verify-ca user=u sslrootcert='/a b/c\\'s.pem'")
                .unwrap();
        assert_eq!(url.rest, "host=h user=u");
        assert_eq!(url.mode, SslMode::VerifyCa);
        assert_eq!(url.root_cert, Some(PathBuf::from("/a b/c's.pem")));
        assert!(StoreUrl::parse("postgres://h/db?sslmode=allow").is_err());
        assert!(StoreUrl::parse("host=h sslmode=sometimes").is_err());
        // Not pairs: handed on whole, for tokio-postgres to refuse.
        assert_eq!(StoreUrl::parse("nonsense").unwrap().rest, "nonsense");
    }
}
