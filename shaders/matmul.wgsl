// y[T, N] = x[T, K] · W[N, K]ᵀ — prefill matmul and decode matrix-vector, weights dequantized here.
//
// W is in the GPU layout of `FORMAT`, decoded by quant.wgsl (concatenated before this file:
// ops/matmul.rs): `w4` for the tiled matmul, `dot_chunk` for the matrix-vector kernels.
// K is a multiple of 4 (of the block for the block formats); T and N are arbitrary. A weight may
// be one of several parts of a matrix (rows split across bindings, or fused projections whose
// tensors differ in format): row n of a part is column y_off + n of y, whose rows are y_stride.
//
// Three kernels: `matmul` (tiles of TT tokens × 4 rows, prefill), `matvec` (an invocation per 1–8
// rows walking K alone: no workgroup memory and no barriers, which lavapipe runs fastest,
// docs/BENCHMARKS.md) and `matvec_coop` (a workgroup per 8–32 rows, its lanes splitting K and
// summing in workgroup memory: real GPUs, where one invocation per row leaves most lanes idle).
// The matrix-vector kernels can fuse the op before them into their x-load (XLOAD): RMSNorm
// (x / rms(x) · nw; the 1/rms factor is applied to the finished dot product, Σx² accumulated from
// the same loads) or a gated activation (act(gate) · up from a fused gate|up row, glu.wgsl). The
// tiled matmul can fuse the gated activation after it instead (GLU): its weight is the gate|up
// matrix, and it stores act(gate) · up.

// 0: x as it is; 1: RMSNorm(x) · nw; 2: silu(x[:K]) · x[K:] from rows of 2K (gate | up); 3: the
// same with GELU.
override XLOAD: u32 = 0u;
// `matmul` only. 0: y = x · Wᵀ; 1 (SwiGLU), 2 (GeGLU): W is a gate|up matrix of 2F rows (F even)
// and y[t, j] = act(gate_j) · up_j, for rows of F.
override GLU: u32 = 0u;
// 1: y += x · Wᵀ (the residual connection fused into the projection); 0: y = x · Wᵀ.
override ACC: u32 = 0u;
override WG: u32 = 64u;
// `matmul`: 1 decodes block formats a 32-value chunk at a time (the CPU adapters' variants), 0 a
// quad at a time (Coop: GPUs).
override CHUNK: u32 = 0u;

