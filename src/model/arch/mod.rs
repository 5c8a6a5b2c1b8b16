//! The architectures hotprefix runs, one short file each: the forward pass over the shared blocks
//! of `super::blocks` (as llama.cpp's `src/models/*.cpp` build each model from `build_norm`,
//! `build_attn`, `build_ffn`). Adding one: its file here, its row in [`ARCHITECTURES`], what its
//! hyper-parameters need in `Config::from_gguf`, and a test.

mod llama;

use crate::error::{Error, Result};
use crate::model::gguf::Gguf;

use super::blocks::Pass;

/// An architecture: its `general.architecture` name and its forward pass.
pub(crate) struct Arch {
    /// The name in `general.architecture`, also the prefix of its metadata keys.
    pub(crate) name: &'static str,
    /// Records one forward pass: embedding, blocks, head.
    pub(crate) forward: fn(&mut Pass<'_, '_>) -> Result<()>,
}

/// Every architecture hotprefix runs.
pub(crate) const ARCHITECTURES: &[&Arch] = &[&llama::LLAMA];

impl Arch {
    /// The architecture the file declares; an unknown one is refused by name.
    pub(crate) fn of(g: &Gguf) -> Result<&'static Arch> {
        let name = g.str("general.architecture")?;
        ARCHITECTURES.iter().copied().find(|a| a.name == name).ok_or_else(|| {
            let known: Vec<&str> = ARCHITECTURES.iter().map(|a| a.name).collect();
            Error::Model(format!("architecture {name:?} (only {} is supported)", known.join(", ")))
        })
    }
}
