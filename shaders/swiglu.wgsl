// y[t, j] = act(x[t, j]) · x[t, F + j]: the gated activation of a fused gate|up projection, act =
// silu (SwiGLU: llama, Qwen, Phi-3) or the tanh approximation of GELU (GeGLU: Gemma), as glu.wgsl
// (prepended: ops/swiglu.rs) defines them. Prefill fuses it into the gate|up matmul where it can
// (ops::matmul_glu); this kernel is the rest.

struct Params {
    t: u32,    // tokens
    f: u32,    // FFN width (x rows hold 2F: gate then up)
    gelu: u32, // 0: silu; 1: GELU (tanh)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;          // [T, 2F]
@group(0) @binding(2) var<storage, read_write> y: array<f32>;    // [T, F]

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let idx = gid.x + gid.y * nw.x * 64u;
    if idx >= p.t * p.f {
        return;
    }
    let t = idx / p.f;
    let j = idx % p.f;
    let g = x[t * 2u * p.f + j];
    let u = x[t * 2u * p.f + p.f + j];
    y[idx] = glu(g, u, p.gelu == 1u);
}
