//! Every 4xx class of the scanner API, each checked to leave no receipt and no document.

use uuid::Uuid;

use crate::support::factory;
use crate::support::scan::t0;
use crate::support::scan::{self, endpoints, Batch};
use crate::support::server::Got;
use crate::support::stack::Stack;

fn assert_nothing_written(s: &Stack) {
    assert!(s.receipts().is_empty(), "a rejected request left a receipt");
    assert_eq!(s.fact_count(), 0, "a rejected request left a document");
}

fn code(r: &Got) -> (u16, String) {
    (
        r.status,
        r.body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

#[test]
#[ignore = "needs PostgreSQL"]
fn bad_requests_are_refused_without_a_partial_write() {
    let s = Stack::new("port_scan");
    let exec = s.execution().to_string();
    let tok = Some(s.scanner.token.as_str());
    let good = Batch::main(Uuid::new_v4(), 0, endpoints(0, 2, t0()));
    let body = good.body();

    assert_eq!(
        code(&scan::post_raw(s.base(), None, &exec, body.as_bytes())).0,
        401
    );
    assert_eq!(
        code(&scan::post_raw(
            s.base(),
            Some("wrong"),
            &exec,
            body.as_bytes()
        ))
        .0,
        401
    );
    assert_eq!(
        code(&scan::post_raw(
            s.base(),
            tok,
            "not-a-uuid",
            body.as_bytes()
        ))
        .0,
        404
    );
    assert_eq!(
        code(&scan::post_raw(
            s.base(),
            tok,
            &Uuid::new_v4().to_string(),
            body.as_bytes()
        ))
        .0,
        404
    );
    assert_eq!(
        code(&scan::post_raw(s.base(), tok, &exec, b"{not json")),
        (400, "malformed_json".into())
    );
    let tampered = body.replace("10.0.0.1", "10.0.0.9");
    assert_eq!(
        code(&scan::post_raw(s.base(), tok, &exec, tampered.as_bytes())),
        (400, "checksum_mismatch".into())
    );
    let bad_port = Batch::main(Uuid::new_v4(), 0, vec![scan::endpoint("10.0.0.1", 0, t0())]);
    assert_eq!(
        code(&scan::post_raw(
            s.base(),
            tok,
            &exec,
            bad_port.body().as_bytes()
        )),
        (400, "bad_field".into())
    );
    let too_many = Batch::main(Uuid::new_v4(), 0, endpoints(0, 5001, t0()));
    assert_eq!(
        code(&scan::post_raw(
            s.base(),
            tok,
            &exec,
            too_many.body().as_bytes()
        )),
        (400, "too_many_observations".into())
    );
    let huge = vec![b' '; 17 * 1024 * 1024];
    assert_eq!(code(&scan::post_raw(s.base(), tok, &exec, &huge)).0, 413);
    assert_nothing_written(&s);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn another_scanners_execution_is_forbidden() {
    let s = Stack::new("port_scan");
    let mut c = s.sql();
    let intruder = factory::scanner(&mut c, None);
    let b = Batch::main(Uuid::new_v4(), 0, endpoints(0, 1, t0()));
    let r = scan::post(s.base(), &intruder.token, s.execution(), &b);
    assert_eq!(r.status, 403);
    c.execute(
        "UPDATE scanners SET disabled = true WHERE id = $1",
        &[&s.scanner.id],
    )
    .unwrap();
    assert_eq!(
        scan::post(s.base(), &s.scanner.token, s.execution(), &b).status,
        401
    );
    assert_nothing_written(&s);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn execution_not_running_is_409() {
    let s = Stack::new("port_scan");
    let mut c = s.sql();
    let queued = factory::task(&mut c, s.owner.id, s.scanner.id, "port_scan", "queued");
    let b = Batch::main(Uuid::new_v4(), 0, endpoints(0, 1, t0()));
    let r = scan::post(s.base(), &s.scanner.token, queued.execution_id, &b);
    assert_eq!(code(&r), (409, "execution_not_running".into()));
    let receipts: i64 = c
        .query_one(
            "SELECT count(*) FROM scan_upload_receipts WHERE execution_id = $1",
            &[&queued.execution_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(receipts, 0);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn same_identity_with_other_content_is_409() {
    let s = Stack::new("port_scan");
    let up = Uuid::new_v4();
    assert_eq!(
        scan::post(
            s.base(),
            &s.scanner.token,
            s.execution(),
            &Batch::main(up, 0, endpoints(0, 2, t0()))
        )
        .status,
        200
    );
    let r = scan::post(
        s.base(),
        &s.scanner.token,
        s.execution(),
        &Batch::main(up, 0, endpoints(5, 2, t0())),
    );
    assert_eq!(code(&r), (409, "identity_conflict".into()));
    assert_eq!(s.fact_count(), 2);
}
