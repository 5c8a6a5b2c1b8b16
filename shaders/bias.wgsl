// A projection's bias, in place: x[t, i] += b[i] for each of `t` rows of `n` floats (Qwen2's
// Q|K|V bias, added to the fused projection's rows).

struct Params {
    t: u32, // rows
    n: u32, // floats a row (= bias length)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>; // [T, n]
@group(0) @binding(2) var<storage, read> b: array<f32>;       // [n]

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let idx = gid.x + gid.y * nw.x * 64u;
    if idx >= p.t * p.n {
        return;
    }
    x[idx] += b[idx % p.n];
}
