// y[t, :] = dequantized row tokens[t] of an embedding table in any weight format, in the GPU layout
// the matmul reads (quant.wgsl, concatenated before this file), so one table serves as embeddings
// and tied output head. A table may be split by rows into parts (bindings): this dispatch writes
// the tokens whose row is in this part, r0 .. r0 + n, and leaves the others to their parts. Each
// value is multiplied by `scale` (Gemma's √width; 1 elsewhere, which leaves it exactly as it is).

struct Params {
    t: u32,      // tokens
    k: u32,      // embedding width (a multiple of 4 and of the block)
    n: u32,      // rows of this part
    w_row: u32,  // words a table row
    r0: u32,     // the part's first row
    scale: f32,  // multiplies every value
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> tokens: array<u32>;     // [T]
@group(0) @binding(2) var<storage, read> w: array<u32>;          // [n padded to G, w_row] interleaved
@group(0) @binding(3) var<storage, read_write> y: array<vec4<f32>>; // [T, k/4]

// One quad of y an invocation.
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let idx = gid.x + gid.y * nw.x * 64u;
    let k4n = p.k / 4u;
    if idx >= p.t * k4n {
        return;
    }
    let t = idx / k4n;
    let row = tokens[t];
    if row < p.r0 || row - p.r0 >= p.n {
        return;
    }
    y[idx] = w4(row_base(row - p.r0), idx % k4n) * p.scale;
}
