//! Prompt-layout lint: the warnings a request gets when it breaks a prompt-cache rule.
//!
//! - `dynamic_before_static`: a clock time, date, id or counter in a message that comes before a
//!   long part that does not change (the rule: static first, dynamic last).
//! - `history_rewritten`: a message in the middle of the conversation changed while later
//!   messages were kept (the rule: history is append-only).
//! - `json_serialization_changed`: a JSON value equal to one sent earlier, serialised differently
//!   (the rule: canonical JSON, tool schemas in a fixed order).
//! - `tools_changed`: the request's tools are not the previous request's, in the same order (the
//!   rule: a fixed set of tools, in a fixed order); it names the first tool that moved or changed.
//!   Tool schemas are rendered canonically, so key order and spacing never count as a change.
//!
//! The last two compare with earlier requests of the same `cache_salt`, kept as hashes in
//! [`History`] (a few requests and a few hundred JSON values: bounded memory).

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};

use super::detect as lint;
use crate::api::{Warning, WarningCode};
use crate::text::prompt::Encoded;
use crate::text::template::Message;
use crate::text::tokenizer::Tokenizer;
use crate::text::tools::ToolSpec;

/// Unchanging tokens after dynamic content from which it is worth a warning.
pub const STATIC_AFTER_DYNAMIC: usize = 64;
/// Earlier requests remembered per salt.
const REQUESTS: usize = 16;
/// JSON values remembered per salt.
const JSON_VALUES: usize = 256;

