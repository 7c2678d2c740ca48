//! Elasticsearch with security on: the emulator, started with `--api-key` or
//! `--basic-auth`, answers every request without those credentials 401
//! `security_exception`, as a real cluster does; scanstore configured with them uploads
//! and publishes through it, and with wrong ones says `unauthorized` in `/readyz`, writes
//! nothing and never logs the secret. Over HTTPS (the emulator with `--tls-cert`, under a
//! CA made for the test) scanstore verifies the cluster against `elasticsearch.ca_file`,
//! and refuses it under any other CA. Those tests start their own emulators, so on a real
//! cluster (`STORAGE_TEST_ES_URL`) they skip, saying so; there the last test checks the
//! cluster's own security with the suite's API key and CA.

use std::path::Path;
use std::time::Duration;

use uuid::Uuid;

use crate::support::emulator::{emulator_only, Emulator, Es, Target};
use crate::support::logs;
use crate::support::scan::{self, endpoints, Batch};
use crate::support::secure::{
    certificates, emulator_tls, suite_access, temp_dir, Access, EmulatorTls,
};
use crate::support::server::{got, http};
use crate::support::stack::Stack;
use crate::support::{scan::t0, wait_for};
use scanstore::es::access::EsAuth;
use scanstore::telemetry::secret::Secret;

const KEY: &str = "VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw==";

fn stack(emulator: Emulator, auth: EsAuth) -> Stack {
    Stack::build(Target::Emulator(emulator), "port_scan", |cfg| {
        cfg.elasticsearch.auth = auth;
    })
}

/// Uploads and publishes one execution, and checks that no request was refused.
fn upload_and_publish(s: &Stack) {
    scan::upload_execution(s.base(), &s.scanner.token, s.execution(), 0, 20, 10, t0());
    let mut c = s.sql();
    wait_for("publication", Duration::from_secs(30), || {
        c.query_one(
            "SELECT processed_at IS NOT NULL FROM scan_projection_outbox WHERE execution_id = $1",
            &[&s.execution()],
        )
        .map(|r| r.get::<_, bool>(0))
        .unwrap_or(false)
    });
    let counted = s.observation_count();
    assert_eq!(counted, 20, "counted through the secured cluster");
    let log = s.emulator().requests(None, None);
    assert!(log.count > 0);
    let refused: Vec<_> = log.requests.iter().filter(|r| r.status == 401).collect();
    assert!(refused.is_empty(), "requests refused: {refused:?}");
    let readyz = got(http().get(format!("{}/readyz", s.base())).call());
    assert_eq!(readyz.status, 200, "{}", readyz.body);
}

#[test]
fn the_secured_emulator_refuses_requests_without_its_credentials() {
    if !emulator_only("the_secured_emulator_refuses_requests_without_its_credentials") {
        return;
    }
    let e = Emulator::start_with(&["--api-key", KEY]);
    let raw = e.es().raw("GET", "/", None, None);
    let schemes: Vec<&str> = raw
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("www-authenticate"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert!(schemes.contains(&"ApiKey"), "{schemes:?}");
    assert!(
        schemes.iter().any(|s| s.starts_with("Basic ")),
        "{schemes:?}"
    );
    let (status, body) = e.es().get("/");
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["type"], "security_exception");
    assert!(body["error"]["reason"]
        .as_str()
        .unwrap()
        .starts_with("missing authentication credentials"));
    // With the CA of a secure-mode run, if any.
    let ca_file = emulator_tls().map(|t| t.ca.clone());
    let with_key = |key: &str| {
        let access = Access {
            api_key: Some(key.into()),
            ca_file: ca_file.clone(),
        };
        Es::with_access(e.url(), &access).get("/")
    };
    let (status, body) = with_key("bm9wZQ==");
    assert_eq!(status, 401, "{body}");
    assert!(body["error"]["reason"]
        .as_str()
        .unwrap()
        .starts_with("unable to authenticate"));
    let (status, body) = with_key(KEY);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["tagline"], "You Know, for Search");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn scanstore_works_through_an_api_key_and_through_basic_authentication() {
    if !emulator_only("scanstore_works_through_an_api_key_and_through_basic_authentication") {
        return;
    }
    let s = stack(
        Emulator::start_with(&["--api-key", KEY]),
        EsAuth::ApiKey(Secret::new(KEY.into())),
    );
    upload_and_publish(&s);
    let s = stack(
        Emulator::start_with(&["--basic-auth", "scanstore:s3cret-Pa55"]),
        EsAuth::Basic {
            username: "scanstore".into(),
            password: Secret::new("s3cret-Pa55".into()),
        },
    );
    upload_and_publish(&s);
    let text = logs::all();
    assert!(
        !text.contains(KEY) && !text.contains("s3cret-Pa55"),
        "a secret was logged"
    );
}

