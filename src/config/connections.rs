//! How scanstore reaches what it depends on, checked before any range: the database URL and
//! its CA, the cluster's URL, credentials and CAs, the server's TLS files, and that a file
//! holding a secret is not world-readable.

use std::path::{Path, PathBuf};

use super::{
    refuse, validate_index_prefix, ConfigError, RawConfig, RawDatabase, RawElasticsearch,
    ENV_DATABASE_URL, ENV_ES_API_KEY, ENV_ES_PASSWORD, ENV_ES_URL,
};
use crate::db::tls::DbUrl;
use crate::es::access::{self, EsAuth, Fingerprint};
use crate::http::tls::TlsFiles;
use crate::telemetry::secret::Secret;
use ureq::tls::RootCerts;

/// A configuration file that holds a secret (a database URL with a password) must not be
/// readable by every local user: start-up is refused, naming the file, its mode and the fix.
/// Group-readable files (`0640`, root:scanstore) are fine; so is a world-readable file
/// without a password (the password can come from `$SCANSTORE_DATABASE_URL`).
pub fn check_secret_permissions(path: &Path, raw: &RawConfig) -> Result<(), ConfigError> {
    let secret = if raw.database.url.as_deref().is_some_and(url_has_password) {
        format!("database.url contains a password (or move the URL to ${ENV_DATABASE_URL})")
    } else if raw.elasticsearch.api_key.is_some() {
        format!("it holds elasticsearch.api_key (or move the key to ${ENV_ES_API_KEY})")
    } else {
        return Ok(());
    };
    let mode = file_mode(path).unwrap_or(0);
    if mode & 0o004 != 0 {
        return Err(refuse(
            "config file",
            format!("{} (mode {:04o})", path.display(), mode & 0o7777),
            format!(
                "not world-readable while {secret}: chmod o-r {}",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// True when a postgres URL or key=value string carries a password.
pub fn url_has_password(url: &str) -> bool {
    DbUrl::parse(url, None)
        .map(|u| u.config.get_password().is_some_and(|p| !p.is_empty()))
        .unwrap_or(false)
}

#[cfg(unix)]
fn file_mode(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).ok().map(|m| m.permissions().mode())
}

#[cfg(not(unix))]
fn file_mode(_: &Path) -> Option<u32> {
    None
}

/// Where the database is: the URL (`$SCANSTORE_DATABASE_URL` first) and its CA file.
pub(super) fn database_target(
    d: &RawDatabase,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(String, Option<PathBuf>), ConfigError> {
    let url = env(ENV_DATABASE_URL)
        .filter(|u| !u.is_empty())
        .or_else(|| d.url.clone())
        .ok_or_else(|| {
            refuse(
                "database.url",
                "(unset)",
                format!("a postgresql:// URL in the file or ${ENV_DATABASE_URL}"),
            )
        })?;
    if !(url.starts_with("postgres://")
        || url.starts_with("postgresql://")
        || url.contains("host="))
    {
        return Err(refuse(
            "database.url",
            "(hidden)",
            "a postgresql:// URL or a key=value connection string",
        ));
    }
    let ca_file = d.ca_file.as_ref().map(PathBuf::from);
    // The URL's TLS settings, and the CA file they would read, are checked now rather
    // than at the first connection.
    DbUrl::parse(&url, ca_file.as_deref())
        .and_then(|u| u.connector().map(|_| ()))
        .map_err(|why| refuse("database.url", "(hidden)", why))?;
    Ok((url, ca_file))
}

/// How the cluster is reached, checked before any range: its URL, credentials and CAs.
pub(super) struct EsAccess {
    pub(super) url: String,
    pub(super) auth: EsAuth,
    pub(super) ca_roots: Option<RootCerts>,
    pub(super) ca_fingerprint: Option<Fingerprint>,
}

/// `elasticsearch.url` (`$SCANSTORE_ES_URL` first), the index prefix, credentials and CAs.
pub(super) fn es_access(
    e: &RawElasticsearch,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<EsAccess, ConfigError> {
    let url = env(ENV_ES_URL)
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| e.url.clone());
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(refuse(
            "elasticsearch.url",
            &url,
            "an http:// or https:// URL",
        ));
    }
    validate_index_prefix(&e.index_prefix)?;
    let auth = es_auth(e.api_key.clone(), e.username.clone(), env)?;
    let ca_fingerprint = match &e.ca_fingerprint {
        Some(_) if e.ca_file.is_some() => {
            return Err(refuse(
                "elasticsearch.ca_fingerprint",
                "(set, with elasticsearch.ca_file)",
                "a CA file or a fingerprint, not both",
            ))
        }
        Some(_) if !url.starts_with("https://") => {
            return Err(refuse(
                "elasticsearch.ca_fingerprint",
                "(set)",
                "used with an https:// elasticsearch.url",
            ))
        }
        Some(text) => Some(
            text.parse::<Fingerprint>()
                .map_err(|why| refuse("elasticsearch.ca_fingerprint", text, why))?,
        ),
        None => None,
    };
    let ca_roots = match &e.ca_file {
        Some(path) => Some(access::ca_roots(Path::new(path)).map_err(|why| {
            refuse(
                "elasticsearch.ca_file",
                path,
                format!("a readable PEM bundle ({why})"),
            )
        })?),
        None => None,
    };
    Ok(EsAccess {
        url,
        auth,
        ca_roots,
        ca_fingerprint,
    })
}

/// `server.tls_cert` and `server.tls_key`: both or neither; they must load as a certificate
/// chain and its key, and the key must not be readable by every local user.
pub(super) fn server_tls(
    cert: Option<String>,
    key: Option<String>,
) -> Result<Option<TlsFiles>, ConfigError> {
    let files = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(cert), Some(key)) => TlsFiles {
            cert: cert.into(),
            key: key.into(),
        },
        (Some(_), None) => {
            return Err(refuse(
                "server.tls_key",
                "(unset)",
                "set with server.tls_cert",
            ))
        }
        (None, Some(_)) => {
            return Err(refuse(
                "server.tls_cert",
                "(unset)",
                "set with server.tls_key",
            ))
        }
    };
    let mode = file_mode(&files.key).unwrap_or(0);
    if mode & 0o004 != 0 {
        return Err(refuse(
            "server.tls_key",
            format!("{} (mode {:04o})", files.key.display(), mode & 0o7777),
            format!("not world-readable: chmod o-r {}", files.key.display()),
        ));
    }
    files.load().map_err(|why| {
        refuse(
            "server.tls_cert",
            files.cert.display(),
            format!("a PEM certificate chain and its key in server.tls_key ({why})"),
        )
    })?;
    Ok(Some(files))
}

/// The cluster's credentials: an API key (file or `$SCANSTORE_ES_API_KEY`), or a user
/// whose password comes from `$SCANSTORE_ES_PASSWORD` only; not both.
fn es_auth(
    file_key: Option<String>,
    username: Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<EsAuth, ConfigError> {
    let api_key = env(ENV_ES_API_KEY).filter(|k| !k.is_empty()).or(file_key);
    let password = env(ENV_ES_PASSWORD).filter(|p| !p.is_empty());
    match (api_key, username) {
        (Some(_), Some(_)) => Err(refuse(
            "elasticsearch.username",
            "(set, with an API key)",
            "an API key or a username, not both",
        )),
        (Some(key), None) => {
            let ok = !key.is_empty()
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+/=_-:".contains(&b));
            if !ok {
                return Err(refuse(
                    "elasticsearch.api_key",
                    "(hidden)",
                    "the encoded API key Elasticsearch prints (base64 text)",
                ));
            }
            Ok(EsAuth::ApiKey(Secret::new(key)))
        }
        (None, Some(username)) => {
            if username.is_empty() || username.contains(':') {
                return Err(refuse(
                    "elasticsearch.username",
                    &username,
                    "a user name without ':'",
                ));
            }
            let password = password.ok_or_else(|| {
                refuse(
                    "elasticsearch.username",
                    &username,
                    format!("a password in ${ENV_ES_PASSWORD}"),
                )
            })?;
            Ok(EsAuth::Basic {
                username,
                password: Secret::new(password),
            })
        }
        (None, None) if password.is_some() => Err(refuse(
            ENV_ES_PASSWORD,
            "(set)",
            "elasticsearch.username to go with it",
        )),
        (None, None) => Ok(EsAuth::None),
    }
}