fn hash<T: Hash + ?Sized>(v: &T) -> u64 {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

fn message_hash(m: &Message) -> u64 {
    hash(&(m.role.as_str(), m.content.as_str()))
}

#[derive(Debug, Default)]
struct SaltHistory {
    /// Message hashes of recent requests, oldest first.
    requests: VecDeque<Vec<u64>>,
    /// Canonical JSON hash → hash of the first serialisation seen.
    json: HashMap<u64, u64>,
    /// The previous request's tools: names and the hash of each one's canonical form.
    tools: Vec<(String, u64)>,
}

/// What the lint computes of a request's messages once, for both the warnings and [`History::record`].
pub struct Seen {
    /// Hash of each message's role and content.
    hashes: Vec<u64>,
    /// The JSON values embedded in each message.
    json: Vec<Vec<lint::JsonSpan>>,
    /// The request's tools: names and the hash of each one's canonical form.
    tools: Vec<(String, u64)>,
}

impl Seen {
    /// What the lint needs of a request's messages and tools.
    pub fn of(messages: &[Message], tools: &[ToolSpec]) -> Seen {
        Seen {
            hashes: messages.iter().map(message_hash).collect(),
            json: messages.iter().map(|m| lint::json_spans(&m.content)).collect(),
            tools: tools.iter().map(|t| (t.name.clone(), hash(&t.template_value().to_string()))).collect(),
        }
    }
}

/// What the lint remembers of earlier requests, per salt.
#[derive(Debug, Default)]
pub struct History {
    salts: HashMap<String, SaltHistory>,
}

impl History {
    /// The warnings for a request: `messages` as sent (`seen` computed from them), `kept` the
    /// indices that head truncation kept, and `enc` their encoding.
    pub fn lint(&self, salt: &str, messages: &[Message], seen: &Seen, kept: &[usize], enc: &Encoded, tok: &Tokenizer) -> Vec<Warning> {
        let h = self.salts.get(salt);
        // A message sent before, unchanged, evidently does not change: its dates are history.
        let unchanged = |i: usize| h.is_some_and(|h| h.requests.iter().any(|r| r.contains(&seen.hashes[i])));
        let mut out = dynamic_before_static(messages, kept, enc, tok, unchanged);
        if let Some(h) = h {
            out.extend(history_rewritten(&h.requests, messages, &seen.hashes));
            out.extend(json_changed(&h.json, messages, &seen.json));
            out.extend(tools_changed(&h.tools, &seen.tools));
        }
        out
    }

    /// Remembers a request that ran.
    pub fn record(&mut self, salt: &str, seen: Seen) {
        if self.salts.len() >= 64 && !self.salts.contains_key(salt) {
            self.salts.clear();
        }
        let h = self.salts.entry(salt.to_string()).or_default();
        // A request without tools leaves the previous tools as the ones to compare with.
        if !seen.tools.is_empty() {
            h.tools = seen.tools;
        }
        h.requests.push_back(seen.hashes);
        if h.requests.len() > REQUESTS {
            h.requests.pop_front();
        }
        for s in seen.json.iter().flatten() {
            if h.json.len() >= JSON_VALUES {
                h.json.clear();
            }
            h.json.entry(hash(&s.canonical)).or_insert(hash(&s.raw));
        }
    }
}

/// `tools_changed`: the tools differ from the previous request's (with tools) of the salt: the
/// first position where the name or the schema differs, which is the first tool whose tokens
/// (and every token after them) are recomputed.
fn tools_changed(before: &[(String, u64)], now: &[(String, u64)]) -> Option<Warning> {
    if before.is_empty() || now.is_empty() || before == now {
        return None;
    }
    let i = before.iter().zip(now).position(|(a, b)| a != b).unwrap_or(before.len().min(now.len()));
    let detail = match (before.get(i), now.get(i)) {
        (Some(a), Some(b)) if a.0 != b.0 => match before.iter().position(|t| t.0 == b.0) {
            Some(j) => format!(
                "tool {:?} moved from position {j} to {i} (where {:?} was): every token from there on is recomputed. \
                 Send the same tools in the same order every time.",
                b.0, a.0
            ),
            None => format!(
                "tool {:?} at position {i} is new (the previous request had {:?} there): every token from there on is recomputed. \
                 Send the same tools in the same order every time; add new ones at the end.",
                b.0, a.0
            ),
        },
        (Some(a), Some(_)) => {
            format!("tool {:?} (position {i}) has another description or schema than before: every token from there on is recomputed.", a.0)
        }
        (Some(a), None) => format!("tool {:?} (position {i}) and those after it were dropped from the tools.", a.0),
        (None, Some(b)) => {
            format!("tool {:?} was added at position {i}, after the previous tools (only what follows it is recomputed).", b.0)
        }
        (None, None) => return None,
    };
    Some(Warning { code: WarningCode::ToolsChanged, message: None, detail })
}

/// The current year (UTC), for telling today's dates from historical ones.
fn current_year() -> i64 {
    #[cfg(target_arch = "wasm32")]
    {
        js_sys::Date::new_0().get_utc_full_year() as i64
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        1970 + (secs as f64 / (365.2425 * 86400.0)) as i64
    }
}

/// Whether a dynamic-looking span may really change between requests: a date naming a year far
/// from this one is history (a document's dates), not today's date.
fn looks_current(span: &lint::DynamicSpan, year: i64) -> bool {
    if span.kind != lint::DynamicKind::Date {
        return true;
    }
    let years: Vec<i64> = span.text.split(|c: char| !c.is_ascii_digit()).filter(|d| d.len() == 4).filter_map(|d| d.parse().ok()).collect();
    years.is_empty() || years.iter().any(|y| (y - year).abs() <= 1)
}

fn dynamic_before_static(
    messages: &[Message],
    kept: &[usize],
    enc: &Encoded,
    tok: &Tokenizer,
    unchanged: impl Fn(usize) -> bool,
) -> Vec<Warning> {
    let mut out = Vec::new();
    let Some(last) = enc.contents.last() else { return out };
    let year = current_year();
    // The last message is where dynamic content belongs: only what precedes it counts as static.
    for (k, &i) in kept.iter().enumerate().take(enc.contents.len() - 1) {
        let content = &messages[i].content;
        // An assistant message is the model's own answer sent back: history that does not change,
        // even the first time it comes back (when no earlier request held it yet).
        if unchanged(i) || messages[i].role == "assistant" {
            continue;
        }
        // Only the text the template kept counts (not a `<think>` block Qwen3's drops).
        let lead = enc.lead_bytes(k, content);
        let Some(span) = lint::dynamic_spans(&content[lead..]).into_iter().find(|s| looks_current(s, year)) else { continue };
        // The span's token: the one that holds its first byte (not counting the template's text
        // the content's first token may hold).
        let at = enc.token_at(k, span.start, tok, content);
        let after = last.start.saturating_sub(at);
        if after < STATIC_AFTER_DYNAMIC {
            continue;
        }
        let chars = content[..lead + span.start].chars().count();
        out.push(Warning {
            code: WarningCode::DynamicBeforeStatic,
            message: Some(i),
            detail: format!(
                "message {i} ({}) has a {} ({:?}, character {chars}) before {after} tokens that look static; \
                 when it changes, every token after it is recomputed. Put static content (system prompt, documents, \
                 tool schemas) first and values that change (names, times, ids) in the last message.",
                messages[i].role,
                span.kind.name(),
                span.text
            ),
        });
    }
    out
}

fn history_rewritten(requests: &VecDeque<Vec<u64>>, messages: &[Message], now: &[u64]) -> Option<Warning> {
    // The earlier request sharing the most leading messages (the latest on ties).
    let (k, prev) = requests.iter().rev().map(|r| (r.iter().zip(now).take_while(|(a, b)| a == b).count(), r)).max_by_key(|(k, _)| *k)?;
    if k >= prev.len() || k >= now.len() {
        return None; // appended to (or repeated) an earlier request
    }
    // Message k was replaced, not dropped (a client dropping old turns sends a later message of
    // the earlier request in its place), and a later earlier-message survives after it.
    if prev[k..].contains(&now[k]) {
        return None;
    }
    let kept_later = prev[k + 1..].iter().any(|h| now[k + 1..].contains(h));
    if !kept_later {
        return None;
    }
    Some(Warning {
        code: WarningCode::HistoryRewritten,
        message: Some(k),
        detail: format!(
            "message {k} ({}) differs from an earlier request's message {k}, while messages after it were kept: \
             the history was rewritten in the middle, so everything from message {k} on is recomputed. \
             Append new turns instead; to shorten a conversation, drop the oldest turns.",
            messages[k].role
        ),
    })
}

fn json_changed(seen: &HashMap<u64, u64>, messages: &[Message], spans: &[Vec<lint::JsonSpan>]) -> Vec<Warning> {
    let mut out = Vec::new();
    for ((i, m), spans) in messages.iter().enumerate().zip(spans) {
        for s in spans {
            if seen.get(&hash(&s.canonical)).is_some_and(|&raw| raw != hash(&s.raw)) {
                let chars = m.content[..s.start].chars().count();
                out.push(Warning {
                    code: WarningCode::JsonSerializationChanged,
                    message: Some(i),
                    detail: format!(
                        "message {i} ({}) has a JSON value (character {chars}) equal to one sent earlier but serialised \
                         differently (key order or spacing), so its tokens differ and the cache misses from there. \
                         Serialise JSON and tool schemas canonically (hotprefix's canonical JSON: sorted keys, no spaces).",
                        m.role
                    ),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(v: &[(&str, &str)]) -> Vec<Message> {
        v.iter().map(|(r, c)| Message::new(*r, *c)).collect()
    }

    fn rewrite_of(h: &VecDeque<Vec<u64>>, m: &[Message]) -> Option<Warning> {
        history_rewritten(h, m, &Seen::of(m, &[]).hashes)
    }

    fn changed(seen: &HashMap<u64, u64>, m: &[Message]) -> Vec<Warning> {
        json_changed(seen, m, &Seen::of(m, &[]).json)
    }

    /// A model file of `models/archs/`: its tokenizer and chat template.
    fn arch(name: &str) -> (Tokenizer, crate::text::template::ChatTemplate) {
        let path = format!("{}/models/archs/{name}", env!("CARGO_MANIFEST_DIR"));
        let file = std::fs::read(&path).unwrap_or_else(|e| panic!("missing test data: {path} ({e}); run scripts/make-archs.sh"));
        let g = crate::model::gguf::Gguf::parse(&file).unwrap();
        (Tokenizer::from_gguf(&g).unwrap(), crate::text::template::ChatTemplate::for_gguf(&g).unwrap().unwrap())
    }

    /// A span's token is the one that holds its first byte, whatever template text the content's
    /// first token holds (SentencePiece's `▁Alice` after Llama-2's `[INST] `).
    #[test]
    fn a_spans_token_does_not_count_the_templates_text() {
        let (tok, template) = arch("tiny-spm-prefix.gguf");
        let p = crate::text::prompt::Prompter { template: Some(&template), tokenizer: &tok, tools: None, vars: None };
        let first = format!("Alice 09:14 {}", "the canal has seven locks and a lake. ".repeat(8));
        let messages = vec![Message::new("user", first), Message::new("assistant", "ok"), Message::new("user", "and?")];
        let enc = p.encode(&messages).unwrap();
        let r = enc.contents[0].clone();
        let zero = (r.start..r.end).find(|&t| tok.token_bytes(enc.ids[t]).unwrap().contains(&b'0')).unwrap();
        let w = dynamic_before_static(&messages, &[0, 1, 2], &enc, &tok, |_| false);
        assert_eq!(w.len(), 1, "{w:?}");
        let after = enc.contents[2].start - zero;
        assert!(w[0].detail.contains(&format!("before {after} tokens")), "the time's token is {zero}: {}", w[0].detail);
    }

    /// An assistant reply sent back in the next request, unchanged as chat clients send it, holds
    /// a time before many tokens: it is the model's answer, history that never changes, and is not
    /// flagged the first time it comes back. A user message with the same text is flagged.
    #[test]
    fn an_assistant_reply_sent_back_is_not_dynamic() {
        let tok = Tokenizer::from_gguf(&crate::model::gguf::Gguf::parse(&crate::check::testmodel::tiny_gguf(1)).unwrap()).unwrap();
        let template = crate::text::template::ChatTemplate::from_gguf(
            &crate::model::gguf::Gguf::parse(&crate::check::testmodel::tiny_gguf(1)).unwrap(),
        )
        .unwrap();
        let p = crate::text::prompt::Prompter { template: Some(&template), tokenizer: &tok, tools: None, vars: None };
        let mut h = History::default();
        let first = msgs(&[("user", "When is the meeting?")]);
        h.record("", Seen::of(&first, &[]));
        let long = "Bring the quarterly report and the slides. ".repeat(4);
        let warned = |role: &str, text: &str| {
            let second = vec![Message::new("user", "When is the meeting?"), Message::new(role, text), Message::new("user", "Thanks.")];
            let enc = p.encode(&second).unwrap();
            let w = h.lint("", &second, &Seen::of(&second, &[]), &[0, 1, 2], &enc, &tok);
            w.iter().any(|w| w.code == WarningCode::DynamicBeforeStatic)
        };
        let reply = format!("The meeting is at 09:14 in room four. {long}");
        assert!(!warned("assistant", &reply), "an unchanged assistant reply");
        assert!(warned("user", &reply), "the same text from the user");
    }

    #[test]
    fn historical_dates_are_not_dynamic() {
        let spans = lint::dynamic_spans("It opened on August 15, 1914. Today is 2026-11-30, it is 09:14.");
        let current: Vec<&str> = spans.iter().filter(|s| looks_current(s, 2026)).map(|s| s.text.as_str()).collect();
        assert_eq!(current, ["2026-11-30", "09:14"]);
    }

    #[test]
    fn a_replaced_middle_message_is_a_rewrite_a_dropped_turn_is_not() {
        let mut h = VecDeque::new();
        let first = msgs(&[("system", "S"), ("user", "u1"), ("assistant", "a1"), ("user", "u2")]);
        h.push_back(Seen::of(&first, &[]).hashes);
        // Appended: fine.
        let appended = msgs(&[("system", "S"), ("user", "u1"), ("assistant", "a1"), ("user", "u2"), ("assistant", "a2"), ("user", "u3")]);
        assert_eq!(rewrite_of(&h, &appended), None);
        // The system prompt changed, the rest kept: a rewrite at message 0.
        let rewritten =
            msgs(&[("system", "S at 12:01"), ("user", "u1"), ("assistant", "a1"), ("user", "u2"), ("assistant", "a2"), ("user", "u3")]);
        assert_eq!(rewrite_of(&h, &rewritten).map(|w| (w.code, w.message)), Some((WarningCode::HistoryRewritten, Some(0))));
        // The oldest turn dropped: head truncation by the client, not a rewrite.
        let dropped = msgs(&[("system", "S"), ("user", "u2"), ("assistant", "a2"), ("user", "u3")]);
        assert_eq!(rewrite_of(&h, &dropped), None);
        // Another conversation entirely: not a rewrite either.
        let other = msgs(&[("system", "S"), ("user", "v1")]);
        assert_eq!(rewrite_of(&h, &other), None);
    }

    #[test]
    fn json_serialised_differently_is_flagged() {
        let mut h = History::default();
        h.record("", Seen::of(&msgs(&[("system", r#"Tools: {"name": "get", "parameters": {"type": "object"}}"#)]), &[]));
        let seen = &h.salts[""].json;
        let same = msgs(&[("system", r#"Tools: {"name": "get", "parameters": {"type": "object"}}"#)]);
        assert!(changed(seen, &same).is_empty());
        let reordered = msgs(&[("system", r#"Tools: {"parameters": {"type": "object"}, "name": "get"}"#)]);
        let w = changed(seen, &reordered);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].code, WarningCode::JsonSerializationChanged);
    }
}
