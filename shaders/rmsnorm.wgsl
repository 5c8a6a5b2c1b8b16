// y[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) · w — a 64-lane workgroup per row: the lanes sum
// strided squares and workgroup_sum (workgroup_sum.wgsl, concatenated before this) adds them. One
// invocation walking a row alone, as before, took ~125 µs a row on a discrete GPU: 42–65% of the
// GPU time of the warm request and of a decode step with the norms as dispatches
// (docs/BENCHMARKS.md). With `acc`, y[r, :] += that (Gemma-3's post-attention and post-FFN norms, added to the residual).

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

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let r = wid.x + wid.y * nw.x;
    if r >= p.rows {
        return;
    }
    let b = r * p.dim;
    var ss = 0.0;
    for (var i = l; i < p.dim; i += WG) {
        ss += x[b + i] * x[b + i];
    }
    let s = inverseSqrt(workgroup_sum(l, ss) / f32(p.dim) + p.eps);
    for (var i = l; i < p.dim; i += WG) {
        let v = x[b + i] * s * w[i];
        y[b + i] = select(v, y[b + i] + v, p.acc == 1u);
    }
}