#[test]
#[ignore = "needs PostgreSQL"]
fn wrong_credentials_are_unauthorized_and_write_nothing() {
    if !emulator_only("wrong_credentials_are_unauthorized_and_write_nothing") {
        return;
    }
    let wrong = "d3Jvbmc6a2V5";
    let s = stack(
        Emulator::start_with(&["--api-key", KEY]),
        EsAuth::ApiKey(Secret::new(wrong.into())),
    );
    let readyz = got(http().get(format!("{}/readyz", s.base())).call());
    assert_eq!(readyz.status, 503);
    assert_eq!(readyz.body["elasticsearch"], "unauthorized");
    let b = Batch::main(Uuid::new_v4(), 0, endpoints(0, 2, t0()));
    let r = scan::post(s.base(), &s.scanner.token, s.execution(), &b);
    assert!(r.status >= 500, "{}", r.body);
    assert_eq!(s.receipts(), vec![("main".into(), 0, "pending".into())]);
    let writes = s.emulator().requests(Some("POST"), Some("/_bulk"));
    assert!(
        writes.requests.iter().all(|r| r.status == 401),
        "{:?}",
        writes.requests
    );
    assert!(!logs::all().contains(wrong), "the key was logged");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn over_https_the_cluster_is_verified_against_the_configured_ca_only() {
    if !emulator_only("over_https_the_cluster_is_verified_against_the_configured_ca_only") {
        return;
    }
    let dir = temp_dir("tls");
    let (ca, cert, key) = certificates(&dir);
    let (other_ca, _, _) = certificates(&dir.join("other"));
    let tls = EmulatorTls {
        cert,
        key,
        ca: ca.clone(),
    };
    let emulator = Emulator::start_tls(&["--api-key", KEY], &tls);
    let url = emulator.url().to_string();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let https = |ca_file: Option<&Path>| {
        let roots = ca_file.map(|f| scanstore::es::access::ca_roots(f).unwrap());
        let url = url.clone();
        move |cfg: &mut scanstore::config::Config| {
            cfg.elasticsearch.url = url;
            cfg.elasticsearch.auth = EsAuth::ApiKey(Secret::new(KEY.into()));
            cfg.elasticsearch.ca_roots = roots;
        }
    };
    let s = Stack::build(Target::Emulator(emulator), "port_scan", https(Some(&ca)));
    upload_and_publish(&s);

    // Another CA, or the public web roots: the cluster is not trusted, nothing is sent.
    for ca_file in [Some(other_ca.as_path()), None] {
        let before = s.emulator().requests(None, None).count;
        let cfg = {
            let mut cfg = crate::support::server::config(&s.db.url, &url);
            https(ca_file)(&mut cfg);
            cfg
        };
        let other = crate::support::server::TestServer::start(cfg);
        let readyz = got(http().get(format!("{}/readyz", other.base)).call());
        assert_eq!(readyz.status, 503, "{}", readyz.body);
        assert_eq!(readyz.body["elasticsearch"], "unavailable");
        assert_eq!(
            s.emulator().requests(None, None).count,
            before,
            "a request got through"
        );
    }
    let refused = logs::lines_with(&["event=ReadinessFailed", "component=elasticsearch"]);
    assert!(
        refused
            .iter()
            .any(|l| l.contains("UnknownIssuer") || l.contains("certificate")),
        "{refused:#?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Elasticsearch 8 prints its CA's SHA-256 fingerprint at first start and sends that CA in
/// its chain: `elasticsearch.ca_fingerprint` trusts exactly it, with no CA file.
#[test]
#[ignore = "needs PostgreSQL"]
fn a_pinned_ca_fingerprint_trusts_that_ca_in_the_clusters_chain_and_nothing_else() {
    if !emulator_only(
        "a_pinned_ca_fingerprint_trusts_that_ca_in_the_clusters_chain_and_nothing_else",
    ) {
        return;
    }
    use scanstore::es::access::Fingerprint;
    let dir = temp_dir("pin");
    let (ca, cert, key) = certificates(&dir);
    // The served chain: the node's certificate, then the CA, as ES 8 sends it.
    let chain = dir.join("chain.pem");
    let pem = |p: &Path| std::fs::read_to_string(p).unwrap();
    std::fs::write(&chain, pem(&cert) + &pem(&ca)).unwrap();
    let ca_der = {
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        CertificateDer::from_pem_file(&ca).unwrap()
    };
    let pin = Fingerprint::of(&ca_der);
    let tls = EmulatorTls {
        cert: chain,
        key,
        ca: ca.clone(),
    };
    let emulator = Emulator::start_tls(&["--api-key", KEY], &tls);
    let url = emulator.url().to_string();
    let pinned = |pin: Fingerprint| {
        let url = url.clone();
        move |cfg: &mut scanstore::config::Config| {
            cfg.elasticsearch.url = url;
            cfg.elasticsearch.auth = EsAuth::ApiKey(Secret::new(KEY.into()));
            cfg.elasticsearch.ca_roots = None;
            cfg.elasticsearch.ca_fingerprint = Some(pin);
        }
    };
    let s = Stack::build(Target::Emulator(emulator), "port_scan", pinned(pin));
    upload_and_publish(&s);

    // Another fingerprint: nothing is sent, readiness says why.
    let before = s.emulator().requests(None, None).count;
    let other: Fingerprint = "00".repeat(32).parse().unwrap();
    let mut cfg = crate::support::server::config(&s.db.url, &url);
    pinned(other)(&mut cfg);
    let server = crate::support::server::TestServer::start(cfg);
    let readyz = got(http().get(format!("{}/readyz", server.base)).call());
    assert_eq!(readyz.status, 503, "{}", readyz.body);
    assert_eq!(readyz.body["elasticsearch"], "unavailable");
    assert_eq!(s.emulator().requests(None, None).count, before);
    assert!(
        logs::lines_with(&["event=ReadinessFailed", "ca_fingerprint"])
            .iter()
            .any(|l| l.contains("pinned fingerprint"))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The suite's cluster refuses a request without its API key or with a wrong one, takes the
/// suite's key, and over HTTPS is trusted through the suite's CA file and not through the
/// public web roots. On a real cluster (`STORAGE_TEST_ES_URL`) what was not given (a key,
/// HTTPS with a CA) is not checked, and said so; without the variable an emulator with
/// TLS and a key stands in.
#[test]
fn the_clusters_security_refuses_requests_without_the_suites_key_and_ca() {
    let real = std::env::var("STORAGE_TEST_ES_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let dir = temp_dir("suite-auth");
    let (url, access, _emulator) = match real {
        Some(url) => (url, suite_access(), None),
        None => {
            let (ca, cert, key) = certificates(&dir);
            let tls = EmulatorTls {
                cert,
                key,
                ca: ca.clone(),
            };
            let e = Emulator::start_tls(&["--api-key", KEY], &tls);
            let access = Access {
                api_key: Some(KEY.into()),
                ca_file: Some(ca),
            };
            (e.url().to_string(), access, Some(e))
        }
    };
    let mut checked = Vec::new();
    if access.api_key.is_some() {
        for key in [None, Some("bm9wZTpub3Bl".to_string())] {
            let other = Access {
                api_key: key.clone(),
                ca_file: access.ca_file.clone(),
            };
            let (status, body) = Es::with_access(&url, &other).get("/");
            assert_eq!(status, 401, "key {key:?}: {body}");
        }
        checked.push("API key");
    } else {
        println!("SKIP the API-key check: no STORAGE_TEST_ES_API_KEY was given");
    }
    let (status, body) = Es::with_access(&url, &access).get("/");
    assert_eq!(status, 200, "{body}");
    assert!(body["version"]["number"].is_string(), "{body}");
    match &access.ca_file {
        Some(_) if url.starts_with("https://") => {
            // The public web roots (ureq's default) do not trust the cluster.
            let untrusted = ureq::get(url.as_str()).call();
            assert!(untrusted.is_err(), "trusted without the CA file");
            checked.push("TLS verified by the CA file");
        }
        _ => println!("SKIP the TLS check: no https:// URL with STORAGE_TEST_ES_CA_FILE"),
    }
    let _ = std::fs::remove_dir_all(&dir);
    if checked.is_empty() {
        println!(
            "SKIP the_clusters_security_refuses_requests_without_the_suites_key_and_ca: \
             neither an API key nor HTTPS with a CA was given"
        );
    }
}
