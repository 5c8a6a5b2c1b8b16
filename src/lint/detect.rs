//! Pure text detectors for prompt layouts that defeat prefix caching.
//!
//! A prefix-cache hit needs the token sequence to match from the first token, so
//! per-request content (times, dates, ids, counters) placed early and JSON that
//! serialises differently between requests both cost cache hits. These functions
//! only detect; callers compose the warnings.

use regex::Regex;
use serde_json::Value;
use std::sync::LazyLock;

/// The kind of dynamic-looking content a [`DynamicSpan`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DynamicKind {
    /// A clock time: `13:45`, `9:05:33`, `3:45 PM`.
    Time,
    /// A calendar date, or a full date-and-time timestamp.
    Date,
    /// A UUID (8-4-4-4-12 hex digits).
    Uuid,
    /// A long hexadecimal identifier.
    HexId,
    /// A numbered request/session/turn/... counter.
    Counter,
}

impl DynamicKind {
    /// Short human-readable name: "time", "date", "uuid", "hex id" or "counter".
    pub fn name(self) -> &'static str {
        match self {
            Self::Time => "time",
            Self::Date => "date",
            Self::Uuid => "uuid",
            Self::HexId => "hex id",
            Self::Counter => "counter",
        }
    }
}

/// A piece of text that looks like it changes from request to request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynamicSpan {
    /// Byte offset of the span's first byte in the text.
    pub start: usize,
    /// Byte offset one past the span's last byte.
    pub end: usize,
    /// What the span looks like.
    pub kind: DynamicKind,
    /// The matched text, `text[start..end]`.
    pub text: String,
}

/// Extra test a raw regex match must pass.
#[derive(Clone, Copy)]
enum Check {
    None,
    /// Not glued to a longer number by `.` or `:` (`1.5.2024.3`, `1:23:45:67`).
    NotInNumber,
    /// Holds at least one ASCII digit and one ASCII letter.
    DigitAndLetter,
    /// A bare `#123` not preceded by a word character, `&` or `#`.
    BareHash,
}

static PATTERNS: LazyLock<Vec<(Regex, DynamicKind, Check)>> = LazyLock::new(|| {
    use DynamicKind::*;
    let mon = r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\b\.?";
    let wd = r"(?:(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day|Mon|Tue|Wed|Thu|Fri|Sat|Sun)\b\.?";
    let day = r"(?:3[01]|[12][0-9]|0?[1-9])(?:st|nd|rd|th)?\b";
    let year = r"(?:,?\s+[0-9]{4}\b)?";
    let ampm = r"(?:[AaPp]\.[Mm]\.|[AaPp][Mm]\b)";
    let pats = [
        // ISO timestamp: one Date span.
        (r"\b[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])[T ](?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\.[0-9]+)?)?(?:Z\b|[+-](?:[01][0-9]|2[0-3]):?[0-5][0-9]\b)?".to_string(), Date, Check::NotInNumber),
        (r"\b[0-9]{4}[-/](?:0[1-9]|1[0-2])[-/](?:0[1-9]|[12][0-9]|3[01])\b".to_string(), Date, Check::NotInNumber),
        (r"\b(?:0?[1-9]|[12][0-9]|3[01])/(?:0?[1-9]|[12][0-9]|3[01])/(?:[0-9]{4}|[0-9]{2})\b".to_string(), Date, Check::NotInNumber),
        (r"\b(?:0?[1-9]|[12][0-9]|3[01])\.(?:0?[1-9]|1[0-2])\.[0-9]{4}\b".to_string(), Date, Check::NotInNumber),
        (format!(r"\b(?:{wd},?\s+)?{mon}\s+{day}{year}"), Date, Check::None),
        (format!(r"\b(?:{wd},?\s+)?{day}\s+(?:of\s+)?{mon}{year}"), Date, Check::None),
        (format!(r"\b(?:[01]?[0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\.[0-9]+)?)?Z?\b(?:\s?{ampm})?"), Time, Check::NotInNumber),
        (format!(r"\b(?:1[0-2]|0?[1-9])\s?{ampm}"), Time, Check::NotInNumber),
        (r"(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b".to_string(), Uuid, Check::None),
        (r"(?i)\b0x[0-9a-f]{8,}\b".to_string(), HexId, Check::None),
        (r"(?i)\b[0-9a-f]{12,}\b".to_string(), HexId, Check::DigitAndLetter),
        (r"(?i)\b(?:request|req|session|turn|message|msg|ticket|order|user|id|attempt|(?:visit|view|retry)\s+count)(?:\s+(?:id|number|no\.?|count))?(?:\s*[:=#]\s*#?|\s+#?)[0-9]+\b".to_string(), Counter, Check::None),
        (r"#[0-9]{2,}\b".to_string(), Counter, Check::BareHash),
    ];
    pats.into_iter()
        .map(|(p, kind, check)| {
            // ASCII word boundaries: `日本13:45` still has a boundary before `1`.
            let re = Regex::new(&p.replace(r"\b", r"(?-u:\b)")).expect("valid regex");
            (re, kind, check)
        })
        .collect()
});

