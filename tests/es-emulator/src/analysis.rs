//! Text analysis as Elasticsearch's `standard` analyzer does it — words at Unicode (UAX #29)
//! word boundaries, as Lucene's StandardTokenizer finds them, lower-cased, a word longer
//! than 255 characters split there — and the `_analyze` API over it and `keyword`.
//!
//! Known differences from Lucene: emoji and other words without a letter or digit are not
//! tokens here (Lucene emits `<EMOJI>`), and token types are `<ALPHANUM>`, `<NUM>` and
//! `<IDEOGRAPHIC>` only.

use serde_json::{json, Value};
use unicode_segmentation::UnicodeSegmentation;

use crate::app::App;
use crate::error::EsError;
use crate::http::{HandlerResult, Reply, Req};
use crate::mapping::Ty;
use crate::resolve::{resolve_read, IndicesOptions};

/// Longest token, in characters (the standard tokenizer's `max_token_length`).
const MAX_TOKEN_LENGTH: usize = 255;

/// One token of an analysed text: offsets in UTF-16 code units, as Java counts them.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub text: String,
    pub start: usize,
    pub end: usize,
    pub kind: &'static str,
    pub position: usize,
}

fn kind(word: &str) -> &'static str {
    if word.chars().all(|c| !c.is_alphabetic()) {
        "<NUM>"
    } else if word
        .chars()
        .any(|c| matches!(c, '\u{4E00}'..='\u{9FFF}' | '\u{3400}'..='\u{4DBF}'))
    {
        "<IDEOGRAPHIC>"
    } else {
        "<ALPHANUM>"
    }
}

/// The standard analyzer's tokens of `s`.
pub fn standard(s: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let utf16_at = |byte: usize| s[..byte].encode_utf16().count();
    for (at, word) in s.unicode_word_indices() {
        let mut rest = (at, word);
        loop {
            let (start, piece) = rest;
            let cut = piece
                .char_indices()
                .nth(MAX_TOKEN_LENGTH)
                .map_or(piece.len(), |(i, _)| i);
            let head = &piece[..cut];
            out.push(Token {
                text: head.to_lowercase(),
                start: utf16_at(start),
                end: utf16_at(start + cut),
                kind: kind(head),
                position: out.len(),
            });
            if cut == piece.len() {
                break;
            }
            rest = (start + cut, &piece[cut..]);
        }
    }
    out
}

/// The standard analyzer's terms of `s`: what a `text` field indexes and a `match` query
/// looks for.
pub fn terms(s: &str) -> impl Iterator<Item = String> {
    standard(s).into_iter().map(|t| t.text)
}

fn bad(reason: impl Into<String>) -> EsError {
    EsError::new(400, "illegal_argument_exception", reason)
}

/// `GET|POST /_analyze` and `/{index}/_analyze`: `text` (one string) with `analyzer`
/// (`standard`, `keyword`) or, on an index, `field` (a text field analyses as standard,
/// any other as keyword). Anything else the API takes is refused, not ignored.
pub fn analyze(app: &App, req: &Req, index: Option<&str>) -> HandlerResult {
    let body = req.json_body()?.unwrap_or_else(|| json!({}));
    let Some(obj) = body.as_object() else {
        return Err(bad("request body must be an object"));
    };
    if let Some(k) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "text" | "analyzer" | "field"))
    {
        return Err(bad(format!(
            "[_analyze] parameter [{k}] is not supported by the emulator"
        )));
    }
    let text = match obj.get("text") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(_)) => {
            return Err(bad(
                "[_analyze] an array of texts is not supported by the emulator",
            ))
        }
        _ => return Err(bad("text is missing")),
    };
    let analyzer = match (obj.get("analyzer"), obj.get("field")) {
        (Some(_), Some(_)) => {
            return Err(bad(
                "cannot define extra components on a field-specific analyzer",
            ))
        }
        (Some(Value::String(a)), None) => a.clone(),
        (Some(_), None) => return Err(bad("analyzer must be a string")),
        (None, Some(Value::String(f))) => {
            let Some(index) = index else {
                return Err(bad("analysis by field requires an index"));
            };
            let store = app.lock_store();
            let names = resolve_read(&store, index, IndicesOptions::from_req(req)?)?;
            let ty = names
                .first()
                .and_then(|n| store.indices.get(n))
                .and_then(|i| i.mapping.resolve(f).map(|r| r.field.ty));
            if ty == Some(Ty::Text) {
                "standard".into()
            } else {
                "keyword".into()
            }
        }
        (None, Some(_)) => return Err(bad("field must be a string")),
        (None, None) => "standard".into(),
    };
    let tokens = match analyzer.as_str() {
        "standard" => standard(&text),
        "keyword" => vec![Token {
            start: 0,
            end: text.encode_utf16().count(),
            text,
            kind: "word",
            position: 0,
        }],
        other => {
            return Err(bad(format!(
                "failed to find global analyzer [{other}] (the emulator has standard and keyword)"
            )))
        }
    };
    let tokens: Vec<Value> = tokens
        .into_iter()
        .map(|t| {
            json!({"token": t.text, "start_offset": t.start, "end_offset": t.end,
                   "type": t.kind, "position": t.position})
        })
        .collect();
    Ok(Reply::ok(&json!({ "tokens": tokens })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        terms(s).collect()
    }

    #[test]
    fn the_documentations_example() {
        assert_eq!(
            words("The 2 QUICK Brown-Foxes jumped over the lazy dog's bone."),
            [
                "the", "2", "quick", "brown", "foxes", "jumped", "over", "the", "lazy", "dog's",
                "bone"
            ]
        );
    }

    #[test]
    fn names_versions_and_banners_stay_whole_where_uax29_keeps_them() {
        assert_eq!(
            words("example.com 2.4.41 openssh_8.9p1"),
            ["example.com", "2.4.41", "openssh_8.9p1"]
        );
        assert_eq!(
            words("SSH-2.0-OpenSSH_8.9p1 Ubuntu-3"),
            ["ssh", "2.0", "openssh_8.9p1", "ubuntu", "3"]
        );
        assert_eq!(
            words("256 SHA256:abc (ED25519)"),
            ["256", "sha256", "abc", "ed25519"]
        );
    }

    #[test]
    fn offsets_count_utf16_units_and_long_words_are_split() {
        let t = standard("😀 café");
        assert_eq!((t[0].text.as_str(), t[0].start, t[0].end), ("café", 3, 7));
        assert_eq!(t[0].position, 0, "the emoji is no token here");
        let long = "a".repeat(300);
        let t = standard(&long);
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].end, t[1].start, t[1].end), (255, 255, 300));
        assert_eq!(standard("2.4")[0].kind, "<NUM>");
        assert_eq!(standard("中文")[0].kind, "<IDEOGRAPHIC>");
    }
}
