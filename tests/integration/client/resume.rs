//! An import killed with SIGKILL mid-way and run again ends exactly as an uninterrupted
//! one; a server that answers 503 for a while is waited out.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{client, endpoints, execution_status, fixture, run, scanned};
use crate::support::emulator::FaultSpec;
use crate::support::secure::temp_dir;
use crate::support::stack::Stack;
use crate::support::wait_for;

/// An nmap XML document of `hosts` hosts in 10.0.0.0/8 with `ports` open ports each, as
/// `nmap -oX` writes it.
fn nmap_xml(hosts: usize, ports: u16) -> String {
    let t = chrono::Utc::now().timestamp() - 600;
    let mut x = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE nmaprun>\n\
         <nmaprun scanner=\"nmap\" args=\"nmap -sV 10.1.0.0/16\" start=\"{t}\" version=\"7.93\" xmloutputversion=\"1.05\">\n\
         <scaninfo type=\"syn\" protocol=\"tcp\" numservices=\"1000\" services=\"1-1000\"/>\n"
    );
    for h in 0..hosts {
        x.push_str(&format!(
            "<host starttime=\"{t}\" endtime=\"{}\"><status state=\"up\" reason=\"syn-ack\" reason_ttl=\"64\"/>\n\
             <address addr=\"10.1.{}.{}\" addrtype=\"ipv4\"/>\n<hostnames>\n</hostnames>\n<ports>",
            t + 5,
            h / 250,
            h % 250 + 1
        ));
        for p in 0..ports {
            x.push_str(&format!(
                "<port protocol=\"tcp\" portid=\"{}\"><state state=\"open\" reason=\"syn-ack\" reason_ttl=\"64\"/>\
                 <service name=\"http\" product=\"nginx\" version=\"1.{p}\" method=\"probed\" conf=\"10\"/></port>\n",
                8000 + p
            ));
        }
        x.push_str("</ports>\n</host>\n");
    }
    x.push_str("<runstats><finished time=\"0\" exit=\"success\"/></runstats>\n</nmaprun>\n");
    x
}

/// Runs the import `cmd` (journal in `journal`) until 20 of its batches are confirmed, then
/// kills it with SIGKILL.
fn kill_mid_way(mut cmd: Command, journal: &Path) {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("20 confirmed batches", Duration::from_secs(60), || {
        confirmed(journal) >= 20
    });
    child.kill().unwrap();
    child.wait().unwrap();
}

fn confirmed(journal: &Path) -> usize {
    std::fs::read_dir(journal)
        .map(|d| {
            d.flatten()
                .map(|f| {
                    std::fs::read_to_string(f.path())
                        .unwrap_or_default()
                        .matches("\"entry\":\"confirmed\"")
                        .count()
                })
                .sum()
        })
        .unwrap_or(0)
}

