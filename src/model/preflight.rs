//! Everything loading a model does on the CPU, without a GPU: the header, the config, the
//! tokenizer, the chat template, every tensor's shape, and each weight's conversion to the GPU
//! layout. A model file is untrusted input; this is the part of the load that the `load_cpu` fuzz
//! target runs on arbitrary bytes (docs/FUZZING.md).
//!
//! It shares its steps with [`crate::engine::Engine::load_from`] and
//! [`crate::model::Model::load_from`]: the same text-side step (tokenizer and template), the same
//! `Config::from_gguf`, the same walk over the weights (`model::load_weights`, with every shape
//! check), handing each weight to a sink that converts it to the GPU layout instead of uploading
//! it, and the same vocabulary check. What it leaves out is only what needs a device: the
//! uploads, the scratch buffers and the KV pool.

use std::borrow::Cow;
use std::future::Future;

use crate::error::{Error, Result};
use crate::model::gguf::Gguf;
use crate::model::quant::Format;
use crate::model::{self, Config, TensorBytes};
use crate::text::template::ChatTemplate;
use crate::text::tokenizer::Tokenizer;

/// A model file that passed every CPU-side check of the load.
#[derive(Debug)]
pub struct Checked {
    /// The model's shape, as the load reads it.
    pub config: Config,
    /// The tokenizer built from `tokenizer.ggml.*`.
    pub tokenizer: Tokenizer,
    /// `None` when the model has no `tokenizer.chat_template`.
    pub template: Option<ChatTemplate>,
    /// Bytes the weights take in the GPU layout (what the load would upload).
    pub gpu_weight_bytes: u64,
}

/// Parses a whole GGUF file held in memory and runs [`check_gguf`] on it.
pub fn check_model_cpu(file: &[u8]) -> Result<Checked> {
    check_gguf(&Gguf::parse(file)?, &file)
}

/// Runs the CPU side of loading the model whose header is `g`, reading each tensor from `file`
/// once and converting it to the GPU layout (then dropping it). Fails with the error the load
/// would fail with.
pub fn check_gguf(g: &Gguf, file: &dyn TensorBytes) -> Result<Checked> {
    // Engine::load_from
    let (tokenizer, template) = text_side(g)?;
    // Model::load_from: the same walk over the weights, converting each instead of uploading it.
    let cfg = Config::from_gguf(g)?;
    let mut sink = Convert { bytes: 0 };
    let mut no_progress = |_, _| {};
    {
        let walk = std::pin::pin!(model::load_weights(g, file, &cfg, &mut sink, &mut no_progress));
        // `Convert` never waits, so the walk finishes in one poll.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match walk.poll(&mut cx) {
            std::task::Poll::Ready(r) => drop(r?),
            std::task::Poll::Pending => return Err(Error::Model("the CPU load did not finish in one poll".into())),
        }
    }
    let bytes = sink.bytes;
    // Engine::load_from, after the model
    check_vocab(&tokenizer, &cfg)?;
    Ok(Checked { config: cfg, tokenizer, template, gpu_weight_bytes: bytes })
}

/// The CPU side of a load that needs only the header `g` (the page's model picker reads no more
/// before it loads): the tokenizer, the template, the config, and the same walk over the weights
/// as the load, so every tensor's presence, format and shape, but with stand-in bytes (no
/// matrix bytes; 1.0 for every value of a vector), so that what depends on tensor values (the
/// weights' conversion, RoPE factors' signs) is left to the load. Fails with the error the load
/// would fail with for a reason in the header.
pub fn check_header(g: &Gguf) -> Result<Config> {
    let (tokenizer, _) = text_side(g)?;
    let cfg = Config::from_gguf(g)?;
    let mut sink = Shapes;
    let mut no_progress = |_, _| {};
    {
        let walk = std::pin::pin!(model::load_weights(g, &HeaderOnly, &cfg, &mut sink, &mut no_progress));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match walk.poll(&mut cx) {
            std::task::Poll::Ready(r) => drop(r?),
            std::task::Poll::Pending => return Err(Error::Model("the header check did not finish in one poll".into())),
        }
    }
    check_vocab(&tokenizer, &cfg)?;
    Ok(cfg)
}

