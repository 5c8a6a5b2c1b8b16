// RMSNorm of each head, in place (the QK-norm of Qwen3 and Gemma-3): for the `heads` heads of
// `hd` floats that start `off` floats into each of `t` rows (`row_stride` apart),
//   x[h, :] ← x[h, :] / sqrt(mean(x[h, :]²) + eps) · w     (w: [hd], shared by the heads)
// with the weight `w` for heads h < `split` and `w2` for the rest: Q's heads and K's heads of a
// Q|K|V row in one dispatch. A 64-lane workgroup per head, as shaders/rmsnorm.wgsl does a row
// (workgroup_sum.wgsl is concatenated before this).

struct Params {
    t: u32,
    heads: u32,
    row_stride: u32,
    off: u32,
    hd: u32,
    eps: f32,
    split: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>; // [T, row_stride]
@group(0) @binding(2) var<storage, read> w: array<f32>;       // [hd], heads before `split`
@group(0) @binding(3) var<storage, read> w2: array<f32>;      // [hd], the heads from `split`

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let r = wid.x + wid.y * nw.x;
    if r >= p.t * p.heads {
        return;
    }
    let h = r % p.heads;
    let b = (r / p.heads) * p.row_stride + p.off + h * p.hd;
    var ss = 0.0;
    for (var i = l; i < p.hd; i += WG) {
        ss += x[b + i] * x[b + i];
    }
    let s = inverseSqrt(workgroup_sum(l, ss) / f32(p.hd) + p.eps);
    // A workgroup is one head: the branch is uniform, and only its own weight is read.
    if h < p.split {
        for (var i = l; i < p.hd; i += WG) {
            x[b + i] = x[b + i] * s * w[i];
        }
    } else {
        for (var i = l; i < p.hd; i += WG) {
            x[b + i] = x[b + i] * s * w2[i];
        }
    }
}
