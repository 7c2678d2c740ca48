//! URL parameter strictness: a request naming a parameter its route does not implement is
//! refused before any handler runs, with Elasticsearch's `BaseRestHandler` message.

use crate::error::EsError;
use crate::http::Req;

/// Parameters every route takes: they change only how a response is printed (`pretty`,
/// `human`), which of its fields are written (`filter_path`) or what an error carries
/// (`error_trace`), never what a request does.
const EVERYWHERE: [&str; 4] = ["pretty", "human", "filter_path", "error_trace"];

/// Refuses the parameters of `req` that are not in `allowed`, naming them (sorted, as
/// Elasticsearch sorts them) and suggesting close allowed names as Elasticsearch does.
pub fn check(req: &Req, allowed: &[&str]) -> Result<(), EsError> {
    let mut bad: Vec<&str> = req
        .query
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !allowed.contains(k) && !EVERYWHERE.contains(k))
        .collect();
    if bad.is_empty() {
        return Ok(());
    }
    bad.sort_unstable();
    bad.dedup();
    let listed: Vec<String> = bad
        .iter()
        .map(|b| {
            let near = suggestions(b, allowed.iter().chain(EVERYWHERE.iter()).copied());
            match near.as_slice() {
                [] => format!("[{b}]"),
                [one] => format!("[{b}] -> did you mean [{one}]?"),
                many => format!("[{b}] -> did you mean any of [{}]?", many.join(", ")),
            }
        })
        .collect();
    Err(EsError::bad_request(format!(
        "request [{}] contains unrecognized parameter{}: {}",
        req.path,
        if bad.len() > 1 { "s" } else { "" },
        listed.join(", ")
    )))
}

/// Candidates more than half similar to `name` (Lucene's normalised Levenshtein
/// similarity), most similar first, then by name.
fn suggestions<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut scored: Vec<(f32, &str)> = candidates
        .map(|c| (similarity(name, c), c))
        .filter(|(s, _)| *s > 0.5)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().map(|(_, c)| c).collect()
}

/// `1 - edits / max(len)`, over characters.
fn similarity(a: &str, b: &str) -> f32 {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let longest = a.len().max(b.len());
    if longest == 0 {
        return 1.0;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let swap = prev[j] + usize::from(ca != cb);
            cur[j + 1] = swap.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    1.0 - prev[b.len()] as f32 / longest as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(url: &str, allowed: &[&str]) -> Option<String> {
        check(&Req::new("GET", url, Vec::new()), allowed)
            .err()
            .map(|e| {
                assert_eq!(e.kind, "illegal_argument_exception");
                assert_eq!(e.status, 400);
                e.reason
            })
    }

    #[test]
    fn an_unknown_parameter_is_named() {
        assert_eq!(
            reason("/idx/_search?foo=1", &["size"]).as_deref(),
            Some("request [/idx/_search] contains unrecognized parameter: [foo]")
        );
    }

    #[test]
    fn several_are_sorted_and_close_names_suggested() {
        assert_eq!(
            reason("/_search?sise=1&zzz=2&from=0", &["size", "from"]).as_deref(),
            Some("request [/_search] contains unrecognized parameters: [sise] -> did you mean [size]?, [zzz]")
        );
    }

    #[test]
    fn allowed_and_formatting_parameters_pass() {
        assert_eq!(reason("/_search?size=1&pretty&human=true", &["size"]), None);
    }

    #[test]
    fn similarity_is_lucenes_normalised_distance() {
        assert!((similarity("sise", "size") - 0.75).abs() < 1e-6);
        assert!((similarity("abc", "") - 0.0).abs() < 1e-6);
    }
}
