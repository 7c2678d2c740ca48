//! `Type=notify`: with `NOTIFY_SOCKET` set, `serve` sends `READY=1` once the schema is
//! migrated and the HTTP listener answers, and `STOPPING=1` when SIGTERM arrives.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use super::Served;
use crate::support::config_file;
use crate::support::db;
use crate::support::server::http;

fn receive(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = socket
        .recv(&mut buf)
        .expect("a notification within the timeout");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
#[ignore = "needs PostgreSQL"]
fn serve_notifies_readiness_after_migrating_and_listening_and_stopping_on_sigterm() {
    let t = db::empty();
    let dir = std::env::temp_dir().join(format!("scanstore-notify-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let f = config_file(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = \"{}\"\n[elasticsearch]\nurl = \"http://127.0.0.1:9\"\n[projection]\nworkers = 0\n",
        t.url
    ));
    let served = Served::start(&f, &[("NOTIFY_SOCKET", path.to_str().unwrap())]);
    let ready = receive(&socket);
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    assert!(
        ready.contains(&format!("MAINPID={}", served.child.id())),
        "{ready:?}"
    );
    assert!(ready.contains(&served.base), "{ready:?}");
    // Ready means migrated and answering.
    assert!(t.schema_is_current());
    let health = http()
        .get(format!("{}/healthz", served.base))
        .call()
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);

    let child_id = served.child.id();
    super::term(&served.child);
    let stopping = receive(&socket);
    assert_eq!(stopping, "STOPPING=1", "from pid {child_id}");
    served.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
