//! How the suite reaches Elasticsearch when security is on: with
//! `STORAGE_TEST_ES_SECURE=1` every emulator the suite starts serves HTTPS with a
//! certificate made for this run and requires an API key, and every scanstore and test
//! client is configured with that CA and key; against a real cluster
//! (`STORAGE_TEST_ES_URL`), `STORAGE_TEST_ES_API_KEY` and `STORAGE_TEST_ES_CA_FILE` give
//! its credentials and CA. With `STORAGE_TEST_SERVER_TLS=1` the in-process scanstore
//! servers serve HTTPS too. Certificates are made at test time by one CA per run, never
//! committed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The API key the secure emulator requires (the encoded form Elasticsearch prints).
pub const EMULATOR_API_KEY: &str = "c2NhbnN0b3JlLXRlc3Q6c2VjdXJlLW1vZGUta2V5";

/// What the suite's clients present to the cluster and trust it by.
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub api_key: Option<String>,
    pub ca_file: Option<PathBuf>,
}

/// The files a secure emulator serves with.
pub struct EmulatorTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// A certificate authority made for this test run.
pub struct TestCa {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
    /// Its certificate as a PEM file.
    pub pem: PathBuf,
}

impl TestCa {
    pub fn new(dir: &Path) -> TestCa {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
        std::fs::create_dir_all(dir).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Distinct names and the usages strict verifiers (OpenSSL's X509_STRICT, as
        // Python 3.13 sets it) require of a CA.
        params.distinguished_name = dn("scanstore test CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).unwrap();
        let pem = dir.join("ca.pem");
        std::fs::write(&pem, cert.pem()).unwrap();
        TestCa { cert, key, pem }
    }

    /// A certificate for 127.0.0.1 and localhost signed by this CA, as `name.pem` and
    /// `name.key` (private to its owner) in `dir`.
    pub fn issue(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        self.issue_for(dir, name, &["127.0.0.1", "localhost"])
    }

    /// As [`TestCa::issue`], for the names `sans` only.
    pub fn issue_for(&self, dir: &Path, name: &str, sans: &[&str]) -> (PathBuf, PathBuf) {
        std::fs::create_dir_all(dir).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let sans = sans.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut params = rcgen::CertificateParams::new(sans).unwrap();
        params.distinguished_name = dn("scanstore test server");
        params.use_authority_key_identifier_extension = true;
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let files = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&files.0, cert.pem()).unwrap();
        write_private(&files.1, key.serialize_pem().as_bytes());
        files
    }
}

fn dn(common_name: &str) -> rcgen::DistinguishedName {
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::CommonName, common_name);
    dn
}

/// The CA of this test run, which `support::server::http()` trusts.
pub fn suite_ca() -> &'static TestCa {
    static CA: OnceLock<TestCa> = OnceLock::new();
    CA.get_or_init(|| TestCa::new(&temp_dir("ca")))
}

/// A CA and a certificate for 127.0.0.1 and localhost signed by it, as PEM files in
/// `dir`: returns (ca.pem, server.pem, server.key).
pub fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let ca = TestCa::new(dir);
    let (cert, key) = ca.issue(dir, "server");
    (ca.pem, cert, key)
}

/// Writes a file only its owner can read.
pub fn write_private(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

/// A fresh directory under the system's temporary one.
pub fn temp_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "scanstore-{what}-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

/// The certificate and key in-process servers serve with, when `STORAGE_TEST_SERVER_TLS=1`.
pub fn server_tls() -> Option<&'static (PathBuf, PathBuf)> {
    static TLS: OnceLock<Option<(PathBuf, PathBuf)>> = OnceLock::new();
    TLS.get_or_init(|| {
        flag("STORAGE_TEST_SERVER_TLS").then(|| suite_ca().issue(&temp_dir("server-tls"), "server"))
    })
    .as_ref()
}

/// The certificate every emulator of this run serves with, in secure mode.
pub fn emulator_tls() -> Option<&'static EmulatorTls> {
    static TLS: OnceLock<Option<EmulatorTls>> = OnceLock::new();
    TLS.get_or_init(|| {
        flag("STORAGE_TEST_ES_SECURE").then(|| {
            let (cert, key) = suite_ca().issue(&temp_dir("es-tls"), "emulator");
            EmulatorTls {
                cert,
                key,
                ca: suite_ca().pem.clone(),
            }
        })
    })
    .as_ref()
}

/// How the suite's clients reach the suite's cluster.
pub fn suite_access() -> Access {
    let real = std::env::var("STORAGE_TEST_ES_URL").is_ok_and(|u| !u.is_empty());
    if real {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        return Access {
            api_key: var("STORAGE_TEST_ES_API_KEY"),
            ca_file: var("STORAGE_TEST_ES_CA_FILE").map(PathBuf::from),
        };
    }
    match emulator_tls() {
        Some(tls) => Access {
            api_key: Some(EMULATOR_API_KEY.into()),
            ca_file: Some(tls.ca.clone()),
        },
        None => Access::default(),
    }
}

impl Access {
    /// `[elasticsearch]` lines for a scanstore config file: the CA (the key goes through
    /// the environment, see [`Access::apply`]).
    pub fn toml(&self) -> String {
        match &self.ca_file {
            Some(ca) => format!("ca_file = {:?}\n", ca.display().to_string()),
            None => String::new(),
        }
    }

    /// Gives a scanstore child process the API key, as an operator would.
    pub fn apply(&self, cmd: &mut Command) {
        if let Some(key) = &self.api_key {
            cmd.env("SCANSTORE_ES_API_KEY", key);
        }
    }
}
