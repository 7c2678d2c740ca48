//! How scanstore and Elasticsearch trust each other: the credentials scanstore sends (an
//! API key, or a user and password, as the `Authorization` header of every request) and
//! the certificate authorities it accepts for an `https://` cluster (the public web roots,
//! or the PEM bundle of `elasticsearch.ca_file`, such as the CA an Elasticsearch 8 node
//! generates). Verification is always on. Secrets stay in `Secret`s, so no log line or
//! error text can carry them.

use std::path::Path;

use base64::Engine;
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

#[cfg(test)]
mod tests {
    use super::*;

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
