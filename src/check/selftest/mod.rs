//! Kernel checks: each runs one GPU kernel on seeded random inputs and compares every output with
//! the CPU oracle, naming the first index outside tolerance with both values. The same checks run
//! in `cargo test` (native), in `wasm-pack test` (headless Chromium) and on the demo page, which
//! also shows the speed each one measured.

use crate::engine::sample::rng::Rng;
use crate::error::{Error, Result};
use crate::gpu::{now_ms, Batch, Gpu};
use crate::model::quant::{self, Format};
use crate::ops::{self, Variant, Weight};

mod kernels;

/// A kernel check and its shape.
#[derive(Clone, Debug)]
pub enum Check {
    /// `y = x · Wᵀ` with `W` in `format`: `t` rows of `k` values in, `t` rows of `n` out.
    Matmul {
        /// The weight format.
        format: Format,
        /// Rows of x (tokens).
        t: usize,
        /// Row length of x and of W.
        k: usize,
        /// Rows of W (outputs per row of x).
        n: usize,
    },
    /// `y += x · Wᵀ` (the residual fused into a projection).
    MatmulAcc {
        /// The weight format.
        format: Format,
        /// Rows of x (tokens).
        t: usize,
        /// Row length of x and of W.
        k: usize,
        /// Rows of W (outputs per row of x).
        n: usize,
    },
    /// `y = act(x · W_gateᵀ) · (x · W_upᵀ)` on every variant's tiled kernel, the activation fused
    /// into the gate|up matmul's store (`ops::matmul_glu`): against the oracle, and bit for bit
    /// against the tiled matmul followed by the activation's own kernel.
    MatmulGlu {
        /// The weight format.
        format: Format,
        /// Rows of x (tokens).
        t: usize,
        /// Row length of x and of W.
        k: usize,
        /// Rows of y (W has 2f: gate, then up).
        f: usize,
        /// GELU (GeGLU) instead of silu (SwiGLU).
        gelu: bool,
    },
    /// One token's projection on a matrix-vector kernel, from row `x_row` of x, with the op
    /// before it fused into the x-load, `y +=` with `acc`.
    Matvec {
        /// The weight format.
        format: Format,
        /// Row length of W (and of x, before a SwiGLU halves it).
        k: usize,
        /// Rows of W (outputs).
        n: usize,
        /// The row of x that is read.
        x_row: usize,
        /// The op fused into the x-load.
        op: Fused,
        /// Add into y instead of overwriting it.
        acc: bool,
        /// The kernel variant.
        kind: Variant,
    },
    /// RMSNorm with a weight, row by row.
    RmsNorm {
        /// Rows.
        rows: usize,
        /// Values per row.
        dim: usize,
    },
    /// RoPE over the first `heads` heads of each of `t` rows; the `extra_heads` after them must be
    /// left as they are.
    Rope {
        /// Rows (tokens), each at a random position below `max_pos`.
        t: usize,
        /// Heads rotated per row.
        heads: usize,
        /// Heads per row after them, not rotated.
        extra_heads: usize,
        /// Width of one head.
        head_dim: usize,
        /// Positions in the RoPE table.
        max_pos: usize,
    },
    /// RoPE over the first `n_rot` of each head's `head_dim` dims, with random frequency factors
    /// (Llama-3's `rope_freqs`; partial rotary leaves the rest as they are).
    RopeScaled {
        /// Rows (tokens).
        t: usize,
        /// Heads rotated per row.
        heads: usize,
        /// Width of one head.
        head_dim: usize,
        /// Dims rotated at the start of each head.
        n_rot: usize,
    },
    /// A bias added to `t` rows of `n`.
    Bias {
        /// Rows.
        t: usize,
        /// Values per row.
        n: usize,
    },
    /// RMSNorm of `heads` heads in place, after `skip` heads, in rows of `heads + skip + 1` heads,
    /// the first `split` with one weight and the rest with another (the QK-norm on Q and K of a
    /// fused Q|K|V row).
    HeadNorm {
        /// Rows.
        t: usize,
        /// Heads normalized per row.
        heads: usize,
        /// Heads before them, left as they are.
        skip: usize,
        /// Width of one head.
        head_dim: usize,
        /// Heads normalized with the first weight.
        split: usize,
    },
    /// SwiGLU: rows of gate | up (`2·f` values) into rows of `f`.
    SwiGlu {
        /// Rows (tokens).
        t: usize,
        /// Values per output row (FFN width).
        f: usize,
    },
    /// Embedding lookup in a table of `format`.
    Embed {
        /// The table's format.
        format: Format,
        /// Tokens looked up (the first is the last id of the table).
        t: usize,
        /// Rows of the table.
        vocab: usize,
        /// Values per row.
        dim: usize,
    },
    /// A matrix in parts: its first `n / 2` rows in `formats[0]`, the rest in `formats[1]` (a
    /// fused projection of two formats), each split by rows into parts of `group_rows` row groups
    /// (a weight larger than one binding): `y = x · Wᵀ` on the tiled and matrix-vector kernels,
    /// and the embedding lookup, against the oracle.
    Parts {
        /// The formats of the two halves.
        formats: [Format; 2],
        /// Rows of x (tokens).
        t: usize,
        /// Row length.
        k: usize,
        /// Rows of W.
        n: usize,
        /// Row groups (of `quant::ROW_GROUP` rows) a part holds at most.
        group_rows: usize,
    },
    /// Argmax of each row, with a tie (the lower index must win) and a NaN (must never win).
    Argmax {
        /// Rows.
        rows: usize,
        /// Values per row.
        n: usize,
    },
    /// Greedy feed: the argmax goes to `ids[slot]` and `tokens[0]`, `pos[0]` advances.
    ArgmaxFeed {
        /// Logits in the row.
        n: usize,
        /// Where in `ids` the token goes.
        slot: usize,
    },
    /// What a temperature sampler reads: the `k` largest of `n` logits (at most `cap`, ties
    /// included), max, softmax sum, and `window` penalty-window logits. `flat`: every logit equal
    /// (more ties than `cap`).
    TopK {
        /// Logits in the row.
        n: usize,
        /// How many of the largest to find.
        k: usize,
        /// Most candidates the kernel returns.
        cap: usize,
        /// Penalty-window token ids whose logits are read.
        window: usize,
        /// Every logit equal.
        flat: bool,
    },
    /// `past` tokens already cached, then `t` new ones; pages shuffled in a pool of `pool` pages.
    /// Also prefill's RoPE and KV write in one dispatch (`ops::rope_kv_write`) on this shape: the
    /// same bits as `rope` then `kv_write`.
    Attention {
        /// Tokens cached before the new ones.
        past: usize,
        /// New tokens (queries).
        t: usize,
        /// Query heads.
        n_head: usize,
        /// KV heads.
        n_kv: usize,
        /// Width of one head.
        head_dim: usize,
        /// Positions per page.
        page: usize,
        /// Pages in the pool.
        pool: usize,
    },
    /// A decode step's attention with RoPE and the KV write fused in, after `past` cached tokens.
    DecodeAttention {
        /// Tokens cached before the new one.
        past: usize,
        /// Query heads.
        n_head: usize,
        /// KV heads.
        n_kv: usize,
        /// Width of one head.
        head_dim: usize,
        /// Positions per page.
        page: usize,
        /// Pages in the pool.
        pool: usize,
    },
    /// Copy the first `n` positions of one page to another (copy-on-write of a shared page).
    KvCopy {
        /// Pages in the pool.
        pages: usize,
        /// Positions per page.
        page: usize,
        /// KV heads.
        n_kv: usize,
        /// Width of one head.
        head_dim: usize,
        /// Positions copied.
        n: usize,
    },
}

