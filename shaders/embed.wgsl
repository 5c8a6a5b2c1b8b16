// y[t, :] = dequantized row tokens[t] of a Q8_0 embedding table, in the interleaved GPU layout
// the matmul reads (src/model/quant.rs), so one table serves as embeddings and tied output head.

struct Params {
    t: u32,      // tokens
    dim: u32,    // embedding width (multiple of 32)
    vocab: u32,  // table rows
    w_row: u32,  // words a table row (9 · dim/32)
}

const G: u32 = 32u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> tokens: array<u32>;     // [T]
@group(0) @binding(2) var<storage, read> table: array<u32>;      // [vocab padded to G, w_row] interleaved
@group(0) @binding(3) var<storage, read_write> y: array<f32>;    // [T, dim]

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let idx = gid.x + gid.y * nw.x * 64u;
    if idx >= p.t * p.dim {
        return;
    }
    let t = idx / p.dim;
    let d = idx % p.dim;
    let row = min(tokens[t], p.vocab - 1u);
    let rb = (row / G) * p.w_row * G + row % G;
    let b = rb + (d / 32u) * 9u * G;
    let scale = unpack2x16float(table[b]).x;
    let q = table[b + (1u + (d % 32u) / 4u) * G];
    let v = bitcast<i32>(q << (24u - 8u * (d % 4u))) >> 24u;
    y[idx] = scale * f32(v);
}
