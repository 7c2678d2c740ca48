//! The server's own TLS: its certificate and key read from PEM files, served through a
//! resolver that [`ServerTls::reload`] swaps (on SIGHUP) so a renewed certificate needs no
//! restart; a file that fails to load leaves the one in use in place.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The PEM files `server.tls_cert` and `server.tls_key` name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The one crypto provider scanstore's TLS uses (the one its HTTP client uses too).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsFiles {
    /// Reads the certificate chain and its key, checking that they belong together. The
    /// error names the file and the problem, never key material.
    pub fn load(&self) -> Result<Arc<CertifiedKey>, String> {
        let cert_pem = read(&self.cert)?;
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{}: not a PEM certificate chain ({e})", self.cert.display()))?;
        if chain.is_empty() {
            return Err(format!("{}: no PEM certificate in it", self.cert.display()));
        }
        let key_pem = read(&self.key)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|_| format!("{}: no PEM private key in it", self.key.display()))?;
        CertifiedKey::from_der(chain, key, &provider())
            .map(Arc::new)
            .map_err(|e| {
                format!(
                    "{} and {}: not a certificate and its key ({e})",
                    self.cert.display(),
                    self.key.display()
                )
            })
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The certificate in use, swapped whole by a reload.
struct Current(RwLock<Arc<CertifiedKey>>);

impl fmt::Debug for Current {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Current")
    }
}

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // A poisoned lock still holds a whole certificate: a swap cannot be half done.
        Some(match self.0.read() {
            Ok(cert) => cert.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        })
    }
}

/// The server's TLS configuration and the files it reloads from.
pub struct ServerTls {
    files: TlsFiles,
    current: Arc<Current>,
    config: Arc<rustls::ServerConfig>,
}

impl ServerTls {
    pub fn new(files: TlsFiles) -> Result<ServerTls, String> {
        let current = Arc::new(Current(RwLock::new(files.load()?)));
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        Ok(ServerTls {
            files,
            current,
            config: Arc::new(config),
        })
    }

    /// The rustls configuration to serve with; it follows reloads.
    pub fn config(&self) -> Arc<rustls::ServerConfig> {
        self.config.clone()
    }

    /// Reads the files again and serves the new certificate to every later handshake.
    pub fn reload(&self) -> Result<(), String> {
        let fresh = self.files.load()?;
        match self.current.0.write() {
            Ok(mut cert) => *cert = fresh,
            Err(poisoned) => *poisoned.into_inner() = fresh,
        }
        Ok(())
    }
}
