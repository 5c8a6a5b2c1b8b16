//! Tools and structured output on the text side: the JSON Schema keywords a response may be
//! constrained with, the canonical form tool schemas are rendered in (so that equal tools give
//! equal prompt tokens), how tool calls are written (`<tool_call>` … `</tool_call>` around
//! `{"name": …, "arguments": …}`: Qwen2.5/3's, Hermes' and SmolLM3's format, and the convention
//! hotprefix writes into the system prompt for a template that takes no tools), the grammars that
//! constrain them, and the parser that splits generated text into content and calls as it
//! streams.

use serde_json::{Map, Value};

/// The tag that opens a tool call in the output.
pub const CALL_OPEN: &str = "<tool_call>";
/// The tag that closes it.
pub const CALL_CLOSE: &str = "</tool_call>";

/// JSON Schema keywords the grammar engine enforces (llguidance 1.9's `IMPLEMENTED`).
const ENFORCED: [&str; 27] = [
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "const",
    "enum",
    "type",
    "items",
    "additionalItems",
    "prefixItems",
    "minItems",
    "maxItems",
    "properties",
    "additionalProperties",
    "patternProperties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
];

/// Keywords that annotate and constrain nothing (llguidance's `META_AND_ANNOTATIONS`, and
/// `deprecated`), accepted anywhere.
const ANNOTATIONS: [&str; 16] = [
    "$anchor",
    "$defs",
    "definitions",
    "$schema",
    "$id",
    "id",
    "$comment",
    "title",
    "description",
    "default",
    "readOnly",
    "writeOnly",
    "examples",
    "contentMediaType",
    "contentEncoding",
    "deprecated",
];

/// Checks that every keyword of `schema` is one the engine enforces or an annotation, so that no
/// constraint is silently dropped (a misspelt `maxLenght` included). `at` names the schema in the
/// message (`response_format.json_schema.schema`); the error names the keyword and where it is.
pub fn check_schema(schema: &Value, at: &str) -> Result<(), String> {
    match schema {
        Value::Bool(_) => Ok(()),
        Value::Object(m) => {
            for (k, v) in m {
                let here = format!("{at}.{k}");
                if !ENFORCED.contains(&k.as_str()) && !ANNOTATIONS.contains(&k.as_str()) {
                    return Err(format!("{at}: the JSON Schema keyword `{k}` is not supported (it would not be enforced)"));
                }
                match k.as_str() {
                    // A schema each.
                    "items" | "additionalItems" | "additionalProperties" => check_schema(v, &here)?,
                    // A map of schemas.
                    "properties" | "patternProperties" | "$defs" | "definitions" => match v {
                        Value::Object(props) => {
                            for (name, s) in props {
                                check_schema(s, &format!("{here}.{name}"))?;
                            }
                        }
                        _ => return Err(format!("{here} must be an object")),
                    },
                    // A list of schemas.
                    "anyOf" | "oneOf" | "allOf" | "prefixItems" => match v {
                        Value::Array(items) => {
                            for (i, s) in items.iter().enumerate() {
                                check_schema(s, &format!("{here}[{i}]"))?;
                            }
                        }
                        _ => return Err(format!("{here} must be an array")),
                    },
                    _ => {}
                }
            }
            Ok(())
        }
        other => Err(format!("{at} must be a JSON Schema object or boolean, not {other}")),
    }
}

