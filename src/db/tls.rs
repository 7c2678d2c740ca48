//! How scanstore reaches PostgreSQL over TLS: the database URL's libpq `sslmode`
//! (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`) and `sslrootcert` (or
//! `database.ca_file`), enforced by a rustls connector (`tokio-postgres-rustls`, on the
//! same rustls and crypto provider as the rest of scanstore, so no system OpenSSL is
//! linked). The semantics are libpq's: `prefer` and `require` encrypt without checking the
//! server unless a CA is given (then, as `verify-ca`, the chain is checked); `verify-ca`
//! checks the chain; `verify-full` the chain and the host name.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use percent_encoding::percent_decode_str;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            // `allow` tries plain first: a downgrade scanstore does not offer.
            _ => {
                return Err(format!(
                "sslmode={value} is not one of disable, prefer, require, verify-ca, verify-full"
            ))
            }
        })
    }
}

/// Where the CA to verify the server against comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// A PEM file (`sslrootcert=FILE` or `database.ca_file`).
    File(PathBuf),
    /// `sslrootcert=system`: the public web roots.
    System,
}

/// A database URL taken apart: what `tokio-postgres` reads, and the TLS settings it does
/// not know.
pub struct DbUrl {
    pub config: postgres::Config,
    pub mode: SslMode,
    pub root_cert: Option<RootCert>,
}

impl fmt::Debug for DbUrl {
    /// Never the URL: it may carry a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DbUrl")
            .field("mode", &self.mode)
            .field("root_cert", &self.root_cert)
            .finish_non_exhaustive()
    }
}

impl DbUrl {
    /// Reads a `postgresql://` URL or a `key=value` string; `ca_file` is used when the URL
    /// names no `sslrootcert`. Errors never quote the URL.
    pub fn parse(url: &str, ca_file: Option<&Path>) -> Result<DbUrl, String> {
        let (rest, tls) = split_tls_params(url);
        let mut config: postgres::Config = rest
            .parse()
            .map_err(|e: postgres::Error| format!("not a PostgreSQL URL ({e})"))?;
        let mode = match &tls.sslmode {
            Some(v) => SslMode::parse(v)?,
            None => SslMode::Prefer,
        };
        let root_cert = match tls.sslrootcert.as_deref() {
            Some("system") => Some(RootCert::System),
            Some(file) => Some(RootCert::File(file.into())),
            None => ca_file.map(|f| RootCert::File(f.to_path_buf())),
        };
        if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && root_cert.is_none() {
            return Err(
                "sslmode=verify-ca and verify-full need a CA: sslrootcert in the URL or database.ca_file"
                    .into(),
            );
        }
        config.ssl_mode(match mode {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        });
        Ok(DbUrl {
            config,
            mode,
            root_cert,
        })
    }

    /// The connector that enforces the mode (reads the CA file).
    pub fn connector(&self) -> Result<MakeRustlsConnect, String> {
        let provider = crate::http::tls::provider();
        let roots = match &self.root_cert {
            None => None,
            Some(RootCert::System) => Some(RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            }),
            Some(RootCert::File(path)) => Some(roots_from(path)?),
        };
        let verifier = PgVerifier {
            chain: roots.map(|r| webpki(r, &provider)).transpose()?,
            check_name: self.mode == SslMode::VerifyFull,
            provider: provider.clone(),
        };
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }
}

/// `sslmode` and `sslrootcert`, taken out of a URL's query or a key=value string.
#[derive(Default)]
struct TlsParams {
    sslmode: Option<String>,
    sslrootcert: Option<String>,
}

fn split_tls_params(url: &str) -> (String, TlsParams) {
    let mut tls = TlsParams::default();
    let mut take = |key: &str, value: String| match key {
        "sslmode" => {
            tls.sslmode = Some(value);
            true
        }
        "sslrootcert" => {
            tls.sslrootcert = Some(value);
            true
        }
        _ => false,
    };
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((base, query)) = url.split_once('?') else {
            return (url.to_string(), tls);
        };
        let kept: Vec<&str> = query
            .split('&')
            .filter(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                let v = percent_decode_str(v).decode_utf8_lossy().into_owned();
                !take(k, v)
            })
            .collect();
        let rest = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        (rest, tls)
    } else {
        // key=value pairs; the two keys' values are plain words (paths without spaces).
        let kept: Vec<&str> = url
            .split_whitespace()
            .filter(|pair| match pair.split_once('=') {
                Some((k, v)) => !take(k.trim(), v.trim_matches('\'').to_string()),
                None => true,
            })
            .collect();
        (kept.join(" "), tls)
    }
}

fn roots_from(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let certs =
        CertificateDer::pem_file_iter(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("{}: not a PEM file ({e})", path.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("{}: no PEM certificate in it", path.display()));
    }
    Ok(roots)
}

fn webpki(
    roots: RootCertStore,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, String> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| e.to_string())
}

/// What of the server's certificate is checked: nothing (libpq's `prefer` and `require`
/// without a CA: encrypted, the server not authenticated), its chain (`verify-ca`, and
/// `prefer`/`require` with a CA), or its chain and host name (`verify-full`). The
/// handshake's signatures are checked against the presented certificate in every case.
#[derive(Debug)]
struct PgVerifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PgVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        // webpki checks the chain first, so a name error means the chain was good.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_settings_are_taken_out_of_both_url_forms() {
        let u = DbUrl::parse(
            "postgresql://u:pw@db.example:5433/scan?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x",
            None,
        )
        .unwrap();
        assert_eq!(u.mode, SslMode::VerifyFull);
        assert_eq!(u.root_cert, Some(RootCert::File("/etc/ca.pem".into())));
        assert_eq!(u.config.get_application_name(), Some("x"));
        assert_eq!(u.config.get_ssl_mode(), postgres::config::SslMode::Require);

        let u = DbUrl::parse(
            "host=db user=u sslmode=verify-ca sslrootcert=system dbname=scan",
            None,
        )
        .unwrap();
        assert_eq!(u.mode, SslMode::VerifyCa);
        assert_eq!(u.root_cert, Some(RootCert::System));
        assert_eq!(u.config.get_dbname(), Some("scan"));

        let u = DbUrl::parse("postgresql://u@db/scan", Some(Path::new("/ca.pem"))).unwrap();
        assert_eq!(u.mode, SslMode::Prefer);
        assert_eq!(u.root_cert, Some(RootCert::File("/ca.pem".into())));
        let u = DbUrl::parse("postgresql://u@db/scan?sslmode=disable", None).unwrap();
        assert_eq!(u.config.get_ssl_mode(), postgres::config::SslMode::Disable);
    }

    #[test]
    fn verifying_modes_need_a_ca_and_unknown_modes_are_refused() {
        for url in [
            "postgresql://u@db/x?sslmode=verify-full",
            "host=db sslmode=verify-ca",
            "postgresql://u@db/x?sslmode=allow",
            "postgresql://u@db/x?sslmode=bogus",
        ] {
            let err = DbUrl::parse(url, None).unwrap_err();
            assert!(err.contains("sslmode"), "{url}: {err}");
        }
        let err = DbUrl::parse("postgresql://u:s3cret@db/x?port=nope", None).unwrap_err();
        assert!(!err.contains("s3cret"), "{err}");
    }
}
