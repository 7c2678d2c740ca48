//! `scanstore-client import` of masscan and naabu files: what arrives, exactly once, and
//! what is refused with one clear message and nothing written. The fixtures are written in
//! the formats masscan's out-text.c / out-json.c and naabu's runner/output.go print.

use std::time::{SystemTime, UNIX_EPOCH};

use scanstore::http::tls::TlsFiles;

use super::{client, client_for, endpoints, execution_status, fixture, queued, run};
use crate::support::emulator;
use crate::support::secure::{suite_ca, temp_dir};
use crate::support::stack::Stack;

/// Seconds since the epoch an hour ago: inside the server's observation window.
fn an_hour_ago() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 3600
}

fn masscan_list(t: u64) -> String {
    format!(
        "#masscan\n\
         open tcp 22 192.0.2.10 {t}\n\
         open tcp 80 192.0.2.10 {t}\n\
         open udp 53 192.0.2.11 {t}\n\
         banner tcp 22 192.0.2.10 {t} ssh SSH-2.0-OpenSSH_9.6\n\
         banner tcp 80 192.0.2.10 {t} title Welcome to nginx!\n\
         banner tcp 443 192.0.2.12 {t} X509 MIIFazCCA1OgAwIBAgIRAIIQz7DSQONZRGPgu2OCiwAwDQYJ\n\
         # end\n"
    )
}

fn masscan_json(t: u64) -> String {
    format!(
        "[\n\
         {{   \"ip\": \"192.0.2.20\",   \"timestamp\": \"{t}\", \"ports\": [ {{\"port\": 8080, \"proto\": \"tcp\", \"status\": \"open\", \"reason\": \"syn-ack\", \"ttl\": 64}} ] }}\n\
         ,\n\
         {{   \"ip\": \"192.0.2.20\",   \"timestamp\": \"{t}\", \"ports\": [ {{\"port\": 8080, \"proto\": \"tcp\", \"service\": {{\"name\": \"http\", \"banner\": \"HTTP/1.1 200 OK\\\\x0d\\\\x0aServer: Apache\"}} }} ] }}\n\
         ,\n\
         {{   \"ip\": \"2001:db8::20\",   \"timestamp\": \"{t}\", \"ports\": [ {{\"port\": 25, \"proto\": \"tcp\", \"status\": \"open\", \"reason\": \"syn-ack\", \"ttl\": 64}} ] }}\n\
         ]\n"
    )
}

