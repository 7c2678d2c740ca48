//! How scanstore and Elasticsearch trust each other: the credentials scanstore sends (an
//! API key, or a user and password, as the `Authorization` header of every request) and
//! the certificate authorities it accepts for an `https://` cluster (the public web roots,
//! or the PEM bundle of `elasticsearch.ca_file`, such as the CA an Elasticsearch 8 node
//! generates, or the CA in the cluster's own chain whose SHA-256 fingerprint
//! `elasticsearch.ca_fingerprint` pins, as Elasticsearch 8 prints it at first start).
//! Verification is always on. Secrets stay in `Secret`s, so no log line or error text can
//! carry them.

use std::fmt;
use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};
use ureq::tls::{Certificate, PemItem, RootCerts};

use crate::telemetry::secret::Secret;

/// The credentials configured for the cluster.
#[derive(Debug, Clone, Default)]
pub enum EsAuth {
    /// A cluster without security (or the emulator in its default mode).
    #[default]
    None,
    /// `elasticsearch.api_key`: the encoded form Elasticsearch prints (base64 of `id:key`).
    ApiKey(Secret<String>),
    /// `elasticsearch.username` with its password.
    Basic {
        username: String,
        password: Secret<String>,
    },
}

impl EsAuth {
    /// The `Authorization` header value, if any.
    pub fn header(&self) -> Option<Secret<String>> {
        match self {
            EsAuth::None => None,
            EsAuth::ApiKey(key) => Some(Secret::new(format!("ApiKey {}", key.expose()))),
            EsAuth::Basic { username, password } => {
                let pair = format!("{username}:{}", password.expose());
                let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
                Some(Secret::new(format!("Basic {encoded}")))
            }
        }
    }

    /// What kind of credentials these are, for logs (never the credentials).
    pub fn kind(&self) -> &'static str {
        match self {
            EsAuth::None => "none",
            EsAuth::ApiKey(_) => "api_key",
            EsAuth::Basic { .. } => "basic",
        }
    }
}

/// The CA certificates of a PEM bundle, as the roots to verify the cluster against.
pub fn ca_roots(path: &Path) -> Result<RootCerts, String> {
    let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut certs: Vec<Certificate<'static>> = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => return Err(format!("{}: not a PEM file ({e})", path.display())),
        }
    }
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in it", path.display()));
    }
    Ok(RootCerts::new_with_certs(&certs))
}

/// `elasticsearch.ca_fingerprint`: the SHA-256 of a CA certificate's DER encoding.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint([u8; 32]);

impl FromStr for Fingerprint {
    type Err = String;

    /// 64 hex digits, in either case, with or without colons between the bytes (ES prints
    /// `8B:0B:…`, `openssl x509 -fingerprint -sha256` the same).
    fn from_str(s: &str) -> Result<Fingerprint, String> {
        let digits: String = s.trim().chars().filter(|c| *c != ':').collect();
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(&digits, &mut bytes)
            .map_err(|_| "64 hex digits (colons between bytes allowed)".to_string())?;
        Ok(Fingerprint(bytes))
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode_upper(self.0))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

impl Fingerprint {
    pub fn of(der: &[u8]) -> Fingerprint {
        Fingerprint(Sha256::digest(der).into())
    }
}

/// The pinned CA, taken from the chain the cluster at `url` (`https://host:port`)
/// presents: the certificate whose SHA-256 is `pin`, as the one root every later
/// connection verifies the cluster against (chain and host name). Only the handshake's
/// certificates are read; nothing is sent over this connection.
pub fn pinned_root(url: &str, pin: Fingerprint, timeout: Duration) -> Result<RootCerts, String> {
    let uri: ureq::http::Uri = url.parse().map_err(|_| "not a URL".to_string())?;
    if uri.scheme_str() != Some("https") {
        return Err("ca_fingerprint needs an https:// URL".into());
    }
    let host = uri.host().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(443);
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))?;
    let mut sock = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    sock.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;

    let capture = Arc::new(ChainCapture::default());
    let config = rustls::ClientConfig::builder_with_provider(crate::http::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(capture.clone())
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
    let mut conn =
        rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    // Ends with the capture's refusal (or an I/O error) once the server's chain is in.
    while conn.is_handshaking() {
        if conn.complete_io(&mut sock).is_err() {
            break;
        }
    }
    let _ = sock.flush();
    let chain = capture.chain.lock().map(|c| c.clone()).unwrap_or_default();
    if chain.is_empty() {
        return Err("the cluster presented no certificate".into());
    }
    let found = chain
        .iter()
        .find(|c| Fingerprint::of(c) == pin)
        .ok_or_else(|| {
            format!(
                "no certificate of the {} the cluster presented has the pinned fingerprint",
                chain.len()
            )
        })?;
    Ok(RootCerts::new_with_certs(&[Certificate::from_der(
        found.as_ref(),
    )
    .to_owned()]))
}

/// Records the certificates a server presents and refuses the handshake: used only to
/// read the chain, never to trust it.
#[derive(Debug, Default)]
struct ChainCapture {
    chain: Mutex<Vec<CertificateDer<'static>>>,
}

impl ServerCertVerifier for ChainCapture {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Ok(mut chain) = self.chain.lock() {
            chain.push(end_entity.clone().into_owned());
            chain.extend(intermediates.iter().map(|c| c.clone().into_owned()));
        }
        Err(rustls::Error::General("chain read for pinning".into()))
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("chain read for pinning".into()))
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("chain read for pinning".into()))
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        crate::http::tls::provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_read_as_elasticsearch_and_openssl_print_them() {
        let der = b"not really a certificate";
        let pin = Fingerprint::of(der);
        let plain = pin.to_string();
        assert_eq!(plain.len(), 64);
        let colons = plain
            .as_bytes()
            .chunks(2)
            .map(|p| std::str::from_utf8(p).unwrap())
            .collect::<Vec<_>>()
            .join(":");
        for text in [plain.clone(), plain.to_lowercase(), colons] {
            assert_eq!(text.parse::<Fingerprint>().unwrap(), pin, "{text}");
        }
        for bad in [
            "",
            "abc",
            &plain[..62],
            &format!("{plain}00"),
            &plain.replace('A', "G"),
        ] {
            if bad != plain {
                assert!(bad.parse::<Fingerprint>().is_err(), "{bad}");
            }
        }
    }

    #[test]
    fn headers_are_what_elasticsearch_expects() {
        let key = EsAuth::ApiKey(Secret::new(
            "VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw==".into(),
        ));
        assert_eq!(
            key.header().unwrap().expose(),
            "ApiKey VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw=="
        );
        let basic = EsAuth::Basic {
            username: "elastic".into(),
            password: Secret::new("changeme".into()),
        };
        assert_eq!(
            basic.header().unwrap().expose(),
            "Basic ZWxhc3RpYzpjaGFuZ2VtZQ=="
        );
        assert!(EsAuth::None.header().is_none());
        assert!(!format!("{basic:?}").contains("changeme"));
    }
}
