//! The configuration's checks: defaults, ranges, moved keys, secrets and TLS files.

use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

fn base() -> RawConfig {
    let mut raw = RawConfig::default();
    raw.database.url = Some("postgresql://u@127.0.0.1/db".into());
    raw
}

fn parse(toml_text: &str) -> Result<Config, ConfigError> {
    let mut raw: RawConfig = toml::from_str(toml_text).map_err(|e| refuse("toml", e, ""))?;
    if raw.database.url.is_none() {
        raw.database.url = Some("postgresql://u@127.0.0.1/db".into());
    }
    Config::from_raw(raw, &no_env)
}

/// Sets one key of the table by its dotted name.
fn with(key: &str, value: u64) -> Result<Config, ConfigError> {
    let (section, field) = key.split_once('.').unwrap_or(("", key));
    let mut text = format!("[{section}]\n{field} = {value}\n");
    // Keep the heartbeat rule out of the way when testing the lease range alone.
    if key == "projection.lease_seconds" {
        text.push_str("heartbeat_seconds = 1\n");
    }
    if key == "projection.heartbeat_seconds" {
        text.push_str("lease_seconds = 3600\n");
    }
    parse(&text)
}

#[test]
fn defaults_are_valid() {
    let c = Config::from_raw(base(), &no_env).unwrap();
    assert_eq!(c.projection.page_size, 1000);
    assert_eq!(c.elasticsearch.bulk_max_bytes, 5_242_880);
    assert_eq!(c.projection.pages_per_tick, 4);
    assert_eq!(c.projection.lease, Duration::from_secs(120));
    assert_eq!(c.projection.heartbeat, Duration::from_secs(20));
    assert_eq!(c.projection.workers, 1);
    assert_eq!(c.projection.nice, 0);
    assert!(c.deprecated.is_empty());
}

#[test]
fn every_range_accepts_its_edges_and_refuses_just_outside() {
    for (key, lo, hi, _) in RANGES {
        assert!(with(key, *lo).is_ok(), "{key} = {lo} should be accepted");
        assert!(with(key, *hi).is_ok(), "{key} = {hi} should be accepted");
        let above = with(key, hi + 1).unwrap_err();
        assert_eq!(above.key, *key);
        assert_eq!(above.value, (hi + 1).to_string());
        if *lo > 0 {
            let below = with(key, lo - 1).unwrap_err();
            assert_eq!(below.key, *key, "{key} = {} should be refused", lo - 1);
        }
    }
}

#[test]
fn page_size_2000_ok_2001_rejected() {
    assert!(with("projection.page_size", 2000).is_ok());
    let err = with("projection.page_size", 2001).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid configuration: projection.page_size = 2001 (allowed: 1..=2000)"
    );
}

#[test]
fn bulk_bytes_edges() {
    assert!(with("elasticsearch.bulk_max_bytes", 65_536).is_ok());
    assert!(with("elasticsearch.bulk_max_bytes", 65_535).is_err());
    assert!(with("elasticsearch.bulk_max_bytes", 16_777_216).is_ok());
    assert!(with("elasticsearch.bulk_max_bytes", 16_777_217).is_err());
}

#[test]
fn index_shapes_default_to_what_was_created_before_they_were_keys() {
    let c = Config::from_raw(base(), &no_env).unwrap();
    let one = IndexShape {
        shards: 1,
        replicas: 1,
        refresh_interval: None,
    };
    assert_eq!(
        c.elasticsearch.indices,
        IndexShapes {
            facts: one,
            execution_endpoints: one,
            assets: one
        }
    );
}

#[test]
fn index_shapes_are_read_per_family() {
    let c = parse(
        "[elasticsearch]\nfacts_shards = 6\nfacts_replicas = 0\n\
         facts_refresh_interval_ms = 30000\nexecution_endpoints_shards = 12\n\
         execution_endpoints_replicas = 2\nassets_shards = 3\nassets_replicas = 1\n",
    )
    .unwrap();
    let i = c.elasticsearch.indices;
    assert_eq!(
        (i.facts.shards, i.facts.replicas, i.facts.refresh_interval),
        (6, 0, Some(Duration::from_secs(30)))
    );
    assert_eq!(
        (i.execution_endpoints.shards, i.execution_endpoints.replicas),
        (12, 2)
    );
    assert_eq!((i.assets.shards, i.assets.replicas), (3, 1));
    // Only the facts have a refresh interval of their own.
    assert_eq!(
        (
            i.execution_endpoints.refresh_interval,
            i.assets.refresh_interval
        ),
        (None, None)
    );
}

