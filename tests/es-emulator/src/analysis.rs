//! Text analysis as Elasticsearch's built-in analyzers do it — `standard` (words at Unicode
//! UAX #29 word boundaries, as Lucene's StandardTokenizer finds them), `simple` (runs of
//! letters, as Lucene's LetterTokenizer) and `keyword` (the whole text) — lower-cased code
//! point by code point as Lucene's LowerCaseFilter does, a token longer than 255 characters
//! split there, and the `_analyze` API over them. Other analyzers are refused by name.
//!
//! Known differences from Lucene: emoji and other words without a letter or digit are not
//! standard tokens here (Lucene emits `<EMOJI>`), and standard token types are `<ALPHANUM>`,
//! `<NUM>` and `<IDEOGRAPHIC>` only.

use serde_json::{json, Value};
use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};
use unicode_segmentation::UnicodeSegmentation;

use crate::app::App;
use crate::error::EsError;
use crate::http::{HandlerResult, Reply, Req};
use crate::mapping::Ty;
use crate::resolve::{resolve_read, IndicesOptions};
use crate::settings::setting;

/// Longest token, in characters (`max_token_length` of the standard and letter tokenizers).
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

/// The built-in analyzers the emulator implements; a mapping or `_analyze` naming any other
/// is refused rather than analysed some other way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Analyzer {
    #[default]
    Standard,
    Simple,
    Keyword,
}

impl Analyzer {
    pub fn parse(name: &str) -> Option<Analyzer> {
        match name {
            "standard" | "default" => Some(Analyzer::Standard),
            "simple" => Some(Analyzer::Simple),
            "keyword" => Some(Analyzer::Keyword),
            _ => None,
        }
    }

    /// What the emulator says of an analyzer it does not have, whether Elasticsearch has it
    /// built in (`whitespace`, `english`, …) or not at all.
    pub const IMPLEMENTED: &'static str = "the emulator implements standard, simple and keyword";

    pub fn name(self) -> &'static str {
        match self {
            Analyzer::Standard => "standard",
            Analyzer::Simple => "simple",
            Analyzer::Keyword => "keyword",
        }
    }

    /// The tokens of `s` with offsets and types, as `_analyze` shows them.
    pub fn tokens(self, s: &str) -> Vec<Token> {
        match self {
            Analyzer::Standard => split_long(s, s.unicode_word_indices(), standard_kind),
            Analyzer::Simple => split_long(s, letter_runs(s), |_| "word"),
            Analyzer::Keyword => vec![Token {
                start: 0,
                end: s.encode_utf16().count(),
                text: s.to_owned(),
                kind: "word",
                position: 0,
            }],
        }
    }

    /// The terms of `s`: what a `text` field indexes and a `match` query looks for.
    pub fn terms(self, s: &str) -> impl Iterator<Item = String> {
        self.tokens(s).into_iter().map(|t| t.text)
    }
}

fn standard_kind(word: &str) -> &'static str {
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

/// Maximal runs of letters (general category L, as Java's `Character.isLetter`).
fn letter_runs(s: &str) -> impl Iterator<Item = (usize, &str)> {
    let is_letter = |c: char| c.general_category_group() == GeneralCategoryGroup::Letter;
    let mut rest = s.char_indices().peekable();
    std::iter::from_fn(move || {
        let (start, _) = rest.find(|&(_, c)| is_letter(c))?;
        let mut end = s.len();
        while let Some(&(i, c)) = rest.peek() {
            if !is_letter(c) {
                end = i;
                break;
            }
            rest.next();
        }
        Some((start, &s[start..end]))
    })
}

/// Lower-cases one code point at a time, as Java's `Character.toLowerCase(int)`: a simple
/// one-to-one mapping, so a final sigma stays `σ` and `İ` becomes `i`.
fn java_lowercase(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\u{130}' => 'i',
            c => c.to_lowercase().next().unwrap_or(c),
        })
        .collect()
}