/// The op a [`Check::Matvec`] fuses into its x-load (see `ops::XLoad`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fused {
    /// None: x is read as it is.
    None,
    /// RMSNorm of the x row, with a weight.
    RmsNorm,
    /// SwiGLU of an x row of gate | up (`2·k` values).
    SwiGlu,
    /// GeGLU (GELU's tanh approximation) of an x row of gate | up.
    GeGlu,
}

/// What a check measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// The check's name and shape ([`Check::name`]).
    pub name: String,
    /// Largest |GPU − CPU| over all outputs.
    pub max_err: f32,
    /// Milliseconds per kernel run, when timed.
    pub ms: Option<f64>,
    /// The rate that time implies, and its unit (`"GB/s"` or `"GFLOP/s"`).
    pub rate: Option<(f64, &'static str)>,
}

impl Check {
    /// The check's kernel and shape, e.g. `matmul Q8_0 T=1 K=96 N=37`.
    pub fn name(&self) -> String {
        match self {
            Check::Matmul { format, t, k, n } => format!("matmul {} T={t} K={k} N={n}", format.name()),
            Check::MatmulAcc { format, t, k, n } => format!("matmul+= {} T={t} K={k} N={n}", format.name()),
            Check::MatmulGlu { format, t, k, f, gelu } => {
                format!("matmul+{} {} T={t} K={k} F={f}", if *gelu { "geglu" } else { "swiglu" }, format.name())
            }
            Check::Matvec { format, k, n, x_row, op, acc, kind } => {
                format!("matvec {kind:?} {} K={k} N={n} x_row={x_row} fused={op:?}{}", format.name(), if *acc { " +=" } else { "" })
            }
            Check::RmsNorm { rows, dim } => format!("rmsnorm rows={rows} dim={dim}"),
            Check::Rope { t, heads, extra_heads, head_dim, max_pos } => {
                format!("rope T={t} heads={heads}+{extra_heads} hd={head_dim} max_pos={max_pos}")
            }
            Check::SwiGlu { t, f } => format!("swiglu T={t} F={f}"),
            Check::RopeScaled { t, heads, head_dim, n_rot } => format!("rope scaled T={t} heads={heads} hd={head_dim} n_rot={n_rot}"),
            Check::Bias { t, n } => format!("bias T={t} N={n}"),
            Check::HeadNorm { t, heads, skip, head_dim, split } => {
                format!("head_norm T={t} heads={heads} (split at {split}) skip={skip} hd={head_dim}")
            }
            Check::Embed { format, t, vocab, dim } => format!("embed {} T={t} vocab={vocab} dim={dim}", format.name()),
            Check::Parts { formats, t, k, n, group_rows } => {
                format!("parts {}|{} T={t} K={k} N={n} rows/part={}", formats[0].name(), formats[1].name(), group_rows * quant::ROW_GROUP)
            }
            Check::Argmax { rows, n } => format!("argmax rows={rows} n={n}"),
            Check::ArgmaxFeed { n, slot } => format!("argmax feed n={n} slot={slot}"),
            Check::TopK { n, k, cap, window, flat } => {
                format!("topk n={n} k={k} cap={cap} window={window}{}", if *flat { " flat" } else { "" })
            }
            Check::DecodeAttention { past, n_head, n_kv, head_dim, page, pool } => {
                format!("rope+kv_write+attention (fused) past={past} heads={n_head}/{n_kv} hd={head_dim} page={page} pool={pool}")
            }
            Check::Attention { past, t, n_head, n_kv, head_dim, page, pool } => {
                format!("kv_write+attention past={past} T={t} heads={n_head}/{n_kv} hd={head_dim} page={page} pool={pool}")
            }
            Check::KvCopy { pages, page, n_kv, head_dim, n } => {
                format!("kv_copy pages={pages} page={page} n_kv={n_kv} hd={head_dim} n={n}")
            }
        }
    }