/// `v` with every object's keys in code-point order, at every depth: equal values, however their
/// keys were ordered, give the same JSON text.
pub fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for k in keys {
                out.insert(k.clone(), canonical(&m[k]));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// JSON as Python's `json.dumps(v, ensure_ascii=False)` writes it (", " and ": "), which Hugging
/// Face's `tojson` filter writes into a template and models were trained on.
pub fn python_json(v: &Value) -> String {
    PyJson::default().dumps(v)
}

/// The options of Python's `json.dumps` that Hugging Face's `tojson` filter passes on (`indent`,
/// `separators`, `ensure_ascii`, `sort_keys`), with its defaults: written here because no crate
/// writes JSON as Python does (its separators, its `repr` of floats, `\uXXXX` escapes).
#[derive(Clone, Debug, Default)]
pub struct PyJson {
    /// Newline and this indent per level (Python's `indent`: a number of spaces, or a string).
    pub indent: Option<String>,
    /// The item and key separators (Python's default: `", "` and `": "`, or `","` and `": "`
    /// with an indent).
    pub separators: Option<(String, String)>,
    /// Every character past ASCII as `\uXXXX` (surrogate pairs past the BMP).
    pub ensure_ascii: bool,
    /// Objects' keys in code point order.
    pub sort_keys: bool,
}

impl PyJson {
    /// `v` as `json.dumps` writes it with these options.
    pub fn dumps(&self, v: &Value) -> String {
        let mut out = String::new();
        self.write(v, 0, &mut out);
        out
    }

    fn seps(&self) -> (&str, &str) {
        match &self.separators {
            Some((i, k)) => (i, k),
            None if self.indent.is_some() => (",", ": "),
            None => (", ", ": "),
        }
    }

    fn newline(&self, level: usize, out: &mut String) {
        if let Some(ind) = &self.indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(ind);
            }
        }
    }

    fn write(&self, v: &Value, level: usize, out: &mut String) {
        let (item_sep, key_sep) = self.seps();
        match v {
            Value::Object(m) if !m.is_empty() => {
                let mut entries: Vec<(&String, &Value)> = m.iter().collect();
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                }
                out.push('{');
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push_str(item_sep);
                    }
                    self.newline(level + 1, out);
                    self.string(k, out);
                    out.push_str(key_sep);
                    self.write(v, level + 1, out);
                }
                self.newline(level, out);
                out.push('}');
            }
            Value::Array(a) if !a.is_empty() => {
                out.push('[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push_str(item_sep);
                    }
                    self.newline(level + 1, out);
                    self.write(v, level + 1, out);
                }
                self.newline(level, out);
                out.push(']');
            }
            Value::Object(_) => out.push_str("{}"),
            Value::Array(_) => out.push_str("[]"),
            Value::String(s) => self.string(s, out),
            Value::Number(n) => match n.as_f64().filter(|_| n.is_f64()) {
                Some(f) => out.push_str(&python_float(f)),
                None => out.push_str(&n.to_string()),
            },
            other => out.push_str(&other.to_string()),
        }
    }

    /// A string as Python's `json` encoder escapes it.
    fn string(&self, s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && (c as u32) > 0x7e) => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{:04x}", u));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// A float as Python's `repr` writes it (the shortest digits that read back, as Rust's; fixed
