//! Chat prompts rendered with the model's own `tokenizer.chat_template` (Jinja, via minijinja).
//!
//! The environment is set up the way Hugging Face `apply_chat_template` sets up Jinja:
//! `trim_blocks` and `lstrip_blocks` on, no auto-escaping, the `loopcontrols` extension,
//! `bos_token`/`eos_token` strings and a `raise_exception(msg)` function; Python's string and dict
//! methods (`.strip()`, `.startswith()`, `.split()`, `.items()`…) come from minijinja-contrib's
//! `pycompat`. The rendered text is meant for
//! [`crate::text::tokenizer::Tokenizer::encode_with_special`]; the message contents inside it are user
//! text, so callers must not let the template's markers be forged — see [`ChatTemplate::render`].
//!
//! The template comes from the model file, so it is untrusted code: every render runs on a fuel
//! budget ([`FUEL`] template instructions) and a recursion limit ([`RECURSION_LIMIT`]), and a
//! template that loops forever or recurses without end fails with `Error::Template` instead of
//! hanging the page or overflowing the stack. Not bounded: memory a template builds up in few
//! instructions (a string doubled in each of 40 `set`s), and work done inside builtin filters,
//! which spend no fuel (`(range(100000) * 100000) | sum`); see docs/FUZZING.md.

use minijinja::{AutoEscape, Environment, ErrorKind};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::gguf::Gguf;

const NAME: &str = "chat_template";

/// Template instructions one render may execute. ChatML spends about 20 per message, Hugging Face's
/// longer templates (tool calls, reasoning) a few hundred: 2,000,000 renders conversations of
/// thousands of messages, and stops a runaway loop after a fraction of a second.
pub const FUEL: u64 = 2_000_000;

/// Nesting depth a render may reach (loops and ifs count 1, a macro call about 5: 35 nested macro
/// calls). minijinja's own default and maximum without its `stacker` feature is 500; the lower
/// limit keeps a recursive template well inside wasm32's 1 MiB stack. Real templates nest a few
/// levels (a recursive macro over a tool's JSON schema: its depth).
pub const RECURSION_LIMIT: usize = 200;

/// Bytes a render may write, beyond 4 per byte of the messages' roles and contents: a template
/// that emits a 100 MB string in each iteration of a loop fails here, before its fuel runs out.
pub const OUTPUT_LIMIT: usize = 4 << 20;

/// A `Vec<u8>` that refuses writes past `limit` bytes.
struct Capped {
    out: Vec<u8>,
    limit: usize,
    overflowed: bool,
}

impl std::io::Write for Capped {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if b.len() > self.limit - self.out.len() {
            self.overflowed = true;
            return Err(std::io::Error::other(format!("the rendered text exceeds {} bytes", self.limit)));
        }
        self.out.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];

fn err(msg: impl Into<String>) -> Error {
    Error::Template(msg.into())
}

fn jinja_err(what: &str, e: minijinja::Error) -> Error {
    // `{:#}` adds the template line the error points at, when minijinja knows it.
    err(format!("{what}: {e:#}"))
}

/// One chat message. `role` is `"system"`, `"user"`, `"assistant"` or `"tool"` (a tool's result,
/// answering the call `tool_call_id`). A `pinned` message (a document, say) is never dropped when
/// the conversation overflows the context window; system messages never are either. A field
/// hotprefix does not know is refused by name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// `"system"`, `"user"`, `"assistant"` or `"tool"`.
    pub role: String,
    /// The message's text, encoded as plain text (never as control tokens). `null` (an assistant
    /// message that only calls tools) reads as empty.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub content: String,
    /// The author's name (OpenAI's `name`), for templates that render it (encoded as plain text
    /// too); a request whose template does not use it is refused rather than losing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Never dropped by head truncation; omitted from the JSON when `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
    /// An assistant message's calls of the request's tools (OpenAI's `tool_calls`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// A `tool` message: the call it answers (OpenAI's `tool_call_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// One call of a function, as OpenAI writes it in `message.tool_calls`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// The call's id (`call_…`), which the `tool` message with its result names.
    pub id: String,
    /// Always `"function"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The function and its arguments.
    pub function: FunctionCall,
}

/// A call's function: its name and its arguments as a JSON text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionCall {
    /// The function's name.
    pub name: String,
    /// Its arguments: a JSON object, as text.
    pub arguments: String,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