fn accept(text: &str, start: usize, end: usize, check: Check) -> bool {
    let b = text.as_bytes();
    let at = |i: Option<usize>| i.and_then(|i| b.get(i)).copied();
    match check {
        Check::None => true,
        Check::NotInNumber => {
            let glued = |sep: Option<u8>, d: Option<u8>| matches!(sep, Some(b'.' | b':')) && d.is_some_and(|d| d.is_ascii_digit());
            !glued(at(start.checked_sub(1)), at(start.checked_sub(2))) && !glued(at(Some(end)), at(Some(end + 1)))
        }
        Check::DigitAndLetter => {
            let m = &b[start..end];
            m.iter().any(u8::is_ascii_digit) && m.iter().any(u8::is_ascii_alphabetic)
        }
        Check::BareHash => !at(start.checked_sub(1)).is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'&' | b'#')),
    }
}

/// Finds times, dates, UUIDs, hex ids and counters in `text`.
///
/// Spans are sorted by start and never overlap; when candidates overlap the longer
/// one wins (ties: the earlier one). A full timestamp such
/// as `2024-05-01T13:45:00Z` is a single [`DynamicKind::Date`] span.
pub fn dynamic_spans(text: &str) -> Vec<DynamicSpan> {
    let mut cands = Vec::new();
    for (re, kind, check) in PATTERNS.iter() {
        for m in re.find_iter(text) {
            if accept(text, m.start(), m.end(), *check) {
                let (start, end, text) = (m.start(), m.end(), m.as_str().to_string());
                cands.push(DynamicSpan { start, end, kind: *kind, text });
            }
        }
    }
    cands.sort_by_key(|c| (c.start, std::cmp::Reverse(c.end - c.start), c.kind as u8));
    let mut picked: Vec<DynamicSpan> = Vec::new();
    for c in cands {
        match picked.last_mut() {
            // Sorted by start, so `c` cannot overlap anything before `last`.
            Some(last) if c.start < last.end => {
                if c.end - c.start > last.end - last.start {
                    *last = c;
                }
            }
            _ => picked.push(c),
        }
    }
    picked
}

/// Canonical JSON: object keys sorted by UTF-8 bytes, no insignificant whitespace,
/// strings and numbers written exactly as serde_json writes them. Equal values give
/// equal strings, independent of serde_json's `preserve_order` feature.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        // Serialising a number or a string cannot fail; the fallback is unreachable.
        Value::Number(n) => out.push_str(&serde_json::to_string(n).unwrap_or_else(|_| "null".into())),
        Value::String(s) => write_str(s, out),
        Value::Array(items) => write_seq(out, '[', ']', items.iter(), write_canonical),
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            write_seq(out, '{', '}', entries.into_iter(), |(key, item), out| {
                write_str(key, out);
                out.push(':');
                write_canonical(item, out);
            });
        }
    }
}

