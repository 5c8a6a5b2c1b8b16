// y[T, N] = x[T, K] · W[N, K]ᵀ — prefill matmul and decode matrix-vector, weights dequantized here.
//
// W is stored row-major by output row, in the GPU layout of `FORMAT` (src/quant.rs):
//   0 F32  : K words a row, bit patterns of f32
//   1 F16  : K/2 words a row, two halves each (read with unpack2x16float: no shader-f16 needed)
//   2 Q8_0 : K/32 blocks of 9 words: d (f16, low half), then 32 × i8
//   3 Q4_1 : K/32 blocks of 5 words: d | m << 16 (f16 each), then 16 bytes of nibbles:
//            byte j = value j (low nibble) and value j+16 (high nibble); x = d·q + m
// K is a multiple of 4 (of 32 for the block formats); T and N are arbitrary.
// No workgroup memory and no barriers: lavapipe runs these fastest (see docs/BENCHMARKS.md).

override FORMAT: u32 = 0u;
override WG: u32 = 64u;

struct Params {
    t: u32, // tokens (rows of x and y)
    k: u32, // input features
    n: u32, // output features
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;    // [T, K/4]
@group(0) @binding(2) var<storage, read> w: array<u32>;          // [N, K] in FORMAT's GPU layout
@group(0) @binding(3) var<storage, read_write> y: array<f32>;    // [T, N]

// Values 4·k4 .. 4·k4+3 of weight row `row`.
fn w4(row: u32, k4: u32) -> vec4<f32> {
    if FORMAT == 0u {
        let b = row * p.k + k4 * 4u;
        return vec4<f32>(bitcast<f32>(w[b]), bitcast<f32>(w[b + 1u]), bitcast<f32>(w[b + 2u]), bitcast<f32>(w[b + 3u]));
    } else if FORMAT == 1u {
        let b = (row * p.k) / 2u + k4 * 2u;
        return vec4<f32>(unpack2x16float(w[b]), unpack2x16float(w[b + 1u]));
    } else if FORMAT == 2u {
        let b = (row * (p.k / 32u) + k4 / 8u) * 9u;
        let d = unpack2x16float(w[b]).x;
        let q = w[b + 1u + (k4 & 7u)];
        let v = vec4<i32>(
            bitcast<i32>(q << 24u) >> 24u,
            bitcast<i32>(q << 16u) >> 24u,
            bitcast<i32>(q << 8u) >> 24u,
            bitcast<i32>(q) >> 24u);
        return d * vec4<f32>(v);
    }
    let b = (row * (p.k / 32u) + k4 / 8u) * 5u;
    let dm = unpack2x16float(w[b]);
    let i = k4 & 7u;
    let q = w[b + 1u + (i & 3u)] >> ((i >> 2u) * 4u);
    let v = vec4<u32>(q, q >> 8u, q >> 16u, q >> 24u) & vec4<u32>(15u);
    return dm.x * vec4<f32>(v) + dm.y;
}

// One output y[t, n] per invocation: the decode path (T small).
@compute @workgroup_size(WG)
fn matvec(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = gid.x;
    let t = gid.y;
    if n >= p.n || t >= p.t {
        return;
    }
    let k4n = p.k / 4u;
    let xb = t * k4n;
    var acc = vec4<f32>(0.0);
    for (var i = 0u; i < k4n; i++) {
        acc += x[xb + i] * w4(n, i);
    }
    y[t * p.n + n] = acc.x + acc.y + acc.z + acc.w;
}

// A 4 × 4 tile of y (4 tokens × 4 output rows) per invocation: each weight value is dequantized
// once for four tokens, each x value read once for four rows.
@compute @workgroup_size(WG)
fn matmul(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n0 = gid.x * 4u;
    let t0 = gid.y * 4u;
    if n0 >= p.n || t0 >= p.t {
        return;
    }
    let k4n = p.k / 4u;
    // Rows and tokens past the end repeat the last one; their results are not stored.
    let r = min(vec4<u32>(n0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.n - 1u));
    let tt = min(vec4<u32>(t0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.t - 1u)) * k4n;
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    for (var i = 0u; i < k4n; i++) {
        let w0 = w4(r.x, i);
        let w1 = w4(r.y, i);
        let w2 = w4(r.z, i);
        let w3 = w4(r.w, i);
        let x0 = x[tt.x + i];
        let x1 = x[tt.y + i];
        let x2 = x[tt.z + i];
        let x3 = x[tt.w + i];
        a0 += vec4<f32>(dot(x0, w0), dot(x0, w1), dot(x0, w2), dot(x0, w3));
        a1 += vec4<f32>(dot(x1, w0), dot(x1, w1), dot(x1, w2), dot(x1, w3));
        a2 += vec4<f32>(dot(x2, w0), dot(x2, w1), dot(x2, w2), dot(x2, w3));
        a3 += vec4<f32>(dot(x3, w0), dot(x3, w1), dot(x3, w2), dot(x3, w3));
    }
    let acc = array<vec4<f32>, 4>(a0, a1, a2, a3);
    for (var ti = 0u; ti < 4u; ti++) {
        let t = t0 + ti;
        if t >= p.t {
            break;
        }
        for (var ri = 0u; ri < 4u; ri++) {
            if n0 + ri < p.n {
                y[t * p.n + n0 + ri] = acc[ti][ri];
            }
        }
    }
}
