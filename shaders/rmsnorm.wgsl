// y[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) · w — one row per invocation (no barriers); with
// `acc`, y[r, :] += that (Gemma-3's post-attention and post-FFN norms, added to the residual).

struct Params {
    rows: u32,
    dim: u32,
    eps: f32,
    acc: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;          // [rows, dim]
@group(0) @binding(2) var<storage, read> w: array<f32>;          // [dim]
@group(0) @binding(3) var<storage, read_write> y: array<f32>;    // [rows, dim]

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let r = gid.x;
    if r >= p.rows {
        return;
    }
    let b = r * p.dim;
    var ss = 0.0;
    for (var i = 0u; i < p.dim; i++) {
        ss += x[b + i] * x[b + i];
    }
    let s = inverseSqrt(ss / f32(p.dim) + p.eps);
    for (var i = 0u; i < p.dim; i++) {
        let v = x[b + i] * s * w[i];
        y[b + i] = select(v, y[b + i] + v, p.acc == 1u);
    }
}
