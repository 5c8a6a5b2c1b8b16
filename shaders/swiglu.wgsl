// y[t, j] = act(x[t, j]) · x[t, F + j]: the gated activation of a fused gate|up projection, act =
// silu (SwiGLU: llama, Qwen, Phi-3) or the tanh approximation of GELU (GeGLU: Gemma).

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
    if p.gelu == 0u {
        y[idx] = g / (1.0 + exp(-g)) * u;
    } else {
        y[idx] = gelu(g) * u;
    }
}

// 0.5·v·(1 + tanh(√(2/π)·(v + 0.044715·v³))), saturated as ggml saturates it (v past ±10: v or 0),
// so that no tanh of a huge argument is asked of the adapter.
fn gelu(v: f32) -> f32 {
    if v >= 10.0 {
        return v;
    }
    if v <= -10.0 {
        return 0.0;
    }
    return 0.5 * v * (1.0 + tanh(0.7978845608028654 * v * (1.0 + 0.044715 * v * v)));
}
