//! Chat prompts rendered with the model's own `tokenizer.chat_template` (Jinja, via minijinja).
//!
//! The environment is set up the way Hugging Face `apply_chat_template` sets up Jinja:
//! `trim_blocks` and `lstrip_blocks` on, no auto-escaping, the `loopcontrols` extension,
//! `bos_token`/`eos_token` strings and a `raise_exception(msg)` function. The rendered text is
//! meant for [`crate::tokenizer::Tokenizer::encode_with_special`]; the message contents inside it
//! are user text, so callers must not let the template's markers be forged — see
//! [`ChatTemplate::render`].

use minijinja::{AutoEscape, Environment, ErrorKind};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::gguf::Gguf;

const NAME: &str = "chat_template";
const ROLES: [&str; 3] = ["system", "user", "assistant"];

fn err(msg: impl Into<String>) -> Error {
    Error::Template(msg.into())
}

fn jinja_err(what: &str, e: minijinja::Error) -> Error {
    // `{:#}` adds the template line the error points at, when minijinja knows it.
    err(format!("{what}: {e:#}"))
}

/// One chat message. `role` is `"system"`, `"user"` or `"assistant"`. A `pinned` message (a
/// document, say) is never dropped when the conversation overflows the context window; system
/// messages never are either.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
}

impl Message {
    /// A message with the given role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message { role: role.into(), content: content.into(), pinned: false }
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
}

impl ChatTemplate {
    /// Parses the model's `tokenizer.chat_template`; `bos_token`/`eos_token` are the vocabulary
    /// strings of `tokenizer.ggml.bos_token_id`/`eos_token_id` (empty when the model has none).
    pub fn from_gguf(g: &Gguf) -> Result<ChatTemplate> {
        let source = g.str("tokenizer.chat_template").map_err(|e| err(e.to_string()))?;
        let token = |key: &str| -> String {
            let tokens = g.array("tokenizer.ggml.tokens").unwrap_or(&[]);
            g.get(key)
                .and_then(|v| v.as_u64())
                .and_then(|id| usize::try_from(id).ok())
                .and_then(|id| tokens.get(id))
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string()
        };
        let bos = token("tokenizer.ggml.bos_token_id");
        let eos = token("tokenizer.ggml.eos_token_id");
        Self::new(source, &bos, &eos)
    }

    /// Parses a Jinja chat template given directly.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, format!("raise_exception: {msg}")))
        });
        env.add_template_owned(NAME, source.to_string()).map_err(|e| jinja_err("chat template does not parse", e))?;
        Ok(ChatTemplate { env, source: source.to_string(), bos_token: bos_token.to_string(), eos_token: eos_token.to_string() })
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
        if let Some((i, m)) = messages.iter().enumerate().find(|(_, m)| !ROLES.contains(&m.role.as_str())) {
            return Err(err(format!("message {i} has role {:?} (system, user or assistant expected)", m.role)));
        }
        let tmpl = self.env.get_template(NAME).map_err(|e| jinja_err("chat template", e))?;
        tmpl.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        })
        .map_err(|e| jinja_err("chat template failed to render", e))
    }
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
        assert!(matches!(t.render(&[Message::new("tool", "x")], true), Err(Error::Template(_))));
        assert!(matches!(ChatTemplate::new("{% for %}", "", ""), Err(Error::Template(_))));
        let t = ChatTemplate::new("{{ raise_exception('no ' + bos_token) }}", "<s>", "").unwrap();
        match t.render(&[], false) {
            Err(Error::Template(m)) => assert!(m.contains("no <s>"), "{m}"),
            other => panic!("{other:?}"),
        }
        let t = ChatTemplate::new("{{ messages[0].content.nope() }}", "", "").unwrap();
        assert!(matches!(t.render(&[Message::new("user", "x")], false), Err(Error::Template(_))));
    }
}
