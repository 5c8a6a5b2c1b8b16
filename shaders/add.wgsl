// a[i] += b[i]: the residual connection.

struct Params {
    n: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> a: array<f32>;    // [n]
@group(0) @binding(2) var<storage, read> b: array<f32>;          // [n]

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = gid.x + gid.y * nw.x * 64u;
    if i < p.n {
        a[i] += b[i];
    }
}
