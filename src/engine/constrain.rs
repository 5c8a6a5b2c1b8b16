//! Constrained decoding (`response_format`, tools): llguidance's grammar matcher over the model's
//! vocabulary says, before each token is chosen, which tokens keep the output inside the
//! grammar; the token chosen (greedy or sampled over the allowed ones) is fed back to it.
//!
//! llguidance (the engine llama.cpp and vLLM use; `docs/BENCHMARKS.md` has its cost) works on
//! bytes: its token trie holds each token's bytes, a control token's behind llguidance's special
//! marker `0xFF` so that no grammar text can produce one, and the end-of-turn tokens as its
//! end-of-sequence set (allowed only where the grammar may end). Ids past the tokenizer's
//! vocabulary (a logits row wider than it) are such marked dummies too.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, SimpleVob, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};

use crate::error::{Error, Result};
use crate::text::tokenizer::Tokenizer;

/// The grammar compiler for one model's vocabulary, built once (about half a second for a
/// 150,000-token vocabulary) and kept by the engine.
pub struct Grammars {
    factory: ParserFactory,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammars").field("vocab", &self.factory.tok_env().tok_trie().vocab_size()).finish()
    }
}

/// llguidance's marker before a special token's bytes in its trie.
const SPECIAL: u8 = 0xFF;

impl Grammars {
    /// The compiler for `tokenizer`'s vocabulary in a logits row of `n_vocab` entries, with
    /// `eos` (the model's end-of-turn tokens) as the tokens that end a grammar.
    pub fn new(tokenizer: &Tokenizer, n_vocab: usize, eos: &[u32]) -> Result<Grammars> {
        let n = u32::try_from(n_vocab).map_err(|_| Error::InvalidArgument(format!("a vocabulary of {n_vocab} tokens")))?;
        // End-of-turn tokens are special whatever their type: never a grammar's text.
        let words: Vec<Vec<u8>> = (0..n)
            .map(|id| match tokenizer.token_bytes(id) {
                Some(b) if !b.is_empty() && !tokenizer.is_control(id) && !eos.contains(&id) => b,
                Some(b) if !b.is_empty() => [&[SPECIAL][..], &b].concat(),
                // Unused tokens and ids past the tokenizer's vocabulary: never text.
                _ => [&[SPECIAL][..], format!("<[{id}]>").as_bytes()].concat(),
            })
            .collect();
        let eos: Vec<u32> = eos.iter().copied().filter(|&t| t < n).collect();
        let first = *eos.first().ok_or_else(|| Error::Model("the model has no end-of-turn token for a grammar to end with".into()))?;
        let trie = TokTrie::from(&TokRxInfo::new(n, first), &words).with_eos_tokens(&eos);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| Error::InvalidArgument(format!("grammar engine: {e}")))?;
        factory.quiet();
        Ok(Grammars { factory })
    }

    /// A matcher for answers valid against the JSON Schema `schema` (with its `x-guidance`
    /// options, as `text::tools::response_schema` writes them).
    pub fn json(&self, schema: serde_json::Value) -> Result<Constraint> {
        self.constrain(TopLevelGrammar::from_json_schema(schema))
    }

    /// A matcher for the Lark grammar `grammar` (llguidance's dialect, `%json` included).
    pub fn lark(&self, grammar: &str) -> Result<Constraint> {
        self.constrain(TopLevelGrammar::from_lark(grammar.to_string()))
    }

    /// A matcher for `grammar`, at its start. A grammar llguidance cannot compile (a JSON Schema
    /// keyword it does not implement, a bad regex) is an [`Error::InvalidArgument`] with its reason.
    fn constrain(&self, grammar: TopLevelGrammar) -> Result<Constraint> {
        let m = Matcher::new(self.factory.create_parser(grammar));
        match m.get_error() {
            Some(e) => Err(Error::InvalidArgument(format!("response grammar: {e}"))),
            None => Ok(Constraint { m, env: self.factory.tok_env().clone() }),
        }
    }
}

/// One generation's grammar state.
pub struct Constraint {
    m: Matcher,
    env: TokEnv,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint").field("stopped", &self.m.is_stopped()).finish()
    }
}

fn fault(e: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("response grammar: {e}"))
}

impl Constraint {
    /// The tokens allowed next (an end-of-turn token only where the grammar may end).
    pub fn allowed(&mut self) -> Result<SimpleVob> {
        self.m.compute_mask().map_err(fault)
    }

    /// Feeds the chosen token.
    pub fn commit(&mut self, token: u32) -> Result<()> {
        self.m.consume_token(token).map_err(fault)
    }

    /// Feeds text produced before the grammar started (the rest of the token that completed a
    /// tool call's opening tag): its bytes as the trie tokenizes them, which leaves the grammar
    /// in the state those bytes lead to whatever tokens the model used.
    pub fn feed_text(&mut self, text: &str) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let tokens = self.env.tokenize_bytes(text.as_bytes());
        self.m.consume_tokens(&tokens).map_err(fault)
    }

    /// Whether the grammar is complete and allows nothing more (generation ends here).
    pub fn is_stopped(&self) -> bool {
        self.m.is_stopped()
    }

    /// Whether the output so far is a complete sentence of the grammar.
    pub fn is_accepting(&mut self) -> bool {
        self.m.is_accepting().unwrap_or(false)
    }
}
