//! Text in and out of the model: the tokenizer built from the GGUF metadata ([`tokenizer`]) and the
//! model's chat template ([`template`]).

pub mod template;
pub mod tokenizer;