/// notation for exponents −4 to 15, else `1e-05`, `1.5e+16`).
pub fn python_float(f: f64) -> String {
    if !f.is_finite() {
        return (if f.is_nan() {
            "NaN"
        } else if f > 0.0 {
            "Infinity"
        } else {
            "-Infinity"
        })
        .into();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let body = if exp < 0 {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        } else {
            let int_len = exp as usize + 1;
            if digits.len() > int_len {
                format!("{}.{}", &digits[..int_len], &digits[int_len..])
            } else {
                format!("{digits}{}.0", "0".repeat(int_len - digits.len()))
            }
        };
        format!("{sign}{body}")
    } else {
        format!("{sign}{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}

/// One function a request offers the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    /// Its name (`^[A-Za-z0-9_-]{1,64}$`).
    pub name: String,
    /// What it does, for the model.
    pub description: Option<String>,
    /// The JSON Schema of its arguments (an object schema; `{"type": "object"}` when absent).
    pub parameters: Value,
}

impl ToolSpec {
    /// The tool as a template's `tools` entry: `{"type": "function", "function": {"name",
    /// "description", "parameters"}}` in that order, the parameters canonical.
    pub fn template_value(&self) -> Value {
        let mut f = Map::new();
        f.insert("name".into(), Value::String(self.name.clone()));
        if let Some(d) = &self.description {
            f.insert("description".into(), Value::String(d.clone()));
        }
        f.insert("parameters".into(), canonical(&self.parameters));
        let mut t = Map::new();
        t.insert("type".into(), Value::String("function".into()));
        t.insert("function".into(), Value::Object(f));
        Value::Object(t)
    }
}

/// The system text hotprefix writes for a model whose template takes no tools: the tools (one
/// canonical JSON line each, in the request's order) and how to call them, in the format Qwen2.5
/// and Hermes models were trained on. It goes at the end of the first system message (a system
/// message of its own when there is none): the static part of the prompt.
pub fn tools_system_text(tools: &[ToolSpec]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for t in tools {
        s.push('\n');
        s.push_str(&python_json(&t.template_value()));
    }
    s.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within \
         <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    s
}

/// Whether a chat template renders the `tools` it is given, in the `<tool_call>` format (Qwen2.5,
/// Qwen3, Hermes, SmolLM3): then tools, assistant tool calls and tool results go through it.
pub fn template_takes_tools(source: &str) -> bool {
    source.contains("tools") && source.contains(CALL_OPEN)
}

/// Options of the JSON the grammar lets the model write: no free whitespace (a model cannot loop
/// on it), separators as Python's `json.dumps` writes them.
fn json_options() -> Value {
    serde_json::json!({"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": false})
}

/// The JSON Schema a `response_format` constrains the answer to, with the grammar's options:
/// `schema` for `json_schema`, any object for `json_object`.
pub fn response_schema(schema: Option<&Value>) -> Value {
    let mut s = match schema {
        Some(Value::Object(m)) => Value::Object(m.clone()),
        Some(Value::Bool(true)) | None => serde_json::json!({"type": "object"}),
        Some(other) => serde_json::json!({"allOf": [other]}),
    };
    if let Value::Object(m) = &mut s {
        m.insert("x-guidance".into(), json_options());
    }
    s
}

/// Every local `$ref` of tool `i`'s parameters `v` pointed at where call_schema puts its target:
/// `#/$defs/X…` at `t{i}_X…`, `#/definitions/X…` at `t{i}d_X…`, and any other ref from the
/// parameters' root (`#`, `#/properties/a`: zod's form) under `t{i}`, the parameters themselves.
/// Literal values (`const`, `enum`, `default`, `examples`) are data, not schemas: left as they are.
/// Returns whether a ref reaches into the root (the parameters must then be a definition).
fn rewrite_refs(v: &mut Value, i: usize) -> bool {
    let mut root = false;
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match (k.as_str(), x) {
                    ("$ref", Value::String(r)) => {
                        let to = if let Some(rest) = r.strip_prefix("#/$defs/") {
                            format!("#/$defs/t{i}_{rest}")
                        } else if let Some(rest) = r.strip_prefix("#/definitions/") {
                            format!("#/$defs/t{i}d_{rest}")
                        } else if r == "#" || r.starts_with("#/") {
                            root = true;
                            format!("#/$defs/t{i}{}", &r[1..])
                        } else {
                            continue;
                        };
                        *r = to;
                    }
                    ("const" | "enum" | "default" | "examples", _) => {}
                    (_, x) => root |= rewrite_refs(x, i),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| root |= rewrite_refs(x, i)),
        _ => {}
    }
    root
}

/// A tool's parameters placed inside a call's schema, and the definitions they refer to: a
/// schema's `$ref`s point from its root (`#/$defs/X`, Pydantic's form; `#/properties/a`, zod's),
/// so each tool's `$defs` and `definitions` move to the call schema's root under the tool's index
/// (`t3_X`, `t3d_X`), the parameters too (`t3`) when a ref reaches into them, and its refs follow.
/// Arguments are always an object (`{"type": "object"}` beside the tool's schema).
fn arguments_schema(i: usize, t: &ToolSpec, defs: &mut serde_json::Map<String, Value>) -> Value {
    let mut p = t.parameters.clone();
    // Every ref first (the definitions refer to one another the same way), then the definitions out.
    let root = rewrite_refs(&mut p, i);
    for (from, prefix) in [("$defs", format!("t{i}_")), ("definitions", format!("t{i}d_"))] {
        if let Some(Value::Object(m)) = p.as_object_mut().and_then(|o| o.remove(from)) {
            for (k, v) in m {
                defs.insert(format!("{prefix}{k}"), v);
            }
        }
    }
    if root {
        defs.insert(format!("t{i}"), p);
        return serde_json::json!({"allOf": [{"type": "object"}, {"$ref": format!("#/$defs/t{i}")}]});
    }
    match p.get("type") {
        Some(Value::String(t)) if t == "object" => p,
        _ => serde_json::json!({"allOf": [{"type": "object"}, p]}),
    }
}

/// The schema of one call's JSON: `{"name": <one of the tools>, "arguments": <its parameters>}`,
/// in that key order.
fn call_schema(tools: &[&ToolSpec]) -> Value {
    let mut defs = serde_json::Map::new();
    let mut one = |i: usize, t: &ToolSpec| {
        let args = arguments_schema(i, t, &mut defs);
        serde_json::json!({
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": args},
            "required": ["name", "arguments"],
            "additionalProperties": false
        })
    };
    let mut s = match tools {
        [t] => one(0, t),
        many => serde_json::json!({"anyOf": many.iter().enumerate().map(|(i, t)| one(i, t)).collect::<Vec<_>>()}),
    };
    if let Value::Object(m) = &mut s {
        if !defs.is_empty() {
            m.insert("$defs".into(), Value::Object(defs));
        }
        m.insert("x-guidance".into(), json_options());
    }
    s
}

/// A Lark grammar of tool calls to `tools` (at least one call; more when `parallel`). With
/// `opened`, the first call's opening tag has been written already (the model wrote it on its
/// own, with `tool_choice: "auto"`): the grammar starts just after it.
pub fn calls_grammar(tools: &[&ToolSpec], parallel: bool, opened: bool) -> String {
    let json = call_schema(tools).to_string();
    let first = if opened { "" } else { "\"<tool_call>\" " };
    let more = if parallel { " (\"\\n<tool_call>\" body)*" } else { "" };
    format!("start: {first}body{more}\nbody: \"\\n\" call \"\\n</tool_call>\"\ncall: %json {json}\n")
}

/// What the output stream holds, piece by piece.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Text outside tool calls.
    Text(String),
    /// A tool call begins.
    Call {
        /// Its index among the output's calls.
        index: usize,
        /// The function's name.
        name: String,
    },
    /// More of a call's arguments.
    Args {
        /// The call's index.
        index: usize,
        /// The next piece of its arguments' JSON text.
        text: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Outside a call.
    Text,
    /// After `<tool_call>`, before the arguments.
    Head,
    /// In the arguments: JSON nesting depth, inside a string, after a backslash.
    Args { depth: usize, string: bool, escape: bool },
    /// After the arguments, until `</tool_call>`.
    Tail,
}

/// Splits generated text into [`Piece`]s as it streams: text outside `<tool_call>` … `</tool_call>`,
/// and each call's name and arguments. Text that may be the start of an opening tag is held back
/// until it is not.
#[derive(Clone, Debug)]
pub struct CallSplitter {
    state: State,
    buf: String,
    calls: usize,
    /// Just after a call: the line breaks and spaces before the next one are no text.
    after_call: bool,
}

impl Default for CallSplitter {
    fn default() -> Self {
        CallSplitter { state: State::Text, buf: String::new(), calls: 0, after_call: false }
    }
}

/// Whether `s` can still become a call's head (`{"name": …`): after a `<tool_call>` tag the
/// grammar writes one, but a tag that the model wrote in prose, whose grammar was dropped, is
/// followed by anything.
fn head_possible(s: &str) -> bool {
    let t = s.trim_start();
    if t.is_empty() {
        return true;
    }
    let Some(t) = t.strip_prefix('{') else { return false };
    let t = t.trim_start();
    t.starts_with("\"name\"") || "\"name\"".starts_with(t)
}

/// `{"name": "…", "arguments": ` at the start of a call (whitespace allowed around the tokens).
fn head(s: &str) -> Option<(String, usize)> {
    let t = s.trim_start();
    let mut at = s.len() - t.len();
    let t = t.strip_prefix('{')?;
    at += 1;
    let skip = |t: &str, at: &mut usize| -> usize {
        let n = t.len() - t.trim_start().len();
        *at += n;
        n
    };
    let n = skip(t, &mut at);
    let t = t[n..].strip_prefix("\"name\"")?;
    at += 6;
    let n = skip(t, &mut at);
    let t = t[n..].strip_prefix(':')?;
    at += 1;
    let n = skip(t, &mut at);
    let t = &t[n..];
    // The name: a JSON string.
    let mut de = serde_json::Deserializer::from_str(t).into_iter::<String>();
    let name = de.next()?.ok()?;
    let used = de.byte_offset();
    at += used;
    let t = &t[used..];
    let n = skip(t, &mut at);
    let t = t[n..].strip_prefix(',')?;
    at += 1;
    let n = skip(t, &mut at);
    let t = t[n..].strip_prefix("\"arguments\"")?;
    at += 11;
    let n = skip(t, &mut at);
    let t = t[n..].strip_prefix(':')?;
    at += 1;
    let n = skip(t, &mut at);
    Some((name, at)).filter(|_| !t[n..].is_empty())
}

impl CallSplitter {
    /// A splitter at the start of the output; `opened`: the output starts inside a call (its
    /// opening tag already written).
    pub fn new(opened: bool) -> CallSplitter {
        CallSplitter { state: if opened { State::Head } else { State::Text }, ..Default::default() }
    }

    /// The pieces `text` (the next piece of output) completes.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        loop {
            match self.state {
                State::Text if self.after_call => {
                    let n = self.buf.len() - self.buf.trim_start_matches(['\n', ' ']).len();
                    self.buf.drain(..n);
                    if self.buf.is_empty() {
                        return out;
                    }
                    self.after_call = false;
                }
                State::Text => match self.buf.find(CALL_OPEN) {
                    Some(at) => {
                        if at > 0 {
                            out.push(Piece::Text(self.buf[..at].to_string()));
                        }
                        self.buf.drain(..at + CALL_OPEN.len());
                        self.state = State::Head;
                    }
                    None => {
                        // Hold back what could still become `<tool_call>`.
                        let keep = (1..CALL_OPEN.len()).rev().find(|&n| self.buf.ends_with(&CALL_OPEN[..n])).unwrap_or(0);
                        let cut = self.buf.len() - keep;
                        if cut > 0 {
                            out.push(Piece::Text(self.buf[..cut].to_string()));
                            self.buf.drain(..cut);
                        }
                        return out;
                    }
                },
                State::Head => match head(&self.buf) {
                    Some((name, at)) => {
                        out.push(Piece::Call { index: self.calls, name });
                        self.buf.drain(..at);
                        self.state = State::Args { depth: 0, string: false, escape: false };
                    }
                    // The tag in prose (the call's grammar was dropped): text, tag included.
                    None if !head_possible(&self.buf) => {
                        out.push(Piece::Text(CALL_OPEN.to_string()));
                        self.state = State::Text;
                    }
                    None => return out,
                },
                State::Args { mut depth, mut string, mut escape } => {
                    let mut end = None;
                    for (i, c) in self.buf.char_indices() {
                        if string {
                            match (escape, c) {
                                (true, _) => escape = false,
                                (false, '\\') => escape = true,
                                (false, '"') => string = false,
                                _ => {}
                            }
                        } else {
                            match c {
                                '"' => string = true,
                                '{' | '[' => depth += 1,
                                '}' | ']' => {
                                    depth = depth.saturating_sub(1);
                                    // The arguments (an object) end where it closes.
                                    if depth == 0 {
                                        end = Some(i + c.len_utf8());
                                        break;
                                    }
                                }
                                _ => {}
                            }
                        }
                    }
                    let upto = end.unwrap_or(self.buf.len());
                    if upto > 0 {
                        out.push(Piece::Args { index: self.calls, text: self.buf[..upto].to_string() });
                        self.buf.drain(..upto);
                    }
                    match end {
                        Some(_) => {
                            self.calls += 1;
                            self.state = State::Tail;
                        }
                        None => {
                            self.state = State::Args { depth, string, escape };
                            return out;
                        }
                    }
                }
                State::Tail => match self.buf.find(CALL_CLOSE) {
                    Some(at) => {
                        self.buf.drain(..at + CALL_CLOSE.len());
                        // The line break between calls (or after the last) is no text.
                        self.after_call = true;
                        self.state = State::Text;
                    }
                    None => return out,
                },
            }
        }
    }

    /// The end of the output: text held back comes out (a call cut short stays cut short).
    pub fn finish(&mut self) -> Vec<Piece> {
        let rest = std::mem::take(&mut self.buf);
        match self.state {
            State::Text if !rest.is_empty() => vec![Piece::Text(rest)],
            State::Head if !head_possible(&rest) => vec![Piece::Text(format!("{CALL_OPEN}{rest}"))],
            _ => Vec::new(),
        }
    }

    /// Calls begun so far.
    pub fn calls(&self) -> usize {
        self.calls + usize::from(matches!(self.state, State::Args { .. }))
    }
}

