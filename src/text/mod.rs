//! Text in and out of the model: the tokenizer built from the GGUF metadata ([`tokenizer`]) and the
//! model's chat template ([`template`]), and the prompt made of them ([`prompt`]).

pub mod prompt;
pub mod template;
pub mod tokenizer;
pub mod tools;