impl Message {
    /// A message with the given role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message { role: role.into(), content: content.into(), name: None, pinned: false, tool_calls: Vec::new(), tool_call_id: None }
    }

    /// The same message, with its author's name.
    pub fn named(self, name: impl Into<String>) -> Self {
        Message { name: Some(name.into()), ..self }
    }

    /// The same message, pinned.
    pub fn pinned(self) -> Self {
        Message { pinned: true, ..self }
    }
}

/// A model's chat template, parsed once and rendered per conversation.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
    /// The llama.cpp built-in template this is, for a file that has none (`"gemma"`).
    builtin: Option<&'static str>,
}

/// The variables every render sets: a request's `chat_template_kwargs` cannot set them.
pub const CONTEXT: [&str; 6] = ["messages", "tools", "add_generation_prompt", "bos_token", "eos_token", "strftime_now"];

/// llama.cpp's built-in `gemma` template (`llm_chat_apply_template`, LLM_CHAT_TEMPLATE_GEMMA) as
/// Jinja: no system role, so the system messages (trimmed, joined) open the first user turn
/// followed by a blank line; `assistant` is `model`; every content trimmed. No BOS text: the
/// tokenizer adds BOS (`add_bos_token`).
const GEMMA: &str = "{%- set ns = namespace(system='') -%}\
{%- for message in messages -%}\
{%- if message['role'] == 'system' -%}{%- set ns.system = ns.system + (message['content'] | trim) -%}\
{%- else -%}\
{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}\
{{- '<start_of_turn>' + role + '\\n' -}}\
{%- if ns.system != '' and role != 'model' -%}{{- ns.system + '\\n\\n' -}}{%- set ns.system = '' -%}{%- endif -%}\
{{- (message['content'] | trim) + '<end_of_turn>\\n' -}}\
{%- endif -%}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}";

impl ChatTemplate {
    /// Parses the model's `tokenizer.chat_template`; `bos_token`/`eos_token` are the vocabulary
    /// strings of `tokenizer.ggml.bos_token_id`/`eos_token_id` (empty when the model has none).
    pub fn from_gguf(g: &Gguf) -> Result<ChatTemplate> {
        let source = g.str("tokenizer.chat_template").map_err(|e| err(e.to_string()))?;
        let token = |key: &str| -> String {
            let tokens = g.array("tokenizer.ggml.tokens").unwrap_or(&[]);
            g.get(key)
                .and_then(|v| v.as_u64())
                .and_then(crate::model::gguf::fit::<usize>)
                .and_then(|id| tokens.get(id))
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string()
        };
        let bos = token("tokenizer.ggml.bos_token_id");
        let eos = token("tokenizer.ggml.eos_token_id");
        Self::new(source, &bos, &eos)
    }

    /// The file's own template, or, for a file without one, the llama.cpp built-in template of
    /// its architecture where one is well known (Gemma's turn format for `gemma`, `gemma2`,
    /// `gemma3`); `None` otherwise (a chat request is then refused).
    pub fn for_gguf(g: &Gguf) -> Result<Option<ChatTemplate>> {
        if g.get("tokenizer.chat_template").is_some() {
            return Self::from_gguf(g).map(Some);
        }
        match g.get("general.architecture").and_then(|v| v.as_str()) {
            Some("gemma" | "gemma2" | "gemma3") => {
                let mut t = Self::new(GEMMA, "", "")?;
                t.builtin = Some("gemma");
                Ok(Some(t))
            }
            _ => Ok(None),
        }
    }