/// The whole output split at once: the text outside calls, and each call's name and arguments.
pub fn split_calls(text: &str) -> (String, Vec<(String, String)>) {
    let mut s = CallSplitter::default();
    let mut pieces = s.push(text);
    pieces.extend(s.finish());
    let mut content = String::new();
    let mut calls: Vec<(String, String)> = Vec::new();
    for p in pieces {
        match p {
            Piece::Text(t) => content.push_str(&t),
            Piece::Call { name, .. } => calls.push((name, String::new())),
            Piece::Args { index, text } => {
                if let Some(c) = calls.get_mut(index) {
                    c.1.push_str(&text);
                }
            }
        }
    }
    (content, calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_json_writes_as_json_dumps() {
        // Each expected text is what Python 3's json.dumps writes for these options.
        let v = json!({"b": [1, 2.5, {"z": null, "a": "é\u{1F600}\n\u{1}"}], "a": {}, "c": [], "d": 1e-5, "e": 1e16, "f": 100.0, "g": -0.00012});
        assert_eq!(
            python_json(&v),
            r#"{"b": [1, 2.5, {"z": null, "a": "é😀\n\u0001"}], "a": {}, "c": [], "d": 1e-05, "e": 1e+16, "f": 100.0, "g": -0.00012}"#
        );
        let opts = PyJson { ensure_ascii: true, sort_keys: true, ..PyJson::default() };
        assert_eq!(
            opts.dumps(&v),
            r#"{"a": {}, "b": [1, 2.5, {"a": "\u00e9\ud83d\ude00\n\u0001", "z": null}], "c": [], "d": 1e-05, "e": 1e+16, "f": 100.0, "g": -0.00012}"#
        );
        let opts = PyJson { indent: Some("  ".into()), ..PyJson::default() };
        assert_eq!(opts.dumps(&json!({"a": [1, {}], "b": []})), "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
        let opts = PyJson { separators: Some((",".into(), ":".into())), ..PyJson::default() };
        assert_eq!(opts.dumps(&json!({"a": [1, 2]})), r#"{"a":[1,2]}"#);
        for (f, py) in [
            (0.1, "0.1"),
            (1.0, "1.0"),
            (123456789012345.6, "123456789012345.6"),
            (1.5e-7, "1.5e-07"),
            (2.5e300, "2.5e+300"),
            (0.0001, "0.0001"),
            (-0.0, "-0.0"),
        ] {
            assert_eq!(python_float(f), py);
        }
    }

    #[test]
    fn canonical_sorts_keys_at_every_depth() {
        let a: Value = serde_json::from_str(r#"{"b":{"y":1,"x":[{"q":1,"p":2}]},"a":true}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":true,"b":{"x":[{"p":2,"q":1}],"y":1}}"#).unwrap();
        assert_eq!(canonical(&a).to_string(), canonical(&b).to_string());
        assert_eq!(canonical(&a).to_string(), r#"{"a":true,"b":{"x":[{"p":2,"q":1}],"y":1}}"#);
        assert_eq!(python_json(&canonical(&a)), r#"{"a": true, "b": {"x": [{"p": 2, "q": 1}], "y": 1}}"#);
    }

    #[test]
    fn unknown_keywords_are_named() {
        let ok = serde_json::json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 3, "description": "x"}}, "required": ["a"]});
        assert!(check_schema(&ok, "s").is_ok());
        let bad = serde_json::json!({"type": "object", "properties": {"a": {"type": "string", "maxLenght": 3}}});
        let e = check_schema(&bad, "s").unwrap_err();
        assert!(e.contains("`maxLenght`") && e.contains("s.properties.a"), "{e}");
        let bad = serde_json::json!({"anyOf": [{"type": "string"}, {"dependentRequired": {}}]});
        assert!(check_schema(&bad, "s").unwrap_err().contains("s.anyOf[1]"));
        assert!(check_schema(&serde_json::json!(3), "s").is_err());
    }

    #[test]
    fn calls_split_from_text_whole_and_streamed() {
        let out = "Let me look.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, {\"x\": \"}\"}]}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
        let (text, calls) = split_calls(out);
        assert_eq!(text, "Let me look.");
        assert_eq!(
            calls,
            vec![
                ("get_weather".to_string(), r#"{"city": "Paris", "days": [1, {"x": "}"}]}"#.to_string()),
                ("now".to_string(), "{}".to_string())
            ]
        );
        // One character at a time: the same pieces, joined.
        let mut s = CallSplitter::default();
        let mut pieces = Vec::new();
        for c in out.chars() {
            pieces.extend(s.push(&c.to_string()));
        }
        pieces.extend(s.finish());
        let args: String =
            pieces.iter().filter_map(|p| if let Piece::Args { index: 0, text } = p { Some(text.as_str()) } else { None }).collect();
        assert_eq!(args, calls[0].1);
        assert!(pieces.contains(&Piece::Call { index: 1, name: "now".into() }));
        // Text that looks like the start of a tag, but is not one, comes out.
        assert_eq!(split_calls("a <tool b"), ("a <tool b".to_string(), vec![]));
        // Token by token (the line break between two calls its own piece): no text.
        let mut s = CallSplitter::default();
        let mut text = String::new();
        for piece in [
            "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>",
            "\n",
            "<tool_call>",
            "\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
        ] {
            for p in s.push(piece) {
                if let Piece::Text(t) = p {
                    text.push_str(&t);
                }
            }
        }
        assert_eq!(text, "", "the line between calls is no text");
    }

    #[test]
    fn a_tools_refs_point_into_its_own_definitions() {
        let params: Value = serde_json::from_str(
            r##"{"type": "object", "properties": {"p": {"$ref": "#/$defs/Point"}}, "required": ["p"],
                "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "integer"}, "next": {"$ref": "#/$defs/Point"}}, "required": ["x"]}}}"##,
        )
        .unwrap();
        let t = ToolSpec { name: "f".into(), description: None, parameters: params };
        let scalar = ToolSpec { name: "g".into(), description: None, parameters: serde_json::json!({}) };
        let s = call_schema(&[&scalar, &t]);
        assert_eq!(s["$defs"]["t1_Point"]["properties"]["next"]["$ref"], "#/$defs/t1_Point");
        assert_eq!(s["anyOf"][1]["properties"]["arguments"]["properties"]["p"]["$ref"], "#/$defs/t1_Point");
        assert!(s["anyOf"][1]["properties"]["arguments"].get("$defs").is_none());
        // Arguments are an object whatever the tool's schema says.
        assert_eq!(s["anyOf"][0]["properties"]["arguments"]["allOf"][0], serde_json::json!({"type": "object"}));
    }

    #[test]
    fn refs_into_a_tools_root_and_both_definition_maps_keep_their_targets() {
        // OpenAI's recursive form (`#`), zod's (`#/properties/…`), `$defs` and `definitions` with
        // the same name, and a literal that looks like a ref.
        let params: Value = serde_json::from_str(
            r##"{"type": "object", "properties": {"label": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}},
                "same": {"$ref": "#/properties/label"}, "a": {"$ref": "#/$defs/A"}, "b": {"$ref": "#/definitions/A"},
                "lit": {"const": {"$ref": "#/$defs/A"}}},
                "$defs": {"A": {"type": "string"}}, "definitions": {"A": {"type": "integer"}}}"##,
        )
        .unwrap();
        let t = ToolSpec { name: "tree".into(), description: None, parameters: params };
        let s = call_schema(&[&t]);
        let root = &s["$defs"]["t0"];
        assert_eq!(s["properties"]["arguments"]["allOf"][1]["$ref"], "#/$defs/t0");
        assert_eq!(root["properties"]["children"]["items"]["$ref"], "#/$defs/t0");
        assert_eq!(root["properties"]["same"]["$ref"], "#/$defs/t0/properties/label");
        assert_eq!(root["properties"]["a"]["$ref"], "#/$defs/t0_A");
        assert_eq!(root["properties"]["b"]["$ref"], "#/$defs/t0d_A");
        assert_eq!(s["$defs"]["t0_A"], serde_json::json!({"type": "string"}));
        assert_eq!(s["$defs"]["t0d_A"], serde_json::json!({"type": "integer"}));
        assert_eq!(root["properties"]["lit"]["const"], serde_json::json!({"$ref": "#/$defs/A"}), "a literal is data");
        assert!(root.get("$defs").is_none() && root.get("definitions").is_none());
    }

    #[test]
    fn a_tag_in_prose_whose_grammar_was_dropped_stays_text() {
        // The tag's closing `>` came with other text, the grammar could not start, and the answer
        // went on as prose: nothing is lost, whole or streamed.
        let out = "Wrap it in <tool_call>. Then send it.";
        assert_eq!(split_calls(out), (out.to_string(), vec![]));
        let mut s = CallSplitter::default();
        let mut text = String::new();
        for c in out.chars() {
            for p in s.push(&c.to_string()) {
                if let Piece::Text(t) = p {
                    text.push_str(&t);
                }
            }
        }
        for p in s.finish() {
            if let Piece::Text(t) = p {
                text.push_str(&t);
            }
        }
        assert_eq!(text, out);
        // Ended right after such a tag, or after a head that cannot be one.
        assert_eq!(split_calls("see <tool_call> x").0, "see <tool_call> x");
        // A call cut short (max_tokens) is still no text.
        assert_eq!(split_calls("<tool_call>\n{\"na"), (String::new(), vec![]));
    }
}
