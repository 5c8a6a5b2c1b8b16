//! The prompt cache: the paged KV pool and sequences ([`kv`]), the index of resident prefixes
//! (`prefix`), saved caches (`persist`) and head truncation (`truncate`). Plain CPU code over
//! the GPU pages, except [`kv::KvCache`], which holds them.

pub mod kv;
pub(crate) mod persist;
pub(crate) mod prefix;
pub(crate) mod truncate;