    /// The checks the browser and the demo page run: every kernel and every weight format at
    /// small, odd shapes (the software WebGPU adapter is slow).
    pub fn small_suite() -> Vec<Check> {
        let mut v: Vec<Check> = Vec::new();
        for format in Format::ALL {
            let k = |k: usize| k.next_multiple_of(format.block());
            v.push(Check::Matmul { format, t: 1, k: k(96), n: 37 });
            v.push(Check::Matmul { format, t: 7, k: k(64), n: 45 });
            v.push(Check::Embed { format, t: 4, vocab: 50, dim: k(64) });
        }
        for kind in [Variant::Rows, Variant::Coop] {
            for (op, acc) in [(Fused::RmsNorm, false), (Fused::SwiGlu, true), (Fused::GeGlu, false)] {
                v.push(Check::Matvec { format: Format::Q4_1, k: 64, n: 37, x_row: 1, op, acc, kind });
                v.push(Check::Matvec { format: Format::Q4_K, k: 256, n: 37, x_row: 1, op, acc, kind });
            }
            v.push(Check::Matvec { format: Format::Q8_0, k: 96, n: 33, x_row: 0, op: Fused::RmsNorm, acc: false, kind });
        }
        v.push(Check::Parts { formats: [Format::Q6_K, Format::Q8_0], t: 5, k: 256, n: 150, group_rows: 1 });
        v.push(Check::MatmulGlu { format: Format::Q4_1, t: 5, k: 64, f: 18, gelu: false });
        v.push(Check::MatmulGlu { format: Format::Q4_K, t: 6, k: 256, f: 34, gelu: true });
        v.push(Check::ArgmaxFeed { n: 1000, slot: 2 });
        v.push(Check::TopK { n: 3000, k: 64, cap: 128, window: 5, flat: false });
        v.push(Check::TopK { n: 100, k: 256, cap: 512, window: 3, flat: false });
        v.push(Check::TopK { n: 700, k: 32, cap: 64, window: 0, flat: true });
        v.push(Check::DecodeAttention { past: 9, n_head: 6, n_kv: 2, head_dim: 16, page: 4, pool: 6 });
        v.push(Check::DecodeAttention { past: 70, n_head: 3, n_kv: 1, head_dim: 8, page: 8, pool: 11 });
        v.push(Check::MatmulAcc { format: Format::Q4_1, t: 1, k: 64, n: 33 });
        v.push(Check::MatmulAcc { format: Format::Q4_1, t: 5, k: 64, n: 33 });
        v.extend([
            Check::RmsNorm { rows: 3, dim: 100 },
            Check::Rope { t: 5, heads: 3, extra_heads: 1, head_dim: 16, max_pos: 300 },
            Check::SwiGlu { t: 3, f: 37 },
            Check::RopeScaled { t: 3, heads: 2, head_dim: 16, n_rot: 8 },
            Check::Bias { t: 3, n: 37 },
            Check::HeadNorm { t: 3, heads: 3, skip: 1, head_dim: 16, split: 2 },
            Check::Argmax { rows: 3, n: 1000 },
            Check::Attention { past: 5, t: 4, n_head: 6, n_kv: 2, head_dim: 16, page: 4, pool: 6 },
            Check::Attention { past: 0, t: 1, n_head: 3, n_kv: 3, head_dim: 8, page: 2, pool: 2 },
            Check::Attention { past: 600, t: 3, n_head: 6, n_kv: 2, head_dim: 16, page: 16, pool: 40 },
            Check::KvCopy { pages: 5, page: 4, n_kv: 2, head_dim: 16, n: 3 },
            Check::KvCopy { pages: 3, page: 16, n_kv: 3, head_dim: 64, n: 16 },
        ]);
        v
    }
}

