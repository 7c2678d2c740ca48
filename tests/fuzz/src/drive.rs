//! A stable-Rust driver for the parse fuzz target: mutates valid and hostile seed bodies
//! (bit flips, byte inserts and deletes, splices, truncation, number and string swaps)
//! for the given number of seconds and checks every input. Prints the count of inputs.
mod check;

use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn valid(obs: &str) -> Vec<u8> {
    let sum = hex::encode(Sha256::digest(obs.as_bytes()));
    format!(r#"{{"protocol_version":2,"upload_id":"6f9619ff-8b86-d011-b42d-00cf4fc964ff","stream":"main","batch_index":0,"is_final":false,"checksum":"sha256:{sum}","observations":{obs}}}"#).into_bytes()
}

const TOKENS: &[&str] = &[
    "0",
    "-1",
    "65536",
    "1e999",
    "null",
    "true",
    "\"\"",
    "[]",
    "{}",
    "\"\\ud800\"",
    "\"::1\"",
    "\"2026-02-30T00:00:00Z\"",
    "18446744073709551616",
    "\"dns\"",
    "\"AAAA\"",
    "\u{202e}",
];

fn main() {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10);
    let seeds: Vec<Vec<u8>> = vec![
        valid(
            r#"[{"type":"endpoint","ip":"203.0.113.7","port":443,"transport":"tcp","observed_at":"2026-11-29T10:00:00Z"}]"#,
        ),
        valid(
            r#"[{"type":"dns","name":"www.example.com","record_type":"A","value":"203.0.113.7","observed_at":"2026-11-29T10:00:01Z"}]"#,
        ),
        valid("[]"),
    ];
    let mut corpus = seeds.clone();
    if let Ok(text) = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/hostile/corpus.jsonl"
    )) {
        for line in text.lines() {
            if let Some(i) = line.find("\"body\": \"") {
                corpus.push(line[i + 9..].as_bytes().to_vec());
            }
        }
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut rng = Rng(seed | 1);
    println!("seed {seed}");
    let end = Instant::now() + Duration::from_secs(secs);
    let mut n: u64 = 0;
    while Instant::now() < end {
        for _ in 0..1000 {
            let mut d = corpus[rng.below(corpus.len())].clone();
            for _ in 0..=rng.below(4) {
                let at = rng.below(d.len() + 1);
                match rng.below(6) {
                    0 if !d.is_empty() => {
                        let i = rng.below(d.len());
                        d[i] ^= 1 << rng.below(8);
                    }
                    1 => d.insert(at, rng.next() as u8),
                    2 if at < d.len() => {
                        d.remove(at);
                    }
                    3 => d.truncate(at),
                    4 => {
                        let t = TOKENS[rng.below(TOKENS.len())];
                        d.splice(at..at, t.bytes());
                    }
                    _ => {
                        let o = &seeds[rng.below(seeds.len())];
                        let s = rng.below(o.len());
                        let e = s + rng.below(o.len() - s);
                        d.splice(at..at, o[s..e].iter().copied());
                    }
                }
            }
            check::check(&d);
            n += 1;
        }
    }
    println!("inputs {n}");
}
