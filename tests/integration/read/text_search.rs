//! Which search words find which banners: `/api/v1/search?q=` over real banners and script
//! output, with the analysis the mappings declare (the fields themselves `standard`, their
//! `.words` `simple`) and every word of `q` required in one field — the same hits on the
//! emulator and on a real cluster.

use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::support::emulator;
use crate::support::publish::{tick_until_done, worker};
use crate::support::read::ok;
use crate::support::scan::{self, endpoint, t0, Batch};
use crate::support::stack::Stack;

/// One observed service: (address, port, service, product, banner).
const SERVICES: &[(&str, u16, &str, &str, &str)] = &[
    (
        "10.0.0.1",
        22,
        "ssh",
        "OpenSSH",
        "SSH-2.0-OpenSSH_8.9p1 Ubuntu-3ubuntu0.1",
    ),
    (
        "10.0.0.2",
        80,
        "http",
        "Apache httpd",
        "Apache/2.4.41 (Ubuntu)",
    ),
    (
        "10.0.0.3",
        80,
        "http",
        "nginx",
        "HTTP/1.1 200 OK\r\nServer: nginx/1.18.0",
    ),
    (
        "10.0.0.4",
        25,
        "smtp",
        "Postfix smtpd",
        "220 mail.example.com ESMTP Postfix (Debian/GNU)",
    ),
    ("10.0.0.5", 443, "https", "lighttpd", "the lazy dog's bone"),
];

fn observation(&(ip, port, service, product, banner): &(&str, u16, &str, &str, &str)) -> Value {
    let mut e = endpoint(ip, port, t0());
    e["service"] = json!(service);
    e["product"] = json!(product);
    e["banner"] = json!(banner);
    if ip == "10.0.0.5" {
        e["scripts"] = json!([{"id": "http-title", "output": "Welcome to nginx!"}]);
    }
    e
}

#[test]
#[ignore = "needs PostgreSQL"]
fn search_words_find_the_banners_a_user_expects() {
    let s = Stack::build(emulator::target(), "port_scan", |c| {
        c.projection.workers = 0
    });
    let observations = SERVICES.iter().map(observation).collect();
    let fin = Batch::final_(Uuid::new_v4(), 0, observations);
    let r = scan::post(s.base(), &s.scanner.token, s.execution(), &fin);
    assert_eq!(r.status, 200, "{}", r.body);
    tick_until_done(&worker(&s), &s, s.execution(), 50);

    let found = |q: &str| -> Vec<String> {
        let path = format!(
            "/api/v1/search?q={}&size=50",
            utf8_percent_encode(q, NON_ALPHANUMERIC)
        );
        let body = ok(s.base(), &s.owner.token, &path);
        let mut ips: Vec<String> = body["assets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                a["ip"]
                    .as_str()
                    .unwrap()
                    .trim_start_matches("10.0.0.")
                    .to_string()
            })
            .collect();
        ips.sort();
        ips
    };
    // (query, the last octets of the addresses it finds, why)
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "openssh",
            &["1"],
            "a run of letters in OpenSSH_8.9p1 (.words)",
        ),
        ("OpenSSH", &["1"], "the product, and the banner's letters"),
        ("openssh_8.9p1", &["1"], "the standard token, whole"),
        ("ubuntu", &["1", "2"], "a word in both banners"),
        ("2.4.41", &["2"], "a version stays one standard token"),
        ("2.4", &[], "and is not found by its prefix"),
        ("1.18.0", &["3"], "after the slash of nginx/1.18.0"),
        (
            "example.com",
            &["4"],
            "the letters example and com of mail.example.com",
        ),
        ("dog", &["5"], "the letters of dog's"),
        ("dog's", &["5"], "the standard token"),
        (
            "nginx",
            &["3", "5"],
            "a product, a banner word and script output",
        ),
        ("welcome nginx", &["5"], "both words in the script's output"),
        ("apache ubuntu", &["2"], "every word of q in one field"),
        ("apache debian", &[], "no field has both"),
        ("smtpd", &[], "product is matched whole, not by its words"),
    ];
    let mut wrong = Vec::new();
    for (q, want, why) in cases {
        let got = found(q);
        if got != *want {
            wrong.push(format!("q={q:?} found {got:?}, expected {want:?} ({why})"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