#[test]
fn shards_1024_ok_1025_rejected_and_zero_shards_rejected() {
    for family in ["facts", "execution_endpoints", "assets"] {
        let key = format!("elasticsearch.{family}_shards");
        assert!(with(&key, 1024).is_ok(), "{key}");
        let err = with(&key, 1025).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("invalid configuration: {key} = 1025 (allowed: 1..=1024)")
        );
        assert_eq!(with(&key, 0).unwrap_err().key, key);
        let replicas = format!("elasticsearch.{family}_replicas");
        assert!(with(&replicas, 0).is_ok() && with(&replicas, 32).is_ok());
        assert_eq!(with(&replicas, 33).unwrap_err().key, replicas);
    }
}

#[test]
fn facts_refresh_interval_0_is_the_clusters_default_and_an_hour_is_the_most() {
    let refresh = |ms| {
        with("elasticsearch.facts_refresh_interval_ms", ms)
            .map(|c| c.elasticsearch.indices.facts.refresh_interval)
    };
    assert_eq!(refresh(0), Ok(None));
    assert_eq!(refresh(1), Ok(Some(Duration::from_millis(1))));
    assert_eq!(refresh(3_600_000), Ok(Some(Duration::from_secs(3600))));
    assert_eq!(
        refresh(3_600_001).unwrap_err().allowed,
        "0..=3600000 ms".to_string()
    );
}

#[test]
fn a_tombstone_outlives_the_oldest_observation_an_upload_may_carry() {
    let msg = parse("[retention]\ntombstone_days = 31\n")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("upload.max_observation_age_days (31)"),
        "{msg}"
    );
    assert!(parse("[retention]\ntombstone_days = 32\n").is_ok());
    assert!(parse("[retention]\ntombstone_days = 0\n").is_ok());
    let longer = "[upload]\nmax_observation_age_days = 400\n[retention]\ntombstone_days = 365\n";
    assert!(parse(longer).is_err());
}

#[test]
fn heartbeat_must_fit_three_times_in_lease() {
    let err = parse("[projection]\nheartbeat_seconds = 50\nlease_seconds = 120\n").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("projection.heartbeat_seconds"), "{msg}");
    assert!(msg.contains("projection.lease_seconds"), "{msg}");
    assert!(parse("[projection]\nheartbeat_seconds = 40\nlease_seconds = 120\n").is_ok());
    assert!(parse("[projection]\nheartbeat_seconds = 41\nlease_seconds = 120\n").is_err());
}

#[test]
fn the_old_projection_keys_under_elasticsearch_still_work_for_one_release() {
    for (old, new) in DEPRECATED_KEYS {
        let (_, old_field) = old.split_once('.').unwrap();
        let (_, new_field) = new.split_once('.').unwrap();
        let value = match *new {
            "elasticsearch.bulk_max_bytes" => 65_536,
            "projection.lease_seconds" => 3600,
            _ => 1,
        };
        let c = parse(&format!("[elasticsearch]\n{old_field} = {value}\n")).unwrap();
        assert_eq!(c.deprecated, vec![(*old, *new)], "{old}");
        let (new_section, _) = new.split_once('.').unwrap();
        let same = parse(&format!("[{new_section}]\n{new_field} = {value}\n")).unwrap();
        assert_eq!(
            format!("{:?} {}", c.projection, c.elasticsearch.bulk_max_bytes),
            format!(
                "{:?} {}",
                same.projection, same.elasticsearch.bulk_max_bytes
            ),
            "{old} means {new}"
        );
        // Both names at once is ambiguous.
        let both = if new_section == "elasticsearch" {
            format!("[elasticsearch]\n{old_field} = {value}\n{new_field} = {value}\n")
        } else {
            format!("[elasticsearch]\n{old_field} = {value}\n[projection]\n{new_field} = {value}\n")
        };
        let both = parse(&both).unwrap_err();
        assert_eq!(both.key, *new);
    }
    // Old names are range-checked under the new name.
    let err = parse("[elasticsearch]\nprojection_page_size = 2001\n").unwrap_err();
    assert_eq!(err.key, "projection.page_size");
}

#[test]
fn unknown_keys_are_refused() {
    assert!(toml::from_str::<RawConfig>("[elasticsearch]\nprojection_page_sise = 10\n").is_err());
    assert!(toml::from_str::<RawConfig>("[nonsense]\n").is_err());
}