/// [`check_header`]'s stand-in for the tensor data: an F32 vector reads as ones, a matrix as no
/// bytes (the walk checks names, formats and shapes from the header; only [`Shapes`] sees these).
struct HeaderOnly;

impl TensorBytes for HeaderOnly {
    fn tensor_bytes(&self, _g: &Gguf, t: &crate::model::gguf::TensorInfo) -> Result<Cow<'_, [u8]>> {
        if t.ggml_type == Format::F32.ggml_type() && t.dims.len() == 1 {
            let n = crate::model::gguf::fit::<usize>(t.dims[0]).ok_or_else(|| Error::Model(format!("{}: {:?}", t.name, t.dims)))?;
            return Ok(Cow::Owned(1.0f32.to_le_bytes().repeat(n)));
        }
        Ok(Cow::Borrowed(&[]))
    }
}

/// Each weight accepted as the walk hands it over.
struct Shapes;

impl model::Sink for Shapes {
    type Matrix = ();
    type Vector = ();
    async fn matrix(&mut self, _name: &str, _format: Format, _bytes: Cow<'_, [u8]>, _n: usize, _k: usize) -> Result<()> {
        Ok(())
    }
    async fn vector(&mut self, _name: &str, _v: Vec<f32>) -> Result<()> {
        Ok(())
    }
    fn join(&mut self, _parts: Vec<()>) -> Result<()> {
        Ok(())
    }
}

/// The first step of a load: the tokenizer from `tokenizer.ggml.*` and the chat template, if
/// the file has one.
pub(crate) fn text_side(g: &Gguf) -> Result<(Tokenizer, Option<ChatTemplate>)> {
    let tokenizer = Tokenizer::from_gguf(g)?;
    Ok((tokenizer, ChatTemplate::for_gguf(g)?))
}

/// The last step: every token id the tokenizer makes must have a row of logits.
pub(crate) fn check_vocab(tokenizer: &Tokenizer, cfg: &Config) -> Result<()> {
    if tokenizer.vocab_size() > cfg.vocab {
        return Err(Error::Model(format!("tokenizer has {} tokens, the model {}", tokenizer.vocab_size(), cfg.vocab)));
    }
    Ok(())
}

/// Each weight converted to the GPU layout (`ops::Weight::upload_owned` without the upload) and
/// dropped; counts the bytes the upload would take.
struct Convert {
    bytes: u64,
}

impl model::Sink for Convert {
    type Matrix = ();
    type Vector = ();
    async fn matrix(&mut self, name: &str, format: Format, gguf_bytes: Cow<'_, [u8]>, n: usize, k: usize) -> Result<()> {
        let words = crate::ops::gpu_layout(name, format, &gguf_bytes, n, k)?;
        self.bytes = self.bytes.saturating_add(std::mem::size_of_val(&words[..]) as u64);
        Ok(())
    }
    async fn vector(&mut self, _name: &str, v: Vec<f32>) -> Result<()> {
        self.bytes = self.bytes.saturating_add(std::mem::size_of_val(&v[..]) as u64);
        Ok(())
    }
    fn join(&mut self, _parts: Vec<()>) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::check::testmodel::{tiny_gguf, tiny_gguf_with};
    use crate::model::gguf::Value;

    /// The tiny model with its metadata edited by `edit` (tensors unchanged).
    fn tiny_with(edit: impl FnOnce(&mut BTreeMap<String, Value>)) -> Vec<u8> {
        tiny_gguf_with(1, |m, _| edit(m))
    }