impl Report {
    fn timed(name: String, max_err: f32, ms: Option<f64>, work: f64, unit: &'static str) -> Report {
        let rate = ms.map(|ms| (work / (ms * 1e6), unit));
        Report { name, max_err, ms, rate }
    }
}

/// Records `op` once and waits for it.
async fn ops_once(gpu: &Gpu, op: impl Fn(&mut Batch) -> Result<()>) -> Result<()> {
    let mut b = gpu.batch()?;
    op(&mut b)?;
    b.submit().await?;
    gpu.finish().await
}

/// Runs `op` once for the check; with `reps > 0` then times that many more runs in one batch.
async fn execute(gpu: &Gpu, reps: usize, op: impl Fn(&mut Batch) -> Result<()>) -> Result<Option<f64>> {
    ops_once(gpu, &op).await?;
    if reps == 0 {
        return Ok(None);
    }
    let start = now_ms();
    let mut b = gpu.batch()?;
    for _ in 0..reps {
        op(&mut b)?;
    }
    b.submit().await?;
    gpu.finish().await?;
    Ok(Some((now_ms() - start) / reps as f64))
}

/// Compares element-wise; the error names the first index outside `tol(i)` and both values.
pub(crate) fn compare(check: &str, what: &str, got: &[f32], want: &[f32], tol: impl Fn(usize) -> f32) -> Result<f32> {
    if got.len() != want.len() {
        return Err(Error::Mismatch(format!("{check}: {what} has {} values, expected {}", got.len(), want.len())));
    }
    let mut max_err = 0f32;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = (g - w).abs();
        if d.is_nan() || d > tol(i) {
            return Err(Error::Mismatch(format!("{check}: {what}[{i}] = {g} (GPU) vs {w} (CPU), |diff| {d:e} > tolerance {:e}", tol(i))));
        }
        max_err = max_err.max(d);
    }
    Ok(max_err)
}