    /// The llama.cpp built-in template this is (`"gemma"`), when the file had none of its own.
    pub fn builtin(&self) -> Option<&'static str> {
        self.builtin
    }

    /// Whether the template trims each message's content (llama.cpp's built-in ones do); the
    /// prompt encoder trims the contents it splices in to match.
    pub fn trims_content(&self) -> bool {
        self.builtin.is_some()
    }

    /// Parses a Jinja chat template given directly.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_fuel(Some(FUEL));
        env.set_recursion_limit(RECURSION_LIMIT);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        // Hugging Face's `tojson` is Python's `json.dumps(x, ensure_ascii=False, indent=None,
        // separators=None, sort_keys=False)` (", ", ": "), which the models were trained on;
        // minijinja's own writes compact JSON. Every option it takes is honoured; others refused.
        env.add_filter(
            "tojson",
            |v: minijinja::Value, kwargs: minijinja::value::Kwargs| -> std::result::Result<String, minijinja::Error> {
                let bad = |m: String| minijinja::Error::new(ErrorKind::InvalidOperation, m);
                let mut py = crate::text::tools::PyJson::default();
                if let Some(indent) = kwargs.get::<Option<minijinja::Value>>("indent")?.filter(|i| !i.is_none()) {
                    py.indent = Some(match (indent.as_str(), i64::try_from(indent.clone())) {
                        (Some(s), _) => s.to_string(),
                        (None, Ok(n)) => " ".repeat(usize::try_from(n).unwrap_or(0).min(64)),
                        _ => return Err(bad(format!("tojson: indent must be a number or a string, not {indent}"))),
                    });
                }
                if let Some(seps) = kwargs.get::<Option<minijinja::Value>>("separators")?.filter(|s| !s.is_none()) {
                    let not_a_pair = || bad(format!("tojson: separators must be a pair of strings, not {seps}"));
                    let parts: Vec<String> = seps
                        .try_iter()
                        .map_err(|_| not_a_pair())?
                        .map(|p| p.as_str().map(str::to_string))
                        .collect::<Option<_>>()
                        .ok_or_else(not_a_pair)?;
                    let [item, key] = <[String; 2]>::try_from(parts).map_err(|_| not_a_pair())?;
                    py.separators = Some((item, key));
                }
                py.ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
                py.sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
                kwargs.assert_all_used()?;
                let json = serde_json::to_value(&v).map_err(|e| bad(e.to_string()))?;
                Ok(py.dumps(&json))
            },
        );
        env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, format!("raise_exception: {msg}")))
        });
        env.add_template_owned(NAME, source.to_string()).map_err(|e| jinja_err("chat template does not parse", e))?;
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            builtin: None,
        })
    }

    /// The template's Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders a conversation; with `add_generation_prompt` the text ends where the assistant's
    /// reply begins. A role other than system/user/assistant, a template error or a
    /// `raise_exception` call is an `Error::Template`.
    ///
    /// The result contains the contents verbatim, so control-token text typed by a user ends up in
    /// it: encoding the whole string with `encode_with_special` lets a user forge turns. Callers
    /// that take untrusted content should reject or neutralise control-token text in contents
    /// first (or encode contents with `encode_text` and splice).
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_with_tools(messages, None, add_generation_prompt)
    }

    /// [`Self::render`] with the request's tools as the template's `tools` variable (a list of
    /// `{"type": "function", "function": {…}}`), for a template that renders them.
    pub fn render_with_tools(
        &self,
        messages: &[Message],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String> {
        self.render_with(messages, tools, None, add_generation_prompt)
    }

    /// [`Self::render_with_tools`] with more variables for the template (a request's
    /// `chat_template_kwargs`; names in [`CONTEXT`] are the template's own and are not taken).
    pub fn render_with(
        &self,
        messages: &[Message],
        tools: Option<&serde_json::Value>,
        vars: Option<&serde_json::Map<String, serde_json::Value>>,
        add_generation_prompt: bool,
    ) -> Result<String> {
        self.render_at(messages, tools, vars, add_generation_prompt, clock())
    }

    /// [`Self::render_with`] at the time `now`: what the template's `strftime_now` writes. An
    /// encoding renders a prompt more than once (with markers in place of the fields, and as it
    /// is) and gives each render the same reading, so a date cannot change between them.
    pub(crate) fn render_at(
        &self,
        messages: &[Message],
        tools: Option<&serde_json::Value>,
        vars: Option<&serde_json::Map<String, serde_json::Value>>,
        add_generation_prompt: bool,
        now: Now,
    ) -> Result<String> {
        if let Some(k) = vars.and_then(|v| v.keys().find(|k| CONTEXT.contains(&k.as_str()))) {
            return Err(err(format!("{k:?} is the template's own variable")));
        }
        if let Some((i, m)) = messages.iter().enumerate().find(|(_, m)| !ROLES.contains(&m.role.as_str())) {
            return Err(err(format!("message {i} has role {:?} (system, user, assistant or tool expected)", m.role)));
        }
        let tmpl = self.env.get_template(NAME).map_err(|e| jinja_err("chat template", e))?;
        let input = messages.iter().fold(0usize, |a, m| a.saturating_add(m.role.len()).saturating_add(m.content.len()));
        let limit = OUTPUT_LIMIT.saturating_add(input.saturating_mul(4));
        let mut out = Capped { out: Vec::new(), limit, overflowed: false };
        let ctx = minijinja::context! {
            messages => messages,
            tools => tools.map(minijinja::Value::from_serialize),
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
            // Hugging Face (and llama.cpp) give templates the local time: Llama-3.x's templates
            // write "Today Date: {strftime_now('%d %b %Y')}" into the system prompt.
            strftime_now => minijinja::Value::from_function(move |fmt: String| strftime(now, &fmt)),
            ..minijinja::Value::from_serialize(vars.cloned().unwrap_or_default())
        };
        // Fuel, recursion and output limits end a hostile template here, as an Error::Template.
        if let Err(e) = tmpl.render_captured_to(ctx, &mut out) {
            return Err(match out.overflowed {
                true => err(format!("chat template failed to render: its output exceeds {limit} bytes")),
                false => jinja_err("chat template failed to render", e),
            });
        }
        String::from_utf8(out.out).map_err(|_| err("the chat template rendered text that is not UTF-8"))
    }
}