#[test]
fn elasticsearch_credentials_are_a_key_or_a_user_with_its_password_from_the_environment() {
    let with = |file: &str, vars: &[(&str, &str)]| {
        let mut raw: RawConfig = toml::from_str(file).unwrap();
        raw.database.url = Some("postgresql://u@127.0.0.1/db".into());
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_raw(raw, &|name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    };
    let kind = |c: Result<Config, ConfigError>| c.map(|c| c.elasticsearch.auth.kind());
    assert_eq!(kind(with("", &[])), Ok("none"));
    assert_eq!(
        kind(with("[elasticsearch]\napi_key = \"aWQ6a2V5\"\n", &[])),
        Ok("api_key")
    );
    assert_eq!(
        kind(with("", &[(ENV_ES_API_KEY, "aWQ6a2V5")])),
        Ok("api_key")
    );
    let basic = with(
        "[elasticsearch]\nusername = \"scanstore\"\n",
        &[(ENV_ES_PASSWORD, "pw")],
    )
    .unwrap();
    assert_eq!(
        basic.elasticsearch.auth.header().unwrap().expose(),
        "Basic c2NhbnN0b3JlOnB3"
    );
    assert!(
        !format!("{basic:?}").contains("pw\""),
        "the password printed"
    );
    for (file, vars, key) in [
        (
            "[elasticsearch]\nusername = \"scanstore\"\n",
            vec![],
            "elasticsearch.username",
        ),
        ("", vec![(ENV_ES_PASSWORD, "pw")], ENV_ES_PASSWORD),
        (
            "[elasticsearch]\nusername = \"s\"\napi_key = \"aWQ6a2V5\"\n",
            vec![(ENV_ES_PASSWORD, "pw")],
            "elasticsearch.username",
        ),
        (
            "[elasticsearch]\napi_key = \"not a key\"\n",
            vec![],
            "elasticsearch.api_key",
        ),
    ] {
        let err = with(file, &vars).unwrap_err();
        assert_eq!(err.key, key, "{file} {vars:?}");
        assert!(!err.to_string().contains("aWQ6a2V5") && !err.to_string().contains("pw "));
    }
}

#[test]
fn a_ca_fingerprint_is_64_hex_digits_for_an_https_cluster_without_a_ca_file() {
    let pin = "8B:0B:".repeat(16);
    let pin = &pin[..pin.len() - 1];
    let ok = parse(&format!(
        "[elasticsearch]\nurl = \"https://es:9200\"\nca_fingerprint = \"{pin}\"\n"
    ))
    .unwrap();
    assert_eq!(
        ok.elasticsearch.ca_fingerprint.unwrap().to_string(),
        "8B0B".repeat(16)
    );
    for file in [
        "url = \"https://es:9200\"\nca_fingerprint = \"8B:0B\"\n".to_string(),
        format!("url = \"http://es:9200\"\nca_fingerprint = \"{pin}\"\n"),
        format!("url = \"https://es:9200\"\nca_fingerprint = \"{pin}\"\nca_file = \"/x\"\n"),
    ] {
        let err = parse(&format!("[elasticsearch]\n{file}")).unwrap_err();
        assert_eq!(err.key, "elasticsearch.ca_fingerprint", "{file}");
    }
}

#[test]
fn server_tls_needs_a_certificate_and_its_private_key() {
    let dir = std::env::temp_dir().join(format!("scanstore-tls-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str, mode: u32| {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p.display().to_string()
    };
    let make = || {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (cert, key) = make();
    let (_, other_key) = make();
    let cert = write("cert.pem", &cert, 0o644);
    let key_file = write("key.pem", &key, 0o600);
    let tls = |c: &str, k: &str| format!("[server]\ntls_cert = {c:?}\ntls_key = {k:?}\n");
    let ok = parse(&tls(&cert, &key_file)).unwrap();
    assert!(ok.server.tls.is_some());
    assert!(parse("").unwrap().server.tls.is_none());

    let open_key = write("open.pem", &key, 0o644);
    let wrong_key = write("wrong.pem", &other_key, 0o600);
    for (file, refused) in [
        (format!("[server]\ntls_cert = {cert:?}\n"), "server.tls_key"),
        (
            format!("[server]\ntls_key = {key_file:?}\n"),
            "server.tls_cert",
        ),
        (tls(&cert, &open_key), "server.tls_key"),
        (tls(&cert, &wrong_key), "server.tls_cert"),
        (tls(&key_file, &key_file), "server.tls_cert"),
        (
            tls(&cert, &dir.join("none").display().to_string()),
            "server.tls_cert",
        ),
    ] {
        let err = parse(&file).unwrap_err();
        assert_eq!(err.key, refused, "{file}");
        assert!(!err.to_string().contains("PRIVATE KEY"), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_ca_file_must_hold_pem_certificates() {
    let p = std::env::temp_dir().join(format!("scanstore-ca-{}.pem", std::process::id()));
    for (text, missing) in [(Some("not a certificate\n"), false), (None, true)] {
        if let Some(t) = text {
            std::fs::write(&p, t).unwrap();
        } else {
            let _ = std::fs::remove_file(&p);
        }
        let file = format!("[elasticsearch]\nca_file = {:?}\n", p.display().to_string());
        let err = parse(&file).unwrap_err();
        assert_eq!(err.key, "elasticsearch.ca_file", "missing: {missing}");
    }
}

#[test]
fn a_world_readable_file_holding_an_api_key_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let p = std::env::temp_dir().join(format!("scanstore-key-{}.toml", std::process::id()));
    let text = "[database]\nurl = \"postgresql://u@127.0.0.1/db\"\n\
                [elasticsearch]\napi_key = \"aWQ6a2V5\"\n";
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = Config::load(&p).unwrap_err().to_string();
    assert!(
        err.contains("elasticsearch.api_key") && err.contains("0644"),
        "{err}"
    );
    assert!(!err.contains("aWQ6a2V5"), "{err}");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
    let loaded = Config::load(&p);
    std::fs::remove_file(&p).unwrap();
    assert!(loaded.is_ok());
}

#[test]
fn environment_overrides_urls() {
    let env = |name: &str| match name {
        ENV_DATABASE_URL => Some("postgresql://env@127.0.0.1/envdb".to_string()),
        ENV_ES_URL => Some("http://127.0.0.1:9999/".to_string()),
        _ => None,
    };
    let c = Config::from_raw(base(), &env).unwrap();
    assert_eq!(c.database.url, "postgresql://env@127.0.0.1/envdb");
    assert_eq!(c.elasticsearch.url, "http://127.0.0.1:9999");
}

#[test]
fn missing_database_url_is_refused() {
    let err = Config::from_raw(RawConfig::default(), &no_env).unwrap_err();
    assert_eq!(err.key, "database.url");
}

#[test]
fn bad_prefix_and_listen_refused() {
    assert_eq!(
        parse("[elasticsearch]\nindex_prefix = \"Scan\"\n")
            .unwrap_err()
            .key,
        "elasticsearch.index_prefix"
    );
    assert_eq!(
        parse("[elasticsearch]\nindex_prefix = \"_x\"\n")
            .unwrap_err()
            .key,
        "elasticsearch.index_prefix"
    );
    assert_eq!(
        parse("[server]\nlisten = \"localhost\"\n").unwrap_err().key,
        "server.listen"
    );
}

#[test]
fn example_file_is_valid_and_complete() {
    let text = include_str!("../../scripts/scanstore.example.toml");
    let raw: RawConfig = toml::from_str(text).unwrap();
    Config::from_raw(raw, &no_env).unwrap();
    for (key, ..) in RANGES {
        let field = key.split_once('.').map(|(_, f)| f).unwrap_or(key);
        assert!(text.contains(&format!("{field} =")), "example lacks {key}");
    }
}

fn file_with_mode(body: &str, mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = std::env::temp_dir().join(format!("scanstore-perm-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

const WITH_PASSWORD: &str = "[database]\nurl = \"postgresql://u:s3cret@127.0.0.1/db\"\n";
const WITHOUT_PASSWORD: &str = "[database]\nurl = \"postgresql://u@127.0.0.1/db\"\n";

#[test]
fn password_in_a_world_readable_file_is_refused() {
    let p = file_with_mode(WITH_PASSWORD, 0o644);
    let e = Config::load(&p).unwrap_err();
    std::fs::remove_file(&p).unwrap();
    assert_eq!(e.key, "config file");
    assert!(e.value.contains("mode 0644"), "{e}");
    assert!(e.allowed.contains("chmod o-r"), "{e}");
    assert!(
        !e.to_string().contains("s3cret"),
        "the message leaks the password: {e}"
    );
}

#[test]
fn password_in_an_owner_or_group_readable_file_is_accepted() {
    for mode in [0o600, 0o640] {
        let p = file_with_mode(WITH_PASSWORD, mode);
        let r = Config::load(&p);
        std::fs::remove_file(&p).unwrap();
        assert!(r.is_ok(), "mode {mode:o}: {r:?}");
    }
}

#[test]
fn world_readable_file_without_a_password_is_accepted() {
    let p = file_with_mode(WITHOUT_PASSWORD, 0o644);
    let r = Config::load(&p);
    std::fs::remove_file(&p).unwrap();
    assert!(r.is_ok(), "{r:?}");
}

#[test]
fn passwords_are_found_in_urls_and_key_value_strings() {
    assert!(url_has_password("postgresql://u:p@h/db"));
    assert!(url_has_password("host=h user=u password=p"));
    assert!(!url_has_password("postgresql://u@h/db"));
    assert!(!url_has_password("postgresql://u:@h/db"));
    assert!(!url_has_password("host=h user=u"));
}