/// GGUF bytes of `n` random weights of `format` within about ±`amp`: quantized from random values
/// where hotprefix writes the format, otherwise random blocks ([`quant::tame`]: every bit pattern
/// of quants and sub-scales, finite scales).
pub(crate) fn weights(rng: &mut Rng, format: Format, n: usize, amp: f32) -> Result<Vec<u8>> {
    if format.can_quantize() {
        return quant::quantize(format, &rng.vec(n, amp));
    }
    let blocks = n / format.block();
    let mut bytes: Vec<u8> = (0..blocks * format.info().gguf_bytes).map(|_| rng.next_u64() as u8).collect();
    quant::tame(format, &mut bytes, amp);
    Ok(bytes)
}

/// Times `y = x · Wᵀ` on random weights of `format` (no oracle: for benchmarks): the median of
/// 5 rounds of `reps` back-to-back runs. Returns milliseconds per run and the weight's GPU bytes.
pub async fn time_matmul(gpu: &Gpu, format: Format, t: usize, k: usize, n: usize, reps: usize) -> Result<(f64, u64)> {
    time_matmul_on(gpu, format, t, k, n, reps, None).await
}

/// Matrix-vector time per GPU weight byte of each of `formats`, at `k` (rounded up to each
/// format's block) × `n`, measured in `rounds` interleaved rounds (every format once a round, `reps`
/// back-to-back runs each), so that a ratio between formats compares runs from the same seconds
/// on a noisy machine. Returns, a round, each format's nanoseconds per weight byte.
pub async fn time_matvecs_interleaved(
    gpu: &Gpu,
    formats: &[Format],
    k: usize,
    n: usize,
    reps: usize,
    rounds: usize,
) -> Result<Vec<Vec<f64>>> {
    let mut rng = Rng(42);
    let mut set = Vec::new();
    for &format in formats {
        let k = k.next_multiple_of(format.block());
        let wq = weights(&mut rng, format, n * k, 0.5)?;
        let w = Weight::upload(gpu, "w", format, &wq, n, k).await?;
        let xb = gpu.upload("x", &rng.vec(k, 1.0)).await?;
        set.push((w, xb));
    }
    let yb = gpu.storage("y", 4 * n as u64).await?;
    let mut out = Vec::new();
    for _ in 0..rounds {
        let mut round = Vec::new();
        for (w, xb) in &set {
            let ms = execute(gpu, reps.max(1), |b| ops::matmul(b, xb, w, &yb, 1)).await?.unwrap_or(0.0);
            round.push(ms * 1e6 / w.bytes() as f64);
        }
        out.push(round);
    }
    Ok(out)
}

/// As [`time_matmul`], the tiled kernel of `kind` if given (`ops::matmul_exact`: whatever T is).
pub async fn time_matmul_on(
    gpu: &Gpu,
    format: Format,
    t: usize,
    k: usize,
    n: usize,
    reps: usize,
    kind: Option<Variant>,
) -> Result<(f64, u64)> {
    let mut rng = Rng(42);
    let wq = weights(&mut rng, format, n * k, 0.5)?;
    let w = Weight::upload(gpu, "w", format, &wq, n, k).await?;
    let xb = gpu.upload("x", &rng.vec(t * k, 1.0)).await?;
    let yb = gpu.storage("y", 4 * (t * n) as u64).await?;
    let mut rounds = Vec::new();
    for _ in 0..5 {
        let ms = match kind {
            Some(kind) => execute(gpu, reps.max(1), |b| ops::matmul_exact(b, &xb, &w, &yb, t, false, kind)).await?,
            None => execute(gpu, reps.max(1), |b| ops::matmul(b, &xb, &w, &yb, t)).await?,
        };
        rounds.push(ms.unwrap_or(0.0));
    }
    rounds.sort_by(f64::total_cmp);
    Ok((rounds[2], w.bytes()))
}
