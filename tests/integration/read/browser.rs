//! End to end in headless Chromium: a scanner uploads through the scanner API, the owner
//! signs in to the console, watches the execution's publication go from `pending` to
//! `ready` without a reload (and the page stop refreshing once settled), sees the results
//! by IP, and finds the asset by search. Screenshots are saved under
//! `target/console-screenshots/` as artifacts.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use super::cdp::{chromium_binary, Browser};
use crate::support::emulator;
use crate::support::publish::{tick_until_done, worker};
use crate::support::scan;
use crate::support::scan::t0;
use crate::support::stack::Stack;

fn artifact(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("console-screenshots").join(name)
}

/// Whether the navigation takes any room on the page.
const NAV_SHOWN: &str = "getComputedStyle(document.getElementById('nav')).display !== 'none'";

fn js(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

#[test]
#[ignore = "needs PostgreSQL"]
fn console_follows_publication_to_ready_and_finds_the_asset() {
    let Some(binary) = chromium_binary() else {
        // scripts/test.sh installs Debian's chromium; a bare `cargo test` may not have it.
        eprintln!("SKIPPED console_follows_publication_to_ready_and_finds_the_asset: chromium not installed");
        return;
    };
    let s = Stack::build(emulator::target(), "port_scan", |c| {
        c.projection.workers = 0
    });
    let (base, token) = (s.base().to_string(), s.owner.token.clone());
    let task = s.run.task_id;
    // Something to escape: a tag that would run script if inserted as HTML.
    s.sql()
        .execute(
            "UPDATE tasks SET tags = ARRAY['<img src=x onerror=\"window.__xss=1\">', 'weekly'] WHERE id = $1",
            &[&task],
        )
        .unwrap();
    // Twenty endpoints on twenty addresses; 10.0.0.7:443 with what nmap adds (script output
    // with markup in it), and 10.0.0.7:8443 seen closed.
    let mut observations = scan::endpoints(0, 20, t0());
    observations[6]["cpe"] = json!(["cpe:/a:nginx:nginx:1.24.0"]);
    observations[6]["hostnames"] = json!([{"name": "www.example.com", "source": "user"}]);
    observations[6]["tunnel"] = json!("ssl");
    observations[6]["scripts"] =
        json!([{"id": "http-title", "output": "<img src=x onerror=\"window.__xss=3\"> Welcome"}]);
    let mut closed = scan::endpoint("10.0.0.7", 8443, t0());
    closed["state"] = json!("closed");
    observations.push(closed);
    let up = uuid::Uuid::new_v4();
    let rest = observations.split_off(10);
    for batch in [
        scan::Batch::main(up, 0, observations),
        scan::Batch::final_(up, 1, rest),
    ] {
        assert_eq!(
            scan::post(&base, &s.scanner.token, s.execution(), &batch).status,
            200
        );
    }
    // A second task whose execution its scanner failed, with a reason to show as text.
    let failed = {
        let mut c = s.sql();
        crate::support::factory::task(&mut c, s.owner.id, s.scanner.id, "port_scan", "running")
    };
    let reason = "<img src=x onerror=\"window.__xss=2\"> nmap exited 1";
    assert_eq!(
        scan::fail(&base, &s.scanner.token, failed.execution_id, reason).status,
        200
    );

    let mut b = Browser::launch(&binary);
    b.navigate(&format!("{base}/"));
    let long = Duration::from_secs(20);
    b.wait_until(
        "the sign-in form",
        long,
        "!!document.getElementById('token')",
    );
    // Signed out, the page shows the sign-in form and nothing else to click.
    assert_eq!(
        b.eval(NAV_SHOWN),
        false,
        "navigation visible while signed out"
    );
    b.eval(&format!(
        "document.getElementById('token').value = {}; document.getElementById('signin-form').requestSubmit(); true",
        js(&token)
    ));
    b.wait_until(
        "the task list",
        long,
        &format!("!!document.querySelector('[data-task=\"{task}\"]')"),
    );
    assert_eq!(
        b.eval("sessionStorage.getItem('scanstore.token') !== null"),
        true
    );

    b.eval(&format!("location.hash = '#/tasks/{task}'; true"));
    let status = b.wait_until(
        "an execution row",
        long,
        "(document.querySelector('[data-projection-status]') || {}).textContent",
    );
    assert_eq!(status, "pending");
    b.wait_until(
        "live refreshing",
        long,
        "document.getElementById('live').getAttribute('data-state') === 'refreshing'",
    );
    // The tag is shown as text; nothing ran.
    b.wait_until(
        "the tags",
        long,
        "document.getElementById('task-head').textContent.includes('<img src=x')",
    );
    assert_eq!(
        b.eval("window.__xss === undefined && !document.querySelector('#task-head img')"),
        true
    );
    // A marker that a reload would wipe.
    b.eval("window.__noReload = 'still here'; true");
    b.wait_until(
        "results by IP",
        long,
        "document.querySelectorAll('#results-table tbody tr').length === 20",
    );
    let summary = b.eval("document.getElementById('results-summary').textContent");
    assert_eq!(summary, "21 endpoints on 20 IPs");
    b.screenshot(&artifact("task-pending.png"));

    // Publish; the page notices by itself.
    tick_until_done(&worker(&s), &s, s.execution(), 50);
    b.wait_until(
        "ready",
        long,
        "(document.querySelector('[data-projection-status]') || {}).textContent === 'ready'",
    );
    assert_eq!(
        b.eval("window.__noReload"),
        "still here",
        "the page reloaded"
    );
    b.wait_until(
        "settled",
        long,
        "document.getElementById('live').getAttribute('data-state') === 'settled'",
    );
    assert_eq!(
        b.eval("document.getElementById('task-projection').textContent"),
        "ready"
    );
    b.screenshot(&artifact("task-ready.png"));
    // Settled: no more polling.
    let polls = "performance.getEntriesByType('resource').filter(e => e.name.includes('/executions')).length";
    let before = b.eval(polls);
    // Over twice the page's 2 s refresh interval: that no poll comes in this time is what is
    // tested.
    std::thread::sleep(Duration::from_millis(4500));
    assert_eq!(
        b.eval(polls),
        before,
        "the page kept refreshing after all settled"
    );

    // The failed execution shows its status, its claims and its scanner's reason, as text.
    b.eval(&format!(
        "location.hash = '#/tasks/{}'; true",
        failed.task_id
    ));
    let shown = b.wait_until(
        "the failure reason",
        long,
        "(document.querySelector('[data-failure-reason]') || {}).textContent",
    );
    assert_eq!(shown, reason);
    assert_eq!(
        b.eval("window.__xss === undefined && !document.querySelector('#executions img')"),
        true
    );

    // Asset search.
    b.eval("location.hash = '#/search'; true");
    b.wait_until(
        "the search form",
        long,
        "!!document.getElementById('search-form')",
    );
    b.eval(
        "document.getElementById('f-q').value = 'nginx'; document.getElementById('f-ip').value = '10.0.0.7';
         document.getElementById('search-form').requestSubmit(); true",
    );
    b.wait_until(
        "the asset",
        long,
        "!!document.querySelector('[data-asset=\"10.0.0.7:443/tcp\"]')",
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#assets tbody tr').length"),
        1
    );
    assert_eq!(
        b.eval("document.getElementById('search-summary').textContent"),
        "1 asset"
    );
    // Without filters, the 20 open assets, and apart from them the one only ever seen
    // closed.
    b.eval(
        "document.getElementById('f-ip').value = ''; document.getElementById('f-q').value = '';
         document.getElementById('search-form').requestSubmit(); true",
    );
    b.wait_until(
        "all assets",
        long,
        "document.querySelectorAll('#assets tbody tr').length === 20
         && document.querySelectorAll('#closed-assets tbody tr[data-asset]').length === 1",
    );
    assert_eq!(
        b.eval("!!document.querySelector('#closed-assets [data-asset=\"10.0.0.7:8443/tcp\"]') && !document.querySelector('#assets [data-asset=\"10.0.0.7:8443/tcp\"]')"),
        true
    );
    // What nmap added: the CPE, the hostname, the state, and the script output collapsed,
    // all as text.
    let row = "document.querySelector('[data-asset=\"10.0.0.7:443/tcp\"]')";
    assert_eq!(
        b.eval(&format!("{row}.querySelector('[data-cpe]').textContent")),
        "cpe:/a:nginx:nginx:1.24.0"
    );
    assert_eq!(
        b.eval(&format!(
            "{row}.querySelector('[data-hostnames]').textContent"
        )),
        "www.example.com"
    );
    assert_eq!(
        b.eval(&format!("{row}.children[3].textContent")),
        "ssl/https"
    );
    assert_eq!(
        b.eval(&format!(
            "{row}.querySelector('details[data-scripts]').open"
        )),
        false
    );
    assert!(b
        .eval(&format!(
            "{row}.querySelector('details[data-scripts] pre').textContent"
        ))
        .as_str()
        .unwrap()
        .starts_with("http-title: <img src=x"));
    assert_eq!(
        b.eval("window.__xss === undefined && !document.querySelector('#assets img')"),
        true
    );
    assert_eq!(
        b.eval(
            "document.querySelector('[data-asset=\"10.0.0.7:8443/tcp\"] [data-state]').textContent"
        ),
        "closed"
    );
    // The state filter lists that state alone, in the one table.
    b.eval(
        "document.getElementById('f-state').value = 'closed'; document.getElementById('search-form').requestSubmit(); true",
    );
    b.wait_until(
        "the closed asset alone",
        long,
        "document.querySelectorAll('#assets tbody tr').length === 1 && !!document.querySelector('#assets [data-asset=\"10.0.0.7:8443/tcp\"]')
         && document.getElementById('closed-assets-panel').hidden",
    );
    b.screenshot(&artifact("asset-search.png"));

    // Signing out forgets the token.
    b.eval("document.getElementById('signout').click(); true");
    b.wait_until("signed out", long, "!!document.getElementById('token')");
    assert_eq!(
        b.eval(NAV_SHOWN),
        false,
        "navigation visible after signing out"
    );
    assert_eq!(
        b.eval("sessionStorage.getItem('scanstore.token')"),
        serde_json::Value::Null
    );
}
