//! Prompt-layout lint: text detectors for layouts that defeat prefix caching and canonical JSON
//! (`detect`), and the rules that turn them into a request's warnings (`rules`).

mod detect;
pub(crate) mod rules;

pub use detect::{canonical_json, canonicalize_json_text, dynamic_spans, json_spans, DynamicKind, DynamicSpan, JsonSpan};