/// A time as `strftime_now` renders it.
pub(crate) type Now = chrono::DateTime<chrono::Local>;

#[cfg(test)]
thread_local! {
    /// Tests: the clock `strftime_now` reads instead of the system's.
    pub(crate) static TEST_CLOCK: std::cell::Cell<Option<fn() -> Now>> = const { std::cell::Cell::new(None) };
}

/// The local time now.
pub(crate) fn clock() -> Now {
    #[cfg(test)]
    if let Some(f) = TEST_CLOCK.get() {
        return f();
    }
    chrono::Local::now()
}

/// `now` in a `strftime` format (Python's, as chrono reads it); a format chrono does not read is
/// a template error.
fn strftime(now: Now, fmt: &str) -> std::result::Result<String, minijinja::Error> {
    use chrono::format::{Item, StrftimeItems};
    use std::fmt::Write;
    let bad = || minijinja::Error::new(ErrorKind::InvalidOperation, format!("strftime_now: {fmt:?} is not a strftime format"));
    let items: Vec<Item<'_>> = StrftimeItems::new(fmt).collect();
    if items.iter().any(|i| matches!(i, Item::Error)) {
        return Err(bad());
    }
    let mut out = String::new();
    write!(out, "{}", now.format_with_items(items.iter())).map_err(|_| bad())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

    #[test]
    fn chatml_default_system_prompt() {
        let t = ChatTemplate::new(CHATML, "<|im_start|>", "<|im_end|>").unwrap();
        let s = t.render(&[Message::new("user", "hi")], true).unwrap();
        assert_eq!(
            s,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
             <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        let s = t.render(&[Message::new("system", "S"), Message::new("user", "<b>&")], false).unwrap();
        assert_eq!(s, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n<b>&<|im_end|>\n");
    }

    #[test]
    fn errors_are_typed() {
        let t = ChatTemplate::new(CHATML, "", "").unwrap();
        assert!(matches!(t.render(&[Message::new("function", "x")], true), Err(Error::Template(_))));
        assert!(matches!(ChatTemplate::new("{% for %}", "", ""), Err(Error::Template(_))));
        let t = ChatTemplate::new("{{ raise_exception('no ' + bos_token) }}", "<s>", "").unwrap();
        match t.render(&[], false) {
            Err(Error::Template(m)) => assert!(m.contains("no <s>"), "{m}"),
            other => panic!("{other:?}"),
        }
        let t = ChatTemplate::new("{{ messages[0].content.nope() }}", "", "").unwrap();
        assert!(matches!(t.render(&[Message::new("user", "x")], false), Err(Error::Template(_))));
    }

    /// Renders `source` over one message on another thread: the error message, and how long the
    /// render took. A render still running after 10 s fails the test (a template the limits do
    /// not stop would otherwise hang it).
    fn render_hostile(source: &str) -> (String, std::time::Duration) {
        let t = ChatTemplate::new(source, "", "").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            let r = t.render(&[Message::new("user", "hi")], true);
            let _ = tx.send((r, start.elapsed()));
        });
        match rx.recv_timeout(std::time::Duration::from_secs(10)) {
            Ok((Err(Error::Template(m)), took)) => (m, took),
            Ok((other, _)) => panic!("expected Error::Template, got {:?}", other.map(|s| s.len())),
            Err(_) => panic!("the render of {source:?} was still running after 10 s"),
        }
    }

    #[test]
    fn a_template_that_loops_forever_runs_out_of_fuel() {
        // 10^10 iterations without a fuel limit (range() itself stops at 100,000 elements).
        for source in [
            "{% for a in range(100000) %}{% for b in range(100000) %}{{ a }}{% endfor %}{% endfor %}",
            "{% for a in range(100000) %}{% for b in range(100000) %}{% if a == b - 1 %}{% endif %}{% endfor %}{% endfor %}",
        ] {
            let (m, took) = render_hostile(source);
            assert!(m.contains("fuel"), "{m}");
            assert!(took < std::time::Duration::from_millis(1500), "{source}: {took:?}");
        }
    }

    #[test]
    fn deep_recursion_is_refused() {
        let (m, took) = render_hostile("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
        assert!(m.contains("recursion limit"), "{m}");
        assert!(took < std::time::Duration::from_millis(1500), "{took:?}");
        // A macro costs about 5 levels: 30 nested calls render, 40 do not (minijinja's default
        // limit of 500 would allow about 90).
        let depth =
            |n: usize| format!("{{% macro f(n) %}}{{% if n > 0 %}}{{{{ f(n - 1) }}}}{{% endif %}}{{% endmacro %}}{{{{ f({n}) }}}}.");
        assert_eq!(ChatTemplate::new(&depth(30), "", "").unwrap().render(&[], false).unwrap(), ".");
        let (m, _) = render_hostile(&depth(40));
        assert!(m.contains("recursion limit"), "{m}");
        // Nesting is bounded when parsing too; 20 nested loops are fine.
        let nested = |n: usize| format!("{}x{}", "{% for i in [1] %}".repeat(n), "{% endfor %}".repeat(n));
        assert!(matches!(ChatTemplate::new(&nested(1000), "", ""), Err(Error::Template(_))));
        assert_eq!(ChatTemplate::new(&nested(20), "", "").unwrap().render(&[], false).unwrap(), "x");
    }

    #[test]
    fn a_template_writing_without_end_hits_the_output_limit() {
        let (m, took) = render_hostile("{% for a in range(100000) %}{{ 'x' * 10000000 }}{% endfor %}");
        assert!(m.contains("output exceeds 4194328 bytes"), "{m}");
        assert!(took < std::time::Duration::from_millis(1500), "{took:?}");
    }

    /// SmolLM2-135M-Instruct's `tokenizer.chat_template`, byte for byte.
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn long_conversations_render_within_the_limits() {
        let t = ChatTemplate::new(SMOLLM2, "", "").unwrap();
        // 200 messages of 4 KB each.
        let mut messages = vec![Message::new("system", "S".repeat(4096))];
        for i in 1..200 {
            let role = if i % 2 == 1 { "user" } else { "assistant" };
            messages.push(Message::new(role, format!("{i:04}{}", "y".repeat(4092))));
        }
        let s = t.render(&messages, true).unwrap();
        let overhead = "<|im_start|>\n<|im_end|>\n".len();
        let roles: usize = messages.iter().map(|m| m.role.len()).sum();
        assert_eq!(s.len(), 200 * (4096 + overhead) + roles + "<|im_start|>assistant\n".len());
        assert!(s.ends_with(&format!("0199{}<|im_end|>\n<|im_start|>assistant\n", "y".repeat(4092))));
        // 20,000 short messages still fit the fuel (about 20 instructions a message).
        let many: Vec<Message> = (0..20_000).map(|i| Message::new(if i % 2 == 0 { "user" } else { "assistant" }, "hi")).collect();
        let s = t.render(&many, false).unwrap();
        assert_eq!(s.matches("<|im_end|>").count(), 20_001, "the default system prompt and every message");
    }

    #[test]
    fn tojson_writes_as_hugging_face_does() {
        // Expected: jinja2 with Hugging Face's `tojson` (json.dumps with these options). Keys keep
        // the order they were given in, as Python dicts do.
        let tools = serde_json::json!([{"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}}]);
        let t = ChatTemplate::new("{{ tools[0] | tojson }}", "", "").unwrap();
        assert_eq!(
            t.render_with_tools(&[], Some(&tools), false).unwrap(),
            r#"{"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}}"#
        );
        let cases = [
            ("{{ {'b': 1, 'a': 2} | tojson }}", r#"{"b": 1, "a": 2}"#),
            ("{% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}{% endfor %}", "ba"),
            ("{{ {'b': 1, 'a': 'é'} | tojson(sort_keys=true, ensure_ascii=true) }}", r#"{"a": "\u00e9", "b": 1}"#),
            ("{{ {'a': [1, 2]} | tojson(separators=(',', ':')) }}", r#"{"a":[1,2]}"#),
            ("{{ {'a': [1]} | tojson(indent=2) }}", "{\n  \"a\": [\n    1\n  ]\n}"),
            ("{{ {'m': 0.00001, 'n': 2.0} | tojson }}", r#"{"m": 1e-05, "n": 2.0}"#),
        ];
        for (src, want) in cases {
            let t = ChatTemplate::new(src, "", "").unwrap();
            assert_eq!(t.render(&[], false).unwrap(), want, "{src}");
        }
        // An option json.dumps has that the filter does not take is refused, not ignored.
        let t = ChatTemplate::new("{{ 1 | tojson(default=none) }}", "", "").unwrap();
        assert!(t.render(&[], false).is_err());
    }

    /// `strftime_now` writes the time the render is given (an encoding gives its renders one),
    /// also from inside a macro.
    #[test]
    fn a_render_writes_the_time_it_is_given() {
        let t = ChatTemplate::new("{{ strftime_now('%Y-%m-%d') }}|{% macro y() %}{{ strftime_now('%Y') }}{% endmacro %}{{ y() }}", "", "")
            .unwrap();
        let then = chrono::Local::now() - chrono::Duration::days(400);
        assert_eq!(t.render_at(&[], None, None, false, then).unwrap(), format!("{}|{}", then.format("%Y-%m-%d"), then.format("%Y")));
    }

    #[test]
    fn strftime_now_is_the_local_date() {
        // Llama-3.2's date block, as its template has it.
        let src = "{%- if not date_string is defined %}{%- if strftime_now is defined %}{%- set date_string = strftime_now(\"%d %b %Y\") %}{%- else %}{%- set date_string = \"26 Jul 2024\" %}{%- endif %}{%- endif %}Today Date: {{ date_string }}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let out = t.render(&[], false).unwrap();
        let date = out.strip_prefix("Today Date: ").unwrap();
        let parts: Vec<&str> = date.split(' ').collect();
        assert_eq!(parts.len(), 3, "{out}");
        assert!(parts[0].len() == 2 && parts[0].bytes().all(|b| b.is_ascii_digit()), "{out}");
        assert!(["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].contains(&parts[1]), "{out}");
        assert!(parts[2].parse::<u32>().unwrap() >= 2026, "{out}");
        let bad = ChatTemplate::new("{{ strftime_now('%Q') }}", "", "").unwrap();
        assert!(matches!(bad.render(&[], false), Err(Error::Template(_))));
    }

    #[test]
    fn python_string_and_dict_methods_render() {
        let source = "{% for m in messages %}\
            {% if m.content.strip().startswith('/') %}{{ m.role.upper() }} CMD {{ m.content.strip()[1:].split(' ')|join('+') }}\
            {% else %}{{ m.role.capitalize() }}: {{ m.content.replace('a', 'A').rstrip('!') }}{{ '?' if m.content.endswith('!') }}\
            {% endif %}{{ '\n' }}{% endfor %}\
            {% for k, v in {'x': 1}.items() %}{{ k }}={{ v }}{% endfor %}{{ ' A,B '.lower().strip().split(',')|length }}";
        let t = ChatTemplate::new(source, "", "").unwrap();
        let s = t.render(&[Message::new("user", "  /run a b  "), Message::new("assistant", "banana!")], false).unwrap();
        assert_eq!(s, "USER CMD run+a+b\nAssistant: bAnAnA?\nx=12");
    }
}