#[test]
#[ignore = "needs PostgreSQL"]
fn masscan_list_import_claims_sends_and_finishes_an_execution_once() {
    let s = Stack::new("port_scan");
    let task = queued(&s, "port_scan", &[("cidr", "192.0.2.0/24")]);
    let file = fixture("scan.txt", &masscan_list(an_hour_ago()));
    let journal = temp_dir("client-journal");

    let out = run(client(&s, &journal)
        .args(["import", "--format", "masscan-list"])
        .arg(&file));
    assert!(out.status.success());
    assert_eq!(execution_status(&s, task.execution_id).0, "succeeded");
    let found = endpoints(&s, task.task_id);
    let keys: Vec<(String, u64, String)> = found
        .iter()
        .map(|e| {
            (
                e["ip"].as_str().unwrap().into(),
                e["port"].as_u64().unwrap(),
                e["transport"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            ("192.0.2.10".into(), 22, "tcp".into()),
            ("192.0.2.10".into(), 80, "tcp".into()),
            ("192.0.2.11".into(), 53, "udp".into()),
        ],
        "the X509 blob is no endpoint observation of its own: {found:?}"
    );
    assert_eq!(found[0]["service"], "ssh");
    assert_eq!(found[0]["banner"], "SSH-2.0-OpenSSH_9.6");
    assert_eq!(found[1]["banner"], "Welcome to nginx!");
    assert!(
        found[1]["service"].is_null(),
        "an HTML title names no service"
    );
    let facts: i64 = s
        .sql()
        .query_one(
            "SELECT coalesce(sum(observation_count), 0)::bigint FROM scan_upload_receipts WHERE execution_id = $1",
            &[&task.execution_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(facts, 5, "three open ports and two banners, each sent once");

    // Again: the journal says it is done; nothing is claimed or sent.
    let other = queued(&s, "port_scan", &[("cidr", "192.0.2.0/24")]);
    let again = run(client(&s, &journal)
        .args(["import", "--format", "masscan-list"])
        .arg(&file));
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stdout).contains("already imported"));
    assert_eq!(execution_status(&s, other.execution_id).0, "queued");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn masscan_json_import_into_a_given_execution_keeps_banners_and_ipv6() {
    let s = Stack::new("port_scan");
    let file = fixture("scan.json", &masscan_json(an_hour_ago()));
    let journal = temp_dir("client-journal");
    let out = run(client(&s, &journal)
        .args(["import", "--format", "masscan-json", "--execution"])
        .arg(s.execution().to_string())
        .arg(&file));
    assert!(out.status.success());
    assert_eq!(execution_status(&s, s.execution()).0, "succeeded");
    let found = endpoints(&s, s.run.task_id);
    assert_eq!(found.len(), 2, "{found:?}");
    let web = found.iter().find(|e| e["port"] == 8080).unwrap();
    assert_eq!(web["service"], "http");
    assert_eq!(web["banner"], "HTTP/1.1 200 OK\\x0d\\x0aServer: Apache");
    assert!(found
        .iter()
        .any(|e| e["ip"] == "2001:db8::20" && e["port"] == 25));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn naabu_names_put_their_addresses_in_a_domain_targets_scope() {
    let s = Stack::new("mixed");
    let task = queued(&s, "mixed", &[("domain", "example.com")]);
    let lines = "{\"host\":\"www.example.com\",\"ip\":\"198.51.100.7\",\"timestamp\":\"TS\",\"port\":443,\"protocol\":\"tcp\",\"tls\":true}\n\
                 {\"host\":\"www.example.com\",\"ip\":\"198.51.100.7\",\"timestamp\":\"TS\",\"port\":80,\"protocol\":\"tcp\",\"tls\":false}\n";
    let ts = chrono::Utc::now() - chrono::Duration::minutes(5);
    let file = fixture(
        "naabu.jsonl",
        &lines.replace(
            "TS",
            &ts.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
        ),
    );
    let out = run(client(&s, &temp_dir("client-journal"))
        .args(["import", "--format", "naabu-jsonl"])
        .arg(&file));
    assert!(out.status.success());
    assert_eq!(execution_status(&s, task.execution_id).0, "succeeded");
    let ports: Vec<u64> = endpoints(&s, task.task_id)
        .iter()
        .map(|e| e["port"].as_u64().unwrap())
        .collect();
    assert_eq!(ports, [80, 443]);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn refusals_are_one_clear_message_and_leave_nothing_written() {
    let s = Stack::new("port_scan");
    let t = an_hour_ago();
    let journal = temp_dir("client-journal");

    // Outside the task's targets: 422 out_of_scope, permanent, exit 2, nothing stored.
    let task = queued(&s, "port_scan", &[("cidr", "192.0.2.0/24")]);
    let outside = fixture("outside.txt", &format!("open tcp 22 203.0.113.9 {t}\n"));
    let out = run(client(&s, &journal)
        .args(["import", "--format", "masscan-list"])
        .arg(&outside));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("422 out_of_scope"), "{stderr}");
    assert_eq!(
        stderr.matches("scanstore-client:").count(),
        1,
        "one message: {stderr}"
    );
    assert_eq!(execution_status(&s, task.execution_id).0, "running");
    assert!(endpoints(&s, task.task_id).is_empty());

    // Older than the window the claim gave: refused by the client, nothing sent, with
    // what to change.
    let old_task = queued(&s, "port_scan", &[("cidr", "192.0.2.0/24")]);
    let forty_days = t - 40 * 86_400;
    let old = fixture("old.txt", &format!("open tcp 22 192.0.2.9 {forty_days}\n"));
    let out = run(client(&s, &journal)
        .args(["import", "--format", "masscan-list"])
        .arg(&old));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("older than the server keeps"), "{stderr}");
    assert!(
        stderr.contains("upload.max_observation_age_days"),
        "{stderr}"
    );
    let sent: i64 = s
        .sql()
        .query_one(
            "SELECT count(*) FROM scan_upload_receipts WHERE execution_id = $1",
            &[&old_task.execution_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(sent, 0);

    // Input that is no masscan output: refused before anything is sent for it.
    let garbage = fixture("garbage.txt", "open tcp eighty 192.0.2.1 1\n");
    let out = run(client(&s, &journal)
        .args(["import", "--format", "masscan-list", "--execution"])
        .arg(s.execution().to_string())
        .arg(&garbage));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("port \"eighty\" is not a number"));
    let receipts: i64 = s
        .sql()
        .query_one(
            "SELECT count(*) FROM scan_upload_receipts WHERE execution_id = $1",
            &[&s.execution()],
        )
        .unwrap()
        .get(0);
    assert_eq!(receipts, 0);

    // A wrong token: 401, permanent. And a token is never taken from the command line.
    let file = fixture("scan.txt", &masscan_list(t));
    let out = run(client_for(s.base(), "scn_wrong", &journal)
        .args(["import", "--format", "masscan-list"])
        .arg(&file));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("401 unauthorized"));
    let out = run(client(&s, &journal)
        .args(["--token", "x", "import", "--format", "masscan-list"])
        .arg(&file));
    assert_eq!(out.status.code(), Some(2));
    let out = run(client(&s, &journal)
        .env_remove("SCANSTORE_SCANNER_TOKEN")
        .args(["import", "--format", "masscan-list"])
        .arg(&file));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SCANSTORE_SCANNER_TOKEN"));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn over_https_the_client_trusts_the_ca_it_is_given_and_only_that() {
    let (cert, key) = suite_ca().issue(&temp_dir("client-https"), "server");
    let s = Stack::build(emulator::target(), "port_scan", |c| {
        c.server.tls = Some(TlsFiles { cert, key });
    });
    assert!(s.base().starts_with("https://"), "{}", s.base());
    let file = fixture("scan.txt", &masscan_list(an_hour_ago()));
    let import = |cmd: &mut std::process::Command| {
        run(cmd
            .args(["import", "--format", "masscan-list", "--execution"])
            .arg(s.execution().to_string())
            .arg(&file))
    };

    // Without the CA the server's certificate is refused at once, with what to do.
    let out = import(client(&s, &temp_dir("client-journal")).env_remove("SCANSTORE_CA_FILE"));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("SCANSTORE_CA_FILE"), "{stderr}");
    assert!(
        !stderr.contains("retrying"),
        "a certificate refusal is not retried: {stderr}"
    );
    assert_eq!(execution_status(&s, s.execution()).0, "running");

    // With it (also as --ca-file), the import goes through.
    let out = import(
        client(&s, &temp_dir("client-journal"))
            .env_remove("SCANSTORE_CA_FILE")
            .arg("--ca-file")
            .arg(&suite_ca().pem),
    );
    assert!(out.status.success());
    assert_eq!(execution_status(&s, s.execution()).0, "succeeded");
    assert_eq!(endpoints(&s, s.run.task_id).len(), 3);
}
