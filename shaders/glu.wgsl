// The gated activations of a fused gate|up projection, act(gate) · up: act = silu (SwiGLU: llama,
// Qwen, Phi-3) or GELU's tanh approximation (GeGLU: Gemma). One definition for the kernels that
// apply them: swiglu.wgsl, and the matmul kernels that fuse them (the matrix-vector x-load, XLOAD
// 2 and 3, and the tiled matmul's store, GLU), so a fused and an unfused pass give the same bits.

fn glu(g: f32, u: f32, gelu: bool) -> f32 {
    if gelu {
        return gelu_tanh(g) * u;
    }
    return g / (1.0 + exp(-g)) * u;
}

fn glu4(g: vec4<f32>, u: vec4<f32>, gelu: bool) -> vec4<f32> {
    return vec4<f32>(glu(g.x, u.x, gelu), glu(g.y, u.y, gelu), glu(g.z, u.z, gelu), glu(g.w, u.w, gelu));
}

// 0.5·v·(1 + tanh(√(2/π)·(v + 0.044715·v³))), saturated as ggml saturates it (v past ±10: v or 0),
// so that no tanh of a huge argument is asked of the adapter.
fn gelu_tanh(v: f32) -> f32 {
    if v >= 10.0 {
        return v;
    }
    if v <= -10.0 {
        return 0.0;
    }
    return 0.5 * v * (1.0 + tanh(0.7978845608028654 * v * (1.0 + 0.044715 * v * v)));
}