fn write_seq<T>(out: &mut String, open: char, close: char, items: impl Iterator<Item = T>, mut write: impl FnMut(T, &mut String)) {
    out.push(open);
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write(item, out);
    }
    out.push(close);
}

fn write_str(s: &str, out: &mut String) {
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into()));
}

/// Parses `text` as one JSON value (surrounding whitespace allowed) and returns its
/// canonical form; the error is serde_json's message.
pub fn canonicalize_json_text(text: &str) -> Result<String, String> {
    serde_json::from_str::<Value>(text).map(|v| canonical_json(&v)).map_err(|e| e.to_string())
}

/// A JSON object or array embedded in free text (e.g. a tool schema pasted in a system prompt).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonSpan {
    /// Byte offset of the value's first byte (`{` or `[`).
    pub start: usize,
    /// Byte offset one past the value's last byte.
    pub end: usize,
    /// The raw text, `text[start..end]`.
    pub raw: String,
    /// [`canonical_json`] of the parsed value.
    pub canonical: String,
}

/// Texts longer than this are only scanned up to here.
const MAX_SCAN_BYTES: usize = 1 << 20;
/// Parse attempts allowed per [`json_spans`] call.
const MAX_PARSE_ATTEMPTS: usize = 256;
/// Shorter values are not reported.
const MIN_JSON_BYTES: usize = 8;
/// JSON's insignificant whitespace.
const JSON_WS: [char; 4] = [' ', '\t', '\n', '\r'];

/// Finds JSON objects, and arrays of objects, embedded in `text`.
///
/// Only values of at least 8 bytes that contain an object key somewhere are reported;
/// values nested inside a reported (or parsed) value are not reported separately.
/// Work is bounded: at most 256 parse attempts, and only the first MiB is scanned.
pub fn json_spans(text: &str) -> Vec<JsonSpan> {
    let mut limit = text.len().min(MAX_SCAN_BYTES);
    while !text.is_char_boundary(limit) {
        limit -= 1;
    }
    let scan = &text[..limit];
    let (mut spans, mut attempts, mut pos) = (Vec::new(), 0, 0);
    while attempts < MAX_PARSE_ATTEMPTS {
        let Some(off) = scan[pos..].find(['{', '[']) else {
            break;
        };
        let start = pos + off;
        pos = start + 1;
        let array = scan.as_bytes()[start] == b'[';
        if array && !scan[pos..].trim_start_matches(JSON_WS).starts_with('{') {
            continue;
        }
        attempts += 1;
        let mut stream = serde_json::Deserializer::from_str(&scan[start..]).into_iter::<Value>();
        if let Some(Ok(value)) = stream.next() {
            let end = start + stream.byte_offset();
            pos = end;
            if end - start >= MIN_JSON_BYTES && has_key(&value) {
                let (raw, canonical) = (scan[start..end].to_string(), canonical_json(&value));
                spans.push(JsonSpan { start, end, raw, canonical });
            }
        }
    }
    spans
}