struct Params {
    t: u32,     // tokens (rows of x and y)
    k: u32,     // input features
    n: u32,     // output features
    w_row: u32, // words a weight row
    x_off: u32, // vec4s of x before row 0 (matrix-vector kernels: e.g. the last row of a chunk)
    eps: f32,   // RMSNorm epsilon (XLOAD 1)
    y_stride: u32, // floats a row of y (the whole matrix's N)
    y_off: u32,    // y column of this part's row 0
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;    // [T, K/4]
@group(0) @binding(2) var<storage, read> w: array<u32>;          // [N padded to G, W_ROW] interleaved
@group(0) @binding(3) var<storage, read_write> y: array<f32>;    // [T, y_stride]
@group(0) @binding(4) var<storage, read> nw: array<vec4<f32>>;   // [K/4] RMSNorm weight (XLOAD 1; matrix-vector only)

// x values 4i .. 4i+3 of row t as the matrix-vector kernels see them (after the fused op);
// XLOAD 1 adds their squares to *ss.
fn x_at(t: u32, i: u32, ss: ptr<function, f32>) -> vec4<f32> {
    if XLOAD >= 2u {
        let b = p.x_off + t * (p.k / 2u);
        return glu4(x[b + i], x[b + p.k / 4u + i], XLOAD == 3u);
    }
    let v = x[p.x_off + t * (p.k / 4u) + i];
    if XLOAD == 1u {
        *ss += dot(v, v);
        return v * nw[i];
    }
    return v;
}

// A finished dot product of row t: scaled by 1/rms(x) for XLOAD 1.
fn finish(v: f32, ss: f32) -> f32 {
    if XLOAD == 1u {
        return v * inverseSqrt(ss / f32(p.k) + p.eps);
    }
    return v;
}

// y[t, y_off + n] (+)= v.
fn store(t: u32, n: u32, v: f32) {
    let i = t * p.y_stride + p.y_off + n;
    if ACC == 1u {
        y[i] += v;
    } else {
        y[i] = v;
    }
}

// Decode path (T small): each invocation computes y[t, ·] for R rows, g·R·G + l + G·j
// (g = invocation / G, l = invocation % G, j < R), so each x chunk is loaded once for R rows
// and the G invocations of a group still read neighbouring words.
override R: u32 = 8u;

@compute @workgroup_size(WG)
fn matvec(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let t = wid.y;
    let n0 = (gid.x / G) * R * G + gid.x % G;
    if n0 >= p.n || t >= p.t {
        return;
    }
    // x quads a chunk: a 32-value block or sub-block's 8, or one.
    let per = clamp(BLOCK / 4u, 1u, 8u);
    let chunks = p.k / (4u * per);
    // Row set-up and the store below inline, as matmul_lanes.wgsl's matvec_lanes has its own (8
    // neighbouring rows): moved into shared helper functions, lavapipe ran both kernels ~1.4×
    // slower.
    var rb: array<u32, 8>;
    var acc: array<vec4<f32>, 8>;
    for (var j = 0u; j < R; j++) {
        rb[j] = row_base(min(n0 + j * G, p.n - 1u));
        acc[j] = vec4<f32>(0.0);
    }
    var xv: array<vec4<f32>, 8>;
    // Each row's current header (quant.wgsl's has_header formats): loaded once every
    // header_period() chunks (a block's 8, or 2).
    var hd: array<vec4<u32>, 8>;
    var ss = 0.0;
    for (var c = 0u; c < chunks; c++) {
        var xsum = vec4<f32>(0.0);
        for (var i = 0u; i < per; i++) {
            xv[i] = x_at(t, c * per + i, &ss);
            xsum += xv[i];
        }
        if has_header() && c % header_period() == 0u {
            for (var j = 0u; j < R; j++) {
                hd[j] = header(rb[j], c);
            }
        }
        for (var j = 0u; j < R; j++) {
            acc[j] += dot_chunk(rb[j], c, &xv, xsum, hd[j]);
        }
    }
    for (var j = 0u; j < R; j++) {
        let n = n0 + j * G;
        if n < p.n {
            store(t, n, finish(dot(acc[j], vec4<f32>(1.0)), ss));
        }
    }
}

// Decode path for GPUs: workgroup (g, t) computes rows g·RW .. g·RW + RW−1 of token t. Lane
// (r, s) = (lane % RW, lane / RW) takes chunks s, s + S, … of row g·RW + r, so the RW lanes of a
// slice read RW neighbouring words (the interleaved layout, G = 32 rows a group, RW dividing it),
// then the S = CW / RW slices are summed by a tree in workgroup memory. RW is 32 for wide
// matrices and less, down to 8, for narrow ones (ops/matmul.rs): a 576-row projection gets 72
// workgroups, not 18 (on an H200's 132 SMs each lane's chunks were one dependent memory round
// trip after another).
const CW: u32 = 256u;
override RW: u32 = 32u;
var<workgroup> red: array<f32, CW>;
var<workgroup> red_ss: array<f32, CW>;

@compute @workgroup_size(CW)
fn matvec_coop(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = wid.y;
    let r = lid % RW;
    let s = lid / RW;
    let n = wid.x * RW + r;
    let rb = row_base(min(n, p.n - 1u));
    // x quads a chunk: a 32-value block or sub-block's 8, or one.
    let per = clamp(BLOCK / 4u, 1u, 8u);
    let chunks = p.k / (4u * per);
    var xv: array<vec4<f32>, 8>;
    var acc = vec4<f32>(0.0);
    var ss = 0.0;
    for (var c = s; c < chunks; c += CW / RW) {
        var xsum = vec4<f32>(0.0);
        for (var i = 0u; i < per; i++) {
            xv[i] = x_at(t, c * per + i, &ss);
            xsum += xv[i];
        }
        acc += dot_chunk(rb, c, &xv, xsum, header(rb, c));
    }
    red[lid] = dot(acc, vec4<f32>(1.0));
    // Σx² only where finish() reads it (the fused RMSNorm).
    if XLOAD == 1u {
        red_ss[lid] = ss;
    }
    workgroupBarrier();
    for (var h = CW / RW / 2u; h > 0u; h >>= 1u) {
        if s < h {
            red[lid] += red[lid + h * RW];
            if XLOAD == 1u {
                red_ss[lid] += red_ss[lid + h * RW];
            }
        }
        workgroupBarrier();
    }
    if s == 0u && n < p.n {
        store(t, n, finish(red[r], red_ss[r]));
    }
}

// A TT × 4 tile of y (TT tokens × 4 output rows) per invocation: each weight value is dequantized
// once for TT tokens, each x value read once for four rows. TT is 4, or 1 where few tokens would
// leave a GPU with too few invocations (Coop, ops/matmul.rs): 3,600 invocations instead of 1,008
// for the warm request's 25 tokens at N = 576. Token t's sums are the same expressions in the
// same order either way.
override TT: u32 = 4u;

//
// With GLU, an invocation's 4 rows are gate rows j, j + 1 and the up rows F + j, F + j + 1, and it
// stores act(gate) · up for columns j and j + 1 (glu_rows): each row's sums as without GLU.
@compute @workgroup_size(WG)
fn matmul(@builtin(global_invocation_id) gid: vec3<u32>) {
    let f = p.n / 2u;
    let n0 = select(gid.x * 4u, gid.x * 2u, GLU > 0u);
    let t0 = gid.y * TT;
    if n0 >= select(p.n, f, GLU > 0u) || t0 >= p.t {
        return;
    }
    let k4n = p.k / 4u;
    // Rows and tokens past the end repeat the last one; their results are not stored.
    var rn = min(vec4<u32>(n0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.n - 1u));
    if GLU > 0u {
        rn = glu_rows(n0, f);
    }
    let r = vec4<u32>(row_base(rn.x), row_base(rn.y), row_base(rn.z), row_base(rn.w));
    let tt = min(vec4<u32>(t0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.t - 1u)) * k4n;
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    // Block formats with CHUNK (the CPU adapters' variants): a 32-value chunk of each row at a
    // time, its header read once (quant.wgsl's chunk8); otherwise a quad at a time (w4).
    var c0: array<vec4<f32>, 8>;
    var c1: array<vec4<f32>, 8>;
    var c2: array<vec4<f32>, 8>;
    var c3: array<vec4<f32>, 8>;
    for (var c = 0u; c < select(0u, p.k / 32u, BLOCK > 1u && CHUNK == 1u); c++) {
        chunk8(r.x, c, &c0);
        chunk8(r.y, c, &c1);
        chunk8(r.z, c, &c2);
        chunk8(r.w, c, &c3);
        for (var j = 0u; j < 8u; j++) {
            let i = 8u * c + j;
            let x0 = x[tt.x + i];
            a0 += vec4<f32>(dot(x0, c0[j]), dot(x0, c1[j]), dot(x0, c2[j]), dot(x0, c3[j]));
            if TT > 1u {
                let x1 = x[tt.y + i];
                let x2 = x[tt.z + i];
                let x3 = x[tt.w + i];
                a1 += vec4<f32>(dot(x1, c0[j]), dot(x1, c1[j]), dot(x1, c2[j]), dot(x1, c3[j]));
                a2 += vec4<f32>(dot(x2, c0[j]), dot(x2, c1[j]), dot(x2, c2[j]), dot(x2, c3[j]));
                a3 += vec4<f32>(dot(x3, c0[j]), dot(x3, c1[j]), dot(x3, c2[j]), dot(x3, c3[j]));
            }
        }
    }
    for (var i = 0u; i < select(k4n, 0u, BLOCK > 1u && CHUNK == 1u); i++) {
        let w0 = w4(r.x, i);
        let w1 = w4(r.y, i);
        let w2 = w4(r.z, i);
        let w3 = w4(r.w, i);
        let x0 = x[tt.x + i];
        a0 += vec4<f32>(dot(x0, w0), dot(x0, w1), dot(x0, w2), dot(x0, w3));
        if TT > 1u {
            let x1 = x[tt.y + i];
            let x2 = x[tt.z + i];
            let x3 = x[tt.w + i];
            a1 += vec4<f32>(dot(x1, w0), dot(x1, w1), dot(x1, w2), dot(x1, w3));
            a2 += vec4<f32>(dot(x2, w0), dot(x2, w1), dot(x2, w2), dot(x2, w3));
            a3 += vec4<f32>(dot(x3, w0), dot(x3, w1), dot(x3, w2), dot(x3, w3));
        }
    }
    let acc = array<vec4<f32>, 4>(a0, a1, a2, a3);
    for (var ti = 0u; ti < TT; ti++) {
        let t = t0 + ti;
        if t >= p.t {
            break;
        }
        if GLU > 0u {
            for (var ri = 0u; ri < 2u; ri++) {
                if n0 + ri < f {
                    store(t, n0 + ri, glu(acc[ti][ri], acc[ti][ri + 2u], GLU == 2u));
                }
            }
            continue;
        }
        for (var ri = 0u; ri < 4u; ri++) {
            if n0 + ri < p.n {
                store(t, n0 + ri, acc[ti][ri]);
            }
        }
    }
}

// The rows of a GLU tile at column j (even) of F (even): gate j, j + 1 and up F + j, F + j + 1,
// past the end the last pair.
fn glu_rows(j: u32, f: u32) -> vec4<u32> {
    let jc = min(j, f - 2u);
    return vec4<u32>(jc, jc + 1u, f + jc, f + jc + 1u);
}
