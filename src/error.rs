//! The crate's one error type. Every fallible path returns `Result<T>`; the wasm boundary turns
//! an `Error` into a JS `Error` whose `name` is `Error::name()` (stable, documented strings).

/// Everything that can go wrong in hotprefix, from bad input to a lost GPU.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No WebGPU/Vulkan/Metal/DX12/GL adapter could be found.
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),
    /// The adapter's limits are below what the kernels need.
    #[error("GPU adapter limits too small: {0}")]
    AdapterLimits(String),
    /// The adapter refused to create a device.
    #[error("could not create a GPU device: {0}")]
    RequestDevice(String),
    /// The device was lost (driver reset, tab backgrounded too long, `destroy()`).
    #[error("GPU device lost: {0}")]
    DeviceLost(String),
    /// An allocation or submission ran out of GPU memory.
    #[error("GPU out of memory: {0}")]
    OutOfMemory(String),
    /// The GPU API rejected a call (a bug in hotprefix, or an adapter limit it did not check).
    #[error("GPU validation error: {0}")]
    Validation(String),
    /// The GPU implementation reported an internal error (e.g. a shader it could not compile).
    #[error("GPU internal error: {0}")]
    GpuInternal(String),
    /// Reading a buffer back to the CPU failed.
    #[error("GPU readback failed: {0}")]
    Readback(String),
    /// An op was called with tensors whose shapes do not fit together.
    #[error("{op}: {detail}")]
    Shape {
        /// The op that refused them.
        op: &'static str,
        /// The shapes given, and what was expected.
        detail: String,
    },
    /// A buffer or binding would exceed what this adapter allows.
    #[error("{what} needs {bytes} bytes but this adapter allows {limit}")]
    TooLarge {
        /// What was to be allocated or bound.
        what: String,
        /// Bytes it needs.
        bytes: u64,
        /// Bytes this adapter allows.
        limit: u64,
    },
    /// Weight bytes that do not match their declared format and shape.
    #[error("invalid weight data: {0}")]
    Weights(String),
    /// A GGUF file that is malformed or not what its header claims.
    #[error("bad GGUF file: {0}")]
    Gguf(String),
    /// A model whose metadata or tensors do not describe a model hotprefix can run.
    #[error("unsupported model: {0}")]
    Model(String),
    /// The sequence would grow past the KV cache's capacity (or its own page table).
    #[error("context full: {needed} tokens needed, room for {capacity}")]
    ContextFull {
        /// Positions needed (a request: its prompt plus `max_tokens`).
        needed: usize,
        /// Positions available (the context window, or the sequence's room).
        capacity: usize,
    },
    /// The KV budget asked for at load is larger than this adapter can bind: each layer's K (or
    /// V) pages are one buffer, and it would exceed the binding limit.
    #[error("a KV budget of {budget_mb} MB needs {bytes} bytes of pages, and this adapter allows {limit}")]
    KvBudgetTooLarge {
        /// The budget asked for, in MiB.
        budget_mb: f64,
        /// Bytes of pages it needs.
        bytes: u64,
        /// Bytes of pages this adapter allows.
        limit: u64,
    },
    /// The KV budget cannot hold the request, even after evicting every cached prefix no running
    /// request uses. Nothing resident was changed.
    #[error("KV cache budget exhausted: {needed_pages} more pages needed, {free_pages} can be freed")]
    CacheFull {
        /// Pages needed beyond those the request already holds or shares.
        needed_pages: usize,
        /// Pages that were free or could be freed by eviction.
        free_pages: usize,
    },
    /// A KV page accounting error (a double release, a write into a shared page): a bug in
    /// hotprefix, reported instead of silently handing one page to two sequences. The cache must be
    /// cleared before it is used again.
    #[error("KV cache corrupt: {0}")]
    CacheCorrupt(String),
    /// A saved-cache file that is corrupt, of another layout version, or for another model or
    /// shape: it is refused and nothing resident changes.
    #[error("saved cache refused: {0}")]
    CacheFile(String),
    /// An argument outside its valid range (a token id past the vocabulary, a NaN temperature…).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The model produced logits no token can be chosen from (every one NaN, or no finite
    /// probability): a fault in the model file's weights or in the GPU, not in the request.
    #[error("no token can be chosen: {0} (a fault in the model's weights or the GPU)")]
    Numerics(String),
    /// Reading or writing a file (a saved cache, requests, results) failed.
    #[error("I/O error: {0}")]
    Io(String),
    /// A kernel self-check found the GPU result differs from the CPU oracle.
    #[error("kernel check failed: {0}")]
    Mismatch(String),
    /// A tokenizer that cannot be built from the model's metadata, or text/ids it cannot handle.
    #[error("tokenizer error: {0}")]
    Tokenizer(String),
    /// A chat template that does not parse or render, or messages it cannot render.
    #[error("chat template error: {0}")]
    Template(String),
}

impl Error {
    /// A stable, machine-readable name for the error kind (used as the JS `Error.name`).
    pub fn name(&self) -> &'static str {
        match self {
            Error::NoAdapter(_) => "NoAdapterError",
            Error::AdapterLimits(_) => "AdapterLimitsError",
            Error::RequestDevice(_) => "RequestDeviceError",
            Error::DeviceLost(_) => "DeviceLostError",
            Error::OutOfMemory(_) => "OutOfMemoryError",
            Error::Validation(_) => "GpuValidationError",
            Error::GpuInternal(_) => "GpuInternalError",
            Error::Readback(_) => "ReadbackError",
            Error::Shape { .. } => "ShapeError",
            Error::TooLarge { .. } => "TooLargeError",
            Error::Weights(_) => "WeightsError",
            Error::Mismatch(_) => "MismatchError",
            Error::Numerics(_) => "NumericsError",
            Error::Io(_) => "IoError",
            Error::Gguf(_) => "GgufError",
            Error::ContextFull { .. } => "ContextFullError",
            Error::InvalidArgument(_) => "InvalidArgumentError",
            Error::CacheFull { .. } => "CacheFullError",
            Error::KvBudgetTooLarge { .. } => "KvBudgetTooLargeError",
            Error::CacheCorrupt(_) => "CacheCorruptError",
            Error::CacheFile(_) => "CacheFileError",
            Error::Model(_) => "ModelError",
            Error::Tokenizer(_) => "TokenizerError",
            Error::Template(_) => "TemplateError",
        }
    }

    pub(crate) fn shape(op: &'static str, detail: impl Into<String>) -> Self {
        Error::Shape { op, detail: detail.into() }
    }
}

/// `std::result::Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(target_arch = "wasm32")]
impl From<Error> for wasm_bindgen::JsValue {
    fn from(e: Error) -> Self {
        let js = js_sys::Error::new(&e.to_string());
        js.set_name(e.name());
        js.into()
    }
}