/// Tokens of the words found at their byte offsets, lower-cased, each word longer than
/// [`MAX_TOKEN_LENGTH`] characters cut into pieces of at most that length.
fn split_long<'a>(
    s: &str,
    words: impl Iterator<Item = (usize, &'a str)>,
    kind: fn(&str) -> &'static str,
) -> Vec<Token> {
    let mut out = Vec::new();
    let utf16_at = |byte: usize| s[..byte].encode_utf16().count();
    for (at, word) in words {
        let mut rest = (at, word);
        loop {
            let (start, piece) = rest;
            let cut = piece
                .char_indices()
                .nth(MAX_TOKEN_LENGTH)
                .map_or(piece.len(), |(i, _)| i);
            let head = &piece[..cut];
            out.push(Token {
                text: java_lowercase(head),
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

fn bad(reason: impl Into<String>) -> EsError {
    EsError::new(400, "illegal_argument_exception", reason)
}

/// Most tokens `_analyze` returns, unless the index sets `index.analyze.max_token_count`.
const MAX_TOKEN_COUNT: usize = 10_000;

/// `GET|POST /_analyze` and `/{index}/_analyze`: `text` (one string) with `analyzer` or,
/// on an index, `field`; at most `index.analyze.max_token_count` tokens. Anything else the API takes
/// (`explain` once the count is checked) is refused, not ignored.
pub fn analyze(app: &App, req: &Req, index: Option<&str>) -> HandlerResult {
    let body = req.json_body()?.unwrap_or_else(|| json!({}));
    let Some(obj) = body.as_object() else {
        return Err(bad("request body must be an object"));
    };
    if let Some(k) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "text" | "analyzer" | "field" | "explain"))
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
    // The index's field analyzer and token limit, read under one short lock.
    let (field_analyzer, limit) = match index {
        None => (None, MAX_TOKEN_COUNT),
        Some(index) => {
            let store = app.lock_store();
            let names = resolve_read(&store, index, IndicesOptions::from_req(req)?)?;
            let idx = names.first().and_then(|n| store.indices.get(n));
            let field = obj.get("field").and_then(Value::as_str);
            // As Elasticsearch: a text field's analyzer, keyword for a keyword field, the
            // index default for an unmapped one; other types have no analysis.
            let analyzer = match (idx, field) {
                (Some(i), Some(f)) => Some(match i.mapping.field_ref(f) {
                    None => Analyzer::Standard,
                    Some(r) if r.ty == Ty::Keyword => Analyzer::Keyword,
                    Some(r) => r.analyzers.map(|(index, _)| index).ok_or_else(|| {
                        bad(format!("Can't process field [{f}], Analysis requests are only supported on tokenized fields"))
                    })?,
                }),
                _ => None,
            };
            let limit = idx
                .and_then(|i| setting(&i.settings, "analyze.max_token_count"))
                .and_then(Value::as_str)
                .and_then(|v| v.parse().ok())
                .unwrap_or(MAX_TOKEN_COUNT);
            (analyzer, limit)
        }
    };
    let analyzer = match (obj.get("analyzer"), obj.get("field")) {
        (Some(_), Some(_)) => {
            return Err(bad(
                "cannot define extra components on a field-specific analyzer",
            ))
        }
        (Some(Value::String(a)), None) => Analyzer::parse(a).ok_or_else(|| {
            bad(format!(
                "failed to find global analyzer [{a}] ({})",
                Analyzer::IMPLEMENTED
            ))
        })?,
        (Some(_), None) => return Err(bad("analyzer must be a string")),
        (None, Some(Value::String(_))) => {
            field_analyzer.ok_or_else(|| bad("analysis by field requires an index"))?
        }
        (None, Some(_)) => return Err(bad("field must be a string")),
        (None, None) => Analyzer::Standard,
    };
    let tokens = analyzer.tokens(&text);
    if tokens.len() > limit {
        return Err(bad(format!(
            "The number of tokens produced by calling _analyze has exceeded the allowed maximum of [{limit}]. This limit can be set by changing the [index.analyze.max_token_count] index level setting."
        )));
    }
    if obj.get("explain").is_some_and(|e| e != &json!(false)) {
        return Err(bad("[_analyze] explain is not supported by the emulator"));
    }
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
        Analyzer::Standard.terms(s).collect()
    }

    fn letters(s: &str) -> Vec<String> {
        Analyzer::Simple.terms(s).collect()
    }

    fn standard(s: &str) -> Vec<Token> {
        Analyzer::Standard.tokens(s)
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

    /// Elasticsearch's reference for the simple analyzer: "The 2 QUICK Brown-Foxes jumped
    /// over the lazy dog's bone." gives `[the, quick, brown, foxes, jumped, over, the, lazy,
    /// dog, s, bone]`.
    #[test]
    fn simple_the_documentations_example() {
        assert_eq!(
            letters("The 2 QUICK Brown-Foxes jumped over the lazy dog's bone."),
            [
                "the", "quick", "brown", "foxes", "jumped", "over", "the", "lazy", "dog", "s",
                "bone"
            ]
        );
    }

    /// Lucene's `TestAnalyzers.testSimple` (lucene/analysis/common, core package).
    #[test]
    fn simple_as_lucenes_test_analyzers() {
        let cases: &[(&str, &[&str])] = &[
            ("foo bar FOO BAR", &["foo", "bar", "foo", "bar"]),
            ("foo      bar .  FOO <> BAR", &["foo", "bar", "foo", "bar"]),
            ("foo.bar.FOO.BAR", &["foo", "bar", "foo", "bar"]),
            ("U.S.A.", &["u", "s", "a"]),
            ("C++", &["c"]),
            ("B2B", &["b", "b"]),
            ("2B", &["b"]),
            ("\"QUOTED\" word", &["quoted", "word"]),
        ];
        for (text, want) in cases {
            assert_eq!(letters(text), *want, "{text}");
        }
    }

    /// What scanstore relies on: the letters of a banner's words are found on their own.
    #[test]
    fn simple_splits_banners_into_letter_runs() {
        assert_eq!(
            letters("SSH-2.0-OpenSSH_8.9p1 Ubuntu-3ubuntu0.1"),
            ["ssh", "openssh", "p", "ubuntu", "ubuntu"]
        );
        assert!(letters("2.4.41").is_empty());
        let t = Analyzer::Simple.tokens("ΣΟΦΟΣ İx");
        assert_eq!(
            t[0].text, "σοφοσ",
            "code point by code point: no final sigma"
        );
        assert_eq!(t[1].text, "ix");
        assert_eq!((t[1].start, t[1].end, t[1].kind), (6, 8, "word"));
        let long = Analyzer::Simple.tokens(&"b".repeat(300));
        assert_eq!((long.len(), long[1].start), (2, 255));
    }

    #[test]
    fn keyword_keeps_the_text_whole_and_unknown_analyzers_are_refused() {
        let t = Analyzer::Keyword.tokens("Foo Bar");
        assert_eq!((t.len(), t[0].text.as_str()), (1, "Foo Bar"));
        assert_eq!(Analyzer::parse("default"), Some(Analyzer::Standard));
        assert_eq!(Analyzer::parse("whitespace"), None);
        assert_eq!(Analyzer::parse("english"), None);
    }
}