fn has_key(value: &Value) -> bool {
    match value {
        Value::Object(map) => !map.is_empty(),
        Value::Array(items) => items.iter().any(has_key),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use DynamicKind::*;

    fn found(text: &str) -> Vec<(DynamicKind, String)> {
        let spans = dynamic_spans(text);
        for s in &spans {
            assert!(text.is_char_boundary(s.start) && text.is_char_boundary(s.end));
            assert_eq!(text[s.start..s.end], s.text);
        }
        assert!(spans.windows(2).all(|w| w[0].end <= w[1].start), "{spans:?}");
        spans.into_iter().map(|s| (s.kind, s.text)).collect()
    }

    /// `marked` holds the expected spans in [brackets]; each must be found as `kind`.
    fn check_marked(kind: DynamicKind, marked: &str) {
        let (mut text, mut want) = (String::new(), Vec::new());
        for (i, part) in marked.split(['[', ']']).enumerate() {
            if i % 2 == 1 {
                want.push((kind, part.to_string()));
            }
            text.push_str(part);
        }
        assert_eq!(found(&text), want, "in {text:?}");
    }

    #[test]
    fn each_kind_is_found() {
        check_marked(
            Time,
            "at [13:45] today; logged [9:05:33] sharp; see you at [3:45 PM]. Call at [10:30 a.m.] \
             or until [5pm] daily; clock [23:59:59.123] ok, [12:00:00Z]; 会議は[13:45]から",
        );
        check_marked(
            Date,
            "Today is [2024-05-01]; due [05/01/2024] at noon; Datum: [1.5.2024]; on [May 1, 2024] \
             we met; on [1 May 2024] we; it is [Monday, May 1] again; [Tue, Dec 3rd] was cold; \
             the [4th of July]; until [Sept. 15]; ts=[2024-05-01T13:45:00Z]; at \
             [2024-05-01 13:45:00.5+02:00] x",
        );
        check_marked(Uuid, "id [550e8400-e29b-41d4-a716-446655440000]. ID=[550E8400-E29B-41D4-A716-446655440000]");
        check_marked(HexId, "trace [a3f9c2e81b7d4f60] done, addr [0x1A2B3C4D], magic [0xdeadbeef].");
        check_marked(
            Counter,
            "This is [request #42]. [Turn 7] of the chat, [user id: 1234], [id: 1234], \
             [session 99] started, see [#1234] for details, [visit count: 5], [Ticket No. 881].",
        );
    }

    #[test]
    fn mixed_text_is_sorted_and_non_overlapping() {
        let text = "Größe ✓ — Monday, May 1, 2024 at 13:45, request #7, trace 9f86d081884c7d65, \
                    uuid 123e4567-e89b-12d3-a456-426614174000.";
        let names: Vec<_> = found(text).into_iter().map(|(k, _)| k.name()).collect();
        assert_eq!(names, ["date", "time", "counter", "hex id", "uuid"]);
    }

    #[test]
    fn not_flagged() {
        for text in [
            "Back in 1998 things were different. I bought 42 apples and 7 pears.",
            "Requires v1.2.3 or Python 3.11. Use a 16:9 aspect ratio. See section 1.2 and 3.4.5.",
            "She faced a deadbeef accountant; deadbeefcafe; 12345678901234 is a number.",
            "May I help you? You may. A short git hash 3f2a9c1 and the word bedded.",
            "Serve on localhost:8080 or 127.0.0.1, build 1.2.2024.7, HTML &#1234; color#12",
            "You are a helpful assistant. Answer concisely and cite your sources.",
            "fn main() { let v = vec![1, 2]; if v[0] > 1 { println!(\"{}\", v[1]); } }",
            "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor \
             incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud \
             exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat. Duis aute irure \
             dolor in reprehenderit in voluptate velit esse cillum dolore eu fugiat nulla pariatur. \
             Excepteur sint occaecat cupidatat non proident, sunt in culpa qui officia deserunt \
             mollit anim id est laborum.",
        ] {
            assert_eq!(found(text), [], "in {text:?}");
        }
        let names = [Time, Date, Uuid, HexId, Counter].map(DynamicKind::name);
        assert_eq!(names, ["time", "date", "uuid", "hex id", "counter"]);
    }

    #[test]
    fn canonical_json_forms() {
        let a = canonicalize_json_text(r#"{"b": 1, "a": [1, 2, {"d": null, "c": true}]}"#);
        let b = canonicalize_json_text("\n {\"a\":[1,2,{\"c\":true,\"d\":null}],\n\"b\":1} ");
        assert_eq!(a, b);
        assert_eq!(a.as_deref(), Ok(r#"{"a":[1,2,{"c":true,"d":null}],"b":1}"#));
        let deep = canonicalize_json_text(r#"{"z":{"y":{"x":[{"b":2,"a":1}]}},"a":-1.5}"#);
        assert_eq!(deep.as_deref(), Ok(r#"{"a":-1.5,"z":{"y":{"x":[{"a":1,"b":2}]}}}"#));
        assert_eq!(canonicalize_json_text("1e3"), canonicalize_json_text("1000.0"));
        let v = json!({"日": 4, "é": 3, "z": 2, "Z": 1});
        assert_eq!(canonical_json(&v), r#"{"Z":1,"z":2,"é":3,"日":4}"#);
        let v = json!({"k\"ey": "a\"b\\c\nd\u{1}/é", "e": [[], {}]});
        assert_eq!(canonical_json(&v), r#"{"e":[[],{}],"k\"ey":"a\"b\\c\nd\u0001/é"}"#);
        assert!(canonicalize_json_text("{oops").is_err_and(|e| !e.is_empty()));
        assert!(canonicalize_json_text("{} trailing").is_err());
    }

    fn raws(text: &str) -> Vec<String> {
        let spans = json_spans(text);
        for s in &spans {
            assert!(text.is_char_boundary(s.start) && text.is_char_boundary(s.end));
            assert_eq!(text[s.start..s.end], s.raw);
            assert_eq!(canonicalize_json_text(&s.raw).as_ref(), Ok(&s.canonical));
        }
        spans.into_iter().map(|s| s.raw).collect()
    }

    #[test]
    fn json_spans_found() {
        let schema = r#"{"name": "get_weather", "parameters": {"type": "object", "required": ["city"]}}"#;
        let text = format!("Größe — 日本語. Tools: {schema}. Use them wisely.");
        assert_eq!(raws(&text), [schema]);
        let want = r#"{"name":"get_weather","parameters":{"required":["city"],"type":"object"}}"#;
        assert_eq!(json_spans(&text)[0].canonical, want);
        let two = r#"A: {"name":"a","x":1} and B: [ {"name": "b"}, {"name": "c"} ] end"#;
        assert_eq!(raws(two), [r#"{"name":"a","x":1}"#, r#"[ {"name": "b"}, {"name": "c"} ]"#]);
        assert_eq!(raws(r#"{"ab":1}"#), [r#"{"ab":1}"#]);
        assert_eq!(raws(r#"x [{"k":[{"n":1}]}] y"#), [r#"[{"k":[{"n":1}]}]"#]);
        // The unterminated outer object is skipped; its complete inner object is found.
        let broken = r#"Schema: {"name": "x", "parameters": {"type": "object"} and more"#;
        assert_eq!(raws(broken), [r#"{"type": "object"}"#]);
    }

    #[test]
    fn json_spans_ignored() {
        for text in [
            "Use {name} and {{placeholder}} and {} here, [see notes] [1, 2, 3].",
            "fn main() { let x = {1}; if a { b[0] = {c: 1}; } }",
            r#"Tiny: {"a":1} and [{}] and [[1], {"k":2} ] and {"x": "unterminated"#,
        ] {
            assert_eq!(raws(text), Vec::<String>::new(), "in {text:?}");
        }
    }

    #[test]
    fn json_work_is_bounded() {
        assert!(json_spans(&"{".repeat(10_000)).is_empty());
        assert!(json_spans(&"[{".repeat(10_000)).is_empty());
        let many = r#"x {"a": 1, "b": 2} "#.repeat(300);
        assert_eq!(json_spans(&many).len(), MAX_PARSE_ATTEMPTS);
        let obj = r#"{"late": true}"#;
        let late = format!("{}{obj}", "é".repeat(MAX_SCAN_BYTES / 2));
        assert!(json_spans(&late).is_empty());
        let early = format!("{obj}{}", "x".repeat(MAX_SCAN_BYTES * 2));
        assert_eq!(json_spans(&early).len(), 1);
    }
}