    #[test]
    fn the_tiny_model_passes_with_its_gpu_layout_size() {
        let c = check_model_cpu(&tiny_gguf(1)).unwrap();
        assert_eq!((c.config.n_layer, c.config.dim, c.config.vocab, c.config.context), (2, 96, 320, 1024));
        assert_eq!(c.tokenizer.vocab_size(), 320);
        assert!(c.template.is_some());
        // token_embd [320 rows, 26 words: a header word for 3 blocks' d, then 8 words a block]; per layer qkv [160, 15], wo [96, 15], gate|up [320, 15],
        // down [96, 25] and two norms of 96; output_norm 96: all × 4 bytes.
        let layer = (160 * 15 + 96 * 15 + 320 * 15 + 96 * 25 + 2 * 96) * 4;
        assert_eq!(c.gpu_weight_bytes, 320 * 26 * 4 + 2 * layer + 96 * 4);
    }

    #[test]
    fn sizes_above_32_bits_are_refused_not_truncated() {
        // `as usize` on wasm32 would read these as 96 and 257 and accept the file.
        let f = tiny_with(|m| {
            m.insert("llama.embedding_length".into(), Value::U64((1 << 32) | 96));
        });
        assert!(matches!(check_model_cpu(&f), Err(Error::Model(_))), "{:?}", check_model_cpu(&f).map(|c| c.config));
        let f = tiny_with(|m| {
            m.insert("tokenizer.ggml.bos_token_id".into(), Value::U64((1 << 32) | 257));
        });
        assert!(matches!(check_model_cpu(&f), Err(Error::Tokenizer(_))));
        // A context far beyond what is usable is capped, not allocated.
        let f = tiny_with(|m| {
            m.insert("llama.context_length".into(), Value::U64(1 << 40));
        });
        assert_eq!(check_model_cpu(&f).unwrap().config.context, model::MAX_CONTEXT);
        let f = tiny_with(|m| {
            m.insert("llama.context_length".into(), Value::U32(0));
        });
        assert!(matches!(check_model_cpu(&f), Err(Error::Model(_))));
    }

    #[test]
    fn each_failing_check_gives_the_loads_error() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (tiny_with(|m| drop(m.remove("tokenizer.ggml.merges"))), "tokenizer.ggml.merges"),
            (tiny_with(|m| drop(m.insert("tokenizer.chat_template".into(), Value::Str("{% for %}".into())))), "does not parse"),
            (tiny_with(|m| drop(m.insert("llama.block_count".into(), Value::U32(3)))), "blk.2.attn_norm.weight is missing"),
            (
                tiny_with(|m| drop(m.insert("llama.feed_forward_length".into(), Value::U32(128)))),
                "blk.0.ffn_down.weight: shape [160, 96], expected [128, ·]",
            ),
            (tiny_with(|m| drop(m.insert("llama.attention.head_count_kv".into(), Value::U32(4)))), "must be a multiple of 4 KV heads"),
            (tiny_with(|m| drop(m.insert("llama.rope.dimension_count".into(), Value::U32(24)))), "RoPE over 24 of 16 dims"),
            (tiny_with(|m| drop(m.insert("llama.attention.head_count".into(), Value::U32(7)))), "7 heads must divide width 96"),
            (
                tiny_with(|m| {
                    m.remove("llama.rope.dimension_count");
                    m.insert("llama.embedding_length".into(), Value::U32(192));
                }),
                "token_embd is [96, 320], width is 192",
            ),
        ];
        for (file, part) in cases {
            match check_model_cpu(&file) {
                Err(e) if e.to_string().contains(part) => {}
                other => panic!("expected an error containing {part:?}, got {:?}", other.map(|c| c.config)),
            }
            // The header alone tells the same: each case is in the header.
            match check_header(&Gguf::parse(&file).unwrap()) {
                Err(e) if e.to_string().contains(part) => {}
                other => panic!("check_header: expected an error containing {part:?}, got {other:?}"),
            }
        }
    }

    #[test]
    fn the_header_check_reads_no_tensor_data() {
        let file = tiny_gguf(1);
        let g = Gguf::parse(&file).unwrap();
        // The header and tensor table, then nothing: every tensor's data is past the end.
        let header_len = g.tensors.iter().map(|t| t.offset).min().unwrap() as usize;
        let header = Gguf::parse_header(&file[..header_len], file.len() as u64).unwrap();
        assert_eq!(check_header(&header).unwrap(), check_model_cpu(&file).unwrap().config);
    }
}