#[test]
#[ignore = "needs PostgreSQL"]
fn an_import_killed_mid_way_and_run_again_ends_as_an_uninterrupted_one() {
    let s = Stack::new("port_scan");
    let file = fixture("big.xml", &nmap_xml(300, 5));
    let other = super::queued(&s, "port_scan", &[("cidr", "10.0.0.0/8")]);

    // Batches of 10 observations: 150 of them, so the kill lands in the middle.
    let journal = temp_dir("client-journal");
    let import = || {
        let mut cmd = client(&s, &journal);
        cmd.args([
            "--batch-size",
            "10",
            "import",
            "--format",
            "nmap-xml",
            "--execution",
        ])
        .arg(s.execution().to_string())
        .arg(&file);
        cmd
    };
    kill_mid_way(import(), &journal);
    let before = confirmed(&journal);
    assert!(before < 150, "the import finished before it was killed");
    assert_eq!(execution_status(&s, s.execution()).0, "running");

    let out = run(&mut import());
    assert!(out.status.success());
    assert_eq!(execution_status(&s, s.execution()).0, "succeeded");

    // Each batch identity received once, every observation stored once.
    let row = s
        .sql()
        .query_one(
            "SELECT count(*), count(DISTINCT batch_index), sum(observation_count)::bigint,
                    count(DISTINCT upload_id)
               FROM scan_upload_receipts WHERE execution_id = $1",
            &[&s.execution()],
        )
        .unwrap();
    let (receipts, distinct, observations, uploads): (i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(
        (receipts, distinct, observations, uploads),
        (150, 150, 1500, 1)
    );

    // The same file imported without interruption into another execution gives the same.
    let out = run(client(&s, &temp_dir("client-journal"))
        .args(["--batch-size", "10", "import", "--format", "nmap-xml"])
        .arg(&file));
    assert!(out.status.success());
    assert_eq!(execution_status(&s, other.execution_id).0, "succeeded");
    let resumed: Vec<_> = endpoints(&s, s.run.task_id).iter().map(scanned).collect();
    let whole: Vec<_> = endpoints(&s, other.task_id).iter().map(scanned).collect();
    assert_eq!(resumed.len(), 1500);
    assert_eq!(resumed, whole);
}

#[test]
#[ignore = "needs PostgreSQL and the ES emulator"]
fn a_server_that_answers_503_for_a_while_is_waited_out() {
    let Some(s) = Stack::with_faults("client 503", "port_scan", |_| {}) else {
        return;
    };
    // Every attempt the server makes at its bulk writes fails for a while: it answers
    // 503, and the client retries until it answers 200.
    s.emulator().add_fault(FaultSpec::fail(
        "/_bulk",
        12,
        503,
        "unavailable_shards_exception",
    ));
    let t = chrono::Utc::now().timestamp() - 60;
    let file = fixture(
        "scan.txt",
        &format!("open tcp 22 192.0.2.1 {t}\nopen tcp 23 192.0.2.1 {t}\n"),
    );
    let out = run(client(&s, &temp_dir("client-journal"))
        .args(["import", "--format", "masscan-list", "--execution"])
        .arg(s.execution().to_string())
        .arg(&file));
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("retrying in"), "{stderr}");
    assert_eq!(execution_status(&s, s.execution()).0, "succeeded");
    assert_eq!(endpoints(&s, s.run.task_id).len(), 2);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn an_execution_lost_while_the_client_was_down_is_claimed_again_and_goes_on_past_what_it_kept() {
    let s = Stack::new("port_scan");
    let task = super::queued(&s, "port_scan", &[("cidr", "10.0.0.0/8")]);
    let file = fixture("big.xml", &nmap_xml(300, 5));
    let journal = temp_dir("client-journal");
    let import = || {
        let mut cmd = client(&s, &journal);
        cmd.args(["--batch-size", "10", "import", "--format", "nmap-xml"])
            .arg(&file);
        cmd
    };
    kill_mid_way(import(), &journal);

    // The lease lapses while the client is down: the execution goes back to the queue and
    // its upload is abandoned, its confirmed batches kept (and a batch the server was still
    // writing removed after a grace period, which the final waits for).
    // A batch the killed client had in flight may still be accepted, renewing the lease,
    // or hold the execution while the sweep passes: lapse and sweep until it is queued.
    wait_for("the lapsed lease swept", Duration::from_secs(30), || {
        s.sql()
            .execute(
                "UPDATE executions SET lease_expires_at = now() - interval '1 second'
                  WHERE id = $1 AND status = 'running'",
                &[&task.execution_id],
            )
            .unwrap();
        scanstore::upload::lease::sweep(&s.server.app().db, 3).unwrap();
        execution_status(&s, task.execution_id).0 == "queued"
    });

    let out = run(&mut import());
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("claiming again"));
    assert_eq!(execution_status(&s, task.execution_id).0, "succeeded");
    // The new upload started where the kept batches ended: every observation once.
    let row = s
        .sql()
        .query_one(
            "SELECT count(DISTINCT upload_id), sum(observation_count)::bigint
               FROM scan_upload_receipts WHERE execution_id = $1 AND status = 'confirmed'",
            &[&task.execution_id],
        )
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (2, 1500));
    assert_eq!(endpoints(&s, task.task_id).len(), 1500);
}
